//! Cancel keys: every client gets a key of its own from onetrip, which
//! cancels the queries of that client only, and nothing once it has left,
//! even when its backend now serves another client (`[upstream] reuse`).

use std::time::Duration;

use onetrip_tests::{Env, PgOptions, cancel_a_sleep, connect, raw, wait_sleeping};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_postgres::error::SqlState;

const WAIT: Duration = Duration::from_secs(10);

/// A trust-auth startup through the proxy: the stream and the key its
/// BackendKeyData gave (pid, secret).
async fn connect_with_key(port: u16) -> (TcpStream, (i32, Vec<u8>)) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&raw::startup("postgres", "postgres"))
        .await
        .unwrap();
    let mut key = None;
    loop {
        let (t, body) = raw::read_message(&mut s, WAIT).await.expect("greeting");
        assert_ne!(t, b'E', "startup failed: {:?}", raw::fields(&body));
        if t == b'K' {
            let pid = i32::from_be_bytes(body[..4].try_into().unwrap());
            key = Some((pid, body[4..].to_vec()));
        }
        if t == b'Z' {
            return (s, key.expect("a BackendKeyData"));
        }
    }
}

/// Sends a CancelRequest with `key` to the proxy and waits until it has
/// closed the connection (it has dealt with the request by then).
async fn send_cancel(port: u16, (pid, secret): &(i32, Vec<u8>)) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut packet = ((12 + secret.len()) as u32).to_be_bytes().to_vec();
    packet.extend_from_slice(&80877102u32.to_be_bytes());
    packet.extend_from_slice(&pid.to_be_bytes());
    packet.extend_from_slice(secret);
    s.write_all(&packet).await.unwrap();
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut sink)).await;
}

/// A client's own cancel key cancels its running query.
async fn own_cancel_works(env: &Env) {
    let watcher = connect(&env.direct_dsn()).await;
    let c = connect(&env.proxy_dsn()).await;
    let code = cancel_a_sleep(c, &watcher).await;
    assert_eq!(code, Some(SqlState::QUERY_CANCELED));
}

/// The attack of a kept connection: a client connects, notes its key and
/// leaves; the next client gets the same backend; the first client's key
/// must not cancel the second client's query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departed_clients_key_cancels_nothing_on_its_kept_backend() {
    let env = Env::start_with(PgOptions::default(), |c| c.upstream.reuse = true).await;
    let port = env.proxy_port();
    let watcher = connect(&env.direct_dsn()).await;

    let (mut a, key_a) = connect_with_key(port).await;
    a.write_all(&raw::query("select 1")).await.unwrap();
    while raw::read_message(&mut a, WAIT).await.expect("answer").0 != b'Z' {}
    a.write_all(&raw::message(b'X', &[])).await.unwrap();
    drop(a);
    env.wait_kept(1).await;

    let (mut b, key_b) = connect_with_key(port).await;
    assert_eq!(key_b.0, key_a.0, "the same backend, its pid in both keys");
    assert_ne!(key_b.1, key_a.1, "but a secret of each client's own");
    b.write_all(&raw::query("select pg_sleep(1.5)"))
        .await
        .unwrap();
    wait_sleeping(&watcher, key_a.0).await;
    send_cancel(port, &key_a).await;
    let answer = raw::read_to_z(&mut b).await;
    assert!(
        raw::errors(&answer).is_empty(),
        "the old key cancelled the next client's query: {:?}",
        raw::errors(&answer)
    );

    // The second client's own key still cancels its query.
    b.write_all(&raw::query("select pg_sleep(30)"))
        .await
        .unwrap();
    wait_sleeping(&watcher, key_b.0).await;
    send_cancel(port, &key_b).await;
    let answer = raw::read_to_z(&mut b).await;
    let codes: Vec<_> = raw::errors(&answer).into_iter().map(|e| e.1).collect();
    assert_eq!(codes, ["57014"], "cancelled by its own key");
    drop(b);

    own_cancel_works(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_cancel_works_without_reuse() {
    let env = Env::start().await;
    own_cancel_works(&env).await;
    // The key goes with the client: nothing remains to cancel with.
    let (mut a, key_a) = connect_with_key(env.proxy_port()).await;
    a.write_all(&raw::message(b'X', &[])).await.unwrap();
    drop(a);
    env.settle(0).await;
    assert_eq!(
        env.proxy().cancel_keys(),
        0,
        "forgotten when the client left"
    );
    send_cancel(env.proxy_port(), &key_a).await;
    onetrip_tests::assert_serving(&env.proxy_dsn()).await;
}
