//! Buffered, batched I/O for a session: read buffers, write queues of
//! `Bytes` written with one vectored write, and message reads for the
//! sequential parts of a session (startup, authentication).

use std::{collections::VecDeque, io, io::IoSlice, time::Duration};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::wire::frame::{FrameError, peek_header};

/// Bytes waiting to be written, as the `Bytes` they arrived in.
#[derive(Debug, Default)]
pub struct WriteQueue {
    chunks: VecDeque<Bytes>,
    len: usize,
}

/// Most slices handed to one vectored write.
const MAX_SLICES: usize = 64;

impl WriteQueue {
    pub fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.chunks.push_back(b);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn advance(&mut self, mut n: usize) {
        self.len -= n;
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                return;
            };
            if front.len() <= n {
                n -= front.len();
                self.chunks.pop_front();
            } else {
                let _ = front.split_to(n);
                n = 0;
            }
        }
    }

    /// Writes as much as one vectored write takes; flushes once empty (TLS
    /// streams hold records until flushed). Cancel-safe: a write either
    /// happened and is accounted for, or did not happen.
    pub async fn write_some<W: AsyncWrite + Unpin>(&mut self, w: &mut W) -> io::Result<()> {
        let n = {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let mut k = 0;
            for c in self.chunks.iter().take(MAX_SLICES) {
                slices[k] = IoSlice::new(c);
                k += 1;
            }
            w.write_vectored(&slices[..k]).await?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.advance(n);
        if self.is_empty() {
            w.flush().await?;
        }
        Ok(())
    }

    /// Writes everything.
    pub async fn write_all<W: AsyncWrite + Unpin>(&mut self, w: &mut W) -> io::Result<()> {
        while !self.is_empty() {
            self.write_some(w).await?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error("timed out")]
    Timeout,
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
    timeout: Duration,
) -> Result<Bytes, ReadError> {
    let fut = async {
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
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| ReadError::Timeout)?
}
