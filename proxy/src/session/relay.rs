//! The relay loop: one task owns a session's client and upstream halves and
//! moves bytes both ways with bounded buffers.
//!
//! Reads from one side stop while the other side's write queue is over
//! `[limits] buffer_bytes`, so a slow client holds back the upstream instead
//! of growing the proxy's memory. All four directions (read client, read
//! upstream, write client, write upstream) are polled together, so a client
//! that pipelines without reading can't deadlock against a server that
//! writes without reading.

use std::{
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, atomic::Ordering::Relaxed},
    task::{Context, Poll},
    time::Instant,
};

use bytes::{Bytes, BytesMut};
use tokio_util::io::poll_read_buf;
use tracing::{Instrument, Span, debug, info, warn};

use super::{
    fast,
    handshake::{self, Pair},
    io::WriteQueue,
    reuse,
    spin::Spin,
    spread::Seat,
    state::{Flow, Protocol},
    wake::{self, Wakers},
};
use crate::{
    net::Stream,
    server::Shared,
    stats::{Counters, Relay, SessionState},
    wire::{
        backend,
        startup::StartupMessage,
        write::{self, Severity},
    },
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
    let opened = open(client, start, shared).instrument(span.clone()).await;
    let Some((proto, ready)) = opened else {
        return;
    };
    let info = proto.info.clone();
    let proto = match ready {
        Some((io, cin, uin)) => {
            // A TLS stream's state lives in this task: it stays here.
            let may_move = !io.client.is_tls() && !io.upstream.is_tls();
            // Sessions start on the worker that accepted them, the first.
            let seat = Seat::take(shared.workers.clone(), 0, may_move);
            let s = Session {
                startup_raw,
                shared: shared.clone(),
                span: span.clone(),
            };
            live(Streams::Runtime(io), proto, Bufs::new(cin, uin), seat, s).await
        }
        None => Some(proto),
    };
    async {
        info.set_state(SessionState::Closing);
        let mut statements = Default::default();
        if let Some(mut proto) = proto {
            forget_key(&mut proto, shared);
            proto.cy.close(shared);
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
}

type Lived = Pin<Box<dyn Future<Output = Option<Protocol>> + Send>>;

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
    /// Over, with what was left to write each way.
    Done(Pair, Outcome),
    /// To go on on worker N.
    Move(usize, Streams, Bufs),
    /// The sockets could not be moved between reactors.
    Lost(String),
}

/// Relays until the session ends, then sends each side its last words and
/// keeps the upstream connection for the next client if it may. Returns
/// the protocol state for the session's summary; `None` when it was lost
/// (the session was stopped while on another worker).
fn live(streams: Streams, proto: Protocol, bufs: Bufs, seat: Seat, s: Session) -> Lived {
    // The two ways of relaying are boxed: a future holds the state of all
    // its awaits at once, and is copied whole each time it is boxed.
    Box::pin(async move {
        let id = proto.info.id;
        let mut forced = s.shared.closer(id);
        let relayed = if fast::may_relay(&proto) {
            match streams.unregistered() {
                Ok(Ok((c, u))) => {
                    Box::pin(relay_fast(c, u, proto, bufs, seat, &mut forced, &s)).await
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
            Some(Box::pin(relay_runtime(streams, proto, bufs, seat, &mut forced, &s)).await)
        };
        s.shared.forget_closer(id);
        let (relayed, mut proto, seat) = relayed?;
        let (mut io, end) = match relayed {
            Relayed::Done(io, end) => (io, end),
            Relayed::Move(j, streams, bufs) => {
                return move_to(j, streams, proto, bufs, seat, s).await;
            }
            Relayed::Lost(why) => {
                s.span.in_scope(|| warn!("session closed: {why}"));
                Counters::add(&proto.info.counters.errors, 1);
                return Some(proto);
            }
        };
        drop(seat);
        let shared = &s.shared;
        let keep = finish(&mut io, &proto, end)
            .instrument(s.span.clone())
            .await;
        // Forgotten before the connection is kept, not after: by then the
        // next client may have registered it again.
        let key = forget_key(&mut proto, shared);
        if keep {
            let Pair { client, upstream } = io;
            // The client is gone already; let it see its socket close now,
            // not after the reset.
            drop(client);
            let params = std::mem::take(&mut proto.server_params);
            let opened = proto.upstream_opened;
            let raw = s.startup_raw.clone();
            match reuse::park(upstream, raw, params, key, opened, shared).await {
                Ok(()) => debug!("upstream connection kept for the next client"),
                Err(e) => debug!("upstream connection not kept: {e}"),
            }
        }
        Some(proto)
    })
}

/// Relays through this worker's own epoll (`fast`) until relaying stops;
/// the rest of the way through the runtime when the session needs it.
/// `None` when the session was lost (never: a worker's tasks stay on it).
async fn relay_fast(
    client: std::net::TcpStream,
    upstream: std::net::TcpStream,
    proto: Protocol,
    bufs: Bufs,
    seat: Seat,
    forced: &mut Closer,
    s: &Session,
) -> Option<(Relayed, Protocol, Seat)> {
    let parts = fast::Parts {
        client,
        upstream,
        proto,
        bufs,
        seat,
    };
    let info = parts.proto.info.clone();
    let (parts, stop) = match fast::enter(parts, &s.span) {
        Ok(mut relaying) => {
            info.set_relay(Relay::Epoll);
            let shutdown = tokio::select! {
                biased;
                _ = &mut *forced => true,
                () = &mut relaying => false,
            };
            match relaying.take()? {
                (parts, _) if shutdown => (parts, Some(fast::Stop::End(End::Shutdown))),
                (parts, stop) => (parts, stop),
            }
        }
        Err(refused) => {
            let (parts, e) = *refused;
            s.span
                .in_scope(|| debug!("relaying through the runtime: {e}"));
            (parts, Some(fast::Stop::Fallback))
        }
    };
    let fast::Parts {
        client,
        upstream,
        proto,
        bufs,
        seat,
    } = parts;
    let streams = Streams::Std(client, upstream);
    Some(match stop {
        Some(fast::Stop::End(End::Move(j))) => (Relayed::Move(j, streams, bufs), proto, seat),
        Some(fast::Stop::End(end)) => match streams.registered() {
            Ok(io) => (Relayed::Done(io, Outcome { end, bufs }), proto, seat),
            Err(e) => (Relayed::Lost(returning(e)), proto, seat),
        },
        Some(fast::Stop::Fallback) | None => {
            Box::pin(relay_runtime(streams, proto, bufs, seat, forced, s)).await
        }
    })
}

fn returning(e: std::io::Error) -> String {
    format!("it could not return to the runtime: {e}")
}

/// Relays through this thread's runtime.
async fn relay_runtime(
    streams: Streams,
    mut proto: Protocol,
    bufs: Bufs,
    mut seat: Seat,
    forced: &mut Closer,
    s: &Session,
) -> (Relayed, Protocol, Seat) {
    let mut io = match streams.registered() {
        Ok(io) => io,
        Err(e) => return (Relayed::Lost(returning(e)), proto, seat),
    };
    proto.info.set_relay(Relay::Runtime);
    let tls = io.client.is_tls() || io.upstream.is_tls();
    let relayed = relay(&mut io, &mut proto, bufs, &mut seat, forced);
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
        _ => Relayed::Done(io, outcome),
    };
    (relayed, proto, seat)
}

/// Hands the session to worker `j`: both sockets leave this thread's
/// reactor for that one's, and the relay goes on there. This task waits
/// for it, and stops it if stopped itself.
async fn move_to(
    j: usize,
    streams: Streams,
    proto: Protocol,
    bufs: Bufs,
    seat: Seat,
    s: Session,
) -> Option<Protocol> {
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
            return live(Streams::Std(c, u), proto, bufs, seat.stay(), s).await;
        }
        // Never asked of TLS sessions: relay on here.
        (Err(io), _) => return live(Streams::Runtime(io), proto, bufs, seat.stay(), s).await,
    };
    let seat = seat.moved(j);
    s.span.in_scope(|| debug!(worker = j, "session moved"));
    let moved = handle.spawn(live(Streams::Std(c, u), proto, bufs, seat, s));
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

/// Stops forwarding cancels to the session's backend; returns its
/// BackendKeyData message.
fn forget_key(proto: &mut Protocol, shared: &Shared) -> Option<Bytes> {
    let key = proto.upstream_key.take();
    if let Some((pid, secret)) = key.as_deref().and_then(backend::backend_key) {
        shared.forget_cancel_key(pid, &secret);
    }
    key
}

/// The ready session's streams and leftover read buffers.
type Ready = (Pair, BytesMut, BytesMut);

/// Connects upstream and relays authentication. `None` when the upstream
/// could not be reached (the session is closed then); a `Ready` when the
/// client may now send queries.
async fn open(
    client: Stream,
    start: Start,
    shared: &Arc<Shared>,
) -> Option<(Protocol, Option<Ready>)> {
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
    let reuse = shared.config.upstream.reuse && shared.upstream_tls.is_none();
    let kept = match reuse {
        true => {
            let max_age = shared.config.upstream.reuse_idle_timeout;
            shared.reuse.take_or_wait(&startup_raw, max_age).await
        }
        false => None,
    };
    let mut proto = Protocol::new(shared.clone(), info.clone(), &params);
    let limit = shared.config.limits.startup_timeout;
    let timed_out = || handshake::HandshakeEnd::Timeout(limit);
    let authed = if let Some(kept) = kept {
        let greet = reuse::adopt(kept, client, shared, &info);
        let greeted = deadline.bound(greet).await;
        Counters::add(&info.counters.reused_upstreams, 1);
        greeted.unwrap_or_else(|_| Err(timed_out()))
    } else {
        let upstream = match handshake::connect_upstream(shared).await {
            Ok(u) => u,
            Err(e) => {
                warn!("{e}");
                let mut c = client;
                let msg = write::error(Severity::Fatal, "08006", &e.to_string());
                let _ = tokio::io::AsyncWriteExt::write_all(&mut c, &msg).await;
                Counters::add(&info.counters.errors, 1);
                shared.stats.close_session(&info, Default::default());
                return None;
            }
        };
        let mut io = Pair { client, upstream };
        let auth = handshake::relay_auth(&mut io, startup_raw, shared, &info, client_tls);
        let authed = deadline.bound(auth).await;
        authed.unwrap_or_else(|_| Err(timed_out())).map(|a| (io, a))
    };
    match authed {
        Ok((io, a)) => {
            proto.on_server_params(&a.params);
            if let Some((pid, _)) = a.key.as_deref().and_then(backend::backend_key) {
                info.upstream_pid
                    .store(pid as u64, std::sync::atomic::Ordering::Relaxed);
            }
            proto.upstream_key = a.key;
            proto.upstream_opened = a.opened;
            // A replication connection may hold what DISCARD ALL leaves
            // alone (a temporary replication slot).
            proto.keep_upstream = reuse
                && a.plain_trust
                && !io.upstream.is_tls()
                && StartupMessage::param(&params, "replication").is_none();
            if proto.keep_upstream {
                proto.server_params = a.params;
            }
            info.set_state(SessionState::Idle);
            debug!(database = %database, user = %user, "session ready");
            Some((proto, Some((io, a.cin, a.uin))))
        }
        Err(e) => {
            info!("{e}");
            Some((proto, None))
        }
    }
}

/// Why the loop ended.
pub(super) enum End {
    ClientClosed,
    /// The upstream closed, or failed with the error given.
    UpstreamClosed(Option<String>),
    Error(String),
    Shutdown,
    /// To go on relaying on worker N.
    Move(usize),
}

/// A relaying session's read buffers and write queues.
pub(super) struct Bufs {
    pub cin: BytesMut,
    pub uin: BytesMut,
    pub to_client: WriteQueue,
    pub to_up: WriteQueue,
}

impl Bufs {
    fn new(cin: BytesMut, uin: BytesMut) -> Self {
        Self {
            cin,
            uin,
            to_client: WriteQueue::default(),
            to_up: WriteQueue::default(),
        }
    }
}

/// How the loop ended, with what was left to write each way.
struct Outcome {
    end: End,
    bufs: Bufs,
}

/// The session has been told to close (shutdown's grace period is over).
type Closer = tokio::sync::oneshot::Receiver<()>;

/// Works through whatever is buffered. Client input goes twice, since an
/// upstream answer may release input held back while it was awaited (a
/// coalesced batch's outcome, the AGE catalog). On a protocol error the
/// client's FATAL message is queued and the error returned.
pub(super) fn process(proto: &mut Protocol, b: &mut Bufs) -> Result<(), String> {
    let worked = proto
        .on_client_bytes(&mut b.cin, &mut b.to_up, &mut b.to_client)
        .and_then(|()| proto.on_upstream_bytes(&mut b.uin, &mut b.to_client, &mut b.to_up))
        .and_then(|()| proto.on_client_bytes(&mut b.cin, &mut b.to_up, &mut b.to_client));
    worked.map_err(|e| {
        let msg = write::error(Severity::Fatal, e.sqlstate(), &e.to_string());
        b.to_client.push(msg);
        Counters::add(&proto.info.counters.errors, 1);
        e.to_string()
    })
}

/// Whether to read the client and the upstream now: not while the other
/// side's queue is over `limits.buffer_bytes` (backpressure), nor while
/// the protocol holds that side back.
pub(super) fn wants_reads(proto: &Protocol, b: &Bufs) -> (bool, bool) {
    let limit = proto.shared.config.limits.buffer_bytes;
    let client = b.to_up.len() < limit && proto.flow != Flow::Terminated && !proto.client_paused();
    let upstream = b.to_client.len() < limit && proto.delay_until().is_none();
    (client, upstream)
}

/// The worker to move to now: nothing is held either way, and a session
/// that has lasted finds a less busy worker. Asked first whether a look is
/// due, so a settled session pays one test per turn.
pub(super) fn move_due(proto: &Protocol, b: &Bufs, seat: &mut Seat) -> Option<usize> {
    let c = &proto.info.counters;
    let round_trips = || c.upstream_round_trips.load(Relaxed);
    if seat.due(round_trips)
        && !b.to_up.wants_write()
        && !b.to_client.wants_write()
        && b.cin.is_empty()
        && b.uin.is_empty()
        && proto.quiet()
    {
        return seat.move_to(round_trips());
    }
    None
}

/// What became ready in one wait of the relay loop.
#[derive(Default)]
struct Events {
    client_read: Option<std::io::Result<usize>>,
    upstream_read: Option<std::io::Result<usize>>,
    client_write: Option<std::io::Result<()>>,
    upstream_write: Option<std::io::Result<()>>,
    timer: bool,
    catalog: bool,
    shutdown: bool,
}

/// Sources whose last poll, with their own waker, found nothing: the waker
/// stays registered until the source is ready, and marks it then.
#[derive(Default)]
struct Armed {
    client: bool,
    upstream: bool,
    shutdown: bool,
}

impl Events {
    fn any(&self) -> bool {
        self.client_read.is_some()
            || self.upstream_read.is_some()
            || self.client_write.is_some()
            || self.upstream_write.is_some()
            || self.timer
            || self.catalog
            || self.shutdown
    }
}

/// Turns of the loop below between two looks at the sessions this
/// worker relays itself: a session that always has work here would keep
/// the runtime from ever parking, and so from relaying them.
const TURNS_BETWEEN_LOOKS: u32 = 32;

/// The relay loop, through the runtime: what `fast` does on a worker,
/// for TLS sessions and those that need a timer or a catalog wait.
async fn relay(
    io: &mut Pair,
    proto: &mut Protocol,
    bufs: Bufs,
    seat: &mut Seat,
    forced: &mut Closer,
) -> Outcome {
    let mut b = bufs;
    let c = proto.info.clone();
    // Kept across loop turns: a simulated delay must not restart.
    let mut timer: Option<(Instant, Sleep)> = None;
    let mut armed = Armed::default();
    let shared = proto.shared.clone();
    let mut spin = Spin::new(shared.config.upstream.busy_poll, &shared.spinning);
    let wakers = Wakers::new();
    let mut turns = 0u32;
    let end = loop {
        if let Err(e) = process(proto, &mut b) {
            break End::Error(e);
        }
        // Write at once what the sockets take now: the usual case, and one
        // poll here is cheaper than another wait below. Whatever is not
        // ready is polled again, with its socket's waker, in that wait.
        // The send comes before the loop's bookkeeping, not after it: the
        // server is woken on another CPU, so work done after the send
        // overlaps with its wake-up, while work before it delays the query.
        // (Sending last, to keep the client's CPU free for it sooner, was
        // measured no better at -c 1.)
        let wrote = {
            let mut noop = Context::from_waker(std::task::Waker::noop());
            let up = match b.to_up.wants_write() {
                true => b.to_up.poll_write(&mut io.upstream, &mut noop),
                false => Poll::Pending,
            };
            let client = match b.to_client.wants_write() {
                true => b.to_client.poll_write(&mut io.client, &mut noop),
                false => Poll::Pending,
            };
            (up, client)
        };
        if let (Poll::Ready(Err(e)), _) = wrote {
            break End::UpstreamClosed(Some(format!("upstream write: {e}")));
        }
        if let (_, Poll::Ready(Err(e))) = wrote {
            break End::Error(format!("client write: {e}"));
        }
        if proto.flow == Flow::Terminated && !b.to_up.wants_write() {
            break End::ClientClosed;
        }
        if timer.is_none()
            && let Some(j) = move_due(proto, &b, seat)
        {
            break End::Move(j);
        }
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(TURNS_BETWEEN_LOOKS) {
            crate::worker::poll_now();
        }
        let (read_client, read_up) = wants_reads(proto, &b);
        match (proto.delay_until(), &timer) {
            (Some(t), Some((at, _))) if *at == t => {}
            (Some(t), _) => timer = Some((t, precise_sleep(t))),
            (None, _) => timer = None,
        }
        let awaiting = match proto.delay_until() {
            None => proto.awaiting_since(),
            Some(_) => None,
        };
        let mut catalog = proto.cy.wait_handle();
        let waits_catalog = catalog.is_some();
        let mut catalog = std::pin::pin!(catalog_changed(&mut catalog));
        // All that is ready is handled together: no direction can starve
        // another, and a busy session costs one wake-up per batch of
        // events, not per event. Each socket and the shutdown signal is
        // polled with its own waker, and only when it has not been polled
        // since it last found nothing (its waker is registered) or it has
        // woken the task since: a wake-up from the upstream does not poll
        // the client's empty socket again.
        let ev = std::future::poll_fn(|cx| {
            let woke = wakers.take(cx.waker());
            armed.client &= woke & wake::CLIENT == 0;
            armed.upstream &= woke & wake::UPSTREAM == 0;
            armed.shutdown &= woke & wake::SHUTDOWN == 0;
            let mut ev = Events::default();
            let mut ccx = Context::from_waker(&wakers.client);
            let mut ucx = Context::from_waker(&wakers.upstream);
            if read_client && !armed.client {
                match poll_read_buf(Pin::new(&mut io.client), &mut ccx, &mut b.cin) {
                    Poll::Ready(r) => ev.client_read = Some(r),
                    Poll::Pending => armed.client = true,
                }
            }
            if read_up && !armed.upstream {
                match poll_read_buf(Pin::new(&mut io.upstream), &mut ucx, &mut b.uin) {
                    Poll::Ready(r) => ev.upstream_read = Some(r),
                    Poll::Pending => armed.upstream = true,
                }
            }
            if b.to_client.wants_write()
                && let Poll::Ready(r) = b.to_client.poll_write(&mut io.client, &mut ccx)
            {
                ev.client_write = Some(r);
            }
            if b.to_up.wants_write()
                && let Poll::Ready(r) = b.to_up.poll_write(&mut io.upstream, &mut ucx)
            {
                ev.upstream_write = Some(r);
            }
            // Rare and short-lived (a simulated delay, a catalog being
            // fetched by another session): polled each time they exist.
            if let Some((_, f)) = timer.as_mut() {
                ev.timer = f.as_mut().poll(cx).is_ready();
            }
            if waits_catalog {
                ev.catalog = catalog.as_mut().poll(cx).is_ready();
            }
            if !armed.shutdown {
                let mut scx = Context::from_waker(&wakers.shutdown);
                match Pin::new(&mut *forced).poll(&mut scx) {
                    Poll::Ready(_) => ev.shutdown = true,
                    Poll::Pending => armed.shutdown = true,
                }
            }
            if ev.any() {
                return Poll::Ready(ev);
            }
            if spin.keep_polling(awaiting) {
                // Polled again right after the runtime's next look at the
                // sockets, which then does not sleep.
                let _ = std::pin::pin!(tokio::task::yield_now()).poll(cx);
            }
            Poll::Pending
        })
        .await;
        if ev.shutdown {
            break End::Shutdown;
        }
        if let Some(Err(e)) = ev.upstream_write {
            break End::UpstreamClosed(Some(format!("upstream write: {e}")));
        }
        if let Some(Err(e)) = ev.client_write {
            break End::Error(format!("client write: {e}"));
        }
        match ev.upstream_read {
            Some(Ok(0)) => break End::UpstreamClosed(None),
            Some(Ok(n)) => Counters::add(&c.counters.bytes_from_upstream, n as u64),
            Some(Err(e)) => break End::UpstreamClosed(Some(format!("upstream read: {e}"))),
            None => {}
        }
        match ev.client_read {
            Some(Ok(0)) => break End::ClientClosed,
            Some(Ok(n)) => Counters::add(&c.counters.bytes_from_client, n as u64),
            Some(Err(e)) => break End::Error(format!("client read: {e}")),
            None => {}
        }
        if ev.timer {
            timer = None;
            proto.delay_elapsed();
        }
        if ev.catalog {
            proto.cy.wake();
        }
        reserve(&mut b.cin);
        reserve(&mut b.uin);
    };
    Outcome { end, bufs: b }
}

/// Logs how the session ended and sends each side its last words. True
/// when the upstream connection is to be kept for the next client instead.
async fn finish(io: &mut Pair, proto: &Protocol, outcome: Outcome) -> bool {
    let Outcome { end, bufs } = outcome;
    // Nothing read from the upstream was left unhandled.
    let upstream_idle = bufs.uin.is_empty();
    let (mut to_client, mut to_up) = (bufs.to_client, bufs.to_up);
    let c = &proto.info;
    match end {
        End::ClientClosed => {
            if proto.keep_upstream && upstream_idle && !to_up.wants_write() && proto.quiet() {
                return true;
            }
            if proto.flow != Flow::Terminated || proto.terminate_withheld {
                // Tell the server we are done, as the client would have.
                to_up.push(Bytes::from_static(&write::TERMINATE));
            }
            let _ = to_up.write_all(&mut io.upstream).await;
        }
        End::UpstreamClosed(error) => {
            if let Some(e) = error {
                warn!("{e}");
            }
            let addr = proto.shared.upstream_addr();
            warn!(upstream = %addr, "upstream closed the connection");
            let text = format!("upstream {addr} closed the connection unexpectedly");
            to_client.push(write::error(Severity::Fatal, "08006", &text));
            Counters::add(&c.counters.errors, 1);
            let _ = to_client.write_all(&mut io.client).await;
        }
        End::Error(e) => {
            debug!("session ended: {e}");
            let _ = to_client.write_all(&mut io.client).await;
            let _ = to_up.write_all(&mut io.upstream).await;
        }
        // Never finished: the session goes on elsewhere.
        End::Move(_) => {}
        End::Shutdown => {
            to_client.push(write::error(
                Severity::Fatal,
                "57P01",
                "terminating connection due to administrator command (onetrip is shutting down)",
            ));
            let _ = to_client.write_all(&mut io.client).await;
            to_up.push(Bytes::from_static(&write::TERMINATE));
            let _ = to_up.write_all(&mut io.upstream).await;
        }
    }
    false
}

/// Keeps room for the next read without growing past what one read needs.
pub(super) fn reserve(buf: &mut bytes::BytesMut) {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(32 * 1024);
    }
}

/// Another session's catalog fetch ended (loaded or given up).
async fn catalog_changed(rx: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    if let Some(rx) = rx {
        // An error means the sender is gone: nothing more to wait for.
        let _ = rx.changed().await;
    }
}

type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Sleeps until `t`. tokio's timer wheel rounds up to whole milliseconds,
/// which would turn a simulated 0.5 ms into 1-2 ms; short waits sleep on a
/// blocking thread instead, to within tens of microseconds.
fn precise_sleep(t: Instant) -> Sleep {
    let left = t.saturating_duration_since(Instant::now());
    if left >= std::time::Duration::from_millis(5) {
        Box::pin(crate::timers::sleep_until(t))
    } else {
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
        })
    }
}
