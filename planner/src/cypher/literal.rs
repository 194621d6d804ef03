//! Printing of constants into SQL text: agtype literals, SQL string quoting
//! and identifier quoting. Everything user-supplied that reaches the SQL
//! goes through these functions, so no Cypher text can inject SQL.

use super::ast::Literal;

/// The agtype text of a scalar literal (`"a\"b"`, `42`, `1.5`, `true`,
/// `null`), as AGE's `agtype_in` reads it back to the same value.
pub fn agtype_literal(lit: &Literal) -> String {
    match lit {
        Literal::Null => "null".to_string(),
        Literal::Bool(b) => b.to_string(),
        Literal::Int(i) => i.to_string(),
        Literal::Float(f) => agtype_float(*f),
        Literal::String(s) => agtype_string(s),
    }
}

/// A float that agtype reads as a float (never as an integer): Rust's
/// shortest round-trip form always carries a `.` or an exponent.
fn agtype_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    format!("{f:?}")
}

/// JSON-style string with the escapes agtype's parser understands.
pub fn agtype_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A SQL string constant. With a backslash inside, the `E'...'` form is
/// used so the meaning does not depend on `standard_conforming_strings`.
pub fn sql_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    let escape = s.contains('\\');
    if escape {
        out.push('E');
    }
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' if escape => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `'<agtype text>'::agtype` for a scalar literal.
pub fn agtype_const(lit: &Literal) -> String {
    match lit {
        Literal::Null => "NULL::agtype".to_string(),
        _ => format!("{}::agtype", sql_string(&agtype_literal(lit))),
    }
}

/// A double-quoted SQL identifier.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_scalars() {
        assert_eq!(agtype_const(&Literal::Int(-3)), "'-3'::agtype");
        assert_eq!(agtype_const(&Literal::Float(3.0)), "'3.0'::agtype");
        assert_eq!(agtype_const(&Literal::Bool(true)), "'true'::agtype");
        assert_eq!(
            agtype_const(&Literal::String("O'B\\".into())),
            "E'\"O''B\\\\\\\\\"'::agtype"
        );
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
