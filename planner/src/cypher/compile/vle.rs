//! Variable-length relationships (`-[:R*1..3]->`) as a recursive CTE that
//! walks the edges from the left node, the way AGE's `age_vle` does: each
//! path of distinct edges whose length is within the bounds is one row; a
//! self-loop is one step in any direction; an undirected step follows an
//! edge either way. The CTE is a lateral subquery, so it starts from each
//! row's left node; the right node is its last vertex.

use super::super::DeclineReason as D;
use super::super::ast::*;
use super::super::catalog::LabelKind;
use super::Compiler;
use super::expr::Sql;
use super::scope::Binding;
use super::stage::Item;

/// Longest bounded relationship compiled; beyond it the number of paths
/// explodes in AGE as here, and AGE's in-memory walk is no slower.
pub const MAX_VLE_HOPS: i64 = 10;

impl Compiler<'_> {
    /// Binds a variable-length relationship from `left` (bound, with an
    /// id) to `right`; returns the SQL array of the path's edge ids.
    pub(super) fn var_length_rel(
        &mut self,
        r: &RelPattern,
        left: &str,
        right: &str,
    ) -> Result<String, D> {
        let Some((lo, hi)) = r.var_length else {
            return Err(D::VariableLength);
        };
        let lo = lo.unwrap_or(1);
        let hi = hi.ok_or(D::VariableLength)?;
        if hi > MAX_VLE_HOPS {
            return Err(D::TooLarge);
        }
        if lo > hi || r.types.len() > 1 {
            return Err(D::VariableLength);
        }
        if let Some(v) = &r.var
            && self.scope.contains_key(v)
        {
            return Err(D::VariableReuse);
        }
        let start = match self.scope.get(left) {
            Some(Binding::Node(e)) => e.id.clone().ok_or(D::VariableLength)?,
            _ => return Err(D::VariableLength),
        };
        let t = self.table(r.types.first().map(String::as_str), LabelKind::Edge)?;
        let edge_filter = match &r.props {
            Some(m) => format!(" AND e.properties @> {}", self.walk_constraint(m)?),
            None => String::new(),
        };
        // The edges a step may take from `_r.vid`, and the vertex each leads
        // to; undirected, both orientations of each edge and a self-loop once
        // (the same index-friendly arms as a fixed-length relationship).
        let (steps, from, next) = match r.dir {
            Direction::Right => (t.clone(), "e.start_id = _r.vid", "e.end_id"),
            Direction::Left => (t.clone(), "e.end_id = _r.vid", "e.start_id"),
            Direction::Both => (
                format!(
                    "(SELECT id, start_id, end_id, properties, start_id AS _s, end_id AS _o, \
                     false AS _rev FROM {t} UNION ALL SELECT id, start_id, end_id, properties, \
                     end_id, start_id, true FROM {t})"
                ),
                "e._s = _r.vid AND NOT (e._rev AND e.start_id = e.end_id)",
                "e._o",
            ),
        };
        let a = self.fresh("_v");
        self.stage.items.push(Item::Lateral(format!(
            "(WITH RECURSIVE _r(vid, ids) AS (SELECT {start}, ARRAY[]::ag_catalog.graphid[] \
             UNION ALL SELECT {next}, _r.ids || e.id FROM _r, {steps} AS e WHERE {from} \
             AND cardinality(_r.ids) < {hi} AND e.id <> ALL(_r.ids){edge_filter}) \
             SELECT vid, ids FROM _r WHERE cardinality(ids) >= {lo}) AS {a}"
        )));
        self.bind_endpoint(right, format!("{a}.vid"));
        let ids = format!("{a}.ids");
        if let Some(v) = &r.var {
            // The relationship's value: its edges in path order, as AGE's
            // `age_materialize_vle_edges` lists them.
            let oid = self.graph_oid();
            let list = format!(
                "(ARRAY(SELECT ag_catalog._agtype_build_edge(x.id, x.start_id, x.end_id, \
                 ag_catalog._label_name({oid}, x.id), x.properties) FROM unnest({ids}) \
                 WITH ORDINALITY AS u(id, n) JOIN {t} AS x ON x.id = u.id ORDER BY u.n))::agtype"
            );
            self.scope.insert(v.clone(), Binding::Value(Sql::ag(list)));
        }
        Ok(ids)
    }

    /// The property map a walk's edges must match. AGE drops its null
    /// values (as in any map expression) and compares it with an edge's
    /// properties by containment, but by binary equality when both have as
    /// many keys; the two agree only for string, integer and boolean values.
    fn walk_constraint(&mut self, m: &Expr) -> Result<String, D> {
        let Expr::Map(kv) = m else {
            return Err(D::VariableLength);
        };
        for (_, v) in kv {
            if !matches!(
                v,
                Expr::Literal(
                    Literal::String(_) | Literal::Int(_) | Literal::Bool(_) | Literal::Null
                )
            ) {
                return Err(D::VariableLength);
            }
        }
        self.map(m, false)
    }
}
