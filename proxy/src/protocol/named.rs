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
    /// What the server connection surely holds, by name: the Parse message
    /// that made it. A name not here is unknown, never known absent.
    pub server: super::pooled::ServerStatements,
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
                self.named.server.remove(name);
                self.named.client.remove(name);
            }
            // Another client's statement may hold the name here.
            (tag::PARSE, false) => {
                self.send_own_up(to_up, close_statement(name), Own::Rerun, false);
                let parse = Bytes::copy_from_slice(msg);
                self.note_server_holds(name, parse.clone());
                self.named.client.insert(name.to_owned(), parse);
            }
            // The client's own (a Parse of it fails as it would have).
            (_, true) => self.ensure_named(name, to_up),
            // The client has none: nor must the server, so the message
            // fails as it would have.
            (_, false) => {
                self.send_own_up(to_up, close_statement(name), Own::Rerun, false);
                self.named.server.remove(name);
            }
        }
    }

    /// The server connection is made to hold the client's statement `name`.
    fn ensure_named(&mut self, name: &str, to_up: &mut WriteQueue) {
        let Some(parse) = self.named.client.get(name).cloned() else {
            // Made before the session was pooled (never: every Parse of a
            // pooled session comes through here).
            return;
        };
        if self.named.server.get(name) == Some(&parse) {
            return;
        }
        // Closed first: a Close of a name the server lacks is no error, a
        // Parse of a name it has is.
        self.send_own_up(to_up, close_statement(name), Own::Rerun, false);
        self.send_own_up(to_up, parse.clone(), Own::Rerun, false);
        self.note_server_holds(name, parse);
    }

    /// A Parse of `name` went upstream. Recorded at once, unless the server
    /// is skipping to a Sync after an error (it won't run the Parse); an
    /// error that comes later forgets every record (`on_server_error`).
    fn note_server_holds(&mut self, name: &str, parse: Bytes) {
        if !self.flight.skipping() {
            self.named.server.insert(name.to_owned(), parse);
        }
    }

    /// An ErrorResponse came: a Parse recorded as held may have failed, or
    /// been skipped.
    pub(super) fn forget_server_statements(&mut self) {
        if !self.named.server.is_empty() {
            self.named.server.clear();
        }
    }
}
