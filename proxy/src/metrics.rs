//! Prometheus text exposition (format 0.0.4) on `[metrics] listen`: a
//! minimal HTTP/1.1 server that answers `GET /metrics` and closes.

use std::{fmt::Write as _, net::SocketAddr, sync::Weak, time::Duration};

use tokio::sync::oneshot;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tracing::{debug, info, warn};

use crate::{
    pooling::PoolRow,
    stats::{LATENCY_BUCKETS, Snapshot, Stats},
};

/// What the endpoint reports on (the proxy's shared state).
pub trait Source: Send + Sync + 'static {
    /// The page a scrape gets now.
    fn page(&self) -> String;
}

/// The source, held weakly: the endpoint must not keep a stopped proxy
/// alive, and stops once it is gone.
pub type Page = Weak<dyn Source>;

/// Longest request head read; a scrape needs a few hundred bytes.
const MAX_REQUEST: usize = 8192;
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A metrics endpoint serving scrapes in the background; it stops when
/// dropped (a reload that moves it), or once the proxy it reports on is
/// gone.
pub struct Endpoint {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl Endpoint {
    /// Binds `addr` and serves `page` on `runtime` (the current one when
    /// `None`).
    pub fn start(
        addr: SocketAddr,
        page: Page,
        runtime: Option<&tokio::runtime::Handle>,
    ) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let runtime = match runtime {
            Some(r) => r.clone(),
            None => tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?,
        };
        let (stop_tx, stop) = oneshot::channel();
        runtime.spawn(async move {
            match TcpListener::from_std(listener) {
                Ok(l) => accept_loop(l, page, stop).await,
                Err(e) => warn!(listen = %local, "metrics endpoint failed: {e}"),
            }
        });
        info!(listen = %local, "metrics endpoint ready");
        Ok(Self {
            addr: local,
            _stop: stop_tx,
        })
    }
}

async fn accept_loop(listener: TcpListener, page: Page, mut stop: oneshot::Receiver<()>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, peer)) => {
                    let page = page.clone();
                    tokio::spawn(async move {
                        if let Err(e) = answer(tcp, &page).await {
                            debug!(%peer, "metrics request failed: {e}");
                        }
                    });
                }
                Err(e) => {
                    debug!("metrics accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = &mut stop => return,
            // The proxy is gone: its page with it.
            _ = tick.tick() => if page.strong_count() == 0 { return },
        }
    }
}

async fn answer(mut tcp: TcpStream, page: &Page) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = tokio::time::timeout(READ_TIMEOUT, async {
        loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok::<_, std::io::Error>(Some(i));
            }
            if buf.len() >= MAX_REQUEST {
                return Ok(None);
            }
            let mut chunk = [0u8; 1024];
            let n = tcp.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let (status, ctype, body) = match head_end.map(|i| route(&buf[..i])) {
        Some(Route::Metrics) => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", {
            page.upgrade().map(|s| s.page()).unwrap_or_default()
        }),
        Some(Route::NotFound) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found; try /metrics\n".into(),
        ),
        Some(Route::Method) => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "use GET\n".into(),
        ),
        Some(Route::Bad) | None => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "bad request\n".into(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await?;
    tcp.write_all(body.as_bytes()).await?;
    tcp.shutdown().await
}

enum Route {
    Metrics,
    NotFound,
    Method,
    Bad,
}

fn route(head: &[u8]) -> Route {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return Route::Bad;
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Bad;
    }
    if method != "GET" {
        return Route::Method;
    }
    match target.split('?').next() {
        Some("/metrics") => Route::Metrics,
        _ => Route::NotFound,
    }
}

fn help(name: &str) -> &'static str {
    match name {
        "sessions" => "Client sessions opened.",
        "client_round_trips" => "Round trips between clients and the proxy, after the handshake.",
        "upstream_round_trips" => {
            "Round trips between the proxy and the upstream server, after the handshake."
        }
        "handshake_round_trips" => "Round trips spent in startup and authentication.",
        "statements" => "Simple queries and Executes.",
        "transactions" => "Transactions ended.",
        "bytes_from_client" => "Bytes read from clients.",
        "bytes_to_client" => "Bytes written to clients.",
        "bytes_to_upstream" => "Bytes written to the upstream server.",
        "bytes_from_upstream" => "Bytes read from the upstream server.",
        "errors" => "ErrorResponses sent to clients.",
        "coalesced_batches" => "Single-read batches sent upstream as one round trip.",
        "probes_passed" => "Write probes that found no write.",
        "probes_failed" => "Write probes that found a write (batch replayed).",
        "rewritten_queries" => "Queries rewritten by the planner.",
        "fallbacks" => "Times a feature stepped aside.",
        "reused_upstreams" => "Sessions served by a kept upstream connection (upstream.reuse).",
        "deferred_begins" => "BEGINs answered by the proxy and sent with the next statement.",
        "local_ends" => {
            "COMMITs and ROLLBACKs answered by the proxy: the transaction never reached the server."
        }
        "local_closes" => {
            "Groups of Closes answered by the proxy with no server connection (transaction pooling)."
        }
        "lazy_reads" => "Reads run outside a transaction block that had not reached the server.",
        "replica_reads" => "Reads served by a streaming replica.",
        "fresh_reads" => {
            "Reads sent to the primary because no replica had replayed the client's last write."
        }
        "replica_reruns" => "Reads a replica refused or lost, run again on the primary.",
        _ => "onetrip counter.",
    }
}

fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The whole exposition. Counters are per (database, user); `kept` is the
/// number of upstream connections kept for the next client; `pools`,
/// transaction pooling's.
pub fn render(stats: &Stats, kept: usize, pools: &[PoolRow]) -> String {
    let groups: Vec<(String, Snapshot)> = stats
        .by_database_user()
        .into_iter()
        .map(|((db, user), s)| {
            (
                format!(
                    "database=\"{}\",user=\"{}\"",
                    label_value(&db),
                    label_value(&user)
                ),
                s,
            )
        })
        .collect();
    let mut out = String::with_capacity(4096);
    let names = Snapshot::default().fields();
    for (i, (name, _)) in names.iter().enumerate() {
        let metric = format!("onetrip_{name}_total");
        let _ = writeln!(
            out,
            "# HELP {metric} {}\n# TYPE {metric} counter",
            help(name)
        );
        for (labels, s) in &groups {
            let _ = writeln!(out, "{metric}{{{labels}}} {}", s.fields()[i].1);
        }
    }
    let m = "onetrip_round_trips_saved_by_kind_total";
    let _ = writeln!(
        out,
        "# HELP {m} Round trips saved: coalesced batches, BEGINs that rode along, transaction ends answered by the proxy.\n# TYPE {m} counter"
    );
    for (labels, s) in &groups {
        for (kind, n) in s.saved_by_kind() {
            let _ = writeln!(out, "{m}{{{labels},kind=\"{kind}\"}} {n}");
        }
    }
    let _ = writeln!(
        out,
        "# HELP onetrip_sessions_active Client sessions open now.\n# TYPE onetrip_sessions_active gauge\nonetrip_sessions_active {}",
        stats.sessions().len()
    );
    let _ = writeln!(
        out,
        "# HELP onetrip_upstreams_kept Upstream connections kept for the next client (upstream.reuse).\n# TYPE onetrip_upstreams_kept gauge\nonetrip_upstreams_kept {kept}"
    );
    let h = "onetrip_upstream_round_trip_seconds";
    let _ = writeln!(
        out,
        "# HELP {h} Upstream round-trip latency, flush request to first answer byte.\n# TYPE {h} histogram"
    );
    for (labels, s) in &groups {
        let mut cumulative = 0u64;
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            cumulative += s.latency_buckets.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{h}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let count = s.latency_count();
        let _ = writeln!(out, "{h}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{h}_sum{{{labels}}} {}", s.latency_sum_us as f64 / 1e6);
        let _ = writeln!(out, "{h}_count{{{labels}}} {count}");
    }
    render_pools(&mut out, pools);
    out
}

/// Each streaming replica's state, lag, replay position and reads served,
/// labelled by its address.
pub fn render_replicas(out: &mut String, replicas: &crate::replicas::Replicas) {
    if replicas.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "# HELP onetrip_replica_up 1 while the replica serves reads (in recovery, within max_lag).\n# TYPE onetrip_replica_up gauge"
    );
    for r in &replicas.list {
        let up = u8::from(r.state() == crate::replicas::State::Up);
        let a = label_value(&r.address);
        let role = r.state().as_str();
        let _ = writeln!(
            out,
            "onetrip_replica_up{{replica=\"{a}\",role=\"{role}\"}} {up}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP onetrip_replica_lag_seconds How far behind the primary the replica was at its last poll.\n# TYPE onetrip_replica_lag_seconds gauge"
    );
    for r in &replicas.list {
        let a = label_value(&r.address);
        let lag = r.lag().as_secs_f64();
        let _ = writeln!(out, "onetrip_replica_lag_seconds{{replica=\"{a}\"}} {lag}");
    }
    let _ = writeln!(
        out,
        "# HELP onetrip_replica_replay_lsn The replica's pg_last_wal_replay_lsn() at its last poll, as a number.\n# TYPE onetrip_replica_replay_lsn gauge"
    );
    for r in &replicas.list {
        let a = label_value(&r.address);
        let _ = writeln!(
            out,
            "onetrip_replica_replay_lsn{{replica=\"{a}\"}} {}",
            r.replay()
        );
    }
    let _ = writeln!(
        out,
        "# HELP onetrip_replica_reads_total Client reads the replica served.\n# TYPE onetrip_replica_reads_total counter"
    );
    for r in &replicas.list {
        let a = label_value(&r.address);
        let n = r.reads.load(std::sync::atomic::Ordering::Relaxed);
        let _ = writeln!(out, "onetrip_replica_reads_total{{replica=\"{a}\"}} {n}");
    }
}

/// A gauge's name, help, and value for a pool.
type Gauge = (&'static str, &'static str, fn(&PoolRow) -> f64);
type Counter = (&'static str, &'static str, fn(&PoolRow) -> u64);

/// Transaction pooling's gauges (as `SHOW POOLS`) and wait histogram, per
/// pool.
fn render_pools(out: &mut String, pools: &[PoolRow]) {
    if pools.is_empty() {
        return;
    }
    let labels = |p: &PoolRow| {
        format!(
            "database=\"{}\",user=\"{}\"",
            label_value(&p.database),
            label_value(&p.user)
        )
    };
    let gauges: [Gauge; 8] = [
        ("clients", "Pooled client sessions.", |p| p.clients as f64),
        (
            "clients_waiting",
            "Clients waiting for a server connection.",
            |p| p.waiting as f64,
        ),
        (
            "servers_active",
            "Server connections in use (or being opened).",
            |p| p.active as f64,
        ),
        (
            "servers_idle",
            "Server connections idle in the pool.",
            |p| p.idle as f64,
        ),
        (
            "servers_pinned",
            "Sessions pinned to their server connection.",
            |p| p.pinned as f64,
        ),
        (
            "servers_listening",
            "Listening connections open for sessions that LISTEN unpinned.",
            |p| p.listen_conns as f64,
        ),
        (
            "listen_channels",
            "Channels the pool's listening connection listens on.",
            |p| p.listen_channels as f64,
        ),
        (
            "max_wait_seconds",
            "How long the longest-waiting client has waited.",
            |p| p.max_wait.as_secs_f64(),
        ),
    ];
    for (name, help, value) in gauges {
        let m = format!("onetrip_pool_{name}");
        let _ = writeln!(out, "# HELP {m} {help}\n# TYPE {m} gauge");
        for p in pools {
            let _ = writeln!(out, "{m}{{{}}} {}", labels(p), value(p));
        }
    }
    let r = "onetrip_pool_resets_total";
    let _ = writeln!(
        out,
        "# HELP {r} Server connections given back that needed a reset before the next client, by reason.\n# TYPE {r} counter"
    );
    for p in pools {
        for (why, n) in &p.resets {
            let _ = writeln!(out, "{r}{{{},reason=\"{why}\"}} {n}", labels(p));
        }
    }
    let n = "onetrip_pool_notifications_total";
    let _ = writeln!(
        out,
        "# HELP {n} Notifications the pool's listening connection handed to sessions.\n# TYPE {n} counter"
    );
    for p in pools {
        let _ = writeln!(out, "{n}{{{}}} {}", labels(p), p.notifications);
    }
    let counters: [Counter; 6] = [
        (
            "parses_here_total",
            "Parses (and Describes) answered here from what the server said of the same text before.",
            |p| p.parses_answered,
        ),
        (
            "descriptions_changed_total",
            "Statements answered here that the server then described otherwise (the client got 0A000).",
            |p| p.descriptions_changed,
        ),
        (
            "sql_prepares_total",
            "SQL PREPAREs kept for their client with no pin (transaction pooling).",
            |p| p.sql_prepares,
        ),
        (
            "sql_prepares_made_again_total",
            "SQL-prepared statements made again on another server connection, ahead of the statement that used them.",
            |p| p.sql_prepares_made_again,
        ),
        (
            "statements_shared_total",
            "Uses of a named statement a server connection held from another client's Parse of the same text: Parses the server was spared.",
            |p| p.statements_shared,
        ),
        (
            "statements_parsed_again_total",
            "Clients' named statements parsed on a server connection that lacked them, ahead of the message that used them.",
            |p| p.statements_parsed_again,
        ),
    ];
    for (name, help, value) in counters {
        let m = format!("onetrip_pool_{name}");
        let _ = writeln!(out, "# HELP {m} {help}\n# TYPE {m} counter");
        for p in pools {
            let _ = writeln!(out, "{m}{{{}}} {}", labels(p), value(p));
        }
    }
    let h = "onetrip_pool_wait_seconds";
    let _ = writeln!(
        out,
        "# HELP {h} How long clients waited for a server connection (zero when one was free).\n# TYPE {h} histogram"
    );
    for p in pools {
        let l = labels(p);
        let mut cumulative = 0u64;
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            cumulative += p.wait_buckets.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{h}_bucket{{{l},le=\"{le}\"}} {cumulative}");
        }
        let count: u64 = p.wait_buckets.iter().sum();
        let _ = writeln!(out, "{h}_bucket{{{l},le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{h}_sum{{{l}}} {}", p.wait_sum.as_secs_f64());
        let _ = writeln!(out, "{h}_count{{{l}}} {count}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert!(matches!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x"),
            Route::Metrics
        ));
        assert!(matches!(route(b"GET / HTTP/1.1"), Route::NotFound));
        assert!(matches!(route(b"POST /metrics HTTP/1.1"), Route::Method));
        assert!(matches!(route(b"\xff\xfe"), Route::Bad));
        assert!(matches!(route(b"GET /metrics"), Route::Bad));
    }

    #[test]
    fn render_has_labels_and_cumulative_buckets() {
        let stats = Stats::new();
        let s = stats.open_session(None, "d\"b", "u", "");
        stats.admit(&s);
        crate::stats::Counters::add(&s.counters.client_round_trips, 2);
        s.counters.record_latency(Duration::from_micros(300));
        s.counters.record_latency(Duration::from_secs(20));
        let pool = PoolRow {
            database: "db".into(),
            user: "u".into(),
            clients: 7,
            waiting: 2,
            active: 5,
            idle: 0,
            pinned: 1,
            max_wait: Duration::from_millis(1500),
            wait_buckets: vec![3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0],
            wait_sum: Duration::from_secs(2),
            resets: vec![("DML", 3)],
            listen_conns: 1,
            listen_channels: 4,
            notifications: 9,
            parses_answered: 11,
            descriptions_changed: 1,
            sql_prepares: 4,
            sql_prepares_made_again: 2,
            statements_shared: 5,
            statements_parsed_again: 3,
        };
        let text = render(&stats, 3, &[pool]);
        assert!(
            text.contains("onetrip_pool_clients_waiting{database=\"db\",user=\"u\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("onetrip_pool_max_wait_seconds{database=\"db\",user=\"u\"} 1.5\n"));
        assert!(text.contains("onetrip_pool_listen_channels{database=\"db\",user=\"u\"} 4\n"));
        assert!(text.contains("onetrip_pool_notifications_total{database=\"db\",user=\"u\"} 9\n"));
        assert!(text.contains("onetrip_pool_parses_here_total{database=\"db\",user=\"u\"} 11\n"));
        assert!(text.contains("onetrip_pool_sql_prepares_total{database=\"db\",user=\"u\"} 4\n"));
        assert!(
            text.contains("onetrip_pool_statements_shared_total{database=\"db\",user=\"u\"} 5\n")
        );
        assert!(
            text.contains(
                "onetrip_pool_descriptions_changed_total{database=\"db\",user=\"u\"} 1\n"
            )
        );
        assert!(
            text.contains(
                "onetrip_pool_resets_total{database=\"db\",user=\"u\",reason=\"DML\"} 3\n"
            )
        );
        assert!(text.contains(
            "onetrip_pool_wait_seconds_bucket{database=\"db\",user=\"u\",le=\"0.0001\"} 3\n"
        ));
        assert!(text.contains(
            "onetrip_pool_wait_seconds_bucket{database=\"db\",user=\"u\",le=\"2.5\"} 4\n"
        ));
        assert!(text.contains("onetrip_pool_wait_seconds_count{database=\"db\",user=\"u\"} 4\n"));
        assert!(
            text.contains("onetrip_client_round_trips_total{database=\"d\\\"b\",user=\"u\"} 2"),
            "{text}"
        );
        assert!(text.contains("le=\"0.0005\"} 1\n"), "{text}");
        assert!(text.contains("le=\"10\"} 1\n"), "{text}");
        assert!(text.contains("le=\"+Inf\"} 2\n"), "{text}");
        assert!(text.contains("onetrip_sessions_active 1\n"), "{text}");
        assert!(text.contains("onetrip_upstreams_kept 3\n"), "{text}");
    }
}
