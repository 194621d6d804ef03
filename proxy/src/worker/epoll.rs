//! The little of epoll(7) a worker needs, over libc: one instance, sockets
//! added edge-triggered and removed, and a wait.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
};

/// Readiness a socket is watched for: edge-triggered, so a ready socket is
/// reported once and then read or written until it would block.
pub const SOCKET: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
/// Level-triggered readable: reported for as long as it lasts.
pub const LEVEL_READABLE: u32 = libc::EPOLLIN as u32;

/// A readiness report: the socket's data word and what it is ready for.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub data: u64,
    pub flags: u32,
}

impl Event {
    /// Readable, or closed or failed (a read then says which).
    pub fn readable(&self) -> bool {
        self.flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32
            != 0
    }

    /// The peer closed its side, or the socket failed: reads go on until
    /// they say so, whatever a short read suggests.
    pub fn closed(&self) -> bool {
        self.flags & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0
    }

    /// Writable, or closed or failed (a write then says which).
    pub fn writable(&self) -> bool {
        self.flags & (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0
    }
}

pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: no pointers; a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn add(&self, fd: RawFd, flags: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: flags,
            u64: data,
        };
        // SAFETY: `ev` outlives the call.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL.
        let r = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` (-1: no limit, 0: not at all) and fills
    /// `events`; an interrupted wait reports nothing.
    pub fn wait(&self, events: &mut Events, timeout_ms: i32) -> io::Result<()> {
        let cap = events.buf.len() as libc::c_int;
        // SAFETY: the kernel writes at most `cap` entries into `buf`.
        let waited = unsafe {
            super::raw::epoll_wait(
                self.fd.as_raw_fd(),
                events.buf.as_mut_ptr(),
                cap,
                timeout_ms,
            )
        };
        match waited {
            Ok(n) => events.n = n,
            Err(e) => {
                events.n = 0;
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// Room for the reports of one wait.
pub struct Events {
    buf: Vec<libc::epoll_event>,
    n: usize,
}

impl Events {
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; cap.max(1)],
            n: 0,
        }
    }

    pub fn get(&self, i: usize) -> Option<Event> {
        (i < self.n).then(|| {
            let e = self.buf[i];
            Event {
                data: e.u64,
                flags: e.events,
            }
        })
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The last wait filled every slot: more may be waiting.
    pub fn full(&self) -> bool {
        self.n == self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_socket_is_reported_once_per_edge_and_not_after_removal() {
        let ep = Epoll::new().unwrap();
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        ep.add(b.as_raw_fd(), SOCKET, 7).unwrap();
        let mut ev = Events::with_capacity(4);
        ep.wait(&mut ev, 0).unwrap();
        // Writable from the start; nothing to read yet.
        let first = ev.get(0).unwrap();
        assert_eq!((ev.len(), first.data), (1, 7));
        assert!(first.writable() && !first.readable());
        ep.wait(&mut ev, 0).unwrap();
        assert_eq!(ev.len(), 0, "an edge is reported once");
        a.write_all(b"x").unwrap();
        ep.wait(&mut ev, 100).unwrap();
        assert!(ev.get(0).unwrap().readable());
        ep.delete(b.as_raw_fd()).unwrap();
        a.write_all(b"y").unwrap();
        ep.wait(&mut ev, 0).unwrap();
        assert_eq!(ev.len(), 0);
        assert!(ev.get(0).is_none());
    }

    #[test]
    fn a_level_triggered_source_is_reported_while_it_lasts() {
        let ep = Epoll::new().unwrap();
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        ep.add(b.as_raw_fd(), LEVEL_READABLE, 1).unwrap();
        a.write_all(b"x").unwrap();
        let mut ev = Events::with_capacity(1);
        for _ in 0..2 {
            ep.wait(&mut ev, 100).unwrap();
            assert!(ev.full() && ev.get(0).unwrap().readable());
        }
    }
}
