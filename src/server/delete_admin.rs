//! DeleteRecords v0–2 (21) and DeleteGroups v0–3 (42; v3, Kafka 4.4, adds a per-group
//! ErrorMessage; its codec is generated, `protocol::generated::delete_groups_*`).
//!
//! DeleteRecords: each partition's shard moves its log start (`ShardState::delete_records`,
//! Kafka's rules: -1 means the high watermark, an offset below 0 or past the high watermark is
//! OFFSET_OUT_OF_RANGE, one at or below the log start changes nothing), lets every share
//! group's state of the partition follow the new start (`ShardState::share_log_start_moved`),
//! and answers once the new start (its log-start checkpoint) and the share state are durable.
//! The answer's low watermark is the log start after the call.
//!
//! DeleteGroups: Lockstep has share groups only. A group with members is refused with
//! NON_EMPTY_GROUP; a group nobody knows (no membership on its shard, no share-partition
//! state on any shard) gets GROUP_ID_NOT_FOUND, as Kafka answers for an unknown group, and so
//! does an empty id (Kafka 4.4 on the wire: 69, not INVALID_GROUP_ID). Otherwise the group's shard forgets its membership (checked and
//! removed in one step there, so a member cannot join in between), and every shard deletes
//! its share-partition state (journalled tombstones, answered once durable) — what
//! `kafka-share-groups --delete` does on Kafka.

use super::{check_count, respond, Bus, Outcome};
use crate::constants::{DELETE_RECORDS_WAIT_MS_MIN, REQUEST_ENTITIES_MAX, REQUEST_PARTITIONS_MAX};
use crate::model::{group_shard, partition_shard, ShardId};
use crate::protocol::codec::Request;
use crate::protocol::generated::delete_groups_request::DeleteGroupsRequest;
use crate::protocol::generated::delete_groups_response::{
    DeletableGroupResult, DeleteGroupsResponse,
};
use crate::shard::call::{DeleteRecords, DeleteShareGroup, DeleteShareOffsets};
use crate::shard::join::join_all;
use crate::shard::ops::{DeleteRecordsError, PartitionRef, ShareAckResult, SharePartitionError};
use crate::shard::registry::TopicRegistry;
use crate::shard::share_group::GroupDeletion;
use kafka_protocol::messages::{
    delete_records_response, DeleteRecordsRequest, DeleteRecordsResponse,
};
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// Where each partition of a DeleteRecords request goes: per shard, the (topic index,
/// partition index) positions in the request and the ops' entries. Partitions the registry
/// does not have are answered at once with UNKNOWN_TOPIC_OR_PARTITION.
pub fn route_delete_records(
    registry: &TopicRegistry,
    request: &[(String, Vec<(i32, i64)>)],
    shard_count: usize,
) -> BTreeMap<ShardId, Vec<((usize, usize), (PartitionRef, i64))>> {
    let mut routes: BTreeMap<ShardId, Vec<((usize, usize), (PartitionRef, i64))>> = BTreeMap::new();
    for (ti, (topic, partitions)) in request.iter().enumerate() {
        let Some(meta) = registry.topic(topic) else {
            continue;
        };
        for (pi, (partition, offset)) in partitions.iter().enumerate() {
            if !(0..meta.partitions).contains(partition) {
                continue;
            }
            let r = PartitionRef {
                topic: topic.clone(),
                topic_id: meta.id,
                partition: *partition,
            };
            routes
                .entry(partition_shard(topic, *partition, shard_count))
                .or_default()
                .push(((ti, pi), (r, *offset)));
        }
    }
    routes
}

/// DeleteRecords v0–2.
pub async fn handle_delete_records<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "topics",
        REQUEST_ENTITIES_MAX,
        |d: &DeleteRecordsRequest| d.topics.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let partition_count: usize = decoded.topics.iter().map(|t| t.partitions.len()).sum();
    if let Err(refused) = check_count("partitions", partition_count, REQUEST_PARTITIONS_MAX) {
        return refused;
    }
    let asked: Vec<(String, Vec<(i32, i64)>)> = decoded
        .topics
        .iter()
        .map(|t| {
            (
                t.name.to_string(),
                t.partitions
                    .iter()
                    .map(|p| (p.partition_index, p.offset))
                    .collect(),
            )
        })
        .collect();
    // Per partition: its error code and low watermark (-1 on error). Every partition starts as
    // unknown; the shards' answers overwrite what they serve.
    let mut answers: Vec<Vec<(i16, i64)>> = asked
        .iter()
        .map(|(_, partitions)| {
            vec![(ResponseError::UnknownTopicOrPartition.code(), -1); partitions.len()]
        })
        .collect();
    let timeout_ms = (decoded.timeout_ms.max(0) as u64).max(DELETE_RECORDS_WAIT_MS_MIN);
    let routes = route_delete_records(&bus.registry(), &asked, bus.shard_count());
    let calls = routes
        .iter()
        .map(|(shard, entries)| {
            bus.call_op(
                *shard,
                DeleteRecords {
                    partitions: entries.iter().map(|(_, op)| op.clone()).collect(),
                    timeout_ms,
                },
            )
        })
        .collect();
    for ((_, entries), reply) in routes.iter().zip(join_all(calls).await) {
        let results: Vec<(i16, i64)> = match reply {
            Ok(results) if results.len() == entries.len() => results
                .into_iter()
                .map(|r| match r {
                    Ok(low_watermark) => (0, low_watermark),
                    Err(e) => (DeleteRecordsError::code(e), -1),
                })
                .collect(),
            Err(failure) => vec![(failure.code(), -1); entries.len()],
            Ok(_) => vec![(ResponseError::UnknownServerError.code(), -1); entries.len()],
        };
        for (((ti, pi), _), result) in entries.iter().zip(results) {
            answers[*ti][*pi] = result;
        }
    }
    let mut response = DeleteRecordsResponse::default();
    response.topics = decoded
        .topics
        .iter()
        .zip(answers)
        .map(|(t, results)| {
            let mut out = delete_records_response::DeleteRecordsTopicResult::default();
            out.name = t.name.clone();
            out.partitions = t
                .partitions
                .iter()
                .zip(results)
                .map(|(p, (error_code, low_watermark))| {
                    let mut rp = delete_records_response::DeleteRecordsPartitionResult::default();
                    rp.partition_index = p.partition_index;
                    rp.low_watermark = low_watermark;
                    rp.error_code = error_code;
                    rp
                })
                .collect();
            out
        })
        .collect();
    respond(request, &response)
}

/// Deletes one consumer group (its committed offsets; NON_EMPTY_GROUP while it has members) or
/// share group (see the module docs); the Kafka error code, 0 if deleted.
async fn delete_group<B: Bus>(bus: &B, group_id: &str) -> i16 {
    if group_id.is_empty() {
        return ResponseError::GroupIdNotFound.code();
    }
    let op = crate::group::ops::DeleteGroup {
        group_id: group_id.to_string(),
    };
    match super::group_api::call_group(bus, group_id, op).await {
        Ok(Ok(true)) => return 0,
        Ok(Ok(false)) => {}
        Ok(Err(e)) => return e.code(),
        Err(code) => return code,
    }
    let shard = group_shard(group_id, bus.shard_count());
    let deleted = DeleteShareGroup {
        group_id: group_id.to_string(),
    };
    let coordinated = match bus.call_op(shard, deleted).await {
        Ok(GroupDeletion::Deleted) => true,
        Ok(GroupDeletion::NotHere) => false,
        Ok(GroupDeletion::HasMembers) => return ResponseError::NonEmptyGroup.code(),
        Err(failure) => return failure.code(),
    };
    // The topics the group holds share-partition state for, on any shard.
    let topic_ids: BTreeSet<Uuid> = match super::share_admin::all_offsets(bus, group_id).await {
        Ok(offsets) => offsets.iter().map(|o| o.partition.topic_id).collect(),
        Err(code) => return code,
    };
    if topic_ids.is_empty() {
        return if coordinated {
            0
        } else {
            ResponseError::GroupIdNotFound.code()
        };
    }
    let topic_ids: Vec<Uuid> = topic_ids.into_iter().collect();
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
    let mut code = 0;
    for reply in join_all(calls).await {
        let results: Vec<ShareAckResult> = match reply {
            Ok(results) => results,
            Err(failure) => vec![ShareAckResult::error(
                SharePartitionError::Call(failure),
                "",
            )],
        };
        // Records still in flight (LOCKED by a transaction of the empty group) keep their
        // partition's state: NON_EMPTY_GROUP, as for members.
        if let Some(failed) = results.iter().find(|r| !r.is_ok()) {
            code = failed.error_code();
        }
    }
    code
}

/// DeleteGroups v0–3 (share groups only; see the module docs). v3's ErrorMessage stays null,
/// as Kafka 4.4 answers for these errors.
pub async fn handle_delete_groups<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "groups",
        REQUEST_ENTITIES_MAX,
        |d: &DeleteGroupsRequest| d.groups_names.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let mut response = DeleteGroupsResponse::default();
    for group in &decoded.groups_names {
        response.results.push(DeletableGroupResult {
            group_id: group.clone(),
            error_code: delete_group(bus, group).await,
            error_message: None,
        });
    }
    respond(request, &response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_records_routes_known_partitions_to_their_shards() {
        let mut registry = TopicRegistry::new("c".into());
        registry
            .create_topic("t", Uuid::from_u128(7), 4, &[])
            .unwrap();
        let asked = vec![
            ("t".to_string(), vec![(0, 5), (3, -1), (4, 1), (-1, 0)]),
            ("nope".to_string(), vec![(0, 1)]),
        ];
        let routes = route_delete_records(&registry, &asked, 2);
        let mut seen: Vec<(usize, usize)> = routes
            .iter()
            .flat_map(|(shard, entries)| {
                entries.iter().map(move |((ti, pi), (r, _))| {
                    assert_eq!(*shard, partition_shard("t", r.partition, 2));
                    assert_eq!(r.topic_id, Uuid::from_u128(7));
                    (*ti, *pi)
                })
            })
            .collect();
        seen.sort();
        // Partitions 4 and -1 and the unknown topic are not routed (answered as unknown).
        assert_eq!(seen, vec![(0, 0), (0, 1)]);
    }
}
