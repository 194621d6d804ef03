//! Header-only framing over a read buffer.
//!
//! The splitter walks message headers (tag + length) in place. Messages the
//! session must read are handed over whole; everything else is forwarded as
//! it arrives, so a large DataRow or CopyData streams through without being
//! buffered whole.

use bytes::{Bytes, BytesMut};

/// A message header: tag and total length on the wire (tag byte included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub tag: u8,
    pub wire_len: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("invalid message length {len} for message type '{}'", char::from(*tag))]
    BadLength { tag: u8, len: u32 },
    #[error(
        "message of type '{}' is {len} bytes, over the limit of {limit} bytes",
        char::from(*tag)
    )]
    TooLarge { tag: u8, len: usize, limit: usize },
}

/// PostgreSQL's limit for a message before authentication is over (a
/// password or SASL message: PG_MAX_AUTH_TOKEN_LENGTH, 65535 bytes with the
/// length field), as a wire length (tag byte included). A client not yet
/// known can make the proxy hold no more than this.
pub const MAX_AUTH_MESSAGE: usize = 65_535 + 1;

impl FrameError {
    /// The SQLSTATE a client gets for it: 54000 (program limit exceeded)
    /// for a message over the limit, 08P01 for a malformed one.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            FrameError::TooLarge { .. } => "54000",
            FrameError::BadLength { .. } => "08P01",
        }
    }
}

/// Reads the header at the start of `buf`, if five bytes are there.
pub fn peek_header(buf: &[u8], max_len: usize) -> Result<Option<Header>, FrameError> {
    let Some(head) = buf.get(..5) else {
        return Ok(None);
    };
    let tag = head[0];
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    if len < 4 {
        return Err(FrameError::BadLength { tag, len });
    }
    let wire_len = len as usize + 1;
    if wire_len > max_len {
        return Err(FrameError::TooLarge {
            tag,
            len: wire_len,
            limit: max_len,
        });
    }
    Ok(Some(Header { tag, wire_len }))
}

/// Length of the complete messages at the start of `buf`. An invalid
/// header is an error only when no complete message precedes it, so what
/// came before it is still handled first.
pub fn complete_len(buf: &[u8], max_len: usize) -> Result<usize, FrameError> {
    let mut at = 0;
    loop {
        match peek_header(&buf[at..], max_len) {
            Ok(Some(h)) if at + h.wire_len <= buf.len() => at += h.wire_len,
            Ok(_) => return Ok(at),
            Err(e) if at == 0 => return Err(e),
            Err(_) => return Ok(at),
        }
    }
}

/// One step of splitting a read buffer.
#[derive(Debug)]
pub enum Piece {
    /// A whole message (header included) that the session asked to see.
    Whole(Header, Bytes),
    /// Bytes of a message forwarded without inspection; `header` is `Some`
    /// on the first piece of each message.
    Pass(Option<Header>, Bytes),
}

/// Splits a byte stream into messages; keeps the position inside a message
/// that is being passed through.
#[derive(Debug, Default)]
pub struct Splitter {
    pass_remaining: usize,
}

impl Splitter {
    /// Bytes still to come of the message being passed through.
    pub fn in_pass(&self) -> bool {
        self.pass_remaining > 0
    }

    /// Takes the next piece off `buf`. `want_whole(tag)` says which messages
    /// must be delivered whole. Returns `Ok(None)` when more bytes are needed.
    ///
    /// Consecutive pass-through messages that are complete in the buffer are
    /// returned as one piece (one `Bytes`, one write later), which is what
    /// keeps forwarding a result set cheap.
    pub fn next(
        &mut self,
        buf: &mut BytesMut,
        max_len: usize,
        want_whole: impl Fn(u8) -> bool,
    ) -> Result<Option<Piece>, FrameError> {
        if self.pass_remaining > 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            let n = self.pass_remaining.min(buf.len());
            self.pass_remaining -= n;
            return Ok(Some(Piece::Pass(None, buf.split_to(n).freeze())));
        }
        let Some(first) = peek_header(buf, max_len)? else {
            return Ok(None);
        };
        if want_whole(first.tag) {
            if buf.len() < first.wire_len {
                // No room is reserved for the declared length: the buffer
                // grows as the bytes come (`relay::reserve`), so a header
                // claiming a gigabyte costs nothing until it is sent.
                return Ok(None);
            }
            return Ok(Some(Piece::Whole(
                first,
                buf.split_to(first.wire_len).freeze(),
            )));
        }
        // Extend the run over every following complete pass-through message.
        let mut end = first.wire_len;
        while end < buf.len() {
            match peek_header(&buf[end..], max_len) {
                Ok(Some(h)) if !want_whole(h.tag) && end + h.wire_len <= buf.len() => {
                    end += h.wire_len
                }
                _ => break,
            }
        }
        if end > buf.len() {
            // The first message is incomplete: forward what is here.
            self.pass_remaining = end - buf.len();
            let n = buf.len();
            return Ok(Some(Piece::Pass(Some(first), buf.split_to(n).freeze())));
        }
        Ok(Some(Piece::Pass(Some(first), buf.split_to(end).freeze())))
    }
}

/// Iterates the headers of complete messages in `run` (a `Piece::Pass` run).
pub fn headers(run: &[u8]) -> impl Iterator<Item = Header> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let h = peek_header(run.get(at..)?, usize::MAX).ok()??;
        if at + h.wire_len > run.len() {
            return None;
        }
        at += h.wire_len;
        Some(h)
    })
}

/// Iterates the complete messages in `run`: (type, whole message).
pub fn messages(run: &[u8]) -> impl Iterator<Item = (u8, &[u8])> + '_ {
    let mut at = 0usize;
    headers(run).map(move |h| {
        // `headers` yields only messages that are whole in `run`.
        let msg = &run[at..at + h.wire_len];
        at += h.wire_len;
        (h.tag, msg)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn messages_are_whole_ones_with_their_type() {
        let mut all = msg(b'C', b"Sa\0");
        all.extend(msg(b'S', b""));
        let whole = all.len();
        all.extend(&msg(b'Q', b"SELECT 1\0")[..6]);
        let got: Vec<_> = messages(&all).collect();
        assert_eq!(got, [(b'C', &all[..8]), (b'S', &all[8..whole])]);
    }

    #[test]
    fn passes_runs_and_stops_at_wanted() {
        let mut all = msg(b'D', b"abc");
        all.extend(msg(b'D', b"de"));
        all.extend(msg(b'Z', b"I"));
        let mut buf = BytesMut::from(&all[..]);
        let mut s = Splitter::default();
        let want = |t| t == b'Z';
        match s.next(&mut buf, 1 << 20, want).unwrap().unwrap() {
            Piece::Pass(Some(h), b) => {
                assert_eq!(h.tag, b'D');
                assert_eq!(b.len(), 8 + 7);
                assert_eq!(headers(&b).count(), 2);
            }
            other => panic!("{other:?}"),
        }
        match s.next(&mut buf, 1 << 20, want).unwrap().unwrap() {
            Piece::Whole(h, b) => assert_eq!((h.tag, &b[5..]), (b'Z', &b"I"[..])),
            other => panic!("{other:?}"),
        }
        assert!(s.next(&mut buf, 1 << 20, want).unwrap().is_none());
    }

    #[test]
    fn streams_a_partial_large_message() {
        let m = msg(b'd', &[7u8; 100]);
        let mut buf = BytesMut::from(&m[..40]);
        let mut s = Splitter::default();
        let Piece::Pass(Some(_), b) = s.next(&mut buf, 1 << 20, |_| false).unwrap().unwrap() else {
            panic!()
        };
        assert_eq!(b.len(), 40);
        assert!(s.in_pass());
        buf.extend_from_slice(&m[40..]);
        buf.extend_from_slice(&msg(b'c', b""));
        let Piece::Pass(None, b) = s.next(&mut buf, 1 << 20, |_| false).unwrap().unwrap() else {
            panic!()
        };
        assert_eq!(b.len(), m.len() - 40);
        assert!(!s.in_pass());
        assert!(matches!(
            s.next(&mut buf, 1 << 20, |_| false).unwrap(),
            Some(Piece::Pass(Some(Header { tag: b'c', .. }), _))
        ));
    }

    #[test]
    fn complete_len_stops_before_a_partial_or_bad_message() {
        let mut all = msg(b'P', b"abc");
        all.extend(msg(b'S', b""));
        let whole = all.len();
        all.extend(&msg(b'B', b"xyz")[..6]);
        assert_eq!(complete_len(&all, 1 << 20), Ok(whole));
        // What precedes a bad header is still handed over first.
        let mut bad = msg(b'S', b"");
        bad.extend([b'Q', 0, 0, 0, 2]);
        assert_eq!(complete_len(&bad, 1 << 20), Ok(5));
        assert!(complete_len(&bad[5..], 1 << 20).is_err());
    }

    #[test]
    fn a_declared_length_reserves_nothing() {
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(&[b'Q', 0x3f, 0xff, 0xff, 0xf0, b's']);
        let mut s = Splitter::default();
        assert!(s.next(&mut buf, 1 << 30, |_| true).unwrap().is_none());
        assert!(buf.capacity() < 1024, "{}", buf.capacity());
    }

    #[test]
    fn rejects_bad_lengths() {
        let mut buf = BytesMut::from(&[b'Q', 0, 0, 0, 2][..]);
        assert!(matches!(
            Splitter::default().next(&mut buf, 100, |_| true),
            Err(FrameError::BadLength { .. })
        ));
        let mut buf = BytesMut::from(&[b'Q', 0, 0, 1, 0][..]);
        assert!(matches!(
            Splitter::default().next(&mut buf, 100, |_| true),
            Err(FrameError::TooLarge { .. })
        ));
    }
}
