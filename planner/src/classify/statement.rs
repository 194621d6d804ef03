//! Classifying one parsed statement by its kind. Only statements known to be reads, settings
//! or transaction control get those classes; everything else is a write, so a statement kind
//! this file has never heard of can't be coalesced.

use std::borrow::Cow;

use sqlparser::ast::{
    ContextModifier, DiscardObject, Expr, ObjectName, Reset, Set, Statement, UtilityOption, Value,
};

use super::isolation::{self, IsolationChange};
use super::{Known, StatementClass, TransactionStatement, Verdict, query};
use crate::lexer::{self, Kind};

use StatementClass::{Read, SessionSetting, TransactionControl, Unsafe, Write};

pub(crate) fn classify(stmt: &Statement, text: &str, extra: &Known) -> Verdict {
    let exact = |class, reason: &'static str| Verdict::new(class, reason).with_isolation(None);
    match stmt {
        Statement::Query(q) => query::classify(q, extra),
        Statement::ShowVariable { .. } | Statement::ShowVariables { .. } => exact(Read, "SHOW"),
        Statement::Explain {
            analyze,
            options,
            statement,
            ..
        } => {
            if *analyze || options.as_deref().is_some_and(has_analyze) {
                // EXPLAIN ANALYZE runs the statement.
                let inner = classify(statement, text, extra);
                let reason = format!("EXPLAIN ANALYZE: {}", inner.reason);
                Verdict::new(inner.class, reason).with_isolation(None)
            } else {
                exact(Read, "EXPLAIN without ANALYZE")
            }
        }

        Statement::StartTransaction {
            modes,
            begin,
            modifier,
            statements,
            exception,
            has_end_keyword,
            ..
        } => {
            let reason = if *begin { "BEGIN" } else { "START TRANSACTION" };
            let change = isolation::from_modes(modes)
                .map(|level| level.map_or(IsolationChange::Unknown, IsolationChange::Transaction));
            let mut v = Verdict::new(TransactionControl, reason).with_isolation(change);
            // Only PostgreSQL's own forms (no other dialect's modifier or
            // BEGIN ... END block).
            if modifier.is_none()
                && statements.is_empty()
                && exception.is_none()
                && !has_end_keyword
            {
                v.transaction = Some(TransactionStatement::Begin { tag: reason });
            }
            v
        }
        Statement::Commit {
            chain, modifier, ..
        } => {
            let mut v = exact(TransactionControl, "COMMIT");
            if !chain && modifier.is_none() {
                v.transaction = Some(TransactionStatement::Commit);
            }
            v
        }
        Statement::Rollback {
            savepoint: Some(_), ..
        } => exact(TransactionControl, "ROLLBACK TO SAVEPOINT"),
        Statement::Rollback { chain, .. } => {
            let mut v = exact(TransactionControl, "ROLLBACK");
            if !chain {
                v.transaction = Some(TransactionStatement::Rollback);
            }
            v
        }
        Statement::Savepoint { .. } => exact(TransactionControl, "SAVEPOINT"),
        Statement::ReleaseSavepoint { .. } => exact(TransactionControl, "RELEASE SAVEPOINT"),

        Statement::Set(set) => classify_set(set),
        Statement::Reset(r) => {
            let change = match &r.reset {
                Reset::ALL => Some(IsolationChange::SessionDefault),
                Reset::SessionAuthorization => None,
                Reset::ConfigurationParameter(name) => {
                    match guc_name(name).and_then(|n| isolation::isolation_guc(&n)) {
                        Some(isolation::IsolationGuc::Default) => {
                            Some(IsolationChange::SessionDefault)
                        }
                        Some(isolation::IsolationGuc::Current) => Some(IsolationChange::Unknown),
                        None => None,
                    }
                }
            };
            Verdict::new(SessionSetting, "RESET").with_isolation(change)
        }
        Statement::Discard { object_type } => {
            // DISCARD ALL includes RESET ALL.
            let change = matches!(object_type, DiscardObject::ALL)
                .then_some(IsolationChange::SessionDefault);
            Verdict::new(SessionSetting, "DISCARD").with_isolation(change)
        }
        // LISTEN/UNLISTEN change the session's channel set (at commit): session state.
        Statement::LISTEN { .. } => exact(SessionSetting, "LISTEN"),
        Statement::UNLISTEN { .. } => exact(SessionSetting, "UNLISTEN"),
        Statement::NOTIFY { .. } => exact(Unsafe, "NOTIFY sends a notification"),
        Statement::Prepare { .. } => exact(SessionSetting, "PREPARE creates a prepared statement"),
        Statement::Deallocate { .. } => exact(SessionSetting, "DEALLOCATE"),
        // `LOAD 'age'`, as AGE clients do per session.
        Statement::Load { .. } => exact(SessionSetting, "LOAD loads a library into the session"),
        Statement::Declare { .. } => exact(SessionSetting, "DECLARE CURSOR"),
        Statement::Close { .. } => exact(SessionSetting, "CLOSE cursor"),
        Statement::Execute { .. } => {
            exact(Unsafe, "EXECUTE runs a prepared statement not known here")
        }
        Statement::Fetch { .. } => exact(Unsafe, "FETCH runs a cursor's query, not known here"),

        Statement::Insert(_) => exact(Write, "INSERT"),
        Statement::Update(_) => exact(Write, "UPDATE"),
        Statement::Delete(_) => exact(Write, "DELETE"),
        Statement::Merge(_) => exact(Write, "MERGE"),
        Statement::Copy { .. } => exact(Write, "COPY"),
        Statement::Call(_) => exact(Write, "CALL runs a procedure"),
        _ => Verdict::new(
            Write,
            format!("write statement ({})", leading_keywords(text)),
        ),
    }
}

fn classify_set(set: &Set) -> Verdict {
    match set {
        Set::SetTransaction { modes, session, .. } => {
            let level = isolation::from_modes(modes);
            if *session {
                let change =
                    level.map(|l| l.map_or(IsolationChange::Unknown, IsolationChange::Session));
                Verdict::new(SessionSetting, "SET SESSION CHARACTERISTICS").with_isolation(change)
            } else {
                let change =
                    level.map(|l| l.map_or(IsolationChange::Unknown, IsolationChange::Transaction));
                Verdict::new(TransactionControl, "SET TRANSACTION").with_isolation(change)
            }
        }
        Set::SingleAssignment {
            scope,
            variable,
            values,
            ..
        } => assignment(scope.as_ref(), variable, values),
        Set::MultipleAssignments { assignments } => {
            let mut v = Verdict::new(SessionSetting, "SET").with_isolation(None);
            for a in assignments {
                let one = assignment(a.scope.as_ref(), &a.name, std::slice::from_ref(&a.value));
                v.isolation.extend(one.isolation);
            }
            v
        }
        Set::ParenthesizedAssignments { variables, .. } => {
            // Not PostgreSQL syntax; only note that isolation might change.
            let touches = variables
                .iter()
                .any(|n| guc_name(n).is_none_or(|n| isolation::isolation_guc(&n).is_some()));
            Verdict::new(SessionSetting, "SET")
                .with_isolation(touches.then_some(IsolationChange::Unknown))
        }
        Set::SetRole { .. } => Verdict::new(SessionSetting, "SET ROLE").with_isolation(None),
        Set::SetSessionAuthorization(_) => {
            Verdict::new(SessionSetting, "SET SESSION AUTHORIZATION").with_isolation(None)
        }
        Set::SetTimeZone { .. } => {
            Verdict::new(SessionSetting, "SET TIME ZONE").with_isolation(None)
        }
        _ => Verdict::new(SessionSetting, "SET").with_isolation(None),
    }
}

/// `SET [SESSION | LOCAL] name { = | TO } value`.
fn assignment(scope: Option<&ContextModifier>, variable: &ObjectName, values: &[Expr]) -> Verdict {
    let name = guc_name(variable);
    let reason: Cow<'static, str> = match &name {
        Some(n) => format!("SET {n}").into(),
        None => "SET".into(),
    };
    let guc = name.as_deref().and_then(isolation::isolation_guc);
    let change = guc.map(|guc| match isolation::set_value(values) {
        Ok(value) => {
            let local = matches!(scope, Some(ContextModifier::Local));
            isolation::change_for_setting(guc, value.as_deref(), local)
        }
        Err(()) => IsolationChange::Unknown,
    });
    Verdict::new(SessionSetting, reason).with_isolation(change)
}

/// A configuration parameter name, lower-cased (`None` if it isn't a plain name).
fn guc_name(name: &ObjectName) -> Option<String> {
    let parts: Option<Vec<String>> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(|id| id.value.to_ascii_lowercase()))
        .collect();
    parts.map(|p| p.join("."))
}

/// `EXPLAIN (ANALYZE [value], ...)`, in either spelling (`ANALYSE` too) and
/// any case: the statement runs unless the value is one PostgreSQL reads as
/// false. A value it can't read is an error, so it doesn't run either way.
fn has_analyze(options: &[UtilityOption]) -> bool {
    options.iter().any(|o| {
        is_analyze_word(&o.name.value)
            && match &o.arg {
                None => true,
                Some(Expr::Value(v)) => match &v.value {
                    Value::Boolean(b) => *b,
                    Value::Number(n, _) => !means_false(n),
                    Value::SingleQuotedString(s) => !means_false(s),
                    _ => true,
                },
                Some(Expr::Identifier(id)) => !means_false(&id.value),
                // Anything else: assume it runs.
                Some(_) => true,
            }
    })
}

pub(crate) fn is_analyze_word(w: &str) -> bool {
    w.eq_ignore_ascii_case("analyze") || w.eq_ignore_ascii_case("analyse")
}

/// Does PostgreSQL's boolean parser read `v` as false? It takes any prefix
/// of `false` and `no`, `of`/`off`, and `0`.
fn means_false(v: &str) -> bool {
    let v = v.trim().to_ascii_lowercase();
    (!v.is_empty() && "false".starts_with(&v))
        || matches!(v.as_str(), "n" | "no" | "of" | "off" | "0")
}

/// The statement's first keyword, plus the second if it is a keyword too (`CREATE TABLE`).
pub(crate) fn leading_keywords(text: &str) -> String {
    let mut words = lexer::tokens(text)
        .take(2)
        .take_while(|t| t.kind == Kind::Word)
        .map(|t| t.text(text).to_ascii_uppercase());
    let first = words.next().unwrap_or_default();
    match words.next() {
        Some(second)
            if sqlparser::keywords::ALL_KEYWORDS
                .binary_search(&second.as_str())
                .is_ok() =>
        {
            format!("{first} {second}")
        }
        _ => first,
    }
}
