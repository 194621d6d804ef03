//! Configuration reload without a restart: the admin console's RELOAD on
//! the proxy in-process, SIGHUP on the `onetrip` binary. A live key takes
//! effect, a restart-only key is named and kept, an invalid configuration
//! is refused with its reason and the running one stays.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use onetrip::Config;
use onetrip_tests::{Env, PgOptions, assert_serving, process::ProxyProcess, raw, start_pg};
use tokio::{io::AsyncWriteExt, net::TcpStream};
use tokio_postgres::error::SqlState;

const WAIT: Duration = Duration::from_secs(10);

/// An admin console session over the raw protocol, so notices are seen.
async fn admin(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&raw::startup("postgres", "onetrip"))
        .await
        .unwrap();
    let got = raw::read_to_z(&mut s).await;
    assert!(raw::errors(&got).is_empty(), "{got:?}");
    s
}

/// Runs `sql` on the console: its notices (SQLSTATE, message), its errors
/// (SQLSTATE, message) and its command tags.
async fn run(s: &mut TcpStream, sql: &str) -> (Vec<(String, String)>, Vec<(String, String)>) {
    s.write_all(&raw::query(sql)).await.unwrap();
    let got = raw::read_to_z(s).await;
    let notices = got
        .iter()
        .filter(|(t, _)| *t == b'N')
        .map(|(_, b)| {
            let f = |c| raw::field(b, c).unwrap_or_default();
            (f(b'C'), f(b'M'))
        })
        .collect();
    let errors = raw::errors(&got)
        .into_iter()
        .map(|(_, code, msg)| (code, msg))
        .collect();
    (notices, errors)
}

/// A client through the proxy, or the SQLSTATE it was refused with.
async fn try_client(port: u16) -> Result<tokio_postgres::Client, SqlState> {
    let dsn = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    match tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await {
        Ok((c, conn)) => {
            tokio::spawn(conn);
            Ok(c)
        }
        Err(e) => Err(e.code().cloned().unwrap_or(SqlState::CONNECTION_FAILURE)),
    }
}

/// RELOAD puts a lower client limit in force at once, tells the hooks of
/// the new log level, warns about a restart-only key and keeps it, and
/// refuses an invalid configuration with its reason, keeping the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reload_changes_what_may_change_and_refuses_what_is_invalid() {
    let env = Env::start_with(PgOptions::default(), |_| {}).await;
    let port = env.proxy_port();
    let base: Config = (*env.proxy().config()).clone();
    // What the "file" says now; the test changes it between reloads.
    let next: Arc<Mutex<Result<Config, String>>> = Arc::new(Mutex::new(Ok(base.clone())));
    let n = next.clone();
    env.proxy()
        .set_config_source(move || n.lock().unwrap().clone());
    let levels = Arc::new(Mutex::new(Vec::new()));
    let l = levels.clone();
    env.proxy()
        .on_reload(move |c| l.lock().unwrap().push(c.log.level.clone()));

    let mut console = admin(port).await;
    let first = try_client(port).await.expect("room for many");
    // Two: the console counts, so one client fits and a second does not.
    let mut tight = base.clone();
    tight.limits.max_client_connections = 2;
    tight.log.level = "warn,onetrip=debug".into();
    *next.lock().unwrap() = Ok(tight.clone());
    let (notices, errors) = run(&mut console, "RELOAD").await;
    assert_eq!(
        (notices.len(), errors.len()),
        (0, 0),
        "{notices:?} {errors:?}"
    );
    assert_eq!(*levels.lock().unwrap(), ["warn,onetrip=debug"]);
    assert_eq!(
        try_client(port).await.err(),
        Some(SqlState::TOO_MANY_CONNECTIONS)
    );
    first
        .simple_query("select 1")
        .await
        .expect("running sessions go on");

    // A restart-only key: named in a warning, its old value kept.
    let mut moved = tight.clone();
    moved.listen.threads = 7;
    *next.lock().unwrap() = Ok(moved);
    let (notices, errors) = run(&mut console, "RELOAD").await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].0, "55P02");
    assert!(
        notices[0].1.contains("\"listen.threads\""),
        "{}",
        notices[0].1
    );
    assert_eq!(env.proxy().config().listen.threads, base.listen.threads);

    // Invalid: refused with the reason; the limit of 2 stays.
    let mut invalid = tight.clone();
    invalid.limits.max_client_connections = 0;
    *next.lock().unwrap() = Ok(invalid);
    // Like PostgreSQL, the error ends the query string.
    console
        .write_all(&raw::query("RELOAD; SHOW VERSION"))
        .await
        .unwrap();
    let got = raw::read_to_z(&mut console).await;
    assert!(!got.iter().any(|(t, _)| *t == b'T'), "{got:?}");
    let (_, errors) = run(&mut console, "RELOAD").await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "F0000");
    assert!(
        errors[0].1.contains("max_client_connections"),
        "{}",
        errors[0].1
    );
    *next.lock().unwrap() = Err("config.toml: expected `=`, at line 3".into());
    let (_, errors) = run(&mut console, "RELOAD").await;
    assert!(errors[0].1.contains("line 3"), "{errors:?}");
    assert_eq!(env.proxy().config().limits.max_client_connections, 2);
    assert_eq!(
        try_client(port).await.err(),
        Some(SqlState::TOO_MANY_CONNECTIONS)
    );

    // Back to many, with a metrics endpoint: a new client gets in, and
    // the endpoint answers.
    let mut with_metrics = base.clone();
    with_metrics.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    *next.lock().unwrap() = Ok(with_metrics);
    assert_eq!(env.proxy().metrics_addr(), None);
    let (_, errors) = run(&mut console, "RELOAD").await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_serving(&env.proxy_dsn()).await;
    let addr = env.proxy().metrics_addr().expect("metrics listening");
    let mut http = TcpStream::connect(addr).await.unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    let read = tokio::io::AsyncReadExt::read_to_string(&mut http, &mut body);
    tokio::time::timeout(WAIT, read).await.unwrap().unwrap();
    assert!(body.contains("onetrip_sessions_active"), "{body}");
    *next.lock().unwrap() = Ok(base.clone());
    run(&mut console, "RELOAD").await;
    assert_eq!(env.proxy().metrics_addr(), None, "stopped by the reload");
}

/// RELOAD is for admin users marked for it; a proxy with no source to read
/// from refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_needs_a_marked_user_and_a_source() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.admin.users.push(onetrip::config::AdminUser {
            name: "viewer".into(),
            ..Default::default()
        });
    })
    .await;
    let port = env.proxy_port();
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&raw::startup("viewer", "onetrip"))
        .await
        .unwrap();
    raw::read_to_z(&mut s).await;
    let (_, errors) = run(&mut s, "RELOAD").await;
    assert_eq!(errors[0].0, "42501", "{errors:?}");
    assert!(errors[0].1.contains("reload = true"), "{errors:?}");
    let mut console = admin(port).await;
    let (_, errors) = run(&mut console, "reload").await;
    assert_eq!(errors[0].0, "F0000", "{errors:?}");
    assert!(
        errors[0].1.contains("no configuration to reload"),
        "{errors:?}"
    );
}

/// SIGHUP makes the binary read its file again: a lower client limit, a
/// louder log level and another log format take effect, an invalid file is
/// refused with an error line and the running configuration stays, and a
/// restart-only key is warned about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_binarys_config_file() {
    let pg = start_pg(Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("onetrip.toml");
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    write("[limits]\nmax_client_connections = 100\n[log]\nlevel = \"warn\"\n");
    let proxy =
        ProxyProcess::start_with_config(env!("CARGO_BIN_EXE_onetrip-cli"), pg.addr(), &file);
    let port = proxy.port();
    let a = try_client(port).await.expect("room");
    let b = try_client(port).await.expect("room");
    drop(b);
    assert!(
        !proxy.stderr().contains("onetrip ready"),
        "info lines are off at first"
    );

    write("[limits]\nmax_client_connections = 1\n[log]\nlevel = \"info\"\n");
    proxy.hangup();
    proxy.wait_for_stderr("configuration reloaded", 1, WAIT);
    wait_refused(port).await;
    a.simple_query("select 1").await.expect("a stays");

    write("[limits]\nmax_client_connections = 0\n");
    proxy.hangup();
    let err = proxy.wait_for_stderr("new configuration refused", 1, WAIT);
    assert!(err.contains("ERROR"), "{err}");
    assert!(err.contains("max_client_connections"), "{err}");
    assert_eq!(
        try_client(port).await.err(),
        Some(SqlState::TOO_MANY_CONNECTIONS)
    );

    write(
        "[listen]\nthreads = 3\n[limits]\nmax_client_connections = 1\n\
         [log]\nlevel = \"info\"\nformat = \"json\"\n",
    );
    proxy.hangup();
    let out = proxy.wait_for_stderr("configuration reloaded", 2, WAIT);
    let last = &out[out.find("new configuration refused").unwrap()..];
    assert!(last.contains("listen.threads"), "{last}");
    assert!(
        last.contains("cannot be changed without restarting"),
        "{last}"
    );
    // The lines after this reload are JSON.
    assert!(
        last.contains("\"message\":\"configuration reloaded\""),
        "{last}"
    );
    drop(a);
    // A place freed: the next client gets in.
    for _ in 0..250 {
        if try_client(port).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no client got in once the only place was free");
}

/// A reload's effect on new clients comes just after its log line (the
/// line is written after the new configuration is in force, but a client
/// that connected before may still hold its place).
async fn wait_refused(port: u16) {
    for _ in 0..250 {
        if try_client(port).await.err() == Some(SqlState::TOO_MANY_CONNECTIONS) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("a second client was never refused after the reload");
}

/// A certificate renewed in place is served from the next handshake after
/// RELOAD; a key that does not load is refused and the old one served on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_serves_a_renewed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    // Each CA file holds one generation of the certificate, to verify by.
    let issue = |generation: &str| {
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        let ca = dir.path().join(format!("{generation}.crt"));
        std::fs::write(&ca, ck.cert.pem()).unwrap();
        ca
    };
    let first = issue("first");
    let env = Env::start_with(PgOptions::default(), |c| {
        c.tls.cert_file = Some(cert.clone());
        c.tls.key_file = Some(key.clone());
    })
    .await;
    let base: Config = (*env.proxy().config()).clone();
    env.proxy().set_config_source(move || Ok(base.clone()));
    let verified_by = |ca: &std::path::Path| {
        let out = env
            .pg
            .tool("psql")
            .args([
                "-X",
                "-At",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-p", &env.proxy_port().to_string(), "-c", "select 1"])
            .env("PGSSLMODE", "verify-full")
            .env("PGSSLROOTCERT", ca)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .expect("run psql");
        out.status.success()
    };
    assert!(verified_by(&first));
    let second = issue("second");
    assert!(verified_by(&first), "the old one until a reload");
    let mut console = admin(env.proxy_port()).await;
    let (_, errors) = run(&mut console, "RELOAD").await;
    assert!(errors.is_empty(), "{errors:?}");
    assert!(verified_by(&second));
    assert!(!verified_by(&first));

    std::fs::write(&key, "not a key").unwrap();
    let (_, errors) = run(&mut console, "RELOAD").await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].1.contains("TLS configuration"), "{errors:?}");
    assert!(verified_by(&second), "the running certificate stays");
}
