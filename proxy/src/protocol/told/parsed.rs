//! Parses the server accepted, learned for the pool: a later Parse of the
//! same text and parameter types, alone with its Sync, is answered here
//! (`alone.rs`) with no server connection, for any statement that takes
//! nothing from its Parse but the statement (not a pure read only). The
//! client is told only ParseComplete; its own Parse goes to the server in
//! the same write as the first message that uses it (`named.rs`, or the
//! unnamed statement's fix), so a text that no longer parses fails there,
//! as a dedicated connection's statement fails after DDL.

use std::hash::{BuildHasher, BuildHasherDefault};

use bytes::Bytes;
use onetrip_planner::{
    analysis::Analysis,
    classify::{Reset, StatementClass},
};
use rustc_hash::{FxHashSet, FxHasher};

use super::pure_read;
use crate::protocol::{cypher::may_route, *};

/// Most Parses of one session waiting for their group's end to be learned:
/// a longer pipeline teaches the rest another time.
const MAX_PENDING: usize = 64;
/// Most texts a session remembers having taught its pool.
const MAX_TAUGHT: usize = 1024;

/// What a session is learning of its Parses, and what it has taught.
#[derive(Default)]
pub(super) struct Learning {
    /// Parses sent up, by group, with the generation of the pool's
    /// descriptions when they went.
    pending: Vec<Pending>,
    /// Hashes of texts this session's Parses taught the pool (in
    /// `generation`): sent again, they take no lock.
    taught: FxHashSet<u64>,
    generation: u64,
}

impl Learning {
    /// Nothing on its way.
    pub(super) fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }
}

struct Pending {
    group: u64,
    generation: u64,
    key: Bytes,
    hash: u64,
}

/// A statement whose Parse may be answered with ParseComplete alone: a
/// read, a write or a transaction's control, one statement, no COPY,
/// nothing that pins or that the pool's DDL watch must see when it is
/// parsed (DDL, `DO`, calls of functions not known to be free of side
/// effects). Settings are left to the server: their Parse is watched.
pub(super) fn parse_only_ok(a: &Analysis) -> bool {
    pure_read(a)
        || (a.class.statement_count == 1
            && !a.class.copy
            && matches!(
                a.class.class,
                StatementClass::MaybeWrite
                    | StatementClass::Write
                    | StatementClass::TransactionControl
            )
            && a.pins.pin.is_none()
            && !matches!(a.pins.reset, Reset::Full(_)))
}

fn hash(key: &[u8]) -> u64 {
    BuildHasherDefault::<FxHasher>::default().hash_one(key)
}

impl Protocol {
    /// A client's Parse on its way up: once its group ends with no error,
    /// the pool learns that its text parses.
    pub(super) fn learn_parse(&mut self, msg: &Bytes, sql: Option<&Sql>) {
        let Some(cache) = &self.told_here.cache else {
            return;
        };
        let Some(sql) = sql else {
            return;
        };
        let pending = (self.told_here.more.as_deref()).map_or(0, |m| m.parsed.pending.len());
        if pending >= MAX_PENDING
            || self.told_here.ddl_pending
            // Skipped by the server: it parses nothing.
            || self.flight.skipping()
            // It may parse under another search_path than the pool's.
            || self.settings.wants_search_path()
            || !self.leaves_search_path_alone()
            || may_route(sql.words())
            || !sql.analysis().is_some_and(|a| parse_only_ok(a))
        {
            return;
        }
        let Some(key) = frontend::parse_key(msg) else {
            return;
        };
        let generation = cache.generation();
        let l = &mut self.told_here.more().parsed;
        if l.generation != generation {
            l.taught.clear();
            l.generation = generation;
        }
        let hash = hash(key);
        if l.taught.contains(&hash) {
            return;
        }
        l.pending.push(Pending {
            group: self.flight.group_now(),
            generation,
            key: msg.slice_ref(key),
            hash,
        });
    }

    /// An ErrorResponse or ReadyForQuery came (whoever's): the Parses of a
    /// group that failed are not learned, those of a group that ended
    /// without an error are.
    pub(in crate::protocol) fn on_parse_answer(&mut self, t: u8) {
        if (self.told_here.more.as_deref()).is_none_or(|m| m.parsed.pending.is_empty()) {
            return;
        }
        let now = self.flight.group_answered_now();
        match t {
            tag::ERROR_RESPONSE => {
                (self.told_here.more().parsed.pending).retain(|p| p.group != now)
            }
            tag::READY_FOR_QUERY => {
                let Some(cache) = self.told_here.cache.clone() else {
                    return;
                };
                let l = &mut self.told_here.more().parsed;
                let done = l.pending.iter().take_while(|p| p.group < now).count();
                let mut at = 0;
                while at < done {
                    // One lock for each run of one generation (usually all).
                    let g = l.pending[at].generation;
                    let run = l.pending[at..done]
                        .iter()
                        .take_while(|p| p.generation == g)
                        .count();
                    let keys = l.pending[at..at + run].iter().map(|p| &p.key);
                    cache.parsed(g, keys);
                    if g == l.generation {
                        if l.taught.len() + run > MAX_TAUGHT {
                            l.taught.clear();
                        }
                        l.taught
                            .extend(l.pending[at..at + run].iter().map(|p| p.hash));
                    }
                    at += run;
                }
                l.pending.drain(..done);
            }
            _ => {}
        }
    }
}
