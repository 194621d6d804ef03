//! Client to upstream, for transactions (`transaction.rs`): which of the
//! client's messages are answered here, which wait for the rest of their
//! group, and when a held BEGIN goes upstream.

use std::sync::Arc;

use bytes::Bytes;
use onetrip_planner::{
    analysis::Analysis,
    classify::{StatementClass, TransactionStatement},
};

use super::transaction::{self, Group, HeldBegin};
use super::*;

/// What becomes of the client's message at `at`.
pub(super) enum TxnStep {
    /// It goes on through the usual path.
    Go,
    /// It and the messages of its group, up to this offset, were answered
    /// here.
    Answered(usize),
}

impl Protocol {
    pub(super) fn transaction_step(
        &mut self,
        chunk: &Bytes,
        at: usize,
        t: u8,
        end: usize,
        to_up: &mut WriteQueue,
        to_client: &mut WriteQueue,
    ) -> TxnStep {
        if !self.txn.defer_begin {
            self.fix_unnamed_before(chunk, at, t, to_up);
            return TxnStep::Go;
        }
        if self.txn_group {
            // Decided at the group's first message.
            if !is_extended(t) {
                self.txn_group = false;
            }
            self.fix_unnamed_before(chunk, at, t, to_up);
            return TxnStep::Go;
        }
        let step = if self.txn.held.is_none() {
            self.begin_here(chunk, at, t, end, to_client)
        } else {
            self.while_held(chunk, at, t, end, to_up, to_client)
        };
        if matches!(step, TxnStep::Go) {
            self.fix_unnamed_before(chunk, at, t, to_up);
            self.txn_group = is_extended(t);
        }
        step
    }

    /// A BEGIN sent while nothing is on its way: answered here, held.
    pub(super) fn begin_here(
        &mut self,
        chunk: &Bytes,
        at: usize,
        t: u8,
        end: usize,
        to_client: &mut WriteQueue,
    ) -> TxnStep {
        if !matches!(t, tag::QUERY | tag::PARSE) || !self.quiet_upstream() {
            return TxnStep::Go;
        }
        // Nearly every statement is looked at here: its first word first,
        // on the bytes.
        if !frontend::statement_bytes_loose(t, &chunk[at..end])
            .is_some_and(|b| first_word_is(b, &["begin", "start"]))
        {
            return TxnStep::Go;
        }
        let msg = chunk.slice(at..end);
        let (text, unnamed_parse) = match t {
            tag::QUERY => (frontend::query_text(&msg), false),
            _ => match frontend::parse(&msg) {
                Some(("", text)) => (Some(text), true),
                _ => (None, false),
            },
        };
        let Some(text) = text else {
            return TxnStep::Go;
        };
        let sql = Sql::within(&msg, text, None);
        let analysis = self.coalescer.analyses.of(&sql);
        let Some(TransactionStatement::Begin { tag: begin_tag }) = analysis.class.transaction
        else {
            return TxnStep::Go;
        };
        let lazy_ok = begins_plainly(text);
        let (answers, group_end, parse) = if t == tag::QUERY {
            (transaction::query_answers(begin_tag, b'T'), end, None)
        } else {
            // A group whose end has not come is forwarded as it is: the
            // client may be waiting without a Sync or Flush (an error is
            // sent at once), and only the server can answer it then.
            let Some(g) = transaction::group(chunk, at) else {
                return TxnStep::Go;
            };
            if !plain_unnamed_group(chunk, &g) {
                return TxnStep::Go;
            }
            (
                transaction::group_answers(&g, begin_tag, b'T'),
                g.end,
                unnamed_parse.then(|| sql.detached()),
            )
        };
        self.txn.held = Some(HeldBegin {
            frames: chunk.slice(at..group_end),
            parse,
            lazy_ok,
            unnamed_after: None,
        });
        if t == tag::QUERY {
            // A simple Query drops the unnamed statement: the server's goes
            // before the client next uses it, though a read may run
            // without the BEGIN.
            self.unnamed_fix = Some(UnnamedFix::Drop);
            self.flight.forget("");
            self.forget_told("");
        }
        Counters::add(&self.info.counters.deferred_begins, 1);
        self.note_statement(None);
        self.info.set_state(SessionState::TransactionHeld);
        self.answer_here(answers, to_client);
        TxnStep::Answered(group_end)
    }

    /// A message while a BEGIN is held.
    fn while_held(
        &mut self,
        chunk: &Bytes,
        at: usize,
        t: u8,
        end: usize,
        to_up: &mut WriteQueue,
        to_client: &mut WriteQueue,
    ) -> TxnStep {
        match t {
            tag::TERMINATE => return TxnStep::Go,
            // Nothing is on its way for them: a lone Sync gets the status,
            // a lone Flush nothing.
            tag::SYNC if !self.unsynced => {
                self.client_rt = true;
                let status = self.txn.told_status();
                self.answer_here(wire::write::ready_frame(status), to_client);
                return TxnStep::Answered(end);
            }
            tag::FLUSH if !self.unsynced => return TxnStep::Answered(end),
            _ => {}
        }
        if t == tag::QUERY {
            let msg = chunk.slice(at..end);
            let Some(text) = frontend::query_text(&msg) else {
                self.send_held(to_up);
                return TxnStep::Go;
            };
            let analysis = self.coalescer.analyses.of(&Sql::within(&msg, text, None));
            if let Some(end_kind) = ends(&analysis) {
                self.end_query_here(end_kind, to_client);
                return TxnStep::Answered(end);
            }
            if self.lazy_read(&analysis) {
                self.lazy_next = true;
                self.note_unnamed_after(UnnamedFix::Drop);
                return TxnStep::Go;
            }
            self.send_held(to_up);
            return TxnStep::Go;
        }
        if !matches!(
            t,
            tag::PARSE | tag::BIND | tag::DESCRIBE | tag::EXECUTE | tag::CLOSE
        ) {
            self.send_held(to_up);
            return TxnStep::Go;
        }
        // Its end has not come: the server must see it now (see begin_here).
        let Some(g) = transaction::group(chunk, at) else {
            self.send_held(to_up);
            return TxnStep::Go;
        };
        // The client's unnamed statement is the held BEGIN's now, which
        // the server has not seen: a group that uses it without making its
        // own goes up behind the BEGIN, whatever it runs.
        let begin_parsed = self.txn.held.as_ref().is_some_and(|h| h.parse.is_some());
        if begin_parsed && !makes_unnamed(chunk, &g) && (g.others || uses_unnamed(chunk, &g)) {
            self.send_held(to_up);
            return TxnStep::Go;
        }
        let analysis = self.group_statement(chunk, &g);
        let plain = plain_unnamed_group(chunk, &g);
        if plain && let Some(end_kind) = analysis.as_deref().and_then(ends) {
            self.end_group_here(chunk, &g, end_kind, to_client);
            return TxnStep::Answered(g.end);
        }
        // Statements only prepared or described (a driver preparing one):
        // the server needs no transaction for them.
        let prepares_only = g.synced && g.bind.is_none() && g.execute.is_none();
        if prepares_only && self.lazy_allowed() {
            self.lazy_next = true;
            self.note_group_unnamed_after(chunk, &g);
            return TxnStep::Go;
        }
        let unlimited = g
            .execute
            .and_then(|(s, e)| frontend::execute(&chunk[s..e]))
            .is_some_and(|(_, n)| n == 0);
        if plain && unlimited && analysis.as_deref().is_some_and(|a| self.lazy_read(a)) {
            self.lazy_next = true;
            self.note_group_unnamed_after(chunk, &g);
            return TxnStep::Go;
        }
        self.send_held(to_up);
        TxnStep::Go
    }

    /// A COMMIT or ROLLBACK as a Query ends the held transaction here.
    fn end_query_here(&mut self, end_kind: TransactionStatement, to_client: &mut WriteQueue) {
        let tag_text = self.end_tag(end_kind);
        self.end_here(transaction::query_answers(tag_text, b'I'), to_client);
        self.unnamed_fix = Some(UnnamedFix::Drop);
        self.flight.forget("");
    }

    /// A COMMIT or ROLLBACK as a plain group ends the held transaction
    /// here; its Parse, if any, is the client's unnamed statement now.
    fn end_group_here(
        &mut self,
        chunk: &Bytes,
        g: &Group,
        end_kind: TransactionStatement,
        to_client: &mut WriteQueue,
    ) {
        let tag_text = self.end_tag(end_kind);
        self.end_here(transaction::group_answers(g, tag_text, b'I'), to_client);
        if let Some((s, e)) = g.parse {
            self.unnamed_fix = Some(UnnamedFix::Parse(chunk.slice(s..e)));
            self.flight.forget("");
        }
    }

    /// A pooled session without a server connection: ends its held
    /// transaction here when `chunk` starts with a COMMIT or ROLLBACK that
    /// `while_held` would answer (a Query, or a plain group that makes its
    /// own unnamed statement); false, having changed nothing, otherwise.
    pub(super) fn end_held_alone(
        &mut self,
        chunk: &Bytes,
        t: u8,
        end: usize,
        to_client: &mut WriteQueue,
    ) -> bool {
        if self.txn.held.is_none() || self.unsynced {
            return false;
        }
        match t {
            tag::QUERY => {
                let msg = chunk.slice(..end);
                let Some(text) = frontend::query_text(&msg) else {
                    return false;
                };
                let analysis = self.coalescer.analyses.of(&Sql::within(&msg, text, None));
                let Some(end_kind) = ends(&analysis) else {
                    return false;
                };
                self.end_query_here(end_kind, to_client);
                true
            }
            tag::PARSE => {
                let Some(g) = transaction::group(chunk, 0) else {
                    return false;
                };
                if !plain_unnamed_group(chunk, &g) || !makes_unnamed(chunk, &g) {
                    return false;
                }
                let analysis = self.group_statement(chunk, &g);
                let Some(end_kind) = analysis.as_deref().and_then(ends) else {
                    return false;
                };
                self.end_group_here(chunk, &g, end_kind, to_client);
                true
            }
            _ => false,
        }
    }

    /// The statement a group runs: the one its Bind names, which its own
    /// Parse may have just made.
    fn group_statement(&mut self, chunk: &Bytes, g: &Group) -> Option<Arc<Analysis>> {
        let (s, e) = g.bind?;
        let (_, stmt) = frontend::bind(&chunk[s..e])?;
        if let Some((s, e)) = g.parse {
            let msg = chunk.slice(s..e);
            let (name, text) = frontend::parse(&msg)?;
            if name == stmt {
                return Some(self.coalescer.analyses.of(&Sql::within(&msg, text, None)));
            }
        }
        let sql = self.flight.statement(stmt)?.clone();
        Some(self.coalescer.analyses.of(&sql))
    }

    /// May this statement run without the held BEGIN? A pure read, under
    /// READ COMMITTED (the session's and the BEGIN's), with `lazy_reads`.
    fn lazy_read(&self, a: &Analysis) -> bool {
        self.lazy_allowed()
            && a.class.class == StatementClass::Read
            && a.class.statement_count == 1
            && !a.class.transaction_time
            && a.class.isolation.is_empty()
    }

    /// Anything may run without the held BEGIN now: `lazy_reads`, under
    /// READ COMMITTED (the session's and the BEGIN's).
    fn lazy_allowed(&self) -> bool {
        let held_ok = self.txn.held.as_ref().is_some_and(|h| h.lazy_ok);
        self.txn.lazy_reads
            && held_ok
            && !self.txn.failed
            && self.coalescer.session_read_committed()
    }

    /// COMMIT's tag: ROLLBACK when the transaction failed, as PostgreSQL's.
    fn end_tag(&self, end: TransactionStatement) -> &'static str {
        match end {
            TransactionStatement::Commit if !self.txn.failed => "COMMIT",
            _ => "ROLLBACK",
        }
    }

    /// A transaction that never reached the server ends here.
    fn end_here(&mut self, answers: Bytes, to_client: &mut WriteQueue) {
        self.txn.held = None;
        self.txn.failed = false;
        self.client_rt = true;
        Counters::add(&self.info.counters.local_ends, 1);
        Counters::add(&self.info.counters.transactions, 1);
        self.note_statement(None);
        self.work_since_idle = false;
        self.info.set_state(SessionState::Idle);
        self.answer_here(answers, to_client);
    }

    /// An answer given here, in its turn.
    pub(super) fn answer_here(&mut self, answers: Bytes, to_client: &mut WriteQueue) {
        self.client_rt = true;
        if let Some(now) = self.flight.local(answers) {
            self.emit(to_client, now);
        }
    }

    /// The held BEGIN goes upstream ahead of what needs the server; after
    /// a failed lazy read, with a statement that fails, so the server
    /// answers what follows as the aborted block it is.
    pub(super) fn send_held(&mut self, to_up: &mut WriteQueue) {
        let Some(held) = self.txn.held.take() else {
            return;
        };
        let parsed = held.parse.is_some();
        self.send_own_up_parsing(to_up, held.frames, Own::Begin, false, held.parse);
        if parsed {
            // The server's unnamed statement is the BEGIN's now, as the
            // client's is, unless a read without it made another since.
            // (Any fix pending, from a change of connection, is older.)
            self.unnamed_fix = held.unnamed_after;
        }
        if std::mem::take(&mut self.txn.failed) {
            self.send_own_up(to_up, transaction::abort_frames(), Own::Abort, false);
        }
    }

    /// A read runs without the held BEGIN and makes the client's unnamed
    /// statement `fix`'s.
    fn note_unnamed_after(&mut self, fix: UnnamedFix) {
        if let Some(held) = self.txn.held.as_mut() {
            held.unnamed_after = Some(fix);
        }
    }

    fn note_group_unnamed_after(&mut self, chunk: &Bytes, g: &Group) {
        if let (Some((s, e)), true) = (g.parse, makes_unnamed(chunk, g)) {
            self.note_unnamed_after(UnnamedFix::Reparse(chunk.slice(s..e)));
        }
    }

    /// Before a message that uses the unnamed statement (a Bind or a
    /// Describe of it) goes upstream, the server's unnamed statement is made
    /// what the client's is after statements answered here.
    fn fix_unnamed_before(&mut self, chunk: &Bytes, at: usize, t: u8, to_up: &mut WriteQueue) {
        if self.unnamed_fix.is_none() {
            return;
        }
        let msg = &chunk[at..];
        let uses_unnamed = match t {
            // A new unnamed statement, or a Query (which drops it): no fix
            // needed any more.
            tag::PARSE if frontend::parse(msg).is_some_and(|(n, _)| n.is_empty()) => {
                self.unnamed_fix = None;
                false
            }
            tag::QUERY => {
                self.unnamed_fix = None;
                false
            }
            tag::BIND => frontend::bind(msg).is_some_and(|(_, s)| s.is_empty()),
            tag::DESCRIBE | tag::CLOSE => frontend::target(msg) == Some((b'S', "")),
            _ => false,
        };
        if !uses_unnamed {
            return;
        }
        let fix = match self.unnamed_fix.take() {
            Some(UnnamedFix::ReparseKept) if !self.unnamed_parse.is_empty() => Some(
                UnnamedFix::Reparse(Bytes::copy_from_slice(&self.unnamed_parse)),
            ),
            other => other,
        };
        let frame = match fix {
            Some(UnnamedFix::Parse(p)) => p,
            Some(UnnamedFix::Reparse(p)) => {
                let sql = frontend::parse(&p).map(|(_, text)| Sql::within(&p, text, None));
                self.send_own_up_parsing(to_up, p, Own::Rerun, false, sql);
                return;
            }
            _ => super::own::close_statement(""),
        };
        self.send_own_up(to_up, frame, Own::Rerun, false);
    }
}

/// A message of an extended-protocol batch, which its Sync ends.
fn is_extended(t: u8) -> bool {
    matches!(
        t,
        tag::PARSE | tag::BIND | tag::DESCRIBE | tag::EXECUTE | tag::CLOSE
    )
}

/// Does `text` start with one of `words` (ASCII case-insensitive)? A cheap
/// look before the planner's.
pub(super) fn first_word_is(text: &[u8], words: &[&str]) -> bool {
    let t = text.trim_ascii_start();
    words.iter().any(|w| {
        t.get(..w.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(w.as_bytes()))
            && !t
                .get(w.len())
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c >= 0x80)
    })
}

/// A COMMIT or ROLLBACK (not chained, not to a savepoint).
fn ends(a: &Analysis) -> Option<TransactionStatement> {
    a.class
        .transaction
        .filter(|t| !matches!(t, TransactionStatement::Begin { .. }))
}

/// The BEGIN sets no isolation level, or READ COMMITTED.
/// A BEGIN whose transaction a lazy read can stand in for: no modes but
/// READ COMMITTED. READ UNCOMMITTED, READ ONLY, READ WRITE or DEFERRABLE
/// would show in what a read outside it reports (`transaction_isolation`,
/// `transaction_read_only`), so any other text, comments included, gets
/// none.
fn begins_plainly(text: &str) -> bool {
    begin_modes(text, &[';'])
        .is_some_and(|rest| rest.is_empty() || rest == ["isolation", "level", "read", "committed"])
}

/// The words after `BEGIN [TRANSACTION | WORK]` or `START TRANSACTION`,
/// lowercased, split at whitespace and at `separators`; `None` when
/// `text` begins no transaction.
pub(super) fn begin_modes(text: &str, separators: &[char]) -> Option<Vec<String>> {
    let mut words = text
        .split(|c: char| c.is_ascii_whitespace() || separators.contains(&c))
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase);
    match words.next().as_deref() {
        Some("begin") => Some(
            words
                .skip_while(|w| w == "transaction" || w == "work")
                .collect(),
        ),
        Some("start") if words.next().as_deref() == Some("transaction") => Some(words.collect()),
        _ => None,
    }
}

/// The group's Parse makes the unnamed statement.
fn makes_unnamed(chunk: &[u8], g: &Group) -> bool {
    g.parse
        .is_some_and(|(s, e)| frontend::parse(&chunk[s..e]).is_some_and(|(n, _)| n.is_empty()))
}

/// The group binds or describes the unnamed statement.
fn uses_unnamed(chunk: &[u8], g: &Group) -> bool {
    let binds = g
        .bind
        .and_then(|(s, e)| frontend::bind(&chunk[s..e]))
        .is_some_and(|(_, stmt)| stmt.is_empty());
    let describes = g
        .describe
        .is_some_and(|(s, e)| frontend::target(&chunk[s..e]) == Some((b'S', "")));
    binds || describes
}

/// One Parse (of the unnamed statement) at most, one Bind of the unnamed
/// statement to the unnamed portal, a Describe of it at most, one Execute
/// of it, and the Sync: the group a driver sends for one statement.
fn plain_unnamed_group(chunk: &[u8], g: &Group) -> bool {
    let unnamed_parse = g
        .parse
        .is_none_or(|(s, e)| frontend::parse(&chunk[s..e]).is_some_and(|(n, _)| n.is_empty()));
    let bind_unnamed = g
        .bind
        .and_then(|(s, e)| frontend::bind(&chunk[s..e]))
        .is_some_and(|(portal, stmt)| portal.is_empty() && (g.parse.is_none() || stmt.is_empty()));
    let describe_portal = g
        .describe
        .is_none_or(|(s, e)| frontend::target(&chunk[s..e]) == Some((b'P', "")));
    let execute_unnamed = g
        .execute
        .and_then(|(s, e)| frontend::execute(&chunk[s..e]))
        .is_some_and(|(portal, _)| portal.is_empty());
    g.synced && !g.others && unnamed_parse && bind_unnamed && describe_portal && execute_unnamed
}

#[cfg(test)]
mod tests {
    use super::begins_plainly;

    #[test]
    fn only_a_plain_begin_lets_reads_run_lazily() {
        for t in [
            "BEGIN",
            "begin;",
            "BEGIN TRANSACTION",
            "begin work",
            "START TRANSACTION",
            "begin isolation level read committed",
            "START TRANSACTION ISOLATION LEVEL READ COMMITTED;",
        ] {
            assert!(begins_plainly(t), "{t}");
        }
        for t in [
            "begin isolation level read uncommitted",
            "begin isolation level repeatable read",
            "begin read only",
            "begin read write",
            "begin isolation level read committed, read only",
            "begin isolation level read committed read only",
            "start transaction deferrable",
            "/* x */ begin",
            "start",
            "",
        ] {
            assert!(!begins_plainly(t), "{t}");
        }
    }
}
