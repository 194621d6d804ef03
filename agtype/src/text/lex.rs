//! Tokenizer following PostgreSQL's `json_lex` as AGE extends it (`::`
//! annotations, `NaN`/`Infinity`/`inf` literals, bare words).

use std::borrow::Cow;

use super::error::ParseError;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok<'a> {
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Comma,
    Colon,
    /// `::`
    Annotation,
    String(Cow<'a, str>),
    /// A JSON number; `float` when it has a fraction or exponent.
    Number {
        float: bool,
    },
    True,
    False,
    Null,
    /// `NaN`, `Infinity`, `inf` (any case), `-Infinity`, `-inf`.
    FloatWord(f64),
    /// Any other run of letters, digits, `_` and non-ASCII characters.
    Word,
    End,
}

pub(crate) struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    /// Start of the last token returned, for error messages.
    pub(crate) tok_start: usize,
}

/// `JSON_ALPHANUMERIC_CHAR`: what PostgreSQL counts as part of a word.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// Index of the first byte at or after `from` that is `"`, `\\` or a
/// control character (or `b.len()`), eight bytes at a time.
pub(crate) fn skip_plain(b: &[u8], from: usize) -> usize {
    let mut p = from;
    while let Some(chunk) = b.get(p..p + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let special = special_bytes(u64::from_le_bytes(w));
        if special != 0 {
            return p + (special.trailing_zeros() / 8) as usize;
        }
        p += 8;
    }
    let len = b.len();
    if p >= len {
        return len;
    }
    let Some(last8) = len.checked_sub(8).and_then(|at| b.get(at..)) else {
        // Fewer than eight bytes in all.
        return (p..len)
            .find(|&i| matches!(b[i], b'"' | b'\\' | 0..=0x1f))
            .unwrap_or(len);
    };
    // The last eight bytes in one load, the ones before `p` (already
    // checked) replaced by spaces.
    let mut w = [0u8; 8];
    w.copy_from_slice(last8);
    let checked_bits = 8 * (8 - (len - p)) as u32;
    let keep = u64::MAX.checked_shl(checked_bits).unwrap_or(0);
    let x = (u64::from_le_bytes(w) & keep) | (SPACES & !keep);
    let special = special_bytes(x);
    if special == 0 {
        len
    } else {
        len - 8 + (special.trailing_zeros() / 8) as usize
    }
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;
const SPACES: u64 = LO * b' ' as u64;

/// High bit set in each byte of `x` that is `"`, `\\` or below 0x20. The
/// lowest flagged byte is exact (borrows only run upwards from a byte that
/// is itself flagged), which is all callers use.
fn special_bytes(x: u64) -> u64 {
    let has_zero = |v: u64| v.wrapping_sub(LO) & !v & HI;
    has_zero(x ^ (LO * u64::from(b'"')))
        | has_zero(x ^ (LO * u64::from(b'\\')))
        | (x.wrapping_sub(LO * 0x20) & !x & HI)
}

impl<'a> Lexer<'a> {
    /// Skips whitespace and reports whether `::` comes next, without
    /// consuming it.
    pub(crate) fn at_annotation(&mut self) -> bool {
        self.skip_ws();
        self.bytes().get(self.pos..self.pos + 2) == Some(b"::")
    }

    /// Skips whitespace and reports whether `byte` comes next; consumes it if so.
    pub(crate) fn eat(&mut self, byte: u8) -> bool {
        self.skip_ws();
        if self.peek_byte(self.pos) == Some(byte) {
            self.tok_start = self.pos;
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn skip_ws(&mut self) {
        let b = self.bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(self.pos) {
            self.pos += 1;
        }
    }

    pub(crate) fn new(input: &'a str) -> Self {
        Lexer {
            input,
            pos: 0,
            tok_start: 0,
        }
    }

    /// The source text of the last token returned.
    pub(crate) fn tok_text(&self) -> &'a str {
        self.input.get(self.tok_start..self.pos).unwrap_or("")
    }

    fn bytes(&self) -> &'a [u8] {
        self.input.as_bytes()
    }

    fn peek_byte(&self, at: usize) -> Option<u8> {
        self.bytes().get(at).copied()
    }

    fn word_end(&self, from: usize) -> usize {
        let b = self.bytes();
        let mut p = from;
        while p < b.len() && is_word_byte(b[p]) {
            p += 1;
        }
        p
    }

    pub(crate) fn next_token(&mut self) -> Result<Tok<'a>, ParseError> {
        let b = self.bytes();
        self.skip_ws();
        self.tok_start = self.pos;
        let Some(&c) = b.get(self.pos) else {
            return Ok(Tok::End);
        };
        let single = |lx: &mut Self, t| {
            lx.pos += 1;
            Ok(t)
        };
        match c {
            b'{' => single(self, Tok::LBrace),
            b'}' => single(self, Tok::RBrace),
            b'[' => single(self, Tok::LBracket),
            b']' => single(self, Tok::RBracket),
            b',' => single(self, Tok::Comma),
            b':' if self.peek_byte(self.pos + 1) == Some(b':') => {
                self.pos += 2;
                Ok(Tok::Annotation)
            }
            b':' => single(self, Tok::Colon),
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            _ => self.word(),
        }
    }

    fn word(&mut self) -> Result<Tok<'a>, ParseError> {
        let start = self.pos;
        let end = self.word_end(start);
        if end == start {
            // A lone punctuation or control character. Step over a whole
            // character so the token text stays valid UTF-8.
            let len = self.input[start..].chars().next().map_or(1, char::len_utf8);
            self.pos = start + len;
            return Err(ParseError::token_invalid(start, self.tok_text()));
        }
        self.pos = end;
        let w = &self.input[start..end];
        Ok(match w {
            "true" => Tok::True,
            "false" => Tok::False,
            "null" => Tok::Null,
            _ if w.eq_ignore_ascii_case("nan") => Tok::FloatWord(f64::NAN),
            _ if w.eq_ignore_ascii_case("infinity") || w.eq_ignore_ascii_case("inf") => {
                Tok::FloatWord(f64::INFINITY)
            }
            _ => Tok::Word,
        })
    }

    /// `json_lex_number`: on error the token extends over any following
    /// word characters, as PostgreSQL reports it.
    fn number(&mut self) -> Result<Tok<'a>, ParseError> {
        let b = self.bytes();
        let start = self.pos;
        let mut p = start;
        let digits = |mut p: usize| {
            while p < b.len() && b[p].is_ascii_digit() {
                p += 1;
            }
            p
        };
        let mut ok = true;
        let mut float = false;
        if b[p] == b'-' {
            p += 1;
            let w = self.word_end(p);
            let word = &self.input[p..w];
            if word.eq_ignore_ascii_case("inf") || word.eq_ignore_ascii_case("infinity") {
                self.pos = w;
                return Ok(Tok::FloatWord(f64::NEG_INFINITY));
            }
        }
        match b.get(p) {
            Some(b'0') => p += 1,
            Some(b'1'..=b'9') => p = digits(p + 1),
            _ => ok = false,
        }
        if ok && b.get(p) == Some(&b'.') {
            float = true;
            p += 1;
            if b.get(p).is_some_and(u8::is_ascii_digit) {
                p = digits(p);
            } else {
                ok = false;
            }
        }
        if ok && matches!(b.get(p), Some(b'e' | b'E')) {
            float = true;
            p += 1;
            if matches!(b.get(p), Some(b'+' | b'-')) {
                p += 1;
            }
            if b.get(p).is_some_and(u8::is_ascii_digit) {
                p = digits(p);
            } else {
                ok = false;
            }
        }
        let end = self.word_end(p);
        self.pos = end;
        if !ok || end != p {
            return Err(ParseError::token_invalid(start, self.tok_text()));
        }
        Ok(Tok::Number { float })
    }

    fn string(&mut self) -> Result<Tok<'a>, ParseError> {
        let b = self.bytes();
        let start = self.pos;
        let body = start + 1;
        let mut p = skip_plain(b, body);
        // Fast path: no escapes.
        if b.get(p) == Some(&b'"') {
            self.pos = p + 1;
            return Ok(Tok::String(Cow::Borrowed(&self.input[body..p])));
        }
        let mut out = String::with_capacity(p - body + 16);
        out.push_str(&self.input[body..p]);
        let mut high: Option<u32> = None;
        let unterminated = |lx: &mut Self| {
            lx.pos = b.len();
            Err(ParseError::token_invalid(start, lx.tok_text()))
        };
        let low_must_follow = |at| {
            ParseError::syntax(
                at,
                "Unicode low surrogate must follow a high surrogate.".to_owned(),
            )
        };
        loop {
            let Some(&c) = b.get(p) else {
                return unterminated(self);
            };
            if c < 0x20 {
                return Err(ParseError::syntax(
                    p,
                    format!("Character with value 0x{c:02x} must be escaped."),
                ));
            }
            if c == b'"' {
                if high.is_some() {
                    return Err(low_must_follow(p));
                }
                self.pos = p + 1;
                return Ok(Tok::String(Cow::Owned(out)));
            }
            if c != b'\\' {
                if high.is_some() {
                    return Err(low_must_follow(p));
                }
                let run_end = (p..b.len())
                    .find(|&i| b[i] == b'"' || b[i] == b'\\' || b[i] < 0x20)
                    .unwrap_or(b.len());
                out.push_str(&self.input[p..run_end]);
                p = run_end;
                continue;
            }
            let esc_at = p;
            p += 1;
            let Some(&e) = b.get(p) else {
                return unterminated(self);
            };
            if e == b'u' {
                let mut ch: u32 = 0;
                for i in 1..=4 {
                    match b.get(p + i) {
                        None => return unterminated(self),
                        Some(h) => match (*h as char).to_digit(16) {
                            Some(v) => ch = ch * 16 + v,
                            None => {
                                return Err(ParseError::syntax(
                                    esc_at,
                                    "\"\\u\" must be followed by four hexadecimal digits."
                                        .to_owned(),
                                ));
                            }
                        },
                    }
                }
                p += 5;
                if (0xD800..=0xDBFF).contains(&ch) {
                    if high.is_some() {
                        return Err(ParseError::syntax(
                            esc_at,
                            "Unicode high surrogate must not follow a high surrogate.".to_owned(),
                        ));
                    }
                    high = Some(ch);
                    continue;
                }
                if (0xDC00..=0xDFFF).contains(&ch) {
                    let Some(h) = high.take() else {
                        return Err(low_must_follow(esc_at));
                    };
                    ch = 0x10000 + ((h - 0xD800) << 10) + (ch - 0xDC00);
                }
                if high.is_some() {
                    return Err(low_must_follow(esc_at));
                }
                if ch == 0 {
                    return Err(ParseError::nul_escape(esc_at));
                }
                out.push(char::from_u32(ch).unwrap_or(char::REPLACEMENT_CHARACTER));
                continue;
            }
            if high.is_some() {
                return Err(low_must_follow(esc_at));
            }
            let decoded = match e {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                _ => {
                    let ch = self.input[p..].chars().next().unwrap_or('?');
                    return Err(ParseError::syntax(
                        esc_at,
                        format!("Escape sequence \"\\{ch}\" is invalid."),
                    ));
                }
            };
            out.push(decoded);
            p += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::skip_plain;

    #[test]
    fn skip_plain_finds_the_first_special_byte_at_any_length_and_offset() {
        for len in 0..40 {
            for special_at in 0..=len {
                for special in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
                    let mut b: Vec<u8> = (0..len).map(|i| b"a\x7f\xc3 ~"[i % 5]).collect();
                    if special_at < len {
                        b[special_at] = special;
                    }
                    for from in 0..=len {
                        let want = (from..len)
                            .find(|&i| matches!(b[i], b'"' | b'\\' | 0..=0x1f))
                            .unwrap_or(len);
                        assert_eq!(skip_plain(&b, from), want, "{b:?} from {from}");
                    }
                }
            }
        }
    }
}
