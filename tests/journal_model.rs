//! The state journal against a trivial model, through the in-memory crash double.
//!
//! What it proves: for random sequences of append (small and near-segment-sized entries),
//! synchronous flush, ticketed flush (group commit; completed with success or failure),
//! snapshots (often larger than a segment, so chunked across rolls), compaction, injected sync
//! failures, clean restarts and crashes (power loss tearing the unsynced tail at a random
//! point with optional junk, power loss keeping nothing unsynced, process crash keeping all;
//! a power loss may also drop the segments a roll created whose seal, carried by the next
//! flush, had not completed),
//! the recovered state is exactly the model's state cut at some point P, where P is at least
//! everything the journal ever reported durable and at most everything written: the latest
//! snapshot completed before P, then every ordinary entry after it and before P, in order.
//! Never anything else. A poisoned journal refuses all work until reopened.
//!
//! How: one `SmallRng` seed drives a whole run; each seed runs under `catch_unwind` so a
//! failure prints the seed. `LOCKSTEP_SEED=n` replays one seed; `LOCKSTEP_SEEDS=n` sets how
//! many run.

use std::panic::{catch_unwind, AssertUnwindSafe};

use lockstep::journal::entries::{
    Entry, LockOutcome, LockedRange, RunState, ShardSnapshot, SharePartitionState, StateRun,
    TransactionLocks, TransactionRecord, TxnState,
};
use lockstep::journal::{FlushTicket, Journal, JournalConfig, JournalError, Recovered};
use lockstep::storage::mmap::{MemDir, Tear};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn random_partition(rng: &mut SmallRng, runs: usize) -> SharePartitionState {
    let mut offset = rng.gen_range(0..1000i64);
    SharePartitionState {
        group_id: format!("group-{}", rng.gen_range(0..5)),
        topic_id: rng.gen(),
        partition: rng.gen_range(0..8),
        start_offset: rng.gen_bool(0.5).then_some(offset),
        end_offset: None,
        state_epoch: rng.gen_range(0..3),
        runs: (0..runs)
            .map(|_| {
                let first = offset;
                offset += rng.gen_range(1..50);
                StateRun {
                    first_offset: first,
                    last_offset: offset - 1,
                    state: [
                        RunState::Available,
                        RunState::Acknowledged,
                        RunState::Archived,
                    ][rng.gen_range(0..3)],
                    delivery_count: rng.gen_range(0..6),
                }
            })
            .collect(),
    }
}

fn random_entry(rng: &mut SmallRng, segment_bytes: u64) -> Entry {
    // Mostly small entries; sometimes one close to (or over) what a segment can hold.
    let runs = if rng.gen_bool(0.05) {
        rng.gen_range(0..(segment_bytes as usize / 24 + 8))
    } else {
        rng.gen_range(0..6)
    };
    match rng.gen_range(0..4) {
        0 => Entry::SharePartitionSnapshot(random_partition(rng, runs)),
        1 => Entry::SharePartitionUpdate(random_partition(rng, runs)),
        2 => Entry::TransactionRecord(TransactionRecord {
            transaction_id: format!("group-1-flink-{}", rng.gen_range(0..100)),
            group_id: "group-1".into(),
            state: [
                TxnState::Ongoing,
                TxnState::Prepare,
                TxnState::Committed,
                TxnState::Aborted,
            ][rng.gen_range(0..4)],
            timeout_ms: 60_000,
            create_time_ms: rng.gen_range(0..1 << 40),
            prepare_time_ms: -1,
            decision_time_ms: -1,
            participants: vec![],
        }),
        _ => Entry::TransactionLocks(TransactionLocks {
            transaction_id: format!("group-1-flink-{}", rng.gen_range(0..100)),
            group_id: "group-1".into(),
            topic_id: rng.gen(),
            partition: rng.gen_range(0..8),
            ranges: (0..runs.min(200))
                .map(|i| LockedRange {
                    first_offset: 10 * i as i64,
                    last_offset: 10 * i as i64 + 5,
                    outcome: [LockOutcome::Accept, LockOutcome::Reject, LockOutcome::Gap]
                        [rng.gen_range(0..3)],
                    delivery_count: 1,
                })
                .collect(),
        }),
    }
}

fn random_snapshot(rng: &mut SmallRng) -> ShardSnapshot {
    let partitions = if rng.gen_bool(0.3) {
        rng.gen_range(10..60)
    } else {
        rng.gen_range(0..4)
    };
    ShardSnapshot {
        share_partitions: (0..partitions)
            .map(|_| {
                let runs = rng.gen_range(0..20);
                random_partition(rng, runs)
            })
            .collect(),
        transactions: vec![],
        transaction_locks: vec![],
        group_offsets: vec![],
        producer_transactions: vec![],
    }
}

/// What the journal should hold: every written entry, by sequence number.
#[derive(Default)]
struct Model {
    /// (seq, ordinary entry) in order.
    entries: Vec<(u64, Entry)>,
    /// (begin_seq, end_seq, state) of snapshots written, in order.
    snapshots: Vec<(u64, u64, ShardSnapshot)>,
    next_seq: u64,
}

impl Model {
    /// The recovered state must be this model cut at `cut`.
    fn check(&self, recovered: &Recovered, cut: u64) {
        let snapshot = self.snapshots.iter().rev().find(|(_, end, _)| *end < cut);
        match (snapshot, &recovered.snapshot) {
            (None, None) => {}
            (Some((begin, end, state)), Some(got)) => {
                assert_eq!(
                    (got.begin_seq, got.end_seq),
                    (*begin, *end),
                    "snapshot span"
                );
                assert_eq!(&got.state, state, "snapshot state");
            }
            (want, got) => panic!(
                "snapshot: want {:?}, got {:?}",
                want.map(|s| (s.0, s.1)),
                got.as_ref().map(|s| (s.begin_seq, s.end_seq))
            ),
        }
        let after = snapshot.map_or(0, |(_, end, _)| end + 1);
        let want: Vec<(u64, &Entry)> = self
            .entries
            .iter()
            .filter(|(seq, _)| *seq >= after && *seq < cut)
            .map(|(seq, e)| (*seq, e))
            .collect();
        let got: Vec<(u64, &Entry)> = recovered
            .entries
            .iter()
            .map(|e| (e.seq, &e.entry))
            .collect();
        assert_eq!(got.len(), want.len(), "replayed entry count");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "replayed entry");
        }
    }

    fn truncate(&mut self, cut: u64) {
        self.entries.retain(|(seq, _)| *seq < cut);
        self.snapshots.retain(|(_, end, _)| *end < cut);
        self.next_seq = cut;
    }
}

fn reopen(dir: &MemDir, config: &JournalConfig) -> (Journal<MemDir>, Recovered) {
    Journal::open(dir.clone(), config.clone()).unwrap_or_else(|e| panic!("reopen failed: {e}"))
}

/// How often each interesting thing happened, over all seeds: the test asserts each did.
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    crashes: u64,
    torn_tails_cut: u64,
    entries_lost_unsynced: u64,
    abandoned_snapshots: u64,
    snapshots_recovered: u64,
    segments_compacted: u64,
    recovered_after_compaction: u64,
    poisoned: u64,
    too_large: u64,
    multi_segment_snapshots: u64,
    unsealed_rolls_removed: u64,
}

impl Coverage {
    fn add(&mut self, o: Coverage) {
        self.crashes += o.crashes;
        self.torn_tails_cut += o.torn_tails_cut;
        self.entries_lost_unsynced += o.entries_lost_unsynced;
        self.abandoned_snapshots += o.abandoned_snapshots;
        self.snapshots_recovered += o.snapshots_recovered;
        self.segments_compacted += o.segments_compacted;
        self.recovered_after_compaction += o.recovered_after_compaction;
        self.poisoned += o.poisoned;
        self.too_large += o.too_large;
        self.multi_segment_snapshots += o.multi_segment_snapshots;
        self.unsealed_rolls_removed += o.unsealed_rolls_removed;
    }
}

fn run_seed(seed: u64) -> Coverage {
    let mut cov = Coverage::default();
    let mut rng = SmallRng::seed_from_u64(seed);
    let config = JournalConfig {
        segment_bytes: [4096, 8192, 16384][rng.gen_range(0..3)],
        snapshot_chunk_bytes: [64, 200, 1024][rng.gen_range(0..3)],
    };
    let dir = MemDir::default();
    let (mut journal, recovered) = reopen(&dir, &config);
    assert!(recovered.snapshot.is_none() && recovered.entries.is_empty());
    let mut model = Model::default();
    let mut ticket: Option<FlushTicket> = None;
    // Highest durable end the journal has reported (it must never lose those entries).
    let mut claimed_durable = 0u64;
    for _ in 0..rng.gen_range(50..250) {
        if journal.is_poisoned() {
            // A poisoned journal refuses everything with the original error.
            let entry = random_entry(&mut rng, config.segment_bytes);
            assert!(matches!(
                journal.append_entry(&entry),
                Err(JournalError::Poisoned { .. })
            ));
            assert!(matches!(
                journal.flush(),
                Err(JournalError::Poisoned { .. })
            ));
            assert!(matches!(
                journal.begin_flush(),
                Err(JournalError::Poisoned { .. })
            ));
            assert!(matches!(
                journal.compact(),
                Err(JournalError::Poisoned { .. })
            ));
        }
        match rng.gen_range(0..100) {
            0..=44 if !journal.is_poisoned() => {
                let entry = random_entry(&mut rng, config.segment_bytes);
                let encoded = entry.encode();
                match journal.append_entry(&entry) {
                    Ok(seq) => {
                        assert_eq!(seq, model.next_seq);
                        model.entries.push((seq, entry));
                        model.next_seq += 1;
                    }
                    Err(JournalError::EntryTooLarge { need, have, .. }) => {
                        cov.too_large += 1;
                        assert_eq!(need, encoded.len());
                        assert!(need > have && have == config.entry_bytes_max());
                    }
                    Err(e) => panic!("append: {e}"),
                }
            }
            45..=54 if !journal.is_poisoned() => {
                journal.flush().expect("flush");
                assert_eq!(journal.durable_end(), model.next_seq);
            }
            55..=64 if !journal.is_poisoned() => match ticket.take() {
                None => {
                    ticket = journal.begin_flush().expect("begin_flush");
                    if let Some(t) = &ticket {
                        assert_eq!(t.upto_seq + 1, model.next_seq);
                        assert!(
                            journal.begin_flush().unwrap().is_none(),
                            "one flush in flight"
                        );
                    } else {
                        assert_eq!(journal.durable_end(), model.next_seq, "nothing to flush");
                    }
                }
                Some(t) => {
                    let upto = t.upto_seq;
                    if rng.gen_bool(0.05) {
                        let result = journal.complete_flush(t, Err(std::io::Error::other("EIO")));
                        assert!(matches!(result, Err(JournalError::Poisoned { .. })));
                        assert!(journal.is_poisoned());
                        cov.poisoned += 1;
                    } else {
                        journal.complete_flush(t, Ok(())).expect("complete_flush");
                        assert!(journal.durable_end() > upto);
                    }
                }
            },
            65..=71 if !journal.is_poisoned() => {
                let snapshot = random_snapshot(&mut rng);
                let segments_before = journal.segment_paths().len();
                let written = journal.write_shard_snapshot(&snapshot).expect("snapshot");
                if journal.segment_paths().len() > segments_before + 1 {
                    cov.multi_segment_snapshots += 1;
                }
                assert_eq!(written.begin_seq, model.next_seq);
                model.next_seq = written.end_seq + 1;
                model
                    .snapshots
                    .push((written.begin_seq, written.end_seq, snapshot));
            }
            72..=77 if !journal.is_poisoned() => {
                let before = journal.segment_paths();
                let removed = journal.compact().expect("compact");
                cov.segments_compacted += removed.len() as u64;
                assert_eq!(before[..removed.len()], removed[..], "oldest first");
                if let Some(s) = journal.latest_durable_snapshot() {
                    assert!(s.end_seq < journal.durable_end());
                }
            }
            78..=79 if !journal.is_poisoned() => {
                dir.fail_next_syncs(1);
                let result = journal.flush();
                if journal.durable_end() == model.next_seq && result.is_ok() {
                    // Nothing was unsynced: the failure is still armed; disarm it.
                    dir.fail_next_syncs(0);
                } else {
                    assert!(matches!(result, Err(JournalError::Poisoned { .. })));
                    cov.poisoned += 1;
                }
            }
            80..=99 => {
                claimed_durable = claimed_durable.max(journal.durable_end());
                ticket = None;
                drop(journal);
                let mode = rng.gen_range(0..4);
                // A power loss may also lose the names of segments a roll created and whose
                // seal has not completed (their directory entries were never synced).
                let drop_new = rng.gen_bool(0.5);
                match mode {
                    0 => dir.crash_keeping_written(),
                    1 if drop_new => dir.crash_dropping_new_files(|_, lo, _| Tear {
                        keep_until: lo,
                        junk: None,
                    }),
                    1 => dir.crash_losing_unsynced(),
                    2 => {
                        let mut tear_rng = SmallRng::seed_from_u64(rng.gen());
                        let tear = move |_: &str, lo: usize, hi: usize| {
                            let keep_until = tear_rng.gen_range(lo..=hi);
                            let junk = (keep_until < hi && tear_rng.gen_bool(0.3)).then(|| {
                                (
                                    tear_rng.gen_range(keep_until..hi),
                                    tear_rng.gen_range(1..=255),
                                )
                            });
                            Tear { keep_until, junk }
                        };
                        if drop_new {
                            dir.crash_dropping_new_files(tear)
                        } else {
                            dir.crash(tear)
                        }
                    }
                    _ => {} // clean restart: nothing lost
                }
                cov.crashes += 1;
                let (reopened, recovered) = reopen(&dir, &config);
                let report = &recovered.report;
                cov.torn_tails_cut += u64::from(report.truncated.is_some());
                cov.unsealed_rolls_removed += u64::from(report.removed_unsealed.is_some());
                cov.abandoned_snapshots += report.abandoned_snapshots.len() as u64;
                cov.snapshots_recovered += u64::from(recovered.snapshot.is_some());
                cov.recovered_after_compaction += u64::from(report.first_seq > 0);
                cov.entries_lost_unsynced += model.next_seq - report.next_seq;
                journal = reopened;
                let cut = recovered.report.next_seq;
                assert!(
                    claimed_durable <= cut && cut <= model.next_seq,
                    "cut {cut} outside [{claimed_durable}, {}]",
                    model.next_seq
                );
                if mode == 0 || mode == 3 {
                    assert_eq!(
                        cut, model.next_seq,
                        "nothing written may be lost without power loss"
                    );
                }
                model.check(&recovered, cut);
                model.truncate(cut);
                assert_eq!(journal.next_seq(), cut);
                assert_eq!(
                    journal.durable_end(),
                    cut,
                    "recovery makes what it read durable"
                );
                claimed_durable = cut;
            }
            _ => {}
        }
        claimed_durable = claimed_durable.max(journal.durable_end());
    }
    // Final check: a process crash keeps everything written.
    drop(journal);
    dir.crash_keeping_written();
    let (_journal, recovered) = reopen(&dir, &config);
    assert_eq!(recovered.report.next_seq, model.next_seq);
    model.check(&recovered, model.next_seq);
    cov
}

fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("LOCKSTEP_SEED") {
        return vec![seed.parse().expect("LOCKSTEP_SEED is a number")];
    }
    let count = std::env::var("LOCKSTEP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300u64);
    (0..count).collect()
}

#[test]
fn journal_matches_the_model_through_crashes() {
    let seeds = seeds();
    let mut total = Coverage::default();
    for &seed in &seeds {
        match catch_unwind(AssertUnwindSafe(|| run_seed(seed))) {
            Ok(cov) => total.add(cov),
            Err(_) => {
                panic!("journal model test failed at seed {seed}; replay with LOCKSTEP_SEED={seed}")
            }
        }
    }
    println!("coverage over {} seeds: {total:?}", seeds.len());
    if seeds.len() >= 100 {
        // The run must have reached every situation it claims to test.
        let c = total;
        for (what, n) in [
            ("crashes", c.crashes),
            ("torn tails cut", c.torn_tails_cut),
            ("unsynced entries lost", c.entries_lost_unsynced),
            ("abandoned snapshots", c.abandoned_snapshots),
            ("snapshots recovered", c.snapshots_recovered),
            ("segments compacted", c.segments_compacted),
            ("recoveries after compaction", c.recovered_after_compaction),
            ("poisonings", c.poisoned),
            ("entries too large", c.too_large),
            ("unsealed rolls removed", c.unsealed_rolls_removed),
            ("snapshots spanning segments", c.multi_segment_snapshots),
        ] {
            assert!(n > 0, "no {what} in {} seeds", seeds.len());
        }
    }
}
