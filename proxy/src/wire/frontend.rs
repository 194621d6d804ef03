//! The frontend message bodies the proxy reads: statement text, names, and
//! the Execute row limit. Every accessor is bounds-checked.

use super::body;

/// A string that may be long (a statement's text), and what follows it.
fn cstr(buf: &[u8]) -> Option<(&str, &[u8])> {
    let nul = memchr::memchr(0, buf)?;
    let s = super::utf8(&buf[..nul])?;
    Some((s, &buf[nul + 1..]))
}

/// A statement's or portal's name, and what follows it.
fn name_field(buf: &[u8]) -> Option<(&str, &[u8])> {
    let nul = nul_at(buf)?;
    let s = super::utf8(&buf[..nul])?;
    Some((s, &buf[nul + 1..]))
}

/// Where the first NUL of `buf` is. Most names a message holds are empty
/// (the unnamed statement and portal) or short: those are looked at a byte
/// at a time, which costs less than setting up memchr's wide search.
fn nul_at(buf: &[u8]) -> Option<usize> {
    const SHORT: usize = 16;
    match buf.iter().take(SHORT).position(|&b| b == 0) {
        Some(at) => Some(at),
        None if buf.len() <= SHORT => None,
        None => memchr::memchr(0, &buf[SHORT..]).map(|at| at + SHORT),
    }
}

/// A SASLInitialResponse's body (after its tag and length): the mechanism
/// and its data (`None`: length -1, no data); `None` when malformed.
pub fn sasl_initial_response(body: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    let nul = body.iter().position(|&b| b == 0)?;
    let rest = &body[nul + 1..];
    let len = i32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let data = match usize::try_from(len) {
        Ok(l) => Some(rest.get(4..4usize.checked_add(l)?)?),
        Err(_) => None,
    };
    Some((&body[..nul], data))
}

/// Query: the SQL text.
pub fn query_text(msg: &[u8]) -> Option<&str> {
    cstr(body(msg)).map(|(s, _)| s)
}

/// Parse: (statement name, SQL text).
pub fn parse(msg: &[u8]) -> Option<(&str, &str)> {
    let (name, rest) = name_field(body(msg))?;
    let (sql, _) = cstr(rest)?;
    Some((name, sql))
}

/// A Query's or Parse's statement text as bytes, unchecked: for a cheap
/// look before the text is wanted as a string.
pub fn statement_bytes(t: u8, msg: &[u8]) -> Option<&[u8]> {
    let b = body(msg);
    let b = match t {
        super::tag::QUERY => b,
        super::tag::PARSE => b.get(nul_at(b)? + 1..)?,
        _ => return None,
    };
    Some(&b[..memchr::memchr(0, b)?])
}

/// [`statement_bytes`] for a first look that may only say "no": a Query's
/// body but its final NUL, found without a search for an earlier one, which
/// would end the text sooner (a malformed message; the server refuses it).
/// A word or a byte the text holds is here too, at the same place.
pub fn statement_bytes_loose(t: u8, msg: &[u8]) -> Option<&[u8]> {
    match t {
        super::tag::QUERY => {
            let b = body(msg);
            Some(b.strip_suffix(&[0]).unwrap_or(b))
        }
        _ => statement_bytes(t, msg),
    }
}

/// Parse: the statement name only (its text is not checked).
pub fn parse_name(msg: &[u8]) -> Option<&str> {
    name_field(body(msg)).map(|(name, _)| name)
}

/// A Parse's body past its statement name: the text and the parameter
/// types, which together say what the statement is.
pub fn parse_key(msg: &[u8]) -> Option<&[u8]> {
    let b = body(msg);
    b.get(nul_at(b)? + 1..)
}

/// Bind: (portal name, statement name).
pub fn bind(msg: &[u8]) -> Option<(&str, &str)> {
    let (portal, rest) = name_field(body(msg))?;
    let (stmt, _) = name_field(rest)?;
    Some((portal, stmt))
}

/// Execute: (portal name, max rows; 0 means all).
pub fn execute(msg: &[u8]) -> Option<(&str, i32)> {
    let (portal, rest) = name_field(body(msg))?;
    let n = rest.get(..4)?;
    Some((portal, i32::from_be_bytes([n[0], n[1], n[2], n[3]])))
}

/// Close or Describe: (kind b'S' or b'P', name).
pub fn target(msg: &[u8]) -> Option<(u8, &str)> {
    let b = body(msg);
    let kind = *b.first()?;
    let (name, _) = name_field(&b[1..])?;
    Some((kind, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_nul_is_found_wherever_it_is() {
        for len in 0..40 {
            for at in 0..=len {
                let mut buf = vec![b'x'; len];
                if at < len {
                    buf[at] = 0;
                    buf.extend_from_slice(b"\0tail");
                }
                assert_eq!(nul_at(&buf), memchr::memchr(0, &buf), "{len} {at}");
            }
        }
    }

    #[test]
    fn sasl_initial_responses_and_their_malformed_kinds() {
        let ok = b"SCRAM-SHA-256\0\0\0\0\x03n,,";
        assert_eq!(
            sasl_initial_response(ok),
            Some((&b"SCRAM-SHA-256"[..], Some(&b"n,,"[..])))
        );
        let none = b"M\0\xff\xff\xff\xff";
        assert_eq!(sasl_initial_response(none), Some((&b"M"[..], None)));
        for bad in [&b"no nul"[..], b"M\0\0\0", b"M\0\0\0\0\x09n,,"] {
            assert_eq!(sasl_initial_response(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn truncated_bodies_are_none() {
        assert_eq!(execute(b"E\0\0\0\x08p\0\0"), None);
        assert_eq!(parse(b"P\0\0\0\x05s"), None);
        assert_eq!(target(b"C\0\0\0\x04"), None);
        assert_eq!(execute(b"E\0\0\0\x09\0\0\0\0\x05"), Some(("", 5)));
        assert_eq!(statement_bytes(b'P', b"P\0\0\0\x05s"), None);
        assert_eq!(
            statement_bytes(b'P', b"P\0\0\0\x0bs\0sel\0"),
            Some(&b"sel"[..])
        );
        assert_eq!(
            statement_bytes(b'Q', b"Q\0\0\0\x08sel\0"),
            Some(&b"sel"[..])
        );
        assert_eq!(parse_name(b"P\0\0\0\x0bs\0sel\0"), Some("s"));
    }
}
