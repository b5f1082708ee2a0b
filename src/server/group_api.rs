//! Consumer groups on the wire: the classic protocol — JoinGroup v0–9 (11),
//! SyncGroup v0–5 (14), Heartbeat v0–4 (12), LeaveGroup v0–5 (13) — and committed offsets —
//! OffsetCommit v2–9 (8), OffsetFetch v1–9 (9).
//!
//! Every request goes to the group's shard (`model::group_shard`) as its own op (`group::ops`); the state
//! machine (`crate::group`) answers at once or parks a JoinGroup / SyncGroup with a ticket,
//! which this handler polls every `GROUP_WAIT_POLL_MS` until the rebalance moves on (the
//! group's own deadlines bound the wait). Commits are answered once durable in the group
//! shard's journal. Topic names are checked here against the registry snapshot (OffsetCommit of
//! an unknown topic is UNKNOWN_TOPIC_OR_PARTITION, as Kafka's request handler answers).
//!
//! Not served: OffsetCommit v10 / OffsetFetch v10 (topic ids; Kafka 4.4 serves them, clients
//! fall back to v9).

use super::{decode_counted, respond, Bus, ConnInfo, Outcome};
use crate::constants::{
    GROUP_PROTOCOLS_MAX, GROUP_WAIT_POLL_MS, REQUEST_ENTITIES_MAX, REQUEST_PARTITIONS_MAX,
};
use crate::group::classic::{JoinAnswer, JoinRequest, JoinStep, SyncAnswer, SyncRequest, SyncStep};
use crate::group::ops::{
    CommitOffsets, FetchOffsets, GroupHeartbeat, JoinGroup, LeaveGroup, PollJoin, PollSync,
    SyncGroup,
};
use crate::group::{CommitPartition, FetchedOffset, GroupError};
use crate::model::group_shard;
use crate::protocol::codec::Request;
use kafka_protocol::messages::{
    join_group_response, leave_group_response, offset_commit_response, offset_fetch_response,
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

pub(crate) fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// Runs `op` on the group's shard: its reply, or the Kafka code of the call's failure.
pub(crate) async fn call_group<B: Bus, O: crate::shard::call::Op>(
    bus: &B,
    group_id: &str,
    op: O,
) -> Result<O::Reply, i16> {
    let shard = group_shard(group_id, bus.shard_count());
    bus.call_op(shard, op)
        .await
        .map_err(|failure| failure.code())
}

fn client_host(conn: &ConnInfo) -> String {
    format!("/{}", conn.peer_addr.ip())
}

/// A JoinGroup answer carrying an error the group did not choose (the edge's, or the call's).
fn join_error(code: i16, member_id: &str) -> (i16, JoinAnswer) {
    (code, JoinAnswer::empty(member_id))
}

/// A JoinGroup answer of the group, with its error code.
fn joined(a: JoinAnswer) -> (i16, JoinAnswer) {
    (GroupError::code_or_none(a.error), a)
}

/// A SyncGroup answer carrying an error the group did not choose.
fn sync_error(code: i16) -> (i16, SyncAnswer) {
    (code, SyncAnswer::empty())
}

/// A SyncGroup answer of the group, with its error code.
fn synced(a: SyncAnswer) -> (i16, SyncAnswer) {
    (GroupError::code_or_none(a.error), a)
}

/// JoinGroup v0–9.
pub async fn handle_join_group<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    let r: JoinGroupRequest = match decode_counted(
        request,
        "protocols",
        GROUP_PROTOCOLS_MAX,
        |r: &JoinGroupRequest| r.protocols.len(),
    ) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let v = request.api_version;
    let group_id = r.group_id.0.to_string();
    let member_id = r.member_id.to_string();
    let (code, answer) = if group_id.is_empty() {
        join_error(ResponseError::InvalidGroupId.code(), &member_id)
    } else {
        let join = JoinRequest {
            member_id: member_id.clone(),
            group_instance_id: r.group_instance_id.as_ref().map(|s| s.to_string()),
            client_id: request.client_id.clone().unwrap_or_default(),
            client_host: client_host(conn),
            session_timeout_ms: r.session_timeout_ms,
            rebalance_timeout_ms: if v >= 1 {
                r.rebalance_timeout_ms
            } else {
                r.session_timeout_ms
            },
            protocol_type: r.protocol_type.to_string(),
            protocols: r
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.clone()))
                .collect(),
            api_version: v,
        };
        let wait_ms = join
            .rebalance_timeout_ms
            .max(join.session_timeout_ms)
            .max(0) as i64;
        let op = JoinGroup {
            group_id: group_id.clone(),
            request: join,
        };
        match call_group(bus, &group_id, op).await {
            Ok(JoinStep::Done(a)) => joined(a),
            Ok(JoinStep::Wait(ticket)) => {
                poll_join(bus, &group_id, ticket, &member_id, wait_ms).await
            }
            Err(code) => join_error(code, &member_id),
        }
    };
    let mut response = JoinGroupResponse::default();
    response.error_code = code;
    response.generation_id = answer.generation_id;
    // v7+: nullable; before: a plain string.
    response.protocol_type = answer.protocol_type.as_deref().map(sb);
    response.protocol_name = match (&answer.protocol_name, v >= 7) {
        (Some(n), _) => Some(sb(n)),
        (None, true) => None,
        (None, false) => Some(sb("")),
    };
    response.leader = sb(&answer.leader);
    response.skip_assignment = answer.skip_assignment && v >= 9;
    response.member_id = sb(&answer.member_id);
    response.members = answer
        .members
        .iter()
        .map(|m| {
            let mut out = join_group_response::JoinGroupResponseMember::default();
            out.member_id = sb(&m.member_id);
            out.group_instance_id = m.group_instance_id.as_deref().map(sb);
            out.metadata = m.metadata.clone();
            out
        })
        .collect();
    respond(request, &response)
}

async fn poll_join<B: Bus>(
    bus: &B,
    group_id: &str,
    ticket: u64,
    member_id: &str,
    wait_ms: i64,
) -> (i16, JoinAnswer) {
    // The group's deadlines end the wait; this bound only guards against a lost answer.
    let give_up = bus.now_ms() + wait_ms + 10_000;
    loop {
        let op = PollJoin {
            group_id: group_id.to_string(),
            ticket,
        };
        match call_group(bus, group_id, op).await {
            Ok(Some(a)) => return joined(a),
            Ok(None) => {}
            Err(code) => return join_error(code, member_id),
        }
        if bus.now_ms() > give_up {
            return joined(JoinAnswer::error(
                GroupError::RebalanceInProgress,
                member_id,
            ));
        }
        bus.sleep_ms(GROUP_WAIT_POLL_MS).await;
    }
}

/// SyncGroup v0–5.
pub async fn handle_sync_group<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let r: SyncGroupRequest = match decode_counted(
        request,
        "assignments",
        crate::constants::GROUP_MEMBERS_MAX,
        |r: &SyncGroupRequest| r.assignments.len(),
    ) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let group_id = r.group_id.0.to_string();
    let (code, answer) = if group_id.is_empty() {
        sync_error(ResponseError::InvalidGroupId.code())
    } else {
        let sync = SyncRequest {
            member_id: r.member_id.to_string(),
            group_instance_id: r.group_instance_id.as_ref().map(|s| s.to_string()),
            generation_id: r.generation_id,
            protocol_type: r.protocol_type.as_ref().map(|s| s.to_string()),
            protocol_name: r.protocol_name.as_ref().map(|s| s.to_string()),
            assignments: r
                .assignments
                .iter()
                .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                .collect(),
        };
        let op = SyncGroup {
            group_id: group_id.clone(),
            request: sync,
        };
        match call_group(bus, &group_id, op).await {
            Ok(SyncStep::Done(a)) => synced(a),
            Ok(SyncStep::Wait(ticket)) => poll_sync(bus, &group_id, ticket).await,
            Err(code) => sync_error(code),
        }
    };
    let mut response = SyncGroupResponse::default();
    response.error_code = code;
    if request.api_version >= 5 {
        response.protocol_type = answer.protocol_type.as_deref().map(sb);
        response.protocol_name = answer.protocol_name.as_deref().map(sb);
    }
    response.assignment = answer.assignment;
    respond(request, &response)
}

async fn poll_sync<B: Bus>(bus: &B, group_id: &str, ticket: u64) -> (i16, SyncAnswer) {
    // The pending-sync timeout (the rebalance timeout) ends the wait; this bound (Kafka's
    // largest session timeout) only guards against a lost answer.
    let give_up = bus.now_ms() + crate::constants::GROUP_MAX_SESSION_TIMEOUT_MS as i64;
    loop {
        let op = PollSync {
            group_id: group_id.to_string(),
            ticket,
        };
        match call_group(bus, group_id, op).await {
            Ok(Some(a)) => return synced(a),
            Ok(None) => {}
            Err(code) => return sync_error(code),
        }
        if bus.now_ms() > give_up {
            return synced(SyncAnswer::error(GroupError::RebalanceInProgress));
        }
        bus.sleep_ms(GROUP_WAIT_POLL_MS).await;
    }
}

/// Heartbeat v0–4.
pub async fn handle_heartbeat<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let r: HeartbeatRequest = match decode_counted(request, "", 0, |_: &HeartbeatRequest| 0) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let group_id = r.group_id.0.to_string();
    let code = if group_id.is_empty() {
        ResponseError::InvalidGroupId.code()
    } else {
        let op = GroupHeartbeat {
            group_id: group_id.clone(),
            member_id: r.member_id.to_string(),
            group_instance_id: r.group_instance_id.as_ref().map(|s| s.to_string()),
            generation_id: r.generation_id,
        };
        match call_group(bus, &group_id, op).await {
            Ok(outcome) => GroupError::code_of(outcome),
            Err(code) => code,
        }
    };
    let mut response = HeartbeatResponse::default();
    response.error_code = code;
    respond(request, &response)
}

/// LeaveGroup v0–5 (v0–2: one member id; v3+: members by id or instance id).
pub async fn handle_leave_group<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let r: LeaveGroupRequest = match decode_counted(
        request,
        "members",
        crate::constants::GROUP_MEMBERS_MAX,
        |r: &LeaveGroupRequest| r.members.len(),
    ) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let v = request.api_version;
    let group_id = r.group_id.0.to_string();
    let members: Vec<(String, Option<String>)> = if v >= 3 {
        r.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                )
            })
            .collect()
    } else {
        vec![(r.member_id.to_string(), None)]
    };
    let result: Result<Vec<i16>, i16> = if group_id.is_empty() {
        Err(ResponseError::InvalidGroupId.code())
    } else {
        let op = LeaveGroup {
            group_id: group_id.clone(),
            members: members.clone(),
        };
        match call_group(bus, &group_id, op).await {
            Ok(result) => result
                .map(|members| members.into_iter().map(GroupError::code_of).collect())
                .map_err(GroupError::code),
            Err(code) => Err(code),
        }
    };
    let mut response = LeaveGroupResponse::default();
    match result {
        Err(code) => response.error_code = code,
        Ok(codes) if v < 3 => response.error_code = codes.first().copied().unwrap_or(0),
        Ok(codes) => {
            response.members = members
                .iter()
                .zip(codes)
                .map(|((id, instance), code)| {
                    let mut m = leave_group_response::MemberResponse::default();
                    m.member_id = sb(id);
                    m.group_instance_id = instance.as_deref().map(sb);
                    m.error_code = code;
                    m
                })
                .collect();
        }
    }
    respond(request, &response)
}

/// OffsetCommit v2–9.
pub async fn handle_offset_commit<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let r: OffsetCommitRequest = match decode_counted(
        request,
        "partitions",
        REQUEST_PARTITIONS_MAX,
        |r: &OffsetCommitRequest| r.topics.iter().map(|t| t.partitions.len().max(1)).sum(),
    ) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let group_id = r.group_id.0.to_string();
    let registry = bus.registry();
    // Per request partition: its error code, or None if it goes to the group.
    let mut codes: Vec<Vec<Option<i16>>> = Vec::with_capacity(r.topics.len());
    let mut partitions = Vec::new();
    for t in &r.topics {
        let known = registry.topic(&t.name.0).is_some();
        codes.push(
            t.partitions
                .iter()
                .map(|p| {
                    if group_id.is_empty() {
                        return Some(ResponseError::InvalidGroupId.code());
                    }
                    if !known {
                        return Some(ResponseError::UnknownTopicOrPartition.code());
                    }
                    partitions.push(CommitPartition {
                        topic: t.name.0.to_string(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|s| s.to_string()),
                        retention_time_ms: if request.api_version <= 4 {
                            r.retention_time_ms
                        } else {
                            -1
                        },
                    });
                    None
                })
                .collect(),
        );
    }
    let mut results: std::vec::IntoIter<i16> = Vec::new().into_iter();
    let mut group_error = None;
    if !partitions.is_empty() {
        let count = partitions.len();
        let op = CommitOffsets {
            group_id: group_id.clone(),
            member_id: r.member_id.to_string(),
            group_instance_id: r.group_instance_id.as_ref().map(|s| s.to_string()),
            generation_or_epoch: r.generation_id_or_member_epoch,
            api_version: request.api_version,
            partitions,
        };
        match call_group(bus, &group_id, op).await {
            Ok(Ok(c)) => {
                debug_assert_eq!(c.len(), count, "one result per partition");
                results = c
                    .into_iter()
                    .map(GroupError::code_of)
                    .collect::<Vec<_>>()
                    .into_iter()
            }
            Ok(Err(e)) => group_error = Some(e.code()),
            Err(code) => group_error = Some(code),
        }
    }
    let mut response = OffsetCommitResponse::default();
    response.topics = r
        .topics
        .iter()
        .zip(codes)
        .map(|(t, codes)| {
            let mut topic = offset_commit_response::OffsetCommitResponseTopic::default();
            topic.name = t.name.clone();
            topic.partitions = t
                .partitions
                .iter()
                .zip(codes)
                .map(|(p, code)| {
                    let mut out = offset_commit_response::OffsetCommitResponsePartition::default();
                    out.partition_index = p.partition_index;
                    out.error_code = match code {
                        Some(c) => c,
                        None => group_error.unwrap_or_else(|| {
                            results
                                .next()
                                .unwrap_or(ResponseError::UnknownServerError.code())
                        }),
                    };
                    out
                })
                .collect();
            topic
        })
        .collect();
    respond(request, &response)
}

/// One group of an OffsetFetch, whichever version shaped it.
struct FetchGroup {
    group_id: String,
    topics: Option<Vec<(String, Vec<i32>)>>,
    member: Option<(String, i32)>,
    /// OffsetFetch v7+: UNSTABLE_OFFSET_COMMIT for offsets pending in a producer transaction.
    require_stable: bool,
}

/// The group's offsets, or its error code.
async fn fetch_group<B: Bus>(bus: &B, g: &FetchGroup) -> Result<Vec<FetchedOffset>, i16> {
    if g.group_id.is_empty() {
        return Err(ResponseError::InvalidGroupId.code());
    }
    let op = FetchOffsets {
        group_id: g.group_id.clone(),
        topics: g.topics.clone(),
        member: g.member.clone(),
        require_stable: g.require_stable,
    };
    match call_group(bus, &g.group_id, op).await {
        Ok(result) => result.map_err(GroupError::code),
        Err(code) => Err(code),
    }
}

/// Groups fetched offsets by topic, in order of first appearance.
fn by_topic(offsets: Vec<FetchedOffset>) -> Vec<(String, Vec<FetchedOffset>)> {
    let mut order: Vec<String> = Vec::new();
    let mut map: BTreeMap<String, Vec<FetchedOffset>> = BTreeMap::new();
    for o in offsets {
        if !map.contains_key(&o.topic) {
            order.push(o.topic.clone());
        }
        map.entry(o.topic.clone()).or_default().push(o);
    }
    order
        .into_iter()
        .map(|t| {
            let v = map.remove(&t).unwrap_or_default();
            (t, v)
        })
        .collect()
}

/// OffsetFetch v1–9 (v8+: several groups).
pub async fn handle_offset_fetch<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let r: OffsetFetchRequest = match decode_counted(
        request,
        "partitions",
        REQUEST_PARTITIONS_MAX + REQUEST_ENTITIES_MAX,
        |r: &OffsetFetchRequest| {
            let old: usize = r
                .topics
                .iter()
                .flatten()
                .map(|t| t.partition_indexes.len().max(1))
                .sum();
            let new: usize = r
                .groups
                .iter()
                .map(|g| {
                    1 + g
                        .topics
                        .iter()
                        .flatten()
                        .map(|t| t.partition_indexes.len().max(1))
                        .sum::<usize>()
                })
                .sum();
            old + new
        },
    ) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let v = request.api_version;
    let mut response = OffsetFetchResponse::default();
    if v < 8 {
        let g = FetchGroup {
            group_id: r.group_id.0.to_string(),
            topics: r.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                    .collect()
            }),
            member: None,
            require_stable: v >= 7 && r.require_stable,
        };
        match fetch_group(bus, &g).await {
            Ok(offsets) => {
                response.topics = by_topic(offsets)
                    .into_iter()
                    .map(|(name, ps)| {
                        let mut t = offset_fetch_response::OffsetFetchResponseTopic::default();
                        t.name = TopicName(sb(&name));
                        t.partitions = ps
                            .into_iter()
                            .map(|o| {
                                let mut p =
                                    offset_fetch_response::OffsetFetchResponsePartition::default();
                                p.partition_index = o.partition;
                                p.committed_offset = o.offset;
                                p.committed_leader_epoch = o.leader_epoch;
                                p.metadata = Some(sb(&o.metadata));
                                p.error_code = GroupError::code_or_none(o.error);
                                p
                            })
                            .collect();
                        t
                    })
                    .collect();
            }
            Err(code) => {
                if v >= 2 {
                    response.error_code = code;
                }
                // v1 has no top-level error: every requested partition carries it.
                response.topics = g
                    .topics
                    .iter()
                    .flatten()
                    .map(|(name, parts)| {
                        let mut t = offset_fetch_response::OffsetFetchResponseTopic::default();
                        t.name = TopicName(sb(name));
                        t.partitions = parts
                            .iter()
                            .map(|i| {
                                let mut p =
                                    offset_fetch_response::OffsetFetchResponsePartition::default();
                                p.partition_index = *i;
                                p.committed_offset = -1;
                                p.committed_leader_epoch = -1;
                                p.metadata = Some(sb(""));
                                p.error_code = code;
                                p
                            })
                            .collect();
                        t
                    })
                    .collect();
            }
        }
        return respond(request, &response);
    }
    for g in &r.groups {
        let fg = FetchGroup {
            group_id: g.group_id.0.to_string(),
            topics: g.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                    .collect()
            }),
            member: g
                .member_id
                .as_ref()
                .map(|m| (m.to_string(), g.member_epoch)),
            require_stable: r.require_stable,
        };
        let mut out = offset_fetch_response::OffsetFetchResponseGroup::default();
        out.group_id = GroupId(sb(&fg.group_id));
        match fetch_group(bus, &fg).await {
            Ok(offsets) => {
                out.topics = by_topic(offsets)
                    .into_iter()
                    .map(|(name, ps)| {
                        let mut t = offset_fetch_response::OffsetFetchResponseTopics::default();
                        t.name = TopicName(sb(&name));
                        t.partitions = ps
                            .into_iter()
                            .map(|o| {
                                let mut p =
                                    offset_fetch_response::OffsetFetchResponsePartitions::default();
                                p.partition_index = o.partition;
                                p.committed_offset = o.offset;
                                p.committed_leader_epoch = o.leader_epoch;
                                p.metadata = Some(sb(&o.metadata));
                                p.error_code = GroupError::code_or_none(o.error);
                                p
                            })
                            .collect();
                        t
                    })
                    .collect();
            }
            Err(code) => out.error_code = code,
        }
        response.groups.push(out);
    }
    respond(request, &response)
}
