//! Metadata changes (CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs)
//! and producer-id allocation (InitProducerId).
//!
//! Ownership: shard 0 is the metadata controller. Handlers on any shard decode the request into
//! an [`AdminOp`] and send it to shard 0, whose runtime serialises admin operations, asks
//! [`Controller::plan`] (pure) for the new registry and the replies, persists the registry,
//! installs it on every shard, and only then answers. If persisting fails, every success in the
//! reply is turned into an error ([`fail_reply`]) and nothing is installed.
//!
//! The plans answer typed refusals ([`AdminError`]: the registry's `TopicError`, a
//! `ConfigError`, the request's own faults) with the message the wire carries beside them; the
//! encoders here choose the Kafka code (`server::codes`).
//!
//! Producer ids come from blocks reserved durably in the registry
//! (`producer_ids_reserved_until`), so an id is never handed out twice, across restarts too.

use super::{respond, Bus, Outcome};
use crate::config::{
    broker_config_def, effective_broker_value, effective_topic_value, group_config_def,
    topic_config_def, validate_broker_config, validate_group_config, validate_topic_config,
    ConfigError, ConfigType, TOPIC_CONFIGS,
};
use crate::constants::BROKER_NODE_ID;
use crate::model::ShardId;
use crate::protocol::codec::{decode_body, Request};
use crate::shard::call::{
    AllocateProducerId, AlterConfigs, CreatePartitions, CreateTopics, DeleteTopics, Op,
};
use crate::shard::ops::{
    AdminError, AdminOp, AdminReply, AlterOp, AlterResource, AlterResult, CallError,
    ControllerError, CreateResult, DeleteResult, GrowResult, NewPartitions, NewTopic, TopicRef,
};
use crate::shard::registry::{TopicError, TopicRegistry};
use kafka_protocol::messages::{
    create_partitions_response, create_topics_response, delete_topics_response,
    incremental_alter_configs_response, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, InitProducerIdRequest,
    InitProducerIdResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::ops::Range;
use uuid::Uuid;

/// Kafka resource type of a topic in config APIs.
pub const RESOURCE_TOPIC: i8 = 2;
/// Kafka resource type of a broker in config APIs.
pub const RESOURCE_BROKER: i8 = 4;
/// Kafka resource type of a (share) group in config APIs.
pub const RESOURCE_GROUP: i8 = 32;

/// The metadata controller's own state (on shard 0).
#[derive(Debug, Default)]
pub struct Controller {
    /// Producer ids reserved durably and not yet handed out.
    producer_ids: Range<i64>,
}

/// What an admin operation changes and answers.
#[derive(Debug)]
pub struct AdminPlan {
    /// The registry to persist and install, if anything changed.
    pub registry: Option<TopicRegistry>,
    /// The answer, assuming the registry (if any) is persisted.
    pub reply: AdminReply,
    /// Producer ids to hand out from, once the registry is persisted.
    producer_ids: Option<Range<i64>>,
}

/// Why one item was refused and the message the wire carries.
type Refusal = (AdminError, String);

/// A registry refusal, with its message.
fn topic_refusal(error: TopicError) -> Refusal {
    let message = error.to_string();
    (AdminError::Topic(error), message)
}

/// A config refusal, with its message.
fn config_refusal(error: ConfigError) -> Refusal {
    let message = error.to_string();
    (AdminError::Config(error), message)
}

/// Effective configs of a topic as CreateTopics v5+ reports them.
pub fn topic_config_entries(
    topic: &BTreeMap<String, String>,
    broker: &BTreeMap<String, String>,
) -> Vec<(String, String, bool, i8)> {
    TOPIC_CONFIGS
        .iter()
        .map(|def| {
            let (value, source) = effective_topic_value(def, topic, broker);
            (
                def.name.to_string(),
                value,
                def.is_read_only(),
                source as i8,
            )
        })
        .collect()
}

impl Controller {
    pub fn new() -> Controller {
        Controller::default()
    }

    /// Computes the effect of `op` on `current` (pure apart from `new_id`).
    pub fn plan(
        &self,
        current: &TopicRegistry,
        op: &AdminOp,
        new_id: &mut dyn FnMut() -> io::Result<Uuid>,
    ) -> AdminPlan {
        match op {
            AdminOp::CreateTopics {
                topics,
                validate_only,
            } => plan_create(current, topics, *validate_only, new_id),
            AdminOp::DeleteTopics { topics } => plan_delete(current, topics),
            AdminOp::AlterConfigs {
                resources,
                validate_only,
            } => plan_alter(current, resources, *validate_only),
            AdminOp::AllocateProducerId => self.plan_producer_id(current),
            AdminOp::CreatePartitions {
                topics,
                validate_only,
            } => plan_grow(current, topics, *validate_only),
            AdminOp::CreateAcls(acls) => plan_create_acls(current, acls),
            AdminOp::DeleteAcls(filters) => plan_delete_acls(current, filters),
        }
    }

    fn plan_producer_id(&self, current: &TopicRegistry) -> AdminPlan {
        if !self.producer_ids.is_empty() {
            let id = self.producer_ids.start;
            return AdminPlan {
                registry: None,
                reply: AdminReply::ProducerId(Ok(id)),
                producer_ids: Some(id + 1..self.producer_ids.end),
            };
        }
        let mut next = current.clone();
        let block = next.reserve_producer_ids();
        assert!(block.start >= current.producer_ids_reserved_until);
        AdminPlan {
            registry: Some(next),
            reply: AdminReply::ProducerId(Ok(block.start)),
            producer_ids: Some(block.start + 1..block.end),
        }
    }

    /// Applies the controller-side effects of a plan whose registry (if any) is persisted.
    pub fn commit(&mut self, plan: &AdminPlan) {
        if let Some(ids) = &plan.producer_ids {
            assert!(ids.start <= ids.end);
            self.producer_ids = ids.clone();
        }
    }
}

fn plan_create(
    current: &TopicRegistry,
    topics: &[NewTopic],
    validate_only: bool,
    new_id: &mut dyn FnMut() -> io::Result<Uuid>,
) -> AdminPlan {
    let mut next = current.clone();
    let mut changed = false;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for topic in topics {
        *counts.entry(topic.name.as_str()).or_default() += 1;
    }
    let default_partitions: i32 = broker_config_def("num.partitions")
        .map(|def| effective_broker_value(def, &current.broker_configs).0)
        .and_then(|v| v.parse().ok())
        .unwrap_or(crate::constants::TOPIC_PARTITIONS_DEFAULT);
    let mut results = Vec::with_capacity(topics.len());
    for topic in topics {
        let fail = |error: AdminError, message: String| CreateResult {
            name: topic.name.clone(),
            error: Some(error),
            error_message: Some(message),
            topic_id: Uuid::nil(),
            num_partitions: -1,
            configs: Vec::new(),
        };
        if counts[topic.name.as_str()] > 1 {
            results.push(fail(
                AdminError::DuplicateTopic,
                format!(
                    "topic {:?} appears more than once in the request",
                    topic.name
                ),
            ));
            continue;
        }
        let partitions = match resolve_partitions(topic, default_partitions) {
            Ok(n) => n,
            Err((error, message)) => {
                results.push(fail(error, message));
                continue;
            }
        };
        let id = loop {
            match new_id() {
                Ok(id) if !id.is_nil() && next.topic_by_id(&id).is_none() => break Ok(id),
                Ok(_) => continue,
                Err(e) => break Err(e),
            }
        };
        let id = match id {
            Ok(id) => id,
            Err(e) => {
                results.push(fail(
                    AdminError::NoTopicId,
                    format!("cannot draw a topic id: {e}"),
                ));
                continue;
            }
        };
        match next.create_topic(&topic.name, id, partitions, &topic.configs) {
            Ok(meta) => {
                let configs = topic_config_entries(&meta.configs, &current.broker_configs);
                results.push(CreateResult {
                    name: topic.name.clone(),
                    error: None,
                    error_message: None,
                    topic_id: if validate_only { Uuid::nil() } else { id },
                    num_partitions: partitions,
                    configs,
                });
                changed = true;
            }
            Err(e) => {
                let message = e.to_string();
                results.push(fail(AdminError::Topic(e), message));
            }
        }
    }
    AdminPlan {
        registry: (changed && !validate_only).then_some(next),
        reply: AdminReply::Created(results),
        producer_ids: None,
    }
}

/// CreatePartitions, as Kafka's controller: per topic, unknown → UNKNOWN_TOPIC_OR_PARTITION,
/// not an increase → INVALID_PARTITIONS, a manual assignment must name one replica list per
/// new partition, each exactly this broker (INVALID_REPLICA_ASSIGNMENT); a topic named twice
/// → INVALID_REQUEST for each.
fn plan_grow(current: &TopicRegistry, topics: &[NewPartitions], validate_only: bool) -> AdminPlan {
    let mut next = current.clone();
    let mut changed = false;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for topic in topics {
        *counts.entry(topic.name.as_str()).or_default() += 1;
    }
    let results = topics
        .iter()
        .map(|topic| {
            let outcome = if counts[topic.name.as_str()] > 1 {
                Err((
                    AdminError::DuplicateTopic,
                    "Duplicate topic name.".to_string(),
                ))
            } else {
                check_grow_assignments(&next, topic).and_then(|()| {
                    next.add_partitions(&topic.name, topic.count)
                        .map(|_| ())
                        .map_err(topic_refusal)
                })
            };
            match outcome {
                Ok(()) => {
                    changed = true;
                    GrowResult {
                        name: topic.name.clone(),
                        error: None,
                        error_message: None,
                    }
                }
                Err((error, message)) => GrowResult {
                    name: topic.name.clone(),
                    error: Some(error),
                    error_message: Some(message),
                },
            }
        })
        .collect();
    AdminPlan {
        registry: (changed && !validate_only).then_some(next),
        reply: AdminReply::Grown(results),
        producer_ids: None,
    }
}

/// A CreatePartitions manual assignment: one replica list per new partition, each naming
/// only this broker. Unknown topics and counts are checked by the registry.
fn check_grow_assignments(current: &TopicRegistry, topic: &NewPartitions) -> Result<(), Refusal> {
    let (Some(assignments), Some(meta)) = (&topic.assignments, current.topic(&topic.name)) else {
        return Ok(());
    };
    let additional = topic.count.saturating_sub(meta.partitions);
    if additional <= 0 {
        return Ok(());
    }
    if assignments.len() != additional as usize {
        return Err((
            AdminError::ReplicaAssignment,
            format!(
                "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
                assignments.len()
            ),
        ));
    }
    if assignments
        .iter()
        .any(|brokers| brokers.as_slice() != [BROKER_NODE_ID])
    {
        return Err((
            AdminError::ReplicaAssignment,
            format!("every new partition must be assigned to broker {BROKER_NODE_ID} only"),
        ));
    }
    Ok(())
}

fn resolve_partitions(topic: &NewTopic, default_partitions: i32) -> Result<i32, Refusal> {
    if topic.replication_factor != -1 && topic.replication_factor != 1 {
        return Err((
            AdminError::ReplicationFactor(topic.replication_factor),
            format!(
                "replication factor {} is not possible on a single-node broker (use 1 or -1)",
                topic.replication_factor
            ),
        ));
    }
    if topic.assignments.is_empty() {
        return match topic.num_partitions {
            -1 => Ok(default_partitions),
            n if n >= 1 => Ok(n),
            n => Err((
                AdminError::Topic(TopicError::InvalidPartitions { requested: n }),
                format!("partition count {n} must be positive"),
            )),
        };
    }
    if topic.num_partitions != -1 || topic.replication_factor != -1 {
        return Err((
            AdminError::AssignmentWithCounts,
            "a manual assignment requires num_partitions and replication_factor of -1".into(),
        ));
    }
    let indices: BTreeSet<i32> = topic.assignments.iter().map(|(index, _)| *index).collect();
    let n = topic.assignments.len() as i32;
    let contiguous = indices.len() == topic.assignments.len() && indices.iter().copied().eq(0..n);
    let on_this_broker = topic
        .assignments
        .iter()
        .all(|(_, brokers)| brokers.as_slice() == [BROKER_NODE_ID]);
    if !contiguous || !on_this_broker {
        return Err((
            AdminError::ReplicaAssignment,
            format!(
                "assignments must cover partitions 0..{n} each on broker {BROKER_NODE_ID} only"
            ),
        ));
    }
    Ok(n)
}

fn plan_delete(current: &TopicRegistry, topics: &[TopicRef]) -> AdminPlan {
    let mut next = current.clone();
    let mut changed = false;
    let results = topics
        .iter()
        .map(|topic| {
            let name = match topic {
                TopicRef::Name(name) => Ok(name.clone()),
                TopicRef::Id(id) => next
                    .topic_by_id(id)
                    .map(|t| t.name.clone())
                    .ok_or(TopicError::UnknownTopicId { id: *id }),
            };
            match name.and_then(|name| next.delete_topic(&name)) {
                Ok(meta) => {
                    changed = true;
                    DeleteResult {
                        name: Some(meta.name),
                        topic_id: meta.id,
                        error: None,
                        error_message: None,
                    }
                }
                Err(e) => DeleteResult {
                    name: match topic {
                        TopicRef::Name(name) => Some(name.clone()),
                        TopicRef::Id(_) => None,
                    },
                    topic_id: match topic {
                        TopicRef::Id(id) => *id,
                        TopicRef::Name(_) => Uuid::nil(),
                    },
                    error_message: Some(e.to_string()),
                    error: Some(AdminError::Topic(e)),
                },
            }
        })
        .collect();
    AdminPlan {
        registry: changed.then_some(next),
        reply: AdminReply::Deleted(results),
        producer_ids: None,
    }
}

/// Applies one resource's changes to `configs`; `validate` checks a value for a key.
fn apply_changes(
    configs: &mut BTreeMap<String, String>,
    changes: &[(String, Result<AlterOp, i8>, Option<String>)],
    config_type: &dyn Fn(&str) -> Option<ConfigType>,
    validate: &dyn Fn(&str, &str) -> Result<String, ConfigError>,
) -> Result<(), Refusal> {
    let mut seen = BTreeSet::new();
    for (name, op, value) in changes {
        if !seen.insert(name.as_str()) {
            return Err((
                AdminError::DuplicateConfig,
                format!("config {name:?} appears more than once"),
            ));
        }
        let op = op.map_err(|code| {
            (
                AdminError::UnknownConfigOperation(code),
                format!("unknown config operation {code}"),
            )
        })?;
        let Some(kind) = config_type(name) else {
            return Err((
                AdminError::Config(ConfigError::UnknownKey { key: name.clone() }),
                format!("unknown or unsupported config {name:?}"),
            ));
        };
        let bad = config_refusal;
        match op {
            AlterOp::Delete => {
                configs.remove(name);
            }
            AlterOp::Set => {
                let Some(value) = value else {
                    return Err((
                        AdminError::MissingValue,
                        format!("SET of {name:?} needs a value"),
                    ));
                };
                configs.insert(name.clone(), validate(name, value).map_err(bad)?);
            }
            AlterOp::Append | AlterOp::Subtract => {
                if kind != ConfigType::List {
                    return Err((
                        AdminError::NotAList,
                        format!("APPEND/SUBTRACT need a list config; {name:?} is not one"),
                    ));
                }
                let current = configs.get(name).cloned().unwrap_or_default();
                let mut items: Vec<String> = current
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                let given: Vec<String> = value
                    .as_deref()
                    .unwrap_or("")
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                if op == AlterOp::Append {
                    for item in given {
                        if !items.contains(&item) {
                            items.push(item);
                        }
                    }
                } else {
                    items.retain(|item| !given.contains(item));
                }
                let joined = items.join(",");
                configs.insert(name.clone(), validate(name, &joined).map_err(bad)?);
            }
        }
    }
    Ok(())
}

fn plan_alter(
    current: &TopicRegistry,
    resources: &[AlterResource],
    validate_only: bool,
) -> AdminPlan {
    let mut next = current.clone();
    let mut changed = false;
    let results = resources
        .iter()
        .map(|resource| {
            let outcome = match resource.resource_type {
                RESOURCE_TOPIC => match next.topic(&resource.resource_name) {
                    None => Err(topic_refusal(TopicError::UnknownTopic {
                        name: resource.resource_name.clone(),
                    })),
                    Some(topic) => {
                        let mut configs = topic.configs.clone();
                        apply_changes(
                            &mut configs,
                            &resource.changes,
                            &|name| topic_config_def(name).map(|d| d.config_type),
                            &validate_topic_config,
                        )
                        .and_then(|()| {
                            next.set_topic_configs(&resource.resource_name, configs)
                                .map_err(topic_refusal)
                        })
                    }
                },
                RESOURCE_BROKER => {
                    let name = resource.resource_name.as_str();
                    if !(name.is_empty() || name == BROKER_NODE_ID.to_string()) {
                        Err((
                            AdminError::UnknownBroker,
                            format!("unknown broker {name:?} (this broker is {BROKER_NODE_ID})"),
                        ))
                    } else {
                        let mut configs = next.broker_configs.clone();
                        apply_changes(
                            &mut configs,
                            &resource.changes,
                            &|name| broker_config_def(name).map(|d| d.config_type),
                            &validate_broker_config,
                        )
                        .and_then(|()| next.set_broker_configs(configs).map_err(config_refusal))
                    }
                }
                RESOURCE_GROUP => {
                    let group = resource.resource_name.as_str();
                    let mut configs = next.group_configs.get(group).cloned().unwrap_or_default();
                    if group.is_empty() {
                        Err((
                            AdminError::EmptyGroupId,
                            "the group id is empty".to_string(),
                        ))
                    } else {
                        apply_changes(
                            &mut configs,
                            &resource.changes,
                            &|name| group_config_def(name).map(|d| d.config_type),
                            &validate_group_config,
                        )
                        .and_then(|()| {
                            next.set_group_configs(group, configs)
                                .map_err(|e| (AdminError::GroupConfig, e))
                        })
                    }
                }
                other => Err((
                    AdminError::UnsupportedResourceType(other),
                    format!("config resource type {other} is not supported"),
                )),
            };
            match outcome {
                Ok(()) => {
                    changed = true;
                    AlterResult {
                        resource_type: resource.resource_type,
                        resource_name: resource.resource_name.clone(),
                        error: None,
                        error_message: None,
                    }
                }
                Err((error, message)) => AlterResult {
                    resource_type: resource.resource_type,
                    resource_name: resource.resource_name.clone(),
                    error: Some(error),
                    error_message: Some(message),
                },
            }
        })
        .collect();
    AdminPlan {
        registry: (changed && !validate_only && next != *current).then_some(next),
        reply: AdminReply::Altered(results),
        producer_ids: None,
    }
}

/// CreateAcls: adds each ACL (one already there succeeds, as in Kafka); past `ACLS_MAX` the
/// rest fail with INVALID_REQUEST.
fn plan_create_acls(
    current: &TopicRegistry,
    acls: &[crate::security::authz::AclBinding],
) -> AdminPlan {
    let mut next = current.clone();
    let results = acls
        .iter()
        .map(|acl| {
            if next.acls.len() >= crate::constants::ACLS_MAX && !next.acls.iter().any(|a| a == acl)
            {
                return Err((
                    AdminError::TooManyAcls,
                    format!(
                        "the broker holds at most {} ACLs",
                        crate::constants::ACLS_MAX
                    ),
                ));
            }
            next.acls.insert(acl.clone());
            Ok(())
        })
        .collect();
    AdminPlan {
        registry: (next != *current).then_some(next),
        reply: AdminReply::AclsCreated(results),
        producer_ids: None,
    }
}

/// DeleteAcls: removes, filter by filter, every ACL the filter matches.
fn plan_delete_acls(
    current: &TopicRegistry,
    filters: &[crate::security::authz::AclFilter],
) -> AdminPlan {
    let mut next = current.clone();
    let results = filters
        .iter()
        .map(|filter| Ok(next.acls.remove_matching(filter)))
        .collect();
    AdminPlan {
        registry: (next != *current).then_some(next),
        reply: AdminReply::AclsDeleted(results),
        producer_ids: None,
    }
}

/// Turns every successful result (no error) in `results` into `error` with `msg`.
/// A macro because the results are different types with the same two fields.
macro_rules! fail_each {
    ($results:expr, $error:expr, $msg:expr) => {
        for r in $results.iter_mut().filter(|r| r.error.is_none()) {
            r.error = Some($error.clone());
            r.error_message = $msg.clone();
        }
    };
}

/// The reply when the controller could not carry out the plan (its registry could not be
/// persisted, or the controller stops): every success becomes `error`.
pub fn fail_reply(reply: AdminReply, error: ControllerError, message: &str) -> AdminReply {
    let failed = AdminError::Controller(error);
    let msg = Some(message.to_string());
    match reply {
        AdminReply::Created(results) => AdminReply::Created(
            results
                .into_iter()
                .map(|mut r| {
                    if r.error.is_none() {
                        r.error = Some(failed.clone());
                        r.error_message = msg.clone();
                        r.topic_id = Uuid::nil();
                        r.configs.clear();
                        r.num_partitions = -1;
                    }
                    r
                })
                .collect(),
        ),
        AdminReply::Deleted(mut results) => {
            fail_each!(results, failed, msg);
            AdminReply::Deleted(results)
        }
        AdminReply::Altered(mut results) => {
            fail_each!(results, failed, msg);
            AdminReply::Altered(results)
        }
        AdminReply::ProducerId(_) => AdminReply::ProducerId(Err(error)),
        AdminReply::Grown(mut results) => {
            fail_each!(results, failed, msg);
            AdminReply::Grown(results)
        }
        AdminReply::AclsCreated(results) => AdminReply::AclsCreated(
            results
                .into_iter()
                .map(|r| r.and(Err((failed.clone(), message.to_string()))))
                .collect(),
        ),
        AdminReply::AclsDeleted(results) => AdminReply::AclsDeleted(
            results
                .into_iter()
                .map(|r| r.and(Err((failed.clone(), message.to_string()))))
                .collect(),
        ),
    }
}

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// Runs an admin op on the metadata controller (shard 0).
pub(crate) async fn call_controller<B: Bus, O: Op>(bus: &B, op: O) -> Result<O::Reply, CallError> {
    bus.call_op(ShardId(0), op).await
}

/// CreateTopics v2–7.
pub async fn handle_create_topics<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "topics",
        crate::constants::REQUEST_ENTITIES_MAX,
        |d: &CreateTopicsRequest| d.topics.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let version = request.api_version;
    let topics: Vec<NewTopic> = decoded
        .topics
        .iter()
        .map(|t| NewTopic {
            name: t.name.to_string(),
            num_partitions: t.num_partitions,
            replication_factor: t.replication_factor,
            assignments: t
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect(),
            configs: t
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect(),
        })
        .collect();
    let op = CreateTopics {
        topics,
        validate_only: decoded.validate_only,
    };
    let results = match call_controller(bus, op).await {
        Ok(results) => results,
        Err(failure) => decoded
            .topics
            .iter()
            .map(|t| CreateResult {
                name: t.name.to_string(),
                error: Some(AdminError::Call(failure.clone())),
                error_message: Some("the metadata controller is unavailable".into()),
                topic_id: Uuid::nil(),
                num_partitions: -1,
                configs: Vec::new(),
            })
            .collect(),
    };
    let mut response = CreateTopicsResponse::default();
    response.topics = results
        .into_iter()
        .map(|r| {
            let mut out = create_topics_response::CreatableTopicResult::default();
            out.name = TopicName(sb(&r.name));
            out.error_code = r.error_code();
            out.error_message = r.error_message.as_deref().map(sb);
            if version >= 7 {
                out.topic_id = r.topic_id;
            }
            if version >= 5 {
                out.num_partitions = r.num_partitions;
                out.replication_factor = if r.error.is_none() { 1 } else { -1 };
                out.configs = r.error.is_none().then(|| {
                    r.configs
                        .iter()
                        .map(|(name, value, read_only, source)| {
                            let mut c = create_topics_response::CreatableTopicConfigs::default();
                            c.name = sb(name);
                            c.value = Some(sb(value));
                            c.read_only = *read_only;
                            c.config_source = *source;
                            c
                        })
                        .collect()
                });
            }
            out
        })
        .collect();
    respond(request, &response)
}

/// DeleteTopics v1–6.
pub async fn handle_delete_topics<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "topics",
        crate::constants::REQUEST_ENTITIES_MAX,
        |d: &DeleteTopicsRequest| d.topics.len() + d.topic_names.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let version = request.api_version;
    let topics: Vec<TopicRef> = if version >= 6 {
        decoded
            .topics
            .iter()
            .map(|t| match &t.name {
                Some(name) => TopicRef::Name(name.to_string()),
                None => TopicRef::Id(t.topic_id),
            })
            .collect()
    } else {
        decoded
            .topic_names
            .iter()
            .map(|n| TopicRef::Name(n.to_string()))
            .collect()
    };
    let op = DeleteTopics {
        topics: topics.clone(),
    };
    let results = match call_controller(bus, op).await {
        Ok(results) => results,
        Err(failure) => topics
            .iter()
            .map(|t| DeleteResult {
                name: match t {
                    TopicRef::Name(n) => Some(n.clone()),
                    TopicRef::Id(_) => None,
                },
                topic_id: match t {
                    TopicRef::Id(id) => *id,
                    TopicRef::Name(_) => Uuid::nil(),
                },
                error: Some(AdminError::Call(failure.clone())),
                error_message: Some("the metadata controller is unavailable".into()),
            })
            .collect(),
    };
    let mut response = DeleteTopicsResponse::default();
    response.responses = results
        .into_iter()
        .map(|r| {
            let mut out = delete_topics_response::DeletableTopicResult::default();
            out.name = r.name.as_deref().map(|n| TopicName(sb(n)));
            if version < 6 && out.name.is_none() {
                out.name = Some(TopicName(sb("")));
            }
            if version >= 6 {
                out.topic_id = r.topic_id;
            }
            out.error_code = r.error_code();
            if version >= 5 {
                out.error_message = r.error_message.as_deref().map(sb);
            }
            out
        })
        .collect();
    respond(request, &response)
}

/// CreatePartitions v0–3: grows topics; the new partitions open on their shards when the
/// registry is installed, and share groups subscribed to the topic get them assigned at their
/// members' next heartbeats (the assignor reads the registry each time).
pub async fn handle_create_partitions<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "topics",
        crate::constants::REQUEST_ENTITIES_MAX,
        |d: &CreatePartitionsRequest| d.topics.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let topics: Vec<NewPartitions> = decoded
        .topics
        .iter()
        .map(|t| NewPartitions {
            name: t.name.to_string(),
            count: t.count,
            assignments: t.assignments.as_ref().map(|list| {
                list.iter()
                    .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            }),
        })
        .collect();
    let op = CreatePartitions {
        topics: topics.clone(),
        validate_only: decoded.validate_only,
    };
    let results = match call_controller(bus, op).await {
        Ok(results) if results.len() == topics.len() => results,
        Ok(_) | Err(_) => topics
            .iter()
            .map(|t| GrowResult {
                name: t.name.clone(),
                error: Some(AdminError::ControllerUnavailable),
                error_message: Some("the metadata controller is unavailable".into()),
            })
            .collect(),
    };
    let mut response = CreatePartitionsResponse::default();
    response.results = results
        .into_iter()
        .map(|r| {
            let mut out = create_partitions_response::CreatePartitionsTopicResult::default();
            out.name = TopicName(sb(&r.name));
            out.error_code = r.error_code();
            out.error_message = r.error_message.as_deref().map(sb);
            out
        })
        .collect();
    respond(request, &response)
}

/// IncrementalAlterConfigs v0–1.
pub async fn handle_incremental_alter_configs<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "config resources",
        crate::constants::REQUEST_ENTITIES_MAX,
        |d: &IncrementalAlterConfigsRequest| d.resources.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let resources: Vec<AlterResource> = decoded
        .resources
        .iter()
        .map(|r| AlterResource {
            resource_type: r.resource_type,
            resource_name: r.resource_name.to_string(),
            changes: r
                .configs
                .iter()
                .map(|c| {
                    let op = match c.config_operation {
                        0 => Ok(AlterOp::Set),
                        1 => Ok(AlterOp::Delete),
                        2 => Ok(AlterOp::Append),
                        3 => Ok(AlterOp::Subtract),
                        other => Err(other),
                    };
                    (
                        c.name.to_string(),
                        op,
                        c.value.as_ref().map(|v| v.to_string()),
                    )
                })
                .collect(),
        })
        .collect();
    let op = AlterConfigs {
        resources: resources.clone(),
        validate_only: decoded.validate_only,
    };
    let results = match call_controller(bus, op).await {
        Ok(results) => results,
        Err(failure) => resources
            .iter()
            .map(|r| AlterResult {
                resource_type: r.resource_type,
                resource_name: r.resource_name.clone(),
                error: Some(AdminError::Call(failure.clone())),
                error_message: Some("the metadata controller is unavailable".into()),
            })
            .collect(),
    };
    let mut response = IncrementalAlterConfigsResponse::default();
    response.responses = results
        .into_iter()
        .map(|r| {
            let mut out =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default();
            out.error_code = r.error_code();
            out.error_message = r.error_message.as_deref().map(sb);
            out.resource_type = r.resource_type;
            out.resource_name = sb(&r.resource_name);
            out
        })
        .collect();
    respond(request, &response)
}

/// InitProducerId v0–5: a fresh producer id at epoch 0 for idempotent producers.
/// Transactional ids are refused: this broker does not serve Kafka transactions.
pub async fn handle_init_producer_id<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: InitProducerIdRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let mut response = InitProducerIdResponse::default();
    response.producer_id = (-1).into();
    response.producer_epoch = -1;
    if decoded
        .transactional_id
        .as_deref()
        .is_some_and(|id| id.is_empty())
    {
        // As Kafka: an empty transactional id is malformed.
        response.error_code = ResponseError::InvalidRequest.code();
    } else if decoded.transactional_id.is_some() {
        // Producer transactions: the transactional id's coordinator decides.
        super::producer_txn_api::init_transactional(
            bus,
            &decoded,
            request.api_version,
            &mut response,
        )
        .await;
    } else {
        match call_controller(bus, AllocateProducerId).await {
            Ok(Ok(id)) => {
                response.producer_id = id.into();
                response.producer_epoch = 0;
            }
            Ok(Err(e)) => response.error_code = e.code(),
            Err(failure) => response.error_code = failure.code(),
        }
    }
    respond(request, &response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> impl FnMut() -> io::Result<Uuid> {
        let mut n = 0u128;
        move || {
            n += 1;
            Ok(Uuid::from_u128(n))
        }
    }

    fn new_topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: -1,
            assignments: vec![],
            configs: vec![],
        }
    }

    fn create(reg: &TopicRegistry, topics: Vec<NewTopic>, validate_only: bool) -> AdminPlan {
        Controller::new().plan(
            reg,
            &AdminOp::CreateTopics {
                topics,
                validate_only,
            },
            &mut ids(),
        )
    }

    fn created(plan: &AdminPlan) -> &Vec<CreateResult> {
        match &plan.reply {
            AdminReply::Created(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn create_partitions_follows_kafkas_rules() {
        let reg = create(
            &TopicRegistry::new("c".into()),
            vec![new_topic("t", 2)],
            false,
        )
        .registry
        .unwrap();
        let grow = |topics: Vec<NewPartitions>, validate_only: bool| {
            Controller::new().plan(
                &reg,
                &AdminOp::CreatePartitions {
                    topics,
                    validate_only,
                },
                &mut ids(),
            )
        };
        let np = |name: &str, count: i32, assignments: Option<Vec<Vec<i32>>>| NewPartitions {
            name: name.into(),
            count,
            assignments,
        };
        let codes = |plan: &AdminPlan| match &plan.reply {
            AdminReply::Grown(results) => {
                results.iter().map(|r| r.error_code()).collect::<Vec<_>>()
            }
            other => panic!("{other:?}"),
        };
        let plan = grow(
            vec![
                np("t", 4, None),
                np("u", 4, None),
                np("v", 1, None),
                np("v", 2, None),
            ],
            false,
        );
        assert_eq!(
            codes(&plan),
            vec![
                0,
                ResponseError::UnknownTopicOrPartition.code(),
                ResponseError::InvalidRequest.code(),
                ResponseError::InvalidRequest.code()
            ]
        );
        assert_eq!(plan.registry.unwrap().topic("t").unwrap().partitions, 4);
        let plan = grow(vec![np("t", 4, None)], true);
        assert_eq!(codes(&plan), vec![0]);
        assert!(plan.registry.is_none(), "validate_only changes nothing");
        let plan = grow(vec![np("t", 2, None)], false);
        assert_eq!(codes(&plan), vec![ResponseError::InvalidPartitions.code()]);
        assert!(plan.registry.is_none());
        let bad = ResponseError::InvalidReplicaAssignment.code();
        let plan = grow(vec![np("t", 4, Some(vec![vec![BROKER_NODE_ID]]))], false);
        assert_eq!(codes(&plan), vec![bad]);
        let plan = grow(
            vec![np("t", 3, Some(vec![vec![BROKER_NODE_ID + 1]]))],
            false,
        );
        assert_eq!(codes(&plan), vec![bad]);
        let plan = grow(vec![np("t", 3, Some(vec![vec![BROKER_NODE_ID]]))], false);
        assert_eq!(codes(&plan), vec![0]);
        let failed = fail_reply(plan.reply, ControllerError::NotPersisted, "disk");
        assert!(matches!(&failed, AdminReply::Grown(r) if r[0].error_code() == 56));
    }

    #[test]
    fn create_topics_reports_each_topic() {
        let reg = TopicRegistry::new("c".into());
        let mut bad_rf = new_topic("rf", 1);
        bad_rf.replication_factor = 3;
        let plan = create(
            &reg,
            vec![
                new_topic("a", 3),
                new_topic("dup", 1),
                new_topic("dup", 1),
                bad_rf,
                new_topic("zero", 0),
                new_topic("bad name", 1),
                new_topic("dflt", -1),
            ],
            false,
        );
        let codes: Vec<i16> = created(&plan).iter().map(|r| r.error_code()).collect();
        assert_eq!(codes, vec![0, 42, 42, 38, 37, 17, 0]);
        // What the controller says, and the message beside it.
        let errors: Vec<Option<AdminError>> =
            created(&plan).iter().map(|r| r.error.clone()).collect();
        assert_eq!(errors[1], Some(AdminError::DuplicateTopic));
        assert_eq!(errors[3], Some(AdminError::ReplicationFactor(3)));
        assert_eq!(
            errors[4],
            Some(AdminError::Topic(TopicError::InvalidPartitions {
                requested: 0
            }))
        );
        assert!(matches!(
            errors[5],
            Some(AdminError::Topic(TopicError::InvalidName { .. }))
        ));
        assert_eq!(
            created(&plan)[4].error_message.as_deref(),
            Some("partition count 0 must be positive")
        );
        assert_eq!(created(&plan)[0].error_message, None);
        let next = plan.registry.as_ref().unwrap();
        assert_eq!(next.topic("a").unwrap().partitions, 3);
        assert_eq!(next.topic("dflt").unwrap().partitions, 1);
        assert!(next.topic("dup").is_none());
        assert_eq!(created(&plan)[0].topic_id, next.topic("a").unwrap().id);
        assert_eq!(created(&plan)[0].configs.len(), TOPIC_CONFIGS.len());
    }

    #[test]
    fn validate_only_changes_nothing_and_existing_topics_conflict() {
        let mut reg = TopicRegistry::new("c".into());
        let plan = create(&reg, vec![new_topic("a", 2)], true);
        assert!(plan.registry.is_none());
        assert_eq!(created(&plan)[0].error_code(), 0);
        reg.create_topic("a", Uuid::from_u128(99), 1, &[]).unwrap();
        let plan = create(&reg, vec![new_topic("a", 2)], false);
        assert_eq!(created(&plan)[0].error_code(), 36);
        assert!(plan.registry.is_none());
    }

    #[test]
    fn manual_assignments_must_be_on_this_broker() {
        let reg = TopicRegistry::new("c".into());
        let mut t = new_topic("m", -1);
        t.assignments = vec![(0, vec![0]), (1, vec![0])];
        let plan = create(&reg, vec![t.clone()], false);
        assert_eq!(created(&plan)[0].error_code(), 0);
        assert_eq!(plan.registry.unwrap().topic("m").unwrap().partitions, 2);
        t.assignments = vec![(0, vec![0]), (2, vec![0])];
        assert_eq!(
            created(&create(&reg, vec![t.clone()], false))[0].error_code(),
            39
        );
        t.assignments = vec![(0, vec![1])];
        assert_eq!(
            created(&create(&reg, vec![t.clone()], false))[0].error_code(),
            39
        );
        t.num_partitions = 1;
        assert_eq!(created(&create(&reg, vec![t], false))[0].error_code(), 42);
    }

    #[test]
    fn delete_by_name_and_id() {
        let mut reg = TopicRegistry::new("c".into());
        reg.create_topic("a", Uuid::from_u128(5), 1, &[]).unwrap();
        reg.create_topic("b", Uuid::from_u128(6), 1, &[]).unwrap();
        let plan = Controller::new().plan(
            &reg,
            &AdminOp::DeleteTopics {
                topics: vec![
                    TopicRef::Name("a".into()),
                    TopicRef::Id(Uuid::from_u128(6)),
                    TopicRef::Name("a".into()),
                    TopicRef::Id(Uuid::from_u128(7)),
                ],
            },
            &mut ids(),
        );
        let AdminReply::Deleted(results) = &plan.reply else {
            panic!()
        };
        let codes: Vec<i16> = results.iter().map(|r| r.error_code()).collect();
        assert_eq!(codes, vec![0, 0, 3, 100]);
        assert_eq!(results[1].name.as_deref(), Some("b"));
        assert!(plan.registry.unwrap().topics.is_empty());
    }

    fn alter(reg: &TopicRegistry, resources: Vec<AlterResource>) -> AdminPlan {
        Controller::new().plan(
            reg,
            &AdminOp::AlterConfigs {
                resources,
                validate_only: false,
            },
            &mut ids(),
        )
    }

    #[test]
    fn alter_configs_is_atomic_per_resource() {
        let mut reg = TopicRegistry::new("c".into());
        reg.create_topic("a", Uuid::from_u128(5), 1, &[]).unwrap();
        let set = |k: &str, v: &str| (k.to_string(), Ok(AlterOp::Set), Some(v.to_string()));
        let plan = alter(
            &reg,
            vec![
                AlterResource {
                    resource_type: RESOURCE_TOPIC,
                    resource_name: "a".into(),
                    changes: vec![set("retention.ms", "100"), set("segment.bytes", "5")],
                },
                AlterResource {
                    resource_type: RESOURCE_BROKER,
                    resource_name: "0".into(),
                    changes: vec![set("log.retention.ms", "100")],
                },
                AlterResource {
                    resource_type: RESOURCE_TOPIC,
                    resource_name: "nope".into(),
                    changes: vec![set("retention.ms", "1")],
                },
                AlterResource {
                    resource_type: 8,
                    resource_name: "x".into(),
                    changes: vec![],
                },
            ],
        );
        let AdminReply::Altered(results) = &plan.reply else {
            panic!()
        };
        let codes: Vec<i16> = results.iter().map(|r| r.error_code()).collect();
        assert_eq!(codes, vec![40, 0, 3, 42]);
        assert_eq!(
            results[2].error,
            Some(AdminError::Topic(TopicError::UnknownTopic {
                name: "nope".into()
            }))
        );
        assert_eq!(
            results[2].error_message.as_deref(),
            Some("unknown topic \"nope\"")
        );
        assert_eq!(
            results[3].error,
            Some(AdminError::UnsupportedResourceType(8))
        );
        let next = plan.registry.unwrap();
        assert!(
            next.topic("a").unwrap().configs.is_empty(),
            "refused resource unchanged"
        );
        assert_eq!(next.broker_configs["log.retention.ms"], "100");
    }

    #[test]
    fn alter_delete_append_subtract() {
        let mut reg = TopicRegistry::new("c".into());
        reg.create_topic(
            "a",
            Uuid::from_u128(5),
            1,
            &[("retention.ms".into(), Some("5".into()))],
        )
        .unwrap();
        let plan = alter(
            &reg,
            vec![AlterResource {
                resource_type: RESOURCE_TOPIC,
                resource_name: "a".into(),
                changes: vec![
                    ("retention.ms".into(), Ok(AlterOp::Delete), None),
                    (
                        "cleanup.policy".into(),
                        Ok(AlterOp::Append),
                        Some("delete".into()),
                    ),
                ],
            }],
        );
        let next = plan.registry.unwrap();
        let configs = &next.topic("a").unwrap().configs;
        assert!(!configs.contains_key("retention.ms"));
        assert_eq!(configs["cleanup.policy"], "delete");
        let plan = alter(
            &next,
            vec![AlterResource {
                resource_type: RESOURCE_TOPIC,
                resource_name: "a".into(),
                changes: vec![(
                    "cleanup.policy".into(),
                    Ok(AlterOp::Subtract),
                    Some("delete".into()),
                )],
            }],
        );
        let AdminReply::Altered(results) = &plan.reply else {
            panic!()
        };
        assert_eq!(
            results[0].error_code(),
            40,
            "an empty cleanup.policy is invalid"
        );
        let plan = alter(
            &next,
            vec![AlterResource {
                resource_type: RESOURCE_TOPIC,
                resource_name: "a".into(),
                changes: vec![("retention.ms".into(), Ok(AlterOp::Append), Some("1".into()))],
            }],
        );
        let AdminReply::Altered(results) = &plan.reply else {
            panic!()
        };
        assert_eq!(results[0].error_code(), 40);
    }

    #[test]
    fn producer_ids_come_from_durable_blocks_and_never_repeat() {
        let mut reg = TopicRegistry::new("c".into());
        let mut controller = Controller::new();
        let mut seen = BTreeSet::new();
        for _ in 0..(crate::constants::PRODUCER_ID_BLOCK_SIZE * 2 + 3) {
            let plan = controller.plan(&reg, &AdminOp::AllocateProducerId, &mut ids());
            let AdminReply::ProducerId(Ok(id)) = plan.reply else {
                panic!()
            };
            if let Some(next) = &plan.registry {
                assert!(
                    next.producer_ids_reserved_until > id,
                    "the id is inside the reservation"
                );
                reg = next.clone();
            }
            assert!(id < reg.producer_ids_reserved_until);
            controller.commit(&plan);
            assert!(seen.insert(id), "id {id} handed out twice");
        }
        // A restart loses the in-memory block: new ids start past the reservation.
        let controller = Controller::new();
        let plan = controller.plan(&reg, &AdminOp::AllocateProducerId, &mut ids());
        let AdminReply::ProducerId(Ok(id)) = plan.reply else {
            panic!()
        };
        assert!(!seen.contains(&id));
    }

    #[test]
    fn failed_persistence_turns_successes_into_errors() {
        let reg = TopicRegistry::new("c".into());
        let plan = create(
            &reg,
            vec![new_topic("a", 1), new_topic("bad name", 1)],
            false,
        );
        let AdminReply::Created(results) =
            fail_reply(plan.reply, ControllerError::NotPersisted, "disk")
        else {
            panic!()
        };
        assert_eq!(results[0].error_code(), 56);
        assert_eq!(
            results[0].error,
            Some(AdminError::Controller(ControllerError::NotPersisted))
        );
        assert_eq!(results[0].error_message.as_deref(), Some("disk"));
        assert_eq!(results[0].topic_id, Uuid::nil());
        assert_eq!(results[1].error_code(), 17);
    }

    #[test]
    fn acl_replies_are_typed_and_fail_when_not_persisted() {
        use crate::security::authz::{AclBinding, AclFilter};
        let reg = TopicRegistry::new("c".into());
        let acl = AclBinding::from_wire(2, "t", 3, "User:a", "*", 3, 3).unwrap();
        let plan =
            Controller::new().plan(&reg, &AdminOp::CreateAcls(vec![acl.clone()]), &mut ids());
        let AdminReply::AclsCreated(results) = &plan.reply else {
            panic!()
        };
        assert_eq!(results, &vec![Ok(())]);
        let reg = plan.registry.expect("a new ACL changes the registry");
        let AdminReply::AclsCreated(results) =
            fail_reply(plan.reply, ControllerError::NotPersisted, "disk")
        else {
            panic!()
        };
        let failed = (
            AdminError::Controller(ControllerError::NotPersisted),
            "disk".to_string(),
        );
        assert_eq!(results, vec![Err(failed.clone())]);
        assert_eq!(failed.0.code(), 56);
        let any = AclFilter::from_wire(1, None, 1, None, None, 1, 1).unwrap();
        let plan = Controller::new().plan(&reg, &AdminOp::DeleteAcls(vec![any]), &mut ids());
        let AdminReply::AclsDeleted(results) = &plan.reply else {
            panic!()
        };
        assert_eq!(results, &vec![Ok(vec![acl])]);
        let AdminReply::AclsDeleted(results) =
            fail_reply(plan.reply, ControllerError::Stopping, "stop")
        else {
            panic!()
        };
        assert_eq!(
            results,
            vec![Err((
                AdminError::Controller(ControllerError::Stopping),
                "stop".to_string()
            ))]
        );
    }
}
