//! Bodies of the fuzz targets in `fuzz/`, kept here so that the stable test
//! suite can replay the fuzz corpora through exactly the same code. Each
//! function panics only when it finds a bug.

use crate::{AgtypeRef, Token, Value, decode, encode, is_quirk_shape, parse};

/// Text: parsing never panics; accepted text prints to canonical text that
/// parses back to the same value and prints identically, and the value
/// survives the binary round trip unless it has AGE's quirk shape.
pub fn text(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = parse(s);
    assert_eq!(
        parsed,
        parse_reference(s),
        "fast and reference parsers on {s:?}"
    );
    let Ok(v) = parsed else {
        return;
    };
    check_value(&v);
}

/// The reference parser alone (PostgreSQL's lexer token by token), which
/// [`parse`] falls back to; for tests that compare the two.
pub fn parse_reference(s: &str) -> Result<Value, crate::ParseError> {
    crate::text::parse_reference(s)
}

/// Binary: decoding never panics; a decoded value prints to text that
/// parses back to it, and re-encoding is stable.
pub fn binary(data: &[u8]) {
    let Ok(v) = decode(data) else {
        return;
    };
    check_value(&v);
}

/// View: no accessor panics on any bytes; when the bytes are exactly what
/// `encode` writes for their decoded value, the view agrees with it.
pub fn view(data: &[u8]) {
    let Ok(r) = AgtypeRef::new(data) else {
        return;
    };
    let _ = r.len();
    for i in [-2, -1, 0, 1, 7, i64::MIN, i64::MAX] {
        let _ = r.index(i);
    }
    for k in ["", "a", "id", "properties", "key00"] {
        let _ = r.get(k);
    }
    for t in r.tokens() {
        match t {
            Ok(Token::Value(v)) => {
                let _ = (v.as_str(), v.len(), v.get("a"), v.index(-1));
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let Ok(v) = decode(data) else {
        return;
    };
    if encode(&v) != data {
        return;
    }
    assert_view_agrees(&r, &v);
}

fn check_value(v: &Value) {
    let t = v.to_string();
    let back = parse(&t).unwrap_or_else(|e| panic!("printed text {t:?} does not parse: {e}"));
    assert_eq!(
        Ok(&back),
        parse_reference(&t).as_ref(),
        "reference parser on {t:?}"
    );
    assert_eq!(&back, v, "text round trip of {t}");
    assert_eq!(back.to_string(), t);
    let bytes = encode(v);
    let view = AgtypeRef::new(&bytes).expect("view of encoded bytes");
    if !is_quirk_shape(v) {
        assert_eq!(&decode(&bytes).expect("decode of encoded bytes"), v);
        assert_view_agrees(&view, v);
    }
}

/// Asserts that the view and the owned value agree on `len`, `get`,
/// `index` and content. Linear in the size of `v`.
pub fn assert_view_agrees(r: &AgtypeRef<'_>, v: &Value) {
    assert_eq!(&r.to_value().expect("view decodes"), v);
    agrees(r, v);
}

fn agrees(r: &AgtypeRef<'_>, v: &Value) {
    assert_eq!(r.len(), v.len(), "len of {v}");
    match v {
        Value::String(s) => assert_eq!(r.as_str(), Some(s.as_str())),
        Value::Integer(i) => assert_eq!(r.as_i64(), Some(*i)),
        Value::Object(o) => {
            for (k, child) in o.iter() {
                agrees(
                    &r.get(k).unwrap_or_else(|| panic!("key {k:?} missing")),
                    child,
                );
            }
            let probe = "\u{1}probe";
            assert_eq!(r.get(probe).is_some(), o.get(probe).is_some());
        }
        Value::Vertex(_) | Value::Edge(_) => {
            let props = match v {
                Value::Vertex(x) => x.properties(),
                Value::Edge(x) => x.properties(),
                _ => unreachable!("matched above"),
            };
            for (k, child) in props.iter() {
                agrees(&r.get(k).expect("property present"), child);
            }
        }
        Value::Array(_) | Value::Path(_) => {
            let n = v.len().unwrap_or(0) as i64;
            for i in 0..n {
                let here = r.index(i).expect("index in range");
                agrees(&here, v.index(i).expect("in range"));
                // A negative index must land on the same element.
                let from_end = r.index(i - n).expect("negative index in range");
                assert_eq!(from_end.len(), here.len());
                assert_eq!(from_end.as_str(), here.as_str());
                assert_eq!(from_end.as_i64(), here.as_i64());
            }
            assert!(r.index(n).is_none() && r.index(-n - 1).is_none());
        }
        _ => {}
    }
}
