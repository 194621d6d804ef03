//! The `onetrip` command line: a thin layer over the library.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

use crate::config::{Config, LogFormat, UpstreamAddress};

#[derive(Debug, Parser)]
#[command(
    name = "onetrip",
    version,
    about = "A Postgres-wire proxy that counts and saves round trips"
)]
pub struct Cli {
    /// Configuration file (TOML); defaults apply to every key it leaves out.
    #[arg(long, short = 'c', global = true, env = "ONETRIP_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:6432.
    #[arg(long, global = true)]
    pub listen: Option<std::net::SocketAddr>,
    /// Upstream PostgreSQL as host:port, or "embedded".
    #[arg(long, global = true)]
    pub upstream: Option<String>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy (the default).
    Run,
    /// Run a program against a private proxy and report its round trips.
    ///
    /// The program gets PGHOST, PGPORT and DATABASE_URL pointing at the proxy
    /// (and PGUSER / PGDATABASE when unset). The report goes to stderr so the
    /// program's stdout stays clean; `--json` prints one JSON object to stdout
    /// instead. The exit code is the program's.
    #[command(after_help = "Example: onetrip measure --rtt 1ms -- python3 app.py")]
    Measure {
        /// Delay added to every upstream round trip, e.g. 1ms ([upstream] rtt).
        #[arg(long, value_parser = crate::config::duration::parse)]
        rtt: Option<std::time::Duration>,
        /// Print the report as one JSON object on stdout.
        #[arg(long)]
        json: bool,
        /// The program and its arguments, after `--`.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "PROGRAM"
        )]
        command: Vec<std::ffi::OsString>,
    },
    /// Convert agtype values, one per line from stdin to stdout: `normalize`
    /// prints AGE's canonical text, `encode` the container bytes as hex,
    /// `decode` hex back to text. A bad line prints `error: line N: ...`;
    /// the exit status is non-zero if any line failed.
    Agtype {
        #[arg(value_enum)]
        mode: AgtypeMode,
    },
    /// Print the SQL a statement's cypher() calls compile to (exit 0), or
    /// why the planner leaves it to AGE, on stderr (exit 3). No server:
    /// labels are assumed to exist unless a catalog is given.
    PlanCypher {
        /// The SQL statement, e.g. "select * from cypher('g', $$ MATCH (n) RETURN n $$) as (n agtype)".
        sql: String,
        /// AGE catalog rows, as `psql -AtF $'\t' -c "<Catalog query>"` prints them.
        #[arg(long, value_name = "FILE")]
        catalog: Option<PathBuf>,
        /// A graph and its oid, e.g. --graph g=16384 (repeatable).
        #[arg(long, value_name = "NAME=OID")]
        graph: Vec<String>,
        /// A label of a graph given with --graph, e.g. --label g.Person=v (repeatable).
        #[arg(long, value_name = "GRAPH.LABEL=v|e")]
        label: Vec<String>,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum AgtypeMode {
    Normalize,
    Encode,
    Decode,
}

impl From<AgtypeMode> for agtype::lines::LineMode {
    fn from(m: AgtypeMode) -> Self {
        match m {
            AgtypeMode::Normalize => Self::Normalize,
            AgtypeMode::Encode => Self::Encode,
            AgtypeMode::Decode => Self::Decode,
        }
    }
}

/// Loads the config file, `ONETRIP_*` variables and flags, in that order.
pub fn load_config(cli: &Cli) -> Result<Config, String> {
    let env = std::env::vars();
    let mut cfg = Config::load(cli.config.as_deref(), env).map_err(|e| e.to_string())?;
    if let Some(l) = cli.listen {
        cfg.listen.address = l;
    }
    if let Some(u) = &cli.upstream {
        cfg.upstream.address =
            UpstreamAddress::parse(u).map_err(|e| format!("invalid --upstream: {e}"))?;
    }
    log_targets(&cfg)?;
    Ok(cfg)
}

/// The log filter: `ONETRIP_LOG` if set, else `[log] level` (which
/// `Config::load` has checked).
fn log_targets(cfg: &Config) -> Result<tracing_subscriber::filter::Targets, String> {
    let (spec, what) = match std::env::var("ONETRIP_LOG") {
        Ok(spec) => (spec, "ONETRIP_LOG"),
        Err(_) => (cfg.log.level.clone(), "log.level"),
    };
    spec.parse()
        .map_err(|e| format!("invalid {what} {spec:?}: {e}"))
}

pub fn init_logging(cfg: &Config) {
    use tracing_subscriber::{
        Layer, filter::Targets, layer::SubscriberExt, util::SubscriberInitExt,
    };
    // Targets rather than EnvFilter: EnvFilter takes a lock shared by all
    // sessions each time a session's span is entered, that is on every poll.
    // Checked by `load_config`; the fallback only serves other callers.
    let targets =
        log_targets(cfg).unwrap_or_else(|_| Targets::new().with_default(tracing::Level::INFO));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match cfg.log.format {
        LogFormat::Json => fmt.json().boxed(),
        LogFormat::Text => fmt.boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(targets)
        .with(fmt)
        .try_init();
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Offline tools need no configuration, runtime or logging.
    match &cli.command {
        Some(Command::Agtype { mode }) => return crate::tools::agtype_lines((*mode).into()),
        Some(Command::PlanCypher {
            sql,
            catalog,
            graph,
            label,
        }) => {
            return crate::tools::plan(sql, catalog.as_deref(), graph, label);
        }
        _ => {}
    }
    let mut cfg = match load_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("onetrip: {e}");
            return ExitCode::from(2);
        }
    };
    let command = cli.command.unwrap_or(Command::Run);
    if matches!(command, Command::Measure { .. }) && std::env::var_os("ONETRIP_LOG").is_none() {
        // Per-session log lines would bury the report.
        cfg.log.level = "warn".into();
    }
    init_logging(&cfg);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("onetrip: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match command {
        Command::Run => match crate::workers(cfg.listen.threads) {
            Ok(workers) => rt.block_on(run(cfg, workers.handles())),
            Err(e) => {
                eprintln!("onetrip: cannot start worker threads: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Measure { rtt, json, command } => rt.block_on(measure(cfg, rtt, json, command)),
        Command::Agtype { .. } | Command::PlanCypher { .. } => ExitCode::FAILURE,
    }
}

async fn measure(
    mut cfg: Config,
    rtt: Option<std::time::Duration>,
    json: bool,
    mut command: Vec<std::ffi::OsString>,
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
    match crate::measure::run(cfg, program, command).await {
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

async fn run(cfg: Config, workers: Vec<tokio::runtime::Handle>) -> ExitCode {
    let grace = cfg.limits.shutdown_grace;
    let proxy = match crate::Proxy::start_on(cfg, workers).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("onetrip: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(pg) = proxy.embedded() {
        tracing::info!(port = pg.port(), data_dir = %pg.data_dir().display(), "embedded PostgreSQL running");
    }
    let addr = proxy.local_addr();
    eprintln!(
        "onetrip listening on {addr}; connect with: psql -h {} -p {} -U postgres postgres",
        addr.ip(),
        addr.port()
    );
    wait_for_signal().await;
    tracing::info!("shutdown requested");
    proxy.shutdown(grace).await;
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut i), Ok(mut t)) => {
            tokio::select! { _ = i.recv() => {}, _ = t.recv() => {} }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
