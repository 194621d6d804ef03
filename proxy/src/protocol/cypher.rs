//! A session's side of Cypher rewriting: route `cypher()` statements
//! through the services plans, fetch the AGE catalog over this session's own
//! upstream connection when nobody has it yet, and wait while another
//! session fetches it.

use bytes::{Bytes, BytesMut};
use std::sync::Arc;

use onetrip_planner::{
    analysis::Analysis,
    classify::StatementClass,
    cypher::{Catalog, Rewrite},
};
use tokio::sync::watch;

use super::{Services, text::Sql, verdict::Analyses};
use crate::{
    cypher_cache::{DECLINED_PREFIX, Lookup},
    stats::{Counters, SessionInfo},
    wire::{backend, frontend, tag, write},
};
use onetrip_planner::words::Words;

/// Rows of `Catalog::QUERY` as text.
type Row = [Option<String>; 6];

#[derive(Default)]
struct Fetch {
    rows: Vec<Row>,
    /// Why it failed: the SQLSTATE, or "" for an answer not understood.
    failed: Option<String>,
}

/// SQLSTATEs of the catalog query on a database without AGE: no schema
/// `ag_catalog`, or no table `ag_graph` in it.
const NO_AGE: [&str; 2] = ["3F000", "42P01"];

/// Most bytes of rows kept per side when verifying; past it the run is
/// reported as too large to compare.
const MAX_VERIFY_BYTES: usize = 16 << 20;

/// One side's answer in verify mode: rows (DataRow bodies) and SQLSTATE.
#[derive(Default)]
struct Answer {
    rows: Vec<Bytes>,
    bytes: usize,
    error: Option<String>,
}

impl Answer {
    fn observe(&mut self, t: u8, msg: &Bytes) {
        match t {
            tag::DATA_ROW if self.bytes <= MAX_VERIFY_BYTES => {
                self.bytes += msg.len();
                self.rows.push(msg.slice(5..));
            }
            tag::ERROR_RESPONSE => self.error = backend::error_field(msg, b'C').map(str::to_owned),
            _ => {}
        }
    }
}

/// `[planner] verify`: the compiled statement runs first, unseen; then the
/// client's own statement, whose answer the client gets; they are compared.
struct Verify {
    original: Bytes,
    compiled: Answer,
    /// The compiled run is over; the original's answer is being relayed.
    relaying: bool,
    relayed: Answer,
}

pub struct CypherSession {
    enabled: bool,
    verify_mode: bool,
    /// Made at the first statement routing acts on (one that names a
    /// graph, a label or AGE): most sessions never do, and hold 16 bytes.
    work: Option<Box<Work>>,
}

/// What a session that has routed a statement keeps.
struct Work {
    database: String,
    /// A client Query/Parse held until the catalog is there.
    pending: Option<(u8, Bytes)>,
    waiting: Option<watch::Receiver<u64>>,
    fetch: Option<Fetch>,
    /// Verify mode's run: rare (a debugging mode), and large beside the rest.
    verify: Option<Box<Verify>>,
    /// This session owns the database's catalog fetch.
    loading: bool,
    /// The catalog query to send just before the message being routed, in
    /// the same write: the fetch costs no round trip of its own.
    riding: Option<Bytes>,
    /// The catalog query to send right behind the message being routed.
    trailing: Option<Bytes>,
    /// A statement that may change labels ran: refetch after it completes.
    invalidate_at_ready: bool,
}

/// What routing needs to know of the session.
pub struct SessionView {
    /// Nothing is outstanding upstream and no transaction is open, so a
    /// query of the proxy's own can run unseen.
    pub quiet: bool,
    /// `ag_catalog` is on the search path, when known.
    pub ag_catalog_on_path: Option<bool>,
    /// AGE's library is loaded in the backend.
    pub age_loaded: bool,
}

/// What the session should do with a client message.
pub enum Route {
    /// The message as it came.
    Forward,
    /// The message with its `cypher()` calls compiled.
    Rewritten(Bytes),
    /// Held; `to_upstream` (the catalog query, if any) goes upstream now.
    Held(Option<Bytes>),
}

impl CypherSession {
    pub fn new(services: &Services) -> Self {
        Self {
            enabled: services.config.planner.cypher_rewrite,
            verify_mode: services.config.planner.verify,
            work: None,
        }
    }

    /// `[planner] cypher_rewrite` is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Client input waits while another session's catalog fetch is
    /// awaited, or while verify mode runs the compiled statement first. A
    /// fetch of this session's own goes ahead of the client's statement,
    /// which follows it in the same write: nothing waits for it.
    pub fn blocks_client(&self) -> bool {
        self.work
            .as_ref()
            .is_some_and(|w| w.waiting.is_some() || w.verify.as_ref().is_some_and(|v| !v.relaying))
    }

    /// The catalog query to send ahead of the message just routed, if
    /// routing started a fetch.
    pub fn take_riding(&mut self) -> Option<Bytes> {
        self.work.as_mut()?.riding.take()
    }

    /// Upstream messages must be read whole (to parse or compare them).
    pub fn reads_whole(&self) -> bool {
        self.work
            .as_ref()
            .is_some_and(|w| w.fetch.is_some() || w.verify.is_some())
    }

    /// The watch to wait on while another session fetches the catalog.
    pub fn wait_handle(&self) -> Option<watch::Receiver<u64>> {
        self.work.as_ref()?.waiting.clone()
    }

    /// The other session's fetch ended (or was given up): retry.
    pub fn wake(&mut self) {
        if let Some(w) = self.work.as_mut() {
            w.waiting = None;
        }
    }

    /// A message is held for the catalog.
    pub fn holds_message(&self) -> bool {
        self.work.as_ref().is_some_and(|w| w.pending.is_some())
    }

    /// The held message, once nothing blocks it any more.
    pub fn take_pending(&mut self) -> Option<(u8, Bytes)> {
        if self.blocks_client() {
            None
        } else {
            self.work.as_mut()?.pending.take()
        }
    }

    /// Routes a Query or Parse (`msg`) whose statement is `sql`; returns
    /// its analysis too, when one was made.
    pub fn route(
        &mut self,
        msg: &Bytes,
        sql: &Sql,
        view: &SessionView,
        services: &Services,
        analyses: &mut Analyses,
        info: &SessionInfo,
    ) -> (Route, Option<Arc<Analysis>>) {
        let enabled = self.enabled;
        let verify_mode = self.verify_mode;
        let w = self.work.get_or_insert_with(|| Work::new(&info.database));
        let words = sql.words();
        if words.all(Words::EXTENSION | Words::AGE) {
            w.invalidate_at_ready = true;
            services.cypher.invalidate(&w.database);
            return (Route::Forward, None);
        }
        // One analysis: for the catalog, when the statement may have calls
        // to compile and the catalog is there.
        let calls = enabled && words.any(Words::CYPHER);
        let ready = calls.then(|| services.cypher.ready(&w.database)).flatten();
        let analysis = match &ready {
            Some((version, catalog)) => analysis(*version, sql, catalog, services, analyses),
            None => analyses.of(sql),
        };
        if analysis.changes_catalog {
            // The change happens when the statement runs: the catalog is
            // refreshed after it. Such a statement is never compiled, so it
            // goes now; waiting for a fetch here would invalidate the fetched
            // catalog again when the statement is routed anew, forever.
            w.invalidate_at_ready = true;
            services.cypher.invalidate(&w.database);
            if enabled {
                w.fetch_after(msg, &analysis, view.quiet, services);
            }
            return (Route::Forward, Some(analysis));
        }
        if !calls {
            return (Route::Forward, Some(analysis));
        }
        let route = match ready {
            Some(_) => w.compiled(msg, &analysis, view, verify_mode, services, info),
            None => w.without_catalog(msg, view.quiet, services, info),
        };
        (route, Some(analysis))
    }
    /// The catalog query to send right behind the message just routed.
    pub fn take_trailing(&mut self) -> Option<Bytes> {
        self.work.as_mut()?.trailing.take()
    }

    /// The message a catalog query was to follow did not go upstream.
    pub fn trailing_dropped(&mut self, services: &Services) {
        if let Some(w) = self.work.as_mut() {
            w.fetch = None;
            w.loading = false;
            w.invalidate_at_ready = true;
            services.cypher.abandon(&w.database);
        }
    }

    /// An upstream message of the session's own Cypher query (the catalog
    /// query, or the compiled statement in verify mode). Returns a message
    /// to send upstream next (the client's own statement, in verify mode).
    pub fn on_hidden_answer(&mut self, t: u8, msg: &Bytes, services: &Services) -> Option<Bytes> {
        let w = self.work.as_mut()?;
        if let Some(v) = w.verify.as_mut() {
            v.compiled.observe(t, msg);
            if t == tag::READY_FOR_QUERY {
                v.relaying = true;
                return Some(v.original.clone());
            }
            return None;
        }
        w.on_fetch_answer(t, msg, services);
        None
    }

    /// A message of the client's own statement in verify mode, on its way
    /// to the client; at its end the two answers are compared.
    pub fn observe_relayed(&mut self, t: u8, msg: &Bytes, services: &Services, info: &SessionInfo) {
        let Some(w) = self.work.as_mut() else { return };
        let Some(v) = w.verify.as_mut().filter(|v| v.relaying) else {
            return;
        };
        v.relayed.observe(t, msg);
        if t != tag::READY_FOR_QUERY {
            return;
        }
        let Some(mut v) = w.verify.take() else {
            return;
        };
        let outcome = if v.compiled.bytes > MAX_VERIFY_BYTES || v.relayed.bytes > MAX_VERIFY_BYTES {
            "cypher verify: too large to compare"
        } else {
            // Rows are compared as a multiset: without a total ORDER BY,
            // both orders are correct answers.
            v.compiled.rows.sort();
            v.relayed.rows.sort();
            if v.compiled.rows == v.relayed.rows && v.compiled.error == v.relayed.error {
                "cypher verify: match"
            } else {
                Counters::add(&info.counters.fallbacks, 1);
                tracing::warn!(
                    session = info.id,
                    sql = %frontend::query_text(&v.original).unwrap_or(""),
                    age_rows = v.relayed.rows.len(),
                    compiled_rows = v.compiled.rows.len(),
                    age_error = ?v.relayed.error,
                    compiled_error = ?v.compiled.error,
                    "cypher verify: compiled SQL and AGE disagree"
                );
                "cypher verify: mismatch"
            }
        };
        services.stats.note_fallback(outcome);
    }
    /// At each ReadyForQuery the client sees.
    pub fn on_ready(&mut self, services: &Services) {
        if let Some(w) = self.work.as_mut()
            && std::mem::take(&mut w.invalidate_at_ready)
        {
            services.cypher.invalidate(&w.database);
        }
    }

    /// The session ends: a fetch it owned must not leave others waiting.
    pub fn close(&mut self, services: &Services) {
        if let Some(w) = self.work.as_ref()
            && w.loading
        {
            services.cypher.abandon(&w.database);
        }
    }
}

impl Work {
    fn new(database: &str) -> Box<Self> {
        Box::new(Self {
            database: database.to_owned(),
            pending: None,
            waiting: None,
            fetch: None,
            verify: None,
            loading: false,
            riding: None,
            trailing: None,
            invalidate_at_ready: false,
        })
    }

    /// After a statement that may change the catalog, the catalog read can
    /// go right behind it in the same write, so the reads after it are
    /// compiled: when it is one statement of a simple Query in a session
    /// with no transaction open and nothing in flight, it commits before
    /// the catalog read starts, which sees what it did.
    fn fetch_after(&mut self, msg: &Bytes, analysis: &Analysis, quiet: bool, services: &Services) {
        if !quiet
            || msg.first() != Some(&tag::QUERY)
            || analysis.class.statement_count != 1
            || analysis.class.class == StatementClass::TransactionControl
            || self.loading
        {
            return;
        }
        if let Lookup::MustLoad = services.cypher.lookup(&self.database) {
            self.fetch = Some(Fetch::default());
            self.loading = true;
            // The read follows the change: nothing to invalidate after it.
            self.invalidate_at_ready = false;
            self.trailing = Some(catalog_query());
        }
    }

    /// A statement whose calls were compiled (or declined) for the catalog.
    fn compiled(
        &mut self,
        msg: &Bytes,
        analysis: &Analysis,
        view: &SessionView,
        verify_mode: bool,
        services: &Services,
        info: &SessionInfo,
    ) -> Route {
        let t = msg.first().copied().unwrap_or_default();
        let quiet = view.quiet;
        match &analysis.rewrite {
            Rewrite::Rewritten(_) if view.ag_catalog_on_path != Some(true) => {
                // An unqualified cypher() is AGE's only with ag_catalog on
                // the search path, and the compiled SQL names AGE's
                // operators unqualified too.
                Counters::add(&info.counters.fallbacks, 1);
                services.stats.note_fallback(match view.ag_catalog_on_path {
                    Some(_) => "cypher: ag_catalog not on the search_path",
                    None => "cypher: search_path not known",
                });
                Route::Forward
            }
            Rewrite::Rewritten(_) if !view.age_loaded => {
                // Without AGE's library loaded (LOAD 'age', or a preload),
                // cypher() fails where compiled SQL runs.
                Counters::add(&info.counters.fallbacks, 1);
                services
                    .stats
                    .note_fallback("cypher: AGE not known to be loaded in the session");
                Route::Forward
            }
            Rewrite::Rewritten(_)
                if verify_mode && analysis.class.class != StatementClass::Read =>
            {
                // Verify mode runs the statement twice: only a read may
                // run twice.
                services
                    .stats
                    .note_fallback("cypher verify: skipped (not a read)");
                Route::Forward
            }
            Rewrite::Rewritten(new_sql) if verify_mode => {
                if t != tag::QUERY || !quiet {
                    // Only a quiet simple Query can run twice unseen;
                    // otherwise AGE answers alone.
                    services.stats.note_fallback(
                        "cypher verify: skipped (extended protocol or busy session)",
                    );
                    return Route::Forward;
                }
                Counters::add(&info.counters.rewritten_queries, 1);
                let compiled = rebuild(t, msg, new_sql);
                self.verify = Some(Box::new(Verify {
                    original: msg.clone(),
                    compiled: Answer::default(),
                    relaying: false,
                    relayed: Answer::default(),
                }));
                Route::Held(Some(compiled))
            }
            Rewrite::Rewritten(new_sql) => {
                Counters::add(&info.counters.rewritten_queries, 1);
                Route::Rewritten(rebuild(t, msg, new_sql))
            }
            Rewrite::Declined(reason) => {
                Counters::add(&info.counters.fallbacks, 1);
                services
                    .stats
                    .note_fallback(&format!("{DECLINED_PREFIX}{reason}"));
                Route::Forward
            }
            Rewrite::Unchanged => Route::Forward,
        }
    }

    /// A statement with calls to compile while the catalog is not loaded:
    /// fetch it (or wait for the session fetching it) and route it again.
    fn without_catalog(
        &mut self,
        msg: &Bytes,
        quiet: bool,
        services: &Services,
        info: &SessionInfo,
    ) -> Route {
        let t = msg.first().copied().unwrap_or_default();
        match services.cypher.lookup(&self.database) {
            // Loaded meanwhile: the next statement is compiled.
            Lookup::Ready(..) => Route::Forward,
            // This session's own fetch is on its way, and statements of the
            // client's too: this one goes to AGE rather than wait (sent
            // later, it could start a round trip of its own).
            Lookup::Loading(_) if self.loading && !quiet => {
                Counters::add(&info.counters.fallbacks, 1);
                services.stats.note_fallback("cypher: catalog loading");
                Route::Forward
            }
            Lookup::Loading(rx) => {
                self.pending = Some((t, msg.clone()));
                self.waiting = Some(rx);
                Route::Held(None)
            }
            Lookup::MustLoad if quiet => {
                // The catalog query goes just before the statement, in the
                // same write, and the statement goes to AGE as it came:
                // the fetch costs no round trip of its own, and statements
                // after it are compiled.
                self.fetch = Some(Fetch::default());
                self.loading = true;
                self.riding = Some(catalog_query());
                Counters::add(&info.counters.fallbacks, 1);
                services
                    .stats
                    .note_fallback("cypher: catalog fetched alongside");
                Route::Forward
            }
            Lookup::MustLoad => {
                services.cypher.abandon(&self.database);
                Counters::add(&info.counters.fallbacks, 1);
                services.stats.note_fallback("cypher: catalog_not_loaded");
                Route::Forward
            }
            Lookup::Failed => {
                Counters::add(&info.counters.fallbacks, 1);
                services
                    .stats
                    .note_fallback("cypher: catalog fetch failed, retry not due");
                Route::Forward
            }
        }
    }

    /// An upstream message of our catalog query. Returns true when the
    /// fetch is complete.
    fn on_fetch_answer(&mut self, t: u8, msg: &[u8], services: &Services) -> bool {
        let Some(f) = self.fetch.as_mut() else {
            return false;
        };
        match t {
            tag::DATA_ROW => match data_row(msg) {
                Some(row) => f.rows.push(row),
                None => f.failed = Some(String::new()),
            },
            tag::ERROR_RESPONSE => {
                f.failed = Some(backend::error_field(msg, b'C').unwrap_or("").to_owned())
            }
            tag::READY_FOR_QUERY => {
                let f = self.fetch.take().unwrap_or_default();
                self.loading = false;
                if let Some(code) = f.failed.as_deref()
                    && !NO_AGE.contains(&code)
                {
                    // Not AGE's absence: a permission, a timeout, a
                    // connection's trouble. Tried again later.
                    services
                        .stats
                        .note_fallback(&format!("cypher: catalog fetch failed ({code})"));
                    services.cypher.failed(&self.database);
                    return true;
                }
                let catalog = f.failed.is_none().then(|| {
                    Catalog::from_rows(f.rows.iter().map(|r| {
                        let s = |i: usize| r[i].as_deref();
                        let oid = s(2).and_then(|o| o.parse().ok()).unwrap_or(0);
                        (
                            s(0).unwrap_or(""),
                            s(1).unwrap_or(""),
                            oid,
                            s(3),
                            s(4),
                            s(5),
                        )
                    }))
                });
                services.cypher.finish(&self.database, catalog);
                return true;
            }
            _ => {}
        }
        false
    }
}

/// The analysis of `sql` for `catalog`: the session's, another
/// session's, or made now and shared.
fn analysis(
    version: u64,
    sql: &Sql,
    catalog: &Catalog,
    services: &Services,
    analyses: &mut Analyses,
) -> Arc<Analysis> {
    if let Some(a) = analyses.cached(sql.as_str(), version) {
        services.cypher.note_plan_reused();
        return a;
    }
    if let Some(a) = services.cypher.shared_analysis(version, sql.as_str()) {
        services.cypher.note_plan_reused();
        analyses.keep(sql.as_str(), a.clone(), version);
        return a;
    }
    services.cypher.note_plan_made();
    let a = analyses.for_catalog(sql.as_str(), Some((version, catalog)));
    services
        .cypher
        .share_analysis(version, sql.as_str(), a.clone());
    a
}

/// Could routing do anything but pass on a statement with these words
/// (compile it, wait for the catalog, or note a catalog change)?
pub(super) fn may_route(w: Words) -> bool {
    w.any(Words::CYPHER | Words::GRAPH | Words::LABEL | Words::EXTENSION)
}

pub(super) fn statement_text(t: u8, msg: &[u8]) -> Option<&str> {
    match t {
        tag::QUERY => frontend::query_text(msg),
        tag::PARSE => frontend::parse(msg).map(|(_, sql)| sql),
        _ => None,
    }
}

/// The same Query or Parse with `sql` in place of its statement text.
fn rebuild(t: u8, msg: &[u8], sql: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(msg.len() + sql.len());
    match t {
        tag::PARSE => {
            let body = backend::body(msg);
            let name_end = body.iter().position(|&b| b == 0).unwrap_or(0);
            let sql_end = body
                .get(name_end + 1..)
                .unwrap_or(&[])
                .iter()
                .position(|&b| b == 0)
                .map_or(body.len(), |p| name_end + 1 + p);
            let rest = body.get(sql_end + 1..).unwrap_or(&[]);
            write::parse_with_text(&mut out, &body[..name_end], sql, rest);
        }
        _ => write::query(&mut out, sql),
    }
    out.freeze()
}

fn catalog_query() -> Bytes {
    let mut q = BytesMut::new();
    write::query(&mut q, Catalog::QUERY);
    q.freeze()
}

/// The catalog query's row; `None` if malformed.
fn data_row(msg: &[u8]) -> Option<Row> {
    let cols = backend::data_row_text(msg, 6)?;
    cols.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn rebuilds_parse_keeping_name_and_types() {
        let mut m = BytesMut::new();
        write::message(&mut m, tag::PARSE, |b| {
            b.put_slice(b"s1\0select 1\0");
            b.put_i16(1);
            b.put_u32(25);
        });
        let out = rebuild(tag::PARSE, &m, "select 2");
        assert_eq!(frontend::parse(&out), Some(("s1", "select 2")));
        assert_eq!(&out[out.len() - 6..], &[0, 1, 0, 0, 0, 25]);
    }
}
