//! The relay loop through the tokio runtime: for TLS sessions, for those
//! that need a timer (`upstream.rtt`) or polling (`upstream.busy_poll`),
//! for a catalog wait, and where there are no worker threads.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Instant,
};

use tokio_util::io::poll_read_buf;

use super::{
    Bufs, Closer, End, Outcome, move_due, process, release_due,
    replica::{Detour, Detoured},
    reserve,
    spin::Spin,
    wake::{self, Wakers},
    wants_reads,
};
use crate::{net::Pair, protocol::Protocol, shared::Shared, stats::Counters, worker::seats::Seat};

/// What became ready in one wait of the relay loop.
#[derive(Default)]
struct Events {
    client_read: Option<std::io::Result<usize>>,
    upstream_read: Option<std::io::Result<usize>>,
    client_write: Option<std::io::Result<()>>,
    upstream_write: Option<std::io::Result<()>>,
    timer: bool,
    catalog: bool,
    /// The session is to close (`Closer`).
    shutdown: Option<End>,
}

/// Sources whose last poll, with their own waker, found nothing: the waker
/// stays registered until the source is ready, and marks it then.
#[derive(Default)]
struct Armed {
    client: bool,
    upstream: bool,
    shutdown: bool,
}

impl Events {
    fn any(&self) -> bool {
        self.client_read.is_some()
            || self.upstream_read.is_some()
            || self.client_write.is_some()
            || self.upstream_write.is_some()
            || self.timer
            || self.catalog
            || self.shutdown.is_some()
    }
}

/// Turns of the loop below between two looks at the sessions this
/// worker relays itself: a session that always has work here would keep
/// the runtime from ever parking, and so from relaying them.
const TURNS_BETWEEN_LOOKS: u32 = 32;

/// The relay loop, through the runtime: what `fast` does on a worker,
/// for TLS sessions and those that need a timer or a catalog wait.
pub(crate) async fn relay(
    io: &mut Pair,
    proto: &mut Protocol,
    bufs: Bufs,
    seat: &mut Seat,
    forced: &mut Closer,
    shared: &Shared,
    startup_raw: &bytes::Bytes,
) -> Outcome {
    let mut b = bufs;
    // Room before the first reads too: a buffer that comes without any (a
    // login's, a rested session's) would read 64 bytes at a time.
    reserve(&mut b.cin);
    reserve(&mut b.uin);
    // Reads routed to replicas, for a session in session mode, or a pooled
    // one once it is pinned (its reads go to replicas between transactions
    // until then: `session::pooled`); its replica connection lasts as long
    // as this loop.
    let mut detour = Detour::new(&shared.replicas, proto, startup_raw);
    let mut may_pin = proto.pooled && detour.is_none() && proto.routes_reads();
    let c = proto.info.clone();
    // Kept across loop turns: a simulated delay must not restart.
    let mut timer: Option<(Instant, Sleep)> = None;
    let mut armed = Armed::default();
    let mut spin = Spin::new(proto.services.config.upstream.busy_poll, &shared.spinning);
    let wakers = Wakers::new();
    let mut turns = 0u32;
    let end = loop {
        if may_pin && proto.pinned() {
            may_pin = false;
            detour = Detour::new(&shared.replicas, proto, startup_raw);
        }
        let detoured = match detour.as_mut() {
            Some(d) => d.route(&mut io.client, proto, &mut b, forced).await,
            None => Detoured::No,
        };
        let processed = match detoured {
            Detoured::No => process(proto, &mut b),
            // Its answer is queued: the loop writes it and looks at the
            // next message.
            Detoured::Served => continue,
            Detoured::Wait => match super::process_upstream(proto, &mut b) {
                // Answered: route the read now (no event would come to
                // wake the loop for it).
                Ok(()) if !proto.own_in_flight() => continue,
                done => done,
            },
            // Only the upstream's bytes (unasked for): the client's wait.
            Detoured::Hold => super::process_upstream(proto, &mut b),
            Detoured::End(end) => break end,
        };
        if let Err(e) = processed {
            break End::Error(e);
        }
        // Write at once what the sockets take now: the usual case, and one
        // poll here is cheaper than another wait below. Whatever is not
        // ready is polled again, with its socket's waker, in that wait.
        // The send comes before the loop's bookkeeping, not after it: the
        // server is woken on another CPU, so work done after the send
        // overlaps with its wake-up, while work before it delays the query.
        // (Sending last, to keep the client's CPU free for it sooner, was
        // measured no better at -c 1.)
        let wrote = {
            let mut noop = Context::from_waker(std::task::Waker::noop());
            let up = match b.to_up.wants_write() {
                true => b.to_up.poll_write(&mut io.upstream, &mut noop),
                false => Poll::Pending,
            };
            let client = match b.to_client.wants_write() {
                true => b.to_client.poll_write(&mut io.client, &mut noop),
                false => Poll::Pending,
            };
            (up, client)
        };
        if let (Poll::Ready(Err(e)), _) = wrote {
            break End::UpstreamClosed(Some(format!("upstream write: {e}")));
        }
        if let (_, Poll::Ready(Err(e))) = wrote {
            break End::Error(format!("client write: {e}"));
        }
        if super::client_done(proto, &b) {
            break End::ClientClosed;
        }
        if release_due(proto, &b) {
            break End::Release;
        }
        if timer.is_none()
            && let Some(j) = move_due(proto, &b, seat)
        {
            break End::Move(j);
        }
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(TURNS_BETWEEN_LOOKS) {
            crate::worker::poll_now();
        }
        let (read_client, read_up) = wants_reads(proto, &b);
        match (proto.delay_until(), &timer) {
            (Some(t), Some((at, _))) if *at == t => {}
            (Some(t), _) => timer = Some((t, precise_sleep(t))),
            (None, _) => timer = None,
        }
        let awaiting = match proto.delay_until() {
            None => proto.awaiting_since(),
            Some(_) => None,
        };
        let mut catalog = proto.cypher.wait_handle();
        let waits_catalog = catalog.is_some();
        let mut catalog = std::pin::pin!(catalog_changed(&mut catalog));
        // All that is ready is handled together: no direction can starve
        // another, and a busy session costs one wake-up per batch of
        // events, not per event. Each socket and the shutdown signal is
        // polled with its own waker, and only when it has not been polled
        // since it last found nothing (its waker is registered) or it has
        // woken the task since: a wake-up from the upstream does not poll
        // the client's empty socket again.
        let ev = std::future::poll_fn(|cx| {
            let woke = wakers.take(cx.waker());
            armed.client &= woke & wake::CLIENT == 0;
            armed.upstream &= woke & wake::UPSTREAM == 0;
            armed.shutdown &= woke & wake::SHUTDOWN == 0;
            let mut ev = Events::default();
            let mut ccx = Context::from_waker(&wakers.client);
            let mut ucx = Context::from_waker(&wakers.upstream);
            if read_client && !armed.client {
                match poll_read_buf(Pin::new(&mut io.client), &mut ccx, &mut b.cin) {
                    Poll::Ready(r) => ev.client_read = Some(r),
                    Poll::Pending => armed.client = true,
                }
            }
            if read_up && !armed.upstream {
                match poll_read_buf(Pin::new(&mut io.upstream), &mut ucx, &mut b.uin) {
                    Poll::Ready(r) => ev.upstream_read = Some(r),
                    Poll::Pending => armed.upstream = true,
                }
            }
            if b.to_client.wants_write()
                && let Poll::Ready(r) = b.to_client.poll_write(&mut io.client, &mut ccx)
            {
                ev.client_write = Some(r);
            }
            if b.to_up.wants_write()
                && let Poll::Ready(r) = b.to_up.poll_write(&mut io.upstream, &mut ucx)
            {
                ev.upstream_write = Some(r);
            }
            // Rare and short-lived (a simulated delay, a catalog being
            // fetched by another session): polled each time they exist.
            if let Some((_, f)) = timer.as_mut() {
                ev.timer = f.as_mut().poll(cx).is_ready();
            }
            if waits_catalog {
                ev.catalog = catalog.as_mut().poll(cx).is_ready();
            }
            if !armed.shutdown {
                let mut scx = Context::from_waker(&wakers.shutdown);
                match Pin::new(&mut *forced).poll(&mut scx) {
                    Poll::Ready(end) => ev.shutdown = Some(end),
                    Poll::Pending => armed.shutdown = true,
                }
            }
            if ev.any() {
                return Poll::Ready(ev);
            }
            if spin.keep_polling(awaiting) {
                // Polled again right after the runtime's next look at the
                // sockets, which then does not sleep.
                let _ = std::pin::pin!(tokio::task::yield_now()).poll(cx);
            }
            Poll::Pending
        })
        .await;
        if let Some(end) = ev.shutdown {
            break end;
        }
        if let Some(Err(e)) = ev.upstream_write {
            break End::UpstreamClosed(Some(format!("upstream write: {e}")));
        }
        if let Some(Err(e)) = ev.client_write {
            break End::Error(format!("client write: {e}"));
        }
        match ev.upstream_read {
            Some(Ok(0)) => break End::UpstreamClosed(None),
            Some(Ok(n)) => Counters::add(&c.counters.bytes_from_upstream, n as u64),
            Some(Err(e)) => break End::UpstreamClosed(Some(format!("upstream read: {e}"))),
            None => {}
        }
        match ev.client_read {
            Some(Ok(0)) => break End::ClientClosed,
            Some(Ok(n)) => Counters::add(&c.counters.bytes_from_client, n as u64),
            Some(Err(e)) => break End::Error(format!("client read: {e}")),
            None => {}
        }
        if ev.timer {
            timer = None;
            proto.delay_elapsed();
        }
        if ev.catalog {
            proto.cypher.wake();
        }
        reserve(&mut b.cin);
        reserve(&mut b.uin);
    };
    Outcome { end, bufs: b }
}

/// Another session's catalog fetch ended (loaded or given up).
async fn catalog_changed(rx: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    if let Some(rx) = rx {
        // An error means the sender is gone: nothing more to wait for.
        let _ = rx.changed().await;
    }
}

type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Sleeps until `t`. tokio's timer wheel rounds up to whole milliseconds,
/// which would turn a simulated 0.5 ms into 1-2 ms; short waits sleep on a
/// blocking thread instead, to within tens of microseconds.
fn precise_sleep(t: Instant) -> Sleep {
    let left = t.saturating_duration_since(Instant::now());
    if left >= std::time::Duration::from_millis(5) {
        Box::pin(crate::timers::sleep_until(t))
    } else {
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
        })
    }
}
