//! The KIP-932 share-group APIs: ShareGroupHeartbeat v1 (76), ShareFetch v1–v2 (78) and
//! ShareAcknowledge v1–v2 (79; v2 adds AcknowledgeType RENEW and the renew-only ShareFetch,
//! KIP-1222, and ShareFetch's acquire mode, KIP-1206), and what happens when a share consumer's
//! connection drops.
//!
//! Routing (`shard::share_state` has the state): a heartbeat runs on the group's shard. A
//! ShareFetch first updates the member's share session on the group's shard (epochs as Kafka:
//! 0 opens, -1 closes, otherwise the next epoch), then makes one call per partition shard that
//! applies its piggybacked acknowledgements there and then acquires records (acknowledgements
//! answered once durable; a shard the acquisition does not call gets an acknowledgement of its
//! own, concurrently), within the request's limits as Kafka 4.4 does (`share::fetch`: one MaxRecords
//! budget walked over the partitions in an order rotated every epoch, BatchSize, MaxBytes,
//! MinBytes); with nothing to hand out (or less than MinBytes) it waits for new data, up to
//! `MaxWaitMs`, looking again every `SHARE_FETCH_RECHECK_MS` for records released or expired
//! meanwhile. A ShareAcknowledge
//! checks the session epoch, then acknowledges. A session closed by epoch -1 (after the
//! request's acknowledgements) or by its connection dropping releases the member's acquired
//! records at once; a connection that no longer owns the member's session (the member opened a
//! newer one elsewhere) releases nothing when it drops.

use super::{respond, respond_gathered, Bus, ConnInfo, Outcome};
use crate::constants::{
    BROKER_NODE_ID, FETCH_RESPONSE_BYTES_MAX, FETCH_WAIT_MS_MAX, REQUEST_PARTITIONS_MAX,
    SHARE_FETCH_RECHECK_MS, SHARE_FETCH_RECORDS_MAX,
};
use crate::model::TopicPartition;
use crate::model::{group_shard, partition_shard, ShardId};
use crate::protocol::codec::{decode_body, Request};
use crate::protocol::generated::{
    share_acknowledge_response, share_fetch_response, ShareAcknowledgeRequest,
    ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use crate::shard::call::{Disconnected, JournalDurable, ReleaseMember};
use crate::shard::join::{first_of, join_all};
use crate::shard::ops::{
    CallError, PartitionRef, ShareAckOp, ShareAckResult, ShareFetchOp, ShareFetchReply,
    ShareFetchedPartition, SharePartitionError, ShareSessionOp, WaitOp,
};
use crate::shard::registry::TopicRegistry;
use crate::shard::share_group::{Heartbeat, ShareHeartbeatError};
use crate::shard::share_session::{SessionKey, SessionOutcome};
use crate::share::fetch::{group_in_order, partition_max_bytes, rotate};
use crate::share::{AckBatch, AcknowledgeType};
use bytes::Bytes;
use kafka_protocol::messages::{
    share_group_heartbeat_response, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::collections::BTreeMap;
use uuid::Uuid;

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// ShareGroupHeartbeat v1.
pub async fn handle_heartbeat<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    let decoded: ShareGroupHeartbeatRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    if let Some(topics) = &decoded.subscribed_topic_names {
        if let Err(refused) =
            super::check_count("topics", topics.len(), crate::constants::TOPICS_MAX)
        {
            return refused;
        }
    }
    let hb = Heartbeat {
        group_id: decoded.group_id.0.to_string(),
        member_id: decoded.member_id.to_string(),
        member_epoch: decoded.member_epoch,
        rack_id: decoded.rack_id.as_ref().map(|r| r.to_string()),
        subscribed: decoded
            .subscribed_topic_names
            .as_ref()
            .map(|t| t.iter().map(|n| n.0.to_string()).collect()),
        client_id: request.client_id.clone().unwrap_or_default(),
        client_host: format!("/{}", conn.peer_addr.ip()),
    };
    let shard = group_shard(&hb.group_id, bus.shard_count());
    let mut response = ShareGroupHeartbeatResponse::default();
    match bus.call_op(shard, hb).await {
        Ok(answer) => {
            response.error_code = answer.error.map_or(0, ShareHeartbeatError::code);
            response.error_message = answer.error_message.as_deref().map(sb);
            response.member_id = answer.member_id.as_deref().map(sb);
            response.member_epoch = answer.member_epoch;
            response.heartbeat_interval_ms = answer.heartbeat_interval_ms;
            response.assignment = answer.assignment.map(|topics| {
                let mut a = share_group_heartbeat_response::Assignment::default();
                a.topic_partitions = topics
                    .into_iter()
                    .map(|t| {
                        let mut tp = share_group_heartbeat_response::TopicPartitions::default();
                        tp.topic_id = t.topic_id;
                        tp.partitions = t.partitions;
                        tp
                    })
                    .collect();
                a
            });
        }
        Err(failure) => response.error_code = failure.code(),
    }
    respond(request, &response)
}

/// A partition a request names, resolved against the registry.
struct Named {
    topic_id: Uuid,
    partition: i32,
    /// The partition and its shard, or the Kafka error for it.
    target: Result<(ShardId, PartitionRef), i16>,
}

fn resolve(registry: &TopicRegistry, shards: usize, topic_id: Uuid, partition: i32) -> Named {
    let target = match registry.topic_by_id(&topic_id) {
        None => Err(ResponseError::UnknownTopicId.code()),
        Some(t) if partition < 0 || partition >= t.partitions => {
            Err(ResponseError::UnknownTopicOrPartition.code())
        }
        Some(t) => Ok((
            partition_shard(&t.name, partition, shards),
            PartitionRef {
                topic: t.name.clone(),
                topic_id,
                partition,
            },
        )),
    };
    Named {
        topic_id,
        partition,
        target,
    }
}

/// ShareFetch v2's ShareAcquireMode: 0 batch_optimized, 1 record_limit (KIP-1206).
const SHARE_ACQUIRE_MODE_RECORD_LIMIT: i8 = 1;

/// Kafka 4.4's message for a RENEW when `share.renew.acknowledge.enable` is false.
const RENEW_DISABLED_MESSAGE: &str = "Renewing acquisition locks is not enabled for the group.";

/// The first ShareFetch / ShareAcknowledge version with AcknowledgeType RENEW (KIP-1222).
pub(crate) const RENEW_MIN_VERSION: i16 = 2;

/// Whether an acknowledgement may RENEW (AcknowledgeType 4, KIP-1222).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenewPolicy {
    /// Below [`RENEW_MIN_VERSION`], and for the transactional acknowledgement: type 4 is
    /// unknown (INVALID_REQUEST), as in Kafka.
    Unknown,
    /// The group's `share.renew.acknowledge.enable` is false: INVALID_RECORD_STATE.
    Disabled,
    Allowed,
}

impl RenewPolicy {
    /// The policy of a ShareFetch / ShareAcknowledge of `version` for a group whose
    /// `share.renew.acknowledge.enable` is `enabled`.
    pub(crate) fn of(version: i16, enabled: bool) -> RenewPolicy {
        match (version >= RENEW_MIN_VERSION, enabled) {
            (false, _) => RenewPolicy::Unknown,
            (true, false) => RenewPolicy::Disabled,
            (true, true) => RenewPolicy::Allowed,
        }
    }
}

/// Converts wire acknowledgement batches (first, last, type codes); `Err` is the partition's
/// error code and message, as Kafka 4.4 answers them on the wire: INVALID_REQUEST for an
/// unknown type (RENEW included under [`RenewPolicy::Unknown`], with no message),
/// INVALID_RECORD_STATE for RENEW under [`RenewPolicy::Disabled`].
/// Shared with the transactional acknowledgement (`share_txn_api`).
pub(crate) fn ack_batches(
    batches: &[(i64, i64, &[i8])],
    renew: RenewPolicy,
) -> Result<Vec<AckBatch>, (i16, Option<String>)> {
    batches
        .iter()
        .map(|(first, last, types)| {
            let types = types
                .iter()
                .map(|code| match (AcknowledgeType::from_code(*code), renew) {
                    (Some(AcknowledgeType::Renew), RenewPolicy::Unknown) => {
                        Err((ResponseError::InvalidRequest.code(), None))
                    }
                    (None, _) => Err((
                        ResponseError::InvalidRequest.code(),
                        Some(format!("unknown acknowledge type {code}")),
                    )),
                    (Some(AcknowledgeType::Renew), RenewPolicy::Disabled) => Err((
                        ResponseError::InvalidRecordState.code(),
                        Some(RENEW_DISABLED_MESSAGE.to_string()),
                    )),
                    (Some(t), _) => Ok(t),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(AckBatch {
                first: *first,
                last: *last,
                types,
            })
        })
        .collect()
}

/// A request's acknowledgement of one partition: the partition resolved, and its batches or
/// the partition's error.
type NamedAck = (Named, Result<Vec<AckBatch>, (i16, Option<String>)>);

/// A request's acknowledgements, grouped by shard until a call to that shard carries them: a
/// ShareFetch's first call to each partition shard (its acquisition, MinBytes or not) acknowledges
/// first ([`ShareFetchOp::acknowledge`]), the shards it does not call get an acknowledgement of
/// their own ([`PendingAcks::flush`]). One result per acknowledged partition, in request order.
struct PendingAcks {
    group_id: String,
    member_id: String,
    /// Not yet sent: per shard, (index into `results`, partition, batches).
    by_shard: BTreeMap<ShardId, Vec<(usize, PartitionRef, Vec<AckBatch>)>>,
    results: Vec<(Uuid, i32, AckOutcome)>,
}

/// One partition's acknowledgement as the response carries it: error code (0: none) and
/// message.
type AckOutcome = (i16, Option<String>);

impl PendingAcks {
    fn new(group_id: &str, member_id: &str, acks: Vec<NamedAck>) -> PendingAcks {
        let mut by_shard: BTreeMap<ShardId, Vec<(usize, PartitionRef, Vec<AckBatch>)>> =
            BTreeMap::new();
        let mut results = Vec::with_capacity(acks.len());
        for (i, (named, batches)) in acks.into_iter().enumerate() {
            let result = match (named.target, batches) {
                (Err(code), _) => (code, Some("unknown topic-partition".to_string())),
                (Ok(_), Err(refused)) => refused,
                (Ok((shard, r)), Ok(batches)) => {
                    by_shard.entry(shard).or_default().push((i, r, batches));
                    (0, None)
                }
            };
            results.push((named.topic_id, named.partition, result));
        }
        PendingAcks {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
            by_shard,
            results,
        }
    }

    /// The acknowledgement op for `shard`, taken out (`None`: nothing, or already sent), and
    /// the result indices its answers go to.
    fn take(&mut self, shard: ShardId) -> Option<(ShareAckOp, Vec<usize>)> {
        let parts = self.by_shard.remove(&shard)?;
        let indices = parts.iter().map(|(i, _, _)| *i).collect();
        let op = ShareAckOp {
            group_id: self.group_id.clone(),
            member_id: self.member_id.clone(),
            partitions: parts.into_iter().map(|(_, r, b)| (r, b)).collect(),
        };
        Some((op, indices))
    }

    /// Records a shard's answers to what [`PendingAcks::take`] gave (or its failure).
    fn answer(&mut self, indices: &[usize], answers: Result<Vec<ShareAckResult>, CallError>) {
        match answers {
            Ok(answers) => {
                assert_eq!(answers.len(), indices.len(), "one answer per partition");
                for (i, answer) in indices.iter().zip(answers) {
                    self.results[*i].2 = (answer.error_code(), answer.error_message);
                }
            }
            Err(failure) => {
                let code = failure.code();
                for i in indices {
                    self.results[*i].2 = (code, Some("the shard could not acknowledge".into()));
                }
            }
        }
    }

    /// The shards still to be sent acknowledgements.
    fn shards(&self) -> Vec<ShardId> {
        self.by_shard.keys().copied().collect()
    }

    /// Sends what is left for `shards` (all of it: `None`) in acknowledgement-only calls, one
    /// per shard, concurrently; completes once they are answered.
    async fn flush<B: Bus>(pending: &RefCell<PendingAcks>, bus: &B, shards: Option<&[ShardId]>) {
        let ops: Vec<(ShareAckOp, Vec<usize>, ShardId)> = {
            let mut acks = pending.borrow_mut();
            let shards = shards.map_or_else(|| acks.shards(), <[ShardId]>::to_vec);
            shards
                .into_iter()
                .filter_map(|shard| acks.take(shard).map(|(op, idx)| (op, idx, shard)))
                .collect()
        };
        let calls = ops
            .iter()
            .map(|(op, _, shard)| bus.call_op(*shard, op.clone()))
            .collect();
        let answers = join_all(calls).await;
        let mut acks = pending.borrow_mut();
        for ((_, indices, _), answer) in ops.iter().zip(answers) {
            acks.answer(indices, answer);
        }
    }
}

/// Releases what a member holds on every shard (its share session closed).
async fn release_everywhere<B: Bus>(bus: &B, group_id: &str, member_id: &str) {
    let calls = (0..bus.shard_count())
        .map(|s| {
            bus.call_op(
                ShardId(s as u16),
                ReleaseMember {
                    group_id: group_id.to_string(),
                    member_id: member_id.to_string(),
                },
            )
        })
        .collect();
    // A shard that fails to release is gone (the broker stops): nothing is held there then.
    join_all(calls).await;
}

/// Runs a session update on the group's shard.
async fn session<B: Bus>(bus: &B, op: ShareSessionOp) -> Result<SessionOutcome, i16> {
    let shard = group_shard(&op.key.group_id, bus.shard_count());
    match bus.call_op(shard, op).await {
        Ok(outcome) => outcome.map_err(|refused| refused.code()),
        Err(failure) => Err(failure.code()),
    }
}

fn remember_member(conn: &ConnInfo, group_id: &str, member_id: &str) {
    conn.share_members
        .borrow_mut()
        .insert((group_id.to_string(), member_id.to_string()));
}

fn forget_member(conn: &ConnInfo, group_id: &str, member_id: &str) {
    conn.share_members
        .borrow_mut()
        .remove(&(group_id.to_string(), member_id.to_string()));
}

/// The connection went away: close its members' share sessions and release their records.
pub async fn connection_closed<B: Bus>(bus: &B, conn: &ConnInfo) {
    let members = std::mem::take(&mut *conn.share_members.borrow_mut());
    for (group_id, member_id) in members {
        let shard = group_shard(&group_id, bus.shard_count());
        let closed = bus
            .call_op(
                shard,
                Disconnected {
                    group_id,
                    member_id,
                    conn_id: conn.id,
                },
            )
            .await;
        if let Err(failure) = closed {
            tracing::warn!(?failure, "a share session's shard did not close it");
        }
    }
}

fn node_endpoint(conn: &ConnInfo) -> share_fetch_response::NodeEndpoint {
    let mut node = share_fetch_response::NodeEndpoint::default();
    node.node_id = BROKER_NODE_ID;
    node.host = conn.local_addr.ip().to_string();
    node.port = i32::from(conn.local_addr.port());
    node
}

fn top_level_error_fetch(request: &Request, code: i16, message: Option<&str>) -> Outcome {
    let mut response = ShareFetchResponse::default();
    response.error_code = code;
    response.error_message = message.map(|m| m.to_string());
    respond(request, &response)
}

/// A ShareFetch's limits (module docs of `share::fetch`).
struct FetchLimits {
    max_records: u32,
    batch_size: u32,
    /// ShareAcquireMode 1, record_limit (KIP-1206): MaxRecords is strict.
    record_limit: bool,
    partition_max_bytes: usize,
    min_bytes: usize,
}

/// A partition the shard could not answer for.
fn failed_partition(r: &PartitionRef, error: Option<SharePartitionError>) -> ShareFetchedPartition {
    ShareFetchedPartition {
        partition: r.key(),
        error,
        error_message: None,
        records: Bytes::new(),
        acquired: Vec::new(),
        wait_offset: 0,
        created: false,
    }
}

/// One acquisition walk over the session's partitions in `order`: one call per shard (its
/// partitions together, shards in the order of their first partition), each with what is left
/// of MaxRecords; the walk stops once nothing is left (the partitions not reached answer with
/// no records). With `min_bytes` (0: none), a shard acquires only once the bytes it holds and
/// those of the shards before it reach MinBytes; `true` with the partitions: none did (nothing
/// was acquired; their wait offsets are what a long poll waits for).
///
/// Share partitions the walk creates hand out nothing in it (Kafka answers from the partitions
/// that were ready); only if no other partition had records does the first created one that
/// has some (in order) hand them out, and only to a request that may wait (`may_wait`): Kafka
/// answers a request once the first share partition has finished initializing, unless
/// MaxWaitMs is 0. So a new consumer's first poll of two partitions gets one partition's records.
#[allow(clippy::too_many_arguments)]
async fn acquire_walk<B: Bus>(
    bus: &B,
    group_id: &str,
    member_id: &str,
    order: &[(ShardId, PartitionRef)],
    limits: &FetchLimits,
    min_bytes: usize,
    may_wait: bool,
    acks: &RefCell<PendingAcks>,
) -> (Vec<ShareFetchedPartition>, bool) {
    let walked = walk(
        bus, group_id, member_id, order, limits, min_bytes, false, acks,
    )
    .await;
    let (mut out, unmet) = walked;
    if unmet {
        return (out, true);
    }
    let nothing = out
        .iter()
        .all(|p| p.acquired.is_empty() && p.error.is_none());
    if nothing && may_wait {
        for (i, (shard, r)) in order.iter().enumerate() {
            if !out[i].created {
                continue;
            }
            let one = [(*shard, r.clone())];
            let (mut again, _) = walk(bus, group_id, member_id, &one, limits, 0, true, acks).await;
            let mut again = again.remove(0);
            if again.acquired.is_empty() && again.error.is_none() {
                continue;
            }
            again.created = true;
            out[i] = again;
            break;
        }
    }
    (out, false)
}

/// The walk of [`acquire_walk`]; answers in `order`'s order, and whether MinBytes kept every
/// shard from acquiring. A call to a shard carries the request's acknowledgements there if none
/// was sent yet (`acks`), and the MinBytes still to be found ([`ShareFetchOp::min_bytes`]): a
/// shard that holds less acquires nothing and says what it holds, which counts for the shards
/// after it; once one acquires, the rest acquire what there is, and the shards that held
/// something but declined before it are called again (MaxRecords permitting).
#[allow(clippy::too_many_arguments)]
async fn walk<B: Bus>(
    bus: &B,
    group_id: &str,
    member_id: &str,
    order: &[(ShardId, PartitionRef)],
    limits: &FetchLimits,
    min_bytes: usize,
    acquire_created: bool,
    acks: &RefCell<PendingAcks>,
) -> (Vec<ShareFetchedPartition>, bool) {
    let mut left = u64::from(limits.max_records);
    let mut min_one_batch = true;
    let mut out: Vec<Option<ShareFetchedPartition>> = vec![None; order.len()];
    let indexed = order
        .iter()
        .enumerate()
        .map(|(i, (shard, r))| (*shard, (i, r.clone())))
        .collect();
    // MinBytes still to be found (0 once a shard acquired), and the shards that declined
    // holding something.
    let mut needed = min_bytes;
    let mut declined = Vec::new();
    let mut pending: Vec<(ShardId, Vec<(usize, PartitionRef)>)> = group_in_order(indexed);
    pending.reverse();
    // Acknowledgements a shard applied without waiting for its journal: waited for at the end.
    let mut undurable = Vec::new();
    while let Some((shard, group)) = pending.pop() {
        let reply = if left == 0 {
            None
        } else {
            let taken = acks.borrow_mut().take(shard);
            let (acknowledge, acked) = taken.map_or((None, Vec::new()), |(op, i)| (Some(op), i));
            let op = ShareFetchOp {
                group_id: group_id.to_string(),
                member_id: member_id.to_string(),
                partitions: group.iter().map(|(_, r)| r.clone()).collect(),
                max_records: u32::try_from(left).expect("left of a u32 budget"),
                batch_size: limits.batch_size,
                record_limit: limits.record_limit,
                partition_max_bytes: limits.partition_max_bytes,
                min_one_batch,
                acquire_created,
                acknowledge,
                min_bytes: needed,
                // The last shard's journal flush is the one nothing overlaps (a shard called
                // again after it carries no acknowledgements).
                wait_durable: pending.is_empty(),
            };
            let reply = bus.call_op(shard, op).await;
            if !acked.is_empty() {
                match &reply {
                    Ok(ShareFetchReply {
                        durable_at: Some(seq),
                        acknowledged,
                        ..
                    }) => undurable.push((shard, *seq, acked, acknowledged.clone())),
                    _ => {
                        let answers = reply.as_ref().map_err(Clone::clone);
                        let answers = answers.map(|r| r.acknowledged.clone());
                        acks.borrow_mut().answer(&acked, answers);
                    }
                }
            }
            Some(reply)
        };
        match reply {
            Some(Ok(reply)) => {
                assert_eq!(reply.partitions.len(), group.len());
                match reply.unmet {
                    Some(held) => {
                        assert!(needed > 0, "a shard asked for no MinBytes declined");
                        needed = needed.saturating_sub(held).max(1);
                        if held > 0 {
                            declined.push((shard, group.clone()));
                        }
                    }
                    None if needed > 0 => {
                        // MinBytes is reached: the rest acquire what there is, and so do the
                        // shards that declined holding something, after them.
                        needed = 0;
                        pending.splice(0..0, declined.drain(..).rev());
                    }
                    None => {}
                }
                for ((i, _), p) in group.iter().zip(reply.partitions) {
                    let count: u64 = p
                        .acquired
                        .iter()
                        .map(|a| (a.last - a.first + 1) as u64)
                        .sum();
                    left = left.saturating_sub(count);
                    if !p.records.is_empty() {
                        min_one_batch = false;
                    }
                    out[*i] = Some(p);
                }
            }
            other => {
                // Not reached (the budget is spent: no error), or the shard failed.
                let error = other
                    .and_then(|failed| failed.err())
                    .map(SharePartitionError::Call);
                for (i, r) in &group {
                    out[*i] = Some(failed_partition(r, error.clone()));
                }
            }
        }
    }
    let waits = undurable
        .iter()
        .map(|(shard, seq, ..)| bus.call_op(*shard, JournalDurable { seq: *seq }))
        .collect();
    // The acknowledgements of shards the walk did not call (MaxRecords was spent first) go
    // now, alongside the waits for the flushes it started: one journal flush's wait for the
    // request, not two in a row.
    let (durable, ()) =
        futures_lite::future::zip(join_all(waits), PendingAcks::flush(acks, bus, None)).await;
    for ((_, _, acked, mut results), durable) in undurable.into_iter().zip(durable) {
        let answers = durable.map(|d| {
            ShareAckResult::durable(&mut results, d);
            results
        });
        acks.borrow_mut().answer(&acked, answers);
    }
    let out: Vec<ShareFetchedPartition> = out.into_iter().flatten().collect();
    assert_eq!(out.len(), order.len());
    // No shard acquired: MinBytes is not reached (a shard that failed answers its partitions
    // with its error, which answers the request).
    (out, needed > 0)
}

/// Waits until one of the partitions has data past its offset, or `until`.
async fn wait_for_data<B: Bus>(
    bus: &B,
    waits: Vec<(ShardId, PartitionRef, i64)>,
    until: i64,
    read_committed: bool,
) {
    let now = bus.now_ms();
    let mut by_shard: BTreeMap<ShardId, Vec<(PartitionRef, i64)>> = BTreeMap::new();
    for (shard, r, offset) in waits {
        by_shard.entry(shard).or_default().push((r, offset));
    }
    let calls: Vec<_> = by_shard
        .into_iter()
        .map(|(shard, partitions)| {
            bus.call_op(
                shard,
                WaitOp {
                    partitions,
                    deadline_ms: until,
                    read_committed,
                },
            )
        })
        .collect();
    let pause = (until - now).max(1) as u64;
    if calls.is_empty() {
        bus.sleep_ms(pause).await;
    } else {
        futures_lite::future::or(
            async {
                // The first wait to end ends it (a shard that failed ends it at once).
                let _first = first_of(calls).await;
            },
            bus.sleep_ms(pause),
        )
        .await;
    }
}

/// The request-level checks of a ShareFetch, before anything is applied: a renew
/// acknowledgement fetch with limits, an unknown acquire mode, too many partitions, no group or
/// member id. Returns the group and member ids, or the answer that refuses the request.
fn check_share_fetch(
    request: &Request,
    decoded: &ShareFetchRequest,
) -> Result<(String, String), Outcome> {
    if decoded.is_renew_ack
        && (decoded.max_bytes != 0
            || decoded.min_bytes != 0
            || decoded.max_records != 0
            || decoded.max_wait_ms != 0)
    {
        return Err(top_level_error_fetch(
            request,
            ResponseError::InvalidRequest.code(),
            Some("a renew acknowledgement fetch must set MaxBytes, MinBytes, MaxRecords and MaxWaitMs to 0"),
        ));
    }
    // Kafka 4.4 answers an unknown mode with UNKNOWN_SERVER_ERROR and no message (its
    // ShareAcquireMode.forId throws), observed on the wire; Lockstep matches it.
    if !(0..=SHARE_ACQUIRE_MODE_RECORD_LIMIT).contains(&decoded.share_acquire_mode) {
        return Err(top_level_error_fetch(
            request,
            ResponseError::UnknownServerError.code(),
            None,
        ));
    }
    let named_count: usize = decoded
        .topics
        .iter()
        .map(|t| t.partitions.len())
        .sum::<usize>()
        + decoded
            .forgotten_topics_data
            .iter()
            .map(|t| t.partitions.len())
            .sum::<usize>();
    super::check_count("partitions", named_count, REQUEST_PARTITIONS_MAX)?;
    let group_id = decoded.group_id.clone().unwrap_or_default();
    let member_id = decoded.member_id.clone().unwrap_or_default();
    if group_id.is_empty() || member_id.is_empty() {
        return Err(top_level_error_fetch(
            request,
            ResponseError::InvalidRequest.code(),
            Some("GroupId and MemberId must be set"),
        ));
    }
    Ok((group_id, member_id))
}

/// A ShareFetch's limits over `partitions` partitions: its MaxBytes (capped), the
/// acquisition limits, and how long it may wait (capped).
fn fetch_limits(decoded: &ShareFetchRequest, partitions: usize) -> (usize, FetchLimits, u64) {
    let max_bytes = usize::try_from(decoded.max_bytes)
        .unwrap_or(0)
        .min(FETCH_RESPONSE_BYTES_MAX);
    let max_records = u32::try_from(decoded.max_records)
        .unwrap_or(0)
        .clamp(1, SHARE_FETCH_RECORDS_MAX);
    let limits = FetchLimits {
        max_records,
        // Kafka cuts at BatchSize; a client that sends none (0 or less) gets whole acquisitions.
        batch_size: u32::try_from(decoded.batch_size)
            .ok()
            .filter(|b| *b > 0)
            .unwrap_or(max_records),
        record_limit: decoded.share_acquire_mode == SHARE_ACQUIRE_MODE_RECORD_LIMIT,
        partition_max_bytes: partition_max_bytes(max_bytes, partitions),
        min_bytes: usize::try_from(decoded.min_bytes).unwrap_or(0),
    };
    let wait_ms = u64::try_from(decoded.max_wait_ms)
        .unwrap_or(0)
        .min(FETCH_WAIT_MS_MAX);
    (max_bytes, limits, wait_ms)
}

/// ShareFetch v1–v2. v2 (KIP-1222, KIP-1206): acknowledgements may RENEW; `IsRenewAck`
/// marks a request that only acknowledges (Kafka refuses it with INVALID_REQUEST unless
/// MaxBytes, MinBytes, MaxRecords and MaxWaitMs are all 0, and fetches nothing for it);
/// `ShareAcquireMode` 1 (record_limit, KIP-1206) makes MaxRecords a strict limit (0,
/// batch_optimized, rounds new records up to the end of a log batch); another mode is
/// UNKNOWN_SERVER_ERROR, as Kafka 4.4 answers it.
pub async fn handle_share_fetch<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    let decoded: ShareFetchRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let (group_id, member_id) = match check_share_fetch(request, &decoded) {
        Ok(ids) => ids,
        Err(refused) => return refused,
    };
    let registry = bus.registry();
    let shards = bus.shard_count();
    let epoch = decoded.share_session_epoch;
    let renew = RenewPolicy::of(
        request.api_version,
        registry.group_config(&group_id).renew_acknowledge_enable,
    );

    let mut added: Vec<TopicPartition> = Vec::new();
    let mut acks: Vec<NamedAck> = Vec::new();
    for t in &decoded.topics {
        for p in &t.partitions {
            added.push(TopicPartition::new(t.topic_id, p.partition_index));
            if !p.acknowledgement_batches.is_empty() {
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
                acks.push((
                    resolve(&registry, shards, t.topic_id, p.partition_index),
                    ack_batches(&raw, renew),
                ));
            }
        }
    }
    // Opening a session cannot acknowledge (Kafka: INVALID_REQUEST, no message).
    if epoch == 0 && !acks.is_empty() {
        return top_level_error_fetch(request, ResponseError::InvalidRequest.code(), None);
    }
    let forgotten: Vec<TopicPartition> = decoded
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| TopicPartition::new(t.topic_id, *p))
        })
        .collect();
    let outcome = session(
        bus,
        ShareSessionOp {
            key: SessionKey {
                group_id: group_id.clone(),
                member_id: member_id.clone(),
            },
            epoch,
            added,
            forgotten,
            acknowledge_only: false,
            conn_id: conn.id,
        },
    )
    .await;
    // Session errors carry no message, as Kafka's (nothing of the request is applied).
    let session_partitions = match outcome {
        Err(code) => return top_level_error_fetch(request, code, None),
        Ok(SessionOutcome::Open(partitions)) => {
            remember_member(conn, &group_id, &member_id);
            Some(partitions)
        }
        Ok(SessionOutcome::Closed) => None,
    };

    let acks = RefCell::new(PendingAcks::new(&group_id, &member_id, acks));
    if session_partitions.is_none() {
        PendingAcks::flush(&acks, bus, None).await;
        forget_member(conn, &group_id, &member_id);
        release_everywhere(bus, &group_id, &member_id).await;
    }

    // Acquire from the session's partitions, in Kafka's rotated order.
    let mut unresolved: Vec<(Uuid, i32, i16)> = Vec::new();
    let mut resolved: Vec<(ShardId, PartitionRef)> = Vec::new();
    // A renew acknowledgement fetch acquires nothing.
    let acquiring = if decoded.is_renew_ack {
        None
    } else {
        session_partitions.as_ref()
    };
    for tp in acquiring.into_iter().flatten() {
        match resolve(&registry, shards, tp.topic_id, tp.partition).target {
            Ok(target) => resolved.push(target),
            Err(code) => unresolved.push((tp.topic_id, tp.partition, code)),
        }
    }
    let order = rotate(&resolved, epoch);
    let (max_bytes, limits, wait_ms) = fetch_limits(&decoded, order.len());
    let deadline_ms = bus.now_ms() + wait_ms as i64;
    // The acknowledgements of shards acquisition does not call go alone, alongside; the first
    // call acquisition makes to a shard carries the acknowledgements there.
    let acquiring = !order.is_empty() && max_bytes > 0;
    let alone: Vec<ShardId> = acks
        .borrow()
        .shards()
        .into_iter()
        .filter(|shard| !acquiring || !order.iter().any(|(s, _)| s == shard))
        .collect();
    let fetching = async {
        let mut fetched = Vec::new();
        // MaxBytes 0 hands out nothing, at once (Kafka's per-partition byte split refuses it).
        while acquiring {
            // MinBytes holds until MaxWaitMs passes; then what there is is handed out.
            let check = limits.min_bytes > 1 && bus.now_ms() < deadline_ms;
            let min_bytes = if check { limits.min_bytes } else { 0 };
            let may_wait = wait_ms > 0;
            let (walked, unmet) = acquire_walk(
                bus, &group_id, &member_id, &order, &limits, min_bytes, may_wait, &acks,
            )
            .await;
            fetched = walked;
            let got = fetched
                .iter()
                .any(|p| !p.acquired.is_empty() || p.error.is_some());
            if got {
                break;
            }
            let now = bus.now_ms();
            if now >= deadline_ms {
                if unmet {
                    // MaxWaitMs passed with MinBytes unmet: hand out what there is.
                    fetched = acquire_walk(
                        bus, &group_id, &member_id, &order, &limits, 0, may_wait, &acks,
                    )
                    .await
                    .0;
                }
                break;
            }
            let waits = order
                .iter()
                .zip(&fetched)
                .map(|((shard, r), p)| (*shard, r.clone(), p.wait_offset))
                .collect();
            let until = deadline_ms.min(now + SHARE_FETCH_RECHECK_MS as i64);
            let read_committed = bus.registry().group_config(&group_id).read_committed;
            wait_for_data(bus, waits, until, read_committed).await;
        }
        fetched
    };
    let ((), fetched) =
        futures_lite::future::zip(PendingAcks::flush(&acks, bus, Some(&alone)), fetching).await;
    // Every acknowledgement went out: alone, in a walk's call, or at a walk's end.
    assert!(
        acks.borrow().shards().is_empty(),
        "acknowledgements left unsent"
    );
    let ack_results = acks.into_inner().results;

    let lock_duration_ms = registry
        .group_config(&group_id)
        .share
        .record_lock_duration_ms;
    let mut response = share_fetch_response(fetched, unresolved, ack_results, lock_duration_ms);
    response.node_endpoints = vec![node_endpoint(conn)];
    let payloads = response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().filter_map(|p| p.records.as_ref()));
    respond_gathered(request, &response, payloads)
}

/// A ShareFetch's response: every fetched partition, every acknowledged one, every one that
/// did not resolve, by topic and partition (node endpoints not yet set).
fn share_fetch_response(
    fetched: Vec<ShareFetchedPartition>,
    unresolved: Vec<(Uuid, i32, i16)>,
    ack_results: Vec<(Uuid, i32, AckOutcome)>,
    lock_duration_ms: u64,
) -> ShareFetchResponse {
    let mut by_topic: BTreeMap<Uuid, BTreeMap<i32, share_fetch_response::PartitionData>> =
        BTreeMap::new();
    let blank = |index: i32| {
        let mut p = share_fetch_response::PartitionData::default();
        p.partition_index = index;
        p.current_leader.leader_id = BROKER_NODE_ID;
        p.current_leader.leader_epoch = 0;
        p.records = Some(Bytes::new());
        p
    };
    for p in fetched {
        let entry = by_topic
            .entry(p.partition.topic_id)
            .or_default()
            .entry(p.partition.partition)
            .or_insert_with(|| blank(p.partition.partition));
        entry.error_code = SharePartitionError::code_or_none(p.error.as_ref());
        entry.error_message = p.error_message.clone();
        entry.records = Some(p.records);
        entry.acquired_records = p
            .acquired
            .iter()
            .map(|a| {
                let mut r = share_fetch_response::AcquiredRecords::default();
                r.first_offset = a.first;
                r.last_offset = a.last;
                r.delivery_count = i16::try_from(a.delivery_count).unwrap_or(i16::MAX);
                r
            })
            .collect();
    }
    for (topic_id, partition, code) in unresolved {
        let entry = by_topic
            .entry(topic_id)
            .or_default()
            .entry(partition)
            .or_insert_with(|| blank(partition));
        entry.error_code = code;
    }
    for (topic_id, partition, (code, message)) in ack_results {
        let entry = by_topic
            .entry(topic_id)
            .or_default()
            .entry(partition)
            .or_insert_with(|| blank(partition));
        entry.acknowledge_error_code = code;
        entry.acknowledge_error_message = message;
    }
    let mut response = ShareFetchResponse::default();
    response.acquisition_lock_timeout_ms = lock_duration_ms.min(i32::MAX as u64) as i32;
    response.responses = by_topic
        .into_iter()
        .map(|(topic_id, partitions)| {
            let mut t = share_fetch_response::ShareFetchableTopicResponse::default();
            t.topic_id = topic_id;
            t.partitions = partitions.into_values().collect();
            t
        })
        .collect();
    response
}

/// ShareAcknowledge v1–v2 (v2: AcknowledgeType RENEW, KIP-1222).
pub async fn handle_share_acknowledge<B: Bus>(
    bus: &B,
    conn: &ConnInfo,
    request: &Request,
) -> Outcome {
    let decoded: ShareAcknowledgeRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let count: usize = decoded.topics.iter().map(|t| t.partitions.len()).sum();
    if let Err(refused) = super::check_count("partitions", count, REQUEST_PARTITIONS_MAX) {
        return refused;
    }
    let group_id = decoded.group_id.clone().unwrap_or_default();
    let member_id = decoded.member_id.clone().unwrap_or_default();
    let mut response = ShareAcknowledgeResponse::default();
    if group_id.is_empty() || member_id.is_empty() {
        response.error_code = ResponseError::InvalidRequest.code();
        response.error_message = Some("GroupId and MemberId must be set".to_string());
        return respond(request, &response);
    }
    let outcome = session(
        bus,
        ShareSessionOp {
            key: SessionKey {
                group_id: group_id.clone(),
                member_id: member_id.clone(),
            },
            epoch: decoded.share_session_epoch,
            added: Vec::new(),
            forgotten: Vec::new(),
            acknowledge_only: true,
            conn_id: conn.id,
        },
    )
    .await;
    let closed = match outcome {
        Err(code) => {
            response.error_code = code;
            return respond(request, &response);
        }
        Ok(SessionOutcome::Open(_)) => {
            remember_member(conn, &group_id, &member_id);
            false
        }
        Ok(SessionOutcome::Closed) => true,
    };
    let registry = bus.registry();
    let shards = bus.shard_count();
    let renew = RenewPolicy::of(
        request.api_version,
        registry.group_config(&group_id).renew_acknowledge_enable,
    );
    let acks: Vec<NamedAck> = decoded
        .topics
        .iter()
        .flat_map(|t| {
            let registry = &registry;
            t.partitions.iter().map(move |p| {
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
                (
                    resolve(registry, shards, t.topic_id, p.partition_index),
                    ack_batches(&raw, renew),
                )
            })
        })
        .collect();
    let pending = RefCell::new(PendingAcks::new(&group_id, &member_id, acks));
    PendingAcks::flush(&pending, bus, None).await;
    let results = pending.into_inner().results;
    if closed {
        forget_member(conn, &group_id, &member_id);
        release_everywhere(bus, &group_id, &member_id).await;
    }
    let mut by_topic: BTreeMap<Uuid, Vec<share_acknowledge_response::PartitionData>> =
        BTreeMap::new();
    for (topic_id, partition, (code, message)) in results {
        let mut p = share_acknowledge_response::PartitionData::default();
        p.partition_index = partition;
        p.error_code = code;
        p.error_message = message;
        p.current_leader.leader_id = BROKER_NODE_ID;
        by_topic.entry(topic_id).or_default().push(p);
    }
    response.responses = by_topic
        .into_iter()
        .map(|(topic_id, partitions)| {
            let mut t = share_acknowledge_response::ShareAcknowledgeTopicResponse::default();
            t.topic_id = topic_id;
            t.partitions = partitions;
            t
        })
        .collect();
    let mut node = share_acknowledge_response::NodeEndpoint::default();
    node.node_id = BROKER_NODE_ID;
    node.host = conn.local_addr.ip().to_string();
    node.port = i32::from(conn.local_addr.port());
    response.node_endpoints = vec![node];
    response.acquisition_lock_timeout_ms = registry
        .group_config(&group_id)
        .share
        .record_lock_duration_ms
        .min(i32::MAX as u64) as i32;
    respond(request, &response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ops::{ShardOp, ShardReply, ShareFetchReply};
    use crate::share::AcquiredRange;
    use std::cell::Cell;

    /// Partition shards as a ShareFetch's walk sees them: shard `s` holds `held[s]` bytes on its
    /// one partition (a record per byte); it answers a `ShareFetchOp` as the shard core does
    /// (MinBytes measured in the same call) and counts its calls.
    struct ScriptedShards {
        held: Vec<Cell<usize>>,
        calls: Vec<Cell<usize>>,
    }

    impl ScriptedShards {
        fn new(held: &[usize]) -> ScriptedShards {
            ScriptedShards {
                held: held.iter().map(|h| Cell::new(*h)).collect(),
                calls: held.iter().map(|_| Cell::new(0)).collect(),
            }
        }
        fn calls(&self) -> Vec<usize> {
            self.calls.iter().map(Cell::get).collect()
        }
    }

    impl Bus for ScriptedShards {
        fn local_shard(&self) -> ShardId {
            ShardId(0)
        }
        fn shard_count(&self) -> usize {
            self.held.len()
        }
        fn registry(&self) -> std::sync::Arc<TopicRegistry> {
            std::sync::Arc::new(TopicRegistry::new("p13typed-cluster-id-xx".into()))
        }
        fn now_ms(&self) -> i64 {
            0
        }
        async fn call(&self, shard: ShardId, op: ShardOp) -> ShardReply {
            let ShardOp::ShareFetch(op) = op else {
                panic!("a share fetch walk sends share fetches only: {op:?}")
            };
            let s = usize::from(shard.0);
            self.calls[s].set(self.calls[s].get() + 1);
            let held = self.held[s].get();
            let r = &op.partitions[0];
            let mut p = failed_partition(r, None);
            if op.min_bytes > 0 && held < op.min_bytes {
                return ShardReply::ShareFetched(ShareFetchReply {
                    acknowledged: Vec::new(),
                    durable_at: None,
                    partitions: vec![p],
                    unmet: Some(held),
                });
            }
            let take = held.min(op.max_records as usize);
            if take > 0 {
                p.acquired = vec![AcquiredRange {
                    first: 0,
                    last: take as i64 - 1,
                    delivery_count: 1,
                }];
                p.records = Bytes::from(vec![0u8; take]);
                self.held[s].set(held - take);
            }
            ShardReply::ShareFetched(ShareFetchReply {
                acknowledged: Vec::new(),
                durable_at: None,
                partitions: vec![p],
                unmet: None,
            })
        }
        async fn sleep_ms(&self, _ms: u64) {}
    }

    /// One walk over one partition per shard (shard order); acquired records per shard, whether
    /// MinBytes was unmet, and the calls each shard got.
    fn walk_once(
        held: &[usize],
        min_bytes: usize,
        max_records: u32,
    ) -> (Vec<usize>, bool, Vec<usize>) {
        let bus = ScriptedShards::new(held);
        let order: Vec<(ShardId, PartitionRef)> = (0..held.len())
            .map(|s| {
                let r = PartitionRef {
                    topic: "t".into(),
                    topic_id: Uuid::from_u128(1),
                    partition: s as i32,
                };
                (ShardId(s as u16), r)
            })
            .collect();
        let limits = FetchLimits {
            max_records,
            batch_size: max_records,
            record_limit: false,
            partition_max_bytes: 1 << 20,
            min_bytes,
        };
        let acks = RefCell::new(PendingAcks::new("g", "m", Vec::new()));
        let (out, unmet) = futures_lite::future::block_on(acquire_walk(
            &bus, "g", "m", &order, &limits, min_bytes, false, &acks,
        ));
        let acquired = out
            .iter()
            .map(|p| {
                p.acquired
                    .iter()
                    .map(|a| (a.last - a.first + 1) as usize)
                    .sum()
            })
            .collect();
        (acquired, unmet, bus.calls())
    }

    #[test]
    fn a_min_bytes_fetch_makes_one_call_per_partition_shard() {
        // Enough on one shard, or none asked: one call, records acquired.
        assert_eq!(walk_once(&[500], 100, 1000), (vec![500], false, vec![1]));
        assert_eq!(walk_once(&[500], 0, 1000), (vec![500], false, vec![1]));
        // Not enough: one call, nothing acquired, MinBytes unmet (the long poll waits).
        assert_eq!(walk_once(&[50], 100, 1000), (vec![0], true, vec![1]));
        assert_eq!(
            walk_once(&[30, 30], 100, 1000),
            (vec![0, 0], true, vec![1, 1])
        );
        // The first shard reaches it: the second acquires what it has in its one call.
        assert_eq!(
            walk_once(&[150, 20], 100, 1000),
            (vec![150, 20], false, vec![1, 1])
        );
        // Only the second holds anything: one call each, the second acquires.
        assert_eq!(
            walk_once(&[0, 150], 100, 1000),
            (vec![0, 150], false, vec![1, 1])
        );
        // Reached only across shards: the second acquires with what the first held counted,
        // then the first is called again for what it held (the one case of a second call).
        assert_eq!(
            walk_once(&[60, 60], 100, 1000),
            (vec![60, 60], false, vec![2, 1])
        );
        // MaxRecords spent by the second: the first is not called again.
        assert_eq!(
            walk_once(&[60, 60], 100, 60),
            (vec![0, 60], false, vec![1, 1])
        );
    }

    /// Two shards holding records and acknowledgements: shard 0's call acquires the whole
    /// budget and starts its journal flush without waiting; shard 1 is not called to acquire.
    /// Its flush is not awaited alone: the wait for shard 0's (which here completes only once
    /// shard 1 has its acknowledgements) goes alongside shard 1's acknowledgement.
    struct FlushingShards {
        acked_alone: Cell<bool>,
        polls: Cell<usize>,
    }

    impl Bus for FlushingShards {
        fn local_shard(&self) -> ShardId {
            ShardId(0)
        }
        fn shard_count(&self) -> usize {
            2
        }
        fn registry(&self) -> std::sync::Arc<TopicRegistry> {
            std::sync::Arc::new(TopicRegistry::new("lead10-cluster-id-xxxx".into()))
        }
        fn now_ms(&self) -> i64 {
            0
        }
        async fn call(&self, shard: ShardId, op: ShardOp) -> ShardReply {
            match op {
                ShardOp::ShareFetch(op) => {
                    assert_eq!(shard, ShardId(0), "the budget is spent on shard 0");
                    let mut p = failed_partition(&op.partitions[0], None);
                    p.acquired = vec![AcquiredRange {
                        first: 0,
                        last: i64::from(op.max_records) - 1,
                        delivery_count: 1,
                    }];
                    p.records = Bytes::from(vec![0u8; op.max_records as usize]);
                    let acked = op
                        .acknowledge
                        .expect("shard 0's acknowledgements ride along");
                    ShardReply::ShareFetched(ShareFetchReply {
                        acknowledged: vec![ShareAckResult::ok(); acked.partitions.len()],
                        durable_at: Some(7),
                        partitions: vec![p],
                        unmet: None,
                    })
                }
                ShardOp::ShareAcknowledge(op) => {
                    assert_eq!(shard, ShardId(1));
                    self.acked_alone.set(true);
                    ShardReply::ShareAcknowledged(vec![ShareAckResult::ok(); op.partitions.len()])
                }
                ShardOp::JournalDurable { seq } => {
                    assert_eq!((shard, seq), (ShardId(0), 7));
                    futures_lite::future::poll_fn(|cx| {
                        if self.acked_alone.get() {
                            return std::task::Poll::Ready(());
                        }
                        self.polls.set(self.polls.get() + 1);
                        assert!(
                            self.polls.get() < 100,
                            "shard 1's acknowledgement waits for shard 0's flush"
                        );
                        cx.waker().wake_by_ref();
                        std::task::Poll::Pending
                    })
                    .await;
                    ShardReply::JournalDurable(Ok(()))
                }
                other => panic!("unexpected op {other:?}"),
            }
        }
        async fn sleep_ms(&self, _ms: u64) {}
    }

    #[test]
    fn acknowledgements_past_the_spent_budget_go_alongside_the_flush_wait() {
        let bus = FlushingShards {
            acked_alone: Cell::new(false),
            polls: Cell::new(0),
        };
        let order: Vec<(ShardId, PartitionRef)> = (0..2)
            .map(|s| {
                let r = PartitionRef {
                    topic: "t".into(),
                    topic_id: Uuid::from_u128(1),
                    partition: s,
                };
                (ShardId(s as u16), r)
            })
            .collect();
        let acks = order
            .iter()
            .map(|(shard, r)| {
                let named = Named {
                    topic_id: r.topic_id,
                    partition: r.partition,
                    target: Ok((*shard, r.clone())),
                };
                (
                    named,
                    Ok(vec![AckBatch::new(0, 9, AcknowledgeType::Accept)]),
                )
            })
            .collect();
        let acks = RefCell::new(PendingAcks::new("g", "m", acks));
        let limits = FetchLimits {
            max_records: 10,
            batch_size: 10,
            record_limit: false,
            partition_max_bytes: 1 << 20,
            min_bytes: 0,
        };
        let (out, unmet) = futures_lite::future::block_on(acquire_walk(
            &bus, "g", "m", &order, &limits, 0, false, &acks,
        ));
        assert!(!unmet);
        assert_eq!(out[0].acquired.len(), 1);
        assert!(out[1].acquired.is_empty());
        let acks = acks.into_inner();
        assert!(acks.shards().is_empty(), "every acknowledgement was sent");
        assert!(acks.results.iter().all(|(_, _, r)| r.0 == 0));
    }

    #[test]
    fn renew_is_refused_below_v2_and_when_disabled() {
        let batch: &[(i64, i64, &[i8])] = &[(0, 2, &[1, 4, 2])];
        assert_eq!(RenewPolicy::of(1, true), RenewPolicy::Unknown);
        assert_eq!(RenewPolicy::of(2, false), RenewPolicy::Disabled);
        assert_eq!(RenewPolicy::of(2, true), RenewPolicy::Allowed);
        // Kafka 4.4 on the wire: 42 with no message; 121 with its message.
        let refused = ack_batches(batch, RenewPolicy::Unknown).unwrap_err();
        assert_eq!(refused, (ResponseError::InvalidRequest.code(), None));
        let refused = ack_batches(batch, RenewPolicy::Disabled).unwrap_err();
        assert_eq!(
            refused,
            (
                ResponseError::InvalidRecordState.code(),
                Some("Renewing acquisition locks is not enabled for the group.".to_string())
            )
        );
        let ok = ack_batches(batch, RenewPolicy::Allowed).unwrap();
        assert_eq!(
            ok[0].types,
            vec![
                AcknowledgeType::Accept,
                AcknowledgeType::Renew,
                AcknowledgeType::Release
            ]
        );
        // Types 0-3 pass under every policy; 5 never does.
        for policy in [
            RenewPolicy::Unknown,
            RenewPolicy::Disabled,
            RenewPolicy::Allowed,
        ] {
            assert!(ack_batches(&[(0, 3, &[0, 1, 2, 3])], policy).is_ok());
            let (code, _) = ack_batches(&[(0, 0, &[5])], policy).unwrap_err();
            assert_eq!(code, ResponseError::InvalidRequest.code());
        }
    }
}
