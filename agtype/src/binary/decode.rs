//! Reads AGE's container format as AGE reads it: child positions follow the
//! stored lengths and end offsets literally (so bytes written with AGE's
//! entity-padding quirk decode to what AGE prints), numerics, containers and
//! extended values at the next 4-byte boundary.

use super::container::utf8;
use super::error::{DecodeError, DecodeErrorKind as K};
use super::*;
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
            scratch: std::mem::take(scratch),
        };
        let out = d.container(at, 0);
        *scratch = d.scratch;
        out
    })
}

struct Decoder<'a> {
    buf: &'a [u8],
    budget: usize,
    /// Children of the containers being decoded (see [`Scratch`]).
    scratch: Scratch,
}

impl<'a> Decoder<'a> {
    fn spend(&mut self, n: usize, at: usize) -> Result<(), DecodeError> {
        self.budget = self
            .budget
            .checked_sub(n)
            .ok_or(DecodeError::new(at, K::Overlapping))?;
        Ok(())
    }

    /// Decodes the container at `at`; `depth` counts enclosing containers.
    fn container(&mut self, at: usize, depth: usize) -> Result<Value, DecodeError> {
        let c = Container::parse(self.buf, at)?;
        if c.is_scalar() {
            if depth > 0 {
                return Err(DecodeError::new(at, K::BadHeader));
            }
            self.child(&c, 0, 0, depth, Slot::Item)?;
            return self
                .scratch
                .items
                .pop()
                .ok_or(DecodeError::new(at, K::BadEntry));
        }
        if depth >= crate::MAX_DEPTH {
            return Err(DecodeError::new(at, K::TooDeep));
        }
        // Children wait on the scratch stacks, so that the container's own
        // storage is allocated once, after theirs.
        let mut off = 0;
        if !c.is_object() {
            let start = self.scratch.items.len();
            for j in 0..c.count {
                off = self.child(&c, j, off, depth + 1, Slot::Item)?;
            }
            return Ok(Value::Array(take_tail(&mut self.scratch.items, start)));
        }
        // Keys come first in the data, values after them: walk both at
        // once, so that each pair is pushed whole.
        let start = self.scratch.pairs.len();
        let mut val_off = 0;
        for j in 0..c.count {
            val_off = c.span(j, val_off)?.1;
        }
        for i in 0..c.count {
            let key = match c.child_and_next(i, off)? {
                (Child::Str(s), next) => {
                    self.spend(1 + s.len(), c.data_at)?;
                    let key = utf8(s, c.data_at + off)?.to_owned();
                    off = next;
                    key
                }
                _ => return Err(DecodeError::new(c.entries_at + 4 * i, K::KeyNotString)),
            };
            val_off = self.child(&c, c.count + i, val_off, depth + 1, Slot::Pair(key))?;
        }
        Ok(Value::Object(Object::take_from(
            &mut self.scratch.pairs,
            start,
        )))
    }

    /// Decodes child `j`, which starts `off` bytes into the data area, into
    /// `slot`; returns where the next child starts.
    fn child(
        &mut self,
        c: &Container<'a>,
        j: usize,
        off: usize,
        depth: usize,
        slot: Slot,
    ) -> Result<usize, DecodeError> {
        self.spend(1, c.entries_at + 4 * j)?;
        let (child, next) = c.child_and_next(j, off)?;
        match child {
            Child::Null => self.put(slot, Value::Null),
            Child::Bool(b) => self.put(slot, Value::Bool(b)),
            Child::Str(s) => {
                self.spend(s.len(), c.data_at + off)?;
                let s = utf8(s, c.data_at + off)?.to_owned();
                self.put(slot, Value::String(s));
            }
            Child::Numeric(at) => {
                let data = self.buf.get(at..).unwrap_or(&[]);
                let n = numeric_bin::read(data).map_err(|_| DecodeError::new(at, K::BadNumeric))?;
                self.put(slot, Value::Numeric(n));
            }
            Child::Container(at) => {
                let v = self.container(at, depth)?;
                self.put(slot, v);
            }
            Child::Extended(at) => self.extended(at, depth, slot)?,
        }
        Ok(next)
    }

    /// Stores a decoded child. Inlined so that each value is built in its
    /// slot: a value built elsewhere and moved costs a stall on each one,
    /// as its tag and payload are written apart and read back together.
    #[inline(always)]
    fn put(&mut self, slot: Slot, v: Value) {
        match slot {
            Slot::Item => self.scratch.items.push(v),
            Slot::Pair(key) => self.scratch.pairs.push((key, v)),
        }
    }

    fn extended(&mut self, at: usize, depth: usize, slot: Slot) -> Result<(), DecodeError> {
        let truncated = DecodeError::new(at, K::Truncated);
        let sub = read_u32(self.buf, at).ok_or(truncated.clone())?;
        let body = at + 4;
        let word = || read_u64(self.buf, body).ok_or(truncated.clone());
        let bad_entity = DecodeError::new(at, K::BadEntity);
        let v = match sub {
            EXT_INTEGER => {
                let i = word()? as i64;
                self.put(slot, Value::Integer(i));
                return Ok(());
            }
            EXT_FLOAT => {
                let f = f64::from_bits(word()?);
                self.put(slot, Value::Float(f));
                return Ok(());
            }
            EXT_VERTEX | EXT_EDGE => {
                let Value::Object(o) = self.container(body, depth)? else {
                    return Err(bad_entity);
                };
                if sub == EXT_VERTEX {
                    Vertex::try_from_object(o).map(Value::Vertex)
                } else {
                    Edge::try_from_object(o).map(Value::Edge)
                }
                .map_err(|_| bad_entity)?
            }
            EXT_PATH => {
                let Value::Array(items) = self.container(body, depth)? else {
                    return Err(bad_entity);
                };
                Path::try_from_values(items)
                    .map(Value::Path)
                    .map_err(|_| bad_entity)?
            }
            _ => return Err(DecodeError::new(at, K::BadExtendedType)),
        };
        self.put(slot, v);
        Ok(())
    }
}

/// Where a decoded child goes: onto the element stack, or onto the pair
/// stack with its key.
enum Slot {
    Item,
    Pair(String),
}
