//! Transaction pooling's named statements: a client's named statements
//! follow it from one server connection to the next. Each keeps the name
//! its client gave it; before a message names a statement, the server
//! connection the client holds now is made to hold the client's statement
//! under that name (Close, then Parse, sent in the same write, their
//! answers unseen), or none under it when the client has none.

use bytes::Bytes;
use rustc_hash::FxHashMap;

use super::own::close_statement;
use super::*;

/// The named statements of a pooled session, and of the server connection
/// it holds.
#[derive(Debug, Default)]
pub struct Named {
    /// The Parse message of each named statement the client made (the
    /// flight says whether the server accepted it).
    client: FxHashMap<String, Bytes>,
    /// What the server connection holds, or may hold, under each name.
    pub server: super::server_statements::ServerStatements,
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
                self.named.server.closed(name, group, skipped);
                self.named.client.remove(name);
            }
            // Another client's statement may hold the name here.
            (tag::PARSE, false) => {
                self.make_room_for(name, to_up);
                self.send_own_up(to_up, close_statement(name), Own::Rerun, false);
                let parse = Bytes::copy_from_slice(msg);
                self.note_server_holds(name, parse.clone());
                self.named.client.insert(name.to_owned(), parse);
            }
            // The client's own (a Parse of it fails as it would have).
            (_, true) => self.ensure_named(name, to_up),
            // The client has none: nor must the server, so the message
            // fails as it would have.
            (_, false) => self.close_on_server(name, to_up),
        }
    }

    /// The server connection is made to hold the client's statement `name`.
    fn ensure_named(&mut self, name: &str, to_up: &mut WriteQueue) {
        let Some(parse) = self.named.client.get(name).cloned() else {
            // Made before the session was pooled (never: every Parse of a
            // pooled session comes through here).
            return;
        };
        if self.named.server.holds(name, &parse) {
            return;
        }
        self.make_room_for(name, to_up);
        // Closed first: a Close of a name the server lacks is no error, a
        // Parse of a name it has is.
        self.send_own_up(to_up, close_statement(name), Own::Rerun, false);
        self.send_own_up(to_up, parse.clone(), Own::Rerun, false);
        self.note_server_holds(name, parse);
    }

    /// The server connection is made to hold nothing under `name`.
    fn close_on_server(&mut self, name: &str, to_up: &mut WriteQueue) {
        self.send_own_up(to_up, close_statement(name), Own::Rerun, false);
        let group = self.flight.group_now();
        let skipped = self.flight.skipping();
        self.named.server.closed(name, group, skipped);
    }

    /// Before a Parse of `name`: the server connection's least recently
    /// used statement is closed when it holds as many as it may.
    fn make_room_for(&mut self, name: &str, to_up: &mut WriteQueue) {
        if self.flight.skipping() {
            // The Parse is skipped too: it needs no room.
            return;
        }
        let max = self.services.config.pool.max_prepared_statements;
        while let Some(old) = self.named.server.to_evict(max, name) {
            self.close_on_server(&old, to_up);
        }
    }

    /// A Parse of `name` went upstream. Recorded at once, unless the server
    /// is skipping to a Sync after an error (it won't run the Parse; what
    /// the name held stays); an error that comes later in its group makes
    /// the record unsure (`on_server_answer`).
    fn note_server_holds(&mut self, name: &str, parse: Bytes) {
        if !self.flight.skipping() {
            let group = self.flight.group_now();
            self.named.server.parsed(name, parse, group);
        }
    }

    /// An ErrorResponse or ReadyForQuery came: what its group did to the
    /// named statements is unsure, or done.
    pub(super) fn on_server_answer(&mut self, t: u8) {
        match t {
            tag::ERROR_RESPONSE => self.named.server.failed(self.flight.group_answered_now()),
            tag::READY_FOR_QUERY => self.named.server.settle(self.flight.group_answered_now()),
            _ => {}
        }
    }
}
