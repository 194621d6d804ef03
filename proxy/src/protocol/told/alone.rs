//! Parses (and Describes) answered with no server connection, from the
//! pool's descriptions (see `mod.rs`).

use bytes::{Bytes, BytesMut};

use super::{Entry, parsed::parse_only_ok, pure_read, used_name};
use crate::protocol::{cypher::may_route, *};

impl Protocol {
    /// Client messages that are a Parse of a pure read, a Describe of it
    /// and a Sync (or a Flush), whose description the pool keeps: answered
    /// here, with no server connection. Likewise a Describe of a statement
    /// told here, and its Sync, and a Parse alone with its Sync of a read,
    /// a write or a transaction's control that the pool's server parsed
    /// before (`parsed.rs`), also inside a transaction whose BEGIN is held
    /// here. False, having changed nothing, for anything else.
    pub(in crate::protocol) fn parse_alone(
        &mut self,
        cin: &[u8],
        to_client: &mut WriteQueue,
    ) -> bool {
        if self.txn.failed || self.unsynced {
            return false;
        }
        // Inside a transaction whose BEGIN is held here, only a Parse alone,
        // under READ COMMITTED: elsewhere the Parse's snapshot would be the
        // transaction's.
        let held = self.txn.held.as_ref().map(|h| h.lazy_ok);
        if held == Some(false) || (held.is_some() && !self.coalescer.session_read_committed()) {
            return false;
        }
        let Some(cache) = self.told_here.cache.clone() else {
            return false;
        };
        let mut msgs = frame::messages(cin);
        let Some((t, first)) = msgs.next() else {
            return false;
        };
        let (mut describe, mut synced, mut seen) = (false, false, first.len());
        let name = match t {
            tag::PARSE => frontend::parse_name(first),
            _ => used_name(t, first),
        };
        let Some(name) = name else {
            return false;
        };
        let mut flushed = false;
        for (t, m) in msgs {
            seen += m.len();
            match t {
                tag::DESCRIBE if !describe && frontend::target(m) == Some((b'S', name)) => {
                    describe = true
                }
                tag::SYNC if seen == cin.len() => synced = true,
                // Its group goes on (asyncpg: Parse, Describe, Flush).
                tag::FLUSH if seen == cin.len() && describe && t_is_parse(first) => flushed = true,
                _ => return false,
            }
        }
        if !synced && !flushed {
            return false;
        }
        let described = describe || flushed;
        if held.is_some() && (described || t == tag::DESCRIBE) {
            return false;
        }
        if t == tag::DESCRIBE {
            // A Describe of a statement told here, with its Sync.
            let Some(d) = self
                .told_here
                .told()
                .and_then(|t| t.get(name))
                .map(|e| &e.told)
            else {
                return false;
            };
            let mut answers = BytesMut::new();
            answers.extend_from_slice(&d.params);
            answers.extend_from_slice(&d.row);
            crate::wire::write::ready_for_query(&mut answers, b'I');
            self.answer_here(answers.freeze(), to_client);
            return true;
        }
        if !self.leaves_search_path_alone()
            || (!name.is_empty()
                && (self.flight.statement(name).is_some() || self.named_by_client(name)))
            // The unnamed statement's fix is the held BEGIN's to make.
            || (held.is_some() && name.is_empty())
        {
            // A name the client has: the server's error is the answer.
            return false;
        }
        let Some(key) = frontend::parse_key(first) else {
            return false;
        };
        // Described, the client is told the statement's shape, checked
        // when it is used; parsed alone, only that it parses, which its own
        // Parse, sent ahead of the first use, proves or disproves there.
        let d = match described {
            true => match cache.get(key) {
                Some(d) => Some(d),
                None => return false,
            },
            false if cache.parsed_before(key) => None,
            false => return false,
        };
        let msg = Bytes::copy_from_slice(first);
        let Some((_, text)) = frontend::parse(&msg) else {
            return false;
        };
        let sql = Sql::within(&msg, text, None);
        if may_route(sql.words()) {
            return false;
        }
        let analysis = self.coalescer.analyses.of(&sql);
        let read = pure_read(&analysis);
        if !read && !parse_only_ok(&analysis) {
            return false;
        }
        let sql = sql.with_analysis(analysis);
        // The client's statement is this one now, made on the server before
        // it is used there, and checked then.
        match name.is_empty() {
            true => {
                self.unnamed_parse.clear();
                self.unnamed_parse.extend_from_slice(&msg);
                self.unnamed_fix = Some(UnnamedFix::ReparseKept);
            }
            false => self.name_for_client(name, msg.clone()),
        }
        self.flight.told(name, sql.detached());
        self.told_here.forget(name);
        let told = d.as_ref().map_or(0, |d| d.params.len() + d.row.len());
        let mut answers = BytesMut::with_capacity(told + 11);
        answers.extend_from_slice(&[tag::PARSE_COMPLETE, 0, 0, 0, 4]);
        if let (true, Some(d)) = (describe, &d) {
            answers.extend_from_slice(&d.params);
            answers.extend_from_slice(&d.row);
        }
        if flushed {
            // The client's group is open: nothing else is answered here
            // until it ends, on a server.
            self.unsynced = true;
            self.told_here.open = true;
        } else {
            let status = if held.is_some() { b'T' } else { b'I' };
            crate::wire::write::ready_for_query(&mut answers, status);
        }
        if let Some(d) = d {
            let key = Bytes::copy_from_slice(key);
            self.told_here.more().told.insert(
                name.to_owned(),
                Entry {
                    key,
                    told: d,
                    reparsed: false,
                    read,
                },
            );
        }
        Counters::add(&cache.answered, 1);
        self.answer_here(answers.freeze(), to_client);
        true
    }
}

fn t_is_parse(msg: &[u8]) -> bool {
    msg.first() == Some(&tag::PARSE)
}
