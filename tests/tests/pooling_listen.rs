//! LISTEN without a pin under transaction pooling: a pool's one listening
//! connection listens on the union of its clients' channels and hands each
//! notification to every client listening on its channel, in the server's
//! order, between statements, while none of them holds a server
//! connection. UNLISTEN, a client's departure and a lost listening
//! connection; the sender's pid as it was told at login; and the answers,
//! side by side with PostgreSQL.

use std::time::Duration;

use futures_util::StreamExt;
use onetrip_tests::{
    Env, PgOptions, connect, python_with_psycopg, run_py,
    script::{Script, Sides},
    skip,
};
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};

const WAIT: Duration = Duration::from_secs(20);

async fn pooled(size: usize) -> Env {
    Env::start_with(PgOptions::default(), move |c| pooling(c, size)).await
}

fn pooling(c: &mut onetrip::Config, size: usize) {
    c.pool.mode = onetrip::config::PoolMode::Transaction;
    c.pool.pool_size = size;
}

/// What a client hears outside its queries' answers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Heard {
    /// A notification: channel, payload.
    Note(String, String),
    /// A notice's message.
    Notice(String),
}

struct Listener {
    client: tokio_postgres::Client,
    heard: mpsc::UnboundedReceiver<Heard>,
}

impl Listener {
    async fn connect(dsn: &str) -> Self {
        let (client, mut conn) = tokio_postgres::connect(dsn, NoTls).await.unwrap();
        let (tx, heard) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
            while let Some(Ok(m)) = messages.next().await {
                let h = match m {
                    AsyncMessage::Notification(n) => {
                        Heard::Note(n.channel().to_owned(), n.payload().to_owned())
                    }
                    AsyncMessage::Notice(e) => Heard::Notice(e.message().to_owned()),
                    _ => continue,
                };
                if tx.send(h).is_err() {
                    break;
                }
            }
        });
        Self { client, heard }
    }

    async fn run(&self, sql: &str) {
        self.client.batch_execute(sql).await.unwrap();
    }

    /// The next thing heard.
    async fn next(&mut self) -> Heard {
        tokio::time::timeout(WAIT, self.heard.recv())
            .await
            .expect("a notification in time")
            .expect("the connection is open")
    }

    /// The next notification, notices skipped.
    async fn note(&mut self) -> (String, String) {
        loop {
            if let Heard::Note(c, p) = self.next().await {
                return (c, p);
            }
        }
    }
}

/// SHOW POOLS' (sv_pinned, sv_listening, listen_channels) of the one pool.
async fn pool_counts(env: &Env) -> (u64, u64, u64) {
    let row = env.pool_row().await;
    let n = |name: &str| row.get(name).unwrap().parse().unwrap();
    (n("sv_pinned"), n("sv_listening"), n("listen_channels"))
}

/// Waits until SHOW POOLS shows `want` (sv_listening, listen_channels).
async fn wait_counts(env: &Env, want: (u64, u64)) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, conns, channels) = pool_counts(env).await;
        if (conns, channels) == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "SHOW POOLS: listening {conns}, channels {channels}; wanted {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Client backends on the server, besides the asker's own.
async fn server_backends(direct: &tokio_postgres::Client) -> i64 {
    let sql = "SELECT count(*) FROM pg_stat_activity \
               WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
    direct.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_listen_on_a_small_pool_none_pinned() {
    const CLIENTS: usize = 40;
    const NOTES: usize = 60;
    let env = pooled(3).await;
    let direct = connect(&env.direct_dsn()).await;
    direct
        .batch_execute("CREATE TABLE listen_t (w int, i int)")
        .await
        .unwrap();
    let dsn = env.proxy_dsn();
    let mut listeners = Vec::new();
    for i in 0..CLIENTS {
        let l = Listener::connect(&dsn).await;
        l.run(&format!("LISTEN ch{}", i % 3)).await;
        l.run("listen \"All\"").await;
        listeners.push(l);
    }
    let (pinned, conns, channels) = pool_counts(&env).await;
    assert_eq!(pinned, 0, "no client is pinned");
    assert_eq!((conns, channels), (1, 4), "one listening connection");
    // The pool's 3 connections and the listening one, for 40 clients.
    assert!(server_backends(&direct).await <= 4);

    // Others run transactions on the pool meanwhile; one of them sends
    // the notifications, each committed before the next.
    let mut workers = Vec::new();
    for w in 0..3 {
        let c = connect(&dsn).await;
        workers.push(tokio::spawn(async move {
            for i in 0..NOTES {
                let mut sql = format!("BEGIN; INSERT INTO listen_t VALUES ({w}, {i}); ");
                if w == 0 {
                    sql.push_str(&format!("NOTIFY ch{}, '{i}'; ", i % 3));
                }
                sql.push_str("COMMIT");
                c.batch_execute(&sql).await.unwrap();
            }
            if w == 0 {
                c.batch_execute("SELECT pg_notify('All', 'end')")
                    .await
                    .unwrap();
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let rows: i64 = direct
        .query_one("SELECT count(*) FROM listen_t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 3 * NOTES as i64);
    for (i, l) in listeners.iter_mut().enumerate() {
        let want: Vec<(String, String)> = (0..NOTES)
            .filter(|k| k % 3 == i % 3)
            .map(|k| (format!("ch{}", i % 3), k.to_string()))
            .chain([("All".to_owned(), "end".to_owned())])
            .collect();
        let mut got = Vec::new();
        while got.len() < want.len() {
            got.push(l.note().await);
        }
        assert_eq!(
            got, want,
            "client {i}: its channels' notifications, in order"
        );
    }
    let (pinned, _, _) = pool_counts(&env).await;
    assert_eq!(pinned, 0);
    let rows = env.admin("SHOW CLIENTS").await;
    assert!(!rows.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlisten_and_departure_remove_channels() {
    let env = pooled(2).await;
    let direct = connect(&env.direct_dsn()).await;
    let dsn = env.proxy_dsn();
    let mut a = Listener::connect(&dsn).await;
    let mut b = Listener::connect(&dsn).await;
    a.run("LISTEN x").await;
    a.run("LISTEN y").await;
    b.run("LISTEN x").await;
    wait_counts(&env, (1, 2)).await;

    a.run("UNLISTEN x").await;
    direct
        .batch_execute("NOTIFY x, '1'; NOTIFY y, '2'")
        .await
        .unwrap();
    assert_eq!(a.note().await, ("y".into(), "2".into()), "x no more");
    assert_eq!(b.note().await, ("x".into(), "1".into()));

    a.run("UNLISTEN *").await;
    direct.batch_execute("NOTIFY y, '3'").await.unwrap();
    direct.batch_execute("NOTIFY x, '4'").await.unwrap();
    assert_eq!(b.note().await, ("x".into(), "4".into()));
    a.run("LISTEN z").await;
    direct.batch_execute("NOTIFY z, 'm'").await.unwrap();
    assert_eq!(a.note().await, ("z".into(), "m".into()), "nothing before");
    // y is listened on by no one now.
    wait_counts(&env, (1, 2)).await;

    // A notification waits while its client is in a transaction block.
    b.run("BEGIN; SELECT 1").await;
    direct.batch_execute("NOTIFY x, 'late'").await.unwrap();
    // The listening connection has it once z's marker comes.
    direct.batch_execute("NOTIFY z, 'm2'").await.unwrap();
    assert_eq!(a.note().await, ("z".into(), "m2".into()));
    b.run("SELECT 2").await;
    assert!(b.heard.try_recv().is_err(), "nothing inside a transaction");
    b.run("COMMIT").await;
    assert_eq!(b.note().await, ("x".into(), "late".into()));

    drop(b);
    wait_counts(&env, (1, 1)).await;
    drop(a);
    wait_counts(&env, (0, 0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listening_connection_is_made_again() {
    let env = pooled(2).await;
    let direct = connect(&env.direct_dsn()).await;
    let mut a = Listener::connect(&env.proxy_dsn()).await;
    a.run("LISTEN lost_ch").await;
    a.run("SELECT 1").await;
    let killed: bool = direct
        .query_one(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE query = 'LISTEN \"lost_ch\"'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(killed, "the listening connection's backend");
    match a.next().await {
        Heard::Notice(m) => assert!(m.contains("may be missing"), "{m}"),
        other => panic!("told of the loss first, got {other:?}"),
    }
    // Listened on again: a notification sent from now on arrives.
    wait_counts(&env, (1, 1)).await;
    direct
        .batch_execute("NOTIFY lost_ch, 'back'")
        .await
        .unwrap();
    assert_eq!(a.note().await, ("lost_ch".into(), "back".into()));
    let (pinned, _, _) = pool_counts(&env).await;
    assert_eq!(pinned, 0);
}

/// The answers to LISTEN, UNLISTEN and NOTIFY, in a transaction block and
/// out, and what can't be run apart (kept on the client's connection),
/// message for message as PostgreSQL gives them.
#[tokio::test]
async fn answers_as_postgresql_gives_them() {
    let sides = Sides::start(&[("onetrip pooling", |c| pooling(c, 2))]).await;
    let scripts = [
        Script::new()
            .query("listen a")
            .wait()
            .query("LISTEN \"Quoted\";")
            .wait()
            .query("unlisten a")
            .wait()
            .query("unlisten *")
            .wait()
            .query("notify nobody_listens, 'x'")
            .wait(),
        Script::new()
            .query("begin")
            .wait()
            .query("listen b")
            .wait()
            .query("commit")
            .wait()
            .query("begin")
            .wait()
            .query("listen c")
            .wait()
            .query("rollback")
            .wait()
            .query("unlisten *")
            .wait(),
        Script::new()
            .query("listen select")
            .wait()
            .query("listen")
            .wait()
            .query("select 1")
            .wait(),
        Script::new()
            .query("listen d; select 1")
            .wait()
            .query("unlisten d")
            .wait(),
        Script::new()
            .query("begin")
            .wait()
            .query("select 1/0")
            .wait()
            .query("listen e")
            .wait()
            .query("rollback")
            .wait(),
        Script::new()
            .parse("", "listen f")
            .bind("", "", &[])
            .execute("", 0)
            .sync()
            .wait()
            .query("unlisten f")
            .wait(),
    ];
    for s in scripts {
        sides.same(s).await;
    }
}

/// psycopg's own check for a notification it sent itself compares the
/// pid with `conn.info.backend_pid`: through the pool that is the pid
/// onetrip told the client at login, and the notification carries it. One
/// from a backend that is not the pool's keeps its pid.
#[tokio::test]
async fn a_notification_names_its_sender_as_the_sender_was_told() {
    let Some(py) = python_with_psycopg() else {
        skip("psycopg not installed");
        return;
    };
    let env = pooled(2).await;
    let (direct, proxied) = (env.dsn(false), env.dsn(true));
    let admin = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let run = |args: Vec<String>| {
        let py = py.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_py(&py, "listen_pids.py", &args)
        })
    };
    let want = r#"[["pids", "own", true], ["pids", "other", true]]"#;
    assert_eq!(
        run(vec![direct.clone(), direct.clone()])
            .await
            .unwrap()
            .trim(),
        want
    );
    let got = run(vec![proxied, direct, admin]).await.unwrap();
    assert_eq!(
        got.trim(),
        r#"[["pids", "own", true], ["pids", "other", true], ["pools", "0", "1"]]"#,
        "each sender named as it was told; no client pinned"
    );
}

/// A hundred psycopg clients LISTENing on a pool of five, none pinned,
/// while five others run transactions and one of those notifies: each
/// listener gets exactly its channels' notifications, in order, in two
/// rounds, and between them the listening connection is killed: each is
/// warned once, and the second round arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_psycopg_listeners_on_five_connections_outlive_a_lost_listener() {
    let Some(py) = python_with_psycopg() else {
        skip("psycopg not installed");
        return;
    };
    let env = pooled(5).await;
    let admin = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let args = [env.dsn(true), env.dsn(false), admin];
    let got = tokio::task::spawn_blocking(move || {
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        all.extend(["100", "5", "40"]);
        run_py(&py, "listen_many.py", &all)
    })
    .await
    .unwrap();
    assert_eq!(
        got.trim(),
        r#"{"exact": [100, 100], "warned_once": 100, "pools": [0, 1, 6]}"#,
        "every listener exact in both rounds and warned once; none pinned, one listening connection"
    );
}
