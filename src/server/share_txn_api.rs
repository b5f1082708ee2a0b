//! The share-transaction APIs (keys 1000–1005, `schemas/share-transactions.md`).
//!
//! Every call goes to the group's shard, the transaction coordinator, once. A transactional
//! acknowledgement is one `TxnOp::Acknowledge`: the coordinator registers its partitions (the
//! transaction must be ONGOING and the member must belong to the group), has the partitions'
//! shards lock the records, and completes it; prepare waits for acknowledgements in flight.
//! Prepare is answered once the participants' locks and the PREPARE record are durable;
//! commit and abort once the decision record is (`shard::share_txn` strings the steps).
//!
//! Deviation from the wire spec: GROUP_ID_NOT_FOUND is not used. A share group exists once it
//! is named (as Kafka creates groups on first use), so a framework's coordinator may begin a
//! checkpoint's transaction before any worker joined; operations on ids a group never had
//! answer TRANSACTIONAL_ID_NOT_FOUND.

use super::{respond, Bus, Outcome};
use crate::constants::REQUEST_PARTITIONS_MAX;
use crate::model::group_shard;
use crate::model::TopicPartition;
use crate::protocol::apis;
use crate::protocol::codec::{decode_body, Request};
use crate::protocol::share_txn::{
    PartitionData, ShareAbortTransactionRequest, ShareAbortTransactionResponse,
    ShareAcknowledgeTransactionalRequest, ShareAcknowledgeTransactionalResponse,
    ShareAcknowledgeTransactionalTopicResponse, ShareBeginTransactionRequest,
    ShareBeginTransactionResponse, ShareCommitTransactionRequest, ShareCommitTransactionResponse,
    ShareListTransactionsRequest, ShareListTransactionsResponse, SharePrepareTransactionRequest,
    SharePrepareTransactionResponse, ShareTransaction, TransactionPartition,
};
use crate::shard::call::{Op, Txn};
use crate::shard::ops::{PartitionRef, ShareTxnError, TxnAckError, TxnAnswer, TxnOp};
use crate::share::AckBatch;
use crate::share_txn::TxnState;
use crate::share_txn::{TxnError, TxnRecord};
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// Runs `op` on the group's shard (the coordinator), answered with `R` (`shard::call::Txn`);
/// a failed call is an error answer with its Kafka code.
async fn coordinator<B: Bus, R>(bus: &B, group_id: &str, op: TxnOp) -> Result<R, TxnAnswer>
where
    Txn<R>: Op<Reply = R>,
{
    let shard = group_shard(group_id, bus.shard_count());
    bus.call_op(shard, Txn::new(op)).await.map_err(|failure| {
        let message = format!("the coordinator shard could not run the operation: {failure:?}");
        TxnAnswer::error(ShareTxnError::Call(failure), message, TxnState::Empty)
    })
}

/// Runs an op the coordinator answers with a [`TxnAnswer`] (its error answer if it failed).
async fn answer<B: Bus>(bus: &B, group_id: &str, op: TxnOp) -> TxnAnswer {
    coordinator(bus, group_id, op)
        .await
        .unwrap_or_else(|failed| failed)
}

fn invalid_group(group_id: &str) -> Option<TxnAnswer> {
    group_id.is_empty().then(|| {
        TxnAnswer::error(
            ShareTxnError::Txn(TxnError::InvalidRequest {
                reason: "GroupId is empty".to_string(),
            }),
            "GroupId is empty",
            TxnState::Empty,
        )
    })
}

/// ShareBeginTransaction v0.
pub async fn handle_begin<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let req: ShareBeginTransactionRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let answer = match invalid_group(&req.group_id) {
        Some(refused) => refused,
        None => {
            answer(
                bus,
                &req.group_id,
                TxnOp::Begin {
                    group_id: req.group_id.clone(),
                    transaction_id: req.transaction_id.clone(),
                    timeout_ms: req.timeout_ms,
                },
            )
            .await
        }
    };
    respond(
        request,
        &ShareBeginTransactionResponse {
            error_code: answer.error_code(),
            error_message: answer.error_message,
            transaction_state: answer.state.into(),
            timeout_ms: answer.timeout_ms as i64,
            ..Default::default()
        },
    )
}

/// SharePrepareTransaction, ShareCommitTransaction, ShareAbortTransaction v0.
pub async fn handle_outcome<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let (group_id, transaction_id) = match request.spec.key {
        apis::SHARE_PREPARE_TRANSACTION => {
            match decode_body::<SharePrepareTransactionRequest>(request) {
                Ok(r) => (r.group_id, r.transaction_id),
                Err(e) => return Outcome::Close(e.to_string()),
            }
        }
        apis::SHARE_COMMIT_TRANSACTION => {
            match decode_body::<ShareCommitTransactionRequest>(request) {
                Ok(r) => (r.group_id, r.transaction_id),
                Err(e) => return Outcome::Close(e.to_string()),
            }
        }
        _ => match decode_body::<ShareAbortTransactionRequest>(request) {
            Ok(r) => (r.group_id, r.transaction_id),
            Err(e) => return Outcome::Close(e.to_string()),
        },
    };
    let answer = match invalid_group(&group_id) {
        Some(refused) => refused,
        None => {
            let op = match request.spec.key {
                apis::SHARE_PREPARE_TRANSACTION => TxnOp::Prepare {
                    group_id: group_id.clone(),
                    transaction_id,
                },
                apis::SHARE_COMMIT_TRANSACTION => TxnOp::Commit {
                    group_id: group_id.clone(),
                    transaction_id,
                },
                _ => TxnOp::Abort {
                    group_id: group_id.clone(),
                    transaction_id,
                },
            };
            answer(bus, &group_id, op).await
        }
    };
    let state: i8 = answer.state.into();
    match request.spec.key {
        apis::SHARE_PREPARE_TRANSACTION => respond(
            request,
            &SharePrepareTransactionResponse {
                error_code: answer.error_code(),
                error_message: answer.error_message,
                transaction_state: state,
                ..Default::default()
            },
        ),
        apis::SHARE_COMMIT_TRANSACTION => respond(
            request,
            &ShareCommitTransactionResponse {
                error_code: answer.error_code(),
                error_message: answer.error_message,
                transaction_state: state,
                ..Default::default()
            },
        ),
        _ => respond(
            request,
            &ShareAbortTransactionResponse {
                error_code: answer.error_code(),
                error_message: answer.error_message,
                transaction_state: state,
                ..Default::default()
            },
        ),
    }
}

/// ShareListTransactions v0.
pub async fn handle_list<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let req: ShareListTransactionsRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let mut response = ShareListTransactionsResponse::default();
    let states = match req.state_filter() {
        Ok(states) => states,
        Err(e) => {
            response.error_code = ResponseError::InvalidRequest.code();
            response.error_message = Some(e.to_string());
            return respond(request, &response);
        }
    };
    if let Some(refused) = invalid_group(&req.group_id) {
        response.error_code = refused.error_code();
        response.error_message = refused.error_message;
        return respond(request, &response);
    }
    let reply: Result<Vec<TxnRecord>, TxnAnswer> = coordinator(
        bus,
        &req.group_id,
        TxnOp::List {
            group_id: req.group_id.clone(),
            states,
        },
    )
    .await;
    match reply {
        Ok(records) => {
            response.transactions = records
                .into_iter()
                .map(|r| ShareTransaction {
                    transaction_id: r.transaction_id,
                    state: r.state.into(),
                    timeout_ms: r.timeout_ms as i64,
                    create_time_ms: r.create_time_ms as i64,
                    prepare_time_ms: r.prepare_time_ms.map_or(-1, |t| t as i64),
                    partitions: r
                        .participants
                        .iter()
                        .map(|p| TransactionPartition {
                            topic_id: p.partition.topic_id,
                            partition_index: p.partition.partition,
                            locked_records: p.locked_records as i64,
                        })
                        .collect(),
                })
                .collect()
        }
        Err(answer) => {
            response.error_code = answer.error_code();
            response.error_message = answer.error_message;
        }
    }
    respond(request, &response)
}

/// One partition of a transactional acknowledgement.
struct Part {
    txn_partition: TopicPartition,
    /// What to lock, or the partition's error.
    target: Result<(PartitionRef, Vec<AckBatch>), (i16, Option<String>)>,
}

/// ShareAcknowledgeTransactional v0.
pub async fn handle_acknowledge<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let req: ShareAcknowledgeTransactionalRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let count: usize = req.topics.iter().map(|t| t.partitions.len()).sum();
    if let Err(refused) = super::check_count("partitions", count, REQUEST_PARTITIONS_MAX) {
        return refused;
    }
    let mut response = ShareAcknowledgeTransactionalResponse::default();
    if req.group_id.is_empty() || req.member_id.is_empty() {
        response.error_code = ResponseError::InvalidRequest.code();
        response.error_message = Some("GroupId and MemberId must be set".into());
        return respond(request, &response);
    }
    let registry = bus.registry();
    let mut parts: Vec<Part> = Vec::with_capacity(count);
    for t in &req.topics {
        for p in &t.partitions {
            let txn_partition = TopicPartition {
                topic_id: t.topic_id,
                partition: p.partition_index,
            };
            let target = match registry.topic_by_id(&t.topic_id) {
                None => Err((
                    ResponseError::UnknownTopicId.code(),
                    Some(format!("unknown topic id {}", t.topic_id)),
                )),
                Some(meta) if p.partition_index < 0 || p.partition_index >= meta.partitions => {
                    Err((
                        ResponseError::UnknownTopicOrPartition.code(),
                        Some(format!(
                            "{} has no partition {}",
                            meta.name, p.partition_index
                        )),
                    ))
                }
                Some(meta) => {
                    let raw: Vec<(i64, i64, &[i8])> = p
                        .acknowledgement_batches
                        .iter()
                        .map(|b| {
                            (
                                b.first_offset,
                                b.last_offset,
                                b.acknowledge_types.as_slice(),
                            )
                        })
                        .collect();
                    super::share_api::ack_batches(&raw, super::share_api::RenewPolicy::Unknown).map(
                        |batches| {
                            (
                                PartitionRef {
                                    topic: meta.name.clone(),
                                    topic_id: t.topic_id,
                                    partition: p.partition_index,
                                },
                                batches,
                            )
                        },
                    )
                }
            };
            parts.push(Part {
                txn_partition,
                target,
            });
        }
    }
    let mut results: Vec<(i16, Option<String>)> = parts
        .iter()
        .map(|p| match &p.target {
            Ok(_) => (0, None),
            Err((code, message)) => (*code, message.clone()),
        })
        .collect();

    // One call: the coordinator registers, has the partitions' shards lock, and completes.
    let valid: Vec<usize> = (0..parts.len())
        .filter(|i| parts[*i].target.is_ok())
        .collect();
    if !valid.is_empty() {
        let partitions = valid
            .iter()
            .filter_map(|i| parts[*i].target.as_ref().ok().cloned())
            .collect();
        let op = TxnOp::Acknowledge {
            group_id: req.group_id.clone(),
            member_id: req.member_id.clone(),
            transaction_id: req.transaction_id.clone(),
            partitions,
        };
        let reply: Result<Vec<Result<(), TxnAckError>>, TxnAnswer> =
            coordinator(bus, &req.group_id, op).await;
        match reply {
            Ok(outcomes) => {
                for (i, outcome) in valid.iter().zip(outcomes) {
                    let Err(refused) = outcome else { continue };
                    if let TxnAckError::Refused(answer) = &refused {
                        // The same for every partition: the transaction's (or the member's)
                        // state.
                        if response.error_code == 0 {
                            response.error_code = answer.error_code();
                            response.error_message = answer.error_message.clone();
                        }
                    }
                    results[*i] = refused.code_and_message();
                }
            }
            Err(answer) => {
                response.error_code = answer.error_code();
                response.error_message = answer.error_message;
                return respond(request, &response);
            }
        }
    }

    let mut by_topic: BTreeMap<uuid::Uuid, Vec<PartitionData>> = BTreeMap::new();
    for (part, (code, message)) in parts.iter().zip(results) {
        by_topic
            .entry(part.txn_partition.topic_id)
            .or_default()
            .push(PartitionData {
                partition_index: part.txn_partition.partition,
                error_code: code,
                error_message: message,
            });
    }
    response.responses = by_topic
        .into_iter()
        .map(
            |(topic_id, partitions)| ShareAcknowledgeTransactionalTopicResponse {
                topic_id,
                partitions,
            },
        )
        .collect();
    respond(request, &response)
}
