//! Limits a client can't push the proxy past: message sizes before
//! authentication.

use std::time::Duration;

use onetrip_tests::{Env, PgOptions, assert_serving, raw};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

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
