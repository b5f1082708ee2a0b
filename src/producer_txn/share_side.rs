//! The share side of a producer transaction's end, on the partition's shard: share records
//! that a producer transaction LOCKED (KIP-1289's TxnShareAcknowledge) are
//! resolved when its marker reaches the partition — ACKNOWLEDGED on commit,
//! AVAILABLE on abort.
//!
//! [`crate::shard::exec`]'s WriteTxnMarkers calls
//! [`crate::shard::state::ShardState::ptxn_share_resolve`] (`shard::producer_txn_share`, rules in
//! [`crate::producer_txn::share`]) for every partition the marker reaches (whether or not a control batch
//! was written there), then appends and waits for the share journal entries it produced before
//! answering. It is idempotent: the coordinator retries markers until every participant answers.

/// Offset ranges of `batches` (whole batches, as read for a share fetch, headers parsed once)
/// that no share consumer may get: every control batch (transaction markers), and under
/// `read_committed` every batch of an aborted transaction (Kafka's
/// `SharePartition.filterAbortedTransactionalAcquiredRecords`). Inclusive ranges, in order.
pub fn unreadable_ranges(
    batches: &[crate::log::batch::BatchSpan],
    txns: &crate::producer_txn::partition::TxnPartition,
    read_committed: bool,
) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for b in batches {
        let skip = b.is_control()
            || (read_committed
                && b.is_transactional()
                && txns.is_aborted(b.producer_id, b.base_offset));
        if skip {
            match out.last_mut() {
                Some(prev) if prev.1 + 1 == b.base_offset => prev.1 = b.last_offset,
                _ => out.push((b.base_offset, b.last_offset)),
            }
        }
    }
    out
}

/// Takes the `unreadable` offsets out of what a share fetch just acquired for `member` from
/// `log`: they are archived at once (as a GAP acknowledgement: no delivery, no dead-letter
/// copy) and their batches are not returned.
pub fn archive_unreadable(
    sp: &mut crate::share::SharePartition,
    member: &str,
    log: &crate::log::batch::Batches,
    fetched: crate::share::fetch::ShareFetched,
    unreadable: &[(i64, i64)],
    now_ms: u64,
) -> crate::share::fetch::ShareFetched {
    use crate::share::{AckBatch, AcknowledgeType, AcquiredRange};
    if unreadable.is_empty() || fetched.acquired.is_empty() {
        return fetched;
    }
    let mut kept: Vec<AcquiredRange> = Vec::new();
    let mut archive: Vec<AckBatch> = Vec::new();
    for range in &fetched.acquired {
        let mut from = range.first;
        for &(u_first, u_last) in unreadable {
            if u_last < from || u_first > range.last {
                continue;
            }
            if u_first > from {
                kept.push(AcquiredRange {
                    first: from,
                    last: u_first - 1,
                    ..*range
                });
            }
            let cut_last = u_last.min(range.last);
            archive.push(AckBatch::new(
                u_first.max(from),
                cut_last,
                AcknowledgeType::Gap,
            ));
            from = cut_last + 1;
        }
        if from <= range.last {
            kept.push(AcquiredRange {
                first: from,
                ..*range
            });
        }
    }
    if archive.is_empty() {
        return fetched;
    }
    if let Err(e) = sp.acknowledge(member, &archive, now_ms) {
        // The member acquired these offsets a moment ago; failing to archive them is a bug.
        panic!("archiving unreadable offsets just acquired failed: {e:?}");
    }
    // What overlaps the kept ranges, from the read itself (the kept ranges lie inside the
    // acquired ones, so these are the fetched batches less the unreadable ones).
    let records = crate::share::fetch::overlapping_batches(log, &kept);
    crate::share::fetch::ShareFetched {
        records,
        acquired: kept,
        count: fetched.count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::{set_base_offset, BatchBuilder};
    use crate::producer_txn::partition::TxnPartition;
    use crate::producer_txn::TxnOutcome;
    use crate::share::fetch::acquire_from_log;
    use crate::share::{ShareConfig, SharePartition};

    fn batch(base: i64, pid: i64, attributes: i16, n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(0);
        b.producer_id = pid;
        b.producer_epoch = 0;
        b.attributes = attributes;
        for _ in 0..n {
            b.record(0, None, Some(b"v"));
        }
        let mut bytes = b.build();
        set_base_offset(&mut bytes, base);
        bytes
    }

    /// Log: txn of 1 at 0..2 (aborted, marker 5), txn of 2 at 3..4 (committed, marker 6),
    /// plain record at 7. read_committed: 0..2 archived, markers 5 and 6 archived, 3, 4, 7
    /// delivered; read_uncommitted: only the markers are archived.
    #[test]
    fn markers_are_never_delivered_and_aborted_data_only_under_read_committed() {
        let mut txns = TxnPartition::new();
        txns.record_data(1, 0, true, 0);
        txns.record_data(2, 0, true, 3);
        txns.record_marker(1, TxnOutcome::Abort, 5);
        txns.record_marker(2, TxnOutcome::Commit, 6);
        let mut log = Vec::new();
        log.extend(batch(0, 1, 0x10, 3));
        log.extend(batch(3, 2, 0x10, 2));
        log.extend(batch(5, 1, 0x30, 1));
        log.extend(batch(6, 2, 0x30, 1));
        log.extend(batch(7, -1, 0, 1));
        let log = bytes::Bytes::from(log);
        let batches = crate::log::batch::Batches::parse(log.clone());
        for (read_committed, delivered) in [(true, vec![3, 4, 7]), (false, vec![0, 1, 2, 3, 4, 7])]
        {
            let unreadable = unreadable_ranges(batches.spans(), &txns, read_committed);
            let mut sp = SharePartition::new(ShareConfig::default(), 0);
            let fetched = acquire_from_log(&mut sp, "m", &log, 500, 500, 0);
            let fetched = archive_unreadable(&mut sp, "m", &batches, fetched, &unreadable, 0);
            let got: Vec<i64> = fetched
                .acquired
                .iter()
                .flat_map(|r| r.first..=r.last)
                .collect();
            assert_eq!(got, delivered, "read_committed {read_committed}");
            let returned: Vec<i64> = crate::log::batch::split_batches(&fetched.records)
                .unwrap()
                .iter()
                .map(|b| crate::log::batch::parse_header(b).unwrap().base_offset)
                .collect();
            assert!(!returned.contains(&5) && !returned.contains(&6));
            assert_eq!(returned.contains(&0), !read_committed);
            // Archived offsets are never acquired again; nothing else is left to acquire.
            assert!(acquire_from_log(&mut sp, "n", &log, 500, 500, 0)
                .acquired
                .is_empty());
            sp.check_invariants();
        }
    }
}
