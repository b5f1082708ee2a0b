//! Deterministic simulation of share groups with transactional acknowledgements over two
//! shards, driving the production shard core (`lockstep::shard`): the share
//! transaction coordinator and participant steps that run in the broker (`shard::share_txn`) and the
//! journal's group commit (`shard::persist_entries`), on a deterministic implementation of
//! `ShardIo` shared with `tests/share_producer_txn_sim.rs` (`tests/common/sim.rs`; shard calls run
//! through the production `ShardExec::execute`): a seeded single-threaded executor (ready tasks are polled in a seeded random
//! order), a virtual clock (it jumps to the next timer when nothing is ready), shard calls that
//! run in a task of their own like the mesh's, journal flushes that take a random number of
//! polls, and a crash of the process that drops every task and what the journals had not
//! flushed.
//!
//! The group's coordinator is shard 0 and the partition lives on shard 1, so a transactional
//! acknowledgement fans out from the coordinator to the participant, prepare has the
//! participant persist its locks over a call, decisions reach it in the background, and after a
//! crash it asks the coordinator about its locked records.
//!
//! Steps of the production core exercised: `Begin`; `Acknowledge` (register, the participant's
//! `Lock`, completion, a late abort when the transaction ended meanwhile); `Prepare` (waiting on
//! the notification for acknowledgements in flight: some checkpoints race an acknowledgement,
//! or an abort, against the prepare); `PersistLocks`; `Commit` / `Abort` and the participants'
//! `Apply`; `List`; timeouts (`shard::share_txn::expire`); restart resolution
//! (`resolve_locked_transactions` and `State`). Fetches, plain acknowledgements, lock expiry,
//! member release and snapshots call the shard state directly (their durability wait is the
//! core's `persist_entries`).
//!
//! The driver plays a streaming framework: workers (share-group members) fetch records and
//! acknowledge them, plainly (ACCEPT, answered once the journal is flushed, then the record goes
//! to the sink) or into the current checkpoint's transaction; the framework's coordinator
//! begins, prepares, writes the checkpoint's records to the sink *after* the prepare is
//! answered (atomically with the transaction id), then commits. Lock expiry, RELEASE, member
//! leave, transaction timeouts, aborts and crashes (the journals lose their unsynced tails, torn
//! at a random point) happen at random. After a crash the shards restore from their journals,
//! the participants resolve their locks with the coordinator, and the framework runs the KIP's
//! recovery routine: a PREPARE whose checkpoint is in the sink is committed, anything else is
//! aborted.
//!
//! Invariants, checked on every step: a record in the sink is never handed out again; no
//! record enters the sink twice; nothing is ever ARCHIVED (the driver never lets a record reach
//! the delivery limit). At the end a drain must put every produced record in the sink exactly
//! once, with no transaction pending.
//!
//! `LOCKSTEP_SEED=n` replays one seed; `LOCKSTEP_SEEDS=n` runs n seeds (default 300).

mod common;

use common::sim::{SimIo, World};
use lockstep::journal::{Journal, JournalConfig};
use lockstep::model::{group_shard, partition_shard, ShardId};
use lockstep::shard::ops::{
    PartitionRef, ShareAckOp, ShareFetchOp, TxnAckError, TxnAnswer, TxnOp, TxnReplyMsg,
};
use lockstep::shard::registry::TopicRegistry;
use lockstep::shard::share_group::Heartbeat;
use lockstep::shard::share_state::ShareState;
use lockstep::shard::state::ShardState;
use lockstep::shard::{self, share_txn, ShardCore, ShardIo};
use lockstep::share::{AckBatch, AcknowledgeType, RecordState};
use lockstep::share_txn::TxnState;
use lockstep::storage::file::SimStorage;
use lockstep::storage::mmap::MemDir;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use uuid::Uuid;

const GROUP: &str = "g";
const TOPIC: &str = "t";
const SHARDS: usize = 2;
const RECORDS: i64 = 400;
const DELIVERY_LIMIT: u16 = 10;
/// Every duration of the simulation is 15× what it was when Kafka's group-config bounds
/// (`share.record.lock.duration.ms` >= 15 000) came in, so the interleavings are the same.
const LOCK_MS: u64 = 15_000;
const MEMBERS: usize = 3;

// ---------------------------------------------------------------------------------------------
// The framework and the driver
// ---------------------------------------------------------------------------------------------

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

fn member(i: usize) -> String {
    format!("member-{i}")
}

/// The coordinator's shard and the partition's.
fn coordinator() -> usize {
    group_shard(GROUP, SHARDS).index()
}

fn participant() -> usize {
    partition_shard(TOPIC, 0, SHARDS).index()
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
    /// Checkpoints whose prepare raced an acknowledgement into its transaction.
    raced: u64,
    /// ... and the acknowledgement got in (the prepare waited for it).
    raced_in: u64,
}

struct Sim {
    rng: SmallRng,
    dirs: Vec<MemDir>,
    world: Rc<World>,
    fw: Framework,
    stats: Stats,
    joined: BTreeSet<usize>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        assert_ne!(
            coordinator(),
            participant(),
            "the simulation spans two shards"
        );
        let storage = SimStorage::new();
        let reg = registry();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut cores = Vec::new();
        let mut dirs = Vec::new();
        for shard in 0..SHARDS {
            let (mut state, _) = ShardState::open(
                ShardId(shard as u16),
                SHARDS,
                Path::new("/data"),
                storage.clone(),
                reg.clone(),
                0,
            )
            .unwrap();
            if shard == participant() {
                common::sim::produce_inputs(&mut state, &mut rng, &pref(), RECORDS);
            }
            let dir = MemDir::new(format!("/journal-{shard}"));
            let (journal, _) = Journal::open(dir.clone(), journal_config()).unwrap();
            cores.push(Rc::new(ShardCore::new(state, journal)));
            dirs.push(dir);
        }
        let world = World::new(seed, 1_000, cores, storage);
        Sim {
            rng,
            dirs,
            world,
            fw: Framework::default(),
            stats: Stats::default(),
            joined: BTreeSet::new(),
        }
    }

    fn io(&self, shard: usize) -> SimIo {
        self.world.io(shard)
    }

    fn now(&self) -> u64 {
        self.world.now()
    }

    /// Runs `future` (and whatever it spawns that becomes ready) to completion.
    fn run<T: 'static>(&self, future: impl Future<Output = T> + 'static) -> T {
        self.world.run(future)
    }

    /// Runs what is ready (background tasks) until nothing is.
    fn settle(&self) {
        self.world.settle();
    }

    /// A share-transaction op on the coordinator's shard, through the production core.
    fn txn_op(&self, op: TxnOp) -> TxnReplyMsg {
        let io = self.io(coordinator());
        self.run(async move { share_txn::execute(&io, op).await })
    }

    fn answer(&self, op: TxnOp) -> TxnAnswer {
        match self.txn_op(op) {
            TxnReplyMsg::Answer(a) => a,
            other => panic!("unexpected reply {other:?}"),
        }
    }

    fn append(&self, shard: usize) {
        shard::append_entries(&self.io(shard));
    }

    /// Appends and waits until the shard's journal is durable (the core's group commit).
    fn persist(&self, shard: usize) {
        let io = self.io(shard);
        let durable = self.run(async move { shard::persist_entries(&io).await });
        durable.expect("the simulated journal flushes");
    }

    fn join(&mut self, m: usize) {
        let io = self.io(coordinator());
        let reg = io.core().registry();
        let (answer, _) = io.core().state.borrow_mut().share.groups.heartbeat(
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
            self.now(),
        );
        assert_eq!(answer.error, None);
        self.joined.insert(m);
    }

    fn check_no_archived(&self) {
        let io = self.io(participant());
        let state = io.core().state.borrow();
        for (_, sp) in state.share.partitions() {
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
        let now = self.now();
        let fetched = self
            .io(participant())
            .core()
            .state
            .borrow_mut()
            .share_fetch(
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
                now,
            );
        self.append(participant());
        for p in fetched {
            assert_eq!(p.error, None, "{:?}", p.error_message);
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
        let now = self.now();
        let results = self
            .io(participant())
            .core()
            .state
            .borrow_mut()
            .share_acknowledge(
                &ShareAckOp {
                    group_id: GROUP.into(),
                    member_id: member(m),
                    partitions: vec![(pref(), batches)],
                },
                now,
            );
        self.persist(participant());
        assert_eq!(results[0].error, None, "{:?}", results[0].error_message);
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
        let answer = self.answer(TxnOp::Begin {
            group_id: GROUP.into(),
            transaction_id: id.clone(),
            timeout_ms: -1,
        });
        if answer.error.is_none() {
            self.fw.in_txn.insert(id.clone(), BTreeSet::new());
            self.fw.current = Some(id);
        }
    }

    fn ack_op(m: usize, id: &str, offsets: &[i64]) -> TxnOp {
        TxnOp::Acknowledge {
            group_id: GROUP.into(),
            member_id: member(m),
            transaction_id: id.to_string(),
            partitions: vec![(
                pref(),
                offsets
                    .iter()
                    .map(|o| AckBatch::new(*o, *o, AcknowledgeType::Accept))
                    .collect(),
            )],
        }
    }

    /// What the framework learns from a transactional acknowledgement's answer; whether the
    /// records went into the transaction.
    fn ack_outcome(&mut self, m: usize, id: &str, offsets: &[i64], reply: TxnReplyMsg) -> bool {
        let TxnReplyMsg::Acknowledged(results) = reply else {
            panic!("unexpected reply {reply:?}");
        };
        match &results[0] {
            Ok(()) => {
                let held = self.fw.held.entry(m).or_default();
                for o in offsets {
                    held.remove(o);
                }
                self.fw
                    .in_txn
                    .entry(id.to_string())
                    .or_default()
                    .extend(offsets);
                self.stats.txn_acks += 1;
                true
            }
            Err(TxnAckError::Refused(_)) => {
                // Not ONGOING any more (timed out, or being prepared): a new checkpoint.
                if self.fw.current.as_deref() == Some(id) {
                    self.fw.current = None;
                }
                false
            }
            Err(e) => panic!("lock refused: {e:?}"),
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
        let reply = self.txn_op(Self::ack_op(m, &id, &offsets));
        self.ack_outcome(m, &id, &offsets, reply);
    }

    /// The framework's checkpoint: prepare, write the sink, commit. With `race`, a worker's
    /// acknowledgement into the transaction is in flight while the prepare runs.
    fn checkpoint(&mut self, crash_between: bool, race: Option<usize>) {
        let Some(id) = self.fw.current.take() else {
            return;
        };
        let raced = race
            .map(|m| (m, self.pick_held(m)))
            .filter(|(_, offsets)| !offsets.is_empty());
        let prepared: Rc<RefCell<Option<TxnAnswer>>> = Rc::default();
        let acked: Rc<RefCell<Option<TxnReplyMsg>>> = Rc::default();
        if let Some((m, offsets)) = &raced {
            let io = self.io(coordinator());
            let op = Self::ack_op(*m, &id, offsets);
            let slot = acked.clone();
            self.world.exec.spawn(async move {
                *slot.borrow_mut() = Some(share_txn::execute(&io, op).await);
            });
        }
        {
            let io = self.io(coordinator());
            let op = TxnOp::Prepare {
                group_id: GROUP.into(),
                transaction_id: id.clone(),
            };
            let slot = prepared.clone();
            self.world.exec.spawn(async move {
                let TxnReplyMsg::Answer(a) = share_txn::execute(&io, op).await else {
                    panic!("prepare answers an answer");
                };
                *slot.borrow_mut() = Some(a);
            });
        }
        self.world.exec.run_until(|| {
            prepared.borrow().is_some() && (raced.is_none() || acked.borrow().is_some())
        });
        if let Some((m, offsets)) = &raced {
            let reply = acked.borrow_mut().take().unwrap();
            self.stats.raced += 1;
            if self.ack_outcome(*m, &id, offsets, reply) {
                self.stats.raced_in += 1;
            }
        }
        let answer = prepared.borrow_mut().take().unwrap();
        if answer.error.is_some() {
            self.fw.in_txn.remove(&id);
            return;
        }
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
        let (group_id, transaction_id) = (GROUP.to_string(), id.to_string());
        let answer = self.answer(if commit {
            TxnOp::Commit {
                group_id,
                transaction_id,
            }
        } else {
            TxnOp::Abort {
                group_id,
                transaction_id,
            }
        });
        assert_eq!(answer.error, None, "{:?}", answer.error_message);
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

    /// An abort racing a worker's acknowledgement into the transaction: the participant may
    /// take the locks after the decision reached it (the coordinator then tells it again).
    fn abort_racing_ack(&mut self, m: usize) {
        let Some(id) = self.fw.current.take() else {
            return;
        };
        let offsets = self.pick_held(m);
        let acked: Rc<RefCell<Option<TxnReplyMsg>>> = Rc::default();
        if !offsets.is_empty() {
            let io = self.io(coordinator());
            let op = Self::ack_op(m, &id, &offsets);
            let slot = acked.clone();
            self.world.exec.spawn(async move {
                *slot.borrow_mut() = Some(share_txn::execute(&io, op).await);
            });
        }
        self.decide(&id, false);
        self.world
            .exec
            .run_until(|| offsets.is_empty() || acked.borrow().is_some());
        if !offsets.is_empty() {
            let reply = acked.borrow_mut().take().unwrap();
            self.ack_outcome(m, &id, &offsets, reply);
        }
        self.fw.in_txn.remove(&id);
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
        self.world.exec.now_ms.set(self.now() + ms);
        let now = self.now();
        for shard in 0..SHARDS {
            let io = self.io(shard);
            io.core().state.borrow_mut().share.expire_locks(now);
            for record in share_txn::expire(&io) {
                self.fw.in_txn.remove(&record.transaction_id);
                if self.fw.current.as_deref() == Some(record.transaction_id.as_str()) {
                    self.fw.current = None;
                }
                self.stats.timeouts += 1;
            }
            self.append(shard);
        }
        // The participants apply the aborts.
        self.settle();
        // Held records whose lock expired are no longer the worker's.
        for held in self.fw.held.values_mut() {
            held.retain(|_, _| ms < LOCK_MS);
        }
    }

    /// A journal snapshot of each shard's state, then compaction once it is durable.
    fn snapshot(&mut self) {
        for shard in 0..SHARDS {
            self.append(shard);
            let io = self.io(shard);
            let snapshot = io
                .core()
                .state
                .borrow_mut()
                .share
                .durable_snapshot(self.now());
            io.core()
                .journal
                .borrow_mut()
                .write_shard_snapshot(&snapshot)
                .unwrap();
            if self.rng.gen_bool(0.5) {
                self.persist(shard);
                io.core().journal.borrow_mut().compact().unwrap();
            }
        }
        self.stats.snapshots += 1;
    }

    fn leave(&mut self, m: usize) {
        let io = self.io(participant());
        io.core()
            .state
            .borrow_mut()
            .share
            .release_member(GROUP, &member(m));
        self.append(participant());
        self.fw.held.remove(&m);
    }

    /// The process dies: every task goes, each journal loses what it had not flushed; then it
    /// restarts and recovers.
    fn crash(&mut self) {
        self.stats.crashes += 1;
        let cores = self.world.crash_cores();
        let mode = self.rng.gen_range(0..3);
        let mut restored = Vec::new();
        for (shard, core) in cores.into_iter().enumerate() {
            let (mut state, old_journal) = core.into_parts();
            drop(old_journal);
            let dir = &self.dirs[shard];
            common::sim::crash_journal(dir, mode, &mut self.rng);
            let (journal, recovered) = Journal::open(dir.clone(), journal_config())
                .unwrap_or_else(|e| panic!("journal recovery failed: {e}"));
            let reg = state.registry().clone();
            state.share = ShareState::restore(&recovered, &reg, self.now())
                .unwrap_or_else(|e| panic!("restore failed: {e}"));
            restored.push(Rc::new(ShardCore::new(state, journal)));
        }
        *self.world.cores.borrow_mut() = restored;
        // Participants resolve their locks with the coordinator (production code).
        for shard in 0..SHARDS {
            self.append(shard);
            share_txn::resolve_locked_transactions(&self.io(shard));
        }
        self.settle();
        // Workers lost their acquisitions and rejoin; the framework recovers (the KIP routine).
        self.fw.held.clear();
        self.fw.in_txn.clear();
        self.fw.current = None;
        self.joined.clear();
        let TxnReplyMsg::Listed(pending) = self.txn_op(TxnOp::List {
            group_id: GROUP.into(),
            states: Vec::new(),
        }) else {
            panic!("List answers a list");
        };
        for record in pending {
            assert_ne!(
                record.state,
                TxnState::Ongoing,
                "ONGOING survived a restart"
            );
            let in_sink = self.fw.checkpoints.contains(&record.transaction_id);
            self.decide(&record.transaction_id, in_sink);
        }
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
            75..=78 => self.checkpoint(false, None),
            79..=81 => self.checkpoint(false, Some(m)),
            82..=83 => self.checkpoint(true, None),
            84 => self.abort_current(),
            85 => self.abort_racing_ack(m),
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

    fn spso(&self) -> i64 {
        let io = self.io(participant());
        let state = io.core().state.borrow();
        let spso = state
            .share
            .partitions()
            .next()
            .map_or(0, |(_, sp)| sp.spso());
        spso
    }

    /// Everything left is consumed with plain ACCEPTs; pending transactions are resolved.
    fn drain(&mut self) {
        self.checkpoint(false, None);
        for _ in 0..10_000 {
            if self.spso() >= RECORDS {
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
        let list = |sim: &Sim| match sim.txn_op(TxnOp::List {
            group_id: GROUP.into(),
            states: Vec::new(),
        }) {
            TxnReplyMsg::Listed(records) => records,
            other => panic!("unexpected reply {other:?}"),
        };
        for record in list(self) {
            assert_eq!(record.state, TxnState::Ongoing, "a PREPARE left undecided");
            let locked: u64 = record.participants.iter().map(|p| p.locked_records).sum();
            assert_eq!(
                locked, 0,
                "records locked by a pending transaction after the drain"
            );
            self.decide(&record.transaction_id, false);
        }
        assert!(
            list(self).is_empty(),
            "transactions still pending after the drain"
        );
        let missing: Vec<i64> = (0..RECORDS).filter(|o| !self.fw.sink.contains(o)).collect();
        assert!(missing.is_empty(), "lost records: {missing:?}");
        assert_eq!(self.fw.sink.len() as i64, RECORDS);
        // The group commit answered every waiter: nothing is left running.
        assert!(self.world.exec.idle());
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
    // Break the executor's reference cycle (tasks hold the world).
    sim.world.exec.clear();
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
        total.raced += s.raced;
        total.raced_in += s.raced_in;
    }
    eprintln!("{seeds} seeds: {total:?}");
    // The interesting cases happened.
    assert!(total.crashes > seeds);
    assert!(total.commits > 0 && total.aborts > 0 && total.prepared_at_crash > 0);
    assert!(total.txn_acks > 0 && total.plain_acks > 0);
    assert!(
        total.raced_in > 0,
        "some prepares waited for an acknowledgement in flight"
    );
}
