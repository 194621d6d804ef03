//! The `agtype` crate in real clients against PostgreSQL with Apache AGE:
//! every valid AGE vector through tokio-postgres and sqlx, in binary and
//! text format, compared with what AGE itself prints for it; structs read
//! from vertices, edges and paths; a parameter map bound as `cypher()`'s
//! `$1`. Skipped (one line each) without `ONETRIP_AGE_SRC`.

use agtype::typed::{Edge, Path, Vertex};
use agtype::wire::TextRef;
use agtype::{Value, cypher_params, from_value, parse};
use onetrip_tests::age::start_age_pg;
use serde::{Deserialize, Serialize};
use sqlx::{Connection, Executor, Row};

const SESSION_SETUP: &str = r#"LOAD 'age'; SET search_path = ag_catalog, "$user", public"#;

/// One valid vector: the text given to AGE, and what AGE prints for it.
struct Vector {
    text_in: String,
    text_out: String,
}

fn vectors() -> Vec<Vector> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../agtype/tests/data/vectors.jsonl"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let all: Vec<Vector> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("vector line is JSON"))
        .filter(|v| v["kind"] != "invalid")
        .map(|v| Vector {
            text_in: v["text_in"].as_str().expect("text_in").to_owned(),
            text_out: v["text_out"].as_str().expect("text_out").to_owned(),
        })
        .collect();
    assert_eq!(all.len(), 481, "valid vectors in {path}");
    all
}

fn literal(text: &str) -> String {
    format!("'{}'::agtype", text.replace('\'', "''"))
}

async fn tokio_client(pg: &onetrip_tests::PgServer) -> tokio_postgres::Client {
    let client = onetrip_tests::connect(&pg.dsn("postgres")).await;
    client
        .batch_execute(SESSION_SETUP)
        .await
        .expect("session setup");
    client
}

async fn sqlx_conn(pg: &onetrip_tests::PgServer, setup: bool) -> sqlx::PgConnection {
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port());
    let mut conn = sqlx::PgConnection::connect(&url)
        .await
        .expect("sqlx connect");
    if setup {
        conn.execute(SESSION_SETUP).await.expect("session setup");
    }
    conn
}

/// AGE's own output for `text_in` (simple query, text format), checked
/// against the vector.
async fn age_prints(client: &tokio_postgres::Client, v: &Vector) -> String {
    let rows = client
        .simple_query(&format!("SELECT {}", literal(&v.text_in)))
        .await
        .unwrap_or_else(|e| panic!("AGE rejects {:?}: {e}", v.text_in));
    let Some(row) = rows.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
        _ => None,
    }) else {
        panic!("no row for {:?}", v.text_in);
    };
    let text = row.get(0).expect("not SQL NULL").to_owned();
    assert_eq!(text, v.text_out, "AGE prints {:?}", v.text_in);
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_round_trips_every_vector() {
    let Some(pg) = start_age_pg("tokio_postgres_round_trips_every_vector").await else {
        return;
    };
    let client = tokio_client(&pg).await;
    let to_age = client.prepare("SELECT $1::text::agtype").await.unwrap();
    let echo = client
        .prepare("SELECT $1::agtype, format('%s', $1::agtype)")
        .await
        .unwrap();
    for v in vectors() {
        // Text format: AGE's output, parsed here.
        let printed = age_prints(&client, &v).await;
        let want = parse(&printed).unwrap_or_else(|e| panic!("{printed:?}: {e}"));
        // Binary format, result: AGE's value as a column.
        let row = client.query_one(&to_age, &[&v.text_in]).await.unwrap();
        let got: Value = row.get(0);
        assert_eq!(got, want, "result of {:?}", v.text_in);
        assert_eq!(got.to_string(), printed);
        let raw: TextRef<'_> = row.get(0);
        assert_eq!(raw.as_str(), printed);
        // Binary format, parameter: AGE reads what we send as it reads
        // its own text, and sends it back.
        let stored = as_age_stores(&want);
        let row = client.query_one(&echo, &[&want]).await.unwrap();
        assert_eq!(row.get::<_, Value>(0), stored, "echo of {printed:?}");
        assert_eq!(
            row.get::<_, String>(1),
            stored.to_string(),
            "AGE prints our {printed:?}"
        );
        let row = client
            .query_one(&echo, &[&TextRef(&printed)])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(1), stored.to_string());
    }
}

/// What AGE gives back for a value it parses, stores and prints: the value
/// itself, except for the shapes its container writer mangles (see the
/// crate docs), where the codec reproduces AGE's bytes and reading.
fn as_age_stores(v: &Value) -> Value {
    agtype::decode(&agtype::encode(v)).expect("AGE can read what it wrote")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_round_trips_every_vector() {
    let Some(pg) = start_age_pg("sqlx_round_trips_every_vector").await else {
        return;
    };
    let client = tokio_client(&pg).await;
    let mut conn = sqlx_conn(&pg, true).await;
    for v in vectors() {
        let printed = age_prints(&client, &v).await;
        let want = parse(&printed).unwrap_or_else(|e| panic!("{printed:?}: {e}"));
        // Binary format (prepared statement), result and parameter.
        let got: Value = sqlx::query_scalar("SELECT $1::text::agtype")
            .bind(&v.text_in)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(got, want, "result of {:?}", v.text_in);
        let stored = as_age_stores(&want);
        let (back, age_text): (Value, String) =
            sqlx::query_as("SELECT $1::agtype, format('%s', $1::agtype)")
                .bind(&want)
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(back, stored, "echo of {printed:?}");
        assert_eq!(age_text, stored.to_string(), "AGE prints our {printed:?}");
        // Text format (simple query).
        let row = sqlx::raw_sql(&format!("SELECT {}", literal(&v.text_in)))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            row.get::<Value, _>(0),
            want,
            "text result of {:?}",
            v.text_in
        );
        assert_eq!(row.get::<TextRef<'_>, _>(0).as_str(), printed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_finds_agtype_without_ag_catalog_on_the_search_path() {
    let Some(pg) = start_age_pg("sqlx_finds_agtype_without_ag_catalog_on_the_search_path").await
    else {
        return;
    };
    let mut conn = sqlx_conn(&pg, false).await;
    let v = parse(r#"{"k": [1, 2.5, "x"]}"#).unwrap();
    let back: Value = sqlx::query_scalar("SELECT $1::ag_catalog.agtype")
        .bind(&v)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(back, v);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_types_name_the_column() {
    let Some(pg) = start_age_pg("wrong_types_name_the_column").await else {
        return;
    };
    let client = tokio_client(&pg).await;
    let row = client
        .query_one("SELECT 1::agtype, '{}'::jsonb", &[])
        .await
        .unwrap();
    let e = chain(&row.try_get::<_, Value>(1).unwrap_err());
    assert!(e.contains("column 1") && e.contains("jsonb"), "{e}");
    let mut conn = sqlx_conn(&pg, true).await;
    let row = sqlx::query("SELECT 1::agtype, '{}'::jsonb")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let e = chain(&row.try_get::<Value, _>(1).unwrap_err());
    assert!(e.contains('1') && e.contains("JSONB"), "{e}");
}

/// An error with its causes, as an application would log it.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Person {
    name: String,
    age: i64,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Knows {
    since: i64,
}

const GRAPH: &str = "SELECT create_graph('people');
    SELECT * FROM cypher('people', $$
        CREATE (:Person {name: 'Alice', age: 31})-[:KNOWS {since: 2019}]->(:Person {name: 'Bob', age: 42})
    $$) AS (r agtype)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structs_read_from_vertices_edges_and_paths() {
    let Some(pg) = start_age_pg("structs_read_from_vertices_edges_and_paths").await else {
        return;
    };
    let client = tokio_client(&pg).await;
    client.batch_execute(GRAPH).await.unwrap();
    let row = client
        .query_one(
            "SELECT * FROM cypher('people', $$
                MATCH p = (a:Person)-[k:KNOWS]->(b:Person) RETURN a, k, p
            $$) AS (a agtype, k agtype, p agtype)",
            &[],
        )
        .await
        .unwrap();
    let a: Value = row.get(0);
    assert!(matches!(a, Value::Vertex(_)), "{a}");
    let alice: Person = from_value(a.clone()).unwrap();
    assert_eq!(
        alice,
        Person {
            name: "Alice".into(),
            age: 31
        }
    );
    let vertex: Vertex<Person> = from_value(a).unwrap();
    assert_eq!(vertex.label, "Person");
    let knows: Edge<Knows> = from_value(row.get(1)).unwrap();
    assert_eq!(knows.properties, Knows { since: 2019 });
    assert_eq!(knows.start_id, vertex.id);
    let path: Path<Person, Knows> = from_value(row.get(2)).unwrap();
    let (from, edge, to) = path.steps().next().expect("one step");
    assert_eq!(
        (from.id, edge.id, to.id),
        (vertex.id, knows.id, knows.end_id)
    );
    assert_eq!(to.properties.name, "Bob");

    // The same through sqlx.
    let mut conn = sqlx_conn(&pg, true).await;
    let v: Value = sqlx::query_scalar(
        "SELECT * FROM cypher('people', $$ MATCH (b:Person {name: 'Bob'}) RETURN b $$) AS (b agtype)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        from_value::<Person>(v).unwrap(),
        Person {
            name: "Bob".into(),
            age: 42
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_map_binds_as_the_cypher_argument() {
    let Some(pg) = start_age_pg("a_parameter_map_binds_as_the_cypher_argument").await else {
        return;
    };
    let client = tokio_client(&pg).await;
    client.batch_execute(GRAPH).await.unwrap();
    const CREATE: &str = "SELECT * FROM cypher('people', $$
            CREATE (p:Person {name: $name, age: $age}) RETURN p
        $$, $1) AS (p agtype)";
    let carol = Person {
        name: "Carol \"C\" O'Neil".into(),
        age: 27,
    };
    let params = cypher_params(&carol).unwrap();
    let row = client.query_one(CREATE, &[&params]).await.unwrap();
    let created: Vertex<Person> = from_value(row.get(0)).unwrap();
    assert_eq!(created.properties, carol);

    let mut conn = sqlx_conn(&pg, true).await;
    let dave = Person {
        name: "Dave".into(),
        age: 33,
    };
    let v: Value = sqlx::query_scalar(CREATE)
        .bind(cypher_params(&dave).unwrap())
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(from_value::<Person>(v).unwrap(), dave);

    // A parameter map filters a match too.
    let row = client
        .query_one(
            "SELECT * FROM cypher('people', $$
                MATCH (p:Person) WHERE p.age > $min RETURN count(p)
            $$, $1) AS (n agtype)",
            &[&cypher_params(&serde_json::json!({"min": 30})).unwrap()],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Value>(0), Value::Integer(3));
}
