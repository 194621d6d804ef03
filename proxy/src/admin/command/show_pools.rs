//! SHOW POOLS: one row per pool of transaction pooling (one per database
//! and user), with PgBouncer's columns, and the resets its connections
//! needed between clients, by reason; its listening connection (for
//! sessions that LISTEN unpinned), the channels it listens on, and the
//! notifications it handed to sessions; Parses answered from what its
//! servers parsed and described, and statements so told that proved
//! changed; SQL PREPAREs kept for their clients without a pin, and
//! made again elsewhere; named statements shared between clients, and
//! parsed again on a connection.

use bytes::BytesMut;

use super::table::{cell, table};
use crate::shared::Shared;

pub const SYNTAX: &str = "SHOW POOLS";
pub const ABOUT: &str = "one row per pool of server connections (transaction pooling)";

const COLUMNS: &[&str] = &[
    "database",
    "user",
    "cl_active",
    "cl_waiting",
    "sv_active",
    "sv_idle",
    "sv_pinned",
    "maxwait_us",
    "pool_mode",
    "resets",
    "reset_reasons",
    "sv_listening",
    "listen_channels",
    "notifications",
    "parses_here",
    "descriptions_changed",
    "sql_prepares",
    "sql_prepares_made_again",
    "statements_shared",
    "statements_parsed_again",
];

pub fn run(shared: &Shared, out: &mut BytesMut) {
    let rows = shared
        .pools
        .rows()
        .into_iter()
        .map(|p| {
            vec![
                cell(&p.database),
                cell(&p.user),
                // Clients waiting for a connection are not active.
                cell(p.clients.saturating_sub(p.waiting)),
                cell(p.waiting),
                cell(p.active),
                cell(p.idle),
                cell(p.pinned),
                cell(p.max_wait.as_micros()),
                cell("transaction"),
                cell(p.resets.iter().map(|(_, n)| n).sum::<u64>()),
                cell(
                    p.resets
                        .iter()
                        .map(|(why, n)| format!("{why} {n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                cell(p.listen_conns),
                cell(p.listen_channels),
                cell(p.notifications),
                cell(p.parses_answered),
                cell(p.descriptions_changed),
                cell(p.sql_prepares),
                cell(p.sql_prepares_made_again),
                cell(p.statements_shared),
                cell(p.statements_parsed_again),
            ]
        })
        .collect();
    table(out, COLUMNS, rows);
}
