//! A plain connection to a replica: the watcher's, and each routing
//! session's. Logs in by trust only (the proxy holds no password for a
//! session-mode client), with the startup parameters given.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::{io::AsyncWriteExt, net::TcpStream};

use crate::wire::{
    backend,
    read::{ReadError, read_message},
    startup, tag, write,
};

/// Why a replica connection could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error("could not connect to replica {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("replica {0} did not answer within {1:?}")]
    Timeout(String, Duration),
    #[error("replica {0} asks for a password; onetrip logs in to replicas by trust only")]
    Password(String),
    #[error("replica {0} refused the login: {1}")]
    Refused(String, String),
    #[error("replica {0}: {1}")]
    Read(String, ReadError),
    #[error("replica {0} answered with an error: {1}")]
    Query(String, String),
}

/// Largest message read from a replica outside a client's read.
const MAX: usize = 1 << 20;

/// Connects to `addr` and logs in with `params`, within `timeout`.
pub async fn open(
    addr: &str,
    params: &[(&str, &str)],
    timeout: Duration,
) -> Result<(TcpStream, BytesMut), ReplicaError> {
    let opened = crate::timers::timeout(timeout, login(addr, params)).await;
    opened.unwrap_or_else(|_| Err(ReplicaError::Timeout(addr.into(), timeout)))
}

async fn login(addr: &str, params: &[(&str, &str)]) -> Result<(TcpStream, BytesMut), ReplicaError> {
    let mut tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| ReplicaError::Connect(addr.into(), e))?;
    let _ = tcp.set_nodelay(true);
    tcp.write_all(&startup::encode_startup(params))
        .await
        .map_err(|e| ReplicaError::Connect(addr.into(), e))?;
    let mut buf = BytesMut::new();
    loop {
        let msg = read_message(&mut tcp, &mut buf, MAX)
            .await
            .map_err(|e| ReplicaError::Read(addr.into(), e))?;
        match msg[0] {
            tag::AUTHENTICATION => match backend::auth_code(&msg) {
                Some(0) => {}
                _ => return Err(ReplicaError::Password(addr.into())),
            },
            tag::ERROR_RESPONSE => return Err(ReplicaError::Refused(addr.into(), why(&msg))),
            tag::READY_FOR_QUERY => return Ok((tcp, buf)),
            _ => {}
        }
    }
}

/// The text of an ErrorResponse, with its SQLSTATE.
pub fn why(msg: &[u8]) -> String {
    let text = backend::error_field(msg, b'M').unwrap_or("error");
    let code = backend::error_field(msg, b'C').unwrap_or("?");
    format!("{text} (SQLSTATE {code})")
}

/// Runs `sql` (one statement of `n` columns) and returns its first row.
pub async fn query_row(
    addr: &str,
    tcp: &mut TcpStream,
    buf: &mut BytesMut,
    query: &Bytes,
    n: usize,
) -> Result<Vec<Option<String>>, ReplicaError> {
    tcp.write_all(query)
        .await
        .map_err(|e| ReplicaError::Connect(addr.into(), e))?;
    let mut row = None;
    let mut failed = None;
    loop {
        let msg = read_message(tcp, buf, MAX)
            .await
            .map_err(|e| ReplicaError::Read(addr.into(), e))?;
        match msg[0] {
            tag::DATA_ROW if row.is_none() => row = backend::data_row_text(&msg, n),
            tag::ERROR_RESPONSE => failed = Some(why(&msg)),
            tag::READY_FOR_QUERY => break,
            _ => {}
        }
    }
    match (failed, row) {
        (Some(e), _) => Err(ReplicaError::Query(addr.into(), e)),
        (None, Some(row)) => Ok(row),
        (None, None) => Err(ReplicaError::Query(addr.into(), "no row".into())),
    }
}

/// A simple Query message for `sql`.
pub fn query_message(sql: &str) -> Bytes {
    let mut out = BytesMut::new();
    write::query(&mut out, sql);
    out.freeze()
}

/// A WAL position as PostgreSQL prints it (`16/B374D848`).
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.split_once('/')?;
    let hi = u32::from_str_radix(hi, 16).ok()?;
    let lo = u32::from_str_radix(lo, 16).ok()?;
    Some((u64::from(hi) << 32) | u64::from(lo))
}

/// A WAL position as PostgreSQL prints it.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_text_both_ways() {
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
        assert_eq!(parse_lsn("nope"), None);
        assert_eq!(parse_lsn("1/"), None);
        assert_eq!(parse_lsn("100000000/0"), None);
    }
}
