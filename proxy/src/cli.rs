//! The `onetrip` command line: a thin layer over the library.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

use crate::config::{Config, LogFormat, UpstreamAddress};

#[derive(Debug, Parser)]
#[command(name = "onetrip", version, about = "A Postgres-wire proxy that counts and saves round trips")]
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
}

/// Loads the config file, `ONETRIP_*` variables and flags, in that order.
pub fn load_config(cli: &Cli) -> Result<Config, String> {
    let env = std::env::vars().filter(|(k, _)| k != "ONETRIP_CONFIG" && k != "ONETRIP_PG_BINDIR");
    let mut cfg = Config::load(cli.config.as_deref(), env).map_err(|e| e.to_string())?;
    if let Some(l) = cli.listen {
        cfg.listen.address = l;
    }
    if let Some(u) = &cli.upstream {
        cfg.upstream.address = UpstreamAddress::parse(u).map_err(|e| format!("invalid --upstream: {e}"))?;
    }
    Ok(cfg)
}

pub fn init_logging(cfg: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ONETRIP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cfg.log.level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match cfg.log.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let cfg = match load_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("onetrip: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&cfg);
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("onetrip: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => rt.block_on(run(cfg)),
    }
}

async fn run(cfg: Config) -> ExitCode {
    let grace = cfg.limits.shutdown_grace;
    let proxy = match crate::Proxy::start(cfg).await {
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
    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
        (Ok(mut i), Ok(mut t)) => {
            tokio::select! { _ = i.recv() => {}, _ = t.recv() => {} }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
