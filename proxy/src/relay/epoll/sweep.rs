//! Read room given back by sessions that stay quiet. A pooled session
//! gives its room back at every release point; any other keeps it while
//! it relays, since giving it back after every transaction would cost
//! each one a copy of what it keeps of its reads. Instead, every
//! `EVERY` the worker looks over its sessions once: one that read nothing
//! since the last look and holds no bytes in its buffers gives its room
//! back to the thread's spare list, and takes room again with its next
//! read. An idle client then holds no read room, at no cost per
//! transaction. The same look has a quiet session give back the room of
//! its empty lists (what is in flight, its write queues) and hand its
//! round trips per statement to the shared statistics, once per quiet
//! spell; and a session whose buffers hold nothing gives the buffers
//! themselves back (`spare`). The look is one deadline per worker, armed while sessions relay
//! here (as `line`'s).

use std::{
    cell::{Cell, RefCell},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Wake, Waker},
    time::{Duration, Instant},
};

use super::{
    spare,
    table::{Slot, TABLE},
};
use crate::{protocol, relay, worker::deadlines};

/// How often a worker looks for quiet sessions.
const EVERY: Duration = Duration::from_secs(1);

struct Sweep {
    timer: Option<deadlines::Key>,
    waker: Waker,
}

/// Wakes the look: the deadline fires on the worker's own thread, and
/// `DUE` is that thread's (asked at every turn of the worker's loop, so a
/// plain flag, not a lock or a shared atomic).
struct Due;

impl Wake for Due {
    fn wake(self: Arc<Self>) {
        let _ = DUE.try_with(|d| d.set(true));
    }
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep {
            timer: None,
            waker: Waker::from(Arc::new(Due)),
        }
    }
}

thread_local! {
    static DUE: Cell<bool> = const { Cell::new(false) };
    static SWEEP: RefCell<Sweep> = RefCell::default();
    /// This worker's count for `rooms_held`.
    static HELD_HERE: Arc<AtomicUsize> = {
        let held = Arc::new(AtomicUsize::new(0));
        HELD.lock().unwrap_or_else(|e| e.into_inner()).push(held.clone());
        held
    };
}

/// Each worker's sessions that held buffers at its last look (taken
/// once per worker thread, to register; read by `rooms_held`).
static HELD: Mutex<Vec<Arc<AtomicUsize>>> = Mutex::new(Vec::new());

/// Sessions of this process's workers holding buffers (read room, or
/// their `Bufs` at all), as each worker's last look found them (after the
/// quiet ones gave theirs back): idle clients hold none. For reports and
/// tests.
pub fn rooms_held() -> usize {
    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|h| h.load(Ordering::Relaxed))
        .sum()
}

/// A session entered this worker's relay: the look is armed, if it was
/// not.
pub(super) fn arm() {
    let _ = SWEEP.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.timer.is_none() {
            s.timer = deadlines::arm_internal(Instant::now() + EVERY, &s.waker);
        }
    });
}

/// When due: the quiet sessions give their read room back, every session
/// is marked unread for the next look, and the look is armed again while
/// any session relays here. Returns how many gave room back.
pub(super) fn check() -> usize {
    if !DUE.try_with(|d| d.replace(false)).unwrap_or(false) {
        return 0;
    }
    let _ = SWEEP.try_with(|s| s.borrow_mut().timer = None);
    let (gave, held, live) = TABLE.with(|t| {
        let mut t = t.borrow_mut();
        let (mut gave, mut held) = (0, 0);
        let mut stats = None;
        for slot in t.slots.iter_mut() {
            let Slot::Here(e) = slot else { continue };
            stats.get_or_insert_with(|| e.parts.proto.services.stats.clone());
            let c = &e.parts.proto.info.counters;
            let bytes = c.bytes_from_client.load(Ordering::Relaxed)
                + c.bytes_from_upstream.load(Ordering::Relaxed);
            let read = std::mem::replace(&mut e.read_at_sweep, bytes) != bytes;
            let Some(b) = e.parts.bufs.as_mut() else {
                // Gave its buffers back at an earlier look, and has read
                // nothing since (a read takes them again).
                continue;
            };
            let holds = b.cin.capacity() > 0 || b.uin.capacity() > 0;
            if read || e.stop.is_some() || !b.cin.is_empty() || !b.uin.is_empty() {
                e.compacted = false;
                held += 1;
                continue;
            }
            // Quiet, and at a point where nothing is in flight: what the
            // session keeps of its reads is copied out, so that the room can
            // be used again, and its lists give back their room, once per
            // quiet spell (anything else is left to a point where it is).
            if !e.compacted && e.parts.proto.quiet() {
                let proto = &mut e.parts.proto;
                proto.let_go_of_reads();
                proto.compact();
                if let Some(counts) = proto.statements.take_if_few() {
                    proto.services.stats.add_statements(counts);
                }
                b.to_up.compact();
                b.to_client.compact();
                e.compacted = true;
            }
            if holds {
                relay::give_back_room(&mut b.cin);
                relay::give_back_room(&mut b.uin);
                gave += 1;
            }
            // With nothing in them, the buffers themselves go back too.
            spare::give_back_if_empty(&mut e.parts.bufs);
            held += usize::from(e.parts.bufs.is_some());
        }
        // What pooled sessions set down between transactions (with no
        // session here, the last one to end took it).
        if let Some(stats) = stats {
            stats.add_statements(protocol::take_resting_statements());
        }
        (gave, held, t.live)
    });
    let _ = HELD_HERE.try_with(|h| h.store(held, Ordering::Relaxed));
    if gave >= TRIM_AFTER {
        trim();
    }
    if live > 0 {
        arm();
    }
    gave
}

/// Rooms given back in one look after which the allocator is asked to
/// hand free memory back to the system.
const TRIM_AFTER: usize = 32;

/// Room freed in the middle of the C library's heaps stays resident
/// until something reuses it: after a burst of clients went quiet, the
/// process would keep the peak's memory for good. `malloc_trim` returns
/// free pages anywhere in the heaps (a walk over them: at most once per
/// look, and only after a burst).
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory the allocator holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}
