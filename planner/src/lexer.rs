//! The planner's SQL lexer: enough to split a simple-query string into statements, to look at
//! leading keywords when sqlparser gives up, to fingerprint SQL, to find `cypher()` calls with
//! exact byte spans, and to read SQL's own PREPARE, EXECUTE and LOAD. It never fails: anything it
//! does not understand becomes a one-character `Other` token, and an unterminated string,
//! quoted identifier or comment runs to the end of the input.

/// What a token is; the text is `&sql[start..end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Unquoted identifier or keyword.
    Word,
    /// `"quoted identifier"` (also `U&"..."`).
    QuotedIdent,
    /// String constant: `'...'`, `E'...'`, `B'...'`, `X'...'`, `N'...'`, `U&'...'`, `$tag$...$tag$`.
    String,
    /// Numeric constant.
    Number,
    /// `$1` placeholder.
    Param,
    /// Operator run (`<=>`, `::`, `->>` ...).
    Op,
    /// `(`, `)`, `[`, `]`, `,`, `;`, `.`
    Punct,
    /// Anything else, one character.
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
    /// A string, quoted identifier or comment before this token ran off the end of the input.
    pub unterminated: bool,
}

impl Token {
    pub fn text<'a>(&self, sql: &'a str) -> &'a str {
        sql.get(self.start..self.end).unwrap_or("")
    }

    /// True if this is the unquoted word `kw` (ASCII case-insensitive).
    pub fn is_word(&self, sql: &str, kw: &str) -> bool {
        self.kind == Kind::Word && self.text(sql).eq_ignore_ascii_case(kw)
    }

    pub fn is_punct(&self, sql: &str, p: &str) -> bool {
        self.kind == Kind::Punct && self.text(sql) == p
    }

    /// A string constant's value, for the two forms whose value the text
    /// gives without escapes: `'...'` (`plain`: its backslashes mean what
    /// `standard_conforming_strings` says) and `$tag$...$tag$`. `None` for
    /// any other token, an unterminated one, or another string form.
    pub fn string_value(&self, sql: &str) -> Option<(String, bool)> {
        if self.kind != Kind::String || self.unterminated {
            return None;
        }
        let t = self.text(sql);
        if let Some(inner) = t.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
            return Some((inner.replace("''", "'"), true));
        }
        let tag_len = t.strip_prefix('$')?.find('$')? + 2;
        let body = t.get(tag_len..t.len().checked_sub(tag_len)?)?;
        Some((body.to_owned(), false))
    }
}

/// Iterator over the tokens of `sql`; comments and whitespace are skipped.
pub(crate) struct Lexer<'a> {
    src: &'a str,
    b: &'a [u8],
    pos: usize,
    done: bool,
}

pub(crate) fn tokens(sql: &str) -> Lexer<'_> {
    Lexer {
        src: sql,
        b: sql.as_bytes(),
        pos: 0,
        done: false,
    }
}

const OP_CHARS: &[u8] = b"+-*/<>=~!@#%^&|`?:";

// Bytes >= 0x80 count as identifier characters, so token boundaries only fall on ASCII bytes
// and every span is a valid `&str` slice.
fn ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

fn ident_cont(c: u8) -> bool {
    ident_start(c) || c.is_ascii_digit() || c == b'$'
}

impl Lexer<'_> {
    fn at(&self, i: usize) -> u8 {
        self.b.get(i).copied().unwrap_or(0)
    }

    /// Skips whitespace and comments; false if a block comment was unterminated.
    fn skip_trivia(&mut self) -> bool {
        loop {
            let c = self.at(self.pos);
            if c.is_ascii_whitespace() {
                self.pos += 1;
            } else if c == b'-' && self.at(self.pos + 1) == b'-' {
                while self.pos < self.b.len() && self.b[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else if c == b'/' && self.at(self.pos + 1) == b'*' {
                // PostgreSQL block comments nest.
                let mut depth = 0usize;
                loop {
                    if self.pos >= self.b.len() {
                        return false;
                    }
                    if self.at(self.pos) == b'/' && self.at(self.pos + 1) == b'*' {
                        depth += 1;
                        self.pos += 2;
                    } else if self.at(self.pos) == b'*' && self.at(self.pos + 1) == b'/' {
                        depth -= 1;
                        self.pos += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        self.pos += 1;
                    }
                }
            } else {
                return true;
            }
        }
    }

    /// Consumes a quoted run starting at the opening quote; `backslash` enables `\x` escapes.
    /// Returns false if unterminated.
    fn quoted(&mut self, quote: u8, backslash: bool) -> bool {
        self.pos += 1;
        while self.pos < self.b.len() {
            let c = self.b[self.pos];
            if backslash && c == b'\\' {
                self.pos += 2;
            } else if c == quote {
                if self.at(self.pos + 1) == quote {
                    self.pos += 2;
                } else {
                    self.pos += 1;
                    return true;
                }
            } else {
                self.pos += 1;
            }
        }
        self.pos = self.b.len();
        false
    }

    /// `$tag$` at `self.pos`: length of the delimiter, if it is one.
    fn dollar_tag_len(&self) -> Option<usize> {
        let mut i = self.pos + 1;
        if self.at(i) != b'$' {
            if !ident_start(self.at(i)) {
                return None;
            }
            while ident_cont(self.at(i)) && self.at(i) != b'$' {
                i += 1;
            }
            if self.at(i) != b'$' {
                return None;
            }
        }
        Some(i + 1 - self.pos)
    }

    fn number(&mut self) {
        let b = self.b;
        if self.at(self.pos) == b'0'
            && matches!(
                self.at(self.pos + 1),
                b'x' | b'X' | b'o' | b'O' | b'b' | b'B'
            )
        {
            self.pos += 2;
            while self.pos < b.len() && (b[self.pos].is_ascii_alphanumeric() || b[self.pos] == b'_')
            {
                self.pos += 1;
            }
            return;
        }
        while self.pos < b.len() && (b[self.pos].is_ascii_digit() || b[self.pos] == b'_') {
            self.pos += 1;
        }
        if self.at(self.pos) == b'.' && self.at(self.pos + 1) != b'.' {
            self.pos += 1;
            while self.pos < b.len() && (b[self.pos].is_ascii_digit() || b[self.pos] == b'_') {
                self.pos += 1;
            }
        }
        if matches!(self.at(self.pos), b'e' | b'E') {
            let mut i = self.pos + 1;
            if matches!(self.at(i), b'+' | b'-') {
                i += 1;
            }
            if self.at(i).is_ascii_digit() {
                self.pos = i;
                while self.at(self.pos).is_ascii_digit() {
                    self.pos += 1;
                }
            }
        }
    }
}

impl Iterator for Lexer<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        let comment_ok = self.skip_trivia();
        if self.pos >= self.b.len() {
            // An unterminated comment at the end is an error in PostgreSQL: report it as an
            // empty token so that the input is not mistaken for an empty query.
            if !comment_ok && !self.done {
                self.done = true;
                let end = self.b.len();
                return Some(Token {
                    kind: Kind::Other,
                    start: end,
                    end,
                    unterminated: true,
                });
            }
            return None;
        }
        let start = self.pos;
        let c = self.b[start];
        let next = self.at(start + 1);
        let mut terminated = true;
        let kind = if matches!(c, b'e' | b'E') && next == b'\'' {
            self.pos += 1;
            terminated = self.quoted(b'\'', true);
            Kind::String
        } else if matches!(c, b'b' | b'B' | b'x' | b'X' | b'n' | b'N') && next == b'\'' {
            self.pos += 1;
            terminated = self.quoted(b'\'', false);
            Kind::String
        } else if matches!(c, b'u' | b'U')
            && next == b'&'
            && matches!(self.at(start + 2), b'\'' | b'"')
        {
            let q = self.at(start + 2);
            self.pos += 2;
            terminated = self.quoted(q, false);
            if q == b'"' {
                Kind::QuotedIdent
            } else {
                Kind::String
            }
        } else if ident_start(c) {
            while self.pos < self.b.len() && ident_cont(self.b[self.pos]) {
                self.pos += 1;
            }
            Kind::Word
        } else if c == b'\'' {
            terminated = self.quoted(b'\'', false);
            Kind::String
        } else if c == b'"' {
            terminated = self.quoted(b'"', false);
            Kind::QuotedIdent
        } else if c == b'$' && next.is_ascii_digit() {
            self.pos += 1;
            while self.at(self.pos).is_ascii_digit() {
                self.pos += 1;
            }
            Kind::Param
        } else if c == b'$' {
            match self.dollar_tag_len() {
                Some(n) => {
                    let tag = &self.b[start..start + n];
                    let body = start + n;
                    match self.b[body..].windows(n).position(|w| w == tag) {
                        Some(p) => self.pos = body + p + n,
                        None => {
                            self.pos = self.b.len();
                            terminated = false;
                        }
                    }
                    Kind::String
                }
                None => {
                    self.pos += 1;
                    Kind::Other
                }
            }
        } else if c.is_ascii_digit() || (c == b'.' && next.is_ascii_digit()) {
            self.number();
            Kind::Number
        } else if matches!(c, b'(' | b')' | b'[' | b']' | b',' | b';' | b'.') {
            self.pos += 1;
            Kind::Punct
        } else if OP_CHARS.contains(&c) {
            self.pos += 1;
            while self.pos < self.b.len() && OP_CHARS.contains(&self.b[self.pos]) {
                // A comment start ends the operator, as in PostgreSQL's scanner.
                let (x, y) = (self.b[self.pos], self.at(self.pos + 1));
                if (x == b'-' && y == b'-') || (x == b'/' && y == b'*') {
                    break;
                }
                self.pos += 1;
            }
            Kind::Op
        } else {
            self.pos += 1;
            Kind::Other
        };
        // Never return a span that splits a UTF-8 character (possible only for `Other`).
        while self.pos < self.b.len() && !self.src.is_char_boundary(self.pos) {
            self.pos += 1;
        }
        Some(Token {
            kind,
            start,
            end: self.pos.min(self.b.len()),
            unterminated: !terminated || !comment_ok,
        })
    }
}

/// The byte span of one statement of a multi-statement string.
pub(crate) struct Piece {
    pub start: usize,
    pub end: usize,
    /// Operators that chain (operator tokens, subscripts, AND, OR, UNION ...): a bound on how
    /// deep sqlparser's left-nested trees for this statement can get.
    pub operators: usize,
}

/// Splits at top-level `;` (not inside parentheses, strings, comments or a `BEGIN ATOMIC ...
/// END` function body) and drops empty statements, as PostgreSQL does for a simple Query.
pub(crate) fn split_statements(sql: &str) -> Vec<Piece> {
    let tokens: Vec<Token> = tokens(sql).collect();
    split_tokens(sql, &tokens)
}

/// `split_statements` over tokens already read.
pub(crate) fn split_tokens(sql: &str, tokens: &[Token]) -> Vec<Piece> {
    let mut pieces = Vec::new();
    // Span of the current statement's tokens so far.
    let mut cur: Option<(usize, usize)> = None;
    let mut depth = 0usize;
    let mut operators = 0usize;
    // Inside BEGIN ATOMIC bodies, `;` separates the body's statements; CASE also ends in END.
    let (mut atomic, mut cases, mut prev_begin) = (0usize, 0usize, false);
    let mut flush = |cur: &mut Option<(usize, usize)>, operators: &mut usize| {
        if let Some((start, end)) = cur.take() {
            pieces.push(Piece {
                start,
                end,
                operators: std::mem::take(operators),
            });
        }
    };
    for &t in tokens {
        if t.kind == Kind::Word {
            if prev_begin && t.is_word(sql, "atomic") {
                atomic += 1;
            } else if atomic > 0 && t.is_word(sql, "case") {
                cases += 1;
            } else if atomic > 0 && t.is_word(sql, "end") {
                if cases > 0 {
                    cases -= 1;
                } else {
                    atomic -= 1;
                }
            }
        }
        prev_begin = t.is_word(sql, "begin");
        if t.kind == Kind::Punct {
            match t.text(sql) {
                "(" | "[" => depth += 1,
                ")" | "]" => depth = depth.saturating_sub(1),
                ";" if depth == 0 && atomic == 0 => {
                    flush(&mut cur, &mut operators);
                    continue;
                }
                _ => {}
            }
        }
        let chains = ["and", "or", "union", "except", "intersect"];
        if t.kind == Kind::Op || t.is_punct(sql, "[") || chains.iter().any(|w| t.is_word(sql, w)) {
            operators += 1;
        }
        cur = Some((cur.map_or(t.start, |(s, _)| s), t.end));
    }
    flush(&mut cur, &mut operators);
    pieces
}
