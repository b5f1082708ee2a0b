//! `lockstep --config FILE`: Kafka's `server.properties` format and the property names that
//! apply to this broker (pure parsing and validation; no I/O except reading the file and the
//! PEM files it names).
//!
//! Understood keys:
//! - `listeners`, `advertised.listeners`, `listener.security.protocol.map`: several listeners
//!   `NAME://HOST:PORT` (empty host: every interface), each PLAINTEXT, SSL, SASL_PLAINTEXT or
//!   SASL_SSL. Every shard serves every listener (SO_REUSEPORT per listener).
//! - `log.dirs` / `log.dir`: the data directory (one directory only).
//! - Broker defaults the named-config layer knows (`config::BROKER_CONFIGS`): `num.partitions`,
//!   `log.retention.ms` (or `.minutes` / `.hours`, Kafka's precedence), `log.retention.bytes`,
//!   `log.segment.bytes`, `log.roll.ms` (or `.hours`), `message.max.bytes`, validated by the
//!   same definitions as IncrementalAlterConfigs.
//! - TLS (`ssl.keystore.type=PEM`, `ssl.keystore.location` or inline
//!   `ssl.keystore.certificate.chain` + `ssl.keystore.key`, `ssl.client.auth`,
//!   `ssl.truststore.type=PEM` + `ssl.truststore.location` or `ssl.truststore.certificates`).
//!   Prefixed `listener.name.<name>.ssl.*` keys are not supported yet (warned about).
//! - The authorizer: `authorizer.class.name` (Kafka's StandardAuthorizer or AclAuthorizer name;
//!   anything else is refused), `super.users` (`User:a;User:b`), `allow.everyone.if.no.acl.found`
//!   (default false). Without `authorizer.class.name` every request is allowed.
//! - SASL (SASL_PLAINTEXT / SASL_SSL listeners): `sasl.enabled.mechanisms` or
//!   `listener.name.<l>.sasl.enabled.mechanisms` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; there
//!   is no default: Kafka's GSSAPI is not supported), PLAIN's users from
//!   `listener.name.<l>.plain.sasl.jaas.config` (or `plain.sasl.jaas.config` for every
//!   listener): a PlainLoginModule entry's `user_NAME="password"` options. SCRAM users live in
//!   the data directory (AlterUserScramCredentials); a ScramLoginModule entry is accepted.
//!   An unprefixed `sasl.jaas.config` is ignored with a warning, as Kafka does.
//! - Connection limits (`conn_limits`): `max.connections`, `listener.name.<l>.max.connections`,
//!   `max.connections.per.ip`, `max.connections.per.ip.overrides`,
//!   `max.connection.creation.rate`, `listener.name.<l>.max.connection.creation.rate`.
//! - Operations: `metrics.listen` (HOST:PORT of the Prometheus `/metrics` and the `/ready` and
//!   `/live` health endpoints; `--metrics-listen` overrides it), `log.format` (`text`, the
//!   default, or `json`: one JSON object per line), `group.initial.rebalance.delay.ms` (Kafka's
//!   default 3000).
//! - Keys of a Kafka KRaft file that mean nothing here (`node.id`, `process.roles`, ...) are
//!   accepted silently; any other key is warned about and ignored. A bad value is refused,
//!   naming the key and its line.

use crate::config::{broker_config_def, ConfigError};
use crate::security::conn_limits::LimitsConfig;
use crate::security::sasl::{parse_jaas, Mechanism, PlainUsers};
use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

/// Kafka's `security.protocol` of a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        match name.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// The connection is TLS from its first byte.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// The client must authenticate with SASL before any other request.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// One listener: where it binds, what it speaks, what it advertises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Kafka's listener name (`PLAINTEXT`, `CLIENT`, ...), upper case.
    pub name: String,
    pub addr: SocketAddr,
    pub protocol: SecurityProtocol,
    /// The address responses name as this broker to clients of this listener; `None`: the
    /// local address each client connected to.
    pub advertised: Option<SocketAddr>,
}

/// `ssl.client.auth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// TLS material of the SSL and SASL_SSL listeners, as PEM text (parsed by `runtime::tls`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// The certificate chain, leaf first.
    pub certificate_chain_pem: String,
    /// The private key (PKCS#8, PKCS#1 or SEC1, unencrypted).
    pub private_key_pem: String,
    pub client_auth: ClientAuth,
    /// CA certificates client certificates are verified against.
    pub truststore_pem: Option<String>,
}

/// The SASL side of one listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerSasl {
    /// `sasl.enabled.mechanisms` (or its `listener.name.<l>.` form), in the file's order.
    pub mechanisms: Vec<Mechanism>,
    /// PLAIN's users (`listener.name.<l>.plain.sasl.jaas.config`); empty without PLAIN.
    pub plain: PlainUsers,
}

/// What a configuration file sets; flags override it (see `main.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileConfig {
    /// Empty: the file names no listeners.
    pub listeners: Vec<Listener>,
    pub data_dir: Option<PathBuf>,
    /// Validated broker defaults (`config::BROKER_CONFIGS` names, canonical values).
    pub broker_defaults: BTreeMap<String, String>,
    pub tls: Option<TlsSettings>,
    /// `authorizer.class.name` (with `super.users` and `allow.everyone.if.no.acl.found`);
    /// `None` when no authorizer is named.
    pub authorizer: Option<crate::security::authz::AuthorizerConfig>,
    /// SASL settings of each SASL_PLAINTEXT / SASL_SSL listener, by listener name.
    pub sasl: BTreeMap<String, ListenerSasl>,
    /// `max.connections`, `max.connections.per.ip`, `max.connection.creation.rate` and their
    /// per-listener and per-IP forms.
    pub limits: LimitsConfig,
    /// `metrics.listen`: where the Prometheus and health endpoints are served (HOST:PORT).
    pub metrics_listen: Option<String>,
    /// `group.initial.rebalance.delay.ms`.
    pub group_initial_rebalance_delay_ms: Option<u64>,
    /// `log.format`: `text` (the default) or `json`.
    pub log_format: Option<crate::config::LogFormat>,
    /// Unknown or unsupported keys, one sentence each (the binary logs them).
    pub warnings: Vec<String>,
}

/// Why a configuration file was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum FileError {
    Read {
        path: String,
        reason: String,
    },
    /// A bad value: its key, the value and the line it starts on (1-based; 0: a setting the
    /// file lacks).
    Value {
        line: usize,
        key: String,
        value: String,
        reason: String,
    },
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Read { path, reason } => write!(f, "{path}: {reason}"),
            FileError::Value {
                line, key, reason, ..
            } => {
                write!(f, "line {line}: {key}: {reason}")
            }
        }
    }
}

impl FileError {
    /// Kafka's wording of a refused setting (`Invalid value V for configuration K: reason`), with
    /// the line it is on.
    pub fn kafka_message(&self) -> String {
        match self {
            FileError::Read { .. } => self.to_string(),
            FileError::Value {
                line,
                key,
                value,
                reason,
            } => {
                let at = if *line > 0 {
                    format!(" (line {line})")
                } else {
                    String::new()
                };
                format!("Invalid value {value} for configuration {key}: {reason}{at}")
            }
        }
    }
}

impl std::error::Error for FileError {}

/// One `key=value` of a properties file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Property {
    pub key: String,
    pub value: String,
    /// 1-based line the property starts on.
    pub line: usize,
}

/// Keys of Kafka's sample `server.properties` (KRaft) that have no meaning for a single-node
/// broker without replication; accepted without a warning.
const IGNORED_KEYS: &[&str] = &[
    "process.roles",
    "node.id",
    "broker.id",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "inter.broker.listener.name",
    "num.network.threads",
    "num.io.threads",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "socket.request.max.bytes",
    "num.recovery.threads.per.data.dir",
    "offsets.topic.replication.factor",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "log.retention.check.interval.ms",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.truststore.password",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism.inter.broker.protocol",
    "sasl.mechanism.controller.protocol",
];

/// Kafka's default `listener.security.protocol.map`: each protocol under its own name.
const DEFAULT_PROTOCOL_MAP: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

/// Parses Java's `.properties` syntax: `#`/`!` comments, `key=value`, `key: value` or
/// `key value`, a trailing backslash continues the line (leading blanks of the next line
/// dropped), escapes `\n \t \r \\ \= \:`. A later duplicate key wins.
pub fn parse_properties(text: &str) -> Vec<Property> {
    let mut out: Vec<Property> = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((index, raw)) = lines.next() {
        let first = raw.trim_start();
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = String::new();
        let mut current = first.to_string();
        loop {
            if ends_with_continuation(&current) {
                current.pop();
                logical.push_str(&current);
                match lines.next() {
                    Some((_, next)) => current = next.trim_start().to_string(),
                    None => break,
                }
            } else {
                logical.push_str(&current);
                break;
            }
        }
        let (key, value) = split_key_value(&logical);
        out.retain(|p| p.key != key);
        out.push(Property {
            key,
            value,
            line: index + 1,
        });
    }
    out
}

/// An odd number of trailing backslashes continues the line.
fn ends_with_continuation(line: &str) -> bool {
    line.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

fn split_key_value(line: &str) -> (String, String) {
    let mut key = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    key.push(unescape(next));
                }
            }
            '=' | ':' => break,
            c if c.is_whitespace() => {
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('=') | Some(':')) {
                    chars.next();
                }
                break;
            }
            c => key.push(c),
        }
    }
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
    let mut value = String::new();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                value.push(unescape(next));
            }
        } else {
            value.push(c);
        }
    }
    (key, value)
}

fn unescape(c: char) -> char {
    match c {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        'f' => '\u{c}',
        other => other,
    }
}

impl FileConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<FileConfig, FileError> {
        let text = std::fs::read_to_string(path).map_err(|e| FileError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        FileConfig::from_properties(&parse_properties(&text), base)
    }

    /// Validates parsed properties; relative PEM paths are read relative to `base`.
    pub fn from_properties(props: &[Property], base: &Path) -> Result<FileConfig, FileError> {
        let get = |key: &str| props.iter().find(|p| p.key == key);
        let mut config = FileConfig::default();
        let mut used: Vec<&str> = Vec::new();
        let bad = |p: &Property, reason: String| FileError::Value {
            line: p.line,
            key: p.key.clone(),
            value: p.value.clone(),
            reason,
        };

        // Listeners.
        let map_prop = get("listener.security.protocol.map");
        let map_text = map_prop.map_or(DEFAULT_PROTOCOL_MAP, |p| p.value.as_str());
        let mut protocols: BTreeMap<String, SecurityProtocol> = BTreeMap::new();
        for entry in map_text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let parsed = entry.split_once(':').and_then(|(name, proto)| {
                Some((
                    name.trim().to_ascii_uppercase(),
                    SecurityProtocol::parse(proto)?,
                ))
            });
            match parsed {
                Some((name, proto)) => {
                    protocols.insert(name, proto);
                }
                None => {
                    let p = map_prop.expect("the default map parses");
                    return Err(bad(
                        p,
                        format!(
                            "{entry:?} is not NAME:PROTOCOL (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"
                        ),
                    ));
                }
            }
        }
        used.push("listener.security.protocol.map");
        if let Some(p) = get("listeners") {
            let endpoints = parse_endpoints(&p.value, true).map_err(|r| bad(p, r))?;
            for (name, addr) in endpoints {
                let protocol = *protocols.get(&name).ok_or_else(|| {
                    bad(
                        p,
                        format!("listener {name} has no entry in listener.security.protocol.map"),
                    )
                })?;
                if config.listeners.iter().any(|l| l.name == name) {
                    return Err(bad(p, format!("listener {name} named twice")));
                }
                if config.listeners.iter().any(|l| l.addr == addr) {
                    return Err(bad(p, format!("two listeners on {addr}")));
                }
                config.listeners.push(Listener {
                    name,
                    addr,
                    protocol,
                    advertised: None,
                });
            }
            if config.listeners.is_empty() {
                return Err(bad(p, "no listener".to_string()));
            }
        }
        used.push("listeners");
        if let Some(p) = get("advertised.listeners") {
            for (name, addr) in parse_endpoints(&p.value, false).map_err(|r| bad(p, r))? {
                let listener = config
                    .listeners
                    .iter_mut()
                    .find(|l| l.name == name)
                    .ok_or_else(|| bad(p, format!("{name} is not one of the listeners")))?;
                listener.advertised = Some(addr);
            }
        }
        used.push("advertised.listeners");

        // Data directory.
        for key in ["log.dirs", "log.dir"] {
            used.push(key);
            if config.data_dir.is_some() {
                continue;
            }
            if let Some(p) = get(key) {
                let dirs: Vec<&str> = p
                    .value
                    .split(',')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .collect();
                match dirs.as_slice() {
                    [one] => config.data_dir = Some(PathBuf::from(one)),
                    [] => return Err(bad(p, "no directory".to_string())),
                    _ => return Err(bad(p, "only one data directory is supported".to_string())),
                }
            }
        }

        // Broker defaults, with Kafka's unit variants.
        let scaled = [
            ("log.retention.ms", "log.retention.ms", 1),
            ("log.retention.ms", "log.retention.minutes", 60_000),
            ("log.retention.ms", "log.retention.hours", 3_600_000),
            ("log.roll.ms", "log.roll.ms", 1),
            ("log.roll.ms", "log.roll.hours", 3_600_000),
        ];
        for (target, key, scale) in scaled {
            used.push(key);
            let Some(p) = get(key) else { continue };
            if config.broker_defaults.contains_key(target) {
                continue;
            }
            let n: i64 = p
                .value
                .trim()
                .parse()
                .map_err(|_| bad(p, format!("{:?} is not an integer", p.value)))?;
            let ms = if n < 0 { -1 } else { n.saturating_mul(scale) };
            let def = broker_config_def(target).expect("a broker config");
            let value = def
                .validate(&ms.to_string())
                .map_err(|e| bad(p, config_reason(e)))?;
            config.broker_defaults.insert(target.to_string(), value);
        }
        for key in [
            "num.partitions",
            "log.retention.bytes",
            "log.segment.bytes",
            "message.max.bytes",
        ] {
            used.push(key);
            if let Some(p) = get(key) {
                let def = broker_config_def(key).expect("a broker config");
                let value = def
                    .validate(&p.value)
                    .map_err(|e| bad(p, config_reason(e)))?;
                config.broker_defaults.insert(key.to_string(), value);
            }
        }

        // The authorizer.
        used.extend([
            "authorizer.class.name",
            "super.users",
            "allow.everyone.if.no.acl.found",
        ]);
        if let Some(p) = get("authorizer.class.name") {
            let class = p.value.trim();
            if !class.is_empty() {
                if !crate::security::authz::AUTHORIZER_CLASS_NAMES.contains(&class) {
                    return Err(bad(
                        p,
                        format!(
                            "{class:?} is not supported (use {})",
                            crate::security::authz::AUTHORIZER_CLASS_NAMES[0]
                        ),
                    ));
                }
                let super_users = match get("super.users") {
                    Some(p) => {
                        crate::security::authz::AuthorizerConfig::parse_super_users(&p.value)
                            .map_err(|e| bad(p, e.to_string()))?
                    }
                    None => Default::default(),
                };
                let allow_if_no_acl = match get("allow.everyone.if.no.acl.found") {
                    Some(p) => match p.value.trim().to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        other => return Err(bad(p, format!("{other:?} is not true or false"))),
                    },
                    None => false,
                };
                config.authorizer = Some(crate::security::authz::AuthorizerConfig {
                    super_users,
                    allow_if_no_acl,
                });
            }
        }

        // Producer transactions and producer-id expiration: read when the broker starts.
        for key in [
            "transaction.max.timeout.ms",
            "producer.id.expiration.ms",
            "transactional.id.expiration.ms",
        ] {
            used.push(key);
            if let Some(p) = get(key) {
                let n: i32 = p
                    .value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad(p, format!("{:?} is not a positive int", p.value)))?;
                config
                    .broker_defaults
                    .insert(key.to_string(), n.to_string());
            }
        }
        used.push("transaction.two.phase.commit.enable");
        if let Some(p) = get("transaction.two.phase.commit.enable") {
            let v = p.value.trim().to_ascii_lowercase();
            if v != "true" && v != "false" {
                return Err(bad(p, format!("{:?} is not true or false", p.value)));
            }
            config
                .broker_defaults
                .insert("transaction.two.phase.commit.enable".to_string(), v);
        }

        // TLS.
        config.tls = tls_settings(props, base, &mut used)?;
        let tls_listener = config.listeners.iter().find(|l| l.protocol.uses_tls());
        if let (Some(l), None) = (tls_listener, &config.tls) {
            let p = get("listeners").expect("listeners were read");
            return Err(bad(
                p,
                format!(
                    "listener {} is {} but no ssl.keystore.location or ssl.keystore.certificate.chain is set",
                    l.name,
                    l.protocol.name()
                ),
            ));
        }

        config.sasl = sasl_settings(props, &config.listeners, &mut used)?;
        config.limits = limit_settings(props, &config.listeners, &mut used)?;

        // Operations: the metrics and health listener, the log format, group timing.
        used.extend([
            "metrics.listen",
            "log.format",
            "group.initial.rebalance.delay.ms",
        ]);
        if let Some(p) = get("metrics.listen") {
            let addr = p.value.trim();
            addr.to_socket_addrs()
                .map_err(|e| bad(p, format!("not HOST:PORT ({e})")))?;
            config.metrics_listen = Some(addr.to_string());
        }
        if let Some(p) = get("log.format") {
            config.log_format = Some(
                crate::config::LogFormat::parse(&p.value)
                    .ok_or_else(|| bad(p, "String must be one of: text, json".to_string()))?,
            );
        }
        if let Some(p) = get("group.initial.rebalance.delay.ms") {
            let n: u64 = p
                .value
                .trim()
                .parse()
                .map_err(|_| bad(p, "Not a number of type INT, or below 0".to_string()))?;
            if n > i32::MAX as u64 {
                return Err(bad(p, "Value must be at most 2147483647".to_string()));
            }
            config.group_initial_rebalance_delay_ms = Some(n);
        }

        for p in props {
            if used.contains(&p.key.as_str()) || IGNORED_KEYS.contains(&p.key.as_str()) {
                continue;
            }
            config.warnings.push(format!(
                "line {}: unknown or unsupported config {:?} ignored",
                p.line, p.key
            ));
        }
        Ok(config)
    }
}

fn config_reason(e: ConfigError) -> String {
    match e {
        ConfigError::BadValue { value, reason, .. } => format!("{value:?}: {reason}"),
        other => other.to_string(),
    }
}

/// `NAME://HOST:PORT,...`; `bind`: an empty host means every interface (else refused).
fn parse_endpoints(text: &str, bind: bool) -> Result<Vec<(String, SocketAddr)>, String> {
    let mut out = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, hostport) = entry
            .split_once("://")
            .ok_or_else(|| format!("{entry:?} is not NAME://HOST:PORT"))?;
        let (host, port) = hostport
            .rsplit_once(':')
            .ok_or_else(|| format!("{entry:?} has no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{entry:?}: bad port {port:?}"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = match host {
            "" if bind => "0.0.0.0",
            "" => return Err(format!("{entry:?}: an advertised listener needs a host")),
            h => h,
        };
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("{entry:?}: {e}"))?
            .next()
            .ok_or_else(|| format!("{entry:?} resolves to no address"))?;
        out.push((name.trim().to_ascii_uppercase(), addr));
    }
    Ok(out)
}

/// `listener.name.<l>.<suffix>` of listener `l` (Kafka writes the name in lower case; either
/// case is accepted).
fn listener_key<'a>(props: &'a [Property], listener: &str, suffix: &str) -> Option<&'a Property> {
    let lower = format!("listener.name.{}.{suffix}", listener.to_ascii_lowercase());
    let upper = format!("listener.name.{listener}.{suffix}");
    props.iter().find(|p| p.key == lower || p.key == upper)
}

fn sasl_settings<'a>(
    props: &'a [Property],
    listeners: &[Listener],
    used: &mut Vec<&'a str>,
) -> Result<BTreeMap<String, ListenerSasl>, FileError> {
    let bad = |p: &Property, reason: String| FileError::Value {
        line: p.line,
        key: p.key.clone(),
        value: p.value.clone(),
        reason,
    };
    let get = |key: &str| props.iter().find(|p| p.key == key);
    let mut out = BTreeMap::new();
    let global = get("sasl.enabled.mechanisms");
    if let Some(p) = global {
        used.push(p.key.as_str());
    }
    // Kafka ignores an unprefixed `sasl.jaas.config` on a broker (with a warning).
    for p in props.iter().filter(|p| p.key.starts_with("listener.name.")) {
        if p.key.ends_with(".sasl.enabled.mechanisms") || p.key.ends_with(".sasl.jaas.config") {
            let named = listeners.iter().any(|l| {
                p.key
                    .starts_with(&format!("listener.name.{}.", l.name.to_ascii_lowercase()))
                    || p.key.starts_with(&format!("listener.name.{}.", l.name))
            });
            if !named {
                return Err(bad(p, "names no listener of `listeners`".to_string()));
            }
        }
    }
    for l in listeners.iter().filter(|l| l.protocol.uses_sasl()) {
        let p = listener_key(props, &l.name, "sasl.enabled.mechanisms")
            .or(global)
            .ok_or_else(|| FileError::Value {
                line: 0,
                key: "sasl.enabled.mechanisms".to_string(),
                value: String::new(),
                reason: format!(
                    "listener {} is {}: name its mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; Kafka's default GSSAPI is not supported)",
                    l.name,
                    l.protocol.name()
                ),
            })?;
        used.push(p.key.as_str());
        let mut mechanisms = Vec::new();
        for name in p.value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let m = Mechanism::parse(name).ok_or_else(|| {
                bad(
                    p,
                    format!(
                        "{name}: supported mechanisms are PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"
                    ),
                )
            })?;
            if !mechanisms.contains(&m) {
                mechanisms.push(m);
            }
        }
        if mechanisms.is_empty() {
            return Err(bad(p, format!("listener {} enables no mechanism", l.name)));
        }
        let mut plain = PlainUsers::default();
        for m in &mechanisms {
            let suffix = format!("{}.sasl.jaas.config", m.name().to_ascii_lowercase());
            let jaas = listener_key(props, &l.name, &suffix).or_else(|| get(&suffix));
            let Some(jp) = jaas else {
                if *m == Mechanism::Plain {
                    return Err(bad(
                        p,
                        format!(
                            "listener {} enables PLAIN but listener.name.{}.plain.sasl.jaas.config is not set",
                            l.name,
                            l.name.to_ascii_lowercase()
                        ),
                    ));
                }
                continue;
            };
            used.push(jp.key.as_str());
            let entry = parse_jaas(&jp.value).map_err(|r| bad(jp, r))?;
            match m {
                Mechanism::Plain => {
                    plain = PlainUsers::from_jaas(&entry).map_err(|r| bad(jp, r))?
                }
                _ if entry.module.ends_with("ScramLoginModule") => {}
                _ => {
                    return Err(bad(
                        jp,
                        format!("{} is not a ScramLoginModule", entry.module),
                    ))
                }
            }
        }
        out.insert(l.name.clone(), ListenerSasl { mechanisms, plain });
    }
    // JAAS entries of listeners that are not SASL listeners are still read (and ignored).
    for p in props
        .iter()
        .filter(|p| p.key.ends_with(".sasl.jaas.config"))
    {
        used.push(p.key.as_str());
    }
    for p in props
        .iter()
        .filter(|p| p.key.ends_with(".sasl.enabled.mechanisms"))
    {
        used.push(p.key.as_str());
    }
    Ok(out)
}

fn limit_settings<'a>(
    props: &'a [Property],
    listeners: &[Listener],
    used: &mut Vec<&'a str>,
) -> Result<LimitsConfig, FileError> {
    let bad = |p: &Property, reason: String| FileError::Value {
        line: p.line,
        key: p.key.clone(),
        value: p.value.clone(),
        reason,
    };
    let count = |p: &Property| -> Result<usize, FileError> {
        p.value
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 0)
            .map(|n| n as usize)
            .ok_or_else(|| {
                bad(
                    p,
                    format!("{:?} is not an integer between 0 and 2147483647", p.value),
                )
            })
    };
    // Kafka's default for every limit is Int.MaxValue: no limit.
    let limited = |n: usize| (n < i32::MAX as usize).then_some(n);
    let get = |key: &str| props.iter().find(|p| p.key == key);
    let mut c = LimitsConfig::default();
    if let Some(p) = get("max.connections") {
        used.push(p.key.as_str());
        c.max_connections = limited(count(p)?);
    }
    if let Some(p) = get("max.connection.creation.rate") {
        used.push(p.key.as_str());
        c.max_creation_rate = limited(count(p)?);
    }
    let per_ip = get("max.connections.per.ip");
    if let Some(p) = per_ip {
        used.push(p.key.as_str());
        c.max_connections_per_ip = limited(count(p)?);
    }
    if let Some(p) = get("max.connections.per.ip.overrides") {
        used.push(p.key.as_str());
        for entry in p.value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (host, n) = entry
                .rsplit_once(':')
                .ok_or_else(|| bad(p, format!("{entry:?} is not HOST:COUNT")))?;
            let n: usize = n
                .trim()
                .parse()
                .map_err(|_| bad(p, format!("{entry:?}: {n:?} is not a count")))?;
            let host = host.trim().trim_start_matches('[').trim_end_matches(']');
            let ips: Vec<std::net::IpAddr> = match host.parse() {
                Ok(ip) => vec![ip],
                Err(_) => (host, 0)
                    .to_socket_addrs()
                    .map_err(|e| bad(p, format!("{host}: {e}")))?
                    .map(|a| a.ip())
                    .collect(),
            };
            for ip in ips {
                c.per_ip_overrides.insert(ip, n);
            }
        }
    }
    if c.max_connections_per_ip == Some(0) && c.per_ip_overrides.is_empty() {
        let p = per_ip.expect("set above");
        return Err(bad(
            p,
            "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set"
                .to_string(),
        ));
    }
    for l in listeners {
        if let Some(p) = listener_key(props, &l.name, "max.connections") {
            used.push(p.key.as_str());
            if let Some(n) = limited(count(p)?) {
                c.listener_max_connections.insert(l.name.clone(), n);
            }
        }
        if let Some(p) = listener_key(props, &l.name, "max.connection.creation.rate") {
            used.push(p.key.as_str());
            if let Some(n) = limited(count(p)?) {
                c.listener_max_creation_rate.insert(l.name.clone(), n);
            }
        }
    }
    Ok(c)
}

fn tls_settings<'a>(
    props: &'a [Property],
    base: &Path,
    used: &mut Vec<&'a str>,
) -> Result<Option<TlsSettings>, FileError> {
    let get = |key: &str| props.iter().find(|p| p.key == key);
    let bad = |p: &Property, reason: String| FileError::Value {
        line: p.line,
        key: p.key.clone(),
        value: p.value.clone(),
        reason,
    };
    let read = |p: &Property| -> Result<String, FileError> {
        let path = base.join(p.value.trim());
        std::fs::read_to_string(&path).map_err(|e| bad(p, format!("{}: {e}", path.display())))
    };
    for key in [
        "ssl.keystore.type",
        "ssl.truststore.type",
        "ssl.keystore.location",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.client.auth",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.enabled.protocols",
        "ssl.protocol",
    ] {
        used.push(key);
    }
    for key in ["ssl.keystore.type", "ssl.truststore.type"] {
        if let Some(p) = get(key) {
            if !p.value.trim().eq_ignore_ascii_case("PEM") {
                return Err(bad(p, "only PEM is supported".to_string()));
            }
        }
    }
    let (chain, key) = match (
        get("ssl.keystore.location"),
        get("ssl.keystore.certificate.chain"),
        get("ssl.keystore.key"),
    ) {
        (Some(p), None, None) => {
            let text = read(p)?;
            (text.clone(), text)
        }
        (None, Some(c), Some(k)) => (c.value.clone(), k.value.clone()),
        (None, None, None) => return Ok(None),
        (Some(p), _, _) => {
            return Err(bad(
                p,
                "set either ssl.keystore.location or the inline ssl.keystore.certificate.chain and ssl.keystore.key, not both".to_string(),
            ))
        }
        (None, Some(p), None) | (None, None, Some(p)) => {
            return Err(bad(
                p,
                "ssl.keystore.certificate.chain and ssl.keystore.key go together".to_string(),
            ))
        }
    };
    let client_auth = match get("ssl.client.auth") {
        None => ClientAuth::None,
        Some(p) => match p.value.trim().to_ascii_lowercase().as_str() {
            "none" => ClientAuth::None,
            "requested" => ClientAuth::Requested,
            "required" => ClientAuth::Required,
            _ => return Err(bad(p, "must be none, requested or required".to_string())),
        },
    };
    let truststore = match (
        get("ssl.truststore.location"),
        get("ssl.truststore.certificates"),
    ) {
        (Some(p), None) => Some(read(p)?),
        (None, Some(p)) => Some(p.value.clone()),
        (None, None) => None,
        (Some(p), Some(_)) => {
            return Err(bad(
                p,
                "set ssl.truststore.location or ssl.truststore.certificates, not both".to_string(),
            ))
        }
    };
    if client_auth != ClientAuth::None && truststore.is_none() {
        let p = get("ssl.client.auth").expect("set above");
        return Err(bad(
            p,
            "client authentication needs ssl.truststore.location".to_string(),
        ));
    }
    Ok(Some(TlsSettings {
        certificate_chain_pem: chain,
        private_key_pem: key,
        client_auth,
        truststore_pem: truststore,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<FileConfig, FileError> {
        FileConfig::from_properties(&parse_properties(text), Path::new("."))
    }

    #[test]
    fn properties_syntax() {
        let props = parse_properties(
            "# comment\n! also\n  a=1\nb : two words \nc three\nd=x\\\n   y\ne=\\n\\:\\\\\na=2\n",
        );
        let kv: Vec<(&str, &str, usize)> = props
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str(), p.line))
            .collect();
        assert_eq!(
            kv,
            vec![
                ("b", "two words ", 4),
                ("c", "three", 5),
                ("d", "xy", 6),
                ("e", "\n:\\", 8),
                ("a", "2", 9),
            ]
        );
    }

    #[test]
    fn sasl_and_limits() {
        let base = "listeners=A://127.0.0.1:1,B://127.0.0.1:2,C://127.0.0.1:3\n\
             listener.security.protocol.map=A:SASL_PLAINTEXT,B:SASL_PLAINTEXT,C:PLAINTEXT\n\
             sasl.enabled.mechanisms=SCRAM-SHA-512\n";
        let c = load(&format!(
            "{base}listener.name.a.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256\n\
             listener.name.a.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n\
               user_alice=\"pw\";\n\
             listener.name.b.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n\
             sasl.jaas.config=x required;\n\
             max.connections=10\nmax.connections.per.ip=2\nmax.connections.per.ip.overrides=127.0.0.1:5\n\
             listener.name.c.max.connections=3\nmax.connection.creation.rate=100\n"
        ))
        .unwrap();
        assert_eq!(
            c.sasl["A"].mechanisms,
            vec![Mechanism::Plain, Mechanism::ScramSha256]
        );
        assert_eq!(
            c.sasl["A"].plain.authenticate(b"\0alice\0pw").unwrap(),
            "alice"
        );
        assert_eq!(c.sasl["B"].mechanisms, vec![Mechanism::ScramSha512]);
        assert!(!c.sasl.contains_key("C"));
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("sasl.jaas.config"));
        assert_eq!(c.limits.max_connections, Some(10));
        assert_eq!(c.limits.max_connections_per_ip, Some(2));
        assert_eq!(
            c.limits.per_ip_overrides[&"127.0.0.1".parse::<std::net::IpAddr>().unwrap()],
            5
        );
        assert_eq!(c.limits.listener_max_connections["C"], 3);
        assert_eq!(c.limits.max_creation_rate, Some(100));

        // Refusals: no mechanisms, GSSAPI, PLAIN without users, bad counts.
        let no_mech = "listeners=A://127.0.0.1:1\nlistener.security.protocol.map=A:SASL_SSL\n\
            ssl.keystore.certificate.chain=x\nssl.keystore.key=y\n";
        assert!(load(no_mech).is_err());
        assert!(load(&format!(
            "{base}listener.name.a.sasl.enabled.mechanisms=GSSAPI\n"
        ))
        .is_err());
        assert!(load(&format!(
            "{base}listener.name.a.sasl.enabled.mechanisms=PLAIN\n"
        ))
        .is_err());
        assert!(load(&format!("{base}max.connections=-1\n")).is_err());
        assert!(load(&format!("{base}max.connections.per.ip=0\n")).is_err());
        assert!(load(&format!(
            "{base}listener.name.zz.sasl.enabled.mechanisms=PLAIN\n"
        ))
        .is_err());
        assert!(load(&format!(
            "{base}listener.name.b.scram-sha-512.sasl.jaas.config=x.PlainLoginModule required;\n"
        ))
        .is_err());
    }

    #[test]
    fn listeners_and_advertised() {
        let c = load(
            "listeners=PLAINTEXT://127.0.0.1:9092,CLIENT://:9093\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT\n\
             advertised.listeners=CLIENT://127.0.0.1:19093\n\
             sasl.enabled.mechanisms=SCRAM-SHA-256\n",
        )
        .unwrap();
        assert_eq!(c.listeners.len(), 2);
        assert_eq!(c.listeners[0].name, "PLAINTEXT");
        assert_eq!(c.listeners[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(c.listeners[0].advertised, None);
        assert_eq!(c.listeners[1].addr, "0.0.0.0:9093".parse().unwrap());
        assert_eq!(c.listeners[1].protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(
            c.listeners[1].advertised,
            Some("127.0.0.1:19093".parse().unwrap())
        );
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn bad_values_name_key_and_line() {
        let e = load("node.id=1\nlisteners=FOO://127.0.0.1:1\n").unwrap_err();
        assert!(
            matches!(&e, FileError::Value { line: 2, key, .. } if key == "listeners"),
            "{e}"
        );
        let e = load("\n\nnum.partitions=zero\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 3: num.partitions: \"zero\": not an integer"
        );
        let e = load("listeners=PLAINTEXT://127.0.0.1:x\n").unwrap_err();
        assert!(e.to_string().contains("bad port"), "{e}");
        let e = load("listeners=SSL://127.0.0.1:9093\n").unwrap_err();
        assert!(e.to_string().contains("ssl.keystore"), "{e}");
        let e =
            load("listeners=PLAINTEXT://127.0.0.1:1\nadvertised.listeners=X://h:1\n").unwrap_err();
        assert!(matches!(&e, FileError::Value { line: 2, .. }), "{e}");
        let e = load("log.dirs=/a,/b\n").unwrap_err();
        assert!(e.to_string().contains("only one"), "{e}");
        let e = load("ssl.keystore.type=JKS\n").unwrap_err();
        assert!(e.to_string().contains("PEM"), "{e}");
    }

    #[test]
    fn broker_defaults_and_units() {
        let c = load(
            "log.dirs=/tmp/x\nnum.partitions=3\nlog.retention.hours=2\nlog.segment.bytes=1048576\nlog.roll.hours=1\nfoo.bar=1\n",
        )
        .unwrap();
        assert_eq!(c.data_dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(c.broker_defaults["num.partitions"], "3");
        assert_eq!(c.broker_defaults["log.retention.ms"], "7200000");
        assert_eq!(c.broker_defaults["log.roll.ms"], "3600000");
        assert_eq!(c.broker_defaults["log.segment.bytes"], "1048576");
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("foo.bar"));
        // ms wins over hours whatever the order (Kafka's precedence).
        let c = load("log.retention.hours=2\nlog.retention.ms=5\n").unwrap();
        assert_eq!(c.broker_defaults["log.retention.ms"], "5");
        let c = load("log.retention.hours=-1\n").unwrap();
        assert_eq!(c.broker_defaults["log.retention.ms"], "-1");
        let c = load("producer.id.expiration.ms=60000\ntransactional.id.expiration.ms=3600000\n")
            .unwrap();
        assert_eq!(c.broker_defaults["producer.id.expiration.ms"], "60000");
        assert_eq!(
            c.broker_defaults["transactional.id.expiration.ms"],
            "3600000"
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let e = load("producer.id.expiration.ms=0\n").unwrap_err();
        assert!(
            matches!(&e, FileError::Value { line: 1, key, .. } if key == "producer.id.expiration.ms"),
            "{e}"
        );
    }

    #[test]
    fn inline_tls_and_client_auth() {
        let c = load(
            "listeners=SSL://127.0.0.1:9093\nssl.keystore.type=PEM\n\
             ssl.keystore.certificate.chain=-----BEGIN CERTIFICATE----- \\\n  abc \\\n  -----END CERTIFICATE-----\n\
             ssl.keystore.key=KEY\nssl.client.auth=required\nssl.truststore.certificates=CA\n",
        )
        .unwrap();
        let tls = c.tls.unwrap();
        assert_eq!(
            tls.certificate_chain_pem,
            "-----BEGIN CERTIFICATE----- abc -----END CERTIFICATE-----"
        );
        assert_eq!(tls.private_key_pem, "KEY");
        assert_eq!(tls.client_auth, ClientAuth::Required);
        assert_eq!(tls.truststore_pem.as_deref(), Some("CA"));
        let e = load(
            "ssl.keystore.certificate.chain=C\nssl.keystore.key=K\nssl.client.auth=required\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("truststore"), "{e}");
    }
}
