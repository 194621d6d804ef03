//! Clients that go quiet: one idle past `[limits] client_idle_timeout` is
//! closed with PostgreSQL's 57P05 (never one inside a transaction), and
//! one that stops reading can't hold its session past
//! `[limits] client_write_timeout` once the session ends.

use std::time::Duration;

use onetrip_tests::{Env, PgOptions, assert_serving, raw};
use tokio::io::AsyncWriteExt;

const WAIT: Duration = Duration::from_secs(20);
const IDLE: Duration = Duration::from_millis(300);

/// Both relays: the worker's own epoll, and the runtime's (which a
/// simulated round-trip time needs); and transaction pooling, where an
/// idle client waits in the worker's relay with no server connection.
async fn envs() -> Vec<Env> {
    let mut envs = Vec::new();
    for (rtt, pooled) in [
        (Duration::ZERO, false),
        (Duration::from_micros(10), false),
        (Duration::ZERO, true),
    ] {
        envs.push(
            Env::start_with(PgOptions::default(), move |c| {
                c.limits.client_idle_timeout = IDLE;
                c.upstream.rtt = rtt;
                c.upstream.reuse = true;
                if pooled {
                    c.pool.mode = onetrip::config::PoolMode::Transaction;
                    c.pool.pool_size = 3;
                }
            })
            .await,
        );
    }
    envs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_gets_57p05_and_one_in_a_transaction_stays() {
    for env in envs().await {
        let port = env.proxy_port();
        let mut idle = raw::connect_ready(port).await;
        idle.write_all(&raw::query("select 1")).await.unwrap();
        raw::read_to_z(&mut idle).await;
        // A transaction the server has seen, and one held here (a BEGIN
        // not yet sent): neither is idle.
        let mut open = raw::connect_ready(port).await;
        open.write_all(&raw::query("begin; select 1"))
            .await
            .unwrap();
        raw::read_to_z(&mut open).await;
        let mut held = raw::connect_ready(port).await;
        held.write_all(&raw::query("begin")).await.unwrap();
        raw::read_to_z(&mut held).await;

        let got = raw::read_to_end(&mut idle, WAIT).await;
        let errors = raw::errors(&got);
        assert_eq!(errors.len(), 1, "{got:?}");
        let (severity, code, message) = &errors[0];
        assert_eq!((severity.as_str(), code.as_str()), ("FATAL", "57P05"));
        assert_eq!(
            message,
            "terminating connection due to idle-session timeout"
        );

        // Idle for as long again after the first was closed: still there.
        let mut late = raw::connect_ready(port).await;
        raw::read_to_end(&mut late, WAIT).await;
        for s in [&mut open, &mut held] {
            s.write_all(&raw::query("select 2; commit")).await.unwrap();
            let got = raw::read_to_z(s).await;
            assert!(raw::errors(&got).is_empty(), "{got:?}");
            assert_eq!(got.last().unwrap(), &(b'Z', b"I".to_vec()));
        }
        assert_serving(&env.proxy_dsn()).await;
    }
}

/// A client that asked for much and reads none of it, then sends what ends
/// its session (a message over `max_message_bytes`): the FATAL queued
/// behind the unread rows can't be delivered, and the session still ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_hold_its_session() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.limits.client_write_timeout = Duration::from_millis(200);
        c.limits.max_message_bytes = 1024;
        // More held here than the kernel's socket buffers take.
        c.limits.buffer_bytes = 16 << 20;
    })
    .await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], env.proxy_port()));
    let mut s = socket.connect(addr).await.unwrap();
    s.write_all(&raw::startup("postgres", "postgres"))
        .await
        .unwrap();
    raw::read_to_z(&mut s).await;
    let rows = "select repeat('x', 1000) from generate_series(1, 100000)";
    s.write_all(&raw::query(rows)).await.unwrap();
    // Until the proxy holds what the client does not read: past 20 MB, or
    // as much as it will take (nothing more comes for 300 ms: its buffer
    // and the sockets' are full), which may fall short of 20 MB.
    let mut last = (0, 0);
    for _ in 0..500 {
        let sent = env.proxy().stats().total().bytes_from_upstream;
        if sent > 20 << 20 {
            break;
        }
        last = if sent == last.0 {
            (sent, last.1 + 1)
        } else {
            (sent, 0)
        };
        if sent > 0 && last.1 == 15 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut huge = vec![b'Q'];
    huge.extend_from_slice(&(1u32 << 20).to_be_bytes());
    s.write_all(&huge).await.unwrap();
    for _ in 0..1000 {
        if env.proxy().client_connections() == 0 {
            drop(s);
            assert_serving(&env.proxy_dsn()).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the session of a client that stopped reading never ended");
}
