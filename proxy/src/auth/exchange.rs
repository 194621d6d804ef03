//! The password exchanges onetrip runs with a client itself, each up to
//! (not including) AuthenticationOk: SCRAM-SHA-256 against a verifier, md5
//! against a stored hash. SCRAM-SHA-256-PLUS is never offered: TLS may end
//! at the proxy, so the client's channel is not the server's.

use base64::{Engine, engine::general_purpose::STANDARD as B64};
use bytes::BytesMut;

use super::{
    AuthError, Credential, Secret,
    client::Client,
    random,
    scram::{ClientKey, ITERATIONS, Scram, Verifier},
    secret::{Md5Hash, mock},
};
use crate::wire::{
    backend::{self, auth as code},
    tag, write,
};

/// AuthenticationOk.
pub fn ok(out: &mut BytesMut) {
    write::auth_request(out, code::OK, &[]);
}

async fn send(client: &mut Client, code: i32, extra: &[u8]) -> Result<(), AuthError> {
    let mut out = BytesMut::new();
    write::auth_request(&mut out, code, extra);
    client.write(&out).await?;
    Ok(())
}

/// Reads the client's next password-family message ('p') body. A client that
/// hangs up here (psql does, to prompt for a password) is an I/O error.
async fn password_message(client: &mut Client) -> Result<Vec<u8>, AuthError> {
    match client.read().await? {
        Some((tag::PASSWORD, msg)) => Ok(backend::body(&msg).to_vec()),
        Some((t, _)) => Err(AuthError::Unexpected(t)),
        None => Err(AuthError::Io(std::io::ErrorKind::UnexpectedEof.into())),
    }
}

/// md5 with a random salt: the client answers md5(`hash` + salt).
pub(crate) async fn md5(client: &mut Client, user: &str, hash: &Md5Hash) -> Result<(), AuthError> {
    let salt = random::<4>()?;
    send(client, code::MD5, &salt).await?;
    let body = password_message(client).await?;
    let given = body.strip_suffix(&[0]).unwrap_or(&body);
    match super::scram::eq_ct(given, hash.answer(salt).as_bytes()) {
        true => Ok(()),
        false => Err(AuthError::BadPassword(user.into())),
    }
}

/// SCRAM-SHA-256 against `verifier`; the ClientKey the client's proof
/// gave.
pub(crate) async fn sasl(
    client: &mut Client,
    user: &str,
    verifier: Verifier,
) -> Result<ClientKey, AuthError> {
    send(client, code::SASL, b"SCRAM-SHA-256\0\0").await?;
    let body = password_message(client).await?;
    let (mechanism, data) = crate::wire::frontend::sasl_initial_response(&body)
        .ok_or(AuthError::Scram("malformed SASLInitialResponse"))?;
    if mechanism != b"SCRAM-SHA-256" {
        return Err(AuthError::Scram("unsupported mechanism"));
    }
    let data = data.ok_or(AuthError::Scram("no client-first-message"))?;
    let server_nonce = B64.encode(random::<18>()?);
    let state = Scram::start(verifier, data, &server_nonce)?;
    send(client, code::SASL_CONTINUE, state.server_first().as_bytes()).await?;
    let client_final = password_message(client).await?;
    let (server_final, client_key) = state.finish(&client_final, user)?;
    send(client, code::SASL_FINAL, server_final.as_bytes()).await?;
    Ok(client_key)
}

/// A cleartext password, asked for as PostgreSQL's `password` method asks
/// (for a user whose server asks onetrip for one), checked against the
/// user's stored secret, and kept to answer the server with. A user
/// without a secret is asked too, its password put through a made-up
/// verifier's work, and fails as a wrong password does.
pub(crate) async fn cleartext(
    client: &mut Client,
    user: &str,
    secret: Option<&Secret>,
) -> Result<Credential, AuthError> {
    send(client, code::CLEARTEXT, &[]).await?;
    let body = password_message(client).await?;
    let bad = || AuthError::BadPassword(user.into());
    // One string, its NUL last; PostgreSQL refuses an empty one by name.
    if body.first() == Some(&0) {
        return Err(AuthError::EmptyPassword);
    }
    let password = body
        .strip_suffix(&[0])
        .filter(|p| !p.contains(&0))
        .and_then(|p| std::str::from_utf8(p).ok())
        .ok_or_else(bad)?
        .to_owned();
    let verifier = match secret {
        Some(Secret::Md5(hash)) => {
            return match hash.is_of(user, &password) {
                true => Ok(Credential::Password(password)),
                false => Err(bad()),
            };
        }
        Some(Secret::Scram(v)) => v.clone(),
        None => mock(user),
    };
    // PBKDF2 off the runtime's thread.
    let (fits, password) =
        tokio::task::spawn_blocking(move || (verifier.is_of(&password), password))
            .await
            .map_err(|_| AuthError::Scram("checking the password was stopped"))?;
    match fits && secret.is_some() {
        true => Ok(Credential::Password(password)),
        false => Err(bad()),
    }
}

/// A verifier of `password` with a new random salt, made off the
/// runtime's thread (its PBKDF2 takes milliseconds).
pub(crate) async fn verifier_of(password: &str) -> Result<Verifier, AuthError> {
    let (password, salt) = (password.to_owned(), random::<16>()?);
    tokio::task::spawn_blocking(move || Verifier::from_password(&password, &salt, ITERATIONS))
        .await
        .map_err(|_| AuthError::Scram("making the verifier was stopped"))
}

/// The verifiers of `[pool] users`, by user, with the password each was
/// made from (a reload may change it). Taken at logins only.
static POOL_VERIFIERS: std::sync::Mutex<Vec<(String, String, Verifier)>> =
    std::sync::Mutex::new(Vec::new());

async fn pool_verifier(user: &str, password: &str) -> Result<Verifier, AuthError> {
    let lock = || POOL_VERIFIERS.lock().unwrap_or_else(|e| e.into_inner());
    let known = lock()
        .iter()
        .find(|(u, p, _)| u == user && p == password)
        .map(|(_, _, v)| v.clone());
    if let Some(verifier) = known {
        return Ok(verifier);
    }
    let verifier = verifier_of(password).await?;
    let mut all = lock();
    all.retain(|(u, _, _)| u != user);
    all.push((user.to_owned(), password.to_owned(), verifier.clone()));
    Ok(verifier)
}

/// A user of `[pool] users`: checks with SCRAM-SHA-256 that the client
/// knows `password`, which then opens its server connections.
pub(crate) async fn check_password(
    client: &mut Client,
    user: &str,
    password: &str,
) -> Result<Credential, AuthError> {
    let verifier = pool_verifier(user, password).await?;
    sasl(client, user, verifier).await?;
    Ok(Credential::Password(password.to_owned()))
}

/// A user whose secret was looked up (`None`: the server holds no
/// password for it, or no such user): its client is asked as PostgreSQL
/// would ask it, and what then opens its server connections is returned.
/// A user without a secret goes through SCRAM against a made-up verifier
/// and fails as a wrong password does.
pub(crate) async fn check_secret(
    client: &mut Client,
    user: &str,
    secret: Option<&Secret>,
) -> Result<Credential, AuthError> {
    match secret {
        Some(Secret::Scram(verifier)) => {
            let client_key = sasl(client, user, verifier.clone()).await?;
            Ok(Credential::ScramKeys {
                client_key,
                verifier: verifier.clone(),
            })
        }
        Some(Secret::Md5(hash)) => {
            md5(client, user, hash).await?;
            Ok(Credential::Md5Hash(hash.clone()))
        }
        None => {
            sasl(client, user, mock(user)).await?;
            Err(AuthError::BadPassword(user.into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::{TcpListener, TcpStream},
    };

    use super::*;
    use crate::net::Stream;

    /// The exchange with a client that answers `password` (its NUL added),
    /// as onetrip's side sees it, and the request the client read.
    async fn cleartext_with(
        secret: Option<&Secret>,
        password: &[u8],
    ) -> Result<Credential, AuthError> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let password = password.to_vec();
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            let mut request = [0u8; 9];
            c.read_exact(&mut request).await.unwrap();
            // AuthenticationCleartextPassword.
            assert_eq!(request, [b'R', 0, 0, 0, 8, 0, 0, 0, 3]);
            let mut msg = vec![b'p'];
            msg.extend_from_slice(&(5 + password.len() as u32).to_be_bytes());
            msg.extend_from_slice(&password);
            msg.push(0);
            c.write_all(&msg).await.unwrap();
            c
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let mut server = Client::new(Stream::Plain(tcp), std::time::Duration::from_secs(5));
        let checked = cleartext(&mut server, "u", secret).await;
        drop(client.await.unwrap());
        checked
    }

    #[tokio::test]
    async fn a_cleartext_password_is_checked_against_either_form_and_kept() {
        let scram = Secret::Scram(Verifier::from_password("pw", b"0123456789abcdef", 4096));
        let md5 = Secret::Md5(Md5Hash::of_password("u", "pw"));
        for secret in [&scram, &md5] {
            match cleartext_with(Some(secret), b"pw").await {
                Ok(Credential::Password(p)) => assert_eq!(p, "pw"),
                other => panic!("{other:?}"),
            }
            let e = cleartext_with(Some(secret), b"").await;
            assert!(matches!(e, Err(AuthError::EmptyPassword)), "{e:?}");
            for wrong in [&b"pW"[..], b"p\0w", b"\xff"] {
                let e = cleartext_with(Some(secret), wrong).await;
                assert!(
                    matches!(e, Err(AuthError::BadPassword(ref u)) if u == "u"),
                    "{e:?}"
                );
            }
        }
        // No password stored, or no such user: asked, then refused.
        let e = cleartext_with(None, b"pw").await;
        assert!(matches!(e, Err(AuthError::BadPassword(_))), "{e:?}");
    }
}
