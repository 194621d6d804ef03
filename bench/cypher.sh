#!/usr/bin/env bash
# Compiled Cypher against Apache AGE's own cypher(), per query of the
# differential corpus (planner/tests/cypher_corpus/queries.txt) on its
# seeded graph (planner/tests/cypher_corpus/gen.rs) at BENCH_SCALE times
# the test's size (10: about 32k vertices and 60k edges), through two
# onetrips in front of one private PostgreSQL with AGE: one compiling, one
# with ONETRIP_PLANNER_CYPHER_REWRITE=false. Two settings: the graph as
# loaded (no indexes), then with a deployment's indexes (btree on id,
# start_id, end_id; gin on properties). Per query, first use on a fresh
# connection and warm on one connection (bench/cypher.py); per setting and
# measure, the geometric mean, the median and the queries surely below 1x.
#
#   bash bench/cypher.sh      # BENCH_SCALE=10 BENCH_FRESH=3 BENCH_ROUNDS=5 BENCH_MIN_SECONDS=0.3
#
# A measure whose ratio comes out below BENCH_NEAR (1.1) is confirmed on
# independent rounds on fresh connections (first use: one run per side;
# warm: BENCH_BATCH (10) runs per side after two untimed ones, their median
# paired ratio), the side going first alternating, added until the
# BENCH_CONFIDENCE (0.99) interval of the median round ratio (sign test)
# lies wholly below 1x or wholly at or above it, for at most
# BENCH_CONFIRM_ROUNDS (40) rounds or BENCH_CONFIRM_SECONDS (30) seconds per
# measure; a query counts as below 1x only when its interval is, and one
# whose interval still spans 1x is listed as unsure. So a busy machine's
# noise neither hides a loser nor makes one.
#
# The whole corpus takes about 45 minutes per setting on 2 busy CPUs;
# BENCH_ONLY=12,40 times those corpus lines alone; BENCH_SETTINGS=index
# (or noindex) one setting; BENCH_JSON=FILE appends per-query results;
# BENCH_ONETRIP=PATH times that onetrip binary instead of building one (an
# earlier build kept aside, for a before and after).
# Needs PostgreSQL 15's server binaries with AGE installed, python3 with
# psycopg 3 and cargo (it builds onetrip and the graph loader). Everything
# runs on loopback ports in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

SCALE=${BENCH_SCALE:-10}
FRESH=${BENCH_FRESH:-3}
ROUNDS=${BENCH_ROUNDS:-5}
MIN_SECONDS=${BENCH_MIN_SECONDS:-0.3}
NEAR=${BENCH_NEAR:-1.1}
CONFIDENCE=${BENCH_CONFIDENCE:-0.99}
BATCH=${BENCH_BATCH:-10}
CONFIRM_ROUNDS=${BENCH_CONFIRM_ROUNDS:-40}
CONFIRM_SECONDS=${BENCH_CONFIRM_SECONDS:-30}
ONLY=${BENCH_ONLY:-}
SETTINGS=${BENCH_SETTINGS:-noindex index}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

. bench/common.sh
PIN=()
[ -f "$BIN/../lib/age.so" ] || [ -f "$(dirname "$BIN")/lib/age.so" ] ||
    { echo "Apache AGE not installed for $BIN (age.so)" >&2; exit 1; }

onetrip_binary

PG_PORT=$(free_port); COMP=$(free_port); AGE=$(free_port)
make_work cypher-bench
pids=()
trap stop_all EXIT
start_pg "$PG_PORT" "max_connections = 50" "shared_buffers = 512MB" "work_mem = 16MB"

say "loading graph snb_diff at scale $SCALE"
ONETRIP_AGE_DSN="host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres" ONETRIP_DIFF_SCALE=$SCALE \
    cargo test --release -p onetrip-tests --test age_differential -- --ignored --exact load_bench_graph \
    --nocapture >&2
"$BIN/psql" -qAt -h 127.0.0.1 -p "$PG_PORT" -U postgres -c "VACUUM ANALYZE" postgres

# proxy PORT [VAR=VALUE...]: a onetrip on PORT with the settings given.
proxy() {
    local port=$1; shift
    env ONETRIP_LOG_LEVEL=warn "$@" "$ONETRIP" --upstream "127.0.0.1:$PG_PORT" --listen "127.0.0.1:$port" \
        >"$WORK/onetrip-$port.log" 2>&1 &
    pids+=($!)
    [ -n "$(listener_pid "$port" 100)" ] || { echo "onetrip did not listen on $port" >&2; exit 1; }
}
proxy "$COMP"
proxy "$AGE" ONETRIP_PLANNER_CYPHER_REWRITE=false

args=(--fresh "$FRESH" --rounds "$ROUNDS" --min-seconds "$MIN_SECONDS" --near "$NEAR" --confidence "$CONFIDENCE"
    --batch "$BATCH" --confirm-rounds "$CONFIRM_ROUNDS" --confirm-seconds "$CONFIRM_SECONDS")
[ -n "$ONLY" ] && args+=(--only "$ONLY")
[ -n "${BENCH_JSON:-}" ] && args+=(--json "$BENCH_JSON")
for s in $SETTINGS; do
    case $s in
    noindex) python3 bench/cypher.py "$PG_PORT" "$COMP" "$AGE" "$ONETRIP plan-cypher" --setting "no indexes" "${args[@]}" ;;
    index) python3 bench/cypher.py "$PG_PORT" "$COMP" "$AGE" "$ONETRIP plan-cypher" --setting "indexes" --index "${args[@]}" ;;
    *) echo "unknown setting $s (noindex, index)" >&2; exit 1 ;;
    esac
done
