//! A session's turns in the worker's relay: the relay loop of `runtime`,
//! run over the session's sockets directly.

use std::{cell::Cell, io, os::fd::AsRawFd, task::Waker};

use super::{
    pooled::released,
    spare,
    sys::read_into,
    table::{Entry, Parts, Ready, SERVERS, Stop},
};
use crate::{
    net::ServerSocket,
    relay::{self, End},
    stats::Counters,
    worker,
};

/// Turns of one session per readiness report before the others (and the
/// runtime) get theirs: a bulk COPY would otherwise hold the thread.
const TURNS: usize = 64;

thread_local! {
    /// A turn woke another session's task on this thread (a connection
    /// given back to a client waiting for one): the park hook must hand
    /// the thread back to the runtime, which would not know otherwise. (A
    /// task on another thread is woken through its own runtime.)
    static WOKE_OTHERS: Cell<bool> = const { Cell::new(false) };
}

/// Whether a turn since the last ask woke another session's task.
pub(super) fn woke_others() -> bool {
    WOKE_OTHERS.with(Cell::take)
}

/// Runs the session's turns: whether it waits for another turn (and is
/// marked so), and the task to wake when relaying has just stopped. In
/// the session's span when something may log at debug level (the relay
/// loop itself logs nothing).
pub(super) fn turns(e: &mut Entry) -> (bool, Option<Waker>) {
    let more = if tracing::enabled!(tracing::Level::DEBUG) {
        let span = e.span.clone();
        span.in_scope(|| run(e))
    } else {
        run(e)
    };
    if e.stop.is_some() {
        return (false, e.waiter.take());
    }
    e.pending = more;
    (more, None)
}

/// Up to `TURNS` turns; true when the session could go on.
fn run(e: &mut Entry) -> bool {
    for _ in 0..TURNS {
        match turn(e) {
            Ok(true) => {}
            Ok(false) => {
                // Nothing more either way for now: an idle session (a
                // pooled one without its connection rests in `released`).
                if e.parts.upstream.is_some() {
                    spare::rest(&mut e.parts.proto, &mut e.parts.bufs, true);
                }
                return false;
            }
            Err(stop) => {
                e.stop = Some(stop);
                return false;
            }
        }
    }
    true
}

/// One turn of the relay loop: the buffered input handled, what the
/// sockets take written, then what they hold read. True when it read
/// something (so there is more to handle).
fn turn(e: &mut Entry) -> Result<bool, Stop> {
    let Parts {
        client,
        upstream: held,
        proto,
        bufs,
        seat,
        pooled,
    } = &mut e.parts;
    let b = spare::ready(bufs);
    let Some(upstream) = held.as_ref() else {
        return released(e);
    };
    relay::process(proto, b).map_err(|err| Stop::End(End::Error(err)))?;
    if b.to_up.wants_write() && e.upstream.write {
        match b.to_up.write_to(upstream) {
            Ok(all) => e.upstream.write = all,
            Err(err) => {
                let why = format!("upstream write: {err}");
                return Err(Stop::End(End::UpstreamClosed(Some(why))));
            }
        }
    }
    // A pooled connection goes back before the answer is written, which
    // `released` writes then (`server_done`).
    let early = pooled.is_some() && relay::server_done(proto, b);
    if !early {
        if b.to_client.wants_write() && e.client.write {
            match b.to_client.write_to(client) {
                Ok(all) => e.client.write = all,
                Err(err) => return Err(Stop::End(End::Error(format!("client write: {err}")))),
            }
        }
        if relay::client_done(proto, b) {
            return Err(Stop::End(End::ClientClosed));
        }
    }
    if early || relay::release_due(proto, b) {
        let Some(pooled) = pooled.as_mut() else {
            return Err(Stop::End(End::Release));
        };
        // Given back here, not by the session's task: the client stays in
        // this epoll, and so does the connection, for the next session
        // here to take without a system call (`worker::Watched`); one watched under
        // the session's own token leaves it.
        let kept = e.server.take();
        match &kept {
            Some(k) => _ = SERVERS.with(|s| s.borrow_mut().remove(&k.data())),
            None => _ = worker::unwatch(upstream.as_raw_fd()),
        }
        if let Some(up) = held.take()
            && pooled.give_back(ServerSocket::Plain(up), kept, proto)
        {
            WOKE_OTHERS.with(|w| w.set(true));
        }
        e.upstream = Ready::FRESH;
        // Empty here: read room goes back now, or once the answer queued
        // in it is written (when the session rests, `pooled::rest`), so a
        // client idle between transactions holds none.
        proto.let_go_of_reads();
        relay::give_back_room_if_free(&mut b.cin);
        relay::give_back_room_if_free(&mut b.uin);
        return Ok(true);
    }
    if let Some(j) = relay::move_due(proto, b, seat) {
        return Err(Stop::End(End::Move(j)));
    }
    if proto.delay_until().is_some() || proto.cypher.wait_handle().is_some() {
        return Err(Stop::Fallback);
    }
    let (read_client, read_up) = relay::wants_reads(proto, b);
    let c = &proto.info.counters;
    let mut read = false;
    if read_up && e.upstream.read {
        match read_into(upstream, &mut b.uin) {
            Ok((0, _)) => return Err(Stop::End(End::UpstreamClosed(None))),
            Ok((n, drained)) => {
                Counters::add(&c.bytes_from_upstream, n as u64);
                e.upstream.read_some(drained);
                read = true;
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => e.upstream.read = false,
            Err(err) => {
                let why = format!("upstream read: {err}");
                return Err(Stop::End(End::UpstreamClosed(Some(why))));
            }
        }
    }
    if read_client && e.client.read {
        match read_into(client, &mut b.cin) {
            Ok((0, _)) => return Err(Stop::End(End::ClientClosed)),
            Ok((n, drained)) => {
                Counters::add(&c.bytes_from_client, n as u64);
                e.client.read_some(drained);
                read = true;
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => e.client.read = false,
            Err(err) => return Err(Stop::End(End::Error(format!("client read: {err}")))),
        }
    }
    Ok(read)
}
