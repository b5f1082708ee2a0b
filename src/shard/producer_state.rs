//! Idempotent-producer state of one partition: per producer id, its epoch and the last few
//! batches appended (first/last sequence and offsets), as Kafka's `ProducerStateManager`.
//!
//! Owned by the shard that owns the partition, next to its log. Rebuilt at open from the
//! partition's newest producer snapshot ([`crate::shard::producer_snapshot`]) and the batch
//! headers of the log past it, replayed through [`ProducerStates::record`].
//!
//! Rules for a batch of producer `pid`, epoch `e`, sequences `first ..= last`:
//! - `pid < 0`: not idempotent, always appended.
//! - no state for `pid`: appended (the state may have been lost to retention; Kafka does the same).
//! - `e` below the known epoch: `INVALID_PRODUCER_EPOCH`.
//! - `e` above the known epoch: a new epoch starts at sequence 0, otherwise
//!   `OUT_OF_ORDER_SEQUENCE_NUMBER`.
//! - same epoch: a batch equal (first and last sequence) to one of the last
//!   [`PRODUCER_BATCHES_REMEMBERED`] is a duplicate, answered with its original offsets and not
//!   appended; otherwise `first` must follow the last sequence (wrapping at `i32::MAX`), else
//!   `OUT_OF_ORDER_SEQUENCE_NUMBER`.
//!
//! A producer is forgotten by time, as Kafka's `producer.id.expiration.ms`: once its last
//! timestamp (the max timestamp of its last batch, or its last marker's timestamp) is that
//! old and it has no transaction open in the partition ([`ProducerStates::expire`]). There is
//! no bound on their number: forgetting a live producer would let its retried batch be
//! appended twice.

use crate::constants::PRODUCER_BATCHES_REMEMBERED;
use std::collections::{HashMap, VecDeque};
use std::fmt;

/// One remembered batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRecord {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    /// The batch's max timestamp (what DescribeProducers reports as the last timestamp).
    pub max_timestamp: i64,
}

/// What DescribeProducers reports about one producer of a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerSnapshot {
    pub producer_id: i64,
    pub epoch: i16,
    /// Last sequence of its last batch (-1 if none is remembered).
    pub last_sequence: i32,
    /// Max timestamp of its last batch (-1 if none is remembered).
    pub last_timestamp: i64,
    /// First offset of its transaction open in the partition (-1 if none); filled by the
    /// shard from the partition's [`crate::producer_txn::partition::TxnPartition`].
    pub current_txn_start_offset: i64,
}

/// One producer's state, as a producer snapshot stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    /// Oldest first; at most `PRODUCER_BATCHES_REMEMBERED`.
    pub batches: VecDeque<BatchRecord>,
    /// The max timestamp of its last batch or the timestamp of its last marker: what
    /// `producer.id.expiration.ms` is measured from.
    pub last_timestamp: i64,
}

/// What to do with a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// Already appended: answer with these offsets, append nothing.
    Duplicate { base_offset: i64, last_offset: i64 },
}

/// Why a batch is refused (the Kafka code is chosen at the edge, `server::codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProducerError {
    StaleEpoch {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    OutOfOrder {
        producer_id: i64,
        epoch: i16,
        first_sequence: i32,
        expected: i32,
    },
}

impl fmt::Display for ProducerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProducerError::StaleEpoch {
                producer_id,
                epoch,
                current,
            } => write!(
                f,
                "producer {producer_id} epoch {epoch} is older than the current epoch {current}"
            ),
            ProducerError::OutOfOrder {
                producer_id,
                epoch,
                first_sequence,
                expected,
            } => write!(
                f,
                "producer {producer_id} epoch {epoch}: sequence {first_sequence}, expected {expected}"
            ),
        }
    }
}

/// The sequence after `sequence`, wrapping as Kafka does.
pub fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

/// Producer states of one partition.
#[derive(Clone, Debug, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStates {
    pub fn new() -> ProducerStates {
        ProducerStates::default()
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Every remembered producer, by producer id.
    pub fn snapshot(&self) -> Vec<ProducerSnapshot> {
        let mut out: Vec<ProducerSnapshot> = self
            .producers
            .iter()
            .map(|(&producer_id, entry)| {
                let last = entry.batches.back();
                ProducerSnapshot {
                    producer_id,
                    epoch: entry.epoch,
                    last_sequence: last.map_or(-1, |b| b.last_sequence),
                    last_timestamp: last.map_or(-1, |b| b.max_timestamp),
                    current_txn_start_offset: -1,
                }
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// The current epoch of `producer_id`, if known.
    pub fn epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
    }

    /// Decides what to do with a batch (no state change).
    pub fn check(
        &self,
        producer_id: i64,
        epoch: i16,
        first_sequence: i32,
        last_sequence: i32,
    ) -> Result<SequenceCheck, ProducerError> {
        if producer_id < 0 {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(SequenceCheck::Append);
        };
        if epoch < entry.epoch {
            return Err(ProducerError::StaleEpoch {
                producer_id,
                epoch,
                current: entry.epoch,
            });
        }
        if epoch > entry.epoch {
            if first_sequence != 0 {
                return Err(ProducerError::OutOfOrder {
                    producer_id,
                    epoch,
                    first_sequence,
                    expected: 0,
                });
            }
            return Ok(SequenceCheck::Append);
        }
        if let Some(dup) = entry
            .batches
            .iter()
            .find(|b| b.first_sequence == first_sequence && b.last_sequence == last_sequence)
        {
            return Ok(SequenceCheck::Duplicate {
                base_offset: dup.base_offset,
                last_offset: dup.last_offset,
            });
        }
        let expected = match entry.batches.back() {
            Some(last) => next_sequence(last.last_sequence),
            None => 0,
        };
        if first_sequence != expected {
            return Err(ProducerError::OutOfOrder {
                producer_id,
                epoch,
                first_sequence,
                expected,
            });
        }
        Ok(SequenceCheck::Append)
    }

    /// Records an appended batch (after a successful [`Self::check`], or while replaying the log).
    pub fn record(&mut self, producer_id: i64, epoch: i16, batch: BatchRecord) {
        if producer_id < 0 {
            return;
        }
        assert!(batch.base_offset <= batch.last_offset);
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch,
                batches: VecDeque::new(),
                last_timestamp: batch.max_timestamp,
            });
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        if let Some(last) = entry.batches.back() {
            assert!(
                last.last_offset < batch.base_offset,
                "batches are recorded in log order"
            );
        }
        entry.batches.push_back(batch);
        while entry.batches.len() > PRODUCER_BATCHES_REMEMBERED {
            entry.batches.pop_front();
        }
        entry.last_timestamp = batch.max_timestamp;
    }

    /// Records an appended transaction marker of `producer_id` at `epoch` with the control
    /// batch's `timestamp` (live, or replayed): a newer epoch becomes the producer's epoch
    /// (older ones are fenced) and its sequences start again at 0, as after any epoch change;
    /// the same epoch keeps its sequences.
    pub fn record_marker(&mut self, producer_id: i64, epoch: i16, timestamp: i64) {
        if producer_id < 0 {
            return;
        }
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch,
                batches: VecDeque::new(),
                last_timestamp: timestamp,
            });
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.last_timestamp = timestamp;
    }

    /// Forgets the producers whose last timestamp is at least `expiration_ms` before `now_ms`
    /// and that have no transaction open here (`txn_open`), as Kafka's
    /// `producer.id.expiration.ms`. Returns how many were forgotten.
    pub fn expire(
        &mut self,
        now_ms: i64,
        expiration_ms: i64,
        txn_open: impl Fn(i64) -> bool,
    ) -> usize {
        let before = self.producers.len();
        self.producers.retain(|&producer_id, entry| {
            now_ms.saturating_sub(entry.last_timestamp) < expiration_ms || txn_open(producer_id)
        });
        before - self.producers.len()
    }

    /// Every producer's state, by producer id (what a producer snapshot stores).
    pub fn entries(&self) -> Vec<(i64, &ProducerEntry)> {
        let mut out: Vec<_> = self.producers.iter().map(|(&id, e)| (id, e)).collect();
        out.sort_by_key(|(id, _)| *id);
        out
    }

    /// The state a producer snapshot stored.
    pub fn from_entries(entries: impl IntoIterator<Item = (i64, ProducerEntry)>) -> ProducerStates {
        let producers: HashMap<i64, ProducerEntry> = entries.into_iter().collect();
        for (id, entry) in &producers {
            assert!(*id >= 0, "only idempotent producers have state");
            assert!(entry.batches.len() <= PRODUCER_BATCHES_REMEMBERED);
        }
        ProducerStates { producers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    fn rec(first: i32, last: i32, base: i64) -> BatchRecord {
        BatchRecord {
            first_sequence: first,
            last_sequence: last,
            base_offset: base,
            last_offset: base + i64::from(last - first),
            max_timestamp: 1_000 + base,
        }
    }

    #[test]
    fn snapshot_reports_each_producers_last_batch() {
        let mut s = ProducerStates::new();
        s.record(9, 1, rec(0, 4, 10));
        s.record(7, 0, rec(0, 2, 0));
        s.record(7, 0, rec(3, 5, 3));
        assert_eq!(
            s.snapshot(),
            vec![
                ProducerSnapshot {
                    producer_id: 7,
                    epoch: 0,
                    last_sequence: 5,
                    last_timestamp: 1_003,
                    current_txn_start_offset: -1,
                },
                ProducerSnapshot {
                    producer_id: 9,
                    epoch: 1,
                    last_sequence: 4,
                    last_timestamp: 1_010,
                    current_txn_start_offset: -1,
                },
            ]
        );
    }

    #[test]
    fn in_order_batches_append_and_retries_are_duplicates() {
        let mut s = ProducerStates::new();
        assert_eq!(s.check(7, 0, 0, 4), Ok(SequenceCheck::Append));
        s.record(7, 0, rec(0, 4, 100));
        assert_eq!(s.check(7, 0, 5, 9), Ok(SequenceCheck::Append));
        s.record(7, 0, rec(5, 9, 105));
        assert_eq!(
            s.check(7, 0, 0, 4),
            Ok(SequenceCheck::Duplicate {
                base_offset: 100,
                last_offset: 104
            })
        );
        assert_eq!(
            s.check(7, 0, 5, 9),
            Ok(SequenceCheck::Duplicate {
                base_offset: 105,
                last_offset: 109
            })
        );
    }

    #[test]
    fn gaps_and_stale_epochs_are_refused() {
        let mut s = ProducerStates::new();
        s.record(7, 2, rec(0, 0, 0));
        assert!(matches!(
            s.check(7, 2, 2, 2),
            Err(ProducerError::OutOfOrder { expected: 1, .. })
        ));
        let err = s.check(7, 1, 1, 1).unwrap_err();
        assert!(matches!(err, ProducerError::StaleEpoch { current: 2, .. }));
    }

    #[test]
    fn a_new_epoch_must_start_at_zero_and_resets_the_window() {
        let mut s = ProducerStates::new();
        s.record(7, 0, rec(0, 9, 0));
        assert!(s.check(7, 1, 10, 10).is_err());
        assert_eq!(s.check(7, 1, 0, 0), Ok(SequenceCheck::Append));
        s.record(7, 1, rec(0, 0, 10));
        assert_eq!(s.epoch(7), Some(1));
        assert!(s.check(7, 0, 10, 10).is_err(), "old epoch is fenced");
        assert_eq!(s.check(7, 1, 1, 1), Ok(SequenceCheck::Append));
    }

    #[test]
    fn a_marker_with_a_newer_epoch_fences_the_old_one_and_restarts_sequences() {
        let mut s = ProducerStates::new();
        s.record(7, 0, rec(0, 4, 0));
        s.record_marker(7, 0, 0);
        assert_eq!(
            s.check(7, 0, 5, 5),
            Ok(SequenceCheck::Append),
            "same epoch continues"
        );
        s.record_marker(7, 1, 0);
        assert_eq!(s.epoch(7), Some(1));
        assert!(matches!(
            s.check(7, 0, 5, 5),
            Err(ProducerError::StaleEpoch {
                epoch: 0,
                current: 1,
                ..
            })
        ));
        assert_eq!(s.check(7, 1, 0, 0), Ok(SequenceCheck::Append));
        s.record_marker(8, 3, 0);
        assert_eq!(s.epoch(8), Some(3));
    }

    #[test]
    fn unknown_and_non_idempotent_producers_always_append() {
        let s = ProducerStates::new();
        assert_eq!(s.check(-1, -1, -1, -1), Ok(SequenceCheck::Append));
        assert_eq!(s.check(42, 3, 17, 20), Ok(SequenceCheck::Append));
        let mut s = ProducerStates::new();
        s.record(-1, -1, rec(0, 0, 0));
        assert!(s.is_empty());
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        let mut s = ProducerStates::new();
        s.record(1, 0, rec(i32::MAX - 1, i32::MAX, 0));
        assert_eq!(s.check(1, 0, 0, 3), Ok(SequenceCheck::Append));
        assert!(s.check(1, 0, 1, 3).is_err());
    }

    #[test]
    fn only_the_last_five_batches_answer_as_duplicates() {
        let mut s = ProducerStates::new();
        for i in 0..8 {
            s.record(1, 0, rec(i, i, i64::from(i)));
        }
        for i in 0..3 {
            assert!(
                s.check(1, 0, i, i).is_err(),
                "batch {i} fell out of the window"
            );
        }
        for i in 3..8 {
            assert!(matches!(
                s.check(1, 0, i, i),
                Ok(SequenceCheck::Duplicate { .. })
            ));
        }
    }

    #[test]
    fn idle_producers_expire_by_time_unless_a_transaction_is_open() {
        let mut s = ProducerStates::new();
        s.record(1, 0, rec(0, 0, 0)); // max timestamp 1_000
        s.record(2, 0, rec(0, 0, 1)); // 1_001
        s.record(3, 0, rec(0, 0, 2)); // 1_002
        s.record_marker(3, 0, 5_000);
        for pid in 10..30_000 {
            s.record(pid, 0, rec(0, 0, 10)); // no cap on how many are remembered
        }
        assert_eq!(s.len(), 3 + 29_990);
        assert_eq!(
            s.expire(1_000 + 99, 100, |_| false),
            0,
            "younger than the expiration"
        );
        assert_eq!(
            s.expire(1_001 + 100, 100, |pid| pid == 2),
            1,
            "producer 2 has a transaction open"
        );
        assert!(s.epoch(1).is_none());
        assert!(s.epoch(2).is_some() && s.epoch(3).is_some());
        assert_eq!(s.expire(5_000 + 100, 100, |_| false), 2 + 29_990);
        assert!(
            s.epoch(3).is_none(),
            "a marker counts as activity until it is old too"
        );
    }

    #[test]
    fn entries_round_trip_through_a_snapshot() {
        let mut s = ProducerStates::new();
        for i in 0..7 {
            s.record(4, 2, rec(i, i, i64::from(i)));
        }
        s.record_marker(5, 1, 77);
        let stored: Vec<(i64, ProducerEntry)> = s
            .entries()
            .into_iter()
            .map(|(id, e)| (id, e.clone()))
            .collect();
        let back = ProducerStates::from_entries(stored);
        assert_eq!(back.snapshot(), s.snapshot());
        assert_eq!(back.check(4, 2, 6, 6), s.check(4, 2, 6, 6));
        assert_eq!(back.check(4, 2, 7, 7), Ok(SequenceCheck::Append));
    }

    /// A model: one producer retrying random batches; the log must hold each sequence once,
    /// in order, whatever the retries.
    #[test]
    fn random_retries_never_duplicate_or_reorder() {
        let seed: u64 = 0x0dd_5eed;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut s = ProducerStates::new();
        let mut log: Vec<i32> = Vec::new(); // sequence of each appended record
        let mut sent: Vec<(i32, i32)> = Vec::new(); // batches the producer has sent, in order
        let mut next = 0;
        for _ in 0..5000 {
            let retry = !sent.is_empty() && rng.gen_bool(0.4);
            let (first, last) = if retry {
                sent[rng.gen_range(sent.len().saturating_sub(5)..sent.len())]
            } else {
                let n = rng.gen_range(1..5);
                let batch = (next, next + n - 1);
                next += n;
                sent.push(batch);
                batch
            };
            match s.check(9, 0, first, last) {
                Ok(SequenceCheck::Append) => {
                    let base = log.len() as i64;
                    log.extend(first..=last);
                    s.record(9, 0, rec(first, last, base));
                }
                Ok(SequenceCheck::Duplicate { base_offset, .. }) => {
                    assert_eq!(log[base_offset as usize], first);
                }
                Err(e) => panic!("in-window retry refused: {e}"),
            }
        }
        assert_eq!(log, (0..next).collect::<Vec<_>>());
    }
}
