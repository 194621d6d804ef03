//! A session after startup: connecting upstream and authenticating, then
//! relaying until the end, then the last words and keeping the upstream
//! connection. One task owns the session's client and upstream halves; it
//! relays through the worker's own epoll (`fast`) or through the runtime
//! (`runtime`), both with bounded buffers.
//!
//! Reads from one side stop while the other side's write queue is over
//! `[limits] buffer_bytes`, so a slow client holds back the upstream instead
//! of growing the proxy's memory. All four directions (read client, read
//! upstream, write client, write upstream) are watched together, so a client
//! that pipelines without reading can't deadlock against a server that
//! writes without reading.

use std::{
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use tracing::{Instrument, Span, debug, info, warn};

use super::{
    handshake,
    pooled::{self, Next},
    reuse,
};
use crate::{
    cancel::Pid,
    config::PoolMode,
    net::{Pair, Stream},
    pool::Kept,
    pooling::{Grant, Pooled},
    protocol::{Flow, Protocol},
    relay::{
        Bufs, Closer, End, Outcome,
        epoll::{self as fast},
        task::relay,
    },
    shared::Shared,
    stats::{Counters, Relay, SessionState},
    timers::timeout,
    wire::queue::WriteQueue,
    wire::{
        backend,
        startup::StartupMessage,
        write::{self, Severity},
    },
    worker::seats::Seat,
};

/// What the startup phase hands on to the relay.
pub struct Start {
    pub startup_raw: Bytes,
    pub params: Vec<(String, String)>,
    pub peer: SocketAddr,
    pub handshake_rts: u64,
    /// Ends when authentication must be over (`limits.startup_timeout`
    /// after the connection was accepted).
    pub deadline: crate::timers::Sleep,
}

pub async fn run(client: Stream, start: Start, shared: &Arc<Shared>, span: Span) {
    let started = Instant::now();
    let startup_raw = start.startup_raw.clone();
    let opened = connect_and_authenticate(client, start, shared)
        .instrument(span.clone())
        .await;
    let Some((proto, ready, pooled)) = opened else {
        return;
    };
    let info = proto.info.clone();
    let proto = match ready {
        Some((io, cin, uin)) => {
            let mut proto = proto;
            let mut bufs = Bufs::new(cin, uin);
            proto.start(&mut bufs.to_up);
            // A TLS stream's state lives in this task: it stays here.
            let may_move = !io.client.is_tls() && !io.upstream.is_tls();
            // Sessions start on the worker that accepted them, the first.
            let seat = Seat::take(shared.workers.clone(), 0, may_move);
            let s = Session {
                startup_raw,
                shared: shared.clone(),
                span: span.clone(),
                pooled,
            };
            relay_to_the_end(Streams::Runtime(io), proto, bufs, seat, s).await
        }
        None => Some(proto),
    };
    async {
        info.set_state(SessionState::Closing);
        let mut statements = Default::default();
        if let Some(mut proto) = proto {
            forget_key(&mut proto, shared);
            proto.uncount_pin();
            proto.cypher.close(&proto.services);
            statements = proto.statements.take().await;
        }
        super::log_summary(&info, started);
        shared.stats.close_session(&info, statements);
    }
    .instrument(span)
    .await
}

/// What a session carries from worker to worker besides its streams and
/// protocol state.
struct Session {
    startup_raw: Bytes,
    shared: Arc<Shared>,
    span: Span,
    /// Transaction pooling: the session's pool and the slot of the
    /// connection it holds (dropped last, after the connection closed).
    pooled: Option<Pooled>,
}

type Lived = Pin<Box<dyn Future<Output = Option<Box<Protocol>>> + Send>>;

/// A session's sockets as relaying starts: registered with this thread's
/// runtime, or with nothing yet (a session that moved here).
enum Streams {
    Runtime(Pair),
    Std(std::net::TcpStream, std::net::TcpStream),
}

impl Streams {
    /// The sockets for this thread's runtime.
    fn registered(self) -> std::io::Result<Pair> {
        Ok(match self {
            Streams::Runtime(io) => io,
            Streams::Std(c, u) => Pair {
                client: Stream::Plain(tokio::net::TcpStream::from_std(c)?),
                upstream: Stream::Plain(tokio::net::TcpStream::from_std(u)?),
            },
        })
    }

    /// Takes plain sockets out of the worker's epoll, to stay open
    /// elsewhere.
    fn release(&self) {
        if let Streams::Std(c, u) = self {
            fast::release(c);
            fast::release(u);
        }
    }

    /// Plain sockets taken out of the runtime, or the TLS streams as they
    /// are.
    fn unregistered(
        self,
    ) -> Result<std::io::Result<(std::net::TcpStream, std::net::TcpStream)>, Pair> {
        match self {
            Streams::Std(c, u) => Ok(Ok((c, u))),
            Streams::Runtime(Pair {
                client: Stream::Plain(c),
                upstream: Stream::Plain(u),
            }) => Ok(c.into_std().and_then(|c| Ok((c, u.into_std()?)))),
            Streams::Runtime(io) => Err(io),
        }
    }
}

/// Where relaying got to.
enum Relayed {
    /// Over, with what was left to write each way (plain sockets from the
    /// worker's own relay are still in the worker's epoll).
    Done(Streams, Outcome),
    /// To go on on worker N.
    Move(usize, Streams, Bufs),
    /// The sockets could not be moved between reactors.
    Lost(String),
    /// A pooled session without a connection: it must wait for one (or
    /// for its client), or `end` (why the worker's relay handed it over).
    Released {
        client: std::net::TcpStream,
        bufs: Bufs,
        end: Option<End>,
        /// The client's place in the worker's epoll, where it still is.
        spot: Option<fast::Spot>,
    },
}

/// Relays until the session ends, then sends each side its last words and
/// keeps the upstream connection for the next client if it may. Returns
/// the protocol state for the session's summary; `None` when it was lost
/// (the session was stopped while on another worker).
fn relay_to_the_end(
    streams: Streams,
    proto: Box<Protocol>,
    bufs: Bufs,
    seat: Seat,
    s: Session,
) -> Lived {
    // The two ways of relaying are boxed: a future holds the state of all
    // its awaits at once, and is copied whole each time it is boxed.
    Box::pin(async move {
        let (mut streams, mut proto, mut bufs, mut seat, mut s) = (streams, proto, bufs, seat, s);
        let id = proto.info.id;
        let idle_limit = proto.services.config.limits.client_idle_timeout;
        let mut forced = Closer::new(s.shared.closer(id), proto.info.clone(), idle_limit);
        // The client's place in the worker's epoll, kept while the session
        // only waited for a connection.
        let mut away: Option<fast::Spot> = None;
        // Each turn relays over one server connection; a pooled session
        // turns again after each release point, on the connection it takes.
        let relayed = loop {
            let relayed = if fast::may_relay(&proto) {
                match streams.unregistered() {
                    Ok(Ok((c, u))) => {
                        let mut pooled = s.pooled.take();
                        let fast = relay_fast(
                            (c, u, away.take()),
                            proto,
                            bufs,
                            seat,
                            &mut pooled,
                            &mut forced,
                            &s,
                        );
                        let relayed = Box::pin(fast).await;
                        s.pooled = pooled;
                        relayed
                    }
                    Ok(Err(e)) => {
                        let why = format!("it could not leave the runtime: {e}");
                        Some((Relayed::Lost(why), proto, seat))
                    }
                    Err(io) => {
                        let io = Streams::Runtime(io);
                        Some(Box::pin(relay_runtime(io, proto, bufs, seat, &mut forced, &s)).await)
                    }
                }
            } else {
                if let (Some(spot), Streams::Std(c, _)) = (away.take(), &streams) {
                    spot.leave(c);
                }
                Some(Box::pin(relay_runtime(streams, proto, bufs, seat, &mut forced, &s)).await)
            };
            // The client, the connection if the session still has it, why
            // the relay stopped without one.
            let (sockets, b, stopped) = match relayed {
                Some((Relayed::Done(st, out), p, se)) if matches!(out.end, End::Release) => {
                    (proto, seat) = (p, se);
                    (
                        released_sockets(st).map(|(c, u)| (c, Some(u))),
                        out.bufs,
                        None,
                    )
                }
                Some((
                    Relayed::Released {
                        client,
                        bufs,
                        end,
                        spot,
                    },
                    p,
                    se,
                )) => {
                    (proto, seat) = (p, se);
                    // Read ahead and waiting only for a connection: the
                    // client stays in the worker's epoll meanwhile.
                    let waits_for_a_connection =
                        !bufs.cin.is_empty() && matches!(end, None | Some(End::Release));
                    match (spot, waits_for_a_connection) {
                        (Some(spot), true) => away = Some(spot),
                        (Some(spot), false) => spot.leave(&client),
                        (None, _) => fast::release(&client),
                    }
                    (Ok((client, None)), bufs, end)
                }
                other => break other,
            };
            let next = match (s.pooled.as_mut(), sockets) {
                (Some(pooled), Ok((c, u))) => {
                    let buffered = !b.cin.is_empty();
                    let shared = &s.shared;
                    let between = pooled::between(
                        c,
                        u,
                        stopped,
                        buffered,
                        &mut proto,
                        pooled,
                        shared,
                        &mut forced,
                    );
                    between.instrument(s.span.clone()).await
                }
                (_, Err(why)) => {
                    s.span.in_scope(|| warn!("session closed: {why}"));
                    Next::End
                }
                // Never released without a pool.
                (None, Ok(_)) => Next::End,
            };
            match next {
                Next::Go(c, u) => {
                    streams = Streams::Std(c, u);
                    bufs = b;
                }
                Next::End => {
                    drop(away);
                    s.shared.forget_closer(id);
                    drop(seat);
                    return Some(proto);
                }
            }
        };
        s.shared.forget_closer(id);
        let (relayed, mut proto, seat) = relayed?;
        let upstream = match relayed {
            Relayed::Done(streams, end) => {
                let mut bufs = end.bufs;
                let keep = s
                    .span
                    .in_scope(|| farewells(&proto, end.end, &mut bufs, &s.shared));
                let limit = proto.services.config.limits.client_write_timeout;
                match write_farewells(streams, &mut bufs, keep, limit).await {
                    Ok(upstream) => upstream,
                    Err(why) => {
                        s.span.in_scope(|| warn!("session closed: {why}"));
                        None
                    }
                }
            }
            Relayed::Move(j, streams, bufs) => {
                return move_to(j, streams, proto, bufs, seat, s).await;
            }
            Relayed::Lost(why) => {
                s.span.in_scope(|| warn!("session closed: {why}"));
                Counters::add(&proto.info.counters.errors, 1);
                return Some(proto);
            }
            // Taken by the loop above: the session just ends.
            Relayed::Released { .. } => return Some(proto),
        };
        drop(seat);
        let shared = &s.shared;
        // Forgotten before the connection is kept: from then on the
        // backend may run another client's queries.
        let key = forget_key(&mut proto, shared);
        let upstream = match (upstream, s.pooled.as_mut()) {
            // A pooled session that ended cleanly: its connection stays in
            // the pool, as after any transaction.
            (Some(Stream::Plain(t)), Some(pooled)) => {
                match t
                    .into_std()
                    .and_then(|t| t.set_nonblocking(true).map(|()| t))
                {
                    Ok(tcp) => {
                        proto.upstream_key = key;
                        pooled.give_back(tcp, &mut proto);
                    }
                    Err(e) => debug!("pooled connection not given back: {e}"),
                }
                return Some(proto);
            }
            (u, _) => u,
        };
        if let Some(upstream) = upstream {
            let leaving = reuse::Leaving {
                upstream,
                startup: s.startup_raw.clone(),
                params: std::mem::take(&mut proto.server_params),
                key,
                opened: proto.upstream_opened,
                settings: proto.settings.after_reset(),
                owed: proto.flight.readies(),
            };
            match reuse::park(leaving, shared).await {
                Ok(()) => debug!("upstream connection kept for the next client"),
                Err(e) => debug!("upstream connection not kept: {e}"),
            }
        }
        Some(proto)
    })
}

/// The plain sockets of a session that released its connection, out of
/// the worker's epoll or the runtime.
fn released_sockets(
    streams: Streams,
) -> Result<(std::net::TcpStream, std::net::TcpStream), String> {
    streams.release();
    match streams.unregistered() {
        Ok(Ok(pair)) => Ok(pair),
        Ok(Err(e)) => Err(format!("its sockets could not leave the runtime: {e}")),
        Err(_) => Err("a TLS session was released (never pooled)".into()),
    }
}

/// Relays through this worker's own epoll (`fast`) until relaying stops;
/// the rest of the way through the runtime when the session needs it.
/// `None` when the session was lost (never: a worker's tasks stay on it).
#[allow(clippy::too_many_arguments)]
async fn relay_fast(
    (client, upstream, away): (std::net::TcpStream, std::net::TcpStream, Option<fast::Spot>),
    proto: Box<Protocol>,
    bufs: Bufs,
    seat: Seat,
    pooled: &mut Option<Pooled>,
    forced: &mut Closer,
    s: &Session,
) -> Option<(Relayed, Box<Protocol>, Seat)> {
    let parts = fast::Parts {
        client,
        upstream: Some(upstream),
        proto,
        bufs,
        seat,
        pooled: pooled.take(),
    };
    let info = parts.proto.info.clone();
    let (parts, stop, spot) = match fast::enter(parts, away, &s.span) {
        Ok(mut relaying) => {
            info.set_relay(Relay::Epoll);
            let closed = tokio::select! {
                biased;
                end = &mut *forced => Some(end),
                () = &mut relaying => None,
            };
            match (relaying.take()?, closed) {
                // Idle, but relaying ended meanwhile: as it ended.
                ((parts, Some(stop), spot), Some(End::IdleTimeout)) => (parts, Some(stop), spot),
                ((parts, _, spot), Some(end)) => (parts, Some(fast::Stop::End(end)), spot),
                ((parts, stop, spot), None) => (parts, stop, spot),
            }
        }
        Err(refused) => {
            let (parts, e) = *refused;
            s.span
                .in_scope(|| debug!("relaying through the runtime: {e}"));
            (parts, Some(fast::Stop::Fallback), None)
        }
    };
    let fast::Parts {
        client,
        upstream,
        proto,
        bufs,
        seat,
        pooled: held,
    } = parts;
    *pooled = held;
    let Some(upstream) = upstream else {
        // Gave its connection back and must wait for another.
        let end = match stop {
            Some(fast::Stop::End(end)) => Some(end),
            Some(fast::Stop::Fallback) | None => None,
        };
        let released = Relayed::Released {
            client,
            bufs,
            end,
            spot,
        };
        return Some((released, proto, seat));
    };
    let streams = Streams::Std(client, upstream);
    Some(match stop {
        Some(fast::Stop::End(End::Move(j))) => {
            streams.release();
            (Relayed::Move(j, streams, bufs), proto, seat)
        }
        Some(fast::Stop::End(end)) => (Relayed::Done(streams, Outcome { end, bufs }), proto, seat),
        Some(fast::Stop::Fallback) | None => {
            streams.release();
            Box::pin(relay_runtime(streams, proto, bufs, seat, forced, s)).await
        }
    })
}

fn back_to_runtime_failed(e: std::io::Error) -> String {
    format!("it could not return to the runtime: {e}")
}

/// Relays through this thread's runtime.
async fn relay_runtime(
    streams: Streams,
    mut proto: Box<Protocol>,
    bufs: Bufs,
    mut seat: Seat,
    forced: &mut Closer,
    s: &Session,
) -> (Relayed, Box<Protocol>, Seat) {
    let mut io = match streams.registered() {
        Ok(io) => io,
        Err(e) => return (Relayed::Lost(back_to_runtime_failed(e)), proto, seat),
    };
    proto.info.set_relay(Relay::Runtime);
    let tls = io.client.is_tls() || io.upstream.is_tls();
    let relayed = relay(&mut io, &mut proto, bufs, &mut seat, forced, &s.shared);
    // Entering the span on each wake-up would cost about 4% of the
    // instructions per forwarded transaction. The loop logs nothing
    // itself (its end is logged in the span, below), so it runs outside
    // the span unless a library may log from inside it: rustls (TLS
    // alerts), or anything at debug level.
    let outcome = if tls || tracing::enabled!(tracing::Level::DEBUG) {
        relayed.instrument(s.span.clone()).await
    } else {
        relayed.await
    };
    let relayed = match outcome.end {
        End::Move(j) => Relayed::Move(j, Streams::Runtime(io), outcome.bufs),
        _ => Relayed::Done(Streams::Runtime(io), outcome),
    };
    (relayed, proto, seat)
}

/// Hands the session to worker `j`: both sockets leave this thread's
/// reactor for that one's, and the relay goes on there. This task waits
/// for it, and stops it if stopped itself.
async fn move_to(
    j: usize,
    streams: Streams,
    proto: Box<Protocol>,
    bufs: Bufs,
    seat: Seat,
    s: Session,
) -> Option<Box<Protocol>> {
    let handle = seat.workers().handle(j).cloned();
    let (c, u, handle) = match (streams.unregistered(), handle) {
        (Ok(Ok((c, u))), Some(h)) => (c, u, h),
        (Ok(Err(e)), _) => {
            s.span
                .in_scope(|| warn!("session closed: it could not leave its worker: {e}"));
            Counters::add(&proto.info.counters.errors, 1);
            return Some(proto);
        }
        (Ok(Ok((c, u))), None) => {
            return relay_to_the_end(Streams::Std(c, u), proto, bufs, seat.stay(), s).await;
        }
        // Never asked of TLS sessions: relay on here.
        (Err(io), _) => {
            return relay_to_the_end(Streams::Runtime(io), proto, bufs, seat.stay(), s).await;
        }
    };
    let seat = seat.moved(j);
    s.span.in_scope(|| debug!(worker = j, "session moved"));
    let moved = handle.spawn(relay_to_the_end(Streams::Std(c, u), proto, bufs, seat, s));
    AbortOnDrop(moved).await
}

/// A task on another worker, stopped when the task that waits for it is.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<Option<T>> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        Pin::new(&mut self.0).poll(cx).map(|r| r.ok().flatten())
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Stops forwarding the client's cancels; returns its backend's
/// BackendKeyData message.
fn forget_key(proto: &mut Protocol, shared: &Shared) -> Option<Bytes> {
    if let Some(key) = proto.client_key.take() {
        shared.cancel.forget(&key);
    }
    proto.upstream_key.take()
}

/// The ready session's streams and leftover read buffers.
type Ready = (Pair, BytesMut, BytesMut);

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
async fn connect_and_authenticate(
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
    // A pooled client's backend is other clients' too: its key names none.
    let key_pid = match pooling {
        true => Pid::MadeUp,
        false => Pid::Backend,
    };
    let mut pool = None;
    let mut grant = None;
    if pooling {
        // Logins take their connection from the pool too, so its size
        // bounds them as well.
        let p = shared.pools.pool(&startup_raw);
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
    let (kept, slot) = match grant {
        // Another client's settings are in it: a new connection instead.
        Some(Grant::Idle(i)) if !i.sets.is_empty() => (None, Some(i.slot)),
        Some(Grant::Idle(i)) => {
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
    let startup_for_pool = startup_raw.clone();
    let mut proto = Box::new(Protocol::new(shared.services(), info.clone()));
    let limit = shared.config().limits.startup_timeout;
    let timed_out = || handshake::HandshakeEnd::Timeout(limit);
    let authed = if let Some(kept) = kept {
        let greet = reuse::adopt(kept, client, shared, &info, key_pid);
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
                        "session mode: the upstream asked for a password (only trust connections are pooled)"
                    );
                    None
                }
                _ => None,
            };
            if let Some(p) = &pooled {
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
            Some((proto, Some((io, a.cin, a.uin)), pooled))
        }
        Err(e) => {
            info!("{e}");
            Some((proto, None, None))
        }
    }
}

/// Logs how the session ended and queues each side's last words; what
/// was queued for a side that is gone is dropped. True when the upstream
/// connection is to be kept for the next client instead.
fn farewells(proto: &Protocol, end: End, bufs: &mut Bufs, shared: &Shared) -> bool {
    let c = &proto.info;
    let gone = WriteQueue::default;
    match end {
        End::ClientClosed => {
            bufs.to_client = gone();
            let clean = match proto.pooled {
                true => proto.releasable(),
                false => proto.keep_upstream && proto.quiet(),
            };
            if clean && bufs.uin.is_empty() && !bufs.to_up.wants_write() {
                return true;
            }
            if proto.flow != Flow::Terminated || proto.terminate_withheld {
                // Tell the server we are done, as the client would have.
                bufs.to_up.push(Bytes::from_static(&write::TERMINATE));
            }
        }
        End::UpstreamClosed(error) => {
            bufs.to_up = gone();
            if let Some(e) = error {
                warn!("{e}");
            }
            let addr = shared.upstream_addr();
            warn!(upstream = %addr, "upstream closed the connection");
            // After the server's own FATAL (57P01 and the like), the client
            // hears nothing more, as from the server itself.
            if !proto.fatal_relayed {
                let text = format!("upstream {addr} closed the connection unexpectedly");
                bufs.to_client
                    .push(write::error(Severity::Fatal, "08006", &text));
                Counters::add(&c.counters.errors, 1);
            }
        }
        End::Error(e) => debug!("session ended: {e}"),
        // Never finished: the session goes on elsewhere, or over another
        // connection of its pool.
        End::Move(_) | End::Release => {}
        End::IdleTimeout => {
            info!("client idle past limits.client_idle_timeout: closed");
            // PostgreSQL's own, from its idle_session_timeout.
            let text = "terminating connection due to idle-session timeout";
            bufs.to_client
                .push(write::error(Severity::Fatal, "57P05", text));
            // Idle and quiet: its upstream may serve the next client.
            if proto.keep_upstream
                && bufs.uin.is_empty()
                && !bufs.to_up.wants_write()
                && proto.quiet()
            {
                return true;
            }
            bufs.to_up.push(Bytes::from_static(&write::TERMINATE));
        }
        End::Shutdown => {
            bufs.to_client.push(write::error(
                Severity::Fatal,
                "57P01",
                "terminating connection due to administrator command (onetrip is shutting down)",
            ));
            bufs.to_up.push(Bytes::from_static(&write::TERMINATE));
        }
    }
    false
}

/// Writes the last words, each side's within `limit`: a peer that has
/// stopped reading must not hold the session (and its upstream) forever.
/// Plain sockets from the worker's own relay get them straight, and nearly
/// always take them at once; only a socket that would block goes back to
/// the runtime to be waited for. Returns the upstream connection when it
/// is to be kept (and took its last words whole), with the runtime, which
/// resets it. The client is closed before that: it is gone already, and
/// sees its socket close now, not after the reset.
async fn write_farewells(
    streams: Streams,
    bufs: &mut Bufs,
    keep: bool,
    limit: Duration,
) -> Result<Option<Stream>, String> {
    let (client, upstream) = match streams {
        Streams::Runtime(mut io) => {
            let _ = timeout(limit, bufs.to_client.write_all(&mut io.client)).await;
            let up = timeout(limit, bufs.to_up.write_all(&mut io.upstream)).await;
            return Ok((keep && matches!(up, Ok(Ok(_)))).then_some(io.upstream));
        }
        Streams::Std(c, u) => (c, u),
    };
    let runtime = |s: std::net::TcpStream| {
        fast::release(&s);
        tokio::net::TcpStream::from_std(s)
            .map(Stream::Plain)
            .map_err(back_to_runtime_failed)
    };
    // A socket that closes now leaves the epoll by closing.
    if !matches!(bufs.to_client.write_to(&client), Ok(true) | Err(_)) {
        let mut c = runtime(client)?;
        let _ = timeout(limit, bufs.to_client.write_all(&mut c)).await;
    }
    let written = bufs.to_up.write_to(&upstream);
    if !keep && matches!(written, Ok(true) | Err(_)) {
        return Ok(None);
    }
    let mut u = runtime(upstream)?;
    let up = timeout(limit, bufs.to_up.write_all(&mut u)).await;
    Ok((keep && matches!(up, Ok(Ok(_)))).then_some(u))
}
