#!/usr/bin/env bash
# Runs tokio-postgres's own integration tests (tests/test/ of the crate)
# against a private PostgreSQL 15 directly and through onetrip, and reports,
# per run, the pass/fail/skip counts and every test that passes directly but
# fails (or hangs) through onetrip -- run.sh's check for a third client.
#
# A manual check, not part of CI: the suite is third-party source, not in
# this repository.
#
#   bash tests/suites/tokio-postgres.sh TOKIO_POSTGRES_DIR [OUT_DIR]
#
# TOKIO_POSTGRES_DIR: the tokio-postgres crate of the version in Cargo.lock
#   (tokio-postgres/ of a rust-postgres checkout, or the crate's package as
#   cargo unpacks it, which has tests/ and a Cargo.lock); its test binary is
#   built with --all-features into CARGO_TARGET_DIR (default
#   /tmp/onetrip-suites-tokio-target), outside the source.
#
# The tests connect to 127.0.0.1:5433 and localhost:5433, hard-coded. So the
# runs happen in a network namespace of their own (unshare -n, root), where
# 5433 is free and nothing else is reachable: direct, the server listens on
# 5433; otherwise the server is on 5434 and onetrip on 5433 in front of it.
# The server is set up as the suite's docker/sql_setup.sh does (users
# pass_user, md5_user and scram_user with password "password", a pg_hba that
# asks them for it, the hstore, citext and ltree extensions; not its TLS,
# which these tests don't use), anew for each run.
#
# Environment: RUNS picks the ways in, as run.sh's (default "direct default
# lazy"; "pooled" and "pooled-lazy" are transaction pooling, pool_size 20,
# auth_user = "postgres", so the password users are pooled too); TIMEOUT
# (default 900) bounds each run in seconds, and a test without a result by
# then counts as hung; TEST_ARGS adds arguments to the test binary (a name
# filter, --test-threads=1, ...); ONETRIP_LOG_LEVEL=debug (or any other
# ONETRIP_* setting) reaches onetrip.
# Needs: /usr/lib/postgresql/15/bin, cargo, unshare and ip, python3.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=$(cd "${1:?usage: tokio-postgres.sh TOKIO_POSTGRES_DIR [OUT_DIR]}" && pwd)
out=${2:-$(mktemp -d /tmp/onetrip-suites-tokio.XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
pgbin=/usr/lib/postgresql/15/bin
bin=$root/target/release/onetrip

if [ -z "${SUITES_TOKIO_NETNS:-}" ]; then
    # Outside the namespace: build (crates may need downloading), then go in.
    if [ "${RUNS:-direct default lazy}" != direct ] && [ ! -x "$bin" ]; then
        (cd "$root" && cargo build --release -p onetrip)
    fi
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/onetrip-suites-tokio-target}
    testbin=$(cd "$src" && cargo test --all-features --test test --no-run --message-format=json |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "test" and m.get("executable"):
        print(m["executable"])')
    [ -x "$testbin" ] || { echo "no test binary built" >&2; exit 1; }
    rm -f "$out/times"
    SUITES_TOKIO_NETNS=1 TESTBIN=$testbin exec unshare -n bash "$0" "$src" "$out"
fi

ip link set lo up
testbin=$TESTBIN
as_pg=()
if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); fi
# shellcheck disable=SC2086
"$testbin" --list ${TEST_ARGS:-} >"$out/tokio-postgres.list" 2>/dev/null

pgdata=
server_start() { # PORT
    pgdata=$(mktemp -d /tmp/onetrip-suites-tokio-pg.XXXXXX)
    [ ${#as_pg[@]} = 0 ] || chown postgres "$pgdata"
    "${as_pg[@]}" "$pgbin/initdb" -D "$pgdata" -A trust -U postgres >>"$out/initdb.log"
    cat >"$pgdata/pg_hba.conf" <<-EOF
	host all pass_user  127.0.0.1/32 password
	host all md5_user   127.0.0.1/32 md5
	host all scram_user 127.0.0.1/32 scram-sha-256
	host all pass_user  ::1/128      password
	host all md5_user   ::1/128      md5
	host all scram_user ::1/128      scram-sha-256
	host all postgres   127.0.0.1/32 trust
	host all postgres   ::1/128      trust
	local all postgres               trust
	EOF
    "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/postgres.log" -w start -o \
        "-c listen_addresses=127.0.0.1 -p $1 -c unix_socket_directories=$pgdata -c max_connections=200" >/dev/null
    "$pgbin/psql" -h 127.0.0.1 -p "$1" -U postgres -v ON_ERROR_STOP=1 -q postgres <<-EOF
	CREATE ROLE pass_user PASSWORD 'password' LOGIN;
	CREATE ROLE md5_user PASSWORD 'password' LOGIN;
	SET password_encryption TO 'scram-sha-256';
	CREATE ROLE scram_user PASSWORD 'password' LOGIN;
	CREATE EXTENSION hstore;
	CREATE EXTENSION citext;
	CREATE EXTENSION ltree;
	EOF
}
server_stop() { # RUN
    "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true
    cp "$pgdata/postgres.log" "$out/postgres-$1.log" 2>/dev/null || true
    rm -rf "$pgdata"
}
onetrip_pid=
cleanup() {
    [ -z "$onetrip_pid" ] || kill "$onetrip_pid" 2>/dev/null || true
    [ -z "$pgdata" ] || server_stop aborted
}
trap cleanup EXIT

pooled=(ONETRIP_POOL_MODE=transaction ONETRIP_POOL_POOL_SIZE=20 ONETRIP_POOL_AUTH_USER=postgres)
read -r -a runs <<<"${RUNS:-direct default lazy}"
for run in "${runs[@]}"; do
    case $run in
    direct) settings=() ;;
    default) settings=(ONETRIP_TRANSACTIONS_LAZY_READS=false) ;;
    lazy) settings=(ONETRIP_TRANSACTIONS_LAZY_READS=true) ;;
    pooled) settings=(ONETRIP_TRANSACTIONS_LAZY_READS=false "${pooled[@]}") ;;
    pooled-lazy) settings=(ONETRIP_TRANSACTIONS_LAZY_READS=true "${pooled[@]}") ;;
    *) echo "unknown run $run (direct, default, lazy, pooled, pooled-lazy)" >&2; exit 2 ;;
    esac
    if [ "$run" = direct ]; then
        server_start 5433
    else
        server_start 5434
        env "${settings[@]}" "$bin" --listen 127.0.0.1:5433 --upstream 127.0.0.1:5434 \
            >"$out/onetrip-$run.log" 2>&1 &
        onetrip_pid=$!
        for _ in $(seq 50); do
            "$pgbin/psql" -h 127.0.0.1 -p 5433 -U postgres -qAtc 'select 1' postgres \
                >/dev/null 2>&1 && break
            sleep 0.1
        done
    fi
    start=$SECONDS
    # shellcheck disable=SC2086
    timeout "${TIMEOUT:-900}" "$testbin" ${TEST_ARGS:-} >"$out/tokio-postgres-$run.log" 2>&1 || true
    echo "tokio-postgres $run: $((SECONDS - start)) s" >>"$out/times"
    if [ -n "$onetrip_pid" ]; then
        kill "$onetrip_pid" 2>/dev/null || true
        wait "$onetrip_pid" 2>/dev/null || true
        onetrip_pid=
    fi
    server_stop "$run"
    pgdata=
    python3 "$here/compare.py" --libtest "$out/tokio-postgres-$run.log" \
        "$out/tokio-postgres.list" "$out/tokio-postgres-$run.xml"
done

python3 "$here/compare.py" tokio-postgres "$out"
cat "$out/times"
echo "logs and JUnit files: $out"
