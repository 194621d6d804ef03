//! What every session shares: the configuration, the statistics, the
//! cancel keys handed out, the closers of relaying sessions, the Cypher
//! cache, the kept upstream connections and the worker seats. Below the
//! server and the sessions; read-mostly, no lock on the forwarding path.

use std::net::SocketAddr;
use std::sync::{
    Arc, Mutex, RwLock,
    atomic::{AtomicUsize, Ordering},
};

use bytes::Bytes;
use dashmap::DashMap;
use tokio::sync::{oneshot, watch};
use tracing::{info, warn};

use crate::{
    cancel::{CancelKeys, Key},
    config::Config,
    cypher_cache::CypherCache,
    kept::KeptConnections,
    stats::Stats,
    wire::startup,
    worker::seats::Seats,
};

/// Where a reload gets the new configuration; an `Err` is the reason it
/// is refused.
pub type ConfigSource = dyn Fn() -> Result<Config, String> + Send + Sync;
/// Told each configuration put in force by a reload (the command sets its
/// log filter from it).
pub type ReloadListener = dyn Fn(&Config) + Send + Sync;

/// What a reload (`reload.rs`) needs besides the configuration in force.
/// Touched only by reloads and at start.
#[derive(Default)]
pub(crate) struct Hooks {
    pub(crate) source: Mutex<Option<Arc<ConfigSource>>>,
    pub(crate) listeners: Mutex<Vec<Arc<ReloadListener>>>,
    /// One reload at a time: each compares with what the last put in force.
    pub(crate) running: Mutex<()>,
    /// The metrics endpoint now, replaced when `[metrics] listen` changes.
    pub(crate) metrics: Mutex<Option<crate::metrics::Endpoint>>,
    /// The runtime the metrics endpoint runs on (the one the proxy was
    /// started from).
    pub(crate) runtime: Mutex<Option<tokio::runtime::Handle>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while the lock was held left the value whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hooks {
    pub(crate) fn set_source(&self, source: Arc<ConfigSource>) {
        *lock(&self.source) = Some(source);
    }

    pub(crate) fn add_listener(&self, listener: Arc<ReloadListener>) {
        lock(&self.listeners).push(listener);
    }

    pub(crate) fn metrics_addr(&self) -> Option<SocketAddr> {
        lock(&self.metrics).as_ref().map(|e| e.addr)
    }
}

/// State shared by every session: read-mostly, no lock on the forwarding path.
pub struct Shared {
    /// What a reload replaces (`reload.rs`). Read once or a few times per
    /// session as it starts, never per message: a session keeps what it
    /// read, so no lock is shared on the forwarding path.
    live: RwLock<Arc<Live>>,
    /// Where a reload gets its configuration, and whom it tells.
    pub(crate) reload: Hooks,
    pub(crate) upstream_addr: String,
    pub stats: Arc<Stats>,
    pub upstream_tls: Option<tokio_rustls::TlsConnector>,
    /// The cancel keys handed to clients, each with its backend's key: a
    /// cancel is forwarded only for a client of ours that is still here.
    pub cancel: Arc<CancelKeys>,
    /// Becomes true when the shutdown grace period is over.
    force_close: watch::Receiver<bool>,
    /// One closer per relaying session, fired when the grace period is
    /// over. Per session, so a session waits on nothing it shares with
    /// others while it forwards.
    closers: DashMap<u64, oneshot::Sender<()>, rustc_hash::FxBuildHasher>,
    /// AGE catalogs and compiled Cypher plans.
    pub cypher: Arc<CypherCache>,
    /// Upstream connections kept for the next client (`upstream.reuse`).
    pub reuse: KeptConnections,
    /// Transaction pooling's pools (`[pool] mode = "transaction"`).
    pub pools: Arc<crate::pooling::Pools>,
    /// Pooled users' secrets looked up with `[pool] auth_query`.
    pub secrets: Arc<crate::auth::cache::Secrets>,
    /// Both, as sessions' statements reach them (`protocol::PoolNotices`).
    pool_notices: Arc<crate::pooling::Notices>,
    /// Sessions that would busy-poll for their answer now
    /// (`upstream.busy_poll`).
    pub spinning: std::sync::atomic::AtomicUsize,
    /// The worker runtimes sessions run on (none: the caller's runtime).
    pub workers: Arc<Seats>,
    /// Client connections open now, and those being refused
    /// (`limits.max_client_connections`).
    clients: AtomicUsize,
    refusing: AtomicUsize,
    /// Streaming replicas that serve reads (`[replicas]`), as watched.
    pub replicas: Arc<crate::replicas::Replicas>,
}

/// The configuration in force and what is built from it, replaced whole
/// by a reload.
pub struct Live {
    pub config: Arc<Config>,
    /// The planner, with the configured read-only functions.
    pub analyzer: Arc<onetrip_planner::analysis::Analyzer>,
    /// Clients' TLS (`[tls]`), when configured.
    pub tls_acceptor: Option<tokio_rustls::TlsAcceptor>,
}

impl Live {
    pub(crate) fn new(config: Config, tls_acceptor: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let analyzer =
            onetrip_planner::analysis::Analyzer::new(&config.coalesce.read_only_functions);
        Self {
            config: Arc::new(config),
            analyzer: Arc::new(analyzer),
            tls_acceptor,
        }
    }
}

/// A client connection's place under `limits.max_client_connections`,
/// given back when dropped.
pub struct ClientSlot<'a> {
    count: &'a AtomicUsize,
    /// Past the limit: the client gets 53300 once it has said who it is.
    pub refused: bool,
}

impl Drop for ClientSlot<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shared {
    /// What a session's protocol state uses of this.
    pub fn services(&self) -> crate::protocol::Services {
        let live = self.live();
        crate::protocol::Services {
            config: live.config.clone(),
            stats: self.stats.clone(),
            cypher: self.cypher.clone(),
            analyzer: live.analyzer.clone(),
            pools: self.pool_notices.clone(),
        }
    }

    /// The configuration in force now, and what is built from it.
    pub fn live(&self) -> Arc<Live> {
        // A panic while the lock was held left the old value whole.
        self.live.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        self.live().config.clone()
    }

    /// Puts `live` in force for whatever reads it from now on.
    pub(crate) fn replace_live(&self, live: Live) {
        *self.live.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(live);
    }

    /// A place for a new client connection: within the limit, or among
    /// those being refused. `None` when as many are being refused as the
    /// limit allows in all: such a connection is closed at once.
    pub fn client_slot(&self) -> Option<ClientSlot<'_>> {
        let max = self.config().limits.max_client_connections;
        for (count, refused) in [(&self.clients, false), (&self.refusing, true)] {
            if count.fetch_add(1, Ordering::Relaxed) < max {
                return Some(ClientSlot { count, refused });
            }
            count.fetch_sub(1, Ordering::Relaxed);
        }
        None
    }

    /// Client connections open now (refused ones aside).
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    pub fn upstream_addr(&self) -> String {
        self.upstream_addr.clone()
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

    pub(crate) fn new(
        config: Config,
        upstream_addr: String,
        tls_acceptor: Option<tokio_rustls::TlsAcceptor>,
        upstream_tls: Option<tokio_rustls::TlsConnector>,
        force_close: watch::Receiver<bool>,
        workers: Vec<tokio::runtime::Handle>,
    ) -> Self {
        let stats = Arc::new(Stats::with_max_rows(config.limits.max_stats_rows));
        let (pool_size, max_pools) = (config.pool.pool_size, config.pool.max_pools);
        let (max_db, max_user) = (
            config.pool.max_db_connections,
            config.pool.max_user_connections,
        );
        let pools = Arc::new(crate::pooling::Pools::with_limits(
            pool_size, max_pools, max_db, max_user,
        ));
        let secrets = Arc::<crate::auth::cache::Secrets>::default();
        Self {
            live: RwLock::new(Arc::new(Live::new(config, tls_acceptor))),
            reload: Default::default(),
            upstream_addr,
            stats,
            upstream_tls,
            cancel: Arc::new(CancelKeys::default()),
            force_close,
            closers: DashMap::default(),
            cypher: Default::default(),
            reuse: Default::default(),
            pools: pools.clone(),
            secrets: secrets.clone(),
            pool_notices: Arc::new(crate::pooling::Notices { pools, secrets }),
            spinning: Default::default(),
            workers: Arc::new(Seats::new(workers)),
            clients: AtomicUsize::new(0),
            refusing: AtomicUsize::new(0),
            replicas: crate::replicas::Replicas::none(),
        }
    }

    /// A Shared for unit tests of session logic: no listener, no upstream.
    #[cfg(test)]
    pub(crate) fn for_tests(config: Config) -> Arc<Self> {
        Self::detached(config)
    }

    /// A Shared with no listener and no upstream, for driving the protocol
    /// state without sockets (tests, fuzzing).
    #[doc(hidden)]
    pub fn detached(config: Config) -> Arc<Self> {
        let (_, force_close) = watch::channel(false);
        let addr = "127.0.0.1:1".into();
        Arc::new(Self::new(config, addr, None, None, force_close, Vec::new()))
    }

    pub(crate) fn close_all(&self) {
        let ids: Vec<u64> = self.closers.iter().map(|e| *e.key()).collect();
        for id in ids {
            if let Some((_, tx)) = self.closers.remove(&id) {
                let _ = tx.send(());
            }
        }
    }

    /// Forwards a client's CancelRequest to the backend its key points at
    /// now, with that backend's own key.
    pub async fn forward_cancel(&self, pid: i32, secret: Bytes) {
        let Some(target) = self.cancel.target(&Key { pid, secret }) else {
            warn!(pid, "cancel request with an unknown key ignored");
            return;
        };
        // A pooled client's statement may be waiting for a connection: the
        // cancel waits with it, as long as its wait may last.
        let config = self.config();
        let limit = config.pool.query_wait_timeout + config.upstream.connect_timeout;
        let Some(backend) = target.backend_for_cancel(limit).await else {
            info!(
                pid,
                "cancel request for a client that runs nothing now ignored"
            );
            return;
        };
        let packet = startup::encode_cancel(backend.pid, &backend.secret);
        let addr = self.upstream_addr();
        let result = async {
            let mut s = crate::timers::timeout(
                self.config().upstream.connect_timeout,
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

impl crate::metrics::Source for Shared {
    fn page(&self) -> String {
        let mut page = crate::metrics::render(&self.stats, self.reuse.len(), &self.pools.rows());
        crate::metrics::render_replicas(&mut page, &self.replicas);
        page
    }
}

impl Shared {
    /// The metrics endpoint's view of `shared`, held weakly.
    pub(crate) fn metrics_page(shared: &Arc<Shared>) -> crate::metrics::Page {
        Arc::<Shared>::downgrade(shared)
    }
}
