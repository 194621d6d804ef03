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

/// Out of line: the formatting machinery would enlarge every recursive
/// frame of the printer.
#[inline(never)]
fn write_numeric(out: &mut String, n: &crate::Numeric) {
    use fmt::Write as _;
    let _ = write!(out, "{n}::numeric");
}

fn write_i64(out: &mut String, i: i64) {
    out.push_str(itoa::Buffer::new().format(i));
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

/// Whether `b` is under 32 bytes with nothing to escape.
fn is_plain_short(b: &[u8]) -> bool {
    b.len() < 32 && next_special(b, 0) == b.len()
}

/// The first byte at or after `from` that must be escaped (or `b.len()`):
/// one table lookup a byte for the last 32 bytes, which beats setting up a
/// word-at-a-time scan for so few.
fn next_special(b: &[u8], from: usize) -> usize {
    if b.len().saturating_sub(from) >= 32 {
        return super::lex::skip_plain(b, from);
    }
    let rest = b.get(from..).unwrap_or_default();
    from + rest
        .iter()
        .position(|&c| NEEDS_ESCAPE[usize::from(c)])
        .unwrap_or(rest.len())
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
    let mut stop = next_special(bytes, 0);
    out.reserve(s.len() + 2);
    out.push('"');
    let mut at = 0;
    loop {
        // Runs without `"`, `\\` or control characters are copied whole.
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
        stop = next_special(bytes, at);
    }
    out.push('"');
}
