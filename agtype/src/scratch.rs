//! Scratch stacks for the parser and the decoder, kept per thread.
//!
//! Both collect the children of open containers on shared stacks and move
//! each container's own into one exactly sized allocation when it closes.
//! Keeping the stacks between calls means a document causes no large
//! allocation until its outermost container closes; with glibc's malloc
//! that matters, as each large request first merges every small free
//! chunk (`malloc_consolidate`), which then no longer serve the many small
//! allocations a document needs.

use std::cell::Cell;

use crate::{Key, Value};

#[derive(Default)]
pub(crate) struct Scratch {
    pub(crate) items: Vec<Value>,
    pub(crate) pairs: Vec<(Key, Value)>,
}

/// Stacks larger than this (in elements) are not kept, to bound what an
/// idle thread holds on to.
const MAX_KEPT: usize = 4096;

thread_local! {
    static SPARE: Cell<Option<Scratch>> = const { Cell::new(None) };
}

/// Runs `f` with this thread's (empty) scratch stacks.
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut s = SPARE
        .try_with(Cell::take)
        .ok()
        .flatten()
        .unwrap_or_default();
    let out = f(&mut s);
    s.items.clear();
    s.pairs.clear();
    if s.items.capacity() <= MAX_KEPT && s.pairs.capacity() <= MAX_KEPT {
        // Fails only while the thread is being torn down.
        let _ = SPARE.try_with(|c| c.set(Some(s)));
    }
    out
}

/// The elements from `start` on, moved into an exactly sized vector with
/// one copy; `v` keeps its capacity.
pub(crate) fn take_tail<T>(v: &mut Vec<T>, start: usize) -> Vec<T> {
    if start == 0 {
        // `split_off(0)` would hand over the whole buffer, capacity and all.
        let mut out = Vec::with_capacity(v.len());
        out.append(v);
        out
    } else {
        v.split_off(start)
    }
}
