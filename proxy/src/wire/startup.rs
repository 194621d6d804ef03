//! The untagged first message of a connection: startup, SSL/GSS requests,
//! cancel requests.

use bytes::{BufMut, Bytes, BytesMut};

pub const SSL_REQUEST: u32 = 80877103;
pub const GSSENC_REQUEST: u32 = 80877104;
pub const CANCEL_REQUEST: u32 = 80877102;
/// Protocol major version 3; the minor version is passed through untouched.
pub const PROTOCOL_MAJOR_3: u32 = 3;

/// PostgreSQL's own limit for a startup packet.
pub const MAX_STARTUP_LEN: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupMessage {
    SslRequest,
    GssEncRequest,
    Cancel {
        pid: i32,
        secret: Bytes,
    },
    /// A protocol 3.x startup; `raw` is the packet as received, forwarded as is.
    Startup {
        raw: Bytes,
        params: Vec<(String, String)>,
    },
}

impl StartupMessage {
    pub fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The user, and the database, which is the user's name when not given
    /// (as PostgreSQL takes it).
    pub fn user_and_database(params: &[(String, String)]) -> (String, String) {
        let p = |k| Self::param(params, k).unwrap_or("");
        let user = p("user").to_owned();
        let database = match p("database") {
            "" => user.clone(),
            d => d.to_owned(),
        };
        (user, database)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StartupError {
    #[error("invalid length of startup packet")]
    BadLength,
    #[error("unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.x")]
    UnsupportedProtocol { major: u32, minor: u32 },
    #[error("invalid startup packet layout: expected terminator as last byte")]
    BadLayout,
    #[error("invalid startup packet: parameter is not valid UTF-8")]
    BadEncoding,
}

/// Length of the startup packet at the start of `buf`, once 4 bytes are in.
pub fn packet_len(buf: &[u8]) -> Result<Option<usize>, StartupError> {
    let Some(h) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
    if !(8..=MAX_STARTUP_LEN).contains(&len) {
        return Err(StartupError::BadLength);
    }
    Ok(Some(len))
}

/// Decodes a complete startup packet (length prefix included).
pub fn decode(raw: Bytes) -> Result<StartupMessage, StartupError> {
    let Some(&[a, b, c, d]) = raw.get(4..8) else {
        return Err(StartupError::BadLength);
    };
    let code = u32::from_be_bytes([a, b, c, d]);
    match code {
        SSL_REQUEST if raw.len() == 8 => Ok(StartupMessage::SslRequest),
        GSSENC_REQUEST if raw.len() == 8 => Ok(StartupMessage::GssEncRequest),
        CANCEL_REQUEST if raw.len() >= 16 => Ok(StartupMessage::Cancel {
            pid: i32::from_be_bytes([raw[8], raw[9], raw[10], raw[11]]),
            secret: raw.slice(12..),
        }),
        _ if code >> 16 == PROTOCOL_MAJOR_3 => {
            let params = parse_params(&raw[8..])?;
            Ok(StartupMessage::Startup { raw, params })
        }
        _ => Err(StartupError::UnsupportedProtocol {
            major: code >> 16,
            minor: code & 0xffff,
        }),
    }
}

fn parse_params(mut body: &[u8]) -> Result<Vec<(String, String)>, StartupError> {
    let mut out = Vec::new();
    loop {
        let (key, rest) = cstr(body)?;
        if key.is_empty() {
            return if rest.is_empty() {
                Ok(out)
            } else {
                Err(StartupError::BadLayout)
            };
        }
        let (value, rest) = cstr(rest)?;
        out.push((key.to_owned(), value.to_owned()));
        body = rest;
    }
}

fn cstr(buf: &[u8]) -> Result<(&str, &[u8]), StartupError> {
    let nul = buf
        .iter()
        .position(|&b| b == 0)
        .ok_or(StartupError::BadLayout)?;
    let s = std::str::from_utf8(&buf[..nul]).map_err(|_| StartupError::BadEncoding)?;
    Ok((s, &buf[nul + 1..]))
}

/// Encodes an SSLRequest or GSSENCRequest-style 8-byte packet.
pub fn encode_code(code: u32) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&8u32.to_be_bytes());
    out[4..].copy_from_slice(&code.to_be_bytes());
    out
}

/// A protocol 3.0 startup packet with `params`.
pub fn encode_startup(params: &[(&str, &str)]) -> Bytes {
    let mut body = BytesMut::new();
    body.put_u32(PROTOCOL_MAJOR_3 << 16);
    for (k, v) in params {
        body.put_slice(k.as_bytes());
        body.put_u8(0);
        body.put_slice(v.as_bytes());
        body.put_u8(0);
    }
    body.put_u8(0);
    let mut out = BytesMut::with_capacity(body.len() + 4);
    out.put_u32(body.len() as u32 + 4);
    out.put_slice(&body);
    out.freeze()
}

/// Encodes a CancelRequest for the given backend key.
pub fn encode_cancel(pid: i32, secret: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(12 + secret.len());
    out.put_u32((12 + secret.len()) as u32);
    out.put_u32(CANCEL_REQUEST);
    out.put_i32(pid);
    out.put_slice(secret);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup(params: &[(&str, &str)]) -> Bytes {
        encode_startup(params)
    }

    #[test]
    fn decodes_startup_params() {
        let m = decode(startup(&[("user", "u"), ("database", "d")])).unwrap();
        let StartupMessage::Startup { params, .. } = m else {
            panic!()
        };
        assert_eq!(StartupMessage::param(&params, "database"), Some("d"));
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(packet_len(&[0, 0, 0, 1]), Err(StartupError::BadLength));
        let raw = Bytes::from_static(&[0, 0, 0, 9, 0, 3, 0, 0, b'x']);
        assert_eq!(decode(raw), Err(StartupError::BadLayout));
        let raw = Bytes::from_static(&[0, 0, 0, 8, 0, 9, 0, 0]);
        assert!(matches!(
            decode(raw),
            Err(StartupError::UnsupportedProtocol { major: 9, .. })
        ));
    }
}
