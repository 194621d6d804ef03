//! Relaying a plain-TCP session on a worker thread without tokio: its two
//! sockets sit in the worker's epoll (`worker`), and each readiness report
//! runs the session's protocol state and its reads and writes right away,
//! from the runtime's park hook. It is the relay loop of `runtime` with
//! the socket calls made directly; the loop's logic is shared (`turn`).
//!
//! The session's task waits meanwhile (`Relaying`), and takes the session
//! back when relaying stops: at its end, to move to another worker, when
//! shutdown forces it, or when the session needs what only the task can
//! wait for (another session's catalog fetch, a simulated delay); then the
//! task relays on through tokio.

use std::{
    cell::{Cell, OnceCell, RefCell},
    future::Future,
    io,
    net::TcpStream,
    os::fd::AsRawFd,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Waker},
    time::Instant,
};

use bytes::BytesMut;
use rustc_hash::FxHashMap;
use tracing::Span;

use super::{Bufs, End, line};
use crate::{
    net::ServerConn,
    pooling::{Deliver, Grant, Pooled, Waiting},
    protocol::Protocol,
    wire::write,
    worker::seats::Seat,
};
use crate::{
    stats::{Counters, SessionState},
    worker::{self, Kept, epoll::Event, thread_mark},
};

/// A session as it enters or leaves the worker's relay.
pub(crate) struct Parts {
    pub client: TcpStream,
    /// `None` once a pooled session gave its connection back, until it
    /// takes another.
    pub upstream: Option<TcpStream>,
    pub proto: Box<Protocol>,
    pub bufs: Bufs,
    pub seat: Seat,
    /// Transaction pooling: the session's hold on its pool.
    pub pooled: Option<Pooled>,
}

/// Why the worker's relay handed a session back.
pub(crate) enum Stop {
    End(End),
    /// It waits for something only its task can wait for.
    Fallback,
}

/// Turns of one session per readiness report before the others (and the
/// runtime) get theirs: a bulk COPY would otherwise hold the thread.
const TURNS: usize = 64;

struct Entry {
    parts: Parts,
    slot: usize,
    generation: u32,
    client: Ready,
    upstream: Ready,
    /// The upstream's place in this epoll when it is a pooled connection
    /// kept there between sessions; else it is watched under the
    /// session's own token.
    server: Option<Kept>,
    stop: Option<Stop>,
    /// The session's task, woken when relaying stops.
    waiter: Option<Waker>,
    /// Waits for another turn (`TURNS` ran out).
    pending: bool,
    /// A pooled session waits in line for a connection, here.
    wait: Option<InLine>,
    span: Span,
}

/// A session's wait for a connection in its worker's relay: its grant
/// comes by the worker's `Mailbox`; its task is woken at
/// `query_wait_timeout` (`line`), to end the wait.
struct InLine {
    since: Instant,
}

/// What a socket is known ready for, since its last report (edge-
/// triggered: known until a call would block).
#[derive(Clone, Copy)]
struct Ready {
    read: bool,
    write: bool,
    /// The peer closed or the socket failed: its report came with the
    /// last data, so no other comes, and a short read leaves it readable.
    closed: bool,
}

impl Ready {
    const FRESH: Ready = Ready {
        read: false,
        write: true,
        closed: false,
    };

    fn note(&mut self, ev: Event) {
        self.read |= ev.readable();
        self.write |= ev.writable();
        self.closed |= ev.closed();
    }

    /// After a read that emptied the socket's buffer (`drained`) or not.
    fn read_some(&mut self, drained: bool) {
        self.read = !drained || self.closed;
    }
}

/// A place in the table. Entries stay inline so that entering costs no
/// allocation; the table's places are reused.
#[derive(Default)]
#[allow(clippy::large_enum_variant)]
enum Slot {
    #[default]
    Free,
    Here(Entry),
    /// A pooled session's client, left in this epoll (under its old
    /// token) while the session's task waits for a connection: coming back
    /// costs only the connection's registration. Its reports are noted.
    Away {
        generation: u32,
        client: Ready,
    },
}

#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    free: Vec<usize>,
    generation: u32,
    live: usize,
    pending: Vec<(usize, u32)>,
}

thread_local! {
    static TABLE: RefCell<Table> = RefCell::default();
    /// A turn woke another session's task on this thread (a connection
    /// given back to a client waiting for one): the park hook must hand
    /// the thread back to the runtime, which would not know otherwise. (A
    /// task on another thread is woken through its own runtime.)
    static WOKE_OTHERS: Cell<bool> = const { Cell::new(false) };
    /// The sessions holding the server connections kept in this epoll
    /// (`worker::Kept`), by their data word: a report for one no session
    /// here holds is dropped.
    static SERVERS: RefCell<FxHashMap<u64, (usize, u32)>> = RefCell::default();
}

/// Where a worker's pools leave grants for the sessions waiting in line in
/// its relay, from any thread: one that rings the worker's bell.
struct Mailbox {
    thread: u64,
    has_mail: AtomicBool,
    mail: Mutex<Vec<(u64, Grant)>>,
    bell: Arc<worker::Bell>,
}

impl Deliver for Mailbox {
    fn deliver(&self, ticket: u64, grant: Grant) {
        self.mail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((ticket, grant));
        // Rung once per look at the mail (`take_mail` lowers the flag
        // before it takes the list): a grant that finds the flag raised
        // is taken by the look that flag's ring asked for. This thread
        // looks at its mail before it waits again.
        if !self.has_mail.swap(true, Ordering::AcqRel) && self.thread != thread_mark() {
            self.bell.ring();
        }
    }
}

thread_local! {
    static MAIL: OnceCell<Option<Arc<Mailbox>>> = const { OnceCell::new() };
}

/// This worker's mailbox (`None` off a worker).
fn mailbox() -> Option<Arc<Mailbox>> {
    MAIL.with(|m| {
        m.get_or_init(|| {
            let bell = worker::bell()?;
            Some(Arc::new(Mailbox {
                thread: thread_mark(),
                has_mail: AtomicBool::new(false),
                mail: Mutex::default(),
                bell,
            }))
        })
        .clone()
    })
}

thread_local! {
    /// The mail list handed out last, emptied: swapped back into the
    /// mailbox, so that leaving a grant allocates nothing.
    static SPARE_MAIL: Cell<Vec<(u64, Grant)>> = const { Cell::new(Vec::new()) };
}

/// The grants left for this worker's sessions since the last look; the
/// list goes back with `recycle_mail`.
fn take_mail() -> Vec<(u64, Grant)> {
    let Ok(Some(mb)) = MAIL.try_with(|m| m.get().cloned().flatten()) else {
        return Vec::new();
    };
    if !mb.has_mail.swap(false, Ordering::Acquire) {
        return Vec::new();
    }
    let mut mail = SPARE_MAIL.take();
    std::mem::swap(
        &mut mail,
        &mut *mb.mail.lock().unwrap_or_else(|e| e.into_inner()),
    );
    mail
}

fn recycle_mail(mut mail: Vec<(u64, Grant)>) {
    // An empty list from no mail has no room to give.
    if mail.capacity() == 0 {
        return;
    }
    mail.clear();
    let _ = SPARE_MAIL.try_with(|s| s.set(mail));
}

fn has_mail() -> bool {
    MAIL.try_with(|m| {
        m.get()
            .and_then(Option::as_ref)
            .is_some_and(|mb| mb.has_mail.load(Ordering::Acquire))
    })
    .unwrap_or(false)
}

/// Whether a turn since the last ask woke another session's task.
fn woke_others() -> bool {
    WOKE_OTHERS.with(Cell::take)
}

/// Data words: slot, generation and side (0 client, 1 upstream).
fn token(slot: usize, generation: u32, side: u64) -> u64 {
    ((slot as u64) << 33) | (u64::from(generation) << 1) | side
}

fn untoken(data: u64) -> (usize, u32, u64) {
    ((data >> 33) as usize, (data >> 1) as u32, data & 1)
}

/// The mark of a kept server connection's data word (a session's slot
/// never reaches it; the worker's own words have the top bit too).
const SERVER: u64 = 1 << 62;

/// A new data word for a server connection kept in a worker's epoll.
fn server_token() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    SERVER | ((n << 1) & (SERVER - 1)) | 1
}

/// The session's kept connection leaves this epoll with it.
fn unkeep(e: &mut Entry) {
    if let Some(k) = e.server.take() {
        SERVERS.with(|s| s.borrow_mut().remove(&k.data()));
        if let Some(up) = &e.parts.upstream {
            k.end(up.as_raw_fd());
        }
    }
}

impl Table {
    fn get(&mut self, slot: usize, generation: u32) -> Option<&mut Entry> {
        match self.slots.get_mut(slot)? {
            Slot::Here(e) if e.generation == generation => Some(e),
            _ => None,
        }
    }

    fn remove(&mut self, slot: usize, generation: u32) -> Option<Entry> {
        self.get(slot, generation)?;
        let Slot::Here(mut e) = std::mem::take(&mut self.slots[slot]) else {
            return None;
        };
        unkeep(&mut e);
        self.free.push(slot);
        self.live -= 1;
        Some(e)
    }

    /// Takes a session out, leaving its client's place (`Slot::Away`).
    fn step_away(&mut self, slot: usize, generation: u32) -> Option<Entry> {
        let client = self.get(slot, generation)?.client;
        let away = Slot::Away { generation, client };
        let Slot::Here(mut e) = std::mem::replace(&mut self.slots[slot], away) else {
            return None;
        };
        unkeep(&mut e);
        self.live -= 1;
        Some(e)
    }

    /// The client's place, emptied for its session to fill again: what
    /// its socket was reported ready for meanwhile.
    fn come_back(&mut self, slot: usize, generation: u32) -> Option<Ready> {
        match self.slots.get(slot)? {
            Slot::Away {
                generation: g,
                client,
            } if *g == generation => {
                let client = *client;
                self.slots[slot] = Slot::Free;
                Some(client)
            }
            _ => None,
        }
    }

    fn free_away(&mut self, slot: usize, generation: u32) {
        if matches!(self.slots.get(slot), Some(Slot::Away { generation: g, .. }) if *g == generation)
        {
            self.slots[slot] = Slot::Free;
            self.free.push(slot);
        }
    }
}

/// The relay a worker's epoll loop drives.
pub const WORKER_RELAY: worker::Relay = worker::Relay {
    any,
    has_pending,
    on_event,
    run_pending,
    give_back_all,
};

/// The worker's epoll failed: every session relayed here stops, to relay
/// on through its task (its sockets, still in the failed epoll, are left
/// there: nothing waits in it any more).
fn give_back_all() {
    let woken: Vec<Waker> = TABLE.with(|t| {
        let mut t = t.borrow_mut();
        t.pending.clear();
        t.slots
            .iter_mut()
            .filter_map(|s| match s {
                Slot::Here(e) if e.stop.is_none() => Some(e),
                _ => None,
            })
            .filter_map(|e| {
                leave_line(e);
                e.stop = Some(Stop::Fallback);
                e.pending = false;
                e.waiter.take()
            })
            .collect()
    });
    woken.into_iter().for_each(Waker::wake);
    // Grants left already go to the next in line.
    deliver_mail();
}

/// A session in line leaves it (it stops relaying here).
fn leave_line(e: &mut Entry) {
    if e.wait.take().is_some()
        && let Some(pooled) = e.parts.pooled.as_ref()
    {
        let ticket = token(e.slot, e.generation, 0);
        pooled.pool.leave_line(ticket, thread_mark());
    }
}

/// Sessions relay on this thread now.
fn any() -> bool {
    TABLE.try_with(|t| t.borrow().live > 0).unwrap_or(false)
}

/// A session waits for another turn.
fn has_pending() -> bool {
    has_mail()
        || line::due()
        || TABLE
            .try_with(|t| !t.borrow().pending.is_empty())
            .unwrap_or(false)
}

/// The session can relay here: this is a worker, both sockets are plain
/// TCP, and it needs none of what only its task can wait for.
pub(crate) fn may_relay(proto: &Protocol) -> bool {
    let up = &proto.services.config.upstream;
    worker::here() && up.rtt.is_zero() && up.busy_poll.is_zero()
}

/// Starts relaying `parts` on this worker, in its client's old place when
/// the session kept one (`away`); gives them back when its epoll will not
/// take the sockets.
pub(crate) fn enter(
    parts: Parts,
    away: Option<Spot>,
    span: &Span,
) -> Result<Relaying, Box<(Parts, io::Error)>> {
    let thread = thread_mark();
    let back = away.and_then(Spot::claim);
    let (slot, generation) = match back {
        Some((slot, generation, _)) => (slot, generation),
        None => TABLE.with(|t| {
            let mut t = t.borrow_mut();
            t.generation = t.generation.wrapping_add(1);
            let slot = t.free.pop().unwrap_or_else(|| {
                t.slots.push(Slot::Free);
                t.slots.len() - 1
            });
            (slot, t.generation)
        }),
    };
    let c = parts.client.as_raw_fd();
    let u = parts.upstream.as_ref().map(|u| u.as_raw_fd());
    let client_watched = match back {
        Some(_) => Ok(()),
        None => worker::watch(c, token(slot, generation, 0)),
    };
    let watched = client_watched.and_then(|()| match u {
        Some(u) => worker::watch(u, token(slot, generation, 1)).inspect_err(|_| {
            let _ = worker::unwatch(c);
        }),
        None => Ok(()),
    });
    if let Err(e) = watched {
        TABLE.with(|t| t.borrow_mut().free.push(slot));
        return Err(Box::new((parts, e)));
    }
    // Nothing is known readable yet of a new client: the epoll reports
    // what is, at once. One that stayed has its reports noted.
    let client = back.map_or(Ready::FRESH, |(_, _, ready)| ready);
    let mut entry = Entry {
        parts,
        slot,
        generation,
        client,
        upstream: Ready::FRESH,
        server: None,
        stop: None,
        waiter: None,
        pending: false,
        wait: None,
        span: span.clone(),
    };
    // What the handshake left in the buffers is handled now.
    let (more, _) = turns(&mut entry);
    // Run from the session's task, not the park hook: a task it woke
    // runs anyway, and the hook must not return for it later.
    woke_others();
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if more {
            t.pending.push((slot, generation));
        }
        t.slots[slot] = Slot::Here(entry);
        t.live += 1;
    });
    Ok(Relaying {
        slot,
        generation,
        thread,
    })
}

/// A session relaying on this worker, as its task sees it: ready when
/// relaying stopped. Dropped unfinished, it closes the session's sockets.
pub(crate) struct Relaying {
    slot: usize,
    generation: u32,
    thread: u64,
}

/// Takes `s` out of the worker's epoll, when it is to stay open (one that
/// closes leaves it by closing).
pub(crate) fn release(s: &TcpStream) {
    let _ = worker::unwatch(s.as_raw_fd());
}

impl Relaying {
    /// Takes the session back, with why relaying stopped, if it did. Its
    /// sockets are still in the worker's epoll (`release`): reports for
    /// them are ignored from now on, except for the client of a session
    /// without a connection, which keeps its place (the `Spot`).
    pub fn take(self) -> Option<(Parts, Option<Stop>, Option<Spot>)> {
        if self.thread != thread_mark() {
            return None;
        }
        TABLE
            .try_with(|t| {
                let mut t = t.try_borrow_mut().ok()?;
                let e = t.get(self.slot, self.generation)?;
                // Stopped while in line (shutdown, an idle timeout).
                leave_line(e);
                let released = e.parts.upstream.is_none();
                if !released {
                    let e = t.remove(self.slot, self.generation)?;
                    return Some((e.parts, e.stop, None));
                }
                let e = t.step_away(self.slot, self.generation)?;
                let spot = Spot {
                    slot: self.slot,
                    generation: self.generation,
                    thread: self.thread,
                };
                Some((e.parts, e.stop, Some(spot)))
            })
            .ok()
            .flatten()
    }

    fn remove(&self) -> Option<Entry> {
        if self.thread != thread_mark() {
            return None;
        }
        TABLE
            .try_with(|t| {
                let mut t = t.try_borrow_mut().ok()?;
                t.remove(self.slot, self.generation)
            })
            .ok()
            .flatten()
    }
}

/// A pooled session's client still in its worker's epoll while its task
/// waits for a connection: `enter` puts the session back in its place.
/// Dropped, the place is freed; the socket is left registered, since it
/// may be closed by then and its number another's (a socket that stays
/// open elsewhere `leave`s instead).
pub(crate) struct Spot {
    slot: usize,
    generation: u32,
    thread: u64,
}

impl Spot {
    /// The client goes elsewhere (the runtime): out of this epoll.
    pub fn leave(self, client: &TcpStream) {
        release(client);
    }

    /// The place, emptied for the session, with its client's readiness.
    fn claim(self) -> Option<(usize, u32, Ready)> {
        if self.thread != thread_mark() {
            return None;
        }
        let ready = TABLE
            .try_with(|t| {
                t.try_borrow_mut()
                    .ok()?
                    .come_back(self.slot, self.generation)
            })
            .ok()
            .flatten()?;
        Some((self.slot, self.generation, ready))
    }
}

impl Drop for Spot {
    fn drop(&mut self) {
        if self.thread == thread_mark() {
            let _ = TABLE.try_with(|t| {
                if let Ok(mut t) = t.try_borrow_mut() {
                    t.free_away(self.slot, self.generation);
                }
            });
        }
    }
}

impl Future for Relaying {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.thread != thread_mark() {
            return Poll::Ready(());
        }
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            let Some(e) = t.get(self.slot, self.generation) else {
                return Poll::Ready(());
            };
            if e.stop.is_some() {
                return Poll::Ready(());
            }
            match &e.waiter {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => e.waiter = Some(cx.waker().clone()),
            }
            if waited_too_long(e) {
                return Poll::Ready(());
            }
            Poll::Pending
        })
    }
}

/// A session in line past `query_wait_timeout` stops waiting, for its
/// task to tell its client (the line wakes the task then: `line`).
fn waited_too_long(e: &mut Entry) -> bool {
    let Some(wait) = e.wait.as_ref() else {
        return false;
    };
    let timeout = e.parts.proto.services.config.pool.query_wait_timeout;
    let waited = wait.since.elapsed();
    if waited < timeout {
        return false;
    }
    leave_line(e);
    if let Some(pooled) = e.parts.pooled.as_mut() {
        pooled.granted = Some(Err(pooled.pool.timed_out(waited, timeout)));
    }
    e.stop = Some(Stop::End(End::Release));
    true
}

impl Drop for Relaying {
    fn drop(&mut self) {
        // Taken already, or the task was stopped: then the session ends
        // here, its sockets closed (which takes them out of the epoll).
        if let Some(mut e) = self.remove() {
            leave_line(&mut e);
        }
    }
}

/// A readiness report for a relayed socket; true when it woke a task.
fn on_event(ev: Event) -> bool {
    let (slot, generation, side) = match ev.data & SERVER {
        0 => untoken(ev.data),
        _ => match SERVERS.with(|s| s.borrow().get(&ev.data).copied()) {
            Some((slot, generation)) => (slot, generation, 1),
            // Idle in its pool, or held by a session elsewhere.
            None => return false,
        },
    };
    let woke = TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if let Some(Slot::Away {
            generation: g,
            client,
        }) = t.slots.get_mut(slot)
            && *g == generation
        {
            client.note(ev);
            return None;
        }
        let e = t.get(slot, generation)?;
        if e.stop.is_some() {
            return None;
        }
        let ready = if side == 0 {
            &mut e.client
        } else {
            &mut e.upstream
        };
        ready.note(ev);
        if e.pending {
            // Its turn comes with the others waiting.
            return None;
        }
        let (more, waiter) = turns(e);
        if more {
            t.pending.push((slot, generation));
        }
        waiter
    });
    // A connection given back in that turn goes to the next in line at
    // once: it would otherwise sit idle until the batch of reports is done.
    let handed = has_mail() && deliver_mail();
    wake(woke) | handed | woke_others()
}

/// Another turn for each session that ran out of them; true when one
/// stopped and its task was woken.
fn run_pending() -> bool {
    let mut woke = deliver_mail() | check_line();
    let Ok(waiting) = TABLE.try_with(|t| std::mem::take(&mut t.borrow_mut().pending)) else {
        return woke;
    };
    for (slot, generation) in waiting {
        let w = TABLE.with(|t| {
            let mut t = t.borrow_mut();
            let e = t.get(slot, generation)?;
            e.pending = false;
            if e.stop.is_some() {
                return None;
            }
            let (more, waiter) = turns(e);
            if more {
                t.pending.push((slot, generation));
            }
            waiter
        });
        woke |= wake(w);
    }
    woke | woke_others()
}

/// The line's deadline, or its leftovers (`line::check`).
fn check_line() -> bool {
    let Ok(sessions) = TABLE.try_with(|t| t.borrow().live) else {
        return false;
    };
    line::check(sessions, |slot, generation, since| {
        TABLE.with(|t| match t.borrow_mut().get(slot, generation) {
            Some(e) if e.wait.as_ref().is_some_and(|w| w.since == since) => {
                line::Seen::Waits(e.waiter.clone())
            }
            _ => line::Seen::Left,
        })
    })
}

fn wake(w: Option<Waker>) -> bool {
    match w {
        Some(w) => {
            w.wake();
            true
        }
        None => false,
    }
}

/// Runs the session's turns: whether it waits for another turn (and is
/// marked so), and the task to wake when relaying has just stopped. In
/// the session's span when something may log at debug level (the relay
/// loop itself logs nothing).
fn turns(e: &mut Entry) -> (bool, Option<Waker>) {
    let more = if tracing::enabled!(tracing::Level::DEBUG) {
        let span = e.span.clone();
        span.in_scope(|| run(e))
    } else {
        run(e)
    };
    if e.stop.is_some() {
        return (false, e.waiter.take());
    }
    e.pending = more;
    (more, None)
}

/// Up to `TURNS` turns; true when the session could go on.
fn run(e: &mut Entry) -> bool {
    for _ in 0..TURNS {
        match turn(e) {
            Ok(true) => {}
            Ok(false) => return false,
            Err(stop) => {
                e.stop = Some(stop);
                return false;
            }
        }
    }
    true
}

/// One turn of the relay loop: the buffered input handled, what the
/// sockets take written, then what they hold read. True when it read
/// something (so there is more to handle).
fn turn(e: &mut Entry) -> Result<bool, Stop> {
    let Parts {
        client,
        upstream: held,
        proto,
        bufs: b,
        seat,
        pooled,
    } = &mut e.parts;
    let Some(upstream) = held.as_ref() else {
        return released(e);
    };
    super::process(proto, b).map_err(|err| Stop::End(End::Error(err)))?;
    if b.to_up.wants_write() && e.upstream.write {
        match b.to_up.write_to(upstream) {
            Ok(all) => e.upstream.write = all,
            Err(err) => {
                let why = format!("upstream write: {err}");
                return Err(Stop::End(End::UpstreamClosed(Some(why))));
            }
        }
    }
    // A pooled connection goes back before the answer is written, which
    // `released` writes then (`server_done`).
    let early = pooled.is_some() && super::server_done(proto, b);
    if !early {
        if b.to_client.wants_write() && e.client.write {
            match b.to_client.write_to(client) {
                Ok(all) => e.client.write = all,
                Err(err) => return Err(Stop::End(End::Error(format!("client write: {err}")))),
            }
        }
        if super::client_done(proto, b) {
            return Err(Stop::End(End::ClientClosed));
        }
    }
    if early || super::release_due(proto, b) {
        let Some(pooled) = pooled.as_mut() else {
            return Err(Stop::End(End::Release));
        };
        // Given back here, not by the session's task: the client stays in
        // this epoll, and so does the connection, for the next session
        // here to take without a system call (`Kept`); one watched under
        // the session's own token leaves it.
        let kept = e.server.take();
        match &kept {
            Some(k) => _ = SERVERS.with(|s| s.borrow_mut().remove(&k.data())),
            None => _ = worker::unwatch(upstream.as_raw_fd()),
        }
        if let Some(up) = held.take()
            && pooled.give_back(ServerConn::Plain(up), kept, proto)
        {
            WOKE_OTHERS.with(|w| w.set(true));
        }
        e.upstream = Ready::FRESH;
        // Empty here: read room is taken again with the next bytes, so a
        // client idle between transactions holds none.
        proto.let_go_of_reads();
        super::give_back_room(&mut b.cin);
        super::give_back_room(&mut b.uin);
        return Ok(true);
    }
    if let Some(j) = super::move_due(proto, b, seat) {
        return Err(Stop::End(End::Move(j)));
    }
    if proto.delay_until().is_some() || proto.cypher.wait_handle().is_some() {
        return Err(Stop::Fallback);
    }
    let (read_client, read_up) = super::wants_reads(proto, b);
    let c = &proto.info.counters;
    let mut read = false;
    if read_up && e.upstream.read {
        match read_into(upstream, &mut b.uin) {
            Ok((0, _)) => return Err(Stop::End(End::UpstreamClosed(None))),
            Ok((n, drained)) => {
                Counters::add(&c.bytes_from_upstream, n as u64);
                e.upstream.read_some(drained);
                read = true;
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => e.upstream.read = false,
            Err(err) => {
                let why = format!("upstream read: {err}");
                return Err(Stop::End(End::UpstreamClosed(Some(why))));
            }
        }
    }
    if read_client && e.client.read {
        match read_into(client, &mut b.cin) {
            Ok((0, _)) => return Err(Stop::End(End::ClientClosed)),
            Ok((n, drained)) => {
                Counters::add(&c.bytes_from_client, n as u64);
                e.client.read_some(drained);
                read = true;
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => e.client.read = false,
            Err(err) => return Err(Stop::End(End::Error(format!("client read: {err}")))),
        }
    }
    Ok(read)
}

/// A turn of a pooled session without a connection: its client's next
/// bytes read, then a connection of its pool taken for them, or a place
/// in line for one, here; the session's task takes over when it must
/// open a connection or make its settings on one.
fn released(e: &mut Entry) -> Result<bool, Stop> {
    // In line for a connection: it comes by the mailbox. A client that
    // hangs up meanwhile frees its place at once (its statement must not
    // run for nobody).
    if e.wait.is_some() {
        return in_line(e).map(|()| false);
    }
    let Parts {
        client,
        proto,
        bufs: b,
        pooled,
        ..
    } = &mut e.parts;
    // What was answered here (a held BEGIN) goes out first.
    if b.to_client.wants_write() {
        if !e.client.write {
            return Ok(false);
        }
        match b.to_client.write_to(client) {
            Ok(all) => e.client.write = all,
            Err(err) => return Err(Stop::End(End::Error(format!("client write: {err}")))),
        }
        if b.to_client.wants_write() {
            return Ok(false);
        }
    }
    if b.cin.is_empty() {
        if !e.client.read {
            return Ok(false);
        }
        match read_into(client, &mut b.cin) {
            Ok((0, _)) => return Err(Stop::End(End::ClientClosed)),
            Ok((n, drained)) => {
                Counters::add(&proto.info.counters.bytes_from_client, n as u64);
                e.client.read_some(drained);
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                e.client.read = false;
                return Ok(false);
            }
            Err(err) => return Err(Stop::End(End::Error(format!("client read: {err}")))),
        }
    }
    // Saying goodbye: no connection is taken for that.
    if b.cin.starts_with(&write::TERMINATE) {
        return Err(Stop::End(End::ClientClosed));
    }
    // A BEGIN the session holds, and its end, need no connection; nor
    // does the read room once all that was read is answered.
    if proto.answer_alone(&mut b.cin, &mut b.to_client) {
        if b.cin.is_empty() {
            proto.let_go_of_reads();
            super::give_back_room(&mut b.cin);
        }
        return Ok(true);
    }
    let Some(pooled) = pooled.as_mut() else {
        return Err(Stop::End(End::Release));
    };
    let Some(to) = mailbox() else {
        return Err(Stop::End(End::Release));
    };
    let to: Arc<dyn Deliver> = to;
    match pooled.take_or_wait(proto, &to, token(e.slot, e.generation, 0)) {
        Waiting::Ready(tcp, kept) => attach(e, tcp, kept).map(|()| true),
        Waiting::Task => Err(Stop::End(End::Release)),
        Waiting::InLine => {
            // Its query is on its way: not idle (`client_idle_timeout`).
            e.parts.proto.info.set_state(SessionState::Active);
            let since = Instant::now();
            let timeout = e.parts.proto.services.config.pool.query_wait_timeout;
            line::join(since, since + timeout, e.slot, e.generation);
            e.wait = Some(InLine { since });
            Ok(false)
        }
    }
}

/// A turn of a session in line: what its client sends is read (up to
/// `[limits] buffer_bytes`), and its end ends the session's wait.
fn in_line(e: &mut Entry) -> Result<(), Stop> {
    let limit = e.parts.proto.services.config.limits.buffer_bytes;
    while e.client.read && e.parts.bufs.cin.len() < limit {
        let Parts {
            client,
            proto,
            bufs,
            ..
        } = &mut e.parts;
        match read_into(client, &mut bufs.cin) {
            Ok((0, _)) => {
                leave_line(e);
                return Err(Stop::End(End::ClientClosed));
            }
            Ok((n, drained)) => {
                Counters::add(&proto.info.counters.bytes_from_client, n as u64);
                e.client.read_some(drained);
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => e.client.read = false,
            Err(err) => {
                leave_line(e);
                return Err(Stop::End(End::Error(format!("client read: {err}"))));
            }
        }
    }
    Ok(())
}

/// The session goes on over `tcp`, a connection it just took: kept in
/// this epoll already, or put there now (out of another worker's).
fn attach(e: &mut Entry, tcp: TcpStream, kept: Option<Kept>) -> Result<(), Stop> {
    let fd = tcp.as_raw_fd();
    let kept = match kept {
        Some(k) if k.here() => Ok(k),
        elsewhere => {
            if let Some(k) = elsewhere {
                k.end(fd);
            }
            worker::keep_watching(fd, server_token())
        }
    };
    let Parts {
        upstream,
        proto,
        bufs: b,
        pooled,
        ..
    } = &mut e.parts;
    let Ok(kept) = kept else {
        if let Some(pooled) = pooled.as_mut() {
            pooled.give_back(ServerConn::Plain(tcp), None, proto);
        }
        return Err(Stop::End(End::Release));
    };
    SERVERS.with(|s| s.borrow_mut().insert(kept.data(), (e.slot, e.generation)));
    e.server = Some(kept);
    // Not known readable: reports while it was idle went to nobody, and
    // its next data comes as an answer to what the session sends now.
    *upstream = Some(tcp);
    e.upstream = Ready::FRESH;
    proto.start_if_due(&mut b.to_up);
    Ok(())
}

/// Hands the grants left in this worker's mailbox to the sessions waiting
/// in line for them; a grant whose session stopped waiting goes to the
/// next in line. True when a task was woken.
// A grant is moved, not boxed (`pooling::Grant`).
#[allow(clippy::result_large_err)]
fn deliver_mail() -> bool {
    let mut woke = false;
    loop {
        let mut mail = take_mail();
        if mail.is_empty() {
            return woke;
        }
        for (ticket, grant) in mail.drain(..) {
            let (slot, generation, _) = untoken(ticket);
            let given = TABLE.with(|t| {
                let mut t = t.borrow_mut();
                let Some(e) = t.get(slot, generation) else {
                    return Err(grant);
                };
                if e.stop.is_some() || e.wait.is_none() {
                    return Err(grant);
                }
                let waiter = granted(e, grant);
                if e.stop.is_some() || e.pending {
                    return Ok(waiter);
                }
                // Its statement goes to the server now, not after the batch.
                let (more, waiter) = turns(e);
                if more {
                    t.pending.push((slot, generation));
                }
                Ok(waiter)
            });
            woke |= match given {
                Ok(waiter) => wake(waiter),
                Err(grant) => grant.pass_on(),
            };
        }
        recycle_mail(mail);
    }
}

/// A session waiting in line got `grant`: it goes on over it here, or
/// its task (woken: returned) opens a connection or makes its settings.
fn granted(e: &mut Entry, grant: Grant) -> Option<Waker> {
    let waited = e.wait.take().map(|w| w.since.elapsed()).unwrap_or_default();
    let Parts { proto, pooled, .. } = &mut e.parts;
    let Some(pooled) = pooled.as_mut() else {
        drop(grant);
        e.stop = Some(Stop::End(End::Release));
        return e.waiter.take();
    };
    let up = &proto.services.config.upstream;
    let (max_idle, lifetime) = (up.reuse_idle_timeout, up.reuse_lifetime);
    let grant = pooled.pool.waited(waited, grant, max_idle, lifetime);
    let stop = match pooled.use_grant(proto, grant) {
        Waiting::Ready(tcp, kept) => attach(e, tcp, kept).err(),
        Waiting::Task | Waiting::InLine => Some(Stop::End(End::Release)),
    };
    if stop.is_some() {
        e.stop = stop;
        return e.waiter.take();
    }
    None
}

/// One read into `buf`'s spare room: how much, and whether it emptied
/// the socket (a short read does, on a stream socket).
fn read_into(s: &TcpStream, buf: &mut BytesMut) -> io::Result<(usize, bool)> {
    super::reserve(buf);
    let len = buf.len();
    let room = buf.capacity() - len;
    loop {
        let spare = buf.spare_capacity_mut();
        // SAFETY: recv writes at most `room` bytes into the spare room.
        let n = unsafe { libc::recv(s.as_raw_fd(), spare.as_mut_ptr().cast(), room, 0) };
        if n >= 0 {
            let n = n as usize;
            // SAFETY: the first `n` spare bytes were just written.
            unsafe { buf.set_len(len + n) };
            return Ok((n, n < room));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_keep_slot_generation_and_side() {
        for (slot, generation, side) in [(0, 1, 0), (7, u32::MAX, 1), ((1 << 30) + 3, 12345, 1)] {
            assert_eq!(
                untoken(token(slot, generation, side)),
                (slot, generation, side)
            );
        }
        assert_ne!(token(0, 0, 0), u64::MAX, "never the runtime's word");
    }

    #[test]
    fn kept_servers_have_words_of_their_own() {
        let (a, b) = (server_token(), server_token());
        assert_ne!(a, b);
        for w in [a, b] {
            assert_ne!(w & SERVER, 0);
            assert!(w < u64::MAX - 1, "never the runtime's or the bell's word");
        }
        assert_eq!(token(1 << 20, u32::MAX, 1) & SERVER, 0, "a session's slot");
    }

    /// A grant left from another thread rings the worker's bell: the
    /// sleeping worker wakes, finds no session waiting under its ticket,
    /// and passes the grant on (a place, here: freed).
    #[test]
    fn a_grant_from_another_thread_wakes_the_worker_and_passes_on() {
        let workers = crate::workers(1).expect("a worker");
        assert_eq!(workers.relaying_themselves(), 1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let handle = workers.handles()[0].clone();
        let mb = rt
            .block_on(handle.spawn(async { mailbox() }))
            .unwrap()
            .expect("a worker's mailbox");
        let pools = crate::pooling::Pools::new(1, 10);
        let pool = pools.pool("d", "u").unwrap();
        let long = std::time::Duration::from_secs(60);
        let wants = crate::pooling::Wants::nothing();
        let Ok(grant @ Grant::Open(_)) = rt.block_on(pool.acquire(long, long, long, wants)) else {
            panic!("a place to open a connection in");
        };
        let active = || pools.rows().first().map_or(0, |r| r.active);
        assert_eq!(active(), 1);
        mb.deliver(token(12345, 7, 0), grant);
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while active() != 0 {
            assert!(
                Instant::now() < deadline,
                "the worker never looked at its mail"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn a_read_fills_spare_room_and_tells_a_short_one() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut buf = BytesMut::from(&b"ab"[..]);
        assert_eq!(
            read_into(&b, &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        a.write_all(b"cde").unwrap();
        let got = loop {
            match read_into(&b, &mut buf) {
                Ok(r) => break r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(got, (3, true));
        assert_eq!(&buf[..], b"abcde");
        drop(a);
        assert_eq!(read_into(&b, &mut buf).unwrap(), (0, true));
    }
}
