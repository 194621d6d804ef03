//! A user's password as the server stores it, which `[pool] auth_query`
//! returns in `passwd`: a SCRAM-SHA-256 verifier or an md5 hash. And the
//! verifier a name without one is checked against, so that it fails as a
//! wrong password does.

use md5::{Digest, Md5};

use super::scram::{self, Verifier};

/// A stored password.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    Scram(Verifier),
    Md5(Md5Hash),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Secret::Scram(v) => v.fmt(f),
            Secret::Md5(h) => h.fmt(f),
        }
    }
}

/// A `passwd` that is neither form (the value is not repeated: it may be
/// a password).
#[derive(Debug, thiserror::Error)]
#[error("its passwd is neither a SCRAM-SHA-256 verifier nor an md5 hash")]
pub struct SecretError;

impl Secret {
    /// `SCRAM-SHA-256$...` or `md5` and 32 hex digits.
    pub fn parse(passwd: &str) -> Result<Secret, SecretError> {
        if let Some(v) = Verifier::parse(passwd) {
            return Ok(Secret::Scram(v));
        }
        Md5Hash::parse(passwd).map(Secret::Md5).ok_or(SecretError)
    }
}

/// md5(password + user) in lowercase hex, as PostgreSQL stores it after
/// "md5": what its md5 exchange proves knowledge of, on both sides.
#[derive(Clone, PartialEq, Eq)]
pub struct Md5Hash(String);

impl std::fmt::Debug for Md5Hash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Md5Hash(hidden)")
    }
}

fn md5_hex(parts: &[&[u8]]) -> String {
    let mut md5 = Md5::new();
    for p in parts {
        md5.update(p);
    }
    md5.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

impl Md5Hash {
    pub fn of_password(user: &str, password: &str) -> Md5Hash {
        Md5Hash(md5_hex(&[password.as_bytes(), user.as_bytes()]))
    }

    /// Whether it is `user`'s hash of `password`.
    pub fn is_of(&self, user: &str, password: &str) -> bool {
        let other = Self::of_password(user, password);
        scram::eq_ct(other.0.as_bytes(), self.0.as_bytes())
    }

    /// `md5` and 32 hex digits (`pg_authid.rolpassword`).
    pub fn parse(text: &str) -> Option<Md5Hash> {
        let hex = text.strip_prefix("md5")?;
        let ok = hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit());
        ok.then(|| Md5Hash(hex.to_ascii_lowercase()))
    }

    /// The answer to an AuthenticationMD5Password with `salt`:
    /// "md5" + md5(hash + salt).
    pub fn answer(&self, salt: [u8; 4]) -> String {
        format!("md5{}", md5_hex(&[self.0.as_bytes(), &salt]))
    }
}

/// The verifier a name with no password is checked against: the shape of
/// a real one, its salt the same at each attempt for the same name (as a
/// real user's is), made from a key that lives only in this process, so
/// no proof fits it and nothing tells it from a real one.
pub fn mock(user: &str) -> Verifier {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(|| super::random::<32>().unwrap_or_default());
    let salt = scram::hmac(key, &[b"salt\0", user.as_bytes()].concat());
    Verifier {
        salt: salt[..16].to_vec(),
        iterations: scram::ITERATIONS,
        stored_key: scram::hmac(key, &[b"stored\0", user.as_bytes()].concat()),
        server_key: scram::hmac(key, &[b"server\0", user.as_bytes()].concat()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL 15's hash of password "p" for role "y", made as the
    /// verifier in `scram.rs` was (`SET password_encryption = 'md5'`).
    const PG_MD5: &str = "md5dfed5bc177b87ab317c584e06566adc6";

    #[test]
    fn md5_hashes_and_answers_as_postgresql() {
        let h = Md5Hash::parse(PG_MD5).unwrap();
        assert_eq!(h, Md5Hash::of_password("y", "p"));
        assert!(h.is_of("y", "p"));
        assert!(!h.is_of("y", "q") && !h.is_of("z", "p"));
        // postgres-protocol's client answer, from the password.
        let salt = *b"salt";
        let client = postgres_protocol::authentication::md5_hash(b"y", b"p", salt);
        assert_eq!(h.answer(salt), client);
        assert!(!format!("{h:?}").contains("dfed"));
        for bad in [
            "md5",
            "md5xyz",
            "dfed5bc177b87ab317c584e06566adc6",
            "md5dfed5bc177b87ab317c584e06566adc6a",
        ] {
            assert!(Md5Hash::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn secrets_of_either_form_or_an_error() {
        assert!(matches!(Secret::parse(PG_MD5), Ok(Secret::Md5(_))));
        let v = "SCRAM-SHA-256$4096:E/ACd8V2TTYSOHETnWWRkw==$JLCoF/XTFzDqVmTzMMH/t5MivVby0K1HWBdWJqwm/4U=:jDm7jPVbJh+9H7Wlr6WR0kuwXvxVtmXEEHjkMz758MU=";
        assert!(matches!(Secret::parse(v), Ok(Secret::Scram(_))));
        let e = Secret::parse("plain password").unwrap_err().to_string();
        assert!(!e.contains("plain"), "{e}");
    }

    #[test]
    fn a_mock_verifier_is_the_same_for_a_name_and_differs_between_names() {
        assert_eq!(mock("a"), mock("a"));
        assert_ne!(mock("a").salt, mock("b").salt);
        assert_eq!(mock("a").salt.len(), 16);
    }
}
