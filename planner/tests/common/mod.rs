//! The catalog and compile call the golden tests share.

use onetrip_planner::cypher::{Catalog, DeclineReason, LabelKind, compile_cypher, parse};

/// Graph `g` (oid 42) with vertex labels Person and City, edge labels
/// KNOWS and LIVES_IN.
pub fn catalog() -> Catalog {
    let mut cat = Catalog::new();
    cat.add_graph("g", "g", 42);
    for (l, k) in [
        ("Person", LabelKind::Vertex),
        ("City", LabelKind::Vertex),
        ("KNOWS", LabelKind::Edge),
        ("LIVES_IN", LabelKind::Edge),
    ] {
        cat.add_label("g", l, k, &format!("g.\"{l}\""));
    }
    cat
}

/// Columns of the last RETURN (1 when it can't be told).
pub fn width(q: &str) -> usize {
    use onetrip_planner::cypher::ast::Clause;
    match parse(q)
        .ok()
        .and_then(|st| st.parts[0].clauses.last().cloned())
    {
        Some(Clause::Return(p)) => p.items.len(),
        _ => 1,
    }
}

/// `q` compiled against [`catalog`], with `$1` as the parameter argument
/// when `q` names a parameter.
pub fn compile(q: &str) -> Result<String, DeclineReason> {
    let g = catalog().graph("g").expect("graph");
    let params = q.contains('$').then_some("$1");
    compile_cypher(q, &g, false, params, width(q))
}

/// Checks each (query, SQL) pair; prints every mismatch before failing.
pub fn check_golden(cases: &[(&str, &str)]) {
    let mut bad = Vec::new();
    for (q, want) in cases {
        let got = compile(q);
        if got.as_deref() != Ok(*want) {
            bad.push(format!("{q}\n  want: {want}\n  got:  {got:?}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
