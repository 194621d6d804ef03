//! The relay loop: one task owns a session's client and upstream halves and
//! moves bytes both ways with bounded buffers.
//!
//! Reads from one side stop while the other side's write queue is over
//! `[limits] buffer_bytes`, so a slow client holds back the upstream instead
//! of growing the proxy's memory. All four directions (read client, read
//! upstream, write client, write upstream) are polled together, so a client
//! that pipelines without reading can't deadlock against a server that
//! writes without reading.

use std::{future::Future, net::SocketAddr, pin::Pin, sync::Arc, time::Instant};

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tracing::{debug, info, warn};

use super::{
    handshake::{self, Halves},
    io::WriteQueue,
    state::{Flow, Protocol},
};
use crate::{
    net::Stream,
    server::Shared,
    stats::{Counters, SessionState},
    wire::{
        startup::StartupMessage,
        tag,
        write::{self, Severity},
    },
};

pub async fn run(
    client: Stream,
    startup_raw: Bytes,
    params: Vec<(String, String)>,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    handshake_rts: u64,
) {
    let started = Instant::now();
    let p = |k| StartupMessage::param(&params, k).unwrap_or("");
    let user = p("user").to_owned();
    let database = if p("database").is_empty() {
        user.clone()
    } else {
        p("database").to_owned()
    };
    let info = shared
        .stats
        .open_session(Some(peer), &database, &user, p("application_name"));
    Counters::add(&info.counters.handshake_round_trips, handshake_rts);
    Counters::add(&info.counters.bytes_from_client, startup_raw.len() as u64);
    let client_tls = client.is_tls();
    let upstream = match handshake::connect_upstream(shared).await {
        Ok(u) => u,
        Err(e) => {
            warn!("{e}");
            let mut c = client;
            let msg = write::error(Severity::Fatal, "08006", &e.to_string());
            let _ = tokio::io::AsyncWriteExt::write_all(&mut c, &msg).await;
            Counters::add(&info.counters.errors, 1);
            shared.stats.close_session(&info, Default::default());
            return;
        }
    };
    let (cr, cw) = tokio::io::split(client);
    let (ur, uw) = tokio::io::split(upstream);
    let mut io = Halves { cr, cw, ur, uw };
    let mut proto = Protocol::new(shared.clone(), info.clone(), &params);
    match handshake::relay_auth(&mut io, startup_raw, shared, &info, client_tls).await {
        Ok((cin, uin, server_params)) => {
            proto.on_server_params(&server_params);
            info.set_state(SessionState::Idle);
            debug!(database = %database, user = %user, "session ready");
            relay(&mut io, &mut proto, cin, uin).await;
        }
        Err(e) => info!("{e}"),
    }
    info.set_state(SessionState::Closing);
    proto.cy.close(shared);
    let statements = proto.take_statement_counts();
    super::log_summary(&info, started);
    shared.stats.close_session(&info, statements);
}

/// Why the loop ended.
enum End {
    ClientClosed,
    UpstreamClosed,
    Error(String),
    Shutdown,
}

async fn relay(io: &mut Halves, proto: &mut Protocol, cin: bytes::BytesMut, uin: bytes::BytesMut) {
    let limit = proto.shared.config.limits.buffer_bytes;
    let mut cin = cin;
    let mut uin = uin;
    let mut to_client = WriteQueue::default();
    let mut to_up = WriteQueue::default();
    let mut forced = proto.shared.closer(proto.info.id);
    let c = proto.info.clone();
    // Kept across loop turns: a simulated delay must not restart.
    let mut timer: Option<(Instant, Sleep)> = None;
    let end = loop {
        // Work through whatever is buffered before waiting again; client
        // input goes twice, since an upstream answer may release input held
        // back while it was awaited (a coalesced batch's outcome, the AGE
        // catalog).
        let worked = proto
            .on_client_bytes(&mut cin, &mut to_up, &mut to_client)
            .and_then(|()| proto.on_upstream_bytes(&mut uin, &mut to_client, &mut to_up))
            .and_then(|()| proto.on_client_bytes(&mut cin, &mut to_up, &mut to_client));
        if let Err(e) = worked {
            to_client.push(write::error(Severity::Fatal, e.sqlstate(), &e.to_string()));
            Counters::add(&c.counters.errors, 1);
            break End::Error(e.to_string());
        }
        // Write at once what the sockets take now: the usual case, and one
        // poll here is cheaper than another turn of the select below.
        if !to_up.is_empty()
            && let Some(Err(e)) = poll_once(to_up.write_some(&mut io.uw))
        {
            warn!("upstream write: {e}");
            break End::UpstreamClosed;
        }
        if !to_client.is_empty()
            && let Some(Err(e)) = poll_once(to_client.write_some(&mut io.cw))
        {
            break End::Error(format!("client write: {e}"));
        }
        if proto.flow == Flow::Terminated && to_up.is_empty() {
            break End::ClientClosed;
        }
        let read_client =
            to_up.len() < limit && proto.flow != Flow::Terminated && !proto.client_paused();
        let read_up = to_client.len() < limit && proto.delay_until().is_none();
        match (proto.delay_until(), &timer) {
            (Some(t), Some((at, _))) if *at == t => {}
            (Some(t), _) => timer = Some((t, precise_sleep(t))),
            (None, _) => timer = None,
        }
        let mut catalog = proto.cy.wait_handle();
        tokio::select! {
            r = io.cr.read_buf(&mut cin), if read_client => match r {
                Ok(0) => break End::ClientClosed,
                Ok(n) => Counters::add(&c.counters.bytes_from_client, n as u64),
                Err(e) => break End::Error(format!("client read: {e}")),
            },
            r = io.ur.read_buf(&mut uin), if read_up => match r {
                Ok(0) => break End::UpstreamClosed,
                Ok(n) => Counters::add(&c.counters.bytes_from_upstream, n as u64),
                Err(e) => { warn!("upstream read: {e}"); break End::UpstreamClosed }
            },
            r = to_client.write_some(&mut io.cw), if !to_client.is_empty() => {
                if let Err(e) = r { break End::Error(format!("client write: {e}")) }
            },
            r = to_up.write_some(&mut io.uw), if !to_up.is_empty() => {
                if let Err(e) = r { warn!("upstream write: {e}"); break End::UpstreamClosed }
            },
            _ = async { if let Some((_, f)) = timer.as_mut() { f.as_mut().await } }, if timer.is_some() => {
                timer = None;
                proto.delay_elapsed();
            }
            _ = catalog_changed(&mut catalog), if catalog.is_some() => proto.cy.wake(),
            _ = &mut forced => break End::Shutdown,
        }
        reserve(&mut cin);
        reserve(&mut uin);
    };
    proto.shared.forget_closer(proto.info.id);
    match end {
        End::ClientClosed => {
            if proto.flow != Flow::Terminated {
                // Tell the server we are done, as the client would have.
                to_up.push(Bytes::from_static(&[tag::TERMINATE, 0, 0, 0, 4]));
            }
            let _ = to_up.write_all(&mut io.uw).await;
        }
        End::UpstreamClosed => {
            let addr = proto.shared.upstream_addr();
            warn!(upstream = %addr, "upstream closed the connection");
            let text = format!("upstream {addr} closed the connection unexpectedly");
            to_client.push(write::error(Severity::Fatal, "08006", &text));
            Counters::add(&c.counters.errors, 1);
            let _ = to_client.write_all(&mut io.cw).await;
        }
        End::Error(e) => {
            debug!("session ended: {e}");
            let _ = to_client.write_all(&mut io.cw).await;
            let _ = to_up.write_all(&mut io.uw).await;
        }
        End::Shutdown => {
            to_client.push(write::error(
                Severity::Fatal,
                "57P01",
                "terminating connection due to administrator command (onetrip is shutting down)",
            ));
            let _ = to_client.write_all(&mut io.cw).await;
            to_up.push(Bytes::from_static(&[tag::TERMINATE, 0, 0, 0, 4]));
            let _ = to_up.write_all(&mut io.uw).await;
        }
    }
}

/// Polls `f` once; `None` if it is not ready. Whatever it waits on is
/// polled again, with the task's waker, by the select that follows.
fn poll_once<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// Keeps room for the next read without growing past what one read needs.
fn reserve(buf: &mut bytes::BytesMut) {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(32 * 1024);
    }
}

/// Another session's catalog fetch ended (loaded or given up).
async fn catalog_changed(rx: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    if let Some(rx) = rx {
        // An error means the sender is gone: nothing more to wait for.
        let _ = rx.changed().await;
    }
}

type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Sleeps until `t`. tokio's timer wheel rounds up to whole milliseconds,
/// which would turn a simulated 0.5 ms into 1-2 ms; short waits sleep on a
/// blocking thread instead, to within tens of microseconds.
fn precise_sleep(t: Instant) -> Sleep {
    let left = t.saturating_duration_since(Instant::now());
    if left >= std::time::Duration::from_millis(5) {
        Box::pin(tokio::time::sleep_until(t.into()))
    } else {
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
        })
    }
}
