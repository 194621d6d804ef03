//! SQL's PREPARE, EXECUTE and DEALLOCATE in transaction pooling: a
//! client's SQL-prepared statements follow it like those of the extended
//! protocol (`named.rs`; both share one namespace in PostgreSQL, and here).
//!
//! A PREPARE sent alone as a Query, outside a transaction block, runs on
//! the server the client holds (its answer and its errors are the
//! server's), and a Describe of the statement rides behind it, unseen: its
//! parameter types make a Parse that makes the same statement again, kept
//! as the client's. Before any text that names a statement (EXECUTE,
//! `EXPLAIN EXECUTE`, PREPARE, DEALLOCATE) goes up, the server connection
//! is made to hold the client's statement under that name, or none, in the
//! same write; so EXECUTE runs on whatever connection the client gets.

use std::sync::{Arc, atomic::AtomicU64};

use bytes::{Bytes, BytesMut};
use onetrip_planner::classify::{
    NameUse, Pins, PreparedOp, lone_prepared_op, name_uses, statement_count,
};

use super::own::{close_statement, sync_frame};
use super::shared::ClientStatement;
use super::*;
use crate::wire::write;

/// A pool's counts of its clients' named statements, for `SHOW POOLS` and
/// the metrics.
#[derive(Debug, Default)]
pub struct StatementCounts {
    /// PREPAREs kept for their client, with no pin.
    pub kept: AtomicU64,
    /// SQL-prepared statements made again on a connection, ahead of the
    /// statement that used them.
    pub made_again: AtomicU64,
    /// Uses of a shared statement a connection held from another
    /// client's Parse: each a Parse the server was spared.
    pub shared: AtomicU64,
    /// Clients' statements of the extended protocol parsed on a connection
    /// ahead of the message that used them (the connection lacked them).
    pub parsed_again: AtomicU64,
}

/// A PREPARE alone, taken without a pin.
#[derive(Debug)]
pub struct LonePrepare {
    name: String,
    /// The statement's text (after AS).
    body: String,
    /// Where it begins in the PREPARE's text, in characters.
    offset: usize,
}

/// The client's statements made again ahead of a Query, with a Sync of the
/// proxy's own between them and it, so that a Parse that fails doesn't
/// make the server skip the Query.
#[derive(Debug)]
pub struct Remake {
    /// The first group of the proxy's own sent for it, the Parses' group,
    /// and the Query's.
    from: u64,
    parses: u64,
    group: u64,
    /// Where each Parse sent begins in the text the client made its
    /// statement with, in characters, in order.
    offsets: Vec<usize>,
    /// Parses answered so far.
    parsed: usize,
    /// The first error, its position moved to where the client's text has
    /// it.
    error: Option<Bytes>,
    /// The Query is that one statement.
    lone: bool,
    /// The Parses ran under a savepoint of the proxy's own, rolled back to
    /// after them: the Query found the block as it was.
    saved: bool,
}

/// The savepoint a transaction block's statements are made again under,
/// rolled back to after them, so that one that fails leaves the block as
/// the client's Query would have found it.
const SAVEPOINT: &str = "SAVEPOINT onetrip_remake";
const ROLLED_BACK: &str = "ROLLBACK TO SAVEPOINT onetrip_remake; RELEASE SAVEPOINT onetrip_remake";

/// A PREPARE sent alone, whose parameter types are on their way.
#[derive(Debug)]
pub struct Learning {
    name: String,
    body: String,
    offset: usize,
    /// What the server's record holds under the name meanwhile (a copy of
    /// the PREPARE's Query).
    made_by: Bytes,
    /// The ParameterDescription's body: a Parse's types, as they are laid
    /// out there.
    types: Option<Bytes>,
}

impl Protocol {
    /// The pool's counts, told when the session joins it.
    pub fn count_statements_in(&mut self, counts: Arc<StatementCounts>) {
        self.named.counts = Some(counts);
    }

    /// A pooled, unpinned session's Query `text`: when it is a PREPARE
    /// alone outside a transaction block, or a DEALLOCATE alone (in a
    /// failed block it deallocates nothing: the Flight drops a name only at
    /// its DEALLOCATE's CommandComplete), it follows its client rather than
    /// pin (`fix_sql_named_before` does the rest; a statement that pins
    /// when it runs pins once it is made, `learned`).
    pub(super) fn takes_lone_prepared(&mut self, text: &str) -> bool {
        if !client_txn::first_word_is(text.as_bytes(), &["prepare", "deallocate"]) {
            return false;
        }
        match lone_prepared_op(text) {
            Some(PreparedOp::Prepare { name, text: body }) => {
                // A cypher() call would be rewritten: not the text kept.
                if !self.quiet_upstream() || name.is_empty() || Words::scan(text).any(Words::CYPHER)
                {
                    return false;
                }
                // `body` lies within `text`.
                let start = (body.as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
                let offset = text.get(..start).map_or(0, |s| s.chars().count());
                self.named.sql().lone_prepare = Some(LonePrepare {
                    name,
                    body: body.to_owned(),
                    offset,
                });
                true
            }
            Some(PreparedOp::Deallocate(_) | PreparedOp::DeallocateAll) => true,
            _ => false,
        }
    }

    /// Before a client's message goes up whose statement's text names
    /// prepared statements (a Query; a Parse, Describe or Bind of such a
    /// statement, where the server looks the names up to describe it): the
    /// server connection is made to hold the client's statement under each
    /// name, or none when the client has none (another client's may be
    /// there), so the text answers as on a dedicated connection, errors
    /// included. A Query or Execute runs the text: what it does to the
    /// names is recorded as it goes up.
    pub(super) fn fix_sql_named_before(
        &mut self,
        t: u8,
        msg: &Bytes,
        sql: Option<&Sql>,
        to_up: &mut WriteQueue,
    ) {
        let lone = self.named.sql.as_mut().and_then(|s| s.lone_prepare.take());
        // Most statements name none: nothing is copied for them.
        let names = |s: &&Sql| {
            s.words()
                .any(Words::PREPARE | Words::EXECUTE | Words::DEALLOCATE)
        };
        let flight = &self.flight;
        let named = |name: &str| flight.statement(name).filter(names).cloned();
        let sql = match t {
            tag::QUERY | tag::PARSE => sql.filter(names).cloned(),
            tag::EXECUTE => self.coalescer.batch_statement().filter(|s| names(&s)),
            tag::BIND => frontend::bind(msg).and_then(|(_, s)| named(s)),
            tag::DESCRIBE => match frontend::target(msg) {
                Some((b'S', n)) => named(n),
                _ => None,
            },
            _ => None,
        };
        let Some(sql) = sql else {
            if lone.is_some() {
                // Never: the PREPARE taken is the message it was taken from.
                self.pin_session("SQL PREPARE");
            }
            return;
        };
        // The PREPARE taken without a pin is this Query's (else it pins
        // after all).
        let lone = match lone {
            Some(l)
                if t == tag::QUERY
                    && matches!(lone_prepared_op(sql.as_str()),
                        Some(PreparedOp::Prepare { name, .. }) if name == l.name) =>
            {
                Some(l)
            }
            Some(_) => {
                self.pin_session("SQL PREPARE");
                None
            }
            None => None,
        };
        let uses = name_uses(sql.as_str());
        if t != tag::EXECUTE {
            self.make_names_ready(t, &uses, sql.as_str(), to_up);
            if lone.is_none() {
                // A PREPARE of any other form pins: the statement it makes
                // is the server's from then on, never made again here.
                for u in &uses {
                    if let NameUse::Prepare(n) = u {
                        self.named.client.remove(n);
                    }
                }
            }
        }
        if matches!(t, tag::QUERY | tag::EXECUTE) {
            self.names_used(&uses);
        }
        if let Some(LonePrepare { name, body, offset }) = lone {
            let made_by = Bytes::copy_from_slice(msg);
            self.note_server_holds(&name, made_by.clone());
            let mut learn = BytesMut::with_capacity(name.len() + 12);
            write::describe(&mut learn, b'S', &name);
            learn.extend_from_slice(&write::SYNC);
            let sql = self.named.sql();
            sql.learn_due = Some(learn.freeze());
            sql.learning.push_back(Learning {
                name,
                body,
                offset,
                made_by,
                types: None,
            });
        }
    }

    /// The server connection is made to hold what the client's names in
    /// `uses` (of the statement `text`) stand for, ahead of message `t`.
    fn make_names_ready(&mut self, t: u8, uses: &[NameUse], text: &str, to_up: &mut WriteQueue) {
        // In a failed transaction a Parse fails: what the text names fails
        // there too, but for a ROLLBACK before it.
        let failed = self.txn_status == b'E' || self.txn.failed || self.flight.owes(Own::Abort);
        // Whether the client's own group is open: the Closes and Parses
        // sent here open one.
        let unsynced = self.unsynced;
        // Statements made again inside a transaction block (the server's
        // status known: nothing of the client's on its way, or only the
        // BEGIN held for it) go under a savepoint.
        let saved = t == tag::QUERY
            && !unsynced
            && !failed
            && self.flight.client_answered()
            && (self.txn_status == b'T' || self.flight.begin_on_its_way())
            && uses.iter().any(|u| self.remakes(u));
        let from = self.flight.group_now();
        if saved {
            let mut q = BytesMut::with_capacity(SAVEPOINT.len() + 6);
            write::query(&mut q, SAVEPOINT);
            self.send_own_up(to_up, q.freeze(), Own::Rerun, false);
        }
        let mut parsed = false;
        // Where each Parse sent begins in the client's text, in order.
        let mut offsets = Vec::new();
        for u in uses {
            match u {
                NameUse::Prepare(n) | NameUse::Execute(n) => {
                    let has = self.flight.statement(n).is_some();
                    if has && !failed {
                        let made = self.ensure_named(n, true, to_up);
                        if made {
                            offsets.push(self.sql_offset(n));
                            if matches!(u, NameUse::Execute(_)) {
                                self.count_made_again();
                            }
                        }
                        parsed |= made;
                    } else if !has {
                        if matches!(u, NameUse::Prepare(_)) {
                            self.make_room_for(n, to_up);
                        }
                        self.close_on_server(n, to_up);
                    }
                }
                NameUse::Deallocate(n) => {
                    if self.flight.statement(n).is_none() {
                        self.close_on_server(n, to_up);
                    } else if !failed && self.hold_something_under(n, to_up) {
                        offsets.push(0);
                    }
                }
                NameUse::DeallocateAll => {}
            }
        }
        // A Parse that fails makes the server skip to a Sync, the client's
        // Query with it: one of the proxy's own ends the Parses.
        if (parsed || saved) && t == tag::QUERY && !unsynced {
            let parses = self.flight.group_now();
            self.send_own_up(to_up, sync_frame(), Own::Rerun, false);
            if saved {
                let mut q = BytesMut::with_capacity(ROLLED_BACK.len() + 6);
                write::query(&mut q, ROLLED_BACK);
                self.send_own_up(to_up, q.freeze(), Own::Rerun, false);
            }
            self.named.sql().remake = Some(Remake {
                from,
                parses,
                group: self.flight.group_now(),
                offsets,
                parsed: 0,
                error: None,
                lone: statement_count(text) == 1,
                saved,
            });
        }
    }

    /// Whether making the name `u` uses ready sends a Parse of the client's
    /// statement.
    fn remakes(&self, u: &NameUse) -> bool {
        let (NameUse::Prepare(n) | NameUse::Execute(n)) = u else {
            return false;
        };
        self.flight.statement(n).is_some()
            && !self.prepare_on_its_way(n)
            && self
                .named
                .client
                .get(n)
                .is_some_and(|c| !self.server().statements.has(n, &c.parse))
    }

    /// Where the client's statement `name` begins in the text that made it
    /// (a PREPARE's), in characters: 0 for a Parse's.
    fn sql_offset(&self, name: &str) -> usize {
        let made = self.named.sql.as_ref().and_then(|s| s.sql_made.get(name));
        match (made, self.named.client.get(name)) {
            (Some((made, offset)), Some(now)) if *made == now.parse => *offset,
            _ => 0,
        }
    }

    /// A PREPARE of `name` sent alone is on its way, or answered with its
    /// parameter types still to come: the server that runs it holds what
    /// the client has under the name.
    pub(super) fn prepare_on_its_way(&self, name: &str) -> bool {
        self.named
            .sql
            .as_ref()
            .is_some_and(|s| s.learning.iter().any(|l| l.name == name))
    }

    /// A Query or Execute of a text with `uses` goes up: what it drops
    /// from the server's statements.
    fn names_used(&mut self, uses: &[NameUse]) {
        let group = self.flight.group_now();
        let skipped = self.flight.skipping();
        for u in uses {
            match u {
                // What the client had is kept: the Flight says whether it
                // has it still (a DEALLOCATE in a failed block drops
                // nothing).
                NameUse::Deallocate(n) => self.server_mut().statements.closed(n, group, skipped),
                NameUse::DeallocateAll => self.server_mut().statements.closed_all(group, skipped),
                NameUse::Prepare(_) | NameUse::Execute(_) => {}
            }
        }
    }

    /// Before a DEALLOCATE of the client's statement `name`: the server
    /// holds something under it, so that the DEALLOCATE succeeds as it
    /// would have. A statement that can't fail to parse serves, rather than
    /// the client's own, which might. True when a Parse went up for that.
    fn hold_something_under(&mut self, name: &str, to_up: &mut WriteQueue) -> bool {
        let held = match self.named.client.get(name).map(|c| c.parse.clone()) {
            Some(parse) => self.server_mut().statements.holds(name, &parse),
            None => false,
        };
        if held {
            return false;
        }
        self.make_room_for(name, to_up);
        self.send_own_up(to_up, close_statement(name), Own::Rerun, false);
        let mut parse = BytesMut::with_capacity(name.len() + 16);
        write::parse(&mut parse, name, "SELECT");
        let parse = parse.freeze();
        self.send_own_up(to_up, parse.clone(), Own::Rerun, false);
        self.note_server_holds(name, parse);
        true
    }

    /// The client's PREPARE went up (`forwarded`): the Describe that learns
    /// its parameter types goes right behind it. Dropped with it otherwise.
    pub(super) fn send_learning_if_due(&mut self, to_up: &mut WriteQueue, forwarded: bool) {
        let Some(learn) = self.named.sql.as_mut().and_then(|s| s.learn_due.take()) else {
            return;
        };
        if forwarded {
            self.send_own_up(to_up, learn, Own::Types, false);
        } else {
            if let Some(s) = self.named.sql.as_mut() {
                s.learning.pop_back();
            }
        }
    }

    /// An answer to the Describe that learns a PREPARE's parameter types.
    pub(super) fn on_types_answer(&mut self, t: u8, msg: &[u8]) {
        match t {
            tag::PARAMETER_DESCRIPTION => {
                if let Some(l) = self.named.sql.as_mut().and_then(|s| s.learning.front_mut()) {
                    l.types = Some(Bytes::copy_from_slice(wire::body(msg)));
                }
            }
            tag::READY_FOR_QUERY => {
                if let Some(l) = self.named.sql.as_mut().and_then(|s| s.learning.pop_front()) {
                    self.learned(l);
                }
            }
            _ => {}
        }
    }

    /// The PREPARE and its Describe are answered. When the PREPARE made
    /// the client's statement, a Parse of its text with the types the
    /// server gave it is kept as the client's: what makes it again on the
    /// next connection. Had the types not come, the session keeps this
    /// connection, which holds the statement.
    fn learned(&mut self, l: Learning) {
        let made = self
            .flight
            .statement(&l.name)
            .is_some_and(|s| s.as_str() == l.body);
        if !made {
            // It failed (42P05 leaves the client's statement as it was).
            return;
        }
        let Some(types) = l.types else {
            return self.pin_session("SQL PREPARE");
        };
        // What its EXECUTE will do (an advisory lock, set_config) stays
        // with this connection; a text that fails to parse pins nothing.
        if let Some(why) = Pins::of(&l.body).pin {
            self.pin_session(why);
        }
        let mut parse = BytesMut::with_capacity(l.name.len() + l.body.len() + types.len() + 7);
        write::parse_with_text(&mut parse, l.name.as_bytes(), &l.body, &types);
        let parse = parse.freeze();
        self.server_mut()
            .statements
            .made_as(&l.name, &l.made_by, parse.clone());
        self.named
            .sql()
            .sql_made
            .insert(l.name.clone(), (parse.clone(), l.offset));
        self.named
            .client
            .insert(l.name, ClientStatement::own(parse));
        self.named.count(|c| &c.kept);
    }

    /// An answer to a Close or Parse the proxy sent to make the client's
    /// statements right; false when it stays here. Ahead of a Query (with a
    /// Sync of the proxy's own between), a Parse that fails (a table its
    /// statement reads was dropped since) has its error held: it is what
    /// the Query's use of the statement gives (`error_for_remade`).
    /// Elsewhere only an error goes to the client, which should know that
    /// what it sent next is skipped.
    pub(super) fn on_rerun_answer(&mut self, t: u8, msg: &[u8]) -> bool {
        let now = self.flight.group_answered_now();
        let Some(r) = self
            .named
            .sql
            .as_mut()
            .and_then(|s| s.remake.as_mut())
            .filter(|r| (r.from..r.group).contains(&now))
        else {
            return t == tag::ERROR_RESPONSE;
        };
        if now != r.parses {
            // The savepoint, and the return to it.
            return false;
        }
        match t {
            tag::PARSE_COMPLETE => r.parsed += 1,
            tag::ERROR_RESPONSE if r.error.is_none() => {
                let offset = r.offsets.get(r.parsed).copied().unwrap_or(0);
                r.error = Some(wire::write::error_moved(msg, offset));
            }
            _ => {}
        }
        false
    }

    /// An error of the client's, in place of which the error held for a
    /// statement that could not be made again goes: the Query's first
    /// error, when it is the one the missing statement gives (26000), or
    /// the failed block's (25P02: the failed Parse aborted it, with no
    /// savepoint) for a Query of that one statement. An error of another
    /// kind came before the statement was used, as it would have: it goes,
    /// and the held one is dropped.
    pub(super) fn error_for_remade(&mut self, msg: &[u8]) -> Option<Bytes> {
        let now = self.flight.group_answered_now();
        let r = self
            .named
            .sql
            .as_mut()?
            .remake
            .take_if(|r| r.group <= now)?;
        if r.group < now {
            return None;
        }
        let code = backend::error_field(msg, b'C');
        match code {
            Some("26000") => r.error,
            Some("25P02") if r.lone && !r.saved => r.error,
            _ => None,
        }
    }

    fn count_made_again(&self) {
        self.named.count(|c| &c.made_again);
    }
}
