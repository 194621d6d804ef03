//! `onetrip measure` end to end: the CLI as a subprocess in front of the
//! test's PostgreSQL, with psql, a shell and LangGraph's PostgresStore.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

use onetrip_tests::{PgServer, python_with_psycopg, skip, start_pg};
use serde_json::Value;

fn onetrip() -> Command {
    Command::new(env!("CARGO_BIN_EXE_onetrip-cli"))
}

/// `onetrip measure --json --upstream <pg> [extra] -- program...`, with the
/// program's PATH able to find the server's client tools.
fn measure(pg: &PgServer, extra: &[&str], program: &[&str]) -> (Output, Value) {
    let path = format!(
        "{}:{}",
        pg.bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = onetrip()
        .args(["measure", "--json", "--upstream", &pg.addr().to_string()])
        .args(extra)
        .arg("--")
        .args(program)
        .env("PATH", path)
        .env_remove("PGUSER")
        .env_remove("PGDATABASE")
        .env_remove("DATABASE_URL")
        .output()
        .expect("run onetrip measure");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "no JSON report:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    (out, json)
}

fn n(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_script_counted_and_reported() {
    let pg = start_pg(Default::default()).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Forty texts that differ only in a literal: one fingerprint in the
    // report (merged off the session's thread, past 32 distinct texts).
    let script = dir.join("forty.sql");
    let text: String = (0..40).map(|i| format!("select {i};\n")).collect();
    std::fs::write(&script, text).unwrap();
    let (out, j) = measure(
        &pg,
        &[],
        &["psql", "-X", "-q", "-f", script.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for key in [
        "client_round_trips",
        "upstream_round_trips",
        "handshake_round_trips",
        "statements",
        "coalesced_batches",
        "bytes_from_client",
        "bytes_to_client",
        "wall_seconds",
        "exit_code",
        "round_trips_saved",
        "probes_passed",
        "probes_failed",
        "top_statements",
    ] {
        assert!(j.get(key).is_some(), "{key} missing in {j}");
    }
    assert_eq!(n(&j, "client_round_trips"), 40, "{j}");
    assert_eq!(n(&j, "upstream_round_trips"), 40, "{j}");
    assert_eq!(n(&j, "statements"), 40);
    assert_eq!(j["round_trips_saved"], 0);
    assert_eq!(j["exit_code"], 0);
    assert!(n(&j, "handshake_round_trips") >= 1);
    assert!(n(&j, "bytes_from_client") > 0 && n(&j, "bytes_to_client") > 0);
    let top = &j["top_statements"][0];
    assert_eq!(top["client_round_trips"], 40, "{j}");
    assert!(
        top["statement"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("select"),
        "{j}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_exit_code_and_table() {
    let pg = start_pg(Default::default()).await;
    // The program sees the proxy, not the server.
    let (out, j) = measure(
        &pg,
        &[],
        &[
            "sh",
            "-c",
            "echo \"$PGHOST $PGPORT $PGUSER $PGDATABASE $DATABASE_URL\" >&2; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(j["exit_code"], 3);
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("127.0.0.1 "))
        .expect("env line");
    let f: Vec<&str> = line.split(' ').collect();
    assert_ne!(f[1], pg.port().to_string());
    assert_eq!(&f[2..4], ["postgres", "postgres"]);
    assert_eq!(
        f[4],
        format!("postgresql://postgres@127.0.0.1:{}/postgres", f[1])
    );

    // Without --json: the table on stderr, the program's stdout untouched.
    let out = onetrip()
        .args([
            "measure",
            "--upstream",
            &pg.addr().to_string(),
            "--",
            "echo",
            "hello",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    let err = String::from_utf8_lossy(&out.stderr);
    for label in [
        "client round trips",
        "upstream round trips",
        "round trips saved",
        "wall time",
    ] {
        assert!(err.contains(label), "{label} missing in {err}");
    }

    let out = onetrip()
        .args([
            "measure",
            "--upstream",
            &pg.addr().to_string(),
            "--",
            "/nonexistent/program",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("command not found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rtt_delays_every_upstream_round_trip() {
    let pg = start_pg(Default::default()).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let script = dir.join("many.sql");
    std::fs::write(&script, "select 1;\n".repeat(200)).unwrap();
    let psql = ["psql", "-X", "-q", "-f", script.to_str().unwrap()];
    // The fastest of three runs without the delay, against one with it: noise
    // only adds time, the delay must add at least 200 x 1 ms.
    let base = (0..3)
        .map(|_| measure(&pg, &[], &psql).1["wall_seconds"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let (out, slow) = measure(&pg, &["--rtt", "1ms"], &psql);
    assert!(out.status.success());
    assert_eq!(n(&slow, "upstream_round_trips"), 200);
    let delayed = slow["wall_seconds"].as_f64().unwrap();
    assert!(
        delayed >= base + 0.2,
        "with --rtt 1ms {delayed:.3}s, without {base:.3}s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_store_gets_cost_two_round_trips_each() {
    let Some(py) = python_with_psycopg() else {
        return skip("psycopg not installed");
    };
    let ok = Command::new(&py)
        .args(["-c", "import langgraph.store.postgres"])
        .output()
        .map(|o| o.status.success());
    if !ok.unwrap_or(false) {
        return skip(
            "langgraph-checkpoint-postgres not installed (pip install langgraph-checkpoint-postgres==3.2.0)",
        );
    }
    let pg = start_pg(Default::default()).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("py/langgraph_store_gets.py");
    let direct = format!("postgresql://postgres@127.0.0.1:{}/postgres", pg.port());
    let (out, j) = measure(
        &pg,
        &[],
        &[
            py.to_str().unwrap(),
            script.to_str().unwrap(),
            &direct,
            "200",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next(),
        Some("200")
    );
    eprintln!("langgraph 200 gets: {j}");
    assert_eq!(n(&j, "client_round_trips"), 400, "{j}");
    assert_eq!(n(&j, "statements"), 200, "{j}");
    assert!(n(&j, "upstream_round_trips") <= 400, "{j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_and_embedded_default() {
    let pg = start_pg(Default::default()).await;
    let path = format!(
        "{}:{}",
        pg.bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // --config names the upstream and the delay.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = dir.join("measure.toml");
    std::fs::write(
        &cfg,
        format!("[upstream]\naddress = \"{}\"\nrtt = \"2ms\"\n", pg.addr()),
    )
    .unwrap();
    let out = onetrip()
        .args([
            "measure",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--",
            "psql",
            "-X",
            "-c",
            "select 1",
        ])
        .env("PATH", &path)
        .env_remove("ONETRIP_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(n(&j, "upstream_round_trips"), 1, "{j}");
    assert!(j["wall_seconds"].as_f64().unwrap() >= 0.002, "{j}");
    // A bad config file: a clear error naming the key, not a run.
    std::fs::write(&cfg, "[upstream]\nrtt = \"soon\"\n").unwrap();
    let out = onetrip()
        .args(["measure", "--config", cfg.to_str().unwrap(), "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rtt"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // No upstream given: a private embedded server.
    let out = onetrip()
        .args(["measure", "--json", "--", "psql", "-X", "-c", "select 1"])
        .env("PATH", &path)
        .env_remove("ONETRIP_CONFIG")
        .env_remove("ONETRIP_UPSTREAM_ADDRESS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(
        (n(&j, "client_round_trips"), n(&j, "upstream_round_trips")),
        (1, 1),
        "{j}"
    );
}

/// `saved_by_kind` says what saved each round trip: psql's BEGIN, read,
/// COMMIT, ten times, with the defaults and with lazy reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savings_are_reported_by_kind() {
    let pg = start_pg(Default::default()).await;
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("txns.sql");
    std::fs::write(&script, "begin;\nselect 1;\ncommit;\n".repeat(10)).unwrap();
    let psql = ["psql", "-X", "-q", "-f", script.to_str().unwrap()];
    let (_, j) = measure(&pg, &[], &psql);
    assert_eq!(j["saved_by_kind"]["deferred_begin"], 10, "{j}");
    assert_eq!(j["saved_by_kind"]["local_end"], 0, "{j}");
    assert_eq!(j["saved_by_kind"]["coalesced"], 0, "{j}");
    assert_eq!(n(&j, "client_round_trips"), 30, "{j}");
    assert_eq!(n(&j, "upstream_round_trips"), 20, "{j}");

    let config = tmp.path().join("lazy.toml");
    std::fs::write(&config, "[transactions]\nlazy_reads = true\n").unwrap();
    let (_, j) = measure(&pg, &["-c", config.to_str().unwrap()], &psql);
    assert_eq!(j["saved_by_kind"]["local_end"], 10, "{j}");
    assert_eq!(n(&j, "lazy_reads"), 10, "{j}");
    assert_eq!(n(&j, "upstream_round_trips"), 10, "{j}");
}
