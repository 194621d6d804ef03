//! pgbench `-M prepared` through transaction pooling, many clients on two
//! threads and a small pool: pgbench prepares each statement
//! synchronously (Parse and Sync) on first use, so a thread that waited for
//! a connection to prepare while its other clients held every connection
//! mid-transaction would wait forever. Parses of texts the pool's server
//! parsed before are answered by onetrip with no connection, and the run
//! completes.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use onetrip_tests::{Env, PgOptions};

/// Runs `cmd` to its end, or kills it after `limit`: a deadlock fails the
/// test rather than hang it.
fn run_within(mut cmd: Command, limit: Duration) -> (bool, String) {
    let out = tempfile_path();
    let file = std::fs::File::create(&out).expect("output file");
    let mut child = cmd
        .stdout(file.try_clone().expect("output file"))
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .expect("run pgbench");
    let start = Instant::now();
    let ok = loop {
        if let Some(status) = child.try_wait().expect("wait for pgbench") {
            break status.success();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    (ok, text)
}

fn tempfile_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "onetrip-pgbench-{}-{:?}.out",
        std::process::id(),
        Instant::now()
    ))
}

fn pgbench(env: &Env, port: u16, args: &[&str]) -> Command {
    let mut cmd = env.pg.tool("pgbench");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(args)
        .arg(&env.db)
        .env("PGCONNECT_TIMEOUT", "10");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_prepared_many_clients_two_threads_small_pool_completes() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 5;
    })
    .await;
    let init = pgbench(&env, env.pg.port(), &["-i", "-q", "-s", "1"]);
    let (ok, text) =
        tokio::task::spawn_blocking(move || run_within(init, Duration::from_secs(120)))
            .await
            .unwrap();
    assert!(ok, "pgbench -i: {text}");
    let (clients, per_client) = (60, 5);
    let c = clients.to_string();
    let t = per_client.to_string();
    let run = pgbench(
        &env,
        env.proxy_port(),
        &["-n", "-M", "prepared", "-c", &c, "-j", "2", "-t", &t],
    );
    // Done in seconds; a deadlock never ends.
    let (ok, text) = tokio::task::spawn_blocking(move || run_within(run, Duration::from_secs(240)))
        .await
        .unwrap();
    println!("{text}");
    assert!(ok, "pgbench -M prepared through onetrip: {text}");
    let want = clients * per_client;
    assert!(
        text.contains(&format!(
            "number of transactions actually processed: {want}/{want}"
        )),
        "{text}"
    );
    let rows = onetrip_tests::admin_at(env.proxy_port(), "SHOW POOLS").await;
    let here: u64 = rows
        .iter()
        .filter_map(|r| r[14].as_deref()?.parse::<u64>().ok())
        .sum();
    println!("Parses answered by onetrip: {here}");
    // Each client prepares the script's 7 statements; some first ones may
    // reach the server before it has parsed their text.
    assert!(here > 0, "{rows:?}");
}
