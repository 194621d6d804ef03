//! Transaction pooling, adversarially: nothing one client leaves on its
//! server connection reaches the next client. For each kind of session
//! state, and each way to make it, client A makes it through the proxy and
//! leaves; client B then connects through the proxy and looks, and must see
//! exactly what a fresh direct connection to PostgreSQL sees for the same
//! look (the same rows as text, or the same SQLSTATE). On `pool_size = 1`,
//! B gets A's backend unless the proxy closed it; the report says which,
//! since a case where B got another backend proves little.
//!
//! Not here, as README says ("What is reset"): a view or a trigger that
//! changes session state (onetrip reads statements, not the catalog, and
//! trusts views and triggers to leave none).
//!
//! Each case has a login role of its own, so a pool of its own: what one
//! case leaves can't change another's. Its backends are ended after it.

use std::{collections::BTreeSet, fmt, time::Duration};

use onetrip::config::{Config, PoolMode};
use onetrip_tests::{Env, PgOptions, admin_at, connect, raw};
use tokio::{io::AsyncWriteExt, net::TcpStream};

/// How long any one answer may take: a client in line waits for
/// `query_wait_timeout` at most, then is told so.
const WAIT: Duration = Duration::from_secs(15);

/// A kind of session state, and a look that tells whether a connection
/// holds it.
struct Case {
    name: &'static str,
    /// Run once, directly, before any case (the objects `setup` uses).
    prepare: &'static [&'static str],
    /// What A runs, each a `Step`.
    setup: &'static [&'static str],
    /// What B runs, a `Step`.
    look: &'static str,
    /// Leaves nothing even on A's own connection (`SET LOCAL`).
    inert: bool,
}

const fn case(name: &'static str, setup: &'static [&'static str], look: &'static str) -> Case {
    Case {
        name,
        prepare: &[],
        setup,
        look,
        inert: false,
    }
}

impl Case {
    const fn prepared(self, prepare: &'static [&'static str]) -> Case {
        Case { prepare, ..self }
    }

    const fn inert(self) -> Case {
        Case {
            inert: true,
            ..self
        }
    }
}

const WORK_MEM: &str = "SHOW work_mem";
const HAS_T1: &str = "SELECT to_regclass('pg_temp.iso_t1') IS NOT NULL";
const LOCKS: &str = "SELECT count(*) FROM pg_locks \
                     WHERE locktype = 'advisory' AND pid = pg_backend_pid()";

/// Every route to every kind of state we know of. Steps are simple Queries
/// unless they say otherwise (`Step`).
fn cases() -> Vec<Case> {
    vec![
        // Settings.
        case("SET, simple Query", &["SET work_mem = '1101kB'"], WORK_MEM),
        case(
            "SET, extended unnamed",
            &["extended: SET work_mem = '1102kB'"],
            WORK_MEM,
        ),
        case(
            "SET, extended named",
            &["extended iso_set: SET work_mem = '1103kB'"],
            WORK_MEM,
        ),
        case(
            "SET in BEGIN..COMMIT",
            &["BEGIN", "SET work_mem = '1104kB'", "COMMIT"],
            WORK_MEM,
        ),
        case(
            "BEGIN; SET; COMMIT in one Query",
            &["BEGIN; SET work_mem = '1105kB'; COMMIT"],
            WORK_MEM,
        ),
        case(
            "SET behind a SELECT in one Query",
            &["SELECT 1; SET work_mem = '1106kB'"],
            WORK_MEM,
        ),
        case(
            "set_config(.., false)",
            &["SELECT set_config('work_mem', '1107kB', false)"],
            WORK_MEM,
        ),
        case(
            "set_config(.., false), extended",
            &["extended: SELECT set_config('work_mem', '1108kB', false)"],
            WORK_MEM,
        ),
        case(
            "set_config in a SQL function",
            &["SELECT iso_sql_set()"],
            WORK_MEM,
        )
        .prepared(&["CREATE FUNCTION iso_sql_set() RETURNS text LANGUAGE sql \
                     AS $$SELECT set_config('work_mem', '1109kB', false)$$"]),
        case(
            "set_config in a plpgsql function",
            &["SELECT iso_plpgsql_set_config()"],
            WORK_MEM,
        )
        .prepared(&[
            "CREATE FUNCTION iso_plpgsql_set_config() RETURNS void LANGUAGE plpgsql \
             AS $$BEGIN PERFORM set_config('work_mem', '1110kB', false); END$$",
        ]),
        case(
            "SET in a plpgsql function",
            &["SELECT iso_plpgsql_set()"],
            WORK_MEM,
        )
        .prepared(&[
            "CREATE FUNCTION iso_plpgsql_set() RETURNS void LANGUAGE plpgsql \
                     AS $$BEGIN SET work_mem = '1111kB'; END$$",
        ]),
        case(
            "set_config in a procedure (CALL)",
            &["CALL iso_proc_set()"],
            WORK_MEM,
        )
        .prepared(&["CREATE PROCEDURE iso_proc_set() LANGUAGE plpgsql \
                     AS $$BEGIN PERFORM set_config('work_mem', '1112kB', false); END$$"]),
        case(
            "set_config in a DO block",
            &["DO $$BEGIN PERFORM set_config('work_mem', '1113kB', false); END$$"],
            WORK_MEM,
        ),
        case(
            "UPDATE pg_settings",
            &["UPDATE pg_settings SET setting = '1116' WHERE name = 'work_mem'"],
            WORK_MEM,
        ),
        case("SET ROLE", &["SET ROLE iso_role"], "SELECT current_user")
            .prepared(&["CREATE ROLE iso_role NOLOGIN"]),
        case(
            "SET SESSION AUTHORIZATION",
            &["SET SESSION AUTHORIZATION iso_authz"],
            "SELECT session_user",
        )
        .prepared(&["CREATE ROLE iso_authz NOLOGIN"]),
        case(
            "SET TIME ZONE",
            &["SET TIME ZONE 'Pacific/Chatham'"],
            "SHOW TimeZone",
        ),
        case(
            "SET SESSION CHARACTERISTICS",
            &["SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE"],
            "SHOW default_transaction_isolation",
        ),
        case(
            "default_transaction_read_only",
            &["SET default_transaction_read_only = on"],
            "SHOW default_transaction_read_only",
        ),
        case(
            "custom GUC",
            &["SET myapp.user_id = '42'"],
            "SELECT current_setting('myapp.user_id', true)",
        ),
        case(
            "statement_timeout",
            &["SET statement_timeout = '4321s'"],
            "SHOW statement_timeout",
        ),
        case(
            "search_path",
            &["SET search_path = pg_catalog, iso_nowhere"],
            "SHOW search_path",
        ),
        case(
            "application_name",
            &["SET application_name = 'iso-a'"],
            "SHOW application_name",
        ),
        case("SET NAMES", &["SET NAMES 'LATIN1'"], "SHOW client_encoding"),
        case(
            "SET LOCAL",
            &["BEGIN", "SET LOCAL work_mem = '1127kB'", "COMMIT"],
            WORK_MEM,
        )
        .inert(),
        // Temporary objects.
        case(
            "CREATE TEMP TABLE",
            &["CREATE TEMP TABLE iso_t1 (x int)"],
            HAS_T1,
        ),
        case(
            "CREATE TABLE pg_temp.t",
            &["CREATE TABLE pg_temp.iso_t1 (x int)"],
            HAS_T1,
        ),
        case(
            "SELECT INTO TEMP",
            &["SELECT 1 AS x INTO TEMP iso_t1"],
            HAS_T1,
        ),
        case(
            "SELECT INTO pg_temp.t",
            &["SELECT 1 AS x INTO pg_temp.iso_t1"],
            HAS_T1,
        ),
        case(
            "CREATE TEMP TABLE AS",
            &["CREATE TEMP TABLE iso_t1 AS SELECT 1 AS x"],
            HAS_T1,
        ),
        case(
            "CREATE TABLE pg_temp.t AS",
            &["CREATE TABLE pg_temp.iso_t1 AS SELECT 1 AS x"],
            HAS_T1,
        ),
        case(
            "CREATE TEMP SEQUENCE",
            &["CREATE TEMP SEQUENCE iso_t1"],
            HAS_T1,
        ),
        case(
            "CREATE SEQUENCE pg_temp.s",
            &["CREATE SEQUENCE pg_temp.iso_t1"],
            HAS_T1,
        ),
        case(
            "CREATE FUNCTION pg_temp.f()",
            &["CREATE FUNCTION pg_temp.iso_f() RETURNS int LANGUAGE sql AS 'SELECT 9'"],
            "SELECT to_regproc('pg_temp.iso_f') IS NOT NULL",
        ),
        case(
            "CREATE TEMP VIEW",
            &["CREATE TEMP VIEW iso_t1 AS SELECT 1 AS x"],
            HAS_T1,
        ),
        case(
            "temp table by EXECUTE in a plpgsql function",
            &["SELECT iso_make_temp()"],
            HAS_T1,
        )
        .prepared(&[
            "CREATE FUNCTION iso_make_temp() RETURNS void LANGUAGE plpgsql \
             AS $$BEGIN EXECUTE 'CREATE TEMP TABLE iso_t1 (x int)'; END$$",
        ]),
        case(
            "temp table by EXECUTE in a DO block",
            &["DO $$BEGIN EXECUTE 'CREATE TEMP TABLE iso_t1 (x int)'; END$$"],
            HAS_T1,
        ),
        case(
            "CREATE TEMP TABLE, extended",
            &["extended: CREATE TEMP TABLE iso_t1 (x int)"],
            HAS_T1,
        ),
        case(
            "CREATE TEMP TABLE in BEGIN..COMMIT",
            &["BEGIN", "CREATE TEMP TABLE iso_t1 (x int)", "COMMIT"],
            HAS_T1,
        ),
        // Prepared statements.
        case(
            "SQL PREPARE",
            &["PREPARE iso_p AS SELECT 1"],
            "EXECUTE iso_p",
        ),
        case(
            "protocol named statement",
            &["parse iso_stmt: SELECT 1"],
            "bind iso_stmt",
        ),
        case("protocol unnamed statement", &["parse : SELECT 1"], "bind"),
        // Cursors.
        case(
            "DECLARE WITH HOLD",
            &["DECLARE iso_c CURSOR WITH HOLD FOR SELECT 1"],
            "FETCH iso_c",
        ),
        case(
            "cursor in an abandoned transaction",
            &["BEGIN", "DECLARE iso_c CURSOR FOR SELECT 1"],
            "FETCH iso_c",
        ),
        // Notifications.
        case(
            "LISTEN",
            &["LISTEN iso_ch"],
            "SELECT count(*) FROM pg_listening_channels()",
        ),
        case(
            "LISTEN, extended",
            &["extended: LISTEN iso_ch"],
            "SELECT count(*) FROM pg_listening_channels()",
        ),
        // Session advisory locks.
        case(
            "pg_advisory_lock",
            &["SELECT pg_advisory_lock(1001)"],
            LOCKS,
        ),
        case(
            "pg_advisory_lock_shared",
            &["SELECT pg_advisory_lock_shared(1002)"],
            LOCKS,
        ),
        case(
            "pg_try_advisory_lock",
            &["SELECT pg_try_advisory_lock(1003)"],
            LOCKS,
        ),
        case(
            "advisory lock in a SQL function",
            &["SELECT iso_lock()"],
            LOCKS,
        )
        .prepared(&["CREATE FUNCTION iso_lock() RETURNS void LANGUAGE sql \
                     AS 'SELECT pg_advisory_lock(1004)'"]),
        case(
            "pg_advisory_lock, extended",
            &["extended: SELECT pg_advisory_lock(1005)"],
            LOCKS,
        ),
        // Sequences' session values.
        case(
            "nextval, then lastval",
            &["SELECT nextval('iso_seq1')"],
            "SELECT lastval()",
        )
        .prepared(&["CREATE SEQUENCE iso_seq1"]),
        case(
            "nextval, then currval",
            &["SELECT nextval('iso_seq2')"],
            "SELECT currval('iso_seq2')",
        )
        .prepared(&["CREATE SEQUENCE iso_seq2"]),
        case(
            "setval, then currval",
            &["SELECT setval('iso_seq3', 42)"],
            "SELECT currval('iso_seq3')",
        )
        .prepared(&["CREATE SEQUENCE iso_seq3"]),
        case(
            "INSERT into a serial column, then lastval",
            &["INSERT INTO iso_serial (x) VALUES (1)"],
            "SELECT lastval()",
        )
        .prepared(&["CREATE TABLE iso_serial (id serial, x int)"]),
        // Libraries.
        case(
            "LOAD 'auto_explain'",
            &["LOAD 'auto_explain'"],
            "SELECT current_setting('auto_explain.log_min_duration', true)",
        ),
        // The random generator's state: after setseed(0.5), the next
        // random() is always the same number, a fresh session's never is.
        case(
            "setseed",
            &["SELECT setseed(0.5)"],
            "SELECT random() = r FROM iso_seeded",
        )
        .prepared(&[
            "SELECT setseed(0.5)",
            "CREATE TABLE iso_seeded AS SELECT random() AS r",
        ]),
    ]
}

/// How A leaves, and under which config.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Default config; A says goodbye (Terminate).
    Defaults,
    /// `[transactions] lazy_reads = true`; A says goodbye.
    LazyReads,
    /// Default config; A runs its setup after a BEGIN and drops its socket
    /// inside the transaction.
    Abandoned,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Mode::Defaults => "defaults",
            Mode::LazyReads => "lazy_reads",
            Mode::Abandoned => "abandoned",
        })
    }
}

fn pooled(lazy_reads: bool) -> impl FnOnce(&mut Config) {
    move |c| {
        c.pool.mode = PoolMode::Transaction;
        c.pool.pool_size = 1;
        c.pool.query_wait_timeout = Duration::from_secs(5);
        c.transactions.lazy_reads = lazy_reads;
    }
}

/// What a client saw for a step.
#[derive(Clone, Debug)]
enum Seen {
    Rows(Vec<Vec<Option<String>>>),
    /// SQLSTATE and message; only the SQLSTATE counts.
    Error(String, String),
    /// No answer: the connection closed or nothing came in time.
    Broken(String),
}

impl PartialEq for Seen {
    fn eq(&self, other: &Seen) -> bool {
        match (self, other) {
            (Seen::Rows(a), Seen::Rows(b)) => a == b,
            (Seen::Error(a, _), Seen::Error(b, _)) => a == b,
            (Seen::Broken(a), Seen::Broken(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Rows(rows) => {
                let rows: Vec<String> = rows
                    .iter()
                    .map(|r| {
                        let vals: Vec<&str> =
                            r.iter().map(|v| v.as_deref().unwrap_or("NULL")).collect();
                        format!("({})", vals.join(", "))
                    })
                    .collect();
                write!(f, "rows [{}]", rows.join(" "))
            }
            Seen::Error(code, msg) => write!(f, "ERROR {code} ({msg})"),
            Seen::Broken(why) => write!(f, "no answer: {why}"),
        }
    }
}

/// The messages a step sends. A step is a simple Query unless it reads
/// `extended: SQL` or `extended NAME: SQL` (Parse, Bind, Execute, Sync of
/// the unnamed statement or of NAME, left in place), `parse NAME: SQL`
/// (Parse and Sync; NAME may be empty) or `bind NAME` / `bind` (Bind,
/// Execute and Sync of a statement this step does not parse).
fn wire(step: &str) -> Vec<u8> {
    let named = |rest: &str| -> (String, String) {
        let (name, sql) = rest.split_once(": ").expect("NAME: SQL");
        (name.trim().to_owned(), sql.to_owned())
    };
    if let Some(rest) = step.strip_prefix("extended") {
        let (name, sql) = named(rest);
        let mut out = raw::parse(&name, &sql);
        out.extend(raw::bind_execute_sync(&name));
        out
    } else if let Some(rest) = step.strip_prefix("parse ") {
        let (name, sql) = named(rest);
        let mut out = raw::parse(&name, &sql);
        out.extend(raw::sync());
        out
    } else if let Some(name) = step.strip_prefix("bind") {
        raw::bind_execute_sync(name.trim())
    } else {
        raw::query(step)
    }
}

/// A client speaking the protocol by hand, so that A and B send the same
/// startup packet (one pool) and each step goes out exactly as written.
struct Client(TcpStream);

impl Client {
    async fn login(port: u16, user: &str) -> Result<Client, String> {
        raw::login(port, user, "postgres").await.map(Client)
    }

    async fn run(&mut self, step: &str) -> Seen {
        if let Err(e) = self.0.write_all(&wire(step)).await {
            return Seen::Broken(format!("write: {e}"));
        }
        let (msgs, end) = raw::read_answer(&mut self.0, WAIT).await;
        if let Some((_, body)) = msgs.iter().find(|(t, _)| *t == b'E') {
            let field = |c| raw::field(body, c).unwrap_or_default();
            return Seen::Error(field(b'C'), field(b'M'));
        }
        if let Some(end) = end {
            return Seen::Broken(end.to_owned());
        }
        let rows = msgs
            .iter()
            .filter(|(t, _)| *t == b'D')
            .map(|(_, body)| raw::row_values(body))
            .collect();
        Seen::Rows(rows)
    }

    /// The backend the client's statements run on now, by a named
    /// statement of its own, which leaves the unnamed one as it was.
    async fn backend_pid(&mut self) -> Option<String> {
        match self.run("extended iso_pid: SELECT pg_backend_pid()").await {
            Seen::Rows(rows) => rows.first()?.first()?.clone(),
            _ => None,
        }
    }

    /// Says goodbye and closes.
    async fn leave(mut self) {
        let _ = self.0.write_all(&raw::terminate()).await;
    }
}

/// A fresh direct connection's answer to `look`.
async fn fresh_look(port: u16, user: &str, look: &str) -> Seen {
    match Client::login(port, user).await {
        Ok(mut c) => {
            let seen = c.run(look).await;
            c.leave().await;
            seen
        }
        Err(e) => Seen::Broken(format!("direct login: {e}")),
    }
}

/// Ends every backend of `user` and waits until they are gone; how many
/// there were.
async fn end_backends(control: &tokio_postgres::Client, user: &str) -> Result<i64, String> {
    let ended: i64 = control
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1",
            &[&user],
        )
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    for _ in 0..1000 {
        let left: i64 = control
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = $1",
                &[&user],
            )
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        if left == 0 {
            return Ok(ended);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("backends of {user} still there after 10 s"))
}

/// One case in one mode: what the report says of it.
struct Outcome {
    case: &'static str,
    mode: Mode,
    a_pid: Option<String>,
    b_pid: Option<String>,
    /// The look, on a direct connection that ran the setup (in a
    /// transaction rolled back, for `Abandoned`), differs from a fresh one.
    state_kept: bool,
    problems: Vec<String>,
}

async fn run_case(
    env: &Env,
    control: &tokio_postgres::Client,
    port: u16,
    mode: Mode,
    user: &str,
    case: &Case,
) -> Outcome {
    let direct = env.pg.port();
    let mut problems = Vec::new();
    let fresh = fresh_look(direct, user, case.look).await;

    // A makes the state through the proxy, and leaves.
    let mut a_pid = None;
    match Client::login(port, user).await {
        Err(e) => problems.push(format!("A's login: {e}")),
        Ok(mut a) => {
            let begin: &[&str] = match mode {
                Mode::Abandoned => &["BEGIN"],
                _ => &[],
            };
            for step in begin.iter().chain(case.setup) {
                if let seen @ (Seen::Error(..) | Seen::Broken(_)) = a.run(step).await {
                    problems.push(format!("A's {step:?}: {seen}"));
                }
            }
            a_pid = a.backend_pid().await;
            match mode {
                Mode::Abandoned => drop(a),
                _ => a.leave().await,
            }
        }
    }

    // B comes next, through the proxy, and looks.
    let (b_seen, b_pid) = match Client::login(port, user).await {
        Err(e) => (Seen::Broken(format!("B's login: {e}")), None),
        Ok(mut b) => {
            let seen = b.run(case.look).await;
            let pid = b.backend_pid().await;
            b.leave().await;
            (seen, pid)
        }
    };
    let again = fresh_look(direct, user, case.look).await;
    if again != fresh {
        problems.push(format!(
            "the look is not deterministic: fresh connections saw {fresh}, then {again}"
        ));
    } else if b_seen != fresh {
        problems.push(format!("B saw {b_seen}; a fresh connection sees {fresh}"));
    }
    if let Err(e) = end_backends(control, user).await {
        problems.push(e);
    }

    // The same setup on a direct connection, and the look on it: the look
    // must see the state there, or the case tests nothing.
    let mut kept = fresh.clone();
    match Client::login(direct, user).await {
        Err(e) => problems.push(format!("direct login: {e}")),
        Ok(mut c) => {
            let (begin, end): (&[&str], &[&str]) = match mode {
                Mode::Abandoned => (&["BEGIN"], &["ROLLBACK"]),
                _ => (&[], &[]),
            };
            for step in begin.iter().chain(case.setup).chain(end) {
                if let seen @ (Seen::Error(..) | Seen::Broken(_)) = c.run(step).await {
                    problems.push(format!("direct {step:?}: {seen} (a bug in the case)"));
                }
            }
            kept = c.run(case.look).await;
            c.leave().await;
        }
    }
    if let Err(e) = end_backends(control, user).await {
        problems.push(e);
    }
    let state_kept = kept != fresh;
    if mode != Mode::Abandoned && state_kept == case.inert {
        problems.push(format!(
            "a bug in the case: on the connection that ran the setup the look sees {kept}, \
             on a fresh one {fresh}"
        ));
    }
    Outcome {
        case: case.name,
        mode,
        a_pid,
        b_pid,
        state_kept,
        problems,
    }
}

/// Rows of a SHOW of the admin console of the proxy on `port`, but for the
/// console's own sessions.
async fn clients_left(port: u16) -> Vec<Vec<Option<String>>> {
    let mut rows = Vec::new();
    for _ in 0..100 {
        rows = admin_at(port, "SHOW CLIENTS").await;
        rows.retain(|r| r[1].as_deref() != Some("onetrip"));
        if rows.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_crosses_between_clients() {
    let env = Env::start_with(PgOptions::default(), pooled(false)).await;
    let lazy = env.start_proxy(pooled(true)).await;
    let abandoned = env.start_proxy(pooled(false)).await;
    let cases = cases();
    let control = connect(&env.direct_dsn()).await;
    for (i, case) in cases.iter().enumerate() {
        let sql = format!("CREATE ROLE {} LOGIN SUPERUSER", user(i));
        control.batch_execute(&sql).await.unwrap();
        for sql in case.prepare {
            let done = control.batch_execute(sql).await;
            done.unwrap_or_else(|e| panic!("prepare {sql:?}: {e}"));
        }
    }
    let modes = [
        (Mode::Defaults, env.proxy_port()),
        (Mode::LazyReads, lazy.local_addr().port()),
        (Mode::Abandoned, abandoned.local_addr().port()),
    ];
    let mut outcomes = Vec::new();
    let mut summary = Vec::new();
    let mut failures = Vec::new();
    for (mode, port) in modes {
        let first = outcomes.len();
        for (i, case) in cases.iter().enumerate() {
            outcomes.push(run_case(&env, &control, port, mode, &user(i), case).await);
        }
        let left = clients_left(port).await;
        if !left.is_empty() {
            failures.push(format!("{mode}: clients left in SHOW CLIENTS: {left:?}"));
        }
        let ran = &outcomes[first..];
        let backends: BTreeSet<&String> = ran
            .iter()
            .flat_map(|o| o.a_pid.iter().chain(&o.b_pid))
            .collect();
        let same = ran
            .iter()
            .filter(|o| o.a_pid.is_some() && o.a_pid == o.b_pid)
            .count();
        let pools = admin_at(port, "SHOW POOLS").await;
        let sum = |col: usize| -> u64 {
            let cells = pools.iter().filter_map(|r| r[col].as_deref());
            cells.map(|v| v.parse::<u64>().unwrap_or(0)).sum()
        };
        summary.push(format!(
            "{mode}: {} server connections served A and B in {} cases; B got A's backend in {same}; \
             SHOW POOLS: {} pools, cl_active {} cl_waiting {} sv_active {} sv_idle {} sv_pinned {} \
             (their backends ended by the test after each case)",
            backends.len(),
            ran.len(),
            pools.len(),
            sum(2),
            sum(3),
            sum(4),
            sum(5),
            sum(6),
        ));
    }

    println!(
        "{:<45} {:<10} {:<16} {:<6} result",
        "case", "mode", "B on A's backend", "kept"
    );
    for o in &outcomes {
        let same = match (&o.a_pid, &o.b_pid) {
            (Some(a), Some(b)) if a == b => "same",
            (Some(_), Some(_)) => "new",
            _ => "?",
        };
        let kept = if o.state_kept { "yes" } else { "no" };
        let result = if o.problems.is_empty() {
            "pass".to_owned()
        } else {
            format!("FAIL: {}", o.problems.join("; "))
        };
        println!(
            "{:<45} {:<10} {same:<16} {kept:<6} {result}",
            o.case, o.mode
        );
        if !o.problems.is_empty() {
            failures.push(format!(
                "{} [{}]: {}",
                o.case,
                o.mode,
                o.problems.join("; ")
            ));
        }
    }
    println!("(kept: the look sees the state on a direct connection that ran the setup)");
    for s in &summary {
        println!("{s}");
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn user(i: usize) -> String {
    format!("iso_{i:02}")
}
