//! The sessions a worker relays, in a table of its thread: each one's
//! entry (its `Parts`, what its sockets are known ready for, its kept
//! server connection, its wait in line), the places they take, and the
//! data words their sockets are reported under.

use std::{cell::RefCell, net::TcpStream, os::fd::AsRawFd, task::Waker, time::Instant};

use rustc_hash::FxHashMap;
use tracing::Span;

use crate::{
    pooling::Held,
    protocol::Protocol,
    relay::{Bufs, End},
    worker::{Watched, epoll::Event, seats::Seat},
};

/// A session as it enters or leaves the worker's relay.
pub(crate) struct Parts {
    pub client: TcpStream,
    /// `None` once a pooled session gave its connection back, until it
    /// takes another.
    pub upstream: Option<TcpStream>,
    pub proto: Box<Protocol>,
    /// Given back to the worker while the session is at rest (`spare`).
    pub bufs: Option<Bufs>,
    pub seat: Seat,
    /// Transaction pooling: the session's hold on its pool.
    pub pooled: Option<Held>,
}

/// Why the worker's relay handed a session back.
pub(crate) enum Stop {
    End(End),
    /// It waits for something only its task can wait for.
    Fallback,
}

pub(super) struct Entry {
    pub(super) parts: Parts,
    pub(super) slot: usize,
    pub(super) generation: u32,
    pub(super) client: Ready,
    pub(super) upstream: Ready,
    /// The upstream's place in this epoll when it is a pooled connection
    /// kept there between sessions; else it is watched under the
    /// session's own token.
    pub(super) server: Option<Watched>,
    pub(super) stop: Option<Stop>,
    /// The session's task, woken when relaying stops.
    pub(super) waiter: Option<Waker>,
    /// Waits for another turn (`TURNS` ran out).
    pub(super) pending: bool,
    /// The bytes it had read either way when the worker last looked for
    /// quiet sessions (`sweep`): read since, if they differ. Its counters
    /// already count them, so relaying pays nothing for this.
    pub(super) read_at_sweep: u64,
    /// Its lists gave their room back since it last read (`sweep`).
    pub(super) compacted: bool,
    /// A pooled session waits in line for a connection, here.
    pub(super) wait: Option<InLine>,
    pub(super) span: Span,
}

/// A session's wait for a connection in its worker's relay: its grant
/// comes by the worker's `Mailbox`; its task is woken at
/// `query_wait_timeout` (`line`), to end the wait.
pub(super) struct InLine {
    pub(super) since: Instant,
}

/// What a socket is known ready for, since its last report (edge-
/// triggered: known until a call would block).
#[derive(Clone, Copy)]
pub(super) struct Ready {
    pub(super) read: bool,
    pub(super) write: bool,
    /// The peer closed or the socket failed: its report came with the
    /// last data, so no other comes, and a short read leaves it readable.
    pub(super) closed: bool,
}

impl Ready {
    pub(super) const FRESH: Ready = Ready {
        read: false,
        write: true,
        closed: false,
    };

    pub(super) fn note(&mut self, ev: Event) {
        self.read |= ev.readable();
        self.write |= ev.writable();
        self.closed |= ev.closed();
    }

    /// After a read that emptied the socket's buffer (`drained`) or not.
    pub(super) fn read_some(&mut self, drained: bool) {
        self.read = !drained || self.closed;
    }
}

/// A place in the table, reused. An entry has a box of its own: inline,
/// every place would take an entry's room, and the table grows by
/// doubling, so that an idle client would hold about one and a half
/// entries; entering costs one allocation per stretch of relaying.
#[derive(Default)]
pub(super) enum Slot {
    #[default]
    Free,
    Here(Box<Entry>),
    /// A pooled session's client, left in this epoll (under its old
    /// token) while the session's task waits for a connection: coming back
    /// costs only the connection's registration. Its reports are noted.
    Away {
        generation: u32,
        client: Ready,
    },
}

#[derive(Default)]
pub(super) struct Table {
    pub(super) slots: Vec<Slot>,
    pub(super) free: Vec<usize>,
    pub(super) generation: u32,
    pub(super) live: usize,
    pub(super) pending: Vec<(usize, u32)>,
}

thread_local! {
    pub(super) static TABLE: RefCell<Table> = RefCell::default();
    /// The sessions holding the server connections kept in this epoll
    /// (`worker::Watched`), by their data word: a report for one no session
    /// here holds is dropped.
    pub(super) static SERVERS: RefCell<FxHashMap<u64, (usize, u32)>> = RefCell::default();
}

/// Data words: slot, generation and side (0 client, 1 upstream).
pub(super) fn token(slot: usize, generation: u32, side: u64) -> u64 {
    ((slot as u64) << 33) | (u64::from(generation) << 1) | side
}

pub(super) fn untoken(data: u64) -> (usize, u32, u64) {
    ((data >> 33) as usize, (data >> 1) as u32, data & 1)
}

/// The session's kept connection leaves this epoll with it.
fn unkeep(e: &mut Entry) {
    if let Some(k) = e.server.take() {
        SERVERS.with(|s| s.borrow_mut().remove(&k.data()));
        if let Some(up) = &e.parts.upstream {
            k.end(up.as_raw_fd());
        }
    }
}

impl Table {
    pub(super) fn get(&mut self, slot: usize, generation: u32) -> Option<&mut Entry> {
        match self.slots.get_mut(slot)? {
            Slot::Here(e) if e.generation == generation => Some(e),
            _ => None,
        }
    }

    pub(super) fn remove(&mut self, slot: usize, generation: u32) -> Option<Entry> {
        self.get(slot, generation)?;
        let Slot::Here(mut e) = std::mem::take(&mut self.slots[slot]) else {
            return None;
        };
        unkeep(&mut e);
        self.free.push(slot);
        self.live -= 1;
        Some(*e)
    }

    /// Takes a session out, leaving its client's place (`Slot::Away`).
    pub(super) fn step_away(&mut self, slot: usize, generation: u32) -> Option<Entry> {
        let client = self.get(slot, generation)?.client;
        let away = Slot::Away { generation, client };
        let Slot::Here(mut e) = std::mem::replace(&mut self.slots[slot], away) else {
            return None;
        };
        unkeep(&mut e);
        self.live -= 1;
        Some(*e)
    }

    /// The client's place, emptied for its session to fill again: what
    /// its socket was reported ready for meanwhile.
    pub(super) fn come_back(&mut self, slot: usize, generation: u32) -> Option<Ready> {
        match self.slots.get(slot)? {
            Slot::Away {
                generation: g,
                client,
            } if *g == generation => {
                let client = *client;
                self.slots[slot] = Slot::Free;
                Some(client)
            }
            _ => None,
        }
    }

    pub(super) fn free_away(&mut self, slot: usize, generation: u32) {
        if matches!(self.slots.get(slot), Some(Slot::Away { generation: g, .. }) if *g == generation)
        {
            self.slots[slot] = Slot::Free;
            self.free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_keep_slot_generation_and_side() {
        for (slot, generation, side) in [(0, 1, 0), (7, u32::MAX, 1), ((1 << 30) + 3, 12345, 1)] {
            assert_eq!(
                untoken(token(slot, generation, side)),
                (slot, generation, side)
            );
        }
        assert_ne!(token(0, 0, 0), u64::MAX, "never the runtime's word");
    }
}
