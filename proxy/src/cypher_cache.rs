//! Cypher rewriting, shared between sessions: the AGE catalog per database
//! (fetched once over a session's own upstream connection, since the proxy
//! holds no credentials of its own) and compiled plans by (catalog version,
//! statement text).

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use dashmap::DashMap;
use onetrip_planner::{analysis::Analysis, cypher::Catalog};
use tokio::sync::watch;

/// Most compiled plans kept, and most bytes of their texts (statement and
/// compiled SQL); the cache starts over when either is reached. A text
/// longer than a session cache keeps is not shared either.
const MAX_PLANS: usize = 10_000;
const MAX_PLAN_BYTES: usize = 32 << 20;

/// The first wait after a catalog fetch failed; each failure in a row
/// doubles it, up to `MAX_RETRY`.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);

/// How a call the compiler leaves to AGE is counted among the fallback
/// reasons, before the reason's name (`SHOW REWRITES` tells them apart).
pub const DECLINED_PREFIX: &str = "cypher declined: ";

/// What a session learns when it asks for a database's catalog.
pub enum Lookup {
    /// Loaded; `None` when the database has no AGE.
    Ready(u64, Option<Arc<Catalog>>),
    /// Another session is fetching it; wait for the watch to change.
    Loading(watch::Receiver<u64>),
    /// Nobody has it: the caller must fetch it, then `finish`, `failed` or
    /// `abandon`.
    MustLoad,
    /// The last fetch failed and the next is not due yet: nothing is
    /// compiled meanwhile.
    Failed,
}

enum State {
    Empty,
    /// A session fetches it; `stale`: something may have changed the
    /// catalog since the fetch started, so what it read is not kept.
    Loading {
        stale: bool,
    },
    Ready(u64, Option<Arc<Catalog>>),
    /// The last fetch failed; fetch again once `retry_at` has passed.
    Failed {
        retry_at: Instant,
        wait: Duration,
    },
}

/// One database's catalog: its state and who waits for it to change.
struct DbCatalog {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    /// How long to wait if the fetch under way fails.
    next_wait: Mutex<Duration>,
}

#[derive(Default)]
pub struct CypherCache {
    databases: DashMap<String, Arc<DbCatalog>>,
    /// Analyses of statements with `cypher()` calls, by catalog version.
    analyses: DashMap<(u64, Box<str>), Arc<Analysis>>,
    /// Bytes of text in `analyses` (approximate under races: a bound, not
    /// an account).
    analysis_bytes: std::sync::atomic::AtomicUsize,
    versions: AtomicU64,
    /// Statements with `cypher()` calls analysed for a catalog, and those
    /// whose analysis came from a session's cache or another session's.
    plans_made: AtomicU64,
    plans_reused: AtomicU64,
}

impl CypherCache {
    fn database(&self, db: &str) -> Arc<DbCatalog> {
        if let Some(s) = self.databases.get(db) {
            return s.clone();
        }
        self.databases
            .entry(db.to_owned())
            .or_insert_with(|| {
                Arc::new(DbCatalog {
                    state: Mutex::new(State::Empty),
                    changed: watch::channel(0).0,
                    next_wait: Mutex::new(FIRST_RETRY),
                })
            })
            .clone()
    }

    /// Single-flight lookup: of the sessions that miss together, exactly one
    /// gets `MustLoad`; the others wait for it.
    pub fn lookup(&self, db: &str) -> Lookup {
        let entry = self.database(db);
        let mut st = entry.state.lock().unwrap_or_else(|e| e.into_inner());
        match &*st {
            State::Ready(v, c) => Lookup::Ready(*v, c.clone()),
            State::Loading { .. } => Lookup::Loading(entry.changed.subscribe()),
            State::Failed { retry_at, .. } if Instant::now() < *retry_at => Lookup::Failed,
            State::Empty | State::Failed { .. } => {
                let wait = match &*st {
                    State::Failed { wait, .. } => (*wait * 2).min(MAX_RETRY),
                    _ => FIRST_RETRY,
                };
                *st = State::Loading { stale: false };
                *entry.next_wait.lock().unwrap_or_else(|e| e.into_inner()) = wait;
                Lookup::MustLoad
            }
        }
    }

    /// The fetch failed (for a reason other than AGE's absence): sessions
    /// forward their statements unchanged until a retry, after a wait
    /// that doubles with each failure in a row.
    pub fn failed(&self, db: &str) {
        let entry = self.database(db);
        let wait = *entry.next_wait.lock().unwrap_or_else(|e| e.into_inner());
        *entry.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Failed {
            retry_at: crate::timers::after(wait),
            wait,
        };
        entry.changed.send_modify(|_| {});
    }

    /// Stores a fetched catalog (`None`: no AGE in this database), unless
    /// it was invalidated while being fetched: then the next miss fetches
    /// again.
    pub fn finish(&self, db: &str, catalog: Option<Catalog>) {
        let v = self.versions.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = self.database(db);
        let mut st = entry.state.lock().unwrap_or_else(|e| e.into_inner());
        *st = match *st {
            State::Loading { stale: true } => State::Empty,
            _ => State::Ready(v, catalog.map(Arc::new)),
        };
        drop(st);
        entry.changed.send_replace(v);
    }

    /// The fetch could not run; the next miss tries again.
    pub fn abandon(&self, db: &str) {
        let entry = self.database(db);
        let mut st = entry.state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*st, State::Loading { .. }) {
            *st = State::Empty;
        }
        drop(st);
        entry.changed.send_modify(|_| {});
    }

    /// Labels or graphs may have changed: fetch again on the next miss. A
    /// fetch under way may have read the catalog before the change: its
    /// answer is not kept.
    pub fn invalidate(&self, db: &str) {
        let entry = self.database(db);
        let mut st = entry.state.lock().unwrap_or_else(|e| e.into_inner());
        match *st {
            State::Ready(..) | State::Failed { .. } => *st = State::Empty,
            State::Loading { .. } => *st = State::Loading { stale: true },
            State::Empty => {}
        }
    }

    /// The database's catalog and its version, when one is loaded; asks
    /// for nothing (see `lookup` for that).
    pub fn ready(&self, db: &str) -> Option<(u64, Arc<Catalog>)> {
        let entry = self.databases.get(db)?.clone();
        let st = entry.state.lock().unwrap_or_else(|e| e.into_inner());
        match &*st {
            State::Ready(v, Some(c)) => Some((*v, c.clone())),
            _ => None,
        }
    }

    /// A statement was analysed (compiled or declined) for a catalog.
    pub fn note_plan_made(&self) {
        self.plans_made.fetch_add(1, Ordering::Relaxed);
    }

    /// A statement's analysis for the catalog was found already made.
    pub fn note_plan_reused(&self) {
        self.plans_reused.fetch_add(1, Ordering::Relaxed);
    }

    /// (plans made, plans reused) since the start.
    pub fn plan_counts(&self) -> (u64, u64) {
        (
            self.plans_made.load(Ordering::Relaxed),
            self.plans_reused.load(Ordering::Relaxed),
        )
    }

    /// The analysis of `sql` another session made for catalog `version`.
    /// Compiling a Cypher statement costs more than a short session lasts:
    /// shared, each text is compiled once per catalog.
    pub fn shared_analysis(&self, version: u64, sql: &str) -> Option<Arc<Analysis>> {
        self.analyses
            .get(&(version, Box::<str>::from(sql)))
            .map(|a| a.clone())
    }

    /// Keeps an analysis for the other sessions.
    pub fn share_analysis(&self, version: u64, sql: &str, analysis: Arc<Analysis>) {
        use std::sync::atomic::Ordering::Relaxed;
        if sql.len() > onetrip_planner::analysis::MAX_CACHED_LEN {
            return;
        }
        let bytes = sql.len()
            + match &analysis.rewrite {
                onetrip_planner::cypher::Rewrite::Rewritten(s) => s.len(),
                _ => 0,
            };
        if self.analyses.len() >= MAX_PLANS
            || self.analysis_bytes.load(Relaxed) + bytes > MAX_PLAN_BYTES
        {
            self.analyses.clear();
            self.analysis_bytes.store(0, Relaxed);
        }
        if self
            .analyses
            .insert((version, Box::from(sql)), analysis)
            .is_none()
        {
            self.analysis_bytes.fetch_add(bytes, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change seen while a fetch is under way: what the fetch read may
    /// predate it, so the next lookup fetches again.
    #[test]
    fn a_fetch_overtaken_by_a_change_is_not_kept() {
        let cache = CypherCache::default();
        assert!(matches!(cache.lookup("d"), Lookup::MustLoad));
        cache.invalidate("d");
        cache.finish("d", Some(Catalog::new()));
        assert!(cache.ready("d").is_none());
        assert!(matches!(cache.lookup("d"), Lookup::MustLoad));
        cache.finish("d", Some(Catalog::new()));
        assert!(cache.ready("d").is_some());
    }

    /// Shared plans stay within their bytes however long the texts.
    #[test]
    fn shared_plans_are_bounded_in_bytes() {
        use std::sync::atomic::Ordering::Relaxed;
        let cache = CypherCache::default();
        let analyzer = onetrip_planner::analysis::Analyzer::new(Vec::<String>::new());
        for i in 0..2000 {
            let sql = format!("select '{}', {i}", "x".repeat(60_000));
            let a = Arc::new(analyzer.analyze(&sql, None));
            cache.share_analysis(1, &sql, a);
            assert!(cache.analysis_bytes.load(Relaxed) <= MAX_PLAN_BYTES);
        }
        assert!(cache.analyses.len() < 600, "{}", cache.analyses.len());
        let long = "x".repeat(onetrip_planner::analysis::MAX_CACHED_LEN + 1);
        cache.share_analysis(1, &long, Arc::new(analyzer.analyze(&long, None)));
        assert!(cache.shared_analysis(1, &long).is_none());
    }
}
