//! `query_wait_timeout` for the pooled sessions waiting in line in a
//! worker's relay: one deadline, armed for the first of them, stands for
//! all. Under load most transactions wait in line for a moment, and a
//! deadline armed and disarmed per wait cost a map insertion, a removal
//! and a waker clone each time. The line is kept in the order the waits
//! began; a wait that ended (granted, left) is dropped when it comes first
//! or when such leftovers outnumber the sessions, not when it ends.

use std::{
    cell::RefCell,
    collections::VecDeque,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Wake, Waker},
    time::Instant,
};

use crate::worker::deadlines;

/// A wait's place in line: when it began, when it times out, and whose.
#[derive(Clone, Copy)]
struct Place {
    since: Instant,
    ends: Instant,
    slot: usize,
    generation: u32,
}

/// What the relay says of a session found in line.
pub(super) enum Seen {
    /// Its wait ended, or it is gone.
    Left,
    /// It still waits; its task, if it has polled.
    Waits(Option<Waker>),
}

struct Line {
    places: VecDeque<Place>,
    /// Armed for the first place's end, while the line has places.
    timer: Option<deadlines::Key>,
    due: Arc<Due>,
    waker: Waker,
}

/// Set when the line's deadline passes (by `deadlines::fire`, on this
/// thread): the relay then looks at the line (`check`).
#[derive(Default)]
struct Due(AtomicBool);

impl Wake for Due {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Default for Line {
    fn default() -> Self {
        let due = Arc::new(Due::default());
        Line {
            places: VecDeque::new(),
            timer: None,
            waker: Waker::from(due.clone()),
            due,
        }
    }
}

thread_local! {
    static LINE: RefCell<Line> = RefCell::default();
}

/// A session went in line at `since`, to wait until `ends` at most.
pub(super) fn join(since: Instant, ends: Instant, slot: usize, generation: u32) {
    LINE.with(|l| {
        let mut l = l.borrow_mut();
        l.places.push_back(Place {
            since,
            ends,
            slot,
            generation,
        });
        if l.timer.is_none() {
            l.timer = deadlines::arm_internal(ends, &l.waker);
        }
    });
}

/// The line's deadline passed: `check` has work.
pub(super) fn due() -> bool {
    LINE.try_with(|l| l.borrow().due.0.load(Ordering::Relaxed))
        .unwrap_or(false)
}

/// When the deadline passed: wakes the tasks of the sessions that waited
/// too long (they end their wait, `waited_too_long`), drops ended waits
/// from the front, and arms the deadline for the first that still waits.
/// Also drops ended waits throughout once they outnumber `sessions`, the
/// sessions relayed here. `seen` tells of a session whose wait began at
/// `since`. True when it woke a task.
pub(super) fn check(sessions: usize, mut seen: impl FnMut(usize, u32, Instant) -> Seen) -> bool {
    let Ok(woken) = LINE.try_with(|l| {
        let mut l = l.borrow_mut();
        let mut woken = Vec::new();
        if l.due.0.swap(false, Ordering::Relaxed) {
            l.timer = None;
            let now = Instant::now();
            while let Some(&p) = l.places.front() {
                match seen(p.slot, p.generation, p.since) {
                    Seen::Waits(_) if p.ends > now => break,
                    Seen::Waits(waiter) => woken.extend(waiter),
                    Seen::Left => {}
                }
                l.places.pop_front();
            }
            if let Some(p) = l.places.front() {
                l.timer = deadlines::arm_internal(p.ends, &l.waker);
            }
        }
        if l.places.len() > 2 * sessions + 64 {
            l.places
                .retain(|p| matches!(seen(p.slot, p.generation, p.since), Seen::Waits(_)));
        }
        woken
    }) else {
        return false;
    };
    let woke = !woken.is_empty();
    woken.into_iter().for_each(Waker::wake);
    woke
}

/// Places in line, ended waits included (tests).
#[cfg(test)]
pub(super) fn len() -> usize {
    LINE.with(|l| l.borrow().places.len())
}

#[cfg(test)]
mod tests {
    use std::{sync::atomic::AtomicUsize, time::Duration};

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Past its deadline, a session still waiting has its task woken; one
    /// whose wait ended is dropped; the first still within its time keeps
    /// the deadline.
    #[test]
    fn the_deadline_wakes_those_who_waited_too_long() {
        std::thread::spawn(|| {
            deadlines::install();
            let count = Arc::new(Count(AtomicUsize::new(0)));
            let task = Waker::from(count.clone());
            let now = Instant::now();
            let later = now + Duration::from_secs(60);
            join(now, now, 1, 1);
            join(now, now, 2, 1);
            join(now, later, 3, 1);
            assert!(!due());
            // The relay's own: no task of the runtime's to run for it (a
            // park hook told so would return with none queued).
            assert!(!deadlines::fire(), "the line's deadline is no task's");
            assert!(due(), "the line's deadline passed");
            let woke = check(3, |slot, _, _| match slot {
                2 => Seen::Left,
                _ => Seen::Waits(Some(task.clone())),
            });
            assert!(woke);
            assert_eq!(count.0.load(Ordering::Relaxed), 1, "only the first");
            assert_eq!(len(), 1, "the third keeps its place");
            assert!(!due());
            assert!(deadlines::wait_ms() > 1000, "armed for the third");
        })
        .join()
        .unwrap();
    }

    /// Ended waits are dropped once they outnumber the sessions, so a line
    /// that never comes due does not grow.
    #[test]
    fn ended_waits_do_not_pile_up() {
        std::thread::spawn(|| {
            let later = Instant::now() + Duration::from_secs(60);
            for i in 0..1000 {
                join(Instant::now(), later, i, 1);
                check(2, |slot, _, _| match slot {
                    0 => Seen::Waits(None),
                    _ => Seen::Left,
                });
                assert!(len() <= 2 * 2 + 65, "{}", len());
            }
        })
        .join()
        .unwrap();
    }
}
