//! `[pool] mode = "transaction"`: many clients share a few server
//! connections, each holding one only while its transaction runs; state a
//! connection can't carry to another pins its session; no client sees
//! another's state.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

use onetrip_tests::{Env, PgOptions, connect, raw, simple_rows};
use tokio::io::AsyncWriteExt;
use tokio_postgres::{NoTls, error::SqlState};

const WAIT: Duration = Duration::from_secs(10);

async fn pooled(size: usize) -> Env {
    Env::start_with(PgOptions::default(), move |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = size;
    })
    .await
}

/// Client backends on the server, besides the asker's own.
async fn server_backends(direct: &tokio_postgres::Client) -> i64 {
    let sql = "SELECT count(*) FROM pg_stat_activity \
               WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
    direct.query_one(sql, &[]).await.unwrap().get(0)
}

async fn one(c: &tokio_postgres::Client, sql: &str) -> Option<String> {
    let rows = simple_rows(&c.simple_query(sql).await.unwrap());
    rows[0][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_clients_share_five_connections() {
    let env = pooled(5).await;
    let direct = connect(&env.direct_dsn()).await;
    direct
        .batch_execute("CREATE TABLE pool_t (client int, i int)")
        .await
        .unwrap();
    let most = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let (most, done) = (most.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                let n = server_backends(&direct).await;
                most.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            direct
        })
    };
    let dsn = env.proxy_dsn();
    let mut clients = Vec::new();
    for client in 0..50i32 {
        let dsn = dsn.clone();
        clients.push(tokio::spawn(async move {
            let mut c = connect(&dsn).await;
            for i in 0..10i32 {
                // A transaction, extended protocol (named statements, closed
                // after use).
                let tx = c.transaction().await.unwrap();
                tx.execute("INSERT INTO pool_t VALUES ($1, $2)", &[&client, &i])
                    .await
                    .unwrap();
                let n: i64 = tx
                    .query_one("SELECT count(*) FROM pool_t WHERE client = $1", &[&client])
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!(n, i64::from(i) + 1, "its own rows, in its transaction");
                tx.commit().await.unwrap();
                // Autocommit statements, both protocols.
                let v: i32 = c
                    .query_one("SELECT $1::int * 2", &[&i])
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!(v, i * 2);
                let sql = format!("SELECT {client} + {i}");
                assert_eq!(one(&c, &sql).await, Some((client + i).to_string()));
                // A transaction that rolls back leaves nothing.
                c.batch_execute("BEGIN; INSERT INTO pool_t VALUES (-1, -1); ROLLBACK")
                    .await
                    .unwrap();
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let direct = watch.await.unwrap();
    let rows: i64 = direct
        .query_one("SELECT count(*) FROM pool_t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 500);
    let most = most.load(Ordering::Relaxed);
    assert!(
        (1..=5).contains(&most),
        "server connections at most pool_size: {most}"
    );
    let pools = env.admin("SHOW POOLS").await;
    assert_eq!(pools.len(), 1, "{pools:?}");
    assert_eq!(pools[0][8].as_deref(), Some("transaction"));
}

#[tokio::test]
async fn session_sets_follow_their_client_and_never_leak() {
    let env = pooled(2).await;
    let dsn = env.proxy_dsn();
    let a = connect(&dsn).await;
    let b = connect(&dsn).await;
    let others = [connect(&dsn).await, connect(&dsn).await];
    a.batch_execute("SET statement_timeout = '12345'")
        .await
        .unwrap();
    b.batch_execute("SET application_name = 'bee'; ")
        .await
        .unwrap();
    // A SET that fails changes nothing.
    assert!(a.batch_execute("SET work_mem = 'lots'").await.is_err());
    for round in 0..10 {
        for o in &others {
            assert_eq!(one(o, "SHOW statement_timeout").await.as_deref(), Some("0"));
            assert_eq!(one(o, "SHOW application_name").await.as_deref(), Some(""));
        }
        let mine = one(&a, "SHOW statement_timeout").await;
        assert_eq!(mine.as_deref(), Some("12345ms"), "round {round}");
        assert_eq!(one(&a, "SHOW work_mem").await.as_deref(), Some("4MB"));
        let theirs = one(&b, "SHOW application_name").await;
        assert_eq!(theirs.as_deref(), Some("bee"), "round {round}");
        assert_eq!(
            one(&b, "SHOW statement_timeout").await.as_deref(),
            Some("0")
        );
    }
    a.batch_execute("RESET statement_timeout").await.unwrap();
    b.batch_execute("SET application_name TO DEFAULT")
        .await
        .unwrap();
    for _ in 0..4 {
        assert_eq!(
            one(&a, "SHOW statement_timeout").await.as_deref(),
            Some("0")
        );
        assert_eq!(one(&b, "SHOW application_name").await.as_deref(), Some(""));
    }
    let pools = env.admin("SHOW POOLS").await;
    assert_eq!(pools[0][6].as_deref(), Some("0"), "sv_pinned: {pools:?}");
}

#[tokio::test]
async fn a_setting_that_cannot_be_replayed_pins_and_stays_its_own() {
    let env = pooled(2).await;
    let dsn = env.proxy_dsn();
    let a = connect(&dsn).await;
    a.batch_execute("SELECT set_config('statement_timeout', '12345', false)")
        .await
        .unwrap();
    let others = [connect(&dsn).await, connect(&dsn).await];
    for round in 0..10 {
        for o in &others {
            assert_eq!(one(o, "SHOW statement_timeout").await.as_deref(), Some("0"));
        }
        assert_eq!(
            one(&a, "SHOW statement_timeout").await.as_deref(),
            Some("12345ms"),
            "round {round}"
        );
    }
    let pools = env.admin("SHOW POOLS").await;
    assert_eq!(pools[0][6].as_deref(), Some("1"), "sv_pinned: {pools:?}");
    let clients = env.admin("SHOW CLIENTS").await;
    assert!(
        clients
            .iter()
            .any(|r| r.last().cloned().flatten().as_deref() == Some("set_config(..., false)")),
        "{clients:?}"
    );
}

#[tokio::test]
async fn a_temp_table_pins() {
    let env = pooled(2).await;
    let dsn = env.proxy_dsn();
    let a = connect(&dsn).await;
    let b = connect(&dsn).await;
    a.batch_execute("CREATE TEMP TABLE tt (x int); INSERT INTO tt VALUES (7)")
        .await
        .unwrap();
    for _ in 0..10 {
        assert_eq!(one(&a, "SELECT x FROM tt").await.as_deref(), Some("7"));
        let theirs = one(&b, "SELECT to_regclass('pg_temp.tt')::text").await;
        assert_eq!(theirs, None, "another client sees no temp table");
    }
}

#[tokio::test]
async fn a_listening_client_gets_the_notification() {
    let env = pooled(2).await;
    let mut a = raw::connect_ready(env.proxy_port()).await;
    a.write_all(&raw::query("LISTEN pool_chan")).await.unwrap();
    raw::read_to_z(&mut a).await;
    let b = connect(&env.proxy_dsn()).await;
    for _ in 0..5 {
        b.batch_execute("SELECT 1").await.unwrap();
    }
    b.batch_execute("NOTIFY pool_chan, 'hello'").await.unwrap();
    let (t, body) = raw::read_message(&mut a, WAIT).await.expect("notification");
    assert_eq!(t, b'A', "NotificationResponse");
    assert!(body.windows(5).any(|w| w == b"hello"));
}

#[tokio::test]
async fn a_held_pool_makes_the_next_client_wait_then_fail() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 1;
        c.pool.query_wait_timeout = Duration::from_millis(300);
    })
    .await;
    let dsn = env.proxy_dsn();
    let a = connect(&dsn).await;
    a.batch_execute("BEGIN; SELECT 1").await.unwrap();
    // Logged in with the pool's greeting; its first query waits.
    let b = connect(&dsn).await;
    let err = b
        .simple_query("SELECT 1")
        .await
        .expect_err("the pool's one connection is in a transaction");
    let db = err.as_db_error().expect("the proxy's error");
    assert_eq!(db.code(), &SqlState::PROTOCOL_VIOLATION);
    assert_eq!(db.severity(), "FATAL");
    assert!(db.message().contains("query_wait_timeout"), "{db}");
    assert!(db.message().contains("postgres/postgres"), "{db}");
    a.batch_execute("COMMIT").await.unwrap();
    let c = connect(&dsn).await;
    assert_eq!(one(&c, "SELECT 1").await.as_deref(), Some("1"));
}

/// Once a pool has opened a connection, a login is answered with what it
/// greeted onetrip with, as a dedicated connection greets its client, and
/// takes no connection: clients log in while every connection is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_are_greeted_without_a_connection() {
    let env = pooled(1).await;
    let greeting = |msgs: &[(u8, Vec<u8>)]| -> Vec<(u8, Vec<u8>)> {
        // The key is each client's own.
        msgs.iter().filter(|(t, _)| *t != b'K').cloned().collect()
    };
    let (_direct, direct) = login(env.pg.port()).await;
    let (mut a, first) = login(env.proxy_port()).await;
    assert_eq!(greeting(&first), greeting(&direct));
    a.write_all(&raw::query("BEGIN; SELECT 1")).await.unwrap();
    raw::read_to_z(&mut a).await;
    let mut waiting = Vec::new();
    for _ in 0..10 {
        let (s, msgs) = tokio::time::timeout(Duration::from_secs(2), login(env.proxy_port()))
            .await
            .expect("logged in while the pool's one connection is taken");
        assert_eq!(greeting(&msgs), greeting(&direct));
        let keys: Vec<_> = msgs.iter().filter(|(t, _)| *t == b'K').collect();
        assert_eq!(keys.len(), 1);
        waiting.push(s);
    }
    a.write_all(&raw::query("COMMIT")).await.unwrap();
    raw::read_to_z(&mut a).await;
    for s in &mut waiting {
        s.write_all(&raw::query("SELECT 1")).await.unwrap();
        let answer = raw::read_to_z(s).await;
        assert_eq!(raw::errors(&answer), vec![]);
        assert_eq!(rows_of(&answer).len(), 1);
    }
}

#[tokio::test]
async fn a_client_that_dies_mid_transaction_leaves_nothing() {
    let env = pooled(1).await;
    let direct = connect(&env.direct_dsn()).await;
    direct
        .batch_execute("CREATE TABLE die_t (x int)")
        .await
        .unwrap();
    let mut a = raw::connect_ready(env.proxy_port()).await;
    a.write_all(&raw::query(
        "BEGIN; INSERT INTO die_t VALUES (1); SELECT pg_backend_pid()",
    ))
    .await
    .unwrap();
    let answer = raw::read_to_z(&mut a).await;
    assert_eq!(answer.last().map(|(_, b)| b.as_slice()), Some(&b"T"[..]));
    let pid = rows_of(&answer);
    drop(a);
    // The same startup packet: the pool's one connection, rolled back.
    let mut b = raw::connect_ready(env.proxy_port()).await;
    b.write_all(&raw::query("SELECT pg_backend_pid()"))
        .await
        .unwrap();
    assert_eq!(
        rows_of(&raw::read_to_z(&mut b).await),
        pid,
        "the same backend"
    );
    for _ in 0..3 {
        b.write_all(&raw::query("SELECT count(*) FROM die_t"))
            .await
            .unwrap();
        let got = raw::read_to_z(&mut b).await;
        assert_eq!(rows_of(&got), ["0"], "{got:?}");
        let status = got.last().map(|(_, b)| b.clone());
        assert_eq!(
            status.as_deref(),
            Some(&b"I"[..]),
            "no transaction left open"
        );
    }
    let n: i64 = direct
        .query_one("SELECT count(*) FROM die_t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_the_right_query() {
    let env = pooled(2).await;
    let dsn = env.proxy_dsn();
    let a = connect(&dsn).await;
    let b = connect(&dsn).await;
    // Both move between the pool's connections a few times.
    for _ in 0..5 {
        a.batch_execute("SELECT 1").await.unwrap();
        b.batch_execute("SELECT 1").await.unwrap();
    }
    let token = a.cancel_token();
    let b_runs = tokio::spawn(async move { b.batch_execute("SELECT pg_sleep(1.5)").await });
    let a_runs = tokio::spawn(async move { a.batch_execute("SELECT pg_sleep(30)").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel_query(NoTls).await.unwrap();
    let a_err = a_runs.await.unwrap().expect_err("a's query is cancelled");
    assert_eq!(a_err.code(), Some(&SqlState::QUERY_CANCELED));
    b_runs.await.unwrap().expect("b's query is not");
}

/// Parse, Bind, Execute, Sync of the unnamed statement, or parts of it.
fn parse(sql: &str) -> Vec<u8> {
    let mut body = vec![0u8];
    body.extend_from_slice(sql.as_bytes());
    body.extend_from_slice(&[0, 0, 0]);
    raw::message(b'P', &body)
}

fn bind_execute_sync() -> Vec<u8> {
    let mut out = raw::message(b'B', &[0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend(raw::message(b'E', &[0, 0, 0, 0, 0]));
    out.extend(raw::message(b'S', &[]));
    out
}

fn rows_of(msgs: &[(u8, Vec<u8>)]) -> Vec<String> {
    msgs.iter()
        .filter(|(t, _)| *t == b'D')
        .map(|(_, b)| String::from_utf8_lossy(&b[6..]).into_owned())
        .collect()
}

#[tokio::test]
async fn the_unnamed_statement_follows_its_client() {
    let env = pooled(1).await;
    let port = env.proxy_port();
    let mut a = raw::connect_ready(port).await;
    let mut b = raw::connect_ready(port).await;
    let mut msg = parse("SELECT 'mine'");
    msg.extend(raw::message(b'S', &[]));
    a.write_all(&msg).await.unwrap();
    raw::read_to_z(&mut a).await;
    // The one connection runs the other client's unnamed statement now.
    let mut theirs = parse("SELECT 'theirs'");
    theirs.extend(bind_execute_sync());
    b.write_all(&theirs).await.unwrap();
    assert_eq!(rows_of(&raw::read_to_z(&mut b).await), ["theirs"]);
    for _ in 0..3 {
        a.write_all(&bind_execute_sync()).await.unwrap();
        let got = raw::read_to_z(&mut a).await;
        assert_eq!(rows_of(&got), ["mine"], "{got:?}");
        b.write_all(&theirs).await.unwrap();
        assert_eq!(rows_of(&raw::read_to_z(&mut b).await), ["theirs"]);
    }
    // A client that never made one gets the server's own error, not
    // another client's statement.
    let mut c = raw::connect_ready(port).await;
    b.write_all(&theirs).await.unwrap();
    raw::read_to_z(&mut b).await;
    c.write_all(&bind_execute_sync()).await.unwrap();
    let got = raw::read_to_z(&mut c).await;
    assert!(rows_of(&got).is_empty(), "{got:?}");
    let errors = raw::errors(&got);
    assert_eq!(errors.len(), 1, "{got:?}");
    assert_eq!(errors[0].1, "26000", "{errors:?}");
}

#[tokio::test]
async fn session_mode_is_the_default() {
    let env = Env::start().await;
    let a = connect(&env.proxy_dsn()).await;
    a.batch_execute("SELECT 1").await.unwrap();
    assert!(env.admin("SHOW POOLS").await.is_empty());
    let clients = env.admin("SHOW CLIENTS").await;
    assert!(
        clients.iter().any(|r| r[14].as_deref() == Some("session")),
        "{clients:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_between_transactions_outlive_an_upstream_restart() {
    let mut env = pooled(2).await;
    let dsn = env.proxy_dsn();
    let a = connect(&dsn).await;
    let b = connect(&dsn).await;
    for _ in 0..3 {
        assert_eq!(one(&a, "SELECT 1").await.as_deref(), Some("1"));
        assert_eq!(one(&b, "SELECT 2").await.as_deref(), Some("2"));
    }
    // Both hold no connection now: the pool's idle ones die with the
    // server, and are found dead and replaced when taken.
    let pg = &mut env.pg;
    tokio::task::block_in_place(|| pg.restart()).expect("restart");
    for _ in 0..3 {
        assert_eq!(one(&a, "SELECT 1").await.as_deref(), Some("1"));
        assert_eq!(one(&b, "SELECT 2").await.as_deref(), Some("2"));
    }
    let pools = env.admin("SHOW POOLS").await;
    let servers: usize = [4, 5]
        .iter()
        .map(|&i| pools[0][i].as_deref().unwrap().parse::<usize>().unwrap())
        .sum();
    assert!(servers <= 2, "{pools:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_idle_connections_are_opened_and_kept() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 3;
        c.pool.min_idle = 2;
        // Idle connections past it are closed, but for min_idle of them.
        c.upstream.reuse_idle_timeout = Duration::from_millis(400);
    })
    .await;
    let direct = connect(&env.direct_dsn()).await;
    let a = connect(&env.proxy_dsn()).await;
    assert_eq!(one(&a, "SELECT 1").await.as_deref(), Some("1"));
    let mut seen = 0;
    for _ in 0..100 {
        seen = server_backends(&direct).await;
        if seen == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, 2, "min_idle connections open");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        server_backends(&direct).await,
        2,
        "and kept past the idle timeout"
    );
    let pools = env.admin("SHOW POOLS").await;
    assert_eq!(pools[0][5].as_deref(), Some("2"), "sv_idle: {pools:?}");
    assert_eq!(one(&a, "SELECT 2").await.as_deref(), Some("2"));
}

#[tokio::test]
async fn a_database_its_clients_left_can_be_dropped() {
    let env = pooled(3).await;
    let direct = connect(&env.direct_dsn()).await;
    direct.batch_execute("CREATE DATABASE gone").await.unwrap();
    let dsn = env.proxy_dsn().replace("dbname=postgres", "dbname=gone");
    {
        let c = connect(&dsn).await;
        assert_eq!(one(&c, "SELECT 1").await.as_deref(), Some("1"));
    }
    // Its pool's idle connection is closed when a client asks for the
    // drop, as the client's own connection would have been.
    let c = connect(&env.proxy_dsn()).await;
    c.batch_execute("DROP DATABASE gone").await.unwrap();
}

/// A raw client's login: its stream, and what it was answered up to its
/// ReadyForQuery.
async fn login(port: u16) -> (tokio::net::TcpStream, Vec<(u8, Vec<u8>)>) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(&raw::startup("postgres", "postgres"))
        .await
        .unwrap();
    let msgs = raw::read_to_z(&mut s).await;
    assert_eq!(raw::errors(&msgs), vec![], "startup failed");
    (s, msgs)
}

/// The process id in the BackendKeyData a fresh raw client gets.
async fn key_pid(port: u16) -> (tokio::net::TcpStream, i32) {
    let (s, msgs) = login(port).await;
    let (_, key) = msgs
        .iter()
        .find(|(t, _)| *t == b'K')
        .expect("BackendKeyData");
    (s, i32::from_be_bytes(key[..4].try_into().unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_clients_pid_is_no_backends() {
    let env = pooled(1).await;
    // One connection: both clients log in on the same backend.
    let (mut a, a_pid) = key_pid(env.proxy_port()).await;
    let (mut b, b_pid) = key_pid(env.proxy_port()).await;
    assert!(a_pid < 0 && b_pid < 0, "made-up pids: {a_pid} {b_pid}");
    assert_ne!(a_pid, b_pid, "each client its own");
    // Ending "a's backend" by its pid ends nobody, b included.
    let sql = format!("SELECT pg_terminate_backend({a_pid})");
    b.write_all(&raw::query(&sql)).await.unwrap();
    let answer = raw::read_to_z(&mut b).await;
    assert_eq!(raw::errors(&answer), vec![]);
    let row = answer.iter().find(|(t, _)| *t == b'D').expect("a row");
    assert_eq!(&row.1[row.1.len() - 1..], b"f", "no backend has that pid");
    for c in [&mut a, &mut b] {
        c.write_all(&raw::query("SELECT 1")).await.unwrap();
        assert_eq!(raw::errors(&raw::read_to_z(c).await), vec![]);
    }
    // A client with a backend of its own still gets that backend's pid.
    let direct = connect(&env.direct_dsn()).await;
    let session = env.start_proxy(|_| {}).await;
    let (mut s, s_pid) = key_pid(session.local_addr().port()).await;
    s.write_all(&raw::query("SELECT 1")).await.unwrap();
    raw::read_to_z(&mut s).await;
    let sql = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {s_pid}");
    let n: i64 = direct.query_one(&sql, &[]).await.unwrap().get(0);
    assert_eq!(n, 1, "session mode: the backend's own pid");
}

/// A client waiting for a connection stays in its worker's epoll: what
/// it sends meanwhile, and its leaving, are heard when it gets one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_speaks_while_it_waits_is_heard() {
    let env = pooled(1).await;
    let dsn = env.proxy_dsn();
    let a = connect(&dsn).await;
    let mut b = raw::connect_ready(env.proxy_port()).await;
    let mut gone = raw::connect_ready(env.proxy_port()).await;
    a.batch_execute("BEGIN; SELECT 1").await.unwrap();
    b.write_all(&raw::query("SELECT 'first'")).await.unwrap();
    gone.write_all(&raw::query("SELECT 'never'")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Both wait in line now; one says more, the other leaves.
    b.write_all(&raw::query("SELECT 'second'")).await.unwrap();
    drop(gone);
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.batch_execute("COMMIT").await.unwrap();
    let mut rows = Vec::new();
    for _ in 0..2 {
        let answer = raw::read_to_z(&mut b).await;
        assert_eq!(raw::errors(&answer), vec![]);
        let row = answer.iter().find(|(t, _)| *t == b'D').expect("a row");
        rows.push(String::from_utf8_lossy(&row.1[6..]).into_owned());
    }
    assert_eq!(rows, ["first", "second"]);
    assert_eq!(
        one(&a, "SELECT 'a again'").await.as_deref(),
        Some("a again")
    );
}

/// A BEGIN is held and answered with no server connection, and so is the
/// end of a transaction that never reached the server: a client gets its
/// answers while another holds the pool's only connection, and waits only
/// when its transaction needs the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_begin_takes_no_connection() {
    let env = pooled(1).await;
    // One startup packet for both: one pool.
    let mut a = raw::connect_ready(env.proxy_port()).await;
    let mut b = raw::connect_ready(env.proxy_port()).await;
    let short = Duration::from_millis(500);
    let mut extended = parse("BEGIN");
    extended.extend(bind_execute_sync());
    let mut rollback = parse("ROLLBACK");
    rollback.extend(bind_execute_sync());
    // Both forms: a Query, and the extended group drivers send.
    for (begin, end) in [
        (raw::query("BEGIN"), raw::query("COMMIT")),
        (extended, rollback),
    ] {
        a.write_all(&raw::query("BEGIN; SELECT 1")).await.unwrap();
        raw::read_to_z(&mut a).await;
        // A transaction that never needed the server needs no connection.
        for msg in [&begin, &end] {
            b.write_all(msg).await.unwrap();
            let answer = tokio::time::timeout(short, raw::read_to_z(&mut b)).await;
            let answer = answer.expect("answered while the connection is taken");
            assert_eq!(raw::errors(&answer), vec![]);
        }
        b.write_all(&begin).await.unwrap();
        let answer = tokio::time::timeout(short, raw::read_to_z(&mut b)).await;
        let answer = answer.expect("BEGIN answered while the connection is taken");
        assert_eq!(raw::errors(&answer), vec![]);
        assert_eq!(answer.last().map(|m| m.1.clone()), Some(b"T".to_vec()));
        // Its statement waits for the connection, then runs in its own
        // transaction, begun just before it.
        let sql = "SELECT now() = statement_timestamp(), txid_current() > 0";
        b.write_all(&raw::query(sql)).await.unwrap();
        let waiting = tokio::time::timeout(short, raw::read_to_z(&mut b)).await;
        assert!(waiting.is_err(), "no connection until a's transaction ends");
        a.write_all(&raw::query("COMMIT")).await.unwrap();
        raw::read_to_z(&mut a).await;
        let answer = raw::read_to_z(&mut b).await;
        assert_eq!(raw::errors(&answer), vec![]);
        assert_eq!(rows_of(&answer).len(), 1);
        assert_eq!(answer.last().map(|m| m.1.clone()), Some(b"T".to_vec()));
        b.write_all(&raw::query("COMMIT")).await.unwrap();
        let answer = raw::read_to_z(&mut b).await;
        assert_eq!(answer.last().map(|m| m.1.clone()), Some(b"I".to_vec()));
    }
}

/// The client runs on the backend `pid`, which listens to no channel.
async fn assert_same_backend_listening_to_nothing(
    c: &tokio_postgres::Client,
    pid: &Option<String>,
) {
    assert_eq!(
        &one(c, "SELECT pg_backend_pid()").await,
        pid,
        "the same backend"
    );
    let channels = "SELECT count(*) FROM pg_listening_channels()";
    assert_eq!(one(c, channels).await.as_deref(), Some("0"));
}

/// A pinned client that leaves cleanly, pinned only by what DISCARD ALL
/// undoes, leaves its connection reset in the pool: the next client gets
/// the same backend and none of the first one's state. Pinned by what it
/// does not undo (a DO block may have done anything), the connection is
/// closed.
#[tokio::test]
async fn a_pinned_connection_is_reset_for_the_next_client() {
    let env = pooled(1).await;
    let dsn = env.proxy_dsn();
    let direct = connect(&env.direct_dsn()).await;
    let zone = one(&direct, "SHOW TimeZone").await;
    let a = connect(&dsn).await;
    a.batch_execute(
        "LISTEN pinned_chan; CREATE TEMP TABLE tt (x int); \
         SELECT pg_advisory_lock(7); SET TIME ZONE 'Pacific/Chatham'",
    )
    .await
    .unwrap();
    let pid = one(&a, "SELECT pg_backend_pid()").await;
    drop(a);
    let b = connect(&dsn).await;
    assert_same_backend_listening_to_nothing(&b, &pid).await;
    assert_eq!(
        one(&b, "SELECT to_regclass('pg_temp.tt')::text").await,
        None
    );
    let locks = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'";
    assert_eq!(one(&b, locks).await.as_deref(), Some("0"));
    assert_eq!(one(&b, "SHOW TimeZone").await, zone);
    // Pinned, and gone inside a failed transaction block: rolled back, then
    // reset.
    drop(b);
    let mut raw_b = raw::connect_ready(env.proxy_port()).await;
    raw_b
        .write_all(&raw::query("LISTEN pinned_chan; BEGIN; SELECT 1/0"))
        .await
        .unwrap();
    let got = raw::read_to_z(&mut raw_b).await;
    assert_eq!(got.last().map(|(_, s)| s.as_slice()), Some(&b"E"[..]));
    drop(raw_b);
    let b = connect(&dsn).await;
    assert_same_backend_listening_to_nothing(&b, &pid).await;
    // A DO block: not reset, not reused.
    b.batch_execute("LISTEN x; DO $$BEGIN PERFORM 1; END$$")
        .await
        .unwrap();
    drop(b);
    let c = connect(&dsn).await;
    assert_ne!(
        one(&c, "SELECT pg_backend_pid()").await,
        pid,
        "a new backend"
    );
    let rows = env.admin("SHOW POOLS").await;
    assert_eq!(
        rows[0][6].as_deref(),
        Some("0"),
        "nothing pinned now: {rows:?}"
    );
}
