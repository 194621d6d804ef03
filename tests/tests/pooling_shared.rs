//! Transaction pooling shares named statements: clients that prepare the
//! same text use one statement on each server connection, under a name of
//! onetrip's, whatever they named theirs. Clients must hear exactly what a
//! dedicated connection says, errors that name a statement included, and
//! a portal stays open while its client prepares the same text again.

use onetrip_tests::{Env, PgOptions, connect, raw, simple_rows};
use tokio::net::TcpStream;

async fn pooled(size: usize, share: bool) -> Env {
    Env::start_with(PgOptions::default(), move |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = size;
        c.pool.share_statements = share;
    })
    .await
}

/// SHOW POOLS' `statements_shared` and `statements_parsed_again`.
async fn counts(env: &Env) -> (u64, u64) {
    let row = env.pool_row().await;
    let n = |c: &str| row.get(c).unwrap().parse().unwrap();
    (n("statements_shared"), n("statements_parsed_again"))
}

/// Bind of statement `name` to `portal` with text parameters.
fn bind(portal: &str, name: &str, params: &[&str]) -> Vec<u8> {
    let mut body = Vec::new();
    for s in [portal, name] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    body.extend_from_slice(&[0, 0]);
    body.extend_from_slice(&(params.len() as i16).to_be_bytes());
    for p in params {
        body.extend_from_slice(&(p.len() as i32).to_be_bytes());
        body.extend_from_slice(p.as_bytes());
    }
    body.extend_from_slice(&[0, 0]);
    raw::message(b'B', &body)
}

fn execute(portal: &str, rows: i32) -> Vec<u8> {
    let mut body = portal.as_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&rows.to_be_bytes());
    raw::message(b'E', &body)
}

fn close(name: &str) -> Vec<u8> {
    let mut body = vec![b'S'];
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    raw::message(b'C', &body)
}

fn then_sync(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = parts.concat();
    out.extend(raw::sync());
    out
}

const DOUBLE: &str = "SELECT $1::int * 2";
const SERIES: &str = "SELECT generate_series(1, 3)";

/// Two clients preparing the same texts under their own names.
async fn script(a: &mut TcpStream, b: &mut TcpStream) -> Vec<String> {
    let mut heard = Vec::new();
    heard.push(raw::heard(a, &then_sync(&[raw::parse("a1", DOUBLE)])).await);
    heard.push(raw::heard(b, &then_sync(&[raw::parse("b1", DOUBLE)])).await);
    for (c, name) in [(&mut *a, "a1"), (&mut *b, "b1")] {
        heard.push(raw::heard(c, &then_sync(&[bind("", name, &["21"]), execute("", 0)])).await);
    }
    // Errors that name the statement name the client's.
    heard.push(raw::heard(a, &then_sync(&[bind("", "a1", &[]), execute("", 0)])).await);
    heard.push(raw::heard(a, &then_sync(&[raw::parse("a1", DOUBLE)])).await);
    // One client's Close leaves the other's statement.
    heard.push(raw::heard(b, &then_sync(&[close("b1")])).await);
    heard.push(raw::heard(a, &then_sync(&[bind("", "a1", &["5"]), execute("", 0)])).await);
    heard.push(raw::heard(b, &then_sync(&[bind("", "b1", &["5"]), execute("", 0)])).await);
    // A portal stays open while its client prepares its text again, and
    // while another client's statement of the text is there.
    heard.push(raw::heard(b, &then_sync(&[raw::parse("b2", SERIES)])).await);
    heard.push(raw::heard(a, &raw::query("BEGIN")).await);
    let portal = [
        raw::parse("a2", SERIES),
        bind("p", "a2", &[]),
        execute("p", 1),
        raw::parse("a3", SERIES),
        execute("p", 1),
        bind("", "a3", &[]),
        execute("", 0),
    ];
    heard.push(raw::heard(a, &then_sync(&portal)).await);
    heard.push(raw::heard(a, &then_sync(&[execute("p", 0)])).await);
    heard.push(raw::heard(a, &raw::query("COMMIT")).await);
    heard.push(raw::heard(b, &then_sync(&[bind("", "b2", &[]), execute("", 0)])).await);
    heard.push(raw::heard(a, &then_sync(&[bind("", "a3", &[]), execute("", 1)])).await);
    // SQL names the client's statements: EXECUTE runs a shared one, and
    // after DEALLOCATE it is gone for this client only.
    heard.push(raw::heard(a, &raw::query("EXECUTE a1(4)")).await);
    heard.push(raw::heard(a, &raw::query("DEALLOCATE a1")).await);
    heard.push(raw::heard(a, &then_sync(&[bind("", "a1", &["5"]), execute("", 0)])).await);
    heard.push(raw::heard(b, &then_sync(&[raw::parse("b1", DOUBLE)])).await);
    heard.push(raw::heard(b, &then_sync(&[bind("", "b1", &["6"]), execute("", 0)])).await);
    heard
}

#[tokio::test]
async fn shared_statements_answer_as_dedicated_connections() {
    let env = pooled(1, true).await;
    let port = env.pg.port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let direct = script(&mut a, &mut b).await;
    let port = env.proxy_port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let pooled = script(&mut a, &mut b).await;
    assert_eq!(pooled, direct);
    for want in [
        "\"a1\" requires 1",
        "\"a1\" already exists",
        "\"b1\" does not exist",
    ] {
        assert!(
            direct.iter().any(|s| s.contains(want)),
            "{want}: {direct:?}"
        );
    }
    let (shared, _) = counts(&env).await;
    assert!(shared > 0, "statements shared: {shared}");
}

/// Server statements of `text` on the pool's one connection, asked
/// through onetrip.
async fn statements_of(env: &Env, text: &str) -> i64 {
    let c = connect(&env.proxy_dsn()).await;
    let q = format!(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement = '{}'",
        text.replace('\'', "''")
    );
    let rows = simple_rows(&c.simple_query(&q).await.unwrap());
    rows[0][0].as_deref().unwrap().parse().unwrap()
}

/// Twenty tokio-postgres clients (each names its statements apart: `s0`,
/// `s1`, ...) prepare one text and run it on a pool of one.
async fn twenty_clients(env: &Env, text: &str) {
    for i in 0..20i32 {
        let c = connect(&env.proxy_dsn()).await;
        let st = c.prepare(text).await.unwrap();
        let row = c.query_one(&st, &[&i]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), i + 7);
    }
}

#[tokio::test]
async fn clients_of_one_text_hold_one_server_statement() {
    let text = "SELECT $1::int + 7";
    let env = pooled(1, true).await;
    twenty_clients(&env, text).await;
    assert_eq!(statements_of(&env, text).await, 1);
    let (shared, parsed_again) = counts(&env).await;
    assert!(shared >= 19, "statements shared: {shared}");
    assert!(parsed_again <= 1, "parsed again: {parsed_again}");
    // Unshared, each client's statement is the server's too.
    let env = pooled(1, false).await;
    twenty_clients(&env, text).await;
    assert_eq!(statements_of(&env, text).await, 20);
}

/// DDL onetrip did not see (run on the server directly) leaves a shared
/// statement stale on the connection: the client whose statement it was
/// gets PostgreSQL's 0A000, as on a dedicated connection, and from then on
/// the connection makes its statements again, so a client that prepared
/// the text after the change reads the new columns.
#[tokio::test]
async fn a_stale_shared_statement_is_made_again_after_its_error() {
    let env = pooled(1, true).await;
    let direct = connect(&env.direct_dsn()).await;
    direct
        .batch_execute("CREATE TABLE shared_t (a int); INSERT INTO shared_t VALUES (1)")
        .await
        .unwrap();
    let port = env.proxy_port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let all = "SELECT * FROM shared_t";
    let run = |name: &'static str| then_sync(&[bind("", name, &[]), execute("", 0)]);
    assert_eq!(
        raw::heard(&mut a, &then_sync(&[raw::parse("a1", all)])).await,
        "1 ZI"
    );
    assert_eq!(
        raw::heard(&mut a, &run("a1")).await,
        "2 D[Some(\"1\")] C(SELECT 1) ZI"
    );
    direct
        .batch_execute("ALTER TABLE shared_t ADD COLUMN b int DEFAULT 7")
        .await
        .unwrap();
    let stale = raw::heard(&mut a, &run("a1")).await;
    assert!(stale.starts_with("E(0A000"), "{stale}");
    assert_eq!(
        raw::heard(&mut b, &then_sync(&[raw::parse("b1", all)])).await,
        "1 ZI"
    );
    assert_eq!(
        raw::heard(&mut b, &run("b1")).await,
        "2 D[Some(\"1\"), Some(\"7\")] C(SELECT 1) ZI"
    );
}
