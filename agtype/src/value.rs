//! The owned agtype value model.

use std::cmp::Ordering;

use crate::key::Key;
use crate::numeric::Numeric;

/// One agtype value of any kind.
///
/// Equality is structural; two floats are equal when their bits are equal or
/// both are NaN, so `-0.0 != 0.0` (AGE prints them differently) and a NaN
/// value equals itself.
#[derive(Debug, Clone)]
pub enum Value {
    Null,
    Bool(bool),
    Integer(i64),
    Float(f64),
    Numeric(Numeric),
    String(String),
    Array(Vec<Value>),
    Object(Object),
    Vertex(Vertex),
    Edge(Edge),
    Path(Path),
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Integer(a), Value::Integer(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            (Value::Numeric(a), Value::Numeric(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Array(a), Value::Array(b)) => a == b,
            (Value::Object(a), Value::Object(b)) => a == b,
            (Value::Vertex(a), Value::Vertex(b)) => a == b,
            (Value::Edge(a), Value::Edge(b)) => a == b,
            (Value::Path(a), Value::Path(b)) => a == b,
            _ => false,
        }
    }
}

impl Value {
    /// Object member by key; on a vertex or edge, a member of its
    /// `properties` (as AGE's `->` operator does).
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(o) => o.get(key),
            Value::Vertex(v) => v.properties().get(key),
            Value::Edge(e) => e.properties().get(key),
            _ => None,
        }
    }

    /// Array or path element; a negative index counts from the end (`-1` is
    /// the last element), as AGE allows.
    pub fn index(&self, i: i64) -> Option<&Value> {
        let items = match self {
            Value::Array(a) => a.as_slice(),
            Value::Path(p) => p.elements(),
            _ => return None,
        };
        items.get(resolve_index(i, items.len())?)
    }

    /// Number of elements (array, path) or pairs (object, vertex, edge).
    pub fn len(&self) -> Option<usize> {
        match self {
            Value::Array(a) => Some(a.len()),
            Value::Path(p) => Some(p.elements().len()),
            Value::Object(o) => Some(o.len()),
            Value::Vertex(v) => Some(v.as_object().len()),
            Value::Edge(e) => Some(e.as_object().len()),
            _ => None,
        }
    }

    /// `Some(true)` for an empty container, `None` for scalars.
    pub fn is_empty(&self) -> Option<bool> {
        self.len().map(|n| n == 0)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Parses a numeric literal as PostgreSQL's `numeric_in` does.
    pub fn numeric(text: &str) -> Result<Value, crate::ParseError> {
        Numeric::parse(text)
            .map(Value::Numeric)
            .map_err(|m| crate::ParseError::from_cast(0, m))
    }
}

/// Resolves an AGE-style index (negative counts from the end) to a position.
pub(crate) fn resolve_index(i: i64, len: usize) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let i = if i < 0 { i.checked_add(len)? } else { i };
    if (0..len).contains(&i) {
        usize::try_from(i).ok()
    } else {
        None
    }
}

/// AGE's key order: shorter UTF-8 length first, then unsigned bytes.
pub fn key_cmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    match a.len().cmp(&b.len()) {
        // Property names are mostly short: compare them as one word each
        // rather than through a call to memcmp.
        Ordering::Equal if a.len() <= 8 => word(a).cmp(&word(b)),
        Ordering::Equal => a.cmp(b),
        unequal => unequal,
    }
}

/// Up to 8 bytes as a big-endian word, zero-padded: word order is byte
/// order. Built in a register: a short copy into a buffer and a wide load
/// from it would stall on store forwarding.
fn word(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .take(8)
        .enumerate()
        .fold(0, |w, (i, &b)| w | u64::from(b) << (56 - 8 * i))
}

/// An object: keys unique and kept in AGE's storage order (see [`key_cmp`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Object {
    pairs: Vec<(Key, Value)>,
}

impl Object {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds an object from pairs in input order; a later duplicate key
    /// replaces an earlier one, as in `agtype_in`.
    pub fn from_pairs<K: Into<Key>>(pairs: Vec<(K, Value)>) -> Self {
        // With `K = Key` this reuses the vector's allocation.
        let pairs = pairs.into_iter().map(|(k, v)| (k.into(), v)).collect();
        Self::from_key_pairs(pairs)
    }

    fn from_key_pairs(mut pairs: Vec<(Key, Value)>) -> Self {
        if pairs.windows(2).all(|w| key_cmp(&w[0].0, &w[1].0).is_lt()) {
            return Object { pairs };
        }
        // Stable sorts keep input order among equal keys, so the last of a
        // run of duplicates is the one AGE keeps.
        if pairs.len() <= 16 {
            insertion_sort(&mut pairs);
        } else {
            pairs.sort_by(|a, b| key_cmp(&a.0, &b.0));
        }
        let mut kept = 0;
        for i in 1..pairs.len() {
            if pairs[i].0 != pairs[kept].0 {
                kept += 1;
            }
            pairs.swap(kept, i);
        }
        pairs.truncate(kept + 1);
        Object { pairs }
    }

    /// Pairs whose keys the caller has checked are in AGE's order without
    /// repeats, as [`Object::from_pairs`] would leave them.
    pub(crate) fn from_ordered_pairs(pairs: Vec<(Key, Value)>) -> Self {
        debug_assert!(pairs.windows(2).all(|w| key_cmp(&w[0].0, &w[1].0).is_lt()));
        Object { pairs }
    }

    /// [`Object::from_pairs`] on the pairs at `start..` of a scratch stack,
    /// which it removes. Small unsorted objects are put in order through
    /// an index permutation, so each pair moves once, straight into the
    /// object's storage.
    pub(crate) fn take_from(scratch: &mut Vec<(Key, Value)>, start: usize) -> Self {
        const MAX: usize = 32;
        let tail = scratch.get_mut(start..).unwrap_or_default();
        let n = tail.len();
        if tail.windows(2).all(|w| key_cmp(&w[0].0, &w[1].0).is_lt()) {
            return Object {
                pairs: crate::scratch::take_tail(scratch, start),
            };
        }
        if n > MAX {
            return Object::from_key_pairs(crate::scratch::take_tail(scratch, start));
        }
        let mut order = [0u8; MAX];
        for (i, slot) in order.iter_mut().enumerate().take(n) {
            *slot = i as u8;
        }
        let order = &mut order[..n];
        let key = |i: u8| tail[usize::from(i)].0.as_str();
        // Stable, so that equal keys stay in input order.
        for i in 1..n {
            let mut j = i;
            while j > 0 && key_cmp(key(order[j - 1]), key(order[j])).is_gt() {
                order.swap(j - 1, j);
                j -= 1;
            }
        }
        // Of a run of equal keys AGE keeps the last.
        let mut shadowed = [false; MAX];
        for k in 1..n {
            shadowed[k - 1] = key(order[k - 1]) == key(order[k]);
        }
        let mut pairs = Vec::with_capacity(n);
        for (&i, _) in order.iter().zip(shadowed).filter(|(_, hidden)| !hidden) {
            let slot = &mut tail[usize::from(i)];
            pairs.push(std::mem::replace(slot, (Key::default(), Value::Null)));
        }
        scratch.truncate(start);
        Object { pairs }
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: impl Into<Key>, value: Value) -> Option<Value> {
        let key = key.into();
        match self.search(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.pairs[i].1, value)),
            Err(i) => {
                self.pairs.insert(i, (key, value));
                None
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.search(key).ok().map(|i| &self.pairs[i].1)
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.search(key).ok().map(|i| self.pairs.remove(i).1)
    }

    fn search(&self, key: &str) -> Result<usize, usize> {
        self.pairs.binary_search_by(|(k, _)| key_cmp(k, key))
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Pairs in storage order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn pairs(&self) -> &[(Key, Value)] {
        &self.pairs
    }

    pub fn into_pairs(self) -> Vec<(Key, Value)> {
        self.pairs
    }

    /// Finds a key ignoring ASCII case, as AGE matches entity keys.
    fn get_ci(&self, key: &str) -> Option<&Value> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    }
}

impl<K: Into<Key>> FromIterator<(K, Value)> for Object {
    fn from_iter<I: IntoIterator<Item = (K, Value)>>(iter: I) -> Self {
        Object::from_key_pairs(iter.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

/// Stable and allocation-free; objects are usually small.
fn insertion_sort(pairs: &mut [(Key, Value)]) {
    for i in 1..pairs.len() {
        let mut j = i;
        while j > 0 && key_cmp(&pairs[j - 1].0, &pairs[j].0).is_gt() {
            pairs.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// Why an object or array is not a valid vertex, edge or path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeError {
    NotVertex,
    NotEdge,
    NotPath,
}

impl ShapeError {
    pub fn message(self) -> &'static str {
        match self {
            ShapeError::NotVertex => "object is not a vertex",
            ShapeError::NotEdge => "object is not a edge",
            ShapeError::NotPath => "array is not a valid path",
        }
    }
}

/// An entity field: its name and the kind of value it must hold.
type Field = (&'static str, fn(&Value) -> bool);

fn has_fields(o: &Object, fields: &[Field]) -> bool {
    o.len() == fields.len()
        && fields
            .iter()
            .all(|(name, ok)| o.get_ci(name).is_some_and(ok))
}

fn is_int(v: &Value) -> bool {
    matches!(v, Value::Integer(_))
}
fn is_str(v: &Value) -> bool {
    matches!(v, Value::String(_))
}
fn is_obj(v: &Value) -> bool {
    matches!(v, Value::Object(_))
}

/// A vertex: an object with exactly `id` (integer), `label` (string) and
/// `properties` (object). AGE matches those names ignoring case and keeps the
/// spelling it was given, so the object is stored as is.
#[derive(Debug, Clone, PartialEq)]
pub struct Vertex(Object);

impl Vertex {
    pub fn new(id: i64, label: impl Into<String>, properties: Object) -> Self {
        Vertex(Object::from_key_pairs(vec![
            ("id".into(), Value::Integer(id)),
            ("label".into(), Value::String(label.into())),
            ("properties".into(), Value::Object(properties)),
        ]))
    }

    pub fn try_from_object(o: Object) -> Result<Self, ShapeError> {
        let fields: [Field; 3] = [("id", is_int), ("label", is_str), ("properties", is_obj)];
        if has_fields(&o, &fields) {
            Ok(Vertex(o))
        } else {
            Err(ShapeError::NotVertex)
        }
    }

    pub fn id(&self) -> i64 {
        self.0.get_ci("id").and_then(Value::as_i64).unwrap_or(0)
    }

    pub fn label(&self) -> &str {
        self.0.get_ci("label").and_then(Value::as_str).unwrap_or("")
    }

    pub fn properties(&self) -> &Object {
        entity_properties(&self.0)
    }

    pub fn as_object(&self) -> &Object {
        &self.0
    }

    pub fn into_object(self) -> Object {
        self.0
    }
}

/// An edge: `id`, `label`, `start_id`, `end_id`, `properties` (see [`Vertex`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Edge(Object);

impl Edge {
    pub fn new(
        id: i64,
        label: impl Into<String>,
        start_id: i64,
        end_id: i64,
        properties: Object,
    ) -> Self {
        Edge(Object::from_key_pairs(vec![
            ("id".into(), Value::Integer(id)),
            ("label".into(), Value::String(label.into())),
            ("start_id".into(), Value::Integer(start_id)),
            ("end_id".into(), Value::Integer(end_id)),
            ("properties".into(), Value::Object(properties)),
        ]))
    }

    pub fn try_from_object(o: Object) -> Result<Self, ShapeError> {
        let fields: [Field; 5] = [
            ("id", is_int),
            ("label", is_str),
            ("start_id", is_int),
            ("end_id", is_int),
            ("properties", is_obj),
        ];
        if has_fields(&o, &fields) {
            Ok(Edge(o))
        } else {
            Err(ShapeError::NotEdge)
        }
    }

    pub fn id(&self) -> i64 {
        self.0.get_ci("id").and_then(Value::as_i64).unwrap_or(0)
    }

    pub fn label(&self) -> &str {
        self.0.get_ci("label").and_then(Value::as_str).unwrap_or("")
    }

    pub fn start_id(&self) -> i64 {
        self.0
            .get_ci("start_id")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    }

    pub fn end_id(&self) -> i64 {
        self.0.get_ci("end_id").and_then(Value::as_i64).unwrap_or(0)
    }

    pub fn properties(&self) -> &Object {
        entity_properties(&self.0)
    }

    pub fn as_object(&self) -> &Object {
        &self.0
    }

    pub fn into_object(self) -> Object {
        self.0
    }
}

fn entity_properties(o: &Object) -> &Object {
    static EMPTY: Object = Object { pairs: Vec::new() };
    match o.get_ci("properties") {
        Some(Value::Object(p)) => p,
        _ => &EMPTY,
    }
}

/// A path: odd length, vertex, edge, vertex, …, vertex.
#[derive(Debug, Clone, PartialEq)]
pub struct Path(Vec<Value>);

impl Path {
    pub fn try_from_values(items: Vec<Value>) -> Result<Self, ShapeError> {
        let alternates = items.iter().enumerate().all(|(i, v)| {
            if i % 2 == 0 {
                matches!(v, Value::Vertex(_))
            } else {
                matches!(v, Value::Edge(_))
            }
        });
        if items.len() % 2 == 1 && alternates {
            Ok(Path(items))
        } else {
            Err(ShapeError::NotPath)
        }
    }

    pub fn elements(&self) -> &[Value] {
        &self.0
    }

    pub fn into_elements(self) -> Vec<Value> {
        self.0
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self { Value::Integer(i64::from(v)) }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32);

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Value::Float(f64::from(v))
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}
impl From<Numeric> for Value {
    fn from(v: Numeric) -> Self {
        Value::Numeric(v)
    }
}
impl From<Object> for Value {
    fn from(v: Object) -> Self {
        Value::Object(v)
    }
}
impl From<Vertex> for Value {
    fn from(v: Vertex) -> Self {
        Value::Vertex(v)
    }
}
impl From<Edge> for Value {
    fn from(v: Edge) -> Self {
        Value::Edge(v)
    }
}
impl From<Path> for Value {
    fn from(v: Path) -> Self {
        Value::Path(v)
    }
}
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Self {
        Value::Array(v.into_iter().map(Into::into).collect())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}
impl From<()> for Value {
    fn from(_: ()) -> Self {
        Value::Null
    }
}
