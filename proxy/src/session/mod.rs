//! One client session: startup negotiation, then either the admin console
//! or a relay to one upstream connection.

mod farewell;
pub mod handshake;
mod life;
mod login;
pub(crate) mod pooled;
pub mod reuse;
mod start;
mod streams;
mod upstream_auth;

use std::{future::Future, net::SocketAddr, pin::Pin, sync::Arc, time::Duration};

use bytes::{Bytes, BytesMut};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tracing::{Instrument, Span, debug, info, info_span, warn};

use crate::{
    net::Stream,
    shared::Shared,
    wire::{
        startup::{self, StartupMessage},
        write::{self, Severity},
    },
};

/// Serves one accepted client connection to its end.
/// `worker` is the worker it runs on.
pub async fn serve(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    conn_id: u64,
    worker: usize,
) {
    // The startup is awaited boxed, and gone once it is over: this future,
    // held by every session for its whole life, keeps only what the rest
    // of the life needs (about 130 bytes, where the startup's locals made
    // 400).
    let started = Box::pin(start(tcp, peer, &shared, conn_id, worker)).await;
    if let Some((next, slot)) = started {
        if let Some(next) = next {
            next.await;
        }
        drop(slot);
    }
}

/// The startup packet read, and what the session does next (with the
/// place it takes among the clients).
async fn start<'a>(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: &'a Arc<Shared>,
    conn_id: u64,
    worker: usize,
) -> Option<(Option<Served<'a>>, crate::shared::ClientSlot<'a>)> {
    let _ = tcp.set_nodelay(true);
    shared.config().limits.keepalive(&tcp);
    let span = info_span!("session", id = conn_id, peer = %peer);
    let Some(slot) = shared.client_slot() else {
        // Twice the limit at once: not even the startup packet is read.
        span.in_scope(|| warn!("connection closed at once: {TOO_MANY}"));
        let _ = tcp.try_write(&write::error(Severity::Fatal, "53300", TOO_MANY));
        return None;
    };
    // Startup and authentication share one deadline. When it passes during
    // startup the connection just closes, as PostgreSQL's does: there is no
    // protocol state in which an error message would be understood.
    let limit = shared.config().limits.startup_timeout;
    let mut deadline = crate::timers::sleep_until(crate::timers::after(limit));
    // What follows the startup packet is made outside this future's state
    // (`after_startup`): nothing of the startup stays with the session.
    let negotiated = deadline
        .bound(Box::pin(negotiate(tcp, shared, peer)))
        .instrument(span.clone())
        .await
        .unwrap_or(Err(StartupFailure::Timeout(limit)));
    let next = after_startup(
        negotiated,
        slot.refused,
        shared,
        peer,
        deadline,
        worker,
        span,
    );
    Some((next, slot))
}

/// A client's stream, its startup packet (raw and read) and the round
/// trips it took.
type Negotiated = (Stream, Bytes, Vec<(String, String)>, u64);

type Served<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a session does once its startup packet is in: refused, the admin
/// console, or its life as a client's session. Not an async fn: the
/// future it gives holds what it needs and nothing that was handed over.
fn after_startup<'a>(
    negotiated: Result<Option<Negotiated>, StartupFailure>,
    refused: bool,
    shared: &'a Arc<Shared>,
    peer: SocketAddr,
    deadline: crate::timers::Sleep,
    worker: usize,
    span: Span,
) -> Option<Served<'a>> {
    match negotiated {
        Ok(Some((mut stream, ..))) if refused => {
            // As PostgreSQL: refused once the client has said who it is,
            // so it gets the error in the protocol it speaks.
            span.in_scope(|| {
                let max = shared.config().limits.max_client_connections;
                warn!("client refused: {TOO_MANY} (limits.max_client_connections = {max})")
            });
            let limit = shared.config().limits.client_write_timeout;
            let refusal = write::error(Severity::Fatal, "53300", TOO_MANY);
            Some(Box::pin(async move {
                let _ = crate::timers::timeout(limit, stream.write_all(&refusal)).await;
            }))
        }
        Ok(Some((stream, raw, params, handshake_rts))) => {
            let database = StartupMessage::param(&params, "database")
                .or(StartupMessage::param(&params, "user"))
                .unwrap_or("");
            if database == shared.config().admin.database {
                Some(Box::pin(
                    crate::admin::serve(stream, params, shared, peer, deadline).instrument(span),
                ))
            } else {
                let start = start::Start {
                    startup_raw: raw,
                    params,
                    peer,
                    handshake_rts,
                    deadline,
                    worker,
                };
                Some(Box::pin(life::run(stream, start, shared, span)))
            }
        }
        Ok(None) => {
            span.in_scope(|| debug!("connection ended during startup"));
            None
        }
        Err(e) => {
            span.in_scope(|| warn!("startup failed: {e}"));
            None
        }
    }
}

/// PostgreSQL's words for a connection past its max_connections.
const TOO_MANY: &str = "sorry, too many clients already";

#[derive(Debug, thiserror::Error)]
pub enum StartupFailure {
    #[error("client sent an invalid startup packet: {0}")]
    Protocol(#[from] startup::StartupError),
    #[error("startup packet not received within {0:?}")]
    Timeout(Duration),
    #[error("TLS handshake with client failed: {0}")]
    Tls(std::io::Error),
    #[error("I/O error during startup: {0}")]
    Io(#[from] std::io::Error),
    #[error("client refused: it did not negotiate TLS, and [tls] require = true")]
    NoTls,
}

/// Startup packet exchange: answers SSL/GSS requests, forwards cancels, and
/// returns the stream with the client's startup packet (raw and parsed) and
/// the handshake round trips spent so far. `None` when the connection ended
/// normally (a cancel request, or a client that gave up).
async fn negotiate(
    tcp: TcpStream,
    shared: &Shared,
    peer: SocketAddr,
) -> Result<Option<Negotiated>, StartupFailure> {
    let mut stream = Stream::Plain(tcp);
    let mut round_trips = 0u64;
    loop {
        let raw = match read_startup(&mut stream).await {
            Ok(Some(raw)) => raw,
            Ok(None) => return Ok(None),
            Err(StartupFailure::Protocol(e)) => {
                let _ = stream
                    .write_all(&write::error(Severity::Fatal, "08P01", &e.to_string()))
                    .await;
                return Err(e.into());
            }
            Err(e) => return Err(e),
        };
        round_trips += 1;
        match startup::decode(raw) {
            // Read at each request: a reload may change the certificate.
            Ok(StartupMessage::SslRequest) => match (&shared.live().tls_acceptor, stream) {
                (Some(acceptor), Stream::Plain(mut tcp)) => {
                    tcp.write_all(b"S").await?;
                    let tls = acceptor.accept(tcp).await.map_err(StartupFailure::Tls)?;
                    stream = Stream::ServerTls(Box::new(tls));
                }
                (_, mut s) => {
                    s.write_all(b"N").await?;
                    stream = s;
                }
            },
            Ok(StartupMessage::GssEncRequest) => stream.write_all(b"N").await?,
            Ok(StartupMessage::Cancel { pid, secret }) => {
                shared.forward_cancel(pid, secret).await;
                return Ok(None);
            }
            Ok(StartupMessage::Startup { params, .. })
                if shared.config().tls.require && !stream.is_tls() =>
            {
                // PostgreSQL's own words for a client that only `hostssl`
                // lines would admit; the detail says who refused it.
                let (user, database) = StartupMessage::user_and_database(&params);
                let text = format!(
                    "no pg_hba.conf entry for host \"{}\", user \"{user}\", database \"{database}\", no encryption",
                    peer.ip()
                );
                let detail = "onetrip accepts only TLS connections ([tls] require = true)";
                let msg = write::error_detail(Severity::Fatal, "28000", &text, detail);
                let _ = stream.write_all(&msg).await;
                return Err(StartupFailure::NoTls);
            }
            Ok(StartupMessage::Startup { raw, params }) => {
                return Ok(Some((stream, raw, params, round_trips)));
            }
            Err(e) => {
                let _ = stream
                    .write_all(&write::error(Severity::Fatal, "08P01", &e.to_string()))
                    .await;
                return Err(e.into());
            }
        }
    }
}

async fn read_startup(stream: &mut Stream) -> Result<Option<Bytes>, StartupFailure> {
    let mut buf = BytesMut::with_capacity(512);
    loop {
        if let Some(len) = startup::packet_len(&buf)?
            && buf.len() >= len
        {
            if buf.len() > len {
                // Nothing may follow a startup packet before the server answers.
                return Err(startup::StartupError::BadLength.into());
            }
            // Copied out: it stays with the session, the 512 bytes read
            // into need not.
            return Ok(Some(Bytes::copy_from_slice(&buf)));
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// Logs a session's one summary line at close.
fn log_summary(info: &crate::stats::SessionInfo, started: std::time::Instant) {
    let c = info.counters.snapshot();
    info!(
        database = %info.database,
        user = %info.user,
        client_round_trips = c.client_round_trips,
        upstream_round_trips = c.upstream_round_trips,
        handshake_round_trips = c.handshake_round_trips,
        statements = c.statements,
        coalesced = c.coalesced_batches,
        duration_ms = started.elapsed().as_millis() as u64,
        "session closed"
    );
}
