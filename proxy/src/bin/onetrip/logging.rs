//! Log lines on stderr, as text or JSON, filtered by target.

use onetrip::config::{Config, LogFormat};
use tracing_subscriber::filter::Targets;

/// The log filter: `ONETRIP_LOG` if set, else `[log] level` (which
/// `Config::load` has checked).
pub fn targets(cfg: &Config) -> Result<Targets, String> {
    let (spec, what) = match std::env::var("ONETRIP_LOG") {
        Ok(spec) => (spec, "ONETRIP_LOG"),
        Err(_) => (cfg.log.level.clone(), "log.level"),
    };
    spec.parse()
        .map_err(|e| format!("invalid {what} {spec:?}: {e}"))
}

pub fn init(cfg: &Config) {
    use tracing_subscriber::{Layer, layer::SubscriberExt, util::SubscriberInitExt};
    // Targets rather than EnvFilter: EnvFilter takes a lock shared by all
    // sessions each time a session's span is entered, that is on every poll.
    // `Cli::load_config` has checked the filter already.
    let targets =
        targets(cfg).unwrap_or_else(|_| Targets::new().with_default(tracing::Level::INFO));
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
