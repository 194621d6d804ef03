//! Transaction pooling's named statements: a client's named statements
//! follow it from one server connection to the next. Each goes on servers
//! by a name of onetrip's shared by every client of the same text
//! (`shared.rs`), or by the name its client gave it; before a message names
//! a statement, the server connection the client holds now is made to hold
//! the client's statement under that name (Close, then Parse, sent in the
//! same write, their answers unseen), or none under it when the client has
//! none.

use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;

use super::own::close_statement;
use super::shared::ClientStatement;
use super::sql_prepared::StatementCounts;
use super::*;

/// The named statements of a pooled session (what the server connection
/// holds, or may hold, under each name is `ServerConnection::statements`).
#[derive(Debug, Default)]
pub struct Named {
    /// Each named statement the client made (the flight says whether the
    /// server accepted it).
    pub(super) client: FxHashMap<String, ClientStatement>,
    /// A Bind of a shared statement went up since the client last had
    /// nothing on its way outside a transaction: a portal of it may be
    /// open, which a Parse of it again would close.
    pub(super) shared_bound: bool,
    /// What SQL's PREPARE needs, made at the session's first one.
    pub(super) sql: Option<Box<SqlNamed>>,
    /// The pool's counts.
    pub(super) counts: Option<std::sync::Arc<StatementCounts>>,
}

/// A session's SQL PREPAREs under way (`sql_prepared.rs`).
#[derive(Debug, Default)]
pub struct SqlNamed {
    /// PREPAREs sent alone whose parameter types are on their way.
    pub(super) learning: std::collections::VecDeque<super::sql_prepared::Learning>,
    /// A PREPARE alone, taken without a pin, on its way up.
    pub(super) lone_prepare: Option<super::sql_prepared::LonePrepare>,
    /// The Describe and Sync that learn its types, sent right behind it.
    pub(super) learn_due: Option<Bytes>,
    /// The Parse each SQL PREPARE made the client's, and where its
    /// statement begins in the PREPARE's text, in characters.
    pub(super) sql_made: FxHashMap<String, (Bytes, usize)>,
    /// Statements made again ahead of a Query, with a Sync of the proxy's
    /// own between.
    pub(super) remake: Option<super::sql_prepared::Remake>,
}

impl Named {
    /// The SQL PREPARE state, made now if the session had none.
    pub(super) fn sql(&mut self) -> &mut SqlNamed {
        self.sql.get_or_insert_with(Default::default)
    }

    /// Adds one to the pool's count `which`.
    pub(super) fn count(&self, which: impl Fn(&StatementCounts) -> &std::sync::atomic::AtomicU64) {
        if let Some(c) = &self.counts {
            which(c).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// One of the client's names for the shared statement `server`.
    pub fn client_name_of(&self, server: &str) -> Option<&str> {
        if !server.starts_with(super::shared::PREFIX) {
            return None;
        }
        self.client
            .iter()
            .find(|(_, c)| c.server.as_deref() == Some(server))
            .map(|(n, _)| n.as_str())
    }

    /// The Parse that made the client's statement `name`.
    pub(super) fn parse_of(&self, name: &str) -> Option<&Bytes> {
        self.client.get(name).map(|c| &c.parse)
    }
}

impl Protocol {
    /// Before a client's Parse, Bind, Describe or Close of a named
    /// statement goes upstream: the server's statement under that name is
    /// made the client's.
    pub(super) fn fix_named_before(&mut self, t: u8, msg: &Bytes, to_up: &mut WriteQueue) {
        let name = match t {
            tag::PARSE => frontend::parse_name(msg),
            tag::BIND => frontend::bind(msg).map(|(_, s)| s),
            tag::DESCRIBE | tag::CLOSE => match frontend::target(msg) {
                Some((b'S', n)) => Some(n),
                _ => None,
            },
            _ => None,
        };
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return;
        };
        // The client's view: what it made and the server accepted, or what
        // is on its way.
        let has = self.flight.statement(name).is_some();
        match (t, has) {
            // It goes as it is; whatever the server held under it is gone.
            (tag::CLOSE, _) => {
                let group = self.flight.group_now();
                let skipped = self.flight.skipping();
                self.server_mut().statements.closed(name, group, skipped);
                self.named.client.remove(name);
            }
            // Another client's statement may hold the name here.
            (tag::PARSE, false) => {
                let mut made = self.client_statement(name, Bytes::copy_from_slice(msg));
                if let Some(s) = &made.server
                    && self.named.shared_bound
                    && self.server().statements.knows(s)
                {
                    // Made again, it would close a portal of it that may
                    // be open: this one goes by the client's name.
                    made.server = None;
                }
                let on_server = made.server.as_deref().unwrap_or(name).to_owned();
                self.make_room_for(&on_server, to_up);
                self.send_own_up(to_up, close_statement(&on_server), Own::Rerun, false);
                self.note_server_holds(&on_server, made.parse.clone());
                self.named.client.insert(name.to_owned(), made);
            }
            // The client's own (a Parse of it fails as it would have).
            (_, true) => {
                self.ensure_named(name, false, to_up);
            }
            // The client has none: nor must the server, so the message
            // fails as it would have (under the client's name: what was
            // kept of a statement it dropped goes).
            (_, false) => {
                self.named.client.remove(name);
                self.close_on_server(name, to_up);
            }
        }
    }

    /// The server connection is made to hold the client's statement `name`
    /// under the name it goes by there, or under the client's own name
    /// when `own_name` (SQL names it); true when a Parse of it went up for
    /// that.
    pub(super) fn ensure_named(
        &mut self,
        name: &str,
        own_name: bool,
        to_up: &mut WriteQueue,
    ) -> bool {
        if self.prepare_on_its_way(name) {
            // Made by a PREPARE whose parameter types are still on their
            // way (`sql_prepared.rs`): the server that runs it holds it.
            return false;
        }
        let Some(made) = self.named.client.get(name) else {
            // Made before the session was pooled (never: every Parse of a
            // pooled session comes through here), or by a PREPARE that
            // pinned the session to the server that holds it.
            return false;
        };
        let parse = made.parse.clone();
        if let Some(server) = made.server.as_deref().filter(|_| !own_name) {
            let since = made.generation;
            return self.ensure_shared(server.to_owned(), parse, since, to_up);
        }
        if self.server_mut().statements.holds(name, &parse) {
            return false;
        }
        self.make_room_for(name, to_up);
        // Closed first: a Close of a name the server lacks is no error, a
        // Parse of a name it has is.
        self.send_own_up(to_up, close_statement(name), Own::Rerun, false);
        self.send_own_up(to_up, parse.clone(), Own::Rerun, false);
        self.note_server_holds(name, parse);
        if !own_name {
            self.named.count(|c| &c.parsed_again);
        }
        true
    }

    /// The server connection is made to hold nothing under `name`.
    pub(super) fn close_on_server(&mut self, name: &str, to_up: &mut WriteQueue) {
        self.send_own_up(to_up, close_statement(name), Own::Rerun, false);
        let group = self.flight.group_now();
        let skipped = self.flight.skipping();
        self.server_mut().statements.closed(name, group, skipped);
    }

    /// Before a Parse of `name`: the server connection's least recently
    /// used statement is closed when it holds as many as it may.
    pub(super) fn make_room_for(&mut self, name: &str, to_up: &mut WriteQueue) {
        if self.flight.skipping() {
            // The Parse is skipped too: it needs no room.
            return;
        }
        let max = self.services.config.pool.max_prepared_statements;
        while let Some(old) = self.server().statements.to_evict(max, name) {
            self.close_on_server(&old, to_up);
        }
    }

    /// A Parse of `name` went upstream. Recorded at once, unless the server
    /// is skipping to a Sync after an error (it won't run the Parse; what
    /// the name held stays); an error that comes later in its group makes
    /// the record unsure (`on_server_answer`).
    pub(super) fn note_server_holds(&mut self, name: &str, parse: Bytes) {
        if !self.flight.skipping() {
            let group = self.flight.group_now();
            let (by, generation) = (self.info.id, self.ddl_generation());
            self.server_mut()
                .statements
                .parsed_by(name, parse, group, by, generation);
        }
    }

    /// An ErrorResponse or ReadyForQuery came: what its group did to the
    /// named statements is unsure, or done.
    pub(super) fn on_server_answer(&mut self, t: u8) {
        let group = self.flight.group_answered_now();
        match t {
            tag::ERROR_RESPONSE => self.server_mut().statements.failed(group),
            tag::READY_FOR_QUERY => self.server_mut().statements.settle(group),
            _ => {}
        }
    }
}

impl Protocol {
    /// The server connection is made to hold the shared statement `server`,
    /// of the client's statement made by `parse`; true when a Parse of it
    /// went up for that.
    fn ensure_shared(
        &mut self,
        server: String,
        parse: Bytes,
        since: u64,
        to_up: &mut WriteQueue,
    ) -> bool {
        let key = frontend::parse_key(&parse).unwrap_or_default();
        if let Some(by) = self.server_mut().statements.holds_key(&server, key, since) {
            if by != self.info.id {
                self.named.count(|c| &c.shared);
            }
            return false;
        }
        self.make_room_for(&server, to_up);
        self.send_own_up(to_up, close_statement(&server), Own::Rerun, false);
        if let Some(p) = crate::wire::write::with_statement_name(&parse, &server) {
            self.send_own_up(to_up, p, Own::Rerun, false);
        }
        self.note_server_holds(&server, parse);
        self.named.count(|c| &c.parsed_again);
        true
    }

    /// The client has made a named statement `name`.
    pub(super) fn named_by_client(&self, name: &str) -> bool {
        self.named.client.contains_key(name)
    }

    /// The client's statement `name` is made by `parse` now (answered here).
    pub(super) fn name_for_client(&mut self, name: &str, parse: Bytes) {
        let made = self.client_statement(name, parse);
        self.named.client.insert(name.to_owned(), made);
    }

    /// A pooled session with no server connection and no transaction:
    /// `cin` that is only Closes and the Sync that ends them (how
    /// tokio-postgres drops a statement) is answered here, as the server
    /// answers it (closing what does not exist is no error): a
    /// CloseComplete each, then ReadyForQuery `I`. False, having changed
    /// nothing, for anything else. The client's statements are forgotten;
    /// a server connection that holds one keeps it, known to, and closes
    /// it before a message of this client names it again (`fix_named_before`).
    pub(super) fn close_alone(&mut self, cin: &[u8], to_client: &mut WriteQueue) -> bool {
        if self.txn.held.is_some() || self.txn.failed || self.unsynced {
            return false;
        }
        let Some(closes) = closes_then_sync(cin) else {
            return false;
        };
        let mut answers = BytesMut::with_capacity(closes * 5 + 6);
        for (_, msg) in frame::messages(cin) {
            if let Some((kind, name)) = frontend::target(msg) {
                if kind == b'S' {
                    self.forget_client_statement(name);
                }
                answers.extend_from_slice(&[tag::CLOSE_COMPLETE, 0, 0, 0, 4]);
            }
        }
        crate::wire::write::ready_for_query(&mut answers, b'I');
        Counters::add(&self.info.counters.local_closes, 1);
        self.answer_here(answers.freeze(), to_client);
        true
    }

    /// The client closed its statement `name` (never sent upstream).
    fn forget_client_statement(&mut self, name: &str) {
        self.flight.forget(name);
        self.forget_told(name);
        match name.is_empty() {
            // The server's unnamed statement may still be the client's old
            // one: it is dropped before a message uses it.
            true => self.unnamed_fix = Some(super::transaction::UnnamedFix::Drop),
            false => {
                self.named.client.remove(name);
            }
        }
    }
}

/// How many Closes `cin` holds when it is Closes (of a statement or a
/// portal, each readable) and then the one Sync that ends it.
fn closes_then_sync(cin: &[u8]) -> Option<usize> {
    let (mut closes, mut seen) = (0, 0);
    for (t, msg) in frame::messages(cin) {
        seen += msg.len();
        match t {
            tag::CLOSE if matches!(frontend::target(msg), Some((b'S' | b'P', _))) => closes += 1,
            tag::SYNC if closes > 0 && seen == cin.len() => return Some(closes),
            _ => return None,
        }
    }
    None
}
