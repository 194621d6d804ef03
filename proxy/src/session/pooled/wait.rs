//! A pooled session's client between transactions: waiting for its next
//! bytes (a plain socket peeked at, a stream in the runtime read), and the
//! notifications its pool's listening connection left it, written
//! meanwhile.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWrite};
use tracing::{debug, warn};

use super::{Client, farewell, write_within};
use crate::{
    net::Stream,
    protocol::Protocol,
    relay::{Closer, reserve},
    stats::Counters,
    wire::{queue::WriteQueue, write},
};

/// Waits for the client's next bytes (`None`: it left, or the session was
/// closed and its client told why). A plain socket is
/// peeked at, its bytes left for the relay; a stream in the runtime is
/// read into `cin`, since TLS may hold what the socket no longer shows.
pub(super) async fn wait_for_client(
    client: Client,
    cin: &mut BytesMut,
    proto: &mut Protocol,
    forced: &mut Closer,
) -> Option<Client> {
    let client = match client {
        Client::Plain(c) => tokio::net::TcpStream::from_std(c),
        Client::Runtime(s) => return read_from_client(s, cin, proto, forced).await,
    };
    let mut client = match client {
        Ok(c) => c,
        Err(e) => {
            warn!("session closed: its client socket could not wait: {e}");
            return None;
        }
    };
    let mut first = [0u8; 5];
    let peeked = loop {
        deliver(&mut client, proto).await?;
        let notes = proto.notes().cloned();
        tokio::select! {
            biased;
            end = &mut *forced => {
                farewell(Client::Runtime(Stream::Plain(client)), end, proto).await;
                return None;
            }
            () = notified(notes.as_deref()) => deliver(&mut client, proto).await?,
            r = client.peek(&mut first) => break r,
        }
    };
    match peeked {
        // Gone, or saying goodbye: no connection is taken for that.
        Ok(0) | Err(_) => None,
        Ok(5) if first == write::TERMINATE => None,
        Ok(_) => client.into_std().ok().map(Client::Plain),
    }
}

/// Reads a client's next bytes into `cin`. The session holds no read room
/// while it waits: what comes is read here first, then moved to the room
/// the relay reads into.
pub(super) async fn read_from_client(
    mut client: Stream,
    cin: &mut BytesMut,
    proto: &mut Protocol,
    forced: &mut Closer,
) -> Option<Client> {
    let mut first = [0u8; 512];
    let read = loop {
        deliver(&mut client, proto).await?;
        let notes = proto.notes().cloned();
        tokio::select! {
            biased;
            end = &mut *forced => {
                farewell(Client::Runtime(client), end, proto).await;
                return None;
            }
            () = notified(notes.as_deref()) => deliver(&mut client, proto).await?,
            r = client.read(&mut first) => break r,
        }
    };
    let n = match read {
        // Gone: no connection is taken for that.
        Ok(0) | Err(_) => return None,
        Ok(n) => n,
    };
    Counters::add(&proto.info.counters.bytes_from_client, n as u64);
    reserve(cin);
    cin.extend_from_slice(&first[..n]);
    Some(Client::Runtime(client))
}

/// Ready when the pool's listening connection left something for the
/// session (never, for one that has not listened).
pub(crate) async fn notified(notes: Option<&crate::protocol::Inbox>) {
    match notes {
        Some(n) => n.wake.notified().await,
        None => std::future::pending().await,
    }
}

/// Writes the notifications waiting for an idle client; `None` when it
/// could not take them.
async fn deliver<W: AsyncWrite + Unpin>(client: &mut W, proto: &mut Protocol) -> Option<()> {
    let mut queue = WriteQueue::default();
    if proto.deliver_notes(&mut queue) {
        let limit = proto.services.config.limits.client_write_timeout;
        if let Err(why) = write_within(client, &mut queue, limit).await {
            debug!("session closed: {why}");
            return None;
        }
    }
    Some(())
}
