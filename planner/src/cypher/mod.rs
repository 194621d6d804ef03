//! Cypher lexer, parser and compiler to SQL over AGE label tables.
//!
//! [`rewrite_sql`] finds `cypher('graph', $$ ... $$ [, $n]) AS t(cols)`
//! calls in a SQL statement and replaces each with an equivalent plain SQL
//! subquery over the graph's label tables, leaving every other byte of the
//! statement as written. A call is only rewritten when the compiler is sure
//! the answer is AGE's own; otherwise the statement is left to AGE and the
//! [`DeclineReason`] says why.
//!
//! Compiled: MATCH (comma-separated patterns, labeled or unlabeled nodes
//! and edges, inline property maps, directed and undirected fixed-length
//! relationships, named paths) with WHERE, OPTIONAL MATCH, WITH (with
//! grouping, DISTINCT, WHERE, ORDER BY, SKIP, LIMIT), UNWIND, UNION [ALL],
//! and RETURN with DISTINCT, ORDER BY, SKIP, LIMIT, aggregates and implicit
//! grouping; expressions over properties, parameters, literals, lists,
//! maps, CASE, list comprehensions, slices, `exists()` and AGE's functions.
//!
//! AGE semantics kept (each checked against AGE 1.6 by the differential
//! test): a stored JSON null reads as SQL NULL; inline maps are containment
//! with nulls kept only at the top level; edges are unique within one path,
//! not across comma-separated paths; an undirected edge yields one row per
//! orientation and a self-loop once; AGE's own operators, `age_*`
//! functions and aggregates compute every value.

pub mod ast;
pub mod catalog;
pub mod compile;
mod display;
pub mod effect;
pub mod lexer;
pub mod literal;
pub mod parser;
pub mod sql;

pub use catalog::{Catalog, Graph, Label, LabelKind};
pub use compile::compile_cypher;
pub use literal::agtype_literal;
pub use parser::parse;
pub use sql::{Rewrite, RewriteOptions, invalidates_catalog, rewrite_sql};

use std::fmt;

/// A Cypher syntax error at a byte offset of the Cypher text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg} at offset {pos}")]
pub struct ParseError {
    pub pos: usize,
    pub msg: String,
}

impl ParseError {
    pub fn new(pos: usize, msg: &str) -> ParseError {
        ParseError {
            pos,
            msg: msg.to_string(),
        }
    }
}

/// Why a `cypher()` call is left to AGE. [`DeclineReason::name`] is a
/// stable short name for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeclineReason {
    /// The Cypher text does not parse (AGE reports its own error).
    Syntax,
    With,
    Call,
    Write,
    VariableLength,
    /// A clause order other than MATCH... RETURN.
    ClauseShape,
    MultipleLabels,
    MultipleRelTypes,
    UnknownGraph,
    UnknownLabel,
    UnknownFunction,
    UnboundVariable,
    /// Variable reused in a way AGE treats specially (edge twice, node as edge).
    VariableReuse,
    ReturnStar,
    ColumnMismatch,
    /// A column type other than agtype in `AS (...)`.
    ColumnType,
    OrderByAlias,
    OrderByShape,
    AggregateShape,
    EmptyInList,
    SkipLimitExpr,
    Case,
    ListComprehension,
    Exists,
    LabelPredicate,
    /// A property or map key that is a Cypher keyword (AGE's grammar differs).
    KeywordKey,
    /// `$name` without a parameter argument, or an unusual parameter argument.
    Params,
    /// A boolean where AGE would coerce in ways not reproduced here.
    BooleanOperand,
    UnsupportedExpr,
    /// The SQL around the call is not understood (quoting, shape, nesting).
    SqlShape,
    /// More relationships in one pattern than [`compile::MAX_HOPS`].
    TooLarge,
    /// No MATCH: the statement only computes expressions, which AGE does
    /// with the same functions, so compiling it saves nothing.
    NoGraphRead,
    /// `plan_cypher` only: the statement has no `cypher()` call in FROM.
    NoCypherCall,
    /// `collect()` over the groups of an earlier WITH: their order is the
    /// plan's, and AGE's can't be reproduced.
    CollectOrder,
    /// A variable-length walk run per row of a start that is not pinned
    /// to a vertex (a range in WHERE), or towards an end that is pinned
    /// too: AGE walks its cached graph in memory, where the SQL joins scan
    /// the edge table at every step unless its ends are indexed (measured
    /// 0.2-0.4x without indexes).
    WalkPerRow,
}

impl DeclineReason {
    pub fn name(self) -> &'static str {
        use DeclineReason::*;
        match self {
            Syntax => "syntax_error",
            With => "with",
            Call => "call",
            Write => "write",
            VariableLength => "variable_length",
            ClauseShape => "clause_shape",
            MultipleLabels => "multiple_labels",
            MultipleRelTypes => "multiple_rel_types",
            UnknownGraph => "unknown_graph",
            UnknownLabel => "unknown_label",
            UnknownFunction => "unknown_function",
            UnboundVariable => "unbound_variable",
            VariableReuse => "variable_reuse",
            ReturnStar => "return_star",
            ColumnMismatch => "column_mismatch",
            ColumnType => "column_type",
            OrderByAlias => "order_by_alias",
            OrderByShape => "order_by_shape",
            AggregateShape => "aggregate_shape",
            EmptyInList => "in_empty_list",
            SkipLimitExpr => "skip_limit_expr",
            Case => "case",
            ListComprehension => "list_comprehension",
            Exists => "exists",
            LabelPredicate => "label_predicate",
            KeywordKey => "keyword_key",
            Params => "params",
            BooleanOperand => "boolean_operand",
            UnsupportedExpr => "unsupported_expression",
            SqlShape => "sql_shape",
            TooLarge => "too_large",
            NoGraphRead => "no_graph_read",
            NoCypherCall => "no_cypher_call",
            CollectOrder => "collect_order",
            WalkPerRow => "walk_per_row",
        }
    }
}

impl fmt::Display for DeclineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `plan-cypher` CLI's function: the rewritten statement, or why the
/// statement would be left to AGE (also when it has no `cypher()` call).
pub fn plan_cypher(sql: &str, catalog: &Catalog) -> Result<String, DeclineReason> {
    match rewrite_sql(sql, catalog, &RewriteOptions::default()) {
        Rewrite::Rewritten(s) => Ok(s),
        Rewrite::Declined(r) => Err(r),
        Rewrite::Unchanged => Err(DeclineReason::NoCypherCall),
    }
}

/// Entry points for fuzzers; not part of the stable API.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Parses arbitrary bytes as Cypher, compiles what parses and runs the
    /// SQL rewriter on it; must never panic.
    pub fn fuzz_cypher_parse(data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        if let Ok(st) = parse(text) {
            // Printing is stable: the printed text parses back and prints
            // the same (it may exceed the depth limit, being parenthesized).
            let printed = st.to_string();
            if let Ok(again) = parse(&printed) {
                assert_eq!(printed, again.to_string(), "unstable print of {text:?}");
            }
            let cat = Catalog::assume_all();
            if let Some(g) = cat.graph("g") {
                let _ = compile_cypher(text, &g, true, Some("$1"), 3);
            }
        }
        let _ = rewrite_sql(text, &Catalog::assume_all(), &RewriteOptions::default());
        let wrapped = format!("SELECT * FROM cypher('g', $$ {text} $$) AS (a agtype)");
        let _ = rewrite_sql(&wrapped, &Catalog::assume_all(), &RewriteOptions::default());
    }
}
