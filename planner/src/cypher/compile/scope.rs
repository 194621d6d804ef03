//! What a Cypher variable stands for in the SQL being built, and the SQL
//! that rebuilds a whole vertex, edge or path the way AGE builds it.

use super::super::DeclineReason as D;
use super::Compiler;
use super::typed::Sql;

#[derive(Debug, Clone)]
pub(super) enum Binding {
    Node(Ent),
    Edge(Ent),
    /// A value: a WITH item, an UNWIND element, a comprehension variable.
    Value(Sql),
    /// A named path of fixed length: its vertices and edges in order.
    Path(Vec<Binding>),
}

/// A vertex or edge, by the SQL expressions of its columns.
#[derive(Debug, Clone, Default)]
pub(super) struct Ent {
    /// graphid; `None` for an anonymous vertex no edge has reached yet.
    pub id: Option<String>,
    /// properties; `None` when no table was joined for it (nothing reads it).
    pub props: Option<String>,
    /// Edges: start_id and end_id.
    pub start: Option<String>,
    pub end: Option<String>,
    /// The label it was bound with (`None`: any), for AGE's label checks.
    pub label: Option<String>,
    /// Bound by OPTIONAL MATCH: NULL as a whole when nothing matched.
    pub nullable: bool,
    /// Read from `_ag_label_vertex` in the current SELECT (see
    /// [`Compiler::entity_props`]).
    pub all_labels: bool,
    /// How an edge endpoint was first equated with `id` (see
    /// [`Compiler::bind_endpoint`]).
    pub tied: Option<Tied>,
    /// Bound with an inline property map: likely one row, from which
    /// the edges are looked up.
    pub pinned: bool,
}

/// What ties an endpoint to a node (`Compiler::bind_endpoint`, pattern.rs).
#[derive(Debug, Clone, Copy)]
pub(super) enum Tie {
    /// A fixed-length edge; `loose`: a second one may be tied through an
    /// identity function on graphids (`graphid_identity`).
    Edge { loose: bool },
    /// A variable-length walk's last vertex: always plainly.
    Walk,
}

/// The first tie of a node to an edge endpoint in the current SELECT.
#[derive(Debug, Clone)]
pub(super) struct Tied {
    /// The condition, as it stands in the stage.
    pub cond: String,
    /// The endpoint column and its table's alias.
    pub col: String,
    pub table: String,
}

/// Private names for the anonymous elements of a pattern: never a Cypher
/// identifier, they start with a space.
pub(super) fn is_private(name: &str) -> bool {
    name.starts_with(' ')
}

impl Compiler<'_> {
    /// The whole vertex, edge or path bound to `v`, as AGE builds it.
    pub(super) fn entity(&self, v: &str) -> Result<String, D> {
        match self.scope.get(v) {
            Some(b) => self.build(b),
            None => Err(D::UnboundVariable),
        }
    }

    pub(super) fn build(&self, b: &Binding) -> Result<String, D> {
        match b {
            Binding::Node(e) => self.build_vertex(e),
            Binding::Edge(e) => self.build_edge(e),
            Binding::Path(elems) => {
                let mut parts = Vec::with_capacity(elems.len());
                for e in elems {
                    parts.push(self.build(e)?);
                }
                let built = format!("ag_catalog._agtype_build_path({})", parts.join(", "));
                // Bound by OPTIONAL MATCH: NULL when nothing matched.
                Ok(match elems.first() {
                    Some(Binding::Node(e)) if e.nullable => {
                        let id = e.id.as_deref().ok_or(D::UnsupportedExpr)?;
                        format!("CASE WHEN {id} IS NULL THEN NULL ELSE {built} END")
                    }
                    _ => built,
                })
            }
            Binding::Value(s) => s.clone().agtype_only(),
        }
    }

    pub(super) fn build_vertex(&self, e: &Ent) -> Result<String, D> {
        let (Some(id), Some(props)) = (&e.id, &e.props) else {
            return Err(D::UnsupportedExpr);
        };
        let oid = self.graph_oid();
        Ok(null_guard(
            e,
            id,
            format!(
                "ag_catalog._agtype_build_vertex({id}, ag_catalog._label_name({oid}, {id}), {props})"
            ),
        ))
    }

    pub(super) fn build_edge(&self, e: &Ent) -> Result<String, D> {
        let (Some(id), Some(props), Some(s), Some(t)) = (&e.id, &e.props, &e.start, &e.end) else {
            return Err(D::UnsupportedExpr);
        };
        let oid = self.graph_oid();
        Ok(null_guard(
            e,
            id,
            format!(
                "ag_catalog._agtype_build_edge({id}, {s}, {t}, ag_catalog._label_name({oid}, {id}), {props})"
            ),
        ))
    }

    /// The graphid of a bound vertex or edge.
    pub(super) fn entity_id(&self, v: &str) -> Option<String> {
        match self.scope.get(v)? {
            Binding::Node(e) | Binding::Edge(e) => e.id.clone(),
            _ => None,
        }
    }

    /// The properties column of a bound vertex or edge. In a projection, a
    /// vertex of any label reads its id first: PostgreSQL orders a scan's
    /// columns as the SELECT list first names them, and a child table of
    /// `_ag_label_vertex` scanned for (properties, id) copies every row it
    /// reads into that order, where (id, properties) is the row as stored
    /// (AGE's vertex builder names the id first; measured 0.9x before).
    pub(super) fn entity_props(&self, v: &str) -> Result<String, D> {
        match self.scope.get(v) {
            Some(Binding::Node(e)) if self.projecting && e.all_labels => {
                let (Some(id), Some(props)) = (&e.id, &e.props) else {
                    return Err(D::UnsupportedExpr);
                };
                Ok(format!(
                    "(CASE WHEN {id} IS NULL THEN NULL ELSE {props} END)"
                ))
            }
            Some(Binding::Node(e)) | Some(Binding::Edge(e)) => {
                e.props.clone().ok_or(D::UnsupportedExpr)
            }
            Some(_) => Err(D::UnsupportedExpr),
            None => Err(D::UnboundVariable),
        }
    }
}

/// AGE's builders reject a NULL graphid; an entity that OPTIONAL MATCH left
/// unmatched is SQL NULL as a whole, as in AGE.
fn null_guard(e: &Ent, id: &str, built: String) -> String {
    if e.nullable {
        format!("CASE WHEN {id} IS NULL THEN NULL ELSE {built} END")
    } else {
        built
    }
}
