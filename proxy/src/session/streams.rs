//! A session's sockets as relaying starts, and as they are handed between
//! the runtime, the worker's own relay and the farewell.

use super::pooled::Client;
use crate::{
    net::{Pair, Stream},
    relay::epoll as fast,
};

/// A session's sockets as relaying starts: registered with this thread's
/// runtime, or with nothing yet (a session that moved here, or a plain
/// client over a kept connection).
pub(super) enum Streams {
    Runtime(Pair),
    Std(std::net::TcpStream, std::net::TcpStream),
    /// A pooled session's client, with no server connection yet: it waits
    /// for its client's first bytes (`pooled::between`) before it relays.
    Waiting(Client),
}

impl Streams {
    pub(super) fn is_tls(&self) -> bool {
        match self {
            Streams::Runtime(io) => io.client.is_tls() || io.upstream.is_tls(),
            Streams::Waiting(c) => c.is_tls(),
            _ => false,
        }
    }

    /// The sockets for this thread's runtime.
    pub(super) fn registered(self) -> std::io::Result<Pair> {
        Ok(match self {
            Streams::Runtime(io) => io,
            Streams::Std(c, u) => Pair {
                client: Stream::Plain(tokio::net::TcpStream::from_std(c)?),
                upstream: Stream::Plain(tokio::net::TcpStream::from_std(u)?),
            },
            Streams::Waiting(_) => return Err(no_connection()),
        })
    }

    /// Takes plain sockets out of the worker's epoll, to stay open
    /// elsewhere.
    pub(super) fn release(&self) {
        if let Streams::Std(c, u) = self {
            fast::release(c);
            fast::release(u);
        }
    }

    /// Plain sockets taken out of the runtime, or the TLS streams as they
    /// are.
    pub(super) fn unregistered(
        self,
    ) -> Result<std::io::Result<(std::net::TcpStream, std::net::TcpStream)>, Pair> {
        match self {
            Streams::Std(c, u) => Ok(Ok((c, u))),
            Streams::Runtime(Pair {
                client: Stream::Plain(c),
                upstream: Stream::Plain(u),
            }) => Ok(c.into_std().and_then(|c| Ok((c, u.into_std()?)))),
            Streams::Runtime(io) => Err(io),
            Streams::Waiting(_) => Ok(Err(no_connection())),
        }
    }
}

/// Relaying asked of a session that has no server connection (never: such
/// a session waits first).
pub(super) fn no_connection() -> std::io::Error {
    std::io::Error::other("the session has no server connection")
}

pub(super) fn back_to_runtime_failed(e: std::io::Error) -> String {
    format!("it could not return to the runtime: {e}")
}
