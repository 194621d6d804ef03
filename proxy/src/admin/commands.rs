//! The admin console's commands. Each answers with one result set (or a
//! command tag) built from a read of the shared statistics; nothing here
//! writes a session's counters except `RESET STATS`.

use std::{sync::Arc, time::SystemTime};

use bytes::BytesMut;

use crate::{
    shared::Shared,
    stats::Snapshot,
    wire::write::{self, ColumnType, Severity},
};

const HELP: &[(&str, &str)] = &[
    ("SHOW HELP", "this list"),
    (
        "SHOW STATS",
        "round trips and traffic per (database, user), and the total",
    ),
    ("SHOW CLIENTS", "one row per client session"),
    ("SHOW SERVERS", "one row per upstream connection"),
    (
        "SHOW CONFIG",
        "effective configuration (passwords never shown)",
    ),
    ("SHOW FALLBACKS", "why features stepped aside, with counts"),
    ("SHOW REWRITES", "rewritten queries and rewrite fallbacks"),
    ("SHOW VERSION", "onetrip's version"),
    ("RESET STATS", "zero every counter"),
];

/// Runs every `;`-separated command of a simple query, in order. Like
/// PostgreSQL, the first error ends the query string.
pub fn run_all(sql: &str, shared: &Arc<Shared>, out: &mut BytesMut) {
    let commands: Vec<&str> = sql
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if commands.is_empty() {
        write::empty_query(out);
        return;
    }
    for c in commands {
        if let Err((code, msg)) = run(c, shared, out) {
            write::error_into(out, Severity::Error, code, &msg);
            return;
        }
    }
}

fn run(
    command: &str,
    shared: &Arc<Shared>,
    out: &mut BytesMut,
) -> Result<(), (&'static str, String)> {
    let words: Vec<String> = command
        .split_whitespace()
        .map(str::to_ascii_uppercase)
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["SHOW", "HELP"] => help(out),
        ["SHOW", "STATS"] => stats(shared, out),
        ["SHOW", "CLIENTS"] => clients(shared, out),
        ["SHOW", "SERVERS"] => servers(shared, out),
        ["SHOW", "CONFIG"] => config(shared, out),
        ["SHOW", "FALLBACKS"] => fallbacks(shared, out),
        ["SHOW", "REWRITES"] => rewrites(shared, out),
        ["SHOW", "VERSION"] => table(
            out,
            &["version"],
            vec![vec![Some(format!("onetrip {}", env!("CARGO_PKG_VERSION")))]],
        ),
        ["RESET", "STATS"] => {
            shared.stats.reset();
            write::command_complete(out, "RESET");
        }
        ["SHOW", ..] | ["RESET", ..] => {
            return Err((
                "0A000",
                format!("unsupported admin command \"{command}\"; SHOW HELP lists the commands"),
            ));
        }
        _ => {
            return Err((
                "42601",
                format!("unknown admin command \"{command}\"; SHOW HELP lists the commands"),
            ));
        }
    }
    Ok(())
}

type Row = Vec<Option<String>>;

/// Counts are typed int8, so psql aligns them and typed clients read
/// numbers; everything else is text.
fn is_count(column: &str) -> bool {
    const COUNTS: &[&str] = &[
        "id",
        "sessions",
        "statements",
        "transactions",
        "errors",
        "coalesced_batches",
        "probes_passed",
        "probes_failed",
        "rewritten_queries",
        "fallbacks",
        "reused_upstreams",
        "upstream_pid",
        "count",
    ];
    COUNTS.contains(&column)
        || column.ends_with("round_trips")
        || column.starts_with("bytes_")
        || column.starts_with("avg_")
        || column == "round_trips_saved"
}

fn table(out: &mut BytesMut, columns: &[&str], rows: Vec<Row>) {
    let typed: Vec<(&str, ColumnType)> = columns
        .iter()
        .map(|&c| {
            let ty = if is_count(c) {
                ColumnType::Int8
            } else {
                ColumnType::Text
            };
            (c, ty)
        })
        .collect();
    write::row_description(out, &typed);
    for r in &rows {
        write::data_row(out, r);
    }
    write::command_complete(out, "SHOW");
}

fn s(v: impl ToString) -> Option<String> {
    Some(v.to_string())
}

fn help(out: &mut BytesMut) {
    table(
        out,
        &["command", "description"],
        HELP.iter().map(|(c, d)| vec![s(c), s(d)]).collect(),
    );
}

const STATS_COLUMNS: &[&str] = &[
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
    "probes_passed",
    "probes_failed",
    "rewritten_queries",
    "fallbacks",
    "reused_upstreams",
    "avg_upstream_round_trip_us",
];

fn stats_row(database: Option<String>, user: Option<String>, c: &Snapshot) -> Row {
    vec![
        database,
        user,
        s(c.sessions),
        s(c.client_round_trips),
        s(c.upstream_round_trips),
        s(c.round_trips_saved()),
        s(c.handshake_round_trips),
        s(c.statements),
        s(c.transactions),
        s(c.bytes_from_client),
        s(c.bytes_to_client),
        s(c.bytes_to_upstream),
        s(c.bytes_from_upstream),
        s(c.errors),
        s(c.coalesced_batches),
        s(c.probes_passed),
        s(c.probes_failed),
        s(c.rewritten_queries),
        s(c.fallbacks),
        s(c.reused_upstreams),
        s(c.avg_latency_us()),
    ]
}

fn stats(shared: &Arc<Shared>, out: &mut BytesMut) {
    let groups = shared.stats.by_database_user();
    let mut total = Snapshot::default();
    let mut rows: Vec<Row> = Vec::with_capacity(groups.len() + 1);
    for ((db, user), c) in &groups {
        total.add(c);
        rows.push(stats_row(s(db), s(user), c));
    }
    // The total row has no user; its database reads "(total)".
    rows.push(stats_row(s("(total)"), None, &total));
    table(out, STATS_COLUMNS, rows);
}

fn clients(shared: &Arc<Shared>, out: &mut BytesMut) {
    let rows = shared
        .stats
        .sessions()
        .iter()
        .map(|si| {
            let c = si.counters.snapshot();
            let pid = si.upstream_pid.load(std::sync::atomic::Ordering::Relaxed);
            vec![
                s(si.id),
                s(&si.database),
                s(&si.user),
                si.peer.map(|p| p.to_string()),
                s(&si.application_name),
                s(si.state().as_str()),
                s(c.client_round_trips),
                s(c.upstream_round_trips),
                s(c.handshake_round_trips),
                s(c.statements),
                s(c.transactions),
                (pid != 0).then(|| pid.to_string()),
                s(timestamp(si.started)),
                si.relay().as_str().map(str::to_owned),
            ]
        })
        .collect();
    let columns = [
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
    ];
    table(out, &columns, rows);
}

/// Session mode: one upstream connection per client session.
fn servers(shared: &Arc<Shared>, out: &mut BytesMut) {
    let upstream = shared.upstream_addr();
    let rows = shared
        .stats
        .sessions()
        .iter()
        .map(|si| {
            let pid = si.upstream_pid.load(std::sync::atomic::Ordering::Relaxed);
            vec![
                s(si.id),
                s(&si.database),
                s(&si.user),
                s(&upstream),
                (pid != 0).then(|| pid.to_string()),
                s(si.state().as_str()),
                s(si.counters
                    .upstream_round_trips
                    .load(std::sync::atomic::Ordering::Relaxed)),
                s(timestamp(si.started)),
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
                s(&upstream),
                k.pid.map(|p| p.to_string()),
                s("kept"),
                None,
                s(timestamp(opened)),
            ]
        }))
        .collect();
    let columns = [
        "id",
        "database",
        "user",
        "upstream",
        "upstream_pid",
        "state",
        "upstream_round_trips",
        "connect_time",
    ];
    table(out, &columns, rows);
}

fn config(shared: &Arc<Shared>, out: &mut BytesMut) {
    let mut rows = Vec::new();
    match toml::Value::try_from(&*shared.config) {
        Ok(toml::Value::Table(t)) => flatten("", &toml::Value::Table(t), &mut rows),
        Ok(_) | Err(_) => rows.push(vec![s("error"), s("configuration cannot be shown")]),
    }
    // Where "embedded" actually listens.
    for r in &mut rows {
        if r[0].as_deref() == Some("upstream.address") && r[1].as_deref() == Some("embedded") {
            r[1] = s(format!("embedded ({})", shared.upstream_addr()));
        }
    }
    table(out, &["key", "value"], rows);
}

/// `section.key = value` rows; any key naming a password is left out, even
/// though the config already never serialises one.
fn flatten(prefix: &str, v: &toml::Value, rows: &mut Vec<Row>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                if k.contains("password") {
                    continue;
                }
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, rows);
            }
        }
        toml::Value::String(x) => rows.push(vec![s(prefix), s(x)]),
        toml::Value::Array(a) if a.iter().all(|x| x.is_table()) => {
            // `[[admin.users]]`: show the names only.
            let names: Vec<String> = a
                .iter()
                .filter_map(|x| x.get("name").and_then(|n| n.as_str()).map(str::to_owned))
                .collect();
            rows.push(vec![s(prefix), s(names.join(", "))]);
        }
        other => rows.push(vec![s(prefix), s(other)]),
    }
}

fn fallbacks(shared: &Arc<Shared>, out: &mut BytesMut) {
    let rows = shared
        .stats
        .fallback_reasons()
        .into_iter()
        .map(|(r, n)| vec![s(r), s(n)])
        .collect();
    table(out, &["reason", "count"], rows);
}

fn rewrites(shared: &Arc<Shared>, out: &mut BytesMut) {
    let mut rows = vec![vec![
        s("rewritten"),
        None,
        s(shared.stats.total().rewritten_queries),
    ]];
    for (r, n) in shared.stats.fallback_reasons() {
        if let Some(result) = r.strip_prefix("cypher verify: ") {
            rows.push(vec![s("verify"), s(result), s(n)]);
        } else if r.starts_with("cypher") {
            rows.push(vec![s("fallback"), s(r), s(n)]);
        }
    }
    table(out, &["outcome", "reason", "count"], rows);
}

/// `YYYY-MM-DD HH:MM:SS UTC` without a calendar crate.
pub fn timestamp(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps() {
        assert_eq!(timestamp(SystemTime::UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_709_210_096);
        assert_eq!(timestamp(t), "2024-02-29 12:34:56 UTC");
    }
}
