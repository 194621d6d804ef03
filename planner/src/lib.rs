//! onetrip's planner: SQL statement classification (for coalescing) and the
//! Cypher-to-SQL compiler for Apache AGE. Pure functions, no I/O.

pub mod analysis;
pub mod classify;
pub mod cypher;
pub mod fingerprint;
pub(crate) mod lexer;
pub mod words;
