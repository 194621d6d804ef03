//! What routing reads to replicas needs of a session's protocol state
//! (the routing itself is the relay's, `relay/replica/`): the client's
//! floor, the primary's WAL position after its last write, learned in the
//! same write as that write (`SELECT pg_current_wal_insert_lsn()` sent
//! right behind it, its answer swallowed); whether the session has set up
//! anything a replica connection would lack; and whether it may take a
//! read off the primary now.

use std::collections::VecDeque;

use bytes::Bytes;
use onetrip_planner::classify::{StatementClass, TransactionStatement};

use super::*;

/// A session's part in routing reads: made when its reads may be routed
/// (session mode, replicas configured), boxed (most sessions have none).
#[derive(Default)]
pub(super) struct Floor {
    /// `consistency = "read-your-writes"`.
    ryw: bool,
    /// The primary's WAL position after the client's last write learned,
    /// raised by what it read from replicas.
    floor: u64,
    /// Statements that may write sent to the primary, ever: the floor is
    /// known while the last LSN query answered came after all of them.
    writes_sent: u64,
    writes_known: u64,
    /// `writes_sent` when each LSN query in flight was sent.
    asked: VecDeque<u64>,
    /// The LSN query's row, before its ReadyForQuery.
    pending: Option<u64>,
    /// Why the session's reads stay on the primary for good: something
    /// it set up (a SET, a temporary table, a LOAD, ...) that a replica
    /// connection would lack.
    barred: Option<&'static str>,
    /// The server will be idle after what has been sent, as far as the
    /// statements tell.
    idle_after: bool,
    /// The group being sent ends with the server idle and has no COPY:
    /// an LSN query may follow its Sync.
    group_ok: bool,
    group_open: bool,
    /// An LSN query goes right behind the message being forwarded.
    due: bool,
    /// A pooled session's default isolation before it has had a
    /// connection (`note_pool_isolation`).
    pub(super) pool_isolation: Option<onetrip_planner::classify::IsolationLevel>,
    /// The session's named statements on its replica connection
    /// (`replica_group.rs`).
    pub(super) named: super::replica_group::ReplicaNamed,
}

/// The LSN query, built once.
fn lsn_query() -> Bytes {
    static Q: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    Q.get_or_init(|| {
        let mut out = bytes::BytesMut::new();
        wire::write::query(&mut out, "SELECT pg_catalog.pg_current_wal_insert_lsn()");
        out.freeze()
    })
    .clone()
}

impl Protocol {
    /// Reads of this session may go to replicas from now on.
    pub fn route_reads(&mut self, read_your_writes: bool) {
        let idle = self.txn_status == b'I';
        let f = self.replica.get_or_insert_with(|| {
            Box::new(Floor {
                idle_after: idle,
                group_ok: true,
                ..Floor::default()
            })
        });
        f.ryw = read_your_writes;
    }

    /// Why the session's reads stay on the primary, if they do for good.
    pub fn replicas_barred(&self) -> Option<&'static str> {
        self.replica.as_ref().and_then(|f| f.barred)
    }

    /// Reads of this session may go to replicas now (`route_reads`, and
    /// nothing set up that bars them).
    pub fn routes_reads(&self) -> bool {
        self.replica.as_ref().is_some_and(|f| f.barred.is_none())
    }

    /// The floor a replica must have replayed to serve the client's next
    /// read; `None` while it is not known (a write's position is on its
    /// way, or was never asked for): then only the primary may serve it.
    pub fn replica_floor(&self) -> Option<u64> {
        let Some(f) = self.replica.as_deref() else {
            return Some(0);
        };
        match (f.ryw, f.writes_known == f.writes_sent) {
            (false, _) => Some(0),
            (true, true) => Some(f.floor),
            (true, false) => None,
        }
    }

    /// The client read what a replica had replayed up to `lsn`: it never
    /// reads older data again.
    pub fn raise_floor(&mut self, lsn: u64) {
        if let Some(f) = self.replica.as_deref_mut()
            && f.ryw
        {
            f.floor = f.floor.max(lsn);
        }
    }

    /// The client's next message may go to a replica instead of the
    /// upstream: nothing of the client's in flight, nothing held, no
    /// transaction open or held here. Answers to the proxy's own queries
    /// may still be on their way (`own_in_flight`).
    pub fn may_detour(&self) -> bool {
        self.txn.held.is_none() && self.detour_ok()
    }

    /// What `may_detour` asks but for a held BEGIN.
    pub(super) fn detour_ok(&self) -> bool {
        self.replica.as_ref().is_some_and(|f| f.barred.is_none())
            && self.flow == Flow::Open
            && self.quiet()
            && !self.client_paused()
            && self.prep_due.is_none()
            && !self.fatal_relayed
            && !self.cypher.holds_message()
    }

    /// Answers to the proxy's own queries are still on their way (while
    /// `may_detour` holds, nothing else is).
    pub fn own_in_flight(&self) -> bool {
        self.flight.awaiting_ready()
    }

    /// Whether the simple Query `msg` is a pure read the coalescer would
    /// take for one (no writes, locks, side effects, sequences), of no
    /// `cypher()` call, and so may run on a replica.
    pub fn replica_read(&mut self, msg: &[u8]) -> bool {
        frontend::query_text(msg).is_some_and(|text| self.replica_text(text))
    }

    /// Whether the statement `text` may run on a replica (`replica_read`).
    pub(super) fn replica_text(&mut self, text: &str) -> bool {
        let words = Words::scan(text);
        // currval and lastval read the session's own sequence state, which
        // a replica connection lacks.
        if words.any(Words::CYPHER) || mentions(text, b"currval") || mentions(text, b"lastval") {
            return false;
        }
        let a = self.coalescer.analyses.for_catalog(text, None);
        a.class.class == StatementClass::Read
            && !a.class.copy
            && a.class.statement_count > 0
            && a.pins.pin.is_none()
    }

    /// A Query or group the relay ran on a replica, as the upstream would
    /// have: counted as its statements and a round trip, and a
    /// transaction when the client's status after it (`status`) is idle.
    pub fn on_detoured(&mut self, to_client_bytes: u64, statements: u64, status: u8) {
        let c = &self.info.counters;
        Counters::add(&c.statements, statements);
        Counters::add(&c.client_round_trips, 1);
        Counters::add(&c.replica_reads, 1);
        Counters::add(&c.bytes_to_client, to_client_bytes);
        match status {
            b'I' => {
                Counters::add(&c.transactions, 1);
                self.info.set_state(SessionState::Idle);
            }
            b'E' => self.info.set_state(SessionState::FailedTransaction),
            _ => self.info.set_state(SessionState::InTransaction),
        }
    }

    /// What a client message on its way to the upstream tells routing:
    /// whether it may write, what it leaves in the session, whether the
    /// server is idle after it.
    pub(super) fn watch_for_replicas(&mut self, t: u8, msg: &Bytes, sql: Option<&Sql>) {
        let Some(f) = self.replica.as_deref_mut() else {
            return;
        };
        if !f.group_open {
            f.group_open = true;
            f.group_ok = true;
        }
        match t {
            tag::QUERY | tag::PARSE | tag::EXECUTE => {
                let sql = match (t, sql) {
                    (tag::EXECUTE, _) => self.coalescer.batch_statement(),
                    (_, Some(s)) => Some(s.clone()),
                    (_, None) => statement_text(t, msg).map(|text| Sql::within(msg, text, None)),
                };
                let Some(sql) = sql else {
                    // Not read: it may do anything.
                    self.note_replica_statement(None);
                    return;
                };
                let a = self.coalescer.analyses.of(&sql);
                // A DEALLOCATE alone leaves nothing a replica connection
                // lacks: the statements it drops are dropped there too
                // (`replica_forget`). psycopg sends DEALLOCATE ALL after
                // any DDL.
                let dealloc = a.pins.pin == Some("SQL DEALLOCATE") && a.class.statement_count == 1;
                if let (Some(why), Some(f), false) =
                    (a.pins.pin, self.replica.as_deref_mut(), dealloc)
                {
                    f.barred.get_or_insert(why);
                }
                if t == tag::PARSE {
                    self.note_replica_parse(msg);
                } else {
                    self.note_replica_statement(Some((
                        a.class.class,
                        a.class.transaction,
                        a.class.copy,
                    )));
                }
            }
            tag::FUNCTION_CALL => self.note_replica_statement(None),
            tag::CLOSE => self.note_replica_close(msg),
            _ => {}
        }
        if matches!(t, tag::SYNC | tag::QUERY | tag::FUNCTION_CALL)
            && let Some(f) = self.replica.as_deref_mut()
        {
            f.group_open = false;
            f.due =
                f.ryw && f.group_ok && f.writes_known != f.writes_sent && t != tag::FUNCTION_CALL;
        }
    }

    /// One statement of the group being sent: its class, transaction
    /// statement and COPY (`None`: unknown).
    fn note_replica_statement(
        &mut self,
        what: Option<(StatementClass, Option<TransactionStatement>, bool)>,
    ) {
        let idle_before = self.replica.as_ref().is_some_and(|f| f.idle_after)
            && self.txn.held.is_none()
            && !self.flight.begin_on_its_way();
        let Some(f) = self.replica.as_deref_mut() else {
            return;
        };
        let Some((class, txn, copy)) = what else {
            f.writes_sent += 1;
            f.group_ok = false;
            f.idle_after = false;
            return;
        };
        if class != StatementClass::Read {
            f.writes_sent += 1;
        }
        let (ok, idle) = match txn {
            Some(TransactionStatement::Commit | TransactionStatement::Rollback) => (true, true),
            Some(TransactionStatement::Begin { .. }) => (false, false),
            // Savepoints, AND CHAIN, two-phase commit, statements not
            // read: the status after them is not told here.
            None if class >= StatementClass::TransactionControl => (false, false),
            None => (idle_before, idle_before),
        };
        f.group_ok &= ok && !copy;
        f.idle_after = idle;
    }

    /// After the client's message: the LSN query rides right behind it
    /// when it ends a write with the server idle and went upstream (a
    /// Sync the coalescer answered has none: the query must never land
    /// inside the next group).
    pub(super) fn send_lsn_if_due(&mut self, to_up: &mut WriteQueue, forwarded: bool) {
        let Some(f) = self.replica.as_deref_mut() else {
            return;
        };
        if !std::mem::take(&mut f.due) || !forwarded {
            return;
        }
        f.asked.push_back(f.writes_sent);
        self.send_own_up(to_up, lsn_query(), Own::Lsn, false);
    }

    /// An answer to the LSN query: swallowed; its position becomes the
    /// floor at its ReadyForQuery if the server is idle there (the write
    /// committed).
    pub(super) fn on_lsn_answer(&mut self, t: u8, msg: &[u8]) {
        match t {
            tag::DATA_ROW => {
                if let Some(f) = self.replica.as_deref_mut() {
                    f.pending = backend::data_row_column(msg, 0)
                        .flatten()
                        .and_then(|s| crate::replicas::parse_lsn(&s));
                }
            }
            tag::ERROR_RESPONSE => {
                if let Some(f) = self.replica.as_deref_mut() {
                    f.pending = None;
                }
            }
            tag::READY_FOR_QUERY => {
                let status = backend::ready_status(msg);
                self.txn_status = status;
                if let Some(f) = self.replica.as_deref_mut() {
                    let asked = f.asked.pop_front();
                    if let (b'I', Some(lsn), Some(asked)) = (status, f.pending.take(), asked) {
                        f.floor = f.floor.max(lsn);
                        f.writes_known = f.writes_known.max(asked);
                    }
                }
                self.after_ready(status);
            }
            _ => {}
        }
    }

    /// A ReadyForQuery with nothing more in flight tells the status for
    /// sure.
    pub(super) fn after_ready(&mut self, status: u8) {
        let settled = !self.flight.awaiting_ready();
        if let Some(f) = self.replica.as_deref_mut()
            && settled
        {
            f.idle_after = status == b'I';
        }
    }
}

/// `text` holds `word` in any case.
fn mentions(text: &str, word: &[u8]) -> bool {
    text.as_bytes()
        .windows(word.len())
        .any(|w| w.eq_ignore_ascii_case(word))
}
