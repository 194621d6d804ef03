//! Fingerprints never panic, stay short, and ignore literal values and spacing.

use onetrip_planner::classify::classify;
use onetrip_planner::fingerprint::{Literals, MAX_FINGERPRINT_LEN, fingerprint, same_but_literals};
use proptest::prelude::*;

/// SQL-ish fragments, so that generated strings hit quotes, comments and dollar quotes often.
const PIECES: &[&str] = &[
    "select",
    " ",
    "'",
    "''",
    "\"",
    "$$",
    "$a$",
    "$1",
    "--",
    "\n",
    "/*",
    "*/",
    "e'",
    "\\",
    ";",
    "(",
    ")",
    "1.5e3",
    "x",
    "é",
    "::",
    "u&'",
    "for no key update",
    ") as (",
    "table",
    "begin",
    "atomic",
    "end",
    "case",
    "nextval(",
    "cypher('g', ",
    "isolation level serializable",
];

fn sqlish() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn never_panics(sql in prop_oneof![sqlish(), any::<String>()]) {
        let f = fingerprint(&sql);
        prop_assert!(f.len() <= MAX_FINGERPRINT_LEN);
        let c = classify(&sql);
        prop_assert!(!c.reason.is_empty());
    }

    #[test]
    fn literals_do_not_matter(
        n in any::<i64>(),
        s in "[a-z' ]{0,20}",
        ws in "[ \t\n]{1,3}",
    ) {
        let quoted = s.replace('\'', "''");
        let a = format!("SELECT a FROM t WHERE b = {n} AND c = '{quoted}'");
        let b = format!("select{ws}a from t{ws}where b = 0 and c = $${s}$$");
        prop_assert_eq!(fingerprint(&a), fingerprint(&b));
    }

    /// The quick comparison never groups two texts whose fingerprints differ,
    /// and finds the same statement with new literals the same.
    #[test]
    fn same_but_literals_only_when_fingerprints_agree(
        a in sqlish(),
        b in sqlish(),
        n in any::<u32>(),
        m in any::<u32>(),
        s in "[a-z' ]{0,12}",
    ) {
        if same_but_literals(&a, &b) {
            prop_assert_eq!(fingerprint(&a), fingerprint(&b));
        }
        // The segment-wise comparison answers as the walk over both does.
        let mut lits = Literals::default();
        lits.find(&a);
        prop_assert_eq!(lits.same_shape(&a, &b), same_but_literals(&a, &b), "{:?} {:?}", a, b);
        let base = format!("{a} {n}{b}");
        let other = format!("{a} {m}{b}");
        if same_but_literals(&base, &other) {
            prop_assert_eq!(fingerprint(&base), fingerprint(&other));
        }
        let q = s.replace('\'', "''");
        let x = format!("select f(x) from t where a = {n} and b = '{q}'");
        let y = format!("select f(x) from t where a = {m} and b = 'z'");
        prop_assert!(same_but_literals(&x, &y), "{} {}", x, y);
        lits.find(&x);
        prop_assert!(lits.same_shape(&x, &y), "{} {}", x, y);
        prop_assert!(lits.same_shape(&y, &x), "{} {}", y, x);
        lits.find(&base);
        prop_assert_eq!(lits.same_shape(&base, &other), same_but_literals(&base, &other));
        prop_assert_eq!(fingerprint(&x), fingerprint(&y));
    }
}
