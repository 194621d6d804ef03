#!/usr/bin/env bash
# Named statements shared between clients, in transaction pooling: many
# asyncpg clients (each with its statement cache, asyncpg's default) run the
# same few texts on a small pool. Through onetrip a server connection holds
# each text once, whatever the clients named it; with [pool]
# share_statements = false each client's statement is made under its own
# name, so a connection holds one per client and text, up to
# max_prepared_statements, and Binds find theirs missing. PgBouncer 1.25.2
# in transaction mode with max_prepared_statements beside them. Rounds
# alternate the targets' order. Prints each target's median queries per
# second, and the Parses onetrip sent to make clients' statements again
# (SHOW POOLS statements_parsed_again) and spared (statements_shared).
#
#   bash bench/shared.sh   # BENCH_ROUNDS=3 BENCH_CLIENTS=100 BENCH_TEXTS=10 BENCH_QUERIES=200 BENCH_POOL_SIZE=5
#
# BENCH_PGBOUNCER: a PgBouncer binary other than the one on the PATH.
# Needs PostgreSQL's server binaries, python3 with asyncpg, and PgBouncer.
# Everything runs on loopback ports in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${BENCH_ROUNDS:-3}
CLIENTS=${BENCH_CLIENTS:-100}
TEXTS=${BENCH_TEXTS:-10}
QUERIES=${BENCH_QUERIES:-200}
POOL=${BENCH_POOL_SIZE:-5}
PGBOUNCER=${BENCH_PGBOUNCER:-pgbouncer}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
PIN=()
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

say "cargo build --release -p onetrip"
cargo build --release -p onetrip --bin onetrip >&2
ONETRIP="$TARGET_DIR/release/onetrip"

PG_PORT=$(free_port); OT=$(free_port); OTU=$(free_port); PGB=$(free_port)
make_work shared-bench
pids=()
trap stop_all EXIT
start_pg "$PG_PORT" "max_connections = 100"

for pair in "$OT true" "$OTU false"; do
    set -- $pair
    env ONETRIP_POOL_MODE=transaction ONETRIP_POOL_POOL_SIZE="$POOL" \
        ONETRIP_POOL_SHARE_STATEMENTS="$2" \
        "$ONETRIP" --upstream "127.0.0.1:$PG_PORT" --listen "127.0.0.1:$1" \
        >"$WORK/onetrip-$2.log" 2>&1 &
    pids+=($!)
done
pgbouncer_ini "$PG_PORT" "$PGB" "pool_mode = transaction" "default_pool_size = $POOL" \
    "max_client_conn = 1000" "max_prepared_statements = 200"
"${AS[@]}" "$PGBOUNCER" -q "$WORK/pgbouncer.ini" 2>"$WORK/pgbouncer.stderr" &
pids+=($!)
for port in "$OT" "$OTU" "$PGB"; do
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null && break
        sleep 0.1
    done
done

python3 bench/shared.py "$PG_PORT" "$OT" "$OTU" "$PGB" "$ROUNDS" "$CLIENTS" "$TEXTS" "$QUERIES"
# SHOW POOLS: statements_shared and statements_parsed_again are its 19th
# and 20th columns.
for pair in "$OT shared" "$OTU unshared"; do
    set -- $pair
    "$BIN/psql" -X -qAt -F '|' -h 127.0.0.1 -p "$1" -U postgres -d onetrip -c "SHOW POOLS" |
        awk -F'|' -v t="$2" '{ s += $19; p += $20 }
            END { printf "  onetrip %-8s statements shared %d, parsed again %d\n", t, s, p }'
done
