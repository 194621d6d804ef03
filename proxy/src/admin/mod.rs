//! The admin console: a client that connects to the database named in
//! `[admin] database` talks to the proxy itself, over the simple query
//! protocol, like PgBouncer's `pgbouncer` database.

pub(crate) mod auth;
mod command;

use std::{net::SocketAddr, sync::Arc};

use bytes::BytesMut;
use tracing::{debug, info};

use crate::{
    auth::client::Client,
    net::Stream,
    shared::Shared,
    wire::{
        backend,
        read::ReadError,
        startup::StartupMessage,
        tag,
        write::{self, Severity},
    },
};

use crate::auth::AuthError;

/// Serves one admin console session to its end.
pub async fn serve(
    stream: Stream,
    params: Vec<(String, String)>,
    shared: &Arc<Shared>,
    peer: SocketAddr,
    mut deadline: crate::timers::Sleep,
) {
    // The admin users in force when the client comes, for all its login.
    let config = shared.config();
    let mut client = Client::new(stream, config.limits.client_write_timeout);
    let user = StartupMessage::param(&params, "user")
        .unwrap_or("")
        .to_owned();
    // Authentication shares the startup deadline: a client that stops
    // answering must not hold a task forever.
    let limit = config.limits.startup_timeout;
    let authenticated = deadline
        .bound(auth::authenticate(&mut client, &config.admin, &user))
        .await
        .unwrap_or(Err(AuthError::Timeout(limit)));
    drop(deadline);
    let caller = match authenticated {
        Ok(u) => command::Caller {
            reset_stats: u.reset_stats,
            reload: u.reload,
        },
        Err(e) => {
            info!(%peer, user = %user, "admin console login refused: {e}");
            if !matches!(e, AuthError::Io(_)) {
                let _ = client
                    .write(&write::error(Severity::Fatal, e.sqlstate(), &e.to_string()))
                    .await;
            }
            return;
        }
    };
    client.authenticated();
    info!(%peer, user = %user, "admin console session started");
    let mut out = BytesMut::new();
    crate::auth::exchange::ok(&mut out);
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
    write::backend_key_data(&mut out, 0, &[0; 4]);
    write::ready_for_query(&mut out, b'I');
    if client.write(&out).await.is_err() {
        return;
    }
    if let Err(e) = query_loop(&mut client, shared, caller).await {
        debug!("admin console session ended: {e}");
    }
}

async fn query_loop(
    client: &mut Client,
    shared: &Arc<Shared>,
    caller: command::Caller,
) -> Result<(), ReadError> {
    let mut shutdown = shared.shutdown_forced();
    // After an extended-protocol message: skip input until Sync, as a server
    // does after an error.
    let mut discard_until_sync = false;
    loop {
        let msg = tokio::select! {
            m = client.read() => Some(m?),
            _ = shutdown.wait_for(|v| *v) => None,
        };
        let Some(msg) = msg else {
            let e = write::error(
                Severity::Fatal,
                "57P01",
                "terminating admin console session: onetrip is shutting down",
            );
            client.write(&e).await?;
            return Ok(());
        };
        let Some((t, msg)) = msg else { return Ok(()) };
        let mut out = BytesMut::new();
        match t {
            tag::TERMINATE => return Ok(()),
            tag::QUERY => {
                discard_until_sync = false;
                let body = backend::body(&msg);
                let text = body.strip_suffix(&[0]).unwrap_or(body);
                match std::str::from_utf8(text) {
                    Ok(sql) => command::run_all(sql, shared, caller, &mut out),
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
                client
                    .write(&write::error(Severity::Fatal, "08P01", &msg))
                    .await?;
                return Ok(());
            }
        }
        if !out.is_empty() {
            client.write(&out).await?;
        }
    }
}
