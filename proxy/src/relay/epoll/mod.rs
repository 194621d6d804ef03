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

mod pooled;
mod spare;
mod sweep;
mod sys;
mod table;
mod turn;

use std::{
    future::Future,
    io,
    net::TcpStream,
    os::fd::AsRawFd,
    pin::Pin,
    task::{Context, Poll, Waker},
};

use tracing::Span;

use self::{
    pooled::{SERVER, check_line, deliver_mail, has_mail, leave_line, waited_too_long},
    sys::wake,
    table::{Entry, Ready, SERVERS, Slot, TABLE, token, untoken},
    turn::{turns, woke_others},
};

pub(crate) use self::spare::unboxed;
pub use self::sweep::rooms_held;
pub(crate) use self::table::{Parts, Stop};
use super::line;
use crate::{
    protocol::Protocol,
    worker::{self, epoll::Event, thread_mark},
};

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
    deliver_mail(turns);
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
    let config = &proto.services.config;
    let up = &config.upstream;
    // Reads routed to replicas wait for their answer in the session's task
    // (`relay/replica/`): a pooled session's, between transactions.
    let routes_reads = match proto.pooled {
        false => config.replicas.any(),
        true => proto.routes_reads(),
    };
    worker::here() && up.rtt.is_zero() && up.busy_poll.is_zero() && !routes_reads
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
    let mut entry = Box::new(Entry {
        parts,
        slot,
        generation,
        client,
        upstream: Ready::FRESH,
        server: None,
        stop: None,
        waiter: None,
        pending: false,
        read_at_sweep: u64::MAX,
        compacted: false,
        wait: None,
        span: span.clone(),
    });
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
    sweep::arm();
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

    /// The session's inbox has something (`protocol::listen`): a turn
    /// hands it to the client if the session is idle; else it goes at the
    /// session's next idle point.
    pub fn nudge(&self) {
        if self.thread != thread_mark() {
            return;
        }
        let waiter = TABLE
            .try_with(|t| {
                let mut t = t.try_borrow_mut().ok()?;
                let e = t.get(self.slot, self.generation)?;
                if e.stop.is_some() || e.pending || e.wait.is_some() {
                    return None;
                }
                let (more, waiter) = turns(e);
                if more {
                    t.pending.push((self.slot, self.generation));
                }
                waiter
            })
            .ok()
            .flatten();
        // Run from the session's task: a task it woke runs anyway.
        woke_others();
        wake(waiter);
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
    let handed = has_mail() && deliver_mail(turns);
    wake(woke) | handed | woke_others()
}

/// Another turn for each session that ran out of them; true when one
/// stopped and its task was woken.
fn run_pending() -> bool {
    let mut woke = deliver_mail(turns) | check_line();
    // Its deadline fired just before, in the same turn of the worker's
    // loop (`deadlines::fire`): nothing else need ask whether it is due.
    sweep::check();
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
