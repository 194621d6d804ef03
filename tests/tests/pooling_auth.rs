//! `[pool] auth_user` / `auth_query`: pooled users whose passwords onetrip
//! has not been given. It looks their secrets up on the server, checks
//! their clients against them (SCRAM-SHA-256 or md5, as stored), and opens
//! their pools' connections with what the client's proof gave, as
//! PgBouncer does.

use std::{
    process::Command,
    sync::{Arc, Mutex},
    time::Duration,
};

use onetrip::config::{PoolMode, PoolUser};
use onetrip_tests::{Env, PgOptions, connect};
use tokio_postgres::error::SqlState;

/// SCRAM for one user, md5 for another, a cleartext password for the
/// `pass_*` ones (stored as a SCRAM verifier, as an md5 hash, or no such
/// role); the auth_user `lookup` (a superuser) gets in by trust,
/// `plain_lookup` (an ordinary role) with its password; everyone else is
/// asked for a SCRAM password.
const HBA: &str = "local all all trust\n\
                   host all lookup 127.0.0.1/32 trust\n\
                   host all postgres 127.0.0.1/32 trust\n\
                   host all md5_user 127.0.0.1/32 md5\n\
                   host all pass_user 127.0.0.1/32 password\n\
                   host all pass_md5_user 127.0.0.1/32 password\n\
                   host all pass_nobody 127.0.0.1/32 password\n\
                   host all all 127.0.0.1/32 scram-sha-256\n";

const SCRAM: (&str, &str) = ("scram_user", "sCr@m pass");
const MD5: (&str, &str) = ("md5_user", "md5 pass");
const PASS: (&str, &str) = ("pass_user", "password");
const PASS_MD5: (&str, &str) = ("pass_md5_user", "pass md5");
const PLAIN_LOOKUP_PASSWORD: &str = "lookup pass";

/// The SECURITY DEFINER function of the README, owned by the superuser
/// that creates it, its EXECUTE granted to `plain_lookup` alone.
const GET_AUTH: &str = "CREATE SCHEMA pgbouncer;
    CREATE FUNCTION pgbouncer.get_auth(p_usename text)
      RETURNS TABLE(usename name, passwd text)
      LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog
      AS $$ SELECT usename, passwd FROM pg_shadow WHERE usename = p_usename $$;
    REVOKE ALL ON FUNCTION pgbouncer.get_auth(text) FROM PUBLIC;
    GRANT USAGE ON SCHEMA pgbouncer TO plain_lookup;
    GRANT EXECUTE ON FUNCTION pgbouncer.get_auth(text) TO plain_lookup;";

/// A server with the users above, and a proxy in transaction pooling
/// whose configuration `tweak` finishes (no user's password but
/// `plain_lookup`'s is in it).
async fn env_with(tweak: impl FnOnce(&mut onetrip::Config)) -> Env {
    let env = Env::start_with(
        PgOptions {
            hba: Some(HBA.into()),
            ..Default::default()
        },
        |c| {
            c.pool.mode = PoolMode::Transaction;
            c.pool.pool_size = 1;
            tweak(c);
        },
    )
    .await;
    let direct = connect(&env.dsn(false)).await;
    direct
        .batch_execute(&format!(
            "set password_encryption = 'scram-sha-256';
             create user {} password '{}';
             create user {} password '{}';
             create user plain_lookup password '{PLAIN_LOOKUP_PASSWORD}';
             create user lookup superuser;
             create user nopw_user;
             set password_encryption = 'md5';
             create user {} password '{}';
             create user {} password '{}';
             {GET_AUTH}",
            SCRAM.0, SCRAM.1, PASS.0, PASS.1, MD5.0, MD5.1, PASS_MD5.0, PASS_MD5.1
        ))
        .await
        .unwrap();
    env
}

fn lookup(c: &mut onetrip::Config) {
    c.pool.auth_user = Some("lookup".into());
}

fn plain_lookup(c: &mut onetrip::Config) {
    c.pool.auth_user = Some("plain_lookup".into());
    c.pool.auth_query = "SELECT * FROM pgbouncer.get_auth($1)".into();
    c.pool.users = vec![PoolUser {
        name: "plain_lookup".into(),
        password: PLAIN_LOOKUP_PASSWORD.into(),
    }];
}

fn dsn(port: u16, user: &str, password: &str) -> String {
    format!("host=127.0.0.1 port={port} user={user} password='{password}' dbname=postgres")
}

/// Longer than any answer here takes on a loaded machine.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// A client, or the error's SQLSTATE and message.
async fn login(
    port: u16,
    user: &str,
    password: &str,
) -> Result<tokio_postgres::Client, (SqlState, String)> {
    let dsn = dsn(port, user, password);
    let connecting = tokio_postgres::connect(&dsn, tokio_postgres::NoTls);
    // A login left unanswered fails here, naming whose, instead of
    // hanging the run.
    let answered = tokio::time::timeout(ANSWER_WITHIN, connecting).await;
    let answered =
        answered.unwrap_or_else(|_| panic!("{user} on port {port}: no answer to the login"));
    match answered {
        Ok((c, conn)) => {
            tokio::spawn(conn);
            Ok(c)
        }
        Err(e) => {
            let db = e.as_db_error().unwrap_or_else(|| panic!("{user}: {e}"));
            Err((db.code().clone(), db.message().to_owned()))
        }
    }
}

/// `current_user` and the backend's pid.
async fn who(c: &tokio_postgres::Client) -> (String, i32) {
    let query = c.query_one("select current_user::text, pg_backend_pid()", &[]);
    let row = tokio::time::timeout(ANSWER_WITHIN, query)
        .await
        .expect("no answer to current_user")
        .unwrap();
    (row.get(0), row.get(1))
}

fn psql(env: &Env, user: &str, password: &str, sql: &str) -> std::process::Output {
    let mut cmd: Command = env.pg.tool("psql");
    cmd.args(["-X", "-A", "-t", "-h", "127.0.0.1", "-p"])
        .arg(env.proxy_port().to_string())
        .args(["-U", user, "-d", "postgres", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGPASSWORD", password)
        .env_remove("PGSSLMODE");
    cmd.output().expect("run psql")
}

/// Several clients of each user on `pool_size = 1` share one backend, the
/// one onetrip opened, all in one pool of `SHOW POOLS`; psql logs in too.
async fn users_are_pooled(env: &Env) {
    these_users_are_pooled(env, &[SCRAM, MD5]).await;
}

async fn these_users_are_pooled(env: &Env, users: &[(&str, &str)]) {
    let port = env.proxy_port();
    for &(user, password) in users {
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(login(port, user, password).await.unwrap());
        }
        let mut pids = std::collections::HashSet::new();
        for c in &clients {
            let (current, pid) = who(c).await;
            assert_eq!(current, user);
            pids.insert(pid);
        }
        assert_eq!(pids.len(), 1, "{user}: one backend for all: {pids:?}");
        let pools = env.admin("SHOW POOLS").await;
        let row = pools
            .iter()
            .find(|r| r[1].as_deref() == Some(user))
            .unwrap_or_else(|| panic!("{user}: {pools:?}"));
        assert_eq!(row[2].as_deref(), Some("4"), "cl_active: {row:?}");
        assert_eq!(row[4].as_deref(), Some("0"), "sv_active: {row:?}");
        assert_eq!(row[5].as_deref(), Some("1"), "sv_idle: {row:?}");
        // libpq's SCRAM, md5 or cleartext password against onetrip's (a
        // pool of its own: its startup packet differs).
        let out = psql(env, user, password, "select current_user");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "psql as {user}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), user);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_and_md5_users_are_pooled_with_passwords_looked_up() {
    let env = env_with(lookup).await;
    users_are_pooled(&env).await;
}

/// auth_user an ordinary role, allowed the SECURITY DEFINER function only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_auth_user_looks_up_through_a_security_definer_function() {
    let env = env_with(plain_lookup).await;
    let own = login(env.pg.port(), "plain_lookup", PLAIN_LOOKUP_PASSWORD)
        .await
        .unwrap();
    let e = own.simple_query("select passwd from pg_shadow").await;
    assert_eq!(
        e.unwrap_err().code(),
        Some(&SqlState::INSUFFICIENT_PRIVILEGE),
        "pg_shadow itself is not for it"
    );
    users_are_pooled(&env).await;
    // The function is no one else's to run.
    let c = login(env.proxy_port(), SCRAM.0, SCRAM.1).await.unwrap();
    let e = c
        .simple_query("select * from pgbouncer.get_auth('postgres')")
        .await;
    assert_eq!(
        e.unwrap_err().code(),
        Some(&SqlState::INSUFFICIENT_PRIVILEGE)
    );
}

/// A wrong password, a name the server doesn't know and a user without a
/// password all get what the server itself answers: 28P01, `password
/// authentication failed for user "..."`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_and_unknown_users_fail_as_on_the_server() {
    let env = env_with(lookup).await;
    refused_as_on_the_server(
        &env,
        &[
            (SCRAM.0, "wrong"),
            (MD5.0, "wrong"),
            ("nobody", "whatever"),
            ("nopw_user", "whatever"),
        ],
    )
    .await;
    // Refused logins took no server connection of the pools.
    users_are_pooled(&env).await;
}

/// Each (user, password) is refused by the server directly and by onetrip
/// alike: 28P01, in PostgreSQL's words.
async fn refused_as_on_the_server(env: &Env, logins: &[(&str, &str)]) {
    for &(user, password) in logins {
        let direct = login(env.pg.port(), user, password).await.err();
        let proxied = login(env.proxy_port(), user, password).await.err();
        let message = match password {
            "" => "empty password returned by client".to_owned(),
            _ => format!("password authentication failed for user \"{user}\""),
        };
        let want = (SqlState::INVALID_PASSWORD, message);
        assert_eq!(direct.as_ref(), Some(&want), "{user} direct");
        assert_eq!(proxied.as_ref(), Some(&want), "{user} through onetrip");
    }
}

/// A user whose server asks for a cleartext password (pg_hba `password`)
/// is asked for one by onetrip too, checked against the looked-up SCRAM
/// verifier or md5 hash, and pooled: the password answers the server. A
/// wrong one, or a name the server doesn't know, fails as on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleartext_password_users_are_pooled_with_passwords_looked_up() {
    let env = env_with(lookup).await;
    these_users_are_pooled(&env, &[PASS, PASS_MD5]).await;
    refused_as_on_the_server(
        &env,
        &[
            (PASS.0, "wrong"),
            (PASS.0, ""),
            (PASS_MD5.0, "wrong"),
            ("pass_nobody", "whatever"),
        ],
    )
    .await;
}

/// A user the server trusts is not asked for a password by onetrip, even
/// with auth_user set: the server's to check, and pooled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_user_is_not_asked_for_a_password() {
    let env = env_with(lookup).await;
    let port = env.proxy_port();
    let a = login(port, "postgres", "").await.unwrap();
    let b = login(port, "postgres", "").await.unwrap();
    assert_eq!(who(&a).await, who(&b).await, "one backend for both");
}

/// A password changed through onetrip is taken at the very next login, and
/// the old one refused: `ALTER USER ... PASSWORD`, for a SCRAM, md5 and
/// cleartext user, and the verifier psql's `\password` sends, inside a
/// transaction block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_changed_through_onetrip_is_taken_at_the_next_login() {
    let env = env_with(lookup).await;
    let port = env.proxy_port();
    let superuser = login(port, "postgres", "").await.unwrap();
    for (user, old, encryption) in [
        (SCRAM.0, SCRAM.1, "scram-sha-256"),
        (MD5.0, MD5.1, "md5"),
        (PASS.0, PASS.1, "scram-sha-256"),
    ] {
        // The secret is kept from here on.
        let first = login(port, user, old).await.unwrap();
        // One Query, the ALTER not its first statement.
        superuser
            .batch_execute(&format!(
                "set password_encryption = '{encryption}'; \
                 alter user {user} with password 'new pass'"
            ))
            .await
            .unwrap();
        let second = login(port, user, "new pass").await.unwrap();
        let refused = login(port, user, old).await.err().unwrap();
        assert_eq!(refused.0, SqlState::INVALID_PASSWORD, "{user}: the old one");
        // The pool's connection serves both.
        assert_eq!(who(&first).await, who(&second).await, "{user}");
    }
    // psql's `\password`: a verifier the client made (here the server, for
    // a scratch role: a SCRAM verifier doesn't name its role).
    let direct = connect(&env.dsn(false)).await;
    direct
        .batch_execute(
            "set password_encryption = 'scram-sha-256'; create role scratch password 'newer'",
        )
        .await
        .unwrap();
    let verifier: String = direct
        .query_one(
            "select rolpassword from pg_authid where rolname = 'scratch'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(verifier.starts_with("SCRAM-SHA-256$"), "{verifier}");
    superuser.batch_execute("begin").await.unwrap();
    superuser
        .batch_execute(&format!("ALTER USER \"{}\" PASSWORD '{verifier}'", SCRAM.0))
        .await
        .unwrap();
    // A login between the ALTER and its COMMIT still finds the old one.
    login(port, SCRAM.0, "new pass").await.unwrap();
    superuser.batch_execute("commit").await.unwrap();
    let c = login(port, SCRAM.0, "newer").await.unwrap();
    assert_eq!(who(&c).await.0, SCRAM.0);
    let refused = login(port, SCRAM.0, "new pass").await.err().unwrap();
    assert_eq!(refused.0, SqlState::INVALID_PASSWORD);
}

/// auth_user unable to look up (a role that can't log in, a wrong
/// password of its own, a query it may not run): the client is told
/// which user could not, and the server's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auth_user_that_cannot_look_up_is_named() {
    let env = env_with(|_| {}).await;
    type Tweak = fn(&mut onetrip::Config);
    let cases: [(&str, Tweak, &str); 3] = [
        (
            "ghost",
            |c| c.pool.auth_user = Some("ghost".into()),
            "the upstream asked for a password for user \"ghost\"",
        ),
        (
            "plain_lookup",
            |c| {
                plain_lookup(c);
                c.pool.users[0].password = "not it".into();
            },
            "password authentication failed for user \"plain_lookup\"",
        ),
        (
            "plain_lookup",
            |c| {
                plain_lookup(c);
                c.pool.auth_query = onetrip::Config::default().pool.auth_query;
            },
            "permission denied for view pg_shadow",
        ),
    ];
    for (auth_user, tweak, why) in cases {
        let proxy = env
            .start_proxy(|c| {
                c.pool.mode = PoolMode::Transaction;
                tweak(c);
            })
            .await;
        let port = proxy.local_addr().port();
        let (code, message) = login(port, SCRAM.0, SCRAM.1).await.err().unwrap();
        assert_eq!(code, SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION);
        let named = format!("onetrip's auth_user \"{auth_user}\" could not look up passwords: ");
        assert!(message.starts_with(&named), "{message}");
        assert!(message.contains(why), "{message}");
        proxy.shutdown(Duration::from_secs(1)).await;
    }
}

/// A password changed on the server is taken after the client's next
/// failed login (the kept secret is looked up again), or once the kept
/// one is older than `auth_cache_ttl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_password_is_taken_after_a_failed_login_or_the_ttl() {
    let env = env_with(lookup).await;
    let direct = connect(&env.dsn(false)).await;
    let port = env.proxy_port();
    let first = login(port, SCRAM.0, SCRAM.1).await.unwrap();
    direct
        .batch_execute(
            "set password_encryption = 'scram-sha-256'; alter role scram_user password 'new pass'",
        )
        .await
        .unwrap();
    let stale = login(port, SCRAM.0, "new pass").await.err().unwrap();
    assert_eq!(
        stale.0,
        SqlState::INVALID_PASSWORD,
        "the kept secret was used"
    );
    let second = login(port, SCRAM.0, "new pass").await.unwrap();
    assert_eq!(
        login(port, SCRAM.0, SCRAM.1).await.err().unwrap().0,
        SqlState::INVALID_PASSWORD,
        "the old password no longer"
    );
    // Both share the pool's connection still.
    assert_eq!(who(&first).await.1, who(&second).await.1);

    // With a short ttl, the next login after it takes the new password.
    let proxy = env
        .start_proxy(|c| {
            c.pool.mode = PoolMode::Transaction;
            lookup(c);
            c.pool.auth_cache_ttl = Duration::from_millis(300);
        })
        .await;
    let port = proxy.local_addr().port();
    login(port, MD5.0, MD5.1).await.unwrap();
    direct
        .batch_execute("set password_encryption = 'md5'; alter role md5_user password 'new md5'")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let c = login(port, MD5.0, "new md5").await.unwrap();
    assert_eq!(who(&c).await.0, MD5.0);
    proxy.shutdown(Duration::from_secs(1)).await;
}

/// A reload that takes auth_user away leaves the pools its logins opened
/// to the logins onetrip checks: the server checks the others, and a wrong
/// password is refused, not greeted with the pool's connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_user_after_a_reload_the_server_checks_again() {
    let env = env_with(lookup).await;
    let port = env.proxy_port();
    let pooled = login(port, SCRAM.0, SCRAM.1).await.unwrap();
    who(&pooled).await;
    let mut next = (*env.proxy().config()).clone();
    next.pool.auth_user = None;
    let next = Arc::new(Mutex::new(next));
    env.proxy()
        .set_config_source(move || Ok(next.lock().unwrap().clone()));
    env.proxy().reload().unwrap();
    let wrong = login(port, SCRAM.0, "wrong").await.err().unwrap();
    assert_eq!(wrong.0, SqlState::INVALID_PASSWORD);
    let c = login(port, SCRAM.0, SCRAM.1).await.unwrap();
    let (_, pid) = who(&c).await;
    assert_ne!(pid, who(&pooled).await.1, "a backend of its own");
    let clients = env.admin("SHOW CLIENTS").await;
    let modes: Vec<_> = clients
        .iter()
        .filter(|r| r[2].as_deref() == Some(SCRAM.0))
        .map(|r| r[14].clone().unwrap_or_default())
        .collect();
    assert_eq!(modes.len(), 2, "{clients:?}");
    assert!(modes.contains(&"session".to_owned()), "{modes:?}");
    assert!(modes.contains(&"transaction".to_owned()), "{modes:?}");
}
