//! Writes AGE's container format exactly as AGE 1.6 writes it, including
//! its entity-padding quirk (see the crate docs).

use super::*;
use crate::numeric::binary as numeric_bin;
use crate::value::{Object, Value};

/// Encodes `value` as AGE stores it (the datum without its varlena header).
///
/// Values beyond AGE's 28-bit size fields (256 MiB) produce bytes AGE
/// would refuse; use [`try_encode`] to get an error instead.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut e = Encoder::default();
    e.top(value);
    e.buf
}

/// [`encode`], failing when a string, container or count exceeds 256 MiB.
pub fn try_encode(value: &Value) -> Result<Vec<u8>, EncodeError> {
    let mut e = Encoder::default();
    e.top(value);
    if e.too_large {
        Err(EncodeError::TooLarge)
    } else {
        Ok(e.buf)
    }
}

/// Whether `value` has the shape AGE mis-writes: a vertex, edge or path
/// stored right after data that ends unaligned in the same container and
/// followed by more children of that container, which then read from the
/// wrong place. `decode(encode(v)) == v` may fail only for such values.
pub fn is_quirk_shape(value: &Value) -> bool {
    let mut e = Encoder::default();
    e.top(value);
    e.quirk
}

#[derive(Default)]
struct Encoder {
    buf: Vec<u8>,
    quirk: bool,
    too_large: bool,
    /// Leading pad of the entity just written, which its length leaves out.
    lost_pad: usize,
}

#[derive(Clone, Copy)]
enum Item<'v> {
    Key(&'v str),
    Value(&'v Value),
}

impl Encoder {
    fn top(&mut self, value: &Value) {
        match value {
            Value::Array(items) => self.array(items),
            Value::Object(o) => self.object(o),
            scalar => self.container(F_ARRAY | F_SCALAR, 1, |_| Item::Value(scalar)),
        }
    }

    fn array(&mut self, items: &[Value]) {
        self.container(F_ARRAY, items.len(), |j| Item::Value(&items[j]));
    }

    fn object(&mut self, o: &Object) {
        let pairs = o.pairs();
        let n = pairs.len();
        self.container(F_OBJECT, n, |j| {
            if j < n {
                Item::Key(&pairs[j].0)
            } else {
                Item::Value(&pairs[j - n].1)
            }
        });
    }

    fn container<'v>(&mut self, flags: u32, count: usize, item: impl Fn(usize) -> Item<'v>) {
        let entries = if flags & F_OBJECT != 0 {
            2 * count
        } else {
            count
        };
        self.check(count);
        self.put_u32(flags | (count as u32 & COUNT_MASK));
        let entries_at = self.buf.len();
        self.buf.resize(entries_at + 4 * entries, 0);
        // AGE accumulates the *recorded* lengths, so an entity's missing
        // leading pad also shifts every later end offset.
        let mut total: usize = 0;
        for j in 0..entries {
            self.lost_pad = 0;
            let (kind, len) = self.child(item(j));
            if self.lost_pad > 0 && j + 1 < entries {
                self.quirk = true;
            }
            total += len;
            self.check(total);
            let entry = if j % STRIDE == 0 {
                kind | E_HAS_OFF | (total as u32 & E_OFFLEN_MASK)
            } else {
                kind | (len as u32 & E_OFFLEN_MASK)
            };
            let at = entries_at + 4 * j;
            self.buf[at..at + 4].copy_from_slice(&entry.to_le_bytes());
        }
    }

    /// Writes one child's data; returns its entry type and recorded length.
    fn child(&mut self, item: Item<'_>) -> (u32, usize) {
        let start = self.buf.len();
        let value = match item {
            Item::Key(s) => return self.string(s),
            Item::Value(v) => v,
        };
        match value {
            Value::String(s) => self.string(s),
            Value::Null => (E_NULL, 0),
            Value::Bool(true) => (E_TRUE, 0),
            Value::Bool(false) => (E_FALSE, 0),
            Value::Numeric(n) => {
                self.pad();
                numeric_bin::write(n, &mut self.buf);
                (E_NUMERIC, self.buf.len() - start)
            }
            Value::Integer(i) => {
                self.pad();
                self.put_u32(EXT_INTEGER);
                self.buf.extend_from_slice(&i.to_le_bytes());
                (E_EXTENDED, self.buf.len() - start)
            }
            Value::Float(f) => {
                self.pad();
                self.put_u32(EXT_FLOAT);
                self.buf.extend_from_slice(&f.to_bits().to_le_bytes());
                (E_EXTENDED, self.buf.len() - start)
            }
            Value::Array(items) => {
                self.pad();
                self.array(items);
                (E_CONTAINER, self.buf.len() - start)
            }
            Value::Object(o) => {
                self.pad();
                self.object(o);
                (E_CONTAINER, self.buf.len() - start)
            }
            Value::Vertex(v) => self.entity(EXT_VERTEX, |e| e.object(v.as_object())),
            Value::Edge(x) => self.entity(EXT_EDGE, |e| e.object(x.as_object())),
            Value::Path(p) => self.entity(EXT_PATH, |e| e.array(p.elements())),
        }
    }

    fn string(&mut self, s: &str) -> (u32, usize) {
        self.check(s.len());
        self.buf.extend_from_slice(s.as_bytes());
        (E_STRING, s.len())
    }

    /// AGE's quirk: the recorded length covers the sub-type word, the
    /// container and the trailing pad, but not the leading pad.
    fn entity(&mut self, sub: u32, body: impl FnOnce(&mut Self)) -> (u32, usize) {
        let lost = self.pad();
        let start = self.buf.len();
        self.put_u32(sub);
        body(self);
        self.pad();
        self.lost_pad = lost;
        (E_EXTENDED, self.buf.len() - start)
    }

    fn pad(&mut self) -> usize {
        let pad = align4(self.buf.len()) - self.buf.len();
        self.buf.resize(self.buf.len() + pad, 0);
        pad
    }

    fn put_u32(&mut self, w: u32) {
        self.buf.extend_from_slice(&w.to_le_bytes());
    }

    fn check(&mut self, n: usize) {
        if n > E_OFFLEN_MASK as usize {
            self.too_large = true;
        }
    }
}
