//! SHOW REPLICAS: one row per streaming replica (`[replicas]`), as its
//! watcher last found it, with the client reads it served.

use std::sync::atomic::Ordering;

use bytes::BytesMut;

use super::table::{cell, table};
use crate::{replicas::format_lsn, shared::Shared};

pub const SYNTAX: &str = "SHOW REPLICAS";
pub const ABOUT: &str = "one row per streaming replica: role, replay position, lag, reads served";

const COLUMNS: &[&str] = &["address", "role", "replay_lsn", "lag_ms", "reads"];

pub fn run(shared: &Shared, out: &mut BytesMut) {
    let rows = shared
        .replicas
        .list
        .iter()
        .map(|r| {
            vec![
                cell(&r.address),
                cell(r.state().as_str()),
                cell(format_lsn(r.replay())),
                cell(format!("{:.3}", r.lag().as_secs_f64() * 1000.0)),
                cell(r.reads.load(Ordering::Relaxed)),
            ]
        })
        .collect();
    table(out, COLUMNS, rows);
}
