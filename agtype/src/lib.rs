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
//! # In an application
//!
//! Three optional features make the crate the way a Rust program talks
//! agtype with AGE (the default feature set has none of them):
//!
//! | feature | gives |
//! |---|---|
//! | `tokio-postgres` | `FromSql`/`ToSql` (postgres-types) for [`Value`] and [`wire::TextRef`] |
//! | `sqlx` | `Type`/`Decode`/`Encode` for sqlx's Postgres driver, same types |
//! | `serde` | `from_value`, `to_value`, `cypher_params` and the `typed` entities |
//!
//! Columns and parameters work in both wire formats. AGE's binary format
//! is not the container: it is a version byte followed by the same text
//! (see [`wire`]). The type is recognised by name (`agtype`, or
//! `ag_catalog.agtype` when `ag_catalog` is not on the `search_path`) and
//! its OID looked up on the server by the driver. A column that is not
//! agtype, or text that does not parse, is an error that names the column
//! and the cause. Each AGE session needs `LOAD 'age'` (unless preloaded)
//! and, for unqualified names, `SET search_path = ag_catalog, "$user",
//! public`.
//!
//! ## tokio-postgres
//!
//! ```no_run
//! # #[cfg(all(feature = "tokio-postgres", feature = "serde"))]
//! # async fn example(client: &tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use agtype::Value;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Person {
//!     name: String,
//!     age: i64,
//! }
//!
//! // A vertex comes back as a `Value`; `from_value` reads its properties.
//! let row = client
//!     .query_one(
//!         "SELECT * FROM cypher('people', $$ MATCH (p:Person) RETURN p LIMIT 1 $$) AS (p agtype)",
//!         &[],
//!     )
//!     .await?;
//! let p: Person = agtype::from_value(row.get::<_, Value>(0))?;
//!
//! // A `Value` is a parameter too: here the map of `$name`s for cypher().
//! let params = agtype::cypher_params(&Person { name: "Ada".into(), age: 36 })?;
//! client
//!     .execute(
//!         "SELECT * FROM cypher('people', $$ CREATE (:Person {name: $name, age: $age}) $$, $1) AS (v agtype)",
//!         &[&params],
//!     )
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! ## sqlx
//!
//! ```no_run
//! # #[cfg(all(feature = "sqlx", feature = "serde"))]
//! # async fn example(pool: &sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use agtype::Value;
//! use agtype::typed::{Edge, Vertex};
//!
//! #[derive(serde::Deserialize)]
//! struct Person {
//!     name: String,
//! }
//! #[derive(serde::Deserialize)]
//! struct Knows {
//!     since: i64,
//! }
//!
//! let rows: Vec<(Value, Value)> = sqlx::query_as(
//!     "SELECT * FROM cypher('people', $$ MATCH (a)-[k:KNOWS]->(b) RETURN a, k $$) AS (a agtype, k agtype)",
//! )
//! .fetch_all(pool)
//! .await?;
//! for (a, k) in rows {
//!     // The typed wrappers keep the entity's id, label and ends.
//!     let a: Vertex<Person> = agtype::from_value(a)?;
//!     let k: Edge<Knows> = agtype::from_value(k)?;
//!     println!("{} ({}) knows {} since {}", a.properties.name, a.id, k.end_id, k.properties.since);
//! }
//!
//! // Binding a `Value` sends it in AGE's binary format.
//! let echoed: Value = sqlx::query_scalar("SELECT $1::ag_catalog.agtype")
//!     .bind(agtype::parse("[1, 2.5, {\"k\": null}]")?)
//!     .fetch_one(pool)
//!     .await?;
//! # let _ = echoed;
//! # Ok(())
//! # }
//! ```
//!
//! ## serde
//!
//! ```
//! # #[cfg(feature = "serde")] {
//! use agtype::typed::{Path, Vertex};
//!
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
//! struct Person {
//!     name: String,
//!     age: u8,
//! }
//! #[derive(serde::Deserialize)]
//! struct Knows {
//!     since: i32,
//! }
//!
//! // What AGE returns for `RETURN p` …
//! let v = agtype::parse(
//!     r#"{"id": 844424930131969, "label": "Person", "properties": {"age": 36, "name": "Ada"}}::vertex"#,
//! )
//! .unwrap();
//! // … reads as the struct of its properties,
//! let ada: Person = agtype::from_value(v.clone()).unwrap();
//! assert_eq!(ada, Person { name: "Ada".into(), age: 36 });
//! // or with its id and label.
//! let vertex: Vertex<Person> = agtype::from_value(v.clone()).unwrap();
//! assert_eq!((vertex.id, vertex.label.as_str()), (844424930131969, "Person"));
//!
//! // A path is its vertices and the edges between them.
//! let path = agtype::parse(&format!(
//!     r#"[{v}, {{"id": 7, "label": "KNOWS", "end_id": 2, "start_id": 844424930131969, "properties": {{"since": 2020}}}}::edge, {{"id": 2, "label": "Person", "properties": {{"age": 41, "name": "Bob"}}}}::vertex]::path"#
//! ))
//! .unwrap();
//! let p: Path<Person, Knows> = agtype::from_value(path).unwrap();
//! let (from, knows, to) = p.steps().next().unwrap();
//! assert_eq!((from.properties.age, knows.properties.since, to.id), (36, 2020, 2));
//!
//! // Any serializable value becomes the parameter map of cypher()'s `$1`;
//! // a field the struct cannot hold says where it is.
//! let params = agtype::cypher_params(&ada).unwrap();
//! assert_eq!(params.to_string(), r#"{"age": 36, "name": "Ada"}"#);
//! let young = agtype::parse(r#"{"name": "Eve", "age": 300}"#).unwrap();
//! let e = agtype::from_value::<Person>(young).unwrap_err();
//! assert_eq!(e.path(), "age");
//! # }
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
//! Well-formed text takes a one-pass fast path; anything else (every
//! error, `NaN`/`Infinity` words, annotations on `null` or booleans) goes
//! to a reference parser that follows PostgreSQL's lexer token by token,
//! and the two are checked to agree on every input (property tests, fuzz
//! target). [`to_text`] is the fastest way to print; `Display` prints the
//! same text.
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
mod key;
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
pub use key::Key;
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
