//! Differential test of the Cypher compiler against Apache AGE itself:
//! every query of `planner/tests/cypher_corpus/queries.txt` runs through
//! AGE's `cypher()` and as the SQL the compiler emits, on a seeded graph
//! (`planner/tests/cypher_corpus/gen.rs`); rows must be identical as text
//! (in order where the corpus marks the ORDER BY total) or the errors the
//! same (SQLSTATE and message). A declined query goes to AGE unchanged, so
//! its answer is AGE's by construction; it is not counted as compiled.
//!
//! The server: `ONETRIP_AGE_DSN` when set (it must be reachable and have
//! AGE), else a private one the harness starts (`ONETRIP_AGE_SRC`), else a
//! skip line.

#[path = "../../planner/tests/cypher_corpus/gen.rs"]
mod generator;

use std::collections::{BTreeMap, HashMap};

use onetrip_planner::cypher::ast::Clause;
use onetrip_planner::cypher::{Catalog, Rewrite, RewriteOptions, parse, rewrite_sql};
use tokio_postgres::{Client, NoTls};

const GRAPH: &str = "snb_diff";
const SEED: u64 = 20261202;
const SETUP: &str =
    "LOAD 'age'; SET search_path = ag_catalog, \"$user\", public; SET statement_timeout = '30s'";
/// Fewest queries that must compile; raise it as the compiler grows.
const MIN_COMPILED: usize = 540;
/// Smallest share of the queries AGE accepts that must compile, percent.
const MIN_COMPILED_SHARE: f64 = 90.0;

type Rows = Result<Vec<Vec<Option<String>>>, (String, String)>;

async fn run(c: &Client, sql: &str) -> Rows {
    match c.simple_query(sql).await {
        Ok(msgs) => Ok(onetrip_tests::simple_rows(&msgs)),
        Err(e) => match e.as_db_error() {
            Some(d) => Err((d.code().code().to_string(), d.message().to_string())),
            None => Err(("?".into(), e.to_string())),
        },
    }
}

/// Runs `sql`, through PREPARE/EXECUTE when the query has parameters so the
/// parameter map is bound as `$1` of unspecified type, as a driver would.
async fn run_maybe_prepared(c: &Client, sql: &str, params: Option<&str>, n: usize) -> Rows {
    let Some(p) = params else {
        return run(c, sql).await;
    };
    let name = format!("dq{n}");
    let lit = format!("'{}'", p.replace('\'', "''"));
    let _ = c.simple_query(&format!("DEALLOCATE {name}")).await;
    if let Err(e) = c.simple_query(&format!("PREPARE {name} AS {sql}")).await {
        let d = e
            .as_db_error()
            .map(|d| (d.code().code().to_string(), d.message().to_string()));
        return Err(d.unwrap_or(("?".into(), e.to_string())));
    }
    let r = run(c, &format!("EXECUTE {name}({lit})")).await;
    let _ = c.simple_query(&format!("DEALLOCATE {name}")).await;
    r
}

async fn connect(dsn: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(dsn, NoTls)
        .await
        .unwrap_or_else(|e| panic!("AGE server at {dsn:?} unreachable: {e}"));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS age")
        .await
        .unwrap_or_else(|e| panic!("no Apache AGE at {dsn:?}: {e}"));
    client.batch_execute(SETUP).await.expect("session setup");
    client
}

async fn load_graph(c: &Client, scale: u64) {
    for s in generator::setup_sql(GRAPH) {
        c.simple_query(&s).await.expect("graph setup");
    }
    let rows = run(
        c,
        &format!(
            "SELECT l.name, l.id FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g \
             ON l.graph = g.graphid WHERE g.name = '{GRAPH}'"
        ),
    )
    .await
    .expect("labels");
    let ids: HashMap<String, u64> = rows
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap_or_default(),
                r[1].as_deref().unwrap_or("0").parse().unwrap_or(0),
            )
        })
        .collect();
    let g = generator::generate_scaled(SEED, scale);
    for s in generator::load_sql(GRAPH, &g, &|l| ids.get(l).copied().unwrap_or(0)) {
        c.simple_query(&s).await.expect("graph load");
    }
}

async fn catalog(c: &Client) -> Catalog {
    let rows = run(c, Catalog::QUERY).await.expect("catalog");
    Catalog::from_rows(rows.iter().map(|r| {
        (
            r[0].as_deref().unwrap_or(""),
            r[1].as_deref().unwrap_or(""),
            r[2].as_deref().and_then(|s| s.parse().ok()).unwrap_or(0),
            r[3].as_deref(),
            r[4].as_deref(),
            r[5].as_deref(),
        )
    }))
}

struct Query {
    cypher: String,
    ordered: bool,
    params: Option<String>,
    /// Columns of the result when the text says (`columns N:`, for
    /// `RETURN *`), else those of the last RETURN.
    columns: Option<usize>,
}

fn queries() -> Vec<Query> {
    let text = include_str!("../../planner/tests/cypher_corpus/queries.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (ordered, l) = match l.strip_prefix("ordered:") {
                Some(rest) => (true, rest.trim()),
                None => (false, l),
            };
            let (columns, l) = match l
                .strip_prefix("columns ")
                .and_then(|rest| rest.split_once(':'))
                .and_then(|(n, rest)| Some((n.trim().parse().ok()?, rest.trim())))
            {
                Some((n, rest)) => (Some(n), rest),
                None => (None, l),
            };
            let (cypher, params) = match l.split_once("|||") {
                Some((q, p)) => (q.trim().to_string(), Some(p.trim().to_string())),
                None => (l.to_string(), None),
            };
            Query {
                cypher,
                ordered,
                params,
                columns,
            }
        })
        .collect()
}

/// Columns of the final RETURN (one when there is none or it can't be told).
fn return_width(cypher: &str) -> usize {
    let Ok(st) = parse(cypher) else { return 1 };
    match st.parts[0].clauses.last() {
        Some(Clause::Return(p)) if !p.star => p.items.len().max(1),
        _ => 1,
    }
}

fn same(ordered: bool, want: &Rows, got: &Rows) -> bool {
    match (want, got) {
        (Ok(a), Ok(b)) if ordered => a == b,
        (Ok(a), Ok(b)) => {
            let (mut a, mut b) = (a.clone(), b.clone());
            a.sort();
            b.sort();
            a == b
        }
        (Err(a), Err(b)) => a == b,
        _ => false,
    }
}

fn show(r: &Rows) -> String {
    match r {
        Ok(rows) => format!("{} rows, first {:?}", rows.len(), rows.first()),
        Err(e) => format!("error {e:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cypher_differential() {
    let (_server, dsn) = match std::env::var("ONETRIP_AGE_DSN") {
        Ok(dsn) if !dsn.is_empty() => (None, dsn),
        _ => match onetrip_tests::age::start_age_pg("cypher differential").await {
            Some(pg) => {
                let dsn = pg.dsn("postgres");
                (Some(pg), dsn)
            }
            None => return,
        },
    };
    let c = connect(&dsn).await;
    load_graph(&c, 1).await;
    let cat = catalog(&c).await;
    let qs = queries();
    let (mut identical, mut compiled, mut accepted, mut accepted_compiled) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    let mut declined: BTreeMap<&str, usize> = BTreeMap::new();
    for (n, q) in qs.iter().enumerate() {
        let width = q.columns.unwrap_or_else(|| return_width(&q.cypher));
        let cols: Vec<String> = (1..=width).map(|i| format!("c{i} agtype")).collect();
        let arg = if q.params.is_some() { ", $1" } else { "" };
        let sql = format!(
            "SELECT * FROM cypher('{GRAPH}', $$ {} $${arg}) AS ({})",
            q.cypher,
            cols.join(", ")
        );
        let t0 = std::time::Instant::now();
        let want = run_maybe_prepared(&c, &sql, q.params.as_deref(), n).await;
        let ta = t0.elapsed();
        if ta.as_millis() >= 500
            && !matches!(
                rewrite_sql(&sql, &cat, &RewriteOptions::default()),
                Rewrite::Rewritten(_)
            )
        {
            println!("slow: AGE {ta:?}, declined: {}", q.cypher);
        }
        accepted += want.is_ok() as usize;
        let sql_compiled = match rewrite_sql(&sql, &cat, &RewriteOptions::default()) {
            Rewrite::Rewritten(s) => s,
            Rewrite::Declined(r) => {
                *declined.entry(r.name()).or_default() += 1;
                let age = if want.is_ok() {
                    "AGE answers"
                } else {
                    "AGE rejects"
                };
                println!("declined ({}, {age}): {}", r.name(), q.cypher);
                identical += 1;
                continue;
            }
            Rewrite::Unchanged => panic!("no cypher call found in {sql}"),
        };
        compiled += 1;
        accepted_compiled += want.is_ok() as usize;
        let t1 = std::time::Instant::now();
        let got = run_maybe_prepared(&c, &sql_compiled, q.params.as_deref(), n).await;
        let tb = t1.elapsed();
        if ta.as_millis() >= 500 || tb.as_millis() >= 500 {
            println!("slow: AGE {ta:?}, compiled {tb:?}: {}", q.cypher);
        }
        if same(q.ordered, &want, &got) {
            identical += 1;
        } else {
            failures.push(format!(
                "{}\n  AGE:      {}\n  compiled: {}\n  sql: {sql_compiled}",
                q.cypher,
                show(&want),
                show(&got)
            ));
        }
    }
    let share = 100.0 * accepted_compiled as f64 / accepted.max(1) as f64;
    onetrip_tests::age::report(&format!(
        "cypher differential: {} queries, {identical} identical, {compiled} compiled \
         ({accepted_compiled} of {accepted} AGE accepts, {share:.1}%)",
        qs.len()
    ));
    println!("declined: {declined:?}");
    for f in &failures {
        println!("MISMATCH {f}");
    }
    assert!(failures.is_empty(), "{} mismatches", failures.len());
    assert!(
        compiled >= MIN_COMPILED,
        "{compiled} queries compiled, fewer than the floor of {MIN_COMPILED}"
    );
    assert!(
        share >= MIN_COMPILED_SHARE,
        "{share:.1}% of the queries AGE accepts compiled, below {MIN_COMPILED_SHARE}%"
    );
}

/// Loads graph `snb_diff` at `ONETRIP_DIFF_SCALE` times its size (default
/// 10) into the server that `ONETRIP_AGE_DSN` names, for
/// `planner/bench/cypher_bench.py --corpus`. A loader, not a check: run it
/// by name with `--ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "loads the benchmark's graph into ONETRIP_AGE_DSN; run it by name"]
async fn load_bench_graph() {
    let dsn = std::env::var("ONETRIP_AGE_DSN").expect("ONETRIP_AGE_DSN names the server");
    let scale = std::env::var("ONETRIP_DIFF_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let c = connect(&dsn).await;
    load_graph(&c, scale).await;
    onetrip_tests::age::report(&format!("loaded graph {GRAPH} at scale {scale}"));
}
