//! The coalescer's view of the planner's statement classes.

use onetrip_planner::classify::{ClassCache, Classification, StatementClass};

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

pub struct Judgement {
    pub verdict: Verdict,
    pub isolation: Vec<onetrip_planner::classify::IsolationChange>,
    /// Statements in the text.
    pub statements: usize,
}

pub struct VerdictCache {
    cache: ClassCache,
}

impl VerdictCache {
    pub fn new(read_only_functions: &[String]) -> Self {
        Self {
            cache: ClassCache::new(CACHE_ENTRIES, read_only_functions.to_vec()),
        }
    }

    pub fn judge(&mut self, sql: &str) -> Judgement {
        let c: Classification = self.cache.classify(sql);
        let verdict = match c.class {
            StatementClass::Read => Verdict::Read,
            StatementClass::MaybeWrite => Verdict::MaybeWrite,
            StatementClass::TransactionControl => Verdict::TransactionControl,
            StatementClass::Unknown => Verdict::Unknown,
            other => Verdict::Never(other),
        };
        Judgement {
            verdict,
            isolation: c.isolation,
            statements: c.statement_count,
        }
    }
}
