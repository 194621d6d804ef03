//! Printing of constants into SQL text: agtype literals, SQL string quoting
//! and identifier quoting. Everything user-supplied that reaches the SQL
//! goes through these functions, so no Cypher text can inject SQL.

use agtype::Value;

use super::ast::Literal;

/// The agtype text of a scalar literal (`"a\"b"`, `42`, `1.5`, `true`,
/// `null`), printed by the `agtype` crate exactly as AGE prints it, so
/// AGE's `agtype_in` reads it back to the same value.
pub fn agtype_literal(lit: &Literal) -> String {
    agtype::to_text(&literal_value(lit))
}

/// A scalar literal as an agtype value.
pub fn literal_value(lit: &Literal) -> Value {
    match lit {
        Literal::Null => Value::Null,
        Literal::Bool(b) => Value::Bool(*b),
        Literal::Int(i) => Value::Integer(*i),
        Literal::Float(f) => Value::Float(*f),
        Literal::String(s) => Value::String(s.clone()),
    }
}

/// The agtype text of a string.
pub fn agtype_string(s: &str) -> String {
    agtype::to_text(&Value::String(s.to_string()))
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
