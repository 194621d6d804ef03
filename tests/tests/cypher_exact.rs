//! Compiled Cypher answers exactly as AGE does in the sessions where AGE
//! would answer differently from the compiled SQL: without `ag_catalog` on
//! the search path, without AGE's library loaded, and in verify mode on a
//! statement that writes. Against a real AGE (skipped without
//! `ONETRIP_AGE_SRC`).

use onetrip::{Config, Proxy};
use onetrip_tests::{
    PgServer, age::start_age_pg_preloaded, connect, proxy_config, simple_rows, workers,
};

const SETUP: &str = "LOAD 'age'; SET search_path = ag_catalog, \"$user\", public; \
    SELECT create_graph('exact'); \
    SELECT * FROM cypher('exact', $$ CREATE (:Person {name: 'Ann'}), (:Person {name: 'Bob'}) $$) AS (a agtype)";

const READ: &str = "SELECT * FROM cypher('exact', $$ MATCH (n:Person) RETURN n.name ORDER BY n.name $$) AS (name agtype)";

/// The rows of `sql` as text, or the error's SQLSTATE and message.
async fn answer(c: &tokio_postgres::Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    c.simple_query(sql)
        .await
        .map(|m| simple_rows(&m))
        .map_err(|e| match e.as_db_error() {
            Some(d) => format!("{} {}", d.code().code(), d.message()),
            None => e.to_string(),
        })
}

struct Age {
    pg: PgServer,
    _workers: onetrip::worker::Workers,
    proxy: Proxy,
}

async fn start(test: &str, preload: bool, tweak: impl FnOnce(&mut Config)) -> Option<Age> {
    let pg = start_age_pg_preloaded(test, preload).await?;
    connect(&pg.dsn("postgres"))
        .await
        .batch_execute(SETUP)
        .await
        .expect("graph");
    let mut cfg = proxy_config(&pg);
    tweak(&mut cfg);
    let workers = workers();
    let proxy = Proxy::start_on(cfg, workers.handles())
        .await
        .expect("proxy");
    Some(Age {
        pg,
        _workers: workers,
        proxy,
    })
}

impl Age {
    fn dsn(&self, via_proxy: bool) -> String {
        let port = if via_proxy {
            self.proxy.local_addr().port()
        } else {
            self.pg.port()
        };
        format!("host=127.0.0.1 port={port} user=postgres dbname=postgres")
    }

    /// The same statements on a new session direct and through onetrip;
    /// the answers of the last one, which must be equal.
    async fn same(&self, statements: &[&str]) -> Result<Vec<Vec<Option<String>>>, String> {
        let mut last = Vec::new();
        for via in [false, true] {
            let c = connect(&self.dsn(via)).await;
            let mut a = Ok(Vec::new());
            for sql in statements {
                a = answer(&c, sql).await;
            }
            last.push(a);
        }
        assert_eq!(last[0], last[1], "direct vs onetrip: {statements:?}");
        last.pop().unwrap_or(Ok(Vec::new()))
    }

    fn rewritten(&self) -> u64 {
        self.proxy.stats().total().rewritten_queries
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ag_catalog_on_the_search_path_cypher_fails_as_direct() {
    let Some(age) = start("search_path", true, |_| {}).await else {
        return;
    };
    let err = age.same(&["SET search_path = public", READ]).await;
    assert!(
        err.as_ref().is_err_and(|e| e.starts_with("42883")),
        "{err:?}"
    );
    let err = age.same(&[READ]).await;
    assert!(err.is_err(), "the default search path has no ag_catalog");
    assert_eq!(age.rewritten(), 0);

    let rows = age
        .same(&["SET search_path = ag_catalog, public", READ])
        .await
        .expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(age.rewritten(), 1, "compiled once the path has ag_catalog");

    // A change of the search path is followed: the statement after it
    // waits for the path to be asked for again.
    let err = age
        .same(&[
            "SET search_path = ag_catalog, public",
            READ,
            "SET search_path = public",
            READ,
        ])
        .await;
    assert!(
        err.as_ref().is_err_and(|e| e.starts_with("42883")),
        "{err:?}"
    );
    assert_eq!(age.rewritten(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_age_loaded_cypher_fails_as_direct() {
    let Some(age) = start("age not loaded", false, |_| {}).await else {
        return;
    };
    let path = "SET search_path = ag_catalog, public";
    let err = age.same(&[path, READ]).await;
    assert!(
        err.as_ref()
            .is_err_and(|e| e.contains("unhandled cypher(cstring) function call")),
        "{err:?}"
    );
    assert_eq!(age.rewritten(), 0);
    let rows = age.same(&["LOAD 'age'", path, READ]).await.expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(age.rewritten(), 1, "compiled once the session loaded AGE");
}

/// Verify mode runs only reads twice: a statement that writes what a
/// cypher() read returns writes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_mode_writes_once() {
    let Some(age) = start("verify writes", true, |c| c.planner.verify = true).await else {
        return;
    };
    let path = "SET search_path = ag_catalog, public";
    let copy = "INSERT INTO copied SELECT * FROM cypher('exact', $$ MATCH (n:Person) RETURN n.name $$) AS (name agtype)";
    let direct = connect(&age.dsn(false)).await;
    direct
        .batch_execute("LOAD 'age'; SET search_path = ag_catalog, public; CREATE TABLE public.copied(name agtype)")
        .await
        .unwrap();
    let c = connect(&age.dsn(true)).await;
    c.batch_execute(path).await.unwrap();
    // The first goes to AGE with the catalog read alongside.
    answer(&c, READ).await.expect("rows");
    c.batch_execute(copy).await.unwrap();
    let n: i64 = direct
        .query_one("SELECT count(*) FROM public.copied", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2, "each vertex copied once");
    // A read is still verified.
    answer(&c, READ).await.expect("rows");
    let reasons = age.proxy.stats().fallback_reasons();
    assert!(
        reasons.iter().any(|(r, _)| r == "cypher verify: match"),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|(r, _)| r == "cypher verify: skipped (not a read)"),
        "{reasons:?}"
    );
}

/// Every kind of write, each followed by compiled reads: the reads answer
/// as AGE does after each one (labels made by CREATE and MERGE, label DDL,
/// labels loaded from a file, a graph dropped and made again), run on one
/// session direct and on one through onetrip, each on a graph of its own
/// whose ids come out the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_after_every_kind_of_write_answer_as_age() {
    let Some(age) = start("write then read", true, |_| {}).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("f.csv");
    std::fs::write(&csv, "id,name\n1,first\n2,second\n").expect("csv");
    let csv = csv.display().to_string();
    let cy = |q: &str| format!("SELECT * FROM cypher('GRAPH', $$ {q} $$) AS (a agtype)");
    let writes: Vec<String> = vec![
        "SELECT create_graph('GRAPH')".into(),
        cy("CREATE (:A {n: 1})"),
        cy("CREATE (:A {n: 2})-[:R {w: 1}]->(:B {n: 3})"),
        cy("CREATE (:A {n: 5})"),
        cy("MATCH (a:A {n: 1}) SET a.x = 'y'"),
        cy("MERGE (:C {n: 4})"),
        cy("MERGE (:A {n: 1})"),
        cy("MATCH (a:A {n: 2}) REMOVE a.n"),
        cy("MATCH ()-[r:R]->() DELETE r"),
        cy("MATCH (a:A), (b:B) CREATE (a)-[:R {w: 2}]->(b)"),
        cy("MATCH (n:B) DETACH DELETE n"),
        "SELECT create_vlabel('GRAPH', 'D')".into(),
        "SELECT create_elabel('GRAPH', 'E')".into(),
        "SELECT drop_label('GRAPH', 'C')".into(),
        format!("SELECT load_labels_from_file('GRAPH', 'F', '{csv}')"),
        "SELECT drop_graph('GRAPH', true)".into(),
        "SELECT create_graph('GRAPH')".into(),
        cy("CREATE (:B {n: 9})"),
    ];
    let reads: Vec<String> = [
        "MATCH (n:A) RETURN n ORDER BY id(n)",
        "MATCH (n) RETURN n ORDER BY id(n)",
        "MATCH (a)-[r]->(b) RETURN r, a.n, b.n ORDER BY id(r)",
        "MATCH (n:B) RETURN n.n ORDER BY n.n",
        "MATCH (n:C) RETURN count(n)",
        "MATCH (n:D) RETURN count(n)",
        "MATCH (n:F) RETURN n ORDER BY id(n)",
        "MATCH ()-[e:R]->() RETURN e.w ORDER BY e.w",
    ]
    .iter()
    .map(|q| cy(q))
    .collect();
    let path = "SET search_path = ag_catalog, public";
    let mut answers = Vec::new();
    for (via, graph) in [(false, "wr_direct"), (true, "wr_proxy")] {
        let c = connect(&age.dsn(via)).await;
        c.batch_execute(path).await.unwrap();
        let mut got = Vec::new();
        for w in &writes {
            // Errors name the graph: told apart by its name only.
            let run = async |sql: &str| {
                let a = answer(&c, &sql.replace("GRAPH", graph)).await;
                format!("{a:?}").replace(graph, "GRAPH")
            };
            got.push((w.clone(), run(w).await));
            for r in &reads {
                got.push((format!("{w} / {r}"), run(r).await));
            }
        }
        answers.push(got);
    }
    for (d, p) in answers[0].iter().zip(&answers[1]) {
        assert_eq!(d, p, "direct vs onetrip");
    }
    // Reads of labels a graph lacks go to AGE, and so does the one that
    // carries the catalog read after a change: the rest are compiled.
    assert!(
        age.rewritten() as usize >= writes.len() * 3,
        "reads compiled between writes: {}",
        age.rewritten()
    );
}

/// A session alternating Cypher writes with reads that are compiled pays
/// upstream the round trips its client pays: the catalog read goes in the
/// same write as a statement, or not at all when a write names only labels
/// already known. With writes that make a new label each time too, with
/// the simple and the extended protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_compiled_reads_cost_no_extra_round_trip() {
    let Some(age) = start("alternating round trips", true, |_| {}).await else {
        return;
    };
    let c = connect(&age.dsn(true)).await;
    c.batch_execute("SET search_path = ag_catalog, public")
        .await
        .unwrap();
    let session = age.proxy.stats().sessions()[0].clone();
    let rts = || {
        let s = session.counters.snapshot();
        (s.client_round_trips, s.upstream_round_trips)
    };
    for new_labels in [false, true] {
        for extended in [false, true] {
            let (c0, u0) = rts();
            let compiled = age.rewritten();
            for i in 0..10 {
                let label = if new_labels {
                    format!("L{extended}{i}")
                } else {
                    "Person".into()
                };
                let write = format!(
                    "SELECT * FROM cypher('exact', $$ CREATE (:{label} {{name: 'p{i}'}}) $$) AS (a agtype)"
                );
                c.simple_query(&write).await.unwrap();
                if extended {
                    let rows = c.query(READ, &[]).await.unwrap();
                    assert!(rows.len() >= 2);
                } else {
                    let rows = answer(&c, READ).await.unwrap();
                    assert!(rows.len() >= 2);
                }
            }
            let (c1, u1) = rts();
            let compiled = age.rewritten() - compiled;
            let case = format!("new labels {new_labels}, extended {extended}");
            assert_eq!(
                u1 - u0,
                c1 - c0,
                "{case}: upstream round trips as many as the client's"
            );
            if !new_labels {
                assert!(compiled >= 9, "{case}: reads compiled: {compiled}");
            }
        }
    }
}

/// SHOW REWRITES tells statements compiled, plans made and reused (in the
/// session and across sessions), and calls left to AGE by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_rewrites_counts_plans_and_declines() {
    let Some(age) = start("show rewrites", true, |_| {}).await else {
        return;
    };
    let declined = "SELECT * FROM cypher('exact', $$ MATCH p = (a:Person)-[]->(b) \
                    RETURN [n IN nodes(p) | n.name] $$) AS (a agtype)";
    for _ in 0..2 {
        let c = connect(&age.dsn(true)).await;
        c.batch_execute("SET search_path = ag_catalog, public")
            .await
            .unwrap();
        for sql in [READ, READ, declined] {
            // AGE fails on the declined one.
            let a = answer(&c, sql).await;
            assert_eq!(a.is_ok(), sql == READ, "{a:?}");
        }
    }
    let admin = connect(&format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        age.proxy.local_addr().port()
    ))
    .await;
    let mut rows = Vec::new();
    for m in admin.simple_query("SHOW REWRITES").await.unwrap() {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            let cell = |i: usize| r.get(i).unwrap_or("").to_owned();
            rows.push((cell(0), cell(1), cell(2)));
        }
    }
    let count = |outcome: &str, reason: &str| {
        rows.iter()
            .find(|(o, r, _)| o == outcome && r == reason)
            .map(|(_, _, n)| n.clone())
    };
    // The first READ carried the catalog read and went to AGE; then one
    // plan for READ and one for the declined statement, reused after.
    assert_eq!(count("rewritten", ""), Some("3".into()), "{rows:?}");
    assert_eq!(count("plans", "made"), Some("2".into()), "{rows:?}");
    assert_eq!(count("plans", "reused"), Some("3".into()), "{rows:?}");
    assert_eq!(
        count("declined", "list_comprehension"),
        Some("2".into()),
        "{rows:?}"
    );
    assert_eq!(
        count("fallback", "cypher: catalog fetched alongside"),
        Some("1".into()),
        "{rows:?}"
    );
}
