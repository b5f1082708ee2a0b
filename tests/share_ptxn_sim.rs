//! Deterministic simulation of a share-group → topic pipeline whose acknowledgements ride a
//! producer transaction (TxnShareAcknowledge, KIP-1289's draft; issue 17), at the level of the
//! shard's synchronous state (`ShardState`) and its state journal, with a virtual clock and
//! simulated crashes that drop what was not durable.
//!
//! The driver plays the job: workers (share-group members) fetch records, write their output
//! into the producer's current transaction and acknowledge the inputs into it (`ptxn_share_lock`,
//! answered once the journal is flushed); the job ends the transaction with a commit or an
//! abort. The producer-transaction coordinator is simulated with the rules of Kafka's (and
//! `ptxn::coordinator`'s): its decision is durable before any marker is sent (a committed
//! transaction's output is then visible to read_committed consumers, whatever happens next), the
//! markers are written with the bumped epoch (KIP-890), the transaction completes only once every
//! marker is durable, and after a crash it re-sends the markers of a decided transaction and
//! aborts an ongoing one (its producer is fenced with an epoch bump). The coordinator's own log is
//! out of scope here (`ptxn::coordinator`): it survives the crashes.
//!
//! Invariants, checked on every step: an input record whose output is committed is never handed
//! out again; no input reaches the committed output twice; nothing is ever ARCHIVED; after a
//! restart the producer's locks are not among the share transactions a participant asks about.
//! At the end a drain must put every input record in the committed output exactly once.
//!
//! What it runs (issue 13): the production synchronous steps of the partition's shard —
//! `ShardState::produce`, `share_fetch`, `ptxn_share_lock`, `ptxn_share_resolve`, the share state's
//! journal entries and `ShareState::restore` — on a simulated journal and clock. The async steps
//! that string them together in the broker are NOT driven here: the producer-transaction
//! coordinator and its marker fan-out (`shard::exec::ptxn`, `ShardPtxn`) and the partition side's
//! WriteTxnMarkers with its durability waits (`ShardExec::write_txn_markers`) are played by this
//! driver with the same rules. (`tests/share_txn_sim.rs`, by contrast, runs the core's
//! share-transaction steps themselves on a deterministic `ShardIo`.)
//!
//! `LOCKSTEP_SEED=n` replays one seed; `LOCKSTEP_SEEDS=n` runs n seeds (default 150).

use bytes::Bytes;
use lockstep::journal::{Journal, JournalConfig};
use lockstep::log::batch::BatchBuilder;
use lockstep::model::ShardId;
use lockstep::ptxn::share::ProducerLock;
use lockstep::ptxn::{TxnMarker, TxnOutcome};
use lockstep::shard::ops::{PartitionRef, ProduceOp, ShareFetchOp};
use lockstep::shard::registry::TopicRegistry;
use lockstep::shard::share_group::Heartbeat;
use lockstep::shard::share_state::ShareState;
use lockstep::shard::state::ShardState;
use lockstep::share::{AckBatch, AcknowledgeType, RecordState};
use lockstep::storage::file::SimStorage;
use lockstep::storage::mmap::{MemDir, Tear};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use uuid::Uuid;

const GROUP: &str = "g";
const TOPIC: &str = "t";
const RECORDS: i64 = 300;
const DELIVERY_LIMIT: u16 = 10;
const LOCK_MS: u64 = 15_000;
const MEMBERS: usize = 3;
const PRODUCER_ID: i64 = 7;

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

fn member(i: usize) -> String {
    format!("member-{i}")
}

/// The producer-transaction coordinator's view of the job's one transactional id.
#[derive(Clone, Debug, PartialEq)]
enum Coord {
    /// No transaction open; the next one runs at `epoch`.
    Ready,
    /// A transaction at `epoch` is open.
    Ongoing,
    /// Decided (durable); its markers are not all durable yet.
    Deciding(TxnMarker),
}

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    crashes: u64,
    commits: u64,
    aborts: u64,
    decided_at_crash: u64,
    txn_acks: u64,
    snapshots: u64,
}

struct Sim {
    rng: SmallRng,
    now: u64,
    dir: MemDir,
    state: ShardState<SimStorage>,
    journal: Journal<MemDir>,
    coord: Coord,
    epoch: i16,
    /// Inputs whose output the open transaction holds (written and acknowledged into it).
    in_txn: BTreeSet<i64>,
    /// Inputs whose output is committed (visible to read_committed).
    committed: BTreeSet<i64>,
    /// Per worker: offset → (delivery count, acquired at).
    held: BTreeMap<usize, BTreeMap<i64, (u16, u64)>>,
    joined: BTreeSet<usize>,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let storage = SimStorage::new();
        let (mut state, _) =
            ShardState::open(ShardId(0), 1, Path::new("/data"), storage, registry(), 0).unwrap();
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
        state
            .partition_mut(&pref().key())
            .unwrap()
            .log
            .flush()
            .unwrap();
        let dir = MemDir::new("/journal");
        let (journal, _) = Journal::open(dir.clone(), journal_config()).unwrap();
        Sim {
            rng,
            now: 1_000,
            dir,
            state,
            journal,
            coord: Coord::Ready,
            epoch: 0,
            in_txn: BTreeSet::new(),
            committed: BTreeSet::new(),
            held: BTreeMap::new(),
            joined: BTreeSet::new(),
            stats: Stats::default(),
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
                acknowledge: None,
                min_bytes: 0,
                wait_durable: true,
            },
            self.now,
        );
        self.append();
        for p in fetched {
            assert_eq!(p.error_code, 0, "{:?}", p.error_message);
            for range in p.acquired {
                for offset in range.first..=range.last {
                    assert!(
                        !self.committed.contains(&offset),
                        "input {offset} handed out again after its output was committed (delivery {})",
                        range.delivery_count
                    );
                    self.held
                        .entry(m)
                        .or_default()
                        .insert(offset, (range.delivery_count, self.now));
                }
            }
        }
        // Records near the delivery limit go through a transaction of their own at once.
        let urgent: Vec<i64> = self
            .held
            .entry(m)
            .or_default()
            .iter()
            .filter(|(_, (c, _))| *c >= DELIVERY_LIMIT - 2)
            .map(|(o, _)| *o)
            .collect();
        self.commit_urgent(m, urgent);
    }

    /// Commits the open transaction, then `urgent` (still held: a crash may come in between)
    /// in a transaction of its own.
    fn commit_urgent(&mut self, m: usize, urgent: Vec<i64>) {
        if urgent.is_empty() {
            return;
        }
        self.end(true, false);
        let still: Vec<i64> = urgent
            .into_iter()
            .filter(|o| self.held.get(&m).is_some_and(|h| h.contains_key(o)))
            .collect();
        if !still.is_empty() {
            self.stage(m, &still);
            self.end(true, false);
        }
    }

    fn pick_held(&mut self, m: usize) -> Vec<i64> {
        let held: Vec<i64> = self
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

    /// Worker `m` writes the output of `offsets` into the open transaction (beginning one if
    /// none is open) and acknowledges them into it; answered once the locks are durable.
    fn stage(&mut self, m: usize, offsets: &[i64]) {
        match self.coord {
            Coord::Ready => self.coord = Coord::Ongoing,
            Coord::Ongoing => {}
            Coord::Deciding(_) => return,
        }
        let batches: Vec<AckBatch> = offsets
            .iter()
            .map(|o| AckBatch::new(*o, *o, AcknowledgeType::Accept))
            .collect();
        let owner = ProducerLock::new(PRODUCER_ID, self.epoch).unwrap();
        let locked = self
            .state
            .ptxn_share_lock(GROUP, &member(m), owner, &[(pref(), batches)]);
        self.flush();
        assert_eq!(locked[0], Ok(offsets.len() as u64), "lock refused");
        let held = self.held.entry(m).or_default();
        for o in offsets {
            held.remove(o);
            assert!(self.in_txn.insert(*o), "input {o} staged twice");
        }
        self.stats.txn_acks += 1;
    }

    /// EndTxn: the coordinator's decision is durable (a commit's output is visible from now on),
    /// then the markers; `crash_between` crashes after the decision, before the markers.
    fn end(&mut self, commit: bool, crash_between: bool) {
        if self.coord != Coord::Ongoing {
            return;
        }
        // KIP-890: the markers carry the bumped epoch; the next transaction runs at it.
        self.epoch += 1;
        let marker = TxnMarker {
            producer_id: PRODUCER_ID,
            producer_epoch: self.epoch,
            outcome: if commit {
                TxnOutcome::Commit
            } else {
                TxnOutcome::Abort
            },
            coordinator_epoch: 0,
        };
        self.coord = Coord::Deciding(marker);
        let outputs = std::mem::take(&mut self.in_txn);
        if commit {
            for o in outputs {
                assert!(
                    self.committed.insert(o),
                    "input {o} in the committed output twice"
                );
            }
            self.stats.commits += 1;
        } else {
            self.stats.aborts += 1;
        }
        if crash_between {
            self.stats.decided_at_crash += 1;
            return self.crash();
        }
        self.send_markers();
    }

    /// WriteTxnMarkers to the input partition (the output partition's control batch is the
    /// log's business); the transaction completes once the result is durable. A crash may come
    /// before the flush (`crash_before_flush`).
    fn send_markers(&mut self) {
        let Coord::Deciding(marker) = self.coord.clone() else {
            return;
        };
        self.state.ptxn_share_resolve(&marker, &pref());
        if self.rng.gen_ratio(1, 20) {
            self.append();
            return self.crash();
        }
        self.flush();
        self.coord = Coord::Ready;
    }

    fn advance(&mut self, ms: u64) {
        // Records near the delivery limit are committed before time passes.
        let members: Vec<usize> = self.held.keys().copied().collect();
        for m in members {
            let Some(held) = self.held.get(&m) else {
                continue;
            };
            let urgent: Vec<i64> = held
                .iter()
                .filter(|(_, (c, _))| *c >= DELIVERY_LIMIT - 2)
                .map(|(o, _)| *o)
                .collect();
            self.commit_urgent(m, urgent);
        }
        self.now += ms;
        self.state.share.expire_locks(self.now);
        self.append();
        // Held records whose acquisition lock expired are no longer the worker's.
        let now = self.now;
        for held in self.held.values_mut() {
            held.retain(|_, (_, at)| *at + LOCK_MS > now);
        }
    }

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
        self.held.remove(&m);
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
        assert!(
            self.state.share.txn_locked().is_empty(),
            "producer locks must wait for their marker, not ask a share coordinator"
        );
        self.held.clear();
        self.joined.clear();
        // The coordinator recovers: a decided transaction's markers are sent again; an open
        // one is aborted (its producer is fenced: epoch bump).
        match self.coord.clone() {
            Coord::Ready => {}
            Coord::Ongoing => {
                self.end(false, false);
            }
            Coord::Deciding(_) => self.send_markers(),
        }
    }

    fn step(&mut self) {
        let m = self.rng.gen_range(0..MEMBERS);
        match self.rng.gen_range(0..100) {
            0..=34 => self.fetch(m),
            35..=59 => {
                let offsets = self.pick_held(m);
                if !offsets.is_empty() {
                    self.stage(m, &offsets);
                }
            }
            60..=71 => self.end(true, false),
            72..=73 => self.end(true, true),
            74..=79 => self.end(false, false),
            80..=80 => self.end(false, true),
            81..=87 => {
                let ms = if self.rng.gen_bool(0.2) { 22_500 } else { 750 };
                self.advance(ms);
            }
            88..=92 => self.leave(m),
            93..=95 => self.snapshot(),
            _ => self.crash(),
        }
        self.check_no_archived();
    }

    /// Everything left goes through committed transactions.
    fn drain(&mut self) {
        self.end(true, false);
        self.send_markers();
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
                    .held
                    .get(&m)
                    .into_iter()
                    .flatten()
                    .map(|(o, _)| *o)
                    .collect();
                if !held.is_empty() {
                    self.stage(m, &held);
                }
            }
            self.end(true, false);
            self.advance(LOCK_MS + 1);
        }
        assert_eq!(self.coord, Coord::Ready);
        let (_, sp) = self.state.share.partitions().next().expect("state");
        assert_eq!(sp.locked_records(), 0);
        let missing: Vec<i64> = (0..RECORDS)
            .filter(|o| !self.committed.contains(o))
            .collect();
        assert!(missing.is_empty(), "lost records: {missing:?}");
        assert_eq!(self.committed.len() as i64, RECORDS);
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
    match std::panic::catch_unwind(|| run_seed(seed, steps)) {
        Ok(stats) => stats,
        Err(e) => {
            eprintln!("share_ptxn_sim failed with seed {seed} (replay: LOCKSTEP_SEED={seed})");
            std::panic::resume_unwind(e)
        }
    }
}

#[test]
fn share_to_topic_exactly_once_under_crashes() {
    if let Ok(seed) = std::env::var("LOCKSTEP_SEED") {
        let stats = run_seed_reported(seed.parse().expect("LOCKSTEP_SEED is a u64"), 1_500);
        eprintln!("{stats:?}");
        return;
    }
    let seeds: u64 = std::env::var("LOCKSTEP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let mut total = Stats::default();
    for seed in 0..seeds {
        let s = run_seed_reported(seed, 800);
        total.crashes += s.crashes;
        total.commits += s.commits;
        total.aborts += s.aborts;
        total.decided_at_crash += s.decided_at_crash;
        total.txn_acks += s.txn_acks;
        total.snapshots += s.snapshots;
    }
    eprintln!("{seeds} seeds: {total:?}");
    assert!(total.crashes > seeds);
    assert!(total.commits > 0 && total.aborts > 0 && total.decided_at_crash > 0);
    assert!(total.txn_acks > 0 && total.snapshots > 0);
}
