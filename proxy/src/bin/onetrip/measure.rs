//! `onetrip measure -- <program>`: runs a program against a private proxy
//! and reports the round trips it cost.
//!
//! The report goes to stderr (the program's stdout stays clean) unless
//! `--json` asks for one JSON object on stdout.

use std::{
    collections::BTreeMap,
    ffi::OsString,
    fmt::Write as _,
    process::ExitCode,
    time::{Duration, Instant},
};

use onetrip::{Config, Proxy, stats::Snapshot};
use serde::Serialize;

/// How long to wait after the program ends for its sessions to close, so
/// their counts (and statement fingerprints) land.
const SETTLE: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("cannot start the proxy: {0}")]
    Start(#[from] onetrip::StartError),
    #[error("{program}: command not found")]
    NotFound { program: String },
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
}

impl MeasureError {
    /// Exit status for the error, as a shell would give it.
    pub fn exit_code(&self) -> u8 {
        match self {
            MeasureError::NotFound { .. } => 127,
            MeasureError::Spawn { .. } => 126,
            MeasureError::Start(_) => 2,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopStatement {
    pub statement: String,
    pub statements: u64,
    pub client_round_trips: u64,
    pub upstream_round_trips: u64,
}

/// What `measure` reports; also its `--json` object.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub client_round_trips: u64,
    pub upstream_round_trips: u64,
    pub round_trips_saved: i64,
    pub handshake_round_trips: u64,
    pub statements: u64,
    pub round_trips_per_statement: f64,
    pub transactions: u64,
    pub sessions: u64,
    pub coalesced_batches: u64,
    /// Round trips saved by what saved them (see `Snapshot::saved_by_kind`).
    pub saved_by_kind: BTreeMap<&'static str, u64>,
    pub lazy_reads: u64,
    pub probes_passed: u64,
    pub probes_failed: u64,
    /// Reads served by replicas, reads kept on the primary for freshness,
    /// reads a replica refused (`[replicas]`).
    pub replica_reads: u64,
    pub fresh_reads: u64,
    pub replica_reruns: u64,
    pub bytes_from_client: u64,
    pub bytes_to_client: u64,
    pub bytes_to_upstream: u64,
    pub bytes_from_upstream: u64,
    pub errors: u64,
    pub wall_seconds: f64,
    pub exit_code: i32,
    pub top_statements: Vec<TopStatement>,
}

impl Report {
    fn new(t: &Snapshot, top: Vec<TopStatement>, wall: Duration, exit_code: i32) -> Self {
        Self {
            client_round_trips: t.client_round_trips,
            upstream_round_trips: t.upstream_round_trips,
            round_trips_saved: t.round_trips_saved(),
            handshake_round_trips: t.handshake_round_trips,
            statements: t.statements,
            round_trips_per_statement: if t.statements == 0 {
                0.0
            } else {
                t.client_round_trips as f64 / t.statements as f64
            },
            transactions: t.transactions,
            sessions: t.sessions,
            coalesced_batches: t.coalesced_batches,
            saved_by_kind: t.saved_by_kind().into_iter().collect(),
            lazy_reads: t.lazy_reads,
            probes_passed: t.probes_passed,
            probes_failed: t.probes_failed,
            replica_reads: t.replica_reads,
            fresh_reads: t.fresh_reads,
            replica_reruns: t.replica_reruns,
            bytes_from_client: t.bytes_from_client,
            bytes_to_client: t.bytes_to_client,
            bytes_to_upstream: t.bytes_to_upstream,
            bytes_from_upstream: t.bytes_from_upstream,
            errors: t.errors,
            wall_seconds: wall.as_secs_f64(),
            exit_code,
            top_statements: top,
        }
    }

    /// The readable table.
    pub fn table(&self, command: &str) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "onetrip measure: {command} (exit code {}, {:.3} s)",
            self.exit_code, self.wall_seconds
        );
        let saved = |k: &str| self.saved_by_kind.get(k).copied().unwrap_or(0);
        let rows: [(&str, String); 16] = [
            ("client round trips", self.client_round_trips.to_string()),
            (
                "upstream round trips",
                self.upstream_round_trips.to_string(),
            ),
            ("round trips saved", self.round_trips_saved.to_string()),
            (
                "handshake round trips",
                self.handshake_round_trips.to_string(),
            ),
            ("statements", self.statements.to_string()),
            (
                "round trips per statement",
                format!("{:.2}", self.round_trips_per_statement),
            ),
            ("coalesced batches", self.coalesced_batches.to_string()),
            ("BEGINs ridden along", saved("deferred_begin").to_string()),
            (
                "ends answered by onetrip",
                format!("{} ({} lazy reads)", saved("local_end"), self.lazy_reads),
            ),
            (
                "Closes answered by onetrip",
                saved("local_close").to_string(),
            ),
            (
                "write probes passed/failed",
                format!("{}/{}", self.probes_passed, self.probes_failed),
            ),
            (
                "reads on replicas",
                format!(
                    "{} ({} kept on the primary for freshness, {} run again there)",
                    self.replica_reads, self.fresh_reads, self.replica_reruns
                ),
            ),
            ("sessions", self.sessions.to_string()),
            ("bytes from client", self.bytes_from_client.to_string()),
            ("bytes to client", self.bytes_to_client.to_string()),
            ("wall time", format!("{:.3} s", self.wall_seconds)),
        ];
        for (k, v) in rows {
            let _ = writeln!(o, "  {k:<28}{v:>12}");
        }
        if !self.top_statements.is_empty() {
            let _ = writeln!(o, "\n  top statements by client round trips");
            let _ = writeln!(
                o,
                "  {:>10} {:>10} {:>10}  statement",
                "client", "upstream", "count"
            );
            for t in &self.top_statements {
                let _ = writeln!(
                    o,
                    "  {:>10} {:>10} {:>10}  {}",
                    t.client_round_trips,
                    t.upstream_round_trips,
                    t.statements,
                    one_line(&t.statement, 100)
                );
            }
        }
        o
    }
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        flat.chars().take(max - 1).chain(['…']).collect()
    }
}

/// `postgresql://` URL component, percent-encoded.
fn url_part(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs `command` (the program, then its arguments) against a private proxy
/// and prints the report; the exit status is the program's.
pub async fn run(
    mut cfg: Config,
    rtt: Option<Duration>,
    json: bool,
    mut command: Vec<OsString>,
) -> ExitCode {
    if let Some(rtt) = rtt {
        cfg.upstream.rtt = rtt;
    }
    let shown = command
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let program = command.remove(0);
    // Ctrl-C reaches the program too (same process group); outlive it so
    // the report still prints.
    tokio::spawn(async { while tokio::signal::ctrl_c().await.is_ok() {} });
    match measure(cfg, program, command).await {
        Ok(report) => {
            if json {
                match serde_json::to_string(&report) {
                    Ok(j) => println!("{j}"),
                    Err(e) => eprintln!("onetrip measure: cannot encode the report: {e}"),
                }
            } else {
                eprint!("{}", report.table(&shown));
            }
            ExitCode::from(u8::try_from(report.exit_code).unwrap_or(1))
        }
        Err(e) => {
            eprintln!("onetrip measure: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Starts a proxy on a free loopback port in front of `config`'s upstream,
/// runs `program args` pointed at it, and reports. `config.listen` is
/// replaced and the metrics endpoint is off.
async fn measure(
    mut config: Config,
    program: OsString,
    args: Vec<OsString>,
) -> Result<Report, MeasureError> {
    config.listen.address = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    config.metrics.listen = None;
    let proxy = Proxy::start(config).await?;
    let result = run_program(&proxy, &program, &args).await;
    let stats = proxy.stats();
    // Sessions close a moment after the program exits (or never, if it left
    // a child behind): wait a little, then report what has landed.
    let settle = Instant::now();
    while !stats.sessions().is_empty() && settle.elapsed() < SETTLE {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let total = stats.total();
    let top = stats
        .top_statements(10)
        .into_iter()
        .map(|(statement, c)| TopStatement {
            statement,
            statements: c.statements,
            client_round_trips: c.client_round_trips,
            upstream_round_trips: c.upstream_round_trips,
        })
        .collect();
    proxy.shutdown(Duration::from_secs(1)).await;
    let (wall, code) = result?;
    Ok(Report::new(&total, top, wall, code))
}

async fn run_program(
    proxy: &Proxy,
    program: &OsString,
    args: &[OsString],
) -> Result<(Duration, i32), MeasureError> {
    let port = proxy.local_addr().port();
    let env = |k: &str, default: &str| {
        std::env::var(k)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or(default.into())
    };
    let user = env("PGUSER", "postgres");
    let database = env("PGDATABASE", "postgres");
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", port.to_string())
        .env("PGUSER", &user)
        .env("PGDATABASE", &database)
        .env(
            "DATABASE_URL",
            format!(
                "postgresql://{}@127.0.0.1:{port}/{}",
                url_part(&user),
                url_part(&database)
            ),
        )
        // Either would send libpq somewhere else than the proxy.
        .env_remove("PGHOSTADDR")
        .env_remove("PGSERVICE");
    let name = program.to_string_lossy().into_owned();
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => MeasureError::NotFound {
            program: name.clone(),
        },
        _ => MeasureError::Spawn {
            program: name.clone(),
            source,
        },
    })?;
    // Waited for on the blocking pool: tokio's own child processes would
    // bring its process driver, which takes a lock shared by every worker
    // each time one goes to sleep, into the proxy's forwarding path.
    let waited = tokio::task::spawn_blocking(move || child.wait()).await;
    let status = waited
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        .map_err(|source| MeasureError::Spawn {
            program: name,
            source,
        })?;
    let wall = started.elapsed();
    let code = status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + status.signal().unwrap_or(0)
    });
    Ok((wall, code))
}
