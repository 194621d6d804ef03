//! What onetrip answers a server's password request with, for a user whose
//! client it checked itself.

use super::{
    scram::{ClientKey, Verifier},
    secret::Md5Hash,
};

/// A user's credential for opening server connections.
#[derive(Clone)]
pub enum Credential {
    /// From `[pool] users`: any method the server asks for.
    Password(String),
    /// A ClientKey recovered from the client's SCRAM proof, with the
    /// verifier it fits: SCRAM-SHA-256 only, while the server keeps that
    /// verifier.
    ScramKeys {
        client_key: ClientKey,
        verifier: Verifier,
    },
    /// The stored md5 hash: md5 only.
    Md5Hash(Md5Hash),
}

// By hand: each is as good as the password to a server.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::Password(_) => "Credential::Password(hidden)",
            Credential::ScramKeys { .. } => "Credential::ScramKeys(hidden)",
            Credential::Md5Hash(_) => "Credential::Md5Hash(hidden)",
        })
    }
}

impl Credential {
    /// What it is, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Credential::Password(_) => "password",
            Credential::ScramKeys { .. } => "SCRAM-SHA-256 verifier",
            Credential::Md5Hash(_) => "md5 hash",
        }
    }
}
