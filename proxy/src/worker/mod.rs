//! Worker threads. Each runs a one-thread tokio runtime for what is
//! sequential in a session (accepting, startup, authentication, the admin
//! console, keeping connections), and relays its plain-TCP sessions itself
//! with epoll, without tokio: the relay is handed in when the workers start
//! (`Relay`), so this module knows sockets and events, not sessions.
//!
//! Why: a tokio task woken for every socket event costs about 3k
//! instructions per forwarded query on top of the proxy's own work, and at
//! one client it showed as 3-4 us more latency per query than a bare epoll
//! forwarder (interleaved, on a 2-vCPU VM). PgBouncer is such a forwarder.
//!
//! How: the runtime calls `park` whenever it has nothing to run, just
//! before it would wait in its own epoll. `park` waits instead in the
//! worker's epoll, which holds the relayed sockets and, level-triggered,
//! the runtime's epoll: relayed traffic is handled right there, and the
//! wait ends as soon as the runtime has something to do (a socket of its
//! own, a wake-up from another thread) or a deadline of this thread
//! passes. The runtime has no timer driver; `deadlines` keeps its timers.
//!
//! tokio does not expose its epoll: `threads` finds it as the descriptor
//! that appears while the runtime is built (ARCHITECTURE.md says why this
//! is worth it, and what happens when it can't be found). Should the
//! worker's own epoll ever fail, the worker gives its sessions back to
//! their tasks, which relay on through the runtime, and from then on waits
//! in the runtime's epoll itself, so its deadlines still fire.

pub mod deadlines;
pub mod epoll;
pub mod raw;
pub mod seats;
mod threads;

use std::{
    cell::{OnceCell, RefCell},
    io,
    os::fd::RawFd,
};

pub use threads::Workers;

use epoll::{Epoll, Events};

/// The data word of the runtime's own epoll in the worker's.
const RUNTIME: u64 = u64::MAX;
/// The data word of the worker's bell (`Bell`).
const BELL: u64 = u64::MAX - 1;

/// The relay a worker's epoll loop drives: plain functions of the
/// relaying thread's own table, so a report costs no dynamic dispatch
/// beyond the call.
#[derive(Clone, Copy)]
pub struct Relay {
    /// Sessions relay on this thread now.
    pub any: fn() -> bool,
    /// A session waits for another turn.
    pub has_pending: fn() -> bool,
    /// A readiness report for a watched socket; true when it woke a task.
    pub on_event: fn(epoll::Event) -> bool,
    /// Another turn for the sessions waiting for one; true when it woke a
    /// task.
    pub run_pending: fn() -> bool,
    /// The worker's epoll failed: every session goes back to its task.
    pub give_back_all: fn(),
}

/// Wakes a worker from another thread (an eventfd in its epoll): what was
/// left for its relay (`Relay::has_pending`) is then handled at once.
pub struct Bell {
    fd: std::os::fd::OwnedFd,
}

impl Bell {
    fn new() -> io::Result<Self> {
        use std::os::fd::FromRawFd;
        // SAFETY: no pointers; a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Self {
            fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn ring(&self) {
        use std::os::fd::AsRawFd;
        let one = 1u64.to_ne_bytes();
        // SAFETY: 8 bytes from a live buffer. A full counter (never in
        // practice) means the worker is to wake anyway.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// Quiet again (it is watched level-triggered).
    fn clear(&self) {
        use std::os::fd::AsRawFd;
        let mut n = [0u8; 8];
        // SAFETY: 8 bytes into a live buffer.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), n.as_mut_ptr().cast(), 8) };
    }
}

struct Reactor {
    /// Shared with the sockets kept in it (`Watched`), which may leave it
    /// from another thread.
    epoll: std::sync::Arc<Epoll>,
    bell: std::sync::Arc<Bell>,
    events: RefCell<Events>,
    relay: Relay,
    /// The runtime's own epoll, waited in directly once ours has failed.
    runtime_epoll: RawFd,
    failed: std::cell::Cell<bool>,
    /// The next wait fails, as if the kernel had refused it (tests).
    fail_next: std::cell::Cell<bool>,
}

thread_local! {
    static REACTOR: OnceCell<Reactor> = const { OnceCell::new() };
    static THREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

static THREADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A number of this thread's own: what lives in a thread's tables (a
/// relayed session, a deadline) can tell whether it is on its own thread.
pub fn thread_mark() -> u64 {
    THREAD.with(|t| {
        if t.get() == 0 {
            t.set(THREADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        t.get()
    })
}

impl Reactor {
    /// A worker's epoll, holding the runtime's `runtime_epoll`.
    fn new(runtime_epoll: RawFd, relay: Relay) -> io::Result<Self> {
        let epoll = Epoll::new()?;
        epoll.add(runtime_epoll, epoll::LEVEL_READABLE, RUNTIME)?;
        let bell = Bell::new()?;
        epoll.add(
            std::os::fd::AsRawFd::as_raw_fd(&bell.fd),
            epoll::LEVEL_READABLE,
            BELL,
        )?;
        Ok(Self {
            epoll: std::sync::Arc::new(epoll),
            bell: std::sync::Arc::new(bell),
            events: RefCell::new(Events::with_capacity(256)),
            relay,
            runtime_epoll,
            failed: std::cell::Cell::new(false),
            fail_next: std::cell::Cell::new(false),
        })
    }
}

impl Reactor {
    /// Waits for the runtime's own epoll to have work, or the next
    /// deadline, without the worker's epoll; fires what is due.
    fn wait_in_runtime_epoll(&self) {
        loop {
            let mut fd = libc::pollfd {
                fd: self.runtime_epoll,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd, ours, for the duration of the call.
            let n = unsafe { libc::poll(&mut fd, 1, deadlines::wait_ms()) };
            let fired = deadlines::fire();
            if n != 0 || fired {
                return;
            }
        }
    }
}

/// Makes this thread the worker that `reactor` serves.
fn install(reactor: Reactor) {
    deadlines::install();
    REACTOR.with(|r| {
        let _ = r.set(reactor);
    });
}

/// This thread relays sessions itself.
pub fn here() -> bool {
    REACTOR
        .try_with(|r| r.get().is_some_and(|r| !r.failed.get()))
        .unwrap_or(false)
}

/// Makes this worker's next epoll wait fail, to see that its sessions go
/// on through the runtime. For tests.
#[doc(hidden)]
pub fn fail_next_wait() {
    let _ = REACTOR.try_with(|r| {
        if let Some(r) = r.get() {
            r.fail_next.set(true);
        }
    });
}

/// Watches `fd` (edge-triggered, read and write) for this thread's relay.
pub fn watch(fd: RawFd, data: u64) -> io::Result<()> {
    REACTOR.with(|r| match r.get() {
        Some(r) => r.epoll.add(fd, epoll::SOCKET, data),
        None => Err(io::Error::other("not a worker thread")),
    })
}

/// A socket that stays in a worker's epoll beyond one session's use: a
/// pooled server connection stays in the epoll of the worker that relayed
/// it last, so that the next session there takes it without a system
/// call. Reports for it while no session holds it are dropped.
pub struct Watched {
    epoll: std::sync::Arc<Epoll>,
    thread: u64,
    data: u64,
}

impl Watched {
    /// The data word its reports carry.
    pub fn data(&self) -> u64 {
        self.data
    }

    /// The thread whose worker's epoll it is in (`thread_mark`).
    pub fn thread(&self) -> u64 {
        self.thread
    }

    /// This thread's relay can take it as it is.
    pub fn here(&self) -> bool {
        self.thread == thread_mark() && here()
    }

    /// Takes `fd`, the socket it was made for, out of the epoll: it goes
    /// elsewhere. It is still open, so the number is still its.
    pub fn end(self, fd: RawFd) {
        let _ = self.epoll.delete(fd);
    }
}

/// Watches `fd` as `watch` does, for as long as the `Watched` travels with it.
pub fn keep_watching(fd: RawFd, data: u64) -> io::Result<Watched> {
    REACTOR.with(|r| match r.get() {
        Some(r) => {
            r.epoll.add(fd, epoll::SOCKET, data)?;
            Ok(Watched {
                epoll: r.epoll.clone(),
                thread: thread_mark(),
                data,
            })
        }
        None => Err(io::Error::other("not a worker thread")),
    })
}

/// This worker's bell, for other threads to wake it with.
pub fn bell() -> Option<std::sync::Arc<Bell>> {
    REACTOR
        .try_with(|r| r.get().map(|r| r.bell.clone()))
        .ok()
        .flatten()
}

/// Stops watching `fd`.
pub fn unwatch(fd: RawFd) -> io::Result<()> {
    REACTOR
        .try_with(|r| match r.get() {
            Some(r) => r.epoll.delete(fd),
            None => Ok(()),
        })
        .unwrap_or(Ok(()))
}

thread_local! {
    /// Whether something on this thread woke a task of its runtime from
    /// outside the relay's own reports (`note_woken`).
    static WOKEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Something on this thread just woke a task of this thread's runtime (a
/// waker it called from inside a turn): the park hook returns to the
/// runtime after this turn instead of waiting in epoll, where the task
/// would sit unrun until the next event.
pub fn note_woken() {
    let _ = WOKEN.try_with(|w| w.set(true));
}

fn take_woken() -> bool {
    WOKEN.try_with(|w| w.take()).unwrap_or(false)
}

/// The runtime's park hook: relays until the runtime has work.
fn park() {
    let _ = REACTOR.try_with(|r| {
        if let Some(r) = r.get() {
            r.run(true);
        }
    });
}

/// Relays what is ready now, without waiting: called by the runtime's
/// own busy sessions now and then, since a runtime that always has work
/// never parks.
pub fn poll_now() {
    let _ = REACTOR.try_with(|r| {
        if let Some(r) = r.get()
            && (r.relay.any)()
        {
            r.run(false);
        }
    });
}

impl Reactor {
    /// One turn when `!park`; otherwise turns until the runtime has work.
    fn run(&self, park: bool) {
        // Not reentrant: a turn never calls back into the runtime.
        let Ok(mut events) = self.events.try_borrow_mut() else {
            return;
        };
        if self.failed.get() {
            if park {
                self.wait_in_runtime_epoll();
            }
            return;
        }
        let relay = self.relay;
        loop {
            let wait = match park && !(relay.has_pending)() {
                true => deadlines::wait_ms(),
                false => 0,
            };
            let waited = match self.fail_next.take() {
                true => Err(io::Error::other("made to fail")),
                false => self.epoll.wait(&mut events, wait),
            };
            if let Err(e) = waited {
                // Not seen in practice (only a bad descriptor or buffer
                // fails it). The sessions go on through the runtime.
                tracing::error!(
                    "worker epoll wait failed: {e}; its sessions relay through the runtime from now on"
                );
                deadlines::turn_ends();
                self.failed.set(true);
                (relay.give_back_all)();
                return;
            }
            deadlines::turn_begins();
            let mut runtime_has_work = deadlines::fire();
            for i in 0..events.len() {
                let Some(ev) = events.get(i) else { break };
                if ev.data == RUNTIME {
                    runtime_has_work = true;
                } else if ev.data == BELL {
                    // What it was rung for is handled by `run_pending`.
                    self.bell.clear();
                } else {
                    runtime_has_work |= (relay.on_event)(ev);
                }
            }
            runtime_has_work |= (relay.run_pending)();
            runtime_has_work |= take_woken();
            if runtime_has_work || !park {
                deadlines::turn_ends();
                return;
            }
        }
    }
}
