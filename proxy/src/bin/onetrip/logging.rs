//! Log lines on stderr, as text or JSON, filtered by target; a reload
//! changes both.

use std::sync::{
    Arc, OnceLock, RwLock,
    atomic::{AtomicBool, Ordering::Relaxed},
};

use onetrip::config::{Config, LogFormat};
use tracing::{Event, Metadata, Subscriber, span, subscriber::Interest};
use tracing_subscriber::{
    Layer,
    filter::{LevelFilter, Targets},
    layer::Context,
    registry::LookupSpan,
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
/// Whether events are written as JSON now, switched by `reload`.
static JSON: OnceLock<Arc<AtomicBool>> = OnceLock::new();

type Boxed<S> = Box<dyn Layer<S> + Send + Sync>;

/// Both outputs, each kept up to date with every span (each stores its
/// own formatting of the span's fields), and each event written by the
/// one `log.format` names now: a reload switches with one atomic store,
/// and nothing is locked per event.
struct Output<S> {
    json: Arc<AtomicBool>,
    text: Boxed<S>,
    as_json: Boxed<S>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Output<S> {
    fn on_layer(&mut self, subscriber: &mut S) {
        self.text.on_layer(subscriber);
        self.as_json.on_layer(subscriber);
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        self.text.on_new_span(attrs, id, ctx.clone());
        self.as_json.on_new_span(attrs, id, ctx);
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        self.text.on_record(id, values, ctx.clone());
        self.as_json.on_record(id, values, ctx);
    }

    fn on_follows_from(&self, id: &span::Id, follows: &span::Id, ctx: Context<'_, S>) {
        self.text.on_follows_from(id, follows, ctx.clone());
        self.as_json.on_follows_from(id, follows, ctx);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if self.json.load(Relaxed) {
            self.as_json.on_event(event, ctx);
        } else {
            self.text.on_event(event, ctx);
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.text.on_enter(id, ctx.clone());
        self.as_json.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.text.on_exit(id, ctx.clone());
        self.as_json.on_exit(id, ctx);
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        self.text.on_close(id.clone(), ctx.clone());
        self.as_json.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &span::Id, new: &span::Id, ctx: Context<'_, S>) {
        self.text.on_id_change(old, new, ctx.clone());
        self.as_json.on_id_change(old, new, ctx);
    }
}

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
    let json = JSON.get_or_init(|| Arc::new(AtomicBool::new(cfg.log.format == LogFormat::Json)));
    let fmt = || tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let output = Output {
        json: json.clone(),
        text: fmt().boxed(),
        as_json: fmt().json().boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(LiveTargets(filter.clone()))
        .with(output)
        .try_init();
}

/// Puts the filter and the format of a reloaded configuration in force.
pub fn reload(cfg: &Config) {
    if let Some(json) = JSON.get() {
        json.store(cfg.log.format == LogFormat::Json, Relaxed);
    }
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
