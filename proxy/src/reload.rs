//! Configuration reload without a restart (SIGHUP in the command, `RELOAD`
//! in the admin console), as PgBouncer has it. The new configuration comes
//! from the source the embedding program gave (`Proxy::set_config_source`:
//! the command reads its file and environment again); what can change while
//! running goes in force for sessions that start from then on, and for the
//! few things read at each use (client limit, admin logins, TLS handshakes,
//! metrics listener). What can't (sockets bound, threads started, state
//! sized at start) keeps its old value and is named in a warning. A new
//! configuration that is invalid is refused whole: nothing changes.

use std::sync::Arc;

use tracing::{error, info, warn};

use crate::{
    config::Config,
    shared::{Live, Shared},
};

use crate::shared::lock;
pub use crate::shared::{ConfigSource, ReloadListener};

/// A reload that went through.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// Keys whose new value is in force (`section.key`).
    pub changed: Vec<String>,
    /// Keys whose new value needs a restart: the old value stays.
    pub kept: Vec<String>,
}

impl Reloaded {
    /// The warning for each kept key, in PostgreSQL's words for the same
    /// case (SQLSTATE 55P02).
    pub fn warnings(&self) -> impl Iterator<Item = String> + '_ {
        self.kept.iter().map(|k| {
            format!("parameter \"{k}\" cannot be changed without restarting onetrip; the old value stays")
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("no configuration to reload: this proxy was started from a fixed configuration")]
    NoSource,
    #[error("new configuration refused, the running one stays: {0}")]
    Invalid(String),
}

impl ReloadError {
    /// PostgreSQL's class for configuration file errors.
    pub fn sqlstate(&self) -> &'static str {
        "F0000"
    }
}

/// Keys that only a restart changes: sockets bound, threads and the
/// embedded server started, the upstream connector and the kept-connection
/// housekeeping set up, the statistics sized, the replicas' watchers
/// started.
fn keep_restart_only(old: &Config, new: &mut Config) -> Vec<String> {
    let mut kept = Vec::new();
    macro_rules! keep {
        ($($section:ident . $key:ident),* $(,)?) => {$(
            if new.$section.$key != old.$section.$key {
                kept.push(concat!(stringify!($section), ".", stringify!($key)).to_owned());
                new.$section.$key = old.$section.$key.clone();
            }
        )*};
    }
    keep!(
        listen.address,
        listen.threads,
        upstream.address,
        upstream.tls,
        upstream.tls_ca_file,
        upstream.embedded_data_dir,
        upstream.reuse,
        limits.max_stats_rows,
        pool.mode,
        pool.pool_size,
        pool.max_pools,
        pool.max_db_connections,
        pool.max_user_connections,
        replicas.addresses,
        replicas.embedded,
        replicas.max_lag,
        replicas.poll_interval,
        replicas.monitor_user,
        replicas.monitor_database,
    );
    kept
}

/// `section.key` of every value that differs (passwords are never
/// serialised, so a changed password is not listed).
fn changed_keys(old: &Config, new: &Config) -> Vec<String> {
    let flat = |c: &Config| {
        let mut rows = Vec::new();
        if let Ok(toml::Value::Table(t)) = toml::Value::try_from(c) {
            for (section, v) in t {
                match v {
                    toml::Value::Table(keys) => {
                        for (k, v) in keys {
                            rows.push((format!("{section}.{k}"), v.to_string()));
                        }
                    }
                    v => rows.push((section, v.to_string())),
                }
            }
        }
        rows
    };
    let (a, b) = (flat(old), flat(new));
    let mut keys: Vec<String> = b
        .iter()
        .filter(|row| !a.contains(row))
        .map(|(k, _)| k.clone())
        .chain(
            a.iter()
                .filter(|(k, _)| !b.iter().any(|(k2, _)| k2 == k))
                .map(|(k, _)| k.clone()),
        )
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Reads the configuration again and puts what may change in force. Logs
/// the outcome (a refusal as an error), so a SIGHUP needs nothing more.
pub fn reload(shared: &Arc<Shared>) -> Result<Reloaded, ReloadError> {
    let result = reload_quietly(shared);
    match &result {
        Ok(r) => {
            for w in r.warnings() {
                warn!("{w}");
            }
            info!(changed = ?r.changed, "configuration reloaded");
        }
        Err(e) => error!("{e}"),
    }
    result
}

fn reload_quietly(shared: &Arc<Shared>) -> Result<Reloaded, ReloadError> {
    let hooks = &shared.reload;
    let _one_at_a_time = lock(&hooks.running);
    let source = lock(&hooks.source).clone().ok_or(ReloadError::NoSource)?;
    let mut new = source().map_err(ReloadError::Invalid)?;
    let old = shared.config();
    let kept = keep_restart_only(&old, &mut new);
    // Again: a key kept at its old value may change what the rest is
    // checked with (an admin user without a password on a remote address).
    new.validate()
        .map_err(|e| ReloadError::Invalid(e.to_string()))?;
    // Everything that can fail is built before anything changes. The
    // certificate is read again even under the same file names: renewing
    // it in place is what a reload is for.
    let tls = match (&new.tls.cert_file, &new.tls.key_file) {
        (Some(c), Some(k)) => Some(
            crate::net::server_tls(c, k)
                .map_err(|e| ReloadError::Invalid(format!("TLS configuration: {e}")))?,
        ),
        _ => None,
    };
    let metrics = match new.metrics.listen {
        l if l == old.metrics.listen => None,
        None => Some(None),
        Some(addr) => {
            let runtime = lock(&hooks.runtime).clone();
            let endpoint = crate::metrics::Endpoint::start(
                addr,
                Shared::metrics_page(shared),
                runtime.as_ref(),
            )
            .map_err(|e| ReloadError::Invalid(format!("metrics.listen {addr}: {e}")))?;
            Some(Some(endpoint))
        }
    };
    let changed = changed_keys(&old, &new);
    let listeners = lock(&hooks.listeners).clone();
    for l in &listeners {
        l(&new);
    }
    shared.replace_live(Live::new(new, tls));
    if let Some(endpoint) = metrics {
        // The old endpoint stops as it is dropped.
        *lock(&hooks.metrics) = endpoint;
    }
    Ok(Reloaded { changed, kept })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn restart_only_keys_keep_their_old_value_and_are_named() {
        let old = Config::default();
        let mut new = Config::default();
        new.listen.threads = 3;
        new.limits.max_client_connections = 7;
        new.log.level = "debug".into();
        let kept = keep_restart_only(&old, &mut new);
        assert_eq!(kept, ["listen.threads"]);
        assert_eq!(new.listen.threads, old.listen.threads);
        assert_eq!(new.limits.max_client_connections, 7);
        assert_eq!(
            changed_keys(&old, &new),
            ["limits.max_client_connections", "log.level"]
        );
    }

    #[test]
    fn without_a_source_a_reload_is_refused_and_nothing_changes() {
        let shared = Shared::detached(Config::default());
        let err = reload(&shared).unwrap_err();
        assert!(matches!(err, ReloadError::NoSource), "{err}");
        shared
            .reload
            .set_source(Arc::new(|| Err("bad file".into())));
        let err = reload(&shared).unwrap_err().to_string();
        assert!(err.contains("bad file"), "{err}");
        shared.reload.set_source(Arc::new(|| {
            let mut c = Config::default();
            c.limits.max_client_connections = 0;
            Ok(c)
        }));
        let err = reload(&shared).unwrap_err().to_string();
        assert!(err.contains("max_client_connections"), "{err}");
        assert_eq!(shared.config().limits.max_client_connections, 5000);
    }

    #[test]
    fn a_valid_configuration_is_put_in_force_and_listeners_hear_of_it() {
        let shared = Shared::detached(Config::default());
        let heard = Arc::new(Mutex::new(String::new()));
        let h = heard.clone();
        shared
            .reload
            .add_listener(Arc::new(move |c: &Config| *lock(&h) = c.log.level.clone()));
        shared.reload.set_source(Arc::new(|| {
            let mut c = Config::default();
            c.limits.max_client_connections = 1;
            c.log.level = "warn".into();
            c.listen.address = "127.0.0.1:1".parse().unwrap();
            Ok(c)
        }));
        let r = reload(&shared).unwrap();
        assert_eq!(r.kept, ["listen.address"]);
        assert_eq!(shared.config().limits.max_client_connections, 1);
        assert_eq!(
            shared.config().listen.address,
            Config::default().listen.address
        );
        assert_eq!(*lock(&heard), "warn");
    }
}
