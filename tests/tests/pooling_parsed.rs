//! Transaction pooling: a Parse alone with its Sync of a text a server of
//! the pool parsed before is answered by onetrip with no server connection,
//! writes and a transaction's control included (how pgbench `-M prepared`
//! prepares, synchronously, on first use). The client's own Parse goes up
//! in the same write as the Bind that first uses it, so a text that no
//! longer parses fails there, as a dedicated connection's statement does
//! after DDL; never rows of another table's making.

use onetrip_tests::{Env, PgOptions, raw};
use tokio::net::TcpStream;

async fn pooled(size: usize) -> Env {
    Env::start_with(PgOptions::default(), move |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = size;
    })
    .await
}

/// SHOW POOLS' `parses_here`.
async fn parses_here(env: &Env) -> u64 {
    let row = env.pool_row().await;
    row.get("parses_here").unwrap().parse().unwrap()
}

/// A Parse and its Sync: how libpq's `PQprepare` prepares.
fn prepare(name: &str, sql: &str) -> Vec<u8> {
    let mut out = raw::parse(name, sql);
    out.extend(raw::sync());
    out
}

async fn reset(port: u16) {
    let mut s = raw::connect_ready(port).await;
    raw::heard(
        &mut s,
        &raw::query(
            "drop table if exists parsed_t, parsed_gone; \
             create table parsed_t (a int); create table parsed_gone (a int)",
        ),
    )
    .await;
}

const WRITE: &str = "insert into parsed_t values (1)";
const RETURNING: &str = "insert into parsed_t values (2) returning *";
const GONE: &str = "insert into parsed_gone values (1)";

/// A prepares (and runs) statements as pgbench does, one inside a
/// transaction; B prepares the same texts (through onetrip answered
/// here: one of them while A holds the pool's only connection in its
/// transaction) and runs them, in a transaction as pgbench does, named
/// and unnamed, inside a transaction whose BEGIN onetrip holds; C changes
/// a table under B (unseen by onetrip: direct) between A's prepare and
/// B's (of the unnamed statement: a named one A left on the connection
/// is the next test's), and drops another between B's prepare and its
/// run.
async fn script(a: &mut TcpStream, b: &mut TcpStream, c: &mut TcpStream, heard: &mut Vec<String>) {
    for (name, sql) in [("P0_0", "BEGIN;"), ("P0_1", WRITE), ("P0_2", "END;")] {
        heard.push(raw::heard(a, &prepare(name, sql)).await);
    }
    for name in ["P0_0", "P0_1", "P0_2"] {
        heard.push(raw::heard(a, &raw::bind_execute_sync(name)).await);
    }
    heard.push(raw::heard(a, &prepare("", WRITE)).await);
    heard.push(raw::heard(a, &prepare("", RETURNING)).await);
    heard.push(raw::heard(a, &prepare("g", GONE)).await);
    // Parsed inside a transaction; B parses it while A's transaction
    // holds the connection.
    heard.push(raw::heard(a, &raw::query("begin")).await);
    heard.push(raw::heard(a, &raw::bind_execute_sync("P0_1")).await);
    heard.push(raw::heard(a, &prepare("t", "savepoint s")).await);
    heard.push(raw::heard(b, &prepare("P0_1", WRITE)).await);
    heard.push(raw::heard(a, &raw::query("commit")).await);
    // A text that failed to parse is not learned.
    heard.push(raw::heard(a, &prepare("x", "insert into parsed_nosuch values (1)")).await);
    heard.push(raw::heard(b, &prepare("x", "insert into parsed_nosuch values (1)")).await);
    // B, as pgbench.
    for (name, sql) in [("P0_0", "BEGIN;"), ("P0_2", "END;")] {
        heard.push(raw::heard(b, &prepare(name, sql)).await);
    }
    for name in ["P0_0", "P0_1", "P0_2"] {
        heard.push(raw::heard(b, &raw::bind_execute_sync(name)).await);
    }
    // Unnamed, then inside a transaction whose BEGIN is held.
    heard.push(raw::heard(b, &prepare("", WRITE)).await);
    heard.push(raw::heard(b, &raw::bind_execute_sync("")).await);
    heard.push(raw::heard(b, &raw::query("begin")).await);
    heard.push(raw::heard(b, &prepare("w", WRITE)).await);
    heard.push(raw::heard(b, &prepare("t", "savepoint s")).await);
    heard.push(raw::heard(b, &raw::bind_execute_sync("w")).await);
    heard.push(raw::heard(b, &raw::query("commit")).await);
    // Changed between A's prepare and B's: B's statement is the new shape.
    heard.push(
        raw::heard(
            c,
            &raw::query("alter table parsed_t add column b int default 7"),
        )
        .await,
    );
    heard.push(raw::heard(b, &prepare("", RETURNING)).await);
    heard.push(raw::heard(b, &raw::bind_execute_sync("")).await);
    // Dropped between B's prepare and its run: the run fails.
    heard.push(raw::heard(b, &prepare("g", GONE)).await);
    heard.push(raw::heard(c, &raw::query("drop table parsed_gone")).await);
    heard.push(raw::heard(b, &raw::bind_execute_sync("g")).await);
    heard.push(raw::heard(b, &raw::query("select count(*) from parsed_t")).await);
}

#[tokio::test]
async fn a_parse_alone_of_a_write_is_answered_here_as_on_a_dedicated_connection() {
    let env = pooled(1).await;
    let mut heard = Vec::new();
    for port in [env.pg.port(), env.proxy_port()] {
        reset(env.pg.port()).await;
        let (mut a, mut b) = raw::two_ready(port).await;
        let mut c = raw::connect_ready(env.pg.port()).await;
        let mut h = Vec::new();
        script(&mut a, &mut b, &mut c, &mut h).await;
        heard.push(h);
    }
    let (direct, pooled) = (&heard[0], &heard[1]);
    assert_eq!(pooled, direct);
    assert!(direct[direct.len() - 2].contains("E(42P01"), "{direct:#?}");
    assert!(
        direct
            .iter()
            .any(|s| s.contains("D[Some(\"2\"), Some(\"7\")]"))
    );
    // A's unnamed one of P0_1's text; B's Parses: P0_1 (in A's
    // transaction), P0_0, P0_2, unnamed, w and t (in its held
    // transaction), the unnamed RETURNING and g.
    assert_eq!(parses_here(&env).await, 9, "{pooled:#?}");
}

/// A table dropped between two clients' prepares, unseen by onetrip: the
/// second's Parse is answered here (the pool's server parsed the text), and
/// its run fails as a dedicated connection's statement prepared before
/// the drop fails, never with rows; seen by onetrip, the drop makes the
/// Parse go to the server, which fails it.
#[tokio::test]
async fn a_table_dropped_between_two_prepares_fails_the_run() {
    let env = pooled(1).await;
    reset(env.pg.port()).await;
    let port = env.proxy_port();
    let mut a = raw::connect_ready(port).await;
    assert_eq!(raw::heard(&mut a, &prepare("g", GONE)).await, "1 ZI");
    let mut direct = raw::connect_ready(env.pg.port()).await;
    raw::heard(&mut direct, &raw::query("drop table parsed_gone")).await;
    let mut b = raw::connect_ready(port).await;
    assert_eq!(raw::heard(&mut b, &prepare("g", GONE)).await, "1 ZI");
    assert_eq!(parses_here(&env).await, 1);
    let failed = raw::heard(&mut b, &raw::bind_execute_sync("g")).await;
    // What a dedicated connection's statement says after the drop.
    let mut d = raw::connect_ready(env.pg.port()).await;
    raw::heard(&mut d, &raw::query("create table parsed_gone (a int)")).await;
    assert_eq!(raw::heard(&mut d, &prepare("g", GONE)).await, "1 ZI");
    raw::heard(&mut direct, &raw::query("drop table parsed_gone")).await;
    assert_eq!(
        failed,
        raw::heard(&mut d, &raw::bind_execute_sync("g")).await
    );
    assert!(failed.starts_with("E(42P01"), "{failed}");
    // Seen through onetrip: the pool forgets what it parsed.
    let mut c = raw::connect_ready(port).await;
    raw::heard(&mut c, &raw::query("create table parsed_gone (a int)")).await;
    assert_eq!(raw::heard(&mut c, &prepare("g", GONE)).await, "1 ZI");
    raw::heard(&mut c, &raw::query("drop table parsed_gone")).await;
    let mut e = raw::connect_ready(port).await;
    let refused = raw::heard(&mut e, &prepare("g", GONE)).await;
    assert!(refused.starts_with("E(42P01"), "{refused}");
    assert_eq!(parses_here(&env).await, 1);
}

/// A named statement A left on the pool's connection, its table changed
/// (unseen) before B's Parse of the same text is answered here: B's run
/// uses the statement the connection holds, which fails as a dedicated
/// connection's stale statement does, or runs with the new shape; never
/// rows of the old shape.
#[tokio::test]
async fn a_named_statement_changed_under_it_never_gives_the_old_shape() {
    let env = pooled(1).await;
    reset(env.pg.port()).await;
    let port = env.proxy_port();
    let mut a = raw::connect_ready(port).await;
    assert_eq!(raw::heard(&mut a, &prepare("r", RETURNING)).await, "1 ZI");
    let mut direct = raw::connect_ready(env.pg.port()).await;
    raw::heard(
        &mut direct,
        &raw::query("alter table parsed_t add column b int default 7"),
    )
    .await;
    let mut b = raw::connect_ready(port).await;
    assert_eq!(raw::heard(&mut b, &prepare("r", RETURNING)).await, "1 ZI");
    assert_eq!(parses_here(&env).await, 1);
    let run = raw::heard(&mut b, &raw::bind_execute_sync("r")).await;
    assert!(
        run == "E(0A000 cached plan must not change result type) ZI"
            || run == "D[Some(\"2\"), Some(\"7\")] C(INSERT 0 1) ZI",
        "{run}"
    );
}
