//! The public Cypher corpus (`tests/data/cypher_public`: 76 statements with
//! AGE's recorded answers) through onetrip with rewriting on, checked by
//! the corpus's own `check.py`: same rows, column names and errors as AGE.

use std::path::{Path, PathBuf};
use std::process::Command;

use onetrip::Proxy;
use onetrip_tests::{age::start_age_pg, proxy_config, python_with_psycopg, workers};

/// The graph `gen_graph.py` must build (its README's fingerprint).
const FINGERPRINT: &str = "9db4ae244eff62337244db57c9833c13a53b9d2a5d9e0e4ff81a6c5cdd29a4ce";
/// Fewest statements the proxy must compile rather than leave to AGE.
const MIN_COMPILED: u64 = 60;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/cypher_public")
}

/// Runs a corpus script; panics with its output when it fails.
fn run_script(py: &Path, script: &str, args: &[String]) -> String {
    let out = Command::new(py)
        .arg(corpus_dir().join(script))
        .args(args)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_corpus_through_onetrip() {
    let dir = corpus_dir();
    let corpus = std::fs::read_to_string(dir.join("corpus.jsonl"))
        .unwrap_or_else(|e| panic!("public corpus missing in {}: {e}", dir.display()));
    let total = corpus.lines().filter(|l| !l.trim().is_empty()).count();
    for f in ["gen_graph.py", "check.py", "expected"] {
        assert!(dir.join(f).exists(), "public corpus incomplete: no {f}");
    }
    let Some(pg) = start_age_pg("public cypher corpus").await else {
        return;
    };
    let py = python_with_psycopg()
        .expect("the public corpus needs Python 3 with psycopg 3 (.ci/run installs it)");
    let direct = ["--host", "127.0.0.1", "--port", &pg.port().to_string()];
    let mut args: Vec<String> = direct.iter().map(|s| s.to_string()).collect();
    args.extend(["--user", "postgres", "--create-db"].map(String::from));
    let report = {
        let py = py.clone();
        tokio::task::spawn_blocking(move || run_script(&py, "gen_graph.py", &args))
            .await
            .expect("gen_graph task")
    };
    assert!(
        report.contains(FINGERPRINT),
        "gen_graph.py built another graph:\n{report}"
    );

    let workers = workers();
    let proxy = Proxy::start_on(proxy_config(&pg), workers.handles())
        .await
        .expect("start proxy");
    let args: Vec<String> = ["--host", "127.0.0.1", "--port"]
        .iter()
        .map(|s| s.to_string())
        .chain([proxy.local_addr().port().to_string()])
        .collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&py)
            .arg(corpus_dir().join("check.py"))
            .args(&args)
            .output()
            .expect("run check.py")
    })
    .await
    .expect("check task");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let compiled = proxy.stats().total().rewritten_queries;
    let last = stdout.lines().last().unwrap_or_default();
    onetrip_tests::age::report(&format!(
        "public corpus: {last} ({compiled} compiled by onetrip)"
    ));
    assert!(
        out.status.success() && last == format!("{total} passed, 0 failed"),
        "check.py through onetrip:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        compiled >= MIN_COMPILED,
        "only {compiled} statements compiled, fewer than {MIN_COMPILED}"
    );
    proxy.shutdown(std::time::Duration::from_secs(5)).await;
}
