/// What DISCARD ALL undoes is told apart from what it leaves, in every
/// statement of a text.
#[test]
fn pins_past_a_reset() {
    for sql in [
        "LISTEN a",
        "SET ROLE x; SELECT pg_advisory_lock(1); CREATE TEMP TABLE t (a int)",
        "DECLARE c CURSOR WITH HOLD FOR SELECT 1; PREPARE p AS SELECT 1",
        "SELECT set_config('a.b', 'c', false)",
        "DISCARD ALL; RESET ALL; UNLISTEN *; DEALLOCATE p",
        "SELECT 1",
        "LISTEN a; LOAD 'x'",
        "CREATE TABLE pg_temp.t (a int); UPDATE pg_settings SET setting = '1'",
    ] {
        assert_eq!(super::pin_past_reset(sql), None, "{sql}");
        if let Some(why) = super::session_pin(sql) {
            assert!(super::reset_undoes(why), "{sql}: {why}");
        }
    }
    for (sql, why) in [
        ("LISTEN a; DO $$BEGIN END$$", "DO block"),
        (
            "SELECT pg_advisory_lock(1), dblink_connect('c')",
            "dblink connection",
        ),
        ("SET x = 1; DO $$BEGIN END$$", "DO block"),
        ("SELECT 1; (SELECT 2)", "statement not read by the pooler"),
    ] {
        assert_eq!(super::pin_past_reset(sql), Some(why), "{sql}");
    }
}

use super::session_pin;

/// One pass finds what the two functions find apart.
#[test]
fn pins_of_a_text_match_its_pins_found_apart() {
    for sql in [
        "SELECT 1",
        "",
        ";;",
        "LISTEN a",
        "LISTEN a; LOAD 'x'",
        "LOAD 'x'; LISTEN a",
        "SET ROLE x; SELECT pg_advisory_lock(1); CREATE TEMP TABLE t (a int)",
        "DECLARE c CURSOR WITH HOLD FOR SELECT 1; PREPARE p AS SELECT 1",
        "SELECT pg_advisory_lock(1), dblink_connect('c')",
        "SET x = 1; DO $$BEGIN END$$",
        "SELECT 1; (SELECT 2)",
        "(SELECT 1); LISTEN a",
        "SET search_path = a",
        "select 1; set session x = 1",
        "DISCARD ALL; RESET ALL; UNLISTEN *; DEALLOCATE p",
        "FROBNICATE",
        "create database x",
        "BEGIN; UPDATE t SET a = 1; COMMIT",
        "SELECT set_config('a.b', 'c', false); SELECT 1",
        "DO $$ BEGIN PERFORM 1; END $$",
        "LISTEN a; FROBNICATE",
    ] {
        let p = super::Pins::of(sql);
        assert_eq!(p.pin, session_pin(sql), "{sql}");
        assert_eq!(p.past_reset, super::pin_past_reset(sql), "{sql}");
        assert_eq!(p.database_command, crate::classify::database_command(sql));
    }
}

#[test]
fn plain_statements_do_not_pin() {
    for sql in [
        "SELECT 1",
        "select * from t where temp > 3",
        "BEGIN; UPDATE t SET a = 1; COMMIT",
        "SET LOCAL statement_timeout = 5",
        "set transaction isolation level serializable",
        "SELECT set_config('a.b', 'c', true)",
        "SELECT pg_advisory_xact_lock(1)",
        "CREATE TABLE t (temp int)",
        "CREATE TABLE temp (a int)",
        "DECLARE c CURSOR FOR SELECT 1",
        "PREPARE TRANSACTION 'x'",
        "LOAD 'age'",
        "load '$libdir/plugins/auto_explain'; SELECT 1",
        "INSERT INTO temp VALUES (1)",
        "SELECT * FROM pg_temp.t",
        "INSERT INTO pg_temp.t VALUES (1)",
        "SELECT * FROM pg_settings",
        "UPDATE my_settings SET setting = 1",
        "UPDATE app.pg_settings SET setting = 1",
        "EXPLAIN UPDATE pg_settings SET setting = '1' WHERE name = 'x'",
        "CREATE TABLE public.t (a int)",
        "SELECT 'pg_temp.x', $$CREATE TABLE pg_temp.t (a int)$$",
        "-- CREATE TABLE pg_temp.t (a int)\nSELECT 1",
        "",
        ";;",
        "-- nothing\n",
        "SELECT 'SET x = 1', $$LISTEN a$$",
    ] {
        assert_eq!(session_pin(sql), None, "{sql}");
    }
}

#[test]
fn session_state_pins() {
    for (sql, why) in [
        ("SET search_path = a", "session SET"),
        ("select 1; set session x = 1", "session SET"),
        ("RESET ALL", "RESET"),
        ("discard all", "DISCARD"),
        ("LISTEN chan", "LISTEN"),
        ("UNLISTEN *", "UNLISTEN"),
        ("SELECT pg_advisory_lock(1)", "session advisory lock"),
        (
            "SELECT pg_catalog.pg_try_advisory_lock(1, 2)",
            "session advisory lock",
        ),
        (
            "SELECT set_config('a.b', 'c', false)",
            "set_config(..., false)",
        ),
        (
            "SELECT set_config('a.b', 'c', $1)",
            "set_config(..., false)",
        ),
        (
            "SELECT set_config('a.b', upper('c'), f(true))",
            "set_config(..., false)",
        ),
        ("CREATE TEMP TABLE x (a int)", "temporary table"),
        ("create global temporary table x (a int)", "temporary table"),
        (
            "CREATE OR REPLACE TEMP VIEW v AS SELECT 1",
            "temporary table",
        ),
        ("SELECT 1 INTO TEMP x", "temporary table"),
        (
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "DECLARE ... WITH HOLD",
        ),
        ("PREPARE p AS SELECT 1", "SQL PREPARE"),
        ("DEALLOCATE p", "SQL DEALLOCATE"),
        ("DO $$ BEGIN PERFORM 1; END $$", "DO block"),
        ("(SELECT 1)", "statement not read by the pooler"),
        ("FROBNICATE", "statement not read by the pooler"),
    ] {
        assert_eq!(session_pin(sql), Some(why), "{sql}");
    }
}

/// State hidden from keywords: an object made in the temporary schema by
/// name, settings changed through their catalog view.
#[test]
fn hidden_session_state_pins() {
    for sql in [
        "CREATE TABLE pg_temp.t (a int)",
        "create table PG_TEMP.t (a int)",
        "CREATE TABLE \"pg_temp\".t (a int)",
        "CREATE TABLE pg_temp_3.t (a int)",
        "CREATE UNLOGGED TABLE IF NOT EXISTS pg_temp.t (a int)",
        "CREATE SEQUENCE pg_temp.s",
        "CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'select 1'",
        "CREATE OR REPLACE VIEW pg_temp.v AS SELECT 1",
        "CREATE INDEX ON pg_temp.t (a)",
        "CREATE TABLE pg_temp.t AS SELECT 1",
        "SELECT 1 AS a INTO pg_temp.t",
        "SELECT * INTO pg_temp.t FROM u",
        "WITH x AS (SELECT 1) SELECT * INTO pg_temp.t FROM x",
        "EXPLAIN ANALYZE CREATE TEMP TABLE t AS SELECT 1",
    ] {
        assert_eq!(session_pin(sql), Some("temporary table"), "{sql}");
        assert_eq!(super::pin_past_reset(sql), None, "{sql}");
    }
    for sql in [
        "UPDATE pg_settings SET setting = '1' WHERE name = 'work_mem'",
        "update PG_CATALOG.PG_SETTINGS set setting = '1' where name = 'work_mem'",
        "UPDATE \"pg_catalog\".\"pg_settings\" s SET setting = 'x'",
        "UPDATE ONLY pg_settings SET setting = 'x'",
        "WITH u AS (UPDATE pg_settings SET setting = 'x' RETURNING 1) SELECT * FROM u",
        "EXPLAIN ANALYZE UPDATE pg_settings SET setting = '1'",
    ] {
        assert_eq!(session_pin(sql), Some("set_config(..., false)"), "{sql}");
        assert!(super::reset_undoes("set_config(..., false)"));
    }
    // Quoted otherwise, it is another name.
    assert_eq!(session_pin("CREATE TABLE \"PG_TEMP\".t (a int)"), None);
    assert_eq!(session_pin("CREATE TABLE pg_temp_x.t (a int)"), None);
    assert_eq!(session_pin("UPDATE \"PG_SETTINGS\" SET setting = 1"), None);
}

/// LOAD no longer pins: its libraries follow the session like its settings.
#[test]
fn load_is_followed_not_pinned() {
    let p = super::Pins::of("LOAD 'auto_explain'");
    assert_eq!((p.pin, p.past_reset, p.loads), (None, None, true));
    assert!(!super::Pins::of("SELECT 'LOAD x'").loads);
    assert!(super::Pins::of("SET x = 1; load 'a'").loads);
    assert!(!super::reset_undoes("LOAD"));
}

proptest::proptest! {
    /// Any text is read without a panic, and the one pass agrees with the
    /// functions that find its parts apart.
    #[test]
    fn any_text_is_read(sql in "\\PC{0,80}") {
        check(&sql);
    }

    /// Texts made of the words the scan looks for, in any order.
    #[test]
    fn any_mix_of_its_words_is_read(parts in proptest::collection::vec(proptest::sample::select(PIECES), 0..24)) {
        check(&parts.concat());
    }
}

const PIECES: &[&str] = &[
    "select ",
    "insert ",
    "into ",
    "update ",
    "delete ",
    "from ",
    "merge ",
    "copy ",
    "create ",
    "temp ",
    "table ",
    "pg_temp",
    "pg_temp_1",
    ".",
    "\"pg_temp\"",
    "pg_settings ",
    "pg_catalog",
    "set ",
    "set_config",
    "(",
    ")",
    "(",
    ")",
    ",",
    ";",
    "true ",
    "false ",
    "with ",
    "hold ",
    "as ",
    "explain ",
    "analyze ",
    "do ",
    "call ",
    "load ",
    "'x' ",
    "$$ y $$",
    "f",
    "nextval",
    "::",
    "numeric",
    " ",
    "--c\n",
    "/* c",
    "'open",
    "\"open",
    "declare ",
    "prepare ",
    "execute ",
    "drop ",
    "database ",
    "x ",
    "pg_advisory_lock",
    "over ",
    "filter ",
    "materialized ",
];

fn check(sql: &str) {
    let p = super::Pins::of(sql);
    assert_eq!(p.pin, session_pin(sql), "{sql:?}");
    assert_eq!(p.past_reset, super::pin_past_reset(sql), "{sql:?}");
    assert_eq!(
        p.database_command,
        crate::classify::database_command(sql),
        "{sql:?}"
    );
    assert!(
        p.reset
            .reason()
            .is_none_or(|r| crate::classify::RESET_REASONS.contains(&r))
    );
    if p.pin.is_some_and(|why| !super::reset_undoes(why)) {
        assert_eq!(p.past_reset, p.pin, "{sql:?}");
    }
}

/// The last text's pins serve a text that differs only in the values of
/// its plain literals, and no other: over a stream mixing both,
/// `LastPins` gives what a scan of each text gives.
#[test]
fn last_pins_serve_only_texts_that_differ_in_literals() {
    let stream = [
        "SELECT abalance FROM pgbench_accounts WHERE aid = 1",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 22",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 'x'",
        "SELECT set_config('a.b', 'c', false)",
        "SELECT set_config('a.b', 'd', false)",
        "SELECT set_config('a.b', 'd', true)",
        "SELECT set_config('a.b', 'd', 'true')",
        "SELECT set_config('a.b', 'd', 'false')",
        "LOAD 'age'",
        "LOAD 'other'",
        "UPDATE pg_settings SET setting = '1' WHERE name = 'x'",
        "UPDATE pg_settings SET setting = '2' WHERE name = 'y'",
        "UPDATE t SET a = 2 WHERE b = 'y'",
        "SELECT pg_advisory_lock(1)",
        "SELECT pg_advisory_lock(2)",
        "SELECT pg_advisory_xact_lock(2)",
        "1; SELECT 2",
        "2; SELECT 3",
        "SELECT 1; LISTEN a",
        "SELECT 2; LISTEN a",
        "SELECT 2; LISTEN b",
        "SELECT E'x' FROM t WHERE a = 1",
        "SELECT E'y' FROM t WHERE a = 2",
        "SELECT 'a' -- 1\n",
        "SELECT 'b' -- 2\n",
        "DO $$BEGIN END$$",
        "SELECT 1",
    ];
    let mut last = super::LastPins::default();
    for _ in 0..2 {
        for sql in stream {
            assert_eq!(last.of(sql), super::Pins::of(sql), "{sql}");
        }
    }
    // Texts that differ only in literal values have the same pins.
    for (a, b) in [
        (
            "SELECT set_config('a', 'b', 'x')",
            "SELECT set_config('c', 'd', 7)",
        ),
        ("1", "'x'"),
        ("LOAD 'a'", "LOAD 'b'"),
        ("SET x = 1", "SET x = 'y'"),
    ] {
        assert_eq!(super::Pins::of(a), super::Pins::of(b), "{a} / {b}");
    }
}
