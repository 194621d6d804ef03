//! A bounded per-session cache of analyses keyed by statement text.
//! Applications send the same few statements over and over, so each
//! distinct text is analysed once per catalog version. Eviction is CLOCK
//! (second chance): O(1) amortised, no ordering bookkeeping on hits.

use std::collections::HashMap;
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use super::{Analysis, Analyzer, texts};
use crate::cypher::Catalog;

/// Texts longer than this are analysed but not cached.
pub const MAX_CACHED_LEN: usize = 64 * 1024;

/// Bytes of text (the statement's and its rewrite's) a cache keeps at
/// most, whatever its entry count: a client sending long distinct texts
/// makes its cache evict sooner, not grow.
pub const MAX_CACHE_BYTES: usize = 1 << 20;

/// What an entry costs against [`MAX_CACHE_BYTES`]: its texts, and a
/// little for the entry itself.
fn weight(sql: &str, value: &Analysis) -> usize {
    let rewrite = match &value.rewrite {
        crate::cypher::Rewrite::Rewritten(s) => s.len(),
        _ => 0,
    };
    sql.len() + rewrite + 64
}

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
    /// Its [`weight`].
    bytes: usize,
}

/// Per-session analysis cache (`&mut self`, not shared between threads).
pub struct AnalysisCache {
    analyzer: Arc<Analyzer>,
    capacity: usize,
    /// Hashed with FxHash, not SipHash: a statement of every message is
    /// looked up, and a client that made its texts collide would slow only
    /// its own session, bounded by `capacity`.
    index: HashMap<Arc<str>, usize, rustc_hash::FxBuildHasher>,
    slots: Vec<Slot>,
    hand: usize,
    /// The slots' weights, summed.
    bytes: usize,
}

impl AnalysisCache {
    /// `capacity` entries (0 disables caching); one analyzer (and its
    /// function list) shared between many sessions' caches.
    pub fn new(capacity: usize, analyzer: Arc<Analyzer>) -> Self {
        AnalysisCache {
            analyzer,
            capacity,
            index: HashMap::default(),
            slots: Vec::new(),
            hand: 0,
            bytes: 0,
        }
    }

    /// The analysis of `sql`, from the cache or made (and cached). With a
    /// catalog (and its version), one made for that version; without, any
    /// (what does not depend on the catalog is the same).
    pub fn get(&mut self, sql: &str, catalog: Option<(u64, &Catalog)>) -> Arc<Analysis> {
        LOOKUPS.fetch_add(1, Ordering::Relaxed);
        let version = catalog.map(|(v, _)| v);
        // Without a catalog, the thread's other sessions may have made it.
        let shared = version.is_none() && self.capacity > 0;
        if shared && let Some(a) = texts::analysis(sql, self.analyzer.id) {
            return a;
        }
        if let Some(&i) = self.index.get(sql) {
            let slot = &mut self.slots[i];
            if version.is_none() || slot.version == version {
                slot.referenced = true;
                return slot.value.clone();
            }
        }
        let value = Arc::new(self.analyzer.analyze(sql, catalog.map(|(_, c)| c)));
        if shared {
            // Made without a catalog: the same for every session. Kept in
            // this cache too, for when the session runs on another thread.
            texts::keep_analysis(sql, self.analyzer.id, value.clone());
        }
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
        let bytes = weight(sql, &value);
        if self.capacity == 0 || sql.len() > MAX_CACHED_LEN || bytes > MAX_CACHE_BYTES {
            return;
        }
        if let Some(&i) = self.index.get(sql) {
            let slot = &mut self.slots[i];
            self.bytes = self.bytes - slot.bytes + bytes;
            slot.value = value;
            slot.version = version;
            slot.referenced = true;
            slot.bytes = bytes;
            while self.bytes > MAX_CACHE_BYTES {
                self.evict_one();
            }
            return;
        }
        while !self.slots.is_empty()
            && (self.slots.len() >= self.capacity || self.bytes + bytes > MAX_CACHE_BYTES)
        {
            self.evict_one();
        }
        let key = texts::shared(sql);
        self.index.insert(key.clone(), self.slots.len());
        self.slots.push(Slot {
            key,
            value,
            version,
            referenced: false,
            bytes,
        });
        self.bytes += bytes;
    }

    /// Drops one entry: the first the hand finds not used since it last
    /// passed (second chance), within one sweep.
    fn evict_one(&mut self) {
        let n = self.slots.len();
        if n == 0 {
            return;
        }
        self.hand %= n;
        while self.slots[self.hand].referenced {
            self.slots[self.hand].referenced = false;
            self.hand = (self.hand + 1) % n;
        }
        let old = self.slots.swap_remove(self.hand);
        self.bytes -= old.bytes;
        self.index.remove(&old.key);
        if let Some(moved) = self.slots.get(self.hand) {
            self.index.insert(moved.key.clone(), self.hand);
        }
    }

    /// Bytes of text kept (see [`MAX_CACHE_BYTES`]).
    pub fn bytes(&self) -> usize {
        self.bytes
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
        self.bytes = 0;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Long distinct texts: the cache stays within its bytes, keeps the
    /// text used again, and each lookup still answers.
    #[test]
    fn bounded_by_bytes_as_well_as_entries() {
        let mut c = AnalysisCache::new(1024, Arc::new(Analyzer::new(Vec::<String>::new())));
        let hot = "select 1";
        for i in 0..200 {
            let long = format!("select '{}', {i}", "x".repeat(60_000));
            assert_eq!(c.get(&long, None).class.statement_count, 1);
            c.get(hot, None);
            assert!(c.bytes() <= MAX_CACHE_BYTES, "{} bytes", c.bytes());
            assert_eq!(c.bytes(), c.slots.iter().map(|s| s.bytes).sum::<usize>());
            assert_eq!(c.index.len(), c.slots.len());
            for (i, s) in c.slots.iter().enumerate() {
                assert_eq!(c.index.get(&s.key), Some(&i));
            }
        }
        assert!(c.len() < 20, "{} entries", c.len());
        assert!(c.peek(hot, None).is_some(), "the hot text is kept");
        for i in 0..2000 {
            c.get(&format!("select {i}"), None);
        }
        assert_eq!(c.len(), 1024);
    }
}
