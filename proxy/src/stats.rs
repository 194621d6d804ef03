//! Round-trip accounting (ARCHITECTURE.md, "Round trips: definitions").
//!
//! Each session owns an `Arc<Counters>` that only its own task writes
//! (relaxed atomics on a cache line nobody else writes), so the forwarding
//! path shares no lock with other sessions. Readers (admin console, metrics,
//! `measure`) sum live sessions and the totals of closed ones.

use rustc_hash::FxBuildHasher;
use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU8, AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant, SystemTime},
};

use dashmap::DashMap;

/// Upper bounds (seconds) of the upstream round-trip latency histogram.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// The `LATENCY_BUCKETS` slot of `d` (the last one: over them all).
pub fn latency_bucket(d: Duration) -> usize {
    let s = d.as_secs_f64();
    LATENCY_BUCKETS
        .iter()
        .position(|b| s <= *b)
        .unwrap_or(LATENCY_BUCKETS.len())
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Monotonic counters of one session or of a group of sessions.
        #[derive(Debug, Default)]
        pub struct Counters {
            $($(#[$doc])* pub $name: AtomicU64,)*
            /// Upstream round trips per latency bucket (last slot: over 10 s).
            pub latency_buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
            pub latency_sum_us: AtomicU64,
        }

        /// A plain copy of `Counters`, for reporting.
        #[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
        pub struct Snapshot {
            $(pub $name: u64,)*
            pub latency_buckets: [u64; LATENCY_BUCKETS.len() + 1],
            pub latency_sum_us: u64,
        }

        impl Counters {
            pub fn snapshot(&self) -> Snapshot {
                Snapshot {
                    $($name: self.$name.load(Relaxed),)*
                    latency_buckets: std::array::from_fn(|i| self.latency_buckets[i].load(Relaxed)),
                    latency_sum_us: self.latency_sum_us.load(Relaxed),
                }
            }

            /// Adds `other` into `self`.
            pub fn absorb(&self, other: &Snapshot) {
                $(self.$name.fetch_add(other.$name, Relaxed);)*
                for (b, v) in self.latency_buckets.iter().zip(&other.latency_buckets) {
                    b.fetch_add(*v, Relaxed);
                }
                self.latency_sum_us.fetch_add(other.latency_sum_us, Relaxed);
            }

            pub fn reset(&self) {
                $(self.$name.store(0, Relaxed);)*
                for b in &self.latency_buckets {
                    b.store(0, Relaxed);
                }
                self.latency_sum_us.store(0, Relaxed);
            }
        }

        impl Snapshot {
            pub fn add(&mut self, other: &Snapshot) {
                $(self.$name += other.$name;)*
                for (b, v) in self.latency_buckets.iter_mut().zip(&other.latency_buckets) {
                    *b += v;
                }
                self.latency_sum_us += other.latency_sum_us;
            }

            /// (name, value) of every scalar counter, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// Client connections accepted (for groups; 1 per session).
    sessions,
    client_round_trips,
    upstream_round_trips,
    handshake_round_trips,
    /// Simple queries and Executes.
    statements,
    transactions,
    bytes_from_client,
    bytes_to_client,
    bytes_to_upstream,
    bytes_from_upstream,
    /// ErrorResponses sent to the client.
    errors,
    coalesced_batches,
    probes_passed,
    probes_failed,
    rewritten_queries,
    fallbacks,
    /// Sessions served by a kept upstream connection (`upstream.reuse`).
    reused_upstreams,
    /// BEGINs answered here (`transactions.defer_begin`): each one a round
    /// trip saved.
    deferred_begins,
    /// COMMITs and ROLLBACKs of transactions that never reached the server,
    /// answered here: each one a round trip saved.
    local_ends,
    /// Groups of Closes of a pooled session with no server connection,
    /// answered here: each one a round trip saved, and no connection taken.
    local_closes,
    /// Reads run without their transaction block (`transactions.lazy_reads`).
    lazy_reads,
    /// Reads served by a streaming replica (`[replicas]`).
    replica_reads,
    /// Reads that could have gone to a replica but went to the primary,
    /// since no replica had replayed the client's last write (or what it
    /// read before).
    fresh_reads,
    /// Reads a replica refused or lost, run again on the primary.
    replica_reruns,
}

impl Snapshot {
    /// Client round trips minus upstream ones: what the proxy saved (negative
    /// if it ever spent more than the client did).
    pub fn round_trips_saved(&self) -> i64 {
        self.client_round_trips as i64 - self.upstream_round_trips as i64
    }

    /// Round trips saved, by what saved them: each coalesced batch, each
    /// BEGIN that rode along with the next statement, each COMMIT or
    /// ROLLBACK answered here, each group of Closes answered with no
    /// connection (transaction pooling). A lazy read saves nothing by itself: it lets
    /// its transaction's end be answered here, and is counted there. The
    /// sum can differ from [`Self::round_trips_saved`] by the proxy's own
    /// queries (settings, catalog) and failed write probes.
    pub fn saved_by_kind(&self) -> [(&'static str, u64); 4] {
        [
            ("coalesced", self.coalesced_batches),
            ("deferred_begin", self.deferred_begins),
            ("local_end", self.local_ends),
            ("local_close", self.local_closes),
        ]
    }

    /// Upstream round trips with a latency sample.
    pub fn latency_count(&self) -> u64 {
        self.latency_buckets.iter().sum()
    }

    /// Mean upstream round-trip latency in microseconds (0 without samples).
    pub fn avg_latency_us(&self) -> u64 {
        self.latency_sum_us
            .checked_div(self.latency_count())
            .unwrap_or(0)
    }
}

impl Counters {
    #[inline]
    pub fn add(field: &AtomicU64, n: u64) {
        field.fetch_add(n, Relaxed);
    }

    pub fn record_latency(&self, d: Duration) {
        self.latency_buckets[latency_bucket(d)].fetch_add(1, Relaxed);
        self.latency_sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }
}

/// What a session is doing, as `SHOW CLIENTS` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SessionState {
    Startup = 0,
    Idle = 1,
    Active = 2,
    InTransaction = 3,
    FailedTransaction = 4,
    Closing = 5,
    /// In a transaction the client began that has not reached the server.
    TransactionHeld = 6,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Startup => "startup",
            Self::Idle => "idle",
            Self::Active => "active",
            Self::InTransaction => "idle in transaction",
            Self::FailedTransaction => "idle in failed transaction",
            Self::Closing => "closing",
            Self::TransactionHeld => "idle in transaction (not sent)",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Idle,
            2 => Self::Active,
            3 => Self::InTransaction,
            4 => Self::FailedTransaction,
            5 => Self::Closing,
            6 => Self::TransactionHeld,
            _ => Self::Startup,
        }
    }
}

/// A live session as seen from outside its task.
#[derive(Debug)]
pub struct SessionInfo {
    pub id: u64,
    pub peer: Option<SocketAddr>,
    pub database: String,
    pub user: String,
    pub application_name: String,
    pub started: SystemTime,
    pub upstream_pid: AtomicU64,
    /// Why a pooled session keeps its server connection (`SHOW CLIENTS`).
    pub pin: std::sync::OnceLock<&'static str>,
    /// It is in transaction pooling.
    pub pooled: std::sync::atomic::AtomicBool,
    state: AtomicU8,
    relay: AtomicU8,
    /// Which row of the per-(database, user) totals it counts in (`Row`);
    /// none until it has authenticated.
    row: AtomicU8,
    pub counters: Counters,
}

/// Where a session's counters go in the per-(database, user) totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Row {
    /// Not authenticated (yet): a closed one counts under
    /// `UNAUTHENTICATED`; a live one nowhere, so nothing counted moves
    /// between rows and the metrics' counters only grow.
    None = 0,
    /// Its own (database, user) row.
    Own = 1,
    /// `OTHER`: its row would have been past `Stats::max_rows`.
    Other = 2,
}

/// The row of sessions that closed without authenticating: names a
/// stranger sends make no rows of their own.
pub const UNAUTHENTICATED: &str = "(unauthenticated)";
/// The row of authenticated sessions whose (database, user) came after
/// the row cap (`[limits] max_stats_rows`) was reached.
pub const OTHER: &str = "(other)";

/// What relays a session's traffic, as `SHOW CLIENTS` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Relay {
    /// Not relaying yet (startup, authentication).
    NotYet = 0,
    /// Its worker thread, through its own epoll.
    Epoll = 1,
    /// The tokio runtime (TLS, `upstream.rtt`, `upstream.busy_poll`, an
    /// AGE catalog wait, or no worker threads).
    Runtime = 2,
}

impl Relay {
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            Self::NotYet => None,
            Self::Epoll => Some("epoll"),
            Self::Runtime => Some("runtime"),
        }
    }
}

impl SessionInfo {
    pub fn relay(&self) -> Relay {
        match self.relay.load(Relaxed) {
            1 => Relay::Epoll,
            2 => Relay::Runtime,
            _ => Relay::NotYet,
        }
    }

    pub fn set_relay(&self, r: Relay) {
        self.relay.store(r as u8, Relaxed);
    }

    pub fn state(&self) -> SessionState {
        SessionState::from_u8(self.state.load(Relaxed))
    }

    pub fn set_state(&self, s: SessionState) {
        self.state.store(s as u8, Relaxed);
    }
}

/// Counts attributed to one normalised statement.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StatementCounts {
    pub statements: u64,
    pub client_round_trips: u64,
    pub upstream_round_trips: u64,
}

/// Every session's counters, live and closed.
#[derive(Debug)]
pub struct Stats {
    /// Most (database, user) rows of their own (`[limits] max_stats_rows`).
    max_rows: usize,
    /// Ids are the proxy's own, in sequence: a fast hash serves.
    live: DashMap<u64, Arc<SessionInfo>, FxBuildHasher>,
    /// Totals of closed sessions per (database, user), keyed by
    /// `row_key` (at most `max_rows` and two shared rows: a fast hash
    /// can't be made to degrade it).
    closed: DashMap<String, Snapshot, FxBuildHasher>,
    /// Held for writing while a closing session's counters move from
    /// `live` to `closed`, and for reading while totals are summed, so a
    /// total never misses a session in between or counts it twice: the
    /// metrics' counters only ever grow. Taken once per session end and
    /// per report, never while forwarding.
    moving: RwLock<()>,
    /// Statement fingerprints, merged in when sessions close.
    statements: Mutex<HashMap<String, StatementCounts>>,
    /// Why a feature stepped aside, with counts (rare; not on the hot path).
    fallback_reasons: DashMap<String, u64>,
    next_id: AtomicU64,
    pub started: Option<Instant>,
}

/// Calls `f` with the key of the (database, user) row: both names with a
/// NUL between them (which neither can hold, coming from a startup
/// packet), made in the thread's own buffer so that a lookup allocates
/// nothing.
fn with_row_key<R>(database: &str, user: &str, f: impl Fn(&str) -> R) -> R {
    thread_local! {
        static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    let make = |k: &mut String| {
        k.clear();
        k.push_str(database);
        k.push('\0');
        k.push_str(user);
    };
    let done = KEY.try_with(|k| {
        let mut k = k.try_borrow_mut().ok()?;
        make(&mut k);
        Some(f(&k))
    });
    match done {
        Ok(Some(r)) => r,
        // In use further up, or at thread exit: a key of its own.
        _ => {
            let mut k = String::new();
            make(&mut k);
            f(&k)
        }
    }
}

/// The (database, user) of a row's key (`with_row_key`).
fn row_of_key(key: &str) -> (String, String) {
    let (database, user) = key.split_once('\0').unwrap_or((key, ""));
    (database.to_owned(), user.to_owned())
}

/// Most statement fingerprints kept; the rest are counted under "(other)".
const MAX_FINGERPRINTS: usize = 10_000;

impl Default for Stats {
    fn default() -> Self {
        Self::with_max_rows(crate::config::Limits::default().max_stats_rows)
    }
}

impl Stats {
    pub fn new() -> Self {
        Self::default()
    }

    /// Statistics with at most `max_rows` (database, user) rows of their
    /// own; sessions past them count in one `OTHER` row.
    pub fn with_max_rows(max_rows: usize) -> Self {
        Self {
            max_rows,
            live: Default::default(),
            closed: Default::default(),
            moving: Default::default(),
            statements: Default::default(),
            fallback_reasons: Default::default(),
            next_id: Default::default(),
            started: Some(Instant::now()),
        }
    }

    /// The session has authenticated: from now on it counts in its own
    /// (database, user) row, or in `OTHER` when that row would be past
    /// the cap. Once per session, outside the forwarding path.
    pub fn admit(&self, info: &SessionInfo) {
        // Nearly always its row is there already: no count of the rows.
        if with_row_key(&info.database, &info.user, |k| self.closed.contains_key(k)) {
            info.row.store(Row::Own as u8, Relaxed);
            return;
        }
        let shared_rows = [UNAUTHENTICATED, OTHER]
            .iter()
            .filter(|r| with_row_key(r, r, |k| self.closed.contains_key(k)))
            .count();
        // Concurrent admissions may pass the cap by a few rows at most.
        let own = self.closed.len().saturating_sub(shared_rows) < self.max_rows;
        if own {
            with_row_key(&info.database, &info.user, |k| {
                self.closed.entry(k.to_owned()).or_default();
            });
        }
        let row = if own { Row::Own } else { Row::Other };
        info.row.store(row as u8, Relaxed);
    }

    /// The totals row a session counts in, if any yet.
    fn row_of<'a>(&self, info: &'a SessionInfo, closing: bool) -> Option<(&'a str, &'a str)> {
        let both = |s: &'static str| Some((s, s));
        match info.row.load(Relaxed) {
            1 => Some((&info.database, &info.user)),
            2 => both(OTHER),
            _ if closing => both(UNAUTHENTICATED),
            _ => None,
        }
    }

    pub fn open_session(
        &self,
        peer: Option<SocketAddr>,
        database: &str,
        user: &str,
        application_name: &str,
    ) -> Arc<SessionInfo> {
        let id = self.next_id.fetch_add(1, Relaxed) + 1;
        let info = Arc::new(SessionInfo {
            id,
            peer,
            database: database.into(),
            user: user.into(),
            application_name: application_name.into(),
            started: SystemTime::now(),
            upstream_pid: AtomicU64::new(0),
            pin: std::sync::OnceLock::new(),
            pooled: std::sync::atomic::AtomicBool::new(false),
            state: AtomicU8::new(SessionState::Startup as u8),
            relay: AtomicU8::new(Relay::NotYet as u8),
            row: AtomicU8::new(Row::None as u8),
            counters: Counters::default(),
        });
        info.counters.sessions.store(1, Relaxed);
        self.live.insert(id, info.clone());
        info
    }

    /// Moves a session's counters into the closed totals and merges its
    /// per-statement counts (already keyed by fingerprint).
    pub fn close_session(&self, info: &SessionInfo, statements: Vec<(String, StatementCounts)>) {
        {
            let _moving = self.moving.write().unwrap_or_else(|e| e.into_inner());
            self.live.remove(&info.id);
            let snap = info.counters.snapshot();
            if let Some((database, user)) = self.row_of(info, true) {
                with_row_key(database, user, |k| match self.closed.get_mut(k) {
                    Some(mut row) => row.add(&snap),
                    None => self.closed.entry(k.to_owned()).or_default().add(&snap),
                });
            }
        }
        self.add_statements(statements);
    }

    /// A session's round trips per statement, merged by fingerprint: at
    /// its end, or while it is quiet.
    pub fn add_statements(&self, statements: Vec<(String, StatementCounts)>) {
        if statements.is_empty() {
            return;
        }
        let mut all = self.statements.lock().unwrap_or_else(|e| e.into_inner());
        for (fp, c) in statements {
            let key = if all.len() >= MAX_FINGERPRINTS && !all.contains_key(&fp) {
                "(other)".into()
            } else {
                fp
            };
            let e = all.entry(key).or_default();
            e.statements += c.statements;
            e.client_round_trips += c.client_round_trips;
            e.upstream_round_trips += c.upstream_round_trips;
        }
    }

    pub fn note_fallback(&self, reason: &str) {
        *self.fallback_reasons.entry(reason.to_owned()).or_default() += 1;
    }

    pub fn fallback_reasons(&self) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self
            .fallback_reasons
            .iter()
            .map(|e| (e.key().clone(), *e.value()))
            .collect();
        v.sort();
        v
    }

    pub fn sessions(&self) -> Vec<Arc<SessionInfo>> {
        let mut v: Vec<_> = self.live.iter().map(|e| e.value().clone()).collect();
        v.sort_by_key(|s| s.id);
        v
    }

    /// Totals per (database, user), live sessions included.
    pub fn by_database_user(&self) -> Vec<((String, String), Snapshot)> {
        let _moving = self.moving.read().unwrap_or_else(|e| e.into_inner());
        let mut groups: HashMap<(String, String), Snapshot> = self
            .closed
            .iter()
            .map(|e| (row_of_key(e.key()), e.value().clone()))
            .collect();
        for s in self.live.iter() {
            if let Some((database, user)) = self.row_of(&s, false) {
                let row = (database.to_owned(), user.to_owned());
                groups.entry(row).or_default().add(&s.counters.snapshot());
            }
        }
        let mut v: Vec<_> = groups.into_iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    pub fn total(&self) -> Snapshot {
        let mut t = Snapshot::default();
        for (_, s) in self.by_database_user() {
            t.add(&s);
        }
        t
    }

    /// Statement fingerprints ordered by client round trips, most first.
    pub fn top_statements(&self, n: usize) -> Vec<(String, StatementCounts)> {
        let all = self.statements.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = all.iter().map(|(k, c)| (k.clone(), c.clone())).collect();
        v.sort_by(|a, b| {
            b.1.client_round_trips
                .cmp(&a.1.client_round_trips)
                .then(a.0.cmp(&b.0))
        });
        v.truncate(n);
        v
    }

    pub fn reset(&self) {
        let _moving = self.moving.write().unwrap_or_else(|e| e.into_inner());
        self.closed.clear();
        for s in self.live.iter() {
            s.counters.reset();
        }
        self.statements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.fallback_reasons.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closing_session_is_never_missing_from_the_totals() {
        let stats = Arc::new(Stats::new());
        let n = 2000;
        let sessions: Vec<_> = (0..n)
            .map(|_| {
                let s = stats.open_session(None, "db", "u", "");
                stats.admit(&s);
                Counters::add(&s.counters.client_round_trips, 1);
                s
            })
            .collect();
        let closer = {
            let stats = stats.clone();
            std::thread::spawn(move || {
                for s in sessions {
                    stats.close_session(&s, Vec::new());
                }
            })
        };
        while !closer.is_finished() {
            assert_eq!(stats.total().client_round_trips, n);
        }
        closer.join().unwrap();
        assert_eq!(stats.total().client_round_trips, n);
    }

    #[test]
    fn totals_include_live_and_closed() {
        let stats = Stats::new();
        let a = stats.open_session(None, "db", "u", "");
        let b = stats.open_session(None, "db", "u", "");
        stats.admit(&a);
        stats.admit(&b);
        Counters::add(&a.counters.client_round_trips, 3);
        Counters::add(&b.counters.client_round_trips, 4);
        a.counters.record_latency(Duration::from_micros(300));
        stats.close_session(&a, Vec::new());
        let t = stats.total();
        assert_eq!(t.client_round_trips, 7);
        assert_eq!(t.sessions, 2);
        assert_eq!(t.latency_buckets[2], 1);
        stats.reset();
        assert_eq!(stats.total().client_round_trips, 0);
    }

    #[test]
    fn only_authenticated_sessions_get_rows_and_rows_are_capped() {
        let stats = Stats::with_max_rows(2);
        let rows = |stats: &Stats| -> Vec<String> {
            let rows = stats.by_database_user().into_iter();
            rows.map(|((d, u), s)| format!("{d}/{u}:{}", s.sessions))
                .collect()
        };
        // Strangers: invisible while they try, one row once they are gone.
        let strangers: Vec<_> = (0..100)
            .map(|i| stats.open_session(None, "db", &format!("u{i}"), ""))
            .collect();
        assert!(rows(&stats).is_empty());
        for s in &strangers {
            stats.close_session(s, Vec::new());
        }
        assert_eq!(rows(&stats), ["(unauthenticated)/(unauthenticated):100"]);
        // Authenticated: own rows up to the cap, then "(other)".
        for user in ["a", "b", "c", "d", "a"] {
            let s = stats.open_session(None, "db", user, "");
            stats.admit(&s);
            stats.close_session(&s, Vec::new());
        }
        assert_eq!(
            rows(&stats),
            [
                "(other)/(other):2",
                "(unauthenticated)/(unauthenticated):100",
                "db/a:2",
                "db/b:1",
            ]
        );
    }
}
