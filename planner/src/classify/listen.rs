//! `LISTEN` and `UNLISTEN`, read exactly enough to run them elsewhere than
//! on the client's own server connection: one statement, its channel an
//! identifier PostgreSQL would take as it is. Anything else is `None`, and
//! goes to the server as it came.

use super::neutral::{RESERVED, TYPE_FUNC_NAME};
use crate::lexer::{self, Kind};

/// What a lone `LISTEN` or `UNLISTEN` does to the session's channels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenOp {
    /// `LISTEN channel`, with the channel's name as the server keeps it.
    Listen(String),
    /// `UNLISTEN channel`.
    Unlisten(String),
    /// `UNLISTEN *`.
    UnlistenAll,
}

/// PostgreSQL's names are at most this long; a longer one is truncated
/// with a NOTICE, which is the server's to give.
const MAX_NAME: usize = 63;

/// `sql` when it is exactly one `LISTEN` or `UNLISTEN`, with at most one
/// `;` after it.
pub fn listen_op(sql: &str) -> Option<ListenOp> {
    // An unterminated block comment is the server's error to give; any
    // block comment is left to it, rather than read here.
    if sql.contains("/*") || sql.contains('\0') {
        return None;
    }
    let toks: Vec<_> = lexer::tokens(sql).collect();
    let body = match toks.as_slice() {
        [body @ .., last] if last.is_punct(sql, ";") => body,
        all => all,
    };
    if body.iter().any(|t| t.unterminated) {
        return None;
    }
    let [verb, arg] = body else {
        return None;
    };
    if verb.is_word(sql, "unlisten") && arg.kind == Kind::Op && arg.text(sql) == "*" {
        return Some(ListenOp::UnlistenAll);
    }
    let name = channel(arg.kind, arg.text(sql))?;
    if verb.is_word(sql, "listen") {
        Some(ListenOp::Listen(name))
    } else if verb.is_word(sql, "unlisten") {
        Some(ListenOp::Unlisten(name))
    } else {
        None
    }
}

/// A channel name as the server keeps it: an unquoted ASCII identifier
/// folded to lower case that the grammar takes as a name (not a reserved
/// word), or a plain quoted one. `None` for anything the server might
/// answer otherwise (a name it truncates, `U&"..."`, an empty one).
fn channel(kind: Kind, text: &str) -> Option<String> {
    let name = match kind {
        Kind::Word => {
            if !text.is_ascii() {
                return None;
            }
            let lower = text.to_ascii_lowercase();
            // Reserved and type-or-function-name keywords are not a
            // `ColId`, so not a channel's name unquoted.
            if RESERVED.contains(&lower.as_str()) || TYPE_FUNC_NAME.contains(&lower.as_str()) {
                return None;
            }
            lower
        }
        Kind::QuotedIdent => text
            .strip_prefix('"')?
            .strip_suffix('"')?
            .replace("\"\"", "\""),
        _ => return None,
    };
    (!name.is_empty() && name.len() <= MAX_NAME).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::{ListenOp::*, listen_op};

    #[test]
    fn lone_listens_are_read() {
        let cases = [
            ("LISTEN a", Some(Listen("a".into()))),
            ("listen Chan_1;", Some(Listen("chan_1".into()))),
            (
                "  LISTEN \"Mixed \"\"Q\"\"\" ; ",
                Some(Listen("Mixed \"Q\"".into())),
            ),
            ("-- why\nUNLISTEN a", Some(Unlisten("a".into()))),
            ("UNLISTEN *", Some(UnlistenAll)),
            ("unlisten *;", Some(UnlistenAll)),
            ("LISTEN name", Some(Listen("name".into()))),
        ];
        for (sql, want) in cases {
            assert_eq!(listen_op(sql), want, "{sql}");
        }
    }

    #[test]
    fn anything_else_is_the_servers() {
        let long = format!("LISTEN {}", "x".repeat(64));
        for sql in [
            "LISTEN",
            "LISTEN a b",
            "LISTEN a; LISTEN b",
            "LISTEN a;;",
            "LISTEN select",
            "LISTEN \"\"",
            "LISTEN *",
            "LISTEN 'a'",
            "LISTEN a /* x */",
            "LISTEN a /* x",
            "LISTEN \"a",
            "LISTEN U&\"a\"",
            "LISTEN é",
            "NOTIFY a",
            "BEGIN; LISTEN a",
            long.as_str(),
        ] {
            assert_eq!(listen_op(sql), None, "{sql}");
        }
        let max = format!("LISTEN {}", "x".repeat(63));
        assert!(listen_op(&max).is_some());
    }
}
