//! ShareFetch's limits and its acquisition step over bytes read from a partition's log (pure).
//!
//! Kafka 4.4's rules (`SharePartitionManager`, `DelayedShareFetch`, `ShareFetchUtils`,
//! `SharePartition.acquire`), which a ShareFetch follows wherever its partitions live:
//! - **Order.** The session's partitions are walked in an order rotated by the request's session
//!   epoch ([`rotate`], Kafka's `PartitionRotateStrategy` round robin), so a backlog on one
//!   partition does not starve the others. Partitions of one shard are walked together, from
//!   the shard of the first ([`group_in_order`]): one cross-shard call per shard. (Kafka's own
//!   order within one fetch also differs from the plain rotation: the session keeps its
//!   partitions in hash order, and partitions whose log position is cached go first.)
//! - **MaxRecords** is one budget for the whole request: each partition, in that order, acquires
//!   up to what is left of it; the walk stops when nothing is left. It is a soft limit: new
//!   records are acquired up to the end of the log batch that holds the last one the budget
//!   covers ([`acquire_from_log`]), and that overshoot counts against the budget.
//! - **BatchSize** cuts what one partition acquires into AcquiredRecords of about BatchSize
//!   offsets, at the log's batch boundaries ([`split_at_batches`]).
//! - **MaxBytes** is shared evenly by the partitions ([`partition_max_bytes`]); each reads at
//!   most its share from the log (the first partition with data at least one whole batch).
//!   MaxBytes 0 hands out nothing.
//! - **MinBytes**: until the bytes the partitions could hand out (each capped at its share of
//!   MaxBytes) reach MinBytes ([`min_bytes_satisfied`]), nothing is acquired and the request
//!   waits, up to MaxWaitMs; then it acquires whatever there is.
//!
//! The caller reads the log from [`SharePartition::next_fetch_offset`] (whole batches, below
//! the high watermark), parses the batch headers once ([`Batches`]) and passes them to
//! [`acquire_from_log_in_mode`], which acquires up to the budget for the member within those
//! batches and returns the whole batches that overlap what was acquired (slices of the bytes
//! read), with Kafka's AcquiredRecords ranges.

use crate::log::batch::{split_batches, Batches};
use crate::share::{AcquiredRange, SharePartition};
use bytes::Bytes;

/// What one ShareFetch returns for one partition.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ShareFetched {
    /// Whole batches, concatenated, each overlapping an acquired range (a slice of the bytes
    /// read from the log when they are contiguous there, as they are unless ranges between
    /// them went to other members).
    pub records: Bytes,
    pub acquired: Vec<AcquiredRange>,
    /// Offsets acquired, counted against the request's MaxRecords (the ranges' spans).
    pub count: u64,
}

/// Kafka's round-robin rotation: `items` rotated left by `session_epoch % len`; epochs below 1
/// (a session opening or closing) keep the order.
pub fn rotate<T: Clone>(items: &[T], session_epoch: i32) -> Vec<T> {
    if items.len() < 2 || session_epoch < 1 {
        return items.to_vec();
    }
    let at = session_epoch as usize % items.len();
    let mut out = Vec::with_capacity(items.len());
    out.extend_from_slice(&items[at..]);
    out.extend_from_slice(&items[..at]);
    assert_eq!(out.len(), items.len());
    out
}

/// Groups `items` by key, keys in the order of their first item, items in their order: the
/// walk makes one cross-shard call per shard. The first item stays first, so every partition
/// still leads the walk once every `len` epochs.
pub fn group_in_order<K: Copy + Eq, T>(items: Vec<(K, T)>) -> Vec<(K, Vec<T>)> {
    let count = items.len();
    let mut out: Vec<(K, Vec<T>)> = Vec::new();
    for (key, item) in items {
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, group)) => group.push(item),
            None => out.push((key, vec![item])),
        }
    }
    assert_eq!(out.iter().map(|(_, g)| g.len()).sum::<usize>(), count);
    out
}

/// Kafka's uniform `PartitionMaxBytesStrategy`: each of `partitions` partitions may read
/// `max_bytes / partitions` bytes.
pub fn partition_max_bytes(max_bytes: usize, partitions: usize) -> usize {
    if partitions == 0 {
        return 0;
    }
    max_bytes / partitions
}

/// Whether the bytes the partitions could hand out (`available`, each capped at
/// `partition_max_bytes`) reach `min_bytes`.
pub fn min_bytes_satisfied(
    available: impl IntoIterator<Item = usize>,
    partition_max_bytes: usize,
    min_bytes: usize,
) -> bool {
    let total: usize = available
        .into_iter()
        .map(|bytes| bytes.min(partition_max_bytes))
        .fold(0usize, usize::saturating_add);
    total >= min_bytes
}

/// The longest prefix of `records` (whole batches) within `max_bytes`.
pub fn fit_bytes(records: &[u8], max_bytes: usize) -> &[u8] {
    let Ok(batches) = split_batches(records) else {
        return &[];
    };
    let mut end = 0;
    for b in batches {
        if end + b.len() > max_bytes {
            break;
        }
        end += b.len();
    }
    assert!(end <= max_bytes && end <= records.len());
    &records[..end]
}

/// Cuts `range` into ranges of at least `batch_size` offsets where a log batch starts
/// (`batch_starts`, ascending), as Kafka's `SharePartition.createBatches`: a range closes
/// before the first batch start `batch_size` or more offsets past its first offset.
pub fn split_at_batches(
    range: AcquiredRange,
    batch_starts: &[i64],
    batch_size: u32,
) -> Vec<AcquiredRange> {
    assert!(range.first <= range.last);
    let mut out = Vec::new();
    let mut first = range.first;
    if range.last - range.first + 1 > i64::from(batch_size) {
        for &start in batch_starts {
            if start > range.last {
                break;
            }
            if start > first && start - first >= i64::from(batch_size.max(1)) {
                out.push(AcquiredRange {
                    first,
                    last: start - 1,
                    ..range
                });
                first = start;
            }
        }
    }
    out.push(AcquiredRange { first, ..range });
    assert_eq!(out.first().map(|r| r.first), Some(range.first));
    assert_eq!(out.last().map(|r| r.last), Some(range.last));
    out
}

/// Acquires from `log_bytes` (whole batches starting at or before the share partition's
/// next fetch offset, as read from the log) for `member`: up to `max_records` offsets, rounded
/// up to the end of the log batch holding the last new record (Kafka's soft limit), in ranges
/// cut by `batch_size`.
pub fn acquire_from_log(
    sp: &mut SharePartition,
    member: &str,
    log_bytes: &Bytes,
    max_records: u32,
    batch_size: u32,
    now_ms: u64,
) -> ShareFetched {
    acquire_from_log_in_mode(
        sp,
        member,
        &Batches::parse(log_bytes.clone()),
        max_records,
        batch_size,
        false,
        now_ms,
    )
}

/// `range` cut after the rest of the log batch it starts inside of (if it starts inside one
/// and goes past its end): the record_limit mode's ranges.
fn split_batch_rest(range: AcquiredRange, batch_starts: &[i64]) -> Vec<AcquiredRange> {
    if batch_starts.contains(&range.first) {
        return vec![range];
    }
    match batch_starts
        .iter()
        .find(|s| **s > range.first && **s <= range.last)
    {
        Some(&next) => vec![
            AcquiredRange {
                last: next - 1,
                ..range
            },
            AcquiredRange {
                first: next,
                ..range
            },
        ],
        None => vec![range],
    }
}

/// [`acquire_from_log`], or with `record_limit` (ShareAcquireMode record_limit, KIP-1206)
/// `max_records` as a strict limit: never rounded up to the end of a log batch, and what is
/// acquired is not split by `batch_size`.
pub fn acquire_from_log_in_mode(
    sp: &mut SharePartition,
    member: &str,
    log: &Batches,
    max_records: u32,
    batch_size: u32,
    record_limit: bool,
    now_ms: u64,
) -> ShareFetched {
    if max_records == 0 {
        return ShareFetched::default();
    }
    let batches = log.spans();
    let Some(end_last) = batches.last().map(|b| b.last_offset) else {
        return ShareFetched::default();
    };
    let new_from = sp.speo() + 1;
    let mut acquired = sp.acquire(member, end_last + 1, max_records, now_ms);
    let mut count: u64 = acquired.iter().map(|r| (r.last - r.first + 1) as u64).sum();
    // Kafka's soft limit: new records are acquired whole batches at a time (not in
    // record_limit mode).
    if !record_limit && count == u64::from(max_records) {
        let last = acquired.last().map_or(i64::MIN, |r| r.last);
        if last >= new_from {
            if let Some(batch_last) = batches
                .iter()
                .find(|b| b.base_offset <= last && last < b.last_offset)
                .map(|b| b.last_offset)
            {
                let more = u32::try_from(batch_last - last).expect("a batch's span fits u32");
                let extra = sp.acquire(member, batch_last + 1, more, now_ms);
                for r in extra {
                    assert!(r.first > last && r.last <= batch_last);
                    count += (r.last - r.first + 1) as u64;
                    match acquired.last_mut() {
                        Some(prev)
                            if prev.last + 1 == r.first
                                && prev.delivery_count == r.delivery_count =>
                        {
                            prev.last = r.last
                        }
                        _ => acquired.push(r),
                    }
                }
            }
        }
    }
    // record_limit mode does not split what it acquires by BatchSize, only the rest of a
    // log batch an earlier record_limit fetch cut: Kafka 4.4 answers MaxRecords 17, BatchSize
    // 3 over batches of 10, 0..4 acquired before, with (5..9), (10..21).
    let starts: Vec<i64> = batches.iter().map(|b| b.base_offset).collect();
    let acquired: Vec<AcquiredRange> = if record_limit {
        acquired
            .into_iter()
            .flat_map(|r| split_batch_rest(r, &starts))
            .collect()
    } else {
        acquired
            .into_iter()
            .flat_map(|r| split_at_batches(r, &starts, batch_size))
            .collect()
    };
    let records = overlapping_batches(log, &acquired);
    ShareFetched {
        records,
        acquired,
        count,
    }
}

/// The whole batches of `log` that overlap one of `ranges`: a slice of the bytes read when
/// they are contiguous there (no copy), else their concatenation.
pub fn overlapping_batches(log: &Batches, ranges: &[AcquiredRange]) -> Bytes {
    let runs = log.runs(|b| {
        ranges
            .iter()
            .any(|r| r.first <= b.last_offset && r.last >= b.base_offset)
    });
    match runs.as_slice() {
        [] => Bytes::new(),
        [one] => one.clone(),
        _ => {
            let mut out = Vec::with_capacity(runs.iter().map(Bytes::len).sum());
            for run in &runs {
                out.extend_from_slice(run);
            }
            Bytes::from(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::{set_base_offset, BatchBuilder};
    use crate::share::{AckBatch, AcknowledgeType, ShareConfig};

    fn log(batches: &[(i64, usize)]) -> Bytes {
        let mut out = Vec::new();
        for (base, n) in batches {
            let mut b = BatchBuilder::new(1_000);
            for i in 0..*n {
                b.record(1_000 + i as i64, None, Some(b"v"));
            }
            let mut bytes = b.build();
            set_base_offset(&mut bytes, *base);
            out.extend_from_slice(&bytes);
        }
        Bytes::from(out)
    }

    #[test]
    fn record_limit_mode_is_strict() {
        let mut sp = SharePartition::new(ShareConfig::default(), 0);
        let bytes = log(&[(0, 3), (3, 3), (6, 4)]);
        let bytes = Batches::parse(bytes);
        let a = acquire_from_log_in_mode(&mut sp, "a", &bytes, 4, 500, true, 0);
        assert_eq!(a.count, 4, "not rounded up to offset 5");
        assert_eq!(a.acquired.last().map(|r| r.last), Some(3));
        // Nor split by BatchSize: the rest of batch 3..5, then 6..8 of the next.
        let b = acquire_from_log_in_mode(&mut sp, "a", &bytes, 5, 1, true, 0);
        assert_eq!(b.count, 5);
        assert_eq!(
            b.acquired
                .iter()
                .map(|r| (r.first, r.last))
                .collect::<Vec<_>>(),
            vec![(4, 5), (6, 8)]
        );
    }

    #[test]
    fn acquires_whole_batches_and_hands_out_disjoint_ranges() {
        let mut sp = SharePartition::new(ShareConfig::default(), 0);
        let bytes = log(&[(0, 3), (3, 3), (6, 4)]);
        let a = acquire_from_log(&mut sp, "a", &bytes, 4, 500, 0);
        // MaxRecords 4 is rounded up to the end of the batch holding offset 3 (Kafka's soft
        // limit), and the overshoot counts.
        assert_eq!(
            a.acquired,
            vec![AcquiredRange {
                first: 0,
                last: 5,
                delivery_count: 1
            }]
        );
        assert_eq!(a.count, 6);
        // Batches 0..2 and 3..5 overlap the acquisition; 6..9 does not.
        assert_eq!(a.records.len(), log(&[(0, 3), (3, 3)]).len());
        // A second member reads from the share partition's next fetch offset on.
        assert_eq!(sp.next_fetch_offset(), 6);
        let b = acquire_from_log(&mut sp, "b", &log(&[(3, 3), (6, 4)]), 500, 500, 0);
        assert_eq!(
            b.acquired,
            vec![AcquiredRange {
                first: 6,
                last: 9,
                delivery_count: 1
            }]
        );
        // Released records come back with a higher delivery count.
        sp.acknowledge("a", &[AckBatch::new(0, 3, AcknowledgeType::Release)], 1)
            .unwrap();
        assert_eq!(sp.next_fetch_offset(), 0);
        let c = acquire_from_log(&mut sp, "b", &bytes, 500, 500, 2);
        assert_eq!(
            c.acquired,
            vec![AcquiredRange {
                first: 0,
                last: 3,
                delivery_count: 2
            }]
        );
        assert!(acquire_from_log(&mut sp, "b", &Bytes::new(), 500, 500, 2)
            .acquired
            .is_empty());
    }

    fn r(first: i64, last: i64) -> AcquiredRange {
        AcquiredRange {
            first,
            last,
            delivery_count: 1,
        }
    }

    #[test]
    fn rotation_is_kafkas_round_robin_by_session_epoch() {
        let p = [0, 1, 2, 3];
        assert_eq!(rotate(&p, 0), vec![0, 1, 2, 3]);
        assert_eq!(rotate(&p, -1), vec![0, 1, 2, 3]);
        assert_eq!(rotate(&p, 1), vec![1, 2, 3, 0]);
        assert_eq!(rotate(&p, 2), vec![2, 3, 0, 1]);
        assert_eq!(rotate(&p, 4), vec![0, 1, 2, 3]);
        assert_eq!(rotate(&p, 7), vec![3, 0, 1, 2]);
        assert_eq!(rotate(&p[..1], 5), vec![0]);
        assert!(rotate::<i32>(&[], 3).is_empty());
        // Every epoch's order is a permutation; over len epochs each partition leads once.
        let leads: Vec<i32> = (1..=4).map(|e| rotate(&p, e)[0]).collect();
        assert_eq!(leads, vec![1, 2, 3, 0]);
    }

    #[test]
    fn grouping_keeps_first_appearance_order() {
        let groups = group_in_order(vec![(1, 'a'), (0, 'b'), (1, 'c'), (2, 'd'), (0, 'e')]);
        assert_eq!(
            groups,
            vec![(1, vec!['a', 'c']), (0, vec!['b', 'e']), (2, vec!['d'])]
        );
        assert!(group_in_order::<u8, u8>(Vec::new()).is_empty());
    }

    #[test]
    fn bytes_limits() {
        assert_eq!(partition_max_bytes(100, 3), 33);
        assert_eq!(partition_max_bytes(0, 3), 0);
        assert_eq!(partition_max_bytes(100, 0), 0);
        assert!(min_bytes_satisfied([10, 0], 50, 10));
        assert!(!min_bytes_satisfied([10, 0], 50, 11));
        // Each partition counts at most its share of MaxBytes.
        assert!(!min_bytes_satisfied([1000, 5], 50, 100));
        assert!(min_bytes_satisfied([1000, 50], 50, 100));
        assert!(min_bytes_satisfied(Vec::new(), 50, 0));
        assert!(min_bytes_satisfied(
            [usize::MAX, usize::MAX],
            usize::MAX,
            usize::MAX
        ));
    }

    #[test]
    fn split_follows_kafkas_create_batches() {
        let starts: Vec<i64> = (0..10).map(|b| b * 5).collect();
        // Batch size 10 over batches of 5.
        assert_eq!(
            split_at_batches(r(0, 24), &starts, 10),
            vec![r(0, 9), r(10, 19), r(20, 24)]
        );
        // Batch size 7: cut at the first batch start 7 or more past the range's start.
        assert_eq!(
            split_at_batches(r(25, 49), &starts, 7),
            vec![r(25, 34), r(35, 44), r(45, 49)]
        );
        // Not larger than the batch size: one range.
        assert_eq!(split_at_batches(r(0, 9), &starts, 10), vec![r(0, 9)]);
        // A range starting inside a batch.
        assert_eq!(
            split_at_batches(r(3, 17), &starts, 5),
            vec![r(3, 9), r(10, 14), r(15, 17)]
        );
        // Batch size 1 cuts at every batch start; 0 is treated as 1.
        assert_eq!(
            split_at_batches(r(0, 11), &starts, 0),
            vec![r(0, 4), r(5, 9), r(10, 11)]
        );
    }

    #[test]
    fn batch_size_and_soft_limit_over_a_log() {
        let mut sp = SharePartition::new(ShareConfig::default(), 0);
        let batches: Vec<(i64, usize)> = (0..10).map(|b| (b * 5, 5)).collect();
        let bytes = log(&batches);
        // MaxRecords 23 reaches into batch 20..24: all of it is acquired.
        let a = acquire_from_log(&mut sp, "a", &bytes, 23, 10, 0);
        assert_eq!(a.acquired, vec![r(0, 9), r(10, 19), r(20, 24)]);
        assert_eq!(a.count, 25);
        assert_eq!(a.records.len(), log(&batches[..5]).len());
        let b = acquire_from_log(&mut sp, "a", &log(&batches[5..]), 500, 7, 0);
        assert_eq!(b.acquired, vec![r(25, 34), r(35, 44), r(45, 49)]);
        assert_eq!(b.count, 25);
        // MaxRecords 0 acquires nothing.
        sp.acknowledge("a", &[AckBatch::new(0, 49, AcknowledgeType::Release)], 1)
            .unwrap();
        assert_eq!(
            acquire_from_log(&mut sp, "a", &bytes, 0, 10, 2),
            ShareFetched::default()
        );
        // Released records are not rounded up (only new records are acquired whole batches).
        let c = acquire_from_log(&mut sp, "a", &bytes, 3, 10, 2);
        assert_eq!(
            c.acquired,
            vec![AcquiredRange {
                first: 0,
                last: 2,
                delivery_count: 2
            }]
        );
        assert_eq!(c.count, 3);
    }
}
