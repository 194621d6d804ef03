//! The proxy as a library: start it in-process, learn its address, stop it.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use dashmap::DashMap;
use tokio::{
    net::TcpListener,
    sync::{oneshot, watch},
    task::JoinSet,
};
use tracing::{error, info, warn};

use crate::{
    config::{Config, UpstreamAddress},
    embedded::{EmbeddedError, PgOptions, PgServer},
    net,
    stats::Stats,
    wire::startup,
};

/// State shared by every session: read-mostly, no lock on the forwarding path.
pub struct Shared {
    pub config: Arc<Config>,
    upstream_addr: String,
    pub stats: Arc<Stats>,
    pub tls_acceptor: Option<tokio_rustls::TlsAcceptor>,
    pub upstream_tls: Option<tokio_rustls::TlsConnector>,
    /// Backend keys handed to our clients, so a cancel is only forwarded for
    /// a session of ours.
    cancel_keys: DashMap<(i32, Bytes), ()>,
    /// Becomes true when the shutdown grace period is over.
    force_close: watch::Receiver<bool>,
    /// One closer per relaying session, fired when the grace period is
    /// over. Per session, so a session waits on nothing it shares with
    /// others while it forwards.
    closers: DashMap<u64, oneshot::Sender<()>>,
    /// AGE catalogs and compiled Cypher plans.
    pub cypher: crate::cypher::CypherShared,
    /// Upstream connections kept for the next client (`upstream.reuse`).
    pub reuse: crate::session::reuse::Pool,
    /// Sessions that would busy-poll for their answer now
    /// (`upstream.busy_poll`).
    pub spinning: std::sync::atomic::AtomicUsize,
    /// The worker runtimes sessions run on (none: the caller's runtime).
    pub workers: Arc<crate::session::spread::Workers>,
}

impl Shared {
    pub fn upstream_addr(&self) -> String {
        self.upstream_addr.clone()
    }

    pub fn register_cancel_key(&self, pid: i32, secret: Bytes) {
        self.cancel_keys.insert((pid, secret), ());
    }

    pub fn forget_cancel_key(&self, pid: i32, secret: &Bytes) {
        self.cancel_keys.remove(&(pid, secret.clone()));
    }

    #[cfg(test)]
    pub(crate) fn knows_cancel_key(&self, pid: i32, secret: &[u8]) -> bool {
        self.cancel_keys
            .contains_key(&(pid, Bytes::copy_from_slice(secret)))
    }

    pub fn shutdown_forced(&self) -> watch::Receiver<bool> {
        self.force_close.clone()
    }

    /// Resolves when session `id` must close (at once if shutdown is
    /// already forced). Pair with `forget_closer` when the session ends.
    pub fn closer(&self, id: u64) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.closers.insert(id, tx);
        // Registered first, checked second: `close_all` sets the flag before
        // it drains, so a session is either drained or sees the flag.
        if *self.force_close.borrow() {
            self.closers.remove(&id);
        }
        rx
    }

    pub fn forget_closer(&self, id: u64) {
        self.closers.remove(&id);
    }

    fn new(
        config: Config,
        upstream_addr: String,
        tls_acceptor: Option<tokio_rustls::TlsAcceptor>,
        upstream_tls: Option<tokio_rustls::TlsConnector>,
        force_close: watch::Receiver<bool>,
        workers: Vec<tokio::runtime::Handle>,
    ) -> Self {
        Self {
            config: Arc::new(config),
            upstream_addr,
            stats: Arc::new(Stats::new()),
            tls_acceptor,
            upstream_tls,
            cancel_keys: DashMap::new(),
            force_close,
            closers: DashMap::new(),
            cypher: Default::default(),
            reuse: Default::default(),
            spinning: Default::default(),
            workers: Arc::new(crate::session::spread::Workers::new(workers)),
        }
    }

    /// A Shared for unit tests of session logic: no listener, no upstream.
    #[cfg(test)]
    pub(crate) fn for_tests(config: Config) -> Arc<Self> {
        let (_, force_close) = watch::channel(false);
        let addr = "127.0.0.1:1".into();
        Arc::new(Self::new(config, addr, None, None, force_close, Vec::new()))
    }

    fn close_all(&self) {
        let ids: Vec<u64> = self.closers.iter().map(|e| *e.key()).collect();
        for id in ids {
            if let Some((_, tx)) = self.closers.remove(&id) {
                let _ = tx.send(());
            }
        }
    }

    /// Forwards a client's CancelRequest to the upstream backend it names.
    pub async fn forward_cancel(&self, pid: i32, secret: Bytes) {
        if !self.cancel_keys.contains_key(&(pid, secret.clone())) {
            warn!(pid, "cancel request for an unknown backend key ignored");
            return;
        }
        let packet = startup::encode_cancel(pid, &secret);
        let addr = self.upstream_addr();
        let result = async {
            let mut s = crate::timers::timeout(
                self.config.upstream.connect_timeout,
                tokio::net::TcpStream::connect(&addr),
            )
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
            tokio::io::AsyncWriteExt::write_all(&mut s, &packet).await?;
            // The server closes the connection once it has read the request.
            let mut sink = [0u8; 1];
            let _ = tokio::io::AsyncReadExt::read(&mut s, &mut sink).await;
            Ok::<_, std::io::Error>(())
        }
        .await;
        match result {
            Ok(()) => info!(pid, "cancel request forwarded"),
            Err(e) => warn!(pid, "cancel request to upstream {addr} failed: {e}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start embedded PostgreSQL: {0}")]
    Embedded(#[from] EmbeddedError),
    #[error("TLS configuration: {0}")]
    Tls(#[from] net::TlsConfigError),
    #[error("metrics endpoint: {0}")]
    Metrics(std::io::Error),
}

/// A running proxy. Dropping it without `shutdown` stops accepting and
/// aborts its sessions at once.
pub struct Proxy {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    stop_accepting: watch::Sender<bool>,
    force_close: watch::Sender<bool>,
    /// Taken by `shutdown`; aborted on drop otherwise.
    accept_task: Option<tokio::task::JoinHandle<JoinSet<()>>>,
    metrics_addr: Option<SocketAddr>,
    embedded: Option<PgServer>,
}

impl Proxy {
    /// Starts listening (and the embedded server, if configured).
    pub async fn start(config: Config) -> Result<Self, StartError> {
        Self::start_on(config, Vec::new()).await
    }

    /// Like `start`, but sessions run on `workers` (runtimes of one thread
    /// each, with IO and time enabled, so no message costs a thread
    /// wake-up). The first worker accepts, and every session starts there;
    /// one that lasts moves once to the worker with the fewest sessions
    /// (see `session::spread`). The caller's runtime keeps signals,
    /// metrics and housekeeping.
    pub async fn start_on(
        config: Config,
        workers: Vec<tokio::runtime::Handle>,
    ) -> Result<Self, StartError> {
        let embedded = match &config.upstream.address {
            UpstreamAddress::Embedded => {
                let opts = PgOptions {
                    data_dir: config.upstream.embedded_data_dir.clone(),
                    ..Default::default()
                };
                Some(
                    tokio::task::spawn_blocking(move || PgServer::start(opts))
                        .await
                        .map_err(|e| EmbeddedError::Command {
                            what: "embedded server start".into(),
                            detail: e.to_string(),
                        })??,
                )
            }
            UpstreamAddress::Tcp(_) => None,
        };
        Self::start_with(config, embedded, workers).await
    }

    async fn start_with(
        config: Config,
        embedded: Option<PgServer>,
        workers: Vec<tokio::runtime::Handle>,
    ) -> Result<Self, StartError> {
        let upstream_addr = match (&config.upstream.address, &embedded) {
            (UpstreamAddress::Tcp(a), _) => a.clone(),
            (UpstreamAddress::Embedded, Some(pg)) => pg.addr().to_string(),
            (UpstreamAddress::Embedded, None) => unreachable!("embedded server started above"),
        };
        let tls_acceptor = match (&config.tls.cert_file, &config.tls.key_file) {
            (Some(c), Some(k)) => Some(net::server_tls(c, k)?),
            _ => None,
        };
        let upstream_tls = match config.upstream.tls {
            crate::config::UpstreamTls::Disable => None,
            _ => Some(net::client_tls(config.upstream.tls_ca_file.as_deref())?),
        };
        let addr = config.listen.address;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Listen { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| StartError::Listen { addr, source })?;
        let (stop_accepting, stop_rx) = watch::channel(false);
        let (force_close, force_rx) = watch::channel(false);
        let shared = Arc::new(Shared::new(
            config,
            upstream_addr,
            tls_acceptor,
            upstream_tls,
            force_rx,
            workers.clone(),
        ));
        let metrics_addr = match shared.config.metrics.listen {
            Some(a) => Some(
                crate::metrics::serve(a, shared.clone())
                    .await
                    .map_err(StartError::Metrics)?,
            ),
            None => None,
        };
        let accept_task = match workers.first().cloned() {
            None => tokio::spawn(accept_loop(listener, shared.clone(), stop_rx)),
            Some(first) => {
                // Moved to the first worker's reactor: a connection then
                // wakes one thread, and the sessions that stay there never
                // change reactor.
                let listener = listener
                    .into_std()
                    .map_err(|source| StartError::Listen { addr, source })?;
                let shared = shared.clone();
                first.spawn(async move {
                    match TcpListener::from_std(listener) {
                        Ok(l) => accept_loop(l, shared, stop_rx).await,
                        Err(e) => {
                            error!("cannot accept on the worker: {e}");
                            JoinSet::new()
                        }
                    }
                })
            }
        };
        if shared.config.upstream.reuse {
            tokio::spawn(expire_kept(Arc::downgrade(&shared)));
        }
        info!(listen = %local_addr, upstream = %shared.upstream_addr, "onetrip ready");
        Ok(Self {
            local_addr,
            shared,
            stop_accepting,
            force_close,
            accept_task: Some(accept_task),
            metrics_addr,
            embedded,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// `host:port` of the upstream sessions are forwarded to.
    pub fn upstream_addr(&self) -> String {
        self.shared.upstream_addr()
    }

    /// Upstream connections kept waiting for a client (`upstream.reuse`).
    pub fn kept_upstreams(&self) -> usize {
        self.shared.reuse.len()
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.shared.stats.clone()
    }

    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The embedded server, when the proxy runs one.
    pub fn embedded(&self) -> Option<&PgServer> {
        self.embedded.as_ref()
    }

    /// Stops accepting, waits up to `grace` for sessions to end, then closes
    /// the rest with an error, and stops the embedded server.
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.stop_accepting.send(true);
        let accepting = self.accept_task.take();
        let mut sessions = match accepting {
            Some(task) => task.await.unwrap_or_else(|e| {
                error!("accept loop failed: {e}");
                JoinSet::new()
            }),
            None => JoinSet::new(),
        };
        if !sessions.is_empty() {
            info!(
                sessions = sessions.len(),
                ?grace,
                "waiting for sessions to finish"
            );
        }
        let drained = tokio::time::timeout(grace, async {
            while sessions.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(
                sessions = sessions.len(),
                "grace period over; closing remaining sessions"
            );
            let _ = self.force_close.send(true);
            self.shared.close_all();
            if tokio::time::timeout(Duration::from_secs(5), async {
                while sessions.join_next().await.is_some() {}
            })
            .await
            .is_err()
            {
                sessions.abort_all();
            }
        }
        // Kept connections say goodbye before any embedded server stops.
        self.shared.reuse.clear();
        if let Some(mut pg) = self.embedded.take() {
            let _ = tokio::task::spawn_blocking(move || pg.stop()).await;
        }
        info!("onetrip stopped");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The accept loop owns the sessions' JoinSet: ending it drops the
        // set, which aborts every session.
        if let Some(task) = self.accept_task.take() {
            task.abort();
        }
    }
}

/// Closes kept upstream connections that waited `upstream.reuse_idle_timeout`
/// for a client, until the proxy is gone.
async fn expire_kept(shared: std::sync::Weak<Shared>) {
    let every = match shared.upgrade() {
        Some(s) => (s.config.upstream.reuse_idle_timeout / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(5)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(s) = shared.upgrade() else { return };
        s.reuse.expire(s.config.upstream.reuse_idle_timeout);
    }
}

/// Accepts until told to stop, on the first worker if there are workers.
/// Sessions start here; those that last move on (see `session::spread`).
async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> JoinSet<()> {
    let mut sessions = JoinSet::new();
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, peer)) => {
                    next_id += 1;
                    // Finished sessions are collected here, not awaited:
                    // awaiting them would make each session's end wake this
                    // task, often from another thread.
                    while sessions.try_join_next().is_some() {}
                    sessions.spawn(crate::session::serve(tcp, peer, shared.clone(), next_id));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep
                    // serving (on a worker's own timers: it has no others).
                    warn!("accept failed: {e}");
                    let pause = crate::timers::after(Duration::from_millis(50));
                    crate::timers::sleep_until(pause).await;
                }
            },
            _ = stop.changed() => break,
        }
    }
    sessions
}
