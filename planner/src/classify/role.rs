//! ALTER ROLE ... PASSWORD, and the other statements after which a role's
//! stored password is not what it was: a pooler that keeps looked-up
//! passwords forgets that role's.

use crate::lexer::{self, Kind, Token};

/// A role a statement names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleName {
    /// As PostgreSQL reads it: unquoted folded to lower case, quoted as
    /// written (`""` is `"`).
    Named(String),
    /// `CURRENT_USER`, `CURRENT_ROLE` or `SESSION_USER`: the session's.
    Current,
    /// A name in a form not read here (`U&"..."`): any role.
    Unknown,
}

/// The roles whose stored password a statement of `sql` changes or takes
/// away: `ALTER ROLE|USER r [WITH] ... [ENCRYPTED] PASSWORD ...` (psql's
/// `\password` sends `ALTER USER r PASSWORD '<verifier>'`), `ALTER
/// ROLE|USER|GROUP r RENAME TO s` (both: a rename clears an md5 password,
/// and `s` was no role before), and `DROP ROLE|USER|GROUP [IF EXISTS] r
/// [, ...]`. Other statements, and ALTER ROLE's SET and RESET, name none.
pub fn password_changes(sql: &str) -> Vec<RoleName> {
    let mut out = Vec::new();
    for p in lexer::split_statements(sql) {
        if let Some(text) = sql.get(p.start..p.end) {
            roles_of(text, &mut out);
        }
    }
    out
}

fn role(text: &str, t: &Token) -> RoleName {
    let current = ["current_user", "current_role", "session_user"];
    if current.iter().any(|w| t.is_word(text, w)) {
        return RoleName::Current;
    }
    match super::prepared::name(text, t) {
        Some(n) => RoleName::Named(n),
        None => RoleName::Unknown,
    }
}

fn roles_of(text: &str, out: &mut Vec<RoleName>) {
    let toks: Vec<Token> = lexer::tokens(text).collect();
    let word = |i: usize, w: &str| toks.get(i).is_some_and(|t| t.is_word(text, w));
    let is_name = |i: usize| {
        toks.get(i)
            .is_some_and(|t| matches!(t.kind, Kind::Word | Kind::QuotedIdent))
    };
    let alter = word(0, "alter");
    if !alter && !word(0, "drop") {
        return;
    }
    if !(word(1, "role") || word(1, "user") || word(1, "group")) {
        return;
    }
    // USER MAPPING names a server's user, not a role.
    if word(1, "user") && word(2, "mapping") && (word(3, "for") || word(3, "if")) {
        return;
    }
    if !alter {
        let mut i = if word(2, "if") && word(3, "exists") {
            4
        } else {
            2
        };
        while is_name(i) {
            out.push(role(text, &toks[i]));
            if !toks.get(i + 1).is_some_and(|t| t.is_punct(text, ",")) {
                break;
            }
            i += 2;
        }
        return;
    }
    // ALTER ROLE ALL ... is SET or RESET for every role.
    if !is_name(2) || word(2, "all") {
        return;
    }
    if word(3, "rename") && word(4, "to") && is_name(5) {
        out.push(role(text, &toks[2]));
        out.push(role(text, &toks[5]));
        return;
    }
    // Options only: SET, RESET and IN DATABASE ... SET change settings.
    if word(3, "set") || word(3, "reset") || word(3, "in") || word(1, "group") {
        return;
    }
    if toks[3..].iter().any(|t| t.is_word(text, "password")) {
        out.push(role(text, &toks[2]));
    }
}

#[cfg(test)]
mod tests {
    use super::{RoleName::*, password_changes};

    fn named(names: &[&str]) -> Vec<super::RoleName> {
        names.iter().map(|n| Named((*n).to_owned())).collect()
    }

    #[test]
    fn password_changes_name_their_roles() {
        for sql in [
            "ALTER USER u PASSWORD 'x'",
            "alter role U with password 'x'",
            "ALTER ROLE u ENCRYPTED PASSWORD 'md5abc'",
            "ALTER ROLE u LOGIN VALID UNTIL 'infinity' PASSWORD NULL",
            "ALTER USER u PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5'",
            "/* c */ ALTER USER\n u\tPASSWORD 'x';",
        ] {
            assert_eq!(password_changes(sql), named(&["u"]), "{sql}");
        }
        assert_eq!(
            password_changes(r#"ALTER USER "Mixed ""Q""" PASSWORD 'x'"#),
            named(&["Mixed \"Q\""])
        );
        assert_eq!(
            password_changes("ALTER ROLE current_user PASSWORD 'x'"),
            vec![Current]
        );
        assert_eq!(
            password_changes(r#"ALTER ROLE U&"\0061" PASSWORD 'x'"#),
            vec![Unknown]
        );
        assert_eq!(
            password_changes("ALTER ROLE a RENAME TO \"B\""),
            named(&["a", "B"])
        );
        assert_eq!(
            password_changes("DROP ROLE IF EXISTS a, b; DROP USER c"),
            named(&["a", "b", "c"])
        );
        assert_eq!(
            password_changes("ALTER TABLE t ADD c int; ALTER USER v PASSWORD 'y'"),
            named(&["v"])
        );
    }

    #[test]
    fn other_statements_name_none() {
        for sql in [
            "ALTER ROLE u SET password_encryption = 'md5'",
            "ALTER ROLE u IN DATABASE d SET search_path = password",
            "ALTER ROLE u RESET ALL",
            "ALTER ROLE ALL SET work_mem = '1MB'",
            "ALTER ROLE u CONNECTION LIMIT 3",
            "ALTER ROLE u VALID UNTIL 'password'",
            "ALTER GROUP g ADD USER u",
            "ALTER USER MAPPING FOR u SERVER s OPTIONS (SET password 'x')",
            "DROP USER MAPPING IF EXISTS FOR u SERVER s",
            "ALTER TABLE password ADD c int",
            "DROP TABLE role",
            "SELECT 'ALTER USER u PASSWORD x'",
            "ALTER USER",
            "DROP ROLE",
        ] {
            assert!(password_changes(sql).is_empty(), "{sql}");
        }
    }
}
