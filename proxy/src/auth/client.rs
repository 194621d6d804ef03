//! A client's connection while onetrip itself talks to it (the admin
//! console, and the password exchange of a login it checks): its stream,
//! and what was read past the last whole message.

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use crate::{
    net::Stream,
    wire::{
        frame::MAX_AUTH_MESSAGE,
        read::{ReadError, read_message},
    },
};

/// Largest message the console reads once a user is in; its commands are
/// short.
const MAX_MESSAGE: usize = 1 << 20;

pub(crate) struct Client {
    stream: Stream,
    unread: BytesMut,
    /// Largest message read now: PostgreSQL's own limit until the user is
    /// authenticated, `MAX_MESSAGE` after.
    limit: usize,
    /// How long a write may wait for a client that has stopped reading
    /// (`limits.client_write_timeout`).
    write_timeout: std::time::Duration,
}

impl Client {
    pub(crate) fn new(stream: Stream, write_timeout: std::time::Duration) -> Self {
        Self {
            stream,
            unread: BytesMut::new(),
            limit: MAX_AUTH_MESSAGE,
            write_timeout,
        }
    }

    /// The stream, and what was read of it past the last message.
    pub(crate) fn into_parts(self) -> (Stream, BytesMut) {
        (self.stream, self.unread)
    }

    /// The user is in: commands up to `MAX_MESSAGE` bytes.
    pub(crate) fn authenticated(&mut self) {
        self.limit = MAX_MESSAGE;
    }

    /// The client's next message as (tag, the whole message), or `None`
    /// once it has hung up. Cancel-safe: what arrived stays for the next call.
    pub(crate) async fn read(&mut self) -> Result<Option<(u8, Bytes)>, ReadError> {
        match read_message(&mut self.stream, &mut self.unread, self.limit).await {
            // A whole message: at least its five header bytes.
            Ok(msg) => Ok(Some((msg[0], msg))),
            Err(ReadError::Closed) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        crate::timers::timeout(self.write_timeout, self.stream.write_all(bytes))
            .await
            .unwrap_or_else(|_| {
                let why = format!("client took nothing for {:?}", self.write_timeout);
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why))
            })
    }
}
