//! Differential test: every query in `cypher_corpus/queries.txt` runs
//! through AGE's `cypher()` and through the SQL our compiler emits, on a
//! seeded graph (`cypher_corpus/gen.rs`); rows must be identical as text.
//! Needs a server with Apache AGE: set `ONETRIP_AGE_DSN` (libpq style,
//! e.g. `host=127.0.0.1 port=5432 user=postgres dbname=postgres`).
//! Without it the test prints a skip line and passes.

#[path = "cypher_corpus/gen.rs"]
mod generator;

use onetrip_planner::cypher::ast::Clause;
use onetrip_planner::cypher::{Catalog, Rewrite, RewriteOptions, parse, rewrite_sql};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

const GRAPH: &str = "snb_diff";
const SEED: u64 = 20261202;
const SETUP: &str =
    "LOAD 'age'; SET search_path = ag_catalog, \"$user\", public; SET statement_timeout = '30s'";

type Rows = Result<Vec<Vec<Option<String>>>, (String, String)>;

async fn run(c: &Client, sql: &str) -> Rows {
    match c.simple_query(sql).await {
        Ok(msgs) => Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect()),
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

async fn connect(dsn: &str) -> Option<Client> {
    let (client, conn) = tokio_postgres::connect(dsn, NoTls).await.ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    if client
        .simple_query("CREATE EXTENSION IF NOT EXISTS age")
        .await
        .is_err()
    {
        return None;
    }
    client.simple_query(SETUP).await.ok()?;
    Some(client)
}

async fn load_graph(c: &Client) {
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
    let ids: std::collections::HashMap<String, u64> = rows
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap_or_default(),
                r[1].as_deref().unwrap_or("0").parse().unwrap_or(0),
            )
        })
        .collect();
    let g = generator::generate(SEED);
    for s in generator::load_sql(GRAPH, &g, &|l| ids.get(l).copied().unwrap_or(0)) {
        c.simple_query(&s).await.expect("graph load");
    }
}

async fn catalog(c: &Client) -> Catalog {
    let rows = run(c, Catalog::QUERY).await.expect("catalog");
    let owned: Vec<Vec<Option<String>>> = rows;
    Catalog::from_rows(owned.iter().map(|r| {
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
}

fn queries() -> Vec<Query> {
    let text = include_str!("cypher_corpus/queries.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (ordered, l) = match l.strip_prefix("ordered:") {
                Some(rest) => (true, rest.trim()),
                None => (false, l),
            };
            let (cypher, params) = match l.split_once("|||") {
                Some((q, p)) => (q.trim().to_string(), Some(p.trim().to_string())),
                None => (l.to_string(), None),
            };
            Query {
                cypher,
                ordered,
                params,
            }
        })
        .collect()
}

fn return_width(cypher: &str) -> usize {
    let Ok(st) = parse(cypher) else { return 1 };
    match st.parts[0].clauses.last() {
        Some(Clause::Return(p)) => p.items.len().max(1),
        _ => 1,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn cypher_differential() {
    let Ok(dsn) = std::env::var("ONETRIP_AGE_DSN") else {
        println!(
            "skipped: AGE not installed (set ONETRIP_AGE_DSN to a server with the age extension)"
        );
        return;
    };
    let Some(c) = connect(&dsn).await else {
        println!(
            "skipped: AGE not installed (set ONETRIP_AGE_DSN to a server with the age extension)"
        );
        return;
    };
    load_graph(&c).await;
    let cat = catalog(&c).await;
    let qs = queries();
    let (mut pass, mut rewritten, mut failures) = (0, 0, Vec::new());
    let mut declined: std::collections::BTreeMap<&str, usize> = Default::default();
    for (n, q) in qs.iter().enumerate() {
        let cols: Vec<String> = (1..=return_width(&q.cypher))
            .map(|i| format!("c{i} agtype"))
            .collect();
        let arg = if q.params.is_some() { ", $1" } else { "" };
        let sql = format!(
            "SELECT * FROM cypher('{GRAPH}', $$ {} $${arg}) AS ({})",
            q.cypher,
            cols.join(", ")
        );
        let compiled = match rewrite_sql(&sql, &cat, &RewriteOptions::default()) {
            Rewrite::Rewritten(s) => s,
            Rewrite::Declined(r) => {
                *declined.entry(r.name()).or_default() += 1;
                println!("declined ({}): {}", r.name(), q.cypher);
                pass += 1;
                continue;
            }
            Rewrite::Unchanged => panic!("no cypher call found in {sql}"),
        };
        rewritten += 1;
        let t0 = std::time::Instant::now();
        let want = run_maybe_prepared(&c, &sql, q.params.as_deref(), n).await;
        let t1 = std::time::Instant::now();
        let got = run_maybe_prepared(&c, &compiled, q.params.as_deref(), n).await;
        let (ta, tb) = (t1 - t0, t1.elapsed());
        if ta.as_secs() >= 2 || tb.as_secs() >= 2 {
            println!("slow: AGE {ta:?}, compiled {tb:?}: {}", q.cypher);
        }
        let same = match (&want, &got) {
            (Ok(a), Ok(b)) if q.ordered => a == b,
            (Ok(a), Ok(b)) => {
                let (mut a, mut b) = (a.clone(), b.clone());
                a.sort();
                b.sort();
                a == b
            }
            (Err(a), Err(b)) => a == b,
            _ => false,
        };
        if same {
            pass += 1;
        } else {
            let show = |r: &Rows| match r {
                Ok(rows) => format!("{} rows, first {:?}", rows.len(), rows.first()),
                Err(e) => format!("error {e:?}"),
            };
            failures.push(format!(
                "{}\n  AGE:      {}\n  compiled: {}\n  sql: {compiled}",
                q.cypher,
                show(&want),
                show(&got)
            ));
        }
    }
    println!(
        "cypher differential: {} queries, {pass} identical, {rewritten} rewritten, declined {declined:?}",
        qs.len()
    );
    for f in &failures {
        println!("MISMATCH {f}");
    }
    assert!(failures.is_empty(), "{} mismatches", failures.len());
}
