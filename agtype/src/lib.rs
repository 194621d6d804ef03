//! Apache AGE's `agtype`: values, the text format of `agtype_in` /
//! `agtype_out`, and the on-disk container format, byte for byte as AGE 1.6
//! (PostgreSQL 15, little-endian) reads and writes them.
//!
//! ```
//! let v = agtype::parse(r#"{"b": 1, "a": [1e23, 1.50::numeric]}"#).unwrap();
//! assert_eq!(v.to_string(), r#"{"a": [9.999999999999999e+22, 1.50::numeric], "b": 1}"#);
//! let bytes = agtype::encode(&v);
//! assert_eq!(agtype::decode(&bytes).unwrap(), v);
//! let view = agtype::AgtypeRef::new(&bytes).unwrap();
//! assert_eq!(view.get("a").and_then(|a| a.index(-2)).and_then(|x| x.as_f64()), Some(1e23));
//! ```
//!
//! # Text
//! [`parse`] accepts what `agtype_in` accepts (JSON plus `NaN`/`Infinity`,
//! `::numeric`, `::integer`, `::float`, `::vertex`, `::edge`, `::path`) and
//! reports AGE's messages ([`ParseError`]). [`Value`]'s `Display` prints what
//! `agtype_out` prints: keys in storage order, floats as PostgreSQL's
//! `float8out` (shortest digits strictly inside the rounding interval) with
//! `.0` added to integral values. Nesting is limited to [`MAX_DEPTH`]
//! containers (AGE's own limit is its stack size); nothing recurses deeper.
//!
//! # Binary layout
//! All words little-endian. A container is a `u32` header (`count` in the
//! low 28 bits; `0x20000000` object, `0x40000000` array, `0x10000000` scalar
//! wrapper), then one `u32` entry per child (objects: all keys, then all
//! values), then the children's data. Entry bits 28–30 give the type
//! (0 string, 1 numeric, 2 false, 3 true, 4 null, 5 container, 7 extended);
//! the low 28 bits give the data length, or, when bit 31 is set (every 32nd
//! entry), the end offset. Strings are unaligned; numerics, containers and
//! extended values are padded to 4 bytes. Extended values are a `u32`
//! sub-type (0 integer, 1 float, 2 vertex, 3 edge, 4 path) followed by an
//! `i64`/`f64` or an object/array container. A top-level scalar is a
//! one-element array with the scalar flag.
//!
//! ## AGE's entity-padding quirk
//! AGE leaves a vertex's, edge's or path's *leading* padding out of its
//! stored length. When such an entity follows data that ends unaligned in
//! the same container (a string, or keys whose total length is not a
//! multiple of 4), every later sibling's start is computed 1–3 bytes short:
//! `["abc", V, "xyz", 5]` reads back, in AGE and here, as
//! `["abc", V, " xy", 5]`, and some such bytes are unreadable
//! (`Invalid AGT header value.`). [`encode`] writes exactly what AGE
//! writes, [`decode`] and [`AgtypeRef`] read exactly as AGE reads, and
//! [`is_quirk_shape`] tells whether a value has this shape; for all other
//! values `decode(encode(v)) == v`.

mod binary;
mod float;
mod inline_stack;
pub mod lines;
mod numeric;
mod pg;
mod scratch;
#[cfg(feature = "serde")]
mod serde_impl;
mod text;
#[cfg(feature = "serde")]
pub mod typed;
mod value;
mod view;
pub mod wire;

#[doc(hidden)]
pub mod fuzzing;

pub use binary::{
    DecodeError, DecodeErrorKind, EncodeError, decode, encode, is_quirk_shape, try_encode,
};
pub use float::format_float;
pub use numeric::Numeric;
pub use text::{ParseError, parse, to_text};
#[cfg(feature = "serde")]
pub use typed::{cypher_params, from_value, to_value};
pub use value::{Edge, Object, Path, ShapeError, Value, Vertex, key_cmp};
pub use view::{
    AgtypeRef, ArrayRef, BINARY_SEARCH_MIN_PAIRS, NumericRef, ObjectRef, Token, Tokens,
};

/// Deepest nesting of arrays and objects (vertex and edge objects included)
/// that [`parse`] and [`decode`] accept; deeper input is an error
/// (`stack depth limit exceeded`, as AGE reports when its stack runs out).
///
/// Parsing is iterative; printing, encoding, decoding and dropping recurse
/// once per level: a value this deep needs under 1 MB of stack in optimised
/// builds (within the 2 MB default of spawned threads) and several MB in
/// unoptimised ones.
pub const MAX_DEPTH: usize = 1024;
