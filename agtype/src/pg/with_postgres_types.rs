//! `FromSql`/`ToSql` (postgres-types, as tokio-postgres and postgres use
//! them). Those drivers read results in binary format; AGE's binary format
//! is a version byte and the text (see [`crate::wire`]). The type is
//! recognised by its name, whose OID the driver looks up on the server.

use std::error::Error;

use bytes::BufMut;
use postgres_types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use crate::Value;
use crate::wire::{self, TextRef};

type BoxError = Box<dyn Error + Sync + Send>;

fn accepts(ty: &Type) -> bool {
    wire::is_agtype_name(ty.name())
}

impl<'a> FromSql<'a> for Value {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(wire::decode_binary(raw)?)
    }

    fn accepts(ty: &Type) -> bool {
        accepts(ty)
    }
}

impl ToSql for Value {
    fn to_sql(&self, _: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        out.put_u8(wire::BINARY_VERSION);
        out.put_slice(crate::to_text(self).as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        accepts(ty)
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for TextRef<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(TextRef(wire::binary_text(raw)?))
    }

    fn accepts(ty: &Type) -> bool {
        accepts(ty)
    }
}

impl ToSql for TextRef<'_> {
    fn to_sql(&self, _: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        out.put_u8(wire::BINARY_VERSION);
        out.put_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        accepts(ty)
    }

    to_sql_checked!();
}
