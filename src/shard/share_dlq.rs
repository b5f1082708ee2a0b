//! KIP-1191 dead-letter queues for share groups: records a share partition ARCHIVES because a
//! consumer REJECTed them or because they reached `share.delivery.count.limit` are copied into
//! the group's DLQ topic (`errors.deadletterqueue.topic.name`), as Kafka 4.4 does.
//!
//! What a DLQ record is (Kafka 4.4's `ShareGroupDLQStateManager`, measured against the reference
//! broker): one record per archived offset, timestamp = the copy's wall clock, key and value of
//! the original only with `errors.deadletterqueue.copy.record.enable=true` (else none), and six
//! UTF-8 string headers in this order: `__dlq.errors.topic`, `__dlq.errors.partition`,
//! `__dlq.errors.offset`, `__dlq.errors.group`, `__dlq.errors.delivery.count`,
//! `__dlq.errors.message` ("Offset rejected by client." or "Offset delivery count exceeded the
//! threshold."). It goes to DLQ partition `source partition % DLQ partition count`.
//!
//! The DLQ topic must exist (Kafka's `errors.deadletterqueue.auto.create.topics.enable` defaults
//! to false; Lockstep never creates it), carry the topic opt-in
//! `errors.deadletterqueue.group.enable=true`, start with the required prefix
//! (`constants::SHARE_DLQ_TOPIC_NAME_PREFIX`, Kafka's `errors.deadletterqueue.topic.name.prefix`
//! default) and not with `__`. Otherwise, as in Kafka ("Failed to write to DLQ, proceeding to
//! ARCHIVED regardless"), the records are archived without a copy and a warning is logged.
//!
//! Pure and synchronous: [`acquired_runs`] before a state change and [`newly_archived`] after it
//! find what to copy; [`DlqTap`] holds the copies until the runtime takes them; [`resolve_target`]
//! and [`encode_batch`] turn them into one produce per DLQ partition.
//!
//! Durability rule (Lockstep's): the runtime makes the copies durable in the DLQ (a produce with
//! acks=all, awaited) before it appends the ARCHIVED state of the operation that archived them to
//! the state journal, and an acknowledgement is answered only after both. A crash before the
//! ARCHIVED state is durable redelivers the records (they were never durably archived), so a DLQ
//! may hold duplicates (at least once, like Kafka's). Lock expiry in housekeeping copies in a
//! task of its own; there the ARCHIVED state may become durable first (README known limit).

use crate::constants::SHARE_DLQ_TOPIC_NAME_PREFIX;
use crate::shard::registry::TopicRegistry;
use crate::share::{AckBatch, AcknowledgeType, RecordState, SharePartition};
use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use std::collections::BTreeSet;
use uuid::Uuid;

/// Kafka's `HEADER_DLQ_ERRORS_*` names, in the order Kafka writes them.
pub const HEADER_TOPIC: &str = "__dlq.errors.topic";
pub const HEADER_PARTITION: &str = "__dlq.errors.partition";
pub const HEADER_OFFSET: &str = "__dlq.errors.offset";
pub const HEADER_GROUP: &str = "__dlq.errors.group";
pub const HEADER_DELIVERY_COUNT: &str = "__dlq.errors.delivery.count";
pub const HEADER_MESSAGE: &str = "__dlq.errors.message";

/// Why a record was archived into the DLQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DlqCause {
    /// Acknowledged with REJECT (Kafka's `CLIENT_REJECT`).
    Rejected,
    /// Released or timed out at `share.delivery.count.limit` (`DELIVERY_COUNT_EXCEEDED`).
    DeliveryLimit,
}

impl DlqCause {
    /// Kafka's `__dlq.errors.message`.
    pub fn message(self) -> &'static str {
        match self {
            DlqCause::Rejected => "Offset rejected by client.",
            DlqCause::DeliveryLimit => "Offset delivery count exceeded the threshold.",
        }
    }
}

/// One record to copy into a group's DLQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DlqCopy {
    pub group_id: String,
    pub topic_id: Uuid,
    pub partition: i32,
    pub offset: i64,
    pub delivery_count: u16,
    pub cause: DlqCause,
    /// The original key and value (filled in from the log when the group copies records).
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

/// The DLQ copies a shard owes, and which groups have a DLQ (only their partitions are watched).
#[derive(Debug, Default)]
pub struct DlqTap {
    /// Groups whose `errors.deadletterqueue.topic.name` is set (refreshed with the registry).
    pub groups: BTreeSet<String>,
    pending: Vec<DlqCopy>,
}

impl DlqTap {
    /// Recomputes the watched groups from the registry's group configs.
    pub fn refresh(&mut self, registry: &TopicRegistry) {
        self.groups = registry
            .group_configs
            .keys()
            .filter(|g| registry.group_config(g).dlq_topic.is_some())
            .cloned()
            .collect();
    }

    pub fn watches(&self, group_id: &str) -> bool {
        self.groups.contains(group_id)
    }

    pub fn push(&mut self, copies: impl IntoIterator<Item = DlqCopy>) {
        self.pending.extend(copies);
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn take(&mut self) -> Vec<DlqCopy> {
        std::mem::take(&mut self.pending)
    }
}

/// The ACQUIRED runs of `sp` (first, last, delivery count): what a release, an expiry or an
/// acknowledgement may archive.
pub fn acquired_runs(sp: &SharePartition) -> Vec<(i64, i64, u16)> {
    sp.runs()
        .filter(|r| r.state == RecordState::Acquired)
        .map(|r| (r.first, r.last, r.delivery_count))
        .collect()
}

/// The offsets of `before` (ACQUIRED runs) that are ARCHIVED now, with why: REJECTed by one of
/// `acks`, or at the delivery limit. Offsets archived otherwise (a GAP acknowledgement) are not
/// copied (Kafka copies only REJECT and the delivery limit).
pub fn newly_archived(
    before: &[(i64, i64, u16)],
    sp: &SharePartition,
    acks: &[AckBatch],
    delivery_count_limit: u16,
) -> Vec<(i64, u16, DlqCause)> {
    let rejected = |offset: i64| {
        acks.iter().any(|b| {
            (b.first..=b.last).contains(&offset)
                && b.types
                    .get(if b.types.len() == 1 {
                        0
                    } else {
                        (offset - b.first) as usize
                    })
                    .is_some_and(|t| *t == AcknowledgeType::Reject)
        })
    };
    let mut out = Vec::new();
    for &(first, last, count) in before {
        for offset in first..=last {
            let archived = sp
                .record(offset)
                .is_some_and(|v| v.state == RecordState::Archived);
            // Below the start offset now: archived and then passed by SPSO.
            let passed = offset < sp.spso();
            if !(archived || passed) {
                continue;
            }
            if rejected(offset) {
                out.push((offset, count, DlqCause::Rejected));
            } else if count >= delivery_count_limit && (archived || passed) && !acked(acks, offset)
            {
                out.push((offset, count, DlqCause::DeliveryLimit));
            }
        }
    }
    out
}

/// Whether `acks` acknowledged `offset` with ACCEPT or GAP (those are not the delivery limit).
fn acked(acks: &[AckBatch], offset: i64) -> bool {
    acks.iter().any(|b| {
        (b.first..=b.last).contains(&offset)
            && b.types
                .get(if b.types.len() == 1 {
                    0
                } else {
                    (offset - b.first) as usize
                })
                .is_some_and(|t| matches!(t, AcknowledgeType::Accept | AcknowledgeType::Gap))
    })
}

/// Where a group's DLQ copies go: the topic's name, id and partition count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DlqTarget {
    pub topic: String,
    pub topic_id: Uuid,
    pub partitions: i32,
    pub copy_record: bool,
}

/// Checks the group's DLQ topic as Kafka's `validateDlqTopic` does; the error is Kafka's message.
pub fn resolve_target(registry: &TopicRegistry, group_id: &str) -> Result<DlqTarget, String> {
    let config = registry.group_config(group_id);
    let Some(topic) = config.dlq_topic else {
        return Err(format!(
            "DLQ topic is not configured for share group {group_id}."
        ));
    };
    if topic.starts_with("__") {
        return Err(format!(
            "Configured DLQ topic name in share group: {group_id} cannot start with __, topic: {topic}."
        ));
    }
    if !topic.starts_with(SHARE_DLQ_TOPIC_NAME_PREFIX) {
        return Err(format!(
            "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: \
             {group_id}, topic: {topic}, prefix: {SHARE_DLQ_TOPIC_NAME_PREFIX}."
        ));
    }
    let Some(meta) = registry.topic(&topic) else {
        return Err(format!(
            "DLQ topic does not exist and auto create is disabled on cluster for share group: \
             {group_id}, topic: {topic}."
        ));
    };
    if meta
        .configs
        .get("errors.deadletterqueue.group.enable")
        .map(String::as_str)
        != Some("true")
    {
        return Err(format!(
            "DLQ is not enabled on configured DLQ topic for share group: {group_id}, topic: {topic}."
        ));
    }
    Ok(DlqTarget {
        topic,
        topic_id: meta.id,
        partitions: meta.partitions,
        copy_record: config.dlq_copy_record,
    })
}

/// The DLQ partition a copy of source partition `partition` goes to (Kafka's).
pub fn target_partition(partition: i32, dlq_partitions: i32) -> i32 {
    assert!(dlq_partitions > 0 && partition >= 0);
    partition % dlq_partitions
}

/// Kafka's DLQ headers of one copy, in Kafka's order.
pub fn headers(copy: &DlqCopy, source_topic: &str) -> Vec<(&'static str, String)> {
    vec![
        (HEADER_TOPIC, source_topic.to_string()),
        (HEADER_PARTITION, copy.partition.to_string()),
        (HEADER_OFFSET, copy.offset.to_string()),
        (HEADER_GROUP, copy.group_id.clone()),
        (HEADER_DELIVERY_COUNT, copy.delivery_count.to_string()),
        (HEADER_MESSAGE, copy.cause.message().to_string()),
    ]
}

/// One uncompressed magic-v2 batch (offsets from 0, not idempotent) of the DLQ records of
/// `copies`, timestamped `now_ms`.
pub fn encode_batch(
    copies: &[DlqCopy],
    source_topic: impl Fn(&DlqCopy) -> String,
    copy_record: bool,
    now_ms: i64,
) -> Bytes {
    assert!(!copies.is_empty(), "a DLQ batch holds at least one record");
    let records: Vec<Record> = copies
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut h: IndexMap<StrBytes, Option<Bytes>> = IndexMap::new();
            for (name, value) in headers(c, &source_topic(c)) {
                h.insert(StrBytes::from_static_str(name), Some(Bytes::from(value)));
            }
            Record {
                transactional: false,
                control: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32 - 1,
                timestamp: now_ms,
                key: if copy_record { c.key.clone() } else { None },
                value: if copy_record { c.value.clone() } else { None },
                headers: h,
                delete_horizon: false,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("an uncompressed batch of in-memory records encodes");
    buf.freeze()
}

/// The key and value of the record at `offset` in `batches` (whole batches read from the log);
/// `None` if it is not there or does not decode (the copy then carries headers only, as Kafka's
/// "DLQ records will be produced with headers only").
pub fn find_record(batches: &[u8], offset: i64) -> Option<(Option<Bytes>, Option<Bytes>)> {
    let mut buf = Bytes::copy_from_slice(batches);
    let set = RecordBatchDecoder::decode(&mut buf).ok()?;
    set.records
        .into_iter()
        .find(|r| r.offset == offset)
        .map(|r| (r.key, r.value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::ShareConfig;

    fn copy(offset: i64, cause: DlqCause) -> DlqCopy {
        DlqCopy {
            group_id: "g".into(),
            topic_id: Uuid::nil(),
            partition: 1,
            offset,
            delivery_count: 2,
            cause,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
        }
    }

    #[test]
    fn batch_carries_kafkas_headers_in_order_and_the_record_only_when_copying() {
        let copies = [
            copy(7, DlqCause::Rejected),
            copy(9, DlqCause::DeliveryLimit),
        ];
        for copy_record in [true, false] {
            let mut bytes = encode_batch(&copies, |_| "src".into(), copy_record, 1_000);
            crate::log::batch::validate(&bytes).unwrap();
            let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
            assert_eq!(set.records.len(), 2);
            let r = &set.records[1];
            let h: Vec<(String, String)> = r
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        String::from_utf8(v.clone().unwrap().to_vec()).unwrap(),
                    )
                })
                .collect();
            let want: Vec<(String, String)> = [
                (HEADER_TOPIC, "src"),
                (HEADER_PARTITION, "1"),
                (HEADER_OFFSET, "9"),
                (HEADER_GROUP, "g"),
                (HEADER_DELIVERY_COUNT, "2"),
                (
                    HEADER_MESSAGE,
                    "Offset delivery count exceeded the threshold.",
                ),
            ]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
            assert_eq!(h, want);
            assert_eq!(r.timestamp, 1_000);
            assert_eq!(r.key.is_some(), copy_record);
            assert_eq!(r.value.is_some(), copy_record);
            let found = find_record(&encode_batch(&copies, |_| "s".into(), true, 5), 1).unwrap();
            assert_eq!(found.1.as_deref(), Some(&b"v"[..]));
        }
    }

    #[test]
    fn reject_and_delivery_limit_are_copied_gap_and_accept_are_not() {
        use crate::share::AcknowledgeType as T;
        let config = ShareConfig {
            delivery_count_limit: 2,
            ..ShareConfig::default()
        };
        let mut sp = SharePartition::new(config, 0);
        // First delivery of 0..=5.
        sp.acquire("m", 6, 6, 0);
        let before = acquired_runs(&sp);
        let acks = vec![AckBatch {
            first: 0,
            last: 5,
            types: vec![
                T::Accept,
                T::Reject,
                T::Gap,
                T::Release,
                T::Release,
                T::Reject,
            ],
        }];
        sp.acknowledge("m", &acks, 0).unwrap();
        let got = newly_archived(&before, &sp, &acks, 2);
        assert_eq!(
            got,
            vec![(1, 1, DlqCause::Rejected), (5, 1, DlqCause::Rejected)]
        );
        // Second delivery of 3 and 4, released again: at the limit.
        sp.acquire("m", 6, 6, 0);
        let before = acquired_runs(&sp);
        let acks = vec![AckBatch::new(3, 4, T::Release)];
        sp.acknowledge("m", &acks, 0).unwrap();
        let got = newly_archived(&before, &sp, &acks, 2);
        assert_eq!(
            got,
            vec![
                (3, 2, DlqCause::DeliveryLimit),
                (4, 2, DlqCause::DeliveryLimit)
            ]
        );
    }

    #[test]
    fn lock_expiry_at_the_limit_is_copied_below_it_is_not() {
        let config = ShareConfig {
            delivery_count_limit: 2,
            ..ShareConfig::default()
        };
        let lock = config.record_lock_duration_ms;
        let mut sp = SharePartition::new(config, 0);
        sp.acquire("m", 2, 2, 0);
        let before = acquired_runs(&sp);
        sp.expire_locks(lock + 1);
        assert!(newly_archived(&before, &sp, &[], 2).is_empty());
        sp.acquire("m", 2, 2, lock + 1);
        let before = acquired_runs(&sp);
        sp.expire_locks(2 * lock + 2);
        assert_eq!(
            newly_archived(&before, &sp, &[], 2),
            vec![
                (0, 2, DlqCause::DeliveryLimit),
                (1, 2, DlqCause::DeliveryLimit)
            ]
        );
    }

    #[test]
    fn target_partition_is_kafkas_modulo() {
        assert_eq!(target_partition(5, 3), 2);
        assert_eq!(target_partition(0, 1), 0);
    }
}
