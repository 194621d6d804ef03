//! Idle clients hold no buffers: a session gives its read room and its
//! buffers (`Bufs`) back as soon as both its sockets have nothing more to
//! say and nothing is in flight (`relay::epoll::spare::rest`), and a
//! worker's look takes them back from any quiet session that kept them
//! (`relay::epoll::sweep`). Counted by the workers themselves
//! (`onetrip::relay::epoll::rooms_held`, the whole process: this binary
//! holds this one test so that no other session is counted).

use std::time::Duration;

use onetrip::config::PoolMode;
use onetrip_tests::{Env, raw};
use tokio::{io::AsyncWriteExt, net::TcpStream};

/// Logs `n` clients in on `port` and has each run one query; they stay
/// connected, idle.
async fn idle_clients(port: u16, n: usize) -> Vec<TcpStream> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = raw::connect_ready(port).await;
        c.write_all(&raw::query("select 1")).await.unwrap();
        let answer = raw::read_to_z(&mut c).await;
        assert!(
            raw::errors(&answer).is_empty(),
            "{:?}",
            raw::errors(&answer)
        );
        clients.push(c);
    }
    clients
}

/// Waits until the workers count `want` sessions holding read room; the
/// count they settled on otherwise.
async fn settles_at(want: usize) -> Result<(), usize> {
    onetrip_tests::settles_at(want, onetrip::relay::epoll::rooms_held).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_clients_hold_no_read_room_in_either_mode() {
    let env = Env::start().await;
    let port = env.proxy_port();
    // One client stops in the middle of a message: its read room holds
    // it, so it is counted. Only when the workers have counted it are
    // the others' counts known to be zero, not yet made.
    let mut partial = raw::connect_ready(port).await;
    let query = raw::query("select 'partial'");
    partial.write_all(&query[..7]).await.unwrap();
    let session = idle_clients(port, 100).await;
    assert_eq!(
        settles_at(1).await,
        Ok(()),
        "session mode: sessions holding read room besides the one mid-message"
    );

    let pooled = env
        .start_proxy(|c| {
            c.pool.mode = PoolMode::Transaction;
            c.pool.pool_size = 4;
        })
        .await;
    let clients = idle_clients(pooled.local_addr().port(), 1000).await;
    assert_eq!(
        settles_at(1).await,
        Ok(()),
        "transaction mode: sessions holding read room besides the one mid-message"
    );

    // The one mid-message finishes it and is answered; then it is idle too.
    partial.write_all(&query[7..]).await.unwrap();
    let answer = raw::read_to_z(&mut partial).await;
    assert!(raw::errors(&answer).is_empty());
    assert_eq!(
        settles_at(0).await,
        Ok(()),
        "no idle session holds read room"
    );
    drop((clients, session, partial));
    pooled.shutdown(Duration::from_secs(5)).await;
}
