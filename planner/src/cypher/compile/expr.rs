//! Expressions: Cypher values to SQL over agtype, mirroring the calls
//! AGE's own transform emits (see the parent module).

use std::collections::HashSet;

use super::super::DeclineReason as D;
use super::super::ast::*;
use super::super::literal::{agtype_const, sql_string};
use super::{Binding, Compiler};

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

const AGGREGATES: &[&str] = &["count", "sum", "avg", "min", "max", "collect"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Agtype,
    Bool,
}

#[derive(Debug, Clone)]
pub(super) struct Sql {
    pub(super) text: String,
    pub(super) kind: Kind,
}

impl Sql {
    pub(super) fn ag(text: String) -> Sql {
        Sql {
            text,
            kind: Kind::Agtype,
        }
    }
    pub(super) fn bool(text: String) -> Sql {
        Sql {
            text,
            kind: Kind::Bool,
        }
    }
    /// As a SQL boolean, the way AGE coerces agtype (`agtype_to_bool`).
    pub(super) fn to_bool(&self) -> String {
        match self.kind {
            Kind::Bool => self.text.clone(),
            Kind::Agtype => format!("({})::boolean", self.text),
        }
    }
    /// As agtype, the way AGE casts a boolean result (`bool_to_agtype`).
    pub(super) fn to_agtype(&self) -> String {
        match self.kind {
            Kind::Agtype => self.text.clone(),
            Kind::Bool => format!("({})::agtype", self.text),
        }
    }
    pub(super) fn agtype_only(self) -> Result<String, D> {
        match self.kind {
            Kind::Agtype => Ok(self.text),
            Kind::Bool => Err(D::BooleanOperand),
        }
    }
}

pub(super) fn contains_aggregate(e: &Expr) -> bool {
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

pub(super) fn is_keyword(k: &str) -> bool {
    KEYWORDS.iter().any(|w| w.eq_ignore_ascii_case(k))
}

impl Compiler<'_> {
    /// A RETURN/ORDER BY expression: aggregates allowed at the top, not
    /// nested, and not mixed with non-aggregated values.
    pub(super) fn expr_top(&mut self, e: &Expr) -> Result<Sql, D> {
        if is_aggregate(e) {
            return self.aggregate(e);
        }
        if contains_aggregate(e) {
            return Err(D::AggregateShape);
        }
        self.expr(e)
    }

    pub(super) fn aggregate(&mut self, e: &Expr) -> Result<Sql, D> {
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

    pub(super) fn entity_id(&self, v: &str) -> Option<String> {
        match self.vars.get(v)? {
            Binding::Node { id_sql, .. } => id_sql.clone(),
            Binding::Edge { alias } => Some(format!("{alias}.id")),
        }
    }

    /// The whole vertex or edge, built the way AGE builds it.
    pub(super) fn entity(&self, v: &str) -> Result<String, D> {
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

    pub(super) fn props_alias(&self, v: &str) -> Result<String, D> {
        match self.vars.get(v) {
            Some(Binding::Node { alias: Some(a), .. }) | Some(Binding::Edge { alias: a }) => {
                Ok(a.clone())
            }
            Some(_) => Err(D::UnsupportedExpr),
            None => Err(D::UnboundVariable),
        }
    }

    pub(super) fn param(&self, name: &str) -> Result<String, D> {
        let p = self.params.ok_or(D::Params)?;
        Ok(format!(
            "ag_catalog.agtype_access_operator(VARIADIC ARRAY[({p})::agtype, {}])",
            agtype_const(&Literal::String(name.to_string()))
        ))
    }

    /// A chain of `.key` / `[index]` rooted at a variable, flattened into
    /// one `agtype_access_operator` call as AGE does.
    pub(super) fn access(&mut self, e: &Expr) -> Result<Sql, D> {
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

    pub(super) fn expr(&mut self, e: &Expr) -> Result<Sql, D> {
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
    pub(super) fn case(
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
    pub(super) fn map(&mut self, e: &Expr, keep_null: bool) -> Result<String, D> {
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

    pub(super) fn binary(&mut self, op: BinaryOp, l: &Expr, r: &Expr) -> Result<Sql, D> {
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
                let o = comparison(op);
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

    pub(super) fn function(&mut self, e: &Expr) -> Result<Sql, D> {
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
            if lname == "id"
                && let Some(id) = self.entity_id(v)
            {
                // The graphid itself, without building the whole entity.
                return Ok(Sql::ag(format!("ag_catalog.graphid_to_agtype({id})")));
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

/// The SQL operator of a comparison (`Eq`, `Neq`, `Lt`, `Gt`, `Le`, `Ge`).
pub(super) fn comparison(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Eq => "=",
        BinaryOp::Neq => "<>",
        BinaryOp::Lt => "<",
        BinaryOp::Gt => ">",
        BinaryOp::Le => "<=",
        _ => ">=",
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
