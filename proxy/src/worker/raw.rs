//! The worker's socket calls, made as plain system calls. glibc's `recv`,
//! `send`, `sendmsg` and `epoll_wait` are thread-cancellation points: each
//! call turns asynchronous cancellation on and off around the system call,
//! about 35 instructions, six times a transaction. The proxy never cancels
//! a thread, so it calls the kernel directly (`syscall(2)`).

use std::{
    io::{self, IoSlice},
    os::fd::RawFd,
};

/// The result of a system call that returns a count, or errno's error.
fn counted(r: libc::c_long) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// recv(2) into `len` bytes at `buf`.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
pub unsafe fn recv(fd: RawFd, buf: *mut u8, len: usize) -> io::Result<usize> {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: the caller vouches for `buf`; no address is asked back.
    counted(unsafe { libc::syscall(libc::SYS_recvfrom, fd, buf, len, 0, null, null) })
}

/// send(2) of `buf`, with no SIGPIPE when the peer is gone (as the
/// standard library's sockets send).
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    let (ptr, len) = (buf.as_ptr(), buf.len());
    let null = std::ptr::null::<libc::c_void>();
    // SAFETY: `buf` is valid for reads of its length; no address is given.
    counted(unsafe { libc::syscall(libc::SYS_sendto, fd, ptr, len, libc::MSG_NOSIGNAL, null, 0) })
}

/// sendmsg(2) of `slices` in order, with no SIGPIPE.
pub fn send_slices(fd: RawFd, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: a zeroed msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is an iovec on Unix, by the standard library's guarantee.
    msg.msg_iov = slices.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = slices.len() as _;
    // SAFETY: `msg` points at `slices`, valid for reads while this runs.
    counted(unsafe { libc::syscall(libc::SYS_sendmsg, fd, &msg, libc::MSG_NOSIGNAL) })
}

/// epoll_wait(2) (as epoll_pwait with no signal mask, which every
/// architecture has) for at most `cap` events into `events`.
///
/// # Safety
/// `events` must be valid for writes of `cap` entries.
pub unsafe fn epoll_wait(
    epfd: RawFd,
    events: *mut libc::epoll_event,
    cap: libc::c_int,
    timeout_ms: libc::c_int,
) -> io::Result<usize> {
    let no_mask = std::ptr::null::<libc::sigset_t>();
    // SAFETY: the caller vouches for `events`; no signal mask is given.
    counted(unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait,
            epfd,
            events,
            cap,
            timeout_ms,
            no_mask,
            0,
        )
    })
}

#[cfg(test)]
mod tests {
    use std::{
        io::{Read, Write},
        net::{TcpListener, TcpStream},
        os::fd::AsRawFd,
    };

    use super::*;

    /// Bytes sent one way and in slices arrive in order; a closed peer is
    /// an error, not a signal; an empty socket would block.
    #[test]
    fn raw_calls_move_bytes_and_report_errors() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        assert_eq!(send(a.as_raw_fd(), b"ab").unwrap(), 2);
        let parts = [IoSlice::new(b"cd"), IoSlice::new(b""), IoSlice::new(b"e")];
        assert_eq!(send_slices(a.as_raw_fd(), &parts).unwrap(), 3);
        let mut got = [0u8; 5];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abcde");

        b.write_all(b"xyz").unwrap();
        let mut buf = [0u8; 8];
        // SAFETY: `buf` holds 8 bytes.
        let n = unsafe { recv(a.as_raw_fd(), buf.as_mut_ptr(), buf.len()) }.unwrap();
        assert_eq!(&buf[..n], b"xyz");
        a.set_nonblocking(true).unwrap();
        // SAFETY: as above.
        let e = unsafe { recv(a.as_raw_fd(), buf.as_mut_ptr(), buf.len()) }.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);

        drop(b);
        // The peer's reset shows on a later send; SIGPIPE would kill the
        // test process instead.
        let mut failed = false;
        for _ in 0..100 {
            if send(a.as_raw_fd(), &[0; 1024]).is_err() {
                failed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(failed, "sends to a closed peer kept succeeding");
    }
}
