//! Transaction pooling and named prepared statements: a client's named
//! statements follow it from one server connection to the next, under the
//! names it gave them, while other clients use the same names for other
//! statements; it is not pinned for them.

use std::time::Duration;

use onetrip_tests::{Env, PgOptions, connect, raw, simple_rows};
use tokio::{io::AsyncWriteExt, net::TcpStream};

async fn pooled(size: usize) -> Env {
    Env::start_with(PgOptions::default(), move |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = size;
    })
    .await
}

async fn pools(env: &Env) -> Vec<Vec<Option<String>>> {
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let c = connect(&dsn).await;
    simple_rows(&c.simple_query("SHOW POOLS").await.unwrap())
}

fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut body = name.as_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(sql.as_bytes());
    body.extend_from_slice(&[0, 0, 0]);
    raw::message(b'P', &body)
}

/// Bind of `name` (no parameters), Execute, Sync.
fn run(name: &str) -> Vec<u8> {
    let mut body = vec![0u8];
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0]);
    let mut out = raw::message(b'B', &body);
    out.extend(raw::message(b'E', &[0, 0, 0, 0, 0]));
    out.extend(raw::message(b'S', &[]));
    out
}

fn close(name: &str) -> Vec<u8> {
    let mut body = vec![b'S'];
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    let mut out = raw::message(b'C', &body);
    out.extend(raw::message(b'S', &[]));
    out
}

fn sync_after(mut msg: Vec<u8>) -> Vec<u8> {
    msg.extend(raw::message(b'S', &[]));
    msg
}

/// What a client hears for a step: message types, rows, SQLSTATEs.
async fn step(s: &mut TcpStream, msg: &[u8]) -> String {
    s.write_all(msg).await.unwrap();
    let got = raw::read_to_z(s).await;
    got.iter()
        .map(|(t, b)| match t {
            b'D' => format!("D({})", String::from_utf8_lossy(&b[6..])),
            b'E' => format!("E({})", raw::field(b, b'C').unwrap_or_default()),
            t => (*t as char).to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Two clients using the same statement name for different statements,
/// with the steps that fail on a dedicated connection.
async fn script(a: &mut TcpStream, b: &mut TcpStream) -> Vec<String> {
    let mut heard = Vec::new();
    heard.push(step(a, &sync_after(parse("st", "SELECT 'a'"))).await);
    // b has no "st": its Bind fails as on its own connection, though
    // the one server connection may hold a's.
    heard.push(step(b, &run("st")).await);
    heard.push(step(b, &sync_after(parse("st", "SELECT 'b'"))).await);
    for _ in 0..3 {
        heard.push(step(a, &run("st")).await);
        heard.push(step(b, &run("st")).await);
    }
    // A Parse of a name the client holds fails as it would have.
    heard.push(step(a, &sync_after(parse("st", "SELECT 'again'"))).await);
    heard.push(step(a, &run("st")).await);
    heard.push(step(b, &close("st")).await);
    heard.push(step(b, &run("st")).await);
    heard.push(step(a, &run("st")).await);
    // In a transaction, after an error: the server's answers, not ours.
    heard.push(step(a, &raw::query("BEGIN; SELECT 1/0")).await);
    heard.push(step(a, &run("st")).await);
    heard.push(step(a, &raw::query("ROLLBACK")).await);
    heard.push(step(a, &run("st")).await);
    heard
}

#[tokio::test]
async fn named_statements_follow_their_client_and_match_dedicated_connections() {
    let env = pooled(1).await;
    let port = env.pg.port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let direct = script(&mut a, &mut b).await;
    let port = env.proxy_port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let pooled = script(&mut a, &mut b).await;
    assert_eq!(pooled, direct);
    assert!(direct.iter().any(|s| s.contains("26000")), "{direct:?}");
    assert!(direct.iter().any(|s| s.contains("42P05")), "{direct:?}");
    let rows = pools(&env).await;
    assert_eq!(rows[0][6].as_deref(), Some("0"), "nothing pinned: {rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokio_postgres_prepared_statements_on_a_pool_of_two() {
    let env = pooled(2).await;
    let dsn = env.proxy_dsn();
    let mut tasks = Vec::new();
    for client in 0..8i32 {
        let dsn = dsn.clone();
        tasks.push(tokio::spawn(async move {
            let c = connect(&dsn).await;
            // Each client's statements are named s0, s1, ... like every
            // other client's, for other texts.
            let add = c
                .prepare(&format!("SELECT $1::int + {client}"))
                .await
                .unwrap();
            let name = c.prepare("SELECT $1::text || '!'").await.unwrap();
            for i in 0..25i32 {
                let v: i32 = c.query_one(&add, &[&i]).await.unwrap().get(0);
                assert_eq!(v, i + client);
                let s: String = c
                    .query_one(&name, &[&format!("c{client}")])
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!(s, format!("c{client}!"));
                if i % 5 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rows = pools(&env).await;
    assert_eq!(rows[0][6].as_deref(), Some("0"), "nothing pinned: {rows:?}");
}

/// A client's named statements left on a server connection, and what an
/// error in their pipeline did to them; the count it holds is read after.
async fn many_statements(a: &mut TcpStream) -> Vec<String> {
    let mut heard = Vec::new();
    for i in 0..12 {
        heard.push(
            step(
                a,
                &sync_after(parse(&format!("s{i}"), &format!("SELECT 's{i}'"))),
            )
            .await,
        );
        heard.push(step(a, &run(&format!("s{i}"))).await);
    }
    // Each of them again, oldest first: each was closed to make room.
    for i in 0..12 {
        heard.push(step(a, &run(&format!("s{i}"))).await);
    }
    // A Parse that fails, and one after it the server skips.
    let mut pipeline = parse("bad", "SELECT * FROM no_such_table");
    pipeline.extend(parse("s12", "SELECT 's12'"));
    heard.push(step(a, &sync_after(pipeline)).await);
    heard.push(step(a, &run("s12")).await);
    heard.push(step(a, &run("s3")).await);
    heard
}

/// A server connection holds at most `max_prepared_statements` named
/// statements however many its clients made, and each client still runs
/// all of its own, as on a dedicated connection.
#[tokio::test]
async fn a_connection_holds_a_bounded_number_of_statements() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 1;
        c.pool.max_prepared_statements = 5;
    })
    .await;
    let mut direct = raw::connect_ready(env.pg.port()).await;
    let expected = many_statements(&mut direct).await;
    assert!(expected.iter().any(|s| s.contains("42P01")), "{expected:?}");
    assert!(expected.iter().any(|s| s.contains("26000")), "{expected:?}");
    let mut a = raw::connect_ready(env.proxy_port()).await;
    assert_eq!(many_statements(&mut a).await, expected);
    // Another client, other names: a's are made room for as well.
    let mut b = raw::connect_ready(env.proxy_port()).await;
    for i in 0..8 {
        let n = format!("b{i}");
        assert_eq!(
            step(&mut b, &sync_after(parse(&n, "SELECT 'b'"))).await,
            "1 Z"
        );
        assert_eq!(step(&mut b, &run(&n)).await, "2 D(b) C Z");
    }
    let held = step(
        &mut a,
        &raw::query("SELECT count(*) FROM pg_prepared_statements"),
    )
    .await;
    assert_eq!(held, "T D(5) C Z", "held on the one server connection");
    assert_eq!(step(&mut a, &run("s0")).await, "2 D(s0) C Z");
}

/// Closes of statements and portals (`kind`, name), then a Sync.
fn closes(targets: &[(u8, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (kind, name) in targets {
        let mut body = vec![*kind];
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        out.extend(raw::message(b'C', &body));
    }
    out.extend(raw::message(b'S', &[]));
    out
}

/// A client that closes its statements with Closes alone, while `hold`
/// (another client of the same pool) holds its connection in a
/// transaction, if given; then uses the names again.
async fn close_script(c: &mut TcpStream, mut hold: Option<&mut TcpStream>) -> Vec<String> {
    let mut heard = Vec::new();
    heard.push(step(c, &sync_after(parse("st", "SELECT 'a'"))).await);
    heard.push(step(c, &sync_after(parse("", "SELECT 'u'"))).await);
    heard.push(step(c, &run("st")).await);
    if let Some(h) = hold.as_deref_mut() {
        assert_eq!(
            step(h, &raw::query("BEGIN; SELECT 1")).await,
            "C T D(1) C Z"
        );
    }
    let all = closes(&[(b'S', "st"), (b'P', ""), (b'S', ""), (b'S', "never")]);
    let answered = tokio::time::timeout(Duration::from_secs(5), step(c, &all))
        .await
        .expect("Closes alone are answered while the pool's connection is held");
    heard.push(answered);
    if let Some(h) = hold {
        assert_eq!(step(h, &raw::query("COMMIT")).await, "C Z");
    }
    heard.push(step(c, &run("st")).await);
    heard.push(step(c, &run("")).await);
    heard.push(step(c, &sync_after(parse("st", "SELECT 'b'"))).await);
    heard.push(step(c, &run("st")).await);
    heard
}

/// tokio-postgres drops a statement with a Close and a Sync of their own:
/// answered with no server connection, as the server answers, and the
/// names are the client's no longer, on whichever connection it gets.
#[tokio::test]
async fn closes_alone_take_no_connection_and_answer_as_a_dedicated_one() {
    let env = pooled(1).await;
    let mut direct = raw::connect_ready(env.pg.port()).await;
    let expected = close_script(&mut direct, None).await;
    assert_eq!(expected[3], "3 3 3 3 Z");
    assert!(expected[4].contains("26000"), "{expected:?}");
    let mut hold = raw::connect_ready(env.proxy_port()).await;
    let mut c = raw::connect_ready(env.proxy_port()).await;
    assert_eq!(close_script(&mut c, Some(&mut hold)).await, expected);
    let stats = env.proxy.as_ref().unwrap().stats().total();
    assert_eq!(stats.local_closes, 1, "one group of Closes answered here");
    let rows = pools(&env).await;
    assert_eq!(rows[0][6].as_deref(), Some("0"), "nothing pinned: {rows:?}");
}
