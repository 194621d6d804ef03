//! SHOW REWRITES: rewritten queries and rewrite fallbacks.

use bytes::BytesMut;

use super::table::{cell, table};
use crate::shared::Shared;

pub const SYNTAX: &str = "SHOW REWRITES";
pub const ABOUT: &str = "rewritten queries and rewrite fallbacks";

pub fn run(shared: &Shared, out: &mut BytesMut) {
    let mut rows = vec![vec![
        cell("rewritten"),
        None,
        cell(shared.stats.total().rewritten_queries),
    ]];
    for (r, n) in shared.stats.fallback_reasons() {
        if let Some(result) = r.strip_prefix("cypher verify: ") {
            rows.push(vec![cell("verify"), cell(result), cell(n)]);
        } else if r.starts_with("cypher") {
            rows.push(vec![cell("fallback"), cell(r), cell(n)]);
        }
    }
    table(out, &["outcome", "reason", "count"], rows);
}
