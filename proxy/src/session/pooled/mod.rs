//! A session in transaction pooling, between two transactions, when it
//! must wait: for its client's next bytes, for a connection of its pool
//! (an idle one, or one it opens with the trust handshake), or for its
//! settings to be made on one; then relaying goes on over it. A TLS
//! client, or any client of TLS server connections, waits and relays here,
//! in the session's task: TLS state can't enter a worker's epoll.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, warn};

use super::{
    handshake::{ConnectError, connect_upstream},
    upstream_auth::{Answerer, PasswordError},
};

mod auth_query;
mod listen;
pub(super) mod login;
pub(super) mod password;
mod replica;
mod wait;
use crate::{
    auth::{Credential, scram::ScramError},
    net::{ServerSocket, Stream},
    pooling::{Grant, Idle, Pool, Pooled, Taken, WaitTimeout, Wants},
    protocol::{Protocol, ServerConnection, ServerParams},
    relay::{Closer, End, Room, give_back_room, replica::Detour},
    shared::Shared,
    stats::Counters,
    wire::{
        backend,
        queue::WriteQueue,
        read::{ReadError, read_message},
        tag,
        write::{self, Severity},
    },
};
pub(crate) use wait::notified;
use wait::{read_from_client, wait_for_client};

/// Why a pooled session could not go on.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Wait(#[from] WaitTimeout),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("opening a pooled upstream connection failed: {0}")]
    Read(#[from] ReadError),
    #[error("opening a pooled upstream connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("opening a pooled upstream connection failed: {0}")]
    Password(#[from] PasswordError),
    #[error("upstream refused a pooled connection: {}", error_text(.0))]
    Refused(Bytes),
    #[error("upstream answered a pooled connection's startup with message type '{}'", char::from(*.0))]
    Unexpected(u8),
    #[error("opening a pooled upstream connection took longer than {0:?}")]
    Timeout(Duration),
    #[error(
        "the password of user \"{0}\" changed: its pool opens no server connection until the user logs in again"
    )]
    PasswordChanged(String),
}

/// The message of a server's ErrorResponse.
fn error_text(msg: &[u8]) -> &str {
    backend::error_field(msg, b'M').unwrap_or("error")
}

impl PoolError {
    /// The server asked for a password onetrip does not have: the login
    /// is the server's to check (session mode).
    pub fn needs_password(&self) -> bool {
        matches!(self, PoolError::Password(PasswordError::NoPassword(_)))
    }

    /// The server's own refusal, to relay to the client as it is.
    pub fn server_error(&self) -> Option<&Bytes> {
        match self {
            PoolError::Refused(msg) => Some(msg),
            _ => None,
        }
    }

    /// What the client is told: PgBouncer's 08P01 for a wait that ran
    /// out, the class-08 code of a failed connection otherwise.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            PoolError::Wait(_) => "08P01",
            _ => "08006",
        }
    }
}

/// A fresh server connection for a pool: the startup packet, trust
/// authentication, the greeting read to its ReadyForQuery.
pub struct Opened {
    /// Plain or TLS, as `[upstream] tls` and the server made it.
    pub stream: Stream,
    /// Its greeting's key and ParameterStatus values.
    pub conn: Box<ServerConnection>,
}

/// A password asked for is answered with the pool's credential
/// (`Pool::credential`). The greeting is the pool's next logins'
/// (`Pool::greeting`); a connection refused leaves them to the server.
pub async fn open(shared: &Shared, pool: &Pool) -> Result<Opened, PoolError> {
    let limit = shared.config().upstream.connect_timeout;
    let credential = pool.credential();
    let now = open_now(shared, &pool.startup, &pool.user, credential.as_deref());
    let opened = match crate::timers::timeout(limit, now).await {
        // The credential was forgotten (`Pool::forget_credential`).
        Ok(Err(e)) if e.needs_password() && pool.had_credential() => {
            Err(PoolError::PasswordChanged(pool.user.clone()))
        }
        Ok(r) => r,
        Err(_) => Err(PoolError::Timeout(limit)),
    };
    match &opened {
        Ok(o) => pool.greeted(&o.conn.params().to_vec(), o.conn.key.as_ref()),
        Err(_) => pool.greeted(&[], None),
    }
    if let Ok(o) = &opened
        && let Some((pid, _)) = o.conn.backend_key()
    {
        pool.listener.senders.opened(pid);
    }
    match &opened {
        Err(PoolError::Password(PasswordError::Scram(ScramError::Changed))) => {
            // The kept secret is older than the server's: looked up again
            // at the next login.
            shared.secrets.forget(&pool.database, &pool.user);
        }
        Err(PoolError::Password(PasswordError::Unanswerable { .. })) => {
            // The server asks otherwise than when the pool found out (its
            // pg_hba changed): the next login finds out again.
            pool.forget_method();
        }
        _ => {}
    }
    opened
}

async fn open_now(
    shared: &Shared,
    startup: &Bytes,
    user: &str,
    credential: Option<&Credential>,
) -> Result<Opened, PoolError> {
    let mut stream = connect_upstream(shared).await?;
    stream.write_all(startup).await?;
    // TLS may hold what it took until flushed.
    stream.flush().await?;
    let mut buf = BytesMut::with_capacity(1024);
    let mut key = None;
    let mut params = BytesMut::with_capacity(512);
    let max = crate::wire::frame::MAX_AUTH_MESSAGE;
    let mut answerer = Answerer::new(user, credential);
    let mut answer = BytesMut::new();
    loop {
        let msg = read_message(&mut stream, &mut buf, max).await?;
        match msg[0] {
            tag::AUTHENTICATION if backend::auth_code(&msg) == Some(backend::auth::OK) => {}
            tag::AUTHENTICATION => {
                answerer.answer(&msg, &mut answer)?;
                if !answer.is_empty() {
                    stream.write_all(&answer).await?;
                    stream.flush().await?;
                    answer.clear();
                }
            }
            // The same startup packet as the session's: the same values
            // its client was told at login.
            tag::PARAMETER_STATUS => {
                params.extend_from_slice(&msg);
            }
            tag::NOTICE_RESPONSE | tag::NEGOTIATE_PROTOCOL_VERSION => {}
            // A copy: a slice would keep the whole read buffer it lies in
            // for as long as the connection lives.
            tag::BACKEND_KEY_DATA => key = Some(Bytes::copy_from_slice(&msg)),
            tag::ERROR_RESPONSE => return Err(PoolError::Refused(msg)),
            tag::READY_FOR_QUERY if buf.is_empty() => {
                return Ok(Opened {
                    stream,
                    conn: Box::new(ServerConnection::new(
                        key,
                        ServerParams::from_messages(&params),
                    )),
                });
            }
            t => return Err(PoolError::Unexpected(t)),
        }
    }
}

/// Opens connections for pools below `[pool] min_idle`, in the
/// background; each is idle in its pool once ready.
pub fn fill_pools(shared: &Arc<Shared>) {
    let min_idle = shared.config().pool.min_idle;
    for (pool, places) in shared.pools.to_fill(min_idle) {
        for place in places {
            let (shared, pool) = (shared.clone(), pool.clone());
            tokio::spawn(async move {
                let idle = match open(&shared, &pool).await {
                    Ok(o) => ServerSocket::from_stream(o.stream).ok().map(|socket| Idle {
                        socket,
                        conn: o.conn,
                        since: Instant::now(),
                        place,
                        watched: None,
                    }),
                    Err(e) => {
                        warn!("pool {}/{}: min_idle: {e}", pool.database, pool.user);
                        None
                    }
                };
                pool.filled(idle);
            });
        }
    }
}

/// A new connection of `pool` in `place`'s place, as a pooled session
/// takes it.
pub async fn opened(
    shared: &Shared,
    pool: &Pool,
    place: crate::pooling::Place,
) -> Result<(ServerSocket, Taken), PoolError> {
    let o = open(shared, pool).await?;
    let taken = Taken {
        conn: o.conn,
        place,
    };
    Ok((ServerSocket::from_stream(o.stream)?, taken))
}

/// A pooled session's client, between two transactions.
pub enum Client {
    /// A plain socket in no reactor: the worker's epoll relays it, and
    /// waits for its next bytes.
    Plain(std::net::TcpStream),
    /// A stream that stays in the session's task's runtime: a TLS client,
    /// whose TLS state lives there, or a plain one whose server connections
    /// are TLS (relayed there too, it would otherwise leave and enter the
    /// runtime at each transaction).
    Runtime(Stream),
}

impl Client {
    /// The client's TLS state can't leave the session's task.
    pub fn is_tls(&self) -> bool {
        matches!(self, Client::Runtime(s) if s.is_tls())
    }

    /// The client in this thread's runtime.
    pub fn into_stream(self) -> std::io::Result<Stream> {
        match self {
            Client::Plain(c) => Ok(Stream::Plain(tokio::net::TcpStream::from_std(c)?)),
            Client::Runtime(s) => Ok(s),
        }
    }

    /// Writes `queue` to the client, within `limit`: an error names why it
    /// did not take it all.
    async fn write(self, queue: &mut WriteQueue, limit: Duration) -> Result<Self, String> {
        match self {
            Client::Plain(c) => {
                let mut c = tokio::net::TcpStream::from_std(c)
                    .map_err(|e| format!("its client socket could not wait: {e}"))?;
                write_within(&mut c, queue, limit).await?;
                c.into_std()
                    .map(Client::Plain)
                    .map_err(|e| format!("its client socket could not leave the runtime: {e}"))
            }
            Client::Runtime(mut s) => {
                write_within(&mut s, queue, limit).await?;
                Ok(Client::Runtime(s))
            }
        }
    }
}

/// Writes and flushes `queue` (a TLS stream may hold what it took) within
/// `limit`.
async fn write_within<W: AsyncWrite + Unpin>(
    w: &mut W,
    queue: &mut WriteQueue,
    limit: Duration,
) -> Result<(), String> {
    match crate::timers::timeout(limit, queue.write_all(w)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("client write: {e}")),
        Err(_) => Err(format!(
            "its client took no answer within limits.client_write_timeout ({limit:?})"
        )),
    }
}

/// What the session does after giving its connection back.
pub enum Next {
    /// Relaying goes on over these (client, upstream); plain sockets are
    /// in no reactor yet.
    Go(Client, ServerSocket),
    /// The session is over (its client left, or shutdown, or no connection
    /// came; the client was told why).
    End,
    /// Its client's bytes were answered without a connection (a LISTEN the
    /// pool's listening connection ran): the worker's relay writes the
    /// answer and waits for more, as after a release.
    Wait(Client),
}

/// What the client's next bytes need.
enum Needs {
    /// A server connection.
    Go(Client),
    /// Nothing more: they were answered (`Next::Wait`).
    Answered(Client),
}

/// Writes what the worker's relay left for the client: an answer whose
/// connection went back before it was written (`relay::server_done`).
/// Within `limits.client_write_timeout`, as last words are; past it, or
/// with the client gone, the session ends.
pub async fn answer_first(
    client: Client,
    to_client: &mut WriteQueue,
    proto: &Protocol,
) -> Result<Client, String> {
    let limit = proto.services.config.limits.client_write_timeout;
    client.write(to_client, limit).await
}

/// Between two transactions, the long way: the session's connection (if
/// it still has it) goes back, the session waits for its client, takes
/// what it was granted in line in the worker's relay (`Pooled::granted`)
/// or else waits for a connection here, opens one or makes its settings on
/// one (the worker's relay takes an idle one itself: `pooling::held`).
/// `stopped` is why the relay handed the session over while it had no
/// connection; `b.cin` holds the client's next bytes if they are read (a
/// client in the runtime has them read into it here). Plain sockets enter
/// the runtime only to be waited on (the client's first bytes, a settings
/// replay), so a session that only waits for a connection goes back to
/// the worker's epoll without two more registrations each. With
/// `detour`, reads go to replicas from here (`replica.rs`).
#[allow(clippy::too_many_arguments)]
pub async fn between(
    client: Client,
    upstream: Option<ServerSocket>,
    stopped: Option<End>,
    b: &mut Room,
    proto: &mut Protocol,
    pooled: &mut Pooled,
    shared: &Arc<Shared>,
    forced: &mut Closer,
    detour: Option<&mut Detour>,
) -> Next {
    let info = proto.info.clone();
    if let Some(upstream) = upstream {
        pooled.give_back(upstream, None, proto);
    }
    if !matches!(stopped, Some(End::Release) | None)
        && let Some(granted) = pooled.granted.take()
        && let Ok(grant) = *granted
    {
        grant.pass_on();
    }
    match stopped {
        Some(end @ (End::IdleTimeout | End::Shutdown)) => {
            return farewell(client, end, proto).await;
        }
        Some(End::Release) | None => {}
        Some(_) => return Next::End,
    }
    let mut client = match next_bytes(client, b, proto, pooled, shared, forced, detour).await {
        Some(Needs::Go(c)) => c,
        Some(Needs::Answered(c)) => return Next::Wait(c),
        None => return Next::End,
    };
    // The session's own configuration, as it started: no shared lock here.
    let config = proto.services.config.clone();
    let wait = config.pool.query_wait_timeout;
    let up = &config.upstream;
    pooled.expect_backend(proto);
    // What it was granted while it waited in its worker's relay, if it did.
    let grant = match pooled.granted.take() {
        Some(granted) => *granted,
        None => {
            let wants = Wants {
                sets: proto.session_sets(),
                loads: proto.loads(),
            };
            let (max_idle, lifetime) = (up.reuse_idle_timeout, up.reuse_lifetime);
            let acquire = pooled.pool.acquire(wait, max_idle, lifetime, wants);
            let limit = config.limits.buffer_bytes;
            let (c, got) = unless_gone(client, &mut b.cin, limit, acquire).await;
            match (c, got) {
                (Some(c), Some(got)) => {
                    client = c;
                    got
                }
                // It hung up while waiting: its place in line is given up
                // (the wait dropped) and its statement never runs.
                _ => return Next::End,
            }
        }
    };
    let got = match grant {
        Ok(Grant::Idle(idle)) if idle.usable_for(proto.loads()) => Ok(idle.taken()),
        Ok(Grant::Idle(idle)) => opened(shared, &pooled.pool, idle.close()).await,
        Ok(Grant::Open(place)) => opened(shared, &pooled.pool, place).await,
        Err(e) => Err(e.into()),
    };
    let (tcp, taken) = match got {
        Ok(g) => g,
        Err(e) => {
            warn!("{e}");
            Counters::add(&info.counters.errors, 1);
            let msg = write::error(Severity::Fatal, e.sqlstate(), &e.to_string());
            say(client, msg, proto).await;
            return Next::End;
        }
    };
    pooled.adopt(proto, taken);
    debug!("pooled session took a server connection");
    Next::Go(client, tcp)
}

/// `fut`, unless the client hangs up first (`None` then): what it sends
/// meanwhile is read into `cin`, up to `limit`. The client, unless it
/// could not wait.
async fn unless_gone<F: std::future::Future>(
    client: Client,
    cin: &mut BytesMut,
    limit: usize,
    fut: F,
) -> (Option<Client>, Option<F::Output>) {
    let (mut stream, plain) = match client {
        Client::Plain(c) => match tokio::net::TcpStream::from_std(c) {
            Ok(c) => (Stream::Plain(c), true),
            Err(e) => {
                warn!("session closed: its client socket could not wait: {e}");
                return (None, None);
            }
        },
        Client::Runtime(s) => (s, false),
    };
    let mut fut = std::pin::pin!(fut);
    let mut room = [0u8; 512];
    let out = loop {
        tokio::select! {
            biased;
            out = &mut fut => break Some(out),
            r = stream.read(&mut room), if cin.len() < limit => match r {
                Ok(0) | Err(_) => break None,
                Ok(n) => cin.extend_from_slice(&room[..n]),
            },
        }
    };
    let client = match (stream, plain) {
        (Stream::Plain(c), true) => c.into_std().ok().map(Client::Plain),
        (s, _) => Some(Client::Runtime(s)),
    };
    (client, out)
}

/// Waits for the client's next bytes, unless they are read (`None`: it
/// left, said goodbye, or the session was closed and its client told
/// why). What a client in the runtime sends that needs no connection (a
/// BEGIN the session holds, its end, Closes alone) is answered here, as
/// the worker's relay answers it, and the wait goes on; so is a read a
/// replica runs (`detour`), for which a plain client enters the runtime.
async fn next_bytes(
    mut client: Client,
    b: &mut Room,
    proto: &mut Protocol,
    pooled: &mut Pooled,
    shared: &Arc<Shared>,
    forced: &mut Closer,
    mut detour: Option<&mut Detour>,
) -> Option<Needs> {
    loop {
        let routes = detour.is_some() && proto.routes_reads();
        if routes && let Client::Plain(c) = client {
            client = match Client::Plain(c).into_stream() {
                Ok(s) => Client::Runtime(s),
                Err(e) => {
                    warn!("session closed: its client socket could not wait: {e}");
                    return None;
                }
            };
        }
        if b.cin.is_empty() {
            client = wait_for_client(client, &mut b.cin, proto, forced).await?;
        }
        // Saying goodbye: no connection is taken for that.
        if b.cin.starts_with(&write::TERMINATE) {
            return None;
        }
        // A lone LISTEN or UNLISTEN, for the pool's listening connection.
        if let Some((op, len)) = proto.listen_alone(&b.cin) {
            if !listen::run_op(&op, proto, pooled, shared).await {
                proto.listen_on_server();
                return Some(Needs::Go(client));
            }
            let _ = b.cin.split_to(len);
            b.to_client.push(crate::protocol::listen_answer(&op));
            if matches!(client, Client::Plain(_)) {
                return Some(Needs::Answered(client));
            }
        } else {
            let routed = match detour.as_deref_mut() {
                Some(d) if routes => {
                    replica::route(client, b, proto, d, &pooled.pool, forced).await
                }
                _ => replica::Routed::No(client),
            };
            client = match routed {
                replica::Routed::Served(c) => c,
                replica::Routed::No(c) => {
                    if !matches!(c, Client::Runtime(_))
                        || !proto.answer_alone(&mut b.cin, &mut b.to_client)
                    {
                        return Some(Needs::Go(c));
                    }
                    c
                }
                replica::Routed::End => return None,
            };
        }
        let limit = proto.services.config.limits.client_write_timeout;
        client = match client.write(&mut b.to_client, limit).await {
            Ok(c) => c,
            Err(why) => {
                debug!("session closed: {why}");
                return None;
            }
        };
        if b.cin.is_empty() {
            proto.let_go_of_reads();
            give_back_room(&mut b.cin);
        }
    }
}

/// The session ends between two transactions, for shutdown or its idle
/// timeout: its client is told why, as PostgreSQL would tell it.
async fn farewell(client: Client, end: End, proto: &Protocol) -> Next {
    let msg = match end {
        // PostgreSQL's own, from its idle_session_timeout.
        End::IdleTimeout => write::error(
            Severity::Fatal,
            "57P05",
            "terminating connection due to idle-session timeout",
        ),
        _ => write::error(
            Severity::Fatal,
            "57P01",
            "terminating connection due to administrator command (onetrip is shutting down)",
        ),
    };
    say(client, msg, proto).await;
    Next::End
}

/// The client's last words, within `limits.client_write_timeout`.
async fn say(client: Client, msg: Bytes, proto: &Protocol) {
    let limit = proto.services.config.limits.client_write_timeout;
    let mut queue = WriteQueue::default();
    queue.push(msg);
    if let Err(why) = client.write(&mut queue, limit).await {
        debug!("last words not written: {why}");
    }
}
