//! The pools, by (database, user): made for a login the server accepted,
//! dropped once unused, and bounded in number, so that what strangers send
//! (databases that don't exist, users that can't log in) leaves nothing
//! behind.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{
    Place, Pool, PoolRow,
    limit::{Limit, Limits},
};

/// A login that would make one pool too many.
#[derive(Debug, thiserror::Error)]
#[error("too many pools: {max} (database, user) pairs have pools already ([pool] max_pools)")]
pub struct TooManyPools {
    pub max: usize,
}

pub struct Pools {
    size: usize,
    max: usize,
    map: Mutex<HashMap<(String, String), Arc<Pool>>>,
    /// `max_db_connections` and `max_user_connections` (0: none), and the
    /// bound of each database and user that has pools.
    max_db: usize,
    max_user: usize,
    bounds: Mutex<HashMap<(bool, String), std::sync::Weak<Limit>>>,
}

/// How long a statement that needs a database without other sessions
/// keeps its pools from opening connections, at most: PostgreSQL's own
/// DROP DATABASE waits 5 s for other sessions to leave.
pub const DRAIN: Duration = Duration::from_secs(8);

impl Pools {
    pub fn new(size: usize, max: usize) -> Self {
        Self::with_limits(size, max, 0, 0)
    }

    /// Pools whose connections to one database (`max_db`) and of one user
    /// (`max_user`) are bounded across pools too; 0: no such bound.
    pub fn with_limits(size: usize, max: usize, max_db: usize, max_user: usize) -> Self {
        Self {
            size,
            max: max.max(1),
            map: Mutex::default(),
            max_db,
            max_user,
            bounds: Mutex::default(),
        }
    }

    /// The bounds a new pool of (`database`, `user`) is under.
    fn limits(&self, database: &str, user: &str) -> Limits {
        let mut bounds = self.bounds.lock().unwrap_or_else(|e| e.into_inner());
        bounds.retain(|_, l| l.strong_count() > 0);
        let mut out = Vec::new();
        for (is_db, name, max) in [(true, database, self.max_db), (false, user, self.max_user)] {
            if max == 0 {
                continue;
            }
            let key = (is_db, name.to_owned());
            let limit = match bounds.get(&key).and_then(std::sync::Weak::upgrade) {
                Some(l) => l,
                None => {
                    let l = Limit::new(max);
                    bounds.insert(key, Arc::downgrade(&l));
                    l
                }
            };
            out.push(limit);
        }
        Limits::new(out)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Pool>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pool of (`database`, `user`), made when first asked for. Past
    /// `max_pools`, unused ones are dropped to make room, or none is made.
    pub fn pool(&self, database: &str, user: &str) -> Result<Arc<Pool>, TooManyPools> {
        let mut map = self.map();
        let key = (database.to_owned(), user.to_owned());
        if let Some(p) = map.get(&key) {
            return Ok(p.clone());
        }
        if map.len() >= self.max {
            map.retain(|_, p| Arc::strong_count(p) > 1 || !p.unused());
            if map.len() >= self.max {
                return Err(TooManyPools { max: self.max });
            }
        }
        let limits = self.limits(database, user);
        let pool = Arc::new(Pool::new(key.0.clone(), key.1.clone(), self.size, limits));
        pool.limits.join(&pool);
        map.insert(key, pool.clone());
        Ok(pool)
    }

    /// Whether the pool of (`database`, `user`), if there is one, opens its
    /// connections with a credential of a login onetrip checked (or did,
    /// before its user's password changed).
    pub fn had_credential(&self, database: &str, user: &str) -> bool {
        let key = (database.to_owned(), user.to_owned());
        self.map().get(&key).is_some_and(|p| p.had_credential())
    }

    /// `user`'s password changed: its pools, in every database, forget
    /// their credential.
    pub fn forget_credentials(&self, user: &str) {
        for pool in self.all() {
            if pool.user == user {
                pool.forget_credential();
            }
        }
    }

    /// A login for `pool` failed before the server accepted one: if
    /// nothing else uses it, it goes (it may name a database or user that
    /// doesn't exist).
    pub fn forget_if_unused(&self, pool: &Arc<Pool>) {
        if pool.greeting().is_some() {
            return;
        }
        let mut map = self.map();
        let key = (pool.database.clone(), pool.user.clone());
        // Held by the map and by the caller alone.
        let alone = map
            .get(&key)
            .is_some_and(|p| Arc::ptr_eq(p, pool) && Arc::strong_count(p) <= 2 && p.unused());
        if alone {
            map.remove(&key);
        }
    }

    fn all(&self) -> Vec<Arc<Pool>> {
        self.map().values().cloned().collect()
    }

    /// Pools that are listed: those a login was accepted for.
    pub fn rows(&self) -> Vec<PoolRow> {
        let mut rows: Vec<PoolRow> = self
            .all()
            .iter()
            .filter(|p| p.greeting().is_some() || !p.unused())
            .map(|p| p.row())
            .collect();
        rows.sort_by(|a, b| (&a.database, &a.user).cmp(&(&b.database, &b.user)));
        rows
    }

    /// Closes idle connections that waited `max_idle` for a client, but
    /// for `keep` per pool (`min_idle`); ends drains past their time; drops
    /// pools left with nothing in use.
    pub fn expire(&self, max_idle: Duration, keep: usize) {
        for pool in self.all() {
            for idle in pool.expire(max_idle, keep) {
                drop(idle.close());
            }
            pool.end_drain_if_due();
        }
        // Held by the map alone, and empty.
        self.map()
            .retain(|_, p| Arc::strong_count(p) > 1 || !p.unused());
    }

    /// The pools that have fewer than `min_idle` idle connections, with
    /// places to open them in.
    pub fn to_fill(&self, min_idle: usize) -> Vec<(Arc<Pool>, Vec<Place>)> {
        if min_idle == 0 {
            return Vec::new();
        }
        self.all()
            .into_iter()
            .filter(|p| p.greeting().is_some())
            .map(|p| {
                let places = p.places_to_fill(min_idle);
                (p, places)
            })
            .filter(|(_, s)| !s.is_empty())
            .collect()
    }

    /// Before a statement that needs `databases` without other sessions
    /// (DROP DATABASE, ALTER DATABASE ... RENAME, a CREATE DATABASE's
    /// template): their pools close their idle connections and close the
    /// busy ones as they come back, opening none, until `end_drain` or
    /// `DRAIN` has passed. Every pool's greeting is forgotten: the next
    /// login hears the server (the database may be gone).
    pub fn drain(&self, databases: &[String]) {
        let until = Instant::now() + DRAIN;
        for pool in self.all() {
            if databases.contains(&pool.database) {
                pool.drain(until);
            } else {
                pool.greeted(&[], None);
            }
        }
    }

    /// The statement `drain` was for is done.
    pub fn end_drain(&self, databases: &[String]) {
        for pool in self.all() {
            if databases.contains(&pool.database) {
                pool.end_drain();
            }
        }
    }

    /// Closes every idle connection (shutdown).
    pub fn clear(&self) {
        self.expire(Duration::ZERO, 0);
    }
}
