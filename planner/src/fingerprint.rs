//! Statement fingerprints for the round-trip report: statements that differ only in literal
//! values, spacing, comments or keyword case group together.
//!
//! ```
//! use onetrip_planner::fingerprint::fingerprint;
//!
//! assert_eq!(
//!     fingerprint("SELECT *  FROM t /* hot */ WHERE id = 42 AND name = 'x'"),
//!     fingerprint("select * from t where id = 7 and name = 'yy'"),
//! );
//! assert_eq!(fingerprint("SELECT a FROM t WHERE b = $1 AND c = 1.5e3"), "select a from t where b = $1 and c = ?");
//! ```

use crate::lexer::{self, Kind};

/// Fingerprints are cut to at most this many bytes (on a character boundary).
pub const MAX_FINGERPRINT_LEN: usize = 200;

/// Normalises `sql`: string, number and dollar-quoted constants become `?`; unquoted words
/// are lower-cased (as PostgreSQL folds them); runs of whitespace and comments become one
/// space, dropped after `(` and before `)` `,` `;`; quoted identifiers, `$n` parameters and
/// operators are kept; a trailing `;` is dropped. Never panics; never longer than
/// [`MAX_FINGERPRINT_LEN`].
pub fn fingerprint(sql: &str) -> String {
    let mut out = String::new();
    fingerprint_into(sql, &mut out);
    out
}

/// [`fingerprint`] into `out`, which is cleared first: a caller that
/// fingerprints every statement keeps one buffer and allocates only to grow.
pub fn fingerprint_into(sql: &str, out: &mut String) {
    out.clear();
    let mut prev_end: Option<usize> = None;
    let mut prev_open = false;
    // A `-` here would be a sign, not subtraction (start, after an operator, `(` or `,`).
    let mut sign_context = true;
    let mut toks = lexer::tokens(sql).peekable();
    while let Some(mut t) = toks.next() {
        let text = t.text(sql);
        if text.is_empty() {
            continue;
        }
        // `-1` is one constant to PostgreSQL too.
        if sign_context
            && t.kind == Kind::Op
            && text == "-"
            && let Some(n) = toks.next_if(|n| n.kind == Kind::Number && n.start == t.end)
        {
            t.kind = Kind::Number;
            t.end = n.end;
        }
        let closes = t.kind == Kind::Punct && matches!(text, ")" | "," | ";" | "]");
        let gap = prev_end.is_some_and(|end| end < t.start);
        if gap && !closes && !prev_open {
            out.push(' ');
        }
        match t.kind {
            Kind::String | Kind::Number => out.push('?'),
            Kind::Word => out.extend(text.chars().map(|c| c.to_ascii_lowercase())),
            _ => out.push_str(text),
        }
        prev_end = Some(t.end);
        prev_open = t.kind == Kind::Punct && matches!(text, "(" | "[");
        sign_context =
            t.kind == Kind::Op || (t.kind == Kind::Punct && matches!(text, "(" | "[" | ","));
        if out.len() > MAX_FINGERPRINT_LEN + 1 {
            break;
        }
    }
    while out.ends_with(';') || out.ends_with(' ') {
        out.pop();
    }
    if out.len() > MAX_FINGERPRINT_LEN {
        let mut cut = MAX_FINGERPRINT_LEN;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_spacing() {
        for (sql, want) in [
            ("SELECT 1", "select ?"),
            (
                "select  'a''b', E'x\\'y', $$ a $$, $q$b$q$, 0x1F, .5, 1e-3, -2, 3 -4, - 5",
                "select ?, ?, ?, ?, ?, ?, ?, ?, ? -?, - ?",
            ),
            ("select b'101', x'ff', u&'d\\0061'", "select ?, ?, ?"),
            (
                "SELECT \"Mixed\" FROM \"T\" WHERE x = $1;",
                "select \"Mixed\" from \"T\" where x = $1",
            ),
            ("select f( 1 , 2 ) ; ", "select f(?, ?)"),
            (
                "select -- c\n a /* b /* nested */ */ from\n\t t",
                "select a from t",
            ),
            (
                "select v->>'k', x::int, a[1] from t",
                "select v->>?, x::int, a[?] from t",
            ),
            (
                "SELECT * FROM cypher('g', $$ MATCH (n) RETURN n $$) AS (n agtype)",
                "select * from cypher(?, ?) as (n agtype)",
            ),
            ("select 1; select 2;", "select ?; select ?"),
            ("", ""),
            ("   ", ""),
            (";", ""),
        ] {
            assert_eq!(fingerprint(sql), want, "{sql:?}");
            let mut reused = String::from("left over from before");
            fingerprint_into(sql, &mut reused);
            assert_eq!(reused, want, "{sql:?}");
        }
    }

    #[test]
    fn odd_input_and_length() {
        for sql in [
            "'",
            "\"",
            "$a$",
            "/*",
            "e'\\",
            "\0\u{1}",
            "ü€😀",
            "u&",
            "$",
            "1e",
            "0x",
        ] {
            let f = fingerprint(sql);
            assert!(f.len() <= MAX_FINGERPRINT_LEN);
        }
        let long = "select ".to_string() + &"é, ".repeat(1000);
        let f = fingerprint(&long);
        assert!(
            f.len() <= MAX_FINGERPRINT_LEN && f.len() > MAX_FINGERPRINT_LEN - 4,
            "{}",
            f.len()
        );
        assert!(f.starts_with("select é, é"));
        let many = "select ".to_string() + &"1, ".repeat(100_000);
        assert!(fingerprint(&many).len() <= MAX_FINGERPRINT_LEN);
    }
}
