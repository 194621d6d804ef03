//! Failures: a dying or absent upstream, and clients that send nonsense. The
//! client gets a clear error where the protocol allows one, and the proxy goes
//! on serving everyone else.

use std::time::Duration;

use onetrip::{Config, Proxy, config::UpstreamAddress};
use onetrip_tests::{
    Env, assert_serving, connect,
    raw::{self, errors},
};
use tokio::{io::AsyncWriteExt, net::TcpStream};

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_stopped_and_restarted() {
    let mut env = Env::start().await;
    let upstream = env.pg.addr().to_string();
    let (mut idle, mut busy) = idle_and_busy(env.proxy_port()).await;
    let pg = &mut env.pg;
    tokio::task::block_in_place(|| pg.stop());
    // Both sessions end with the server's own FATAL and nothing more, as
    // a direct client's would (a second error makes drivers such as psycopg
    // report two results for one command).
    for s in [&mut idle, &mut busy] {
        let errs = errors(&raw::read_to_end(s, WAIT).await);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(
            (errs[0].0.as_str(), errs[0].1.as_str()),
            ("FATAL", "57P01"),
            "{errs:?}"
        );
    }
    // While it is down, a new session is refused the same way.
    let mut s = TcpStream::connect(("127.0.0.1", env.proxy_port()))
        .await
        .unwrap();
    s.write_all(&raw::startup("postgres", "postgres"))
        .await
        .unwrap();
    let errs = errors(&raw::read_to_end(&mut s, WAIT).await);
    assert!(
        errs.len() == 1 && errs[0].0 == "FATAL" && errs[0].1.starts_with("08"),
        "{errs:?}"
    );
    assert!(errs[0].2.contains(&upstream), "{errs:?}");
    let pg = &mut env.pg;
    tokio::task::block_in_place(|| pg.restart()).expect("restart");
    assert_serving(&env.proxy_dsn()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_upstream_is_a_fatal_08_error() {
    // A port nobody listens on: bound, then released.
    let port = onetrip_embedded::free_port().unwrap();
    let mut cfg = Config::default();
    cfg.listen.address = "127.0.0.1:0".parse().unwrap();
    cfg.upstream.address = UpstreamAddress::Tcp(format!("127.0.0.1:{port}"));
    let proxy = Proxy::start(cfg).await.unwrap();
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        proxy.local_addr().port()
    );
    for _ in 0..2 {
        let err = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .err()
            .expect("connect must fail");
        let db = err
            .as_db_error()
            .expect("an ErrorResponse, not a dropped socket");
        assert_eq!(db.severity(), "FATAL");
        assert_eq!(&db.code().code()[..2], "08", "{db}");
        assert!(db.message().contains(&format!("127.0.0.1:{port}")), "{db}");
    }
    proxy.shutdown(Duration::from_secs(1)).await;
}

/// Two ready sessions: one idle, one inside `pg_sleep(60)`.
async fn idle_and_busy(port: u16) -> (TcpStream, TcpStream) {
    let idle = raw::connect_ready(port).await;
    let mut busy = raw::connect_ready(port).await;
    busy.write_all(&raw::query("select pg_sleep(60)"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    (idle, busy)
}

/// Sends `bytes` on a fresh connection and returns everything until close.
async fn send_and_collect(port: u16, bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(bytes).await.unwrap();
    raw::read_to_end(&mut s, WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_frames_get_an_error_and_a_close() {
    let env = Env::start_with(Default::default(), |cfg| {
        cfg.limits.max_message_bytes = 1 << 20
    })
    .await;
    let port = env.proxy_port();
    // A session that stays open throughout must be unaffected.
    let bystander = connect(&env.proxy_dsn()).await;
    // Not PostgreSQL at all: the length prefix is absurd.
    let errs = errors(&send_and_collect(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await);
    assert!(
        errs.len() == 1 && errs[0].0 == "FATAL" && errs[0].1 == "08P01",
        "{errs:?}"
    );
    // A well-sized packet with an unknown protocol version.
    let mut bad = 16u32.to_be_bytes().to_vec();
    bad.extend_from_slice(&0x0009_0000u32.to_be_bytes());
    bad.extend_from_slice(b"user\0\0\0\0");
    let errs = errors(&send_and_collect(port, &bad).await);
    assert!(errs.len() == 1 && errs[0].1 == "08P01", "{errs:?}");
    // After startup: a message that announces more than max_message_bytes.
    let mut s = raw::connect_ready(port).await;
    let mut huge = vec![b'Q'];
    huge.extend_from_slice(&(64u32 << 20).to_be_bytes());
    huge.extend_from_slice(&[b'x'; 1024]);
    s.write_all(&huge).await.unwrap();
    let errs = errors(&raw::read_to_end(&mut s, WAIT).await);
    assert!(
        errs.len() == 1 && errs[0].0 == "FATAL" && errs[0].1 == "54000",
        "{errs:?}"
    );
    // After startup: an unknown message type.
    let mut s = raw::connect_ready(port).await;
    s.write_all(&raw::message(b'!', b"garbage")).await.unwrap();
    let errs = errors(&raw::read_to_end(&mut s, WAIT).await);
    assert!(
        errs.first()
            .is_some_and(|e| e.0 == "FATAL" && e.1 == "08P01"),
        "{errs:?}"
    );
    // Random bytes after startup, then the client hangs up: the proxy closes.
    let mut s = raw::connect_ready(port).await;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let noise: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let _ = s.write_all(&noise).await;
    let _ = s.shutdown().await;
    raw::read_to_end(&mut s, WAIT).await;
    let one: i32 = bystander.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    assert_serving(&env.proxy_dsn()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_that_never_completes_times_out() {
    let env = Env::start_with(Default::default(), |cfg| {
        cfg.limits.startup_timeout = Duration::from_millis(500)
    })
    .await;
    let port = env.proxy_port();
    // Half a startup packet, then silence.
    let mut stalled = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stalled
        .write_all(&raw::startup("postgres", "postgres")[..10])
        .await
        .unwrap();
    let mut silent = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // Others are served meanwhile.
    assert_serving(&env.proxy_dsn()).await;
    // The proxy closes both (PostgreSQL too sends nothing in this state).
    for s in [&mut stalled, &mut silent] {
        assert!(raw::read_to_end(s, WAIT).await.is_empty());
    }
    assert_serving(&env.proxy_dsn()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_sessions_left_after_the_grace_period() {
    let mut env = Env::start().await;
    let (mut idle, mut busy) = idle_and_busy(env.proxy_port()).await;
    env.stop_proxy(Duration::from_millis(300)).await;
    // Both sessions outlived the grace period: each gets the proxy's FATAL
    // 57P01, then the connection closes (pg_sleep would still be running).
    for s in [&mut idle, &mut busy] {
        let errs = errors(&raw::read_to_end(s, WAIT).await);
        assert_eq!(
            errs.last().map(|e| (e.0.as_str(), e.1.as_str())),
            Some(("FATAL", "57P01")),
            "{errs:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_proxy_closes_its_sessions_and_its_listener() {
    let mut env = Env::start().await;
    let port = env.proxy_port();
    let (mut idle, mut busy) = idle_and_busy(port).await;
    drop(env.proxy.take());
    // An embedding application that drops the proxy gets its connections
    // back at once, not after pg_sleep(60) ends.
    for s in [&mut idle, &mut busy] {
        assert!(raw::read_to_end(s, WAIT).await.is_empty());
    }
    let refused = TcpStream::connect(("127.0.0.1", port)).await;
    assert!(refused.is_err(), "nobody listens any more: {refused:?}");
}
