//! A session's reads on a replica (`[replicas]`; in session mode in this
//! task's relay, in transaction pooling between transactions, in
//! `session::pooled::between`): at a quiet moment, a simple Query, or a whole group of
//! extended-protocol messages up to its Sync, at the head of the client's
//! bytes that the planner proves pure reads (`protocol/replica.rs`,
//! `protocol/replica_group.rs`) goes to a replica that has replayed the
//! client's floor, on the session's own replica connection, opened at its
//! first such read and kept (session mode), or on one of its pool's,
//! leased for the read and given back (`lease.rs`). Named statements a group binds are made there
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

mod exchange;
mod lease;

use std::{
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use tokio::net::TcpStream;
use tracing::debug;

use super::{Closer, End, Room};
use crate::{
    config::Consistency,
    net::Stream,
    protocol::{Protocol, ReadGroup},
    replicas::{self, Replicas, spare::Spare},
    stats::Counters,
    wire::{frame, startup, tag},
};
use exchange::{Exchange, Plan, exchange};

/// How long a replica that could not be opened is left alone by the
/// session.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A session's way to its replicas.
pub(crate) struct Detour {
    replicas: Arc<Replicas>,
    /// The client's startup parameters, for its replica connections.
    params: Arc<[(String, String)]>,
    /// Transaction pooling: the pool's replica connections, one leased
    /// per read or read only transaction.
    spare: Option<Arc<Spare>>,
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
    /// A read only transaction the replica runs for the client.
    txn: Option<Txn>,
    /// The replica connection's transaction moved to the primary: it is
    /// rolled back ahead of the connection's next use.
    rollback_due: bool,
    rollback_query: Bytes,
}

struct Conn {
    replica: usize,
    tcp: TcpStream,
    buf: BytesMut,
    /// A pooled connection's place under its pool's cap.
    place: Option<replicas::spare::Place>,
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
    /// In a transaction a replica runs, where it goes is not known yet
    /// (the message is not whole, the client has answers to take): nothing
    /// of the client's is handled meanwhile.
    Hold,
    End(End),
}

impl Detour {
    /// The session's detour, if its reads may go to replicas: some are
    /// configured, it is no replication connection, and it is not pooled
    /// or is pinned (it then keeps its connection as in session mode, and
    /// its own replica connection with it).
    pub(crate) fn new(
        replicas: &Arc<Replicas>,
        proto: &mut Protocol,
        startup_raw: &Bytes,
    ) -> Option<Detour> {
        if proto.pooled && !proto.pinned() {
            return None;
        }
        Self::make(replicas, proto, startup_raw, None)
    }

    /// A pooled session's detour, over its pool's replica connections
    /// (`spare`): made as the session starts, so that the floor counts
    /// every write it sends.
    pub(crate) fn pooled(
        replicas: &Arc<Replicas>,
        proto: &mut Protocol,
        startup_raw: &Bytes,
        spare: Arc<Spare>,
    ) -> Option<Box<Detour>> {
        Self::make(replicas, proto, startup_raw, Some(spare)).map(Box::new)
    }

    fn make(
        replicas: &Arc<Replicas>,
        proto: &mut Protocol,
        startup_raw: &Bytes,
        spare: Option<Arc<Spare>>,
    ) -> Option<Detour> {
        if replicas.is_empty() {
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
            params: params.into(),
            spare,
            conn: None,
            from: proto.info.id as usize % replicas.list.len(),
            connect_timeout: config.upstream.connect_timeout,
            max_held: config.coalesce.max_held_bytes,
            retry_at: None,
            replay_query: replicas::query_message(
                "SELECT pg_catalog.pg_last_wal_replay_lsn(), pg_catalog.pg_is_in_recovery()",
            ),
            out: BytesMut::new(),
            txn: None,
            rollback_due: false,
            rollback_query: replicas::query_message("ROLLBACK"),
        })
    }

    /// Runs the client's next message on a replica if it may go there.
    /// A pooled session's connection goes back to its pool after it,
    /// unless a read only transaction goes on there.
    pub(crate) async fn route(
        &mut self,
        io: &mut Stream,
        proto: &mut Protocol,
        b: &mut Room,
        forced: &mut Closer,
    ) -> Detoured {
        let routed = match self.txn.is_some() {
            true => self.route_in_txn(io, proto, b, forced).await,
            false => self.route_read(io, proto, b, forced).await,
        };
        if self.spare.is_some() {
            self.give_back(proto);
        }
        routed
    }

    async fn route_read(
        &mut self,
        io: &mut Stream,
        proto: &mut Protocol,
        b: &mut Room,
        forced: &mut Closer,
    ) -> Detoured {
        if b.to_up.wants_write() || b.to_client.wants_write() {
            return Detoured::No;
        }
        // A BEGIN held here whose transaction a replica may run.
        let held = match proto.may_detour() {
            true => None,
            false if proto.may_detour_held() => match proto.held_begin_for_replica() {
                Some(h) => Some(h),
                None => return Detoured::No,
            },
            false => return Detoured::No,
        };
        let Some((len, group, sets_read_only)) = head(proto, &b.cin, held.is_some()) else {
            return Detoured::No;
        };
        // A read only transaction's first statement, or a plain one's SET
        // TRANSACTION READ ONLY.
        if let Some((_, read_only)) = &held
            && *read_only == sets_read_only
        {
            return Detoured::No;
        }
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
        // replay query (ahead of the client's statement in a transaction,
        // which may fail and take the query with it).
        let mut plan = self.begin_write();
        if let Some((frames, _)) = &held {
            self.out.extend_from_slice(frames);
            plan.queries += 1;
            plan.replay_first = true;
            self.out.extend_from_slice(&self.replay_query);
        }
        if group.is_some() {
            plan.ahead = proto.replica_ahead(&b.cin[..len], &mut self.out);
        }
        self.out.extend_from_slice(&b.cin[..len]);
        if held.is_none() {
            plan.replay_after = true;
            self.out.extend_from_slice(&self.replay_query);
        }
        let run = tokio::select! {
            biased;
            end = &mut *forced => return Detoured::End(end),
            run = self.run(plan, io) => run,
        };
        match run {
            Ran::Answered(answer, replay, status, streamed) => {
                let head = self.served(proto, b, len, group, answer, status, streamed);
                if let Some((frames, _)) = held {
                    proto.held_begin_to_replica();
                    // What makes the same transaction on the primary, if
                    // it must go on there.
                    let frames = match sets_read_only {
                        true => Bytes::from([&frames[..], &head[..]].concat()),
                        false => frames,
                    };
                    self.txn = (status != b'I').then_some(Txn { frames, status });
                }
                proto.raise_floor(replay.unwrap_or(0));
                self.replicas.list[i].reads.fetch_add(1, Relaxed);
                Detoured::Served
            }
            Ran::Refused(why) => {
                if group.is_some() {
                    proto.replica_ahead_failed();
                }
                if held.is_some() {
                    // The BEGIN may have run there: the held one goes to
                    // the primary with the statement, and the replica's
                    // is rolled back.
                    self.rollback_due = self.conn.is_some();
                }
                debug!(replica = %self.replicas.list[i].address, "read run on the primary: {why}");
                Counters::add(&proto.info.counters.replica_reruns, 1);
                Detoured::No
            }
            Ran::Lost(why) => Detoured::End(End::Error(why)),
        }
    }

    /// In a transaction a replica runs: a read, or its end, goes there
    /// too; anything else moves it to the primary (`replica_txn.rs`).
    /// Nothing goes to the primary before that is decided.
    async fn route_in_txn(
        &mut self,
        io: &mut Stream,
        proto: &mut Protocol,
        b: &mut Room,
        forced: &mut Closer,
    ) -> Detoured {
        if b.to_client.wants_write() || !whole_head(&b.cin) {
            return Detoured::Hold;
        }
        if b.cin.first() == Some(&tag::TERMINATE) {
            // The replica's transaction ends with its connection; the
            // primary's holds nothing of it.
            self.txn = None;
            return Detoured::No;
        }
        let routed = head(proto, &b.cin, false);
        let ends = || {
            frame::peek_header(&b.cin, usize::MAX)
                .ok()
                .flatten()
                .is_some_and(|h| h.tag == tag::QUERY)
        };
        let (len, group) = match routed {
            Some((len, group, _)) => (len, group),
            None if ends() && proto.ends_transaction(first_message(&b.cin)) => {
                (first_message(&b.cin).len(), None)
            }
            None => return self.move_to_primary(proto),
        };
        let plan = self.begin_write();
        let plan = Plan {
            ahead: match group {
                Some(_) => proto.replica_ahead(&b.cin[..len], &mut self.out),
                None => 0,
            },
            ..plan
        };
        self.out.extend_from_slice(&b.cin[..len]);
        let run = tokio::select! {
            biased;
            end = &mut *forced => return Detoured::End(end),
            run = self.run(plan, io) => run,
        };
        match run {
            Ran::Answered(answer, _, status, streamed) => {
                self.served(proto, b, len, group, answer, status, streamed);
                match status {
                    b'I' => self.txn = None,
                    s => {
                        if let Some(t) = self.txn.as_mut() {
                            t.status = s;
                        }
                    }
                }
                Detoured::Served
            }
            Ran::Refused(why) => {
                if group.is_some() {
                    proto.replica_ahead_failed();
                }
                debug!("transaction moved to the primary: {why}");
                Counters::add(&proto.info.counters.replica_reruns, 1);
                self.move_to_primary(proto)
            }
            Ran::Lost(why) => Detoured::End(End::Error(why)),
        }
    }

    /// The transaction a replica ran goes on on the primary; the replica
    /// connection's is rolled back ahead of its next use.
    fn move_to_primary(&mut self, proto: &mut Protocol) -> Detoured {
        if let Some(t) = self.txn.take() {
            proto.replica_txn_to_primary(t.frames, t.status == b'E');
        }
        self.rollback_due = self.conn.is_some();
        Detoured::No
    }

    /// The write's room, with the ROLLBACK due first.
    fn begin_write(&mut self) -> Plan {
        self.out.clear();
        let mut plan = Plan::default();
        if self.rollback_due {
            self.out.extend_from_slice(&self.rollback_query);
            plan.queries += 1;
        }
        plan
    }

    /// A replica answered the client's `len` bytes: they leave `cin`
    /// (returned), the answer is queued, the session told.
    #[allow(clippy::too_many_arguments)]
    fn served(
        &mut self,
        proto: &mut Protocol,
        b: &mut Room,
        len: usize,
        group: Option<ReadGroup>,
        answer: Bytes,
        status: u8,
        streamed: u64,
    ) -> Bytes {
        self.rollback_due = false;
        let head = b.cin.split_to(len).freeze();
        let n = answer.len() as u64 + streamed;
        if !answer.is_empty() {
            b.to_client.push(answer);
        }
        proto.on_detoured(n, group.map_or(1, |g| g.executes), status);
        if let Some(g) = group {
            proto.on_detoured_group(g, &head);
        }
        head
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
        let place = match self.lease(i, proto) {
            lease::Leased::Conn => return true,
            lease::Leased::Open(place) => place,
            lease::Leased::No => return false,
        };
        let params: Vec<(&str, &str)> = self
            .params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let addr = &self.replicas.list[i].address;
        match replicas::open(addr, &params, self.connect_timeout).await {
            Ok((tcp, buf)) => {
                proto.replica_connection_new();
                self.rollback_due = false;
                self.conn = Some(Conn {
                    replica: i,
                    tcp,
                    buf,
                    place,
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

    /// Sends `out`; reads the answers `plan` says it holds.
    async fn run(&mut self, plan: Plan, io: &mut Stream) -> Ran {
        let Some(conn) = self.conn.as_mut() else {
            return Ran::Refused("no connection".into());
        };
        let mut sent = 0;
        let ran = exchange(conn, &self.out, plan, io, self.max_held, &mut sent).await;
        let asked = plan.replay_first || plan.replay_after;
        match ran {
            Exchange::Done(_, None, _) if asked => {
                self.conn = None;
                Ran::Refused("out of recovery, or no replay position".into())
            }
            Exchange::Done(answer, replay, status) => Ran::Answered(answer, replay, status, sent),
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

/// A transaction a replica runs for the client.
struct Txn {
    /// What began it, as the client sent it: made again on the primary if
    /// the transaction moves there.
    frames: Bytes,
    /// Its status after the client's last message (`T`, or `E` failed).
    status: u8,
}

enum Ran {
    /// The answer for the client (what is left of it after what streamed
    /// to it), the replica's replay position after it (when asked), the
    /// client's transaction status, and the bytes that streamed.
    Answered(Bytes, Option<u64>, u8, u64),
    /// Run it on the primary.
    Refused(String),
    /// The replica failed after part of the answer reached the client.
    Lost(String),
}

/// The head of `cin`, if a replica may run it: its length, its group
/// when it is one, and whether it is a `SET TRANSACTION READ ONLY` (looked
/// for only when `held`, a plain BEGIN being held).
fn head(proto: &mut Protocol, cin: &[u8], held: bool) -> Option<(usize, Option<ReadGroup>, bool)> {
    let max = proto.services.config.limits.max_message_bytes;
    let h = frame::peek_header(cin, max).ok()??;
    match h.tag {
        tag::QUERY if cin.len() >= h.wire_len => {
            let msg = &cin[..h.wire_len];
            if proto.replica_read(msg) {
                Some((h.wire_len, None, false))
            } else if held && Protocol::sets_read_only(msg) {
                Some((h.wire_len, None, true))
            } else {
                None
            }
        }
        tag::PARSE | tag::BIND => proto.replica_group(cin).map(|g| (g.len, Some(g), false)),
        _ => None,
    }
}

/// The first whole message of `cin`.
fn first_message(cin: &[u8]) -> &[u8] {
    let len = frame::peek_header(cin, usize::MAX)
        .ok()
        .flatten()
        .map_or(0, |h| h.wire_len);
    cin.get(..len).unwrap_or_default()
}

/// `cin` holds enough to decide where its head goes: a whole message that
/// is not of the extended protocol, or a whole run of them up to the
/// first message that is not (a Sync; a Flush, after which the client
/// may wait, and which goes to the primary).
pub(crate) fn whole_head(cin: &[u8]) -> bool {
    frame::messages(cin).any(|(t, _)| {
        !matches!(
            t,
            tag::PARSE | tag::BIND | tag::DESCRIBE | tag::EXECUTE | tag::CLOSE
        )
    })
}
