//! The session's settings that decide what the proxy may do for it: the
//! default isolation level (coalescing is exact only under READ COMMITTED)
//! and the search path (a compiled `cypher()` call resolves names as the
//! original would only with `ag_catalog` on it).
//!
//! PostgreSQL reports neither to the client, and a role, a database or
//! `postgresql.conf` may set both, so the proxy asks: a query of its own,
//! sent ahead of the client's first message in the same write, whose
//! answer the client never sees. Until the answer is in, both count as
//! unknown, which allows nothing.

use bytes::{BufMut, Bytes, BytesMut};
use onetrip_planner::classify::{IsolationLevel, parse_isolation_name};

use crate::wire::{backend, tag, write};

const QUERY: &str = "SELECT pg_catalog.current_setting('default_transaction_isolation'), \
                     pg_catalog.current_setting('search_path')";

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Asked {
    #[default]
    No,
    /// The query is on its way.
    Waiting,
    Answered,
}

#[derive(Debug, Default, Clone)]
pub struct Settings {
    asked: Asked,
    /// The answer's row: default isolation, search path.
    row: Option<(String, String)>,
    /// Whether `ag_catalog` is on the search path; `None` when unknown
    /// (not asked yet, or changed since).
    ag_catalog_on_path: Option<bool>,
    /// What the first answer said: the values RESET and DISCARD ALL return
    /// to.
    defaults: Option<(Option<IsolationLevel>, Option<bool>)>,
}

impl Settings {
    /// The query has been sent at least once.
    pub fn asked(&self) -> bool {
        self.asked != Asked::No
    }

    /// The query is on its way.
    pub fn waiting(&self) -> bool {
        self.asked == Asked::Waiting
    }

    /// The search path is not known but could be asked for again.
    pub fn wants_search_path(&self) -> bool {
        self.asked == Asked::Answered && self.ag_catalog_on_path.is_none()
    }

    /// The query to send.
    pub fn ask(&mut self) -> Bytes {
        self.asked = Asked::Waiting;
        self.row = None;
        let mut q = BytesMut::with_capacity(QUERY.len() + 6);
        write::message(&mut q, tag::QUERY, |b| {
            b.put_slice(QUERY.as_bytes());
            b.put_u8(0);
        });
        q.freeze()
    }

    /// An answer to the query; at its end, the default isolation level
    /// (`None` when the query failed or the level is not one PostgreSQL
    /// has).
    pub fn on_answer(&mut self, t: u8, msg: &[u8]) -> Option<Option<IsolationLevel>> {
        match t {
            tag::DATA_ROW => self.row = two_text_columns(backend::body(msg)),
            tag::READY_FOR_QUERY => {
                self.asked = Asked::Answered;
                let (isolation, path) = self.row.take().unzip();
                self.ag_catalog_on_path = path.map(|p| on_path(&p, "ag_catalog"));
                let isolation = isolation
                    .and_then(|i| parse_isolation_name(&i))
                    .map(IsolationLevel::effective);
                self.defaults
                    .get_or_insert((isolation, self.ag_catalog_on_path));
                return Some(isolation);
            }
            _ => {}
        }
        None
    }

    /// A statement may have changed the search path.
    pub fn search_path_may_change(&mut self) {
        self.ag_catalog_on_path = None;
    }

    pub fn ag_catalog_on_path(&self) -> Option<bool> {
        self.ag_catalog_on_path
    }

    /// The settings of the same connection after DISCARD ALL, for the next
    /// client of a kept connection: the defaults learned, if they were.
    pub fn after_reset(&self) -> Option<Settings> {
        let defaults = self.defaults?;
        Some(Settings {
            asked: Asked::Answered,
            row: None,
            ag_catalog_on_path: defaults.1,
            defaults: Some(defaults),
        })
    }

    /// The default isolation level, when learned.
    pub fn default_isolation(&self) -> Option<IsolationLevel> {
        self.defaults.and_then(|d| d.0)
    }
}

/// Is `schema` one of the comma-separated names of `search_path`?
fn on_path(search_path: &str, schema: &str) -> bool {
    search_path
        .split(',')
        .map(|s| s.trim())
        .map(
            |s| match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                Some(quoted) => quoted.replace("\"\"", "\""),
                None => s.to_ascii_lowercase(),
            },
        )
        .any(|s| s == schema)
}

/// A DataRow body of two non-NULL text columns.
fn two_text_columns(body: &[u8]) -> Option<(String, String)> {
    let n = i16::from_be_bytes(body.get(..2)?.try_into().ok()?);
    if n != 2 {
        return None;
    }
    let mut at = 2;
    let mut col = || {
        let len = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
        let len = usize::try_from(len).ok()?;
        at += 4;
        let s = std::str::from_utf8(body.get(at..at + len)?).ok()?;
        at += len;
        Some(s.to_owned())
    };
    Some((col()?, col()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_answer() {
        let mut s = Settings::default();
        assert!(!s.asked());
        let q = s.ask();
        assert_eq!(q[0], tag::QUERY);
        let mut row = BytesMut::new();
        write::data_row(
            &mut row,
            &[
                Some("repeatable read"),
                Some("\"$user\", public, AG_CATALOG"),
            ],
        );
        assert_eq!(s.on_answer(tag::DATA_ROW, &row), None);
        let level = s.on_answer(tag::READY_FOR_QUERY, &write::ready_frame(b'I'));
        assert_eq!(level, Some(Some(IsolationLevel::RepeatableRead)));
        assert_eq!(s.ag_catalog_on_path(), Some(true));
        s.search_path_may_change();
        assert!(s.wants_search_path());
    }

    #[test]
    fn quoted_and_missing_schemas() {
        assert!(on_path("\"ag_catalog\"", "ag_catalog"));
        assert!(!on_path("\"AG_CATALOG\"", "ag_catalog"));
        assert!(!on_path("public, \"$user\"", "ag_catalog"));
        assert!(on_path("public,ag_catalog", "ag_catalog"));
    }
}
