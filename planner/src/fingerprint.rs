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

/// True only when `a` and `b` have the same [`fingerprint`]: they are equal but
/// for the values of plain number and string literals. A byte walk, about a
/// tenth of the cost of fingerprinting, for a caller that keeps the last text
/// it fingerprinted: applications send the same statement with new literals.
/// False whenever it is unsure (comments, dollar quotes, backslashes in a
/// string, string prefixes, numbers it does not read whole): the caller then
/// fingerprints.
pub fn same_but_literals(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        let at_literal = |s: &[u8], k: usize| k == 0 || !is_word_byte(s[k - 1]);
        if x.is_ascii_digit() && y.is_ascii_digit() && at_literal(a, i) && at_literal(b, j) {
            match (number_end(a, i), number_end(b, j)) {
                (Some(ei), Some(ej)) => (i, j) = (ei, ej),
                _ => return false,
            }
            continue;
        }
        if x == b'\'' && y == b'\'' {
            if !at_literal(a, i) || !at_literal(b, j) {
                // A prefixed string (E'', B'', U&''): its end is the lexer's to find.
                return false;
            }
            match (string_end(a, i), string_end(b, j)) {
                (Some(ei), Some(ej)) => (i, j) = (ei, ej),
                _ => return false,
            }
            continue;
        }
        if x != y {
            return false;
        }
        match x {
            // Comments and dollar quotes hold anything, quotes included.
            b'-' | b'/'
                if a.get(i + 1)
                    .is_some_and(|&n| n == x || (x == b'/' && n == b'*')) =>
            {
                return false;
            }
            b'$' if !a.get(i + 1).is_some_and(u8::is_ascii_digit) => return false,
            b'"' => match quoted_end(a, b, i, j) {
                Some((ei, ej)) => (i, j) = (ei, ej),
                None => return false,
            },
            _ => (i, j) = (i + 1, j + 1),
        }
    }
    i == a.len() && j == b.len()
}

/// Where a text's plain literals are, so that later texts are compared with
/// it a segment at a time: the same test as [`same_but_literals`], at the
/// cost of comparing the bytes between literals (a `memcmp` each) and reading
/// the new literals, for a caller that keeps the last text it fingerprinted.
#[derive(Debug, Default, Clone)]
pub struct Literals {
    /// Start and end of each plain number or string literal; `None` when the
    /// text holds what [`same_but_literals`] is unsure of.
    spans: Option<Vec<(u32, u32)>>,
}

impl Literals {
    /// Finds the plain literals of `text`, for comparing texts with it.
    pub fn find(&mut self, text: &str) {
        let mut spans = self.spans.take().unwrap_or_default();
        spans.clear();
        self.spans = walk(text.as_bytes(), &mut spans).map(|()| spans);
    }

    /// The string literals (quotes included) of the text whose literals
    /// are held, `text`; none when they are unknown.
    pub fn strings<'a>(&'a self, text: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.spans
            .iter()
            .flatten()
            .filter_map(|&(s, e)| text.get(s as usize..e as usize))
            .filter(|lit| lit.starts_with('\''))
    }

    /// True only when `new` is `old` (whose literals were found last, by
    /// [`Literals::find`] or by this) but for the values of its plain
    /// literals: then they have the same [`fingerprint`], and `new`'s
    /// literals are the ones held now. When false, the literals held are
    /// unknown until the next `find`.
    pub fn same_shape(&mut self, old: &str, new: &str) -> bool {
        let Some(spans) = self.spans.as_mut() else {
            return false;
        };
        let (a, b) = (old.as_bytes(), new.as_bytes());
        let (mut from, mut j) = (0, 0);
        for span in spans.iter_mut() {
            let (s, e) = (span.0 as usize, span.1 as usize);
            let seg = a.get(from..s).unwrap_or_default();
            let end = if b.get(j..j + seg.len()) == Some(seg) {
                j += seg.len();
                literal_end(b, j)
            } else {
                None
            };
            let Some(end) = end.filter(|&end| u32::try_from(end).is_ok()) else {
                self.spans = None;
                return false;
            };
            *span = (j as u32, end as u32);
            (from, j) = (e, end);
        }
        if a.get(from..) == b.get(j..) {
            return true;
        }
        self.spans = None;
        false
    }
}

/// The plain literals of `s` pushed to `spans`, walked as
/// [`same_but_literals`] walks; `None` where it would be unsure.
fn walk(s: &[u8], spans: &mut Vec<(u32, u32)>) -> Option<()> {
    let mut i = 0;
    while i < s.len() {
        let x = s[i];
        if (x.is_ascii_digit() || x == b'\'') && at_literal(s, i) {
            let end = literal_end(s, i)?;
            spans.push((u32::try_from(i).ok()?, u32::try_from(end).ok()?));
            i = end;
            continue;
        }
        match x {
            // A prefixed string (E'', B'', U&''): its end is the lexer's to find.
            b'\'' => return None,
            b'-' | b'/'
                if s.get(i + 1)
                    .is_some_and(|&n| n == x || (x == b'/' && n == b'*')) =>
            {
                return None;
            }
            b'$' if !s.get(i + 1).is_some_and(u8::is_ascii_digit) => return None,
            b'"' => i = quoted_end(s, s, i, i)?.0,
            _ => i += 1,
        }
    }
    Some(())
}

/// Past the plain literal at `k` (a number, or a string with no backslash),
/// if one starts there.
fn literal_end(s: &[u8], k: usize) -> Option<usize> {
    if !at_literal(s, k) {
        return None;
    }
    match *s.get(k)? {
        b'\'' => string_end(s, k),
        c if c.is_ascii_digit() => number_end(s, k),
        _ => None,
    }
}

/// A literal may start at `k`: not inside a word (`t1`, `$1`).
fn at_literal(s: &[u8], k: usize) -> bool {
    k == 0 || !is_word_byte(s[k - 1])
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.') || c >= 0x80
}

/// The end of the plain number at `k` (digits, a point, digits), if nothing
/// that would make it another token follows.
fn number_end(s: &[u8], mut k: usize) -> Option<usize> {
    while k < s.len() && s[k].is_ascii_digit() {
        k += 1;
    }
    if s.get(k) == Some(&b'.') {
        k += 1;
        while k < s.len() && s[k].is_ascii_digit() {
            k += 1;
        }
    }
    match s.get(k) {
        Some(&c) if is_word_byte(c) => None,
        _ => Some(k),
    }
}

/// Past the closing quote of the plain string at `k` (`''` inside), if it
/// closes and holds no backslash (whose meaning depends on settings).
fn string_end(s: &[u8], k: usize) -> Option<usize> {
    let mut k = k + 1;
    loop {
        match *s.get(k)? {
            b'\\' => return None,
            b'\'' if s.get(k + 1) == Some(&b'\'') => k += 2,
            b'\'' => return Some(k + 1),
            _ => k += 1,
        }
    }
}

/// Past the closing quote of the quoted identifier at `i` and `j`, equal in
/// both texts.
fn quoted_end(a: &[u8], b: &[u8], mut i: usize, mut j: usize) -> Option<(usize, usize)> {
    (i, j) = (i + 1, j + 1);
    loop {
        let x = *a.get(i)?;
        if b.get(j) != Some(&x) {
            return None;
        }
        (i, j) = (i + 1, j + 1);
        if x == b'"' {
            if a.get(i) == Some(&b'"') && b.get(j) == Some(&b'"') {
                (i, j) = (i + 1, j + 1);
            } else if a.get(i) == Some(&b'"') || b.get(j) == Some(&b'"') {
                return None;
            } else {
                return Some((i, j));
            }
        }
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
    fn same_but_literals_agrees_with_fingerprints() {
        for (a, b, same) in [
            ("select 1", "select 22", true),
            (
                "select * from t where id = 42 and n = 'x'",
                "select * from t where id = 7 and n = 'it''s'",
                true,
            ),
            ("select 1.5, -3", "select 2., -40", true),
            ("select \"a 1\" from t", "select \"a 1\" from t", true),
            ("select $1, 1", "select $1, 2", true),
            ("select $1", "select $2", false),
            ("select t1", "select t2", false),
            ("select 1e5", "select 2e5", false),
            ("select 1", "select 1 -- c", false),
            ("select 'a' -- '", "select 'b' -- '", false),
            ("select E'a'", "select E'b'", false),
            ("select 'a\\'", "select 'b\\'", false),
            ("select $$a$$", "select $$a$$", false),
            ("select 1", "SELECT 1", false),
            ("select 1", "select  1", false),
            ("select 'a", "select 'b", false),
            ("select \"x\"\"1\"", "select \"x\"\"2\"", false),
            ("select 1", "select 1;", false),
        ] {
            assert_eq!(same_but_literals(a, b), same, "{a:?} {b:?}");
            let mut lits = Literals::default();
            lits.find(a);
            assert_eq!(lits.same_shape(a, b), same, "shape {a:?} {b:?}");
            if same {
                assert_eq!(fingerprint(a), fingerprint(b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn literals_follow_the_last_text() {
        let texts = [
            "select * from t where id = 1 and n = 'a'",
            "select * from t where id = 22 and n = 'it''s'",
            "select * from t where id = 333 and n = ''",
            "select * from t where id = 4 and n = 'b'",
        ];
        let mut lits = Literals::default();
        lits.find(texts[0]);
        for w in texts.windows(2) {
            assert!(lits.same_shape(w[0], w[1]), "{:?} {:?}", w[0], w[1]);
        }
        // A miss leaves the literals unknown until they are found again.
        assert!(!lits.same_shape(texts[3], "select * from t where id = 4"));
        assert!(!lits.same_shape(texts[3], texts[3]));
        lits.find(texts[3]);
        assert!(lits.same_shape(texts[3], texts[0]));
        // Unsure texts never match.
        lits.find("select 1 -- c");
        assert!(!lits.same_shape("select 1 -- c", "select 1 -- c"));
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
