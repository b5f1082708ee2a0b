//! What a `read_committed` consumer sees of a partition: Fetch with isolation level
//! READ_COMMITTED from an offset up to the last stable offset, with Kafka's filter of aborted
//! transactions applied (the consumer side of `Fetcher`/`CompletedFetch`).
//!
//! The filter ([`committed`], pure): the broker lists the aborted transactions overlapping the
//! fetched range as (producer id, first offset). Walking the records in offset order, an aborted
//! transaction becomes open for its producer at its first offset; while it is open, that
//! producer's transactional records are dropped; the producer's next control record (its abort
//! marker) closes it. Control records are never returned. Records at or past the LSO are not
//! returned (the broker does not send them under READ_COMMITTED; the filter checks anyway).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::{fetch_request, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Record;

use super::admin;
use super::connection::{ClientError, NodePool, Result};
use super::share_consumer::decode_batches;

/// Fetch versions this module speaks (v4+ has the isolation level and aborted transactions;
/// v13+ names topics by id).
pub const FETCH_VERSIONS: (i16, i16) = (4, 12);
/// Bytes one Fetch asks for per partition.
pub const FETCH_PARTITION_BYTES_MAX: i32 = 1024 * 1024;
/// Fetches one [`read_partition`] call may make.
pub const FETCHES_PER_READ_MAX: usize = 100_000;

/// A committed data record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedRecord {
    pub offset: i64,
    pub producer_id: i64,
    pub key: Option<bytes::Bytes>,
    pub value: Option<bytes::Bytes>,
}

/// The read_committed filter (module docs): `records` in offset order, `aborted` as (producer
/// id, first offset), `lso` the last stable offset.
pub fn committed(records: &[Record], aborted: &[(i64, i64)], lso: i64) -> Vec<CommittedRecord> {
    // First offsets per producer, in order: an aborted transaction opens when the walk reaches
    // its first offset.
    let mut starts: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (pid, first) in aborted {
        starts.entry(*first).or_default().push(*pid);
    }
    let mut open: BTreeSet<i64> = BTreeSet::new();
    let mut out = Vec::new();
    for r in records {
        // Every aborted transaction that started at or before this record is open (a start at
        // an offset compaction removed still counts).
        while let Some((&first, _)) = starts.first_key_value() {
            if first > r.offset {
                break;
            }
            let (_, pids) = starts.pop_first().expect("non-empty");
            open.extend(pids);
        }
        if r.offset >= lso {
            break;
        }
        if r.control {
            open.remove(&r.producer_id);
            continue;
        }
        if r.transactional && open.contains(&r.producer_id) {
            continue;
        }
        out.push(CommittedRecord {
            offset: r.offset,
            producer_id: r.producer_id,
            key: r.key.clone(),
            value: r.value.clone(),
        });
    }
    out
}

/// The committed records of `topic`/`partition` from `from_offset` up to its last stable
/// offset at the time of the last fetch.
pub fn read_partition(
    nodes: &mut NodePool,
    topic: &str,
    partition: i32,
    from_offset: i64,
) -> Result<Vec<CommittedRecord>> {
    let md = admin::metadata(nodes.bootstrap()?, Some(&[topic]))?;
    for b in &md.brokers {
        nodes.set_addr(b.id, b.addr());
    }
    let leader = md.leader(topic, partition).ok_or_else(|| {
        ClientError::InvalidArgument(format!("{topic}/{partition}: no leader in metadata"))
    })?;
    let mut offset = from_offset;
    let mut records: Vec<Record> = Vec::new();
    let mut aborted: Vec<(i64, i64)> = Vec::new();
    let mut lso = from_offset;
    for _ in 0..FETCHES_PER_READ_MAX {
        let mut p = fetch_request::FetchPartition::default();
        p.partition = partition;
        p.fetch_offset = offset;
        p.partition_max_bytes = FETCH_PARTITION_BYTES_MAX;
        let mut t = fetch_request::FetchTopic::default();
        t.topic = TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions = vec![p];
        let mut r = FetchRequest::default();
        r.replica_id = (-1).into();
        r.max_wait_ms = 0;
        r.min_bytes = 0;
        r.max_bytes = FETCH_PARTITION_BYTES_MAX;
        r.isolation_level = 1;
        r.session_epoch = -1;
        r.topics = vec![t];
        let (lo, hi) = FETCH_VERSIONS;
        let (_, back) = nodes.node(leader)?.send_negotiated(&r, lo, hi)?;
        let context = || format!("Fetch read_committed {topic}/{partition}");
        if back.error_code != 0 {
            return Err(ClientError::kafka(back.error_code, None, context()));
        }
        let part = back
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| ClientError::Protocol(format!("{}: partition missing", context())))?;
        if part.error_code != 0 {
            return Err(ClientError::kafka(part.error_code, None, context()));
        }
        lso = part.last_stable_offset;
        aborted.extend(
            part.aborted_transactions
                .iter()
                .flatten()
                .map(|a| (i64::from(a.producer_id), a.first_offset)),
        );
        let fetched = decode_batches(part.records.clone().unwrap_or_default())?;
        let next = fetched.iter().map(|r| r.offset + 1).max();
        records.extend(fetched.into_iter().filter(|r| r.offset >= offset));
        match next {
            Some(next) if next > offset && next < lso => offset = next,
            _ => break,
        }
    }
    aborted.sort_unstable();
    aborted.dedup();
    Ok(committed(&records, &aborted, lso))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::records::TimestampType;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn rec(offset: i64, pid: i64, transactional: bool, control: bool) -> Record {
        Record {
            transactional,
            control,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: 0,
            timestamp: 0,
            key: None,
            value: Some(Bytes::from(format!("{offset}"))),
            headers: Default::default(),
            delete_horizon: false,
        }
    }

    #[test]
    fn aborted_ranges_are_dropped_per_producer() {
        // p1: 0,1 committed (marker 2); p2: 3,5 aborted (marker 6); p1: 4 committed (7);
        // plain 8; p2 9 open (LSO 9).
        let log = vec![
            rec(0, 1, true, false),
            rec(1, 1, true, false),
            rec(2, 1, true, true),
            rec(3, 2, true, false),
            rec(4, 1, true, false),
            rec(5, 2, true, false),
            rec(6, 2, true, true),
            rec(7, 1, true, true),
            rec(8, -1, false, false),
            rec(9, 2, true, false),
        ];
        let got: Vec<i64> = committed(&log, &[(2, 3)], 9)
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(got, vec![0, 1, 4, 8]);
    }

    /// Random logs of a few producers' transactions against a per-transaction model: a record
    /// is returned iff it is a plain record or its transaction committed, and below the LSO.
    #[test]
    fn committed_against_a_model() {
        for seed in 0..300u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut log = Vec::new();
            let mut aborted = Vec::new();
            let mut expected = Vec::new();
            // Per producer: (first offset, will commit?, offsets so far) of its open txn.
            let mut open: BTreeMap<i64, (i64, bool, Vec<i64>)> = BTreeMap::new();
            let mut offset = 0i64;
            for _ in 0..rng.gen_range(0..60) {
                let pid = rng.gen_range(1..4i64);
                match rng.gen_range(0..5) {
                    0 => {
                        log.push(rec(offset, -1, false, false));
                        expected.push(offset);
                    }
                    1 if open.contains_key(&pid) => {
                        let (first, commit, offsets) = open.remove(&pid).unwrap();
                        log.push(rec(offset, pid, true, true));
                        if commit {
                            expected.extend(offsets);
                        } else {
                            aborted.push((pid, first));
                        }
                    }
                    _ => {
                        let commit = rng.gen_bool(0.5);
                        let e = open.entry(pid).or_insert((offset, commit, Vec::new()));
                        e.2.push(offset);
                        log.push(rec(offset, pid, true, false));
                    }
                }
                offset += 1;
            }
            // The LSO: the first offset of the oldest open transaction.
            let lso = open
                .values()
                .map(|(first, ..)| *first)
                .min()
                .unwrap_or(offset);
            expected.retain(|o| *o < lso);
            expected.sort_unstable();
            aborted.sort_unstable();
            let got: Vec<i64> = committed(&log, &aborted, lso)
                .iter()
                .map(|r| r.offset)
                .collect();
            assert_eq!(got, expected, "seed {seed}");
        }
    }
}
