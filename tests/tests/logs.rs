//! Every log line of a session names it: the session's span is on the
//! lines written while it relays (the relay loop itself runs outside the
//! span, so the lines it ends with are written inside it again).

use std::{
    io::Write,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use onetrip_tests::{Env, connect};

/// Log output collected in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The first line containing `what`, waiting up to 10 s for it.
    async fn line(&self, what: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.text().lines().find(|l| l.contains(what)) {
                return l.to_owned();
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no log line with {what:?} in:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_written_while_relaying_carry_the_session() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let env = Env::start().await;
    let client = connect(&env.proxy_dsn()).await;
    let pid: i32 = client
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    // The upstream connection dies under the relaying session.
    let direct = connect(&env.direct_dsn()).await;
    direct
        .execute("select pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    assert!(client.simple_query("select 1").await.is_err());

    for what in ["upstream closed the connection", "session closed"] {
        let line = logs.line(what).await;
        assert!(line.contains("session{id="), "no session on: {line}");
    }
}
