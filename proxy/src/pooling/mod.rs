//! Transaction pooling's pools (`[pool] mode = "transaction"`): per
//! (database, user), at most `pool_size` server connections, idle ones
//! waiting for a client, and clients waiting in order for one. A pool's
//! connections are opened with the user and database alone; what else a
//! client's startup packet asks for follows it to each connection it takes
//! (`startup`). The lock is taken when a
//! session takes or gives back a connection, never while it forwards.
//! A session's hold on its pool is `held`; how it waits for a connection,
//! opens one or makes its settings on one is `session::pooled`.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use tokio::sync::oneshot;

mod held;
mod limit;
pub mod listen;
mod notices;
mod pools;
mod senders;
pub mod startup;
pub use held::{Held, Pooled, Taken, Waiting};
pub use notices::Notices;
pub use pools::{Pools, TooManyPools};

use onetrip_planner::classify::{RESET_REASONS, Reset};

use crate::{
    auth::Credential,
    net::ServerSocket,
    protocol::{Residues, ServerConnection, SessionSets},
    stats::{LATENCY_BUCKETS, latency_bucket},
    wire::{startup::encode_startup as startup_packet, write},
    worker::Watched,
};

/// How long a connection may have been idle and still be handed over
/// without a check that it is alive (`Idle::alive`).
const CHECK_AFTER: Duration = Duration::from_millis(10);

/// A server connection of a pool, idle between two clients. It holds its
/// place in the pool's count.
pub struct Idle {
    /// The connection: plain TCP, or TLS (`[upstream] tls`).
    pub socket: ServerSocket,
    pub conn: Box<ServerConnection>,
    pub since: Instant,
    pub place: Place,
    /// The worker epoll it stays in, when a relay gave it back.
    pub watched: Option<Watched>,
}

impl Idle {
    /// Nothing unread waits in it (plain TCP) and the server has not
    /// closed it, as far as the socket can tell now (one syscall).
    fn alive(&self) -> bool {
        self.socket.alive()
    }

    /// Whether it holds exactly a client's settings and libraries (it is
    /// that client's with nothing to make first).
    fn fits(&self, sets: &SessionSets, loads: &Residues) -> bool {
        let state = &self.conn.state;
        state.sets == *sets && *state.residue == **loads
    }

    /// Whether it can become a client's: nothing is left in it that no
    /// reset undoes and the client never left (`Residue`).
    pub fn usable_for(&self, loads: &Residues) -> bool {
        self.conn.state.residue.within(loads)
    }

    /// Says goodbye and closes the connection; its place in the
    /// count is returned.
    pub fn close(mut self) -> Place {
        self.socket.say_goodbye(&write::TERMINATE);
        self.place
    }
}

/// A place among a pool's `pool_size` connections: held by a connection
/// (idle, in use, or being opened). Dropped, it goes to the first waiting
/// client, or the pool's count goes down.
pub struct Place {
    pool: Option<Arc<Pool>>,
}

impl Place {
    fn new(pool: &Arc<Pool>) -> Self {
        Place {
            pool: Some(pool.clone()),
        }
    }

    /// Leaves the count as it is (it moves to another `Place`).
    fn disarm(mut self) {
        self.pool = None;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.place_freed();
        }
    }
}

/// What a waiting client is given. Moved once per hand-over, where a
/// box would cost an allocation each time.
#[allow(clippy::large_enum_variant)]
pub enum Grant {
    /// An idle connection.
    Idle(Idle),
    /// A place to open a new connection in.
    Open(Place),
}

impl Grant {
    /// Goes to the next in line (its client stopped waiting); true when
    /// that one's task waits on this thread (`Pool::give_back`).
    pub fn pass_on(self) -> bool {
        match self {
            Grant::Idle(idle) => match idle.place.pool.clone() {
                Some(pool) => pool.give_back(idle),
                None => false,
            },
            // Dropped, the place goes to the next in line.
            Grant::Open(place) => {
                drop(place);
                false
            }
        }
    }
}

/// Why no connection was given.
#[derive(Debug, thiserror::Error)]
#[error(
    "query_wait_timeout: no server connection of pool {database}/{user} came free within {timeout:?} ([pool] pool_size = {size})"
)]
pub struct WaitTimeout {
    pub database: String,
    pub user: String,
    pub timeout: Duration,
    pub size: usize,
}

/// One pool: the connections of one (database, user).
pub struct Pool {
    pub database: String,
    pub user: String,
    /// The startup packet its connections are opened with: the user and
    /// the database, nothing else.
    pub startup: Bytes,
    size: usize,
    inner: Mutex<Inner>,
    /// Pooled sessions of this pool now.
    pub clients: AtomicUsize,
    /// Of them, pinned to their connection.
    pub pinned: Arc<AtomicUsize>,
    /// What the server said of statements its sessions parsed and
    /// described, to answer the next such Parse here.
    pub descriptions: Arc<crate::protocol::described::Descriptions>,
    /// Its sessions' named statements: SQL PREPAREs kept unpinned and
    /// made again, statements shared and parsed again.
    pub statements: Arc<crate::protocol::StatementCounts>,
    /// How long clients waited for a connection (every acquire, zero when
    /// one was free).
    waits: Waits,
    /// What a new connection of this pool greeted onetrip with, the last
    /// time one was opened: a login is answered with it, and takes no
    /// connection (`Pool::greeting`).
    greeting: Mutex<Option<Greeting>>,
    /// What the server made of the startup parameters logins asked for
    /// (`startup::ClientStartup::learn`): the values it reports for them.
    learned: Mutex<HashMap<Vec<(String, String)>, Learned>>,
    /// Until when connections given back are closed rather than kept, and
    /// none is opened: a statement waits for the database to have no
    /// other sessions (`Pools::drain`).
    draining: Mutex<Option<Instant>>,
    drain_flag: std::sync::atomic::AtomicBool,
    /// What its server connections are opened with when onetrip checks
    /// its logins itself: the credential of the latest such login (`None`:
    /// the server admits its user by trust).
    credential: Mutex<Option<Arc<Credential>>>,
    /// Whether a login onetrip checked has given it a credential, ever
    /// (one forgotten since included): logins onetrip doesn't check stay
    /// out of it.
    had_credential: std::sync::atomic::AtomicBool,
    /// How the server asks its user to authenticate, once a login has
    /// found out (`session::pooled::password`). An async lock: the logins that
    /// come while one finds out wait for it, and cost the server nothing.
    method: tokio::sync::Mutex<Option<crate::auth::Method>>,
    /// Connections given back that needed a reset, by reason
    /// (`RESET_REASONS`).
    resets: [AtomicU64; RESET_REASONS.len()],
    /// `max_db_connections` and `max_user_connections`, shared with the
    /// other pools of its database and of its user.
    limits: limit::Limits,
    /// Its listening connection's state (`listen.rs`).
    pub listener: listen::Listener,
    /// Its connections to the replicas, leased for a read
    /// (`relay/replica/`).
    pub replicas: Arc<crate::replicas::spare::Spare>,
}

/// What a server makes of a set of startup parameters: the values it
/// reports for them, as `set_config` answered them, and the notices it
/// gave (PostgreSQL's at login: a name truncated, say).
#[derive(Debug, Clone, Default)]
pub struct Learned {
    pub values: Vec<(String, String)>,
    pub notices: Vec<Bytes>,
}

/// Most sets of startup parameters a pool remembers what the server made
/// of (forgotten all at once past it: a forgotten one costs a login a
/// round trip, never an answer).
const MAX_LEARNED: usize = 256;

/// A pool's greeting: its connections' ParameterStatus values as they
/// start, and a BackendKeyData of one (for its secret's length).
#[derive(Clone)]
pub struct Greeting {
    /// Shared by every client it greets (`Protocol::start_with`).
    pub params: Arc<[(String, String)]>,
    pub key: Bytes,
}

/// A histogram of waits, in `LATENCY_BUCKETS` (last slot: over them).
#[derive(Default)]
struct Waits {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl Waits {
    fn record(&self, d: Duration) {
        self.buckets[latency_bucket(d)].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }
}

#[derive(Default)]
struct Inner {
    /// Connections open or being opened, idle ones included.
    places: usize,
    /// Of them, being opened to be idle (`min_idle`).
    filling: usize,
    idle: Vec<Idle>,
    waiters: VecDeque<(Instant, Waiter)>,
    /// The default isolation the last connection given back had learned
    /// (one pool is one role and database: every connection's).
    isolation: Option<onetrip_planner::classify::IsolationLevel>,
}

/// A client waiting for a connection.
enum Waiter {
    /// Its task waits, on the thread marked (`worker::thread_mark`).
    Task(oneshot::Sender<Grant>, u64),
    /// It waits where it relays, on the thread marked: the grant is left
    /// for it there, under its ticket.
    Relay(Arc<dyn Deliver>, u64, u64),
}

/// Where clients that wait in a worker's relay are given their grants.
pub trait Deliver: Send + Sync {
    /// Leaves `grant` for the client of `ticket`; one that stopped waiting
    /// gives it back to the pool.
    fn deliver(&self, ticket: u64, grant: Grant);
}

impl Waiter {
    /// Hands `grant` over; gives it back when the client stopped waiting.
    /// `Ok(true)` when the client's task waits on this thread.
    // Moved, not boxed, as `Grant` itself.
    #[allow(clippy::result_large_err)]
    fn grant(self, grant: Grant) -> Result<bool, Grant> {
        match self {
            Waiter::Task(tx, thread) => tx
                .send(grant)
                .map(|()| thread == crate::worker::thread_mark()),
            Waiter::Relay(to, ticket, _) => {
                to.deliver(ticket, grant);
                Ok(false)
            }
        }
    }

    fn is_waiting(&self) -> bool {
        match self {
            Waiter::Task(tx, _) => !tx.is_closed(),
            Waiter::Relay(..) => true,
        }
    }
}

/// A connection right away, or a place in line (`Pool::take_or_wait`).
#[allow(clippy::large_enum_variant)]
pub enum Take {
    Now(Grant),
    InLine,
}

/// A pool's figures for `SHOW POOLS`.
pub struct PoolRow {
    pub database: String,
    pub user: String,
    pub clients: usize,
    pub waiting: usize,
    pub active: usize,
    pub idle: usize,
    pub pinned: usize,
    pub max_wait: Duration,
    /// Waits per `LATENCY_BUCKETS` bucket (not cumulative; last: over).
    pub wait_buckets: Vec<u64>,
    pub wait_sum: Duration,
    /// Connections given back that needed a reset, by reason (those with
    /// none left out).
    pub resets: Vec<(&'static str, u64)>,
    /// Listening connections open (0 or 1) and the channels they listen
    /// on, for sessions that LISTEN unpinned.
    pub listen_conns: usize,
    pub listen_channels: usize,
    /// Notifications handed to sessions.
    pub notifications: u64,
    /// Parses answered here from what the pool's servers parsed and
    /// described, and statements so told that the server then described
    /// otherwise.
    pub parses_answered: u64,
    pub descriptions_changed: u64,
    /// SQL PREPAREs kept for their client with no pin, and SQL-prepared
    /// statements made again on another connection ahead of their use.
    pub sql_prepares: u64,
    pub sql_prepares_made_again: u64,
    /// Uses of a statement a server connection held from another client's
    /// Parse of the same text, and clients' statements parsed on a
    /// connection that lacked them, ahead of their use.
    pub statements_shared: u64,
    pub statements_parsed_again: u64,
}

impl Pool {
    pub(crate) fn new(database: String, user: String, size: usize, limits: limit::Limits) -> Self {
        let startup = startup_packet(&[("user", user.as_str()), ("database", database.as_str())]);
        Pool {
            database,
            user,
            startup,
            size,
            inner: Mutex::default(),
            clients: AtomicUsize::new(0),
            pinned: Arc::new(AtomicUsize::new(0)),
            descriptions: Default::default(),
            statements: Default::default(),
            waits: Waits::default(),
            greeting: Mutex::default(),
            learned: Mutex::default(),
            draining: Mutex::default(),
            drain_flag: Default::default(),
            credential: Mutex::default(),
            had_credential: Default::default(),
            method: Default::default(),
            resets: Default::default(),
            limits,
            listener: Default::default(),
            replicas: crate::replicas::spare::Spare::new(size),
        }
    }

    /// The default isolation of the pool's connections, as the last one
    /// given back had learned it (`ServerConnection::settings`): one pool
    /// is one role and database, so a session that has had no connection
    /// yet may go by it (a read only transaction on a replica needs it).
    pub fn default_isolation(&self) -> Option<onetrip_planner::classify::IsolationLevel> {
        self.lock().isolation
    }

    /// What the server reports for a login's startup parameters, once
    /// learned (`key`: `ClientStartup::learn`).
    pub fn learned(&self, key: &[(String, String)]) -> Option<Learned> {
        let map = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).cloned()
    }

    pub fn learn(&self, key: Vec<(String, String)>, values: Learned) {
        let mut map = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_LEARNED {
            map.clear();
        }
        map.insert(key, values);
    }

    /// Connections given back are closed and none is opened until `until`
    /// or `end_drain`, and the idle ones close now.
    pub fn drain(&self, until: Instant) {
        *self.draining.lock().unwrap_or_else(|e| e.into_inner()) = Some(until);
        self.drain_flag.store(true, Relaxed);
        let idle = std::mem::take(&mut self.lock().idle);
        for i in idle {
            drop(i.close());
        }
        self.greeted(&[], None);
    }

    /// The statement the pool drained for is done: clients waiting get
    /// places to open connections in.
    pub fn end_drain(self: &Arc<Self>) {
        *self.draining.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.drain_flag.store(false, Relaxed);
        loop {
            let mut g = self.lock();
            if g.places >= self.size || g.waiters.is_empty() || !self.limits.take() {
                return;
            }
            let Some((_, waiter)) = g.waiters.pop_front() else {
                return;
            };
            g.places += 1;
            drop(g);
            if let Err(Grant::Open(place)) = waiter.grant(Grant::Open(Place::new(self))) {
                drop(place);
            }
        }
    }

    /// A drain past its time ends (its waiters get their places).
    fn end_drain_if_due(self: &Arc<Self>) {
        if self.is_draining() {
            return;
        }
        let stuck = {
            let g = self.lock();
            !g.waiters.is_empty() && g.places < self.size
        };
        if stuck {
            self.end_drain();
        }
    }

    /// Whether it drains now; a drain past its time ends here.
    fn is_draining(&self) -> bool {
        if !self.drain_flag.load(Relaxed) {
            return false;
        }
        let mut d = self.draining.lock().unwrap_or_else(|e| e.into_inner());
        match *d {
            Some(until) if Instant::now() < until => true,
            _ => {
                *d = None;
                self.drain_flag.store(false, Relaxed);
                false
            }
        }
    }

    /// Nothing of it is in use: no client, no connection, nobody waiting.
    fn unused(&self) -> bool {
        let g = self.lock();
        g.places == 0 && g.waiters.is_empty() && self.clients.load(Relaxed) == 0
    }

    /// A connection of this pool was opened, as a new one greets.
    pub fn greeted(&self, params: &[(String, String)], key: Option<&Bytes>) {
        let g = key.map(|key| Greeting {
            params: params.into(),
            key: key.clone(),
        });
        *self.greeting.lock().unwrap_or_else(|e| e.into_inner()) = g;
    }

    /// The greeting a login gets without a connection, once one has been
    /// opened (`None` again after a connection failed to open, or after a
    /// database was created, altered or dropped: the next login hears
    /// the server).
    pub fn greeting(&self) -> Option<Greeting> {
        self.greeting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What a new connection answers the server's password request with.
    pub fn credential(&self) -> Option<Arc<Credential>> {
        self.credential
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A login onetrip checked: its credential opens the connections from
    /// now on (a newer password's, say).
    pub fn use_credential(&self, credential: Arc<Credential>) {
        *self.credential.lock().unwrap_or_else(|e| e.into_inner()) = Some(credential);
        self.had_credential.store(true, Relaxed);
    }

    /// Its user's password changed: the credential answers the server no
    /// more, and none is used until the next checked login's.
    pub fn forget_credential(&self) {
        *self.credential.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether a login onetrip checked has given it a credential.
    pub fn had_credential(&self) -> bool {
        self.had_credential.load(Relaxed)
    }

    /// How the server asks its user to authenticate: kept, or what
    /// `find_out` finds (kept then; an error is not).
    pub async fn method_or<E>(
        &self,
        find_out: impl std::future::Future<Output = Result<crate::auth::Method, E>>,
    ) -> Result<crate::auth::Method, E> {
        let mut kept = self.method.lock().await;
        if let Some(m) = *kept {
            return Ok(m);
        }
        let found = find_out.await?;
        *kept = Some(found);
        Ok(found)
    }

    /// The server asked for what the kept method did not say (its pg_hba
    /// changed): the next login finds out again. One finding out now
    /// keeps what it finds.
    pub fn forget_method(&self) {
        if let Ok(mut kept) = self.method.try_lock() {
            *kept = None;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each change under the lock is a push or a pop: a panic elsewhere
        // can leave nothing half done here.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection for a client: an idle one, a place to open one, or the
    /// first of either that comes free within `timeout`. Idle ones past
    /// `max_idle`, past `lifetime` or not clean are replaced (their place
    /// is given to open a new one).
    pub async fn acquire(
        self: &Arc<Self>,
        timeout: Duration,
        max_idle: Duration,
        lifetime: Duration,
        wants: Wants<'_>,
    ) -> Result<Grant, WaitTimeout> {
        let thread = crate::worker::thread_mark();
        let line = self.take_or_line(max_idle, lifetime, wants, || {
            let (tx, rx) = oneshot::channel();
            (Waiter::Task(tx, thread), rx)
        });
        let mut rx = match line {
            Ok(grant) => return Ok(grant),
            Err(rx) => rx,
        };
        let started = Instant::now();
        let got = match crate::timers::timeout(timeout, &mut rx).await {
            Ok(Ok(grant)) => Some(grant),
            _ => {
                // A grant sent as the wait ended is taken, not lost.
                rx.close();
                rx.try_recv().ok()
            }
        };
        match got {
            Some(grant) => Ok(self.waited(started.elapsed(), grant, max_idle, lifetime)),
            None => Err(self.timed_out(started.elapsed(), timeout)),
        }
    }

    /// A connection now, as `acquire` gives one, or else a place in line
    /// for a client that waits in a worker's relay: its grant is left
    /// with `to` under `ticket`.
    pub fn take_or_wait(
        self: &Arc<Self>,
        max_idle: Duration,
        lifetime: Duration,
        wants: Wants<'_>,
        to: &Arc<dyn Deliver>,
        ticket: u64,
    ) -> Take {
        let thread = crate::worker::thread_mark();
        let line = self.take_or_line(max_idle, lifetime, wants, || {
            (Waiter::Relay(to.clone(), ticket, thread), ())
        });
        match line {
            Ok(grant) => Take::Now(grant),
            Err(()) => Take::InLine,
        }
    }

    /// An idle connection (checked) or a place to open one in, now; else
    /// the client `waiter` makes goes in line, and what it made with it
    /// (the receiving end, say) is returned.
    fn take_or_line<W>(
        self: &Arc<Self>,
        max_idle: Duration,
        lifetime: Duration,
        wants: Wants<'_>,
        waiter: impl FnOnce() -> (Waiter, W),
    ) -> Result<Grant, W> {
        let here = crate::worker::thread_mark();
        // A second look after an idle connection of another pool under a
        // full shared bound gave its place up.
        let mut evicted = false;
        let now = loop {
            let mut g = self.lock();
            if let Some(i) = best_idle(&g.idle, here, wants) {
                let idle = g.idle.remove(i);
                drop(g);
                break Self::checked(idle, max_idle, lifetime);
            }
            if g.places < self.size && !self.is_draining() {
                if self.limits.take() {
                    g.places += 1;
                    drop(g);
                    break Grant::Open(Place::new(self));
                }
                if !evicted {
                    // That pool locks its own: this one is let go first.
                    drop(g);
                    evicted = true;
                    if self.limits.evict_elsewhere(self) {
                        continue;
                    }
                    g = self.lock();
                }
            }
            if let Some(idle) = g.idle.pop() {
                // None can be the client's, and the pool is full: the
                // oldest gives its place to a new one.
                drop(g);
                break Grant::Open(idle.close());
            }
            let (waiter, made) = waiter();
            g.waiters.push_back((Instant::now(), waiter));
            return Err(made);
        };
        self.waits.record(Duration::ZERO);
        Ok(now)
    }

    /// A place freed under a shared bound: the first client in line here,
    /// if any, gets it to open a connection in. True when one did.
    fn open_for_waiter(self: &Arc<Self>) -> bool {
        let mut g = self.lock();
        if g.waiters.is_empty()
            || g.places >= self.size
            || self.is_draining()
            || !self.limits.take()
        {
            return false;
        }
        let Some((_, waiter)) = g.waiters.pop_front() else {
            self.limits.give(self);
            return false;
        };
        g.places += 1;
        drop(g);
        if let Err(Grant::Open(place)) = waiter.grant(Grant::Open(Place::new(self))) {
            // It stopped waiting: the place goes on (`place_freed`).
            drop(place);
        }
        true
    }

    /// Closes its oldest idle connection, for another pool under a full
    /// shared bound. True when it had one.
    fn close_one_idle(&self) -> bool {
        let oldest = {
            let mut g = self.lock();
            (!g.idle.is_empty()).then(|| g.idle.remove(0))
        };
        match oldest {
            Some(idle) => {
                drop(idle.close());
                true
            }
            None => false,
        }
    }

    /// A client that waited in line got its grant after `waited`: an idle
    /// connection is checked as one taken at once is.
    pub fn waited(
        &self,
        waited: Duration,
        grant: Grant,
        max_idle: Duration,
        lifetime: Duration,
    ) -> Grant {
        self.waits.record(waited);
        match grant {
            Grant::Idle(idle) => Self::checked(idle, max_idle, lifetime),
            open => open,
        }
    }

    /// A client waiting in a worker's relay leaves the line.
    pub fn leave_line(&self, ticket: u64, thread: u64) {
        self.lock().waiters.retain(
            |(_, w)| !matches!(w, Waiter::Relay(_, t, th) if (*t, *th) == (ticket, thread)),
        );
    }

    /// A client that waited in line ran out of time.
    pub fn timed_out(&self, waited: Duration, timeout: Duration) -> WaitTimeout {
        self.waits.record(waited);
        WaitTimeout {
            database: self.database.clone(),
            user: self.user.clone(),
            timeout,
            size: self.size,
        }
    }

    fn checked(idle: Idle, max_idle: Duration, lifetime: Duration) -> Grant {
        // One clock read for both ages: each costs a hundred instructions
        // on every hand-over.
        let now = Instant::now();
        let since = now.saturating_duration_since(idle.since);
        // One given back moments ago was clean at its ReadyForQuery: under
        // load most hand-overs are such, and the check would cost each a
        // syscall to learn the same. (A server that ends a connection
        // later is seen by no check in time either; PgBouncer checks only
        // after 30 s idle, `server_check_delay`.)
        let fresh = since < CHECK_AFTER;
        let age = now.saturating_duration_since(idle.conn.opened);
        if since < max_idle && age < lifetime && (fresh || idle.alive()) {
            Grant::Idle(idle)
        } else {
            Grant::Open(idle.close())
        }
    }

    /// A connection comes back clean: to the first waiting client, or
    /// idle. True when the client's task waits on this thread: woken from
    /// a worker's park hook, it runs only once the hook returns.
    pub fn give_back(&self, idle: Idle) -> bool {
        if self.is_draining() {
            drop(idle.close());
            return false;
        }
        let mut idle = idle;
        let mut g = self.lock();
        if let Some(i) = idle
            .conn
            .settings
            .as_ref()
            .and_then(|s| s.default_isolation())
        {
            g.isolation = Some(i);
        }
        while let Some((_, waiter)) = g.waiters.pop_front() {
            match waiter.grant(Grant::Idle(idle)) {
                Ok(here) => return here,
                Err(Grant::Idle(back)) => idle = back,
                Err(Grant::Open(place)) => {
                    place.disarm();
                    unreachable_open();
                    return false;
                }
            }
        }
        g.idle.push(idle);
        false
    }

    /// A connection's place is free (it closed, or was never opened): to
    /// the first waiting client, to open one in, or off the count.
    fn place_freed(self: Arc<Self>) {
        let draining = self.is_draining();
        let mut g = self.lock();
        while let Some((_, waiter)) = g.waiters.pop_front().filter(|_| !draining) {
            match waiter.grant(Grant::Open(Place::new(&self))) {
                Ok(_) => return,
                // The client stopped waiting: the new place must not free
                // the place again (this lock is held).
                Err(Grant::Open(place)) => place.disarm(),
                Err(Grant::Idle(_)) => {}
            }
        }
        g.places = g.places.saturating_sub(1);
        drop(g);
        self.limits.give(&self);
    }

    /// Closes idle connections that waited `max_idle`, but for the newest
    /// `keep` of them.
    fn expire(&self, max_idle: Duration, keep: usize) -> Vec<Idle> {
        let mut g = self.lock();
        // Given back at the end, taken from the end: the oldest come first.
        let spare = g.idle.len().saturating_sub(keep);
        let old = g.idle[..spare]
            .iter()
            .take_while(|i| i.since.elapsed() >= max_idle)
            .count();
        g.idle.drain(..old).collect()
    }

    /// Places to open connections in, so that `min_idle` are idle (or on
    /// their way) while the pool has room.
    pub fn places_to_fill(self: &Arc<Self>, min_idle: usize) -> Vec<Place> {
        let mut g = self.lock();
        let mut places = Vec::new();
        while g.idle.len() + g.filling < min_idle && g.places < self.size && self.limits.take() {
            g.places += 1;
            g.filling += 1;
            places.push(Place::new(self));
        }
        places
    }

    /// A connection opened for `min_idle` is ready (`Some`), or failed
    /// (its place dropped with it).
    pub fn filled(&self, idle: Option<Idle>) {
        {
            let mut g = self.lock();
            g.filling = g.filling.saturating_sub(1);
        }
        if let Some(idle) = idle {
            self.give_back(idle);
        }
    }

    fn row(&self) -> PoolRow {
        let (listen_conns, listen_channels) = self.listener.counts();
        let g = self.lock();
        let waiting: Vec<Instant> = g
            .waiters
            .iter()
            .filter(|(_, w)| w.is_waiting())
            .map(|(t, _)| *t)
            .collect();
        PoolRow {
            database: self.database.clone(),
            user: self.user.clone(),
            clients: self.clients.load(Relaxed),
            waiting: waiting.len(),
            active: g.places - g.idle.len(),
            idle: g.idle.len(),
            pinned: self.pinned.load(Relaxed),
            max_wait: waiting.first().map(|t| t.elapsed()).unwrap_or_default(),
            wait_buckets: self.waits.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            wait_sum: Duration::from_micros(self.waits.sum_us.load(Relaxed)),
            resets: RESET_REASONS
                .iter()
                .zip(&self.resets)
                .map(|(why, n)| (*why, n.load(Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            listen_conns,
            listen_channels,
            notifications: self.listener.fanned_out.load(Relaxed),
            parses_answered: self.descriptions.answered.load(Relaxed),
            descriptions_changed: self.descriptions.changed.load(Relaxed),
            sql_prepares: self.statements.kept.load(Relaxed),
            sql_prepares_made_again: self.statements.made_again.load(Relaxed),
            statements_shared: self.statements.shared.load(Relaxed),
            statements_parsed_again: self.statements.parsed_again.load(Relaxed),
        }
    }

    /// Backend `pid` is a connection idle in this pool now.
    pub fn idle_has_backend(&self, pid: i32) -> bool {
        self.lock()
            .idle
            .iter()
            .any(|i| i.conn.backend_key().is_some_and(|(p, _)| p == pid))
    }

    /// A connection given back needs `reset` before the next client.
    pub fn count_reset(&self, reset: Reset) {
        if let Some(i) = reset.reason_index()
            && let Some(n) = self.resets.get(i)
        {
            n.fetch_add(1, Relaxed);
        }
    }
}

/// What a client asks of a connection: its settings and libraries.
#[derive(Clone, Copy)]
pub struct Wants<'a> {
    pub sets: &'a SessionSets,
    pub loads: &'a Residues,
}

impl Wants<'static> {
    /// A client with no settings and no libraries of its own.
    pub fn nothing() -> Self {
        static SETS: SessionSets = SessionSets::new();
        static LOADS: std::sync::LazyLock<Residues> = std::sync::LazyLock::new(Residues::default);
        Wants {
            sets: &SETS,
            loads: &LOADS,
        }
    }
}

/// The idle connection a client takes: one that can be its own, the one
/// in this worker's epoll (taken there without a system call) and holding
/// its settings already first, then either, then the newest.
fn best_idle(idle: &[Idle], here: u64, wants: Wants<'_>) -> Option<usize> {
    let mut best: Option<(u8, usize)> = None;
    for (i, c) in idle.iter().enumerate() {
        if !c.usable_for(wants.loads) {
            continue;
        }
        let local = c.watched.as_ref().is_some_and(|k| k.thread() == here);
        let score = 2 * u8::from(c.fits(wants.sets, wants.loads)) + u8::from(local);
        if best.is_none_or(|(b, _)| score >= b) {
            best = Some((score, i));
        }
    }
    best.map(|(_, i)| i)
}

/// A sender gives back what it was given: an idle connection is never
/// returned as a place.
fn unreachable_open() {
    debug_assert!(false, "a grant came back changed");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle(pool: &Arc<Pool>, place: Place) -> (Idle, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (peer, _) = l.accept().unwrap();
        tcp.set_nonblocking(true).unwrap();
        let _ = pool;
        let i = Idle {
            socket: ServerSocket::Plain(tcp),
            conn: Box::default(),
            since: Instant::now(),
            place,
            watched: None,
        };
        (i, peer)
    }

    fn wants() -> Wants<'static> {
        Wants::nothing()
    }

    #[tokio::test]
    async fn places_never_pass_the_size_and_waiters_go_in_order() {
        let pools = Pools::new(2, 10);
        let pool = pools.pool("d", "u").unwrap();
        let long = Duration::from_secs(60);
        let Ok(Grant::Open(a)) = pool.acquire(long, long, long, wants()).await else {
            panic!("first place")
        };
        let Ok(Grant::Open(b)) = pool.acquire(long, long, long, wants()).await else {
            panic!("second place")
        };
        let short = Duration::from_millis(20);
        let e = pool
            .acquire(short, long, long, wants())
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("query_wait_timeout"), "{e}");
        assert!(e.to_string().contains("d/u"), "{e}");
        // A waiting client gets the connection given back.
        let p2 = pool.clone();
        let waiter = tokio::spawn(async move { p2.acquire(long, long, long, wants()).await });
        while pool.row().waiting == 0 {
            tokio::task::yield_now().await;
        }
        let (i, _peer) = idle(&pool, a);
        pool.give_back(i);
        let first = waiter.await.unwrap();
        assert!(matches!(first, Ok(Grant::Idle(_))));
        // A place freed goes to a waiter to open a new connection in.
        let p2 = pool.clone();
        let waiter = tokio::spawn(async move { p2.acquire(long, long, long, wants()).await });
        while pool.row().waiting == 0 {
            tokio::task::yield_now().await;
        }
        drop(b);
        let second = waiter.await.unwrap();
        assert!(matches!(second, Ok(Grant::Open(_))));
        assert_eq!(pool.row().active, 2);
        drop((first, second));
        assert_eq!(pool.row().active, 0, "every place freed");
        // Every acquire is in the wait histogram: two at once, three waited
        // (one of them ran out).
        let row = pool.row();
        assert_eq!(row.wait_buckets.iter().sum::<u64>(), 5);
        assert!(row.wait_sum >= short, "{:?}", row.wait_sum);
    }

    #[tokio::test]
    async fn a_dead_idle_connection_is_replaced() {
        let pools = Pools::new(1, 10);
        let pool = pools.pool("d", "u").unwrap();
        let long = Duration::from_secs(60);
        let Ok(Grant::Open(a)) = pool.acquire(long, long, long, wants()).await else {
            panic!()
        };
        let (i, peer) = idle(&pool, a);
        pool.give_back(i);
        assert_eq!(pool.row().idle, 1);
        drop(peer);
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(
            pool.acquire(long, long, long, wants()).await,
            Ok(Grant::Open(_))
        ));
        assert_eq!(pool.row().idle, 0);
    }
}
