//! SHOW VERSION: onetrip's version.

use bytes::BytesMut;

use super::table::{cell, table};
use crate::shared::Shared;

pub const SYNTAX: &str = "SHOW VERSION";
pub const ABOUT: &str = "onetrip's version";

pub fn run(_: &Shared, out: &mut BytesMut) {
    let version = format!("onetrip {}", env!("CARGO_PKG_VERSION"));
    table(out, &["version"], vec![vec![cell(version)]]);
}
