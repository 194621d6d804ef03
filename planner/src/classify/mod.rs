//! Statement classification for coalescing (ARCHITECTURE.md, "Coalescing a single-read batch").
//!
//! An early Sync ends an implicit transaction sooner than the client asked; that is invisible
//! only for statements that change nothing. [`classify`] decides which statements those are,
//! and which isolation level a statement sets. It never fails: SQL it can't parse is
//! [`StatementClass::Unknown`].
//!
//! What the text alone can't show, and is therefore trusted (the database's own schema decides
//! it, and reading the schema would cost a round trip per statement):
//! - views, rules, row-level security policies, triggers, and user-defined operators and casts
//!   that call functions with side effects;
//! - a function name means the built-in function of that name: a user's overload with other
//!   argument types (`public.lower(int)`, which PostgreSQL picks over `pg_catalog.lower(text)`
//!   for an `int` argument whatever the `search_path`), or a `search_path` that puts a schema
//!   before `pg_catalog`, can make `lower(x)` call a function that writes;
//! - attribute notation is a column: `t.f` reads column `f` of `t`, but where `t` has no such
//!   column and a function `f(t)` exists, PostgreSQL calls it.
//!
//! `[coalesce] read_only_functions` only adds functions to trust; a database with functions
//! that write under built-in names, or called through attribute notation, should not use
//! coalescing for the statements that reach them.
//!
//! ```
//! use onetrip_planner::classify::{Classifier, StatementClass};
//!
//! let classifier = Classifier::new(["my_fn"]);
//! let c = classifier.classify("SELECT my_fn(x) FROM t WHERE id = $1");
//! assert_eq!(c.class, StatementClass::Read);
//! assert_eq!(classifier.classify("SELECT nextval('s')").class, StatementClass::Unsafe);
//! ```

#[cfg(test)]
mod counting;
mod database;
mod fallback;
mod functions;
mod isolation;
mod listen;
use crate::lexer;
mod neutral;
mod pins;
mod prepared;
mod query;
mod reset;
mod role;
mod set;
mod statement;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::sync::Arc;

use sqlparser::dialect::PostgreSqlDialect;

use crate::cypher::effect::CypherEffect;
use sqlparser::parser::Parser;

pub use database::{DatabaseCommand, DatabaseTarget, database_command, database_targets};
pub use isolation::{IsolationChange, IsolationLevel, parse_isolation_name};
pub use listen::{ListenOp, listen_op};
pub use pins::{LastPins, Pins, pin_past_reset, reset_undoes, session_pin};
pub use prepared::{
    NameUse, PreparedOp, loaded_libraries, lone_prepared_op, name_uses, prepared_ops,
    statement_count,
};
pub use reset::{RESET_REASONS, Reset};
pub use role::{RoleName, password_changes};
pub use set::{SessionSet, session_set};

/// What a statement may do, from safest to least safe (the derived order is that ranking; a
/// multi-statement string gets the greatest class of its statements).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StatementClass {
    /// SELECT / VALUES / TABLE / SHOW / EXPLAIN without ANALYZE, no row locks, no SELECT INTO,
    /// only side-effect-free functions. Safe to coalesce.
    Read,
    /// A read except for data-modifying CTEs: coalesce only behind a write probe.
    MaybeWrite,
    /// SET, RESET, DISCARD, LISTEN, PREPARE, DEALLOCATE, ...: changes session state.
    SessionSetting,
    /// INSERT, UPDATE, DELETE, DDL, COPY, SELECT INTO, SELECT ... FOR UPDATE, ...
    Write,
    /// A side effect that is not a plain write: sequence functions, `set_config`, advisory
    /// locks, `pg_notify`, `dblink*`, `lo_*`, unknown functions, EXECUTE, FETCH ...
    Unsafe,
    /// BEGIN, COMMIT, ROLLBACK, SAVEPOINT, SET TRANSACTION, PREPARE TRANSACTION, ...
    TransactionControl,
    /// Not understood (parse error).
    Unknown,
}

impl StatementClass {
    pub fn as_str(self) -> &'static str {
        match self {
            StatementClass::Read => "read",
            StatementClass::MaybeWrite => "maybe-write",
            StatementClass::SessionSetting => "session setting",
            StatementClass::Write => "write",
            StatementClass::Unsafe => "unsafe",
            StatementClass::TransactionControl => "transaction control",
            StatementClass::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for StatementClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict on one SQL string (one or more statements). Cheap to clone: the reason is
/// shared and `isolation` is empty (no allocation) for almost every statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classification {
    /// The least safe class of the string's statements.
    pub class: StatementClass,
    /// Why, for logs and reports: e.g. "data-modifying CTE (UPDATE)".
    pub reason: Arc<str>,
    /// Isolation changes made by the statements, in order.
    pub isolation: Vec<IsolationChange>,
    /// Number of non-empty statements.
    pub statement_count: usize,
    /// It reads the transaction's own time or identity (`now()`,
    /// `current_timestamp`, the transaction's id or snapshot): run outside
    /// its transaction block, it would answer differently.
    pub transaction_time: bool,
    /// The text is one statement that begins or ends a transaction.
    pub transaction: Option<TransactionStatement>,
    /// A statement of the text is a COPY: its data goes in messages of
    /// their own, and a COPY FROM STDIN reads the client's Syncs as data.
    pub copy: bool,
}

/// A statement that begins or ends a transaction, as far as a session that
/// answers it itself needs to know (the AND CHAIN forms, savepoints and
/// two-phase commit are none of these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransactionStatement {
    /// BEGIN or START TRANSACTION, any modes; `tag` is its CommandComplete.
    Begin { tag: &'static str },
    /// COMMIT or END.
    Commit,
    /// ROLLBACK or ABORT.
    Rollback,
}

/// Classifies SQL with a fixed set of extra read-only functions. Shareable between sessions
/// (`Arc<Classifier>`); see `analysis::AnalysisCache` for the per-session cache.
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    extra: functions::ExtraFunctions,
}

impl Classifier {
    /// `read_only_functions`: `[coalesce] read_only_functions`. A bare name (`my_fn`) matches
    /// that function in any schema; a qualified one (`app.my_fn`) only when called qualified.
    /// Unquoted names are case-insensitive; write `"MyFn"` for a quoted one.
    pub fn new<I, S>(read_only_functions: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Classifier {
            extra: functions::ExtraFunctions::new(read_only_functions),
        }
    }

    /// Classifies `sql`, which may hold several `;`-separated statements.
    pub fn classify(&self, sql: &str) -> Classification {
        let pieces = lexer::split_statements(sql);
        self.classify_pieces(sql, &pieces, &[])
    }

    /// Classifies `sql` split into `pieces`, with the effects of its
    /// `cypher()` texts already found.
    pub(crate) fn classify_pieces(
        &self,
        sql: &str,
        pieces: &[lexer::Piece],
        effects: &[(String, CypherEffect)],
    ) -> Classification {
        let known = Known {
            functions: &self.extra,
            effects,
        };
        if pieces.is_empty() {
            // PostgreSQL answers EmptyQueryResponse and does nothing else.
            return Classification {
                class: StatementClass::Read,
                reason: Arc::from("empty query"),
                isolation: Vec::new(),
                statement_count: 0,
                transaction_time: false,
                transaction: None,
                copy: false,
            };
        }
        let count = pieces.len();
        let mut worst: Option<(Verdict, usize)> = None;
        let mut isolation = Vec::new();
        let mut transaction_time = false;
        for (i, piece) in pieces.iter().enumerate() {
            let v = classify_piece(sql, piece, &known);
            isolation.extend(v.isolation.iter().copied());
            transaction_time |= v.transaction_time;
            if worst.as_ref().is_none_or(|(w, _)| v.class > w.class) {
                worst = Some((v, i));
            }
        }
        let (v, i) =
            worst.unwrap_or_else(|| (Verdict::new(StatementClass::Unknown, "no statement"), 0));
        let reason = if count > 1 {
            format!("{} (statement {} of {count})", v.reason, i + 1)
        } else {
            v.reason.into_owned()
        };
        Classification {
            class: v.class,
            reason: Arc::from(reason),
            isolation,
            statement_count: count,
            transaction_time,
            transaction: if count == 1 { v.transaction } else { None },
            copy: pieces.iter().any(|p| is_copy(sql, p)),
        }
    }
}

/// The statement is a COPY, by its first word (whether sqlparser reads it
/// or not).
fn is_copy(sql: &str, piece: &lexer::Piece) -> bool {
    let text = sql.get(piece.start..piece.end).unwrap_or("");
    lexer::tokens(text)
        .next()
        .is_some_and(|t| t.is_word(text, "copy"))
}

/// `EXPLAIN ANALYSE ...` with `ANALYZE` in place of PostgreSQL's other
/// spelling, which sqlparser only takes inside parentheses; `None` when
/// the text is not such a statement.
fn explain_analyse(text: &str) -> Option<String> {
    let mut toks = lexer::tokens(text);
    if !toks.next()?.is_word(text, "explain") {
        return None;
    }
    let t = toks.next()?;
    if !t.is_word(text, "analyse") {
        return None;
    }
    let mut out = text.to_owned();
    out.replace_range(t.start..t.end, "ANALYZE");
    Some(out)
}

fn classify_piece(sql: &str, piece: &lexer::Piece, known: &Known) -> Verdict {
    let text = sql.get(piece.start..piece.end).unwrap_or("");
    if piece.operators > MAX_OPERATORS {
        // sqlparser builds `a + b + c ...` as a left-nested tree, and walking or even
        // dropping a very deep one overflows the stack.
        return Verdict::new(
            StatementClass::Unknown,
            format!("too complex to classify ({} operators)", piece.operators),
        );
    }
    let spelled = explain_analyse(text);
    let text_for_parser = spelled.as_deref().unwrap_or(text);
    let mut v = match parse_one(text_for_parser) {
        Ok(stmt) => statement::classify(&stmt, text, known),
        Err(err) => fallback::classify(text, err, known),
    };
    // Anything not understood precisely that mentions isolation may change it (ALTER
    // SYSTEM plus a reload, a DO block, an unparsed BEGIN ...).
    if v.isolation.is_empty()
        && v.class != StatementClass::Read
        && contains_ignore_ascii_case(text, "isolation")
        && !v.isolation_exact
    {
        v.isolation.push(IsolationChange::Unknown);
    }
    v
}

/// What classifying a statement may use besides its text: the functions
/// configured as read-only, and the effects of its `cypher()` texts when
/// they were already found.
pub(crate) struct Known<'a> {
    pub functions: &'a functions::ExtraFunctions,
    pub effects: &'a [(String, CypherEffect)],
}

impl Known<'_> {
    /// What a `cypher()` call's text may do.
    pub fn effect(&self, text: &str) -> CypherEffect {
        match self.effects.iter().find(|(t, _)| t == text) {
            Some((_, e)) => e.clone(),
            None => crate::cypher::effect::effect(text),
        }
    }
}

/// Statements with more binary operators than this are Unknown (see `classify_piece`).
const MAX_OPERATORS: usize = 4096;

/// Classifies `sql` with the built-in function table only.
pub fn classify(sql: &str) -> Classification {
    static DEFAULT: std::sync::LazyLock<Classifier> = std::sync::LazyLock::new(Classifier::default);
    DEFAULT.classify(sql)
}

/// Parses exactly one statement. sqlparser is not expected to panic, but the classifier must
/// never take the proxy down, so a panic is turned into a parse error.
pub(crate) fn parse_one(text: &str) -> Result<sqlparser::ast::Statement, String> {
    let parsed = std::panic::catch_unwind(|| Parser::parse_sql(&PostgreSqlDialect {}, text));
    match parsed {
        Ok(Ok(mut stmts)) if stmts.len() == 1 => Ok(stmts.remove(0)),
        Ok(Ok(stmts)) => Err(format!("expected one statement, found {}", stmts.len())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("parser panicked".to_string()),
    }
}

fn contains_ignore_ascii_case(hay: &str, needle: &str) -> bool {
    hay.as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// The classification of one statement while it is being built: the worst finding wins.
#[derive(Clone, Debug)]
pub(crate) struct Verdict {
    pub class: StatementClass,
    pub reason: Cow<'static, str>,
    pub isolation: Vec<IsolationChange>,
    /// The statement's isolation effect is fully known (possibly "none"), so the textual
    /// "mentions isolation" safety net does not apply.
    pub isolation_exact: bool,
    /// It reads the transaction's time or identity.
    pub transaction_time: bool,
    pub transaction: Option<TransactionStatement>,
}

impl Verdict {
    pub fn new(class: StatementClass, reason: impl Into<Cow<'static, str>>) -> Self {
        Verdict {
            class,
            reason: reason.into(),
            isolation: Vec::new(),
            isolation_exact: false,
            transaction_time: false,
            transaction: None,
        }
    }

    /// Records a finding; keeps the first reason among equally bad findings.
    pub fn raise(&mut self, class: StatementClass, reason: impl Into<Cow<'static, str>>) {
        if class > self.class {
            self.class = class;
            self.reason = reason.into();
        }
    }

    pub fn with_isolation(mut self, change: Option<IsolationChange>) -> Self {
        self.isolation.extend(change);
        self.isolation_exact = true;
        self
    }
}
