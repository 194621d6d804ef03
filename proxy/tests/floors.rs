//! The floors of `proxy/src` (ARCHITECTURE.md, "Rooms"): a room imports
//! only rooms on its own floor or below. This reads every `crate::` path
//! of the library's code (tests left out) and fails on one that reaches up,
//! naming the file, the room it reaches and both floors. And the protocol's
//! bytes are written and read in `wire/` only.

use std::path::{Path, PathBuf};

/// From the ground up; each floor's rooms, as the first part of a path
/// under `src/` (a file, or a folder). The same table as ARCHITECTURE.md.
const FLOORS: &[&[&str]] = &[
    &["config", "stats", "timers", "net", "worker"],
    &["wire"],
    &["cancel", "auth"],
    &["cypher_cache", "replicas"],
    &["protocol"],
    &["kept", "pooling", "shared", "reload", "metrics"],
    &["relay"],
    &["admin"],
    &["session"],
    &["server", "lib"],
];

fn floor_of(room: &str) -> Option<usize> {
    FLOORS.iter().position(|rooms| rooms.contains(&room))
}

/// The room a file under `src/` is in: its first path part, without `.rs`.
fn room_of(rel: &Path) -> String {
    let first = rel.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_owned()
}

/// The code of a file without its tests: what follows `#[cfg(test)]` is a
/// test module (each file keeps its tests last).
fn library_code(text: &str) -> &str {
    match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// The rooms a text names through `crate::`: `crate::a::b` names `a`,
/// `crate::{a::b, c}` names `a` and `c`. Comments are left out.
fn rooms_named(code: &str) -> Vec<String> {
    let code: String = code
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        // `onetrip_crate::` or `$crate::` is not this crate's path.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest_trim = rest.trim_start();
        if let Some(group) = rest_trim.strip_prefix('{') {
            // Top-level items of the group.
            let mut depth = 0;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                    _ => {}
                }
                if depth == 0 && c != ',' {
                    item.push(c);
                }
            }
            items.push(item);
            for it in items {
                let name: String = it
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let name: String = rest_trim
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_room_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    let mut read = 0;
    for path in &files {
        let rel = path.strip_prefix(&src).unwrap();
        // The command is above the library; a test module's file is a test.
        if rel.starts_with("bin") || rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let room = room_of(rel);
        let floor = floor_of(&room)
            .unwrap_or_else(|| panic!("{}: room {room} is on no floor of FLOORS", rel.display()));
        let text = std::fs::read_to_string(path).unwrap();
        read += 1;
        for named in rooms_named(library_code(&text)) {
            // `crate::Proxy` and the like: items of lib.rs itself.
            let Some(to) = floor_of(&named) else {
                continue;
            };
            if to > floor {
                wrong.push(format!(
                    "{} (room {room}, floor {floor}) imports {named} (floor {to})",
                    rel.display()
                ));
            }
        }
    }
    assert!(read > 50, "only {read} files read under {}", src.display());
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports that reach a floor above:\n{}",
        wrong.join("\n")
    );
}

/// Big-endian integers put or read by hand: protocol bytes.
const BYTE_WORK: &[&str] = &[
    "put_u8(",
    "put_i16(",
    "put_u16(",
    "put_i32(",
    "put_u32(",
    "to_be_bytes(",
    "from_be_bytes(",
];

#[test]
fn protocol_bytes_are_made_and_read_in_wire_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&src).unwrap();
        // The fuzzing entry turns random input into messages to replay.
        if rel.starts_with("wire")
            || rel.starts_with("bin")
            || rel.ends_with("protocol/fuzzing.rs")
            || rel.file_name().is_some_and(|n| n == "tests.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for (n, line) in library_code(&text).lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if BYTE_WORK.iter().any(|w| code.contains(w)) {
                wrong.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "protocol bytes outside wire/ (add a function there):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_sees_grouped_and_plain_paths() {
    let code = "use crate::{\n    config::Config, // crate::admin\n    wire::{self, backend},\n};\nlet x = crate::shared::Shared::new(); $crate::nope; my_crate::nope;";
    assert_eq!(rooms_named(code), ["config", "wire", "shared"]);
    assert_eq!(
        library_code("a\n#[cfg(test)]\nmod tests { crate::x }"),
        "a\n"
    );
}
