//! The command line: flags, subcommands, and the configuration they make.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use onetrip::config::{Config, UpstreamAddress};

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
        #[arg(long, value_parser = onetrip::config::duration::parse)]
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

impl Cli {
    /// The config file, `ONETRIP_*` variables and flags, in that order.
    pub fn load_config(&self) -> Result<Config, String> {
        self.config_source().load()
    }

    /// What the configuration is made from, to read again on a reload.
    pub fn config_source(&self) -> ConfigSource {
        ConfigSource {
            file: self.config.clone(),
            listen: self.listen,
            upstream: self.upstream.clone(),
        }
    }
}

/// The config file and the flags that override it.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    file: Option<PathBuf>,
    listen: Option<std::net::SocketAddr>,
    upstream: Option<String>,
}

impl ConfigSource {
    /// The config file, `ONETRIP_*` variables and flags, in that order.
    pub fn load(&self) -> Result<Config, String> {
        let env = std::env::vars();
        let mut cfg = Config::load(self.file.as_deref(), env).map_err(|e| e.to_string())?;
        if let Some(l) = self.listen {
            cfg.listen.address = l;
        }
        if let Some(u) = &self.upstream {
            cfg.upstream.address =
                UpstreamAddress::parse(u).map_err(|e| format!("invalid --upstream: {e}"))?;
        }
        // Flags may change what the file and environment were checked with.
        cfg.validate().map_err(|e| e.to_string())?;
        crate::logging::targets(&cfg)?;
        Ok(cfg)
    }
}
