//! DescribeCluster v0–2, DescribeProducers v0 and OffsetForLeaderEpoch v2–4: the admin APIs
//! that `kafka-cluster`/`Admin.describeCluster`, `kafka-transactions describe-producers` and
//! consumers validating their position call. Kafka 4.4's ranges.
//!
//! This broker is node [`BROKER_NODE_ID`], the controller, and the leader of every partition
//! at leader epoch 0 (what Metadata reports), so:
//! - DescribeCluster lists this one broker at the address the client connected to; the
//!   controller id is this broker (Kafka's brokers report one of themselves, never the KRaft
//!   controller). Asked for controllers (endpoint type 2) it answers Kafka's
//!   MISMATCHED_ENDPOINT_TYPE.
//! - DescribeProducers reports each partition's idempotent producers from its producer state
//!   (`producer_state`): producer id, epoch, last sequence and the max timestamp of its last
//!   batch, and the first offset of its transaction open in the partition (-1 if
//!   none); the coordinator epoch is -1 (not tracked per producer).
//! - OffsetForLeaderEpoch answers epoch 0 with the partition's end offset (its high watermark,
//!   from the partitions' shard, as ListOffsets latest) and any other epoch with Kafka's
//!   "undefined" (-1, -1); a current leader epoch above 0 is UNKNOWN_LEADER_EPOCH, one below 0
//!   other than -1 (no check) is FENCED_LEADER_EPOCH — all as Kafka 4.4 answers
//!   (measured on the Kafka 4.4 reference broker).
//!
//! Errors of unknown topics and partitions are UNKNOWN_TOPIC_OR_PARTITION per partition, as Kafka.

use super::{decode_counted, respond, Bus, ConnInfo, Outcome};
use crate::constants::{BROKER_NODE_ID, REQUEST_PARTITIONS_MAX};
use crate::model::{partition_shard, ShardId};
use crate::protocol::codec::{decode_body, Request};
use crate::shard::call::DescribeProducers;
use crate::shard::join::join_all;
use crate::shard::ops::{ListOffsetsOp, PartitionError, PartitionRef};
use crate::shard::producer_state::ProducerSnapshot;
use crate::shard::registry::TopicRegistry;
use kafka_protocol::messages::{
    describe_cluster_response, describe_producers_response, offset_for_leader_epoch_response,
    DescribeClusterRequest, DescribeClusterResponse, DescribeProducersRequest,
    DescribeProducersResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// The one leader epoch of every partition (what Metadata reports).
pub const LEADER_EPOCH: i32 = 0;

/// DescribeCluster endpoint types (KIP-919).
pub const ENDPOINT_TYPE_BROKER: i8 = 1;
pub const ENDPOINT_TYPE_CONTROLLER: i8 = 2;

use crate::security::authz::{ResourceType, OPERATIONS_NOT_REQUESTED};

/// Kafka's message for a DescribeProducers partition of an unknown topic.
const NOT_HOSTED: &str = "This server does not host this topic-partition.";

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// Builds the DescribeCluster response (pure, for tests).
pub fn describe_cluster_response(
    registry: &TopicRegistry,
    request: &DescribeClusterRequest,
    version: i16,
    conn: &ConnInfo,
) -> DescribeClusterResponse {
    let mut response = DescribeClusterResponse::default();
    response.cluster_authorized_operations = OPERATIONS_NOT_REQUESTED;
    let endpoint = if version >= 1 {
        request.endpoint_type
    } else {
        ENDPOINT_TYPE_BROKER
    };
    if version >= 1 {
        response.endpoint_type = endpoint;
    }
    if endpoint != ENDPOINT_TYPE_BROKER {
        response.error_code = ResponseError::MismatchedEndpointType.code();
        response.error_message = Some(sb(if endpoint == ENDPOINT_TYPE_CONTROLLER {
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
        } else {
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of an unknown type"
        }));
        response.controller_id = (-1).into();
        return response;
    }
    response.cluster_id = sb(&registry.cluster_id);
    response.controller_id = BROKER_NODE_ID.into();
    let mut broker = describe_cluster_response::DescribeClusterBroker::default();
    broker.broker_id = BROKER_NODE_ID.into();
    broker.host = sb(&conn.local_addr.ip().to_string());
    broker.port = i32::from(conn.local_addr.port());
    response.brokers = vec![broker];
    if request.include_cluster_authorized_operations {
        // All of them; with an authorizer `authorize` narrows them to the principal's.
        response.cluster_authorized_operations = ResourceType::Cluster.all_operations();
    }
    response
}

/// DescribeCluster v0–2.
pub fn handle_describe_cluster<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    let decoded: DescribeClusterRequest = match decode_body(request) {
        Ok(d) => d,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let response = describe_cluster_response(&bus.registry(), &decoded, request.api_version, conn);
    respond(request, &response)
}

/// Where each requested partition's answer comes from: a shard, or an error code at once.
enum Route {
    Shard(ShardId, PartitionRef),
    Error(i16, Option<&'static str>),
}

fn route(registry: &TopicRegistry, topic: &str, partition: i32, shards: usize) -> Route {
    match registry.topic(topic) {
        None => Route::Error(
            ResponseError::UnknownTopicOrPartition.code(),
            Some(NOT_HOSTED),
        ),
        Some(meta) if partition < 0 || partition >= meta.partitions => {
            Route::Error(ResponseError::UnknownTopicOrPartition.code(), None)
        }
        Some(meta) => Route::Shard(
            partition_shard(&meta.name, partition, shards),
            PartitionRef {
                topic: meta.name.clone(),
                topic_id: meta.id,
                partition,
            },
        ),
    }
}

fn producer_state(p: &ProducerSnapshot) -> describe_producers_response::ProducerState {
    let mut out = describe_producers_response::ProducerState::default();
    out.producer_id = p.producer_id.into();
    out.producer_epoch = i32::from(p.epoch);
    out.last_sequence = p.last_sequence;
    out.last_timestamp = p.last_timestamp;
    out.coordinator_epoch = -1;
    out.current_txn_start_offset = p.current_txn_start_offset;
    out
}

/// DescribeProducers v0.
pub async fn handle_describe_producers<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: DescribeProducersRequest = match decode_counted(
        request,
        "partitions",
        REQUEST_PARTITIONS_MAX,
        |r: &DescribeProducersRequest| r.topics.iter().map(|t| t.partition_indexes.len()).sum(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let registry = bus.registry();
    let mut answers: Vec<Vec<describe_producers_response::PartitionResponse>> = Vec::new();
    let mut by_shard: BTreeMap<ShardId, Vec<((usize, usize), PartitionRef)>> = BTreeMap::new();
    for (ti, topic) in decoded.topics.iter().enumerate() {
        let mut row = Vec::new();
        for (pi, &partition) in topic.partition_indexes.iter().enumerate() {
            let mut out = describe_producers_response::PartitionResponse::default();
            out.partition_index = partition;
            match route(&registry, &topic.name, partition, bus.shard_count()) {
                Route::Error(code, message) => {
                    out.error_code = code;
                    out.error_message = message.map(sb);
                }
                Route::Shard(shard, r) => by_shard.entry(shard).or_default().push(((ti, pi), r)),
            }
            row.push(out);
        }
        answers.push(row);
    }
    let groups: Vec<_> = by_shard.into_iter().collect();
    let calls = groups
        .iter()
        .map(|(shard, items)| {
            let partitions = items.iter().map(|(_, r)| r.clone()).collect();
            bus.call_op(*shard, DescribeProducers(partitions))
        })
        .collect();
    for ((_, items), reply) in groups.iter().zip(join_all(calls).await) {
        let results: Vec<Result<Vec<ProducerSnapshot>, i16>> = match reply {
            Ok(results) => results
                .into_iter()
                .map(|r| r.map_err(PartitionError::code))
                .collect(),
            Err(failure) => vec![Err(failure.code()); items.len()],
        };
        assert_eq!(results.len(), items.len());
        for (((ti, pi), _), result) in items.iter().zip(results) {
            let out = &mut answers[*ti][*pi];
            match result {
                Ok(producers) => {
                    out.active_producers = producers.iter().map(producer_state).collect()
                }
                Err(code) => out.error_code = code,
            }
        }
    }
    let mut response = DescribeProducersResponse::default();
    response.topics = decoded
        .topics
        .iter()
        .zip(answers)
        .map(|(topic, partitions)| {
            let mut t = describe_producers_response::TopicResponse::default();
            t.name = topic.name.clone();
            t.partitions = partitions;
            t
        })
        .collect();
    respond(request, &response)
}

/// The answer for one OffsetForLeaderEpoch partition given its end offset (pure, for tests):
/// `(error code, leader epoch, end offset)`.
pub fn epoch_end_offset(
    current_leader_epoch: i32,
    leader_epoch: i32,
    end_offset: i64,
) -> (i16, i32, i64) {
    if current_leader_epoch != -1 && current_leader_epoch > LEADER_EPOCH {
        return (ResponseError::UnknownLeaderEpoch.code(), -1, -1);
    }
    if current_leader_epoch != -1 && current_leader_epoch < LEADER_EPOCH {
        return (ResponseError::FencedLeaderEpoch.code(), -1, -1);
    }
    if leader_epoch == LEADER_EPOCH {
        (0, LEADER_EPOCH, end_offset)
    } else {
        // Above the latest epoch, or -1: Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
        (0, -1, -1)
    }
}

/// OffsetForLeaderEpoch v2–4 (consumers: replica id -1; a broker's replica id is accepted too).
pub async fn handle_offset_for_leader_epoch<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: OffsetForLeaderEpochRequest = match decode_counted(
        request,
        "partitions",
        REQUEST_PARTITIONS_MAX,
        |r: &OffsetForLeaderEpochRequest| r.topics.iter().map(|t| t.partitions.len()).sum(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let registry = bus.registry();
    let mut answers: Vec<Vec<offset_for_leader_epoch_response::EpochEndOffset>> = Vec::new();
    let mut by_shard: BTreeMap<ShardId, Vec<((usize, usize), PartitionRef)>> = BTreeMap::new();
    for (ti, topic) in decoded.topics.iter().enumerate() {
        let mut row = Vec::new();
        for (pi, p) in topic.partitions.iter().enumerate() {
            let mut out = offset_for_leader_epoch_response::EpochEndOffset::default();
            out.partition = p.partition;
            out.leader_epoch = -1;
            out.end_offset = -1;
            match route(&registry, &topic.topic, p.partition, bus.shard_count()) {
                Route::Error(code, _) => out.error_code = code,
                Route::Shard(shard, r) => {
                    let (code, epoch, _) =
                        epoch_end_offset(p.current_leader_epoch, p.leader_epoch, -1);
                    if code != 0 || epoch != LEADER_EPOCH {
                        out.error_code = code;
                    } else {
                        by_shard.entry(shard).or_default().push(((ti, pi), r));
                    }
                }
            }
            row.push(out);
        }
        answers.push(row);
    }
    let groups: Vec<_> = by_shard.into_iter().collect();
    let calls = groups
        .iter()
        .map(|(shard, items)| {
            let partitions = items
                .iter()
                .map(|(_, r)| (r.clone(), crate::shard::state::LATEST_TIMESTAMP))
                .collect();
            bus.call_op(
                *shard,
                ListOffsetsOp {
                    partitions,
                    read_committed: false,
                },
            )
        })
        .collect();
    for ((_, items), reply) in groups.iter().zip(join_all(calls).await) {
        match reply {
            Ok(listed) => {
                assert_eq!(listed.len(), items.len());
                for (((ti, pi), _), answer) in items.iter().zip(listed) {
                    let out = &mut answers[*ti][*pi];
                    match answer {
                        Err(e) => out.error_code = e.code(),
                        Ok(latest) => {
                            out.leader_epoch = LEADER_EPOCH;
                            out.end_offset = latest.offset;
                        }
                    }
                }
            }
            Err(failure) => {
                let code = failure.code();
                for ((ti, pi), _) in items {
                    answers[*ti][*pi].error_code = code;
                }
            }
        }
    }
    let mut response = OffsetForLeaderEpochResponse::default();
    response.topics = decoded
        .topics
        .iter()
        .zip(answers)
        .map(|(topic, partitions)| {
            let mut t = offset_for_leader_epoch_response::OffsetForLeaderTopicResult::default();
            t.topic = topic.topic.clone();
            t.partitions = partitions;
            t
        })
        .collect();
    respond(request, &response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn conn() -> ConnInfo {
        ConnInfo::new(
            "127.0.0.1:19092".parse().unwrap(),
            "127.0.0.1:50000".parse().unwrap(),
        )
    }

    #[test]
    fn describe_cluster_lists_this_broker_at_every_version() {
        let registry = TopicRegistry::new("cluster-x".into());
        for version in 0..=2 {
            let mut request = DescribeClusterRequest::default();
            request.include_cluster_authorized_operations = version == 1;
            if version >= 1 {
                request.endpoint_type = ENDPOINT_TYPE_BROKER;
            }
            let response = describe_cluster_response(&registry, &request, version, &conn());
            let mut buf = bytes::BytesMut::new();
            response.encode(&mut buf, version).unwrap();
            let back = DescribeClusterResponse::decode(&mut buf.freeze(), version).unwrap();
            assert_eq!(back.error_code, 0);
            assert_eq!(back.cluster_id.as_str(), "cluster-x");
            assert_eq!(back.brokers.len(), 1);
            assert_eq!(back.brokers[0].port, 19092);
            assert_eq!(back.brokers[0].host.as_str(), "127.0.0.1");
            // What Kafka 4.4 reports without an authorizer (ALTER, CREATE, DESCRIBE,
            // CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE), measured.
            let ops = if version == 1 { 0x1fa0 } else { i32::MIN };
            assert_eq!(back.cluster_authorized_operations, ops);
        }
        let mut request = DescribeClusterRequest::default();
        request.endpoint_type = ENDPOINT_TYPE_CONTROLLER;
        let response = describe_cluster_response(&registry, &request, 2, &conn());
        assert_eq!(response.error_code, 114);
        assert!(response.brokers.is_empty());
    }

    #[test]
    fn offset_for_leader_epoch_answers_as_kafka() {
        // Measured against Kafka 4.4: (current, requested) → (error, epoch, end offset).
        assert_eq!(epoch_end_offset(-1, 0, 3), (0, 0, 3));
        assert_eq!(epoch_end_offset(0, 0, 3), (0, 0, 3));
        assert_eq!(epoch_end_offset(-1, 5, 3), (0, -1, -1));
        assert_eq!(epoch_end_offset(-1, -1, 3), (0, -1, -1));
        assert_eq!(epoch_end_offset(3, 0, 3), (75, -1, -1));
        assert_eq!(epoch_end_offset(-5, 0, 3), (74, -1, -1));
    }
}
