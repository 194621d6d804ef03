//! Who checks a pooled login's password. onetrip does, for a user of
//! `[pool] users` (against its password there) and, when `[pool]
//! auth_user` is set, for any other (against its secret looked up with
//! `auth_query`), so that the pool's server connections can be opened
//! without the client, with the `Credential` the check gave. Otherwise the
//! server does, and only a login it admits by trust is pooled.
//!
//! A looked-up secret is checked the way the server would ask for it: a
//! pool finds out once how the server asks its user to authenticate
//! (`method`). A cleartext password is asked of the client when the
//! server asks onetrip for one (a SCRAM exchange would give nothing that
//! answers it); no check at all when the server asks for nothing.

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tracing::info;

use crate::session::handshake::connect_upstream;
use crate::{
    auth::{AuthError, Credential, Method, cache::Keep, client::Client, exchange},
    config::{Config, PoolConfig},
    pooling::Pool,
    shared::Shared,
    wire::{backend, frame::MAX_AUTH_MESSAGE, read::read_message, tag, write},
};

/// How onetrip checks a login.
#[derive(Debug, Clone, Copy)]
pub(in crate::session) enum Check<'a> {
    /// Against this password of `[pool] users`.
    Listed(&'a str),
    /// Against the secret `auth_user` (named) looks up.
    LookedUp(&'a str),
}

impl<'a> Check<'a> {
    /// `None`: the server checks it.
    pub(in crate::session) fn of(pool: &'a PoolConfig, user: &str) -> Option<Check<'a>> {
        if let Some(password) = pool.password_of(user) {
            return Some(Check::Listed(password));
        }
        // auth_user itself gets in as onetrip does, by trust: the server's
        // to check.
        pool.auth_user
            .as_deref()
            .filter(|a| *a != user)
            .map(Check::LookedUp)
    }
}

/// What the check found.
#[derive(Debug)]
pub(in crate::session) enum Checked {
    /// The client is in; its credential opens the pool's connections.
    In(Credential),
    /// The server asks this user for nothing: the login is the server's,
    /// as a trust login is.
    Trust,
    /// The server asks for what onetrip can't answer (GSSAPI, SSPI), or
    /// trusts a user whose pool a checked login's credential opens: the
    /// login is relayed to it, in session mode. Nothing was sent to the
    /// client yet.
    Relay,
}

/// The client's password exchange, run by onetrip up to (not including)
/// AuthenticationOk; what the user's server connections are opened with.
pub(in crate::session) async fn check(
    client: &mut Client,
    shared: &Shared,
    config: &Config,
    database: &str,
    user: &str,
    how: Check<'_>,
) -> Result<Checked, AuthError> {
    let auth_user = match how {
        Check::Listed(password) => {
            let credential = exchange::check_password(client, user, password).await?;
            return Ok(Checked::In(credential));
        }
        Check::LookedUp(auth_user) => auth_user,
    };
    let pool = shared
        .pools
        .pool(database, user)
        .map_err(|e| AuthError::TooManyPools(e.max))?;
    let checked = match pool.method_or(find_out(shared, &pool)).await {
        Ok(method) => check_looked_up(client, shared, config, (auth_user, &pool), method).await,
        Err(e) => Err(e),
    };
    if checked.is_err() {
        // It may name a user or database that doesn't exist.
        shared.pools.forget_if_unused(&pool);
    }
    checked
}

/// Checks the client against the secret `auth_user` looks up, as the
/// server asks `pool`'s user (`method`).
async fn check_looked_up(
    client: &mut Client,
    shared: &Shared,
    config: &Config,
    (auth_user, pool): (&str, &Pool),
    method: Method,
) -> Result<Checked, AuthError> {
    let (database, user) = (pool.database.as_str(), pool.user.as_str());
    match method {
        // A login onetrip doesn't check never shares a pool a checked one
        // opens.
        Method::Trust if pool.had_credential() => return Ok(Checked::Relay),
        Method::Trust => return Ok(Checked::Trust),
        Method::Other(code) => {
            info!(
                "session mode: the upstream asks user \"{user}\" for authentication \
                 method {code}, which onetrip can't answer"
            );
            return Ok(Checked::Relay);
        }
        Method::Cleartext | Method::Md5 | Method::Sasl => {}
    }
    let pool_config = &config.pool;
    let keep = Keep {
        ttl: pool_config.auth_cache_ttl,
        size: pool_config.auth_cache_size,
    };
    let source = format!("{auth_user}\0{}", pool_config.auth_query);
    let look_up = super::auth_query::look_up(shared, config, auth_user, database, user);
    let looked = shared
        .secrets
        .get(&source, database, user, keep, look_up)
        .await?;
    let secret = looked.secret.as_deref();
    let checked = match method {
        // Only the password itself answers the server's request.
        Method::Cleartext => exchange::cleartext(client, user, secret).await,
        _ => exchange::check_secret(client, user, secret).await,
    };
    if looked.kept && matches!(checked, Err(AuthError::BadPassword(_))) {
        // The client may know a newer password than the one kept: the
        // next login looks it up again.
        shared.secrets.forget(database, user);
    }
    checked.map(Checked::In)
}

/// How the server asks `pool`'s user to authenticate: a connection of the
/// pool is started, its first authentication request read, and it is
/// closed, within `[upstream] connect_timeout`. Hung up on unanswered,
/// the server logs nothing of it.
async fn find_out(shared: &Shared, pool: &Pool) -> Result<Method, AuthError> {
    let limit = shared.config().upstream.connect_timeout;
    let failed = |why: String| AuthError::Upstream {
        user: pool.user.clone(),
        why,
    };
    let asked = async {
        let mut up = connect_upstream(shared)
            .await
            .map_err(|e| failed(e.to_string()))?;
        up.write_all(&pool.startup)
            .await
            .map_err(|e| failed(e.to_string()))?;
        up.flush().await.map_err(|e| failed(e.to_string()))?;
        let mut buf = BytesMut::with_capacity(256);
        let msg = read_message(&mut up, &mut buf, MAX_AUTH_MESSAGE)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let method = match msg[0] {
            tag::AUTHENTICATION => match backend::auth_code(&msg) {
                Some(code) => Method::of(code),
                None => return Err(failed("a malformed authentication request".into())),
            },
            tag::ERROR_RESPONSE => return Err(AuthError::Refused(msg)),
            t => {
                let why = format!("its startup was answered with message type '{}'", t as char);
                return Err(failed(why));
            }
        };
        if method == Method::Trust {
            // Logged in: said goodbye to.
            let _ = up.write_all(&write::TERMINATE).await;
        }
        let _ = up.shutdown().await;
        Ok(method)
    };
    match crate::timers::timeout(limit, asked).await {
        Ok(found) => found,
        Err(_) => Err(failed(format!(
            "no answer within [upstream] connect_timeout ({limit:?})"
        ))),
    }
}
