//! Random pipelines sent to PostgreSQL and through onetrip (with its
//! defaults, with lazy reads, with nothing saved: no coalescing and no
//! deferred BEGIN, and pooling transactions with lazy reads): the same
//! answers at the same points and the same tables afterwards, for every
//! case.
//!
//! `ONETRIP_PIPELINE_CASES` (default 500) and `ONETRIP_PIPELINE_SEED`
//! (default fixed, so CI runs the same cases every time) change what runs;
//! `tests/pipelines.sh` runs a long series with a fresh seed. A failing
//! case is shrunk to the fewest operations that still fail, and printed
//! with its seed.

use onetrip::Proxy;
use onetrip_tests::{
    Env,
    pipelines::{Pipeline, Rng},
    script::{Mismatch, Setup, Target, compare},
};

/// Cases run at once, each on a schema of its own.
const LANES: usize = 8;

fn setup(lane: usize) -> Setup {
    Setup {
        params: vec![("options".into(), format!("-c search_path=lane{lane}"))],
        // Truncated, not created anew: a new table would have a new OID,
        // which RowDescription carries.
        reset: "truncate t; insert into t select g, g * 10 from generate_series(1, 5) g".into(),
        check: "select id, v from t order by id".into(),
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_pipelines_match_postgres() {
    let env = Env::start().await;
    let lazy: Proxy = env.start_proxy(|c| c.transactions.lazy_reads = true).await;
    let plain: Proxy = env
        .start_proxy(|c| {
            c.coalesce.single_read = false;
            c.transactions.defer_begin = false;
        })
        .await;
    let pooled: Proxy = env
        .start_proxy(|c| {
            c.pool.mode = onetrip::config::PoolMode::Transaction;
            c.transactions.lazy_reads = true;
        })
        .await;
    let targets = vec![
        Target::new("PostgreSQL", env.pg.port()),
        Target::new("onetrip", env.proxy_port()),
        Target::new("onetrip with lazy reads", lazy.local_addr().port()),
        Target::new("onetrip with nothing saved", plain.local_addr().port()),
        Target::new("onetrip pooling transactions", pooled.local_addr().port()),
    ];
    let schemas: String = (0..LANES)
        .map(|l| {
            format!("create schema lane{l}; create table lane{l}.t(id int primary key, v int);")
        })
        .collect();
    env.psql_ok(false, &["-c", &schemas]);

    let cases = env_number("ONETRIP_PIPELINE_CASES", 500) as usize;
    let seed = env_number("ONETRIP_PIPELINE_SEED", 20_261_204);
    let mut lanes = tokio::task::JoinSet::new();
    for lane in 0..LANES {
        let targets = targets.clone();
        lanes.spawn(async move {
            // Lane l runs cases l, l + LANES, ...: each case's pipeline
            // depends only on the seed and its number.
            for case in (lane..cases).step_by(LANES) {
                let pipeline = Pipeline::random(&mut Rng::new(seed ^ case as u64));
                if std::env::var_os("DEBUG_CASES").is_some() {
                    eprintln!("case {case}: {}", pipeline.script());
                }
                if let Err(m) = compare(&targets, &setup(lane), &pipeline.script()).await {
                    let (small, m) = shrink(&targets, &setup(lane), pipeline, m).await;
                    panic!(
                        "case {case} of seed {seed} (ONETRIP_PIPELINE_SEED={seed}), shrunk to {} operations:\n{m}",
                        small.ops.len()
                    );
                }
            }
        });
    }
    while let Some(done) = lanes.join_next().await {
        if let Err(e) = done {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    eprintln!("random pipelines: {cases} cases of seed {seed}, all identical to PostgreSQL");
}

/// Drops operations while the case still fails.
async fn shrink(
    targets: &[Target],
    setup: &Setup,
    mut pipeline: Pipeline,
    mut mismatch: Box<Mismatch>,
) -> (Pipeline, Box<Mismatch>) {
    let mut i = 0;
    while let Some(smaller) = pipeline.without(i) {
        match compare(targets, setup, &smaller.script()).await {
            Err(m) => {
                pipeline = smaller;
                mismatch = m;
            }
            Ok(_) => i += 1,
        }
    }
    (pipeline, mismatch)
}
