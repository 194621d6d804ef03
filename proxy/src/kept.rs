//! Upstream connections kept for the next client with the same startup
//! packet (`[upstream] reuse`): the table, its waits and expiry. Keeping a
//! connection (its reset) and handing it to a client are the session's
//! (`session::reuse`).

use std::{
    io::Write,
    sync::Mutex,
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;

use crate::{
    protocol::ServerConnection,
    wire::{
        backend,
        startup::{self, StartupMessage},
        write,
    },
};

/// One reset upstream connection, waiting for a client.
pub struct Kept {
    pub tcp: std::net::TcpStream,
    pub conn: Box<ServerConnection>,
    /// When it was kept.
    pub since: Instant,
}

impl Kept {
    /// An idle, reset connection: nothing unread waits in it and the
    /// server has not closed it (as far as the socket can tell now).
    fn alive(&self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.tcp.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// Says goodbye, as a client would, and closes the connection. Five
    /// bytes into an idle socket's empty send buffer: this never blocks.
    fn close(self) {
        let _ = (&self.tcp).write(&write::TERMINATE);
    }

    /// What the upstream said to the first client, as it stands now:
    /// AuthenticationOk, ParameterStatus, BackendKeyData, ReadyForQuery;
    /// `key` is the new client's own BackendKeyData (never the backend's).
    pub fn greeting(&mut self, key: Option<&[u8]>) -> Bytes {
        let params = self.conn.params_status();
        greeting_around(&[], key, |out| out.extend_from_slice(&params))
    }
}

/// A kept connection, as `SHOW SERVERS` lists it.
pub struct KeptRow {
    pub database: String,
    pub user: String,
    pub pid: Option<i32>,
    pub opened: Instant,
}

/// A login's answer from the server's notices of a login (messages as
/// they came, where the server gives them: right after AuthenticationOk),
/// `params` (its ParameterStatus values) and `key` (the client's own
/// BackendKeyData): AuthenticationOk, ParameterStatus, BackendKeyData,
/// ReadyForQuery.
pub fn greeting_with(notices: &[Bytes], params: &[(String, String)], key: Option<&[u8]>) -> Bytes {
    greeting_around(notices, key, |out| write::parameter_statuses(out, params))
}

/// A login's answer around its ParameterStatus messages, which `params`
/// writes.
fn greeting_around(
    notices: &[Bytes],
    key: Option<&[u8]>,
    params: impl FnOnce(&mut BytesMut),
) -> Bytes {
    let mut out = BytesMut::with_capacity(512);
    write::auth_request(&mut out, backend::auth::OK, &[]);
    for n in notices {
        out.extend_from_slice(n);
    }
    params(&mut out);
    if let Some(key) = key {
        out.extend_from_slice(key);
    }
    write::ready_for_query(&mut out, b'I');
    out.freeze()
}

/// Kept connections by startup packet. The lock is taken only when a
/// session starts or ends, never while one forwards. The maps hold at most
/// a key per kept connection, so a cheap hash can't be made to degrade
/// them.
#[derive(Default)]
pub struct KeptConnections {
    idle: Mutex<FxHashMap<Bytes, Vec<Kept>>>,
    /// Connections being reset for the pool now, by startup packet.
    resetting: Mutex<FxHashMap<Bytes, usize>>,
    /// Told when a reset ends, kept or not.
    reset_done: tokio::sync::Notify,
}

/// Longest a new client waits for a connection being reset (one round trip
/// to the server) rather than open another.
const RESET_WAIT: Duration = Duration::from_millis(50);

/// Counts a reset under way while it lives; the pool is told when it ends.
pub struct Resetting<'a> {
    pool: &'a KeptConnections,
    startup: Bytes,
}

impl Drop for Resetting<'_> {
    fn drop(&mut self) {
        {
            let mut r = self
                .pool
                .resetting
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(n) = r.get_mut(&self.startup) {
                *n -= 1;
                if *n == 0 {
                    r.remove(&self.startup);
                }
            }
        }
        self.pool.reset_done.notify_waiters();
    }
}

impl KeptConnections {
    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<Bytes, Vec<Kept>>> {
        // A panic elsewhere while holding it can leave nothing half-done
        // here: each operation is one insert or remove.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most recently kept live connection for `startup`, if any. Dead
    /// and expired ones met on the way are closed.
    pub fn take(&self, startup: &[u8], max_age: Duration) -> Option<Kept> {
        loop {
            let kept = {
                let mut idle = self.lock();
                let list = idle.get_mut(startup)?;
                let kept = list.pop();
                if list.is_empty() {
                    idle.remove(startup);
                }
                kept?
            };
            if kept.since.elapsed() < max_age && kept.alive() {
                return Some(kept);
            }
            kept.close();
        }
    }

    /// Like `take`, but when none is kept and one for `startup` is being
    /// reset right now (its client has just left), waits for it a little
    /// instead of having a new one opened: a client that reconnects at once
    /// then gets the same server process, as from PgBouncer, and the server
    /// forks no other.
    pub async fn take_or_wait(&self, startup: &[u8], max_age: Duration) -> Option<Kept> {
        let mut until = crate::timers::sleep_until(crate::timers::after(RESET_WAIT));
        loop {
            let done = self.reset_done.notified();
            let mut done = std::pin::pin!(done);
            // Registered before looking, so an end between the look and the
            // wait is not missed.
            done.as_mut().enable();
            if let Some(kept) = self.take(startup, max_age) {
                return Some(kept);
            }
            let busy = {
                let r = self.resetting.lock().unwrap_or_else(|e| e.into_inner());
                r.contains_key(startup)
            };
            if !busy || until.bound(done).await.is_err() {
                return None;
            }
        }
    }

    pub fn start_reset(&self, startup: &Bytes) -> Resetting<'_> {
        let mut r = self.resetting.lock().unwrap_or_else(|e| e.into_inner());
        *r.entry(startup.clone()).or_default() += 1;
        Resetting {
            pool: self,
            startup: startup.clone(),
        }
    }

    /// Keeps `kept` for clients that send `startup`, unless `max` are kept
    /// already (then it is closed).
    pub fn put(&self, startup: Bytes, kept: Kept, max: usize) -> bool {
        let mut idle = self.lock();
        if idle.values().map(Vec::len).sum::<usize>() >= max {
            drop(idle);
            kept.close();
            return false;
        }
        idle.entry(startup).or_default().push(kept);
        true
    }

    /// Closes connections kept longer than `max_age`.
    pub fn expire(&self, max_age: Duration) {
        let mut old = Vec::new();
        {
            let mut idle = self.lock();
            for list in idle.values_mut() {
                let (keep, gone): (Vec<_>, Vec<_>) =
                    list.drain(..).partition(|k| k.since.elapsed() < max_age);
                *list = keep;
                old.extend(gone);
            }
            idle.retain(|_, l| !l.is_empty());
        }
        old.into_iter().for_each(Kept::close);
    }

    /// Closes every kept connection.
    pub fn clear(&self) {
        let all = std::mem::take(&mut *self.lock());
        all.into_values().flatten().for_each(Kept::close);
    }

    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    /// The kept connections, for the admin console.
    pub fn rows(&self) -> Vec<KeptRow> {
        let kept: Vec<(Bytes, Option<i32>, Instant)> = self
            .lock()
            .iter()
            .flat_map(|(startup, list)| {
                list.iter().map(|k| {
                    let pid = k.conn.backend_key().map(|(pid, _)| pid);
                    (startup.clone(), pid, k.conn.opened)
                })
            })
            .collect();
        kept.into_iter()
            .map(|(startup, pid, opened)| {
                let params = match startup::decode(startup) {
                    Ok(StartupMessage::Startup { params, .. }) => params,
                    _ => Vec::new(),
                };
                let (user, database) = StartupMessage::user_and_database(&params);
                KeptRow {
                    database,
                    user,
                    pid,
                    opened,
                }
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for KeptConnections {
    fn drop(&mut self) {
        self.clear();
    }
}
