//! Topic metadata: names, topic ids, partition counts, topic and broker config overrides, and
//! the producer-id reservation; its durable file.
//!
//! Ownership: shard 0 (the metadata controller) is the only writer. A change is computed on a
//! copy, written durably, and only then installed on shard 0 and sent to every other shard as a
//! new immutable snapshot (`Arc<TopicRegistry>`), each with a higher `version`. Every shard
//! therefore answers Metadata from a snapshot that is on disk.
//!
//! File: `{data_dir}/metadata.json`, replaced atomically by [`write_atomic`] (temp file,
//! fsync, rename, directory fsync). A crash leaves either the old or the new file, never a mix.
//!
//! Invariants (checked by [`TopicRegistry::check`] after load and after every change): names
//! and ids are unique, names are valid Kafka topic names, partition counts are in
//! `1 ..= TOPIC_PARTITIONS_MAX`, the partition total stays within `BROKER_PARTITIONS_MAX`,
//! stored config values pass their definitions.

use super::share_group::ShareGroupConfig;
use crate::config::{validate_broker_config, validate_topic_config, ConfigError};
use crate::constants::{
    ACLS_MAX, BROKER_PARTITIONS_MAX, DELETED_TOPIC_IDS_MAX, GROUP_CONFIGS_MAX,
    PRODUCER_ID_BLOCK_SIZE, TOPICS_MAX, TOPIC_NAME_BYTES_MAX, TOPIC_PARTITIONS_MAX,
};
use crate::security::authz::AclSet;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// Name of the metadata file inside the data directory.
pub const METADATA_FILE: &str = "metadata.json";
/// Format version written into the file.
pub const METADATA_FORMAT_VERSION: u32 = 1;

/// One topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    /// Explicit topic config overrides (validated).
    pub configs: BTreeMap<String, String>,
}

/// Everything a shard needs to know about topics and broker-level settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRegistry {
    pub format_version: u32,
    /// Increases with every durable change.
    pub version: u64,
    /// Kafka cluster id (22 characters of URL-safe base64, as Kafka makes them).
    pub cluster_id: String,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Dynamic broker config overrides (validated).
    pub broker_configs: BTreeMap<String, String>,
    /// Producer ids below this were reserved by an earlier run and are never handed out again.
    pub producer_ids_reserved_until: i64,
    /// Share-group configs set through IncrementalAlterConfigs on GROUP resources, by group id
    /// (validated by `ShareGroupConfig`). Kept here, not in the journal, because every shard
    /// needs them (the group's shard and the shards of its partitions) and they change rarely.
    #[serde(default)]
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// The authorizer's ACLs (CreateAcls / DeleteAcls), at most `ACLS_MAX`. Kept here for the
    /// same reason as the group configs: every shard authorizes requests with them.
    #[serde(default)]
    pub acls: AclSet,
    /// Ids of topics deleted since the last start, whose partition directories the shards may
    /// not have removed yet: a start removes what is left of them and clears the list
    /// ([`crate::shard::data_dir`]). At most `DELETED_TOPIC_IDS_MAX`, oldest dropped first (a
    /// directory of a dropped id is set aside at start, never deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted_topic_ids: Vec<Uuid>,
    #[serde(skip)]
    ids: HashMap<Uuid, String>,
}

/// Why a topic change was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicError {
    InvalidName {
        name: String,
        reason: &'static str,
    },
    AlreadyExists {
        name: String,
    },
    UnknownTopic {
        name: String,
    },
    UnknownTopicId {
        id: Uuid,
    },
    InvalidPartitions {
        requested: i32,
    },
    /// CreatePartitions with a count that does not grow the topic.
    NotAnIncrease {
        name: String,
        current: i32,
        count: i32,
    },
    TooManyTopics {
        max: usize,
    },
    TooManyPartitions {
        requested: usize,
        max: usize,
    },
    Config(ConfigError),
}

impl fmt::Display for TopicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicError::InvalidName { name, reason } => {
                write!(f, "invalid topic name {name:?}: {reason}")
            }
            TopicError::AlreadyExists { name } => write!(f, "topic {name:?} already exists"),
            TopicError::UnknownTopic { name } => write!(f, "unknown topic {name:?}"),
            TopicError::UnknownTopicId { id } => write!(f, "unknown topic id {id}"),
            TopicError::InvalidPartitions { requested } => write!(
                f,
                "partition count {requested} is outside 1..={TOPIC_PARTITIONS_MAX}"
            ),
            TopicError::NotAnIncrease { current, count, .. } if current == count => {
                write!(f, "Topic already has {current} partition(s).")
            }
            TopicError::NotAnIncrease {
                name,
                current,
                count,
            } => write!(
                f,
                "The topic {name} currently has {current} partition(s); {count} would not be an increase."
            ),
            TopicError::TooManyTopics { max } => write!(f, "the broker holds at most {max} topics"),
            TopicError::TooManyPartitions { requested, max } => write!(
                f,
                "{requested} partitions in total would exceed the broker's limit of {max}"
            ),
            TopicError::Config(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TopicError {}

/// Why the metadata file could not be used.
#[derive(Debug)]
pub enum RegistryError {
    Io { path: PathBuf, error: io::Error },
    Parse { path: PathBuf, reason: String },
    Invalid { path: PathBuf, reason: String },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            RegistryError::Parse { path, reason } => {
                write!(f, "{}: not a metadata file: {reason}", path.display())
            }
            RegistryError::Invalid { path, reason } => {
                write!(f, "{}: inconsistent metadata: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for RegistryError {}

/// Checks a topic name as Kafka does: 1..=249 bytes of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    let invalid = |reason| TopicError::InvalidName {
        name: name.to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("empty"));
    }
    if name == "." || name == ".." {
        return Err(invalid("'.' and '..' are not allowed"));
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(invalid("longer than 249 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(invalid(
            "only ASCII letters, digits, '.', '_' and '-' are allowed",
        ));
    }
    Ok(())
}

/// 16 bytes from the operating system's random source.
pub fn random_bytes() -> io::Result<[u8; 16]> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// A random (version 4) UUID from the operating system's random source.
pub fn random_uuid() -> io::Result<Uuid> {
    Ok(uuid::Builder::from_random_bytes(random_bytes()?).into_uuid())
}

/// A Kafka-style cluster id: URL-safe base64 (no padding) of a random UUID, 22 characters.
pub fn cluster_id_from(uuid: Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = uuid.as_bytes();
    let mut out = String::with_capacity(22);
    let mut bits: u32 = 0;
    let mut nbits = 0;
    for &byte in bytes {
        bits = (bits << 8) | u32::from(byte);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 0x3f) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 0x3f) as usize] as char);
    }
    out
}

impl TopicRegistry {
    /// An empty registry for a fresh data directory.
    pub fn new(cluster_id: String) -> TopicRegistry {
        TopicRegistry {
            format_version: METADATA_FORMAT_VERSION,
            version: 0,
            cluster_id,
            topics: BTreeMap::new(),
            broker_configs: BTreeMap::new(),
            group_configs: BTreeMap::new(),
            acls: AclSet::default(),
            producer_ids_reserved_until: 0,
            deleted_topic_ids: Vec::new(),
            ids: HashMap::new(),
        }
    }

    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicMeta> {
        self.ids.get(id).and_then(|name| self.topics.get(name))
    }

    /// Whether `partition` of `topic` exists.
    pub fn has_partition(&self, topic: &str, partition: i32) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|t| partition >= 0 && partition < t.partitions)
    }

    pub fn partition_total(&self) -> usize {
        self.topics.values().map(|t| t.partitions as usize).sum()
    }

    /// Checks every invariant listed in the module docs.
    pub fn check(&self) -> Result<(), String> {
        if self.format_version != METADATA_FORMAT_VERSION {
            return Err(format!(
                "format version {} is not supported",
                self.format_version
            ));
        }
        if self.topics.len() > TOPICS_MAX {
            return Err(format!("{} topics exceed {TOPICS_MAX}", self.topics.len()));
        }
        let mut ids = HashMap::new();
        for (name, topic) in &self.topics {
            if name != &topic.name {
                return Err(format!(
                    "topic stored under {name:?} is named {:?}",
                    topic.name
                ));
            }
            validate_topic_name(name).map_err(|e| e.to_string())?;
            if topic.partitions < 1 || topic.partitions > TOPIC_PARTITIONS_MAX {
                return Err(format!(
                    "topic {name:?} has {} partitions",
                    topic.partitions
                ));
            }
            if topic.id.is_nil() {
                return Err(format!("topic {name:?} has the nil topic id"));
            }
            if let Some(other) = ids.insert(topic.id, name.clone()) {
                return Err(format!(
                    "topics {other:?} and {name:?} share id {}",
                    topic.id
                ));
            }
            for (key, value) in &topic.configs {
                let canonical = validate_topic_config(key, value).map_err(|e| e.to_string())?;
                if &canonical != value {
                    return Err(format!("topic {name:?} config {key} is not canonical"));
                }
            }
        }
        if self.partition_total() > BROKER_PARTITIONS_MAX {
            return Err(format!(
                "{} partitions exceed {BROKER_PARTITIONS_MAX}",
                self.partition_total()
            ));
        }
        for (key, value) in &self.broker_configs {
            validate_broker_config(key, value).map_err(|e| e.to_string())?;
        }
        if self.acls.len() > ACLS_MAX {
            return Err(format!("{} ACLs exceed {ACLS_MAX}", self.acls.len()));
        }
        if self.producer_ids_reserved_until < 0 {
            return Err("negative producer id reservation".to_string());
        }
        Ok(())
    }

    fn rebuild_ids(&mut self) {
        self.ids = self
            .topics
            .values()
            .map(|t| (t.id, t.name.clone()))
            .collect();
    }

    /// Validates a new topic without adding it; returns the canonical configs.
    pub fn validate_new_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(String, Option<String>)],
    ) -> Result<BTreeMap<String, String>, TopicError> {
        validate_topic_name(name)?;
        if self.topics.contains_key(name) {
            return Err(TopicError::AlreadyExists {
                name: name.to_string(),
            });
        }
        if !(1..=TOPIC_PARTITIONS_MAX).contains(&partitions) {
            return Err(TopicError::InvalidPartitions {
                requested: partitions,
            });
        }
        if self.topics.len() >= TOPICS_MAX {
            return Err(TopicError::TooManyTopics { max: TOPICS_MAX });
        }
        let total = self.partition_total() + partitions as usize;
        if total > BROKER_PARTITIONS_MAX {
            return Err(TopicError::TooManyPartitions {
                requested: total,
                max: BROKER_PARTITIONS_MAX,
            });
        }
        let mut canonical = BTreeMap::new();
        for (key, value) in configs {
            // A null value in CreateTopics means "the default": store nothing.
            let Some(value) = value else { continue };
            let value = validate_topic_config(key, value).map_err(TopicError::Config)?;
            canonical.insert(key.clone(), value);
        }
        Ok(canonical)
    }

    /// Adds a topic (validated as [`Self::validate_new_topic`]) with the given id.
    pub fn create_topic(
        &mut self,
        name: &str,
        id: Uuid,
        partitions: i32,
        configs: &[(String, Option<String>)],
    ) -> Result<&TopicMeta, TopicError> {
        let configs = self.validate_new_topic(name, partitions, configs)?;
        assert!(!id.is_nil(), "topic ids are never nil");
        assert!(!self.ids.contains_key(&id), "topic id collision");
        self.topics.insert(
            name.to_string(),
            TopicMeta {
                name: name.to_string(),
                id,
                partitions,
                configs,
            },
        );
        self.ids.insert(id, name.to_string());
        Ok(&self.topics[name])
    }

    /// CreatePartitions: grows topic `name` to `count` partitions (its id and configs stay;
    /// the new partitions open empty on their shards when the registry is installed).
    pub fn add_partitions(&mut self, name: &str, count: i32) -> Result<&TopicMeta, TopicError> {
        let current = self
            .topics
            .get(name)
            .ok_or_else(|| TopicError::UnknownTopic {
                name: name.to_string(),
            })?
            .partitions;
        if count <= current {
            return Err(TopicError::NotAnIncrease {
                name: name.to_string(),
                current,
                count,
            });
        }
        if count > TOPIC_PARTITIONS_MAX {
            return Err(TopicError::InvalidPartitions { requested: count });
        }
        let total = self.partition_total() + (count - current) as usize;
        if total > BROKER_PARTITIONS_MAX {
            return Err(TopicError::TooManyPartitions {
                requested: total,
                max: BROKER_PARTITIONS_MAX,
            });
        }
        let topic = self.topics.get_mut(name).expect("looked up above");
        topic.partitions = count;
        Ok(topic)
    }

    /// Removes a topic by name; returns it.
    pub fn delete_topic(&mut self, name: &str) -> Result<TopicMeta, TopicError> {
        let topic = self
            .topics
            .remove(name)
            .ok_or_else(|| TopicError::UnknownTopic {
                name: name.to_string(),
            })?;
        self.ids.remove(&topic.id);
        if self.deleted_topic_ids.len() >= DELETED_TOPIC_IDS_MAX {
            self.deleted_topic_ids.remove(0);
        }
        self.deleted_topic_ids.push(topic.id);
        Ok(topic)
    }

    /// Clears the deleted-topic ids once a start has removed their directories; `true` if there
    /// were any (the caller stores the registry).
    pub fn forget_deleted_topics(&mut self) -> bool {
        if self.deleted_topic_ids.is_empty() {
            return false;
        }
        self.deleted_topic_ids.clear();
        self.version += 1;
        true
    }

    /// Replaces the config overrides of a topic (values validated).
    pub fn set_topic_configs(
        &mut self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), TopicError> {
        for (key, value) in &configs {
            validate_topic_config(key, value).map_err(TopicError::Config)?;
        }
        let topic = self
            .topics
            .get_mut(name)
            .ok_or_else(|| TopicError::UnknownTopic {
                name: name.to_string(),
            })?;
        topic.configs = configs;
        Ok(())
    }

    /// Replaces the dynamic broker config overrides (values validated).
    pub fn set_broker_configs(
        &mut self,
        configs: BTreeMap<String, String>,
    ) -> Result<(), ConfigError> {
        for (key, value) in &configs {
            validate_broker_config(key, value)?;
        }
        self.broker_configs = configs;
        Ok(())
    }

    /// The configs of share group `group_id` (defaults where not set).
    pub fn group_config(&self, group_id: &str) -> ShareGroupConfig {
        let mut config = ShareGroupConfig::default();
        if let Some(explicit) = self.group_configs.get(group_id) {
            let changes: Vec<(String, Option<String>)> = explicit
                .iter()
                .map(|(k, v)| (k.clone(), Some(v.clone())))
                .collect();
            // Stored configs were validated when set; a refused one leaves the defaults.
            if let Err(e) = config.apply(&changes) {
                tracing::warn!(group_id, error = %e, "stored group configs are invalid; using defaults");
            }
        }
        config
    }

    /// Replaces the explicit configs of share group `group_id` (each already validated; an
    /// empty map removes the entry).
    pub fn set_group_configs(
        &mut self,
        group_id: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), String> {
        let changes: Vec<(String, Option<String>)> = configs
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        ShareGroupConfig::default().apply(&changes)?;
        if configs.is_empty() {
            self.group_configs.remove(group_id);
            return Ok(());
        }
        if !self.group_configs.contains_key(group_id)
            && self.group_configs.len() >= GROUP_CONFIGS_MAX
        {
            return Err(format!(
                "at most {GROUP_CONFIGS_MAX} groups can have configs"
            ));
        }
        self.group_configs.insert(group_id.to_string(), configs);
        Ok(())
    }

    /// Reserves the next block of producer ids; returns `start .. end`.
    pub fn reserve_producer_ids(&mut self) -> std::ops::Range<i64> {
        let start = self.producer_ids_reserved_until;
        let end = start
            .checked_add(PRODUCER_ID_BLOCK_SIZE)
            .expect("producer id space is not exhausted in practice");
        self.producer_ids_reserved_until = end;
        start..end
    }

    /// The file contents.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("registry serializes");
        out.push(b'\n');
        out
    }

    /// Parses and checks a metadata file's contents.
    pub fn from_json(path: &Path, bytes: &[u8]) -> Result<TopicRegistry, RegistryError> {
        let mut registry: TopicRegistry =
            serde_json::from_slice(bytes).map_err(|e| RegistryError::Parse {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        registry.rebuild_ids();
        registry.check().map_err(|reason| RegistryError::Invalid {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(registry)
    }

    /// Loads `{data_dir}/metadata.json`, or `None` if the data directory has none yet.
    pub fn load(data_dir: &Path) -> Result<Option<TopicRegistry>, RegistryError> {
        let path = data_dir.join(METADATA_FILE);
        match fs::read(&path) {
            Ok(bytes) => Self::from_json(&path, &bytes).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(RegistryError::Io { path, error }),
        }
    }

    /// Writes the registry durably to `{data_dir}/metadata.json`.
    pub fn store(&self, data_dir: &Path) -> io::Result<()> {
        assert!(self.check().is_ok(), "only a consistent registry is stored");
        write_atomic(data_dir, METADATA_FILE, &self.to_json())
    }
}

/// Replaces `dir/name` with `bytes` atomically and durably: write a temp file, fsync it,
/// rename it over the target, fsync the directory.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let target = dir.join(name);
    {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, &target)?;
    fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        for good in ["a", "orders", "a.b_c-D9", &"x".repeat(249)] {
            validate_topic_name(good).unwrap();
        }
        for bad in ["", ".", "..", "has space", "slash/", "ü", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn create_delete_and_lookup_by_name_and_id() {
        let mut r = TopicRegistry::new("c".into());
        r.create_topic("orders", id(1), 4, &[]).unwrap();
        assert_eq!(r.topic_by_id(&id(1)).unwrap().name, "orders");
        assert!(r.has_partition("orders", 3));
        assert!(!r.has_partition("orders", 4));
        assert!(!r.has_partition("orders", -1));
        assert_eq!(
            r.create_topic("orders", id(2), 1, &[]).unwrap_err(),
            TopicError::AlreadyExists {
                name: "orders".into()
            }
        );
        assert!(matches!(
            r.create_topic("x", id(3), 0, &[]),
            Err(TopicError::InvalidPartitions { requested: 0 })
        ));
        assert!(matches!(
            r.create_topic(
                "x",
                id(3),
                1,
                &[("retention.ms".into(), Some("abc".into()))]
            ),
            Err(TopicError::Config(_))
        ));
        assert!(r.topic("x").is_none(), "a refused topic leaves no trace");
        r.delete_topic("orders").unwrap();
        assert!(r.topic_by_id(&id(1)).is_none());
        assert!(r.delete_topic("orders").is_err());
    }

    #[test]
    fn add_partitions_grows_only() {
        let mut r = TopicRegistry::new("c".into());
        r.create_topic("t", id(1), 2, &[]).unwrap();
        assert_eq!(
            r.add_partitions("t", 2).unwrap_err().to_string(),
            "Topic already has 2 partition(s)."
        );
        assert_eq!(
            r.add_partitions("t", 1).unwrap_err().to_string(),
            "The topic t currently has 2 partition(s); 1 would not be an increase."
        );
        assert!(matches!(
            r.add_partitions("u", 3),
            Err(TopicError::UnknownTopic { .. })
        ));
        assert!(matches!(
            r.add_partitions("t", TOPIC_PARTITIONS_MAX + 1),
            Err(TopicError::InvalidPartitions { .. })
        ));
        assert_eq!(r.add_partitions("t", 5).unwrap().partitions, 5);
        assert_eq!(r.topic("t").unwrap().id, id(1));
        r.check().unwrap();
    }

    #[test]
    fn partition_limits_hold() {
        let mut r = TopicRegistry::new("c".into());
        let mut n = 0u128;
        while r.partition_total() + TOPIC_PARTITIONS_MAX as usize <= BROKER_PARTITIONS_MAX {
            n += 1;
            r.create_topic(&format!("t{n}"), id(n), TOPIC_PARTITIONS_MAX, &[])
                .unwrap();
        }
        let rest = (BROKER_PARTITIONS_MAX - r.partition_total()) as i32;
        assert!(matches!(
            r.create_topic("over", id(999), rest + 1, &[]),
            Err(TopicError::TooManyPartitions { .. })
        ));
        r.check().unwrap();
    }

    #[test]
    fn json_round_trip_keeps_ids_and_configs() {
        let mut r = TopicRegistry::new(cluster_id_from(id(77)));
        r.create_topic(
            "orders",
            id(5),
            3,
            &[
                ("retention.ms".into(), Some(" 1000".into())),
                ("segment.ms".into(), None),
            ],
        )
        .unwrap();
        r.set_broker_configs([("num.partitions".to_string(), "3".to_string())].into())
            .unwrap();
        let block = r.reserve_producer_ids();
        assert_eq!(block, 0..PRODUCER_ID_BLOCK_SIZE);
        r.version = 9;
        let back = TopicRegistry::from_json(Path::new("m"), &r.to_json()).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            back.topic_by_id(&id(5)).unwrap().configs["retention.ms"],
            "1000"
        );
        assert!(!back
            .topic("orders")
            .unwrap()
            .configs
            .contains_key("segment.ms"));
        assert_eq!(back.producer_ids_reserved_until, PRODUCER_ID_BLOCK_SIZE);
    }

    #[test]
    fn inconsistent_files_are_refused() {
        let mut r = TopicRegistry::new("c".into());
        r.create_topic("a", id(1), 1, &[]).unwrap();
        r.create_topic("b", id(2), 1, &[]).unwrap();
        let text = String::from_utf8(r.to_json()).unwrap();
        let dup = text.replace(&id(2).to_string(), &id(1).to_string());
        assert!(matches!(
            TopicRegistry::from_json(Path::new("m"), dup.as_bytes()),
            Err(RegistryError::Invalid { .. })
        ));
        assert!(matches!(
            TopicRegistry::from_json(Path::new("m"), b"{not json"),
            Err(RegistryError::Parse { .. })
        ));
    }

    #[test]
    fn store_and_load_through_the_file_system() {
        let dir = tempfile::tempdir().unwrap();
        assert!(TopicRegistry::load(dir.path()).unwrap().is_none());
        let mut r = TopicRegistry::new(cluster_id_from(random_uuid().unwrap()));
        let topic_id = random_uuid().unwrap();
        assert_eq!(topic_id.get_version_num(), 4);
        r.create_topic("orders", topic_id, 2, &[]).unwrap();
        r.store(dir.path()).unwrap();
        let loaded = TopicRegistry::load(dir.path()).unwrap().unwrap();
        assert_eq!(loaded, r);
        assert!(!dir.path().join("metadata.json.tmp").exists());
    }

    #[test]
    fn cluster_id_is_22_url_safe_characters() {
        let cid = cluster_id_from(Uuid::from_u128(u128::MAX));
        assert_eq!(cid.len(), 22);
        assert!(cid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(cluster_id_from(Uuid::nil()), "A".repeat(22));
    }
}
