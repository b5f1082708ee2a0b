//! The partition side of producer transactions: which producers have a transaction open in
//! the partition (and its first offset), the last stable offset (LSO), and the aborted-
//! transaction index, as Kafka's `ProducerStateManager` and `TransactionIndex`.
//!
//! Owned by the shard that owns the partition, next to its log and its idempotent-producer
//! state ([`crate::shard::producer_state`]). Synchronous and I/O-free: the shard feeds it every
//! batch it appends ([`TxnPartition::record_data`], [`TxnPartition::record_marker`]) and asks
//! it what a read may return ([`TxnPartition::last_stable_offset`],
//! [`TxnPartition::aborted_in`]).
//!
//! KIP-890 part 1 (the server-side defence against hanging transactions): the first
//! transactional batch of a producer's transaction in this partition is appended only once the
//! transaction coordinator has confirmed the partition is in the producer's ongoing
//! transaction. [`TxnPartition::check_verified`] hands out a *verification guard* for it; the
//! produce handler asks the coordinator (AddPartitionsToTxn verifyOnly) and sends the batch
//! again with the guard; a marker for the producer, or its first batch, clears the guard, so a
//! batch verified before its transaction ended cannot open a new one after it. Guards are not
//! persisted: after a restart a batch is simply verified again.
//!
//! While a verification is pending, the lowest sequence among the producer's batches that asked
//! for it is kept (as Kafka's `VerificationStateEntry`), and a batch with a higher sequence is
//! refused OUT_OF_ORDER_SEQUENCE_NUMBER even with the guard: batches of one producer verified
//! concurrently could otherwise be appended out of order, because a producer this partition has
//! no state for may start at any sequence. A later batch overtaking the first would leave the
//! first refused as out of order forever.
//!
//! Persisted with the idempotent-producer state in the partition's producer snapshots (open
//! transactions and the aborted-transaction index, [`crate::shard::producer_snapshot`]) and
//! rebuilt at open from the newest snapshot and the log's batch headers past it (and the one
//! record of every control batch, for its type), in the same pass that rebuilds the producer
//! state (`schemas/FORMAT.md`, "Producer snapshots").
//!
//! Invariants:
//! - a producer has at most one open transaction per partition; it starts at the first
//!   transactional batch of that producer after its last marker and ends at the next marker;
//! - LSO = the smallest first offset of a transaction not yet ended *durably* (its marker at or
//!   past the high watermark counts as not ended: a crash could take the marker away), capped
//!   by the high watermark; so LSO ≤ HW, and it only grows while the log only grows;
//! - aborted entries are in marker-offset order (markers are appended in offset order), each
//!   `first_offset < last_offset` (the marker comes after the data).

use super::TxnOutcome;
use std::collections::{HashMap, VecDeque};

/// A transaction aborted in this partition: its data lies in `[first_offset, last_offset)`
/// (other producers' batches interleave), `last_offset` is its abort marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OpenTxn {
    first_offset: i64,
    epoch: i16,
}

/// What to do with a marker for this partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerAction {
    /// Append the control batch.
    Write,
    /// Nothing to do: the producer has no transaction open here and the marker's epoch is not
    /// newer than the one the partition knows (a retried marker, or an empty transaction).
    Skip,
}

/// Why a batch or a marker is refused; the Kafka code is chosen at the edge (`server::codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnError {
    /// A non-transactional batch from a producer with a transaction open here (Kafka:
    /// INVALID_TXN_STATE).
    NotTransactional { producer_id: i64 },
    /// A marker whose epoch is older than the open transaction's (Kafka: INVALID_PRODUCER_EPOCH).
    StaleMarker {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    /// A batch whose sequence is above that of an earlier batch of its producer still being
    /// verified (Kafka: OUT_OF_ORDER_SEQUENCE_NUMBER, which the client retries).
    EarlierBatchVerifying {
        producer_id: i64,
        sequence: i32,
        lowest_sequence: i32,
    },
}

impl std::fmt::Display for TxnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TxnError::NotTransactional { producer_id } => write!(
                f,
                "producer {producer_id} has a transaction open in this partition; its batches must be transactional"
            ),
            TxnError::StaleMarker {
                producer_id,
                epoch,
                current,
            } => write!(
                f,
                "marker for producer {producer_id} epoch {epoch} is older than its open transaction's epoch {current}"
            ),
            TxnError::EarlierBatchVerifying {
                producer_id,
                sequence,
                lowest_sequence,
            } => write!(
                f,
                "producer {producer_id}: sequence {sequence} waits for its earlier batch at sequence {lowest_sequence}, which is being verified"
            ),
        }
    }
}

/// The transaction state of one partition.
#[derive(Clone, Debug, Default)]
pub struct TxnPartition {
    open: HashMap<i64, OpenTxn>,
    /// Transactions whose marker is appended but maybe not durable: (first offset, marker
    /// offset). They hold the LSO until the high watermark passes the marker.
    ending: Vec<(i64, i64)>,
    aborted: VecDeque<AbortedTxn>,
    /// Verification guards handed out and not yet used or cleared by a marker, by producer id.
    guards: HashMap<i64, Guard>,
    /// The last guard handed out (guards are unique per partition).
    last_guard: u64,
}

/// A verification in flight for one producer ([`TxnPartition::check_verified`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Guard {
    guard: u64,
    epoch: i16,
    /// The lowest base sequence among the batches that asked for this verification.
    lowest_sequence: i32,
}

/// Whether a transactional batch may be appended ([`TxnPartition::check_verified`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// The producer's transaction is open here, or the batch carries the guard the coordinator
    /// confirmed: append.
    Verified,
    /// The batch would open a transaction here: ask the coordinator, then send the batch again
    /// with this guard.
    Needed { guard: u64 },
}

impl TxnPartition {
    pub fn new() -> TxnPartition {
        TxnPartition::default()
    }

    /// Checks a data batch before it is appended (no state change).
    pub fn check_data(&self, producer_id: i64, transactional: bool) -> Result<(), TxnError> {
        if producer_id >= 0 && !transactional && self.open.contains_key(&producer_id) {
            return Err(TxnError::NotTransactional { producer_id });
        }
        Ok(())
    }

    /// KIP-890 part 1: may a transactional batch of (`producer_id`, `epoch`) starting at
    /// `sequence` and carrying `guard` (`None`: not verified yet) be appended? A batch that would
    /// open the producer's transaction here needs the guard of a verification the coordinator
    /// confirmed since the producer's last marker; otherwise the producer's guard for this epoch
    /// is handed out (a new one if it has none). A batch above the lowest sequence that asked for
    /// the pending verification is refused until that one is appended.
    pub fn check_verified(
        &mut self,
        producer_id: i64,
        epoch: i16,
        sequence: i32,
        guard: Option<u64>,
    ) -> Result<Verification, TxnError> {
        if self.open.contains_key(&producer_id) {
            return Ok(Verification::Verified);
        }
        match self.guards.get_mut(&producer_id) {
            Some(pending) if pending.epoch == epoch && guard == Some(pending.guard) => {
                if sequence > pending.lowest_sequence {
                    return Err(TxnError::EarlierBatchVerifying {
                        producer_id,
                        sequence,
                        lowest_sequence: pending.lowest_sequence,
                    });
                }
                return Ok(Verification::Verified);
            }
            // Several requests of the producer in flight share one verification (as Kafka's
            // verification state entry): a guard is replaced only by a marker or a new epoch.
            Some(pending) if pending.epoch == epoch => {
                pending.lowest_sequence = pending.lowest_sequence.min(sequence);
                return Ok(Verification::Needed {
                    guard: pending.guard,
                });
            }
            _ => {}
        }
        self.last_guard += 1;
        self.guards.insert(
            producer_id,
            Guard {
                guard: self.last_guard,
                epoch,
                lowest_sequence: sequence,
            },
        );
        Ok(Verification::Needed {
            guard: self.last_guard,
        })
    }

    /// A marker for `producer_id` reached this partition (written or skipped): a verification
    /// in flight belongs to the transaction it ends.
    pub fn clear_guard(&mut self, producer_id: i64) {
        self.guards.remove(&producer_id);
    }

    /// Records an appended data batch starting at `base_offset` (live, or replayed at open).
    pub fn record_data(
        &mut self,
        producer_id: i64,
        epoch: i16,
        transactional: bool,
        base_offset: i64,
    ) {
        if !transactional || producer_id < 0 {
            return;
        }
        self.guards.remove(&producer_id);
        let open = self.open.entry(producer_id).or_insert(OpenTxn {
            first_offset: base_offset,
            epoch,
        });
        assert!(
            open.first_offset <= base_offset,
            "batches are recorded in log order"
        );
        open.epoch = open.epoch.max(epoch);
    }

    /// Decides whether a marker is written. `known_epoch` is the producer's epoch in the
    /// partition's producer state (`None`: unknown here).
    pub fn marker_action(
        &self,
        producer_id: i64,
        epoch: i16,
        known_epoch: Option<i16>,
    ) -> Result<MarkerAction, TxnError> {
        match self.open.get(&producer_id) {
            Some(open) if epoch < open.epoch => Err(TxnError::StaleMarker {
                producer_id,
                epoch,
                current: open.epoch,
            }),
            Some(_) => Ok(MarkerAction::Write),
            // A newer epoch is written even with nothing open: the control batch makes the
            // fence of older epochs durable (a zombie's late batch is refused after a restart).
            None if known_epoch.is_none_or(|known| epoch > known) => Ok(MarkerAction::Write),
            None => Ok(MarkerAction::Skip),
        }
    }

    /// Records an appended marker at `marker_offset` (live, or replayed at open). Returns the
    /// aborted entry it added, if any.
    pub fn record_marker(
        &mut self,
        producer_id: i64,
        outcome: TxnOutcome,
        marker_offset: i64,
    ) -> Option<AbortedTxn> {
        let open = self.open.remove(&producer_id)?;
        assert!(
            open.first_offset < marker_offset,
            "the marker follows the data"
        );
        self.ending.push((open.first_offset, marker_offset));
        if outcome == TxnOutcome::Abort {
            let entry = AbortedTxn {
                producer_id,
                first_offset: open.first_offset,
                last_offset: marker_offset,
            };
            if let Some(last) = self.aborted.back() {
                assert!(
                    last.last_offset < marker_offset,
                    "markers are recorded in log order"
                );
            }
            self.aborted.push_back(entry);
            return Some(entry);
        }
        None
    }

    /// Forgets what the high watermark `hw` has made final (ended transactions whose marker is
    /// durable). Called after a flush; [`Self::last_stable_offset`] is right without it.
    pub fn advance(&mut self, hw: i64) {
        self.ending.retain(|&(_, marker)| marker >= hw);
    }

    /// The last stable offset under the high watermark `hw`.
    pub fn last_stable_offset(&self, hw: i64) -> i64 {
        let open = self.open.values().map(|t| t.first_offset);
        let ending = self
            .ending
            .iter()
            .filter(|&&(_, marker)| marker >= hw)
            .map(|&(first, _)| first);
        open.chain(ending).fold(hw, i64::min)
    }

    /// The first offset of `producer_id`'s open transaction here (DescribeProducers'
    /// currentTxnStartOffset).
    pub fn open_txn_start(&self, producer_id: i64) -> Option<i64> {
        self.open.get(&producer_id).map(|t| t.first_offset)
    }

    /// Producers with a transaction open here.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// Aborted transactions whose data overlaps `[from, to)` (Kafka's
    /// `collectAbortedTxns(fetchOffset, upperBoundOffset)`): marker at or after `from`, first
    /// offset before `to`; in marker order.
    pub fn aborted_in(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        if to <= from {
            return Vec::new();
        }
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        self.aborted
            .iter()
            .skip(start)
            .filter(|a| a.first_offset < to)
            .copied()
            .collect()
    }

    /// Whether the batch of `producer_id` at `offset` belongs to an aborted transaction.
    pub fn is_aborted(&self, producer_id: i64, offset: i64) -> bool {
        let start = self.aborted.partition_point(|a| a.last_offset < offset);
        self.aborted
            .iter()
            .skip(start)
            .any(|a| a.producer_id == producer_id && a.first_offset <= offset)
    }

    /// The log start moved to `start`: aborted entries wholly below it are forgotten.
    pub fn move_log_start(&mut self, start: i64) {
        while self.aborted.front().is_some_and(|a| a.last_offset < start) {
            self.aborted.pop_front();
        }
    }

    pub fn aborted_count(&self) -> usize {
        self.aborted.len()
    }

    /// The open transactions as (producer id, first offset, epoch), by producer id, and the
    /// aborted-transaction index: what a producer snapshot stores.
    pub fn durable_parts(&self) -> (Vec<(i64, i64, i16)>, Vec<AbortedTxn>) {
        let mut open: Vec<_> = self
            .open
            .iter()
            .map(|(&id, t)| (id, t.first_offset, t.epoch))
            .collect();
        open.sort_unstable();
        (open, self.aborted.iter().copied().collect())
    }

    /// The state a producer snapshot stored (every marker in it durable: no transaction is
    /// ending, no verification pending).
    pub fn from_durable_parts(open: &[(i64, i64, i16)], aborted: Vec<AbortedTxn>) -> TxnPartition {
        for pair in aborted.windows(2) {
            assert!(
                pair[0].last_offset < pair[1].last_offset,
                "aborted entries in marker order"
            );
        }
        TxnPartition {
            open: open
                .iter()
                .map(|&(id, first_offset, epoch)| {
                    (
                        id,
                        OpenTxn {
                            first_offset,
                            epoch,
                        },
                    )
                })
                .collect(),
            aborted: aborted.into(),
            ..TxnPartition::default()
        }
    }
}

/// The control record of a marker batch: key (version 0, type), value (version 0, coordinator
/// epoch), as Kafka's `EndTransactionMarker`.
pub fn control_record(outcome: TxnOutcome, coordinator_epoch: i32) -> ([u8; 4], [u8; 6]) {
    let mut key = [0u8; 4];
    key[2..4].copy_from_slice(&outcome.control_type().to_be_bytes());
    let mut value = [0u8; 6];
    value[2..6].copy_from_slice(&coordinator_epoch.to_be_bytes());
    (key, value)
}

/// The control type (0 abort, 1 commit, others: other control records) of a control batch's
/// first record, read from the batch bytes (control batches are never compressed). `None` if
/// the bytes do not hold a readable record.
pub fn control_type(batch: &[u8]) -> Option<i16> {
    let mut at = crate::log::batch::BATCH_HEADER_BYTES;
    let varint = |at: &mut usize| -> Option<i64> {
        let mut raw: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = *batch.get(*at)?;
            *at += 1;
            raw |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        None
    };
    let _length = varint(&mut at)?;
    at += 1; // attributes
    let _timestamp_delta = varint(&mut at)?;
    let _offset_delta = varint(&mut at)?;
    let key_length = varint(&mut at)?;
    if key_length < 4 {
        return None;
    }
    let key = batch.get(at..at + 4)?;
    Some(i16::from_be_bytes([key[2], key[3]]))
}

/// The outcome a control type names, if it is a transaction marker.
pub fn marker_outcome(control_type: i16) -> Option<TxnOutcome> {
    match control_type {
        0 => Some(TxnOutcome::Abort),
        1 => Some(TxnOutcome::Commit),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::BatchBuilder;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    #[test]
    fn lso_is_held_by_the_oldest_open_transaction_until_its_marker_is_durable() {
        let mut t = TxnPartition::new();
        t.record_data(1, 0, true, 0);
        t.record_data(2, 0, true, 3);
        t.record_data(1, 0, true, 5);
        assert_eq!(t.last_stable_offset(8), 0);
        assert_eq!(t.open_txn_start(1), Some(0));
        assert_eq!(t.record_marker(1, TxnOutcome::Commit, 8), None);
        assert_eq!(t.last_stable_offset(8), 0, "marker not durable yet");
        assert_eq!(t.last_stable_offset(9), 3);
        t.advance(9);
        let aborted = t.record_marker(2, TxnOutcome::Abort, 9).unwrap();
        assert_eq!(
            aborted,
            AbortedTxn {
                producer_id: 2,
                first_offset: 3,
                last_offset: 9
            }
        );
        assert_eq!(t.last_stable_offset(9), 3);
        assert_eq!(t.last_stable_offset(10), 10);
        t.advance(10);
        assert_eq!(t.last_stable_offset(7), 7, "capped by the high watermark");
    }

    #[test]
    fn non_transactional_batches_of_a_producer_in_a_transaction_are_refused() {
        let mut t = TxnPartition::new();
        t.record_data(1, 0, true, 0);
        assert_eq!(
            t.check_data(1, false),
            Err(TxnError::NotTransactional { producer_id: 1 })
        );
        assert!(t.check_data(1, true).is_ok());
        assert!(t.check_data(2, false).is_ok());
        assert!(t.check_data(-1, false).is_ok());
    }

    #[test]
    fn markers_are_written_once_and_stale_ones_refused() {
        let mut t = TxnPartition::new();
        assert_eq!(t.marker_action(1, 0, None), Ok(MarkerAction::Write));
        assert_eq!(t.marker_action(1, 0, Some(0)), Ok(MarkerAction::Skip));
        assert_eq!(t.marker_action(1, 1, Some(0)), Ok(MarkerAction::Write));
        t.record_data(1, 3, true, 0);
        assert_eq!(t.marker_action(1, 3, Some(3)), Ok(MarkerAction::Write));
        assert_eq!(t.marker_action(1, 4, Some(3)), Ok(MarkerAction::Write));
        assert_eq!(
            t.marker_action(1, 2, Some(3)),
            Err(TxnError::StaleMarker {
                producer_id: 1,
                epoch: 2,
                current: 3
            })
        );
        t.record_marker(1, TxnOutcome::Abort, 1);
        assert_eq!(t.marker_action(1, 3, Some(3)), Ok(MarkerAction::Skip));
        assert_eq!(
            t.record_marker(1, TxnOutcome::Abort, 2),
            None,
            "nothing open"
        );
    }

    #[test]
    fn aborted_index_answers_overlaps_and_follows_the_log_start() {
        let mut t = TxnPartition::new();
        t.record_data(1, 0, true, 0);
        t.record_data(2, 0, true, 2);
        t.record_marker(1, TxnOutcome::Abort, 4);
        t.record_marker(2, TxnOutcome::Commit, 5);
        t.record_data(2, 0, true, 6);
        t.record_marker(2, TxnOutcome::Abort, 9);
        let ids = |v: Vec<AbortedTxn>| {
            v.iter()
                .map(|a| (a.producer_id, a.first_offset))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(t.aborted_in(0, 10)), vec![(1, 0), (2, 6)]);
        assert_eq!(ids(t.aborted_in(5, 6)), vec![]);
        assert_eq!(ids(t.aborted_in(4, 5)), vec![(1, 0)]);
        assert_eq!(ids(t.aborted_in(5, 7)), vec![(2, 6)]);
        assert!(t.is_aborted(1, 1));
        assert!(!t.is_aborted(2, 2), "committed");
        assert!(t.is_aborted(2, 7));
        t.move_log_start(5);
        assert_eq!(t.aborted_count(), 1);
    }

    #[test]
    fn control_records_round_trip_through_a_batch() {
        for (outcome, epoch) in [(TxnOutcome::Commit, 7), (TxnOutcome::Abort, -1)] {
            let (key, value) = control_record(outcome, epoch);
            let mut b = BatchBuilder::new(1_000);
            b.attributes = 0x30;
            b.record(1_000, Some(&key), Some(&value));
            let bytes = b.build();
            let t = control_type(&bytes).unwrap();
            assert_eq!(marker_outcome(t), Some(outcome));
            assert_eq!(i32::from_be_bytes(value[2..6].try_into().unwrap()), epoch);
        }
        assert_eq!(control_type(&[0u8; 61]), None);
    }

    /// The control record exactly as Kafka 4.4 writes it: a COMMIT marker with coordinator
    /// epoch 2, read from the Kafka 4.4 reference broker with a raw Fetch: length 16,
    /// attributes 0, deltas 0, key `0000 0001`, value `0000 00000002`, no headers.
    #[test]
    fn control_record_bytes_match_kafka() {
        let (key, value) = control_record(TxnOutcome::Commit, 2);
        let mut b = BatchBuilder::new(1_000);
        b.attributes = 0x30;
        b.record(1_000, Some(&key), Some(&value));
        let bytes = b.build();
        let record: String = bytes[crate::log::batch::BATCH_HEADER_BYTES..]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(record, "2000000008000000010c00000000000200");
    }

    /// A model: random interleavings of transactional writes, commits, aborts and flushes of a
    /// few producers, against a per-offset array of (producer, fate). Checks the LSO and that a
    /// read_committed reader (which drops batches of aborted transactions using `aborted_in`)
    /// sees exactly the committed and non-transactional records below the LSO.
    #[test]
    fn random_transactions_match_a_per_offset_model() {
        for seed in 0..200u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut t = TxnPartition::new();
            // Per offset: (producer, Some(txn number) or None for non-transactional/marker).
            let mut log: Vec<(i64, Option<u32>, bool)> = Vec::new(); // (pid, txn, is_marker)
            let mut fate: HashMap<u32, TxnOutcome> = HashMap::new();
            let mut open: HashMap<i64, u32> = HashMap::new();
            let mut next_txn = 0u32;
            let mut hw = 0i64;
            for _ in 0..300 {
                let pid = rng.gen_range(0..4i64);
                match rng.gen_range(0..10) {
                    0..=4 => {
                        let txn = *open.entry(pid).or_insert_with(|| {
                            next_txn += 1;
                            next_txn
                        });
                        assert!(t.check_data(pid, true).is_ok());
                        t.record_data(pid, 0, true, log.len() as i64);
                        for _ in 0..rng.gen_range(1..4) {
                            log.push((pid, Some(txn), false));
                        }
                    }
                    5 => {
                        let plain = 10 + pid;
                        assert!(t.check_data(plain, false).is_ok());
                        log.push((plain, None, false));
                    }
                    6..=7 => {
                        let outcome = if rng.gen_bool(0.5) {
                            TxnOutcome::Commit
                        } else {
                            TxnOutcome::Abort
                        };
                        let action = t.marker_action(pid, 0, Some(0)).unwrap();
                        assert_eq!(action == MarkerAction::Write, open.contains_key(&pid));
                        if action == MarkerAction::Write {
                            let txn = open.remove(&pid).unwrap();
                            fate.insert(txn, outcome);
                            t.record_marker(pid, outcome, log.len() as i64);
                            log.push((pid, None, true));
                        }
                    }
                    _ => {
                        hw = rng.gen_range(hw..=log.len() as i64);
                        if rng.gen_bool(0.5) {
                            t.advance(hw);
                        }
                    }
                }
                // Model LSO: the first offset below hw of a txn whose marker is not below hw.
                let marker_at: HashMap<u32, i64> = log
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.2)
                    .map(|(o, e)| (o as i64, e.0))
                    .filter_map(|(o, pid)| {
                        // the txn ended by this marker: the last txn of pid before o
                        log[..o as usize]
                            .iter()
                            .rev()
                            .find(|e| e.0 == pid && e.1.is_some())
                            .map(|e| (e.1.unwrap(), o))
                    })
                    .collect();
                let model_lso = log
                    .iter()
                    .enumerate()
                    .filter_map(|(o, e)| e.1.map(|txn| (o as i64, txn)))
                    .filter(|(_, txn)| marker_at.get(txn).is_none_or(|&m| m >= hw))
                    .map(|(o, _)| o)
                    .fold(hw, i64::min);
                let lso = t.last_stable_offset(hw);
                assert_eq!(lso, model_lso, "seed {seed}");
                // A read_committed read of [0, lso).
                let aborted = t.aborted_in(0, lso);
                for (o, e) in log.iter().enumerate().take(lso as usize) {
                    let o = o as i64;
                    let dropped = aborted
                        .iter()
                        .any(|a| a.producer_id == e.0 && a.first_offset <= o && o < a.last_offset);
                    let model_dropped =
                        e.1.is_some_and(|txn| fate.get(&txn) == Some(&TxnOutcome::Abort));
                    if !e.2 {
                        assert_eq!(dropped, model_dropped, "seed {seed} offset {o}");
                        assert_eq!(
                            t.is_aborted(e.0, o),
                            model_dropped,
                            "seed {seed} offset {o}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn first_batch_of_a_transaction_needs_a_verified_guard() {
        let mut t = TxnPartition::new();
        let needed = |v: Result<Verification, TxnError>| match v {
            Ok(Verification::Needed { guard }) => guard,
            other => panic!("expected a verification, got {other:?}"),
        };
        let guard = needed(t.check_verified(7, 0, 0, None));
        // Requests in flight together share the guard; a wrong guard does not pass.
        assert_eq!(needed(t.check_verified(7, 0, 0, None)), guard);
        assert_eq!(needed(t.check_verified(7, 0, 0, Some(guard + 1))), guard);
        // A new epoch gets a new guard, and the old one is void.
        let newer = needed(t.check_verified(7, 1, 0, None));
        assert_ne!(newer, guard);
        needed(t.check_verified(7, 1, 0, Some(guard)));
        let guard = needed(t.check_verified(7, 0, 0, None));
        assert_eq!(
            t.check_verified(7, 0, 0, Some(guard)),
            Ok(Verification::Verified)
        );
        t.record_data(7, 0, true, 10);
        // Open: later batches need nothing.
        assert_eq!(t.check_verified(7, 0, 5, None), Ok(Verification::Verified));
        t.record_marker(7, TxnOutcome::Abort, 12);
        // A guard verified before a marker is void after it.
        let guard = needed(t.check_verified(7, 0, 6, None));
        t.clear_guard(7);
        needed(t.check_verified(7, 0, 6, Some(guard)));
    }

    /// Two batches of one producer verified concurrently: the later one (higher sequence) may
    /// not overtake the earlier, even with the guard, until the earlier one is appended (a
    /// producer without state here may start at any sequence, so nothing else would stop it).
    #[test]
    fn a_later_batch_waits_for_the_earliest_one_being_verified() {
        let mut t = TxnPartition::new();
        let Ok(Verification::Needed { guard }) = t.check_verified(7, 0, 15, None) else {
            panic!()
        };
        // An earlier batch asks too (a retry): it becomes the lowest.
        assert_eq!(
            t.check_verified(7, 0, 0, None),
            Ok(Verification::Needed { guard })
        );
        assert_eq!(
            t.check_verified(7, 0, 15, Some(guard)),
            Err(TxnError::EarlierBatchVerifying {
                producer_id: 7,
                sequence: 15,
                lowest_sequence: 0
            })
        );
        assert_eq!(
            t.check_verified(7, 0, 0, Some(guard)),
            Ok(Verification::Verified)
        );
        t.record_data(7, 0, true, 0);
        assert_eq!(
            t.check_verified(7, 0, 15, Some(guard)),
            Ok(Verification::Verified)
        );
        // A new epoch starts over from its own first batch.
        t.record_marker(7, TxnOutcome::Abort, 12);
        let Ok(Verification::Needed { guard }) = t.check_verified(7, 1, 30, None) else {
            panic!()
        };
        let Ok(Verification::Needed { guard: newer }) = t.check_verified(7, 2, 4, None) else {
            panic!()
        };
        assert_ne!(guard, newer);
        assert_eq!(
            t.check_verified(7, 2, 4, Some(newer)),
            Ok(Verification::Verified)
        );
    }
}
