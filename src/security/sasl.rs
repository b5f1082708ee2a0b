//! SASL authentication of one connection, as Kafka's `SaslServerAuthenticator` does it: a
//! synchronous, I/O-free state machine the connection (runtime) feeds with the API key of each
//! request before authentication, plus PLAIN's credential check and the JAAS text its users
//! come from (`listener.name.<listener>.plain.sasl.jaas.config`).
//!
//! Transitions (anything not listed closes the connection, as Kafka does on an unexpected
//! request during the handshake):
//!
//! | state          | request                          | answer                                  | next           |
//! |----------------|----------------------------------|-----------------------------------------|----------------|
//! | Start          | ApiVersions                      | dispatched as usual                     | Start          |
//! | Start          | SaslHandshake, enabled mechanism | NONE + enabled mechanisms               | Authenticating |
//! | Start          | SaslHandshake, other mechanism   | UNSUPPORTED_SASL_MECHANISM + enabled    | Closed         |
//! | Authenticating | SaslAuthenticate, good PLAIN     | NONE                                    | Authenticated  |
//! | Authenticating | SaslAuthenticate, SCRAM first    | NONE + server-first message             | Authenticating |
//! | Authenticating | SaslAuthenticate, SCRAM final ok | NONE + server-final message             | Authenticated  |
//! | Authenticating | SaslAuthenticate, bad            | SASL_AUTHENTICATION_FAILED + message    | Closed         |
//! | Authenticated  | SaslHandshake / SaslAuthenticate | ILLEGAL_SASL_STATE                      | Authenticated  |
//! | Authenticated  | anything else                    | dispatched as usual                     | Authenticated  |
//!
//! After a SaslHandshake v0 the client sends raw size-prefixed tokens instead of
//! SaslAuthenticate requests (`Phase::Authenticating { headers: false }`); the connection
//! (`runtime::conn`) frames them. SCRAM's exchange is [`crate::security::scram::ScramServer`].

use crate::security::scram::{ScramCredentials, ScramServer};
use std::collections::BTreeMap;

/// SaslHandshake's API key.
pub const SASL_HANDSHAKE: i16 = 17;
/// SaslAuthenticate's API key.
pub const SASL_AUTHENTICATE: i16 = 36;
const API_VERSIONS: i16 = 18;

/// Kafka's error codes of the SASL exchange.
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// Kafka's message for a bad PLAIN user or password (`PlainServerCallbackHandler`).
pub const PLAIN_FAILED_MESSAGE: &str = "Authentication failed: Invalid username or password";

/// A SASL mechanism the broker may enable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn parse(name: &str) -> Option<Mechanism> {
        [
            Mechanism::Plain,
            Mechanism::ScramSha256,
            Mechanism::ScramSha512,
        ]
        .into_iter()
        .find(|m| m.name() == name)
    }
}

/// One JAAS login-module entry: `module.Class required key="value" ...;`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JaasEntry {
    pub module: String,
    pub options: BTreeMap<String, String>,
}

/// Parses Kafka's single-entry JAAS text (`sasl.jaas.config`).
pub fn parse_jaas(text: &str) -> Result<JaasEntry, String> {
    let text = text.trim();
    let body = text
        .strip_suffix(';')
        .ok_or("a JAAS entry ends with ';'")?
        .trim();
    let (module, rest) = body
        .split_once(char::is_whitespace)
        .ok_or("expected `LoginModule required ...`")?;
    let rest = rest.trim_start();
    let (flag, mut rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if !["required", "requisite", "sufficient", "optional"].contains(&flag) {
        return Err(format!("unknown control flag {flag:?}"));
    }
    let mut options = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (key, after) = rest.split_once('=').ok_or("expected key=\"value\"")?;
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!("bad option name {key:?}"));
        }
        let after = after.trim_start();
        let (value, tail) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted
                .find('"')
                .ok_or_else(|| format!("unterminated value of {key}"))?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            after.split_once(char::is_whitespace).unwrap_or((after, ""))
        };
        options.insert(key.to_string(), value.to_string());
        rest = tail;
    }
    Ok(JaasEntry {
        module: module.to_string(),
        options,
    })
}

/// PLAIN's users: the `user_NAME="password"` options of a PlainLoginModule entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlainUsers {
    passwords: BTreeMap<String, String>,
}

impl PlainUsers {
    pub fn from_jaas(entry: &JaasEntry) -> Result<PlainUsers, String> {
        if !entry.module.ends_with("PlainLoginModule") {
            return Err(format!("{} is not a PlainLoginModule", entry.module));
        }
        let passwords = entry
            .options
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("user_")?.to_string(), v.clone())))
            .collect();
        Ok(PlainUsers { passwords })
    }

    /// Checks a PLAIN token (`authzid NUL authcid NUL password`); returns the user.
    pub fn authenticate(&self, token: &[u8]) -> Result<String, String> {
        let text =
            std::str::from_utf8(token).map_err(|_| "Invalid SASL/PLAIN response: not UTF-8")?;
        let parts: Vec<&str> = text.split('\0').collect();
        let [authzid, user, password] = parts.as_slice() else {
            return Err("Invalid SASL/PLAIN response: expected 3 tokens".to_string());
        };
        if user.is_empty() {
            return Err("Authentication failed: username not specified".to_string());
        }
        if password.is_empty() {
            return Err("Authentication failed: password not specified".to_string());
        }
        if !authzid.is_empty() && authzid != user {
            return Err(
                "Authentication failed: Client requested an authorization id that is different from username"
                    .to_string(),
            );
        }
        match self.passwords.get(*user) {
            Some(expected) if constant_time_eq(expected.as_bytes(), password.as_bytes()) => {
                Ok(user.to_string())
            }
            _ => Err(PLAIN_FAILED_MESSAGE.to_string()),
        }
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The mechanism exchange under way.
#[derive(Clone, Debug)]
pub enum Exchange {
    Plain,
    Scram(ScramServer),
}

/// Where a connection is in its SASL exchange.
#[derive(Clone, Debug)]
pub enum Phase {
    Start,
    /// `headers`: SaslAuthenticate requests carry the tokens (SaslHandshake v1); otherwise
    /// (v0) the client sends raw size-prefixed tokens and gets raw ones back.
    Authenticating {
        exchange: Exchange,
        headers: bool,
    },
    /// `User:NAME`.
    Authenticated(String),
    Closed,
}

/// What the connection does with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Handle it as any request (ApiVersions before authentication; everything after).
    Dispatch,
    /// Answer SaslHandshake with `error` and the enabled mechanisms.
    Handshake { error: i16, mechanisms: Vec<String> },
    /// Answer SaslAuthenticate (or, after a v0 handshake, write `auth_bytes` raw); on an
    /// error, close after the answer.
    Authenticate {
        error: i16,
        message: Option<String>,
        auth_bytes: Vec<u8>,
    },
    /// Answer nothing; close the connection.
    Close(String),
}

/// What a SASL exchange checks credentials against.
pub struct Authenticators<'a> {
    pub plain: &'a PlainUsers,
    pub scram: &'a ScramCredentials,
    /// A fresh server nonce (used by SCRAM's first message).
    pub server_nonce: &'a str,
}

/// The SASL exchange of one connection.
#[derive(Clone, Debug)]
pub struct SaslConnection {
    pub phase: Phase,
    enabled: Vec<Mechanism>,
}

impl SaslConnection {
    pub fn new(enabled: Vec<Mechanism>) -> SaslConnection {
        assert!(!enabled.is_empty(), "a SASL listener enables a mechanism");
        SaslConnection {
            phase: Phase::Start,
            enabled,
        }
    }

    pub fn is_authenticated(&self) -> bool {
        matches!(self.phase, Phase::Authenticated(_))
    }

    pub fn principal(&self) -> Option<&str> {
        match &self.phase {
            Phase::Authenticated(p) => Some(p),
            _ => None,
        }
    }

    /// After a v0 handshake: the next frame is a raw token, not a Kafka request.
    pub fn expects_raw_token(&self) -> bool {
        matches!(self.phase, Phase::Authenticating { headers: false, .. })
    }

    fn mechanism_names(&self) -> Vec<String> {
        self.enabled.iter().map(|m| m.name().to_string()).collect()
    }

    /// A SaslHandshake request (of `version`) for `mechanism`.
    pub fn on_handshake(&mut self, mechanism: &str, version: i16) -> Step {
        match self.phase {
            Phase::Start => {
                match Mechanism::parse(mechanism).filter(|m| self.enabled.contains(m)) {
                    Some(m) => {
                        let exchange = match m {
                            Mechanism::Plain => Exchange::Plain,
                            scram => Exchange::Scram(ScramServer::new(scram)),
                        };
                        self.phase = Phase::Authenticating {
                            exchange,
                            headers: version >= 1,
                        };
                        Step::Handshake {
                            error: 0,
                            mechanisms: self.mechanism_names(),
                        }
                    }
                    None => {
                        self.phase = Phase::Closed;
                        Step::Handshake {
                            error: UNSUPPORTED_SASL_MECHANISM,
                            mechanisms: self.mechanism_names(),
                        }
                    }
                }
            }
            Phase::Authenticated(_) => Step::Handshake {
                error: ILLEGAL_SASL_STATE,
                mechanisms: self.mechanism_names(),
            },
            Phase::Authenticating { .. } | Phase::Closed => {
                self.phase = Phase::Closed;
                Step::Close("SaslHandshake out of order".to_string())
            }
        }
    }

    /// A SaslAuthenticate request's bytes (or a raw token after a v0 handshake).
    pub fn on_authenticate(&mut self, token: &[u8], auth: &Authenticators<'_>) -> Step {
        let failed = |message: String| Step::Authenticate {
            error: SASL_AUTHENTICATION_FAILED,
            message: Some(message),
            auth_bytes: Vec::new(),
        };
        match std::mem::replace(&mut self.phase, Phase::Closed) {
            Phase::Authenticating {
                exchange: Exchange::Plain,
                ..
            } => match auth.plain.authenticate(token) {
                Ok(user) => {
                    self.phase = Phase::Authenticated(format!("User:{user}"));
                    Step::Authenticate {
                        error: 0,
                        message: None,
                        auth_bytes: Vec::new(),
                    }
                }
                Err(message) => failed(message),
            },
            Phase::Authenticating {
                exchange: Exchange::Scram(mut server),
                headers,
            } => match server.step(token, auth.scram, auth.server_nonce) {
                Ok(answer) => {
                    self.phase = match server.user() {
                        Some(user) => Phase::Authenticated(format!("User:{user}")),
                        None => Phase::Authenticating {
                            exchange: Exchange::Scram(server),
                            headers,
                        },
                    };
                    Step::Authenticate {
                        error: 0,
                        message: None,
                        auth_bytes: answer,
                    }
                }
                Err(reason) => {
                    tracing::debug!(%reason, "SCRAM authentication failed");
                    failed(crate::security::scram::failed_message(server.mechanism))
                }
            },
            Phase::Authenticated(p) => {
                self.phase = Phase::Authenticated(p);
                Step::Authenticate {
                    error: ILLEGAL_SASL_STATE,
                    message: Some(
                        "Unexpected SaslAuthenticate request; already authenticated".into(),
                    ),
                    auth_bytes: Vec::new(),
                }
            }
            Phase::Start | Phase::Closed => {
                Step::Close("SaslAuthenticate before SaslHandshake".to_string())
            }
        }
    }

    /// Any other request (by API key).
    pub fn on_other(&mut self, api_key: i16) -> Step {
        match self.phase {
            Phase::Authenticated(_) => Step::Dispatch,
            Phase::Start if api_key == API_VERSIONS => Step::Dispatch,
            _ => {
                self.phase = Phase::Closed;
                Step::Close(format!(
                    "Unexpected Kafka request of type {api_key} during SASL handshake"
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
        username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" \
        user_alice=\"alice pw\";";

    fn users() -> PlainUsers {
        PlainUsers::from_jaas(&parse_jaas(JAAS).unwrap()).unwrap()
    }

    #[test]
    fn jaas_and_plain_users() {
        let entry = parse_jaas(JAAS).unwrap();
        assert_eq!(entry.options["username"], "admin");
        let u = users();
        assert_eq!(u.authenticate(b"\0alice\0alice pw").unwrap(), "alice");
        assert_eq!(
            u.authenticate(b"admin\0admin\0admin-secret").unwrap(),
            "admin"
        );
        assert_eq!(
            u.authenticate(b"\0alice\0wrong").unwrap_err(),
            PLAIN_FAILED_MESSAGE
        );
        assert_eq!(
            u.authenticate(b"\0bob\0alice pw").unwrap_err(),
            PLAIN_FAILED_MESSAGE
        );
        assert!(u.authenticate(b"\0alice").is_err());
        assert!(u.authenticate(b"x\0alice\0alice pw").is_err());
        assert!(parse_jaas("Foo required a=\"b\"").is_err());
        assert!(parse_jaas("Foo maybe a=\"b\";").is_err());
        assert!(
            PlainUsers::from_jaas(&parse_jaas("x.ScramLoginModule required;").unwrap()).is_err()
        );
    }

    fn auth<'a>(plain: &'a PlainUsers, scram: &'a ScramCredentials) -> Authenticators<'a> {
        Authenticators {
            plain,
            scram,
            server_nonce: "srv",
        }
    }

    fn ok(bytes: &[u8]) -> Step {
        Step::Authenticate {
            error: 0,
            message: None,
            auth_bytes: bytes.to_vec(),
        }
    }

    #[test]
    fn transitions() {
        let u = users();
        let none = ScramCredentials::default();
        let a = auth(&u, &none);
        let mut c = SaslConnection::new(vec![Mechanism::Plain]);
        assert_eq!(c.on_other(API_VERSIONS), Step::Dispatch);
        assert!(matches!(
            c.on_handshake("PLAIN", 1),
            Step::Handshake { error: 0, .. }
        ));
        assert!(!c.expects_raw_token());
        assert_eq!(c.on_authenticate(b"\0alice\0alice pw", &a), ok(b""));
        assert_eq!(c.principal(), Some("User:alice"));
        assert_eq!(c.on_other(0), Step::Dispatch);
        assert!(matches!(
            c.on_handshake("PLAIN", 1),
            Step::Handshake {
                error: ILLEGAL_SASL_STATE,
                ..
            }
        ));
        assert!(matches!(
            c.on_authenticate(b"", &a),
            Step::Authenticate {
                error: ILLEGAL_SASL_STATE,
                ..
            }
        ));
        assert!(c.is_authenticated());

        let mut c = SaslConnection::new(vec![Mechanism::Plain]);
        assert!(matches!(c.on_other(3), Step::Close(_)));
        let mut c = SaslConnection::new(vec![Mechanism::Plain]);
        assert_eq!(
            c.on_handshake("SCRAM-SHA-256", 1),
            Step::Handshake {
                error: UNSUPPORTED_SASL_MECHANISM,
                mechanisms: vec!["PLAIN".into()]
            }
        );
        assert!(matches!(c.phase, Phase::Closed));
        let mut c = SaslConnection::new(vec![Mechanism::Plain]);
        c.on_handshake("PLAIN", 1);
        assert_eq!(
            c.on_authenticate(b"\0alice\0nope", &a),
            Step::Authenticate {
                error: SASL_AUTHENTICATION_FAILED,
                message: Some(PLAIN_FAILED_MESSAGE.into()),
                auth_bytes: Vec::new(),
            }
        );
        assert!(matches!(c.phase, Phase::Closed));
        let mut c = SaslConnection::new(vec![Mechanism::Plain]);
        c.on_handshake("PLAIN", 1);
        assert!(matches!(c.on_other(API_VERSIONS), Step::Close(_)));
        let mut c = SaslConnection::new(vec![Mechanism::Plain]);
        assert!(matches!(c.on_authenticate(b"", &a), Step::Close(_)));
        // A v0 handshake: raw tokens follow.
        let mut c = SaslConnection::new(vec![Mechanism::Plain]);
        c.on_handshake("PLAIN", 0);
        assert!(c.expects_raw_token());
        assert_eq!(c.on_authenticate(b"\0admin\0admin-secret", &a), ok(b""));
        assert!(!c.expects_raw_token());
    }

    #[test]
    fn scram_exchange_through_the_connection() {
        use crate::security::scram::ScramCredential;
        let u = users();
        let m = Mechanism::ScramSha256;
        let mut creds = ScramCredentials::default();
        creds.insert(
            "bob",
            m,
            ScramCredential::from_password(m, "pw", b"salt", 4096),
        );
        let a = auth(&u, &creds);
        let mut c = SaslConnection::new(vec![Mechanism::Plain, m, Mechanism::ScramSha512]);
        assert_eq!(
            c.on_handshake("SCRAM-SHA-256", 1),
            Step::Handshake {
                error: 0,
                mechanisms: vec![
                    "PLAIN".into(),
                    "SCRAM-SHA-256".into(),
                    "SCRAM-SHA-512".into()
                ]
            }
        );
        let Step::Authenticate {
            error: 0,
            auth_bytes,
            ..
        } = c.on_authenticate(b"n,,n=bob,r=cli", &a)
        else {
            panic!("server-first expected")
        };
        assert!(auth_bytes.starts_with(b"r=clisrv,s="));
        assert!(!c.is_authenticated());
        // A bad final message fails with Kafka's generic message.
        assert_eq!(
            c.on_authenticate(b"c=biws,r=clisrv,p=AAAA", &a),
            Step::Authenticate {
                error: SASL_AUTHENTICATION_FAILED,
                message: Some(crate::security::scram::failed_message(m)),
                auth_bytes: Vec::new(),
            }
        );
        assert!(matches!(c.phase, Phase::Closed));
    }
}
