//! Typed access through serde: [`Value`] to and from your own types.
//!
//! * [`from_value`] reads any `Deserialize` type. A vertex or an edge reads
//!   as its **properties** (so a `Person` struct comes straight out of a
//!   `(p:Person)` vertex); read it as [`Vertex<T>`] or [`Edge<T>`] to also
//!   get `id`, `label`, `start_id` and `end_id`, and a path as [`Path<V, E>`].
//! * [`to_value`] writes any `Serialize` type; [`Vertex<T>`], [`Edge<T>`] and
//!   [`Path<V, E>`] become AGE entities (`::vertex`, `::edge`, `::path`).
//! * [`cypher_params`] builds the map that `cypher('graph', $$ … $$, $1)`
//!   takes as its third argument.
//!
//! Integers beyond `i64` become numerics; a numeric reads into any integer
//! or float type that holds its value, or as its decimal text. Errors say
//! where in the value they happened (`at properties.age: …`).

mod de;
mod entity;
mod ser;

use std::fmt;

use crate::Value;

pub use entity::{Edge, Path, Vertex};

/// Reads a `T` out of `value` (see the [module docs](self)).
pub fn from_value<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, Error> {
    T::deserialize(de::ValueDeserializer(value))
}

/// Writes `value` as an agtype [`Value`].
pub fn to_value<T: serde::Serialize + ?Sized>(value: &T) -> Result<Value, Error> {
    value.serialize(ser::ValueSerializer)
}

/// The parameter map for `cypher('graph', $$ … $$, $1)`: `params` must
/// serialize to a map (a struct, a `HashMap`, …); each key becomes a
/// `$name` in the Cypher text. Bind the result as the statement's `$1`.
pub fn cypher_params<T: serde::Serialize + ?Sized>(params: &T) -> Result<Value, Error> {
    match to_value(params)? {
        v @ Value::Object(_) => Ok(v),
        other => Err(Error::new(format!(
            "cypher parameters must be a map (a struct or a map type), not {}",
            kind_name(&other)
        ))),
    }
}

/// Why a value could not be converted, and where in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", Where(path))]
pub struct Error {
    message: String,
    /// Innermost segment first, as the error travels outwards.
    path: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

impl Error {
    fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            path: Vec::new(),
        }
    }

    fn inside(mut self, segment: Segment) -> Self {
        self.path.push(segment);
        self
    }

    /// The cause, without the location.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Where the error happened: `properties.tags[2]`, or empty at the root.
    pub fn path(&self) -> String {
        let mut out = String::new();
        for s in self.path.iter().rev() {
            match s {
                Segment::Key(k) if out.is_empty() => out.push_str(k),
                Segment::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

struct Where<'a>(&'a [Segment]);

impl fmt::Display for Where<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        let e = Error {
            message: String::new(),
            path: self.0.to_vec(),
        };
        write!(f, "at {}: ", e.path())
    }
}

impl serde::de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::new(msg.to_string())
    }
}

impl serde::ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::new(msg.to_string())
    }
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Numeric(_) => "a numeric",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
        Value::Vertex(_) => "a vertex",
        Value::Edge(_) => "an edge",
        Value::Path(_) => "a path",
    }
}

/// Struct names that tell this crate's serializer and deserializer that
/// the typed entity wrappers are at work; other formats ignore them.
const VERTEX_MARKER: &str = "$agtype::Vertex";
const EDGE_MARKER: &str = "$agtype::Edge";
const PATH_MARKER: &str = "$agtype::Path";
