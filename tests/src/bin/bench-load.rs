//! Load through a proxy (or a server), bounded in clients and time, every
//! answer checked: `bench/load.sh` runs it through onetrip and PgBouncer.
//!
//! bench-load TARGET_PORT SETUP_PORT PROXY_PID [CLIENTS SECONDS SLOW DROPOUTS]
//!
//! CLIENTS workers each own one row of `load_rows` and, in a loop, read it
//! (alone, and inside BEGIN/COMMIT) and add one to it; each knows the value
//! the row must hold and counts every answer that differs as wrong. A
//! worker whose connection breaks (the upstream restarted) reconnects and
//! reads its row again: whether its last COMMIT landed is then unknown, not
//! wrong. SLOW clients read a 16 MB result a few KB at a time; DROPOUTS
//! clients start one and hang up in the middle, over and over. Printed:
//! transactions, errors by SQLSTATE, wrong answers, the proxy's peak RSS,
//! its RSS per idle session and its CPU time (PROXY_PID 0: not measured). With
//! LOAD_RESTART set, that shell command runs halfway through the run (to
//! restart the upstream).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use onetrip_tests::raw;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

#[derive(Default)]
struct Tally {
    transactions: AtomicU64,
    wrong: AtomicU64,
    reconnects: AtomicU64,
    slow_bytes: AtomicU64,
    slow_whole: AtomicU64,
    slow_cut: AtomicU64,
    dropouts: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    async fn error(&self, e: &tokio_postgres::Error) {
        let key = match e.code() {
            Some(c) => c.code().to_owned(),
            None if e.is_closed() => "connection closed".to_owned(),
            None => "connection".to_owned(),
        };
        *self.errors.lock().await.entry(key).or_default() += 1;
    }
}

fn dsn(port: u16) -> String {
    format!("host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=10")
}

async fn connect(port: u16) -> Result<Client, tokio_postgres::Error> {
    let (c, conn) = tokio_postgres::connect(&dsn(port), NoTls).await?;
    tokio::spawn(conn);
    Ok(c)
}

/// The row's value as the server has it now.
async fn value(c: &Client, id: i32) -> Result<i64, tokio_postgres::Error> {
    let row = c
        .query_one("select v from load_rows where id = $1", &[&id])
        .await?;
    Ok(row.get(0))
}

/// One unit of work: a read, a transaction that reads and adds one, a
/// read. Returns the row's new value.
async fn work(c: &Client, id: i32, expect: i64, t: &Tally) -> Result<i64, tokio_postgres::Error> {
    if value(c, id).await? != expect {
        t.wrong.fetch_add(1, Relaxed);
    }
    c.batch_execute("begin").await?;
    let inside = value(c, id).await?;
    let row = c
        .query_one(
            "update load_rows set v = v + 1 where id = $1 returning v",
            &[&id],
        )
        .await?;
    let added: i64 = row.get(0);
    c.batch_execute("commit").await?;
    if inside != expect || added != expect + 1 {
        t.wrong.fetch_add(1, Relaxed);
    }
    t.transactions.fetch_add(1, Relaxed);
    Ok(added)
}

/// Returns the value the row must hold at the end, if the worker knows it.
async fn worker(port: u16, id: i32, until: Instant, t: Arc<Tally>) -> Option<i64> {
    let mut known: Option<i64> = None;
    let mut client: Option<Client> = None;
    while Instant::now() < until {
        let c = match client.take() {
            Some(c) => c,
            None => match connect(port).await {
                Ok(c) => c,
                Err(e) => {
                    t.error(&e).await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        let expect = match known {
            Some(v) => v,
            None => match value(&c, id).await {
                Ok(v) => v,
                Err(e) => {
                    t.error(&e).await;
                    continue;
                }
            },
        };
        match work(&c, id, expect, &t).await {
            Ok(v) => {
                known = Some(v);
                client = Some(c);
            }
            Err(e) => {
                t.error(&e).await;
                // Whether the COMMIT landed is unknown: read the row again
                // on a new connection.
                known = None;
                t.reconnects.fetch_add(1, Relaxed);
            }
        }
    }
    known
}

const BIG: &str = "select repeat('x', 1000) from generate_series(1, 16000)";
/// Its bytes: RowDescription, 16,000 DataRows of 1,011 bytes, the end.
const WHOLE: u64 = 16_000 * 1_011 + 56;

/// Reads a 16 MB result a few KB at a time, checking its row count.
async fn slow_reader(port: u16, until: Instant, t: Arc<Tally>) {
    while Instant::now() < until {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if !ready(&mut s).await || s.try_write(&raw::query(BIG)).is_err() {
            continue;
        }
        let mut buf = vec![0u8; 4096];
        let mut total = 0u64;
        let mut cut = true;
        while Instant::now() < until {
            match tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {
                    total += n as u64;
                    t.slow_bytes.fetch_add(n as u64, Relaxed);
                    if total >= WHOLE {
                        cut = false;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                _ => break,
            }
        }
        if cut && Instant::now() < until {
            t.slow_cut.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
        } else if !cut {
            t.slow_whole.fetch_add(1, Relaxed);
        }
    }
}

/// Starts a big result and hangs up in the middle, again and again.
async fn dropout(port: u16, until: Instant, t: Arc<Tally>) {
    while Instant::now() < until {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if !ready(&mut s).await || s.try_write(&raw::query(BIG)).is_err() {
            continue;
        }
        let mut buf = vec![0u8; 65536];
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        drop(s);
        t.dropouts.fetch_add(1, Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Startup and trust authentication up to the first ReadyForQuery.
async fn ready(s: &mut TcpStream) -> bool {
    use tokio::io::AsyncWriteExt;
    if s.write_all(&raw::startup("postgres", "postgres"))
        .await
        .is_err()
    {
        return false;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // Whole messages in `buf`: look for ReadyForQuery or an error.
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() < len + 1 {
                break;
            }
            match buf[0] {
                b'Z' => return true,
                b'E' => return false,
                _ => {
                    buf.drain(..len + 1);
                }
            }
        }
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    }
}

/// Resident set size of `pid` now and at its peak, in KiB.
fn rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

/// CPU time `pid` has used, user and system, in clock ticks (100 a second
/// on Linux).
fn cpu(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which may hold spaces: utime is the
    // 14th field of the line, the 12th after the name.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    (
        f.get(11).copied().unwrap_or(0),
        f.get(12).copied().unwrap_or(0),
    )
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: u64| -> u64 {
        args.get(i)
            .map(|a| a.parse().expect("a number"))
            .unwrap_or(default)
    };
    let (port, setup_port, pid) = (arg(0, 6432) as u16, arg(1, 5432) as u16, arg(2, 0) as u32);
    let (clients, seconds, slow, drops) = (arg(3, 1000), arg(4, 120), arg(5, 20), arg(6, 50));

    let setup = connect(setup_port).await.expect("setup connection");
    setup
        .batch_execute(&format!(
            "drop table if exists load_rows; \
             create table load_rows(id int primary key, v bigint not null); \
             insert into load_rows select g, 0 from generate_series(1, {clients}) g"
        ))
        .await
        .expect("setup");

    // RSS per idle session: the proxy with CLIENTS idle sessions.
    let before = rss(pid).0;
    let mut idle = Vec::new();
    for _ in 0..clients {
        // Idle after a query: holding a server connection through either
        // proxy (PgBouncer's session mode takes one at the first query).
        match connect(port).await {
            Ok(c) if c.simple_query("select 1").await.is_ok() => idle.push(c),
            Ok(_) => eprintln!("idle connection: select 1 failed"),
            Err(e) => {
                eprintln!("idle connection failed: {e}");
                break;
            }
        }
    }
    let with_idle = rss(pid).0;
    let per_idle = (with_idle.saturating_sub(before)) as f64 / idle.len().max(1) as f64;
    drop(idle);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let t = Arc::new(Tally::default());
    let until = Instant::now() + Duration::from_secs(seconds);
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while !done.load(Relaxed) {
                peak = peak.max(rss(pid).0);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };
    let cpu_before = cpu(pid);
    let workers: Vec<_> = (1..=clients as i32)
        .map(|id| tokio::spawn(worker(port, id, until, t.clone())))
        .collect();
    // The upstream restarts halfway through the run, when asked to.
    let restart = std::env::var("LOAD_RESTART").ok().map(|cmd| {
        let at = until - Duration::from_secs(seconds / 2);
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            eprintln!("restarting the upstream: {cmd}");
            let status = tokio::process::Command::new("sh")
                .args(["-c", &cmd])
                .status()
                .await;
            eprintln!("restarted: {status:?}");
        })
    });
    let mut tasks = Vec::new();
    for _ in 0..slow {
        tasks.push(tokio::spawn(slow_reader(port, until, t.clone())));
    }
    for _ in 0..drops {
        tasks.push(tokio::spawn(dropout(port, until, t.clone())));
    }
    let mut known = Vec::new();
    for (i, w) in workers.into_iter().enumerate() {
        if let Ok(Some(v)) = w.await {
            known.push((i as i32 + 1, v));
        }
    }
    for task in tasks {
        let _ = task.await;
    }
    let cpu_after = cpu(pid);
    if let Some(r) = restart {
        let _ = r.await;
    }
    done.store(true, Relaxed);
    let peak = watch.await.unwrap_or(0);

    // Every row must hold what its worker last saw.
    let check = connect(setup_port).await.expect("check connection");
    let rows = check
        .query("select id, v from load_rows order by id", &[])
        .await
        .expect("check");
    let now: BTreeMap<i32, i64> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let lost = known
        .iter()
        .filter(|(id, v)| now.get(id) != Some(v))
        .count();
    println!("clients {clients}, {seconds} s, {slow} slow readers, {drops} dropping out");
    let txns = t.transactions.load(Relaxed);
    println!(
        "transactions {txns} ({:.0} per second)",
        txns as f64 / seconds as f64
    );
    println!("wrong answers {}", t.wrong.load(Relaxed));
    println!("reconnects after errors {}", t.reconnects.load(Relaxed));
    println!(
        "rows that differ from what their worker last saw: {lost} (of {} known)",
        known.len()
    );
    println!(
        "slow readers read {} MB: {} whole results, {} cut short; dropouts {}",
        t.slow_bytes.load(Relaxed) / 1_000_000,
        t.slow_whole.load(Relaxed),
        t.slow_cut.load(Relaxed),
        t.dropouts.load(Relaxed)
    );
    for (code, n) in t.errors.lock().await.iter() {
        println!("errors {code}: {n}");
    }
    if pid != 0 {
        let (_, hwm) = rss(pid);
        println!(
            "proxy RSS: peak {} MB during the run (VmHWM {} MB), {:.1} KB per idle session",
            peak / 1024,
            hwm / 1024,
            per_idle
        );
        let (u, s) = (
            cpu_after.0.saturating_sub(cpu_before.0),
            cpu_after.1.saturating_sub(cpu_before.1),
        );
        println!(
            "proxy CPU during the run: {:.1} s user, {:.1} s system, {:.1} ms per 1,000 transactions",
            u as f64 / 100.0,
            s as f64 / 100.0,
            (u + s) as f64 * 10.0 * 1000.0 / txns.max(1) as f64
        );
    }
}
