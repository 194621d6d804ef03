//! The few backend message bodies the proxy reads or rewrites.

use bytes::{BufMut, Bytes, BytesMut};

/// Authentication request codes (the Int32 after the 'R' header).
pub mod auth {
    pub const OK: i32 = 0;
    pub const CLEARTEXT: i32 = 3;
    pub const MD5: i32 = 5;
    pub const GSS: i32 = 7;
    pub const GSS_CONTINUE: i32 = 8;
    pub const SSPI: i32 = 9;
    pub const SASL: i32 = 10;
    pub const SASL_CONTINUE: i32 = 11;
    pub const SASL_FINAL: i32 = 12;
}

pub use super::body;

/// The authentication code of an 'R' message.
pub fn auth_code(msg: &[u8]) -> Option<i32> {
    let b = body(msg).get(..4)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Does the client have to answer this authentication request?
pub fn auth_needs_answer(code: i32) -> bool {
    matches!(
        code,
        auth::CLEARTEXT
            | auth::MD5
            | auth::GSS
            | auth::GSS_CONTINUE
            | auth::SSPI
            | auth::SASL
            | auth::SASL_CONTINUE
    )
}

/// Removes `SCRAM-SHA-256-PLUS` from an AuthenticationSASL mechanism list:
/// channel binding can't cross a proxy that terminates TLS. Returns the
/// message unchanged if there is nothing to remove.
pub fn strip_channel_binding(msg: Bytes) -> Bytes {
    let Some(list) = body(&msg).get(4..) else {
        return msg;
    };
    let mechs: Vec<&[u8]> = list.split(|&b| b == 0).filter(|m| !m.is_empty()).collect();
    if !mechs.iter().any(|m| m.ends_with(b"-PLUS")) {
        return msg;
    }
    let mut out = BytesMut::with_capacity(msg.len());
    out.put_u8(b'R');
    out.put_u32(0);
    out.put_i32(auth::SASL);
    for m in mechs.iter().filter(|m| !m.ends_with(b"-PLUS")) {
        out.put_slice(m);
        out.put_u8(0);
    }
    out.put_u8(0);
    let len = (out.len() - 1) as u32;
    out[1..5].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

/// A DataRow's column count, and its values in order, read as they are
/// asked for (`Some(None)`: NULL; a `None` item: the row is malformed
/// from there on).
fn data_row_values(msg: &[u8]) -> Option<(usize, impl Iterator<Item = Option<Option<&[u8]>>>)> {
    let b = body(msg);
    let count = usize::try_from(i16::from_be_bytes([*b.first()?, *b.get(1)?])).ok()?;
    let mut at = 2usize;
    let values = std::iter::from_fn(move || Some(value_at(b, &mut at)));
    Some((count, values))
}

/// The DataRow value at `at` of its body (`Some(None)`: NULL), `at` moved
/// past it; `None` when it is cut short.
fn value_at<'a>(b: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let len = i32::from_be_bytes(b.get(*at..*at + 4)?.try_into().ok()?);
    *at += 4;
    let Ok(len) = usize::try_from(len) else {
        return Some(None);
    };
    let end = at.checked_add(len)?;
    let v = b.get(*at..end)?;
    *at = end;
    Some(Some(v))
}

/// A value as text (`None` inside: NULL); `None` when not UTF-8.
fn text_of(value: Option<&[u8]>) -> Option<Option<String>> {
    match value {
        None => Some(None),
        Some(v) => Some(Some(std::str::from_utf8(v).ok()?.to_owned())),
    }
}

/// The columns of a DataRow as text (NULL as `None`), when it has `n`
/// of them, all valid UTF-8; `None` otherwise.
pub fn data_row_text(msg: &[u8], n: usize) -> Option<Vec<Option<String>>> {
    let (count, values) = data_row_values(msg)?;
    if count != n {
        return None;
    }
    values.take(n).map(|v| text_of(v?)).collect()
}

/// The column names of a RowDescription; `None` when it is malformed.
pub fn column_names(msg: &[u8]) -> Option<Vec<&[u8]>> {
    let b = body(msg);
    let count = usize::try_from(i16::from_be_bytes([*b.first()?, *b.get(1)?])).ok()?;
    let mut names = Vec::with_capacity(count.min(64));
    let mut at = 2usize;
    for _ in 0..count {
        let len = b.get(at..)?.iter().position(|c| *c == 0)?;
        names.push(&b[at..at + len]);
        // The name's NUL, then table, column, type, size, modifier, format.
        at += len + 1 + 18;
    }
    Some(names)
}

/// Two RowDescriptions (or NoData) describe rows of the same shape: the
/// same columns, each with the same name, type, size, modifier and
/// format. The table and column each came from are not compared:
/// PostgreSQL's own test of a prepared statement's result type
/// (`equalRowTypes`) leaves them out too. Malformed: not the same.
pub fn same_row_shape(a: &[u8], b: &[u8]) -> bool {
    if a.first() != b.first() {
        return false;
    }
    if a.first() != Some(&super::tag::ROW_DESCRIPTION) {
        return a == b;
    }
    let (a, b) = (body(a), body(b));
    let (Some(na), Some(nb)) = (a.get(..2), b.get(..2)) else {
        return false;
    };
    if na != nb {
        return false;
    }
    let count = i16::from_be_bytes([na[0], na[1]]);
    let (mut i, mut j) = (2usize, 2usize);
    for _ in 0..count {
        let (Some(la), Some(lb)) = (
            a.get(i..).and_then(|r| r.iter().position(|c| *c == 0)),
            b.get(j..).and_then(|r| r.iter().position(|c| *c == 0)),
        ) else {
            return false;
        };
        // Name, then table (4) and column (2) skipped, then type (4),
        // size (2), modifier (4) and format (2).
        let (fa, fb) = (
            a.get(i + la + 7..i + la + 19),
            b.get(j + lb + 7..j + lb + 19),
        );
        if a.get(i..i + la) != b.get(j..j + lb) || fa.is_none() || fa != fb {
            return false;
        }
        i += la + 19;
        j += lb + 19;
    }
    i == a.len() && j == b.len()
}

/// Column `n` of a DataRow as text (`None` inside: NULL); `None` when the
/// row is malformed, shorter, or the value not UTF-8.
pub fn data_row_column(msg: &[u8], n: usize) -> Option<Option<String>> {
    let (count, mut values) = data_row_values(msg)?;
    if n >= count {
        return None;
    }
    // The values before it are read (and must be whole) to find it.
    for _ in 0..n {
        values.next()??;
    }
    text_of(values.next()??)
}

/// Transaction status of a ReadyForQuery: b'I', b'T' or b'E'.
pub fn ready_status(msg: &[u8]) -> u8 {
    body(msg).first().copied().unwrap_or(b'I')
}

/// (pid, secret) of a BackendKeyData message kept as `Bytes`: the secret
/// a slice of it, not a copy (a pooled session reads it at every
/// connection it takes).
pub fn backend_key_in(msg: &Bytes) -> Option<(i32, Bytes)> {
    let (pid, secret) = key_parts(msg)?;
    Some((pid, msg.slice_ref(secret)))
}

/// (pid, secret) of a BackendKeyData message.
pub fn backend_key(msg: &[u8]) -> Option<(i32, Bytes)> {
    let (pid, secret) = key_parts(msg)?;
    Some((pid, Bytes::copy_from_slice(secret)))
}

fn key_parts(msg: &[u8]) -> Option<(i32, &[u8])> {
    let b = body(msg);
    let pid = b.get(..4)?;
    Some((
        i32::from_be_bytes([pid[0], pid[1], pid[2], pid[3]]),
        b.get(4..)?,
    ))
}

/// (name, value) of a ParameterStatus message.
/// A NotificationResponse's sender pid and channel.
pub fn notification(msg: &[u8]) -> Option<(i32, &str)> {
    let pid = msg.get(5..9)?;
    let body = msg.get(9..)?;
    let end = body.iter().position(|&b| b == 0)?;
    let channel = std::str::from_utf8(&body[..end]).ok()?;
    Some((
        i32::from_be_bytes([pid[0], pid[1], pid[2], pid[3]]),
        channel,
    ))
}

/// A NotificationResponse as it came, but from `pid`.
pub fn notification_from(msg: &[u8], pid: i32) -> Bytes {
    let mut m = BytesMut::from(msg);
    if let Some(at) = m.get_mut(5..9) {
        at.copy_from_slice(&pid.to_be_bytes());
    }
    m.freeze()
}

pub fn parameter_status(msg: &[u8]) -> Option<(&str, &str)> {
    let mut it = body(msg).split(|&b| b == 0);
    let name = std::str::from_utf8(it.next()?).ok()?;
    let value = std::str::from_utf8(it.next()?).ok()?;
    Some((name, value))
}

/// The whole ParameterStatus messages at the start of `buf`, up to the
/// first that is not one.
pub fn parameter_status_frames(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    ParameterStatusFrames(buf)
}

/// Whether a ParameterStatus message is `name`'s: its bytes compared, not
/// read as text (a kept connection's reset reports values one by one, and
/// each is looked up).
pub fn is_parameter_status_of(frame: &[u8], name: &str) -> bool {
    let n = name.as_bytes();
    frame.get(5..5 + n.len()) == Some(n) && frame.get(5 + n.len()) == Some(&0)
}

struct ParameterStatusFrames<'a>(&'a [u8]);

impl<'a> Iterator for ParameterStatusFrames<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let head = self.0.get(..5)?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let frame = self.0.get(..len.checked_add(1)?)?;
        if head[0] != super::tag::PARAMETER_STATUS || len < 4 {
            self.0 = &[];
            return None;
        }
        self.0 = &self.0[frame.len()..];
        Some(frame)
    }
}

/// One field of an ErrorResponse / NoticeResponse (`b'C'` is the SQLSTATE).
pub fn error_field(msg: &[u8], code: u8) -> Option<&str> {
    body(msg)
        .split(|&b| b == 0)
        .find(|f| f.first() == Some(&code))
        .and_then(|f| std::str::from_utf8(&f[1..]).ok())
}

/// An ErrorResponse that ends the session (FATAL or PANIC): the server
/// closes the connection after it.
pub fn is_fatal(msg: &[u8]) -> bool {
    let severity = error_field(msg, b'V').or_else(|| error_field(msg, b'S'));
    matches!(severity, Some("FATAL" | "PANIC"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RowDescription of `(name, table oid, type oid)` columns.
    fn rows(cols: &[(&str, u32, u32)]) -> BytesMut {
        let mut m = BytesMut::new();
        super::super::write::message(&mut m, b'T', |b| {
            b.put_i16(cols.len() as i16);
            for (name, table, ty) in cols {
                b.put_slice(name.as_bytes());
                b.put_u8(0);
                b.put_u32(*table);
                b.put_i16(1);
                b.put_u32(*ty);
                b.put_i16(4);
                b.put_i32(-1);
                b.put_i16(0);
            }
        });
        m
    }

    /// The table a column came from is not its shape; its name, type and
    /// count are.
    #[test]
    fn row_shapes_compare_columns_not_their_tables() {
        let a = rows(&[("a", 16384, 23)]);
        assert!(same_row_shape(&a, &rows(&[("a", 99999, 23)])));
        assert!(!same_row_shape(&a, &rows(&[("a", 16384, 20)])));
        assert!(!same_row_shape(&a, &rows(&[("b", 16384, 23)])));
        assert!(!same_row_shape(
            &a,
            &rows(&[("a", 16384, 23), ("b", 16384, 23)])
        ));
        let no_data = [b'n', 0, 0, 0, 4];
        assert!(same_row_shape(&no_data, &no_data));
        assert!(!same_row_shape(&a, &no_data));
        assert!(!same_row_shape(&a[..a.len() - 1], &a[..a.len() - 1]));
    }

    #[test]
    fn a_kept_key_is_read_without_a_copy() {
        let msg = Bytes::from_static(b"K\0\0\0\x0c\0\0\x01\x00abcd");
        let (pid, secret) = backend_key_in(&msg).unwrap();
        assert_eq!((pid, &secret[..]), (256, &b"abcd"[..]));
        assert_eq!(secret.as_ptr(), msg[9..].as_ptr());
        assert_eq!(backend_key(&msg), Some((256, secret)));
        assert_eq!(
            backend_key_in(&Bytes::from_static(b"K\0\0\0\x06\0\0")),
            None
        );
    }

    #[test]
    fn strips_plus_mechanism() {
        let mut m = BytesMut::new();
        m.put_u8(b'R');
        m.put_u32(0);
        m.put_i32(auth::SASL);
        m.put_slice(b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
        let len = (m.len() - 1) as u32;
        m[1..5].copy_from_slice(&len.to_be_bytes());
        let out = strip_channel_binding(m.freeze());
        assert_eq!(&out[9..], b"SCRAM-SHA-256\0\0");
        assert_eq!(
            u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize,
            out.len() - 1
        );
    }
}

#[cfg(test)]
mod row_tests {
    use super::*;
    use crate::wire::write;

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = bytes::BytesMut::new();
        write::message(&mut m, tag, |b| b.extend_from_slice(body));
        m.to_vec()
    }

    fn description(names: &[&str]) -> Vec<u8> {
        let mut b = (names.len() as i16).to_be_bytes().to_vec();
        for n in names {
            b.extend_from_slice(n.as_bytes());
            b.push(0);
            b.extend_from_slice(&[0; 18]);
        }
        message(b'T', &b)
    }

    fn row(values: &[Option<&str>]) -> Vec<u8> {
        let mut b = (values.len() as i16).to_be_bytes().to_vec();
        for v in values {
            match v {
                Some(v) => {
                    b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    b.extend_from_slice(v.as_bytes());
                }
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        message(b'D', &b)
    }

    #[test]
    fn column_names_of_a_description() {
        let d = description(&["usename", "passwd"]);
        assert_eq!(column_names(&d), Some(vec![&b"usename"[..], b"passwd"]));
        assert_eq!(column_names(&message(b'T', &[0, 3, b'a'])), None);
    }

    #[test]
    fn columns_of_a_row_and_their_nulls() {
        let r = row(&[Some("u"), None, Some("md5x")]);
        assert_eq!(data_row_column(&r, 0), Some(Some("u".into())));
        assert_eq!(data_row_column(&r, 1), Some(None));
        assert_eq!(data_row_column(&r, 2), Some(Some("md5x".into())));
        assert_eq!(data_row_column(&r, 3), None);
        let cut = &r[..r.len() - 2];
        assert_eq!(data_row_column(cut, 2), None);
    }
}
