//! Statements the proxy sends of its own, built once per process: the
//! write probe, the statement that takes a snapshot after an early Sync,
//! and the Close before a named statement is prepared again. Each uses a
//! statement and portal name of the proxy's own: the client may still use
//! the unnamed ones.

use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};

use crate::wire::write;

const PROBE: &str = "onetrip_probe";
const SNAPSHOT: &str = "onetrip_snapshot";

/// Close of the prepared statement `name`.
pub fn close_statement(name: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(name.len() + 7);
    write::close(&mut out, b'S', name);
    out.freeze()
}

/// Close, Parse, Bind and Execute of `SELECT`, which takes a snapshot.
pub fn snapshot_frames() -> Bytes {
    static FRAMES: OnceLock<&'static [u8]> = OnceLock::new();
    built(&FRAMES, || {
        let mut out = BytesMut::new();
        write::close(&mut out, b'S', SNAPSHOT);
        write::parse(&mut out, SNAPSHOT, "SELECT");
        write::bind(&mut out, SNAPSHOT, SNAPSHOT);
        write::execute(&mut out, SNAPSHOT);
        out
    })
}

pub fn sync_frame() -> Bytes {
    Bytes::from_static(&write::SYNC)
}

pub fn flush_frame() -> Bytes {
    Bytes::from_static(&write::FLUSH)
}

/// Close + Parse of the write probe. It fails, with division by zero, iff
/// the transaction has an xid, which it gets at its first write. The Close
/// makes the Parse succeed whatever became of an earlier one.
pub fn probe_prepare(pg13: bool) -> Bytes {
    static PG13: OnceLock<&'static [u8]> = OnceLock::new();
    static OLDER: OnceLock<&'static [u8]> = OnceLock::new();
    let build = |pg13| {
        let sql = if pg13 {
            "SELECT 1 / (pg_catalog.pg_current_xact_id_if_assigned() IS NULL)::int"
        } else {
            "SELECT 1 / (pg_catalog.txid_current_if_assigned() IS NULL)::int"
        };
        let mut out = BytesMut::new();
        write::close(&mut out, b'S', PROBE);
        write::parse(&mut out, PROBE, sql);
        out
    };
    match pg13 {
        true => built(&PG13, || build(true)),
        false => built(&OLDER, || build(false)),
    }
}

/// Bind + Execute of the prepared probe.
pub fn probe_run() -> Bytes {
    static RUN: OnceLock<&'static [u8]> = OnceLock::new();
    built(&RUN, || {
        let mut out = BytesMut::new();
        write::bind(&mut out, PROBE, PROBE);
        write::execute(&mut out, PROBE);
        out
    })
}

/// Messages every session sends alike, built once per process (each
/// session built them anew: a tenth of the allocations of a connection
/// that runs one query).
fn built(cell: &'static OnceLock<&'static [u8]>, build: impl FnOnce() -> BytesMut) -> Bytes {
    Bytes::from_static(cell.get_or_init(|| Vec::leak(build().to_vec())))
}
