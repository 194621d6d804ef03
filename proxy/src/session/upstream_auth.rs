//! The password exchange of a server connection opened by onetrip itself,
//! for a user whose client it checked: SCRAM-SHA-256, md5 or a cleartext
//! password, whichever the server asks for and the user's credential can
//! answer.

use base64::{Engine, engine::general_purpose::STANDARD as B64};
use bytes::BytesMut;
use postgres_protocol::message::frontend;

use crate::{
    auth::{
        Credential,
        scram::{ClientScram, Proof, ScramError},
        secret::Md5Hash,
    },
    wire::backend::{self, auth},
};

/// SCRAM-SHA-256's name in the SASL messages.
const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

/// Why a server's password request was not met.
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error(
        "the upstream asked for a password for user \"{0}\", which onetrip has none of (not in [pool] users)"
    )]
    NoPassword(String),
    #[error(
        "the upstream asked for {asked} for user \"{user}\", which its {has} can't answer (only a password in [pool] users answers every method)"
    )]
    Unanswerable {
        user: String,
        asked: &'static str,
        has: &'static str,
    },
    #[error("the upstream asked for authentication method {0}, which onetrip can't answer")]
    Method(i32),
    #[error("the upstream offered no SCRAM-SHA-256")]
    Mechanism,
    #[error("the upstream's SCRAM exchange failed: {0}")]
    Scram(#[from] ScramError),
    #[error("the upstream's authentication request is malformed")]
    Malformed,
    #[error("no system randomness for a SCRAM nonce")]
    Random,
}

/// One user's side of the exchange, message by message.
pub struct Answerer<'a> {
    user: &'a str,
    credential: Option<&'a Credential>,
    scram: Option<ClientScram>,
}

impl<'a> Answerer<'a> {
    pub fn new(user: &'a str, credential: Option<&'a Credential>) -> Self {
        Answerer {
            user,
            credential,
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
        let known = [
            auth::CLEARTEXT,
            auth::MD5,
            auth::SASL,
            auth::SASL_CONTINUE,
            auth::SASL_FINAL,
        ];
        if !known.contains(&code) {
            return Err(PasswordError::Method(code));
        }
        let credential = self
            .credential
            .ok_or_else(|| PasswordError::NoPassword(self.user.to_owned()))?;
        let cannot = |asked| PasswordError::Unanswerable {
            user: self.user.to_owned(),
            asked,
            has: credential.kind(),
        };
        match code {
            auth::CLEARTEXT => match credential {
                Credential::Password(p) => {
                    let _ = frontend::password_message(p.as_bytes(), out);
                }
                _ => return Err(cannot("a cleartext password")),
            },
            auth::MD5 => {
                let salt: [u8; 4] = data
                    .get(..4)
                    .and_then(|s| s.try_into().ok())
                    .ok_or(PasswordError::Malformed)?;
                let answer = match credential {
                    Credential::Password(p) => Md5Hash::of_password(self.user, p).answer(salt),
                    Credential::Md5Hash(h) => h.answer(salt),
                    Credential::ScramKeys { .. } => return Err(cannot("md5")),
                };
                let _ = frontend::password_message(answer.as_bytes(), out);
            }
            auth::SASL => {
                let offered = data
                    .split(|b| *b == 0)
                    .any(|m| m == SCRAM_SHA_256.as_bytes());
                if !offered {
                    return Err(PasswordError::Mechanism);
                }
                if matches!(credential, Credential::Md5Hash(_)) {
                    return Err(cannot("SCRAM-SHA-256"));
                }
                let nonce = crate::auth::random::<18>().map_err(|_| PasswordError::Random)?;
                // Without channel binding: the connection is plain TCP.
                let scram = ClientScram::new(&B64.encode(nonce));
                let first = scram.client_first();
                let _ = frontend::sasl_initial_response(SCRAM_SHA_256, first.as_bytes(), out);
                self.scram = Some(scram);
            }
            auth::SASL_CONTINUE => {
                let scram = self.scram.as_mut().ok_or(PasswordError::Malformed)?;
                let proof = match credential {
                    Credential::Password(p) => Proof::Password(p),
                    Credential::ScramKeys {
                        client_key,
                        verifier,
                    } => Proof::Keys(client_key, verifier),
                    Credential::Md5Hash(_) => return Err(cannot("SCRAM-SHA-256")),
                };
                let answer = scram.answer(data, proof)?;
                let _ = frontend::sasl_response(answer.as_bytes(), out);
            }
            auth::SASL_FINAL => {
                let scram = self.scram.as_mut().ok_or(PasswordError::Malformed)?;
                // The server proves it knows the password too.
                scram.verify(data)?;
            }
            _ => return Err(PasswordError::Method(code)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::scram::{Scram, Verifier};

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
        let pw = Credential::Password("pw".into());
        let mut a = Answerer::new("u", Some(&pw));
        a.answer(&request(auth::CLEARTEXT, &[]), &mut out).unwrap();
        assert_eq!(&out[..], b"p\0\0\0\x07pw\0");
        out.clear();
        a.answer(&request(auth::MD5, b"salt"), &mut out).unwrap();
        let hash = postgres_protocol::authentication::md5_hash(b"u", b"pw", *b"salt");
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
        assert!(matches!(
            none.answer(&request(auth::GSS, &[]), &mut out),
            Err(PasswordError::Method(auth::GSS))
        ));
    }

    /// The body of the SASL message in `out` after its mechanism name
    /// (initial response) or its header (response).
    fn sasl_data(out: &[u8], initial: bool) -> Vec<u8> {
        let body = &out[5..];
        match initial {
            true => {
                let nul = body.iter().position(|b| *b == 0).unwrap();
                body[nul + 5..].to_vec()
            }
            false => body.to_vec(),
        }
    }

    /// Keys recovered from a client's proof answer a server that holds the
    /// verifier, as the password itself does; a server with another
    /// verifier (the password changed) is named, not answered wrongly.
    #[test]
    fn scram_keys_answer_a_server_as_the_password_does() {
        let (client_key, verifier) = Verifier::with_client_key("secret", b"0123456789abcdef", 4096);
        let keys = Credential::ScramKeys {
            client_key,
            verifier: verifier.clone(),
        };
        let password = Credential::Password("secret".into());
        for credential in [&keys, &password] {
            let mut a = Answerer::new("u", Some(credential));
            let mut out = BytesMut::new();
            a.answer(&request(auth::SASL, b"SCRAM-SHA-256\0\0"), &mut out)
                .unwrap();
            let first = sasl_data(&out, true);
            let server = Scram::start(verifier.clone(), &first, "srv").unwrap();
            out.clear();
            let cont = request(auth::SASL_CONTINUE, server.server_first().as_bytes());
            a.answer(&cont, &mut out).unwrap();
            let (fin, _) = server.finish(&sasl_data(&out, false), "u").unwrap();
            out.clear();
            a.answer(&request(auth::SASL_FINAL, fin.as_bytes()), &mut out)
                .unwrap();
            assert!(out.is_empty());
            // A forged server signature is refused.
            let forged = request(
                auth::SASL_FINAL,
                b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            );
            assert!(matches!(
                a.answer(&forged, &mut out),
                Err(PasswordError::Scram(ScramError::Signature))
            ));
        }
        let other = Verifier::from_password("new", b"fedcba9876543210", 4096);
        let mut a = Answerer::new("u", Some(&keys));
        let mut out = BytesMut::new();
        a.answer(&request(auth::SASL, b"SCRAM-SHA-256\0\0"), &mut out)
            .unwrap();
        let first = sasl_data(&out, true);
        let server = Scram::start(other, &first, "srv").unwrap();
        let cont = request(auth::SASL_CONTINUE, server.server_first().as_bytes());
        assert!(matches!(
            a.answer(&cont, &mut out),
            Err(PasswordError::Scram(ScramError::Changed))
        ));
    }

    /// A stored md5 hash answers md5 as its password would, and nothing
    /// else; keys answer SCRAM only.
    #[test]
    fn hashes_and_keys_answer_only_their_own_method() {
        let hash = Credential::Md5Hash(Md5Hash::of_password("u", "pw"));
        let mut out = BytesMut::new();
        Answerer::new("u", Some(&hash))
            .answer(&request(auth::MD5, b"salt"), &mut out)
            .unwrap();
        let want = postgres_protocol::authentication::md5_hash(b"u", b"pw", *b"salt");
        assert_eq!(&out[5..out.len() - 1], want.as_bytes());
        let unanswerable = |c: &Credential, code, data: &[u8]| {
            let mut out = BytesMut::new();
            let e = Answerer::new("u", Some(c)).answer(&request(code, data), &mut out);
            match e {
                Err(e @ PasswordError::Unanswerable { .. }) => e.to_string(),
                other => panic!("{other:?}"),
            }
        };
        let e = unanswerable(&hash, auth::SASL, b"SCRAM-SHA-256\0\0");
        assert!(e.contains("SCRAM-SHA-256") && e.contains("md5 hash"), "{e}");
        unanswerable(&hash, auth::CLEARTEXT, b"");
        let (client_key, verifier) = Verifier::with_client_key("pw", b"salt", 4096);
        let keys = Credential::ScramKeys {
            client_key,
            verifier,
        };
        let e = unanswerable(&keys, auth::MD5, b"salt");
        assert!(
            e.contains("md5") && e.contains("SCRAM-SHA-256 verifier"),
            "{e}"
        );
        unanswerable(&keys, auth::CLEARTEXT, b"");
    }
}
