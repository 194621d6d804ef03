//! A pooled session's hold on its pool: the connection it has now, if
//! any, given back at each release point and taken again when its client
//! speaks. Both happen where the session relays (the worker's epoll, with
//! no await), and so does waiting in line for a connection when none is
//! idle (`relay::epoll`); the session's task takes over to open one, or to
//! make its settings on one (`session::pooled`).

use std::{
    os::fd::AsRawFd,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use super::{Deliver, Grant, Idle, Place, Pool, Take, WaitTimeout, Wants};
use crate::{
    cancel::{CancelKeys, Key, Target},
    net::ServerSocket,
    protocol::{Protocol, ServerConnection},
    stats::SessionState,
    worker::Watched,
};

/// A pooled session's place in its pool: counted among its clients while
/// it lives, with the place of the connection it holds now, if any.
pub struct Pooled {
    pub pool: Arc<Pool>,
    pub place: Option<Place>,
    cancel: Arc<CancelKeys>,
    /// Where the client's cancel key points, once looked up.
    target: Option<Arc<Target>>,
    /// What the session got while it waited in its worker's relay, for
    /// its task to go on with (`session::pooled::between`).
    /// Boxed: rare, and an idle connection's record is large, while every
    /// pooled session carries this.
    pub granted: Option<Box<Result<Grant, WaitTimeout>>>,
    /// The session's id with its pool's listening connection, once it
    /// has listened there: its channels go with it.
    pub listens_as: Option<u64>,
    /// The pid its client was told at login, once it has held a backend.
    client_pid: Option<i32>,
}

/// What a session without a connection does when its client speaks.
pub enum Waiting {
    /// It goes on over this connection, taken now (still in the worker
    /// epoll it was kept in, if it was).
    Ready(std::net::TcpStream, Option<Watched>),
    /// Its task goes on with what it was granted (`Pooled::granted`): a
    /// connection to open, or a TLS one to relay.
    Task,
    /// It waits in line for a grant, left with its worker's relay.
    InLine,
}

/// A server connection a pooled session takes (from the pool's idle ones,
/// or just opened), with its place in the pool's count.
pub struct Taken {
    pub conn: Box<ServerConnection>,
    pub place: Place,
}

impl Idle {
    /// The connection and what the session that takes it adopts. Out of
    /// any worker epoll: the session's task relays it now.
    pub fn taken(self) -> (ServerSocket, Taken) {
        let Idle {
            socket,
            conn,
            place,
            watched,
            ..
        } = self;
        if let (ServerSocket::Plain(tcp), Some(watched)) = (&socket, watched) {
            watched.end(tcp.as_raw_fd());
        }
        (socket, Taken { conn, place })
    }

    /// As `taken`, for a worker's relay: left in the epoll it was kept in.
    /// A TLS connection is given back: only a session's task relays it.
    // Moved, not boxed, as a `Grant` is.
    #[allow(clippy::result_large_err)]
    fn taken_watched(self) -> Result<(std::net::TcpStream, Option<Watched>, Taken), Idle> {
        let Idle {
            socket,
            conn,
            since,
            place,
            watched,
        } = self;
        match socket {
            ServerSocket::Plain(tcp) => Ok((tcp, watched, Taken { conn, place })),
            socket => Err(Idle {
                socket,
                conn,
                since,
                place,
                watched,
            }),
        }
    }
}

/// A session's hold as the session carries it: boxed, since it moves
/// between the session's task and its worker's table at every stretch and
/// each keeps room for it.
pub type Held = Box<Pooled>;

impl Pooled {
    /// A session greeted without a connection (`Pool::greeting`): it
    /// takes one when its client first speaks.
    pub fn waiting(pool: Arc<Pool>, cancel: Arc<CancelKeys>) -> Self {
        pool.clients.fetch_add(1, Relaxed);
        Self {
            pool,
            place: None,
            cancel,
            target: None,
            granted: None,
            listens_as: None,
            client_pid: None,
        }
    }

    /// Gives the session's clean connection back to the pool; true when it
    /// went to a client whose task waits on this thread. Its backend is
    /// about to run other clients' queries: this client's key cancels
    /// nothing until the session has another. `kept`: the worker epoll it
    /// stays in.
    pub fn give_back(
        &mut self,
        socket: ServerSocket,
        watched: Option<Watched>,
        proto: &mut Protocol,
    ) -> bool {
        if let Some(target) = self.target(proto) {
            target.set(None);
        }
        let backend = proto.info.upstream_pid.swap(0, Relaxed);
        if let Some(client) = self.client_pid {
            let backend = i32::try_from(backend).ok().filter(|&b| b != 0);
            self.pool.listener.senders.gave_back(backend, client);
        }
        let Some(place) = self.place.take() else {
            return false;
        };
        let conn = proto.release_server();
        self.pool.count_reset(conn.state.reset);
        let idle = Idle {
            socket,
            conn,
            since: Instant::now(),
            place,
            watched,
        };
        self.pool.give_back(idle)
    }

    /// A connection of the pool for the session now, or its place in line
    /// (its grant left with `to` under `ticket`).
    pub fn take_or_wait(
        &mut self,
        proto: &mut Protocol,
        to: &Arc<dyn Deliver>,
        ticket: u64,
    ) -> Waiting {
        self.expect_backend(proto);
        let up = &proto.services.config.upstream;
        let (max_idle, lifetime) = (up.reuse_idle_timeout, up.reuse_lifetime);
        let wants = Wants {
            sets: proto.session_sets(),
            loads: proto.loads(),
        };
        match self
            .pool
            .take_or_wait(max_idle, lifetime, wants, to, ticket)
        {
            Take::InLine => Waiting::InLine,
            Take::Now(grant) => self.use_grant(proto, grant),
        }
    }

    /// Takes a grant: an idle plain connection that can be the client's is
    /// used (what makes it so goes ahead of the client's next message); a
    /// TLS one is left for the task (`granted`) to relay, and anything else
    /// for it to open a connection.
    pub fn use_grant(&mut self, proto: &mut Protocol, grant: Grant) -> Waiting {
        match grant {
            Grant::Idle(idle) if idle.usable_for(proto.loads()) => match idle.taken_watched() {
                Ok((tcp, watched, taken)) => {
                    self.adopt(proto, taken);
                    Waiting::Ready(tcp, watched)
                }
                // TLS: the task relays it, in its runtime.
                Err(tls) => {
                    self.granted = Some(Box::new(Ok(Grant::Idle(tls))));
                    Waiting::Task
                }
            },
            Grant::Idle(idle) => {
                self.granted = Some(Box::new(Ok(Grant::Open(idle.close()))));
                Waiting::Task
            }
            other => {
                self.granted = Some(Box::new(Ok(other)));
                Waiting::Task
            }
        }
    }

    /// The session got `grant` in line after `waited`, and takes it as
    /// `use_grant` does (an idle connection checked as one taken at once).
    pub fn use_grant_after_wait(
        &mut self,
        proto: &mut Protocol,
        waited: Duration,
        grant: Grant,
    ) -> Waiting {
        let up = &proto.services.config.upstream;
        let (max_idle, lifetime) = (up.reuse_idle_timeout, up.reuse_lifetime);
        let grant = self.pool.waited(waited, grant, max_idle, lifetime);
        self.use_grant(proto, grant)
    }

    /// The session stops waiting in line under `ticket` on `thread`.
    pub fn leave_line(&self, ticket: u64, thread: u64) {
        self.pool.leave_line(ticket, thread);
    }

    /// The session waited in line past `timeout`: its task tells the
    /// client (`granted`).
    pub fn wait_timed_out(&mut self, waited: Duration, timeout: Duration) {
        self.granted = Some(Box::new(Err(self.pool.timed_out(waited, timeout))));
    }

    /// The session is getting a connection for its client's statement: a
    /// cancel that comes meanwhile waits for its backend (`Target::expect`).
    pub fn expect_backend(&mut self, proto: &Protocol) {
        if let Some(target) = self.target(proto) {
            target.expect();
        }
    }

    /// Where the client's cancel key points (looked up once).
    fn target(&mut self, proto: &Protocol) -> Option<&Arc<Target>> {
        if self.target.is_none() {
            let key = proto.client_key.as_ref()?;
            self.target = self.cancel.target(key);
        }
        self.target.as_ref()
    }

    /// The session goes on over `taken`: the client's cancel key points at
    /// its backend.
    pub fn adopt(&mut self, proto: &mut Protocol, taken: Taken) {
        let Taken { conn, place } = taken;
        let info = &proto.info;
        if let Some((pid, secret)) = conn.backend_key() {
            info.upstream_pid.store(pid as u64, Relaxed);
            if let Some(client) = proto.client_key.as_ref().map(|k| k.pid) {
                self.client_pid = Some(client);
                self.pool.listener.senders.took(pid, client);
            }
            if let Some(target) = self.target(proto) {
                target.set(Some(Key { pid, secret }));
            }
        }
        info.set_state(SessionState::Idle);
        proto.switched_upstream(conn);
        self.place = Some(place);
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(id) = self.listens_as {
            self.pool.listener.unlisten(id, None);
        }
        if let Some(client) = self.client_pid {
            self.pool.listener.senders.gave_back(None, client);
        }
        self.pool.clients.fetch_sub(1, Relaxed);
    }
}
