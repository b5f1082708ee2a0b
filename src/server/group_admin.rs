//! Consumer-group administration, what `kafka-consumer-groups` needs beside
//! ListGroups (`share_admin`, every group type) and DeleteGroups (`delete_admin`, consumer and
//! share groups): DescribeGroups v0–6 (15) and OffsetDelete v0 (47). Offsets are reset with
//! OffsetCommit (`group_api`), as Kafka's tool does.
//!
//! DescribeGroups answers as Kafka 4.4 does (compared with the reference broker): a group that
//! does not exist, or is not a classic group, is reported in state `Dead`, with no error up to v5
//! and GROUP_ID_NOT_FOUND ("Group G not found." / "Group G is not a classic group.") from v6;
//! members' metadata and assignments, and the protocol, only when the group is Stable.

use super::group_api::{call_group, sb};
use super::{decode_counted, respond, Bus, Outcome};
use crate::constants::{REQUEST_ENTITIES_MAX, REQUEST_PARTITIONS_MAX};
use crate::group::ops::{DeleteOffsets, DescribeGroup, GroupDescription};
use crate::group::GroupError;
use crate::protocol::codec::Request;
use kafka_protocol::messages::{
    describe_groups_response, offset_delete_response, DescribeGroupsRequest,
    DescribeGroupsResponse, GroupId, OffsetDeleteRequest, OffsetDeleteResponse,
};
use kafka_protocol::ResponseError;

use crate::security::authz::{ResourceType, OPERATIONS_NOT_REQUESTED};

/// One DescribeGroups answer from what the group's shard returned.
pub fn described_group(
    group_id: &str,
    found: Result<Option<GroupDescription>, i16>,
    api_version: i16,
    include_operations: bool,
) -> describe_groups_response::DescribedGroup {
    let mut out = describe_groups_response::DescribedGroup::default();
    out.group_id = GroupId(sb(group_id));
    out.authorized_operations = OPERATIONS_NOT_REQUESTED;
    let dead = |out: &mut describe_groups_response::DescribedGroup, message: String| {
        out.group_state = sb("Dead");
        if api_version >= 6 {
            out.error_code = ResponseError::GroupIdNotFound.code();
            out.error_message = Some(sb(&message));
        }
    };
    match found {
        Err(code) => out.error_code = code,
        Ok(None) => dead(&mut out, format!("Group {group_id} not found.")),
        Ok(Some(d)) if d.group_type != "Classic" => dead(
            &mut out,
            format!("Group {group_id} is not a classic group."),
        ),
        Ok(Some(d)) => {
            out.group_state = sb(&d.state);
            out.protocol_type = sb(&d.protocol_type);
            out.protocol_data = sb(&d.protocol);
            out.members = d
                .members
                .iter()
                .map(|m| {
                    let mut member = describe_groups_response::DescribedGroupMember::default();
                    member.member_id = sb(&m.member_id);
                    member.group_instance_id = m.group_instance_id.as_deref().map(sb);
                    member.client_id = sb(&m.client_id);
                    member.client_host = sb(&m.client_host);
                    member.member_metadata = m.metadata.clone();
                    member.member_assignment = m.assignment.clone();
                    member
                })
                .collect();
        }
    }
    // As Kafka: every group answered without an error (a dead one before v6 included) carries
    // the operations, all of them here; with an authorizer `authorize` narrows them to the
    // principal's.
    if include_operations && out.error_code == 0 {
        out.authorized_operations = ResourceType::Group.all_operations();
    }
    out
}

/// DescribeGroups v0–6.
pub async fn handle_describe_groups<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let r: DescribeGroupsRequest = match decode_counted(
        request,
        "groups",
        REQUEST_ENTITIES_MAX,
        |r: &DescribeGroupsRequest| r.groups.len(),
    ) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let mut response = DescribeGroupsResponse::default();
    for g in &r.groups {
        let group_id = g.0.to_string();
        let found = if group_id.is_empty() {
            Ok(None)
        } else {
            let op = DescribeGroup {
                group_id: group_id.clone(),
            };
            call_group(bus, &group_id, op).await
        };
        response.groups.push(described_group(
            &group_id,
            found,
            request.api_version,
            r.include_authorized_operations,
        ));
    }
    respond(request, &response)
}

/// OffsetDelete v0.
pub async fn handle_offset_delete<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let r: OffsetDeleteRequest = match decode_counted(
        request,
        "partitions",
        REQUEST_PARTITIONS_MAX,
        |r: &OffsetDeleteRequest| r.topics.iter().map(|t| t.partitions.len().max(1)).sum(),
    ) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let group_id = r.group_id.0.to_string();
    let registry = bus.registry();
    let mut response = OffsetDeleteResponse::default();
    if group_id.is_empty() {
        response.error_code = ResponseError::InvalidGroupId.code();
        return respond(request, &response);
    }
    // Partitions of known topics go to the group; others are UNKNOWN_TOPIC_OR_PARTITION.
    let mut sent = Vec::new();
    for t in &r.topics {
        if registry.topic(&t.name.0).is_some() {
            for p in &t.partitions {
                sent.push((t.name.0.to_string(), p.partition_index));
            }
        }
    }
    let op = DeleteOffsets {
        group_id: group_id.clone(),
        partitions: sent.clone(),
    };
    let codes = match call_group(bus, &group_id, op).await {
        Ok(Ok(results)) => {
            debug_assert_eq!(results.len(), sent.len(), "one result per partition");
            results
        }
        Ok(Err(e)) => {
            response.error_code = e.code();
            return respond(request, &response);
        }
        Err(code) => {
            response.error_code = code;
            return respond(request, &response);
        }
    };
    let mut codes = codes.into_iter();
    response.topics = r
        .topics
        .iter()
        .map(|t| {
            let known = registry.topic(&t.name.0).is_some();
            let mut topic = offset_delete_response::OffsetDeleteResponseTopic::default();
            topic.name = t.name.clone();
            topic.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut out = offset_delete_response::OffsetDeleteResponsePartition::default();
                    out.partition_index = p.partition_index;
                    out.error_code = if known {
                        codes.next().map_or(
                            ResponseError::UnknownServerError.code(),
                            GroupError::code_of,
                        )
                    } else {
                        ResponseError::UnknownTopicOrPartition.code()
                    };
                    out
                })
                .collect();
            topic
        })
        .collect();
    respond(request, &response)
}
