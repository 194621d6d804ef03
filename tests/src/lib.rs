//! Test harness: a private PostgreSQL cluster (temp dir, random port) and a
//! onetrip proxy in front of it, both started in-process.

use std::{
    path::PathBuf,
    process::{Command, Output},
    time::Duration,
};

pub use onetrip::embedded::{PgOptions, PgServer};
use onetrip::{Config, Proxy, config::UpstreamAddress};

/// A PostgreSQL server and a proxy in front of it.
pub struct Env {
    pub pg: PgServer,
    pub proxy: Option<Proxy>,
}

/// Starts a private PostgreSQL with `opts`.
pub async fn start_pg(opts: PgOptions) -> PgServer {
    tokio::task::spawn_blocking(move || PgServer::start(opts))
        .await
        .expect("start task")
        .expect("start private PostgreSQL")
}

/// A proxy config pointing at `pg`, listening on a free loopback port.
pub fn proxy_config(pg: &PgServer) -> Config {
    let mut cfg = Config::default();
    cfg.listen.address = "127.0.0.1:0".parse().expect("addr");
    cfg.upstream.address = UpstreamAddress::Tcp(pg.addr().to_string());
    cfg
}

impl Env {
    /// PostgreSQL with trust auth, and a proxy with default settings.
    pub async fn start() -> Self {
        Self::start_with(PgOptions::default(), |_| {}).await
    }

    /// PostgreSQL with `opts`, and a proxy whose config `tweak` may change.
    pub async fn start_with(opts: PgOptions, tweak: impl FnOnce(&mut Config)) -> Self {
        let pg = start_pg(opts).await;
        let mut cfg = proxy_config(&pg);
        tweak(&mut cfg);
        let proxy = Proxy::start(cfg).await.expect("start proxy");
        Self { pg, proxy: Some(proxy) }
    }

    pub fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("proxy running")
    }

    pub fn proxy_port(&self) -> u16 {
        self.proxy().local_addr().port()
    }

    /// libpq connection string to the server, bypassing the proxy.
    pub fn direct_dsn(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname=postgres", self.pg.port())
    }

    /// libpq connection string through the proxy.
    pub fn proxy_dsn(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname=postgres", self.proxy_port())
    }

    pub fn dsn(&self, via_proxy: bool) -> String {
        if via_proxy { self.proxy_dsn() } else { self.direct_dsn() }
    }

    /// Runs `psql` against the proxy (or direct) with the given arguments.
    pub fn psql(&self, via_proxy: bool, args: &[&str]) -> Output {
        let port = if via_proxy { self.proxy_port() } else { self.pg.port() };
        self.pg
            .tool("psql")
            .args(["-X", "-q", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "postgres"])
            .args(args)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .expect("run psql")
    }

    /// Stops the proxy, waiting at most `grace` for sessions.
    pub async fn stop_proxy(&mut self, grace: Duration) {
        if let Some(p) = self.proxy.take() {
            p.shutdown(grace).await;
        }
    }
}

/// Connects with tokio-postgres and drives the connection in the background.
pub async fn connect(dsn: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Python 3 with psycopg 3, or `None` (callers print a skip line).
pub fn python_with_psycopg() -> Option<PathBuf> {
    let py = std::env::var_os("ONETRIP_PYTHON").map(PathBuf::from).unwrap_or_else(|| "python3".into());
    let ok = Command::new(&py).args(["-c", "import psycopg"]).output().map(|o| o.status.success()).unwrap_or(false);
    ok.then_some(py)
}

/// Runs a Python script from `tests/py/` with `args`; returns its stdout.
/// Panics with the script's stderr on failure.
pub fn run_py(py: &PathBuf, script: &str, args: &[&str]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("py").join(script);
    let out = Command::new(py).arg(&path).args(args).output().expect("run python");
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Prints the standard skip line for a missing prerequisite.
pub fn skip(what: &str) {
    eprintln!("skipped: {what}");
}
