//! Authentication of admin console users by the proxy itself: trust, md5
//! (`md5(md5(password + user) + salt)`) or SCRAM-SHA-256 (RFC 5802 / 7677,
//! without channel binding), against the passwords in `[admin] users`.

use base64::{Engine, engine::general_purpose::STANDARD as B64};
use bytes::BytesMut;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

use super::client::Client;
use crate::{
    config::{Admin, AdminAuth, AdminUser},
    wire::{
        backend::{self, auth as code},
        read::ReadError,
        tag, write,
    },
};

const SCRAM_ITERATIONS: u32 = 4096;

/// Why a client was not let in; each maps to the FATAL error it gets.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("user \"{0}\" is not allowed to use the admin console")]
    UnknownUser(String),
    #[error("password authentication failed for user \"{0}\"")]
    BadPassword(String),
    #[error("invalid SCRAM exchange: {0}")]
    Scram(&'static str),
    #[error("expected a password message, got message type '{}'", char::from(*.0))]
    Unexpected(u8),
    #[error("authentication not completed within {0:?}")]
    Timeout(std::time::Duration),
    #[error(transparent)]
    Message(#[from] ReadError),
    #[error("I/O error during authentication: {0}")]
    Io(#[from] std::io::Error),
}

impl AuthError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            AuthError::UnknownUser(_) => "28000",
            AuthError::BadPassword(_) => "28P01",
            AuthError::Message(ReadError::Frame(e)) => e.sqlstate(),
            _ => "08P01",
        }
    }
}

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
        AdminAuth::Md5 => md5(client, user, &password).await,
        _ => match Secret::made(&password).await {
            Ok(secret) => scram(client, user, secret).await,
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

/// Checks with SCRAM-SHA-256 that the client knows `password` (a pooled
/// session's login, `[pool] users`), up to (not including)
/// AuthenticationOk.
pub(crate) async fn check_password(
    client: &mut Client,
    user: &str,
    password: &str,
) -> Result<(), AuthError> {
    let secret = pool_secret(user, password).await?;
    scram(client, user, secret).await
}

/// AuthenticationOk.
pub fn ok(out: &mut BytesMut) {
    write::auth_request(out, code::OK, &[]);
}

fn random<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut b = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| AuthError::Io(std::io::Error::other("no system randomness")))?;
    Ok(b)
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

fn eq_ct(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn md5(client: &mut Client, user: &str, password: &str) -> Result<(), AuthError> {
    let salt = random::<4>()?;
    send(client, code::MD5, &salt).await?;
    let body = password_message(client).await?;
    let given = body.strip_suffix(&[0]).unwrap_or(&body);
    let want =
        postgres_protocol::authentication::md5_hash(user.as_bytes(), password.as_bytes(), salt);
    if eq_ct(given, want.as_bytes()) {
        Ok(())
    } else {
        Err(AuthError::BadPassword(user.into()))
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// A password salted for SCRAM-SHA-256, as PostgreSQL stores it: made
/// once per salt, since its 4096 rounds of PBKDF2 take milliseconds.
#[derive(Clone)]
pub struct Secret {
    salt: [u8; 16],
    salted: [u8; 32],
}

impl Secret {
    pub fn new(password: &str, salt: [u8; 16]) -> Secret {
        // PostgreSQL uses the raw password when SASLprep rejects it.
        let password = stringprep::saslprep(password)
            .map(|p| p.into_owned())
            .unwrap_or_else(|_| password.into());
        let mut salted = [0u8; 32];
        let iterations =
            std::num::NonZeroU32::new(SCRAM_ITERATIONS).unwrap_or(std::num::NonZeroU32::MIN);
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            iterations,
            &salt,
            password.as_bytes(),
            &mut salted,
        );
        Secret { salt, salted }
    }

    /// Made with a new random salt, off the runtime's thread.
    async fn made(password: &str) -> Result<Secret, AuthError> {
        let (password, salt) = (password.to_owned(), random::<16>()?);
        tokio::task::spawn_blocking(move || Secret::new(&password, salt))
            .await
            .map_err(|_| AuthError::Scram("making the secret was stopped"))
    }
}

/// The secrets of `[pool] users`, by user, with the password each was
/// made from (a reload may change it). Taken at logins only.
static POOL_SECRETS: std::sync::Mutex<Vec<(String, String, Secret)>> =
    std::sync::Mutex::new(Vec::new());

async fn pool_secret(user: &str, password: &str) -> Result<Secret, AuthError> {
    let lock = || POOL_SECRETS.lock().unwrap_or_else(|e| e.into_inner());
    let known = lock()
        .iter()
        .find(|(u, p, _)| u == user && p == password)
        .map(|(_, _, s)| s.clone());
    if let Some(secret) = known {
        return Ok(secret);
    }
    let secret = Secret::made(password).await?;
    let mut all = lock();
    all.retain(|(u, _, _)| u != user);
    all.push((user.to_owned(), password.to_owned(), secret.clone()));
    Ok(secret)
}

/// The server's view of one SCRAM-SHA-256 exchange, as pure functions over
/// the messages so it can be tested without a socket.
pub struct Scram {
    secret: Secret,
    nonce: String,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
}

impl Scram {
    /// Parses client-first-message and builds server-first-message.
    pub fn start(
        secret: Secret,
        client_first: &[u8],
        server_nonce: &str,
    ) -> Result<Self, AuthError> {
        let msg = std::str::from_utf8(client_first)
            .map_err(|_| AuthError::Scram("message is not UTF-8"))?;
        let (flag, rest) = msg
            .split_once(',')
            .ok_or(AuthError::Scram("missing GS2 header"))?;
        if flag.starts_with('p') {
            return Err(AuthError::Scram("channel binding was not offered"));
        }
        if flag != "n" && flag != "y" {
            return Err(AuthError::Scram("invalid channel binding flag"));
        }
        let (authzid, bare) = rest
            .split_once(',')
            .ok_or(AuthError::Scram("missing GS2 header"))?;
        let client_nonce = bare
            .split(',')
            .find_map(|a| a.strip_prefix("r="))
            .filter(|n| !n.is_empty())
            .ok_or(AuthError::Scram("missing client nonce"))?;
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={SCRAM_ITERATIONS}",
            B64.encode(secret.salt)
        );
        Ok(Self {
            secret,
            nonce,
            gs2_header: format!("{flag},{authzid},"),
            client_first_bare: bare.into(),
            server_first,
        })
    }

    pub fn server_first(&self) -> &str {
        &self.server_first
    }

    /// Checks client-final-message; returns server-final-message.
    pub fn finish(&self, client_final: &[u8], user: &str) -> Result<String, AuthError> {
        let msg = std::str::from_utf8(client_final)
            .map_err(|_| AuthError::Scram("message is not UTF-8"))?;
        let (without_proof, proof) = msg
            .rsplit_once(",p=")
            .ok_or(AuthError::Scram("missing proof"))?;
        let mut binding = None;
        let mut nonce = None;
        for a in without_proof.split(',') {
            if let Some(v) = a.strip_prefix("c=") {
                binding = Some(v);
            } else if let Some(v) = a.strip_prefix("r=") {
                nonce = Some(v);
            }
        }
        let binding = B64
            .decode(binding.ok_or(AuthError::Scram("missing channel binding"))?)
            .map_err(|_| AuthError::Scram("invalid channel binding"))?;
        if binding != self.gs2_header.as_bytes() {
            return Err(AuthError::Scram("channel binding does not match"));
        }
        if nonce != Some(self.nonce.as_str()) {
            return Err(AuthError::Scram("nonce does not match"));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| AuthError::Scram("invalid proof encoding"))?;
        let salted = self.secret.salted;
        let stored_key = sha256(&hmac(&salted, b"Client Key"));
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let signature = hmac(&stored_key, auth_message.as_bytes());
        if proof.len() != 32 {
            return Err(AuthError::BadPassword(user.into()));
        }
        let client_key: Vec<u8> = proof.iter().zip(signature).map(|(p, s)| p ^ s).collect();
        if !eq_ct(&sha256(&client_key), &stored_key) {
            return Err(AuthError::BadPassword(user.into()));
        }
        let server_sig = hmac(&hmac(&salted, b"Server Key"), auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_sig)))
    }
}

async fn scram(client: &mut Client, user: &str, secret: Secret) -> Result<(), AuthError> {
    // SCRAM-SHA-256-PLUS is never offered: TLS may end at the proxy.
    send(client, code::SASL, b"SCRAM-SHA-256\0\0").await?;
    let body = password_message(client).await?;
    let nul = body
        .iter()
        .position(|&b| b == 0)
        .ok_or(AuthError::Scram("missing mechanism"))?;
    if &body[..nul] != b"SCRAM-SHA-256" {
        return Err(AuthError::Scram("unsupported mechanism"));
    }
    let rest = &body[nul + 1..];
    let len = rest
        .get(..4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(AuthError::Scram("truncated"))?;
    let data = usize::try_from(len)
        .ok()
        .and_then(|l| rest.get(4..4 + l))
        .ok_or(AuthError::Scram("bad length"))?;
    let server_nonce = B64.encode(random::<18>()?);
    let state = Scram::start(secret, data, &server_nonce)?;
    send(client, code::SASL_CONTINUE, state.server_first().as_bytes()).await?;
    let client_final = password_message(client).await?;
    let server_final = state.finish(&client_final, user)?;
    send(client, code::SASL_FINAL, server_final.as_bytes()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exchange from RFC 7677, section 3 (user "user", password "pencil").
    #[test]
    fn rfc7677_example() {
        let salt: [u8; 16] = B64
            .decode("W22ZaJ0SNY7soEsUEjb6gQ==")
            .unwrap()
            .try_into()
            .unwrap();
        let s = Scram::start(
            Secret::new("pencil", salt),
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        )
        .unwrap();
        assert_eq!(
            s.server_first(),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let fin = s
            .finish(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                "user",
            )
            .unwrap();
        assert_eq!(fin, "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        let bad = s.finish(
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
            "user",
        );
        assert!(matches!(bad, Err(AuthError::BadPassword(_))));
        let secret = Secret::new("x", salt);
        assert!(Scram::start(secret, b"p=tls-server-end-point,,n=,r=abc", "x").is_err());
    }
}
