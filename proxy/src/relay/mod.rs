//! Relaying a session: its bytes between client and upstream through the
//! protocol state, until one side ends. Two loops do it: the worker's own
//! epoll (`epoll`, plain TCP) and the worker's runtime (`task`: TLS, a
//! simulated round-trip time, busy polling). This file holds what both
//! share: a session's buffers, how a loop ends, and each turn's decisions.

mod close;
pub mod epoll;
mod line;
pub(crate) mod replica;
mod spin;
pub mod task;
mod wake;

use std::sync::atomic::Ordering::Relaxed;

use bytes::BytesMut;

use crate::{
    protocol::{Flow, Protocol},
    stats::Counters,
    wire::queue::WriteQueue,
    wire::write::{self, Severity},
    worker::seats::Seat,
};

/// Why the loop ended.
pub(crate) enum End {
    ClientClosed,
    /// The upstream closed, or failed with the error given.
    UpstreamClosed(Option<String>),
    Error(String),
    Shutdown,
    /// The client was idle past `limits.client_idle_timeout`.
    IdleTimeout,
    /// To go on relaying on worker N.
    Move(usize),
    /// Transaction pooling: the session is at a release point, and its
    /// server connection goes back to its pool.
    Release,
}

/// A relaying session's read buffers and write queues, boxed: they go
/// from stretch to stretch of the session's life by value, and each
/// future that holds them would otherwise hold 256 bytes for them.
pub(crate) type Bufs = Box<Room>;

pub(crate) struct Room {
    pub cin: BytesMut,
    pub uin: BytesMut,
    pub to_client: WriteQueue,
    pub to_up: WriteQueue,
}

/// A session's rooms serve the thread's next reads when it ends: a
/// client connecting per query would otherwise allocate and free two.
impl Drop for Room {
    fn drop(&mut self) {
        give_back_room(&mut self.cin);
        give_back_room(&mut self.uin);
    }
}

impl Room {
    pub fn boxed(cin: BytesMut, uin: BytesMut) -> Bufs {
        Box::new(Self {
            cin,
            uin,
            to_client: WriteQueue::default(),
            to_up: WriteQueue::default(),
        })
    }
}

/// How the loop ended, with what was left to write each way.
pub(crate) struct Outcome {
    pub end: End,
    pub bufs: Bufs,
}

/// Ready when the session must close: shutdown's grace period is over,
/// or its client has been idle too long.
pub(crate) use close::Closer;

/// Works through whatever is buffered. What the upstream sent goes first:
/// with nothing in flight it is unasked (a FATAL from a killed backend, a
/// notification), and a client talking to the server directly would read it
/// before the answer to anything it sends now, including answers given
/// here (a held BEGIN's). Client input goes twice, since an upstream answer
/// may release input held back while it was awaited (a coalesced batch's
/// outcome, the AGE catalog). On a protocol error the client's FATAL
/// message is queued and the error returned.
pub(crate) fn process(proto: &mut Protocol, b: &mut Room) -> Result<(), String> {
    let worked = proto
        .on_upstream_bytes(&mut b.uin, &mut b.to_client, &mut b.to_up)
        .and_then(|()| proto.on_client_bytes(&mut b.cin, &mut b.to_up, &mut b.to_client))
        .and_then(|()| proto.on_upstream_bytes(&mut b.uin, &mut b.to_client, &mut b.to_up))
        .and_then(|()| proto.on_client_bytes(&mut b.cin, &mut b.to_up, &mut b.to_client));
    if worked.is_ok() {
        // At an idle point, what the pool's listening connection left.
        proto.deliver_notes(&mut b.to_client);
    }
    worked.map_err(|e| {
        let msg = write::error(Severity::Fatal, e.sqlstate(), &e.to_string());
        b.to_client.push(msg);
        Counters::add(&proto.info.counters.errors, 1);
        e.to_string()
    })
}

/// What the upstream sent, alone: the client's bytes wait (a read to
/// route once the proxy's own answers are in, `replica.rs`).
pub(crate) fn process_upstream(proto: &mut Protocol, b: &mut Room) -> Result<(), String> {
    let worked = proto.on_upstream_bytes(&mut b.uin, &mut b.to_client, &mut b.to_up);
    worked.map_err(|e| {
        let msg = write::error(Severity::Fatal, e.sqlstate(), &e.to_string());
        b.to_client.push(msg);
        Counters::add(&proto.info.counters.errors, 1);
        e.to_string()
    })
}

/// The client has said goodbye and the session may end: its Terminate is
/// written, and the server owes nothing it was asked to answer. A server
/// reads a Terminate only after the query it runs, so a client whose
/// goodbye came mid-query sees its connection close then, not at once.
pub(crate) fn client_done(proto: &Protocol, b: &Room) -> bool {
    proto.flow == Flow::Terminated && !b.to_up.wants_write() && !proto.flight.awaiting_ready()
}

/// Whether to read the client and the upstream now: not while the other
/// side's queue is over `limits.buffer_bytes` (backpressure), nor while
/// the protocol holds that side back.
pub(crate) fn wants_reads(proto: &Protocol, b: &Room) -> (bool, bool) {
    let limit = proto.services.config.limits.buffer_bytes;
    let client = b.to_up.len() < limit && proto.flow != Flow::Terminated && !proto.client_paused();
    let upstream = b.to_client.len() < limit && proto.delay_until().is_none();
    (client, upstream)
}

/// The worker to move to now: nothing is held either way, and a session
/// that has lasted finds a less busy worker. Asked first whether a look is
/// due, so a settled session pays one test per turn.
pub(crate) fn move_due(proto: &Protocol, b: &Room, seat: &mut Seat) -> Option<usize> {
    let c = &proto.info.counters;
    let round_trips = || c.upstream_round_trips.load(Relaxed);
    if seat.due(round_trips)
        && !b.to_up.wants_write()
        && !b.to_client.wants_write()
        && b.cin.is_empty()
        && b.uin.is_empty()
        && proto.quiet()
    {
        return seat.move_to(round_trips());
    }
    None
}

/// Nothing is buffered for or from the server and the pooled session's
/// protocol state is at a release point.
fn at_release_point(proto: &Protocol, b: &Room) -> bool {
    proto.pooled
        && b.cin.is_empty()
        && b.uin.is_empty()
        && !b.to_up.wants_write()
        && proto.releasable()
}

/// The server's part is over for a pooled session still relaying: only
/// its answer may still be on its way to the client. The worker's relay
/// gives the connection back before writing that, since the write can
/// wake the client's process ahead of the proxy's own, and the connection
/// would idle meanwhile with clients in line for it.
pub(crate) fn server_done(proto: &Protocol, b: &Room) -> bool {
    at_release_point(proto, b) && proto.flow != Flow::Terminated
}

/// A pooled session may give its server connection back now: nothing is
/// buffered either way and its protocol state is at a release point. One
/// test per turn for sessions that are not pooled.
pub(crate) fn release_due(proto: &Protocol, b: &Room) -> bool {
    at_release_point(proto, b) && !b.to_client.wants_write()
}

/// Room for the reads of short messages, which most reads hold whole
/// (PgBouncer's packet buffers are this size).
const SMALL_ROOM: usize = 4096;
/// Less room than this is not worth a read's system call.
const MIN_READ: usize = 1024;
/// Room once a message spans reads.
const READ_ROOM: usize = 32 * 1024;
/// Most small and long rooms a thread keeps for its next reads (1 MiB each).
const SPARE_ROOMS: [usize; 2] = [256, 32];

thread_local! {
    /// Read rooms that sessions gave back, small and long: a pooled
    /// transaction would otherwise allocate and free two of them.
    static SPARE: std::cell::RefCell<[Vec<BytesMut>; 2]> = const {
        std::cell::RefCell::new([Vec::new(), Vec::new()])
    };
}

/// Which spare list keeps a room of `size`.
fn spare_list(size: usize) -> Option<usize> {
    match size {
        SMALL_ROOM => Some(0),
        READ_ROOM => Some(1),
        _ => None,
    }
}

/// A spare room of `size` (`SMALL_ROOM` or `READ_ROOM`), or a new one.
fn room_of(size: usize) -> BytesMut {
    spare_list(size)
        .and_then(|i| SPARE.try_with(|s| s.borrow_mut()[i].pop()).ok().flatten())
        .unwrap_or_else(|| BytesMut::with_capacity(size))
}

/// Keeps room for the next read: small while reads end where messages
/// end, long while a message spans reads, and as long as a message that
/// is longer. A long room left empty goes back for a small one, so a
/// session holds long room only while a long message passes.
#[inline]
pub(crate) fn reserve(buf: &mut BytesMut) {
    let free = buf.capacity() - buf.len();
    // Most reads: room enough, and not a long room left empty.
    if free >= MIN_READ && (free <= SMALL_ROOM || !buf.is_empty()) {
        return;
    }
    make_room(buf);
}

/// `reserve` when room runs short, or a long room is empty.
#[inline(never)]
fn make_room(buf: &mut BytesMut) {
    let len = buf.len();
    let mut free = buf.capacity() - len;
    // Reads go on in what is left of the room until that runs short;
    // then what is left of the last read moves to the front of its room,
    // when nothing else points into the room any more (a message read
    // earlier may still be queued, or kept).
    if free < MIN_READ && len <= SMALL_ROOM / 2 && buf.try_reclaim(SMALL_ROOM - len) {
        free = buf.capacity() - len;
    }
    let short = free < MIN_READ;
    if len == 0 && (short || free > SMALL_ROOM) {
        give_back_room(buf);
        *buf = room_of(SMALL_ROOM);
    } else if short && len + SMALL_ROOM <= READ_ROOM {
        // A message spans reads.
        let mut long = room_of(READ_ROOM);
        long.extend_from_slice(buf);
        buf.clear();
        give_back_room(buf);
        *buf = long;
    } else if short {
        buf.reserve(READ_ROOM);
    }
}

/// Whether `buf`, empty, is a small room that nothing else points into,
/// whole: ready for the next reads as it is.
pub(crate) fn keeps_room(buf: &mut BytesMut) -> bool {
    // A reclaim past the view succeeds only when nothing else points into
    // the room, and makes the view the whole room; a view as large as a
    // small room is one already.
    buf.is_empty()
        && (buf.capacity() == SMALL_ROOM || buf.try_reclaim(buf.capacity() + 1))
        && buf.capacity() == SMALL_ROOM
}

/// Keeps only what `buf` holds, at its size, and gives its read room
/// back: for a client that waits in line for a connection, beside
/// thousands of others, with a few bytes read.
pub(crate) fn keep_only_what_was_read(buf: &mut BytesMut) {
    if buf.len() > SMALL_ROOM / 2 {
        return;
    }
    let kept = BytesMut::from(&buf[..]);
    let mut room = std::mem::replace(buf, kept);
    room.clear();
    give_back_room(&mut room);
}

/// `give_back_room` if nothing points into the room any more; a room that
/// holds what is still queued for the client (a pooled session's last
/// answer, written after its connection went back) stays until the
/// session rests: dropped now, it would be freed with the answer, and the
/// next read would allocate another.
pub(crate) fn give_back_room_if_free(buf: &mut BytesMut) {
    if buf.is_empty() && buf.try_reclaim(buf.capacity() + 1) {
        give_back_room(buf);
    }
}

/// Empties `buf` (a session between transactions holds no read room),
/// keeping its room for this thread's next reads when nothing points into
/// it any more.
pub(crate) fn give_back_room(buf: &mut BytesMut) {
    let mut room = std::mem::take(buf);
    if !room.is_empty() {
        return;
    }
    // A reclaim past the room's view succeeds only when nothing else
    // points into the room, and makes the view the whole room. A view as
    // large as a whole room has had nothing read into it.
    let _ = room.try_reclaim(room.capacity() + 1);
    if let Some(i) = spare_list(room.capacity()) {
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s[i].len() < SPARE_ROOMS[i] {
                s[i].push(room);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;

    /// A client in line keeps its bytes, not its room: the room serves the
    /// thread's next read.
    #[test]
    fn a_waiting_client_keeps_its_bytes_not_its_room() {
        let _ = SPARE.try_with(|s| s.borrow_mut().iter_mut().for_each(Vec::clear));
        let mut buf = BytesMut::new();
        reserve(&mut buf);
        buf.extend_from_slice(b"Q\0\0\0\x0dSELECT 1\0");
        keep_only_what_was_read(&mut buf);
        assert_eq!(&buf[..], b"Q\0\0\0\x0dSELECT 1\0");
        assert!(buf.capacity() < 4096, "{}", buf.capacity());
        assert_eq!(SPARE.with(|s| s.borrow()[0].len()), 1);
        let mut big = BytesMut::new();
        reserve(&mut big);
        big.extend_from_slice(&[b'x'; 5000]);
        let cap = big.capacity();
        keep_only_what_was_read(&mut big);
        assert_eq!(
            (big.len(), big.capacity()),
            (5000, cap),
            "a long message keeps its room"
        );
    }

    /// Room given back serves the thread's next read, unless a message
    /// read into it is still in use: then it is left to that message.
    #[test]
    fn room_given_back_is_reused_only_when_nothing_points_into_it() {
        let mut buf = BytesMut::new();
        reserve(&mut buf);
        let start = buf.as_ptr();
        buf.extend_from_slice(b"Q\0\0\0\x0dSELECT 1\0");
        let kept = buf.split().freeze();
        give_back_room(&mut buf);
        assert_eq!(
            buf.capacity(),
            0,
            "a session between transactions holds none"
        );
        let mut next = BytesMut::new();
        reserve(&mut next);
        let reused = next.as_ptr() == start || next.as_ptr() == start.wrapping_add(kept.len());
        assert!(!reused, "room a message still uses was reused");
        assert_eq!(&kept[5..], b"SELECT 1\0");

        drop(kept);
        let mut buf = BytesMut::new();
        reserve(&mut buf);
        buf.extend_from_slice(b"done");
        drop(buf.split());
        let at = buf.as_ptr();
        give_back_room(&mut buf);
        let mut next = BytesMut::new();
        reserve(&mut next);
        assert_eq!(next.capacity(), SMALL_ROOM);
        assert_eq!(
            next.as_ptr(),
            at.wrapping_sub(4),
            "free room was not reused"
        );
    }

    /// Only a whole small room that nothing else points into goes on with
    /// its buffers as it is.
    #[test]
    fn a_room_is_kept_whole_only_when_it_is_all_its_own() {
        let mut buf = BytesMut::with_capacity(SMALL_ROOM);
        assert!(keeps_room(&mut buf), "untouched");
        buf.extend_from_slice(b"Z\0\0\0\x05I");
        assert!(!keeps_room(&mut buf), "holds bytes");
        let read = buf.split().freeze();
        assert!(!keeps_room(&mut buf), "a message read into it is in use");
        drop(read);
        assert!(keeps_room(&mut buf), "its message is gone");
        assert_eq!(
            buf.capacity(),
            SMALL_ROOM,
            "the view is the whole room again"
        );
        let mut long = BytesMut::with_capacity(READ_ROOM);
        assert!(!keeps_room(&mut long), "long room goes back to its list");
        assert!(!keeps_room(&mut BytesMut::new()), "no room");
    }

    /// A message that spans reads moves to long room, which goes back for
    /// small room once the message is read.
    #[test]
    fn a_room_grows_for_a_long_message_and_shrinks_after() {
        let _ = SPARE.try_with(|s| s.borrow_mut().iter_mut().for_each(Vec::clear));
        let mut buf = BytesMut::new();
        reserve(&mut buf);
        assert_eq!(buf.capacity(), SMALL_ROOM, "a session starts small");
        let bytes: Vec<u8> = (0..SMALL_ROOM).map(|i| i as u8).collect();
        buf.extend_from_slice(&bytes);
        drop(buf.split_to(1000));
        reserve(&mut buf);
        assert_eq!(buf.capacity(), READ_ROOM, "a message spans reads");
        assert_eq!(&buf[..], &bytes[1000..], "its start is kept");
        assert_eq!(SPARE.with(|s| s.borrow()[0].len()), 1, "small room back");

        buf.extend_from_slice(&[7; 20_000]);
        drop(buf.split());
        reserve(&mut buf);
        assert_eq!(buf.capacity(), SMALL_ROOM, "read: small again");
        assert_eq!(SPARE.with(|s| s.borrow().each_ref().map(Vec::len)), [0, 1]);

        buf.extend_from_slice(&[1; SMALL_ROOM]);
        drop(buf.split_to(SMALL_ROOM - 10));
        let start = buf.as_ptr();
        reserve(&mut buf);
        assert_eq!(buf.capacity(), SMALL_ROOM, "a short start stays small");
        assert_ne!(buf.as_ptr(), start, "moved to the front");
        assert_eq!(&buf[..], &[1; 10]);

        buf.extend_from_slice(&[2; 2 * READ_ROOM]);
        reserve(&mut buf);
        assert!(buf.capacity() - buf.len() >= SMALL_ROOM, "longer still");
    }
}
