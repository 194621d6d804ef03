//! Worker threads. Each runs a one-thread tokio runtime for what is
//! sequential in a session (accepting, startup, authentication, the admin
//! console, keeping connections), and relays its plain-TCP sessions itself
//! with epoll (`session::fast`), without tokio.
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

pub mod deadlines;
pub mod epoll;
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

struct Reactor {
    epoll: Epoll,
    events: RefCell<Events>,
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
    fn new(runtime_epoll: RawFd) -> io::Result<Self> {
        let epoll = Epoll::new()?;
        epoll.add(runtime_epoll, epoll::LEVEL_READABLE, RUNTIME)?;
        Ok(Self {
            epoll,
            events: RefCell::new(Events::with_capacity(256)),
        })
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
    REACTOR.try_with(|r| r.get().is_some()).unwrap_or(false)
}

/// Watches `fd` (edge-triggered, read and write) for this thread's relay.
pub fn watch(fd: RawFd, data: u64) -> io::Result<()> {
    REACTOR.with(|r| match r.get() {
        Some(r) => r.epoll.add(fd, epoll::SOCKET, data),
        None => Err(io::Error::other("not a worker thread")),
    })
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
    if !crate::relay::epoll::any() {
        return;
    }
    let _ = REACTOR.try_with(|r| {
        if let Some(r) = r.get() {
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
        loop {
            let wait = match park && !crate::relay::epoll::has_pending() {
                true => deadlines::wait_ms(),
                false => 0,
            };
            if let Err(e) = self.epoll.wait(&mut events, wait) {
                // Not seen in practice (only a bad descriptor or buffer
                // fails it): let the runtime go on alone.
                tracing::error!("worker epoll wait failed: {e}");
                return;
            }
            let mut runtime_has_work = deadlines::fire();
            for i in 0..events.len() {
                let Some(ev) = events.get(i) else { break };
                if ev.data == RUNTIME {
                    runtime_has_work = true;
                } else {
                    runtime_has_work |= crate::relay::epoll::on_event(ev);
                }
            }
            runtime_has_work |= crate::relay::epoll::run_pending();
            if runtime_has_work || !park {
                return;
            }
        }
    }
}
