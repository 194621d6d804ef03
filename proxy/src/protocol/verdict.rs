//! The session's analyses of statement texts, and the coalescer's view of
//! their classes.

use std::sync::Arc;

use onetrip_planner::{
    analysis::{Analysis, AnalysisCache, Analyzer},
    classify::{Classification, StatementClass},
    cypher::Catalog,
};

use super::text::Sql;

/// Distinct statement texts whose class a session remembers.
const CACHE_ENTRIES: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Read,
    MaybeWrite,
    TransactionControl,
    /// Writes, session settings, unsafe functions: never coalesced.
    Never(StatementClass),
    Unknown,
}

impl Verdict {
    /// Of two statements run together, the one that allows less.
    pub fn worse(a: Verdict, b: Verdict) -> Verdict {
        let rank = |v: Verdict| match v {
            Verdict::Read => 0,
            Verdict::MaybeWrite => 1,
            Verdict::Never(_) => 2,
            Verdict::TransactionControl => 3,
            Verdict::Unknown => 4,
        };
        if rank(b) > rank(a) { b } else { a }
    }

    /// The reason counted when a batch is not coalesced because of its class.
    pub fn fallback_reason(self) -> &'static str {
        match self {
            Verdict::Read => "coalesce: read (other condition)",
            Verdict::MaybeWrite => "coalesce: maybe-write, probe disabled or failed before",
            Verdict::TransactionControl => "coalesce: transaction control",
            Verdict::Never(StatementClass::Write) => "coalesce: write",
            Verdict::Never(StatementClass::SessionSetting) => "coalesce: session setting",
            Verdict::Never(_) => "coalesce: unsafe function or statement",
            Verdict::Unknown => "coalesce: statement not understood",
        }
    }
}

/// What the coalescer reads of a statement's analysis.
pub struct Judgement {
    pub verdict: Verdict,
    pub isolation: Vec<onetrip_planner::classify::IsolationChange>,
    /// Statements in the text.
    pub statements: usize,
    /// A statement of the text is a COPY.
    pub copy: bool,
}

impl Judgement {
    fn of(a: &Analysis) -> Judgement {
        let c: &Classification = &a.class;
        let verdict = match c.class {
            StatementClass::Read => Verdict::Read,
            StatementClass::MaybeWrite => Verdict::MaybeWrite,
            StatementClass::TransactionControl => Verdict::TransactionControl,
            StatementClass::Unknown => Verdict::Unknown,
            other => Verdict::Never(other),
        };
        Judgement {
            verdict,
            isolation: c.isolation.clone(),
            statements: c.statement_count,
            copy: c.copy,
        }
    }
}

/// The session's analyses: one planner call per statement text (per
/// catalog version), kept for the statements it runs again.
pub struct Analyses {
    cache: AnalysisCache,
}

impl Analyses {
    pub fn new(analyzer: Arc<Analyzer>) -> Self {
        Self {
            cache: AnalysisCache::new(CACHE_ENTRIES, analyzer),
        }
    }

    /// The analysis of `sql`: the one it carries, or the cache's.
    pub fn of(&mut self, sql: &Sql) -> Arc<Analysis> {
        match sql.analysis() {
            Some(a) => a.clone(),
            None => self.cache.get(sql.as_str(), None),
        }
    }

    /// The analysis of `text` for `catalog` (with its version), when the
    /// statement's `cypher()` calls are to be compiled.
    pub fn for_catalog(&mut self, text: &str, catalog: Option<(u64, &Catalog)>) -> Arc<Analysis> {
        self.cache.get(text, catalog)
    }

    /// The analysis of `text` made for catalog `version`, if kept.
    pub fn cached(&mut self, text: &str, version: u64) -> Option<Arc<Analysis>> {
        self.cache.peek(text, Some(version))
    }

    /// Keeps an analysis made elsewhere (another session's, for the same
    /// catalog version).
    pub fn keep(&mut self, text: &str, analysis: Arc<Analysis>, version: u64) {
        self.cache.put(text, analysis, Some(version));
    }

    pub fn judge(&mut self, sql: &Sql) -> Judgement {
        Judgement::of(&self.of(sql))
    }

    pub fn judge_text(&mut self, text: &str) -> Judgement {
        Judgement::of(&self.cache.get(text, None))
    }
}
