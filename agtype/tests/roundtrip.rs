//! Property tests: text and binary round trips, and the borrowed view
//! agreeing with the owned value, over generated values.

use agtype::{
    AgtypeRef, Edge, Numeric, Object, Path, Value, Vertex, decode, encode, is_quirk_shape, parse,
};
use proptest::prelude::*;

fn numeric() -> impl Strategy<Value = Numeric> {
    prop_oneof![
        8 => ("-?", "[0-9]{1,30}", proptest::option::of("[0-9]{0,30}"), proptest::option::of(-300i32..300))
            .prop_map(|(sign, int, frac, exp)| {
                let mut s = format!("{sign}{int}");
                if let Some(f) = frac {
                    s.push('.');
                    s.push_str(&f);
                    if f.is_empty() {
                        s.push('0');
                    }
                }
                if let Some(e) = exp {
                    s.push_str(&format!("e{e}"));
                }
                Numeric::parse(&s).expect("generated numeric text is valid")
            }),
        1 => Just(Numeric::nan()),
        1 => any::<bool>().prop_map(Numeric::infinity),
    ]
}

fn text() -> impl Strategy<Value = String> + Clone {
    // Any characters but NUL, which agtype text cannot carry.
    prop_oneof![
        "[a-z]{0,6}",
        any::<String>().prop_map(|s| s.replace('\0', "")),
        "[\\u{1}-\\u{1f}\"\\\\/é日😀]{0,5}",
    ]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        prop::num::f64::ANY,
        Just(f64::NAN),
        Just(-0.0),
        (-1000i64..1000).prop_map(|i| i as f64),
    ]
    .prop_map(|f| if f.is_nan() { f64::NAN } else { f })
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Integer),
        float().prop_map(Value::Float),
        numeric().prop_map(Value::Numeric),
        text().prop_map(Value::String),
    ]
}

fn object_of(inner: impl Strategy<Value = Value> + Clone) -> impl Strategy<Value = Object> + Clone {
    prop::collection::vec((text(), inner), 0..12).prop_map(Object::from_iter)
}

fn vertex(props: impl Strategy<Value = Object>) -> impl Strategy<Value = Vertex> {
    (any::<i64>(), text(), props).prop_map(|(id, l, p)| Vertex::new(id, l, p))
}

fn edge(props: impl Strategy<Value = Object>) -> impl Strategy<Value = Edge> {
    (any::<i64>(), text(), any::<i64>(), any::<i64>(), props)
        .prop_map(|(id, l, s, e, p)| Edge::new(id, l, s, e, p))
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 64, 12, |inner| {
        let props = object_of(inner.clone());
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..12).prop_map(Value::Array),
            object_of(inner.clone()).prop_map(Value::Object),
            vertex(props.clone()).prop_map(Value::Vertex),
            edge(props.clone()).prop_map(Value::Edge),
            (
                vertex(props.clone()),
                prop::collection::vec((edge(props.clone()), vertex(props)), 0..3)
            )
                .prop_map(|(first, rest)| {
                    let mut items = vec![Value::Vertex(first)];
                    for (e, v) in rest {
                        items.push(Value::Edge(e));
                        items.push(Value::Vertex(v));
                    }
                    Value::Path(Path::try_from_values(items).expect("alternating path"))
                }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn text_round_trip(v in value()) {
        let t = v.to_string();
        let back = parse(&t).map_err(|e| TestCaseError::fail(format!("{t}: {e}")))?;
        prop_assert_eq!(&back, &v, "text {}", t);
        prop_assert_eq!(back.to_string(), t);
    }

    #[test]
    fn binary_round_trip(v in value()) {
        prop_assume!(!is_quirk_shape(&v));
        let bytes = encode(&v);
        prop_assert_eq!(decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?, v);
    }

    #[test]
    fn view_agrees_with_value(v in value()) {
        prop_assume!(!is_quirk_shape(&v));
        let bytes = encode(&v);
        let r = AgtypeRef::new(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        agtype::fuzzing::assert_view_agrees(&r, &v);
    }

    #[test]
    fn big_objects_use_binary_search_and_agree(keys in prop::collection::btree_set(text(), 0..80)) {
        let o: Object = keys.iter().enumerate().map(|(i, k)| (k.clone(), Value::from(i as i64))).collect();
        let v = Value::Object(o);
        let bytes = encode(&v);
        let r = AgtypeRef::new(&bytes).unwrap();
        let AgtypeRef::Object(obj) = r else { panic!("object view") };
        for k in &keys {
            let want = v.get(k).and_then(Value::as_i64);
            prop_assert_eq!(obj.get_linear(k).and_then(|x| x.as_i64()), want);
            prop_assert_eq!(obj.get_binary(k).and_then(|x| x.as_i64()), want);
        }
        prop_assert!(obj.get_binary("\u{1}missing").is_none(), "missing key found");
    }

    #[test]
    fn corrupting_bytes_never_panics(v in value(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = encode(&v);
        let i = at.index(bytes.len());
        bytes[i] = byte;
        agtype::fuzzing::binary(&bytes);
        agtype::fuzzing::view(&bytes);
        bytes.truncate(i);
        let _ = decode(&bytes);
        let _ = AgtypeRef::new(&bytes).map(|r| r.tokens().count());
    }
}

#[test]
fn nesting_up_to_the_limit_works_and_beyond_is_refused() {
    // Unoptimised builds use a few KB of stack per nesting level.
    std::thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(|| {
            let depth = agtype::MAX_DEPTH;
            let ok = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let v = parse(&ok).expect("MAX_DEPTH nested arrays parse");
            assert_eq!(v.to_string(), ok);
            let bytes = encode(&v);
            assert_eq!(decode(&bytes).unwrap(), v);
            let r = AgtypeRef::new(&bytes).unwrap();
            assert_eq!(r.tokens().count(), 2 * depth);
            let objects = format!("{}1{}", "{\"a\": ".repeat(depth), "}".repeat(depth));
            assert_eq!(parse(&objects).unwrap().to_string(), objects);

            let deep = format!("{}{}", "[".repeat(depth + 1), "]".repeat(depth + 1));
            let e = parse(&deep).unwrap_err();
            assert_eq!(e.message(), "stack depth limit exceeded");
            // Hand-build bytes one level deeper than the limit.
            let mut deeper = encode(&v);
            let mut wrapped = vec![0x01, 0, 0, 0x40, 0x08, 0, 0, 0xd0];
            wrapped.append(&mut deeper);
            assert!(decode(&wrapped).is_err());
            let unbounded = "[".repeat(1 << 20);
            assert!(parse(&unbounded).is_err());
        })
        .unwrap()
        .join()
        .unwrap();
}
