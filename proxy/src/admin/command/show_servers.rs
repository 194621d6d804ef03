//! SHOW SERVERS: one row per upstream connection. In session mode that is
//! one per client session, plus those kept for the next client.

use std::{sync::atomic::Ordering, time::SystemTime};

use bytes::BytesMut;

use super::table::{cell, table, timestamp};
use crate::shared::Shared;

pub const SYNTAX: &str = "SHOW SERVERS";
pub const ABOUT: &str = "one row per upstream connection";

const COLUMNS: &[&str] = &[
    "id",
    "database",
    "user",
    "upstream",
    "upstream_pid",
    "state",
    "upstream_round_trips",
    "connect_time",
];

pub fn run(shared: &Shared, out: &mut BytesMut) {
    let upstream = shared.upstream_addr();
    let rows = shared
        .stats
        .sessions()
        .iter()
        .map(|si| {
            let pid = si.upstream_pid.load(Ordering::Relaxed);
            vec![
                cell(si.id),
                cell(&si.database),
                cell(&si.user),
                cell(&upstream),
                (pid != 0).then(|| pid.to_string()),
                cell(si.state().as_str()),
                cell(si.counters.upstream_round_trips.load(Ordering::Relaxed)),
                cell(timestamp(si.started)),
            ]
        })
        .chain(shared.reuse.rows().into_iter().map(|k| {
            let opened = SystemTime::now()
                .checked_sub(k.opened.elapsed())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            vec![
                None,
                Some(k.database),
                Some(k.user),
                cell(&upstream),
                k.pid.map(|p| p.to_string()),
                cell("kept"),
                None,
                cell(timestamp(opened)),
            ]
        }))
        .collect();
    table(out, COLUMNS, rows);
}
