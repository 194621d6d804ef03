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
