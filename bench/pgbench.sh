#!/usr/bin/env bash
# pgbench -S (simple and extended protocol, and simple with a new connection
# per transaction) direct, through onetrip and through PgBouncer (session
# mode), at -c 1, 8 and 32, in rounds of alternating order. onetrip keeps
# upstream connections for the next client ([upstream] reuse = true), as
# PgBouncer's session mode does. BENCH_BUSY_POLL=300us makes it poll for
# answers that long before sleeping ([upstream] busy_poll; default 0us,
# off): 'cpu us' shows what that costs.
# Prints the median TPS and average latency per target, with ratios to direct,
# and each proxy's own CPU time per transaction.
#
#   bash bench/pgbench.sh            # BENCH_SECONDS=8 BENCH_ROUNDS=4 BENCH_CLIENTS="1 8 32"
#
# Then one client's latency through each target, the targets taking turns
# query by query (bench-latency, BENCH_LATENCY_RUNS=30 runs of 2 s, 0 to
# skip; BENCH_LATENCY_BLOCK=B: B queries per turn, warm as under pgbench;
# BENCH_LATENCY_PAUSE_US=P: the client waits P us before each query):
# at -c 1 separate pgbench runs differ by more than the proxies do.
# There a second onetrip and a second PgBouncer join, ot-1use and pgb-1use,
# whose server connections serve one client each.
#
# BENCH_CPUS=0 runs everything (server, proxies, clients) on the CPUs listed
# (taskset -c): at -c 1 it takes out the cost of waking a process on another,
# idle CPU, which on some virtual machines is tens of microseconds and
# decides who wins more than the proxies' own work does.
#
# Needs PostgreSQL's server binaries and pgbench (apt-get install postgresql)
# and PgBouncer (apt-get install pgbouncer; installed here when missing and
# running as root). Everything runs on loopback ports in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN=${BENCH_SECONDS:-8}
ROUNDS=${BENCH_ROUNDS:-4}
CLIENTS=${BENCH_CLIENTS:-"1 8 32"}
MODES=${BENCH_MODES:-"simple extended connect"}
read -r -a targets <<<"${BENCH_TARGETS:-direct onetrip pgbouncer}"
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
need pgbouncer

BUSY_POLL=${BENCH_BUSY_POLL:-0us}
LATENCY_RUNS=${BENCH_LATENCY_RUNS:-30}
LATENCY_BLOCK=${BENCH_LATENCY_BLOCK:-1}
LATENCY_PAUSE=${BENCH_LATENCY_PAUSE_US:-0}
if [ -n "${BENCH_CPUS:-}" ]; then PIN=(taskset -c "$BENCH_CPUS"); else PIN=(); fi

say "cargo build --release -p onetrip"
cargo build --release -p onetrip --bin onetrip >&2
ONETRIP="$TARGET_DIR/release/onetrip"
if (( LATENCY_RUNS > 0 )); then
    cargo build --release -p onetrip-tests --bin bench-latency >&2
fi

PG_PORT=$(free_port); OT_PORT=$(free_port); PB_PORT=$(free_port); PB1_PORT=$(free_port)
OT1_PORT=$(free_port)

make_work bench
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    stop_pg
    rm -rf "$WORK"
}
trap cleanup EXIT

start_pg "$PG_PORT" "max_connections = 200" "shared_buffers = 256MB" "synchronous_commit = off"

say "onetrip on 127.0.0.1:$OT_PORT (busy_poll $BUSY_POLL)"
ONETRIP_LOG_LEVEL=warn ONETRIP_UPSTREAM_REUSE=true ONETRIP_UPSTREAM_BUSY_POLL="$BUSY_POLL" "${PIN[@]}" "$ONETRIP" --listen "127.0.0.1:$OT_PORT" \
    --upstream "127.0.0.1:$PG_PORT" 2>"$WORK/onetrip.log" &
pids+=($!)
OT_PID=$!
# Without reuse and without busy polling: each client gets a new server
# connection (for the latency comparison below, beside pgb-1use).
ONETRIP_LOG_LEVEL=warn "${PIN[@]}" "$ONETRIP" --listen "127.0.0.1:$OT1_PORT" --upstream "127.0.0.1:$PG_PORT" \
    2>"$WORK/onetrip-1use.log" &
pids+=($!)

say "PgBouncer (session mode) on 127.0.0.1:$PB_PORT"
pgbouncer_ini "$PG_PORT" "$PB_PORT" "default_pool_size = 40" "max_client_conn = 200" \
    "pidfile = $WORK/pgbouncer.pid"
"${PIN[@]}" "${AS[@]}" pgbouncer -q "$WORK/pgbouncer.ini" 2>/dev/null &
pids+=($!)
# The same, but each server connection serves one client and closes
# (server_lifetime = 0): for the one-client latency comparison below, where
# a pooled backend that earlier clients warmed up answers several
# microseconds sooner than a new one.
sed -e "s/^listen_port = .*/listen_port = $PB1_PORT/" -e "s/pgbouncer\.\(log\|pid\)/pgbouncer-1use.\1/" \
    "$WORK/pgbouncer.ini" >"$WORK/pgbouncer-1use.ini"
echo "server_lifetime = 0" >>"$WORK/pgbouncer-1use.ini"
[ "$(id -u)" = 0 ] && chown postgres: "$WORK"/pgbouncer-1use.ini
"${PIN[@]}" "${AS[@]}" pgbouncer -q "$WORK/pgbouncer-1use.ini" 2>/dev/null &
pids+=($!)

for p in $OT_PORT $OT1_PORT $PB_PORT $PB1_PORT; do
    for _ in $(seq 100); do "$BIN/pg_isready" -q -h 127.0.0.1 -p "$p" -d postgres -U postgres && break; sleep 0.1; done
done

# The proxies' own time on a CPU (all threads, from the scheduler's
# counters): what each costs per transaction, beside what the client sees.
PB_PID=$(cat "$WORK/pgbouncer.pid" 2>/dev/null || true)
declare -A PID=([direct]="" [onetrip]=$OT_PID [pgbouncer]=$PB_PID [pgb-1use]="")
cpu_ns() {
    [ -n "$1" ] && [ -d "/proc/$1" ] || { echo 0; return; }
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'
}

say "pgbench -i -s 10"
"$BIN/pgbench" -i -q -s 10 -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >/dev/null 2>&1

declare -A PORT=([direct]=$PG_PORT [onetrip]=$OT_PORT [pgbouncer]=$PB_PORT [pgb-1use]=$PB1_PORT [ot-1use]=$OT1_PORT)
RESULTS="$WORK/results.tsv"
: >"$RESULTS"
for round in $(seq "$ROUNDS"); do
    # Odd rounds run the targets in order, even rounds in reverse (ABC,
    # CBA): on these machines a run's place in the round moves its TPS by
    # a few percent, and this way each pair of targets runs in both orders
    # equally often (given an even number of rounds).
    if (( round % 2 )); then
        order=("${targets[@]}")
    else
        order=()
        for ((i = ${#targets[@]} - 1; i >= 0; i--)); do order+=("${targets[$i]}"); done
    fi
    for mode in $MODES; do
        for c in $CLIENTS; do
            j=$(( c < 2 ? c : 2 ))
            # connect: simple protocol, a new connection per transaction.
            flags=(-M "$mode")
            [ "$mode" = connect ] && flags=(-M simple -C)
            for t in "${order[@]}"; do
                before=$(cpu_ns "${PID[$t]}")
                out=$("${PIN[@]}" "$BIN/pgbench" -n -S "${flags[@]}" -c "$c" -j "$j" -T "$SECONDS_PER_RUN" \
                    -h 127.0.0.1 -p "${PORT[$t]}" -U postgres postgres 2>&1)
                tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
                lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
                txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
                cpu=$(( $(cpu_ns "${PID[$t]}") - before ))
                [ -n "$tps" ] || { echo "pgbench failed for $t:" >&2; echo "$out" >&2; exit 1; }
                printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$mode" "$c" "$t" "$tps" "$lat" \
                    "$(( ${txns:-0} > 0 ? cpu / txns : 0 ))" >>"$RESULTS"
                say "round $round $mode -c $c $t: $tps tps, $lat ms"
            done
        done
    done
done

python3 - "$RESULTS" "$ROUNDS" "$SECONDS_PER_RUN" "$BUSY_POLL" "${BENCH_CPUS:-}" <<'PY'
import collections, statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
runs = {}  # (mode, c, target, round) -> (tps, lat, proxy CPU ns per transaction)
for rnd, mode, c, t, tps, lat, cpu in rows:
    runs[(mode, int(c), t, int(rnd))] = (float(tps), float(lat), float(cpu))
med = statistics.median
nan = float("nan")
print(f"pgbench -S, {sys.argv[2]} rounds x {sys.argv[3]}s, medians; ratios are to direct")
print(f"onetrip: upstream.reuse = true, upstream.busy_poll = {sys.argv[4]}")
if sys.argv[5]:
    print(f"everything on CPUs {sys.argv[5]} (taskset)")
print("mode 'connect': simple protocol with a new connection per transaction (pgbench -C)")
print("'vs pgb': median over rounds of onetrip's TPS / PgBouncer's TPS in the same round;")
print("'+lat vs pgb': median over rounds of onetrip's added latency minus PgBouncer's (us);")
print("'vs pgb q1-q3': the middle half of the per-round TPS ratios (4 rounds or more)")
print("'cpu us': the proxy's own CPU time per transaction, all threads (median over rounds);")
print("'cpu vs pgb': median over rounds of onetrip's CPU per transaction / PgBouncer's")
print(f"{'mode':9} {'-c':>3} {'target':10} {'tps':>9} {'lat ms':>8} {'tps/dir':>8} {'lat/dir':>8} {'+lat us':>8} {'vs pgb':>7} {'+lat vs pgb':>11} {'vs pgb q1-q3':>13} {'cpu us':>7} {'cpu vs pgb':>10}")
order = {"simple": 0, "extended": 1, "connect": 2}
keys = sorted({(m, c) for m, c, _, _ in runs}, key=lambda k: (order.get(k[0], 3), k[1]))
for mode, c in keys:
    def series(t):
        return {r: v for (m, cc, tt, r), v in runs.items() if (m, cc, tt) == (mode, c, t)}
    direct = series("direct")
    d_tps = med([v[0] for v in direct.values()]) if direct else nan
    d_lat = med([v[1] for v in direct.values()]) if direct else nan
    for t in ("direct", "onetrip", "pgbouncer"):
        s = series(t)
        if not s:
            continue
        tps, lat = med([v[0] for v in s.values()]), med([v[1] for v in s.values()])
        extra = ""
        pgb = series("pgbouncer")
        if t == "onetrip" and pgb:
            paired = [r for r in s if r in pgb]
            ratios = sorted(s[r][0] / pgb[r][0] for r in paired)
            extra = f" {med(ratios):>7.3f}"
            # The middle half of the per-round ratios: how far the machine's
            # own noise moves them.
            if len(ratios) >= 4:
                q1, _, q3 = statistics.quantiles(ratios, n=4)
                spread = f"{q1:.3f}-{q3:.3f}"
            else:
                spread = "-"
            gap = med([(s[r][1] - pgb[r][1]) * 1000 for r in paired])
            extra += f" {gap:>11.1f}"
            extra += f" {spread:>13}"
        if t != "direct":
            extra = extra or f" {'':>7} {'':>11} {'':>13}"
            extra += f" {med([v[2] for v in s.values()]) / 1000:>7.1f}"
        if t == "onetrip" and pgb:
            cpu = [s[r][2] / pgb[r][2] for r in paired if pgb[r][2] > 0]
            extra += f" {med(cpu):>10.3f}" if cpu else f" {'-':>10}"
        print(f"{mode:9} {c:>3} {t:10} {tps:>9.0f} {lat:>8.3f} {tps/d_tps:>8.3f} {lat/d_lat:>8.3f} {(lat-d_lat)*1000:>8.1f}{extra}")
PY

if (( LATENCY_RUNS > 0 )); then
    for mode in $MODES; do
        [ "$mode" = connect ] && continue
        flag=(); [ "$mode" = extended ] && flag=(--extended)
        (( LATENCY_PAUSE > 0 )) && flag+=(--pause-us "$LATENCY_PAUSE")
        specs=()
        for t in "${targets[@]}"; do specs+=("$t=127.0.0.1:${PORT[$t]}"); done
        [[ " ${targets[*]} " == *" onetrip "* ]] && specs+=("ot-1use=127.0.0.1:$OT1_PORT")
        [[ " ${targets[*]} " == *" pgbouncer "* ]] && specs+=("pgb-1use=127.0.0.1:$PB1_PORT")
        say "bench-latency $mode: $LATENCY_RUNS runs of 2s"
        echo
        "${PIN[@]}" "$TARGET_DIR/release/bench-latency" --runs "$LATENCY_RUNS" --seconds 2 --block "$LATENCY_BLOCK" \
            "${flag[@]}" "${specs[@]}"
    done
fi
