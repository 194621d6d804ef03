//! Busy polling (`[upstream] busy_poll`): while a session waits for the
//! upstream's answer, its worker polls the sockets again at once instead of
//! sleeping, for up to the configured time. On virtual machines, waking a
//! CPU that went idle takes tens of microseconds, as long as the rest of a
//! forwarded round trip; a worker that stays awake sees the answer at once,
//! at the cost of the CPU time it spins.
//!
//! Only a session that is alone in waiting for an answer spins: with
//! several waiting, the machine's CPUs are better left to the server. And a
//! session whose answers keep coming too late to be caught (a slow query, a
//! server short of CPU) rests from spinning for a while, so spinning costs
//! little where it cannot pay.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

/// Round trips in a row whose answer came after the budget before a
/// session rests.
const MISSES_BEFORE_REST: u32 = 3;
/// How long it rests.
const REST: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct Spin<'a> {
    budget: Duration,
    /// Sessions, over the whole proxy, that would spin now.
    waiting: &'a AtomicUsize,
    /// This one is counted in `waiting`.
    counted: bool,
    /// The round trip spun for (when it started), and whether its answer
    /// came too late.
    current: Option<(Instant, bool)>,
    misses: u32,
    resting_until: Option<Instant>,
}

impl<'a> Spin<'a> {
    /// `budget` zero: never spin.
    pub fn new(budget: Duration, waiting: &'a AtomicUsize) -> Self {
        Self {
            budget,
            waiting,
            counted: false,
            current: None,
            misses: 0,
            resting_until: None,
        }
    }

    /// Whether to poll again at once instead of sleeping, while waiting for
    /// the answer to an upstream round trip that started at `since` (`None`:
    /// no answer is awaited).
    pub fn keep_polling(&mut self, since: Option<Instant>) -> bool {
        if self.budget.is_zero() {
            return false;
        }
        if self.current.map(|(t, _)| Some(t)) != Some(since) {
            // The round trip spun for has been answered.
            if let Some((_, late)) = self.current.take() {
                self.misses = if late { self.misses + 1 } else { 0 };
            }
            self.count(false);
        }
        let Some(since) = since else {
            return false;
        };
        let now = Instant::now();
        if self.current.is_none() {
            if self.misses >= MISSES_BEFORE_REST {
                self.misses = 0;
                self.resting_until = Some(now + REST);
            }
            match self.resting_until {
                Some(t) if now < t => return false,
                _ => self.resting_until = None,
            }
            self.current = Some((since, false));
            self.count(true);
        }
        let Some((_, late)) = &mut self.current else {
            return false;
        };
        if *late {
            return false;
        }
        if now.saturating_duration_since(since) < self.budget {
            return self.waiting.load(Ordering::Relaxed) == 1;
        }
        *late = true;
        self.count(false);
        false
    }

    fn count(&mut self, on: bool) {
        if on != self.counted {
            self.counted = on;
            match on {
                true => self.waiting.fetch_add(1, Ordering::Relaxed),
                false => self.waiting.fetch_sub(1, Ordering::Relaxed),
            };
        }
    }
}

impl Drop for Spin<'_> {
    fn drop(&mut self) {
        self.count(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_when_the_budget_is_zero_or_nothing_is_awaited() {
        let waiting = AtomicUsize::new(0);
        let mut s = Spin::new(Duration::ZERO, &waiting);
        assert!(!s.keep_polling(Some(Instant::now())));
        let mut s = Spin::new(Duration::from_secs(60), &waiting);
        assert!(!s.keep_polling(None));
        assert!(s.keep_polling(Some(Instant::now())));
        drop(s);
        assert_eq!(waiting.load(Ordering::Relaxed), 0, "uncounted at the end");
    }

    #[test]
    fn stops_at_the_budget_and_rests_after_late_answers() {
        let budget = Duration::from_millis(5);
        let waiting = AtomicUsize::new(0);
        let mut s = Spin::new(budget, &waiting);
        let late = || Instant::now() - Duration::from_millis(10);
        for _ in 0..MISSES_BEFORE_REST {
            let rt = late();
            assert!(!s.keep_polling(Some(rt)), "past the budget");
            assert!(!s.keep_polling(Some(rt)));
            assert!(!s.keep_polling(None), "answered late");
        }
        assert!(
            !s.keep_polling(Some(Instant::now())),
            "resting after {MISSES_BEFORE_REST} late answers"
        );
        let mut s = Spin::new(budget, &waiting);
        for _ in 0..MISSES_BEFORE_REST * 2 {
            let rt = late();
            assert!(!s.keep_polling(Some(rt)));
            s.keep_polling(None);
            let rt = Instant::now();
            assert!(
                s.keep_polling(Some(rt)),
                "an answer in time clears the misses"
            );
            s.keep_polling(None);
        }
        assert_eq!(waiting.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn only_a_session_alone_in_waiting_spins() {
        let waiting = AtomicUsize::new(0);
        let budget = Duration::from_secs(60);
        let (mut a, mut b) = (Spin::new(budget, &waiting), Spin::new(budget, &waiting));
        let rt = Instant::now();
        assert!(a.keep_polling(Some(rt)), "alone");
        assert!(!b.keep_polling(Some(rt)), "two waiting");
        assert!(!a.keep_polling(Some(rt)), "two waiting");
        assert!(!b.keep_polling(None), "b answered");
        assert!(a.keep_polling(Some(rt)), "alone again");
        drop(a);
        assert_eq!(waiting.load(Ordering::Relaxed), 0);
    }
}
