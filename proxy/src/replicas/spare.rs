//! A transaction pool's connections to its replicas: as its server
//! connections are shared by its clients, so are these, leased for one
//! read (or one read only transaction) and given back. At most the pool's
//! size per replica are open at once; a read that finds none to lease and
//! no room to open one goes to the primary. Each keeps the startup
//! parameters it logged in with (a lease takes only one opened with the
//! client's own) and the named statements it holds, by the Parse that
//! made them: a client's statement is made again on it only when it
//! holds another text under the name.

use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;

/// What a replica connection holds under each statement name: the Parse
/// that made it.
pub type Statements = FxHashMap<String, Bytes>;

/// Past this many, a connection given back is closed rather than kept:
/// what it holds stays bounded.
const MAX_STATEMENTS: usize = 1000;

/// A pool's replica connections.
#[derive(Debug)]
pub struct Spare {
    /// At most this many open per replica.
    size: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    idle: Vec<Idle>,
    /// Open connections per replica, leased or idle.
    open: Vec<usize>,
}

/// A replica connection between two leases: a plain socket in no reactor,
/// so any worker's session may take it.
#[derive(Debug)]
pub struct Idle {
    pub replica: usize,
    pub params: Arc<[(String, String)]>,
    pub tcp: std::net::TcpStream,
    pub buf: BytesMut,
    pub statements: Statements,
    pub place: Place,
}

/// One open connection's place under the cap; given up when dropped.
#[derive(Debug)]
pub struct Place {
    spare: Arc<Spare>,
    replica: usize,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut inner = self.spare.lock();
        if let Some(n) = inner.open.get_mut(self.replica) {
            *n = n.saturating_sub(1);
        }
    }
}

/// What a lease finds.
pub enum Lease {
    /// An idle connection logged in with the client's parameters.
    Idle(Box<Idle>),
    /// Room to open one: its place, taken.
    Open(Place),
    /// As many open as the pool's size: the read goes to the primary.
    Full,
}

impl Spare {
    pub fn new(size: usize) -> Arc<Self> {
        Arc::new(Self {
            size: size.max(1),
            inner: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection to replica `replica` for a client logged in with
    /// `params`. An idle one logged in otherwise is closed to make room
    /// when the cap is reached.
    pub fn lease(self: &Arc<Self>, replica: usize, params: &[(String, String)]) -> Lease {
        let mut inner = self.lock();
        if let Some(i) = inner
            .idle
            .iter()
            .rposition(|c| c.replica == replica && &*c.params == params)
        {
            return Lease::Idle(Box::new(inner.idle.swap_remove(i)));
        }
        if inner.open.len() <= replica {
            inner.open.resize(replica + 1, 0);
        }
        let stranger = match inner.open[replica] >= self.size {
            true => match inner.idle.iter().position(|c| c.replica == replica) {
                // Dropped below, after the lock: its place gives itself up.
                Some(i) => Some(inner.idle.swap_remove(i)),
                None => return Lease::Full,
            },
            false => None,
        };
        inner.open[replica] += 1;
        drop(inner);
        drop(stranger);
        Lease::Open(Place {
            spare: self.clone(),
            replica,
        })
    }

    /// A connection comes back, quiet (no transaction, nothing unread):
    /// kept for the next lease unless it holds too much.
    pub fn give_back(&self, conn: Idle) {
        if conn.statements.len() > MAX_STATEMENTS || !conn.buf.is_empty() {
            return;
        }
        self.lock().idle.push(conn);
    }

    /// Connections to replica `replica` kept idle now (for tests and
    /// reports).
    pub fn idle(&self, replica: usize) -> usize {
        self.lock()
            .idle
            .iter()
            .filter(|c| c.replica == replica)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected socket (to a listener of the test's own).
    fn socket(l: &std::net::TcpListener) -> std::net::TcpStream {
        std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap()
    }

    fn idle(
        replica: usize,
        params: &Arc<[(String, String)]>,
        place: Place,
        l: &std::net::TcpListener,
    ) -> Idle {
        Idle {
            replica,
            params: params.clone(),
            tcp: socket(l),
            buf: BytesMut::new(),
            statements: Statements::default(),
            place,
        }
    }

    #[test]
    fn at_most_the_pools_size_per_replica_and_only_the_clients_own() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let spare = Spare::new(2);
        let a: Arc<[(String, String)]> = vec![("user".to_owned(), "a".to_owned())].into();
        let b: Arc<[(String, String)]> = vec![("user".to_owned(), "b".to_owned())].into();
        let (Lease::Open(p1), Lease::Open(p2)) = (spare.lease(0, &a), spare.lease(0, &a)) else {
            panic!("two places");
        };
        assert!(matches!(spare.lease(0, &a), Lease::Full), "the cap");
        // Another replica has places of its own.
        let Lease::Open(other) = spare.lease(1, &a) else {
            panic!("a place on replica 1");
        };
        drop(other);
        spare.give_back(idle(0, &a, p1, &l));
        assert_eq!(spare.idle(0), 1);
        assert!(matches!(spare.lease(0, &a), Lease::Idle(_)), "its own kind");
        // At the cap, a client with other parameters closes an idle one to
        // open its own; one given back that holds too much is closed.
        let mut full = idle(0, &a, p2, &l);
        full.statements = (0..=MAX_STATEMENTS)
            .map(|i| (i.to_string(), Bytes::new()))
            .collect();
        spare.give_back(full);
        assert_eq!(spare.idle(0), 0);
        let (Lease::Open(p3), Lease::Open(p4)) = (spare.lease(0, &b), spare.lease(0, &b)) else {
            panic!("the places freed");
        };
        spare.give_back(idle(0, &b, p3, &l));
        spare.give_back(idle(0, &b, p4, &l));
        assert!(
            matches!(spare.lease(0, &a), Lease::Open(_)),
            "b's closed for a"
        );
        assert_eq!(spare.idle(0), 1);
    }
}
