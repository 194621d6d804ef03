//! `agtype_out`: [`Value`] to AGE's canonical text.

use std::fmt;

use crate::float::write_float;
use crate::value::{Object, Value};

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        write_value(&mut out, self);
        f.write_str(&out)
    }
}

/// Prints `value` as AGE's `agtype_out` does.
pub fn to_text(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    match value {
        Value::Array(items) if items.len() >= 16 => write_long_array(&mut out, items),
        _ => write_value(&mut out, value),
    }
    out
}

/// A long array (a result set, say) with its storage reserved once, from
/// the size of its first element, instead of regrown a dozen times.
fn write_long_array(out: &mut String, items: &[Value]) {
    let Some((first, rest)) = items.split_first() else {
        return write_array(out, items);
    };
    out.push('[');
    write_value(out, first);
    let per_item = out.len() + 2;
    out.reserve(per_item.saturating_mul(rest.len()) / 8 * 9);
    for v in rest {
        out.push_str(", ");
        write_value(out, v);
    }
    out.push(']');
}

/// Appends the text of `value` to `out`.
pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Integer(i) => write_i64(out, *i),
        Value::Float(x) => write_float(out, *x),
        Value::Numeric(n) => write_numeric(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => write_array(out, items),
        Value::Object(o) => write_object(out, o),
        Value::Vertex(v) => {
            write_object(out, v.as_object());
            out.push_str("::vertex");
        }
        Value::Edge(e) => {
            write_object(out, e.as_object());
            out.push_str("::edge");
        }
        Value::Path(p) => {
            write_array(out, p.elements());
            out.push_str("::path");
        }
    }
}

/// Two decimal digits per table lookup.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Out of line: the formatting machinery would enlarge every recursive
/// frame of the printer.
#[inline(never)]
fn write_numeric(out: &mut String, n: &crate::Numeric) {
    use fmt::Write as _;
    let _ = write!(out, "{n}::numeric");
}

fn write_i64(out: &mut String, i: i64) {
    let mut buf = [0u8; 20];
    let mut n = i.unsigned_abs();
    let mut at = buf.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        buf[at] = b'0' + n as u8;
    }
    if i < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&buf[at..]).unwrap_or("0"));
}

fn write_array(out: &mut String, items: &[Value]) {
    out.push('[');
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_value(out, v);
    }
    out.push(']');
}

fn write_object(out: &mut String, o: &Object) {
    out.push('{');
    let mut pairs = o.pairs().iter();
    if let Some((k, v)) = pairs.next() {
        write_key(out, k);
        write_value(out, v);
    }
    for (k, v) in pairs {
        out.push_str(", ");
        write_key(out, k);
        write_value(out, v);
    }
    out.push('}');
}

/// `"key": `; keys are short and rarely need escapes.
#[inline]
fn write_key(out: &mut String, k: &str) {
    if is_plain_short(k.as_bytes()) {
        out.reserve(k.len() + 4);
        out.push('"');
        out.push_str(k);
        out.push_str("\": ");
    } else {
        write_string(out, k);
        out.push_str(": ");
    }
}

/// Whether `b` is under 32 bytes with nothing to escape: one table lookup
/// a byte beats setting up a word-at-a-time scan for such strings.
fn is_plain_short(b: &[u8]) -> bool {
    b.len() < 32 && b.iter().all(|&c| !NEEDS_ESCAPE[usize::from(c)])
}

static NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Escapes as AGE does; output stops at a NUL, as AGE's C-string handling does.
#[inline]
pub(crate) fn write_string(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let plain = if is_plain_short(bytes) {
        bytes.len()
    } else {
        super::lex::skip_plain(bytes, 0)
    };
    out.reserve(s.len() + 2);
    out.push('"');
    if plain == bytes.len() {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut at = 0;
    loop {
        // Runs without `"`, `\\` or control characters are copied whole.
        let stop = super::lex::skip_plain(bytes, at);
        out.push_str(s.get(at..stop).unwrap_or(""));
        let Some(&b) = bytes.get(stop) else {
            break;
        };
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            0 => break,
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 15)]));
            }
        }
        at = stop + 1;
    }
    out.push('"');
}
