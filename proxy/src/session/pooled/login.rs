//! A pooled client's login: answered by onetrip with its pool's greeting,
//! taking no server connection, once the pool has one the server accepted
//! and knows what the server makes of the client's startup parameters.
//! Until then the login itself opens a connection (the server checks the
//! user and database) or makes the parameters on one (the server checks
//! them), and gives it back to the pool.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tracing::{debug, info, warn};

use super::{self as pooled, Client, PoolError};
use crate::session::{
    handshake::KeyGuard,
    start::{Ready, refuse},
};
use crate::{
    auth::Credential,
    cancel::Pid,
    net::{ServerSocket, Stream},
    pooling::{Grant, Greeting, Held, Idle, Learned, Pool, Pooled, Wants, startup::ClientStartup},
    protocol::{Protocol, Residues},
    shared::Shared,
    stats::{Counters, SessionInfo, SessionState},
    timers::timeout,
    wire::{
        backend,
        read::{ReadError, read_message},
        tag, write,
    },
};

/// How a pooled login ended (moved once per login, as the login's own
/// result is).
#[allow(clippy::large_enum_variant)]
pub(in crate::session) enum Outcome {
    /// The session is set up (or over, its client told why).
    Done(Option<(Box<Protocol>, Option<Ready>, Option<Held>)>),
    /// The server asks this user for a password onetrip does not have:
    /// the login is relayed to it, in session mode.
    SessionMode(Stream),
}

/// A pooled login of `user` to `database` whose client is in (its
/// password, when onetrip asks for it, checked): `unread` is what it sent
/// past that.
pub(in crate::session) async fn login(
    client: Stream,
    unread: BytesMut,
    (startup, credential): (ClientStartup, Option<Arc<Credential>>),
    (database, user): (&str, &str),
    info: Arc<SessionInfo>,
    shared: &Arc<Shared>,
) -> Outcome {
    let pool = match shared.pools.pool(database, user) {
        Ok(p) => p,
        Err(e) => {
            refuse(client, shared, &info, "53300", &e.to_string()).await;
            return Outcome::Done(None);
        }
    };
    if let Some(c) = credential {
        pool.use_credential(c);
    }
    let ready = ready(client, &pool, &startup, &info, shared).await;
    let (client, greeting, learned) = match ready {
        Ok(r) => r,
        Err(outcome) => {
            shared.pools.forget_if_unused(&pool);
            return outcome;
        }
    };
    let pooled = Pooled::waiting(pool, shared.cancel.clone());
    let done = greet_alone(
        client, unread, greeting, &learned, startup, pooled, shared, info,
    );
    Outcome::Done(done.await)
}

/// Waits until the pool can greet this client: it has a greeting, and has
/// learned what the server reports for the client's startup parameters.
async fn ready(
    mut client: Stream,
    pool: &Arc<Pool>,
    startup: &ClientStartup,
    info: &Arc<SessionInfo>,
    shared: &Arc<Shared>,
) -> Result<(Stream, Greeting, Learned), Outcome> {
    // A drain between two looks forgets the greeting: a few looks at most.
    for _ in 0..3 {
        let learned = match startup.learn.is_empty() {
            true => Some(Learned::default()),
            false => pool.learned(&startup.learn),
        };
        if let (Some(g), Some(learned)) = (pool.greeting(), learned) {
            return Ok((client, g, learned));
        }
        client = connect(client, pool, startup, info, shared).await?;
    }
    let why = "the pool's server connections closed while logging in";
    refuse(client, shared, info, "08006", why).await;
    Err(Outcome::Done(None))
}

/// Takes a connection of the pool (opening one: the server checks the
/// login), makes the client's startup parameters on it if they are not
/// learned yet, and gives it back.
async fn connect(
    client: Stream,
    pool: &Arc<Pool>,
    startup: &ClientStartup,
    info: &Arc<SessionInfo>,
    shared: &Arc<Shared>,
) -> Result<Stream, Outcome> {
    let config = shared.config();
    let up = &config.upstream;
    let no_libraries = Residues::default();
    let wants = Wants {
        sets: &startup.sets,
        loads: &no_libraries,
    };
    let (wait, max_idle, lifetime) = (
        config.pool.query_wait_timeout,
        up.reuse_idle_timeout,
        up.reuse_lifetime,
    );
    let grant = match pool.acquire(wait, max_idle, lifetime, wants).await {
        Ok(g) => g,
        Err(e) => {
            refuse(client, shared, info, "08P01", &e.to_string()).await;
            return Err(Outcome::Done(None));
        }
    };
    // Without a greeting (forgotten after CREATE, ALTER or DROP DATABASE:
    // the next login hears the server) only a new connection gives one.
    let greeted = pool.greeting().is_some();
    let got = match grant {
        Grant::Idle(idle) if greeted && idle.usable_for(&no_libraries) => Ok(idle.taken()),
        Grant::Idle(idle) => pooled::opened(shared, pool, idle.close()).await,
        Grant::Open(place) => pooled::opened(shared, pool, place).await,
    };
    let (socket, mut taken) = match got {
        Ok(g) => g,
        Err(e) if e.needs_password() => {
            info!(
                "session mode: the upstream asked user \"{}\" for a password onetrip \
                 has none of (not in [pool] users, and no [pool] auth_user)",
                pool.user
            );
            return Err(Outcome::SessionMode(client));
        }
        Err(e) => return Err(refused(client, e, info, shared).await),
    };
    let mut tcp = match socket.into_stream() {
        Ok(t) => t,
        Err(e) => return Err(refused(client, e.into(), info, shared).await),
    };
    if !startup.learn.is_empty() && pool.learned(&startup.learn).is_none() {
        let limit = up.connect_timeout;
        let learning = learn(&mut tcp, startup, config.limits.max_message_bytes);
        match timeout(limit, learning).await {
            Ok(Ok(values)) => {
                pool.learn(startup.learn.clone(), values);
                // RESET ALL, then the learned parameters: what it holds now.
                taken.conn.state.sets = startup
                    .sets
                    .iter()
                    .filter(|(n, _)| startup.learn.iter().any(|(l, _)| l == n))
                    .cloned()
                    .collect();
            }
            Ok(Err(Learning::Server(msg))) => {
                // Refused whole: the connection is as it was.
                give_back(pool, tcp, taken);
                let mut c = client;
                let limit = config.limits.client_write_timeout;
                let _ = timeout(limit, c.write_all(&write::as_fatal(&msg))).await;
                Counters::add(&info.counters.errors, 1);
                shared.stats.close_session(info, Default::default());
                return Err(Outcome::Done(None));
            }
            Ok(Err(Learning::Read(e))) => {
                let why = format!("a pooled server connection failed: {e}");
                refuse(client, shared, info, "08006", &why).await;
                return Err(Outcome::Done(None));
            }
            Err(_) => {
                let why = format!("a pooled server connection took longer than {limit:?}");
                refuse(client, shared, info, "08006", &why).await;
                return Err(Outcome::Done(None));
            }
        }
    }
    give_back(pool, tcp, taken);
    Ok(client)
}

/// A connection the login used goes back to its pool, for the client's
/// first statement or anyone's.
fn give_back(pool: &Pool, tcp: Stream, taken: crate::pooling::Taken) {
    let socket = match ServerSocket::from_stream(tcp) {
        Ok(t) => t,
        Err(e) => return debug!("pooled connection not given back: {e}"),
    };
    pool.give_back(Idle {
        socket,
        conn: taken.conn,
        since: std::time::Instant::now(),
        place: taken.place,
        watched: None,
    });
}

/// A login the pool could not open a connection for: the server's own
/// refusal goes to the client as it is (a database or user that does not
/// exist), anything else as a class-08 error.
async fn refused(
    client: Stream,
    e: PoolError,
    info: &Arc<SessionInfo>,
    shared: &Shared,
) -> Outcome {
    match e.server_error() {
        Some(msg) => {
            info!("login refused by the upstream: {e}");
            let mut c = client;
            let limit = shared.config().limits.client_write_timeout;
            let _ = timeout(limit, c.write_all(msg)).await;
            Counters::add(&info.counters.errors, 1);
            shared.stats.close_session(info, Default::default());
        }
        None => refuse(client, shared, info, e.sqlstate(), &e.to_string()).await,
    }
    Outcome::Done(None)
}

/// Why startup parameters were not learned.
enum Learning {
    /// The server refused them (its ErrorResponse).
    Server(Bytes),
    Read(ReadError),
}

impl From<std::io::Error> for Learning {
    fn from(e: std::io::Error) -> Self {
        Learning::Read(ReadError::Io(e))
    }
}

/// Makes the startup parameters on `tcp` (`ClientStartup::learn_query`)
/// and reads what the server reports for each.
async fn learn(tcp: &mut Stream, startup: &ClientStartup, max: usize) -> Result<Learned, Learning> {
    let mut q = BytesMut::new();
    write::query(&mut q, &startup.learn_query());
    tcp.write_all(&q).await?;
    // TLS may hold what it took until flushed.
    tcp.flush().await?;
    let mut buf = BytesMut::with_capacity(1024);
    let mut values = None;
    let mut failed = None;
    let mut notices = Vec::new();
    loop {
        let msg = read_message(tcp, &mut buf, max)
            .await
            .map_err(Learning::Read)?;
        match msg[0] {
            tag::DATA_ROW => values = backend::data_row_text(&msg, startup.learn.len()),
            tag::ERROR_RESPONSE => failed = Some(msg),
            tag::NOTICE_RESPONSE => notices.push(msg),
            tag::READY_FOR_QUERY => break,
            _ => {}
        }
    }
    if let Some(msg) = failed {
        return Err(Learning::Server(msg));
    }
    let values = values.unwrap_or_default();
    let values = startup
        .learn
        .iter()
        .zip(values)
        .filter_map(|((n, _), v)| Some((n.clone(), v?)))
        .collect();
    Ok(Learned { values, notices })
}

/// The greeting a client of `startup` gets: the pool's, with the values
/// reported for its own parameters in place of the pool's.
fn greeting_for(g: &Greeting, learned: &Learned, startup: &ClientStartup) -> Vec<(String, String)> {
    let mut params = g.params.to_vec();
    for (name, value) in learned.values.iter().chain(&startup.known) {
        if let Some((_, v)) = params
            .iter_mut()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
        {
            v.clone_from(value);
        }
    }
    params
}

/// A pooled login answered here, with no server connection: the pool's
/// greeting, as a new connection of the pool gave it, and a cancel key
/// that cancels nothing until the session takes a connection.
#[allow(clippy::too_many_arguments)]
async fn greet_alone(
    mut client: Stream,
    unread: BytesMut,
    greeting: Greeting,
    learned: &Learned,
    startup: ClientStartup,
    pooled: Pooled,
    shared: &Shared,
    info: Arc<SessionInfo>,
) -> Option<(Box<Protocol>, Option<Ready>, Option<Held>)> {
    let mut proto = Box::new(Protocol::new(shared.services(), info.clone()));
    let params = greeting_for(&greeting, learned, &startup);
    let registered = KeyGuard::issue(shared, Some(&greeting.key), Pid::MadeUp);
    if let Some(key) = registered.key() {
        // Issued pointing at the greeting's backend, another client's now.
        shared.cancel.detach(key);
    }
    let hello =
        crate::kept::greeting_with(&learned.notices, &params, registered.message().as_deref());
    let limit = shared.config().limits.client_write_timeout;
    let written = timeout(limit, async {
        client.write_all(&hello).await?;
        client.flush().await
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        debug!("login ended before its greeting was written");
        return Some((proto, None, None));
    }
    Counters::add(&info.counters.bytes_to_client, hello.len() as u64);
    // A plain client waits in the worker's epoll; a TLS one in this task.
    let client = match client {
        Stream::Plain(tcp) => match tcp.into_std() {
            Ok(tcp) => Client::Plain(tcp),
            Err(e) => {
                warn!("session closed: its client socket could not wait: {e}");
                return Some((proto, None, None));
            }
        },
        tls => Client::Runtime(tls),
    };
    proto.client_key = registered.keep();
    proto.on_server_version(
        params
            .iter()
            .find(|(k, _)| k == "server_version")
            .map(|(_, v)| v.as_str()),
    );
    proto.pooled = true;
    proto.own_defaults = startup.own_defaults;
    let startup_told: Vec<(String, String)> = learned
        .values
        .iter()
        .chain(&startup.known)
        .cloned()
        .collect();
    proto.start_with(startup.sets, greeting.params.clone(), startup_told);
    proto.count_pins_in(pooled.pool.pinned.clone());
    proto.describe_with(pooled.pool.descriptions.clone());
    proto.count_statements_in(pooled.pool.statements.clone());
    info.pooled
        .store(true, std::sync::atomic::Ordering::Relaxed);
    shared.stats.admit(&info);
    info.set_state(SessionState::Idle);
    debug!("pooled session greeted without a server connection");
    Some((
        proto,
        Some(Ready::Waiting(client, unread)),
        Some(Box::new(pooled)),
    ))
}
