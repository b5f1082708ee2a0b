//! Produce v3–13 (topic ids from v13).
//!
//! The handler resolves each partition against the local registry snapshot, sends one
//! [`ProduceOp`] per partition to the owning shard (all concurrently), and assembles the
//! answers in request order. The owning shard validates the batch (magic v2, length,
//! CRC-32C, counts; no control batches from clients; transactional batches open or extend the
//! producer's transaction in the partition, `crate::producer_txn::partition`), applies the
//! idempotent-producer rules, appends, and — for acks=all — answers only once the batch is durable. With acks=0
//! no response is written at all, as Kafka does.
//!
//! KIP-890 part 1: a transactional batch that would open its producer's transaction in a
//! partition comes back with a verification guard instead; the handler asks the transaction
//! coordinator whether the partition is in the producer's ongoing transaction
//! ([`super::producer_txn_api::verify_for_produce`], one call per producer) and sends the verified
//! batches again with their guards.

use super::{Bus, Outcome};
use crate::constants::{PRODUCE_REORDER_RETRY_MS, PRODUCE_REORDER_WAIT_MS, PRODUCE_TIMEOUT_MS_MAX};
use crate::model::partition_shard;
use crate::producer_txn::partition::TxnError;
use crate::protocol::codec::{decode_body, encode_response, Request};
use crate::shard::join::join_all;
use crate::shard::ops::{CallError, PartitionRef, ProduceError, ProduceOp, ProduceResult};
use crate::shard::producer_state::ProducerError;
use kafka_protocol::messages::{produce_response, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// Produce v13 names topics by id.
const TOPIC_IDS_FROM_VERSION: i16 = 13;

/// A topic of the request: its name, id, and one slot per partition (index, answer).
type TopicSlots = (TopicName, uuid::Uuid, Vec<(i32, Slot<usize>)>);

enum Slot<F> {
    Ready(Answer),
    Pending(F),
}

/// One partition's answer as the response carries it: the shard's [`ProduceResult`] with its
/// error's code (`server::codes`), or an error the handler chose.
#[derive(Debug)]
struct Answer {
    error_code: i16,
    error_message: Option<String>,
    base_offset: i64,
    log_start_offset: i64,
}

impl Answer {
    fn error(error_code: i16, message: impl Into<String>) -> Answer {
        Answer {
            error_code,
            error_message: Some(message.into()),
            base_offset: -1,
            log_start_offset: -1,
        }
    }
}

impl From<ProduceResult> for Answer {
    fn from(result: ProduceResult) -> Answer {
        Answer {
            error_code: ProduceError::code_or_none(result.error),
            error_message: result.error_message,
            base_offset: result.base_offset,
            log_start_offset: result.log_start_offset,
        }
    }
}

/// A refusal the client retries as OUT_OF_ORDER_SEQUENCE_NUMBER: a batch whose sequence does
/// not follow its producer's last, or one that waits for an earlier batch being verified.
fn out_of_order(error: Option<ProduceError>) -> bool {
    matches!(
        error,
        Some(
            ProduceError::Producer(ProducerError::OutOfOrder { .. })
                | ProduceError::Txn(TxnError::EarlierBatchVerifying { .. })
        )
    )
}

/// Whether the first batch of `records` has the transactional attribute (bit 4; control batches
/// have it too).
fn is_transactional(records: &[u8]) -> bool {
    crate::log::batch::parse_header(records).is_ok_and(|h| h.is_transactional())
}

/// KIP-890 part 1: the batches answered with a verification guard are verified with the
/// transaction coordinator (one call per producer id and epoch) and sent again with their
/// guards; a partition the coordinator does not confirm gets its error. Returns every call's
/// answer.
///
/// Requests of one producer are handled concurrently (Kafka reads a connection's next request
/// only after answering the last), so a transactional batch may reach its partition while an
/// earlier batch of the same producer is still being verified. The partition refuses it
/// OUT_OF_ORDER_SEQUENCE_NUMBER, even once verified, while a batch with a lower sequence waits
/// for the same verification ([`crate::producer_txn::partition::TxnPartition::check_verified`]). Rather
/// than have the client send it again, such a batch is sent again every [`PRODUCE_REORDER_RETRY_MS`]
/// until the earlier one is appended, or [`PRODUCE_REORDER_WAIT_MS`] have passed and the refusal is the
/// answer.
async fn verify_and_resend<B: Bus>(
    bus: &B,
    transactional_id: &str,
    sent: &[(crate::model::ShardId, ProduceOp)],
    replies: Vec<Result<ProduceResult, CallError>>,
) -> Vec<Answer> {
    // (producer id, epoch) → [(call index, guard)].
    let mut by_producer: std::collections::BTreeMap<(i64, i16), Vec<(usize, u64)>> =
        std::collections::BTreeMap::new();
    // Calls to send again: (call index, guard to carry).
    let mut pending: Vec<(usize, Option<u64>)> = Vec::new();
    for (i, result) in replies.iter().enumerate() {
        let Ok(result) = result else { continue };
        if let Some(guard) = result.verification_guard {
            let header = crate::log::batch::parse_header(&sent[i].1.records)
                .expect("the partition parsed the batch it asked to verify");
            by_producer
                .entry((header.producer_id, header.producer_epoch))
                .or_default()
                .push((i, guard));
        } else if out_of_order(result.error) && is_transactional(&sent[i].1.records) {
            pending.push((i, None));
        }
    }
    let mut replies: Vec<Answer> = replies.into_iter().map(answered).collect();
    for ((pid, epoch), waiting) in by_producer {
        let partitions: Vec<(String, i32)> = waiting
            .iter()
            .map(|(i, _)| {
                (
                    sent[*i].1.partition.topic.clone(),
                    sent[*i].1.partition.partition,
                )
            })
            .collect();
        let codes = super::producer_txn_api::verify_for_produce(
            bus,
            transactional_id,
            pid,
            epoch,
            &partitions,
        )
        .await;
        for ((i, guard), code) in waiting.into_iter().zip(codes) {
            if code == 0 {
                pending.push((i, Some(guard)));
            } else {
                replies[i] = Answer::error(
                    code,
                    format!(
                        "{}-{} is not in the ongoing transaction of producer {pid} epoch {epoch}",
                        sent[i].1.partition.topic, sent[i].1.partition.partition
                    ),
                );
            }
        }
    }
    let deadline = bus.now_ms() + PRODUCE_REORDER_WAIT_MS;
    let mut first = true;
    while !pending.is_empty() {
        // Out-of-order refusals from the first attempt wait before they are sent again.
        if !first || pending.iter().any(|(_, guard)| guard.is_none()) {
            bus.sleep_ms(PRODUCE_REORDER_RETRY_MS).await;
        }
        first = false;
        let calls: Vec<_> = pending
            .iter()
            .map(|&(i, guard)| {
                let (shard, op) = &sent[i];
                let op = ProduceOp {
                    verification_guard: guard,
                    ..op.clone()
                };
                bus.call_op(*shard, op)
            })
            .collect();
        let waiting = bus.now_ms() < deadline;
        let mut again = Vec::new();
        for (&(i, guard), reply) in pending.iter().zip(join_all(calls).await) {
            let reply = match reply {
                // Asked to verify again: a marker ended the transaction meanwhile.
                Ok(ProduceResult {
                    verification_guard: Some(_),
                    ..
                }) => Answer::error(
                    ResponseError::InvalidTxnState.code(),
                    "the transaction ended while the batch was verified",
                ),
                Ok(ProduceResult { error, .. }) if waiting && out_of_order(error) => {
                    again.push((i, guard));
                    continue;
                }
                other => answered(other),
            };
            replies[i] = reply;
        }
        pending = again;
    }
    replies
}

/// A shard's answer to a produce, or the failure of the call as a produce error.
fn answered(reply: Result<ProduceResult, CallError>) -> Answer {
    match reply {
        Ok(result) => Answer::from(result),
        Err(failure) => Answer::error(failure.code(), format!("{failure:?}")),
    }
}

/// Produce.
pub async fn handle_produce<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: ProduceRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    if let Err(refused) = super::check_count(
        "partitions",
        decoded
            .topic_data
            .iter()
            .map(|t| t.partition_data.len())
            .sum(),
        crate::constants::REQUEST_PARTITIONS_MAX,
    ) {
        return refused;
    }
    let version = request.api_version;
    let registry = bus.registry();
    let acks = decoded.acks;
    // As Kafka 4.4: a request with transactional batches must name its transactional id, or
    // every partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    let refused_transactional = decoded.transactional_id.is_none()
        && decoded.topic_data.iter().any(|t| {
            t.partition_data
                .iter()
                .any(|p| p.records.as_ref().is_some_and(|r| is_transactional(r)))
        });
    let acks_valid = matches!(acks, -1..=1);
    let timeout_ms = u64::try_from(decoded.timeout_ms)
        .unwrap_or(0)
        .min(PRODUCE_TIMEOUT_MS_MAX);

    // One slot per partition, in request order; pending slots index into `calls`.
    let mut layout: Vec<TopicSlots> = Vec::new();
    let mut calls = Vec::new();
    // The op behind each call and its shard, to send a batch again once it is verified.
    let mut sent: Vec<(crate::model::ShardId, ProduceOp)> = Vec::new();
    for topic in &decoded.topic_data {
        let meta = if version >= TOPIC_IDS_FROM_VERSION {
            registry.topic_by_id(&topic.topic_id)
        } else {
            registry.topic(&topic.name)
        };
        let mut slots = Vec::with_capacity(topic.partition_data.len());
        for data in &topic.partition_data {
            let slot = if refused_transactional {
                Slot::Ready(Answer::error(
                    ResponseError::TransactionalIdAuthorizationFailed.code(),
                    "transactional batches need the request's transactional id".to_string(),
                ))
            } else if !acks_valid {
                Slot::Ready(Answer::error(
                    ResponseError::InvalidRequiredAcks.code(),
                    format!("acks must be -1, 0 or 1, not {acks}"),
                ))
            } else {
                match meta {
                    None if version >= TOPIC_IDS_FROM_VERSION => Slot::Ready(Answer::error(
                        ResponseError::UnknownTopicId.code(),
                        format!("unknown topic id {}", topic.topic_id),
                    )),
                    None => Slot::Ready(Answer::error(
                        ResponseError::UnknownTopicOrPartition.code(),
                        format!("unknown topic {:?}", topic.name.as_str()),
                    )),
                    Some(meta) if data.index < 0 || data.index >= meta.partitions => {
                        Slot::Ready(Answer::error(
                            ResponseError::UnknownTopicOrPartition.code(),
                            format!("topic {:?} has no partition {}", meta.name, data.index),
                        ))
                    }
                    Some(meta) => match &data.records {
                        None => Slot::Ready(Answer::error(
                            ResponseError::InvalidRecord.code(),
                            "no records".to_string(),
                        )),
                        Some(records) => {
                            let op = ProduceOp {
                                partition: PartitionRef {
                                    topic: meta.name.clone(),
                                    topic_id: meta.id,
                                    partition: data.index,
                                },
                                records: records.clone(),
                                acks,
                                timeout_ms,
                                verification_guard: None,
                            };
                            let shard = partition_shard(&meta.name, data.index, bus.shard_count());
                            calls.push(bus.call_op(shard, op.clone()));
                            sent.push((shard, op));
                            Slot::Pending(calls.len() - 1)
                        }
                    },
                }
            };
            slots.push((data.index, slot));
        }
        layout.push((topic.name.clone(), topic.topic_id, slots));
    }
    let replies = join_all(calls).await;
    let mut replies: Vec<Answer> = match &decoded.transactional_id {
        Some(id) => verify_and_resend(bus, id.as_str(), &sent, replies).await,
        None => replies.into_iter().map(answered).collect(),
    };
    if acks == 0 {
        return Outcome::NoResponse;
    }

    let mut response = ProduceResponse::default();
    response.responses = layout
        .into_iter()
        .map(|(name, topic_id, slots)| {
            let mut topic = produce_response::TopicProduceResponse::default();
            if version >= TOPIC_IDS_FROM_VERSION {
                topic.topic_id = topic_id;
            } else {
                topic.name = name;
            }
            topic.partition_responses = slots
                .into_iter()
                .map(|(index, slot)| {
                    let result = match slot {
                        Slot::Ready(result) => result,
                        Slot::Pending(i) => std::mem::replace(
                            &mut replies[i],
                            Answer::error(
                                ResponseError::UnknownServerError.code(),
                                "the partition was answered twice",
                            ),
                        ),
                    };
                    let mut p = produce_response::PartitionProduceResponse::default();
                    p.index = index;
                    p.error_code = result.error_code;
                    p.base_offset = result.base_offset;
                    p.log_append_time_ms = -1;
                    if version >= 5 {
                        p.log_start_offset = result.log_start_offset;
                    }
                    if version >= 8 {
                        p.error_message = result.error_message.map(StrBytes::from_string);
                    }
                    p
                })
                .collect();
            topic
        })
        .collect();
    match encode_response(request.spec, version, request.correlation_id, &response) {
        Ok(frame) => Outcome::Respond(frame),
        Err(e) => Outcome::Close(e.to_string()),
    }
}
