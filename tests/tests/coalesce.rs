//! Coalescing single-read batches: every scenario runs direct and through
//! the proxy with the exact same messages; the transcripts must be equal,
//! and the proxy's counters show what it saved.

use onetrip_tests::{
    Env,
    transcript::{Msg, Raw},
};

const SETUP: &str = "create table if not exists t(id int primary key, v int); truncate t; \
                     insert into t select g, g * 10 from generate_series(1, 5) g";

/// Runs `scenario` direct and through the proxy, returns both transcripts
/// and the proxy's (upstream round trips, coalesced batches, probes passed,
/// probes failed) spent by the scenario.
async fn both<F>(
    env: &Env,
    params: &[(&str, &str)],
    scenario: F,
) -> (Vec<String>, (u64, u64, u64, u64))
where
    F: AsyncFn(&mut Raw) -> Vec<Msg>,
{
    let mut transcripts = Vec::new();
    let mut spent = (0, 0, 0, 0);
    for via in [false, true] {
        let port = if via { env.proxy_port() } else { env.pg.port() };
        let mut raw = Raw::connect(port, params).await;
        raw.query(SETUP);
        raw.round_trip('Z').await;
        let before = env.proxy().stats().total();
        let msgs = scenario(&mut raw).await;
        let after = env.proxy().stats().total();
        raw.query("select id, v from t order by id");
        let table = raw.round_trip('Z').await;
        raw.terminate().await;
        if via {
            spent = (
                after.upstream_round_trips - before.upstream_round_trips,
                after.coalesced_batches - before.coalesced_batches,
                after.probes_passed - before.probes_passed,
                after.probes_failed - before.probes_failed,
            );
        }
        transcripts.push(
            msgs.iter()
                .chain(&table)
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(
        transcripts[0], transcripts[1],
        "direct vs proxy transcripts differ"
    );
    (transcripts.pop().unwrap_or_default(), spent)
}

/// `batch Flush` -> answers up to `until`, then `Sync Flush` -> ReadyForQuery.
async fn flush_then_sync(raw: &mut Raw, until: char) -> Vec<Msg> {
    raw.flush();
    let mut v = raw.round_trip(until).await;
    raw.sync().flush();
    v.extend(raw.round_trip('Z').await);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalescing_scenarios_match_direct() {
    let env = Env::start().await;

    // A lone read: 1 upstream round trip instead of 2.
    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        r.read_batch("select v from t where id = 2");
        flush_then_sync(r, 'C').await
    })
    .await;
    assert_eq!(spent, (1, 1, 0, 0), "lone read");

    // The client pipelines its Sync right behind the Flush, in one write:
    // the Sync waits in the proxy's buffer until the batch's outcome is in.
    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        r.read_batch("select v from t where id = 4");
        r.flush().sync().flush();
        r.round_trip('Z').await
    })
    .await;
    assert_eq!(spent, (1, 1, 0, 0), "pipelined sync");

    // A failing read: the same error, then a usable connection.
    let (t, spent) = both(&env, &[], async |r: &mut Raw| {
        r.read_batch("select 1/0");
        let mut v = flush_then_sync(r, 'E').await;
        r.read_batch("select 7");
        v.extend(flush_then_sync(r, 'C').await);
        v
    })
    .await;
    assert!(t.iter().any(|m| m.contains("22012")), "{t:?}");
    assert_eq!(spent, (2, 2, 0, 0), "failing read");

    // A read followed by more commands before the Sync, one of them failing.
    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        r.read_batch("select v from t where id = 1");
        r.flush();
        let mut v = r.round_trip('C').await;
        r.read_batch("select 2")
            .read_batch("select 1/0")
            .read_batch("select 3")
            .sync();
        v.extend(r.round_trip('Z').await);
        v
    })
    .await;
    assert_eq!(spent.1, 1, "read then more commands");

    // A failing read followed by more commands: the server discards them
    // until the Sync; the proxy must too.
    both(&env, &[], async |r: &mut Raw| {
        r.read_batch("select 1/0");
        r.flush();
        let mut v = r.round_trip('E').await;
        r.read_batch("select 2")
            .parse("", "insert into t values (100, 1)")
            .bind("", "", &[])
            .execute("", 0)
            .sync();
        v.extend(r.round_trip('Z').await);
        v
    })
    .await;

    // Read and write inside BEGIN ... COMMIT: both coalesced (a Sync in a
    // block commits nothing).
    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        r.query("begin");
        let mut v = r.round_trip('Z').await;
        r.read_batch("select v from t where id = 3");
        v.extend(flush_then_sync(r, 'C').await);
        r.read_batch("update t set v = v + 1 where id = 3");
        v.extend(flush_then_sync(r, 'C').await);
        r.query("commit");
        v.extend(r.round_trip('Z').await);
        v
    })
    .await;
    assert_eq!(spent.1, 2, "block");

    // A top-level write is never coalesced.
    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        r.read_batch("insert into t values (6, 60)");
        flush_then_sync(r, 'C').await
    })
    .await;
    assert_eq!(spent, (2, 0, 0, 0), "top-level write");

    // set_config has a side effect: never coalesced.
    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        r.read_batch("select set_config('x.y', '1', true)");
        flush_then_sync(r, 'C').await
    })
    .await;
    assert_eq!(spent.1, 0, "set_config");

    // An Execute with a row limit is never coalesced (an early Sync would
    // close the portal).
    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        r.parse("", "select id from t order by id")
            .bind("", "", &[])
            .execute("", 2);
        flush_then_sync(r, 's').await
    })
    .await;
    assert_eq!(spent.1, 0, "row limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_probe_passes_and_fails_exactly() {
    let env = Env::start().await;

    // A data-modifying CTE that touches no row: coalesced, the probe passes.
    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        r.read_batch(
            "with u as (update t set v = v where id = -1 returning id) select count(*) from u",
        );
        flush_then_sync(r, 'C').await
    })
    .await;
    assert_eq!(spent, (1, 1, 1, 0), "probe passes");

    // The probe stays prepared between batches; a DISCARD ALL drops it,
    // and the next probe prepares it again.
    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        let sql =
            "with u as (update t set v = v where id = -1 returning id) select count(*) from u";
        r.read_batch(sql);
        let mut v = flush_then_sync(r, 'C').await;
        r.read_batch(sql);
        v.extend(flush_then_sync(r, 'C').await);
        r.query("discard all");
        v.extend(r.round_trip('Z').await);
        r.read_batch(sql);
        v.extend(flush_then_sync(r, 'C').await);
        v
    })
    .await;
    assert_eq!(
        spent,
        (4, 3, 3, 0),
        "probe prepared once, again after DISCARD ALL"
    );

    // One that writes: the probe fails, the batch runs again, the write
    // happens exactly once (the table dump in the transcript shows it), and
    // the statement is not probed again in that session.
    let (t, spent) = both(&env, &[], async |r: &mut Raw| {
        let sql = "with u as (update t set v = v + 1 where id <= 2 returning id, v) select * from u order by id";
        r.parse("w", sql).bind("", "w", &[]).describe_portal("").execute("", 0);
        let mut v = flush_then_sync(r, 'C').await;
        r.bind("", "w", &[]).describe_portal("").execute("", 0);
        v.extend(flush_then_sync(r, 'C').await);
        v
    })
    .await;
    assert!(
        t.iter().any(|m| m.starts_with("D:") && m.contains("12")),
        "{t:?}"
    );
    assert_eq!(spent.3, 1, "probe fails once: {spent:?}");
    assert_eq!(spent.1, 1, "then not coalesced again: {spent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeatable_read_sessions_are_not_coalesced() {
    let env = Env::start().await;
    let rr = [(
        "options",
        "-c default_transaction_isolation=repeatable\\ read",
    )];
    let (_, spent) = both(&env, &rr, async |r: &mut Raw| {
        r.read_batch("select 1");
        flush_then_sync(r, 'C').await
    })
    .await;
    assert_eq!(spent.1, 0, "repeatable read from startup options");

    let (_, spent) = both(&env, &[], async |r: &mut Raw| {
        r.query("set default_transaction_isolation = 'repeatable read'");
        let mut v = r.round_trip('Z').await;
        r.read_batch("select 1");
        v.extend(flush_then_sync(r, 'C').await);
        r.query("reset default_transaction_isolation");
        v.extend(r.round_trip('Z').await);
        r.read_batch("select 2");
        v.extend(flush_then_sync(r, 'C').await);
        v
    })
    .await;
    assert_eq!(spent.1, 1, "only after RESET: {spent:?}");

    // A role's default, which only the server knows.
    env.psql_ok(
        false,
        &[
            "-c",
            "create role rr login; grant all on table t to rr; \
             alter role rr set default_transaction_isolation = 'repeatable read'",
        ],
    );
    let (_, spent) = both(&env, &[("user", "rr")], async |r: &mut Raw| {
        r.read_batch("select 1");
        let mut v = flush_then_sync(r, 'C').await;
        r.read_batch("select v from t where id = 1");
        v.extend(flush_then_sync(r, 'C').await);
        v
    })
    .await;
    assert_eq!(
        spent.1, 0,
        "repeatable read by the role's default: {spent:?}"
    );
}
