//! Round trips per statement of pooled sessions reach the statistics once
//! each: a session sets its counts down for its worker between
//! transactions (`Statements::rest`), and they are handed on by the
//! worker's next look while its client stays, or as a session ends.

use std::time::Duration;

use onetrip_tests::{Env, PgOptions, connect};

/// The statements counted under `fingerprint` so far.
fn counted(env: &Env, fingerprint: &str) -> u64 {
    env.proxy()
        .stats()
        .top_statements(100)
        .into_iter()
        .filter(|(f, _)| f == fingerprint)
        .map(|(_, c)| c.statements)
        .sum()
}

/// Waits until `fingerprint` counts `want` statements; the count it
/// settled on otherwise.
async fn settles_at(env: &Env, fingerprint: &str, want: u64) -> Result<(), u64> {
    onetrip_tests::settles_at(want, || counted(env, fingerprint)).await
}

/// Runs `n` simple queries that differ only in a literal, labelled `label`.
async fn run(client: &tokio_postgres::Client, label: &str, n: usize) {
    for i in 0..n {
        client
            .simple_query(&format!("select {i} as {label}"))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_sessions_counts_arrive_once_whether_they_stay_or_go() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 2;
    })
    .await;
    let staying = connect(&env.proxy_dsn()).await;
    run(&staying, "staying", 3).await;
    assert_eq!(settles_at(&env, "select ? as staying", 3).await, Ok(()));

    let leaving = connect(&env.proxy_dsn()).await;
    run(&leaving, "leaving", 2).await;
    drop(leaving);
    // More from the one that stays, taking counts others set down.
    run(&staying, "staying", 4).await;
    assert_eq!(settles_at(&env, "select ? as leaving", 2).await, Ok(()));
    assert_eq!(settles_at(&env, "select ? as staying", 7).await, Ok(()));
    // Counted once: another look changes nothing.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(counted(&env, "select ? as leaving"), 2);
    assert_eq!(counted(&env, "select ? as staying"), 7);
}
