//! A session after startup: its login (`login`), then relaying until the
//! end, then the last words (`farewell`) and keeping the upstream
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
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use bytes::{Bytes, BytesMut};
use tracing::{Instrument, Span, debug, warn};

use super::{
    farewell::{farewells, write_farewells},
    login::connect_and_authenticate,
    pooled::{self, Client, Next},
    reuse,
    start::{Ready, Start},
    streams::{Streams, back_to_runtime_failed, no_connection},
};
use crate::{
    net::{Pair, ServerSocket, Stream},
    pooling::Held,
    protocol::Protocol,
    relay::{
        Bufs, Closer, End, Outcome,
        epoll::{self as fast},
        give_back_room,
        replica::Detour,
        task::relay,
    },
    shared::Shared,
    stats::{Counters, Relay, SessionState},
    worker::seats::Seat,
};

/// A client's session from its login to its end. Not an async fn: the
/// login is boxed before the future is made (a future is as large as its
/// largest await, and the login's would stay with every idle session), so
/// the future keeps nothing of what the login was handed.
pub fn run<'a>(
    client: Stream,
    start: Start,
    shared: &'a Arc<Shared>,
    span: Span,
) -> impl Future<Output = ()> + Send + 'a {
    let startup_raw = start.startup_raw.clone();
    let worker = start.worker;
    let login = Box::pin(connect_and_authenticate(client, start, shared).instrument(span.clone()));
    run_on(login, startup_raw, worker, shared, span)
}

type Login<'a> =
    Pin<Box<dyn Future<Output = Option<(Box<Protocol>, Option<Ready>, Option<Held>)>> + Send + 'a>>;

async fn run_on(
    login: Login<'_>,
    startup_raw: Bytes,
    worker: usize,
    shared: &Arc<Shared>,
    span: Span,
) {
    let started = Instant::now();
    // What the login gives is handed on in a block of its own, so that
    // none of it stays in this future's state while the session relays.
    let (info, relaying) = {
        let Some((mut proto, ready, pooled)) = login.await else {
            return;
        };
        let info = proto.info.clone();
        // Made before the first statement: the floor counts every write.
        let detour = pooled.as_ref().and_then(|p| {
            let spare = p.pool.replicas.clone();
            Detour::pooled(&shared.replicas, &mut proto, &startup_raw, spare)
        });
        // A pooled session's startup packet served its login and its
        // detour; with no replicas (a restart-only setting) nothing reads it
        // again, and an idle client need not hold it.
        let startup_raw = match pooled.is_some() && shared.replicas.is_empty() {
            // Dropped here, or it would stay in this future's parameter.
            true => {
                drop(startup_raw);
                Bytes::new()
            }
            false => startup_raw,
        };
        let session = Session {
            startup_raw,
            shared: shared.clone(),
            span: span.clone(),
            pooled,
            detour,
        };
        (info, relaying(proto, ready, session, worker))
    };
    let proto = match relaying {
        Ok(lived) => lived.await,
        Err(proto) => Some(proto),
    };
    // Boxed: held only at the end, its room would otherwise be every
    // session's.
    Box::pin(
        async move {
            info.set_state(SessionState::Closing);
            let mut statements = Default::default();
            if let Some(mut proto) = proto {
                forget_key(&mut proto, shared);
                proto.uncount_pin();
                proto.cypher.close(&proto.services);
                statements = proto.statements.take().await;
            }
            // With what the thread's pooled sessions set down between
            // transactions: this one's may be there, and the worker's next
            // look may not come.
            statements.extend(crate::protocol::take_resting_statements());
            super::log_summary(&info, started);
            shared.stats.close_session(&info, statements);
        }
        .instrument(span),
    )
    .await
}

/// A session logged in, ready to relay (`Err`: its client is gone).
fn relaying(
    mut proto: Box<Protocol>,
    ready: Option<Ready>,
    s: Session,
    worker: usize,
) -> Result<Lived, Box<Protocol>> {
    let (streams, cin, uin) = match ready {
        Some(Ready::Relay(streams, cin, uin)) => (streams, cin, uin),
        Some(Ready::Waiting(client, cin)) => (Streams::Waiting(client), cin, BytesMut::new()),
        None => return Err(proto),
    };
    let mut bufs = crate::relay::Room::boxed(cin, uin);
    match &streams {
        Streams::Waiting(_) => proto.start_later(),
        _ => proto.start(&mut bufs.to_up),
    }
    // A TLS stream's state lives in this task: it stays here. So do pooled
    // sessions over TLS server connections, which relay here.
    let relays_tls = s.pooled.is_some() && s.shared.upstream_tls.is_some();
    let may_move = !(streams.is_tls() || relays_tls);
    let seat = Seat::take(s.shared.workers.clone(), worker, may_move);
    Ok(relay_to_the_end(streams, proto, bufs, seat, s))
}

/// What a session carries from worker to worker besides its streams and
/// protocol state.
struct Session {
    startup_raw: Bytes,
    shared: Arc<Shared>,
    span: Span,
    /// Transaction pooling: the session's pool and the slot of the
    /// connection it holds (dropped last, after the connection closed).
    /// Boxed: it moves between this and the worker's table at every
    /// stretch, and each keeps room for it.
    pooled: Option<Held>,
    /// A pooled session's reads routed to replicas, between transactions.
    detour: Option<Box<Detour>>,
}

type Lived = Pin<Box<dyn Future<Output = Option<Box<Protocol>>> + Send>>;

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
    mut streams: Streams,
    mut proto: Box<Protocol>,
    mut bufs: Bufs,
    mut seat: Seat,
    mut s: Session,
) -> Lived {
    // The parameters are the block's own: bound again inside, each would
    // hold its room twice in every relaying session's state.
    Box::pin(async move {
        let id = proto.info.id;
        let idle_limit = proto.services.config.limits.client_idle_timeout;
        let mut forced = Closer::new(s.shared.closer(id), proto.info.clone(), idle_limit);
        // The client's place in the worker's epoll, kept while the session
        // only waited for a connection.
        let mut away: Option<fast::Spot> = None;
        // Each turn relays over one server connection; a pooled session
        // turns again after each release point, on the connection it takes.
        let relayed = loop {
            // The client, the connection if the session still has it, why
            // the relay stopped without one. What is awaited is boxed: a
            // future holds the room of all its awaits at once, and this one
            // is held by every session for as long as it lives.
            let stretch =
                match begin_stretch(streams, proto, bufs, seat, &mut away, &mut forced, &mut s) {
                    Begun::Now(stretch) => Ok(*stretch),
                    Begun::Relaying(relaying) => Err(relaying.await),
                };
            let stretch = stretch.unwrap_or_else(|(relayed, pooled)| {
                s.pooled = pooled;
                released_or_over(relayed, &mut away)
            });
            // Taken apart by a call: matched here, its room would stay in
            // this future's state across the await below.
            let (sockets, b, stopped) = match stretch.between() {
                Ok((between, p, se)) => {
                    (proto, seat) = (p, se);
                    between
                }
                Err(relayed) => break relayed,
            };
            let next = Box::pin(between_transactions(
                sockets,
                b,
                stopped,
                &mut proto,
                &mut forced,
                &mut away,
                &mut s,
            ))
            .await;
            match next {
                Ok((over, b)) => {
                    // Still without a connection: what `start` sends waits
                    // for one.
                    let connected = !matches!(over, Streams::Waiting(_));
                    streams = over;
                    bufs = b;
                    if connected {
                        proto.start_if_due(&mut bufs.to_up);
                    }
                }
                Err(()) => {
                    drop(away);
                    s.shared.forget_closer(id);
                    drop(seat);
                    return Some(proto);
                }
            }
        };
        s.shared.forget_closer(id);
        let (relayed, proto, seat) = relayed?;
        // Boxed: the farewells' and the kept connection's awaits would
        // otherwise make the state every relaying session holds.
        Box::pin(relaying_ended(relayed, proto, seat, s)).await
    })
}

/// A stretch of relaying begun: over at once, or relaying until it stops,
/// with the session's hold on its pool handed back. Boxed either way: the
/// session's loop awaits the relaying while the match on this is still in
/// its state (the `Now` stretches are the runtime's, and rare).
enum Begun<'a> {
    Now(Box<Stretch>),
    Relaying(Pin<Box<dyn Future<Output = (Ended, Option<Held>)> + Send + 'a>>),
}

/// Where relaying ended (`None`: the session was lost).
type Ended = Option<(Relayed, Box<Protocol>, Seat)>;

/// Begins one stretch, over one server connection or waiting for one:
/// through the worker's own epoll when the session may relay there, else
/// through the runtime. Not an async fn: what it hands over (to the
/// worker's table, or to the future) is not kept twice.
fn begin_stretch<'a>(
    streams: Streams,
    proto: Box<Protocol>,
    bufs: Bufs,
    seat: Seat,
    away: &mut Option<fast::Spot>,
    forced: &'a mut Closer,
    s: &'a mut Session,
) -> Begun<'a> {
    match streams {
        // Greeted without a connection: where the worker's relay can't wait
        // for the client's first bytes (a client that stays in the runtime,
        // or no worker relay), it waits here.
        Streams::Waiting(c) if matches!(c, Client::Runtime(_)) || !fast::may_relay(&proto) => {
            Begun::Now(Box::new(Stretch::Between(
                (Ok((c, None)), bufs, None),
                proto,
                seat,
            )))
        }
        streams if fast::may_relay(&proto) => {
            let sockets = match streams {
                Streams::Waiting(Client::Plain(c)) => Ok(Ok((c, None))),
                streams => streams.unregistered().map(|r| r.map(|(c, u)| (c, Some(u)))),
            };
            match sockets {
                Ok(Ok((c, u))) => {
                    let pooled = s.pooled.take();
                    let s: &Session = s;
                    let relaying =
                        relay_fast((c, u, away.take()), proto, bufs, seat, pooled, forced, s);
                    Begun::Relaying(Box::pin(relaying))
                }
                Ok(Err(e)) => {
                    let why = format!("it could not leave the runtime: {e}");
                    Begun::Now(Box::new(released_or_over(
                        Some((Relayed::Lost(why), proto, seat)),
                        away,
                    )))
                }
                Err(io) => runtime_stretch(Streams::Runtime(io), proto, bufs, seat, forced, s),
            }
        }
        streams => {
            if let (Some(spot), Streams::Std(c, _)) = (away.take(), &streams) {
                spot.leave(c);
            }
            runtime_stretch(streams, proto, bufs, seat, forced, s)
        }
    }
}

/// A stretch relayed through the runtime.
fn runtime_stretch<'a>(
    streams: Streams,
    proto: Box<Protocol>,
    bufs: Bufs,
    seat: Seat,
    forced: &'a mut Closer,
    s: &'a mut Session,
) -> Begun<'a> {
    let pooled = s.pooled.take();
    let s: &Session = s;
    Begun::Relaying(Box::pin(async move {
        let ended = relay_runtime(streams, proto, bufs, seat, forced, s).await;
        (Some(ended), pooled)
    }))
}

/// The client, the connection if the session still has it, its buffers,
/// why the relay stopped without one.
type Between = (
    Result<(Client, Option<ServerSocket>), String>,
    Bufs,
    Option<End>,
);

/// Where a stretch of relaying left the session.
enum Stretch {
    /// Between transactions: at a release point, or without a connection.
    Between(Between, Box<Protocol>, Seat),
    /// Relaying is over (`None` when the session was lost).
    Over(Ended),
}

impl Stretch {
    // Taken apart at once by its caller (see there), never held.
    #[allow(clippy::result_large_err)]
    fn between(self) -> Result<(Between, Box<Protocol>, Seat), Ended> {
        match self {
            Stretch::Between(between, proto, seat) => Ok((between, proto, seat)),
            Stretch::Over(relayed) => Err(relayed),
        }
    }
}

/// Where relaying got to: a session released at a release point, or
/// without a connection, goes on between transactions; any other end is
/// the end of relaying.
fn released_or_over(
    relayed: Option<(Relayed, Box<Protocol>, Seat)>,
    away: &mut Option<fast::Spot>,
) -> Stretch {
    match relayed {
        Some((Relayed::Done(st, out), mut proto, seat)) if matches!(out.end, End::Release) => {
            let mut b = out.bufs;
            // Empty at a release point, as in the worker's relay: a client
            // between transactions holds no read room.
            proto.let_go_of_reads();
            give_back_room(&mut b.cin);
            give_back_room(&mut b.uin);
            let sockets = released_sockets(st).map(|(c, u)| (c, Some(u)));
            Stretch::Between((sockets, b, None), proto, seat)
        }
        Some((
            Relayed::Released {
                client,
                bufs,
                end,
                spot,
            },
            proto,
            seat,
        )) => {
            // Read ahead and waiting only for a connection: the client stays
            // in the worker's epoll meanwhile (not with an answer to write:
            // that goes out below).
            let waits_for_a_connection = !bufs.cin.is_empty()
                && !bufs.to_client.wants_write()
                && matches!(end, None | Some(End::Release));
            match (spot, waits_for_a_connection) {
                (Some(spot), true) => *away = Some(spot),
                (Some(spot), false) => spot.leave(&client),
                (None, _) => fast::release(&client),
            }
            let between = (Ok((Client::Plain(client), None)), bufs, end);
            Stretch::Between(between, proto, seat)
        }
        other => Stretch::Over(other),
    }
}

/// A pooled session between transactions: what is left for its client
/// goes out, then it waits for its client and a connection
/// (`pooled::between`). Returns the streams it relays on over; `Err` when
/// the session ends.
async fn between_transactions(
    sockets: Result<(Client, Option<ServerSocket>), String>,
    mut b: Bufs,
    stopped: Option<End>,
    proto: &mut Protocol,
    forced: &mut Closer,
    away: &mut Option<fast::Spot>,
    s: &mut Session,
) -> Result<(Streams, Bufs), ()> {
    // An answer whose connection went back before it was written
    // (`relay::server_done`) goes out before the session waits for its
    // client or says goodbye (not to a client that is gone).
    let listens = matches!(
        stopped,
        None | Some(End::Release | End::IdleTimeout | End::Shutdown)
    );
    let sockets = match sockets {
        Ok((c, None)) if listens && b.to_client.wants_write() => {
            pooled::answer_first(c, &mut b.to_client, proto)
                .await
                .map(|c| (c, None))
        }
        sockets => sockets,
    };
    let next = match (s.pooled.as_mut(), sockets) {
        (Some(pooled), Ok((c, u))) => {
            let shared = &s.shared;
            let detour = s.detour.as_deref_mut();
            // Boxed, as the rarer awaits below: what the session holds while
            // it relays stays small.
            Box::pin(
                pooled::between(c, u, stopped, &mut b, proto, pooled, shared, forced, detour)
                    .instrument(s.span.clone()),
            )
            .await
        }
        (_, Err(why)) => {
            s.span.in_scope(|| warn!("session closed: {why}"));
            Next::End
        }
        // Never released without a pool.
        (None, Ok(_)) => Next::End,
    };
    match next {
        Next::Go(c, u) => relay_over(c, u, away).map(|st| (st, b)).map_err(|e| {
            s.span
                .in_scope(|| warn!("session closed: its connections could not relay: {e}"));
        }),
        Next::Wait(c) => Ok((Streams::Waiting(c), b)),
        Next::End => Err(()),
    }
}

/// Where relaying ended: done (each side gets its last words, and the
/// upstream connection is kept if it may), on to another worker, or lost.
async fn relaying_ended(
    relayed: Relayed,
    proto: Box<Protocol>,
    seat: Seat,
    mut s: Session,
) -> Option<Box<Protocol>> {
    let upstream = match relayed {
        Relayed::Done(streams, end) => {
            let mut bufs = end.bufs;
            let keep = s
                .span
                .in_scope(|| farewells(&proto, end.end, &mut bufs, &s.shared));
            let limit = proto.services.config.limits.client_write_timeout;
            match Box::pin(write_farewells(streams, &mut bufs, keep, limit)).await {
                Ok(upstream) => upstream,
                Err(why) => {
                    s.span.in_scope(|| warn!("session closed: {why}"));
                    None
                }
            }
        }
        Relayed::Move(j, streams, bufs) => {
            return Box::pin(move_to(j, streams, proto, bufs, seat, s)).await;
        }
        Relayed::Lost(why) => {
            s.span.in_scope(|| warn!("session closed: {why}"));
            Counters::add(&proto.info.counters.errors, 1);
            return Some(proto);
        }
        // Taken by the loop (`released_or_over`): the session just ends.
        Relayed::Released { .. } => return Some(proto),
    };
    drop(seat);
    keep_upstream(upstream, proto, &mut s).await
}

/// Keeps the upstream connection of a session that ended cleanly: a
/// pooled session's goes back to its pool, any other is parked for the
/// next client (`reuse::park`).
async fn keep_upstream(
    upstream: Option<Stream>,
    mut proto: Box<Protocol>,
    s: &mut Session,
) -> Option<Box<Protocol>> {
    let shared = &s.shared;
    // Forgotten before the connection is kept: from then on the backend
    // may run another client's queries.
    forget_key(&mut proto, shared);
    let upstream = match (upstream, s.pooled.as_mut()) {
        // A pooled session that ended cleanly: its connection stays in the
        // pool, as after any transaction.
        (Some(mut up), Some(pooled)) => {
            if !Box::pin(reset_for_pool(&mut up, &mut proto)).await {
                return Some(proto);
            }
            match ServerSocket::from_stream(up) {
                Ok(socket) => {
                    pooled.give_back(socket, None, &mut proto);
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
            owed: proto.flight.readies(),
            conn: proto.release_server(),
        };
        match Box::pin(reuse::park(leaving, shared)).await {
            Ok(()) => debug!("upstream connection kept for the next client"),
            Err(e) => debug!("upstream connection not kept: {e}"),
        }
    }
    Some(proto)
}

/// A pooled session ended with its connection as `reusable_at_end`: the
/// transaction it left open is rolled back, and a pinned one's state undone
/// by DISCARD ALL, so that the connection can serve the pool again. False
/// when that failed (the connection is dropped, which ends its backend).
async fn reset_for_pool(t: &mut Stream, proto: &mut Protocol) -> bool {
    let queries = proto.reset_at_end();
    if queries.is_empty() {
        return true;
    }
    let config = proto.services.config.clone();
    let (max, limit) = (
        config.limits.max_message_bytes,
        config.upstream.connect_timeout,
    );
    let owed = proto.flight.readies();
    let reset = reuse::reset(t, queries, proto.server_mut(), max, owed);
    match crate::timers::timeout(limit, reset).await {
        Ok(Ok(())) => {
            if proto.pin.is_some() {
                proto.server_was_reset();
            }
            debug!(pin = proto.pin, ?queries, "connection reset for its pool");
            true
        }
        Ok(Err(e)) => {
            debug!("connection not reset for its pool: {e}");
            false
        }
        Err(_) => {
            debug!("connection not reset for its pool within {limit:?}");
            false
        }
    }
}

/// The client and the connection of a session that released it: plain
/// sockets out of the worker's epoll or the runtime, as they were; the
/// client stays in the runtime when it is TLS or its connection was.
fn released_sockets(streams: Streams) -> Result<(Client, ServerSocket), String> {
    let left = |e| format!("its sockets could not leave the runtime: {e}");
    match streams {
        Streams::Std(c, u) => {
            fast::release(&c);
            fast::release(&u);
            Ok((Client::Plain(c), ServerSocket::Plain(u)))
        }
        Streams::Runtime(Pair { client, upstream }) => {
            let upstream = ServerSocket::from_stream(upstream).map_err(left)?;
            let client = match client {
                Stream::Plain(c) if !upstream.is_tls() => {
                    Client::Plain(c.into_std().map_err(left)?)
                }
                c => Client::Runtime(c),
            };
            Ok((client, upstream))
        }
        Streams::Waiting(_) => Err(no_connection().to_string()),
    }
}

/// Where a pooled session relays on over the connection it took: plain
/// both ways, in the worker's epoll (as plain sockets, in no reactor yet);
/// else in this task's runtime, which a plain client's socket enters (out
/// of the worker's epoll, where it may have waited for the connection).
fn relay_over(
    client: Client,
    upstream: ServerSocket,
    away: &mut Option<fast::Spot>,
) -> std::io::Result<Streams> {
    match (client, upstream) {
        (Client::Plain(c), ServerSocket::Plain(u)) => Ok(Streams::Std(c, u)),
        (Client::Runtime(Stream::Plain(c)), ServerSocket::Plain(u)) => {
            Ok(Streams::Std(c.into_std()?, u))
        }
        (c, u) => {
            if let (Some(spot), Client::Plain(c)) = (away.take(), &c) {
                spot.leave(c);
            }
            Ok(Streams::Runtime(Pair {
                client: c.into_stream()?,
                upstream: u.into_stream()?,
            }))
        }
    }
}

/// Relays through this worker's own epoll (`fast`) until relaying stops,
/// and on through the runtime when the session needs it; hands the
/// session back, and its hold on its pool.
///
/// Not an async fn: what goes into the worker's table is handed over
/// before the future is made, so the future (which every session relaying
/// there holds while it waits) keeps none of it.
fn relay_fast<'a>(
    (client, upstream, away): (
        std::net::TcpStream,
        Option<std::net::TcpStream>,
        Option<fast::Spot>,
    ),
    proto: Box<Protocol>,
    bufs: Bufs,
    seat: Seat,
    pooled: Option<Held>,
    forced: &'a mut Closer,
    s: &'a Session,
) -> impl Future<Output = (Ended, Option<Held>)> + Send + 'a {
    let parts = fast::Parts {
        client,
        upstream,
        proto,
        bufs: Some(bufs),
        seat,
        pooled,
    };
    let info = parts.proto.info.clone();
    let notes = parts.proto.notes().cloned();
    let entered = fast::enter(parts, away, &s.span);
    relay_fast_on(entered, (info, notes), forced, s)
}

async fn relay_fast_on(
    entered: Result<fast::Relaying, Box<(fast::Parts, std::io::Error)>>,
    (info, notes): (
        Arc<crate::stats::SessionInfo>,
        Option<Arc<crate::protocol::Inbox>>,
    ),
    forced: &mut Closer,
    s: &Session,
) -> (Ended, Option<Held>) {
    let (parts, stop, spot) = match entered {
        Ok(mut relaying) => {
            info.set_relay(Relay::Epoll);
            let closed = loop {
                tokio::select! {
                    biased;
                    end = &mut *forced => break Some(end),
                    () = &mut relaying => break None,
                    // Notifications for a session that listens: handed
                    // over in a turn, if it is idle.
                    () = pooled::notified(notes.as_deref()) => relaying.nudge(),
                }
            };
            match relaying.take() {
                // Lost: the session moved off this worker (never: a
                // worker's tasks stay on it).
                None => return (None, None),
                // Idle, but relaying ended meanwhile: as it ended.
                Some((parts, Some(stop), spot)) if matches!(closed, Some(End::IdleTimeout)) => {
                    (parts, Some(stop), spot)
                }
                Some((parts, _, spot)) if closed.is_some() => {
                    (parts, closed.map(fast::Stop::End), spot)
                }
                Some(taken) => taken,
            }
        }
        Err(refused) => {
            let (parts, e) = *refused;
            s.span
                .in_scope(|| debug!("relaying through the runtime: {e}"));
            (parts, Some(fast::Stop::Fallback), None)
        }
    };
    // What comes after is made by a plain function, so that none of the
    // parts stays in this future's state while the runtime relays: an idle
    // session waits in the select above, and the future is as large as its
    // largest wait.
    let (next, pooled) = after_fast(parts, stop, spot, forced, s);
    let runtime = match next {
        AfterFast::Now(ended) => return (ended, pooled),
        AfterFast::Runtime(runtime) => runtime,
    };
    (Some(runtime.await), pooled)
}

/// What a session does once the worker's relay handed it back.
enum AfterFast<'a> {
    Now(Ended),
    Runtime(Pin<Box<dyn Future<Output = RelayedWith> + Send + 'a>>),
}

/// How a relay ended, with the session's protocol state and seat.
type RelayedWith = (Relayed, Box<Protocol>, Seat);

fn after_fast<'a>(
    parts: fast::Parts,
    stop: Option<fast::Stop>,
    spot: Option<fast::Spot>,
    forced: &'a mut Closer,
    s: &'a Session,
) -> (AfterFast<'a>, Option<Held>) {
    let fast::Parts {
        client,
        upstream,
        proto,
        bufs,
        seat,
        pooled,
    } = parts;
    let bufs = fast::unboxed(bufs);
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
        return (AfterFast::Now(Some((released, proto, seat))), pooled);
    };
    let streams = Streams::Std(client, upstream);
    let next = match stop {
        Some(fast::Stop::End(End::Move(j))) => {
            streams.release();
            AfterFast::Now(Some((Relayed::Move(j, streams, bufs), proto, seat)))
        }
        Some(fast::Stop::End(end)) => {
            let done = Relayed::Done(streams, Outcome { end, bufs });
            AfterFast::Now(Some((done, proto, seat)))
        }
        Some(fast::Stop::Fallback) | None => {
            streams.release();
            AfterFast::Runtime(Box::pin(relay_runtime(
                streams, proto, bufs, seat, forced, s,
            )))
        }
    };
    (next, pooled)
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
    let relayed = relay(
        &mut io,
        &mut proto,
        bufs,
        &mut seat,
        forced,
        &s.shared,
        &s.startup_raw,
    );
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

/// Stops forwarding the client's cancels.
fn forget_key(proto: &mut Protocol, shared: &Shared) {
    if let Some(key) = proto.client_key.take() {
        shared.cancel.forget(&key);
    }
}
