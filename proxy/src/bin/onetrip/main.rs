//! The `onetrip` command: the proxy, `measure`, and the offline tools. A thin
//! layer over the library; what only the command needs (flags, log output,
//! the agtype codec) stays here, out of the library applications embed.

mod agtype_lines;
mod args;
mod logging;
mod measure;
mod plan_cypher;

use std::process::ExitCode;

use clap::Parser;
use onetrip::{Config, Proxy};

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Offline tools need no configuration, runtime or logging.
    match &cli.command {
        Some(Command::Agtype { mode }) => return agtype_lines::run((*mode).into()),
        Some(Command::PlanCypher {
            sql,
            catalog,
            graph,
            label,
        }) => return plan_cypher::run(sql, catalog.as_deref(), graph, label),
        _ => {}
    }
    let mut cfg = match cli.load_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("onetrip: {e}");
            return ExitCode::from(2);
        }
    };
    let source = cli.config_source();
    let command = cli.command.unwrap_or(Command::Run);
    if matches!(command, Command::Measure { .. }) && std::env::var_os("ONETRIP_LOG").is_none() {
        // Per-session log lines would bury the report.
        cfg.log.level = "warn".into();
    }
    logging::init(&cfg);
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
        Command::Run => match onetrip::workers(cfg.listen.threads) {
            Ok(workers) => rt.block_on(run(cfg, source, workers.handles())),
            Err(e) => {
                eprintln!("onetrip: cannot start worker threads: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Measure { rtt, json, command } => {
            rt.block_on(measure::run(cfg, rtt, json, command))
        }
        Command::Agtype { .. } | Command::PlanCypher { .. } => ExitCode::FAILURE,
    }
}

async fn run(
    cfg: Config,
    source: args::ConfigSource,
    workers: Vec<tokio::runtime::Handle>,
) -> ExitCode {
    // Before the proxy listens: SIGHUP's default action ends the process.
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("onetrip: cannot handle signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    let proxy = match Proxy::start_on(cfg, workers).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("onetrip: {e}");
            return ExitCode::FAILURE;
        }
    };
    proxy.set_config_source(move || source.load());
    proxy.on_reload(logging::reload);
    if let Some(pg) = proxy.embedded() {
        tracing::info!(port = pg.port(), data_dir = %pg.data_dir().display(), "embedded PostgreSQL running");
    }
    let addr = proxy.local_addr();
    eprintln!(
        "onetrip listening on {addr}; connect with: psql -h {} -p {} -U postgres postgres",
        addr.ip(),
        addr.port()
    );
    while signals.next().await == Signal::Reload {
        tracing::info!("SIGHUP: reloading the configuration");
        // Logs its outcome, a refusal as an error.
        let _ = proxy.reload();
    }
    tracing::info!("shutdown requested");
    // As reloaded: shutdown_grace may change while running.
    let grace = proxy.config().limits.shutdown_grace;
    proxy.shutdown(grace).await;
    ExitCode::SUCCESS
}

#[derive(Debug, PartialEq, Eq)]
enum Signal {
    Stop,
    Reload,
}

/// SIGINT and SIGTERM stop the proxy; SIGHUP reloads its configuration.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::Stop,
            _ = self.terminate.recv() => Signal::Stop,
            _ = self.hangup.recv() => Signal::Reload,
        }
    }
}
