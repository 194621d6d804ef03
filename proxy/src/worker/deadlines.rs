//! Deadlines on a worker thread. Its runtime has no timer driver: the
//! thread waits in the worker's own epoll (see `worker`), so the deadlines
//! live here, and that wait ends in time for the earliest. Arming and
//! cancelling one touches this thread's map only; a worker with no
//! deadline armed reads no clock when it waits.

use std::{
    cell::{Cell, RefCell},
    collections::BTreeMap,
    task::Waker,
    time::Instant,
};

/// Deadlines by (when, id): the waker, and whether it is the relay's own.
type Armed = BTreeMap<(Instant, u64), (Waker, bool)>;

thread_local! {
    /// This thread's deadlines, when it is a worker.
    /// Each deadline's waker, and whether it is the relay's own (it wakes
    /// no task: the relay looks at what it was for in its own turn).
    static ARMED: RefCell<Option<Armed>> = const { RefCell::new(None) };
    static NEXT_ID: Cell<u64> = const { Cell::new(0) };
    /// The time read once when the worker's turn began (`turn_begins`),
    /// until it ends: what happens in one turn happens within microseconds.
    static TURN: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Now: within a worker's turn, the time its turn began, so a turn reads
/// the clock once however many messages it times; elsewhere the clock.
pub fn now() -> Instant {
    TURN.with(Cell::get).unwrap_or_else(Instant::now)
}

/// A worker's turn begins, after its wait: the clock is read for it.
pub(super) fn turn_begins() {
    TURN.with(|t| t.set(Some(Instant::now())));
}

/// The turn is over: the runtime's tasks read the clock themselves.
pub(super) fn turn_ends() {
    TURN.with(|t| t.set(None));
}

/// Makes this thread keep deadlines (once, when a worker starts).
pub fn install() {
    ARMED.with(|a| *a.borrow_mut() = Some(BTreeMap::new()));
}

/// An armed deadline; disarmed when dropped.
#[derive(Debug)]
pub struct Key {
    at: Instant,
    id: u64,
    thread: u64,
}

/// Arms a deadline at `at` that wakes `waker`; `None` on a thread that
/// keeps no deadlines (then the runtime's timers serve).
pub fn arm(at: Instant, waker: &Waker) -> Option<Key> {
    arm_as(at, waker, false)
}

/// As `arm`, for a deadline of the relay's own, whose waker wakes no
/// task: `fire` does not count it as work for the runtime (a park hook
/// that returns with none leaves the runtime blocked in its own epoll,
/// and the worker's sessions stalled, until something else wakes it).
pub fn arm_internal(at: Instant, waker: &Waker) -> Option<Key> {
    arm_as(at, waker, true)
}

fn arm_as(at: Instant, waker: &Waker, internal: bool) -> Option<Key> {
    ARMED.with(|a| {
        let mut a = a.try_borrow_mut().ok()?;
        let map = a.as_mut()?;
        let id = NEXT_ID.with(|n| {
            let id = n.get();
            n.set(id + 1);
            id
        });
        map.insert((at, id), (waker.clone(), internal));
        Some(Key {
            at,
            id,
            thread: super::thread_mark(),
        })
    })
}

impl Key {
    /// Armed on this thread (a future can be polled on another).
    pub fn is_here(&self) -> bool {
        self.thread == super::thread_mark()
    }

    /// Wakes `waker` instead, if it is another task's.
    pub fn set_waker(&self, waker: &Waker) {
        ARMED.with(|a| {
            if let Ok(mut a) = a.try_borrow_mut()
                && let Some((w, _)) = a.as_mut().and_then(|m| m.get_mut(&(self.at, self.id)))
                && !w.will_wake(waker)
            {
                *w = waker.clone();
            }
        });
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.is_here() {
            // Left for its own thread to fire: a wake-up that finds nothing.
            return;
        }
        // At thread exit the map may be gone already.
        let _ = ARMED.try_with(|a| {
            if let Ok(mut a) = a.try_borrow_mut()
                && let Some(m) = a.as_mut()
            {
                m.remove(&(self.at, self.id));
            }
        });
    }
}

/// How long the worker may wait for events: until the earliest deadline,
/// in whole milliseconds rounded up (-1: no deadline armed).
pub fn wait_ms() -> i32 {
    ARMED.with(|a| {
        let a = a.borrow();
        let Some((&(at, _), _)) = a.as_ref().and_then(|m| m.first_key_value()) else {
            return -1;
        };
        // The last turn's time: later by what the turn took (microseconds),
        // so at worst the wait rounds up to a millisecond more.
        let left = at.saturating_duration_since(now());
        // In 64 bits: a u128 division costs more than the rest of the turn's
        // bookkeeping.
        let ms = left
            .as_secs()
            .saturating_mul(1000)
            .saturating_add(u64::from(left.subsec_nanos().div_ceil(1_000_000)));
        ms.min(i32::MAX as u64) as i32
    })
}

/// Wakes every task whose deadline has passed; true when one was a
/// task's (not the relay's own, `arm_internal`).
pub fn fire() -> bool {
    let due: Vec<(Waker, bool)> = ARMED.with(|a| {
        let mut a = a.borrow_mut();
        let Some(m) = a.as_mut() else {
            return Vec::new();
        };
        let Some((&(first, _), _)) = m.first_key_value() else {
            return Vec::new();
        };
        let now = now();
        if first > now {
            return Vec::new();
        }
        let later = m.split_off(&(now, u64::MAX));
        std::mem::replace(m, later).into_values().collect()
    });
    let mut woke = false;
    for (w, internal) in due {
        woke |= !internal;
        w.wake();
    }
    woke
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
        task::Wake,
        time::Duration,
    };

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn deadlines_fire_in_time_once_and_not_when_disarmed() {
        std::thread::spawn(|| {
            let count = Arc::new(Count(AtomicUsize::new(0)));
            let waker = Waker::from(count.clone());
            assert!(arm(Instant::now(), &waker).is_none(), "not a worker yet");
            install();
            assert_eq!(wait_ms(), -1);
            let soon = arm(Instant::now() + Duration::from_millis(30), &waker).unwrap();
            let later = arm(Instant::now() + Duration::from_secs(60), &waker).unwrap();
            let ms = wait_ms();
            assert!((1..=30).contains(&ms), "waits up to the earliest: {ms}");
            assert!(!fire(), "nothing due yet");
            std::thread::sleep(Duration::from_millis(ms as u64));
            assert!(fire());
            assert_eq!(count.0.load(Ordering::SeqCst), 1);
            assert!(!fire(), "fired once");
            drop(soon);
            assert!(wait_ms() > 50_000, "the later one is left");
            drop(later);
            assert_eq!(wait_ms(), -1, "disarmed when dropped");
            let elsewhere = arm(Instant::now(), &waker).unwrap();
            std::thread::spawn(move || {
                assert!(!elsewhere.is_here());
                drop(elsewhere);
            })
            .join()
            .unwrap();
            assert!(
                fire(),
                "a key dropped elsewhere still fires here, harmlessly"
            );
        })
        .join()
        .unwrap();
    }
}
