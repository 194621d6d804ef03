//! The admin console: `psql -d onetrip` talks to the proxy itself.

use std::{net::SocketAddr, sync::Arc};

use tokio::io::AsyncWriteExt;

use crate::{
    net::Stream,
    server::Shared,
    wire::write::{self, Severity},
};

pub async fn serve(mut stream: Stream, _params: Vec<(String, String)>, _shared: &Arc<Shared>, _peer: SocketAddr) {
    let msg = write::error(Severity::Fatal, "0A000", "admin console not available yet");
    let _ = stream.write_all(&msg).await;
}
