//! Deadlines for sessions, on the thread that runs the session: arming and
//! cancelling one touches only that thread's timers and wakes no other
//! thread, which matters when clients connect by the thousand per second.
//! On a worker thread they are the worker's own (`worker::deadlines`);
//! elsewhere, the runtime's timer wheel.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use crate::worker::deadlines;

/// `d` from now; a limit too far to represent is as good as none.
pub fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400))
}

/// A deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

/// Ready at `t`.
pub fn sleep_until(t: Instant) -> Sleep {
    Sleep {
        at: t,
        armed: Armed::No,
    }
}

/// `fut`'s output, unless it takes longer than `d`.
pub async fn timeout<F: Future>(d: Duration, fut: F) -> Result<F::Output, Elapsed> {
    sleep_until(after(d)).bound(fut).await
}

/// A sleep that stays over once over, so one can bound several steps.
pub struct Sleep {
    at: Instant,
    armed: Armed,
}

/// Where a sleep is armed: armed when first polled, on the polling thread.
enum Armed {
    No,
    Worker(deadlines::Key),
    Runtime(Pin<Box<tokio::time::Sleep>>),
}

impl Sleep {
    /// `fut`'s output, unless this sleep ends first.
    pub async fn bound<F: Future>(&mut self, fut: F) -> Result<F::Output, Elapsed> {
        tokio::select! {
            biased;
            out = fut => Ok(out),
            () = self => Err(Elapsed),
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            self.armed = Armed::No;
            return Poll::Ready(());
        }
        match &mut self.armed {
            Armed::Runtime(s) => return s.as_mut().poll(cx),
            Armed::Worker(k) if k.is_here() => {
                k.set_waker(cx.waker());
                return Poll::Pending;
            }
            _ => {}
        }
        let at = self.at;
        self.armed = match deadlines::arm(at, cx.waker()) {
            Some(k) => Armed::Worker(k),
            None => {
                let mut s = Box::pin(tokio::time::sleep_until(at.into()));
                if s.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
                Armed::Runtime(s)
            }
        };
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_sleep_bounds_steps_in_turn_and_stays_over() {
        let mut sleep = sleep_until(after(Duration::from_millis(50)));
        assert_eq!(sleep.bound(async { 1 }).await, Ok(1));
        assert_eq!(
            sleep.bound(std::future::pending::<()>()).await,
            Err(Elapsed)
        );
        assert_eq!(
            sleep.bound(std::future::pending::<()>()).await,
            Err(Elapsed)
        );
        assert_eq!(
            sleep.bound(async { 2 }).await,
            Ok(2),
            "a ready step still wins"
        );
    }

    #[tokio::test]
    async fn timeout_ends_slow_work_and_passes_quick_work() {
        let slow = timeout(Duration::from_millis(20), std::future::pending::<()>()).await;
        let fast = timeout(Duration::from_secs(30), async { 7 }).await;
        assert_eq!((slow, fast), (Err(Elapsed), Ok(7)));
    }

    #[test]
    fn a_limit_beyond_the_clock_is_far_away() {
        assert!(after(Duration::MAX) > Instant::now() + Duration::from_secs(86_400));
    }
}
