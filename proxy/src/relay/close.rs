//! What ends a relaying session from outside its traffic: shutdown's grace
//! period running out, or a client idle past `[limits] client_idle_timeout`.
//! Idleness is read from what the session shows others (its state, the
//! bytes its client sent), so the relay loops pay nothing for it per
//! message: the watch looks every quarter of the limit.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, atomic::Ordering::Relaxed},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use tokio::sync::oneshot;

use super::End;
use crate::{
    stats::{SessionInfo, SessionState},
    timers::{self, Sleep},
};

/// Ready with how the session must end: `End::Shutdown` or
/// `End::IdleTimeout` (again, if polled again).
pub(crate) struct Closer {
    /// Fired when the grace period is over (`Shared::closer`); `None` once
    /// it has (a oneshot must not be polled after it is done).
    forced: Option<oneshot::Receiver<()>>,
    /// Boxed: a timer is large, every session's loop holds its `Closer`,
    /// and most deployments set no idle limit.
    idle: Option<Box<IdleWatch>>,
}

struct IdleWatch {
    info: Arc<SessionInfo>,
    limit: Duration,
    /// When the session was first seen idle, with the bytes its client had
    /// sent by then: idle since, if neither has changed.
    seen: Option<(Instant, u64)>,
    next_look: Sleep,
}

impl Closer {
    /// `idle_limit` zero: the session is never closed for being idle.
    pub fn new(
        forced: oneshot::Receiver<()>,
        info: Arc<SessionInfo>,
        idle_limit: Duration,
    ) -> Self {
        let idle = (!idle_limit.is_zero()).then(|| {
            Box::new(IdleWatch {
                next_look: timers::sleep_until(timers::after(step(idle_limit))),
                info,
                limit: idle_limit,
                seen: None,
            })
        });
        Self {
            forced: Some(forced),
            idle,
        }
    }
}

/// How often an idle session is looked at: it is closed within a quarter
/// of the limit after the limit.
fn step(limit: Duration) -> Duration {
    (limit / 4).max(Duration::from_millis(1))
}

impl IdleWatch {
    /// True when the session has been idle for the limit; otherwise the
    /// next look is set.
    fn look(&mut self, now: Instant) -> bool {
        // Idle: the last ReadyForQuery said no transaction, nothing of the
        // client's is in flight, and no BEGIN is held here.
        let idle = self.info.state() == SessionState::Idle;
        let sent = self.info.counters.bytes_from_client.load(Relaxed);
        match self.seen {
            Some((since, bytes)) if idle && bytes == sent => {
                if now.saturating_duration_since(since) >= self.limit {
                    return true;
                }
            }
            _ => self.seen = idle.then_some((now, sent)),
        }
        self.next_look = timers::sleep_until(timers::after(step(self.limit)));
        false
    }
}

impl Future for Closer {
    type Output = End;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<End> {
        // Fired, or its sender dropped (shutdown forced already): either way
        // the session is to close.
        let fired = match self.forced.as_mut() {
            Some(rx) => Pin::new(rx).poll(cx).is_ready(),
            None => true,
        };
        if fired {
            self.forced = None;
            return Poll::Ready(End::Shutdown);
        }
        let Some(idle) = self.idle.as_mut() else {
            return Poll::Pending;
        };
        while Pin::new(&mut idle.next_look).poll(cx).is_ready() {
            if idle.look(Instant::now()) {
                return Poll::Ready(End::IdleTimeout);
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> Arc<SessionInfo> {
        crate::stats::Stats::default().open_session(None, "db", "u", "")
    }

    #[test]
    fn only_a_session_idle_and_silent_for_the_limit_is_closed() {
        let info = info();
        let limit = Duration::from_secs(8);
        let mut idle = IdleWatch {
            info: info.clone(),
            limit,
            seen: None,
            next_look: timers::sleep_until(Instant::now()),
        };
        let t0 = Instant::now();
        info.set_state(SessionState::InTransaction);
        assert!(!idle.look(t0));
        assert!(!idle.look(t0 + limit * 2), "in a transaction");
        info.set_state(SessionState::Idle);
        assert!(!idle.look(t0 + limit * 3), "first seen idle");
        info.counters.bytes_from_client.fetch_add(5, Relaxed);
        assert!(!idle.look(t0 + limit * 4), "the client spoke");
        assert!(!idle.look(t0 + limit * 4 + limit / 2), "idle for half");
        assert!(idle.look(t0 + limit * 5), "idle for the limit");
    }
}
