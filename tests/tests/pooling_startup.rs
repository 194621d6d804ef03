//! Transaction pooling per (database, user): what a client's startup
//! packet asks for beyond those two (application_name, DateStyle, options'
//! `-c` switches) and the settings it makes later (SET by either protocol,
//! LOAD) follow it to every connection it takes, told and shown as a
//! dedicated connection would; pools are made only for logins the server
//! accepted.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

use onetrip_tests::{Env, PgOptions, connect, raw, simple_rows};

async fn pooled(size: usize) -> Env {
    Env::start_with(PgOptions::default(), move |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = size;
    })
    .await
}

async fn one(c: &tokio_postgres::Client, sql: &str) -> Option<String> {
    let rows = simple_rows(&c.simple_query(sql).await.unwrap());
    rows[0][0].clone()
}

/// The pools' rows of `SHOW POOLS`: (database, user, sv_pinned).
async fn pools(env: &Env) -> Vec<(String, String, String)> {
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=onetrip",
        env.proxy_port()
    );
    let c = connect(&dsn).await;
    let msgs = c.simple_query("SHOW POOLS").await.unwrap();
    let mut out = Vec::new();
    for m in msgs {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            let col = |n: &str| r.get(n).unwrap_or_default().to_owned();
            out.push((col("database"), col("user"), col("sv_pinned")));
        }
    }
    out
}

/// 50 clients, each with an application_name of its own, on a pool of 5:
/// one pool, at most 5 server backends, and each client's name is its own
/// whichever connection it runs on.
#[tokio::test]
async fn fifty_application_names_share_five_connections() {
    let env = pooled(5).await;
    let direct = connect(&env.direct_dsn()).await;
    let most = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let (most, done) = (most.clone(), done.clone());
        tokio::spawn(async move {
            let sql = "SELECT count(*) FROM pg_stat_activity \
                       WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
            while !done.load(Ordering::Relaxed) {
                let n: i64 = direct.query_one(sql, &[]).await.unwrap().get(0);
                most.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut clients = Vec::new();
    for i in 0..50 {
        let dsn = format!("{} application_name=worker-{i}", env.proxy_dsn());
        clients.push(tokio::spawn(async move {
            let c = connect(&dsn).await;
            let me = format!("worker-{i}");
            for _ in 0..5 {
                assert_eq!(one(&c, "SHOW application_name").await, Some(me.clone()));
                let seen: String = c
                    .query_one("SELECT current_setting('application_name')", &[])
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!(seen, me, "by the extended protocol too");
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    watch.await.unwrap();
    assert!(
        most.load(Ordering::Relaxed) <= 5,
        "{most:?} server backends"
    );
    let rows = pools(&env).await;
    assert_eq!(rows.len(), 1, "one pool for one (database, user): {rows:?}");
    assert_eq!(rows[0].2, "0", "nothing pinned");
}

/// A login is told what a dedicated connection tells it: the server's
/// values for its own startup parameters (as the server spells them), and
/// the server's refusal of a value it would refuse at login.
#[tokio::test]
async fn a_login_is_told_its_own_parameters_as_the_server_reports_them() {
    let env = pooled(1).await;
    let params = [
        ("user", "postgres"),
        ("database", "postgres"),
        ("application_name", "reporter"),
        ("DateStyle", "iso, dmy"),
        (
            "options",
            "-c search_path=public,pg_catalog -c statement_timeout=5min",
        ),
    ];
    let (_d, direct) = raw::login_with(env.pg.port(), &params).await;
    // Twice: the first login learns them on a connection, the second is
    // answered from what was learned.
    for _ in 0..2 {
        let (mut s, through) = raw::login_with(env.proxy_port(), &params).await;
        assert_eq!(raw::parameters(&through), raw::parameters(&direct));
        s.write_all_query("SHOW search_path").await;
        let rows = raw::read_to_z(&mut s).await;
        assert!(
            rows.iter()
                .any(|(t, b)| *t == b'D' && b.ends_with(b"public,pg_catalog")),
            "{rows:?}"
        );
    }
    let bad = [
        ("user", "postgres"),
        ("database", "postgres"),
        ("options", "-c statement_timeout=soon"),
    ];
    let (_d, direct) = raw::login_with(env.pg.port(), &bad).await;
    let (_p, through) = raw::login_with(env.proxy_port(), &bad).await;
    assert_eq!(raw::errors(&through), raw::errors(&direct));
    assert_eq!(raw::errors(&direct)[0].0, "FATAL");
}

/// SET by the extended protocol (tokio-postgres' `execute`) follows its
/// client and pins nothing; another client on the same connection sees
/// its own value.
#[tokio::test]
async fn a_set_by_the_extended_protocol_follows_its_client() {
    let env = pooled(1).await;
    let dsn = env.proxy_dsn();
    let a = connect(&dsn).await;
    let b = connect(&dsn).await;
    a.execute("SET statement_timeout = '7s'", &[])
        .await
        .unwrap();
    a.execute("SET application_name = 'by parse'", &[])
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            one(&b, "SHOW statement_timeout").await.as_deref(),
            Some("0")
        );
        assert_eq!(
            one(&a, "SHOW statement_timeout").await.as_deref(),
            Some("7s")
        );
        assert_eq!(
            one(&a, "SHOW application_name").await.as_deref(),
            Some("by parse")
        );
        assert_eq!(one(&b, "SHOW application_name").await.as_deref(), Some(""));
    }
    // A SET in a transaction that rolls back is undone, as on a
    // dedicated connection.
    a.batch_execute("BEGIN").await.unwrap();
    let err = a.execute("SELECT 1/0", &[]).await;
    assert!(err.is_err());
    a.batch_execute("ROLLBACK").await.unwrap();
    a.execute("RESET statement_timeout", &[]).await.unwrap();
    assert_eq!(
        one(&a, "SHOW statement_timeout").await.as_deref(),
        Some("0")
    );
    let rows = pools(&env).await;
    assert_eq!(rows[0].2, "0", "nothing pinned: {rows:?}");
}

/// A library a client loads follows it; a connection that has it loaded
/// goes to no client that didn't load it.
#[tokio::test]
async fn a_load_follows_its_client_and_stays_with_it() {
    let env = pooled(1).await;
    let dsn = env.proxy_dsn();
    let a = connect(&dsn).await;
    let b = connect(&dsn).await;
    let look = "SELECT current_setting('auto_explain.log_min_duration', true)";
    a.batch_execute("LOAD 'auto_explain'").await.unwrap();
    for _ in 0..3 {
        assert_eq!(one(&a, look).await.as_deref(), Some("-1"));
        assert_eq!(one(&b, look).await, None, "another client's library");
    }
    let rows = pools(&env).await;
    assert_eq!(rows[0].2, "0", "nothing pinned: {rows:?}");
}

/// Logins the server refuses make no pool, and pools whose clients have
/// all gone are dropped once their connections are.
#[tokio::test]
async fn refused_logins_leave_no_pools() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.upstream.reuse_idle_timeout = Duration::from_millis(200);
    })
    .await;
    for i in 0..30 {
        let db = format!("nosuchdb{i}");
        let (_s, msgs) =
            raw::login_with(env.proxy_port(), &[("user", "postgres"), ("database", &db)]).await;
        let errors = raw::errors(&msgs);
        assert_eq!(errors[0].1, "3D000", "{errors:?}");
    }
    assert_eq!(pools(&env).await, vec![], "no pool for a refused login");
    let c = connect(&env.proxy_dsn()).await;
    one(&c, "SELECT 1").await;
    assert_eq!(pools(&env).await.len(), 1);
    drop(c);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let rows = env.admin("SHOW POOLS").await;
        if rows.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

trait WriteQuery {
    async fn write_all_query(&mut self, sql: &str);
}

impl WriteQuery for tokio::net::TcpStream {
    async fn write_all_query(&mut self, sql: &str) {
        use tokio::io::AsyncWriteExt;
        self.write_all(&raw::query(sql)).await.unwrap();
    }
}

/// RESET returns a startup parameter to the startup packet's value, as on
/// a dedicated connection, and the client is told what a dedicated
/// connection would tell it.
#[tokio::test]
async fn reset_returns_a_startup_parameter_to_the_startup_packets_value() {
    let env = pooled(1).await;
    let params = [
        ("user", "postgres"),
        ("database", "postgres"),
        ("application_name", "started"),
        ("options", "-c statement_timeout=42s"),
    ];
    let script: &[&str] = &[
        "SET application_name = 'changed'",
        "SHOW application_name",
        "RESET application_name",
        "SHOW application_name",
        "SET statement_timeout = '1s'",
        "RESET ALL",
        "SHOW statement_timeout",
        "SHOW application_name",
        "RESET application_name",
    ];
    let mut seen = Vec::new();
    for port in [env.pg.port(), env.proxy_port()] {
        let (mut s, _) = raw::login_with(port, &params).await;
        let mut answers = Vec::new();
        for sql in script {
            s.write_all_query(sql).await;
            let msgs = raw::read_to_z(&mut s).await;
            answers.push(
                msgs.into_iter()
                    .filter(|(t, _)| matches!(t, b'S' | b'D' | b'C' | b'E'))
                    .collect::<Vec<_>>(),
            );
        }
        seen.push(answers);
    }
    for (i, sql) in script.iter().enumerate() {
        assert_eq!(seen[1][i], seen[0][i], "{sql}");
    }
}

/// `max_db_connections` bounds a database's server connections across
/// its users' pools: an idle connection of one user's pool makes room for
/// another's, and clients past the bound wait their turn.
#[tokio::test]
async fn max_db_connections_bounds_a_database_across_pools() {
    let env = Env::start_with(PgOptions::default(), |c| {
        c.pool.mode = onetrip::config::PoolMode::Transaction;
        c.pool.pool_size = 5;
        c.pool.max_db_connections = 2;
    })
    .await;
    let direct = connect(&env.direct_dsn()).await;
    direct
        .batch_execute("CREATE ROLE alice LOGIN SUPERUSER; CREATE ROLE bob LOGIN SUPERUSER")
        .await
        .unwrap();
    let backends = || async {
        let sql = "SELECT count(*) FROM pg_stat_activity \
                   WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
        let n: i64 = direct.query_one(sql, &[]).await.unwrap().get(0);
        n
    };
    let dsn = |user: &str| {
        format!(
            "host=127.0.0.1 port={} user={user} dbname=postgres",
            env.proxy_port()
        )
    };
    // Alice's two transactions at once leave two idle connections.
    let (a1, a2) = (connect(&dsn("alice")).await, connect(&dsn("alice")).await);
    a1.batch_execute("BEGIN; SELECT 1").await.unwrap();
    a2.batch_execute("BEGIN; SELECT 1").await.unwrap();
    a1.batch_execute("COMMIT").await.unwrap();
    a2.batch_execute("COMMIT").await.unwrap();
    assert_eq!(backends().await, 2);
    // Bob's need one: an idle one of alice's gives its place up.
    let b1 = connect(&dsn("bob")).await;
    let who = one(&b1, "SELECT current_user").await;
    assert_eq!(who.as_deref(), Some("bob"));
    assert!(backends().await <= 2);
    // Four clients at once, two users: never more than two backends.
    let mut tasks = Vec::new();
    for i in 0..4 {
        let dsn = dsn(if i % 2 == 0 { "alice" } else { "bob" });
        tasks.push(tokio::spawn(async move {
            let c = connect(&dsn).await;
            for _ in 0..5 {
                c.batch_execute("BEGIN; SELECT pg_sleep(0.01); COMMIT")
                    .await
                    .unwrap();
            }
        }));
    }
    let mut most = 0;
    while !tasks.iter().all(|t| t.is_finished()) {
        most = most.max(backends().await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(most <= 2, "{most} backends of one database");
}

/// CREATE, ALTER and DROP DATABASE make the pools forget their greetings
/// (the next login hears the server): logins after them still get in,
/// on pools that kept idle connections too.
#[tokio::test]
async fn logins_go_on_after_database_commands() {
    let env = pooled(2).await;
    let dsn = env.proxy_dsn();
    let c = connect(&dsn).await;
    one(&c, "SELECT 1").await;
    for sql in [
        "CREATE DATABASE made_here",
        "ALTER DATABASE made_here RENAME TO renamed_here",
        "DROP DATABASE renamed_here",
    ] {
        c.batch_execute(sql).await.unwrap();
        for _ in 0..3 {
            let later = connect(&dsn).await;
            assert_eq!(
                one(&later, "SELECT 'in'").await.as_deref(),
                Some("in"),
                "after {sql}"
            );
        }
    }
}

/// What the server says at a login (a notice that an application_name
/// past 63 bytes is cut short) reaches a pooled login as it would a
/// dedicated one, and the name is reported cut short.
#[tokio::test]
async fn a_login_hears_the_servers_notices() {
    let env = pooled(1).await;
    let long = "x".repeat(70);
    let params = [
        ("user", "postgres"),
        ("database", "postgres"),
        ("application_name", long.as_str()),
    ];
    let (_d, direct) = raw::login_with(env.pg.port(), &params).await;
    let notices = |msgs: &[(u8, Vec<u8>)]| -> Vec<(u8, Vec<u8>)> {
        msgs.iter().filter(|(t, _)| *t == b'N').cloned().collect()
    };
    assert_eq!(notices(&direct).len(), 1, "{direct:?}");
    for _ in 0..2 {
        let (_p, through) = raw::login_with(env.proxy_port(), &params).await;
        assert_eq!(notices(&through), notices(&direct));
        assert_eq!(raw::parameters(&through), raw::parameters(&direct));
        let order: Vec<u8> = through.iter().map(|(t, _)| *t).take(2).collect();
        assert_eq!(
            order,
            [b'R', b'N'],
            "the notice right after AuthenticationOk"
        );
    }
}
