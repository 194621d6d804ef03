//! What the pin scan costs per statement: a transaction pooler runs it on
//! every statement of a session, so it should stay near the cost of lexing.
//!
//!     cargo bench -p onetrip-planner --bench pins
//!
//! On a shared machine times swing; instructions don't. Per call, under
//! callgrind (the binary is the one the command above prints):
//!
//!     PINS_BENCH_CALLS=1000 PINS_BENCH_ONLY="pgbench select" valgrind \
//!         --tool=callgrind --toggle-collect='*Pins::of*' target/release/deps/pins-...
//!
//! then divide the "Collected" count by 1000.

use std::hint::black_box;
use std::time::{Duration, Instant};

use onetrip_planner::classify::{Pins, session_set};

const STATEMENTS: &[(&str, &str)] = &[
    (
        "pgbench select",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 42",
    ),
    (
        "pgbench update",
        "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 3",
    ),
    (
        "pgbench insert",
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
         VALUES (1, 2, 3, 4, CURRENT_TIMESTAMP)",
    ),
    (
        "calls",
        "SELECT lower(name), count(*), coalesce(sum(x), 0) FROM t \
         WHERE created > now() - interval '1 day' GROUP BY 1",
    ),
    (
        "cypher",
        "SELECT * FROM cypher('g', $$ MATCH (n:Person) RETURN n.name $$) AS (name agtype)",
    ),
];

/// Nanoseconds per call of `f`, the best of a few rounds. With
/// `PINS_BENCH_CALLS=n`, exactly n calls in one round: for counting
/// instructions under callgrind, where timing means little.
fn per_call(mut f: impl FnMut()) -> f64 {
    let fixed = std::env::var("PINS_BENCH_CALLS").ok();
    let fixed: Option<u32> = fixed.and_then(|n| n.parse().ok());
    let rounds = if fixed.is_some() { 1 } else { 5 };
    let mut best = Duration::MAX;
    let mut n = fixed.unwrap_or(1);
    // Enough calls for a round to take about 20 ms.
    while fixed.is_none() {
        let start = Instant::now();
        for _ in 0..n {
            f();
        }
        if start.elapsed() > Duration::from_millis(20) || n >= 1 << 24 {
            break;
        }
        n *= 2;
    }
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..n {
            f();
        }
        best = best.min(start.elapsed());
    }
    best.as_nanos() as f64 / f64::from(n)
}

fn main() {
    println!(
        "{:<16} {:>10} {:>16}",
        "statement", "Pins::of", "session_set"
    );
    // PINS_BENCH_ONLY=label: that statement alone.
    let only = std::env::var("PINS_BENCH_ONLY").ok();
    for (label, sql) in STATEMENTS {
        if only.as_deref().is_some_and(|o| o != *label) {
            continue;
        }
        let pins = per_call(|| {
            black_box(Pins::of(black_box(sql)));
        });
        // For scale: the replayable-SET check, which also lexes the text once.
        let set = per_call(|| {
            black_box(session_set(black_box(sql)));
        });
        println!("{label:<16} {pins:>8.0}ns {set:>14.0}ns");
    }
}
