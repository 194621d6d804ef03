//! Which expressions aggregate: `count(*)` and calls of AGE's aggregate
//! functions. Apart from `expr` and `functions`, which both ask it.

use super::super::ast::*;

/// The aggregate functions, by lower-case name.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "collect",
    "stdev",
    "stdevp",
    "percentilecont",
    "percentiledisc",
];

pub(super) fn contains_aggregate(e: &Expr) -> bool {
    let mut found = false;
    e.walk(&mut |x| {
        if is_aggregate(x) {
            found = true;
        }
    });
    found
}

pub(super) fn is_aggregate(e: &Expr) -> bool {
    match e {
        Expr::CountStar => true,
        Expr::Function { name, .. } => AGGREGATES.contains(&name.to_ascii_lowercase().as_str()),
        _ => false,
    }
}

/// Whether a variable occurs outside every aggregate call: such an item
/// would need grouping keys that SQL and AGE choose differently.
pub(super) fn var_outside_aggregate(e: &Expr) -> bool {
    let mut found = false;
    e.walk_pruned(&mut |x| {
        if matches!(x, Expr::Var(_)) {
            found = true;
        }
        !is_aggregate(x)
    });
    found
}
