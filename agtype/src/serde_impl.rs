//! `serde` support: values map onto serde's data model the way JSON does.
//! Numerics serialize as their decimal text; vertices and edges as their
//! entity maps; paths as sequences. Deserializing never yields a numeric
//! or an entity, except that integers beyond `i64` become numerics.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::{Numeric, Object, Value};

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Integer(i) => s.serialize_i64(*i),
            Value::Float(f) => s.serialize_f64(*f),
            Value::Numeric(n) => s.collect_str(n),
            Value::String(v) => s.serialize_str(v),
            Value::Array(items) => serialize_seq(items, s),
            Value::Path(p) => serialize_seq(p.elements(), s),
            Value::Object(o) => o.serialize(s),
            Value::Vertex(v) => v.as_object().serialize(s),
            Value::Edge(e) => e.as_object().serialize(s),
        }
    }
}

fn serialize_seq<S: Serializer>(items: &[Value], s: S) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(items.len()))?;
    for v in items {
        seq.serialize_element(v)?;
    }
    seq.end()
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an agtype value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Integer(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        match i64::try_from(v) {
            Ok(i) => Ok(Value::Integer(i)),
            Err(_) => Numeric::parse(&v.to_string())
                .map(Value::Numeric)
                .map_err(E::custom),
        }
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            pairs.push((k, v));
        }
        Ok(Value::Object(Object::from_pairs(pairs)))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Value, parse};

    #[test]
    fn json_round_trip_keeps_plain_values() {
        let v = parse(r#"{"a": [1, 2.5, "x", null, true], "bb": {}}"#).unwrap();
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(json, r#"{"a":[1,2.5,"x",null,true],"bb":{}}"#);
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), v);
        let n = parse("1.50::numeric").unwrap();
        assert_eq!(serde_json::to_string(&n).unwrap(), r#""1.50""#);
    }
}
