//! Benchmark (not a test): one client's latency through each target,
//! interleaved query by query.
//!
//! usage: bench-latency [--runs R] [--seconds S] [--block B] [--pause-us P] [--extended] NAME=HOST:PORT ...
//!
//! What `pgbench -S -c 1` measures (one client, one query in flight), but the
//! targets take turns on every query instead of every run: each round sends
//! one `SELECT abalance FROM pgbench_accounts WHERE aid = ...` to each
//! target, in a new random order each round, with the same aid for all.
//! A shared machine's slow spells (other tenants, stolen CPU) then hit every
//! target of a round alike.
//!
//! The order is shuffled, not rotated: a target's latency depends on which
//! target the client talked to just before it (where that one's processes
//! left the CPUs), by up to 30 us on a 2-CPU VM. Rotating keeps every
//! target behind the same neighbour for the whole run, which turned that
//! into a fixed bias of one proxy against another; shuffled, each target
//! follows every other equally often.
//!
//! What interleaving can't even out is placement: which CPUs the client, a
//! proxy's thread and the server's backend settle on. It holds for as long
//! as the connections do and moves a target's latency by 10-20 us, so one
//! long run measures mostly its own placement. Hence R short runs (default
//! 30 of 2 s), each on new connections; the result is the median over runs
//! of each run's median per-round difference, with a 95% confidence interval
//! over runs (distribution-free, from order statistics).
//!
//! With `--block B`, each target gets B queries in a row on its turn, and
//! the round's latency for it is their median. Taking turns on every query
//! leaves each proxy's code and data to be fetched afresh from memory on
//! every query, since the others ran in between; that costs a proxy with a
//! larger footprint more than it does under `pgbench -c 1`, where the same
//! proxy serves every query. A block's median is the warm latency.
//!
//! With `--pause-us P`, the client waits P microseconds before each query,
//! as an application does between queries: CPUs that go idle meanwhile
//! must be woken for the query, which a tight loop never asks of them.
//!
//! Needs trust authentication and a database initialised by `pgbench -i`.

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::ExitCode,
    time::{Duration, Instant},
};

struct Target {
    name: String,
    stream: TcpStream,
    buf: Vec<u8>,
    /// Round-trip times in nanoseconds, one per round.
    lat: Vec<u64>,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-latency: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut runs = 30usize;
    let mut seconds = 2u64;
    let mut extended = false;
    let mut block = 1usize;
    let mut pause = Duration::ZERO;
    let mut specs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = |flag: &str| {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{flag} needs a positive whole number"))
        };
        match a.as_str() {
            "--runs" => runs = number("--runs")? as usize,
            "--seconds" => seconds = number("--seconds")?,
            "--block" => block = number("--block")? as usize,
            "--pause-us" => pause = Duration::from_micros(number("--pause-us")?),
            "--extended" => extended = true,
            _ => specs.push(
                a.split_once('=')
                    .map(|(n, addr)| (n.to_owned(), addr.to_owned()))
                    .ok_or_else(|| format!("expected NAME=HOST:PORT, got {a:?}"))?,
            ),
        }
    }
    if specs.is_empty() {
        return Err(
            "usage: bench-latency [--runs R] [--seconds S] [--block B] [--pause-us P] [--extended] NAME=HOST:PORT ..."
                .into(),
        );
    }
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut results = Vec::new();
    for run in 0..runs {
        let mut targets = connect(&specs)?;
        let rows = scale(&mut targets[0])? * 100_000;
        interleave(
            &mut targets,
            rows,
            &mut rng,
            seconds,
            block,
            pause,
            extended,
        )?;
        for t in &mut targets {
            // Terminate, so the server's backend is gone before the next run.
            let _ = t.stream.write_all(&[b'X', 0, 0, 0, 4]);
        }
        eprintln!("run {}/{runs}: {} rounds", run + 1, targets[0].lat.len());
        results.push(targets.into_iter().map(|t| t.lat).collect::<Vec<_>>());
    }
    let names: Vec<&str> = specs.iter().map(|(n, _)| n.as_str()).collect();
    report(&names, &results, seconds, block, pause, extended);
    Ok(())
}

fn connect(specs: &[(String, String)]) -> Result<Vec<Target>, String> {
    let mut targets = Vec::new();
    for (name, addr) in specs {
        let stream = TcpStream::connect(addr).map_err(|e| format!("{name} ({addr}): {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut t = Target {
            name: name.clone(),
            stream,
            buf: Vec::with_capacity(8192),
            lat: Vec::new(),
        };
        startup(&mut t)?;
        targets.push(t);
    }
    Ok(targets)
}

/// Rounds of `block` queries to each target, for `seconds`; each target's
/// latency for the round is the median of its block.
fn interleave(
    targets: &mut [Target],
    rows: u64,
    rng: &mut u64,
    seconds: u64,
    block: usize,
    pause: Duration,
    extended: bool,
) -> Result<(), String> {
    let mut msgs: Vec<Vec<u8>> = vec![Vec::with_capacity(256); block];
    let mut lat = Vec::with_capacity(block);
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut order: Vec<usize> = (0..targets.len()).collect();
    while Instant::now() < end {
        for msg in &mut msgs {
            query(msg, next(rng) % rows + 1, extended);
        }
        // Fisher-Yates: every order equally likely.
        for i in (1..order.len()).rev() {
            order.swap(i, (next(rng) % (i as u64 + 1)) as usize);
        }
        for &i in &order {
            let t = &mut targets[i];
            lat.clear();
            for msg in &msgs {
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
                let start = Instant::now();
                exchange(t, msg)?;
                lat.push(start.elapsed().as_nanos() as u64);
            }
            lat.sort_unstable();
            t.lat.push(lat[lat.len() / 2]);
        }
    }
    Ok(())
}

/// xorshift64: a cheap, fixed sequence (account ids, orders).
fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// `results[run][target]`: that run's latencies, one per round.
fn report(
    names: &[&str],
    results: &[Vec<Vec<u64>>],
    seconds: u64,
    block: usize,
    pause: Duration,
    extended: bool,
) {
    let mode = if extended { "extended" } else { "simple" };
    let rounds: usize = results.iter().map(|r| r[0].len()).sum();
    let us = |ns: i64| ns as f64 / 1e3;
    let turns = match block {
        1 => "query by query".to_owned(),
        b => format!("{b} queries at a time (a round's latency: their median)"),
    };
    println!(
        "one client, {mode} protocol: {} runs of {seconds}s, {rounds} rounds, targets interleaved {turns}",
        results.len()
    );
    if !pause.is_zero() {
        println!("the client waits {pause:?} before each query");
    }
    println!("median latency (median over runs of each run's median, us):");
    for (j, name) in names.iter().enumerate() {
        let mut per_run: Vec<i64> = results
            .iter()
            .map(|r| {
                let mut v = r[j].clone();
                v.sort_unstable();
                v[v.len() / 2] as i64
            })
            .collect();
        per_run.sort_unstable();
        println!("  {name:10} {:7.1}", us(per_run[per_run.len() / 2]));
    }
    println!("row minus column: median over runs of each run's median per-round difference,");
    println!("its 95% CI, and the middle half of the runs (us):");
    for (i, a) in names.iter().enumerate() {
        for (j, b) in names.iter().enumerate().skip(i + 1) {
            let mut per_run: Vec<i64> = results
                .iter()
                .map(|r| {
                    let mut d: Vec<i64> = r[i]
                        .iter()
                        .zip(&r[j])
                        .map(|(x, y)| *x as i64 - *y as i64)
                        .collect();
                    d.sort_unstable();
                    d[d.len() / 2]
                })
                .collect();
            per_run.sort_unstable();
            let (lo, mid, hi) = median_ci(&per_run);
            let n = per_run.len();
            println!(
                "  {a:10} - {b:10} {:+7.1}  CI [{:+.1}, {:+.1}]  q1-q3 [{:+.1}, {:+.1}]",
                us(mid),
                us(lo),
                us(hi),
                us(per_run[n / 4]),
                us(per_run[(3 * n) / 4])
            );
        }
    }
}

/// The median of sorted `d` and its 95% confidence interval: the order
/// statistics at n/2 -+ 0.98 sqrt(n) (the normal approximation to the
/// binomial; rough below 20 runs).
fn median_ci(d: &[i64]) -> (i64, i64, i64) {
    let n = d.len();
    let half = (0.98 * (n as f64).sqrt()).ceil() as usize;
    let lo = (n / 2).saturating_sub(half);
    let hi = (n / 2 + half).min(n - 1);
    (d[lo], d[n / 2], d[hi])
}

fn startup(t: &mut Target) -> Result<(), String> {
    let msg = onetrip_tests::raw::startup_with(&[
        ("user", "postgres"),
        ("database", "postgres"),
        ("application_name", "bench-latency"),
    ]);
    exchange(t, &msg)
}

/// `pgbench_branches` holds one row per unit of scale.
fn scale(t: &mut Target) -> Result<u64, String> {
    let mut msg = vec![b'Q'];
    let sql = b"SELECT count(*) FROM pgbench_branches\0";
    msg.extend_from_slice(&((sql.len() + 4) as u32).to_be_bytes());
    msg.extend_from_slice(sql);
    exchange(t, &msg)?;
    // The DataRow's one column: its length, then its text.
    let (_, row) = messages(&t.buf)
        .find(|(tag, _)| *tag == b'D')
        .ok_or("no row from pgbench_branches")?;
    std::str::from_utf8(row.get(6..).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n: &u64| n > 0)
        .ok_or_else(|| "pgbench_branches is empty: run pgbench -i first".into())
}

/// The complete messages at the start of `buf`: (type, body).
fn messages(buf: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let head = buf.get(at..at + 5)?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let body = buf.get(at + 5..(at + 1 + len).max(at + 5))?;
        at += 1 + len.max(4);
        Some((head[0], body))
    })
}

/// The messages `pgbench -S` sends for one transaction, in either protocol.
fn query(msg: &mut Vec<u8>, aid: u64, extended: bool) {
    fn put(msg: &mut Vec<u8>, tag: u8, parts: &[&[u8]]) {
        msg.push(tag);
        let len: usize = 4 + parts.iter().map(|p| p.len()).sum::<usize>();
        msg.extend_from_slice(&(len as u32).to_be_bytes());
        for p in parts {
            msg.extend_from_slice(p);
        }
    }
    msg.clear();
    if !extended {
        let sql = format!("SELECT abalance FROM pgbench_accounts WHERE aid = {aid};\0");
        put(msg, b'Q', &[sql.as_bytes()]);
        return;
    }
    let aid = aid.to_string();
    let sql = b"SELECT abalance FROM pgbench_accounts WHERE aid = $1;\0";
    put(msg, b'P', &[b"\0", sql, &0u16.to_be_bytes()]);
    let param_len = (aid.len() as u32).to_be_bytes();
    // Bind: unnamed portal and statement, no format codes, one text
    // parameter, no result format codes.
    put(
        msg,
        b'B',
        &[
            b"\0\0",
            &0u16.to_be_bytes(),
            &1u16.to_be_bytes(),
            &param_len,
            aid.as_bytes(),
            &0u16.to_be_bytes(),
        ],
    );
    put(msg, b'D', &[b"P\0"]);
    put(msg, b'E', &[b"\0", &0u32.to_be_bytes()]);
    put(msg, b'S', &[]);
}

/// Sends `msg` and reads up to and including ReadyForQuery.
fn exchange(t: &mut Target, msg: &[u8]) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("{}: {e}", t.name);
    t.stream.write_all(msg).map_err(fail)?;
    t.buf.clear();
    loop {
        for (tag, body) in messages(&t.buf) {
            match tag {
                b'Z' => return Ok(()),
                b'E' => {
                    let text = String::from_utf8_lossy(body).replace('\0', " ");
                    return Err(format!("{}: server error: {text}", t.name));
                }
                b'R' if body != [0, 0, 0, 0] => {
                    return Err(format!(
                        "{}: needs a password; use trust authentication",
                        t.name
                    ));
                }
                _ => {}
            }
        }
        let mut chunk = [0u8; 8192];
        let n = t.stream.read(&mut chunk).map_err(fail)?;
        if n == 0 {
            return Err(format!("{}: connection closed", t.name));
        }
        t.buf.extend_from_slice(&chunk[..n]);
    }
}
