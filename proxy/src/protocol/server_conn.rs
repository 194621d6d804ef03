//! A server connection's record, from its login to its release: what the
//! server said at login and what the connection holds now. One record
//! whoever holds the connection: the session relaying it (in either pool
//! mode), the kept connections of session mode (`kept`), a transaction
//! pool's idle ones (`pooling`). It moves whole at every hand-over, never
//! field by field. The socket travels beside it, in the form its holder
//! relays (a task's `net::Stream`, a worker's epoll, or no runtime at all:
//! `net::ServerSocket`).

use std::time::Instant;

use bytes::Bytes;

use super::{
    Protocol, ServerState, ServerStatements, server_params::ServerParams, settings::Settings,
};
use crate::wire::backend;

#[derive(Debug)]
pub struct ServerConnection {
    /// The backend's BackendKeyData message, as the server sent it.
    pub key: Option<Bytes>,
    /// Its ParameterStatus values, in the order the server sent them; kept
    /// up to date while the values may greet another client
    /// (`set_param`): a kept connection greets every client it serves
    /// with them.
    params: ServerParams,
    /// When it was opened (`upstream.reuse_lifetime`).
    pub opened: Instant,
    /// What its backend answered when asked for its settings (as a reset
    /// leaves them), if it was: the next client need not ask.
    pub settings: Option<Settings>,
    /// The named statements it holds, of clients it served (transaction
    /// pooling).
    pub statements: ServerStatements,
    /// The session state its last client left in it: filled as a session
    /// lets it go (`Protocol::release_server`).
    pub state: ServerState,
}

impl ServerConnection {
    /// A connection just logged in: `key` and `params` from its greeting.
    pub fn new(key: Option<Bytes>, params: ServerParams) -> Self {
        Self {
            key,
            params,
            opened: Instant::now(),
            settings: None,
            statements: ServerStatements::default(),
            state: ServerState::default(),
        }
    }

    /// The same, opened at `opened` (its login began then).
    pub fn opened_at(self, opened: Instant) -> Self {
        Self { opened, ..self }
    }

    pub fn params(&self) -> &ServerParams {
        &self.params
    }

    /// The server reported `name` as `value`.
    pub fn set_param(&mut self, name: &str, value: &str) {
        self.params.set(name, value);
    }

    /// Its values as the ParameterStatus messages of a greeting.
    pub fn params_status(&self) -> Bytes {
        self.params.messages()
    }

    /// Its backend's process id and secret, from its BackendKeyData.
    pub fn backend_key(&self) -> Option<(i32, Bytes)> {
        self.key.as_ref().and_then(backend::backend_key_in)
    }
}

impl Default for ServerConnection {
    /// No connection yet (a pooled session greeted without one).
    fn default() -> Self {
        Self::new(None, ServerParams::default())
    }
}

impl Protocol {
    /// The session logged in over `conn` (session mode, or a pooled
    /// login's own connection).
    pub fn logged_in(&mut self, mut conn: Box<ServerConnection>) {
        self.on_server_version(conn.params().get("server_version"));
        if let Some(settings) = conn.settings.take() {
            self.settings = settings;
        }
        if let Some((pid, _)) = conn.backend_key() {
            self.info
                .upstream_pid
                .store(pid as u64, std::sync::atomic::Ordering::Relaxed);
        }
        self.server = Some(conn);
    }

    /// The server connection the session holds, or an empty record when it
    /// holds none (a pooled session between transactions).
    pub fn server(&self) -> &ServerConnection {
        static NONE: std::sync::LazyLock<ServerConnection> =
            std::sync::LazyLock::new(ServerConnection::default);
        self.server.as_deref().unwrap_or(&NONE)
    }

    /// The record of the server connection held, made empty when there is
    /// none: what is written there then is dropped at the next adoption,
    /// which brings its connection's own.
    pub fn server_mut(&mut self) -> &mut ServerConnection {
        self.server.get_or_insert_with(Box::default)
    }

    /// Lets the server connection go, whole, to its pool or to the kept
    /// connections: what the session leaves in it goes into its record.
    /// The session holds none after.
    pub fn release_server(&mut self) -> Box<ServerConnection> {
        let mut conn = self.server.take().unwrap_or_default();
        conn.state = self.server_state();
        // The defaults a client's startup packet set are its own.
        conn.settings = self.settings.after_reset().filter(|_| !self.own_defaults);
        conn
    }
}
