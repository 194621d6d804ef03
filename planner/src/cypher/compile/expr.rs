//! Expressions: Cypher values to SQL over agtype, mirroring the calls
//! AGE's own transform emits (see the parent module).

use std::collections::HashSet;

use super::super::DeclineReason as D;
use super::super::ast::*;
use super::super::literal::{agtype_const, sql_string};
use super::Compiler;
use super::aggregate::{contains_aggregate, is_aggregate};
use super::scope::Binding;
use super::typed::{Kind, Sql};

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

/// Keys of one map built by one call (two arguments each).
const MAX_MAP_KEYS: usize = 50;

pub(super) fn is_keyword(k: &str) -> bool {
    KEYWORDS.iter().any(|w| w.eq_ignore_ascii_case(k))
}

impl Compiler<'_> {
    /// A RETURN/WITH/ORDER BY expression: aggregates may occur, but not
    /// nested in one another.
    pub(super) fn expr_top(&mut self, e: &Expr) -> Result<Sql, D> {
        self.expr(e)
    }

    pub(super) fn param(&mut self, name: &str) -> Result<String, D> {
        let p = self.params.ok_or(D::Params)?;
        self.params_used = true;
        Ok(format!(
            "ag_catalog.agtype_access_operator(VARIADIC ARRAY[({p})::agtype, {}])",
            agtype_const(&Literal::String(name.to_string()))
        ))
    }

    /// A chain of `.key` / `[index]` flattened into one
    /// `agtype_access_operator` call as AGE does; rooted at a vertex or
    /// edge, it reads the `properties` column instead of the whole entity.
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
        self.not_comprehension_var(cur)?;
        let entity = match cur {
            Expr::Var(v) => match self.scope.get(v) {
                Some(Binding::Node(_) | Binding::Edge(_)) => Some(v),
                Some(_) => None,
                None => return Err(D::UnboundVariable),
            },
            _ => None,
        };
        let Some(v) = entity else {
            // Any other base (value, parameter, literal, function result,
            // path): AGE applies one access call to the base's value.
            let base = self.expr(cur)?.agtype_only()?;
            return Ok(Sql::ag(format!(
                "ag_catalog.agtype_access_operator(VARIADIC ARRAY[{base}, {}])",
                steps.join(", ")
            )));
        };
        let props = self.entity_props(v)?;
        // First step a plain key: `->` on the properties object is AGE's
        // access, once a stored JSON null is read as SQL NULL.
        if steps.len() == 1
            && let Expr::Property(_, k) = e
        {
            return Ok(Sql::ag(format!(
                "NULLIF({props} -> {}::text, 'null'::agtype)",
                sql_string(k)
            )));
        }
        if let Expr::Index(..) = first_step(e) {
            // `n[0]` indexes the vertex itself; AGE treats that differently.
            return Err(D::UnsupportedExpr);
        }
        Ok(Sql::ag(format!(
            "ag_catalog.agtype_access_operator(VARIADIC ARRAY[{props}, {}])",
            steps.join(", ")
        )))
    }

    pub(super) fn expr(&mut self, e: &Expr) -> Result<Sql, D> {
        match e {
            Expr::Literal(l) => Ok(Sql::ag(agtype_const(l))),
            Expr::Param(p) => Ok(Sql::ag(self.param(p)?)),
            Expr::Var(v) => match self.scope.get(v) {
                Some(Binding::Value(s)) => Ok(s.clone()),
                Some(_) => Ok(Sql::ag(self.entity(v)?)),
                None => Err(D::UnboundVariable),
            },
            Expr::Property(..) | Expr::Index(..) => self.access(e),
            Expr::Slice(list, lo, hi) => {
                self.not_comprehension_var(list)?;
                let list = self.expr(list)?.agtype_only()?;
                let mut bound = |b: &Option<Box<Expr>>| match b {
                    Some(b) => self.expr(b)?.agtype_only(),
                    None => Ok("NULL::agtype".to_string()),
                };
                let (lo, hi) = (bound(lo)?, bound(hi)?);
                Ok(Sql::ag(format!(
                    "ag_catalog.agtype_access_slice({list}, {lo}, {hi})"
                )))
            }
            Expr::HasLabel(..) => Err(D::LabelPredicate),
            Expr::Chain(first, rest) => self.expr(&expand_chain(first, rest)),
            Expr::Case {
                operand,
                whens,
                else_,
            } => self.case(operand.as_deref(), whens, else_.as_deref()),
            Expr::ListComprehension {
                var,
                list,
                where_,
                map,
            } => self.list_comprehension(var, list, where_.as_deref(), map.as_deref()),
            Expr::ExistsPattern(p) => self.exists_pattern(p),
            // AGE's grammar has no bare pattern predicates.
            Expr::PatternPredicate(_) => Err(D::Exists),
            // AGE's grammar takes one property of a variable only.
            Expr::Exists(x) => match &**x {
                Expr::Property(v, _) if matches!(**v, Expr::Var(_)) => {
                    let a = self.expr(x)?.agtype_only()?;
                    Ok(Sql::bool(format!("ag_catalog.age_exists({a})")))
                }
                _ => Err(D::Exists),
            },
            Expr::CountStar => self.aggregate(e),
            Expr::IsNull(x, neg) => {
                let s = self.expr(x)?;
                let not = if *neg { " NOT" } else { "" };
                Ok(Sql::bool(format!("({} IS{not} NULL)", s.text)))
            }
            Expr::Unary(UnaryOp::Not, x) => {
                let s = self.expr(x)?;
                Ok(Sql::bool(format!("(NOT {})", s.to_bool())))
            }
            // A negative number is one constant, as AGE's grammar makes it:
            // agtype's minus is not immutable, so `- '1'::agtype` would stay
            // unfolded and keep, say, a property map from a GIN index.
            Expr::Unary(UnaryOp::Neg, x) => match **x {
                Expr::Literal(Literal::Int(v)) if v.checked_neg().is_some() => {
                    Ok(Sql::ag(agtype_const(&Literal::Int(-v))))
                }
                Expr::Literal(Literal::Float(v)) => Ok(Sql::ag(agtype_const(&Literal::Float(-v)))),
                _ => {
                    let s = self.expr(x)?.agtype_only()?;
                    Ok(Sql::ag(format!("(- {s})")))
                }
            },
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
            Expr::MapProjection(base, items) => self.map_projection(base, items),
            Expr::Function { .. } if is_aggregate(e) => self.aggregate(e),
            Expr::Function { .. } => self.function(e),
        }
    }

    /// `n{.a, b: x, .*}` as AGE builds it: the base's properties
    /// (`age_properties`, or the properties column of a vertex or edge),
    /// each `.key` read from them, the entries in a map without nulls, and
    /// with `.*` the properties joined with that map by agtype `+`.
    fn map_projection(&mut self, base: &Expr, items: &[MapProjectionItem]) -> Result<Sql, D> {
        let props = match base {
            Expr::Var(v) => match self.scope.get(v) {
                Some(Binding::Node(_) | Binding::Edge(_)) => self.entity_props(v)?,
                Some(_) => {
                    let b = self.expr(base)?.agtype_only()?;
                    format!("ag_catalog.age_properties({b})")
                }
                None => return Err(D::UnboundVariable),
            },
            _ => return Err(D::UnsupportedExpr),
        };
        let mut all = false;
        let mut seen = HashSet::new();
        let mut args = Vec::new();
        for it in items {
            let (key, val) = match it {
                MapProjectionItem::AllProperties => {
                    all = true;
                    continue;
                }
                MapProjectionItem::Property(k) => (
                    k,
                    format!(
                        "ag_catalog.agtype_access_operator(VARIADIC ARRAY[{props}, {}])",
                        agtype_const(&Literal::String(k.clone()))
                    ),
                ),
                MapProjectionItem::Entry(k, v) => (k, self.expr(v)?.agtype_only()?),
            };
            if is_keyword(key) || !seen.insert(key.as_str()) {
                return Err(D::KeywordKey);
            }
            args.push(format!("{}::text, {val}", sql_string(key)));
        }
        if args.len() > MAX_MAP_KEYS {
            return Err(D::UnsupportedExpr);
        }
        let map = format!("ag_catalog.agtype_build_map_nonull({})", args.join(", "));
        Ok(Sql::ag(match (all, args.is_empty()) {
            (true, true) => props,
            (true, false) => format!("({props} + {map})"),
            (false, _) => map,
        }))
    }

    /// `[x IN list WHERE p | m]`: AGE's ARRAY subquery over `age_unnest`,
    /// cast to agtype; the variable shadows any outer one inside.
    fn list_comprehension(
        &mut self,
        var: &str,
        list: &Expr,
        where_: Option<&Expr>,
        map: Option<&Expr>,
    ) -> Result<Sql, D> {
        if var.starts_with("_age") {
            return Err(D::ListComprehension);
        }
        let list = self.expr(list)?.agtype_only()?;
        let a = self.fresh("_l");
        let saved = self
            .scope
            .insert(var.to_string(), Binding::Value(Sql::ag(format!("{a}.v"))));
        self.comprehension_vars.push(var.to_string());
        let r = (|| {
            let m = match map {
                Some(m) => self
                    .expr(m)?
                    .agtype_only()
                    .map_err(|_| D::ListComprehension)?,
                None => format!("{a}.v"),
            };
            let w = match where_ {
                Some(w) => format!(" WHERE {}", self.expr(w)?.to_bool()),
                None => String::new(),
            };
            Ok(format!(
                "(ARRAY(SELECT {m} FROM ag_catalog.age_unnest({list}) AS {a}(v){w}))::agtype"
            ))
        })();
        self.comprehension_vars.pop();
        match saved {
            Some(b) => self.scope.insert(var.to_string(), b),
            None => self.scope.remove(var),
        };
        let text = r?;
        let mut agg = false;
        for e in [map, where_].into_iter().flatten() {
            agg |= contains_aggregate(e);
        }
        if agg {
            return Err(D::AggregateShape);
        }
        Ok(Sql::ag(text))
    }

    /// AGE resolves `x.key`, `x[i]` and `x[a..b]` on a list comprehension's
    /// variable (of any comprehension around) to the comprehension's own
    /// range table entry, which has no properties, and fails with "could
    /// not find properties for x": such an expression is left to AGE,
    /// which reports it.
    fn not_comprehension_var(&self, base: &Expr) -> Result<(), D> {
        match base {
            Expr::Var(v) if self.comprehension_vars.contains(v) => Err(D::ListComprehension),
            _ => Ok(()),
        }
    }

    /// `CASE`: the simple form compares with agtype `=`, the searched form
    /// tests each condition as a boolean. The result is a boolean when
    /// every result is one, else agtype (booleans cast as AGE casts them).
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
        let mut conds = Vec::with_capacity(whens.len());
        let mut results = Vec::with_capacity(whens.len() + 1);
        for (w, t) in whens {
            let w = self.expr(w)?;
            conds.push(if operand.is_some() {
                w.agtype_only().map_err(|_| D::Case)?
            } else {
                w.to_bool()
            });
            results.push(self.expr(t)?);
        }
        if let Some(e) = else_ {
            results.push(self.expr(e)?);
        }
        let boolean = results.iter().all(|r| r.kind == Kind::Bool);
        let mut results = results
            .iter()
            .map(|r| if boolean { r.to_bool() } else { r.to_agtype() });
        for w in conds {
            let t = results.next().unwrap_or_default();
            s.push_str(&format!(" WHEN {w} THEN {t}"));
        }
        if let Some(e) = results.next() {
            s.push_str(&format!(" ELSE {e}"));
        }
        s.push_str(" END");
        let s = format!("({s})");
        Ok(if boolean { Sql::bool(s) } else { Sql::ag(s) })
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
        // Past 100 arguments AGE chains calls; PostgreSQL allows no more.
        if kv.len() > MAX_MAP_KEYS {
            return Err(D::UnsupportedExpr);
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

/// `a < b < c` as AGE's grammar reads it: each comparison with the next
/// operand, joined by AND (the middle operands are evaluated twice).
pub(super) fn expand_chain(first: &Expr, rest: &[(BinaryOp, Expr)]) -> Expr {
    let mut left = first;
    let mut out: Option<Expr> = None;
    for (op, right) in rest {
        let cmp = Expr::Binary(*op, Box::new(left.clone()), Box::new(right.clone()));
        out = Some(match out {
            None => cmp,
            Some(prev) => Expr::Binary(BinaryOp::And, Box::new(prev), Box::new(cmp)),
        });
        left = right;
    }
    out.unwrap_or_else(|| first.clone())
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
