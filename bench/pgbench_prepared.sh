#!/usr/bin/env bash
# pgbench TPC-B-like with -M prepared, BENCH_CLIENTS clients (200), through
# onetrip and through PgBouncer, both in transaction mode with pools of
# BENCH_POOL_SIZE (20) server connections. pgbench prepares each statement
# synchronously on first use (Parse and Sync), so on few threads a thread
# that waits for a connection to prepare, while its other clients hold
# every connection mid-transaction, waits forever; onetrip answers a Parse
# of a text its pool's server parsed before with no connection. Runs:
# onetrip at -j 2 and -j BENCH_CLIENTS, PgBouncer at -j BENCH_CLIENTS (a
# thread per client, where it can't deadlock) and at -j 2, each for
# BENCH_SECONDS (20) and killed BENCH_GRACE (30) seconds past that if it
# has not ended. Prints each run's TPS, transactions done, and onetrip's
# TPS over PgBouncer's at -j BENCH_CLIENTS; rounds alternate the order.
#
#   bash bench/pgbench_prepared.sh  # BENCH_ROUNDS=2 BENCH_SECONDS=20 BENCH_CLIENTS=200 BENCH_POOL_SIZE=20
#
# BENCH_PGBOUNCER: a PgBouncer binary other than the one on the PATH.
# Needs PostgreSQL's server binaries, pgbench and PgBouncer. Everything
# runs on loopback ports in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${BENCH_ROUNDS:-2}
SECONDS_PER_RUN=${BENCH_SECONDS:-20}
GRACE=${BENCH_GRACE:-30}
CLIENTS=${BENCH_CLIENTS:-200}
POOL=${BENCH_POOL_SIZE:-20}
SCALE=${BENCH_SCALE:-20}
PGBOUNCER=${BENCH_PGBOUNCER:-pgbouncer}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
[ "$PGBOUNCER" = pgbouncer ] && need pgbouncer
PIN=()
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

say "cargo build --release -p onetrip"
cargo build --release -p onetrip --bin onetrip >&2
ONETRIP="$TARGET_DIR/release/onetrip"

PG_PORT=$(free_port); OT=$(free_port); PGB=$(free_port)
make_work pgbench-prepared
pids=()
trap stop_all EXIT
start_pg "$PG_PORT" "max_connections = 100" "shared_buffers = 256MB" "synchronous_commit = off"

ONETRIP_LOG_LEVEL=warn ONETRIP_POOL_MODE=transaction ONETRIP_POOL_POOL_SIZE="$POOL" \
    "$ONETRIP" --upstream "127.0.0.1:$PG_PORT" --listen "127.0.0.1:$OT" \
    >"$WORK/onetrip.log" 2>&1 &
pids+=($!)
pgbouncer_ini "$PG_PORT" "$PGB" "pool_mode = transaction" "default_pool_size = $POOL" \
    "max_client_conn = 1000" "max_prepared_statements = 200"
"${AS[@]}" "$PGBOUNCER" -q "$WORK/pgbouncer.ini" 2>"$WORK/pgbouncer.stderr" &
pids+=($!)
for p in "$OT" "$PGB"; do
    for _ in $(seq 100); do "$BIN/pg_isready" -q -h 127.0.0.1 -p "$p" -d postgres -U postgres && break; sleep 0.1; done
done

say "pgbench -i -s $SCALE"
"$BIN/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >/dev/null 2>&1

declare -A PORT=([onetrip]=$OT [pgbouncer]=$PGB)
RESULTS="$WORK/results.tsv"
: >"$RESULTS"
runs=("onetrip 2" "onetrip $CLIENTS" "pgbouncer $CLIENTS" "pgbouncer 2")
for round in $(seq "$ROUNDS"); do
    order=("${runs[@]}")
    if (( round % 2 == 0 )); then
        order=("${runs[1]}" "${runs[0]}" "${runs[3]}" "${runs[2]}")
    fi
    for run in "${order[@]}"; do
        read -r t j <<<"$run"
        # A deadlocked pgbench never reaches its -T check: killed instead.
        out=$(timeout -s KILL $((SECONDS_PER_RUN + GRACE)) "$BIN/pgbench" -n -M prepared \
            -c "$CLIENTS" -j "$j" -T "$SECONDS_PER_RUN" \
            -h 127.0.0.1 -p "${PORT[$t]}" -U postgres postgres 2>&1) && status=0 || status=$?
        tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
        txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
        if [ "$status" = 137 ]; then
            tps=0; txns="killed after $((SECONDS_PER_RUN + GRACE))s"
        fi
        printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$t" "$j" "${tps:-0}" "${txns:-none}" >>"$RESULTS"
        say "round $round $t -j $j: ${tps:-0} tps, transactions: ${txns:-none}"
    done
done

python3 - "$RESULTS" "$CLIENTS" "$POOL" "$SECONDS_PER_RUN" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
print(f"pgbench TPC-B-like -M prepared, -c {sys.argv[2]}, pool of {sys.argv[3]} "
      f"(transaction mode), -T {sys.argv[4]}; median TPS over rounds")
by = {}
for rnd, t, j, tps, txns in rows:
    by.setdefault((t, int(j)), []).append((float(tps), txns))
for (t, j), v in sorted(by.items()):
    tps = statistics.median(x[0] for x in v)
    print(f"  {t:10} -j {j:<4} {tps:>9.0f} tps   transactions: {', '.join(x[1] for x in v)}")
c = int(sys.argv[2])
ot = [x[0] for x in by.get(("onetrip", 2), [])]
pgb = [x[0] for x in by.get(("pgbouncer", c), [])]
if ot and pgb and statistics.median(pgb) > 0:
    print(f"  onetrip -j 2 / PgBouncer -j {c}: {statistics.median(ot) / statistics.median(pgb):.2f}x")
PY
