//! ConsumerGroupHeartbeat v0–1 and ConsumerGroupDescribe v0–1 (KIP-848) at the edge: requests
//! to the runtime-free `kip848` state machine's inputs, its outputs to responses, Kafka error
//! codes chosen here. The state lives with the group on the group's shard.
//!
//! Topics: the protocol names owned and assigned partitions by topic id and subscriptions by
//! name; both resolve against the registry snapshot ([`topic_metadata`]). Owned partitions of a
//! topic id the registry does not know are dropped (the topic was deleted).
//!
//! Not served: `SubscribedTopicRegex` (Java's `subscribe(Pattern)` with `group.protocol=consumer`)
//! is refused with INVALID_REQUEST.

use super::group_api::call_group;
use super::{decode_counted, respond, Bus, ConnInfo, Outcome};
use crate::constants::{REQUEST_ENTITIES_MAX, REQUEST_PARTITIONS_MAX};
use crate::group::kip848::{
    Consumer848Group, HeartbeatError, HeartbeatIn, HeartbeatOut, TopicMeta, Tp,
};
use crate::group::ops::{ConsumerDescribe, ConsumerHeartbeat};
use crate::protocol::codec::Request;
use crate::shard::registry::TopicRegistry;
use kafka_protocol::messages::{
    consumer_group_describe_response, consumer_group_heartbeat_response,
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};

use crate::security::authz::{ResourceType, OPERATIONS_NOT_REQUESTED};

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// Every topic of the registry by name.
pub fn topic_metadata(registry: &TopicRegistry) -> BTreeMap<String, TopicMeta> {
    registry
        .topics
        .values()
        .map(|t| {
            (
                t.name.clone(),
                TopicMeta {
                    id: t.id,
                    partitions: t.partitions,
                },
            )
        })
        .collect()
}

/// The state machine's input for a heartbeat. Version 0 lets the broker name a joining member
/// (`new_member_id` is used then); from version 1 the client must.
pub fn heartbeat_in(
    request: &ConsumerGroupHeartbeatRequest,
    version: i16,
    registry: &TopicRegistry,
    client_id: &str,
    client_host: &str,
    new_member_id: impl FnOnce() -> String,
) -> Result<HeartbeatIn, HeartbeatError> {
    if request.subscribed_topic_regex.is_some() {
        return Err(HeartbeatError::InvalidRequest(
            "SubscribedTopicRegex is not supported by this broker; subscribe to topic names."
                .to_string(),
        ));
    }
    let mut member_id = request.member_id.to_string();
    if member_id.is_empty() && version == 0 && request.member_epoch == 0 {
        member_id = new_member_id();
    }
    let owned = request.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .filter(|t| registry.topic_by_id(&t.topic_id).is_some())
            .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
            .collect::<BTreeSet<Tp>>()
    });
    Ok(HeartbeatIn {
        member_id,
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: request.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .as_ref()
            .map(|names| names.iter().map(|n| n.to_string()).collect()),
        server_assignor: request.server_assignor.as_ref().map(|s| s.to_string()),
        owned,
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
    })
}

fn by_topic(partitions: &BTreeSet<Tp>) -> BTreeMap<uuid::Uuid, Vec<i32>> {
    let mut out: BTreeMap<uuid::Uuid, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in partitions {
        out.entry(*topic).or_default().push(*partition);
    }
    out
}

/// The heartbeat response for the state machine's answer.
pub fn heartbeat_response(
    result: &Result<HeartbeatOut, HeartbeatError>,
) -> ConsumerGroupHeartbeatResponse {
    let mut response = ConsumerGroupHeartbeatResponse::default();
    match result {
        Ok(out) => {
            response.member_id = Some(sb(&out.member_id));
            response.member_epoch = out.member_epoch;
            response.heartbeat_interval_ms = out.heartbeat_interval_ms;
            response.assignment = out.assignment.as_ref().map(|a| {
                let mut assignment = consumer_group_heartbeat_response::Assignment::default();
                assignment.topic_partitions = by_topic(a)
                    .into_iter()
                    .map(|(topic_id, partitions)| {
                        let mut t = consumer_group_heartbeat_response::TopicPartitions::default();
                        t.topic_id = topic_id;
                        t.partitions = partitions;
                        t
                    })
                    .collect();
                assignment
            });
        }
        Err(e) => {
            response.error_code = e.code();
            response.error_message = Some(sb(&e.to_string()));
            response.member_epoch = -1;
        }
    }
    response
}

/// The heartbeat response when the group's shard could not be called (`code`: the call's).
fn failed_heartbeat(code: i16) -> ConsumerGroupHeartbeatResponse {
    let mut response = ConsumerGroupHeartbeatResponse::default();
    response.error_code = code;
    response.error_message = Some(sb(&format!("error {code}")));
    response.member_epoch = -1;
    response
}

fn describe_assignment(
    partitions: &BTreeSet<Tp>,
    registry: &TopicRegistry,
) -> consumer_group_describe_response::Assignment {
    let mut out = consumer_group_describe_response::Assignment::default();
    out.topic_partitions = by_topic(partitions)
        .into_iter()
        .map(|(topic_id, partitions)| {
            let mut t = consumer_group_describe_response::TopicPartitions::default();
            t.topic_id = topic_id;
            t.topic_name = TopicName(sb(registry
                .topic_by_id(&topic_id)
                .map_or("", |meta| meta.name.as_str())));
            t.partitions = partitions;
            t
        })
        .collect();
    out
}

/// One group of a ConsumerGroupDescribe response: `None` when the group does not exist or is
/// not a consumer (KIP-848) group — Kafka's GROUP_ID_NOT_FOUND with its message.
pub fn described_group(
    group_id: &str,
    group: Option<&Consumer848Group>,
    registry: &TopicRegistry,
    include_authorized_operations: bool,
) -> consumer_group_describe_response::DescribedGroup {
    let mut out = consumer_group_describe_response::DescribedGroup::default();
    out.group_id = GroupId(sb(group_id));
    out.authorized_operations = OPERATIONS_NOT_REQUESTED;
    let Some(group) = group else {
        out.error_code = ResponseError::GroupIdNotFound.code();
        out.error_message = Some(sb(&format!("Group {group_id} not found.")));
        out.group_state = sb("Dead");
        return out;
    };
    out.group_state = sb(group.state_name());
    out.group_epoch = group.group_epoch;
    out.assignment_epoch = group.assignment_epoch;
    out.assignor_name = sb(group.assignor().name());
    out.members = group
        .members
        .values()
        .map(|m| {
            let mut d = consumer_group_describe_response::Member::default();
            d.member_id = sb(&m.member_id);
            d.instance_id = m.instance_id.as_deref().map(sb);
            d.rack_id = m.rack_id.as_deref().map(sb);
            d.member_epoch = m.member_epoch;
            d.client_id = sb(&m.client_id);
            d.client_host = sb(&m.client_host);
            d.subscribed_topic_names = m.subscribed.iter().map(|n| TopicName(sb(n))).collect();
            d.assignment = describe_assignment(&m.assigned, registry);
            d.target_assignment = describe_assignment(
                group.target.get(&m.member_id).unwrap_or(&BTreeSet::new()),
                registry,
            );
            // v1: 1 = consumer (0 would be a classic member of an upgraded group).
            d.member_type = 1;
            d
        })
        .collect();
    if include_authorized_operations {
        // All of them; with an authorizer `authorize` narrows them to the principal's.
        out.authorized_operations = ResourceType::Group.all_operations();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_group_heartbeat_request;
    use kafka_protocol::protocol::{Decodable, Encodable};
    use uuid::Uuid;

    fn registry() -> TopicRegistry {
        let mut r = TopicRegistry::new("c".into());
        r.create_topic("orders", Uuid::from_u128(11), 2, &[])
            .unwrap();
        r
    }

    #[test]
    fn join_heartbeat_and_describe_round_trip() {
        let registry = registry();
        let mut request = ConsumerGroupHeartbeatRequest::default();
        request.group_id = GroupId(sb("g"));
        request.member_epoch = 0;
        request.rebalance_timeout_ms = 300_000;
        request.subscribed_topic_names = Some(vec![TopicName(sb("orders"))]);
        let mut owned = consumer_group_heartbeat_request::TopicPartitions::default();
        owned.topic_id = Uuid::from_u128(99); // unknown: dropped
        owned.partitions = vec![0];
        request.topic_partitions = Some(vec![owned]);
        // v1 requires the member id; v0 names the member.
        let input =
            heartbeat_in(&request, 0, &registry, "cli", "/127.0.0.1", || "gen".into()).unwrap();
        assert_eq!(input.member_id, "gen");
        assert_eq!(input.owned, Some(BTreeSet::new()));
        let mut group = Consumer848Group::default();
        let topics = topic_metadata(&registry);
        let result = group.heartbeat(&input, &topics, 0);
        let response = heartbeat_response(&result);
        for version in 0..=1 {
            let mut buf = bytes::BytesMut::new();
            response.encode(&mut buf, version).unwrap();
            let back = ConsumerGroupHeartbeatResponse::decode(&mut buf.freeze(), version).unwrap();
            assert_eq!(back.member_epoch, 1);
            let a = back.assignment.unwrap();
            assert_eq!(a.topic_partitions[0].partitions, vec![0, 1]);
        }
        let input = heartbeat_in(
            &request,
            1,
            &registry,
            "cli",
            "/127.0.0.1",
            || unreachable!(),
        )
        .unwrap();
        let err = group.heartbeat(&input, &topics, 0).unwrap_err();
        assert_eq!(heartbeat_response(&Err(err)).error_code, 42);

        let described = described_group("g", Some(&group), &registry, true);
        let mut response = ConsumerGroupDescribeResponse::default();
        response.groups = vec![described, described_group("nope", None, &registry, false)];
        for version in 0..=1 {
            let mut buf = bytes::BytesMut::new();
            response.encode(&mut buf, version).unwrap();
            let back = ConsumerGroupDescribeResponse::decode(&mut buf.freeze(), version).unwrap();
            assert_eq!(back.groups[0].group_state.as_str(), "Stable");
            assert_eq!(back.groups[0].assignor_name.as_str(), "uniform");
            let m = &back.groups[0].members[0];
            assert_eq!(
                m.assignment.topic_partitions[0].topic_name.as_str(),
                "orders"
            );
            assert_eq!(back.groups[1].error_code, 69);
        }
    }

    #[test]
    fn regex_subscriptions_are_refused() {
        let mut request = ConsumerGroupHeartbeatRequest::default();
        request.member_id = sb("m");
        request.subscribed_topic_regex = Some(sb("orders.*"));
        let err = heartbeat_in(&request, 1, &registry(), "", "", String::new).unwrap_err();
        assert_eq!(err.code(), 42);
    }
}

/// ConsumerGroupHeartbeat v0–1: on the group's shard (`group::ops::ConsumerHeartbeat`).
pub async fn handle_heartbeat<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    let r: ConsumerGroupHeartbeatRequest = match decode_counted(
        request,
        "owned partitions",
        REQUEST_PARTITIONS_MAX,
        |r: &ConsumerGroupHeartbeatRequest| {
            r.topic_partitions
                .iter()
                .flatten()
                .map(|t| t.partitions.len())
                .sum::<usize>()
                + r.subscribed_topic_names.as_ref().map_or(0, Vec::len)
        },
    ) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let group_id = r.group_id.0.to_string();
    let registry = bus.registry();
    let client_id = request.client_id.clone().unwrap_or_default();
    let host = format!("/{}", conn.peer_addr.ip());
    let answered = if group_id.is_empty() {
        Ok(Err(HeartbeatError::InvalidGroupId))
    } else {
        match heartbeat_in(
            &r,
            request.api_version,
            &registry,
            &client_id,
            &host,
            || {
                crate::shard::registry::random_uuid()
                    .map(|u| u.to_string())
                    .unwrap_or_else(|_| format!("member-{}", conn.id))
            },
        ) {
            Err(e) => Ok(Err(e)),
            Ok(input) => {
                let op = ConsumerHeartbeat {
                    group_id: group_id.clone(),
                    request: input,
                    topics: topic_metadata(&registry),
                };
                call_group(bus, &group_id, op).await
            }
        }
    };
    let response = match answered {
        Ok(result) => heartbeat_response(&result),
        Err(code) => failed_heartbeat(code),
    };
    respond(request, &response)
}

/// ConsumerGroupDescribe v0–1.
pub async fn handle_describe<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let r: ConsumerGroupDescribeRequest = match decode_counted(
        request,
        "groups",
        REQUEST_ENTITIES_MAX,
        |r: &ConsumerGroupDescribeRequest| r.group_ids.len(),
    ) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let registry = bus.registry();
    let mut response = ConsumerGroupDescribeResponse::default();
    for group_id in &r.group_ids {
        let id = group_id.0.to_string();
        let op = ConsumerDescribe {
            group_id: id.clone(),
        };
        let described = match call_group(bus, &id, op).await {
            Ok(found) => described_group(
                &id,
                found.as_ref(),
                &registry,
                r.include_authorized_operations,
            ),
            Err(code) => coded_group(&id, code),
        };
        response.groups.push(described);
    }
    respond(request, &response)
}

fn coded_group(group_id: &str, code: i16) -> consumer_group_describe_response::DescribedGroup {
    let mut out = consumer_group_describe_response::DescribedGroup::default();
    out.group_id = GroupId(sb(group_id));
    out.error_code = code;
    out.authorized_operations = OPERATIONS_NOT_REQUESTED;
    out
}
