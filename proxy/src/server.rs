//! The proxy as a library: start it in-process, learn its address, stop it.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::{net::TcpListener, sync::watch, task::JoinSet};
use tracing::{error, info, warn};

use crate::{
    config::{Config, UpstreamAddress},
    embedded::{EmbeddedError, PgOptions, PgServer},
    net,
    shared::Shared,
    stats::Stats,
};

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
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
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
    embedded: Option<PgServer>,
    /// Streaming replicas of the embedded server (`[replicas] embedded`).
    embedded_replicas: Vec<PgServer>,
}

impl Proxy {
    /// Starts listening (and the embedded server, if configured).
    pub async fn start(config: Config) -> Result<Self, StartError> {
        Self::start_on(config, Vec::new()).await
    }

    /// Like `start`, but sessions run on `workers` (runtimes of one thread
    /// each, with IO and time enabled, so no message costs a thread
    /// wake-up). The first worker accepts, and a session starts there;
    /// one that lasts moves once to the worker with the fewest sessions
    /// (`worker::seats`). A pooled session starts on that worker instead
    /// (`start_session`). The caller's runtime keeps signals, metrics and
    /// housekeeping.
    pub async fn start_on(
        config: Config,
        workers: Vec<tokio::runtime::Handle>,
    ) -> Result<Self, StartError> {
        // A library caller builds its configuration without `load`.
        config.check_admin_exposure()?;
        let embedded = match &config.upstream.address {
            UpstreamAddress::Embedded => {
                // With replicas, each commit's WAL is written, and so
                // streamed, as it commits: asynchronous commit leaves it
                // to the WAL writer, up to three wal_writer_delays (600
                // ms) later, and a client's reads would wait for their
                // floor on the primary that long.
                let conf = match config.replicas.embedded {
                    0 => Vec::new(),
                    _ => vec!["synchronous_commit = on".into()],
                };
                let opts = PgOptions {
                    data_dir: config.upstream.embedded_data_dir.clone(),
                    conf,
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
        let mut replicas = Vec::new();
        let mut embedded = embedded;
        for _ in 0..config.replicas.embedded {
            let Some(pg) = embedded.take() else { break };
            // One after another: each base backup reads the whole primary.
            let (pg, started) = tokio::task::spawn_blocking(move || {
                let started = pg.start_replica(PgOptions::default());
                (pg, started)
            })
            .await
            .map_err(|e| EmbeddedError::Command {
                what: "embedded replica start".into(),
                detail: e.to_string(),
            })?;
            embedded = Some(pg);
            replicas.push(started?);
        }
        let mut proxy = Self::start_with(config, embedded, workers, &replicas).await?;
        proxy.embedded_replicas = replicas;
        Ok(proxy)
    }

    async fn start_with(
        config: Config,
        embedded: Option<PgServer>,
        workers: Vec<tokio::runtime::Handle>,
        embedded_replicas: &[PgServer],
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
        let replica_addrs = config
            .replicas
            .addresses
            .iter()
            .cloned()
            .chain(embedded_replicas.iter().map(|r| r.addr().to_string()))
            .collect::<Vec<_>>();
        let replicas = match replica_addrs.is_empty() {
            true => crate::replicas::Replicas::none(),
            false => crate::replicas::Replicas::start(&config.replicas, replica_addrs),
        };
        let mut shared = Shared::new(
            config,
            upstream_addr,
            tls_acceptor,
            upstream_tls,
            force_rx,
            workers.clone(),
        );
        shared.replicas = replicas;
        let shared = Arc::new(shared);
        // Kept for reloads: the metrics endpoint runs here, as at start.
        let runtime = tokio::runtime::Handle::current();
        *shared
            .reload
            .runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(runtime.clone());
        if let Some(a) = shared.config().metrics.listen {
            let endpoint =
                crate::metrics::Endpoint::start(a, Shared::metrics_page(&shared), Some(&runtime))
                    .map_err(StartError::Metrics)?;
            *shared
                .reload
                .metrics
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(endpoint);
        }
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
        if shared.config().upstream.reuse
            || shared.config().pool.mode == crate::config::PoolMode::Transaction
        {
            tokio::spawn(expire_kept(Arc::downgrade(&shared)));
        }
        info!(listen = %local_addr, upstream = %shared.upstream_addr, "onetrip ready");
        Ok(Self {
            local_addr,
            shared,
            stop_accepting,
            force_close,
            accept_task: Some(accept_task),
            embedded,
            embedded_replicas: Vec::new(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where the metrics endpoint listens now (a reload may move it).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.shared.reload.metrics_addr()
    }

    /// Where `reload` (SIGHUP in the command, `RELOAD` in the admin
    /// console) reads the new configuration; without one, a reload is
    /// refused.
    pub fn set_config_source(
        &self,
        source: impl Fn() -> Result<Config, String> + Send + Sync + 'static,
    ) {
        self.shared.reload.set_source(Arc::new(source));
    }

    /// `listener` is told each configuration a reload puts in force, before
    /// sessions see it (the command sets its log filter from it).
    pub fn on_reload(&self, listener: impl Fn(&Config) + Send + Sync + 'static) {
        self.shared.reload.add_listener(Arc::new(listener));
    }

    /// Reads the configuration again from the source given to
    /// `set_config_source` and puts in force what may change while running
    /// (see `reload`); the rest keeps its old value and is named.
    pub fn reload(&self) -> Result<crate::reload::Reloaded, crate::reload::ReloadError> {
        crate::reload::reload(&self.shared)
    }

    /// `host:port` of the upstream sessions are forwarded to.
    pub fn upstream_addr(&self) -> String {
        self.shared.upstream_addr()
    }

    /// Upstream connections kept waiting for a client (`upstream.reuse`).
    pub fn kept_upstreams(&self) -> usize {
        self.shared.reuse.len()
    }

    /// Client connections open now, within `limits.max_client_connections`
    /// (those being refused aside).
    pub fn client_connections(&self) -> usize {
        self.shared.clients()
    }

    /// Cancel keys held by clients now.
    pub fn cancel_keys(&self) -> usize {
        self.shared.cancel.len()
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.shared.stats.clone()
    }

    /// The configuration in force now (a reload may replace it).
    pub fn config(&self) -> Arc<Config> {
        self.shared.config()
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
        self.shared.pools.clear();
        self.shared.replicas.stop();
        for mut r in std::mem::take(&mut self.embedded_replicas) {
            let _ = tokio::task::spawn_blocking(move || r.stop()).await;
        }
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
        Some(s) => (s.config().upstream.reuse_idle_timeout / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(5)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(s) = shared.upgrade() else { return };
        s.reuse.expire(s.config().upstream.reuse_idle_timeout);
        let config = s.config();
        s.pools
            .expire(config.upstream.reuse_idle_timeout, config.pool.min_idle);
        crate::session::pooled::fill_pools(&s);
    }
}

/// Accepts until told to stop, on the first worker if there are workers.
/// Sessions start here; those that last move on (`worker::seats`), but for
/// pooled ones, which start on the worker with the fewest sessions.
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
                    start_session(&mut sessions, tcp, peer, &shared, next_id);
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

/// Spawns an accepted client's session: here, or with transaction pooling
/// on the worker with the fewest sessions. A pooled session waits for its
/// client between transactions without a server connection, and can't
/// move then; started here, every pooled session would stay on this
/// worker, and one thread would forward for all of them.
fn start_session(
    sessions: &mut JoinSet<()>,
    tcp: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    shared: &Arc<Shared>,
    id: u64,
) {
    let workers = &shared.workers;
    let pooled = shared.config().pool.mode == crate::config::PoolMode::Transaction;
    let j = match pooled && workers.len() > 1 {
        true => workers.for_new(id as usize),
        false => ACCEPTING_WORKER,
    };
    let (Some(handle), false) = (workers.handle(j), j == ACCEPTING_WORKER) else {
        sessions.spawn(crate::session::serve(
            tcp,
            peer,
            shared.clone(),
            id,
            ACCEPTING_WORKER,
        ));
        return;
    };
    // The socket leaves this thread's reactor for that worker's.
    let tcp = match tcp.into_std() {
        Ok(tcp) => tcp,
        Err(e) => {
            return warn!(%peer, "connection closed: it could not leave the accepting worker: {e}");
        }
    };
    let shared = shared.clone();
    let session = async move {
        match tokio::net::TcpStream::from_std(tcp) {
            Ok(tcp) => crate::session::serve(tcp, peer, shared, id, j).await,
            Err(e) => warn!(%peer, "connection closed: it could not join worker {j}: {e}"),
        }
    };
    sessions.spawn_on(session, handle);
}

/// The worker whose thread accepts (the first).
pub const ACCEPTING_WORKER: usize = 0;
