//! The Prometheus endpoint end to end: plain HTTP GETs, the answer checked
//! by a strict parser of the text exposition format.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use onetrip_tests::{Env, PgOptions, connect};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

async fn http(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(buf).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap_or_default()
        .to_owned();
    (status, ctype, body.to_owned())
}

/// One sample: metric name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// Parses the text format strictly: every sample belongs to a family with
/// HELP and TYPE lines before it, labels are well formed, values are numbers.
fn parse(text: &str) -> (HashMap<String, String>, Vec<Sample>) {
    let mut types = HashMap::new();
    let mut helped = std::collections::HashSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP text");
            assert!(!help.is_empty() && helped.insert(name.to_owned()), "{line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("TYPE");
            assert!(["counter", "gauge", "histogram"].contains(&ty), "{line}");
            assert!(helped.contains(name), "TYPE before HELP: {line}");
            assert!(
                types.insert(name.to_owned(), ty.to_owned()).is_none(),
                "{line}"
            );
            continue;
        }
        assert!(
            !line.starts_with('#') && !line.is_empty(),
            "unexpected line {line:?}"
        );
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i..]),
            None => line.split_at(line.find(' ').expect("value")),
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        let mut labels = BTreeMap::new();
        let mut rest = rest;
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let end;
            loop {
                let (i, _) = *chars.peek().expect("label");
                if body[i..].starts_with('}') {
                    end = i + 1;
                    break;
                }
                let eq = body[i..].find("=\"").expect("label =\"") + i;
                let key = &body[i..eq];
                assert!(
                    key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "{line}"
                );
                let mut value = String::new();
                let mut j = eq + 2;
                loop {
                    let c = body[j..].chars().next().expect("closing quote");
                    j += c.len_utf8();
                    match c {
                        '"' => break,
                        '\\' => {
                            let e = body[j..].chars().next().unwrap();
                            j += 1;
                            value.push(match e {
                                'n' => '\n',
                                '\\' | '"' => e,
                                _ => panic!("bad escape in {line}"),
                            });
                        }
                        c => value.push(c),
                    }
                }
                labels.insert(key.to_owned(), value);
                if body[j..].starts_with(',') {
                    j += 1;
                }
                chars = body.char_indices().peekable();
                while chars.peek().is_some_and(|(k, _)| *k < j) {
                    chars.next();
                }
            }
            rest = &body[end..];
        }
        let value = rest.strip_prefix(' ').expect("space before value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        assert!(types.contains_key(family), "sample without TYPE: {line}");
        samples.push((name.to_owned(), labels, value));
    }
    (types, samples)
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
        .2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_and_histogram_are_exposed() {
    let env = Env::start_with(PgOptions::default(), |cfg| {
        cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap())
    })
    .await;
    let addr = env.proxy().metrics_addr().expect("metrics listening");
    assert_ne!(addr.port(), 0);
    let c = connect(&env.proxy_dsn()).await;
    for _ in 0..3 {
        c.simple_query("select 1").await.unwrap();
    }
    // A BEGIN answered here and its COMMIT too: two saved. (Before the
    // failing query: tokio-postgres returns its error before the
    // ReadyForQuery, and a BEGIN sent with an answer still on its way must
    // go to the server.)
    c.batch_execute("begin").await.unwrap();
    c.batch_execute("commit").await.unwrap();
    let _ = c.simple_query("select nope").await.unwrap_err();

    let (status, ctype, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let (types, samples) = parse(&body);
    assert_eq!(types["onetrip_client_round_trips_total"], "counter");
    assert_eq!(types["onetrip_upstream_round_trip_seconds"], "histogram");
    assert_eq!(types["onetrip_sessions_active"], "gauge");
    let pg = [("database", "postgres"), ("user", "postgres")];
    assert_eq!(
        value(&samples, "onetrip_client_round_trips_total", &pg),
        6.0
    );
    // The BEGIN went with nothing: its COMMIT, never sent either, was
    // answered here too.
    assert_eq!(
        value(&samples, "onetrip_upstream_round_trips_total", &pg),
        4.0
    );
    let saved = "onetrip_round_trips_saved_by_kind_total";
    for (kind, n) in [
        ("coalesced", 0.0),
        ("deferred_begin", 1.0),
        ("local_end", 1.0),
    ] {
        let labels = [pg[0], pg[1], ("kind", kind)];
        assert_eq!(value(&samples, saved, &labels), n, "{kind}");
    }
    assert_eq!(value(&samples, "onetrip_statements_total", &pg), 6.0);
    assert_eq!(value(&samples, "onetrip_errors_total", &pg), 1.0);
    assert_eq!(value(&samples, "onetrip_sessions_active", &[]), 1.0);
    // Every upstream round trip lands in the histogram; buckets cumulative.
    let h = "onetrip_upstream_round_trip_seconds";
    assert_eq!(value(&samples, &format!("{h}_count"), &pg), 4.0);
    assert!(value(&samples, &format!("{h}_sum"), &pg) > 0.0);
    let buckets: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(n, _, _)| *n == format!("{h}_bucket"))
        .map(|(_, l, v)| {
            (
                if l["le"] == "+Inf" {
                    f64::INFINITY
                } else {
                    l["le"].parse().unwrap()
                },
                *v,
            )
        })
        .collect();
    assert_eq!(buckets.len(), onetrip::stats::LATENCY_BUCKETS.len() + 1);
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "{buckets:?}"
    );
    assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, 4.0));

    drop(c);
    env.settle(0).await;
    let (_, _, body) = http(addr, b"GET /metrics HTTP/1.0\r\n\r\n").await;
    let (_, samples) = parse(&body);
    assert_eq!(value(&samples, "onetrip_sessions_active", &[]), 0.0);
    assert_eq!(value(&samples, "onetrip_sessions_total", &pg), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_requests_get_errors_and_the_server_survives() {
    let env = Env::start_with(PgOptions::default(), |cfg| {
        cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap())
    })
    .await;
    let addr = env.proxy().metrics_addr().unwrap();
    assert_eq!(http(addr, b"GET / HTTP/1.1\r\n\r\n").await.0, 404);
    assert_eq!(http(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await.0, 405);
    assert_eq!(http(addr, b"\x00\xff garbage\r\n\r\n").await.0, 400);
    // A header that never ends: cut off at the size bound (8 KiB), not
    // buffered. Exactly the bound, so no unread bytes turn the close into a
    // reset that would hide the answer.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&vec![b'a'; 8192]).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 400"));
    assert_eq!(http(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await.0, 200);
}
