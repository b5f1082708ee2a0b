//! Fetch v4–18 (topic ids from v13) with long polling, and ListOffsets v1–10.
//!
//! Fetch: partitions are grouped by owning shard and read concurrently (one [`FetchOp`] per
//! shard). If fewer than `min_bytes` came back and `max_wait_ms` has not passed, the handler
//! asks every involved shard to wait for data ([`WaitOp`]), takes the first answer or the
//! deadline, and reads again. The response honours `max_bytes` across shards in request order
//! (the first non-empty partition always keeps one batch, so a consumer progresses) and each
//! partition's `partition_max_bytes`. Fetch sessions (KIP-227) are not created: the broker
//! answers session id 0, which tells clients to keep sending full fetch requests.
//!
//! Only durable data is returned: the high watermark is the durable end offset. With
//! isolation_level 1 (read_committed) data is returned only below the last stable offset, with
//! the aborted transactions that overlap it (`crate::producer_txn::partition`); control batches are
//! returned as stored, and clients skip them. ListOffsets read_committed answers latest = LSO.

use super::{respond, respond_gathered, Bus, Outcome};
use crate::constants::{FETCH_RESPONSE_BYTES_MAX, FETCH_WAIT_MS_MAX};
use crate::model::{partition_shard, ShardId};
use crate::protocol::codec::{decode_body, Request};
use crate::shard::join::{first_of, join_all};
use crate::shard::ops::{
    FetchError, FetchOp, FetchPartitionOp, FetchedPartition, ListOffsetsError, ListOffsetsOp,
    ListedOffset, PartitionRef, WaitOp,
};
use crate::shard::registry::TopicRegistry;
use bytes::Bytes;
use kafka_protocol::messages::{
    fetch_response, list_offsets_response, FetchRequest, FetchResponse, ListOffsetsRequest,
    ListOffsetsResponse,
};
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// A ListOffsets partition routed to its shard: (topic index, partition index) in the request,
/// and what to ask.
type ListItem = ((usize, usize), (PartitionRef, i64));

/// Fetch v13 names topics by id.
const FETCH_TOPIC_IDS_FROM_VERSION: i16 = 13;

/// One requested partition: where it is in the request and how to reach it.
struct Wanted {
    topic_index: usize,
    partition: i32,
    target: Result<(ShardId, FetchPartitionOp), i16>,
}

fn resolve(
    registry: &TopicRegistry,
    request: &FetchRequest,
    version: i16,
    shard_count: usize,
) -> Vec<Wanted> {
    let mut wanted = Vec::new();
    for (topic_index, topic) in request.topics.iter().enumerate() {
        let meta = if version >= FETCH_TOPIC_IDS_FROM_VERSION {
            registry.topic_by_id(&topic.topic_id)
        } else {
            registry.topic(&topic.topic)
        };
        for p in &topic.partitions {
            let target = match meta {
                None if version >= FETCH_TOPIC_IDS_FROM_VERSION => {
                    Err(ResponseError::UnknownTopicId.code())
                }
                None => Err(ResponseError::UnknownTopicOrPartition.code()),
                Some(meta) if p.partition < 0 || p.partition >= meta.partitions => {
                    Err(ResponseError::UnknownTopicOrPartition.code())
                }
                Some(meta) => Ok((
                    partition_shard(&meta.name, p.partition, shard_count),
                    FetchPartitionOp {
                        partition: PartitionRef {
                            topic: meta.name.clone(),
                            topic_id: meta.id,
                            partition: p.partition,
                        },
                        fetch_offset: p.fetch_offset,
                        max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0),
                    },
                )),
            };
            wanted.push(Wanted {
                topic_index,
                partition: p.partition,
                target,
            });
        }
    }
    wanted
}

/// One partition's read: the shard's answer, or the code of the failed call.
type Read = Result<FetchedPartition, i16>;

/// Reads every resolved partition once (one op per shard, concurrently).
async fn read_round<B: Bus>(
    bus: &B,
    wanted: &[Wanted],
    max_bytes: usize,
    read_committed: bool,
) -> Vec<Option<Read>> {
    let mut by_shard: BTreeMap<ShardId, Vec<usize>> = BTreeMap::new();
    for (i, w) in wanted.iter().enumerate() {
        if let Ok((shard, _)) = &w.target {
            by_shard.entry(*shard).or_default().push(i);
        }
    }
    let groups: Vec<(ShardId, Vec<usize>)> = by_shard.into_iter().collect();
    let calls = groups
        .iter()
        .map(|(shard, indices)| {
            let partitions = indices
                .iter()
                .map(|&i| match &wanted[i].target {
                    Ok((_, op)) => op.clone(),
                    Err(_) => unreachable!("only resolved partitions are grouped"),
                })
                .collect();
            bus.call_op(
                *shard,
                FetchOp {
                    partitions,
                    max_bytes,
                    read_committed,
                },
            )
        })
        .collect();
    let replies = join_all(calls).await;
    let mut out: Vec<Option<Read>> = wanted.iter().map(|_| None).collect();
    for ((_, indices), reply) in groups.iter().zip(replies) {
        match reply {
            Ok(parts) => {
                assert_eq!(parts.len(), indices.len(), "one answer per partition");
                for (&i, part) in indices.iter().zip(parts) {
                    out[i] = Some(Ok(part));
                }
            }
            Err(failure) => {
                let code = failure.code();
                for &i in indices {
                    out[i] = Some(Err(code));
                }
            }
        }
    }
    out
}

/// Waits until any shard reports new data for its partitions, or `wait_ms` passes.
async fn wait_for_data<B: Bus>(
    bus: &B,
    wanted: &[Wanted],
    deadline_ms: i64,
    wait_ms: u64,
    read_committed: bool,
) {
    let mut by_shard: BTreeMap<ShardId, Vec<(PartitionRef, i64)>> = BTreeMap::new();
    for w in wanted {
        if let Ok((shard, op)) = &w.target {
            by_shard
                .entry(*shard)
                .or_default()
                .push((op.partition.clone(), op.fetch_offset));
        }
    }
    let waits: Vec<_> = by_shard
        .into_iter()
        .map(|(shard, partitions)| {
            bus.call_op(
                shard,
                WaitOp {
                    partitions,
                    deadline_ms,
                    read_committed,
                },
            )
        })
        .collect();
    if waits.is_empty() {
        bus.sleep_ms(wait_ms).await;
        return;
    }
    futures_lite::future::or(
        async {
            // The first wait to end ends it (a shard that failed ends it at once).
            let _first = first_of(waits).await;
        },
        bus.sleep_ms(wait_ms),
    )
    .await;
}

/// Applies the response-wide byte budget in request order.
fn apply_budget(parts: &mut [Option<Read>], max_bytes: usize) {
    let mut used = 0usize;
    for part in parts.iter_mut().flatten().flatten() {
        let len = part.records.len();
        if len == 0 {
            continue;
        }
        if used == 0 || used + len <= max_bytes {
            used += len;
        } else {
            part.records = Bytes::new();
            part.aborted.clear();
        }
    }
}

/// Fetch.
pub async fn handle_fetch<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: FetchRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    if let Err(refused) = super::check_count(
        "partitions",
        decoded.topics.iter().map(|t| t.partitions.len()).sum(),
        crate::constants::REQUEST_PARTITIONS_MAX,
    ) {
        return refused;
    }
    let version = request.api_version;
    let mut response = FetchResponse::default();
    let session_error = if version >= 7 && decoded.session_id != 0 {
        Some(ResponseError::FetchSessionIdNotFound.code())
    } else if version >= 7 && decoded.session_epoch != 0 && decoded.session_epoch != -1 {
        Some(ResponseError::InvalidFetchSessionEpoch.code())
    } else {
        None
    };
    if let Some(code) = session_error {
        response.error_code = code;
        return respond(request, &response);
    }
    let registry = bus.registry();
    let wanted = resolve(&registry, &decoded, version, bus.shard_count());
    let max_bytes = usize::try_from(decoded.max_bytes)
        .unwrap_or(0)
        .min(FETCH_RESPONSE_BYTES_MAX);
    let min_bytes = usize::try_from(decoded.min_bytes).unwrap_or(0);
    let wait_ms = u64::try_from(decoded.max_wait_ms)
        .unwrap_or(0)
        .min(FETCH_WAIT_MS_MAX);
    let deadline_ms = bus.now_ms() + wait_ms as i64;
    let read_committed = version >= 4 && decoded.isolation_level == 1;
    let mut parts = loop {
        let parts = read_round(bus, &wanted, max_bytes, read_committed).await;
        let total: usize = parts
            .iter()
            .flatten()
            .flatten()
            .map(|p| p.records.len())
            .sum();
        let any_error = parts
            .iter()
            .flatten()
            .any(|p| p.as_ref().map_or(true, |p| p.error.is_some()));
        let now = bus.now_ms();
        if min_bytes == 0
            || total >= min_bytes
            || any_error
            || now >= deadline_ms
            || wanted.is_empty()
        {
            break parts;
        }
        wait_for_data(
            bus,
            &wanted,
            deadline_ms,
            (deadline_ms - now) as u64,
            read_committed,
        )
        .await;
        if bus.now_ms() >= deadline_ms {
            break read_round(bus, &wanted, max_bytes, read_committed).await;
        }
    };
    apply_budget(&mut parts, max_bytes);

    let mut topics: Vec<fetch_response::FetchableTopicResponse> = decoded
        .topics
        .iter()
        .map(|t| {
            let mut out = fetch_response::FetchableTopicResponse::default();
            if version >= FETCH_TOPIC_IDS_FROM_VERSION {
                out.topic_id = t.topic_id;
            } else {
                out.topic = t.topic.clone();
            }
            out
        })
        .collect();
    for (w, part) in wanted.iter().zip(parts) {
        let (error_code, part) = match (&w.target, part) {
            (Err(code), _) => (*code, FetchedPartition::empty()),
            (Ok(_), Some(Err(code))) => (code, FetchedPartition::empty()),
            (Ok(_), Some(Ok(part))) => (FetchError::code_or_none(part.error), part),
            (Ok(_), None) => unreachable!("every resolved partition is answered"),
        };
        let mut p = fetch_response::PartitionData::default();
        p.partition_index = w.partition;
        p.error_code = error_code;
        p.high_watermark = part.high_watermark;
        p.last_stable_offset = part.last_stable_offset;
        if version >= 5 {
            p.log_start_offset = part.log_start_offset;
        }
        // As Kafka 4.4: null for read_uncommitted, the overlapping aborted transactions for
        // read_committed.
        p.aborted_transactions = read_committed.then(|| {
            part.aborted
                .iter()
                .map(|a| {
                    let mut t = fetch_response::AbortedTransaction::default();
                    t.producer_id = a.producer_id.into();
                    t.first_offset = a.first_offset;
                    t
                })
                .collect()
        });
        p.records = Some(part.records);
        topics[w.topic_index].partitions.push(p);
    }
    response.responses = topics;
    let payloads = response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().filter_map(|p| p.records.as_ref()));
    respond_gathered(request, &response, payloads)
}

/// ListOffsets v1–10: earliest (-2), latest (-1), max timestamp (-3), or by timestamp.
pub async fn handle_list_offsets<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: ListOffsetsRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    if let Err(refused) = super::check_count(
        "partitions",
        decoded.topics.iter().map(|t| t.partitions.len()).sum(),
        crate::constants::REQUEST_PARTITIONS_MAX,
    ) {
        return refused;
    }
    let version = request.api_version;
    let registry = bus.registry();
    let read_committed = version >= 2 && decoded.isolation_level == 1;
    // Per partition: its error code and what was found.
    let mut answers: Vec<Vec<(i16, ListedOffset)>> = Vec::new();
    let mut by_shard: BTreeMap<ShardId, Vec<ListItem>> = BTreeMap::new();
    for (ti, topic) in decoded.topics.iter().enumerate() {
        let meta = registry.topic(&topic.name);
        let mut row = Vec::with_capacity(topic.partitions.len());
        for (pi, p) in topic.partitions.iter().enumerate() {
            row.push((
                ResponseError::UnknownTopicOrPartition.code(),
                ListedOffset::NONE,
            ));
            if let Some(meta) =
                meta.filter(|m| p.partition_index >= 0 && p.partition_index < m.partitions)
            {
                let shard = partition_shard(&meta.name, p.partition_index, bus.shard_count());
                let r = PartitionRef {
                    topic: meta.name.clone(),
                    topic_id: meta.id,
                    partition: p.partition_index,
                };
                by_shard
                    .entry(shard)
                    .or_default()
                    .push(((ti, pi), (r, p.timestamp)));
            }
        }
        answers.push(row);
    }
    let groups: Vec<_> = by_shard.into_iter().collect();
    let calls = groups
        .iter()
        .map(|(shard, items)| {
            let partitions = items.iter().map(|(_, item)| item.clone()).collect();
            bus.call_op(
                *shard,
                ListOffsetsOp {
                    partitions,
                    read_committed,
                },
            )
        })
        .collect();
    for ((_, items), reply) in groups.iter().zip(join_all(calls).await) {
        match reply {
            Ok(listed) => {
                assert_eq!(listed.len(), items.len());
                for (((ti, pi), _), answer) in items.iter().zip(listed) {
                    answers[*ti][*pi] = match answer {
                        Ok(found) => (0, found),
                        Err(e) => (ListOffsetsError::code(e), ListedOffset::NONE),
                    };
                }
            }
            Err(failure) => {
                let code = failure.code();
                for ((ti, pi), _) in items {
                    answers[*ti][*pi].0 = code;
                }
            }
        }
    }
    let mut response = ListOffsetsResponse::default();
    response.topics = decoded
        .topics
        .iter()
        .zip(answers)
        .map(|(topic, row)| {
            let mut t = list_offsets_response::ListOffsetsTopicResponse::default();
            t.name = topic.name.clone();
            t.partitions = topic
                .partitions
                .iter()
                .zip(row)
                .map(|(p, (error_code, answer))| {
                    let mut out = list_offsets_response::ListOffsetsPartitionResponse::default();
                    out.partition_index = p.partition_index;
                    out.error_code = error_code;
                    out.timestamp = answer.timestamp;
                    out.offset = answer.offset;
                    if version >= 4 {
                        out.leader_epoch = if error_code == 0 { 0 } else { -1 };
                    }
                    out
                })
                .collect();
            t
        })
        .collect();
    respond(request, &response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(len: usize) -> Option<Read> {
        Some(Ok(FetchedPartition {
            error: None,
            high_watermark: 10,
            last_stable_offset: 10,
            log_start_offset: 0,
            records: Bytes::from(vec![0u8; len]),
            aborted: Vec::new(),
        }))
    }

    #[test]
    fn budget_keeps_the_first_non_empty_partition_and_fits_the_rest() {
        let mut parts = vec![part(0), part(300), part(50), part(100), None, part(40)];
        apply_budget(&mut parts, 100);
        let lens: Vec<usize> = parts
            .iter()
            .map(|p| p.as_ref().map_or(0, |p| p.as_ref().unwrap().records.len()))
            .collect();
        assert_eq!(lens, vec![0, 300, 0, 0, 0, 0]);
        let mut parts = vec![part(30), part(50), part(30)];
        apply_budget(&mut parts, 100);
        let lens: Vec<usize> = parts
            .iter()
            .map(|p| p.as_ref().map_or(0, |p| p.as_ref().unwrap().records.len()))
            .collect();
        assert_eq!(lens, vec![30, 50, 0]);
    }
}
