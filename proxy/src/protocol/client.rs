//! Client to upstream: the client's messages routed, coalesced, answered
//! here or forwarded, and what they do to the prepared statements and the
//! session's settings.

use bytes::{Bytes, BytesMut};
use onetrip_planner::classify::{PreparedOp, RoleName, loaded_libraries, prepared_ops};

use super::*;

impl Protocol {
    pub fn on_client_bytes(
        &mut self,
        cin: &mut BytesMut,
        to_up: &mut WriteQueue,
        to_client: &mut WriteQueue,
    ) -> Result<(), ProtocolError> {
        if self.fatal_relayed {
            // The server has ended the connection: it would never read what
            // the client sends now, and nothing is answered here either.
            cin.clear();
            return Ok(());
        }
        // Nothing read and nothing held: the usual case after a wake-up by
        // the upstream, and on the loop's second look.
        if cin.is_empty()
            && self.client_rest.is_empty()
            && !self.csplit.in_pass()
            && !self.cypher.holds_message()
        {
            return Ok(());
        }
        let max = self.services.config.limits.max_message_bytes;
        while self.flow == Flow::Open && !self.client_paused() {
            // A message held for the catalog is routed again, as it came.
            if let Some((_, msg)) = self.cypher.take_pending() {
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
                    if !self.coalescer.discarding() {
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
        self.fresh_upstream = false;
        if self.prep_due.is_some() && self.quiet_upstream() {
            // Startup settings a RESET took from this connection, made
            // again before the client's next statement runs.
            if let Some(q) = self.prep_due.take() {
                self.send_own_up(to_up, q, Own::Prepare, false);
                self.lacking.clear();
            }
        }
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
            self.before_told(&chunk, at, h.tag, end);
            match self.transaction_step(&chunk, at, h.tag, end, to_up, to_client) {
                TxnStep::Go => {}
                TxnStep::Answered(past) => {
                    at = past;
                    continue;
                }
            }
            let forward = if h.tag == tag::COPY_DATA {
                !self.coalescer.discarding()
            } else {
                self.on_client_message(h.tag, &chunk.slice(at..end), to_up, to_client)
            };
            if self.told_here.held && !forward {
                // Held for its check: handled again once it is answered.
                continue;
            }
            let op = std::mem::replace(&mut self.client_op, Op::None);
            if forward {
                self.forward_up(to_up, &chunk, at, end, op);
                forwarded += h.wire_len;
            }
            if let Some(q) = self.cypher.take_trailing() {
                if forward {
                    // The catalog read right behind the statement that may
                    // change it, inside the same round trip.
                    self.send_own_up(to_up, q, Own::Cypher, false);
                } else {
                    self.cypher.trailing_dropped(&self.services);
                }
            }
            self.send_learning_if_due(to_up, forward);
            self.send_lsn_if_due(to_up, forward);
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
            tag::FLUSH => waiting && self.coalescer.may_coalesce_batch(),
            // Whether a read may run without its held BEGIN.
            tag::QUERY | tag::PARSE | tag::BIND
                if waiting && self.txn.held.is_some() && self.txn.lazy_reads =>
            {
                true
            }
            tag::QUERY | tag::PARSE => {
                self.cypher.enabled()
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
    /// is open, not even one held here: a query of the proxy's own can run
    /// now, unseen (inside the client's transaction, its failure would
    /// abort it).
    pub(super) fn quiet_upstream(&self) -> bool {
        self.txn_status == b'I'
            && self.txn.held.is_none()
            && !self.flight.begin_on_its_way()
            && self.flight.client_answered()
            && !self.flight.skipping()
            && !self.unsynced
            && !self.in_copy
            && self.coalescer.idle()
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
        // As it goes up, naming a shared statement (everything here goes
        // by the client's names).
        let mut renamed = None;
        if t == tag::QUERY || t == tag::PARSE {
            self.watch_for_password_change(t, msg);
            let routed = self.route(t, msg);
            if let Some(q) = self.cypher.take_riding() {
                // The catalog query rides ahead of the statement; the
                // statement's flush request starts the round trip.
                self.send_own_up(to_up, q, Own::Cypher, false);
            }
            match routed {
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
        if self.pooled {
            let analysis = match &rewritten {
                None => sql.as_ref().and_then(|s| s.analysis()),
                Some(_) => None,
            };
            self.watch_for_pins(t, msg, analysis.cloned());
            self.fix_named_before(t, msg, to_up);
            self.fix_sql_named_before(t, msg, sql.as_ref(), to_up);
            if self.follow_told(t, msg, sql.as_ref(), to_up, to_client) {
                return false;
            }
            if let Some(m) = self.for_server(t, msg) {
                renamed = Some(m);
            }
        }
        if wire::is_flush_request(t) {
            self.client_rt = true;
        }
        match t {
            tag::QUERY => {
                sql = sql
                    .or_else(|| frontend::query_text(msg).map(|text| Sql::within(msg, text, None)));
                if let Some(sql) = &sql {
                    self.coalescer.on_simple_query(sql);
                    self.note_settings_change(sql.words());
                }
                self.note_query(sql.as_ref());
            }
            tag::EXECUTE => {
                let sql = self.coalescer.batch_statement();
                if let Some(sql) = &sql {
                    self.note_settings_change(sql.words());
                    if self.pooled {
                        self.taint_by(sql);
                        if self.pin.is_none() {
                            self.set_op = self.follow_executed_set(sql.as_str()).map(Box::new);
                        }
                    }
                }
                self.note_statement(sql);
            }
            tag::TERMINATE => {
                self.flow = Flow::Terminated;
                if (self.keep_upstream && self.quiet()) || self.reusable_at_end() {
                    self.terminate_withheld = true;
                    return false;
                }
            }
            _ => {}
        }
        self.watch_for_replicas(t, msg, sql.as_ref());
        // The coalescer decides what, if anything, goes upstream; what it
        // sends of its own goes first.
        let wire = renamed.as_ref().unwrap_or(msg);
        let forward = self.with_coalescer(|co, ctx, out| co.on_client_message(t, wire, ctx, out));
        self.drain_out(to_client, to_up);
        let op = self.follow_prepared(t, msg, sql);
        match renamed.or(rewritten) {
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

    /// A statement that changes a role's password, renames it or drops it
    /// (`password_changes`): the role's looked-up secrets and its pools'
    /// credential are forgotten now, and again once its transaction is
    /// over (a login in between may have looked up the old password).
    /// This runs on every statement: only one that may change a password
    /// (`may_change_password`) is read further.
    fn watch_for_password_change(&mut self, t: u8, msg: &[u8]) {
        if !frontend::statement_bytes_loose(t, msg).is_some_and(may_change_password) {
            return;
        }
        let Some(text) = frontend::statement_bytes(t, msg) else {
            return;
        };
        if !may_change_password(text) {
            return;
        }
        let Ok(text) = std::str::from_utf8(text) else {
            return;
        };
        for role in onetrip_planner::classify::password_changes(text) {
            let role = match role {
                RoleName::Named(name) => Some(name),
                RoleName::Current => Some(self.info.user.clone()),
                RoleName::Unknown => None,
            };
            self.services.pools.forget_password(role.as_deref());
            self.passwords_changed.push(role);
        }
    }

    /// `start` when the session first has a server connection: it was
    /// greeted without one.
    pub fn start_later(&mut self) {
        self.start_due = true;
    }

    /// The session has just taken a server connection, its client's bytes
    /// not yet handled: what `start` sends goes first, if it is due.
    pub fn start_if_due(&mut self, to_up: &mut WriteQueue) {
        if let Some(q) = self.prep_due.take() {
            self.send_own_up(to_up, q, Own::Prepare, false);
            self.lacking.clear();
        }
        if std::mem::take(&mut self.start_due) {
            self.start(to_up);
        }
    }

    /// Relaying starts: the session's settings are asked for at once, so
    /// the answer is in before the client's first statement needs it (the
    /// client is still reading its greeting). No round trip is counted: the
    /// client waits for nothing.
    pub fn start(&mut self, to_up: &mut WriteQueue) {
        if self.settings.asked() {
            // A kept connection's, learned by an earlier client.
            self.coalescer
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
        if matches!(t, tag::QUERY | tag::EXECUTE)
            && let Some(op) = self.set_op.take()
        {
            return *op;
        }
        match t {
            tag::PARSE => {
                // Routing found the text when it was valid: only the name
                // is read again.
                let found = match sql {
                    Some(sql) => frontend::parse_name(msg).map(|name| (name, sql)),
                    None => frontend::parse(msg)
                        .map(|(name, text)| (name, Sql::within(msg, text, None))),
                };
                if let Some((name, sql)) = found {
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
                if let Some(sql) = self.coalescer.batch_statement() {
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
        if w.any(Words::LOAD) && !w.any(Words::PREPARE) {
            let libs = loaded_libraries(sql.as_str());
            if !libs.is_empty() {
                return Op::Load(libs);
            }
        }
        if !w.any(Words::PREPARE | Words::DEALLOCATE | Words::DISCARD) {
            return Op::None;
        }
        // Each is done as it completes: a DEALLOCATE that fails (in a failed
        // transaction block) drops nothing.
        let mut ops = Vec::new();
        for op in prepared_ops(sql.as_str()) {
            match op {
                PreparedOp::Prepare { name, text } => {
                    ops.push(SqlOp::Prepare(Some((name, sql.part(text)))))
                }
                PreparedOp::Deallocate(name) => {
                    self.replica_forget(Some(&name));
                    ops.push(SqlOp::Deallocate(name));
                }
                PreparedOp::DeallocateAll => {
                    self.replica_forget(None);
                    ops.push(SqlOp::DeallocateAll);
                }
                PreparedOp::Unknown => {
                    self.flight.forget_all();
                    self.replica_forget(None);
                }
                PreparedOp::Execute { .. } => {}
            }
        }
        if ops.is_empty() {
            Op::None
        } else {
            Op::Prepare(ops)
        }
    }

    /// The session lets go of its read buffer (between transactions): what
    /// it keeps of the messages read is copied out of it (a few bytes), so
    /// that the buffer serves other sessions' reads. A buffer kept alive by
    /// a slice would cost the next read a new one, and its end a large free.
    pub(crate) fn let_go_of_reads(&mut self) {
        if let Some(held) = self.txn.held.as_mut() {
            held.frames = Bytes::copy_from_slice(&held.frames);
            if let Some(fix) = held.unnamed_after.as_mut() {
                fix.detach();
            }
        }
        if let Some(fix) = self.unnamed_fix.as_mut() {
            fix.detach();
        }
        self.keep_last_plain();
        let kept = self.last_plain.as_ref().map(|(_, sql)| sql);
        self.flight.detach_unnamed(kept);
    }

    /// A pooled session between transactions, its client silent: what its
    /// next transaction takes again goes to the thread's spares now rather
    /// than at the worker's next look. Memory a burst of such clients
    /// frees a second later lies among what later sessions took meanwhile,
    /// and stays resident.
    pub(crate) fn rest(&mut self) {
        self.let_go_of_reads();
        self.flight.rest();
        self.statements.rest();
    }

    /// A session quiet for a while gives back the room of its lists that
    /// are empty now: it grew them for its traffic, and an idle client
    /// should hold none. The next traffic grows them again.
    pub(crate) fn compact(&mut self) {
        self.flight.compact();
        if self.out.is_empty() {
            self.out = Out::default();
        }
        self.told_here.let_go_if_empty();
    }

    /// A simple Query's text mostly carries its literals and is seldom the
    /// next one: not worth a copy. A Parse's is made to be sent again: one
    /// copy, the text pointing into it, kept until the client sends
    /// another.
    fn keep_last_plain(&mut self) {
        if self.last_plain_apart {
            return;
        }
        let Some((msg, sql)) = self.last_plain.take() else {
            return;
        };
        if msg.first() == Some(&tag::QUERY) {
            return;
        }
        let copy = Bytes::copy_from_slice(&msg);
        let sql = sql.moved_to(&msg, &copy);
        self.last_plain = Some((copy, sql));
        self.last_plain_apart = true;
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
        // A simple Query that repeats the last one but for its literals has
        // its words: only its string literals are scanned.
        let words = match t {
            tag::QUERY => self.statements.query_words(text),
            _ => None,
        }
        .unwrap_or_else(|| Words::scan(text));
        let mut sql = Sql::within(msg, text, Some(words));
        if !may_route(words) {
            // A Parse's text is made to be sent again: analysed once, kept,
            // and asked for its pins below. A simple Query's often carries
            // its literals and is not: the lexer alone finds its pins below,
            // and it is analysed only if something asks, as without pooling
            // (a text too long to be kept is only lexed for its pins too).
            if self.pooled
                && t == tag::PARSE
                && text.len() <= onetrip_planner::analysis::MAX_CACHED_LEN
            {
                let analysis = self.coalescer.analyses.of(&sql);
                sql = sql.with_analysis(analysis);
            }
            // Nothing about it depends on the session's state: remember it.
            self.last_plain = Some((msg.clone(), sql.clone()));
            self.last_plain_apart = false;
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
        let (route, analysis) = self.cypher.route(
            msg,
            &sql,
            &view,
            &self.services,
            &mut self.coalescer.analyses,
            &self.info,
        );
        // The statement's analysis goes with it: what follows its Parse
        // (Bind, Execute, the Flush) asks the planner nothing more.
        let sql = match analysis {
            Some(a) => sql.with_analysis(a),
            None => sql,
        };
        match route {
            Route::Forward => Routed::Plain(Some(sql)),
            Route::Rewritten(m) => Routed::Rewritten(m),
            Route::Held(q) => Routed::Held(q),
        }
    }
}

/// Whether `text` may hold a statement that changes a role's password: its
/// first word is ALTER or DROP, or a comment or another statement may come
/// before one (`SELECT 1; ALTER ROLE ...`). One look at the start and one
/// `memchr`: most statements stop here unread.
fn may_change_password(text: &[u8]) -> bool {
    let t = text.trim_ascii();
    client_txn::first_word_is(t, &["alter", "drop"])
        || t.starts_with(b"--")
        || t.starts_with(b"/*")
        || memchr::memchr(b';', t).is_some_and(|i| i + 1 < t.len())
}

#[cfg(test)]
mod password_watch {
    use super::may_change_password as may;

    #[test]
    fn reads_on_only_where_a_password_change_may_be() {
        assert!(may(b"ALTER ROLE r PASSWORD 'x'"));
        assert!(may(b"  drop user r"));
        assert!(may(b"SELECT 1; ALTER USER r PASSWORD 'x'"));
        assert!(may(b"/* c */ ALTER ROLE r PASSWORD 'x'"));
        assert!(may(b"-- c\nDROP ROLE r"));
        assert!(!may(b"SELECT * FROM users"));
        assert!(!may(b"SELECT 1;"));
        assert!(!may(b"altered"));
        assert!(!may(b"INSERT INTO t VALUES (1) ; "));
    }
}
