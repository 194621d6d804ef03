//! Replays the `analyze` fuzz seed corpus (fuzz/corpus/analyze) through the
//! target's body, plus hostile texts: nothing may panic. A missing corpus
//! fails.

use onetrip_planner::analysis::fuzzing::fuzz_analyze;

#[test]
fn analyze_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/analyze");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut n = 0;
    for e in entries.flatten() {
        let data = std::fs::read(e.path()).unwrap();
        for cut in 0..=data.len() {
            fuzz_analyze(&data[..cut]);
        }
        n += 1;
    }
    assert!(n >= 10, "{n} seeds in {}", dir.display());
}

#[test]
fn hostile_texts_do_not_panic() {
    for text in [
        "(".repeat(10_000),
        "/*".repeat(5_000),
        "$a$".repeat(3_000),
        "'".repeat(1_001),
        "select 1; ".repeat(10_000),
        "explain (analyse, analyse, ".repeat(1_000),
        "\u{0}\u{ffff}é$$\\'\"".repeat(100),
    ] {
        fuzz_analyze(text.as_bytes());
    }
}
