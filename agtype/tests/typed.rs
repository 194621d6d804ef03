//! Typed access through serde: structs from vertices, edges and paths,
//! values from structs, and Cypher parameter maps.

use std::collections::BTreeMap;

use agtype::typed::{Edge, Path, Vertex};
use agtype::{Value, cypher_params, from_value, parse, to_value};
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Person {
    name: String,
    age: u8,
    #[serde(default)]
    tags: Vec<String>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Knows {
    since: i32,
}

const ALICE: &str = r#"{"id": 844424930131969, "label": "Person", "properties": {"age": 31, "name": "Alice", "tags": ["a", "b"]}}::vertex"#;
const BOB: &str = r#"{"id": 844424930131970, "label": "Person", "properties": {"age": 42, "name": "Bob", "tags": []}}::vertex"#;
const KNOWS: &str = r#"{"id": 1125899906842625, "label": "KNOWS", "end_id": 844424930131970, "start_id": 844424930131969, "properties": {"since": 2019}}::edge"#;

fn alice() -> Person {
    Person {
        name: "Alice".into(),
        age: 31,
        tags: vec!["a".into(), "b".into()],
    }
}

#[test]
fn a_struct_reads_the_properties_of_a_vertex() {
    let p: Person = from_value(parse(ALICE).unwrap()).unwrap();
    assert_eq!(p, alice());
    let v: Vertex<Person> = from_value(parse(ALICE).unwrap()).unwrap();
    assert_eq!((v.id, v.label.as_str()), (844424930131969, "Person"));
    assert_eq!(v.properties, alice());
    // Properties as a map or as agtype values work too.
    let m: BTreeMap<String, Value> = from_value(parse(BOB).unwrap()).unwrap();
    assert_eq!(m["age"], Value::Integer(42));
    let raw: Vertex<Value> = from_value(parse(BOB).unwrap()).unwrap();
    assert_eq!(
        raw.properties.get("name").and_then(Value::as_str),
        Some("Bob")
    );
}

#[test]
fn an_edge_has_its_ends_and_a_path_its_steps() {
    let e: Edge<Knows> = from_value(parse(KNOWS).unwrap()).unwrap();
    assert_eq!((e.start_id, e.end_id), (844424930131969, 844424930131970));
    assert_eq!(e.properties, Knows { since: 2019 });
    let path = parse(&format!("[{ALICE}, {KNOWS}, {BOB}]::path")).unwrap();
    let p: Path<Person, Knows> = from_value(path.clone()).unwrap();
    let (from, edge, to) = p.steps().next().unwrap();
    assert_eq!(
        (from.properties.name.as_str(), to.properties.name.as_str()),
        ("Alice", "Bob")
    );
    assert_eq!(edge.label, "KNOWS");
    // And back: typed entities become AGE entities again.
    assert_eq!(to_value(&p).unwrap(), path);
    let e_value = to_value(&e).unwrap();
    assert_eq!(e_value, parse(KNOWS).unwrap());
}

#[test]
fn the_wrong_entity_or_a_bad_field_says_where_and_why() {
    let e = from_value::<Vertex<Knows>>(parse(KNOWS).unwrap()).unwrap_err();
    assert_eq!(e.to_string(), "expected a vertex, found an edge");
    let bad =
        parse(r#"{"id": 1, "label": "Person", "properties": {"name": "X", "age": 300}}::vertex"#)
            .unwrap();
    let e = from_value::<Vertex<Person>>(bad).unwrap_err();
    assert_eq!(e.path(), "properties.age");
    assert!(
        e.to_string()
            .starts_with("at properties.age: invalid value: integer `300`"),
        "{e}"
    );
    let e = from_value::<Vec<Person>>(parse(r#"[{"name": "A", "age": 1}, {"name": 2}]"#).unwrap())
        .unwrap_err();
    assert_eq!(e.path(), "[1].name");
    let ended_on_edge = parse(&format!("[{ALICE}, {KNOWS}]")).unwrap();
    assert!(from_value::<Path<Person, Knows>>(ended_on_edge).is_err());
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Shape {
    Point,
    Circle(f64),
    Rect { w: i64, h: i64 },
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Everything {
    unit: (),
    opt: Option<i32>,
    none: Option<i32>,
    big: u64,
    huge: i128,
    ratio: f32,
    c: char,
    shapes: Vec<Shape>,
    by_id: BTreeMap<u32, String>,
}

#[test]
fn values_round_trip_through_user_types() {
    let x = Everything {
        unit: (),
        opt: Some(7),
        none: None,
        big: u64::MAX,
        huge: -170141183460469231731687303715884105728,
        ratio: 0.5,
        c: 'é',
        shapes: vec![Shape::Point, Shape::Circle(1.5), Shape::Rect { w: 2, h: 3 }],
        by_id: [(1, "one".to_string()), (20, "twenty".to_string())].into(),
    };
    let v = to_value(&x).unwrap();
    assert_eq!(
        v.to_string(),
        r#"{"c": "é", "big": 18446744073709551615::numeric, "opt": 7, "huge": -170141183460469231731687303715884105728::numeric, "none": null, "unit": null, "by_id": {"1": "one", "20": "twenty"}, "ratio": 0.5, "shapes": ["Point", {"Circle": 1.5}, {"Rect": {"h": 3, "w": 2}}]}"#
    );
    assert_eq!(from_value::<Everything>(v.clone()).unwrap(), x);
    // The text form reads back to the same struct.
    assert_eq!(
        from_value::<Everything>(parse(&v.to_string()).unwrap()).unwrap(),
        x
    );
    // Numerics read as numbers when the target is one.
    let n: f64 = from_value(parse("2.50::numeric").unwrap()).unwrap();
    assert_eq!(n, 2.5);
    let i: i64 = from_value(parse("12.00::numeric").unwrap()).unwrap();
    assert_eq!(i, 12);
    assert!(from_value::<i64>(parse("12.5::numeric").unwrap()).is_err());
    // Self-describing targets keep the whole entity.
    let j: serde_json::Value = from_value(parse(BOB).unwrap()).unwrap();
    assert_eq!(j["properties"]["name"], "Bob");
    assert_eq!(j["id"], 844424930131970_i64);
}

#[test]
fn cypher_params_are_a_map_of_the_fields() {
    #[derive(Serialize)]
    struct NewPerson<'a> {
        name: &'a str,
        age: u8,
    }
    let p = cypher_params(&NewPerson {
        name: "Carol",
        age: 27,
    })
    .unwrap();
    assert_eq!(p.to_string(), r#"{"age": 27, "name": "Carol"}"#);
    let e = cypher_params(&[1, 2]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cypher parameters must be a map (a struct or a map type), not an array"
    );
    let e = to_value(&BTreeMap::from([(vec![1], 1)])).unwrap_err();
    assert!(e.to_string().contains("object keys must be"), "{e}");
}
