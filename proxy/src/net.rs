//! Sockets: a stream that is plain TCP or TLS on either side, and the TLS
//! configurations (rustls) for both sides.

use std::{
    io::{self, Write},
    os::fd::AsRawFd,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use rustls::{
    DigitallySignedStruct, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    pki_types::{CertificateDer, ServerName, UnixTime},
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};

/// A connection to a client or to the upstream.
pub enum Stream {
    Plain(TcpStream),
    ServerTls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    ClientTls(Box<UpstreamTls>),
}

/// A TLS connection to the upstream.
pub type UpstreamTls = tokio_rustls::client::TlsStream<TlsTcp>;

impl Stream {
    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Plain($s) => $e,
            Stream::ServerTls($s) => $e,
            Stream::ClientTls($s) => $e,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::ServerTls(s) => s.is_write_vectored(),
            Stream::ClientTls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("{path} holds no {what}")]
    Empty { path: String, what: &'static str },
    #[error("invalid TLS certificate or key: {0}")]
    Rustls(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_pem(path: &std::path::Path) -> Result<Vec<u8>, TlsConfigError> {
    std::fs::read(path).map_err(|source| TlsConfigError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The acceptor for client connections that ask for TLS.
pub fn server_tls(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<tokio_rustls::TlsAcceptor, TlsConfigError> {
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &read_pem(cert)?[..])
        .collect::<Result<_, _>>()
        .map_err(|source| TlsConfigError::Read {
            path: cert.display().to_string(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsConfigError::Empty {
            path: cert.display().to_string(),
            what: "certificate",
        });
    }
    let key_der = rustls_pemfile::private_key(&mut &read_pem(key)?[..])
        .map_err(|source| TlsConfigError::Read {
            path: key.display().to_string(),
            source,
        })?
        .ok_or_else(|| TlsConfigError::Empty {
            path: key.display().to_string(),
            what: "private key",
        })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The connector for the upstream. Without a CA file the upstream's
/// certificate is not verified (as libpq's `sslmode=require`).
pub fn client_tls(
    ca: Option<&std::path::Path>,
) -> Result<tokio_rustls::TlsConnector, TlsConfigError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let config = match ca {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut &read_pem(path)?[..]) {
                let cert = cert.map_err(|source| TlsConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                roots.add(cert)?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
            .with_no_client_auth(),
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Accepts any upstream certificate, still checking handshake signatures.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The TCP socket under an upstream TLS stream. A pooled server connection
/// serves sessions on every worker, and a socket polled from a runtime
/// other than its own is woken through that one's thread: the session that
/// takes it registers it with its own runtime first
/// (`ServerSocket::into_stream`).
pub struct TlsTcp {
    /// `None` only once a move between runtimes failed.
    tcp: Option<TcpStream>,
    /// The thread whose runtime it is registered with.
    thread: std::thread::ThreadId,
}

impl TlsTcp {
    pub fn new(tcp: TcpStream) -> Self {
        Self {
            tcp: Some(tcp),
            thread: std::thread::current().id(),
        }
    }

    /// Registers the socket with this thread's runtime, if it is another's.
    fn move_here(&mut self) -> io::Result<()> {
        let here = std::thread::current().id();
        if self.thread == here {
            return Ok(());
        }
        let tcp = self.tcp.take().ok_or_else(lost)?;
        self.tcp = Some(TcpStream::from_std(tcp.into_std()?)?);
        self.thread = here;
        Ok(())
    }

    /// The server has not ended the TCP stream, nor has it failed, whatever
    /// is still unread (one system call).
    fn open(&self) -> bool {
        let Some(tcp) = &self.tcp else {
            return false;
        };
        let mut p = libc::pollfd {
            fd: tcp.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one pollfd, alive for the call, which does not wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 0
    }
}

fn lost() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the server connection's socket was lost moving between runtimes",
    )
}

macro_rules! under {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut().tcp.as_mut() {
            Some($s) => $e,
            None => Poll::Ready(Err(lost())),
        }
    };
}

impl AsyncRead for TlsTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        under!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for TlsTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        under!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        under!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        under!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        under!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// A server connection of transaction pooling while no session relays it:
/// a plain socket, in no runtime (a worker's epoll relays it, or any
/// runtime takes it), or a TLS stream, whose state stays with tokio-rustls:
/// the session that takes one relays it through its runtime.
pub enum ServerSocket {
    Plain(std::net::TcpStream),
    Tls(Box<UpstreamTls>),
}

impl ServerSocket {
    pub fn is_tls(&self) -> bool {
        matches!(self, ServerSocket::Tls(_))
    }

    /// A session's upstream as the pool keeps it: a plain socket leaves
    /// this thread's runtime.
    pub fn from_stream(s: Stream) -> io::Result<Self> {
        match s {
            Stream::Plain(t) => Ok(ServerSocket::Plain(t.into_std()?)),
            Stream::ClientTls(t) => Ok(ServerSocket::Tls(t)),
            Stream::ServerTls(_) => Err(io::Error::other(
                "a client's TLS stream is no server connection",
            )),
        }
    }

    /// The connection in this thread's runtime, for the session that
    /// takes it.
    pub fn into_stream(self) -> io::Result<Stream> {
        match self {
            ServerSocket::Plain(t) => Ok(Stream::Plain(TcpStream::from_std(t)?)),
            ServerSocket::Tls(mut t) => {
                t.get_mut().0.move_here()?;
                Ok(Stream::ClientTls(t))
            }
        }
    }

    /// Whether it can still serve, as far as its socket tells now (one
    /// system call): a plain one has nothing unread and is open. Under TLS
    /// unread bytes may be session tickets (TLS 1.3 servers send them
    /// after the handshake), so only the end of the TCP stream tells.
    pub fn alive(&self) -> bool {
        match self {
            ServerSocket::Plain(t) => {
                let mut b = [0u8; 1];
                matches!(t.peek(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            ServerSocket::Tls(t) => t.get_ref().0.open(),
        }
    }

    /// Sends `last` (a Terminate), and under TLS the close_notify, as far
    /// as the socket takes them now: the connection is closed next, and
    /// nobody waits for it.
    pub fn say_goodbye(&mut self, last: &[u8]) {
        match self {
            ServerSocket::Plain(t) => {
                let _ = (&*t).write(last);
            }
            ServerSocket::Tls(t) => {
                let (tcp, tls) = t.get_mut();
                if tls.writer().write_all(last).is_err() {
                    return;
                }
                tls.send_close_notify();
                let Some(tcp) = tcp.tcp.as_ref() else {
                    return;
                };
                let socket = socket2::SockRef::from(tcp);
                while tls.wants_write() {
                    match tls.write_tls(&mut &*socket) {
                        Ok(n) if n > 0 => {}
                        _ => break,
                    }
                }
            }
        }
    }
}

/// A session's two connections. Owned by one task, which polls both
/// directions of each itself: no split halves to lock.
pub struct Pair {
    pub client: Stream,
    pub upstream: Stream,
}
