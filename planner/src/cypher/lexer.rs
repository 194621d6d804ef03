//! Cypher tokenizer. Positions are byte offsets into the Cypher text so
//! errors can point at the offending character.

use super::ParseError;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// Identifier or keyword; `quoted` for backtick identifiers, which are
    /// never keywords.
    Ident {
        name: String,
        quoted: bool,
    },
    Int(i64),
    Float(f64),
    Str(String),
    Param(String),
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Comma,
    Dot,
    DotDot,
    Colon,
    Semicolon,
    Pipe,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Caret,
    Eq,
    Neq,
    Lt,
    Gt,
    Le,
    Ge,
    RegexMatch,
    PlusEq,
    Eof,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub pos: usize,
}

/// Tokenizes the whole input; the last token is always `Eof`.
pub fn tokenize(src: &str) -> Result<Vec<Token>, ParseError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            match src[i + 2..].find("*/") {
                Some(end) => i = i + 2 + end + 2,
                None => return Err(ParseError::new(i, "unterminated comment")),
            }
            continue;
        }
        let two = |n: u8| b.get(i + 1) == Some(&n);
        let (tok, len) = match c {
            b'(' => (Tok::LParen, 1),
            b')' => (Tok::RParen, 1),
            b'[' => (Tok::LBracket, 1),
            b']' => (Tok::RBracket, 1),
            b'{' => (Tok::LBrace, 1),
            b'}' => (Tok::RBrace, 1),
            b',' => (Tok::Comma, 1),
            b'.' if two(b'.') => (Tok::DotDot, 2),
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let (t, n) = lex_number(src, i)?;
                (t, n)
            }
            b'.' => (Tok::Dot, 1),
            b':' => (Tok::Colon, 1),
            b';' => (Tok::Semicolon, 1),
            b'|' => (Tok::Pipe, 1),
            b'+' if two(b'=') => (Tok::PlusEq, 2),
            b'+' => (Tok::Plus, 1),
            b'-' => (Tok::Minus, 1),
            b'*' => (Tok::Star, 1),
            b'/' => (Tok::Slash, 1),
            b'%' => (Tok::Percent, 1),
            b'^' => (Tok::Caret, 1),
            b'=' if two(b'~') => (Tok::RegexMatch, 2),
            b'=' => (Tok::Eq, 1),
            b'<' if two(b'>') => (Tok::Neq, 2),
            b'<' if two(b'=') => (Tok::Le, 2),
            b'<' => (Tok::Lt, 1),
            b'>' if two(b'=') => (Tok::Ge, 2),
            b'>' => (Tok::Gt, 1),
            b'!' if two(b'=') => (Tok::Neq, 2),
            b'\'' | b'"' => lex_string(src, i)?,
            b'`' => match src[i + 1..].find('`') {
                Some(end) => (
                    Tok::Ident {
                        name: src[i + 1..i + 1 + end].to_string(),
                        quoted: true,
                    },
                    end + 2,
                ),
                None => return Err(ParseError::new(i, "unterminated quoted identifier")),
            },
            b'$' => {
                let n = ident_len(src, i + 1);
                if n == 0 {
                    return Err(ParseError::new(i, "expected parameter name after $"));
                }
                (Tok::Param(src[i + 1..i + 1 + n].to_string()), n + 1)
            }
            b'0'..=b'9' => lex_number(src, i)?,
            _ => {
                let n = ident_len(src, i);
                if n == 0 {
                    return Err(ParseError::new(i, "unexpected character"));
                }
                (
                    Tok::Ident {
                        name: src[i..i + n].to_string(),
                        quoted: false,
                    },
                    n,
                )
            }
        };
        out.push(Token { tok, pos: start });
        i += len;
    }
    out.push(Token {
        tok: Tok::Eof,
        pos: src.len(),
    });
    Ok(out)
}

/// Length in bytes of an identifier starting at `i` (letters, digits, `_`,
/// any non-ASCII character), 0 when none starts there.
fn ident_len(src: &str, i: usize) -> usize {
    let mut n = 0;
    for (k, ch) in src[i..].char_indices() {
        let ok = ch == '_' || ch.is_alphabetic() || (k > 0 && ch.is_alphanumeric());
        if !ok {
            break;
        }
        n = k + ch.len_utf8();
    }
    n
}

/// A number as AGE's scanner reads it: `0x` hexadecimal, a leading `0`
/// octal (`010` is 8), otherwise decimal; a dot (not a range's `..`) or an
/// exponent makes a float (`1.` included). Integers beyond `i64` become
/// floats in AGE; they are refused here.
fn lex_number(src: &str, i: usize) -> Result<(Tok, usize), ParseError> {
    let b = src.as_bytes();
    let ident_follows = |j: usize| j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_');
    if b[i] == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X')) {
        let mut j = i + 2;
        while j < b.len() && b[j].is_ascii_hexdigit() {
            j += 1;
        }
        if j == i + 2 || ident_follows(j) {
            return Err(ParseError::new(i, "invalid hexadecimal integer literal"));
        }
        return int_token(&src[i + 2..j], 16, i).map(|t| (t, j - i));
    }
    let mut j = i;
    while j < b.len() && b[j].is_ascii_digit() {
        j += 1;
    }
    let digits_end = j;
    let mut is_float = false;
    if j < b.len() && b[j] == b'.' && b.get(j + 1) != Some(&b'.') {
        is_float = true;
        j += 1;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
    }
    if j < b.len() && (b[j] == b'e' || b[j] == b'E') {
        let mut k = j + 1;
        if k < b.len() && (b[k] == b'+' || b[k] == b'-') {
            k += 1;
        }
        if k < b.len() && b[k].is_ascii_digit() {
            is_float = true;
            j = k;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
        }
    }
    // `12abc`, `1.5x`, `1e`: AGE rejects these too.
    if ident_follows(j) {
        return Err(ParseError::new(i, "malformed number"));
    }
    let text = &src[i..j];
    if is_float {
        return match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok((Tok::Float(f), j - i)),
            _ => Err(ParseError::new(i, "float literal out of range")),
        };
    }
    let digits = &src[i..digits_end];
    let tok = match digits.strip_prefix('0') {
        Some(oct) if !oct.is_empty() => {
            if !oct.bytes().all(|d| (b'0'..=b'7').contains(&d)) {
                return Err(ParseError::new(i, "invalid octal integer literal"));
            }
            int_token(oct, 8, i)?
        }
        _ => int_token(digits, 10, i)?,
    };
    Ok((tok, j - i))
}

fn int_token(digits: &str, radix: u32, pos: usize) -> Result<Tok, ParseError> {
    i64::from_str_radix(digits, radix)
        .map(Tok::Int)
        .map_err(|_| ParseError::new(pos, "integer literal out of range"))
}

fn lex_string(src: &str, i: usize) -> Result<(Tok, usize), ParseError> {
    let quote = src.as_bytes()[i] as char;
    let mut out = String::new();
    let mut chars = src[i + 1..].char_indices();
    while let Some((k, ch)) = chars.next() {
        if ch == quote {
            return Ok((Tok::Str(out), k + 2));
        }
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        let Some((_, e)) = chars.next() else { break };
        match e {
            '\\' | '\'' | '"' | '/' => out.push(e),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'u' | 'U' => {
                let n = if e == 'u' { 4 } else { 8 };
                let mut v: u32 = 0;
                for _ in 0..n {
                    let d = chars.next().and_then(|(_, h)| h.to_digit(16));
                    match d {
                        Some(d) => v = v * 16 + d,
                        None => return Err(ParseError::new(i + 1 + k, "bad unicode escape")),
                    }
                }
                // Surrogates and out-of-range code points: AGE's handling
                // differs by version, so refuse them.
                match char::from_u32(v) {
                    Some(c) if v != 0 => out.push(c),
                    _ => return Err(ParseError::new(i + 1 + k, "bad unicode escape")),
                }
            }
            _ => return Err(ParseError::new(i + 1 + k, "unknown escape in string")),
        }
    }
    Err(ParseError::new(i, "unterminated string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexes_strings_and_numbers() {
        let t = tokenize(r#"'O\'B' "a\"b" 1.5 42 1e3 $p `x y`"#).unwrap();
        assert_eq!(t[0].tok, Tok::Str("O'B".into()));
        assert_eq!(t[1].tok, Tok::Str("a\"b".into()));
        assert_eq!(t[2].tok, Tok::Float(1.5));
        assert_eq!(t[3].tok, Tok::Int(42));
        assert_eq!(t[4].tok, Tok::Float(1000.0));
        assert_eq!(t[5].tok, Tok::Param("p".into()));
        assert!(matches!(&t[6].tok, Tok::Ident { name, quoted: true } if name == "x y"));
    }

    #[test]
    fn range_dots_after_int() {
        let t = tokenize("*1..3").unwrap();
        assert_eq!(t[1].tok, Tok::Int(1));
        assert_eq!(t[2].tok, Tok::DotDot);
        assert_eq!(t[3].tok, Tok::Int(3));
    }

    #[test]
    fn errors_have_positions() {
        let e = tokenize("RETURN 'abc").unwrap_err();
        assert_eq!(e.pos, 7);
        assert!(tokenize("RETURN 99999999999999999999").is_err());
    }

    #[test]
    fn octal_hex_and_trailing_dot_as_age_reads_them() {
        let one = |s: &str| tokenize(s).map(|t| t[0].tok.clone());
        assert_eq!(one("010"), Ok(Tok::Int(8)));
        assert_eq!(one("017777777777"), Ok(Tok::Int(2147483647)));
        assert_eq!(one("00"), Ok(Tok::Int(0)));
        assert_eq!(one("0"), Ok(Tok::Int(0)));
        assert_eq!(one("0x1F"), Ok(Tok::Int(31)));
        assert_eq!(one("0XaB"), Ok(Tok::Int(171)));
        assert_eq!(one("0.5"), Ok(Tok::Float(0.5)));
        assert_eq!(one("010.5"), Ok(Tok::Float(10.5)));
        assert_eq!(one("07e1"), Ok(Tok::Float(70.0)));
        assert_eq!(one("1."), Ok(Tok::Float(1.0)));
        assert!(one("09").is_err());
        assert!(one("012345678").is_err());
        assert!(one("0x").is_err());
        assert!(one("0x1G").is_err());
        assert!(one("1.x").is_err());
        let t = tokenize("*01..07").unwrap();
        assert_eq!(t[1].tok, Tok::Int(1));
        assert_eq!(t[2].tok, Tok::DotDot);
        assert_eq!(t[3].tok, Tok::Int(7));
    }
}
