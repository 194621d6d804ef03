//! A session's reads on a replica (`[replicas]`, session mode, this
//! task's relay): at a quiet moment, a simple Query, or a whole group of
//! extended-protocol messages up to its Sync, at the head of the client's
//! bytes that the planner proves pure reads (`protocol/replica.rs`,
//! `protocol/replica_group.rs`) goes to a replica that has replayed the
//! client's floor, on the session's own replica connection, opened at its
//! first such read and kept. Named statements a group binds are made there
//! from the client's own Parse, sent ahead in the same write on their
//! first use on that connection. The read waits for its whole answer there
//! (the session has nothing else in flight), with `SELECT
//! pg_last_wal_replay_lsn(), pg_is_in_recovery()` in the same write
//! behind it: what the client saw raises its floor, so it never reads
//! older data again, and an answer from a replica promoted since its
//! watcher looked is dropped. A replica that refuses the read (25006, a
//! recovery conflict, a shutdown, a statement it could not make) or whose
//! connection fails has the read run again on the primary before the
//! client hears of it.

use std::{
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tracing::debug;

use super::{Bufs, Closer, End};
use crate::{
    config::Consistency,
    net::Pair,
    protocol::Protocol,
    replicas::{self, Replicas},
    stats::Counters,
    wire::{backend, frame, startup, tag},
};

/// How long a replica that could not be opened is left alone by the
/// session.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A session's way to its replicas.
pub(crate) struct Detour {
    replicas: Arc<Replicas>,
    /// The client's startup parameters, for its replica connections.
    params: Vec<(String, String)>,
    conn: Option<Conn>,
    /// Where the session starts looking for a replica: sessions spread
    /// their reads.
    from: usize,
    connect_timeout: Duration,
    /// Past this much of an answer, it streams to the client: the read
    /// can't be run again elsewhere after that.
    max_held: usize,
    retry_at: Option<Instant>,
    replay_query: Bytes,
    /// What goes to the replica in one write, its room reused.
    out: BytesMut,
}

struct Conn {
    replica: usize,
    tcp: TcpStream,
    buf: BytesMut,
}

/// What became of the client's next message.
pub(crate) enum Detoured {
    /// It goes to the upstream as usual.
    No,
    /// A replica answered it; the answer is queued for the client.
    Served,
    /// It may go to a replica once the answers to the proxy's own queries
    /// are in: only upstream bytes are handled meanwhile.
    Wait,
    End(End),
}

impl Detour {
    /// The session's detour, if its reads may go to replicas: some are
    /// configured, it is not pooled, and it is no replication connection.
    pub(crate) fn new(
        replicas: &Arc<Replicas>,
        proto: &mut Protocol,
        startup_raw: &Bytes,
    ) -> Option<Detour> {
        if replicas.is_empty() || proto.pooled {
            return None;
        }
        let Ok(startup::StartupMessage::Startup { params, .. }) =
            startup::decode(startup_raw.clone())
        else {
            return None;
        };
        if params.iter().any(|(k, _)| k == "replication") {
            return None;
        }
        let config = proto.services.config.clone();
        proto.route_reads(config.replicas.consistency == Consistency::ReadYourWrites);
        Some(Detour {
            replicas: replicas.clone(),
            params,
            conn: None,
            from: proto.info.id as usize % replicas.list.len(),
            connect_timeout: config.upstream.connect_timeout,
            max_held: config.coalesce.max_held_bytes,
            retry_at: None,
            replay_query: replicas::query_message(
                "SELECT pg_catalog.pg_last_wal_replay_lsn(), pg_catalog.pg_is_in_recovery()",
            ),
            out: BytesMut::new(),
        })
    }

    /// Runs the client's next message on a replica if it may go there.
    pub(crate) async fn route(
        &mut self,
        io: &mut Pair,
        proto: &mut Protocol,
        b: &mut Bufs,
        forced: &mut Closer,
    ) -> Detoured {
        if !proto.may_detour() || b.to_up.wants_write() || b.to_client.wants_write() {
            return Detoured::No;
        }
        let max = proto.services.config.limits.max_message_bytes;
        let (len, group) = match frame::peek_header(&b.cin, max) {
            Ok(Some(h)) if h.tag == tag::QUERY && b.cin.len() >= h.wire_len => {
                if !proto.replica_read(&b.cin[..h.wire_len]) {
                    return Detoured::No;
                }
                (h.wire_len, None)
            }
            Ok(Some(h)) if h.tag == tag::PARSE || h.tag == tag::BIND => {
                match proto.replica_group(&b.cin) {
                    Some(g) => (g.len, Some(g)),
                    None => return Detoured::No,
                }
            }
            _ => return Detoured::No,
        };
        if proto.own_in_flight() {
            // The session's settings, or the position of its last write,
            // on their way: the read waits for them (a moment: they were
            // sent before it) rather than go to the primary.
            return Detoured::Wait;
        }
        if !b.uin.is_empty() {
            // Unasked for (a notice): the client reads it first.
            return Detoured::No;
        }
        let Some(floor) = proto.replica_floor() else {
            if self.replicas.any_up() {
                Counters::add(&proto.info.counters.fresh_reads, 1);
            }
            return Detoured::No;
        };
        let Some(i) = self.choose(floor) else {
            if self.replicas.any_up() {
                Counters::add(&proto.info.counters.fresh_reads, 1);
            }
            return Detoured::No;
        };
        if !self.connect(i, proto).await {
            return Detoured::No;
        }
        // One write: what the connection needs first, the client's bytes
        // (still in `cin`: refused, they go to the primary from there), the
        // replay query.
        self.out.clear();
        let ahead = match group {
            Some(_) => proto.replica_ahead(&b.cin[..len], &mut self.out),
            None => 0,
        };
        self.out.extend_from_slice(&b.cin[..len]);
        self.out.extend_from_slice(&self.replay_query);
        let run = tokio::select! {
            biased;
            end = &mut *forced => return Detoured::End(end),
            run = self.run(ahead, io) => run,
        };
        match run {
            Ran::Answered(answer, replay, streamed) => {
                let head = b.cin.split_to(len).freeze();
                let n = answer.len() as u64 + streamed;
                if !answer.is_empty() {
                    b.to_client.push(answer);
                }
                proto.on_detoured(n, group.map_or(1, |g| g.executes));
                if let Some(g) = group {
                    proto.on_detoured_group(g, &head);
                }
                proto.raise_floor(replay);
                self.replicas.list[i].reads.fetch_add(1, Relaxed);
                Detoured::Served
            }
            Ran::Refused(why) => {
                if group.is_some() {
                    proto.replica_ahead_failed();
                }
                debug!(replica = %self.replicas.list[i].address, "read run on the primary: {why}");
                Counters::add(&proto.info.counters.replica_reruns, 1);
                Detoured::No
            }
            Ran::Lost(why) => Detoured::End(End::Error(why)),
        }
    }

    /// The replica for a read at `floor`: the session's own connection's
    /// if it has replayed the floor, else any that has.
    fn choose(&mut self, floor: u64) -> Option<usize> {
        if let Some(c) = &self.conn
            && self.replicas.fresh(c.replica, floor)
        {
            return Some(c.replica);
        }
        self.replicas.pick(floor, self.from)
    }

    /// The session's connection to replica `i`, opened if it has none
    /// there (a connection to another is closed).
    async fn connect(&mut self, i: usize, proto: &mut Protocol) -> bool {
        if self.conn.as_ref().is_some_and(|c| c.replica == i) {
            return true;
        }
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            return false;
        }
        self.conn = None;
        let params: Vec<(&str, &str)> = self
            .params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let addr = &self.replicas.list[i].address;
        match replicas::open(addr, &params, self.connect_timeout).await {
            Ok((tcp, buf)) => {
                proto.replica_connection_new();
                self.conn = Some(Conn {
                    replica: i,
                    tcp,
                    buf,
                });
                self.retry_at = None;
                true
            }
            Err(e) => {
                debug!("reads stay on the primary for now: {e}");
                self.retry_at = Some(Instant::now() + RETRY_AFTER);
                false
            }
        }
    }

    /// Sends `out` (`ahead` messages of the proxy's own, the client's,
    /// the replay query); reads all their answers.
    async fn run(&mut self, ahead: usize, io: &mut Pair) -> Ran {
        let Some(conn) = self.conn.as_mut() else {
            return Ran::Refused("no connection".into());
        };
        let mut sent = 0;
        let ran = exchange(conn, &self.out, ahead, io, self.max_held, &mut sent).await;
        match ran {
            Exchange::Done(answer, Some(replay)) => Ran::Answered(answer, replay, sent),
            Exchange::Done(_, None) => {
                self.conn = None;
                Ran::Refused("out of recovery, or no replay position".into())
            }
            Exchange::Refused(why, keep) => {
                if !keep {
                    self.conn = None;
                }
                Ran::Refused(why)
            }
            Exchange::Lost(why) => {
                self.conn = None;
                Ran::Lost(why)
            }
        }
    }
}

enum Ran {
    /// The answer for the client (what is left of it after what streamed
    /// to it), the replica's replay position after it, and the bytes that
    /// streamed.
    Answered(Bytes, u64, u64),
    /// Run it on the primary.
    Refused(String),
    /// The replica failed after part of the answer reached the client.
    Lost(String),
}

enum Exchange {
    Done(Bytes, Option<u64>),
    /// Why; whether the connection is still good.
    Refused(String, bool),
    Lost(String),
}

/// SQLSTATEs a replica gives where the primary would run the read: a
/// write after all (25006), a recovery conflict (40001), shutdowns and
/// lost connections.
fn replica_refusal(code: &str) -> bool {
    // 26000: a statement the connection should hold and does not; the
    // primary answers for it.
    code == "25006"
        || code == "40001"
        || code == "26000"
        || code.starts_with("57P")
        || code.starts_with("08")
}

/// Writes `out` and reads the answers: the first `ahead` completions (of
/// the proxy's own messages) swallowed, then the client's, up to its
/// ReadyForQuery, then the replay query's.
async fn exchange(
    conn: &mut Conn,
    out: &[u8],
    ahead: usize,
    io: &mut Pair,
    max_held: usize,
    sent: &mut u64,
) -> Exchange {
    if let Err(e) = conn.tcp.write_all(out).await {
        return Exchange::Refused(format!("replica write: {e}"), false);
    }
    let mut swallow = ahead;
    let mut answer = BytesMut::new();
    let mut streamed = false;
    let mut refused: Option<String> = None;
    let mut readies = 0;
    let mut replay = None;
    let lost = |streamed: bool, why: String| match streamed {
        true => Exchange::Lost(format!("replica connection lost mid-answer: {why}")),
        false => Exchange::Refused(why, false),
    };
    loop {
        let h = match frame::peek_header(&conn.buf, usize::MAX) {
            Ok(h) => h,
            Err(e) => return lost(streamed, format!("replica sent {e}")),
        };
        let Some(h) = h.filter(|h| conn.buf.len() >= h.wire_len) else {
            conn.buf.reserve(8192);
            match conn.tcp.read_buf(&mut conn.buf).await {
                Ok(0) => return lost(streamed, "replica closed the connection".into()),
                Ok(_) => continue,
                Err(e) => return lost(streamed, format!("replica read: {e}")),
            }
        };
        let m = conn.buf.split_to(h.wire_len);
        if readies == 1 {
            // The replay query's answer.
            match h.tag {
                tag::DATA_ROW => {
                    // Promoted since its watcher last looked: its answer
                    // may be of a timeline the primary never had.
                    let in_recovery = backend::data_row_column(&m, 1).flatten();
                    replay = backend::data_row_column(&m, 0)
                        .flatten()
                        .and_then(|s| replicas::parse_lsn(&s))
                        .filter(|_| in_recovery.as_deref() == Some("t"));
                }
                tag::READY_FOR_QUERY => break,
                _ => {}
            }
            continue;
        }
        if swallow > 0 && refused.is_none() {
            match h.tag {
                tag::PARSE_COMPLETE | tag::CLOSE_COMPLETE => swallow -= 1,
                // The statement could not be made there: the server skips
                // the client's messages, which run on the primary.
                tag::ERROR_RESPONSE => refused = Some(replicas::why(&m)),
                // A notice or a report: not the client's.
                tag::NOTICE_RESPONSE | tag::PARAMETER_STATUS => {}
                _ => refused = Some("unexpected answer ahead of a read".into()),
            }
            continue;
        }
        match h.tag {
            tag::ERROR_RESPONSE => {
                let code = backend::error_field(&m, b'C').unwrap_or("");
                if backend::is_fatal(&m) || replica_refusal(code) {
                    if streamed {
                        return Exchange::Lost(replicas::why(&m));
                    }
                    refused = Some(replicas::why(&m));
                }
            }
            tag::READY_FOR_QUERY => readies += 1,
            // The replica's own reports are not the client's: it was told
            // the primary's.
            tag::PARAMETER_STATUS => continue,
            _ => {}
        }
        if refused.is_some() {
            // Read on to the end of the replay query's answer: the
            // connection stays usable.
            continue;
        }
        answer.extend_from_slice(&m);
        if answer.len() > max_held {
            streamed = true;
            *sent += answer.len() as u64;
            if let Err(e) = io.client.write_all(&answer).await {
                return Exchange::Lost(format!("client write: {e}"));
            }
            answer.clear();
        }
    }
    match refused {
        Some(why) => Exchange::Refused(why, true),
        None => Exchange::Done(answer.freeze(), replay),
    }
}
