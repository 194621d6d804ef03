//! A borrowed, zero-copy view over encoded agtype.
//!
//! Construction reads one header; every accessor reads only what it needs.
//! Accessors never panic: on corrupt bytes they return `None` (use
//! [`AgtypeRef::to_value`] or [`decode`](crate::decode) for a strict check).

use crate::binary::{
    Child, Container, DecodeError, DecodeErrorKind, EXT_EDGE, EXT_FLOAT, EXT_INTEGER, EXT_PATH,
    EXT_VERTEX, read_u32, read_u64,
};
use crate::inline_stack::InlineStack;
use crate::numeric::{Numeric, binary as numeric_bin};
use crate::value::{Value, resolve_index};

/// Objects with at least this many pairs are searched by binary search;
/// smaller ones are scanned. Chosen with the `lookup` benchmark
/// (`benches/agtype.rs`): a scan reads each entry once, sequentially, while
/// a binary search must rebuild the start offsets of its probes from the
/// stored lengths (up to 31 entries back) for the key and for the value, so
/// the scan stays as fast up to about 128 pairs and binary search wins
/// clearly from about 192 on.
pub const BINARY_SEARCH_MIN_PAIRS: usize = 128;

/// One value inside an encoded buffer.
#[derive(Debug, Clone, Copy)]
pub enum AgtypeRef<'a> {
    Null,
    Bool(bool),
    Integer(i64),
    Float(f64),
    Numeric(NumericRef<'a>),
    String(&'a str),
    Array(ArrayRef<'a>),
    Object(ObjectRef<'a>),
    /// The vertex's entity object (`id`, `label`, `properties`).
    Vertex(ObjectRef<'a>),
    /// The edge's entity object.
    Edge(ObjectRef<'a>),
    /// The path's vertices and edges.
    Path(ArrayRef<'a>),
}

/// An encoded numeric, decoded on demand.
#[derive(Debug, Clone, Copy)]
pub struct NumericRef<'a>(&'a [u8]);

impl NumericRef<'_> {
    pub fn to_numeric(&self) -> Option<Numeric> {
        numeric_bin::read(self.0).ok()
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct ArrayRef<'a>(Container<'a>);

#[derive(Debug, Clone, Copy, Default)]
pub struct ObjectRef<'a>(Container<'a>);

impl<'a> AgtypeRef<'a> {
    /// A view of a whole encoded value (as [`encode`](crate::encode) writes
    /// it). Only the top-level header is checked here.
    pub fn new(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        let c = Container::parse(bytes, 0)?;
        if c.is_scalar() {
            return child(&c, 0, 0).ok_or(DecodeError::new(0, DecodeErrorKind::BadEntry));
        }
        Ok(container_ref(c))
    }

    /// Object member; on a vertex or edge, a member of its `properties`
    /// (AGE's `->`). `None` for a missing key or another kind of value.
    pub fn get(&self, key: &str) -> Option<AgtypeRef<'a>> {
        match self {
            AgtypeRef::Object(o) => o.get(key),
            AgtypeRef::Vertex(o) | AgtypeRef::Edge(o) => match o.get_ignore_case("properties")? {
                AgtypeRef::Object(p) => p.get(key),
                _ => None,
            },
            _ => None,
        }
    }

    /// Array or path element; negative indexes count from the end.
    pub fn index(&self, i: i64) -> Option<AgtypeRef<'a>> {
        match self {
            AgtypeRef::Array(a) | AgtypeRef::Path(a) => a.get(resolve_index(i, a.len())?),
            _ => None,
        }
    }

    /// Elements or pairs of a container; `None` for scalars.
    pub fn len(&self) -> Option<usize> {
        match self {
            AgtypeRef::Array(a) | AgtypeRef::Path(a) => Some(a.len()),
            AgtypeRef::Object(o) | AgtypeRef::Vertex(o) | AgtypeRef::Edge(o) => Some(o.len()),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> Option<bool> {
        self.len().map(|n| n == 0)
    }

    /// The string, borrowed from the buffer.
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            AgtypeRef::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            AgtypeRef::Integer(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AgtypeRef::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// Depth-first walk over this value: containers open and close, every
    /// other value (entities included) is one token. The walk keeps its
    /// stack inline for shallow nesting and stops with an error on corrupt
    /// bytes or on overlap that would make it run longer than the buffer
    /// justifies.
    pub fn tokens(&self) -> Tokens<'a> {
        let budget = self
            .buffer()
            .map_or(16, |b| b.len().saturating_mul(2).saturating_add(16));
        Tokens {
            start: Some(*self),
            stack: InlineStack::new(),
            budget,
            failed: false,
        }
    }

    fn buffer(&self) -> Option<&'a [u8]> {
        match self {
            AgtypeRef::Array(a) | AgtypeRef::Path(a) => Some(a.0.buf),
            AgtypeRef::Object(o) | AgtypeRef::Vertex(o) | AgtypeRef::Edge(o) => Some(o.0.buf),
            AgtypeRef::Numeric(n) => Some(n.0),
            _ => None,
        }
    }

    /// Decodes this value into an owned [`Value`] (strictly, like [`decode`](crate::decode)).
    pub fn to_value(&self) -> Result<Value, DecodeError> {
        let dec = |c: &Container<'a>| crate::binary::decode_at(c.buf, c.entries_at - 4);
        Ok(match self {
            AgtypeRef::Null => Value::Null,
            AgtypeRef::Bool(b) => Value::Bool(*b),
            AgtypeRef::Integer(i) => Value::Integer(*i),
            AgtypeRef::Float(f) => Value::Float(*f),
            AgtypeRef::Numeric(n) => Value::Numeric(
                numeric_bin::read(n.0)
                    .map_err(|_| DecodeError::new(0, DecodeErrorKind::BadNumeric))?,
            ),
            AgtypeRef::String(s) => Value::String((*s).to_owned()),
            AgtypeRef::Array(a) => dec(&a.0)?,
            AgtypeRef::Object(o) => dec(&o.0)?,
            AgtypeRef::Vertex(o) => {
                let Value::Object(o) = dec(&o.0)? else {
                    return Err(DecodeError::new(0, DecodeErrorKind::BadEntity));
                };
                Value::Vertex(
                    crate::Vertex::try_from_object(o)
                        .map_err(|_| DecodeError::new(0, DecodeErrorKind::BadEntity))?,
                )
            }
            AgtypeRef::Edge(o) => {
                let Value::Object(o) = dec(&o.0)? else {
                    return Err(DecodeError::new(0, DecodeErrorKind::BadEntity));
                };
                Value::Edge(
                    crate::Edge::try_from_object(o)
                        .map_err(|_| DecodeError::new(0, DecodeErrorKind::BadEntity))?,
                )
            }
            AgtypeRef::Path(a) => {
                let Value::Array(items) = dec(&a.0)? else {
                    return Err(DecodeError::new(0, DecodeErrorKind::BadEntity));
                };
                Value::Path(
                    crate::Path::try_from_values(items)
                        .map_err(|_| DecodeError::new(0, DecodeErrorKind::BadEntity))?,
                )
            }
        })
    }
}

fn container_ref(c: Container<'_>) -> AgtypeRef<'_> {
    if c.is_object() {
        AgtypeRef::Object(ObjectRef(c))
    } else {
        AgtypeRef::Array(ArrayRef(c))
    }
}

/// Interprets entry `j` of `c`, which starts `off` bytes into the data area.
fn child<'a>(c: &Container<'a>, j: usize, off: usize) -> Option<AgtypeRef<'a>> {
    child_and_next(c, j, off).map(|(v, _)| v)
}

/// [`child`] and where the next entry starts. Inlined: returned through
/// memory, the value's tag and payload are written apart and read back
/// together, which stalls on every child of a walk.
#[inline(always)]
fn child_and_next<'a>(c: &Container<'a>, j: usize, off: usize) -> Option<(AgtypeRef<'a>, usize)> {
    let buf = c.buf;
    let (located, next) = c.child_and_next(j, off).ok()?;
    let v = match located {
        Child::Null => AgtypeRef::Null,
        Child::Bool(b) => AgtypeRef::Bool(b),
        Child::Str(s) => AgtypeRef::String(std::str::from_utf8(s).ok()?),
        Child::Numeric(at) => {
            let data = buf.get(at..)?;
            AgtypeRef::Numeric(NumericRef(data.get(..numeric_bin::size(data)?)?))
        }
        Child::Container(at) => {
            let inner = Container::parse(buf, at).ok()?;
            if inner.is_scalar() {
                return None;
            }
            container_ref(inner)
        }
        Child::Extended(at) => {
            let body = at.checked_add(4)?;
            match read_u32(buf, at)? {
                EXT_INTEGER => AgtypeRef::Integer(read_u64(buf, body)? as i64),
                EXT_FLOAT => AgtypeRef::Float(f64::from_bits(read_u64(buf, body)?)),
                sub @ (EXT_VERTEX | EXT_EDGE | EXT_PATH) => {
                    let inner = Container::parse(buf, body).ok()?;
                    match (sub, inner.is_object(), inner.is_scalar()) {
                        (_, _, true) => return None,
                        (EXT_VERTEX, true, _) => AgtypeRef::Vertex(ObjectRef(inner)),
                        (EXT_EDGE, true, _) => AgtypeRef::Edge(ObjectRef(inner)),
                        (EXT_PATH, false, _) => AgtypeRef::Path(ArrayRef(inner)),
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    };
    Some((v, next))
}

impl<'a> ArrayRef<'a> {
    pub fn len(&self) -> usize {
        self.0.count
    }

    pub fn is_empty(&self) -> bool {
        self.0.count == 0
    }

    pub fn get(&self, i: usize) -> Option<AgtypeRef<'a>> {
        if i >= self.0.count {
            return None;
        }
        child(&self.0, i, self.0.offset_of(i))
    }

    /// Elements in order; a corrupt element ends the iteration.
    pub fn iter(&self) -> impl Iterator<Item = AgtypeRef<'a>> + 'a {
        let c = self.0;
        let mut off = 0;
        (0..c.count).map_while(move |j| {
            let v = child(&c, j, off)?;
            off = c.span(j, off).ok()?.1;
            Some(v)
        })
    }
}

impl<'a> ObjectRef<'a> {
    pub fn len(&self) -> usize {
        self.0.count
    }

    pub fn is_empty(&self) -> bool {
        self.0.count == 0
    }

    fn key(&self, j: usize, off: usize) -> Option<&'a str> {
        match self.0.child(j, off).ok()? {
            Child::Str(s) => std::str::from_utf8(s).ok(),
            _ => None,
        }
    }

    /// Raw bytes of key `j` given its length and start offset; no UTF-8
    /// check is needed to compare them with a `&str`.
    fn key_bytes(&self, len: usize, off: usize) -> Option<&'a [u8]> {
        let start = self.0.data_at.checked_add(off)?;
        self.0.buf.get(start..start.checked_add(len)?)
    }

    /// Looks `key` up: a linear scan below [`BINARY_SEARCH_MIN_PAIRS`]
    /// pairs, binary search (in AGE's key order) from there on.
    pub fn get(&self, key: &str) -> Option<AgtypeRef<'a>> {
        if self.0.count < BINARY_SEARCH_MIN_PAIRS {
            self.get_linear(key)
        } else {
            self.get_binary(key)
        }
    }

    #[doc(hidden)]
    pub fn get_linear(&self, key: &str) -> Option<AgtypeRef<'a>> {
        let mut off = 0;
        for j in 0..self.0.count {
            let (len, next) = self.0.span(j, off).ok()?;
            // Lengths first: most keys are skipped without touching their bytes.
            if len == key.len() && self.key_bytes(len, off)? == key.as_bytes() {
                return self.value(j);
            }
            off = next;
        }
        None
    }

    #[doc(hidden)]
    pub fn get_binary(&self, key: &str) -> Option<AgtypeRef<'a>> {
        // Keys sort by length first and entries mostly store lengths, so the
        // run of keys as long as `key` is found from the entries alone; keys
        // in that run sit at fixed strides from its start.
        let lower_bound = |len: usize, from: usize| {
            let (mut lo, mut hi) = (from, self.0.count);
            while lo < hi {
                let mut mid = lo + (hi - lo) / 2;
                // Every 32nd entry stores an end offset, and its length costs a
                // walk over up to 31 entries; any index in range is a valid probe.
                if self.0.entry(mid) & crate::binary::E_HAS_OFF != 0 && mid + 1 < hi {
                    mid += 1;
                }
                if self.0.len_of(mid) < len {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let first = lower_bound(key.len(), 0);
        let end = lower_bound(key.len().checked_add(1)?, first);
        if first >= end {
            return None;
        }
        let base = self.0.offset_of(first);
        let (mut lo, mut hi) = (first, end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let off = base.checked_add((mid - first).checked_mul(key.len())?)?;
            match self.key_bytes(key.len(), off)?.cmp(key.as_bytes()) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return self.value(mid),
            }
        }
        None
    }

    fn value(&self, i: usize) -> Option<AgtypeRef<'a>> {
        let j = self.0.count + i;
        child(&self.0, j, self.0.offset_of(j))
    }

    /// Finds a key ignoring ASCII case (how AGE matches entity fields).
    fn get_ignore_case(&self, key: &str) -> Option<AgtypeRef<'a>> {
        let i = self.keys().position(|k| k.eq_ignore_ascii_case(key))?;
        self.value(i)
    }

    /// Keys in storage order; a corrupt key ends the iteration.
    pub fn keys(&self) -> impl Iterator<Item = &'a str> + 'a {
        let o = *self;
        let mut off = 0;
        (0..o.0.count).map_while(move |j| {
            let k = o.key(j, off)?;
            off = o.0.span(j, off).ok()?.1;
            Some(k)
        })
    }

    /// Pairs in storage order; a corrupt pair ends the iteration.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, AgtypeRef<'a>)> + 'a {
        let o = *self;
        let n = o.0.count;
        let mut off = o.0.offset_of(n);
        let values = (n..2 * n).map_while(move |j| {
            let v = child(&o.0, j, off)?;
            off = o.0.span(j, off).ok()?.1;
            Some(v)
        });
        self.keys().zip(values)
    }
}

/// One step of [`AgtypeRef::tokens`].
#[derive(Debug, Clone, Copy)]
pub enum Token<'a> {
    BeginArray(usize),
    EndArray,
    BeginObject(usize),
    Key(&'a str),
    EndObject,
    /// A scalar, or a vertex, edge or path (not descended into).
    Value(AgtypeRef<'a>),
}

#[derive(Debug, Clone, Copy, Default)]
struct Frame<'a> {
    c: Container<'a>,
    /// Next pair or element to emit.
    next: usize,
    /// Start offsets of the next key and next value (objects) or element.
    key_off: usize,
    val_off: usize,
    /// For objects: whether the key of pair `next` has been emitted.
    key_done: bool,
}

/// Iterator returned by [`AgtypeRef::tokens`].
pub struct Tokens<'a> {
    start: Option<AgtypeRef<'a>>,
    stack: InlineStack<Frame<'a>, 8>,
    budget: usize,
    failed: bool,
}

impl<'a> Tokens<'a> {
    fn open(&mut self, v: AgtypeRef<'a>) -> Token<'a> {
        match v {
            AgtypeRef::Array(a) => {
                self.stack.push(Frame {
                    c: a.0,
                    ..Frame::default()
                });
                Token::BeginArray(a.len())
            }
            AgtypeRef::Object(o) => {
                self.stack.push(Frame {
                    c: o.0,
                    val_off: o.0.offset_of(o.0.count),
                    ..Frame::default()
                });
                Token::BeginObject(o.len())
            }
            other => Token::Value(other),
        }
    }

    fn fail(&mut self, at: usize, kind: DecodeErrorKind) -> Option<Result<Token<'a>, DecodeError>> {
        self.failed = true;
        Some(Err(DecodeError::new(at, kind)))
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Result<Token<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if let Some(v) = self.start.take() {
            return Some(Ok(self.open(v)));
        }
        let Some(budget) = self.budget.checked_sub(1) else {
            return self.fail(0, DecodeErrorKind::Overlapping);
        };
        self.budget = budget;
        let f = self.stack.last_mut()?;
        let c = f.c;
        if f.next >= c.count {
            self.stack.pop();
            return Some(Ok(if c.is_object() {
                Token::EndObject
            } else {
                Token::EndArray
            }));
        }
        let i = f.next;
        if c.is_object() && !f.key_done {
            let key = match c.child_and_next(i, f.key_off) {
                Ok((Child::Str(s), next)) => std::str::from_utf8(s).ok().map(|k| (k, next)),
                _ => None,
            };
            let Some((key, next_off)) = key else {
                return self.fail(c.entries_at + 4 * i, DecodeErrorKind::KeyNotString);
            };
            f.key_off = next_off;
            f.key_done = true;
            return Some(Ok(Token::Key(key)));
        }
        let j = if c.is_object() { c.count + i } else { i };
        let off = f.val_off;
        let Some((v, next_off)) = child_and_next(&c, j, off) else {
            return self.fail(c.entries_at + 4 * j, DecodeErrorKind::BadEntry);
        };
        f.val_off = next_off;
        f.next += 1;
        f.key_done = false;
        if self.stack.len() > crate::MAX_DEPTH {
            return self.fail(c.entries_at, DecodeErrorKind::TooDeep);
        }
        Some(Ok(self.open(v)))
    }
}
