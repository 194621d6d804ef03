//! Transaction pooling and SQL's PREPARE, EXECUTE and DEALLOCATE: a
//! client's SQL-prepared statements follow it from one server connection
//! to the next, as those of the extended protocol do, with no pin; every
//! answer is the one a dedicated connection gives, message for message.

use onetrip_tests::{Env, PgOptions, connect, python_with_psycopg, raw, run_py, skip};
use tokio::{io::AsyncWriteExt, net::TcpStream};

async fn pooled(size: usize) -> Env {
    Env::start_with(PgOptions::default(), move |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = size;
    })
    .await
}

/// The column of SHOW POOLS named `name`, in the pool's row.
async fn pool_column(env: &Env, name: &str) -> String {
    env.pool_row()
        .await
        .get(name)
        .unwrap_or_default()
        .to_owned()
}

/// Every message a client hears for `msg`, up to its ReadyForQuery, whole:
/// type and body, errors with all their fields.
async fn step(s: &mut TcpStream, msg: &[u8]) -> String {
    s.write_all(msg).await.unwrap();
    raw::read_to_z(s)
        .await
        .iter()
        .map(|(t, b)| format!("{}:{}", *t as char, String::from_utf8_lossy(b)))
        .collect::<Vec<_>>()
        .join(" ")
        .replace('\0', "|")
}

async fn q(s: &mut TcpStream, sql: &str) -> String {
    step(s, &raw::query(sql)).await
}

/// Bind of statement `name` with no parameters, results in text, Execute
/// and Sync.
fn bind_run(name: &str) -> Vec<u8> {
    let mut body = vec![0u8];
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0]);
    let mut out = raw::message(b'B', &body);
    out.extend(raw::message(b'E', &[0, 0, 0, 0, 0]));
    out.extend(raw::message(b'S', &[]));
    out
}

/// Parse of `sql` as statement `name`, Describe of it, Sync: how drivers
/// prepare (psycopg does so for any text it runs often, EXECUTE too).
fn parse_describe(name: &str, sql: &str) -> Vec<u8> {
    let mut body = name.as_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(sql.as_bytes());
    body.extend_from_slice(&[0, 0, 0]);
    let mut out = raw::message(b'P', &body);
    let mut target = vec![b'S'];
    target.extend_from_slice(name.as_bytes());
    target.push(0);
    out.extend(raw::message(b'D', &target));
    out.extend(raw::message(b'S', &[]));
    out
}

/// Two clients that prepare under the same names, with every error a
/// dedicated connection gives for SQL's prepared statements.
async fn script(a: &mut TcpStream, b: &mut TcpStream) -> Vec<String> {
    let mut heard = Vec::new();
    heard.push(q(a, "TRUNCATE sql_prep").await);
    heard.push(q(a, "PREPARE st (int) AS SELECT $1 + 1 AS n").await);
    // b has no "st", though the one server connection holds a's.
    heard.push(q(b, "EXECUTE st(1)").await);
    heard.push(q(b, "PREPARE st AS SELECT 'b' AS who").await);
    heard.push(q(a, "EXECUTE st(41)").await);
    heard.push(q(b, "EXECUTE st").await);
    // Errors: a name the client has, bad SQL, an unknown table.
    heard.push(q(a, "PREPARE st AS SELECT 1").await);
    heard.push(q(a, "PREPARE bad AS SELEC 1").await);
    heard.push(q(a, "prepare nt as select * from no_such_table;").await);
    heard.push(q(a, "EXECUTE nt").await);
    heard.push(q(a, "EXECUTE st('x')").await);
    // Writes, and their tags.
    heard.push(
        q(
            a,
            "PREPARE ins (int, text) AS INSERT INTO sql_prep VALUES ($1, $2)",
        )
        .await,
    );
    heard.push(q(b, "EXECUTE ins(1, 'x')").await);
    heard.push(q(a, "EXECUTE ins(1, 'x')").await);
    heard.push(q(a, "EXECUTE ins(2 * 1, upper('y'))").await);
    heard.push(q(b, "PREPARE sel AS SELECT id, v FROM sql_prep ORDER BY id").await);
    heard.push(q(b, "EXECUTE sel").await);
    heard.push(
        q(
            a,
            "PREPARE upd AS UPDATE sql_prep SET v = v || '!' RETURNING id, v",
        )
        .await,
    );
    heard.push(q(a, "EXECUTE upd").await);
    // In a transaction block, and after an error in one.
    heard.push(q(a, "BEGIN").await);
    heard.push(q(a, "EXECUTE ins(3, 'z')").await);
    heard.push(q(a, "EXECUTE st(2)").await);
    heard.push(q(a, "COMMIT").await);
    heard.push(q(a, "BEGIN").await);
    heard.push(q(a, "SELECT 1/0").await);
    heard.push(q(a, "EXECUTE st(2)").await);
    heard.push(q(a, "ROLLBACK").await);
    // Names used elsewhere in a statement, and by the extended protocol.
    heard.push(q(a, "EXPLAIN (COSTS OFF) EXECUTE sel").await);
    heard.push(q(b, "EXPLAIN (COSTS OFF) EXECUTE sel").await);
    heard.push(q(b, "CREATE TABLE sql_prep_copy AS EXECUTE nope").await);
    heard.push(step(b, &bind_run("st")).await);
    heard.push(step(a, &bind_run("sel")).await);
    heard.push(q(b, "EXECUTE sel; EXECUTE st").await);
    // A driver's statement whose text is an EXECUTE: described and run
    // with the client's statement, wherever it goes.
    heard.push(step(b, &parse_describe("ex", "EXECUTE sel")).await);
    heard.push(step(a, &parse_describe("ex", "EXECUTE sel")).await);
    heard.push(q(a, "SELECT 1").await);
    heard.push(step(b, &bind_run("ex")).await);
    heard.push(step(a, &bind_run("ex")).await);
    // DEALLOCATE in each form.
    heard.push(q(a, "DEALLOCATE ins").await);
    heard.push(q(a, "DEALLOCATE ins").await);
    heard.push(q(a, "EXECUTE ins(9, 'no')").await);
    heard.push(q(b, "DEALLOCATE PREPARE sel").await);
    heard.push(q(b, "EXECUTE sel").await);
    heard.push(q(a, "DEALLOCATE ALL").await);
    heard.push(q(a, "EXECUTE st(1)").await);
    heard.push(q(b, "EXECUTE st").await);
    heard.push(q(a, "PREPARE st AS SELECT 'a again' AS who").await);
    heard.push(q(a, "EXECUTE st").await);
    heard.push(q(b, "EXECUTE st").await);
    heard.push(q(a, "SELECT id, v FROM sql_prep ORDER BY id").await);
    heard
}

#[tokio::test]
async fn sql_prepared_statements_follow_their_client_and_match_dedicated_connections() {
    let env = pooled(1).await;
    connect(&env.direct_dsn())
        .await
        .batch_execute("CREATE TABLE sql_prep (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    let port = env.pg.port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let direct = script(&mut a, &mut b).await;
    let port = env.proxy_port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let pooled = script(&mut a, &mut b).await;
    for (i, (p, d)) in pooled.iter().zip(&direct).enumerate() {
        assert_eq!(p, d, "step {i}");
    }
    assert_eq!(pooled.len(), direct.len());
    let all = direct.join("\n");
    for code in ["26000", "42P05", "42601", "42P01", "25P02", "22P02"] {
        assert!(all.contains(&format!("C{code}|")), "{code} in {all}");
    }
    for tag in [
        "INSERT 0 1|",
        "SELECT 2|",
        "UPDATE 2|",
        "DEALLOCATE ALL|",
        "C:PREPARE|",
    ] {
        assert!(all.contains(tag), "{tag} in {all}");
    }
    assert_eq!(pool_column(&env, "sv_pinned").await, "0");
    // The two clients' statements were made again on the one connection,
    // each time the other had used it.
    let kept: u64 = pool_column(&env, "sql_prepares").await.parse().unwrap();
    let again: u64 = pool_column(&env, "sql_prepares_made_again")
        .await
        .parse()
        .unwrap();
    assert_eq!(kept, 6, "PREPAREs kept");
    assert!(again >= 3, "made again: {again}");
    let clients = env.admin("SHOW CLIENTS").await;
    assert!(!clients.is_empty());
}

/// Closes, Parses and DEALLOCATEs across both protocols, parameter types
/// given and inferred, quoted names, and a PREPARE with its EXECUTE in one
/// write: two clients, through one connection and on their own.
async fn mixed_script(a: &mut TcpStream, b: &mut TcpStream) -> Vec<String> {
    let mut heard = Vec::new();
    heard.push(q(a, "PREPARE two (int, text) AS SELECT $2 || $1 AS two").await);
    heard.push(q(a, "PREPARE inferred AS SELECT $1::int + 1 AS n, $2 AS t").await);
    heard.push(q(a, "PREPARE \"Mixed Case\" AS SELECT 'mixed' AS m").await);
    heard.push(q(b, "PREPARE two AS SELECT 'b two' AS two").await);
    heard.push(q(a, "EXECUTE two(1, 'a')").await);
    heard.push(q(a, "EXECUTE inferred('41', 'x')").await);
    heard.push(q(a, "EXECUTE \"Mixed Case\"").await);
    heard.push(q(a, "EXECUTE mixed").await);
    // The protocol's view of the same names.
    heard.push(step(b, &parse_describe("x", "SELECT 1")).await);
    heard.push(step(a, &parse_describe("two", "SELECT 2")).await);
    heard.push(step(a, &close_sync("two")).await);
    heard.push(q(a, "EXECUTE two(1, 'a')").await);
    heard.push(q(b, "EXECUTE two").await);
    heard.push(q(b, "DEALLOCATE \"Mixed Case\"").await);
    heard.push(q(a, "DEALLOCATE \"Mixed Case\"").await);
    heard.push(q(a, "DEALLOCATE x").await);
    heard.push(q(b, "DEALLOCATE x").await);
    // A PREPARE and its EXECUTE sent together.
    let mut both = raw::query("PREPARE p1 (int) AS SELECT $1 * 2 AS d");
    both.extend(raw::query("EXECUTE p1(21)"));
    a.write_all(&both).await.unwrap();
    for _ in 0..2 {
        let got = raw::read_to_z(a).await;
        heard.push(format!("{got:?}"));
    }
    heard.push(q(b, "EXECUTE p1(1)").await);
    heard.push(q(a, "EXECUTE p1(2)").await);
    // Dropped and made anew, its EXECUTE sent before the PREPARE's answer.
    heard.push(q(a, "DEALLOCATE p1").await);
    heard.push(q(b, "SELECT 1").await);
    let mut both = raw::query("PREPARE p1 AS SELECT 'anew' AS d");
    both.extend(raw::query("EXECUTE p1"));
    a.write_all(&both).await.unwrap();
    for _ in 0..2 {
        let got = raw::read_to_z(a).await;
        heard.push(format!("{got:?}"));
    }
    // A DEALLOCATE sent behind a statement that fails in a block drops
    // nothing.
    let mut three = raw::query("BEGIN");
    three.extend(raw::query("SELECT 1/0"));
    three.extend(raw::query("DEALLOCATE p1"));
    a.write_all(&three).await.unwrap();
    for _ in 0..3 {
        let got = raw::read_to_z(a).await;
        heard.push(format!("{got:?}"));
    }
    heard.push(q(a, "ROLLBACK").await);
    heard.push(q(b, "SELECT 2").await);
    heard.push(q(a, "EXECUTE p1").await);
    heard.push(q(a, "DEALLOCATE ALL").await);
    heard.push(q(b, "EXECUTE two").await);
    heard
}

/// Close of statement `name` and Sync.
fn close_sync(name: &str) -> Vec<u8> {
    let mut target = vec![b'S'];
    target.extend_from_slice(name.as_bytes());
    target.push(0);
    let mut out = raw::message(b'C', &target);
    out.extend(raw::message(b'S', &[]));
    out
}

#[tokio::test]
async fn both_protocols_share_the_names_as_on_dedicated_connections() {
    let env = pooled(1).await;
    let port = env.pg.port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let direct = mixed_script(&mut a, &mut b).await;
    let port = env.proxy_port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let pooled = mixed_script(&mut a, &mut b).await;
    for (i, (p, d)) in pooled.iter().zip(&direct).enumerate() {
        assert_eq!(p, d, "step {i}");
    }
    assert_eq!(pooled.len(), direct.len());
    let all = direct.join("\n");
    for want in [
        "C42P05|",
        "C26000|",
        "a1 C:SELECT 1|",
        "b two",
        "DEALLOCATE ALL|",
        "anew",
    ] {
        assert!(all.contains(want), "{want} in {all}");
    }
    assert_eq!(pool_column(&env, "sv_pinned").await, "0");
}

/// What still pins: a PREPARE inside a transaction block, or with other
/// statements in one Query; its EXECUTE still answers as direct.
#[tokio::test]
async fn prepare_in_a_transaction_block_or_with_others_pins() {
    let env = pooled(2).await;
    let port = env.proxy_port();
    let mut a = raw::connect_ready(port).await;
    // A statement of the name made and dropped unpinned first.
    assert!(
        q(&mut a, "PREPARE p AS SELECT 'old' AS v")
            .await
            .contains("C:PREPARE|")
    );
    assert!(q(&mut a, "DEALLOCATE p").await.contains("C:DEALLOCATE|"));
    assert_eq!(pool_column(&env, "sv_pinned").await, "0");
    assert!(q(&mut a, "BEGIN").await.contains("BEGIN"));
    assert!(
        q(&mut a, "PREPARE p AS SELECT 'new' AS v")
            .await
            .contains("PREPARE")
    );
    assert!(q(&mut a, "COMMIT").await.contains("COMMIT"));
    assert_eq!(pool_column(&env, "sv_pinned").await, "1");
    let mut b = raw::connect_ready(port).await;
    let both = q(&mut b, "PREPARE m AS SELECT 7; EXECUTE m").await;
    assert!(
        both.contains("C:PREPARE|") && both.contains("C:SELECT 1|"),
        "{both}"
    );
    assert_eq!(pool_column(&env, "sv_pinned").await, "2");
    let run = q(&mut a, "EXECUTE p").await;
    assert!(run.contains("new") && run.contains("SELECT 1"), "{run}");
}

/// A small ORM in the style of PDO's and Rails' statement caches that
/// prepares its statements with SQL's PREPARE and runs them with EXECUTE,
/// many clients in autocommit on a pool of two: every result right,
/// nobody pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orm_that_prepares_with_sql_runs_unpinned_on_a_pool_of_two() {
    let Some(py) = python_with_psycopg() else {
        skip("psycopg not installed");
        return;
    };
    let env = pooled(2).await;
    connect(&env.direct_dsn())
        .await
        .batch_execute("CREATE TABLE orm_users (id int PRIMARY KEY, name text, visits int)")
        .await
        .unwrap();
    let dsn = env.proxy_dsn();
    let out = tokio::task::spawn_blocking(move || run_py(&py, "sql_prepare_orm.py", &[&dsn, "16"]))
        .await
        .unwrap();
    assert!(out.contains("ok 16 clients"), "{out}");
    assert_eq!(pool_column(&env, "sv_pinned").await, "0");
    let clients = env.admin("SHOW CLIENTS").await;
    assert!(
        clients
            .iter()
            .all(|r| r.iter().all(|c| c.as_deref() != Some("SQL PREPARE"))),
        "{clients:?}"
    );
    let kept: u64 = pool_column(&env, "sql_prepares").await.parse().unwrap();
    assert!(kept >= 16 * 4, "PREPAREs kept: {kept}");
}

/// A statement that can't be made again (its table dropped since it was
/// prepared) gives the client the one error EXECUTE gives on a dedicated
/// connection, not that and a 26000.
#[tokio::test]
async fn a_statement_that_cannot_be_made_again_gives_one_error() {
    let env = pooled(1).await;
    let port = env.proxy_port();
    let (mut a, mut b) = raw::two_ready(port).await;
    assert!(
        q(&mut a, "CREATE TABLE sql_prep_gone (x int)")
            .await
            .contains("CREATE TABLE")
    );
    assert!(
        q(&mut a, "PREPARE g AS SELECT x FROM sql_prep_gone")
            .await
            .contains("C:PREPARE")
    );
    // b's DDL leaves the connection to be reset: a's statement is made
    // again before its EXECUTE, and fails.
    assert!(
        q(&mut b, "DROP TABLE sql_prep_gone")
            .await
            .contains("DROP TABLE")
    );
    for _ in 0..2 {
        s_err(&mut a, "EXECUTE g", "42P01").await;
    }
    // In a transaction block, the block fails as it would have.
    assert!(q(&mut a, "BEGIN").await.contains("BEGIN"));
    s_err(&mut a, "EXECUTE g", "42P01").await;
    s_err(&mut a, "SELECT 1", "25P02").await;
    assert!(q(&mut a, "ROLLBACK").await.contains("ROLLBACK"));
    assert!(q(&mut a, "SELECT 2").await.contains("SELECT 1"));
    assert_eq!(pool_column(&env, "sv_pinned").await, "0");
}

/// An EXECUTE of a read leaves nothing on the connection: the next client
/// gets it with no reset, and the statements on it stay to be used again.
#[tokio::test]
async fn an_execute_leaves_only_what_its_statement_leaves() {
    let env = pooled(1).await;
    let port = env.proxy_port();
    let (mut a, mut b) = raw::two_ready(port).await;
    assert!(
        q(&mut a, "PREPARE r (int) AS SELECT $1 AS r")
            .await
            .contains("C:PREPARE|")
    );
    assert!(
        q(&mut b, "PREPARE s AS SELECT 2 AS s")
            .await
            .contains("C:PREPARE|")
    );
    for _ in 0..3 {
        assert!(q(&mut a, "EXECUTE r(1)").await.contains("C:SELECT 1|"));
        assert!(q(&mut b, "EXECUTE s").await.contains("C:SELECT 1|"));
    }
    assert_eq!(pool_column(&env, "sql_prepares_made_again").await, "0");
    let reasons = pool_column(&env, "reset_reasons").await;
    assert!(!reasons.contains("EXECUTE"), "{reasons}");
    // Arguments that move a sequence have it reset after.
    connect(&env.direct_dsn())
        .await
        .batch_execute("CREATE SEQUENCE sql_seq")
        .await
        .unwrap();
    assert!(
        q(&mut a, "EXECUTE r(nextval('sql_seq')::int)")
            .await
            .contains("C:SELECT 1|")
    );
    assert!(q(&mut b, "EXECUTE s").await.contains("C:SELECT 1|"));
    let reasons = pool_column(&env, "reset_reasons").await;
    assert!(!reasons.is_empty(), "{reasons}");
}

/// A's statements go stale under it (b drops and makes again the table
/// they read): what a dedicated connection answers, error positions
/// included, where each EXECUTE's statement must be made again and fails.
async fn stale_script(a: &mut TcpStream, b: &mut TcpStream) -> Vec<String> {
    let mut heard = Vec::new();
    heard.push(q(a, "CREATE TABLE sql_stale (x int)").await);
    heard.push(
        q(
            a,
            "  PREPARE g (int) AS SELECT x + 0 AS x FROM sql_stale WHERE x = $1",
        )
        .await,
    );
    heard.push(q(a, "PREPARE h AS SELECT 1 AS one").await);
    heard.push(q(b, "DROP TABLE sql_stale").await);
    heard.push(q(a, "EXECUTE g(1)").await);
    heard.push(q(a, "SELECT 1 AS before; EXECUTE g(1)").await);
    heard.push(q(a, "SELECT 1/0; EXECUTE g(1)").await);
    heard.push(q(a, "EXECUTE h; EXECUTE g(1); EXECUTE h").await);
    heard.push(q(a, "BEGIN").await);
    heard.push(q(a, "EXECUTE g(1)").await);
    heard.push(q(a, "SELECT 1").await);
    heard.push(q(a, "ROLLBACK").await);
    // In a block the server has begun, behind another statement.
    heard.push(q(a, "BEGIN").await);
    heard.push(q(a, "SELECT 1").await);
    heard.push(q(a, "SELECT 2 AS before; EXECUTE g(1)").await);
    heard.push(q(a, "ROLLBACK").await);
    // Made again there, under b's statement of the same name.
    heard.push(q(b, "PREPARE h AS SELECT 'b' AS bee").await);
    heard.push(q(a, "BEGIN").await);
    heard.push(q(a, "SELECT 1").await);
    heard.push(q(a, "SELECT 2 AS before; EXECUTE h").await);
    heard.push(q(a, "EXECUTE h").await);
    heard.push(q(a, "COMMIT").await);
    heard.push(q(b, "EXECUTE h").await);
    // A DEALLOCATE in a failed block deallocates nothing.
    heard.push(q(a, "BEGIN").await);
    heard.push(q(a, "SELECT 1/0").await);
    heard.push(q(a, "DEALLOCATE h").await);
    heard.push(q(a, "ROLLBACK").await);
    heard.push(q(b, "SELECT 2").await);
    heard.push(q(a, "EXECUTE h").await);
    // The table back: the statement works again.
    heard.push(q(b, "CREATE TABLE sql_stale (x int)").await);
    heard.push(q(b, "INSERT INTO sql_stale VALUES (1)").await);
    heard.push(q(a, "EXECUTE g(1)").await);
    heard.push(q(a, "DROP TABLE sql_stale").await);
    heard
}

#[tokio::test]
async fn stale_statements_answer_as_on_dedicated_connections() {
    let env = pooled(1).await;
    let port = env.pg.port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let direct = stale_script(&mut a, &mut b).await;
    let port = env.proxy_port();
    let (mut a, mut b) = raw::two_ready(port).await;
    let pooled = stale_script(&mut a, &mut b).await;
    for (i, (p, d)) in pooled.iter().zip(&direct).enumerate() {
        assert_eq!(p, d, "step {i}");
    }
    assert_eq!(pooled.len(), direct.len());
    let all = direct.join("\n");
    for want in ["C42P01|", "P45|", "C22012|", "C25P02|", "T:", "SELECT 1|"] {
        assert!(all.contains(want), "{want} in {all}");
    }
    assert_eq!(pool_column(&env, "sv_pinned").await, "0");
}

/// `sql` answers exactly one ErrorResponse, of SQLSTATE `code`, then
/// ReadyForQuery.
async fn s_err(s: &mut TcpStream, sql: &str, code: &str) {
    s.write_all(&raw::query(sql)).await.unwrap();
    let got = raw::read_to_z(s).await;
    let tags: Vec<char> = got.iter().map(|(t, _)| *t as char).collect();
    assert_eq!(tags, ['E', 'Z'], "{sql}: {got:?}");
    assert_eq!(raw::field(&got[0].1, b'C').as_deref(), Some(code), "{sql}");
}
