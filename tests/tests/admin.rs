//! The admin console end to end: psql and tokio-postgres, trust, md5 and
//! SCRAM-SHA-256 logins, every command, errors that keep the session usable.

use std::time::Duration;

use onetrip::config::{AdminAuth, AdminUser};
use onetrip_tests::{Env, PgOptions, connect};
use tokio_postgres::{Client, SimpleQueryMessage, error::SqlState};

fn admin_dsn(env: &Env, user: &str, password: Option<&str>) -> String {
    let mut dsn = format!(
        "host=127.0.0.1 port={} user={user} dbname=onetrip",
        env.proxy_port()
    );
    if let Some(p) = password {
        dsn.push_str(&format!(" password={p}"));
    }
    dsn
}

async fn try_admin(
    env: &Env,
    user: &str,
    password: Option<&str>,
) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) =
        tokio_postgres::connect(&admin_dsn(env, user, password), tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// Result sets of a simple query: rows as (column, value) maps, in order.
type Rows = Vec<Vec<(String, Option<String>)>>;

async fn show(c: &Client, sql: &str) -> Vec<Rows> {
    let mut sets: Vec<Rows> = Vec::new();
    let mut current: Rows = Vec::new();
    for m in c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    {
        match m {
            SimpleQueryMessage::Row(r) => current.push(
                r.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, col)| (col.name().to_owned(), r.get(i).map(str::to_owned)))
                    .collect(),
            ),
            SimpleQueryMessage::CommandComplete(_) => sets.push(std::mem::take(&mut current)),
            _ => {}
        }
    }
    sets
}

fn get<'a>(row: &'a [(String, Option<String>)], col: &str) -> Option<&'a str> {
    row.iter()
        .find(|(c, _)| c == col)
        .unwrap_or_else(|| panic!("no column {col} in {row:?}"))
        .1
        .as_deref()
}

fn num(row: &[(String, Option<String>)], col: &str) -> i64 {
    get(row, col)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{col} not a number in {row:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_reads_stats_over_the_console() {
    let env = Env::start().await;
    env.psql_ok(true, &["-c", "select 1"]);
    env.settle(0).await;
    let port = env.proxy_port().to_string();
    let out = env
        .pg
        .tool("psql")
        .args([
            "-X",
            "-A",
            "-F",
            "|",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-d",
            "onetrip",
        ])
        .args(["-c", "show stats"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split('|').collect();
    let at = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} in {header:?}"))
    };
    let row: Vec<&str> = lines
        .find(|l| l.starts_with("postgres|postgres|"))
        .expect("postgres row")
        .split('|')
        .collect();
    assert_eq!(row[at("client_round_trips")], "1");
    assert_eq!(row[at("upstream_round_trips")], "1");
    assert_eq!(row[at("round_trips_saved")], "0");
    assert_eq!(row[at("statements")], "1");
    assert!(text.lines().any(|l| l.starts_with("(total)||")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_answer_and_errors_keep_the_session() {
    let env = Env::start().await;
    let app = connect(&format!("{} application_name=rt-app", env.proxy_dsn())).await;
    app.simple_query("select 1; select 2").await.unwrap();
    let admin = try_admin(&env, "postgres", None).await.unwrap();

    let stats = &show(&admin, "SHOW STATS").await[0];
    let row = stats
        .iter()
        .find(|r| get(r, "database") == Some("postgres"))
        .expect("postgres row");
    assert_eq!(num(row, "client_round_trips"), 1);
    // A simple query counts as one statement, however many it holds.
    assert_eq!(num(row, "statements"), 1);
    let total = stats.last().unwrap();
    assert_eq!(get(total, "database"), Some("(total)"));
    assert_eq!(num(total, "client_round_trips"), 1);

    let clients = &show(&admin, "show clients;").await[0];
    assert_eq!(clients.len(), 1, "{clients:?}");
    assert_eq!(get(&clients[0], "application_name"), Some("rt-app"));
    assert_eq!(get(&clients[0], "state"), Some("idle"));
    assert_eq!(num(&clients[0], "client_round_trips"), 1);
    assert!(num(&clients[0], "upstream_pid") > 0);
    // Plain TCP on a worker thread: relayed through the worker's epoll.
    assert_eq!(get(&clients[0], "relay"), Some("epoll"));
    let servers = &show(&admin, "Show Servers").await[0];
    assert_eq!(
        get(&servers[0], "upstream"),
        Some(env.pg.addr().to_string().as_str())
    );
    assert_eq!(
        get(&servers[0], "upstream_pid"),
        get(&clients[0], "upstream_pid")
    );

    // Several commands in one query, answered in order.
    let sets = show(&admin, "show version; show help ;").await;
    assert_eq!(sets.len(), 2);
    assert!(get(&sets[0][0], "version").unwrap().starts_with("onetrip "));
    assert!(
        sets[1]
            .iter()
            .any(|r| get(r, "command") == Some("SHOW STATS"))
    );

    let config = &show(&admin, "show config").await[0];
    assert!(
        config
            .iter()
            .any(|r| get(r, "key") == Some("upstream.address"))
    );
    assert!(
        config
            .iter()
            .all(|r| !get(r, "key").unwrap().contains("password"))
    );
    assert!(show(&admin, "show fallbacks").await[0].is_empty());
    let rewrites = &show(&admin, "show rewrites").await[0];
    assert_eq!(get(&rewrites[0], "outcome"), Some("rewritten"));

    // Unknown commands: an error, then the session goes on.
    let e = admin.simple_query("SHOW NONSENSE").await.unwrap_err();
    let db = e.as_db_error().expect("server error");
    assert_eq!(db.code(), &SqlState::FEATURE_NOT_SUPPORTED);
    assert!(
        db.message().contains("SHOW NONSENSE") && db.message().contains("SHOW HELP"),
        "{}",
        db.message()
    );
    let e = admin.simple_query("select 1").await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::SYNTAX_ERROR));
    // The extended protocol is refused, and the session resyncs.
    let e = admin.query("SHOW STATS", &[]).await.unwrap_err();
    let msg = e
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(msg.contains("simple query protocol only"), "{e:?}");
    assert_eq!(show(&admin, "show version").await.len(), 1);

    app.simple_query("select 3").await.unwrap();
    assert!(admin.simple_query("RESET STATS").await.is_ok());
    let stats = &show(&admin, "show stats").await[0];
    assert_eq!(num(stats.last().unwrap(), "client_round_trips"), 0);
    app.simple_query("select 4").await.unwrap();
    let stats = &show(&admin, "show stats").await[0];
    assert_eq!(num(stats.last().unwrap(), "client_round_trips"), 1);
}

/// psql as user `ops` on the admin console, unaligned and tuples only.
fn psql_as_ops(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    env.pg
        .tool("psql")
        .args([
            "-X",
            "-At",
            "-h",
            "127.0.0.1",
            "-p",
            &env.proxy_port().to_string(),
            "-U",
            "ops",
            "-d",
            "onetrip",
        ])
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .unwrap()
}

fn with_users(auth: AdminAuth) -> impl FnOnce(&mut onetrip::Config) {
    move |cfg| {
        cfg.admin.auth = auth;
        cfg.admin.users = vec![AdminUser {
            name: "ops".into(),
            password: "s3cret pässword".into(),
            ..Default::default()
        }];
    }
}

async fn check_password_auth(auth: AdminAuth) {
    let env = Env::start_with(PgOptions::default(), with_users(auth)).await;
    let c = try_admin(&env, "ops", Some("'s3cret pässword'"))
        .await
        .expect("right password");
    assert_eq!(show(&c, "show version").await.len(), 1);
    // Not marked reset_stats: reads only.
    let e = c.simple_query("RESET STATS").await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{e}");
    assert_eq!(
        show(&c, "show version").await.len(),
        1,
        "the session goes on"
    );
    let e = try_admin(&env, "ops", Some("wrong"))
        .await
        .expect_err("wrong password refused");
    assert_eq!(e.code(), Some(&SqlState::INVALID_PASSWORD), "{e}");
    let wrong = e.as_db_error().unwrap().message().replace("ops", "NAME");
    // A name that is no admin user fails the same way: it doesn't tell
    // which names are admins.
    for name in ["postgres", "mallory"] {
        let e = try_admin(&env, name, Some("'s3cret pässword'"))
            .await
            .expect_err("unlisted user refused");
        assert_eq!(e.code(), Some(&SqlState::INVALID_PASSWORD), "{e}");
        let db = e.as_db_error().unwrap();
        assert_eq!(db.message().replace(name, "NAME"), wrong);
    }
    // psql with the password in the environment.
    let out = psql_as_ops(
        &env,
        &["-c", "SHOW VERSION"],
        &[("PGPASSWORD", "s3cret pässword")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("onetrip "));
    let out = psql_as_ops(&env, &["-c", "SHOW VERSION"], &[("PGPASSWORD", "nope")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("password authentication failed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_login_checks_the_password() {
    check_password_auth(AdminAuth::ScramSha256).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_login_checks_the_password() {
    check_password_auth(AdminAuth::Md5).await;
}

/// `RESET STATS` is for users marked for it; the others read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_marked_users_reset_stats() {
    let env = Env::start_with(PgOptions::default(), |cfg| {
        let user = |name: &str, reset_stats| AdminUser {
            name: name.into(),
            reset_stats,
            ..Default::default()
        };
        cfg.admin.users = vec![user("viewer", false), user("boss", true)];
    })
    .await;
    env.psql_ok(true, &["-c", "select 1"]);
    env.settle(0).await;
    let viewer = try_admin(&env, "viewer", None).await.unwrap();
    let e = viewer.simple_query("RESET STATS").await.unwrap_err();
    let db = e.as_db_error().expect("an error from the console");
    assert_eq!(db.code(), &SqlState::INSUFFICIENT_PRIVILEGE);
    assert!(db.message().contains("reset_stats"), "{}", db.message());
    let total = |sets: Vec<Rows>| num(sets[0].last().unwrap(), "client_round_trips");
    assert_eq!(total(show(&viewer, "SHOW STATS").await), 1, "nothing reset");
    let boss = try_admin(&env, "boss", None).await.unwrap();
    boss.simple_query("RESET STATS").await.unwrap();
    assert_eq!(total(show(&viewer, "SHOW STATS").await), 0);
}

/// A console anyone could reach without a password is refused at start:
/// exit status 2, the user named, and the key that would allow it.
#[test]
fn a_remote_listen_address_with_a_trust_admin_is_refused() {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_onetrip-cli"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ONETRIP_") {
            cmd.env_remove(k);
        }
    }
    // Refused before it listens or connects anywhere.
    let out = cmd
        .args(["--listen", "0.0.0.0:0", "--upstream", "127.0.0.1:1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("admin user \"postgres\""), "{err}");
    assert!(err.contains("admin.allow_remote_trust"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_refuses_unlisted_users() {
    let env = Env::start_with(PgOptions::default(), with_users(AdminAuth::Trust)).await;
    assert!(try_admin(&env, "ops", None).await.is_ok());
    let e = try_admin(&env, "mallory", None).await.expect_err("refused");
    assert_eq!(
        e.code(),
        Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_over_tls_with_psql() {
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let env = Env::start_with(PgOptions::default(), |cfg| {
        with_users(AdminAuth::ScramSha256)(cfg);
        cfg.tls.cert_file = Some(cert.clone());
        cfg.tls.key_file = Some(key.clone());
    })
    .await;
    let out = psql_as_ops(
        &env,
        &["-c", "\\conninfo", "-c", "show version"],
        &[("PGSSLMODE", "require"), ("PGPASSWORD", "s3cret pässword")],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("SSL connection") && text.contains("onetrip "),
        "{text}"
    );
}

/// Startup packet for the console, as raw bytes.
fn startup(user: &str) -> Vec<u8> {
    onetrip_tests::raw::startup(user, "onetrip")
}

/// Reads messages until one with `tag`; returns the tags seen.
async fn read_until(s: &mut tokio::net::TcpStream, tag: u8) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut tags = Vec::new();
    loop {
        let mut head = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut head))
            .await
            .unwrap()
            .unwrap();
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize - 4;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.unwrap();
        tags.push(head[0]);
        if head[0] == tag {
            return tags;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_protocol_errors_resync_or_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = Env::start().await;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", env.proxy_port()))
        .await
        .unwrap();
    s.write_all(&startup("postgres")).await.unwrap();
    let tags = read_until(&mut s, b'Z').await;
    assert_eq!(tags.first(), Some(&b'R'));
    assert!(tags.contains(&b'S') && tags.contains(&b'K'), "{tags:?}");
    // Parse, Bind, Execute, Sync: one error, then ReadyForQuery.
    let mut batch = Vec::new();
    for (t, body) in [
        (b'P', &b"\0SHOW STATS\0\0\0"[..]),
        (b'B', b"\0\0\0\0\0\0\0\0\0\0"),
        (b'E', b"\0\0\0\0\0"),
        (b'S', b""),
    ] {
        batch.push(t);
        batch.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        batch.extend_from_slice(body);
    }
    s.write_all(&batch).await.unwrap();
    assert_eq!(read_until(&mut s, b'Z').await, b"EZ");
    // An empty query string, then a query.
    s.write_all(b"Q\0\0\0\x05\0").await.unwrap();
    assert_eq!(read_until(&mut s, b'Z').await, b"IZ");
    s.write_all(b"Q\0\0\0\x12show version;\0").await.unwrap();
    assert_eq!(read_until(&mut s, b'Z').await, b"TDCZ");
    // An unknown message type: a FATAL error, then the connection closes.
    s.write_all(b"z\0\0\0\x04").await.unwrap();
    assert_eq!(read_until(&mut s, b'E').await, b"E");
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0);
    // An absurd length: closed, and the console still serves others.
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", env.proxy_port()))
        .await
        .unwrap();
    s.write_all(&startup("postgres")).await.unwrap();
    read_until(&mut s, b'Z').await;
    s.write_all(b"Q\x7f\xff\xff\xff").await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0);
    let c = try_admin(&env, "postgres", None).await.unwrap();
    assert_eq!(show(&c, "SHOW VERSION").await.len(), 1);
}
