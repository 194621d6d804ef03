//! Transaction isolation: which level a statement sets, and for how long.
//!
//! Coalescing is only correct under READ COMMITTED, so the proxy tracks each session's level
//! from its startup parameters and from the statements it sees. PostgreSQL does not report
//! `default_transaction_isolation` in ParameterStatus, so statements are the only source.

use sqlparser::ast::{Expr, TransactionIsolationLevel, TransactionMode, Value};

/// A PostgreSQL transaction isolation level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IsolationLevel {
    ReadUncommitted,
    ReadCommitted,
    RepeatableRead,
    Serializable,
}

impl IsolationLevel {
    /// The level PostgreSQL actually runs: READ UNCOMMITTED behaves as READ COMMITTED.
    pub fn effective(self) -> IsolationLevel {
        match self {
            IsolationLevel::ReadUncommitted => IsolationLevel::ReadCommitted,
            other => other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IsolationLevel::ReadUncommitted => "read uncommitted",
            IsolationLevel::ReadCommitted => "read committed",
            IsolationLevel::RepeatableRead => "repeatable read",
            IsolationLevel::Serializable => "serializable",
        }
    }
}

impl std::fmt::Display for IsolationLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change of isolation made by one statement, in statement order.
///
/// Changes take effect as PostgreSQL applies them: a `SET` inside a transaction block that
/// later rolls back is undone, which the caller has to account for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IsolationChange {
    /// The current (or just begun) transaction runs at this level; it ends with the
    /// transaction. `BEGIN/START TRANSACTION ISOLATION LEVEL x`, `SET TRANSACTION ...`,
    /// `SET LOCAL default_transaction_isolation`, `SET transaction_isolation`.
    Transaction(IsolationLevel),
    /// The session's default from now on: `SET SESSION CHARACTERISTICS AS TRANSACTION ...`,
    /// `SET [SESSION] default_transaction_isolation`, `set_config(..., false)`.
    Session(IsolationLevel),
    /// The session's default goes back to the value the session started with (startup
    /// parameter, role or database setting, or server default): `RESET
    /// default_transaction_isolation`, `RESET ALL`, `DISCARD ALL`, `SET ... TO DEFAULT`.
    SessionDefault,
    /// The statement may change isolation in a way not understood here; treat the session's
    /// level as unknown.
    Unknown,
}

/// Parses an isolation level name as PostgreSQL accepts it for `default_transaction_isolation`
/// (startup parameter, `SET`, `set_config`): case-insensitive, optionally quoted, words
/// separated by spaces, underscores or hyphens.
pub fn parse_isolation_name(name: &str) -> Option<IsolationLevel> {
    let s = name.trim();
    let s = strip_quotes(s, '\'')
        .or_else(|| strip_quotes(s, '"'))
        .unwrap_or(s);
    let words: Vec<String> = s
        .split(|c: char| c.is_whitespace() || c == '_' || c == '-')
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["read", "uncommitted"] => Some(IsolationLevel::ReadUncommitted),
        ["read", "committed"] => Some(IsolationLevel::ReadCommitted),
        ["repeatable", "read"] => Some(IsolationLevel::RepeatableRead),
        ["serializable"] => Some(IsolationLevel::Serializable),
        _ => None,
    }
}

fn strip_quotes(s: &str, q: char) -> Option<&str> {
    s.strip_prefix(q)?.strip_suffix(q)
}

/// The level named by `BEGIN`/`SET TRANSACTION` modes, if any. Several ISOLATION LEVEL modes:
/// PostgreSQL uses the last one.
pub(crate) fn from_modes(modes: &[TransactionMode]) -> Option<Option<IsolationLevel>> {
    modes.iter().rev().find_map(|m| match m {
        TransactionMode::IsolationLevel(level) => Some(match level {
            TransactionIsolationLevel::ReadUncommitted => Some(IsolationLevel::ReadUncommitted),
            TransactionIsolationLevel::ReadCommitted => Some(IsolationLevel::ReadCommitted),
            TransactionIsolationLevel::RepeatableRead => Some(IsolationLevel::RepeatableRead),
            TransactionIsolationLevel::Serializable => Some(IsolationLevel::Serializable),
            // Not a PostgreSQL level: unknown.
            _ => None,
        }),
        _ => None,
    })
}

/// Which isolation setting a configuration parameter name is, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IsolationGuc {
    /// `default_transaction_isolation`
    Default,
    /// `transaction_isolation`: the current transaction's level.
    Current,
}

pub(crate) fn isolation_guc(name: &str) -> Option<IsolationGuc> {
    if name.eq_ignore_ascii_case("default_transaction_isolation") {
        Some(IsolationGuc::Default)
    } else if name.eq_ignore_ascii_case("transaction_isolation") {
        Some(IsolationGuc::Current)
    } else {
        None
    }
}

/// The change made by setting `guc` to `value` (`None` = DEFAULT), with `local` = SET LOCAL or
/// `set_config(..., true)`.
pub(crate) fn change_for_setting(
    guc: IsolationGuc,
    value: Option<&str>,
    local: bool,
) -> IsolationChange {
    let Some(value) = value else {
        return match (guc, local) {
            (IsolationGuc::Default, false) => IsolationChange::SessionDefault,
            // DEFAULT for the transaction's own level, or LOCAL: not worth modelling.
            _ => IsolationChange::Unknown,
        };
    };
    match (parse_isolation_name(value), guc, local) {
        (None, _, _) => IsolationChange::Unknown,
        (Some(level), IsolationGuc::Default, false) => IsolationChange::Session(level),
        (Some(level), _, _) => IsolationChange::Transaction(level),
    }
}

/// The text of a `SET` value: a string constant or a bare word; `None` for DEFAULT.
/// `Err(())` when the value is something else (an expression, several values).
pub(crate) fn set_value(values: &[Expr]) -> Result<Option<String>, ()> {
    match values {
        [Expr::Value(v)] => match &v.value {
            Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) => Ok(Some(s.clone())),
            _ => Err(()),
        },
        [Expr::Identifier(id)]
            if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("default") =>
        {
            Ok(None)
        }
        [Expr::Identifier(id)] => Ok(Some(id.value.clone())),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        use IsolationLevel::*;
        for (s, l) in [
            ("read committed", Some(ReadCommitted)),
            ("READ COMMITTED", Some(ReadCommitted)),
            ("'repeatable read'", Some(RepeatableRead)),
            ("repeatable_read", Some(RepeatableRead)),
            ("\"Serializable\"", Some(Serializable)),
            ("  read   uncommitted ", Some(ReadUncommitted)),
            ("read-committed", Some(ReadCommitted)),
            ("snapshot", None),
            ("", None),
            ("read", None),
            ("'", None),
        ] {
            assert_eq!(parse_isolation_name(s), l, "{s:?}");
        }
        assert_eq!(ReadUncommitted.effective(), ReadCommitted);
    }
}
