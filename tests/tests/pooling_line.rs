//! Transaction pooling's line: a client whose pool has no connection free
//! waits where it relays, on its worker, and is handed the next one given
//! back.

use std::time::Duration;

use onetrip_tests::{Env, PgOptions, connect, raw, simple_rows};
use tokio::io::AsyncWriteExt;

/// Clients in line are counted as waiting in `SHOW POOLS` while they
/// wait; one whose `query_wait_timeout` passes leaves the line, told why,
/// and the others keep their places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_in_line_are_counted_and_one_that_times_out_leaves_it() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 1;
        c.pool.query_wait_timeout = Duration::from_millis(1500);
    })
    .await;
    let dsn = env.proxy_dsn();
    let holder = connect(&dsn).await;
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let early = connect(&dsn).await;
    let late = connect(&dsn).await;
    let early_asks = async { early.simple_query("SELECT 'early'").await };
    let late_asks = async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        late.simple_query("SELECT 'late'").await
    };
    let watch = async {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let both = env.admin("SHOW POOLS").await;
        // The early one's time runs out; the late one's does not.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let one_left = env.admin("SHOW POOLS").await;
        holder.batch_execute("COMMIT").await.unwrap();
        (both, one_left)
    };
    let (early, late, (both, one_left)) = tokio::join!(early_asks, late_asks, watch);
    assert_eq!(both[0][3].as_deref(), Some("2"), "cl_waiting: {both:?}");
    assert_eq!(
        one_left[0][3].as_deref(),
        Some("1"),
        "cl_waiting: {one_left:?}"
    );
    let err = early.expect_err("the early client waited past query_wait_timeout");
    let db = err.as_db_error().expect("the proxy's error");
    assert!(db.message().contains("query_wait_timeout"), "{db}");
    let late = late.expect("the late client got the connection");
    assert_eq!(simple_rows(&late)[0][0].as_deref(), Some("late"));
    let pools = env.admin("SHOW POOLS").await;
    assert_eq!(pools[0][3].as_deref(), Some("0"), "cl_waiting: {pools:?}");
}

/// A client in line has a query on its way: it is not idle, and
/// `client_idle_timeout` does not end it however long it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_in_line_is_not_idle() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 1;
        c.limits.client_idle_timeout = Duration::from_millis(300);
    })
    .await;
    let dsn = env.proxy_dsn();
    let holder = connect(&dsn).await;
    let waiter = connect(&dsn).await;
    // The holder keeps talking, so it is not idle either.
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let waits = async { waiter.simple_query("SELECT 'served'").await };
    let holds = async {
        for _ in 0..10 {
            holder.batch_execute("SELECT 1").await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        holder.batch_execute("COMMIT").await.unwrap();
    };
    let (served, ()) = tokio::join!(waits, holds);
    let served = served.expect("served after a wait longer than client_idle_timeout");
    assert_eq!(simple_rows(&served)[0][0].as_deref(), Some("served"));
}

/// A client slow to read its answer holds no connection once the server
/// is done with it: the answer waits in onetrip's buffer for its client
/// while the connection serves the next in line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_holds_no_connection() {
    let env = one_connection_with_room(None).await;
    let mut slow = slow_reader(env.proxy_port()).await;
    let sql = format!("SELECT repeat('x', {ANSWER})");
    slow.write_all(&raw::query(&sql)).await.unwrap();
    // It reads nothing yet; another client of its pool (the same startup
    // packet) gets the one connection.
    let mut next = raw::connect_ready(env.proxy_port()).await;
    next.write_all(&raw::query("SELECT 'next'")).await.unwrap();
    let served = tokio::time::timeout(Duration::from_secs(10), raw::read_to_z(&mut next))
        .await
        .expect("the pool's connection served the next client while the slow one read nothing");
    assert_eq!(raw::errors(&served), vec![]);
    assert!(
        served
            .iter()
            .any(|(t, m)| *t == b'D' && m.ends_with(b"next"))
    );
    let msgs = raw::read_to_z(&mut slow).await;
    assert_eq!(raw::errors(&msgs), vec![]);
    let (_, row) = msgs.iter().find(|(t, _)| *t == b'D').expect("DataRow");
    // Column count (2), the value's length (4), the value.
    assert_eq!(row.len(), 6 + ANSWER);
    assert!(row[6..].iter().all(|&b| b == b'x'));
}

/// A slow reader whose connection went back before its answer was written
/// still gets all of it, before anything else: here its idle timeout ends
/// the session meanwhile, and the timeout's FATAL follows the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_readers_answer_comes_whole_before_its_farewell() {
    let env = one_connection_with_room(Some(Duration::from_millis(500))).await;
    let mut slow = slow_reader(env.proxy_port()).await;
    let sql = format!("SELECT repeat('y', {ANSWER})");
    slow.write_all(&raw::query(&sql)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let msgs = raw::read_to_end(&mut slow, Duration::from_secs(30)).await;
    let tags: Vec<u8> = msgs.iter().map(|(t, _)| *t).collect();
    assert_eq!(tags, b"TDCZE", "the answer, then the farewell");
    assert_eq!(msgs[1].1.len(), 6 + ANSWER);
    assert!(msgs[1].1[6..].iter().all(|&b| b == b'y'));
    let errors = raw::errors(&msgs);
    assert_eq!(errors[0].1, "57P05", "{errors:?}");
}

/// A slow reader's answer: more than the sockets between hold.
const ANSWER: usize = 16 << 20;

/// A pool of one connection, with room in onetrip for a whole `ANSWER`.
async fn one_connection_with_room(client_idle_timeout: Option<Duration>) -> Env {
    Env::start_with(PgOptions::default(), move |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 1;
        c.limits.buffer_bytes = 2 * ANSWER;
        if let Some(t) = client_idle_timeout {
            c.limits.client_idle_timeout = t;
        }
    })
    .await
}

/// A client with a small receive buffer (no autotuning): the kernel holds
/// little of an answer for it.
async fn slow_reader(port: u16) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 << 10).unwrap();
    let mut s = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    s.write_all(&raw::startup("postgres", "postgres"))
        .await
        .unwrap();
    assert_eq!(
        raw::errors(&raw::read_to_z(&mut s).await),
        vec![],
        "startup"
    );
    s
}

/// A client that hangs up while in line frees its place at once: its
/// statement never runs, and the client behind it gets the connection as
/// soon as it is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_in_line_leaves_it() {
    hangs_up_in_line(|_| {}).await;
}

/// The same for a session that waits in its task, not in the worker's
/// relay (one relayed through the runtime: TLS, or here a simulated
/// round-trip time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_while_its_task_waits_leaves_the_line() {
    hangs_up_in_line(|c| c.upstream.rtt = Duration::from_millis(1)).await;
}

async fn hangs_up_in_line(tweak: fn(&mut onetrip::Config)) {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 1;
        tweak(c);
    })
    .await;
    let direct = connect(&env.direct_dsn()).await;
    direct
        .batch_execute("CREATE TABLE gone_t (who text)")
        .await
        .unwrap();
    let holder = connect(&env.proxy_dsn()).await;
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let mut gone = raw::connect_ready(env.proxy_port()).await;
    gone.write_all(&raw::query("INSERT INTO gone_t VALUES ('gone')"))
        .await
        .unwrap();
    let waiting = |rows: &[Vec<Option<String>>]| rows[0][3].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while waiting(&env.admin("SHOW POOLS").await).as_deref() != Some("1") {
        assert!(std::time::Instant::now() < deadline, "never in line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(gone);
    while waiting(&env.admin("SHOW POOLS").await).as_deref() != Some("0") {
        assert!(
            std::time::Instant::now() < deadline,
            "a client that hung up still waits"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    holder.batch_execute("COMMIT").await.unwrap();
    let next = connect(&env.proxy_dsn()).await;
    next.batch_execute("SELECT 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let n: i64 = direct
        .query_one("SELECT count(*) FROM gone_t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the statement of a client that hung up in line ran");
    let clients = env.admin("SHOW CLIENTS").await;
    assert!(clients.len() <= 2, "{clients:?}");
}

/// A wait in line leaves the line's deadline armed after its client got
/// a connection; when it passes, the worker must go on relaying. (It used
/// to hand the thread to the runtime with nothing to run, and every
/// session relayed on that worker stalled until something else woke it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lines_deadline_passing_stalls_nobody() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 1;
        c.pool.query_wait_timeout = Duration::from_millis(300);
    })
    .await;
    let dsn = env.proxy_dsn();
    let holder = connect(&dsn).await;
    let waiter = connect(&dsn).await;
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let (asked, ()) = tokio::join!(waiter.simple_query("SELECT 'waited'"), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        holder.batch_execute("COMMIT").await.unwrap();
    });
    asked.expect("granted within its wait");
    // Past the deadline, with nothing else going on.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for c in [&waiter, &holder] {
        let answered =
            tokio::time::timeout(Duration::from_secs(5), c.simple_query("SELECT 1")).await;
        assert!(
            answered.is_ok(),
            "a session stalled after the line's deadline passed"
        );
    }
}

/// A client cancels a statement that waits in line for a connection: the
/// cancel waits with it and reaches the backend that runs it, as a cancel
/// sent right after a statement reaches it on a connection of the
/// client's own. Without that, the statement would run its full time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_a_statement_waiting_in_line_reaches_it() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 1;
    })
    .await;
    let dsn = env.proxy_dsn();
    let holder = connect(&dsn).await;
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    for mode in ["in line", "running"] {
        let waiter = connect(&dsn).await;
        let cancel = waiter.cancel_token();
        let sleeps = async { waiter.simple_query("SELECT pg_sleep(20)").await };
        let cancels = async {
            // In line: the holder still has the only connection.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let waiting = env.admin("SHOW POOLS").await;
            cancel.cancel_query(tokio_postgres::NoTls).await.unwrap();
            if mode == "in line" {
                tokio::time::sleep(Duration::from_millis(300)).await;
                holder.batch_execute("COMMIT").await.unwrap();
            }
            waiting
        };
        let (slept, waiting) = tokio::join!(sleeps, cancels);
        let want_waiting = if mode == "in line" { "1" } else { "0" };
        assert_eq!(
            waiting[0][3].as_deref(),
            Some(want_waiting),
            "{mode}: {waiting:?}"
        );
        let err = slept.expect_err(mode);
        let db = err.as_db_error().expect("the server's error");
        assert_eq!(db.code().code(), "57014", "{mode}: {db}");
    }
}
