//! `[upstream] reuse`: an upstream connection kept after its client leaves
//! serves the next client with the same startup packet, reset as a new
//! session would be; a connection in any doubtful state is closed instead.

use std::time::Duration;

use onetrip_tests::{Env, PgOptions, cancel_a_sleep, connect, process::ProxyProcess, raw};
use tokio::{io::AsyncWriteExt, net::TcpStream};
use tokio_postgres::{Client, error::SqlState};

const CLI: &str = env!("CARGO_BIN_EXE_onetrip-cli");
const WAIT: Duration = Duration::from_secs(10);

fn reuse_on(c: &mut onetrip::Config) {
    c.upstream.reuse = true;
}

/// Waits until every session has closed, then returns how many upstream
/// connections are kept.
async fn kept_after_close(env: &Env) -> usize {
    env.settle(0).await;
    // The reset runs before the session counts as closed; a little more
    // for the count to be read after it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    env.proxy().kept_upstreams()
}

/// A raw trust-auth startup to `port`: the stream and the greeting, with
/// BackendKeyData's contents blanked (they differ per backend).
async fn greet(port: u16) -> (TcpStream, Vec<(u8, Vec<u8>)>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&raw::startup("postgres", "postgres"))
        .await
        .unwrap();
    let mut got = Vec::new();
    loop {
        let (t, body) = raw::read_message(&mut s, WAIT).await.expect("greeting");
        assert_ne!(t, b'E', "startup failed: {:?}", raw::fields(&body));
        got.push((t, if t == b'K' { Vec::new() } else { body }));
        if t == b'Z' {
            return (s, got);
        }
    }
}

/// The text values of a simple query's rows, and its ParameterStatus
/// messages; panics on an error.
async fn query(s: &mut TcpStream, sql: &str) -> (Vec<Vec<Option<String>>>, Vec<Vec<u8>>) {
    s.write_all(&raw::query(sql)).await.unwrap();
    let (mut rows, mut params) = (Vec::new(), Vec::new());
    loop {
        let (t, body) = raw::read_message(s, WAIT).await.expect("answer");
        match t {
            b'E' => panic!("{sql}: {:?}", raw::fields(&body)),
            b'S' => params.push(body),
            b'D' => rows.push(data_row(&body)),
            b'Z' => return (rows, params),
            _ => {}
        }
    }
}

fn data_row(body: &[u8]) -> Vec<Option<String>> {
    let n = u16::from_be_bytes([body[0], body[1]]) as usize;
    let mut at = 2;
    (0..n)
        .map(|_| {
            let len = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
            at += 4;
            (len >= 0).then(|| {
                let v = String::from_utf8_lossy(&body[at..at + len as usize]).into_owned();
                at += len as usize;
                v
            })
        })
        .collect()
}

/// Runs the count query `sql` until it answers `n` (up to 5 s); its last answer.
async fn count_until(c: &Client, sql: &str, n: i64) -> i64 {
    let mut got = -1;
    for _ in 0..250 {
        got = c.query_one(sql, &[]).await.unwrap().get(0);
        if got == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    got
}

async fn backend_pid(c: &Client) -> i32 {
    c.query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

async fn terminate(mut s: TcpStream) {
    s.write_all(&raw::message(b'X', &[])).await.unwrap();
}

/// Everything DISCARD ALL resets, as one row (the backend pid first).
const STATE: &str = "select pg_backend_pid()::text, current_setting('work_mem'), \
     current_setting('application_name'), current_setting('DateStyle'), \
     (select count(*) from pg_prepared_statements)::text, \
     (select count(*) from pg_listening_channels())::text, \
     (select count(*) from pg_locks where locktype = 'advisory' and pid = pg_backend_pid())::text, \
     (select count(*) from pg_cursors)::text, \
     (to_regclass('pg_temp.t') is null)::text, current_user::text, \
     session_user::text";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_is_reset_and_greets_like_a_new_one() {
    let env = Env::start_with(PgOptions::default(), reuse_on).await;
    let (mut a, _) = greet(env.proxy_port()).await;
    let pid_a = query(&mut a, STATE).await.0[0][0].clone();
    // Everything DISCARD ALL resets, including two settings the server
    // reports to the client (so the next greeting must carry them reset).
    let (_, reported) = query(
        &mut a,
        "create temp table t(x int); set work_mem = '7MB'; \
         set application_name = 'first'; set DateStyle = 'SQL, DMY'; \
         prepare p as select 1; listen ch; select pg_advisory_lock(42); \
         create temp sequence s; select nextval('s'); \
         declare c cursor with hold for select 1; \
         create role other; set role other",
    )
    .await;
    assert!(
        reported.len() >= 2,
        "application_name and DateStyle reported"
    );
    terminate(a).await;
    env.wait_kept(1).await;

    let (mut b, proxied) = greet(env.proxy_port()).await;
    let (mut d, direct) = greet(env.pg.port()).await;
    assert_eq!(proxied, direct, "the greeting is a new session's");
    let (b_state, _) = query(&mut b, STATE).await;
    let (d_state, _) = query(&mut d, STATE).await;
    assert_eq!(
        b_state[0][0], pid_a,
        "the same backend served the second client"
    );
    assert_eq!(b_state[0][1..], d_state[0][1..], "reset as a new session");
    // Its sequence state went too: currval needs a nextval first.
    b.write_all(&raw::query("select currval('s')"))
        .await
        .unwrap();
    let (t, body) = raw::read_message(&mut b, WAIT).await.unwrap();
    assert_eq!(
        (t, raw::field(&body, b'C').as_deref()),
        (b'E', Some("42P01"))
    );
    assert_eq!(env.proxy().stats().total().reused_upstreams, 1);
    assert_eq!(
        env.proxy().kept_upstreams(),
        0,
        "taken by the second client"
    );

    // Greeted once from what the server reported, the next client is
    // greeted from what it reports now: a default changed under the
    // connection survives its reset.
    let (t, _) = raw::read_message(&mut b, WAIT).await.unwrap();
    assert_eq!(t, b'Z');
    query(&mut b, "alter system set DateStyle = 'SQL, DMY'").await;
    let mut reported = query(&mut b, "select pg_reload_conf()").await.1;
    for _ in 0..100 {
        if !reported.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        reported.extend(query(&mut b, "select 1").await.1);
    }
    assert!(!reported.is_empty(), "the new default reported");
    terminate(b).await;
    env.wait_kept(1).await;
    let (_c, proxied) = greet(env.proxy_port()).await;
    let (_e, direct) = greet(env.pg.port()).await;
    assert_eq!(proxied, direct, "the third greeting is a new session's too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_in_doubtful_states_are_not_kept() {
    let hba = "local all all trust\n\
               host all md5_user 127.0.0.1/32 md5\n\
               host all postgres 127.0.0.1/32 trust\n";
    let opts = PgOptions {
        hba: Some(hba.into()),
        ..Default::default()
    };
    let env = Env::start_with(opts, reuse_on).await;
    connect(&env.dsn(false))
        .await
        .batch_execute("set password_encryption = 'md5'; create user md5_user password 'pw'")
        .await
        .unwrap();

    // Inside a transaction.
    let (mut s, _) = greet(env.proxy_port()).await;
    // (A BEGIN alone stays in the proxy; a statement takes it upstream.)
    query(&mut s, "begin").await;
    query(&mut s, "select 1").await;
    terminate(s).await;
    assert_eq!(kept_after_close(&env).await, 0, "left inside a transaction");
    // In the middle of an extended-query batch (no Sync yet).
    let (mut s, _) = greet(env.proxy_port()).await;
    s.write_all(&raw::message(b'P', b"\0select 1\0\0\0"))
        .await
        .unwrap();
    terminate(s).await;
    assert_eq!(kept_after_close(&env).await, 0, "left before its Sync");
    // With a query still running (the socket just closes).
    let (mut s, _) = greet(env.proxy_port()).await;
    s.write_all(&raw::query("select pg_sleep(0.3)"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(s);
    assert_eq!(kept_after_close(&env).await, 0, "left with a query running");
    // A user the server asks for a password.
    let dsn = format!(
        "host=127.0.0.1 port={} user=md5_user password=pw dbname=postgres",
        env.proxy_port()
    );
    connect(&dsn).await.simple_query("select 1").await.unwrap();
    assert_eq!(kept_after_close(&env).await, 0, "authenticated by password");
    // A clean exit is kept, and the socket closing counts as one.
    let (s, _) = greet(env.proxy_port()).await;
    drop(s);
    assert_eq!(kept_after_close(&env).await, 1, "left idle");
    assert_eq!(env.proxy().stats().total().reused_upstreams, 0);

    // Off by default.
    let env = Env::start().await;
    let (s, _) = greet(env.proxy_port()).await;
    terminate(s).await;
    assert_eq!(kept_after_close(&env).await, 0, "reuse is off by default");

    // Past its lifetime, however idle its client left it.
    let env = Env::start_with(PgOptions::default(), |c| {
        c.upstream.reuse = true;
        c.upstream.reuse_lifetime = Duration::ZERO;
    })
    .await;
    let (s, _) = greet(env.proxy_port()).await;
    terminate(s).await;
    assert_eq!(kept_after_close(&env).await, 0, "older than reuse_lifetime");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_that_died_is_not_handed_out() {
    let env = Env::start_with(PgOptions::default(), reuse_on).await;
    let (mut a, _) = greet(env.proxy_port()).await;
    let pid_a = query(&mut a, STATE).await.0[0][0].clone().unwrap();
    terminate(a).await;
    env.wait_kept(1).await;
    let direct = connect(&env.dsn(false)).await;
    direct
        .execute(&format!("select pg_terminate_backend({pid_a})"), &[])
        .await
        .unwrap();
    // Until the backend has gone, and its last words reached the socket.
    let gone = format!("select count(*) from pg_stat_activity where pid = {pid_a}");
    assert_eq!(
        count_until(&direct, &gone, 0).await,
        0,
        "the backend exited"
    );
    let (mut b, _) = greet(env.proxy_port()).await;
    let pid_b = query(&mut b, STATE).await.0[0][0].clone().unwrap();
    assert_ne!(pid_b, pid_a, "a new backend, not the dead one");
    assert_eq!(env.proxy().stats().total().reused_upstreams, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_connections_expire_and_close_at_shutdown() {
    let mut env = Env::start_with(PgOptions::default(), |c| {
        c.upstream.reuse = true;
        c.upstream.reuse_idle_timeout = Duration::from_millis(200);
    })
    .await;
    let direct = connect(&env.dsn(false)).await;
    let others = "select count(*) from pg_stat_activity \
                  where backend_type = 'client backend' and pid <> pg_backend_pid()";
    let (s, _) = greet(env.proxy_port()).await;
    terminate(s).await;
    env.wait_kept(1).await;
    assert_eq!(
        count_until(&direct, others, 1).await,
        1,
        "the kept backend is alive"
    );
    env.wait_kept(0).await;
    assert_eq!(
        count_until(&direct, others, 0).await,
        0,
        "the expired backend has exited"
    );

    let (s, _) = greet(env.proxy_port()).await;
    terminate(s).await;
    env.wait_kept(1).await;
    env.stop_proxy(Duration::from_secs(5)).await;
    assert_eq!(
        count_until(&direct, others, 0).await,
        0,
        "shutdown closed the kept backend"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_a_reused_backend() {
    let env = Env::start_with(PgOptions::default(), reuse_on).await;
    let a = connect(&env.proxy_dsn()).await;
    let pid_a = backend_pid(&a).await;
    drop(a);
    env.wait_kept(1).await;
    let b = connect(&env.proxy_dsn()).await;
    assert_eq!(backend_pid(&b).await, pid_a, "reused");
    let watcher = connect(&env.direct_dsn()).await;
    let code = cancel_a_sleep(b, &watcher).await;
    assert_eq!(code, Some(SqlState::QUERY_CANCELED));
}

/// The binary's sessions run on several worker threads: a kept connection
/// moves to whichever one serves the next client. psql, run three times,
/// gets the same backend each time, as through PgBouncer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_sessions_share_a_backend_across_worker_threads() {
    let env = Env::start().await;
    let proxy = ProxyProcess::start(CLI, env.pg.addr(), &[("ONETRIP_UPSTREAM_REUSE", "true")]);
    let pids: Vec<String> = (0..3)
        .map(|_| {
            let out = env
                .pg
                .tool("psql")
                .args(["-X", "-A", "-t", "-h", "127.0.0.1", "-p"])
                .arg(proxy.port().to_string())
                .args(["-U", "postgres", "-d", "postgres", "-c"])
                .arg("select pg_backend_pid()")
                .env("PGCONNECT_TIMEOUT", "10")
                .output()
                .expect("run psql");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            // Give the session time to reset and keep its connection.
            std::thread::sleep(Duration::from_millis(200));
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        })
        .collect();
    assert!(pids[0].parse::<i32>().is_ok(), "{pids:?}");
    assert_eq!(pids[0], pids[1], "{pids:?}");
    assert_eq!(pids[1], pids[2], "{pids:?}");
}

/// A client that reconnects the moment it leaves finds its connection still
/// being reset; it waits for it rather than having the server fork another
/// backend, as PgBouncer's clients do. (The binary: there the old session
/// and the new one start on the same worker, which sees the old client's
/// Terminate before the new client's startup packet.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reconnects_at_once_gets_the_same_backend() {
    let env = Env::start().await;
    let proxy = ProxyProcess::start(
        CLI,
        env.pg.addr(),
        &[
            ("ONETRIP_UPSTREAM_REUSE", "true"),
            ("ONETRIP_LISTEN_THREADS", "2"),
        ],
    );
    let mut pids = Vec::new();
    for _ in 0..20 {
        let (mut s, _) = greet(proxy.port()).await;
        pids.push(query(&mut s, "select pg_backend_pid()").await.0[0][0].clone());
        terminate(s).await;
    }
    assert!(pids.iter().all(|p| *p == pids[0]), "{pids:?}");
}

/// Operators see kept connections: `SHOW SERVERS` lists each with its
/// backend, and `/metrics` counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_connections_are_shown_to_operators() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.upstream.reuse = true;
        c.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let a = connect(&env.proxy_dsn()).await;
    let pid_a = backend_pid(&a).await;
    drop(a);
    env.wait_kept(1).await;

    let admin = connect(&format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    ))
    .await;
    let rows: Vec<_> = admin
        .simple_query("SHOW SERVERS")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .collect();
    let kept: Vec<_> = rows
        .iter()
        .filter(|r| r.get("state") == Some("kept"))
        .collect();
    assert_eq!(kept.len(), 1, "one kept row beside the admin session");
    let pid = pid_a.to_string();
    assert_eq!(kept[0].get("upstream_pid"), Some(pid.as_str()));
    assert_eq!(kept[0].get("database"), Some("postgres"));
    assert_eq!(kept[0].get("user"), Some("postgres"));
    assert_eq!(kept[0].get("id"), None, "no client session holds it");

    let addr = env.proxy().metrics_addr().expect("metrics listening");
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut s, &mut body)
        .await
        .unwrap();
    assert!(body.contains("\nonetrip_upstreams_kept 1\n"), "{body}");
}

/// A client that leaves with its BEGIN held here leaves the server
/// connection as it found it: idle, kept, and the next client on it is in
/// no transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_a_held_begin_leaves_a_clean_connection() {
    let env = Env::start_with(PgOptions::default(), reuse_on).await;
    let (mut a, _) = greet(env.proxy_port()).await;
    let pid = query(&mut a, "select pg_backend_pid()").await.0[0][0].clone();
    query(&mut a, "begin").await;
    terminate(a).await;
    env.wait_kept(1).await;
    let (mut b, _) = greet(env.proxy_port()).await;
    assert_eq!(query(&mut b, "select pg_backend_pid()").await.0[0][0], pid);
    // Outside a transaction block, a SAVEPOINT is refused.
    b.write_all(&raw::query("savepoint x")).await.unwrap();
    let (t, body) = raw::read_message(&mut b, WAIT).await.unwrap();
    assert_eq!(
        (t, raw::field(&body, b'C').as_deref()),
        (b'E', Some("25P01"))
    );
}

/// A kept connection adopted by a session that relays in its task (a
/// simulated round-trip time keeps it out of the worker's relay): its
/// sockets enter the runtime there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_serves_a_session_relayed_in_its_task() {
    let env = Env::start_with(PgOptions::default(), |c| {
        reuse_on(c);
        c.upstream.rtt = Duration::from_millis(1);
    })
    .await;
    let (mut a, _) = greet(env.proxy_port()).await;
    let pid_a = query(&mut a, "select pg_backend_pid()::text").await.0;
    terminate(a).await;
    env.wait_kept(1).await;
    let (mut b, _) = greet(env.proxy_port()).await;
    let (rows, _) = query(&mut b, "select pg_backend_pid()::text, 6 * 7").await;
    assert_eq!(rows[0][0], pid_a[0][0], "the kept backend");
    assert_eq!(rows[0][1].as_deref(), Some("42"));
    assert_eq!(env.proxy().stats().total().reused_upstreams, 1);
}
