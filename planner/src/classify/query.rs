//! Judging a query (SELECT / VALUES / TABLE, with CTEs and subqueries) by walking it with
//! sqlparser's visitor: row locks, SELECT INTO, data-modifying CTEs, and every function call
//! in any clause (select list, FROM, WHERE, ORDER BY, LATERAL, CTEs, subqueries ...).

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, LockType, ObjectName, ObjectNamePart,
    Query, Select, SetExpr, TableFactor, Value, Visit, Visitor,
};

use super::functions::{self, FunctionVerdict};
use super::isolation::{self, IsolationChange};
use super::{Known, StatementClass, Verdict};
use crate::cypher::effect::CypherEffect;

/// Judges a top-level query statement.
pub(crate) fn classify(query: &Query, extra: &Known) -> Verdict {
    // `WITH ... INSERT/UPDATE/DELETE/MERGE` is a write at the top level, not a maybe-write.
    if let Some(kind) = dml_kind(&query.body) {
        return Verdict::new(StatementClass::Write, kind);
    }
    let mut walker = Walker {
        extra,
        verdict: Verdict::new(StatementClass::Read, read_reason(&query.body)),
        saw_cypher: false,
    };
    let _ = query.visit(&mut walker);
    let mut v = walker.verdict;
    if v.class == StatementClass::Read && walker.saw_cypher {
        v.reason = "SELECT over a read-only cypher() query".into();
    }
    // A query's isolation effect is exactly what set_config calls recorded.
    v.isolation_exact = true;
    v
}

fn read_reason(body: &SetExpr) -> &'static str {
    match body {
        SetExpr::Values(_) => "VALUES",
        SetExpr::Table(_) => "TABLE",
        SetExpr::Query(q) => read_reason(&q.body),
        _ => "SELECT",
    }
}

/// The data-modifying statement a query body is, if it is one.
fn dml_kind(body: &SetExpr) -> Option<&'static str> {
    match body {
        SetExpr::Insert(_) => Some("INSERT"),
        SetExpr::Update(_) => Some("UPDATE"),
        SetExpr::Delete(_) => Some("DELETE"),
        SetExpr::Merge(_) => Some("MERGE"),
        SetExpr::Query(q) => dml_kind(&q.body),
        SetExpr::SetOperation { left, right, .. } => dml_kind(left).or_else(|| dml_kind(right)),
        _ => None,
    }
}

struct Walker<'a> {
    extra: &'a Known<'a>,
    verdict: Verdict,
    saw_cypher: bool,
}

impl Visitor for Walker<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        // Nested queries that modify data can only be CTEs (PostgreSQL allows them nowhere
        // else); the top-level body was handled by `classify`.
        if let Some(kind) = dml_kind(&query.body) {
            self.verdict.raise(
                StatementClass::MaybeWrite,
                format!("data-modifying CTE ({kind})"),
            );
        }
        if let Some(lock) = query.locks.first() {
            let what = match lock.lock_type {
                LockType::Update => "SELECT ... FOR UPDATE",
                LockType::Share => "SELECT ... FOR SHARE",
            };
            // Row locks mark tuples (a write, with a transaction id) and are released by the
            // transaction end an early Sync would bring forward.
            self.verdict.raise(StatementClass::Write, what);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        if select.into.is_some() {
            self.verdict
                .raise(StatementClass::Write, "SELECT INTO creates a table");
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = expr {
            let args: &[FunctionArg] = match &f.args {
                FunctionArguments::List(list) => &list.args,
                _ => &[],
            };
            self.call(&f.name, args);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, tf: &TableFactor) -> ControlFlow<()> {
        match tf {
            TableFactor::Table {
                name,
                args: Some(args),
                ..
            } => self.call(name, &args.args),
            TableFactor::Function { name, args, .. } => self.call(name, args),
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

impl Walker<'_> {
    fn call(&mut self, name: &ObjectName, args: &[FunctionArg]) {
        let Some(parts) = name_parts(name) else {
            self.verdict
                .raise(StatementClass::Unsafe, format!("unknown function {name}"));
            return;
        };
        let last = parts.last().map(String::as_str).unwrap_or("");
        let is_cypher = last == "cypher"
            && (parts.len() == 1 || (parts.len() == 2 && parts[0] == "ag_catalog"));
        if is_cypher {
            self.cypher(args);
            return;
        }
        if last == "set_config" {
            self.set_config(args);
        }
        if functions::TRANSACTION_TIME.contains(&last) {
            self.verdict.transaction_time = true;
        }
        match functions::judge(&parts, self.extra.functions) {
            FunctionVerdict::ReadOnly => {}
            FunctionVerdict::SideEffect(why) => self.verdict.raise(
                StatementClass::Unsafe,
                format!("function {} has side effects ({why})", parts.join(".")),
            ),
            FunctionVerdict::Unknown => self.verdict.raise(
                StatementClass::Unsafe,
                format!("unknown function {}", parts.join(".")),
            ),
        }
    }

    fn cypher(&mut self, args: &[FunctionArg]) {
        self.saw_cypher = true;
        let text = args.get(1).and_then(arg_expr).and_then(string_literal);
        let Some(text) = text else {
            self.verdict.raise(
                StatementClass::Unsafe,
                "cypher() query text is not a literal",
            );
            return;
        };
        match self.extra.effect(text) {
            CypherEffect::Read => {}
            CypherEffect::Write(kw) => self
                .verdict
                .raise(StatementClass::Write, format!("cypher query contains {kw}")),
            CypherEffect::Unknown(why) => self.verdict.raise(StatementClass::Unsafe, why),
        }
    }

    /// `set_config(name, value, is_local)` is unsafe anyway; also record an isolation change
    /// when it sets one (or may: a non-literal name).
    fn set_config(&mut self, args: &[FunctionArg]) {
        let lit = |i: usize| args.get(i).and_then(arg_expr).and_then(string_literal);
        let change = match lit(0) {
            None => Some(IsolationChange::Unknown),
            Some(name) => isolation::isolation_guc(name.trim()).map(|guc| {
                let local = args.get(2).and_then(arg_expr).and_then(bool_literal);
                match (lit(1), local) {
                    (Some(value), Some(local)) => {
                        isolation::change_for_setting(guc, Some(value), local)
                    }
                    _ => IsolationChange::Unknown,
                }
            }),
        };
        self.verdict.isolation.extend(change);
    }
}

/// Normalised name parts: unquoted identifiers fold to lower case, quoted ones stay as written.
fn name_parts(name: &ObjectName) -> Option<Vec<String>> {
    name.0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(id) if id.quote_style.is_some() => Some(id.value.clone()),
            ObjectNamePart::Identifier(id) => Some(id.value.to_lowercase()),
            ObjectNamePart::Function(_) => None,
        })
        .collect()
}

fn arg_expr(arg: &FunctionArg) -> Option<&Expr> {
    match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
        | FunctionArg::Named {
            arg: FunctionArgExpr::Expr(e),
            ..
        }
        | FunctionArg::ExprNamed {
            arg: FunctionArgExpr::Expr(e),
            ..
        } => Some(e),
        _ => None,
    }
}

fn string_literal(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) => Some(s),
            Value::DollarQuotedString(d) => Some(&d.value),
            _ => None,
        },
        // `'...'::text`, `$$...$$::cstring`
        Expr::Cast { expr, .. } | Expr::Nested(expr) => string_literal(expr),
        _ => None,
    }
}

fn bool_literal(expr: &Expr) -> Option<bool> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Boolean(b) => Some(*b),
            Value::SingleQuotedString(s) => match s.to_ascii_lowercase().as_str() {
                "t" | "true" | "on" | "yes" | "1" => Some(true),
                "f" | "false" | "off" | "no" | "0" => Some(false),
                _ => None,
            },
            _ => None,
        },
        Expr::Nested(e) | Expr::Cast { expr: e, .. } => bool_literal(e),
        _ => None,
    }
}
