//! A bounded per-session cache of analyses keyed by statement text.
//! Applications send the same few statements over and over, so each
//! distinct text is analysed once per catalog version. Eviction is CLOCK
//! (second chance): O(1) amortised, no ordering bookkeeping on hits.

use std::collections::HashMap;
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use super::{Analysis, Analyzer};
use crate::cypher::Catalog;

/// Texts longer than this are analysed but not cached, so the cache's
/// memory stays bounded by `capacity * MAX_CACHED_LEN`.
pub const MAX_CACHED_LEN: usize = 64 * 1024;

/// Lookups in any cache of this process: each is one call into the planner.
static LOOKUPS: AtomicU64 = AtomicU64::new(0);

pub fn lookups() -> u64 {
    LOOKUPS.load(Ordering::Relaxed)
}

struct Slot {
    key: Arc<str>,
    value: Arc<Analysis>,
    /// The catalog version it was analysed with (`None`: without one).
    version: Option<u64>,
    referenced: bool,
}

/// Per-session analysis cache (`&mut self`, not shared between threads).
pub struct AnalysisCache {
    analyzer: Arc<Analyzer>,
    capacity: usize,
    index: HashMap<Arc<str>, usize>,
    slots: Vec<Slot>,
    hand: usize,
}

impl AnalysisCache {
    /// `capacity` entries (0 disables caching); one analyzer (and its
    /// function list) shared between many sessions' caches.
    pub fn new(capacity: usize, analyzer: Arc<Analyzer>) -> Self {
        AnalysisCache {
            analyzer,
            capacity,
            index: HashMap::new(),
            slots: Vec::new(),
            hand: 0,
        }
    }

    /// The analysis of `sql`, from the cache or made (and cached). With a
    /// catalog (and its version), one made for that version; without, any
    /// (what does not depend on the catalog is the same).
    pub fn get(&mut self, sql: &str, catalog: Option<(u64, &Catalog)>) -> Arc<Analysis> {
        LOOKUPS.fetch_add(1, Ordering::Relaxed);
        let version = catalog.map(|(v, _)| v);
        if let Some(&i) = self.index.get(sql) {
            let slot = &mut self.slots[i];
            if version.is_none() || slot.version == version {
                slot.referenced = true;
                return slot.value.clone();
            }
        }
        let value = Arc::new(self.analyzer.analyze(sql, catalog.map(|(_, c)| c)));
        self.put(sql, value.clone(), version);
        value
    }

    /// The analysis of `sql` if kept (for `version`, or any when `None`),
    /// without making one.
    pub fn peek(&mut self, sql: &str, version: Option<u64>) -> Option<Arc<Analysis>> {
        LOOKUPS.fetch_add(1, Ordering::Relaxed);
        let &i = self.index.get(sql)?;
        let slot = &mut self.slots[i];
        if version.is_some() && slot.version != version {
            return None;
        }
        slot.referenced = true;
        Some(slot.value.clone())
    }

    /// Keeps `value` as the analysis of `sql` for `version` (one another
    /// cache made, say).
    pub fn put(&mut self, sql: &str, value: Arc<Analysis>, version: Option<u64>) {
        if self.capacity == 0 || sql.len() > MAX_CACHED_LEN {
            return;
        }
        if let Some(&i) = self.index.get(sql) {
            let slot = &mut self.slots[i];
            slot.value = value;
            slot.version = version;
            slot.referenced = true;
            return;
        }
        let key: Arc<str> = Arc::from(sql);
        let slot = Slot {
            key: key.clone(),
            value,
            version,
            referenced: false,
        };
        if self.slots.len() < self.capacity {
            self.index.insert(key, self.slots.len());
            self.slots.push(slot);
        } else {
            // Second chance: skip (and clear) recently used slots; ends
            // within one sweep.
            while self.slots[self.hand].referenced {
                self.slots[self.hand].referenced = false;
                self.hand = (self.hand + 1) % self.slots.len();
            }
            let old = std::mem::replace(&mut self.slots[self.hand], slot);
            self.index.remove(&old.key);
            self.index.insert(key, self.hand);
            self.hand = (self.hand + 1) % self.slots.len();
        }
    }

    /// The analyzer this cache uses.
    pub fn analyzer(&self) -> &Arc<Analyzer> {
        &self.analyzer
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.hand = 0;
    }
}

impl std::fmt::Debug for AnalysisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnalysisCache")
            .field("capacity", &self.capacity)
            .field("len", &self.slots.len())
            .finish_non_exhaustive()
    }
}
