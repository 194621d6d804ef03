//! The fast path of `agtype_in`: one pass over the bytes for input that
//! is well formed, as AGE's output and most application text is.
//!
//! It answers `None` for anything it does not handle itself (every error,
//! `NaN`/`Infinity` words, annotations on `null` or booleans, numbers
//! whose conversion needs care) and [`parse`](super::parse) then runs the
//! reference parser, which follows PostgreSQL's lexer token by token and
//! reports AGE's messages. So this path must only ever agree with the
//! reference, never be more lenient; the fuzz target and the property
//! tests check exactly that.

use super::lex::skip_plain;
use crate::float::{float8in, parse_float_token};
use crate::inline_stack::InlineStack;
use crate::key::Key;
use crate::numeric::Numeric;
use crate::scratch::{Scratch, take_tail, with_scratch};
use crate::value::{Edge, Object, Path, Value, Vertex};

/// Parses `input`, or `None` when the reference parser must decide.
pub(crate) fn parse(input: &str) -> Option<Value> {
    with_scratch(|scratch| run(input, scratch))
}

fn run(input: &str, scratch: &mut Scratch) -> Option<Value> {
    let mut p = Fast {
        s: input,
        b: input.as_bytes(),
        pos: 0,
    };
    let mut stack: InlineStack<Frame, 16> = InlineStack::new();
    // Elements and pairs of the open containers; each container moves its
    // own into one exactly sized allocation when it closes. A key waits in
    // `pairs` with a null value until its value is complete.
    let Scratch { items, pairs } = scratch;
    let mut root = None;
    // Builds each value straight in its container's slot: a value built
    // elsewhere and then moved costs a stall on every one, as its tag and
    // payload are written apart and read back together.
    macro_rules! store {
        ($value:expr) => {
            match stack.last_mut() {
                Some(Frame { object: true, .. }) => pairs.last_mut()?.1 = $value,
                Some(_) => items.push($value),
                None => root = Some($value),
            }
        };
    }
    'value: loop {
        p.ws();
        let c = *p.b.get(p.pos)?;
        // The reference parser counts an empty container against the
        // depth limit too.
        if stack.len() >= crate::MAX_DEPTH && (c == b'{' || c == b'[') {
            return None;
        }
        match c {
            b'{' => {
                p.pos += 1;
                p.ws();
                if p.b.get(p.pos) == Some(&b'}') {
                    p.pos += 1;
                    store!(p.object(Object::new())?);
                } else {
                    stack.push(Frame {
                        object: true,
                        start: pairs.len(),
                    });
                    pairs.push((p.key()?, Value::Null));
                    continue 'value;
                }
            }
            b'[' => {
                p.pos += 1;
                p.ws();
                if p.b.get(p.pos) == Some(&b']') {
                    p.pos += 1;
                    store!(p.array(Vec::new())?);
                } else {
                    stack.push(Frame {
                        object: false,
                        start: items.len(),
                    });
                    continue 'value;
                }
            }
            b'"' => {
                let s = p.string()?;
                match p.annotation()? {
                    None => store!(Value::String(s)),
                    Some(name) => store!(cast(&s, name)?),
                }
            }
            b'-' | b'0'..=b'9' => store!(p.number()?),
            b't' => {
                p.word("true")?;
                store!(Value::Bool(true));
            }
            b'f' => {
                p.word("false")?;
                store!(Value::Bool(false));
            }
            b'n' => {
                p.word("null")?;
                store!(Value::Null);
            }
            _ => return None,
        }
        // After a value: the next one, or the end of as many containers as
        // the input closes.
        loop {
            let Some(&mut Frame { object, start }) = stack.last_mut() else {
                p.ws();
                return root.filter(|_| p.pos == p.b.len());
            };
            p.ws();
            match (*p.b.get(p.pos)?, object) {
                (b',', false) => {
                    p.pos += 1;
                    continue 'value;
                }
                (b',', true) => {
                    p.pos += 1;
                    p.ws();
                    pairs.push((p.key()?, Value::Null));
                    continue 'value;
                }
                (b']', false) => {
                    p.pos += 1;
                    stack.pop();
                    let own = take_tail(items, start);
                    store!(p.array(own)?);
                }
                (b'}', true) => {
                    p.pos += 1;
                    stack.pop();
                    store!(p.object(Object::take_from(pairs, start))?);
                }
                _ => return None,
            }
        }
    }
}

/// An open container: whether it is an object, and where its elements
/// (or pairs) start in the scratch stack.
#[derive(Clone, Copy, Default)]
struct Frame {
    object: bool,
    start: usize,
}

struct Fast<'a> {
    s: &'a str,
    b: &'a [u8],
    pos: usize,
}

/// `JSON_ALPHANUMERIC_CHAR`: a byte that would continue a word or number token.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// Exact powers of ten as doubles (10^22 is the largest).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

impl<'a> Fast<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.pos) {
            self.pos += 1;
        }
    }

    /// `"key"` then `:`.
    fn key(&mut self) -> Option<Key> {
        if self.b.get(self.pos) != Some(&b'"') {
            return None;
        }
        let k = self.string_as(Key::new, Key::from)?;
        self.ws();
        if self.b.get(self.pos) != Some(&b':') || self.b.get(self.pos + 1) == Some(&b':') {
            return None;
        }
        self.pos += 1;
        Some(k)
    }

    fn word(&mut self, w: &str) -> Option<()> {
        let end = self.pos + w.len();
        if self.b.get(self.pos..end)? != w.as_bytes()
            || self.b.get(end).is_some_and(|&c| is_word_byte(c))
        {
            return None;
        }
        self.pos = end;
        // Annotations on null and booleans are left to the reference parser.
        if self.at_annotation() {
            return None;
        }
        Some(())
    }

    fn at_annotation(&mut self) -> bool {
        self.ws();
        self.b.get(self.pos..self.pos + 2) == Some(b"::")
    }

    /// After a value: `:: name`, consumed, or `None` inside when there is none.
    fn annotation(&mut self) -> Option<Option<&'a str>> {
        if !self.at_annotation() {
            return Some(None);
        }
        self.pos += 2;
        self.ws();
        let start = self.pos;
        if !self.b.get(start)?.is_ascii_alphabetic() {
            return None;
        }
        while self.b.get(self.pos).is_some_and(|&c| is_word_byte(c)) {
            self.pos += 1;
        }
        Some(Some(self.s.get(start..self.pos)?))
    }

    fn array(&mut self, items: Vec<Value>) -> Option<Value> {
        match self.annotation()? {
            None => Some(Value::Array(items)),
            Some(n) if n.eq_ignore_ascii_case("path") => {
                Path::try_from_values(items).ok().map(Value::Path)
            }
            Some(_) => None,
        }
    }

    fn object(&mut self, o: Object) -> Option<Value> {
        match self.annotation()? {
            None => Some(Value::Object(o)),
            Some(n) if n.eq_ignore_ascii_case("vertex") => {
                Vertex::try_from_object(o).ok().map(Value::Vertex)
            }
            Some(n) if n.eq_ignore_ascii_case("edge") => {
                Edge::try_from_object(o).ok().map(Value::Edge)
            }
            Some(_) => None,
        }
    }

    /// A JSON number; integers without fraction or exponent, floats
    /// otherwise. Digits are accumulated while scanning so that most
    /// numbers need no second pass.
    #[inline(always)]
    fn number(&mut self) -> Option<Value> {
        let b = self.b;
        let start = self.pos;
        let mut p = start;
        let negative = b.get(p) == Some(&b'-');
        if negative {
            p += 1;
        }
        let mut mantissa: u64 = 0;
        let mut digits = 0usize;
        let mut take_digits = |p: &mut usize, digits: &mut usize| {
            while let Some(&c @ b'0'..=b'9') = b.get(*p) {
                mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
                *digits += 1;
                *p += 1;
            }
        };
        match b.get(p)? {
            b'0' => p += 1,
            b'1'..=b'9' => take_digits(&mut p, &mut digits),
            _ => return None,
        }
        let mut float = false;
        let mut frac_digits = 0usize;
        if b.get(p) == Some(&b'.') {
            float = true;
            p += 1;
            let before = p;
            take_digits(&mut p, &mut frac_digits);
            if p == before {
                return None;
            }
        }
        let mut exponent: i64 = 0;
        if let Some(b'e' | b'E') = b.get(p) {
            float = true;
            p += 1;
            let exp_negative = b.get(p) == Some(&b'-');
            if let Some(b'+' | b'-') = b.get(p) {
                p += 1;
            }
            let before = p;
            while let Some(&c @ b'0'..=b'9') = b.get(p) {
                exponent = (exponent * 10 + i64::from(c - b'0')).min(100_000);
                p += 1;
            }
            if p == before {
                return None;
            }
            if exp_negative {
                exponent = -exponent;
            }
        }
        if b.get(p).is_some_and(|&c| is_word_byte(c)) {
            return None;
        }
        self.pos = p;
        let text = self.s.get(start..p)?;
        if let Some(name) = self.annotation()? {
            return cast(text, name);
        }
        // A leading zero counts as a digit only for the overflow check.
        let significant = digits + frac_digits;
        if !float {
            return if significant <= 18 {
                let m = mantissa as i64;
                Some(Value::Integer(if negative { -m } else { m }))
            } else {
                text.parse().ok().map(Value::Integer)
            };
        }
        // Clinger's fast path: both factors exact, so one rounding.
        let e10 = exponent - frac_digits as i64;
        if significant <= 19 && mantissa <= 1 << 53 && (-22..=22).contains(&e10) {
            let m = mantissa as f64;
            let v = if e10 >= 0 {
                m * POW10[e10 as usize]
            } else {
                m / POW10[(-e10) as usize]
            };
            return Some(Value::Float(if negative { -v } else { v }));
        }
        parse_float_token(text).ok().map(Value::Float)
    }

    /// A string at `"`, unescaped.
    fn string(&mut self) -> Option<String> {
        self.string_as(str::to_owned, |s| s)
    }

    /// A string at `"`, unescaped, built by `plain` from the input when it
    /// has no escapes, else by `unescaped` from a copy.
    #[inline(always)]
    fn string_as<T>(
        &mut self,
        plain: impl FnOnce(&str) -> T,
        unescaped: impl FnOnce(String) -> T,
    ) -> Option<T> {
        let (b, s) = (self.b, self.s);
        let body = self.pos + 1;
        let mut p = skip_plain(b, body);
        if b.get(p) == Some(&b'"') {
            self.pos = p + 1;
            return s.get(body..p).map(plain);
        }
        let mut out = String::with_capacity(p - body + 8);
        out.push_str(s.get(body..p)?);
        loop {
            match *b.get(p)? {
                b'"' => {
                    self.pos = p + 1;
                    return Some(unescaped(out));
                }
                b'\\' => {
                    let c = match *b.get(p + 1)? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let (c, len) = self.unicode_escape(p)?;
                            out.push(c);
                            p += len;
                            continue;
                        }
                        _ => return None,
                    };
                    out.push(c);
                    p += 2;
                }
                c if c < 0x20 => return None,
                _ => {
                    let end = skip_plain(b, p);
                    out.push_str(s.get(p..end)?);
                    p = end;
                }
            }
        }
    }

    /// `\uXXXX` at `p`, or a surrogate pair `\uD8xx\uDCxx`: the character
    /// and the escape's length. `\u0000` and lone surrogates are errors.
    fn unicode_escape(&self, p: usize) -> Option<(char, usize)> {
        let hex4 = |at: usize| -> Option<u32> {
            let h = self.b.get(at..at + 4)?;
            h.iter()
                .try_fold(0u32, |acc, &d| Some(acc * 16 + char::from(d).to_digit(16)?))
        };
        let cp = hex4(p + 2)?;
        match cp {
            0 | 0xDC00..=0xDFFF => None,
            0xD800..=0xDBFF => {
                if self.b.get(p + 6..p + 8)? != b"\\u" {
                    return None;
                }
                let low = hex4(p + 8)?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return None;
                }
                let c = char::from_u32(0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00))?;
                Some((c, 12))
            }
            _ => Some((char::from_u32(cp)?, 6)),
        }
    }
}

/// A scalar's text under `::numeric`, `::integer` or `::float`.
fn cast(text: &str, name: &str) -> Option<Value> {
    if name.eq_ignore_ascii_case("numeric") {
        Numeric::parse(text).ok().map(Value::Numeric)
    } else if name.eq_ignore_ascii_case("integer") {
        super::int8::int8in(text).ok().map(Value::Integer)
    } else if name.eq_ignore_ascii_case("float") {
        float8in(text).ok().map(Value::Float)
    } else {
        None
    }
}
