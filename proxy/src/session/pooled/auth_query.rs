//! `[pool] auth_query`: a user's stored password, looked up on a connection
//! of onetrip's own, logged in as `[pool] auth_user` to the client's
//! database, as PgBouncer does. One query (extended protocol, the user's
//! name its parameter, text results), then the connection is closed.

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;

use crate::session::{handshake::connect_upstream, upstream_auth::Answerer};
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
    write::bind_text(&mut out, "", "", &[user]);
    write::describe(&mut out, b'P', "");
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
                found = Some(
                    backend::data_row_column(&msg, at).ok_or("auth_query's row is malformed")?,
                );
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

/// The column named `passwd` of a RowDescription; else the second, where
/// PgBouncer reads it.
fn passwd_column(msg: &[u8]) -> Option<usize> {
    let names = backend::column_names(msg)?;
    let named = names.iter().position(|n| *n == b"passwd");
    named.or((names.len() >= 2).then_some(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description(names: &[&str]) -> Vec<u8> {
        let mut out = BytesMut::new();
        write::message(&mut out, tag::ROW_DESCRIPTION, |b| {
            b.extend_from_slice(&(names.len() as i16).to_be_bytes());
            for n in names {
                b.extend_from_slice(n.as_bytes());
                b.extend_from_slice(&[0; 19]);
            }
        });
        out.to_vec()
    }

    #[test]
    fn the_passwd_column_is_found_by_name_or_place() {
        assert_eq!(passwd_column(&description(&["usename", "passwd"])), Some(1));
        assert_eq!(passwd_column(&description(&["passwd", "usename"])), Some(0));
        assert_eq!(passwd_column(&description(&["name", "secret"])), Some(1));
        assert_eq!(passwd_column(&description(&["x"])), None);
    }
}
