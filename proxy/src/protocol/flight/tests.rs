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
        SqlOp::Prepare(Some(("a".to_owned(), sql("select 1")))),
        SqlOp::Prepare(Some(("b".to_owned(), sql("select 2")))),
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
fn sql_deallocate_is_done_at_its_command_complete() {
    let mut f = Flight::default();
    let prepare = |name: &str| SqlOp::Prepare(Some((name.to_owned(), sql("select 1"))));
    f.sent(
        tag::QUERY,
        None,
        Op::Prepare(vec![prepare("a"), prepare("b")]),
    );
    f.on_answer(tag::COMMAND_COMPLETE, &complete("PREPARE"));
    f.on_answer(tag::COMMAND_COMPLETE, &complete("PREPARE"));
    answer(&mut f, b"Z");
    // Sent: found gone by what follows it at once.
    f.sent(
        tag::QUERY,
        None,
        Op::Prepare(vec![SqlOp::Deallocate("a".into())]),
    );
    assert!(f.statement("a").is_none());
    // It failed (a failed transaction block): nothing dropped.
    answer(&mut f, b"EZ");
    assert!(f.statement("a").is_some());
    // Done, behind another statement's tag.
    let ops = vec![SqlOp::Deallocate("a".into()), prepare("c")];
    f.sent(tag::QUERY, None, Op::Prepare(ops));
    f.on_answer(tag::COMMAND_COMPLETE, &complete("SELECT 1"));
    assert!(f.statement("a").is_none());
    f.on_answer(tag::COMMAND_COMPLETE, &complete("DEALLOCATE"));
    f.on_answer(tag::COMMAND_COMPLETE, &complete("PREPARE"));
    answer(&mut f, b"Z");
    assert!(f.statement("a").is_none());
    assert!(f.statement("b").is_some() && f.statement("c").is_some());
    f.sent(tag::QUERY, None, Op::Prepare(vec![SqlOp::DeallocateAll]));
    assert!(f.statement("b").is_none());
    f.on_answer(tag::COMMAND_COMPLETE, &complete("DEALLOCATE ALL"));
    answer(&mut f, b"Z");
    assert!(f.statement("b").is_none() && f.statement("c").is_none());
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

/// Sends messages by type, the client's; returns which the server takes
/// as messages of their own.
fn send(f: &mut Flight, tags: &[u8]) -> Vec<bool> {
    tags.iter().map(|&t| f.sent(t, None, Op::None)).collect()
}

/// tokio-postgres and libpq send a COPY's Sync before its data: the server
/// reads it as COPY data and never answers it; the group ends at the Sync
/// after CopyDone or CopyFail.
#[test]
fn a_sync_before_copy_data_is_read_as_data() {
    for (end, answers) in [(tag::COPY_DONE, b"CZ"), (tag::COPY_FAIL, b"EZ")] {
        let mut f = Flight::default();
        send(&mut f, b"BES");
        assert_eq!(f.group_now(), 1);
        answer(&mut f, b"2G");
        assert!(f.awaits_sync() && !f.awaiting_ready());
        // Messages sent now belong to the COPY's group.
        assert_eq!(f.group_answered_now(), f.group_now());
        assert_eq!(send(&mut f, &[b'd', b'd', end, b'S']), [true; 4]);
        assert!(f.awaiting_ready() && !f.awaits_sync());
        answer(&mut f, answers);
        assert!(f.answered() && !f.lost());
        assert_eq!(f.group_answered_now(), f.group_now());
    }
}

/// The same sent at once, before the CopyInResponse came; a Sync or Flush
/// sent while the COPY reads before any data is ignored too.
#[test]
fn syncs_the_copy_reads_are_found_however_they_came() {
    let mut f = Flight::default();
    send(&mut f, b"PBESdcSPBES");
    answer(&mut f, b"12G");
    assert_eq!(f.readies(), 2);
    answer(&mut f, b"CZ12CZ");
    assert!(f.answered());

    let mut f = Flight::default();
    send(&mut f, b"BES");
    answer(&mut f, b"2G");
    assert_eq!(send(&mut f, b"SHS"), [false, true, false]);
    send(&mut f, b"dcS");
    answer(&mut f, b"CZ");
    assert!(f.answered() && !f.lost());
}

/// A simple Query's COPY: Syncs among its data are read as data, and the
/// Query's ReadyForQuery ends it.
#[test]
fn a_querys_copy_reads_syncs_as_data_too() {
    let mut f = Flight::default();
    send(&mut f, b"QS");
    answer(&mut f, b"G");
    assert_eq!(send(&mut f, b"dSc"), [true, false, true]);
    assert_eq!(f.readies(), 1);
    answer(&mut f, b"CZ");
    assert!(f.answered() && !f.lost());
}

/// Any other message the COPY reads ends it with an error and gets no
/// answer of its own; what follows is read as usual.
#[test]
fn another_message_among_copy_data_ends_the_copy() {
    let mut f = Flight::default();
    send(&mut f, b"BES");
    answer(&mut f, b"2G");
    assert_eq!(send(&mut f, b"PBES"), [false, true, true, true]);
    // The error skips the Bind and Execute, to the Sync.
    answer(&mut f, b"EZ");
    assert!(f.answered() && !f.lost());

    let mut f = Flight::default();
    send(&mut f, b"BESQdcS");
    answer(&mut f, b"2G");
    answer(&mut f, b"EZ");
    assert!(f.answered() && !f.lost());
}

/// A Sync among a COPY's data: ignored if the COPY succeeds; answered or
/// not if it fails, as only the server knows (where in the data it
/// failed), which the flight says.
#[test]
fn a_sync_among_the_data_of_a_failed_copy_is_unknowable() {
    let mut f = Flight::default();
    send(&mut f, b"BES");
    answer(&mut f, b"2G");
    assert_eq!(send(&mut f, b"dSdcS"), [true, false, true, true, true]);
    answer(&mut f, b"CZ");
    assert!(f.answered() && !f.lost());

    let mut f = Flight::default();
    send(&mut f, b"BES");
    answer(&mut f, b"2G");
    send(&mut f, b"dSdcS");
    answer(&mut f, b"E");
    assert!(f.lost());

    // Sent before the CopyInResponse came.
    let mut f = Flight::default();
    send(&mut f, b"BESdSdcS");
    answer(&mut f, b"2G");
    answer(&mut f, b"E");
    assert!(f.lost());
}

/// A COPY that fails before it reads anything: the Syncs are the server's
/// as usual.
#[test]
fn a_copy_that_never_began_reads_nothing() {
    let mut f = Flight::default();
    send(&mut f, b"BESdcS");
    answer(&mut f, b"2EZZ");
    assert!(f.answered() && !f.lost());
}
