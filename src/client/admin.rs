//! The few admin calls the tests and the share consumer need: CreateTopics, Metadata (topic name ↔
//! id, partitions, leaders, broker addresses), IncrementalAlterConfigs (notably GROUP resources,
//! resource type 32, for `share.auto.offset.reset=earliest`) and FindCoordinator (key type GROUP).
//!
//! The free functions take any [`Connection`] so the producer and the share consumer reuse them;
//! [`Admin`] is a convenience that holds a bootstrap connection. Each call negotiates its version
//! within the range this module implements (the `*_VERSIONS` constants).

use kafka_protocol::messages::{
    create_topics_request::{CreatableTopic, CreatableTopicConfig},
    find_coordinator_request::FindCoordinatorRequest,
    incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig},
    metadata_request::MetadataRequestTopic,
    BrokerId, CreateTopicsRequest, IncrementalAlterConfigsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::connection::{ClientError, Connection, Result};

/// CreateTopics versions this client implements (v5+: topic configs and ids in the response).
pub const CREATE_TOPICS_VERSIONS: (i16, i16) = (5, 7);
/// Metadata versions this client implements (v10+: topic ids).
pub const METADATA_VERSIONS: (i16, i16) = (10, 12);
/// IncrementalAlterConfigs versions this client implements.
pub const INCREMENTAL_ALTER_CONFIGS_VERSIONS: (i16, i16) = (0, 1);
/// FindCoordinator versions this client implements (v4+: batched keys; v0–v3: one key).
pub const FIND_COORDINATOR_VERSIONS: (i16, i16) = (1, 6);

/// Config resource type of a group (KIP-848/932 group configs).
pub const RESOURCE_TYPE_GROUP: i8 = 32;
/// Config resource type of a topic.
pub const RESOURCE_TYPE_TOPIC: i8 = 2;
/// FindCoordinator key type of a group.
pub const COORDINATOR_KEY_TYPE_GROUP: i8 = 0;

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    /// Topic configs, e.g. `("retention.ms", "-1")`.
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    /// A topic with `partitions` partitions, replication factor 1 and no configs.
    pub fn new(name: &str, partitions: i32) -> Self {
        NewTopic {
            name: name.to_string(),
            partitions,
            replication_factor: 1,
            configs: Vec::new(),
        }
    }
}

/// A broker as Metadata or FindCoordinator describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: i32,
    pub host: String,
    pub port: i32,
}

impl Node {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition of a topic in Metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub index: i32,
    /// Leader node id; -1 when the partition has no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub error_code: i16,
}

/// One topic in Metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    pub id: Uuid,
    pub error_code: i16,
    pub partitions: Vec<PartitionMetadata>,
}

/// What a Metadata response says about the cluster and the asked topics.
#[derive(Debug, Clone, Default)]
pub struct ClusterMetadata {
    pub brokers: Vec<Node>,
    pub topics: Vec<TopicMetadata>,
}

impl ClusterMetadata {
    /// The topic called `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.iter().find(|t| t.name == name)
    }

    /// The topic with id `id`.
    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicMetadata> {
        self.topics.iter().find(|t| t.id == id)
    }

    /// The leader of `topic`/`partition`, if it has one.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        self.topic(topic)?
            .partitions
            .iter()
            .find(|p| p.index == partition && p.leader >= 0)
            .map(|p| p.leader)
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Creates topics; returns each topic's name and id. Any per-topic error fails the call (with the
/// first failing topic's code), TOPIC_ALREADY_EXISTS included.
pub fn create_topics(
    conn: &mut Connection,
    topics: &[NewTopic],
    timeout_ms: i32,
) -> Result<Vec<(String, Uuid)>> {
    let mut request = CreateTopicsRequest::default();
    request.timeout_ms = timeout_ms;
    for t in topics {
        let mut topic = CreatableTopic::default();
        topic.name = TopicName(str_bytes(&t.name));
        topic.num_partitions = t.partitions;
        topic.replication_factor = t.replication_factor;
        for (k, v) in &t.configs {
            let mut c = CreatableTopicConfig::default();
            c.name = str_bytes(k);
            c.value = Some(str_bytes(v));
            topic.configs.push(c);
        }
        request.topics.push(topic);
    }
    let (lo, hi) = CREATE_TOPICS_VERSIONS;
    let (_, response) = conn.send_negotiated(&request, lo, hi)?;
    let mut created = Vec::with_capacity(response.topics.len());
    for t in &response.topics {
        if t.error_code != 0 {
            return Err(ClientError::kafka(
                t.error_code,
                t.error_message.as_ref(),
                format!("CreateTopics {}", t.name.0),
            ));
        }
        created.push((t.name.0.to_string(), t.topic_id));
    }
    Ok(created)
}

/// Metadata for the named topics (`None`: all topics). Per-topic errors are returned in the
/// topics' `error_code`, not as an `Err`.
pub fn metadata(conn: &mut Connection, topics: Option<&[&str]>) -> Result<ClusterMetadata> {
    let mut request = MetadataRequest::default();
    request.allow_auto_topic_creation = false;
    request.topics = topics.map(|names| {
        names
            .iter()
            .map(|n| {
                let mut t = MetadataRequestTopic::default();
                t.name = Some(TopicName(str_bytes(n)));
                t
            })
            .collect()
    });
    let (lo, hi) = METADATA_VERSIONS;
    let (_, response) = conn.send_negotiated(&request, lo, hi)?;
    if response.error_code != 0 {
        return Err(ClientError::kafka(response.error_code, None, "Metadata"));
    }
    let brokers = response
        .brokers
        .iter()
        .map(|b| Node {
            id: b.node_id.0,
            host: b.host.to_string(),
            port: b.port,
        })
        .collect();
    let topics = response
        .topics
        .iter()
        .map(|t| TopicMetadata {
            name: t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
            id: t.topic_id,
            error_code: t.error_code,
            partitions: t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    index: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    error_code: p.error_code,
                })
                .collect(),
        })
        .collect();
    Ok(ClusterMetadata { brokers, topics })
}

/// Sets (`Some`) or deletes (`None`) configs of one resource with IncrementalAlterConfigs.
pub fn incremental_alter_configs(
    conn: &mut Connection,
    resource_type: i8,
    resource_name: &str,
    configs: &[(&str, Option<&str>)],
) -> Result<()> {
    const OP_SET: i8 = 0;
    const OP_DELETE: i8 = 1;
    let mut resource = AlterConfigsResource::default();
    resource.resource_type = resource_type;
    resource.resource_name = str_bytes(resource_name);
    for (k, v) in configs {
        let mut c = AlterableConfig::default();
        c.name = str_bytes(k);
        c.config_operation = if v.is_some() { OP_SET } else { OP_DELETE };
        c.value = v.map(str_bytes);
        resource.configs.push(c);
    }
    let mut request = IncrementalAlterConfigsRequest::default();
    request.resources.push(resource);
    let (lo, hi) = INCREMENTAL_ALTER_CONFIGS_VERSIONS;
    let (_, response) = conn.send_negotiated(&request, lo, hi)?;
    for r in &response.responses {
        if r.error_code != 0 {
            return Err(ClientError::kafka(
                r.error_code,
                r.error_message.as_ref(),
                format!(
                    "IncrementalAlterConfigs type {} {}",
                    r.resource_type, r.resource_name
                ),
            ));
        }
    }
    Ok(())
}

/// The coordinator of `key` (key type GROUP = 0, TRANSACTION = 1, SHARE = 2).
pub fn find_coordinator(conn: &mut Connection, key_type: i8, key: &str) -> Result<Node> {
    let (lo, hi) = FIND_COORDINATOR_VERSIONS;
    let version = conn.negotiate(
        kafka_protocol::messages::ApiKey::FindCoordinator as i16,
        lo,
        hi,
    )?;
    let mut request = FindCoordinatorRequest::default();
    request.key_type = key_type;
    if version >= 4 {
        request.coordinator_keys = vec![str_bytes(key)];
    } else {
        request.key = str_bytes(key);
    }
    let response = conn.send(&request, version)?;
    let context = format!("FindCoordinator {key}");
    if version >= 4 {
        let c = response
            .coordinators
            .iter()
            .find(|c| c.key.as_str() == key)
            .ok_or_else(|| ClientError::Protocol(format!("{context}: key missing in response")))?;
        if c.error_code != 0 {
            return Err(ClientError::kafka(
                c.error_code,
                c.error_message.as_ref(),
                context,
            ));
        }
        Ok(Node {
            id: c.node_id.0,
            host: c.host.to_string(),
            port: c.port,
        })
    } else {
        if response.error_code != 0 {
            return Err(ClientError::kafka(
                response.error_code,
                response.error_message.as_ref(),
                context,
            ));
        }
        let BrokerId(id) = response.node_id;
        Ok(Node {
            id,
            host: response.host.to_string(),
            port: response.port,
        })
    }
}

/// A bootstrap connection with the admin calls as methods.
#[derive(Debug)]
pub struct Admin {
    conn: Connection,
}

impl Admin {
    /// Connects to `bootstrap` (`host:port`).
    pub fn connect(bootstrap: &str) -> Result<Admin> {
        Ok(Admin {
            conn: Connection::connect(bootstrap, "lockstep-admin")?,
        })
    }

    /// The underlying connection (for requests this type has no method for).
    pub fn connection(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// See [`create_topics`] (timeout 30 s).
    pub fn create_topics(&mut self, topics: &[NewTopic]) -> Result<Vec<(String, Uuid)>> {
        create_topics(&mut self.conn, topics, 30_000)
    }

    /// See [`metadata`].
    pub fn metadata(&mut self, topics: Option<&[&str]>) -> Result<ClusterMetadata> {
        metadata(&mut self.conn, topics)
    }

    /// See [`incremental_alter_configs`].
    pub fn incremental_alter_configs(
        &mut self,
        resource_type: i8,
        resource_name: &str,
        configs: &[(&str, Option<&str>)],
    ) -> Result<()> {
        incremental_alter_configs(&mut self.conn, resource_type, resource_name, configs)
    }

    /// Sets one config of a group, e.g. `("share.auto.offset.reset", "earliest")`.
    pub fn set_group_config(&mut self, group: &str, name: &str, value: &str) -> Result<()> {
        incremental_alter_configs(
            &mut self.conn,
            RESOURCE_TYPE_GROUP,
            group,
            &[(name, Some(value))],
        )
    }

    /// The coordinator of group `group`.
    pub fn find_group_coordinator(&mut self, group: &str) -> Result<Node> {
        find_coordinator(&mut self.conn, COORDINATOR_KEY_TYPE_GROUP, group)
    }
}
