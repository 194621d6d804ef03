//! SHOW STATS: round trips and traffic per (database, user), and the total.

use bytes::BytesMut;

use super::table::{Row, cell, table};
use crate::{shared::Shared, stats::Snapshot};

pub const SYNTAX: &str = "SHOW STATS";
pub const ABOUT: &str = "round trips and traffic per (database, user), and the total";

const COLUMNS: &[&str] = &[
    "database",
    "user",
    "sessions",
    "client_round_trips",
    "upstream_round_trips",
    "round_trips_saved",
    "handshake_round_trips",
    "statements",
    "transactions",
    "bytes_from_client",
    "bytes_to_client",
    "bytes_to_upstream",
    "bytes_from_upstream",
    "errors",
    "coalesced_batches",
    "deferred_begins",
    "local_ends",
    "local_closes",
    "lazy_reads",
    "probes_passed",
    "probes_failed",
    "rewritten_queries",
    "fallbacks",
    "reused_upstreams",
    "replica_reads",
    "fresh_reads",
    "replica_reruns",
    "avg_upstream_round_trip_us",
];

pub fn run(shared: &Shared, out: &mut BytesMut) {
    let groups = shared.stats.by_database_user();
    let mut total = Snapshot::default();
    let mut rows: Vec<Row> = Vec::with_capacity(groups.len() + 1);
    for ((db, user), c) in &groups {
        total.add(c);
        rows.push(row(cell(db), cell(user), c));
    }
    // The total row has no user; its database reads "(total)".
    rows.push(row(cell("(total)"), None, &total));
    table(out, COLUMNS, rows);
}

fn row(database: Option<String>, user: Option<String>, c: &Snapshot) -> Row {
    vec![
        database,
        user,
        cell(c.sessions),
        cell(c.client_round_trips),
        cell(c.upstream_round_trips),
        cell(c.round_trips_saved()),
        cell(c.handshake_round_trips),
        cell(c.statements),
        cell(c.transactions),
        cell(c.bytes_from_client),
        cell(c.bytes_to_client),
        cell(c.bytes_to_upstream),
        cell(c.bytes_from_upstream),
        cell(c.errors),
        cell(c.coalesced_batches),
        cell(c.deferred_begins),
        cell(c.local_ends),
        cell(c.local_closes),
        cell(c.lazy_reads),
        cell(c.probes_passed),
        cell(c.probes_failed),
        cell(c.rewritten_queries),
        cell(c.fallbacks),
        cell(c.reused_upstreams),
        cell(c.replica_reads),
        cell(c.fresh_reads),
        cell(c.replica_reruns),
        cell(c.avg_latency_us()),
    ]
}
