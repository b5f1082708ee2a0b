//! Producer transactions on the wire: InitProducerId with a transactional id (22),
//! AddPartitionsToTxn v0–5 (24), AddOffsetsToTxn v0–4 (25), EndTxn v0–5 (26),
//! DescribeTransactions v0 (65) and ListTransactions v0–1 (66).
//!
//! Every call about a transactional id goes to the shard the id hashes to
//! (`model::group_shard`, as groups are placed), where `ptxn::coordinator` decides; this module
//! only decodes, routes and chooses the Kafka codes: PRODUCER_FENCED becomes
//! INVALID_PRODUCER_EPOCH for the request versions that predate it, as Kafka answers them.
//! The broker does not advertise `transaction.version` 2 (KIP-890 part 2): clients use
//! transaction version 1 (AddPartitionsToTxn from the client, markers with the transaction's
//! epoch).

use super::admin::call_controller;
use super::{check_count, respond, Bus, Outcome};
use crate::constants::{
    REQUEST_ENTITIES_MAX, REQUEST_PARTITIONS_MAX, TXN_TRANSACTIONAL_ID_BYTES_MAX,
};
use crate::model::{group_shard, ShardId};
use crate::producer_txn::coordinator::InitAnswer;
use crate::producer_txn::coordinator::{
    CoordError, InitRequest, ListFilter, TxnMetadata, TxnState, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
};
use crate::producer_txn::TxnOutcome;
use crate::protocol::codec::{decode_body, Request};
use crate::shard::call::{AllocateProducerId, Op, Ptxn};
use crate::shard::ops::PtxnOp;
use kafka_protocol::messages::{
    add_partitions_to_txn_request, add_partitions_to_txn_response, describe_transactions_response,
    list_transactions_response, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ListTransactionsRequest, ListTransactionsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn shard_of<B: Bus>(bus: &B, transactional_id: &str) -> ShardId {
    group_shard(transactional_id, bus.shard_count())
}

/// Runs a coordinator op on the id's shard, answered with `R` (`shard::call::Ptxn`); a failed
/// call is its Kafka code.
async fn call<B: Bus, R>(bus: &B, shard: ShardId, op: PtxnOp) -> Result<R, i16>
where
    Ptxn<R>: Op<Reply = R>,
{
    bus.call_op(shard, Ptxn::new(op))
        .await
        .map_err(|failure| failure.code())
}

/// A coordinator op answered done or with a coordinator error.
type Done = Result<Result<(), CoordError>, i16>;

fn done_code(reply: Done, version: i16, fenced_since: i16) -> i16 {
    match reply {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e.code_for(version, fenced_since),
        Err(code) => code,
    }
}

fn check_id(id: &str) -> Result<(), i16> {
    if id.is_empty() || id.len() > TXN_TRANSACTIONAL_ID_BYTES_MAX {
        return Err(ResponseError::InvalidRequest.code());
    }
    Ok(())
}

/// InitProducerId with a transactional id (the caller checked it is non-empty): fills the
/// response's producer id and epoch, or its error code.
pub async fn init_transactional<B: Bus>(
    bus: &B,
    decoded: &InitProducerIdRequest,
    version: i16,
    response: &mut InitProducerIdResponse,
) {
    let id = decoded
        .transactional_id
        .as_ref()
        .map(|t| t.to_string())
        .unwrap_or_default();
    if let Err(code) = check_id(&id) {
        response.error_code = code;
        return;
    }
    let mut req = InitRequest {
        transactional_id: id.clone(),
        timeout_ms: decoded.transaction_timeout_ms,
        producer_id: i64::from(decoded.producer_id),
        producer_epoch: decoded.producer_epoch,
        enable_2pc: false,
        keep_prepared_txn: decoded.keep_prepared_txn,
        fresh_producer_id: None,
    };
    if version < 3 {
        req.producer_id = NO_PRODUCER_ID;
        req.producer_epoch = NO_PRODUCER_EPOCH;
    }
    let shard = shard_of(bus, &id);
    // A new id (or an exhausted epoch) needs a fresh producer id from the controller; the
    // coordinator says so, then gets the request again with one.
    for _ in 0..2 {
        let init: Result<Result<InitAnswer, CoordError>, i16> =
            call(bus, shard, PtxnOp::Init(req.clone())).await;
        match init {
            Ok(Ok(answer)) => {
                response.producer_id = answer.producer_id.into();
                response.producer_epoch = answer.producer_epoch;
                response.ongoing_txn_producer_id = answer.ongoing_producer_id.into();
                response.ongoing_txn_producer_epoch = answer.ongoing_producer_epoch;
                return;
            }
            Ok(Err(CoordError::NeedProducerId)) => {
                match call_controller(bus, AllocateProducerId).await {
                    Ok(Ok(pid)) => req.fresh_producer_id = Some(pid),
                    Ok(Err(e)) => {
                        response.error_code = e.code();
                        return;
                    }
                    Err(failure) => {
                        response.error_code = failure.code();
                        return;
                    }
                }
            }
            Ok(Err(e)) => {
                response.error_code = e.code_for(version, 4);
                return;
            }
            Err(code) => {
                response.error_code = code;
                return;
            }
        }
    }
    response.error_code = ResponseError::ConcurrentTransactions.code();
}

fn partitions_of(
    topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic],
) -> Vec<(String, i32)> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.to_string(), *p)))
        .collect()
}

/// Per-topic results with one code for every partition, or per partition.
fn topic_results(
    partitions: &[(String, i32)],
    code_of: impl Fn(usize) -> i16,
) -> Vec<add_partitions_to_txn_response::AddPartitionsToTxnTopicResult> {
    let mut by_topic: BTreeMap<
        &str,
        Vec<add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult>,
    > = BTreeMap::new();
    for (i, (topic, partition)) in partitions.iter().enumerate() {
        let mut r = add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default();
        r.partition_index = *partition;
        r.partition_error_code = code_of(i);
        by_topic.entry(topic).or_default().push(r);
    }
    by_topic
        .into_iter()
        .map(|(topic, results)| {
            let mut t = add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
            t.name = TopicName(sb(topic));
            t.results_by_partition = results;
            t
        })
        .collect()
}

/// KIP-890 part 1, for Produce: is each partition in the ongoing transaction of
/// (`producer_id`, `producer_epoch`)? Per-partition codes, in order, as Kafka 4.4 answers the
/// produce (measured on the reference broker, `tests/producer_txn.rs`): not in the transaction
/// INVALID_TXN_STATE, another producer id INVALID_PRODUCER_ID_MAPPING, a fenced epoch
/// INVALID_PRODUCER_EPOCH; a transaction still completing is NOT_ENOUGH_REPLICAS, which
/// producers retry (Kafka's mapping of CONCURRENT_TRANSACTIONS for Produce).
pub async fn verify_for_produce<B: Bus>(
    bus: &B,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[(String, i32)],
) -> Vec<i16> {
    let codes = add_partitions(bus, id, producer_id, producer_epoch, partitions, true, 4).await;
    codes
        .into_iter()
        .map(|code| match code {
            c if c == ResponseError::ProducerFenced.code() => {
                ResponseError::InvalidProducerEpoch.code()
            }
            c if c == ResponseError::ConcurrentTransactions.code() => {
                ResponseError::NotEnoughReplicas.code()
            }
            c => c,
        })
        .collect()
}

/// Adds (or verifies) one transaction's partitions; per-partition codes, in order.
async fn add_partitions<B: Bus>(
    bus: &B,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[(String, i32)],
    verify_only: bool,
    version: i16,
) -> Vec<i16> {
    let all = |code: i16| vec![code; partitions.len()];
    if let Err(code) = check_id(id) {
        return all(code);
    }
    // As Kafka: a partition of an unknown topic fails the whole request
    // (UNKNOWN_TOPIC_OR_PARTITION for it, OPERATION_NOT_ATTEMPTED for the others).
    let registry = bus.registry();
    let unknown: Vec<bool> = partitions
        .iter()
        .map(|(t, p)| {
            registry
                .topic(t)
                .map_or(true, |m| *p < 0 || *p >= m.partitions)
        })
        .collect();
    if unknown.iter().any(|u| *u) {
        return unknown
            .iter()
            .map(|u| {
                if *u {
                    ResponseError::UnknownTopicOrPartition.code()
                } else {
                    ResponseError::OperationNotAttempted.code()
                }
            })
            .collect();
    }
    let shard = shard_of(bus, id);
    if verify_only {
        let op = PtxnOp::Verify {
            transactional_id: id.to_string(),
            producer_id,
            producer_epoch,
            partitions: partitions.to_vec(),
        };
        let verified: Result<Result<Vec<Result<(), CoordError>>, CoordError>, i16> =
            call(bus, shard, op).await;
        return match verified {
            Ok(Ok(each)) => each
                .iter()
                .map(|r| r.as_ref().map_or_else(|e| e.code(), |()| 0))
                .collect(),
            Ok(Err(e)) => all(e.code_for(version, 2)),
            Err(code) => all(code),
        };
    }
    let op = PtxnOp::AddParticipants {
        transactional_id: id.to_string(),
        producer_id,
        producer_epoch,
        partitions: partitions.to_vec(),
        groups: Vec::new(),
    };
    all(done_code(call(bus, shard, op).await, version, 2))
}

/// AddPartitionsToTxn v0–5: v0–3 the client's one transaction; v4+ batched (`verifyOnly`
/// checks, as a partition leader does in KIP-890 part 1).
pub async fn handle_add_partitions<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: AddPartitionsToTxnRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let version = request.api_version;
    let mut response = AddPartitionsToTxnResponse::default();
    if version < 4 {
        let partitions = partitions_of(&decoded.v3_and_below_topics);
        if let Err(refused) = check_count("partitions", partitions.len(), REQUEST_PARTITIONS_MAX) {
            return refused;
        }
        let codes = add_partitions(
            bus,
            &decoded.v3_and_below_transactional_id,
            i64::from(decoded.v3_and_below_producer_id),
            decoded.v3_and_below_producer_epoch,
            &partitions,
            false,
            version,
        )
        .await;
        response.results_by_topic_v3_and_below = topic_results(&partitions, |i| codes[i]);
        return respond(request, &response);
    }
    if let Err(refused) = check_count(
        "transactions",
        decoded.transactions.len(),
        REQUEST_ENTITIES_MAX,
    ) {
        return refused;
    }
    for txn in &decoded.transactions {
        let partitions = partitions_of(&txn.topics);
        if let Err(refused) = check_count("partitions", partitions.len(), REQUEST_PARTITIONS_MAX) {
            return refused;
        }
        let codes = add_partitions(
            bus,
            &txn.transactional_id,
            i64::from(txn.producer_id),
            txn.producer_epoch,
            &partitions,
            txn.verify_only,
            version,
        )
        .await;
        let mut result = add_partitions_to_txn_response::AddPartitionsToTxnResult::default();
        result.transactional_id = txn.transactional_id.clone();
        result.topic_results = topic_results(&partitions, |i| codes[i]);
        response.results_by_transaction.push(result);
    }
    respond(request, &response)
}

/// AddOffsetsToTxn v0–4: the group's offsets join the transaction (TxnOffsetCommit follows).
pub async fn handle_add_offsets<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: AddOffsetsToTxnRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let mut response = AddOffsetsToTxnResponse::default();
    let id = decoded.transactional_id.to_string();
    response.error_code = match check_id(&id) {
        Err(code) => code,
        Ok(()) => {
            let op = PtxnOp::AddParticipants {
                transactional_id: id.clone(),
                producer_id: i64::from(decoded.producer_id),
                producer_epoch: decoded.producer_epoch,
                partitions: Vec::new(),
                groups: vec![decoded.group_id.to_string()],
            };
            done_code(
                call(bus, shard_of(bus, &id), op).await,
                request.api_version,
                2,
            )
        }
    };
    respond(request, &response)
}

/// EndTxn v0–5: commit or abort; answered once PrepareCommit/PrepareAbort is durable (the
/// markers follow, as in Kafka with transaction version 1).
pub async fn handle_end_txn<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: EndTxnRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let mut response = EndTxnResponse::default();
    response.producer_id = NO_PRODUCER_ID.into();
    response.producer_epoch = NO_PRODUCER_EPOCH;
    let id = decoded.transactional_id.to_string();
    response.error_code = match check_id(&id) {
        Err(code) => code,
        Ok(()) => {
            let op = PtxnOp::End {
                transactional_id: id.clone(),
                producer_id: i64::from(decoded.producer_id),
                producer_epoch: decoded.producer_epoch,
                outcome: if decoded.committed {
                    TxnOutcome::Commit
                } else {
                    TxnOutcome::Abort
                },
            };
            done_code(
                call(bus, shard_of(bus, &id), op).await,
                request.api_version,
                2,
            )
        }
    };
    respond(request, &response)
}

fn described(
    id: &str,
    found: Option<&TxnMetadata>,
) -> describe_transactions_response::TransactionState {
    let mut out = describe_transactions_response::TransactionState::default();
    out.transactional_id = sb(id).into();
    match found {
        None => {
            out.error_code = ResponseError::TransactionalIdNotFound.code();
            out.transaction_state = sb("");
            out.producer_id = NO_PRODUCER_ID.into();
            out.producer_epoch = NO_PRODUCER_EPOCH;
            out.transaction_start_time_ms = -1;
        }
        Some(m) => {
            out.transaction_state = sb(m.state.name());
            out.transaction_timeout_ms = m.timeout_ms;
            out.transaction_start_time_ms = m.start_ms;
            out.producer_id = m.producer_id.into();
            out.producer_epoch = m.producer_epoch;
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (t, p) in &m.partitions {
                by_topic.entry(t).or_default().push(*p);
            }
            out.topics = by_topic
                .into_iter()
                .map(|(t, partitions)| {
                    let mut d = describe_transactions_response::TopicData::default();
                    d.topic = TopicName(sb(t));
                    d.partitions = partitions;
                    d
                })
                .collect();
        }
    }
    out
}

/// DescribeTransactions v0.
pub async fn handle_describe<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: DescribeTransactionsRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    if let Err(refused) = check_count(
        "transactional ids",
        decoded.transactional_ids.len(),
        REQUEST_ENTITIES_MAX,
    ) {
        return refused;
    }
    let mut response = DescribeTransactionsResponse::default();
    for id in &decoded.transactional_ids {
        let id = id.to_string();
        let op = PtxnOp::Describe {
            transactional_ids: vec![id.clone()],
        };
        let found: Result<Vec<Option<TxnMetadata>>, i16> = call(bus, shard_of(bus, &id), op).await;
        let state = match found {
            Ok(found) => described(&id, found.first().and_then(Option::as_ref)),
            Err(_) => {
                let mut out = described(&id, None);
                out.error_code = ResponseError::UnknownServerError.code();
                out
            }
        };
        response.transaction_states.push(state);
    }
    respond(request, &response)
}

/// ListTransactions v0–1: every shard's ids, filtered by state, producer id and duration;
/// unknown state names are reported back (as Kafka).
pub async fn handle_list<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: ListTransactionsRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let mut response = ListTransactionsResponse::default();
    let mut filter = ListFilter {
        duration_ms: if request.api_version >= 1 {
            decoded.duration_filter
        } else {
            -1
        },
        producer_ids: decoded
            .producer_id_filters
            .iter()
            .map(|p| i64::from(*p))
            .collect(),
        ..ListFilter::default()
    };
    for s in &decoded.state_filters {
        if TxnState::from_name(s).is_some() {
            filter.states.push(s.to_string());
        } else {
            response.unknown_state_filters.push(s.clone());
        }
    }
    if !decoded.state_filters.is_empty() && filter.states.is_empty() {
        // Only unknown states asked for: nothing matches.
        return respond(request, &response);
    }
    let calls: Vec<_> = (0..bus.shard_count())
        .map(|shard| call(bus, ShardId(shard as u16), PtxnOp::List(filter.clone())))
        .collect();
    let replies: Vec<Result<Vec<TxnMetadata>, i16>> = crate::shard::join::join_all(calls).await;
    for reply in replies {
        match reply {
            Ok(listed) => {
                for m in listed {
                    let mut out = list_transactions_response::TransactionState::default();
                    out.transactional_id = sb(&m.transactional_id).into();
                    out.producer_id = m.producer_id.into();
                    out.transaction_state = sb(m.state.name());
                    response.transaction_states.push(out);
                }
            }
            Err(code) => response.error_code = code,
        }
    }
    respond(request, &response)
}
