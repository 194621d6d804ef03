//! AGE applications pool: `LOAD 'age'` follows its client to every
//! server connection it takes instead of pinning it, so 20 psycopg clients
//! that load AGE and read with Cypher share a pool of 3, and get AGE's
//! own rows.

use onetrip_tests::{Env, age, connect, python_with_psycopg, run_py, skip};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_age_clients_share_three_connections() {
    let test = "pooling_age::twenty_age_clients_share_three_connections";
    // Not preloaded: each session loads AGE itself, as AGE's docs say.
    let Some(pg) = age::start_age_pg_preloaded(test, false).await else {
        return;
    };
    let Some(py) = python_with_psycopg() else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "{test}: needs psycopg"
        );
        skip(&format!("{test}: needs psycopg"));
        return;
    };
    let direct = connect(&pg.dsn("postgres")).await;
    direct
        .batch_execute(
            "LOAD 'age'; SET search_path = ag_catalog, \"$user\", public;
             SELECT create_graph('pooled');
             SELECT * FROM cypher('pooled', $$
                 CREATE (a:Person {name: 'ann', age: 31}), (b:Person {name: 'bob', age: 25}),
                        (c:Person {name: 'cy', age: 40}),
                        (a)-[:KNOWS]->(b), (b)-[:KNOWS]->(c), (c)-[:KNOWS]->(a)
             $$) AS (n agtype);",
        )
        .await
        .unwrap();
    let env = Env::start_on(pg, |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 3;
    })
    .await;
    let through = env.proxy_dsn();
    let want = run_py(&py, "pooled_age.py", &[&env.direct_dsn(), "1", "1"]);
    let got = run_py(&py, "pooled_age.py", &[&through, "20", "5"]);
    assert_eq!(got, want, "AGE's rows through the pool");
    assert!(want.contains("ann"), "{want}");
    let pools = raw_admin(&env, "SHOW POOLS").await;
    assert_eq!(pools.len(), 1, "{pools:?}");
    let col = |name: &str| pools[0][name].clone();
    assert_eq!(col("sv_pinned"), "0", "nothing pinned: {pools:?}");
    let servers: usize =
        col("sv_active").parse::<usize>().unwrap() + col("sv_idle").parse::<usize>().unwrap();
    assert!(servers <= 3, "{pools:?}");
}

/// `SHOW ...` of the admin console as rows of (column -> value).
async fn raw_admin(env: &Env, sql: &str) -> Vec<std::collections::HashMap<String, String>> {
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let c = connect(&dsn).await;
    let mut out = Vec::new();
    for m in c.simple_query(sql).await.unwrap() {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            let mut row = std::collections::HashMap::new();
            for (i, col) in r.columns().iter().enumerate() {
                row.insert(col.name().to_owned(), r.get(i).unwrap_or("").to_owned());
            }
            out.push(row);
        }
    }
    out
}
