//! What the server said of statements it parsed (and described), kept per
//! pool (one database and role) so that a client's Parse (and Describe) of
//! a text already parsed (described) there can be answered without a
//! server connection (`told/`). Shared by the pool's sessions behind a lock that
//! only a Parse looked up here, a description learned, or DDL takes: the
//! forwarding of every other message never touches it.

use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering::Relaxed},
};

use bytes::Bytes;
use rustc_hash::FxHashMap;

/// Most descriptions a pool keeps, and most bytes of them (their texts
/// mostly): past either, one is dropped for each new one.
const MAX_ENTRIES: usize = 1024;
const MAX_BYTES: usize = 4 << 20;

/// What the server answered a Describe of a statement: its
/// ParameterDescription and its RowDescription (or NoData), whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    pub params: Bytes,
    pub row: Bytes,
}

impl Description {
    fn bytes(&self) -> usize {
        self.params.len() + self.row.len()
    }

    /// The server describes the statement as the client was told: the same
    /// parameter types, rows of the same shape.
    pub fn same_as(&self, params: &[u8], row: &[u8]) -> bool {
        *self.params == *params && crate::wire::backend::same_row_shape(&self.row, row)
    }
}

fn size_of(d: &Option<Description>) -> usize {
    d.as_ref().map_or(0, Description::bytes)
}

#[derive(Default)]
struct Entries {
    /// Keyed by the Parse message past its statement name: the text and the
    /// parameter types as the client gave them. `None`: parsed, never
    /// described.
    map: FxHashMap<Bytes, Option<Description>>,
    bytes: usize,
}

impl Entries {
    /// Entries dropped until one of `size` bytes fits.
    fn make_room(&mut self, size: usize) {
        while self.map.len() >= MAX_ENTRIES || self.bytes + size > MAX_BYTES {
            let Some(k) = self.map.keys().next().cloned() else {
                break;
            };
            if let Some(old) = self.map.remove(&k) {
                self.bytes -= k.len() + size_of(&old);
            }
        }
    }
}

/// One pool's descriptions, and what they were used for.
#[derive(Default)]
pub struct Descriptions {
    entries: Mutex<Entries>,
    /// Raised by every DDL seen: a description learned across one is not
    /// kept (`learned`).
    generation: AtomicU64,
    /// Parses answered here (described or not).
    pub answered: AtomicU64,
    /// Statements told here whose description the server then gave
    /// differently (the client got 0A000).
    pub changed: AtomicU64,
}

impl Descriptions {
    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// The description kept for a Parse whose body past its name is `key`.
    pub fn get(&self, key: &[u8]) -> Option<Description> {
        self.lock().map.get(key).cloned().flatten()
    }

    /// A Parse whose body past its name is `key` succeeded on a server of
    /// the pool since the last DDL seen.
    pub fn parsed_before(&self, key: &[u8]) -> bool {
        self.lock().map.contains_key(key)
    }

    /// Parses of `keys` that the server accepted, sent when the generation
    /// was `generation`: kept unless DDL came since (a description kept
    /// stays). Copied, as in `learned`.
    pub fn parsed<'a>(&self, generation: u64, keys: impl Iterator<Item = &'a Bytes>) {
        let mut e = self.lock();
        if self.generation() != generation {
            return;
        }
        for key in keys {
            if e.map.contains_key(&key[..]) || key.len() > MAX_BYTES {
                continue;
            }
            e.make_room(key.len());
            e.bytes += key.len();
            e.map.insert(Bytes::copy_from_slice(key), None);
        }
    }

    /// A description the server gave for `key`, asked for when the
    /// generation was `generation`: kept unless DDL came since. The bytes
    /// may lie in a session's read buffers: what is kept is copied.
    pub fn learned(&self, generation: u64, key: Bytes, d: Description) {
        let (key, d) = (
            Bytes::copy_from_slice(&key),
            Description {
                params: Bytes::copy_from_slice(&d.params),
                row: Bytes::copy_from_slice(&d.row),
            },
        );
        let mut e = self.lock();
        // Read under the lock: a clear that raised it has emptied the map
        // before or waits to empty it after.
        if self.generation() != generation {
            return;
        }
        let size = key.len() + d.bytes();
        if size > MAX_BYTES {
            return;
        }
        if let Some(old) = e.map.remove(&key) {
            e.bytes -= key.len() + size_of(&old);
        }
        e.make_room(size);
        e.bytes += size;
        e.map.insert(key, Some(d));
    }

    /// `key`'s description proved out of date.
    pub fn forget(&self, key: &[u8]) {
        let mut e = self.lock();
        if let Some((k, old)) = e.map.remove_entry(key) {
            e.bytes -= k.len() + size_of(&old);
        }
    }

    /// DDL was sent, or committed: every description may be out of date.
    pub fn clear(&self) {
        let mut e = self.lock();
        self.generation.fetch_add(1, Relaxed);
        e.map.clear();
        e.bytes = 0;
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(row: &'static [u8]) -> Description {
        Description {
            params: Bytes::from_static(b"t\0\0\0\x06\0\0"),
            row: Bytes::from_static(row),
        }
    }

    #[test]
    fn bounded_and_cleared_by_ddl() {
        let c = Descriptions::default();
        let g = c.generation();
        for i in 0..MAX_ENTRIES + 10 {
            c.learned(
                g,
                Bytes::from(format!("select {i}\0\0\0")),
                d(b"n\0\0\0\x04"),
            );
        }
        assert_eq!(c.len(), MAX_ENTRIES);
        let last = format!("select {}\0\0\0", MAX_ENTRIES + 9);
        assert!(c.get(last.as_bytes()).is_some());
        c.clear();
        assert!(c.is_empty());
        // Learned across the DDL: not kept.
        c.learned(g, Bytes::from_static(b"select 1\0\0\0"), d(b"n\0\0\0\x04"));
        assert!(c.is_empty());
        c.learned(
            c.generation(),
            Bytes::from_static(b"x\0\0\0"),
            d(b"n\0\0\0\x04"),
        );
        c.forget(b"x\0\0\0");
        assert!(c.is_empty());
    }

    #[test]
    fn parsed_alone_tells_no_description_and_keeps_one() {
        let c = Descriptions::default();
        let (g, k) = (c.generation(), Bytes::from_static(b"update t\0\0\0"));
        c.parsed(g, [&k].into_iter());
        assert!(c.parsed_before(&k) && c.get(&k).is_none());
        c.learned(g, k.clone(), d(b"n\0\0\0\x04"));
        c.parsed(g, [&k].into_iter());
        assert!(c.get(&k).is_some());
        c.clear();
        c.parsed(g, [&k].into_iter());
        assert!(!c.parsed_before(&k));
    }
}
