//! A session's write queues: `Bytes` as they arrived, written with one
//! vectored write.

use std::{
    collections::VecDeque,
    io,
    io::IoSlice,
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use tokio::io::AsyncWrite;

/// Bytes waiting to be written, as the `Bytes` they arrived in.
#[derive(Debug, Default)]
pub struct WriteQueue {
    chunks: VecDeque<Bytes>,
    len: usize,
    /// Messages forwarded from one read buffer as they lie in it, not yet in
    /// `chunks`: `(buffer, start, end)`. The next message that follows them
    /// in the same buffer extends the run, so a read's worth of forwarded
    /// messages goes out as one slice.
    run: Option<(Bytes, usize, usize)>,
    /// Everything was written but not yet flushed (TLS streams hold records
    /// until flushed).
    unflushed: bool,
}

/// Most slices handed to one vectored write.
const MAX_SLICES: usize = 64;

impl WriteQueue {
    pub fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.seal();
            self.len += b.len();
            self.chunks.push_back(b);
        }
    }

    /// Queues `buf[start..end]`, joined to the previous part of `buf` when
    /// it directly follows it.
    pub fn push_part(&mut self, buf: &Bytes, start: usize, end: usize) {
        if start >= end {
            return;
        }
        if let Some((b, _, run_end)) = &mut self.run
            && *run_end == start
            && b.as_ptr() == buf.as_ptr()
            && b.len() == buf.len()
        {
            *run_end = end;
        } else {
            self.seal();
            self.run = Some((buf.clone(), start, end));
        }
        self.len += end - start;
    }

    /// Moves the open run into `chunks`.
    fn seal(&mut self) {
        if let Some((b, start, end)) = self.run.take() {
            self.chunks.push_back(if start == 0 && end == b.len() {
                b
            } else {
                b.slice(start..end)
            });
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Gives back the room of an empty queue (an idle session's).
    pub fn compact(&mut self) {
        if self.len == 0 && self.run.is_none() && !self.unflushed {
            self.chunks = VecDeque::new();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Something is left to write or to flush.
    pub fn wants_write(&self) -> bool {
        self.len > 0 || self.unflushed
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

    /// `f` over the first `MAX_SLICES` queued chunks, as one vectored
    /// write takes them.
    fn with_slices<R>(&self, f: impl FnOnce(&[IoSlice<'_>]) -> R) -> R {
        let mut slices = [IoSlice::new(&[]); MAX_SLICES];
        let mut k = 0;
        for c in self.chunks.iter().take(MAX_SLICES) {
            slices[k] = IoSlice::new(c);
            k += 1;
        }
        f(&slices[..k])
    }

    /// One vectored write of what is queued, then a flush once it is all
    /// written. Ready when the write made progress (or nothing was left),
    /// so a caller loops while `wants_write`.
    pub fn poll_write<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        self.seal();
        if !self.chunks.is_empty() {
            let n = if self.chunks.len() == 1 {
                // The usual case: one slice, no slice array to fill.
                ready!(Pin::new(&mut *w).poll_write(cx, &self.chunks[0]))?
            } else {
                ready!(self.with_slices(|s| Pin::new(&mut *w).poll_write_vectored(cx, s)))?
            };
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.advance(n);
            if !self.is_empty() {
                return Poll::Ready(Ok(()));
            }
            self.unflushed = true;
        }
        if self.unflushed {
            ready!(Pin::new(w).poll_flush(cx))?;
            self.unflushed = false;
        }
        Poll::Ready(Ok(()))
    }

    /// Writes what is queued to a non-blocking socket until all of it is
    /// written (true) or the socket would block (false).
    pub fn write_to(&mut self, s: &std::net::TcpStream) -> io::Result<bool> {
        use crate::worker::raw;
        let fd = std::os::fd::AsRawFd::as_raw_fd(s);
        self.seal();
        while !self.chunks.is_empty() {
            let written = if self.chunks.len() == 1 {
                raw::send(fd, &self.chunks[0])
            } else {
                self.with_slices(|slices| raw::send_slices(fd, slices))
            };
            match written {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // A plain socket holds nothing back.
        self.unflushed = false;
        Ok(true)
    }

    /// Writes and flushes everything.
    pub async fn write_all<W: AsyncWrite + Unpin>(&mut self, w: &mut W) -> io::Result<()> {
        while self.wants_write() {
            std::future::poll_fn(|cx| self.poll_write(w, cx)).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An emptied queue gives its room back; one with bytes keeps them.
    #[test]
    fn compact_gives_back_only_an_empty_queue_room() {
        let mut q = WriteQueue::default();
        q.push(Bytes::from_static(b"abc"));
        q.compact();
        assert_eq!(q.len(), 3);
        assert!(q.chunks.capacity() > 0);
        q.chunks.clear();
        q.len = 0;
        q.compact();
        assert_eq!(q.chunks.capacity(), 0);
    }

    #[tokio::test]
    async fn parts_of_one_buffer_leave_as_one_slice_in_order() {
        let a = Bytes::from_static(b"0123456789");
        let b = Bytes::from_static(b"abcdef");
        let mut q = WriteQueue::default();
        q.push_part(&a, 0, 3);
        q.push_part(&a, 3, 5);
        q.push_part(&a, 6, 8); // not adjacent: a new slice
        q.push_part(&b, 0, 2); // another buffer: a new slice
        q.push(Bytes::from_static(b"!"));
        q.push_part(&b, 2, 4); // after a push: a new slice
        assert_eq!(q.len(), 3 + 2 + 2 + 2 + 1 + 2);
        q.seal();
        let parts: Vec<&[u8]> = q.chunks.iter().map(|c| &c[..]).collect();
        assert_eq!(
            parts,
            [&b"01234"[..], b"67", b"ab", b"!", b"cd"],
            "adjacent parts are joined, everything else keeps its order"
        );
        let mut out = Vec::new();
        q.write_all(&mut out).await.unwrap();
        assert_eq!(out, b"0123467ab!cd");
        assert!(!q.wants_write());
    }
}
