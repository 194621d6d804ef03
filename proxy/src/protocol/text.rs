//! Statement text as the session keeps it: a slice of the message it came
//! in, so following a statement through Parse, Bind and Execute copies
//! nothing.

use std::sync::Arc;

use bytes::Bytes;
use onetrip_planner::{
    analysis::{Analysis, texts},
    words::Words,
};
use rustc_hash::FxHashMap;

/// UTF-8 statement text (checked when made), with the words the session
/// looks for found once, when it is made, rather than at every Execute;
/// and its analysis, once the planner made one, so that the Bind, Execute
/// and Flush that follow its Parse need not ask again. Equal and hashed by
/// its text.
#[derive(Debug, Clone)]
pub struct Sql {
    text: Bytes,
    words: Words,
    analysis: Option<Arc<Analysis>>,
}

impl PartialEq for Sql {
    fn eq(&self, other: &Sql) -> bool {
        self.text == other.text
    }
}

impl Eq for Sql {}

/// A shared text as the bytes of a `Bytes`.
struct SharedText(Arc<str>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::hash::Hash for Sql {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.text.hash(h);
    }
}

impl Sql {
    /// The text `text`, which lies inside `msg`, without copying it;
    /// `words` are its words when already found.
    pub fn within(msg: &Bytes, text: &str, words: Option<Words>) -> Self {
        let words = words.unwrap_or_else(|| Words::scan(text));
        Sql {
            text: msg.slice_ref(text.as_bytes()),
            words,
            analysis: None,
        }
    }

    /// `text` made here (a fingerprint, say), with no words looked for.
    pub fn owned(text: String) -> Self {
        Sql {
            text: Bytes::from(text),
            words: Words::default(),
            analysis: None,
        }
    }

    /// A copy, for text kept long after its message (it would otherwise
    /// pin the whole read buffer the message arrived in): the thread's
    /// shared copy, so that sessions keeping the same text keep it once.
    pub fn detached(&self) -> Self {
        Sql {
            text: Bytes::from_owner(SharedText(texts::shared(self.as_str()))),
            words: self.words,
            analysis: self.analysis.clone(),
        }
    }

    /// The same text in a copy of its own.
    pub fn copied(&self) -> Self {
        Sql {
            text: Bytes::copy_from_slice(&self.text),
            words: self.words,
            analysis: self.analysis.clone(),
        }
    }

    /// The same text in `copy`, a copy of `from`, when it lies inside
    /// `from` (as a statement's text lies inside its message); else kept
    /// as it is.
    pub fn moved_to(&self, from: &Bytes, copy: &Bytes) -> Self {
        let start = (self.text.as_ptr() as usize).wrapping_sub(from.as_ptr() as usize);
        let text = match start.checked_add(self.text.len()) {
            Some(end) if end <= from.len() && copy.len() == from.len() => copy.slice(start..end),
            _ => self.text.clone(),
        };
        Sql {
            text,
            words: self.words,
            analysis: self.analysis.clone(),
        }
    }

    pub fn as_str(&self) -> &str {
        crate::wire::utf8(&self.text).unwrap_or_default()
    }

    pub fn words(&self) -> Words {
        self.words
    }

    /// `part`, which lies inside this text, as a statement of its own.
    pub fn part(&self, part: &str) -> Sql {
        Sql {
            text: self.text.slice_ref(part.as_bytes()),
            words: Words::scan(part),
            analysis: None,
        }
    }

    pub fn analysis(&self) -> Option<&Arc<Analysis>> {
        self.analysis.as_ref()
    }

    pub fn with_analysis(mut self, analysis: Arc<Analysis>) -> Self {
        self.analysis = Some(analysis);
        self
    }
}

/// The prepared statements the server is known to hold, by name. What the
/// session has sent and not yet seen accepted is in the `Flight`.
#[derive(Debug, Default)]
pub struct Prepared {
    /// The unnamed one, replaced by nearly every Parse: kept as a slice.
    unnamed: Option<Sql>,
    named: FxHashMap<String, Sql>,
}

impl Prepared {
    /// The server accepted `name` (`None`: something sent after it
    /// dropped the name again).
    pub fn record(&mut self, accepted: Option<(String, Sql)>) {
        match accepted {
            Some((name, sql)) if name.is_empty() => self.unnamed = Some(sql),
            Some((name, sql)) => {
                self.named.insert(name, sql.detached());
            }
            None => {}
        }
    }

    /// See `Flight::detach_unnamed`.
    pub fn detach_unnamed(&mut self, kept: Option<&Sql>) {
        if let Some(u) = self.unnamed.as_mut() {
            *u = match kept {
                Some(k) if k == u => k.clone(),
                _ => u.copied(),
            };
        }
    }

    pub fn closed(&mut self, name: &str) {
        if name.is_empty() {
            self.unnamed = None;
        } else {
            self.named.remove(name);
        }
    }

    pub fn get(&self, name: &str) -> Option<&Sql> {
        if name.is_empty() {
            self.unnamed.as_ref()
        } else {
            self.named.get(name)
        }
    }
}

/// Could this statement change the isolation level? A cheap test that
/// spares the full classification for almost every statement: isolation
/// changes all name it (`ISOLATION LEVEL`, `default_transaction_isolation`,
/// `transaction_isolation`) or reset settings wholesale.
pub fn may_set_isolation(w: Words) -> bool {
    // `set_config($1, $2, false)` names the setting in a parameter.
    w.any(Words::ISOLATION | Words::RESET | Words::DISCARD | Words::CONFIG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolation_pre_check() {
        for s in [
            "BEGIN ISOLATION LEVEL REPEATABLE READ",
            "set default_transaction_isolation = 'serializable'",
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            "RESET ALL",
            "discard all",
            "select set_config('transaction_isolation', 'serializable', false)",
            "select set_config($1, $2, false)",
        ] {
            assert!(may_set_isolation(Words::scan(s)), "{s}");
        }
        assert!(!may_set_isolation(Words::scan(
            "select abalance from pgbench_accounts where aid = 42"
        )));
    }

    #[test]
    fn a_text_moved_to_a_copy_points_into_the_copy() {
        let msg = Bytes::from(b"Q\0\0\0\x0dselect 1\0".to_vec());
        let text = std::str::from_utf8(&msg[5..13]).unwrap();
        let sql = Sql::within(&msg, text, None);
        let copy = Bytes::copy_from_slice(&msg);
        let moved = sql.moved_to(&msg, &copy);
        assert_eq!(moved.as_str(), "select 1");
        assert_eq!(moved.text.as_ptr(), copy[5..].as_ptr());
        // Not inside `from`: kept as it was.
        let other = Bytes::from_static(b"select 1");
        let kept = sql.moved_to(&other, &other);
        assert_eq!(kept.text.as_ptr(), sql.text.as_ptr());
    }

    #[test]
    fn prepared_keeps_named_copies() {
        let msg = Bytes::from_static(b"select 1");
        let sql = || Sql::within(&msg, "select 1", None);
        let mut p = Prepared::default();
        p.record(Some((String::new(), sql())));
        p.record(Some(("s".into(), sql())));
        assert_eq!(p.get("").map(Sql::as_str), Some("select 1"));
        assert_eq!(p.get("s").map(Sql::as_str), Some("select 1"));
        p.closed("s");
        assert!(p.get("s").is_none());
    }
}
