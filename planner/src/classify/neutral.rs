//! Which calls leave nothing in the session. A call of a function not known
//! to be session-neutral calls for the full reset: a user's function can do
//! anything (create a temporary table, call `set_config(..., false)`).
//! Built-ins are judged by name, unqualified or in their own schema.

use std::sync::LazyLock;

use rustc_hash::FxHashSet;

use super::functions;
use super::reset::{self, Reset};
use crate::lexer::{Kind, Token};

/// One part of a dotted name, as written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Part<'a> {
    /// Without its quotes when quoted.
    pub text: &'a str,
    pub quoted: bool,
}

impl<'a> Part<'a> {
    pub fn of(sql: &'a str, t: &Token) -> Part<'a> {
        let raw = t.text(sql);
        let inner = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"'));
        match (t.kind, inner) {
            (Kind::QuotedIdent, Some(text)) if !t.unterminated => Part { text, quoted: true },
            // U&"..." and the unterminated match no name here.
            (Kind::QuotedIdent, _) => Part {
                text: raw,
                quoted: true,
            },
            _ => Part {
                text: raw,
                quoted: false,
            },
        }
    }

    /// Is it `lower` (a lower-case name) as PostgreSQL reads it?
    pub fn is(&self, lower: &str) -> bool {
        match self.quoted {
            true => self.text == lower,
            false => self.text.eq_ignore_ascii_case(lower),
        }
    }

    /// As PostgreSQL reads it; `None` when longer than any name judged here.
    pub fn folded<'b>(&self, buf: &'b mut [u8; 64]) -> Option<&'b str>
    where
        'a: 'b,
    {
        match self.quoted {
            true => Some(self.text),
            false => fold(self.text, buf),
        }
    }

    /// A name PostgreSQL keeps for its catalogs (`pg_class`, `pg_settings`).
    pub fn is_pg(&self) -> bool {
        let head = self.text.get(..3);
        match self.quoted {
            true => head == Some("pg_"),
            false => head.is_some_and(|h| h.eq_ignore_ascii_case("pg_")),
        }
    }

    /// The session's temporary schema: `pg_temp` or `pg_temp_<n>`.
    pub fn is_pg_temp(&self) -> bool {
        let mut buf = [0; 64];
        let Some(name) = self.folded(&mut buf) else {
            return false;
        };
        name.strip_prefix("pg_temp").is_some_and(|rest| {
            rest.is_empty()
                || rest
                    .strip_prefix('_')
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    }
}

/// `text` with ASCII letters lower-cased, in `buf`, as PostgreSQL folds an
/// unquoted identifier; `None` when it does not fit.
pub(crate) fn fold<'b>(text: &str, buf: &'b mut [u8; 64]) -> Option<&'b str> {
    let out = buf.get_mut(..text.len())?;
    out.copy_from_slice(text.as_bytes());
    out.make_ascii_lowercase();
    std::str::from_utf8(out).ok()
}

/// Where a name directly followed by `(` stands.
pub(crate) struct Site<'a> {
    pub sql: &'a str,
    /// The token before the name's first part; `None` for the statement's
    /// first word.
    pub before: Option<Token>,
    /// The name's last part.
    pub name: Part<'a>,
    pub create: bool,
    pub copy: bool,
    /// At the top level of a WITH's list, where `, name (` is a query's
    /// column list.
    pub cte_list: bool,
}

/// The reset a name of `parts` parts followed by `(` at `site` calls for,
/// when it is a call.
pub(crate) fn call(site: &Site, schema: Option<Part>, parts: usize) -> Option<Reset> {
    let mut buf = [0; 64];
    let name = site.name.folded(&mut buf);
    // Built-ins first, the commonest: call or not, nothing to reset.
    let builtin_schema = schema.is_none_or(|s| s.is("pg_catalog"));
    if parts <= 2 && builtin_schema && name.is_some_and(|n| PG_NEUTRAL.contains(n)) {
        return None;
    }
    if !is_call(site, name.filter(|_| parts == 1 && !site.name.quoted)) {
        return None;
    }
    Some(match (parts, name) {
        (1 | 2, Some(name)) => judge(schema, name),
        _ => Reset::Full(reset::FUNCTION_CALL),
    })
}

/// Whether `name (` at `site` calls a function; `word` is the name folded,
/// when it is one unquoted word. When in doubt it does: a call too many
/// costs a reset, one too few shows a client another's state.
fn is_call(site: &Site, word: Option<&str>) -> bool {
    let Some(before) = site.before else {
        // The statement's first word: EXPLAIN (...), VACUUM (...).
        return false;
    };
    let sql = site.sql;
    let mut buf = [0; 64];
    let after_word = match before.kind {
        Kind::Word => fold(before.text(sql), &mut buf),
        _ => None,
    };
    let after = |w: &str| after_word == Some(w);
    // A relation or alias with its columns, a type with its modifiers, a
    // routine being defined, a clause.
    let relation = match after_word {
        Some(w) => matches!(
            w,
            "into"
                | "table"
                | "view"
                | "references"
                | "with"
                | "recursive"
                | "as"
                | "prepare"
                | "execute"
                | "copy"
                | "function"
                | "procedure"
                | "aggregate"
        ),
        // After `)`: `f(1) g (i)`, `(SELECT ...) s (a)`, `count(*) FILTER
        // (...)`, `OVER (...)`, never a call; after `::`, a type.
        None => {
            before.is_punct(sql, ")")
                || (before.kind == Kind::Op && before.text(sql) == "::")
                || (site.cte_list && before.is_punct(sql, ","))
        }
    };
    if relation || (site.create && (after("on") || after("using"))) {
        return false;
    }
    let Some(w) = word else {
        return true;
    };
    // After an identifier (not a keyword that starts an expression).
    let after_ident = || match before.kind {
        Kind::QuotedIdent | Kind::String => true,
        Kind::Word => after_word.is_none_or(|b| !keyword(b)),
        _ => false,
    };
    let not_call = match w {
        _ if keyword(w) => true,
        // a OPERATOR(pg_catalog.+) b
        "operator" => true,
        "key" => after("primary") || after("foreign"),
        "conflict" => after("on"),
        "sets" => after("grouping"),
        "insert" => after("then"),
        "zone" => after("time"),
        "varying" => after("character") || after("char") || after("bit") || after("nchar"),
        // UPDATE t SET (a, b) = ..., JSON_TABLE(... COLUMNS (...)).
        "set" => after_ident() || (before.kind == Kind::Op && before.text(sql) == "*"),
        "columns" => after_ident(),
        "force_quote" | "force_not_null" | "force_null" => site.copy,
        _ => false,
    };
    !not_call
}

/// A word of `KEYWORDS` (folded).
fn keyword(w: &str) -> bool {
    KEYWORDS.contains(w)
}

/// Keywords whose `(` is never a function's: PostgreSQL's reserved words,
/// and those whose parenthesis is their own syntax (types with modifiers,
/// COALESCE, EXTRACT, JOIN ...). None of them has an effect.
static KEYWORDS: LazyLock<FxHashSet<&'static str>> = LazyLock::new(|| {
    RESERVED
        .iter()
        .chain(OWN_SYNTAX)
        .chain(TYPE_FUNC_NAME)
        .copied()
        .collect()
});

/// PostgreSQL's reserved keywords.
#[rustfmt::skip]
pub(super) const RESERVED: &[&str] = &[
    "all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric",
    "both", "case", "cast", "check", "collate", "column", "constraint", "create",
    "current_catalog", "current_date", "current_role", "current_time",
    "current_timestamp", "current_user", "default", "deferrable", "desc", "distinct",
    "do", "else", "end", "except", "false", "fetch", "for", "foreign", "from",
    "grant", "group", "having", "in", "initially", "intersect", "into", "lateral",
    "leading", "limit", "localtime", "localtimestamp", "not", "null", "offset",
    "on", "only", "or", "order", "placing", "primary", "references", "returning",
    "select", "session_user", "some", "symmetric", "system_user", "table", "then",
    "to", "trailing", "true", "union", "unique", "user", "using", "variadic",
    "when", "where", "window", "with",
];

/// Keywords whose parenthesis is their own syntax, never a function's name.
#[rustfmt::skip]
const OWN_SYNTAX: &[&str] = &[
    "between", "bigint", "bit", "boolean", "char", "character", "coalesce", "dec",
    "decimal", "exists", "extract", "float", "greatest", "grouping", "inout", "int",
    "integer", "interval", "json", "json_array", "json_arrayagg", "json_exists",
    "json_object", "json_objectagg", "json_query", "json_scalar", "json_serialize",
    "json_table", "json_value", "least", "merge_action", "national", "nchar", "none",
    "normalize", "nullif", "numeric", "out", "overlay", "position", "precision",
    "real", "row", "setof", "smallint", "substring", "time", "timestamp", "treat",
    "trim", "values", "varchar", "xmlattributes", "xmlconcat", "xmlelement",
    "xmlexists", "xmlforest", "xmlnamespaces", "xmlparse", "xmlpi", "xmlroot",
    "xmlserialize", "xmltable",
];

/// Functions or types, but reserved in expressions: JOIN (...), LIKE (...)
/// (PostgreSQL's type-or-function-name keywords).
#[rustfmt::skip]
pub(super) const TYPE_FUNC_NAME: &[&str] = &[
    "authorization", "binary", "collation", "concurrently", "cross", "current_schema",
    "freeze", "full", "ilike", "inner", "is", "isnull", "join", "left", "like",
    "natural", "notnull", "outer", "overlaps", "right", "similar", "tablesample",
    "verbose",
];

/// Built-ins with effects but no session state, beyond `PG_READ_ONLY`.
#[rustfmt::skip]
const NEUTRAL: &[&str] = &[
    // set_config's session form pins; its local form ends with the transaction.
    "set_config", "pg_notify", "pg_cancel_backend", "pg_terminate_backend",
    "pg_export_snapshot", "txid_current", "pg_current_xact_id", "pg_reload_conf",
    "pg_rotate_logfile", "pg_switch_wal", "pg_create_restore_point",
    "pg_log_backend_memory_contexts", "pg_logical_emit_message", "pg_current_logfile",
    "pg_walfile_name", "pg_walfile_name_offset", "pg_split_walfile_name", "pg_prewarm",
    // large-object descriptors close at the transaction's end
    "loread", "lowrite",
    // TABLESAMPLE methods, GROUP BY CUBE/ROLLUP (and the cube extension's)
    "bernoulli", "system", "system_rows", "system_time", "cube", "rollup",
    // pgcrypto
    "digest", "hmac", "crypt", "gen_salt", "gen_random_bytes",
];

/// `PG_READ_ONLY` and `NEUTRAL`: looked up for every call a statement makes.
static PG_NEUTRAL: LazyLock<FxHashSet<&'static str>> = LazyLock::new(|| {
    let all = functions::PG_READ_ONLY.iter().chain(NEUTRAL);
    all.copied().collect()
});

/// Families of built-ins with no session state: session advisory locks pin
/// (DISCARD ALL releases them), the rest read or act outside the session.
const NEUTRAL_PREFIXES: &[&str] = &[
    "pg_advisory_",
    "pg_try_advisory_",
    "pg_stat_",
    "pg_get_",
    "pg_is_",
    "pg_ls_",
    "pg_read_",
    "pg_relation_",
    "pg_size_",
    "pg_control_",
    "pg_current_",
    "pg_last_",
    "pg_xact_",
    "pg_snapshot_",
    "txid_",
    "lo_",
    "has_",
];

/// Apache AGE's functions keep no session state besides their caches.
const AGE_PREFIXES: &[&str] = &["agtype_", "_agtype_build_", "age_"];

/// The reset a call of `schema.n` calls for (`n` folded).
fn judge(schema: Option<Part>, n: &str) -> Reset {
    let full = Reset::Full(reset::FUNCTION_CALL);
    let (pg, age) = match schema {
        None => (true, true),
        Some(s) if s.is("pg_catalog") => (true, false),
        Some(s) if s.is("ag_catalog") => (false, true),
        Some(_) => return full,
    };
    // AGE's writes take their ids from sequences: lastval moves.
    if (pg && matches!(n, "nextval" | "setval")) || (age && n == "cypher") {
        return Reset::Sequences(reset::SEQUENCE_FUNCTION);
    }
    let neutral = (pg
        && (PG_NEUTRAL.contains(n) || NEUTRAL_PREFIXES.iter().any(|p| n.starts_with(p))))
        || (age && (functions::age_read_only(n) || AGE_PREFIXES.iter().any(|p| n.starts_with(p))));
    match neutral {
        true => Reset::None,
        false => full,
    }
}
