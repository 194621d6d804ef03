//! Every vector produced by a real AGE server (`tests/data/`) must pass.

mod common;

use agtype::{decode, encode, parse};
use common::{hex, read_jsonl};
use serde_json::Value as J;

fn s<'a>(v: &'a J, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_else(|| panic!("vector field {k}"))
}

#[test]
fn valid_vectors_print_encode_and_decode_like_age() {
    let vectors = read_jsonl("vectors.jsonl");
    let mut checked = 0;
    for v in vectors.iter().filter(|v| v["kind"] != "invalid") {
        let (input, out, bin) = (s(v, "text_in"), s(v, "text_out"), hex(s(v, "bin_hex")));
        let quirk = s(v, "kind").starts_with("quirk_");
        let value = parse(input).unwrap_or_else(|e| panic!("{input:?} rejected: {e}"));
        assert_eq!(encode(&value), bin, "bytes of {input:?}");
        // The predicate is conservative: every mis-read value has the shape,
        // but some values with the shape happen to read back intact.
        assert!(
            !quirk || agtype::is_quirk_shape(&value),
            "quirk shape of {input:?}"
        );
        let decoded = decode(&bin).unwrap_or_else(|e| panic!("{input:?} bytes: {e}"));
        assert_eq!(decoded.to_string(), out, "decoded text of {input:?}");
        if !quirk {
            assert_eq!(value.to_string(), out, "text of {input:?}");
            assert_eq!(decoded, value);
            assert_eq!(encode(&parse(out).expect("canonical text parses")), bin);
        }
        checked += 1;
    }
    println!("{checked} valid vectors passed");
    assert_eq!(checked, 481);
}

#[test]
fn invalid_vectors_are_rejected_with_ages_message() {
    let vectors = read_jsonl("vectors.jsonl");
    let mut checked = 0;
    for v in vectors.iter().filter(|v| v["kind"] == "invalid") {
        let input = s(v, "text_in");
        let Err(e) = parse(input) else {
            panic!("{input:?} accepted; AGE says {}", v["error"]);
        };
        assert_eq!(e.message(), s(v, "error"), "message for {input:?}");
        assert_eq!(
            e.detail(),
            v["error_detail"].as_str(),
            "detail for {input:?}"
        );
        assert_eq!(e.sqlstate(), s(v, "sqlstate"), "sqlstate for {input:?}");
        checked += 1;
    }
    println!("{checked} invalid vectors rejected with AGE's message");
    assert_eq!(checked, 103);
}

#[test]
fn unreadable_quirk_bytes_are_written_as_age_writes_and_refused() {
    let vectors = read_jsonl("quirk_unreadable.jsonl");
    assert_eq!(vectors.len(), 2);
    for v in &vectors {
        let input = s(v, "text_in");
        let value = parse(input).expect("AGE accepts this input");
        assert!(agtype::is_quirk_shape(&value));
        let bin = hex(s(v, "bin_hex"));
        assert_eq!(encode(&value), bin, "bytes of {input:?}");
        assert!(decode(&bin).is_err(), "AGE cannot read {input:?} back");
    }
}
