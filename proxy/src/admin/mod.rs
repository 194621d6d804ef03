//! The admin console: a client that connects to the database named in
//! `[admin] database` talks to the proxy itself, over the simple query
//! protocol, like PgBouncer's `pgbouncer` database.

mod auth;
mod commands;

use std::{net::SocketAddr, sync::Arc};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{debug, info};

use crate::{
    net::Stream,
    shared::Shared,
    wire::{
        startup::StartupMessage,
        tag,
        write::{self, Severity},
    },
};

pub use auth::{AuthError, Scram};

/// Largest message the console reads; its commands are short.
const MAX_MESSAGE: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("invalid message length {0}")]
    BadLength(u32),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one frontend message: `(tag, body)`, or `None` at a clean EOF.
pub(crate) async fn read_message(stream: &mut Stream) -> Result<Option<(u8, Bytes)>, MessageError> {
    let mut head = [0u8; 5];
    match stream.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    if len < 4 || len as usize > MAX_MESSAGE {
        return Err(MessageError::BadLength(len));
    }
    let mut body = BytesMut::zeroed(len as usize - 4);
    stream.read_exact(&mut body).await?;
    Ok(Some((head[0], body.freeze())))
}

/// Serves one admin console session to its end.
pub async fn serve(
    mut stream: Stream,
    params: Vec<(String, String)>,
    shared: &Arc<Shared>,
    peer: SocketAddr,
    mut deadline: crate::timers::Sleep,
) {
    let user = StartupMessage::param(&params, "user")
        .unwrap_or("")
        .to_owned();
    // Authentication shares the startup deadline: a client that stops
    // answering must not hold a task forever.
    let limit = shared.config.limits.startup_timeout;
    let authenticated = deadline
        .bound(auth::authenticate(&mut stream, &shared.config.admin, &user))
        .await
        .unwrap_or(Err(AuthError::Timeout(limit)));
    drop(deadline);
    if let Err(e) = authenticated {
        info!(%peer, user = %user, "admin console login refused: {e}");
        if !matches!(e, AuthError::Io(_)) {
            let _ = stream
                .write_all(&write::error(Severity::Fatal, e.sqlstate(), &e.to_string()))
                .await;
        }
        return;
    }
    info!(%peer, user = %user, "admin console session started");
    let mut out = BytesMut::new();
    auth::ok(&mut out);
    for (k, v) in [
        (
            "server_version",
            concat!("15.0 (onetrip ", env!("CARGO_PKG_VERSION"), ")"),
        ),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
        (
            "application_name",
            StartupMessage::param(&params, "application_name").unwrap_or(""),
        ),
    ] {
        write::parameter_status(&mut out, k, v);
    }
    // Cancel requests with this key are ignored: nothing here runs long.
    write::message(&mut out, tag::BACKEND_KEY_DATA, |b| {
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
    });
    write::ready_for_query(&mut out, b'I');
    if stream.write_all(&out).await.is_err() {
        return;
    }
    if let Err(e) = query_loop(&mut stream, shared).await {
        debug!("admin console session ended: {e}");
    }
}

async fn query_loop(stream: &mut Stream, shared: &Arc<Shared>) -> Result<(), MessageError> {
    let mut shutdown = shared.shutdown_forced();
    // After an extended-protocol message: skip input until Sync, as a server
    // does after an error.
    let mut discard_until_sync = false;
    loop {
        let msg = tokio::select! {
            m = read_message(stream) => Some(m?),
            _ = shutdown.wait_for(|v| *v) => None,
        };
        let Some(msg) = msg else {
            let e = write::error(
                Severity::Fatal,
                "57P01",
                "terminating admin console session: onetrip is shutting down",
            );
            stream.write_all(&e).await?;
            return Ok(());
        };
        let Some((t, body)) = msg else { return Ok(()) };
        let mut out = BytesMut::new();
        match t {
            tag::TERMINATE => return Ok(()),
            tag::QUERY => {
                discard_until_sync = false;
                let text = body.strip_suffix(&[0]).unwrap_or(&body);
                match std::str::from_utf8(text) {
                    Ok(sql) => commands::run_all(sql, shared, &mut out),
                    Err(_) => write::error_into(
                        &mut out,
                        Severity::Error,
                        "22021",
                        "query is not valid UTF-8",
                    ),
                }
                write::ready_for_query(&mut out, b'I');
            }
            tag::SYNC => {
                discard_until_sync = false;
                write::ready_for_query(&mut out, b'I');
            }
            tag::PARSE
            | tag::BIND
            | tag::DESCRIBE
            | tag::EXECUTE
            | tag::CLOSE
            | tag::FLUSH
            | tag::FUNCTION_CALL => {
                if !discard_until_sync {
                    discard_until_sync = true;
                    write::error_into(
                        &mut out,
                        Severity::Error,
                        "0A000",
                        "admin console supports the simple query protocol only",
                    );
                }
            }
            // Stray COPY messages: nothing is being copied.
            tag::COPY_DATA | tag::COPY_DONE | tag::COPY_FAIL => {}
            other => {
                let msg = format!("invalid frontend message type '{}'", char::from(other));
                stream
                    .write_all(&write::error(Severity::Fatal, "08P01", &msg))
                    .await?;
                return Ok(());
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
        }
    }
}
