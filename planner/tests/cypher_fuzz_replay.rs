//! Replays the `cypher_parse` fuzz seed corpus (fuzz/corpus/cypher_parse)
//! plus hostile inputs through the fuzz target body: nothing may panic. A
//! missing or empty corpus fails.

use onetrip_planner::cypher::fuzzing::fuzz_cypher_parse;

#[test]
fn cypher_fuzz_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/cypher_parse");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut n = 0;
    for e in entries.flatten() {
        let data = std::fs::read(e.path()).unwrap_or_else(|err| panic!("{:?}: {err}", e.path()));
        fuzz_cypher_parse(&data);
        n += 1;
    }
    // A corpus gone missing or emptied fails rather than replaying nothing.
    assert!(n >= 10, "{n} seeds in {}", dir.display());
}

#[test]
fn cypher_hostile_inputs_do_not_panic() {
    let deep_parens = format!("RETURN {}1{}", "(".repeat(10_000), ")".repeat(10_000));
    let deep_maps = format!("RETURN {}{}", "{a:".repeat(5_000), "}".repeat(5_000));
    let deep_index = format!("MATCH (n) RETURN n{}", "[0]".repeat(10_000));
    let deep_props = format!("MATCH (n) RETURN n{}", ".a".repeat(10_000));
    let deep_not = format!("MATCH (n) WHERE {} true RETURN n", "NOT ".repeat(10_000));
    let long_chain = format!("MATCH (a){} RETURN a", "-[:R]->()".repeat(2_000));
    let patterns = format!("MATCH (n) WHERE {} RETURN n", "(n)-->(".repeat(3_000));
    let long_sum = format!("RETURN 1{}", " + 1".repeat(100_000));
    let long_and = format!("MATCH (n) WHERE n.a{} RETURN n", " AND n.a".repeat(100_000));
    let long_cmp = format!("RETURN 1{}", " < 1".repeat(100_000));
    let long_is_null = format!("RETURN 1{}", " IS NULL".repeat(100_000));
    let inputs: Vec<Vec<u8>> = vec![
        long_sum.into_bytes(),
        long_and.into_bytes(),
        long_cmp.into_bytes(),
        long_is_null.into_bytes(),
        deep_parens.into_bytes(),
        deep_maps.into_bytes(),
        deep_index.into_bytes(),
        deep_props.into_bytes(),
        deep_not.into_bytes(),
        long_chain.into_bytes(),
        patterns.into_bytes(),
        b"\xff\xfe".to_vec(),
        b"RETURN '\\u".to_vec(),
        b"RETURN '\\ud800'".to_vec(),
        b"MATCH (a)<-->(b) RETURN a".to_vec(),
        b"MATCH (a)-[*..]->(b) RETURN a".to_vec(),
        b"RETURN 1 LIMIT -9223372036854775807".to_vec(),
        b"SELECT * FROM cypher('g', $$".to_vec(),
        b"SELECT * FROM cypher('g', $$ $$) AS (".to_vec(),
        b"SELECT * FROM cypher(".to_vec(),
        b"/* /* */ SELECT * FROM cypher('g', $a$ x $a$) AS t(".to_vec(),
        "RETURN 'é\u{0}'".as_bytes().to_vec(),
    ];
    for i in inputs {
        fuzz_cypher_parse(&i);
    }
}
