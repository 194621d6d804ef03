//! A pool's listening connection: one server connection per (database,
//! user) in this process that LISTENs to the union of its sessions'
//! channels and leaves each notification in the inbox of every session
//! listening on its channel, in the server's order. This is its state;
//! the task that opens the connection and drives its socket is the
//! session's room's (`session::pooled::listen`).

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
};

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::sync::{Notify, oneshot};

use crate::{
    protocol::{Inbox, notification_channel},
    wire::{backend, tag, write},
};

/// The outcome of asking for a channel: `Err` carries the server's
/// ErrorResponse, or why the connection could not be had.
pub type Listened = Result<(), String>;

/// What a session asking to listen gets.
pub enum Joined {
    /// The connection listens on the channel already.
    Ready,
    /// It will: the answer comes here. `start` when no task drives the
    /// connection yet and the caller must start one.
    Wait {
        answer: oneshot::Receiver<Listened>,
        start: bool,
    },
}

/// A command sent on the listening connection, awaiting its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Listen(String),
    Unlisten(String),
    /// An empty Query after notifications came: once it is answered,
    /// whatever was committed before it was sent has come (the server
    /// hands a listener what is pending before each ReadyForQuery), which
    /// narrows the window of the next notifications' senders.
    Barrier,
}

#[derive(Default)]
pub struct Listener {
    inner: Mutex<Inner>,
    /// Wakes the task: a channel to listen on or to leave.
    pub wake: Notify,
    /// Notifications handed to sessions' inboxes.
    pub fanned_out: AtomicU64,
    /// Listening connections lost (and made again).
    pub lost: AtomicU64,
    /// Who held each backend, while sessions listen.
    pub senders: super::senders::Senders,
}

#[derive(Default)]
struct Inner {
    /// The sessions listening on each channel, with their inboxes.
    subs: HashMap<String, Vec<(u64, Arc<Inbox>)>>,
    /// Channels the connection listens on now (answered).
    on: std::collections::HashSet<String>,
    /// Commands sent, in order, awaiting their answers, with when.
    sent: VecDeque<(Command, Instant)>,
    /// When the last command answered was sent: a notification that comes
    /// after was committed after it.
    floor: Option<Instant>,
    /// Notifications came since the last barrier was sent.
    barrier_due: bool,
    /// Sessions waiting for a channel's LISTEN to be answered.
    waiters: HashMap<String, Vec<oneshot::Sender<Listened>>>,
    /// A task drives the connection.
    task: bool,
    /// The connection is open and greeted.
    connected: bool,
    /// When each channel's LISTEN was sent on the connection: nothing
    /// committed before comes.
    listened_at: HashMap<String, Instant>,
}

impl Inner {
    /// What was known of the connection, which is gone or new: nothing is
    /// listened on there yet.
    fn forget_connection(&mut self) {
        self.on.clear();
        self.sent.clear();
        self.listened_at.clear();
        self.floor = None;
        self.barrier_due = false;
    }
}

impl Listener {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `session` listens on `channel` from now on: what comes for it goes
    /// to `inbox`.
    pub fn listen(&self, session: u64, inbox: &Arc<Inbox>, channel: &str) -> Joined {
        let mut g = self.lock();
        let subs = g.subs.entry(channel.to_owned()).or_default();
        if !subs.iter().any(|(s, _)| *s == session) {
            subs.push((session, inbox.clone()));
        }
        if g.connected && g.on.contains(channel) {
            return Joined::Ready;
        }
        let (tx, rx) = oneshot::channel();
        g.waiters.entry(channel.to_owned()).or_default().push(tx);
        let start = !std::mem::replace(&mut g.task, true);
        drop(g);
        if start {
            self.senders.set_on(true);
        }
        self.wake.notify_one();
        Joined::Wait { answer: rx, start }
    }

    /// `session` stops listening on `channel` (`None`: on all of them).
    pub fn unlisten(&self, session: u64, channel: Option<&str>) {
        let mut g = self.lock();
        let mut emptied = false;
        g.subs.retain(|c, subs| {
            if channel.is_none_or(|ch| ch == c) {
                subs.retain(|(s, _)| *s != session);
            }
            emptied |= subs.is_empty();
            !subs.is_empty()
        });
        drop(g);
        if emptied {
            self.wake.notify_one();
        }
    }

    /// The next command the connection must send to listen on what its
    /// sessions listen on, and on nothing else; it is counted as sent.
    pub fn next_command(&self) -> Option<Command> {
        let mut g = self.lock();
        if !g.connected {
            return None;
        }
        let pending = |g: &Inner, c: &str| {
            g.sent
                .iter()
                .any(|(s, _)| matches!(s, Command::Listen(x) | Command::Unlisten(x) if x == c))
        };
        let wanted = g
            .subs
            .keys()
            .find(|c| !g.on.contains(*c) && !pending(&g, c))
            .cloned();
        let cmd = match wanted {
            Some(c) => {
                g.listened_at.insert(c.clone(), Instant::now());
                Command::Listen(c)
            }
            None => {
                let stale =
                    g.on.iter()
                        .find(|c| !g.subs.contains_key(*c) && !pending(&g, c))
                        .cloned();
                match stale {
                    Some(c) => Command::Unlisten(c),
                    None if g.barrier_due && g.sent.is_empty() => {
                        g.barrier_due = false;
                        Command::Barrier
                    }
                    None => return None,
                }
            }
        };
        g.sent.push_back((cmd.clone(), Instant::now()));
        Some(cmd)
    }

    /// The oldest command sent was answered: `Err` with the server's
    /// error. A LISTEN refused drops its channel's sessions, which are
    /// told (and run it on a server connection of their own).
    pub fn answered(&self, outcome: Listened) {
        let mut g = self.lock();
        let Some((cmd, at)) = g.sent.pop_front() else {
            return;
        };
        g.floor = g.floor.max(Some(at));
        match (cmd, outcome) {
            (Command::Listen(c), Ok(())) => {
                g.on.insert(c.clone());
                for w in g.waiters.remove(&c).unwrap_or_default() {
                    let _ = w.send(Ok(()));
                }
            }
            (Command::Listen(c), Err(e)) => {
                g.subs.remove(&c);
                for w in g.waiters.remove(&c).unwrap_or_default() {
                    let _ = w.send(Err(e.clone()));
                }
            }
            (Command::Unlisten(c), _) => {
                g.on.remove(&c);
            }
            (Command::Barrier, _) => {}
        }
        drop(g);
        self.wake.notify_one();
    }

    /// The connection is open: what its sessions listen on is listened
    /// on again.
    pub fn connected(&self) {
        let mut g = self.lock();
        g.connected = true;
        g.forget_connection();
    }

    /// The connection could not be opened: the sessions waiting for a
    /// channel are told why (each takes its channel back and goes the
    /// server's way); those that listened already stay, for the next
    /// connection.
    pub fn unreachable(&self, why: &str) {
        let waiters: Vec<_> = self.lock().waiters.drain().collect();
        for w in waiters.into_iter().flat_map(|(_, ws)| ws) {
            let _ = w.send(Err(why.to_owned()));
        }
    }

    /// The connection was lost: every session listening is warned that
    /// notifications may have been missed meanwhile (none can tell), and
    /// its channels are listened on again on the next connection.
    pub fn lost(&self, why: &str) {
        self.lost.fetch_add(1, Relaxed);
        let mut g = self.lock();
        g.connected = false;
        g.forget_connection();
        let warning = lost_warning(why);
        let mut told: Vec<u64> = Vec::new();
        for subs in g.subs.values() {
            for (s, inbox) in subs {
                if !told.contains(s) {
                    told.push(*s);
                    inbox.push(warning.clone());
                }
            }
        }
    }

    /// The task may end: no session listens. Then it is marked ended
    /// (a later LISTEN starts another).
    pub fn may_end(&self) -> bool {
        let mut g = self.lock();
        if g.subs.is_empty() && g.waiters.is_empty() {
            g.task = false;
            g.connected = false;
            g.forget_connection();
            drop(g);
            self.senders.set_on(false);
            return true;
        }
        false
    }

    /// Hands a NotificationResponse to the sessions listening on its
    /// channel, naming its sender as that client was told at login when
    /// the sender is known (`senders.rs`). `idle`: whether a backend is
    /// idle in the pool now.
    pub fn fan_out(&self, msg: Bytes, idle: impl Fn(i32) -> bool) {
        let Some(channel) = notification_channel(&msg) else {
            return;
        };
        let read = Instant::now();
        let mut g = self.lock();
        g.barrier_due = true;
        let after = g.listened_at.get(channel).copied().max(g.floor);
        let Some(subs) = g.subs.get(channel) else {
            return;
        };
        let backend = backend::notification(&msg).map(|(pid, _)| pid);
        let sender = match (backend, after) {
            (Some(pid), Some(after)) => self.senders.sender(pid, after, read, idle(pid)),
            _ => None,
        };
        let msg = match sender {
            Some(pid) => backend::notification_from(&msg, pid),
            None => msg,
        };
        for (_, inbox) in subs {
            inbox.push(msg.clone());
        }
        self.fanned_out.fetch_add(subs.len() as u64, Relaxed);
    }

    /// (listening connections, channels listened on), for SHOW POOLS.
    pub fn counts(&self) -> (usize, usize) {
        let g = self.lock();
        (usize::from(g.connected), g.on.len())
    }
}

/// The Query a command sends.
pub fn command_query(cmd: &Command) -> Bytes {
    let sql = match cmd {
        Command::Listen(c) => format!("LISTEN {}", quoted(c)),
        Command::Unlisten(c) => format!("UNLISTEN {}", quoted(c)),
        Command::Barrier => String::new(),
    };
    let mut out = BytesMut::new();
    write::query(&mut out, &sql);
    out.freeze()
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// What a session listening is told when the listening connection was
/// lost: PostgreSQL has no message for "notifications may be missing",
/// so a WARNING says so, as the server's NoticeResponse would.
fn lost_warning(why: &str) -> Bytes {
    let mut out = BytesMut::new();
    write::warning_into(
        &mut out,
        "01000",
        &format!(
            "onetrip's listening connection was lost ({why}) and is made again: \
             notifications sent meanwhile may be missing"
        ),
    );
    debug_assert_eq!(out.first(), Some(&tag::NOTICE_RESPONSE));
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_follow_the_union_of_channels() {
        let l = Listener::default();
        let (a, b) = (Arc::new(Inbox::default()), Arc::new(Inbox::default()));
        assert!(matches!(
            l.listen(1, &a, "x"),
            Joined::Wait { start: true, .. }
        ));
        assert!(matches!(
            l.listen(2, &b, "x"),
            Joined::Wait { start: false, .. }
        ));
        assert_eq!(l.next_command(), None, "not connected yet");
        l.connected();
        assert_eq!(l.next_command(), Some(Command::Listen("x".into())));
        assert_eq!(l.next_command(), None, "one LISTEN for both");
        l.answered(Ok(()));
        assert!(matches!(l.listen(2, &b, "x"), Joined::Ready));
        l.unlisten(1, None);
        assert_eq!(l.next_command(), None, "2 still listens");
        l.unlisten(2, Some("x"));
        assert_eq!(l.next_command(), Some(Command::Unlisten("x".into())));
        l.answered(Ok(()));
        // A notification asks for a barrier, sent when nothing else is.
        let mut note = BytesMut::new();
        write::message(&mut note, tag::NOTIFICATION, |b| {
            b.extend_from_slice(&7i32.to_be_bytes());
            b.extend_from_slice(b"x\0p\0");
        });
        l.fan_out(note.freeze(), |_| false);
        assert_eq!(l.next_command(), Some(Command::Barrier));
        assert_eq!(l.next_command(), None, "one at a time");
        l.answered(Ok(()));
        assert!(l.may_end());
    }
}
