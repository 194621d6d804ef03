# Shared by the benchmark scripts (sourced, not run): PostgreSQL's binaries,
# tools installed when missing, a work directory, a private server and a
# PgBouncer configuration, all on loopback.

say() { printf '==> %s\n' "$*" >&2; }

BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$BIN/initdb" ] || { echo "PostgreSQL server binaries not found: apt-get install postgresql" >&2; exit 1; }

# need TOOL...: installs each missing Debian package of that name (as root).
need() {
    for tool in "$@"; do
        command -v "$tool" >/dev/null && continue
        [ "$(id -u)" = 0 ] || { echo "$tool not found: apt-get install $tool" >&2; exit 1; }
        say "apt-get install -y $tool"
        apt-get install -y --no-install-recommends "$tool" >/dev/null ||
            { apt-get update >/dev/null; apt-get install -y --no-install-recommends "$tool" >/dev/null; }
    done
}

# A free port below the kernel's ephemeral range: a port from that range
# may be the local end of a benchmark client's connection, left in
# TIME_WAIT, and a proxy restarted on it then can't listen.
free_port() {
    python3 - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(10000, max(low, 10001))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
PY
}

# make_work NAME: a temporary directory in $WORK; $AS runs a command as the
# user PostgreSQL and PgBouncer run as (they refuse to run as root).
make_work() {
    WORK=$(mktemp -d "/tmp/onetrip-$1.XXXXXX")
    chmod 755 "$WORK"
    if [ "$(id -u)" = 0 ]; then AS=(runuser -u postgres --); chown postgres: "$WORK"; else AS=(); fi
}

# start_pg PORT [SETTING...]: initdb in $WORK/data and start the server
# (under ${PIN[@]}, if set) with the settings given, one per argument.
start_pg() {
    local port=$1; shift
    say "initdb, PostgreSQL on 127.0.0.1:$port"
    "${AS[@]}" "$BIN/initdb" -D "$WORK/data" -U postgres -A trust -E UTF8 --no-sync >/dev/null
    {
        echo "listen_addresses = '127.0.0.1'"
        echo "port = $port"
        echo "unix_socket_directories = '$WORK'"
        echo "fsync = off"
        printf '%s\n' "$@"
    } >>"$WORK/data/postgresql.conf"
    "${PIN[@]}" "${AS[@]}" "$BIN/pg_ctl" -D "$WORK/data" -l "$WORK/pg.log" -w start >/dev/null
}

# listener_pid PORT TRIES: the pid of the process listening on PORT (not a
# runuser or sh in front of it), waiting up to TRIES tenths of a second;
# nothing when none listens by then.
listener_pid() {
    local pid=""
    for _ in $(seq "$2"); do
        pid=$(ss -ltnpH | grep ":$1 " | sed -nE 's/.*pid=([0-9]+).*/\1/p' | head -1)
        [ -n "$pid" ] && break
        sleep 0.1
    done
    echo "$pid"
}

stop_pg() {
    [ -f "$WORK/data/postmaster.pid" ] && "${AS[@]}" "$BIN/pg_ctl" -D "$WORK/data" -m fast stop >/dev/null 2>&1 || true
}

# At exit (trap stop_all EXIT): the processes the script started in the
# background (each added to its array `pids`), the server, and $WORK.
stop_all() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    stop_pg
    rm -rf "$WORK"
}

# pgbouncer_ini PG_PORT LISTEN_PORT [SETTING...]: $WORK/pgbouncer.ini,
# session mode, trust for user postgres.
pgbouncer_ini() {
    local pg=$1 port=$2; shift 2
    {
        echo "[databases]"
        echo "postgres = host=127.0.0.1 port=$pg dbname=postgres"
        echo "[pgbouncer]"
        echo "listen_addr = 127.0.0.1"
        echo "listen_port = $port"
        echo "unix_socket_dir ="
        echo "auth_type = trust"
        echo "auth_file = $WORK/userlist.txt"
        echo "pool_mode = session"
        echo "logfile = $WORK/pgbouncer.log"
        printf '%s\n' "$@"
    } >"$WORK/pgbouncer.ini"
    echo '"postgres" ""' >"$WORK/userlist.txt"
    [ "$(id -u)" = 0 ] && chown postgres: "$WORK"/pgbouncer.ini "$WORK"/userlist.txt
    return 0
}

# prepare_many_clients: for the benchmarks with hundreds of clients:
# PgBouncer present, no CPU pinning, descriptors for them (runuser leaves
# PgBouncer 1024; max_client_conn = 1000 wants more), onetrip built.
prepare_many_clients() {
    need pgbouncer
    PIN=()
    ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
    onetrip_binary
}

# onetrip_binary: sets ONETRIP to BENCH_ONETRIP when given (an earlier
# build kept aside, for a before and after), else to a release build made
# now.
onetrip_binary() {
    if [ -n "${BENCH_ONETRIP:-}" ]; then
        ONETRIP=$BENCH_ONETRIP
        return
    fi
    say "cargo build --release -p onetrip"
    cargo build --release -p onetrip --bin onetrip >&2
    ONETRIP="${TARGET_DIR:-target}/release/onetrip"
}
