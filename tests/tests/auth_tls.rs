//! Password authentication passed through, and TLS terminated at the proxy.

use std::{process::Command, time::Duration};

use onetrip_tests::{Env, PgOptions, connect, raw};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_postgres::error::SqlState;

const HBA: &str = "local all all trust\n\
                   host all scram_user 127.0.0.1/32 scram-sha-256\n\
                   host all md5_user 127.0.0.1/32 md5\n\
                   host all clear_user 127.0.0.1/32 password\n\
                   host all postgres 127.0.0.1/32 trust\n";

/// A server that asks for passwords, with one user per method.
async fn env_with_users(tweak: impl FnOnce(&mut onetrip::Config)) -> Env {
    let env = Env::start_with(
        PgOptions {
            hba: Some(HBA.into()),
            ..Default::default()
        },
        tweak,
    )
    .await;
    connect(&env.dsn(false))
        .await
        .batch_execute(
            "set password_encryption = 'scram-sha-256'; create user scram_user password 'sCr@m pass'; \
             set password_encryption = 'md5'; create user md5_user password 'md5 pass'; \
             create user clear_user password 'clear pass';",
        )
        .await
        .unwrap();
    env
}

fn port(env: &Env, via: bool) -> u16 {
    if via { env.proxy_port() } else { env.pg.port() }
}

/// `current_user` on success, the SQLSTATE on failure.
async fn login(
    env: &Env,
    via: bool,
    user: &str,
    password: &str,
) -> Result<String, Option<SqlState>> {
    let dsn = format!(
        "host=127.0.0.1 port={} user={user} password='{password}' dbname=postgres",
        port(env, via)
    );
    match tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await {
        Ok((c, conn)) => {
            tokio::spawn(conn);
            Ok(c.query_one("select current_user::text", &[])
                .await
                .unwrap()
                .get(0))
        }
        Err(e) => Err(e.code().cloned()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_md5_and_cleartext_users_log_in_as_direct() {
    let env = env_with_users(|_| {}).await;
    for (user, password) in [
        ("scram_user", "sCr@m pass"),
        ("md5_user", "md5 pass"),
        ("clear_user", "clear pass"),
    ] {
        for (pw, expect) in [
            (password, Ok(user.to_owned())),
            ("wrong", Err(Some(SqlState::INVALID_PASSWORD))),
        ] {
            let direct = login(&env, false, user, pw).await;
            let proxied = login(&env, true, user, pw).await;
            assert_eq!(direct, proxied, "{user} with password {pw:?}");
            assert_eq!(proxied, expect, "{user} with password {pw:?}");
        }
    }
    // libpq's SCRAM through the proxy too.
    psql_logs_in_with_scram(&env);
}

/// In transaction pooling, users of `[pool] users` are checked by onetrip
/// and share the server connections it opens with their passwords, whatever
/// the server asks for; a wrong password gets PostgreSQL's error. A user
/// not listed logs in as before, its answers relayed to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_users_log_in_with_their_passwords_and_share_connections() {
    let listed = [("scram_user", "sCr@m pass"), ("md5_user", "md5 pass")];
    let env = env_with_users(|c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 2;
        c.pool.users = listed
            .iter()
            .map(|(name, password)| onetrip::config::PoolUser {
                name: name.to_string(),
                password: password.to_string(),
            })
            .collect();
    })
    .await;
    for (user, password) in listed {
        let dsn = format!(
            "host=127.0.0.1 port={} user={user} password='{password}' dbname=postgres",
            env.proxy_port()
        );
        let mut clients = Vec::new();
        for _ in 0..6 {
            let (c, conn) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            clients.push(c);
        }
        let mut backends = std::collections::HashSet::new();
        for c in &clients {
            let row = c
                .query_one("select current_user::text, pg_backend_pid()", &[])
                .await
                .unwrap();
            assert_eq!(row.get::<_, String>(0), user);
            backends.insert(row.get::<_, i32>(1));
        }
        // Each on a backend of its own would be six.
        assert!(backends.len() <= 2, "{user}: {backends:?}");
        assert_eq!(
            login(&env, true, user, "wrong").await,
            Err(Some(SqlState::INVALID_PASSWORD)),
            "{user}"
        );
    }
    assert_eq!(
        login(&env, true, "clear_user", "clear pass").await,
        Ok("clear_user".to_owned())
    );
    // libpq's SCRAM against onetrip's.
    psql_logs_in_with_scram(&env);
}

/// psql (libpq's SCRAM) logs in through the proxy as `scram_user`.
fn psql_logs_in_with_scram(env: &Env) {
    let out = psql(
        env,
        true,
        "scram_user",
        &[("PGPASSWORD", "sCr@m pass")],
        "select current_user",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "scram_user");
}

fn psql(
    env: &Env,
    via: bool,
    user: &str,
    vars: &[(&str, &str)],
    sql: &str,
) -> std::process::Output {
    let mut cmd: Command = env.pg.tool("psql");
    cmd.args([
        "-X",
        "-A",
        "-t",
        "-h",
        "127.0.0.1",
        "-p",
        &port(env, via).to_string(),
        "-U",
        user,
        "-d",
        "postgres",
    ])
    .args(["-c", sql])
    .env("PGCONNECT_TIMEOUT", "10")
    .env_remove("PGPASSWORD")
    .env_remove("PGSSLMODE");
    cmd.envs(vars.iter().copied());
    cmd.output().expect("run psql")
}

/// The first answer byte to an 8-byte request with `code` (SSL or GSSENC).
async fn answer_to(port: u16, code: u32) -> (u8, TcpStream) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut req = 8u32.to_be_bytes().to_vec();
    req.extend_from_slice(&code.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut b = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    (b[0], s)
}

const SSL_REQUEST: u32 = 80877103;
const GSSENC_REQUEST: u32 = 80877104;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_self_signed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let env = env_with_users(|cfg| {
        cfg.tls.cert_file = Some(cert.clone());
        cfg.tls.key_file = Some(key.clone());
    })
    .await;
    let (answer, _) = answer_to(env.proxy_port(), SSL_REQUEST).await;
    assert_eq!(answer, b'S');
    // psql insisting on TLS gets it, and SCRAM still works across it.
    let require = [("PGSSLMODE", "require"), ("PGPASSWORD", "sCr@m pass")];
    let out = psql(&env, true, "scram_user", &require, "\\conninfo");
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(info.contains("SSL connection"), "{info}");
    // With a CA check against the generated certificate: it is the one served.
    let verify = [
        ("PGSSLMODE", "verify-full"),
        ("PGSSLROOTCERT", cert.to_str().unwrap()),
        ("PGPASSWORD", "md5 pass"),
    ];
    let sql = "select current_user, count(*) from generate_series(1, 1000)";
    let tls = psql(&env, true, "md5_user", &verify, sql);
    assert!(
        tls.status.success(),
        "{}",
        String::from_utf8_lossy(&tls.stderr)
    );
    let plain = psql(&env, false, "md5_user", &[("PGPASSWORD", "md5 pass")], sql);
    assert_eq!(tls.stdout, plain.stdout);
    assert_eq!(String::from_utf8_lossy(&tls.stdout).trim(), "md5_user|1000");
}

/// `[tls] require`: a client that doesn't negotiate TLS gets PostgreSQL's
/// error for a hostssl-only server; one that does gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_tls_refuses_plain_clients() {
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let env = env_with_users(|cfg| {
        cfg.tls.cert_file = Some(cert.clone());
        cfg.tls.key_file = Some(key.clone());
        cfg.tls.require = true;
    })
    .await;
    // A plain startup packet: PostgreSQL's error, then the connection closes.
    let mut s = TcpStream::connect(("127.0.0.1", env.proxy_port()))
        .await
        .unwrap();
    s.write_all(&raw::startup("postgres", "postgres"))
        .await
        .unwrap();
    let msgs = raw::read_to_end(&mut s, Duration::from_secs(10)).await;
    let errors = raw::errors(&msgs);
    assert_eq!(errors.len(), 1, "{msgs:?}");
    let (severity, code, message) = &errors[0];
    assert_eq!((severity.as_str(), code.as_str()), ("FATAL", "28000"));
    assert_eq!(
        message,
        "no pg_hba.conf entry for host \"127.0.0.1\", user \"postgres\", database \"postgres\", no encryption"
    );
    let detail = raw::field(&msgs[0].1, b'D').unwrap_or_default();
    assert!(detail.contains("[tls] require"), "{detail}");
    // The admin console too.
    let e = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=postgres dbname=onetrip",
            env.proxy_port()
        ),
        tokio_postgres::NoTls,
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(
        e.code(),
        Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
    );
    // psql: refused in plain text, let in over TLS, with its password.
    let pw = [("PGPASSWORD", "sCr@m pass"), ("PGSSLMODE", "disable")];
    let out = psql(&env, true, "scram_user", &pw, "select 1");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no encryption"), "{err}");
    let pw = [("PGPASSWORD", "sCr@m pass"), ("PGSSLMODE", "require")];
    let out = psql(&env, true, "scram_user", &pw, "select current_user");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "scram_user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tls_config_ssl_and_gss_requests_get_n() {
    let env = Env::start().await;
    for code in [SSL_REQUEST, GSSENC_REQUEST] {
        let (proxied, mut s) = answer_to(env.proxy_port(), code).await;
        // A server built with GSSAPI says 'G'; the proxy can't do GSS encryption.
        assert_eq!(proxied, b'N', "request {code}");
        if code == SSL_REQUEST {
            assert_eq!(answer_to(env.pg.port(), code).await.0, b'N');
        }
        // The client may go on in plain text on the same connection.
        s.write_all(&raw::startup("postgres", "postgres"))
            .await
            .unwrap();
        loop {
            let (tag, body) = raw::read_message(&mut s, Duration::from_secs(10))
                .await
                .expect("startup answer");
            assert_ne!(tag, b'E', "{:?}", raw::fields(&body));
            if tag == b'Z' {
                break;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tls_when_required() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = onetrip_tests::server_cert_files(dir.path());
    let conf = vec![
        "ssl = on".to_owned(),
        format!("ssl_cert_file = '{}'", cert.display()),
        format!("ssl_key_file = '{}'", key.display()),
    ];
    let env = Env::start_with(
        PgOptions {
            conf,
            ..Default::default()
        },
        |cfg| {
            cfg.upstream.tls = onetrip::config::UpstreamTls::Require;
        },
    )
    .await;
    // The server sees TLS on the proxy's connection, none on the direct one.
    let sql = "select ssl from pg_stat_ssl where pid = pg_backend_pid()";
    let direct: bool = connect(&env.dsn(false))
        .await
        .query_one(sql, &[])
        .await
        .unwrap()
        .get(0);
    let proxied: bool = connect(&env.dsn(true))
        .await
        .query_one(sql, &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!((direct, proxied), (false, true));
}
