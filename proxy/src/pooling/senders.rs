//! Which client sent a notification: a pooled backend runs many clients'
//! transactions, so the backend pid a NotificationResponse carries names
//! no client. While a pool's sessions listen, each backend's holders are
//! logged (taken, given back, opened), and a notification is given the pid
//! its sender was told at login when exactly one client can have committed
//! it; otherwise it keeps the backend's pid.
//!
//! The window: a notification on a channel was committed after the
//! listening connection's LISTEN of it was sent (PostgreSQL delivers
//! nothing committed before), and before it was read. A backend's holder
//! in that window is known when its log covers it and the backend is
//! still this pool's (held, or idle in it), so its pid is no other
//! process's since.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::Instant,
};

/// Most holders kept per backend; older ones are forgotten and the log
/// covers less (a notification older than that keeps its backend's pid).
const MAX_HOLDERS: usize = 64;

#[derive(Default)]
pub struct Senders {
    /// A session listens: holders are logged (one flag read per take and
    /// give-back otherwise).
    on: AtomicBool,
    logs: Mutex<Logs>,
}

#[derive(Default)]
struct Logs {
    /// When logging began: a backend with no log since has been idle in
    /// the pool (a take or a give-back would have made its log), or held
    /// by one client throughout.
    since: Option<Instant>,
    by_pid: HashMap<i32, Log>,
}

/// One backend's holders since `known`: every transaction run on it since
/// then ran in one of `holders`.
struct Log {
    known: Instant,
    /// (taken, given back, the client's pid), oldest first.
    holders: VecDeque<(Instant, Option<Instant>, i32)>,
}

impl Log {
    fn since(known: Instant) -> Self {
        Log {
            known,
            holders: VecDeque::new(),
        }
    }
}

impl Senders {
    fn lock(&self) -> MutexGuard<'_, Logs> {
        self.logs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Logging starts or stops (`on` while the listening connection runs).
    pub fn set_on(&self, on: bool) {
        let mut logs = self.lock();
        logs.by_pid.clear();
        logs.since = on.then(Instant::now);
        self.on.store(on, Relaxed);
    }

    /// A new server connection of the pool, backend `pid`: whatever held
    /// that pid before was another process.
    pub fn opened(&self, pid: i32) {
        if self.on.load(Relaxed) {
            self.lock().by_pid.insert(pid, Log::since(Instant::now()));
        }
    }

    /// Client `client` took backend `pid` (it was idle in the pool).
    pub fn took(&self, pid: i32, client: i32) {
        if !self.on.load(Relaxed) {
            return;
        }
        let now = Instant::now();
        let mut logs = self.lock();
        // Idle in the pool since logging began, if it has no log.
        let since = logs.since.unwrap_or(now);
        let log = logs.by_pid.entry(pid).or_insert_with(|| Log::since(since));
        if log.holders.len() == MAX_HOLDERS
            && let Some((_, end, _)) = log.holders.pop_front()
        {
            // Covered from the end of the oldest kept on.
            log.known = end.unwrap_or(now).max(log.known);
        }
        log.holders.push_back((now, None, client));
    }

    /// Client `client` gave backend `pid` back (`None`: whichever it held;
    /// its session ended).
    pub fn gave_back(&self, pid: Option<i32>, client: i32) {
        if !self.on.load(Relaxed) {
            return;
        }
        let now = Instant::now();
        let mut logs = self.lock();
        let since = logs.since.unwrap_or(now);
        match pid {
            Some(pid) => {
                // Held by this client since logging began, if it has no
                // log: no other took it meanwhile.
                let log = logs.by_pid.entry(pid).or_insert_with(|| {
                    let mut log = Log::since(since);
                    log.holders.push_back((since, None, client));
                    log
                });
                end(log, client, now);
            }
            None => logs
                .by_pid
                .values_mut()
                .for_each(|log| end(log, client, now)),
        }
    }

    /// The pid to tell for a notification from backend `pid`, committed
    /// after `after` and read at `read`; `idle`: the backend is idle in the
    /// pool now. `None`: the backend's own.
    pub fn sender(&self, pid: i32, after: Instant, read: Instant, idle: bool) -> Option<i32> {
        let logs = self.lock();
        let log = logs.by_pid.get(&pid)?;
        if log.known > after {
            return None;
        }
        let held = log.holders.back().is_some_and(|(_, end, _)| end.is_none());
        if !held && !idle {
            // Closed since, perhaps: its pid may be another process's now.
            return None;
        }
        let mut who = log
            .holders
            .iter()
            .filter(|(taken, end, _)| *taken <= read && end.is_none_or(|e| e >= after))
            .map(|(_, _, client)| *client);
        let first = who.next()?;
        who.all(|c| c == first).then_some(first)
    }
}

fn end(log: &mut Log, client: i32, now: Instant) {
    for h in log.holders.iter_mut().rev() {
        if h.2 == client && h.1.is_none() {
            h.1 = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }

    #[test]
    fn one_holder_in_the_window_is_the_sender() {
        let s = Senders::default();
        s.set_on(true);
        tick();
        let before = Instant::now();
        tick();
        s.opened(7);
        tick();
        let listened = Instant::now();
        s.took(7, -1);
        s.gave_back(Some(7), -1);
        let read = Instant::now();
        assert_eq!(s.sender(7, listened, read, true), Some(-1));
        assert_eq!(s.sender(7, before, read, true), None, "log too young");
        assert_eq!(s.sender(7, listened, read, false), None, "closed since?");
        assert_eq!(s.sender(8, listened, read, true), None, "not the pool's");
        tick();
        let later = Instant::now();
        tick();
        s.took(7, -2);
        let read = Instant::now();
        assert_eq!(s.sender(7, listened, read, false), None, "two holders");
        s.gave_back(None, -2);
        assert_eq!(s.sender(7, later, Instant::now(), true), Some(-2));
    }

    /// A backend with no log was idle, or held by one client, since
    /// logging began.
    #[test]
    fn backends_without_a_log_are_known_since_logging_began() {
        let s = Senders::default();
        s.set_on(true);
        tick();
        let listened = Instant::now();
        s.took(1, -1);
        s.gave_back(Some(2), -2);
        let read = Instant::now();
        assert_eq!(s.sender(1, listened, read, false), Some(-1));
        assert_eq!(s.sender(2, listened, read, true), Some(-2));
        s.set_on(false);
        assert_eq!(s.sender(1, listened, read, true), None);
    }
}
