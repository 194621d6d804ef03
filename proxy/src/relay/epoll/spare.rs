//! A session's `Bufs` (its two read buffers and two write queues: 256
//! bytes even when empty) are its own only while it has something in them.
//! A session at rest gives them back to its worker (`sweep`), and takes a
//! spare from the worker again with its next turn, as PgBouncer's clients
//! take packet buffers: an idle client holds none.

use std::cell::RefCell;

use bytes::BytesMut;

use crate::relay::Bufs;

/// Most spares a worker keeps; more are freed.
const MOST: usize = 256;

thread_local! {
    static SPARE: RefCell<Vec<Box<Bufs>>> = const { RefCell::new(Vec::new()) };
}

fn empty() -> Bufs {
    Bufs::new(BytesMut::new(), BytesMut::new())
}

fn take() -> Box<Bufs> {
    SPARE
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| Box::new(empty()))
}

fn give(b: Box<Bufs>) {
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < MOST {
            s.push(b);
        }
    });
}

/// `bufs` as a session entering the relay keeps them (in a spare's box).
pub(crate) fn boxed(bufs: Bufs) -> Option<Box<Bufs>> {
    let mut b = take();
    *b = bufs;
    Some(b)
}

/// What a session leaving the relay takes with it: its buffers, or empty
/// ones if it had given them back; the box stays with the worker.
pub(crate) fn unboxed(b: Option<Box<Bufs>>) -> Bufs {
    match b {
        Some(mut b) => {
            let bufs = std::mem::replace(&mut *b, empty());
            give(b);
            bufs
        }
        None => empty(),
    }
}

/// The session's buffers, a spare if it had given its own back.
pub(super) fn ready(b: &mut Option<Box<Bufs>>) -> &mut Bufs {
    b.get_or_insert_with(take)
}

/// Gives the session's buffers back if nothing is in them and they hold
/// no room (read room goes back first: `relay::give_back_room`).
pub(super) fn give_back_if_empty(b: &mut Option<Box<Bufs>>) {
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn only_empty_buffers_go_back_and_spares_are_reused() {
        let mut held = boxed(empty());
        let first: *const Bufs = &**held.as_ref().unwrap();
        ready(&mut held).to_client.push(Bytes::from_static(b"Z"));
        give_back_if_empty(&mut held);
        assert!(held.is_some(), "buffers with bytes to write stay");
        held = boxed(empty());
        give_back_if_empty(&mut held);
        assert!(held.is_none());
        // The next session of the thread takes the spare, not a new box.
        let again = ready(&mut held) as *const Bufs;
        assert_ne!(again, first);
        give_back_if_empty(&mut held);
        let reused = ready(&mut held) as *const Bufs;
        assert_eq!(reused, again);
    }
}
