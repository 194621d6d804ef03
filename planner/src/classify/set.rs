//! Session settings a transaction pooler can carry from one server
//! connection to another: a statement that is one plain `SET`, `RESET` or
//! `RESET ALL`, which it replays on the next connection (`RESET ALL`, then
//! the client's `SET`s in order) instead of pinning the client.

use crate::lexer::{self, Kind};

/// What one replayable statement does to the session's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionSet {
    /// `SET [SESSION] name {= | TO} value`: `name` lower-cased.
    Set(String),
    /// `RESET name`, `SET name TO DEFAULT`.
    Reset(String),
    /// `RESET ALL`.
    ResetAll,
}

/// Settings never replayed: who the session is, and the transaction
/// defaults the proxy reads from the server.
const NOT_REPLAYED: &[&str] = &[
    "role",
    "session_authorization",
    "default_transaction_isolation",
    "default_transaction_read_only",
    "default_transaction_deferrable",
    "transaction_isolation",
    "transaction_read_only",
    "transaction_deferrable",
];

/// `sql` as one replayable statement, or `None` (then it pins, if it
/// changes the session at all).
pub fn session_set(sql: &str) -> Option<SessionSet> {
    let mut words = Vec::with_capacity(8);
    let mut ended = false;
    for t in lexer::tokens(sql) {
        if t.unterminated || ended {
            return None;
        }
        if t.is_punct(sql, ";") {
            ended = true;
            continue;
        }
        words.push(t);
    }
    let word = |i: usize| {
        words
            .get(i)
            .filter(|t| t.kind == Kind::Word)
            .map(|t| t.text(sql))
    };
    let is = |i: usize, w: &str| word(i).is_some_and(|x| x.eq_ignore_ascii_case(w));
    // A setting's name: a word, or two joined by a dot (an extension's).
    let name = |i: usize| -> Option<(String, usize)> {
        let first = word(i)?;
        let dotted = words.get(i + 1).is_some_and(|t| t.is_punct(sql, "."));
        let (text, next) = match dotted {
            true => (format!("{first}.{}", word(i + 2)?), i + 3),
            false => (first.to_owned(), i + 1),
        };
        let text = text.to_ascii_lowercase();
        (!NOT_REPLAYED.contains(&text.as_str())).then_some((text, next))
    };
    if is(0, "reset") {
        if words.len() != 2 {
            return None;
        }
        if is(1, "all") {
            return Some(SessionSet::ResetAll);
        }
        return name(1).map(|(n, _)| SessionSet::Reset(n));
    }
    if !is(0, "set") {
        return None;
    }
    let at = if is(1, "session") && !is(2, "authorization") && !is(2, "characteristics") {
        2
    } else {
        1
    };
    // SET LOCAL, TRANSACTION, CONSTRAINTS, TIME ZONE, NAMES, SCHEMA, ROLE,
    // XML OPTION: their own grammar, or not the session's.
    if [
        "local",
        "transaction",
        "constraints",
        "time",
        "names",
        "schema",
        "xml",
    ]
    .iter()
    .any(|w| is(at, w))
    {
        return None;
    }
    let (n, next) = name(at)?;
    let assigns = is(next, "to")
        || words
            .get(next)
            .is_some_and(|t| t.is_punct(sql, "=") || t.kind == Kind::Op && t.text(sql) == "=");
    if !assigns || words.len() <= next + 1 {
        return None;
    }
    if words.len() == next + 2 && is(next + 1, "default") {
        return Some(SessionSet::Reset(n));
    }
    Some(SessionSet::Set(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_sets_and_resets_are_replayable() {
        let set = |n: &str| Some(SessionSet::Set(n.into()));
        let reset = |n: &str| Some(SessionSet::Reset(n.into()));
        assert_eq!(
            session_set("SET statement_timeout = '5s'"),
            set("statement_timeout")
        );
        assert_eq!(
            session_set("set SESSION DateStyle TO ISO, MDY;"),
            set("datestyle")
        );
        assert_eq!(
            session_set("SET application_name = 'a;b'"),
            set("application_name")
        );
        assert_eq!(session_set("SET myext.opt = 1"), set("myext.opt"));
        assert_eq!(session_set("SET work_mem TO DEFAULT"), reset("work_mem"));
        assert_eq!(session_set("RESET work_mem"), reset("work_mem"));
        assert_eq!(session_set("reset all"), Some(SessionSet::ResetAll));
        assert_eq!(
            session_set("SET search_path = a, \"$user\""),
            set("search_path")
        );
    }

    #[test]
    fn anything_else_is_not() {
        for s in [
            "SET LOCAL work_mem = '1MB'",
            "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            "SET TIME ZONE 'UTC'",
            "SET ROLE other",
            "SET SESSION AUTHORIZATION other",
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
            "SET default_transaction_isolation = 'serializable'",
            "SET role = other",
            "SET work_mem = '1MB'; SELECT 1",
            "SET work_mem",
            "SET work_mem = 'x",
            "RESET",
            "RESET ROLE",
            "SELECT set_config('work_mem', '1MB', false)",
            "DISCARD ALL",
        ] {
            assert_eq!(session_set(s), None, "{s}");
        }
    }
}
