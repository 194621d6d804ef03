//! A session's `Bufs` (its two read buffers and two write queues: 256
//! bytes even when empty, boxed) are its own only while it has something
//! in them.
//! A session at rest gives them back to its worker (`sweep`), and takes a
//! spare from the worker again with its next turn, as PgBouncer's clients
//! take packet buffers: an idle client holds none.

use std::cell::RefCell;

use bytes::BytesMut;

use crate::{
    protocol::Protocol,
    relay::{Bufs, Room, give_back_room, keeps_room},
};

/// Most spares a worker keeps; more are freed.
const MOST: usize = 256;
/// Most spares that keep their read rooms (8 kB each); others give them
/// to the thread's lists of rooms (`relay::give_back_room`). Few: a
/// session mostly brings buffers of its own, so spares that keep their
/// rooms are memory the thread holds, while the lists of rooms serve
/// every session's reads.
const MOST_WITH_ROOMS: usize = 8;

thread_local! {
    static SPARE: RefCell<Vec<Bufs>> = const { RefCell::new(Vec::new()) };
}

fn take() -> Bufs {
    SPARE
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| Room::boxed(BytesMut::new(), BytesMut::new()))
}

fn give(mut b: Bufs) {
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() >= MOST_WITH_ROOMS {
            give_back_room(&mut b.cin);
            give_back_room(&mut b.uin);
        }
        if s.len() < MOST {
            s.push(b);
        }
    });
}

/// What a session leaving the relay takes with it: its buffers, or a
/// spare if it had given them back.
pub(crate) fn unboxed(b: Option<Bufs>) -> Bufs {
    b.unwrap_or_else(take)
}

/// The session's buffers, a spare if it had given its own back.
pub(super) fn ready(b: &mut Option<Bufs>) -> &mut Room {
    b.get_or_insert_with(take)
}

/// Gives the session's buffers back if nothing is in them and they hold
/// no room (read room goes back first: `relay::give_back_room`).
pub(super) fn give_back_if_empty(b: &mut Option<Bufs>) {
    if b.as_ref().is_some_and(|b| {
        b.cin.capacity() == 0
            && b.uin.capacity() == 0
            && !b.to_client.wants_write()
            && !b.to_up.wants_write()
            && b.to_client.is_empty()
            && b.to_up.is_empty()
    }) && let Some(b) = b.take()
    {
        give(b);
    }
}

/// A session whose client and server have nothing more to say for now:
/// its buffers, and what its next transaction takes again, go back to the
/// thread at once (`Protocol::rest`), not at the worker's next look. A
/// burst of clients that log in and go idle would otherwise each hold
/// them for a second, and what they then free lies among what later
/// sessions took meanwhile, and stays resident.
///
/// `keep_rooms`: its read rooms go with the buffers when nothing else
/// points into them, for a session that holds its server connection (its
/// next turn reads both ways). A pooled session's go to the lists of
/// rooms: its next turn may only wait in line, and spares with rooms
/// would hand thousands of waiting clients a room each.
pub(super) fn rest(proto: &mut Protocol, bufs: &mut Option<Bufs>, keep_rooms: bool) {
    let Some(b) = bufs.as_mut() else {
        return;
    };
    if !b.cin.is_empty()
        || !b.uin.is_empty()
        || b.to_client.wants_write()
        || b.to_up.wants_write()
        || !proto.quiet()
    {
        return;
    }
    proto.rest();
    // Rooms nothing else points into go with the buffers, ready for the
    // thread's next reads: moving the box costs less than taking each
    // room apart and back.
    if !(keep_rooms && keeps_room(&mut b.cin)) {
        give_back_room(&mut b.cin);
    }
    if !(keep_rooms && keeps_room(&mut b.uin)) {
        give_back_room(&mut b.uin);
    }
    if let Some(b) = bufs.take() {
        give(b);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn only_empty_buffers_go_back_and_spares_are_reused() {
        let empty = || Room::boxed(BytesMut::new(), BytesMut::new());
        let mut held = Some(empty());
        ready(&mut held).to_client.push(Bytes::from_static(b"Z"));
        give_back_if_empty(&mut held);
        assert!(held.is_some(), "buffers with bytes to write stay");
        held = Some(empty());
        let first = ready(&mut held) as *const Room;
        give_back_if_empty(&mut held);
        assert!(held.is_none());
        // The next session of the thread takes the spare, not a new box.
        let again = ready(&mut held) as *const Room;
        assert_eq!(again, first);
    }
}
