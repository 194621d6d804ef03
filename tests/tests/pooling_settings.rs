//! What a pooled session learns about its server connection's settings
//! (default isolation, search path, AGE loaded) goes with the connection
//! to its next client.

use onetrip_tests::{Env, PgOptions, connect};

/// A client that takes a connection an earlier client left takes the
/// settings learned on it: its first statement goes without the proxy's
/// settings query, so it reads from the server no more than a statement
/// run again does.
#[tokio::test]
async fn a_later_client_takes_the_settings_its_connection_learned() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 1;
    })
    .await;
    let dsn = env.proxy_dsn();
    let read = || env.proxy().stats().total().bytes_from_upstream;
    let first = connect(&dsn).await;
    // Opens the connection and asks for its settings.
    first.simple_query("SELECT 1").await.unwrap();
    let before = read();
    first.simple_query("SELECT 1").await.unwrap();
    let again = read() - before;

    let second = connect(&dsn).await;
    let before = read();
    second.simple_query("SELECT 1").await.unwrap();
    let later = read() - before;
    assert_eq!(
        later, again,
        "the later client's first statement read the settings query's answer too"
    );
}
