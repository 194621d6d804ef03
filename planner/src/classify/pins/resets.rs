//! The reset each kind of statement calls for.

use super::Pins;
use crate::classify::reset::Reset::{self, Full, Sequences};

fn reset(sql: &str) -> Reset {
    Pins::of(sql).reset
}

fn all(cases: &[&str], want: Reset) {
    for sql in cases {
        assert_eq!(reset(sql), want, "{sql}");
    }
}

#[test]
fn reads_and_transaction_control_need_nothing() {
    all(
        &[
            "",
            ";;",
            "-- CREATE TABLE t (a int)\nSELECT 1",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 42",
            "BEGIN; SELECT 1; COMMIT",
            "start transaction isolation level serializable; rollback",
            "SAVEPOINT a; RELEASE a; ROLLBACK TO a; END; ABORT",
            "SHOW work_mem",
            "SET LOCAL statement_timeout = 5",
            "SET TRANSACTION READ ONLY",
            "FETCH 10 FROM c; MOVE 1 IN c; CLOSE c; CLOSE ALL",
            "LOCK TABLE t IN SHARE MODE",
            "VACUUM (VERBOSE, ANALYZE) t (a, b); ANALYZE t (a); CHECKPOINT",
            "REINDEX (VERBOSE) TABLE t; CLUSTER t USING i",
            "NOTIFY c, 'x'",
            "TRUNCATE t",
            "DELETE FROM t WHERE id IN (SELECT id FROM u)",
            "WITH d AS (DELETE FROM t RETURNING *) SELECT count(*) FROM d",
            "COPY t TO STDOUT",
            "COPY (SELECT a FROM t) TO STDOUT WITH (FORMAT csv)",
            "COPY t TO PROGRAM 'gzip > /tmp/x'",
            "VALUES (1), (now())",
            "TABLE t",
            "EXPLAIN UPDATE t SET a = 1",
            "EXPLAIN (FORMAT JSON) INSERT INTO t VALUES (1)",
            "EXPLAIN EXECUTE p",
            "EXPLAIN SELECT * FROM t",
            "DECLARE c CURSOR FOR SELECT 1",
            "PREPARE TRANSACTION 'x'; COMMIT PREPARED 'x'",
            "SELECT 'pg_temp.x', 'CALL p()', $$DO $x$ $x$$$, E'nextval(''s'')'",
            "SELECT $$CALL p()$$",
            "SELECT \"my col\" FROM \"My Table\" t WHERE t.a = $1",
            "SELECT t.f FROM t",
        ],
        Reset::None,
    );
}

/// Session state the pins follow is left to them.
#[test]
fn what_pins_is_left_to_the_pin() {
    all(
        &[
            "SET search_path = a",
            "SET ROLE x",
            "RESET ALL",
            "DISCARD ALL",
            "LISTEN a; UNLISTEN a",
            "SELECT pg_advisory_lock(1)",
            "SELECT set_config('a.b', 'c', false)",
            "CREATE TEMP TABLE t (a int, b varchar(10), c numeric(10, 2), PRIMARY KEY (a))",
            "CREATE TEMP TABLE t AS SELECT 1",
            "CREATE TABLE pg_temp.t (a int)",
            "CREATE INDEX i ON pg_temp.t USING btree (a)",
            "CREATE SEQUENCE pg_temp.s",
            "CREATE FUNCTION pg_temp.f(int) RETURNS int LANGUAGE sql AS 'select $1'",
            "SELECT 1 AS a INTO TEMP t",
            "SELECT 1 AS a INTO pg_temp.t",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "PREPARE p (int, text) AS INSERT INTO t VALUES ($1, $2)",
            "DEALLOCATE p",
        ],
        Reset::None,
    );
}

#[test]
fn writes_may_move_sequences() {
    all(
        &[
            "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 3",
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
             VALUES (1, 2, 3, 4, CURRENT_TIMESTAMP)",
            "INSERT INTO s.t AS x (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = excluded.a",
            "UPDATE t SET (a, b) = (1, 2)",
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET a = s.a \
             WHEN NOT MATCHED THEN INSERT (id, a) VALUES (s.id, s.a)",
            "COPY t (a, b) FROM STDIN WITH (FORMAT csv, FORCE_NOT_NULL (a))",
            "WITH x AS (INSERT INTO t VALUES (1) RETURNING id) SELECT * FROM x",
            "WITH x AS MATERIALIZED (SELECT 1) INSERT INTO t SELECT * FROM x",
            "EXPLAIN ANALYZE INSERT INTO t VALUES (1)",
            "EXPLAIN (ANALYZE, BUFFERS) UPDATE t SET a = 1",
            "BEGIN; UPDATE t SET a = 1; SELECT 1; COMMIT",
            "INSERT INTO pg_temp.t VALUES (1)",
            "INSERT INTO t VALUES (nextval('s'))",
        ],
        Sequences("DML"),
    );
    all(
        &[
            "SELECT nextval('s')",
            "SELECT pg_catalog.setval('s', 1)",
            "SELECT currval('s'), lastval(); SELECT \"nextval\"('s')",
            "SELECT * FROM t WHERE id = nextval('s')",
            // AGE takes the ids of what a Cypher write creates from
            // sequences.
            "SELECT * FROM cypher('g', $$ CREATE (n) RETURN n $$) AS (n agtype)",
            "SELECT * FROM ag_catalog.cypher('g', $$ MATCH (n) RETURN n $$) AS (n agtype)",
        ],
        Sequences("sequence function"),
    );
    assert_eq!(reset("SELECT currval('s'), lastval()"), Reset::None);
    assert_eq!(reset("SELECT app.nextval('s')"), Full("function call"));
}

#[test]
fn the_schema_changing_needs_the_full_reset() {
    all(
        &[
            "CREATE TABLE t (a int)",
            "create index on t (lower(a))",
            "ALTER TABLE t ADD COLUMN b int",
            "DROP TABLE t",
            "COMMENT ON TABLE t IS 'x'",
            "GRANT SELECT ON t TO u",
            "REVOKE ALL ON t FROM u",
            "SECURITY LABEL ON TABLE t IS 'x'",
            "REASSIGN OWNED BY a TO b",
            "IMPORT FOREIGN SCHEMA s FROM SERVER x INTO y",
            "REFRESH MATERIALIZED VIEW v",
            "ALTER ROLE x SET work_mem = '1MB'",
            "SELECT * INTO t2 FROM t",
            "CREATE TABLE t AS SELECT f()",
            "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
            "SELECT 1; CREATE TABLE t (a int); SELECT f()",
        ],
        Full("DDL"),
    );
}

#[test]
fn what_the_scan_cannot_see_into_needs_the_full_reset() {
    for (sql, why) in [
        (
            "DO $$ BEGIN CREATE TEMP TABLE t (a int); END $$",
            "DO block",
        ),
        ("CALL p()", "CALL"),
        ("call s.p(1, 'x')", "CALL"),
        ("EXECUTE p (1)", "EXECUTE"),
        ("EXPLAIN ANALYZE EXECUTE p", "EXECUTE"),
        ("EXECUTE p (pg_advisory_lock(1))", "EXECUTE"),
        ("CREATE TEMP TABLE t AS EXECUTE p", "EXECUTE"),
        (
            "CREATE TEMP TABLE t AS SELECT * FROM a JOIN b ON f(a.x)",
            "function call",
        ),
        ("LOAD 'auto_explain'", "LOAD"),
        ("FROBNICATE", "statement not read"),
        ("(SELECT 1)", "statement not read"),
        ("SELECT 'unterminated", "statement not read"),
        ("SELECT 1 /* unterminated", "statement not read"),
        ("SELECT \"unterminated", "statement not read"),
        ("UPDATE t SET a = 1; SELECT $$x", "statement not read"),
        (
            "SELECT 1; UPDATE pg_settings SET setting = '1'",
            "catalog DML",
        ),
        (
            "UPDATE pg_catalog.pg_settings SET setting = '1'",
            "catalog DML",
        ),
        ("INSERT INTO pg_catalog.pg_class VALUES (1)", "catalog DML"),
        ("DELETE FROM pg_description WHERE objoid = 1", "catalog DML"),
        ("COPY pg_description FROM STDIN", "catalog DML"),
        (
            "MERGE INTO pg_catalog.x USING s ON true WHEN MATCHED THEN DELETE",
            "catalog DML",
        ),
        (
            "WITH u AS (UPDATE pg_settings SET setting = 'x' RETURNING 1) SELECT 1",
            "catalog DML",
        ),
        ("SELECT my_fn()", "function call"),
        ("SELECT app.lower(a) FROM t", "function call"),
        ("SELECT \"S\".\"f\"(1)", "function call"),
        ("SELECT a.b.c(1)", "function call"),
        ("SELECT \"Lower\"(a) FROM t", "function call"),
        ("SELECT * FROM my_srf(1) AS x (a int)", "function call"),
        // An alias's columns right after a table name: taken for a call.
        ("SELECT * FROM t x (a)", "function call"),
        ("SELECT setseed(0.5)", "function call"),
        ("SELECT dblink_connect('c')", "function call"),
        ("SELECT pg_temp.f()", "function call"),
        ("UPDATE t SET a = my_fn(a)", "function call"),
        ("SELECT pg_advisory_lock(my_fn())", "function call"),
        ("SELECT set_config('a', 'b', false), f()", "function call"),
        ("SET x = 1; SELECT f()", "function call"),
        ("SELECT 1 WHERE a = ANY (f())", "function call"),
        ("SELECT x::vector(3), g(x)", "function call"),
        (
            "SELECT count(*) FROM t WHERE a IN (SELECT f(b) FROM u)",
            "function call",
        ),
        (
            "SELECT sum(a) OVER (PARTITION BY f(b)) FROM t",
            "function call",
        ),
        ("SELECT * FROM t AT TIME ZONE f(x)", "function call"),
        ("EXPLAIN SELECT f()", "function call"),
        ("PREPARE p AS SELECT f()", "function call"),
        ("DECLARE c CURSOR WITH HOLD FOR SELECT f()", "function call"),
        ("SELECT * FROM t JOIN f(1) ON true", "function call"),
        ("SELECT set(1)", "function call"),
        ("SELECT columns(1)", "function call"),
        ("SELECT ag_catalog.create_graph('g')", "function call"),
        (
            "SELECT public.cypher('g', $$ MATCH (n) RETURN n $$)",
            "function call",
        ),
    ] {
        assert_eq!(reset(sql), Full(why), "{sql}");
    }
}

/// Built-ins with no session state, and the places where a name before a
/// parenthesis is no call.
#[test]
fn built_ins_and_syntax_are_no_calls_to_fear() {
    all(
        &[
            "SELECT lower(a), pg_catalog.upper(b), count(*), now(), coalesce(sum(x), 0) FROM t",
            "SELECT \"lower\"(a) FROM t",
            "SELECT pg_sleep(1), pg_notify('c', 'x'), pg_backend_pid(), current_setting('x')",
            "SELECT pg_advisory_xact_lock(1), pg_try_advisory_xact_lock_shared(1, 2)",
            "SELECT txid_current(), pg_current_xact_id(), txid_current_snapshot()",
            "SELECT set_config('a.b', 'c', true)",
            "SELECT pg_cancel_backend(1), pg_terminate_backend(2), pg_stat_get_activity(1)",
            "SELECT pg_relation_size('t'), pg_size_pretty(1), pg_stat_reset()",
            "SELECT lo_open(1, 262144), loread(0, 10), lo_close(0)",
            "SELECT row_to_json(t), json_build_object('a', 1) FROM t",
            "SELECT ag_catalog.agtype_access_operator(a, b), ag_catalog._label_name(1, 2)",
            "SELECT _agtype_build_vertex(1, 'A', '{}'), age_id(v), agtype_to_json(a) FROM t",
            "SELECT 1 WHERE a IN (1, 2) AND EXISTS (SELECT 1) AND b = ANY (ARRAY[1])",
            "SELECT CAST(a AS varchar(10)), a::numeric(10, 2), a::character varying(3) FROM t",
            "SELECT a::timestamp(3), b::time(3) with time zone, c::bit(3), d::float(24)",
            "SELECT ROW(1, 2), ARRAY(SELECT 1), EXTRACT(epoch FROM now())",
            "SELECT substring('abc' FROM 1 FOR 2), trim(both 'x' FROM y), position('a' IN b)",
            "SELECT overlay('abc' PLACING 'x' FROM 1), nullif(a, b), greatest(1, 2), least(1, 2)",
            "SELECT xmlelement(name foo, xmlattributes(1 AS a)), xmlforest(a)",
            "SELECT count(*) FILTER (WHERE a > 1) OVER (PARTITION BY b) FROM t",
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY a) FROM t",
            "SELECT a FROM t GROUP BY GROUPING SETS ((a), ()), ROLLUP (a), CUBE (a)",
            "SELECT * FROM t TABLESAMPLE BERNOULLI (10) REPEATABLE (42)",
            "SELECT * FROM t JOIN u USING (id) LEFT JOIN (SELECT 1) s ON true",
            "SELECT * FROM (VALUES (1)) AS v (a), generate_series(1, 3) g (i)",
            "WITH RECURSIVE r (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r), s (m) AS (SELECT 2) \
             SELECT * FROM r, s",
            "SELECT CASE WHEN (a) THEN (b) ELSE (c) END FROM t LIMIT (5) OFFSET (1)",
            "SELECT a BETWEEN (1) AND (2), a IS DISTINCT FROM (1), a LIKE ('x') FROM t",
            "SELECT current_timestamp(3), localtime(2), current_date",
            "SELECT * FROM json_table('[]', '$' COLUMNS (a int PATH '$.a'))",
            "SELECT * FROM t WHERE a = 1 FOR UPDATE",
            "SELECT '[1,2]'::vector(2) <-> '[2,3]'::vector",
            "SELECT date_trunc('day', a) AT TIME ZONE ('UTC') FROM t",
            "SELECT * FROM (SELECT 1, 2) s (a, b), generate_series(1, 2) AS g (i)",
            "SELECT a OPERATOR(pg_catalog.+) b FROM t",
        ],
        Reset::None,
    );
}

#[test]
fn the_first_reason_of_the_strongest_level_is_kept() {
    assert_eq!(
        reset("UPDATE t SET a = 1; CALL p(); DO $$ $$"),
        Full("CALL")
    );
    assert_eq!(reset("CALL p(f())"), Full("CALL"));
    assert_eq!(reset("CREATE TABLE t AS SELECT f()"), Full("DDL"));
    assert_eq!(
        reset("SELECT f(); CREATE TABLE t (a int)"),
        Full("function call")
    );
    assert_eq!(
        reset("SELECT nextval('s'); INSERT INTO t VALUES (1)"),
        Sequences("sequence function")
    );
    assert_eq!(
        reset("INSERT INTO t VALUES (nextval('s'))"),
        Sequences("DML")
    );
}

#[test]
fn the_common_statements_allocate_nothing() {
    for sql in [
        "SELECT abalance FROM pgbench_accounts WHERE aid = 42",
        "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 3",
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 2, 3, 4, now())",
        "SELECT lower(a), count(*) FROM t WHERE b = $1 GROUP BY 1",
        "BEGIN",
        "SET search_path = a",
    ] {
        // The lists built on first use are not the statement's.
        let _ = Pins::of(sql);
        let (pins, allocations) = super::super::counting::allocations(|| Pins::of(sql));
        assert_eq!(allocations, 0, "{sql}: {pins:?}");
    }
}
