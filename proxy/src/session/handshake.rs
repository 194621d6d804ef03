//! Upstream connection and the authentication exchange, relayed message by
//! message: the proxy never sees a password it could keep.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::{
    net::{Pair, Stream},
    shared::Shared,
    stats::{Counters, SessionInfo},
    wire::{
        backend::{self, auth},
        startup, tag,
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
    let timeout = shared.config.upstream.connect_timeout;
    let connect = TcpStream::connect(addr.as_str());
    let tcp = match crate::timers::timeout(timeout, connect).await {
        Err(_) => return Err(ConnectError::Timeout { addr, timeout }),
        Ok(Err(source)) => return Err(ConnectError::Connect { addr, source }),
        Ok(Ok(t)) => t,
    };
    let _ = tcp.set_nodelay(true);
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
        if shared.config.upstream.tls == crate::config::UpstreamTls::Require {
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
        .connect(name, tcp)
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
    /// ParameterStatus values, in the order the upstream sent them.
    pub params: Vec<(String, String)>,
    /// The upstream's BackendKeyData message.
    pub key: Option<Bytes>,
    /// The upstream let the client in without asking for anything and sent
    /// nothing but AuthenticationOk, ParameterStatus, BackendKeyData and
    /// ReadyForQuery: the exchange a kept connection can replay.
    pub plain_trust: bool,
    /// When the upstream connection was opened.
    pub opened: Instant,
    /// The connection's settings, when a kept connection's earlier client
    /// learned them.
    pub settings: Option<crate::protocol::settings::Settings>,
}

/// A cancel key registered for a session still being set up. Forgotten
/// again on drop unless kept, so a handshake that fails or times out after
/// BackendKeyData leaves no key behind.
pub struct KeyGuard<'a> {
    shared: &'a Shared,
    key: Option<(i32, Bytes)>,
}

impl<'a> KeyGuard<'a> {
    /// Registers the key in `key_data` (a BackendKeyData message), if any.
    pub fn register(shared: &'a Shared, key_data: Option<&[u8]>) -> Self {
        let key = key_data.and_then(backend::backend_key);
        if let Some((pid, secret)) = &key {
            shared.register_cancel_key(*pid, secret.clone());
        }
        Self { shared, key }
    }

    /// The session is set up: its end forgets the key.
    pub fn keep(mut self) {
        self.key = None;
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        if let Some((pid, secret)) = self.key.take() {
            self.shared.forget_cancel_key(pid, &secret);
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
) -> Result<Authed, HandshakeEnd> {
    let max = shared.config.limits.max_message_bytes;
    let addr = shared.upstream_addr();
    let c = &info.counters;
    let mut cin = BytesMut::with_capacity(8192);
    let mut uin = BytesMut::with_capacity(8192);
    let mut params = Vec::new();
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
                    backend::strip_channel_binding(msg)
                } else {
                    msg
                }
            }
            tag::BACKEND_KEY_DATA => {
                // Registered before the client can know the key.
                registered = Some(KeyGuard::register(shared, Some(&msg[..])));
                key = Some(msg.clone());
                msg
            }
            tag::PARAMETER_STATUS => {
                if let Some((k, v)) = backend::parameter_status(&msg) {
                    params.push((k.to_owned(), v.to_owned()));
                }
                msg
            }
            tag::READY_FOR_QUERY => msg,
            _ => {
                plain_trust = false;
                msg
            }
        };
        Counters::add(&c.bytes_to_client, msg.len() as u64);
        out.push(msg);
        match t {
            tag::READY_FOR_QUERY => {
                out.write_all(&mut io.client).await?;
                if let Some(g) = registered.take() {
                    g.keep();
                }
                return Ok(Authed {
                    cin,
                    uin,
                    params,
                    key,
                    plain_trust,
                    opened,
                    settings: None,
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
            let answer = read_message(&mut io.client, &mut cin, max)
                .await
                .map_err(HandshakeEnd::Client)?;
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
        drop(KeyGuard::register(&shared, Some(&k(42)[..])));
        assert!(
            !shared.knows_cancel_key(42, b"abcd"),
            "a handshake that ends early forgets the key"
        );
        let guard = KeyGuard::register(&shared, Some(&k(43)[..]));
        assert!(shared.knows_cancel_key(43, b"abcd"), "registered at once");
        guard.keep();
        assert!(shared.knows_cancel_key(43, b"abcd"), "kept for the session");
        drop(KeyGuard::register(&shared, None));
    }
}
