//! Property: any string literal written in Cypher reaches the compiled SQL
//! as exactly the same agtype string value, whatever quotes, backslashes,
//! dollar signs or Unicode it holds, and nothing else in the SQL changes.

use onetrip_planner::cypher::{Catalog, Rewrite, RewriteOptions, rewrite_sql};
use proptest::prelude::*;

/// The Cypher spelling of `s` as a single-quoted literal.
fn cypher_quote(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Reads one SQL string constant (`'..'` or `E'..'`) at the start of
/// `sql`; returns its value and the rest.
fn read_sql_string(sql: &str) -> (String, &str) {
    let (escape, body) = match sql.strip_prefix("E'") {
        Some(rest) => (true, rest),
        None => (false, sql.strip_prefix('\'').expect("string constant")),
    };
    let mut out = String::new();
    let mut it = body.char_indices();
    while let Some((i, c)) = it.next() {
        match c {
            '\'' if body[i + 1..].starts_with('\'') => {
                out.push('\'');
                it.next();
            }
            '\'' => return (out, &body[i + 1..]),
            '\\' if escape => {
                let (_, n) = it.next().expect("escaped char");
                assert_eq!(n, '\\', "only doubled backslashes are emitted");
                out.push('\\');
            }
            c => out.push(c),
        }
    }
    panic!("unterminated SQL string in {sql}");
}

/// A dollar-quote tag that does not occur in `s`.
fn tag_for(s: &str) -> String {
    (0..)
        .map(|i| format!("$q{i}$"))
        .find(|t| !s.contains(t.as_str()))
        .expect("some tag is free")
}

fn strings() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(
            prop_oneof![
                Just("'".to_string()),
                Just("\\".to_string()),
                Just("$$".to_string()),
                Just("\"".to_string()),
                Just("\n".to_string()),
                Just("é🎉".to_string()),
                Just("%_".to_string()),
                "[a-z ]{0,3}",
            ],
            0..12
        )
        .prop_map(|v| v.concat()),
    ]
    .prop_filter("NUL is not valid in PostgreSQL text", |s| !s.contains('\0'))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn cypher_string_literals_survive_compilation(s in strings()) {
        let cypher = format!("MATCH (n) RETURN {}", cypher_quote(&s));
        let tag = tag_for(&cypher);
        let sql = format!("SELECT * FROM cypher('g', {tag}{cypher}{tag}) AS (v agtype)");
        let Rewrite::Rewritten(out) = rewrite_sql(&sql, &Catalog::assume_all(), &RewriteOptions::default()) else {
            panic!("not rewritten: {sql}");
        };
        let inner = out
            .strip_prefix("SELECT * FROM (SELECT ")
            .expect("compiled subquery");
        let (text, rest) = read_sql_string(inner);
        prop_assert_eq!(rest, "::agtype AS c1 FROM \"g\".\"_ag_label_vertex\" AS _n0) AS cypher(v)");
        let value = agtype::parse(&text).expect("valid agtype text");
        prop_assert_eq!(value, agtype::Value::String(s));
    }

    #[test]
    fn cypher_string_in_where_is_one_constant(s in strings()) {
        // Equality becomes containment: the string is a value of one map constant.
        let out = rewritten(&format!("MATCH (n:P) WHERE n.name = {} RETURN n.id", cypher_quote(&s)));
        let marker = "properties @> ";
        let at = out.find(marker).expect("containment") + marker.len();
        let (text, rest) = read_sql_string(&out[at..]);
        prop_assert_eq!(rest, "::agtype)) AS cypher(v)");
        let map = agtype::parse(&text).expect("agtype");
        prop_assert_eq!(map.get("name"), Some(&agtype::Value::String(s.clone())));
        prop_assert_eq!(map.len(), Some(1));

        // An ordering comparison keeps the string as one agtype constant.
        let out = rewritten(&format!("MATCH (n:P) WHERE n.name < {} RETURN n.id", cypher_quote(&s)));
        let marker = "'name'::text) < ";
        let at = out.find(marker).expect("comparison") + marker.len();
        let (text, rest) = read_sql_string(&out[at..]);
        prop_assert_eq!(rest, "::agtype)) AS cypher(v)");
        prop_assert_eq!(agtype::parse(&text).expect("agtype"), agtype::Value::String(s));
    }
}

fn rewritten(cypher: &str) -> String {
    let tag = tag_for(cypher);
    let sql = format!("SELECT * FROM cypher('g', {tag}{cypher}{tag}) AS (v agtype)");
    match rewrite_sql(&sql, &Catalog::assume_all(), &RewriteOptions::default()) {
        Rewrite::Rewritten(out) => out,
        _ => panic!("not rewritten: {sql}"),
    }
}
