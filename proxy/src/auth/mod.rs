//! Passwords onetrip checks and answers itself: the admin console's users,
//! and pooled logins of users in `[pool] users` or looked up with
//! `[pool] auth_query`. SCRAM-SHA-256 both ways (`scram.rs`), the stored
//! forms of passwords (`secret.rs`), what opens a user's server
//! connections (`credential.rs`), the exchanges with a client
//! (`exchange.rs`, over `client.rs`) and the looked-up secrets kept
//! (`cache.rs`).

pub mod cache;
pub(crate) mod client;
pub mod credential;
pub mod exchange;
pub mod scram;
pub mod secret;

pub use credential::Credential;
pub use secret::Secret;

use crate::wire::read::ReadError;
use ring::rand::SecureRandom;

/// Why a client was not let in; each maps to the FATAL error it gets.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("user \"{0}\" is not allowed to use the admin console")]
    UnknownUser(String),
    #[error("password authentication failed for user \"{0}\"")]
    BadPassword(String),
    /// PostgreSQL's answer to an empty cleartext password.
    #[error("empty password returned by client")]
    EmptyPassword,
    #[error("invalid SCRAM exchange: {0}")]
    Scram(&'static str),
    #[error("expected a password message, got message type '{}'", char::from(*.0))]
    Unexpected(u8),
    #[error("authentication not completed within {0:?}")]
    Timeout(std::time::Duration),
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// The server refused the connection that was to tell how it asks the
    /// user to authenticate: its ErrorResponse, for the client as it is.
    #[error("the upstream refused the login: {}", crate::wire::backend::error_field(.0, b'M').unwrap_or("error"))]
    Refused(bytes::Bytes),
    /// That connection failed otherwise.
    #[error("onetrip could not learn how the upstream authenticates user \"{user}\": {why}")]
    Upstream { user: String, why: String },
    /// `[pool] max_pools` pools exist already (`pooling::TooManyPools`).
    #[error("too many pools: {0} (database, user) pairs have pools already ([pool] max_pools)")]
    TooManyPools(usize),
    #[error(transparent)]
    Message(#[from] ReadError),
    #[error("I/O error during authentication: {0}")]
    Io(#[from] std::io::Error),
}

impl AuthError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            AuthError::UnknownUser(_) => "28000",
            AuthError::BadPassword(_) | AuthError::EmptyPassword => "28P01",
            // What postgres_fdw and dblink answer when they can't log in
            // to the server they were to use.
            AuthError::Lookup(_) => "08001",
            // A refusal goes to the client as the server wrote it.
            AuthError::Refused(_) | AuthError::Upstream { .. } => "08006",
            AuthError::TooManyPools(_) => "53300",
            AuthError::Message(ReadError::Frame(e)) => e.sqlstate(),
            _ => "08P01",
        }
    }
}

/// `[pool] auth_user` could not log in, or its `auth_query` failed: no
/// secret is known, so no client of that database can be checked.
#[derive(Debug, Clone, thiserror::Error)]
#[error("onetrip's auth_user \"{auth_user}\" could not look up passwords: {why}")]
pub struct LookupError {
    pub auth_user: String,
    /// The server's message, or what else went wrong.
    pub why: String,
}

/// How the server asks a user to authenticate: its first authentication
/// request at login (`session::pooled::password::method` finds it, once per
/// pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// AuthenticationOk at once: the server asks for nothing.
    Trust,
    /// AuthenticationCleartextPassword (pg_hba's `password`).
    Cleartext,
    Md5,
    /// SASL: SCRAM-SHA-256.
    Sasl,
    /// GSSAPI, SSPI or another onetrip does not answer.
    Other(i32),
}

impl Method {
    pub fn of(code: i32) -> Method {
        use crate::wire::backend::auth;
        match code {
            auth::OK => Method::Trust,
            auth::CLEARTEXT => Method::Cleartext,
            auth::MD5 => Method::Md5,
            auth::SASL => Method::Sasl,
            other => Method::Other(other),
        }
    }
}

pub(crate) fn random<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut b = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| AuthError::Io(std::io::Error::other("no system randomness")))?;
    Ok(b)
}
