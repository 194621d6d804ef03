//! SHOW CLIENTS: one row per client session.

use std::sync::atomic::Ordering;

use bytes::BytesMut;

use super::table::{cell, table, timestamp};
use crate::shared::Shared;

pub const SYNTAX: &str = "SHOW CLIENTS";
pub const ABOUT: &str = "one row per client session";

const COLUMNS: &[&str] = &[
    "id",
    "database",
    "user",
    "peer",
    "application_name",
    "state",
    "client_round_trips",
    "upstream_round_trips",
    "handshake_round_trips",
    "statements",
    "transactions",
    "upstream_pid",
    "connect_time",
    "relay",
    "pool_mode",
    "pin",
];

pub fn run(shared: &Shared, out: &mut BytesMut) {
    let rows = shared
        .stats
        .sessions()
        .iter()
        .map(|si| {
            let c = si.counters.snapshot();
            let pid = si.upstream_pid.load(Ordering::Relaxed);
            vec![
                cell(si.id),
                cell(&si.database),
                cell(&si.user),
                si.peer.map(|p| p.to_string()),
                cell(&si.application_name),
                cell(si.state().as_str()),
                cell(c.client_round_trips),
                cell(c.upstream_round_trips),
                cell(c.handshake_round_trips),
                cell(c.statements),
                cell(c.transactions),
                (pid != 0).then(|| pid.to_string()),
                cell(timestamp(si.started)),
                si.relay().as_str().map(str::to_owned),
                cell(match si.pooled.load(Ordering::Relaxed) {
                    true => "transaction",
                    false => "session",
                }),
                si.pin.get().map(|p| p.to_string()),
            ]
        })
        .collect();
    table(out, COLUMNS, rows);
}
