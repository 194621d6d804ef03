//! A serde `Serializer` producing a [`Value`].

use serde::ser::{self, Impossible, Serialize};

use super::{EDGE_MARKER, Error, PATH_MARKER, Segment, VERTEX_MARKER, kind_name};
use crate::{Edge, Key, Numeric, Object, Path, Value, Vertex};

pub(super) struct ValueSerializer;

type Result<T> = std::result::Result<T, Error>;

/// An integer beyond `i64`, as an exact numeric.
fn wide(i: impl Into<i128> + ToString + Copy) -> Result<Value> {
    match i64::try_from(i.into()) {
        Ok(small) => Ok(Value::Integer(small)),
        Err(_) => Numeric::parse(&i.to_string())
            .map(Value::Numeric)
            .map_err(Error::new),
    }
}

impl ser::Serializer for ValueSerializer {
    type Ok = Value;
    type Error = Error;
    type SerializeSeq = Seq;
    type SerializeTuple = Seq;
    type SerializeTupleStruct = Seq;
    type SerializeTupleVariant = Variant<Seq>;
    type SerializeMap = Map;
    type SerializeStruct = Map;
    type SerializeStructVariant = Variant<Map>;

    fn serialize_bool(self, v: bool) -> Result<Value> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Value> {
        Ok(Value::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<Value> {
        Ok(Value::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<Value> {
        Ok(Value::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<Value> {
        Ok(Value::Integer(v))
    }
    fn serialize_i128(self, v: i128) -> Result<Value> {
        wide(v)
    }
    fn serialize_u8(self, v: u8) -> Result<Value> {
        Ok(Value::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<Value> {
        Ok(Value::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<Value> {
        Ok(Value::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<Value> {
        wide(v)
    }
    fn serialize_u128(self, v: u128) -> Result<Value> {
        match i128::try_from(v) {
            Ok(i) => wide(i),
            Err(_) => Numeric::parse(&v.to_string())
                .map(Value::Numeric)
                .map_err(Error::new),
        }
    }
    fn serialize_f32(self, v: f32) -> Result<Value> {
        Ok(Value::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<Value> {
        Ok(Value::Float(v))
    }
    fn serialize_char(self, v: char) -> Result<Value> {
        Ok(Value::String(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Value> {
        Ok(Value::from(v))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Value> {
        Ok(Value::Array(v.iter().map(|&b| Value::from(b)).collect()))
    }
    fn serialize_none(self) -> Result<Value> {
        Ok(Value::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Value> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value> {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Value> {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Value> {
        Ok(Value::from(variant))
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Value> {
        let inner = value.serialize(self)?;
        if name != PATH_MARKER {
            return Ok(inner);
        }
        match inner {
            Value::Array(items) => Path::try_from_values(items)
                .map(Value::Path)
                .map_err(|e| Error::new(e.message())),
            other => Err(Error::new(format!(
                "a path is an array, not {}",
                kind_name(&other)
            ))),
        }
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Value> {
        let inner = value
            .serialize(self)
            .map_err(|e| e.inside(Segment::Key(variant.into())))?;
        Ok(Value::Object(Object::from_pairs(vec![(
            Key::from(variant),
            inner,
        )])))
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Seq> {
        Ok(Seq(Vec::with_capacity(len.unwrap_or(0).min(4096))))
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Variant<Seq>> {
        Ok(Variant {
            name: variant,
            inner: self.serialize_seq(Some(len))?,
        })
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Map> {
        Ok(Map {
            entity: "",
            pairs: Vec::with_capacity(len.unwrap_or(0).min(4096)),
            key: None,
        })
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Map> {
        let mut m = self.serialize_map(Some(len))?;
        m.entity = name;
        Ok(m)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Variant<Map>> {
        Ok(Variant {
            name: variant,
            inner: self.serialize_map(Some(len))?,
        })
    }
}

pub(super) struct Seq(Vec<Value>);

impl Seq {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let at = self.0.len();
        let v = value
            .serialize(ValueSerializer)
            .map_err(|e| e.inside(Segment::Index(at)))?;
        self.0.push(v);
        Ok(())
    }
}

impl ser::SerializeSeq for Seq {
    type Ok = Value;
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.push(value)
    }
    fn end(self) -> Result<Value> {
        Ok(Value::Array(self.0))
    }
}

impl ser::SerializeTuple for Seq {
    type Ok = Value;
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.push(value)
    }
    fn end(self) -> Result<Value> {
        Ok(Value::Array(self.0))
    }
}

impl ser::SerializeTupleStruct for Seq {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.push(value)
    }
    fn end(self) -> Result<Value> {
        Ok(Value::Array(self.0))
    }
}

pub(super) struct Map {
    /// The struct's name when it is one of the entity markers.
    entity: &'static str,
    pairs: Vec<(String, Value)>,
    key: Option<String>,
}

impl Map {
    fn put<T: Serialize + ?Sized>(&mut self, key: String, value: &T) -> Result<()> {
        match value.serialize(ValueSerializer) {
            Ok(v) => {
                self.pairs.push((key, v));
                Ok(())
            }
            Err(e) => Err(e.inside(Segment::Key(key))),
        }
    }

    fn finish(self) -> Result<Value> {
        let o = Object::from_pairs(self.pairs);
        let shape = |e: crate::ShapeError| Error::new(e.message());
        match self.entity {
            VERTEX_MARKER => Vertex::try_from_object(o).map(Value::Vertex).map_err(shape),
            EDGE_MARKER => Edge::try_from_object(o).map(Value::Edge).map_err(shape),
            _ => Ok(Value::Object(o)),
        }
    }
}

impl ser::SerializeMap for Map {
    type Ok = Value;
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        self.key = Some(key.serialize(KeySerializer)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let key = self
            .key
            .take()
            .ok_or_else(|| Error::new("a map value came before its key"))?;
        self.put(key, value)
    }
    fn end(self) -> Result<Value> {
        self.finish()
    }
}

impl ser::SerializeStruct for Map {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.put(key.to_owned(), value)
    }
    fn end(self) -> Result<Value> {
        self.finish()
    }
}

/// A variant with content: `{"Variant": content}`.
pub(super) struct Variant<T> {
    name: &'static str,
    inner: T,
}

impl<T> Variant<T> {
    fn wrap(name: &'static str, content: Result<Value>) -> Result<Value> {
        let content = content.map_err(|e| e.inside(Segment::Key(name.into())))?;
        Ok(Value::Object(Object::from_pairs(vec![(
            Key::from(name),
            content,
        )])))
    }
}

impl ser::SerializeTupleVariant for Variant<Seq> {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.inner.push(value)
    }
    fn end(self) -> Result<Value> {
        Self::wrap(self.name, ser::SerializeSeq::end(self.inner))
    }
}

impl ser::SerializeStructVariant for Variant<Map> {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.inner.put(key.to_owned(), value)
    }
    fn end(self) -> Result<Value> {
        Self::wrap(self.name, self.inner.finish())
    }
}

/// Object keys are strings; integer, boolean and character keys are
/// written as their text, as JSON serializers do.
struct KeySerializer;

fn key_error() -> Error {
    Error::new("object keys must be strings, numbers, booleans or characters")
}

impl ser::Serializer for KeySerializer {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = Impossible<String, Error>;
    type SerializeTuple = Impossible<String, Error>;
    type SerializeTupleStruct = Impossible<String, Error>;
    type SerializeTupleVariant = Impossible<String, Error>;
    type SerializeMap = Impossible<String, Error>;
    type SerializeStruct = Impossible<String, Error>;
    type SerializeStructVariant = Impossible<String, Error>;

    fn serialize_str(self, v: &str) -> Result<String> {
        Ok(v.to_owned())
    }
    fn serialize_char(self, v: char) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_bool(self, v: bool) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i128(self, v: i128) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u128(self, v: u128) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<String> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<String> {
        v.serialize(self)
    }
    fn serialize_f32(self, _: f32) -> Result<String> {
        Err(key_error())
    }
    fn serialize_f64(self, _: f64) -> Result<String> {
        Err(key_error())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<String> {
        Err(key_error())
    }
    fn serialize_none(self) -> Result<String> {
        Err(key_error())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<String> {
        Err(key_error())
    }
    fn serialize_unit(self) -> Result<String> {
        Err(key_error())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<String> {
        Err(key_error())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String> {
        Err(key_error())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(key_error())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
        Err(key_error())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(key_error())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(key_error())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        Err(key_error())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Err(key_error())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(key_error())
    }
}
