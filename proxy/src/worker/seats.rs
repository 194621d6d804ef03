//! Which worker a session runs on. A session starts on the worker that
//! accepted it, so a short one (a connection per transaction) never costs a
//! second thread a wake-up. One that proves long-lived moves, once and at a
//! quiet moment, to the worker with the fewest sessions, so busy clients
//! still share out the CPUs. A pooled session (transaction pooling) can't
//! move while it waits without a server connection, so it starts on the
//! worker with the fewest sessions instead (`Seats::for_new`).

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use tokio::runtime::Handle;

/// Upstream round trips a session makes before it may move, and between
/// two looks at the other workers.
pub const SETTLE_ROUND_TRIPS: u64 = 64;

/// The worker runtimes and how many sessions relay on each.
#[derive(Default)]
pub struct Seats {
    handles: Vec<Handle>,
    live: Vec<AtomicUsize>,
}

impl Seats {
    pub fn new(handles: Vec<Handle>) -> Self {
        let live = handles.iter().map(|_| AtomicUsize::new(0)).collect();
        Self { handles, live }
    }

    pub fn handle(&self, i: usize) -> Option<&Handle> {
        self.handles.get(i)
    }

    pub fn len(&self) -> usize {
        self.handles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The worker with the fewest sessions, the first such from `from`
    /// round: new sessions accepted at once, which are counted only once
    /// they relay, then take turns rather than all going to one.
    pub fn for_new(&self, from: usize) -> usize {
        let n = self.live.len().max(1);
        (0..n)
            .map(|k| (from + k) % n)
            .min_by_key(|&j| self.live.get(j).map_or(0, |l| l.load(Ordering::Relaxed)))
            .unwrap_or(0)
    }

    /// A worker with at least two sessions fewer than worker `from` (the
    /// one with the fewest), if there is one: moving there evens them out.
    fn better_than(&self, from: usize) -> Option<usize> {
        let here = self.live.get(from)?.load(Ordering::Relaxed);
        let (j, n) = self
            .live
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .enumerate()
            .min_by_key(|&(_, n)| n)?;
        (n + 1 < here).then_some(j)
    }
}

/// A relaying session's place on a worker: counted while it lasts.
pub struct Seat {
    workers: Arc<Seats>,
    worker: usize,
    /// It has moved already, or never may (TLS, no workers).
    settled: bool,
    next_look: u64,
}

impl Seat {
    /// A session starts relaying on `worker`; `may_move` is false for one
    /// whose streams can't change thread (TLS state lives in the task).
    pub fn take(workers: Arc<Seats>, worker: usize, may_move: bool) -> Self {
        if let Some(n) = workers.live.get(worker) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let settled = !may_move || workers.live.len() < 2;
        Self {
            workers,
            worker,
            settled,
            next_look: SETTLE_ROUND_TRIPS,
        }
    }

    /// A look at the other workers is due: the session may still move and
    /// has made enough round trips since the last look (asked only then).
    pub fn due(&self, round_trips: impl FnOnce() -> u64) -> bool {
        !self.settled && round_trips() >= self.next_look
    }

    /// The worker to move to now, after `round_trips` upstream round
    /// trips, if a look is due and finds one.
    pub fn move_to(&mut self, round_trips: u64) -> Option<usize> {
        if !self.due(|| round_trips) {
            return None;
        }
        self.next_look = round_trips + SETTLE_ROUND_TRIPS;
        self.workers.better_than(self.worker)
    }

    /// The session now relays on `worker`, and stays there.
    pub fn moved(mut self, worker: usize) -> Self {
        self.settled = true;
        if let Some(n) = self.workers.live.get(worker) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(n) = self.workers.live.get(self.worker) {
            n.fetch_sub(1, Ordering::Relaxed);
        }
        self.worker = worker;
        self
    }

    /// The session stays where it is, for good.
    pub fn stay(mut self) -> Self {
        self.settled = true;
        self
    }

    pub fn workers(&self) -> &Arc<Seats> {
        &self.workers
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(n) = self.workers.live.get(self.worker) {
            n.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(n: usize) -> Arc<Seats> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        Arc::new(Seats::new(vec![rt.handle().clone(); n]))
    }

    fn live(w: &Seats) -> Vec<usize> {
        w.live.iter().map(|n| n.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn long_lived_sessions_even_out_and_short_ones_stay() {
        let w = workers(2);
        let mut seats: Vec<Seat> = (0..8).map(|_| Seat::take(w.clone(), 0, true)).collect();
        assert_eq!(live(&w), [8, 0]);
        // Not before they have made enough round trips.
        assert!(seats.iter_mut().all(|s| s.move_to(10).is_none()));
        let mut placed = Vec::new();
        for mut s in seats {
            match s.move_to(SETTLE_ROUND_TRIPS) {
                Some(j) => placed.push(s.moved(j)),
                None => placed.push(s),
            }
        }
        assert_eq!(live(&w), [4, 4]);
        // Moved once: never again, even when the other worker empties.
        let (on_1, mut on_0): (Vec<Seat>, Vec<Seat>) =
            placed.into_iter().partition(|s| s.worker == 1);
        drop(on_0.drain(..));
        assert_eq!(live(&w), [0, 4]);
        let mut on_1 = on_1;
        assert!(on_1.iter_mut().all(|s| s.move_to(1000).is_none()));
    }

    #[test]
    fn new_sessions_go_to_the_fewest_and_take_turns_when_even() {
        let w = workers(3);
        assert_eq!(
            (0..6).map(|i| w.for_new(i)).collect::<Vec<_>>(),
            [0, 1, 2, 0, 1, 2]
        );
        let _a = Seat::take(w.clone(), 0, false);
        let _b = Seat::take(w.clone(), 2, false);
        assert_eq!((0..3).map(|i| w.for_new(i)).collect::<Vec<_>>(), [1, 1, 1]);
        assert_eq!(workers(0).for_new(5), 0);
    }

    #[test]
    fn a_session_that_may_not_move_never_does() {
        let w = workers(2);
        let _others: Vec<Seat> = (0..4).map(|_| Seat::take(w.clone(), 0, true)).collect();
        let mut tls = Seat::take(w.clone(), 0, false);
        assert_eq!(tls.move_to(SETTLE_ROUND_TRIPS), None);
        let one = workers(1);
        let mut alone = Seat::take(one, 0, true);
        assert_eq!(alone.move_to(SETTLE_ROUND_TRIPS), None);
    }

    #[test]
    fn a_look_that_finds_balance_waits_for_more_round_trips() {
        let w = workers(2);
        let mut a = Seat::take(w.clone(), 0, true);
        let _b = Seat::take(w.clone(), 1, true);
        assert_eq!(a.move_to(SETTLE_ROUND_TRIPS), None);
        let _c = Seat::take(w.clone(), 0, true);
        let _d = Seat::take(w.clone(), 0, true);
        assert_eq!(a.move_to(SETTLE_ROUND_TRIPS + 1), None, "not due yet");
        assert_eq!(a.move_to(2 * SETTLE_ROUND_TRIPS), Some(1));
    }
}
