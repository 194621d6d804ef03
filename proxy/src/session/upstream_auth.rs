//! The password exchange of a pooled server connection opened by onetrip
//! itself, for a user of `[pool] users`: SCRAM-SHA-256, md5 or a cleartext
//! password, whichever the server asks for.

use bytes::BytesMut;
use postgres_protocol::{
    authentication::{
        md5_hash,
        sasl::{ChannelBinding, SCRAM_SHA_256, ScramSha256},
    },
    message::frontend,
};

use crate::wire::backend::{self, auth};

/// Why a server's password request was not met.
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("the upstream asked for a password for user \"{0}\", which has none in [pool] users")]
    NoPassword(String),
    #[error("the upstream asked for authentication method {0}, which onetrip can't answer")]
    Method(i32),
    #[error("the upstream offered no SCRAM-SHA-256")]
    Mechanism,
    #[error("the upstream's SCRAM exchange failed: {0}")]
    Scram(std::io::Error),
    #[error("the upstream's authentication request is malformed")]
    Malformed,
}

/// One user's side of the exchange, message by message.
pub struct Answerer<'a> {
    user: &'a str,
    password: Option<&'a str>,
    scram: Option<ScramSha256>,
}

impl<'a> Answerer<'a> {
    pub fn new(user: &'a str, password: Option<&'a str>) -> Self {
        Answerer {
            user,
            password,
            scram: None,
        }
    }

    /// Writes into `out` the answer to the server's authentication request
    /// `msg` ('R', not AuthenticationOk); nothing for SASL's final message,
    /// which is only checked.
    pub fn answer(&mut self, msg: &[u8], out: &mut BytesMut) -> Result<(), PasswordError> {
        let code = backend::auth_code(msg).ok_or(PasswordError::Malformed)?;
        let data = backend::body(msg)
            .get(4..)
            .ok_or(PasswordError::Malformed)?;
        let password = || {
            self.password
                .ok_or_else(|| PasswordError::NoPassword(self.user.to_owned()))
        };
        match code {
            auth::CLEARTEXT => {
                let _ = frontend::password_message(password()?.as_bytes(), out);
            }
            auth::MD5 => {
                let salt: [u8; 4] = data
                    .get(..4)
                    .and_then(|s| s.try_into().ok())
                    .ok_or(PasswordError::Malformed)?;
                let hash = md5_hash(self.user.as_bytes(), password()?.as_bytes(), salt);
                let _ = frontend::password_message(hash.as_bytes(), out);
            }
            auth::SASL => {
                let offered = data
                    .split(|b| *b == 0)
                    .any(|m| m == SCRAM_SHA_256.as_bytes());
                if !offered {
                    return Err(PasswordError::Mechanism);
                }
                // Without channel binding: the connection is plain TCP.
                let scram = ScramSha256::new(password()?.as_bytes(), ChannelBinding::unsupported());
                let _ = frontend::sasl_initial_response(SCRAM_SHA_256, scram.message(), out);
                self.scram = Some(scram);
            }
            auth::SASL_CONTINUE => {
                let scram = self.scram.as_mut().ok_or(PasswordError::Malformed)?;
                scram.update(data).map_err(PasswordError::Scram)?;
                let _ = frontend::sasl_response(scram.message(), out);
            }
            auth::SASL_FINAL => {
                let scram = self.scram.as_mut().ok_or(PasswordError::Malformed)?;
                // The server proves it knows the password too.
                scram.finish(data).map_err(PasswordError::Scram)?;
            }
            other => return Err(PasswordError::Method(other)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(code: i32, data: &[u8]) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend_from_slice(&(8 + data.len() as i32).to_be_bytes());
        m.extend_from_slice(&code.to_be_bytes());
        m.extend_from_slice(data);
        m
    }

    #[test]
    fn each_request_gets_its_answer_or_a_named_error() {
        let mut out = BytesMut::new();
        let mut a = Answerer::new("u", Some("pw"));
        a.answer(&request(auth::CLEARTEXT, &[]), &mut out).unwrap();
        assert_eq!(&out[..], b"p\0\0\0\x07pw\0");
        out.clear();
        a.answer(&request(auth::MD5, b"salt"), &mut out).unwrap();
        let hash = md5_hash(b"u", b"pw", *b"salt");
        assert_eq!(&out[5..out.len() - 1], hash.as_bytes());
        assert!(matches!(
            a.answer(&request(auth::SASL, b"OTHER\0\0"), &mut out),
            Err(PasswordError::Mechanism)
        ));
        assert!(matches!(
            a.answer(&request(auth::SASL_CONTINUE, b"r=x"), &mut out),
            Err(PasswordError::Malformed)
        ));
        assert!(matches!(
            a.answer(&request(auth::GSS, &[]), &mut out),
            Err(PasswordError::Method(auth::GSS))
        ));
        let mut none = Answerer::new("v", None);
        let e = none.answer(&request(auth::MD5, b"salt"), &mut out);
        assert!(matches!(e, Err(PasswordError::NoPassword(u)) if u == "v"));
    }
}
