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
    #[error("invalid SCRAM exchange: {0}")]
    Scram(&'static str),
    #[error("expected a password message, got message type '{}'", char::from(*.0))]
    Unexpected(u8),
    #[error("authentication not completed within {0:?}")]
    Timeout(std::time::Duration),
    #[error(transparent)]
    Lookup(#[from] LookupError),
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
            // What postgres_fdw and dblink answer when they can't log in
            // to the server they were to use.
            AuthError::Lookup(_) => "08001",
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

pub(crate) fn random<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut b = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| AuthError::Io(std::io::Error::other("no system randomness")))?;
    Ok(b)
}
