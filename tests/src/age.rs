//! Apache AGE for the tests that need it.
//!
//! AGE is not a Debian package: `.ci/run` builds and installs it from its
//! source and exports `ONETRIP_AGE_SRC` (the unpacked source, whose
//! `regress/` holds AGE's own regression suite). With `ONETRIP_AGE_SRC`
//! set, every AGE check runs and a missing piece fails it; without it they
//! print one skip line each and pass, except with `CI=true`, where they fail.

use std::path::PathBuf;

use crate::{PgOptions, PgServer, start_pg};

/// AGE's source directory from `ONETRIP_AGE_SRC`, or `None` after printing
/// the skip line for `test`.
pub fn age_src(test: &str) -> Option<PathBuf> {
    match std::env::var_os("ONETRIP_AGE_SRC") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            assert!(
                dir.join("age.control").is_file(),
                "ONETRIP_AGE_SRC={} is not Apache AGE's source (no age.control)",
                dir.display()
            );
            Some(dir)
        }
        _ => {
            assert!(
                !crate::prerequisites_required(),
                "{test}: needs Apache AGE, and CI=true: set ONETRIP_AGE_SRC to its built and installed source (.ci/run does)"
            );
            // Past the harness's capture: a skipped check shows in the log.
            report(&format!(
                "skipped: {test}: needs Apache AGE (set ONETRIP_AGE_SRC to its built and installed source; .ci/run does)"
            ));
            None
        }
    }
}

/// A private PostgreSQL with `age` preloaded and created in the `postgres`
/// database, or `None` (skip line printed) when AGE is not configured.
/// Fails when `ONETRIP_AGE_SRC` is set but the extension is not installed.
pub async fn start_age_pg(test: &str) -> Option<PgServer> {
    start_age_pg_preloaded(test, true).await
}

/// Like [`start_age_pg`]; without `preload`, sessions must `LOAD 'age'`
/// themselves before `cypher()` works.
pub async fn start_age_pg_preloaded(test: &str, preload: bool) -> Option<PgServer> {
    age_src(test)?;
    let mut opts = PgOptions::default();
    if preload {
        opts.conf.push("shared_preload_libraries = 'age'".into());
    }
    let pg = start_pg(opts).await;
    let (client, conn) = tokio_postgres::connect(&pg.dsn("postgres"), tokio_postgres::NoTls)
        .await
        .expect("connect to the AGE server");
    tokio::spawn(conn);
    client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS age")
        .await
        .expect("CREATE EXTENSION age: is AGE installed (make install in ONETRIP_AGE_SRC)?");
    Some(pg)
}

/// Prints an AGE check's summary line to the test process's stderr
/// directly, past the test harness's capture, so that CI's log shows it
/// for a passing test too.
pub fn report(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}
