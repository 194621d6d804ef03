//! A session's login: a connection from the pool or a kept one, or a new
//! one with the client's authentication relayed, and the protocol state
//! set up for what it got.

use std::sync::Arc;

use bytes::BytesMut;
use tracing::{debug, info, warn};

use super::{handshake, life::Start, pool_login, pooled, reuse};
use crate::{
    cancel::Pid,
    config::PoolMode,
    net::{Pair, Stream},
    pool::Kept,
    pooling::{Grant, Greeting, Pooled},
    protocol::{Protocol, ServerStatements},
    shared::Shared,
    stats::{Counters, SessionState},
    timers::timeout,
    wire::{
        backend,
        startup::StartupMessage,
        write::{self, Severity},
    },
};

/// How the ready session goes on.
pub(super) enum Ready {
    /// Over its streams, with their leftover read buffers.
    Relay(Pair, BytesMut, BytesMut),
    /// A pooled session greeted without a server connection: it waits for
    /// its client's first bytes, then for a connection (what the client
    /// sent past its password, if anything, is read already).
    Waiting(std::net::TcpStream, BytesMut),
}

/// A login that gets no server connection: the client is told why
/// (FATAL `code`), within `limits.client_write_timeout`, and the session is
/// closed.
async fn refuse(
    client: Stream,
    shared: &Shared,
    info: &Arc<crate::stats::SessionInfo>,
    code: &str,
    why: &str,
) {
    warn!("{why}");
    let mut c = client;
    let msg = write::error(Severity::Fatal, code, why);
    let limit = shared.config().limits.client_write_timeout;
    let write = tokio::io::AsyncWriteExt::write_all(&mut c, &msg);
    let _ = timeout(limit, write).await;
    Counters::add(&info.counters.errors, 1);
    shared.stats.close_session(info, Default::default());
}

/// Connects upstream and relays authentication. `None` when the upstream
/// could not be reached (the session is closed then); a `Ready` when the
/// client may now send queries.
pub(super) async fn connect_and_authenticate(
    client: Stream,
    start: Start,
    shared: &Arc<Shared>,
) -> Option<(Box<Protocol>, Option<Ready>, Option<Pooled>)> {
    let Start {
        startup_raw,
        params,
        peer,
        handshake_rts,
        mut deadline,
        ..
    } = start;
    let p = |k| StartupMessage::param(&params, k).unwrap_or("");
    let (user, database) = StartupMessage::user_and_database(&params);
    let info = shared
        .stats
        .open_session(Some(peer), &database, &user, p("application_name"));
    Counters::add(&info.counters.handshake_round_trips, handshake_rts);
    Counters::add(&info.counters.bytes_from_client, startup_raw.len() as u64);
    let client_tls = client.is_tls();
    let limit = shared.config().limits.startup_timeout;
    // Transaction pooling, for plain TCP both ways (a TLS client's stream
    // can't wait between transactions here yet) and never replication.
    let pooling = shared.config().pool.mode == PoolMode::Transaction
        && shared.upstream_tls.is_none()
        && !client_tls
        && StartupMessage::param(&params, "replication").is_none();
    // A user of `[pool] users`, or any other but auth_user's when it is
    // set: its server connections are opened here, with its credential,
    // so the client proves it knows the password first, before it takes
    // one. Others' logins are the server's to check (trust).
    let config = shared.config();
    let check = pool_login::Check::of(&config.pool, &user).filter(|_| pooling);
    // A pool opened with a credential is for logins onetrip checked (a
    // reload may have stopped naming the user): others are relayed to
    // the server, in session mode.
    let pooling = pooling && (check.is_some() || !shared.pools.has_credential(&startup_raw));
    // A pooled client's backend is other clients' too: its key names none.
    let key_pid = match pooling {
        true => Pid::MadeUp,
        false => Pid::Backend,
    };
    let mut pool = None;
    let mut grant = None;
    let mut client = client;
    let mut unread = BytesMut::new();
    let mut credential = None;
    if let Some(how) = check {
        let limit = config.limits.client_write_timeout;
        let mut c = crate::auth::client::Client::new(client, limit);
        let checking = pool_login::check(&mut c, shared, &config, &database, &user, how);
        let checked = deadline.bound(checking).await;
        let (stream, rest) = c.into_parts();
        match checked {
            Ok(Ok(c)) => {
                (client, unread) = (stream, rest);
                credential = Some(Arc::new(c));
            }
            // psql hangs up at the request, to ask its user for the password.
            Ok(Err(crate::auth::AuthError::Io(e))) => {
                debug!("login ended during authentication: {e}");
                shared.stats.close_session(&info, Default::default());
                return None;
            }
            Ok(Err(e)) => {
                refuse(stream, shared, &info, e.sqlstate(), &e.to_string()).await;
                return None;
            }
            Err(_) => {
                let why = format!("authentication not completed within {limit:?}");
                refuse(stream, shared, &info, "08006", &why).await;
                return None;
            }
        }
    }
    if pooling {
        let p = shared.pools.pool(&startup_raw);
        if let Some(c) = &credential {
            p.use_credential(c.clone());
        }
        if let Some(greeting) = p.greeting() {
            let pooled = Pooled::waiting(p, startup_raw.clone(), shared.cancel.clone());
            return greet_alone(client, unread, greeting, pooled, shared, info).await;
        }
        // The pool's first logins take their connection from the pool, so
        // its size bounds them as well, and learn its greeting.
        let up = &shared.config().upstream;
        let wait = shared.config().pool.query_wait_timeout;
        match p
            .acquire(wait, up.reuse_idle_timeout, up.reuse_lifetime)
            .await
        {
            Ok(g) => grant = Some(g),
            Err(e) => {
                refuse(client, shared, &info, "08P01", &e.to_string()).await;
                return None;
            }
        }
        pool = Some(p);
        // The wait is the pool's; the handshake gets its own time.
        deadline = crate::timers::sleep_until(crate::timers::after(limit));
    }
    let reuse = shared.config().upstream.reuse && shared.upstream_tls.is_none() && !pooling;
    let kept = match reuse {
        true => {
            let max_age = shared.config().upstream.reuse_idle_timeout;
            shared.reuse.take_or_wait(&startup_raw, max_age).await
        }
        false => None,
    };
    // The named statements the connection holds, of the clients before.
    let mut statements = ServerStatements::default();
    let (kept, slot) = match grant {
        // Another client's settings are in it: a new connection instead.
        Some(Grant::Idle(i)) if !i.sets.is_empty() => (None, Some(i.slot)),
        Some(Grant::Idle(i)) => {
            statements = i.statements;
            let kept = Kept {
                tcp: i.tcp,
                params: i.params,
                key: i.key,
                settings: i.settings,
                opened: i.opened,
                since: i.since,
            };
            (Some(kept), Some(i.slot))
        }
        Some(Grant::Open(slot)) => (kept, Some(slot)),
        None => (kept, None),
    };
    // The client is in already: the server hears onetrip's password, not
    // the client's answers.
    let kept = match (kept, &credential) {
        // (`credential` is only set when pooling, and `pool` is then.)
        (None, Some(_)) => match pooled::open(shared, pool.as_deref()?).await {
            Ok(o) => match o.tcp.into_std() {
                Ok(tcp) => {
                    let _ = tcp.set_nodelay(true);
                    let now = std::time::Instant::now();
                    Some(Kept {
                        tcp,
                        params: o.params,
                        key: o.key,
                        settings: None,
                        opened: now,
                        since: now,
                    })
                }
                Err(e) => {
                    refuse(client, shared, &info, "08006", &e.to_string()).await;
                    return None;
                }
            },
            Err(e) => {
                refuse(client, shared, &info, "08006", &e.to_string()).await;
                return None;
            }
        },
        (kept, _) => kept,
    };
    let startup_for_pool = startup_raw.clone();
    let mut proto = Box::new(Protocol::new(shared.services(), info.clone()));
    proto.server_holds(statements);
    let limit = shared.config().limits.startup_timeout;
    let timed_out = || handshake::HandshakeEnd::Timeout(limit);
    // A connection opened for this login: its greeting is its pool's.
    let relayed = kept.is_none();
    let authed = if let Some(kept) = kept {
        let greet = reuse::adopt(kept, client, shared, &info, key_pid);
        let greeted = deadline.bound(greet).await;
        Counters::add(&info.counters.reused_upstreams, 1);
        greeted
            .unwrap_or_else(|_| Err(timed_out()))
            .map(|(io, mut a)| {
                // What the client sent past its password, if anything.
                if !unread.is_empty() {
                    a.cin = unread;
                }
                (io, a)
            })
    } else {
        let upstream = match handshake::connect_upstream(shared).await {
            Ok(u) => u,
            Err(e) => {
                refuse(client, shared, &info, "08006", &e.to_string()).await;
                return None;
            }
        };
        let mut io = Pair { client, upstream };
        let auth = handshake::relay_auth(&mut io, startup_raw, shared, &info, client_tls, key_pid);
        let authed = deadline.bound(auth).await;
        authed.unwrap_or_else(|_| Err(timed_out())).map(|a| (io, a))
    };
    match authed {
        Ok((io, a)) => {
            proto.on_server_params(&a.params);
            if let Some(settings) = a.settings {
                proto.settings = settings;
            }
            if let Some((pid, _)) = a.key.as_deref().and_then(backend::backend_key) {
                info.upstream_pid
                    .store(pid as u64, std::sync::atomic::Ordering::Relaxed);
            }
            proto.upstream_key = a.key;
            proto.client_key = a.client_key;
            proto.upstream_opened = a.opened;
            // A replication connection may hold what DISCARD ALL leaves
            // alone (a temporary replication slot).
            proto.keep_upstream = reuse
                && a.plain_trust
                && !io.upstream.is_tls()
                && StartupMessage::param(&params, "replication").is_none();
            let pooled = match (pool, slot) {
                (Some(pool), Some(slot)) if a.plain_trust && !io.upstream.is_tls() => Some(
                    Pooled::new(pool, slot, startup_for_pool, shared.cancel.clone()),
                ),
                (Some(_), _) => {
                    info!(
                        "session mode: the upstream asked for a password (a user not in [pool] users, and no [pool] auth_user)"
                    );
                    None
                }
                _ => None,
            };
            if let Some(p) = &pooled {
                if relayed {
                    p.pool.greeted(&a.params, proto.upstream_key.as_ref());
                }
                proto.pooled = true;
                proto.keep_upstream = false;
                proto.count_pins_in(p.pool.pinned.clone());
                info.pooled
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if proto.keep_upstream || proto.pooled {
                proto.server_params = a.params;
            }
            // Counted under its (database, user) only now: names sent by
            // clients that never got in make no rows.
            shared.stats.admit(&info);
            info.set_state(SessionState::Idle);
            debug!(database = %database, user = %user, "session ready");
            Some((proto, Some(Ready::Relay(io, a.cin, a.uin)), pooled))
        }
        Err(e) => {
            info!("{e}");
            Some((proto, None, None))
        }
    }
}

/// A pooled login answered here, with no server connection: the pool's
/// greeting, as a new connection of the pool gave it, and a cancel key
/// that cancels nothing until the session takes a connection.
async fn greet_alone(
    client: Stream,
    unread: BytesMut,
    greeting: Greeting,
    pooled: Pooled,
    shared: &Shared,
    info: Arc<crate::stats::SessionInfo>,
) -> Option<(Box<Protocol>, Option<Ready>, Option<Pooled>)> {
    let mut proto = Box::new(Protocol::new(shared.services(), info.clone()));
    let Stream::Plain(mut tcp) = client else {
        // Pooling is for plain clients only.
        return Some((proto, None, None));
    };
    let registered = handshake::KeyGuard::issue(shared, Some(&greeting.key), Pid::MadeUp);
    if let Some(key) = registered.key() {
        // Issued pointing at the greeting's backend, another client's now.
        shared.cancel.detach(key);
    }
    let hello = crate::pool::greeting(&greeting.params, registered.message().as_deref());
    let limit = shared.config().limits.client_write_timeout;
    let written = timeout(limit, tokio::io::AsyncWriteExt::write_all(&mut tcp, &hello)).await;
    if !matches!(written, Ok(Ok(()))) {
        debug!("login ended before its greeting was written");
        return Some((proto, None, None));
    }
    Counters::add(&info.counters.bytes_to_client, hello.len() as u64);
    let tcp = match tcp.into_std() {
        Ok(tcp) => tcp,
        Err(e) => {
            warn!("session closed: its client socket could not wait: {e}");
            return Some((proto, None, None));
        }
    };
    proto.client_key = registered.keep();
    proto.on_server_params(&greeting.params);
    proto.upstream_opened = std::time::Instant::now();
    proto.pooled = true;
    proto.count_pins_in(pooled.pool.pinned.clone());
    info.pooled
        .store(true, std::sync::atomic::Ordering::Relaxed);
    shared.stats.admit(&info);
    info.set_state(SessionState::Idle);
    debug!("pooled session greeted without a server connection");
    Some((proto, Some(Ready::Waiting(tcp, unread)), Some(pooled)))
}
