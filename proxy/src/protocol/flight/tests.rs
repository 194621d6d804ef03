use bytes::{BufMut, Bytes, BytesMut};

use super::*;
use crate::wire::write;

fn sql(text: &'static str) -> Sql {
    let msg = Bytes::from_static(text.as_bytes());
    Sql::within(&msg, text, None)
}

fn parse(name: &str, text: &'static str) -> Op {
    Op::Parse(name.into(), sql(text))
}

fn complete(tag: &str) -> BytesMut {
    let mut m = BytesMut::new();
    write::message(&mut m, tag::COMMAND_COMPLETE, |b| {
        b.put_slice(tag.as_bytes());
        b.put_u8(0);
    });
    m
}

/// Feeds answers by type; returns whose each was.
fn answer(f: &mut Flight, tags: &[u8]) -> Vec<Owner> {
    tags.iter().map(|&t| f.on_answer(t, &[])).collect()
}

#[test]
fn answers_follow_requests() {
    let mut f = Flight::default();
    f.sent(tag::QUERY, Some(Own::Settings), Op::None);
    f.sent(tag::PARSE, None, parse("s1", "select 1"));
    f.sent(tag::BIND, None, Op::None);
    f.sent(tag::EXECUTE, None, Op::None);
    f.sent(tag::SYNC, None, Op::None);
    assert!(f.awaiting_ready() && !f.client_answered());
    assert_eq!(f.next_owner(), Owner::Own(Own::Settings));
    let settings = Owner::Own(Own::Settings);
    assert_eq!(
        answer(&mut f, b"TDCZ"),
        [settings, settings, settings, settings]
    );
    assert_eq!(f.next_owner(), Owner::Client);
    // A Bind sent now runs what the pending Parse makes.
    assert_eq!(f.statement("s1").map(Sql::as_str), Some("select 1"));
    answer(&mut f, b"12DCZ");
    assert!(f.answered() && !f.awaiting_ready());
    assert_eq!(f.statement("s1").map(Sql::as_str), Some("select 1"));
}

#[test]
fn an_error_skips_to_the_sync_queries_included() {
    let mut f = Flight::default();
    f.sent(tag::PARSE, None, parse("", "select 1"));
    f.sent(tag::BIND, None, Op::None);
    f.sent(tag::EXECUTE, None, Op::None);
    f.sent(tag::QUERY, None, Op::None);
    f.sent(tag::PARSE, None, parse("s2", "select 2"));
    f.sent(tag::SYNC, None, Op::None);
    // ParseComplete, then the Bind fails: the Query and the second Parse
    // are skipped, and only the Sync is answered.
    answer(&mut f, b"1E");
    assert!(f.awaiting_ready());
    answer(&mut f, b"Z");
    assert!(f.answered());
    assert_eq!(f.statement("").map(Sql::as_str), Some("select 1"));
    assert!(f.statement("s2").is_none());

    // An error with no Sync on its way: what follows is skipped until one.
    f.sent(tag::BIND, None, Op::None);
    answer(&mut f, b"E");
    f.sent(tag::QUERY, None, Op::None);
    f.sent(tag::PARSE, None, parse("s3", "select 3"));
    assert!(!f.awaiting_ready() && f.answered());
    f.sent(tag::SYNC, None, Op::None);
    answer(&mut f, b"Z");
    assert!(f.answered() && f.statement("s3").is_none());
}

#[test]
fn a_failed_unnamed_parse_drops_the_unnamed_statement() {
    let mut f = Flight::default();
    f.sent(tag::PARSE, None, parse("", "select 1"));
    f.sent(tag::SYNC, None, Op::None);
    answer(&mut f, b"1Z");
    f.sent(tag::PARSE, None, parse("", "select nope"));
    f.sent(tag::SYNC, None, Op::None);
    answer(&mut f, b"EZ");
    assert!(f.statement("").is_none());
}

#[test]
fn a_named_parse_that_fails_keeps_the_old_one() {
    let mut f = Flight::default();
    f.sent(tag::PARSE, None, parse("s", "insert into t values (1)"));
    f.sent(tag::SYNC, None, Op::None);
    answer(&mut f, b"1Z");
    f.sent(tag::PARSE, None, parse("s", "select 1"));
    f.sent(tag::SYNC, None, Op::None);
    // Until its answer, a Bind would run the new text (or fail with it).
    assert_eq!(f.statement("s").map(Sql::as_str), Some("select 1"));
    answer(&mut f, b"EZ");
    assert_eq!(
        f.statement("s").map(Sql::as_str),
        Some("insert into t values (1)")
    );
}

#[test]
fn drops_win_over_parses_still_on_their_way() {
    let mut f = Flight::default();
    f.sent(tag::PARSE, None, parse("s", "select 1"));
    f.forget("s");
    f.sent(tag::CLOSE, None, Op::None);
    f.sent(tag::SYNC, None, Op::None);
    answer(&mut f, b"13Z");
    assert!(f.statement("s").is_none());

    f.sent(tag::PARSE, None, parse("a", "select 1"));
    f.sent(tag::PARSE, None, parse("b", "select 2"));
    f.forget_all();
    f.sent(tag::SYNC, None, Op::None);
    answer(&mut f, b"11Z");
    assert!(f.statement("a").is_none() && f.statement("b").is_none());
}

#[test]
fn sql_prepare_is_recorded_at_its_command_complete() {
    let mut f = Flight::default();
    let prepares = vec![
        ("a".to_owned(), sql("select 1")),
        ("b".to_owned(), sql("select 2")),
    ];
    f.sent(tag::QUERY, None, Op::Prepare(prepares));
    assert_eq!(f.statement("b").map(Sql::as_str), Some("select 2"));
    f.on_answer(tag::COMMAND_COMPLETE, &complete("PREPARE"));
    // The second failed: the server answers an error, then ReadyForQuery.
    answer(&mut f, b"EZ");
    assert_eq!(f.statement("a").map(Sql::as_str), Some("select 1"));
    assert!(f.statement("b").is_none());
}

#[test]
fn notices_and_notifications_are_nobody_s_answer() {
    let mut f = Flight::default();
    f.sent(tag::QUERY, Some(Own::Settings), Op::None);
    assert_eq!(
        answer(&mut f, b"NAS"),
        [Owner::Client, Owner::Client, Owner::Client]
    );
    assert_eq!(f.next_owner(), Owner::Own(Own::Settings));
}
