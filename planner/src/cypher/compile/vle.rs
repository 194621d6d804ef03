//! Variable-length relationships (`-[:R*1..3]->`): every walk along
//! distinct edges whose length is within the bounds is one row, as AGE's
//! `age_vle` finds them: a self-loop is one step in any direction, an
//! undirected step follows an edge either way, and the nodes at both ends
//! are the walk's first and last vertices.
//!
//! Where the walk starts is chosen from the pattern ([`Walk`]): from an end
//! whose rows are few (an inline property map, a WHERE that names it, a
//! binding from an earlier clause), as a lateral subquery run per row of
//! that end; with no such end, over the whole edge table at once, which
//! PostgreSQL joins with hashes. A short walk (up to [`MAX_UNROLLED`]
//! steps) is a UNION ALL of one join chain per length; a longer one, a
//! recursive CTE from its start.

use super::super::DeclineReason as D;
use super::super::ast::*;
use super::super::catalog::LabelKind;
use super::Compiler;
use super::scope::Binding;
use super::stage::Item;
use super::typed::Sql;

/// Longest bounded relationship compiled; beyond it the number of paths
/// explodes in AGE as here, and AGE's in-memory walk is no slower.
pub const MAX_VLE_HOPS: i64 = 10;

/// Longest walk written out as joins: its last arm joins this many edge
/// tables, and the distinct-edge conditions grow with its square.
pub const MAX_UNROLLED: i64 = 4;

/// Where a walk starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Walk {
    /// From the left node, per row of it.
    FromLeft,
    /// From the right node, per row of it, against the arrow.
    FromRight,
    /// From every edge at once, joined to both ends afterwards.
    Everywhere,
}

/// One step of a walk: the edge table (or both orientations of it) and,
/// for alias `x`, the condition that the step leaves from `from` and the
/// vertex it arrives at.
struct Step {
    table: String,
    dir: Direction,
    filter: Option<String>,
}

impl Step {
    fn leaves_cond(&self, x: &str, from: &str) -> String {
        match self.dir {
            Direction::Right => format!("{x}.start_id = {from}"),
            Direction::Left => format!("{x}.end_id = {from}"),
            // Both orientations; a self-loop once (see the fixed-length case).
            Direction::Both => {
                format!("{x}._s = {from} AND NOT ({x}._rev AND {x}.start_id = {x}.end_id)")
            }
        }
    }

    /// The vertex a step starting a walk leaves from.
    fn src(&self, x: &str) -> String {
        match self.dir {
            Direction::Right => format!("{x}.start_id"),
            Direction::Left => format!("{x}.end_id"),
            Direction::Both => format!("{x}._s"),
        }
    }

    /// For a walk's first step, the condition `leaves_cond` holds apart from
    /// the vertex itself: undirected, a self-loop is taken once.
    fn orientation(&self, x: &str) -> Option<String> {
        match self.dir {
            Direction::Both => Some(format!("NOT ({x}._rev AND {x}.start_id = {x}.end_id)")),
            _ => None,
        }
    }

    fn filter_cond(&self, x: &str) -> Option<String> {
        self.filter
            .as_ref()
            .map(|m| format!("{x}.properties @> {m}"))
    }

    fn next(&self, x: &str) -> String {
        match self.dir {
            Direction::Right => format!("{x}.end_id"),
            Direction::Left => format!("{x}.start_id"),
            Direction::Both => format!("{x}._o"),
        }
    }

    /// The FROM item for alias `x`: undirected, the index-friendly arms of
    /// a fixed-length relationship.
    fn item(&self, x: &str) -> String {
        let t = &self.table;
        match self.dir {
            Direction::Both => format!(
                "(SELECT id, start_id, end_id, properties, start_id AS _s, end_id AS _o, \
                 false AS _rev FROM {t} UNION ALL SELECT id, start_id, end_id, properties, \
                 end_id, start_id, true FROM {t}) AS {x}"
            ),
            _ => format!("{t} AS {x}"),
        }
    }

    fn filter(&self, x: &str) -> String {
        match &self.filter {
            Some(m) => format!(" AND {x}.properties @> {m}"),
            None => String::new(),
        }
    }
}

impl Compiler<'_> {
    /// Binds a variable-length relationship between `left` and `right`
    /// (both bound; the end it starts from has an id); returns the SQL
    /// array of the walk's edge ids. `per_row_wins`: a walk per row starts
    /// from one vertex towards an open end (else `D::WalkPerRow`).
    pub(super) fn var_length_rel(
        &mut self,
        r: &RelPattern,
        left: &str,
        right: &str,
        walk: Walk,
        per_row_wins: bool,
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
        let walk = match walk {
            Walk::Everywhere if hi > MAX_UNROLLED => Walk::FromLeft,
            w => w,
        };
        // Walks per row that AGE's own walk finishes sooner (measured 5x and
        // 8x): under exists(), run once per outer row, and back to the node
        // they started from, which AGE walks knowing both ends.
        if walk != Walk::Everywhere && (self.in_exists || left == right) {
            return Err(D::VariableLength);
        }
        if walk != Walk::Everywhere && !per_row_wins {
            return Err(D::WalkPerRow);
        }
        let (from, to) = match walk {
            Walk::FromRight => (right, left),
            _ => (left, right),
        };
        let start = match self.scope.get(from) {
            Some(Binding::Node(e)) => e.id.clone().ok_or(D::VariableLength)?,
            _ => return Err(D::VariableLength),
        };
        let filter = match &r.props {
            Some(m) => Some(self.walk_constraint(m)?),
            None => None,
        };
        let dir = match (walk, r.dir) {
            (Walk::FromRight, Direction::Right) => Direction::Left,
            (Walk::FromRight, Direction::Left) => Direction::Right,
            (_, d) => d,
        };
        let step = Step {
            table: self.table(r.types.first().map(String::as_str), LabelKind::Edge)?,
            dir,
            filter,
        };
        // The relationship's value, when read: its edges in path order.
        let read = r
            .var
            .as_ref()
            .is_some_and(|v| self.refs.get(v).copied().unwrap_or(0) > 0);
        let reversed = walk == Walk::FromRight;
        let a = self.fresh("_v");
        let item = match walk {
            Walk::Everywhere => {
                self.stage.conds.push(format!("{a}.src = {start}"));
                let arms = self.unrolled(&step, None, lo, hi, read, &a, false)?;
                Item::Table(format!("({arms}) AS {a}"))
            }
            _ if hi <= MAX_UNROLLED => {
                let arms = self.unrolled(&step, Some(&start), lo, hi, read, &a, reversed)?;
                Item::Lateral(format!("({arms}) AS {a}"))
            }
            _ => {
                let cte = self.recursive(&step, &start, lo, hi, read, reversed);
                Item::Lateral(format!("({cte}) AS {a}"))
            }
        };
        self.stage.items.push(item);
        self.bind_endpoint(to, format!("{a}.vid"), super::scope::Tie::Walk);
        if let (Some(v), true) = (&r.var, read) {
            let list = format!("({a}.es)::agtype");
            self.bind(v, Binding::Value(Sql::ag(list)));
        }
        Ok(format!("{a}.ids"))
    }

    /// One arm per length: `vid` the last vertex, `ids` the edge ids,
    /// `es` (when `read`) the edges as AGE builds them, in path order
    /// (`reversed`: the walk runs against it). From `start` (a lateral
    /// reference), or from anywhere (`None`), adding `src`, the first
    /// vertex; then the zero-length arm ranges over the vertices.
    #[allow(clippy::too_many_arguments)]
    fn unrolled(
        &self,
        step: &Step,
        start: Option<&str>,
        lo: i64,
        hi: i64,
        read: bool,
        a: &str,
        reversed: bool,
    ) -> Result<String, D> {
        let mut arms = Vec::new();
        for k in lo..=hi {
            let xs: Vec<String> = (1..=k).map(|i| format!("{a}_{k}_{i}")).collect();
            let mut conds = Vec::new();
            let (src, mut at) = match (start, xs.first()) {
                (Some(s), _) => (None, s.to_string()),
                (None, Some(x)) => (Some(step.src(x)), step.src(x)),
                (None, None) => {
                    let v = format!("{a}_0.id");
                    (Some(v.clone()), v)
                }
            };
            for (i, x) in xs.iter().enumerate() {
                if i == 0 && start.is_none() {
                    conds.extend(step.orientation(x));
                } else {
                    conds.push(step.leaves_cond(x, &at));
                }
                conds.extend(step.filter_cond(x));
                for y in &xs[..i] {
                    conds.push(format!("{x}.id <> {y}.id"));
                }
                at = step.next(x);
            }
            let ids: Vec<String> = xs.iter().map(|x| format!("{x}.id")).collect();
            let mut cols: Vec<String> = src.into_iter().map(|s| format!("{s} AS src")).collect();
            cols.push(format!("{at} AS vid"));
            cols.push(format!(
                "ARRAY[{}]::ag_catalog.graphid[] AS ids",
                ids.join(", ")
            ));
            if read {
                let mut es: Vec<String> = xs.iter().map(|x| self.built_edge(x)).collect();
                if reversed {
                    es.reverse();
                }
                cols.push(format!(
                    "ARRAY[{}]::ag_catalog.agtype[] AS es",
                    es.join(", ")
                ));
            }
            let items: Vec<String> = match (start, xs.is_empty()) {
                (Some(_), true) => Vec::new(),
                (None, true) => vec![format!("{} AS {a}_0", self.table(None, LabelKind::Vertex)?)],
                _ => xs.iter().map(|x| step.item(x)).collect(),
            };
            let mut arm = format!("SELECT {}", cols.join(", "));
            if !items.is_empty() {
                arm.push_str(&format!(" FROM {}", items.join(", ")));
            }
            if !conds.is_empty() {
                arm.push_str(&format!(" WHERE {}", conds.join(" AND ")));
            }
            arms.push(arm);
        }
        Ok(arms.join(" UNION ALL "))
    }

    /// A walk of any bounded length from `start`, one step per iteration.
    fn recursive(
        &self,
        step: &Step,
        start: &str,
        lo: i64,
        hi: i64,
        read: bool,
        reversed: bool,
    ) -> String {
        let edge = self.built_edge("e");
        let (es0, es1, es) = match (read, reversed) {
            (false, _) => ("", String::new(), ""),
            (true, false) => (
                ", ARRAY[]::ag_catalog.agtype[] AS es",
                format!(", _r.es || {edge}"),
                ", es",
            ),
            (true, true) => (
                ", ARRAY[]::ag_catalog.agtype[] AS es",
                format!(", {edge} || _r.es"),
                ", es",
            ),
        };
        format!(
            "WITH RECURSIVE _r AS (SELECT {start} AS vid, ARRAY[]::ag_catalog.graphid[] AS ids{es0} \
             UNION ALL SELECT {}, _r.ids || e.id{es1} FROM _r, {} WHERE {}{} \
             AND cardinality(_r.ids) < {hi} AND e.id <> ALL(_r.ids)) \
             SELECT vid, ids{es} FROM _r WHERE cardinality(ids) >= {lo}",
            step.next("e"),
            step.item("e"),
            step.leaves_cond("e", "_r.vid"),
            step.filter("e"),
        )
    }

    fn built_edge(&self, x: &str) -> String {
        let oid = self.graph_oid();
        format!(
            "ag_catalog._agtype_build_edge({x}.id, {x}.start_id, {x}.end_id, \
             ag_catalog._label_name({oid}, {x}.id), {x}.properties)"
        )
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
