//! Benchmark (not a test): LangGraph PostgresStore `get` and `search` through
//! onetrip with coalescing on and off, at simulated upstream distances.
//!
//! usage: cargo run --release -p onetrip-tests --bin bench-coalesce [ROUNDS]
//!
//! One private PostgreSQL, four in-process proxies (rtt 1ms / 0.5ms x
//! coalescing on / off). Rounds alternate between the proxies; each cell is
//! the median of its rounds, so the ratios come from one run side by side.

use std::{path::PathBuf, process::Command};

use onetrip_tests::{PgOptions, proxy_config, python_with_psycopg, start_pg};

const GETS: usize = 200;
const SEARCHES: usize = 50;

fn py_run(py: &PathBuf, args: &[&str]) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("py/bench_langgraph.py");
    let out = Command::new(py)
        .arg(script)
        .args(args)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn field(json: &str, key: &str) -> f64 {
    let at = json.find(&format!("\"{key}\": ")).expect("key") + key.len() + 4;
    json[at..]
        .split([',', '}'])
        .next()
        .and_then(|v| v.trim().parse().ok())
        .expect("number")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let Some(py) = python_with_psycopg() else {
        eprintln!("needs python3 with psycopg and langgraph-checkpoint-postgres==3.2.0");
        std::process::exit(2);
    };
    let pg = start_pg(PgOptions::default()).await;
    let dsn = |port: u16| format!("postgresql://postgres@127.0.0.1:{port}/postgres");
    py_run(&py, &[&dsn(pg.port()), "setup"]);
    let mut proxies = Vec::new();
    for rtt in ["1ms", "0.5ms"] {
        for on in [true, false] {
            let mut cfg = proxy_config(&pg);
            cfg.upstream.rtt = onetrip::config::duration::parse(rtt).expect("rtt");
            cfg.coalesce.single_read = on;
            let p = onetrip::Proxy::start(cfg).await.expect("proxy");
            proxies.push((rtt, on, p));
        }
    }
    let mut times = vec![(Vec::new(), Vec::new()); proxies.len()];
    for round in 0..rounds {
        for (i, (rtt, on, p)) in proxies.iter().enumerate() {
            let (g, s) = (GETS.to_string(), SEARCHES.to_string());
            let port = p.local_addr().port();
            let py = py.clone();
            let out =
                tokio::task::spawn_blocking(move || py_run(&py, &[&dsn(port), "run", &g, &s]))
                    .await
                    .expect("run");
            times[i].0.push(field(&out, "get_s"));
            times[i].1.push(field(&out, "search_s"));
            eprintln!("round {round} rtt={rtt} coalesce={on}: {}", out.trim());
        }
    }
    println!(
        "\n{GETS} PostgresStore.get and {SEARCHES} search, median of {rounds} alternating rounds"
    );
    println!(
        "{:<8} {:>12} {:>12} {:>8} {:>14} {:>14} {:>8}",
        "rtt", "get on (s)", "get off (s)", "speedup", "search on (s)", "search off (s)", "speedup"
    );
    for pair in 0..2 {
        let (on, off) = (pair * 2, pair * 2 + 1);
        let (gon, goff) = (median(&mut times[on].0), median(&mut times[off].0));
        let (son, soff) = (median(&mut times[on].1), median(&mut times[off].1));
        println!(
            "{:<8} {:>12.4} {:>12.4} {:>7.2}x {:>14.4} {:>14.4} {:>7.2}x",
            proxies[on].0,
            gon,
            goff,
            goff / gon,
            son,
            soff,
            soff / son
        );
    }
    for (rtt, on, p) in &proxies {
        let t = p.stats().total();
        println!(
            "rtt={rtt} coalesce={on}: client round trips {}, upstream {}, coalesced {}, probes passed {}",
            t.client_round_trips, t.upstream_round_trips, t.coalesced_batches, t.probes_passed
        );
    }
}
