//! SHOW REWRITES: statements compiled, calls left to AGE by reason,
//! plans made and reused, and what else kept a statement from compiling.

use bytes::BytesMut;

use super::table::{cell, table};
use crate::{cypher_cache::DECLINED_PREFIX, shared::Shared};

pub const SYNTAX: &str = "SHOW REWRITES";
pub const ABOUT: &str = "compiled statements, declines by reason, plans reused, fallbacks";

pub fn run(shared: &Shared, out: &mut BytesMut) {
    let (made, reused) = shared.cypher.plan_counts();
    let mut rows = vec![
        vec![
            cell("rewritten"),
            None,
            cell(shared.stats.total().rewritten_queries),
        ],
        vec![cell("plans"), cell("made"), cell(made)],
        vec![cell("plans"), cell("reused"), cell(reused)],
    ];
    for (r, n) in shared.stats.fallback_reasons() {
        if let Some(result) = r.strip_prefix("cypher verify: ") {
            rows.push(vec![cell("verify"), cell(result), cell(n)]);
        } else if let Some(reason) = r.strip_prefix(DECLINED_PREFIX) {
            rows.push(vec![cell("declined"), cell(reason), cell(n)]);
        } else if r.starts_with("cypher") {
            rows.push(vec![cell("fallback"), cell(r), cell(n)]);
        }
    }
    table(out, &["outcome", "reason", "count"], rows);
}
