//! Replays the seed corpora of the protocol fuzz targets (fuzz/corpus/
//! session, backend, startup) through the targets' bodies, plus inputs
//! made to hurt: nothing may panic. A missing corpus fails.

use onetrip::protocol::fuzzing::{fuzz_backend, fuzz_session, fuzz_startup};

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut n = 0;
    for e in entries.flatten() {
        let data = std::fs::read(e.path()).unwrap();
        body(&data);
        // Every prefix too: a conversation cut anywhere.
        for cut in (0..data.len()).step_by(7) {
            body(&data[..cut]);
        }
        n += 1;
    }
    n
}

#[test]
fn session_corpus_replays() {
    assert!(replay("session", fuzz_session) >= 10);
}

#[test]
fn backend_corpus_replays() {
    assert!(replay("backend", fuzz_backend) >= 10);
}

#[test]
fn startup_corpus_replays() {
    assert!(replay("startup", fuzz_startup) >= 4);
}

#[test]
fn hostile_streams_do_not_panic() {
    // Every flag combination with: declared lengths below the header's, a
    // huge declared length, unknown tags, a server that answers nothing
    // asked, and every menu message followed by garbage.
    let streams: Vec<Vec<u8>> = vec![
        [0x05, 0x0a, b'Q', 0, 0, 0, 2, b'x', 0, 0, 0, 0].to_vec(),
        [0x05, 0x05, b'Q', 0x7f, 0xff, 0xff, 0xff].to_vec(),
        [0x05, 0x85, b'Z', 0, 0, 0, 5, b'I'].to_vec(),
        [0x05, 0x86, b'!', 0, 0, 0, 5, b'I', 0].to_vec(),
        [0x05, 0x8a, b'C', 0, 0, 0, 9, b'S', b'E', b'L', 0xff, 0].to_vec(),
    ];
    for flags in 0..128u8 {
        for s in &streams {
            let mut s = s.clone();
            s[0] = flags;
            fuzz_session(&s);
        }
        let menu: Vec<u8> = std::iter::once(flags)
            .chain(
                (0x80..=0xffu8).flat_map(|k| [k, 6, b'Z', 0, 0, 0, 5, b'I', 3, b'x', b'y', b'z']),
            )
            .collect();
        fuzz_backend(&menu);
    }
    fuzz_startup(&[0, 0, 0, 8, 0, 3, 0, 0]);
    fuzz_startup(&[0xff; 64]);
}
