//! Test harness: a PostgreSQL cluster (temp dir, random port) and a
//! onetrip proxy in front of it, both started in-process. The cluster is
//! the test's own, or one the test binary's tests share, each with a
//! database of its own.

pub mod age;
pub mod pipelines;
pub mod process;
pub mod replica;
pub mod script;
pub mod transcript;

use std::{
    ops::{Deref, DerefMut},
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use onetrip::{Config, Proxy, config::UpstreamAddress};
pub use onetrip_embedded::{PgOptions, PgServer};

/// A PostgreSQL server and a proxy in front of it.
pub struct Env {
    pub pg: Pg,
    pub proxy: Option<Proxy>,
    /// The threads the proxy's sessions run on, as in the binary; dropped
    /// after the proxy.
    pub workers: Option<onetrip::worker::Workers>,
    /// The database the test's clients use: `postgres` on a server of the
    /// test's own, one made for the test on the shared one.
    pub db: String,
}

/// The server of an [`Env`]: the test's own, or the test binary's shared
/// one ([`shared_pg`]), which no test may stop or restart.
pub enum Pg {
    Own(PgServer),
    Shared(Arc<PgServer>),
}

impl Deref for Pg {
    type Target = PgServer;
    fn deref(&self) -> &PgServer {
        match self {
            Pg::Own(pg) => pg,
            Pg::Shared(pg) => pg,
        }
    }
}

impl DerefMut for Pg {
    fn deref_mut(&mut self) -> &mut PgServer {
        match self {
            Pg::Own(pg) => pg,
            Pg::Shared(_) => panic!("the shared server is not a test's to stop or restart"),
        }
    }
}

/// The server the test binary's tests share, started by the first that
/// asks, with the default options; stopped when the binary exits.
pub async fn shared_pg() -> Arc<PgServer> {
    static SHARED: Mutex<Option<Arc<PgServer>>> = Mutex::new(None);
    extern "C" fn stop_shared() {
        // The last reference, when every test is done: stops the server
        // and removes its directory.
        let pg = SHARED.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop(pg);
    }
    tokio::task::spawn_blocking(|| {
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pg) = &*shared {
            return pg.clone();
        }
        let pg = PgServer::start(fast_options(PgOptions::default()))
            .expect("start the shared PostgreSQL");
        let pg = Arc::new(pg);
        *shared = Some(pg.clone());
        // SAFETY: registers a function without arguments that does not
        // unwind (it takes a lock and drops the server).
        unsafe { libc::atexit(stop_shared) };
        pg
    })
    .await
    .expect("start task")
}

/// Worker threads as the binary starts them (two, so sessions can move),
/// each relaying through its own epoll.
pub fn workers() -> onetrip::worker::Workers {
    let w = onetrip::workers(2).expect("start worker threads");
    assert_eq!(
        w.relaying_themselves(),
        2,
        "every worker relays through its own epoll"
    );
    w
}

/// Starts a private PostgreSQL with `opts`: unless the test names its data
/// directory, a copy of [`template`] in [`data_parent`].
pub async fn start_pg(opts: PgOptions) -> PgServer {
    let opts = fast_options(opts);
    tokio::task::spawn_blocking(move || PgServer::start(opts))
        .await
        .expect("start task")
        .expect("start private PostgreSQL")
}

/// `opts` with [`data_parent`] and [`template`], unless the test names
/// its data directory.
fn fast_options(mut opts: PgOptions) -> PgOptions {
    if opts.data_dir.is_none() {
        opts.temp_parent = opts.temp_parent.or_else(data_parent);
        opts.template = opts.template.or_else(template);
    }
    opts
}

/// Where private servers keep their data: in memory (`/dev/shm`) where
/// that is a directory we may write with room for the servers a test run
/// starts at once (`SHM_ROOM`; a container's is often 64 MB), as initdb,
/// start-up and every write are several times quicker there than on a
/// slow disk; else `None`, the system's temporary directory.
pub fn data_parent() -> Option<PathBuf> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT
        .get_or_init(|| {
            let shm = Path::new("/dev/shm");
            let writable = tempfile::Builder::new()
                .prefix("onetrip-probe-")
                .tempdir_in(shm)
                .is_ok();
            (writable && free_bytes(shm).is_some_and(|b| b >= SHM_ROOM)).then(|| shm.to_owned())
        })
        .clone()
}

/// Free room `/dev/shm` must have for the test servers to use it: about
/// 40 MB a server, and a binary's tests start several at once.
const SHM_ROOM: u64 = 2 << 30;

/// Bytes free to an unprivileged user on the filesystem of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a statvfs is plain integers, for which zero is a value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` is a statvfs to fill.
    let ok = unsafe { libc::statvfs(path.as_ptr(), &mut st) } == 0;
    ok.then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// A data directory `initdb` made, which private servers copy instead of
/// running initdb each (a copy takes a fraction of its time). It is kept
/// in [`data_parent`] across test processes, one per user and PostgreSQL
/// installation, and made by the first process that misses it. `None`
/// (each server runs initdb) when it can't be made.
pub fn template() -> Option<PathBuf> {
    static TEMPLATE: OnceLock<Option<PathBuf>> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            use std::hash::{Hash, Hasher};
            let bin = onetrip_embedded::find_bin_dir()?;
            let initdb = std::fs::metadata(bin.join("initdb")).ok()?;
            // Another PostgreSQL, or the same one reinstalled, or another
            // user: another template. Bump the tag when PgServer's initdb
            // arguments change.
            let mut h = std::hash::DefaultHasher::new();
            (
                "initdb-utf8-c-trust-1",
                &bin,
                initdb.len(),
                initdb.modified().ok(),
            )
                .hash(&mut h);
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() }.hash(&mut h);
            let parent = data_parent().unwrap_or_else(std::env::temp_dir);
            let dir = parent.join(format!("onetrip-tests-pg-template-{:016x}", h.finish()));
            if dir.join("PG_VERSION").is_file() {
                return Some(dir);
            }
            // Made aside and renamed into place, so that a process never
            // sees half a template, and of two making it at once one wins.
            let wip = parent.join(format!(
                "{}.{}",
                dir.file_name()?.to_str()?,
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&wip);
            onetrip_embedded::init_template(&wip).ok()?;
            if std::fs::rename(&wip, &dir).is_err() {
                let _ = std::fs::remove_dir_all(&wip);
            }
            dir.join("PG_VERSION").is_file().then_some(dir)
        })
        .clone()
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
        Self::start_on(start_pg(opts).await, tweak).await
    }

    /// A proxy in front of `pg`, a server the test started itself.
    pub async fn start_on(pg: PgServer, tweak: impl FnOnce(&mut Config)) -> Self {
        Self::start_in(Pg::Own(pg), "postgres".into(), tweak).await
    }

    /// A database of the test's own on the binary's shared server
    /// ([`shared_pg`]), and a proxy with the settings `tweak` makes in
    /// front of it: for a test that changes nothing outside its database
    /// nor counts what other clients of the server do.
    pub async fn shared(tweak: impl FnOnce(&mut Config)) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let pg = shared_pg().await;
        let db = format!("test_{}", N.fetch_add(1, Ordering::Relaxed));
        connect(&pg.dsn("postgres"))
            .await
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .expect("create the test's database");
        Self::start_in(Pg::Shared(pg), db, tweak).await
    }

    async fn start_in(pg: Pg, db: String, tweak: impl FnOnce(&mut Config)) -> Self {
        let mut cfg = proxy_config(&pg);
        tweak(&mut cfg);
        let workers = workers();
        let proxy = Proxy::start_on(cfg, workers.handles())
            .await
            .expect("start proxy");
        Self {
            pg,
            proxy: Some(proxy),
            workers: Some(workers),
            db,
        }
    }

    /// Another proxy in front of the same server, on the same worker
    /// threads, with its own configuration.
    pub async fn start_proxy(&self, tweak: impl FnOnce(&mut Config)) -> Proxy {
        let mut cfg = proxy_config(&self.pg);
        tweak(&mut cfg);
        let workers = self.workers.as_ref().expect("workers running");
        Proxy::start_on(cfg, workers.handles())
            .await
            .expect("start proxy")
    }

    pub fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("proxy running")
    }

    pub fn proxy_port(&self) -> u16 {
        self.proxy().local_addr().port()
    }

    /// Runs `sql` on the proxy's admin console; its rows.
    pub async fn admin(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        admin_at(self.proxy_port(), sql).await
    }

    /// SHOW POOLS' row of the pool of database `postgres`, its values read
    /// by column name.
    pub async fn pool_row(&self) -> tokio_postgres::SimpleQueryRow {
        let dsn = format!(
            "host=127.0.0.1 port={} user=postgres dbname=onetrip",
            self.proxy_port()
        );
        let c = connect(&dsn).await;
        let msgs = c.simple_query("SHOW POOLS").await.expect("admin console");
        msgs.into_iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r)
                    if r.get("database") == Some("postgres") =>
                {
                    Some(r)
                }
                _ => None,
            })
            .expect("a pool of postgres")
    }

    /// libpq connection string to the server, bypassing the proxy.
    pub fn direct_dsn(&self) -> String {
        self.dsn_at(self.pg.port())
    }

    /// libpq connection string through the proxy.
    pub fn proxy_dsn(&self) -> String {
        self.dsn_at(self.proxy_port())
    }

    /// libpq connection string to the test's database through `port` (the
    /// server's, or a proxy's).
    pub fn dsn_at(&self, port: u16) -> String {
        format!(
            "host=127.0.0.1 port={port} user=postgres dbname={}",
            self.db
        )
    }

    pub fn dsn(&self, via_proxy: bool) -> String {
        if via_proxy {
            self.proxy_dsn()
        } else {
            self.direct_dsn()
        }
    }

    /// Runs `psql` against the proxy (or direct) with the given arguments.
    pub fn psql(&self, via_proxy: bool, args: &[&str]) -> Output {
        let port = if via_proxy {
            self.proxy_port()
        } else {
            self.pg.port()
        };
        self.pg
            .tool("psql")
            .args([
                "-X",
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
                "-d",
                &self.db,
            ])
            .args(args)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .expect("run psql")
    }

    /// Runs psql like `psql`, requires it to succeed and returns its stdout.
    pub fn psql_ok(&self, via_proxy: bool, args: &[&str]) -> String {
        let out = self.psql(via_proxy, args);
        assert!(
            out.status.success(),
            "psql failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Waits (up to 5 s) until at most `live` sessions are open, so closed
    /// sessions' counters have landed, and returns the proxy's totals.
    pub async fn settle(&self, live: usize) -> onetrip::stats::Snapshot {
        for _ in 0..250 {
            if self.proxy().stats().sessions().len() <= live {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.proxy().stats().total()
    }

    /// Waits (up to 5 s) until the proxy keeps `n` upstream connections
    /// for reuse.
    pub async fn wait_kept(&self, n: usize) {
        for _ in 0..250 {
            if self.proxy().kept_upstreams() == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "expected {n} kept connections, found {}",
            self.proxy().kept_upstreams()
        );
    }

    /// Stops the proxy, waiting at most `grace` for sessions.
    pub async fn stop_proxy(&mut self, grace: Duration) {
        if let Some(p) = self.proxy.take() {
            p.shutdown(grace).await;
        }
    }
}

/// Connects with tokio-postgres and drives the connection in the background.
/// The rows of a simple query's answer, as text (NULL as `None`).
pub fn simple_rows(msgs: &[tokio_postgres::SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    msgs.iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
            }
            _ => None,
        })
        .collect()
}

pub async fn connect(dsn: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Waits (up to 10 s, reading every 100 ms) until `read` gives `want`:
/// what a worker's once-a-second look settles. The value it settled on
/// otherwise.
pub async fn settles_at<T: PartialEq>(want: T, mut read: impl FnMut() -> T) -> Result<(), T> {
    for _ in 0..100 {
        if read() == want {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(read())
}

/// Waits (up to 30 s) until backend `pid` runs a pg_sleep, as `watcher`, a
/// session of the same server, sees.
pub async fn wait_sleeping(watcher: &tokio_postgres::Client, pid: i32) {
    let sql = "select count(*) from pg_stat_activity where pid = $1 and wait_event = 'PgSleep'";
    for _ in 0..1200 {
        let n: i64 = watcher.query_one(sql, &[&pid]).await.expect("watch").get(0);
        if n == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("pg_sleep never started on backend {pid}");
}

/// Runs `select pg_sleep(30)` on `client` and, once the server runs it
/// (else there is nothing to cancel), cancels it with the client's own
/// key: the SQLSTATE the query then fails with, in time.
pub async fn cancel_a_sleep(
    client: tokio_postgres::Client,
    watcher: &tokio_postgres::Client,
) -> Option<tokio_postgres::error::SqlState> {
    let pid: i32 = client
        .query_one("select pg_backend_pid()", &[])
        .await
        .expect("backend pid")
        .get(0);
    let token = client.cancel_token();
    let sleeper = tokio::spawn(async move { client.simple_query("select pg_sleep(30)").await });
    wait_sleeping(watcher, pid).await;
    token
        .cancel_query(tokio_postgres::NoTls)
        .await
        .expect("cancel request");
    let ended = tokio::time::timeout(Duration::from_secs(15), sleeper)
        .await
        .expect("cancelled in time")
        .expect("query task");
    ended.expect_err("the sleep was cancelled").code().cloned()
}

/// Python 3 with psycopg 3, or `None` (callers print a skip line).
pub fn python_with_psycopg() -> Option<PathBuf> {
    let py = std::env::var_os("ONETRIP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import psycopg"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then_some(py)
}

/// Whether Python `py` imports `modules` (`import a, b`).
pub fn python_has(py: &Path, modules: &str) -> bool {
    Command::new(py)
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Python with psycopg and `modules`, or `None` (callers print a skip
/// line).
pub fn python_with(modules: &str) -> Option<PathBuf> {
    python_with_psycopg().filter(|py| python_has(py, modules))
}

/// Runs a Python script from `tests/py/` with `args`; returns its stdout.
/// Panics with the script's stderr on failure.
pub fn run_py(py: &PathBuf, script: &str, args: &[&str]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("py")
        .join(script);
    let out = Command::new(py)
        .arg(&path)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Python script from `tests/py/` run many times in one process
/// (`tests/py/serve.py`): Python and the clients it imports load once, which
/// on a small machine costs more than a run itself. Each run gets its own
/// arguments and answers what it printed, as [`run_py`].
pub struct PyRunner {
    script: String,
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    stderr: std::fs::File,
}

impl PyRunner {
    pub fn start(py: &Path, script: &str) -> Self {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("py")
            .join("serve.py");
        // A file, not a pipe: nothing has to drain it while jobs run.
        let stderr = tempfile::tempfile().expect("stderr file");
        let mut child = tokio::process::Command::new(py)
            .arg(&path)
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(stderr.try_clone().expect("stderr file"))
            .kill_on_drop(true)
            .spawn()
            .expect("run python");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        use tokio::io::AsyncBufReadExt;
        Self {
            script: script.to_owned(),
            child,
            stdin,
            stdout: tokio::io::BufReader::new(stdout).lines(),
            stderr,
        }
    }

    /// The script's file name in `tests/py/`.
    pub fn script(&self) -> &str {
        &self.script
    }

    /// Runs the script with `args`; what it printed. Panics with its
    /// stderr when it fails.
    pub async fn run(&mut self, args: &[&str]) -> String {
        use std::io::{Read, Seek};
        use tokio::io::AsyncWriteExt;
        let line = format!("{}\n", args.join("\t"));
        let sent = self.stdin.write_all(line.as_bytes()).await;
        let answer = match sent {
            Ok(()) => self.stdout.next_line().await.ok().flatten(),
            Err(_) => None,
        };
        if let Some(printed) = answer.and_then(|a| serde_json::from_str(&a).ok()) {
            return printed;
        }
        let status = self.child.wait().await;
        let mut err = String::new();
        let _ = self.stderr.rewind();
        let _ = self.stderr.read_to_string(&mut err);
        panic!("{} {args:?} failed ({status:?}):\n{err}", self.script);
    }
}

/// Writes a self-signed certificate for `localhost` and its key into `dir`,
/// readable by the server user: for a private server with TLS, and onetrip
/// in front of it.
pub fn server_cert_files(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // As root the server runs as `postgres`, which must own its key file.
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if root.unwrap_or(false) {
        let _ = Command::new("chown")
            .arg("postgres:")
            .args([&cert, &key])
            .status();
    }
    (cert, key)
}

/// Whether a missing prerequisite fails its test instead of skipping it:
/// `CI=true` (`.ci/run` sets it), so that CI can't pass by checking less.
pub fn prerequisites_required() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// Prints the standard skip line for a missing prerequisite; with
/// `CI=true`, fails instead.
pub fn skip(what: &str) {
    assert!(
        !prerequisites_required(),
        "{what}; with CI=true a missing prerequisite fails (.ci/run installs it)"
    );
    eprintln!("skipped: {what}");
}

/// Connects with tokio-postgres and returns the client with the raw
/// connection, for tests that poll it themselves (notifications).
pub async fn connect_raw(
    dsn: &str,
) -> (
    tokio_postgres::Client,
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
) {
    tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .expect("connect")
}

/// A minimal protocol-3 client over a plain socket, for bytes no real client
/// would send and for checking exactly what comes back.
pub mod raw {
    use std::time::Duration;

    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };

    /// A startup packet for `user` / `database`.
    pub fn startup(user: &str, database: &str) -> Vec<u8> {
        startup_with(&[("user", user), ("database", database)])
    }

    /// A startup packet with these parameters, in this order.
    pub fn startup_with(params: &[(&str, &str)]) -> Vec<u8> {
        let mut body = 196608u32.to_be_bytes().to_vec();
        for (k, v) in params {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut out = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        out.extend(body);
        out
    }

    /// A tagged message.
    pub fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    /// A simple Query message.
    pub fn query(sql: &str) -> Vec<u8> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        message(b'Q', &body)
    }

    /// Reads one tagged message: `None` at EOF (or a reset). Panics after
    /// `wait` without one, so a hung proxy fails the test instead of hanging it.
    pub async fn read_message(s: &mut TcpStream, wait: Duration) -> Option<(u8, Vec<u8>)> {
        let fut = async {
            let mut head = [0u8; 5];
            s.read_exact(&mut head).await.ok()?;
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut body = vec![0u8; len.checked_sub(4)?];
            s.read_exact(&mut body).await.ok()?;
            Some((head[0], body))
        };
        tokio::time::timeout(wait, fut)
            .await
            .expect("no message or EOF in time")
    }

    /// Reads messages up to and with the next ReadyForQuery.
    pub async fn read_to_z(s: &mut TcpStream) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            let m = read_message(s, Duration::from_secs(30))
                .await
                .expect("ReadyForQuery before EOF");
            let z = m.0 == b'Z';
            out.push(m);
            if z {
                return out;
            }
        }
    }

    /// Reads messages until EOF, returning them all.
    pub async fn read_to_end(s: &mut TcpStream, wait: Duration) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(m) = read_message(s, wait).await {
            out.push(m);
        }
        out
    }

    /// Fields of an ErrorResponse/NoticeResponse body, by field code.
    pub fn fields(body: &[u8]) -> Vec<(u8, String)> {
        body.split(|b| *b == 0)
            .filter(|f| !f.is_empty())
            .map(|f| (f[0], String::from_utf8_lossy(&f[1..]).into_owned()))
            .collect()
    }

    pub fn field(body: &[u8], code: u8) -> Option<String> {
        fields(body)
            .into_iter()
            .find(|(c, _)| *c == code)
            .map(|(_, v)| v)
    }

    /// The ErrorResponses among `msgs`, as (severity, SQLSTATE, message).
    pub fn errors(msgs: &[(u8, Vec<u8>)]) -> Vec<(String, String, String)> {
        msgs.iter()
            .filter(|(t, _)| *t == b'E')
            .map(|(_, b)| {
                let f = |c| field(b, c).unwrap_or_default();
                (f(b'S'), f(b'C'), f(b'M'))
            })
            .collect()
    }

    /// Connects with a startup packet of `params` and reads its answer, to
    /// the first ReadyForQuery or the end.
    pub async fn login_with(port: u16, params: &[(&str, &str)]) -> (TcpStream, Vec<(u8, Vec<u8>)>) {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.write_all(&startup_with(params))
            .await
            .expect("write startup");
        let mut out = Vec::new();
        while let Some(m) = read_message(&mut s, Duration::from_secs(30)).await {
            let end = m.0 == b'Z' || m.0 == b'E';
            out.push(m);
            if end {
                break;
            }
        }
        (s, out)
    }

    /// The ParameterStatus values of a login's answer, in order.
    pub fn parameters(msgs: &[(u8, Vec<u8>)]) -> Vec<(String, String)> {
        msgs.iter()
            .filter(|(t, _)| *t == b'S')
            .map(|(_, b)| {
                let mut it = b
                    .split(|c| *c == 0)
                    .map(|p| String::from_utf8_lossy(p).into_owned());
                (it.next().unwrap_or_default(), it.next().unwrap_or_default())
            })
            .collect()
    }

    /// Connects and completes a trust-auth startup (through ReadyForQuery).
    pub async fn connect_ready(port: u16) -> TcpStream {
        login(port, "postgres", "postgres")
            .await
            .unwrap_or_else(|e| panic!("startup failed: {e}"))
    }

    /// Two clients, each connected and ready, at `port`.
    pub async fn two_ready(port: u16) -> (TcpStream, TcpStream) {
        (connect_ready(port).await, connect_ready(port).await)
    }

    /// Sends `msg` and tells what the client hears up to ReadyForQuery:
    /// each message's type, rows in full, the SQLSTATE and text of an
    /// error, a CommandComplete's tag, the transaction status.
    pub async fn heard(s: &mut TcpStream, msg: &[u8]) -> String {
        s.write_all(msg).await.unwrap();
        read_to_z(s)
            .await
            .iter()
            .map(|(t, b)| match t {
                b'D' => format!("D{:?}", row_values(b)),
                b'E' => format!(
                    "E({} {})",
                    field(b, b'C').unwrap_or_default(),
                    field(b, b'M').unwrap_or_default()
                ),
                b'C' => format!("C({})", String::from_utf8_lossy(&b[..b.len() - 1])),
                b'Z' => format!("Z{}", b[0] as char),
                t => (*t as char).to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Connects as `user` to `database` and completes a trust-auth startup
    /// (through ReadyForQuery); what went wrong otherwise.
    pub async fn login(port: u16, user: &str, database: &str) -> Result<TcpStream, String> {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        s.write_all(&startup(user, database))
            .await
            .map_err(|e| format!("write startup: {e}"))?;
        let (msgs, end) = read_answer(&mut s, Duration::from_secs(10)).await;
        if let Some((_, body)) = msgs.iter().find(|(t, _)| *t == b'E') {
            return Err(format!("{:?}", fields(body)));
        }
        match end {
            None => Ok(s),
            Some(end) => Err(format!("startup answer: {end}")),
        }
    }

    /// Reads messages up to and with the next ReadyForQuery. Stops early,
    /// saying why, at EOF or when nothing comes within `wait`: for a caller
    /// that reports what a proxy did rather than panic on it.
    pub async fn read_answer(
        s: &mut TcpStream,
        wait: Duration,
    ) -> (Vec<(u8, Vec<u8>)>, Option<&'static str>) {
        let mut out = Vec::new();
        loop {
            // Shorter than read_message's own limit, so it never panics.
            let m = tokio::time::timeout(wait, read_message(s, wait * 2)).await;
            match m {
                Err(_) => return (out, Some("no answer in time")),
                Ok(None) => return (out, Some("connection closed")),
                Ok(Some(m)) => {
                    let z = m.0 == b'Z';
                    out.push(m);
                    if z {
                        return (out, None);
                    }
                }
            }
        }
    }

    /// The values of a DataRow, as text (NULL as `None`).
    pub fn row_values(body: &[u8]) -> Vec<Option<String>> {
        let n = u16::from_be_bytes([body[0], body[1]]);
        let mut at = 2;
        (0..n)
            .map(|_| {
                let len = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
                at += 4;
                let len = usize::try_from(len).ok()?;
                let v = String::from_utf8_lossy(&body[at..at + len]).into_owned();
                at += len;
                Some(v)
            })
            .collect()
    }

    /// A Parse of `sql` as the statement `name` ("" for the unnamed one),
    /// no parameter types.
    pub fn parse(name: &str, sql: &str) -> Vec<u8> {
        let mut body = name.as_bytes().to_vec();
        body.push(0);
        body.extend_from_slice(sql.as_bytes());
        body.extend_from_slice(&[0, 0, 0]);
        message(b'P', &body)
    }

    /// A Bind of the statement `name` to the unnamed portal, no parameters,
    /// results as text; then Execute (no row limit) and Sync.
    pub fn bind_execute_sync(name: &str) -> Vec<u8> {
        let mut body = vec![0u8];
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0]);
        let mut out = message(b'B', &body);
        out.extend(message(b'E', &[0, 0, 0, 0, 0]));
        out.extend(message(b'S', &[]));
        out
    }

    /// A Sync.
    pub fn sync() -> Vec<u8> {
        message(b'S', &[])
    }

    /// A Terminate: the client says goodbye.
    pub fn terminate() -> Vec<u8> {
        message(b'X', &[])
    }
}

/// The rows a statement of the admin console (database `onetrip`) of the
/// proxy listening on `port` answers, as text.
pub async fn admin_at(port: u16, sql: &str) -> Vec<Vec<Option<String>>> {
    let dsn = format!("host=127.0.0.1 port={port} user=postgres dbname=onetrip");
    let c = connect(&dsn).await;
    simple_rows(&c.simple_query(sql).await.expect("admin console"))
}

/// Runs `select 1` through a fresh tokio-postgres session: the proxy still
/// serves new clients.
pub async fn assert_serving(dsn: &str) {
    let c = connect(dsn).await;
    let one: i32 = c.query_one("select 1", &[]).await.expect("select 1").get(0);
    assert_eq!(one, 1);
}
