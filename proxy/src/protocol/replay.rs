//! Transaction pooling's session state that follows its client: the
//! settings its startup packet asked for (`pooling::startup`), its plain
//! `SET`s and `RESET`s (`onetrip_planner::classify::session_set`, by
//! either protocol, kept once their transaction has committed) and the
//! libraries it loaded. A server connection carries what its last client
//! left (`ServerState`); the next client's first write starts with the one
//! Query that makes the connection its own (`prepare`), its answers unseen:
//! on a dedicated connection nothing changed.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use onetrip_planner::classify::{Pins, Reset, SessionSet};

use super::*;

/// A client's settings: (name, the statement that makes it), in the order
/// first set. Shared between a session and the connection it left, so
/// that handing a connection over copies nothing.
#[derive(Debug, Clone, Default)]
pub struct SessionSets(Option<Arc<Vec<(String, String)>>>);

impl SessionSets {
    pub const fn new() -> Self {
        Self(None)
    }

    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|v| v.is_empty())
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, String)> {
        self.0.iter().flat_map(|v| v.iter())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }

    fn edit(&mut self) -> &mut Vec<(String, String)> {
        Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }

    /// `name` is now made by `text` (replacing how it was made before).
    pub fn set(&mut self, name: String, text: String) {
        let v = self.edit();
        v.retain(|(n, _)| *n != name);
        v.push((name, text));
    }

    pub fn remove(&mut self, name: &str) {
        if self.get(name).is_some() {
            self.edit().retain(|(n, _)| n != name);
        }
    }

    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// What one replayable statement did to the settings.
    pub fn apply(&mut self, op: &SessionSet, text: &str) {
        match op {
            SessionSet::Set(name) => self.set(name.clone(), text.to_owned()),
            SessionSet::Reset(name) => self.remove(name),
            SessionSet::ResetAll => self.clear(),
        }
    }
}

impl PartialEq for SessionSets {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => self.is_empty() && other.is_empty(),
        }
    }
}

impl Eq for SessionSets {}

impl FromIterator<(String, String)> for SessionSets {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        let mut s = SessionSets::new();
        for (n, t) in iter {
            s.set(n, t);
        }
        s
    }
}

/// What a backend keeps of its clients that no reset undoes: libraries
/// loaded by `LOAD`, and custom settings once defined (a placeholder such
/// as `myapp.user` stays defined, as '', after RESET; a fresh connection
/// doesn't know it). A connection goes only to a client that left the same
/// in it, or more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Residue {
    pub libraries: Vec<String>,
    pub settings: Vec<String>,
}

impl Residue {
    /// All of it is `other`'s too.
    pub fn within(&self, other: &Residue) -> bool {
        self.libraries.iter().all(|l| other.libraries.contains(l))
            && self.settings.iter().all(|s| other.settings.contains(s))
    }
}

/// A client's residue, shared with the connections it leaves.
pub type Residues = Arc<Residue>;

/// The empty residue, one for the process: every session and connection
/// starts with it (a fresh `Arc` each was 64 bytes twice per client), and
/// one that loads a library makes its own (`Arc::make_mut`).
pub fn no_residue() -> Residues {
    static NONE: std::sync::LazyLock<Residues> = std::sync::LazyLock::new(Residues::default);
    NONE.clone()
}

/// What a server connection holds of its clients' session state, as far
/// as onetrip made or saw it.
#[derive(Debug, Clone)]
pub struct ServerState {
    /// The settings its last client left in it.
    pub sets: SessionSets,
    /// What no reset undoes in its backend.
    pub residue: Residues,
    /// What it needs before another client may use it, and why.
    pub reset: Reset,
}

impl Default for ServerState {
    fn default() -> Self {
        Self {
            sets: SessionSets::new(),
            residue: no_residue(),
            reset: Reset::default(),
        }
    }
}

/// How a connection becomes a client's.
#[derive(Debug, PartialEq, Eq)]
pub enum Prep {
    /// It is the client's already.
    Ready,
    /// This Query first (its answers unseen).
    Query(Bytes),
    /// It can't be: a library is loaded in its backend that the client
    /// never loaded. It is closed; the client takes another.
    Unusable,
}

/// What makes a connection that holds `has` hold the client's `sets` and
/// `loads`: the libraries it lacks loaded, the settings that differ reset
/// or made as the client made them.
pub fn prepare(has: &ServerState, sets: &SessionSets, loads: &Residues) -> Prep {
    if !has.residue.within(loads) {
        return Prep::Unusable;
    }
    let same_libraries = has.residue.libraries.len() == loads.libraries.len();
    if same_libraries && has.sets == *sets && has.reset == Reset::None {
        return Prep::Ready;
    }
    let mut out = BytesMut::new();
    let mut sql = String::new();
    let none = SessionSets::new();
    let has_sets = match has.reset {
        Reset::None => &has.sets,
        Reset::Sequences(_) => {
            sql.push_str(RESET_SEQUENCES);
            &has.sets
        }
        // Its settings are the server's defaults again. DISCARD ALL runs
        // alone (not in a transaction block), and costs a tenth of the
        // statements it stands for sent in one Query.
        Reset::Full(_) => {
            crate::wire::write::query(&mut out, "DISCARD ALL");
            sql.push_str(RESEED);
            &none
        }
    };
    let missing = loads
        .libraries
        .iter()
        .filter(|l| !has.residue.libraries.contains(l));
    for lib in missing {
        sql.push_str("LOAD ");
        sql.push_str(&literal(lib));
        sql.push_str(";\n");
    }
    for (name, _) in has_sets.iter() {
        if sets.get(name).is_none() {
            sql.push_str("RESET ");
            sql.push_str(&setting_name(name));
            sql.push_str(";\n");
        }
    }
    for (name, text) in sets.iter() {
        if has_sets.get(name) != Some(text.as_str()) {
            // Its own line: a trailing `--` comment ends with it.
            sql.push_str(text);
            sql.push_str("\n;\n");
        }
    }
    crate::wire::write::query(&mut out, &sql);
    Prep::Query(out.freeze())
}

/// What `currval` and `lastval` remember, forgotten.
const RESET_SEQUENCES: &str = "DISCARD SEQUENCES;\n";

/// After DISCARD ALL: the random seed a `setseed` may have left, which
/// DISCARD ALL keeps, made unpredictable again from a source it doesn't
/// touch (the clock).
const RESEED: &str = "SELECT pg_catalog.setseed(\
pg_catalog.date_part('microseconds', pg_catalog.clock_timestamp()) / 60000000.0);\n";

/// A setting's name as an identifier: each dotted part quoted.
fn setting_name(name: &str) -> String {
    let parts: Vec<String> = name
        .split('.')
        .map(|p| format!("\"{}\"", p.replace('"', "\"\"")))
        .collect();
    parts.join(".")
}

impl Protocol {
    /// A simple Query `text` of a pooled session: true when it is a `SET`
    /// or `RESET` that follows its client (it does not pin). Only alone on
    /// the wire, the session idle, so that it runs in a transaction of its
    /// own; it counts once that transaction has committed.
    pub(super) fn takes_replayable_set(&mut self, text: &str) -> bool {
        if !self.quiet_upstream() || !may_be_set(text) {
            return false;
        }
        let Some(op) = onetrip_planner::classify::session_set(text) else {
            return false;
        };
        if let SessionSet::Set(name) = &op {
            self.defined(name);
        }
        self.set_op = Some(Box::new(Op::Set(op, text.to_owned())));
        true
    }

    /// An Execute of `text` (a pooled session's): a replayable `SET` or
    /// `RESET` outside a transaction block follows its client once its
    /// transaction commits; inside one it pins. Other statements of the
    /// same pipeline that control transactions make a pending one pin.
    pub(super) fn follow_executed_set(&mut self, text: &str) -> Option<Op> {
        let group = self.flight.group_now();
        if self.set_group == Some(group)
            && super::client_txn::first_word_is(text.as_bytes().trim_ascii_start(), TXN_WORDS)
        {
            self.pin_session("session SET");
        }
        if !may_be_set(text) {
            return None;
        }
        let op = onetrip_planner::classify::session_set(text)?;
        if let SessionSet::Set(name) = &op {
            // Defined in the backend once named, committed or not.
            self.defined(name);
        }
        let in_block =
            self.txn_status != b'I' || self.txn.held.is_some() || self.flight.begin_on_its_way();
        if in_block {
            self.pin_session("session SET");
            return None;
        }
        self.set_group = Some(group);
        Some(Op::Set(op, text.to_owned()))
    }

    /// A client's ReadyForQuery with status `status`: the `SET`s its group
    /// completed take effect, or pin when they ran inside a block that is
    /// still open (what becomes of them is not followed).
    pub(super) fn on_sets_done(&mut self, status: u8) {
        if self
            .set_group
            .is_some_and(|g| g < self.flight.group_answered_now())
        {
            self.set_group = None;
        }
        let done = self.flight.take_done_sets();
        if done.is_empty() {
            return;
        }
        if status != b'I' {
            self.pin_session("session SET");
            return;
        }
        for (op, text) in &done {
            self.sets.apply(op, text);
            // RESET returns a startup parameter to the startup packet's
            // value on a dedicated connection; on this one, to the pool's.
            let reset: Vec<String> = match op {
                SessionSet::Reset(name) => vec![name.clone()],
                SessionSet::ResetAll => self.startup.iter().map(|(n, _)| n.clone()).collect(),
                SessionSet::Set(_) => continue,
            };
            for name in reset {
                if let Some((_, stmt)) = self.startup.iter().find(|(n, _)| *n == name) {
                    self.sets.set(name.clone(), stmt.clone());
                    if !self.lacking.contains(&name) {
                        self.lacking.push(name);
                    }
                }
            }
        }
        if !self.lacking.is_empty() {
            // The client's own: its taint is for the next client.
            let state = ServerState {
                reset: Reset::None,
                ..self.held_state()
            };
            if let Prep::Query(q) = prepare(&state, &self.sets, &self.loads) {
                self.prep_due = Some(q);
            }
        }
    }

    /// What the connection held now holds, as far as the session knows:
    /// the client's settings, but those a RESET took from it.
    fn held_state(&self) -> ServerState {
        let mut sets = self.sets.clone();
        for name in &self.lacking {
            sets.remove(name);
        }
        ServerState {
            sets,
            residue: self.loads.clone(),
            reset: self.taint,
        }
    }

    /// A ParameterStatus of the client's statements, as a dedicated
    /// connection would report it: a startup parameter its RESET returned
    /// to the pool's value is reported at the startup packet's (or not at
    /// all, when the client knows it already). `None`: not reported.
    pub(super) fn reported(&mut self, name: &str, value: &str) -> Option<String> {
        let is = |n: &String| n.eq_ignore_ascii_case(name);
        let at_startup = self
            .startup_told
            .iter()
            .find(|(n, _)| is(n))
            .map(|(_, v)| v.as_str());
        let restored = match at_startup {
            Some(v) if self.flight.reset_in_group(name) => Some(v.to_owned()),
            _ => None,
        };
        let value = restored.clone().unwrap_or_else(|| value.to_owned());
        let restored = restored.is_some();
        match self.told.get(name) {
            Some(v) if v == value && restored => None,
            _ => {
                self.told.set(name, &value);
                Some(value)
            }
        }
    }

    /// The client's settings, which its server connection now carries too.
    pub fn session_sets(&self) -> &SessionSets {
        &self.sets
    }

    /// The libraries the client loaded.
    pub fn loads(&self) -> &Residues {
        &self.loads
    }

    /// The session starts with the settings its startup packet asked for,
    /// told `greeting` (every reported value) and `startup_told` (those of
    /// its startup parameters).
    pub fn start_with(
        &mut self,
        sets: SessionSets,
        greeting: Arc<[(String, String)]>,
        startup_told: Vec<(String, String)>,
    ) {
        let names: Vec<String> = sets.iter().map(|(n, _)| n.clone()).collect();
        for name in names {
            self.defined(&name);
        }
        self.startup = sets.clone();
        self.sets = sets;
        self.told = Told::over(greeting, &startup_told);
        self.startup_told = startup_told;
    }

    /// LOADs completed: their libraries follow the client.
    pub(super) fn on_loaded(&mut self) {
        for lib in self.flight.take_loaded() {
            if !self.loads.libraries.contains(&lib) {
                Arc::make_mut(&mut self.loads).libraries.push(lib);
            }
        }
    }

    /// A setting `name` was made: a custom one stays defined in the
    /// backend for good.
    pub(super) fn defined(&mut self, name: &str) {
        if name.contains('.') && !self.loads.settings.iter().any(|s| s == name) {
            Arc::make_mut(&mut self.loads)
                .settings
                .push(name.to_owned());
        }
    }

    /// What the server connection holds of the client's state, as it goes
    /// back to its pool; the next one the session takes needs no reset yet.
    pub fn server_state(&mut self) -> ServerState {
        let state = self.held_state();
        self.taint = Reset::None;
        self.lacking.clear();
        self.prep_due = None;
        state
    }

    /// An Execute of `sql`: what running it may leave on the connection,
    /// however long ago it was prepared.
    pub(super) fn taint_by(&mut self, sql: &text::Sql) {
        let reset = match sql.analysis() {
            Some(a) => a.pins.reset,
            None => Pins::of(sql.as_str()).reset,
        };
        if matches!(reset, onetrip_planner::classify::Reset::Full(_)) {
            self.ddl_seen();
        }
        self.taint = self.taint.combine(reset);
    }
}

/// First words of statements that open or end transactions.
const TXN_WORDS: &[&str] = &[
    "begin",
    "start",
    "commit",
    "end",
    "rollback",
    "abort",
    "savepoint",
    "release",
    "prepare",
];

/// Only a text that starts with SET or RESET, or with a comment, can be
/// one: most statements are turned away without being lexed.
fn may_be_set(text: &str) -> bool {
    let t = text.as_bytes().trim_ascii_start();
    matches!(t.first(), Some(b'/' | b'-')) || super::client_txn::first_word_is(t, &["set", "reset"])
}

/// A string literal that reads the same whatever the session's
/// `standard_conforming_strings` (an escape string literal).
pub fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str("E'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's reported values share its pool's greeting: it holds only
    /// what differs for it.
    #[test]
    fn told_values_share_the_greeting_and_hold_only_their_own() {
        let pair = |n: &str, v: &str| (n.to_owned(), v.to_owned());
        let greeting: Arc<[(String, String)]> =
            vec![pair("TimeZone", "UTC"), pair("application_name", "")].into();
        let own = [pair("application_name", "app"), pair("search_path", "x")];
        let mut told = Told::over(greeting.clone(), &own);
        assert_eq!(told.get("timezone"), Some("UTC"));
        assert_eq!(told.get("application_name"), Some("app"));
        assert_eq!(told.get("search_path"), None, "not in the greeting");
        assert_eq!(told.changed.len(), 1);
        told.set("timezone", "Europe/Paris");
        told.set("TimeZone", "Asia/Tokyo");
        assert_eq!(told.get("TimeZone"), Some("Asia/Tokyo"));
        assert_eq!(told.changed.len(), 2);
        assert_eq!(Arc::strong_count(&greeting), 2);
    }

    #[test]
    fn only_what_may_be_a_set_is_lexed() {
        for t in [
            "SET a = 1",
            "  reset all",
            "set\ttime zone 'UTC'",
            "/* c */ SET a = 1",
            "-- c\nSET a = 1",
        ] {
            assert!(may_be_set(t), "{t:?}");
        }
        for t in [
            "SELECT 1",
            "settle",
            "resets",
            "",
            "  ",
            "UPDATE t SET a = 1",
        ] {
            assert!(!may_be_set(t), "{t:?}");
        }
    }

    fn sets(s: &[(&str, &str)]) -> SessionSets {
        s.iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    fn query_text(p: Prep) -> String {
        let Prep::Query(q) = p else { panic!("{p:?}") };
        String::from_utf8_lossy(&q[5..q.len() - 1]).into_owned()
    }

    #[test]
    fn a_connection_is_made_the_clients_by_what_differs() {
        let none = Residues::default();
        let xy: Residues = Arc::new(Residue {
            libraries: Vec::new(),
            settings: vec!["x.y".into()],
        });
        let has = ServerState {
            sets: sets(&[
                ("a", "SET a = 1"),
                ("b", "SET b = 2"),
                ("x.y", "SET x.y = 3"),
            ]),
            residue: xy.clone(),
            reset: Reset::None,
        };
        assert_eq!(
            prepare(&has, &SessionSets::new(), &none),
            Prep::Unusable,
            "a custom setting another client defined"
        );
        assert_eq!(prepare(&has, &has.sets.clone(), &xy), Prep::Ready);
        let wants = sets(&[("b", "SET b = 2"), ("c", "SET c = 4 -- why")]);
        assert_eq!(
            query_text(prepare(&has, &wants, &xy)),
            "RESET \"a\";\nRESET \"x\".\"y\";\nSET c = 4 -- why\n;\n"
        );
        let age: Residues = Arc::new(Residue {
            libraries: vec!["age".into()],
            settings: vec!["x.y".into()],
        });
        assert_eq!(
            query_text(prepare(&has, &has.sets.clone(), &age)),
            "LOAD E'age';\n"
        );
        let loaded = ServerState {
            sets: SessionSets::new(),
            residue: age,
            reset: Reset::None,
        };
        assert_eq!(prepare(&loaded, &SessionSets::new(), &none), Prep::Unusable);
        let used = ServerState {
            sets: sets(&[("a", "SET a = 1")]),
            residue: none.clone(),
            reset: Reset::Full("function call"),
        };
        let wants = sets(&[("a", "SET a = 1")]);
        let Prep::Query(q) = prepare(&used, &wants, &none) else {
            panic!("a used connection is reset")
        };
        assert!(q.starts_with(b"Q\0\0\0\x10DISCARD ALL\0Q"), "{q:?}");
        let rest = String::from_utf8_lossy(&q[17..]);
        assert!(rest.contains("setseed"), "{rest}");
        assert!(
            rest.ends_with("SET a = 1\n;\n\0"),
            "made again after DISCARD ALL: {rest}"
        );
        let counted = ServerState {
            reset: Reset::Sequences("DML"),
            ..used
        };
        assert_eq!(
            query_text(prepare(&counted, &wants, &none)),
            "DISCARD SEQUENCES;\n"
        );
    }

    #[test]
    fn sets_compare_by_content_and_share_when_cloned() {
        let mut a = sets(&[("a", "SET a = 1")]);
        let b = a.clone();
        assert_eq!(a, b);
        a.set("a".into(), "SET a = 2".into());
        assert_ne!(a, b, "a change copies, the clone keeps its own");
        a.remove("a");
        assert_eq!(a, SessionSets::new());
        a.apply(&SessionSet::Set("z".into()), "SET z = 1");
        a.apply(&SessionSet::ResetAll, "RESET ALL");
        assert!(a.is_empty());
    }
}

/// The values reported to a client: its pool's greeting, shared by every
/// client the pool greeted, and what differs for this one (its startup
/// parameters' values, and each change reported since). An idle client
/// holds only its differences.
#[derive(Default)]
pub(super) struct Told {
    greeting: Arc<[(String, String)]>,
    changed: Vec<(String, String)>,
}

impl Told {
    /// As the greeting told them, with `own` values in place of the
    /// greeting's where it has them (as `greeting_for` wrote them).
    fn over(greeting: Arc<[(String, String)]>, own: &[(String, String)]) -> Self {
        let mut told = Told {
            greeting,
            changed: Vec::new(),
        };
        for (name, value) in own {
            if told
                .greeting
                .iter()
                .any(|(g, _)| g.eq_ignore_ascii_case(name))
            {
                told.set(name, value);
            }
        }
        told
    }

    fn get(&self, name: &str) -> Option<&str> {
        let is = |(n, _): &&(String, String)| n.eq_ignore_ascii_case(name);
        self.changed
            .iter()
            .find(is)
            .or_else(|| self.greeting.iter().find(is))
            .map(|(_, v)| v.as_str())
    }

    fn set(&mut self, name: &str, value: &str) {
        match self
            .changed
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            Some((_, v)) => value.clone_into(v),
            None => self.changed.push((name.to_owned(), value.to_owned())),
        }
    }
}
