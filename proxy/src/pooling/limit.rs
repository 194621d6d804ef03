//! Bounds shared by pools: `[pool] max_db_connections` (server
//! connections to one database, across its users' pools) and
//! `max_user_connections` (of one user, across its databases'), as
//! PgBouncer's. A pool opens a connection only with a place under each of
//! its bounds; when one is full, an idle connection of another pool under
//! it gives its place up, or the client waits in its pool's line, and a
//! place freed under a bound goes to the pools waiting on it.

use std::sync::{
    Arc, Mutex, Weak,
    atomic::{AtomicUsize, Ordering::Relaxed},
};

use super::Pool;

/// One bound: connections open (or being opened) under it, at most `max`.
pub struct Limit {
    max: usize,
    count: AtomicUsize,
    /// The pools under it, to hand a freed place to one that waits.
    pools: Mutex<Vec<Weak<Pool>>>,
}

impl Limit {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Limit {
            max,
            count: AtomicUsize::new(0),
            pools: Mutex::default(),
        })
    }

    pub fn join(&self, pool: &Arc<Pool>) {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|p| p.strong_count() > 0);
        pools.push(Arc::downgrade(pool));
    }

    /// A place under the bound, if there is one.
    fn take(&self) -> bool {
        self.count
            .fetch_update(Relaxed, Relaxed, |n| (n < self.max).then_some(n + 1))
            .is_ok()
    }

    fn give(&self) {
        let _ = self
            .count
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
    }

    /// The other pools under it (alive).
    fn others(&self, pool: &Pool) -> Vec<Arc<Pool>> {
        let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|p| !std::ptr::eq(&**p, pool))
            .collect()
    }
}

/// A pool's bounds, taken and given together.
#[derive(Default)]
pub struct Limits(Vec<Arc<Limit>>);

impl Limits {
    pub fn new(limits: Vec<Arc<Limit>>) -> Self {
        Limits(limits)
    }

    pub fn join(&self, pool: &Arc<Pool>) {
        for l in &self.0 {
            l.join(pool);
        }
    }

    /// A place under every bound, or none taken.
    pub fn take(&self) -> bool {
        for (i, l) in self.0.iter().enumerate() {
            if !l.take() {
                self.0[..i].iter().for_each(|l| l.give());
                return false;
            }
        }
        true
    }

    /// A place is given back under every bound; pools that wait on one of
    /// them may take it.
    pub fn give(&self, pool: &Pool) {
        for l in &self.0 {
            l.give();
        }
        for l in &self.0 {
            for other in l.others(pool) {
                if other.open_for_waiter() {
                    return;
                }
            }
        }
    }

    /// An idle connection of another pool under a full bound gives its
    /// place up; true when one did.
    pub fn evict_elsewhere(&self, pool: &Pool) -> bool {
        for l in self.0.iter().filter(|l| l.count.load(Relaxed) >= l.max) {
            for other in l.others(pool) {
                if other.close_one_idle() {
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_taken_under_every_bound_or_none() {
        let a = Limit::new(1);
        let b = Limit::new(2);
        let both = Limits::new(vec![a.clone(), b.clone()]);
        assert!(both.take());
        assert!(!both.take(), "a is full");
        assert_eq!(b.count.load(Relaxed), 1, "b's place given back");
        let only_b = Limits::new(vec![b.clone()]);
        assert!(only_b.take());
        assert!(!only_b.take());
        a.give();
        assert!(both.take() || b.count.load(Relaxed) == 2);
    }
}
