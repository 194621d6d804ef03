//! Read replicas (`[replicas]`): a real streaming replica of the test's
//! own primary, watched by the proxy, and reads routed to it with
//! read-your-writes.

use std::time::Duration;

use onetrip::config::Consistency;
use onetrip_tests::{
    connect, python_with_psycopg,
    replica::{
        admin_dsn, in_recovery, stat, stop_and_restart, wait_replica_state, with_lying_function,
        with_replica, write_then_read,
    },
    run_py, simple_rows, skip,
};

/// The watcher finds the replica in recovery, with a replay position, and
/// SHOW REPLICAS says so; stopped, it is out; restarted, back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_follows_the_replica() {
    let (env, mut replica) = with_replica(None, |c| {
        c.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let admin = connect(&admin_dsn(&env)).await;
    let rows = simple_rows(&admin.simple_query("SHOW REPLICAS").await.unwrap());
    assert_eq!(rows.len(), 1, "{rows:?}");
    let addr = replica.addr().to_string();
    assert_eq!(rows[0][0].as_deref(), Some(addr.as_str()));
    assert_eq!(rows[0][1].as_deref(), Some("replica"));
    assert_ne!(rows[0][2].as_deref(), Some("0/0"), "{rows:?}");
    tokio::task::block_in_place(|| replica.stop());
    wait_replica_state(&env, "down").await;
    tokio::task::block_in_place(|| replica.restart().expect("restart the replica"));
    wait_replica_state(&env, "replica").await;
}

/// A read that follows no write goes to the replica; one inside a
/// transaction, or after the session set something up, to the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_to_the_replica_and_transactions_to_the_primary() {
    let (env, _replica) = with_replica(None, |_| {}).await;
    let c = connect(&env.proxy_dsn()).await;
    assert!(in_recovery(&c).await, "a read after no write");
    assert_eq!(stat(&env, "replica_reads").await, 1);

    c.batch_execute("CREATE TABLE tx (v int)").await.unwrap();
    let before = stat(&env, "replica_reads").await;
    c.simple_query("BEGIN").await.unwrap();
    assert!(!in_recovery(&c).await, "a read inside a transaction");
    c.simple_query("INSERT INTO tx VALUES (1)").await.unwrap();
    let rows = simple_rows(
        &c.simple_query("SELECT count(*), pg_is_in_recovery() FROM tx")
            .await
            .unwrap(),
    );
    assert_eq!(rows, [[Some("1".into()), Some("f".into())]]);
    c.simple_query("COMMIT").await.unwrap();
    assert_eq!(
        stat(&env, "replica_reads").await,
        before,
        "nothing of the transaction"
    );
    // The commit's position is the floor: once the replica has it, reads
    // go there again and see the row.
    let mut served = false;
    for _ in 0..500 {
        let rows = simple_rows(
            &c.simple_query("SELECT count(*), pg_is_in_recovery() FROM tx")
                .await
                .unwrap(),
        );
        assert_eq!(rows[0][0].as_deref(), Some("1"), "never a stale read");
        if rows[0][1].as_deref() == Some("t") {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(served, "the replica caught up and served the read");

    // Something a replica connection would lack: reads stay here.
    c.simple_query("SET work_mem = '8MB'").await.unwrap();
    assert!(!in_recovery(&c).await);
    let rows = simple_rows(&c.simple_query("SHOW work_mem").await.unwrap());
    assert_eq!(rows[0][0].as_deref(), Some("8MB"));
}

/// 1,000 write-then-read sequences from tokio-postgres against a replica
/// that applies each commit 20 ms late, the writes sent each way a client
/// may send them: no read misses its write. The same
/// with `consistency = "eventual"` does, which shows the replica lags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_always_reads_its_own_writes() {
    let (env, _replica) = with_replica(Some(Duration::from_millis(20)), |_| {}).await;
    let c = connect(&env.proxy_dsn()).await;
    c.batch_execute("CREATE TABLE rw (id int PRIMARY KEY, v int); INSERT INTO rw VALUES (1, -1)")
        .await
        .unwrap();
    let (stale, on_replica) = write_then_read(&c, 1000).await;
    assert_eq!(stale, 0, "stale reads with read-your-writes");
    assert!(on_replica > 0, "the replica served reads once it caught up");
    assert!(
        stat(&env, "fresh_reads").await > 0,
        "reads held to the primary"
    );

    let eventual = env
        .start_proxy(|c| {
            c.replicas.addresses = vec![_replica.addr().to_string()];
            c.replicas.consistency = Consistency::Eventual;
        })
        .await;
    let dsn = env.dsn_at(eventual.local_addr().port());
    // Until its watcher finds the replica, reads stay on the primary.
    let e = connect(&dsn).await;
    for _ in 0..500 {
        if in_recovery(&e).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (stale, _) = write_then_read(&e, 99).await;
    assert!(
        stale > 0,
        "a lagging replica shows stale reads without the floor"
    );
    eventual.shutdown(Duration::from_secs(5)).await;
}

/// The same 1,000 sequences from psycopg 3, by both protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_reads_its_own_writes() {
    let Some(py) = python_with_psycopg() else {
        return skip("psycopg not installed");
    };
    let (env, _replica) = with_replica(Some(Duration::from_millis(20)), |_| {}).await;
    let c = connect(&env.proxy_dsn()).await;
    c.batch_execute("CREATE TABLE rw (id int PRIMARY KEY, v int); INSERT INTO rw VALUES (1, -1)")
        .await
        .unwrap();
    let dsn = env.proxy_dsn();
    let out = tokio::task::block_in_place(|| run_py(&py, "replica_reads.py", &[&dsn, "1000"]));
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["stale"], 0, "{j}");
    assert!(j["on_replica"].as_u64().unwrap() > 0, "{j}");
}

/// The replica stops in the middle of a run of reads and comes back: no
/// client sees an error, and reads go back to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_costs_no_client_an_error() {
    let (env, mut replica) = with_replica(None, |_| {}).await;
    let c = connect(&env.proxy_dsn()).await;
    assert!(in_recovery(&c).await);
    let reads = tokio::spawn(async move {
        let mut n = 0u32;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while std::time::Instant::now() < deadline {
            let rows = simple_rows(&c.simple_query("SELECT 41 + 1").await.expect("no error"));
            assert_eq!(rows[0][0].as_deref(), Some("42"));
            n += 1;
            if n > 200 && STOP.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        n
    });
    // The session's replica connection is opened anew at its next read.
    let back = stop_and_restart(&env, &mut replica).await;
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
    let n = reads.await.expect("the reads never failed");
    assert!(n > 200);
    assert!(back, "reads went back to the restarted replica");
    let c = connect(&env.proxy_dsn()).await;
    assert!(in_recovery(&c).await);
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A read the planner takes for one but that writes (a function the
/// configuration calls read-only, and isn't) is refused by the replica
/// with 25006 and run again on the primary: the client gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_the_replica_refuses_runs_on_the_primary() {
    let (env, _replica, c) = with_lying_function(|_| {}).await;
    // The function on the replica first, so the read is tried there.
    for _ in 0..500 {
        if in_recovery(&c).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let served = stat(&env, "replica_reads").await;
    let rows = simple_rows(&c.simple_query("SELECT add_one()").await.unwrap());
    assert_eq!(rows, [[Some("1".into())]]);
    assert_eq!(stat(&env, "replica_reruns").await, 1);
    assert_eq!(stat(&env, "replica_reads").await, served);
}

/// A replica promoted out of recovery is no replica: reads go to the
/// primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_serves_no_reads() {
    let (env, replica) = with_replica(None, |_| {}).await;
    let c = connect(&env.proxy_dsn()).await;
    assert!(in_recovery(&c).await);
    let direct = connect(&replica.dsn("postgres")).await;
    direct.simple_query("SELECT pg_promote()").await.unwrap();
    wait_replica_state(&env, "promoted").await;
    let served = stat(&env, "replica_reads").await;
    for _ in 0..10 {
        let rows = simple_rows(&c.simple_query("SELECT 1").await.unwrap());
        assert_eq!(rows, [[Some("1".into())]]);
    }
    assert_eq!(stat(&env, "replica_reads").await, served);
}

/// `upstream = "embedded"` with `[replicas] embedded = 1`: the private
/// server gets a streaming replica of its own, and reads go there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_server_gets_replicas_that_serve_reads() {
    let mut cfg = onetrip::Config::default();
    cfg.listen.address = "127.0.0.1:0".parse().unwrap();
    cfg.replicas.embedded = 1;
    let proxy = onetrip::Proxy::start(cfg)
        .await
        .expect("start with a replica");
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        proxy.local_addr().port()
    );
    let c = connect(&dsn).await;
    let mut served = false;
    for _ in 0..1000 {
        if in_recovery(&c).await {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "the embedded replica served a read");
    drop(c);
    proxy.shutdown(Duration::from_secs(5)).await;
}
