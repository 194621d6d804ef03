#!/usr/bin/env bash
# Transaction pooling under many clients: pgbench at 200 clients through
# onetrip ([pool] mode = "transaction", pool_size 20), the same with
# [transactions] lazy_reads = true, and PgBouncer (pool_mode = transaction,
# default_pool_size 20), beside PostgreSQL itself at 20 clients (as many
# connections as the pools hold).
#
# Workloads (pgbench scale 10, initialised once):
#   tpcb-extended   TPC-B-like, -M extended
#   tpcb-prepared   TPC-B-like, -M prepared (PgBouncer only from 1.21, with
#                   max_prepared_statements; older ones print n/a)
#   select          -S, -M extended
#   select-simple   -S in the simple protocol (pgbench's default): every
#                   query's text differs by its literal
#   think           read-only transactions with 5 ms of client think time
#                   between two reads (a custom script, -M extended)
#
# Per row: TPS (without connection time), average latency, the TPS ratio to
# PgBouncer, and how the server's client backends were used: a separate
# direct psql samples pg_stat_activity every BENCH_SAMPLE_MS (50) and the
# means of active, idle-in-transaction and all backends are printed (the
# first BENCH_WARMUP seconds, logins and forks, left out). Each proxy is
# started afresh for each row and stopped after it, so the backends counted
# are that row's alone. Anything that went wrong (pgbench's exit status and
# error lines, the proxy's WARN/ERROR log lines, the server's ERROR/FATAL
# lines, a run that hung) is noted in the row and printed after the table;
# the other rows still run. pgbench -M prepared prepares each statement
# synchronously on its first use, blocking the other clients of its thread:
# with fewer threads than clients and fewer server connections than
# clients, those holding every connection mid-transaction can wait on the
# one blocked, and the run hangs at its start (BENCH_THREADS=$BENCH_CLIENTS
# avoids it).
#
#   bash bench/pooling.sh   # BENCH_SECONDS=15 BENCH_ROUNDS=1 BENCH_CLIENTS=200 BENCH_POOL_SIZE=20
#
# BENCH_DIRECT_CLIENTS (default: the pool size), BENCH_THREADS (pgbench -j,
# 4), BENCH_ONETRIP_THREADS (onetrip's [listen] threads; its default when
# unset), BENCH_PGBOUNCER (a PgBouncer binary, below), BENCH_PROXY_NICE (a
# scheduling priority for both proxies' threads, -10 say; below 0 needs
# root), BENCH_WORKLOADS and BENCH_TARGETS ("direct onetrip onetrip-lazy
# pgbouncer") change what runs; BENCH_ROUNDS > 1 alternates the targets'
# order and prints medians; BENCH_KEEP=1 keeps the work directory (logs,
# pgbench output). Not a test: it takes minutes and the machine. Needs
# PostgreSQL's server binaries and pgbench, and PgBouncer (installed when
# missing and running as root). Everything runs on loopback ports in a
# temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${BENCH_SECONDS:-15}
ROUNDS=${BENCH_ROUNDS:-1}
CLIENTS=${BENCH_CLIENTS:-200}
POOL=${BENCH_POOL_SIZE:-20}
DIRECT_CLIENTS=${BENCH_DIRECT_CLIENTS:-$POOL}
THREADS=${BENCH_THREADS:-4}
SCALE=${BENCH_SCALE:-10}
SAMPLE_MS=${BENCH_SAMPLE_MS:-50}
WARMUP=${BENCH_WARMUP:-1}
read -r -a workloads <<<"${BENCH_WORKLOADS:-tpcb-extended tpcb-prepared select select-simple think}"
read -r -a targets <<<"${BENCH_TARGETS:-direct onetrip onetrip-lazy pgbouncer}"
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
prepare_many_clients
ONETRIP="$TARGET_DIR/release/onetrip"

# BENCH_PGBOUNCER: another PgBouncer binary than the one on the PATH (one
# built from source, say, where the distribution's is older than 1.21).
PGBOUNCER=${BENCH_PGBOUNCER:-pgbouncer}
PGB_VERSION=$("$PGBOUNCER" --version | awk 'NR == 1 {print $2}')
# max_prepared_statements (named statements in transaction mode) came in 1.21.
if [ "$(printf '%s\n' 1.21 "$PGB_VERSION" | sort -V | head -1)" = 1.21 ]; then PGB_PREPARED=1; else PGB_PREPARED=0; fi

# The client limit onetrip starts with (config.toml holds the defaults):
# raised in the generated configuration when it would refuse some clients.
OT_LIMIT=$(sed -n 's/^max_client_connections = \([0-9]*\).*/\1/p' config.toml)
NEED_LIMIT=$(( CLIENTS + 10 ))
if (( ${OT_LIMIT:-0} < NEED_LIMIT )); then
    say "onetrip's max_client_connections (${OT_LIMIT:-unknown}) < $NEED_LIMIT: set to $NEED_LIMIT"
    OT_LIMIT_LINE="max_client_connections = $NEED_LIMIT"
else
    say "onetrip's max_client_connections = $OT_LIMIT allows $CLIENTS clients"
    OT_LIMIT_LINE=""
fi

PG_PORT=$(free_port); PROXY_PORT=$(free_port)
make_work pooling
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    stop_pg
    if [ -n "${BENCH_KEEP:-}" ]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

MAX_CONN=$(( DIRECT_CLIENTS > POOL ? DIRECT_CLIENTS : POOL ))
MAX_CONN=$(( MAX_CONN + 50 > 250 ? MAX_CONN + 50 : 250 ))
start_pg "$PG_PORT" "max_connections = $MAX_CONN" "shared_buffers = 256MB" "synchronous_commit = off"

psql_direct() { "$BIN/psql" -X -q -At -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres "$@"; }
# The backends a row counts: clients' (through a proxy or not), not the
# sampler's nor the asker's.
OURS="backend_type = 'client backend' AND pid <> pg_backend_pid() AND application_name <> 'bench-sampler'"

say "pgbench -i -s $SCALE"
"$BIN/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >/dev/null 2>&1

cat >"$WORK/think.sql" <<'SQL'
\set aid random(1, 100000 * :scale)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
\sleep 5 ms
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
COMMIT;
SQL

# onetrip_toml TARGET: its configuration; every key not written keeps its
# default.
onetrip_toml() {
    {
        echo "[listen]"
        echo "address = \"127.0.0.1:$PROXY_PORT\""
        [ -z "${BENCH_ONETRIP_THREADS:-}" ] || echo "threads = $BENCH_ONETRIP_THREADS"
        echo "[upstream]"
        echo "address = \"127.0.0.1:$PG_PORT\""
        echo "[pool]"
        echo "mode = \"transaction\""
        echo "pool_size = $POOL"
        if [ "$1" = onetrip-lazy ]; then
            echo "[transactions]"
            echo "lazy_reads = true"
        fi
        if [ -n "$OT_LIMIT_LINE" ]; then
            echo "[limits]"
            echo "$OT_LIMIT_LINE"
        fi
        echo "[log]"
        echo "level = \"warn\""
    } >"$WORK/$1.toml"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_target TARGET LOG: the proxy for TARGET on $PROXY_PORT, logging to LOG;
# sets PROXY_PID (empty for direct). A TCP connect, not pg_isready, tells it
# is up: a login would open a server connection that the sampler then counts.
PROXY_PID=""
start_target() {
    local t=$1 log=$2
    PROXY_PID=""
    case $t in
        direct) return 0 ;;
        onetrip|onetrip-lazy)
            onetrip_toml "$t"
            # The file alone decides: no ONETRIP_* from the caller's
            # environment.
            (
                for v in $(compgen -e | grep '^ONETRIP_' || true); do unset "$v"; done
                exec "$ONETRIP" --config "$WORK/$t.toml"
            ) >"$log" 2>&1 &
            PROXY_PID=$!
            ;;
        pgbouncer)
            local extra=()
            (( PGB_PREPARED )) && extra+=("max_prepared_statements = 200")
            pgbouncer_ini "$PG_PORT" "$PROXY_PORT" "default_pool_size = $POOL" "max_client_conn = 1000" \
                "pidfile = $WORK/pgbouncer.pid" "${extra[@]}"
            sed -i -e 's/^pool_mode = .*/pool_mode = transaction/' -e "s|^logfile = .*|logfile = $log|" \
                "$WORK/pgbouncer.ini"
            rm -f "$WORK/pgbouncer.pid"
            # Its log is its own file (it runs as postgres); what it says
            # before opening it goes beside.
            "${AS[@]}" sh -c "ulimit -n \$(ulimit -Hn) && exec $PGBOUNCER -q $WORK/pgbouncer.ini" 2>"$log.stderr" &
            PROXY_PID=$!
            ;;
        *) echo "unknown target $t" >&2; exit 1 ;;
    esac
    pids+=("$PROXY_PID")
    for _ in $(seq 100); do port_open "$PROXY_PORT" && { renice_proxy; return 0; }; sleep 0.1; done
    return 1
}

# renice_proxy: every thread of the running proxy at BENCH_PROXY_NICE, when
# set (the same for onetrip and PgBouncer). renice -p moves one thread on
# Linux, so each is named.
renice_proxy() {
    [ -n "${BENCH_PROXY_NICE:-}" ] || return 0
    local pid=$PROXY_PID t
    [ -s "$WORK/pgbouncer.pid" ] && pid=$(cat "$WORK/pgbouncer.pid")
    for t in /proc/"$pid"/task/*; do
        renice -n "$BENCH_PROXY_NICE" -p "${t##*/}" >/dev/null ||
            say "renice $BENCH_PROXY_NICE of thread ${t##*/} failed (needs root below 0)"
    done
}

# stop_target: stops the proxy and waits until the server has no client
# backends left but the asker, so the next row starts from none.
stop_target() {
    if [ -n "$PROXY_PID" ]; then
        local pid=$PROXY_PID
        # PgBouncer runs under runuser: signal PgBouncer itself.
        [ -s "$WORK/pgbouncer.pid" ] && pid="$(cat "$WORK/pgbouncer.pid") $PROXY_PID"
        # shellcheck disable=SC2086
        kill $pid 2>/dev/null || true
        for _ in $(seq 350); do kill -0 "$PROXY_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$PROXY_PID" 2>/dev/null || true
        wait "$PROXY_PID" 2>/dev/null || true
        rm -f "$WORK/pgbouncer.pid"
    fi
    for _ in $(seq 100); do
        [ "$(psql_direct -c "SELECT count(*) FROM pg_stat_activity WHERE $OURS")" = 0 ] && break
        sleep 0.1
    done
}

# One psql, one connection, for the whole run: a new one per sample would
# fork a backend each time and be counted.
SAMPLE_SQL="SELECT extract(epoch FROM clock_timestamp()), count(*), count(*) FILTER (WHERE state = 'active'),
 count(*) FILTER (WHERE state = 'idle in transaction')
 FROM pg_stat_activity WHERE $OURS"
start_sampler() {
    PGAPPNAME=bench-sampler "$BIN/psql" -X -q -At -F ' ' -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
        < <(printf '%s\n\\watch %s\n' "$SAMPLE_SQL" "$(awk -v ms="$SAMPLE_MS" 'BEGIN {printf "%.3f", ms / 1000}')") \
        >"$1" 2>&1 &
    SAMPLER_PID=$!
    pids+=("$SAMPLER_PID")
}
stop_sampler() { kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; }

# first_lines FILE PATTERN N: the first N distinct lines of FILE matching
# PATTERN, with their count.
first_lines() {
    local n
    n=$(grep -Ec "$2" "$1" 2>/dev/null || true)
    (( ${n:-0} > 0 )) || return 0
    echo "    $n lines matching /$2/, the first distinct ones:"
    grep -E "$2" "$1" | awk '!seen[$0]++' | head -"$3" | sed 's/^/      /' || true
}

RESULTS="$WORK/results.tsv"
REPORT="$WORK/failures.txt"
: >"$RESULTS"; : >"$REPORT"
LOADS=()

# run ROUND WORKLOAD TARGET: one pgbench run and its row in $RESULTS.
run() {
    local round=$1 w=$2 t=$3 c=$CLIENTS flags=() tag="$1-$2-$3"
    local out="$WORK/pgbench-$tag.txt" samples="$WORK/samples-$tag.txt" plog="$WORK/proxy-$tag.log"
    [ "$t" = direct ] && c=$DIRECT_CLIENTS
    case $w in
        tpcb-extended) flags=(-M extended) ;;
        tpcb-prepared) flags=(-M prepared) ;;
        select) flags=(-S -M extended) ;;
        select-simple) flags=(-S -M simple) ;;
        think) flags=(-f "$WORK/think.sql" -s "$SCALE" -M extended) ;;
        *) echo "unknown workload $w" >&2; exit 1 ;;
    esac
    if [ "$w" = tpcb-prepared ] && [ "$t" = pgbouncer ] && (( ! PGB_PREPARED )); then
        printf '%s\t%s\t%s\t%s\tn/a\t\t\t\t\t\t\tn/a (PgBouncer %s has no max_prepared_statements)\n' \
            "$round" "$w" "$t" "$c" "$PGB_VERSION" >>"$RESULTS"
        return 0
    fi
    # pgbench -n skips its own vacuum; done here, directly, for every target alike.
    if [[ $w == tpcb-* ]]; then
        psql_direct -c "VACUUM pgbench_branches" -c "VACUUM pgbench_tellers" -c "TRUNCATE pgbench_history" >/dev/null
    fi
    local port=$PROXY_PORT status=() pg_before
    [ "$t" = direct ] && port=$PG_PORT
    pg_before=$(stat -c %s "$WORK/pg.log")
    if ! start_target "$t" "$plog"; then
        status+=("proxy did not start")
        { echo "$w / $t: the proxy did not listen within 10 s"; cat "$plog" "$plog.stderr" 2>/dev/null | sed 's/^/      /'; } >>"$REPORT"
        stop_target
        printf '%s\t%s\t%s\t%s\t\t\t\t\t\t\t\t%s\n' "$round" "$w" "$t" "$c" "proxy did not start" >>"$RESULTS"
        return 0
    fi
    say "round $round $w $t: -c $c -j $THREADS -T $SECS"
    start_sampler "$samples"
    local start rc=0
    start=$(date +%s.%N)
    # A run that outlives -T by 30 s hangs: stopped, and said so.
    timeout $(( SECS + 30 )) "$BIN/pgbench" -n "${flags[@]}" -c "$c" -j "$THREADS" -T "$SECS" \
        -h 127.0.0.1 -p "$port" -U postgres postgres >"$out" 2>&1 || rc=$?
    stop_sampler
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    LOADS+=("$load")
    local alive=1
    [ -z "$PROXY_PID" ] || kill -0 "$PROXY_PID" 2>/dev/null || alive=0
    stop_target

    local tps lat failed
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$out" | head -1)
    lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$out" | head -1)
    failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out" | head -1)
    local util
    util=$(awk -v from="$(awk -v s="$start" -v w="$WARMUP" 'BEGIN {printf "%.3f", s + w}')" \
        -v to="$(awk -v s="$start" -v d="$SECS" 'BEGIN {printf "%.3f", s + d}')" \
        'NF == 4 && $1 >= from && $1 <= to {n++; tot += $2; act += $3; itx += $4}
         END {if (n) printf "%.1f\t%.1f\t%.1f\t%d", act / n, itx / n, tot / n, n; else printf "\t\t\t0"}' "$samples")

    (( rc == 124 )) && status+=("hung: pgbench stopped after $(( SECS + 30 ))s")
    (( rc != 0 && rc != 124 )) && status+=("pgbench exit $rc")
    (( ${failed:-0} > 0 )) && status+=("$failed failed txns")
    (( alive )) || status+=("proxy exited during the run")
    [ -n "$tps" ] || status+=("no tps")
    local proxy_issues=0 pg_issues
    if [[ $t == onetrip* ]]; then
        proxy_issues=$(grep -Ec '\b(WARN|ERROR)\b' "$plog" || true)
    elif [ "$t" = pgbouncer ]; then
        proxy_issues=$(grep -Ec '\b(WARNING|ERROR|FATAL)\b' "$plog" || true)
    fi
    (( proxy_issues > 0 )) && status+=("$proxy_issues proxy log lines")
    tail -c +$(( pg_before + 1 )) "$WORK/pg.log" >"$WORK/pg-$tag.log"
    pg_issues=$(grep -Ec '\b(ERROR|FATAL|PANIC):' "$WORK/pg-$tag.log" || true)
    (( pg_issues > 0 )) && status+=("$pg_issues server log errors")

    if (( ${#status[@]} )); then
        {
            echo "round $round, $w / $t (-c $c): ${status[*]}"
            first_lines "$out" '[Ee]rror|ERROR|FATAL|aborted|[Ff]ailed|could not' 8
            [ "$t" = direct ] || first_lines "$plog" '\b(WARN|WARNING|ERROR|FATAL)\b' 8
            first_lines "$WORK/pg-$tag.log" '\b(ERROR|FATAL|PANIC):' 8
        } >>"$REPORT"
    fi
    local joined
    joined=$(IFS=';'; echo "${status[*]}")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$w" "$t" "$c" "${tps}" "${lat}" "$util" \
        "$load	${joined:-ok}" >>"$RESULTS"
    say "  $t: ${tps:-?} tps, ${lat:-?} ms, active/idle-tx/total backends: $(cut -f1-3 <<<"$util" | tr '\t' '/'); ${joined:-ok}"
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
    # Even rounds run the targets in reverse: a run's place in its round
    # moves it by a few percent on a shared machine.
    order=("${targets[@]}")
    if (( round % 2 == 0 )); then
        order=()
        for ((i = ${#targets[@]} - 1; i >= 0; i--)); do order+=("${targets[$i]}"); done
    fi
    for w in "${workloads[@]}"; do
        for t in "${order[@]}"; do run "$round" "$w" "$t"; done
    done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$RESULTS" "$ROUNDS" "$SECS" "$CLIENTS" "$POOL" "$DIRECT_CLIENTS" "$SAMPLE_MS" "$WARMUP" "$PGB_VERSION" "${BENCH_PROXY_NICE:-}" <<'PY'
import statistics, sys
path, rounds, secs, clients, pool, direct, sample_ms, warmup, pgbv, nice = sys.argv[1:]
rows = {}
for line in open(path).read().splitlines():
    f = line.split("\t")
    f += [""] * (12 - len(f))
    rnd, w, t, c, tps, lat, act, itx, tot, n, load, status = f[:12]
    rows.setdefault((w, t), []).append(dict(c=c, tps=tps, lat=lat, act=act, itx=itx, tot=tot, n=n, load=load, status=status))

def med(rs, k):
    v = [float(r[k]) for r in rs if r[k] not in ("", "n/a")]
    return statistics.median(v) if v else None

def fmt(x, spec, width):
    return f"{x:{width}{spec}}" if x is not None else f"{'-':>{width}}"

print(f"pgbench, {rounds} round(s) x {secs}s; proxies: {clients} clients, pool {pool} (transaction mode); "
      f"direct: {direct} clients" + ("; medians over rounds" if int(rounds) > 1 else ""))
print(f"PgBouncer {pgbv}. 'vs pgb': TPS / PgBouncer's TPS for the same workload.")
if nice:
    print(f"Both proxies' threads at nice {nice}.")
print(f"Server backends: pg_stat_activity every {sample_ms} ms, the first {warmup}s left out; means of 'active',")
print("'idle in transaction' (idle tx) and all client backends (total); 'busy' = active / total.")
print(f"{'workload':14} {'target':13} {'-c':>4} {'tps':>9} {'lat ms':>8} {'vs pgb':>7} {'active':>7} {'idle tx':>7} "
      f"{'total':>6} {'busy':>6} {'load1':>6}  status")
seen_w = []
for w, _ in rows:
    if w not in seen_w:
        seen_w.append(w)
for w in seen_w:
    pgb = rows.get((w, "pgbouncer"))
    pgb_tps = med(pgb, "tps") if pgb else None
    for t in ("direct", "onetrip", "onetrip-lazy", "pgbouncer"):
        rs = rows.get((w, t))
        if not rs:
            continue
        status = "; ".join(dict.fromkeys(r["status"] for r in rs))
        if all(r["tps"] == "n/a" for r in rs):
            print(f"{w:14} {t:13} {rs[0]['c']:>4} {status}")
            continue
        tps, lat = med(rs, "tps"), med(rs, "lat")
        act, itx, tot, load = med(rs, "act"), med(rs, "itx"), med(rs, "tot"), med(rs, "load")
        ratio = tps / pgb_tps if (t != "direct" and tps is not None and pgb_tps) else None
        busy = act / tot * 100 if (act is not None and tot) else None
        busy_s = f"{busy:5.0f}%" if busy is not None else f"{'-':>6}"
        print(f"{w:14} {t:13} {rs[0]['c']:>4} {fmt(tps, '.0f', 9)} {fmt(lat, '.3f', 8)} {fmt(ratio, '.3f', 7)} "
              f"{fmt(act, '.1f', 7)} {fmt(itx, '.1f', 7)} {fmt(tot, '.1f', 6)} {busy_s} {fmt(load, '.2f', 6)}  {status}")
PY
echo "load average (1, 5, 15 min): $LOAD_START at the start, $LOAD_END at the end; 1 min after each run: ${LOADS[*]}"
if [ -s "$REPORT" ]; then
    echo
    echo "Failures and anomalies:"
    cat "$REPORT"
fi
