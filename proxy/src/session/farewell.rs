//! A session's last words: how it ended, logged, and what each side is
//! told, written within the client's write timeout.

use std::time::Duration;

use bytes::Bytes;
use tracing::{debug, info, warn};

use super::streams::{Streams, back_to_runtime_failed};
use crate::{
    net::Stream,
    protocol::{Flow, Protocol},
    relay::epoll as fast,
    relay::{End, Room},
    shared::Shared,
    stats::Counters,
    timers::timeout,
    wire::queue::WriteQueue,
    wire::write::{self, Severity},
};

/// Logs how the session ended and queues each side's last words; what
/// was queued for a side that is gone is dropped. True when the upstream
/// connection is to be kept for the next client instead.
pub(super) fn farewells(proto: &Protocol, end: End, bufs: &mut Room, shared: &Shared) -> bool {
    let c = &proto.info;
    let gone = WriteQueue::default;
    match end {
        End::ClientClosed => {
            bufs.to_client = gone();
            let clean = match proto.pooled {
                true => proto.reusable_at_end(),
                false => proto.keep_upstream && proto.quiet(),
            };
            if clean && bufs.uin.is_empty() && !bufs.to_up.wants_write() {
                return true;
            }
            if proto.flow != Flow::Terminated || proto.terminate_withheld {
                // Tell the server we are done, as the client would have.
                bufs.to_up.push(Bytes::from_static(&write::TERMINATE));
            }
        }
        End::UpstreamClosed(error) => {
            bufs.to_up = gone();
            if let Some(e) = error {
                warn!("{e}");
            }
            let addr = shared.upstream_addr();
            warn!(upstream = %addr, "upstream closed the connection");
            // After the server's own FATAL (57P01 and the like), the client
            // hears nothing more, as from the server itself.
            if !proto.fatal_relayed {
                let text = format!("upstream {addr} closed the connection unexpectedly");
                bufs.to_client
                    .push(write::error(Severity::Fatal, "08006", &text));
                Counters::add(&c.counters.errors, 1);
            }
        }
        End::Error(e) => debug!("session ended: {e}"),
        // Never finished: the session goes on elsewhere, or over another
        // connection of its pool.
        End::Move(_) | End::Release => {}
        End::IdleTimeout => {
            info!("client idle past limits.client_idle_timeout: closed");
            // PostgreSQL's own, from its idle_session_timeout.
            let text = "terminating connection due to idle-session timeout";
            bufs.to_client
                .push(write::error(Severity::Fatal, "57P05", text));
            // Idle and quiet: its upstream may serve the next client.
            if proto.keep_upstream
                && bufs.uin.is_empty()
                && !bufs.to_up.wants_write()
                && proto.quiet()
            {
                return true;
            }
            bufs.to_up.push(Bytes::from_static(&write::TERMINATE));
        }
        End::Shutdown => {
            bufs.to_client.push(write::error(
                Severity::Fatal,
                "57P01",
                "terminating connection due to administrator command (onetrip is shutting down)",
            ));
            bufs.to_up.push(Bytes::from_static(&write::TERMINATE));
        }
    }
    false
}

/// Writes the last words, each side's within `limit`: a peer that has
/// stopped reading must not hold the session (and its upstream) forever.
/// Plain sockets from the worker's own relay get them straight, and nearly
/// always take them at once; only a socket that would block goes back to
/// the runtime to be waited for. Returns the upstream connection when it
/// is to be kept (and took its last words whole), with the runtime, which
/// resets it. The client is closed before that: it is gone already, and
/// sees its socket close now, not after the reset.
pub(super) async fn write_farewells(
    streams: Streams,
    bufs: &mut Room,
    keep: bool,
    limit: Duration,
) -> Result<Option<Stream>, String> {
    let (client, upstream) = match streams {
        Streams::Runtime(mut io) => {
            let _ = timeout(limit, bufs.to_client.write_all(&mut io.client)).await;
            let up = timeout(limit, bufs.to_up.write_all(&mut io.upstream)).await;
            return Ok((keep && matches!(up, Ok(Ok(_)))).then_some(io.upstream));
        }
        Streams::Std(c, u) => (c, u),
        Streams::Waiting(_) => return Ok(None),
    };
    let runtime = |s: std::net::TcpStream| {
        fast::release(&s);
        tokio::net::TcpStream::from_std(s)
            .map(Stream::Plain)
            .map_err(back_to_runtime_failed)
    };
    // A socket that closes now leaves the epoll by closing.
    if !matches!(bufs.to_client.write_to(&client), Ok(true) | Err(_)) {
        let mut c = runtime(client)?;
        let _ = timeout(limit, bufs.to_client.write_all(&mut c)).await;
    }
    let written = bufs.to_up.write_to(&upstream);
    if !keep && matches!(written, Ok(true) | Err(_)) {
        return Ok(None);
    }
    let mut u = runtime(upstream)?;
    let up = timeout(limit, bufs.to_up.write_all(&mut u)).await;
    Ok((keep && matches!(up, Ok(Ok(_)))).then_some(u))
}
