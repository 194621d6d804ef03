//! Object keys. Property names are short: keeping them inline spares an
//! allocation and a free per key, most of what building an object costs.

use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::num::NonZeroU64;
use std::ops::Deref;

/// Bytes kept inline: with the length byte, a key is as large as a
/// `String`.
const INLINE: usize = 23;

/// An object key: a string, kept inline up to 23 bytes and on the heap
/// beyond. It reads as a `&str` (`Deref`, `as_str`) and compares, hashes
/// and orders as one.
#[derive(Clone)]
pub struct Key(Repr);

/// `Heap` is told apart by a zero `tail`, which no inline key has, so a
/// key needs no separate tag and an inline one is written as three whole
/// words: written piecewise and copied soon after, as keys are, its
/// words would each wait for the pieces to reach the cache.
#[derive(Clone)]
enum Repr {
    Inline(Inline),
    Heap(Box<str>),
}

/// 24 bytes without padding: the key's bytes, zero-padded to 23, then its
/// length plus one.
#[derive(Clone, Copy)]
#[repr(C)]
struct Inline {
    head: [u8; 16],
    /// Bytes 16..24 in memory order, as `from_ne_bytes` gives them.
    tail: NonZeroU64,
}

impl Inline {
    /// `b` is at most `INLINE` bytes, as callers check: a longer one would
    /// be cut, perhaps inside a character.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn new(b: &[u8]) -> Self {
        let [w0, w1, w2] = words(b);
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&w0.to_le_bytes());
        head[8..].copy_from_slice(&w1.to_le_bytes());
        let len = b.len().min(INLINE) as u64;
        // The length goes in the last byte, above the key's bytes 16..23;
        // being at least 1 it keeps `tail` nonzero.
        let tail = u64::from_ne_bytes((w2 & !(0xFF << 56) | (len + 1) << 56).to_le_bytes());
        Inline {
            head,
            tail: NonZeroU64::new(tail).unwrap_or(NonZeroU64::MAX),
        }
    }

    #[cfg_attr(not(debug_assertions), inline(always))]
    fn bytes(&self) -> &[u8] {
        // SAFETY: `Inline` is `repr(C)`, 16 bytes then a `u64` at offset
        // 16: 24 initialised bytes without padding, readable as an array.
        let all = unsafe { &*(self as *const Inline).cast::<[u8; 24]>() };
        let len = usize::from(all[INLINE]).wrapping_sub(1);
        all.get(..len).unwrap_or_default()
    }
}

impl Key {
    /// Inlined into the decoder and parsers, so that a short key's words
    /// are stored straight into its slot rather than returned through
    /// memory and copied over.
    #[cfg_attr(not(debug_assertions), inline(always))]
    pub fn new(s: &str) -> Self {
        if s.len() <= INLINE {
            Key(Repr::Inline(Inline::new(s.as_bytes())))
        } else {
            Key::heap(s)
        }
    }

    #[inline(never)]
    fn heap(s: &str) -> Self {
        Key(Repr::Heap(s.into()))
    }

    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline(k) => {
                // SAFETY: an `Inline` holds a copy of a `&str`'s bytes
                // (see `inline`), which are valid UTF-8.
                unsafe { std::str::from_utf8_unchecked(k.bytes()) }
            }
            Repr::Heap(s) => s,
        }
    }

    pub fn into_string(self) -> String {
        match self.0 {
            Repr::Heap(s) => s.into_string(),
            Repr::Inline(_) => self.as_str().to_owned(),
        }
    }
}

/// The bytes of `b` (up to 24) as three little-endian words, zero-padded,
/// gathered with a few fixed-width loads that may overlap. A copy of a
/// variable length goes through `memcpy`, whose masked stores a read of
/// the key soon after cannot forward from: a stall on every key.
#[cfg_attr(not(debug_assertions), inline(always))]
fn words(b: &[u8]) -> [u64; 3] {
    let n = b.len();
    let byte = |i: usize| b.get(i).copied().map_or(0, u64::from);
    let load4 = |i: usize| {
        b.get(i..i + 4).map_or(0, |w| {
            u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        })
    };
    let load8 = |i: usize| {
        b.get(i..i + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map_or(0, u64::from_le_bytes)
    };
    // The last word's bytes that are not already in the previous one.
    let tail = |w: u64, keep: usize| w.checked_shr(8 * (8 - keep) as u32).unwrap_or(0);
    match n {
        0 => [0; 3],
        1..=3 => [
            byte(0) | byte(n / 2) << (8 * (n / 2)) | byte(n - 1) << (8 * (n - 1)),
            0,
            0,
        ],
        4..=7 => [load4(0) | tail(load4(n - 4) << 32, n - 4) << 32, 0, 0],
        8..=15 => [load8(0), tail(load8(n - 8), n - 8), 0],
        16..=24 => [load8(0), load8(8), tail(load8(n - 8), n - 16)],
        _ => [0; 3],
    }
}

impl Default for Key {
    fn default() -> Self {
        Key::new("")
    }
}

impl Deref for Key {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        self
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Key {}

impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Key {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Key {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

/// As `str` orders (bytes), not AGE's key order ([`crate::key_cmp`]), so
/// that `Borrow<str>` holds for sorted maps.
impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Self {
        Key::new(s)
    }
}

impl From<&String> for Key {
    fn from(s: &String) -> Self {
        Key::new(s)
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        if s.len() <= INLINE {
            Key::new(&s)
        } else {
            Key(Repr::Heap(s.into_boxed_str()))
        }
    }
}

impl From<Box<str>> for Key {
    fn from(s: Box<str>) -> Self {
        if s.len() <= INLINE {
            Key::new(&s)
        } else {
            Key(Repr::Heap(s))
        }
    }
}

impl From<Cow<'_, str>> for Key {
    fn from(s: Cow<'_, str>) -> Self {
        match s {
            Cow::Borrowed(s) => Key::new(s),
            Cow::Owned(s) => Key::from(s),
        }
    }
}

impl From<char> for Key {
    fn from(c: char) -> Self {
        Key::new(c.encode_utf8(&mut [0; 4]))
    }
}

impl From<Key> for String {
    fn from(k: Key) -> Self {
        k.into_string()
    }
}

#[cfg(test)]
mod tests {
    use super::Key;

    #[test]
    fn keys_read_back_at_every_length() {
        assert_eq!(size_of::<Key>(), size_of::<String>());
        for n in 0..40 {
            let s: String = "abcdéfghijklmnopqrstuvwxyz0123456789"
                .chars()
                .take(n)
                .collect();
            for k in [Key::new(&s), Key::from(s.clone()), Key::from(s.as_str())] {
                assert_eq!(k.as_str(), s);
                assert_eq!(k.clone(), k);
                assert_eq!(k.clone().into_string(), s);
                assert_eq!(format!("{k:?}"), format!("{s:?}"));
            }
        }
    }
}
