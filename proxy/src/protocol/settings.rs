//! The session's settings that decide what the proxy may do for it: the
//! default isolation level (coalescing is exact only under READ COMMITTED),
//! the search path (a compiled `cypher()` call resolves names as the
//! original would only with `ag_catalog` on it) and whether AGE's library
//! is loaded in the backend (without it, `cypher()` fails where compiled
//! SQL would run: AGE's parser hook is installed when its library loads,
//! by a preload or by LOAD).
//!
//! PostgreSQL reports neither to the client, and a role, a database or
//! `postgresql.conf` may set both, so the proxy asks: a query of its own,
//! sent ahead of the client's first message in the same write, whose
//! answer the client never sees. Until the answer is in, both count as
//! unknown, which allows nothing.

use bytes::{Bytes, BytesMut};
use onetrip_planner::classify::{IsolationLevel, parse_isolation_name};

use crate::wire::{backend, tag, write};

/// AGE's library, once loaded, defines the setting `age.enable_containment`:
/// anyone may read it, where the preload lists are for superusers only.
const QUERY: &str = "SELECT pg_catalog.current_setting('default_transaction_isolation'), \
     pg_catalog.current_setting('search_path'), \
     pg_catalog.current_setting('age.enable_containment', true)";

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
    /// The answer's row.
    row: Option<Vec<Option<String>>>,
    /// Whether `ag_catalog` is on the search path; `None` when unknown
    /// (not asked yet, or changed since).
    ag_catalog_on_path: Option<bool>,
    /// What the first answer said: the values RESET and DISCARD ALL return
    /// to.
    defaults: Option<(Option<IsolationLevel>, Option<bool>)>,
    /// AGE's library is loaded in the backend (preloaded, or loaded by a
    /// LOAD the session ran); it stays loaded for the backend's life.
    age_loaded: bool,
    /// A statement sent after the query may have changed the search path:
    /// the answer tells what it was before.
    stale: bool,
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
        self.stale = false;
        let mut q = BytesMut::with_capacity(QUERY.len() + 6);
        write::query(&mut q, QUERY);
        q.freeze()
    }

    /// An answer to the query; at its end, the default isolation level
    /// (`None` when the query failed or the level is not one PostgreSQL
    /// has).
    pub fn on_answer(&mut self, t: u8, msg: &[u8]) -> Option<Option<IsolationLevel>> {
        match t {
            tag::DATA_ROW => self.row = backend::data_row_text(msg, 3),
            tag::READY_FOR_QUERY => {
                self.asked = Asked::Answered;
                let mut row = self.row.take().unwrap_or_default().into_iter();
                let mut next = || row.next().flatten();
                let (isolation, path, age_setting) = (next(), next(), next());
                self.age_loaded |= age_setting.is_some();
                let on = path.map(|p| on_path(&p, "ag_catalog"));
                self.ag_catalog_on_path = if self.stale { None } else { on };
                let isolation = isolation
                    .and_then(|i| parse_isolation_name(&i))
                    .map(IsolationLevel::effective);
                if self.defaults.is_some() {
                    // Asked again for the search path: the default isolation
                    // is the first answer's (the client may have set it since).
                    return None;
                }
                self.defaults = Some((isolation, on));
                return Some(isolation);
            }
            _ => {}
        }
        None
    }

    /// A statement may have changed the search path.
    pub fn search_path_may_change(&mut self) {
        self.ag_catalog_on_path = None;
        self.stale |= self.asked == Asked::Waiting;
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
            age_loaded: self.age_loaded,
            stale: false,
        })
    }

    /// AGE's library is known to be loaded in the backend.
    pub fn age_loaded(&self) -> bool {
        self.age_loaded
    }

    /// The session loaded AGE's library (a LOAD completed).
    pub fn loaded_age(&mut self) {
        self.age_loaded = true;
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

/// Does a LOAD's or a preload list's library name (comma-separated, names
/// possibly quoted or with a directory) name AGE's library?
pub fn lists_age(list: &str) -> bool {
    list.split(',')
        .map(|l| l.trim().trim_matches('"'))
        .map(|l| l.rsplit('/').next().unwrap_or(l))
        .any(|l| l == "age" || l == "age.so")
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
                None,
            ],
        );
        assert_eq!(s.on_answer(tag::DATA_ROW, &row), None);
        let level = s.on_answer(tag::READY_FOR_QUERY, &write::ready_frame(b'I'));
        assert_eq!(level, Some(Some(IsolationLevel::RepeatableRead)));
        assert_eq!(s.ag_catalog_on_path(), Some(true));
        assert!(!s.age_loaded());
        s.search_path_may_change();
        assert!(s.wants_search_path());

        // A change sent after the question makes the answer stale.
        let _ = s.ask();
        s.search_path_may_change();
        s.on_answer(tag::DATA_ROW, &row);
        assert_eq!(
            s.on_answer(tag::READY_FOR_QUERY, &write::ready_frame(b'I')),
            None
        );
        assert_eq!(s.ag_catalog_on_path(), None);
        assert_eq!(s.default_isolation(), Some(IsolationLevel::RepeatableRead));
    }

    #[test]
    fn preload_lists() {
        assert!(lists_age("age"));
        assert!(lists_age("pg_stat_statements, \"$libdir/age\""));
        assert!(lists_age("$libdir/plugins/age.so"));
        assert!(!lists_age("agensgraph, page"));
        assert!(!lists_age(""));
    }

    #[test]
    fn quoted_and_missing_schemas() {
        assert!(on_path("\"ag_catalog\"", "ag_catalog"));
        assert!(!on_path("\"AG_CATALOG\"", "ag_catalog"));
        assert!(!on_path("public, \"$user\"", "ag_catalog"));
        assert!(on_path("public,ag_catalog", "ag_catalog"));
    }
}
