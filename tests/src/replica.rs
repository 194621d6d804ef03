//! Streaming replicas of a test's own primary: a base backup of it
//! (`pg_basebackup -R`), started as a hot standby, optionally made to lag
//! with `recovery_min_apply_delay`.

use std::time::{Duration, Instant};

use onetrip_embedded::{PgOptions, PgServer};

use crate::{Env, connect, data_parent, simple_rows, start_pg};

/// A replica of `primary` that applies each commit `delay` after the
/// primary made it (none: as soon as it streams in). Blocks while the
/// base backup is taken: call it with `tokio::task::block_in_place`, or
/// through [`start_replica_of`].
pub fn start_replica(primary: &PgServer, delay: Option<Duration>) -> PgServer {
    let mut conf = Vec::new();
    if let Some(d) = delay {
        conf.push(format!("recovery_min_apply_delay = '{}ms'", d.as_millis()));
    }
    let opts = PgOptions {
        conf,
        temp_parent: data_parent(),
        ..Default::default()
    };
    primary
        .start_replica(opts)
        .expect("start a streaming replica")
}

/// [`start_replica`] from a multi-threaded test runtime.
pub fn start_replica_of(primary: &PgServer, delay: Option<Duration>) -> PgServer {
    tokio::task::block_in_place(|| start_replica(primary, delay))
}

/// A primary of the test's own with one streaming replica, and a proxy in
/// front of both (`[replicas] addresses`), whose config `tweak` may change
/// further. Waits until the proxy's watcher finds the replica serving
/// reads. Needs a multi-threaded test runtime.
pub async fn with_replica(
    delay: Option<Duration>,
    tweak: impl FnOnce(&mut onetrip::Config),
) -> (Env, PgServer) {
    // Each commit flushed at once, so it streams at once: with the test
    // servers' asynchronous commit, the WAL writer sends it up to 600 ms
    // later, and the replica lags by that much.
    let pg = start_pg(PgOptions {
        conf: vec!["synchronous_commit = on".into()],
        ..Default::default()
    })
    .await;
    let replica = start_replica_of(&pg, delay);
    let addr = replica.addr().to_string();
    let env = Env::start_on(pg, |c| {
        c.replicas.addresses = vec![addr];
        tweak(c);
    })
    .await;
    wait_replica_state(&env, "replica").await;
    (env, replica)
}

/// `with_replica`, with a function `add_one()` the configuration calls
/// read-only that isn't (it inserts into `w`): a read the planner takes for
/// one that the replica refuses; the proxy's config `tweak` may change
/// further. Returns a client of the proxy that made them.
pub async fn with_lying_function(
    tweak: impl FnOnce(&mut onetrip::Config),
) -> (Env, PgServer, tokio_postgres::Client) {
    let (env, replica) = with_replica(None, |c| {
        c.coalesce.read_only_functions = vec!["add_one".into()];
        tweak(c);
    })
    .await;
    let c = connect(&env.proxy_dsn()).await;
    c.batch_execute(
        "CREATE TABLE w (v int); \
         CREATE FUNCTION add_one() RETURNS bigint LANGUAGE sql \
         AS 'INSERT INTO w VALUES (1); SELECT count(*) FROM w'",
    )
    .await
    .unwrap();
    (env, replica, c)
}

/// Waits (up to 60 s) until SHOW REPLICAS gives every replica `role`.
pub async fn wait_replica_state(env: &Env, role: &str) {
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let admin = connect(&dsn).await;
    let start = Instant::now();
    loop {
        let rows = crate::simple_rows(
            &admin
                .simple_query("SHOW REPLICAS")
                .await
                .expect("SHOW REPLICAS"),
        );
        if !rows.is_empty() && rows.iter().all(|r| r[1].as_deref() == Some(role)) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "replicas never became {role}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The proxy's admin console.
pub fn admin_dsn(env: &Env) -> String {
    format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    )
}

/// SHOW STATS' total row, by column name.
pub async fn stat(env: &Env, column: &str) -> u64 {
    let admin = connect(&admin_dsn(env)).await;
    let msgs = admin.simple_query("SHOW STATS").await.unwrap();
    let names: Vec<String> = msgs
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::RowDescription(cols) => {
                Some(cols.iter().map(|c| c.name().to_owned()).collect())
            }
            _ => None,
        })
        .expect("columns");
    let i = names.iter().position(|n| n == column).expect(column);
    let rows = simple_rows(&msgs);
    let total = rows.last().expect("total row");
    total[i].as_deref().unwrap().parse().unwrap()
}

/// Whether a simple read through `c` was served by a replica.
pub async fn in_recovery(c: &tokio_postgres::Client) -> bool {
    let rows = simple_rows(&c.simple_query("SELECT pg_is_in_recovery()").await.unwrap());
    rows[0][0].as_deref() == Some("t")
}

/// Waits (up to 60 s) until `replica` has replayed everything the primary
/// `pg` has written so far.
pub async fn wait_replayed(pg: &PgServer, replica: &PgServer) {
    let p = connect(&pg.dsn("postgres")).await;
    let r = connect(&replica.dsn("postgres")).await;
    let lsn = simple_rows(
        &p.simple_query("SELECT pg_current_wal_insert_lsn()")
            .await
            .unwrap(),
    )[0][0]
        .clone()
        .unwrap();
    let start = Instant::now();
    loop {
        let q = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
        let rows = simple_rows(&r.simple_query(&q).await.unwrap());
        if rows[0][0].as_deref() == Some("t") {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never replayed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Writes `i` to `rw` (id 1) each way a client may send a write, reads
/// it back; every 100, waits for the replica and reads
/// once more. Returns (stale reads, reads the replica served).
pub async fn write_then_read(c: &tokio_postgres::Client, n: i32) -> (u32, u32) {
    let (mut stale, mut on_replica) = (0, 0);
    for i in 0..n {
        // Each way a write reaches the primary: autocommit by either
        // protocol, a COMMIT of its own, one Query with the whole block.
        let update = format!("UPDATE rw SET v = {i} WHERE id = 1");
        match i % 4 {
            0 => {
                c.simple_query(&update).await.unwrap();
            }
            1 => {
                c.execute("UPDATE rw SET v = $1 WHERE id = 1", &[&i])
                    .await
                    .unwrap();
            }
            2 => {
                c.simple_query("BEGIN").await.unwrap();
                c.simple_query(&update).await.unwrap();
                c.simple_query("COMMIT").await.unwrap();
            }
            _ => {
                let block = format!("BEGIN; {update}; COMMIT");
                c.simple_query(&block).await.unwrap();
            }
        }
        let rows = simple_rows(
            &c.simple_query("SELECT v, pg_is_in_recovery() FROM rw WHERE id = 1")
                .await
                .unwrap(),
        );
        stale += u32::from(rows[0][0].as_deref() != Some(&i.to_string()));
        on_replica += u32::from(rows[0][1].as_deref() == Some("t"));
        if i % 100 == 99 {
            // Until the replica has replayed the write and serves the
            // read (at most 5 s), every read still sees it.
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let rows = simple_rows(
                    &c.simple_query("SELECT v, pg_is_in_recovery() FROM rw WHERE id = 1")
                        .await
                        .unwrap(),
                );
                stale += u32::from(rows[0][0].as_deref() != Some(&i.to_string()));
                if rows[0][1].as_deref() == Some("t") {
                    on_replica += 1;
                    break;
                }
            }
        }
    }
    (stale, on_replica)
}

/// 1,000 write-then-read sequences from `client` (asyncpg, psycopg or
/// sqlalchemy; `tests/py/replica_clients.py`) through `dsn`, on a table
/// `rw` holding row 1: none stale, every read that followed no write
/// served by the replica, and the driver's read only transactions read
/// only.
pub fn clients_read_their_own_writes(py: &std::path::PathBuf, client: &str, dsn: &str) {
    let out = tokio::task::block_in_place(|| {
        crate::run_py(py, "replica_clients.py", &[client, dsn, "1000"])
    });
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["stale"], 0, "{client}: {j}");
    assert_eq!(j["fresh_on_replica"], j["fresh"], "{client}: {j}");
    assert_eq!(
        j["read_only"],
        serde_json::json!([true, true]),
        "{client}: {j}"
    );
}

/// Stops `replica` while the test's clients read through the proxy of
/// `env`, and starts it again once the proxy has seen it down; true when
/// a read is served by it again within 10 s of its coming back.
pub async fn stop_and_restart(env: &Env, replica: &mut PgServer) -> bool {
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::block_in_place(|| replica.stop());
    wait_replica_state(env, "down").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::block_in_place(|| replica.restart().expect("restart the replica"));
    wait_replica_state(env, "replica").await;
    let served = stat(env, "replica_reads").await;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if stat(env, "replica_reads").await > served {
            return true;
        }
    }
    false
}
