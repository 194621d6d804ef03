//! Real drivers with prepared statements through transaction pooling
//! (tests/py/pool_clients.py): psycopg's automatic and explicit prepare,
//! asyncpg's statement cache. Each client reads what it reads direct, on
//! a pool of a few server connections, and none is pinned.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

use onetrip_tests::{Env, PgOptions, connect, python_with_psycopg, run_py, simple_rows, skip};

async fn pooled(size: usize) -> Env {
    Env::start_with(PgOptions::default(), move |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = size;
    })
    .await
}

/// Runs the scenario direct and through the pool; returns both outputs and
/// the most server connections seen during the pooled run.
async fn both(scenario: &str, clients: usize, size: usize) -> Option<(String, String, i64)> {
    let Some(py) = python_with_psycopg() else {
        skip("psycopg not installed");
        return None;
    };
    let env = pooled(size).await;
    let direct = connect(&env.direct_dsn()).await;
    direct
        .batch_execute(
            "CREATE TABLE pool_items (id int, name text);
             INSERT INTO pool_items SELECT i, 'item ' || i FROM generate_series(1, 20) i",
        )
        .await
        .unwrap();
    drop(direct);
    let mut outs = Vec::new();
    let mut most = 0;
    for via in [false, true] {
        let (done, seen) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicI64::new(0)),
        );
        let watch = via.then(|| {
            let (done, seen, dsn) = (done.clone(), seen.clone(), env.direct_dsn());
            tokio::spawn(async move {
                let c = connect(&dsn).await;
                let sql = "SELECT count(*) FROM pg_stat_activity \
                           WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
                while !done.load(Ordering::Relaxed) {
                    let n: i64 = c.query_one(sql, &[]).await.unwrap().get(0);
                    seen.fetch_max(n, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        });
        let args = [env.dsn(via), scenario.to_owned(), clients.to_string()];
        let py = py.clone();
        let out = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_py(&py, "pool_clients.py", &args)
        })
        .await
        .unwrap();
        done.store(true, Ordering::Relaxed);
        if let Some(w) = watch {
            w.await.unwrap();
        }
        most = most.max(seen.load(Ordering::Relaxed));
        outs.push(out.trim().to_owned());
    }
    let admin = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let pools = simple_rows(
        &connect(&admin)
            .await
            .simple_query("SHOW POOLS")
            .await
            .unwrap(),
    );
    assert_eq!(
        pools[0][6].as_deref(),
        Some("0"),
        "nothing pinned: {pools:?}"
    );
    let proxied = outs.pop().unwrap();
    Some((outs.pop().unwrap(), proxied, most))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_psycopg_clients_with_prepared_statements_on_five_connections() {
    let Some((direct, proxied, most)) = both("psycopg", 50, 5).await else {
        return;
    };
    assert_eq!(proxied, direct);
    assert!(direct.contains("item 7"), "{direct}");
    // The watcher's own connection is not counted.
    assert!((1..=5).contains(&most), "server connections: {most}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asyncpg_with_its_statement_cache_on_three_connections() {
    let Some((direct, proxied, most)) = both("asyncpg", 20, 3).await else {
        return;
    };
    assert_eq!(proxied, direct);
    assert!(direct.contains("item 7"), "{direct}");
    assert!((1..=3).contains(&most), "server connections: {most}");
}
