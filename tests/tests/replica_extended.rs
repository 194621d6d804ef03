//! Extended-protocol reads on replicas (in both pool modes): groups of Parse,
//! Bind, Describe, Execute and Sync the planner proves pure reads go to a
//! real streaming replica, named statements made there from the client's
//! own Parse; the client sees the messages PostgreSQL itself sends, in
//! the same order.

use std::time::Duration;

use onetrip::config::PoolMode;
use onetrip_tests::{
    connect, python_with,
    replica::{
        clients_read_their_own_writes, in_recovery, stat, wait_replayed, with_lying_function,
        with_replica,
    },
    run_py,
    script::{CHECK, Script, Setup, Target, compare},
    skip,
};

/// The same message sequences straight to the primary and through
/// onetrip, whose reads go to the replica: the same answers, in the same
/// order, at the same points; and the groups that may run there did.
/// A primary with `t(id, v)` holding rows 1 to 5, replayed by its
/// replica; the primary and onetrip as the targets of a transcript; a
/// setup that writes nothing, so that every run starts with the floor at
/// nothing and every read may go to the replica.
async fn sides(
    mode: PoolMode,
) -> (
    onetrip_tests::Env,
    onetrip_tests::PgServer,
    [Target; 2],
    Setup,
) {
    let (env, replica) = with_replica(None, |c| c.pool.mode = mode).await;
    let direct = connect(&env.direct_dsn()).await;
    direct
        .batch_execute(
            "CREATE TABLE t (id int PRIMARY KEY, v int); \
             INSERT INTO t SELECT g, g * 10 FROM generate_series(1, 5) g",
        )
        .await
        .unwrap();
    wait_replayed(&env.pg, &replica).await;
    if mode == PoolMode::Transaction {
        // A transaction on the primary (a write that changes nothing: a
        // read might run on the replica): the pool's connections learn the
        // default isolation, which a client with no connection yet goes by
        // to run a read only transaction on the replica.
        let c = connect(&env.proxy_dsn()).await;
        for q in ["BEGIN", "UPDATE t SET v = v WHERE false", "COMMIT"] {
            c.simple_query(q).await.unwrap();
        }
        // Until a new client's read only transaction runs on the replica
        // (the pool has learned the default isolation, the replica is in).
        let mut on_replica = false;
        for _ in 0..100 {
            let c = connect(&env.proxy_dsn()).await;
            c.batch_execute("BEGIN READ ONLY").await.unwrap();
            on_replica = in_recovery(&c).await;
            c.batch_execute("COMMIT").await.unwrap();
            if on_replica {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            on_replica,
            "read only transactions never reached the replica"
        );
    }
    let targets = [
        Target::new("PostgreSQL", env.pg.port()),
        Target::new("onetrip", env.proxy_port()),
    ];
    let setup = Setup {
        params: vec![],
        reset: String::new(),
        check: CHECK.into(),
    };
    (env, replica, targets, setup)
}

/// Runs each script on both targets: the same transcript, the one given;
/// the replica served as many of its reads as given (and maybe the check
/// that follows each run).
async fn same_with_reads(
    env: &onetrip_tests::Env,
    targets: &[Target],
    setup: &Setup,
    scripts: Vec<(Script, u64, &str)>,
) {
    for (script, served, want) in scripts {
        let before = stat(env, "replica_reads").await;
        let t = match compare(targets, setup, &script).await {
            Ok(t) => t.to_string(),
            Err(m) => panic!("{m}"),
        };
        assert_eq!(t, want, "{script}");
        let after = stat(env, "replica_reads").await;
        assert!(
            (served..=served + 1).contains(&(after - before)),
            "{script}: the replica served {} reads, {served} of the script's",
            after - before
        );
    }
}

/// The same message sequences straight to the primary and through
/// onetrip, whose reads go to the replica: the same answers, in the same
/// order, at the same points; and the groups that may run there did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_reads_on_the_replica_answer_as_the_primary() {
    let (env, _replica, targets, setup) = sides(PoolMode::Session).await;
    same_with_reads(&env, &targets, &setup, extended_scripts()).await;
}

/// The same in transaction pooling, each group on whichever connection
/// the client gets, the replica's shared with the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_extended_reads_on_the_replica_answer_as_the_primary() {
    let (env, _replica, targets, setup) = sides(PoolMode::Transaction).await;
    same_with_reads(&env, &targets, &setup, extended_scripts()).await;
}

/// Each script, and how many of its groups a replica must serve, in either
/// pool mode.
fn extended_scripts() -> Vec<(Script, u64, &'static str)> {
    vec![
        (
            Script::new()
                .read("select v from t where id = 2")
                .sync()
                .wait(),
            1,
            "1 2 T D C ZI",
        ),
        (
            // Two groups in one write, then one with a Describe of its
            // statement and a parameter.
            Script::new()
                .read("select v from t where id = 1")
                .sync()
                .read("select count(*) from t")
                .sync()
                .wait()
                .parse("", "select $1::int + 1")
                .describe_statement("")
                .bind("", "", &[Some("41")])
                .execute("", 0)
                .sync()
                .wait(),
            3,
            "1 2 T D C ZI 1 2 T D C ZI | 1 t T 2 D C ZI",
        ),
        (
            // A named statement prepared on the primary, bound twice (made
            // on the replica connection once), closed, bound again (an
            // error on both), made again with another text.
            Script::new()
                .parse("s1", "select v from t where id = $1")
                .describe_statement("s1")
                .sync()
                .wait()
                .bind("", "s1", &[Some("3")])
                .execute("", 0)
                .sync()
                .wait()
                .bind("", "s1", &[Some("4")])
                .describe_portal("")
                .execute("", 0)
                .sync()
                .wait()
                .close_statement("s1")
                .sync()
                .wait()
                .bind("", "s1", &[Some("5")])
                .execute("", 0)
                .sync()
                .wait()
                .parse("s1", "select v * 2 from t where id = $1")
                .sync()
                .wait()
                .bind("", "s1", &[Some("5")])
                .execute("", 0)
                .sync()
                .wait(),
            3,
            "1 t T ZI | 2 D C ZI | 2 T D C ZI | 3 ZI | E26000 ZI | 1 ZI | 2 D C ZI",
        ),
        (
            // SQL's DEALLOCATE alone drops the statement on both
            // connections (closed on the replica's ahead of its next
            // read): the name is unknown after it on either, and reads of
            // the name made again go on to the replica.
            Script::new()
                .parse("s2", "select v from t where id = $1")
                .sync()
                .wait()
                .bind("", "s2", &[Some("1")])
                .execute("", 0)
                .sync()
                .wait()
                .query("deallocate s2")
                .wait()
                .bind("", "s2", &[Some("1")])
                .execute("", 0)
                .sync()
                .wait()
                .parse("s2", "select v + 1 from t where id = $1")
                .sync()
                .wait()
                .bind("", "s2", &[Some("1")])
                .execute("", 0)
                .sync()
                .wait(),
            // Pooled, the first Parse is answered here (the pool's server
            // parsed the text before) and its use needs no check; SQL's
            // DEALLOCATE pins neither mode's session. The Bind of the name
            // deallocated may fail on either connection.
            2,
            "1 ZI | 2 D C ZI | C ZI | E26000 ZI | 1 ZI | 2 D C ZI",
        ),
        (
            // The unnamed statement parsed by a read on the replica, bound
            // again alone: the primary is made to hold it first.
            Script::new()
                .read("select 7")
                .sync()
                .wait()
                .bind("", "", &[])
                .execute("", 0)
                .sync()
                .wait(),
            1,
            "1 2 T D C ZI | 2 D C ZI",
        ),
        (
            // An error on the replica is the client's, as on the primary.
            Script::new().read("select 1/0").sync().wait(),
            1,
            "1 E22012 ZI",
        ),
        (
            // A row limit: the Sync closes the portal.
            Script::new()
                .parse("", "select id from t order by id")
                .bind("", "", &[])
                .execute("", 2)
                .sync()
                .wait(),
            1,
            "1 2 D D s ZI",
        ),
        (
            // A portal left open (the client waits for its rows before it
            // sends the Sync), a Describe alone, a write: the primary.
            Script::new()
                .parse("", "select id from t order by id")
                .bind("", "", &[])
                .execute("", 2)
                .flush()
                .wait()
                .execute("", 2)
                .sync()
                .wait()
                .parse("", "select 1")
                .describe_statement("")
                .sync()
                .wait()
                .parse("", "update t set v = v where id = 1")
                .bind("", "", &[])
                .execute("", 0)
                .sync()
                .wait(),
            0,
            "1 2 D D s | D D s ZI | 1 t T ZI | 1 2 C ZI",
        ),
    ]
}

/// Read only transactions run whole on the replica, as the primary would
/// run them; one that does what a read doesn't goes on on the primary,
/// which answers as if it had run it all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_transactions_run_on_the_replica() {
    let (env, _replica, targets, setup) = sides(PoolMode::Session).await;
    same_with_reads(&env, &targets, &setup, read_only_scripts()).await;
    whole_on_the_replica(&env).await;
}

/// The same in transaction pooling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_read_only_transactions_run_on_the_replica() {
    let (env, _replica, targets, setup) = sides(PoolMode::Transaction).await;
    same_with_reads(&env, &targets, &setup, read_only_scripts()).await;
    whole_on_the_replica(&env).await;
}

/// The whole transaction runs on the replica, the server it reports.
async fn whole_on_the_replica(env: &onetrip_tests::Env) {
    let c = connect(&env.proxy_dsn()).await;
    c.batch_execute("BEGIN READ ONLY").await.unwrap();
    let rows =
        onetrip_tests::simple_rows(&c.simple_query("SELECT pg_is_in_recovery()").await.unwrap());
    assert_eq!(rows[0][0].as_deref(), Some("t"));
    c.batch_execute("COMMIT").await.unwrap();
}

/// Read only transactions, and how many of their statements a replica
/// must serve.
fn read_only_scripts() -> Vec<(Script, u64, &'static str)> {
    vec![
        (
            Script::new()
                .queries(&[
                    "begin read only",
                    "select v from t where id = 1",
                    "show transaction_read_only",
                ])
                .read("select count(*) from t")
                .sync()
                .wait()
                .query("commit")
                .wait(),
            4,
            "C ZT | T D C ZT | T D C ZT | 1 2 T D C ZT | C ZI",
        ),
        (
            Script::new().queries(&[
                "BEGIN",
                "SET TRANSACTION READ ONLY",
                "select sum(v) from t",
                "rollback",
            ]),
            3,
            "C ZT | C ZT | T D C ZT | C ZI",
        ),
        (
            // A failed statement, then what the server answers in a
            // failed transaction, all on the replica.
            Script::new().queries(&[
                "start transaction read only",
                "select 1/0",
                "select 1",
                "commit",
            ]),
            3,
            "C ZT | E22012 ZE | E25P02 ZE | C ZI",
        ),
        (
            // A write: the primary refuses it in its own read only
            // transaction, and what follows fails there.
            Script::new().queries(&[
                "begin read only",
                "select v from t where id = 2",
                "insert into t values (9, 90)",
                "select 1",
                "rollback",
            ]),
            1,
            "C ZT | T D C ZT | E25006 ZE | E25P02 ZE | C ZI",
        ),
        (
            // A setting and a savepoint go on on the primary.
            Script::new().queries(&[
                "begin read only",
                "select v from t where id = 3",
                "set local work_mem = '8MB'",
                "show work_mem",
                "savepoint a",
                "select v from t where id = 4",
                "release a",
                "commit",
            ]),
            1,
            "C ZT | T D C ZT | C ZT | T D C ZT | C ZT | T D C ZT | C ZT | C ZI",
        ),
        (
            // A group the client waits on before its Sync (a Flush): the
            // primary, where the transaction goes on.
            Script::new()
                .queries(&["begin read only", "select 1"])
                .read("select v from t where id = 1")
                .flush()
                .wait()
                .sync()
                .wait()
                .query("commit")
                .wait(),
            1,
            "C ZT | T D C ZT | 1 2 T D C | ZT | C ZI",
        ),
        (
            // A cursor lives where it was declared: the primary.
            Script::new().queries(&[
                "begin read only",
                "select v from t where id = 5",
                "declare c cursor for select id from t order by id",
                "fetch 2 from c",
                "commit",
            ]),
            1,
            "C ZT | T D C ZT | C ZT | T D D C ZT | C ZI",
        ),
        (
            // Failed on the replica, then something it must not run: the
            // primary's transaction is made to fail as well.
            Script::new().queries(&["begin read only", "select 1/0", "savepoint a", "rollback"]),
            1,
            "C ZT | E22012 ZE | E25P02 ZE | C ZI",
        ),
        (
            // Read write, or at another isolation level: the primary.
            Script::new().queries(&[
                "begin read write",
                "select 1",
                "commit",
                "begin isolation level repeatable read read only",
                "select 1",
                "commit",
            ]),
            0,
            "C ZT | T D C ZT | C ZI | C ZT | T D C ZT | C ZI",
        ),
    ]
}

/// tokio-postgres prepares on the primary and runs each prepared read on
/// the replica, where the statement is made once per connection; a
/// statement it drops is closed there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_reads_run_on_the_replica() {
    let (env, _replica) = with_replica(None, |_| {}).await;
    let c = connect(&env.proxy_dsn()).await;
    let sql = "SELECT pg_is_in_recovery(), count(*) FROM pg_prepared_statements";
    let s = c.prepare(sql).await.unwrap();
    let before = stat(&env, "replica_reads").await;
    for _ in 0..5 {
        let row = c.query_one(&s, &[]).await.unwrap();
        // On the replica, whose connection holds that one statement.
        assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (true, 1));
    }
    assert_eq!(stat(&env, "replica_reads").await, before + 5);
    drop(s);
    // A new statement: the dropped one is closed on the replica ahead of
    // it, so the connection holds only the new one.
    let row = c.query_one(sql, &[]).await.unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (true, 1));
    // With parameters, typed by the primary's Describe.
    let row = c
        .query_one("SELECT pg_is_in_recovery(), $1::text || 'x'", &[&"a"])
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));
    assert_eq!(row.get::<_, String>(1), "ax");
    // A prepared write stays on the primary.
    c.batch_execute("CREATE TABLE w (v int)").await.unwrap();
    let n = c.execute("INSERT INTO w VALUES ($1)", &[&1]).await.unwrap();
    assert_eq!(n, 1);
}

/// 1,000 write-then-read sequences from `client` (`tests/py/replica_clients.py`)
/// against a replica that applies each commit 20 ms late, every query with
/// parameters: no read misses its write, the replica serves reads once it
/// has caught up, and every read that follows no write; and a read only
/// transaction the driver begins runs there whole.
async fn client_reads_its_own_writes(client: &str, module: &str) {
    let Some(py) = python_with(module) else {
        return skip(&format!("python module {module} not installed"));
    };
    let (env, _replica) = with_replica(Some(Duration::from_millis(20)), |_| {}).await;
    let c = connect(&env.proxy_dsn()).await;
    c.batch_execute("CREATE TABLE rw (id int PRIMARY KEY, v int); INSERT INTO rw VALUES (1, -1)")
        .await
        .unwrap();
    wait_replayed(&env.pg, &_replica).await;
    clients_read_their_own_writes(&py, client, &env.proxy_dsn());
    assert!(
        stat(&env, "fresh_reads").await > 0,
        "reads held to the primary"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_extended_reads_its_own_writes() {
    client_reads_its_own_writes("psycopg", "psycopg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asyncpg_reads_its_own_writes() {
    client_reads_its_own_writes("asyncpg", "asyncpg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlalchemy_reads_its_own_writes() {
    client_reads_its_own_writes("sqlalchemy", "sqlalchemy").await;
}

/// LangGraph's checkpoint saver (`tests/py/replica_langgraph.py`) against a
/// replica that applies each commit 20 ms late: every get_tuple after a put
/// finds that put, both by its id and as the thread's latest; once the
/// replica has caught up, the thread's checkpoints read back are all there,
/// and the replica served reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_saver_reads_its_own_puts() {
    let Some(py) = python_with("langgraph.checkpoint.postgres") else {
        return skip("langgraph-checkpoint-postgres not installed");
    };
    let (env, _replica) = with_replica(Some(Duration::from_millis(20)), |_| {}).await;
    let before = stat(&env, "replica_reads").await;
    let dsn = env.proxy_dsn();
    let out = tokio::task::block_in_place(|| run_py(&py, "replica_langgraph.py", &[&dsn, "200"]));
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["stale"], 0, "{j}");
    assert_eq!(j["listed"], 200, "{j}");
    assert_eq!(j["read_back"], 200, "{j}");
    assert_eq!(j["newest_first"], true, "{j}");
    assert!(
        stat(&env, "replica_reads").await > before,
        "the replica served none of the saver's reads"
    );
}

/// A read only transaction whose first statement the replica refuses (a
/// function the configuration calls read-only, and isn't) begins again on
/// the primary, which refuses the write in its own read only transaction;
/// the replica's BEGIN is rolled back before the connection serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_transaction_refused_at_its_start_goes_on_on_the_primary() {
    let (env, replica, c) = with_lying_function(|_| {}).await;
    wait_replayed(&env.pg, &replica).await;
    // Until the proxy's watcher has seen the replica replay this client's
    // write, its reads stay on the primary.
    for _ in 0..500 {
        if in_recovery(&c).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reruns = stat(&env, "replica_reruns").await;
    c.batch_execute("BEGIN READ ONLY").await.unwrap();
    let e = c.simple_query("SELECT add_one()").await.unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("25006"), "{e}");
    assert_eq!(stat(&env, "replica_reruns").await, reruns + 1);
    c.batch_execute("ROLLBACK").await.unwrap();
    // The replica connection serves reads again, outside any transaction.
    let rows = onetrip_tests::simple_rows(
        &c.simple_query("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
            .await
            .unwrap(),
    );
    assert_eq!(rows[0][0].as_deref(), Some("t"));
    // A read write transaction runs the function on the primary.
    c.batch_execute("BEGIN").await.unwrap();
    let rows = onetrip_tests::simple_rows(&c.simple_query("SELECT add_one()").await.unwrap());
    assert_eq!(rows[0][0].as_deref(), Some("1"));
    c.batch_execute("COMMIT").await.unwrap();
}
