//! Share-group administration (KIP-932), enough for Kafka's `kafka-share-groups.sh`:
//! ListGroups v0–5 (16), ShareGroupDescribe v1 (77), DescribeShareGroupOffsets v0–1 (90),
//! AlterShareGroupOffsets v0 (91) and DeleteShareGroupOffsets v0 (92).
//!
//! Where the state is (`shard::share_state`): a group's membership lives on the group's shard
//! (`model::group_shard`); its share-partition state (the start offset, SPSO) on each
//! partition's shard. A group is *known* if its shard coordinates it (it had members since
//! the broker started) or if any shard holds share-partition state for it (membership is not
//! persisted, share-partition state is); a known group without members is `Empty`, with
//! members `Stable`, as Kafka reports share groups. Lockstep has no classic or consumer
//! groups, so ListGroups lists share groups only.
//!
//! Offsets can be altered or deleted only while the group has no members (NON_EMPTY_GROUP
//! otherwise, as Kafka). The check runs on the group's shard before the change is sent to the
//! partitions' shards, so a member joining in between is not refused; the partitions' shards
//! still refuse to reset a partition with records acquired or locked. Changes are journalled
//! (a reset as a snapshot, a delete as a tombstone) and answered once durable.
//!
//! The builders of response bodies from shard replies are pure and tested here.

use super::{check_count, respond, Bus, Outcome};
use crate::constants::{REQUEST_ENTITIES_MAX, REQUEST_PARTITIONS_MAX};
use crate::model::{group_shard, partition_shard, ShardId};
use crate::protocol::codec::{decode_body, Request};
use crate::protocol::generated::{
    describe_share_group_offsets_response, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
};
use crate::shard::call::{
    AlterShareOffsets, DeleteShareOffsets, DescribeShareGroup, GetShareOffsets, ListShareGroups,
};
use crate::shard::join::join_all;
use crate::shard::ops::{
    CallError, PartitionRef, ShareAckResult, ShareGroupsListed, ShareOffset, SharePartitionError,
};
use crate::shard::registry::TopicRegistry;
use crate::shard::share_group::ShareGroup;
use kafka_protocol::messages::{
    alter_share_group_offsets_response, delete_share_group_offsets_response, list_groups_response,
    share_group_describe_response, AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse, GroupId, ListGroupsRequest,
    ListGroupsResponse, ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// The group type and protocol type Kafka reports for share groups.
pub const SHARE_GROUP_TYPE: &str = "share";
/// The name of Kafka's share-group assignor; Lockstep's assignor (`share_group::assign`) does
/// the same job: spread each topic's partitions over its subscribers.
pub const SHARE_ASSIGNOR_NAME: &str = "simple";
use crate::security::authz::{ResourceType, OPERATIONS_NOT_REQUESTED};

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A share group's state as Kafka names it.
pub fn group_state(members: usize) -> &'static str {
    if members == 0 {
        "Empty"
    } else {
        "Stable"
    }
}

/// Groups (id, state) from every shard's answer, sorted by id, that pass ListGroups' filters
/// (case-insensitive, empty: no filter).
pub fn listed_groups(
    shards: &[ShareGroupsListed],
    states_filter: &[String],
    types_filter: &[String],
) -> Vec<(String, &'static str)> {
    if !types_filter.is_empty()
        && !types_filter
            .iter()
            .any(|t| t.eq_ignore_ascii_case(SHARE_GROUP_TYPE))
    {
        return Vec::new();
    }
    let mut members: BTreeMap<&str, usize> = BTreeMap::new();
    for shard in shards {
        for id in &shard.with_state {
            members.entry(id).or_insert(0);
        }
    }
    for shard in shards {
        for (id, count) in &shard.coordinated {
            members.insert(id, *count);
        }
    }
    members
        .into_iter()
        .map(|(id, count)| (id.to_string(), group_state(count)))
        .filter(|(_, state)| {
            states_filter.is_empty() || states_filter.iter().any(|s| s.eq_ignore_ascii_case(state))
        })
        .collect()
}

/// ListGroups v0–5: the share groups and consumer groups (`crate::group`) of every shard,
/// sorted by group id.
pub async fn handle_list_groups<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: ListGroupsRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let share_calls = (0..bus.shard_count())
        .map(|s| bus.call_op(ShardId(s as u16), ListShareGroups))
        .collect();
    let group_calls = (0..bus.shard_count())
        .map(|s| bus.call_op(ShardId(s as u16), crate::group::ops::ListGroups))
        .collect();
    let (share_replies, group_replies) =
        futures_lite::future::zip(join_all(share_calls), join_all(group_calls)).await;
    let mut response = ListGroupsResponse::default();
    let mut shards = Vec::new();
    let mut consumer_groups = Vec::new();
    for reply in share_replies {
        match reply {
            Ok(listed) => shards.push(listed),
            Err(failure) => response.error_code = failure.code(),
        }
    }
    for reply in group_replies {
        match reply {
            Ok(listed) => consumer_groups.extend(listed),
            Err(failure) => response.error_code = failure.code(),
        }
    }
    let strings = |v: &[StrBytes]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let states_filter = strings(&decoded.states_filter);
    let types_filter = strings(&decoded.types_filter);
    // (group id, protocol type, state, group type)
    let mut groups: Vec<(String, String, String, String)> =
        listed_groups(&shards, &states_filter, &types_filter)
            .into_iter()
            .map(|(id, state)| {
                (
                    id,
                    SHARE_GROUP_TYPE.to_string(),
                    state.to_string(),
                    SHARE_GROUP_TYPE.to_string(),
                )
            })
            .collect();
    let passes = |filter: &[String], value: &str| {
        filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
    };
    groups.extend(
        consumer_groups
            .into_iter()
            .filter(|g| passes(&states_filter, &g.state) && passes(&types_filter, &g.group_type))
            .map(|g| {
                (
                    g.group_id,
                    g.protocol_type,
                    g.state,
                    g.group_type.to_lowercase(),
                )
            }),
    );
    groups.sort();
    response.groups = groups
        .into_iter()
        .map(|(id, protocol_type, state, group_type)| {
            let mut g = list_groups_response::ListedGroup::default();
            g.group_id = GroupId(sb(&id));
            g.protocol_type = sb(&protocol_type);
            if request.api_version >= 4 {
                g.group_state = sb(&state);
            }
            if request.api_version >= 5 {
                g.group_type = sb(&group_type);
            }
            g
        })
        .collect();
    respond(request, &response)
}

/// One ShareGroupDescribe answer: `group` as its shard holds it; `has_state` whether any shard
/// holds share-partition state for it (a group known only that way is `Empty`, epoch 0).
pub fn described_group(
    group_id: &str,
    group: Option<&ShareGroup>,
    has_state: bool,
    registry: &TopicRegistry,
    include_operations: bool,
) -> share_group_describe_response::DescribedGroup {
    let mut out = share_group_describe_response::DescribedGroup::default();
    out.group_id = GroupId(sb(group_id));
    out.authorized_operations = OPERATIONS_NOT_REQUESTED;
    if group_id.is_empty() {
        out.error_code = ResponseError::InvalidGroupId.code();
        out.error_message = Some(sb("The group id is empty."));
        return out;
    }
    let empty = ShareGroup::default();
    let group = match group {
        Some(g) => g,
        None if has_state => &empty,
        None => {
            out.error_code = ResponseError::GroupIdNotFound.code();
            out.error_message = Some(sb(&format!("Group {group_id} not found.")));
            return out;
        }
    };
    out.group_state = sb(group_state(group.members.len()));
    out.group_epoch = group.group_epoch;
    out.assignment_epoch = group.assignment_epoch;
    out.assignor_name = sb(SHARE_ASSIGNOR_NAME);
    if include_operations {
        // All of them; with an authorizer `authorize` narrows them to the principal's.
        out.authorized_operations = ResourceType::Group.all_operations();
    }
    out.members = group
        .members
        .values()
        .map(|m| {
            let mut member = share_group_describe_response::Member::default();
            member.member_id = sb(&m.member_id);
            member.rack_id = m.rack_id.as_deref().map(sb);
            member.member_epoch = m.member_epoch;
            member.client_id = sb(&m.client_id);
            member.client_host = sb(&m.client_host);
            member.subscribed_topic_names = m.subscribed.iter().map(|t| TopicName(sb(t))).collect();
            member.assignment.topic_partitions = m
                .assignment
                .iter()
                .map(|t| {
                    let mut tp = share_group_describe_response::TopicPartitions::default();
                    tp.topic_id = t.topic_id;
                    // The registry's current name (the assignment keeps the one it was made with).
                    tp.topic_name = TopicName(sb(registry
                        .topic_by_id(&t.topic_id)
                        .map_or(t.topic.as_str(), |meta| meta.name.as_str())));
                    tp.partitions = t.partitions.clone();
                    tp
                })
                .collect();
            member
        })
        .collect();
    out
}

/// The group's membership from its shard (`Err`: a Kafka error code).
async fn group_of<B: Bus>(bus: &B, group_id: &str) -> Result<Option<ShareGroup>, i16> {
    let shard = group_shard(group_id, bus.shard_count());
    let describe = DescribeShareGroup {
        group_id: group_id.to_string(),
    };
    bus.call_op(shard, describe)
        .await
        .map_err(|failure| failure.code())
}

/// Every partition the group has state for, on every shard (`Err`: a Kafka error code).
pub(super) async fn all_offsets<B: Bus>(bus: &B, group_id: &str) -> Result<Vec<ShareOffset>, i16> {
    let calls = (0..bus.shard_count())
        .map(|s| {
            bus.call_op(
                ShardId(s as u16),
                GetShareOffsets {
                    group_id: group_id.to_string(),
                    partitions: None,
                },
            )
        })
        .collect();
    let mut out = Vec::new();
    for reply in join_all(calls).await {
        out.extend(reply.map_err(|failure| failure.code())?);
    }
    Ok(out)
}

/// The group's membership, and whether it is known at all (`Err`: a Kafka error code).
async fn known_group<B: Bus>(bus: &B, group_id: &str) -> Result<(Option<ShareGroup>, bool), i16> {
    let group = group_of(bus, group_id).await?;
    if group.is_some() {
        return Ok((group, true));
    }
    let has_state = !all_offsets(bus, group_id).await?.is_empty();
    Ok((None, has_state))
}

/// ShareGroupDescribe v1.
pub async fn handle_share_group_describe<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "groups",
        REQUEST_ENTITIES_MAX,
        |d: &ShareGroupDescribeRequest| d.group_ids.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let registry = bus.registry();
    let mut response = ShareGroupDescribeResponse::default();
    for id in &decoded.group_ids {
        let group_id = id.0.as_str();
        let described = if group_id.is_empty() {
            described_group(group_id, None, false, &registry, false)
        } else {
            match known_group(bus, group_id).await {
                Ok((group, has_state)) => described_group(
                    group_id,
                    group.as_ref(),
                    has_state,
                    &registry,
                    decoded.include_authorized_operations,
                ),
                Err(code) => {
                    let mut g = share_group_describe_response::DescribedGroup::default();
                    g.group_id = id.clone();
                    g.error_code = code;
                    g
                }
            }
        };
        response.groups.push(described);
    }
    respond(request, &response)
}

/// One partition's answer; `lag` (v1, KIP-1226) is -1 where the start offset is unknown.
fn offsets_partition(
    partition: i32,
    start_offset: i64,
    lag: i64,
    error: Option<(i16, &str)>,
) -> describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition {
    let mut p =
        describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition::default(
        );
    p.partition_index = partition;
    p.start_offset = start_offset;
    p.leader_epoch = if start_offset >= 0 { 0 } else { -1 };
    p.lag = if start_offset >= 0 { lag } else { -1 };
    if let Some((code, message)) = error {
        p.error_code = code;
        p.error_message = Some(message.to_string());
        p.start_offset = -1;
        p.leader_epoch = -1;
        p.lag = -1;
    }
    p
}

const UNKNOWN_PARTITION_MESSAGE: &str = "This server does not host this topic-partition.";

/// The topics of a DescribeShareGroupOffsets answer for every partition the group has state
/// for (`offsets` from all shards), by topic name, partitions ascending; partitions of topics
/// that no longer exist are left out.
pub fn all_offsets_topics(
    registry: &TopicRegistry,
    offsets: &[ShareOffset],
) -> Vec<describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseTopic> {
    let mut by_topic: BTreeMap<(&str, Uuid), Vec<(i32, i64, i64)>> = BTreeMap::new();
    for o in offsets {
        if let Some(meta) = registry.topic_by_id(&o.partition.topic_id) {
            by_topic
                .entry((meta.name.as_str(), meta.id))
                .or_default()
                .push((o.partition.partition, o.start_offset, o.lag));
        }
    }
    by_topic
        .into_iter()
        .map(|((name, id), mut partitions)| {
            partitions.sort();
            let mut t =
                describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseTopic::default();
            t.topic_name = name.to_string();
            t.topic_id = id;
            t.partitions = partitions
                .into_iter()
                .map(|(p, start, lag)| offsets_partition(p, start, lag, None))
                .collect();
            t
        })
        .collect()
}

/// DescribeShareGroupOffsets v0–v1 (v1 adds the lag, KIP-1226; generated codec).
pub async fn handle_describe_share_group_offsets<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "groups",
        REQUEST_ENTITIES_MAX,
        |d: &DescribeShareGroupOffsetsRequest| d.groups.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let named: usize = decoded
        .groups
        .iter()
        .flat_map(|g| g.topics.iter().flatten())
        .map(|t| t.partitions.len())
        .sum();
    if let Err(refused) = check_count("partitions", named, REQUEST_PARTITIONS_MAX) {
        return refused;
    }
    let registry = bus.registry();
    let shards = bus.shard_count();
    let mut response = DescribeShareGroupOffsetsResponse::default();
    for group in &decoded.groups {
        let group_id = group.group_id.as_str();
        let mut out =
            describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup::default(
            );
        out.group_id = group.group_id.clone();
        let known = match known_group(bus, group_id).await {
            Ok((_, known)) => Ok(known),
            Err(code) => Err(code),
        };
        match known {
            Err(code) => out.error_code = code,
            Ok(false) => {
                out.error_code = ResponseError::GroupIdNotFound.code();
                out.error_message = Some(format!("Group {group_id} not found."));
            }
            Ok(true) => match &group.topics {
                None => match all_offsets(bus, group_id).await {
                    Ok(offsets) => out.topics = all_offsets_topics(&registry, &offsets),
                    Err(code) => out.error_code = code,
                },
                Some(topics) => {
                    // (topic index, partition index) per shard, asked in one call per shard.
                    let mut by_shard: BTreeMap<ShardId, Vec<(usize, usize, PartitionRef)>> =
                        BTreeMap::new();
                    for (ti, t) in topics.iter().enumerate() {
                        let mut rt = describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseTopic::default();
                        rt.topic_name = t.topic_name.clone();
                        let meta = registry.topic(t.topic_name.as_str());
                        if let Some(meta) = meta {
                            rt.topic_id = meta.id;
                        }
                        for (pi, &p) in t.partitions.iter().enumerate() {
                            match meta {
                                Some(meta) if p >= 0 && p < meta.partitions => {
                                    rt.partitions.push(offsets_partition(p, -1, -1, None));
                                    by_shard
                                        .entry(partition_shard(&meta.name, p, shards))
                                        .or_default()
                                        .push((
                                            ti,
                                            pi,
                                            PartitionRef {
                                                topic: meta.name.clone(),
                                                topic_id: meta.id,
                                                partition: p,
                                            },
                                        ));
                                }
                                _ => rt.partitions.push(offsets_partition(
                                    p,
                                    -1,
                                    -1,
                                    Some((
                                        ResponseError::UnknownTopicOrPartition.code(),
                                        UNKNOWN_PARTITION_MESSAGE,
                                    )),
                                )),
                            }
                        }
                        out.topics.push(rt);
                    }
                    let order: Vec<ShardId> = by_shard.keys().copied().collect();
                    let calls = by_shard
                        .iter()
                        .map(|(shard, refs)| {
                            bus.call_op(
                                *shard,
                                GetShareOffsets {
                                    group_id: group_id.to_string(),
                                    partitions: Some(
                                        refs.iter().map(|(_, _, r)| r.clone()).collect(),
                                    ),
                                },
                            )
                        })
                        .collect();
                    for (shard, reply) in order.iter().zip(join_all(calls).await) {
                        let refs = &by_shard[shard];
                        let answers: Vec<Result<(i64, i64), i16>> = match reply {
                            Ok(offsets) => offsets
                                .into_iter()
                                .map(|o| Ok((o.start_offset, o.lag)))
                                .collect(),
                            Err(failure) => vec![Err(failure.code()); refs.len()],
                        };
                        for ((ti, pi, r), answer) in refs.iter().zip(answers) {
                            let slot = &mut out.topics[*ti].partitions[*pi];
                            *slot = match answer {
                                Ok((start, lag)) => {
                                    offsets_partition(r.partition, start, lag, None)
                                }
                                Err(code) => offsets_partition(
                                    r.partition,
                                    -1,
                                    -1,
                                    Some((code, "the partition's shard did not answer")),
                                ),
                            };
                        }
                    }
                }
            },
        }
        response.groups.push(out);
    }
    respond(request, &response)
}

/// Why offsets cannot be changed now: the group has members (NON_EMPTY_GROUP), or for
/// DeleteShareGroupOffsets (`must_exist`) the group is unknown. `Ok`: go ahead.
async fn check_offsets_changeable<B: Bus>(
    bus: &B,
    group_id: &str,
    must_exist: bool,
) -> Result<(), (i16, String)> {
    if group_id.is_empty() {
        return Err((
            ResponseError::InvalidGroupId.code(),
            "The group id is empty.".to_string(),
        ));
    }
    let (group, known) = known_group(bus, group_id)
        .await
        .map_err(|code| (code, "the group's shard did not answer".to_string()))?;
    if group.as_ref().is_some_and(|g| !g.members.is_empty()) {
        return Err((
            ResponseError::NonEmptyGroup.code(),
            "The group is not empty.".to_string(),
        ));
    }
    if must_exist && !known {
        return Err((
            ResponseError::GroupIdNotFound.code(),
            format!("Group {group_id} not found."),
        ));
    }
    Ok(())
}

/// AlterShareGroupOffsets v0: only while the group has no members.
pub async fn handle_alter_share_group_offsets<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "partitions",
        REQUEST_PARTITIONS_MAX,
        |d: &AlterShareGroupOffsetsRequest| d.topics.iter().map(|t| t.partitions.len()).sum(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let group_id = decoded.group_id.0.as_str();
    let registry = bus.registry();
    let shards = bus.shard_count();
    let mut response = AlterShareGroupOffsetsResponse::default();
    let refused = check_offsets_changeable(bus, group_id, false).await.err();
    // (topic index, partition index, partition, offset) per shard.
    let mut by_shard: BTreeMap<ShardId, Vec<(usize, usize, PartitionRef, i64)>> = BTreeMap::new();
    for (ti, t) in decoded.topics.iter().enumerate() {
        let mut rt =
            alter_share_group_offsets_response::AlterShareGroupOffsetsResponseTopic::default();
        rt.topic_name = t.topic_name.clone();
        let meta = registry.topic(t.topic_name.0.as_str());
        if let Some(meta) = meta {
            rt.topic_id = meta.id;
        }
        for (pi, p) in t.partitions.iter().enumerate() {
            let mut rp =
                alter_share_group_offsets_response::AlterShareGroupOffsetsResponsePartition::default();
            rp.partition_index = p.partition_index;
            match (meta, &refused) {
                (_, Some((code, message))) => {
                    rp.error_code = *code;
                    rp.error_message = Some(sb(message));
                }
                (Some(meta), None)
                    if p.partition_index >= 0 && p.partition_index < meta.partitions =>
                {
                    by_shard
                        .entry(partition_shard(&meta.name, p.partition_index, shards))
                        .or_default()
                        .push((
                            ti,
                            pi,
                            PartitionRef {
                                topic: meta.name.clone(),
                                topic_id: meta.id,
                                partition: p.partition_index,
                            },
                            p.start_offset,
                        ));
                }
                (_, None) => {
                    rp.error_code = ResponseError::UnknownTopicOrPartition.code();
                    rp.error_message = Some(sb(UNKNOWN_PARTITION_MESSAGE));
                }
            }
            rt.partitions.push(rp);
        }
        response.responses.push(rt);
    }
    if let Some((code, message)) = refused {
        response.error_code = code;
        response.error_message = Some(sb(&message));
        return respond(request, &response);
    }
    let order: Vec<ShardId> = by_shard.keys().copied().collect();
    let calls = by_shard
        .iter()
        .map(|(shard, parts)| {
            bus.call_op(
                *shard,
                AlterShareOffsets {
                    group_id: group_id.to_string(),
                    partitions: parts.iter().map(|(_, _, r, o)| (r.clone(), *o)).collect(),
                },
            )
        })
        .collect();
    for (shard, reply) in order.iter().zip(join_all(calls).await) {
        let parts = &by_shard[shard];
        for ((ti, pi, _, _), result) in parts.iter().zip(results_of(reply, parts.len())) {
            let slot = &mut response.responses[*ti].partitions[*pi];
            slot.error_code = result.error_code();
            slot.error_message = result.error_message.as_deref().map(sb);
        }
    }
    respond(request, &response)
}

/// The per-item results of an alter or delete reply (an error for each if the shard failed).
fn results_of(reply: Result<Vec<ShareAckResult>, CallError>, count: usize) -> Vec<ShareAckResult> {
    match reply {
        Ok(results) if results.len() == count => results,
        Err(failure) => {
            vec![
                ShareAckResult::error(
                    SharePartitionError::Call(failure),
                    "the shard could not apply the change"
                );
                count
            ]
        }
        Ok(results) => {
            let unexpected =
                CallError::UnexpectedReply(format!("{} results for {count} items", results.len()));
            vec![
                ShareAckResult::error(
                    SharePartitionError::Call(unexpected),
                    "the shard answered unexpectedly"
                );
                count
            ]
        }
    }
}

/// DeleteShareGroupOffsets v0: only while the group has no members.
pub async fn handle_delete_share_group_offsets<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "topics",
        REQUEST_ENTITIES_MAX,
        |d: &DeleteShareGroupOffsetsRequest| d.topics.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let group_id = decoded.group_id.0.as_str();
    let registry = bus.registry();
    let mut response = DeleteShareGroupOffsetsResponse::default();
    if let Err((code, message)) = check_offsets_changeable(bus, group_id, true).await {
        response.error_code = code;
        response.error_message = Some(sb(&message));
        return respond(request, &response);
    }
    let mut topic_ids: Vec<Uuid> = Vec::new();
    let mut seen: BTreeSet<Uuid> = BTreeSet::new();
    for t in &decoded.topics {
        let mut rt =
            delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic::default();
        rt.topic_name = t.topic_name.clone();
        match registry.topic(t.topic_name.0.as_str()) {
            Some(meta) => {
                rt.topic_id = meta.id;
                if seen.insert(meta.id) {
                    topic_ids.push(meta.id);
                }
            }
            None => {
                rt.error_code = ResponseError::UnknownTopicOrPartition.code();
                rt.error_message = Some(sb(UNKNOWN_PARTITION_MESSAGE));
            }
        }
        response.responses.push(rt);
    }
    if !topic_ids.is_empty() {
        let calls = (0..bus.shard_count())
            .map(|s| {
                bus.call_op(
                    ShardId(s as u16),
                    DeleteShareOffsets {
                        group_id: group_id.to_string(),
                        topic_ids: topic_ids.clone(),
                    },
                )
            })
            .collect();
        for reply in join_all(calls).await {
            for (id, result) in topic_ids.iter().zip(results_of(reply, topic_ids.len())) {
                if result.is_ok() {
                    continue;
                }
                for rt in response
                    .responses
                    .iter_mut()
                    .filter(|rt| rt.topic_id == *id && rt.error_code == 0)
                {
                    rt.error_code = result.error_code();
                    rt.error_message = result.error_message.as_deref().map(sb);
                }
            }
        }
    }
    respond(request, &response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TopicPartition;
    use crate::shard::share_group::{AssignedTopic, ShareMember};
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn listed(coordinated: &[(&str, usize)], with_state: &[&str]) -> ShareGroupsListed {
        ShareGroupsListed {
            coordinated: coordinated
                .iter()
                .map(|(g, n)| (g.to_string(), *n))
                .collect(),
            with_state: with_state.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn list_merges_shards_and_applies_filters() {
        // Shard 0 coordinates "a" (2 members) and holds state of "b"; shard 1 coordinates "b"
        // (no members left) and holds state of "c", which no shard coordinates (after a restart).
        let shards = [
            listed(&[("a", 2)], &["b"]),
            listed(&[("b", 0)], &["c", "a"]),
        ];
        let all = listed_groups(&shards, &[], &[]);
        assert_eq!(
            all,
            vec![
                ("a".to_string(), "Stable"),
                ("b".to_string(), "Empty"),
                ("c".to_string(), "Empty")
            ]
        );
        let stable = listed_groups(&shards, &strings(&["STABLE"]), &[]);
        assert_eq!(stable, vec![("a".to_string(), "Stable")]);
        assert!(listed_groups(&shards, &[], &strings(&["consumer", "classic"])).is_empty());
        assert_eq!(listed_groups(&shards, &[], &strings(&["Share"])).len(), 3);
        assert!(listed_groups(&shards, &strings(&["Dead"]), &[]).is_empty());
    }

    fn registry() -> TopicRegistry {
        let mut r = TopicRegistry::new("c".into());
        r.create_topic("orders", Uuid::from_u128(1), 2, &[])
            .unwrap();
        r.create_topic("audit", Uuid::from_u128(2), 1, &[]).unwrap();
        r
    }

    fn round_trip(
        g: share_group_describe_response::DescribedGroup,
    ) -> share_group_describe_response::DescribedGroup {
        let mut response = ShareGroupDescribeResponse::default();
        response.groups = vec![g];
        let mut buf = bytes::BytesMut::new();
        response.encode(&mut buf, 1).unwrap();
        let mut decoded = ShareGroupDescribeResponse::decode(&mut buf.freeze(), 1).unwrap();
        decoded.groups.remove(0)
    }

    #[test]
    fn describe_reports_members_and_unknown_groups() {
        let reg = registry();
        let mut group = ShareGroup {
            group_epoch: 4,
            assignment_epoch: 4,
            ..ShareGroup::default()
        };
        group.members.insert(
            "m1".into(),
            ShareMember {
                member_id: "m1".into(),
                member_epoch: 4,
                previous_member_epoch: 3,
                rack_id: None,
                client_id: "client-1".into(),
                client_host: "/127.0.0.1".into(),
                subscribed: vec!["orders".into()],
                assignment: vec![AssignedTopic {
                    topic_id: Uuid::from_u128(1),
                    topic: "orders".into(),
                    partitions: vec![0, 1],
                }],
                last_heartbeat_ms: 0,
            },
        );
        let d = round_trip(described_group("g", Some(&group), true, &reg, false));
        assert_eq!(d.error_code, 0);
        assert_eq!(d.group_state.as_str(), "Stable");
        assert_eq!((d.group_epoch, d.assignment_epoch), (4, 4));
        assert_eq!(d.authorized_operations, i32::MIN);
        let m = &d.members[0];
        assert_eq!(m.member_id.as_str(), "m1");
        assert_eq!(m.client_id.as_str(), "client-1");
        assert_eq!(m.client_host.as_str(), "/127.0.0.1");
        assert_eq!(m.subscribed_topic_names[0].0.as_str(), "orders");
        let tp = &m.assignment.topic_partitions[0];
        assert_eq!(
            (tp.topic_name.0.as_str(), &tp.partitions),
            ("orders", &vec![0, 1])
        );

        let only_state = round_trip(described_group("h", None, true, &reg, true));
        assert_eq!(only_state.error_code, 0);
        assert_eq!(only_state.group_state.as_str(), "Empty");
        assert!(only_state.members.is_empty());
        assert_eq!(
            only_state.authorized_operations,
            ResourceType::Group.all_operations()
        );

        let unknown = round_trip(described_group("x", None, false, &reg, false));
        assert_eq!(unknown.error_code, ResponseError::GroupIdNotFound.code());
        assert_eq!(unknown.error_message.as_deref(), Some("Group x not found."));
        let empty_id = described_group("", None, false, &reg, false);
        assert_eq!(empty_id.error_code, ResponseError::InvalidGroupId.code());
    }

    #[test]
    fn all_offsets_are_grouped_by_topic_and_sorted() {
        let reg = registry();
        let offset = |topic: u128, partition: i32, start: i64| ShareOffset {
            partition: TopicPartition {
                topic_id: Uuid::from_u128(topic),
                partition,
            },
            start_offset: start,
            high_watermark: 100,
            lag: 100 - start,
        };
        // Partitions come from several shards, unordered; topic 9 was deleted.
        let offsets = [
            offset(1, 1, 7),
            offset(2, 0, 3),
            offset(1, 0, 5),
            offset(9, 0, 1),
        ];
        let topics = all_offsets_topics(&reg, &offsets);
        let names: Vec<&str> = topics.iter().map(|t| t.topic_name.as_str()).collect();
        assert_eq!(names, vec!["audit", "orders"]);
        let orders: Vec<(i32, i64, i32)> = topics[1]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.start_offset, p.leader_epoch))
            .collect();
        assert_eq!(orders, vec![(0, 5, 0), (1, 7, 0)]);
        assert_eq!(topics[1].topic_id, Uuid::from_u128(1));
        let missing = offsets_partition(3, 9, 5, Some((3, UNKNOWN_PARTITION_MESSAGE)));
        assert_eq!((missing.start_offset, missing.error_code), (-1, 3));
    }

    #[test]
    fn shard_failures_become_per_item_errors() {
        let r = results_of(Err(CallError::Unreachable), 2);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|x| x.error_code() == 56));
        let r = results_of(Ok(vec![ShareAckResult::ok()]), 2);
        assert!(
            r.iter().all(|x| x.error_code() == -1),
            "a short answer is an error"
        );
        let r = results_of(Ok(vec![ShareAckResult::ok()]), 1);
        assert_eq!(r[0].error_code(), 0);
    }
}
