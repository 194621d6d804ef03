//! Every log line of a session names it, also those written when it ends
//! while relaying (the relay loop runs outside the session's span; its end
//! is logged inside it).

use std::{
    io::Write,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use onetrip_tests::{Env, connect, raw};
use tokio::io::AsyncWriteExt;

const WAIT: Duration = Duration::from_secs(10);

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

    /// The first line containing `what`, waiting up to `WAIT` for it.
    async fn line(&self, what: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.text().lines().find(|l| l.contains(what)) {
                return l.to_owned();
            }
            assert!(
                start.elapsed() < WAIT,
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
    // A raw client: it keeps its socket open when the server's FATAL
    // arrives, so the session ends because the upstream closed.
    let mut client = raw::connect_ready(env.proxy_port()).await;
    client
        .write_all(&raw::query("select pg_backend_pid()"))
        .await
        .unwrap();
    let mut pid = None;
    while let Some((t, body)) = raw::read_message(&mut client, WAIT).await {
        match t {
            b'D' => pid = Some(String::from_utf8_lossy(&body[6..]).parse::<i32>().unwrap()),
            b'Z' => break,
            _ => {}
        }
    }
    let direct = connect(&env.direct_dsn()).await;
    direct
        .execute("select pg_terminate_backend($1)", &[&pid.unwrap()])
        .await
        .unwrap();
    let fatal: Vec<_> = raw::read_to_end(&mut client, WAIT)
        .await
        .into_iter()
        .filter(|(t, _)| *t == b'E')
        .filter_map(|(_, body)| raw::field(&body, b'C'))
        .collect();
    assert_eq!(fatal, ["57P01"], "the server's FATAL and nothing more");

    for what in ["upstream closed the connection", "session closed"] {
        let line = logs.line(what).await;
        assert!(line.contains("session{id="), "no session on: {line}");
    }
}
