//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them: the stored
//! credentials (salt, iterations, stored key, server key per user and mechanism), their
//! changes by AlterUserScramCredentials (Kafka's `ScramControlManager` rules), their file form,
//! and the server side of one authentication exchange.
//!
//! Everything here is synchronous and I/O-free: the server nonce comes in from the caller
//! (the runtime draws it from the system's secure random source) and the credentials file is
//! read and written by `runtime::credentials`.
//!
//! The server exchange ([`ScramServer`]):
//!
//! | state            | input                  | output                                   | next            |
//! |------------------|------------------------|------------------------------------------|-----------------|
//! | ExpectFirst      | client-first, known    | server-first `r=..,s=..,i=..`            | ExpectFinal     |
//! | ExpectFirst      | malformed / unknown    | error                                    | Failed          |
//! | ExpectFinal      | client-final, proof ok | server-final `v=..`                      | Done(user)      |
//! | ExpectFinal      | bad nonce / proof      | error                                    | Failed          |
//! | Done / Failed    | anything               | error                                    | Failed          |

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::num::NonZeroU32;

use crate::constants::{SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN};
use crate::security::sasl::Mechanism;

/// Kafka's error codes of AlterUserScramCredentials / DescribeUserScramCredentials.
pub const RESOURCE_NOT_FOUND: i16 = 91;
pub const DUPLICATE_RESOURCE: i16 = 92;
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;

impl Mechanism {
    /// Kafka's SCRAM mechanism type byte (`ScramMechanism.type()`): 1 SHA-256, 2 SHA-512.
    pub fn scram_type(self) -> Option<i8> {
        match self {
            Mechanism::ScramSha256 => Some(1),
            Mechanism::ScramSha512 => Some(2),
            Mechanism::Plain => None,
        }
    }

    pub fn from_scram_type(t: i8) -> Option<Mechanism> {
        match t {
            1 => Some(Mechanism::ScramSha256),
            2 => Some(Mechanism::ScramSha512),
            _ => None,
        }
    }

    fn hmac_alg(self) -> hmac::Algorithm {
        match self {
            Mechanism::ScramSha512 => hmac::HMAC_SHA512,
            _ => hmac::HMAC_SHA256,
        }
    }

    fn digest_alg(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::ScramSha512 => &digest::SHA512,
            _ => &digest::SHA256,
        }
    }

    fn pbkdf2_alg(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::ScramSha512 => pbkdf2::PBKDF2_HMAC_SHA512,
            _ => pbkdf2::PBKDF2_HMAC_SHA256,
        }
    }

    fn hash_bytes(self) -> usize {
        self.digest_alg().output_len()
    }
}

fn hmac_of(m: Mechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(m.hmac_alg(), key), data)
        .as_ref()
        .to_vec()
}

/// `Hi(password, salt, iterations)`: the salted password (PBKDF2 with the mechanism's HMAC).
pub fn salted_password(m: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut out = vec![0u8; m.hash_bytes()];
    let n = NonZeroU32::new(iterations.max(1)).expect("at least 1");
    pbkdf2::derive(m.pbkdf2_alg(), n, salt, password, &mut out);
    out
}

/// What the broker stores for one user and mechanism (never the password).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: i32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    /// The credential of a salted password (what AlterUserScramCredentials carries).
    pub fn from_salted_password(
        m: Mechanism,
        salt: &[u8],
        iterations: i32,
        salted: &[u8],
    ) -> ScramCredential {
        let client_key = hmac_of(m, salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            iterations,
            stored_key: digest::digest(m.digest_alg(), &client_key)
                .as_ref()
                .to_vec(),
            server_key: hmac_of(m, salted, b"Server Key"),
        }
    }

    pub fn from_password(m: Mechanism, password: &str, salt: &[u8], iterations: i32) -> Self {
        let salted = salted_password(m, password.as_bytes(), salt, iterations as u32);
        ScramCredential::from_salted_password(m, salt, iterations, &salted)
    }
}

/// One user's result of an AlterUserScramCredentials request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterResult {
    pub user: String,
    pub error: i16,
    pub message: Option<String>,
}

/// One upsertion of AlterUserScramCredentials.
#[derive(Clone, Debug)]
pub struct Upsertion {
    pub user: String,
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Vec<u8>,
    pub salted_password: Vec<u8>,
}

/// One user's result of DescribeUserScramCredentials: `(mechanism type, iterations)` pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribeResult {
    pub user: String,
    pub error: i16,
    pub message: Option<String>,
    pub credentials: Vec<(i8, i32)>,
}

/// Every SCRAM credential of the broker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScramCredentials {
    by_user: BTreeMap<(String, Mechanism), ScramCredential>,
}

fn failure(user: &str, error: i16, message: &str) -> AlterResult {
    AlterResult {
        user: user.to_string(),
        error,
        message: Some(message.to_string()),
    }
}

impl ScramCredentials {
    pub fn get(&self, user: &str, m: Mechanism) -> Option<&ScramCredential> {
        self.by_user.get(&(user.to_string(), m))
    }

    pub fn insert(&mut self, user: &str, m: Mechanism, credential: ScramCredential) {
        assert!(m.scram_type().is_some(), "a SCRAM mechanism");
        self.by_user.insert((user.to_string(), m), credential);
    }

    pub fn len(&self) -> usize {
        self.by_user.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_user.is_empty()
    }

    /// Applies AlterUserScramCredentials as Kafka's controller does: a user named twice in one
    /// request fails with DUPLICATE_RESOURCE, each other user's change is validated on its own
    /// and applied if valid. Results: successes first (deletions, then upsertions), then
    /// failures, as Kafka orders them.
    pub fn alter(
        &mut self,
        deletions: &[(String, i8)],
        upsertions: &[Upsertion],
    ) -> Vec<AlterResult> {
        let duplicate = "A user credential cannot be altered twice in the same request";
        let mut errors: BTreeMap<String, AlterResult> = BTreeMap::new();
        let mut deletes: BTreeMap<String, Mechanism> = BTreeMap::new();
        let mut upserts: BTreeMap<String, (Mechanism, &Upsertion)> = BTreeMap::new();
        let name_and_mechanism = |user: &str, t: i8| -> Result<Mechanism, AlterResult> {
            if user.is_empty() {
                return Err(failure(
                    user,
                    UNACCEPTABLE_CREDENTIAL,
                    "Username must not be empty",
                ));
            }
            Mechanism::from_scram_type(t)
                .ok_or_else(|| failure(user, UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
        };
        for (user, t) in deletions {
            if errors.contains_key(user) {
                continue;
            }
            if deletes.remove(user).is_some() {
                errors.insert(user.clone(), failure(user, DUPLICATE_RESOURCE, duplicate));
                continue;
            }
            match name_and_mechanism(user, *t) {
                Err(e) => {
                    errors.insert(user.clone(), e);
                }
                Ok(m) if self.get(user, m).is_none() => {
                    errors.insert(
                        user.clone(),
                        failure(
                            user,
                            RESOURCE_NOT_FOUND,
                            "Attempt to delete a user credential that does not exist",
                        ),
                    );
                }
                Ok(m) => {
                    deletes.insert(user.clone(), m);
                }
            }
        }
        for u in upsertions {
            if errors.contains_key(&u.user) {
                continue;
            }
            if deletes.remove(&u.user).is_some() || upserts.remove(&u.user).is_some() {
                errors.insert(
                    u.user.clone(),
                    failure(&u.user, DUPLICATE_RESOURCE, duplicate),
                );
                continue;
            }
            let checked = name_and_mechanism(&u.user, u.mechanism).and_then(|m| {
                if u.iterations < SCRAM_ITERATIONS_MIN {
                    Err(failure(
                        &u.user,
                        UNACCEPTABLE_CREDENTIAL,
                        "Too few iterations",
                    ))
                } else if u.iterations > SCRAM_ITERATIONS_MAX {
                    Err(failure(
                        &u.user,
                        UNACCEPTABLE_CREDENTIAL,
                        "Too many iterations",
                    ))
                } else {
                    Ok(m)
                }
            });
            match checked {
                Ok(m) => {
                    upserts.insert(u.user.clone(), (m, u));
                }
                Err(e) => {
                    errors.insert(u.user.clone(), e);
                }
            }
        }
        let mut results = Vec::new();
        for (user, m) in deletes {
            let removed = self.by_user.remove(&(user.clone(), m));
            assert!(removed.is_some(), "validated above");
            results.push(AlterResult {
                user,
                error: 0,
                message: None,
            });
        }
        for (user, (m, u)) in upserts {
            let credential =
                ScramCredential::from_salted_password(m, &u.salt, u.iterations, &u.salted_password);
            self.by_user.insert((user.clone(), m), credential);
            results.push(AlterResult {
                user,
                error: 0,
                message: None,
            });
        }
        results.extend(errors.into_values());
        results
    }

    /// DescribeUserScramCredentials: `None` (or an empty list) describes every user that has a
    /// credential; a named user without one gets RESOURCE_NOT_FOUND, a user named twice
    /// DUPLICATE_RESOURCE (Kafka's `ScramControlManager.describeScramCredentials`).
    pub fn describe(&self, users: Option<&[String]>) -> Vec<DescribeResult> {
        let infos = |user: &str| -> Vec<(i8, i32)> {
            self.by_user
                .iter()
                .filter(|((u, _), _)| u == user)
                .map(|((_, m), c)| (m.scram_type().expect("SCRAM"), c.iterations))
                .collect()
        };
        match users {
            None | Some([]) => {
                let mut names: Vec<&String> = self.by_user.keys().map(|(u, _)| u).collect();
                names.dedup();
                names
                    .into_iter()
                    .map(|u| DescribeResult {
                        user: u.clone(),
                        error: 0,
                        message: None,
                        credentials: infos(u),
                    })
                    .collect()
            }
            Some(users) => {
                let mut seen: BTreeMap<&String, usize> = BTreeMap::new();
                for u in users {
                    *seen.entry(u).or_default() += 1;
                }
                seen.into_iter()
                    .map(|(u, count)| {
                        let creds = infos(u);
                        let (error, message) = if count > 1 {
                            (
                                DUPLICATE_RESOURCE,
                                Some(format!("Cannot describe SCRAM credentials for the same user twice in a single request: {u}")),
                            )
                        } else if creds.is_empty() {
                            (
                                RESOURCE_NOT_FOUND,
                                Some(format!("Attempt to describe a user credential that does not exist: {u}")),
                            )
                        } else {
                            (0, None)
                        };
                        DescribeResult {
                            user: u.clone(),
                            error,
                            credentials: if error == 0 { creds } else { Vec::new() },
                            message,
                        }
                    })
                    .collect()
            }
        }
    }

    /// The credentials file's text (schemas/FORMAT.md, "SCRAM credentials").
    pub fn to_file_text(&self) -> String {
        let file = CredentialsFile {
            version: CREDENTIALS_FILE_VERSION,
            credentials: self
                .by_user
                .iter()
                .map(|((user, m), c)| FileEntry {
                    user: user.clone(),
                    mechanism: m.name().to_string(),
                    iterations: c.iterations,
                    salt: B64.encode(&c.salt),
                    stored_key: B64.encode(&c.stored_key),
                    server_key: B64.encode(&c.server_key),
                })
                .collect(),
        };
        let mut text = serde_json::to_string_pretty(&file).expect("serializable");
        text.push('\n');
        text
    }

    /// Reads the credentials file's text; any inconsistency is an error (never half a store).
    pub fn from_file_text(text: &str) -> Result<ScramCredentials, String> {
        let file: CredentialsFile =
            serde_json::from_str(text).map_err(|e| format!("not a credentials file: {e}"))?;
        if file.version != CREDENTIALS_FILE_VERSION {
            return Err(format!("unknown credentials file version {}", file.version));
        }
        let mut store = ScramCredentials::default();
        for e in file.credentials {
            let m = Mechanism::parse(&e.mechanism)
                .filter(|m| m.scram_type().is_some())
                .ok_or_else(|| format!("{}: unknown SCRAM mechanism {:?}", e.user, e.mechanism))?;
            let decode = |what: &str, s: &str| {
                B64.decode(s)
                    .map_err(|err| format!("{} {}: bad {what}: {err}", e.user, e.mechanism))
            };
            let credential = ScramCredential {
                salt: decode("salt", &e.salt)?,
                iterations: e.iterations,
                stored_key: decode("stored_key", &e.stored_key)?,
                server_key: decode("server_key", &e.server_key)?,
            };
            if credential.stored_key.len() != m.hash_bytes()
                || credential.server_key.len() != m.hash_bytes()
                || credential.iterations < 1
            {
                return Err(format!(
                    "{} {}: inconsistent credential",
                    e.user, e.mechanism
                ));
            }
            if store
                .by_user
                .insert((e.user.clone(), m), credential)
                .is_some()
            {
                return Err(format!("{} {}: listed twice", e.user, e.mechanism));
            }
        }
        Ok(store)
    }
}

/// Version of the credentials file format.
pub const CREDENTIALS_FILE_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct CredentialsFile {
    version: u32,
    credentials: Vec<FileEntry>,
}

#[derive(Serialize, Deserialize)]
struct FileEntry {
    user: String,
    mechanism: String,
    iterations: i32,
    salt: String,
    stored_key: String,
    server_key: String,
}

/// Kafka's message for a failed SCRAM exchange (it never says why, so as not to tell an
/// unauthenticated client which users exist).
pub fn failed_message(m: Mechanism) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        m.name()
    )
}

/// Where one server-side SCRAM exchange is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScramState {
    ExpectFirst,
    ExpectFinal {
        user: String,
        credential: ScramCredential,
        /// `client-first-message-bare` + "," + `server-first-message`.
        auth_prefix: String,
        nonce: String,
    },
    /// Authenticated as this user.
    Done(String),
    Failed,
}

/// The server side of one SCRAM exchange (two client messages).
#[derive(Clone, Debug)]
pub struct ScramServer {
    pub mechanism: Mechanism,
    pub state: ScramState,
}

/// Kafka's `ScramFormatter.username`: `=2C` is ',' and `=3D` is '='; any other '=' is invalid.
fn decode_saslname(name: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3)?;
        match esc {
            "=2C" => out.push(','),
            "=3D" => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// A printable nonce (RFC 5802: printable ASCII except ',').
fn valid_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

impl ScramServer {
    pub fn new(mechanism: Mechanism) -> ScramServer {
        assert!(mechanism.scram_type().is_some(), "a SCRAM mechanism");
        ScramServer {
            mechanism,
            state: ScramState::ExpectFirst,
        }
    }

    /// The authenticated user once the exchange is complete.
    pub fn user(&self) -> Option<&str> {
        match &self.state {
            ScramState::Done(u) => Some(u),
            _ => None,
        }
    }

    /// Feeds one client message; returns the server's answer, or the reason the exchange
    /// failed (logged, not sent: the client gets [`failed_message`]). `server_nonce` is
    /// used for the client-first message only.
    pub fn step(
        &mut self,
        message: &[u8],
        credentials: &ScramCredentials,
        server_nonce: &str,
    ) -> Result<Vec<u8>, String> {
        let state = std::mem::replace(&mut self.state, ScramState::Failed);
        let text = std::str::from_utf8(message).map_err(|_| "not UTF-8".to_string())?;
        match state {
            ScramState::ExpectFirst => {
                assert!(valid_nonce(server_nonce), "the runtime draws a valid nonce");
                // gs2-header: "n,," or "y,," (no channel binding), optional "a=authzid".
                let (cbind, rest) = text.split_once(',').ok_or("no GS2 header")?;
                if cbind != "n" && cbind != "y" {
                    return Err(format!("channel binding {cbind:?} is not supported"));
                }
                let (authzid, bare) = rest.split_once(',').ok_or("no GS2 header")?;
                let authzid = match authzid {
                    "" => None,
                    a => Some(
                        a.strip_prefix("a=")
                            .and_then(decode_saslname)
                            .ok_or("bad authorization id")?,
                    ),
                };
                let mut parts = bare.split(',');
                let user = parts
                    .next()
                    .and_then(|p| p.strip_prefix("n="))
                    .and_then(decode_saslname)
                    .ok_or("no user name")?;
                let client_nonce = parts
                    .next()
                    .and_then(|p| p.strip_prefix("r="))
                    .filter(|n| valid_nonce(n))
                    .ok_or("no client nonce")?;
                for ext in parts {
                    // Kafka's extensions: key=value; `tokenauth` means a delegation token.
                    let (k, v) = ext.split_once('=').ok_or("bad extension")?;
                    if k == "tokenauth" && v.eq_ignore_ascii_case("true") {
                        return Err("delegation tokens are not supported".to_string());
                    }
                }
                if user.is_empty() {
                    return Err("empty user name".to_string());
                }
                if authzid.as_deref().is_some_and(|a| a != user) {
                    return Err("authorization id differs from the user name".to_string());
                }
                let credential = credentials
                    .get(&user, self.mechanism)
                    .ok_or_else(|| format!("no {} credential for {user:?}", self.mechanism.name()))?
                    .clone();
                if credential.iterations < SCRAM_ITERATIONS_MIN {
                    return Err("too few iterations".to_string());
                }
                let nonce = format!("{client_nonce}{server_nonce}");
                let server_first = format!(
                    "r={nonce},s={},i={}",
                    B64.encode(&credential.salt),
                    credential.iterations
                );
                self.state = ScramState::ExpectFinal {
                    user,
                    credential,
                    auth_prefix: format!("{bare},{server_first}"),
                    nonce,
                };
                Ok(server_first.into_bytes())
            }
            ScramState::ExpectFinal {
                user,
                credential,
                auth_prefix,
                nonce,
            } => {
                let (without_proof, proof) = text.rsplit_once(",p=").ok_or("no proof")?;
                let mut parts = without_proof.split(',');
                let channel = parts
                    .next()
                    .and_then(|p| p.strip_prefix("c="))
                    .ok_or("no channel binding")?;
                let channel = B64.decode(channel).map_err(|_| "bad channel binding")?;
                if !(channel.starts_with(b"n,") || channel.starts_with(b"y,")) {
                    return Err("unexpected channel binding".to_string());
                }
                let got_nonce = parts
                    .next()
                    .and_then(|p| p.strip_prefix("r="))
                    .ok_or("no nonce")?;
                if got_nonce != nonce {
                    return Err("Invalid client nonce in the final client message.".to_string());
                }
                let proof = B64.decode(proof).map_err(|_| "bad proof encoding")?;
                let m = self.mechanism;
                if proof.len() != m.hash_bytes() {
                    return Err("bad proof length".to_string());
                }
                let auth_message = format!("{auth_prefix},{without_proof}");
                let signature = hmac_of(m, &credential.stored_key, auth_message.as_bytes());
                let client_key: Vec<u8> =
                    proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
                let computed = digest::digest(m.digest_alg(), &client_key);
                if !crate::security::sasl::constant_time_eq(
                    computed.as_ref(),
                    &credential.stored_key,
                ) {
                    return Err("Invalid client credentials".to_string());
                }
                let server_signature = hmac_of(m, &credential.server_key, auth_message.as_bytes());
                self.state = ScramState::Done(user);
                Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
            }
            ScramState::Done(_) | ScramState::Failed => {
                Err("Unexpected challenge after the exchange".to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SCRAM client, enough to test the server (RFC 5802 §3).
    fn client_final(
        m: Mechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> (String, Vec<u8>) {
        let mut salt = None;
        let mut iterations = 0;
        let mut nonce = "";
        for p in server_first.split(',') {
            if let Some(s) = p.strip_prefix("s=") {
                salt = Some(B64.decode(s).unwrap());
            } else if let Some(i) = p.strip_prefix("i=") {
                iterations = i.parse().unwrap();
            } else if let Some(r) = p.strip_prefix("r=") {
                nonce = r;
            }
        }
        let salted = salted_password(m, password.as_bytes(), &salt.unwrap(), iterations);
        let client_key = hmac_of(m, &salted, b"Client Key");
        let stored = digest::digest(m.digest_alg(), &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let sig = hmac_of(m, stored.as_ref(), auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let server_sig = hmac_of(m, &hmac_of(m, &salted, b"Server Key"), auth.as_bytes());
        (
            format!("{without_proof},p={}", B64.encode(proof)),
            format!("v={}", B64.encode(server_sig)).into_bytes(),
        )
    }

    /// RFC 7677 §3's SCRAM-SHA-256 example, byte for byte.
    #[test]
    fn rfc7677_vector() {
        let m = Mechanism::ScramSha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let mut creds = ScramCredentials::default();
        creds.insert(
            "user",
            m,
            ScramCredential::from_password(m, "pencil", &salt, 4096),
        );
        let mut s = ScramServer::new(m);
        let first = s
            .step(
                b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                &creds,
                "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            )
            .unwrap();
        assert_eq!(
            String::from_utf8(first).unwrap(),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let last = s
            .step(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                &creds,
                "unused",
            )
            .unwrap();
        assert_eq!(last, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        assert_eq!(s.user(), Some("user"));
        // Nothing after completion.
        assert!(s.step(b"c=biws", &creds, "x").is_err());
        assert_eq!(s.state, ScramState::Failed);
    }

    #[test]
    fn sha512_round_trip_and_failures() {
        let m = Mechanism::ScramSha512;
        let mut creds = ScramCredentials::default();
        creds.insert(
            "a,b=c",
            m,
            ScramCredential::from_password(m, "pw", b"salty", 4096),
        );
        let bare = "n=a=2Cb=3Dc,r=abc";
        let mut s = ScramServer::new(m);
        let sf = String::from_utf8(
            s.step(format!("n,,{bare}").as_bytes(), &creds, "XYZ")
                .unwrap(),
        )
        .unwrap();
        let (cf, expected) = client_final(m, "pw", bare, &sf);
        assert_eq!(s.step(cf.as_bytes(), &creds, "XYZ").unwrap(), expected);
        assert_eq!(s.user(), Some("a,b=c"));

        // Wrong password.
        let mut s = ScramServer::new(m);
        let sf = String::from_utf8(
            s.step(format!("n,,{bare}").as_bytes(), &creds, "XYZ")
                .unwrap(),
        )
        .unwrap();
        let (cf, _) = client_final(m, "wrong", bare, &sf);
        assert!(s.step(cf.as_bytes(), &creds, "XYZ").is_err());
        assert_eq!(s.state, ScramState::Failed);

        // Unknown user, wrong mechanism's credential, malformed messages, tampered nonce.
        for first in [
            "n,,n=nobody,r=abc",
            "p=tls-unique,,n=a=2Cb=3Dc,r=abc",
            "n,,n=a=2Xb,r=abc",
            "n,,r=abc",
            "garbage",
            "n,,n=a=2Cb=3Dc,r=abc,tokenauth=true",
            "n,a=other,n=a=2Cb=3Dc,r=abc",
        ] {
            let mut s = ScramServer::new(m);
            assert!(s.step(first.as_bytes(), &creds, "XYZ").is_err(), "{first}");
        }
        let mut s = ScramServer::new(Mechanism::ScramSha256);
        assert!(s
            .step(format!("n,,{bare}").as_bytes(), &creds, "XYZ")
            .is_err());
        let mut s = ScramServer::new(m);
        let sf = String::from_utf8(
            s.step(format!("n,,{bare}").as_bytes(), &creds, "XYZ")
                .unwrap(),
        )
        .unwrap();
        let (cf, _) = client_final(m, "pw", bare, &sf);
        assert!(s
            .step(cf.replace("XYZ", "XYW").as_bytes(), &creds, "XYZ")
            .is_err());
        for junk in [&b"\xff\xfe"[..], b"", b"c=biws", b"p=,r=,c="] {
            let mut s = ScramServer::new(m);
            s.step(format!("n,,{bare}").as_bytes(), &creds, "XYZ")
                .unwrap();
            assert!(s.step(junk, &creds, "XYZ").is_err());
        }
    }

    /// Alter/describe against a trivial model: a map the test updates by hand.
    #[test]
    fn alter_and_describe_rules() {
        let up = |user: &str, mechanism: i8, iterations: i32| Upsertion {
            user: user.into(),
            mechanism,
            iterations,
            salt: b"salt".to_vec(),
            salted_password: salted_password(Mechanism::ScramSha256, b"pw", b"salt", 4096),
        };
        let mut store = ScramCredentials::default();
        let r = store.alter(
            &[("ghost".into(), 1)],
            &[
                up("alice", 1, 8192),
                up("bob", 2, 4096),
                up("carol", 1, 100),
                up("dave", 1, 20000),
                up("", 1, 8192),
                up("erin", 0, 8192),
                up("frank", 1, 4096),
                up("frank", 2, 4096),
            ],
        );
        let codes: BTreeMap<String, i16> = r.iter().map(|r| (r.user.clone(), r.error)).collect();
        let expected: BTreeMap<String, i16> = [
            ("ghost", RESOURCE_NOT_FOUND),
            ("alice", 0),
            ("bob", 0),
            ("carol", UNACCEPTABLE_CREDENTIAL),
            ("dave", UNACCEPTABLE_CREDENTIAL),
            ("", UNACCEPTABLE_CREDENTIAL),
            ("erin", UNSUPPORTED_SASL_MECHANISM),
            ("frank", DUPLICATE_RESOURCE),
        ]
        .into_iter()
        .map(|(u, c)| (u.to_string(), c))
        .collect();
        assert_eq!(codes, expected);
        assert_eq!(store.len(), 2);
        assert_eq!(
            store
                .get("alice", Mechanism::ScramSha256)
                .unwrap()
                .iterations,
            8192
        );
        let all = store.describe(None);
        assert_eq!(
            all.iter()
                .map(|d| (d.user.as_str(), d.credentials.clone()))
                .collect::<Vec<_>>(),
            vec![("alice", vec![(1, 8192)]), ("bob", vec![(2, 4096)])]
        );
        let named = store.describe(Some(&[
            "bob".into(),
            "zed".into(),
            "alice".into(),
            "alice".into(),
        ]));
        let codes: Vec<(&str, i16)> = named.iter().map(|d| (d.user.as_str(), d.error)).collect();
        assert_eq!(
            codes,
            vec![
                ("alice", DUPLICATE_RESOURCE),
                ("bob", 0),
                ("zed", RESOURCE_NOT_FOUND)
            ]
        );
        // File round trip, then deletion.
        let text = store.to_file_text();
        let mut back = ScramCredentials::from_file_text(&text).unwrap();
        assert_eq!(back, store);
        let r = back.alter(&[("alice".into(), 1)], &[]);
        assert_eq!(r[0].error, 0);
        assert!(back.get("alice", Mechanism::ScramSha256).is_none());
        assert!(ScramCredentials::from_file_text("{}").is_err());
        assert!(ScramCredentials::from_file_text(&text.replace("SCRAM-SHA-256", "PLAIN")).is_err());
    }
}
