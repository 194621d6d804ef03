//! Entry points for fuzzers, and for the tests that replay their corpora:
//! a session's protocol state driven by bytes alone, no sockets. Not part
//! of the stable API.

use bytes::{BufMut, Bytes, BytesMut};

use super::Protocol;
use std::sync::Arc;

use super::{PoolNotices, Services};
use crate::{config::Config, stats::Stats, wire::queue::WriteQueue, wire::startup};

/// A fuzzed session has no pools to tell anything.
struct NoPools;

impl PoolNotices for NoPools {
    fn drain(&self, _: &[String]) {}
    fn end_drain(&self, _: &[String]) {}
    fn forget_password(&self, _: Option<&str>) {}
}

/// A session fed by the input: its first byte picks the features (bit 0
/// deferred BEGIN, 1 lazy reads, 2 coalescing, 3 write probes, 4 Cypher
/// rewriting, 5 verify, 6 settings asked first, 7 transaction pooling's
/// session, with no pool behind it), then chunks follow, each
/// a header byte (bit 7: from the server, else from the client; the low
/// seven bits its length, 127 for all that is left) and its bytes. Errors
/// end the session, as they would close it; nothing may panic.
pub fn fuzz_session(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut s = Session::new(flags);
    let mut rest = rest;
    while let Some((&head, tail)) = rest.split_first() {
        let len = match usize::from(head & 0x7f) {
            127 => tail.len(),
            n => n.min(tail.len()),
        };
        let (chunk, after) = tail.split_at(len);
        rest = after;
        let ok = if head & 0x80 != 0 {
            s.upstream(chunk)
        } else {
            s.client(chunk)
        };
        if !ok {
            return;
        }
    }
}

/// Well-formed client messages, and the server's bytes from the input: the
/// first byte picks the features as in [`fuzz_session`]; then a byte with
/// bit 7 set sends one of a menu of client messages (its low bits), any
/// other byte is the length (its low seven bits) of the server bytes that
/// follow it. What a hostile or broken server can send, reached past the
/// parsing of the client's side.
pub fn fuzz_backend(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut s = Session::new(flags);
    let mut rest = rest;
    while let Some((&head, tail)) = rest.split_first() {
        let ok = if head & 0x80 != 0 {
            rest = tail;
            s.client(&client_message(head & 0x7f))
        } else {
            let len = usize::from(head).min(tail.len());
            let (chunk, after) = tail.split_at(len);
            rest = after;
            s.upstream(chunk)
        };
        if !ok {
            return;
        }
    }
}

/// A startup packet, SSL or cancel request as the first bytes of a
/// connection: sized, then decoded; nothing may panic.
pub fn fuzz_startup(data: &[u8]) {
    if let Ok(Some(len)) = startup::packet_len(data)
        && let Some(packet) = data.get(..len)
    {
        let _ = startup::decode(Bytes::copy_from_slice(packet));
    }
    let _ = startup::decode(Bytes::copy_from_slice(data));
}

struct Session {
    p: Protocol,
    cin: BytesMut,
    uin: BytesMut,
}

impl Session {
    fn new(flags: u8) -> Self {
        let mut config = Config::default();
        config.transactions.defer_begin = flags & 1 != 0;
        config.transactions.lazy_reads = flags & 2 != 0;
        config.coalesce.single_read = flags & 4 != 0;
        config.coalesce.write_probe = flags & 8 != 0;
        config.planner.cypher_rewrite = flags & 16 != 0;
        config.planner.verify = flags & 32 != 0;
        config.limits.max_message_bytes = 1 << 16;
        let stats = Arc::new(Stats::with_max_rows(config.limits.max_stats_rows));
        let analyzer =
            onetrip_planner::analysis::Analyzer::new(&config.coalesce.read_only_functions);
        let services = Services {
            config: Arc::new(config),
            stats: stats.clone(),
            cypher: Default::default(),
            analyzer: Arc::new(analyzer),
            pools: Arc::new(NoPools),
        };
        let info = stats.open_session(None, "postgres", "postgres", "");
        stats.admit(&info);
        let mut p = Protocol::new(services, info);
        p.pooled = flags & 128 != 0;
        if flags & 64 != 0 {
            p.start(&mut WriteQueue::default());
        }
        Self {
            p,
            cin: BytesMut::new(),
            uin: BytesMut::new(),
        }
    }

    /// What the proxy writes is dropped: the fuzzer looks for panics and
    /// for state that a sequence of messages can break.
    fn client(&mut self, bytes: &[u8]) -> bool {
        self.cin.extend_from_slice(bytes);
        let (mut up, mut down) = (WriteQueue::default(), WriteQueue::default());
        self.p
            .on_client_bytes(&mut self.cin, &mut up, &mut down)
            .is_ok()
    }

    fn upstream(&mut self, bytes: &[u8]) -> bool {
        self.uin.extend_from_slice(bytes);
        let (mut up, mut down) = (WriteQueue::default(), WriteQueue::default());
        self.p
            .on_upstream_bytes(&mut self.uin, &mut down, &mut up)
            .is_ok()
    }
}

/// The client messages of [`fuzz_backend`]'s menu.
fn client_message(k: u8) -> BytesMut {
    const QUERIES: [&str; 12] = [
        "select 1",
        "begin",
        "commit",
        "rollback",
        "select * from t where id = 1",
        "update t set v = 1",
        "begin isolation level serializable",
        "set search_path = ag_catalog, public",
        "select * from cypher('g', $$ MATCH (n) RETURN n $$) as (n agtype)",
        "with d as (delete from t where false) select 1",
        "copy t from stdin",
        "prepare p as select 1",
    ];
    let mut m = BytesMut::new();
    let text = QUERIES[usize::from(k) % QUERIES.len()];
    let cstr = |b: &mut BytesMut, s: &str| {
        b.put_slice(s.as_bytes());
        b.put_u8(0);
    };
    let mut message = |tag: u8, body: &dyn Fn(&mut BytesMut)| {
        let mut b = BytesMut::new();
        body(&mut b);
        m.put_u8(tag);
        m.put_u32(b.len() as u32 + 4);
        m.put_slice(&b);
    };
    match k / QUERIES.len() as u8 {
        0 => message(b'Q', &|b| cstr(b, text)),
        1 => message(b'P', &|b| {
            cstr(b, "");
            cstr(b, text);
            b.put_u16(0);
        }),
        2 => message(b'B', &|b| {
            cstr(b, "");
            cstr(b, "");
            b.put_slice(&[0, 0, 0, 0, 0, 0]);
        }),
        3 => message(b'E', &|b| {
            cstr(b, "");
            b.put_u32(u32::from(k & 1));
        }),
        4 => message(b'D', &|b| {
            b.put_u8(if k & 1 == 0 { b'S' } else { b'P' });
            cstr(b, "");
        }),
        5 => message(b'S', &|_| {}),
        6 => message(b'H', &|_| {}),
        7 => message(b'd', &|b| b.put_slice(b"1\t2\n")),
        8 => message(b'c', &|_| {}),
        9 => message(b'C', &|b| {
            b.put_u8(b'S');
            cstr(b, "p");
        }),
        _ => message(b'X', &|_| {}),
    }
    m
}
