//! A session's protocol state: what the relay forwards, counts, holds back
//! or answers itself. Pure bookkeeping over byte queues; no I/O here.

mod client;
mod client_txn;
mod coalesce;
mod cypher;
pub mod described;
pub mod flight;
#[doc(hidden)]
pub mod fuzzing;
mod listen;
mod named;
mod own;
mod pooled;
mod replay;
mod replica;
mod replica_group;
mod replica_txn;
mod server_conn;
mod server_params;
mod server_statements;
mod shared;
mod sql_prepared;
pub use listen::{Inbox, listen_answer, notification_channel};
pub use pooled::ServerStatements;
pub use replay::{Prep, Residue, Residues, ServerState, SessionSets, literal, prepare};
pub use replica_group::ReadGroup;
pub use server_conn::ServerConnection;
pub use server_params::ServerParams;
pub use sql_prepared::StatementCounts;
pub use statements::take_resting as take_resting_statements;
pub mod settings;
mod statements;
pub mod text;
mod told;
mod transaction;
mod upstream;
mod verdict;

use std::{sync::Arc, time::Instant};

use bytes::Bytes;
use onetrip_planner::words::Words;

use self::{
    coalesce::{Coalescer, Ctx, Out},
    cypher::{CypherSession, Route, SessionView, may_route, statement_text},
    flight::{Flight, Op, Own, Owner, SqlOp},
    settings::Settings,
    statements::Statements,
    text::Sql,
    transaction::Transaction,
};
use crate::{
    stats::{Counters, SessionInfo, SessionState},
    wire::{
        self, backend,
        frame::{self, FrameError, Piece, Splitter},
        frontend,
        queue::WriteQueue,
        tag,
    },
};
use client_txn::TxnStep;
use transaction::UnnamedFix;

/// What a session's protocol state uses of what all sessions share.
#[derive(Clone)]
pub struct Services {
    pub config: Arc<crate::config::Config>,
    pub stats: Arc<crate::stats::Stats>,
    pub cypher: Arc<crate::cypher_cache::CypherCache>,
    /// The planner, with the configured read-only functions.
    pub analyzer: Arc<onetrip_planner::analysis::Analyzer>,
    /// What statements tell transaction pooling and the password cache.
    pub pools: Arc<dyn PoolNotices>,
}

/// What a session's statements tell transaction pooling and the looked-up
/// passwords, which sit above this room (`pooling::Notices`).
pub trait PoolNotices: Send + Sync {
    /// A statement that needs `databases` without other sessions was
    /// sent: their pools close idle connections and open none.
    fn drain(&self, databases: &[String]);
    /// Its answer came: the pools open connections again.
    fn end_drain(&self, databases: &[String]);
    /// `role`'s password changed (`None`: some role's): its looked-up
    /// secrets and its pools' credential are forgotten, so that its next
    /// login looks it up again (the kept one would refuse the new
    /// password).
    fn forget_password(&self, role: Option<&str>);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Open,
    /// The client sent Terminate; it is forwarded and the session ends.
    Terminated,
}

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("invalid frontend message: {0}")]
    Frontend(FrameError),
    #[error("invalid message from upstream: {0}")]
    Backend(FrameError),
    #[error("the session's settings could not be made on a pooled server connection: {0}")]
    Prepare(String),
    /// `Flight::lost`.
    #[error(
        "onetrip cannot tell which answers the server still owes: a COPY failed \
         with a Sync or another message sent among its data"
    )]
    CopyLost,
}

impl ProtocolError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            ProtocolError::Frontend(e) => e.sqlstate(),
            ProtocolError::Backend(_) => "08P01",
            ProtocolError::Prepare(_) => "08006",
            ProtocolError::CopyLost => "0A000",
        }
    }
}

pub struct Protocol {
    pub services: Services,
    pub info: Arc<SessionInfo>,
    pub flow: Flow,
    csplit: Splitter,
    usplit: Splitter,
    /// A client flush request is waiting for its first answer byte.
    client_rt: bool,
    /// When the pending upstream round trip started.
    up_rt_start: Option<Instant>,
    delay_until: Option<Instant>,
    /// The pending round trip's answer has already served its delay.
    rt_delayed: bool,
    /// Transaction status from the last ReadyForQuery.
    pub txn_status: u8,
    /// Between CopyIn/CopyOut and the end of the COPY.
    pub in_copy: bool,
    /// What the upstream owes, and the prepared statements it holds.
    pub flight: Flight,
    /// What a client message about to go upstream does to the prepared
    /// statements.
    client_op: Op,
    /// The session's settings, as learned from the server.
    pub settings: Settings,
    /// The client's transaction, where it is answered here.
    pub txn: Transaction,
    /// The next Sync or Query sent ends a lazy read.
    lazy_next: bool,
    /// Messages of a group decided at its first go on until its end.
    txn_group: bool,
    /// What the server's unnamed statement must become before the client
    /// uses it (see `client_txn.rs`).
    unnamed_fix: Option<UnnamedFix>,
    /// A message waits for the settings' answer, which is on its way (the
    /// session's first, sent before the answer came; see `needs_settings`).
    held_for_settings: bool,
    /// Round trips per statement.
    pub statements: Statements,
    work_since_idle: bool,
    pub coalescer: Coalescer,
    pub cypher: CypherSession,
    /// Reused output lists of the coalescer (no allocation per message).
    out: Out,
    /// Client messages read but not yet handled when the client was paused.
    client_rest: Bytes,
    /// The last Query or Parse that went on unchanged and whose routing
    /// depends on nothing but its text, with its statement.
    last_plain: Option<(Bytes, Sql)>,
    /// `last_plain` is a copy of its own, apart from the read buffer.
    last_plain_apart: bool,
    /// The upstream connection may be kept for the next client when this
    /// session ends quietly (`[upstream] reuse`, and the session qualifies).
    pub keep_upstream: bool,
    /// The client's Terminate was not sent on, so the connection can be
    /// kept; it is sent when the connection is not kept after all.
    pub terminate_withheld: bool,
    /// The server's own FATAL went to the client: it knows why the
    /// connection ends, and hears nothing more from the proxy.
    pub fatal_relayed: bool,
    /// Messages went upstream since the last Sync, Query or FunctionCall.
    unsynced: bool,
    /// The server connection the session holds now (its ParameterStatus
    /// values tracked while `keep_upstream` or `pooled`, for the next
    /// client's greeting).
    /// Boxed, it goes to the pool and back as a pointer, and a session
    /// between transactions holds none (`server()`, `server_mut()`).
    server: Option<Box<ServerConnection>>,
    /// The client's own cancel key (`crate::cancel`), forgotten when the
    /// session ends.
    pub client_key: Option<crate::cancel::Key>,
    /// Transaction pooling: the session gives its server connection back
    /// at each release point (`pooled.rs`).
    pub pooled: bool,
    /// Why the session keeps its server connection anyway.
    pub pin: Option<&'static str>,
    /// Everything that pinned the session is undone by DISCARD ALL, so its
    /// connection can serve others once it ends (`pooled.rs`).
    pin_resettable: bool,
    /// Its pool's count of pinned sessions.
    pool_pins: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// The client's last unnamed Parse, to make its statement again on the
    /// next server connection.
    unnamed_parse: bytes::BytesMut,
    /// A server connection was just taken for the client's next bytes,
    /// which have not been read whole yet: it is not given back before.
    fresh_upstream: bool,
    /// The client's named statements, and the server connection's.
    named: named::Named,
    /// The client's settings that follow it (its startup packet's and its
    /// replayable `SET`s'), and the libraries it loaded.
    sets: SessionSets,
    /// Those its startup packet made: what RESET returns them to.
    startup: SessionSets,
    /// The values reported to the client for its startup parameters at
    /// login, and every reported value it has been told since.
    startup_told: Vec<(String, String)>,
    told: replay::Told,
    /// Startup settings a RESET took from the connection held now: made
    /// again before the client's next message on it, or on the next one.
    lacking: Vec<String>,
    loads: Residues,
    /// The group of a `SET` sent that is not in force yet
    /// (`follow_executed_set`).
    set_group: Option<u64>,
    /// What a replayable `SET` does, for the message about to go upstream.
    set_op: Option<Box<Op>>,
    /// The Query that makes the connection just taken the client's, to go
    /// ahead of its next message (`start_if_due`).
    prep_due: Option<Bytes>,
    /// That Query failed: the session can't go on over this connection.
    prep_failed: Option<String>,
    /// The client's startup packet sets what the settings query reads: it
    /// asks on every connection, and leaves none of its answers behind.
    pub own_defaults: bool,
    /// What the server connection held now needs before another client
    /// may use it (`onetrip_planner::classify::Pins::reset`).
    taint: onetrip_planner::classify::Reset,
    /// Databases whose pools drain for a statement of this session's
    /// (`Pools::drain`), until its answer.
    draining: Vec<String>,
    /// Roles whose password a statement of this session's changes
    /// (`None`: some role's): forgotten when it was sent, and again once
    /// its transaction is over (`Services::forget_password`).
    passwords_changed: Vec<Option<String>>,
    /// Greeted with no server connection: what `start` sends goes with the
    /// first one the session takes (`start_if_due`).
    start_due: bool,
    /// Routing reads to replicas: the client's floor (`replica.rs`).
    replica: Option<Box<replica::Floor>>,
    /// What the pool's listening connection leaves for the session, once
    /// it has listened there (`listen.rs`).
    notes: Option<Arc<listen::Inbox>>,
    /// A LISTEN or UNLISTEN of the session's went to its server: the rest
    /// go there too.
    listen_on_server: bool,
    /// Statements whose Parse was answered here, and descriptions being
    /// learned for the pool (`told/`).
    told_here: told::Told,
}

/// A Query or Parse after routing.
enum Routed {
    /// Goes on as it came; its statement text, if it has one.
    Plain(Option<Sql>),
    Rewritten(Bytes),
    Held(Option<Bytes>),
}

impl Protocol {
    pub fn new(services: Services, info: Arc<SessionInfo>) -> Self {
        let txn = Transaction::new(
            services.config.transactions.defer_begin,
            services.config.transactions.lazy_reads,
        );
        let co = Coalescer::new(&services);
        let cy = CypherSession::new(&services);
        Self {
            services,
            info,
            flow: Flow::Open,
            csplit: Splitter::default(),
            usplit: Splitter::default(),
            client_rt: false,
            up_rt_start: None,
            delay_until: None,
            rt_delayed: false,
            txn_status: b'I',
            in_copy: false,
            flight: Flight::default(),
            client_op: Op::None,
            settings: Settings::default(),
            held_for_settings: false,
            txn,
            fatal_relayed: false,
            lazy_next: false,
            txn_group: false,
            unnamed_fix: None,
            statements: Statements::default(),
            work_since_idle: false,
            coalescer: co,
            cypher: cy,
            out: Out::default(),
            client_rest: Bytes::new(),
            last_plain: None,
            last_plain_apart: false,
            keep_upstream: false,
            terminate_withheld: false,
            unsynced: false,
            server: None,
            client_key: None,
            pooled: false,
            pin: None,
            pin_resettable: true,
            pool_pins: None,
            unnamed_parse: bytes::BytesMut::new(),
            fresh_upstream: false,
            named: named::Named::default(),
            sets: SessionSets::new(),
            startup: SessionSets::new(),
            startup_told: Vec::new(),
            told: replay::Told::default(),
            lacking: Vec::new(),
            loads: replay::no_residue(),
            set_group: None,
            set_op: None,
            prep_due: None,
            prep_failed: None,
            own_defaults: false,
            draining: Vec::new(),
            passwords_changed: Vec::new(),
            taint: Default::default(),
            start_due: false,
            replica: None,
            notes: None,
            listen_on_server: false,
            told_here: told::Told::default(),
        }
    }

    pub fn on_server_version(&mut self, version: Option<&str>) {
        self.coalescer.on_server_version(version);
    }

    /// Nothing in flight either way, no transaction open, nothing held: the
    /// upstream connection is where a new one would be after DISCARD ALL
    /// (once the answers to the proxy's own queries, which may still be on
    /// their way, are read).
    pub fn quiet(&self) -> bool {
        self.txn_status == b'I' && self.still()
    }

    /// What `quiet` asks, but for the transaction status.
    fn still(&self) -> bool {
        self.flight.client_answered()
            && !self.flight.skipping()
            && !self.unsynced
            && !self.in_copy
            && self.coalescer.idle()
            && !self.cypher.blocks_client()
            && !self.usplit.in_pass()
            && !self.csplit.in_pass()
            && self.client_rest.is_empty()
            && self.delay_until.is_none()
    }

    /// When the upstream round trip whose answer is awaited started.
    pub fn awaiting_since(&self) -> Option<Instant> {
        self.up_rt_start
    }

    pub fn delay_until(&self) -> Option<Instant> {
        self.delay_until
    }

    pub fn delay_elapsed(&mut self) {
        self.delay_until = None;
    }

    /// Client input waits while a coalesced batch's outcome is unknown.
    pub fn client_paused(&self) -> bool {
        self.coalescer.pauses_client()
            || self.cypher.blocks_client()
            || self.held_for_settings
            || self.told_here.held
    }

    fn note_statement(&mut self, sql: Option<Sql>) {
        self.statements.start(sql);
        self.note_start();
    }

    /// A simple Query's statement: counted under its fingerprint.
    fn note_query(&mut self, sql: Option<&Sql>) {
        self.statements.start_query(sql);
        self.note_start();
    }

    fn note_start(&mut self) {
        Counters::add(&self.info.counters.statements, 1);
        self.work_since_idle = true;
        self.info.set_state(SessionState::Active);
    }

    /// Sends one client message, made or changed here.
    fn send_up(&mut self, to_up: &mut WriteQueue, bytes: Bytes, flush: bool, op: Op) {
        let t = bytes.first().copied().unwrap_or_default();
        self.queue_up(to_up, bytes);
        self.note_sent_up(t, flush, None, op);
    }

    /// Sends messages of the proxy's own (`bytes` may hold several); their
    /// answers are not the client's. `flush`: the client waits for them
    /// (otherwise they go with a client message, whose flush request
    /// starts the round trip).
    fn send_own_up(&mut self, to_up: &mut WriteQueue, bytes: Bytes, own: Own, flush: bool) {
        self.send_own_up_parsing(to_up, bytes, own, flush, None);
    }

    /// Like `send_own_up`; `parse`: the unnamed statement its Parse makes,
    /// for the prepared statements (a held BEGIN's extended form).
    fn send_own_up_parsing(
        &mut self,
        to_up: &mut WriteQueue,
        bytes: Bytes,
        own: Own,
        flush: bool,
        parse: Option<Sql>,
    ) {
        let mut parse = parse;
        for h in frame::headers(&bytes) {
            let op = match (h.tag, parse.take()) {
                (tag::PARSE, Some(sql)) => Op::Parse(String::new(), sql),
                (_, p) => {
                    parse = p;
                    Op::None
                }
            };
            self.note_sent_up(h.tag, flush, Some(own), op);
        }
        self.queue_up(to_up, bytes);
    }

    /// Queues bytes for the upstream and counts them.
    fn queue_up(&self, to_up: &mut WriteQueue, bytes: Bytes) {
        Counters::add(&self.info.counters.bytes_to_upstream, bytes.len() as u64);
        to_up.push(bytes);
    }

    /// A message of type `t` went upstream; `flush`: the server answers
    /// what it has now, which starts an upstream round trip if none is on.
    fn note_sent_up(&mut self, t: u8, flush: bool, own: Option<Own>, op: Op) {
        if !self.flight.sent(t, own, op) {
            // Read by the server as COPY data: nothing of its own.
            return;
        }
        if own.is_none() && self.lazy_next && matches!(t, tag::SYNC | tag::QUERY) {
            self.lazy_next = false;
            self.flight.mark_lazy();
            Counters::add(&self.info.counters.lazy_reads, 1);
        }
        match t {
            tag::SYNC | tag::QUERY | tag::FUNCTION_CALL => self.unsynced = false,
            tag::COPY_DATA | tag::COPY_DONE | tag::COPY_FAIL | tag::FLUSH => {}
            _ => self.unsynced = true,
        }
        if flush && self.up_rt_start.is_none() {
            self.up_rt_start = Some(crate::worker::deadlines::now());
        }
    }

    /// Sends bytes to the client, ending a client round trip if one waits.
    fn emit(&mut self, to_client: &mut WriteQueue, bytes: Bytes) {
        if self.fatal_relayed {
            // The server's FATAL ended the connection: nothing follows it.
            return;
        }
        self.note_client_answer();
        Counters::add(&self.info.counters.bytes_to_client, bytes.len() as u64);
        to_client.push(bytes);
    }

    /// The first answer to a client's flush request ends its round trip.
    fn note_client_answer(&mut self) {
        if self.client_rt {
            self.client_rt = false;
            Counters::add(&self.info.counters.client_round_trips, 1);
            if let Some(c) = self.statements.current() {
                c.client_round_trips += 1;
            }
        }
    }

    /// Runs `f` on the coalescer with what the session knows.
    fn with_coalescer<R>(&mut self, f: impl FnOnce(&mut Coalescer, &Ctx, &mut Out) -> R) -> R {
        // A held BEGIN on its way opens the block the batch runs in; the
        // proxy's own statements' ReadyForQuery are not the batch's.
        let txn_status = match self.flight.begin_on_its_way() {
            true => b'T',
            false => self.txn_status,
        };
        let ctx = Ctx {
            flight: &self.flight,
            txn_status,
            awaiting_ready: self.flight.awaiting_client_ready(),
            in_copy: self.in_copy,
            info: &self.info,
            services: &self.services,
            named: &self.named,
        };
        f(&mut self.coalescer, &ctx, &mut self.out)
    }

    fn drain_out(&mut self, to_client: &mut WriteQueue, to_up: &mut WriteQueue) {
        if self.out.is_empty() {
            return;
        }
        let mut out = std::mem::take(&mut self.out);
        for bytes in out.to_client.drain(..) {
            self.emit(to_client, bytes);
        }
        for (bytes, own) in out.to_upstream.drain(..) {
            match own {
                Some(own) => self.send_own_up(to_up, bytes, own, false),
                None => {
                    let flush = bytes.first().is_some_and(|t| wire::is_flush_request(*t));
                    self.send_up(to_up, bytes, flush, Op::None);
                }
            }
        }
        self.out = out;
    }
}

/// Backend messages read whole even when nothing is held: small ones whose
/// content or position matters.
fn wants_whole(t: u8) -> bool {
    matches!(
        t,
        tag::READY_FOR_QUERY
            | tag::ERROR_RESPONSE
            | tag::COPY_IN_RESPONSE
            | tag::COPY_OUT_RESPONSE
            | tag::COPY_BOTH_RESPONSE
            | tag::COMMAND_COMPLETE
            | tag::PARAMETER_STATUS
    )
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod size {
    /// Every client holds a `Protocol` for its whole life, idle or not:
    /// what only some sessions use, or only now and then, is boxed and
    /// made when first needed (the server connection's record, statements
    /// told here, a replica floor). A field that grows it past this wants
    /// the same treatment.
    #[test]
    fn a_protocol_state_stays_small() {
        let size = std::mem::size_of::<super::Protocol>();
        assert!(size <= 1700, "Protocol is {size} bytes");
    }
}
