//! agtype on the PostgreSQL wire, for any client library.
//!
//! AGE's `agtype_send` does not send the container: its binary format is a
//! version byte (`1`) followed by the same text `agtype_out` prints, and
//! `agtype_recv` accepts exactly that (other versions are refused with
//! `unsupported agtype version number`). The text format is that text
//! alone. The driver integrations (features `tokio-postgres` and `sqlx`)
//! are built on these functions.

use crate::{ParseError, Value, parse};

/// The only binary format version AGE 1.6 sends and accepts.
pub const BINARY_VERSION: u8 = 1;

/// Name of the type in PostgreSQL (schema `ag_catalog`); drivers match
/// columns and parameters by this name and look the OID up on the server.
pub const TYPE_NAME: &str = "agtype";

/// Why a value received from the server is not agtype.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("agtype binary value is empty (expected a version byte and text)")]
    Empty,
    #[error("agtype binary format version {0} is not supported (AGE sends version 1)")]
    Version(u8),
    #[error("agtype text is not UTF-8 (byte {0})")]
    NotUtf8(usize),
    #[error("agtype text does not parse: {0}")]
    Parse(#[from] ParseError),
}

/// The agtype text inside a value in binary format.
pub fn binary_text(raw: &[u8]) -> Result<&str, WireError> {
    match raw.split_first() {
        None => Err(WireError::Empty),
        Some((&BINARY_VERSION, text)) => text_of(text),
        Some((&v, _)) => Err(WireError::Version(v)),
    }
}

/// A value in text format as `&str`.
pub fn text_of(raw: &[u8]) -> Result<&str, WireError> {
    std::str::from_utf8(raw).map_err(|e| WireError::NotUtf8(e.valid_up_to()))
}

/// Parses a value in binary format.
pub fn decode_binary(raw: &[u8]) -> Result<Value, WireError> {
    Ok(parse(binary_text(raw)?)?)
}

/// Parses a value in text format.
pub fn decode_text(raw: &[u8]) -> Result<Value, WireError> {
    Ok(parse(text_of(raw)?)?)
}

/// Appends `value` in binary format (version byte, then its text).
pub fn encode_binary(value: &Value, out: &mut Vec<u8>) {
    out.push(BINARY_VERSION);
    encode_text(value, out);
}

/// Appends `value` in text format.
pub fn encode_text(value: &Value, out: &mut Vec<u8>) {
    out.extend_from_slice(crate::to_text(value).as_bytes());
}

/// Whether a type name a driver reports is agtype: `agtype`, or
/// `ag_catalog.agtype` when `ag_catalog` is not on the `search_path`.
pub fn is_agtype_name(name: &str) -> bool {
    let bare = match name.rsplit_once('.') {
        Some((schema, bare)) if schema.trim_matches('"') == "ag_catalog" => bare,
        Some(_) => return false,
        None => name,
    };
    bare.trim_matches('"') == TYPE_NAME
}

/// agtype text borrowed from a row, not yet parsed.
///
/// Reading a column as `TextRef` costs no allocation; [`TextRef::parse`]
/// turns it into a [`Value`] when needed. As a parameter it sends the text
/// as is, so the server checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextRef<'a>(pub &'a str);

impl<'a> TextRef<'a> {
    pub fn as_str(&self) -> &'a str {
        self.0
    }

    pub fn parse(&self) -> Result<Value, ParseError> {
        parse(self.0)
    }
}

impl std::fmt::Display for TextRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_format_is_a_version_byte_then_text() {
        let v = parse(r#"{"a": [1.5, null]}"#).unwrap();
        let mut out = Vec::new();
        encode_binary(&v, &mut out);
        assert_eq!(out, b"\x01{\"a\": [1.5, null]}");
        assert_eq!(decode_binary(&out).unwrap(), v);
        assert_eq!(decode_binary(b""), Err(WireError::Empty));
        assert_eq!(decode_binary(b"\x02{}"), Err(WireError::Version(2)));
        assert_eq!(decode_binary(b"\x01\xff"), Err(WireError::NotUtf8(0)));
        let e = decode_binary(b"\x01[1,").unwrap_err();
        assert_eq!(
            e.to_string(),
            "agtype text does not parse: invalid input syntax for type agtype: \
             The input string ended unexpectedly. (at byte 3)"
        );
    }

    #[test]
    fn type_names_match_with_or_without_schema() {
        for name in ["agtype", "ag_catalog.agtype", "\"ag_catalog\".\"agtype\""] {
            assert!(is_agtype_name(name), "{name}");
        }
        for name in ["jsonb", "public.agtype", "_agtype", "?"] {
            assert!(!is_agtype_name(name), "{name}");
        }
    }
}
