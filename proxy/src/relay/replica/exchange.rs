//! One write to a session's replica connection and its answers: what is
//! the proxy's own is swallowed, the client's answer is kept (or streamed,
//! past `max_held`), the replay position read.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Conn;
use crate::{
    net::Stream,
    replicas,
    wire::{backend, frame, tag},
};

/// What one write holds, in order, and so what its answers are.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Plan {
    /// Queries of the proxy's own first (the ROLLBACK of a transaction
    /// moved to the primary, a held BEGIN): answered up to a
    /// ReadyForQuery each, swallowed.
    pub queries: usize,
    /// The replay query next, inside the transaction just begun, ahead of
    /// the client's statement.
    pub replay_first: bool,
    /// Closes and Parses of the proxy's own ahead of the client's group:
    /// one completion each, swallowed.
    pub ahead: usize,
    /// The replay query after the client's message.
    pub replay_after: bool,
}

pub(super) enum Exchange {
    /// The client's answer (what did not stream), the replay position
    /// when asked and the replica is still in recovery, and the client's
    /// transaction status after it.
    Done(Bytes, Option<u64>, u8),
    /// Why; whether the connection is still good.
    Refused(String, bool),
    Lost(String),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Own,
    Replay { last: bool },
    Ahead,
    Client,
}

/// SQLSTATEs a replica gives where the primary would run the read: a
/// write after all (25006), a recovery conflict (40001), shutdowns and
/// lost connections.
fn replica_refusal(code: &str) -> bool {
    // 26000: a statement the connection should hold and does not; the
    // primary answers for it.
    code == "25006"
        || code == "40001"
        || code == "26000"
        || code.starts_with("57P")
        || code.starts_with("08")
}

/// Writes `out` and reads the answers `plan` says it holds.
pub(super) async fn exchange(
    conn: &mut Conn,
    out: &[u8],
    plan: Plan,
    client: &mut Stream,
    max_held: usize,
    sent: &mut u64,
) -> Exchange {
    if let Err(e) = conn.tcp.write_all(out).await {
        return Exchange::Refused(format!("replica write: {e}"), false);
    }
    let mut queries = plan.queries;
    let mut swallow = plan.ahead;
    let after_replay_first = if plan.ahead > 0 {
        Phase::Ahead
    } else {
        Phase::Client
    };
    let mut phase = match (queries, plan.replay_first) {
        (1.., _) => Phase::Own,
        (0, true) => Phase::Replay { last: false },
        (0, false) => after_replay_first,
    };
    let mut answer = BytesMut::new();
    let mut streamed = false;
    let mut refused: Option<String> = None;
    let mut replay = None;
    let mut status = b'I';
    let lost = |streamed: bool, why: String| match streamed {
        true => Exchange::Lost(format!("replica connection lost mid-answer: {why}")),
        false => Exchange::Refused(why, false),
    };
    loop {
        let h = match frame::peek_header(&conn.buf, usize::MAX) {
            Ok(h) => h,
            Err(e) => return lost(streamed, format!("replica sent {e}")),
        };
        let Some(h) = h.filter(|h| conn.buf.len() >= h.wire_len) else {
            conn.buf.reserve(8192);
            match conn.tcp.read_buf(&mut conn.buf).await {
                Ok(0) => return lost(streamed, "replica closed the connection".into()),
                Ok(_) => continue,
                Err(e) => return lost(streamed, format!("replica read: {e}")),
            }
        };
        let m = conn.buf.split_to(h.wire_len);
        match phase {
            Phase::Own => {
                match h.tag {
                    tag::ERROR_RESPONSE => {
                        refused.get_or_insert_with(|| replicas::why(&m));
                    }
                    tag::READY_FOR_QUERY => queries -= 1,
                    _ => {}
                }
                if queries == 0 {
                    phase = match plan.replay_first {
                        true => Phase::Replay { last: false },
                        false => after_replay_first,
                    };
                }
                continue;
            }
            Phase::Replay { last } => {
                match h.tag {
                    tag::DATA_ROW => {
                        // Promoted since its watcher last looked: its
                        // answer may be of a timeline the primary never had.
                        let in_recovery = backend::data_row_column(&m, 1).flatten();
                        replay = backend::data_row_column(&m, 0)
                            .flatten()
                            .and_then(|s| replicas::parse_lsn(&s))
                            .filter(|_| in_recovery.as_deref() == Some("t"));
                    }
                    tag::READY_FOR_QUERY if last => break,
                    tag::READY_FOR_QUERY => phase = after_replay_first,
                    _ => {}
                }
                continue;
            }
            Phase::Ahead if refused.is_none() => {
                match h.tag {
                    tag::PARSE_COMPLETE | tag::CLOSE_COMPLETE => swallow -= 1,
                    // The statement could not be made there: the server
                    // skips the client's messages, which run on the primary.
                    tag::ERROR_RESPONSE => {
                        refused = Some(replicas::why(&m));
                        phase = Phase::Client;
                    }
                    // A notice or a report: not the client's.
                    tag::NOTICE_RESPONSE | tag::PARAMETER_STATUS => {}
                    _ => refused = Some("unexpected answer ahead of a read".into()),
                }
                if swallow == 0 {
                    phase = Phase::Client;
                }
                continue;
            }
            Phase::Ahead | Phase::Client => {}
        }
        match h.tag {
            tag::ERROR_RESPONSE => {
                let code = backend::error_field(&m, b'C').unwrap_or("");
                if backend::is_fatal(&m) || replica_refusal(code) {
                    if streamed {
                        return Exchange::Lost(replicas::why(&m));
                    }
                    refused.get_or_insert_with(|| replicas::why(&m));
                }
            }
            tag::READY_FOR_QUERY => {
                status = backend::ready_status(&m);
                if !plan.replay_after {
                    if refused.is_none() {
                        answer.extend_from_slice(&m);
                    }
                    break;
                }
                phase = Phase::Replay { last: true };
            }
            // The replica's own reports are not the client's: it was told
            // the primary's.
            tag::PARAMETER_STATUS => continue,
            _ => {}
        }
        if refused.is_some() {
            // Read on to the end of the last answer: the connection stays
            // usable.
            continue;
        }
        answer.extend_from_slice(&m);
        if answer.len() > max_held {
            streamed = true;
            *sent += answer.len() as u64;
            if let Err(e) = client.write_all(&answer).await {
                return Exchange::Lost(format!("client write: {e}"));
            }
            answer.clear();
        }
    }
    match refused {
        Some(why) => Exchange::Refused(why, true),
        None => Exchange::Done(answer.freeze(), replay, status),
    }
}
