//! Messages the proxy writes itself: to clients (errors, the admin
//! console's answers, answers it gives for the server) and to the server
//! (statements of its own).

use bytes::{BufMut, Bytes, BytesMut};

/// Error severity as the protocol spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Fatal,
}

/// A Terminate message: what the proxy sends for a client that left.
pub const TERMINATE: [u8; 5] = [super::tag::TERMINATE, 0, 0, 0, 4];

pub const SYNC: [u8; 5] = [super::tag::SYNC, 0, 0, 0, 4];
pub const FLUSH: [u8; 5] = [super::tag::FLUSH, 0, 0, 0, 4];

/// A Query of `sql`.
pub fn query(out: &mut BytesMut, sql: &str) {
    message(out, super::tag::QUERY, |b| cstr(b, sql));
}

/// A Close of the prepared statement (`kind` b'S') or portal (b'P') `name`.
pub fn close(out: &mut BytesMut, kind: u8, name: &str) {
    message(out, super::tag::CLOSE, |b| {
        b.put_u8(kind);
        cstr(b, name);
    });
}

/// A Parse of `sql` as statement `name`, with no parameter types given.
pub fn parse(out: &mut BytesMut, name: &str, sql: &str) {
    parse_with_text(out, name.as_bytes(), sql, &0i16.to_be_bytes());
}

/// A client's Parse with its text replaced: `name` and `rest` (the
/// parameter types, as the client sent them after the text) as they were.
pub fn parse_with_text(out: &mut BytesMut, name: &[u8], sql: &str, rest: &[u8]) {
    message(out, super::tag::PARSE, |b| {
        b.put_slice(name);
        b.put_u8(0);
        cstr(b, sql);
        b.put_slice(rest);
    });
}

/// A Bind of statement `stmt` to `portal`, with `values` as text
/// parameters, results in text.
pub fn bind_text(out: &mut BytesMut, portal: &str, stmt: &str, values: &[&str]) {
    message(out, super::tag::BIND, |b| {
        cstr(b, portal);
        cstr(b, stmt);
        b.put_i16(0);
        b.put_i16(values.len() as i16);
        for v in values {
            b.put_i32(v.len() as i32);
            b.put_slice(v.as_bytes());
        }
        b.put_i16(0);
    });
}

/// A Describe of the statement (`kind` b'S') or portal (b'P') `name`.
pub fn describe(out: &mut BytesMut, kind: u8, name: &str) {
    message(out, super::tag::DESCRIBE, |b| {
        b.put_u8(kind);
        cstr(b, name);
    });
}

/// BackendKeyData: the key a client cancels its queries with.
pub fn backend_key_data(out: &mut BytesMut, pid: i32, secret: &[u8]) {
    message(out, super::tag::BACKEND_KEY_DATA, |b| {
        b.put_i32(pid);
        b.put_slice(secret);
    });
}

/// A Bind of statement `stmt` to `portal`, without parameters, results in
/// text.
pub fn bind(out: &mut BytesMut, portal: &str, stmt: &str) {
    bind_text(out, portal, stmt, &[]);
}

/// An Execute of `portal` for all its rows.
pub fn execute(out: &mut BytesMut, portal: &str) {
    message(out, super::tag::EXECUTE, |b| {
        cstr(b, portal);
        b.put_i32(0);
    });
}

/// Appends one message with `tag`, letting `body` write the body.
pub fn message(out: &mut BytesMut, tag: u8, body: impl FnOnce(&mut BytesMut)) {
    out.put_u8(tag);
    let at = out.len();
    out.put_u32(0);
    body(out);
    let len = (out.len() - at) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn cstr(out: &mut BytesMut, s: &str) {
    // A NUL inside would end the field early; PostgreSQL's strings never hold one.
    let b = s.as_bytes();
    if b.contains(&0) {
        out.extend(b.iter().map(|&c| if c == 0 { b' ' } else { c }));
    } else {
        out.put_slice(b);
    }
    out.put_u8(0);
}

/// An ErrorResponse with severity, SQLSTATE and message.
pub fn error(severity: Severity, sqlstate: &str, text: &str) -> Bytes {
    let mut out = BytesMut::new();
    error_into(&mut out, severity, sqlstate, text);
    out.freeze()
}

pub fn error_into(out: &mut BytesMut, severity: Severity, sqlstate: &str, text: &str) {
    error_detail_into(out, severity, sqlstate, text, None);
}

/// An ErrorResponse with a DETAIL line (`D`) as well.
pub fn error_detail(severity: Severity, sqlstate: &str, text: &str, detail: &str) -> Bytes {
    let mut out = BytesMut::new();
    error_detail_into(&mut out, severity, sqlstate, text, Some(detail));
    out.freeze()
}

fn error_detail_into(
    out: &mut BytesMut,
    severity: Severity,
    sqlstate: &str,
    text: &str,
    detail: Option<&str>,
) {
    let sev = match severity {
        Severity::Error => "ERROR",
        Severity::Fatal => "FATAL",
    };
    message(out, b'E', |b| {
        b.put_u8(b'S');
        cstr(b, sev);
        b.put_u8(b'V');
        cstr(b, sev);
        b.put_u8(b'C');
        cstr(b, sqlstate);
        b.put_u8(b'M');
        cstr(b, text);
        if let Some(d) = detail {
            b.put_u8(b'D');
            cstr(b, d);
        }
        b.put_u8(0);
    });
}

/// A server's ErrorResponse `msg` with its severity made FATAL, every
/// other field kept: an error the server gave a setting made after login,
/// told as the login's own (where the server would have refused it).
pub fn as_fatal(msg: &[u8]) -> Bytes {
    let body = msg.get(5..).unwrap_or_default();
    let mut out = BytesMut::with_capacity(msg.len() + 8);
    message(&mut out, b'E', |b| {
        for field in body.split(|&c| c == 0).filter(|f| !f.is_empty()) {
            match field[0] {
                b'S' | b'V' => {
                    b.put_u8(field[0]);
                    cstr(b, "FATAL");
                }
                _ => {
                    b.put_slice(field);
                    b.put_u8(0);
                }
            }
        }
        b.put_u8(0);
    });
    out.freeze()
}

/// A server's ErrorResponse `msg` with its position (`P`, in characters,
/// from 1) moved `by` characters on, every other field kept: an error
/// found in a statement's text, told as found in a longer text that holds
/// it (a PREPARE's, for its statement).
pub fn error_moved(msg: &[u8], by: usize) -> Bytes {
    let body = msg.get(5..).unwrap_or_default();
    let mut out = BytesMut::with_capacity(msg.len() + 8);
    message(&mut out, b'E', |b| {
        for field in body.split(|&c| c == 0).filter(|f| !f.is_empty()) {
            let at = std::str::from_utf8(&field[1..])
                .ok()
                .and_then(|p| p.parse::<usize>().ok());
            match (field[0], at) {
                (b'P', Some(at)) => {
                    b.put_u8(b'P');
                    cstr(b, &at.saturating_add(by).to_string());
                }
                _ => {
                    b.put_slice(field);
                    b.put_u8(0);
                }
            }
        }
        b.put_u8(0);
    });
    out.freeze()
}

/// A client's Parse, Bind, or Describe of a statement, naming the server's
/// statement `name` in place of the client's, every other byte kept; `None`
/// for any other message, or one that names no statement.
pub fn with_statement_name(msg: &[u8], name: &str) -> Option<Bytes> {
    let body = msg.get(5..)?;
    // Where the statement's name begins in the body.
    let at = match *msg.first()? {
        super::tag::PARSE => 0,
        super::tag::BIND => memchr::memchr(0, body)? + 1,
        super::tag::DESCRIBE if body.first() == Some(&b'S') => 1,
        _ => return None,
    };
    let len = memchr::memchr(0, body.get(at..)?)?;
    // Written into the thread's scratch buffer and split off it: the
    // message is sent and dropped within the turn, and the buffer takes
    // its room back at the next reserve, so a Bind renamed per message
    // allocates nothing once the buffer has grown.
    RENAMED.with_borrow_mut(|out| {
        out.reserve((msg.len() + name.len()).max(RENAMED_ROOM));
        message(out, msg[0], |b| {
            b.put_slice(&body[..at]);
            cstr(b, name);
            b.put_slice(&body[at + len + 1..]);
        });
        Some(out.split().freeze())
    })
}

/// What the scratch buffer for renamed messages asks for at least.
const RENAMED_ROOM: usize = 4096;

thread_local! {
    static RENAMED: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// A server's ErrorResponse `msg` with the statement name `from`, quoted
/// as the server quotes it, told as `to` in each field: the error of a
/// shared server statement, told under the client's name for it.
pub fn error_renamed(msg: &[u8], from: &str, to: &str) -> Bytes {
    let body = msg.get(5..).unwrap_or_default();
    let (from, to) = (format!("\"{from}\""), format!("\"{to}\""));
    let mut out = BytesMut::with_capacity(msg.len() + to.len());
    message(&mut out, b'E', |b| {
        for field in body.split(|&c| c == 0).filter(|f| !f.is_empty()) {
            match std::str::from_utf8(&field[1..]) {
                Ok(text) if text.contains(&from) => {
                    b.put_u8(field[0]);
                    cstr(b, &text.replace(&from, &to));
                }
                _ => {
                    b.put_slice(field);
                    b.put_u8(0);
                }
            }
        }
        b.put_u8(0);
    });
    out.freeze()
}

/// A NoticeResponse of severity WARNING: told to the client, who goes on.
pub fn warning_into(out: &mut BytesMut, sqlstate: &str, text: &str) {
    message(out, b'N', |b| {
        for (code, value) in [(b'S', "WARNING"), (b'V', "WARNING"), (b'C', sqlstate)] {
            b.put_u8(code);
            cstr(b, value);
        }
        b.put_u8(b'M');
        cstr(b, text);
        b.put_u8(0);
    });
}

pub fn ready_for_query(out: &mut BytesMut, status: u8) {
    message(out, b'Z', |b| b.put_u8(status));
}

pub fn auth_request(out: &mut BytesMut, code: i32, extra: &[u8]) {
    message(out, b'R', |b| {
        b.put_i32(code);
        b.put_slice(extra);
    });
}

pub fn parameter_status(out: &mut BytesMut, name: &str, value: &str) {
    let (n, v) = (name.as_bytes(), value.as_bytes());
    // Short strings: the standard search, with no dispatch to wide code.
    if n.contains(&0) || v.contains(&0) {
        return message(out, b'S', |b| {
            cstr(b, name);
            cstr(b, value);
        });
    }
    // A login's greeting holds a dozen of these: one reservation each.
    let len = 4 + n.len() + 1 + v.len() + 1;
    out.reserve(1 + len);
    out.put_u8(b'S');
    out.put_u32(len as u32);
    out.put_slice(n);
    out.put_u8(0);
    out.put_slice(v);
    out.put_u8(0);
}

/// A ParameterStatus message for each of `params`, in order.
pub fn parameter_statuses(out: &mut BytesMut, params: &[(String, String)]) {
    for (k, v) in params {
        parameter_status(out, k, v);
    }
}

/// A ParameterStatus message of its own.
pub fn parameter_status_frame(name: &str, value: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(name.len() + value.len() + 7);
    parameter_status(&mut out, name, value);
    out.freeze()
}

/// The type a RowDescription gives a column; its values go as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Text,
    Int8,
}

impl ColumnType {
    /// (type oid, type size), as `pg_type` has them.
    fn oid_and_size(self) -> (u32, i16) {
        match self {
            ColumnType::Text => (25, -1),
            ColumnType::Int8 => (20, 8),
        }
    }
}

/// RowDescription: each column's name and type, every value in text format.
pub fn row_description(out: &mut BytesMut, columns: &[(&str, ColumnType)]) {
    message(out, b'T', |b| {
        b.put_i16(columns.len() as i16);
        for &(name, ty) in columns {
            let (oid, size) = ty.oid_and_size();
            cstr(b, name);
            b.put_u32(0); // table oid
            b.put_i16(0); // column number
            b.put_u32(oid);
            b.put_i16(size);
            b.put_i32(-1); // type modifier
            b.put_i16(0); // text format
        }
    });
}

pub fn data_row<S: AsRef<str>>(out: &mut BytesMut, values: &[Option<S>]) {
    message(out, b'D', |b| {
        b.put_i16(values.len() as i16);
        for v in values {
            match v {
                Some(v) => {
                    b.put_i32(v.as_ref().len() as i32);
                    b.put_slice(v.as_ref().as_bytes());
                }
                None => b.put_i32(-1),
            }
        }
    });
}

pub fn command_complete(out: &mut BytesMut, tag: &str) {
    message(out, b'C', |b| cstr(b, tag));
}

pub fn empty_query(out: &mut BytesMut) {
    message(out, b'I', |_| {});
}

/// A ReadyForQuery with the given status, as one frame.
pub fn ready_frame(status: u8) -> Bytes {
    let mut out = BytesMut::with_capacity(6);
    ready_for_query(&mut out, status);
    out.freeze()
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_made_fatal_keeps_its_fields() {
        let e = super::error_detail(super::Severity::Error, "22023", "bad value", "why");
        let f = super::as_fatal(&e);
        let want = super::error_detail(super::Severity::Fatal, "22023", "bad value", "why");
        assert_eq!(f, want);
    }

    use super::*;

    #[test]
    fn an_error_moved_keeps_its_fields_and_moves_its_position() {
        let mut e = BytesMut::new();
        message(&mut e, b'E', |b| {
            b.put_slice(b"SERROR\0C42P01\0Mno\0P15\0Rf\0\0");
        });
        let mut want = BytesMut::new();
        message(&mut want, b'E', |b| {
            b.put_slice(b"SERROR\0C42P01\0Mno\0P28\0Rf\0\0");
        });
        assert_eq!(error_moved(&e, 13), want.freeze());
        assert_eq!(error_moved(&e, 0), e.clone().freeze());
        let unplaced = error_detail(Severity::Error, "22023", "bad value", "why");
        assert_eq!(error_moved(&unplaced, 4), unplaced);
    }

    #[test]
    fn a_nul_inside_a_string_becomes_a_space() {
        let mut out = BytesMut::new();
        parameter_status(&mut out, "a\0b", "plain");
        assert_eq!(&out[5..], b"a b\0plain\0");
        let len = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
        assert_eq!(len, out.len() - 1);
        let mut plain = BytesMut::new();
        parameter_status(&mut plain, "TimeZone", "UTC");
        let mut framed = BytesMut::new();
        message(&mut framed, b'S', |b| {
            cstr(b, "TimeZone");
            cstr(b, "UTC");
        });
        assert_eq!(plain, framed);
    }

    #[test]
    fn row_description_types_each_column() {
        let mut out = BytesMut::new();
        row_description(
            &mut out,
            &[("n", ColumnType::Int8), ("s", ColumnType::Text)],
        );
        // After the count: name, table oid, column number, then type and size.
        let field = |at: usize| &out[at + 2 + 6..at + 2 + 12];
        assert_eq!(&out[5..7], &[0, 2]);
        assert_eq!(field(7), &[0, 0, 0, 20, 0, 8]);
        assert_eq!(field(7 + 20), &[0, 0, 0, 25, 0xff, 0xff]);
    }

    #[test]
    fn a_statement_renamed_keeps_every_other_byte() {
        let mut bind = BytesMut::new();
        message(&mut bind, super::super::tag::BIND, |b| {
            b.put_slice(b"p\0s1\0\0\x01\0\x01\0\0\0\x011\0\0");
        });
        let mut want = BytesMut::new();
        message(&mut want, super::super::tag::BIND, |b| {
            b.put_slice(b"p\0shared_9\0\0\x01\0\x01\0\0\0\x011\0\0");
        });
        assert_eq!(with_statement_name(&bind, "shared_9"), Some(want.freeze()));
        let mut p = BytesMut::new();
        parse(&mut p, "s1", "SELECT 1");
        let mut want = BytesMut::new();
        parse(&mut want, "x", "SELECT 1");
        assert_eq!(with_statement_name(&p, "x"), Some(want.freeze()));
        let mut d = BytesMut::new();
        describe(&mut d, b'S', "s1");
        let mut want = BytesMut::new();
        describe(&mut want, b'S', "x");
        assert_eq!(with_statement_name(&d, "x"), Some(want.freeze()));
        let mut portal = BytesMut::new();
        describe(&mut portal, b'P', "s1");
        assert_eq!(with_statement_name(&portal, "x"), None);
        // Cut short: no name's end.
        assert_eq!(with_statement_name(&bind[..7], "x"), None);
    }

    #[test]
    fn renamed_messages_kept_together_stay_whole() {
        let kept: Vec<(String, Bytes)> = (0..3000)
            .map(|i| {
                let name = format!("shared_{i}");
                let mut p = BytesMut::new();
                parse(&mut p, "s", &format!("SELECT {i}"));
                (name.clone(), with_statement_name(&p, &name).unwrap())
            })
            .collect();
        for (i, (name, got)) in kept.iter().enumerate() {
            let mut want = BytesMut::new();
            parse(&mut want, name, &format!("SELECT {i}"));
            assert_eq!(got, &want.freeze());
        }
    }

    #[test]
    fn an_error_renamed_names_the_clients_statement() {
        let e = error(
            Severity::Error,
            "08P01",
            "bind message supplies 1 parameters, but prepared statement \"shared_9\" requires 2",
        );
        let want = error(
            Severity::Error,
            "08P01",
            "bind message supplies 1 parameters, but prepared statement \"s1\" requires 2",
        );
        assert_eq!(error_renamed(&e, "shared_9", "s1"), want);
    }
}
