//! Transparency: the same answers through the proxy as direct.

use onetrip_tests::{Env, connect, simple_rows};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_and_extended_queries_match_direct() {
    let env = Env::start().await;
    let mut seen = Vec::new();
    for via in [false, true] {
        let c = connect(&env.dsn(via)).await;
        let msgs = c
            .simple_query("select 1 as a, 'x' as b; select 2")
            .await
            .unwrap();
        let rows = simple_rows(&msgs);
        let r = c.query_one("select $1::int + 1", &[&41i32]).await.unwrap();
        seen.push((rows, r.get::<_, i32>(0)));
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1].1, 42);
}
