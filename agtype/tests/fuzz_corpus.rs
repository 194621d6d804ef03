//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) through the
//! same functions the cargo-fuzz targets call, so stable CI covers them.

use std::path::PathBuf;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("fuzz corpus {}: {e}", dir.display()));
    let mut files: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    assert!(!files.is_empty(), "fuzz corpus {} is empty", dir.display());
    for path in &files {
        let data = std::fs::read(path).expect("corpus file is readable");
        if std::env::var_os("AGTYPE_REPLAY_VERBOSE").is_some() {
            eprintln!("{}", path.display());
        }
        run(&data);
    }
    println!("{target}: replayed {} inputs", files.len());
}

#[test]
fn agtype_text_corpus() {
    replay("agtype_text", agtype::fuzzing::text);
}

#[test]
fn agtype_binary_corpus() {
    replay("agtype_binary", agtype::fuzzing::binary);
}

#[test]
fn agtype_view_corpus() {
    replay("agtype_view", agtype::fuzzing::view);
}
