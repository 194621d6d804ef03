//! Reads AGE's container format as AGE reads it: child positions follow the
//! stored lengths and end offsets literally (so bytes written with AGE's
//! entity-padding quirk decode to what AGE prints), numerics, containers and
//! extended values at the next 4-byte boundary.

use std::cmp::Ordering;

use super::container::utf8;
use super::error::{DecodeError, DecodeErrorKind as K};
use super::*;
use crate::key::Key;
use crate::numeric::binary as numeric_bin;
use crate::scratch::{Scratch, take_tail, with_scratch};
use crate::value::{Edge, Object, Path, Value, Vertex};

/// Decodes AGE's container bytes (the datum without its varlena header).
///
/// Strings are cut at a NUL byte, as AGE's printer cuts them. Object keys
/// that are out of order or repeated (AGE never writes them) are put in
/// order, the later duplicate winning.
pub fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
    decode_at(bytes, 0)
}

/// Decodes the container at `at` (a header position).
pub(crate) fn decode_at(bytes: &[u8], at: usize) -> Result<Value, DecodeError> {
    with_scratch(|scratch| {
        let mut d = Decoder {
            buf: bytes,
            // AGE-written data never needs more node visits and string bytes
            // than this; only overlapping children (crafted input) can exceed it.
            budget: bytes.len().saturating_mul(2).saturating_add(16),
            wrappers: 0,
            scratch: std::mem::take(scratch),
        };
        let mut root = None;
        let out = d.container(at, 0, &mut root);
        *scratch = d.scratch;
        out.and_then(|()| root.ok_or(DecodeError::new(at, K::BadEntry)))
    })
}

/// Containers whose storage is at most this many bytes are allocated
/// before their children and filled in place. Larger ones collect their
/// children on the scratch stacks and are allocated after them: with
/// glibc's malloc a request this large first merges every small free chunk
/// (`malloc_consolidate`), which would then no longer serve the many small
/// allocations the children need.
const DIRECT_MAX_BYTES: usize = 1024;
const DIRECT_MAX_ITEMS: usize = DIRECT_MAX_BYTES / size_of::<Value>();
const DIRECT_MAX_PAIRS: usize = DIRECT_MAX_BYTES / size_of::<(Key, Value)>();

struct Decoder<'a> {
    buf: &'a [u8],
    budget: usize,
    /// Scalar wrappers open. A wrapper's child is read at the wrapper's
    /// depth, so one wrapper holding another (AGE writes none) does not
    /// deepen the nesting; this bounds the recursion such a chain causes.
    wrappers: usize,
    /// Children of the large containers being decoded.
    scratch: Scratch,
}

impl<'a> Decoder<'a> {
    #[inline(always)]
    fn spend(&mut self, n: usize, at: usize) -> Result<(), DecodeError> {
        self.budget = self
            .budget
            .checked_sub(n)
            .ok_or(DecodeError::new(at, K::Overlapping))?;
        Ok(())
    }

    /// Decodes the container at `at` into `slot`; `depth` counts enclosing
    /// containers. The value goes straight into its slot: returned, it
    /// would be written and read back at once, which stalls.
    fn container(&mut self, at: usize, depth: usize, slot: impl Slot) -> Result<(), DecodeError> {
        let c = Container::parse(self.buf, at)?;
        if c.is_scalar() {
            return self.scalar(&c, at, depth, slot);
        }
        if depth >= crate::MAX_DEPTH {
            return Err(DecodeError::new(at, K::TooDeep));
        }
        if !c.is_object() {
            if c.count > DIRECT_MAX_ITEMS {
                slot.put(Value::Array(self.large_array(&c, depth)?));
                return Ok(());
            }
            let mut items = Vec::with_capacity(c.count);
            self.items(&c, depth, &mut items)?;
            slot.put(Value::Array(items));
            return Ok(());
        }
        // Keys come first in the data, values after them: walk both at
        // once, so that each pair is pushed whole.
        let mut val_off = 0;
        for j in 0..c.count {
            val_off = c.span(j, val_off)?.1;
        }
        if c.count > DIRECT_MAX_PAIRS {
            slot.put(Value::Object(self.large_object(&c, depth, val_off)?));
            return Ok(());
        }
        let mut pairs = Vec::with_capacity(c.count);
        let ordered = self.pairs(&c, depth, val_off, &mut pairs)?;
        slot.put(Value::Object(if ordered {
            Object::from_ordered_pairs(pairs)
        } else {
            unordered(pairs)
        }));
        Ok(())
    }

    /// The value in a scalar wrapper at `at`.
    #[inline(never)]
    fn scalar(
        &mut self,
        c: &Container<'a>,
        at: usize,
        depth: usize,
        slot: impl Slot,
    ) -> Result<(), DecodeError> {
        if depth > 0 {
            return Err(DecodeError::new(at, K::BadHeader));
        }
        if self.wrappers >= crate::MAX_DEPTH {
            return Err(DecodeError::new(at, K::TooDeep));
        }
        self.wrappers += 1;
        self.child(c, 0, 0, depth, slot)?;
        self.wrappers -= 1;
        Ok(())
    }

    /// The elements of a large array, collected on the scratch stack. Out
    /// of line, as are the other rare paths, to keep the frames of the
    /// recursion small.
    #[inline(never)]
    fn large_array(&mut self, c: &Container<'a>, depth: usize) -> Result<Vec<Value>, DecodeError> {
        let mut stack = std::mem::take(&mut self.scratch.items);
        let start = stack.len();
        let out = self
            .items(c, depth, &mut stack)
            .map(|()| take_tail(&mut stack, start));
        stack.truncate(start);
        self.scratch.items = stack;
        out
    }

    /// The pairs of a large object, collected on the scratch stack.
    #[inline(never)]
    fn large_object(
        &mut self,
        c: &Container<'a>,
        depth: usize,
        val_off: usize,
    ) -> Result<Object, DecodeError> {
        let mut stack = std::mem::take(&mut self.scratch.pairs);
        let start = stack.len();
        let out = self
            .pairs(c, depth, val_off, &mut stack)
            .map(|_| Object::take_from(&mut stack, start));
        stack.truncate(start);
        self.scratch.pairs = stack;
        out
    }

    /// Decodes the elements of array `c` onto `out`.
    fn items(
        &mut self,
        c: &Container<'a>,
        depth: usize,
        out: &mut Vec<Value>,
    ) -> Result<(), DecodeError> {
        let mut off = 0;
        for j in 0..c.count {
            off = self.child(c, j, off, depth + 1, &mut *out)?;
        }
        Ok(())
    }

    /// Decodes the pairs of object `c`, whose values start `val_off` bytes
    /// into its data, onto `out`; answers whether the keys were in AGE's
    /// order without repeats, as AGE writes them.
    fn pairs(
        &mut self,
        c: &Container<'a>,
        depth: usize,
        mut val_off: usize,
        out: &mut Vec<(Key, Value)>,
    ) -> Result<bool, DecodeError> {
        let mut off = 0;
        let mut ordered = true;
        let mut prev = None;
        for i in 0..c.count {
            let (e, start, len, next) = locate(c, i, off)?;
            let key = match e & E_TYPE_MASK {
                E_STRING => self.string(start, len, 1, c.data_at)?,
                E_NUMERIC | E_FALSE | E_TRUE | E_NULL | E_CONTAINER | E_EXTENDED => {
                    return Err(DecodeError::new(c.entries_at + 4 * i, K::KeyNotString));
                }
                _ => return Err(DecodeError::new(c.entries_at + 4 * i, K::BadEntry)),
            };
            off = next;
            if let Some(prev) = prev {
                ordered &= key_before(prev, key);
            }
            prev = Some(key);
            val_off = self.child(c, c.count + i, val_off, depth + 1, Pair { out, key })?;
        }
        Ok(ordered)
    }

    /// The string of `len` bytes at `start`, cut at its first NUL; `extra`
    /// is charged to the budget with its length, an overrun reported at
    /// `spent_at`.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn string(
        &mut self,
        start: usize,
        len: usize,
        extra: usize,
        spent_at: usize,
    ) -> Result<&'a str, DecodeError> {
        let truncated = DecodeError::new(start, K::Truncated);
        let end = start.checked_add(len).ok_or(truncated.clone())?;
        let bytes = self.buf.get(start..end).ok_or(truncated)?;
        if plain_ascii(bytes) {
            self.spend(extra + bytes.len(), spent_at)?;
            // SAFETY: `plain_ascii` checked that every byte is below 0x80,
            // and a sequence of ASCII bytes is valid UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
        }
        let cut = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let bytes = &bytes[..cut];
        self.spend(extra + bytes.len(), spent_at)?;
        utf8(bytes, start)
    }

    /// Decodes child `j`, which starts `off` bytes into the data area, into
    /// `slot`; returns where the next child starts.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn child(
        &mut self,
        c: &Container<'a>,
        j: usize,
        off: usize,
        depth: usize,
        slot: impl Slot,
    ) -> Result<usize, DecodeError> {
        self.spend(1, c.entries_at + 4 * j)?;
        let (e, start, len, next) = locate(c, j, off)?;
        match e & E_TYPE_MASK {
            E_STRING => {
                let s = self.string(start, len, 0, start)?;
                slot.put(Value::String(s.to_owned()));
            }
            E_NULL => slot.put(Value::Null),
            E_FALSE => slot.put(Value::Bool(false)),
            E_TRUE => slot.put(Value::Bool(true)),
            E_NUMERIC => {
                let at = align4(start);
                let data = self.buf.get(at..).unwrap_or(&[]);
                let n = numeric_bin::read(data).map_err(|_| DecodeError::new(at, K::BadNumeric))?;
                slot.put(Value::Numeric(n));
            }
            E_CONTAINER => self.container(align4(start), depth, slot)?,
            E_EXTENDED => self.extended(align4(start), depth, slot)?,
            _ => return Err(DecodeError::new(c.entries_at + 4 * j, K::BadEntry)),
        }
        Ok(next)
    }

    #[cfg_attr(not(debug_assertions), inline(always))]
    fn extended(&mut self, at: usize, depth: usize, slot: impl Slot) -> Result<(), DecodeError> {
        let truncated = DecodeError::new(at, K::Truncated);
        let sub = read_u32(self.buf, at).ok_or(truncated.clone())?;
        let body = at + 4;
        match sub {
            EXT_INTEGER => {
                let w = read_u64(self.buf, body).ok_or(truncated)?;
                slot.put(Value::Integer(w as i64));
            }
            EXT_FLOAT => {
                let w = read_u64(self.buf, body).ok_or(truncated)?;
                slot.put(Value::Float(f64::from_bits(w)));
            }
            EXT_VERTEX | EXT_EDGE | EXT_PATH => {
                let v = self.entity(sub, at, depth)?;
                slot.put(v);
            }
            _ => return Err(DecodeError::new(at, K::BadExtendedType)),
        }
        Ok(())
    }

    /// A vertex, edge or path whose sub-type word is at `at`.
    #[inline(never)]
    fn entity(&mut self, sub: u32, at: usize, depth: usize) -> Result<Value, DecodeError> {
        let bad_entity = DecodeError::new(at, K::BadEntity);
        let mut one = None;
        self.container(at + 4, depth, &mut one)?;
        match (sub, one.ok_or(bad_entity.clone())?) {
            (EXT_VERTEX, Value::Object(o)) => Vertex::try_from_object(o).map(Value::Vertex),
            (EXT_EDGE, Value::Object(o)) => Edge::try_from_object(o).map(Value::Edge),
            (EXT_PATH, Value::Array(items)) => Path::try_from_values(items).map(Value::Path),
            _ => return Err(bad_entity),
        }
        .map_err(|_| bad_entity)
    }
}

/// Pairs whose keys are out of order or repeated, which AGE never writes.
#[inline(never)]
fn unordered(pairs: Vec<(Key, Value)>) -> Object {
    Object::from_pairs(pairs)
}

/// Entry `j` of `c`, whose data starts `off` bytes into the data area: the
/// entry word, the data's position in the buffer, its length, and where
/// the next child starts.
#[inline(always)]
fn locate(c: &Container, j: usize, off: usize) -> Result<(u32, usize, usize, usize), DecodeError> {
    let e = c.entry(j);
    let (len, next) = c.span(j, off)?;
    Ok((e, c.data_at.saturating_add(off), len, next))
}

/// `key_cmp(a, b).is_lt()`, for the ordered pairs AGE writes: keys of
/// different lengths need no look at their bytes, and those of equal
/// length compare as bytes.
#[inline(always)]
fn key_before(a: &str, b: &str) -> bool {
    match a.len().cmp(&b.len()) {
        // Property names mostly differ in their first byte: that spares
        // a call to memcmp.
        Ordering::Equal => match (a.as_bytes().first(), b.as_bytes().first()) {
            (Some(x), Some(y)) if x != y => x < y,
            _ => a.as_bytes() < b.as_bytes(),
        },
        unequal => unequal.is_lt(),
    }
}

/// Whether every byte is in `1..=0x7F`: ASCII, so valid UTF-8, and free of
/// the NUL that would cut the string. One pass over the bytes, a word at a
/// time, instead of a search for NUL and then UTF-8 validation.
#[inline(always)]
fn plain_ascii(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte of a word is 0 or has its high bit set exactly when the
    // word's lowest such byte sets its high bit in `(w - ONES) | w`: the
    // bytes below it are 1..=0x7F and lend nothing to it.
    let bad = |w: u64| (w.wrapping_sub(ONES) | w) & HIGH != 0;
    let (words, tail) = bytes.as_chunks::<8>();
    if words.iter().any(|w| bad(u64::from_le_bytes(*w))) {
        return false;
    }
    // What is left is checked in words that may overlap bytes already
    // checked: the last 8 bytes, or the first and last 4 of a short string.
    if tail.is_empty() {
        return true;
    }
    if let Some(last) = bytes.last_chunk::<8>() {
        return !bad(u64::from_le_bytes(*last));
    }
    match (bytes.first_chunk::<4>(), bytes.last_chunk::<4>()) {
        (Some(first), Some(last)) => {
            !bad(u64::from(u32::from_le_bytes(*first)) | u64::from(u32::from_le_bytes(*last)) << 32)
        }
        _ => tail.iter().all(|&b| b.wrapping_sub(1) < 0x7F),
    }
}

/// Where a decoded child goes. Inlined, so that each value is built in its
/// slot: a value built elsewhere and moved costs a stall on each one, as
/// its tag and payload are written apart and read back together.
trait Slot {
    fn put(self, v: Value);
}

impl Slot for &mut Vec<Value> {
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn put(self, v: Value) {
        let len = self.len();
        match self.spare_capacity_mut().first_mut() {
            Some(slot) => {
                slot.write(v);
                // SAFETY: the first spare slot was just written.
                unsafe { self.set_len(len + 1) };
            }
            None => push_cold(self, v),
        }
    }
}

/// Never taken for AGE's data: every container is allocated at its
/// stored count.
#[cold]
#[inline(never)]
fn push_cold<T>(out: &mut Vec<T>, v: T) {
    out.push(v);
}

/// An object's value, pushed with its key. The key is built only then,
/// in its place: built before the value and moved, it would be read back
/// soon after its bytes were written piecewise, a stall on every key.
struct Pair<'v, 'a> {
    out: &'v mut Vec<(Key, Value)>,
    key: &'a str,
}

impl Slot for Pair<'_, '_> {
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn put(self, v: Value) {
        let out = self.out;
        let len = out.len();
        match out.spare_capacity_mut().first_mut() {
            Some(slot) => {
                let p = slot.as_mut_ptr();
                // SAFETY: `p` points to the first spare slot, allocated and
                // unused; both fields are written before the length covers it.
                unsafe {
                    std::ptr::addr_of_mut!((*p).0).write(Key::new(self.key));
                    std::ptr::addr_of_mut!((*p).1).write(v);
                    out.set_len(len + 1);
                }
            }
            None => push_cold(out, (Key::new(self.key), v)),
        }
    }
}

/// A top-level scalar.
impl Slot for &mut Option<Value> {
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn put(self, v: Value) {
        *self = Some(v);
    }
}

#[cfg(test)]
mod tests {
    use super::{key_before, plain_ascii};
    use crate::{DecodeErrorKind, decode, key_cmp};

    /// Scalar wrappers each holding the next, around a null: they do not
    /// count as nesting, and a long chain once overflowed the stack.
    fn wrapped_null(levels: usize) -> Vec<u8> {
        let mut words = Vec::new();
        for level in 0..levels {
            // Header, then an entry for a container of the rest's length.
            let rest = 8 * (levels - level);
            words.extend([0x5000_0001, 0x5000_0000 | rest as u32]);
        }
        words.extend([0x5000_0001u32, 0x4000_0000]);
        words.iter().flat_map(|w: &u32| w.to_le_bytes()).collect()
    }

    #[test]
    fn chains_of_scalar_wrappers_are_bounded() {
        // Unoptimised builds need several MB of stack at the depth limit.
        let run = || {
            assert_eq!(decode(&wrapped_null(3)), Ok(crate::Value::Null));
            let deep = decode(&wrapped_null(100_000)).unwrap_err();
            assert_eq!(deep.kind(), DecodeErrorKind::TooDeep);
        };
        let big_stack = std::thread::Builder::new().stack_size(64 << 20);
        big_stack.spawn(run).unwrap().join().unwrap();
    }

    #[test]
    fn pairs_and_items_are_written_in_place() {
        // Short and long keys, out of order, nested containers and a large
        // array (through the scratch stack): as the text parser builds them.
        let long = "k".repeat(40);
        let items: Vec<String> = (0..40)
            .map(|i| format!("{{\"b{i}\": [{i}, \"s\"]}}"))
            .collect();
        let text = format!(
            r#"{{"zz": [1, "two", {{"{long}": null, "a": 1.5}}], "a": "é", "big": [{}]}}"#,
            items.join(", ")
        );
        let v = crate::parse(&text).unwrap();
        assert_eq!(decode(&crate::encode(&v)), Ok(v));
    }

    #[test]
    fn plain_ascii_means_every_byte_in_1_to_0x7f() {
        // Every length up to three words, with each kind of byte at each
        // position, so that every word and tail path sees each.
        for len in 0..=24 {
            for pos in 0..len {
                for b in [0u8, 1, b'a', 0x7F, 0x80, 0xC3, 0xFF] {
                    let mut s = vec![b'a'; len];
                    s[pos] = b;
                    let want = s.iter().all(|&c| (1..=0x7F).contains(&c));
                    assert_eq!(plain_ascii(&s), want, "{s:?}");
                }
            }
            assert!(plain_ascii(&vec![b'z'; len]));
        }
    }

    #[test]
    fn key_before_is_key_cmp_less() {
        let keys = [
            "",
            "a",
            "b",
            "ab",
            "ba",
            "bb",
            "id",
            "bio",
            "geo",
            "abcdefgh",
            "abcdefgi",
            "bbcdefgh",
            "abcdefghi",
            "é",
            "\u{7f}",
            "\u{80}",
            "zz",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(key_before(a, b), key_cmp(a, b).is_lt(), "{a:?} {b:?}");
            }
        }
    }
}
