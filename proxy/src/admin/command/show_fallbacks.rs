//! SHOW FALLBACKS: why features stepped aside, with counts.

use bytes::BytesMut;

use super::table::{cell, table};
use crate::shared::Shared;

pub const SYNTAX: &str = "SHOW FALLBACKS";
pub const ABOUT: &str = "why features stepped aside, with counts";

pub fn run(shared: &Shared, out: &mut BytesMut) {
    let rows = shared
        .stats
        .fallback_reasons()
        .into_iter()
        .map(|(r, n)| vec![cell(r), cell(n)])
        .collect();
    table(out, &["reason", "count"], rows);
}
