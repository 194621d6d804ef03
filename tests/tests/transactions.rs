//! Transactions in fewer round trips: every rule as a transcript, message
//! for message, against PostgreSQL itself, through onetrip with its
//! defaults (BEGIN deferred), with `lazy_reads`, and with neither.

use onetrip::config::PoolMode;
use onetrip_tests::{
    connect,
    script::{RESET, Script, Sides},
    simple_rows,
};

const LAZY: &str = "onetrip with lazy reads";

/// PostgreSQL, onetrip with its defaults, with lazy reads, deferring
/// nothing, pooling, and pooling with lazy reads.
async fn sides() -> Sides {
    Sides::start(&[
        (LAZY, |c| c.transactions.lazy_reads = true),
        ("onetrip deferring nothing", |c| {
            c.transactions.defer_begin = false;
            c.coalesce.single_read = false;
        }),
        // Between two transactions a pooled session has no connection: a
        // BEGIN is held and answered with none.
        ("onetrip pooling", |c| {
            c.pool.mode = PoolMode::Transaction;
            c.pool.pool_size = 2;
        }),
        ("onetrip pooling with lazy reads", |c| {
            c.pool.mode = PoolMode::Transaction;
            c.pool.pool_size = 2;
            c.transactions.lazy_reads = true;
        }),
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_transactions_answer_as_postgres() {
    let s = sides().await;
    let cases: &[&[&str]] = &[
        &["begin", "select v from t where id = 2", "commit"],
        &["begin", "rollback"],
        &["BEGIN", "BEGIN", "commit"],
        &["start transaction", "select 1", "end"],
        &["begin work", "abort"],
        &["begin", "commit and no chain"],
        &["begin", "rollback and no chain"],
        &["begin", "select 1", "commit and chain", "commit"],
        &[
            "begin isolation level serializable",
            "select v from t where id = 1",
            "select v from t where id = 2",
            "commit",
        ],
        &[
            "begin read only",
            "update t set v = 0 where id = 1",
            "commit",
        ],
        &["begin", "select 1/0", "select 1", "commit"],
        &["begin", "select 1/0", "rollback"],
        &[
            "begin",
            "select v from t where id = 1",
            "set local statement_timeout = '5s'",
            "select v from t where id = 2",
            "commit",
        ],
        &[
            "begin",
            "select v from t where id = 1",
            "savepoint a",
            "insert into t values (1, 1)",
            "rollback to savepoint a",
            "commit",
        ],
        &[
            "begin",
            "select now() = statement_timestamp()",
            "select now() = statement_timestamp()",
            "commit",
        ],
        &[
            "begin",
            "declare c cursor for select id from t order by id",
            "fetch 2 from c",
            "commit",
        ],
        &[
            "begin",
            "select v from t where id = 3",
            "update t set v = v + 1 where id = 3",
            "select v from t where id = 3",
            "commit",
        ],
        &["begin", "select 1", "prepare transaction 'x'"],
        &["commit"],
        &["rollback"],
    ];
    for case in cases {
        s.same(Script::new().queries(case)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_and_extended_transactions_answer_as_postgres() {
    let s = sides().await;
    // BEGIN sent with its statement: nothing to defer, nothing changes.
    s.same(
        Script::new()
            .query("begin")
            .query("select v from t where id = 1")
            .wait()
            .query("commit")
            .wait(),
    )
    .await;
    // Everything at once, ends included.
    s.same(
        Script::new()
            .query("begin")
            .query("select v from t where id = 1")
            .query("commit")
            .wait(),
    )
    .await;
    // BEGIN in the extended protocol, as JDBC and pgx send it.
    let t = s
        .same(
            Script::new()
                .pbe("begin")
                .sync()
                .wait()
                .read("select v from t where id = 2")
                .sync()
                .wait()
                .pbe("commit")
                .sync()
                .wait(),
        )
        .await;
    assert_eq!(t, "1 2 C ZT | 1 2 T D C ZT | 1 2 C ZI");
    // With a Describe, and then the unnamed statement bound again.
    s.same(
        Script::new()
            .read("begin")
            .sync()
            .wait()
            .read("rollback")
            .sync()
            .wait()
            .bind("", "", &[])
            .execute("", 0)
            .sync()
            .wait(),
    )
    .await;
    // The unnamed statement is the held BEGIN: bound again, it is BEGIN
    // (PostgreSQL warns that a transaction is in progress), not the
    // statement made before it.
    s.same(
        Script::new()
            .parse("", "select v from t where id = 3")
            .sync()
            .wait()
            .pbe("begin")
            .sync()
            .wait()
            .bind("", "", &[])
            .execute("", 0)
            .sync()
            .wait()
            .pbe("select v from t where id = 1")
            .sync()
            .wait()
            .query("commit")
            .wait(),
    )
    .await;
    // A read that ran without the held BEGIN made the unnamed statement
    // since: bound again after the BEGIN went up, it is that read.
    s.same(
        Script::new()
            .pbe("begin")
            .sync()
            .wait()
            .pbe("select v from t where id = 3")
            .sync()
            .wait()
            .bind("", "", &[])
            .execute("", 0)
            .sync()
            .wait()
            .query("commit")
            .wait(),
    )
    .await;
    // A simple Query drops the unnamed statement, answered here or not.
    s.same(
        Script::new()
            .pbe("select 1")
            .sync()
            .wait()
            .query("begin")
            .wait()
            .query("commit")
            .wait()
            .bind("", "", &[])
            .execute("", 0)
            .sync()
            .wait(),
    )
    .await;
    // A lone Sync and Flush while the transaction is held.
    s.same(
        Script::new()
            .query("begin")
            .wait()
            .sync()
            .wait()
            .flush()
            .query("select 1/0")
            .wait()
            .sync()
            .wait()
            .query("commit")
            .wait(),
    )
    .await;
    // A pipelined read right after BEGIN is inside a healthy block.
    s.same(
        Script::new()
            .query("begin")
            .wait()
            .read("select v from t where id = 4")
            .flush()
            .wait()
            .sync()
            .flush()
            .wait()
            .query("commit")
            .wait(),
    )
    .await;
    // A named statement prepared inside, run after.
    s.same(
        Script::new()
            .query("begin")
            .wait()
            .parse("s", "select v from t where id = $1")
            .bind("", "s", &[Some("2")])
            .execute("", 0)
            .sync()
            .wait()
            .query("commit")
            .wait()
            .bind("", "s", &[Some("3")])
            .execute("", 0)
            .sync()
            .wait(),
    )
    .await;
}

/// A client that leaves with its transaction held leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_a_held_transaction_commits_nothing() {
    let s = sides().await;
    for dsn in [
        s.env.proxy_dsn(),
        s.env.dsn_at(s.proxy(LAZY).local_addr().port()),
    ] {
        let c = connect(&dsn).await;
        c.batch_execute("begin").await.unwrap();
        c.batch_execute("insert into t values (99, 99)")
            .await
            .unwrap();
        drop(c);
    }
    let direct = connect(&s.env.direct_dsn()).await;
    for _ in 0..50 {
        if s.env.proxy().stats().sessions().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let rows = direct
        .simple_query("select count(*) from t where id = 99")
        .await
        .unwrap();
    assert_eq!(simple_rows(&rows), [[Some("0".to_owned())]]);
}

/// One column of the admin console's `command`, for rows of `database`.
async fn admin_column(port: u16, command: &str, database: &str, column: &str) -> Vec<String> {
    let admin = connect(&format!(
        "host=127.0.0.1 port={port} user=postgres dbname=onetrip"
    ))
    .await;
    let mut out = Vec::new();
    for m in admin.simple_query(command).await.unwrap() {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m
            && r.get("database") == Some(database)
        {
            out.push(r.get(column).unwrap_or("NULL").to_owned());
        }
    }
    out
}

/// Operators see a transaction that has not reached the server, and the
/// round trips saved counted by what saved them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_transactions_and_savings_are_shown() {
    let s = sides().await;
    let port = s.env.proxy_port();
    let c = connect(&s.env.proxy_dsn()).await;
    c.batch_execute("begin").await.unwrap();
    let state = admin_column(port, "SHOW CLIENTS", &s.env.db, "state").await;
    assert_eq!(state, ["idle in transaction (not sent)"]);
    c.batch_execute("select 1").await.unwrap();
    let state = admin_column(port, "SHOW CLIENTS", &s.env.db, "state").await;
    assert_eq!(state, ["idle in transaction"]);
    c.batch_execute("commit").await.unwrap();
    let stat = |col| admin_column(port, "SHOW STATS", &s.env.db, col);
    assert_eq!(stat("deferred_begins").await, ["1"]);
    assert_eq!(stat("local_ends").await, ["0"]);

    // With lazy reads, the read runs alone and the COMMIT is answered here.
    let lazy = s.proxy(LAZY);
    let c = connect(&s.env.dsn_at(lazy.local_addr().port())).await;
    c.batch_execute("begin").await.unwrap();
    c.batch_execute("select 1").await.unwrap();
    c.batch_execute("commit").await.unwrap();
    let t = lazy.stats().total();
    assert_eq!(
        t.saved_by_kind(),
        [
            ("coalesced", 0),
            ("deferred_begin", 1),
            ("local_end", 1),
            ("local_close", 0)
        ]
    );
    assert_eq!(t.lazy_reads, 1);
    assert_eq!(t.client_round_trips - t.upstream_round_trips, 2);
}

/// A cancel while the proxy holds a BEGIN reaches a server with nothing to
/// cancel and does no harm; COPY after a deferred BEGIN runs in the
/// transaction, as direct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_copy_with_a_held_begin() {
    let s = sides().await;
    for dsn in [s.env.direct_dsn(), s.env.proxy_dsn()] {
        s.env.psql_ok(false, &["-c", RESET]);
        let c = connect(&dsn).await;
        c.batch_execute("begin").await.unwrap();
        c.cancel_token()
            .cancel_query(tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let rows = c.simple_query("select count(*) from t").await.unwrap();
        assert_eq!(simple_rows(&rows), [[Some("5".to_owned())]], "{dsn}");
        let sink = c.copy_in("copy t from stdin").await.unwrap();
        futures_util::pin_mut!(sink);
        use futures_util::SinkExt;
        sink.send(bytes::Bytes::from_static(b"6\t60\n7\t70\n"))
            .await
            .unwrap();
        assert_eq!(sink.finish().await.unwrap(), 2);
        c.batch_execute("rollback").await.unwrap();
        let rows = c.simple_query("select count(*) from t").await.unwrap();
        assert_eq!(simple_rows(&rows), [[Some("5".to_owned())]], "{dsn}");
    }
}

/// A client in pipeline mode may wait for an answer without a Sync or
/// Flush: the server sends an error at once. A group whose end has not
/// come goes to the server as it is, held BEGIN first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_its_end_is_not_kept_waiting() {
    let s = sides().await;
    s.same(
        Script::new()
            .query("begin")
            .wait()
            .pbe("select 1/0")
            .wait()
            .sync()
            .wait()
            .query("rollback")
            .wait(),
    )
    .await;
    s.same(
        Script::new()
            .pbe("begin")
            .pbe("select 1/0")
            .wait()
            .sync()
            .wait()
            .query("rollback")
            .wait(),
    )
    .await;
    // A statement prepared while the BEGIN is held, then run.
    s.same(
        Script::new()
            .query("begin")
            .wait()
            .parse("s", "select 1/0")
            .sync()
            .wait()
            .bind("", "s", &[])
            .describe_portal("")
            .execute("", 0)
            .wait()
            .sync()
            .wait()
            .query("rollback")
            .wait(),
    )
    .await;
}

/// A BEGIN with modes a read outside it would not report is never stood in
/// for by lazy reads; a session isolation set through `set_config` with
/// parameters is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_reads_keep_the_transactions_modes() {
    let s = sides().await;
    for begin in [
        "begin read only",
        "begin isolation level read uncommitted",
        "begin isolation level read committed, read write",
    ] {
        s.same(Script::new().queries(&[
            begin,
            "select current_setting('transaction_isolation'), current_setting('transaction_read_only')",
            "commit",
        ]))
        .await;
    }
    s.same(
        Script::new()
            .parse("", "select set_config($1, $2, false)")
            .bind(
                "",
                "",
                &[
                    Some("default_transaction_isolation"),
                    Some("repeatable read"),
                ],
            )
            .execute("", 0)
            .sync()
            .wait()
            .query("begin")
            .wait()
            .query("select current_setting('transaction_isolation')")
            .wait()
            .query("commit")
            .wait()
            .query("reset default_transaction_isolation")
            .wait(),
    )
    .await;
}
