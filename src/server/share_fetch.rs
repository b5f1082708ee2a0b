//! ShareFetch's acquisition step over bytes read from a partition's log (pure).
//!
//! The caller reads the log from [`SharePartition::next_fetch_offset`] (whole batches, below
//! the high watermark) and passes the bytes here; [`acquire_from_log`] acquires up to
//! `max_records` offsets for the member within those batches and returns the whole batches
//! that overlap what was acquired, with Kafka's AcquiredRecords ranges. Control batches are
//! never handed out: their offsets are acquired and must be acknowledged as GAP by nobody, so
//! Kafka archives them; here they are simply skipped by the caller's acknowledgement (TODO
//! when transactions reach share groups).
//!
//! Not yet wired (ShareFetch is not advertised).

use crate::log::batch::{parse_header, split_batches};
use crate::share::{AcquiredRange, SharePartition};

/// What one ShareFetch returns for one partition.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ShareFetched {
    /// Whole batches, concatenated, each overlapping an acquired range.
    pub records: Vec<u8>,
    pub acquired: Vec<AcquiredRange>,
}

/// Acquires from `log_bytes` (whole batches starting at or before the share partition's
/// next fetch offset, as read from the log) for `member`.
pub fn acquire_from_log(
    sp: &mut SharePartition,
    member: &str,
    log_bytes: &[u8],
    max_records: u32,
    now_ms: u64,
) -> ShareFetched {
    let Ok(raw) = split_batches(log_bytes) else {
        return ShareFetched::default();
    };
    let batches: Vec<(i64, i64, &[u8])> = raw
        .into_iter()
        .filter_map(|b| {
            parse_header(b).ok().map(|h| {
                (
                    h.base_offset,
                    h.base_offset + i64::from(h.last_offset_delta),
                    b,
                )
            })
        })
        .collect();
    let Some(&(_, end_last, _)) = batches.last() else {
        return ShareFetched::default();
    };
    let acquired = sp.acquire(member, end_last + 1, max_records, now_ms);
    let mut records = Vec::new();
    for (first, last, bytes) in &batches {
        if acquired
            .iter()
            .any(|r| r.first <= *last && r.last >= *first)
        {
            records.extend_from_slice(bytes);
        }
    }
    ShareFetched { records, acquired }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::{set_base_offset, BatchBuilder};
    use crate::share::{AckBatch, AcknowledgeType, ShareConfig};

    fn log(batches: &[(i64, usize)]) -> Vec<u8> {
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
        out
    }

    #[test]
    fn acquires_whole_batches_and_hands_out_disjoint_ranges() {
        let mut sp = SharePartition::new(ShareConfig::default(), 0);
        let bytes = log(&[(0, 3), (3, 3), (6, 4)]);
        let a = acquire_from_log(&mut sp, "a", &bytes, 4, 0);
        assert_eq!(
            a.acquired,
            vec![AcquiredRange {
                first: 0,
                last: 3,
                delivery_count: 1
            }]
        );
        // Batches 0..2 and 3..5 overlap the acquisition; 6..9 does not.
        assert_eq!(a.records.len(), log(&[(0, 3), (3, 3)]).len());
        // A second member reads from the share partition's next fetch offset on.
        assert_eq!(sp.next_fetch_offset(), 4);
        let b = acquire_from_log(&mut sp, "b", &log(&[(3, 3), (6, 4)]), 500, 0);
        assert_eq!(
            b.acquired,
            vec![AcquiredRange {
                first: 4,
                last: 9,
                delivery_count: 1
            }]
        );
        // Released records come back with a higher delivery count.
        sp.acknowledge("a", &[AckBatch::new(0, 3, AcknowledgeType::Release)], 1)
            .unwrap();
        assert_eq!(sp.next_fetch_offset(), 0);
        let c = acquire_from_log(&mut sp, "b", &bytes, 500, 2);
        assert_eq!(
            c.acquired,
            vec![AcquiredRange {
                first: 0,
                last: 3,
                delivery_count: 2
            }]
        );
        assert!(acquire_from_log(&mut sp, "b", &[], 500, 2)
            .acquired
            .is_empty());
    }
}
