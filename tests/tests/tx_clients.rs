//! Transactions with real clients (psycopg with autocommit off, SQLAlchemy's
//! ORM, asyncpg), run direct and through onetrip with its defaults and with
//! `lazy_reads`: the same answers and tables, and the upstream round trips
//! each request costs. LangGraph's checkpointer, which runs in autocommit,
//! costs what it cost before.

use onetrip::Proxy;
use onetrip_tests::{Env, PyRunner, python_has, python_with_psycopg, skip};

const SETUP: &str = "drop table if exists tx_users; \
    create table tx_users(id int primary key, name text not null, score int not null); \
    insert into tx_users select g, 'user ' || g, g from generate_series(1, 10) g";

fn has_modules(py: &std::path::Path, modules: &str) -> bool {
    let ok = python_has(py, modules);
    if !ok {
        skip(&format!("python modules {modules} not installed"));
    }
    ok
}

/// Runs `scenario` with `n` requests against `port`; its output.
async fn run(py: &mut PyRunner, port: u16, scenario: &str, n: usize) -> String {
    let dsn = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    py.run(&[&dsn, scenario, &n.to_string()]).await
}

/// Upstream round trips per request through `proxy`: a run of 101 requests
/// against a run of 1, so what a run costs apart from its requests
/// (connecting, reading the table) cancels out. Also checks each run's
/// output against the same run direct.
async fn per_request(env: &Env, proxy: &Proxy, py: &mut PyRunner, scenario: &str) -> f64 {
    let mut cost = Vec::new();
    for n in [1, 101] {
        env.psql_ok(false, &["-c", SETUP]);
        let direct = run(py, env.pg.port(), scenario, n).await;
        env.psql_ok(false, &["-c", SETUP]);
        let before = proxy.stats().total().upstream_round_trips;
        let proxied = run(py, proxy.local_addr().port(), scenario, n).await;
        for _ in 0..100 {
            if proxy.stats().sessions().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let after = proxy.stats().total().upstream_round_trips;
        assert_eq!(direct, proxied, "{scenario} x{n}: direct vs onetrip");
        cost.push(after - before);
    }
    (cost[1] - cost[0]) as f64 / 100.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_transactions_cost_fewer_round_trips() {
    let Some(py) = python_with_psycopg() else {
        skip("psycopg not installed (pip install 'psycopg[binary]')");
        return;
    };
    if !has_modules(&py, "sqlalchemy, asyncpg, langgraph.checkpoint.postgres") {
        return;
    }
    let env = Env::start().await;
    let py = &mut PyRunner::start(&py, "tx_clients.py");
    // LangGraph's tables, made direct.
    run(py, env.pg.port(), "langgraph_setup", 0).await;
    let defaults = env.start_proxy(|_| {}).await;
    let lazy = env.start_proxy(|c| c.transactions.lazy_reads = true).await;
    let plain = env
        .start_proxy(|c| {
            c.transactions.defer_begin = false;
            c.coalesce.single_read = false;
        })
        .await;
    // (scenario, round trips per request: saving nothing, defaults, lazy reads)
    let bars = [
        ("psycopg_read", 3.0, 2.0, 1.0),
        ("psycopg_write", 3.0, 2.0, 2.0),
        ("sqlalchemy_get", 3.0, 2.0, 1.0),
        ("sqlalchemy_update", 4.0, 3.0, 3.0),
        ("asyncpg_transaction", 3.0, 2.0, 2.0),
        ("asyncpg_fetchrow", 1.0, 1.0, 1.0),
        // Autocommit: nothing to save, nothing spent.
        ("langgraph_put", 1.0, 1.0, 1.0),
        ("langgraph_get", 1.0, 1.0, 1.0),
    ];
    let mut report = Vec::new();
    for (scenario, none, with_defaults, with_lazy) in bars {
        let got = (
            per_request(&env, &plain, py, scenario).await,
            per_request(&env, &defaults, py, scenario).await,
            per_request(&env, &lazy, py, scenario).await,
        );
        report.push(format!("{scenario}: {got:?}"));
        // psycopg prepares a statement run five times: one round trip more
        // in a hundred requests.
        let near = |a: f64, b: f64| (a - b).abs() <= 0.05;
        assert!(
            near(got.0, none) && near(got.1, with_defaults) && near(got.2, with_lazy),
            "{scenario}: {got:?}, want about {:?}",
            (none, with_defaults, with_lazy)
        );
    }
    eprintln!(
        "upstream round trips per request (nothing saved, defaults, lazy reads): {report:#?}"
    );
}

/// libpq in pipeline mode after a BEGIN: a failing statement sent with
/// neither Sync nor Flush gets its error at once, as direct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_after_a_held_begin_gets_its_error_at_once() {
    let Some(py) = python_with_psycopg() else {
        skip("psycopg not installed (pip install 'psycopg[binary]')");
        return;
    };
    let env = Env::start().await;
    let py = &mut PyRunner::start(&py, "tx_clients.py");
    env.psql_ok(false, &["-c", SETUP]);
    let lazy = env.start_proxy(|c| c.transactions.lazy_reads = true).await;
    let direct = run(py, env.pg.port(), "pipeline_error_after_begin", 1).await;
    assert!(direct.contains("22012"), "{direct}");
    for port in [env.proxy_port(), lazy.local_addr().port()] {
        let proxied = run(py, port, "pipeline_error_after_begin", 1).await;
        assert_eq!(proxied, direct);
    }
}
