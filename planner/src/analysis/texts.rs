//! Statement texts kept once per thread, with their analysis where it
//! does not depend on the session (made without a catalog). Every session
//! keeps the texts it sends again (for its per-statement counts, its
//! prepared statements), and many sessions send the same few texts. Kept
//! apart, a lookup compares the incoming text with a copy only its own
//! session touches, cold in the CPU's caches when hundreds of sessions take
//! turns; kept once, it compares with bytes every session touched a moment
//! ago, and a text's analysis is made once per thread, not per session.
//!
//! Nothing depends on a text being found here: a text made while the table
//! is full, or after it was emptied, is an equal copy and compares the same,
//! and an analysis not found is made again.

use std::{cell::RefCell, sync::Arc};

use rustc_hash::FxHashMap;

use super::Analysis;

/// Most texts kept per thread, and most bytes of them: past either, the
/// table is emptied and fills again with what is sent now (texts still in
/// use stay alive where they are used).
const MAX_TEXTS: usize = 4096;
const MAX_BYTES: usize = 4 << 20;
/// Longer texts are copied, not kept: they are rarely sent twice.
const MAX_LEN: usize = 16 * 1024;

/// What an entry costs against [`MAX_BYTES`] beyond its text: the entry,
/// and its analysis once it has one.
const ENTRY_BYTES: usize = 64;

struct Known {
    /// The copy kept (the map's key, again, so that a lookup by `&str`
    /// gives it back).
    text: Arc<str>,
    /// The analysis made without a catalog, by the analyzer with this id.
    analysis: Option<(u64, Arc<Analysis>)>,
}

#[derive(Default)]
struct Table {
    /// A client's texts only land here after it sent them, and a client
    /// that made them collide would slow only the lookups of its thread,
    /// bounded by `MAX_TEXTS`: a fast hash is enough.
    texts: FxHashMap<Arc<str>, Known>,
    bytes: usize,
}

impl Table {
    /// The entry of `text`, made (emptying a full table first) if new.
    fn entry(&mut self, text: &str) -> Option<&mut Known> {
        if !self.texts.contains_key(text) {
            if self.texts.len() >= MAX_TEXTS || self.bytes + text.len() > MAX_BYTES {
                self.texts.clear();
                self.bytes = 0;
            }
            self.bytes += text.len() + ENTRY_BYTES;
            let kept: Arc<str> = Arc::from(text);
            let known = Known {
                text: kept.clone(),
                analysis: None,
            };
            self.texts.insert(kept, known);
        }
        self.texts.get_mut(text)
    }
}

thread_local! {
    static TABLE: RefCell<Table> = RefCell::new(Table::default());
}

/// `text`, as the copy this thread keeps of it.
pub fn shared(text: &str) -> Arc<str> {
    if text.len() > MAX_LEN {
        return Arc::from(text);
    }
    TABLE
        .try_with(|t| t.borrow_mut().entry(text).map(|k| k.text.clone()))
        .ok()
        .flatten()
        // The thread is ending: a copy of its own.
        .unwrap_or_else(|| Arc::from(text))
}

/// The analysis of `text` made without a catalog by analyzer `analyzer`,
/// if this thread keeps one.
pub(super) fn analysis(text: &str, analyzer: u64) -> Option<Arc<Analysis>> {
    TABLE
        .try_with(|t| match &t.borrow().texts.get(text)?.analysis {
            Some((id, a)) if *id == analyzer => Some(a.clone()),
            _ => None,
        })
        .ok()
        .flatten()
}

/// Keeps `analysis`, made without a catalog by analyzer `analyzer`, as the
/// analysis of `text` for this thread's sessions.
pub(super) fn keep_analysis(text: &str, analyzer: u64, analysis: Arc<Analysis>) {
    if text.len() > MAX_LEN {
        return;
    }
    let _ = TABLE.try_with(|t| {
        if let Some(k) = t.borrow_mut().entry(text) {
            k.analysis = Some((analyzer, analysis));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_share_one_copy() {
        let a = shared("SELECT 1");
        let b = shared(&String::from("SELECT 1"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &shared("SELECT 2")));
    }

    #[test]
    fn a_full_table_starts_again_and_texts_in_use_stay_whole() {
        let first = shared("SELECT 'first'");
        for i in 0..MAX_TEXTS + 10 {
            shared(&format!("SELECT {i}"));
        }
        let t = TABLE.with(|t| t.borrow().texts.len());
        assert!(t <= MAX_TEXTS, "{t} texts kept");
        assert_eq!(&*first, "SELECT 'first'");
        // Emptied since: a new copy, equal to the old one.
        let again = shared("SELECT 'first'");
        assert_eq!(again, first);
        assert!(!Arc::ptr_eq(&again, &first));
    }

    #[test]
    fn long_texts_are_copied_not_kept() {
        let long = "x".repeat(MAX_LEN + 1);
        let a = shared(&long);
        let b = shared(&long);
        assert_eq!(a, b);
        assert!(!Arc::ptr_eq(&a, &b));
    }

    /// An analysis is shared by the sessions of one analyzer only: another
    /// analyzer's functions judge the same text otherwise.
    #[test]
    fn analyses_are_shared_per_analyzer() {
        use crate::analysis::{AnalysisCache, Analyzer};
        use crate::classify::StatementClass::Read;
        let text = "select my_fn() /* shared per analyzer */";
        let knows = Arc::new(Analyzer::new(["my_fn"]));
        let mut a = AnalysisCache::new(8, knows.clone());
        let mut b = AnalysisCache::new(8, knows);
        let mut other = AnalysisCache::new(8, Arc::new(Analyzer::new(["other_fn"])));
        let made = a.get(text, None);
        assert_eq!(made.class.class, Read);
        assert!(Arc::ptr_eq(&made, &b.get(text, None)), "made once for both");
        assert_ne!(other.get(text, None).class.class, Read);
        assert_eq!(a.get(text, None).class.class, Read);
    }
}
