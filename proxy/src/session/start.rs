//! What passes between a session's stages as it starts: what the startup
//! phase hands on (`Start`), how a logged-in session goes on (`Ready`),
//! and a login refused.

use std::{net::SocketAddr, sync::Arc};

use bytes::{Bytes, BytesMut};
use tracing::warn;

use super::pooled;
use crate::{
    net::Stream,
    shared::Shared,
    stats::Counters,
    timers::timeout,
    wire::write::{self, Severity},
};

/// What the startup phase hands on to the relay.
pub struct Start {
    pub startup_raw: Bytes,
    pub params: Vec<(String, String)>,
    pub peer: SocketAddr,
    pub handshake_rts: u64,
    /// Ends when authentication must be over (`limits.startup_timeout`
    /// after the connection was accepted).
    pub deadline: crate::timers::Sleep,
    /// The worker the session runs on.
    pub worker: usize,
}

/// How the ready session goes on.
pub(super) enum Ready {
    /// Over its streams, with their leftover read buffers.
    Relay(super::streams::Streams, BytesMut, BytesMut),
    /// A pooled session greeted without a server connection: it waits for
    /// its client's first bytes, then for a connection (what the client
    /// sent past its password, if anything, is read already).
    Waiting(pooled::Client, BytesMut),
}

/// A login that gets no server connection: the client is told why
/// (FATAL `code`), within `limits.client_write_timeout`, and the session is
/// closed.
pub(super) async fn refuse(
    client: Stream,
    shared: &Shared,
    info: &Arc<crate::stats::SessionInfo>,
    code: &str,
    why: &str,
) {
    warn!("{why}");
    let mut c = client;
    let msg = write::error(Severity::Fatal, code, why);
    let limit = shared.config().limits.client_write_timeout;
    let write = tokio::io::AsyncWriteExt::write_all(&mut c, &msg);
    let _ = timeout(limit, write).await;
    Counters::add(&info.counters.errors, 1);
    shared.stats.close_session(info, Default::default());
}
