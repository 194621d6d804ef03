//! `bigint` from text, as PostgreSQL reads it: shared by the exact parser
//! and the fast one.

/// PostgreSQL 15's `int8in`: optional surrounding whitespace and sign, then
/// decimal digits only.
pub(crate) fn int8in(text: &str) -> Result<i64, String> {
    let s = text.trim_matches(crate::numeric::is_pg_space);
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("invalid input syntax for type bigint: \"{text}\""));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    s.parse()
        .map_err(|_| format!("value \"{text}\" is out of range for type bigint"))
}
