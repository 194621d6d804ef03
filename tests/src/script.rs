//! Scripted message sequences, run against PostgreSQL and through onetrip
//! side by side: the same messages, in the same writes, with the client
//! waiting at the same points, must get the same answers in the same order
//! and at the same points.
//!
//! A [`Script`] is a list of client messages with write boundaries and
//! waits. At a wait, the reference run (direct to PostgreSQL) reads until
//! every Sync and Query sent so far has its ReadyForQuery and, when a
//! Flush followed the last extended-protocol messages, those are answered
//! too (a model of what the server owes says when: after an error in an
//! extended-protocol message it skips up to the next Sync, Queries
//! included). Each other target must then give exactly as many messages
//! there, equal one by one: a message it withholds until later shows as a
//! wait that times out, one it sends early as a difference.
//!
//! Transcripts print as message types, `Z` with its transaction status and
//! `E` with its SQLSTATE, waits as `|`: `1 2 D C ZI | ZI`.

use std::{fmt, time::Duration};

use crate::transcript::{Msg, Raw};

/// One client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fe {
    Query(String),
    Parse {
        name: String,
        sql: String,
    },
    /// Bind with text parameters (`None` is NULL).
    Bind {
        portal: String,
        stmt: String,
        params: Vec<Option<String>>,
    },
    DescribePortal(String),
    DescribeStatement(String),
    Execute {
        portal: String,
        max_rows: i32,
    },
    ClosePortal(String),
    CloseStatement(String),
    Flush,
    Sync,
    CopyData(Vec<u8>),
    CopyDone,
    /// CopyFail with the client's reason.
    CopyFail(String),
}

/// What the server owes, as PostgreSQL answers: each extended-protocol
/// message one completion or an error, each Query and Sync a
/// ReadyForQuery; after an error in an extended-protocol message it skips
/// everything up to the next Sync, Queries included. A COPY FROM STDIN
/// reads what follows it as its data up to CopyDone or CopyFail, a Sync
/// there included, which it ignores (scripts send nothing else there).
#[derive(Debug, Default)]
struct Owed {
    /// What is owed, each with the CopyDone and CopyFail messages sent
    /// before it.
    items: std::collections::VecDeque<(Owes, u64)>,
    skipping: bool,
    /// The first this many items are answered now, without waiting for
    /// more messages: those before the last flush request.
    due: usize,
    /// CopyDone and CopyFail messages sent.
    copy_ends: u64,
    /// The server waits for the client's COPY data.
    copy_in: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owes {
    Completion,
    Ready { sync: bool },
}

impl Owed {
    fn sent(&mut self, fe: &Fe) {
        let ends = self.copy_ends;
        match fe {
            Fe::CopyData(_) | Fe::Flush => {}
            Fe::CopyDone | Fe::CopyFail(_) => {
                self.copy_ends += 1;
                self.copy_in = false;
            }
            // Read as COPY data, and ignored.
            Fe::Sync if self.copy_in => {}
            Fe::Sync => {
                self.skipping = false;
                self.items.push_back((Owes::Ready { sync: true }, ends));
            }
            _ if self.skipping => {}
            Fe::Query(_) => self.items.push_back((Owes::Ready { sync: false }, ends)),
            _ => self.items.push_back((Owes::Completion, ends)),
        }
        if matches!(
            fe,
            Fe::Sync | Fe::Flush | Fe::Query(_) | Fe::CopyDone | Fe::CopyFail(_)
        ) {
            self.due = self.items.len();
        }
    }

    fn pop(&mut self) {
        self.items.pop_front();
        self.due = self.due.saturating_sub(1);
    }

    fn received(&mut self, m: &Msg) {
        match (self.items.front().map(|(o, _)| *o), m.tag) {
            (_, 'N' | 'A' | 'S') | (None, _) => {}
            (Some(_), 'G') => self.copy_began(),
            (Some(Owes::Completion), 'E') => {
                self.copy_in = false;
                self.pop();
                while let Some((i, _)) = self.items.front() {
                    if *i == (Owes::Ready { sync: true }) {
                        return;
                    }
                    self.pop();
                }
                self.skipping = true;
            }
            (Some(Owes::Completion), '1' | '2' | '3' | 'n' | 'T' | 'C' | 'I' | 's') => self.pop(),
            (Some(Owes::Ready { .. }), 'E') => self.copy_in = false,
            (Some(Owes::Ready { .. }), 'Z') => self.pop(),
            _ => {}
        }
    }

    /// CopyInResponse: the Syncs sent after the COPY and before its
    /// CopyDone or CopyFail are read as its data, and never answered.
    fn copy_began(&mut self) {
        let Some(&(_, ends)) = self.items.front() else {
            return;
        };
        let ignored = |(o, e): &(Owes, u64)| *e == ends && *o == Owes::Ready { sync: true };
        while let Some(at) = (1..self.items.len()).find(|&i| ignored(&self.items[i])) {
            self.items.remove(at);
            if at < self.due {
                self.due -= 1;
            }
        }
        self.copy_in = self.copy_ends == ends;
    }

    /// Everything a client waiting now would wait for has come (or the
    /// server waits for COPY data).
    fn settled(&self) -> bool {
        self.due == 0 || self.copy_in
    }
}

impl fmt::Display for Fe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fe::Query(sql) => write!(f, "Q({sql})"),
            Fe::Parse { name, sql } => write!(f, "P({name:?}, {sql})"),
            Fe::Bind {
                portal,
                stmt,
                params,
            } => write!(f, "B({portal:?}, {stmt:?}, {params:?})"),
            Fe::DescribePortal(p) => write!(f, "D(P {p:?})"),
            Fe::DescribeStatement(s) => write!(f, "D(S {s:?})"),
            Fe::Execute { portal, max_rows } => write!(f, "E({portal:?}, {max_rows})"),
            Fe::ClosePortal(p) => write!(f, "C(P {p:?})"),
            Fe::CloseStatement(s) => write!(f, "C(S {s:?})"),
            Fe::Flush => f.write_str("H"),
            Fe::Sync => f.write_str("S"),
            Fe::CopyData(d) => write!(f, "d({:?})", String::from_utf8_lossy(d)),
            Fe::CopyDone => f.write_str("c"),
            Fe::CopyFail(why) => write!(f, "f({why:?})"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Send(Fe),
    /// The messages queued so far go out as one write.
    Write,
    /// Write what is queued, then wait for the answers.
    Wait,
}

/// Client messages, write boundaries and waits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    pub steps: Vec<Step>,
}

impl Script {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(mut self, fe: Fe) -> Self {
        self.steps.push(Step::Send(fe));
        self
    }

    pub fn query(self, sql: &str) -> Self {
        self.push(Fe::Query(sql.into()))
    }

    pub fn parse(self, name: &str, sql: &str) -> Self {
        self.push(Fe::Parse {
            name: name.into(),
            sql: sql.into(),
        })
    }

    pub fn bind(self, portal: &str, stmt: &str, params: &[Option<&str>]) -> Self {
        self.push(Fe::Bind {
            portal: portal.into(),
            stmt: stmt.into(),
            params: params.iter().map(|p| p.map(str::to_owned)).collect(),
        })
    }

    pub fn describe_portal(self, portal: &str) -> Self {
        self.push(Fe::DescribePortal(portal.into()))
    }

    pub fn describe_statement(self, stmt: &str) -> Self {
        self.push(Fe::DescribeStatement(stmt.into()))
    }

    pub fn execute(self, portal: &str, max_rows: i32) -> Self {
        self.push(Fe::Execute {
            portal: portal.into(),
            max_rows,
        })
    }

    pub fn close_statement(self, stmt: &str) -> Self {
        self.push(Fe::CloseStatement(stmt.into()))
    }

    pub fn flush(self) -> Self {
        self.push(Fe::Flush)
    }

    pub fn sync(self) -> Self {
        self.push(Fe::Sync)
    }

    pub fn copy_data(self, data: impl AsRef<[u8]>) -> Self {
        self.push(Fe::CopyData(data.as_ref().to_vec()))
    }

    pub fn copy_done(self) -> Self {
        self.push(Fe::CopyDone)
    }

    pub fn copy_fail(self, why: &str) -> Self {
        self.push(Fe::CopyFail(why.into()))
    }

    /// `Parse Bind Execute` of `sql` on the unnamed statement and portal.
    pub fn pbe(self, sql: &str) -> Self {
        self.parse("", sql).bind("", "", &[]).execute("", 0)
    }

    /// Each of `sqls` as a simple Query, waiting for its answer.
    pub fn queries(self, sqls: &[&str]) -> Self {
        sqls.iter().fold(self, |s, q| s.query(q).wait())
    }

    /// `Parse Bind Describe Execute` of `sql`, as psycopg sends a read.
    pub fn read(self, sql: &str) -> Self {
        self.parse("", sql)
            .bind("", "", &[])
            .describe_portal("")
            .execute("", 0)
    }

    pub fn write(mut self) -> Self {
        self.steps.push(Step::Write);
        self
    }

    pub fn wait(mut self) -> Self {
        self.steps.push(Step::Wait);
        self
    }
}

impl fmt::Display for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for s in &self.steps {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            match s {
                Step::Send(fe) => write!(f, "{fe}")?,
                Step::Write => f.write_str("/")?,
                Step::Wait => f.write_str("|")?,
            }
        }
        Ok(())
    }
}

/// A run's answers, cut at the script's waits (the last piece is what came
/// after the last wait).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transcript {
    pub pieces: Vec<Vec<Msg>>,
}

impl Transcript {
    pub fn messages(&self) -> impl Iterator<Item = &Msg> {
        self.pieces.iter().flatten()
    }
}

/// A message as a short token: its type, `Z` with the status, `E` with the
/// SQLSTATE.
pub fn token(m: &Msg) -> String {
    match m.tag {
        'Z' => format!("Z{}", m.body.first().map_or('?', |b| char::from(*b))),
        'E' => format!("E{}", m.sqlstate().unwrap_or_default()),
        t => t.to_string(),
    }
}

impl fmt::Display for Transcript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pieces: Vec<String> = self
            .pieces
            .iter()
            .map(|p| p.iter().map(token).collect::<Vec<_>>().join(" "))
            .collect();
        f.write_str(&pieces.join(" | "))
    }
}

/// Where a script runs.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub port: u16,
}

impl Target {
    pub fn new(name: &str, port: u16) -> Self {
        Self {
            name: name.into(),
            port,
        }
    }
}

/// How long the reference run waits for more after a flushed batch.
const QUIET: Duration = Duration::from_millis(40);
/// How long another target may take to give what the reference gave.
const PATIENCE: Duration = Duration::from_secs(10);

/// A difference between a target's transcript and the reference's.
#[derive(Debug)]
pub struct Mismatch {
    pub target: String,
    pub script: String,
    pub reference: String,
    pub got: String,
    pub detail: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} differs from PostgreSQL\n  script:     {}\n  PostgreSQL: {}\n  {}: {}\n  {}",
            self.target, self.script, self.reference, self.target, self.got, self.detail
        )
    }
}

/// What a run needs besides the script: the startup parameters, a query
/// that resets the database before it, and one whose answer (the tables'
/// contents) must match after it.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    pub params: Vec<(String, String)>,
    pub reset: String,
    pub check: String,
}

/// Runs `script` on every target, the first being the reference, and
/// returns the reference's transcript, or the first difference.
pub async fn compare(
    targets: &[Target],
    setup: &Setup,
    script: &Script,
) -> Result<Transcript, Box<Mismatch>> {
    let (reference, rest) = targets.split_first().expect("a reference target");
    let (want, want_check) = match run(reference, setup, script, None).await {
        Ok(r) => r,
        Err(e) => panic!("the reference run failed: {}\n  script: {script}", e.detail),
    };
    for t in rest {
        let mismatch = |got: &Transcript, detail: String| {
            Box::new(Mismatch {
                target: t.name.clone(),
                script: script.to_string(),
                reference: want.to_string(),
                got: got.to_string(),
                detail,
            })
        };
        let (got, got_check) = run(t, setup, script, Some(&want))
            .await
            .map_err(|e| mismatch(&e.partial, e.detail))?;
        if let Some(detail) = first_difference(&want, &got) {
            return Err(mismatch(&got, detail));
        }
        if want_check != got_check {
            return Err(mismatch(
                &got,
                format!(
                    "tables differ afterwards:\n    PostgreSQL: {}\n    {}: {}",
                    show(&want_check),
                    t.name,
                    show(&got_check)
                ),
            ));
        }
    }
    Ok(want)
}

fn show(msgs: &[Msg]) -> String {
    msgs.iter()
        .filter(|m| m.tag == 'D')
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn first_difference(want: &Transcript, got: &Transcript) -> Option<String> {
    for (i, (w, g)) in want.pieces.iter().zip(&got.pieces).enumerate() {
        for (j, (a, b)) in w.iter().zip(g).enumerate() {
            if a != b {
                return Some(format!(
                    "at wait {i}, message {j}:\n    PostgreSQL: {a}\n    got:        {b}"
                ));
            }
        }
        if w.len() != g.len() {
            return Some(format!(
                "at wait {i}: PostgreSQL gave {} messages, got {}",
                w.len(),
                g.len()
            ));
        }
    }
    (want.pieces.len() != got.pieces.len()).then(|| "a different number of waits".into())
}

struct RunError {
    partial: Transcript,
    detail: String,
}

/// Runs `script` on `target`. Without `want`, reads as the reference does;
/// with it, reads as many messages at each wait as the reference got.
async fn run(
    target: &Target,
    setup: &Setup,
    script: &Script,
    want: Option<&Transcript>,
) -> Result<(Transcript, Vec<Msg>), RunError> {
    let params: Vec<(&str, &str)> = setup
        .params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut raw = Raw::connect(target.port, &params).await;
    let mut t = Transcript::default();
    if !setup.reset.is_empty() {
        raw.query(&setup.reset);
        let answer = ready(&mut raw, "the reset", &t).await?;
        assert!(
            answer.iter().all(|m| m.tag != 'E'),
            "reset failed on {}: {answer:?}",
            target.name
        );
    }
    let mut owed = Owed::default();
    let mut piece = 0usize;
    // The answers after the last wait are read as at one more wait.
    let last_wait = (script.steps.last() != Some(&Step::Wait)).then_some(&Step::Wait);
    let steps = script.steps.iter().chain(last_wait);
    for step in steps {
        match step {
            Step::Send(fe) => {
                queue(&mut raw, fe);
                owed.sent(fe);
            }
            Step::Write => raw.send().await,
            Step::Wait => {
                raw.send().await;
                let got = match want {
                    None => Ok(read_reference(&mut raw, &mut owed).await),
                    Some(w) => {
                        let n = w.pieces.get(piece).map_or(0, Vec::len);
                        read_exactly(&mut raw, n, &mut owed).await
                    }
                };
                match got {
                    Ok(msgs) => t.pieces.push(msgs),
                    Err((msgs, detail)) => {
                        t.pieces.push(msgs);
                        return Err(RunError { partial: t, detail });
                    }
                }
                piece += 1;
            }
        }
    }
    // Nothing more may come after the reference's last message.
    let extra = raw.drain_for(QUIET).await;
    if want.is_none() {
        if let Some(last) = t.pieces.last_mut() {
            last.extend(extra);
        }
    } else if !extra.is_empty() {
        let detail = format!(
            "sent more than PostgreSQL at the end: {}",
            extra.iter().map(token).collect::<Vec<_>>().join(" ")
        );
        if let Some(last) = t.pieces.last_mut() {
            last.extend(extra);
        }
        return Err(RunError { partial: t, detail });
    }
    // End whatever transaction the script left open, keeping its writes,
    // and read the tables.
    raw.query("commit");
    ready(&mut raw, "a COMMIT after the script", &t).await?;
    let mut check = Vec::new();
    if !setup.check.is_empty() {
        raw.query(&setup.check);
        check = ready(&mut raw, "the check", &t).await?;
    }
    raw.terminate().await;
    Ok((t, check))
}

/// Sends what is queued and reads its answer through ReadyForQuery, or
/// fails after `PATIENCE`.
async fn ready(raw: &mut Raw, what: &str, t: &Transcript) -> Result<Vec<Msg>, RunError> {
    raw.send().await;
    tokio::time::timeout(PATIENCE, raw.until_ready())
        .await
        .map_err(|_| RunError {
            partial: t.clone(),
            detail: format!("no answer to {what} within {PATIENCE:?}"),
        })
}

/// Reads until everything a waiting client waits for has come.
async fn read_reference(raw: &mut Raw, owed: &mut Owed) -> Vec<Msg> {
    let mut msgs = Vec::new();
    while !owed.settled() {
        let m = raw.next().await;
        owed.received(&m);
        msgs.push(m);
    }
    msgs
}

/// Reads `n` messages, or fails after `PATIENCE` without the next one.
async fn read_exactly(
    raw: &mut Raw,
    n: usize,
    owed: &mut Owed,
) -> Result<Vec<Msg>, (Vec<Msg>, String)> {
    let mut msgs = Vec::new();
    while msgs.len() < n {
        match tokio::time::timeout(PATIENCE, raw.next()).await {
            Ok(m) => {
                owed.received(&m);
                msgs.push(m);
            }
            Err(_) => {
                let detail = format!(
                    "waited {PATIENCE:?} for message {} of {n} at this wait: withheld",
                    msgs.len()
                );
                return Err((msgs, detail));
            }
        }
    }
    Ok(msgs)
}

fn queue(raw: &mut Raw, fe: &Fe) {
    match fe {
        Fe::Query(sql) => raw.query(sql),
        Fe::Parse { name, sql } => raw.parse(name, sql),
        Fe::Bind {
            portal,
            stmt,
            params,
        } => {
            let params: Vec<Option<&str>> = params.iter().map(Option::as_deref).collect();
            raw.bind(portal, stmt, &params)
        }
        Fe::DescribePortal(p) => raw.describe_portal(p),
        Fe::DescribeStatement(s) => raw.describe_statement(s),
        Fe::Execute { portal, max_rows } => raw.execute(portal, *max_rows),
        Fe::ClosePortal(p) => raw.close('P', p),
        Fe::CloseStatement(s) => raw.close('S', s),
        Fe::Flush => raw.flush(),
        Fe::Sync => raw.sync(),
        Fe::CopyData(d) => raw.copy_data(d),
        Fe::CopyDone => raw.copy_done(),
        Fe::CopyFail(why) => raw.copy_fail(why),
    };
}

/// What every run of a [`Sides`] starts from: rows 1 to 5 of `t`.
pub const RESET: &str = "truncate t; insert into t select g, g * 10 from generate_series(1, 5) g";
/// What every run of a [`Sides`] must leave alike: the rows of `t`.
pub const CHECK: &str = "select id, v from t order by id";

/// A proxy of a [`Sides`] besides the one with the defaults: its target's
/// name, and what it sets.
pub type OtherProxy = (&'static str, fn(&mut onetrip::Config));

/// A table `t(id int primary key, v int)` in a database of the test's own
/// on the binary's shared server, and onetrip in front of it with its
/// defaults and with other settings: the targets a script runs on side by
/// side, PostgreSQL first.
pub struct Sides {
    pub env: crate::Env,
    /// The other proxies, by target name.
    others: Vec<(&'static str, onetrip::Proxy)>,
}

impl Sides {
    /// `others` names each further proxy and makes its settings.
    pub async fn start(others: &[OtherProxy]) -> Self {
        let env = crate::Env::shared(|_| {}).await;
        env.psql_ok(false, &["-c", "create table t(id int primary key, v int)"]);
        let mut proxies = Vec::new();
        for (name, tweak) in others {
            proxies.push((*name, env.start_proxy(tweak).await));
        }
        Self {
            env,
            others: proxies,
        }
    }

    /// The proxy `name` of those `start` was given.
    pub fn proxy(&self, name: &str) -> &onetrip::Proxy {
        let found = self.others.iter().find(|(n, _)| *n == name);
        &found.unwrap_or_else(|| panic!("no proxy {name}")).1
    }

    /// PostgreSQL, onetrip with its defaults, then the others in order.
    pub fn targets(&self) -> Vec<Target> {
        let mut targets = vec![
            Target::new("PostgreSQL", self.env.pg.port()),
            Target::new("onetrip", self.env.proxy_port()),
        ];
        for (name, proxy) in &self.others {
            targets.push(Target::new(name, proxy.local_addr().port()));
        }
        targets
    }

    /// The test's database, [`RESET`] before each run and [`CHECK`] after.
    pub fn setup(&self) -> Setup {
        Setup {
            params: vec![("database".into(), self.env.db.clone())],
            reset: RESET.into(),
            check: CHECK.into(),
        }
    }

    /// Requires `script` to give the same transcript everywhere, and
    /// returns it as text.
    pub async fn same(&self, script: Script) -> String {
        match compare(&self.targets(), &self.setup(), &script).await {
            Ok(t) => t.to_string(),
            Err(m) => panic!("{m}"),
        }
    }
}
