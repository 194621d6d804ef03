//! What the upstream owes the session, in order.
//!
//! Every message that goes upstream and gets an answer is an item here:
//! each extended-protocol message (Parse, Bind, Describe, Execute, Close)
//! ends with one completion (ParseComplete, BindComplete, CloseComplete,
//! RowDescription or NoData, CommandComplete, EmptyQueryResponse or
//! PortalSuspended) or an error; each Sync, Query and FunctionCall with a
//! ReadyForQuery. After an error in an extended-protocol message the
//! server skips everything up to the next Sync, Queries included, and so
//! does this queue. So the session always knows whose an answer is (the
//! client's, or a statement the proxy sent on its own), whether anything
//! sent is still unanswered, and which prepared statements the server
//! holds: a Parse is recorded at its ParseComplete, never before.
//!
//! A COPY FROM STDIN reads what follows it as its data, up to a CopyDone
//! or CopyFail, and ignores the Syncs and Flushes it reads there (clients
//! such as libpq and tokio-postgres send a Sync right after the COPY's
//! Execute, before its data); any other message ends the COPY with an
//! error and gets no answer of its own. Which messages those are is known
//! only at the CopyInResponse, so they are taken out of the queue then.

use std::collections::VecDeque;

use super::text::{Prepared, Sql};
use bytes::Bytes;
use onetrip_planner::classify::SessionSet;

use crate::wire::{backend, tag};

/// Statements the proxy sends on its own; their answers are not the
/// client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    /// The coalescer's write probe (its answers are held with the batch's).
    Probe,
    /// The statement that takes a snapshot after an early Sync.
    Snapshot,
    /// A Close sent before a batch runs again after a failed probe.
    Rerun,
    /// The query that learns the session's settings.
    Settings,
    /// The AGE catalog fetch, or the compiled statement in verify mode.
    Cypher,
    /// A BEGIN answered here, sent with the transaction's first statement
    /// that needs the server.
    Begin,
    /// A statement that fails on purpose, after a held BEGIN of a
    /// transaction whose lazy read failed: the block is then aborted at the
    /// server, which answers what follows as it would have.
    Abort,
    /// What makes a pooled connection the client's (its settings and
    /// libraries), sent ahead of the client's first message on it.
    Prepare,
    /// The primary's WAL position, asked right behind a client's write
    /// (`replica.rs`).
    Lsn,
    /// A Describe of a statement whose Parse was answered here, compared
    /// with what the client was told (`told/`).
    Check,
    /// A statement that fails in place of one whose statement changed, so
    /// that the server skips to the Sync as PostgreSQL would have.
    Stale,
    /// A Describe of the statement a PREPARE alone just made, and its
    /// Sync: its parameter types make it again elsewhere (`sql_prepared.rs`).
    Types,
}

/// Whose an answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Client,
    Own(Own),
}

impl Owner {
    fn of(own: Option<Own>) -> Owner {
        own.map_or(Owner::Client, Owner::Own)
    }
}

/// What a message sent upstream does to the prepared statements.
pub enum Op {
    None,
    /// A Parse of (name, statement).
    Parse(String, Sql),
    /// An Execute or Query whose text holds SQL `PREPARE`s and
    /// `DEALLOCATE`s, in order.
    Prepare(Vec<SqlOp>),
    /// An Execute or Query that loads these libraries.
    Load(Vec<String>),
    /// An Execute or Query of a `SET` or `RESET` that follows its client
    /// (transaction pooling), and its text.
    Set(SessionSet, String),
}

/// A SQL `PREPARE` or `DEALLOCATE`, done at its CommandComplete: one that
/// fails, or never runs (an earlier statement failed, or the transaction
/// block had), changes nothing. Until then a message sent after it finds
/// the statements as if it had run (`Flight::statement`).
#[derive(Debug)]
pub enum SqlOp {
    /// `None` once something sent after it dropped the name.
    Prepare(Option<(String, Sql)>),
    Deallocate(String),
    DeallocateAll,
}

#[derive(Debug)]
enum Item {
    /// An extended-protocol message, and what its completion records.
    Ext {
        own: Option<Own>,
        records: Records,
        at: CopyMark,
    },
    /// A Sync, Query or FunctionCall: answered through ReadyForQuery.
    Ready {
        own: Option<Own>,
        sync: bool,
        records: Records,
        /// A lazy read's: the client is told the status of its transaction
        /// block (`T`, or `E` when it failed), not the server's.
        lazy: bool,
        failed: bool,
        at: CopyMark,
    },
    /// An answer given here, which goes to the client once everything sent
    /// before it is answered.
    Local(Bytes),
}

impl Item {
    fn copy_mark(&self) -> Option<CopyMark> {
        match self {
            Item::Ext { at, .. } | Item::Ready { at, .. } => Some(*at),
            Item::Local(_) => None,
        }
    }
}

/// The COPY messages sent before a message: whether the server may read
/// it as a COPY's data (`Flight::copy_began`).
#[derive(Debug, Default, Clone, Copy)]
struct CopyMark {
    /// CopyDone and CopyFail messages.
    ends: u64,
    /// CopyData messages.
    data: u64,
    /// CopyData messages before the last CopyDone or CopyFail.
    data_at_end: u64,
}

/// A COPY FROM STDIN the server runs, from its CopyInResponse until its
/// CommandComplete or error.
#[derive(Debug)]
struct CopyIn {
    /// The server reads what is sent now as the COPY's data: its CopyDone
    /// or CopyFail has not gone up.
    open: bool,
    /// CopyData messages sent before the COPY's first.
    data_from: u64,
    /// A message went up after some of the COPY's data: the server ignores
    /// it (a Sync) or fails on it (any other) if the COPY got that far,
    /// and answers or skips it as usual if the COPY failed before, which
    /// only the server knows.
    unsure: bool,
}

/// Statements a message makes once the server accepts them; an entry is
/// `None` once something sent after it dropped the name.
#[derive(Debug, Default)]
enum Records {
    #[default]
    Nothing,
    Parse(Option<(String, Sql)>),
    /// SQL PREPAREs and DEALLOCATEs, done one by one at each CommandComplete
    /// `PREPARE`, `DEALLOCATE` or `DEALLOCATE ALL`.
    Prepare(VecDeque<SqlOp>),
    /// A LOAD, done at its CommandComplete `LOAD`.
    Load(Vec<String>),
    /// A `SET` that follows its client, done at its CommandComplete and in
    /// force once its group's transaction commits.
    Set(Option<(SessionSet, String)>),
}

impl Records {
    fn from(op: Op) -> Records {
        match op {
            Op::None => Records::Nothing,
            Op::Parse(name, sql) => Records::Parse(Some((name, sql))),
            Op::Prepare(list) => Records::Prepare(list.into()),
            Op::Load(libs) => Records::Load(libs),
            Op::Set(op, text) => Records::Set(Some((op, text))),
        }
    }

    fn entries(&mut self) -> impl Iterator<Item = &mut Option<(String, Sql)>> {
        let (one, many) = match self {
            Records::Nothing | Records::Load(_) | Records::Set(_) => (None, None),
            Records::Parse(p) => (Some(p), None),
            Records::Prepare(list) => (None, Some(list.iter_mut())),
        };
        let prepares = many.into_iter().flatten().filter_map(|op| match op {
            SqlOp::Prepare(p) => Some(p),
            SqlOp::Deallocate(_) | SqlOp::DeallocateAll => None,
        });
        one.into_iter().chain(prepares)
    }
}

/// Counts of kinds of items in the queue, kept as items come and go so
/// that the questions asked at every message cost no walk of the queue.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    /// Sync, Query and FunctionCall items.
    readies: usize,
    /// The client's items (not local answers).
    client: usize,
    /// The client's Sync, Query and FunctionCall items.
    client_readies: usize,
    /// Held BEGINs and aborts of the proxy's own.
    begins: usize,
}

impl Tally {
    fn count(&mut self, item: &Item, add: bool) {
        let (own, ready) = match item {
            Item::Ext { own, .. } => (*own, false),
            Item::Ready { own, .. } => (*own, true),
            Item::Local(_) => return,
        };
        let n = |c: &mut usize, yes: bool| {
            if yes {
                if add { *c += 1 } else { *c -= 1 }
            }
        };
        n(&mut self.readies, ready);
        n(&mut self.client, own.is_none());
        n(&mut self.client_readies, own.is_none() && ready);
        n(
            &mut self.begins,
            matches!(own, Some(Own::Begin | Own::Abort)),
        );
    }
}

#[derive(Debug, Default)]
pub struct Flight {
    items: VecDeque<Item>,
    tally: Tally,
    /// The server skips what comes until a Sync, and none is on its way.
    skipping: bool,
    prepared: Prepared,
    /// A LOAD of AGE's library has completed in this session.
    pub age_loaded: bool,
    /// Libraries loaded by LOADs completed, not yet taken.
    loaded: Vec<String>,
    /// `SET`s completed in the group answered now (`Records::Set`).
    done_sets: Vec<(SessionSet, String)>,
    /// ... and those of groups that ended, not yet taken.
    ended_sets: Vec<(SessionSet, String)>,
    /// The status to tell the client in place of the last ReadyForQuery's,
    /// when it was a lazy read's.
    ready_as: Option<u8>,
    /// ReadyForQuery messages owed in all, and received: a message sent
    /// when `readies_sent` was n is answered in the n-th group, whose
    /// error comes when `readies_done` is n.
    readies_sent: u64,
    readies_done: u64,
    /// The COPY messages sent so far.
    copy_sent: CopyMark,
    /// A COPY FROM STDIN under way at the server.
    copy: Option<CopyIn>,
    /// COPYs the first item has begun (a Query may run several).
    front_copies: u64,
    /// A COPY failed with messages among its data that it may or may not
    /// have read as data: what the server owes can't be told any more.
    lost: bool,
}

/// Most spare lists a thread keeps, and the longest it keeps.
const MOST_SPARE_ITEMS: usize = 256;
const MOST_SPARE_CAPACITY: usize = 64;

thread_local! {
    /// Lists of what is in flight, empty, that pooled sessions gave back
    /// between transactions (`Flight::rest`).
    static SPARE_ITEMS: std::cell::RefCell<Vec<VecDeque<Item>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Flight {
    /// Gives back the room of the lists that are empty (a quiet session's).
    pub fn compact(&mut self) {
        if self.items.is_empty() {
            self.items = VecDeque::new();
        }
        if self.done_sets.is_empty() {
            self.done_sets = Vec::new();
        }
        if self.ended_sets.is_empty() {
            self.ended_sets = Vec::new();
        }
    }

    /// A message of type `t` went upstream, the client's or (`own`) the
    /// proxy's. False when the server reads it as a COPY's data: ignored
    /// (a Sync), or the COPY's end (any other message), not a message of
    /// its own.
    pub fn sent(&mut self, t: u8, own: Option<Own>, op: Op) -> bool {
        match t {
            tag::COPY_DATA => self.copy_sent.data += 1,
            tag::COPY_DONE | tag::COPY_FAIL => {
                self.copy_sent.ends += 1;
                self.copy_sent.data_at_end = self.copy_sent.data;
                if let Some(c) = &mut self.copy {
                    c.open = false;
                }
            }
            tag::FLUSH => {}
            _ if self.copy.as_ref().is_some_and(|c| c.open) => {
                let data = self.copy_sent.data;
                if let Some(c) = &mut self.copy {
                    c.unsure |= data > c.data_from;
                    c.open = t == tag::SYNC;
                }
                return false;
            }
            tag::SYNC => {
                self.skipping = false;
                self.push_ready(own, true, op);
            }
            // Skipped by the server: no answer will come.
            _ if self.skipping => {}
            tag::QUERY | tag::FUNCTION_CALL => self.push_ready(own, false, op),
            tag::PARSE | tag::BIND | tag::DESCRIBE | tag::EXECUTE | tag::CLOSE => {
                self.push(Item::Ext {
                    own,
                    records: Records::from(op),
                    at: self.copy_sent,
                })
            }
            _ => {}
        }
        true
    }

    fn push_ready(&mut self, own: Option<Own>, sync: bool, op: Op) {
        self.readies_sent += 1;
        self.push(Item::Ready {
            own,
            sync,
            records: Records::from(op),
            lazy: false,
            failed: false,
            at: self.copy_sent,
        });
    }

    /// The Sync or Query just sent ends a lazy read.
    pub fn mark_lazy(&mut self) {
        if let Some(Item::Ready { lazy, .. }) = self.items.back_mut() {
            *lazy = true;
        }
    }

    /// An answer given here: returned to go to the client now when nothing
    /// sent is unanswered, else kept for its turn (`due_locals`).
    pub fn local(&mut self, answer: Bytes) -> Option<Bytes> {
        if self.items.is_empty() {
            return Some(answer);
        }
        self.items.push_back(Item::Local(answer));
        None
    }

    fn push(&mut self, item: Item) {
        self.tally.count(&item, true);
        if self.items.capacity() == 0 {
            self.items = SPARE_ITEMS
                .try_with(|s| s.borrow_mut().pop())
                .ok()
                .flatten()
                .unwrap_or_default();
        }
        self.items.push_back(item);
    }

    /// Between transactions of a pooled session: the list of what is in
    /// flight goes to the thread's spares, for the next transaction of
    /// any session here to take (`push`), rather than staying with an idle
    /// client.
    pub fn rest(&mut self) {
        if !self.items.is_empty() || self.items.capacity() == 0 {
            return;
        }
        let items = std::mem::take(&mut self.items);
        let _ = SPARE_ITEMS.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < MOST_SPARE_ITEMS && items.capacity() <= MOST_SPARE_CAPACITY {
                s.push(items);
            }
        });
    }

    /// Drops the first item, answered or skipped.
    fn pop(&mut self) {
        if let Some(item) = self.items.pop_front() {
            self.tally.count(&item, false);
        }
        self.front_copies = 0;
    }

    /// CopyInResponse: the first item runs a COPY FROM STDIN, which reads
    /// what went up after it, up to the CopyDone or CopyFail that ends it,
    /// as its data. The Syncs there are never answered; the first other
    /// message ends the COPY with an error, and what follows it is read as
    /// usual.
    fn copy_began(&mut self) {
        let Some(at) = self.items.front().and_then(Item::copy_mark) else {
            return;
        };
        self.front_copies += 1;
        let ends = at.ends + self.front_copies - 1;
        let (mut unsure, mut ended) = (false, false);
        let mut i = 1;
        while let Some(item) = self.items.get(i) {
            let Some(m) = item.copy_mark() else {
                i += 1;
                continue;
            };
            if m.ends != ends {
                break;
            }
            unsure |= m.data > at.data.max(m.data_at_end);
            let sync = matches!(item, Item::Ready { sync: true, .. });
            if let Some(item) = self.items.remove(i) {
                self.tally.count(&item, false);
            }
            if !sync {
                ended = true;
                break;
            }
            // What was sent after it belongs to the COPY's group, whose
            // answers come now.
            self.readies_done += 1;
        }
        self.copy = Some(CopyIn {
            open: !ended && self.copy_sent.ends == ends,
            data_from: at.data.max(self.copy_sent.data_at_end),
            unsure,
        });
    }

    /// The COPY under way ended (`t`: its CommandComplete or error, or a
    /// ReadyForQuery). A failure may have come before messages sent among
    /// its data, which the server then answers or skips as usual, or
    /// after them, which it read as data: it alone knows which.
    fn copy_ended(&mut self, t: u8) {
        if let Some(c) = self.copy.take() {
            self.lost |= t == tag::ERROR_RESPONSE && c.unsure;
        }
    }

    /// What the server owes can't be told: a COPY failed with messages
    /// among its data whose fate only the server knows.
    pub fn lost(&self) -> bool {
        self.lost
    }

    /// Extended-protocol messages await answers and no Sync is on its way:
    /// the server ends their group only at a Sync still to come (after a
    /// COPY that read the Sync sent with it as data).
    pub fn awaits_sync(&self) -> bool {
        !self.items.is_empty() && self.tally.readies == 0
    }

    /// The answers given here whose turn has come.
    pub fn due_locals(&mut self, out: &mut Vec<Bytes>) {
        while let Some(Item::Local(_)) = self.items.front() {
            if let Some(Item::Local(b)) = self.items.pop_front() {
                out.push(b);
            }
        }
    }

    /// Whether a local answer waits for its turn.
    pub fn has_due_locals(&self) -> bool {
        matches!(self.items.front(), Some(Item::Local(_)))
    }

    /// The status to tell the client in place of the ReadyForQuery just
    /// answered, when it ended a lazy read.
    pub fn take_ready_as(&mut self) -> Option<u8> {
        self.ready_as.take()
    }

    /// Syncs, Queries or FunctionCalls of the client's await their
    /// ReadyForQuery (the proxy's own may too).
    pub fn awaiting_client_ready(&self) -> bool {
        self.tally.client_readies > 0
    }

    /// Sent Syncs, Queries or FunctionCalls await their ReadyForQuery.
    pub fn awaiting_ready(&self) -> bool {
        self.tally.readies > 0
    }

    /// The server skips what comes until a Sync, after an error.
    pub fn skipping(&self) -> bool {
        self.skipping
    }

    /// ReadyForQuery messages owed.
    pub fn readies(&self) -> usize {
        self.tally.readies
    }

    /// The group (counted in ReadyForQuery messages) a message sent now
    /// belongs to.
    pub fn group_now(&self) -> u64 {
        self.readies_sent
    }

    /// The group whose answers come now: every earlier one has ended.
    pub fn group_answered_now(&self) -> u64 {
        self.readies_done
    }

    /// Nothing sent is unanswered.
    pub fn answered(&self) -> bool {
        self.items.is_empty()
    }

    /// Nothing the client sent is unanswered (the proxy's own statements
    /// may be).
    pub fn client_answered(&self) -> bool {
        self.tally.client == 0
    }

    /// A BEGIN of the proxy's own (held for the client) is on its way.
    pub fn begin_on_its_way(&self) -> bool {
        self.tally.begins > 0
    }

    /// Whose the next answer will be.
    pub fn next_owner(&self) -> Owner {
        match self.items.front() {
            Some(Item::Ext { own, .. } | Item::Ready { own, .. }) => Owner::of(*own),
            Some(Item::Local(_)) | None => Owner::Client,
        }
    }

    /// An answer of type `t` came (`msg`, the whole message, for the
    /// CommandComplete of a PREPARE); returns whose it is.
    pub fn on_answer(&mut self, t: u8, msg: &[u8]) -> Owner {
        if matches!(
            t,
            tag::NOTICE_RESPONSE | tag::NOTIFICATION | tag::PARAMETER_STATUS
        ) {
            // Not an answer to anything: the server says it when it will,
            // but for what a connection's preparation changes, which the
            // client must not hear of.
            return match self.next_owner() {
                o @ Owner::Own(Own::Prepare) if t != tag::NOTIFICATION => o,
                _ => Owner::Client,
            };
        }
        match t {
            tag::COPY_IN_RESPONSE => self.copy_began(),
            tag::COMMAND_COMPLETE | tag::ERROR_RESPONSE | tag::READY_FOR_QUERY => {
                self.copy_ended(t)
            }
            _ => {}
        }
        let prepared = &mut self.prepared;
        let Some(front) = self.items.front_mut() else {
            return Owner::Client;
        };
        match front {
            Item::Ext { own, records, .. } => {
                let owner = Owner::of(*own);
                match t {
                    tag::ERROR_RESPONSE => {
                        // The group's transaction is rolled back.
                        self.done_sets.clear();
                        if let Records::Parse(Some((name, _))) = records
                            && name.is_empty()
                        {
                            // PostgreSQL drops the unnamed statement before
                            // it parses the new one.
                            prepared.closed("");
                        }
                        self.pop();
                        self.skip_to_sync();
                        if let Some(Item::Ready {
                            lazy: true, failed, ..
                        }) = self.items.front_mut()
                        {
                            *failed = true;
                        }
                    }
                    tag::PARSE_COMPLETE
                    | tag::BIND_COMPLETE
                    | tag::CLOSE_COMPLETE
                    | tag::ROW_DESCRIPTION
                    | tag::NO_DATA
                    | tag::COMMAND_COMPLETE
                    | tag::EMPTY_QUERY
                    | tag::PORTAL_SUSPENDED => {
                        match records {
                            Records::Parse(p) => prepared.record(p.take()),
                            Records::Prepare(list) if t == tag::COMMAND_COMPLETE => {
                                sql_op_done(prepared, list, msg)
                            }
                            Records::Load(libs) if is_load_complete(t, msg) => {
                                loads_done(&mut self.loaded, &mut self.age_loaded, libs)
                            }
                            Records::Set(set) if t == tag::COMMAND_COMPLETE => {
                                self.done_sets.extend(set.take())
                            }
                            _ => {}
                        }
                        self.pop();
                    }
                    _ => {}
                }
                owner
            }
            Item::Ready {
                own,
                records,
                lazy,
                failed,
                ..
            } => {
                let owner = Owner::of(*own);
                match t {
                    tag::READY_FOR_QUERY => {
                        if *lazy {
                            self.ready_as = Some(if *failed { b'E' } else { b'T' });
                        }
                        self.ended_sets.append(&mut self.done_sets);
                        self.readies_done += 1;
                        self.pop();
                    }
                    tag::ERROR_RESPONSE => {
                        *failed = true;
                        self.done_sets.clear();
                    }
                    tag::COMMAND_COMPLETE if matches!(records, Records::Set(Some(_))) => {
                        if let Records::Set(set) = records {
                            self.done_sets.extend(set.take());
                        }
                    }
                    tag::COMMAND_COMPLETE if matches!(records, Records::Prepare(_)) => {
                        if let Records::Prepare(list) = records {
                            sql_op_done(prepared, list, msg);
                        }
                    }
                    _ if is_load_complete(t, msg) => {
                        if let Records::Load(libs) = records {
                            loads_done(&mut self.loaded, &mut self.age_loaded, libs);
                        }
                    }
                    _ => {}
                }
                owner
            }
            // Not an answer from the server: nothing is awaited from it.
            Item::Local(_) => Owner::Client,
        }
    }

    /// An extended-protocol message failed: the server skips to the Sync.
    fn skip_to_sync(&mut self) {
        while let Some(item) = self.items.front() {
            if matches!(item, Item::Ready { sync: true, .. } | Item::Local(_)) {
                return;
            }
            self.pop();
        }
        self.skipping = true;
    }

    /// The statement a Bind of `name` sent now runs: the last Parse or
    /// PREPARE of it still on its way (if that fails, so does the Bind),
    /// else the one the server has.
    pub fn statement(&self, name: &str) -> Option<&Sql> {
        for item in self.items.iter().rev() {
            let (Item::Ext { records, .. } | Item::Ready { records, .. }) = item else {
                continue;
            };
            match records {
                Records::Nothing | Records::Load(_) | Records::Set(_) | Records::Parse(None) => {}
                Records::Parse(Some((n, sql))) => {
                    if n == name {
                        return Some(sql);
                    }
                }
                Records::Prepare(list) => {
                    for op in list.iter().rev() {
                        match op {
                            SqlOp::Prepare(Some((n, sql))) if n == name => return Some(sql),
                            SqlOp::Deallocate(n) if n == name => return None,
                            SqlOp::DeallocateAll => return None,
                            _ => {}
                        }
                    }
                }
            }
        }
        self.prepared.get(name)
    }

    /// The libraries loaded since the last look.
    pub fn take_loaded(&mut self) -> Vec<String> {
        std::mem::take(&mut self.loaded)
    }

    /// Whether the last of the group's completed `SET`s and `RESET`s that
    /// touched the setting `name` was a RESET (or RESET ALL).
    pub fn reset_in_group(&self, name: &str) -> bool {
        let last = self.done_sets.iter().rev().find(|(op, _)| match op {
            SessionSet::Set(n) | SessionSet::Reset(n) => n.eq_ignore_ascii_case(name),
            SessionSet::ResetAll => true,
        });
        matches!(last, Some((SessionSet::Reset(_) | SessionSet::ResetAll, _)))
    }

    /// The `SET`s of the groups that ended since the last look, in order.
    pub fn take_done_sets(&mut self) -> Vec<(SessionSet, String)> {
        std::mem::take(&mut self.ended_sets)
    }

    /// A Close or `DEALLOCATE` of `name` went upstream.
    pub fn forget(&mut self, name: &str) {
        self.prepared.closed(name);
        for item in &mut self.items {
            let (Item::Ext { records, .. } | Item::Ready { records, .. }) = item else {
                continue;
            };
            for e in records.entries() {
                if e.as_ref().is_some_and(|(n, _)| n == name) {
                    *e = None;
                }
            }
        }
    }

    /// The unnamed statement's text as a copy of its own, out of the read
    /// buffer: `kept`'s, when it is the same text (the session's last
    /// Parse, copied already).
    pub fn detach_unnamed(&mut self, kept: Option<&Sql>) {
        self.prepared.detach_unnamed(kept);
    }

    /// The client was told, with no server, that `name` is `sql`
    /// (`told/`): its statement until it makes or closes another.
    pub fn told(&mut self, name: &str, sql: Sql) {
        self.prepared.record(Some((name.to_owned(), sql)));
    }

    /// Statements of the proxy's own of this kind are owed an answer.
    pub fn owes(&self, own: Own) -> bool {
        self.items.iter().any(|i| match i {
            Item::Ext { own: o, .. } | Item::Ready { own: o, .. } => *o == Some(own),
            Item::Local(_) => false,
        })
    }

    /// `DEALLOCATE ALL`, `DISCARD ALL`, or a change to a name not read.
    pub fn forget_all(&mut self) {
        self.prepared = Prepared::default();
        for item in &mut self.items {
            let (Item::Ext { records, .. } | Item::Ready { records, .. }) = item else {
                continue;
            };
            for e in records.entries() {
                *e = None;
            }
        }
    }
}

/// A LOAD completed: its libraries stay loaded for the backend's life,
/// whatever becomes of its transaction.
fn loads_done(loaded: &mut Vec<String>, age: &mut bool, libs: &mut Vec<String>) {
    *age |= libs.iter().any(|l| super::settings::lists_age(l));
    loaded.append(libs);
}

/// A CommandComplete (`msg`) of a Query or Execute that holds SQL PREPAREs
/// or DEALLOCATEs: the first of them still to run is done, when the tag is
/// its (the tags of the text's other statements are not theirs).
fn sql_op_done(prepared: &mut Prepared, list: &mut VecDeque<SqlOp>, msg: &[u8]) {
    let tag = backend::body(msg);
    let theirs = match list.front() {
        Some(SqlOp::Prepare(_)) => tag == b"PREPARE\0",
        Some(SqlOp::Deallocate(_)) => tag == b"DEALLOCATE\0",
        Some(SqlOp::DeallocateAll) => tag == b"DEALLOCATE ALL\0",
        None => false,
    };
    if !theirs {
        return;
    }
    match list.pop_front() {
        Some(SqlOp::Prepare(p)) => prepared.record(p),
        Some(SqlOp::Deallocate(name)) => prepared.closed(&name),
        Some(SqlOp::DeallocateAll) => *prepared = Prepared::default(),
        None => {}
    }
}

fn is_load_complete(t: u8, msg: &[u8]) -> bool {
    t == tag::COMMAND_COMPLETE && backend::body(msg).starts_with(b"LOAD\0")
}

#[cfg(test)]
mod tests;
