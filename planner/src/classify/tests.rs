//! The table of tricky statements: each with its expected class and a reason substring.

use super::*;
use IsolationChange as Iso;
use IsolationLevel::*;
use StatementClass::*;

const LANGGRAPH_GET: &str = "WITH passed_in AS (SELECT unnest($1::text[]) AS key), \
    updated AS (UPDATE store s SET expires_at = NOW() + (s.ttl_minutes || ' minutes')::interval \
    FROM passed_in p WHERE s.prefix = $2 AND s.key = p.key AND s.ttl_minutes IS NOT NULL \
    RETURNING s.key) \
    SELECT s.key, s.value, s.created_at, s.updated_at FROM store s \
    JOIN passed_in p ON s.key = p.key WHERE s.prefix = $3";

const LANGGRAPH_SEARCH: &str = "SELECT prefix, key, value, created_at, updated_at, \
    1 - (embedding <=> $1::vector) AS score FROM store \
    WHERE prefix LIKE $2 AND value @> $3::jsonb ORDER BY score DESC LIMIT $4 OFFSET $5";

/// (sql, class, reason substring)
const TABLE: &[(&str, StatementClass, &str)] = &[
    // plain reads
    ("select 1", Read, "SELECT"),
    ("select 1/0", Read, "SELECT"),
    ("SELECT * FROM t WHERE id = $1", Read, "SELECT"),
    ("VALUES (1), (2)", Read, "VALUES"),
    ("TABLE t", Read, "TABLE"),
    ("table only t", Read, "TABLE"),
    ("SHOW work_mem", Read, "SHOW"),
    ("show transaction_isolation", Read, "SHOW"),
    ("with x as (select 1) select * from x", Read, "SELECT"),
    (
        "with recursive r(n) as (select 1 union all select n + 1 from r where n < 5) select * from r",
        Read,
        "SELECT",
    ),
    (
        "select 1 union all select 2 except select 3",
        Read,
        "SELECT",
    ),
    (LANGGRAPH_SEARCH, Read, "SELECT"),
    (
        "select count(*) filter (where x > 1), row_number() over (partition by a order by b) from t group by a, b",
        Read,
        "SELECT",
    ),
    (
        "select coalesce(a, b), nullif(a, 0), greatest(1, 2), least(1, 2), now(), current_timestamp from t",
        Read,
        "SELECT",
    ),
    (
        "select lower(a), upper(b), length(c), substr(d, 1, 2), to_char(now(), 'YYYY'), date_trunc('day', ts) from t",
        Read,
        "SELECT",
    ),
    (
        "select jsonb_build_object('a', 1), jsonb_extract_path(v, 'a'), json_agg(t), array_agg(x), string_agg(y, ',') from t",
        Read,
        "SELECT",
    ),
    (
        "select * from generate_series(1, 3) g, unnest(array[1, 2]) with ordinality as u(x, n)",
        Read,
        "SELECT",
    ),
    (
        "select abs(-1), round(1.5), extract(year from now()), x::int, cast(y as text), interval '1 day'",
        Read,
        "SELECT",
    ),
    (
        "select pg_catalog.lower('A'), pg_catalog.count(*) from t",
        Read,
        "SELECT",
    ),
    ("select currval('s'), lastval()", Read, "SELECT"),
    (
        "select random(), pg_sleep(0.1), clock_timestamp()",
        Read,
        "SELECT",
    ),
    (
        "select txid_current_if_assigned(), pg_current_xact_id_if_assigned()",
        Read,
        "SELECT",
    ),
    (
        "select v ? 'a', v ->> 'b', v #>> '{a,b}', v @> '{}'::jsonb from t",
        Read,
        "SELECT",
    ),
    ("EXPLAIN SELECT * FROM t", Read, "EXPLAIN without ANALYZE"),
    ("explain delete from t", Read, "EXPLAIN without ANALYZE"),
    ("explain analyze select 1", Read, "EXPLAIN ANALYZE"),
    (
        "  -- leading comment\n /* block */ SELECT 1;",
        Read,
        "SELECT",
    ),
    ("", Read, "empty query"),
    (" ; -- nothing", Read, "empty query"),
    // cypher()
    (
        "select * from cypher('g', $$ MATCH (n) RETURN n $$) as (n agtype)",
        Read,
        "cypher",
    ),
    (
        "SELECT * FROM ag_catalog.cypher('g', $$ MATCH (a)-[r]->(b) WHERE a.name = 'CREATE' RETURN b $$, $1) AS t(b agtype)",
        Read,
        "cypher",
    ),
    (
        "select cypher('g', $$ MATCH (n) RETURN n $$)",
        Read,
        "cypher",
    ),
    (
        "select * from cypher('g', $$ CREATE (n:Person) RETURN n $$) as (n agtype)",
        Write,
        "cypher query contains CREATE",
    ),
    (
        "select * from cypher('g', $$ MATCH (n) DETACH DELETE n $$) as (n agtype)",
        Write,
        "DELETE",
    ),
    (
        "select * from cypher('g', $$ MATCH (n) SET n.x = 1 RETURN n $$) as (n agtype)",
        Write,
        "SET",
    ),
    (
        "select * from cypher('g', $$ MERGE (n {id: 1}) RETURN n $$) as (n agtype)",
        Write,
        "MERGE",
    ),
    (
        "select * from cypher('g', $$ MATCH (n) REMOVE n.x RETURN n $$) as (n agtype)",
        Write,
        "REMOVE",
    ),
    (
        "select * from cypher('g', $$ CALL db.labels() $$) as (n agtype)",
        Unsafe,
        "CALL",
    ),
    (
        "select * from cypher('g', $1) as (n agtype)",
        Unsafe,
        "not a literal",
    ),
    // data-modifying CTEs
    (LANGGRAPH_GET, MaybeWrite, "data-modifying CTE (UPDATE)"),
    (
        "with d as (delete from t where id = 1 returning *) select * from d",
        MaybeWrite,
        "data-modifying CTE (DELETE)",
    ),
    (
        "with i as (insert into t values (1) returning id) select id from i",
        MaybeWrite,
        "data-modifying CTE (INSERT)",
    ),
    (
        "with d as (delete from t returning *) select nextval('s') from d",
        Unsafe,
        "nextval",
    ),
    (
        "with x as (select 1) insert into t select * from x",
        Write,
        "INSERT",
    ),
    ("with x as (select 1) update t set a = 1", Write, "UPDATE"),
    // row locks, SELECT INTO
    ("select * from t for update", Write, "FOR UPDATE"),
    (
        "SELECT * FROM t FOR UPDATE OF t SKIP LOCKED",
        Write,
        "FOR UPDATE",
    ),
    ("select * from t for share", Write, "FOR SHARE"),
    ("select * from t for no key update", Write, "FOR UPDATE"),
    ("select * from t for key share nowait", Write, "FOR SHARE"),
    (
        "select * from (select * from t for update) s",
        Write,
        "FOR UPDATE",
    ),
    ("select * into t2 from t", Write, "SELECT INTO"),
    // side-effect and unknown functions, wherever they hide
    (
        "select set_config('x.y', '1', true)",
        Unsafe,
        "function set_config has side effects",
    ),
    (
        "select nextval('s')",
        Unsafe,
        "function nextval has side effects",
    ),
    ("select setval('s', 1)", Unsafe, "setval"),
    ("select pg_advisory_lock(1)", Unsafe, "advisory lock"),
    (
        "select pg_try_advisory_xact_lock(1)",
        Unsafe,
        "advisory lock",
    ),
    ("select pg_notify('c', 'x')", Unsafe, "pg_notify"),
    (
        "select * from dblink('conn', 'select 1') as t(a int)",
        Unsafe,
        "dblink",
    ),
    ("select lo_import('/tmp/x')", Unsafe, "lo_import"),
    ("select txid_current()", Unsafe, "assigns a transaction id"),
    (
        "select pg_current_xact_id()",
        Unsafe,
        "assigns a transaction id",
    ),
    (
        "select pg_terminate_backend(123)",
        Unsafe,
        "pg_terminate_backend",
    ),
    ("select setseed(0.5)", Unsafe, "setseed"),
    ("select my_fn()", Unsafe, "unknown function my_fn"),
    (
        "select public.lower('x')",
        Unsafe,
        "unknown function public.lower",
    ),
    ("select \"Lower\"('x')", Unsafe, "unknown function Lower"),
    ("select * from t where x = my_fn(1)", Unsafe, "my_fn"),
    (
        "select * from t where x in (select my_fn(y) from u)",
        Unsafe,
        "my_fn",
    ),
    (
        "select * from t, lateral my_srf(t.x) as y",
        Unsafe,
        "my_srf",
    ),
    ("select * from t order by my_fn(x)", Unsafe, "my_fn"),
    (
        "with c as (select my_fn()) select * from c",
        Unsafe,
        "my_fn",
    ),
    (
        "select exists(select 1 from t where my_fn(t.a))",
        Unsafe,
        "my_fn",
    ),
    ("select (select nextval('s'))", Unsafe, "nextval"),
    (
        "explain analyze select my_fn()",
        Unsafe,
        "EXPLAIN ANALYZE: unknown function my_fn",
    ),
    // writes
    ("insert into t values (1)", Write, "INSERT"),
    ("UPDATE t SET a = 1 WHERE id = $1", Write, "UPDATE"),
    ("delete from t", Write, "DELETE"),
    (
        "merge into t using s on t.id = s.id when matched then update set a = s.a",
        Write,
        "MERGE",
    ),
    ("copy t to stdout", Write, "COPY"),
    ("create table t (a int)", Write, "CREATE TABLE"),
    ("create table t2 as select * from t", Write, "CREATE TABLE"),
    ("alter table t add column b int", Write, "ALTER TABLE"),
    ("drop table t", Write, "DROP TABLE"),
    ("truncate t", Write, "TRUNCATE"),
    ("grant select on t to u", Write, "GRANT"),
    ("revoke select on t from u", Write, "REVOKE"),
    ("lock table t in access exclusive mode", Write, "LOCK"),
    ("call p()", Write, "CALL"),
    ("do $$ begin perform 1; end $$", Write, "DO"),
    ("vacuum t", Write, "VACUUM"),
    ("analyze t", Write, "ANALYZE"),
    ("cluster t", Write, "CLUSTER"),
    ("reindex table t", Write, "REINDEX"),
    ("comment on table t is 'x'", Write, "COMMENT"),
    (
        "explain analyze delete from t where id = 1",
        Write,
        "EXPLAIN ANALYZE: DELETE",
    ),
    (
        "explain (analyze, format json) insert into t values (1)",
        Write,
        "EXPLAIN ANALYZE",
    ),
    ("refresh materialized view mv", Write, "REFRESH"),
    // Every spelling PostgreSQL accepts for running the statement.
    ("EXPLAIN (ANALYSE) DELETE FROM t", Write, "EXPLAIN ANALYZE"),
    ("explain analyse delete from t", Write, "EXPLAIN ANALYZE"),
    (
        "EXPLAIN ANALYSE VERBOSE DELETE FROM t",
        Write,
        "EXPLAIN ANALYZE",
    ),
    (
        "explain analyze verbose delete from t",
        Write,
        "EXPLAIN ANALYZE",
    ),
    (
        "EXPLAIN (ANALYZE true) DELETE FROM t",
        Write,
        "EXPLAIN ANALYZE",
    ),
    (
        "EXPLAIN (ANALYZE on) DELETE FROM t",
        Write,
        "EXPLAIN ANALYZE",
    ),
    (
        "EXPLAIN (ANALYZE 1) DELETE FROM t",
        Write,
        "EXPLAIN ANALYZE",
    ),
    (
        "EXPLAIN (analyse yes) DELETE FROM t",
        Write,
        "EXPLAIN ANALYZE",
    ),
    (
        "EXPLAIN (\"analyze\") DELETE FROM t",
        Write,
        "EXPLAIN ANALYZE",
    ),
    (
        "EXPLAIN (costs off, \"analyse\" 'true') DELETE FROM t",
        Write,
        "EXPLAIN ANALYZE",
    ),
    (
        "EXPLAIN (format json, ANALYZE) DELETE FROM t",
        Write,
        "EXPLAIN ANALYZE",
    ),
    ("EXPLAIN (ANALYZE) EXECUTE w", Unsafe, "EXPLAIN ANALYZE"),
    // transaction control
    ("BEGIN", TransactionControl, "BEGIN"),
    (
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
        TransactionControl,
        "BEGIN",
    ),
    (
        "start transaction read only",
        TransactionControl,
        "START TRANSACTION",
    ),
    ("commit", TransactionControl, "COMMIT"),
    ("end", TransactionControl, "COMMIT"),
    ("rollback", TransactionControl, "ROLLBACK"),
    ("abort", TransactionControl, "ROLLBACK"),
    ("savepoint s1", TransactionControl, "SAVEPOINT"),
    ("release savepoint s1", TransactionControl, "RELEASE"),
    (
        "rollback to savepoint s1",
        TransactionControl,
        "ROLLBACK TO SAVEPOINT",
    ),
    (
        "prepare transaction 'x'",
        TransactionControl,
        "PREPARE TRANSACTION",
    ),
    ("commit prepared 'x'", TransactionControl, "COMMIT PREPARED"),
    (
        "rollback prepared 'x'",
        TransactionControl,
        "ROLLBACK PREPARED",
    ),
    (
        "set transaction isolation level serializable",
        TransactionControl,
        "SET TRANSACTION",
    ),
    ("select 1; commit", TransactionControl, "statement 2 of 2"),
    // session settings and other session-level statements
    ("set search_path to a, b", SessionSetting, "SET search_path"),
    (
        "SET LOCAL statement_timeout = '5s'",
        SessionSetting,
        "SET statement_timeout",
    ),
    ("set time zone 'UTC'", SessionSetting, "SET TIME ZONE"),
    ("set role r", SessionSetting, "SET ROLE"),
    (
        "set session characteristics as transaction isolation level repeatable read",
        SessionSetting,
        "SESSION CHARACTERISTICS",
    ),
    ("reset all", SessionSetting, "RESET"),
    ("discard all", SessionSetting, "DISCARD"),
    ("listen ch", SessionSetting, "LISTEN"),
    ("unlisten *", SessionSetting, "UNLISTEN"),
    ("prepare p as select 1", SessionSetting, "PREPARE"),
    ("deallocate all", SessionSetting, "DEALLOCATE"),
    ("declare c cursor for select 1", SessionSetting, "DECLARE"),
    ("close c", SessionSetting, "CLOSE"),
    ("LOAD 'age'", SessionSetting, "LOAD"),
    (
        "SET search_path = ag_catalog, \"$user\", public",
        SessionSetting,
        "SET search_path",
    ),
    (
        "create extension if not exists age",
        Write,
        "CREATE EXTENSION",
    ),
    ("notify ch, 'x'", Unsafe, "NOTIFY"),
    ("execute p(1)", Unsafe, "EXECUTE"),
    ("fetch 10 from c", Unsafe, "FETCH"),
    ("move c", Unsafe, "MOVE"),
    // not understood
    ("this is not sql", Unknown, "parse error"),
    ("select (", Unknown, "parse error"),
    ("select 'unterminated", Unknown, "parse error"),
    (
        "select * from rows from (f(1), g(2))",
        Unknown,
        "parse error",
    ),
    ("insert into", Unknown, "parse error"),
    ("select 1; garbage here", Unknown, "statement 2 of 2"),
];

#[test]
fn table_of_tricky_statements() {
    let mut failures = Vec::new();
    for (sql, class, reason) in TABLE {
        let c = classify(sql);
        if c.class != *class || !c.reason.contains(reason) {
            failures.push(format!(
                "{sql:?}\n    expected {class:?} / {reason:?}\n    got      {:?} / {:?}",
                c.class, c.reason
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        TABLE.len(),
        failures.join("\n")
    );
    assert!(TABLE.len() >= 60);
}

#[test]
fn extra_read_only_functions() {
    let c = Classifier::new(["my_fn", "app.\"Scoped\""]);
    assert_eq!(c.classify("select my_fn()").class, Read);
    assert_eq!(c.classify("select other.my_fn()").class, Read);
    assert_eq!(
        c.classify("select * from t, lateral MY_FN(t.x) y").class,
        Read
    );
    assert_eq!(c.classify("select app.\"Scoped\"()").class, Read);
    assert_eq!(c.classify("select \"Scoped\"()").class, Unsafe);
    assert_eq!(c.classify("select my_fn(), nextval('s')").class, Unsafe);
    // A side-effect function stays unsafe even if listed.
    let c = Classifier::new(["nextval"]);
    assert_eq!(c.classify("select nextval('s')").class, Unsafe);
}

#[test]
fn multi_statement() {
    let c = classify("select 1; select 2; ");
    assert_eq!((c.class, c.statement_count), (Read, 2));
    let c = classify("select 1; update t set a = 1; select nextval('s')");
    assert_eq!((c.class, c.statement_count), (Unsafe, 3));
    assert!(c.reason.contains("statement 3 of 3"), "{}", c.reason);
    // A semicolon inside a string, dollar quote, comment or parentheses doesn't split.
    let c = classify("select ';', $$;$$, $a$ ; $a$ /* ; */ -- ;\n");
    assert_eq!((c.class, c.statement_count), (Read, 1));
    let c = classify(
        "create function f() returns int language sql begin atomic select 1; \
         select case when true then 2 end; end; select 3",
    );
    assert_eq!(c.statement_count, 2);
    let c = classify(
        "create rule r as on insert to t do also (insert into u values (1); insert into v values (2))",
    );
    assert_eq!((c.class, c.statement_count), (Write, 1));
}

fn iso(sql: &str) -> Vec<IsolationChange> {
    classify(sql).isolation
}

#[test]
fn isolation_changes() {
    assert_eq!(
        iso("BEGIN ISOLATION LEVEL REPEATABLE READ"),
        [Iso::Transaction(RepeatableRead)]
    );
    assert_eq!(
        iso("start transaction isolation level serializable, read only"),
        [Iso::Transaction(Serializable)]
    );
    assert_eq!(
        iso("BEGIN ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE"),
        [Iso::Transaction(Serializable)]
    );
    assert_eq!(iso("begin"), []);
    assert_eq!(iso("begin read write"), []);
    assert_eq!(
        iso("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"),
        [Iso::Transaction(ReadCommitted)]
    );
    assert_eq!(
        iso("set session characteristics as transaction isolation level repeatable read"),
        [Iso::Session(RepeatableRead)]
    );
    assert_eq!(
        iso("SET default_transaction_isolation = 'serializable'"),
        [Iso::Session(Serializable)]
    );
    assert_eq!(
        iso("SET default_transaction_isolation TO serializable"),
        [Iso::Session(Serializable)]
    );
    assert_eq!(
        iso("set session default_transaction_isolation to 'read committed'"),
        [Iso::Session(ReadCommitted)]
    );
    assert_eq!(
        iso("SET LOCAL default_transaction_isolation = 'repeatable read'"),
        [Iso::Transaction(RepeatableRead)]
    );
    assert_eq!(
        iso("set default_transaction_isolation to default"),
        [Iso::SessionDefault]
    );
    assert_eq!(
        iso("set transaction_isolation = 'serializable'"),
        [Iso::Transaction(Serializable)]
    );
    assert_eq!(
        iso("RESET default_transaction_isolation"),
        [Iso::SessionDefault]
    );
    assert_eq!(iso("reset all"), [Iso::SessionDefault]);
    assert_eq!(iso("DISCARD ALL"), [Iso::SessionDefault]);
    assert_eq!(iso("discard plans"), []);
    assert_eq!(
        iso("set default_transaction_isolation = 'bogus'"),
        [Iso::Unknown]
    );
    assert_eq!(iso("set search_path = a"), []);
    assert_eq!(
        iso("select set_config('default_transaction_isolation', 'serializable', false)"),
        [Iso::Session(Serializable)]
    );
    assert_eq!(
        iso("select set_config('transaction_isolation', 'repeatable read', true)"),
        [Iso::Transaction(RepeatableRead)]
    );
    assert_eq!(iso("select set_config($1, $2, false)"), [Iso::Unknown]);
    assert_eq!(iso("select set_config('x.y', '1', false)"), []);
    assert_eq!(
        iso("alter system set default_transaction_isolation = 'serializable'"),
        [Iso::Unknown]
    );
    assert_eq!(iso("show transaction_isolation"), []);
    assert_eq!(iso("select current_setting('transaction_isolation')"), []);
    assert_eq!(
        iso("begin; set transaction isolation level serializable; select 1; commit; reset all"),
        [Iso::Transaction(Serializable), Iso::SessionDefault]
    );
}

#[test]
fn no_panic_on_odd_input() {
    let deep = format!("select {}1{}", "(".repeat(5000), ")".repeat(5000));
    let long = "select 1".to_string() + &" + 1".repeat(200_000);
    let unions = "select 1".to_string() + &" union all select 1".repeat(100_000);
    let wide = "select x from t where ".to_string() + &"a = 1 and ".repeat(200_000) + "true";
    for sql in [
        "\0",
        "$",
        "$$",
        "$a$ unterminated",
        "'",
        "\"",
        "/* unterminated",
        "e'\\",
        "u&",
        "ß';",
        "select 'é' || \"ü\" from ☃",
        ")",
        ") as (",
        "table",
        "for no key",
        deep.as_str(),
        long.as_str(),
        wide.as_str(),
        unions.as_str(),
    ] {
        let c = classify(sql);
        assert!(
            c.class != Read || sql.trim().is_empty() || sql.starts_with("select"),
            "{sql:?}: {c:?}"
        );
    }
}

#[test]
fn functions_are_found_in_every_clause() {
    for sql in [
        "select 1 limit my_fn()",
        "select 1 offset my_fn()",
        "select 1 fetch first my_fn() rows only",
        "select a from t group by my_fn(a)",
        "select a from t group by a having my_fn(a)",
        "select sum(a) over w from t window w as (order by my_fn(a))",
        "select my_fn() over ()",
        "select count(*) filter (where my_fn()) from t",
        "select string_agg(x, ',' order by my_fn(x)) from t",
        "select percentile_cont(0.5) within group (order by my_fn(x)) from t",
        "select distinct on (my_fn(a)) a from t",
        "select x from t where x = any(my_fn())",
        "select x from t where x between my_fn() and 2",
        "select x from t where x in (1, my_fn())",
        "select x from t where (a, b) = (my_fn(), 1)",
        "select x from t where x like my_fn()",
        "select x from t where my_fn() is null",
        "select case when my_fn() then 1 else 2 end",
        "select case my_fn() when 1 then 2 end",
        "select array[my_fn()], row(my_fn()), (my_fn()).x",
        "select a[my_fn()], a[1:my_fn()] from t",
        "select 1 where exists (select my_fn())",
        "select * from t join u on my_fn(t.a, u.b)",
        "select * from t left join lateral my_fn(t.a) f on true",
        "select * from t, lateral (select my_fn(t.a)) x",
        "select * from (values (my_fn())) v",
        "values (1), (my_fn())",
        "select * from t tablesample bernoulli (my_fn())",
        "select x::int + my_fn() from t",
        "select coalesce(a, my_fn()) from t",
        "select extract(year from my_fn())",
        "select substring(my_fn() from 1 for 2)",
        "select trim(both from my_fn())",
        "select my_fn() at time zone 'UTC'",
        "select a collate \"C\" from t order by my_fn(a) desc nulls last",
        "select 1 union select my_fn()",
        "with recursive r as (select 1 union all select my_fn() from r) select * from r",
        "select * from t where a = (select max(my_fn(b)) from u)",
        "select * from cypher('g', $$ MATCH (n) RETURN n $$) as (n agtype) where my_fn()",
        "select jsonb_path_query(v, '$.a') from t where my_fn()",
        "table t; select my_fn()",
        "explain analyze select * from t where my_fn()",
        "with d as (update t set a = my_fn() returning *) select * from d",
    ] {
        // sqlparser can't parse a few of these; Unknown is as safe.
        let c = classify(sql);
        let ok = (c.class == Unsafe && c.reason.contains("my_fn")) || c.class == Unknown;
        assert!(ok, "{sql}: {c:?}");
    }
}

#[test]
fn api_is_usable_across_tasks() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    use crate::analysis::{AnalysisCache, Analyzer};
    send::<AnalysisCache>();
    send_sync::<Classifier>();
    send_sync::<Classification>();
    // One analyzer shared by many sessions' caches.
    let shared = std::sync::Arc::new(Analyzer::new(["my_fn"]));
    let mut a = AnalysisCache::new(8, shared.clone());
    let mut b = AnalysisCache::new(8, shared);
    assert_eq!(a.get("select my_fn()", None).class.class, Read);
    assert_eq!(b.get("select my_fn()", None).class.class, Read);
}

#[test]
/// Places where a lexer might disagree with PostgreSQL about what is code: a hidden call must
/// never make a read.
fn lexing_never_hides_a_call() {
    for sql in [
        "select 1 # nextval('s')",
        "select 1 // nextval('s')",
        "select 'a\\', nextval('s'), 'x'",
        "select a$$, nextval('s'), $$x$$",
        "select 1 /* a */ + nextval('s')",
        "select `x`, nextval('s')",
        "select [x], nextval('s')",
        "select {fn nextval('s')}",
        "select 1 -- x\n, nextval('s')",
        "select e'\\'', nextval('s')",
        "select U&'\\0041' UESCAPE '!', nextval('s')",
        "select $a$ $b$ $a$, nextval('s')",
        "select 1 as \"x\"\"\", nextval('s')",
        "select 1 ?# nextval('s')",
    ] {
        let c = classify(sql);
        assert!(matches!(c.class, Unsafe | Unknown), "{sql:?}: {c:?}");
    }
    // PostgreSQL comments nest: this call is commented out.
    assert_eq!(classify("select /* /* */ nextval('s') */ 1").class, Read);
}

/// What the classifier trusts because only the schema could tell (see the
/// module's documentation): these are reads as far as the text shows, and
/// stay so until the classifier reads the schema.
#[test]
fn trusted_by_name_and_attribute_notation() {
    // A user's `lower(int)` that writes would be called here.
    assert_eq!(classify("select lower(id) from t").class, Read);
    // `t.f` is column `f`, or the function call `f(t)`.
    assert_eq!(classify("select t.f from t").class, Read);
    assert_eq!(classify("select (t).f from t").class, Read);
    // A name that is not a built-in is not trusted, even as attribute
    // notation's explicit form.
    assert_eq!(classify("select f(t) from t").class, Unsafe);
}

/// Reads of the transaction's own time or identity, which a read run
/// outside its transaction block would answer differently.
#[test]
fn transaction_time() {
    for sql in [
        "select now()",
        "SELECT CURRENT_TIMESTAMP",
        "select current_date, 1",
        "select localtimestamp",
        "select transaction_timestamp()",
        "select pg_catalog.now()",
        "select * from t where created < now() - interval '1 day'",
        "select pg_current_xact_id_if_assigned()",
    ] {
        assert!(classify(sql).transaction_time, "{sql}");
    }
    for sql in [
        "select 1",
        "select clock_timestamp()",
        "select statement_timestamp()",
    ] {
        assert!(!classify(sql).transaction_time, "{sql}");
    }
}

/// COPY in any direction and spelling, which the coalescer leaves alone.
#[test]
fn copy_is_told_apart() {
    for sql in [
        "copy t from stdin",
        "COPY t (a, b) FROM STDIN (FORMAT binary)",
        "/* load */ copy t to stdout",
        "select 1; copy (select 1) to stdout",
        "copy t from stdin with (some_new_option)",
    ] {
        assert!(classify(sql).copy, "{sql}");
    }
    for sql in [
        "select 'copy'",
        "select copy from t",
        "insert into copy values (1)",
    ] {
        assert!(!classify(sql).copy, "{sql}");
    }
}

/// BEGIN and the ends of a transaction, as a session that answers them
/// itself needs to know them.
#[test]
fn transaction_statements() {
    use super::TransactionStatement::*;
    let t = |sql| classify(sql).transaction;
    assert_eq!(t("BEGIN"), Some(Begin { tag: "BEGIN" }));
    assert_eq!(t("begin work"), Some(Begin { tag: "BEGIN" }));
    assert_eq!(
        t("START TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
        Some(Begin {
            tag: "START TRANSACTION"
        })
    );
    for sql in [
        "COMMIT",
        "end",
        "commit work",
        "COMMIT AND NO CHAIN",
        "END TRANSACTION",
    ] {
        assert_eq!(t(sql), Some(Commit), "{sql}");
    }
    for sql in ["ROLLBACK", "abort", "ROLLBACK AND NO CHAIN"] {
        assert_eq!(t(sql), Some(Rollback), "{sql}");
    }
    for sql in [
        "COMMIT AND CHAIN",
        "ROLLBACK AND CHAIN",
        "ROLLBACK TO SAVEPOINT a",
        "PREPARE TRANSACTION 'x'",
        "COMMIT PREPARED 'x'",
        "BEGIN; SELECT 1",
        "SAVEPOINT a",
        "select 1",
    ] {
        assert_eq!(t(sql), None, "{sql}");
    }
}
