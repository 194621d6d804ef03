//! AGE's on-disk container format (the datum without its varlena length
//! word), byte for byte. See the crate docs for the layout and AGE's
//! entity-padding quirk.

mod container;
mod decode;
mod encode;
mod error;

pub(crate) use container::{Child, Container};
pub use decode::decode;
pub(crate) use decode::decode_at;
pub use encode::{encode, is_quirk_shape, try_encode};
pub use error::{DecodeError, DecodeErrorKind, EncodeError};

pub(crate) const COUNT_MASK: u32 = 0x0FFF_FFFF;
pub(crate) const F_SCALAR: u32 = 0x1000_0000;
pub(crate) const F_OBJECT: u32 = 0x2000_0000;
pub(crate) const F_ARRAY: u32 = 0x4000_0000;
pub(crate) const F_BINARY: u32 = 0x8000_0000;

pub(crate) const E_HAS_OFF: u32 = 0x8000_0000;
pub(crate) const E_TYPE_MASK: u32 = 0x7000_0000;
pub(crate) const E_OFFLEN_MASK: u32 = 0x0FFF_FFFF;
pub(crate) const E_STRING: u32 = 0x0000_0000;
pub(crate) const E_NUMERIC: u32 = 0x1000_0000;
pub(crate) const E_FALSE: u32 = 0x2000_0000;
pub(crate) const E_TRUE: u32 = 0x3000_0000;
pub(crate) const E_NULL: u32 = 0x4000_0000;
pub(crate) const E_CONTAINER: u32 = 0x5000_0000;
pub(crate) const E_EXTENDED: u32 = 0x7000_0000;

/// The writer stores an end offset instead of a length every this many entries.
pub(crate) const STRIDE: usize = 32;

pub(crate) const EXT_INTEGER: u32 = 0;
pub(crate) const EXT_FLOAT: u32 = 1;
pub(crate) const EXT_VERTEX: u32 = 2;
pub(crate) const EXT_EDGE: u32 = 3;
pub(crate) const EXT_PATH: u32 = 4;

pub(crate) fn align4(n: usize) -> usize {
    n.checked_add(3).map_or(usize::MAX, |n| n & !3)
}

pub(crate) fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(crate) fn read_u64(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at.checked_add(8)?)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    Some(u64::from_le_bytes(w))
}
