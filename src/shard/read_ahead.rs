//! Read-ahead of the log bytes a Fetch or ShareFetch is about to read (issue 14): the shard
//! state says which parts of which segment files the op's reads would take from the files
//! ([`PartitionLog::read_ahead`]); the runtime reads them through io_uring (`O_DIRECT`, into
//! aligned buffers) and hands them back ([`ShardState::fill_read_cache`]) before it runs the
//! op, so the op's synchronous reads find them in memory (one copy, from the engine's buffer
//! into the answer's records). Nothing here is needed for correctness: a part not read ahead
//! (an error, a race with a roll or retention, an eviction) is read with `pread`.

use super::ops::{FetchOp, ShareFetchOp};
use super::state::ShardState;
use crate::constants::SHARE_FETCH_READ_BYTES_MAX;
use crate::log::{CachedBytes, PartitionLog, ReadAhead};
use crate::model::TopicPartition;
use crate::shard::share_state::ShareKey;
use crate::storage::file::Storage;

/// One part of a segment file to read ahead for a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionReadAhead {
    pub partition: TopicPartition,
    pub ahead: ReadAhead,
}

fn of<S: Storage>(
    partition: &TopicPartition,
    log: &PartitionLog<S>,
    offset: i64,
    max_bytes: usize,
    out: &mut Vec<PartitionReadAhead>,
) {
    let Ok(offset) = u64::try_from(offset) else {
        return;
    };
    out.extend(
        log.read_ahead(offset, max_bytes)
            .into_iter()
            .map(|ahead| PartitionReadAhead {
                partition: partition.clone(),
                ahead,
            }),
    );
}

impl<S: Storage + Clone> ShardState<S> {
    /// What a Fetch's reads would take from the files.
    pub fn fetch_read_ahead(&self, op: &FetchOp) -> Vec<PartitionReadAhead> {
        let mut out = Vec::new();
        for want in &op.partitions {
            if let Ok(partition) = self.lookup(&want.partition) {
                let bytes = want.max_bytes.min(op.max_bytes).max(1);
                let key = want.partition.key();
                of(&key, &partition.log, want.fetch_offset, bytes, &mut out);
            }
        }
        out
    }

    /// What a ShareFetch's reads would take from the files: from each existing share
    /// partition's next fetch offset (a share partition the fetch creates is not read ahead).
    pub fn share_fetch_read_ahead(&self, op: &ShareFetchOp) -> Vec<PartitionReadAhead> {
        let mut out = Vec::new();
        if op.max_records == 0 {
            return out;
        }
        for r in &op.partitions {
            let key = ShareKey {
                group_id: op.group_id.clone(),
                partition: r.key(),
            };
            let (Some(sp), Ok(partition)) = (self.share.live(&key), self.lookup(r)) else {
                continue;
            };
            let start = partition.log.log_start_offset() as i64;
            let from = sp.next_fetch_offset().max(start);
            if from >= partition.high_watermark() {
                continue;
            }
            let bytes = op.partition_max_bytes.min(SHARE_FETCH_READ_BYTES_MAX);
            of(&key.partition, &partition.log, from, bytes, &mut out);
        }
        out
    }

    /// Hands a partition's log the bytes read ahead (`read` of them valid); ignored if the
    /// partition is gone.
    pub fn fill_read_cache(&mut self, part: &PartitionReadAhead, read: u64, data: CachedBytes) {
        if let Some(p) = self.partition_mut(&part.partition) {
            p.log.fill_read_cache(&part.ahead, read, data);
        }
    }

    /// Drops what a partition's log holds read ahead.
    pub fn drop_read_cache(&mut self, partition: &TopicPartition) {
        if let Some(p) = self.partition_mut(partition) {
            p.log.drop_read_cache();
        }
    }
}
