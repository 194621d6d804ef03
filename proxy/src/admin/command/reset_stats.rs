//! RESET STATS: zero every counter.

use bytes::BytesMut;

use crate::{shared::Shared, wire::write};

pub const SYNTAX: &str = "RESET STATS";
pub const ABOUT: &str = "zero every counter";

pub fn run(shared: &Shared, out: &mut BytesMut) {
    shared.stats.reset();
    write::command_complete(out, "RESET");
}
