//! Log lines on stderr, as text or JSON, filtered by target; the filter
//! changes on a reload.

use std::sync::{Arc, OnceLock, RwLock};

use onetrip::config::{Config, LogFormat};
use tracing::{Metadata, Subscriber, subscriber::Interest};
use tracing_subscriber::{
    Layer,
    filter::{LevelFilter, Targets},
    layer::Context,
};

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

/// The filter in force, replaced by `reload`.
static FILTER: OnceLock<Arc<RwLock<Targets>>> = OnceLock::new();

/// A `Targets` filter that a reload may replace. It answers each call site
/// once, always or never, and tracing caches that: the lock is taken when
/// a call site is first reached or the filter changes, never per event or
/// per span entered (EnvFilter, and tracing-subscriber's reload layer,
/// would take a lock shared by all sessions on every poll).
struct LiveTargets(Arc<RwLock<Targets>>);

impl LiveTargets {
    fn enables(&self, m: &Metadata<'_>) -> bool {
        let t = self.0.read().unwrap_or_else(|e| e.into_inner());
        t.would_enable(m.target(), m.level())
    }
}

impl<S: Subscriber> Layer<S> for LiveTargets {
    fn register_callsite(&self, m: &'static Metadata<'static>) -> Interest {
        if self.enables(m) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, m: &Metadata<'_>, _: Context<'_, S>) -> bool {
        self.enables(m)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        let t = self.0.read().unwrap_or_else(|e| e.into_inner());
        <Targets as Layer<S>>::max_level_hint(&t)
    }
}

pub fn init(cfg: &Config) {
    use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt};
    // `Cli::load_config` has checked the filter already.
    let targets =
        targets(cfg).unwrap_or_else(|_| Targets::new().with_default(tracing::Level::INFO));
    let filter = FILTER.get_or_init(|| Arc::new(RwLock::new(targets.clone())));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match cfg.log.format {
        LogFormat::Json => fmt.json().boxed(),
        LogFormat::Text => fmt.boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(LiveTargets(filter.clone()))
        .with(fmt)
        .try_init();
}

/// Puts the filter of a reloaded configuration in force. The output format
/// stays (`log.format` needs a restart).
pub fn reload(cfg: &Config) {
    let Some(filter) = FILTER.get() else { return };
    match targets(cfg) {
        Ok(t) => {
            *filter.write().unwrap_or_else(|e| e.into_inner()) = t;
            // Every call site is asked again, and the level tracing skips
            // below without asking is recomputed.
            tracing::callsite::rebuild_interest_cache();
        }
        // Checked by the reload before; a filter that fails here is kept.
        Err(e) => tracing::error!("log filter not changed: {e}"),
    }
}
