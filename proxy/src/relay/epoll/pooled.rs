//! Transaction pooling's part of the worker's relay: a session without a
//! connection takes one of its pool here, or waits in line for one, its
//! grant left in the worker's `Mailbox` from any thread; a connection kept
//! in this epoll between sessions has a data word of its own.

use std::{
    cell::{Cell, OnceCell},
    io,
    net::TcpStream,
    os::fd::AsRawFd,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    task::Waker,
    time::Instant,
};

use super::{
    spare,
    sys::{read_into, wake},
    table::{Entry, InLine, Parts, Ready, SERVERS, Stop, TABLE, token, untoken},
};
use crate::{
    net::ServerSocket,
    pooling::{Deliver, Grant, Waiting},
    relay::{End, give_back_room, keep_only_what_was_read, line},
    stats::{Counters, SessionState},
    wire::write,
    worker::{self, Watched, thread_mark},
};

/// Where a worker's pools leave grants for the sessions waiting in line in
/// its relay, from any thread: one that rings the worker's bell.
struct Mailbox {
    thread: u64,
    has_mail: AtomicBool,
    mail: Mutex<Vec<(u64, Grant)>>,
    bell: Arc<worker::Bell>,
}

impl Deliver for Mailbox {
    fn deliver(&self, ticket: u64, grant: Grant) {
        self.mail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((ticket, grant));
        // Rung once per look at the mail (`take_mail` lowers the flag
        // before it takes the list): a grant that finds the flag raised
        // is taken by the look that flag's ring asked for. This thread
        // looks at its mail before it waits again.
        if !self.has_mail.swap(true, Ordering::AcqRel) && self.thread != thread_mark() {
            self.bell.ring();
        }
    }
}

thread_local! {
    static MAIL: OnceCell<Option<Arc<Mailbox>>> = const { OnceCell::new() };
}

/// This worker's mailbox (`None` off a worker).
fn mailbox() -> Option<Arc<Mailbox>> {
    MAIL.with(|m| {
        m.get_or_init(|| {
            let bell = worker::bell()?;
            Some(Arc::new(Mailbox {
                thread: thread_mark(),
                has_mail: AtomicBool::new(false),
                mail: Mutex::default(),
                bell,
            }))
        })
        .clone()
    })
}

thread_local! {
    /// The mail list handed out last, emptied: swapped back into the
    /// mailbox, so that leaving a grant allocates nothing.
    static SPARE_MAIL: Cell<Vec<(u64, Grant)>> = const { Cell::new(Vec::new()) };
}

/// The grants left for this worker's sessions since the last look; the
/// list goes back with `recycle_mail`.
fn take_mail() -> Option<Vec<(u64, Grant)>> {
    // Looked at on every turn: a load, and no count taken on the mailbox
    // nor a list made and dropped, when there is nothing.
    MAIL.try_with(|m| {
        let mb = m.get()?.as_ref()?;
        if !mb.has_mail.load(Ordering::Relaxed) || !mb.has_mail.swap(false, Ordering::Acquire) {
            return None;
        }
        let mut mail = SPARE_MAIL.take();
        std::mem::swap(
            &mut mail,
            &mut *mb.mail.lock().unwrap_or_else(|e| e.into_inner()),
        );
        Some(mail)
    })
    .ok()
    .flatten()
}

fn recycle_mail(mut mail: Vec<(u64, Grant)>) {
    // An empty list from no mail has no room to give.
    if mail.capacity() == 0 {
        return;
    }
    mail.clear();
    let _ = SPARE_MAIL.try_with(|s| s.set(mail));
}

pub(super) fn has_mail() -> bool {
    MAIL.try_with(|m| {
        m.get()
            .and_then(Option::as_ref)
            .is_some_and(|mb| mb.has_mail.load(Ordering::Acquire))
    })
    .unwrap_or(false)
}

/// The mark of a kept server connection's data word (a session's slot
/// never reaches it; the worker's own words have the top bit too).
pub(super) const SERVER: u64 = 1 << 62;

/// A new data word for a server connection kept in a worker's epoll.
fn server_token() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    SERVER | ((n << 1) & (SERVER - 1)) | 1
}

/// A session in line leaves it (it stops relaying here).
pub(super) fn leave_line(e: &mut Entry) {
    if e.wait.take().is_some()
        && let Some(pooled) = e.parts.pooled.as_ref()
    {
        let ticket = token(e.slot, e.generation, 0);
        pooled.leave_line(ticket, thread_mark());
    }
}

/// A session in line past `query_wait_timeout` stops waiting, for its
/// task to tell its client (the line wakes the task then: `line`).
pub(super) fn waited_too_long(e: &mut Entry) -> bool {
    let Some(wait) = e.wait.as_ref() else {
        return false;
    };
    let timeout = e.parts.proto.services.config.pool.query_wait_timeout;
    let waited = wait.since.elapsed();
    if waited < timeout {
        return false;
    }
    leave_line(e);
    if let Some(pooled) = e.parts.pooled.as_mut() {
        pooled.wait_timed_out(waited, timeout);
    }
    e.stop = Some(Stop::End(End::Release));
    true
}

/// The line's deadline, or its leftovers (`line::check`).
pub(super) fn check_line() -> bool {
    let Ok(sessions) = TABLE.try_with(|t| t.borrow().live) else {
        return false;
    };
    line::check(sessions, |slot, generation, since| {
        TABLE.with(|t| match t.borrow_mut().get(slot, generation) {
            Some(e) if e.wait.as_ref().is_some_and(|w| w.since == since) => {
                line::Seen::Waits(e.waiter.clone())
            }
            _ => line::Seen::Left,
        })
    })
}

/// A turn of a pooled session without a connection: its client's next
/// bytes read, then a connection of its pool taken for them, or a place
/// in line for one, here; the session's task takes over when it must
/// open a connection or make its settings on one.
pub(super) fn released(e: &mut Entry) -> Result<bool, Stop> {
    // In line for a connection: it comes by the mailbox. A client that
    // hangs up meanwhile frees its place at once (its statement must not
    // run for nobody).
    if e.wait.is_some() {
        return in_line(e).map(|()| false);
    }
    let Parts {
        client,
        proto,
        bufs,
        pooled,
        ..
    } = &mut e.parts;
    let b = spare::ready(bufs);
    // Notifications for an idle client go out as a dedicated connection
    // sends them while it waits (`protocol::listen`).
    proto.deliver_notes(&mut b.to_client);
    // What was answered here (a held BEGIN) goes out first.
    if b.to_client.wants_write() {
        if !e.client.write {
            return Ok(false);
        }
        match b.to_client.write_to(client) {
            Ok(all) => e.client.write = all,
            Err(err) => return Err(Stop::End(End::Error(format!("client write: {err}")))),
        }
        if b.to_client.wants_write() {
            return Ok(false);
        }
    }
    if b.cin.is_empty() {
        if !e.client.read {
            spare::rest(proto, bufs, false);
            return Ok(false);
        }
        match read_into(client, &mut b.cin) {
            Ok((0, _)) => return Err(Stop::End(End::ClientClosed)),
            Ok((n, drained)) => {
                Counters::add(&proto.info.counters.bytes_from_client, n as u64);
                e.client.read_some(drained);
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                e.client.read = false;
                spare::rest(proto, bufs, false);
                return Ok(false);
            }
            Err(err) => return Err(Stop::End(End::Error(format!("client read: {err}")))),
        }
    }
    // Saying goodbye: no connection is taken for that.
    if b.cin.starts_with(&write::TERMINATE) {
        return Err(Stop::End(End::ClientClosed));
    }
    // A lone LISTEN or UNLISTEN is run by the pool's listening
    // connection: the session's task waits for it.
    if proto.listen_alone(&b.cin).is_some() {
        return Err(Stop::End(End::Release));
    }
    // A BEGIN the session holds, and its end, need no connection; nor
    // does the read room once all that was read is answered.
    if proto.answer_alone(&mut b.cin, &mut b.to_client) {
        if b.cin.is_empty() {
            proto.let_go_of_reads();
            give_back_room(&mut b.cin);
        }
        return Ok(true);
    }
    let Some(pooled) = pooled.as_mut() else {
        return Err(Stop::End(End::Release));
    };
    let Some(to) = mailbox() else {
        return Err(Stop::End(End::Release));
    };
    let to: Arc<dyn Deliver> = to;
    match pooled.take_or_wait(proto, &to, token(e.slot, e.generation, 0)) {
        Waiting::Ready(tcp, kept) => attach(e, tcp, kept).map(|()| true),
        Waiting::Task => Err(Stop::End(End::Release)),
        Waiting::InLine => {
            // It may wait long, beside thousands: what it read is kept at
            // its size, and the read rooms go back.
            let b = spare::ready(&mut e.parts.bufs);
            keep_only_what_was_read(&mut b.cin);
            if b.uin.is_empty() {
                give_back_room(&mut b.uin);
            }
            // Its query is on its way: not idle (`client_idle_timeout`).
            e.parts.proto.info.set_state(SessionState::Active);
            let since = Instant::now();
            let timeout = e.parts.proto.services.config.pool.query_wait_timeout;
            line::join(since, since + timeout, e.slot, e.generation);
            e.wait = Some(InLine { since });
            Ok(false)
        }
    }
}

/// A turn of a session in line: what its client sends is read (up to
/// `[limits] buffer_bytes`), and its end ends the session's wait.
fn in_line(e: &mut Entry) -> Result<(), Stop> {
    let limit = e.parts.proto.services.config.limits.buffer_bytes;
    while e.client.read && spare::ready(&mut e.parts.bufs).cin.len() < limit {
        let Parts {
            client,
            proto,
            bufs,
            ..
        } = &mut e.parts;
        match read_into(client, &mut spare::ready(bufs).cin) {
            Ok((0, _)) => {
                leave_line(e);
                return Err(Stop::End(End::ClientClosed));
            }
            Ok((n, drained)) => {
                Counters::add(&proto.info.counters.bytes_from_client, n as u64);
                e.client.read_some(drained);
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => e.client.read = false,
            Err(err) => {
                leave_line(e);
                return Err(Stop::End(End::Error(format!("client read: {err}"))));
            }
        }
    }
    Ok(())
}

/// The session goes on over `tcp`, a connection it just took: kept in
/// this epoll already, or put there now (out of another worker's).
fn attach(e: &mut Entry, tcp: TcpStream, kept: Option<Watched>) -> Result<(), Stop> {
    let fd = tcp.as_raw_fd();
    let kept = match kept {
        Some(k) if k.here() => Ok(k),
        elsewhere => {
            if let Some(k) = elsewhere {
                k.end(fd);
            }
            worker::keep_watching(fd, server_token())
        }
    };
    let Parts {
        upstream,
        proto,
        bufs,
        pooled,
        ..
    } = &mut e.parts;
    let b = spare::ready(bufs);
    let Ok(kept) = kept else {
        if let Some(pooled) = pooled.as_mut() {
            pooled.give_back(ServerSocket::Plain(tcp), None, proto);
        }
        return Err(Stop::End(End::Release));
    };
    SERVERS.with(|s| s.borrow_mut().insert(kept.data(), (e.slot, e.generation)));
    e.server = Some(kept);
    // Not known readable: reports while it was idle went to nobody, and
    // its next data comes as an answer to what the session sends now.
    *upstream = Some(tcp);
    e.upstream = Ready::FRESH;
    proto.start_if_due(&mut b.to_up);
    Ok(())
}

/// Hands the grants left in this worker's mailbox to the sessions waiting
/// in line for them; a grant whose session stopped waiting goes to the
/// next in line. True when a task was woken. `turns` runs a session's
/// turns (the relay loop's), for one that goes on at once.
// A grant is moved, not boxed (`pooling::Grant`).
#[allow(clippy::result_large_err)]
pub(super) fn deliver_mail(turns: fn(&mut Entry) -> (bool, Option<Waker>)) -> bool {
    let mut woke = false;
    loop {
        let Some(mut mail) = take_mail() else {
            return woke;
        };
        for (ticket, grant) in mail.drain(..) {
            let (slot, generation, _) = untoken(ticket);
            let given = TABLE.with(|t| {
                let mut t = t.borrow_mut();
                let Some(e) = t.get(slot, generation) else {
                    return Err(grant);
                };
                if e.stop.is_some() || e.wait.is_none() {
                    return Err(grant);
                }
                let waiter = granted(e, grant);
                if e.stop.is_some() || e.pending {
                    return Ok(waiter);
                }
                // Its statement goes to the server now, not after the batch.
                let (more, waiter) = turns(e);
                if more {
                    t.pending.push((slot, generation));
                }
                Ok(waiter)
            });
            woke |= match given {
                Ok(waiter) => wake(waiter),
                Err(grant) => grant.pass_on(),
            };
        }
        recycle_mail(mail);
    }
}

/// A session waiting in line got `grant`: it goes on over it here, or
/// its task (woken: returned) opens a connection or makes its settings.
fn granted(e: &mut Entry, grant: Grant) -> Option<Waker> {
    let waited = e.wait.take().map(|w| w.since.elapsed()).unwrap_or_default();
    let Parts { proto, pooled, .. } = &mut e.parts;
    let Some(pooled) = pooled.as_mut() else {
        drop(grant);
        e.stop = Some(Stop::End(End::Release));
        return e.waiter.take();
    };
    let stop = match pooled.use_grant_after_wait(proto, waited, grant) {
        Waiting::Ready(tcp, kept) => attach(e, tcp, kept).err(),
        Waiting::Task | Waiting::InLine => Some(Stop::End(End::Release)),
    };
    if stop.is_some() {
        e.stop = stop;
        return e.waiter.take();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_servers_have_words_of_their_own() {
        let (a, b) = (server_token(), server_token());
        assert_ne!(a, b);
        for w in [a, b] {
            assert_ne!(w & SERVER, 0);
            assert!(w < u64::MAX - 1, "never the runtime's or the bell's word");
        }
        assert_eq!(token(1 << 20, u32::MAX, 1) & SERVER, 0, "a session's slot");
    }

    /// A grant left from another thread rings the worker's bell: the
    /// sleeping worker wakes, finds no session waiting under its ticket,
    /// and passes the grant on (a place, here: freed).
    #[test]
    fn a_grant_from_another_thread_wakes_the_worker_and_passes_on() {
        let workers = crate::workers(1).expect("a worker");
        assert_eq!(workers.relaying_themselves(), 1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let handle = workers.handles()[0].clone();
        let mb = rt
            .block_on(handle.spawn(async { mailbox() }))
            .unwrap()
            .expect("a worker's mailbox");
        let pools = crate::pooling::Pools::new(1, 10);
        let pool = pools.pool("d", "u").unwrap();
        let long = std::time::Duration::from_secs(60);
        let wants = crate::pooling::Wants::nothing();
        let Ok(grant @ Grant::Open(_)) = rt.block_on(pool.acquire(long, long, long, wants)) else {
            panic!("a place to open a connection in");
        };
        let active = || pools.rows().first().map_or(0, |r| r.active);
        assert_eq!(active(), 1);
        mb.deliver(token(12345, 7, 0), grant);
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while active() != 0 {
            assert!(
                Instant::now() < deadline,
                "the worker never looked at its mail"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
