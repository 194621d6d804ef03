//! Authentication of admin console users by the proxy itself: trust, md5
//! (`md5(md5(password + user) + salt)`) or SCRAM-SHA-256, against the
//! passwords in `[admin] users`. The exchanges are `crate::auth`'s.

use base64::{Engine, engine::general_purpose::STANDARD as B64};

use crate::{
    auth::{
        AuthError,
        client::Client,
        exchange::{md5, sasl, verifier_of},
        random,
        secret::Md5Hash,
    },
    config::{Admin, AdminAuth, AdminUser},
};

/// Runs the configured exchange up to (not including) AuthenticationOk;
/// returns the user let in. A name that is no admin user goes through the
/// same exchange, against a random password, and fails as a wrong
/// password does, so the answer doesn't tell which names are admins.
/// (Under `trust` it can't be hidden: a listed name just gets in.)
pub(super) async fn authenticate<'a>(
    client: &mut Client,
    admin: &'a Admin,
    user: &str,
) -> Result<&'a AdminUser, AuthError> {
    let entry = admin.users.iter().find(|u| u.name == user);
    let password = match (entry, admin.auth) {
        (None, AdminAuth::Trust) => return Err(AuthError::UnknownUser(user.into())),
        (Some(u), AdminAuth::Trust) => return Ok(u),
        (Some(u), _) => u.password.clone(),
        (None, _) => B64.encode(random::<24>()?),
    };
    let exchanged = match admin.auth {
        AdminAuth::Md5 => md5(client, user, &Md5Hash::of_password(user, &password)).await,
        _ => match verifier_of(&password).await {
            Ok(verifier) => sasl(client, user, verifier).await.map(|_| ()),
            Err(e) => Err(e),
        },
    };
    match entry {
        Some(u) => exchanged.map(|()| u),
        None => {
            // The operator's log tells what the client isn't told.
            tracing::info!(user, "admin console: no admin user of that name");
            Err(exchanged
                .err()
                .unwrap_or_else(|| AuthError::BadPassword(user.into())))
        }
    }
}
