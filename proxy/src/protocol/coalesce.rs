//! Coalescing a single-read batch (ARCHITECTURE.md, "Coalescing a single-read
//! batch").
//!
//! `Parse? Bind Describe Execute Flush` -> wait -> `Sync Flush` costs the
//! client two round trips. When the batch qualifies, its Flush goes upstream
//! as a Sync (an "early Sync"), the upstream's ReadyForQuery is held, and the
//! client's Sync is answered with it: one upstream round trip. A statement
//! that may write (a data-modifying CTE) is followed by a write probe that
//! fails if the transaction wrote anything; then the batch is run again as
//! the client sent it.

use bytes::Bytes;
use onetrip_planner::classify::{
    IsolationChange, IsolationLevel, PreparedOp, StatementClass, prepared_ops,
};
use rustc_hash::FxHashSet;

use super::Services;
use super::{
    flight::{Flight, Own, Owner},
    own::{close_statement, flush_frame, probe_prepare, probe_run, snapshot_frames, sync_frame},
    text::{Sql, may_set_isolation},
    verdict::{Analyses, Verdict},
};
use crate::{
    stats::{Counters, SessionInfo},
    wire::{backend, frontend, tag, write},
};
use onetrip_planner::words::Words;

/// What the session knows when a message passes the coalescer.
pub struct Ctx<'a> {
    /// What the upstream owes, and the prepared statements.
    pub flight: &'a Flight,
    /// Transaction status from the last ReadyForQuery.
    pub txn_status: u8,
    /// Syncs, Queries or FunctionCalls sent upstream still wait for their
    /// ReadyForQuery: `txn_status` is about to change, and the next
    /// ReadyForQuery is theirs.
    pub awaiting_ready: bool,
    pub in_copy: bool,
    pub info: &'a SessionInfo,
    pub services: &'a Services,
    /// The client's named statements, and the names they go by upstream.
    pub named: &'a super::named::Named,
}

/// Messages the coalescer lets through or makes, in order. Reused between
/// calls so the forwarding path does not allocate per message.
#[derive(Default)]
pub struct Out {
    pub to_client: Vec<Bytes>,
    /// With the statement of the proxy's own they belong to, if any.
    pub to_upstream: Vec<(Bytes, Option<Own>)>,
}

impl Out {
    pub fn is_empty(&self) -> bool {
        self.to_client.is_empty() && self.to_upstream.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Normal,
    /// Early Sync sent; its ReadyForQuery has not come back. Client input
    /// waits, so nothing can be sent upstream before we know whether the
    /// statement failed (after a failure the client's next messages must be
    /// discarded, as the server would have).
    Early {
        probe: bool,
        failed: bool,
    },
    /// The early ReadyForQuery is held; the client's Sync gets it.
    Held {
        status: u8,
        failed: bool,
    },
}

/// The messages since the client's last Sync.
#[derive(Debug, Default)]
struct Batch {
    binds: u32,
    executes: u32,
    /// Anything but Parse/Bind/Describe/Execute/Flush.
    others: bool,
    /// It began at a simple Query.
    after_query: bool,
    unlimited: bool,
    statement: Option<Sql>,
    /// Parse/Bind/Describe/Execute as sent, for a rerun after a failed probe.
    frames: Vec<Bytes>,
}

impl Batch {
    /// Starts a new batch, keeping the frame list's room for the next one.
    fn clear(&mut self) {
        let Batch {
            binds,
            executes,
            others,
            after_query,
            unlimited,
            statement,
            frames,
        } = self;
        (*binds, *executes) = (0, 0);
        (*others, *after_query, *unlimited) = (false, false, false);
        if statement.is_some() {
            *statement = None;
        }
        frames.clear();
    }
}

/// Answers held while a write probe runs.
#[derive(Debug, Default)]
struct HeldAnswers {
    /// The client's answers (the probe's are not held).
    messages: Vec<Bytes>,
    bytes: usize,
    /// They outgrew `max_held_bytes` and were let go: the batch runs again.
    dropped: bool,
    statement_failed: bool,
    probe_failed: bool,
}

pub struct Coalescer {
    enabled: bool,
    probe_enabled: bool,
    max_held: usize,
    state: State,
    batch: Batch,
    held: HeldAnswers,
    /// The next client message is dropped if it is a Flush (psycopg's
    /// `Sync Flush`, after the Sync was answered here).
    swallow_flush: bool,
    /// The session's analyses of statement texts.
    pub analyses: Analyses,
    /// The session's default isolation as the server reported it (what
    /// RESET returns to); `None` until known.
    startup_isolation: Option<IsolationLevel>,
    /// The client changed the session's isolation before the server's
    /// report of the default came.
    isolation_touched: bool,
    session_isolation: Option<IsolationLevel>,
    txn_isolation: Option<IsolationLevel>,
    /// Statements whose probe failed once: not probed again.
    no_probe: Remembered,
    /// Statements whose held answers outgrew the bound: not coalesced again.
    no_coalesce: Remembered,
    /// The server is PostgreSQL 13 or later: the probe names the newer
    /// function (`own::probe_prepare`).
    pg13: bool,
    probe_prepared: bool,
}

impl Coalescer {
    pub fn new(services: &Services) -> Self {
        let cfg = &services.config.coalesce;
        Self {
            enabled: cfg.single_read,
            probe_enabled: cfg.write_probe,
            max_held: cfg.max_held_bytes,
            state: State::Normal,
            batch: Batch::default(),
            held: HeldAnswers::default(),
            swallow_flush: false,
            analyses: Analyses::new(services.analyzer.clone()),
            startup_isolation: None,
            isolation_touched: false,
            session_isolation: None,
            txn_isolation: None,
            no_probe: Remembered::default(),
            no_coalesce: Remembered::default(),
            pg13: true,
            probe_prepared: false,
        }
    }

    /// The server's answer: the session's default isolation level.
    pub fn on_default_isolation(&mut self, level: Option<IsolationLevel>) {
        self.startup_isolation = level;
        if !self.isolation_touched {
            self.session_isolation = level;
        }
    }

    /// The server's version, from its greeting.
    pub fn on_server_version(&mut self, version: Option<&str>) {
        if let Some(v) = version {
            let major: u32 = v
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            self.pg13 = major >= 13;
        }
    }

    /// No batch in progress and nothing held.
    pub fn idle(&self) -> bool {
        self.state == State::Normal
            && self.batch.binds == 0
            && self.batch.frames.is_empty()
            && !self.batch.others
    }

    pub fn pauses_client(&self) -> bool {
        matches!(self.state, State::Early { .. })
    }

    /// Upstream messages are read whole (and held) while a probe runs.
    pub fn holds_all(&self) -> bool {
        matches!(self.state, State::Early { probe: true, .. })
    }

    /// The client's messages are being discarded until its Sync.
    pub fn discarding(&self) -> bool {
        matches!(self.state, State::Held { failed: true, .. })
    }

    /// The statement of the batch's Bind, once known.
    pub fn batch_statement(&self) -> Option<Sql> {
        self.batch.statement.clone()
    }

    pub fn on_simple_query(&mut self, sql: &Sql) {
        self.note_deallocation(sql.words());
        if !may_set_isolation(sql.words()) {
            return;
        }
        let changes = self.analyses.judge(sql).isolation;
        self.apply_isolation(&changes, false);
    }

    /// The session moved to another server connection (transaction
    /// pooling): the probe is made again there before it runs.
    pub fn probe_forgotten(&mut self) {
        self.probe_prepared = false;
    }

    /// DISCARD ALL / DEALLOCATE may drop the probe's prepared statement.
    fn note_deallocation(&mut self, w: Words) {
        if w.any(Words::DISCARD | Words::DEALLOCATE) {
            self.probe_prepared = false;
        }
    }

    fn apply_isolation(&mut self, changes: &[IsolationChange], in_block: bool) {
        for c in changes {
            if !matches!(c, IsolationChange::Transaction(_)) {
                self.isolation_touched = true;
            }
            match *c {
                IsolationChange::Transaction(l) => self.txn_isolation = Some(l.effective()),
                // A session-level change inside a block is undone if the
                // block rolls back; we can't know yet, so stop trusting it.
                IsolationChange::Session(_) if in_block => self.session_isolation = None,
                IsolationChange::Session(l) => self.session_isolation = Some(l.effective()),
                IsolationChange::SessionDefault => self.session_isolation = self.startup_isolation,
                IsolationChange::Unknown => self.session_isolation = None,
            }
        }
    }

    /// The session's own isolation is READ COMMITTED (a transaction's may
    /// still set another).
    pub fn session_read_committed(&self) -> bool {
        self.session_isolation == Some(IsolationLevel::ReadCommitted)
    }

    fn read_committed(&self) -> bool {
        self.txn_isolation.or(self.session_isolation) == Some(IsolationLevel::ReadCommitted)
    }

    /// A client message on its way upstream; true when it goes on as it
    /// came (after whatever `out` holds), false when it was answered,
    /// dropped or replaced.
    pub fn on_client_message(&mut self, t: u8, msg: &Bytes, ctx: &Ctx, out: &mut Out) -> bool {
        if std::mem::take(&mut self.swallow_flush) && t == tag::FLUSH {
            return false;
        }
        match self.state {
            State::Normal | State::Early { .. } => {}
            State::Held { status, failed } => match t {
                tag::SYNC => {
                    out.to_client.push(write::ready_frame(status));
                    self.state = State::Normal;
                    self.swallow_flush = true;
                    self.batch.clear();
                    return false;
                }
                // Nothing is pending upstream: there is nothing to flush.
                tag::FLUSH => return false,
                // The server would discard these until the Sync; so do we.
                _ if failed && t != tag::TERMINATE => return false,
                _ => {
                    self.state = State::Normal;
                    if status == b'I' && t != tag::TERMINATE {
                        self.snapshot(out);
                    }
                }
            },
        }
        match t {
            tag::PARSE | tag::DESCRIBE => self.batch.frames.push(msg.clone()),
            tag::BIND => {
                self.batch.binds += 1;
                // A shared statement's Bind names the server's: the
                // client's statement of the same text is the same.
                self.batch.statement = frontend::bind(msg).and_then(|(_, s)| {
                    let s = ctx.named.client_name_of(s).unwrap_or(s);
                    ctx.flight.statement(s).cloned()
                });
                self.batch.frames.push(msg.clone());
            }
            tag::EXECUTE => {
                self.batch.executes += 1;
                self.batch.unlimited = frontend::execute(msg).is_some_and(|(_, n)| n == 0);
                self.batch.frames.push(msg.clone());
                if let Some(w) = self.batch.statement.as_ref().map(Sql::words) {
                    self.note_deallocation(w);
                    if may_set_isolation(w)
                        && let Some(sql) = self.batch.statement.clone()
                    {
                        let changes = self.analyses.judge(&sql).isolation;
                        self.apply_isolation(&changes, ctx.txn_status != b'I');
                    }
                }
            }
            tag::SYNC => self.batch.clear(),
            // A simple Query ends the extended batch as a Sync does.
            tag::QUERY => {
                self.batch.clear();
                self.batch.after_query = true;
            }
            // The end of a COPY a simple Query runs, nothing since: the
            // Query's ReadyForQuery ends it. (After a Sync, the COPY may
            // be an Execute's, which read that Sync as its data: its group
            // goes on until the next.)
            tag::COPY_DONE | tag::COPY_FAIL
                if self.batch.after_query && self.batch.frames.is_empty() => {}
            tag::FLUSH => {
                if let Some(probe) = self.qualifies(ctx) {
                    self.early_sync(probe, ctx, out);
                    return false;
                }
                if !self.batch.frames.is_empty() {
                    // What it holds is answered now: a later Flush before
                    // the Sync can't make this batch one round trip any
                    // more, nor could a failed probe run it again unseen.
                    self.batch.others = true;
                }
            }
            _ => self.batch.others = true,
        }
        true
    }

    /// The batch so far has the shape of one to coalesce; whether it may be
    /// depends on the session too.
    pub fn may_coalesce_batch(&self) -> bool {
        let b = &self.batch;
        self.enabled && b.binds == 1 && b.executes == 1 && !b.others && b.unlimited
    }

    /// Whether the batch ending in this Flush may be coalesced, and if so
    /// whether it needs the write probe.
    fn qualifies(&mut self, ctx: &Ctx) -> Option<bool> {
        let b = &self.batch;
        // Only a batch that nothing sent before it is still waiting on: then
        // the next ReadyForQuery is the early Sync's, and `txn_status` is
        // the one the batch runs in. Nor one the server skips, after an
        // error before it: an early Sync would end the skipping sooner than
        // the client's Sync does.
        if !self.enabled
            || ctx.awaiting_ready
            || ctx.flight.skipping()
            || b.binds != 1
            || b.executes != 1
            || b.others
            || !b.unlimited
            || ctx.in_copy
            || !matches!(ctx.txn_status, b'I' | b'T')
            || !self.read_committed()
        {
            return None;
        }
        let sql = b.statement.clone()?;
        if self.no_coalesce.contains(&sql) {
            return None;
        }
        let verdict = self.verdict(&sql, ctx.flight);
        let services = ctx.services;
        let decision = if ctx.txn_status == b'T' {
            // Inside a block a Sync commits nothing: anything but transaction
            // control keeps its meaning. Not settings, though (nor
            // set_config, which is unsafe): the server reports a changed
            // setting (ParameterStatus) just before ReadyForQuery, and an
            // early Sync would bring the report forward. Nor a COPY: FROM
            // STDIN reads the early Sync as its data and never answers it.
            match verdict {
                Verdict::TransactionControl
                | Verdict::Unknown
                | Verdict::Never(StatementClass::SessionSetting | StatementClass::Unsafe) => None,
                _ if self.analyses.judge(&sql).copy => None,
                _ => Some(false),
            }
        } else {
            match verdict {
                Verdict::Read => Some(false),
                Verdict::MaybeWrite if self.probe_enabled && !self.no_probe.contains(&sql) => {
                    Some(true)
                }
                _ => None,
            }
        };
        if decision.is_none() {
            services.stats.note_fallback(verdict.fallback_reason());
        }
        decision
    }

    /// The statement's verdict; `EXECUTE name(args)` gets the prepared
    /// statement's, or its arguments' when those are worse.
    fn verdict(&mut self, sql: &Sql, flight: &Flight) -> Verdict {
        let own = self.analyses.judge(sql).verdict;
        if !sql.words().any(Words::EXECUTE) {
            return own;
        }
        let ops = prepared_ops(sql.as_str());
        let [PreparedOp::Execute { name, args }] = ops.as_slice() else {
            return own;
        };
        if self.analyses.judge(sql).statements != 1 {
            return own;
        }
        let Some(target) = flight.statement(name) else {
            return own;
        };
        let runs = self.analyses.judge(target).verdict;
        if args.trim().is_empty() {
            return runs;
        }
        let args = self.analyses.judge_text(&format!("SELECT {args}")).verdict;
        Verdict::worse(runs, args)
    }

    fn early_sync(&mut self, probe: bool, ctx: &Ctx, out: &mut Out) {
        Counters::add(&ctx.info.counters.coalesced_batches, 1);
        if probe {
            if !self.probe_prepared {
                out.to_upstream
                    .push((probe_prepare(self.pg13), Some(Own::Probe)));
            }
            out.to_upstream.push((probe_run(), Some(Own::Probe)));
            self.held = HeldAnswers::default();
        }
        out.to_upstream.push((sync_frame(), None));
        self.state = State::Early {
            probe,
            failed: false,
        };
        if !probe {
            self.batch.clear();
        }
    }

    /// The client sends more before its Sync, after an early Sync ended its
    /// implicit transaction. Had the Sync not come early, what it sends now
    /// would run in the transaction of the statement before it, where a
    /// query has run: SET TRANSACTION ISOLATION LEVEL, for one, fails there.
    /// A statement of the proxy's own that takes a snapshot goes first, so
    /// what the client sends runs after a query, as it would have.
    fn snapshot(&mut self, out: &mut Out) {
        out.to_upstream
            .push((snapshot_frames(), Some(Own::Snapshot)));
    }

    /// An upstream message read whole; true when it goes to the client as
    /// it came (after whatever `out` holds), false when it is held.
    pub fn on_upstream_message(
        &mut self,
        t: u8,
        msg: &Bytes,
        owner: Owner,
        ctx: &Ctx,
        out: &mut Out,
    ) -> bool {
        match self.state {
            State::Early { probe: true, .. } => {
                let probe = owner == Owner::Own(Own::Probe);
                self.on_probe_answer(t, msg.clone(), probe, ctx, out);
                false
            }
            State::Early {
                probe: false,
                failed,
            } => match t {
                tag::READY_FOR_QUERY => {
                    self.state = State::Held {
                        status: backend::ready_status(msg),
                        failed,
                    };
                    false
                }
                tag::ERROR_RESPONSE => {
                    self.state = State::Early {
                        probe: false,
                        failed: true,
                    };
                    true
                }
                _ => true,
            },
            _ => true,
        }
    }

    /// An answer while the probe runs: `probe`, the probe's own.
    fn on_probe_answer(&mut self, t: u8, msg: Bytes, probe: bool, ctx: &Ctx, out: &mut Out) {
        let h = &mut self.held;
        match t {
            tag::READY_FOR_QUERY => {
                let status = backend::ready_status(&msg);
                self.finish_probe(status, ctx, out);
                return;
            }
            tag::ERROR_RESPONSE if probe => h.probe_failed = true,
            tag::ERROR_RESPONSE => h.statement_failed = true,
            _ => {}
        }
        if probe || h.dropped {
            return;
        }
        h.bytes += msg.len();
        h.messages.push(msg);
        if h.bytes > self.max_held {
            // Memory stays bounded and the answer exact: the held answers
            // are let go and, whatever the probe finds, the batch runs
            // again as the client sent it (its first run wrote nothing, or
            // was rolled back, or failed and ended). Not coalesced again.
            h.dropped = true;
            h.messages = Vec::new();
            if let Some(sql) = &self.batch.statement {
                self.no_coalesce.insert(sql);
            }
        }
    }

    fn finish_probe(&mut self, status: u8, ctx: &Ctx, out: &mut Out) {
        let held = std::mem::take(&mut self.held);
        let batch = std::mem::take(&mut self.batch);
        // Only a probe that ran and passed is known to be prepared.
        self.probe_prepared = !held.statement_failed && !held.probe_failed;
        if held.dropped {
            ctx.services
                .stats
                .note_fallback("coalesce: held answers past max_held_bytes, run again");
            self.rerun(batch, out);
            return;
        }
        if held.statement_failed || !held.probe_failed {
            // The statement failed on its own (the server skipped the probe),
            // or wrote nothing: the client gets exactly its own answers.
            out.to_client.extend(held.messages);
            if !held.statement_failed {
                Counters::add(&ctx.info.counters.probes_passed, 1);
            }
            self.state = State::Held {
                status,
                failed: held.statement_failed,
            };
            return;
        }
        // The statement wrote, and the server rolled it back. Run the batch
        // again as the client sent it.
        Counters::add(&ctx.info.counters.probes_failed, 1);
        if let Some(sql) = &batch.statement {
            self.no_probe.insert(sql);
        }
        self.rerun(batch, out);
    }

    /// The batch goes upstream again as the client sent it, its answers
    /// relayed; not to be coalesced again: its Execute is flushed.
    fn rerun(&mut self, batch: Batch, out: &mut Out) {
        let mut rerun = Batch {
            statement: batch.statement.clone(),
            binds: 1,
            executes: 1,
            unlimited: true,
            others: true,
            ..Batch::default()
        };
        for f in &batch.frames {
            // A named statement's Parse succeeded the first time and
            // survives the rollback: closed first (unseen), it succeeds
            // again, and the client gets its answer in its place.
            if f[0] == tag::PARSE
                && let Some((name, _)) = frontend::parse(f).filter(|(n, _)| !n.is_empty())
            {
                out.to_upstream
                    .push((close_statement(name), Some(Own::Rerun)));
            }
            out.to_upstream.push((f.clone(), None));
            rerun.frames.push(f.clone());
        }
        out.to_upstream.push((flush_frame(), None));
        self.batch = rerun;
        self.state = State::Normal;
    }
}

/// Statement texts remembered for the session, bounded: past `MAX` texts
/// or `MAX_BYTES` of them, everything is forgotten and remembering starts
/// over. Forgetting costs a retry (a probe that fails again, a large
/// answer held again), never an answer.
#[derive(Default)]
struct Remembered {
    /// Made at the first text remembered: most sessions never have one.
    set: Option<Box<FxHashSet<Sql>>>,
    bytes: usize,
}

impl Remembered {
    const MAX: usize = 256;
    const MAX_BYTES: usize = 256 * 1024;

    fn contains(&self, sql: &Sql) -> bool {
        self.set.as_ref().is_some_and(|s| s.contains(sql))
    }

    fn insert(&mut self, sql: &Sql) {
        let len = sql.as_str().len();
        let set = self.set.get_or_insert_default();
        if set.len() >= Self::MAX || self.bytes + len > Self::MAX_BYTES {
            set.clear();
            self.bytes = 0;
        }
        if len <= Self::MAX_BYTES && set.insert(sql.detached()) {
            self.bytes += len;
        }
    }
}

#[cfg(test)]
mod remembered_tests {
    use bytes::Bytes;

    use super::*;

    impl Remembered {
        fn len(&self) -> usize {
            self.set.as_ref().map_or(0, |s| s.len())
        }
    }

    #[test]
    fn remembered_texts_stay_bounded() {
        let mut r = Remembered::default();
        for i in 0..1000 {
            let msg = Bytes::from(format!("select '{}', {i}", "x".repeat(i % 3 * 50_000)));
            let sql = Sql::within(&msg, std::str::from_utf8(&msg).unwrap(), None);
            r.insert(&sql);
            assert!(r.contains(&sql) || sql.as_str().len() > Remembered::MAX_BYTES);
            assert!(r.len() <= Remembered::MAX && r.bytes <= Remembered::MAX_BYTES);
        }
    }
}
