//! Upstream connection and the authentication exchange, relayed message by
//! message: the proxy never sees a password it could keep.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tracing::warn;

use crate::{
    cancel::{Key, Pid},
    net::{Pair, Stream},
    protocol::{ServerConnection, ServerParams},
    shared::Shared,
    stats::{Counters, SessionInfo},
    wire::{
        backend::{self, auth},
        frame::MAX_AUTH_MESSAGE,
        startup, tag,
        write::{self, Severity},
    },
    wire::{
        queue::WriteQueue,
        read::{ReadError, read_message},
    },
};

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("could not connect to upstream {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("could not connect to upstream {addr}: timed out after {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
    #[error("upstream {addr} does not support TLS, and [upstream] tls = \"require\"")]
    TlsRefused { addr: String },
    #[error("TLS handshake with upstream {addr} failed: {source}")]
    Tls {
        addr: String,
        source: std::io::Error,
    },
}

/// Opens a connection to the upstream, negotiating TLS as configured.
pub async fn connect_upstream(shared: &Shared) -> Result<Stream, ConnectError> {
    let addr = shared.upstream_addr();
    let timeout = shared.config().upstream.connect_timeout;
    let connect = TcpStream::connect(addr.as_str());
    let tcp = match crate::timers::timeout(timeout, connect).await {
        Err(_) => return Err(ConnectError::Timeout { addr, timeout }),
        Ok(Err(source)) => return Err(ConnectError::Connect { addr, source }),
        Ok(Ok(t)) => t,
    };
    let _ = tcp.set_nodelay(true);
    shared.config().limits.keepalive(&tcp);
    let Some(connector) = &shared.upstream_tls else {
        return Ok(Stream::Plain(tcp));
    };
    let mut tcp = tcp;
    let io_err = |source| ConnectError::Connect {
        addr: addr.clone(),
        source,
    };
    tcp.write_all(&startup::encode_code(startup::SSL_REQUEST))
        .await
        .map_err(io_err)?;
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await.map_err(io_err)?;
    if answer[0] != b'S' {
        if shared.config().upstream.tls == crate::config::UpstreamTls::Require {
            return Err(ConnectError::TlsRefused { addr });
        }
        return Ok(Stream::Plain(tcp));
    }
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h.trim_matches(['[', ']']))
        .unwrap_or("localhost");
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).unwrap_or_else(|_| {
        rustls::pki_types::ServerName::try_from("localhost").expect("static name")
    });
    let tls = connector
        .connect(name, crate::net::TlsTcp::new(tcp))
        .await
        .map_err(|source| ConnectError::Tls { addr, source })?;
    Ok(Stream::ClientTls(Box::new(tls)))
}

/// Why a handshake ended without a ready session.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeEnd {
    #[error("authentication failed or was refused by the upstream")]
    Refused,
    #[error("client went away during authentication: {0}")]
    Client(ReadError),
    #[error("upstream {addr} failed during authentication: {source}")]
    Upstream { addr: String, source: ReadError },
    #[error("client sent message type '{}' during authentication", char::from(*.0))]
    Unexpected(u8),
    #[error("I/O error during authentication: {0}")]
    Io(#[from] std::io::Error),
    #[error("startup and authentication took longer than {0:?} (limits.startup_timeout)")]
    Timeout(std::time::Duration),
}

/// A session whose authentication is over.
pub struct Authed {
    /// Leftover client and upstream read buffers.
    pub cin: BytesMut,
    pub uin: BytesMut,
    /// The upstream connection: its greeting's key and ParameterStatus
    /// values; its settings, when a kept connection's earlier client
    /// learned them.
    pub conn: Box<ServerConnection>,
    /// The client's own cancel key (`cancel`), which the session forgets
    /// when it ends.
    pub client_key: Option<Key>,
    /// The upstream let the client in without asking for anything and sent
    /// nothing but AuthenticationOk, ParameterStatus, BackendKeyData and
    /// ReadyForQuery: the exchange a kept connection can replay.
    pub plain_trust: bool,
}

/// A client's own cancel key, issued while its session is set up.
/// Forgotten again on drop unless kept, so a handshake that fails or times
/// out after BackendKeyData leaves no key behind.
pub struct KeyGuard<'a> {
    shared: &'a Shared,
    key: Option<Key>,
}

impl<'a> KeyGuard<'a> {
    /// Issues a key for a client of the backend whose BackendKeyData
    /// message is `backend`, if any.
    pub fn issue(shared: &'a Shared, backend: Option<&[u8]>, pid: Pid) -> Self {
        let key = backend
            .and_then(Key::from_message)
            .and_then(|b| shared.cancel.issue(b, pid));
        if backend.is_some() && key.is_none() {
            warn!("no cancel key for this client: the system's random source failed");
        }
        Self { shared, key }
    }

    pub fn key(&self) -> Option<&Key> {
        self.key.as_ref()
    }

    /// The BackendKeyData message for the client, if it has a key.
    pub fn message(&self) -> Option<Bytes> {
        self.key.as_ref().map(Key::message)
    }

    /// The session is set up: its end forgets the key.
    pub fn keep(mut self) -> Option<Key> {
        self.key.take()
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.shared.cancel.forget(&key);
        }
    }
}

/// Relays startup and authentication until the upstream's first
/// ReadyForQuery has gone to the client.
pub async fn relay_auth(
    io: &mut Pair,
    startup_raw: Bytes,
    shared: &Shared,
    info: &SessionInfo,
    client_tls: bool,
    pid: Pid,
) -> Result<Authed, HandshakeEnd> {
    let max = shared.config().limits.max_message_bytes;
    let addr = shared.upstream_addr();
    let c = &info.counters;
    // Room as the reads need it (`read_message`): the client sends nothing
    // here unless asked for a password, and the server's greeting is under
    // a kilobyte. A thousand clients logging in at once held two 8 kB
    // buffers each; relaying takes the thread's rooms (`relay::reserve`).
    let mut cin = BytesMut::new();
    let mut uin = BytesMut::new();
    let mut params = BytesMut::with_capacity(512);
    let mut key = None;
    let mut registered = None;
    let mut plain_trust = true;
    let opened = Instant::now();
    Counters::add(&c.bytes_to_upstream, startup_raw.len() as u64);
    io.upstream.write_all(&startup_raw).await?;
    let mut out = WriteQueue::default();
    loop {
        let msg = read_message(&mut io.upstream, &mut uin, max)
            .await
            .map_err(|source| HandshakeEnd::Upstream {
                addr: addr.clone(),
                source,
            })?;
        Counters::add(&c.bytes_from_upstream, msg.len() as u64);
        let t = msg[0];
        let mut needs_answer = false;
        let msg = match t {
            tag::AUTHENTICATION => {
                let code = backend::auth_code(&msg).unwrap_or(-1);
                plain_trust &= code == auth::OK;
                needs_answer = backend::auth_needs_answer(code);
                if code == auth::SASL && (client_tls || shared.upstream_tls.is_some()) {
                    Some(backend::strip_channel_binding(msg))
                } else {
                    Some(msg)
                }
            }
            tag::BACKEND_KEY_DATA => {
                // The client gets a key of its own, registered before it
                // can know it; the backend's stays here.
                let guard = KeyGuard::issue(shared, Some(&msg[..]), pid);
                let mine = guard.message();
                registered = Some(guard);
                // A copy: a slice would keep the whole read buffer it lies
                // in (8 kB) for as long as the connection lives.
                key = Some(Bytes::copy_from_slice(&msg));
                mine
            }
            tag::PARAMETER_STATUS => {
                params.extend_from_slice(&msg);
                Some(msg)
            }
            tag::READY_FOR_QUERY => Some(msg),
            _ => {
                plain_trust = false;
                Some(msg)
            }
        };
        if let Some(msg) = msg {
            Counters::add(&c.bytes_to_client, msg.len() as u64);
            out.push(msg);
        }
        match t {
            tag::READY_FOR_QUERY => {
                out.write_all(&mut io.client).await?;
                let client_key = registered.take().and_then(KeyGuard::keep);
                return Ok(Authed {
                    cin,
                    uin,
                    conn: Box::new(
                        ServerConnection::new(key, ServerParams::from_messages(&params))
                            .opened_at(opened),
                    ),
                    client_key,
                    plain_trust,
                });
            }
            tag::ERROR_RESPONSE => {
                Counters::add(&c.errors, 1);
                out.write_all(&mut io.client).await?;
                return Err(HandshakeEnd::Refused);
            }
            _ => {}
        }
        if needs_answer {
            out.write_all(&mut io.client).await?;
            // PostgreSQL's own limit before authentication: a client not
            // yet known makes the proxy hold at most 64 KiB, whatever the
            // length it declares (checked before any of it is read).
            let answer = match read_message(&mut io.client, &mut cin, MAX_AUTH_MESSAGE).await {
                Ok(a) => a,
                Err(ReadError::Frame(e)) => {
                    let text = format!("invalid authentication message: {e}");
                    let _ = io
                        .client
                        .write_all(&write::error(Severity::Fatal, e.sqlstate(), &text))
                        .await;
                    return Err(HandshakeEnd::Client(ReadError::Frame(e)));
                }
                Err(e) => return Err(HandshakeEnd::Client(e)),
            };
            if answer[0] != tag::PASSWORD {
                return Err(HandshakeEnd::Unexpected(answer[0]));
            }
            Counters::add(&c.handshake_round_trips, 1);
            Counters::add(&c.bytes_from_client, answer.len() as u64);
            io.upstream.write_all(&answer).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cancel_key_outlives_its_guard_only_when_kept() {
        let shared = crate::shared::Shared::for_tests(Default::default());
        // BackendKeyData: pid 42, secret "abcd".
        let k = |pid: u8| [b'K', 0, 0, 0, 12, 0, 0, 0, pid, b'a', b'b', b'c', b'd'];
        let guard = KeyGuard::issue(&shared, Some(&k(42)[..]), Pid::Backend);
        let mine = Key::from_message(&guard.message().unwrap()).unwrap();
        assert_eq!(mine.pid, 42);
        assert!(shared.cancel.backend(&mine).is_some(), "registered at once");
        drop(guard);
        assert!(
            shared.cancel.is_empty(),
            "a handshake that ends early forgets the key"
        );
        let guard = KeyGuard::issue(&shared, Some(&k(43)[..]), Pid::Backend);
        let kept = guard.keep().unwrap();
        let backend = shared.cancel.backend(&kept).unwrap();
        assert_eq!((backend.pid, &backend.secret[..]), (43, &b"abcd"[..]));
        drop(KeyGuard::issue(&shared, None, Pid::Backend));
        assert_eq!(shared.cancel.len(), 1, "kept for the session");
    }
}
