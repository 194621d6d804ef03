//! Variable-length relationships (`-[:R*1..3]->`): every walk from the
//! left node along distinct edges whose length is within the bounds is one
//! row, as AGE's `age_vle` finds them: a self-loop is one step in any
//! direction, an undirected step follows an edge either way, and the right
//! node is the walk's last vertex. A short walk (up to [`MAX_UNROLLED`]
//! steps) is a UNION ALL with one arm per length, each a chain of joins
//! over the edge table joined to both end nodes: PostgreSQL plans it like a
//! fixed-length pattern, from whichever end is more selective. A longer
//! walk is a recursive CTE in a lateral subquery that starts from the left
//! node.

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

/// Longest walk written out as joins: its last arm joins this many edge
/// tables, and the distinct-edge conditions grow with its square.
pub const MAX_UNROLLED: i64 = 4;

/// One step of a walk: the edge table (or both orientations of it) and,
/// for alias `x`, the condition that the step leaves from `from` and the
/// vertex it arrives at.
struct Step {
    table: String,
    dir: Direction,
    filter: Option<String>,
}

impl Step {
    fn from_cond(&self, x: &str, from: &str) -> String {
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

    /// For a walk's first step, the condition `from_cond` holds apart from
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
    /// Binds a variable-length relationship from `left` (bound, with an
    /// id) to `right`; returns the SQL array of the walk's edge ids.
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
        let filter = match &r.props {
            Some(m) => Some(self.walk_constraint(m)?),
            None => None,
        };
        let step = Step {
            table: self.table(r.types.first().map(String::as_str), LabelKind::Edge)?,
            dir: r.dir,
            filter,
        };
        // The relationship's value, when read: its edges in walk order.
        let read = r
            .var
            .as_ref()
            .is_some_and(|v| self.refs.get(v).copied().unwrap_or(0) > 0);
        let a = self.fresh("_v");
        if hi <= MAX_UNROLLED {
            let walk = self.unrolled(&step, lo, hi, read, &a)?;
            self.stage
                .items
                .push(Item::Table(format!("({walk}) AS {a}")));
            self.stage.conds.push(format!("{a}.src = {start}"));
        } else {
            let walk = self.recursive(&step, &start, lo, hi, read);
            self.stage
                .items
                .push(Item::Lateral(format!("({walk}) AS {a}")));
        }
        self.bind_endpoint(right, format!("{a}.vid"));
        if let (Some(v), true) = (&r.var, read) {
            let list = format!("({a}.es)::agtype");
            self.bind(v, Binding::Value(Sql::ag(list)));
        }
        Ok(format!("{a}.ids"))
    }

    /// One arm per length, over every start: `src` the first vertex, `vid`
    /// the last, `ids` the edge ids in order, `es` (when `read`) the edges
    /// as AGE builds them. The zero-length arm ranges over the vertices.
    fn unrolled(&self, step: &Step, lo: i64, hi: i64, read: bool, a: &str) -> Result<String, D> {
        let mut arms = Vec::new();
        for k in lo..=hi {
            let xs: Vec<String> = (1..=k).map(|i| format!("{a}_{k}_{i}")).collect();
            let mut conds = Vec::new();
            let (src, mut at) = match xs.first() {
                Some(x) => (step.src(x), step.next(x)),
                None => {
                    let v = format!("{a}_0");
                    (format!("{v}.id"), format!("{v}.id"))
                }
            };
            for (i, x) in xs.iter().enumerate() {
                if i == 0 {
                    conds.extend(step.orientation(x));
                } else {
                    conds.push(step.from_cond(x, &at));
                }
                conds.extend(step.filter_cond(x));
                for y in &xs[..i] {
                    conds.push(format!("{x}.id <> {y}.id"));
                }
                at = step.next(x);
            }
            let ids: Vec<String> = xs.iter().map(|x| format!("{x}.id")).collect();
            let mut cols = vec![
                format!("{src} AS src"),
                format!("{at} AS vid"),
                format!("ARRAY[{}]::ag_catalog.graphid[] AS ids", ids.join(", ")),
            ];
            if read {
                let es: Vec<String> = xs.iter().map(|x| self.built_edge(x)).collect();
                cols.push(format!(
                    "ARRAY[{}]::ag_catalog.agtype[] AS es",
                    es.join(", ")
                ));
            }
            let items: Vec<String> = if xs.is_empty() {
                vec![format!("{} AS {a}_0", self.table(None, LabelKind::Vertex)?)]
            } else {
                xs.iter().map(|x| step.item(x)).collect()
            };
            let mut arm = format!("SELECT {} FROM {}", cols.join(", "), items.join(", "));
            if !conds.is_empty() {
                arm.push_str(&format!(" WHERE {}", conds.join(" AND ")));
            }
            arms.push(arm);
        }
        Ok(arms.join(" UNION ALL "))
    }

    /// A walk of any bounded length, one step per iteration.
    fn recursive(&self, step: &Step, start: &str, lo: i64, hi: i64, read: bool) -> String {
        let (es0, es1, es) = if read {
            (
                ", ARRAY[]::ag_catalog.agtype[] AS es",
                format!(", _r.es || {}", self.built_edge("e")),
                ", es",
            )
        } else {
            ("", String::new(), "")
        };
        format!(
            "WITH RECURSIVE _r AS (SELECT {start} AS vid, ARRAY[]::ag_catalog.graphid[] AS ids{es0} \
             UNION ALL SELECT {}, _r.ids || e.id{es1} FROM _r, {} WHERE {}{} \
             AND cardinality(_r.ids) < {hi} AND e.id <> ALL(_r.ids)) \
             SELECT vid, ids{es} FROM _r WHERE cardinality(ids) >= {lo}",
            step.next("e"),
            step.item("e"),
            step.from_cond("e", "_r.vid"),
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
