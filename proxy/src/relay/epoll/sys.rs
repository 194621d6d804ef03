//! What a turn asks of the system: a socket read, a task woken.

use std::{io, net::TcpStream, os::fd::AsRawFd, task::Waker};

use bytes::BytesMut;

use crate::{relay::reserve, worker::raw};

/// One read into `buf`'s spare room: how much, and whether it emptied
/// the socket (a short read does, on a stream socket).
#[inline(always)]
pub(super) fn read_into(s: &TcpStream, buf: &mut BytesMut) -> io::Result<(usize, bool)> {
    reserve(buf);
    let len = buf.len();
    let room = buf.capacity() - len;
    loop {
        let spare = buf.spare_capacity_mut();
        // SAFETY: recv writes at most `room` bytes into the spare room.
        match unsafe { raw::recv(s.as_raw_fd(), spare.as_mut_ptr().cast(), room) } {
            Ok(n) => {
                // SAFETY: the first `n` spare bytes were just written.
                unsafe { buf.set_len(len + n) };
                return Ok((n, n < room));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Wakes the task of `w`, if any: whether there was one.
pub(super) fn wake(w: Option<Waker>) -> bool {
    match w {
        Some(w) => {
            w.wake();
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_fills_spare_room_and_tells_a_short_one() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut buf = BytesMut::from(&b"ab"[..]);
        assert_eq!(
            read_into(&b, &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        a.write_all(b"cde").unwrap();
        let got = loop {
            match read_into(&b, &mut buf) {
                Ok(r) => break r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(got, (3, true));
        assert_eq!(&buf[..], b"abcde");
        drop(a);
        assert_eq!(read_into(&b, &mut buf).unwrap(), (0, true));
    }
}
