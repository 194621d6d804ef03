//! A compiled expression: its SQL text and its SQL type, agtype or a
//! boolean (AGE's comparisons and predicates are booleans until a value
//! is needed). A module of its own below those that compile, so that
//! `scope` and `functions` need not import it from `expr`.

use super::super::DeclineReason as D;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Agtype,
    Bool,
}

#[derive(Debug, Clone)]
pub(super) struct Sql {
    pub(super) text: String,
    pub(super) kind: Kind,
}

impl Sql {
    pub(super) fn ag(text: String) -> Sql {
        Sql {
            text,
            kind: Kind::Agtype,
        }
    }
    pub(super) fn bool(text: String) -> Sql {
        Sql {
            text,
            kind: Kind::Bool,
        }
    }
    /// As a SQL boolean, the way AGE coerces agtype (`agtype_to_bool`).
    pub(super) fn to_bool(&self) -> String {
        match self.kind {
            Kind::Bool => self.text.clone(),
            Kind::Agtype => format!("({})::boolean", self.text),
        }
    }
    /// As agtype, the way AGE casts a boolean result (`bool_to_agtype`).
    pub(super) fn to_agtype(&self) -> String {
        match self.kind {
            Kind::Agtype => self.text.clone(),
            Kind::Bool => format!("({})::agtype", self.text),
        }
    }
    pub(super) fn agtype_only(self) -> Result<String, D> {
        match self.kind {
            Kind::Agtype => Ok(self.text),
            Kind::Bool => Err(D::BooleanOperand),
        }
    }
}
