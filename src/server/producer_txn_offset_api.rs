//! TxnOffsetCommit v0–4 (API key 28): offsets a transactional producer commits for a
//! consumer group inside its transaction (`send_offsets_to_transaction`).
//!
//! The request goes to the group's shard as [`TxnCommitOffsets`]: the group fields are
//! validated as Kafka does (v3+ carry member id, generation and instance id), and the offsets
//! are kept pending for the producer id (`crate::group::producer_txn_offsets`), journalled, and answered
//! once durable. They become committed (or are dropped) when the transaction coordinator sends
//! the group's shard the transaction's marker (`ShardOp::GroupTxnMarker`); until then OffsetFetch
//! does not show them, and OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for
//! their partitions. Topic names are checked against the registry snapshot
//! (UNKNOWN_TOPIC_OR_PARTITION).
//!
//! Not served: v5 (transaction version 2, KIP-890 part 2, where TxnOffsetCommit also adds the
//! group to the transaction) and v6 (topic ids). The producer epoch is not checked here (Kafka
//! 4.4 verifies it with the transaction coordinator, KIP-890 part 1).

use super::group_api::call_group;
use super::{decode_counted, respond, Bus, Outcome};
use crate::constants::REQUEST_PARTITIONS_MAX;
use crate::group::ops::TxnCommitOffsets;
use crate::group::{CommitPartition, GroupError};
use crate::protocol::codec::Request;
use kafka_protocol::messages::{
    txn_offset_commit_response, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;

/// TxnOffsetCommit.
pub async fn handle_txn_offset_commit<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let r: TxnOffsetCommitRequest = match decode_counted(
        request,
        "partitions",
        REQUEST_PARTITIONS_MAX,
        |r: &TxnOffsetCommitRequest| r.topics.iter().map(|t| t.partitions.len().max(1)).sum(),
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
                        retention_time_ms: -1,
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
        let op = TxnCommitOffsets {
            group_id: group_id.clone(),
            producer_id: r.producer_id.0,
            member_id: r.member_id.to_string(),
            group_instance_id: r.group_instance_id.as_ref().map(|s| s.to_string()),
            generation_id: r.generation_id,
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
    let mut response = TxnOffsetCommitResponse::default();
    response.topics = r
        .topics
        .iter()
        .zip(codes)
        .map(|(t, codes)| {
            let mut topic = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
            topic.name = t.name.clone();
            topic.partitions = t
                .partitions
                .iter()
                .zip(codes)
                .map(|(p, code)| {
                    let mut out =
                        txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
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
