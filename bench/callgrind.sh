#!/usr/bin/env bash
# Instructions each proxy executes per transaction (valgrind's callgrind),
# onetrip against PgBouncer: a count that noisy, shared machines leave
# alone, where TPS at one client swings by 10% from run to run.
#
#   bash bench/callgrind.sh        # BENCH_TXNS=20000 BENCH_CONNECT_TXNS=2000 BENCH_PGBOUNCER=pgbouncer
#
# For each proxy, alone under callgrind (onetrip with one worker thread,
# both in session mode, or in BENCH_POOL_MODE=transaction with a pool of
# 20, both keeping server connections): pgbench -S
# -c 1 warms it up, the counters are zeroed, then BENCH_TXNS transactions
# in simple and extended protocol and BENCH_CONNECT_TXNS with a new
# connection each (-C) are counted. The count covers the proxy's user-space
# code only (its system calls are the same in number: 2 reads, 2 writes and
# 2 waits per query for both). BENCH_KEEP=1 keeps the temporary directory:
# the proxies' logs and the callgrind files, for callgrind_annotate.
#
# Needs PostgreSQL's server binaries, pgbench, PgBouncer and valgrind
# (apt-get install postgresql pgbouncer valgrind; the last two are installed
# when missing and running as root). Everything runs on loopback ports in a
# temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

TXNS=${BENCH_TXNS:-20000}
CONNECT_TXNS=${BENCH_CONNECT_TXNS:-2000}
POOL_MODE=${BENCH_POOL_MODE:-session}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
need pgbouncer valgrind
PGBOUNCER=${BENCH_PGBOUNCER:-pgbouncer}

# BENCH_ONETRIP=PATH measures that binary instead of building one.
onetrip_binary

PG_PORT=$(free_port); PX_PORT=$(free_port)

make_work callgrind
proxy_pid=""
cleanup() {
    [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null || true
    stop_pg
    if [ -n "${BENCH_KEEP:-}" ]; then echo "kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

PIN=()
start_pg "$PG_PORT"
"$BIN/pgbench" -i -q -s 1 -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >/dev/null 2>&1

pgbouncer_ini "$PG_PORT" "$PX_PORT" "default_pool_size = 20"
sed -i "s/^pool_mode = .*/pool_mode = $POOL_MODE/" "$WORK/pgbouncer.ini"

pgb() { "$BIN/pgbench" -n -S -c 1 -j 1 -h 127.0.0.1 -p "$PX_PORT" -U postgres "$@" postgres >/dev/null 2>&1; }

# Runs proxy $1 under callgrind; prints "mode instructions-per-transaction".
measure() {
    local name=$1 out="$WORK/callgrind.$1" as=()
    if [ "$name" = onetrip ]; then
        ONETRIP_LOG_LEVEL=warn ONETRIP_LISTEN_THREADS=1 ONETRIP_UPSTREAM_REUSE=true \
            ONETRIP_POOL_MODE=$POOL_MODE ONETRIP_POOL_POOL_SIZE=20 \
            valgrind --tool=callgrind --callgrind-out-file="$out" \
            "$ONETRIP" --listen "127.0.0.1:$PX_PORT" --upstream "127.0.0.1:$PG_PORT" 2>"$WORK/$name.stderr" &
    else
        as=("${AS[@]}")
        "${AS[@]}" valgrind --tool=callgrind --callgrind-out-file="$out" \
            "$PGBOUNCER" "$WORK/pgbouncer.ini" 2>"$WORK/$name.stderr" &
    fi
    # The process that listens (valgrind, not runuser in front of it).
    proxy_pid=$(listener_pid "$PX_PORT" 300)
    [ -n "$proxy_pid" ] || { echo "$name did not start under valgrind: see $WORK/$name.stderr" >&2; exit 1; }
    local n=0
    for mode in simple extended connect; do
        local flags=(-M simple) count=$TXNS
        [ "$mode" = extended ] && flags=(-M extended)
        [ "$mode" = connect ] && { flags=(-C); count=$CONNECT_TXNS; }
        pgb "${flags[@]}" -t 300
        "${as[@]}" callgrind_control -z "$proxy_pid" >/dev/null 2>&1
        pgb "${flags[@]}" -t "$count"
        "${as[@]}" callgrind_control -d "$proxy_pid" >/dev/null 2>&1
        n=$((n + 1))
        # Each dump goes to its own numbered file.
        local ir
        ir=$(awk '/^summary:/ {print $2}' "$out.$n" 2>/dev/null || echo 0)
        echo "$mode $((ir / count))"
    done
    kill -INT "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
    proxy_pid=""
}

say "onetrip under callgrind"
ot=$(measure onetrip)
say "PgBouncer under callgrind"
pb=$(measure pgbouncer)

echo "instructions per transaction (callgrind, user space; connect: per connection with its transaction)"
printf '%-9s %10s %10s %8s\n' mode onetrip pgbouncer ratio
while read -r mode o; do
    p=$(awk -v m="$mode" '$1 == m {print $2}' <<<"$pb")
    printf '%-9s %10d %10d %8.2f\n' "$mode" "$o" "$p" "$(python3 -c "print($o / max($p, 1))")"
done <<<"$ot"
