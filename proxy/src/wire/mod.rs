//! PostgreSQL wire protocol: header-only framing, the few message bodies the
//! proxy reads, and the few messages it writes itself.

pub mod backend;
pub mod frame;
pub mod frontend;
pub mod queue;
pub mod read;
pub mod startup;
pub mod write;

/// `b` as text when it is UTF-8. Statement text is nearly always ASCII,
/// which a word-at-a-time look confirms for less than the full check.
pub fn utf8(b: &[u8]) -> Option<&str> {
    if b.is_ascii() {
        // SAFETY: ASCII is valid UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(b) });
    }
    std::str::from_utf8(b).ok()
}

/// Message tags the proxy cares about, named as in the protocol docs.
pub mod tag {
    // Frontend.
    pub const QUERY: u8 = b'Q';
    pub const PARSE: u8 = b'P';
    pub const BIND: u8 = b'B';
    pub const DESCRIBE: u8 = b'D';
    pub const EXECUTE: u8 = b'E';
    pub const CLOSE: u8 = b'C';
    pub const SYNC: u8 = b'S';
    pub const FLUSH: u8 = b'H';
    pub const FUNCTION_CALL: u8 = b'F';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_FAIL: u8 = b'f';
    pub const TERMINATE: u8 = b'X';
    pub const PASSWORD: u8 = b'p';
    // Backend.
    pub const AUTHENTICATION: u8 = b'R';
    pub const BACKEND_KEY_DATA: u8 = b'K';
    pub const PARAMETER_STATUS: u8 = b'S';
    pub const READY_FOR_QUERY: u8 = b'Z';
    pub const ERROR_RESPONSE: u8 = b'E';
    pub const NOTICE_RESPONSE: u8 = b'N';
    pub const COMMAND_COMPLETE: u8 = b'C';
    pub const DATA_ROW: u8 = b'D';
    pub const ROW_DESCRIPTION: u8 = b'T';
    pub const COPY_IN_RESPONSE: u8 = b'G';
    pub const COPY_OUT_RESPONSE: u8 = b'H';
    pub const COPY_BOTH_RESPONSE: u8 = b'W';
    pub const PARSE_COMPLETE: u8 = b'1';
    pub const BIND_COMPLETE: u8 = b'2';
    pub const CLOSE_COMPLETE: u8 = b'3';
    pub const NO_DATA: u8 = b'n';
    pub const EMPTY_QUERY: u8 = b'I';
    pub const PORTAL_SUSPENDED: u8 = b's';
    pub const NOTIFICATION: u8 = b'A';
    pub const PARAMETER_DESCRIPTION: u8 = b't';
    pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
}

/// Does this frontend message ask the server to send what it has (ARCHITECTURE.md,
/// "Round trips: definitions")?
pub fn is_flush_request(frontend_tag: u8) -> bool {
    matches!(
        frontend_tag,
        tag::QUERY | tag::SYNC | tag::FLUSH | tag::FUNCTION_CALL | tag::COPY_DONE | tag::COPY_FAIL
    )
}

/// Body of a whole tagged message (its type and length stripped).
pub fn body(msg: &[u8]) -> &[u8] {
    msg.get(5..).unwrap_or_default()
}
