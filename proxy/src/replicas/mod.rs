//! Streaming replicas of the primary, as this process sees them: each one's
//! replay position and state, polled by a watcher task of its own
//! (`monitor.rs`) and read by sessions with plain atomic loads, so routing
//! a read takes no lock. A session's own replica connection is in
//! `relay/replica/`; a transaction pool's, shared by its clients, in
//! `spare.rs`.

mod conn;
mod monitor;
pub mod spare;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{
            AtomicU8, AtomicU64,
            Ordering::{Acquire, Relaxed, Release},
        },
    },
    time::Duration,
};

pub use conn::{ReplicaError, format_lsn, open, parse_lsn, query_message, why};

use crate::config::Replicas as Config;

/// Where a replica stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Not reached yet, or its watcher's connection failed.
    Down = 0,
    /// In recovery and within `max_lag`: serves reads.
    Up = 1,
    /// In recovery but more than `max_lag` behind.
    Lagging = 2,
    /// Out of recovery: promoted, no longer a replica.
    Promoted = 3,
}

impl State {
    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Up,
            2 => State::Lagging,
            3 => State::Promoted,
            _ => State::Down,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            State::Down => "down",
            State::Up => "replica",
            State::Lagging => "lagging",
            State::Promoted => "promoted",
        }
    }
}

/// One replica, as its watcher last found it.
#[derive(Debug)]
pub struct Replica {
    pub address: String,
    state: AtomicU8,
    replay: AtomicU64,
    lag_us: AtomicU64,
    /// Client reads it served.
    pub reads: AtomicU64,
}

impl Replica {
    fn new(address: String) -> Self {
        Self {
            address,
            state: AtomicU8::new(State::Down as u8),
            replay: AtomicU64::new(0),
            lag_us: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        }
    }

    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Acquire))
    }

    /// `pg_last_wal_replay_lsn()` at the last poll.
    pub fn replay(&self) -> u64 {
        self.replay.load(Relaxed)
    }

    /// How far behind it was at the last poll.
    pub fn lag(&self) -> Duration {
        Duration::from_micros(self.lag_us.load(Relaxed))
    }

    fn set(&self, state: State, replay: u64, lag: Duration) {
        // The position first: a session that sees the state (Acquire) sees
        // this position or a later one.
        self.replay.store(replay, Relaxed);
        self.lag_us
            .store(lag.as_micros().min(u64::MAX as u128) as u64, Relaxed);
        self.state.store(state as u8, Release);
    }

    fn set_state(&self, state: State) {
        self.state.store(state as u8, Relaxed);
    }
}

/// The replicas of this process.
#[derive(Debug, Default)]
pub struct Replicas {
    pub list: Vec<Arc<Replica>>,
    watchers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Replicas {
    /// None configured.
    pub fn none() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Starts a watcher task for each of `addresses` on the current
    /// runtime.
    pub fn start(config: &Config, addresses: Vec<String>) -> Arc<Self> {
        let list: Vec<_> = addresses
            .into_iter()
            .map(|a| Arc::new(Replica::new(a)))
            .collect();
        let watchers = list
            .iter()
            .map(|r| tokio::spawn(monitor::watch(r.clone(), config.clone())))
            .collect();
        Arc::new(Self {
            list,
            watchers: Mutex::new(watchers),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Stops the watchers.
    pub fn stop(&self) {
        let mut w = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        for h in w.drain(..) {
            h.abort();
        }
    }

    /// A replica that serves reads and has replayed `floor`, looking from
    /// `from` on (sessions start at different ones to spread their reads).
    pub fn pick(&self, floor: u64, from: usize) -> Option<usize> {
        let n = self.list.len();
        (0..n).map(|i| (from + i) % n).find(|&i| {
            let r = &self.list[i];
            r.state() == State::Up && r.replay() >= floor
        })
    }

    /// Whether replica `i` serves reads and has replayed `floor`.
    pub fn fresh(&self, i: usize, floor: u64) -> bool {
        self.list
            .get(i)
            .is_some_and(|r| r.state() == State::Up && r.replay() >= floor)
    }

    /// Some replica serves reads, however far it has replayed.
    pub fn any_up(&self) -> bool {
        self.list.iter().any(|r| r.state() == State::Up)
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        self.stop();
    }
}
