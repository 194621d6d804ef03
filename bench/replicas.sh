#!/usr/bin/env bash
# Read replicas: a mixed workload (BENCH_CLIENTS asyncpg clients, 50, each
# on a row of its own: 90% reads, 10% writes, for BENCH_SECONDS, 10, per
# run) through onetrip with an embedded primary and one embedded streaming
# replica (upstream = "embedded", [replicas] embedded = 1), the replica
# applying each commit 0, 10 and 100 ms late (recovery_min_apply_delay,
# BENCH_DELAYS), with consistency = "read-your-writes" and "eventual"
# (which routes reads with no floor, as poolers that route reads do) side
# by side, and the primary alone for reference. Printed per run
# (bench/replicas.py): operations per second and their ratio to the
# primary alone, the share of reads a replica served, and stale reads (a
# client reading its own row back sees less than its last write).
# BENCH_MODE=transaction runs onetrip in transaction pooling ([pool] mode,
# its pool_size as configured, 20 by default) instead of session mode.
#
#   bash bench/replicas.sh    # BENCH_CLIENTS=50 BENCH_SECONDS=10 BENCH_DELAYS="0 10 100" BENCH_MODE=session
#
# Not a test: it takes the machine for a minute or two. Needs PostgreSQL's
# server binaries (pg_basebackup too), python3 with asyncpg, and cargo (it
# builds onetrip). Everything runs on loopback ports in temporary
# directories.
set -euo pipefail
cd "$(dirname "$0")/.."

CLIENTS=${BENCH_CLIENTS:-50}
SECS=${BENCH_SECONDS:-10}
read -r -a delays <<<"${BENCH_DELAYS:-0 10 100}"
MODE=${BENCH_MODE:-session}
case "$MODE" in
session | transaction) ;;
*) echo "BENCH_MODE is session or transaction, not $MODE" >&2; exit 2 ;;
esac
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
python3 -c "import asyncpg" 2>/dev/null ||
    { echo "python3 with asyncpg needed: pip install asyncpg" >&2; exit 1; }
say "cargo build --release -p onetrip"
cargo build --release -p onetrip --bin onetrip >&2
ONETRIP="$TARGET_DIR/release/onetrip"
LOG=$(mktemp /tmp/onetrip-replicas-bench.XXXXXX)

OT=""
cleanup() {
    [ -n "$OT" ] && kill "$OT" 2>/dev/null && wait "$OT" 2>/dev/null
    rm -f "$LOG" "$LOG.base"
}
trap cleanup EXIT

# start_onetrip REPLICAS CONSISTENCY: onetrip with an embedded primary and
# REPLICAS embedded replicas, on $PORT; waits until it serves.
start_onetrip() {
    PORT=$(free_port)
    say "onetrip on 127.0.0.1:$PORT: embedded primary, $1 replica(s), $2, $MODE mode"
    ONETRIP_LISTEN_ADDRESS=127.0.0.1:$PORT ONETRIP_UPSTREAM_ADDRESS=embedded \
        ONETRIP_REPLICAS_EMBEDDED=$1 ONETRIP_REPLICAS_CONSISTENCY=$2 \
        ONETRIP_POOL_MODE=$MODE "$ONETRIP" >>"$LOG" 2>&1 &
    OT=$!
    for _ in $(seq 1200); do
        "$BIN/psql" -qAt -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -c "select 1" \
            >/dev/null 2>&1 && return 0
        kill -0 "$OT" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
        sleep 0.1
    done
    echo "onetrip did not start" >&2; cat "$LOG" >&2; exit 1
}

stop_onetrip() {
    kill "$OT" 2>/dev/null || true
    wait "$OT" 2>/dev/null || true
    OT=""
}

echo "| apply delay | consistency | ops/s | vs primary alone | reads on the replica | stale reads |"
echo "|---|---|---|---|---|---|"
start_onetrip 0 read-your-writes
python3 bench/replicas.py "$PORT" "primary alone" "$CLIENTS" "$SECS" - 0 2>"$LOG.base"
base=$(sed -n 's/^BASE //p' "$LOG.base")
stop_onetrip
for consistency in read-your-writes eventual; do
    start_onetrip 1 "$consistency"
    python3 bench/replicas.py "$PORT" "$consistency" "$CLIENTS" "$SECS" \
        "$(IFS=,; echo "${delays[*]}")" "$base"
    stop_onetrip
done
