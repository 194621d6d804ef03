#!/usr/bin/env bash
# Runs two client libraries' own test suites against a private PostgreSQL 15
# directly and through onetrip in the configurations RUNS names (by default
# its defaults and `[transactions] lazy_reads = true`; transaction pooling
# on request) and reports, per suite and run, the pass/fail/skip counts and
# every test that passes directly but fails through onetrip.
#
# A manual check, not part of CI: the suites are third-party sources that
# are not in this repository and must be checked out by hand beforehand, and
# they need pytest, their test dependencies and (for langgraph's vector store
# tests) the pgvector extension installed in PostgreSQL 15.
#
#   bash tests/suites/run.sh PSYCOPG_SRC LANGGRAPH_CHECKPOINT_POSTGRES_DIR [OUT_DIR]
#
# PSYCOPG_SRC: a checkout of psycopg 3 (its tests/ are run against the
#   installed psycopg package, not the checkout's).
# LANGGRAPH_CHECKPOINT_POSTGRES_DIR: libs/checkpoint-postgres of a langgraph
#   checkout (its tests/ are copied out and run against the installed
#   langgraph-checkpoint-postgres).
# Environment: RUNS picks the ways in (default "direct default lazy"; also
# "pooled": onetrip in transaction pooling, `[pool] mode = "transaction"`,
# pool_size 20, auth_user = "postgres", and "pooled-lazy": the same with
# `[transactions] lazy_reads = true`); PARALLEL=1 runs the configurations of
# a suite at once (each on its own database; faster, but timing-based tests
# get flakier); SUITES="psycopg langgraph" picks suites; PYTEST_ARGS adds
# pytest arguments; PSYCOPG_MARKERS selects psycopg's tests by marker
# (default "not refcount": those measure the Python heap with repeated
# gc.collect(), never differ through a proxy, and take hours on a small
# machine); ONETRIP_LOG_LEVEL=debug (or any other ONETRIP_* setting)
# reaches every onetrip started. How long each run took is printed at the
# end and kept in OUT_DIR/times. tokio-postgres's suite needs a fixed port
# and has a script of its own, tokio-postgres.sh beside this one.
# Needs: /usr/lib/postgresql/15/bin, python3 with pytest, pytest-timeout,
# anyio, pproxy, pytest-asyncio, pytest-mock, psycopg, psycopg-pool,
# langgraph-checkpoint-postgres and langgraph-checkpoint-conformance.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
psycopg_src=$(cd "${1:?usage: run.sh PSYCOPG_SRC LANGGRAPH_CHECKPOINT_POSTGRES_DIR [OUT_DIR]}" && pwd)
lg_src=$(cd "${2:?usage: run.sh PSYCOPG_SRC LANGGRAPH_CHECKPOINT_POSTGRES_DIR [OUT_DIR]}" && pwd)
out=${3:-$(mktemp -d /tmp/onetrip-suites.XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/times"
suites=${SUITES:-psycopg langgraph}
pgbin=/usr/lib/postgresql/15/bin

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

read -r -a runs <<<"${RUNS:-direct default lazy}"
bin=$root/target/release/onetrip
if [ "${runs[*]}" != direct ] && [ ! -x "$bin" ]; then
    (cd "$root" && cargo build --release -p onetrip)
fi

# A private PostgreSQL 15 on loopback, trust authentication.
pgdata=$(mktemp -d /tmp/onetrip-suites-pg.XXXXXX)
as_pg=()
if [ "$(id -u)" = 0 ]; then
    chown postgres "$pgdata"
    as_pg=(runuser -u postgres --)
fi
pgport=$(free_port)
"${as_pg[@]}" "$pgbin/initdb" -D "$pgdata" -A trust -U postgres >"$out/initdb.log"
trap 'rm -rf "$pgdata"' EXIT
"${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/postgres.log" -w start -o \
    "-c listen_addresses=127.0.0.1 -p $pgport -c unix_socket_directories=$pgdata -c max_connections=300 -c max_prepared_transactions=10" >/dev/null

pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true
    cp "$pgdata/postgres.log" "$out/" 2>/dev/null || true
    rm -rf "$pgdata"
}
trap cleanup EXIT

# The ways in: the server itself, onetrip with defaults, with lazy reads,
# and in transaction pooling without and with lazy reads. Only the ones in
# RUNS are started.
declare -A port
port[direct]=$pgport
pooled=(ONETRIP_POOL_MODE=transaction ONETRIP_POOL_POOL_SIZE=20 ONETRIP_POOL_AUTH_USER=postgres)
for run in "${runs[@]}"; do
    case $run in
    direct) continue ;;
    default) settings=(ONETRIP_TRANSACTIONS_LAZY_READS=false) ;;
    lazy) settings=(ONETRIP_TRANSACTIONS_LAZY_READS=true) ;;
    pooled) settings=(ONETRIP_TRANSACTIONS_LAZY_READS=false "${pooled[@]}") ;;
    pooled-lazy) settings=(ONETRIP_TRANSACTIONS_LAZY_READS=true "${pooled[@]}") ;;
    *) echo "unknown run $run (direct, default, lazy, pooled, pooled-lazy)" >&2; exit 2 ;;
    esac
    port[$run]=$(free_port)
    env "${settings[@]}" "$bin" --listen "127.0.0.1:${port[$run]}" \
        --upstream "127.0.0.1:$pgport" >"$out/onetrip-$run.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do
        "$pgbin/psql" -h 127.0.0.1 -p "${port[$run]}" -U postgres -qAtc 'select 1' postgres \
            >/dev/null 2>&1 && break
        sleep 0.1
    done
done
for run in "${runs[@]}"; do
    "$pgbin/psql" -h 127.0.0.1 -p "$pgport" -U postgres -qc "create database psycopg_test_${run//-/_}" postgres
    "$pgbin/psql" -h 127.0.0.1 -p "$pgport" -U postgres -qc "create database langgraph_test_${run//-/_}" postgres
done

psycopg_run() {
    local run=$1
    (cd "$psycopg_src" &&
        PSYCOPG_TEST_DSN="host=127.0.0.1 port=${port[$run]} user=postgres dbname=psycopg_test_${run//-/_}" \
            python3 -m pytest tests -p no:asyncio -p no:randomly -o "cache_dir=$out/cache-psycopg-$run" \
            -m "${PSYCOPG_MARKERS:-not refcount}" \
            --timeout=120 -q -rfE --junitxml="$out/psycopg-$run.xml" ${PYTEST_ARGS:-} \
            >"$out/psycopg-$run.log" 2>&1) || true
}

# langgraph's tests/conftest.py names a server on localhost:5441; the
# langgraph_dsn plugin points it at ours. The tests are copied out so that
# the installed package is the one imported, not the checkout's.
lgdir=$(mktemp -d /tmp/onetrip-suites-lg.XXXXXX)
cp -r "$lg_src/tests" "$lg_src/pyproject.toml" "$lgdir/"
langgraph_run() {
    local run=$1
    (cd "$lgdir" &&
        PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" LANGGRAPH_TEST_HOSTPORT="127.0.0.1:${port[$run]}" \
            LANGGRAPH_TEST_DBNAME="langgraph_test_${run//-/_}" \
            python3 -m pytest tests -p langgraph_dsn -o "cache_dir=$out/cache-langgraph-$run" \
            --timeout=120 -rfE --junitxml="$out/langgraph-$run.xml" ${PYTEST_ARGS:-} \
            >"$out/langgraph-$run.log" 2>&1) || true
}

timed() {
    local start=$SECONDS
    "${1}_run" "$2"
    echo "$1 $2: $((SECONDS - start)) s" >>"$out/times"
}
for suite in $suites; do
    if [ "${PARALLEL:-0}" = 1 ]; then
        jobs_=()
        for run in "${runs[@]}"; do timed "$suite" "$run" & jobs_+=($!); done
        wait "${jobs_[@]}"
    else
        for run in "${runs[@]}"; do timed "$suite" "$run"; done
    fi
done
rm -rf "$lgdir"

for suite in $suites; do
    python3 "$here/compare.py" "$suite" "$out"
done
cat "$out/times"
echo "logs and JUnit files: $out"
