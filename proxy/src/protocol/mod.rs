//! A session's protocol state: what the relay forwards, counts, holds back
//! or answers itself. Pure bookkeeping over byte queues; no I/O here.

mod coalesce;
mod cypher;
pub mod flight;
pub mod settings;
mod statements;
pub mod text;
mod verdict;

use std::{sync::Arc, time::Instant};

use bytes::{Bytes, BytesMut};

use self::{
    coalesce::{Coalescer, Ctx, Out},
    cypher::{CypherSession, Route, SessionView, may_route, statement_text},
    flight::{Flight, Op, Own, Owner},
    settings::{Settings, lists_age},
    statements::Statements,
    text::Sql,
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
    words::Words,
};
use onetrip_planner::classify::{PreparedOp, loaded_libraries, prepared_ops};

/// What a session's protocol state uses of what all sessions share.
#[derive(Clone)]
pub struct Services {
    pub config: Arc<crate::config::Config>,
    pub stats: Arc<crate::stats::Stats>,
    pub cypher: Arc<crate::cypher_cache::CypherCache>,
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
}

impl ProtocolError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            ProtocolError::Frontend(FrameError::TooLarge { .. }) => "54000",
            _ => "08P01",
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
    /// A message waits for the settings' answer, which is on its way (the
    /// session's first, sent before the answer came; see `needs_settings`).
    held_for_settings: bool,
    /// Round trips per statement.
    pub statements: Statements,
    work_since_idle: bool,
    pub co: Coalescer,
    pub cy: CypherSession,
    /// Reused output lists of the coalescer (no allocation per message).
    out: Out,
    /// Client messages read but not yet handled when the client was paused.
    client_rest: Bytes,
    /// The last Query or Parse that went on unchanged and whose routing
    /// depends on nothing but its text, with its statement.
    last_plain: Option<(Bytes, Sql)>,
    /// The upstream connection may be kept for the next client when this
    /// session ends quietly (`[upstream] reuse`, and the session qualifies).
    pub keep_upstream: bool,
    /// The client's Terminate was not sent on, so the connection can be
    /// kept; it is sent when the connection is not kept after all.
    pub terminate_withheld: bool,
    /// Messages went upstream since the last Sync, Query or FunctionCall.
    unsynced: bool,
    /// The upstream's latest ParameterStatus values (tracked while
    /// `keep_upstream`, for the next client's greeting).
    pub server_params: Vec<(String, String)>,
    /// The upstream backend's BackendKeyData message.
    pub upstream_key: Option<Bytes>,
    /// When the upstream connection was opened (`upstream.reuse_lifetime`).
    pub upstream_opened: Instant,
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
        let co = Coalescer::new(&services);
        let cy = CypherSession::new(&services, &info.database);
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
            statements: Statements::default(),
            work_since_idle: false,
            co,
            cy,
            out: Out::default(),
            client_rest: Bytes::new(),
            last_plain: None,
            keep_upstream: false,
            terminate_withheld: false,
            unsynced: false,
            server_params: Vec::new(),
            upstream_key: None,
            upstream_opened: Instant::now(),
        }
    }

    pub fn on_server_params(&mut self, params: &[(String, String)]) {
        self.co.on_server_params(params);
    }

    /// Nothing in flight either way, no transaction open, nothing held: the
    /// upstream connection is where a new one would be after DISCARD ALL
    /// (once the answers to the proxy's own queries, which may still be on
    /// their way, are read).
    pub fn quiet(&self) -> bool {
        self.txn_status == b'I'
            && self.flight.client_answered()
            && !self.unsynced
            && !self.in_copy
            && self.co.idle()
            && !self.cy.blocks_client()
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
        self.co.pauses_client() || self.cy.blocks_client() || self.held_for_settings
    }

    // ---- client -> upstream ----

    pub fn on_client_bytes(
        &mut self,
        cin: &mut BytesMut,
        to_up: &mut WriteQueue,
        to_client: &mut WriteQueue,
    ) -> Result<(), ProtocolError> {
        // Nothing read and nothing held: the usual case after a wake-up by
        // the upstream, and on the loop's second look.
        if cin.is_empty()
            && self.client_rest.is_empty()
            && !self.csplit.in_pass()
            && !self.cy.holds_message()
        {
            return Ok(());
        }
        let max = self.services.config.limits.max_message_bytes;
        while self.flow == Flow::Open && !self.client_paused() {
            // A message held for the catalog is routed again, as it came.
            if let Some((_, msg)) = self.cy.take_pending() {
                self.on_client_chunk(msg, to_up, to_client);
                continue;
            }
            if !self.client_rest.is_empty() {
                let rest = std::mem::take(&mut self.client_rest);
                self.on_client_chunk(rest, to_up, to_client);
                continue;
            }
            let n = if self.csplit.in_pass() {
                0
            } else {
                frame::complete_len(cin, max).map_err(ProtocolError::Frontend)?
            };
            if n > 0 {
                let chunk = cin.split_to(n).freeze();
                self.on_client_chunk(chunk, to_up, to_client);
                continue;
            }
            // A CopyData that has not arrived whole streams through as it
            // comes; any other message waits until it is whole.
            let piece = self
                .csplit
                .next(cin, max, |t| t != tag::COPY_DATA)
                .map_err(ProtocolError::Frontend)?;
            match piece {
                Some(Piece::Pass(_, bytes)) => {
                    if !self.co.discarding() {
                        // Part of a CopyData: its first byte is data, not a
                        // message type, so nothing is counted by it.
                        self.queue_up(to_up, bytes);
                    }
                }
                Some(Piece::Whole(_, msg)) => self.on_client_chunk(msg, to_up, to_client),
                None => break,
            }
        }
        Ok(())
    }

    /// Handles the whole messages in `chunk` in order. Those that go on as
    /// they came are queued as parts of `chunk`, so a read's worth of them
    /// costs one slice. What is left when the client gets paused is kept.
    fn on_client_chunk(
        &mut self,
        chunk: Bytes,
        to_up: &mut WriteQueue,
        to_client: &mut WriteQueue,
    ) {
        let mut at = 0;
        let mut forwarded = 0;
        while at < chunk.len() {
            if self.flow != Flow::Open || self.client_paused() {
                self.client_rest = chunk.slice(at..);
                break;
            }
            let Ok(Some(h)) = frame::peek_header(&chunk[at..], usize::MAX) else {
                break;
            };
            let end = at + h.wire_len;
            if self.waits_for_settings(h.tag, &chunk[at..end], to_up) {
                self.client_rest = chunk.slice(at..);
                break;
            }
            let forward = if h.tag == tag::COPY_DATA {
                !self.co.discarding()
            } else {
                self.on_client_message(h.tag, &chunk.slice(at..end), to_up, to_client)
            };
            let op = std::mem::replace(&mut self.client_op, Op::None);
            if forward {
                self.forward_up(to_up, &chunk, at, end, op);
                forwarded += h.wire_len;
            }
            at = end;
        }
        Counters::add(&self.info.counters.bytes_to_upstream, forwarded as u64);
    }

    /// Does the client's next message wait for the session's settings? A
    /// Flush that may end a batch to coalesce, and a statement that may
    /// call cypher(), wait for an answer on its way (it comes within the
    /// server's time for a trivial query) rather than do without; a
    /// cypher() statement after a change to the search path has it asked
    /// for again, and waits too.
    fn waits_for_settings(&mut self, t: u8, msg: &[u8], to_up: &mut WriteQueue) -> bool {
        let waiting = self.settings.waiting();
        if !waiting && !self.settings.wants_search_path() {
            return false;
        }
        let needs = match t {
            tag::FLUSH => waiting && self.co.may_coalesce_batch(),
            tag::QUERY | tag::PARSE => {
                self.cy.enabled()
                    && statement_text(t, msg).is_some_and(|s| Words::scan(s).any(Words::CYPHER))
            }
            _ => false,
        };
        if needs && !waiting {
            if !self.quiet_upstream() {
                return false;
            }
            let q = self.settings.ask();
            self.send_own_up(to_up, q, Own::Settings, false);
        }
        self.held_for_settings = needs;
        needs
    }

    /// Nothing of the client's is on its way upstream and no transaction
    /// is open: a query of the proxy's own can run now, unseen.
    fn quiet_upstream(&self) -> bool {
        self.txn_status == b'I'
            && self.flight.client_answered()
            && !self.unsynced
            && !self.in_copy
            && self.co.idle()
    }

    /// Queues `buf[start..end]`, one message as the client sent it (the
    /// caller counts its bytes).
    fn forward_up(
        &mut self,
        to_up: &mut WriteQueue,
        buf: &Bytes,
        start: usize,
        end: usize,
        op: Op,
    ) {
        let t = buf[start];
        to_up.push_part(buf, start, end);
        self.note_sent_up(t, wire::is_flush_request(t), None, op);
    }

    /// Handles one client message; true when it goes upstream as it came
    /// (the caller queues it), false when it was answered, held, dropped or
    /// replaced here.
    fn on_client_message(
        &mut self,
        t: u8,
        msg: &Bytes,
        to_up: &mut WriteQueue,
        to_client: &mut WriteQueue,
    ) -> bool {
        // The statement, found once for routing and for the statement kept
        // below, unless routing rewrote the message.
        let mut sql = None;
        let mut rewritten = None;
        if t == tag::QUERY || t == tag::PARSE {
            match self.route(t, msg) {
                Routed::Plain(s) => sql = s,
                Routed::Rewritten(m) => rewritten = Some(m),
                Routed::Held(query) => {
                    if let Some(q) = query {
                        self.send_own_up(to_up, q, Own::Cypher, true);
                    }
                    return false;
                }
            }
        }
        let msg = rewritten.as_ref().unwrap_or(msg);
        if wire::is_flush_request(t) {
            self.client_rt = true;
        }
        match t {
            tag::QUERY => {
                sql = sql
                    .or_else(|| frontend::query_text(msg).map(|text| Sql::within(msg, text, None)));
                if let Some(sql) = &sql {
                    self.co.on_simple_query(sql);
                    self.note_settings_change(sql.words());
                }
                self.note_statement(sql.clone());
            }
            tag::EXECUTE => {
                let sql = self.co.batch_statement();
                if let Some(sql) = &sql {
                    self.note_settings_change(sql.words());
                }
                self.note_statement(sql);
            }
            tag::TERMINATE => {
                self.flow = Flow::Terminated;
                if self.keep_upstream && self.quiet() {
                    self.terminate_withheld = true;
                    return false;
                }
            }
            _ => {}
        }
        // The coalescer decides what, if anything, goes upstream; what it
        // sends of its own goes first.
        let forward = self.coalescer(|co, ctx, out| co.on_client_message(t, msg, ctx, out));
        self.drain_out(to_client, to_up);
        let op = self.follow_prepared(t, msg, sql);
        match rewritten {
            Some(m) if forward => {
                self.send_up(to_up, m, wire::is_flush_request(t), op);
                false
            }
            _ => {
                self.client_op = op;
                forward
            }
        }
    }

    /// Relaying starts: the session's settings are asked for at once, so
    /// the answer is in before the client's first statement needs it (the
    /// client is still reading its greeting). No round trip is counted: the
    /// client waits for nothing.
    pub fn start(&mut self, to_up: &mut WriteQueue) {
        if self.settings.asked() {
            // A kept connection's, learned by an earlier client.
            self.co
                .on_default_isolation(self.settings.default_isolation());
        } else {
            let q = self.settings.ask();
            self.send_own_up(to_up, q, Own::Settings, false);
        }
    }

    /// A statement with these words may change the search path (SET
    /// search_path or SCHEMA, set_config, RESET, DISCARD ALL).
    fn note_settings_change(&mut self, w: Words) {
        if w.any(Words::SEARCH_PATH | Words::SCHEMA | Words::CONFIG | Words::RESET | Words::DISCARD)
        {
            self.settings.search_path_may_change();
        }
    }

    /// What a client message on its way does to the prepared statements
    /// (`sql`: its statement, when routing found it). Drops take effect at
    /// once (an unknown statement is never coalesced); what is created is
    /// recorded when the server accepts it.
    fn follow_prepared(&mut self, t: u8, msg: &Bytes, sql: Option<Sql>) -> Op {
        match t {
            tag::PARSE => {
                if let Some((name, text)) = frontend::parse(msg) {
                    let sql = sql.unwrap_or_else(|| Sql::within(msg, text, None));
                    return Op::Parse(name.to_owned(), sql);
                }
            }
            tag::CLOSE => {
                if let Some((b'S', name)) = frontend::target(msg) {
                    self.flight.forget(name);
                }
            }
            tag::QUERY => {
                if let Some(sql) = &sql {
                    return self.follow_sql_prepared(sql);
                }
            }
            tag::EXECUTE => {
                if let Some(sql) = self.co.batch_statement() {
                    return self.follow_sql_prepared(&sql);
                }
            }
            _ => {}
        }
        Op::None
    }

    /// SQL's PREPARE, DEALLOCATE and DISCARD ALL act on the same statements
    /// as Parse and Close.
    fn follow_sql_prepared(&mut self, sql: &Sql) -> Op {
        let w = sql.words();
        if w.all(Words::LOAD | Words::AGE)
            && !w.any(Words::PREPARE)
            && loaded_libraries(sql.as_str()).iter().any(|l| lists_age(l))
        {
            return Op::LoadAge;
        }
        if !w.any(Words::PREPARE | Words::DEALLOCATE | Words::DISCARD) {
            return Op::None;
        }
        let mut prepares = Vec::new();
        for op in prepared_ops(sql.as_str()) {
            match op {
                PreparedOp::Prepare { name, text } => prepares.push((name, sql.part(text))),
                PreparedOp::Deallocate(name) => self.flight.forget(&name),
                PreparedOp::DeallocateAll | PreparedOp::Unknown => self.flight.forget_all(),
                PreparedOp::Execute { .. } => {}
            }
        }
        if prepares.is_empty() {
            Op::None
        } else {
            Op::Prepare(prepares)
        }
    }

    /// Routes a Query or Parse through the Cypher planner, unless it is the
    /// statement routed just before (a client repeating its unnamed
    /// statement), which went on unchanged: then it goes on again, and its
    /// statement is the one found then.
    fn route(&mut self, t: u8, msg: &Bytes) -> Routed {
        if let Some((last, sql)) = &self.last_plain
            && last == msg
        {
            return Routed::Plain(Some(sql.clone()));
        }
        let Some(text) = statement_text(t, msg) else {
            return Routed::Plain(None);
        };
        let words = Words::scan(text);
        let sql = Sql::within(msg, text, Some(words));
        if !may_route(words) {
            // Nothing about it depends on the session's state: remember it.
            self.last_plain = Some((msg.clone(), sql.clone()));
            return Routed::Plain(Some(sql));
        }
        // The session's own settings query may still be on its way: it
        // leaves the transaction status as it is.
        let quiet = self.quiet_upstream();
        let view = SessionView {
            quiet,
            ag_catalog_on_path: self.settings.ag_catalog_on_path(),
            age_loaded: self.settings.age_loaded() || self.flight.age_loaded,
        };
        match self
            .cy
            .route(msg, text, words, &view, &self.services, &self.info)
        {
            Route::Forward => Routed::Plain(Some(sql)),
            Route::Rewritten(m) => Routed::Rewritten(m),
            Route::Held(q) => Routed::Held(q),
        }
    }

    fn note_statement(&mut self, sql: Option<Sql>) {
        Counters::add(&self.info.counters.statements, 1);
        self.work_since_idle = true;
        self.statements.start(sql);
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
        for h in frame::headers(&bytes) {
            self.note_sent_up(h.tag, flush, Some(own), Op::None);
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
        self.flight.sent(t, own, op);
        match t {
            tag::SYNC | tag::QUERY | tag::FUNCTION_CALL => self.unsynced = false,
            tag::COPY_DATA | tag::COPY_DONE | tag::COPY_FAIL | tag::FLUSH => {}
            _ => self.unsynced = true,
        }
        if flush && self.up_rt_start.is_none() {
            self.up_rt_start = Some(Instant::now());
        }
    }

    /// Sends bytes to the client, ending a client round trip if one waits.
    fn emit(&mut self, to_client: &mut WriteQueue, bytes: Bytes) {
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

    // ---- upstream -> client ----

    pub fn on_upstream_bytes(
        &mut self,
        uin: &mut BytesMut,
        to_client: &mut WriteQueue,
        to_up: &mut WriteQueue,
    ) -> Result<(), ProtocolError> {
        if self.delay_until.is_some() || (uin.is_empty() && !self.usplit.in_pass()) {
            return Ok(());
        }
        if let Some(start) = self.up_rt_start {
            let rtt = self.services.config.upstream.rtt;
            if !rtt.is_zero() && !self.rt_delayed {
                // Simulated distance, added to the real round trip: the
                // answer is held back as a whole, never reordered.
                self.rt_delayed = true;
                self.delay_until = Some(Instant::now() + rtt);
                return Ok(());
            }
            self.rt_delayed = false;
            self.up_rt_start = None;
            Counters::add(&self.info.counters.upstream_round_trips, 1);
            self.info.counters.record_latency(start.elapsed());
            if let Some(c) = self.statements.current() {
                c.upstream_round_trips += 1;
            }
        }
        let max = self.services.config.limits.max_message_bytes;
        loop {
            let n = if self.usplit.in_pass() {
                0
            } else {
                frame::complete_len(uin, max).map_err(ProtocolError::Backend)?
            };
            if n > 0 {
                let chunk = uin.split_to(n).freeze();
                self.on_upstream_chunk(&chunk, to_client, to_up);
                continue;
            }
            // The first message is not whole yet: one the session reads
            // waits for the rest; any other streams through as it comes
            // (a large DataRow is never buffered whole).
            let holding = self.co.holds_all()
                || self.cy.reads_whole()
                || self.flight.next_owner() != Owner::Client;
            let piece = self
                .usplit
                .next(uin, max, |t| holding || wants_whole(t))
                .map_err(ProtocolError::Backend)?;
            match piece {
                Some(Piece::Pass(h, bytes)) => {
                    if let Some(h) = h {
                        // A message too large to wait for: the client's, and
                        // no completion whose text matters.
                        self.flight.on_answer(h.tag, &[]);
                    }
                    self.emit(to_client, bytes)
                }
                Some(Piece::Whole(_, msg)) => self.on_upstream_chunk(&msg, to_client, to_up),
                None => break,
            }
        }
        Ok(())
    }

    /// Handles the whole messages in `chunk`; those relayed as they came
    /// are queued as parts of it.
    fn on_upstream_chunk(
        &mut self,
        chunk: &Bytes,
        to_client: &mut WriteQueue,
        to_up: &mut WriteQueue,
    ) {
        let mut at = 0;
        let mut relayed = 0;
        while let Ok(Some(h)) = frame::peek_header(&chunk[at..], usize::MAX) {
            let end = at + h.wire_len;
            let owner = self.flight.on_answer(h.tag, &chunk[at..end]);
            let relay = if owner != Owner::Client
                || wants_whole(h.tag)
                || self.co.holds_all()
                || self.cy.reads_whole()
            {
                self.on_upstream_message(h.tag, &chunk.slice(at..end), owner, to_client, to_up)
            } else {
                true
            };
            if relay {
                self.note_client_answer();
                to_client.push_part(chunk, at, end);
                relayed += h.wire_len;
            }
            at = end;
        }
        Counters::add(&self.info.counters.bytes_to_client, relayed as u64);
    }

    /// Handles one upstream message; true when it goes to the client as it
    /// came (the caller queues it).
    fn on_upstream_message(
        &mut self,
        t: u8,
        msg: &Bytes,
        owner: Owner,
        to_client: &mut WriteQueue,
        to_up: &mut WriteQueue,
    ) -> bool {
        match owner {
            // Swallowed, but for an error (which a bare SELECT can't give
            // short of the connection failing): the client should know
            // that what it sent next is skipped.
            Owner::Own(Own::Snapshot | Own::Rerun) => return t == tag::ERROR_RESPONSE,
            Owner::Own(Own::Settings) => {
                if t == tag::READY_FOR_QUERY {
                    self.txn_status = backend::ready_status(msg);
                }
                if let Some(isolation) = self.settings.on_answer(t, msg) {
                    self.co.on_default_isolation(isolation);
                }
                if t == tag::READY_FOR_QUERY {
                    self.held_for_settings = false;
                }
                return false;
            }
            Owner::Own(Own::Cypher) => {
                // A query of our own: its answers are not the client's.
                let next = self.cy.on_hidden_answer(t, msg, &self.services);
                if t == tag::READY_FOR_QUERY {
                    self.txn_status = backend::ready_status(msg);
                }
                if let Some(q) = next {
                    // The client's own statement, run after the compiled one.
                    self.send_up(to_up, q, true, Op::None);
                }
                return false;
            }
            Owner::Own(Own::Probe) | Owner::Client => {}
        }
        self.cy.observe_relayed(t, msg, &self.services, &self.info);
        match t {
            tag::READY_FOR_QUERY => {
                self.cy.on_ready(&self.services);
                let status = backend::ready_status(msg);
                self.txn_status = status;
                self.in_copy = false;
                if status == b'I' && self.work_since_idle {
                    self.work_since_idle = false;
                    Counters::add(&self.info.counters.transactions, 1);
                }
                self.info.set_state(match status {
                    b'T' => SessionState::InTransaction,
                    b'E' => SessionState::FailedTransaction,
                    _ => SessionState::Idle,
                });
            }
            tag::ERROR_RESPONSE => Counters::add(&self.info.counters.errors, 1),
            tag::PARAMETER_STATUS if self.keep_upstream => {
                if let Some((k, v)) = backend::parameter_status(msg) {
                    set_param(&mut self.server_params, k, v);
                }
            }
            tag::COPY_IN_RESPONSE | tag::COPY_OUT_RESPONSE | tag::COPY_BOTH_RESPONSE => {
                self.in_copy = true
            }
            tag::COMMAND_COMPLETE => self.in_copy = false,
            _ => {}
        }
        let relay = self.coalescer(|co, ctx, out| co.on_upstream_message(t, msg, owner, ctx, out));
        self.drain_out(to_client, to_up);
        relay
    }

    /// Runs `f` on the coalescer with what the session knows.
    fn coalescer<R>(&mut self, f: impl FnOnce(&mut Coalescer, &Ctx, &mut Out) -> R) -> R {
        let ctx = Ctx {
            flight: &self.flight,
            txn_status: self.txn_status,
            awaiting_ready: self.flight.awaiting_ready(),
            in_copy: self.in_copy,
            info: &self.info,
            services: &self.services,
        };
        f(&mut self.co, &ctx, &mut self.out)
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

/// Records a ParameterStatus value, keeping the order names first came in.
pub fn set_param(params: &mut Vec<(String, String)>, name: &str, value: &str) {
    match params.iter_mut().find(|(k, _)| k == name) {
        Some((_, v)) => {
            if v != value {
                *v = value.to_owned();
            }
        }
        None => params.push((name.to_owned(), value.to_owned())),
    }
}

/// Backend messages read whole even when nothing is held: small ones whose
/// content or position matters.
fn wants_whole(t: u8) -> bool {
    matches!(
        t,
        tag::READY_FOR_QUERY
            | tag::PARSE_COMPLETE
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
