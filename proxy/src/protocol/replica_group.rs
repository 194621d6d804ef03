//! Extended-protocol reads on replicas (session mode): which group of
//! Parse, Bind, Describe and Execute messages at the head of the client's
//! bytes may run on the session's replica connection, what that
//! connection must be sent ahead of it (the client's named statements it
//! lacks, made from the client's own Parse; Closes of those the client
//! closed since), and what the primary's unnamed statement must become
//! after a group that parsed one on the replica. No I/O: the relay sends
//! (`relay/replica/`).

use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;

use super::transaction::UnnamedFix;
use super::*;

/// The client's named statements, as routing reads needs them.
#[derive(Default)]
pub(super) struct ReplicaNamed {
    /// The Parse of each named statement the client made on the primary
    /// (a copy: it outlives its read buffer). Used only while the
    /// primary's record of the name (the Flight's) has the same text.
    client: FxHashMap<String, Bytes>,
    /// The Parse each name holds on the session's replica connection.
    on_replica: FxHashMap<String, Bytes>,
    /// Names the client closed that the replica connection still holds:
    /// closed there ahead of the next read sent to it.
    to_close: Vec<String>,
}

/// A group the relay may run on a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadGroup {
    /// Its bytes at the head of the client's, through its Sync.
    pub len: usize,
    /// Its Executes: the statements it runs.
    pub executes: u64,
    /// Where its last unnamed Parse lies in those bytes.
    unnamed_parse: Option<(usize, usize)>,
}

impl Protocol {
    /// The group of extended-protocol messages at the head of `cin`, whole
    /// up to its Sync, if it may run on a replica: only Parse, Bind,
    /// Describe, Execute and Flush before its Sync; its Parses unnamed and
    /// of pure reads (`replica_text`); its Binds to the unnamed portal, of
    /// a statement parsed in the group or a named one of the client's
    /// that is a pure read; at least one Execute, each of the unnamed
    /// portal bound in the group. With no transaction open, its Sync
    /// closes every portal: none is left open for a later message.
    /// Anything else, or anything unclear, is `None`: the group goes to
    /// the primary.
    pub fn replica_group(&mut self, cin: &[u8]) -> Option<ReadGroup> {
        let max = self.services.config.limits.max_message_bytes;
        let mut at = 0;
        let mut executes = 0;
        let mut unnamed_parse = None;
        let mut bound = false;
        loop {
            let h = frame::peek_header(&cin[at..], max).ok()??;
            let end = at + h.wire_len;
            let msg = cin.get(at..end)?;
            match h.tag {
                tag::PARSE => {
                    let (name, text) = frontend::parse(msg)?;
                    if !name.is_empty() || !self.replica_text(text) {
                        return None;
                    }
                    unnamed_parse = Some((at, end));
                }
                tag::BIND => {
                    let (portal, stmt) = frontend::bind(msg)?;
                    let known = match stmt.is_empty() {
                        true => unnamed_parse.is_some(),
                        false => self.replica_statement(stmt),
                    };
                    if !portal.is_empty() || !known {
                        return None;
                    }
                    bound = true;
                }
                tag::DESCRIBE => {
                    let ok = match frontend::target(msg)? {
                        (b'P', "") => bound,
                        (b'S', "") => unnamed_parse.is_some(),
                        (b'S', name) => self.replica_statement(name),
                        _ => false,
                    };
                    if !ok {
                        return None;
                    }
                }
                tag::EXECUTE => {
                    // A row limit leaves nothing open: the group's Sync
                    // ends its implicit transaction, and the portal with it
                    // (asyncpg's fetchrow asks for one row).
                    if !frontend::execute(msg)?.0.is_empty() || !bound {
                        return None;
                    }
                    executes += 1;
                }
                tag::FLUSH => {}
                tag::SYNC if executes > 0 => {
                    return Some(ReadGroup {
                        len: end,
                        executes,
                        unnamed_parse,
                    });
                }
                _ => return None,
            }
            at = end;
        }
    }

    /// The client's named statement `name` may be made on a replica: the
    /// session has its Parse, the primary holds that text under the name
    /// (nothing is in flight while a read may be routed), and it is a pure
    /// read.
    fn replica_statement(&mut self, name: &str) -> bool {
        // Answered from the pool's descriptions: checked on the primary
        // first (`told/`), where its first use goes.
        if self.unchecked_told(name) {
            return false;
        }
        let Some(f) = self.replica.as_deref() else {
            return false;
        };
        let pooled = self.pooled.then_some(&self.named);
        let Some(parse) = client_parse(&f.named, pooled, name).cloned() else {
            return false;
        };
        let Some((_, text)) = frontend::parse(&parse) else {
            return false;
        };
        self.flight
            .statement(name)
            .is_some_and(|s| s.as_str() == text)
            && self.replica_text(text)
    }

    /// A Parse of the client's goes to the primary: a named one is kept,
    /// to be made on a replica connection when a read binds it. Only when
    /// the primary holds nothing under the name: otherwise the server
    /// refuses the Parse and keeps what it held.
    pub(super) fn note_replica_parse(&mut self, msg: &Bytes) {
        let Some(name) = frontend::parse_name(msg).filter(|n| !n.is_empty()) else {
            return;
        };
        if self.flight.statement(name).is_none()
            && let Some(f) = self.replica.as_deref_mut()
        {
            let parse = Bytes::copy_from_slice(msg);
            f.named.client.insert(name.to_owned(), parse);
        }
    }

    /// A Close of the client's goes to the primary: a statement it closes
    /// is closed on the replica connection too, ahead of its next read.
    pub(super) fn note_replica_close(&mut self, msg: &Bytes) {
        let Some((b'S', name)) = frontend::target(msg) else {
            return;
        };
        let Some(f) = self.replica.as_deref_mut() else {
            return;
        };
        let named = &mut f.named;
        named.client.remove(name);
        if named.on_replica.remove(name).is_some() {
            named.to_close.push(name.to_owned());
        }
    }

    /// SQL's DEALLOCATE dropped the client's statement `name` (`None`:
    /// all of them): its Parse is no longer kept, and the replica
    /// connection's copy is closed ahead of its next read.
    pub(super) fn replica_forget(&mut self, name: Option<&str>) {
        let Some(f) = self.replica.as_deref_mut() else {
            return;
        };
        let named = &mut f.named;
        match name {
            Some(name) => {
                named.client.remove(name);
                if named.on_replica.remove(name).is_some() {
                    named.to_close.push(name.to_owned());
                }
            }
            None => {
                named.client.clear();
                named
                    .to_close
                    .extend(named.on_replica.drain().map(|(n, _)| n));
            }
        }
    }

    /// The session's replica connection is a new one (or none): it holds
    /// none of the client's statements.
    pub fn replica_connection_new(&mut self) {
        let Some(f) = self.replica.as_deref_mut() else {
            return;
        };
        let named = &mut f.named;
        named.on_replica.clear();
        named.to_close.clear();
    }

    /// What the replica connection must be sent ahead of `group` (the
    /// group's bytes): the Closes due, and for each named statement the
    /// group uses that the connection lacks, a Close and the client's
    /// Parse (a Close of a name it lacks is no error; a Parse of a name it
    /// has would be). Written to `out`; returns how many messages, each
    /// owing one completion. Recorded as held at once: a failure among
    /// them must be told (`replica_ahead_failed`).
    pub fn replica_ahead(&mut self, group: &[u8], out: &mut BytesMut) -> usize {
        let pooled = self.pooled.then_some(&self.named);
        let Some(f) = self.replica.as_deref_mut() else {
            return 0;
        };
        let named = &mut f.named;
        let mut n = 0;
        for name in named.to_close.drain(..) {
            wire::write::close(out, b'S', &name);
            n += 1;
        }
        for (t, msg) in frame::messages(group) {
            let name = match t {
                tag::BIND => frontend::bind(msg).map(|(_, s)| s),
                tag::DESCRIBE => match frontend::target(msg) {
                    Some((b'S', s)) => Some(s),
                    _ => None,
                },
                _ => None,
            };
            let Some(name) = name.filter(|s| !s.is_empty()) else {
                continue;
            };
            let Some(parse) = client_parse(named, pooled, name) else {
                continue;
            };
            if named.on_replica.get(name) == Some(parse) {
                continue;
            }
            wire::write::close(out, b'S', name);
            out.extend_from_slice(parse);
            n += 2;
            named.on_replica.insert(name.to_owned(), parse.clone());
        }
        n
    }

    /// A pooled replica connection is leased: what it holds (`held`)
    /// becomes the session's view of it.
    pub fn replica_connection_leased(&mut self, held: crate::replicas::spare::Statements) {
        if let Some(f) = self.replica.as_deref_mut() {
            f.named.on_replica = held;
            f.named.to_close.clear();
        }
    }

    /// A pooled replica connection goes back to its pool, with what it
    /// holds: the next client to lease it judges by the Parses themselves,
    /// so closes still due are not needed there.
    pub fn replica_connection_given_back(&mut self) -> crate::replicas::spare::Statements {
        let Some(f) = self.replica.as_deref_mut() else {
            return Default::default();
        };
        f.named.to_close.clear();
        std::mem::take(&mut f.named.on_replica)
    }

    /// What was sent ahead of a read failed, or its outcome is unknown:
    /// the replica connection is taken to hold none of the client's
    /// statements (each is closed before it is made again).
    pub fn replica_ahead_failed(&mut self) {
        if let Some(f) = self.replica.as_deref_mut() {
            f.named.on_replica.clear();
        }
    }

    /// The relay ran `group` (the client's bytes, `len` of them) on a
    /// replica. Its unnamed Parse never reached the primary, whose
    /// unnamed statement is made the client's before a message uses it.
    pub fn on_detoured_group(&mut self, g: ReadGroup, group: &Bytes) {
        if let Some((s, e)) = g.unnamed_parse {
            self.unnamed_fix = Some(UnnamedFix::Reparse(group.slice(s..e)));
            self.flight.forget("");
            if self.pooled {
                // What a later connection is to make again, once the fix
                // has made it on one (`switched_upstream`).
                self.unnamed_parse.clear();
                self.unnamed_parse.extend_from_slice(&group[s..e]);
            }
        }
    }
}

/// The Parse of the client's statement `name`: kept as it went to the
/// primary, or, pooled, as the session keeps it to make it on any
/// connection (answered from the pool's descriptions included).
fn client_parse<'a>(
    named: &'a ReplicaNamed,
    pooled: Option<&'a super::named::Named>,
    name: &str,
) -> Option<&'a Bytes> {
    named
        .client
        .get(name)
        .or_else(|| pooled.and_then(|p| p.parse_of(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config::Config, shared::Shared};

    /// A session routing reads, its settings already learned.
    fn proto() -> Protocol {
        let shared = Shared::for_tests(Config::default());
        let info = shared.stats.open_session(None, "postgres", "postgres", "");
        let mut p = Protocol::new(shared.services(), info);
        let _ = p.settings.ask();
        p.settings
            .on_answer(tag::READY_FOR_QUERY, &wire::write::ready_frame(b'I'));
        p.route_reads(true);
        p
    }

    /// `bytes` from the client, then `answer` from the server.
    fn exchange(p: &mut Protocol, bytes: &[u8], answer: &[u8]) {
        let (mut up, mut client) = (WriteQueue::default(), WriteQueue::default());
        p.on_client_bytes(&mut BytesMut::from(bytes), &mut up, &mut client)
            .unwrap();
        p.on_upstream_bytes(&mut BytesMut::from(answer), &mut client, &mut up)
            .unwrap();
    }

    fn msgs(parts: &[Bytes]) -> Bytes {
        let mut out = BytesMut::new();
        for p in parts {
            out.extend_from_slice(p);
        }
        out.freeze()
    }

    fn parse(name: &str, sql: &str) -> Bytes {
        let mut out = BytesMut::new();
        wire::write::parse(&mut out, name, sql);
        out.freeze()
    }

    fn bind(stmt: &str) -> Bytes {
        let mut out = BytesMut::new();
        wire::write::bind(&mut out, "", stmt);
        out.freeze()
    }

    fn execute(max_rows: i32) -> Bytes {
        let mut out = BytesMut::new();
        wire::write::message(&mut out, tag::EXECUTE, |b| {
            b.extend_from_slice(b"\0");
            b.extend_from_slice(&max_rows.to_be_bytes());
        });
        out.freeze()
    }

    fn describe(kind: u8, name: &str) -> Bytes {
        let mut out = BytesMut::new();
        wire::write::describe(&mut out, kind, name);
        out.freeze()
    }

    fn sync() -> Bytes {
        super::super::own::sync_frame()
    }

    #[test]
    fn a_whole_group_of_pure_reads_may_go() {
        let mut p = proto();
        let g = msgs(&[
            parse("", "select 1"),
            bind(""),
            describe(b'P', ""),
            execute(0),
            sync(),
        ]);
        let found = p.replica_group(&g).expect("a read group");
        assert_eq!(found.len, g.len());
        assert_eq!(found.executes, 1);
        // Whatever follows the Sync is not the group's.
        let more = msgs(&[g.clone(), parse("", "select 2")]);
        assert_eq!(p.replica_group(&more).map(|f| f.len), Some(g.len()));
        // A row limit, the portal closed by the Sync.
        let limited = msgs(&[parse("", "select 1"), bind(""), execute(1), sync()]);
        assert!(p.replica_group(&limited).is_some());
    }

    #[test]
    fn anything_unclear_stays_on_the_primary() {
        let mut p = proto();
        let cases = [
            // Not whole yet.
            msgs(&[parse("", "select 1"), bind(""), execute(0)]),
            // A write.
            msgs(&[parse("", "delete from t"), bind(""), execute(0), sync()]),
            // Describe only: a driver preparing.
            msgs(&[parse("", "select 1"), describe(b'S', ""), sync()]),
            // A portal left open: no Sync behind its Execute yet.
            msgs(&[parse("", "select 1"), bind(""), execute(5), {
                let mut f = BytesMut::new();
                wire::write::message(&mut f, tag::FLUSH, |_| {});
                f.freeze()
            }]),
            // A named Parse: the primary must hold it.
            msgs(&[parse("s", "select 1"), bind("s"), execute(0), sync()]),
            // The unnamed statement of an earlier group.
            msgs(&[bind(""), execute(0), sync()]),
            // A named statement the session never saw prepared.
            msgs(&[bind("s9"), execute(0), sync()]),
            // A Close among them.
            msgs(&[
                parse("", "select 1"),
                bind(""),
                execute(0),
                {
                    let mut c = BytesMut::new();
                    wire::write::close(&mut c, b'S', "x");
                    c.freeze()
                },
                sync(),
            ]),
            // nextval writes.
            msgs(&[
                parse("", "select nextval('s')"),
                bind(""),
                execute(0),
                sync(),
            ]),
        ];
        for g in cases {
            assert_eq!(p.replica_group(&g), None, "{g:?}");
        }
    }

    /// A named statement the primary holds is made on the replica
    /// connection once, and closed there after the client closes it.
    #[test]
    fn named_statements_follow_the_client_to_the_replica() {
        let mut p = proto();
        let mut ready = BytesMut::new();
        wire::write::ready_for_query(&mut ready, b'I');
        exchange(
            &mut p,
            &msgs(&[parse("s", "select 1"), sync()]),
            &msgs(&[Bytes::from_static(b"1\0\0\0\x04"), ready.clone().freeze()]),
        );
        let g = msgs(&[bind("s"), execute(0), sync()]);
        assert!(p.replica_group(&g).is_some());
        let mut out = BytesMut::new();
        assert_eq!(p.replica_ahead(&g, &mut out), 2, "a Close and the Parse");
        assert!(out.ends_with(&parse("s", "select 1")));
        out.clear();
        assert_eq!(p.replica_ahead(&g, &mut out), 0, "held already");
        p.replica_connection_new();
        assert_eq!(p.replica_ahead(&g, &mut out), 2, "a new connection");
        let mut close = BytesMut::new();
        wire::write::close(&mut close, b'S', "s");
        exchange(
            &mut p,
            &msgs(&[close.clone().freeze(), sync()]),
            &msgs(&[Bytes::from_static(b"3\0\0\0\x04"), ready.freeze()]),
        );
        assert_eq!(p.replica_group(&g), None, "closed");
        out.clear();
        assert_eq!(p.replica_ahead(&[], &mut out), 1);
        assert_eq!(&out[..], &close[..], "closed on the replica too");
    }
}
