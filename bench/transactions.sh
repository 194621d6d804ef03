#!/usr/bin/env bash
# Short transactions as applications run them (psycopg 3 with autocommit off,
# SQLAlchemy 2's ORM; tests/py/tx_clients.py), through three onetrips in
# front of one private PostgreSQL, each adding 1 ms to every upstream round
# trip ([upstream] rtt), as a database in another zone would: one with
# deferred BEGIN, lazy reads and coalescing all off, one with the defaults,
# one with lazy_reads = true. Rounds alternate the targets' order; the
# medians and the speedups over "all off" are printed.
#
#   bash bench/transactions.sh      # BENCH_ROUNDS=7 BENCH_REQUESTS=200 BENCH_RTT=1ms
#
# Needs PostgreSQL's server binaries and python3 with psycopg and
# sqlalchemy. Everything runs on loopback ports in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${BENCH_ROUNDS:-7}
REQUESTS=${BENCH_REQUESTS:-200}
RTT=${BENCH_RTT:-1ms}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
PIN=()

say "cargo build --release -p onetrip"
cargo build --release -p onetrip --bin onetrip >&2
ONETRIP="$TARGET_DIR/release/onetrip"

PG_PORT=$(free_port); OFF=$(free_port); DEF=$(free_port); LAZY=$(free_port)
make_work tx-bench
pids=()
trap stop_all EXIT
start_pg "$PG_PORT" "max_connections = 50"

# proxy PORT [VAR=VALUE...]: a onetrip on PORT with the settings given.
proxy() {
    local port=$1; shift
    env ONETRIP_UPSTREAM_RTT="$RTT" "$@" \
        "$ONETRIP" --upstream "127.0.0.1:$PG_PORT" --listen "127.0.0.1:$port" \
        >"$WORK/onetrip-$port.log" 2>&1 &
    pids+=($!)
}
proxy "$OFF" ONETRIP_TRANSACTIONS_DEFER_BEGIN=false ONETRIP_COALESCE_SINGLE_READ=false
proxy "$DEF"
proxy "$LAZY" ONETRIP_TRANSACTIONS_LAZY_READS=true
for port in "$OFF" "$DEF" "$LAZY"; do
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null && break
        sleep 0.1
    done
done

python3 bench/transactions.py "$OFF" "$DEF" "$LAZY" "$ROUNDS" "$REQUESTS"
