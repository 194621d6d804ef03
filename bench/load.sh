#!/usr/bin/env bash
# Load, bounded: BENCH_CLIENTS (1000) clients through onetrip, each running
# checked reads and read-write transactions on a row of its own for
# BENCH_SECONDS (120), with 20 clients reading a 16 MB result slowly and 50
# starting one and hanging up; halfway, the upstream server restarts once
# (pg_ctl restart -m fast). Then the same through PgBouncer (session mode;
# onetrip keeps server connections for the next client as PgBouncer does).
# Printed per target (tests/src/bin/bench-load.rs): transactions, errors
# by SQLSTATE, wrong answers (every client checks what it reads; there must
# be none), the proxy's peak RSS, its RSS per idle session and its CPU
# time during the run.
#
#   bash bench/load.sh        # BENCH_CLIENTS=1000 BENCH_SECONDS=120 BENCH_TARGETS="onetrip pgbouncer"
#
# BENCH_POOL_MODE=transaction runs both proxies in transaction mode with
# BENCH_POOL_SIZE (20) server connections; BENCH_PGBOUNCER names the
# PgBouncer binary; BENCH_ONETRIP=PATH runs that onetrip binary instead of
# building one (an earlier build kept aside, for a before and after). The file limit is raised to the hard limit, so that
# 10,000 clients can connect where the hard limit allows.
#
# Not a test: it takes minutes and the machine. Needs PostgreSQL's server
# binaries and PgBouncer (installed when missing and running as root).
# Everything runs on loopback ports in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

CLIENTS=${BENCH_CLIENTS:-1000}
MODE=${BENCH_POOL_MODE:-session}
POOL=${BENCH_POOL_SIZE:-20}
PGBOUNCER=${BENCH_PGBOUNCER:-pgbouncer}
SECS=${BENCH_SECONDS:-120}
SLOW=${BENCH_SLOW:-20}
DROPS=${BENCH_DROPOUTS:-50}
read -r -a targets <<<"${BENCH_TARGETS:-onetrip pgbouncer}"
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
prepare_many_clients
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cargo build --release -p onetrip-tests --bin bench-load >&2

PG_PORT=$(free_port); OT_PORT=$(free_port); PB_PORT=$(free_port)
make_work load
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    stop_pg
    rm -rf "$WORK"
}
trap cleanup EXIT

total=$(( CLIENTS + SLOW + DROPS + 50 ))
pool=$total
[ "$MODE" = transaction ] && pool=$POOL
start_pg "$PG_PORT" "max_connections = $(( pool * 2 + 50 ))" "shared_buffers = 128MB" "synchronous_commit = off"

# Server connections kept for the next client, as PgBouncer's session mode
# keeps them.
ONETRIP_LOG_LEVEL=warn ONETRIP_UPSTREAM_REUSE=true ONETRIP_POOL_MODE=$MODE ONETRIP_POOL_POOL_SIZE=$pool \
    ONETRIP_LIMITS_MAX_CLIENT_CONNECTIONS=$(( total * 2 )) "$ONETRIP" --listen "127.0.0.1:$OT_PORT" \
    --upstream "127.0.0.1:$PG_PORT" 2>"$WORK/onetrip.log" &
pids+=($!)
OT_PID=$!
pgbouncer_ini "$PG_PORT" "$PB_PORT" "default_pool_size = $pool" "max_client_conn = $(( total * 2 ))" \
    "pidfile = $WORK/pgbouncer.pid"
sed -i "s/^pool_mode = .*/pool_mode = $MODE/" "$WORK/pgbouncer.ini"
# runuser leaves PgBouncer the user's default descriptor limit (1024): a
# thousand clients and their server connections need more, up to the
# user's hard limit.
"${AS[@]}" sh -c "ulimit -n \$(ulimit -Hn) && exec $PGBOUNCER -q $WORK/pgbouncer.ini" 2>/dev/null &
pids+=($!)
for p in $OT_PORT $PB_PORT; do
    for _ in $(seq 100); do "$BIN/pg_isready" -q -h 127.0.0.1 -p "$p" -d postgres -U postgres && break; sleep 0.1; done
done
PB_PID=$(cat "$WORK/pgbouncer.pid" 2>/dev/null || echo 0)
declare -A PORT=([onetrip]=$OT_PORT [pgbouncer]=$PB_PORT)
declare -A PID=([onetrip]=$OT_PID [pgbouncer]=$PB_PID)

for t in "${targets[@]}"; do
    say "$t: $CLIENTS clients, $MODE mode, $SECS s, the upstream restarted halfway"
    LOAD_RESTART="${AS[*]} $BIN/pg_ctl -D $WORK/data -m fast -w restart -l $WORK/pg.log >/dev/null" \
        "$TARGET_DIR/release/bench-load" "${PORT[$t]}" "$PG_PORT" "${PID[$t]}" \
        "$CLIENTS" "$SECS" "$SLOW" "$DROPS" | sed "s/^/$t: /"
done
