//! Cypher AST to SQL over AGE's label tables.
//!
//! The emitted expressions are the ones AGE itself generates for the same
//! Cypher (`agtype_access_operator`, `age_*` functions and aggregates,
//! agtype operators), except that property access reads the label table's
//! `properties` column instead of first building the whole vertex or edge,
//! `id(v)` reads the graphid column, WHERE uses cheaper forms where false
//! and NULL agree (`filter`), and an undirected edge is a UNION ALL rather
//! than AGE's OR join. Anything whose AGE translation is not reproduced
//! exactly is declined.

use std::collections::{HashMap, HashSet};

use super::DeclineReason as D;
use super::ast::*;
use super::catalog::{Graph, LabelKind};
use super::literal::{quote_ident, sql_string};
use super::parser::parse;

mod expr;
mod filter;

use expr::{Kind, contains_aggregate};

/// Relationships per pattern compiled at most; edge uniqueness grows
/// quadratically, and AGE's own plan for such a pattern is no better.
pub const MAX_HOPS: usize = 16;

/// Compiles one Cypher statement into a SQL `SELECT` producing `ncols`
/// agtype columns named `c1..cN`. `params` is the SQL text of the
/// parameter map argument (e.g. `$1`), if the call has one.
pub fn compile_cypher(
    cypher: &str,
    graph: &Graph,
    assume_labels: bool,
    params: Option<&str>,
    ncols: usize,
) -> Result<String, D> {
    let st = parse(cypher).map_err(|_| D::Syntax)?;
    if st.parts.len() != 1 {
        return Err(D::Union);
    }
    let clauses = &st.parts[0].clauses;
    let mut matches = Vec::new();
    let mut ret = None;
    for (i, c) in clauses.iter().enumerate() {
        match c {
            Clause::Match(m) if m.optional => return Err(D::OptionalMatch),
            Clause::Match(m) if ret.is_none() => matches.push(m),
            Clause::Return(p) if i == clauses.len() - 1 => ret = Some(p),
            Clause::With(_) => return Err(D::With),
            Clause::Unwind { .. } => return Err(D::Unwind),
            Clause::Call { .. } => return Err(D::Call),
            Clause::Write(_) => return Err(D::Write),
            _ => return Err(D::ClauseShape),
        }
    }
    // Writes anywhere win over other reasons: they must always reach AGE.
    let Some(ret) = ret else {
        return Err(D::ClauseShape);
    };
    let mut cx = Compiler {
        graph,
        assume: assume_labels,
        params,
        vars: HashMap::new(),
        from: Vec::new(),
        conds: Vec::new(),
        n_node: 0,
        n_edge: 0,
        refs: HashMap::new(),
    };
    cx.count_refs(&matches, ret);
    // Each WHERE sees only the variables bound so far, as in AGE.
    for m in &matches {
        cx.match_clause(m)?;
        if let Some(w) = &m.where_ {
            if contains_aggregate(w) {
                return Err(D::AggregateShape);
            }
            let c = cx.filter(w)?;
            cx.conds.push(c.to_bool());
        }
    }
    cx.projection(ret, ncols)
}

#[derive(Debug, Clone)]
enum Binding {
    /// A vertex; `alias` is its table alias, `None` for an anonymous
    /// vertex read only through an edge's endpoint (`id_sql`).
    Node {
        alias: Option<String>,
        id_sql: Option<String>,
        label: Option<String>,
    },
    Edge {
        alias: String,
    },
}

struct Compiler<'a> {
    graph: &'a Graph,
    assume: bool,
    params: Option<&'a str>,
    vars: HashMap<String, Binding>,
    from: Vec<String>,
    conds: Vec<String>,
    n_node: usize,
    n_edge: usize,
    /// How often each variable name occurs (patterns and expressions).
    refs: HashMap<String, usize>,
}

impl Compiler<'_> {
    fn table(&self, label: Option<&str>, kind: LabelKind) -> Result<String, D> {
        let rel = match label {
            Some(l) => self
                .graph
                .label_relation(l, kind, self.assume)
                .ok_or(D::UnknownLabel)?,
            None => match kind {
                LabelKind::Vertex => "_ag_label_vertex".to_string(),
                LabelKind::Edge => "_ag_label_edge".to_string(),
            },
        };
        Ok(format!(
            "{}.{}",
            quote_ident(&self.graph.namespace),
            quote_ident(&rel)
        ))
    }

    fn graph_oid(&self) -> String {
        match self.graph.oid {
            Some(o) => format!("'{o}'::oid"),
            None => format!(
                "(SELECT graphid FROM ag_catalog.ag_graph WHERE name = {})",
                sql_string(&self.graph.name)
            ),
        }
    }

    fn count_refs(&mut self, matches: &[&Match], ret: &Projection) {
        let bump = |refs: &mut HashMap<String, usize>, v: &str| {
            *refs.entry(v.to_string()).or_default() += 1;
        };
        let mut exprs: Vec<&Expr> = Vec::new();
        for m in matches {
            for p in &m.patterns {
                let nodes = std::iter::once(&p.start).chain(p.chain.iter().map(|(_, n)| n));
                for n in nodes {
                    if let Some(v) = &n.var {
                        bump(&mut self.refs, v);
                    }
                }
            }
            if let Some(w) = &m.where_ {
                exprs.push(w);
            }
        }
        for it in &ret.items {
            exprs.push(&it.expr);
        }
        for s in &ret.order_by {
            exprs.push(&s.expr);
        }
        for e in exprs {
            e.walk(&mut |x| {
                if let Expr::Var(v) = x {
                    *self.refs.entry(v.clone()).or_default() += 1;
                }
            });
        }
    }

    fn match_clause(&mut self, m: &Match) -> Result<(), D> {
        // The label of each node variable, from the occurrence that binds
        // it: a later occurrence may repeat it or leave it out, and AGE
        // rejects any other label ("multiple labels for variable").
        let mut labels: HashMap<&str, Option<&str>> = HashMap::new();
        for p in &m.patterns {
            if p.path_var.is_some() {
                return Err(D::PathVariable);
            }
            if p.chain.len() > MAX_HOPS {
                return Err(D::TooLarge);
            }
            let nodes = std::iter::once(&p.start).chain(p.chain.iter().map(|(_, n)| n));
            for n in nodes {
                if n.labels.len() > 1 {
                    return Err(D::MultipleLabels);
                }
                let Some(v) = &n.var else { continue };
                let bound = match self.vars.get(v) {
                    Some(Binding::Node { label, .. }) => Some(label.as_deref()),
                    _ => labels.get(v.as_str()).copied(),
                };
                match (bound, n.labels.first()) {
                    (None, l) => {
                        labels.insert(v, l.map(String::as_str));
                    }
                    (Some(b), Some(l)) if b != Some(l.as_str()) => {
                        return Err(D::MultipleLabels);
                    }
                    (Some(_), _) => {}
                }
            }
        }
        for p in &m.patterns {
            let mut edges: Vec<(String, Option<String>)> = Vec::new();
            let lone = p.chain.is_empty();
            let mut left = self.node(&p.start, &labels, lone)?;
            for (rel, node) in &p.chain {
                let right = self.node(node, &labels, false)?;
                let (alias, label) = self.rel(rel, &left, &right)?;
                edges.push((alias, label));
                left = right;
            }
            // AGE never binds one edge twice within one path (comma-separated
            // patterns may share edges); edges of different labels cannot
            // collide, so only overlapping ones are compared.
            for i in 0..edges.len() {
                for j in i + 1..edges.len() {
                    let (a, la) = &edges[i];
                    let (b, lb) = &edges[j];
                    if la.is_none() || lb.is_none() || la == lb {
                        self.conds.push(format!("{a}.id <> {b}.id"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Binds or re-uses a node; returns the variable name it is bound to
    /// (anonymous nodes get a private name). A `lone` node (a pattern
    /// without relationships) ranges over its vertices even when nothing
    /// reads it; an edge's endpoint is implied by the edge.
    fn node(
        &mut self,
        n: &NodePattern,
        labels: &HashMap<&str, Option<&str>>,
        lone: bool,
    ) -> Result<String, D> {
        let label = match (&n.var, n.labels.first()) {
            (Some(v), _) => labels
                .get(v.as_str())
                .copied()
                .flatten()
                .map(str::to_string),
            (None, l) => l.cloned(),
        };
        let name = match &n.var {
            Some(v) => {
                if v.starts_with("_age") || v.contains(' ') {
                    return Err(D::UnsupportedExpr);
                }
                v.clone()
            }
            None => format!(" anon{}", self.n_node),
        };
        match self.vars.get(&name) {
            Some(Binding::Edge { .. }) => return Err(D::VariableReuse),
            Some(Binding::Node { alias, .. }) => {
                // Named nodes seen twice always have a table (see `refs`).
                let a = alias.clone().ok_or(D::VariableReuse)?;
                if let Some(props) = &n.props {
                    let c = self.props_filter(&a, props)?;
                    self.conds.push(c);
                }
                return Ok(name);
            }
            None => {}
        }
        let referenced = n
            .var
            .as_ref()
            .is_some_and(|v| self.refs.get(v).copied().unwrap_or(0) > 1);
        let needs_table = lone || label.is_some() || n.props.is_some() || referenced;
        let alias = if needs_table {
            let a = format!("_n{}", self.n_node);
            let t = self.table(label.as_deref(), LabelKind::Vertex)?;
            self.from.push(format!("{t} AS {a}"));
            if let Some(props) = &n.props {
                let c = self.props_filter(&a, props)?;
                self.conds.push(c);
            }
            Some(a)
        } else {
            None
        };
        self.n_node += 1;
        let id_sql = alias.as_ref().map(|a| format!("{a}.id"));
        self.vars.insert(
            name.clone(),
            Binding::Node {
                alias,
                id_sql,
                label,
            },
        );
        Ok(name)
    }

    /// `alias.properties @> map`, AGE's inline property constraint.
    fn props_filter(&mut self, alias: &str, props: &Expr) -> Result<String, D> {
        let m = match props {
            Expr::Map(_) => self.map(props, true)?,
            _ => return Err(D::Params),
        };
        Ok(format!("{alias}.properties @> {m}"))
    }

    /// Ties an endpoint column to a node: equality with its id, or the
    /// node's identity when it has no table yet.
    fn bind_endpoint(&mut self, node: &str, col: String) {
        if let Some(Binding::Node { id_sql, .. }) = self.vars.get_mut(node) {
            match id_sql {
                Some(id) => {
                    let c = format!("{col} = {id}");
                    self.conds.push(c);
                }
                None => *id_sql = Some(col),
            }
        }
    }

    fn rel(
        &mut self,
        r: &RelPattern,
        left: &str,
        right: &str,
    ) -> Result<(String, Option<String>), D> {
        if r.var_length.is_some() {
            return Err(D::VariableLength);
        }
        if r.types.len() > 1 {
            return Err(D::MultipleRelTypes);
        }
        let label = r.types.first().cloned();
        if let Some(v) = &r.var
            && self.vars.contains_key(v)
        {
            return Err(D::VariableReuse);
        }
        let a = format!("_e{}", self.n_edge);
        self.n_edge += 1;
        let t = self.table(label.as_deref(), LabelKind::Edge)?;
        let (src, dst) = match r.dir {
            Direction::Right => ("start_id", "end_id"),
            Direction::Left => ("end_id", "start_id"),
            Direction::Both => {
                // Each edge once per orientation, a self-loop once: the same
                // rows as AGE's OR join, but index-friendly. The self-loop
                // test stays outside the arms: PostgreSQL only flattens a
                // UNION ALL whose arms have no WHERE, and only a flattened
                // one gets index scans on the join keys.
                self.from.push(format!(
                    "(SELECT id, start_id, end_id, properties, start_id AS _s, end_id AS _o, \
                     false AS _r FROM {t} UNION ALL SELECT id, start_id, end_id, properties, \
                     end_id, start_id, true FROM {t}) AS {a}"
                ));
                self.conds
                    .push(format!("NOT ({a}._r AND {a}.start_id = {a}.end_id)"));
                ("_s", "_o")
            }
        };
        if r.dir != Direction::Both {
            self.from.push(format!("{t} AS {a}"));
        }
        self.bind_endpoint(left, format!("{a}.{src}"));
        self.bind_endpoint(right, format!("{a}.{dst}"));
        if let Some(props) = &r.props {
            let c = self.props_filter(&a, props)?;
            self.conds.push(c);
        }
        if let Some(v) = &r.var {
            self.vars
                .insert(v.clone(), Binding::Edge { alias: a.clone() });
        }
        Ok((a, label))
    }

    fn projection(&mut self, p: &Projection, ncols: usize) -> Result<String, D> {
        if p.star {
            return Err(D::ReturnStar);
        }
        if p.items.len() != ncols {
            return Err(D::ColumnMismatch);
        }
        let mut items = Vec::new();
        let mut group = Vec::new();
        let mut has_agg = false;
        for it in &p.items {
            let sql = self.expr_top(&it.expr)?.to_agtype();
            if contains_aggregate(&it.expr) {
                has_agg = true;
            } else {
                group.push(sql.clone());
            }
            items.push(sql);
        }
        let aliases: HashSet<&str> = p.items.iter().filter_map(|i| i.alias.as_deref()).collect();
        let mut order = Vec::new();
        for s in &p.order_by {
            let mut alias_ref = false;
            s.expr.walk(&mut |x| {
                if let Expr::Var(v) = x
                    && aliases.contains(v.as_str())
                {
                    alias_ref = true;
                }
            });
            if alias_ref {
                return Err(D::OrderByAlias);
            }
            let e = self.expr_top(&s.expr)?;
            if e.kind == Kind::Bool {
                return Err(D::OrderByShape);
            }
            // With DISTINCT or grouping, SQL and AGE only agree when the
            // sort key is one of the returned values.
            if (p.distinct || has_agg) && !items.contains(&e.text) {
                return Err(D::OrderByShape);
            }
            order.push(format!(
                "{}{}",
                e.text,
                if s.descending { " DESC" } else { "" }
            ));
        }
        let skip = p.skip.as_ref().map(int_literal).transpose()?;
        let limit = p.limit.as_ref().map(int_literal).transpose()?;

        let mut sql = String::from("SELECT ");
        if p.distinct {
            sql.push_str("DISTINCT ");
        }
        let cols: Vec<String> = items
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{s} AS c{}", i + 1))
            .collect();
        sql.push_str(&cols.join(", "));
        if !self.from.is_empty() {
            sql.push_str(" FROM ");
            sql.push_str(&self.from.join(", "));
        }
        if !self.conds.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&self.conds.join(" AND "));
        }
        if has_agg && !group.is_empty() {
            sql.push_str(" GROUP BY ");
            sql.push_str(&group.join(", "));
        }
        if !order.is_empty() {
            sql.push_str(" ORDER BY ");
            sql.push_str(&order.join(", "));
        }
        if let Some(s) = skip {
            sql.push_str(&format!(" OFFSET {s}"));
        }
        if let Some(l) = limit {
            sql.push_str(&format!(" LIMIT {l}"));
        }
        Ok(sql)
    }
}

/// SKIP/LIMIT must be integer literals (a negative one reaches PostgreSQL,
/// which raises the same error AGE does).
fn int_literal(e: &Expr) -> Result<i64, D> {
    match e {
        Expr::Literal(Literal::Int(v)) => Ok(*v),
        Expr::Unary(UnaryOp::Neg, x) => match **x {
            Expr::Literal(Literal::Int(v)) => Ok(-v),
            _ => Err(D::SkipLimitExpr),
        },
        _ => Err(D::SkipLimitExpr),
    }
}
