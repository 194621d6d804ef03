//! A pooled session's hold on its pool: the connection it has now, if
//! any, given back at each release point and taken again when its client
//! speaks. Both happen where the session relays (the worker's epoll, with
//! no await), unless the session must wait: for a connection when none is
//! idle, for one to open, or for its settings to be made on one
//! (`session::pooled`).

use std::{
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Instant,
};

use bytes::Bytes;

use super::{Idle, Pool, Slot};
use crate::{
    cancel::{CancelKeys, Key},
    protocol::{Protocol, ServerStatements, SessionSets},
    stats::SessionState,
    wire::backend,
};

/// A pooled session's place in its pool: counted among its clients while
/// it lives, with the slot of the connection it holds now, if any.
pub struct Pooled {
    pub pool: Arc<Pool>,
    pub slot: Option<Slot>,
    pub startup: Bytes,
    cancel: Arc<CancelKeys>,
}

/// A server connection a pooled session takes: from the pool's idle ones,
/// or just opened.
pub struct Taken {
    pub key: Option<Bytes>,
    pub opened: Instant,
    pub slot: Slot,
    pub statements: ServerStatements,
    pub params: Vec<(String, String)>,
}

impl Idle {
    /// The connection, the settings its last client left in it, and what
    /// the session that takes it adopts.
    pub fn taken(self) -> (std::net::TcpStream, SessionSets, Taken) {
        let taken = Taken {
            key: self.key,
            opened: self.opened,
            slot: self.slot,
            statements: self.statements,
            params: self.params,
        };
        (self.tcp, self.sets, taken)
    }
}

impl Pooled {
    pub fn new(pool: Arc<Pool>, slot: Slot, startup: Bytes, cancel: Arc<CancelKeys>) -> Self {
        pool.clients.fetch_add(1, Relaxed);
        Self {
            pool,
            slot: Some(slot),
            startup,
            cancel,
        }
    }

    /// A session greeted without a connection (`Pool::greeting`): it
    /// takes one when its client first speaks.
    pub fn waiting(pool: Arc<Pool>, startup: Bytes, cancel: Arc<CancelKeys>) -> Self {
        pool.clients.fetch_add(1, Relaxed);
        Self {
            pool,
            slot: None,
            startup,
            cancel,
        }
    }

    /// Gives the session's clean connection back to the pool; true when it
    /// went to a client whose task waits on this thread. Its backend is
    /// about to run other clients' queries: this client's key cancels
    /// nothing until the session has another.
    pub fn give_back(&mut self, tcp: std::net::TcpStream, proto: &mut Protocol) -> bool {
        if let Some(key) = &proto.client_key {
            self.cancel.detach(key);
        }
        proto.info.upstream_pid.store(0, Relaxed);
        let Some(slot) = self.slot.take() else {
            return false;
        };
        let idle = Idle {
            tcp,
            // Moved, not copied: the session gets the values of the next
            // connection it takes (`adopt`).
            params: std::mem::take(&mut proto.server_params),
            key: proto.upstream_key.take(),
            settings: proto.settings.after_reset(),
            statements: proto.take_server_statements(),
            sets: proto.session_sets().clone(),
            opened: proto.upstream_opened,
            since: Instant::now(),
            slot,
        };
        self.pool.give_back(idle)
    }

    /// An idle connection of the pool, ready for the session as it is
    /// (fit for reuse, with the session's settings), taken without
    /// waiting; `None` sends the session the long way round.
    pub fn take_ready(&mut self, proto: &mut Protocol) -> Option<std::net::TcpStream> {
        let up = &proto.services.config.upstream;
        let idle = self
            .pool
            .take_ready(up.reuse_idle_timeout, up.reuse_lifetime)?;
        if idle.sets != *proto.session_sets() {
            // Its settings are made over a round trip of its own.
            self.pool.give_back(idle);
            return None;
        }
        let (tcp, _, taken) = idle.taken();
        self.adopt(proto, taken);
        Some(tcp)
    }

    /// The session goes on over `taken`: the client's cancel key points at
    /// its backend.
    pub fn adopt(&mut self, proto: &mut Protocol, taken: Taken) {
        let info = &proto.info;
        if let Some((pid, secret)) = taken.key.as_deref().and_then(backend::backend_key) {
            info.upstream_pid.store(pid as u64, Relaxed);
            if let Some(ck) = &proto.client_key {
                self.cancel.point(ck, Key { pid, secret });
            }
        }
        info.set_state(SessionState::Idle);
        proto.server_params = taken.params;
        proto.switched_upstream(taken.key, taken.opened, taken.statements);
        self.slot = Some(taken.slot);
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.clients.fetch_sub(1, Relaxed);
    }
}
