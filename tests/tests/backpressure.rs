//! A client that reads a ~1 GB result slowly must not make the proxy buffer
//! it: the `onetrip` binary runs as its own process so that its resident
//! memory can be sampled from /proc.

use std::time::Duration;

use bytes::BytesMut;
use onetrip_tests::{process::ProxyProcess, raw, start_pg};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Most resident memory the proxy may use while streaming the result.
const RSS_LIMIT_KB: u64 = 64 * 1024;
const ROWS: u64 = 1_000_000;
/// Reads between 1 ms pauses.
const PAUSE_EVERY: u64 = 4;

/// A memory figure of `pid` from /proc (`VmRSS:` now, `VmHWM:` its peak),
/// in kB.
fn status_kb(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn rss_kb(pid: u32) -> u64 {
    status_kb(pid, "VmRSS:")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_of_1_gb_keeps_proxy_memory_small() {
    let pg = start_pg(Default::default()).await;
    let proxy = ProxyProcess::start(env!("CARGO_BIN_EXE_onetrip-cli"), pg.addr(), &[]);
    let (port, pid) = (proxy.port(), proxy.pid());
    let mut s = raw::connect_ready(port).await;
    let sql = format!("select repeat('x', 1000) from generate_series(1, {ROWS})");
    s.write_all(&raw::query(&sql)).await.unwrap();
    // Read nothing for a while (the server produces hundreds of MB meanwhile),
    // then in small bites with pauses.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mut buf, mut rows, mut max_rss, mut done) =
        (BytesMut::with_capacity(1 << 20), 0u64, 0u64, None);
    let (mut chunk, mut reads) = (vec![0u8; 128 * 1024], 0u64);
    let mut ready = false;
    while !ready {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "proxy closed mid-result after {rows} rows");
        buf.extend_from_slice(&chunk[..n]);
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() < len + 1 {
                break;
            }
            let msg = buf.split_to(len + 1);
            match msg[0] {
                b'D' => {
                    // One column of 1000 bytes: 2 (count) + 4 (length) + 1000.
                    assert_eq!(len, 4 + 2 + 4 + 1000);
                    rows += 1;
                }
                b'C' => done = Some(String::from_utf8_lossy(&msg[5..msg.len() - 1]).into_owned()),
                b'Z' => ready = true,
                b'E' => panic!("error: {:?}", raw::fields(&msg[5..])),
                _ => {}
            }
        }
        reads += 1;
        if reads % 32 == 0 {
            max_rss = max_rss.max(rss_kb(pid));
        }
        if reads % PAUSE_EVERY == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    max_rss = max_rss.max(rss_kb(pid));
    assert_eq!(done.as_deref(), Some(format!("SELECT {ROWS}").as_str()));
    assert_eq!(rows, ROWS);
    eprintln!("proxy peak VmRSS while streaming: {max_rss} kB");
    assert!(max_rss < RSS_LIMIT_KB, "proxy VmRSS reached {max_rss} kB");
}

/// A 64 MB result of a statement coalesced behind a write probe (a
/// data-modifying CTE, as LangGraph's TTL-refreshing reads have): the proxy
/// holds at most `max_held_bytes` of it, then runs the batch again, and
/// the client gets every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_probed_result_is_not_held_whole() {
    let pg = start_pg(Default::default()).await;
    let proxy = ProxyProcess::start(env!("CARGO_BIN_EXE_onetrip-cli"), pg.addr(), &[]);
    let (port, pid) = (proxy.port(), proxy.pid());
    let mut s = raw::connect_ready(port).await;
    s.write_all(&raw::query("create table probed(id int)"))
        .await
        .unwrap();
    while let Some((t, _)) = raw::read_message(&mut s, Duration::from_secs(10)).await {
        if t == b'Z' {
            break;
        }
    }
    const BIG_ROWS: u64 = 64_000;
    let sql = format!(
        "with d as (delete from probed where false) \
         select repeat('x', 1000) from generate_series(1, {BIG_ROWS})"
    );
    let mut batch = raw::message(b'P', format!("\0{sql}\0\0\0").as_bytes());
    batch.extend(raw::message(b'B', b"\0\0\0\0\0\0\0\0"));
    batch.extend(raw::message(b'D', b"P\0"));
    batch.extend(raw::message(b'E', b"\0\0\0\0\0"));
    batch.extend(raw::message(b'H', b""));
    s.write_all(&batch).await.unwrap();
    let (mut buf, mut rows) = (BytesMut::with_capacity(1 << 20), 0u64);
    let mut chunk = vec![0u8; 128 * 1024];
    let mut done = false;
    let mut synced = false;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "proxy closed after {rows} rows");
        buf.extend_from_slice(&chunk[..n]);
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() < len + 1 {
                break;
            }
            let msg = buf.split_to(len + 1);
            match msg[0] {
                b'D' => rows += 1,
                b'C' => done = true,
                b'E' => panic!("error: {:?}", raw::fields(&msg[5..])),
                _ => {}
            }
        }
        if done && !synced {
            s.write_all(&raw::message(b'S', b"")).await.unwrap();
            synced = true;
        }
        if synced && buf.is_empty() && n > 0 && chunk[..n].ends_with(&[b'Z', 0, 0, 0, 5, b'I']) {
            break;
        }
    }
    assert_eq!(rows, BIG_ROWS, "every row once");
    let peak = status_kb(pid, "VmHWM:");
    eprintln!("proxy peak VmHWM: {peak} kB");
    assert!(peak < RSS_LIMIT_KB, "proxy VmHWM reached {peak} kB");
}
