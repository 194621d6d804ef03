//! Finding `cypher()` calls in SQL text and splicing compiled SQL in their
//! place. The planner's SQL lexer gives exact byte spans; every byte
//! outside a replaced call is kept.

use std::ops::ControlFlow;

use sqlparser::ast::{ObjectNamePart, visit_relations};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use super::DeclineReason as D;
use super::catalog::Catalog;
use super::compile::compile_cypher;
use super::effect::{CypherEffect, effect, labels_named};
use crate::lexer::{self, Kind};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// No `cypher()` call in FROM: forward as is.
    Unchanged,
    /// A call the compiler leaves to AGE: forward as is, count the reason.
    Declined(D),
    /// The statement with every call replaced.
    Rewritten(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewriteOptions {
    /// Statements longer than this (bytes) are not examined; 0 = no limit.
    pub max_sql_len: usize,
}

#[derive(Debug, Clone, PartialEq)]
enum T {
    Word(String),
    QIdent,
    /// A string constant's value; `plain` for `'...'` (whose backslashes
    /// depend on `standard_conforming_strings`).
    Str {
        value: String,
        plain: bool,
    },
    /// An `E'...'`/`U&'...'` constant: never taken as cypher text.
    OtherStr,
    Param,
    Punct(u8),
    Other,
}

#[derive(Debug, Clone)]
struct Tk {
    t: T,
    start: usize,
    end: usize,
}

/// The statement's tokens as this module reads them, from the planner's
/// SQL lexer; anything it can't follow exactly (an unterminated string,
/// comment or identifier, a `U&` form) declines.
fn lex(sql: &str, tokens: &[lexer::Token]) -> Result<Vec<Tk>, D> {
    let mut v = Vec::with_capacity(tokens.len());
    for tok in tokens {
        if tok.unterminated {
            return Err(D::SqlShape);
        }
        let text = tok.text(sql);
        let t = match tok.kind {
            Kind::Word => T::Word(text.to_ascii_lowercase()),
            Kind::QuotedIdent if text.starts_with('"') => T::QIdent,
            Kind::String if text.starts_with(['u', 'U']) => return Err(D::SqlShape),
            Kind::QuotedIdent => return Err(D::SqlShape),
            Kind::String => match tok.string_value(sql) {
                Some((value, plain)) => T::Str { value, plain },
                None => T::OtherStr,
            },
            Kind::Param => T::Param,
            Kind::Punct => match text.as_bytes() {
                [c @ (b'(' | b')' | b',' | b'.' | b';')] => T::Punct(*c),
                _ => T::Other,
            },
            Kind::Number | Kind::Op | Kind::Other => T::Other,
        };
        v.push(Tk {
            t,
            start: tok.start,
            end: tok.end,
        });
    }
    Ok(v)
}

/// One `cypher(...) AS alias(cols)` occurrence.
struct Call {
    start: usize,
    end: usize,
    graph: String,
    cypher: String,
    params: Option<String>,
    alias: String,
    columns: Vec<String>,
}

/// Rewrites every `cypher()` call in FROM; see [`Rewrite`].
pub fn rewrite_sql(sql: &str, catalog: &Catalog, opts: &RewriteOptions) -> Rewrite {
    if opts.max_sql_len > 0 && sql.len() > opts.max_sql_len {
        return Rewrite::Unchanged;
    }
    // Cheap exit for the vast majority of statements.
    if !mentions(sql, "cypher") {
        return Rewrite::Unchanged;
    }
    let tokens: Vec<lexer::Token> = lexer::tokens(sql).collect();
    examine(sql, &tokens).rewrite(sql, catalog)
}

/// Whether running `sql` may change the AGE catalog (graphs, labels): a
/// call of one of AGE's graph/label functions, or a `cypher()` call whose
/// text writes (CREATE and MERGE create labels on the fly) or can't be
/// judged. The proxy refreshes its cached [`Catalog`] after such statements.
pub fn invalidates_catalog(sql: &str) -> bool {
    if !mentions(sql, "cypher") && !AGE_DDL.iter().any(|f| mentions(sql, f)) {
        return false;
    }
    let tokens: Vec<lexer::Token> = lexer::tokens(sql).collect();
    examine(sql, &tokens).changes_catalog(None)
}

fn mentions(sql: &str, word: &str) -> bool {
    sql.as_bytes()
        .windows(word.len())
        .any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
}

/// AGE functions that change graphs or labels.
const AGE_DDL: &[&str] = &[
    "create_graph",
    "drop_graph",
    "alter_graph",
    "create_vlabel",
    "create_elabel",
    "drop_label",
    "load_labels_from_file",
    "load_edges_from_file",
];

/// What a statement's text says of its `cypher()` calls, found in one pass
/// over the planner's tokens.
pub(crate) struct Examined {
    /// The calls in FROM to compile, or why they may not be.
    calls: Result<Vec<Call>, D>,
    /// Running it may change the catalog, whatever the catalog holds.
    pub changes_catalog: bool,
    /// Each `cypher()` text, with what it may do.
    pub effects: Vec<(String, CypherEffect)>,
    /// The graph each of `effects` names, when a plain string.
    graphs: Vec<Option<String>>,
}

pub(crate) fn examine(sql: &str, tokens: &[lexer::Token]) -> Examined {
    let toks = match lex(sql, tokens) {
        Ok(t) => t,
        Err(r) => {
            return Examined {
                calls: Err(r),
                changes_catalog: true,
                effects: Vec::new(),
                graphs: Vec::new(),
            };
        }
    };
    let mut calls = Ok(Vec::new());
    let mut changes_catalog = false;
    let mut effects = Vec::new();
    let mut graphs = Vec::new();
    for (k, t) in toks.iter().enumerate() {
        let T::Word(w) = &t.t else { continue };
        if toks.get(k + 1).map(|t| &t.t) != Some(&T::Punct(b'(')) {
            continue;
        }
        if AGE_DDL.contains(&w.as_str()) {
            changes_catalog = true;
        }
        if w != "cypher" {
            continue;
        }
        match toks.get(k + 4).map(|t| &t.t) {
            Some(T::Str { value, .. }) => {
                let e = effect(value);
                changes_catalog |= matches!(e, CypherEffect::Unknown(_));
                effects.push((value.clone(), e));
                graphs.push(match toks.get(k + 2).map(|t| &t.t) {
                    Some(T::Str { value, plain: true }) => Some(value.clone()),
                    _ => None,
                });
            }
            _ => changes_catalog = true,
        }
        let Ok(found) = calls.as_mut() else { continue };
        let prev = k.checked_sub(1).map(|p| &toks[p].t);
        match prev {
            Some(T::Word(w)) if w == "from" || w == "join" || w == "lateral" => {}
            Some(T::Punct(b',')) => {}
            // `ag_catalog.cypher(...)`: the emitted SQL relies on ag_catalog
            // being on the search_path, which a qualified call doesn't show.
            Some(T::Punct(b'.')) => {
                calls = Err(D::SqlShape);
                continue;
            }
            _ => continue,
        }
        match parse_call(sql, &toks, k) {
            Ok(c) => found.push(c),
            Err(r) => calls = Err(r),
        }
    }
    // A plain string holding a backslash reads differently with
    // standard_conforming_strings off: don't guess.
    if toks
        .iter()
        .any(|t| matches!(&t.t, T::Str { value, plain: true } if value.contains('\\')))
    {
        calls = Err(D::SqlShape);
    }
    Examined {
        calls,
        changes_catalog,
        effects,
        graphs,
    }
}

impl Examined {
    /// Whether running the statement may change the catalog, judged
    /// against `catalog` when there is one: a write creates labels only
    /// when it names one its graph lacks (CREATE and MERGE make them on
    /// the fly; nothing in Cypher drops one), so a write that names only
    /// known labels of a known graph leaves the catalog as it is.
    pub(crate) fn changes_catalog(&self, catalog: Option<&Catalog>) -> bool {
        if self.changes_catalog {
            return true;
        }
        let writes = self
            .effects
            .iter()
            .zip(&self.graphs)
            .filter(|((_, e), _)| *e != CypherEffect::Read);
        for ((text, _), graph) in writes {
            let known = catalog
                .filter(|c| !c.assume_labels)
                .zip(graph.as_deref())
                .and_then(|(c, g)| c.graphs.get(g));
            let Some(graph) = known else {
                return true;
            };
            match labels_named(text) {
                Some(names) if names.iter().all(|n| graph.labels.contains_key(n)) => {}
                _ => return true,
            }
        }
        false
    }

    /// The statement with its calls compiled for `catalog`.
    pub(crate) fn rewrite(&self, sql: &str, catalog: &Catalog) -> Rewrite {
        let calls = match &self.calls {
            Ok(c) if c.is_empty() => return Rewrite::Unchanged,
            Ok(c) => c,
            Err(r) => return Rewrite::Declined(*r),
        };
        let starts: Vec<usize> = calls.iter().map(|c| c.start).collect();
        if !sqlparser_confirms(sql, &starts) {
            return Rewrite::Declined(D::SqlShape);
        }
        let mut out = String::with_capacity(sql.len() * 2);
        let mut last = 0;
        for c in calls {
            let Some(graph) = catalog.graph(&c.graph) else {
                return Rewrite::Declined(D::UnknownGraph);
            };
            let compiled = match compile_cypher(
                &c.cypher,
                &graph,
                catalog.assume_labels,
                c.params.as_deref(),
                c.columns.len(),
            ) {
                Ok(s) => s,
                Err(r) => return Rewrite::Declined(r),
            };
            out.push_str(&sql[last..c.start]);
            out.push('(');
            out.push_str(&compiled);
            out.push_str(") AS ");
            out.push_str(&c.alias);
            out.push('(');
            out.push_str(&c.columns.join(", "));
            out.push(')');
            last = c.end;
        }
        out.push_str(&sql[last..]);
        Rewrite::Rewritten(out)
    }
}

/// When sqlparser can parse the statement, it must see every call as a
/// relation named `cypher` at the same position. sqlparser 0.64 rejects
/// the most common form, a column definition list without an alias
/// (`AS (v agtype)`); then the scanner above decides alone.
fn sqlparser_confirms(sql: &str, starts: &[usize]) -> bool {
    let Ok(stmts) = Parser::parse_sql(&PostgreSqlDialect {}, sql) else {
        return true;
    };
    let mut found = Vec::new();
    let _ = visit_relations(&stmts, |name| {
        if let Some(ObjectNamePart::Identifier(id)) = name.0.last()
            && id.quote_style.is_none()
            && id.value.eq_ignore_ascii_case("cypher")
        {
            found.push((id.span.start.line, id.span.start.column));
        }
        ControlFlow::<()>::Continue(())
    });
    starts.iter().all(|&s| found.contains(&line_col(sql, s)))
}

/// 1-based line and column (in characters) of a byte offset, as sqlparser
/// reports token positions.
fn line_col(sql: &str, at: usize) -> (u64, u64) {
    let before = &sql[..at];
    let line = before.matches('\n').count() as u64 + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = sql[line_start..at].chars().count() as u64 + 1;
    (line, col)
}

fn parse_call(sql: &str, toks: &[Tk], k: usize) -> Result<Call, D> {
    let start = toks[k].start;
    let mut i = k + 2;
    let tok = |i: usize| toks.get(i).map(|t| &t.t);
    let text = |i: usize| &sql[toks[i].start..toks[i].end];
    let Some(T::Str {
        value: graph,
        plain: true,
    }) = tok(i)
    else {
        return Err(D::SqlShape);
    };
    i += 1;
    if tok(i) != Some(&T::Punct(b',')) {
        return Err(D::SqlShape);
    }
    i += 1;
    let Some(T::Str { value: cypher, .. }) = tok(i) else {
        return Err(D::SqlShape);
    };
    i += 1;
    let mut params = None;
    if tok(i) == Some(&T::Punct(b',')) {
        i += 1;
        if tok(i) != Some(&T::Param) {
            return Err(D::Params);
        }
        params = Some(text(i).to_string());
        i += 1;
    }
    if tok(i) != Some(&T::Punct(b')')) {
        return Err(D::SqlShape);
    }
    i += 1;
    if tok(i) == Some(&T::Word("as".into())) {
        i += 1;
    }
    let mut alias = "cypher".to_string();
    match tok(i) {
        Some(T::Word(w)) if !is_reserved(w) => {
            alias = text(i).to_string();
            i += 1;
        }
        Some(T::QIdent) => {
            alias = text(i).to_string();
            i += 1;
        }
        _ => {}
    }
    if tok(i) != Some(&T::Punct(b'(')) {
        return Err(D::SqlShape);
    }
    i += 1;
    let mut columns = Vec::new();
    loop {
        match tok(i) {
            Some(T::Word(w)) if !is_reserved(w) => columns.push(text(i).to_string()),
            Some(T::QIdent) => columns.push(text(i).to_string()),
            _ => return Err(D::SqlShape),
        }
        i += 1;
        // The type: `agtype` or `ag_catalog.agtype`.
        if tok(i) == Some(&T::Word("ag_catalog".into())) && tok(i + 1) == Some(&T::Punct(b'.')) {
            i += 2;
        }
        if tok(i) != Some(&T::Word("agtype".into())) {
            return Err(D::ColumnType);
        }
        i += 1;
        match tok(i) {
            Some(T::Punct(b',')) => i += 1,
            Some(T::Punct(b')')) => break,
            _ => return Err(D::ColumnType),
        }
    }
    let end = toks[i].end;
    Ok(Call {
        start,
        end,
        graph: graph.clone(),
        cypher: cypher.clone(),
        params,
        alias,
        columns,
    })
}

/// Words that cannot be a bare table alias here.
fn is_reserved(w: &str) -> bool {
    matches!(
        w,
        "where"
            | "group"
            | "order"
            | "limit"
            | "offset"
            | "join"
            | "inner"
            | "left"
            | "right"
            | "full"
            | "cross"
            | "natural"
            | "on"
            | "using"
            | "union"
            | "except"
            | "intersect"
            | "having"
            | "window"
            | "for"
            | "fetch"
            | "returning"
            | "as"
            | "select"
            | "from"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_surrounding_sql() {
        let sql = "SELECT country, count(*) FROM cypher('g', $$ MATCH (c:City) RETURN c.id $$) AS t(country agtype) WHERE country::text LIKE 'N%' GROUP BY country";
        let Rewrite::Rewritten(out) = rewrite_sql(sql, &Catalog::assume_all(), &Default::default())
        else {
            panic!()
        };
        assert!(out.starts_with("SELECT country, count(*) FROM (SELECT "));
        assert!(out.ends_with(") AS t(country) WHERE country::text LIKE 'N%' GROUP BY country"));
    }

    #[test]
    fn catalog_invalidation() {
        assert!(!invalidates_catalog("SELECT 1"));
        assert!(invalidates_catalog("SELECT create_vlabel('g', 'L')"));
        assert!(invalidates_catalog(
            "SELECT ag_catalog.drop_graph('g', true)"
        ));
        assert!(invalidates_catalog(
            "SELECT * FROM cypher('g', $$ CREATE (:New {a: 1}) $$) AS (a agtype)"
        ));
        assert!(invalidates_catalog(
            "SELECT * FROM cypher('g', $$ MATCH (a) MERGE (a)-[:R]->(:B) $$) AS (a agtype)"
        ));
        assert!(!invalidates_catalog(
            "SELECT * FROM cypher('g', $$ MATCH (a:Person) RETURN a $$) AS (a agtype)"
        ));
        assert!(!invalidates_catalog("SELECT 'create_graph(' AS x"));
    }

    #[test]
    fn sqlparser_agrees_on_positions() {
        let sql = "SELECT *\nFROM  cypher('g', $$ MATCH (a) RETURN a $$) AS é(a agtype),\n  cypher('g', $$ RETURN 1 $$) AS t(b agtype)";
        let starts: Vec<usize> = sql.match_indices("cypher(").map(|(i, _)| i).collect();
        assert!(sqlparser_confirms(sql, &starts));
        assert!(!sqlparser_confirms(sql, &[0]));
    }

    #[test]
    fn unchanged_and_shapes() {
        let c = Catalog::assume_all();
        let o = RewriteOptions::default();
        assert_eq!(rewrite_sql("SELECT 1", &c, &o), Rewrite::Unchanged);
        assert_eq!(rewrite_sql("SELECT 'cypher('", &c, &o), Rewrite::Unchanged);
        assert_eq!(
            rewrite_sql(
                "SELECT * FROM cypher('g', $$ MATCH (a) RETURN a $$) AS (a text)",
                &c,
                &o
            ),
            Rewrite::Declined(D::ColumnType)
        );
        assert!(matches!(
            rewrite_sql(
                "SELECT * FROM cypher('g', $q$ MATCH (a) RETURN a $q$) AS (a agtype)",
                &c,
                &o
            ),
            Rewrite::Rewritten(_)
        ));
        assert!(matches!(
            rewrite_sql(
                "SELECT * FROM cypher('g', ' MATCH (a) RETURN ''x'' ') AS (a agtype)",
                &c,
                &o
            ),
            Rewrite::Rewritten(_)
        ));
    }
}
