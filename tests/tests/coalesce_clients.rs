//! Coalescing with real clients: psycopg 3 pipelines and LangGraph's
//! PostgresStore, each run direct and through the proxy with identical
//! results; the proxy's counters show the upstream round trips saved.

use onetrip::stats::Snapshot;
use onetrip_tests::{Env, PyRunner, python_with_psycopg, skip};

/// Runs the script of `py` with `args` direct and through the proxy,
/// asserts equal output, and returns the proxy's counter deltas for the
/// proxied run.
async fn both(env: &Env, py: &mut PyRunner, args: &[&str]) -> Snapshot {
    let with = |dsn: String| {
        let mut all = vec![dsn];
        all.extend(args.iter().map(|a| a.to_string()));
        all
    };
    let direct = with(env.direct_dsn());
    let direct = py
        .run(&direct.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    let before = env.proxy().stats().total();
    let proxied = with(env.proxy_dsn());
    let proxied = py
        .run(&proxied.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    let after = env.settle(0).await;
    assert_eq!(direct, proxied, "{} {args:?}: direct vs proxy", py.script());
    delta(&after, &before)
}

fn delta(a: &Snapshot, b: &Snapshot) -> Snapshot {
    Snapshot {
        client_round_trips: a.client_round_trips - b.client_round_trips,
        upstream_round_trips: a.upstream_round_trips - b.upstream_round_trips,
        handshake_round_trips: a.handshake_round_trips - b.handshake_round_trips,
        statements: a.statements - b.statements,
        coalesced_batches: a.coalesced_batches - b.coalesced_batches,
        probes_passed: a.probes_passed - b.probes_passed,
        probes_failed: a.probes_failed - b.probes_failed,
        ..Default::default()
    }
}

fn psycopg() -> Option<std::path::PathBuf> {
    let py = python_with_psycopg();
    if py.is_none() {
        skip("psycopg not installed (pip install 'psycopg[binary]')");
    }
    py
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_pipeline_scenarios() {
    let Some(py) = psycopg() else { return };
    let env = Env::start().await;
    let py = &mut PyRunner::start(&py, "co_psycopg.py");
    // Setup (3 simple queries) and the closing status read are not batches.
    let setup = 3;
    let d = both(&env, py, &["lone"]).await;
    assert_eq!(
        (d.client_round_trips - setup, d.upstream_round_trips - setup),
        (2, 1),
        "lone read: {d:?}"
    );
    let d = both(&env, py, &["many"]).await;
    assert_eq!(
        (d.client_round_trips - setup, d.upstream_round_trips - setup),
        (400, 200),
        "200 reads: {d:?}"
    );
    for s in [
        "failing",
        "more_before_sync",
        "block",
        "cte_no_rows",
        "cte_rows",
    ] {
        // psycopg writes a batch and its Flush in two sends, and PostgreSQL
        // sends an error at once: when the error overtakes the Flush, the
        // server is already skipping to the Sync and there is nothing left
        // to coalesce (on a loaded machine, now and then). So up to three
        // runs, one of which must coalesce.
        let mut runs = Vec::new();
        for _ in 0..3 {
            let d = both(&env, py, &[s]).await;
            let coalesced = d.coalesced_batches >= 1;
            runs.push(d);
            if coalesced {
                break;
            }
        }
        assert!(
            runs.last().is_some_and(|d| d.coalesced_batches >= 1),
            "{s} should coalesce: {runs:?}"
        );
    }
    let d = both(&env, py, &["cte_no_rows"]).await;
    assert_eq!((d.probes_passed, d.probes_failed), (1, 0), "{d:?}");
    let d = both(&env, py, &["cte_rows"]).await;
    assert_eq!(
        d.probes_failed, 1,
        "written rows: probe fails once, then no probe: {d:?}"
    );
    for s in ["write", "set_config", "repeatable_read"] {
        let d = both(&env, py, &[s]).await;
        assert_eq!(d.coalesced_batches, 0, "{s} must not coalesce: {d:?}");
    }
}

fn langgraph(py: &std::path::Path) -> bool {
    let ok = std::process::Command::new(py)
        .args(["-c", "import langgraph.store.postgres"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(
            "langgraph-checkpoint-postgres not installed (pip install langgraph-checkpoint-postgres==3.2.0)",
        );
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_store_gets_cost_one_upstream_round_trip() {
    let Some(py) = psycopg() else { return };
    if !langgraph(&py) {
        return;
    }
    let env = Env::start().await;
    let py = &mut PyRunner::start(&py, "co_langgraph.py");
    py.run(&[&env.direct_dsn(), "setup"]).await;
    let d = both(&env, py, &["gets", "200"]).await;
    assert_eq!(d.client_round_trips, 400, "{d:?}");
    assert!(d.upstream_round_trips <= 201, "{d:?}");
    assert_eq!(d.probes_passed, 200, "{d:?}");

    let d = both(&env, py, &["async", "50"]).await;
    assert_eq!(
        (d.client_round_trips, d.upstream_round_trips),
        (100, 50),
        "aget: {d:?}"
    );

    // TTL refreshed on read exactly as direct (the output says so); those
    // gets write, so the probe catches them and they are not coalesced.
    let d = both(&env, py, &["ttl"]).await;
    assert!(d.probes_failed >= 1, "{d:?}");

    both(&env, py, &["batch", "20"]).await;
}
