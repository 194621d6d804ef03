//! Cancel keys. Every client gets a BackendKeyData of its own, made here,
//! mapped to the backend that runs its queries now and forgotten when the
//! client leaves. A backend's own key is never shown to a client: with
//! `[upstream] reuse` a backend outlives its client, and a key that client
//! kept would otherwise cancel the next client's queries.
//!
//! A client with a backend of its own gets that backend's process id
//! (clients compare it with a notification's sender to spot their own,
//! and `pg_terminate_backend` of it ends their own session). A client of
//! a transaction pool gets a made-up, negative one instead: the backend it
//! logged in on runs other clients' queries later, and
//! `pg_terminate_backend(<its pid>)` must not end one of theirs. A
//! negative pid is no backend's, so that call finds none. The secret is
//! random, as long as the backend's (4 bytes in protocol 3.0, longer in
//! 3.2). The map goes from a client's key to a backend, so a session that
//! changes backends while it lives only has to point its key elsewhere. A
//! pooled session does that at every transaction, through its own `Target`
//! (no lookup in the shared map, whose shard lock every session would
//! take).

use std::sync::{Arc, Mutex, PoisonError, atomic::Ordering::SeqCst};

use bytes::{Bytes, BytesMut};
use dashmap::{DashMap, mapref::entry::Entry};
use ring::rand::{SecureRandom, SystemRandom};

use crate::wire::{backend, tag};

/// A cancel key as the protocol carries it: process id and secret.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub pid: i32,
    pub secret: Bytes,
}

impl Key {
    /// The key in a BackendKeyData message, if it is one.
    pub fn from_message(msg: &[u8]) -> Option<Self> {
        if msg.first() != Some(&tag::BACKEND_KEY_DATA) {
            return None;
        }
        let (pid, secret) = backend::backend_key(msg)?;
        Some(Self { pid, secret })
    }

    /// The BackendKeyData message that hands this key to a client.
    pub fn message(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(9 + self.secret.len());
        crate::wire::write::backend_key_data(&mut out, self.pid, &self.secret);
        out.freeze()
    }
}

/// Whose process id a client's key carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pid {
    /// The backend's: the client keeps that backend for its whole session.
    Backend,
    /// A made-up negative one: the client shares backends with others.
    MadeUp,
}

/// The backend a client's key cancels now. `None`: the client runs
/// nothing now (transaction pooling, between two server connections), and
/// its cancel goes nowhere; unless the session is getting a connection for
/// a statement of its client's (`expect`): a cancel then waits for that
/// connection's backend, as the statement does.
#[derive(Default)]
pub struct Target {
    backend: Mutex<Option<Key>>,
    /// The session is getting a connection for its client's statement.
    expected: std::sync::atomic::AtomicBool,
    /// Told each change of `backend`.
    changed: tokio::sync::Notify,
    /// Cancels waiting for `changed`.
    waiting: std::sync::atomic::AtomicUsize,
}

impl Target {
    fn new(backend: Key) -> Self {
        Self {
            backend: Mutex::new(Some(backend)),
            ..Default::default()
        }
    }

    /// Points the key at `backend` (`None`: at nothing).
    pub fn set(&self, backend: Option<Key>) {
        // A poisoned lock still holds a whole `Option`.
        *self.backend.lock().unwrap_or_else(PoisonError::into_inner) = backend;
        self.expected.store(false, SeqCst);
        if self.waiting.load(SeqCst) > 0 {
            self.changed.notify_waiters();
            // Set from a session's turn in its worker's relay, the wake may
            // be for a task of the same thread.
            crate::worker::note_woken();
        }
    }

    /// The session has its client's statement and is getting a server
    /// connection for it: a cancel that comes meanwhile is for that
    /// connection's backend.
    pub fn expect(&self) {
        self.expected.store(true, SeqCst);
    }

    fn get(&self) -> Option<Key> {
        self.backend
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The backend a cancel that comes now is for: the one the key points
    /// at, or, while the session gets a connection for its client's
    /// statement, the one it gets within `limit`.
    pub async fn backend_for_cancel(&self, limit: std::time::Duration) -> Option<Key> {
        if let Some(b) = self.get() {
            return Some(b);
        }
        if !self.expected.load(SeqCst) {
            return None;
        }
        // Counted before registering and looking again: a `set` either
        // sees this wait and wakes it, or came before the second look.
        self.waiting.fetch_add(1, SeqCst);
        let changed = self.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if self.get().is_none() && self.expected.load(SeqCst) {
            let _ = crate::timers::timeout(limit, changed).await;
        }
        self.waiting.fetch_sub(1, SeqCst);
        self.get()
    }
}

/// The keys handed to clients, each with the backend it cancels now.
pub struct CancelKeys {
    /// Hashed with FxHash, not SipHash: every key in the map is drawn here
    /// at random, so no peer chooses what collides.
    map: DashMap<Key, Arc<Target>, rustc_hash::FxBuildHasher>,
    rng: SystemRandom,
}

impl Default for CancelKeys {
    fn default() -> Self {
        Self {
            map: DashMap::default(),
            rng: SystemRandom::new(),
        }
    }
}

impl CancelKeys {
    /// A new key for a client whose queries run on `backend`, registered
    /// before the client can know it. `None` only when the system's random
    /// source fails; the client then gets no key, and can't cancel.
    pub fn issue(&self, backend: Key, pid: Pid) -> Option<Key> {
        // A secret shorter than PostgreSQL's own would be easier to guess.
        let mut secret = vec![0u8; backend.secret.len().clamp(4, 256)];
        let mut made_up = [0u8; 4];
        // A key already in use is drawn again: two clients must never
        // share one.
        for _ in 0..8 {
            self.rng.fill(&mut secret).ok()?;
            let pid = match pid {
                Pid::Backend => backend.pid,
                Pid::MadeUp => {
                    self.rng.fill(&mut made_up).ok()?;
                    // The sign bit set: PostgreSQL's pids are positive.
                    i32::from_ne_bytes(made_up) | i32::MIN
                }
            };
            let key = Key {
                pid,
                secret: Bytes::copy_from_slice(&secret),
            };
            if let Entry::Vacant(e) = self.map.entry(key.clone()) {
                e.insert(Arc::new(Target::new(backend)));
                return Some(key);
            }
        }
        None
    }

    /// Where a client's key points, for its session to point it anew
    /// without the map.
    pub fn target(&self, key: &Key) -> Option<Arc<Target>> {
        self.map.get(key).map(|t| t.clone())
    }

    /// The client has given its backend back to the pool: its key cancels
    /// nothing until it has another (that backend now runs other clients').
    pub fn detach(&self, key: &Key) {
        if let Some(t) = self.map.get(key) {
            t.set(None);
        }
    }

    /// The client has left: its key cancels nothing any more.
    pub fn forget(&self, key: &Key) {
        // A cancel waiting for its backend stops waiting.
        if let Some((_, t)) = self.map.remove(key) {
            t.set(None);
        }
    }

    /// The backend a client's key cancels now (a cancel asks its `Target`,
    /// which may wait for one).
    #[cfg(test)]
    pub fn backend(&self, key: &Key) -> Option<Key> {
        self.map.get(key).and_then(|t| t.get())
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pid: i32, secret: &'static [u8]) -> Key {
        Key {
            pid,
            secret: Bytes::from_static(secret),
        }
    }

    #[test]
    fn each_client_gets_its_own_key_for_one_backend() {
        let keys = CancelKeys::default();
        let backend = key(42, b"abcd");
        let a = keys.issue(backend.clone(), Pid::Backend).unwrap();
        assert_eq!(a.pid, 42, "the backend's pid");
        assert_eq!(a.secret.len(), 4);
        assert_eq!(keys.backend(&a), Some(backend.clone()));
        assert_eq!(
            keys.backend(&backend),
            None,
            "the backend's own key is no key"
        );
        keys.forget(&a);
        let b = keys.issue(backend.clone(), Pid::Backend).unwrap();
        assert_ne!(a, b);
        assert_eq!(keys.backend(&a), None, "a departed client's key is dead");
        let target = keys.target(&b).unwrap();
        target.set(Some(key(43, b"wxyz")));
        assert_eq!(
            keys.backend(&b),
            Some(key(43, b"wxyz")),
            "through its target"
        );
        keys.detach(&b);
        assert_eq!(keys.backend(&b), None, "between two backends");
        keys.forget(&b);
        target.set(Some(key(45, b"1234")));
        assert_eq!(
            keys.backend(&b),
            None,
            "a forgotten key's target is no one's"
        );
        assert_eq!(Key::from_message(&b.message()), Some(b));
    }

    #[test]
    fn a_longer_secret_gets_a_secret_as_long() {
        let keys = CancelKeys::default();
        let long = Key {
            pid: 7,
            secret: Bytes::from(vec![1u8; 32]),
        };
        assert_eq!(keys.issue(long, Pid::Backend).unwrap().secret.len(), 32);
    }

    #[test]
    fn a_pooled_client_gets_a_pid_no_backend_has() {
        let keys = CancelKeys::default();
        let backend = key(42, b"abcd");
        let a = keys.issue(backend.clone(), Pid::MadeUp).unwrap();
        let b = keys.issue(backend.clone(), Pid::MadeUp).unwrap();
        assert!(a.pid < 0 && b.pid < 0, "{} {}", a.pid, b.pid);
        assert_ne!(a, b);
        assert_eq!(keys.backend(&a), Some(backend.clone()));
        assert_eq!(Key::from_message(&a.message()), Some(a));
    }
}
