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

/// Least room a read asks for.
const READ_AT_LEAST: usize = 1024;
/// Most room a read asks for ahead of the bytes: a header may claim a
/// length its sender never sends.
const READ_AT_MOST: usize = 64 * 1024;

/// Reads until one whole tagged message is at the front of `buf`, and takes it.
/// The room asked for is what the message at the front lacks, within
/// bounds: the messages of a login are short, and a thousand logins at once
/// each held 8 kB more per buffer when every read asked for 8 kB.
pub async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    max_len: usize,
) -> Result<Bytes, ReadError> {
    loop {
        let lacks = match peek_header(buf, max_len)? {
            Some(h) if buf.len() >= h.wire_len => return Ok(buf.split_to(h.wire_len).freeze()),
            Some(h) => h.wire_len - buf.len(),
            None => 0,
        };
        buf.reserve(lacks.clamp(READ_AT_LEAST, READ_AT_MOST));
        if r.read_buf(buf).await? == 0 {
            return Err(ReadError::Closed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, body_len: usize) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(body_len as u32 + 4).to_be_bytes());
        m.extend(std::iter::repeat_n(b'x', body_len));
        m
    }

    /// Short messages are read in little room; a long one is read whole
    /// however many reads it takes.
    #[tokio::test]
    async fn messages_are_read_whole_in_the_room_they_need() {
        let (short, long) = (msg(b'R', 8), msg(b'D', 200_000));
        let wire = [short.clone(), long.clone(), short.clone()].concat();
        let mut r = &wire[..];
        let mut buf = BytesMut::new();
        assert_eq!(
            read_message(&mut r, &mut buf, 1 << 20).await.unwrap(),
            short
        );
        assert!(buf.capacity() < 8192, "{}", buf.capacity());
        assert_eq!(read_message(&mut r, &mut buf, 1 << 20).await.unwrap(), long);
        assert_eq!(
            read_message(&mut r, &mut buf, 1 << 20).await.unwrap(),
            short
        );
        assert!(matches!(
            read_message(&mut r, &mut buf, 1 << 20).await,
            Err(ReadError::Closed)
        ));
    }

    /// A header that claims more than its sender sends is not room taken
    /// ahead: the room grows with what arrives.
    #[tokio::test]
    async fn a_claimed_length_is_not_taken_on_trust() {
        let mut wire = msg(b'D', 0);
        wire[1..5].copy_from_slice(&(1u32 << 29).to_be_bytes());
        let mut r = &wire[..];
        let mut buf = BytesMut::new();
        assert!(matches!(
            read_message(&mut r, &mut buf, 1 << 30).await,
            Err(ReadError::Closed)
        ));
        assert!(buf.capacity() <= 2 * READ_AT_MOST, "{}", buf.capacity());
    }
}
