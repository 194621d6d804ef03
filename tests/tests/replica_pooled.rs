//! Read replicas in transaction pooling (`[pool] mode = "transaction"`):
//! a real streaming replica of the test's own primary; reads that follow
//! no write, read only transactions and prepared reads go there over
//! replica connections the pool's clients share, and every client reads
//! its own writes, learned on whichever pooled connection ran them.

use std::time::Duration;

use onetrip::config::PoolMode;
use onetrip_tests::{
    Env, PgServer, connect, python_with, python_with_psycopg,
    replica::{
        clients_read_their_own_writes, in_recovery, stat, stop_and_restart, wait_replayed,
        with_lying_function, with_replica, write_then_read,
    },
    run_py, simple_rows, skip,
};

/// A primary and its replica behind a proxy in transaction pooling, with
/// `pool_size` connections per pool, the replica applying each commit
/// `delay` late.
async fn pooled(delay: Option<Duration>, pool_size: usize) -> (Env, PgServer) {
    with_replica(delay, |c| {
        c.pool.mode = PoolMode::Transaction;
        c.pool.pool_size = pool_size;
    })
    .await
}

/// `rw (id, v)` with one row, replayed by the replica: the setup's own
/// write leaves no client a floor.
async fn rw(env: &Env, replica: &PgServer) {
    let direct = connect(&env.direct_dsn()).await;
    direct
        .batch_execute("CREATE TABLE rw (id int PRIMARY KEY, v int); INSERT INTO rw VALUES (1, -1)")
        .await
        .unwrap();
    wait_replayed(&env.pg, replica).await;
}

/// Client backends on `replica` other than the asking one.
async fn replica_backends(replica: &PgServer) -> i64 {
    let r = connect(&replica.dsn("postgres")).await;
    let rows = simple_rows(
        &r.simple_query(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        .await
        .unwrap(),
    );
    rows[0][0].as_deref().unwrap().parse().unwrap()
}

/// A read after no write goes to the replica; a read write transaction
/// never does, not even its reads; a read only transaction runs there
/// whole; a session that set something up, or is pinned, reads on the
/// primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_to_the_replica_and_read_write_transactions_never() {
    let (env, replica) = pooled(None, 4).await;
    rw(&env, &replica).await;
    let c = connect(&env.proxy_dsn()).await;
    assert!(in_recovery(&c).await, "a read after no write");
    assert_eq!(stat(&env, "replica_reads").await, 1);

    let before = stat(&env, "replica_reads").await;
    c.simple_query("BEGIN").await.unwrap();
    assert!(!in_recovery(&c).await, "a read inside a transaction");
    c.simple_query("UPDATE rw SET v = 7 WHERE id = 1")
        .await
        .unwrap();
    let rows = simple_rows(
        &c.simple_query("SELECT v, pg_is_in_recovery() FROM rw")
            .await
            .unwrap(),
    );
    assert_eq!(rows, [[Some("7".into()), Some("f".into())]]);
    c.simple_query("COMMIT").await.unwrap();
    assert_eq!(
        stat(&env, "replica_reads").await,
        before,
        "nothing of the read write transaction"
    );

    // A read only transaction, once the replica has the commit.
    wait_replayed(&env.pg, &replica).await;
    let mut on_replica = false;
    for _ in 0..500 {
        c.batch_execute("BEGIN READ ONLY").await.unwrap();
        let rows = simple_rows(
            &c.simple_query("SELECT v, pg_is_in_recovery() FROM rw")
                .await
                .unwrap(),
        );
        let rows2 = simple_rows(
            &c.simple_query("SELECT current_setting('transaction_read_only')")
                .await
                .unwrap(),
        );
        c.batch_execute("COMMIT").await.unwrap();
        assert_eq!(rows[0][0].as_deref(), Some("7"), "never a stale read");
        assert_eq!(rows2[0][0].as_deref(), Some("on"));
        if rows[0][1].as_deref() == Some("t") {
            on_replica = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(on_replica, "the read only transaction ran on the replica");

    // Prepared reads (tokio-postgres names its statements) go there too.
    let s = c
        .prepare("SELECT pg_is_in_recovery(), $1::int + 1")
        .await
        .unwrap();
    let served = stat(&env, "replica_reads").await;
    for i in 0..5 {
        let row = c.query_one(&s, &[&i]).await.unwrap();
        assert!(row.get::<_, bool>(0));
        assert_eq!(row.get::<_, i32>(1), i + 1);
    }
    assert_eq!(stat(&env, "replica_reads").await, served + 5);

    // Something a replica connection would lack: reads stay on the
    // primary.
    let s = connect(&env.proxy_dsn()).await;
    s.simple_query("SET work_mem = '8MB'").await.unwrap();
    assert!(!in_recovery(&s).await);
    let rows = simple_rows(&s.simple_query("SHOW work_mem").await.unwrap());
    assert_eq!(rows[0][0].as_deref(), Some("8MB"));
    // A pinned client (a session advisory lock): the primary.
    let p = connect(&env.proxy_dsn()).await;
    p.simple_query("SELECT pg_advisory_lock(1)").await.unwrap();
    assert!(!in_recovery(&p).await);
    p.simple_query("SELECT pg_advisory_unlock(1)")
        .await
        .unwrap();
}

/// Many clients read through a pool of two: they share at most two
/// replica connections, and two clients that give one statement name
/// different texts each get their own answer on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_share_the_pools_replica_connections() {
    let (env, replica) = pooled(None, 2).await;
    let mut tasks = Vec::new();
    for k in 0..8i32 {
        let dsn = env.proxy_dsn();
        tasks.push(tokio::spawn(async move {
            let c = connect(&dsn).await;
            // Each client's first statement is tokio-postgres's `s0`.
            let s = c
                .prepare(&format!("SELECT pg_is_in_recovery(), {k} + $1::int"))
                .await
                .unwrap();
            let mut on_replica = 0;
            for i in 0..50 {
                let row = c.query_one(&s, &[&i]).await.unwrap();
                assert_eq!(row.get::<_, i32>(1), k + i, "client {k}'s own statement");
                on_replica += u32::from(row.get::<_, bool>(0));
                let rows = simple_rows(&c.simple_query(&format!("SELECT {k}")).await.unwrap());
                assert_eq!(rows[0][0], Some(k.to_string()));
            }
            on_replica
        }));
    }
    let mut on_replica = 0;
    for t in tasks {
        on_replica += t.await.unwrap();
    }
    assert!(on_replica > 0, "the replica served prepared reads");
    // The proxy's watcher, and at most the pool's size for reads.
    let n = replica_backends(&replica).await;
    assert!((2..=3).contains(&n), "replica client backends: {n}");
}

/// 1,000 write-then-read sequences from tokio-postgres against a replica
/// that applies each commit 20 ms late, each write on whichever pooled
/// connection the client got: no read misses its write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_client_always_reads_its_own_writes() {
    let (env, replica) = pooled(Some(Duration::from_millis(20)), 2).await;
    rw(&env, &replica).await;
    // Other clients hold and use the pool's connections meanwhile, so the
    // client's statements land on either.
    let dsn = env.proxy_dsn();
    let busy = tokio::spawn(async move {
        let o = connect(&dsn).await;
        for _ in 0..300 {
            o.simple_query("SELECT pg_sleep(0.001)").await.unwrap();
        }
    });
    let c = connect(&env.proxy_dsn()).await;
    let (stale, on_replica) = write_then_read(&c, 1000).await;
    busy.await.unwrap();
    assert_eq!(stale, 0, "stale reads with read-your-writes");
    assert!(on_replica > 0, "the replica served reads once it caught up");
    assert!(
        stat(&env, "fresh_reads").await > 0,
        "reads held to the primary"
    );
}

/// The same from psycopg 3, by both protocols (its fifth run of a
/// statement prepares it), and from asyncpg and psycopg with parameters
/// and a read only transaction the driver begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_clients_read_their_own_writes() {
    let Some(py) = python_with_psycopg() else {
        return skip("psycopg not installed");
    };
    let (env, replica) = pooled(Some(Duration::from_millis(20)), 2).await;
    rw(&env, &replica).await;
    let dsn = env.proxy_dsn();
    let out = tokio::task::block_in_place(|| run_py(&py, "replica_reads.py", &[&dsn, "1000"]));
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["stale"], 0, "{j}");
    assert!(j["on_replica"].as_u64().unwrap() > 0, "{j}");
    for client in ["asyncpg", "psycopg"] {
        let Some(py) = python_with(client) else {
            skip(&format!("python module {client} not installed"));
            continue;
        };
        wait_replayed(&env.pg, &replica).await;
        clients_read_their_own_writes(&py, client, &dsn);
    }
}

/// The replica stops in the middle of a run of reads from several pooled
/// clients and comes back: no client sees an error, and reads go back to
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_costs_no_pooled_client_an_error() {
    let (env, mut replica) = pooled(None, 2).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for k in 0..3 {
        let dsn = env.proxy_dsn();
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let c = connect(&dsn).await;
            let mut n = 0u32;
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            while std::time::Instant::now() < deadline {
                let rows = simple_rows(
                    &c.simple_query(&format!("SELECT 41 + {k}"))
                        .await
                        .expect("no error"),
                );
                assert_eq!(rows[0][0], Some((41 + k).to_string()));
                let row = c
                    .query_one("SELECT $1::int * 2", &[&k])
                    .await
                    .expect("no error");
                assert_eq!(row.get::<_, i32>(0), k * 2);
                n += 1;
                if n > 100 && stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            n
        }));
    }
    let back = stop_and_restart(&env, &mut replica).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.await.expect("the reads never failed") > 100);
    }
    assert!(back, "reads went back to the restarted replica");
}

/// A read the planner takes for one but that writes is refused by the
/// replica with 25006 and run again on the primary: the pooled client
/// gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_the_replica_refuses_runs_on_the_primary() {
    let (env, _replica, c) = with_lying_function_pooled().await;
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
    // The connection the replica refused on serves the next read.
    assert!(in_recovery(&c).await);
}

async fn with_lying_function_pooled() -> (Env, PgServer, tokio_postgres::Client) {
    with_lying_function(|c| {
        c.pool.mode = PoolMode::Transaction;
        c.pool.pool_size = 2;
    })
    .await
}
