//! Statements that leave state in the server session beyond their
//! transaction: a transaction pooler can't move such a client to another
//! server connection, so it keeps it on its own (a pin). The same pass finds
//! what the connection needs before another client may have it (`Reset`).
//! One pass over the tokens, no allocation: it runs on every statement of a
//! pooled session.

mod scan;
mod verbs;

use super::reset::Reset;
use crate::{fingerprint::Literals, lexer};
use scan::Scan;

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
    /// What a server connection that ran the text needs before another
    /// client may use it. A statement that pins is left to its pin, unless
    /// it also does what the pin does not cover (a call of an unknown
    /// function, DML on a catalog).
    pub reset: Reset,
    /// The text has a LOAD: the session follows its libraries
    /// (`loaded_libraries`) onto whatever connection it gets.
    pub loads: bool,
}

impl Pins {
    /// Everything above in one pass over the tokens: `pin` is the first
    /// reason the pass meets, `past_reset` the first DISCARD ALL leaves.
    pub fn of(sql: &str) -> Pins {
        let mut scan = Scan::default();
        let mut pins = Pins::default();
        for t in lexer::tokens(sql) {
            let step = match t.is_punct(sql, ";") {
                true => scan.end_statement(sql),
                false => scan.token(sql, &t),
            };
            if let Err(why) = step {
                pins.note(why);
            }
        }
        if let Err(why) = scan.end_statement(sql) {
            pins.note(why);
        }
        pins.reset = scan.reset;
        pins.loads = scan.loads;
        pins.database_command = scan.database;
        pins
    }

    fn note(&mut self, why: &'static str) {
        self.pin.get_or_insert(why);
        if !reset_undoes(why) {
            self.past_reset.get_or_insert(why);
        }
    }
}

/// Longest text `LastPins` keeps.
const MAX_KEPT_TEXT: usize = 4096;

/// `Pins::of` over a stream of texts that mostly repeat one statement with
/// other literals, as a pooled application's do: the scan reads no
/// literal's value (a plain number or string is one token to it, whatever
/// it holds), so the last text's pins serve the next whose only
/// difference is in the values of its plain literals
/// (`Literals::same_shape`). Checking that is a comparison of the bytes;
/// the scan lexes the text.
#[derive(Debug, Default)]
pub struct LastPins {
    text: String,
    literals: Literals,
    /// `literals` are `text`'s (found at the first need).
    found: bool,
    pins: Option<Pins>,
}

impl LastPins {
    pub fn of(&mut self, sql: &str) -> Pins {
        if let Some(pins) = self.pins {
            if self.text == sql {
                return pins;
            }
            if !self.found {
                self.literals.find(&self.text);
                self.found = true;
            }
            if self.literals.same_shape(&self.text, sql) {
                self.text.clear();
                self.text.push_str(sql);
                return pins;
            }
        }
        let pins = Pins::of(sql);
        self.found = false;
        self.text.clear();
        match sql.len() <= MAX_KEPT_TEXT {
            true => {
                self.text.push_str(sql);
                self.pins = Some(pins);
            }
            false => self.pins = None,
        }
        pins
    }
}

/// Why `sql` (one or more statements) ties its session to its server
/// connection, if it does. When unsure, it says so: a pin costs a
/// connection, a wrong move shows one client another's state.
pub fn session_pin(sql: &str) -> Option<&'static str> {
    let mut scan = Scan::default();
    let all = lexer::tokens(sql).try_for_each(|t| match t.is_punct(sql, ";") {
        true => scan.end_statement(sql),
        false => scan.token(sql, &t),
    });
    all.and_then(|()| scan.end_statement(sql)).err()
}

/// The first reason in `sql` to pin that DISCARD ALL would not undo (a
/// dblink connection, a DO block, a statement not read), looking at every
/// statement: `session_pin` stops at the first reason.
pub fn pin_past_reset(sql: &str) -> Option<&'static str> {
    let mut scan = Scan::default();
    for t in lexer::tokens(sql) {
        let step = match t.is_punct(sql, ";") {
            true => scan.end_statement(sql),
            false => scan.token(sql, &t),
        };
        if let Err(why) = step
            && !reset_undoes(why)
        {
            return Some(why);
        }
    }
    scan.end_statement(sql)
        .err()
        .filter(|why| !reset_undoes(why))
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
            | TEMPORARY
            | "DECLARE ... WITH HOLD"
            | "SQL PREPARE"
            | "SQL DEALLOCATE"
            | SET_CONFIG
    )
}

/// `Err(why)`: a pin.
type Step = Result<(), &'static str>;

const NOT_READ: &str = "statement not read by the pooler";
const SET_CONFIG: &str = "set_config(..., false)";
const TEMPORARY: &str = "temporary table";

#[cfg(test)]
mod resets;
#[cfg(test)]
mod tests;
