//! A session's round trips per statement: counted by statement text while
//! the session runs, merged by fingerprint when it ends. A simple Query's
//! text usually carries its literals and is seldom sent again: it is
//! counted under its fingerprint at once.

use std::cell::RefCell;

use rustc_hash::FxHashMap;

use onetrip_planner::{
    fingerprint::{Literals, fingerprint, fingerprint_into},
    words::Words,
};

use super::text::Sql;
use crate::stats::StatementCounts;

/// Most distinct statement texts counted per session, and most bytes of
/// them: past either, new texts go uncounted (the session's totals still
/// count them).
const MAX_TEXTS: usize = 1000;
const MAX_TEXT_BYTES: usize = 1 << 20;

/// Past this many texts, merging them runs on the blocking pool.
const MERGE_INLINE: usize = 32;

/// Round trips per statement of one session: made at its first
/// statement, and let go once a quiet session hands its counts over
/// (`take_if_few`), so an idle client holds none.
#[derive(Default)]
pub struct Statements(Option<Box<Counted>>);

/// Most counts a thread keeps between transactions (`Statements::rest`).
const MOST_RESTING: usize = 256;

thread_local! {
    /// Counts that pooled sessions set down between transactions, for the
    /// next statement of any session of the thread to go on with, and the
    /// worker's look to hand to the shared statistics (`take_resting`).
    /// Boxed: each moves between a session and this list as it is.
    #[allow(clippy::vec_box)]
    static RESTING: RefCell<Vec<Box<Counted>>> = const { RefCell::new(Vec::new()) };
}

impl Statements {
    fn counted(&mut self) -> &mut Counted {
        self.0
            .get_or_insert_with(|| take_one_resting().unwrap_or_default())
    }

    /// A pooled session between transactions sets its counts down for
    /// the thread's next statement, its own or another session's: counts
    /// merge by text anyway, and an idle client then holds none. Counts of
    /// many texts stay with their session (`take_if_few`, `take`).
    pub fn rest(&mut self) {
        let Some(mut c) = self.0.take_if(|c| c.counts.len() <= MERGE_INLINE) else {
            return;
        };
        c.current = None;
        let kept = RESTING.try_with(|r| {
            let mut r = r.borrow_mut();
            if r.len() >= MOST_RESTING {
                return Some(c);
            }
            r.push(c);
            None
        });
        // The thread keeps enough: these stay with the session.
        self.0 = kept.ok().flatten();
    }

    /// A statement starts: later round trips count for it (for none when
    /// its text is unknown or the session has counted too many texts).
    pub fn start(&mut self, sql: Option<Sql>) {
        self.counted().start(sql)
    }

    /// A simple Query's statement starts: counted under its fingerprint.
    pub fn start_query(&mut self, sql: Option<&Sql>) {
        self.counted().start_query(sql)
    }

    /// See `Counted::query_words`. A session without counts takes the
    /// thread's resting ones, whose last text is most often its own too.
    pub fn query_words(&mut self, text: &str) -> Option<Words> {
        if self.0.is_none() {
            self.0 = take_one_resting();
        }
        self.0.as_mut()?.query_words(text)
    }

    /// The counts of the statement that runs now.
    pub fn current(&mut self) -> Option<&mut StatementCounts> {
        self.0.as_mut()?.current()
    }

    /// The counts merged by fingerprint, taken from a quiet session so that
    /// an idle client holds none: `None` when there are none, or too many
    /// to merge on the worker's thread (those wait for `take`).
    pub fn take_if_few(&mut self) -> Option<Vec<(String, StatementCounts)>> {
        if self.0.as_ref()?.counts.len() > MERGE_INLINE {
            return None;
        }
        let counts = self.0.take()?.counts;
        (!counts.is_empty()).then(|| by_fingerprint(counts))
    }

    /// The counts merged by fingerprint. A session that ran many distinct
    /// texts (literals in simple queries) costs milliseconds here, so that
    /// case runs on the blocking pool, not on the thread other sessions
    /// share.
    pub async fn take(&mut self) -> Vec<(String, StatementCounts)> {
        let Some(counted) = self.0.take() else {
            return Vec::new();
        };
        let texts = counted.counts;
        if texts.len() <= MERGE_INLINE {
            return by_fingerprint(texts);
        }
        tokio::task::spawn_blocking(move || by_fingerprint(texts))
            .await
            .unwrap_or_default()
    }
}

fn take_one_resting() -> Option<Box<Counted>> {
    RESTING.try_with(|r| r.borrow_mut().pop()).ok().flatten()
}

/// The counts this thread's sessions set down, merged by fingerprint, for
/// the shared statistics; the thread keeps none.
pub fn take_resting() -> Vec<(String, StatementCounts)> {
    let resting = RESTING
        .try_with(|r| std::mem::take(&mut *r.borrow_mut()))
        .unwrap_or_default();
    resting
        .into_iter()
        .flat_map(|c| by_fingerprint(c.counts))
        .collect()
}

#[derive(Default)]
struct Counted {
    /// Index in `counts` of the statement the latest round trips are
    /// attributed to (found once per statement, not once per message).
    current: Option<usize>,
    /// Keys are client text: a fast hash is enough, since a client can only
    /// slow its own session, and at most `MAX_TEXTS` entries.
    index: FxHashMap<Sql, usize>,
    /// Each text, whether it is a fingerprint already, and its counts.
    counts: Vec<(Sql, bool, StatementCounts)>,
    /// The texts' bytes, summed.
    bytes: usize,
    /// Where the last simple Query counted, its text and its fingerprint:
    /// applications repeat their texts, and texts that differ only in
    /// literals share a fingerprint. The buffers are reused, so a stream
    /// of such queries allocates nothing here.
    last_at: Option<usize>,
    last_query: String,
    /// Where `last_query`'s literals are, once found (`same_shape_as_last`):
    /// a session that sends one statement never needs them.
    last_literals: Literals,
    literals_found: bool,
    /// `last_query`'s words (`Words::scan`, or more).
    last_words: Words,
    last_print: String,
    /// The fingerprint being made.
    print: String,
}

impl Counted {
    fn start(&mut self, sql: Option<Sql>) {
        let i = self.find(sql, false);
        self.count_from(i);
    }

    fn start_query(&mut self, sql: Option<&Sql>) {
        let i = sql.and_then(|s| self.find_query(s.as_str(), s.words()));
        self.count_from(i);
    }

    /// The words of a simple Query's `text` when it is the last one counted
    /// but for its literals: the last one's (the bytes between literals are
    /// the same, and no word crosses a literal's quote or is in a number),
    /// and those of its string literals. `None` otherwise: the caller
    /// scans. The text becomes the last one, so counting it compares
    /// nothing again.
    fn query_words(&mut self, text: &str) -> Option<Words> {
        self.last_at?;
        if self.last_query == text {
            return Some(self.last_words);
        }
        if !self.same_shape_as_last(text) {
            return None;
        }
        let mut words = self.last_words;
        for lit in self.last_literals.strings(text) {
            words = words | Words::scan(lit);
        }
        self.last_query.clear();
        self.last_query.push_str(text);
        self.last_words = words;
        Some(words)
    }

    /// Later round trips count for the statement at `i`, which runs once more.
    fn count_from(&mut self, i: Option<usize>) {
        self.current = i;
        if let Some(c) = self.current() {
            c.statements += 1;
        }
    }

    fn find_query(&mut self, text: &str, words: Words) -> Option<usize> {
        // The same statement again, with other literals most often: its
        // fingerprint is the last one, told by comparing the bytes between
        // their literals.
        if self.last_at.is_some() {
            if self.last_query == text {
                return self.last_at;
            }
            if self.same_shape_as_last(text) {
                self.last_query.clear();
                self.last_query.push_str(text);
                self.last_words = words;
                return self.last_at;
            }
        }
        print_into(text, &mut self.print);
        if self.last_at.is_none() || self.print != self.last_print {
            let i = self.find(Some(Sql::owned(self.print.clone())), true)?;
            self.last_at = Some(i);
            std::mem::swap(&mut self.print, &mut self.last_print);
        }
        self.last_query.clear();
        self.last_query.push_str(text);
        self.literals_found = false;
        self.last_words = words;
        self.last_at
    }

    /// `text` is the last query but for its literals (found at the first
    /// need).
    fn same_shape_as_last(&mut self, text: &str) -> bool {
        if !self.literals_found {
            self.last_literals.find(&self.last_query);
            self.literals_found = true;
        }
        self.last_literals.same_shape(&self.last_query, text)
    }

    fn current(&mut self) -> Option<&mut StatementCounts> {
        let i = self.current?;
        self.counts.get_mut(i).map(|(_, _, c)| c)
    }

    fn find(&mut self, sql: Option<Sql>, printed: bool) -> Option<usize> {
        let sql = sql?;
        // Most often the statement is the one before it again.
        if let Some(i) = self.current
            && self.counts.get(i).is_some_and(|(s, _, _)| *s == sql)
        {
            return Some(i);
        }
        if let Some(&i) = self.index.get(&sql) {
            return Some(i);
        }
        if self.counts.len() >= MAX_TEXTS || self.bytes + sql.as_str().len() > MAX_TEXT_BYTES {
            return None;
        }
        self.bytes += sql.as_str().len();
        let i = self.counts.len();
        // A fingerprint is its own copy already.
        let sql = if printed { sql } else { sql.detached() };
        self.index.insert(sql.clone(), i);
        self.counts.push((sql, printed, StatementCounts::default()));
        Some(i)
    }
}

/// Longest text whose fingerprint the thread keeps for its next session.
const MAX_KEPT_TEXT: usize = 1024;

thread_local! {
    /// The last text this thread fingerprinted, where its literals are, and
    /// its fingerprint: a session's first statement is most often the one
    /// the thread's sessions before it began with (a client that connects
    /// per request).
    static LAST_PRINTED: RefCell<(String, Literals, String)> = RefCell::default();
}

/// `text`'s fingerprint into `out`, taken from the thread's last one when
/// `text` is that one's text but for its literals.
fn print_into(text: &str, out: &mut String) {
    let kept = LAST_PRINTED.try_with(|last| {
        let Ok(mut last) = last.try_borrow_mut() else {
            return false;
        };
        let (was, literals, print) = &mut *last;
        if was != text && !literals.same_shape(was, text) {
            return false;
        }
        was.clear();
        was.push_str(text);
        out.clear();
        out.push_str(print);
        true
    });
    if kept == Ok(true) {
        return;
    }
    fingerprint_into(text, out);
    if text.len() <= MAX_KEPT_TEXT {
        let _ = LAST_PRINTED.try_with(|last| {
            if let Ok(mut last) = last.try_borrow_mut() {
                let (was, literals, print) = &mut *last;
                was.clear();
                was.push_str(text);
                literals.find(text);
                print.clear();
                print.push_str(out);
            }
        });
    }
}

/// Each text's counts under its fingerprint; texts that share one are
/// merged where the counts are added (`Stats::add_statements`).
fn by_fingerprint(texts: Vec<(Sql, bool, StatementCounts)>) -> Vec<(String, StatementCounts)> {
    let print = |sql: &Sql, printed| match printed {
        true => sql.as_str().to_string(),
        false => fingerprint(sql.as_str()),
    };
    texts
        .into_iter()
        .map(|(sql, printed, c)| (print(&sql, printed), c))
        .collect()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// The counts summed by fingerprint, as the shared statistics sum them.
    fn merged(counts: Vec<(String, StatementCounts)>) -> std::collections::HashMap<String, u64> {
        let mut out = std::collections::HashMap::new();
        for (print, c) in counts {
            *out.entry(print).or_default() += c.statements;
        }
        out
    }

    fn sql(text: String) -> Option<Sql> {
        let msg = Bytes::from(text);
        let text = std::str::from_utf8(&msg).unwrap();
        Some(Sql::within(&msg, text, None))
    }

    /// The thread's kept fingerprint serves only texts that differ from its
    /// text in literals.
    #[test]
    fn the_threads_last_fingerprint_serves_the_same_statement() {
        let long = format!("select {} from t", "a, ".repeat(600));
        let texts = [
            "select * from t where id = 1",
            "select * from t where id = 22",
            "select * from u where id = 22",
            "select * from u where id = 'x'",
            long.as_str(),
            "select * from u where id = 3 -- c",
            "select * from u where id = 3",
            "SELECT * FROM u WHERE id = 3",
        ];
        let mut out = String::new();
        for _ in 0..2 {
            for text in texts {
                print_into(text, &mut out);
                assert_eq!(out, fingerprint(text), "{text:?}");
            }
        }
    }

    /// A quiet session hands its counts over merged and holds none; one
    /// with too many texts to merge on the worker's thread keeps them.
    #[test]
    fn few_counts_are_taken_from_a_quiet_session() {
        let mut s = Statements::default();
        assert!(s.take_if_few().is_none());
        s.start(sql("select 1".into()));
        s.start_query(sql("select 2".into()).as_ref());
        let taken = s.take_if_few().expect("counts");
        assert_eq!(taken.iter().map(|(_, c)| c.statements).sum::<u64>(), 2);
        assert!(s.0.is_none(), "an idle client holds none");
        assert!(s.take_if_few().is_none());
        for i in 0..=MERGE_INLINE {
            s.start(sql(format!("select {i} as c{i}")));
        }
        assert!(s.take_if_few().is_none());
        assert_eq!(s.counted().counts.len(), MERGE_INLINE + 1);
    }

    /// Counts set down between transactions go on with the thread's next
    /// session and are handed over once, merged; counts of many texts
    /// stay with their session.
    #[test]
    fn resting_counts_go_on_with_the_next_session_and_are_taken_once() {
        let _ = take_resting();
        let (mut a, mut b) = (Statements::default(), Statements::default());
        a.start(sql("select 1".into()));
        a.rest();
        assert!(a.0.is_none(), "a session between transactions holds none");
        b.start(sql("select 1".into()));
        b.start(sql("select 2 as other".into()));
        b.rest();
        a.rest();
        let taken = merged(take_resting());
        assert_eq!(taken.get("select ?"), Some(&2));
        assert_eq!(taken.get("select ? as other"), Some(&1));
        assert!(take_resting().is_empty(), "taken once");
        for i in 0..=MERGE_INLINE {
            a.start(sql(format!("select {i} as c{i}")));
        }
        a.rest();
        assert!(a.0.is_some(), "too many to merge here: kept");
        assert!(take_resting().is_empty());
    }

    /// Long distinct texts stop being counted one by one once the session
    /// holds a megabyte of them; short ones still are, up to the count.
    #[test]
    fn texts_kept_are_bounded_in_bytes_and_count() {
        let mut s = Statements::default();
        for i in 0..100 {
            s.start(sql(format!("select '{}', {i}", "x".repeat(100_000))));
        }
        assert!(s.counted().bytes <= MAX_TEXT_BYTES);
        assert!(
            s.counted().counts.len() < 11,
            "{}",
            s.counted().counts.len()
        );
        let mut s = Statements::default();
        for i in 0..2000 {
            s.start(sql(format!("select {i}")));
        }
        assert_eq!(s.counted().counts.len(), MAX_TEXTS);
    }

    /// Simple Queries that differ only in their literals count as one
    /// statement, keep one entry, and merge with the same statement sent
    /// with Parse.
    #[tokio::test]
    async fn simple_queries_count_under_their_fingerprint() {
        let mut s = Statements::default();
        for i in 0..50 {
            let q = sql(format!("SELECT v FROM t WHERE id = {i}"));
            s.start_query(q.as_ref());
            s.start_query(q.as_ref());
        }
        s.start(sql("select v from t where id = 7".to_string()));
        assert_eq!(
            s.counted().counts.len(),
            2,
            "one entry per fingerprint, one per text"
        );
        let merged = merged(s.take().await);
        assert_eq!(merged["select v from t where id = ?"], 101);
    }

    /// Two statements taking turns each keep their own count: the last
    /// fingerprint stands only for its own statement.
    #[tokio::test]
    async fn alternating_simple_queries_count_apart() {
        let mut s = Statements::default();
        for i in 0..30 {
            s.start_query(sql(format!("select a from t where id = {i}")).as_ref());
            s.start_query(sql(format!("select b from t where id = {i}")).as_ref());
            s.start_query(sql(format!("select b from t where id = {i}")).as_ref());
        }
        assert_eq!(s.counted().counts.len(), 2);
        let merged = merged(s.take().await);
        assert_eq!(merged["select a from t where id = ?"], 30);
        assert_eq!(merged["select b from t where id = ?"], 60);
    }

    /// A repeated Query's words, taken from the last one's, hold every word
    /// a scan of it finds (they may hold more: words the last one's
    /// literals had).
    #[test]
    fn a_repeated_querys_words_hold_its_scans() {
        let texts = [
            "select abalance from t where aid = 12345",
            "select abalance from t where aid = 7",
            "select abalance from t where aid = 'cypher graph'",
            "select abalance from t where aid = 'plain'",
            "select abalance from t where aid = 'it''s prepare'",
            "select abalance from t where aid = 8 -- reset",
            "select abalance from t where aid = E'load'",
            "select abalance from t where aid = 9",
            "select abalance from t where aid = $$age$$",
            "SELECT set_config('search_path', 'x', false)",
            "SELECT set_config('a', 'label', false)",
        ];
        let mut s = Statements::default();
        let mut reused = 0;
        for text in texts {
            let words = s.query_words(text);
            reused += usize::from(words.is_some());
            let scanned = Words::scan(text);
            if let Some(w) = words {
                assert!(w.all(scanned), "{text:?}: {w:?} lacks some of {scanned:?}");
            }
            let msg = Bytes::copy_from_slice(text.as_bytes());
            let sql = Sql::within(&msg, std::str::from_utf8(&msg).unwrap(), words);
            s.start_query(Some(&sql));
        }
        assert!(reused >= 5, "reused {reused}");
    }

    /// A literal: a number, or a string that may hold words.
    fn literal() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::prop_oneof![
            "[0-9]{1,6}",
            "'(cypher|graph|label|age|load|reset|search_path|x| |'')*'",
        ]
    }

    proptest::proptest! {
        /// One statement with two sets of literals, and any text after it:
        /// words reused never miss one.
        #[test]
        fn reused_words_never_miss_one(
            parts in proptest::collection::vec(
                ("[a-z_ (),=]{0,8}", literal(), literal()), 0..5),
            tail in "[a-z_ (),=]{0,8}",
            other in "[a-z_ ()',=0-9]{0,40}",
        ) {
            let a: String = parts.iter().map(|(t, x, _)| format!("{t} {x}")).collect::<String>() + &tail;
            let b: String = parts.iter().map(|(t, _, y)| format!("{t} {y}")).collect::<String>() + &tail;
            let mut s = Statements::default();
            s.start_query(sql(a).as_ref());
            for text in [&b, &other] {
                if let Some(w) = s.query_words(text) {
                    proptest::prop_assert!(w.all(Words::scan(text)), "{text:?}");
                }
            }
        }
    }
}
