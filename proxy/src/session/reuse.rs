//! Upstream connections kept for the next client (`[upstream] reuse`).
//!
//! A session whose client leaves at a clean point resets its upstream
//! connection with DISCARD ALL and leaves it here; a client that sends the
//! same startup packet, byte for byte, takes it instead of connecting, and
//! gets the greeting the upstream gave the first one. Only connections the
//! upstream let in without a password are kept: a kept connection admits
//! the next client without asking the upstream, which is only what the
//! upstream itself would do for a trusted user.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use super::handshake::{Authed, HandshakeEnd, KeyGuard};
use super::streams::Streams;
use crate::{
    cancel::Pid,
    kept::Kept,
    net::Pair,
    protocol::ServerConnection,
    wire::read::{ReadError, read_message},
};
use crate::{
    net::Stream,
    shared::Shared,
    stats::{Counters, SessionInfo},
    wire::{backend, tag, write},
};

/// Why a connection was not kept.
#[derive(Debug, thiserror::Error)]
pub enum ParkError {
    #[error("upstream connection is TLS")]
    Tls,
    #[error("reset did not finish: {0}")]
    Read(#[from] ReadError),
    #[error("reset failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("reset answered with message type '{}'", char::from(*.0))]
    Unexpected(u8),
    #[error("reset took longer than {0:?}")]
    Timeout(Duration),
    #[error("{0} connections are kept already (upstream.reuse_max_idle)")]
    Full(usize),
    #[error("connection is older than upstream.reuse_lifetime ({0:?})")]
    Old(Duration),
}

/// Resets the upstream connection of a session whose client has left
/// cleanly and keeps it for the next client sending `startup`; closes it
/// when that fails. `params` are the session's latest ParameterStatus values.
/// What a session leaves with its upstream connection.
pub struct Leaving {
    pub upstream: Stream,
    pub startup: Bytes,
    pub conn: Box<ServerConnection>,
    /// ReadyForQuery messages still owed for queries of the proxy's own
    /// (the session's settings, asked at its start): read and dropped
    /// before the reset's.
    pub owed: usize,
}

pub async fn park(leaving: Leaving, shared: &Shared) -> Result<(), ParkError> {
    let Leaving {
        upstream,
        startup,
        mut conn,
        owed,
    } = leaving;
    let Stream::Plain(mut tcp) = upstream else {
        return Err(ParkError::Tls);
    };
    let lifetime = shared.config().upstream.reuse_lifetime;
    if conn.opened.elapsed() >= lifetime {
        let _ = tcp.write_all(&write::TERMINATE).await;
        return Err(ParkError::Old(lifetime));
    }
    // Until it is kept (or given up), a new client for it waits for it.
    let _resetting = shared.reuse.start_reset(&startup);
    let limit = shared.config().upstream.connect_timeout;
    let reset = reset(
        &mut tcp,
        &["DISCARD ALL"],
        &mut conn,
        shared.config().limits.max_message_bytes,
        owed,
    );
    let result = match crate::timers::timeout(limit, reset).await {
        Ok(r) => r,
        Err(_) => Err(ParkError::Timeout(limit)),
    };
    if let Err(e) = result {
        let _ = tcp.write_all(&write::TERMINATE).await;
        return Err(e);
    }
    let tcp = tcp.into_std()?;
    // A blocking socket would hang the liveness check.
    tcp.set_nonblocking(true)?;
    // DISCARD ALL left it as a new connection, but for its settings.
    conn.statements = Default::default();
    conn.state = Default::default();
    let kept = Kept {
        tcp,
        conn,
        since: Instant::now(),
    };
    let max = shared.config().upstream.reuse_max_idle;
    if shared.reuse.put(startup, kept, max) {
        Ok(())
    } else {
        Err(ParkError::Full(max))
    }
}

/// The `queries` (DISCARD ALL, or a ROLLBACK first), one Query each, read
/// to their ReadyForQuery. ParameterStatus messages (RESET ALL reports the
/// values it restores) update `params`; notices and notifications still on
/// their way to the old client are dropped, and so are the answers to
/// `owed` queries of the proxy's own sent before.
pub(super) async fn reset(
    tcp: &mut (impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin),
    queries: &[&str],
    conn: &mut ServerConnection,
    max: usize,
    mut owed: usize,
) -> Result<(), ParkError> {
    let mut out = BytesMut::with_capacity(64);
    for q in queries {
        write::query(&mut out, q);
    }
    tcp.write_all(&out).await?;
    // TLS may hold what it took until flushed.
    tcp.flush().await?;
    let mut left = queries.len();
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        let msg = read_message(tcp, &mut buf, max).await?;
        if owed > 0 {
            if msg[0] == tag::READY_FOR_QUERY {
                owed -= 1;
            }
            continue;
        }
        match msg[0] {
            tag::COMMAND_COMPLETE | tag::NOTICE_RESPONSE | tag::NOTIFICATION => {}
            tag::PARAMETER_STATUS => {
                if let Some((k, v)) = backend::parameter_status(&msg) {
                    conn.set_param(k, v);
                }
            }
            tag::READY_FOR_QUERY if left > 1 => left -= 1,
            tag::READY_FOR_QUERY if backend::ready_status(&msg) == b'I' && buf.is_empty() => {
                return Ok(());
            }
            t => return Err(ParkError::Unexpected(t)),
        }
    }
}

/// Hands a kept connection to a new client, which gets the first client's
/// greeting. A plain client leaves the runtime with it, and the connection
/// never enters it: the worker's relay takes both as plain sockets (a
/// registration with the runtime costs two `epoll_ctl` calls).
pub(super) async fn adopt(
    mut kept: Kept,
    client: Stream,
    shared: &Shared,
    info: &SessionInfo,
    pid: Pid,
) -> Result<(Streams, Authed), HandshakeEnd> {
    // The client gets a key of its own, registered before it can know it:
    // the key an earlier client of this backend kept cancels nothing.
    let registered = KeyGuard::issue(shared, kept.conn.key.as_deref(), pid);
    let greeting = kept.greeting(registered.message().as_deref());
    let Kept { tcp, conn, .. } = kept;
    let mut client = client;
    Counters::add(&info.counters.bytes_to_client, greeting.len() as u64);
    client.write_all(&greeting).await?;
    let client_key = registered.keep();
    let streams = match client {
        Stream::Plain(c) => Streams::Std(c.into_std()?, tcp),
        client => Streams::Runtime(Pair {
            client,
            upstream: Stream::Plain(tokio::net::TcpStream::from_std(tcp)?),
        }),
    };
    let authed = Authed {
        // Nothing is read yet: the relay's first reads take rooms from the
        // thread's spares (`relay::reserve`).
        cin: BytesMut::new(),
        uin: BytesMut::new(),
        conn,
        client_key,
        plain_trust: true,
    };
    Ok((streams, authed))
}
