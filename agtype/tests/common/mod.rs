//! Loading the AGE-produced vectors kept in `tests/data/` (see its
//! PROVENANCE.md). A missing or unreadable file fails the test.

use std::path::PathBuf;

pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

pub fn read_jsonl(name: &str) -> Vec<serde_json::Value> {
    let path = data_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("test data {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("vector line is JSON"))
        .collect()
}

#[allow(dead_code)] // not every test file decodes bytes
pub fn hex(s: &str) -> Vec<u8> {
    agtype::lines::from_hex(s).expect("vector hex")
}
