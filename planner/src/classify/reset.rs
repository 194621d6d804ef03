//! What a server connection that ran a text needs before another client
//! may have it. A safety net behind the pins: what the scan can't prove
//! session-neutral is undone, so the next client can't tell the connection
//! from a fresh one.

/// The reset a text calls for, with the first reason of its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reset {
    #[default]
    None,
    /// currval/lastval state may have changed: `DISCARD SEQUENCES` undoes it.
    Sequences(&'static str),
    /// Anything the scan can't prove session-neutral: the full reset
    /// (SET SESSION AUTHORIZATION DEFAULT; RESET ALL; CLOSE ALL; UNLISTEN *;
    /// SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES).
    Full(&'static str),
}

pub(crate) const FUNCTION_CALL: &str = "function call";
pub(crate) const SEQUENCE_FUNCTION: &str = "sequence function";
pub(crate) const DML: &str = "DML";
pub(crate) const DDL: &str = "DDL";
pub(crate) const CATALOG_DML: &str = "catalog DML";
pub(crate) const DO_BLOCK: &str = "DO block";
pub(crate) const CALL: &str = "CALL";
pub(crate) const EXECUTE: &str = "EXECUTE";
pub(crate) const LOAD: &str = "LOAD";
pub(crate) const NOT_READ: &str = "statement not read";

/// Every reason a `Reset` may give, so that resets can be counted by
/// reason in a fixed array (`Reset::reason_index`).
pub const RESET_REASONS: &[&str] = &[
    FUNCTION_CALL,
    SEQUENCE_FUNCTION,
    DML,
    DDL,
    CATALOG_DML,
    DO_BLOCK,
    CALL,
    EXECUTE,
    LOAD,
    NOT_READ,
];

impl Reset {
    fn level(self) -> u8 {
        match self {
            Reset::None => 0,
            Reset::Sequences(_) => 1,
            Reset::Full(_) => 2,
        }
    }

    /// Both together: the stronger one, or `self` when they are as strong
    /// (so the first reason of the strongest level is kept).
    #[must_use]
    pub fn combine(self, later: Reset) -> Reset {
        if later.level() > self.level() {
            later
        } else {
            self
        }
    }

    pub fn reason(self) -> Option<&'static str> {
        match self {
            Reset::None => None,
            Reset::Sequences(why) | Reset::Full(why) => Some(why),
        }
    }

    /// Where its reason is in `RESET_REASONS`.
    pub fn reason_index(self) -> Option<usize> {
        let why = self.reason()?;
        RESET_REASONS.iter().position(|r| *r == why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stronger_reset_wins_with_its_first_reason() {
        let seq = Reset::Sequences(DML);
        let full = Reset::Full(DDL);
        assert_eq!(Reset::None.combine(seq), seq);
        assert_eq!(seq.combine(Reset::None), seq);
        assert_eq!(seq.combine(full), full);
        assert_eq!(full.combine(seq), full);
        assert_eq!(full.combine(Reset::Full(CALL)), full);
        assert_eq!(seq.combine(Reset::Sequences(SEQUENCE_FUNCTION)), seq);
        assert_eq!(Reset::None.reason(), None);
        assert_eq!(full.reason(), Some(DDL));
    }

    #[test]
    fn reasons_are_few_distinct_and_indexed() {
        assert!(RESET_REASONS.len() <= 12);
        for (i, why) in RESET_REASONS.iter().enumerate() {
            assert_eq!(RESET_REASONS.iter().position(|r| r == why), Some(i));
            assert_eq!(Reset::Full(why).reason_index(), Some(i));
        }
        assert_eq!(Reset::None.reason_index(), None);
    }
}
