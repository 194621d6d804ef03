//! A session in transaction pooling, between two transactions, when it
//! must wait: for its client's next bytes, for a connection of its pool
//! (an idle one, or one it opens with the trust handshake), or for its
//! settings to be made on one; then relaying goes on over it.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tracing::{debug, warn};

use super::{
    handshake::{ConnectError, connect_upstream},
    upstream_auth::{Answerer, PasswordError},
};
use crate::{
    auth::{Credential, scram::ScramError},
    net::Stream,
    pooling::{Grant, Idle, Pool, Pooled, Taken, WaitTimeout, Wants},
    protocol::Protocol,
    relay::{Closer, End},
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
    #[error("the pool's server connections are TLS, which the pool does not keep yet")]
    Tls,
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
    pub tcp: tokio::net::TcpStream,
    pub key: Option<Bytes>,
    /// The greeting's ParameterStatus values.
    pub params: Vec<(String, String)>,
}

/// A password asked for is answered with the pool's credential
/// (`Pool::credential`). The greeting is the pool's next logins'
/// (`Pool::greeting`); a connection refused leaves them to the server.
pub async fn open(shared: &Shared, pool: &Pool) -> Result<Opened, PoolError> {
    let limit = shared.config().upstream.connect_timeout;
    let credential = pool.credential();
    let now = open_now(shared, &pool.startup, &pool.user, credential.as_deref());
    let opened = match crate::timers::timeout(limit, now).await {
        Ok(r) => r,
        Err(_) => Err(PoolError::Timeout(limit)),
    };
    match &opened {
        Ok(o) => pool.greeted(&o.params, o.key.as_ref()),
        Err(_) => pool.greeted(&[], None),
    }
    if let Err(PoolError::Password(PasswordError::Scram(ScramError::Changed))) = &opened {
        // The kept secret is older than the server's: looked up again at
        // the next login.
        shared.secrets.forget(&pool.database, &pool.user);
    }
    opened
}

async fn open_now(
    shared: &Shared,
    startup: &Bytes,
    user: &str,
    credential: Option<&Credential>,
) -> Result<Opened, PoolError> {
    let Stream::Plain(mut tcp) = connect_upstream(shared).await? else {
        return Err(PoolError::Tls);
    };
    tcp.write_all(startup).await?;
    let mut buf = BytesMut::with_capacity(1024);
    let mut key = None;
    let mut params = Vec::new();
    let max = crate::wire::frame::MAX_AUTH_MESSAGE;
    let mut answerer = Answerer::new(user, credential);
    let mut answer = BytesMut::new();
    loop {
        let msg = read_message(&mut tcp, &mut buf, max).await?;
        match msg[0] {
            tag::AUTHENTICATION if backend::auth_code(&msg) == Some(backend::auth::OK) => {}
            tag::AUTHENTICATION => {
                answerer.answer(&msg, &mut answer)?;
                if !answer.is_empty() {
                    tcp.write_all(&answer).await?;
                    answer.clear();
                }
            }
            // The same startup packet as the session's: the same values
            // its client was told at login.
            tag::PARAMETER_STATUS => {
                if let Some((k, v)) = backend::parameter_status(&msg) {
                    params.push((k.to_owned(), v.to_owned()));
                }
            }
            tag::NOTICE_RESPONSE | tag::NEGOTIATE_PROTOCOL_VERSION => {}
            tag::BACKEND_KEY_DATA => key = Some(msg),
            tag::ERROR_RESPONSE => return Err(PoolError::Refused(msg)),
            tag::READY_FOR_QUERY if buf.is_empty() => {
                return Ok(Opened { tcp, key, params });
            }
            t => return Err(PoolError::Unexpected(t)),
        }
    }
}

/// Opens connections for pools below `[pool] min_idle`, in the
/// background; each is idle in its pool once ready.
pub fn fill_pools(shared: &Arc<Shared>) {
    let min_idle = shared.config().pool.min_idle;
    for (pool, slots) in shared.pools.to_fill(min_idle) {
        for slot in slots {
            let (shared, pool) = (shared.clone(), pool.clone());
            tokio::spawn(async move {
                let idle = match open(&shared, &pool).await {
                    Ok(o) => o.tcp.into_std().ok().map(|tcp| {
                        let now = Instant::now();
                        Idle {
                            tcp,
                            params: o.params,
                            key: o.key,
                            settings: None,
                            statements: Default::default(),
                            state: Default::default(),
                            opened: now,
                            since: now,
                            slot,
                            kept: None,
                        }
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

/// A new connection of `pool` in `slot`'s place, as a pooled session
/// takes it.
pub async fn opened(
    shared: &Shared,
    pool: &Pool,
    slot: crate::pooling::Slot,
) -> Result<(std::net::TcpStream, Taken), PoolError> {
    let o = open(shared, pool).await?;
    let _ = o.tcp.set_nodelay(true);
    let taken = Taken {
        key: o.key,
        opened: Instant::now(),
        slot,
        statements: Default::default(),
        params: o.params,
        settings: None,
        state: Default::default(),
    };
    Ok((o.tcp.into_std()?, taken))
}

/// What the session does after giving its connection back.
pub enum Next {
    /// Relaying goes on over these sockets (client, upstream), in no
    /// reactor yet.
    Go(std::net::TcpStream, std::net::TcpStream),
    /// The session is over (its client left, or shutdown, or no connection
    /// came; the client was told why).
    End,
}

/// Writes what the worker's relay left for the client: an answer whose
/// connection went back before it was written (`relay::server_done`).
/// Within `limits.client_write_timeout`, as last words are; past it, or
/// with the client gone, the session ends.
pub async fn answer_first(
    client: std::net::TcpStream,
    to_client: &mut WriteQueue,
    proto: &Protocol,
) -> Result<std::net::TcpStream, String> {
    let mut c = tokio::net::TcpStream::from_std(client)
        .map_err(|e| format!("its client socket could not wait: {e}"))?;
    let limit = proto.services.config.limits.client_write_timeout;
    match crate::timers::timeout(limit, to_client.write_all(&mut c)).await {
        Ok(Ok(())) => c
            .into_std()
            .map_err(|e| format!("its client socket could not leave the runtime: {e}")),
        Ok(Err(e)) => Err(format!("client write: {e}")),
        Err(_) => Err(format!(
            "its client took no answer within limits.client_write_timeout ({limit:?})"
        )),
    }
}

/// Between two transactions, the long way: the session's connection (if
/// it still has it) goes back, the session waits for its client, takes
/// what it was granted in line in the worker's relay (`Pooled::granted`)
/// or else waits for a connection here, opens one or makes its settings on
/// one (the worker's relay takes an idle one itself: `pooling::held`).
/// `stopped` is why the relay handed the session over while it had no
/// connection; `buffered`, whether the client's next bytes are read. The
/// sockets enter the runtime only to be waited on (the client's first
/// bytes, a settings replay), so a session that only waits for a
/// connection goes back to the worker's epoll without two more
/// registrations each.
#[allow(clippy::too_many_arguments)]
pub async fn between(
    client: std::net::TcpStream,
    upstream: Option<std::net::TcpStream>,
    stopped: Option<End>,
    buffered: bool,
    proto: &mut Protocol,
    pooled: &mut Pooled,
    shared: &Shared,
    forced: &mut Closer,
) -> Next {
    let info = proto.info.clone();
    if let Some(upstream) = upstream {
        pooled.give_back(upstream, None, proto);
    }
    if !matches!(stopped, Some(End::Release) | None)
        && let Some(Ok(grant)) = pooled.granted.take()
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
    let client = match buffered {
        true => client,
        false => match wait_for_client(client, proto, forced).await {
            Some(c) => c,
            None => return Next::End,
        },
    };
    // The session's own configuration, as it started: no shared lock here.
    let config = proto.services.config.clone();
    let wait = config.pool.query_wait_timeout;
    let up = &config.upstream;
    // What it was granted while it waited in its worker's relay, if it did.
    let grant = match pooled.granted.take() {
        Some(granted) => granted,
        None => {
            let wants = Wants {
                sets: proto.session_sets(),
                loads: proto.loads(),
            };
            let (max_idle, lifetime) = (up.reuse_idle_timeout, up.reuse_lifetime);
            pooled.pool.acquire(wait, max_idle, lifetime, wants).await
        }
    };
    let got = match grant {
        Ok(Grant::Idle(idle)) if idle.usable_for(proto.loads()) => Ok(idle.taken()),
        Ok(Grant::Idle(idle)) => opened(shared, &pooled.pool, idle.close()).await,
        Ok(Grant::Open(slot)) => opened(shared, &pooled.pool, slot).await,
        Err(e) => Err(e.into()),
    };
    let (tcp, taken) = match got {
        Ok(g) => g,
        Err(e) => {
            warn!("{e}");
            Counters::add(&info.counters.errors, 1);
            let msg = write::error(Severity::Fatal, e.sqlstate(), &e.to_string());
            if let Ok(mut client) = tokio::net::TcpStream::from_std(client) {
                let _ = client.write_all(&msg).await;
            }
            return Next::End;
        }
    };
    pooled.adopt(proto, taken);
    debug!("pooled session took a server connection");
    Next::Go(client, tcp)
}

/// Waits for the client's next bytes (`None`: it left, said goodbye, or
/// the session was closed and its client told why).
async fn wait_for_client(
    client: std::net::TcpStream,
    proto: &Protocol,
    forced: &mut Closer,
) -> Option<std::net::TcpStream> {
    let client = match tokio::net::TcpStream::from_std(client) {
        Ok(c) => c,
        Err(e) => {
            warn!("session closed: its client socket could not wait: {e}");
            return None;
        }
    };
    let mut first = [0u8; 5];
    let peeked = tokio::select! {
        biased;
        end = &mut *forced => {
            farewell_to(client, end, proto).await;
            return None;
        }
        r = client.peek(&mut first) => r,
    };
    match peeked {
        // Gone, or saying goodbye: no connection is taken for that.
        Ok(0) | Err(_) => None,
        Ok(5) if first == write::TERMINATE => None,
        Ok(_) => client.into_std().ok(),
    }
}

/// The session ends between two transactions, for shutdown or its idle
/// timeout: its client is told why, as PostgreSQL would tell it.
async fn farewell(client: std::net::TcpStream, end: End, proto: &Protocol) -> Next {
    if let Ok(client) = tokio::net::TcpStream::from_std(client) {
        farewell_to(client, end, proto).await;
    }
    Next::End
}

async fn farewell_to(mut client: tokio::net::TcpStream, end: End, proto: &Protocol) {
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
    let limit = proto.services.config.limits.client_write_timeout;
    let _ = crate::timers::timeout(limit, client.write_all(&msg)).await;
}
