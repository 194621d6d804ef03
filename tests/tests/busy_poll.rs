//! `[upstream] busy_poll`: a worker that polls for a session's answer
//! instead of sleeping gives the same answers, and does not sleep while the
//! answer is on its way. Run on the binary, whose sessions live on worker
//! runtimes.

use onetrip_tests::{PgOptions, connect, process::ProxyProcess, simple_rows, start_pg};
use tokio_postgres::Client;

const CLI: &str = env!("CARGO_BIN_EXE_onetrip-cli");

/// Times the proxy's threads have gone to sleep so far.
fn sleeps(pid: u32) -> u64 {
    let mut n = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status =
            std::fs::read_to_string(task.unwrap().path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(v) = line.strip_prefix("voluntary_ctxt_switches:") {
                n += v.trim().parse::<u64>().unwrap();
            }
        }
    }
    n
}

async fn rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    simple_rows(&c.simple_query(sql).await.unwrap())
}

/// Answers to quick queries, a large result, and slow queries whose answers
/// come after the budget (the session then rests from polling).
async fn workload(c: &Client) -> Vec<Vec<Vec<Option<String>>>> {
    let mut out = Vec::new();
    for i in 0..20 {
        out.push(rows(c, &format!("select {i}, 'x' || {i}")).await);
    }
    out.push(
        rows(
            c,
            "select g, repeat('y', g % 50) from generate_series(1, 20000) g",
        )
        .await,
    );
    for _ in 0..4 {
        out.push(rows(c, "select pg_sleep(0.02), 'slow'").await);
    }
    let prepared = c.prepare("select $1::int * 2").await.unwrap();
    for i in 0..20i32 {
        let r = c.query_one(&prepared, &[&i]).await.unwrap();
        out.push(vec![vec![Some(r.get::<_, i32>(0).to_string())]]);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_polling_worker_answers_alike_and_stays_awake() {
    let pg = start_pg(PgOptions::default()).await;
    let dsn = |port: u16| format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let direct = connect(&dsn(pg.port())).await;
    let expected = workload(&direct).await;

    // Long enough for any quick query's answer, even on a slow machine.
    let polling = ProxyProcess::start(CLI, pg.addr(), &[("ONETRIP_UPSTREAM_BUSY_POLL", "50ms")]);
    let sleeping = ProxyProcess::start(CLI, pg.addr(), &[]);
    let mut per_query = Vec::new();
    for proxy in [&polling, &sleeping] {
        let c = connect(&dsn(proxy.port())).await;
        assert_eq!(workload(&c).await, expected, "the same answers as direct");
        // Several sessions at once: none is alone in waiting all the time.
        let others: Vec<_> = (0..3)
            .map(|_| {
                let dsn = dsn(proxy.port());
                tokio::spawn(async move { workload(&connect(&dsn).await).await })
            })
            .collect();
        for o in others {
            assert_eq!(o.await.unwrap(), expected);
        }
        // Each answer takes the server a moment, so a worker that does not
        // poll is asleep before it comes: long enough that a busy machine
        // seldom keeps the worker off its CPU until the answer is there
        // (2 ms did, once: 1.5 sleeps per query), short of the budget.
        let n = 100;
        let before = sleeps(proxy.pid());
        for _ in 0..n {
            c.simple_query("select pg_sleep(0.01)").await.unwrap();
        }
        per_query.push((sleeps(proxy.pid()) - before) as f64 / n as f64);
    }
    // Polling, a worker sleeps once per query, waiting for the next one;
    // otherwise it sleeps for the answer too.
    let [polling, sleeping] = per_query[..] else {
        unreachable!()
    };
    assert!(polling < 1.2, "polling: {per_query:?}");
    assert!(sleeping > 1.7, "sleeping: {per_query:?}");
}
