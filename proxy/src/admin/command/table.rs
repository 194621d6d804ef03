//! What the commands answer with: a result set of text values, counts typed
//! int8.

use std::time::SystemTime;

use bytes::BytesMut;

use crate::wire::write::{self, ColumnType};

/// One row's values; `None` is NULL.
pub(super) type Row = Vec<Option<String>>;

/// A non-NULL value.
pub(super) fn cell(v: impl ToString) -> Option<String> {
    Some(v.to_string())
}

/// A whole result set: RowDescription, the rows, and `SHOW`'s tag.
pub(super) fn table(out: &mut BytesMut, columns: &[&str], rows: Vec<Row>) {
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
        "reads",
        "upstream_pid",
        "count",
    ];
    COUNTS.contains(&column)
        || column.ends_with("round_trips")
        || column.starts_with("bytes_")
        || column.starts_with("avg_")
        || column == "round_trips_saved"
}

/// `YYYY-MM-DD HH:MM:SS UTC` without a calendar crate.
pub(super) fn timestamp(t: SystemTime) -> String {
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
