//! SCRAM-SHA-256 (RFC 5802, RFC 7677), without channel binding, both ways:
//! onetrip as the server a client proves its password to, against a
//! `Verifier` (PostgreSQL's stored form of a password), and as the client
//! of a server, proving the password with the password itself or with the
//! ClientKey recovered from a client's proof, so that no password need be
//! kept (PgBouncer does the same with `auth_query`).

use base64::{Engine, engine::general_purpose::STANDARD as B64};
use ring::{digest, hmac, pbkdf2};

use super::AuthError;

/// PostgreSQL's default `scram_iterations`.
pub const ITERATIONS: u32 = 4096;

pub(crate) fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// Equal, in a time that doesn't tell where they differ.
pub(crate) fn eq_ct(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn xor(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

/// A password as PostgreSQL stores it for SCRAM-SHA-256
/// (`pg_authid.rolpassword`): enough to check a client's proof, and to
/// prove the password to a server once a client's proof has given the
/// ClientKey, but not the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

// By hand: the keys are as good as the password to a server.
impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// HMAC(SaltedPassword, "Client Key"): what a client's proof proves it
/// knows. Never logged.
#[derive(Clone)]
pub struct ClientKey([u8; 32]);

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientKey(hidden)")
    }
}

impl ClientKey {
    /// Whether `verifier` was made from the password this key was.
    pub fn fits(&self, verifier: &Verifier) -> bool {
        eq_ct(&sha256(&self.0), &verifier.stored_key)
    }
}

impl Verifier {
    /// Made from a password as PostgreSQL makes one: SASLprep, then PBKDF2
    /// of `iterations` rounds (milliseconds at the default count).
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> Verifier {
        Self::with_client_key(password, salt, iterations).1
    }

    /// The ClientKey of `password` too, which only the password gives.
    pub fn with_client_key(password: &str, salt: &[u8], iterations: u32) -> (ClientKey, Verifier) {
        // PostgreSQL uses the raw password when SASLprep rejects it.
        let password = stringprep::saslprep(password)
            .map(|p| p.into_owned())
            .unwrap_or_else(|_| password.into());
        let mut salted = [0u8; 32];
        let rounds = std::num::NonZeroU32::new(iterations).unwrap_or(std::num::NonZeroU32::MIN);
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            rounds,
            salt,
            password.as_bytes(),
            &mut salted,
        );
        let client_key = hmac(&salted, b"Client Key");
        let verifier = Verifier {
            salt: salt.to_vec(),
            iterations,
            stored_key: sha256(&client_key),
            server_key: hmac(&salted, b"Server Key"),
        };
        (ClientKey(client_key), verifier)
    }

    /// Whether it was made from `password`: its keys derived again with
    /// its salt and iteration count (PBKDF2: milliseconds), StoredKey
    /// compared.
    pub fn is_of(&self, password: &str) -> bool {
        let derived = Self::from_password(password, &self.salt, self.iterations);
        eq_ct(&derived.stored_key, &self.stored_key)
    }

    /// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64
    /// each), as in `pg_authid.rolpassword`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Verifier> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let iterations: u32 = iterations.parse().ok().filter(|i| *i > 0)?;
        let salt = B64.decode(salt).ok().filter(|s| !s.is_empty())?;
        let key = |k: &str| -> Option<[u8; 32]> { B64.decode(k).ok()?.try_into().ok() };
        Some(Verifier {
            salt,
            iterations,
            stored_key: key(stored)?,
            server_key: key(server)?,
        })
    }
}

/// The server's view of one SCRAM-SHA-256 exchange, as pure functions over
/// the messages so it can be tested without a socket.
pub struct Scram {
    verifier: Verifier,
    nonce: String,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
}

impl Scram {
    /// Parses client-first-message and builds server-first-message, with
    /// the verifier's salt and iteration count.
    pub fn start(
        verifier: Verifier,
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
            "r={nonce},s={},i={}",
            B64.encode(&verifier.salt),
            verifier.iterations
        );
        Ok(Self {
            verifier,
            nonce,
            gs2_header: format!("{flag},{authzid},"),
            client_first_bare: bare.into(),
            server_first,
        })
    }

    pub fn server_first(&self) -> &str {
        &self.server_first
    }

    /// Checks client-final-message; returns server-final-message and the
    /// ClientKey the proof was made with.
    pub fn finish(
        &self,
        client_final: &[u8],
        user: &str,
    ) -> Result<(String, ClientKey), AuthError> {
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
        let Ok(proof) = <[u8; 32]>::try_from(proof) else {
            return Err(AuthError::BadPassword(user.into()));
        };
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let signature = hmac(&self.verifier.stored_key, auth_message.as_bytes());
        let client_key = ClientKey(xor(&proof, &signature));
        if !client_key.fits(&self.verifier) {
            return Err(AuthError::BadPassword(user.into()));
        }
        let server_sig = hmac(&self.verifier.server_key, auth_message.as_bytes());
        Ok((format!("v={}", B64.encode(server_sig)), client_key))
    }
}

/// What a client proves to a server with.
pub enum Proof<'a> {
    /// The password: salted with the server's salt, whatever it is.
    Password(&'a str),
    /// A ClientKey and the verifier it fits: good only while the server
    /// stores that verifier (the same salt and iteration count).
    Keys(&'a ClientKey, &'a Verifier),
}

/// Why onetrip, as a client, could not complete a server's exchange.
#[derive(Debug, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message from the server: {0}")]
    Malformed(&'static str),
    #[error("the server's nonce does not start with onetrip's")]
    Nonce,
    #[error(
        "the server's salt or iteration count is not the looked-up verifier's (the password was changed since it was looked up)"
    )]
    Changed,
    #[error("the server refused the SCRAM proof: {0}")]
    Refused(String),
    #[error("the server's SCRAM signature is wrong: it does not hold the password")]
    Signature,
}

/// The client's view of one SCRAM-SHA-256 exchange with a server.
pub struct ClientScram {
    client_first_bare: String,
    nonce: String,
    /// HMAC(ServerKey, AuthMessage), once the proof is sent.
    server_signature: Option<[u8; 32]>,
}

impl ClientScram {
    /// With the client nonce `nonce` (printable, no commas).
    pub fn new(nonce: &str) -> Self {
        // No user name: PostgreSQL takes the startup packet's.
        Self::named("", nonce)
    }

    fn named(user: &str, nonce: &str) -> Self {
        Self {
            client_first_bare: format!("n={user},r={nonce}"),
            nonce: nonce.to_owned(),
            server_signature: None,
        }
    }

    /// client-first-message, announcing no channel binding.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// Reads server-first-message; returns client-final-message.
    pub fn answer(&mut self, server_first: &[u8], proof: Proof<'_>) -> Result<String, ScramError> {
        let msg =
            std::str::from_utf8(server_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let mut attrs = msg.split(',');
        let mut next = |name: &'static str| {
            attrs
                .next()
                .and_then(|a| a.strip_prefix(name))
                .ok_or(ScramError::Malformed(name))
        };
        let nonce = next("r=")?;
        let salt = B64
            .decode(next("s=")?)
            .map_err(|_| ScramError::Malformed("salt is not base64"))?;
        let iterations: u32 = next("i=")?
            .parse()
            .map_err(|_| ScramError::Malformed("iteration count is not a number"))?;
        if nonce.len() <= self.nonce.len() || !nonce.starts_with(&self.nonce) {
            return Err(ScramError::Nonce);
        }
        let derived;
        let (client_key, verifier) = match proof {
            Proof::Password(p) => {
                derived = Verifier::with_client_key(p, &salt, iterations);
                (&derived.0, &derived.1)
            }
            Proof::Keys(k, v) if v.salt == salt && v.iterations == iterations => (k, v),
            Proof::Keys(..) => return Err(ScramError::Changed),
        };
        // "biws": the GS2 header "n,," in base64.
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{msg},{without_proof}", self.client_first_bare);
        let signature = hmac(&verifier.stored_key, auth_message.as_bytes());
        let proof = xor(&client_key.0, &signature);
        self.server_signature = Some(hmac(&verifier.server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks server-final-message: the server proves it holds the
    /// password too.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let msg =
            std::str::from_utf8(server_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        if let Some(e) = msg.strip_prefix("e=") {
            return Err(ScramError::Refused(e.to_owned()));
        }
        let want = self
            .server_signature
            .ok_or(ScramError::Malformed("final message before the proof"))?;
        let given = msg
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .and_then(|v| B64.decode(v).ok())
            .ok_or(ScramError::Malformed("v="))?;
        match eq_ct(&given, &want) {
            true => Ok(()),
            false => Err(ScramError::Signature),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const RFC_CLIENT_FIRST: &[u8] = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &[u8] = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_verifier() -> (ClientKey, Verifier) {
        Verifier::with_client_key("pencil", &B64.decode(RFC_SALT).unwrap(), 4096)
    }

    /// The exchange from RFC 7677, section 3 (user "user", password
    /// "pencil"), on the server's side.
    #[test]
    fn rfc7677_example_as_the_server() {
        let (key, verifier) = rfc_verifier();
        let s = Scram::start(verifier.clone(), RFC_CLIENT_FIRST, RFC_SERVER_NONCE).unwrap();
        assert_eq!(s.server_first(), RFC_SERVER_FIRST);
        let (fin, recovered) = s.finish(RFC_CLIENT_FINAL, "user").unwrap();
        assert_eq!(fin, RFC_SERVER_FINAL);
        // The proof gives the client's key, and that key alone.
        assert_eq!(recovered.0, key.0);
        assert!(recovered.fits(&verifier));
        let bad = s.finish(
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
            "user",
        );
        assert!(matches!(bad, Err(AuthError::BadPassword(_))));
        let flipped = std::str::from_utf8(RFC_CLIENT_FINAL)
            .unwrap()
            .replace("p=dHzb", "p=dHzc");
        let bad = s.finish(flipped.as_bytes(), "user");
        assert!(matches!(bad, Err(AuthError::BadPassword(_))));
        assert!(Scram::start(verifier, b"p=tls-server-end-point,,n=,r=abc", "x").is_err());
    }

    /// The same exchange on the client's side, once with the password and
    /// once with only the ClientKey and the verifier: both make the RFC's
    /// proof and accept its server signature.
    #[test]
    fn rfc7677_example_as_the_client() {
        let (key, verifier) = rfc_verifier();
        let rfc_final = std::str::from_utf8(RFC_CLIENT_FINAL).unwrap();
        for proof in [Proof::Password("pencil"), Proof::Keys(&key, &verifier)] {
            // The RFC's client names its user; PostgreSQL's clients don't.
            let mut c = ClientScram::named("user", "rOprNGfwEbeRWgbNEkqO");
            assert_eq!(c.client_first().as_bytes(), RFC_CLIENT_FIRST);
            let answer = c.answer(RFC_SERVER_FIRST.as_bytes(), proof).unwrap();
            assert_eq!(answer, rfc_final);
            assert!(matches!(c.verify(b"v=AAAA"), Err(ScramError::Signature)));
            assert!(matches!(
                c.verify(b"e=invalid-proof"),
                Err(ScramError::Refused(e)) if e == "invalid-proof"
            ));
            c.verify(RFC_SERVER_FINAL.as_bytes()).unwrap();
        }
    }

    /// A client and a server of onetrip's agree with each other, and a
    /// key made for another salt is refused before anything is sent.
    #[test]
    fn onetrip_client_against_onetrip_server() {
        let (key, verifier) = Verifier::with_client_key("s3cret", b"0123456789abcdef", 4096);
        let mut c = ClientScram::new("clientnonce");
        let s = Scram::start(verifier.clone(), c.client_first().as_bytes(), "servernonce").unwrap();
        let fin = c
            .answer(s.server_first().as_bytes(), Proof::Keys(&key, &verifier))
            .unwrap();
        let (server_final, recovered) = s.finish(fin.as_bytes(), "u").unwrap();
        assert!(recovered.fits(&verifier));
        c.verify(server_final.as_bytes()).unwrap();
        let mut c = ClientScram::new("clientnonce");
        let other = Verifier::from_password("s3cret", b"another salt....", 4096);
        let server_first = format!("r=clientnonceX,s={},i=4096", B64.encode(&other.salt));
        assert!(matches!(
            c.answer(server_first.as_bytes(), Proof::Keys(&key, &verifier)),
            Err(ScramError::Changed)
        ));
        // A server whose nonce is not onetrip's own, extended.
        let mut c = ClientScram::new("clientnonce");
        assert!(matches!(
            c.answer(b"r=othernonce,s=AAAA,i=4096", Proof::Password("x")),
            Err(ScramError::Nonce)
        ));
    }

    /// A verifier PostgreSQL 15 made itself, on a private server:
    /// `SET password_encryption = 'scram-sha-256'; CREATE ROLE x PASSWORD
    /// 'p'; SELECT rolpassword FROM pg_authid WHERE rolname = 'x'`. The
    /// same password, salt and count make the same keys here.
    #[test]
    fn a_verifier_postgresql_made() {
        let v = Verifier::parse(PG_VERIFIER).unwrap();
        assert_eq!(v.iterations, 4096);
        assert_eq!(Verifier::from_password("p", &v.salt, v.iterations), v);
        assert_ne!(Verifier::from_password("q", &v.salt, v.iterations), v);
        assert!(v.is_of("p") && !v.is_of("q") && !v.is_of(""));
        for bad in [
            "md5aaaa",
            "SCRAM-SHA-256$0:AAAA$AAAA:AAAA",
            "SCRAM-SHA-256$4096:$AAAA:AAAA",
            "SCRAM-SHA-256$4096:AAAA$AAAA:AAAA",
            "SCRAM-SHA-256$x:AAAA$AAAA:AAAA",
            "",
        ] {
            assert!(Verifier::parse(bad).is_none(), "{bad}");
        }
        let shown = format!("{v:?}");
        assert!(!shown.contains(&B64.encode(v.stored_key)), "{shown}");
    }

    const PG_VERIFIER: &str = "SCRAM-SHA-256$4096:E/ACd8V2TTYSOHETnWWRkw==$JLCoF/XTFzDqVmTzMMH/t5MivVby0K1HWBdWJqwm/4U=:jDm7jPVbJh+9H7Wlr6WR0kuwXvxVtmXEEHjkMz758MU=";
}
