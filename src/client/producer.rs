//! A minimal producer: one record batch (magic v2, uncompressed, non-idempotent) to one partition's
//! leader with acks=-1, returning the base offset the broker assigned. Enough to fill topics in
//! tests; no batching across calls, no retries beyond one metadata refresh on NOT_LEADER.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    produce_request::{PartitionProduceData, TopicProduceData},
    ProduceRequest, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::admin;
use super::connection::{ClientError, NodePool, Result};

/// Produce versions this client implements (v3–v12 address topics by name; v13 by id).
pub const PRODUCE_VERSIONS: (i16, i16) = (3, 12);
use super::code::NOT_LEADER_OR_FOLLOWER;

/// A record to produce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Create time in ms since the epoch; -1 for "now".
    pub timestamp: i64,
}

impl ProducerRecord {
    /// A record with a value, no key, timestamp "now".
    pub fn value(value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            key: None,
            value: Some(value.into()),
            timestamp: -1,
        }
    }
}

/// Encodes `records` as one uncompressed magic-v2 batch with offsets 0..n (the broker assigns the
/// real base offset).
pub fn encode_batch(records: &[ProducerRecord]) -> Result<Bytes> {
    encode_batch_as(records, None)
}

/// The producer identity a batch carries: an idempotent or transactional producer's id, epoch
/// and the sequence number of the batch's first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchIdentity {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// The transactional attribute (the batch belongs to the producer's open transaction).
    pub transactional: bool,
}

/// [`encode_batch`] with a producer identity (`None`: not idempotent, producer id -1).
pub fn encode_batch_as(
    records: &[ProducerRecord],
    identity: Option<BatchIdentity>,
) -> Result<Bytes> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: identity.is_some_and(|id| id.transactional),
            control: false,
            partition_leader_epoch: -1,
            producer_id: identity.map_or(-1, |id| id.producer_id),
            producer_epoch: identity.map_or(-1, |id| id.producer_epoch),
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // RecordBatchEncoder keeps records in one batch only while offset - sequence is
            // constant; without an identity offset - 1 gives the batch base sequence -1 (not
            // idempotent).
            sequence: match identity {
                Some(id) => id.base_sequence.wrapping_add(i as i32),
                None => i as i32 - 1,
            },
            timestamp: if r.timestamp < 0 { now_ms } else { r.timestamp },
            key: r.key.clone(),
            value: r.value.clone(),
            headers: Default::default(),
            delete_horizon: false,
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
    .map_err(|e| ClientError::InvalidArgument(format!("encode record batch: {e}")))?;
    Ok(buf.freeze())
}

/// Produces to partition leaders found through Metadata.
#[derive(Debug)]
pub struct Producer {
    nodes: NodePool,
    /// (topic, partition) → leader node, from the last Metadata; dropped on NOT_LEADER and on
    /// connection errors.
    leaders: std::collections::HashMap<(String, i32), i32>,
}

impl Producer {
    /// A producer that bootstraps from `bootstrap` (`host:port`); connects at first use.
    pub fn new(bootstrap: &str) -> Self {
        Producer {
            nodes: NodePool::new(bootstrap, "lockstep-producer"),
            leaders: std::collections::HashMap::new(),
        }
    }

    fn leader(&mut self, topic: &str, partition: i32) -> Result<i32> {
        let key = (topic.to_string(), partition);
        if let Some(&node) = self.leaders.get(&key) {
            return Ok(node);
        }
        let md = admin::metadata(self.nodes.bootstrap()?, Some(&[topic]))?;
        for b in &md.brokers {
            self.nodes.set_addr(b.id, b.addr());
        }
        let node = md.leader(topic, partition).ok_or_else(|| {
            ClientError::InvalidArgument(format!("{topic}/{partition}: no leader in metadata"))
        })?;
        self.leaders.insert(key, node);
        Ok(node)
    }

    /// Produces `records` as one batch to `topic`/`partition` with acks=-1; returns the base
    /// offset. An empty `records` is an error. Retries once, with fresh metadata, after
    /// NOT_LEADER_OR_FOLLOWER (the batch was not appended); other errors are returned as they are.
    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        records: &[ProducerRecord],
    ) -> Result<i64> {
        if records.is_empty() {
            return Err(ClientError::InvalidArgument("no records to produce".into()));
        }
        let batch = encode_batch(records)?;
        let mut last_error = None;
        for _attempt in 0..2 {
            let leader = self.leader(topic, partition)?;
            match self.produce_to(leader, topic, partition, batch.clone()) {
                // Not appended: safe to retry at the new leader.
                Err(e) if e.kafka_code() == Some(NOT_LEADER_OR_FOLLOWER) => {
                    self.leaders.remove(&(topic.to_string(), partition));
                    last_error = Some(e);
                }
                // Maybe appended: no retry (this producer is not idempotent), but look the
                // leader up again next time.
                Err(e) => {
                    self.leaders.remove(&(topic.to_string(), partition));
                    return Err(e);
                }
                ok => return ok,
            }
        }
        Err(last_error.expect("loop ran"))
    }

    fn produce_to(&mut self, node: i32, topic: &str, partition: i32, batch: Bytes) -> Result<i64> {
        produce_one(&mut self.nodes, node, None, topic, partition, batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::RecordBatchDecoder;

    #[test]
    fn encode_batch_makes_one_non_idempotent_batch() {
        let records: Vec<ProducerRecord> = (0..100)
            .map(|i| ProducerRecord::value(format!("v{i}")))
            .collect();
        let mut bytes = encode_batch(&records).unwrap();
        let info = RecordBatchDecoder::decode_batch_info(&mut bytes.clone()).unwrap();
        assert_eq!(info.len(), 1);
        assert_eq!(info[0].record_count, 100);
        assert_eq!(info[0].base_sequence, -1);
        assert_eq!(info[0].producer_id, -1);
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        assert_eq!(set.records.len(), 100);
        assert_eq!(set.records[99].offset, 99);
    }

    #[test]
    fn encode_batch_as_carries_the_transactional_identity() {
        let records: Vec<ProducerRecord> = (0..7)
            .map(|i| ProducerRecord::value(format!("v{i}")))
            .collect();
        let identity = BatchIdentity {
            producer_id: 4242,
            producer_epoch: 3,
            base_sequence: 10,
            transactional: true,
        };
        let mut bytes = encode_batch_as(&records, Some(identity)).unwrap();
        let info = RecordBatchDecoder::decode_batch_info(&mut bytes.clone()).unwrap();
        assert_eq!(info.len(), 1);
        assert_eq!(info[0].record_count, 7);
        assert_eq!(info[0].base_sequence, 10);
        assert_eq!(info[0].producer_id, 4242);
        assert_eq!(info[0].producer_epoch, 3);
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        assert!(set.records.iter().all(|r| r.transactional && !r.control));
        assert_eq!(set.records[6].sequence, 16);
    }
}

/// One Produce (acks=all) of one batch to one partition at broker `node`, naming
/// `transactional_id` if the batch is transactional: the batch's base offset, or the broker's
/// error for the partition.
pub(crate) fn produce_one(
    nodes: &mut NodePool,
    node: i32,
    transactional_id: Option<&str>,
    topic: &str,
    partition: i32,
    batch: Bytes,
) -> Result<i64> {
    let mut data = PartitionProduceData::default();
    data.index = partition;
    data.records = Some(batch);
    let mut topic_data = TopicProduceData::default();
    topic_data.name = TopicName(StrBytes::from_string(topic.to_string()));
    topic_data.partition_data.push(data);
    let mut request = ProduceRequest::default();
    request.transactional_id =
        transactional_id.map(|id| TransactionalId(StrBytes::from_string(id.to_string())));
    request.acks = -1;
    request.timeout_ms = 30_000;
    request.topic_data.push(topic_data);
    let (lo, hi) = PRODUCE_VERSIONS;
    let (_, response) = nodes.node(node)?.send_negotiated(&request, lo, hi)?;
    let p = response
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .find(|p| p.index == partition)
        .ok_or_else(|| {
            ClientError::Protocol(format!("Produce {topic}/{partition}: partition missing"))
        })?;
    if p.error_code != 0 {
        let what = if transactional_id.is_some() {
            "transactional Produce"
        } else {
            "Produce"
        };
        return Err(ClientError::kafka(
            p.error_code,
            p.error_message.as_ref(),
            format!("{what} {topic}/{partition}"),
        ));
    }
    Ok(p.base_offset)
}
