//! psycopg 3 scripts (tests/py/pg_*.py) print the same JSON through the proxy
//! as direct.

use onetrip_tests::{Env, python_with_psycopg, run_py, skip};

/// Runs `script` direct, then through the proxy, and returns both outputs.
async fn both(
    script: &str,
    extra: impl Fn(&Env) -> Vec<String>,
) -> Option<(serde_json::Value, serde_json::Value)> {
    let Some(py) = python_with_psycopg() else {
        skip("psycopg not installed");
        return None;
    };
    let env = Env::start().await;
    let mut outs = Vec::new();
    for via in [false, true] {
        let mut args = vec![env.dsn(via)];
        args.extend(extra(&env));
        let (py, script) = (py.clone(), script.to_owned());
        let out = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_py(&py, &script, &args)
        })
        .await
        .unwrap();
        outs.push(serde_json::from_str::<serde_json::Value>(out.trim()).expect("JSON output"));
    }
    let proxied = outs.pop().unwrap();
    Some((outs.pop().unwrap(), proxied))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_mode_matches_direct() {
    let Some((direct, proxied)) = both("pg_pipeline.py", |_| vec![]).await else {
        return;
    };
    assert_eq!(direct, proxied);
    assert_eq!(proxied["ok"][1], serde_json::json!([[42]]));
    assert_eq!(proxied["ok"][3].as_array().unwrap().len(), 500);
    assert_eq!(proxied["error"], "22012");
    // The failed pipeline's statements are gone, its first insert too.
    assert_eq!(proxied["after"], serde_json::json!([[1, "one"]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executemany_matches_direct() {
    let Some((direct, proxied)) = both("pg_executemany.py", |_| vec![]).await else {
        return;
    };
    assert_eq!(direct, proxied);
    assert_eq!(proxied["summary"][0], 1000);
    assert_eq!(proxied["returned"].as_array().unwrap().len(), 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifies_match_direct() {
    // Notifications are sent from a direct connection in both runs.
    let Some((direct, proxied)) = both("pg_notify.py", |env| vec![env.dsn(false)]).await else {
        return;
    };
    assert_eq!(direct, proxied);
    assert_eq!(
        proxied,
        serde_json::json!([["pyc", "msg 0"], ["pyc", "msg 1"], ["pyc", "msg 2"]])
    );
}
