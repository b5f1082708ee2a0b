//! Deterministic simulation of share groups with transactional acknowledgements, at the level
//! of the shard's synchronous state (`ShardState`, `ShareState`) and its state journal, with a
//! virtual clock and simulated crashes that drop what was not durable (issue 6).
//!
//! The driver plays a streaming framework: workers (share-group members) fetch records and
//! acknowledge them, plainly (ACCEPT, answered once the journal is flushed, then the record goes
//! to the sink) or into the current checkpoint's transaction; the framework's coordinator
//! begins, prepares, writes the checkpoint's records to the sink *after* the prepare is
//! answered (atomically with the transaction id), then commits. Lock expiry, RELEASE, member
//! leave, transaction timeouts, aborts and crashes (the journal loses its unsynced tail, torn at
//! a random point) happen at random. After a crash the shard restores from the journal, the
//! participants resolve their locks with the coordinator, and the framework runs the KIP's
//! recovery routine: a PREPARE whose checkpoint is in the sink is committed, anything else is
//! aborted.
//!
//! The steps mirror what the runtime does (`runtime::shard_runtime`): journal entries are appended after
//! every operation; acknowledgements, prepare (locks, then the PREPARE record) and decisions
//! are answered only after a flush.
//!
//! Invariants, checked on every step: a record in the sink is never handed out again; no
//! record enters the sink twice; nothing is ever ARCHIVED (the driver never lets a record reach
//! the delivery limit). At the end a drain must put every produced record in the sink exactly
//! once, with no transaction pending.
//!
//! `LOCKSTEP_SEED=n` replays one seed; `LOCKSTEP_SEEDS=n` runs n seeds (default 300).

use bytes::Bytes;
use lockstep::journal::{Journal, JournalConfig};
use lockstep::log::batch::BatchBuilder;
use lockstep::model::ShardId;
use lockstep::model::TopicPartition;
use lockstep::server::ops::{PartitionRef, ProduceOp, ShareAckOp, ShareFetchOp};
use lockstep::server::registry::TopicRegistry;
use lockstep::server::shard_state::ShardState;
use lockstep::server::share::{ShareKey, ShareState};
use lockstep::server::share_group::Heartbeat;
use lockstep::share::{AckBatch, AcknowledgeType, RecordState};
use lockstep::storage::file::SimStorage;
use lockstep::storage::mmap::{MemDir, Tear};
use lockstep::txn::{TxnConfig, TxnState};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use uuid::Uuid;

const GROUP: &str = "g";
const TOPIC: &str = "t";
const RECORDS: i64 = 400;
const DELIVERY_LIMIT: u16 = 10;
/// Every duration of the simulation is 15× what it was when Kafka's group-config bounds
/// (`share.record.lock.duration.ms` >= 15 000) came in, so the interleavings are the same.
const LOCK_MS: u64 = 15_000;
const MEMBERS: usize = 3;

fn registry() -> Arc<TopicRegistry> {
    let mut r = TopicRegistry::new("sim".into());
    r.create_topic(TOPIC, Uuid::from_u128(1), 1, &[]).unwrap();
    r.set_group_configs(
        GROUP,
        [
            ("share.auto.offset.reset", "earliest"),
            ("share.delivery.count.limit", "10"),
            ("share.record.lock.duration.ms", "15000"),
            ("share.partition.max.record.locks", "150"),
            ("share.transaction.timeout.ms", "75000"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    )
    .unwrap();
    Arc::new(r)
}

fn pref() -> PartitionRef {
    PartitionRef {
        topic: TOPIC.into(),
        topic_id: Uuid::from_u128(1),
        partition: 0,
    }
}

fn txn_partition() -> TopicPartition {
    TopicPartition {
        topic_id: Uuid::from_u128(1),
        partition: 0,
    }
}

fn member(i: usize) -> String {
    format!("member-{i}")
}

/// What the framework has seen; survives broker crashes.
#[derive(Default)]
struct Framework {
    /// Offsets whose processing is committed: plain ACCEPT answered, or in a checkpoint.
    sink: BTreeSet<i64>,
    /// Checkpoints written to the sink (transaction ids).
    checkpoints: BTreeSet<String>,
    /// Offsets each worker holds (acquired, not yet acknowledged).
    held: BTreeMap<usize, BTreeMap<i64, u16>>,
    /// Offsets acknowledged into each open transaction.
    in_txn: BTreeMap<String, BTreeSet<i64>>,
    next_checkpoint: u64,
    current: Option<String>,
}

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    crashes: u64,
    commits: u64,
    aborts: u64,
    timeouts: u64,
    prepared_at_crash: u64,
    plain_acks: u64,
    txn_acks: u64,
    snapshots: u64,
}

struct Sim {
    rng: SmallRng,
    now: u64,
    storage: SimStorage,
    dir: MemDir,
    state: ShardState<SimStorage>,
    journal: Journal<MemDir>,
    fw: Framework,
    stats: Stats,
    joined: BTreeSet<usize>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let storage = SimStorage::new();
        let reg = registry();
        let (mut state, _) =
            ShardState::open(ShardId(0), 1, Path::new("/data"), storage.clone(), reg, 0).unwrap();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut offset = 0;
        while offset < RECORDS {
            let n = rng.gen_range(1..=5).min(RECORDS - offset);
            let mut b = BatchBuilder::new(1_000);
            for i in 0..n {
                b.record(1_000, None, Some(format!("v{}", offset + i).as_bytes()));
            }
            let applied = state.produce(
                &ProduceOp {
                    partition: pref(),
                    records: Bytes::from(b.build()),
                    acks: -1,
                    timeout_ms: 1_000,
                    verification_guard: None,
                },
                0,
            );
            assert_eq!(applied.result.error_code, 0);
            offset += n;
        }
        let key = pref().key();
        state.partition_mut(&key).unwrap().log.flush().unwrap();
        let dir = MemDir::new("/journal");
        let (journal, _) = Journal::open(dir.clone(), journal_config()).unwrap();
        Sim {
            rng,
            now: 1_000,
            storage,
            dir,
            state,
            journal,
            fw: Framework::default(),
            stats: Stats::default(),
            joined: BTreeSet::new(),
        }
    }

    fn append(&mut self) {
        for entry in self.state.share.take_entries() {
            self.journal.append_entry(&entry).unwrap();
        }
    }

    fn flush(&mut self) {
        self.append();
        self.journal.flush().unwrap();
    }

    fn txn_config(&self) -> TxnConfig {
        self.state.registry().group_config(GROUP).txn
    }

    fn join(&mut self, m: usize) {
        let reg = self.state.registry().clone();
        let (answer, _) = self.state.share.groups.heartbeat(
            &Heartbeat {
                group_id: GROUP.into(),
                member_id: member(m),
                member_epoch: 0,
                rack_id: None,
                subscribed: Some(vec![TOPIC.into()]),
                client_id: "sim".into(),
                client_host: "/127.0.0.1".into(),
            },
            &reg,
            self.now,
        );
        assert_eq!(answer.error_code, 0);
        self.joined.insert(m);
    }

    fn check_no_archived(&self) {
        for (_, sp) in self.state.share.partitions() {
            for run in sp.runs() {
                assert_ne!(
                    run.state,
                    RecordState::Archived,
                    "[{}, {}] archived",
                    run.first,
                    run.last
                );
            }
        }
    }

    fn fetch(&mut self, m: usize) {
        if !self.joined.contains(&m) {
            self.join(m);
        }
        let max_records = self.rng.gen_range(1..=40);
        let fetched = self.state.share_fetch(
            &ShareFetchOp {
                group_id: GROUP.into(),
                member_id: member(m),
                partitions: vec![pref()],
                max_records,
                batch_size: max_records,
                record_limit: false,
                partition_max_bytes: 1 << 20,
                min_one_batch: true,
                acquire_created: true,
            },
            self.now,
        );
        self.append();
        for p in fetched {
            assert_eq!(p.error_code, 0, "{:?}", p.error_message);
            for range in p.acquired {
                for offset in range.first..=range.last {
                    assert!(
                        !self.fw.sink.contains(&offset),
                        "offset {offset} handed out again after it was committed (delivery {})",
                        range.delivery_count
                    );
                    self.fw
                        .held
                        .entry(m)
                        .or_default()
                        .insert(offset, range.delivery_count);
                }
            }
        }
        // Records near the delivery limit are acknowledged at once (never archived).
        let urgent: Vec<i64> = self
            .fw
            .held
            .entry(m)
            .or_default()
            .iter()
            .filter(|(_, c)| **c >= DELIVERY_LIMIT - 1)
            .map(|(o, _)| *o)
            .collect();
        if !urgent.is_empty() {
            self.plain_ack(m, &urgent, AcknowledgeType::Accept);
        }
    }

    fn pick_held(&mut self, m: usize) -> Vec<i64> {
        let held: Vec<i64> = self
            .fw
            .held
            .get(&m)
            .into_iter()
            .flatten()
            .map(|(o, _)| *o)
            .collect();
        if held.is_empty() {
            return held;
        }
        let n = self.rng.gen_range(1..=held.len());
        let start = self.rng.gen_range(0..=held.len() - n);
        held[start..start + n].to_vec()
    }

    fn plain_ack(&mut self, m: usize, offsets: &[i64], t: AcknowledgeType) {
        let batches: Vec<AckBatch> = offsets.iter().map(|o| AckBatch::new(*o, *o, t)).collect();
        let results = self.state.share_acknowledge(
            &ShareAckOp {
                group_id: GROUP.into(),
                member_id: member(m),
                partitions: vec![(pref(), batches)],
            },
            self.now,
        );
        self.flush();
        assert_eq!(results[0].error_code, 0, "{:?}", results[0].error_message);
        let held = self.fw.held.entry(m).or_default();
        for o in offsets {
            held.remove(o);
            if t == AcknowledgeType::Accept {
                assert!(self.fw.sink.insert(*o), "offset {o} committed twice");
            }
        }
        self.stats.plain_acks += 1;
    }

    fn begin(&mut self) {
        let id = format!("{GROUP}-job-{}", self.fw.next_checkpoint);
        self.fw.next_checkpoint += 1;
        let config = self.txn_config();
        let answer = self.state.share.txn_begin(GROUP, &id, -1, config, self.now);
        self.append();
        if answer.error_code == 0 {
            self.fw.in_txn.insert(id.clone(), BTreeSet::new());
            self.fw.current = Some(id);
        }
    }

    fn txn_ack(&mut self, m: usize) {
        let Some(id) = self.fw.current.clone() else {
            return self.begin();
        };
        let offsets = self.pick_held(m);
        if offsets.is_empty() {
            return;
        }
        let config = self.txn_config();
        let refused = self.state.share.txn_register(
            GROUP,
            &member(m),
            &id,
            &[txn_partition()],
            config,
            self.now,
        );
        if refused[0].is_some() {
            // Not ONGOING any more (timed out): a new checkpoint.
            self.fw.current = None;
            return;
        }
        let batches: Vec<AckBatch> = offsets
            .iter()
            .map(|o| AckBatch::new(*o, *o, AcknowledgeType::Accept))
            .collect();
        let locked = self
            .state
            .txn_lock(GROUP, &member(m), &id, &[(pref(), batches)]);
        let n = match &locked[0] {
            Ok(n) => *n,
            Err(e) => panic!("lock refused: {:?}", e),
        };
        let late = self
            .state
            .share
            .txn_ack_done(GROUP, &id, &[(txn_partition(), n)]);
        if !late.is_empty() {
            self.state.txn_apply(GROUP, &id, false);
        }
        self.append();
        let held = self.fw.held.entry(m).or_default();
        for o in &offsets {
            held.remove(o);
        }
        self.fw.in_txn.entry(id).or_default().extend(offsets);
        self.stats.txn_acks += 1;
    }

    /// The framework's checkpoint: prepare, write the sink, commit.
    fn checkpoint(&mut self, crash_between: bool) {
        let Some(id) = self.fw.current.take() else {
            return;
        };
        let config = self.txn_config();
        let answer = self.state.share.txn_prepare(GROUP, &id, config, self.now);
        self.append();
        if answer.error_code != 0 {
            self.fw.in_txn.remove(&id);
            return;
        }
        assert_eq!(self.state.share.txn_acks_in_flight(GROUP, &id), 0);
        self.state.share.txn_persist_locks(GROUP, &id);
        self.flush();
        assert!(self.state.share.txn_record_prepared(GROUP, &id));
        self.flush();
        // Prepared: the checkpoint goes to the sink atomically with its id.
        let offsets = self.fw.in_txn.remove(&id).unwrap_or_default();
        for o in &offsets {
            assert!(
                self.fw.sink.insert(*o),
                "offset {o} committed twice (checkpoint {id})"
            );
        }
        self.fw.checkpoints.insert(id.clone());
        if crash_between {
            self.stats.prepared_at_crash += 1;
            return self.crash();
        }
        self.decide(&id, true);
    }

    fn decide(&mut self, id: &str, commit: bool) {
        let config = self.txn_config();
        let before = self.state.share.txn_get(GROUP, id).map(|r| r.state);
        let answer = if commit {
            self.state.share.txn_commit(GROUP, id, config, self.now)
        } else {
            self.state.share.txn_abort(GROUP, id, config, self.now)
        };
        self.flush();
        assert_eq!(answer.error_code, 0, "{:?}", answer.error_message);
        if before.is_some_and(|s| !s.is_finished()) {
            self.state
                .txn_apply(GROUP, id, answer.state == TxnState::Committed);
            self.append();
        }
        if answer.state == TxnState::Committed {
            self.stats.commits += 1;
        } else {
            self.stats.aborts += 1;
        }
    }

    fn abort_current(&mut self) {
        if let Some(id) = self.fw.current.take() {
            self.decide(&id, false);
            self.fw.in_txn.remove(&id);
        }
    }

    fn advance(&mut self, ms: u64) {
        // Workers with records near the delivery limit acknowledge them before time passes.
        let members: Vec<usize> = self.fw.held.keys().copied().collect();
        for m in members {
            let urgent: Vec<i64> = self.fw.held[&m]
                .iter()
                .filter(|(_, c)| **c >= DELIVERY_LIMIT - 2)
                .map(|(o, _)| *o)
                .collect();
            if !urgent.is_empty() {
                self.plain_ack(m, &urgent, AcknowledgeType::Accept);
            }
        }
        self.now += ms;
        self.state.share.expire_locks(self.now);
        for record in self.state.share.txn_expire(self.now) {
            self.state.txn_apply(GROUP, &record.transaction_id, false);
            self.fw.in_txn.remove(&record.transaction_id);
            if self.fw.current.as_deref() == Some(record.transaction_id.as_str()) {
                self.fw.current = None;
            }
            self.stats.timeouts += 1;
        }
        self.append();
        // Held records whose lock expired are no longer the worker's.
        let now = self.now;
        let _ = now;
        for held in self.fw.held.values_mut() {
            held.retain(|_, _| ms < LOCK_MS);
        }
    }

    /// A journal snapshot of the shard's state, then compaction once it is durable.
    fn snapshot(&mut self) {
        self.append();
        let snapshot = self.state.share.durable_snapshot(self.now);
        self.journal.write_shard_snapshot(&snapshot).unwrap();
        self.append();
        if self.rng.gen_bool(0.5) {
            self.journal.flush().unwrap();
            self.journal.compact().unwrap();
        }
        self.stats.snapshots += 1;
    }

    fn leave(&mut self, m: usize) {
        self.state.share.release_member(GROUP, &member(m));
        self.append();
        self.fw.held.remove(&m);
    }

    fn crash(&mut self) {
        self.stats.crashes += 1;
        match self.rng.gen_range(0..3) {
            0 => self.dir.crash_losing_unsynced(),
            1 => {
                let mut tear_rng = SmallRng::seed_from_u64(self.rng.gen());
                self.dir.crash(|_, lo, hi| Tear {
                    keep_until: tear_rng.gen_range(lo..=hi),
                    junk: None,
                })
            }
            _ => self.dir.crash_keeping_written(),
        }
        let (journal, recovered) = Journal::open(self.dir.clone(), journal_config())
            .unwrap_or_else(|e| panic!("journal recovery failed: {e}"));
        self.journal = journal;
        let reg = self.state.registry().clone();
        self.state.share = ShareState::restore(&recovered, &reg, self.now)
            .unwrap_or_else(|e| panic!("restore failed: {e}"));
        self.append();
        // Participants resolve their locks with the coordinator.
        for (group, id) in self.state.share.txn_locked() {
            let state = self.state.share.txn_get(&group, &id).map(|r| r.state);
            match state {
                Some(TxnState::Prepare) => {}
                Some(TxnState::Committed) => self.state.txn_apply(&group, &id, true),
                _ => self.state.txn_apply(&group, &id, false),
            }
        }
        self.append();
        // Workers lost their acquisitions and rejoin; the framework recovers (the KIP routine).
        self.fw.held.clear();
        self.fw.in_txn.clear();
        self.fw.current = None;
        self.joined.clear();
        let config = self.txn_config();
        let pending = self.state.share.txn_list(GROUP, &[], config, self.now);
        for record in pending {
            assert_ne!(
                record.state,
                TxnState::Ongoing,
                "ONGOING survived a restart"
            );
            let in_sink = self.fw.checkpoints.contains(&record.transaction_id);
            self.decide(&record.transaction_id, in_sink);
        }
        let _ = self.storage.sync_count();
    }

    fn step(&mut self) {
        let m = self.rng.gen_range(0..MEMBERS);
        match self.rng.gen_range(0..100) {
            0..=29 => self.fetch(m),
            30..=44 => {
                let offsets = self.pick_held(m);
                if !offsets.is_empty() {
                    self.plain_ack(m, &offsets, AcknowledgeType::Accept);
                }
            }
            45..=49 => {
                let offsets = self.pick_held(m);
                if !offsets.is_empty() {
                    self.plain_ack(m, &offsets, AcknowledgeType::Release);
                }
            }
            50..=69 => self.txn_ack(m),
            70..=74 => self.begin(),
            75..=81 => self.checkpoint(false),
            82..=83 => self.checkpoint(true),
            84..=85 => self.abort_current(),
            86..=91 => {
                let ms = if self.rng.gen_bool(0.2) { 22_500 } else { 750 };
                self.advance(ms);
            }
            92..=94 => self.leave(m),
            95..=96 => self.snapshot(),
            _ => self.crash(),
        }
        self.check_no_archived();
    }

    /// Everything left is consumed with plain ACCEPTs; pending transactions are resolved.
    fn drain(&mut self) {
        self.checkpoint(false);
        for _ in 0..10_000 {
            let spso = self
                .state
                .share
                .partitions()
                .next()
                .map_or(0, |(_, sp)| sp.spso());
            if spso >= RECORDS {
                break;
            }
            for m in 0..MEMBERS {
                self.fetch(m);
                let held: Vec<i64> = self
                    .fw
                    .held
                    .get(&m)
                    .into_iter()
                    .flatten()
                    .map(|(o, _)| *o)
                    .collect();
                if !held.is_empty() {
                    self.plain_ack(m, &held, AcknowledgeType::Accept);
                }
            }
            self.advance(LOCK_MS + 1);
        }
        // Checkpoints the framework abandoned (it began a newer one) end like this.
        let config = self.txn_config();
        for record in self.state.share.txn_list(GROUP, &[], config, self.now) {
            assert_eq!(record.state, TxnState::Ongoing, "a PREPARE left undecided");
            let locked: u64 = record.participants.iter().map(|p| p.locked_records).sum();
            assert_eq!(
                locked, 0,
                "records locked by a pending transaction after the drain"
            );
            self.decide(&record.transaction_id, false);
        }
        assert!(
            self.state
                .share
                .txn_list(GROUP, &[], config, self.now)
                .is_empty(),
            "transactions still pending after the drain"
        );
        let missing: Vec<i64> = (0..RECORDS).filter(|o| !self.fw.sink.contains(o)).collect();
        assert!(missing.is_empty(), "lost records: {missing:?}");
        assert_eq!(self.fw.sink.len() as i64, RECORDS);
        let key = ShareKey {
            group_id: GROUP.into(),
            partition: pref().key(),
        };
        let _ = key;
    }
}

fn journal_config() -> JournalConfig {
    JournalConfig {
        segment_bytes: 64 * 1024,
        snapshot_chunk_bytes: 16 * 1024,
    }
}

fn run_seed(seed: u64, steps: usize) -> Stats {
    let mut sim = Sim::new(seed);
    for _ in 0..steps {
        sim.step();
    }
    sim.drain();
    sim.stats
}

fn run_seed_reported(seed: u64, steps: usize) -> Stats {
    let result = std::panic::catch_unwind(|| run_seed(seed, steps));
    match result {
        Ok(stats) => stats,
        Err(e) => {
            eprintln!("share_txn_sim failed with seed {seed} (replay: LOCKSTEP_SEED={seed})");
            std::panic::resume_unwind(e)
        }
    }
}

#[test]
fn exactly_once_under_crashes_many_seeds() {
    if let Ok(seed) = std::env::var("LOCKSTEP_SEED") {
        let stats = run_seed_reported(seed.parse().expect("LOCKSTEP_SEED is a u64"), 2_000);
        eprintln!("{stats:?}");
        return;
    }
    let seeds: u64 = std::env::var("LOCKSTEP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut total = Stats::default();
    for seed in 0..seeds {
        let s = run_seed_reported(seed, 1_000);
        total.crashes += s.crashes;
        total.commits += s.commits;
        total.aborts += s.aborts;
        total.timeouts += s.timeouts;
        total.prepared_at_crash += s.prepared_at_crash;
        total.plain_acks += s.plain_acks;
        total.txn_acks += s.txn_acks;
        total.snapshots += s.snapshots;
    }
    eprintln!("{seeds} seeds: {total:?}");
    // The interesting cases happened.
    assert!(total.crashes > seeds);
    assert!(total.commits > 0 && total.aborts > 0 && total.prepared_at_crash > 0);
    assert!(total.txn_acks > 0 && total.plain_acks > 0);
}
