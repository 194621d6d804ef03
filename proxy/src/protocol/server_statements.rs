//! What a pooled server connection holds under each statement name, as far
//! as the proxy knows, kept to a bound: a connection serves many clients,
//! and each leaves its named statements behind (a client closes them on
//! whichever connection it holds then, not on the others that got them).
//! Past `[pool] max_prepared_statements` the least recently used is closed,
//! in the same write as the Parse that needs its place.
//!
//! Every name the server may hold is here, so the bound holds for the
//! server too: a Parse or Close is recorded when it is sent, and an error
//! in its group (the server then skips the rest of the group) makes what
//! the group did unsure, until a Close of the name is known to have run.

use bytes::Bytes;
use rustc_hash::FxHashMap;

/// Not in a group still under way.
const SETTLED: u64 = u64::MAX;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Made by this Parse message.
    Held(Bytes),
    /// Something may be held under the name, or nothing.
    Unsure,
    /// A Close of it is on its way: gone once its group ends well.
    Closing,
}

#[derive(Debug)]
struct Entry {
    state: State,
    /// When it was last used, in uses of the whole map.
    used: u64,
    /// The group whose end settles it, or `SETTLED`.
    group: u64,
    /// The session whose Parse made it (0: not known).
    by: u64,
    /// The pool's DDL generation when it was parsed.
    generation: u64,
}

#[derive(Debug, Default)]
pub struct ServerStatements {
    by_name: FxHashMap<String, Entry>,
    uses: u64,
    /// Entries whose group has not ended (none most of the time: then
    /// nothing is walked at a ReadyForQuery).
    unsettled: usize,
    /// Entries in `Closing`, which don't count against the bound.
    closing: usize,
}

impl ServerStatements {
    /// Whether the server surely holds `parse` under `name`; a use of it.
    pub fn holds(&mut self, name: &str, parse: &Bytes) -> bool {
        self.uses += 1;
        match self.by_name.get_mut(name) {
            Some(e) if matches!(&e.state, State::Held(b) if b == parse) => {
                e.used = self.uses;
                true
            }
            _ => false,
        }
    }

    /// Whether the server surely holds `parse` under `name`, not counted as
    /// a use.
    pub fn has(&self, name: &str, parse: &Bytes) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|e| matches!(&e.state, State::Held(b) if b == parse))
    }

    /// A Parse of `name` was sent in `group`.
    pub fn parsed(&mut self, name: &str, parse: Bytes, group: u64) {
        self.parsed_by(name, parse, group, 0, 0);
    }

    /// A Parse of `name` was sent in `group` by session `by`, at the pool's
    /// DDL generation `generation`.
    pub fn parsed_by(&mut self, name: &str, parse: Bytes, group: u64, by: u64, generation: u64) {
        self.set(name, State::Held(parse), group);
        if let Some(e) = self.by_name.get_mut(name) {
            e.by = by;
            e.generation = generation;
        }
    }

    /// Whether the server surely holds under `name` a statement of the
    /// text and parameter types `key` (a Parse's body past its name,
    /// whatever name the Parse gave), parsed at DDL generation `since` or
    /// later (so with no DDL seen between the client's Parse and its); a
    /// use of it. `Some` names the session that made it.
    pub fn holds_key(&mut self, name: &str, key: &[u8], since: u64) -> Option<u64> {
        self.uses += 1;
        let e = self.by_name.get_mut(name)?;
        match &e.state {
            State::Held(b)
                if e.generation >= since && crate::wire::frontend::parse_key(b) == Some(key) =>
            {
                e.used = self.uses;
                Some(e.by)
            }
            _ => None,
        }
    }

    /// Whether anything may be held under `name`, or is being closed.
    pub fn knows(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// A Close of `name` was sent in `group`; `skipped` when the server
    /// skips it (an error came and no Sync since), so what it holds is
    /// unknown.
    pub fn closed(&mut self, name: &str, group: u64, skipped: bool) {
        let state = if skipped {
            State::Unsure
        } else {
            State::Closing
        };
        self.set(name, state, group);
    }

    /// A `DEALLOCATE ALL` was sent in `group` (`skipped`: as `closed`).
    pub fn closed_all(&mut self, group: u64, skipped: bool) {
        let names: Vec<String> = self.by_name.keys().cloned().collect();
        for name in names {
            self.closed(&name, group, skipped);
        }
    }

    /// The server holds under `name` what `was` made (a PREPARE) as `now`
    /// would make it (a Parse of its text and parameter types): recorded so,
    /// unless what it holds there has changed or become unsure meanwhile.
    pub fn made_as(&mut self, name: &str, was: &Bytes, now: Bytes) {
        if let Some(e) = self.by_name.get_mut(name)
            && matches!(&e.state, State::Held(b) if b == was)
        {
            e.state = State::Held(now);
        }
    }

    fn set(&mut self, name: &str, state: State, group: u64) {
        self.uses += 1;
        let entry = Entry {
            // An unsure name serves nobody: first to go.
            used: if state == State::Unsure { 0 } else { self.uses },
            state,
            group,
            by: 0,
            generation: 0,
        };
        self.count(&entry, true);
        if let Some(old) = self.by_name.get_mut(name) {
            let old = std::mem::replace(old, entry);
            self.count(&old, false);
        } else {
            self.by_name.insert(name.to_owned(), entry);
        }
    }

    fn count(&mut self, e: &Entry, add: bool) {
        let n = |c: &mut usize, yes: bool| {
            if yes {
                if add { *c += 1 } else { *c -= 1 }
            }
        };
        n(&mut self.unsettled, e.group != SETTLED);
        n(&mut self.closing, e.state == State::Closing);
    }

    /// The name to close so that a new one fits under `max` (never
    /// `keep`, the one about to be made); the caller sends the Close and
    /// records it (`closed`).
    pub fn to_evict(&self, max: usize, keep: &str) -> Option<String> {
        let live = self.by_name.len() - self.closing;
        if live < max.max(1)
            || self
                .by_name
                .get(keep)
                .is_some_and(|e| e.state != State::Closing)
        {
            return None;
        }
        self.by_name
            .iter()
            .filter(|(n, e)| e.state != State::Closing && n.as_str() != keep)
            .min_by_key(|(_, e)| e.used)
            .map(|(n, _)| n.clone())
    }

    /// A statement's plan no longer fits its result type (0A000): DDL the
    /// proxy did not see changed what the statements read, and any of them
    /// may be stale; each is made again before its next use.
    pub fn all_unsure(&mut self) {
        for e in self.by_name.values_mut() {
            if let State::Held(_) = e.state {
                e.state = State::Unsure;
                e.used = 0;
            }
        }
    }

    /// An error came in `group`: the server skips the rest of it, so what
    /// it was sent to do there may not be done.
    pub fn failed(&mut self, group: u64) {
        if self.unsettled == 0 {
            return;
        }
        for e in self.by_name.values_mut() {
            if e.group == group && e.state != State::Unsure {
                if e.state == State::Closing {
                    self.closing -= 1;
                }
                e.state = State::Unsure;
                e.used = 0;
            }
        }
    }

    /// The groups before `done` have ended: their Closes ran.
    pub fn settle(&mut self, done: u64) {
        if self.unsettled == 0 {
            return;
        }
        let (mut unsettled, mut closing) = (0, 0);
        self.by_name.retain(|_, e| {
            if e.group < done {
                if e.state == State::Closing {
                    return false;
                }
                e.group = SETTLED;
            }
            unsettled += usize::from(e.group != SETTLED);
            closing += usize::from(e.state == State::Closing);
            true
        });
        self.unsettled = unsettled;
        self.closing = closing;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl ServerStatements {
        /// Names the server may hold.
        fn len(&self) -> usize {
            self.by_name.len() - self.closing
        }
    }

    fn p(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn the_least_recently_used_goes_first() {
        let mut s = ServerStatements::default();
        s.parsed("a", p("A"), 0);
        s.parsed("b", p("B"), 0);
        s.settle(1);
        assert!(s.holds("a", &p("A")));
        assert_eq!(s.to_evict(2, "c").as_deref(), Some("b"));
        assert_eq!(s.to_evict(3, "c"), None);
        // Made again in its place: no room needed.
        assert_eq!(s.to_evict(2, "a"), None);
        s.closed("b", 1, false);
        assert_eq!(s.len(), 1);
        s.parsed("c", p("C"), 1);
        s.settle(2);
        assert_eq!(s.len(), 2);
        assert!(!s.holds("b", &p("B")));
    }

    #[test]
    fn an_error_makes_its_group_unsure_and_only_it() {
        let mut s = ServerStatements::default();
        s.parsed("a", p("A"), 3);
        s.closed("b", 4, false);
        s.parsed("c", p("C"), 4);
        s.failed(4);
        s.settle(5);
        assert!(s.holds("a", &p("A")));
        assert!(!s.holds("c", &p("C")));
        // The Close that may not have run still counts: its name may be held.
        assert_eq!(s.len(), 3);
        assert_eq!(s.to_evict(3, "d").as_deref(), Some("b"));
    }

    #[test]
    fn deallocate_all_closes_every_name_and_a_prepare_is_made_as_a_parse() {
        let mut s = ServerStatements::default();
        s.parsed("a", p("A"), 0);
        s.parsed("q", p("PREPARE q AS SELECT 1"), 0);
        s.made_as("q", &p("PREPARE q AS SELECT 1"), p("P q"));
        s.made_as("a", &p("other"), p("P a"));
        s.settle(1);
        assert!(s.holds("q", &p("P q")));
        assert!(s.holds("a", &p("A")));
        s.closed_all(1, false);
        s.settle(2);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn a_skipped_close_leaves_the_name_unsure() {
        let mut s = ServerStatements::default();
        s.closed("a", 0, true);
        s.settle(1);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_shared_name_is_held_for_its_text_whatever_the_clients_name() {
        let parse = |name: &str, sql: &str| {
            let mut out = bytes::BytesMut::new();
            crate::wire::write::parse(&mut out, name, sql);
            out.freeze()
        };
        let mut s = ServerStatements::default();
        s.parsed_by("shared_1", parse("a", "SELECT 1"), 0, 7, 3);
        let key = |b: &Bytes| crate::wire::frontend::parse_key(b).unwrap().to_vec();
        let b1 = key(&parse("b", "SELECT 1"));
        assert_eq!(s.holds_key("shared_1", &b1, 3), Some(7));
        assert_eq!(s.holds_key("shared_1", &b1, 2), Some(7));
        // DDL came between its Parse and the client's: it may be stale.
        assert_eq!(s.holds_key("shared_1", &b1, 4), None);
        assert_eq!(
            s.holds_key("shared_1", &key(&parse("a", "SELECT 2")), 3),
            None
        );
        assert_eq!(
            s.holds_key("shared_2", &key(&parse("a", "SELECT 1")), 3),
            None
        );
        assert!(s.knows("shared_1") && !s.knows("shared_2"));
        s.all_unsure();
        assert_eq!(s.holds_key("shared_1", &b1, 3), None);
        assert!(s.knows("shared_1"));
    }
}
