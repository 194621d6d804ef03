//! Transactions in fewer round trips (ARCHITECTURE.md, "Transactions in
//! one trip"): a BEGIN sent while nothing is on its way is answered here
//! and held, and goes upstream with the transaction's first statement that
//! needs the server; a COMMIT or ROLLBACK of a transaction that never got
//! there is answered here; with `lazy_reads`, pure reads run without the
//! BEGIN. This file holds the state and the answers; the decisions are
//! `client.rs`'s, where the client's messages are.

use bytes::{BufMut, Bytes, BytesMut};

use super::text::Sql;
use crate::wire::{frame, tag, write};

/// A BEGIN answered here and not sent yet.
#[derive(Debug)]
pub struct HeldBegin {
    /// The client's messages, sent as they came when the transaction
    /// reaches the server (their answers go to nobody).
    pub frames: Bytes,
    /// The unnamed statement its extended form parsed, for the prepared
    /// statements once it is sent.
    pub parse: Option<Sql>,
    /// Reads may run without it: it sets no isolation level but READ
    /// COMMITTED.
    pub lazy_ok: bool,
    /// What a read that ran without it made of the client's unnamed
    /// statement (its own Parse, or a Query's drop): the server's must be
    /// made that again once the BEGIN's Parse has gone up.
    pub(super) unnamed_after: Option<UnnamedFix>,
}

#[derive(Debug, Default)]
pub struct Transaction {
    pub defer_begin: bool,
    pub lazy_reads: bool,
    pub held: Option<HeldBegin>,
    /// A lazy read failed: the client's transaction is aborted, and what
    /// comes next is answered as in an aborted block.
    pub failed: bool,
}

/// The end of a client's group of extended-protocol messages: where its
/// Sync (or what else ends it) lies, and what it holds.
#[derive(Debug)]
pub struct Group {
    /// Offset just past the message that ends it.
    pub end: usize,
    /// It ends with a Sync (else with a Flush, Query or other).
    pub synced: bool,
    pub parse: Option<(usize, usize)>,
    pub bind: Option<(usize, usize)>,
    pub describe: Option<(usize, usize)>,
    pub execute: Option<(usize, usize)>,
    /// Messages other than one Parse, Bind, Describe and Execute.
    pub others: bool,
}

impl Transaction {
    pub fn new(defer_begin: bool, lazy_reads: bool) -> Self {
        Self {
            defer_begin,
            lazy_reads,
            ..Self::default()
        }
    }

    /// The status the client has been told: its transaction is open here
    /// (`T`), or aborted (`E`).
    pub fn told_status(&self) -> u8 {
        if self.failed { b'E' } else { b'T' }
    }
}

/// The group of messages that starts at `chunk[at]` and ends with the first
/// Sync, Flush, Query or other message that ends an extended-protocol
/// batch; `None` when its end has not arrived yet.
pub fn group(chunk: &[u8], at: usize) -> Option<Group> {
    let mut g = Group {
        end: at,
        synced: false,
        parse: None,
        bind: None,
        describe: None,
        execute: None,
        others: false,
    };
    let mut pos = at;
    while let Ok(Some(h)) = frame::peek_header(chunk.get(pos..)?, usize::MAX) {
        let span = (pos, pos + h.wire_len);
        pos += h.wire_len;
        g.end = pos;
        match h.tag {
            tag::SYNC => {
                g.synced = true;
                return Some(g);
            }
            tag::PARSE if g.parse.is_none() && g.bind.is_none() => g.parse = Some(span),
            tag::BIND if g.bind.is_none() => g.bind = Some(span),
            tag::DESCRIBE if g.describe.is_none() && g.execute.is_none() => g.describe = Some(span),
            tag::EXECUTE if g.execute.is_none() && g.bind.is_some() => g.execute = Some(span),
            tag::PARSE | tag::BIND | tag::DESCRIBE | tag::EXECUTE | tag::CLOSE => g.others = true,
            _ => {
                g.others = true;
                return Some(g);
            }
        }
    }
    None
}

/// CommandComplete `tag`.
pub fn complete(tag_text: &str) -> BytesMut {
    let mut out = BytesMut::new();
    write::command_complete(&mut out, tag_text);
    out
}

/// What the server answers a group of one statement (Parse? Bind
/// Describe? Execute Sync) whose CommandComplete is `tag_text` and which
/// returns no rows, ending in status `status`.
pub fn group_answers(g: &Group, tag_text: &str, status: u8) -> Bytes {
    let mut out = BytesMut::new();
    if g.parse.is_some() {
        out.put_slice(&[tag::PARSE_COMPLETE, 0, 0, 0, 4]);
    }
    out.put_slice(&[tag::BIND_COMPLETE, 0, 0, 0, 4]);
    if g.describe.is_some() {
        out.put_slice(&[tag::NO_DATA, 0, 0, 0, 4]);
    }
    write::command_complete(&mut out, tag_text);
    write::ready_for_query(&mut out, status);
    out.freeze()
}

/// A simple Query's answer: CommandComplete `tag_text`, then status.
pub fn query_answers(tag_text: &str, status: u8) -> Bytes {
    let mut out = complete(tag_text);
    write::ready_for_query(&mut out, status);
    out.freeze()
}

/// The statement that makes a block fail at the server, so the server
/// answers what follows as in an aborted block: its error goes to nobody.
pub fn abort_frames() -> Bytes {
    let mut out = BytesMut::new();
    write::query(&mut out, "SELECT 1/0");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(t: u8) -> Vec<u8> {
        vec![t, 0, 0, 0, 4]
    }

    #[test]
    fn groups_end_at_their_sync_or_at_what_ends_a_batch() {
        let mut buf = Vec::new();
        for t in [
            tag::PARSE,
            tag::BIND,
            tag::DESCRIBE,
            tag::EXECUTE,
            tag::SYNC,
        ] {
            buf.extend(msg(t));
        }
        let g = group(&buf, 0).unwrap();
        assert!(g.synced && !g.others && g.describe.is_some() && g.end == 25);
        assert!(group(&buf[..20], 0).is_none(), "its Sync has not come");
        let mut q = msg(tag::BIND);
        q.extend(msg(tag::QUERY));
        let g = group(&q, 0).unwrap();
        assert!(!g.synced && g.others);
    }
}

/// What the server's unnamed statement must become before a client message
/// uses it, after a statement answered here that the server never saw.
#[derive(Debug)]
pub(super) enum UnnamedFix {
    /// A simple Query drops it.
    Drop,
    /// The extended form of a COMMIT or ROLLBACK parsed it: this Parse.
    Parse(Bytes),
    /// The session moved to another server connection (transaction
    /// pooling): the client's own unnamed Parse, made again and recorded.
    Reparse(Bytes),
    /// As `Reparse`, with the Parse the session keeps (`unnamed_parse`),
    /// copied only if a message uses it: most clients send a new Parse.
    ReparseKept,
}

impl UnnamedFix {
    /// Its Parse as a copy of its own, no longer in the read buffer.
    pub(super) fn detach(&mut self) {
        if let UnnamedFix::Parse(p) | UnnamedFix::Reparse(p) = self {
            *p = Bytes::copy_from_slice(p);
        }
    }
}
