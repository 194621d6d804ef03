//! Parse and Describe answered here (transaction pooling). A Parse (with
//! its Describe, and a Sync or Flush) of a read, a write or a transaction's
//! control from a session that holds no server
//! connection is answered from its pool's descriptions (`described.rs`),
//! when the server has described the same text and parameter types there
//! before. The client's statement is then "told": before a message uses
//! it on a server, a Describe of it goes up in the same write, and its
//! answer is compared with what the client was told. A difference is
//! PostgreSQL's own error for a statement whose result type changed
//! (0A000), never rows of another shape.
//!
//! When the statement is a pure read and its use starts a group at rest
//! (nothing run in it yet: a Parse of the same statement may come first),
//! and the group is only that statement's portal run (Bind, Describe,
//! Execute, Sync), its answers can be dropped and replaced by the error,
//! so all goes in one write. Anything else (a write always: it must not
//! run on a statement that changed) waits for the
//! Describe's answer (a Flush, one round trip) before it goes on, or fails
//! at the server by a statement that fails, so that the server skips to
//! the Sync and aborts what PostgreSQL would have aborted.
//!
//! A Parse alone with its Sync tells the client no shape: it is answered
//! when the pool's server parsed the text before (`parsed.rs`), and needs
//! no check.

use std::{collections::VecDeque, sync::Arc};

use bytes::{Bytes, BytesMut};
use onetrip_planner::{
    analysis::Analysis,
    classify::{Reset, StatementClass},
};
use rustc_hash::FxHashMap;

use super::described::{Description, Descriptions};
use super::*;

mod alone;
mod parsed;

/// PostgreSQL's text for a prepared statement whose rows changed shape.
const STALE: &str = "cached plan must not change result type";

/// A session's statements told here, and what it is learning.
#[derive(Default)]
pub struct Told {
    /// The pool's descriptions (transaction pooling only).
    pub(in crate::protocol) cache: Option<Arc<Descriptions>>,
    /// What the session's statements are told and taught: made at their
    /// first use, and let go once it is empty (`let_go_if_empty`), so an
    /// idle client holds none.
    more: Option<Box<More>>,
    /// The client's answers are looked at: learned from, or dropped.
    pub(super) watch: bool,
    /// A told statement proved changed in a group sent whole: the client's
    /// answers are dropped up to its ReadyForQuery, the error put before it.
    drop_to_ready: bool,
    /// The client's message waits for a check's answer.
    pub(super) held: bool,
    /// That message's statement proved changed: it fails.
    stale_next: bool,
    /// The message being handled uses a told statement: whether its check
    /// goes in the same write.
    next_use: Option<bool>,
    /// As the message being handled came, the server was idle outside a
    /// block, owed the client no ReadyForQuery, and ran nothing of the
    /// client's group so far: an error now would undo nothing.
    at_rest: bool,
    /// An Execute (or the like) went up in the client's group.
    group_ran: bool,
    /// A Parse and Describe ending in a Flush were answered here: the
    /// client's group goes on, and the same Parse again keeps what it was
    /// told (asyncpg without a statement cache parses twice).
    open: bool,
    /// DDL went up: the descriptions are dropped again once it is over.
    ddl_pending: bool,
}

#[derive(Default)]
struct More {
    /// The client's statements answered here, by name: their key in the
    /// cache and what the client was told.
    told: FxHashMap<String, Entry>,
    /// A Parse (and Describe) on their way whose description may be kept.
    learn: Option<Learn>,
    /// Describes of told statements on their way, in order.
    checks: VecDeque<Check>,
    /// Parses on their way whose success the pool may learn.
    parsed: parsed::Learning,
}

impl Told {
    fn more(&mut self) -> &mut More {
        self.more.get_or_insert_with(Box::default)
    }

    fn told(&self) -> Option<&FxHashMap<String, Entry>> {
        self.more.as_deref().map(|m| &m.told)
    }

    fn forget(&mut self, name: &str) {
        if let Some(m) = self.more.as_deref_mut() {
            m.told.remove(name);
        }
    }

    /// The checks on their way, if any were ever sent.
    fn checks(&mut self) -> Option<&mut VecDeque<Check>> {
        self.more.as_deref_mut().map(|m| &mut m.checks)
    }

    fn learning(&self) -> Option<&Learn> {
        self.more.as_deref().and_then(|m| m.learn.as_ref())
    }

    fn stop_learning(&mut self) {
        if let Some(m) = self.more.as_deref_mut() {
            m.learn = None;
        }
    }

    /// A quiet session lets go of what it holds here when nothing is told,
    /// learned or checked (what its Parses taught is only remembered to
    /// spare a lock: it is learned again).
    pub(in crate::protocol) fn let_go_if_empty(&mut self) {
        if self.more.as_deref().is_some_and(|m| {
            m.told.is_empty() && m.learn.is_none() && m.checks.is_empty() && m.parsed.is_idle()
        }) {
            self.more = None;
        }
    }
}

struct Learn {
    name: String,
    key: Bytes,
    generation: u64,
    described: bool,
    params: Option<Bytes>,
    row: Option<Bytes>,
}

/// What a told statement's name stands for.
struct Entry {
    /// The Parse past its name (the key in the pool's descriptions).
    key: Bytes,
    told: Description,
    /// Parsed again by the client in the group it was told in: a
    /// Describe of it now tells the client anew.
    reparsed: bool,
    /// A pure read: a use that begins a group may go in one write with its
    /// check, its answers dropped if the check fails. Anything else waits
    /// for its check: it must not run on a statement that changed.
    read: bool,
}

struct Check {
    name: String,
    /// Sent in one write with the client's group (else held for).
    fast: bool,
    group: u64,
    params: Option<Bytes>,
}

/// Pure reads only: a statement whose answers may be dropped, or whose run
/// may be replaced by an error, with no one the wiser.
pub(super) fn pure_read(a: &Analysis) -> bool {
    a.class.class == StatementClass::Read
        && a.class.statement_count == 1
        && !a.class.copy
        && a.pins.pin.is_none()
        && a.pins.reset == Reset::None
}

/// The statement a Bind or Describe of a statement names.
pub(super) fn used_name(t: u8, msg: &[u8]) -> Option<&str> {
    match t {
        tag::BIND => frontend::bind(msg).map(|(_, s)| s),
        tag::DESCRIBE => match frontend::target(msg) {
            Some((b'S', n)) => Some(n),
            _ => None,
        },
        _ => None,
    }
}

/// What follows a told statement's Bind (or Describe) up to its Sync runs
/// nothing but that Bind's portal: its answers may all be dropped.
fn only_its_portal(chunk: &[u8], t: u8, msg: &[u8]) -> bool {
    let portal = match t {
        tag::BIND => frontend::bind(msg).map(|(p, _)| p),
        _ => None,
    };
    for (t, m) in frame::messages(chunk) {
        let ok = match t {
            tag::SYNC => return true,
            tag::DESCRIBE => {
                portal.is_some()
                    && frontend::target(m).is_some_and(|(k, n)| k == b'P' && Some(n) == portal)
            }
            tag::EXECUTE => {
                portal.is_some() && frontend::execute(m).is_some_and(|(n, _)| Some(n) == portal)
            }
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    false
}

impl Protocol {
    /// The session's pool keeps descriptions.
    pub fn describe_with(&mut self, cache: Arc<Descriptions>) {
        self.told_here.cache = Some(cache);
    }

    /// The client's settings leave name resolution as the pool's defaults
    /// make it: a description learned by another client holds for it.
    pub(in crate::protocol) fn leaves_search_path_alone(&self) -> bool {
        !self.own_defaults
            && self.pin.is_none()
            && !self
                .sets
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("search_path"))
    }

    /// Before a client message is handled: a Parse, Bind or Describe sees
    /// whether the session was at rest, and a use of a told statement is
    /// noted, with whether its check may go in the same write.
    pub(super) fn before_told(&mut self, chunk: &Bytes, at: usize, t: u8, end: usize) {
        if self.told_here.cache.is_none() || !matches!(t, tag::PARSE | tag::BIND | tag::DESCRIBE) {
            return;
        }
        self.told_here.at_rest = self.txn_status == b'I'
            && self.txn.held.is_none()
            && !self.told_here.group_ran
            && !self.flight.begin_on_its_way()
            && !self.flight.awaiting_client_ready()
            && !self.flight.skipping()
            && !self.in_copy;
        if self.told_here.told().is_none_or(|t| t.is_empty()) || self.flight.skipping() {
            // A message the server skips needs no check.
            return;
        }
        let msg = &chunk[at..end];
        let told = used_name(t, msg).and_then(|n| self.told_here.told()?.get(n));
        if let Some(e) = told {
            if t == tag::DESCRIBE && e.reparsed {
                // The server's answer tells the client anew.
                return;
            }
            let fast = e.read && self.told_here.at_rest && only_its_portal(&chunk[end..], t, msg);
            self.told_here.next_use = Some(fast);
        }
    }

    /// A client message on its way up (after its statement fixes): what it
    /// does to the told statements and to what is being learned. True when
    /// it must not go up now: held for its check, or failed here.
    pub(super) fn follow_told(
        &mut self,
        t: u8,
        msg: &Bytes,
        sql: Option<&Sql>,
        to_up: &mut WriteQueue,
        to_client: &mut WriteQueue,
    ) -> bool {
        if self.told_here.cache.is_none() {
            return false;
        }
        match t {
            tag::PARSE => {
                if frontend::parse_name(msg) == Some("") {
                    let key = frontend::parse_key(msg);
                    let open = self.told_here.open;
                    if let Some(m) = self.told_here.more.as_deref_mut() {
                        match m.told.get_mut("") {
                            // The same statement again, in the group it was
                            // told in: the client goes by what it was told.
                            Some(e) if open && key == Some(&e.key[..]) => e.reparsed = true,
                            _ => {
                                m.told.remove("");
                            }
                        }
                    }
                }
                self.learn_from(msg, sql);
                self.learn_parse(msg, sql);
            }
            tag::QUERY => {
                self.told_here.forget("");
                self.told_here.stop_learning();
                self.told_here.group_ran = false;
                self.told_here.open = false;
            }
            tag::CLOSE => {
                if let Some((b'S', n)) = frontend::target(msg) {
                    self.told_here.forget(n);
                }
                self.told_here.stop_learning();
            }
            tag::DESCRIBE => {
                let target = frontend::target(msg);
                if let Some(m) = self.told_here.more.as_deref_mut() {
                    if let Some((b'S', n)) = target
                        && m.told.get(n).is_some_and(|e| e.reparsed)
                    {
                        m.told.remove(n);
                    }
                    if let Some(l) = m.learn.as_mut()
                        && !l.described
                    {
                        match target {
                            Some((b'S', n)) if n == l.name => l.described = true,
                            _ => m.learn = None,
                        }
                    }
                }
            }
            tag::SYNC => {
                self.told_here.group_ran = false;
                self.told_here.open = false;
            }
            tag::FLUSH => {}
            _ => {
                if matches!(t, tag::EXECUTE | tag::FUNCTION_CALL) {
                    self.told_here.group_ran = true;
                }
                if self.told_here.learning().is_some_and(|l| !l.described) {
                    self.told_here.stop_learning();
                }
            }
        }
        self.rewatch();
        self.use_told(t, msg, to_up, to_client)
    }

    /// A message that uses a told statement (noted by `before_told`): its
    /// check goes up ahead of it; true when it must wait for the answer,
    /// or failed here.
    fn use_told(
        &mut self,
        t: u8,
        msg: &Bytes,
        to_up: &mut WriteQueue,
        to_client: &mut WriteQueue,
    ) -> bool {
        if self.told_here.stale_next {
            self.told_here.stale_next = false;
            self.told_here.next_use = None;
            self.fail_stale(to_up, to_client);
            return true;
        }
        let Some(fast) = self.told_here.next_use.take() else {
            return false;
        };
        let Some(name) = used_name(t, msg) else {
            return false;
        };
        let mut out = BytesMut::new();
        crate::wire::write::describe(&mut out, b'S', self.server_name(name));
        self.told_here.more().checks.push_back(Check {
            name: name.to_owned(),
            fast,
            group: self.flight.group_now(),
            params: None,
        });
        self.send_own_up(to_up, out.freeze(), Own::Check, false);
        if !fast {
            self.send_own_up(to_up, super::own::flush_frame(), Own::Check, true);
            self.told_here.held = true;
            return true;
        }
        false
    }

    /// A Parse at rest of a read, a write or a transaction's control
    /// (`parse_only_ok`), by a session whose settings leave name
    /// resolution alone: its description, when the server's Describe
    /// answers in this group, may be kept for the pool.
    fn learn_from(&mut self, msg: &Bytes, sql: Option<&Sql>) {
        if self.told_here.learning().is_some_and(|l| l.described) {
            // Its answers are on their way, ahead of this one's.
            return;
        }
        self.told_here.stop_learning();
        let (Some(cache), Some(sql)) = (&self.told_here.cache, sql) else {
            return;
        };
        let ok = self.told_here.at_rest
            && self.leaves_search_path_alone()
            && !may_route(sql.words())
            && sql.analysis().is_some_and(|a| parsed::parse_only_ok(a));
        let (Some(name), Some(key)) = (frontend::parse_name(msg), frontend::parse_key(msg)) else {
            return;
        };
        if ok {
            self.told_here.more().learn = Some(Learn {
                name: name.to_owned(),
                key: msg.slice_ref(key),
                generation: cache.generation(),
                described: false,
                params: None,
                row: None,
            });
        }
    }

    fn rewatch(&mut self) {
        self.told_here.watch =
            self.told_here.drop_to_ready || self.told_here.learning().is_some_and(|l| l.described);
    }

    /// The held message's statement changed: the client hears PostgreSQL's
    /// error for it, and a Parse that fails goes up in its place, so that
    /// the server skips to the Sync and aborts the transaction as
    /// PostgreSQL would have (its own error is not the client's).
    fn fail_stale(&mut self, to_up: &mut WriteQueue, to_client: &mut WriteQueue) {
        Counters::add(&self.info.counters.errors, 1);
        let err = crate::wire::write::error(crate::wire::write::Severity::Error, "0A000", STALE);
        if let Some(now) = self.flight.local(err) {
            self.emit(to_client, now);
        }
        let mut out = BytesMut::new();
        crate::wire::write::parse(&mut out, "onetrip_stale", "onetrip stale statement");
        self.send_own_up(to_up, out.freeze(), Own::Stale, false);
    }

    /// DDL (or what may hide it) went up: the pool's descriptions go, now
    /// and again once its transaction is over.
    pub(super) fn ddl_seen(&mut self) {
        if let Some(c) = &self.told_here.cache {
            c.clear();
            self.told_here.ddl_pending = true;
        }
    }

    /// The client's statement `name` was answered here and not yet
    /// checked on a server.
    pub(super) fn unchecked_told(&self, name: &str) -> bool {
        self.told_here.told().is_some_and(|t| t.contains_key(name))
    }

    /// An answer to a check of a told statement; true when it goes to the
    /// client (an error: the server's own answer for the message that used
    /// the statement, which it then skips).
    pub(super) fn on_check_answer(&mut self, t: u8, msg: &Bytes) -> bool {
        match t {
            tag::PARAMETER_DESCRIPTION => {
                if let Some(c) = self.told_here.checks().and_then(|c| c.front_mut()) {
                    c.params = Some(msg.clone());
                }
                false
            }
            tag::ROW_DESCRIPTION | tag::NO_DATA => {
                let Some(c) = self.told_here.checks().and_then(|c| c.pop_front()) else {
                    return false;
                };
                let params = c.params.as_deref().unwrap_or_default();
                let same = self
                    .told_here
                    .told()
                    .and_then(|t| t.get(&c.name))
                    .map(|e| (e.told.same_as(params, msg), e.key.clone()));
                match same {
                    // The server's statement is what the client was told.
                    Some((true, _)) => self.told_here.forget(&c.name),
                    Some((false, key)) => {
                        if let Some(cache) = &self.told_here.cache {
                            Counters::add(&cache.changed, 1);
                            cache.forget(&key);
                        }
                        match c.fast {
                            true => self.told_here.drop_to_ready = true,
                            false => self.told_here.stale_next = true,
                        }
                    }
                    None => {}
                }
                if !c.fast {
                    self.told_here.held = false;
                }
                self.rewatch();
                false
            }
            tag::ERROR_RESPONSE => {
                if let Some(c) = self.told_here.checks().and_then(|c| c.pop_front())
                    && !c.fast
                {
                    self.told_here.held = false;
                }
                Counters::add(&self.info.counters.errors, 1);
                true
            }
            _ => false,
        }
    }

    /// An answer to the client's messages, while `watch` or anything is
    /// told: learned from, or dropped; true when it goes on to the client.
    pub(super) fn told_client_answer(
        &mut self,
        t: u8,
        msg: &Bytes,
        to_client: &mut WriteQueue,
    ) -> bool {
        if self.told_here.cache.is_none() {
            return true;
        }
        if self.told_here.drop_to_ready {
            match t {
                tag::READY_FOR_QUERY => {
                    self.told_here.drop_to_ready = false;
                    self.rewatch();
                    Counters::add(&self.info.counters.errors, 1);
                    let err = crate::wire::write::error(
                        crate::wire::write::Severity::Error,
                        "0A000",
                        STALE,
                    );
                    self.emit(to_client, err);
                }
                tag::NOTIFICATION | tag::PARAMETER_STATUS => {}
                _ => return false,
            }
        }
        if let Some(m) = self.told_here.more.as_deref_mut()
            && let Some(l) = m.learn.as_mut().filter(|l| l.described)
        {
            match t {
                tag::PARAMETER_DESCRIPTION if l.params.is_none() => l.params = Some(msg.clone()),
                tag::ROW_DESCRIPTION | tag::NO_DATA if l.params.is_some() && l.row.is_none() => {
                    l.row = Some(msg.clone())
                }
                tag::ERROR_RESPONSE => m.learn = None,
                _ => {}
            }
        }
        if t == tag::READY_FOR_QUERY {
            self.on_told_ready(backend::ready_status(msg));
        }
        true
    }

    /// The client's ReadyForQuery: what was learned is kept, checks its
    /// group skipped are dropped, DDL that is over drops the descriptions
    /// again.
    fn on_told_ready(&mut self, status: u8) {
        let Some(cache) = self.told_here.cache.clone() else {
            return;
        };
        if let Some(l) = self
            .told_here
            .more
            .as_deref_mut()
            .and_then(|m| m.learn.take())
            && status == b'I'
            && let (Some(params), Some(row)) = (l.params, l.row)
        {
            cache.learned(l.generation, l.key, Description { params, row });
        }
        let done = self.flight.group_answered_now();
        if let Some(checks) = self.told_here.checks() {
            checks.retain(|c| c.group >= done);
        }
        if status == b'I' && std::mem::take(&mut self.told_here.ddl_pending) {
            cache.clear();
        }
        self.rewatch();
    }

    /// An error came while a message is held for its check: the server now
    /// skips to a Sync, the check included, so the message goes on (to be
    /// skipped too).
    pub(super) fn told_error(&mut self) {
        if self.told_here.held && !self.flight.owes(Own::Check) {
            self.told_here.held = false;
            if let Some(checks) = self.told_here.checks() {
                checks.retain(|c| c.fast);
            }
        }
    }

    /// The client closed `name` without the server (`close_alone`).
    pub(super) fn forget_told(&mut self, name: &str) {
        self.told_here.forget(name);
    }
}
