//! Patterns: MATCH, OPTIONAL MATCH and pattern predicates (`exists()`).
//! Each vertex or edge of a pattern is a label table joined on graphids;
//! AGE never binds one edge twice within one path.

use std::collections::{HashMap, HashSet};

use super::super::DeclineReason as D;
use super::super::ast::*;
use super::super::catalog::LabelKind;
use super::aggregate::contains_aggregate;
use super::scope::{Binding, Ent, Tie, Tied, is_private};
use super::stage::Item;
use super::typed::Sql;
use super::vle::Walk;
use super::{Compiler, MAX_HOPS};

/// Labels per node variable for one clause, from the occurrence that binds
/// each (see [`Compiler::clause_labels`]).
type Labels<'m> = HashMap<&'m str, Option<&'m str>>;

impl Compiler<'_> {
    /// MATCH: the patterns join the current stage, WHERE filters it.
    pub(super) fn match_clause(&mut self, m: &Match) -> Result<(), D> {
        let labels = self.clause_labels(&m.patterns)?;
        // The variables its WHERE names: likely filtered to fewer rows;
        // those it compares by equality with a constant, to one.
        self.filtered.clear();
        self.pinned.clear();
        if let Some(w) = &m.where_ {
            w.walk(&mut |x| {
                if let Expr::Var(v) = x {
                    self.filtered.insert(v.clone());
                }
            });
            pinned_vars(w, &mut self.pinned);
        }
        for p in &m.patterns {
            self.pattern_part(p, &labels)?;
        }
        self.filtered.clear();
        self.pinned.clear();
        if let Some(w) = &m.where_ {
            if contains_aggregate(w) {
                return Err(D::AggregateShape);
            }
            let c = self.filter(w)?;
            self.stage.conds.push(c.to_bool());
        }
        Ok(())
    }

    /// OPTIONAL MATCH: the pattern and its WHERE in a subquery left-joined
    /// to what came before, which it reads; the variables it binds are that
    /// subquery's columns, NULL when nothing matched.
    pub(super) fn optional_match(&mut self, m: &Match) -> Result<(), D> {
        let outer = std::mem::take(&mut self.stage);
        let before: HashSet<String> = self.scope.keys().cloned().collect();
        let r = self.match_clause(m);
        let inner = std::mem::replace(&mut self.stage, outer);
        r?;
        let mut new: Vec<String> = self
            .scope
            .keys()
            .filter(|k| !before.contains(*k) && !is_private(k))
            .cloned()
            .collect();
        new.sort();
        let alias = self.fresh("_o");
        let mut cols = Vec::new();
        for v in &new {
            let b = self.scope[v].clone();
            let rebound = project_binding(&b, &alias, &mut cols, true)?;
            self.bind(v, rebound);
        }
        if cols.is_empty() {
            cols.push("1".to_string());
        }
        let select: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} AS c{}", i + 1))
            .collect();
        self.stage.items.push(Item::LeftLateral(format!(
            "(SELECT {}{}{}) AS {alias}",
            select.join(", "),
            inner.sql_from(),
            inner.sql_where()
        )));
        Ok(())
    }

    /// `exists((a)-[:R]->())` and bare patterns in WHERE: whether the
    /// pattern matches for the current row. Variables it binds stay inside.
    pub(super) fn exists_pattern(&mut self, p: &PatternPart) -> Result<Sql, D> {
        if p.path_var.is_some() {
            return Err(D::Exists);
        }
        // AGE: "variable `x` does not exist" for a name bound nowhere else.
        let nodes = std::iter::once(&p.start).chain(p.chain.iter().map(|(_, n)| n));
        let names = nodes
            .filter_map(|n| n.var.as_ref())
            .chain(p.chain.iter().filter_map(|(r, _)| r.var.as_ref()));
        for v in names {
            if !self.scope.contains_key(v) {
                return Err(D::Exists);
            }
        }
        let outer_stage = std::mem::take(&mut self.stage);
        let outer_scope = self.scope.clone();
        let outer_order = self.order.clone();
        let patterns = std::slice::from_ref(p);
        let was = std::mem::replace(&mut self.in_exists, true);
        // Its conditions are filters of its own scans, even in a RETURN.
        let projecting = std::mem::replace(&mut self.projecting, false);
        let r = self
            .clause_labels(patterns)
            .and_then(|labels| self.pattern_part(p, &labels));
        self.in_exists = was;
        self.projecting = projecting;
        let inner = std::mem::replace(&mut self.stage, outer_stage);
        self.scope = outer_scope;
        self.order = outer_order;
        r?;
        // OFFSET 0 keeps it a subplan run per row, as AGE's is: turned into
        // a semi-join it is planned on PostgreSQL's guess of how many rows
        // reach it, which for property filters is blind.
        Ok(Sql::bool(format!(
            "EXISTS (SELECT 1{}{} OFFSET 0)",
            inner.sql_from(),
            inner.sql_where()
        )))
    }

    /// The label of each node variable, from the occurrence that binds it:
    /// a later occurrence may repeat it or leave it out, and AGE rejects
    /// any other label ("multiple labels for variable"), also for a
    /// variable bound without a label that gets one later.
    fn clause_labels<'m>(&self, patterns: &'m [PatternPart]) -> Result<Labels<'m>, D> {
        let mut labels: Labels<'m> = HashMap::new();
        for p in patterns {
            if p.chain.len() > MAX_HOPS {
                return Err(D::TooLarge);
            }
            let nodes = std::iter::once(&p.start).chain(p.chain.iter().map(|(_, n)| n));
            for n in nodes {
                if n.labels.len() > 1 {
                    return Err(D::MultipleLabels);
                }
                let Some(v) = &n.var else { continue };
                let bound = match self.scope.get(v) {
                    Some(Binding::Node(e)) => Some(e.label.as_deref()),
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
        Ok(labels)
    }

    fn pattern_part(&mut self, p: &PatternPart, labels: &Labels<'_>) -> Result<(), D> {
        // A path that is read needs every element whole.
        let path_read = match &p.path_var {
            Some(v) => {
                let nodes = std::iter::once(&p.start).chain(p.chain.iter().map(|(_, n)| n));
                let inside = nodes
                    .filter_map(|n| n.var.as_ref())
                    .chain(p.chain.iter().filter_map(|(r, _)| r.var.as_ref()))
                    .any(|n| n == v);
                if self.scope.contains_key(v) || inside {
                    return Err(D::VariableReuse);
                }
                self.refs.get(v).copied().unwrap_or(0) > 0
            }
            None => false,
        };
        let lone = p.chain.is_empty();
        let var_length = p.chain.iter().any(|(r, _)| r.var_length.is_some());
        if var_length && path_read {
            return Err(D::VariableLength);
        }
        // Nodes whose rows are likely few: where a walk should start.
        let nodes: Vec<&NodePattern> = std::iter::once(&p.start)
            .chain(p.chain.iter().map(|(_, n)| n))
            .collect();
        let few: Vec<bool> = nodes
            .iter()
            .map(|n| {
                n.props.is_some()
                    || n.var
                        .as_ref()
                        .is_some_and(|v| self.scope.contains_key(v) || self.filtered.contains(v))
            })
            .collect();
        // Nodes the pattern itself pins (an inline map, an earlier binding),
        // and those pinned by the WHERE's equalities as well.
        let known: Vec<bool> = nodes
            .iter()
            .map(|n| {
                n.props.is_some() || n.var.as_ref().is_some_and(|v| self.scope.contains_key(v))
            })
            .collect();
        let pinned: Vec<bool> = nodes
            .iter()
            .zip(&known)
            .map(|(n, k)| *k || n.var.as_ref().is_some_and(|v| self.pinned.contains(v)))
            .collect();
        self.stage.pinned |= nodes.iter().any(|n| n.props.is_some());
        // A variable-length walk may start from its left node's id.
        let starts_walk = p.chain.first().is_some_and(|(r, _)| r.var_length.is_some());
        let mut elems = Vec::new();
        let mut left = self.node(&p.start, labels, lone || path_read || starts_walk)?;
        elems.push(left.clone());
        let mut edges: Vec<(EdgeIds, Option<String>)> = Vec::new();
        for (i, (rel, node)) in p.chain.iter().enumerate() {
            let before = self.order.len();
            let right = self.node(node, labels, path_read)?;
            let label = rel.types.first().cloned();
            if rel.var_length.is_some() {
                let right_id =
                    matches!(self.scope.get(&right), Some(Binding::Node(e)) if e.id.is_some());
                let walk = if few[..=i].iter().any(|f| *f) {
                    Walk::FromLeft
                } else if few[i + 1] && right_id {
                    Walk::FromRight
                } else {
                    Walk::Everywhere
                };
                // Per row, the walk wins only from one vertex towards an
                // open end (see `D::WalkPerRow`).
                let per_row_wins = match walk {
                    Walk::FromLeft => pinned[..=i].iter().any(|p| *p) && !known[i + 1],
                    Walk::FromRight => pinned[i + 1],
                    Walk::Everywhere => true,
                };
                let ids = self.var_length_rel(rel, &left, &right, walk, per_row_wins)?;
                edges.push((EdgeIds::Many(ids), label));
            } else {
                let (name, label) = self.rel(rel, &left, &right)?;
                let id = self.entity_id(&name).ok_or(D::UnsupportedExpr)?;
                edges.push((EdgeIds::One(id), label));
                elems.push(name);
            }
            elems.push(right.clone());
            // The relationship is bound before its right node (for
            // `RETURN *`), though the node had to exist first.
            if self.order.len() == before + 2 {
                self.order.swap(before, before + 1);
            }
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
                    self.stage.conds.push(distinct_edges(a, b));
                }
            }
        }
        if let Some(v) = &p.path_var {
            let mut parts = Vec::with_capacity(elems.len());
            for e in &elems {
                parts.push(self.scope[e].clone());
            }
            self.bind(v, Binding::Path(parts));
        }
        Ok(())
    }

    /// Binds or re-uses a node; returns the name it is bound to (anonymous
    /// nodes get a private one). A node that nothing reads needs no table
    /// when an edge reaches it (the edge implies the vertex); `whole` asks
    /// for one anyway: a pattern without relationships ranges over its
    /// vertices, and a path that is read builds each one.
    fn node(&mut self, n: &NodePattern, labels: &Labels<'_>, whole: bool) -> Result<String, D> {
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
                if v.starts_with("_age") {
                    return Err(D::UnsupportedExpr);
                }
                v.clone()
            }
            None => self.private_name(),
        };
        match self.scope.get(&name) {
            Some(Binding::Node(e)) => {
                // Named nodes seen twice always have a table (see `refs`).
                let Some(props) = e.props.clone() else {
                    return Err(D::VariableReuse);
                };
                if let Some(m) = &n.props {
                    let c = self.props_filter(&props, m)?;
                    self.stage.conds.push(c);
                }
                return Ok(name);
            }
            Some(_) => return Err(D::VariableReuse),
            None => {}
        }
        let referenced = n
            .var
            .as_ref()
            .is_some_and(|v| self.refs.get(v).copied().unwrap_or(0) > 1);
        let needs_table = whole || label.is_some() || n.props.is_some() || referenced;
        let mut ent = Ent {
            label,
            pinned: n.props.is_some(),
            ..Ent::default()
        };
        if needs_table {
            let a = format!("_n{}", self.n_node);
            let t = self.table(ent.label.as_deref(), LabelKind::Vertex)?;
            self.stage.items.push(Item::Table(format!("{t} AS {a}")));
            let props = format!("{a}.properties");
            if let Some(m) = &n.props {
                let c = self.props_filter(&props, m)?;
                self.stage.conds.push(c);
            }
            ent.id = Some(format!("{a}.id"));
            ent.props = Some(props);
            ent.all_labels = ent.label.is_none();
        }
        self.n_node += 1;
        self.bind(&name, Binding::Node(ent));
        Ok(name)
    }

    /// `props @> map`, AGE's inline property constraint (a map literal, or
    /// a parameter holding the map).
    fn props_filter(&mut self, props: &str, m: &Expr) -> Result<String, D> {
        let m = match m {
            Expr::Map(_) => self.map(m, true)?,
            Expr::Param(p) => self.param(p)?,
            _ => return Err(D::Params),
        };
        Ok(format!("{props} @> {m}"))
    }

    /// Ties an endpoint column to a node: equality with its id, or the
    /// node's identity when it has no table yet.
    ///
    /// With `loose`, a second edge on the same node is tied through an
    /// identity function on graphids, as AGE's own joins across patterns
    /// are: with plain equalities both endpoints and the id form one
    /// equivalence class, and PostgreSQL plans index scans of the node's
    /// table (each label's, for `_ag_label_vertex`) for every combination
    /// of the edges around it: with indexes, a third of a short query's
    /// planning (1.50 against 1.18 ms through an unlabeled vertex, 0.83
    /// against 0.55 through a labeled one), for the same plan. A pinned
    /// node keeps its plain tie, from which the edges are looked up by
    /// index, and the new edge meets its id through the function; any
    /// other meets the first edge's endpoint plainly and the node meets
    /// that endpoint through the function, so the edges still join each
    /// other directly, which a join over a whole unindexed table needs.
    pub(super) fn bind_endpoint(&mut self, node: &str, col: String, tie: Tie) {
        let Some(Binding::Node(e)) = self.scope.get_mut(node) else {
            return;
        };
        let Some(id) = e.id.clone() else {
            e.id = Some(col);
            return;
        };
        let table = col.split_once('.').map_or("", |(t, _)| t).to_string();
        // Only a tie in this SELECT (one outside it is a reference from a
        // subquery, in no equivalence class with these), and of another
        // edge: both ends of one edge on one node (a self-loop) need the
        // class, which filters that edge's scan by itself.
        let first = e
            .tied
            .as_mut()
            .filter(|t| t.table != table)
            .and_then(|t| Some((self.stage.conds.iter().position(|c| *c == t.cond)?, t)));
        match (tie, first) {
            (Tie::Edge { loose: true }, Some((_, _))) if e.pinned => {
                let f = graphid_identity(&id);
                self.stage.conds.push(format!("{col} = {f}"));
            }
            (Tie::Edge { loose: true }, Some((k, t))) => {
                let c = format!("{id} = {}", graphid_identity(&t.col));
                self.stage.conds[k] = c.clone();
                t.cond = c;
                self.stage.conds.push(format!("{col} = {}", t.col));
            }
            (tie, first) => {
                let c = format!("{col} = {id}");
                if first.is_none() && matches!(tie, Tie::Edge { .. }) {
                    e.tied = Some(Tied {
                        cond: c.clone(),
                        col,
                        table,
                    });
                }
                self.stage.conds.push(c);
            }
        }
    }

    /// Whether an edge of the current SELECT already reaches a node.
    fn reached(&self, node: &str) -> bool {
        match self.scope.get(node) {
            Some(Binding::Node(e)) => match &e.tied {
                Some(t) => self.stage.conds.contains(&t.cond),
                None => e.id.is_some() && e.props.is_none(),
            },
            _ => false,
        }
    }

    /// Binds a fixed-length relationship between two bound nodes; returns
    /// its name (private when anonymous) and label.
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
        let name = match &r.var {
            Some(v) if self.scope.contains_key(v) => return Err(D::VariableReuse),
            Some(v) => v.clone(),
            None => self.private_name(),
        };
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
                self.stage.items.push(Item::Table(format!(
                    "(SELECT id, start_id, end_id, properties, start_id AS _s, end_id AS _o, \
                     false AS _r FROM {t} UNION ALL SELECT id, start_id, end_id, properties, \
                     end_id, start_id, true FROM {t}) AS {a}"
                )));
                self.stage
                    .conds
                    .push(format!("NOT ({a}._r AND {a}.start_id = {a}.end_id)"));
                ("_s", "_o")
            }
        };
        if r.dir != Direction::Both {
            self.stage.items.push(Item::Table(format!("{t} AS {a}")));
        }
        // The identity tie only where it pays: among few rows, where
        // planning is much of the time. A join over many rows, or an edge
        // closing a cycle, gains more from the class's freedom of join
        // order (measured up to 2.5x slower without).
        let cycle = self.reached(left) && self.reached(right);
        let loose = self.stage.pinned && !cycle;
        self.bind_endpoint(left, format!("{a}.{src}"), Tie::Edge { loose });
        self.bind_endpoint(right, format!("{a}.{dst}"), Tie::Edge { loose });
        let props = format!("{a}.properties");
        if let Some(m) = &r.props {
            let c = self.props_filter(&props, m)?;
            self.stage.conds.push(c);
        }
        let ent = Ent {
            id: Some(format!("{a}.id")),
            props: Some(props),
            start: Some(format!("{a}.start_id")),
            end: Some(format!("{a}.end_id")),
            label: label.clone(),
            nullable: false,
            all_labels: false,
            tied: None,
            pinned: false,
        };
        self.bind(&name, Binding::Edge(ent));
        Ok((name, label))
    }
}

/// `id` unchanged, as an expression PostgreSQL does not see through, so
/// that an equality with it joins no equivalence class.
fn graphid_identity(id: &str) -> String {
    format!("ag_catalog.graphid_in(ag_catalog.graphid_out({id}))")
}

/// The edges a relationship of a path binds: one, or a variable-length
/// walk's array of edge ids.
enum EdgeIds {
    One(String),
    Many(String),
}

/// The condition that two relationships of one path share no edge.
fn distinct_edges(a: &EdgeIds, b: &EdgeIds) -> String {
    match (a, b) {
        (EdgeIds::One(a), EdgeIds::One(b)) => format!("{a} <> {b}"),
        (EdgeIds::One(a), EdgeIds::Many(b)) | (EdgeIds::Many(b), EdgeIds::One(a)) => {
            format!("{a} <> ALL({b})")
        }
        (EdgeIds::Many(a), EdgeIds::Many(b)) => format!("NOT ({a} && {b})"),
    }
}

/// Adds the columns a binding needs to `cols` (as SQL over the current
/// stage) and returns the binding as read from subquery `alias`, whose
/// columns are named `c1`, `c2`, ... in `cols` order.
pub(super) fn project_binding(
    b: &Binding,
    alias: &str,
    cols: &mut Vec<String>,
    nullable: bool,
) -> Result<Binding, D> {
    let col = |sql: &Option<String>, cols: &mut Vec<String>| {
        sql.as_ref().map(|s| {
            cols.push(s.clone());
            format!("{alias}.c{}", cols.len())
        })
    };
    Ok(match b {
        Binding::Node(e) | Binding::Edge(e) => {
            let ent = Ent {
                id: col(&e.id, cols),
                props: col(&e.props, cols),
                start: col(&e.start, cols),
                end: col(&e.end, cols),
                label: e.label.clone(),
                nullable: e.nullable || nullable,
                all_labels: false,
                tied: None,
                pinned: false,
            };
            if matches!(b, Binding::Node(_)) {
                Binding::Node(ent)
            } else {
                Binding::Edge(ent)
            }
        }
        Binding::Value(s) => {
            cols.push(s.text.clone());
            Binding::Value(Sql {
                text: format!("{alias}.c{}", cols.len()),
                kind: s.kind,
            })
        }
        Binding::Path(elems) => {
            let mut out = Vec::with_capacity(elems.len());
            for e in elems {
                out.push(project_binding(e, alias, cols, nullable)?);
            }
            Binding::Path(out)
        }
    })
}

/// Variables `w` pins to one value by a top-level equality with a
/// constant: `v.key = 1`, `1 = v.key`, `id(v) = $p`, within ANDs.
fn pinned_vars(w: &Expr, out: &mut HashSet<String>) {
    match w {
        Expr::Binary(BinaryOp::And, a, b) => {
            pinned_vars(a, out);
            pinned_vars(b, out);
        }
        Expr::Binary(BinaryOp::Eq, a, b) => {
            for (x, c) in [(a, b), (b, a)] {
                if let Some(v) = read_var(x)
                    && is_constant(c)
                {
                    out.insert(v.to_string());
                }
            }
        }
        _ => {}
    }
}

/// The variable of `v.key` or `id(v)`.
fn read_var(x: &Expr) -> Option<&str> {
    match x {
        Expr::Property(b, _) => match b.as_ref() {
            Expr::Var(v) => Some(v),
            _ => None,
        },
        Expr::Function { name, args, .. } if name.eq_ignore_ascii_case("id") => {
            match args.as_slice() {
                [Expr::Var(v)] => Some(v),
                _ => None,
            }
        }
        _ => None,
    }
}

/// A literal or parameter, or an expression of those only.
fn is_constant(x: &Expr) -> bool {
    let mut constant = true;
    x.walk(&mut |e| {
        if matches!(
            e,
            Expr::Var(_)
                | Expr::Function { .. }
                | Expr::ListComprehension { .. }
                | Expr::ExistsPattern(_)
                | Expr::PatternPredicate(_)
        ) {
            constant = false;
        }
    });
    constant
}
