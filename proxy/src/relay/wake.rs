//! Wakers of the relay loop, one per source: each marks its source before
//! it wakes the session's task, so a wake-up polls what woke it and leaves
//! the rest alone. A read poll that finds nothing still costs a few hundred
//! instructions (readiness check, waker registration under its lock), and
//! a busy session is woken twice per round trip.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU8, Ordering},
    },
    task::{Wake, Waker},
};

use futures_util::task::AtomicWaker;

/// The client socket (reads and writes).
pub const CLIENT: u8 = 1;
/// The upstream socket (reads and writes).
pub const UPSTREAM: u8 = 1 << 1;
/// The shutdown signal.
pub const SHUTDOWN: u8 = 1 << 2;

#[derive(Default)]
struct Marks {
    set: AtomicU8,
    /// The task to wake; wake-ups may come from other threads (shutdown).
    task: AtomicWaker,
}

struct Source {
    marks: Arc<Marks>,
    bit: u8,
}

impl Wake for Source {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Marked before the task is woken: the poll that follows sees it.
        self.marks.set.fetch_or(self.bit, Ordering::AcqRel);
        self.marks.task.wake();
    }
}

pub struct Wakers {
    marks: Arc<Marks>,
    pub client: Waker,
    pub upstream: Waker,
    pub shutdown: Waker,
}

impl Wakers {
    pub fn new() -> Self {
        let marks = Arc::new(Marks::default());
        let waker = |bit| {
            Waker::from(Arc::new(Source {
                marks: marks.clone(),
                bit,
            }))
        };
        Self {
            client: waker(CLIENT),
            upstream: waker(UPSTREAM),
            shutdown: waker(SHUTDOWN),
            marks,
        }
    }

    /// Registers `task` as the one to wake and takes the marks set since
    /// the last call.
    pub fn take(&self, task: &Waker) -> u8 {
        self.marks.task.register(task);
        self.marks.set.swap(0, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_source_marks_itself_and_wakes_the_task() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        let w = Wakers::new();
        assert_eq!(w.take(&task), 0);
        w.upstream.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        let by_value = w.shutdown.clone();
        by_value.wake();
        // Woken once more only after registering again.
        w.client.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(w.take(&task), UPSTREAM | SHUTDOWN | CLIENT);
        assert_eq!(w.take(&task), 0, "marks are taken once");
        w.client.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }
}
