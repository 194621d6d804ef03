#!/usr/bin/env bash
# asyncpg with statement_cache_size=0 (as users are told to run it behind a
# transaction pooler) through onetrip in transaction mode, where a Parse of
# a text already described is answered without a server, and through
# PgBouncer in transaction mode, both with pools of BENCH_POOL_SIZE
# server connections. BENCH_CLIENTS connections each run BENCH_QUERIES
# queries of one text; rounds alternate the targets' order. Prints each
# target's median queries per second, onetrip's over PgBouncer's, and the
# Parses onetrip answered itself (SHOW POOLS parses_here).
#
#   bash bench/described.sh   # BENCH_ROUNDS=5 BENCH_CLIENTS=20 BENCH_QUERIES=500 BENCH_POOL_SIZE=5
#
# BENCH_PGBOUNCER: a PgBouncer binary other than the one on the PATH.
# Needs PostgreSQL's server binaries, python3 with asyncpg, and PgBouncer.
# Everything runs on loopback ports in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${BENCH_ROUNDS:-5}
CLIENTS=${BENCH_CLIENTS:-20}
QUERIES=${BENCH_QUERIES:-500}
POOL=${BENCH_POOL_SIZE:-5}
PGBOUNCER=${BENCH_PGBOUNCER:-pgbouncer}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
PIN=()

say "cargo build --release -p onetrip"
cargo build --release -p onetrip --bin onetrip >&2
ONETRIP="$TARGET_DIR/release/onetrip"

PG_PORT=$(free_port); OT=$(free_port); PGB=$(free_port)
make_work described-bench
pids=()
trap stop_all EXIT
start_pg "$PG_PORT" "max_connections = 100"

env ONETRIP_POOL_MODE=transaction ONETRIP_POOL_POOL_SIZE="$POOL" \
    "$ONETRIP" --upstream "127.0.0.1:$PG_PORT" --listen "127.0.0.1:$OT" \
    >"$WORK/onetrip.log" 2>&1 &
pids+=($!)
pgbouncer_ini "$PG_PORT" "$PGB" "pool_mode = transaction" "default_pool_size = $POOL" \
    "max_client_conn = 1000"
"${AS[@]}" "$PGBOUNCER" -q "$WORK/pgbouncer.ini" 2>"$WORK/pgbouncer.stderr" &
pids+=($!)
for port in "$OT" "$PGB"; do
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null && break
        sleep 0.1
    done
done

python3 bench/described.py "$PG_PORT" "$OT" "$PGB" "$ROUNDS" "$CLIENTS" "$QUERIES"
# SHOW POOLS: parses_here is its 15th column.
here=$("$BIN/psql" -X -qAt -F '|' -h 127.0.0.1 -p "$OT" -U postgres -d onetrip -c "SHOW POOLS" |
    awk -F'|' '{ n += $15 } END { print n + 0 }')
echo "  Parses answered by onetrip: $here"
