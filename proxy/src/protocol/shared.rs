//! Transaction pooling's shared statements: a client's named statement is
//! made on a server connection under a name of onetrip's, one per text and
//! parameter types, so every client that prepared the same text uses the
//! one statement the connection already holds, with no Parse of its own.
//!
//! Everything else in the session goes by the client's names; only the
//! bytes that go up name the server's statement (`for_server`), and an
//! error that names it is told under the client's name (`error_for_client`).
//! Whether the server holds the statement is checked by its text and types
//! before every use (`ServerStatements::holds_key`), so two texts whose
//! names collide cost a Parse, never an answer.

use std::hash::{Hash, Hasher};

use bytes::Bytes;

use super::*;

/// Every shared statement's name begins so; a client's statement named so
/// is not shared.
pub const PREFIX: &str = "onetrip_s_";

/// The shared name of a statement of text and parameter types `key`.
pub fn shared_name(key: &[u8]) -> Box<str> {
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    format!("{PREFIX}{:016x}", h.finish()).into_boxed_str()
}

/// A named statement the client made.
#[derive(Debug, Clone)]
pub struct ClientStatement {
    /// The Parse message that made it (for one made by SQL's PREPARE, a
    /// Parse of its text with the parameter types the server gave it).
    pub parse: Bytes,
    /// The name it goes by on server connections, when not its own.
    pub server: Option<Box<str>>,
    /// The pool's DDL generation when the client made it: a server's
    /// statement parsed before DDL that came since is not used for it.
    pub generation: u64,
}

impl ClientStatement {
    /// Made on servers under the client's own name.
    pub fn own(parse: Bytes) -> Self {
        Self {
            parse,
            server: None,
            generation: 0,
        }
    }
}

impl Protocol {
    /// The client's statement `name`, made by `parse`: shared when the pool
    /// shares statements and the session resolves names as every client of
    /// the pool does (a statement of the same text means the same thing).
    pub(super) fn client_statement(&self, name: &str, parse: Bytes) -> ClientStatement {
        let shared = self.services.config.pool.share_statements
            && !name.starts_with(PREFIX)
            && self.leaves_search_path_alone();
        let server = match frontend::parse_key(&parse) {
            Some(key) if shared => Some(shared_name(key)),
            _ => None,
        };
        ClientStatement {
            parse,
            server,
            generation: self.ddl_generation(),
        }
    }

    /// The pool's DDL generation (`described.rs`), 0 outside a pool.
    pub(super) fn ddl_generation(&self) -> u64 {
        self.told_here.cache.as_ref().map_or(0, |c| c.generation())
    }

    /// The name the client's statement `name` goes by on servers.
    pub(super) fn server_name<'a>(&'a self, name: &'a str) -> &'a str {
        match self.named.client.get(name) {
            Some(ClientStatement {
                server: Some(s), ..
            }) => s,
            _ => name,
        }
    }

    /// A client message as it goes up: a Parse, Bind or Describe of a
    /// shared statement names the server's; `None` when it goes as it came.
    pub(super) fn for_server(&mut self, t: u8, msg: &[u8]) -> Option<Bytes> {
        if self.named.client.is_empty() {
            return None;
        }
        let name = match t {
            tag::PARSE => frontend::parse_name(msg),
            tag::BIND => frontend::bind(msg).map(|(_, s)| s),
            tag::DESCRIBE => match frontend::target(msg) {
                Some((b'S', n)) => Some(n),
                _ => None,
            },
            _ => None,
        }?;
        let server = self.named.client.get(name)?.server.as_deref()?;
        if t == tag::BIND {
            self.named.shared_bound = true;
        }
        crate::wire::write::with_statement_name(msg, server)
    }

    /// A server's ErrorResponse that names a shared statement, told under
    /// the client's name for it.
    pub(super) fn error_for_client(&self, msg: &[u8]) -> Option<Bytes> {
        if self.named.client.is_empty() {
            return None;
        }
        let quoted = memchr::memmem::find(msg, PREFIX.as_bytes())?;
        let end = quoted + memchr::memchr(b'"', &msg[quoted..])?;
        let server = std::str::from_utf8(&msg[quoted..end]).ok()?;
        let client = self.named.client_name_of(server)?;
        Some(crate::wire::write::error_renamed(msg, server, client))
    }

    /// An error from the server for a client's message: a 0A000 (a plan
    /// whose result type changed: DDL onetrip did not see) makes every
    /// statement the connection holds be made again before its next use.
    pub(super) fn on_client_error(&mut self, msg: &[u8]) {
        if crate::wire::backend::error_field(msg, b'C') == Some("0A000") {
            self.server_mut().statements.all_unsure();
        }
    }

    /// A ReadyForQuery came: once nothing of the client's is on its way
    /// and no transaction is open, no portal of a shared statement is left.
    pub(super) fn shared_portals_closed(&mut self, status: u8) {
        if status == b'I' && self.flight.client_answered() {
            self.named.shared_bound = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_name_is_the_texts_and_types() {
        let a = shared_name(b"SELECT 1\0\0\0");
        assert!(a.starts_with(PREFIX));
        assert_eq!(a.len(), PREFIX.len() + 16);
        assert_eq!(a, shared_name(b"SELECT 1\0\0\0"));
        assert_ne!(a, shared_name(b"SELECT 1\0\0\x01\0\0\0\x17"));
        assert_ne!(a, shared_name(b"SELECT 2\0\0\0"));
    }
}
