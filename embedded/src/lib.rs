//! A private PostgreSQL server, started from the machine's own binaries:
//! the proxy's `upstream = "embedded"` mode and the test harness.
//!
//! PostgreSQL refuses to run as root, so when we are root the server runs as
//! the `postgres` system user, in a data directory that user owns.

use std::{
    ffi::OsStr,
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "PostgreSQL server binaries (initdb, postgres) not found; install them with \
         `apt-get install postgresql` (Debian/Ubuntu) or put their directory on PATH"
    )]
    NotInstalled,
    #[error(
        "running as root, and there is no `postgres` system user to run PostgreSQL as; create one (`useradd -r postgres`) or run onetrip as another user"
    )]
    NoServerUser,
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("embedded PostgreSQL did not accept connections within {0:?}; its log: {1}")]
    NotReady(Duration, String),
    #[error("I/O error preparing embedded PostgreSQL: {0}")]
    Io(#[from] std::io::Error),
}

/// Options for a private server.
#[derive(Debug, Clone, Default)]
pub struct PgOptions {
    /// Data directory; a fresh temporary one when `None`. Only a temporary
    /// one runs without fsync and full-page writes.
    pub data_dir: Option<PathBuf>,
    /// Extra `postgresql.conf` lines.
    pub conf: Vec<String>,
    /// Replaces the default `pg_hba.conf` (trust on loopback).
    pub hba: Option<String>,
    /// Port to listen on; a free one when `None`.
    pub port: Option<u16>,
    /// Where a fresh temporary data directory goes; the system's temporary
    /// directory when `None`.
    pub temp_parent: Option<PathBuf>,
    /// A data directory [`init_template`] made, copied into a fresh data
    /// directory instead of running `initdb`: much quicker where many
    /// servers start (the tests).
    pub template: Option<PathBuf>,
}

/// A running private PostgreSQL; stopped (fast shutdown) when dropped.
#[derive(Debug)]
pub struct PgServer {
    child: Option<Child>,
    port: u16,
    data_dir: PathBuf,
    bin_dir: PathBuf,
    run_as: Option<(u32, u32)>,
    _temp: Option<tempfile::TempDir>,
}

impl PgServer {
    pub fn start(opts: PgOptions) -> Result<Self, EmbeddedError> {
        let bin_dir = find_bin_dir().ok_or(EmbeddedError::NotInstalled)?;
        let run_as = server_user()?;
        let (temp, data_dir) = data_dir_for(&opts, run_as)?;
        if !data_dir.join("PG_VERSION").exists() {
            match &opts.template {
                Some(template) => copy_tree(template, &data_dir, run_as)?,
                None => {
                    std::fs::create_dir_all(&data_dir)?;
                    chown(&data_dir, run_as)?;
                    initdb(&bin_dir, &data_dir, run_as, temp.is_none())?;
                }
            }
        }
        Self::launch(&opts, bin_dir, run_as, temp, data_dir)
    }

    /// Starts a streaming replica of this server: a base backup of it
    /// (`pg_basebackup -R`, which writes the connection back to it and
    /// `standby.signal`) in a fresh temporary data directory, started as a
    /// hot standby. `opts.conf` may add lines (`recovery_min_apply_delay`
    /// to make it lag); `opts.data_dir` and `opts.template` are not used.
    pub fn start_replica(&self, opts: PgOptions) -> Result<Self, EmbeddedError> {
        let opts = PgOptions {
            data_dir: None,
            template: None,
            ..opts
        };
        let (temp, data_dir) = data_dir_for(&opts, self.run_as)?;
        let out = command(&self.bin_dir, "pg_basebackup", self.run_as)
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args([OsStr::new("-D"), data_dir.as_os_str()])
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .output()?;
        if !out.status.success() {
            return Err(EmbeddedError::Command {
                what: "pg_basebackup".into(),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        let mut opts = opts;
        opts.conf.insert(0, "hot_standby = on".into());
        Self::launch(&opts, self.bin_dir.clone(), self.run_as, temp, data_dir)
    }

    /// Writes the access rules and settings into `data_dir`, which holds a
    /// cluster, and starts the server there.
    fn launch(
        opts: &PgOptions,
        bin_dir: PathBuf,
        run_as: Option<(u32, u32)>,
        temp: Option<tempfile::TempDir>,
        data_dir: PathBuf,
    ) -> Result<Self, EmbeddedError> {
        // Replication on loopback too: `start_replica` takes its base
        // backup and streams over it.
        let hba = opts.hba.clone().unwrap_or_else(|| {
            "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n\
             host replication all 127.0.0.1/32 trust\n"
                .into()
        });
        write_owned(&data_dir.join("pg_hba.conf"), &hba, run_as)?;
        let mut conf = String::from(
            "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\nmax_connections = 200\n",
        );
        // Speed over durability only where nothing outlives the server: a
        // crash with fsync or full_page_writes off can corrupt the cluster,
        // which a data directory kept across runs must survive. A kept
        // one gets PostgreSQL's durable defaults (this file is rewritten
        // at every start, so one first run without them is set right).
        if temp.is_some() {
            conf.push_str("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n");
        }
        for line in &opts.conf {
            conf.push_str(line);
            conf.push('\n');
        }
        write_owned(&data_dir.join("onetrip.conf"), &conf, run_as)?;
        let main_conf = data_dir.join("postgresql.conf");
        let text = std::fs::read_to_string(&main_conf)?;
        if !text.contains("include_if_exists = 'onetrip.conf'") {
            write_owned(
                &main_conf,
                &format!("{text}\ninclude_if_exists = 'onetrip.conf'\n"),
                run_as,
            )?;
        }
        let port = match opts.port {
            Some(p) => p,
            None => free_port()?,
        };
        let log = data_dir.join("server.log");
        let log_file = std::fs::File::create(&log)?;
        chown(&log, run_as)?;
        let child = command(&bin_dir, "postgres", run_as)
            .args([OsStr::new("-D"), data_dir.as_os_str()])
            .args(["-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()?;
        let mut server = Self {
            child: Some(child),
            port,
            data_dir,
            bin_dir,
            run_as,
            _temp: temp,
        };
        server.wait_ready(Duration::from_secs(60))?;
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// A libpq connection string for the superuser.
    pub fn dsn(&self, dbname: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={dbname}",
            self.port
        )
    }

    fn wait_ready(&mut self, limit: Duration) -> Result<(), EmbeddedError> {
        let start = Instant::now();
        let log = || std::fs::read_to_string(self.data_dir.join("server.log")).unwrap_or_default();
        while start.elapsed() < limit {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(EmbeddedError::Command {
                    what: format!("postgres ({status})"),
                    detail: log(),
                });
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok() {
                let ok = command(&self.bin_dir, "pg_isready", None)
                    .args([
                        "-h",
                        "127.0.0.1",
                        "-p",
                        &self.port.to_string(),
                        "-U",
                        "postgres",
                        "-d",
                        "postgres",
                    ])
                    .stdout(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    // Without pg_isready a TCP connect is the best sign we have.
                    .unwrap_or(true);
                if ok {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(EmbeddedError::NotReady(limit, log()))
    }

    /// Stops the server (fast shutdown) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data directory.
    pub fn restart(&mut self) -> Result<(), EmbeddedError> {
        self.stop();
        let log_path = self.data_dir.join("server.log");
        let log_file = std::fs::OpenOptions::new().append(true).open(&log_path)?;
        let child = command(&self.bin_dir, "postgres", self.run_as)
            .args([OsStr::new("-D"), self.data_dir.as_os_str()])
            .args(["-p", &self.port.to_string()])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()?;
        self.child = Some(child);
        self.wait_ready(Duration::from_secs(60))
    }

    /// Runs a client program from the server's bin dir (psql, pgbench, ...).
    pub fn tool(&self, name: &str) -> Command {
        command(&self.bin_dir, name, None)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fresh temporary data directory (owned by the server user, the
/// directory itself not made yet) unless `opts` names one.
fn data_dir_for(
    opts: &PgOptions,
    run_as: Option<(u32, u32)>,
) -> Result<(Option<tempfile::TempDir>, PathBuf), EmbeddedError> {
    Ok(match &opts.data_dir {
        Some(d) => (None, d.clone()),
        None => {
            let mut b = tempfile::Builder::new();
            b.prefix("onetrip-pg-");
            let t = match &opts.temp_parent {
                Some(parent) => b.tempdir_in(parent)?,
                None => b.tempdir()?,
            };
            chown(t.path(), run_as)?;
            let d = t.path().join("data");
            (Some(t), d)
        }
    })
}

/// Runs `initdb` into `data_dir` (which exists, owned by the server user);
/// without `sync` it does not wait for the files to reach the disk.
fn initdb(
    bin_dir: &Path,
    data_dir: &Path,
    run_as: Option<(u32, u32)>,
    sync: bool,
) -> Result<(), EmbeddedError> {
    let mut initdb = command(bin_dir, "initdb", run_as);
    initdb
        .args([OsStr::new("-D"), data_dir.as_os_str()])
        .args(["-U", "postgres", "-A", "trust", "-E", "UTF8"])
        .arg("--locale=C.UTF-8");
    if !sync {
        initdb.arg("--no-sync");
    }
    let out = initdb.output()?;
    if !out.status.success() {
        return Err(EmbeddedError::Command {
            what: "initdb".into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(())
}

/// Makes `dir` (which must not exist) a fresh data directory, as a
/// temporary server's, for [`PgOptions::template`]. Meant for throwaway
/// servers: it is not synced to disk.
pub fn init_template(dir: &Path) -> Result<(), EmbeddedError> {
    let bin_dir = find_bin_dir().ok_or(EmbeddedError::NotInstalled)?;
    let run_as = server_user()?;
    std::fs::create_dir(dir)?;
    chown(dir, run_as)?;
    initdb(&bin_dir, dir, run_as, false)
}

/// Copies the data directory `from` to `to` (made if missing) with
/// each entry's permissions, owned by the server user.
fn copy_tree(from: &Path, to: &Path, run_as: Option<(u32, u32)>) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())?;
    chown(to, run_as)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &target, run_as)?;
        } else {
            // Copies the permissions too.
            std::fs::copy(e.path(), &target)?;
            chown(&target, run_as)?;
        }
    }
    Ok(())
}

fn command(bin_dir: &Path, name: &str, run_as: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(bin_dir.join(name));
    if let Some((uid, gid)) = run_as {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
        // The server user's own HOME, not root's.
        cmd.env("HOME", "/tmp");
    }
    cmd
}

fn chown(path: &Path, run_as: Option<(u32, u32)>) -> std::io::Result<()> {
    match run_as {
        Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid)),
        None => Ok(()),
    }
}

fn write_owned(path: &Path, text: &str, run_as: Option<(u32, u32)>) -> std::io::Result<()> {
    std::fs::write(path, text)?;
    chown(path, run_as)
}

/// A port that was free a moment ago (the server binds it right after).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// (uid, gid) to run the server as: `postgres` when we are root.
fn server_user() -> Result<Option<(u32, u32)>, EmbeddedError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = c"postgres";
    // SAFETY: getpwnam reads a static NUL-terminated name; the result is read
    // at once, before any other call could overwrite its static buffer.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(EmbeddedError::NoServerUser);
    }
    // SAFETY: pw is non-null and points to a valid passwd record.
    Ok(Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) }))
}

/// The directory holding `initdb` and `postgres`: `ONETRIP_PG_BINDIR`, then
/// Debian's versioned directories (the newest), then `pg_config --bindir`,
/// then PATH.
pub fn find_bin_dir() -> Option<PathBuf> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Ok(d) = std::env::var("ONETRIP_PG_BINDIR") {
        let d = PathBuf::from(d);
        if has(&d) {
            return Some(d);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, d)| has(d))
        .collect();
    versions.sort();
    if let Some((_, d)) = versions.pop() {
        return Some(d);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let d = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has(&d) {
            return Some(d);
        }
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|d| has(d))
}
