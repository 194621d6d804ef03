//! Transaction pooling: a Parse (and Describe) of a text the pool's
//! server has described before is answered by onetrip, with no server
//! connection; when the statement is used, the server's description is
//! checked against what the client was told, and a difference is
//! PostgreSQL's own error for a statement whose result type changed,
//! never rows of another shape. The same scripts run direct and through
//! onetrip must be heard the same.

use onetrip_tests::{Env, PgOptions, connect, python_with_psycopg, raw, run_py, simple_rows, skip};
use tokio::{io::AsyncWriteExt, net::TcpStream};

async fn pooled(size: usize) -> Env {
    Env::start_with(PgOptions::default(), move |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = size;
    })
    .await
}

/// SHOW POOLS' `parses_here` and `descriptions_changed`.
async fn counts(env: &Env) -> (u64, u64) {
    let row = env.pool_row().await;
    let n = |c: &str| row.get(c).unwrap().parse().unwrap();
    (n("parses_here"), n("descriptions_changed"))
}

fn describe(name: &str) -> Vec<u8> {
    let mut body = vec![b'S'];
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    raw::message(b'D', &body)
}

/// Parse, Describe of the statement, Sync: how asyncpg and tokio-postgres
/// prepare.
fn prepare(name: &str, sql: &str) -> Vec<u8> {
    let mut out = raw::parse(name, sql);
    out.extend(describe(name));
    out.extend(raw::sync());
    out
}

/// What a client hears for a step: each message's type, with what tells
/// answers apart (rows and their descriptions in full, the SQLSTATE and
/// text of an error, the transaction status).
async fn step(s: &mut TcpStream, msg: &[u8]) -> String {
    s.write_all(msg).await.unwrap();
    raw::read_to_z(s)
        .await
        .iter()
        .map(|(t, b)| match t {
            b'D' => format!("D{:?}", raw::row_values(b)),
            b'T' => format!("T{}", columns(b)),
            b'E' => format!(
                "E({} {})",
                raw::field(b, b'C').unwrap_or_default(),
                raw::field(b, b'M').unwrap_or_default()
            ),
            b'Z' => format!("Z{}", b[0] as char),
            t => (*t as char).to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A RowDescription's column names and type OIDs.
fn columns(b: &[u8]) -> String {
    let n = u16::from_be_bytes([b[0], b[1]]);
    let mut at = 2;
    let mut out = Vec::new();
    for _ in 0..n {
        let len = b[at..].iter().position(|c| *c == 0).unwrap();
        let name = String::from_utf8_lossy(&b[at..at + len]).into_owned();
        at += len + 1;
        let oid = u32::from_be_bytes(b[at + 6..at + 10].try_into().unwrap());
        at += 18;
        out.push(format!("{name}:{oid}"));
    }
    format!("[{}]", out.join(","))
}

/// Client A prepares and runs `select * from t` and `select a from t`; B
/// prepares them (told here through onetrip: the pool's server described
/// them for A), unnamed and named, then C adds a column. B's runs of the
/// changed ones fail as a dedicated connection's stale statements do, in
/// a group of their own and inside a transaction block; the unchanged one
/// runs as usual, in a block and out; a Parse after the change describes
/// the new shape.
async fn script(a: &mut TcpStream, b: &mut TcpStream, c: &mut TcpStream) -> Vec<String> {
    let mut heard = Vec::new();
    let all = "select * from described_t order by a";
    let one = "select a from described_t order by a";
    for sql in [all, one] {
        heard.push(step(a, &prepare("", sql)).await);
        heard.push(step(a, &raw::bind_execute_sync("")).await);
    }
    heard.push(step(b, &prepare("", all)).await);
    heard.push(step(b, &prepare("s1", one)).await);
    heard.push(step(b, &prepare("s2", all)).await);
    // Described again: told again, here.
    let mut again = describe("s1");
    again.extend(raw::sync());
    heard.push(step(b, &again).await);
    let alter = "alter table described_t add column b text default 'x'";
    heard.push(step(c, &raw::query(alter)).await);
    // In a group of its own, then inside a block.
    heard.push(step(b, &raw::bind_execute_sync("")).await);
    heard.push(step(b, &raw::query("begin")).await);
    heard.push(step(b, &raw::bind_execute_sync("s2")).await);
    heard.push(step(b, &raw::query("rollback")).await);
    heard.push(step(b, &raw::bind_execute_sync("s2")).await);
    // Unchanged by the new column: runs, in a block and out.
    heard.push(step(b, &raw::query("begin")).await);
    heard.push(step(b, &raw::bind_execute_sync("s1")).await);
    heard.push(step(b, &raw::query("commit")).await);
    heard.push(step(b, &raw::bind_execute_sync("s1")).await);
    // Made again: the new shape.
    heard.push(step(b, &prepare("", all)).await);
    heard.push(step(b, &raw::bind_execute_sync("")).await);
    heard.push(step(c, &raw::query("alter table described_t drop column b")).await);
    heard
}

async fn reset(port: u16) {
    let mut s = raw::connect_ready(port).await;
    step(
        &mut s,
        &raw::query(
            "drop table if exists described_t; \
             create table described_t (a int); insert into described_t values (1), (2)",
        ),
    )
    .await;
}

#[tokio::test]
async fn a_told_statement_whose_table_changed_fails_as_on_a_dedicated_connection() {
    let env = pooled(1).await;
    let mut heard = Vec::new();
    for port in [env.pg.port(), env.proxy_port()] {
        reset(env.pg.port()).await;
        let (mut a, mut b, mut c) = (
            raw::connect_ready(port).await,
            raw::connect_ready(port).await,
            raw::connect_ready(port).await,
        );
        heard.push(script(&mut a, &mut b, &mut c).await);
    }
    let (direct, pooled) = (&heard[0], &heard[1]);
    assert_eq!(pooled, direct);
    let stale = direct.iter().filter(|s| s.contains("0A000")).count();
    assert_eq!(stale, 3, "{direct:#?}");
    let (here, changed) = counts(&env).await;
    // B's three Parses; its three runs of the changed ones.
    assert_eq!((here, changed), (3, 3), "{pooled:#?}");
}

/// The table changed by a statement onetrip did not see: a Parse answered
/// here tells the old shape, and its run is the stale-statement error,
/// never rows of the new shape.
#[tokio::test]
async fn a_change_onetrip_did_not_see_gives_the_stale_statement_error() {
    let env = pooled(1).await;
    reset(env.pg.port()).await;
    let port = env.proxy_port();
    let sql = "select * from described_t order by a";
    let mut a = raw::connect_ready(port).await;
    assert_eq!(step(&mut a, &prepare("", sql)).await, "1 t T[a:23] ZI");
    let mut direct = raw::connect_ready(env.pg.port()).await;
    step(
        &mut direct,
        &raw::query("alter table described_t add column b int"),
    )
    .await;
    let mut b = raw::connect_ready(port).await;
    assert_eq!(step(&mut b, &prepare("", sql)).await, "1 t T[a:23] ZI");
    assert_eq!(counts(&env).await, (1, 0));
    assert_eq!(
        step(&mut b, &raw::bind_execute_sync("")).await,
        "E(0A000 cached plan must not change result type) ZI"
    );
    // The entry is gone: the next Parse goes to the server.
    let mut c = raw::connect_ready(port).await;
    assert_eq!(step(&mut c, &prepare("", sql)).await, "1 t T[a:23,b:23] ZI");
    assert_eq!(
        step(&mut c, &raw::bind_execute_sync("")).await,
        "2 D[Some(\"1\"), None] D[Some(\"2\"), None] C ZI"
    );
    assert_eq!(counts(&env).await, (1, 1));
}

/// A write's Parse and Describe are answered here too once described
/// (its run waits for its check), and one of a text never described goes
/// to the server.
#[tokio::test]
async fn writes_are_told_and_new_texts_go_to_the_server() {
    let env = pooled(1).await;
    reset(env.pg.port()).await;
    let port = env.proxy_port();
    let write = "insert into described_t values (3)";
    for _ in 0..2 {
        let mut a = raw::connect_ready(port).await;
        assert_eq!(step(&mut a, &prepare("", write)).await, "1 t n ZI");
        assert_eq!(step(&mut a, &raw::bind_execute_sync("")).await, "2 C ZI");
    }
    assert_eq!(counts(&env).await, (1, 0));
    let mut direct = raw::connect_ready(env.pg.port()).await;
    assert_eq!(
        step(&mut direct, &raw::query("select count(*) from described_t")).await,
        "T[count:20] D[Some(\"4\")] C ZI"
    );
}

/// tokio-postgres preparing its statement on each request (Parse and
/// Describe, then Bind and Execute, then Close): from the second request
/// on, the prepare is answered here, and each request costs one upstream
/// round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_prepare_per_request() {
    let env = pooled(2).await;
    reset(env.pg.port()).await;
    let c = connect(&env.proxy_dsn()).await;
    let before = env.proxy().stats().total();
    for i in 0..50i32 {
        let st = c
            .prepare("select a + $1::int4 from described_t where a = 1")
            .await
            .unwrap();
        let v: i32 = c.query_one(&st, &[&i]).await.unwrap().get(0);
        assert_eq!(v, i + 1);
    }
    drop(c);
    let after = env.settle(0).await;
    let up = after.upstream_round_trips - before.upstream_round_trips;
    let (here, changed) = counts(&env).await;
    println!(
        "tokio-postgres, prepare per request, 50 requests: {up} upstream round trips, {here} Parses answered here"
    );
    assert_eq!((here, changed), (49, 0));
    // The first prepare, then one query each.
    assert!(up <= 51 + 2, "upstream round trips: {up}");
}

/// asyncpg with `statement_cache_size=0`, as users are told to run it
/// behind a transaction pooler: 100 queries of one text cost at most 110
/// upstream round trips (each was two), and read what they read direct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asyncpg_without_a_statement_cache() {
    let Some(py) = python_with_psycopg() else {
        skip("psycopg not installed");
        return;
    };
    let env = pooled(2).await;
    reset(env.pg.port()).await;
    let run = |dsn: String| {
        let py = py.clone();
        tokio::task::spawn_blocking(move || run_py(&py, "described.py", &[&dsn, "100"]))
    };
    let direct = run(env.direct_dsn()).await.unwrap();
    if direct.trim() == "no asyncpg" {
        skip("asyncpg not installed");
        return;
    }
    let before = env.settle(0).await;
    let proxied = run(env.proxy_dsn()).await.unwrap();
    let after = env.settle(0).await;
    assert_eq!(proxied, direct);
    let up = after.upstream_round_trips - before.upstream_round_trips;
    let (here, changed) = counts(&env).await;
    println!(
        "asyncpg, statement_cache_size=0, 100 queries: {up} upstream round trips, {here} Parses answered here"
    );
    assert!(up <= 110, "upstream round trips: {up}");
    assert!(here >= 98, "parses answered here: {here}");
    assert_eq!(changed, 0);
    let c = connect(&env.proxy_dsn()).await;
    drop(simple_rows(&c.simple_query("select 1").await.unwrap()));
}

/// psycopg with `prepare=True`, 100 queries of one text on each of two
/// connections: each prepares the text once (a Parse alone, a round trip
/// of its own direct). The second's Parse is answered here, since the
/// pool parsed the text: 100 upstream round trips for its 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_prepare_true() {
    let Some(py) = python_with_psycopg() else {
        skip("psycopg not installed");
        return;
    };
    let env = pooled(2).await;
    reset(env.pg.port()).await;
    let run = |dsn: String| {
        let py = py.clone();
        tokio::task::spawn_blocking(move || run_py(&py, "prepared_psycopg.py", &[&dsn, "100"]))
    };
    let direct = run(env.direct_dsn()).await.unwrap();
    assert_eq!(run(env.proxy_dsn()).await.unwrap(), direct);
    let before = env.settle(0).await;
    assert_eq!(run(env.proxy_dsn()).await.unwrap(), direct);
    let after = env.settle(0).await;
    let up = after.upstream_round_trips - before.upstream_round_trips;
    let client = after.client_round_trips - before.client_round_trips;
    let (here, changed) = counts(&env).await;
    println!(
        "psycopg, prepare=True, 100 queries: {client} client and {up} upstream round trips, {here} Parses answered here"
    );
    assert!(client >= 101, "client round trips: {client}");
    assert!(up <= 100, "upstream round trips: {up}");
    assert!(here >= 1, "parses answered here: {here}");
    assert_eq!(changed, 0);
}

/// Bind of `name` to the unnamed portal and its Execute, no Sync.
fn bind_execute(name: &str) -> Vec<u8> {
    let mut out = raw::bind_execute_sync(name);
    out.truncate(out.len() - raw::sync().len());
    out
}

/// A write, then a told statement that changed, in one group: PostgreSQL
/// fails the statement's Bind and rolls the write back with the group's
/// implicit transaction. Through onetrip the statement waits for its
/// check, and the write is rolled back the same way.
async fn write_then_stale(a: &mut TcpStream, b: &mut TcpStream, c: &mut TcpStream) -> Vec<String> {
    let all = "select * from described_t order by a";
    let mut heard = vec![
        step(a, &prepare("", all)).await,
        step(a, &raw::bind_execute_sync("")).await,
        step(b, &prepare("w", "insert into described_t values (9)")).await,
        step(b, &prepare("s2", all)).await,
        step(c, &raw::query("alter table described_t add column b int")).await,
    ];
    let mut group = bind_execute("w");
    group.extend(bind_execute("s2"));
    group.extend(raw::sync());
    heard.push(step(b, &group).await);
    heard.push(step(b, &raw::query("select count(*) from described_t")).await);
    heard
}

#[tokio::test]
async fn a_write_before_a_stale_statement_in_its_group_is_rolled_back() {
    let env = pooled(1).await;
    let mut heard = Vec::new();
    for port in [env.pg.port(), env.proxy_port()] {
        reset(env.pg.port()).await;
        let (mut a, mut b, mut c) = (
            raw::connect_ready(port).await,
            raw::connect_ready(port).await,
            raw::connect_ready(port).await,
        );
        heard.push(write_then_stale(&mut a, &mut b, &mut c).await);
    }
    assert_eq!(heard[1], heard[0]);
    assert!(heard[0][5].contains("0A000"), "{:#?}", heard[0]);
    assert!(heard[0][6].contains("D[Some(\"2\")]"), "{:#?}", heard[0]);
    assert_eq!(counts(&env).await, (1, 1));
}

/// A write told here whose table changed before its run (unseen by
/// onetrip) fails as a dedicated connection's stale statement does, in a
/// group of its own and inside a block, and never runs: its rows are not
/// written. Unchanged, it runs.
async fn stale_write(a: &mut TcpStream, b: &mut TcpStream, c: &mut TcpStream) -> Vec<String> {
    let write = "insert into described_t values (5) returning *";
    let plain = "insert into described_t values (6)";
    let mut heard = Vec::new();
    for sql in [write, plain] {
        heard.push(step(a, &prepare("", sql)).await);
        heard.push(step(a, &raw::bind_execute_sync("")).await);
    }
    heard.push(step(b, &prepare("w", write)).await);
    heard.push(step(b, &prepare("p", plain)).await);
    heard.push(step(b, &prepare("w2", write)).await);
    heard.push(step(c, &raw::query("alter table described_t add column b int")).await);
    heard.push(step(b, &raw::bind_execute_sync("w")).await);
    heard.push(step(b, &raw::query("begin")).await);
    heard.push(step(b, &raw::bind_execute_sync("w2")).await);
    heard.push(step(b, &raw::query("rollback")).await);
    heard.push(step(b, &raw::bind_execute_sync("p")).await);
    heard.push(step(b, &raw::query("select count(*) from described_t")).await);
    heard
}

#[tokio::test]
async fn a_told_write_whose_table_changed_never_runs() {
    let env = pooled(1).await;
    let mut heard = Vec::new();
    for port in [env.pg.port(), env.proxy_port()] {
        reset(env.pg.port()).await;
        let (mut a, mut b) = raw::two_ready(port).await;
        let mut c = raw::connect_ready(env.pg.port()).await;
        heard.push(stale_write(&mut a, &mut b, &mut c).await);
    }
    assert_eq!(heard[1], heard[0]);
    let stale = heard[0].iter().filter(|s| s.contains("0A000")).count();
    assert_eq!(stale, 2, "{:#?}", heard[0]);
    // 2 rows, A's 2 writes, B's plain one: B's changed write never ran.
    assert!(heard[0][13].contains("D[Some(\"5\")]"), "{:#?}", heard[0]);
    // B's three Parses; its two runs of the changed one.
    assert_eq!(counts(&env).await, (3, 2), "{:#?}", heard[1]);
}
