//! A bounded per-session cache of classifications keyed by statement text. Applications send
//! the same few statements over and over, so each distinct text is parsed once. Eviction is
//! CLOCK (second chance): O(1) amortised, no ordering bookkeeping on hits.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Classification, Classifier};

/// Texts longer than this are classified but not cached, so the cache's memory stays bounded
/// by `capacity * MAX_CACHED_LEN`.
pub const MAX_CACHED_LEN: usize = 64 * 1024;

struct Slot {
    key: Arc<str>,
    value: Classification,
    referenced: bool,
}

/// Per-session classification cache (`&mut self`, not shared between threads).
pub struct ClassCache {
    classifier: Arc<Classifier>,
    capacity: usize,
    index: HashMap<Arc<str>, usize>,
    slots: Vec<Slot>,
    hand: usize,
}

impl ClassCache {
    /// `capacity` entries (0 disables caching); `read_only_functions` as for
    /// [`Classifier::new`].
    pub fn new(capacity: usize, read_only_functions: Vec<String>) -> Self {
        Self::with_classifier(capacity, Arc::new(Classifier::new(read_only_functions)))
    }

    /// Shares one classifier (and its function list) between many sessions' caches.
    pub fn with_classifier(capacity: usize, classifier: Arc<Classifier>) -> Self {
        ClassCache {
            classifier,
            capacity,
            index: HashMap::new(),
            slots: Vec::new(),
            hand: 0,
        }
    }

    /// The classification of `sql`, from the cache or computed (and cached).
    pub fn classify(&mut self, sql: &str) -> Classification {
        if let Some(&i) = self.index.get(sql) {
            let slot = &mut self.slots[i];
            slot.referenced = true;
            return slot.value.clone();
        }
        let value = self.classifier.classify(sql);
        if self.capacity == 0 || sql.len() > MAX_CACHED_LEN {
            return value;
        }
        let key: Arc<str> = Arc::from(sql);
        let slot = Slot {
            key: key.clone(),
            value: value.clone(),
            referenced: false,
        };
        if self.slots.len() < self.capacity {
            self.index.insert(key, self.slots.len());
            self.slots.push(slot);
        } else {
            // Second chance: skip (and clear) recently used slots; ends within one sweep.
            while self.slots[self.hand].referenced {
                self.slots[self.hand].referenced = false;
                self.hand = (self.hand + 1) % self.slots.len();
            }
            let old = std::mem::replace(&mut self.slots[self.hand], slot);
            self.index.remove(&old.key);
            self.index.insert(key, self.hand);
            self.hand = (self.hand + 1) % self.slots.len();
        }
        value
    }

    /// The classifier this cache uses.
    pub fn classifier(&self) -> &Arc<Classifier> {
        &self.classifier
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

impl std::fmt::Debug for ClassCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClassCache")
            .field("capacity", &self.capacity)
            .field("len", &self.slots.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::StatementClass;

    #[test]
    fn bounded_and_consistent() {
        let mut cache = ClassCache::new(3, vec!["my_fn".into()]);
        for round in 0..3 {
            for i in 0..10 {
                let sql = format!("select my_fn({i})");
                assert_eq!(
                    cache.classify(&sql).class,
                    StatementClass::Read,
                    "{round} {i}"
                );
                assert!(cache.len() <= 3);
                assert_eq!(cache.index.len(), cache.len());
            }
        }
        // A hot entry survives a stream of one-off statements.
        let hot = "select 1";
        cache.classify(hot);
        for i in 0..5 {
            cache.classify(hot);
            cache.classify(&format!("select {i}"));
        }
        assert!(cache.index.contains_key(hot));
        for (i, slot) in cache.slots.iter().enumerate() {
            assert_eq!(cache.index.get(&slot.key), Some(&i));
        }
    }

    #[test]
    fn zero_capacity_and_clear() {
        let mut cache = ClassCache::new(0, Vec::new());
        assert_eq!(
            cache.classify("select nextval('s')").class,
            StatementClass::Unsafe
        );
        assert!(cache.is_empty());
        let mut cache = ClassCache::new(4, Vec::new());
        cache.classify("select 1");
        assert_eq!(cache.len(), 1);
        cache.clear();
        assert!(cache.is_empty());
    }
}
