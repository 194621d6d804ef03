//! `[pool] auth_query`: a user's stored password, looked up on a connection
//! of onetrip's own, logged in as `[pool] auth_user` to the client's
//! database, as PgBouncer does. One query (extended protocol, the user's
//! name its parameter, text results), then the connection is closed.

use bytes::{BufMut, BytesMut};
use tokio::io::AsyncWriteExt;

use super::{handshake::connect_upstream, upstream_auth::Answerer};
use crate::{
    auth::{Credential, LookupError, Secret},
    config::Config,
    shared::Shared,
    wire::{backend, read::read_message, tag, write},
};

/// Largest message read from the server: a row of a name and a secret,
/// or an error.
const MAX_MESSAGE: usize = 1 << 20;

/// The secret of `user` in `database` (`None`: no row, or a NULL
/// `passwd`), within `[upstream] connect_timeout` for all of it.
pub async fn look_up(
    shared: &Shared,
    config: &Config,
    auth_user: &str,
    database: &str,
    user: &str,
) -> Result<Option<Secret>, LookupError> {
    let limit = config.upstream.connect_timeout;
    let asked = query(shared, config, auth_user, database, user);
    let why = match crate::timers::timeout(limit, asked).await {
        Ok(Ok(found)) => return Ok(found),
        Ok(Err(why)) => why,
        Err(_) => format!("no answer within [upstream] connect_timeout ({limit:?})"),
    };
    Err(LookupError {
        auth_user: auth_user.to_owned(),
        why,
    })
}

/// The server's message of an ErrorResponse.
fn server_message(msg: &[u8]) -> String {
    backend::error_field(msg, b'M')
        .unwrap_or("error")
        .to_owned()
}

async fn query(
    shared: &Shared,
    config: &Config,
    auth_user: &str,
    database: &str,
    user: &str,
) -> Result<Option<Secret>, String> {
    let mut up = connect_upstream(shared).await.map_err(|e| e.to_string())?;
    let mut out = BytesMut::new();
    let params = [
        ("user", auth_user),
        ("database", database),
        ("application_name", "onetrip auth_query"),
    ];
    postgres_protocol::message::frontend::startup_message(params, &mut out)
        .map_err(|e| e.to_string())?;
    up.write_all(&out).await.map_err(|e| e.to_string())?;
    // auth_user's own password, when the server asks for one.
    let password = config
        .pool
        .password_of(auth_user)
        .map(|p| Credential::Password(p.to_owned()));
    let mut answerer = Answerer::new(auth_user, password.as_ref());
    let mut buf = BytesMut::with_capacity(1024);
    let max = crate::wire::frame::MAX_AUTH_MESSAGE;
    loop {
        let msg = read_message(&mut up, &mut buf, max)
            .await
            .map_err(|e| e.to_string())?;
        match msg[0] {
            tag::AUTHENTICATION if backend::auth_code(&msg) == Some(backend::auth::OK) => {}
            tag::AUTHENTICATION => {
                out.clear();
                answerer.answer(&msg, &mut out).map_err(|e| e.to_string())?;
                if !out.is_empty() {
                    up.write_all(&out).await.map_err(|e| e.to_string())?;
                }
            }
            tag::ERROR_RESPONSE => return Err(server_message(&msg)),
            tag::READY_FOR_QUERY => break,
            // ParameterStatus, BackendKeyData, notices.
            _ => {}
        }
    }
    out.clear();
    write::parse(&mut out, "", &config.pool.auth_query);
    bind_text(&mut out, user);
    write::message(&mut out, tag::DESCRIBE, |b| {
        b.put_u8(b'P');
        b.put_u8(0);
    });
    write::execute(&mut out, "");
    out.extend_from_slice(&write::SYNC);
    // Taken after the Sync's answers: the connection is done with.
    out.extend_from_slice(&write::TERMINATE);
    up.write_all(&out).await.map_err(|e| e.to_string())?;
    let mut column = None;
    let mut found = None;
    let mut failed = None;
    loop {
        let msg = read_message(&mut up, &mut buf, MAX_MESSAGE)
            .await
            .map_err(|e| e.to_string())?;
        match msg[0] {
            tag::ROW_DESCRIPTION => {
                column = Some(passwd_column(&msg).ok_or("auth_query returns no passwd column")?);
            }
            tag::DATA_ROW if found.is_none() => {
                let at = column.ok_or("auth_query's row came before its description")?;
                found = Some(nth_column(&msg, at).ok_or("auth_query's row is malformed")?);
            }
            tag::ERROR_RESPONSE => failed = Some(server_message(&msg)),
            tag::READY_FOR_QUERY => break,
            _ => {}
        }
    }
    if let Some(why) = failed {
        return Err(format!("auth_query failed: {why}"));
    }
    match found.flatten() {
        None => Ok(None),
        Some(passwd) => Secret::parse(&passwd)
            .map(Some)
            .map_err(|e| format!("user \"{user}\": {e}")),
    }
}

/// A Bind of the unnamed statement to the unnamed portal, with one text
/// parameter, results in text.
fn bind_text(out: &mut BytesMut, value: &str) {
    write::message(out, tag::BIND, |b| {
        b.put_u8(0);
        b.put_u8(0);
        b.put_i16(0);
        b.put_i16(1);
        b.put_i32(value.len() as i32);
        b.put_slice(value.as_bytes());
        b.put_i16(0);
    });
}

/// The column named `passwd` of a RowDescription; else the second, where
/// PgBouncer reads it.
fn passwd_column(msg: &[u8]) -> Option<usize> {
    let b = backend::body(msg);
    let count = usize::try_from(i16::from_be_bytes([*b.first()?, *b.get(1)?])).ok()?;
    let mut at = 2usize;
    for i in 0..count {
        let len = b.get(at..)?.iter().position(|c| *c == 0)?;
        if &b[at..at + len] == b"passwd" {
            return Some(i);
        }
        // The name's NUL, then table, column, type, size, modifier, format.
        at += len + 1 + 18;
    }
    (count >= 2).then_some(1)
}

/// Column `n` of a DataRow as text (`None` inside: NULL); `None` when the
/// row is malformed or not UTF-8.
fn nth_column(msg: &[u8], n: usize) -> Option<Option<String>> {
    let b = backend::body(msg);
    let count = usize::try_from(i16::from_be_bytes([*b.first()?, *b.get(1)?])).ok()?;
    if n >= count {
        return None;
    }
    let mut at = 2usize;
    for i in 0..=n {
        let len = i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        let Ok(len) = usize::try_from(len) else {
            if i == n {
                return Some(None);
            }
            continue;
        };
        let end = at.checked_add(len)?;
        if i == n {
            return Some(Some(std::str::from_utf8(b.get(at..end)?).ok()?.to_owned()));
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(4 + body.len() as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
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
    fn the_passwd_column_is_found_by_name_or_place() {
        assert_eq!(passwd_column(&description(&["usename", "passwd"])), Some(1));
        assert_eq!(passwd_column(&description(&["passwd", "usename"])), Some(0));
        assert_eq!(passwd_column(&description(&["name", "secret"])), Some(1));
        assert_eq!(passwd_column(&description(&["x"])), None);
        assert_eq!(passwd_column(&message(b'T', &[0, 3, b'a'])), None);
    }

    #[test]
    fn columns_of_a_row_and_their_nulls() {
        let r = row(&[Some("u"), None, Some("md5x")]);
        assert_eq!(nth_column(&r, 0), Some(Some("u".into())));
        assert_eq!(nth_column(&r, 1), Some(None));
        assert_eq!(nth_column(&r, 2), Some(Some("md5x".into())));
        assert_eq!(nth_column(&r, 3), None);
        let cut = &r[..r.len() - 2];
        assert_eq!(nth_column(cut, 2), None);
    }
}
