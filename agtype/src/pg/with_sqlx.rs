//! `Type`/`Decode`/`Encode` for sqlx's Postgres driver. sqlx reads prepared
//! queries in binary format (a version byte and the text, see
//! [`crate::wire`]) and simple queries (`raw_sql`) in text format; both
//! are accepted. The parameter type is declared as `ag_catalog.agtype`,
//! which sqlx resolves to its OID on the server whatever the `search_path`.

use sqlx::decode::Decode;
use sqlx::encode::{Encode, IsNull};
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueFormat, PgValueRef, Postgres};
use sqlx::{Type, TypeInfo};

use crate::Value;
use crate::wire::{self, TextRef};

fn type_info() -> PgTypeInfo {
    PgTypeInfo::with_name("ag_catalog.agtype")
}

/// Names sqlx gives a column of type agtype. `?` is an OID sqlx has not
/// resolved (simple queries skip the lookup): the text is then parsed and
/// a wrong type fails there.
fn compatible(ty: &PgTypeInfo) -> bool {
    wire::is_agtype_name(ty.name()) || ty.name() == "?"
}

fn text<'r>(value: &PgValueRef<'r>) -> Result<&'r str, BoxDynError> {
    let raw = value.as_bytes()?;
    Ok(match value.format() {
        PgValueFormat::Binary => wire::binary_text(raw)?,
        PgValueFormat::Text => wire::text_of(raw)?,
    })
}

impl Type<Postgres> for Value {
    fn type_info() -> PgTypeInfo {
        type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for Value {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(crate::parse(text(&value)?).map_err(wire::WireError::from)?)
    }
}

impl Encode<'_, Postgres> for Value {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.push(wire::BINARY_VERSION);
        buf.extend_from_slice(crate::to_text(self).as_bytes());
        Ok(IsNull::No)
    }
}

impl Type<Postgres> for TextRef<'_> {
    fn type_info() -> PgTypeInfo {
        type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for TextRef<'r> {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(TextRef(text(&value)?))
    }
}

impl Encode<'_, Postgres> for TextRef<'_> {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.push(wire::BINARY_VERSION);
        buf.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }
}
