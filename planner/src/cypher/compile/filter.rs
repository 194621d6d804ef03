//! WHERE conditions. A row survives only where the condition is true, so
//! in positions reached through AND and OR alone ("positive" positions) a
//! false and a NULL are interchangeable. That lets a comparison of a
//! property with a constant skip the `NULLIF(.., 'null')` that AGE's
//! reading of a stored JSON null otherwise needs, and lets string and
//! boolean equality become containment, which a GIN index can answer.

use agtype::{Object, Value};

use super::super::DeclineReason as D;
use super::super::ast::*;
use super::super::literal::{agtype_const, literal_value, sql_string};
use super::Compiler;
use super::expr::{comparison, expand_chain, is_keyword};
use super::typed::Sql;

/// Holds for exactly the values other than a stored JSON null. Not
/// `< 'null'` (null sorts above every other value): PostgreSQL reads that
/// and a `>` on the same expression as a range and estimates 0.5% of the
/// rows, which sends joins through nested loops over thousands of rows;
/// `<>` is estimated as nearly every row, as AGE's own filter is.
const NOT_NULL: &str = "<> 'null'::agtype";

impl Compiler<'_> {
    pub(super) fn filter(&mut self, e: &Expr) -> Result<Sql, D> {
        use BinaryOp::*;
        match e {
            Expr::Binary(op @ (And | Or), l, r) => {
                let a = self.filter(l)?.to_bool();
                let b = self.filter(r)?.to_bool();
                let w = if *op == And { "AND" } else { "OR" };
                Ok(Sql::bool(format!("({a} {w} {b})")))
            }
            Expr::Binary(op @ (Eq | Neq | Lt | Gt | Le | Ge), l, r) => {
                match self.compare_constant(*op, l, r)? {
                    Some(s) => Ok(s),
                    None => self.expr(e),
                }
            }
            Expr::Binary(op @ (StartsWith | EndsWith | Contains), l, r) => {
                // AGE's string matchers answer false for an agtype null
                // and NULL for a SQL NULL: the same in a positive position.
                match (plain_property(l), constant(r)) {
                    (Some((var, key)), Some(lit @ Literal::String(_))) => {
                        let Ok(props) = self.entity_props(var) else {
                            return self.expr(e);
                        };
                        let f = match op {
                            StartsWith => "starts_with",
                            EndsWith => "ends_with",
                            _ => "contains",
                        };
                        Ok(Sql::ag(format!(
                            "ag_catalog.agtype_string_match_{f}({props} -> {}::text, {})",
                            sql_string(key),
                            agtype_const(lit)
                        )))
                    }
                    _ => self.expr(e),
                }
            }
            Expr::Chain(first, rest) => self.filter(&expand_chain(first, rest)),
            _ => self.expr(e),
        }
    }

    /// `v.key <op> constant` (either way round) in a positive position.
    fn compare_constant(&mut self, op: BinaryOp, l: &Expr, r: &Expr) -> Result<Option<Sql>, D> {
        use BinaryOp::*;
        if op == Eq
            && let Some(s) = self.id_equals(l, r).or_else(|| self.id_equals(r, l))
        {
            return Ok(Some(s));
        }
        let (prop, lit, prop_left) = match (plain_property(l), constant(r)) {
            (Some(p), Some(c)) => (p, c, true),
            _ => match (plain_property(r), constant(l)) {
                (Some(p), Some(c)) => (p, c, false),
                _ => return Ok(None),
            },
        };
        let (var, key) = prop;
        let Ok(props) = self.entity_props(var) else {
            return Ok(None);
        };
        if op == Eq && matches!(lit, Literal::String(_) | Literal::Bool(_)) {
            // Containment matches a string or boolean only by an equal
            // scalar of the same type (never a list holding it), exactly
            // agtype `=`; a stored null or a missing key matches nothing.
            let mut o = Object::new();
            o.insert(key, literal_value(lit));
            let map = sql_string(&agtype::to_text(&Value::Object(o)));
            return Ok(Some(Sql::bool(format!("({props} @> {map}::agtype)"))));
        }
        let raw = format!("({props} -> {}::text)", sql_string(key));
        let c = agtype_const(lit);
        let o = comparison(op);
        let cmp = if prop_left {
            format!("{raw} {o} {c}")
        } else {
            format!("{c} {o} {raw}")
        };
        // Where the stored null, the greatest agtype value, would make the
        // comparison true, it is excluded explicitly.
        let null_true = match op {
            Neq => true,
            Gt | Ge => prop_left,
            Lt | Le => !prop_left,
            _ => false,
        };
        Ok(Some(Sql::bool(if null_true {
            format!("({cmp} AND {raw} {NOT_NULL})")
        } else {
            format!("({cmp})")
        })))
    }

    /// `id(v) = 123` as a comparison of the graphid column, which an index
    /// on `id` answers; ids are never null, so this holds in any position.
    fn id_equals(&self, f: &Expr, c: &Expr) -> Option<Sql> {
        let Expr::Function {
            name,
            distinct: false,
            args,
        } = f
        else {
            return None;
        };
        let (true, [Expr::Var(v)], Expr::Literal(Literal::Int(n))) =
            (name.eq_ignore_ascii_case("id"), args.as_slice(), c)
        else {
            return None;
        };
        if *n < 0 {
            return None;
        }
        let id = self.entity_id(v)?;
        Some(Sql::bool(format!("({id} = '{n}'::ag_catalog.graphid)")))
    }
}

/// `v.key` with one plain key.
fn plain_property(e: &Expr) -> Option<(&str, &str)> {
    match e {
        Expr::Property(b, k) if !is_keyword(k) => match &**b {
            Expr::Var(v) => Some((v.as_str(), k.as_str())),
            _ => None,
        },
        _ => None,
    }
}

/// A non-null scalar literal.
fn constant(e: &Expr) -> Option<&Literal> {
    match e {
        Expr::Literal(Literal::Null) => None,
        Expr::Literal(l) => Some(l),
        _ => None,
    }
}
