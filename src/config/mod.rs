//! Validated broker configuration (units in names); defaults from `constants`.
//!
//! Two kinds of configuration live here:
//! - [`BrokerConfig`]: what the process is started with (listener, data directory, shards);
//!   fixed for the life of the process.
//! - Named Kafka configs ([`TOPIC_CONFIGS`], [`BROKER_CONFIGS`]): the key/value settings that
//!   CreateTopics, DescribeConfigs and IncrementalAlterConfigs speak about. Only keys the broker
//!   honours are accepted; every value is validated by its definition before it is stored, so
//!   [`TopicSettings::resolve`] never sees an invalid value. Topic overrides fall back to the
//!   broker's dynamic value of the synonym key, then to the static default.
//!
//! The stored overrides are owned by the topic registry (`shard::registry`), which every shard
//! holds a copy of; this module is pure data and validation.

pub use crate::config::file::{Listener, SecurityProtocol, TlsSettings};

pub mod file;

use crate::constants::{
    DATA_DIR_DEFAULT, GROUP_INITIAL_REBALANCE_DELAY_MS, LISTEN_ADDR_DEFAULT,
    LOG_SEGMENT_BYTES_DEFAULT, LOG_SEGMENT_MS_DEFAULT, RECORD_BATCH_BYTES_MAX_DEFAULT, SHARDS_MAX,
    SHARE_DELIVERY_COUNT_LIMIT_MAX, SHARE_DELIVERY_COUNT_LIMIT_MIN,
    SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MIN, SHARE_GROUP_RECORD_LOCK_DURATION_MS_FLOOR,
    SHARE_GROUP_RECORD_LOCK_DURATION_MS_MAX, SHARE_GROUP_RECORD_LOCK_DURATION_MS_MIN,
    SHARE_HEARTBEAT_INTERVAL_MS_MAX, SHARE_HEARTBEAT_INTERVAL_MS_MIN,
    SHARE_PARTITION_MAX_RECORD_LOCKS_MAX, SHARE_SESSION_TIMEOUT_MS_MAX,
    SHARE_SESSION_TIMEOUT_MS_MIN, SHARE_TRANSACTION_MAX_PENDING_MAX,
    SHARE_TRANSACTION_TIMEOUT_MS_MAX, TOPIC_PARTITIONS_DEFAULT, TOPIC_PARTITIONS_MAX,
    TOPIC_SEGMENT_BYTES_MIN,
};
use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    BadAddress {
        flag: &'static str,
        value: String,
        reason: String,
    },
    BadShards {
        requested: usize,
        max: usize,
    },
    UnknownKey {
        key: String,
    },
    BadValue {
        key: String,
        value: String,
        reason: String,
    },
    ReadOnly {
        key: String,
    },
    /// A value refused with Kafka's own message (share-group configs).
    Refused {
        key: String,
        message: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::BadAddress {
                flag,
                value,
                reason,
            } => write!(f, "{flag} {value:?}: {reason}"),
            ConfigError::BadShards { requested, max } => {
                write!(f, "--shards {requested}: must be between 1 and {max}")
            }
            ConfigError::UnknownKey { key } => write!(f, "unknown or unsupported config {key:?}"),
            ConfigError::BadValue { key, value, reason } => {
                write!(f, "invalid value {value:?} for config {key:?}: {reason}")
            }
            ConfigError::ReadOnly { key } => write!(f, "config {key:?} cannot be changed"),
            ConfigError::Refused { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The process configuration, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerConfig {
    /// Address every shard binds (SO_REUSEPORT) for the Kafka protocol.
    pub listen: SocketAddr,
    /// Root of all persistent state.
    pub data_dir: PathBuf,
    /// Number of shards (executors, one per core).
    pub shards: usize,
    /// Where Prometheus text is served, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// The address Metadata, FindCoordinator and share responses name as this broker (Kafka's
    /// `advertised.listeners`); `None`: the local address each client connected to. Set when
    /// clients reach the broker through something in between (a proxy).
    pub advertised: Option<SocketAddr>,
    /// Every listener, the first at [`Self::listen`] advertising [`Self::advertised`]
    /// (`--config`'s `listeners`; else one PLAINTEXT listener).
    pub listeners: Vec<Listener>,
    /// TLS material of the SSL and SASL_SSL listeners.
    pub tls: Option<TlsSettings>,
    /// SASL settings of the SASL listeners, by listener name.
    pub sasl: BTreeMap<String, crate::config::file::ListenerSasl>,
    /// Connection limits (`conn_limits`).
    pub limits: crate::security::conn_limits::LimitsConfig,
    /// Static broker defaults from the configuration file (installed with
    /// [`set_static_broker_defaults`] when the broker starts).
    pub broker_defaults: BTreeMap<String, String>,
    /// The authorizer's settings (`authorizer.class.name` set); `None`: every request is
    /// allowed (no authorizer, as in Kafka).
    pub authorizer: Option<crate::security::authz::AuthorizerConfig>,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of a new or empty
    /// classic group waits for more members (Kafka's default 3000).
    pub group_initial_rebalance_delay_ms: u64,
    /// Test-only fault injection (`--test-fault`, a hidden flag); `None` in production.
    pub test_fault: Option<TestFault>,
}

/// `log.format`: how the broker writes its log lines on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event (the default).
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields), for log shippers.
    Json,
}

impl LogFormat {
    pub fn parse(value: &str) -> Option<LogFormat> {
        match value.trim().to_ascii_lowercase().as_str() {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// A fault the broker injects into itself, for tests of the fatal path only (hidden flag
/// `--test-fault`; never set in production).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestFault {
    /// `panic-shard=N,after-ms=M`: shard `N` panics `M` ms after it is ready.
    PanicShard { shard: usize, after_ms: u64 },
}

impl TestFault {
    /// Parses `panic-shard=N,after-ms=M`.
    pub fn parse(spec: &str) -> Result<TestFault, ConfigError> {
        let bad = |reason: &str| ConfigError::BadValue {
            key: "--test-fault".into(),
            value: spec.to_string(),
            reason: reason.to_string(),
        };
        let (mut shard, mut after_ms) = (None, None);
        for part in spec.split(',') {
            match part.split_once('=') {
                Some(("panic-shard", n)) => {
                    shard = Some(
                        n.parse()
                            .map_err(|_| bad("panic-shard: not a shard index"))?,
                    )
                }
                Some(("after-ms", n)) => {
                    after_ms = Some(n.parse().map_err(|_| bad("after-ms: not milliseconds"))?)
                }
                _ => return Err(bad("expected panic-shard=N,after-ms=M")),
            }
        }
        match (shard, after_ms) {
            (Some(shard), Some(after_ms)) => Ok(TestFault::PanicShard { shard, after_ms }),
            _ => Err(bad("expected panic-shard=N,after-ms=M")),
        }
    }
}

impl BrokerConfig {
    /// Validates raw settings. `shards = None` means one shard per available core.
    pub fn new(
        listen: Option<&str>,
        data_dir: Option<PathBuf>,
        shards: Option<usize>,
        metrics_listen: Option<&str>,
        available_cores: usize,
    ) -> Result<BrokerConfig, ConfigError> {
        let listen = resolve_addr("--listen", listen.unwrap_or(LISTEN_ADDR_DEFAULT))?;
        let metrics_listen = match metrics_listen {
            Some(addr) => Some(resolve_addr("--metrics-listen", addr)?),
            None => None,
        };
        let shards = shards.unwrap_or(available_cores.clamp(1, SHARDS_MAX));
        if shards == 0 || shards > SHARDS_MAX {
            return Err(ConfigError::BadShards {
                requested: shards,
                max: SHARDS_MAX,
            });
        }
        Ok(BrokerConfig {
            listen,
            data_dir: data_dir.unwrap_or_else(|| PathBuf::from(DATA_DIR_DEFAULT)),
            shards,
            metrics_listen,
            advertised: None,
            listeners: vec![Listener {
                name: "PLAINTEXT".to_string(),
                addr: listen,
                protocol: SecurityProtocol::Plaintext,
                advertised: None,
            }],
            tls: None,
            sasl: BTreeMap::new(),
            limits: Default::default(),
            broker_defaults: BTreeMap::new(),
            authorizer: None,
            group_initial_rebalance_delay_ms: GROUP_INITIAL_REBALANCE_DELAY_MS,
            test_fault: None,
        })
    }

    /// The effective configuration as `key=value` lines in Kafka's property names (what
    /// `lockstep --check-config` prints): every setting a file or flag can change, with the
    /// value in force, defaults included. Secrets (keys, passwords) are never printed.
    pub fn effective(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut put = |key: &str, value: String| out.push((key.to_string(), value));
        let join = |items: Vec<String>| items.join(",");
        put(
            "listeners",
            join(
                self.listeners
                    .iter()
                    .map(|l| format!("{}://{}", l.name, l.addr))
                    .collect(),
            ),
        );
        put(
            "advertised.listeners",
            join(
                self.listeners
                    .iter()
                    .filter_map(|l| l.advertised.map(|a| format!("{}://{a}", l.name)))
                    .collect(),
            ),
        );
        put(
            "listener.security.protocol.map",
            join(
                self.listeners
                    .iter()
                    .map(|l| format!("{}:{}", l.name, l.protocol.name()))
                    .collect(),
            ),
        );
        put("log.dirs", self.data_dir.display().to_string());
        put(
            "metrics.listen",
            self.metrics_listen
                .map(|a| a.to_string())
                .unwrap_or_default(),
        );
        put(
            "group.initial.rebalance.delay.ms",
            self.group_initial_rebalance_delay_ms.to_string(),
        );
        for def in BROKER_CONFIGS {
            let value = self
                .broker_defaults
                .get(def.name)
                .cloned()
                .unwrap_or_else(|| def.default.to_string());
            put(def.name, value);
        }
        for (key, value) in &self.broker_defaults {
            if broker_config_def(key).is_none() {
                put(key, value.clone());
            }
        }
        if let Some(tls) = &self.tls {
            let auth = match tls.client_auth {
                crate::config::file::ClientAuth::None => "none",
                crate::config::file::ClientAuth::Requested => "requested",
                crate::config::file::ClientAuth::Required => "required",
            };
            put("ssl.client.auth", auth.to_string());
        }
        for (listener, sasl) in &self.sasl {
            put(
                &format!(
                    "listener.name.{}.sasl.enabled.mechanisms",
                    listener.to_ascii_lowercase()
                ),
                join(
                    sasl.mechanisms
                        .iter()
                        .map(|m| m.name().to_string())
                        .collect(),
                ),
            );
        }
        match &self.authorizer {
            Some(a) => {
                put(
                    "authorizer.class.name",
                    crate::security::authz::AUTHORIZER_CLASS_NAMES[0].to_string(),
                );
                let mut users: Vec<&String> = a.super_users.iter().collect();
                users.sort();
                put(
                    "super.users",
                    users
                        .iter()
                        .map(|u| u.as_str())
                        .collect::<Vec<_>>()
                        .join(";"),
                );
                put(
                    "allow.everyone.if.no.acl.found",
                    a.allow_if_no_acl.to_string(),
                );
            }
            None => put("authorizer.class.name", String::new()),
        }
        let limits = &self.limits;
        let opt = |v: Option<usize>| v.map(|n| n.to_string()).unwrap_or_default();
        put("max.connections", opt(limits.max_connections));
        put("max.connections.per.ip", opt(limits.max_connections_per_ip));
        put(
            "max.connection.creation.rate",
            opt(limits.max_creation_rate),
        );
        out
    }

    /// Sets [`Self::test_fault`] from its spec (hidden flag `--test-fault`, tests only).
    pub fn with_test_fault(mut self, spec: &str) -> Result<BrokerConfig, ConfigError> {
        let fault = TestFault::parse(spec)?;
        let TestFault::PanicShard { shard, .. } = fault;
        if shard >= self.shards {
            return Err(ConfigError::BadValue {
                key: "--test-fault".into(),
                value: spec.to_string(),
                reason: format!("the broker runs {} shards", self.shards),
            });
        }
        self.test_fault = Some(fault);
        Ok(self)
    }

    /// Sets [`Self::advertised`] (and the first listener's) from `HOST:PORT` (flag
    /// `--advertised`).
    pub fn with_advertised(mut self, addr: &str) -> Result<BrokerConfig, ConfigError> {
        let addr = resolve_addr("--advertised", addr)?;
        self.advertised = Some(addr);
        self.listeners[0].advertised = Some(addr);
        Ok(self)
    }

    /// Replaces the listeners with a configuration file's (non-empty, validated there).
    pub fn with_listeners(mut self, listeners: Vec<Listener>) -> BrokerConfig {
        assert!(!listeners.is_empty(), "at least one listener");
        self.listen = listeners[0].addr;
        self.advertised = listeners[0].advertised;
        self.listeners = listeners;
        self
    }
}

/// Broker defaults a configuration file sets (Kafka's STATIC_BROKER_CONFIG): fixed for the life
/// of the process, below the dynamic broker values and above the built-in defaults.
static STATIC_BROKER_DEFAULTS: std::sync::OnceLock<BTreeMap<String, String>> =
    std::sync::OnceLock::new();

/// Installs the configuration file's broker defaults; the first call wins (once per process,
/// before the shards start).
pub fn set_static_broker_defaults(defaults: BTreeMap<String, String>) {
    let _ = STATIC_BROKER_DEFAULTS.set(defaults);
}

/// The default of `def` for this process: the file's value, else the built-in one.
fn static_default(def: &ConfigDef) -> String {
    STATIC_BROKER_DEFAULTS
        .get()
        .and_then(|m| m.get(def.name))
        .cloned()
        .unwrap_or_else(|| def.default.to_string())
}

fn resolve_addr(flag: &'static str, value: &str) -> Result<SocketAddr, ConfigError> {
    let bad = |reason: String| ConfigError::BadAddress {
        flag,
        value: value.to_string(),
        reason,
    };
    let mut addrs = value
        .to_socket_addrs()
        .map_err(|e| bad(format!("not HOST:PORT ({e})")))?;
    addrs
        .next()
        .ok_or_else(|| bad("resolves to no address".to_string()))
}

/// Kafka's config value types, as DescribeConfigs v3+ reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    List = 7,
}

/// How a value is checked before it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigRule {
    /// An integer in `min ..= max`.
    Range { min: i64, max: i64 },
    /// One of the listed strings.
    OneOf(&'static [&'static str]),
    /// Kafka's integer share-group config: its definition parses values of at least `floor`
    /// ("Value must be at least"), the broker's bounds then allow `min ..= max` ("must be in
    /// the range"). Refusals carry Kafka's messages.
    Bounded { floor: i64, min: i64, max: i64 },
    /// Kafka's string share-group config (`ValidString`): one of the listed strings, exactly;
    /// refusals carry Kafka's message.
    Choice(&'static [&'static str]),
    /// `share.auto.offset.reset`: `earliest`, `latest` or `by_duration:<ISO-8601 duration>`.
    AutoOffsetReset,
    /// `errors.deadletterqueue.topic.name` (KIP-1191): any name, blank for none, but not one
    /// starting with `__` (Kafka's `GroupConfig.validate`, INVALID_CONFIG with its message).
    DlqTopicName,
    /// Kafka's BOOLEAN group config: `true`/`false` in any case, trimmed; refusals carry
    /// Kafka's message.
    KafkaBoolean,
    /// Cannot be set at all.
    ReadOnly,
}

/// One named config the broker understands.
#[derive(Clone, Copy, Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    pub config_type: ConfigType,
    pub default: &'static str,
    pub rule: ConfigRule,
    /// For a topic config: the broker config that provides its default.
    pub synonym: Option<&'static str>,
    pub doc: &'static str,
}

impl ConfigDef {
    /// Checks `value` for this key; returns it in canonical form.
    pub fn validate(&self, value: &str) -> Result<String, ConfigError> {
        let bad = |reason: &str| ConfigError::BadValue {
            key: self.name.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        };
        match self.rule {
            ConfigRule::ReadOnly => Err(ConfigError::ReadOnly {
                key: self.name.to_string(),
            }),
            ConfigRule::Range { min, max } => {
                let parsed: i64 = value.trim().parse().map_err(|_| bad("not an integer"))?;
                if parsed < min || parsed > max {
                    return Err(bad(&format!("must be between {min} and {max}")));
                }
                Ok(parsed.to_string())
            }
            ConfigRule::OneOf(allowed) => {
                let trimmed = value.trim();
                if allowed.contains(&trimmed) {
                    Ok(trimmed.to_string())
                } else {
                    Err(bad(&format!("supported values: {}", allowed.join(", "))))
                }
            }
            ConfigRule::Bounded { floor, min, max } => {
                let trimmed = value.trim();
                let kind = match self.config_type {
                    ConfigType::Long => "LONG",
                    _ => "INT",
                };
                let parsed: i64 = trimmed
                    .parse()
                    .ok()
                    .filter(|v| kind == "LONG" || i32::try_from(*v).is_ok())
                    .ok_or_else(|| {
                        self.refused(format!(
                            "Invalid value {trimmed} for configuration {}: Not a number of type {kind}",
                            self.name
                        ))
                    })?;
                if parsed < floor {
                    return Err(self.refused(format!(
                        "Invalid value {parsed} for configuration {}: Value must be at least {floor}",
                        self.name
                    )));
                }
                if parsed < min || parsed > max {
                    return Err(self.refused(format!(
                        "{} must be in the range {min} to {max} inclusive.",
                        self.name
                    )));
                }
                Ok(parsed.to_string())
            }
            ConfigRule::Choice(allowed) => {
                let trimmed = value.trim();
                if allowed.contains(&trimmed) {
                    Ok(trimmed.to_string())
                } else {
                    Err(self.refused(format!(
                        "Invalid value {trimmed} for configuration {}: String must be one of: {}",
                        self.name,
                        allowed.join(", ")
                    )))
                }
            }
            ConfigRule::KafkaBoolean => {
                let trimmed = value.trim();
                match trimmed.to_ascii_lowercase().as_str() {
                    b @ ("true" | "false") => Ok(b.to_string()),
                    _ => Err(self.refused(format!(
                        "Invalid value {trimmed} for configuration {}: Expected value to be either true or false",
                        self.name
                    ))),
                }
            }
            ConfigRule::DlqTopicName => {
                if value.starts_with("__") {
                    return Err(self.refused(format!(
                        "{}: DLQ topic name must not start with '__'",
                        self.name
                    )));
                }
                Ok(value.to_string())
            }
            ConfigRule::AutoOffsetReset => {
                let trimmed = value.trim();
                let ok = match trimmed {
                    "earliest" | "latest" => true,
                    other => other
                        .strip_prefix("by_duration:")
                        .is_some_and(|d| parse_iso_duration_ms(d).is_some()),
                };
                if ok {
                    Ok(trimmed.to_string())
                } else {
                    Err(self.refused(format!(
                        "Invalid value {trimmed} for configuration {name}: Invalid value `{trimmed}` for \
                         configuration {name}. The value must be either 'earliest', 'latest' or of the \
                         format 'by_duration:<PnDTnHnMn.nS>'.",
                        name = self.name
                    )))
                }
            }
        }
    }

    fn refused(&self, message: String) -> ConfigError {
        ConfigError::Refused {
            key: self.name.to_string(),
            message,
        }
    }

    pub fn is_read_only(&self) -> bool {
        self.rule == ConfigRule::ReadOnly
    }
}

/// Milliseconds of an ISO-8601 duration as Java's `Duration.parse` reads it (`PnDTnHnMn.nS`,
/// any case; fractions only on seconds); `None` if it is malformed or negative.
pub fn parse_iso_duration_ms(text: &str) -> Option<u64> {
    let upper = text.trim().to_ascii_uppercase();
    let rest = upper.strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let digits = |s: &str| -> Option<u128> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 18 {
            return None;
        }
        s.parse().ok()
    };
    let mut ms: u128 = 0;
    let mut sections = 0;
    if !date.is_empty() {
        ms += digits(date.strip_suffix('D')?)? * 86_400_000;
        sections += 1;
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        for (unit, scale) in [('H', 3_600_000u128), ('M', 60_000)] {
            if let Some((n, tail)) = time.split_once(unit) {
                ms += digits(n)? * scale;
                sections += 1;
                time = tail;
            }
        }
        if !time.is_empty() {
            let seconds = time.strip_suffix('S')?;
            let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
            ms += digits(whole)? * 1_000;
            if !fraction.is_empty() {
                if fraction.len() > 9 {
                    return None;
                }
                let padded = format!("{fraction:0<3}");
                ms += digits(&padded[..3])?;
            }
            sections += 1;
        }
    }
    if sections == 0 {
        return None;
    }
    u64::try_from(ms).ok()
}

const SEGMENT_BYTES_DEFAULT_STR: &str = "268435456";
const SEGMENT_MS_DEFAULT_STR: &str = "604800000";
const MAX_MESSAGE_BYTES_DEFAULT_STR: &str = "1048588";
const _: () = assert!(LOG_SEGMENT_BYTES_DEFAULT == 268_435_456);
const _: () = assert!(LOG_SEGMENT_MS_DEFAULT == 604_800_000);
const _: () = assert!(RECORD_BATCH_BYTES_MAX_DEFAULT == 1_048_588);
const _: () = assert!(TOPIC_PARTITIONS_DEFAULT == 1);

/// Topic configs the broker honours.
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "retention.ms",
        config_type: ConfigType::Long,
        default: "604800000",
        rule: ConfigRule::Range {
            min: -1,
            max: i64::MAX,
        },
        synonym: Some("log.retention.ms"),
        doc: "Age after which closed segments are deleted; -1 keeps them forever.",
    },
    ConfigDef {
        name: "retention.bytes",
        config_type: ConfigType::Long,
        default: "-1",
        rule: ConfigRule::Range {
            min: -1,
            max: i64::MAX,
        },
        synonym: Some("log.retention.bytes"),
        doc: "Size above which the oldest closed segments are deleted; -1 means no limit.",
    },
    ConfigDef {
        name: "segment.bytes",
        config_type: ConfigType::Int,
        default: SEGMENT_BYTES_DEFAULT_STR,
        rule: ConfigRule::Range {
            min: TOPIC_SEGMENT_BYTES_MIN,
            max: i32::MAX as i64,
        },
        synonym: Some("log.segment.bytes"),
        doc: "Size at which the active segment is rolled.",
    },
    ConfigDef {
        name: "segment.ms",
        config_type: ConfigType::Long,
        default: SEGMENT_MS_DEFAULT_STR,
        rule: ConfigRule::Range {
            min: 1,
            max: i64::MAX,
        },
        synonym: Some("log.roll.ms"),
        doc: "Age at which the active segment is rolled.",
    },
    ConfigDef {
        name: "max.message.bytes",
        config_type: ConfigType::Int,
        default: MAX_MESSAGE_BYTES_DEFAULT_STR,
        rule: ConfigRule::Range {
            min: 0,
            max: crate::constants::FRAME_PAYLOAD_BYTES_MAX as i64,
        },
        synonym: Some("message.max.bytes"),
        doc: "Largest record batch a produce may append.",
    },
    ConfigDef {
        name: "cleanup.policy",
        config_type: ConfigType::List,
        default: "delete",
        rule: ConfigRule::OneOf(&["delete"]),
        synonym: Some("log.cleanup.policy"),
        doc: "Only delete (retention) is supported; compaction is not.",
    },
    ConfigDef {
        name: "min.insync.replicas",
        config_type: ConfigType::Int,
        default: "1",
        rule: ConfigRule::Range { min: 1, max: 1 },
        synonym: Some("min.insync.replicas"),
        doc: "Single-node broker: always 1; acks=all waits for the durable flush.",
    },
    ConfigDef {
        name: "errors.deadletterqueue.group.enable",
        config_type: ConfigType::Boolean,
        default: "false",
        rule: ConfigRule::OneOf(&["true", "false"]),
        synonym: None,
        doc: "Enable this topic to be used as a dead-letter queue for share groups (KIP-1191). When true, share groups can write undeliverable records to this topic; when false (the default), attempts to use this topic as a DLQ are rejected.",
    },
];

/// Share-group configs (resource type GROUP), Kafka's names and ranges; the typed view is
/// `shard::share_group::ShareGroupConfig`.
pub const GROUP_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "share.auto.offset.reset",
        config_type: ConfigType::String,
        default: "latest",
        rule: ConfigRule::AutoOffsetReset,
        synonym: None,
        doc: "Where a share group with no state for a partition starts: the log end (latest), the log start (earliest), or the first record at most a duration old (by_duration:<ISO-8601 duration>).",
    },
    ConfigDef {
        name: "share.isolation.level",
        config_type: ConfigType::String,
        default: "read_uncommitted",
        rule: ConfigRule::Choice(&["read_committed", "read_uncommitted"]),
        synonym: None,
        doc: "Which records share consumers read: read_committed acquires only below the last stable offset and never delivers the records of aborted transactions.",
    },
    ConfigDef {
        name: "share.record.lock.duration.ms",
        config_type: ConfigType::Int,
        default: "30000",
        rule: ConfigRule::Bounded {
            floor: SHARE_GROUP_RECORD_LOCK_DURATION_MS_FLOOR as i64,
            min: SHARE_GROUP_RECORD_LOCK_DURATION_MS_MIN as i64,
            max: SHARE_GROUP_RECORD_LOCK_DURATION_MS_MAX as i64,
        },
        synonym: None,
        doc: "How long an acquired record stays with its consumer before it is available again.",
    },
    ConfigDef {
        name: "share.delivery.count.limit",
        config_type: ConfigType::Int,
        default: "5",
        rule: ConfigRule::Bounded {
            floor: SHARE_DELIVERY_COUNT_LIMIT_MIN as i64,
            min: SHARE_DELIVERY_COUNT_LIMIT_MIN as i64,
            max: SHARE_DELIVERY_COUNT_LIMIT_MAX as i64,
        },
        synonym: None,
        doc: "Deliveries after which a record that comes back is archived instead.",
    },
    ConfigDef {
        name: "share.partition.max.record.locks",
        config_type: ConfigType::Int,
        default: "2000",
        // Kafka's upper bound (SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MAX) is checked with the
        // other configs of the group: transactional groups may go past it.
        rule: ConfigRule::Bounded {
            floor: SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MIN as i64,
            min: SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MIN as i64,
            max: SHARE_PARTITION_MAX_RECORD_LOCKS_MAX as i64,
        },
        synonym: None,
        doc: "Most in-flight records (from the share-partition start offset) per partition; at most 4000 (Kafka's bound) unless share.acknowledgement.mode is transactional.",
    },
    ConfigDef {
        name: "share.session.timeout.ms",
        config_type: ConfigType::Int,
        default: "45000",
        rule: ConfigRule::Bounded {
            floor: 1,
            min: SHARE_SESSION_TIMEOUT_MS_MIN as i64,
            max: SHARE_SESSION_TIMEOUT_MS_MAX as i64,
        },
        synonym: None,
        doc: "A member that sends no heartbeat for this long is removed from the group.",
    },
    ConfigDef {
        name: "share.heartbeat.interval.ms",
        config_type: ConfigType::Int,
        default: "5000",
        rule: ConfigRule::Bounded {
            floor: 1,
            min: SHARE_HEARTBEAT_INTERVAL_MS_MIN as i64,
            max: SHARE_HEARTBEAT_INTERVAL_MS_MAX as i64,
        },
        synonym: None,
        doc: "The heartbeat interval the group's members are told to use.",
    },
    ConfigDef {
        name: "share.acknowledgement.mode",
        config_type: ConfigType::String,
        default: "explicit",
        rule: ConfigRule::OneOf(&["implicit", "explicit", "transactional"]),
        synonym: None,
        doc: "How the group's consumers acknowledge; in transactional mode plain acknowledgements are refused and records are acknowledged only inside share transactions.",
    },
    ConfigDef {
        name: "share.renew.acknowledge.enable",
        config_type: ConfigType::Boolean,
        default: "true",
        rule: ConfigRule::OneOf(&["true", "false"]),
        synonym: None,
        doc: "Whether the group's consumers may renew the acquisition locks of records they hold (AcknowledgeType RENEW, KIP-1222); when false a renewal gets INVALID_RECORD_STATE.",
    },
    ConfigDef {
        name: "share.transaction.timeout.ms",
        config_type: ConfigType::Long,
        default: "60000",
        rule: ConfigRule::Range {
            min: 1,
            max: SHARE_TRANSACTION_TIMEOUT_MS_MAX as i64,
        },
        synonym: None,
        doc: "Timeout of a share transaction begun with TimeoutMs -1; an ONGOING transaction older than its timeout is aborted by the broker.",
    },
    ConfigDef {
        name: "share.transaction.max.pending",
        config_type: ConfigType::Int,
        default: "5",
        rule: ConfigRule::Range {
            min: 1,
            max: SHARE_TRANSACTION_MAX_PENDING_MAX as i64,
        },
        synonym: None,
        doc: "Most ONGOING + PREPARE share transactions per group.",
    },
    ConfigDef {
        name: "errors.deadletterqueue.topic.name",
        config_type: ConfigType::String,
        default: "",
        rule: ConfigRule::DlqTopicName,
        synonym: None,
        doc: "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share group. If blank (the default), the group does not have a DLQ topic.",
    },
    ConfigDef {
        name: "errors.deadletterqueue.copy.record.enable",
        config_type: ConfigType::Boolean,
        default: "false",
        rule: ConfigRule::KafkaBoolean,
        synonym: None,
        doc: "When writing onto the dead-letter queue topic, whether to copy the original record onto the DLQ topic, or just write a record containing the context information headers.",
    },
];

/// Broker configs (resource type BROKER). Dynamic ones give topics their defaults.
pub const BROKER_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "log.retention.ms",
        config_type: ConfigType::Long,
        default: "604800000",
        rule: ConfigRule::Range {
            min: -1,
            max: i64::MAX,
        },
        synonym: None,
        doc: "Default retention.ms of topics.",
    },
    ConfigDef {
        name: "log.retention.bytes",
        config_type: ConfigType::Long,
        default: "-1",
        rule: ConfigRule::Range {
            min: -1,
            max: i64::MAX,
        },
        synonym: None,
        doc: "Default retention.bytes of topics.",
    },
    ConfigDef {
        name: "log.segment.bytes",
        config_type: ConfigType::Int,
        default: SEGMENT_BYTES_DEFAULT_STR,
        rule: ConfigRule::Range {
            min: TOPIC_SEGMENT_BYTES_MIN,
            max: i32::MAX as i64,
        },
        synonym: None,
        doc: "Default segment.bytes of topics.",
    },
    ConfigDef {
        name: "log.roll.ms",
        config_type: ConfigType::Long,
        default: SEGMENT_MS_DEFAULT_STR,
        rule: ConfigRule::Range {
            min: 1,
            max: i64::MAX,
        },
        synonym: None,
        doc: "Default segment.ms of topics.",
    },
    ConfigDef {
        name: "message.max.bytes",
        config_type: ConfigType::Int,
        default: MAX_MESSAGE_BYTES_DEFAULT_STR,
        rule: ConfigRule::Range {
            min: 0,
            max: crate::constants::FRAME_PAYLOAD_BYTES_MAX as i64,
        },
        synonym: None,
        doc: "Default max.message.bytes of topics.",
    },
    ConfigDef {
        name: "log.cleanup.policy",
        config_type: ConfigType::List,
        default: "delete",
        rule: ConfigRule::OneOf(&["delete"]),
        synonym: None,
        doc: "Default cleanup.policy of topics (only delete).",
    },
    ConfigDef {
        name: "min.insync.replicas",
        config_type: ConfigType::Int,
        default: "1",
        rule: ConfigRule::Range { min: 1, max: 1 },
        synonym: None,
        doc: "Single-node broker: always 1.",
    },
    ConfigDef {
        name: "num.partitions",
        config_type: ConfigType::Int,
        default: "1",
        rule: ConfigRule::Range {
            min: 1,
            max: TOPIC_PARTITIONS_MAX as i64,
        },
        synonym: None,
        doc: "Partitions of a topic created without a partition count.",
    },
    ConfigDef {
        name: "auto.create.topics.enable",
        config_type: ConfigType::Boolean,
        default: "false",
        rule: ConfigRule::ReadOnly,
        synonym: None,
        doc: "Topics are created only through CreateTopics.",
    },
    ConfigDef {
        name: "broker.id",
        config_type: ConfigType::Int,
        default: "0",
        rule: ConfigRule::ReadOnly,
        synonym: None,
        doc: "Node id of this single-node broker.",
    },
];

/// The definition of topic config `name`, if the broker honours it.
pub fn topic_config_def(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|def| def.name == name)
}

/// The definition of broker config `name`, if the broker knows it.
pub fn broker_config_def(name: &str) -> Option<&'static ConfigDef> {
    BROKER_CONFIGS.iter().find(|def| def.name == name)
}

/// The definition of share-group config `name`, if the broker knows it.
pub fn group_config_def(name: &str) -> Option<&'static ConfigDef> {
    GROUP_CONFIGS.iter().find(|def| def.name == name)
}

/// Validates a share-group config; returns the canonical value.
pub fn validate_group_config(name: &str, value: &str) -> Result<String, ConfigError> {
    group_config_def(name)
        .ok_or_else(|| ConfigError::UnknownKey {
            key: name.to_string(),
        })?
        .validate(value)
}

/// Validates a topic override; returns the canonical value.
pub fn validate_topic_config(name: &str, value: &str) -> Result<String, ConfigError> {
    topic_config_def(name)
        .ok_or_else(|| ConfigError::UnknownKey {
            key: name.to_string(),
        })?
        .validate(value)
}

/// Validates a dynamic broker config; returns the canonical value.
pub fn validate_broker_config(name: &str, value: &str) -> Result<String, ConfigError> {
    broker_config_def(name)
        .ok_or_else(|| ConfigError::UnknownKey {
            key: name.to_string(),
        })?
        .validate(value)
}

/// Where an effective config value came from (Kafka's DescribeConfigs `config_source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    /// Kafka's GROUP_CONFIG.
    Group = 8,
    DynamicDefaultBroker = 4,
    Default = 5,
}

/// The value of topic config `def` given the topic's and the broker's overrides.
pub fn effective_topic_value(
    def: &ConfigDef,
    topic: &BTreeMap<String, String>,
    broker: &BTreeMap<String, String>,
) -> (String, ConfigSource) {
    if let Some(value) = topic.get(def.name) {
        return (value.clone(), ConfigSource::DynamicTopic);
    }
    if let Some(value) = def.synonym.and_then(|syn| broker.get(syn)) {
        return (value.clone(), ConfigSource::DynamicDefaultBroker);
    }
    // A file's broker default (code 4, Kafka's STATIC_BROKER_CONFIG) of the synonym.
    if let Some(value) = def
        .synonym
        .and_then(|syn| STATIC_BROKER_DEFAULTS.get()?.get(syn))
    {
        return (value.clone(), ConfigSource::DynamicDefaultBroker);
    }
    (def.default.to_string(), ConfigSource::Default)
}

/// The value of broker config `def` given the broker's overrides.
pub fn effective_broker_value(
    def: &ConfigDef,
    broker: &BTreeMap<String, String>,
) -> (String, ConfigSource) {
    match broker.get(def.name) {
        Some(value) => (value.clone(), ConfigSource::DynamicDefaultBroker),
        None if static_default(def) != def.default => {
            (static_default(def), ConfigSource::DynamicDefaultBroker)
        }
        None => (def.default.to_string(), ConfigSource::Default),
    }
}

/// The settings a partition log runs with, resolved from overrides and defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicSettings {
    pub segment_bytes: u64,
    pub segment_ms: u64,
    /// `None`: keep forever.
    pub retention_ms: Option<u64>,
    /// `None`: no size limit.
    pub retention_bytes: Option<u64>,
    pub max_message_bytes: u64,
}

impl TopicSettings {
    /// Resolves the settings of a topic. Stored values were validated when set; a value that
    /// still does not parse (a hand-edited file) falls back to the default and is reported.
    pub fn resolve(
        topic: &BTreeMap<String, String>,
        broker: &BTreeMap<String, String>,
    ) -> (TopicSettings, Vec<ConfigError>) {
        let mut errors = Vec::new();
        let mut long = |name: &str| -> i64 {
            let def = topic_config_def(name).expect("known topic config");
            let (value, _) = effective_topic_value(def, topic, broker);
            match def
                .validate(&value)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
            {
                Some(parsed) => parsed,
                None => {
                    errors.push(ConfigError::BadValue {
                        key: name.to_string(),
                        value,
                        reason: "stored value invalid; using the default".to_string(),
                    });
                    def.default.parse().expect("defaults parse")
                }
            }
        };
        let non_negative = |v: i64| u64::try_from(v).ok();
        let settings = TopicSettings {
            segment_bytes: long("segment.bytes") as u64,
            segment_ms: long("segment.ms") as u64,
            retention_ms: non_negative(long("retention.ms")),
            retention_bytes: non_negative(long("retention.bytes")),
            max_message_bytes: long("max.message.bytes") as u64,
        };
        (settings, errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_without_arguments() {
        let config = BrokerConfig::new(None, None, None, None, 2).unwrap();
        assert_eq!(config.listen, "127.0.0.1:9092".parse().unwrap());
        assert_eq!(config.data_dir, PathBuf::from("./data"));
        assert_eq!(config.shards, 2);
        assert_eq!(config.metrics_listen, None);
        assert_eq!(config.advertised, None);
        let config = config.with_advertised("127.0.0.1:7000").unwrap();
        assert_eq!(config.advertised, Some("127.0.0.1:7000".parse().unwrap()));
    }

    #[test]
    fn test_fault_specs() {
        let config = BrokerConfig::new(None, None, Some(2), None, 2).unwrap();
        assert_eq!(config.test_fault, None);
        let armed = config
            .clone()
            .with_test_fault("panic-shard=1,after-ms=500")
            .unwrap();
        assert_eq!(
            armed.test_fault,
            Some(TestFault::PanicShard {
                shard: 1,
                after_ms: 500
            })
        );
        for bad in [
            "panic-shard=2,after-ms=5",
            "panic-shard=0",
            "after-ms=5",
            "panic-shard=x,after-ms=5",
            "nonsense",
        ] {
            assert!(
                config.clone().with_test_fault(bad).is_err(),
                "{bad} was accepted"
            );
        }
    }

    #[test]
    fn rejects_bad_shards_and_addresses() {
        assert!(matches!(
            BrokerConfig::new(None, None, Some(0), None, 2),
            Err(ConfigError::BadShards { .. })
        ));
        assert!(matches!(
            BrokerConfig::new(None, None, Some(SHARDS_MAX + 1), None, 2),
            Err(ConfigError::BadShards { .. })
        ));
        assert!(matches!(
            BrokerConfig::new(Some("nonsense"), None, None, None, 2),
            Err(ConfigError::BadAddress { .. })
        ));
        assert!(matches!(
            BrokerConfig::new(None, None, None, Some("1.2.3.4"), 2),
            Err(ConfigError::BadAddress { .. })
        ));
        assert!(matches!(
            BrokerConfig::new(None, None, None, None, 2)
                .unwrap()
                .with_advertised("no-port"),
            Err(ConfigError::BadAddress { .. })
        ));
    }

    #[test]
    fn every_default_passes_its_own_rule() {
        for def in TOPIC_CONFIGS.iter().chain(BROKER_CONFIGS) {
            if !def.is_read_only() {
                assert_eq!(
                    def.validate(def.default).unwrap(),
                    def.default,
                    "{}",
                    def.name
                );
            }
        }
        for def in TOPIC_CONFIGS {
            // Kafka's KIP-1191 topic opt-in has no broker default.
            if def.name == "errors.deadletterqueue.group.enable" {
                assert!(def.synonym.is_none());
                continue;
            }
            let synonym = def
                .synonym
                .expect("every topic config has a broker synonym");
            let broker = broker_config_def(synonym).expect("synonym is a broker config");
            assert_eq!(broker.default, def.default, "{}", def.name);
        }
    }

    #[test]
    fn validation_rejects_bad_values_and_unknown_keys() {
        assert_eq!(
            validate_topic_config("retention.ms", " 1000 ").unwrap(),
            "1000"
        );
        assert!(validate_topic_config("retention.ms", "-2").is_err());
        assert!(validate_topic_config("retention.ms", "soon").is_err());
        assert!(validate_topic_config("segment.bytes", "100").is_err());
        assert!(validate_topic_config("cleanup.policy", "compact").is_err());
        assert!(matches!(
            validate_topic_config("no.such.key", "1"),
            Err(ConfigError::UnknownKey { .. })
        ));
        assert!(matches!(
            validate_broker_config("auto.create.topics.enable", "true"),
            Err(ConfigError::ReadOnly { .. })
        ));
    }

    #[test]
    fn topic_overrides_win_over_broker_overrides_over_defaults() {
        let mut topic = BTreeMap::new();
        let mut broker = BTreeMap::new();
        let (s, errors) = TopicSettings::resolve(&topic, &broker);
        assert!(errors.is_empty());
        assert_eq!(s.retention_ms, Some(604_800_000));
        assert_eq!(s.retention_bytes, None);
        broker.insert("log.retention.ms".to_string(), "5000".to_string());
        assert_eq!(
            TopicSettings::resolve(&topic, &broker).0.retention_ms,
            Some(5000)
        );
        topic.insert("retention.ms".to_string(), "-1".to_string());
        assert_eq!(TopicSettings::resolve(&topic, &broker).0.retention_ms, None);
        topic.insert("segment.bytes".to_string(), "garbage".to_string());
        let (s, errors) = TopicSettings::resolve(&topic, &broker);
        assert_eq!(s.segment_bytes, LOG_SEGMENT_BYTES_DEFAULT);
        assert_eq!(errors.len(), 1);
    }
}
