//! Transaction pooling's session settings: a client's plain `SET`s and
//! `RESET`s (`onetrip_planner::classify::session_set`) are kept here, in
//! order, once the server accepted them, and replayed on the next server
//! connection it takes whose settings differ (`session::pooled`), instead
//! of pinning the client to its connection.

use bytes::{Bytes, BytesMut};
use onetrip_planner::classify::{SessionSet, session_set};

use super::*;

/// The client's settings: (name, the `SET` statement as it sent it), in
/// the order first set.
pub type SessionSets = Vec<(String, String)>;

/// A replayable statement sent, waiting for its ReadyForQuery.
#[derive(Debug)]
pub(super) struct PendingSet {
    op: SessionSet,
    text: String,
    failed: bool,
}

impl Protocol {
    /// A simple Query `text` of a pooled session: true when it is a `SET`
    /// or `RESET` to replay (it does not pin). Only alone on the wire, the
    /// session idle: then its ReadyForQuery says whether it took effect.
    pub(super) fn takes_replayable_set(&mut self, text: &str) -> bool {
        if self.pending_set.is_some() || !self.quiet_upstream() {
            return false;
        }
        if !may_be_set(text) {
            return false;
        }
        let Some(op) = session_set(text) else {
            return false;
        };
        self.pending_set = Some(PendingSet {
            op,
            text: text.to_owned(),
            failed: false,
        });
        true
    }

    /// The client's answers to a pending `SET`: an error undoes it, its
    /// ReadyForQuery makes it the session's.
    pub(super) fn on_set_answer(&mut self, t: u8) {
        let Some(p) = self.pending_set.as_mut() else {
            return;
        };
        match t {
            tag::ERROR_RESPONSE => p.failed = true,
            tag::READY_FOR_QUERY => {
                let Some(p) = self.pending_set.take() else {
                    return;
                };
                if p.failed {
                    return;
                }
                let sets = &mut self.sets;
                match p.op {
                    SessionSet::Set(name) => {
                        sets.retain(|(n, _)| *n != name);
                        sets.push((name, p.text));
                    }
                    SessionSet::Reset(name) => sets.retain(|(n, _)| *n != name),
                    SessionSet::ResetAll => sets.clear(),
                }
            }
            _ => {}
        }
    }

    /// The client's settings, which its server connection now carries too.
    pub fn session_sets(&self) -> &SessionSets {
        &self.sets
    }
}

/// The one Query that makes a server connection's settings `sets`, from
/// whatever it carried: `RESET ALL`, then each `SET` as the client sent it.
/// Each ends its own line, so a trailing `--` comment ends with it.
pub fn replay_query(sets: &SessionSets) -> Bytes {
    let mut sql = String::from("RESET ALL;");
    for (_, text) in sets {
        sql.push('\n');
        sql.push_str(text);
        sql.push_str("\n;");
    }
    let mut out = BytesMut::with_capacity(sql.len() + 6);
    crate::wire::write::query(&mut out, &sql);
    out.freeze()
}

/// Only a text that starts with SET or RESET, or with a comment, can be
/// one: most Queries are turned away without being lexed.
fn may_be_set(text: &str) -> bool {
    let t = text.as_bytes().trim_ascii_start();
    matches!(t.first(), Some(b'/' | b'-')) || super::client_txn::first_word_is(t, &["set", "reset"])
}

#[cfg(test)]
mod tests {
    use super::may_be_set;

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
}
