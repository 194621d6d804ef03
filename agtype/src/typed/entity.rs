//! Vertices, edges and paths with typed properties.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeSeq, Serializer};

use super::PATH_MARKER;

/// A vertex whose properties are a `T`.
///
/// Through [`from_value`](super::from_value) it reads from an AGE vertex;
/// through [`to_value`](super::to_value) it becomes one (`::vertex`). With
/// other serde formats it is the map `{"id", "label", "properties"}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
// The name is `VERTEX_MARKER` (serde wants a literal here).
#[serde(rename = "$agtype::Vertex")]
pub struct Vertex<T> {
    pub id: i64,
    pub label: String,
    pub properties: T,
}

/// An edge whose properties are a `T`; see [`Vertex`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
// `EDGE_MARKER`.
#[serde(rename = "$agtype::Edge")]
pub struct Edge<T> {
    pub id: i64,
    pub label: String,
    pub start_id: i64,
    pub end_id: i64,
    pub properties: T,
}

/// A path: `vertices[0]`, `edges[0]`, `vertices[1]`, …, with one more
/// vertex than edges. Reads from an AGE path (or any sequence alternating
/// vertex and edge), and becomes one (`::path`).
#[derive(Debug, Clone, PartialEq)]
pub struct Path<V, E> {
    pub vertices: Vec<Vertex<V>>,
    pub edges: Vec<Edge<E>>,
}

impl<V, E> Path<V, E> {
    /// Each edge with the vertices before and after it in the path.
    pub fn steps(&self) -> impl Iterator<Item = (&Vertex<V>, &Edge<E>, &Vertex<V>)> {
        self.edges
            .iter()
            .enumerate()
            .filter_map(|(i, e)| Some((self.vertices.get(i)?, e, self.vertices.get(i + 1)?)))
    }
}

impl<V: Serialize, E: Serialize> Serialize for Path<V, E> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(PATH_MARKER, &Alternating(self))
    }
}

struct Alternating<'a, V, E>(&'a Path<V, E>);

impl<V: Serialize, E: Serialize> Serialize for Alternating<'_, V, E> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.0;
        let mut seq = s.serialize_seq(Some(p.vertices.len() + p.edges.len()))?;
        for (i, v) in p.vertices.iter().enumerate() {
            if i > 0 {
                match p.edges.get(i - 1) {
                    Some(e) => seq.serialize_element(e)?,
                    None => return Err(serde::ser::Error::custom(PATH_SHAPE)),
                }
            }
            seq.serialize_element(v)?;
        }
        if p.vertices.is_empty() || p.edges.len() + 1 != p.vertices.len() {
            return Err(serde::ser::Error::custom(PATH_SHAPE));
        }
        seq.end()
    }
}

const PATH_SHAPE: &str = "a path has one vertex more than edges, and at least one vertex";

impl<'de, V: Deserialize<'de>, E: Deserialize<'de>> Deserialize<'de> for Path<V, E> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(PathVisitor(PhantomData))
    }
}

struct PathVisitor<V, E>(PhantomData<(V, E)>);

impl<'de, V: Deserialize<'de>, E: Deserialize<'de>> Visitor<'de> for PathVisitor<V, E> {
    type Value = Path<V, E>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a path (vertex, edge, vertex, …)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut vertices = Vec::new();
        let mut edges = Vec::new();
        loop {
            match seq.next_element::<Vertex<V>>()? {
                Some(v) => vertices.push(v),
                // Empty, or ending on an edge.
                None => return Err(de::Error::custom(PATH_SHAPE)),
            }
            match seq.next_element::<Edge<E>>()? {
                Some(e) => edges.push(e),
                None => return Ok(Path { vertices, edges }),
            }
        }
    }
}
