//! Who checks a pooled login's password. onetrip does, for a user of
//! `[pool] users` (against its password there) and, when `[pool]
//! auth_user` is set, for any other (against its secret looked up with
//! `auth_query`), so that the pool's server connections can be opened
//! without the client, with the `Credential` the check gave. Otherwise the
//! server does, and only a login it admits by trust is pooled.

use crate::{
    auth::{AuthError, Credential, cache::Keep, client::Client, exchange},
    config::{Config, PoolConfig},
    shared::Shared,
};

/// How onetrip checks a login.
#[derive(Debug, Clone, Copy)]
pub(super) enum Check<'a> {
    /// Against this password of `[pool] users`.
    Listed(&'a str),
    /// Against the secret `auth_user` (named) looks up.
    LookedUp(&'a str),
}

impl<'a> Check<'a> {
    /// `None`: the server checks it.
    pub(super) fn of(pool: &'a PoolConfig, user: &str) -> Option<Check<'a>> {
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

/// The client's password exchange, run by onetrip up to (not including)
/// AuthenticationOk; the credential the user's server connections are
/// opened with.
pub(super) async fn check(
    client: &mut Client,
    shared: &Shared,
    config: &Config,
    database: &str,
    user: &str,
    how: Check<'_>,
) -> Result<Credential, AuthError> {
    let auth_user = match how {
        Check::Listed(password) => return exchange::check_password(client, user, password).await,
        Check::LookedUp(auth_user) => auth_user,
    };
    let pool = &config.pool;
    let keep = Keep {
        ttl: pool.auth_cache_ttl,
        size: pool.auth_cache_size,
    };
    let source = format!("{auth_user}\0{}", pool.auth_query);
    let look_up = super::auth_query::look_up(shared, config, auth_user, database, user);
    let looked = shared
        .secrets
        .get(&source, database, user, keep, look_up)
        .await?;
    let checked = exchange::check_secret(client, user, looked.secret.as_deref()).await;
    if looked.kept && matches!(checked, Err(AuthError::BadPassword(_))) {
        // The client may know a newer password than the one kept: the
        // next login looks it up again.
        shared.secrets.forget(database, user);
    }
    checked
}
