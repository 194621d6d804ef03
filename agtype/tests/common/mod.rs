//! Loading the AGE-produced vectors shared with the rest of the project.

use std::path::PathBuf;

pub fn testdata_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/testdata/agtype");
    if dir.join("vectors.jsonl").is_file() {
        Some(dir)
    } else {
        println!("skipped: agtype vectors not found at {}", dir.display());
        None
    }
}

pub fn read_jsonl(name: &str) -> Option<Vec<serde_json::Value>> {
    let path = testdata_dir()?.join(name);
    let text = std::fs::read_to_string(&path).ok()?;
    Some(
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("vector line is JSON"))
            .collect(),
    )
}

pub fn hex(s: &str) -> Vec<u8> {
    agtype::lines::from_hex(s).expect("vector hex")
}
