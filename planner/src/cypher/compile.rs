//! Cypher AST to SQL over AGE's label tables.
//!
//! The emitted expressions are the ones AGE itself generates for the same
//! Cypher (`agtype_access_operator`, `age_*` functions and aggregates,
//! agtype operators), except that property access reads the label table's
//! `properties` column instead of first building the whole vertex or edge.
//! Anything whose AGE translation is not reproduced exactly is declined.

use std::collections::{HashMap, HashSet};

use super::DeclineReason as D;
use super::ast::*;
use super::catalog::{Graph, LabelKind};
use super::literal::{agtype_const, quote_ident, sql_string};
use super::parser::parse;

/// Words that AGE's grammar treats as keywords; as property or map keys
/// they behave differently from openCypher, so such keys are declined.
const KEYWORDS: &[&str] = &[
    "all",
    "analyze",
    "and",
    "as",
    "asc",
    "ascending",
    "by",
    "call",
    "case",
    "coalesce",
    "contains",
    "count",
    "create",
    "delete",
    "desc",
    "descending",
    "detach",
    "distinct",
    "else",
    "end",
    "ends",
    "exists",
    "explain",
    "false",
    "in",
    "is",
    "limit",
    "match",
    "merge",
    "not",
    "null",
    "operator",
    "optional",
    "or",
    "order",
    "remove",
    "return",
    "set",
    "skip",
    "starts",
    "then",
    "true",
    "union",
    "unwind",
    "verbose",
    "when",
    "where",
    "with",
    "xor",
    "yield",
];

/// Scalar functions compiled to AGE's `age_<name>` with the same
/// arguments: (lower-case name, min args, max args).
const SCALAR_FNS: &[(&str, usize, usize)] = &[
    ("toupper", 1, 1),
    ("tolower", 1, 1),
    ("trim", 1, 1),
    ("ltrim", 1, 1),
    ("rtrim", 1, 1),
    ("size", 1, 1),
    ("head", 1, 1),
    ("last", 1, 1),
    ("tail", 1, 1),
    ("keys", 1, 1),
    ("reverse", 1, 1),
    ("tostring", 1, 1),
    ("tointeger", 1, 1),
    ("tofloat", 1, 1),
    ("toboolean", 1, 1),
    ("abs", 1, 1),
    ("ceil", 1, 1),
    ("floor", 1, 1),
    ("sign", 1, 1),
    ("sqrt", 1, 1),
    ("exp", 1, 1),
    ("log", 1, 1),
    ("log10", 1, 1),
    ("left", 2, 2),
    ("right", 2, 2),
    ("substring", 2, 3),
    ("replace", 3, 3),
    ("split", 2, 2),
];

/// Functions whose one argument is a whole vertex or edge.
const ENTITY_FNS: &[&str] = &["id", "label", "type", "properties"];

/// Relationships per pattern compiled at most; edge uniqueness grows
/// quadratically, and AGE's own plan for such a pattern is no better.
pub const MAX_HOPS: usize = 16;

const AGGREGATES: &[&str] = &["count", "sum", "avg", "min", "max", "collect"];

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
            let c = cx.expr(w)?;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Agtype,
    Bool,
}

#[derive(Debug, Clone)]
struct Sql {
    text: String,
    kind: Kind,
}

impl Sql {
    fn ag(text: String) -> Sql {
        Sql {
            text,
            kind: Kind::Agtype,
        }
    }
    fn bool(text: String) -> Sql {
        Sql {
            text,
            kind: Kind::Bool,
        }
    }
    /// As a SQL boolean, the way AGE coerces agtype (`agtype_to_bool`).
    fn to_bool(&self) -> String {
        match self.kind {
            Kind::Bool => self.text.clone(),
            Kind::Agtype => format!("({})::boolean", self.text),
        }
    }
    /// As agtype, the way AGE casts a boolean result (`bool_to_agtype`).
    fn to_agtype(&self) -> String {
        match self.kind {
            Kind::Agtype => self.text.clone(),
            Kind::Bool => format!("({})::agtype", self.text),
        }
    }
    fn agtype_only(self) -> Result<String, D> {
        match self.kind {
            Kind::Agtype => Ok(self.text),
            Kind::Bool => Err(D::BooleanOperand),
        }
    }
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

fn contains_aggregate(e: &Expr) -> bool {
    let mut found = false;
    e.walk(&mut |x| {
        if is_aggregate(x) {
            found = true;
        }
    });
    found
}

fn is_aggregate(e: &Expr) -> bool {
    match e {
        Expr::CountStar => true,
        Expr::Function { name, .. } => AGGREGATES.contains(&name.to_ascii_lowercase().as_str()),
        _ => false,
    }
}

fn is_keyword(k: &str) -> bool {
    KEYWORDS.iter().any(|w| w.eq_ignore_ascii_case(k))
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
        // Labels per node variable across the clause: AGE allows one.
        let mut labels: HashMap<&str, &str> = HashMap::new();
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
                if let (Some(v), Some(l)) = (&n.var, n.labels.first())
                    && let Some(prev) = labels.insert(v, l)
                    && prev != l
                {
                    return Err(D::MultipleLabels);
                }
            }
        }
        for p in &m.patterns {
            let mut edges: Vec<(String, Option<String>)> = Vec::new();
            let mut left = self.node(&p.start, &labels)?;
            for (rel, node) in &p.chain {
                let right = self.node(node, &labels)?;
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
    /// (anonymous nodes get a private name).
    fn node(&mut self, n: &NodePattern, labels: &HashMap<&str, &str>) -> Result<String, D> {
        let label = match (&n.var, n.labels.first()) {
            (Some(v), _) => labels.get(v.as_str()).map(|s| s.to_string()),
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
            Some(Binding::Node {
                alias,
                label: bound,
                ..
            }) => {
                // Named nodes seen twice always have a table (see `refs`).
                let a = alias.clone().ok_or(D::VariableReuse)?;
                if label.is_some() && *bound != label {
                    return Err(D::MultipleLabels);
                }
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
        let needs_table = label.is_some() || n.props.is_some() || referenced;
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
                // rows as AGE's OR join, but index-friendly.
                self.from.push(format!(
                    "(SELECT id, start_id, end_id, properties, start_id AS _s, end_id AS _o \
                     FROM {t} UNION ALL SELECT id, start_id, end_id, properties, end_id, start_id \
                     FROM {t} WHERE start_id <> end_id) AS {a}"
                ));
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

    /// A RETURN/ORDER BY expression: aggregates allowed at the top, not
    /// nested, and not mixed with non-aggregated values.
    fn expr_top(&mut self, e: &Expr) -> Result<Sql, D> {
        if is_aggregate(e) {
            return self.aggregate(e);
        }
        if contains_aggregate(e) {
            return Err(D::AggregateShape);
        }
        self.expr(e)
    }

    fn aggregate(&mut self, e: &Expr) -> Result<Sql, D> {
        let (name, distinct, args) = match e {
            Expr::CountStar => return Ok(Sql::ag("count(*)::agtype".to_string())),
            Expr::Function {
                name,
                distinct,
                args,
            } => (name.to_ascii_lowercase(), *distinct, args),
            _ => return Err(D::AggregateShape),
        };
        if args.len() != 1 || contains_aggregate(&args[0]) {
            return Err(D::AggregateShape);
        }
        let d = if distinct { "DISTINCT " } else { "" };
        // count(v) over a bound vertex/edge counts rows: its id is never null.
        if name == "count"
            && let Expr::Var(v) = &args[0]
            && let Some(id) = self.entity_id(v)
        {
            return Ok(Sql::ag(format!("count({d}{id})::agtype")));
        }
        let a = self.expr(&args[0])?.agtype_only()?;
        let text = match name.as_str() {
            "count" => format!("count({d}{a})::agtype"),
            "avg" => format!("ag_catalog.age_avg({d}{a})::agtype"),
            "sum" | "min" | "max" | "collect" => format!("ag_catalog.age_{name}({d}{a})"),
            _ => return Err(D::AggregateShape),
        };
        Ok(Sql::ag(text))
    }

    fn entity_id(&self, v: &str) -> Option<String> {
        match self.vars.get(v)? {
            Binding::Node { id_sql, .. } => id_sql.clone(),
            Binding::Edge { alias } => Some(format!("{alias}.id")),
        }
    }

    /// The whole vertex or edge, built the way AGE builds it.
    fn entity(&self, v: &str) -> Result<String, D> {
        let oid = self.graph_oid();
        match self.vars.get(v) {
            Some(Binding::Node { alias: Some(a), .. }) => Ok(format!(
                "ag_catalog._agtype_build_vertex({a}.id, ag_catalog._label_name({oid}, {a}.id), {a}.properties)"
            )),
            Some(Binding::Edge { alias: a }) => Ok(format!(
                "ag_catalog._agtype_build_edge({a}.id, {a}.start_id, {a}.end_id, ag_catalog._label_name({oid}, {a}.id), {a}.properties)"
            )),
            Some(Binding::Node { alias: None, .. }) => Err(D::UnsupportedExpr),
            None => Err(D::UnboundVariable),
        }
    }

    fn props_alias(&self, v: &str) -> Result<String, D> {
        match self.vars.get(v) {
            Some(Binding::Node { alias: Some(a), .. }) | Some(Binding::Edge { alias: a }) => {
                Ok(a.clone())
            }
            Some(_) => Err(D::UnsupportedExpr),
            None => Err(D::UnboundVariable),
        }
    }

    fn param(&self, name: &str) -> Result<String, D> {
        let p = self.params.ok_or(D::Params)?;
        Ok(format!(
            "ag_catalog.agtype_access_operator(VARIADIC ARRAY[({p})::agtype, {}])",
            agtype_const(&Literal::String(name.to_string()))
        ))
    }

    /// A chain of `.key` / `[index]` rooted at a variable, flattened into
    /// one `agtype_access_operator` call as AGE does.
    fn access(&mut self, e: &Expr) -> Result<Sql, D> {
        let mut steps = Vec::new();
        let mut cur = e;
        loop {
            match cur {
                Expr::Property(b, k) => {
                    if is_keyword(k) {
                        return Err(D::KeywordKey);
                    }
                    steps.push(agtype_const(&Literal::String(k.clone())));
                    cur = b;
                }
                Expr::Index(b, i) => {
                    let idx = self.expr(i)?.agtype_only()?;
                    steps.push(idx);
                    cur = b;
                }
                _ => break,
            }
        }
        steps.reverse();
        let Expr::Var(v) = cur else {
            // Any other base (parameter, literal, function result): AGE
            // applies one access call to the base's value.
            let base = self.expr(cur)?.agtype_only()?;
            return Ok(Sql::ag(format!(
                "ag_catalog.agtype_access_operator(VARIADIC ARRAY[{base}, {}])",
                steps.join(", ")
            )));
        };
        let a = self.props_alias(v)?;
        // First step a plain key: `->` on the properties object is AGE's
        // access, once a stored JSON null is read as SQL NULL.
        if steps.len() == 1
            && let Expr::Property(_, k) = e
        {
            return Ok(Sql::ag(format!(
                "NULLIF({a}.properties -> {}::text, 'null'::agtype)",
                sql_string(k)
            )));
        }
        if let Expr::Index(..) = first_step(e) {
            // `n[0]` indexes the vertex itself; AGE treats that differently.
            return Err(D::UnsupportedExpr);
        }
        Ok(Sql::ag(format!(
            "ag_catalog.agtype_access_operator(VARIADIC ARRAY[{a}.properties, {}])",
            steps.join(", ")
        )))
    }

    fn expr(&mut self, e: &Expr) -> Result<Sql, D> {
        match e {
            Expr::Literal(l) => Ok(Sql::ag(agtype_const(l))),
            Expr::Param(p) => Ok(Sql::ag(self.param(p)?)),
            Expr::Var(v) => Ok(Sql::ag(self.entity(v)?)),
            Expr::Property(..) | Expr::Index(..) => self.access(e),
            Expr::Slice(..) => Err(D::ListSlice),
            Expr::HasLabel(..) => Err(D::LabelPredicate),
            Expr::Chain(..) => Err(D::ChainedComparison),
            Expr::Case {
                operand,
                whens,
                else_,
            } => self.case(operand.as_deref(), whens, else_.as_deref()),
            Expr::ListComprehension { .. } => Err(D::ListComprehension),
            Expr::ExistsPattern(_) | Expr::Exists(_) => Err(D::Exists),
            Expr::CountStar => Err(D::AggregateShape),
            Expr::IsNull(x, neg) => {
                let s = self.expr(x)?;
                let not = if *neg { " NOT" } else { "" };
                Ok(Sql::bool(format!("({} IS{not} NULL)", s.text)))
            }
            Expr::Unary(UnaryOp::Not, x) => {
                let s = self.expr(x)?;
                Ok(Sql::bool(format!("(NOT {})", s.to_bool())))
            }
            Expr::Unary(UnaryOp::Neg, x) => {
                let s = self.expr(x)?.agtype_only()?;
                Ok(Sql::ag(format!("(- {s})")))
            }
            Expr::Unary(UnaryOp::Plus, _) => Err(D::UnsupportedExpr),
            Expr::Binary(op, l, r) => self.binary(*op, l, r),
            Expr::List(items) => {
                let mut v = Vec::new();
                for i in items {
                    v.push(self.expr(i)?.agtype_only()?);
                }
                Ok(Sql::ag(format!(
                    "ag_catalog.agtype_build_list({})",
                    v.join(", ")
                )))
            }
            Expr::Map(_) => Ok(Sql::ag(self.map(e, false)?)),
            Expr::Function { .. } => self.function(e),
        }
    }

    /// `CASE`: simple form compares with agtype `=`, searched form tests
    /// each condition as a boolean; results must be agtype values.
    fn case(
        &mut self,
        operand: Option<&Expr>,
        whens: &[(Expr, Expr)],
        else_: Option<&Expr>,
    ) -> Result<Sql, D> {
        let mut s = String::from("CASE");
        if let Some(o) = operand {
            s.push(' ');
            s.push_str(&self.expr(o)?.agtype_only().map_err(|_| D::Case)?);
        }
        for (w, t) in whens {
            let w = self.expr(w)?;
            let w = if operand.is_some() {
                w.agtype_only().map_err(|_| D::Case)?
            } else {
                w.to_bool()
            };
            let t = self.expr(t)?.agtype_only().map_err(|_| D::Case)?;
            s.push_str(&format!(" WHEN {w} THEN {t}"));
        }
        if let Some(e) = else_ {
            let e = self.expr(e)?.agtype_only().map_err(|_| D::Case)?;
            s.push_str(&format!(" ELSE {e}"));
        }
        s.push_str(" END");
        Ok(Sql::ag(format!("({s})")))
    }

    /// A map: AGE keeps null values in inline property maps and drops
    /// them in map expressions (`agtype_build_map_nonull`).
    fn map(&mut self, e: &Expr, keep_null: bool) -> Result<String, D> {
        let Expr::Map(kv) = e else {
            return Err(D::UnsupportedExpr);
        };
        if kv.is_empty() {
            return Ok("ag_catalog.agtype_build_map()".to_string());
        }
        let mut seen = HashSet::new();
        let mut args = Vec::new();
        for (k, v) in kv {
            if is_keyword(k) || !seen.insert(k.as_str()) {
                return Err(D::KeywordKey);
            }
            // Only the top-level inline map keeps nulls; AGE builds nested
            // maps as ordinary map expressions.
            let val = self.expr(v)?.agtype_only()?;
            args.push(format!("{}::text, {val}", sql_string(k)));
        }
        let f = if keep_null {
            "agtype_build_map"
        } else {
            "agtype_build_map_nonull"
        };
        Ok(format!("ag_catalog.{f}({})", args.join(", ")))
    }

    fn binary(&mut self, op: BinaryOp, l: &Expr, r: &Expr) -> Result<Sql, D> {
        use BinaryOp::*;
        match op {
            And | Or => {
                let a = self.expr(l)?.to_bool();
                let b = self.expr(r)?.to_bool();
                let w = if op == And { "AND" } else { "OR" };
                Ok(Sql::bool(format!("({a} {w} {b})")))
            }
            Xor => {
                let a = self.expr(l)?.to_bool();
                let b = self.expr(r)?.to_bool();
                Ok(Sql::bool(format!(
                    "(({a} OR {b}) AND (NOT {a} OR NOT {b}))"
                )))
            }
            Eq | Neq | Lt | Gt | Le | Ge => {
                let a = self.expr(l)?.agtype_only()?;
                let b = self.expr(r)?.agtype_only()?;
                let o = match op {
                    Eq => "=",
                    Neq => "<>",
                    Lt => "<",
                    Gt => ">",
                    Le => "<=",
                    _ => ">=",
                };
                Ok(Sql::bool(format!("({a} {o} {b})")))
            }
            Add | Sub | Mul | Div | Mod | Pow => {
                let a = self.expr(l)?.agtype_only()?;
                let b = self.expr(r)?.agtype_only()?;
                let o = match op {
                    Add => "+",
                    Sub => "-",
                    Mul => "*",
                    Div => "/",
                    Mod => "%",
                    _ => "^",
                };
                Ok(Sql::ag(format!("({a} {o} {b})")))
            }
            RegexMatch => {
                let a = self.expr(l)?.agtype_only()?;
                let b = self.expr(r)?.agtype_only()?;
                Ok(Sql::ag(format!("({a} OPERATOR(ag_catalog.=~) {b})")))
            }
            StartsWith | EndsWith | Contains => {
                let a = self.expr(l)?.agtype_only()?;
                let b = self.expr(r)?.agtype_only()?;
                let f = match op {
                    StartsWith => "starts_with",
                    EndsWith => "ends_with",
                    _ => "contains",
                };
                Ok(Sql::ag(format!(
                    "ag_catalog.agtype_string_match_{f}({a}, {b})"
                )))
            }
            In => {
                let a = self.expr(l)?.agtype_only()?;
                match r {
                    Expr::List(items) if items.is_empty() => Err(D::EmptyInList),
                    Expr::List(items) => {
                        let mut v = Vec::new();
                        for i in items {
                            v.push(self.expr(i)?.agtype_only()?);
                        }
                        Ok(Sql::bool(format!("({a} = ANY (ARRAY[{}]))", v.join(", "))))
                    }
                    _ => {
                        let b = self.expr(r)?.agtype_only()?;
                        Ok(Sql::ag(format!("ag_catalog.agtype_in_operator({b}, {a})")))
                    }
                }
            }
        }
    }

    fn function(&mut self, e: &Expr) -> Result<Sql, D> {
        let Expr::Function {
            name,
            distinct,
            args,
        } = e
        else {
            return Err(D::UnsupportedExpr);
        };
        let lname = name.to_ascii_lowercase();
        if AGGREGATES.contains(&lname.as_str()) {
            return Err(D::AggregateShape);
        }
        if *distinct {
            return Err(D::UnsupportedExpr);
        }
        if ENTITY_FNS.contains(&lname.as_str()) {
            let [Expr::Var(v)] = args.as_slice() else {
                return Err(D::UnknownFunction);
            };
            let want_edge = lname == "type";
            let is_edge = matches!(self.vars.get(v), Some(Binding::Edge { .. }));
            if (want_edge && !is_edge) || (lname == "label" && is_edge) {
                return Err(D::UnsupportedExpr);
            }
            let ent = self.entity(v)?;
            return Ok(Sql::ag(format!("ag_catalog.age_{lname}({ent})")));
        }
        if lname == "coalesce" {
            if args.is_empty() {
                return Err(D::UnknownFunction);
            }
            let mut v = Vec::new();
            for a in args {
                v.push(self.expr(a)?.agtype_only()?);
            }
            return Ok(Sql::ag(format!("COALESCE({})", v.join(", "))));
        }
        let Some((_, lo, hi)) = SCALAR_FNS.iter().find(|(n, _, _)| *n == lname) else {
            return Err(D::UnknownFunction);
        };
        if args.len() < *lo || args.len() > *hi {
            return Err(D::UnknownFunction);
        }
        let mut v = Vec::new();
        for a in args {
            if matches!(a, Expr::Var(_)) {
                // Entities as arguments of value functions: left to AGE.
                return Err(D::UnsupportedExpr);
            }
            v.push(self.expr(a)?.agtype_only()?);
        }
        Ok(Sql::ag(format!("ag_catalog.age_{lname}({})", v.join(", "))))
    }
}

fn first_step(e: &Expr) -> &Expr {
    let mut cur = e;
    loop {
        match cur {
            Expr::Property(b, _) | Expr::Index(b, _) if matches!(**b, Expr::Var(_)) => {
                return cur;
            }
            Expr::Property(b, _) | Expr::Index(b, _) => cur = b,
            _ => return cur,
        }
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
