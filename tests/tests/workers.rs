//! The binary runs sessions on worker runtimes, one thread each: the first
//! worker accepts, every session starts there, and one that lasts moves
//! to the worker with the fewest sessions. A session's timers
//! (the startup and authentication deadline, the simulated upstream
//! distance) run on its own worker's timer wheel. These run the binary
//! itself, since the in-process proxy of the other tests has no workers.

use std::time::Duration;

use onetrip_tests::{PgOptions, assert_serving, connect, process::ProxyProcess, raw, start_pg};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const HBA: &str = "local all all trust\n\
                   host all clear_user 127.0.0.1/32 password\n\
                   host all postgres 127.0.0.1/32 trust\n";

const CLI: &str = env!("CARGO_BIN_EXE_onetrip-cli");

/// Longer than the startup deadline below, so a close within it is the
/// deadline's doing.
const WAIT: Duration = Duration::from_secs(20);

/// Runs `n` queries on a raw session, one after another.
async fn run_queries(s: &mut TcpStream, n: usize) {
    for _ in 0..n {
        s.write_all(&raw::query("select 1")).await.unwrap();
        while let Some((tag, _)) = raw::read_message(s, WAIT).await {
            if tag == b'Z' {
                break;
            }
        }
    }
}

/// Voluntary context switches of each worker thread of process `pid`, in
/// thread id order (a worker sleeps and wakes for each message it relays).
fn worker_switches(pid: u32) -> Vec<u64> {
    let mut tasks: Vec<(u64, u64)> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| {
            let dir = e.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            // Thread names are cut to 15 bytes: "onetrip-worker-".
            if !comm.starts_with("onetrip-worker") {
                return None;
            }
            let tid = dir.file_name()?.to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            let n = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
                .trim()
                .parse()
                .ok()?;
            Some((tid, n))
        })
        .collect();
    tasks.sort();
    tasks.into_iter().map(|(_, n)| n).collect()
}

/// How many switches each worker made while `work` ran.
async fn switches_during(pid: u32, work: impl std::future::Future<Output = ()>) -> Vec<u64> {
    let before = worker_switches(pid);
    work.await;
    let after = worker_switches(pid);
    assert_eq!(before.len(), after.len());
    after.iter().zip(&before).map(|(a, b)| a - b).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_start_on_the_first_worker_and_long_ones_spread() {
    let pg = start_pg(Default::default()).await;
    let proxy = ProxyProcess::start(CLI, pg.addr(), &[("ONETRIP_LISTEN_THREADS", "2")]);
    let (port, pid) = (proxy.port(), proxy.pid());
    // A connection per query: all on the worker that accepts them.
    let short = switches_during(pid, async {
        for _ in 0..40 {
            let mut s = raw::connect_ready(port).await;
            run_queries(&mut s, 1).await;
            s.write_all(&raw::message(b'X', &[])).await.unwrap();
            assert!(closed(&mut s).await);
        }
    })
    .await;
    assert_eq!(short.len(), 2, "two workers");
    assert!(short[0] >= 80, "the first worker served them: {short:?}");
    assert!(short[1] <= 4, "the second did not wake for them: {short:?}");
    // Four long sessions: two move to the second worker once they have
    // made their round trips, and every worker then relays.
    let mut sessions = Vec::new();
    for _ in 0..4 {
        sessions.push(raw::connect_ready(port).await);
    }
    for s in &mut sessions {
        run_queries(s, 70).await;
    }
    let long = switches_during(pid, async {
        for s in &mut sessions {
            run_queries(s, 100).await;
        }
    })
    .await;
    assert!(
        long.iter().all(|&n| n >= 150),
        "both workers relay: {long:?}"
    );
    eprintln!("worker switches: short sessions {short:?}, long ones {long:?}");
}

/// The peer has closed `s` (reads end), rather than gone quiet.
async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(500), s.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_and_authentication_share_one_deadline_on_the_workers() {
    let pg = start_pg(PgOptions {
        hba: Some(HBA.into()),
        ..Default::default()
    })
    .await;
    let direct = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        pg.port()
    );
    connect(&direct)
        .await
        .batch_execute("create user clear_user password 'clear pass'")
        .await
        .unwrap();
    let proxy = ProxyProcess::start(CLI, pg.addr(), &[("ONETRIP_LIMITS_STARTUP_TIMEOUT", "1s")]);
    let port = proxy.port();
    let dsn = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");

    // Half a startup packet, then silence.
    let mut stalled = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stalled
        .write_all(&raw::startup("postgres", "postgres")[..10])
        .await
        .unwrap();
    // A whole startup packet, then no answer to the password request.
    let mut mute = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    mute.write_all(&raw::startup("clear_user", "postgres"))
        .await
        .unwrap();
    assert_serving(&dsn).await;

    // Nothing at all for the stalled startup, as from PostgreSQL.
    assert!(raw::read_to_end(&mut stalled, WAIT).await.is_empty());
    assert!(closed(&mut stalled).await, "the stalled startup was closed");
    // The password request, then the end of the connection.
    let got: Vec<u8> = raw::read_to_end(&mut mute, WAIT)
        .await
        .iter()
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(got, [b'R'], "the password request, then the end");
    assert!(closed(&mut mute).await, "the mute client was closed");
    assert_serving(&dsn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_sessions_on_every_worker_finish_then_closes_the_rest() {
    let pg = start_pg(Default::default()).await;
    let proxy = ProxyProcess::start(
        CLI,
        pg.addr(),
        &[
            ("ONETRIP_LISTEN_THREADS", "2"),
            ("ONETRIP_LIMITS_SHUTDOWN_GRACE", "2s"),
        ],
    );
    let port = proxy.port();
    // All four start on the first worker; once they have made their round
    // trips, two move to the second.
    let mut idle = raw::connect_ready(port).await;
    let mut busy = raw::connect_ready(port).await;
    let mut quick = raw::connect_ready(port).await;
    let mut leaving = raw::connect_ready(port).await;
    for s in [&mut idle, &mut busy, &mut quick, &mut leaving] {
        run_queries(s, 70).await;
    }
    busy.write_all(&raw::query("select pg_sleep(60)"))
        .await
        .unwrap();
    quick
        .write_all(&raw::query("select pg_sleep(0.5), 'done'"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut proxy = proxy;
    proxy.terminate();

    // A query under way when the signal came finishes within the grace
    // period, with its answer.
    let mut answer = Vec::new();
    while let Some((tag, body)) = raw::read_message(&mut quick, WAIT).await {
        answer.push((tag, body));
        if tag == b'Z' {
            break;
        }
    }
    let tags: Vec<u8> = answer.iter().map(|(t, _)| *t).collect();
    assert_eq!(tags, b"TDCZ", "the quick query's whole answer");
    // A client that leaves within the grace period leaves as usual.
    leaving.write_all(&raw::message(b'X', &[])).await.unwrap();
    assert!(closed(&mut leaving).await, "Terminate closed the session");
    // No new sessions once the signal came.
    let refused = TcpStream::connect(("127.0.0.1", port)).await;
    assert!(refused.is_err(), "the listener closed: {refused:?}");

    // The rest, on both workers, are closed with 57P01 when the grace
    // period is over; then the process exits cleanly.
    for (name, s) in [
        ("idle", &mut idle),
        ("busy", &mut busy),
        ("quick", &mut quick),
    ] {
        let errs = raw::errors(&raw::read_to_end(s, WAIT).await);
        assert_eq!(
            errs.last().map(|e| (e.0.as_str(), e.1.as_str())),
            Some(("FATAL", "57P01")),
            "{name}: {errs:?}"
        );
    }
    let status = proxy
        .exited_within(WAIT)
        .expect("onetrip exits after SIGTERM");
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_upstream_distance_delays_on_the_workers() {
    let pg = start_pg(Default::default()).await;
    // 20 ms: long enough for the worker's timer wheel (shorter delays
    // sleep on a blocking thread).
    let proxy = ProxyProcess::start(CLI, pg.addr(), &[("ONETRIP_UPSTREAM_RTT", "20ms")]);
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        proxy.port()
    );
    let client = connect(&dsn).await;
    for i in 0..3i32 {
        let row = client
            .query_one("select $1::int4 + 1", &[&i])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), i + 1);
    }
}
