//! A session in transaction pooling (`[pool] mode = "transaction"`): when
//! it may give its server connection back, what pins it to the one it has,
//! and what it must redo on the next connection it gets.

use std::sync::{Arc, atomic::AtomicUsize, atomic::Ordering::Relaxed};

use bytes::{Bytes, BytesMut};
use onetrip_planner::{
    analysis::Analysis,
    classify::{
        LastPins, Pins, PreparedOp, Reset, SessionSet, lone_prepared_op, reset_undoes, session_set,
    },
};

use super::*;

pub use super::server_statements::ServerStatements;

/// Why a session gets no new server connection (its pin), for the client
/// that can't be read.
const PARSE_NOT_READ: &str = "Parse message not read";

thread_local! {
    /// The pins of the last text this thread's sessions sent without an
    /// analysis: most are the same statement again with other literals,
    /// which the scan would lex again for the same answer.
    static LAST_PINS: std::cell::RefCell<LastPins> = std::cell::RefCell::default();
}

/// `Pins::of(text)`, from the thread's last text when it serves.
fn pins_of(text: &str) -> Pins {
    LAST_PINS
        .try_with(|last| match last.try_borrow_mut() {
            Ok(mut last) => last.of(text),
            Err(_) => Pins::of(text),
        })
        .unwrap_or_else(|_| Pins::of(text))
}

/// What the pin scan finds, less what follows its client instead of
/// pinning: the Parse of a replayable `SET` (followed when it is
/// executed).
fn followed(mut pins: Pins, t: u8, text: &str) -> Pins {
    let follows = |why: &str| {
        t == tag::PARSE
            && matches!(why, "session SET" | "RESET")
            && onetrip_planner::classify::session_set(text).is_some()
    };
    if pins.pin.is_some_and(follows) {
        pins.pin = None;
    }
    if pins.past_reset.is_some_and(follows) {
        pins.past_reset = None;
    }
    pins
}

impl Protocol {
    /// Looks at a client message going upstream for what would tie the
    /// session to its server connection. Once pinned, nothing is looked at.
    /// `analysis` is its statement's, when it has one: what it says of
    /// pins was found once per text, where the text would be lexed again
    /// here.
    pub(super) fn watch_for_pins(&mut self, t: u8, msg: &[u8], analysis: Option<Arc<Analysis>>) {
        // Each message's text is read once, for both looks below.
        let (name, text) = match t {
            tag::QUERY => (None, frontend::query_text(msg)),
            tag::PARSE => match frontend::parse(msg) {
                Some((name, text)) => (Some(name), Some(text)),
                None => (None, None),
            },
            _ => (None, None),
        };
        let facts = text.map(|text| match &analysis {
            Some(a) => followed(a.pins, t, text),
            None => self.executed(t, text, followed(pins_of(text), t, text)),
        });
        if let Some(f) = facts {
            // What the connection needs before another client may use it.
            self.taint = self.taint.combine(f.reset);
            // DDL, or what may hide it (a function, DO): descriptions the
            // pool keeps may be out of date.
            if matches!(f.reset, Reset::Full(_)) {
                self.ddl_seen();
            }
            // A custom setting stays defined in the backend once named,
            // whatever becomes of the statement's transaction.
            if f.pin == Some("session SET")
                && let Some(SessionSet::Set(name)) = text.and_then(session_set)
            {
                self.defined(&name);
            }
        }
        if facts.is_some_and(|f| f.database_command)
            && let Some(text) = text
        {
            // The pools' connections would keep the database in use (a
            // dedicated client's would have closed with it): they close,
            // and open none until the statement is done.
            let databases: Vec<String> = onetrip_planner::classify::database_targets(text)
                .into_iter()
                .map(|t| t.name)
                .collect();
            self.services.pools.drain(&databases);
            self.draining.extend(databases);
        }
        if self.pin.is_some() {
            if self.pin_resettable {
                self.watch_pinned(t, facts);
            }
            return;
        }
        match t {
            tag::QUERY => {
                // A simple Query drops the server's unnamed statement.
                self.unnamed_parse.clear();
                let (Some(text), Some(facts)) = (text, facts) else {
                    return self.pin_session("Query message not read");
                };
                if self.takes_replayable_set(text) || self.takes_lone_prepared(text) {
                    return;
                }
                if let Some(why) = facts.pin {
                    self.pin_session(why);
                    // The same text may do more, past its first reason.
                    self.watch_pinned(t, Some(facts));
                }
            }
            // A statement's text pins like a Query's (named statements
            // follow their client: `named.rs`).
            tag::PARSE => match (name, facts) {
                (Some(name), Some(facts)) => {
                    if let Some(why) = facts.pin {
                        self.pin_session(why);
                        self.watch_pinned(t, Some(facts));
                    } else if name.is_empty() {
                        // Kept to make it again on the next connection; the
                        // buffer is reused, so this allocates only to grow.
                        self.unnamed_parse.clear();
                        self.unnamed_parse.extend_from_slice(msg);
                    }
                }
                _ => self.pin_session(PARSE_NOT_READ),
            },
            tag::FUNCTION_CALL => self.pin_session("FunctionCall message"),
            _ => {}
        }
    }

    /// What a Query that is one `EXECUTE` of the client's statement leaves
    /// on the connection: what its statement and arguments do, where the
    /// scan of the text alone, which doesn't see the statement, asks for
    /// the full reset.
    fn executed(&self, t: u8, text: &str, mut pins: Pins) -> Pins {
        if t != tag::QUERY || !client_txn::first_word_is(text.as_bytes(), &["execute"]) {
            return pins;
        }
        let Some(PreparedOp::Execute { name, args }) = lone_prepared_op(text) else {
            return pins;
        };
        let Some(statement) = self.flight.statement(&name) else {
            return pins;
        };
        let mut reset = Pins::of(statement.as_str()).reset;
        if !args.trim().is_empty() {
            reset = reset.combine(Pins::of(&format!("SELECT {args}")).reset);
        }
        pins.reset = reset;
        pins
    }

    /// A pinned session's statements, looked at for what DISCARD ALL would
    /// not undo; its connection is closed at its end if one comes.
    fn watch_pinned(&mut self, t: u8, facts: Option<Pins>) {
        let undone = match t {
            tag::QUERY | tag::PARSE => facts.is_some_and(|f| f.past_reset.is_none()),
            tag::FUNCTION_CALL => false,
            _ => true,
        };
        if !undone {
            self.pin_resettable = false;
        }
    }

    /// The client left (or is leaving) with nothing in flight, and what it
    /// left on its connection is nothing (`releasable`) or can be undone
    /// (`reset_at_end`): the
    /// connection can serve the pool again. A transaction it left open is
    /// rolled back; a pinned session's state is undone by DISCARD ALL when
    /// that undoes everything that pinned it.
    pub fn reusable_at_end(&self) -> bool {
        (self.pin.is_none() || self.pin_resettable)
            && self.clean_point_in(true)
            && (self.txn_status == b'I' || self.txn_status_known_open())
    }

    fn txn_status_known_open(&self) -> bool {
        matches!(self.txn_status, b'T' | b'E')
    }

    /// The queries that make a connection left as `reusable_at_end` one a
    /// new client can have, each its own Query (DISCARD ALL can't run in a
    /// transaction block, nor in a multi-statement Query).
    pub fn reset_at_end(&self) -> &'static [&'static str] {
        match (self.txn_status_known_open(), self.pin.is_some()) {
            (false, false) => &[],
            (false, true) => &["DISCARD ALL"],
            (true, false) => &["ROLLBACK"],
            (true, true) => &["ROLLBACK", "DISCARD ALL"],
        }
    }

    /// A pinned session's connection was reset with DISCARD ALL: it holds
    /// no statements and no settings of the client's.
    pub fn server_was_reset(&mut self) {
        self.server_mut().statements = ServerStatements::default();
        self.sets = SessionSets::new();
    }

    /// A pooled, unpinned session between whole messages, with nothing of
    /// its own waiting (a group under way, the client paused, a message
    /// held or cut, the settings' answer): what its client sends next may
    /// be answered here, without a server connection (`answer_alone`,
    /// `listen_alone`).
    pub(super) fn may_answer_alone(&self) -> bool {
        self.pooled
            && !self.txn_group
            && self.pin.is_none()
            && !self.fatal_relayed
            && self.flow == Flow::Open
            && !self.client_paused()
            && self.client_rest.is_empty()
            && !self.csplit.in_pass()
            && !self.cypher.holds_message()
            && !self.settings.waiting()
    }

    /// A pooled session without a server connection, its client's next
    /// bytes read: when they are exactly a BEGIN (or its extended group)
    /// that the session would hold, or the COMMIT or ROLLBACK of a held
    /// one, it is answered here, and no connection is taken for it (under
    /// a busy pool, a transaction would otherwise wait in line more than
    /// once). So are Closes alone (`close_alone`). False when anything
    /// else is there; nothing is changed then.
    pub fn answer_alone(&mut self, cin: &mut BytesMut, to_client: &mut WriteQueue) -> bool {
        let held = self.txn.held.is_some();
        if !self.may_answer_alone()
            || self.settings.wants_search_path()
            || (!held && !self.quiet_upstream())
        {
            return false;
        }
        let Ok(Some(h)) = frame::peek_header(cin, usize::MAX) else {
            return false;
        };
        // Closes alone need no connection either, nor a Parse (and
        // Describe) of a pure read described before: each group up to its
        // Sync is answered, and what follows it is looked at next.
        if matches!(h.tag, tag::CLOSE | tag::PARSE | tag::DESCRIBE)
            && let Some(end) = first_group_end(cin)
        {
            let answered = match h.tag {
                tag::CLOSE => self.close_alone(&cin[..end], to_client),
                _ => self.parse_alone(&cin[..end], to_client),
            };
            if answered {
                let _ = cin.split_to(end);
                return true;
            }
        }
        if h.tag == tag::CLOSE {
            return false;
        }
        if !self.txn.defer_begin {
            return false;
        }
        let words: &[&str] = match held {
            false => &["begin", "start"],
            true => &["commit", "end", "rollback", "abort"],
        };
        let may_be = matches!(h.tag, tag::QUERY | tag::PARSE)
            && cin.get(..h.wire_len).is_some_and(|first| {
                frontend::statement_bytes(h.tag, first)
                    .is_some_and(|b| client_txn::first_word_is(b, words))
            });
        if !may_be {
            return false;
        }
        // Its group must be all there is: what follows needs the server,
        // and must come after the connection is adopted.
        let whole = match h.tag {
            tag::QUERY => h.wire_len == cin.len(),
            _ => transaction::group(cin, 0).is_some_and(|g| g.end == cin.len()),
        };
        if !whole {
            return false;
        }
        let chunk = Bytes::copy_from_slice(cin);
        let answered = match held {
            false => matches!(
                self.begin_here(&chunk, 0, h.tag, h.wire_len, to_client),
                client_txn::TxnStep::Answered(_)
            ),
            true => self.end_held_alone(&chunk, h.tag, h.wire_len, to_client),
        };
        if answered {
            cin.clear();
        }
        answered
    }

    /// The session is pinned to its server connection.
    pub fn pinned(&self) -> bool {
        self.pin.is_some()
    }

    /// The session keeps its server connection until it ends.
    pub fn pin_session(&mut self, why: &'static str) {
        if self.pin.is_some() {
            return;
        }
        self.pin = Some(why);
        self.pin_resettable = reset_undoes(why);
        let _ = self.info.pin.set(why);
        if let Some(pins) = &self.pool_pins {
            pins.fetch_add(1, Relaxed);
        }
    }

    /// The pool's count of pinned sessions, told when this one pins.
    pub fn count_pins_in(&mut self, pins: Arc<AtomicUsize>) {
        if self.pin.is_some() {
            pins.fetch_add(1, Relaxed);
        }
        self.pool_pins = Some(pins);
    }

    /// The session ends: it no longer counts as pinned.
    pub fn uncount_pin(&mut self) {
        if let (Some(pins), Some(_)) = (self.pool_pins.take(), self.pin) {
            pins.fetch_sub(1, Relaxed);
        }
    }

    /// The server connection could go to another client now: not pinned,
    /// the server idle outside a transaction block, nothing in flight or
    /// half sent, nothing of the proxy's own under way. (The relay also
    /// needs its buffers empty.) A BEGIN held here, not sent, is no reason
    /// to stay: it goes up with the next statement, wherever that runs.
    pub fn releasable(&self) -> bool {
        self.pin.is_none() && self.clean_point()
    }

    /// What `releasable` asks of a session, but for its pin.
    fn clean_point(&self) -> bool {
        self.clean_point_in(false)
    }

    /// `clean_point`, or (`any_txn`) the same inside a transaction block.
    fn clean_point_in(&self, any_txn: bool) -> bool {
        self.pooled
            && !self.fresh_upstream
            && (self.txn_status == b'I' || any_txn)
            && self.still()
            && self.flight.answered()
            && !self.flight.begin_on_its_way()
            && !self.fatal_relayed
            && !self.held_for_settings
            && !self.lazy_next
            && !self.txn_group
            && !self.cypher.holds_message()
    }

    /// The session goes on over `conn`, another server connection of its
    /// pool (same startup packet, so the same defaults; nothing of the old
    /// one's state mattered, or the session would be pinned). The client's
    /// unnamed statement is made again before a message uses it, or closed
    /// if it was not held: the new connection may hold another client's.
    pub fn switched_upstream(&mut self, mut conn: Box<ServerConnection>) {
        // What the connection must become first goes ahead of the client's
        // next message (`start_if_due`); the caller has turned away a
        // connection that can't be the client's.
        self.prep_due = match prepare(&conn.state, &self.sets, &self.loads) {
            Prep::Query(q) => Some(q),
            Prep::Ready | Prep::Unusable => None,
        };
        // Its reset (DISCARD ALL) drops every statement it holds.
        if let Reset::Full(_) = conn.state.reset {
            conn.statements = ServerStatements::default();
        }
        // A session that has not asked for its settings takes what this
        // backend answered an earlier client: one pool, so the same role,
        // database and startup options, and so the same defaults. Its
        // first statement then goes without the query.
        if let Some(settings) = conn.settings.take()
            && !self.settings.asked()
            && !self.own_defaults
        {
            self.settings = settings;
        }
        self.server = Some(conn);
        self.fresh_upstream = true;
        // The coalescer's probe statement, made on the last connection.
        self.coalescer.probe_forgotten();
        let held = frontend::parse(&self.unnamed_parse).is_some_and(|(_, text)| {
            self.flight
                .statement("")
                .is_some_and(|s| s.as_str() == text)
        });
        self.flight.forget("");
        if self.unnamed_fix.is_none() {
            // Copied when a message uses it: a new Parse or a Query, which
            // both change `unnamed_parse`, end the fix first.
            self.unnamed_fix = Some(match held {
                true => UnnamedFix::ReparseKept,
                false => UnnamedFix::Drop,
            });
        }
    }
}

/// Where the first group of `cin` ends: just past its first Sync (or
/// Flush), when that has come whole.
fn first_group_end(cin: &[u8]) -> Option<usize> {
    let mut seen = 0;
    for (t, msg) in frame::messages(cin) {
        seen += msg.len();
        if t == tag::SYNC || t == tag::FLUSH {
            return Some(seen);
        }
    }
    None
}
