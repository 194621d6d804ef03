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
    for flags in 128..=255u8 {
        for s in &streams {
            let mut s = s.clone();
            s[0] = flags;
            fuzz_session(&s);
        }
    }
    fuzz_startup(&[0, 0, 0, 8, 0, 3, 0, 0]);
    fuzz_startup(&[0xff; 64]);
}

/// One message: tag, length, body.
fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A chunk of `fuzz_session`'s input: `from_server`'s bit and the length.
fn chunk(out: &mut Vec<u8>, from_server: bool, bytes: &[u8]) {
    for part in bytes.chunks(126) {
        out.push(part.len() as u8 | if from_server { 0x80 } else { 0 });
        out.extend_from_slice(part);
    }
}

#[test]
fn pooled_sessions_with_sql_prepared_statements_do_not_panic() {
    const TEXTS: [&str; 14] = [
        "PREPARE p (int) AS SELECT $1",
        "PREPARE p AS SELECT 1",
        "  prepare \"Q\" as select * from t where a = $1;",
        "EXECUTE p(1)",
        "EXECUTE p",
        "execute \"Q\"('x'); select 1",
        "DEALLOCATE p",
        "DEALLOCATE PREPARE \"Q\"",
        "DEALLOCATE ALL",
        "EXPLAIN EXECUTE p",
        "BEGIN",
        "COMMIT",
        "SELECT 1/0; EXECUTE p",
        "PREPARE",
    ];
    let client = |k: u64| -> Vec<u8> {
        let text = TEXTS[(k % TEXTS.len() as u64) as usize];
        let cstr = |v: &mut Vec<u8>, s: &str| {
            v.extend_from_slice(s.as_bytes());
            v.push(0);
        };
        let mut body = Vec::new();
        match (k / TEXTS.len() as u64) % 6 {
            0 | 1 => {
                cstr(&mut body, text);
                msg(b'Q', &body)
            }
            2 => {
                cstr(&mut body, "p");
                cstr(&mut body, text);
                body.extend_from_slice(&[0, 0]);
                msg(b'P', &body)
            }
            3 => {
                cstr(&mut body, "");
                cstr(&mut body, "p");
                body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
                msg(b'B', &body)
            }
            4 => {
                body.push(b'S');
                cstr(&mut body, "p");
                msg(if k & 1 == 0 { b'D' } else { b'C' }, &body)
            }
            _ => msg(b'S', &[]),
        }
    };
    // Single messages, and whole answers as the server gives them (to a
    // PREPARE, to a Describe and Sync of the proxy's own, to a Close,
    // Parse and Sync, to an EXECUTE that fails).
    let server = |k: u64| -> Vec<u8> {
        match k % 17 {
            12 => [msg(b'C', b"PREPARE\0"), msg(b'Z', b"I")].concat(),
            13 => [
                msg(b't', &[0, 1, 0, 0, 0, 23]),
                msg(b'n', &[]),
                msg(b'Z', b"I"),
            ]
            .concat(),
            14 => [msg(b'3', &[]), msg(b'1', &[]), msg(b'Z', b"I")].concat(),
            15 => [
                msg(b'3', &[]),
                msg(b'E', b"SERROR\0C42P01\0Mgone\0P3\0\0"),
                msg(b'Z', b"I"),
            ]
            .concat(),
            16 => [msg(b'E', b"SERROR\0C26000\0Mno\0\0"), msg(b'Z', b"T")].concat(),
            0 => msg(b'Z', b"I"),
            1 => msg(b'Z', b"T"),
            2 => msg(b'Z', b"E"),
            3 => msg(b'C', b"PREPARE\0"),
            4 => msg(b'C', b"DEALLOCATE ALL\0"),
            5 => msg(b'1', &[]),
            6 => msg(b'3', &[]),
            7 => msg(b't', &[0, 1, 0, 0, 0, 23]),
            8 => msg(b'n', &[]),
            9 => msg(b'E', b"SERROR\0C26000\0Mno\0\0"),
            10 => msg(b'E', b"SERROR\0C42P01\0Mgone\0P12\0\0"),
            _ => msg(b'C', b"SELECT 1\0"),
        }
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..20000 {
        let flags = 0x80 | (round as u8 & 0x4f);
        let mut input = vec![flags];
        for _ in 0..(next() % 40) {
            let k = next();
            match k % 3 {
                0 => chunk(&mut input, true, &server(k >> 2)),
                _ => chunk(&mut input, false, &client(k >> 2)),
            }
        }
        fuzz_session(&input);
    }
}
