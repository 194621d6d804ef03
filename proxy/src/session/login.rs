//! A session's login: a connection from the pool or a kept one, or a new
//! one with the client's authentication relayed, and the protocol state
//! set up for what it got.

use std::sync::Arc;

use bytes::BytesMut;
use tracing::{debug, info};

use super::{
    handshake,
    pooled::{login as pooled_login, password as pool_login},
    reuse,
    start::{Ready, Start, refuse},
    streams::Streams,
};
use crate::{
    auth::Credential,
    cancel::Pid,
    config::PoolMode,
    net::{Pair, Stream},
    pooling::{Held, startup::ClientStartup},
    protocol::Protocol,
    shared::Shared,
    stats::{Counters, SessionState},
    timers::timeout,
    wire::{backend, startup::StartupMessage},
};

/// Logs a client in: pooled (`pooled_login`) when transaction pooling
/// takes it, else over a server connection of its own, kept or new, its
/// authentication relayed. `None` when the session is over already (its
/// client told why); a `Ready` when the client may now send queries.
pub(super) async fn connect_and_authenticate(
    client: Stream,
    start: Start,
    shared: &Arc<Shared>,
) -> Option<(Box<Protocol>, Option<Ready>, Option<Held>)> {
    let Start {
        startup_raw,
        params,
        peer,
        handshake_rts,
        deadline,
        ..
    } = start;
    let p = |k| StartupMessage::param(&params, k).unwrap_or("");
    let (user, database) = StartupMessage::user_and_database(&params);
    let info = shared
        .stats
        .open_session(Some(peer), &database, &user, p("application_name"));
    Counters::add(&info.counters.handshake_round_trips, handshake_rts);
    Counters::add(&info.counters.bytes_from_client, startup_raw.len() as u64);
    let mut deadline = deadline;
    let config = shared.config();
    // A user of `[pool] users`, or any other but auth_user's when it is
    // set: its server connections are opened here, with its credential,
    // so the client proves it knows the password first. Others' logins
    // are the server's to check (trust), and a pool opened with a checked
    // login's credential is not for them (a reload may have stopped
    // naming the user): they are relayed to the server, in session mode.
    let check = pool_login::Check::of(&config.pool, &user);
    let startup = pooled_startup(shared, &params)
        .filter(|_| check.is_some() || !shared.pools.had_credential(&database, &user));
    let client = match startup {
        None => client,
        Some(startup) => {
            let checked = match check {
                Some(how) => {
                    // Each way of logging in is boxed and made where it is
                    // awaited: this future stays small, and moving it (it is
                    // moved whole into its box) copies little.
                    let c = Box::pin(check_password(
                        client,
                        how,
                        (&database, &user),
                        &info,
                        shared,
                    ));
                    match deadline.bound(c).await {
                        Ok(Some(c)) => c,
                        Ok(None) => return None,
                        Err(_) => return None,
                    }
                }
                None => Admitted::Pooled(client, BytesMut::new(), None),
            };
            match checked {
                Admitted::Relayed(client) => client,
                Admitted::Pooled(client, unread, credential) => {
                    let login = Box::pin(pooled_login::login(
                        client,
                        unread,
                        (startup, credential),
                        (&database, &user),
                        info.clone(),
                        shared,
                    ));
                    match login.await {
                        pooled_login::Outcome::Done(done) => return done,
                        pooled_login::Outcome::SessionMode(client) => client,
                    }
                }
            }
        }
    };
    Box::pin(session_login(
        client,
        startup_raw,
        &params,
        info,
        deadline,
        shared,
    ))
    .await
}

/// The startup parameters of a login transaction pooling takes: parameters
/// it can carry from connection to connection.
fn pooled_startup(shared: &Shared, params: &[(String, String)]) -> Option<ClientStartup> {
    if shared.config().pool.mode != PoolMode::Transaction {
        return None;
    }
    match ClientStartup::of(params) {
        Ok(s) => Some(s),
        Err(why) => {
            info!("session mode: {why}");
            None
        }
    }
}

/// What a login onetrip checks goes on to.
enum Admitted {
    /// A pooled login: the client, what it sent past its password, and
    /// the credential its pool's server connections are opened with
    /// (`None`: the server trusts the user).
    Pooled(Stream, BytesMut, Option<Arc<Credential>>),
    /// Its authentication relayed to the server, in session mode.
    Relayed(Stream),
}

/// onetrip checks the client's password itself (`pool_login`). `None`
/// when the client did not get in (it was told why).
async fn check_password(
    client: Stream,
    how: pool_login::Check<'_>,
    (database, user): (&str, &str),
    info: &Arc<crate::stats::SessionInfo>,
    shared: &Arc<Shared>,
) -> Option<Admitted> {
    let config = shared.config();
    let limit = config.limits.client_write_timeout;
    let mut c = crate::auth::client::Client::new(client, limit);
    let checked = pool_login::check(&mut c, shared, &config, database, user, how).await;
    let (stream, rest) = c.into_parts();
    match checked {
        Ok(pool_login::Checked::In(credential)) => {
            Some(Admitted::Pooled(stream, rest, Some(Arc::new(credential))))
        }
        Ok(pool_login::Checked::Trust) => Some(Admitted::Pooled(stream, rest, None)),
        Ok(pool_login::Checked::Relay) => Some(Admitted::Relayed(stream)),
        Err(crate::auth::AuthError::Refused(msg)) => {
            // The server's own refusal (no pg_hba.conf entry, say), as a
            // direct login gets it.
            info!(
                "login refused by the upstream: {}",
                backend::error_field(&msg, b'M').unwrap_or("error")
            );
            let mut c = stream;
            let write = tokio::io::AsyncWriteExt::write_all(&mut c, &msg);
            let _ = timeout(limit, write).await;
            Counters::add(&info.counters.errors, 1);
            shared.stats.close_session(info, Default::default());
            None
        }
        // psql hangs up at the request, to ask its user for the password.
        Err(crate::auth::AuthError::Io(e)) => {
            debug!("login ended during authentication: {e}");
            shared.stats.close_session(info, Default::default());
            None
        }
        Err(e) => {
            refuse(stream, shared, info, e.sqlstate(), &e.to_string()).await;
            None
        }
    }
}

/// A session-mode login: a kept connection (`[upstream] reuse`) or a new
/// one, the client's authentication relayed to the server.
async fn session_login(
    client: Stream,
    startup_raw: bytes::Bytes,
    params: &[(String, String)],
    info: Arc<crate::stats::SessionInfo>,
    mut deadline: crate::timers::Sleep,
    shared: &Arc<Shared>,
) -> Option<(Box<Protocol>, Option<Ready>, Option<Held>)> {
    let client_tls = client.is_tls();
    let reuse = shared.config().upstream.reuse && shared.upstream_tls.is_none();
    let kept = match reuse {
        true => {
            let max_age = shared.config().upstream.reuse_idle_timeout;
            shared.reuse.take_or_wait(&startup_raw, max_age).await
        }
        false => None,
    };
    let mut proto = Box::new(Protocol::new(shared.services(), info.clone()));
    let limit = shared.config().limits.startup_timeout;
    let timed_out = || handshake::HandshakeEnd::Timeout(limit);
    let authed = if let Some(kept) = kept {
        let greet = Box::pin(reuse::adopt(kept, client, shared, &info, Pid::Backend));
        let greeted = deadline.bound(greet).await;
        Counters::add(&info.counters.reused_upstreams, 1);
        greeted.unwrap_or_else(|_| Err(timed_out()))
    } else {
        let upstream = match handshake::connect_upstream(shared).await {
            Ok(u) => u,
            Err(e) => {
                refuse(client, shared, &info, "08006", &e.to_string()).await;
                return None;
            }
        };
        let mut io = Pair { client, upstream };
        let auth = Box::pin(handshake::relay_auth(
            &mut io,
            startup_raw,
            shared,
            &info,
            client_tls,
            Pid::Backend,
        ));
        let authed = deadline.bound(auth).await;
        authed
            .unwrap_or_else(|_| Err(timed_out()))
            .map(|a| (Streams::Runtime(io), a))
    };
    let (streams, a) = match authed {
        Ok(done) => done,
        Err(e) => {
            info!("{e}");
            return Some((proto, None, None));
        }
    };
    proto.client_key = a.client_key;
    // A replication connection may hold what DISCARD ALL leaves alone (a
    // temporary replication slot).
    proto.keep_upstream = reuse
        && a.plain_trust
        && !streams.is_tls()
        && StartupMessage::param(params, "replication").is_none();
    proto.logged_in(a.conn);
    // Counted under its (database, user) only now: names sent by clients
    // that never got in make no rows.
    shared.stats.admit(&info);
    info.set_state(SessionState::Idle);
    debug!("session ready");
    Some((proto, Some(Ready::Relay(streams, a.cin, a.uin)), None))
}
