//! TxnShareAcknowledge (API key 93, KIP-1289's draft; `schemas/txn-share-acknowledge.md`): a
//! share-group member's acknowledgements staged into a producer transaction.
//!
//! The request goes to the partitions' shards: each partition's records, ACQUIRED by MemberId,
//! become LOCKED by the producer's transaction (`#producer.{ProducerId}.{ProducerEpoch}`,
//! `crate::producer_txn::share`), all-or-nothing per partition, and the answer is sent once the locks
//! are durable. The transaction's end resolves them: the coordinator's `WriteTxnMarkers` to each
//! partition of the transaction commits (ACKNOWLEDGED / ARCHIVED) or aborts (AVAILABLE, no
//! delivery attempt used) them. The input partitions reach the transaction's partitions the way
//! any partition does: the producer adds them with AddPartitionsToTxn before it acknowledges
//! (`client::producer_txn`), so the coordinator's markers reach them; a partition without
//! transactional data gets no control batch.
//!
//! Errors (Kafka's codes): top level INVALID_REQUEST (42) for an empty GroupId or MemberId or a
//! negative ProducerId / ProducerEpoch; per partition UNKNOWN_TOPIC_ID (100),
//! UNKNOWN_TOPIC_OR_PARTITION (3), INVALID_REQUEST for an acknowledge type other than ACCEPT (1)
//! or REJECT (3) or a bad range, INVALID_RECORD_STATE (121) for offsets not ACQUIRED by the
//! member, INVALID_PRODUCER_EPOCH (47) when the producer holds locks there with a newer epoch.
//!
//! Checked with the transaction coordinator first (KIP-890's verification, as a partition leader
//! verifies a transactional produce: `PtxnOp::Verify`, AddPartitionsToTxn verifyOnly's check, on
//! the transactional id's shard): the id must exist with ProducerId (else
//! INVALID_PRODUCER_ID_MAPPING 49, top level), ProducerEpoch must be its current epoch (else
//! INVALID_PRODUCER_EPOCH 47, top level: a fenced or timed-out producer; Kafka's partition leader
//! answers a failed verification's PRODUCER_FENCED so), and each partition must be in its
//! ONGOING transaction (else INVALID_TXN_STATE 48 for that partition, which is then left alone):
//! so every lock belongs to a transaction whose markers will reach the partition. A null or
//! empty TransactionalId is INVALID_REQUEST. Between the check and the lock the transaction can
//! only end by the coordinator's own abort (timeout, fencing), whose marker carries a bumped
//! epoch and raises the partition's producer fence: a lock arriving after it is refused
//! (INVALID_PRODUCER_EPOCH, `ptxn::share::check_epoch`).
//!
//! Deviation from the draft: MemberEpoch is not checked (the member-id check on every offset
//! is: only the member holding a record's acquisition lock can lock it).

use super::{respond, Bus, Outcome};
use crate::constants::{REQUEST_PARTITIONS_MAX, TXN_TRANSACTIONAL_ID_BYTES_MAX};
use crate::model::{group_shard, partition_shard, ShardId};
use crate::producer_txn::coordinator::CoordError;
use crate::producer_txn::share::{ack_batch, ProducerLock};
use crate::protocol::codec::{decode_body, Request};
use crate::protocol::producer_txn_share::{
    TxnShareAcknowledgePartitionResult, TxnShareAcknowledgeRequest, TxnShareAcknowledgeResponse,
    TxnShareAcknowledgeTopicResult,
};
use crate::shard::call::{Ptxn, Txn};
use crate::shard::ops::{PartitionRef, PtxnOp, ShareAckResult, TxnOp};

/// A verification's answer: a verdict per partition, or the transaction's error.
type Verified = Result<Vec<Result<(), CoordError>>, CoordError>;
use crate::share::AckBatch;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// One partition of the request: where it is and what to lock, or its error.
type Target = Result<(ShardId, PartitionRef, Vec<AckBatch>), i16>;

/// The top-level code of a transaction the coordinator refused as a whole (module docs): a
/// fenced epoch is INVALID_PRODUCER_EPOCH, as a partition leader answers a failed verification.
fn verification_code(e: &CoordError) -> i16 {
    match e {
        CoordError::ProducerFenced => ResponseError::InvalidProducerEpoch.code(),
        other => other.code(),
    }
}

/// TxnShareAcknowledge v0.
pub async fn handle<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let req: TxnShareAcknowledgeRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let count: usize = req.topics.iter().map(|t| t.partitions.len()).sum();
    if let Err(refused) = super::check_count("partitions", count, REQUEST_PARTITIONS_MAX) {
        return refused;
    }
    let mut response = TxnShareAcknowledgeResponse::default();
    let owner = ProducerLock::new(req.producer_id, req.producer_epoch);
    let transactional_id = req.transactional_id.clone().unwrap_or_default();
    let owner = match owner {
        Some(owner)
            if !req.group_id.is_empty()
                && !req.member_id.is_empty()
                && !transactional_id.is_empty()
                && transactional_id.len() <= TXN_TRANSACTIONAL_ID_BYTES_MAX =>
        {
            owner
        }
        _ => {
            response.error_code = ResponseError::InvalidRequest.code();
            return respond(request, &response);
        }
    };
    let registry = bus.registry();
    let shards = bus.shard_count();
    let mut parts: Vec<(uuid::Uuid, i32, Target)> = Vec::with_capacity(count);
    for t in &req.topics {
        for p in &t.partitions {
            let target = match registry.topic_by_id(&t.topic_id) {
                None => Err(ResponseError::UnknownTopicId.code()),
                Some(meta) if p.partition_index < 0 || p.partition_index >= meta.partitions => {
                    Err(ResponseError::UnknownTopicOrPartition.code())
                }
                Some(meta) => p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| ack_batch(b.first_offset, b.last_offset, b.acknowledge_type))
                    .collect::<Result<Vec<AckBatch>, _>>()
                    .map_err(|e| e.code())
                    .and_then(|batches| {
                        if batches.is_empty() {
                            return Err(ResponseError::InvalidRequest.code());
                        }
                        Ok((
                            partition_shard(&meta.name, p.partition_index, shards),
                            PartitionRef {
                                topic: meta.name.clone(),
                                topic_id: t.topic_id,
                                partition: p.partition_index,
                            },
                            batches,
                        ))
                    }),
            };
            parts.push((t.topic_id, p.partition_index, target));
        }
    }
    // The coordinator's word: the producer's ongoing transaction holds these partitions.
    let to_verify: Vec<usize> = (0..parts.len()).filter(|i| parts[*i].2.is_ok()).collect();
    if !to_verify.is_empty() {
        let partitions = to_verify
            .iter()
            .map(|i| match &parts[*i].2 {
                Ok((_, r, _)) => (r.topic.clone(), r.partition),
                Err(_) => unreachable!("filtered above"),
            })
            .collect();
        let op = PtxnOp::Verify {
            transactional_id: transactional_id.clone(),
            producer_id: req.producer_id,
            producer_epoch: req.producer_epoch,
            partitions,
        };
        let shard = group_shard(&transactional_id, shards);
        let verified = bus.call_op(shard, Ptxn::<Verified>::new(op)).await;
        match verified {
            Ok(Ok(each)) => {
                assert_eq!(each.len(), to_verify.len(), "one verdict per partition");
                for (i, verdict) in to_verify.iter().zip(each) {
                    if let Err(e) = verdict {
                        parts[*i].2 = Err(e.code());
                    }
                }
            }
            Ok(Err(e)) => {
                response.error_code = verification_code(&e);
                return respond(request, &response);
            }
            Err(failure) => {
                response.error_code = failure.code();
                return respond(request, &response);
            }
        }
    }
    let mut results: Vec<i16> = parts
        .iter()
        .map(|(_, _, target)| match target {
            Ok(_) => 0,
            Err(code) => *code,
        })
        .collect();

    let mut by_shard: BTreeMap<ShardId, Vec<usize>> = BTreeMap::new();
    for (i, (_, _, target)) in parts.iter().enumerate() {
        if let Ok((shard, _, _)) = target {
            by_shard.entry(*shard).or_default().push(i);
        }
    }
    let shard_list: Vec<ShardId> = by_shard.keys().copied().collect();
    let calls = by_shard
        .iter()
        .map(|(shard, indexes)| {
            let partitions = indexes
                .iter()
                .filter_map(|i| match &parts[*i].2 {
                    Ok((_, r, batches)) => Some((r.clone(), batches.clone())),
                    Err(_) => None,
                })
                .collect();
            let op = TxnOp::ProducerLock {
                group_id: req.group_id.clone(),
                member_id: req.member_id.clone(),
                owner,
                partitions,
            };
            bus.call_op(*shard, Txn::<Vec<Result<u64, ShareAckResult>>>::new(op))
        })
        .collect();
    for (shard, reply) in shard_list
        .iter()
        .zip(crate::shard::join::join_all(calls).await)
    {
        let indexes = &by_shard[shard];
        match reply {
            Ok(outcomes) => {
                for (i, outcome) in indexes.iter().zip(outcomes) {
                    if let Err(refused) = outcome {
                        results[*i] = refused.error_code();
                    }
                }
            }
            Err(failure) => {
                let code = failure.code();
                for i in indexes {
                    results[*i] = code;
                }
            }
        }
    }

    let mut by_topic: BTreeMap<uuid::Uuid, Vec<TxnShareAcknowledgePartitionResult>> =
        BTreeMap::new();
    for ((topic_id, partition_index, _), error_code) in parts.iter().zip(results) {
        by_topic
            .entry(*topic_id)
            .or_default()
            .push(TxnShareAcknowledgePartitionResult {
                partition_index: *partition_index,
                error_code,
            });
    }
    response.topics = by_topic
        .into_iter()
        .map(|(topic_id, partitions)| TxnShareAcknowledgeTopicResult {
            topic_id,
            partitions,
        })
        .collect();
    respond(request, &response)
}
