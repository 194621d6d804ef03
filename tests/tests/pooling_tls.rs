//! Transaction pooling over TLS: clients whose TLS onetrip ends, server
//! connections made with `[upstream] tls`, and both at once. Their
//! sessions relay through the runtime, and between transactions hold no
//! server connection, as plain ones do.

use std::{
    collections::HashSet,
    future::Future,
    io,
    path::PathBuf,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use onetrip::config::{PoolMode, UpstreamTls};
use onetrip_tests::{Env, PgOptions, connect, simple_rows};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    task::JoinHandle,
};
use tokio_postgres::{
    Client, NoTls, Socket,
    error::SqlState,
    tls::{ChannelBinding, MakeTlsConnect, TlsConnect},
};

const WAIT: Duration = Duration::from_secs(20);

/// A self-signed certificate for `localhost` and its key, as both onetrip
/// and the server take them.
struct Certs {
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
}

fn certs() -> Certs {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = onetrip_tests::server_cert_files(dir.path());
    Certs {
        _dir: dir,
        cert,
        key,
    }
}

/// Where TLS is: between the clients and onetrip, between onetrip and the
/// server, or both.
#[derive(Clone, Copy, Debug)]
struct Ways {
    clients: bool,
    upstream: bool,
}

/// A pooled proxy (`pool_size = 1`) with TLS where `ways` says.
async fn pooled(certs: &Certs, ways: Ways, tweak: impl FnOnce(&mut onetrip::Config)) -> Env {
    let conf = match ways.upstream {
        true => vec![
            "ssl = on".to_owned(),
            format!("ssl_cert_file = '{}'", certs.cert.display()),
            format!("ssl_key_file = '{}'", certs.key.display()),
        ],
        false => Vec::new(),
    };
    let opts = PgOptions {
        conf,
        ..Default::default()
    };
    Env::start_with(opts, |c| {
        c.pool.mode = PoolMode::Transaction;
        c.pool.pool_size = 1;
        if ways.clients {
            c.tls.cert_file = Some(certs.cert.clone());
            c.tls.key_file = Some(certs.key.clone());
        }
        if ways.upstream {
            c.upstream.tls = UpstreamTls::Require;
        }
        tweak(c);
    })
    .await
}

/// tokio-postgres over rustls, trusting the test's certificate.
#[derive(Clone)]
struct Rustls(tokio_rustls::TlsConnector);

impl Rustls {
    fn trusting(certs: &Certs) -> Self {
        let pem = std::fs::read(&certs.cert).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_certs(&pem) {
            roots.add(cert).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Rustls(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }
}

/// The DER certificates of a PEM file.
fn rustls_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .unwrap()
}

struct Tls(tokio_rustls::client::TlsStream<Socket>);

impl MakeTlsConnect<Socket> for Rustls {
    type Stream = Tls;
    type TlsConnect = Rustls;
    type Error = io::Error;

    fn make_tls_connect(&mut self, _domain: &str) -> io::Result<Rustls> {
        Ok(self.clone())
    }
}

impl TlsConnect<Socket> for Rustls {
    type Stream = Tls;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Tls>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            Ok(Tls(self.0.connect(name, stream).await?))
        })
    }
}

impl tokio_postgres::tls::TlsStream for Tls {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for Tls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tls {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A client of the proxy, over TLS when `tls` is given, with its
/// connection's task (which ends with the error that closed it, if any).
type Conn = JoinHandle<Result<(), tokio_postgres::Error>>;

async fn client(env: &Env, tls: Option<&Rustls>) -> (Client, Conn) {
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode={}",
        env.proxy_port(),
        if tls.is_some() { "require" } else { "disable" }
    );
    match tls {
        Some(tls) => {
            let (c, conn) = tokio_postgres::connect(&dsn, tls.clone())
                .await
                .expect("a TLS client");
            (c, tokio::spawn(conn))
        }
        None => {
            let (c, conn) = tokio_postgres::connect(&dsn, NoTls)
                .await
                .expect("a plain client");
            (c, tokio::spawn(conn))
        }
    }
}

/// `SHOW CLIENTS` rows of database `postgres` (not the admin console's).
async fn clients(env: &Env) -> Vec<Vec<Option<String>>> {
    let mut rows = env.admin("SHOW CLIENTS").await;
    rows.retain(|r| r[1].as_deref() == Some("postgres"));
    rows
}

/// Client backends of database `postgres` the server has, but `direct`'s.
async fn backends(direct: &Client) -> i64 {
    direct
        .query_one(
            "select count(*) from pg_stat_activity where datname = 'postgres' \
             and backend_type = 'client backend' and pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits until `SHOW CLIENTS` lists `n` clients of database `postgres`.
async fn until_clients(env: &Env, n: usize) -> Vec<Vec<Option<String>>> {
    let mut rows = Vec::new();
    for _ in 0..250 {
        rows = clients(env).await;
        if rows.len() == n {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{n} clients expected: {rows:?}");
}

/// Four clients on `pool_size = 1`: one backend between them, pooled
/// transactions and prepared statements that come out right, clients that
/// hang up between transactions (saying goodbye or not) leaving nothing,
/// and a cancel that reaches the backend.
async fn pooled_clients_share_one_connection(ways: Ways) {
    let certs = certs();
    let env = pooled(&certs, ways, |_| {}).await;
    let tls = ways.clients.then(|| Rustls::trusting(&certs));
    let direct = connect(&env.direct_dsn()).await;
    let mut cs = Vec::new();
    for _ in 0..4 {
        cs.push(client(&env, tls.as_ref()).await);
    }
    let mut pids = HashSet::new();
    for (c, _) in &cs {
        let row = c
            .query_one(
                "select pg_backend_pid(), coalesce((select ssl from pg_stat_ssl \
                 where pid = pg_backend_pid()), false)",
                &[],
            )
            .await
            .unwrap();
        pids.insert(row.get::<_, i32>(0));
        assert_eq!(
            row.get::<_, bool>(1),
            ways.upstream,
            "{ways:?}: the server's TLS"
        );
    }
    assert_eq!(pids.len(), 1, "{ways:?}: one backend for all: {pids:?}");
    let pid = *pids.iter().next().unwrap();
    let rows = clients(&env).await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    for r in &rows {
        assert_eq!(r[14].as_deref(), Some("transaction"), "{ways:?}: {r:?}");
        // TLS state stays in the session's task: it relays through the
        // runtime (plain ones through the worker's epoll).
        let relay = match ways.clients || ways.upstream {
            true => "runtime",
            false => "epoll",
        };
        assert_eq!(r[13].as_deref(), Some(relay), "{ways:?}: {r:?}");
    }
    if ways.clients {
        // libpq's TLS too, on the same backend.
        let port = env.proxy_port().to_string();
        let out = env
            .pg
            .tool("psql")
            .args(["-X", "-A", "-t", "-h", "127.0.0.1", "-p", &port])
            .args(["-U", "postgres", "-d", "postgres"])
            .args(["-c", "select pg_backend_pid()"])
            .env("PGSSLMODE", "require")
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), pid.to_string());
    }

    // A transaction holds the connection: another client's statement waits
    // for its COMMIT, and sees what it committed; a rollback leaves nothing.
    cs[0]
        .0
        .batch_execute("create table t (id int)")
        .await
        .unwrap();
    let [(a, _), (b, _), (c, _), ..] = &mut cs[..] else {
        panic!("four clients")
    };
    let tx = a.transaction().await.unwrap();
    tx.execute("insert into t values (1)", &[]).await.unwrap();
    let count = b.query_one("select count(*) from t", &[]);
    let (count, ()) = tokio::join!(count, async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        tx.commit().await.unwrap();
    });
    assert_eq!(count.unwrap().get::<_, i64>(0), 1, "{ways:?}");
    let tx = c.transaction().await.unwrap();
    tx.execute("insert into t values (2)", &[]).await.unwrap();
    tx.rollback().await.unwrap();
    let n: i64 = b
        .query_one("select count(*) from t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1, "{ways:?}");

    // Prepared statements under the same names on every client (s0, s1,
    // ...), used in turns on the one connection.
    let mut statements = Vec::new();
    for (i, (c, _)) in cs.iter().enumerate() {
        let sql = format!("select $1::int * {}", i + 2);
        statements.push(c.prepare(&sql).await.unwrap());
    }
    for round in 0..3 {
        for (i, (c, _)) in cs.iter().enumerate() {
            let n = 10 * round + i as i32;
            let row = c.query_one(&statements[i], &[&n]).await.unwrap();
            assert_eq!(row.get::<_, i32>(0), n * (i as i32 + 2), "{ways:?}");
        }
    }

    // A cancel reaches the backend the client runs its query on.
    let token = cs[1].0.cancel_token();
    let sleeper = &cs[1].0;
    let (slept, ()) = tokio::join!(sleeper.simple_query("select pg_sleep(30)"), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        match &tls {
            Some(tls) => token.cancel_query(tls.clone()).await.unwrap(),
            None => token.cancel_query(NoTls).await.unwrap(),
        }
    });
    let e = slept.expect_err("canceled");
    assert_eq!(e.code(), Some(&SqlState::QUERY_CANCELED), "{ways:?}: {e}");
    let one = simple_rows(&sleeper.simple_query("select 1").await.unwrap());
    assert_eq!(one, [[Some("1".to_owned())]]);

    // One says goodbye between transactions, another just goes.
    let (gone, conn) = cs.pop().unwrap();
    drop(gone);
    let _ = tokio::time::timeout(WAIT, conn).await;
    let (_, conn) = cs.pop().unwrap();
    conn.abort();
    until_clients(&env, 2).await;
    let pools = env.admin("SHOW POOLS").await;
    assert_eq!(pools.len(), 1, "{pools:?}");
    assert_eq!(pools[0][2].as_deref(), Some("2"), "cl_active: {pools:?}");
    assert_eq!(pools[0][4].as_deref(), Some("0"), "sv_active: {pools:?}");
    assert_eq!(pools[0][5].as_deref(), Some("1"), "sv_idle: {pools:?}");
    assert_eq!(backends(&direct).await, 1, "{ways:?}");
    for (c, _) in &cs {
        let row = c.query_one("select pg_backend_pid()", &[]).await.unwrap();
        assert_eq!(
            row.get::<_, i32>(0),
            pid,
            "{ways:?}: the same backend still"
        );
    }

    // The server ends the idle connection: taken again, it is found closed
    // (over TLS too, where unread bytes prove nothing) and replaced.
    direct
        .execute("select pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    for _ in 0..250 {
        if backends(&direct).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Checked only when idle past 10 ms, and its socket closes as its
    // backend exits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut after = HashSet::new();
    for (c, _) in &cs {
        let row = c.query_one("select pg_backend_pid()", &[]).await.unwrap();
        after.insert(row.get::<_, i32>(0));
    }
    assert_eq!(after.len(), 1, "{ways:?}: {after:?}");
    assert!(!after.contains(&pid), "{ways:?}: a new backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_clients_are_pooled() {
    pooled_clients_share_one_connection(Ways {
        clients: true,
        upstream: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_server_connections_are_pooled() {
    pooled_clients_share_one_connection(Ways {
        clients: false,
        upstream: true,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_both_ways_is_pooled() {
    pooled_clients_share_one_connection(Ways {
        clients: true,
        upstream: true,
    })
    .await;
}

/// The FATAL a client's connection ended with.
async fn ended_with(conn: Conn) -> Option<SqlState> {
    let ended = tokio::time::timeout(WAIT, conn).await.expect("closed");
    ended.unwrap().err().and_then(|e| e.code().cloned())
}

/// A TLS client waiting between transactions, in the session's task, hears
/// the idle timeout's 57P05 and shutdown's 57P01, as a plain one does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_tls_client_hears_its_farewells() {
    let certs = certs();
    let tls = Rustls::trusting(&certs);
    for upstream in [false, true] {
        let ways = Ways {
            clients: true,
            upstream,
        };
        let env = pooled(&certs, ways, |c| {
            c.limits.client_idle_timeout = Duration::from_millis(300);
        })
        .await;
        let (c, conn) = client(&env, Some(&tls)).await;
        c.simple_query("select 1").await.unwrap();
        assert_eq!(
            ended_with(conn).await,
            Some(SqlState::IDLE_SESSION_TIMEOUT),
            "{ways:?}"
        );
        // Greeted, and never a statement: it waits as well.
        let (_c, conn) = client(&env, Some(&tls)).await;
        assert_eq!(
            ended_with(conn).await,
            Some(SqlState::IDLE_SESSION_TIMEOUT),
            "{ways:?}"
        );
        until_clients(&env, 0).await;
    }
    for upstream in [false, true] {
        let ways = Ways {
            clients: true,
            upstream,
        };
        let mut env = pooled(&certs, ways, |_| {}).await;
        let (c, conn) = client(&env, Some(&tls)).await;
        c.simple_query("select 1").await.unwrap();
        env.stop_proxy(Duration::from_millis(300)).await;
        assert_eq!(
            ended_with(conn).await,
            Some(SqlState::ADMIN_SHUTDOWN),
            "{ways:?}"
        );
    }
}
