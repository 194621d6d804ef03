//! SQL's own prepared statements: `PREPARE`, `EXECUTE`, `DEALLOCATE` and
//! `DISCARD ALL`. They share one namespace with the protocol's Parse, so a
//! session that follows its prepared statements must follow these too.

use crate::lexer::{self, Kind, Token};

/// What one statement does to the session's prepared statements, or which
/// one it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreparedOp<'a> {
    /// `PREPARE name [(types)] AS statement`, with the statement's text.
    Prepare { name: String, text: &'a str },
    /// `EXECUTE name [(arguments)]`, with the arguments' text.
    Execute { name: String, args: &'a str },
    /// `DEALLOCATE [PREPARE] name`.
    Deallocate(String),
    /// `DEALLOCATE [PREPARE] ALL`, `DISCARD ALL`.
    DeallocateAll,
    /// One of the above whose name can't be read here: any statement may
    /// have changed.
    Unknown,
}

/// The prepared-statement operations among the statements of `sql`, in
/// order. Statements of other kinds are left out.
pub fn prepared_ops(sql: &str) -> Vec<PreparedOp<'_>> {
    lexer::split_statements(sql)
        .iter()
        .filter_map(|p| sql.get(p.start..p.end))
        .filter_map(op)
        .collect()
}

/// `sql` when it is exactly one PREPARE, EXECUTE or DEALLOCATE statement
/// (a `;` after it allowed): one a transaction pooler can run on whichever
/// server connection its client holds, once that holds the client's
/// statement under the name.
pub fn lone_prepared_op(sql: &str) -> Option<PreparedOp<'_>> {
    let pieces = lexer::split_statements(sql);
    let [p] = pieces.as_slice() else {
        return None;
    };
    op(sql.get(p.start..p.end)?).filter(|o| *o != PreparedOp::Unknown)
}

/// How many statements `sql` holds (empty ones between `;`s aside).
pub fn statement_count(sql: &str) -> usize {
    lexer::split_statements(sql).len()
}

/// A prepared statement's name as `sql` uses it: wherever PREPARE, EXECUTE
/// or DEALLOCATE stands before a name, in any statement (`EXPLAIN EXECUTE
/// p`, `CREATE TABLE t AS EXECUTE p`), in order. A word that only looks
/// like such a use (`EXECUTE FUNCTION f` in CREATE TRIGGER) is listed
/// too: a pooler that makes the name right on its connection before the
/// text runs loses nothing by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameUse {
    Prepare(String),
    Execute(String),
    Deallocate(String),
    /// `DEALLOCATE [PREPARE] ALL`.
    DeallocateAll,
}

/// The prepared-statement names `sql` uses (`NameUse`).
pub fn name_uses(sql: &str) -> Vec<NameUse> {
    let toks: Vec<Token> = lexer::tokens(sql).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        i += 1;
        let Some(next) = toks.get(i) else {
            break;
        };
        if t.is_word(sql, "prepare") && !next.is_word(sql, "transaction") {
            out.extend(name(sql, next).map(NameUse::Prepare));
        } else if t.is_word(sql, "execute") {
            out.extend(name(sql, next).map(NameUse::Execute));
        } else if t.is_word(sql, "deallocate") {
            let mut n = next;
            if n.is_word(sql, "prepare") {
                i += 1;
                let Some(after) = toks.get(i) else {
                    break;
                };
                n = after;
            }
            if n.is_word(sql, "all") {
                out.push(NameUse::DeallocateAll);
            } else {
                out.extend(name(sql, n).map(NameUse::Deallocate));
            }
        }
    }
    out
}

/// The libraries `LOAD` statements among those of `sql` name, in order.
pub fn loaded_libraries(sql: &str) -> Vec<String> {
    lexer::split_statements(sql)
        .iter()
        .filter_map(|p| sql.get(p.start..p.end))
        .filter_map(|text| {
            let mut toks = lexer::tokens(text);
            if !toks.next()?.is_word(text, "load") {
                return None;
            }
            let lib = toks.next()?;
            let raw = lib.text(text);
            // A plain '...' string only (not E'...' with its escapes).
            (lib.kind == Kind::String
                && raw.starts_with('\'')
                && raw.len() >= 2
                && !lib.unterminated)
                .then(|| raw[1..raw.len() - 1].replace("''", "'"))
        })
        .collect()
}

fn op(text: &str) -> Option<PreparedOp<'_>> {
    let mut toks = lexer::tokens(text).peekable();
    let first = toks.next()?;
    let word = |t: &Token, w: &str| t.is_word(text, w);
    if word(&first, "discard") {
        let all = toks.next().is_some_and(|t| word(&t, "all"));
        return all.then_some(PreparedOp::DeallocateAll);
    }
    let unknown = Some(PreparedOp::Unknown);
    if word(&first, "deallocate") {
        let mut t = toks.next()?;
        if word(&t, "prepare") {
            t = toks.next()?;
        }
        if word(&t, "all") {
            return Some(PreparedOp::DeallocateAll);
        }
        return name(text, &t).map_or(unknown, |n| Some(PreparedOp::Deallocate(n)));
    }
    let is_execute = word(&first, "execute");
    if !is_execute && !word(&first, "prepare") {
        return None;
    }
    let t = toks.next()?;
    if !is_execute && word(&t, "transaction") {
        // PREPARE TRANSACTION: two-phase commit, not a statement.
        return None;
    }
    let Some(name) = name(text, &t) else {
        return unknown;
    };
    if is_execute {
        let args = match toks.next() {
            Some(open) if open.is_punct(text, "(") => {
                let close = closing(text, &mut toks)?;
                text.get(open.end..close.start)?
            }
            _ => "",
        };
        return Some(PreparedOp::Execute { name, args });
    }
    // Optional parameter types, then AS and the statement.
    let mut next = toks.next()?;
    if next.is_punct(text, "(") {
        closing(text, &mut toks)?;
        next = toks.next()?;
    }
    if !word(&next, "as") {
        return unknown;
    }
    let body = toks.next()?;
    Some(PreparedOp::Prepare {
        name,
        text: text.get(body.start..)?.trim_end(),
    })
}

/// The token that closes the parenthesis just opened.
fn closing(text: &str, toks: &mut impl Iterator<Item = Token>) -> Option<Token> {
    let mut depth = 1usize;
    for t in toks {
        if t.is_punct(text, "(") {
            depth += 1;
        } else if t.is_punct(text, ")") {
            depth -= 1;
            if depth == 0 {
                return Some(t);
            }
        }
    }
    None
}

/// Longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes); longer ones
/// are cut, so two long names may be one.
const MAX_IDENT: usize = 63;

/// An identifier as PostgreSQL reads it: unquoted ones folded to lower
/// case, quoted ones as written (`""` is `"`), both cut at 63 bytes.
pub(crate) fn name(text: &str, t: &Token) -> Option<String> {
    let raw = t.text(text);
    let mut n = match t.kind {
        Kind::Word => raw.to_ascii_lowercase(),
        Kind::QuotedIdent if raw.starts_with('"') && raw.len() >= 2 && !t.unterminated => {
            raw[1..raw.len() - 1].replace("\"\"", "\"")
        }
        _ => return None,
    };
    if n.len() > MAX_IDENT {
        let mut end = MAX_IDENT;
        while !n.is_char_boundary(end) {
            end -= 1;
        }
        n.truncate(end);
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::{
        NameUse, PreparedOp::*, lone_prepared_op, name_uses, prepared_ops, statement_count,
    };

    #[test]
    fn reads_a_lone_statement() {
        assert_eq!(
            lone_prepared_op("  PREPARE p (int) AS SELECT $1;  "),
            Some(Prepare {
                name: "p".into(),
                text: "SELECT $1"
            })
        );
        assert_eq!(
            lone_prepared_op("execute P(1, 'a;b')"),
            Some(Execute {
                name: "p".into(),
                args: "1, 'a;b'"
            })
        );
        assert_eq!(
            lone_prepared_op("DEALLOCATE PREPARE \"Q\";"),
            Some(Deallocate("Q".into()))
        );
        assert_eq!(lone_prepared_op("deallocate all"), Some(DeallocateAll));
        assert_eq!(lone_prepared_op("PREPARE p AS SELECT 1; EXECUTE p"), None);
        assert_eq!(lone_prepared_op("select 1"), None);
        assert_eq!(lone_prepared_op("deallocate $1"), None);
        assert_eq!(lone_prepared_op("prepare transaction 'x'"), None);
        assert_eq!(statement_count("execute p; ; select ';'"), 2);
        assert_eq!(statement_count("  execute p  "), 1);
    }

    #[test]
    fn finds_every_use_of_a_name() {
        assert_eq!(
            name_uses(
                "explain execute A(1); prepare b as select 'execute c'; \
                 deallocate prepare d; DEALLOCATE ALL; prepare transaction 'x'; execute"
            ),
            [
                NameUse::Execute("a".into()),
                NameUse::Prepare("b".into()),
                NameUse::Deallocate("d".into()),
                NameUse::DeallocateAll,
            ]
        );
        assert_eq!(
            name_uses("create table t as execute p"),
            [NameUse::Execute("p".into())]
        );
    }

    #[test]
    fn reads_load() {
        assert_eq!(
            super::loaded_libraries("LOAD 'age'; select 'load ''x'''; load '$libdir/plugins/age'"),
            ["age", "$libdir/plugins/age"]
        );
        assert!(super::loaded_libraries("load e'age'").is_empty());
    }

    #[test]
    fn reads_each_form() {
        assert_eq!(
            prepared_ops("PREPARE Foo (int, text) AS select $1, $2"),
            [Prepare {
                name: "foo".into(),
                text: "select $1, $2"
            }]
        );
        assert_eq!(
            prepared_ops("prepare \"Foo\"\"x\" as insert into t values (1);"),
            [Prepare {
                name: "Foo\"x".into(),
                text: "insert into t values (1)"
            }]
        );
        assert_eq!(
            prepared_ops("execute foo(1, (2 + 3), nextval('s'))"),
            [Execute {
                name: "foo".into(),
                args: "1, (2 + 3), nextval('s')"
            }]
        );
        assert_eq!(
            prepared_ops("EXECUTE w"),
            [Execute {
                name: "w".into(),
                args: ""
            }]
        );
        assert_eq!(
            prepared_ops("deallocate prepare X; DEALLOCATE all; discard all; discard plans"),
            [Deallocate("x".into()), DeallocateAll, DeallocateAll]
        );
        assert_eq!(prepared_ops("prepare transaction 'x'"), []);
        assert_eq!(prepared_ops("select 1; deallocate $1"), [Unknown]);
        assert_eq!(prepared_ops("prepare a as"), []);
        let long = "a".repeat(70);
        assert_eq!(
            prepared_ops(&format!("deallocate {long}")),
            [Deallocate("a".repeat(63))]
        );
    }
}
