use std::fmt;

/// Why bytes are not a readable agtype container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub(crate) at: usize,
    pub(crate) kind: DecodeErrorKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// Data runs past the end of the input.
    Truncated,
    /// A container header with an impossible flag combination (AGE: `Invalid AGT header value.`).
    BadHeader,
    /// A child entry with an unknown type.
    BadEntry,
    /// An end offset before its start.
    BadOffset,
    /// An extended value with an unknown sub-type.
    BadExtendedType,
    /// A numeric whose header or digits PostgreSQL would not write.
    BadNumeric,
    /// String bytes that are not UTF-8.
    InvalidUtf8,
    /// An object key that is not a string.
    KeyNotString,
    /// A vertex, edge or path whose content has the wrong shape.
    BadEntity,
    /// Nesting deeper than [`MAX_DEPTH`](crate::MAX_DEPTH).
    TooDeep,
    /// Children overlap so much that decoding would take more work than the
    /// input's size justifies (AGE never writes such bytes).
    Overlapping,
    /// Hex text (line tool) that is not hexadecimal.
    BadHex,
}

impl DecodeError {
    pub(crate) fn new(at: usize, kind: DecodeErrorKind) -> Self {
        DecodeError { at, kind }
    }

    /// Byte offset in the input where the problem was found.
    pub fn position(&self) -> usize {
        self.at
    }

    pub fn kind(&self) -> DecodeErrorKind {
        self.kind
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            DecodeErrorKind::Truncated => "data runs past the end of the input",
            DecodeErrorKind::BadHeader => "Invalid AGT header value.",
            DecodeErrorKind::BadEntry => "unknown child entry type",
            DecodeErrorKind::BadOffset => "child end offset before its start",
            DecodeErrorKind::BadExtendedType => "unknown extended type",
            DecodeErrorKind::BadNumeric => "malformed numeric",
            DecodeErrorKind::InvalidUtf8 => "string is not valid UTF-8",
            DecodeErrorKind::KeyNotString => "object key is not a string",
            DecodeErrorKind::BadEntity => "malformed vertex, edge or path",
            DecodeErrorKind::TooDeep => "nesting too deep",
            DecodeErrorKind::Overlapping => "overlapping children",
            DecodeErrorKind::BadHex => "invalid hexadecimal",
        };
        write!(f, "{what} (at byte {})", self.at)
    }
}

impl std::error::Error for DecodeError {}

/// Why a value cannot be written in AGE's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// A string, container or count exceeds AGE's 28-bit length fields (256 MiB).
    TooLarge,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("value exceeds agtype's 256 MiB size limit")
    }
}

impl std::error::Error for EncodeError {}
