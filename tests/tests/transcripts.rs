//! Message sequences sent to PostgreSQL and through onetrip side by side,
//! with coalescing on and off: the same answers, in the same order, at the
//! same points, and the same tables afterwards.

use onetrip_tests::script::{Script, Sides, Target, compare};

/// PostgreSQL, onetrip with its defaults and onetrip without coalescing.
async fn sides() -> Sides {
    Sides::start(&[("onetrip without coalescing", |c| {
        c.coalesce.single_read = false
    })])
    .await
}

/// A batch behind an unanswered Sync or Query must not take that one's
/// ReadyForQuery as the answer to its own early Sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_behind_unanswered_requests_keeps_their_order() {
    let s = sides().await;

    let t = s
        .same(
            Script::new()
                .pbe("select 1")
                .sync()
                .write()
                .pbe("select 2")
                .flush()
                .wait()
                .sync()
                .wait(),
        )
        .await;
    assert_eq!(t, "1 2 D C ZI 1 2 D C | ZI");

    let t = s
        .same(
            Script::new()
                .pbe("select 1/0")
                .sync()
                .write()
                .pbe("select 2")
                .flush()
                .wait()
                .sync()
                .wait(),
        )
        .await;
    assert_eq!(t, "1 E22012 ZI 1 2 D C | ZI");

    let t = s
        .same(
            Script::new()
                .query("select pg_sleep(0.05)")
                .pbe("select 2")
                .flush()
                .wait()
                .sync()
                .wait(),
        )
        .await;
    assert_eq!(t, "T D C ZI 1 2 D C | ZI");

    let t = s
        .same(
            Script::new()
                .query("create temp table tt(x int)")
                .query("begin")
                .query("insert into tt values (1)")
                .query("commit")
                .pbe("select 2")
                .flush()
                .wait()
                .sync()
                .wait(),
        )
        .await;
    assert_eq!(t, "C ZI C ZT C ZT C ZI 1 2 D C | ZI");
}

/// A write right behind an unanswered COMMIT runs in an implicit
/// transaction of its own, which a failing statement before its Sync rolls
/// back: it must not be coalesced as if it were still inside the block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_behind_an_unanswered_commit_is_not_in_the_block() {
    let s = sides().await;
    s.same(
        Script::new()
            .query("begin")
            .wait()
            .query("update t set v = 0 where id = 1")
            .query("commit")
            .pbe("insert into t values (6, 60)")
            .flush()
            .wait()
            .pbe("select 1/0")
            .sync()
            .wait(),
    )
    .await;
}

/// The statement a Bind names is the one the server holds: a Parse that
/// failed, a DEALLOCATE and a PREPARE in SQL all change what that is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_are_the_servers() {
    let s = sides().await;

    // A Parse that fails (the name is taken) leaves the old statement, a
    // write; the read it would have been must not be coalesced.
    let write_then_fail = |script: Script| {
        script
            .bind("", "s1", &[])
            .execute("", 0)
            .flush()
            .wait()
            .pbe("select 1/0")
            .sync()
            .wait()
    };
    s.same(write_then_fail(
        Script::new()
            .parse("s1", "insert into t values (7, 70)")
            .sync()
            .wait()
            .parse("s1", "select 1")
            .sync()
            .wait(),
    ))
    .await;

    // A Parse that fails for its own text, then a Bind of the name.
    s.same(
        Script::new()
            .parse("s2", "select * from no_such_table")
            .sync()
            .wait()
            .bind("", "s2", &[])
            .execute("", 0)
            .flush()
            .wait()
            .sync()
            .wait(),
    )
    .await;

    // DEALLOCATE and PREPARE in SQL replace the statement.
    s.same(write_then_fail(
        Script::new()
            .parse("s1", "select 1")
            .sync()
            .wait()
            .query("deallocate s1")
            .wait()
            .query("prepare s1 as insert into t values (8, 80)")
            .wait(),
    ))
    .await;

    // DISCARD ALL drops every prepared statement.
    s.same(write_then_fail(
        Script::new()
            .parse("s1", "select 1")
            .sync()
            .wait()
            .query("discard all")
            .query("prepare s1 as insert into t values (9, 90)")
            .wait(),
    ))
    .await;

    // EXECUTE runs the prepared statement: a write, whatever it is called.
    s.same(
        Script::new()
            .query("prepare w as insert into t values (10, 100)")
            .wait()
            .pbe("execute w")
            .flush()
            .wait()
            .pbe("select 1/0")
            .sync()
            .wait(),
    )
    .await;
}

/// After a batch coalesced with the write probe, what the client sends
/// before its Sync runs after the snapshot statement, whose answers it
/// never sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_after_a_probed_batch() {
    let s = sides().await;
    let cte = "with u as (update t set v = v where false returning id) select count(*) from u";
    s.same(
        Script::new()
            .read(cte)
            .flush()
            .wait()
            .parse("s1", "select v from t where id = $1")
            .flush()
            .sync()
            .wait(),
    )
    .await;
    // A Parse behind the statement, in the same batch: its answer comes
    // before the probe's.
    s.same(
        Script::new()
            .read(cte)
            .parse("s1", "select v from t where id = $1")
            .flush()
            .sync()
            .wait(),
    )
    .await;
    // A Parse answered at an earlier Flush of the same batch is not run
    // again with it.
    let writes = "with u as (update t set v = v + 1 where id = 3 returning id, v) select * from u";
    s.same(
        Script::new()
            .parse("s1", "select v from t where id = $1")
            .flush()
            .wait()
            .read(writes)
            .flush()
            .write()
            .sync()
            .wait(),
    )
    .await;
    s.same(
        Script::new()
            .pbe("commit")
            .sync()
            .read(cte)
            .flush()
            .wait()
            .parse("s1", "select v from t where id = $1")
            .flush()
            .sync()
            .wait(),
    )
    .await;
}

/// A batch that writes after all runs again after the probe; a named
/// statement it prepared, wherever in the batch, is prepared again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_prepares_its_named_statements_again() {
    let s = sides().await;
    let writes = "with u as (update t set v = v + 1 where id = 3 returning id, v) select * from u";
    s.same(
        Script::new()
            .pbe(writes)
            .parse("s1", "select v from t where id = $1")
            .flush()
            .sync()
            .wait(),
    )
    .await;
    s.same(
        Script::new()
            .parse("w", writes)
            .bind("", "w", &[])
            .describe_portal("")
            .execute("", 0)
            .parse("s2", "select 2")
            .flush()
            .wait()
            .sync()
            .wait()
            .bind("", "s2", &[])
            .execute("", 0)
            .sync()
            .wait(),
    )
    .await;
}

/// After an error the server skips what follows until the client's Sync,
/// Queries included; a batch sent meanwhile must not be coalesced, or its
/// early Sync would end the skipping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_coalesced_while_the_server_skips() {
    let s = sides().await;
    s.same(
        Script::new()
            .pbe("select 1")
            .bind("p1", "no_such_statement", &[])
            .execute("p1", 0)
            .flush()
            .wait()
            .query("select 2")
            .read("select 3")
            .flush()
            .wait()
            .read("select 4")
            .sync()
            .wait(),
    )
    .await;
}

/// The server reports a changed setting just before ReadyForQuery: a
/// setting inside a block is not coalesced, or its report would come with
/// the early Sync's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_reported_where_the_server_reports_them() {
    let s = sides().await;
    s.same(
        Script::new()
            .query("begin")
            .wait()
            .read("set application_name = 'inside'")
            .flush()
            .wait()
            .sync()
            .wait()
            .query("rollback")
            .wait(),
    )
    .await;
}

/// Answers held behind a write probe past `max_held_bytes` are let go and
/// the batch runs again as the client sent it, whatever the probe found:
/// memory stays bounded, and the client sees one run's answers, as direct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_past_the_held_bound_are_run_again_not_held() {
    let s = sides().await;
    let small = s
        .env
        .start_proxy(|c| c.coalesce.max_held_bytes = 4096)
        .await;
    let mut targets = s.targets();
    targets.push(Target::new(
        "onetrip holding 4 KB",
        small.local_addr().port(),
    ));
    let setup = s.setup();
    let big = "with d as (delete from t where false) \
               select g, repeat('x', 100) from generate_series(1, 500) g";
    let writes = "with u as (update t set v = v + 1 where id = 2 returning id) \
                  select g, repeat('y', 100) from generate_series(1, 500) g";
    // With a data-modifying CTE, PostgreSQL runs the statement to its end
    // before sending a row: this one sends only its error, held within
    // the bound.
    let fails = "with d as (delete from t where false) \
                 select g, repeat('z', 100), 1 / (400 - g) from generate_series(1, 500) g";
    for sql in [big, writes, fails] {
        // Twice: the second time, the statement is no longer coalesced.
        let script = Script::new().pbe(sql).flush().wait().sync().wait();
        let script = script.pbe(sql).flush().wait().sync().wait();
        if let Err(m) = compare(&targets, &setup, &script).await {
            panic!("{m}");
        }
    }
    let reasons = small.stats().fallback_reasons();
    assert!(
        reasons
            .iter()
            .any(|(r, n)| r.contains("max_held_bytes") && *n == 2),
        "{reasons:?}"
    );
}

/// A Terminate sent behind a query is read by the server only after the
/// query has run: the client gets the query's answers, then the connection
/// closes, as it does from PostgreSQL itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goodbye_behind_a_query_waits_for_its_answers() {
    let s = sides().await;
    let mut seen = Vec::new();
    for t in s.targets() {
        let db = [("database", s.env.db.as_str())];
        let mut raw = onetrip_tests::transcript::Raw::connect(t.port, &db).await;
        raw.query("select pg_sleep(0.2), 1").goodbye().send().await;
        let got = raw.until_closed().await;
        let tokens: Vec<String> = got.iter().map(onetrip_tests::script::token).collect();
        seen.push((t.name.clone(), tokens));
    }
    let (reference, want) = &seen[0];
    assert_eq!(want.len(), 4, "{reference}: {want:?}");
    for (name, got) in &seen[1..] {
        assert_eq!(got, want, "{name} against {reference}");
    }
}

/// A COPY in a transaction block, its batch ended by a Flush: never
/// coalesced, since a COPY FROM STDIN reads an early Sync as its data and
/// never answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_in_a_block_is_not_coalesced() {
    let s = sides().await;
    let t = s
        .same(
            Script::new()
                .query("begin")
                .wait()
                .pbe("copy t from stdin")
                .flush()
                .wait()
                .copy_data("6\t60\n")
                .copy_done()
                .sync()
                .wait()
                .pbe("copy (select id from t where id > 4) to stdout")
                .flush()
                .wait()
                .sync()
                .wait()
                .query("commit")
                .wait(),
        )
        .await;
    assert_eq!(t, "C ZT | 1 2 G | C ZT | 1 2 H d d c C | ZT | C ZI");
}
