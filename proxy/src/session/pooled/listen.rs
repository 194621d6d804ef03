//! LISTEN without a pin, the session's side: a pooled session's lone
//! `LISTEN` or `UNLISTEN` is run by its pool's listening connection
//! (`pooling::listen`), and this task opens that connection and drives
//! its socket: it sends what the sessions' channels need, hands each
//! notification out, and makes the connection again when it is lost.

use std::{sync::Arc, time::Duration};

use bytes::BytesMut;
use onetrip_planner::classify::ListenOp;
use tokio::io::AsyncWriteExt;
use tracing::{debug, warn};

use crate::{
    net::Stream,
    pooling::{
        Pool, Pooled,
        listen::{Joined, command_query},
    },
    protocol::Protocol,
    shared::Shared,
    wire::{backend, read::read_message, tag},
};

/// Most a listening connection's message may be: a notification's payload
/// is under 8000 bytes.
const MAX_MESSAGE: usize = 1 << 20;

/// Runs `op` for the session through its pool's listening connection.
/// False when that connection could not (the server refused the LISTEN,
/// or no connection could be had): the statement then goes to a server
/// connection of the session's own, as before.
pub async fn run_op(
    op: &ListenOp,
    proto: &mut Protocol,
    pooled: &mut Pooled,
    shared: &Arc<Shared>,
) -> bool {
    let id = proto.info.id;
    let inbox = proto.inbox();
    pooled.listens_as = Some(id);
    let listener = &pooled.pool.listener;
    match op {
        ListenOp::Listen(channel) => match listener.listen(id, &inbox, channel) {
            Joined::Ready => true,
            Joined::Wait { answer, start } => {
                if start {
                    tokio::spawn(drive_listener(shared.clone(), pooled.pool.clone()));
                }
                // Opening the connection is bounded by connect_timeout.
                let limit = proto.services.config.upstream.connect_timeout * 2;
                match crate::timers::timeout(limit, answer).await {
                    Ok(Ok(Ok(()))) => true,
                    outcome => {
                        debug!("LISTEN goes to the session's own connection: {outcome:?}");
                        listener.unlisten(id, Some(channel));
                        false
                    }
                }
            }
        },
        ListenOp::Unlisten(channel) => {
            listener.unlisten(id, Some(channel));
            inbox.forget(Some(channel));
            true
        }
        ListenOp::UnlistenAll => {
            listener.unlisten(id, None);
            inbox.forget(None);
            true
        }
    }
}

/// The pool's listening connection, for as long as a session listens:
/// opened (again, after a loss, with a growing pause while the server
/// refuses), driven, closed when the last session stops listening.
async fn drive_listener(shared: Arc<Shared>, pool: Arc<Pool>) {
    let l = &pool.listener;
    let mut pause = Duration::from_millis(50);
    loop {
        if l.may_end() {
            return;
        }
        let opened = super::open(&shared, &pool).await;
        let stream = match opened {
            Ok(o) => o.stream,
            Err(e) => {
                let why = e.to_string();
                warn!(
                    "pool {}/{}: listening connection: {why}",
                    pool.database, pool.user
                );
                l.unreachable(&why);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        pause = Duration::from_millis(50);
        l.connected();
        match drive(stream, &pool).await {
            None => return,
            Some(why) => {
                warn!(
                    "pool {}/{}: listening connection lost: {why}",
                    pool.database, pool.user
                );
                l.lost(&why);
            }
        }
    }
}

/// Drives one listening connection: `None` when no session listens any
/// more (it is closed), else why it was lost.
async fn drive(mut s: Stream, pool: &Pool) -> Option<String> {
    let l = &pool.listener;
    let mut buf = BytesMut::with_capacity(1024);
    let mut out = BytesMut::new();
    // The error of the command being answered, until its ReadyForQuery.
    let mut failed: Option<String> = None;
    loop {
        while let Some(cmd) = l.next_command() {
            out.extend_from_slice(&command_query(&cmd));
        }
        if !out.is_empty() {
            let sent = async {
                s.write_all(&out).await?;
                s.flush().await
            };
            if let Err(e) = sent.await {
                return Some(format!("write: {e}"));
            }
            out.clear();
        }
        if l.may_end() {
            let _ = s.shutdown().await;
            return None;
        }
        let msg = tokio::select! {
            msg = read_message(&mut s, &mut buf, MAX_MESSAGE) => msg,
            () = l.wake.notified() => continue,
        };
        let msg = match msg {
            Ok(m) => m,
            Err(e) => return Some(e.to_string()),
        };
        match msg[0] {
            tag::NOTIFICATION => l.fan_out(msg, |pid| pool.idle_has_backend(pid)),
            tag::ERROR_RESPONSE => {
                let text = backend::error_field(&msg, b'M').unwrap_or("error");
                failed = Some(text.to_owned());
            }
            tag::READY_FOR_QUERY => l.answered(failed.take().map_or(Ok(()), Err)),
            // CommandComplete, notices, ParameterStatus: nothing to do.
            _ => {}
        }
    }
}
