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
//!
//! Clauses build one SELECT ([`stage::Stage`]) until a WITH needs a
//! subquery of its own (aggregation, DISTINCT, ORDER BY, SKIP, LIMIT);
//! OPTIONAL MATCH is a left-joined lateral subquery, UNWIND a lateral
//! `age_unnest`, UNION a SQL UNION of the parts.

use std::collections::{HashMap, HashSet};

use super::DeclineReason as D;
use super::ast::*;
use super::catalog::{Graph, LabelKind};
use super::literal::{quote_ident, sql_string};
use super::parser::parse;

mod aggregate;
mod expr;
mod filter;
mod functions;
mod pattern;
mod project;
mod scope;
mod stage;
mod typed;
mod vle;

use scope::Binding;
use stage::{Item, Stage};
use typed::Sql;

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
    // Writes anywhere win over other reasons: they must always reach AGE.
    for c in st.parts.iter().flat_map(|p| &p.clauses) {
        match c {
            Clause::Write(_) => return Err(D::Write),
            Clause::Call { .. } => return Err(D::Call),
            _ => {}
        }
    }
    if !st
        .parts
        .iter()
        .flat_map(|p| &p.clauses)
        .any(|c| matches!(c, Clause::Match(_)))
    {
        return Err(D::NoGraphRead);
    }
    let refs = count_refs(&st);
    let mut sql = String::new();
    let mut params_used = false;
    let mut union = Union::default();
    for (i, part) in st.parts.iter().enumerate() {
        let mut cx = Compiler {
            graph,
            assume: assume_labels,
            params,
            scope: HashMap::new(),
            order: Vec::new(),
            stage: Stage::default(),
            n_node: 0,
            n_edge: 0,
            n_other: 0,
            refs: &refs,
            params_used: false,
            filtered: HashSet::new(),
            pinned: HashSet::new(),
            in_exists: false,
            comprehension_vars: Vec::new(),
            rows_in_plan_order: false,
            projecting: false,
        };
        let part_sql = cx.single(part, ncols)?;
        params_used |= cx.params_used;
        if st.parts.len() == 1 {
            sql = part_sql;
        } else {
            // Each part keeps its own ORDER BY, SKIP and LIMIT, as in AGE.
            let all = i > 0 && st.union_all[i - 1];
            union.add(format!("({part_sql})"), i > 0 && !all, ncols);
        }
    }
    if st.parts.len() > 1 {
        sql = union.finish(ncols);
    }
    // The parameter argument stays part of the statement even when the
    // Cypher text reads none, so that its type is still known (agtype) and
    // a client binding it gets no "could not determine data type".
    if let (Some(p), false) = (params, params_used) {
        sql = format!("WITH _params AS (SELECT ({p})::agtype) {sql}");
    }
    Ok(sql)
}

/// The parts of a UNION, grouped as PostgreSQL plans AGE's tree of set
/// operations: a UNION takes in every arm before it that no UNION ALL has
/// closed, and removes duplicates by sorting (AGE marks its UNION's
/// grouping as not hashable), so its rows come in agtype order. A hashed
/// SQL UNION would give another order, and could keep two rows that
/// agtype's equality calls equal but that hash apart.
#[derive(Default)]
struct Union {
    /// Arms of the open group, joined with UNION ALL.
    arms: Vec<String>,
    /// The open group ends in a UNION: it is sorted and deduplicated.
    distinct: bool,
    n: usize,
}

impl Union {
    /// Adds an arm after a UNION (`distinct`) or a UNION ALL.
    fn add(&mut self, arm: String, distinct: bool, ncols: usize) {
        if !distinct && self.distinct {
            let closed = self.finish(ncols);
            self.arms.push(format!("({closed})"));
        }
        self.distinct |= distinct;
        self.arms.push(arm);
    }

    /// The open group as SQL; the next arm starts a new one.
    fn finish(&mut self, ncols: usize) -> String {
        let arms = std::mem::take(&mut self.arms).join(" UNION ALL ");
        if !std::mem::take(&mut self.distinct) {
            return arms;
        }
        // DISTINCT ON is always a sort and a unique in PostgreSQL, never a
        // hash: AGE's plan for its UNION, ascending with nulls last.
        self.n += 1;
        let cols: Vec<String> = (1..=ncols).map(|i| format!("c{i}")).collect();
        let cols = cols.join(", ");
        format!(
            "SELECT DISTINCT ON ({cols}) {cols} FROM ({arms}) AS _union{} ORDER BY {cols}",
            self.n
        )
    }
}

pub(super) struct Compiler<'a> {
    graph: &'a Graph,
    assume: bool,
    params: Option<&'a str>,
    /// The variables visible to the next clause.
    scope: HashMap<String, Binding>,
    /// Their names (private ones left out) in the order they were bound,
    /// which is the order of `RETURN *`.
    order: Vec<String>,
    /// The SELECT being built.
    stage: Stage,
    n_node: usize,
    n_edge: usize,
    /// Aliases of subqueries and functions, and private names.
    n_other: usize,
    /// How often each variable name occurs in the statement (node
    /// patterns and expressions); a node read once needs no table.
    refs: &'a HashMap<String, usize>,
    /// Whether the SQL reads the parameter argument.
    params_used: bool,
    /// Variables the WHERE of the MATCH being compiled names.
    filtered: HashSet<String>,
    /// Of those, the ones it pins by equality (`v.key = 1`, `id(v) = $p`).
    pinned: HashSet<String>,
    /// Compiling the pattern of an `exists()`.
    in_exists: bool,
    /// Variables of the list comprehensions being compiled, innermost
    /// last.
    comprehension_vars: Vec<String>,
    /// The rows come out of a grouping or DISTINCT of an earlier WITH, in
    /// the order its plan gives them (AGE's is a hash aggregate's).
    rows_in_plan_order: bool,
    /// Compiling the items and ORDER BY of a RETURN or of a WITH that
    /// closes its SELECT (see [`Compiler::entity_props`]).
    projecting: bool,
}

impl Compiler<'_> {
    /// Clauses in order; the last one must be RETURN.
    fn single(&mut self, q: &SingleQuery, ncols: usize) -> Result<String, D> {
        let Some((Clause::Return(ret), body)) = q.clauses.split_last() else {
            return Err(D::ClauseShape);
        };
        for (i, c) in body.iter().enumerate() {
            match c {
                // AGE: "MATCH cannot follow OPTIONAL MATCH".
                Clause::Match(m)
                    if m.optional
                        && matches!(q.clauses.get(i + 1), Some(Clause::Match(n)) if !n.optional) =>
                {
                    return Err(D::ClauseShape);
                }
                // With nothing before it, AGE reads OPTIONAL MATCH as MATCH.
                Clause::Match(m) if m.optional && i > 0 => self.optional_match(m)?,
                Clause::Match(m) => self.match_clause(m)?,
                Clause::Unwind { expr, alias } => self.unwind(expr, alias)?,
                Clause::With(p) => self.with(p)?,
                _ => return Err(D::ClauseShape),
            }
        }
        self.ret(ret, ncols)
    }

    /// UNWIND: one row per element, as AGE's `age_unnest` yields them.
    fn unwind(&mut self, e: &Expr, alias: &str) -> Result<(), D> {
        if self.scope.contains_key(alias) {
            return Err(D::VariableReuse);
        }
        if aggregate::contains_aggregate(e) {
            return Err(D::AggregateShape);
        }
        let list = self.expr(e)?.agtype_only()?;
        let a = self.fresh("_u");
        self.stage.items.push(Item::Lateral(format!(
            "ag_catalog.age_unnest({list}) AS {a}(v)"
        )));
        self.bind(alias, Binding::Value(Sql::ag(format!("{a}.v"))));
        Ok(())
    }

    /// Binds (or rebinds) a name in scope.
    fn bind(&mut self, name: &str, b: Binding) {
        if self.scope.insert(name.to_string(), b).is_none() && !scope::is_private(name) {
            self.order.push(name.to_string());
        }
    }

    /// A new alias with `prefix`.
    fn fresh(&mut self, prefix: &str) -> String {
        self.n_other += 1;
        format!("{prefix}{}", self.n_other)
    }

    /// A name for an anonymous pattern element; see [`scope::is_private`].
    fn private_name(&mut self) -> String {
        self.n_other += 1;
        format!(" anon{}", self.n_other)
    }

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
}

/// How often each name occurs as a node variable in a pattern or as a
/// variable in an expression, over the whole statement.
fn count_refs(st: &Statement) -> HashMap<String, usize> {
    let mut refs = HashMap::new();
    let mut exprs: Vec<&Expr> = Vec::new();
    let mut patterns: Vec<&PatternPart> = Vec::new();
    // `WITH *` and `RETURN *` read every variable bound before them.
    let mut star = false;
    for c in st.parts.iter().flat_map(|p| &p.clauses) {
        match c {
            Clause::Match(m) => {
                patterns.extend(&m.patterns);
                exprs.extend(&m.where_);
            }
            Clause::Unwind { expr, .. } => exprs.push(expr),
            Clause::With(p) | Clause::Return(p) => {
                star |= p.star;
                exprs.extend(p.items.iter().map(|i| &i.expr));
                exprs.extend(p.order_by.iter().map(|s| &s.expr));
                exprs.extend(&p.where_);
                exprs.extend(&p.skip);
                exprs.extend(&p.limit);
            }
            _ => {}
        }
    }
    // Patterns inside expressions (`exists()`) count as well.
    let mut k = 0;
    while k < exprs.len() || !patterns.is_empty() {
        if let Some(p) = patterns.pop() {
            let nodes = std::iter::once(&p.start).chain(p.chain.iter().map(|(_, n)| n));
            for n in nodes {
                if let Some(v) = &n.var {
                    *refs.entry(v.clone()).or_default() += 1 + star as usize;
                }
                exprs.extend(&n.props);
            }
            for (r, _) in &p.chain {
                if let (Some(v), true) = (&r.var, star) {
                    *refs.entry(v.clone()).or_default() += 1;
                }
                exprs.extend(&r.props);
            }
            if let (Some(v), true) = (&p.path_var, star) {
                *refs.entry(v.clone()).or_default() += 1;
            }
            continue;
        }
        exprs[k].walk(&mut |x| match x {
            Expr::Var(v) => *refs.entry(v.clone()).or_default() += 1,
            Expr::ExistsPattern(p) | Expr::PatternPredicate(p) => patterns.push(p),
            _ => {}
        });
        k += 1;
    }
    refs
}
