//! Cypher rewriting inside the proxy, without AGE: the catalog is fetched
//! once over a session's own connection (hidden from the client, in the
//! same write as a statement, which goes on unchanged), shared by
//! sessions, and statements are forwarded unchanged whenever the catalog is
//! missing. A stand-in `ag_catalog` (plain tables, no agtype) lets the test
//! see a rewrite happen: the compiled SQL then fails on the missing type.
//! Sessions of the stand-in get `ag_catalog` on their search path and the
//! setting AGE's library defines when it loads (a placeholder here), or
//! nothing would be compiled.

use onetrip_tests::{Env, connect};

const CYPHER: &str =
    "select * from cypher('g', $$ MATCH (n:Person) RETURN n.name $$) as (name agtype)";

fn error_of(r: Result<Vec<tokio_postgres::SimpleQueryMessage>, tokio_postgres::Error>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => e
            .as_db_error()
            .map(|d| format!("{} {}", d.code().code(), d.message()))
            .unwrap_or(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_age_statements_pass_unchanged() {
    let env = Env::start().await;
    let direct = connect(&env.direct_dsn()).await;
    let proxied = connect(&env.proxy_dsn()).await;
    let want = error_of(direct.simple_query(CYPHER).await);
    assert_eq!(error_of(proxied.simple_query(CYPHER).await), want);
    // The hidden catalog query failed; the session is unaffected.
    assert_eq!(
        proxied
            .query_one("select 41 + 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        42
    );
    assert_eq!(error_of(proxied.simple_query(CYPHER).await), want);
    // Extended protocol too.
    let e = proxied
        .prepare(CYPHER)
        .await
        .err()
        .and_then(|e| e.as_db_error().map(|d| d.code().code().to_owned()));
    let d = direct
        .prepare(CYPHER)
        .await
        .err()
        .and_then(|e| e.as_db_error().map(|d| d.code().code().to_owned()));
    assert_eq!(e, d);
    assert_eq!(env.proxy().stats().total().rewritten_queries, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_fetched_once_and_shared() {
    let env = Env::start().await;
    let admin = connect(&env.direct_dsn()).await;
    admin
        .batch_execute(
            "create sequence catalog_fetches;
             alter database postgres set search_path = ag_catalog, \"$user\", public;
             alter database postgres set age.enable_containment = on;
             create schema ag_catalog;
             create table ag_catalog.graphs(graphid oid, name name, namespace regnamespace);
             create view ag_catalog.ag_graph as
               select * from ag_catalog.graphs where nextval('catalog_fetches') > 0;
             create table ag_catalog.ag_label(name name, graph oid, id int, kind \"char\", relation regclass);
             create schema g;
             create table g.\"Person\"(id bigint, properties text);
             insert into ag_catalog.graphs values (4242, 'g', 'g'::regnamespace);
             insert into ag_catalog.ag_label values ('Person', 4242, 1, 'v', 'g.\"Person\"'::regclass);",
        )
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let dsn = env.proxy_dsn();
        tasks.push(tokio::spawn(async move {
            let c = connect(&dsn).await;
            let first = error_of(c.simple_query(CYPHER).await);
            let again = error_of(c.simple_query(CYPHER).await);
            (first, again)
        }));
    }
    let mut unchanged = 0;
    for t in tasks {
        let (first, again) = t.await.unwrap();
        // Compiled SQL reached the server: it names AGE's operators/types,
        // which this stand-in lacks. The statement the catalog read went
        // with went unchanged (to the missing `cypher()`); the sessions
        // that waited for that read had theirs compiled.
        assert!(!again.contains("function cypher"), "{again}");
        if first.contains("function cypher") {
            unchanged += 1;
        } else {
            assert_eq!(first, again);
        }
    }
    assert_eq!(unchanged, 1, "one statement carried the catalog read");
    let fetches: i64 = admin
        .query_one("select last_value from catalog_fetches", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(fetches, 1, "one catalog fetch for all sessions");
    assert_eq!(env.proxy().stats().total().rewritten_queries, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_block_without_catalog_forwards_unchanged() {
    let env = Env::start().await;
    let direct = connect(&env.direct_dsn()).await;
    let proxied = connect(&env.proxy_dsn()).await;
    let run = async |c: &tokio_postgres::Client| {
        c.batch_execute("begin").await.unwrap();
        let e = error_of(c.simple_query(CYPHER).await);
        c.batch_execute("rollback").await.unwrap();
        e
    };
    assert_eq!(run(&proxied).await, run(&direct).await);
    let reasons = env.proxy().stats().fallback_reasons();
    assert!(
        reasons
            .iter()
            .any(|(r, _)| r == "cypher: catalog_not_loaded"),
        "{reasons:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_mode_returns_ages_answer_and_counts_differences() {
    let env = Env::start_with(Default::default(), |cfg| cfg.planner.verify = true).await;
    let admin = connect(&env.direct_dsn()).await;
    admin
        .batch_execute(
            "alter database postgres set search_path = ag_catalog, \"$user\", public;
             alter database postgres set age.enable_containment = on;
             create schema ag_catalog;
             create table ag_catalog.ag_graph(graphid oid, name name, namespace regnamespace);
             create table ag_catalog.ag_label(name name, graph oid, id int, kind \"char\", relation regclass);
             create schema g;
             create table g.\"Person\"(id bigint, properties json);
             insert into ag_catalog.ag_graph values (4242, 'g', 'g'::regnamespace);
             insert into ag_catalog.ag_label values ('Person', 4242, 1, 'v', 'g.\"Person\"'::regclass);",
        )
        .await
        .unwrap();
    let proxied = connect(&env.proxy_dsn()).await;
    // The client gets the original statement's answer (here: no cypher()
    // function without AGE), never the compiled one's. The first carries
    // the catalog read and is not compiled. (tokio-postgres returns an
    // error before its ReadyForQuery: `select 1` waits for that, so the
    // next statement finds the session idle, as verify mode needs.)
    let want = error_of(admin.simple_query(CYPHER).await);
    assert_eq!(error_of(proxied.simple_query(CYPHER).await), want);
    proxied.simple_query("select 1").await.unwrap();
    assert_eq!(error_of(proxied.simple_query(CYPHER).await), want);
    assert_eq!(
        proxied
            .query_one("select 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        1
    );
    let reasons = env.proxy().stats().fallback_reasons();
    assert!(
        reasons
            .iter()
            .any(|(r, n)| r == "cypher verify: mismatch" && *n == 1),
        "{reasons:?}"
    );
}

/// Statements that may change the AGE catalog (Cypher writes, label DDL, or
/// anything the check can't rule out) go upstream as they are and refresh
/// the catalog after they ran; they never wait for a fetch of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_changing_statements_are_forwarded_at_once() {
    let env = Env::start().await;
    let direct = connect(&env.direct_dsn()).await;
    let proxied = connect(&env.proxy_dsn()).await;
    let writes = [
        // `cypher(` not followed by a graph name: the check can't rule it out.
        "select x from (select 1) as cypher(x)",
        "select * from cypher('g', $$ CREATE (n:Person) $$) as (a agtype)",
        "select ag_catalog.create_vlabel('g', 'City')",
    ];
    for sql in writes {
        let want = error_of(direct.simple_query(sql).await);
        let got = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            proxied.simple_query(sql),
        )
        .await
        .unwrap_or_else(|_| panic!("no answer through the proxy for {sql}"));
        assert_eq!(error_of(got), want, "{sql}");
        let prepared =
            tokio::time::timeout(std::time::Duration::from_secs(20), proxied.prepare(sql))
                .await
                .unwrap_or_else(|_| panic!("no answer to Parse through the proxy for {sql}"));
        let want = direct
            .prepare(sql)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert_eq!(
            prepared.map(|_| ()).map_err(|e| e.to_string()),
            want,
            "{sql}"
        );
    }
}

/// A catalog fetch that fails for another reason than AGE's absence (here
/// an error in the stand-in's view) leaves statements unchanged for a
/// while, is counted, and is tried again: rewriting comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_catalog_fetch_is_retried() {
    let env = Env::start().await;
    let admin = connect(&env.direct_dsn()).await;
    admin
        .batch_execute(
            "alter database postgres set search_path = ag_catalog, \"$user\", public;
             alter database postgres set age.enable_containment = on;
             create table healthy(ok int);
             create schema ag_catalog;
             create table ag_catalog.graphs(graphid oid, name name, namespace regnamespace);
             create view ag_catalog.ag_graph as
               select * from ag_catalog.graphs where 1 / (select count(*) from healthy) > 0;
             create table ag_catalog.ag_label(name name, graph oid, id int, kind \"char\", relation regclass);
             create schema g;
             create table g.\"Person\"(id bigint, properties text);
             insert into ag_catalog.graphs values (4242, 'g', 'g'::regnamespace);
             insert into ag_catalog.ag_label values ('Person', 4242, 1, 'v', 'g.\"Person\"'::regclass);",
        )
        .await
        .unwrap();
    let proxied = connect(&env.proxy_dsn()).await;
    let unchanged = error_of(admin.simple_query(CYPHER).await);
    assert_eq!(error_of(proxied.simple_query(CYPHER).await), unchanged);
    let reasons = env.proxy().stats().fallback_reasons();
    assert!(
        reasons
            .iter()
            .any(|(r, _)| r == "cypher: catalog fetch failed (22012)"),
        "{reasons:?}"
    );
    // Before the retry is due, statements go on unchanged without a fetch.
    assert_eq!(error_of(proxied.simple_query(CYPHER).await), unchanged);
    admin
        .batch_execute("insert into healthy values (1)")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    // The retry goes with a statement, which goes on unchanged.
    assert_eq!(error_of(proxied.simple_query(CYPHER).await), unchanged);
    let compiled = error_of(proxied.simple_query(CYPHER).await);
    assert_ne!(compiled, unchanged, "compiled once the fetch succeeds");
    assert_eq!(env.proxy().stats().total().rewritten_queries, 1);
}
