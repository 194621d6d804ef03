//! Which relay a session gets: its worker thread's own epoll for plain TCP,
//! the runtime for what needs a timer or polling; the same answers either
//! way.

use onetrip::config::Config;
use onetrip_tests::{Env, connect, simple_rows};

/// `relay` of each client session, from the admin console.
async fn relays(env: &Env) -> Vec<String> {
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let admin = connect(&dsn).await;
    let rows = admin.simple_query("SHOW CLIENTS").await.unwrap();
    let mut out = Vec::new();
    for m in &rows {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m
            && r.get("database") != Some("onetrip")
        {
            out.push(r.get("relay").unwrap_or("NULL").to_owned());
        }
    }
    out
}

/// A big result, an error, and what follows it, as text.
async fn answers(dsn: &str) -> Vec<String> {
    let c = connect(dsn).await;
    let mut answers = Vec::new();
    let big = c
        .simple_query("select g, repeat('x', g % 100) from generate_series(1, 20000) g")
        .await
        .unwrap();
    let rows = simple_rows(&big);
    answers.push(format!("{} rows, last {:?}", rows.len(), rows.last()));
    let err = c.simple_query("select 1/0").await.unwrap_err();
    answers.push(format!("{:?}", err.as_db_error().map(|e| e.code().code())));
    let after = c.simple_query("select 'still here'").await.unwrap();
    answers.push(format!("{:?}", simple_rows(&after)));
    answers
}

/// The relays of `tweak`'s proxy's one session, and whether its answers
/// were the server's own.
async fn relayed(tweak: impl FnOnce(&mut Config)) -> (Vec<String>, bool) {
    let env = Env::start_with(Default::default(), tweak).await;
    let c = connect(&env.proxy_dsn()).await;
    c.simple_query("select 1").await.unwrap();
    let relay = relays(&env).await;
    drop(c);
    let same = answers(&env.proxy_dsn()).await == answers(&env.direct_dsn()).await;
    (relay, same)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_tcp_relays_through_the_workers_epoll_the_rest_through_the_runtime() {
    assert_eq!(relayed(|_| {}).await, (vec!["epoll".to_owned()], true));
    let polling = relayed(|c| c.upstream.busy_poll = std::time::Duration::from_micros(300));
    assert_eq!(
        polling.await,
        (vec!["runtime".to_owned()], true),
        "busy_poll needs the runtime"
    );
    let delayed = relayed(|c| c.upstream.rtt = std::time::Duration::from_millis(1));
    assert_eq!(
        delayed.await,
        (vec!["runtime".to_owned()], true),
        "a simulated delay needs a timer"
    );
}

/// Should a worker's own epoll fail, its sessions go on through the
/// runtime with the same answers, new sessions too, and timers (a
/// simulated round trip's) still fire on that worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_worker_epoll_hands_its_sessions_to_the_runtime() {
    let env = Env::start().await;
    let delayed = env
        .start_proxy(|c| c.upstream.rtt = std::time::Duration::from_millis(1))
        .await;
    let c = connect(&env.proxy_dsn()).await;
    c.simple_query("select 1").await.unwrap();
    assert_eq!(relays(&env).await, ["epoll"]);
    let workers = env.workers.as_ref().expect("workers");
    for h in workers.handles() {
        h.spawn(async { onetrip::worker::fail_next_wait() })
            .await
            .unwrap();
    }
    // The next wait fails: any wake-up of the worker, such as a query.
    let rows = c.simple_query("select 'after'").await.unwrap();
    assert_eq!(simple_rows(&rows), [[Some("after".to_owned())]]);
    assert_eq!(relays(&env).await, ["runtime"], "given back to its task");
    assert_eq!(
        answers(&env.proxy_dsn()).await,
        answers(&env.direct_dsn()).await
    );
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        delayed.local_addr().port()
    );
    let slow = connect(&dsn).await;
    let rows = slow.simple_query("select 'delayed'").await.unwrap();
    assert_eq!(simple_rows(&rows), [[Some("delayed".to_owned())]]);
}
