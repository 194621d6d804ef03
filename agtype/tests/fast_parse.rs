//! `parse` takes a fast path for well-formed text and falls back to the
//! reference parser (PostgreSQL's lexer token by token) for everything
//! else. The two must agree on every input: same value, same error.

mod common;

use agtype::fuzzing::parse_reference;
use agtype::parse;
use proptest::prelude::*;

fn agree(s: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(parse(s), parse_reference(s), "input {:?}", s);
    Ok(())
}

#[test]
fn every_vector_parses_the_same_both_ways() {
    for v in common::read_jsonl("vectors.jsonl") {
        let input = v["text_in"].as_str().expect("text_in");
        assert_eq!(parse(input), parse_reference(input), "input {input:?}");
        if let Some(out) = v["text_out"].as_str() {
            assert_eq!(parse(out), parse_reference(out), "output {out:?}");
        }
    }
}

fn number() -> impl Strategy<Value = String> {
    "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{0,24})?([eE][+-]?[0-9]{0,4})?[a-z_]?"
}

fn string() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[a-zé😀 /]{1,4}",
            Just("\\\"".to_owned()),
            Just("\\\\".to_owned()),
            "\\\\[bfnrt/x0]",
            "\\\\u[0-9a-fA-F]{4}",
            "\\\\u[dD][89abAB][0-9a-f]{2}(\\\\u[dD][c-fC-F][0-9a-f]{2})?",
            "\\\\u00[0-1][0-9a-f]",
            "[\\x00-\\x1f]",
        ],
        0..6,
    )
    .prop_map(|parts| format!("\"{}\"", parts.concat()))
}

fn annotation() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just(String::new()),
        1 => "[ ]?::[ ]?(numeric|integer|float|vertex|edge|path|NUMERIC|foo|1|true)",
    ]
}

/// Text close to agtype: scalars (with and without annotations) nested in
/// arrays and objects, with random whitespace, and now and then a token
/// dropped or doubled.
fn document() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        (number(), annotation()).prop_map(|(n, a)| n + &a),
        (string(), annotation()).prop_map(|(s, a)| s + &a),
        "(true|false|null|NaN|-Infinity|inf|nul|truex)",
    ];
    scalar.prop_recursive(4, 48, 6, |inner| {
        let ws = "[ \\t\\n\\r]{0,2}";
        prop_oneof![
            (
                prop::collection::vec((ws, inner.clone()), 0..5),
                annotation(),
                any::<bool>()
            )
                .prop_map(|(items, a, trailing_comma)| {
                    let body: Vec<String> = items.into_iter().map(|(w, v)| w + &v).collect();
                    let comma = if trailing_comma && !body.is_empty() {
                        ","
                    } else {
                        ""
                    };
                    format!("[{}{comma}]{a}", body.join(","))
                }),
            (
                prop::collection::vec((string(), ws, inner), 0..5),
                annotation()
            )
                .prop_map(|(pairs, a)| {
                    let body: Vec<String> = pairs
                        .into_iter()
                        .map(|(k, w, v)| format!("{k}{w}:{v}"))
                        .collect();
                    format!("{{{}}}{a}", body.join(", "))
                }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn documents_parse_the_same_both_ways(d in document()) {
        agree(&d)?;
    }

    #[test]
    fn numbers_parse_the_same_both_ways(n in number(), a in annotation()) {
        agree(&n)?;
        agree(&format!("[{n}{a}]"))?;
    }

    #[test]
    fn strings_parse_the_same_both_ways(s in string()) {
        agree(&s)?;
        agree(&format!("{{{s}: {s}}}"))?;
    }

    #[test]
    fn token_soup_parses_the_same_both_ways(s in "[\\[\\]{}\",:0-9eE.+\\- \\\\ntrufalsNI]{0,30}") {
        agree(&s)?;
    }

    #[test]
    fn floats_parse_exactly(bits in any::<u64>()) {
        let f = f64::from_bits(bits);
        prop_assume!(f.is_finite());
        for text in [format!("{f:e}"), format!("{f:?}"), agtype::format_float(f)] {
            agree(&text)?;
            if let Ok(agtype::Value::Float(g)) = parse(&text) {
                prop_assert_eq!(g.to_bits(), f.to_bits(), "{}", text);
            }
        }
    }
}
