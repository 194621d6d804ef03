//! Round trips counted exactly as ARCHITECTURE.md defines them, with real clients
//! against a real PostgreSQL.

use onetrip::stats::{SessionInfo, Snapshot};
use onetrip_tests::{Env, connect, python_with_psycopg, run_py, skip};

/// The one live session (the test's own client).
fn only_session(env: &Env) -> std::sync::Arc<SessionInfo> {
    let s = env.proxy().stats().sessions();
    assert_eq!(s.len(), 1, "expected one live session");
    s[0].clone()
}

fn rts(s: &Snapshot) -> (u64, u64) {
    (s.client_round_trips, s.upstream_round_trips)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_select_1_is_one_round_trip_after_handshake() {
    let env = Env::shared(|_| {}).await;
    env.psql_ok(true, &["-c", "select 1"]);
    let t = env.settle(0).await;
    assert_eq!(rts(&t), (1, 1), "{t:?}");
    assert_eq!(t.statements, 1);
    assert_eq!(t.sessions, 1);
    // Startup packet and (trust) authentication answer: counted apart.
    assert!(t.handshake_round_trips >= 1, "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_unprepared_query_is_prepare_then_execute() {
    let env = Env::shared(|_| {}).await;
    let c = connect(&env.proxy_dsn()).await;
    let s = only_session(&env);
    let before = s.counters.snapshot();
    // tokio-postgres without TLS, trust: StartupMessage -> AuthenticationOk.
    assert_eq!(before.handshake_round_trips, 1, "{before:?}");
    assert_eq!(rts(&before), (0, 0));
    let rows = c.query("select $1::int + 1", &[&41i32]).await.unwrap();
    assert_eq!(rows[0].get::<_, i32>(0), 42);
    let after = s.counters.snapshot();
    assert_eq!(after.client_round_trips - before.client_round_trips, 2);
    assert_eq!(after.upstream_round_trips - before.upstream_round_trips, 2);
    assert_eq!(after.statements - before.statements, 1);
    // A prepared statement executed again: one round trip.
    let st = c.prepare("select $1::int").await.unwrap();
    let before = s.counters.snapshot();
    c.query(&st, &[&1i32]).await.unwrap();
    let after = s.counters.snapshot();
    assert_eq!(after.client_round_trips - before.client_round_trips, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_is_query_then_copy_done() {
    use bytes::Bytes;
    use futures_util::SinkExt;
    let env = Env::shared(|_| {}).await;
    let c = connect(&env.proxy_dsn()).await;
    c.simple_query("create table rt_copy (a int, b text)")
        .await
        .unwrap();
    drop(c);
    env.settle(0).await;
    env.proxy().stats().reset();

    // psql's \copy: Query "COPY ... FROM STDIN" -> CopyInResponse, then
    // CopyData... CopyDone -> CommandComplete.
    let file = std::env::temp_dir().join(format!("rt_copy_{}.tsv", std::process::id()));
    std::fs::write(
        &file,
        (0..100)
            .map(|i| format!("{i}\trow {i}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let out = env.psql(
        true,
        &["-c", &format!("\\copy rt_copy from '{}'", file.display())],
    );
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = env.settle(0).await;
    assert_eq!(rts(&t), (2, 2), "{t:?}");

    // Extended protocol with a prepared statement: Bind Execute Sync ->
    // CopyInResponse, then CopyData... CopyDone -> CommandComplete.
    let c = connect(&env.proxy_dsn()).await;
    let st = c.prepare("copy rt_copy from stdin").await.unwrap();
    let s = only_session(&env);
    let before = s.counters.snapshot();
    let mut sink = Box::pin(c.copy_in(&st).await.unwrap());
    for i in 0..100 {
        sink.send(Bytes::from(format!("{i}\trow {i}\n")))
            .await
            .unwrap();
    }
    assert_eq!(sink.as_mut().finish().await.unwrap(), 100);
    let after = s.counters.snapshot();
    assert_eq!(
        after.client_round_trips - before.client_round_trips,
        2,
        "{after:?}"
    );
    assert_eq!(
        after.upstream_round_trips - before.upstream_round_trips,
        2,
        "{after:?}"
    );
    let n = c
        .query_one("select count(*) from rt_copy", &[])
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(n, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_pipeline_read_fetched_inside_costs_two() {
    let Some(py) = python_with_psycopg() else {
        return skip("psycopg not installed");
    };
    // Without coalescing, so the upstream pays the same two round trips.
    let env = Env::shared(|cfg| cfg.coalesce.single_read = false).await;
    let rows = run_py(&py, "rt_pipeline.py", &["reads", &env.proxy_dsn(), "10"]);
    assert_eq!(rows.trim(), "10");
    let t = env.settle(0).await;
    assert_eq!(rts(&t), (20, 20), "{t:?}");
    assert_eq!(t.statements, 10);
    assert_eq!(t.coalesced_batches, 0);

    // Coalescing may save upstream round trips; the client's stay two.
    let env = Env::shared(|_| {}).await;
    run_py(&py, "rt_pipeline.py", &["reads", &env.proxy_dsn(), "10"]);
    let t = env.settle(0).await;
    assert_eq!(t.client_round_trips, 20, "{t:?}");
    assert!(t.upstream_round_trips <= 20, "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_pipeline_of_ten_with_one_sync_costs_one() {
    let Some(py) = python_with_psycopg() else {
        return skip("psycopg not installed");
    };
    let env = Env::shared(|_| {}).await;
    let rows = run_py(&py, "rt_pipeline.py", &["batch", &env.proxy_dsn(), "10"]);
    assert_eq!(rows.trim(), "10");
    let t = env.settle(0).await;
    assert_eq!(t.client_round_trips, 1, "{t:?}");
    // psycopg may send a Flush request mid-pipeline (`_fetch_gen(flush=
    // True)`): when the server answers it before the Sync reaches the
    // proxy, as on a busy machine, the upstream counts a second round trip
    // that the client never waited for.
    assert!((1..=2).contains(&t.upstream_round_trips), "{t:?}");
    assert_eq!(t.statements, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_zeroes_live_and_closed_counts() {
    let env = Env::shared(|_| {}).await;
    let out = env.psql(true, &["-c", "select 1"]);
    assert!(out.status.success());
    env.settle(0).await;
    let c = connect(&env.proxy_dsn()).await;
    c.simple_query("select 1").await.unwrap();
    assert_eq!(env.proxy().stats().total().client_round_trips, 2);
    env.proxy().stats().reset();
    assert_eq!(env.proxy().stats().total().client_round_trips, 0);
    c.simple_query("select 1").await.unwrap();
    assert_eq!(env.proxy().stats().total().client_round_trips, 1);
}
