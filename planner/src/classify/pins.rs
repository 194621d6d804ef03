//! Statements that leave state in the server session beyond their
//! transaction: a transaction pooler can't move such a client to another
//! server connection, so it keeps it on its own (a pin). One pass over the
//! tokens, no allocation: it runs on every statement of a pooled session.

use crate::lexer::{self, Kind, Token};

/// What a text says of pins, found together: a transaction pooler asks it
/// of every statement, so it is kept with the text's analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pins {
    /// `session_pin`.
    pub pin: Option<&'static str>,
    /// `pin_past_reset`.
    pub past_reset: Option<&'static str>,
    /// CREATE, ALTER or DROP DATABASE (`database_command`).
    pub database_command: bool,
    /// The text has a LOAD: the session follows its libraries
    /// (`loaded_libraries`) onto whatever connection it gets.
    pub loads: bool,
}

impl Pins {
    /// `session_pin` and `pin_past_reset` in one pass over the tokens: the
    /// first is the first reason the second's pass meets.
    pub fn of(sql: &str) -> Pins {
        let mut scan = Scan::default();
        let mut pin = None;
        let mut past_reset = None;
        for t in lexer::tokens(sql) {
            let end = t.is_punct(sql, ";");
            let step = match end {
                true => scan.end_statement(),
                false => scan.token(sql, &t),
            };
            if let Err(why) = step {
                pin.get_or_insert(why);
                if !reset_undoes(why) {
                    past_reset = Some(why);
                    break;
                }
                if end {
                    scan = Scan {
                        loads: scan.loads,
                        ..Scan::default()
                    };
                }
            }
        }
        if past_reset.is_none()
            && let Err(why) = scan.end_statement()
        {
            pin.get_or_insert(why);
            past_reset = Some(why).filter(|why| !reset_undoes(why));
        }
        Pins {
            pin,
            past_reset,
            database_command: super::database_command(sql),
            loads: scan.loads,
        }
    }
}

/// Why `sql` (one or more statements) ties its session to its server
/// connection, if it does. When unsure, it says so: a pin costs a
/// connection, a wrong move shows one client another's state.
pub fn session_pin(sql: &str) -> Option<&'static str> {
    let mut scan = Scan::default();
    let all = lexer::tokens(sql).try_for_each(|t| {
        if t.is_punct(sql, ";") {
            scan.end_statement()
        } else {
            scan.token(sql, &t)
        }
    });
    all.and_then(|()| scan.end_statement()).err()
}

/// The first reason in `sql` to pin that DISCARD ALL would not undo (a
/// dblink connection, a DO block, a statement not read),
/// looking at every statement: `session_pin` stops at the first reason.
pub fn pin_past_reset(sql: &str) -> Option<&'static str> {
    let mut scan = Scan::default();
    for t in lexer::tokens(sql) {
        let step = match t.is_punct(sql, ";") {
            true => scan.end_statement(),
            false => scan.token(sql, &t),
        };
        if let Err(why) = step {
            if !reset_undoes(why) {
                return Some(why);
            }
            if t.is_punct(sql, ";") {
                scan = Scan::default();
            }
        }
    }
    scan.end_statement().err().filter(|why| !reset_undoes(why))
}

/// Whether DISCARD ALL undoes what a pin reason names: session settings
/// and role, LISTEN, session advisory locks, temporary tables, WITH HOLD
/// cursors, SQL prepared statements.
pub fn reset_undoes(why: &str) -> bool {
    matches!(
        why,
        "session SET"
            | "RESET"
            | "DISCARD"
            | "LISTEN"
            | "UNLISTEN"
            | "session advisory lock"
            | "temporary table"
            | "DECLARE ... WITH HOLD"
            | "SQL PREPARE"
            | "SQL DEALLOCATE"
            | SET_CONFIG
    )
}

/// Statement kinds, by first word, that change nothing past their
/// transaction (their functions and temporary objects are looked at
/// apart).
const PLAIN: &[&str] = &[
    "select",
    "insert",
    "update",
    "delete",
    "with",
    "values",
    "table",
    "begin",
    "start",
    "commit",
    "end",
    "rollback",
    "abort",
    "savepoint",
    "release",
    "copy",
    "create",
    "alter",
    "drop",
    "truncate",
    "grant",
    "revoke",
    "comment",
    "analyze",
    "analyse",
    "vacuum",
    "explain",
    "show",
    "lock",
    "notify",
    "fetch",
    "move",
    "close",
    "execute",
    "merge",
    "call",
    "refresh",
    "reindex",
    "cluster",
    "checkpoint",
    "security",
    "import",
    "reassign",
    // A session replays its LOADs on the next connection, like its SETs.
    "load",
];

/// Functions whose effect outlives the transaction.
const SESSION_FUNCTIONS: &[(&str, &str)] = &[
    ("pg_advisory_lock", "session advisory lock"),
    ("pg_advisory_lock_shared", "session advisory lock"),
    ("pg_try_advisory_lock", "session advisory lock"),
    ("pg_try_advisory_lock_shared", "session advisory lock"),
    ("dblink_connect", "dblink connection"),
    ("dblink_connect_u", "dblink connection"),
];

#[derive(Default)]
struct Scan {
    /// Words of the current statement so far.
    words: usize,
    first: First,
    prev_into: bool,
    /// The words so far are CREATE's head: TEMP may come next.
    prev_head: bool,
    prev_with: bool,
    /// Inside `set_config(`: parenthesis depth, and whether the last token
    /// was the word `true` (its third argument, is_local).
    set_config: Option<(usize, bool)>,
    after_set_config: bool,
    /// A statement so far was a LOAD (kept past each statement's end).
    loads: bool,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum First {
    #[default]
    None,
    Set,
    Create,
    Declare,
    Prepare,
    Other,
}

/// `Err(why)` ends the scan with a pin.
type Step = Result<(), &'static str>;

const NOT_READ: &str = "statement not read by the pooler";
const SET_CONFIG: &str = "set_config(..., false)";

impl Scan {
    fn end_statement(&mut self) -> Step {
        if self.set_config.is_some() {
            // An unfinished call: its arguments can't be read.
            return Err(SET_CONFIG);
        }
        *self = Scan {
            loads: self.loads,
            ..Scan::default()
        };
        Ok(())
    }

    fn token(&mut self, sql: &str, t: &Token) -> Step {
        if let Some((depth, _)) = self.set_config.as_mut() {
            if t.is_punct(sql, "(") {
                *depth += 1;
            } else if t.is_punct(sql, ")") {
                *depth -= 1;
                if *depth == 0 {
                    let local = self.set_config.is_some_and(|(_, l)| l);
                    self.set_config = None;
                    return if local { Ok(()) } else { Err(SET_CONFIG) };
                }
            }
            let local = t.is_word(sql, "true");
            if let Some((_, l)) = self.set_config.as_mut() {
                *l = local;
            }
            return Ok(());
        }
        if self.after_set_config {
            self.after_set_config = false;
            if t.is_punct(sql, "(") {
                self.set_config = Some((1, false));
                return Ok(());
            }
        }
        let word = match t.kind {
            Kind::Word => t.text(sql),
            Kind::QuotedIdent => t.text(sql).trim_matches('"'),
            _ => {
                if self.words == 0 {
                    // `(SELECT ...)` and the like: not read here.
                    return Err(NOT_READ);
                }
                return Ok(());
            }
        };
        self.words += 1;
        let is = |w: &str| word.eq_ignore_ascii_case(w);
        if self.words == 1 {
            self.loads |= is("load");
            self.first = if is("set") {
                First::Set
            } else if is("create") {
                First::Create
            } else if is("declare") {
                First::Declare
            } else if is("prepare") {
                First::Prepare
            } else if PLAIN.iter().any(|p| is(p)) {
                First::Other
            } else {
                return Err(first_word_pin(word));
            };
            self.prev_head = self.first == First::Create;
            return Ok(());
        }
        if self.words == 2 {
            match self.first {
                // SET LOCAL, SET TRANSACTION and SET CONSTRAINTS end with
                // their transaction.
                First::Set if !(is("local") || is("transaction") || is("constraints")) => {
                    return Err("session SET");
                }
                // PREPARE TRANSACTION is two-phase commit, not a statement.
                First::Prepare if !is("transaction") => return Err("SQL PREPARE"),
                _ => {}
            }
        }
        if (is("temp") || is("temporary"))
            && ((self.first == First::Create && self.prev_head) || self.prev_into)
        {
            return Err("temporary table");
        }
        if self.first == First::Declare && self.prev_with && is("hold") {
            return Err("DECLARE ... WITH HOLD");
        }
        if is("set_config") {
            self.after_set_config = true;
        } else if let Some((_, why)) = SESSION_FUNCTIONS.iter().find(|(f, _)| is(f)) {
            return Err(why);
        }
        // CREATE [OR REPLACE] [GLOBAL | LOCAL] TEMP ...
        self.prev_head = self.first == First::Create
            && self.words <= 3
            && (self.words == 1 || is("replace") || is("global") || is("local"));
        self.prev_into = is("into");
        self.prev_with = is("with");
        Ok(())
    }
}

/// The pin a statement's first word makes, when it is no plain kind.
fn first_word_pin(word: &str) -> &'static str {
    const KNOWN: &[(&str, &str)] = &[
        ("reset", "RESET"),
        ("discard", "DISCARD"),
        ("listen", "LISTEN"),
        ("unlisten", "UNLISTEN"),
        ("do", "DO block"),
        ("deallocate", "SQL DEALLOCATE"),
    ];
    KNOWN
        .iter()
        .find(|(w, _)| word.eq_ignore_ascii_case(w))
        .map_or(NOT_READ, |(_, why)| why)
}

#[cfg(test)]
mod tests {
    /// What DISCARD ALL undoes is told apart from what it leaves, in every
    /// statement of a text.
    #[test]
    fn pins_past_a_reset() {
        for sql in [
            "LISTEN a",
            "SET ROLE x; SELECT pg_advisory_lock(1); CREATE TEMP TABLE t (a int)",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1; PREPARE p AS SELECT 1",
            "SELECT set_config('a.b', 'c', false)",
            "DISCARD ALL; RESET ALL; UNLISTEN *; DEALLOCATE p",
            "SELECT 1",
            "LISTEN a; LOAD 'x'",
        ] {
            assert_eq!(super::pin_past_reset(sql), None, "{sql}");
            if let Some(why) = super::session_pin(sql) {
                assert!(super::reset_undoes(why), "{sql}: {why}");
            }
        }
        for (sql, why) in [
            ("LISTEN a; DO $$BEGIN END$$", "DO block"),
            (
                "SELECT pg_advisory_lock(1), dblink_connect('c')",
                "dblink connection",
            ),
            ("SET x = 1; DO $$BEGIN END$$", "DO block"),
            ("SELECT 1; (SELECT 2)", "statement not read by the pooler"),
        ] {
            assert_eq!(super::pin_past_reset(sql), Some(why), "{sql}");
        }
    }

    use super::session_pin;

    /// One pass finds what the two functions find apart.
    #[test]
    fn pins_of_a_text_match_its_pins_found_apart() {
        for sql in [
            "SELECT 1",
            "",
            ";;",
            "LISTEN a",
            "LISTEN a; LOAD 'x'",
            "LOAD 'x'; LISTEN a",
            "SET ROLE x; SELECT pg_advisory_lock(1); CREATE TEMP TABLE t (a int)",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1; PREPARE p AS SELECT 1",
            "SELECT pg_advisory_lock(1), dblink_connect('c')",
            "SET x = 1; DO $$BEGIN END$$",
            "SELECT 1; (SELECT 2)",
            "(SELECT 1); LISTEN a",
            "SET search_path = a",
            "select 1; set session x = 1",
            "DISCARD ALL; RESET ALL; UNLISTEN *; DEALLOCATE p",
            "FROBNICATE",
            "create database x",
            "BEGIN; UPDATE t SET a = 1; COMMIT",
            "SELECT set_config('a.b', 'c', false); SELECT 1",
            "DO $$ BEGIN PERFORM 1; END $$",
            "LISTEN a; FROBNICATE",
        ] {
            let p = super::Pins::of(sql);
            assert_eq!(p.pin, session_pin(sql), "{sql}");
            assert_eq!(p.past_reset, super::pin_past_reset(sql), "{sql}");
            assert_eq!(p.database_command, crate::classify::database_command(sql));
            assert_eq!(p.loads, !crate::classify::loaded_libraries(sql).is_empty());
        }
    }

    #[test]
    fn plain_statements_do_not_pin() {
        for sql in [
            "SELECT 1",
            "select * from t where temp > 3",
            "BEGIN; UPDATE t SET a = 1; COMMIT",
            "SET LOCAL statement_timeout = 5",
            "set transaction isolation level serializable",
            "SELECT set_config('a.b', 'c', true)",
            "SELECT pg_advisory_xact_lock(1)",
            "CREATE TABLE t (temp int)",
            "CREATE TABLE temp (a int)",
            "DECLARE c CURSOR FOR SELECT 1",
            "PREPARE TRANSACTION 'x'",
            "LOAD 'age'",
            "",
            ";;",
            "-- nothing\n",
            "SELECT 'SET x = 1', $$LISTEN a$$",
        ] {
            assert_eq!(session_pin(sql), None, "{sql}");
        }
    }

    #[test]
    fn session_state_pins() {
        for (sql, why) in [
            ("SET search_path = a", "session SET"),
            ("select 1; set session x = 1", "session SET"),
            ("RESET ALL", "RESET"),
            ("discard all", "DISCARD"),
            ("LISTEN chan", "LISTEN"),
            ("UNLISTEN *", "UNLISTEN"),
            ("SELECT pg_advisory_lock(1)", "session advisory lock"),
            (
                "SELECT pg_catalog.pg_try_advisory_lock(1, 2)",
                "session advisory lock",
            ),
            (
                "SELECT set_config('a.b', 'c', false)",
                "set_config(..., false)",
            ),
            (
                "SELECT set_config('a.b', 'c', $1)",
                "set_config(..., false)",
            ),
            (
                "SELECT set_config('a.b', upper('c'), f(true))",
                "set_config(..., false)",
            ),
            ("CREATE TEMP TABLE x (a int)", "temporary table"),
            ("create global temporary table x (a int)", "temporary table"),
            (
                "CREATE OR REPLACE TEMP VIEW v AS SELECT 1",
                "temporary table",
            ),
            ("SELECT 1 INTO TEMP x", "temporary table"),
            (
                "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
                "DECLARE ... WITH HOLD",
            ),
            ("PREPARE p AS SELECT 1", "SQL PREPARE"),
            ("DEALLOCATE p", "SQL DEALLOCATE"),
            ("DO $$ BEGIN PERFORM 1; END $$", "DO block"),
            ("(SELECT 1)", "statement not read by the pooler"),
            ("FROBNICATE", "statement not read by the pooler"),
        ] {
            assert_eq!(session_pin(sql), Some(why), "{sql}");
        }
    }
}
