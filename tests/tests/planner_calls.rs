//! A statement run again asks the planner once per execution, and its text
//! is analysed once: a `cypher()` statement once for all sessions (per
//! catalog version), a coalesced read once per session. The planner's
//! counters are the process's, so this file holds one test.

use onetrip_planner::analysis::{analyses_run, lookups};
use onetrip_tests::{Env, connect, transcript::Raw};

const CYPHER: &str =
    "select * from cypher('g', $$ MATCH (n:Person) RETURN n.name $$) as (name agtype)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_planner_call_per_execution_one_analysis_per_text() {
    let env = Env::start().await;
    // The stand-in AGE catalog of tests/cypher_proxy.rs: enough to compile.
    connect(&env.direct_dsn())
        .await
        .batch_execute(
            "alter database postgres set search_path = ag_catalog, \"$user\", public;
             alter database postgres set age.enable_containment = on;
             create schema ag_catalog;
             create table ag_catalog.ag_graph(graphid oid, name name, namespace regnamespace);
             create table ag_catalog.ag_label(name name, graph oid, id int, kind \"char\", relation regclass);
             create schema g;
             create table g.\"Person\"(id bigint, properties text);
             insert into ag_catalog.ag_graph values (4242, 'g', 'g'::regnamespace);
             insert into ag_catalog.ag_label values ('Person', 4242, 1, 'v', 'g.\"Person\"'::regclass);
             create table t(id int primary key, v int); insert into t values (1, 10)",
        )
        .await
        .unwrap();
    // Compiled once, by the first session; the catalog is loaded by then.
    let first = connect(&env.proxy_dsn()).await;
    let _ = first.simple_query(CYPHER).await;
    let _ = first.simple_query(CYPHER).await;
    let (runs, calls) = (analyses_run(), lookups());
    let sessions = 3;
    let per_session = 5;
    for _ in 0..sessions {
        let c = connect(&env.proxy_dsn()).await;
        for _ in 0..per_session {
            let _ = c.simple_query(CYPHER).await;
        }
    }
    let executions = (sessions * per_session) as u64;
    assert_eq!(analyses_run() - runs, 0, "compiled once for all sessions");
    // A new session's first execution misses its own cache and takes the
    // analysis the first session shared: one lookup too.
    assert_eq!(
        lookups() - calls,
        executions,
        "one planner call per execution"
    );
    // The first session's first statement carried the catalog's read
    // and went to AGE as it came; its second was compiled.
    assert_eq!(
        env.proxy().stats().total().rewritten_queries,
        executions + 1
    );

    // A coalesced read: the Flush asks the planner, once per execution,
    // and the text is analysed once in the session.
    let mut raw = Raw::connect(env.proxy_port(), &[]).await;
    raw.query("select 1");
    raw.round_trip('Z').await;
    let (runs, calls) = (analyses_run(), lookups());
    for _ in 0..10 {
        raw.read_batch("select v from t where id = 1").flush();
        raw.round_trip('C').await;
        raw.sync().flush();
        raw.round_trip('Z').await;
    }
    assert_eq!(analyses_run() - runs, 1, "analysed once in the session");
    assert_eq!(lookups() - calls, 10, "one planner call per execution");
    assert_eq!(env.proxy().stats().total().coalesced_batches, 10);
}
