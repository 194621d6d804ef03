//! LISTEN without a pin: a pooled session's lone `LISTEN` and `UNLISTEN`
//! are run by its pool's listening connection (`pooling::listen`), which
//! leaves the notifications of the session's channels in its `Inbox`; the
//! session hands them to its client where a dedicated connection would:
//! between statements, outside a transaction block.

use std::{
    collections::VecDeque,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use bytes::{Bytes, BytesMut};
use onetrip_planner::classify::{ListenOp, listen_op};

use super::*;

/// What a pool's listening connection left for one session: whole
/// NotificationResponse (or NoticeResponse) messages, in the server's
/// order. Written by the listener's task, emptied by the session.
#[derive(Default)]
pub struct Inbox {
    queue: Mutex<VecDeque<Bytes>>,
    /// Something waits in `queue`: a look costs the session no lock.
    waiting: AtomicBool,
    /// Wakes the session's task, which waits for its client meanwhile.
    pub wake: tokio::sync::Notify,
}

impl Inbox {
    /// Leaves `msg` for the session and wakes it.
    pub fn push(&self, msg: Bytes) {
        lock(&self.queue).push_back(msg);
        self.waiting.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    pub fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// Moves what waits to `to_client`; how many messages.
    pub fn drain_into(&self, to_client: &mut WriteQueue) -> usize {
        let mut q = lock(&self.queue);
        self.waiting.store(false, Ordering::Release);
        let n = q.len();
        for msg in q.drain(..) {
            to_client.push(msg);
        }
        n
    }

    /// Forgets the notifications of `channel` (`None`: of every channel)
    /// not yet handed over: a server checks that its session still
    /// listens when it reads each one, so none comes after the UNLISTEN.
    pub fn forget(&self, channel: Option<&str>) {
        let mut q = lock(&self.queue);
        q.retain(|m| match (m.first(), channel) {
            (Some(&tag::NOTIFICATION), None) => false,
            (Some(&tag::NOTIFICATION), Some(c)) => notification_channel(m) != Some(c),
            _ => true,
        });
        if q.is_empty() {
            self.waiting.store(false, Ordering::Release);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A NotificationResponse's channel.
pub fn notification_channel(msg: &[u8]) -> Option<&str> {
    backend::notification(msg).map(|(_, channel)| channel)
}

/// The answer PostgreSQL gives a lone LISTEN or UNLISTEN outside a
/// transaction block.
pub fn listen_answer(op: &ListenOp) -> Bytes {
    let mut out = BytesMut::with_capacity(32);
    let tag = match op {
        ListenOp::Listen(_) => "LISTEN",
        ListenOp::Unlisten(_) | ListenOp::UnlistenAll => "UNLISTEN",
    };
    wire::write::command_complete(&mut out, tag);
    wire::write::ready_for_query(&mut out, b'I');
    out.freeze()
}

impl Protocol {
    /// The client's next message, when it is a lone `LISTEN` or
    /// `UNLISTEN` Query that the pool's listening connection can run for
    /// it: the session is pooled, unpinned, idle outside any transaction
    /// (none held here either) and has never left one to the server. With
    /// the message's length.
    pub fn listen_alone(&self, cin: &[u8]) -> Option<(ListenOp, usize)> {
        if !self.may_answer_alone() || self.listen_on_server || !self.quiet_upstream() {
            return None;
        }
        let h = frame::peek_header(cin, usize::MAX).ok()??;
        if h.tag != tag::QUERY {
            return None;
        }
        let msg = cin.get(..h.wire_len)?;
        // One look at the first word before any lexing: this runs for
        // every Query of an idle session.
        let bytes = frontend::statement_bytes_loose(tag::QUERY, msg)?;
        if !client_txn::first_word_is(bytes, &["listen", "unlisten"]) {
            return None;
        }
        let op = listen_op(frontend::query_text(msg)?)?;
        Some((op, h.wire_len))
    }

    /// A LISTEN or UNLISTEN the listening connection could not run goes
    /// to the server: from then on all of the session's do, and pin it.
    pub fn listen_on_server(&mut self) {
        self.listen_on_server = true;
    }

    /// The session's inbox, made at its first LISTEN.
    pub fn inbox(&mut self) -> Arc<Inbox> {
        self.notes.get_or_insert_with(Default::default).clone()
    }

    /// The inbox, if the session has listened.
    pub fn notes(&self) -> Option<&Arc<Inbox>> {
        self.notes.as_ref()
    }

    /// Hands what waits in the inbox to the client, when a dedicated
    /// connection would: nothing of the client's in flight, no
    /// transaction open (nor held here). True when it did.
    pub fn deliver_notes(&mut self, to_client: &mut WriteQueue) -> bool {
        let Some(inbox) = &self.notes else {
            return false;
        };
        if !inbox.waiting() || !self.at_rest() {
            return false;
        }
        inbox.drain_into(to_client) > 0
    }

    /// Between statements, outside a transaction block.
    fn at_rest(&self) -> bool {
        self.quiet()
            && self.txn.held.is_none()
            && !self.flight.begin_on_its_way()
            && self.flight.client_answered()
            && !self.txn_group
            && !self.fatal_relayed
            && self.flow == Flow::Open
    }
}
