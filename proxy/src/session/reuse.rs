//! Upstream connections kept for the next client (`[upstream] reuse`).
//!
//! A session whose client leaves at a clean point resets its upstream
//! connection with DISCARD ALL and leaves it here; a client that sends the
//! same startup packet, byte for byte, takes it instead of connecting, and
//! gets the greeting the upstream gave the first one. Only connections the
//! upstream let in without a password are kept: a kept connection admits
//! the next client without asking the upstream, which is only what the
//! upstream itself would do for a trusted user.

use std::{
    collections::HashMap,
    io::Write,
    sync::Mutex,
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use super::{
    handshake::{Authed, HandshakeEnd, KeyGuard, Pair},
    io::read_message,
    settings::Settings,
};
use crate::{
    net::Stream,
    server::Shared,
    stats::{Counters, SessionInfo},
    wire::{
        backend,
        startup::{self, StartupMessage},
        tag, write,
    },
};

/// One reset upstream connection, waiting for a client.
pub struct Kept {
    tcp: std::net::TcpStream,
    params: Vec<(String, String)>,
    key: Option<Bytes>,
    /// The connection's settings after its reset, when a client learned
    /// them: the next client need not ask.
    settings: Option<Settings>,
    /// When it was opened, and when it was kept.
    opened: Instant,
    since: Instant,
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
    /// AuthenticationOk, ParameterStatus, BackendKeyData, ReadyForQuery.
    fn greeting(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(512);
        write::auth_request(&mut out, backend::auth::OK, &[]);
        for (k, v) in &self.params {
            write::parameter_status(&mut out, k, v);
        }
        if let Some(key) = &self.key {
            out.extend_from_slice(key);
        }
        write::ready_for_query(&mut out, b'I');
        out.freeze()
    }
}

/// A kept connection, as `SHOW SERVERS` lists it.
pub struct KeptRow {
    pub database: String,
    pub user: String,
    pub pid: Option<i32>,
    pub opened: Instant,
}

/// Kept connections by startup packet. The lock is taken only when a
/// session starts or ends, never while one forwards.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<Bytes, Vec<Kept>>>,
    /// Connections being reset for the pool now, by startup packet.
    resetting: Mutex<HashMap<Bytes, usize>>,
    /// Told when a reset ends, kept or not.
    reset_done: tokio::sync::Notify,
}

/// Longest a new client waits for a connection being reset (one round trip
/// to the server) rather than open another.
const RESET_WAIT: Duration = Duration::from_millis(50);

/// Counts a reset under way while it lives; the pool is told when it ends.
struct Resetting<'a> {
    pool: &'a Pool,
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

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Bytes, Vec<Kept>>> {
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

    fn start_reset(&self, startup: &Bytes) -> Resetting<'_> {
        let mut r = self.resetting.lock().unwrap_or_else(|e| e.into_inner());
        *r.entry(startup.clone()).or_default() += 1;
        Resetting {
            pool: self,
            startup: startup.clone(),
        }
    }

    /// Keeps `kept` for clients that send `startup`, unless `max` are kept
    /// already (then it is closed).
    fn put(&self, startup: Bytes, kept: Kept, max: usize) -> bool {
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
                    let pid = k.key.as_deref().and_then(backend::backend_key);
                    (startup.clone(), pid.map(|(pid, _)| pid), k.opened)
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

impl Drop for Pool {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Why a connection was not kept.
#[derive(Debug, thiserror::Error)]
pub enum ParkError {
    #[error("upstream connection is TLS")]
    Tls,
    #[error("reset did not finish: {0}")]
    Read(#[from] super::io::ReadError),
    #[error("reset failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("reset answered with message type '{}'", char::from(*.0))]
    Unexpected(u8),
    #[error("reset took longer than {0:?}")]
    Timeout(Duration),
    #[error("{0} connections are kept already (upstream.reuse_max_idle)")]
    Full(usize),
    #[error("connection is older than upstream.reuse_lifetime ({0:?})")]
    Old(Duration),
}

/// Resets the upstream connection of a session whose client has left
/// cleanly and keeps it for the next client sending `startup`; closes it
/// when that fails. `params` are the session's latest ParameterStatus values.
/// What a session leaves with its upstream connection.
pub struct Leaving {
    pub upstream: Stream,
    pub startup: Bytes,
    pub params: Vec<(String, String)>,
    pub key: Option<Bytes>,
    pub opened: Instant,
    pub settings: Option<Settings>,
    /// ReadyForQuery messages still owed for queries of the proxy's own
    /// (the session's settings, asked at its start): read and dropped
    /// before the reset's.
    pub owed: usize,
}

pub async fn park(leaving: Leaving, shared: &Shared) -> Result<(), ParkError> {
    let Leaving {
        upstream,
        startup,
        mut params,
        key,
        opened,
        settings,
        owed,
    } = leaving;
    let Stream::Plain(mut tcp) = upstream else {
        return Err(ParkError::Tls);
    };
    let lifetime = shared.config.upstream.reuse_lifetime;
    if opened.elapsed() >= lifetime {
        let _ = tcp.write_all(&write::TERMINATE).await;
        return Err(ParkError::Old(lifetime));
    }
    // Until it is kept (or given up), a new client for it waits for it.
    let _resetting = shared.reuse.start_reset(&startup);
    let limit = shared.config.upstream.connect_timeout;
    let reset = reset(
        &mut tcp,
        &mut params,
        shared.config.limits.max_message_bytes,
        owed,
    );
    let result = match crate::timers::timeout(limit, reset).await {
        Ok(r) => r,
        Err(_) => Err(ParkError::Timeout(limit)),
    };
    if let Err(e) = result {
        let _ = tcp.write_all(&write::TERMINATE).await;
        return Err(e);
    }
    let tcp = tcp.into_std()?;
    // A blocking socket would hang the liveness check.
    tcp.set_nonblocking(true)?;
    let kept = Kept {
        tcp,
        params,
        key,
        settings,
        opened,
        since: Instant::now(),
    };
    let max = shared.config.upstream.reuse_max_idle;
    if shared.reuse.put(startup, kept, max) {
        Ok(())
    } else {
        Err(ParkError::Full(max))
    }
}

/// DISCARD ALL, read to its ReadyForQuery. ParameterStatus messages (RESET
/// ALL reports the values it restores) update `params`; notices and
/// notifications still on their way to the old client are dropped, and so
/// are the answers to `owed` queries of the proxy's own sent before.
async fn reset(
    tcp: &mut tokio::net::TcpStream,
    params: &mut Vec<(String, String)>,
    max: usize,
    mut owed: usize,
) -> Result<(), ParkError> {
    let mut query = BytesMut::with_capacity(17);
    write::message(&mut query, tag::QUERY, |b| {
        b.extend_from_slice(b"DISCARD ALL\0")
    });
    tcp.write_all(&query).await?;
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        let msg = read_message(tcp, &mut buf, max).await?;
        if owed > 0 {
            if msg[0] == tag::READY_FOR_QUERY {
                owed -= 1;
            }
            continue;
        }
        match msg[0] {
            tag::COMMAND_COMPLETE | tag::NOTICE_RESPONSE | tag::NOTIFICATION => {}
            tag::PARAMETER_STATUS => {
                if let Some((k, v)) = backend::parameter_status(&msg) {
                    set_param(params, k, v);
                }
            }
            tag::READY_FOR_QUERY if backend::ready_status(&msg) == b'I' && buf.is_empty() => {
                return Ok(());
            }
            t => return Err(ParkError::Unexpected(t)),
        }
    }
}

/// Records a ParameterStatus value, keeping the order names first came in.
pub fn set_param(params: &mut Vec<(String, String)>, name: &str, value: &str) {
    match params.iter_mut().find(|(k, _)| k == name) {
        Some((_, v)) => {
            if v != value {
                *v = value.to_owned();
            }
        }
        None => params.push((name.to_owned(), value.to_owned())),
    }
}

/// Hands a kept connection to a new client: the connection moves to this
/// thread's reactor and the client gets the first client's greeting.
pub async fn adopt(
    kept: Kept,
    client: Stream,
    shared: &Shared,
    info: &SessionInfo,
) -> Result<(Pair, Authed), HandshakeEnd> {
    let greeting = kept.greeting();
    let Kept {
        tcp,
        params,
        key,
        opened,
        settings,
        ..
    } = kept;
    // Registered before the client can know the key.
    let registered = KeyGuard::register(shared, key.as_deref());
    let upstream = Stream::Plain(tokio::net::TcpStream::from_std(tcp)?);
    let mut io = Pair { client, upstream };
    Counters::add(&info.counters.bytes_to_client, greeting.len() as u64);
    io.client.write_all(&greeting).await?;
    registered.keep();
    let authed = Authed {
        cin: BytesMut::with_capacity(8192),
        uin: BytesMut::with_capacity(8192),
        params,
        key,
        plain_trust: true,
        opened,
        settings,
    };
    Ok((io, authed))
}
