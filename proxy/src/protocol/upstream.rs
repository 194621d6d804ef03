//! Upstream to client: the server's answers relayed, held or swallowed by
//! whose they are, and what the session learns from them.

use bytes::{Bytes, BytesMut};

use super::*;

impl Protocol {
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
                self.delay_until = Some(crate::timers::after(rtt));
                return Ok(());
            }
            self.rt_delayed = false;
            self.up_rt_start = None;
            Counters::add(&self.info.counters.upstream_round_trips, 1);
            let now = crate::worker::deadlines::now();
            self.info
                .counters
                .record_latency(now.saturating_duration_since(start));
            if let Some(c) = self.statements.current() {
                c.upstream_round_trips += 1;
            }
        }
        let max = self.services.config.limits.max_message_bytes;
        loop {
            if let Some(why) = self.prep_failed.take() {
                // Nothing after it reaches the client: its statements ran
                // under settings that are not its own.
                return Err(ProtocolError::Prepare(why));
            }
            let n = if self.usplit.in_pass() {
                0
            } else {
                frame::complete_len(uin, max).map_err(ProtocolError::Backend)?
            };
            if n > 0 {
                let chunk = uin.split_to(n).freeze();
                self.on_upstream_chunk(&chunk, to_client, to_up);
                if self.flight.lost() {
                    return Err(ProtocolError::CopyLost);
                }
                continue;
            }
            // The first message is not whole yet: one the session reads
            // waits for the rest; any other streams through as it comes
            // (a large DataRow is never buffered whole).
            let holding = self.coalescer.holds_all()
                || self.cypher.reads_whole()
                || self.told_here.watch
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
                Some(Piece::Whole(_, msg)) => {
                    self.on_upstream_chunk(&msg, to_client, to_up);
                    if self.flight.lost() {
                        return Err(ProtocolError::CopyLost);
                    }
                }
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
            if self.prep_failed.is_some() {
                break;
            }
            let end = at + h.wire_len;
            let owner = self.flight.on_answer(h.tag, &chunk[at..end]);
            let relay = if owner != Owner::Client
                || wants_whole(h.tag)
                || self.coalescer.holds_all()
                || self.cypher.reads_whole()
                || self.told_here.watch
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
            if self.flight.has_due_locals() {
                self.emit_due_locals(to_client);
            }
            at = end;
        }
        Counters::add(&self.info.counters.bytes_to_client, relayed as u64);
    }

    /// Answers given here whose turn has come, after everything sent before
    /// them was answered.
    fn emit_due_locals(&mut self, to_client: &mut WriteQueue) {
        let mut due = Vec::new();
        self.flight.due_locals(&mut due);
        for b in due {
            self.emit(to_client, b);
        }
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
        if self.pooled {
            self.on_server_answer(t);
            self.on_parse_answer(t);
            if t == tag::READY_FOR_QUERY {
                self.shared_portals_closed(backend::ready_status(msg));
            }
        }
        // An error that names a shared statement names the client's.
        let renamed = match (t, owner) {
            (tag::ERROR_RESPONSE, Owner::Client) if self.pooled => {
                self.on_client_error(msg);
                self.error_for_client(msg)
            }
            _ => None,
        };
        let msg = renamed.as_ref().unwrap_or(msg);
        if t == tag::ERROR_RESPONSE
            && !matches!(owner, Owner::Client | Owner::Own(Own::Probe))
            && backend::is_fatal(msg)
        {
            // The server ends the connection: whoever asked, the client
            // hears why, as it would from the server itself.
            Counters::add(&self.info.counters.errors, 1);
            self.fatal_relayed = true;
            return true;
        }
        if t == tag::ERROR_RESPONSE && self.told_here.held && owner != Owner::Own(Own::Check) {
            self.told_error();
        }
        match owner {
            Owner::Own(Own::Check) => return self.on_check_answer(t, msg),
            Owner::Own(Own::Stale) => return false,
            // A statement that could not be made again gives its error where
            // the client's text uses it (`sql_prepared.rs`).
            Owner::Client
                if t == tag::ERROR_RESPONSE
                    && self.named.sql.as_ref().is_some_and(|s| s.remake.is_some()) =>
            {
                if let Some(e) = self.error_for_remade(msg) {
                    Counters::add(&self.info.counters.errors, 1);
                    self.emit(to_client, e);
                    return false;
                }
                if !self.told_client_answer(t, msg, to_client) {
                    return false;
                }
            }
            Owner::Own(Own::Rerun) => return self.on_rerun_answer(t, msg),
            Owner::Own(Own::Types) => {
                self.on_types_answer(t, msg);
                return false;
            }
            Owner::Client if !self.told_client_answer(t, msg, to_client) => return false,
            // Swallowed, but for an error (which a bare SELECT can't give
            // short of the connection failing): the client should know
            // that what it sent next is skipped.
            Owner::Own(Own::Snapshot) => return t == tag::ERROR_RESPONSE,
            Owner::Own(Own::Settings) => {
                if t == tag::READY_FOR_QUERY {
                    self.txn_status = backend::ready_status(msg);
                }
                if let Some(isolation) = self.settings.on_answer(t, msg) {
                    self.coalescer.on_default_isolation(isolation);
                }
                if t == tag::READY_FOR_QUERY {
                    self.held_for_settings = false;
                }
                return false;
            }
            Owner::Own(Own::Cypher) => {
                // A query of our own: its answers are not the client's.
                let next = self.cypher.on_hidden_answer(t, msg, &self.services);
                if t == tag::READY_FOR_QUERY {
                    self.txn_status = backend::ready_status(msg);
                }
                if let Some(q) = next {
                    // The client's own statement, run after the compiled one.
                    self.send_up(to_up, q, true, Op::None);
                }
                return false;
            }
            Owner::Own(Own::Prepare) => {
                match t {
                    tag::PARAMETER_STATUS => {
                        if let Some((k, v)) = backend::parameter_status(msg) {
                            self.server_mut().set_param(k, v);
                        }
                    }
                    tag::ERROR_RESPONSE => {
                        let code = backend::error_field(msg, b'C').unwrap_or("");
                        let text = backend::error_field(msg, b'M').unwrap_or("error");
                        self.prep_failed = Some(format!("{text} (SQLSTATE {code})"));
                    }
                    tag::READY_FOR_QUERY => self.txn_status = backend::ready_status(msg),
                    _ => {}
                }
                return false;
            }
            Owner::Own(Own::Begin | Own::Abort) => {
                if t == tag::READY_FOR_QUERY {
                    self.txn_status = backend::ready_status(msg);
                }
                // A BEGIN fails only with its connection (a FATAL, relayed
                // above) or the server's refusal of its modes; then the
                // client should hear why, in place of its statement's answer.
                return t == tag::ERROR_RESPONSE && owner == Owner::Own(Own::Begin);
            }
            Owner::Own(Own::Lsn) => {
                self.on_lsn_answer(t, msg);
                return false;
            }
            Owner::Own(Own::Probe) | Owner::Client => {}
        }
        self.cypher
            .observe_relayed(t, msg, &self.services, &self.info);
        match t {
            tag::READY_FOR_QUERY => {
                self.cypher.on_ready(&self.services);
                let status = backend::ready_status(msg);
                self.txn_status = status;
                self.after_ready(status);
                if status == b'I'
                    && !self.passwords_changed.is_empty()
                    && self.flight.client_answered()
                {
                    for role in std::mem::take(&mut self.passwords_changed) {
                        self.services.pools.forget_password(role.as_deref());
                    }
                }
                if self.pooled {
                    self.on_sets_done(status);
                    self.on_loaded();
                    if !self.draining.is_empty() && self.flight.client_answered() {
                        let databases = std::mem::take(&mut self.draining);
                        self.services.pools.end_drain(&databases);
                    }
                }
                if let Some(told) = self.flight.take_ready_as() {
                    // A lazy read's: the client is told its block's status.
                    self.txn.failed = told == b'E';
                    self.info.set_state(SessionState::TransactionHeld);
                    self.emit(to_client, wire::write::ready_frame(told));
                    return false;
                }
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
            tag::ERROR_RESPONSE => {
                Counters::add(&self.info.counters.errors, 1);
                self.fatal_relayed |= backend::is_fatal(msg);
            }
            tag::PARAMETER_STATUS if self.keep_upstream || self.pooled => {
                if let Some((k, v)) = backend::parameter_status(msg) {
                    self.server_mut().set_param(k, v);
                    if self.pooled && !self.startup.is_empty() {
                        let (k, v) = (k.to_owned(), v.to_owned());
                        match self.reported(&k, &v) {
                            None => return false,
                            Some(told) if told != v => {
                                let m = wire::write::parameter_status_frame(&k, &told);
                                self.emit(to_client, m);
                                return false;
                            }
                            Some(_) => {}
                        }
                    }
                }
            }
            tag::COPY_IN_RESPONSE | tag::COPY_OUT_RESPONSE | tag::COPY_BOTH_RESPONSE => {
                self.in_copy = true;
                if self.flight.awaits_sync() {
                    // The Sync sent with the COPY was read as its data: its
                    // group ends at the client's next one.
                    self.unsynced = true;
                }
            }
            tag::COMMAND_COMPLETE => self.in_copy = false,
            _ => {}
        }
        let relay =
            self.with_coalescer(|co, ctx, out| co.on_upstream_message(t, msg, owner, ctx, out));
        self.drain_out(to_client, to_up);
        match renamed {
            Some(e) if relay => {
                self.emit(to_client, e);
                false
            }
            _ => relay,
        }
    }
}
