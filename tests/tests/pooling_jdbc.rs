//! pgjdbc through transaction pooling (tests/java/PoolingJdbc.java): with
//! `prepareThreshold=1` every prepared statement is a named server
//! statement at once, under the same names (S_1, S_2, ...) on every
//! connection. Eight connections on a pool of two read what they read
//! direct, and none is pinned. Clients killed while waiting in line, inside
//! a transaction or pinned leave no session and no connection held.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

use onetrip::config::{Config, PoolMode};
use onetrip_tests::{Env, PgOptions, admin_at, connect, skip};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdout, Command},
};

/// Debian's pgjdbc (`libpostgresql-jdbc-java`).
const PGJDBC: &str = "/usr/share/java/postgresql.jar";

fn pooled(c: &mut Config) {
    c.pool.mode = PoolMode::Transaction;
    c.pool.pool_size = 2;
    // A client in line fails after this, rather than 120 s.
    c.pool.query_wait_timeout = Duration::from_secs(15);
}

/// The program compiled into a temporary directory; `None` (after a skip
/// line) without javac or pgjdbc, unless on CI, where that fails.
async fn compiled() -> Option<tempfile::TempDir> {
    let runs = |tool: &str| {
        std::process::Command::new(tool)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !(runs("javac") && runs("java") && Path::new(PGJDBC).is_file()) {
        let what = format!("javac, java or pgjdbc ({PGJDBC}) not installed");
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{what} (CI=true: .ci/run installs them)"
        );
        skip(&what);
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("java/PoolingJdbc.java");
    let out = Command::new("javac")
        .arg("-d")
        .arg(dir.path())
        .arg(&source)
        .output()
        .await
        .expect("run javac");
    assert!(
        out.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(dir)
}

/// A running PoolingJdbc, killed if dropped.
struct Java {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Java {
    fn start(classes: &Path, mode: &str, port: u16, user: &str) -> Java {
        let classpath = format!("{PGJDBC}:{}", classes.display());
        let mut child = Command::new("java")
            // pgjdbc sends the JVM's zone in its startup packet.
            .args([
                "-Duser.timezone=UTC",
                "-cp",
                &classpath,
                "PoolingJdbc",
                mode,
            ])
            .arg(port.to_string())
            .arg(user)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start java");
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Java { child, stdout }
    }

    /// What it prints before READY (at most `wait` for it).
    async fn until_ready(&mut self, wait: Duration) -> Vec<String> {
        let mut out = Vec::new();
        let read = async {
            while let Some(line) = self.stdout.next_line().await.expect("java's stdout") {
                if line == "READY" {
                    return true;
                }
                out.push(line);
            }
            false
        };
        let ready = tokio::time::timeout(wait, read).await;
        assert_eq!(ready, Ok(true), "no READY from java; it said: {out:#?}");
        out
    }

    /// Lets it close its connections and exit; what it printed after READY.
    async fn finish(mut self) -> Vec<String> {
        let mut stdin = self.child.stdin.take().unwrap();
        stdin.write_all(b"go\n").await.unwrap();
        drop(stdin);
        let mut rest = Vec::new();
        let read = async {
            while let Some(line) = self.stdout.next_line().await.unwrap() {
                rest.push(line);
            }
            self.child.wait().await.unwrap()
        };
        let status = tokio::time::timeout(Duration::from_secs(30), read).await;
        let status = status.expect("java exits once told to");
        assert!(status.success(), "java: {status}; {rest:?}");
        rest
    }
}

/// The rows of a SHOW that are `user`'s (column 2 of SHOW CLIENTS, 1 of
/// SHOW POOLS: `col`).
async fn rows_of(port: u16, show: &str, col: usize, user: &str) -> Vec<Vec<Option<String>>> {
    let mut rows = admin_at(port, show).await;
    rows.retain(|r| r[col].as_deref() == Some(user));
    rows
}

fn num(row: &[Option<String>], col: usize) -> u64 {
    row[col].as_deref().and_then(|v| v.parse().ok()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgjdbc_named_statements_batches_and_transactions_on_two_connections() {
    let Some(classes) = compiled().await else {
        return;
    };
    let env = Env::start_with(PgOptions::default(), pooled).await;
    let control = connect(&env.direct_dsn()).await;
    control
        .batch_execute("CREATE ROLE jdbc LOGIN; GRANT CREATE ON SCHEMA public TO jdbc")
        .await
        .unwrap();
    let ready = Duration::from_secs(180);

    let mut java = Java::start(classes.path(), "work", env.pg.port(), "jdbc");
    let direct = java.until_ready(ready).await;
    java.finish().await;
    assert!(
        direct
            .iter()
            .any(|l| l.starts_with("t7 r2 transaction updated=1")),
        "{direct:#?}"
    );
    assert!(direct.iter().all(|l| !l.contains("failed")), "{direct:#?}");

    // Through the pool, counting the server connections it opens.
    let most = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let (most, done, dsn) = (most.clone(), done.clone(), env.direct_dsn());
        tokio::spawn(async move {
            let c = connect(&dsn).await;
            let sql = "SELECT count(*) FROM pg_stat_activity WHERE usename = 'jdbc'";
            while !done.load(Ordering::Relaxed) {
                let n: i64 = c.query_one(sql, &[]).await.unwrap().get(0);
                most.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let port = env.proxy_port();
    let mut java = Java::start(classes.path(), "work", port, "jdbc");
    let proxied = java.until_ready(ready).await;
    // Its eight connections are open: none pinned, two server
    // connections at most.
    let pools = rows_of(port, "SHOW POOLS", 1, "jdbc").await;
    let clients = rows_of(port, "SHOW CLIENTS", 2, "jdbc").await;
    java.finish().await;
    done.store(true, Ordering::Relaxed);
    watch.await.unwrap();
    let most = most.load(Ordering::Relaxed);

    let mut problems = Vec::new();
    if proxied != direct {
        problems.push(format!(
            "through the pool, not as direct:\n{}",
            differences(&direct, &proxied)
        ));
    }
    match &pools[..] {
        [pool] => {
            if num(pool, 6) != 0 {
                problems.push(format!("sv_pinned {}: {pool:?}", num(pool, 6)));
            }
            // sv_active counts the pinned ones too.
            let servers = num(pool, 4) + num(pool, 5);
            if servers > 2 {
                problems.push(format!("{servers} server connections: {pool:?}"));
            }
        }
        _ => problems.push(format!("not one pool: {pools:?}")),
    }
    if !(1..=2).contains(&most) {
        problems.push(format!("{most} server connections seen at once"));
    }
    if clients.len() != 8 {
        problems.push(format!("{} sessions, not 8: {clients:?}", clients.len()));
    }
    for c in &clients {
        if c[14].as_deref() != Some("transaction") || c[15].is_some() {
            let (id, mode, pin) = (&c[0], &c[14], &c[15]);
            problems.push(format!("session {id:?}: {mode:?}, pinned by {pin:?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The lines only one of the two outputs has (the first few of each).
fn differences(direct: &[String], pooled: &[String]) -> String {
    let only = |a: &[String], b: &[String], name: &str| {
        let lines: Vec<&String> = a.iter().filter(|l| !b.contains(l)).collect();
        let mut out = format!("  only {name} ({} lines):", lines.len());
        for l in lines.iter().take(10) {
            out.push_str(&format!("\n    {l}"));
        }
        out
    };
    format!(
        "{}\n{}",
        only(direct, pooled, "direct"),
        only(pooled, direct, "through the pool")
    )
}

/// A JVM killed (SIGKILL) while one of its connections is pinned (LISTEN),
/// one is inside a transaction and three wait in line for the pool's two
/// server connections: its sessions end, its transaction is rolled back,
/// and the pool holds nothing for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_pgjdbc_clients_leave_no_session_and_no_connection_held() {
    let Some(classes) = compiled().await else {
        return;
    };
    let env = Env::start_with(PgOptions::default(), pooled).await;
    let control = connect(&env.direct_dsn()).await;
    control
        .batch_execute("CREATE ROLE jdbc_kill LOGIN")
        .await
        .unwrap();
    let port = env.proxy_port();
    let mut java = Java::start(classes.path(), "hold", port, "jdbc_kill");
    java.until_ready(Duration::from_secs(60)).await;
    // Until all three are in line (they fail after query_wait_timeout,
    // 15 s: the kill comes well before).
    let mut seen = (Vec::new(), Vec::new());
    for _ in 0..100 {
        seen = (
            rows_of(port, "SHOW POOLS", 1, "jdbc_kill").await,
            rows_of(port, "SHOW CLIENTS", 2, "jdbc_kill").await,
        );
        if seen.0.len() == 1 && num(&seen.0[0], 3) == 3 && num(&seen.0[0], 6) >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (pools, clients) = seen;
    assert!(
        pools.len() == 1 && num(&pools[0], 3) == 3 && num(&pools[0], 6) >= 1,
        "three in line and one pinned: {pools:?} {clients:?}"
    );
    assert!(
        clients.iter().any(|c| c[15].is_some()),
        "a pin reason: {clients:?}"
    );
    println!("before the kill: {pools:?}");
    java.child.kill().await.expect("SIGKILL java");

    // Within a few seconds, far less than query_wait_timeout.
    let stuck = "SELECT pid, state, query FROM pg_stat_activity \
                 WHERE usename = 'jdbc_kill' AND state <> 'idle'";
    let mut left = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..100 {
        let backends = control.query(stuck, &[]).await.unwrap();
        let backends: Vec<(i32, Option<String>, Option<String>)> = backends
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        left = (
            rows_of(port, "SHOW CLIENTS", 2, "jdbc_kill").await,
            rows_of(port, "SHOW POOLS", 1, "jdbc_kill").await,
            backends,
        );
        let held = left
            .1
            .iter()
            .any(|p| [2, 3, 4, 6].iter().any(|&c| num(p, c) != 0));
        if left.0.is_empty() && !held && left.2.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (clients, pools, backends) = left;
    println!("after the kill: {pools:?}");
    let mut problems = Vec::new();
    if !clients.is_empty() {
        problems.push(format!("sessions left: {clients:?}"));
    }
    for p in &pools {
        let held: Vec<String> = [
            (2, "cl_active"),
            (3, "cl_waiting"),
            (4, "sv_active"),
            (6, "sv_pinned"),
        ]
        .iter()
        .filter(|(c, _)| num(p, *c) != 0)
        .map(|(c, name)| format!("{name} {}", num(p, *c)))
        .collect();
        if !held.is_empty() {
            problems.push(format!("the pool still holds {}: {p:?}", held.join(", ")));
        }
    }
    if !backends.is_empty() {
        problems.push(format!("backends not idle: {backends:?}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
