//! Timers for sessions, kept off the runtimes that forward.
//!
//! A runtime with a time driver reads the clock and takes the timer wheel's
//! lock twice on every park, and a forwarding session parks twice per query
//! (two of the eight clock reads per pgbench transaction), for timers that
//! only a connection's first moments use. So the worker runtimes have no
//! time driver; a session's timeouts sleep on the runtime that started the
//! proxy and wake the session's task from there, a few times per connection
//! and never per query.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use tokio::{runtime::Handle, task::JoinHandle};

/// `d` from now; a limit too far to represent is as good as none.
pub fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400))
}

/// Where sleeps run: a runtime with time enabled.
#[derive(Clone, Debug)]
pub struct Timers(Option<Handle>);

/// A deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl Timers {
    /// The current runtime's timers (it must have time enabled), or, outside
    /// any runtime, those of whichever runtime later sleeps.
    pub fn current() -> Self {
        Self(Handle::try_current().ok())
    }

    /// Ready at `t`.
    pub fn sleep_until(&self, t: Instant) -> Sleep {
        Sleep(match &self.0 {
            // Made inside the task: a tokio Sleep binds to the time driver
            // of the runtime it is created on.
            Some(h) => {
                Inner::Remote(h.spawn(async move { tokio::time::sleep_until(t.into()).await }))
            }
            None => Inner::Local(Box::pin(tokio::time::sleep_until(t.into()))),
        })
    }

    /// `fut`'s output, unless `t` comes first.
    pub async fn deadline<F: Future>(&self, t: Instant, fut: F) -> Result<F::Output, Elapsed> {
        self.sleep_until(t).bound(fut).await
    }

    /// `fut`'s output, unless it takes longer than `d`.
    pub async fn timeout<F: Future>(&self, d: Duration, fut: F) -> Result<F::Output, Elapsed> {
        match Instant::now().checked_add(d) {
            Some(t) => self.deadline(t, fut).await,
            None => Ok(fut.await),
        }
    }
}

/// A sleep on the timer runtime; dropping it cancels it there.
pub struct Sleep(Inner);

enum Inner {
    Remote(JoinHandle<()>),
    Local(Pin<Box<tokio::time::Sleep>>),
    /// The timer runtime is shutting down: this sleep never ends.
    Never,
    /// Over: ready each time it is polled (a task must not be polled after
    /// it finished).
    Done,
}

impl Sleep {
    /// `fut`'s output, unless this sleep ends first. One sleep can bound
    /// several steps in turn: each sleep costs the timer runtime a task.
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
        match &mut self.0 {
            Inner::Remote(h) => match Pin::new(h).poll(cx) {
                Poll::Ready(Ok(())) => {
                    self.0 = Inner::Done;
                    Poll::Ready(())
                }
                Poll::Ready(Err(_)) => {
                    // Cancelled by the runtime's shutdown, not expired: a
                    // timeout must not fire for that.
                    self.0 = Inner::Never;
                    Poll::Pending
                }
                Poll::Pending => Poll::Pending,
            },
            Inner::Local(s) => s.as_mut().poll(cx),
            Inner::Never => Poll::Pending,
            Inner::Done => Poll::Ready(()),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Inner::Remote(h) = &self.0 {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime without a time driver, as the workers are.
    fn worker() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn a_worker_without_time_driver_times_out_through_the_timer_runtime() {
        let timers = Timers::current();
        let out = tokio::task::spawn_blocking(move || {
            worker().block_on(async {
                let slow = timers
                    .timeout(Duration::from_millis(20), std::future::pending::<()>())
                    .await;
                let fast = timers.timeout(Duration::from_secs(30), async { 7 }).await;
                (slow, fast)
            })
        })
        .await
        .unwrap();
        assert_eq!(out, (Err(Elapsed), Ok(7)));
    }

    #[tokio::test]
    async fn one_sleep_bounds_steps_in_turn_and_stays_over() {
        let timers = Timers::current();
        let mut sleep = timers.sleep_until(after(Duration::from_millis(50)));
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

    #[test]
    fn a_sleep_whose_timer_runtime_is_gone_never_ends() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let timers = rt.block_on(async { Timers::current() });
        let sleep = timers.sleep_until(Instant::now() + Duration::from_secs(10));
        drop(rt);
        let out = worker().block_on(async {
            tokio::select! {
                biased;
                () = sleep => "expired",
                () = tokio::task::yield_now() => "pending",
            }
        });
        assert_eq!(out, "pending");
    }
}
