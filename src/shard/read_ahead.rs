//! Read-ahead of the log bytes an op is about to read: the shard state says which
//! parts of which segment files the op's reads would take from the files
//! ([`PartitionLog::read_ahead`]): a Fetch ([`ShardState::fetch_read_ahead`]), a ShareFetch and
//! its MinBytes probe ([`ShardState::share_fetch_read_ahead`], from where each share partition
//! will read, a share partition the op creates included), a DLQ copy's read of the archived
//! records ([`ShardState::dlq_read_ahead`]). The I/O reads them (`ShardIo::read_ahead`: the
//! runtime through io_uring, `O_DIRECT`, into aligned buffers) and the op hands them to the
//! logs ([`ShardState::fill_read_cache`]) in the synchronous section that then runs the op, so
//! its reads find them in memory (one copy, from the engine's buffer into the answer's
//! records). The op plans again after the read (`shard::exec`'s `read_ahead_rounds`): a flush
//! that completed meanwhile may have moved a tail past bytes the first plan took as in memory,
//! a lock expiry may have made records below it available.
//!
//! Memory: each log keeps at most `LOG_READ_CACHE_BYTES_MAX` (the chunks its current read
//! needs stay), and at most [`SHARD_READ_CACHE_LOGS_MAX`] logs of the shard keep read-ahead
//! bytes besides those of the op filling them: the least recently filled drop theirs first,
//! never one the op reads (an op over more logs keeps them all until the next fill).
//!
//! Nothing here is needed for correctness: a part not read ahead (an error, a race with a roll
//! or retention, more rounds of races than `READ_AHEAD_ROUNDS_MAX`) is read with `pread`
//! ([`PartitionLog::file_reads`] counts them).

use super::ops::{FetchOp, ShareFetchOp};
use super::share_dlq::DlqCopy;
use super::share_group::AutoOffsetReset;
use super::state::ShardState;
use crate::constants::{SHARD_READ_CACHE_LOGS_MAX, SHARE_FETCH_READ_BYTES_MAX};
use crate::log::{CachedBytes, PartitionLog, ReadAhead};
use crate::model::TopicPartition;
use crate::shard::share_state::ShareKey;
use crate::storage::file::Storage;
use std::collections::BTreeSet;

/// One part of a segment file to read ahead for a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionReadAhead {
    pub partition: TopicPartition,
    pub ahead: ReadAhead,
}

/// What an op is about to read: the partitions it reads (their read-ahead bytes are kept while
/// it fills) and the parts of segment files none of their logs holds in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadAheadPlan {
    pub partitions: BTreeSet<TopicPartition>,
    pub parts: Vec<PartitionReadAhead>,
}

impl ReadAheadPlan {
    /// The segment-file parts, for the I/O.
    pub fn reads(&self) -> Vec<ReadAhead> {
        self.parts.iter().map(|p| p.ahead.clone()).collect()
    }

    fn add(&mut self, partition: &TopicPartition, parts: Vec<ReadAhead>) {
        self.partitions.insert(*partition);
        for ahead in parts {
            // Reads of one batch each (DLQ copies) often plan the same blocks.
            let covered = self.parts.iter().any(|p| {
                p.partition == *partition
                    && p.ahead.path == ahead.path
                    && p.ahead.position <= ahead.position
                    && ahead.position + ahead.len <= p.ahead.position + p.ahead.len
            });
            if !covered {
                self.parts.push(PartitionReadAhead {
                    partition: *partition,
                    ahead,
                });
            }
        }
    }
}

fn of<S: Storage>(
    plan: &mut ReadAheadPlan,
    partition: &TopicPartition,
    log: &PartitionLog<S>,
    offset: i64,
    max_bytes: usize,
) {
    plan.partitions.insert(*partition);
    let Ok(offset) = u64::try_from(offset) else {
        return;
    };
    plan.add(partition, log.read_ahead(offset, max_bytes));
}

impl<S: Storage + Clone> ShardState<S> {
    /// What a Fetch's reads would take from the files.
    pub fn fetch_read_ahead(&self, op: &FetchOp) -> ReadAheadPlan {
        let mut plan = ReadAheadPlan::default();
        for want in &op.partitions {
            if let Ok(partition) = self.lookup(&want.partition) {
                let bytes = want.max_bytes.min(op.max_bytes).max(1);
                let key = want.partition.key();
                of(&mut plan, &key, &partition.log, want.fetch_offset, bytes);
            }
        }
        plan
    }

    /// What a ShareFetch's reads (its MinBytes probe's and its acquisition's) would take from
    /// the files: from each share partition's next fetch offset (the lowest available record:
    /// the op's releases are applied before it plans), or, for a share partition the op
    /// creates, from where it will start (its recovered state, or the group's
    /// `share.auto.offset.reset`), if the op reads from it.
    pub fn share_fetch_read_ahead(&self, op: &ShareFetchOp, now_ms: u64) -> ReadAheadPlan {
        let mut plan = ReadAheadPlan::default();
        if op.max_records == 0 {
            return plan;
        }
        let bytes = op.partition_max_bytes.min(SHARE_FETCH_READ_BYTES_MAX);
        let config = self.registry().group_config(&op.group_id);
        for r in &op.partitions {
            let key = ShareKey {
                group_id: op.group_id.clone(),
                partition: r.key(),
            };
            let Ok(partition) = self.lookup(r) else {
                continue;
            };
            let log = &partition.log;
            let next = match self.share.live(&key) {
                Some(sp) => Some(sp.next_fetch_offset()),
                None if !op.acquire_created && op.min_bytes == 0 => continue,
                None => match self.share.recovered_next_fetch_offset(&key, config.share) {
                    Some(next) => Some(next),
                    None => match config.auto_offset_reset {
                        AutoOffsetReset::Latest => continue,
                        AutoOffsetReset::Earliest => None,
                        AutoOffsetReset::ByDuration(ms) => {
                            let since = now_ms.saturating_sub(ms);
                            let since = i64::try_from(since).unwrap_or(i64::MAX);
                            plan.add(&key.partition, log.read_ahead_at_timestamp(since, bytes));
                            continue;
                        }
                    },
                },
            };
            let start = log.log_start_offset() as i64;
            let from = next.unwrap_or(start).max(start);
            if from >= partition.high_watermark() {
                plan.partitions.insert(key.partition);
                continue;
            }
            of(&mut plan, &key.partition, log, from, bytes);
        }
        plan
    }

    /// What the DLQ copies `copies` read from the logs (`dlq_produces`: the batch of
    /// each copied record, when its group copies records).
    pub fn dlq_read_ahead(&self, copies: &[DlqCopy]) -> ReadAheadPlan {
        let mut plan = ReadAheadPlan::default();
        for (r, copy) in copies
            .iter()
            .filter_map(|c| self.dlq_source(c).map(|r| (r, c)))
        {
            if let Ok(partition) = self.lookup(&r) {
                of(&mut plan, &r.key(), &partition.log, copy.offset, 1);
            }
        }
        plan
    }

    /// Hands the logs the bytes read ahead for `plan` (`reads[i]` for `plan.parts[i]`: the
    /// bytes read, of them valid, or `None` if the read failed; parts of partitions gone are
    /// ignored), then drops the read-ahead bytes of the logs least recently filled past
    /// [`SHARD_READ_CACHE_LOGS_MAX`], never those of the plan's partitions.
    pub fn fill_read_cache(
        &mut self,
        plan: &ReadAheadPlan,
        reads: Vec<Option<(u64, CachedBytes)>>,
    ) {
        assert_eq!(reads.len(), plan.parts.len(), "one read per part");
        for (part, read) in plan.parts.iter().zip(reads) {
            let (Some((read, data)), Some(p)) = (read, self.partition_mut(&part.partition)) else {
                continue;
            };
            p.log.fill_read_cache(&part.ahead, read, data);
        }
        let mut cached = std::mem::take(&mut self.read_cached);
        cached.retain(|p| !plan.partitions.contains(p));
        let own: Vec<TopicPartition> = plan
            .partitions
            .iter()
            .filter(|p| {
                self.partition(p)
                    .is_some_and(|p| p.log.read_cache_bytes() > 0)
            })
            .copied()
            .collect();
        let keep = SHARD_READ_CACHE_LOGS_MAX.max(own.len());
        cached.extend(own);
        while cached.len() > keep {
            let victim = cached.pop_front().expect("longer than keep");
            if let Some(p) = self.partition_mut(&victim) {
                p.log.drop_read_cache();
            }
        }
        self.read_cached = cached;
    }

    /// The partitions whose logs hold read-ahead bytes, least recently filled first.
    pub fn read_cached_partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.read_cached.iter()
    }

    /// Reads of the partition's log that took bytes from the files (`pread`, the fallback;
    /// [`PartitionLog::file_reads`]); 0 if it is not served here.
    pub fn log_file_reads(&self, partition: &TopicPartition) -> u64 {
        self.partition(partition).map_or(0, |p| p.log.file_reads())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::BatchBuilder;
    use crate::model::ShardId;
    use crate::shard::ops::{FetchPartitionOp, PartitionRef, ProduceOp};
    use crate::shard::registry::TopicRegistry;
    use crate::storage::file::SimStorage;
    use bytes::Bytes;
    use std::path::Path;
    use std::rc::Rc;
    use std::sync::Arc;
    use uuid::Uuid;

    const PARTITIONS: i32 = SHARD_READ_CACHE_LOGS_MAX as i32 + 4;

    fn pref(partition: i32) -> PartitionRef {
        PartitionRef {
            topic: "t".into(),
            topic_id: Uuid::from_u128(1),
            partition,
        }
    }

    /// Every partition holds 1.6 MiB, its first segment (1 MiB) sealed, on the file.
    fn state() -> (ShardState<SimStorage>, SimStorage) {
        let mut reg = TopicRegistry::new("c".into());
        let segments = [("segment.bytes".to_string(), Some((1 << 20).to_string()))];
        reg.create_topic("t", Uuid::from_u128(1), PARTITIONS, &segments)
            .unwrap();
        let storage = SimStorage::new();
        let (mut state, _) = ShardState::open(
            ShardId(0),
            1,
            Path::new("/data"),
            storage.clone(),
            Arc::new(reg),
            0,
        )
        .unwrap();
        for p in 0..PARTITIONS {
            for _ in 0..100 {
                let mut b = BatchBuilder::new(1_000);
                for _ in 0..10 {
                    b.record(1_000, None, Some(&[b'v'; 1_600]));
                }
                let op = ProduceOp {
                    partition: pref(p),
                    records: Bytes::from(b.build()),
                    acks: -1,
                    timeout_ms: 1_000,
                    verification_guard: None,
                };
                assert_eq!(state.produce(&op, 0).result.error, None);
            }
            let log = &mut state.partition_mut(&pref(p).key()).unwrap().log;
            log.flush().unwrap();
            assert!(log.segment_count() >= 2);
        }
        (state, storage)
    }

    /// What the engine does: each part read from the file.
    fn read(storage: &SimStorage, plan: &ReadAheadPlan) -> Vec<Option<(u64, CachedBytes)>> {
        plan.parts
            .iter()
            .map(|p| {
                let file = storage.contents(&p.ahead.path)?;
                let from = (p.ahead.position as usize).min(file.len());
                let to = (from + p.ahead.len as usize).min(file.len());
                let data: CachedBytes = Rc::new(file[from..to].to_vec());
                Some(((to - from) as u64, data))
            })
            .collect()
    }

    fn fetch_op(partitions: std::ops::Range<i32>) -> FetchOp {
        FetchOp {
            partitions: partitions
                .map(|p| FetchPartitionOp {
                    partition: pref(p),
                    fetch_offset: 0,
                    max_bytes: 512 * 1024,
                })
                .collect(),
            max_bytes: 64 << 20,
            read_committed: false,
        }
    }

    fn cached(state: &ShardState<SimStorage>) -> Vec<i32> {
        (0..PARTITIONS)
            .filter(|p| {
                let log = &state.partition(&pref(*p).key()).unwrap().log;
                log.read_cache_bytes() > 0
            })
            .collect()
    }

    fn file_reads(state: &ShardState<SimStorage>) -> u64 {
        (0..PARTITIONS)
            .map(|p| state.log_file_reads(&pref(p).key()))
            .sum()
    }

    /// An op over more logs than the shard keeps read ahead keeps the read-ahead of all of
    /// them (its reads take nothing from the files); the next op drops the least recently
    /// filled down to the bound, never its own.
    #[test]
    fn an_op_over_more_logs_than_the_bound_keeps_its_own_read_ahead() {
        let (mut state, storage) = state();
        let all = fetch_op(0..PARTITIONS);
        let plan = state.fetch_read_ahead(&all);
        assert_eq!(plan.partitions.len(), PARTITIONS as usize);
        assert!(plan.parts.len() >= PARTITIONS as usize);
        let reads = read(&storage, &plan);
        state.fill_read_cache(&plan, reads);
        assert_eq!(cached(&state), (0..PARTITIONS).collect::<Vec<_>>());
        let fetched = state.fetch(&all);
        assert!(fetched
            .iter()
            .all(|f| f.error.is_none() && f.records.len() > 400_000));
        assert_eq!(file_reads(&state), 0);

        // Two of them again, still in memory: the others drop theirs down to the bound,
        // the least recently filled first.
        let few = fetch_op(PARTITIONS - 2..PARTITIONS);
        let plan = state.fetch_read_ahead(&few);
        assert!(plan.parts.is_empty(), "{plan:?}");
        state.fill_read_cache(&plan, Vec::new());
        let kept = cached(&state);
        assert_eq!(kept.len(), SHARD_READ_CACHE_LOGS_MAX);
        assert_eq!(
            kept,
            (PARTITIONS - SHARD_READ_CACHE_LOGS_MAX as i32..PARTITIONS).collect::<Vec<_>>()
        );
        assert_eq!(
            state.read_cached_partitions().count(),
            SHARD_READ_CACHE_LOGS_MAX
        );
        state.fetch(&few);
        assert_eq!(file_reads(&state), 0);

        // Without the read-ahead, the reads take their bytes from the files.
        let first = fetch_op(0..1);
        state.fetch(&first);
        assert!(file_reads(&state) > 0);
    }
}
