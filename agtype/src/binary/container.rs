//! Locating children inside a container, shared by the decoder and the view.
//! Every read is bounds-checked; positions are offsets from the start of the
//! payload, which AGE keeps 4-byte aligned.

use super::error::{DecodeError, DecodeErrorKind as K};
use super::*;

/// A parsed container header.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Container<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) header: u32,
    /// Elements, or key/value pairs.
    pub(crate) count: usize,
    pub(crate) entries_at: usize,
    pub(crate) data_at: usize,
}

/// One child, located but not yet interpreted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Child<'a> {
    Null,
    Bool(bool),
    /// String bytes, cut at the first NUL as AGE's printer cuts them.
    Str(&'a [u8]),
    /// Position of the numeric varlena.
    Numeric(usize),
    /// Position of a nested container.
    Container(usize),
    /// Position of the extended-type word.
    Extended(usize),
}

impl<'a> Container<'a> {
    pub(crate) fn parse(buf: &'a [u8], at: usize) -> Result<Self, DecodeError> {
        let header = read_u32(buf, at).ok_or(DecodeError::new(at, K::Truncated))?;
        let count = (header & COUNT_MASK) as usize;
        let is_object = header & F_OBJECT != 0;
        let is_array = header & F_ARRAY != 0;
        let scalar_ok = header & F_SCALAR == 0 || (is_array && count == 1);
        if header & F_BINARY != 0 || is_object == is_array || !scalar_ok {
            return Err(DecodeError::new(at, K::BadHeader));
        }
        let entries = if is_object { 2 * count } else { count };
        let entries_at = at + 4;
        let data_at = entries
            .checked_mul(4)
            .and_then(|n| n.checked_add(entries_at))
            .filter(|&end| end <= buf.len())
            .ok_or(DecodeError::new(at, K::Truncated))?;
        Ok(Container {
            buf,
            header,
            count,
            entries_at,
            data_at,
        })
    }

    pub(crate) fn is_object(&self) -> bool {
        self.header & F_OBJECT != 0
    }

    pub(crate) fn is_scalar(&self) -> bool {
        self.header & F_SCALAR != 0
    }

    pub(crate) fn entry(&self, j: usize) -> u32 {
        read_u32(self.buf, self.entries_at + 4 * j).unwrap_or(0)
    }

    /// Start offset (from the data area) of entry `j`, walking back to the
    /// nearest stored end offset as AGE's `getAgtypeOffset` does.
    pub(crate) fn offset_of(&self, j: usize) -> usize {
        let end = j.saturating_mul(4).saturating_add(self.entries_at);
        let Some(before) = self.buf.get(self.entries_at..end) else {
            return 0;
        };
        let mut off = 0usize;
        for w in before.chunks_exact(4).rev() {
            let e = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            // At most 2^28 entries of under 2^28 each: no overflow on 64-bit.
            off = off.wrapping_add((e & E_OFFLEN_MASK) as usize);
            if e & E_HAS_OFF != 0 {
                break;
            }
        }
        off
    }

    /// Length of entry `j`, walking back for its start only when it stores
    /// an end offset.
    pub(crate) fn len_of(&self, j: usize) -> usize {
        let e = self.entry(j);
        let field = (e & E_OFFLEN_MASK) as usize;
        if e & E_HAS_OFF == 0 {
            field
        } else {
            field.saturating_sub(self.offset_of(j))
        }
    }

    /// Length of entry `j` given its start offset, and the next entry's
    /// start offset.
    pub(crate) fn span(&self, j: usize, off: usize) -> Result<(usize, usize), DecodeError> {
        let e = self.entry(j);
        let field = (e & E_OFFLEN_MASK) as usize;
        if e & E_HAS_OFF != 0 {
            let len = field
                .checked_sub(off)
                .ok_or(DecodeError::new(self.entries_at + 4 * j, K::BadOffset))?;
            Ok((len, field))
        } else {
            Ok((field, off.saturating_add(field)))
        }
    }

    /// Interprets entry `j`, whose data starts `off` bytes into the data area.
    pub(crate) fn child(&self, j: usize, off: usize) -> Result<Child<'a>, DecodeError> {
        self.child_and_next(j, off).map(|(child, _)| child)
    }

    /// [`Container::child`] and the start offset of the next entry.
    pub(crate) fn child_and_next(
        &self,
        j: usize,
        off: usize,
    ) -> Result<(Child<'a>, usize), DecodeError> {
        let e = self.entry(j);
        let (len, next) = self.span(j, off)?;
        let start = self.data_at.saturating_add(off);
        let truncated = DecodeError::new(start, K::Truncated);
        let child = match e & E_TYPE_MASK {
            E_STRING => {
                let end = start.checked_add(len).ok_or(truncated.clone())?;
                let bytes = self.buf.get(start..end).ok_or(truncated)?;
                let cut = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                Child::Str(&bytes[..cut])
            }
            E_NULL => Child::Null,
            E_FALSE => Child::Bool(false),
            E_TRUE => Child::Bool(true),
            E_NUMERIC => Child::Numeric(align4(start)),
            E_CONTAINER => Child::Container(align4(start)),
            E_EXTENDED => Child::Extended(align4(start)),
            _ => return Err(DecodeError::new(self.entries_at + 4 * j, K::BadEntry)),
        };
        Ok((child, next))
    }
}

pub(crate) fn utf8(bytes: &[u8], at: usize) -> Result<&str, DecodeError> {
    std::str::from_utf8(bytes).map_err(|_| DecodeError::new(at, K::InvalidUtf8))
}
