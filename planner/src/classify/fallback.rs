//! What to do when sqlparser can't parse a statement. First, a few PostgreSQL forms it lacks
//! are rewritten into equivalent ones it knows (`TABLE t`, `FOR NO KEY UPDATE`, the alias-less
//! column definition list of `cypher(...) AS (n agtype)`), and parsed again. Failing that,
//! statements whose leading keywords settle the class (`PREPARE TRANSACTION`, `DO`, ...) get
//! it; anything else is Unknown.

use super::Known;
use super::isolation::{IsolationChange, parse_isolation_name};
use super::{StatementClass, Verdict, parse_one, statement};
use crate::lexer::{self, Kind, Token};

use StatementClass::{SessionSetting, TransactionControl, Unknown, Unsafe, Write};

/// An alias sqlparser needs where PostgreSQL allows none; never shown to anyone.
const SYNTHETIC_ALIAS: &str = "onetrip_coldef_alias";

pub(crate) fn classify(text: &str, err: String, extra: &Known) -> Verdict {
    let toks: Vec<Token> = lexer::tokens(text).collect();
    if let Some(rewritten) = rewrite(text, &toks)
        && let Ok(stmt) = parse_one(&rewritten)
    {
        let mut v = statement::classify(&stmt, &rewritten, extra);
        if v.reason == "SELECT" && toks.first().is_some_and(|t| t.is_word(text, "table")) {
            v.reason = "TABLE".into();
        }
        return v;
    }
    by_leading_keywords(text, &toks)
        .unwrap_or_else(|| Verdict::new(Unknown, format!("parse error: {err}")))
}

/// Rewrites the statement into a form sqlparser accepts, if any of the known gaps applies.
fn rewrite(text: &str, toks: &[Token]) -> Option<String> {
    // (start, end, replacement) edits in text order.
    let mut edits: Vec<(usize, usize, &str)> = Vec::new();
    let word = |i: usize, w: &str| toks.get(i).is_some_and(|t| t.is_word(text, w));
    let punct = |i: usize, p: &str| toks.get(i).is_some_and(|t| t.is_punct(text, p));
    if word(0, "table") {
        edits.push((toks[0].start, toks[0].end, "SELECT * FROM"));
    }
    for i in 0..toks.len() {
        // FOR NO KEY UPDATE / FOR KEY SHARE: same class as FOR UPDATE / FOR SHARE.
        if word(i, "for") && word(i + 1, "no") && word(i + 2, "key") && word(i + 3, "update") {
            edits.push((toks[i + 1].start, toks[i + 3].start, ""));
        } else if word(i, "for") && word(i + 1, "key") && word(i + 2, "share") {
            edits.push((toks[i + 1].start, toks[i + 2].start, ""));
        }
        // `f(...) AS (col type, ...)`: give the column definition list an alias. A CTE's
        // `name(cols) AS (SELECT ...)` is told apart by the query keyword after `(`.
        if punct(i, ")")
            && word(i + 1, "as")
            && punct(i + 2, "(")
            && toks.get(i + 3).is_some_and(|t| {
                matches!(t.kind, Kind::Word | Kind::QuotedIdent) && !starts_query(t.text(text))
            })
        {
            let at = toks[i + 1].end;
            edits.push((at, at, SYNTHETIC_ALIAS));
        }
    }
    if edits.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 32);
    let mut pos = 0;
    for (start, end, replacement) in edits {
        out.push_str(text.get(pos..start)?);
        out.push(' ');
        out.push_str(replacement);
        out.push(' ');
        pos = end;
    }
    out.push_str(text.get(pos..)?);
    Some(out)
}

fn starts_query(word: &str) -> bool {
    [
        "select", "values", "with", "table", "insert", "update", "delete", "merge",
    ]
    .iter()
    .any(|k| word.eq_ignore_ascii_case(k))
}

fn by_leading_keywords(text: &str, toks: &[Token]) -> Option<Verdict> {
    let w = |i: usize| {
        toks.get(i)
            .filter(|t| t.kind == Kind::Word)
            .map(|t| t.text(text).to_ascii_uppercase())
            .unwrap_or_default()
    };
    let (first, second) = (w(0), w(1));
    let tc =
        |reason: &'static str| Some(Verdict::new(TransactionControl, reason).with_isolation(None));
    match (first.as_str(), second.as_str()) {
        ("PREPARE", "TRANSACTION") => tc("PREPARE TRANSACTION"),
        ("COMMIT", "PREPARED") => tc("COMMIT PREPARED"),
        ("ROLLBACK", "PREPARED") => tc("ROLLBACK PREPARED"),
        ("BEGIN", _) | ("START", "TRANSACTION") => {
            let reason = if first == "BEGIN" {
                "BEGIN"
            } else {
                "START TRANSACTION"
            };
            Some(
                Verdict::new(TransactionControl, reason)
                    .with_isolation(isolation_from_tokens(text, toks)),
            )
        }
        ("COMMIT" | "END" | "ROLLBACK" | "ABORT" | "SAVEPOINT" | "RELEASE", _) => {
            Some(Verdict::new(TransactionControl, first.clone()))
        }
        ("DO", _) => Some(Verdict::new(Write, "DO block")),
        (
            "CLUSTER" | "REINDEX" | "CHECKPOINT" | "REFRESH" | "SECURITY" | "IMPORT" | "REASSIGN",
            _,
        ) => Some(Verdict::new(
            Write,
            format!("write statement ({})", statement::leading_keywords(text)),
        )),
        ("LOAD", _) => Some(Verdict::new(
            SessionSetting,
            "LOAD loads a library into the session",
        )),
        ("MOVE", _) => Some(Verdict::new(Unsafe, "MOVE repositions a cursor")),
        _ => None,
    }
}

/// `... ISOLATION LEVEL <level> ...` in an unparsed BEGIN / START TRANSACTION.
fn isolation_from_tokens(text: &str, toks: &[Token]) -> Option<IsolationChange> {
    let pos = toks.iter().position(|t| t.is_word(text, "isolation"))?;
    let level_words: Vec<&str> = toks
        .iter()
        .skip(pos + 2)
        .take(2)
        .take_while(|t| t.kind == Kind::Word)
        .map(|t| t.text(text))
        .collect();
    let two = level_words.join(" ");
    let one = level_words.first().copied().unwrap_or("");
    let level = parse_isolation_name(&two).or_else(|| parse_isolation_name(one));
    let has_level = toks.get(pos + 1).is_some_and(|t| t.is_word(text, "level"));
    Some(match level {
        Some(l) if has_level => IsolationChange::Transaction(l),
        _ => IsolationChange::Unknown,
    })
}
