//! Limits a client can't push the proxy past: message sizes before
//! authentication, the number of client connections, the rows of the
//! statistics.

use std::time::Duration;

use onetrip_tests::{Env, PgOptions, assert_serving, connect, raw};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_postgres::error::SqlState;

const WAIT: Duration = Duration::from_secs(10);

/// Only `clear_user` is asked for a password (cleartext).
const HBA: &str = "local all all trust\n\
                   host all clear_user 127.0.0.1/32 password\n\
                   host all postgres 127.0.0.1/32 trust\n";

/// The 'R' authentication code of a message body.
fn auth_code(body: &[u8]) -> i32 {
    i32::from_be_bytes(body[..4].try_into().unwrap())
}

/// Sends a message header declaring `len` bytes and a few bytes of its
/// body, then reads what comes back until the proxy closes the connection.
async fn declare_and_read(s: &mut TcpStream, tag: u8, len: u32) -> Vec<(u8, Vec<u8>)> {
    let mut head = vec![tag];
    head.extend_from_slice(&len.to_be_bytes());
    head.extend_from_slice(b"password");
    s.write_all(&head).await.unwrap();
    raw::read_to_end(s, WAIT).await
}

/// A password message declaring 100 MB is refused on its header: the
/// client gets an error at once, though it never sends the rest (a proxy
/// that waited for the 100 MB would time the test out), and the proxy goes
/// on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_password_message_is_refused_before_it_is_read() {
    let env = Env::start_with(
        PgOptions {
            hba: Some(HBA.into()),
            ..Default::default()
        },
        |_| {},
    )
    .await;
    onetrip_tests::connect(&env.direct_dsn())
        .await
        .batch_execute("create user clear_user password 'clear pass'")
        .await
        .unwrap();
    for _ in 0..3 {
        let mut s = TcpStream::connect(("127.0.0.1", env.proxy_port()))
            .await
            .unwrap();
        s.write_all(&raw::startup("clear_user", "postgres"))
            .await
            .unwrap();
        let (t, body) = raw::read_message(&mut s, WAIT).await.expect("a request");
        assert_eq!((t, auth_code(&body)), (b'R', 3), "asked for a password");
        let got = declare_and_read(&mut s, b'p', 100_000_000).await;
        let errors = raw::errors(&got);
        assert_eq!(errors.len(), 1, "{got:?}");
        let (severity, code, message) = &errors[0];
        assert_eq!((severity.as_str(), code.as_str()), ("FATAL", "54000"));
        assert!(message.contains("65536"), "{message}");
    }

    // The admin console, before its password exchange is over, the same.
    let admin = Env::start_with(PgOptions::default(), |c| {
        c.admin.auth = onetrip::config::AdminAuth::ScramSha256;
        c.admin.users[0].password = "pw".into();
    })
    .await;
    let mut s = TcpStream::connect(("127.0.0.1", admin.proxy_port()))
        .await
        .unwrap();
    s.write_all(&raw::startup("postgres", "onetrip"))
        .await
        .unwrap();
    let (t, body) = raw::read_message(&mut s, WAIT).await.expect("a request");
    assert_eq!((t, auth_code(&body)), (b'R', 10), "SASL");
    let got = declare_and_read(&mut s, b'p', 100_000_000).await;
    let codes: Vec<_> = raw::errors(&got).into_iter().map(|e| e.1).collect();
    assert_eq!(codes, ["54000"], "{got:?}");

    // A startup packet over PostgreSQL's 10,000 bytes.
    let mut s = TcpStream::connect(("127.0.0.1", env.proxy_port()))
        .await
        .unwrap();
    s.write_all(&100_000u32.to_be_bytes()).await.unwrap();
    s.write_all(&196608u32.to_be_bytes()).await.unwrap();
    let got = raw::read_to_end(&mut s, WAIT).await;
    let errors = raw::errors(&got);
    assert_eq!(errors.len(), 1, "{got:?}");
    assert_eq!(errors[0].1, "08P01");
    assert_eq!(errors[0].2, "invalid length of startup packet");

    assert_serving(&env.proxy_dsn()).await;
    let mut one = [0u8; 1];
    // The refused connections are closed, not left hanging.
    assert_eq!(s.read(&mut one).await.unwrap_or(0), 0);
}

/// Past `[limits] max_client_connections`, a client gets PostgreSQL's
/// 53300; the clients within it go on, and a place that frees up is taken
/// by the next client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_client_connections_a_client_gets_53300() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.limits.max_client_connections = 3;
    })
    .await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(connect(&env.proxy_dsn()).await);
    }
    for _ in 0..5 {
        let e = tokio_postgres::connect(&env.proxy_dsn(), tokio_postgres::NoTls)
            .await
            .err()
            .expect("refused");
        assert_eq!(e.code(), Some(&SqlState::TOO_MANY_CONNECTIONS), "{e}");
        let db = e.as_db_error().unwrap();
        assert_eq!(db.message(), "sorry, too many clients already");
    }
    // psql, which asks for TLS first, gets the same error.
    let out = env.psql(true, &["-c", "select 1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sorry, too many clients already"), "{err}");
    // The admin console counts too.
    let admin = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let e = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .err()
        .expect("refused");
    assert_eq!(e.code(), Some(&SqlState::TOO_MANY_CONNECTIONS), "{e}");
    for c in &clients {
        c.simple_query("select 1").await.unwrap();
    }
    assert_eq!(
        env.proxy().client_connections(),
        3,
        "refused ones hold none"
    );
    drop(clients.pop());
    // The closed client's place is given back as its session ends.
    for _ in 0..250 {
        if env.proxy().client_connections() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let again = tokio_postgres::connect(&env.proxy_dsn(), tokio_postgres::NoTls)
        .await
        .map(|(c, conn)| {
            tokio::spawn(conn);
            c
        });
    let again = again.expect("a freed place is taken");
    again.simple_query("select 1").await.unwrap();

    // Connections that say nothing, past the limit, wait to be refused;
    // past as many again, one is refused at once, unread.
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(
            TcpStream::connect(("127.0.0.1", env.proxy_port()))
                .await
                .unwrap(),
        );
    }
    let mut s = TcpStream::connect(("127.0.0.1", env.proxy_port()))
        .await
        .unwrap();
    let got = raw::read_to_end(&mut s, WAIT).await;
    let errors = raw::errors(&got);
    assert_eq!(errors.len(), 1, "{got:?}");
    assert_eq!(errors[0].1, "53300");
    drop((silent, again, clients));
    assert_serving_when_free(&env).await;
}

/// Once places are given back, a client gets in again.
async fn assert_serving_when_free(env: &Env) {
    for _ in 0..250 {
        if let Ok((c, conn)) =
            tokio_postgres::connect(&env.proxy_dsn(), tokio_postgres::NoTls).await
        {
            tokio::spawn(conn);
            c.simple_query("select 1").await.unwrap();
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no place freed");
}

/// Names sent by clients that never get in make no statistics rows; the
/// rows of authenticated ones stop at `[limits] max_stats_rows`, the rest
/// counting in "(other)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_rows_are_for_authenticated_sessions_and_capped() {
    let hba = "local all all trust\n\
               host all postgres 127.0.0.1/32 trust\n\
               host all u1,u2,u3,u4,u5 127.0.0.1/32 trust\n\
               host all all 127.0.0.1/32 password\n";
    let env = Env::start_with(
        PgOptions {
            hba: Some(hba.into()),
            ..Default::default()
        },
        |c| c.limits.max_stats_rows = 3,
    )
    .await;
    let direct = connect(&env.direct_dsn()).await;
    for u in 1..=5 {
        direct
            .batch_execute(&format!("create user u{u}"))
            .await
            .unwrap();
    }
    let rows = || -> Vec<String> {
        let all = env.proxy().stats().by_database_user().into_iter();
        all.map(|((d, u), s)| format!("{d}/{u}:{}", s.sessions))
            .collect()
    };
    // 300 strangers with names of their own, all refused by the server.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..300 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let dsn = format!(
            "host=127.0.0.1 port={} user=x{seed:x} dbname=db{seed:x} password=nope",
            env.proxy_port()
        );
        let e = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .err()
            .expect("refused by the server");
        assert_eq!(e.code(), Some(&SqlState::INVALID_PASSWORD), "{e}");
    }
    env.settle(0).await;
    assert_eq!(rows(), ["(unauthenticated)/(unauthenticated):300"]);
    // Five users: three rows of their own, then "(other)".
    for u in 1..=5 {
        let dsn = format!(
            "host=127.0.0.1 port={} user=u{u} dbname=postgres",
            env.proxy_port()
        );
        connect(&dsn).await.simple_query("select 1").await.unwrap();
    }
    env.settle(0).await;
    assert_eq!(
        rows(),
        [
            "(other)/(other):2",
            "(unauthenticated)/(unauthenticated):300",
            "postgres/u1:1",
            "postgres/u2:1",
            "postgres/u3:1",
        ]
    );
    assert_serving(&env.proxy_dsn()).await;
}
