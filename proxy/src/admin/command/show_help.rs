//! SHOW HELP: every command, with what it answers.

use bytes::BytesMut;

use super::{
    Command,
    table::{cell, table},
};
use crate::shared::Shared;

pub const SYNTAX: &str = "SHOW HELP";
pub const ABOUT: &str = "this list";

pub fn run(_: &Shared, out: &mut BytesMut) {
    let rows = Command::ALL
        .iter()
        .map(|c| vec![cell(c.syntax()), cell(c.about())])
        .collect();
    table(out, &["command", "description"], rows);
}
