//! A serde `Deserializer` over an owned [`Value`].

use serde::de::value::StrDeserializer;
use serde::de::{
    self, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess, VariantAccess,
    Visitor,
};
use serde::forward_to_deserialize_any;

use super::{EDGE_MARKER, Error, Segment, VERTEX_MARKER, kind_name};
use crate::{Key, Numeric, Object, Value};

pub(super) struct ValueDeserializer(pub(super) Value);

impl<'de> de::Deserializer<'de> for ValueDeserializer {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Integer(i) => visitor.visit_i64(i),
            Value::Float(f) => visitor.visit_f64(f),
            Value::Numeric(n) => visitor.visit_string(n.to_string()),
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => visit_seq(items, visitor),
            Value::Path(p) => visit_seq(p.into_elements(), visitor),
            Value::Object(o) => visit_map(o.into_pairs(), visitor),
            // Self-describing targets (serde_json::Value, …) keep the
            // whole entity, as the entity's `Serialize` writes it.
            Value::Vertex(v) => visit_map(v.into_object().into_pairs(), visitor),
            Value::Edge(e) => visit_map(e.into_object().into_pairs(), visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            v => visitor.visit_some(ValueDeserializer(v)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match (name, self.0) {
            (VERTEX_MARKER, Value::Vertex(v)) => visit_map(
                vec![
                    ("id".into(), Value::Integer(v.id())),
                    ("label".into(), Value::String(v.label().to_owned())),
                    ("properties".into(), take_properties(v.into_object())),
                ],
                visitor,
            ),
            (EDGE_MARKER, Value::Edge(e)) => visit_map(
                vec![
                    ("id".into(), Value::Integer(e.id())),
                    ("label".into(), Value::String(e.label().to_owned())),
                    ("start_id".into(), Value::Integer(e.start_id())),
                    ("end_id".into(), Value::Integer(e.end_id())),
                    ("properties".into(), take_properties(e.into_object())),
                ],
                visitor,
            ),
            (VERTEX_MARKER, v @ (Value::Edge(_) | Value::Path(_))) => Err(Error::new(format!(
                "expected a vertex, found {}",
                kind_name(&v)
            ))),
            (EDGE_MARKER, v @ (Value::Vertex(_) | Value::Path(_))) => Err(Error::new(format!(
                "expected an edge, found {}",
                kind_name(&v)
            ))),
            (_, v) => ValueDeserializer(v).deserialize_map(visitor),
        }
    }

    /// A vertex or edge reads as its properties.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Vertex(v) => visit_properties(v.into_object(), visitor),
            Value::Edge(e) => visit_properties(e.into_object(), visitor),
            v => ValueDeserializer(v).deserialize_any(visitor),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Numeric(n) => visitor.visit_f64(numeric_f64(&n)?),
            v => ValueDeserializer(v).deserialize_any(visitor),
        }
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Numeric(n) => visit_integer(&n, visitor),
            v => ValueDeserializer(v).deserialize_any(visitor),
        }
    }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_i128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }
    fn deserialize_u128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// A string is a unit variant; a one-pair object is a variant with
    /// content, as serde's default (externally tagged) enums serialize.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.into_deserializer()),
            Value::Object(o) if o.len() == 1 => {
                let mut pairs = o.into_pairs();
                match pairs.pop() {
                    Some((variant, content)) => visitor.visit_enum(Enum {
                        variant: variant.into_string(),
                        content,
                    }),
                    None => Err(Error::new("expected an enum variant")),
                }
            }
            v => Err(Error::new(format!(
                "expected an enum (a string or an object with one key), found {}",
                kind_name(&v)
            ))),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool char str string bytes byte_buf unit unit_struct seq tuple tuple_struct identifier
    }
}

fn take_properties(o: Object) -> Value {
    let mut pairs = o.into_pairs();
    match pairs
        .iter()
        .position(|(k, _)| k.eq_ignore_ascii_case("properties"))
    {
        Some(i) => pairs.swap_remove(i).1,
        None => Value::Object(Object::new()),
    }
}

fn visit_properties<'de, V: Visitor<'de>>(entity: Object, visitor: V) -> Result<V::Value, Error> {
    match take_properties(entity) {
        Value::Object(p) => visit_map(p.into_pairs(), visitor),
        _ => visit_map(Vec::new(), visitor),
    }
}

fn numeric_f64(n: &Numeric) -> Result<f64, Error> {
    n.to_string()
        .parse()
        .map_err(|_| Error::new(format!("numeric {n} is not a number")))
}

/// A numeric with no fractional value, as the widest integer serde knows.
fn visit_integer<'de, V: Visitor<'de>>(n: &Numeric, visitor: V) -> Result<V::Value, Error> {
    let text = n.to_string();
    let whole = match text.split_once('.') {
        Some((w, frac)) if frac.bytes().all(|b| b == b'0') => w,
        None => &text,
        Some(_) => return Err(Error::new(format!("numeric {text} is not an integer"))),
    };
    match whole.parse::<i128>() {
        Ok(i) => match i64::try_from(i) {
            Ok(small) => visitor.visit_i64(small),
            Err(_) => match u64::try_from(i) {
                Ok(u) => visitor.visit_u64(u),
                Err(_) => visitor.visit_i128(i),
            },
        },
        Err(_) => match whole.parse::<u128>() {
            Ok(u) => visitor.visit_u128(u),
            Err(_) => Err(Error::new(format!(
                "numeric {text} is out of integer range"
            ))),
        },
    }
}

fn visit_seq<'de, V: Visitor<'de>>(items: Vec<Value>, visitor: V) -> Result<V::Value, Error> {
    let len = items.len();
    let mut seq = Seq {
        items: items.into_iter(),
        at: 0,
    };
    let out = visitor.visit_seq(&mut seq)?;
    if seq.at == len {
        Ok(out)
    } else {
        Err(de::Error::invalid_length(len, &"fewer elements"))
    }
}

fn visit_map<'de, V: Visitor<'de>>(
    pairs: Vec<(Key, Value)>,
    visitor: V,
) -> Result<V::Value, Error> {
    visitor.visit_map(Map {
        pairs: pairs.into_iter(),
        pending: None,
    })
}

struct Seq {
    items: std::vec::IntoIter<Value>,
    at: usize,
}

impl<'de> SeqAccess<'de> for &mut Seq {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(v) = self.items.next() else {
            return Ok(None);
        };
        let at = self.at;
        self.at += 1;
        seed.deserialize(ValueDeserializer(v))
            .map(Some)
            .map_err(|e| e.inside(Segment::Index(at)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct Map {
    pairs: std::vec::IntoIter<(Key, Value)>,
    pending: Option<(Key, Value)>,
}

impl<'de> MapAccess<'de> for Map {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((k, v)) = self.pairs.next() else {
            return Ok(None);
        };
        let key = seed
            .deserialize(KeyDeserializer(&k))
            .map_err(|e| e.inside(Segment::Key(k.to_string())))?;
        self.pending = Some((k, v));
        Ok(Some(key))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Error> {
        let Some((k, v)) = self.pending.take() else {
            return Err(Error::new("a map value was asked for before its key"));
        };
        seed.deserialize(ValueDeserializer(v))
            .map_err(|e| e.inside(Segment::Key(k.into_string())))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.pairs.len())
    }
}

struct Enum {
    variant: String,
    content: Value,
}

impl<'de> EnumAccess<'de> for Enum {
    type Error = Error;
    type Variant = Variant;

    fn variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<(T::Value, Variant), Error> {
        let v = seed.deserialize(StrDeserializer::<Error>::new(&self.variant))?;
        Ok((
            v,
            Variant {
                name: self.variant,
                content: self.content,
            },
        ))
    }
}

struct Variant {
    name: String,
    content: Value,
}

impl<'de> VariantAccess<'de> for Variant {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.content {
            Value::Null => Ok(()),
            v => Err(
                Error::new(format!("unit variant with content: {}", kind_name(&v)))
                    .inside(Segment::Key(self.name)),
            ),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(ValueDeserializer(self.content))
            .map_err(|e| e.inside(Segment::Key(self.name)))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_seq(ValueDeserializer(self.content), visitor)
            .map_err(|e| e.inside(Segment::Key(self.name)))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_map(ValueDeserializer(self.content), visitor)
            .map_err(|e| e.inside(Segment::Key(self.name)))
    }
}

/// An object key: a string, or the number or boolean it spells when the
/// target wants one (as `to_value` writes such keys).
struct KeyDeserializer<'a>(&'a str);

macro_rules! parse_key {
    ($($method:ident $visit:ident $t:ty),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.0.parse::<$t>() {
                Ok(x) => visitor.$visit(x),
                Err(_) => visitor.visit_str(self.0),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for KeyDeserializer<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_str(self.0)
    }

    parse_key! {
        deserialize_bool visit_bool bool,
        deserialize_i8 visit_i8 i8, deserialize_i16 visit_i16 i16,
        deserialize_i32 visit_i32 i32, deserialize_i64 visit_i64 i64,
        deserialize_i128 visit_i128 i128,
        deserialize_u8 visit_u8 u8, deserialize_u16 visit_u16 u16,
        deserialize_u32 visit_u32 u32, deserialize_u64 visit_u64 u64,
        deserialize_u128 visit_u128 u128
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(StrDeserializer::<Error>::new(self.0))
    }

    forward_to_deserialize_any! {
        f32 f64 char str string bytes byte_buf option unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}
