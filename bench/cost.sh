#!/usr/bin/env bash
# What onetrip costs the machine, beside PgBouncer, in one run: user-space
# instructions per transaction (callgrind, bench/callgrind.sh; session mode,
# and transaction mode for simple and extended), system calls
# per transaction (strace -c over a fixed number of pgbench -S
# transactions, session and transaction mode), RSS at start, and RSS gained
# per idle client in both modes (BENCH_IDLE clients, default 1000, each
# logged in and having run one query: bench/idle_clients.py).
#
#   bash bench/cost.sh      # BENCH_TXNS=20000 BENCH_IDLE=1000 BENCH_PGBOUNCER=pgbouncer
#
# BENCH_SKIP_CALLGRIND=1 leaves the instruction counts out (the slowest
# part); BENCH_ONETRIP=PATH measures that onetrip binary instead of
# building one. Not a test: it takes minutes and the machine. Needs PostgreSQL's
# server binaries and pgbench, PgBouncer, strace and valgrind (installed
# when missing and running as root). Everything runs on loopback ports in
# a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

TXNS=${BENCH_TXNS:-20000}
IDLE=${BENCH_IDLE:-1000}
PGBOUNCER=${BENCH_PGBOUNCER:-pgbouncer}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
need strace
prepare_many_clients
command -v "$PGBOUNCER" >/dev/null || { echo "PgBouncer not found: $PGBOUNCER" >&2; exit 1; }

PG_PORT=$(free_port); PX_PORT=$(free_port)
make_work cost
proxy_pid=""; launcher=""
stop_proxy() {
    [ -n "$launcher" ] && kill "$launcher" 2>/dev/null || true
    [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null || true
    [ -n "$proxy_pid" ] && while kill -0 "$proxy_pid" 2>/dev/null; do sleep 0.1; done
    proxy_pid=""; launcher=""
}
cleanup() { stop_proxy; stop_pg; rm -rf "$WORK"; }
trap cleanup EXIT

start_pg "$PG_PORT" "max_connections = $(( IDLE + 100 ))" "shared_buffers = 128MB"
"$BIN/pgbench" -i -q -s 1 -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >/dev/null 2>&1

# start_proxy NAME MODE: onetrip or PgBouncer on $PX_PORT in session or
# transaction mode (pool of 20, as bench/pooling.sh); sets $proxy_pid.
start_proxy() {
    local name=$1 mode=$2
    if [ "$name" = onetrip ]; then
        ONETRIP_LOG_LEVEL=warn ONETRIP_POOL_MODE=$mode ONETRIP_POOL_POOL_SIZE=20 \
            ONETRIP_UPSTREAM_REUSE=true "$ONETRIP" --listen "127.0.0.1:$PX_PORT" \
            --upstream "127.0.0.1:$PG_PORT" 2>"$WORK/onetrip.log" &
        launcher=$!
    else
        pgbouncer_ini "$PG_PORT" "$PX_PORT" "max_client_conn = $(( IDLE * 2 ))" \
            "default_pool_size = $([ "$mode" = session ] && echo $(( IDLE + 20 )) || echo 20)"
        sed -i "s/^pool_mode = .*/pool_mode = $mode/" "$WORK/pgbouncer.ini"
        "${AS[@]}" sh -c "ulimit -n \$(ulimit -Hn) && exec $PGBOUNCER -q $WORK/pgbouncer.ini" 2>/dev/null &
        launcher=$!
    fi
    proxy_pid=$(listener_pid "$PX_PORT" 100)
    [ -n "$proxy_pid" ] || { echo "$name did not start" >&2; exit 1; }
    for _ in $(seq 100); do
        "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PX_PORT" -d postgres -U postgres && break
        sleep 0.1
    done
}

pgb() { "$BIN/pgbench" -n -S -h 127.0.0.1 -p "$PX_PORT" -U postgres "$@" postgres >/dev/null 2>&1; }

# syscalls NAME MODE: system calls per transaction of pgbench -S (4
# clients, $TXNS transactions in all), every thread of the proxy traced.
syscalls() {
    start_proxy "$1" "$2"
    pgb -c 4 -j 1 -t 200
    local tids
    tids=$(ls "/proc/$proxy_pid/task" | sed 's/^/-p /' | tr '\n' ' ')
    # shellcheck disable=SC2086
    strace -f -c -o "$WORK/strace.out" $tids 2>/dev/null &
    local st=$!
    sleep 1
    pgb -c 4 -j 1 -t $(( TXNS / 4 ))
    kill -INT "$st"; wait "$st" 2>/dev/null || true
    stop_proxy
    awk '$NF == "total" {print int($4 / '"$TXNS"' * 100 + 0.5) / 100}' "$WORK/strace.out"
}

# idle NAME MODE: "rss_at_start_kb bytes_per_idle_client".
idle() {
    start_proxy "$1" "$2"
    local out
    out=$(python3 bench/idle_clients.py "$PX_PORT" "$proxy_pid" "$IDLE")
    stop_proxy
    awk '{print $1, $3}' <<<"$out"
}

declare -A R
for name in onetrip pgbouncer; do
    for mode in session transaction; do
        say "$name, $mode mode: system calls over $TXNS transactions"
        R[$name.sys.$mode]=$(syscalls "$name" "$mode")
        say "$name, $mode mode: $IDLE idle clients"
        read -r start per <<<"$(idle "$name" "$mode")"
        R[$name.idle.$mode]=$per
        R[$name.start]=$start
    done
done

calls=""
if [ -z "${BENCH_SKIP_CALLGRIND:-}" ]; then
    say "instructions per transaction: bench/callgrind.sh, session mode"
    calls=$(BENCH_TXNS=$TXNS bash bench/callgrind.sh 2>/dev/null | awk 'NR > 2')
    # Transaction pooling's own: simple and extended (a connection per
    # transaction is the session mode's row).
    say "instructions per transaction: bench/callgrind.sh, transaction mode"
    calls+=$'\n'$(BENCH_TXNS=$TXNS BENCH_CONNECT_TXNS=50 BENCH_POOL_MODE=transaction \
        bash bench/callgrind.sh 2>/dev/null | awk 'NR > 2 && $1 != "connect" {$1 = $1 ", transaction mode"; print}')
fi

ratio() { python3 -c "print(f'{$1 / max($2, 1e-9):.2f}')"; }
row() { printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }
echo
echo "| cost | onetrip | PgBouncer | ratio |"
echo "|---|---|---|---|"
while read -r line; do
    [ -n "$line" ] || continue
    read -r -a f <<<"$line"
    # The mode is every field but the last three (onetrip, PgBouncer, ratio).
    n=${#f[@]}
    row "user-space instructions per transaction, ${f[*]:0:n-3}" "${f[n-3]}" "${f[n-2]}"
done <<<"$calls"
for mode in session transaction; do
    row "system calls per transaction, $mode mode" "${R[onetrip.sys.$mode]}" "${R[pgbouncer.sys.$mode]}"
done
for mode in session transaction; do
    row "RSS per idle client, $mode mode (bytes, $IDLE clients)" "${R[onetrip.idle.$mode]}" "${R[pgbouncer.idle.$mode]}"
done
row "RSS at start (kB)" "${R[onetrip.start]}" "${R[pgbouncer.start]}"
echo
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo), $(uname -sr); PgBouncer: $("$PGBOUNCER" --version 2>/dev/null | head -1)"
