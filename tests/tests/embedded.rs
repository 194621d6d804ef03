//! The embedded PostgreSQL: fast and forgetful in a temporary directory,
//! durable in a directory that is kept.

use onetrip_tests::{PgOptions, connect, start_pg};

/// fsync, full_page_writes and synchronous_commit of the server at `dsn`.
async fn durability(port: u16) -> Vec<String> {
    let c = connect(&format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres"
    ))
    .await;
    let mut out = Vec::new();
    for setting in ["fsync", "full_page_writes", "synchronous_commit"] {
        let row = c.query_one(&format!("show {setting}"), &[]).await.unwrap();
        out.push(row.get(0));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_temporary_data_directory_runs_without_fsync() {
    let temp = start_pg(PgOptions::default()).await;
    assert_eq!(durability(temp.port()).await, ["off", "off", "off"]);
    drop(temp);

    let dir = tempfile::tempdir().unwrap();
    // As root the server runs as `postgres`, which must reach the directory.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let opts = || PgOptions {
        data_dir: Some(dir.path().join("data")),
        ..Default::default()
    };
    let kept = start_pg(opts()).await;
    assert_eq!(durability(kept.port()).await, ["on", "on", "on"]);
    drop(kept);
    // Started again on the same directory: still durable.
    let again = start_pg(opts()).await;
    assert_eq!(durability(again.port()).await, ["on", "on", "on"]);
}
