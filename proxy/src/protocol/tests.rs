use bytes::{BufMut, BytesMut};

use super::*;
use std::sync::atomic::Ordering::Relaxed;

use crate::{config::Config, shared::Shared, wire::write};

/// One session's protocol state and its two output queues, fed by hand.
struct Harness {
    p: Protocol,
    to_up: WriteQueue,
    to_client: WriteQueue,
    /// Everything the client sent.
    sent: Vec<u8>,
}

impl Harness {
    fn new() -> Self {
        Self::with(Config::default())
    }

    fn with(config: Config) -> Self {
        let shared = Shared::for_tests(config);
        let info = shared.stats.open_session(None, "postgres", "postgres", "");
        shared.stats.admit(&info);
        let mut p = Protocol::new(shared.services(), info);
        // The session's settings as if already learned: nothing to ask.
        let _ = p.settings.ask();
        p.settings
            .on_answer(tag::READY_FOR_QUERY, &write::ready_frame(b'I'));
        Self {
            p,
            to_up: WriteQueue::default(),
            to_client: WriteQueue::default(),
            sent: Vec::new(),
        }
    }

    fn client(&mut self, bytes: &[u8]) {
        self.sent.extend_from_slice(bytes);
        let mut cin = BytesMut::from(bytes);
        let (up, client) = (&mut self.to_up, &mut self.to_client);
        self.p.on_client_bytes(&mut cin, up, client).unwrap();
    }

    fn upstream(&mut self, bytes: &[u8]) {
        let mut uin = BytesMut::from(bytes);
        let (up, client) = (&mut self.to_up, &mut self.to_client);
        self.p.on_upstream_bytes(&mut uin, client, up).unwrap();
    }
}

fn msg(tag: u8, body: &[u8]) -> BytesMut {
    let mut m = BytesMut::new();
    write::message(&mut m, tag, |b| b.put_slice(body));
    m
}

/// A CopyData that arrives in pieces streams through as it comes; a piece
/// that starts with 'S', 'Q' or 'F' is data, not a Sync, Query or
/// FunctionCall, and must not leave the session waiting for a
/// ReadyForQuery that never comes (which would keep it from ever being
/// idle again).
#[tokio::test]
async fn copy_data_pieces_are_not_counted_as_messages() {
    let mut h = Harness::new();
    h.client(&msg(tag::QUERY, b"COPY t FROM STDIN\0"));
    assert!(h.p.flight.awaiting_ready());
    h.upstream(&msg(b'G', &[0, 0, 1, 0, 0]));

    let data = msg(
        tag::COPY_DATA,
        b"0123456789SSSSSSSSSSQQQQQQQQQQFFFFFFFFFF\n",
    );
    // Header and the first bytes, then pieces starting with S, Q and F.
    for piece in [&data[..15], &data[15..25], &data[25..35], &data[35..]] {
        h.client(piece);
    }
    h.client(&msg(b'c', b""));
    assert!(
        h.p.flight.awaiting_ready(),
        "only the Query awaits its ReadyForQuery"
    );

    let mut done = msg(b'C', b"COPY 1\0");
    done.extend_from_slice(&msg(tag::READY_FOR_QUERY, b"I"));
    h.upstream(&done);
    assert!(!h.p.flight.awaiting_ready(), "the session is idle again");
    let mut out = Vec::new();
    h.to_up.write_all(&mut out).await.unwrap();
    assert_eq!(out, h.sent, "the client's bytes go on unchanged");
    let counted = &h.p.info.counters.bytes_to_upstream;
    assert_eq!(counted.load(Relaxed), h.sent.len() as u64);
}

/// A COPY run by a simple Query is over at the Query's ReadyForQuery:
/// nothing is left pending (a pooled session gives its connection back
/// there, not at the client's next message).
#[tokio::test]
async fn a_simple_querys_copy_leaves_the_session_quiet() {
    let failed = write::error(
        write::Severity::Error,
        "57014",
        "COPY from stdin failed: no",
    );
    let ends = [
        (msg(b'c', b""), msg(b'C', b"COPY 1\0")),
        (msg(b'f', b"no\0"), BytesMut::from(&failed[..])),
    ];
    for (end, answer) in ends {
        let mut h = Harness::new();
        h.client(&msg(tag::QUERY, b"copy t from stdin\0"));
        h.upstream(&msg(b'G', &[0, 0, 1, 0, 0]));
        let mut data = msg(tag::COPY_DATA, b"1\t10\n");
        data.extend_from_slice(&end);
        h.client(&data);
        assert!(!h.p.quiet());
        let mut done = answer;
        done.extend_from_slice(&msg(tag::READY_FOR_QUERY, b"I"));
        h.upstream(&done);
        assert!(h.p.quiet());
    }
}

/// A killed backend's FATAL that arrives with the client's next BEGIN (read
/// in the same turn) is all the client hears, as from the server itself: the
/// BEGIN is not answered here, nor does anything go upstream.
#[tokio::test]
async fn nothing_is_answered_after_the_servers_fatal() {
    let mut h = Harness::new();
    let fatal = write::error(
        write::Severity::Fatal,
        "57P01",
        "terminating connection due to administrator command",
    );
    let mut bufs =
        crate::relay::Room::boxed(msg(tag::QUERY, b"BEGIN\0"), BytesMut::from(&fatal[..]));
    crate::relay::process(&mut h.p, &mut bufs).unwrap();
    assert!(h.p.fatal_relayed);
    assert!(bufs.to_up.is_empty(), "nothing goes to a closing server");
    let mut out = Vec::new();
    bufs.to_client.write_all(&mut out).await.unwrap();
    assert_eq!(out, &fatal[..], "the FATAL alone, no BEGIN answered");
}

/// A FATAL in the place of a held BEGIN's answer (the connection failed as
/// the BEGIN arrived) reaches the client, in place of its statement's.
#[tokio::test]
async fn a_fatal_for_a_held_begin_is_relayed() {
    let mut h = Harness::new();
    h.client(&msg(tag::QUERY, b"BEGIN\0"));
    h.client(&msg(tag::QUERY, b"UPDATE t SET a = 1\0"));
    let mut answered = Vec::new();
    std::mem::take(&mut h.to_client)
        .write_all(&mut answered)
        .await
        .unwrap();
    let fatal = write::error(write::Severity::Fatal, "57P01", "terminating connection");
    h.upstream(&fatal);
    assert!(h.p.fatal_relayed);
    let mut out = Vec::new();
    h.to_client.write_all(&mut out).await.unwrap();
    assert_eq!(out, &fatal[..]);
}

/// The extended-protocol group of `sql`, unnamed, as pgbench sends it.
fn group(sql: &str) -> BytesMut {
    let mut parse = sql.as_bytes().to_vec();
    parse.extend_from_slice(b"\0\0\0");
    let mut g = BytesMut::new();
    g.extend_from_slice(&msg(tag::PARSE, &[&[0u8][..], &parse].concat()));
    g.extend_from_slice(&msg(tag::BIND, &[0, 0, 0, 0, 0, 0, 0, 0]));
    g.extend_from_slice(&msg(tag::DESCRIBE, b"P\0"));
    g.extend_from_slice(&msg(tag::EXECUTE, &[0, 0, 0, 0, 0]));
    g.extend_from_slice(&msg(tag::SYNC, b""));
    g
}

/// Between transactions a session lets go of its read buffer: what it
/// keeps of a held BEGIN, of a read run without it and of the statement
/// it remembers is copied out, so the buffer can serve other reads.
#[tokio::test]
async fn letting_go_of_reads_leaves_nothing_in_the_read_buffer() {
    let mut config = Config::default();
    config.transactions.lazy_reads = true;
    let mut h = Harness::with(config);
    h.p.coalescer.on_default_isolation(Some(
        onetrip_planner::classify::IsolationLevel::ReadCommitted,
    ));
    let mut cin = BytesMut::with_capacity(4096);
    cin.extend_from_slice(&group("BEGIN"));
    cin.extend_from_slice(&group("SELECT 1"));
    let (up, client) = (&mut h.to_up, &mut h.to_client);
    h.p.on_client_bytes(&mut cin, up, client).unwrap();
    assert!(h.p.txn.held.is_some(), "the BEGIN is held");
    assert!(h.to_up.wants_write(), "the read went up without it");
    let mut answer = BytesMut::new();
    for (t, body) in [
        (b'1', &b""[..]),
        (b'2', b""),
        (b'n', b""),
        (b'C', b"SELECT 0\0"),
        (tag::READY_FOR_QUERY, b"I"),
    ] {
        answer.extend_from_slice(&msg(t, body));
    }
    h.upstream(&answer);
    assert!(cin.is_empty());
    // Written out, as a release point finds them.
    h.to_up = WriteQueue::default();
    h.to_client = WriteQueue::default();
    h.p.let_go_of_reads();
    assert!(cin.try_reclaim(4096), "nothing points into the read buffer");
    assert!(h.p.txn.held.is_some(), "the BEGIN is still held");
}
