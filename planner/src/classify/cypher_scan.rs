//! Judges the Cypher text of an AGE `cypher()` call without parsing it: a read only if no
//! updating clause keyword appears as a whole word outside strings and comments. Deliberately
//! conservative: a property named `set` (`n.set`) also counts, and anything the scanner can't
//! follow (an unterminated string or comment) is not a read.

/// What the Cypher text may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CypherVerdict {
    Read,
    /// An updating clause; the keyword, upper-cased.
    Write(&'static str),
    /// Something the scan can't vouch for.
    Unsafe(String),
}

const WRITE_KEYWORDS: &[&str] = &["CREATE", "MERGE", "SET", "DELETE", "REMOVE"];

pub(crate) fn scan(text: &str) -> CypherVerdict {
    let b = text.as_bytes();
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    let word_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    let mut i = 0;
    // The last three significant tokens, to spot `schema.function(`.
    let mut prev: [Tok; 3] = [Tok::None; 3];
    let push = |t: Tok, prev: &mut [Tok; 3]| {
        prev.rotate_left(1);
        prev[2] = t;
    };
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && at(i + 1) == b'/' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && at(i + 1) == b'*' {
            match find(b, i + 2, b"*/") {
                Some(end) => i = end + 2,
                None => {
                    return CypherVerdict::Unsafe("cypher text has an unterminated comment".into());
                }
            }
        } else if matches!(c, b'\'' | b'"' | b'`') {
            // Strings use backslash escapes; backquoted names double the quote.
            let mut j = i + 1;
            loop {
                match b.get(j) {
                    None => {
                        return CypherVerdict::Unsafe(
                            "cypher text has an unterminated string or name".into(),
                        );
                    }
                    Some(b'\\') if c != b'`' => j += 2,
                    Some(&q) if q == c => {
                        if c == b'`' && at(j + 1) == b'`' {
                            j += 2;
                        } else {
                            break;
                        }
                    }
                    Some(_) => j += 1,
                }
            }
            i = j + 1;
            push(Tok::Other, &mut prev);
        } else if word_char(c) {
            let start = i;
            while i < b.len() && word_char(b[i]) {
                i += 1;
            }
            let word = &text[start..i];
            if let Some(kw) = WRITE_KEYWORDS.iter().find(|k| word.eq_ignore_ascii_case(k)) {
                return CypherVerdict::Write(kw);
            }
            if word.eq_ignore_ascii_case("CALL") {
                return CypherVerdict::Unsafe("cypher query contains CALL".into());
            }
            push(Tok::Word, &mut prev);
        } else {
            // `(` after `word . word` is a call of a schema-qualified SQL function.
            if c == b'(' && prev == [Tok::Word, Tok::Dot, Tok::Word] {
                return CypherVerdict::Unsafe(
                    "cypher query calls a schema-qualified function".into(),
                );
            }
            push(if c == b'.' { Tok::Dot } else { Tok::Other }, &mut prev);
            i += 1;
        }
        // Keep `i` on a char boundary: multi-byte characters are word characters above.
    }
    CypherVerdict::Read
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    None,
    Word,
    Dot,
    Other,
}

fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        use CypherVerdict::*;
        assert_eq!(scan(" MATCH (n) RETURN n "), Read);
        assert_eq!(
            scan("MATCH (n:Person {name: 'CREATE'}) RETURN n.created"),
            Read
        );
        assert_eq!(
            scan("MATCH (n) // SET n.x = 1\n RETURN n /* DELETE */"),
            Read
        );
        assert_eq!(scan("MATCH (n) RETURN n.name AS `delete`"), Read);
        assert_eq!(scan("create (n:Person)"), Write("CREATE"));
        assert_eq!(scan("MATCH (n) DETACH DELETE n"), Write("DELETE"));
        assert_eq!(scan("MATCH (n) set n.x = 1"), Write("SET"));
        assert_eq!(scan("MERGE (n {id: 1})"), Write("MERGE"));
        assert_eq!(scan("MATCH (n) REMOVE n.x"), Write("REMOVE"));
        assert!(matches!(scan("CALL db.labels()"), Unsafe(_)));
        assert!(matches!(scan("RETURN 'abc"), Unsafe(_)));
        assert!(matches!(scan("RETURN 1 /* x"), Unsafe(_)));
        assert!(matches!(scan("RETURN public.my_fn(1)"), Unsafe(_)));
        assert_eq!(scan("RETURN 'it\\'s', \"x\\\"\""), Read);
        assert_eq!(scan("RETURN 'é', créé"), Read);
        assert_eq!(scan(""), Read);
    }
}
