//! Reading whole messages for the sequential parts of a session (startup,
//! authentication, keeping a connection, the admin console).

use std::io;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::frame::{FrameError, peek_header};

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Reads until one whole tagged message is at the front of `buf`, and takes it.
pub async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    max_len: usize,
) -> Result<Bytes, ReadError> {
    loop {
        if let Some(h) = peek_header(buf, max_len)?
            && buf.len() >= h.wire_len
        {
            return Ok(buf.split_to(h.wire_len).freeze());
        }
        buf.reserve(8192);
        if r.read_buf(buf).await? == 0 {
            return Err(ReadError::Closed);
        }
    }
}
