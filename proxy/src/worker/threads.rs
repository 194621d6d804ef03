//! Starting worker threads: a one-thread runtime each, set up to relay
//! through the worker's own epoll when the runtime's epoll can be found.

use std::{io, os::fd::RawFd};

/// The worker threads; stopped and joined when dropped.
pub struct Workers {
    handles: Vec<tokio::runtime::Handle>,
    /// Workers that relay through their own epoll.
    own_epoll: usize,
    stop: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    /// `threads` = 0: one per CPU core. Each relays its plain-TCP sessions
    /// itself through `relay` (when the runtime's epoll can be found).
    pub fn start(threads: usize, relay: super::Relay) -> io::Result<Self> {
        let n = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let mut w = Workers {
            handles: Vec::new(),
            own_epoll: 0,
            stop: Vec::new(),
            threads: Vec::new(),
        };
        for i in 0..n {
            let (rt, reactor) = runtime(relay, eventpolls)?;
            match reactor {
                Some(_) => w.own_epoll += 1,
                None => tracing::warn!(
                    worker = i,
                    "the runtime's epoll was not found: this worker relays through tokio"
                ),
            }
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            w.handles.push(rt.handle().clone());
            w.stop.push(tx);
            w.threads.push(
                std::thread::Builder::new()
                    .name(format!("onetrip-worker-{i}"))
                    .spawn(move || {
                        if let Some(r) = reactor {
                            super::install(r);
                        }
                        let _ = rt.block_on(rx);
                    })?,
            );
        }
        Ok(w)
    }

    pub fn handles(&self) -> Vec<tokio::runtime::Handle> {
        self.handles.clone()
    }

    /// How many of them relay plain-TCP sessions through their own epoll
    /// (all, unless the runtime's epoll could not be found).
    pub fn relaying_themselves(&self) -> usize {
        self.own_epoll
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for tx in self.stop.drain(..) {
            let _ = tx.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A worker's runtime, with the worker's epoll when the runtime's own
/// could be told apart (then the runtime has no timer driver and parks
/// through the worker's epoll). Otherwise a plain runtime with IO and
/// timers.
fn runtime(
    relay: super::Relay,
    eventpolls: fn() -> io::Result<Vec<RawFd>>,
) -> io::Result<(tokio::runtime::Runtime, Option<super::Reactor>)> {
    // tokio does not expose its epoll: it is the one that appears while
    // the runtime is built (twice: its registry holds a duplicate). Another
    // thread creating an epoll at that moment makes it ambiguous; then try
    // again, and in the end do without. Workers are started one at a time.
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..10 {
        // Without /proc there is no telling.
        let Ok(before) = eventpolls() else { break };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .on_thread_park(super::park)
            .build()?;
        let Ok(after) = eventpolls() else {
            rt.shutdown_background();
            break;
        };
        let new: Vec<RawFd> = after
            .into_iter()
            .filter(|fd| !before.contains(fd))
            .collect();
        if let Some(fd) = one_instance(&new)
            && let Ok(reactor) = super::Reactor::new(fd, relay)
        {
            return Ok((rt, Some(reactor)));
        }
        // Dropped without waiting: workers may be started from inside a
        // runtime (tests), where a runtime must not block to shut down.
        rt.shutdown_background();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok((rt, None))
}

/// This process's open epoll descriptors.
fn eventpolls() -> io::Result<Vec<RawFd>> {
    let mut fds = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        if std::fs::read_link(entry.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:[eventpoll]")
        {
            fds.push(fd);
        }
    }
    Ok(fds)
}

/// The first of `fds` when all of them are one epoll instance. All epolls
/// share one inode, so it is asked of the kernel: a descriptor added to an
/// instance is there already when added again through a duplicate.
fn one_instance(fds: &[RawFd]) -> Option<RawFd> {
    let (&first, rest) = fds.split_first()?;
    // SAFETY: plain descriptor calls; the probe is closed below.
    unsafe {
        let probe = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
        if probe < 0 {
            return None;
        }
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        let mut same = libc::epoll_ctl(first, libc::EPOLL_CTL_ADD, probe, &mut ev) == 0;
        for &fd in rest {
            if !same {
                break;
            }
            if libc::epoll_ctl(fd, libc::EPOLL_CTL_ADD, probe, &mut ev) == 0 {
                libc::epoll_ctl(fd, libc::EPOLL_CTL_DEL, probe, std::ptr::null_mut());
                same = false;
            } else {
                same = io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST);
            }
        }
        libc::epoll_ctl(first, libc::EPOLL_CTL_DEL, probe, std::ptr::null_mut());
        libc::close(probe);
        same.then_some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_RELAY: super::super::Relay = super::super::Relay {
        any: || false,
        has_pending: || false,
        on_event: |_| false,
        run_pending: || false,
        give_back_all: || {},
    };

    /// Whether `rt`, on a thread of its own that parks through `reactor`
    /// (as a worker does), sees a socket become readable: with a stranger
    /// epoll in place of the runtime's it would wait forever.
    fn serves(rt: tokio::runtime::Runtime, reactor: Option<super::super::Reactor>) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if let Some(r) = reactor {
                super::super::install(r);
            }
            let ok = rt.block_on(async {
                let (a, b) = tokio::net::UnixStream::pair().unwrap();
                a.try_write(b"x").unwrap();
                b.readable().await.is_ok()
            });
            let _ = tx.send(ok);
        });
        rx.recv_timeout(std::time::Duration::from_secs(3))
            .unwrap_or(false)
    }

    /// What the check above would see of a mistaken epoll.
    #[test]
    fn a_stranger_epoll_starves_the_runtime() {
        let stranger = super::super::epoll::Epoll::new().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .on_thread_park(super::super::park)
            .build()
            .unwrap();
        let reactor = super::super::Reactor::new(stranger.raw(), NO_RELAY).unwrap();
        assert!(!serves(rt, Some(reactor)));
        // The thread waits in it forever; the test process ends anyway.
        std::mem::forget(stranger);
    }

    #[test]
    fn without_proc_the_runtime_relays_alone() {
        let (rt, reactor) = runtime(NO_RELAY, || Err(io::Error::other("no /proc"))).unwrap();
        assert!(reactor.is_none());
        assert!(serves(rt, reactor));
    }

    /// Another thread opening and closing epolls while a runtime is built
    /// can make the runtime's ambiguous: then it is tried again or done
    /// without, never mistaken for another.
    #[test]
    fn epolls_opened_elsewhere_are_never_taken_for_the_runtimes() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    drop(super::super::epoll::Epoll::new());
                }
            })
        };
        for _ in 0..20 {
            let (rt, reactor) = runtime(NO_RELAY, eventpolls).unwrap();
            assert!(serves(rt, reactor));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().unwrap();
    }

    /// Workers are started from inside a runtime in tests: the runtimes
    /// tried and set aside there must not block to shut down (a panic).
    #[test]
    fn runtimes_set_aside_inside_a_runtime_do_not_panic() {
        let outer = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (rt, reactor) = outer.block_on(async {
            // No epoll ever appears: each try is set aside.
            runtime(NO_RELAY, || Ok(Vec::new())).unwrap()
        });
        assert!(reactor.is_none());
        assert!(serves(rt, reactor));
    }

    #[test]
    fn duplicates_are_one_instance_and_two_epolls_are_not() {
        let a = super::super::epoll::Epoll::new().unwrap();
        let b = super::super::epoll::Epoll::new().unwrap();
        let (a, b) = (a.raw(), b.raw());
        // SAFETY: a new descriptor, closed below.
        let dup = unsafe { libc::dup(a) };
        assert_eq!(one_instance(&[a, dup]), Some(a));
        assert_eq!(one_instance(&[dup, a, b]), None);
        assert_eq!(one_instance(&[]), None);
        // SAFETY: ours, and not used after.
        unsafe { libc::close(dup) };
    }
}
