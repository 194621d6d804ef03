//! Configuration: `config.toml`, then `ONETRIP_*` environment variables, then
//! command-line flags. Every key is documented in the shipped `config.toml`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use serde::{Deserialize, Deserializer, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub listen: Listen,
    pub upstream: Upstream,
    pub tls: Tls,
    pub coalesce: Coalesce,
    pub transactions: Transactions,
    pub pool: PoolConfig,
    pub replicas: Replicas,
    pub planner: Planner,
    pub metrics: Metrics,
    pub admin: Admin,
    pub limits: Limits,
    pub log: Log,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Listen {
    pub address: SocketAddr,
    /// Threads that run sessions, each session on one thread from start to
    /// end (no thread wake-up per message); 0 = one per CPU core.
    pub threads: usize,
}

impl Default for Listen {
    fn default() -> Self {
        Self {
            address: SocketAddr::from(([127, 0, 0, 1], 6432)),
            threads: 0,
        }
    }
}

/// Where sessions are forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAddress {
    /// A private PostgreSQL started by the proxy.
    Embedded,
    /// `host:port`; the host may be a name.
    Tcp(String),
}

impl UpstreamAddress {
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "embedded" {
            return Ok(Self::Embedded);
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(Self::Tcp(s.to_owned()))
            }
            _ => Err(format!("expected \"embedded\" or host:port, got {s:?}")),
        }
    }
}

impl std::fmt::Display for UpstreamAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Embedded => f.write_str("embedded"),
            Self::Tcp(a) => f.write_str(a),
        }
    }
}

impl Serialize for UpstreamAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for UpstreamAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamTls {
    Disable,
    Prefer,
    Require,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Upstream {
    pub address: UpstreamAddress,
    #[serde(with = "duration")]
    pub rtt: Duration,
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
    pub tls: UpstreamTls,
    /// CA certificates (PEM) that sign the upstream's certificate; empty
    /// accepts any certificate (encryption without authentication).
    pub tls_ca_file: Option<PathBuf>,
    /// Data directory for the embedded server; a temporary one when unset.
    pub embedded_data_dir: Option<PathBuf>,
    /// Keep a trust-authenticated upstream connection after its client
    /// leaves, reset, for the next client with the same startup packet.
    pub reuse: bool,
    /// How long a kept connection waits for a client before it is closed.
    #[serde(with = "duration")]
    pub reuse_idle_timeout: Duration,
    /// Most kept connections, over all users and databases.
    pub reuse_max_idle: usize,
    /// A connection older than this is closed when its client leaves,
    /// instead of being kept.
    #[serde(with = "duration")]
    pub reuse_lifetime: Duration,
    /// How long a worker keeps polling, instead of sleeping, for the answer
    /// to a session's upstream round trip; zero: never.
    #[serde(with = "duration")]
    pub busy_poll: Duration,
}

impl Default for Upstream {
    fn default() -> Self {
        Self {
            address: UpstreamAddress::Embedded,
            rtt: Duration::ZERO,
            connect_timeout: Duration::from_secs(5),
            tls: UpstreamTls::Disable,
            tls_ca_file: None,
            embedded_data_dir: None,
            reuse: false,
            reuse_idle_timeout: Duration::from_secs(60),
            reuse_max_idle: 64,
            reuse_lifetime: Duration::from_secs(3600),
            busy_poll: Duration::ZERO,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tls {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Refuse clients that don't negotiate TLS (PostgreSQL's `hostssl`).
    pub require: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Coalesce {
    pub single_read: bool,
    pub write_probe: bool,
    pub max_held_bytes: usize,
    pub read_only_functions: Vec<String>,
}

impl Default for Coalesce {
    fn default() -> Self {
        Self {
            single_read: true,
            write_probe: true,
            max_held_bytes: 1 << 20,
            read_only_functions: Vec::new(),
        }
    }
}

/// Transactions in fewer round trips.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Transactions {
    /// BEGIN is answered here and goes upstream with the next statement.
    pub defer_begin: bool,
    /// Under READ COMMITTED, reads of a transaction that has not reached
    /// the server run without it.
    pub lazy_reads: bool,
}

impl Default for Transactions {
    fn default() -> Self {
        Self {
            defer_begin: true,
            lazy_reads: false,
        }
    }
}

/// Whether a client keeps its server connection for its whole session or
/// only while a transaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    Session,
    Transaction,
}

/// `[pool]`: transaction pooling.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    pub mode: PoolMode,
    /// Server connections per pool (one pool per startup packet) at most.
    pub pool_size: usize,
    /// How long a client waits for a server connection of its pool before
    /// it gets an error.
    #[serde(with = "duration")]
    pub query_wait_timeout: Duration,
    /// Idle server connections each pool keeps open, ready for the next
    /// client (opened in the background once the pool exists).
    pub min_idle: usize,
    /// Named statements a server connection holds at most; past it, the
    /// least recently used is closed.
    pub max_prepared_statements: usize,
    /// Clients' named statements of the same text and parameter types are
    /// one statement on each server connection, under a name of onetrip's.
    pub share_statements: bool,
    /// Users whose server connections need a password: onetrip checks
    /// their clients' passwords itself and opens pooled connections with it.
    pub users: Vec<PoolUser>,
    /// Pools (one per database and user) at most; unused ones are dropped
    /// to make room, and past it a login gets 53300.
    pub max_pools: usize,
    /// Server connections to one database, across its users' pools, at
    /// most (0: no bound but the pools' own), as PgBouncer's.
    pub max_db_connections: usize,
    /// Server connections of one user, across its databases' pools, at
    /// most (0: no bound but the pools' own), as PgBouncer's.
    pub max_user_connections: usize,
    /// The user onetrip logs in as (trust, or its password in `users`) to
    /// look up the passwords of other pooled users with `auth_query`, as
    /// PgBouncer's `auth_user`; unset: none are looked up.
    pub auth_user: Option<String>,
    /// Looks up a user's password, its name as `$1`: the `passwd` column of
    /// the first row, a SCRAM-SHA-256 verifier or an md5 hash.
    pub auth_query: String,
    /// Looked-up passwords kept at most, one per (database, user).
    pub auth_cache_size: usize,
    /// How long a looked-up password is used before it is looked up again.
    #[serde(with = "duration")]
    pub auth_cache_ttl: Duration,
}

impl PoolConfig {
    /// The password pooled connections of `user` are opened with, if set.
    pub fn password_of(&self, user: &str) -> Option<&str> {
        let u = self.users.iter().find(|u| u.name == user)?;
        Some(u.password.as_str())
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolUser {
    pub name: String,
    #[serde(skip_serializing)]
    pub password: String,
}

// By hand: a derived Debug would print the password into logs and panics.
impl std::fmt::Debug for PoolUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolUser")
            .field("name", &self.name)
            .field("password", &"(hidden)")
            .finish()
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            mode: PoolMode::Session,
            pool_size: 20,
            query_wait_timeout: Duration::from_secs(120),
            min_idle: 0,
            max_prepared_statements: 200,
            share_statements: true,
            users: Vec::new(),
            max_pools: 1000,
            max_db_connections: 0,
            max_user_connections: 0,
            auth_user: None,
            // PgBouncer's default.
            auth_query: "SELECT usename, passwd FROM pg_shadow WHERE usename = $1".into(),
            auth_cache_size: 1000,
            auth_cache_ttl: Duration::from_secs(60),
        }
    }
}

/// What a read routed to a replica may miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Consistency {
    /// A client never misses its own writes, and never reads older data
    /// than it has read before.
    ReadYourWrites,
    /// Any replica in step (within `max_lag`) serves any read.
    Eventual,
}

/// Streaming replicas of the primary (`[upstream] address`) that serve
/// pure reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Replicas {
    /// `host:port` of each replica.
    pub addresses: Vec<String>,
    /// With `upstream.address = "embedded"`: streaming replicas of the
    /// private server to start.
    pub embedded: usize,
    pub consistency: Consistency,
    /// A replica this far behind the primary's last write is out.
    #[serde(with = "duration")]
    pub max_lag: Duration,
    /// How often each replica's replay position is asked for.
    #[serde(with = "duration")]
    pub poll_interval: Duration,
    /// Role and database of the connection that watches each replica.
    pub monitor_user: String,
    pub monitor_database: String,
}

impl Default for Replicas {
    fn default() -> Self {
        Self {
            addresses: Vec::new(),
            embedded: 0,
            consistency: Consistency::ReadYourWrites,
            max_lag: Duration::from_secs(1),
            poll_interval: Duration::from_millis(10),
            monitor_user: "postgres".into(),
            monitor_database: "postgres".into(),
        }
    }
}

impl Replicas {
    /// Reads may go to replicas.
    pub fn any(&self) -> bool {
        !self.addresses.is_empty() || self.embedded > 0
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Planner {
    pub cypher_rewrite: bool,
    pub verify: bool,
}

impl Default for Planner {
    fn default() -> Self {
        Self {
            cypher_rewrite: true,
            verify: false,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdminAuth {
    // kebab-case alone would spell it "scram-sha256".
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    Md5,
    Trust,
}

#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminUser {
    pub name: String,
    #[serde(skip_serializing)]
    pub password: String,
    /// May run `RESET STATS`.
    pub reset_stats: bool,
    /// May run `RELOAD` (the configuration read again).
    pub reload: bool,
}

// By hand: a derived Debug would print the password into logs and panics.
impl std::fmt::Debug for AdminUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let password = if self.password.is_empty() {
            "(none)"
        } else {
            "(hidden)"
        };
        f.debug_struct("AdminUser")
            .field("name", &self.name)
            .field("password", &password)
            .field("reset_stats", &self.reset_stats)
            .field("reload", &self.reload)
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Admin {
    pub database: String,
    pub auth: AdminAuth,
    pub users: Vec<AdminUser>,
    /// Start even though `listen.address` is not loopback and an admin
    /// user gets in without a password (`auth = "trust"`).
    pub allow_remote_trust: bool,
}

impl Default for Admin {
    fn default() -> Self {
        Self {
            database: "onetrip".into(),
            auth: AdminAuth::Trust,
            // Reachable only from this machine by default (listen.address
            // is loopback, and a remote listen address refuses a trust
            // admin), so the built-in user may reset the counters.
            users: vec![AdminUser {
                name: "postgres".into(),
                password: String::new(),
                reset_stats: true,
                reload: true,
            }],
            allow_remote_trust: false,
        }
    }
}

impl Admin {
    /// The first user that gets in without a password: every user under
    /// `trust`, one with an empty password otherwise.
    pub fn passwordless_user(&self) -> Option<&AdminUser> {
        self.users
            .iter()
            .find(|u| self.auth == AdminAuth::Trust || u.password.is_empty())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_message_bytes: usize,
    /// Client connections open at once (admin console included); past it
    /// a client gets PostgreSQL's 53300.
    pub max_client_connections: usize,
    /// Most (database, user) rows in the statistics; authenticated
    /// sessions past them count in one "(other)" row.
    pub max_stats_rows: usize,
    #[serde(with = "duration")]
    pub startup_timeout: Duration,
    pub buffer_bytes: usize,
    #[serde(with = "duration")]
    pub shutdown_grace: Duration,
    /// A client idle this long outside a transaction (nothing in flight)
    /// is closed with PostgreSQL's 57P05, as `idle_session_timeout` does;
    /// zero: never.
    #[serde(with = "duration")]
    pub client_idle_timeout: Duration,
    /// How long a client's last words (a FATAL at its end, at shutdown)
    /// may wait for a client that has stopped reading.
    #[serde(with = "duration")]
    pub client_write_timeout: Duration,
    /// TCP keepalive on client and server sockets, so that a peer that
    /// vanished without closing (a host gone, a network cut) is found:
    /// after `tcp_keepalive_idle` without traffic, a probe every
    /// `tcp_keepalive_interval`, dead after `tcp_keepalive_count` unanswered.
    pub tcp_keepalive: bool,
    #[serde(with = "duration")]
    pub tcp_keepalive_idle: Duration,
    #[serde(with = "duration")]
    pub tcp_keepalive_interval: Duration,
    pub tcp_keepalive_count: u32,
}

impl Limits {
    /// Sets TCP keepalive on `socket` as configured (best effort: a socket
    /// that refuses it works without).
    pub fn keepalive<S: std::os::fd::AsFd>(&self, socket: &S) {
        if !self.tcp_keepalive {
            return;
        }
        let ka = socket2::TcpKeepalive::new()
            .with_time(self.tcp_keepalive_idle)
            .with_interval(self.tcp_keepalive_interval)
            .with_retries(self.tcp_keepalive_count);
        let _ = socket2::SockRef::from(socket).set_tcp_keepalive(&ka);
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // PostgreSQL's own ceiling for a message (MaxAllocSize - 1).
            max_message_bytes: 0x3fff_ffff,
            max_client_connections: 5000,
            max_stats_rows: 1000,
            startup_timeout: Duration::from_secs(60),
            buffer_bytes: 256 * 1024,
            shutdown_grace: Duration::from_secs(30),
            client_idle_timeout: Duration::ZERO,
            client_write_timeout: Duration::from_secs(30),
            tcp_keepalive: true,
            tcp_keepalive_idle: Duration::from_secs(60),
            tcp_keepalive_interval: Duration::from_secs(10),
            tcp_keepalive_count: 6,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    pub format: LogFormat,
    pub level: String,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config{}: {message}", origin.as_deref().map(|o| format!(" in {o}")).unwrap_or_default())]
    Invalid {
        origin: Option<String>,
        message: String,
    },
    #[error("invalid config key {key}: {message}")]
    Key { key: String, message: String },
}

impl Config {
    /// Loads `path` (or the defaults when `None`) and applies `ONETRIP_*`
    /// variables from `env` (e.g. `ONETRIP_UPSTREAM_ADDRESS=db:5432`).
    pub fn load(
        path: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut table = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.into(),
                    source,
                })?;
                text.parse::<toml::Table>()
                    .map_err(|e| ConfigError::Invalid {
                        origin: Some(p.display().to_string()),
                        message: e.to_string(),
                    })?
            }
            None => toml::Table::new(),
        };
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("ONETRIP_") else {
                continue;
            };
            if NOT_CONFIG.contains(&rest) || NOT_CONFIG_PREFIXES.iter().any(|p| rest.starts_with(p))
            {
                continue;
            }
            apply_env(&mut table, &name, rest, &value)?;
        }
        let origin = path.map(|p| p.display().to_string());
        let cfg: Config = table
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid {
                origin,
                message: e.to_string(),
            })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Refuses an admin console that anyone who can reach the listen
    /// address could use without a password, unless the configuration
    /// says so (`admin.allow_remote_trust`).
    pub fn check_admin_exposure(&self) -> Result<(), ConfigError> {
        if self.listen.address.ip().is_loopback() || self.admin.allow_remote_trust {
            return Ok(());
        }
        let Some(u) = self.admin.passwordless_user() else {
            return Ok(());
        };
        Err(ConfigError::Key {
            key: "admin.users".into(),
            message: format!(
                "admin user {:?} gets into the admin console without a password \
                 (admin.auth = {:?}) while listen.address {} is not loopback; give every \
                 admin user a password with admin.auth = \"scram-sha-256\", or set \
                 admin.allow_remote_trust = true",
                u.name,
                match self.admin.auth {
                    AdminAuth::Trust => "trust",
                    AdminAuth::Md5 => "md5",
                    AdminAuth::ScramSha256 => "scram-sha-256",
                },
                self.listen.address
            ),
        })
    }

    /// Checks what the types alone can't; `load` calls it, and so must
    /// whoever changes a loaded configuration (command-line flags).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let key = |key: &str, message: &str| ConfigError::Key {
            key: key.into(),
            message: message.into(),
        };
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            return Err(key(
                "tls.cert_file",
                "tls.cert_file and tls.key_file must be set together",
            ));
        }
        if self.tls.require && self.tls.cert_file.is_none() {
            return Err(key(
                "tls.require",
                "needs tls.cert_file and tls.key_file: clients can't use TLS without them",
            ));
        }
        if self.listen.threads > 256 {
            return Err(key(
                "listen.threads",
                "must be at most 256 (0 = one per CPU core)",
            ));
        }
        if self.limits.max_message_bytes < 1024 {
            return Err(key("limits.max_message_bytes", "must be at least 1024"));
        }
        if self.limits.max_client_connections == 0 {
            return Err(key("limits.max_client_connections", "must be at least 1"));
        }
        if self.limits.buffer_bytes < 8192 {
            return Err(key("limits.buffer_bytes", "must be at least 8192"));
        }
        if self.limits.client_write_timeout.is_zero() {
            return Err(key("limits.client_write_timeout", "must be more than zero"));
        }
        if self.pool.pool_size == 0 {
            return Err(key("pool.pool_size", "must be at least 1"));
        }
        if self.pool.max_prepared_statements == 0 {
            return Err(key("pool.max_prepared_statements", "must be at least 1"));
        }
        for (i, u) in self.pool.users.iter().enumerate() {
            if u.name.is_empty() || u.password.is_empty() {
                return Err(key("pool.users", "each needs a name and a password"));
            }
            if self.pool.users[..i].iter().any(|o| o.name == u.name) {
                return Err(key(
                    "pool.users",
                    &format!("\"{}\" is listed twice", u.name),
                ));
            }
        }
        if self.pool.auth_user.as_deref().is_some_and(str::is_empty) {
            return Err(key(
                "pool.auth_user",
                "must not be empty (leave it out to look no passwords up)",
            ));
        }
        if !self.pool.auth_query.contains("$1") {
            return Err(key(
                "pool.auth_query",
                "must use $1, the name of the user whose password it looks up",
            ));
        }
        if self.pool.min_idle > self.pool.pool_size {
            return Err(key("pool.min_idle", "must be at most pool.pool_size"));
        }
        if self.pool.query_wait_timeout.is_zero() {
            return Err(key("pool.query_wait_timeout", "must be more than zero"));
        }
        for a in &self.replicas.addresses {
            if !matches!(UpstreamAddress::parse(a), Ok(UpstreamAddress::Tcp(_))) {
                return Err(key(
                    "replicas.addresses",
                    &format!("{a:?} is not host:port"),
                ));
            }
        }
        if self.replicas.embedded > 0 && self.upstream.address != UpstreamAddress::Embedded {
            return Err(key(
                "replicas.embedded",
                "needs upstream.address = \"embedded\": it starts replicas of the private server",
            ));
        }
        if self.replicas.any() && self.upstream.tls == UpstreamTls::Require {
            return Err(key(
                "replicas.addresses",
                "replica connections are plain TCP, and upstream.tls = \"require\"",
            ));
        }
        if self.replicas.embedded > 16 {
            return Err(key("replicas.embedded", "must be at most 16"));
        }
        if self.replicas.poll_interval.is_zero() {
            return Err(key("replicas.poll_interval", "must be more than zero"));
        }
        if self.replicas.max_lag < self.replicas.poll_interval {
            return Err(key(
                "replicas.max_lag",
                "must be at least replicas.poll_interval",
            ));
        }
        if self.admin.database.is_empty() {
            return Err(key("admin.database", "must not be empty"));
        }
        if let Err(e) = self
            .log
            .level
            .parse::<tracing_subscriber::filter::Targets>()
        {
            return Err(key("log.level", &e.to_string()));
        }
        if self.admin.auth != AdminAuth::Trust
            && let Some(u) = self.admin.users.iter().find(|u| u.password.is_empty())
        {
            return Err(key(
                "admin.users",
                &format!(
                    "user {:?} needs a password unless admin.auth = \"trust\"",
                    u.name
                ),
            ));
        }
        self.check_admin_exposure()
    }
}

/// `ONETRIP_*` variables that are not config keys: the config file, the
/// log filter, and settings of the test harness and CI (Apache AGE's
/// source, the random pipelines).
const NOT_CONFIG: [&str; 4] = ["CONFIG", "LOG", "PG_BINDIR", "PYTHON"];
const NOT_CONFIG_PREFIXES: [&str; 2] = ["AGE_", "PIPELINE_"];

/// `ONETRIP_SECTION_KEY=value` sets `[section] key = value`. The value is read
/// as a TOML value when it parses as one (numbers, booleans, arrays), else as
/// a string.
fn apply_env(
    table: &mut toml::Table,
    name: &str,
    rest: &str,
    value: &str,
) -> Result<(), ConfigError> {
    const SECTIONS: [&str; 12] = [
        "listen",
        "upstream",
        "tls",
        "coalesce",
        "transactions",
        "pool",
        "replicas",
        "planner",
        "metrics",
        "admin",
        "limits",
        "log",
    ];
    let lower = rest.to_ascii_lowercase();
    let Some((section, key)) = SECTIONS.iter().find_map(|s| {
        lower
            .strip_prefix(s)
            .and_then(|k| k.strip_prefix('_'))
            .map(|k| (*s, k))
    }) else {
        return Err(ConfigError::Key {
            key: name.into(),
            message: format!(
                "unknown section; expected ONETRIP_<{}>_<KEY>",
                SECTIONS.join("|").to_uppercase()
            ),
        });
    };
    let parsed = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.into()));
    // A list of addresses, comma-separated as shells and compose files
    // write them.
    let parsed = match (section, key, parsed) {
        ("replicas", "addresses", toml::Value::String(s)) => toml::Value::Array(
            s.split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(|a| toml::Value::String(a.into()))
                .collect(),
        ),
        (_, _, v) => v,
    };
    let entry = table
        .entry(section)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    match entry {
        toml::Value::Table(t) => {
            t.insert(key.into(), parsed);
            Ok(())
        }
        _ => Err(ConfigError::Key {
            key: section.into(),
            message: "must be a table".into(),
        }),
    }
}

/// Durations as strings: `"250us"`, `"1ms"`, `"0.5ms"`, `"5s"`, `"2m"`.
pub mod duration {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn parse(s: &str) -> Result<Duration, String> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("duration {s:?} needs a unit (us, ms, s, m)"))?;
        let (num, unit) = s.split_at(split);
        let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
        let secs = match unit.trim() {
            "us" | "µs" => n / 1e6,
            "ms" => n / 1e3,
            "s" => n,
            "m" | "min" => n * 60.0,
            u => {
                return Err(format!(
                    "unknown duration unit {u:?} in {s:?} (use us, ms, s, m)"
                ));
            }
        };
        let d = Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid duration {s:?}"))?;
        // Far past any real timeout, and well short of what overflows the
        // clock when added to now.
        if d > MAX {
            return Err(format!("duration {s:?} is too long (at most 100 years)"));
        }
        Ok(d)
    }

    /// The longest duration a setting takes.
    pub const MAX: Duration = Duration::from_secs(100 * 365 * 86_400);

    pub fn format(d: &Duration) -> String {
        if d.subsec_nanos() == 0 {
            format!("{}s", d.as_secs())
        } else {
            format!("{}us", d.as_micros())
        }
    }

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir().join(format!("onetrip-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // One file per call: tests run in parallel threads of one process.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("{n}.toml"));
        std::fs::write(&path, text).unwrap();
        Config::load(
            Some(&path),
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    }

    #[test]
    fn shipped_config_parses() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config.toml");
        let cfg = Config::load(Some(&path), []).unwrap();
        assert_eq!(cfg.upstream.address, UpstreamAddress::Embedded);
    }

    #[test]
    fn a_duration_too_long_for_the_clock_is_a_configuration_error() {
        for (text, env) in [
            ("[upstream]\nrtt = \"1000000000000s\"\n", None),
            ("[pool]\nquery_wait_timeout = \"99999999999999m\"\n", None),
            ("", Some(("ONETRIP_UPSTREAM_RTT", "18446744073709551615s"))),
        ] {
            let env: Vec<_> = env.into_iter().collect();
            let err = load_str(text, &env).unwrap_err().to_string();
            assert!(
                err.contains("too long") || err.contains("invalid duration"),
                "{err}"
            );
        }
        let ok = load_str("[upstream]\nrtt = \"36500d\"\n", &[]);
        assert!(ok.is_err(), "no such unit");
        let long = duration::parse("52560000m").unwrap();
        assert_eq!(long, duration::MAX);
        assert!(crate::timers::after(long) > std::time::Instant::now());
    }

    #[test]
    fn unknown_key_is_named() {
        let err = load_str("[upstream]\nadress = \"x:1\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("adress"), "{err}");
    }

    #[test]
    fn env_overrides() {
        let cfg = load_str(
            "",
            &[
                ("ONETRIP_UPSTREAM_ADDRESS", "db:5433"),
                ("ONETRIP_UPSTREAM_RTT", "0.5ms"),
                ("ONETRIP_COALESCE_SINGLE_READ", "false"),
            ],
        )
        .unwrap();
        assert_eq!(cfg.upstream.address, UpstreamAddress::Tcp("db:5433".into()));
        assert_eq!(cfg.upstream.rtt, Duration::from_micros(500));
        assert!(!cfg.coalesce.single_read);
        assert!(load_str("", &[("ONETRIP_LOG", "debug")]).is_ok());
        assert!(load_str("", &[("ONETRIP_AGE_SRC", "/tmp/age")]).is_ok());
        assert!(load_str("", &[("ONETRIP_PIPELINE_SEED", "1")]).is_ok());
        let err = load_str("", &[("ONETRIP_NOPE_X", "1")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("ONETRIP_NOPE_X"), "{err}");
    }

    #[test]
    fn replicas_from_the_file_and_the_environment() {
        let cfg = load_str("", &[]).unwrap();
        assert!(!cfg.replicas.any());
        assert_eq!(cfg.replicas.consistency, Consistency::ReadYourWrites);
        assert_eq!(cfg.replicas.max_lag, Duration::from_secs(1));
        assert_eq!(cfg.replicas.poll_interval, Duration::from_millis(10));
        let file = "[replicas]\naddresses = [\"r1:5432\", \"r2:5433\"]\n\
                    consistency = \"eventual\"\nmax_lag = \"250ms\"\npoll_interval = \"5ms\"\n";
        let cfg = load_str(file, &[]).unwrap();
        assert_eq!(cfg.replicas.addresses, ["r1:5432", "r2:5433"]);
        assert_eq!(cfg.replicas.consistency, Consistency::Eventual);
        assert_eq!(cfg.replicas.max_lag, Duration::from_millis(250));
        let cfg = load_str(
            "",
            &[
                ("ONETRIP_REPLICAS_ADDRESSES", "a:1, b:2"),
                ("ONETRIP_REPLICAS_CONSISTENCY", "read-your-writes"),
            ],
        )
        .unwrap();
        assert_eq!(cfg.replicas.addresses, ["a:1", "b:2"]);
        let one = load_str("", &[("ONETRIP_REPLICAS_ADDRESSES", "a:1")]).unwrap();
        assert_eq!(one.replicas.addresses, ["a:1"]);
        let e = load_str("[replicas]\naddresses = [\"nowhere\"]\n", &[]).unwrap_err();
        assert!(e.to_string().contains("replicas.addresses"), "{e}");
        let e = load_str(
            "[upstream]\naddress = \"db:5432\"\n[replicas]\nembedded = 1\n",
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("replicas.embedded"), "{e}");
        let e = load_str("[replicas]\nconsistency = \"strong\"\n", &[]).unwrap_err();
        assert!(e.to_string().contains("strong"), "{e}");
        let e = load_str(
            "[upstream]\ntls = \"require\"\n[replicas]\naddresses = [\"r:1\"]\n",
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("plain TCP"), "{e}");
        let e = load_str("[replicas]\npoll_interval = \"0ms\"\n", &[]).unwrap_err();
        assert!(e.to_string().contains("replicas.poll_interval"), "{e}");
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(load_str("[upstream]\nrtt = \"5 parsecs\"\n", &[]).is_err());
        assert!(load_str("[upstream]\naddress = \"nowhere\"\n", &[]).is_err());
        let err = load_str("[log]\nlevel = \"a=b=c\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("log.level"), "{err}");
        assert!(load_str("[log]\nlevel = \"warn,onetrip=debug\"\n", &[]).is_ok());
        assert!(
            load_str("[tls]\ncert_file = \"a.pem\"\n", &[])
                .unwrap_err()
                .to_string()
                .contains("tls.cert_file")
        );
        let err = load_str("[tls]\nrequire = true\n", &[]).unwrap_err();
        assert!(err.to_string().contains("tls.require"), "{err}");
    }

    #[test]
    fn auth_query_keys_from_the_file_and_the_environment() {
        let cfg = load_str("", &[]).unwrap();
        assert_eq!(cfg.pool.auth_user, None);
        assert_eq!(
            cfg.pool.auth_query,
            "SELECT usename, passwd FROM pg_shadow WHERE usename = $1"
        );
        assert_eq!(cfg.pool.auth_cache_size, 1000);
        assert_eq!(cfg.pool.auth_cache_ttl, Duration::from_secs(60));
        let file = "[pool]\nauth_user = \"pgbouncer\"\n\
                    auth_query = \"SELECT * FROM pgbouncer.get_auth($1)\"\n\
                    auth_cache_size = 10\nauth_cache_ttl = \"5s\"\n";
        let cfg = load_str(file, &[]).unwrap();
        assert_eq!(cfg.pool.auth_user.as_deref(), Some("pgbouncer"));
        assert_eq!(cfg.pool.auth_query, "SELECT * FROM pgbouncer.get_auth($1)");
        assert_eq!(cfg.pool.auth_cache_size, 10);
        assert_eq!(cfg.pool.auth_cache_ttl, Duration::from_secs(5));
        let cfg = load_str(
            file,
            &[
                ("ONETRIP_POOL_AUTH_USER", "lookup"),
                (
                    "ONETRIP_POOL_AUTH_QUERY",
                    "SELECT usename, passwd FROM pg_shadow WHERE usename = $1",
                ),
                ("ONETRIP_POOL_AUTH_CACHE_SIZE", "0"),
                ("ONETRIP_POOL_AUTH_CACHE_TTL", "250ms"),
            ],
        )
        .unwrap();
        assert_eq!(cfg.pool.auth_user.as_deref(), Some("lookup"));
        assert!(cfg.pool.auth_query.starts_with("SELECT usename, passwd"));
        assert_eq!(cfg.pool.auth_cache_size, 0);
        assert_eq!(cfg.pool.auth_cache_ttl, Duration::from_millis(250));
    }

    #[test]
    fn bad_auth_query_keys_are_named() {
        let err = |text: &str, env: &[(&str, &str)]| load_str(text, env).unwrap_err().to_string();
        let e = err("[pool]\nauth_user = \"\"\n", &[]);
        assert!(e.contains("pool.auth_user"), "{e}");
        let e = err(
            "",
            &[("ONETRIP_POOL_AUTH_QUERY", "SELECT passwd FROM pg_shadow")],
        );
        assert!(e.contains("pool.auth_query") && e.contains("$1"), "{e}");
        let e = err("[pool]\nauth_cache_ttl = \"soon\"\n", &[]);
        assert!(e.contains("auth_cache_ttl"), "{e}");
        let e = err("[pool]\nauth_cache_size = -1\n", &[]);
        assert!(e.contains("auth_cache_size"), "{e}");
    }

    #[test]
    fn a_remote_listen_address_refuses_an_admin_without_a_password() {
        let remote = [("ONETRIP_LISTEN_ADDRESS", "0.0.0.0:6432")];
        let err = load_str("", &remote).unwrap_err().to_string();
        assert!(err.contains("\"postgres\""), "names the user: {err}");
        assert!(err.contains("admin.allow_remote_trust"), "{err}");
        let allowed = [
            ("ONETRIP_LISTEN_ADDRESS", "0.0.0.0:6432"),
            ("ONETRIP_ADMIN_ALLOW_REMOTE_TRUST", "true"),
        ];
        assert!(load_str("", &allowed).is_ok());
        let with_passwords = "[admin]\nauth = \"scram-sha-256\"\n\
                              users = [{ name = \"ops\", password = \"pw\" }]\n";
        let r = load_str(with_passwords, &remote);
        assert!(r.is_ok(), "{r:?}");
        assert!(load_str("[listen]\naddress = \"[::1]:6432\"\n", &[]).is_ok());
    }

    #[test]
    fn admin_users_reset_stats_only_when_marked() {
        assert!(
            Config::default().admin.users[0].reset_stats,
            "built-in user"
        );
        let cfg = load_str("[admin]\nusers = [{ name = \"ops\" }]\n", &[]).unwrap();
        assert!(!cfg.admin.users[0].reset_stats);
    }

    #[test]
    fn debug_hides_admin_passwords() {
        let mut cfg = Config::default();
        cfg.admin.users[0].password = "hunter2".into();
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("(hidden)"), "{shown}");
    }
}
