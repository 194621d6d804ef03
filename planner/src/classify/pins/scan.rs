//! The scan behind `Pins`: a state machine over one statement's tokens at
//! a time, with what the text as a whole calls for.

use super::verbs::{At, Dml, SESSION_FUNCTIONS, Verb, verb_of};
use super::{NOT_READ, SET_CONFIG, Step, TEMPORARY, reset_undoes};
use crate::classify::neutral::{self, Part, Site};
use crate::classify::reset::{self, Reset};
use crate::lexer::{Kind, Token};

/// A dotted name being read (`a`, `s.t`, `"S"."f"`).
#[derive(Default, Clone, Copy)]
struct Name {
    parts: usize,
    /// Its last two parts.
    schema: Option<Token>,
    last: Option<Token>,
    /// The token before its first part.
    before: Option<Token>,
    /// A `.` came after its last part.
    dot: bool,
    /// It is the table its statement's DML changes.
    target: Option<Dml>,
    /// It follows SELECT's INTO: the table SELECT creates.
    into: bool,
}

#[derive(Default)]
pub(super) struct Scan {
    st: Statement,
    /// The text's reset so far.
    pub reset: Reset,
    pub loads: bool,
    pub database: bool,
}

/// What the scan knows of the current statement.
#[derive(Default)]
struct Statement {
    /// Words (and quoted identifiers) so far.
    words: usize,
    verb: Verb,
    /// Words since the verb, the verb included.
    since_verb: usize,
    /// The first word is CREATE, ALTER or DROP.
    changes_objects: bool,
    /// EXPLAIN before its statement: options may follow.
    explain_options: bool,
    /// EXPLAIN without ANALYZE: the statement is planned, not run.
    dry: bool,
    depth: usize,
    /// The top level of a WITH's list, before its main statement.
    with_list: bool,
    /// The next word may be a WITH query's verb.
    query_next: bool,
    prev_into: bool,
    /// The words so far are CREATE's head: TEMP may come next.
    prev_head: bool,
    prev_with: bool,
    /// Inside `set_config(`: parenthesis depth, and whether the last token
    /// was the word `true` (its third argument, is_local).
    set_config: Option<(usize, bool)>,
    after_set_config: bool,
    last: Option<Token>,
    name: Name,
    /// A SELECT was seen (CREATE ... AS SELECT).
    selects: bool,
    /// The next name is this DML's target (past INTO, FROM, ONLY).
    target_next: Option<Dml>,
    /// COPY's table is a catalog: COPY FROM writes one.
    copy_catalog: bool,
    /// The reset everything read so far calls for, in order.
    all: Reset,
    /// The part of `all` a pin does not cover.
    kept: Reset,
    /// A pin DISCARD ALL undoes: the statement's own reset is left to it.
    pinned: bool,
    /// The rest of the statement is not read.
    not_read: bool,
}

impl Scan {
    pub fn end_statement(&mut self, sql: &str) -> Step {
        let mut step = self.finish_name(sql, false);
        if self.st.set_config.is_some() {
            // An unfinished call: its arguments can't be read.
            step = step.and(self.pin(SET_CONFIG));
        }
        let st = &self.st;
        self.reset = self.reset.combine(if st.pinned { st.kept } else { st.all });
        self.st = Statement::default();
        step
    }

    fn pin(&mut self, why: &'static str) -> Step {
        self.st.pinned |= reset_undoes(why);
        Err(why)
    }

    /// A reset the statement calls for whether or not it pins.
    fn keep(&mut self, r: Reset) {
        self.st.all = self.st.all.combine(r);
        self.st.kept = self.st.kept.combine(r);
    }

    /// `keep`, if the statement runs.
    fn keep_if_run(&mut self, r: Reset) {
        if !self.st.dry {
            self.keep(r);
        }
    }

    /// A reset the statement's kind calls for, if it runs.
    fn kind(&mut self, r: Reset) {
        if !self.st.dry {
            self.st.all = self.st.all.combine(r);
        }
    }

    fn not_read(&mut self) -> Step {
        self.st.not_read = true;
        self.keep(Reset::Full(reset::NOT_READ));
        Err(NOT_READ)
    }

    pub fn token(&mut self, sql: &str, t: &Token) -> Step {
        if t.unterminated {
            self.keep(Reset::Full(reset::NOT_READ));
        }
        if self.st.not_read {
            return Ok(());
        }
        let query_next = std::mem::take(&mut self.st.query_next);
        let step = self.set_config_arguments(sql, t);
        let read = match t.kind {
            Kind::Word | Kind::QuotedIdent => self.word(sql, t, query_next),
            // `(SELECT ...)` and the like: not read here.
            _ if self.st.words == 0 => self.not_read(),
            Kind::Punct => self.punct(sql, t),
            _ => self.finish_name(sql, false),
        };
        self.st.last = Some(*t);
        step.and(read)
    }

    /// Follows `set_config(`'s arguments to its last: `true` keeps the
    /// setting to the transaction, anything else may not.
    fn set_config_arguments(&mut self, sql: &str, t: &Token) -> Step {
        let st = &mut self.st;
        if let Some((depth, local)) = st.set_config.as_mut() {
            if t.is_punct(sql, "(") {
                *depth += 1;
            } else if t.is_punct(sql, ")") {
                *depth -= 1;
                if *depth == 0 {
                    let local = *local;
                    st.set_config = None;
                    return if local { Ok(()) } else { self.pin(SET_CONFIG) };
                }
            }
            *local = t.is_word(sql, "true");
            return Ok(());
        }
        if std::mem::take(&mut st.after_set_config) && t.is_punct(sql, "(") {
            st.set_config = Some((1, false));
        }
        Ok(())
    }

    fn punct(&mut self, sql: &str, t: &Token) -> Step {
        let st = &mut self.st;
        match t.text(sql) {
            "(" => {
                let step = self.finish_name(sql, true);
                let st = &mut self.st;
                let after_as = st
                    .last
                    .is_some_and(|l| l.is_word(sql, "as") || l.is_word(sql, "materialized"));
                st.query_next = st.with_list && st.depth == 0 && after_as;
                // COPY (query) TO: no table.
                st.target_next = None;
                st.depth += 1;
                step
            }
            ")" => {
                st.depth = st.depth.saturating_sub(1);
                self.finish_name(sql, false)
            }
            "." if st.name.parts > 0 && !st.name.dot => {
                st.name.dot = true;
                let temp_schema = st.name.last.is_some_and(|l| Part::of(sql, &l).is_pg_temp());
                if temp_schema && (st.verb == Verb::Create || st.name.into) {
                    return self.pin(TEMPORARY);
                }
                Ok(())
            }
            _ => self.finish_name(sql, false),
        }
    }

    /// The name just read ends: a call, when `(` ends it; a catalog, when
    /// its statement's DML changes it.
    #[inline]
    fn finish_name(&mut self, sql: &str, call: bool) -> Step {
        // `parts` alone marks a name: the next one is written whole.
        match self.st.name.parts {
            0 => Ok(()),
            _ => self.finish_a_name(sql, call),
        }
    }

    fn finish_a_name(&mut self, sql: &str, call: bool) -> Step {
        let name = self.st.name;
        self.st.name.parts = 0;
        let Some(last) = name.last else {
            return Ok(());
        };
        let step = match name.target {
            Some(dml) => self.target(sql, &name, dml),
            None => Ok(()),
        };
        if call && self.st.verb != Verb::Quiet {
            let st = &self.st;
            let site = Site {
                sql,
                before: name.before,
                name: Part::of(sql, &last),
                // CREATE INDEX ... ON t (a): a query's ON f(x) is a call.
                create: st.verb == Verb::Create && !st.selects,
                copy: st.verb == Verb::Copy,
                cte_list: st.with_list && st.depth == 0,
            };
            if let Some(r) =
                neutral::call(&site, name.schema.map(|s| Part::of(sql, &s)), name.parts)
            {
                self.keep(r);
            }
        }
        step
    }

    /// DML on a catalog is no plain write: on `pg_settings` it is
    /// `set_config(..., false)`, and on others anything.
    fn target(&mut self, sql: &str, name: &Name, dml: Dml) -> Step {
        let Some(last) = name.last.map(|l| Part::of(sql, &l)) else {
            return Ok(());
        };
        let catalog = match name.schema {
            None => last.is_pg(),
            Some(s) => Part::of(sql, &s).is("pg_catalog"),
        };
        if !catalog {
            return Ok(());
        }
        if dml == Dml::Copy {
            self.st.copy_catalog = true;
            return Ok(());
        }
        if self.st.dry {
            // EXPLAIN without ANALYZE changes nothing.
            return Ok(());
        }
        self.keep(Reset::Full(reset::CATALOG_DML));
        match last.is("pg_settings") {
            true => self.pin(SET_CONFIG),
            false => Ok(()),
        }
    }

    fn word(&mut self, sql: &str, t: &Token, query_next: bool) -> Step {
        let step = self.name_part(sql, t);
        let word = match t.kind {
            Kind::QuotedIdent => t.text(sql).trim_matches('"'),
            _ => t.text(sql),
        };
        step.and(self.read_word(sql, t, word, query_next))
    }

    /// Follows dotted names, and the table a DML statement changes.
    fn name_part(&mut self, sql: &str, t: &Token) -> Step {
        let st = &mut self.st;
        if st.name.parts > 0 && st.name.dot {
            st.name.schema = st.name.last;
            st.name.last = Some(*t);
            st.name.parts += 1;
            st.name.dot = false;
            return Ok(());
        }
        let step = self.finish_name(sql, false);
        let st = &mut self.st;
        let before = st.last;
        st.name = Name {
            parts: 1,
            last: Some(*t),
            before,
            into: before.is_some_and(|b| b.is_word(sql, "into"))
                && st.verb == Verb::Select
                && st.depth == 0,
            ..Name::default()
        };
        if let Some(dml) = st.target_next {
            let skip = ["into", "from", "only", "binary"];
            if !skip.iter().any(|w| t.is_word(sql, w)) {
                st.name.target = Some(dml);
                st.target_next = None;
            }
        }
        step
    }

    fn read_word(&mut self, sql: &str, t: &Token, word: &str, query_next: bool) -> Step {
        let st = &mut self.st;
        st.words += 1;
        st.since_verb += 1;
        let is = |w: &str| word.eq_ignore_ascii_case(w);
        if st.words == 1 {
            st.changes_objects =
                t.is_word(sql, "create") || t.is_word(sql, "alter") || t.is_word(sql, "drop");
            return self.first_word(word);
        }
        if st.words == 2 {
            self.database |= st.changes_objects && t.is_word(sql, "database");
            match st.verb {
                // SET LOCAL, SET TRANSACTION and SET CONSTRAINTS end with
                // their transaction.
                Verb::Set if !(is("local") || is("transaction") || is("constraints")) => {
                    return self.pin("session SET");
                }
                // PREPARE TRANSACTION is two-phase commit, not a statement.
                Verb::Prepare if !is("transaction") => return self.pin("SQL PREPARE"),
                _ => {}
            }
        }
        let mut step = Ok(());
        let st = &mut self.st;
        // Looked up only where a verb may stand.
        let verb = || match verb_of(word) {
            Some((v, _)) if t.kind == Kind::Word => v,
            _ => Verb::Unknown,
        };
        let query = |v| {
            matches!(
                v,
                Verb::Select | Verb::Insert | Verb::Update | Verb::Delete | Verb::Merge
            )
        };
        if st.explain_options {
            if is("analyze") || is("analyse") {
                st.dry = false;
            } else if st.depth == 0 && !is("verbose") {
                st.explain_options = false;
                self.enter(verb(), At::Main);
            }
        } else if st.with_list && st.depth == 0 {
            let v = verb();
            if query(v) {
                st.with_list = false;
                self.enter(v, At::Main);
            }
        } else if query_next {
            let v = verb();
            if query(v) {
                self.enter(v, At::Query);
            }
        }
        let st = &mut self.st;
        if (is("temp") || is("temporary"))
            && ((st.verb == Verb::Create && st.prev_head) || st.prev_into)
        {
            step = step.and(self.pin(TEMPORARY));
        }
        let st = &mut self.st;
        if st.verb == Verb::Declare && st.prev_with && is("hold") {
            step = step.and(self.pin("DECLARE ... WITH HOLD"));
        }
        if is("set_config") {
            self.st.after_set_config = true;
        } else if let Some((_, why)) = SESSION_FUNCTIONS.iter().find(|(f, _)| is(f)) {
            step = step.and(self.pin(why));
        }
        let st = &mut self.st;
        st.selects |= st.verb == Verb::Create && is("select");
        if is("execute") && st.last.is_some_and(|l| l.is_word(sql, "as")) {
            // CREATE TABLE ... AS EXECUTE p: a prepared statement runs.
            self.keep_if_run(Reset::Full(reset::EXECUTE));
        }
        let st = &mut self.st;
        let into = is("into") && st.verb == Verb::Select && st.depth == 0;
        if into {
            // SELECT INTO creates a table.
            self.kind(Reset::Full(reset::DDL));
        }
        let st = &mut self.st;
        if st.verb == Verb::Copy && st.depth == 0 && is("from") {
            match st.copy_catalog {
                true => self.keep(Reset::Full(reset::CATALOG_DML)),
                false => self.kind(Reset::Sequences(reset::DML)),
            }
        }
        // CREATE [OR REPLACE] [GLOBAL | LOCAL] TEMP ...
        let st = &mut self.st;
        st.prev_head = st.verb == Verb::Create
            && st.since_verb <= 3
            && (st.since_verb == 1 || is("replace") || is("global") || is("local"));
        st.prev_into = into;
        st.prev_with = is("with");
        step
    }

    fn first_word(&mut self, word: &str) -> Step {
        let Some((verb, pin)) = verb_of(word) else {
            return self.not_read();
        };
        self.enter(verb, At::Main);
        self.st.prev_head = self.st.verb == Verb::Create;
        match pin {
            Some(why) => self.pin(why),
            None => Ok(()),
        }
    }

    /// A verb: the statement's own, or a WITH query's.
    fn enter(&mut self, verb: Verb, at: At) {
        if at == At::Main {
            self.st.verb = verb;
            self.st.since_verb = 1;
        }
        match verb {
            Verb::Insert | Verb::Update | Verb::Merge => {
                // A column default may call nextval.
                self.kind(Reset::Sequences(reset::DML));
                self.st.target_next = Some(match verb {
                    Verb::Insert => Dml::Insert,
                    Verb::Update => Dml::Update,
                    _ => Dml::Merge,
                });
            }
            Verb::Delete => self.st.target_next = Some(Dml::Delete),
            Verb::Copy => self.st.target_next = Some(Dml::Copy),
            Verb::Create | Verb::Ddl => self.kind(Reset::Full(reset::DDL)),
            Verb::With => self.st.with_list = true,
            Verb::Explain => {
                self.st.explain_options = true;
                self.st.dry = true;
            }
            // The prepared statement's text is not seen here.
            Verb::Execute => self.keep_if_run(Reset::Full(reset::EXECUTE)),
            Verb::Call => self.keep(Reset::Full(reset::CALL)),
            Verb::Do => self.keep(Reset::Full(reset::DO_BLOCK)),
            Verb::Load => {
                // A library's _PG_init may do anything.
                self.loads = true;
                self.keep(Reset::Full(reset::LOAD));
            }
            _ => {}
        }
    }
}
