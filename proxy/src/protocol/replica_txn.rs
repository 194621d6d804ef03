//! Read-only transactions on a replica (session mode, `defer_begin`): a
//! BEGIN held here (`client_txn.rs`) whose transaction is read only from
//! its start (`BEGIN READ ONLY`, or a plain BEGIN followed by `SET
//! TRANSACTION READ ONLY`) may run whole on a replica. The relay sends it
//! there (`relay/replica/`); what it asks of the session is here. A
//! statement the relay can't send there moves the transaction to the
//! primary: it becomes a held BEGIN again, which goes up ahead of that
//! statement (failed, if the replica's transaction had failed), so the
//! primary answers as it would have all along. That holds at READ
//! COMMITTED only, where each statement takes its own snapshot: the reads
//! the replica ran left nothing behind, and the rest run on fresher data.

use bytes::Bytes;
use onetrip_planner::classify::{IsolationLevel, StatementClass, TransactionStatement};

use super::transaction::HeldBegin;
use super::*;

impl Protocol {
    /// What `may_detour` asks, but with a BEGIN held here.
    pub fn may_detour_held(&self) -> bool {
        self.txn.held.is_some() && !self.txn.failed && self.detour_ok()
    }

    /// The held BEGIN, if a replica may run its transaction: a simple
    /// Query alone that begins one at READ COMMITTED, the session's
    /// default as the server reported it. Its frames, and whether it is
    /// read only already (else a plain BEGIN).
    pub fn held_begin_for_replica(&self) -> Option<(Bytes, bool)> {
        let held = self.txn.held.as_ref()?;
        // A pooled session that has had no connection yet goes by the
        // default its pool's connections were found to have.
        let isolation = match self.settings.asked() || self.own_defaults {
            true => self.settings.default_isolation(),
            false => self.replica.as_ref().and_then(|f| f.pool_isolation),
        };
        if held.parse.is_some() || isolation != Some(IsolationLevel::ReadCommitted) {
            return None;
        }
        let h = frame::peek_header(&held.frames, usize::MAX).ok()??;
        if h.tag != tag::QUERY || h.wire_len != held.frames.len() {
            return None;
        }
        let read_only = begin_mode(frontend::query_text(&held.frames)?)?;
        Some((held.frames.clone(), read_only))
    }

    /// The default isolation of the pool's connections, as the last one
    /// given back had learned it (`Pool::default_isolation`): one pool is
    /// one role and database, so the same default.
    pub fn note_pool_isolation(&mut self, isolation: Option<IsolationLevel>) {
        if let Some(f) = self.replica.as_deref_mut() {
            f.pool_isolation = isolation;
        }
    }

    /// The simple Query `msg` is `SET TRANSACTION READ ONLY` alone.
    pub fn sets_read_only(msg: &[u8]) -> bool {
        frontend::query_text(msg)
            .is_some_and(|t| words_are(t, &["set", "transaction", "read", "only"]))
    }

    /// The simple Query `msg` is a COMMIT or ROLLBACK alone (no chain, no
    /// savepoint, no two-phase commit).
    pub fn ends_transaction(&mut self, msg: &[u8]) -> bool {
        let Some(text) = frontend::query_text(msg) else {
            return false;
        };
        let a = self.coalescer.analyses.for_catalog(text, None);
        a.class.statement_count == 1
            && a.class.class == StatementClass::TransactionControl
            && matches!(
                a.class.transaction,
                Some(TransactionStatement::Commit | TransactionStatement::Rollback)
            )
    }

    /// A replica runs the held BEGIN's transaction now.
    pub fn held_begin_to_replica(&mut self) {
        self.txn.held = None;
    }

    /// The transaction a replica has run so far goes on on the primary:
    /// its BEGIN (`frames`, as the client sent it) is held again, to go
    /// up ahead of the client's next statement, followed by one that fails
    /// when the replica's transaction had failed (`failed`).
    pub fn replica_txn_to_primary(&mut self, frames: Bytes, failed: bool) {
        self.txn.held = Some(HeldBegin {
            frames,
            parse: None,
            lazy_ok: false,
            unnamed_after: None,
        });
        self.txn.failed = failed;
        self.info.set_state(SessionState::TransactionHeld);
    }
}

/// Whether `text` is a BEGIN or START TRANSACTION whose modes are at
/// most READ ONLY (`true` with it, `false` without), ISOLATION LEVEL READ
/// COMMITTED and [NOT] DEFERRABLE (which only SERIALIZABLE heeds); `None`
/// for any other.
fn begin_mode(text: &str) -> Option<bool> {
    let rest = super::client_txn::begin_modes(text, &[';', ','])?;
    let mut rest = rest.iter().map(String::as_str);
    let mut read_only = false;
    while let Some(w) = rest.next() {
        let ok = match w {
            "read" => {
                read_only = true;
                rest.next() == Some("only")
            }
            "isolation" => rest.by_ref().take(3).eq(["level", "read", "committed"]),
            "not" => rest.next() == Some("deferrable"),
            "deferrable" => true,
            _ => false,
        };
        if !ok {
            return None;
        }
    }
    Some(read_only)
}

/// `text` is exactly `words`, in any case, with any spaces and a `;`.
fn words_are(text: &str, words: &[&str]) -> bool {
    let mut got = text
        .split(|c: char| c.is_ascii_whitespace() || c == ';')
        .filter(|w| !w.is_empty());
    words
        .iter()
        .all(|w| got.next().is_some_and(|g| g.eq_ignore_ascii_case(w)))
        && got.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begins_a_replica_may_run() {
        assert_eq!(begin_mode("BEGIN READ ONLY"), Some(true));
        assert_eq!(begin_mode("start transaction read only;"), Some(true));
        assert_eq!(begin_mode("begin work"), Some(false));
        assert_eq!(begin_mode("BEGIN"), Some(false));
        assert_eq!(begin_mode("BEGIN READ WRITE"), None);
        assert_eq!(
            begin_mode("BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY"),
            None
        );
        assert_eq!(
            begin_mode("BEGIN ISOLATION LEVEL READ COMMITTED, READ ONLY, NOT DEFERRABLE;"),
            Some(true)
        );
        assert_eq!(
            begin_mode("BEGIN ISOLATION LEVEL READ COMMITTED"),
            Some(false)
        );
        assert_eq!(begin_mode("BEGIN ISOLATION LEVEL READ"), None);
        assert_eq!(begin_mode("BEGIN READ"), None);
        assert!(words_are(
            "set  TRANSACTION read only ;",
            &["set", "transaction", "read", "only"]
        ));
        assert!(!words_are(
            "set transaction read only, isolation level serializable",
            &["set", "transaction", "read", "only"]
        ));
        assert!(!words_are(
            "set transaction read",
            &["set", "transaction", "read", "only"]
        ));
    }
}
