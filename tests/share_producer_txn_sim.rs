//! Deterministic simulation of a share-group → topic pipeline whose acknowledgements ride a
//! producer transaction (TxnShareAcknowledge, KIP-1289's draft), driving the
//! production shard core on the deterministic `ShardIo` of `tests/common/sim.rs` (a seeded
//! executor, a virtual clock, shard calls through `ShardExec::execute`), over two shards whose
//! partition logs live on the storage crash double (`SimStorage`) and whose state journals live
//! on the region double (`MemDir`).
//!
//! Topology: the transactional id `job` is coordinated on shard 0, the input topic `t` (read by
//! the share group `g`) lives on shard 1, the output topic `sink` on shard 0; so the markers
//! reach one partition by a local call and the other across shards.
//!
//! The driver plays the job (a client and the request handlers of `src/server/` above the
//! shards): workers (share-group members) ShareFetch input records, write their output into the
//! producer's current transaction and acknowledge the inputs into it; the job commits or aborts
//! the transaction. Every step is a `ShardOp` run by the production core on its shard:
//!
//! - InitProducerId, AddPartitionsToTxn, the KIP-890 verification, EndTxn, DescribeTransactions:
//!   `ShardPtxn::ptxn_op` on the coordinator's shard (`shard::exec::producer_txn` over
//!   `ptxn::coordinator`), each answered once its coordinator record is durable in the shard's
//!   journal; the coordinator arms the marker job once its Prepare* record is durable and fans
//!   WriteTxnMarkers out to the partitions' shards; the transaction completes when every
//!   participant answered;
//! - WriteTxnMarkers (`ShardExec::write_txn_markers`): the control batch in the output
//!   partition, the producer's share locks resolved in the input partition
//!   (`ptxn_share_resolve`), answered once the journal entries and the log are durable;
//! - the transactional Produce (append, verification guard, group commit and durability wait
//!   through `ShardIo::flush_log` on the storage double), the share lock (`TxnOp::ProducerLock`,
//!   answered once durable), ShareFetch, ShareReleaseMember, the read_committed Fetch of the
//!   output;
//! - the periodic steps: `ShardPtxn::ptxn_tick` (timeouts abort with an epoch bump, marker
//!   retries), `share_housekeeping` (lock expiry, journal compaction), `housekeeping` (log
//!   rolls), and forced journal snapshots (`write_journal_snapshot`, which carries the producer
//!   transactions);
//! - a crash drops every task, crashes the journals (unsynced tails lost, torn, or kept) and the
//!   storage double (each file keeps its synced bytes and a random prefix of what was written
//!   after, possibly torn); the restart is the runtime's: `ShardState::open` on what survived
//!   (log recovery, producer states rebuilt), `ShardState::restore_journal` (share state,
//!   groups, and the coordinator's own state: its log is the shard journal, so it crashes with
//!   the rest), then `ShardExec::after_restart` (prepared transactions send their markers
//!   again).
//!
//! Played by the driver (the client and the handlers, which are not part of the shard core):
//! the order of the calls (the produce handler's verify-and-resend with the guard, the
//! TxnShareAcknowledge handler's verification before the lock, InitProducerId's retry with a
//! fresh producer id, which the controller would allocate), and the application's recovery:
//! after a crash the job asks the coordinator (DescribeTransactions) whether its open
//! transaction was decided committed, then aborts it (EndTxn abort and an epoch bump, a new
//! producer instance that fences it, or letting it time out) and starts over with a fresh
//! epoch. Share-group heartbeats and sessions are not simulated (ShareFetch on the partition's
//! shard does not need them). Crashes are injected at random points *inside* the operations (a
//! budget of executor polls), so the process may die between any two awaits of the production
//! code: between a decision and its markers, between the markers of the two partitions, during
//! a log flush, between a lock and its durability.
//!
//! Invariants, checked on every step: an input record whose commit the job learnt (EndTxn
//! answered, or found PrepareCommit / CompleteCommit after a crash) is never handed out again;
//! the committed output (a read_committed read of `sink` with the consumer's filter of aborted
//! transactions) holds no input twice and only inputs the job learnt committed; no input record
//! is ever ARCHIVED (the control batches the markers write into the input partition are); after a restart the producer's locks are not among the share transactions a
//! participant asks about. At the end a drain must put every input record in the committed
//! output exactly once, with no record locked and the transaction complete.
//!
//! It fails when a rule of the production code is broken (each checked once by a temporary
//! mutation of that rule): markers sent before the decision is durable (seed 4: output committed
//! that the job never learnt committed); no epoch bump when a timeout fences a transaction
//! (seed 1: the fenced producer's EndTxn is answered INVALID_TXN_STATE, and a driver that takes
//! that as fenced fails seed 4: inputs decided committed missing from the output); a share lock
//! answered before it is durable, or WriteTxnMarkers answered before the input partition's
//! journal entries are durable (seed 0: an input handed out again after its commit); a restart
//! that does not send the prepared transactions' markers again (seed 0: InitProducerId refused
//! for ever); WriteTxnMarkers answered before the output partition's control batch is durable
//! (seed 45: a complete committed transaction missing from the read_committed output).
//!
//! `LOCKSTEP_SEED=n` replays one seed; `LOCKSTEP_SEEDS=n` runs n seeds (default 60 × 800 steps:
//! about 2 700 crashes, 680 of them inside an operation, 110 after which the open transaction
//! turned out decided committed, 320 transaction timeouts).

mod common;

use bytes::Bytes;
use common::sim::{SimIo, World};
use lockstep::client::read_committed::committed;
use lockstep::client::share_consumer::decode_batches;
use lockstep::journal::{Journal, JournalConfig};
use lockstep::log::batch::BatchBuilder;
use lockstep::model::{group_shard, partition_shard, ShardId};
use lockstep::producer_txn::coordinator::TxnMetadata;
use lockstep::producer_txn::coordinator::{
    CoordConfig, CoordError, InitAnswer, InitRequest, TxnState,
};
use lockstep::producer_txn::share::{ProducerLock, ShareLockError};
use lockstep::producer_txn::TxnOutcome;
use lockstep::shard::call::{Op, Ptxn, ReleaseMember, Txn};
use lockstep::shard::exec::{ShardExec, ShardPtxn};
use lockstep::shard::ops::{
    CallError, FetchOp, FetchPartitionOp, PartitionRef, ProduceOp, PtxnOp, ShareAckResult,
    ShareFetchOp, SharePartitionError, TxnOp,
};
use lockstep::shard::registry::TopicRegistry;
use lockstep::shard::state::ShardState;
use lockstep::shard::ShardCore;
use lockstep::shard::ShardIo;
use lockstep::share::{AckBatch, AcknowledgeType, RecordState};
use lockstep::storage::file::SimStorage;
use lockstep::storage::mmap::MemDir;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use uuid::Uuid;

const SHARDS: usize = 2;
const GROUP: &str = "g";
const INPUT: &str = "t";
const OUTPUT: &str = "sink";
const TXN_ID: &str = "job";
const RECORDS: i64 = 300;
const DELIVERY_LIMIT: u16 = 10;
const LOCK_MS: u64 = 15_000;
const TXN_TIMEOUT_MS: i32 = 20_000;
const MEMBERS: usize = 3;
/// Kafka's smallest `segment.bytes`: the storage double copies little at each crash.
const SEGMENT_BYTES: u64 = 1024 * 1024;
/// Polls of the executor an operation may take before a crash injected into it fires.
const CRASH_POLLS_MAX: u64 = 16;
/// Retries of a call answered CONCURRENT_TRANSACTIONS before the run is declared stuck.
const RETRIES_MAX: usize = 200;

fn registry() -> Arc<TopicRegistry> {
    let mut r = TopicRegistry::new("sim".into());
    let segments = [("segment.bytes".to_string(), Some(SEGMENT_BYTES.to_string()))];
    r.create_topic(INPUT, Uuid::from_u128(1), 1, &segments)
        .unwrap();
    r.create_topic(OUTPUT, Uuid::from_u128(2), 1, &segments)
        .unwrap();
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

fn input() -> PartitionRef {
    PartitionRef {
        topic: INPUT.into(),
        topic_id: Uuid::from_u128(1),
        partition: 0,
    }
}

fn output() -> PartitionRef {
    PartitionRef {
        topic: OUTPUT.into(),
        topic_id: Uuid::from_u128(2),
        partition: 0,
    }
}

fn member(i: usize) -> String {
    format!("member-{i}")
}

fn coordinator() -> usize {
    group_shard(TXN_ID, SHARDS).index()
}

fn input_shard() -> usize {
    partition_shard(INPUT, 0, SHARDS).index()
}

fn output_shard() -> usize {
    partition_shard(OUTPUT, 0, SHARDS).index()
}

fn journal_config() -> JournalConfig {
    JournalConfig {
        segment_bytes: 64 * 1024,
        snapshot_chunk_bytes: 16 * 1024,
    }
}

/// The job's producer: its id and epoch, and the output partition's next sequence.
#[derive(Clone, Copy, Debug)]
struct Producer {
    id: i64,
    epoch: i16,
    sequence: i32,
}

/// A step of the job was refused because its transaction is gone (fenced by a timeout): the job
/// starts over with a new producer.
struct Fenced;

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    crashes: u64,
    /// Crashes injected inside an operation (vs. between steps).
    crashes_inside: u64,
    commits: u64,
    aborts: u64,
    /// Crashes after which the open transaction turned out decided committed.
    decided_at_crash: u64,
    fenced: u64,
    timeouts: u64,
    txn_acks: u64,
    snapshots: u64,
    verifications: u64,
}

struct Sim {
    rng: SmallRng,
    world: Rc<World>,
    dirs: Vec<MemDir>,
    producer: Option<Producer>,
    next_producer_id: i64,
    /// The job holds an open transaction (AddPartitionsToTxn answered).
    open: bool,
    /// Inputs whose output the open transaction holds (written and acknowledged into it).
    in_txn: BTreeSet<i64>,
    /// Inputs whose transaction the job learnt committed.
    decided: BTreeSet<i64>,
    /// Per worker: offset → (delivery count, acquired at).
    held: BTreeMap<usize, BTreeMap<i64, (u16, u64)>>,
    /// A crash fires after this many executor polls of the next operation.
    crash_in: Option<u64>,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        assert_ne!(coordinator(), input_shard(), "markers cross shards");
        let storage = SimStorage::new();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut cores = Vec::new();
        let mut dirs = Vec::new();
        for shard in 0..SHARDS {
            let (mut state, _) = ShardState::open(
                ShardId(shard as u16),
                SHARDS,
                Path::new("/data"),
                storage.clone(),
                registry(),
                0,
            )
            .unwrap();
            if shard == input_shard() {
                common::sim::produce_inputs(&mut state, &mut rng, &input(), RECORDS);
            }
            let dir = MemDir::new(format!("/journal-{shard}"));
            let (journal, _) = Journal::open(dir.clone(), journal_config()).unwrap();
            cores.push(Rc::new(ShardCore::new(state, journal)));
            dirs.push(dir);
        }
        let world = World::new(seed, 1_000, cores, storage);
        Sim {
            rng,
            world,
            dirs,
            producer: None,
            next_producer_id: 7,
            open: false,
            in_txn: BTreeSet::new(),
            decided: BTreeSet::new(),
            held: BTreeMap::new(),
            crash_in: None,
            stats: Stats::default(),
        }
    }

    fn io(&self, shard: usize) -> SimIo {
        self.world.io(shard)
    }

    fn now(&self) -> u64 {
        self.world.now()
    }

    /// Runs `op` on `shard` through the production core (`ShardExec::execute`). `None`: a crash
    /// injected into it fired (the world has restarted and the job recovered).
    fn call<O: Op + 'static>(&mut self, shard: usize, op: O) -> Option<Result<O::Reply, CallError>>
    where
        O::Reply: 'static,
    {
        let io = self.io(shard);
        let future = async move { io.call_op(ShardId(shard as u16), op).await };
        match self.crash_in.take() {
            None => Some(self.world.run(future)),
            Some(budget) => match self.world.run_for(future, budget) {
                Some(reply) => Some(reply),
                None => {
                    self.stats.crashes_inside += 1;
                    self.crash();
                    None
                }
            },
        }
    }

    /// A coordinator op; `None` if a crash fired inside it.
    fn ptxn<R: 'static>(&mut self, op: PtxnOp) -> Option<R>
    where
        Ptxn<R>: Op<Reply = R>,
    {
        let reply = self.call(coordinator(), Ptxn::<R>::new(op))?;
        Some(reply.unwrap_or_else(|e| panic!("coordinator call failed: {e:?}")))
    }

    fn describe(&mut self) -> Option<TxnMetadata> {
        let described: Vec<Option<TxnMetadata>> = self
            .ptxn(PtxnOp::Describe {
                transactional_ids: vec![TXN_ID.into()],
            })
            .expect("no crash is injected here");
        described.into_iter().next().flatten()
    }

    // ---- the periodic steps (the runtime's timers) ----

    fn tick(&self) {
        self.io(coordinator()).ptxn_tick();
        self.world.settle();
    }

    /// Time passes: the runtime's periodic steps run at the new time.
    fn pass(&self, ms: u64) {
        self.world.exec.now_ms.set(self.now() + ms);
        self.world.exec.fire_due_timers();
        for shard in 0..SHARDS {
            let io = self.io(shard);
            io.share_housekeeping();
            io.housekeeping();
        }
        self.tick();
    }

    /// Waits for the coordinator to finish a transaction (markers in flight or to retry).
    fn back_off(&self) {
        self.pass(lockstep::constants::TXN_MARKER_RETRY_BACKOFF_MS as u64);
    }

    // ---- checks ----

    fn check_no_archived(&self) {
        let cores = self.world.cores.borrow();
        let state = cores[input_shard()].state.borrow();
        for (_, sp) in state.share.partitions() {
            // Past the inputs lie the control batches of the markers (the partition is in
            // every transaction): their offsets are archived, as Kafka's share partition
            // archives the offsets it cannot hand out.
            for run in sp.runs().filter(|r| r.first < RECORDS) {
                assert_ne!(
                    run.state,
                    RecordState::Archived,
                    "input records [{}, {}] archived",
                    run.first,
                    run.last
                );
            }
        }
    }

    /// The committed output (read_committed, with the consumer's filter), as input offsets:
    /// no input twice, only inputs the job learnt committed, and, unless the coordinator is
    /// writing a transaction's markers, every one of those (a complete transaction's markers
    /// are durable).
    fn committed_output(&mut self) -> Vec<i64> {
        let saved = self.crash_in.take();
        let completing = self
            .describe()
            .is_some_and(|t| matches!(t.state, TxnState::PrepareCommit | TxnState::PrepareAbort));
        self.crash_in = saved;
        let mut offset = 0;
        let mut out = Vec::new();
        loop {
            let op = FetchOp {
                partitions: vec![FetchPartitionOp {
                    partition: output(),
                    fetch_offset: offset,
                    max_bytes: 1 << 20,
                }],
                max_bytes: 1 << 20,
                read_committed: true,
            };
            let saved = self.crash_in.take();
            let fetched = self.call(output_shard(), op).expect("no crash injected");
            self.crash_in = saved;
            let p = fetched.expect("fetch").remove(0);
            assert_eq!(p.error, None);
            let records = decode_batches(p.records).expect("batches");
            if records.is_empty() {
                break;
            }
            let aborted: Vec<(i64, i64)> = p
                .aborted
                .iter()
                .map(|a| (a.producer_id, a.first_offset))
                .collect();
            offset = records.last().expect("non-empty").offset + 1;
            for r in committed(&records, &aborted, p.last_stable_offset) {
                let value = r.value.expect("output records have values");
                let input: i64 = std::str::from_utf8(&value).unwrap().parse().unwrap();
                out.push(input);
            }
            if offset >= p.last_stable_offset {
                break;
            }
        }
        let mut seen = BTreeSet::new();
        for o in &out {
            assert!(seen.insert(*o), "input {o} in the committed output twice");
            assert!(
                self.decided.contains(o),
                "input {o} in the committed output, but its transaction was not decided committed"
            );
        }
        if !completing {
            let missing: Vec<&i64> = self.decided.difference(&seen).collect();
            assert!(
                missing.is_empty(),
                "inputs decided committed, their transaction complete, but not in the committed output: {missing:?}"
            );
        }
        out
    }

    // ---- the job ----

    /// InitProducerId until it is answered (`keep`: as the current producer, KIP-360, else as
    /// a new instance). A crash injected into the step fires in the step's next call instead.
    fn init(&mut self, keep: bool) {
        let saved = self.crash_in.take();
        self.init_now(keep);
        self.crash_in = saved;
    }

    fn init_now(&mut self, keep: bool) {
        let (mut producer_id, mut producer_epoch) = match (keep, self.producer) {
            (true, Some(p)) => (p.id, p.epoch),
            _ => (-1, -1),
        };
        let mut fresh = None;
        for _ in 0..RETRIES_MAX {
            let req = InitRequest {
                transactional_id: TXN_ID.into(),
                timeout_ms: TXN_TIMEOUT_MS,
                producer_id,
                producer_epoch,
                enable_2pc: false,
                keep_prepared_txn: false,
                fresh_producer_id: fresh,
            };
            let answer: Result<InitAnswer, CoordError> =
                self.ptxn(PtxnOp::Init(req)).expect("no crash injected");
            match answer {
                Ok(a) => {
                    self.producer = Some(Producer {
                        id: a.producer_id,
                        epoch: a.producer_epoch,
                        sequence: 0,
                    });
                    self.open = false;
                    self.in_txn.clear();
                    return;
                }
                Err(CoordError::NeedProducerId) => {
                    fresh = Some(self.next_producer_id);
                    self.next_producer_id += 1;
                }
                Err(CoordError::ConcurrentTransactions) => self.back_off(),
                // The coordinator fenced this producer (a timeout): a new instance.
                Err(CoordError::ProducerFenced) if producer_id != -1 => {
                    (producer_id, producer_epoch) = (-1, -1);
                }
                Err(e) => panic!("InitProducerId: {e:?}"),
            }
        }
        panic!("InitProducerId still refused: the coordinator is stuck");
    }

    fn producer(&mut self) -> Producer {
        if self.producer.is_none() {
            self.init(false);
        }
        self.producer.expect("initialised")
    }

    /// The job's transaction was aborted by the coordinator (a timeout fenced it): its inputs
    /// went back to the group; a new producer instance takes over.
    fn fenced(&mut self) {
        self.stats.fenced += 1;
        self.open = false;
        self.in_txn.clear();
        self.init(false);
    }

    /// AddPartitionsToTxn of both partitions (begins the transaction if none is open).
    fn add_partitions(&mut self) -> Option<Result<(), Fenced>> {
        for _ in 0..RETRIES_MAX {
            let p = self.producer();
            let added: Result<(), CoordError> = self.ptxn(PtxnOp::AddParticipants {
                transactional_id: TXN_ID.into(),
                producer_id: p.id,
                producer_epoch: p.epoch,
                partitions: vec![(OUTPUT.into(), 0), (INPUT.into(), 0)],
                groups: Vec::new(),
            })?;
            match added {
                Ok(()) => {
                    self.open = true;
                    return Some(Ok(()));
                }
                // The previous transaction's markers are still being written.
                Err(CoordError::ConcurrentTransactions) => self.back_off(),
                Err(CoordError::ProducerFenced | CoordError::InvalidProducerIdMapping) => {
                    return Some(Err(Fenced))
                }
                Err(e) => panic!("AddPartitionsToTxn: {e:?}"),
            }
        }
        panic!("AddPartitionsToTxn still refused: the coordinator is stuck");
    }

    /// The KIP-890 verification a partition leader asks for (the handlers play it).
    fn verify(&mut self, partition: (&str, i32)) -> Option<Result<(), Fenced>> {
        let p = self.producer.expect("a producer");
        self.stats.verifications += 1;
        let verified: Result<Vec<Result<(), CoordError>>, CoordError> =
            self.ptxn(PtxnOp::Verify {
                transactional_id: TXN_ID.into(),
                producer_id: p.id,
                producer_epoch: p.epoch,
                partitions: vec![(partition.0.into(), partition.1)],
            })?;
        match verified {
            Ok(each) if each.iter().all(|r| r.is_ok()) => Some(Ok(())),
            // The transaction ended meanwhile (a timeout): fenced or no longer ongoing.
            Ok(_) | Err(CoordError::ProducerFenced | CoordError::InvalidProducerIdMapping) => {
                Some(Err(Fenced))
            }
            Err(e) => panic!("verification: {e:?}"),
        }
    }

    /// The output of `offsets` into the open transaction (the produce handler's
    /// verify-and-resend for the batch that opens the transaction in the partition).
    fn produce_output(&mut self, offsets: &[i64]) -> Option<Result<(), Fenced>> {
        let p = self.producer.expect("a producer");
        let mut b = BatchBuilder::new(self.now() as i64);
        b.producer_id = p.id;
        b.producer_epoch = p.epoch;
        b.base_sequence = p.sequence;
        b.attributes = 0x10; // transactional
        for o in offsets {
            b.record(self.now() as i64, None, Some(o.to_string().as_bytes()));
        }
        let records = Bytes::from(b.build());
        let mut guard = None;
        for _ in 0..2 {
            let op = ProduceOp {
                partition: output(),
                records: records.clone(),
                acks: -1,
                timeout_ms: 30_000,
                verification_guard: guard,
            };
            let result = self.call(output_shard(), op)?.expect("produce call");
            if let Some(g) = result.verification_guard {
                assert!(guard.is_none(), "asked to verify twice: {result:?}");
                if let Err(fenced) = self.verify((OUTPUT, 0))? {
                    return Some(Err(fenced));
                }
                guard = Some(g);
                continue;
            }
            // The Kafka code the client would get (`server::codes`).
            return match lockstep::shard::ops::ProduceError::code_or_none(result.error) {
                0 => {
                    let producer = self.producer.as_mut().expect("a producer");
                    producer.sequence += offsets.len() as i32;
                    Some(Ok(()))
                }
                // INVALID_PRODUCER_EPOCH / PRODUCER_FENCED / INVALID_TXN_STATE: the
                // transaction was ended by the coordinator meanwhile.
                47 | 90 | 48 => Some(Err(Fenced)),
                code => panic!("produce refused ({code}): {result:?}"),
            };
        }
        panic!("the verified produce was not appended");
    }

    /// TxnShareAcknowledge of `offsets` held by worker `m` (the handler's verification, then
    /// the lock on the input partition's shard, answered once durable).
    fn lock_inputs(&mut self, m: usize, offsets: &[i64]) -> Option<Result<bool, Fenced>> {
        if let Err(fenced) = self.verify((INPUT, 0))? {
            return Some(Err(fenced));
        }
        let p = self.producer.expect("a producer");
        let owner = ProducerLock::new(p.id, p.epoch).expect("a valid producer");
        let batches: Vec<AckBatch> = offsets
            .iter()
            .map(|o| AckBatch::new(*o, *o, AcknowledgeType::Accept))
            .collect();
        let op = Txn::<Vec<Result<u64, ShareAckResult>>>::new(TxnOp::ProducerLock {
            group_id: GROUP.into(),
            member_id: member(m),
            owner,
            partitions: vec![(input(), batches)],
        });
        let locked = self.call(input_shard(), op)?.expect("lock call");
        match &locked[0] {
            Ok(n) => {
                assert_eq!(*n, offsets.len() as u64);
                Some(Ok(true))
            }
            // Fenced (INVALID_PRODUCER_EPOCH): an abort marker with a bumped epoch came first.
            Err(ShareAckResult {
                error: Some(SharePartitionError::Lock(ShareLockError::FencedEpoch { .. })),
                ..
            }) => Some(Err(Fenced)),
            Err(r) => panic!("lock refused: {r:?}"),
        }
    }

    /// Worker `m` writes the output of `offsets` into the transaction and acknowledges them
    /// into it. A step refused because the transaction is gone makes the job start over.
    fn stage(&mut self, m: usize, offsets: &[i64]) {
        let staged = (|| -> Option<Result<(), Fenced>> {
            if let Err(f) = self.add_partitions()? {
                return Some(Err(f));
            }
            if let Err(f) = self.produce_output(offsets)? {
                return Some(Err(f));
            }
            match self.lock_inputs(m, offsets)? {
                Ok(_) => Some(Ok(())),
                Err(f) => Some(Err(f)),
            }
        })();
        match staged {
            None => {} // crashed: the job recovered
            Some(Err(Fenced)) => self.fenced(),
            Some(Ok(())) => {
                let held = self.held.entry(m).or_default();
                for o in offsets {
                    held.remove(o);
                    assert!(self.in_txn.insert(*o), "input {o} staged twice");
                }
                self.stats.txn_acks += 1;
            }
        }
    }

    /// EndTxn: answered once the decision is durable; the markers follow in the background.
    fn end(&mut self, commit: bool) {
        if !self.open {
            return;
        }
        let p = self.producer.expect("a producer");
        let outcome = if commit {
            TxnOutcome::Commit
        } else {
            TxnOutcome::Abort
        };
        let ended: Option<Result<(), CoordError>> = self.ptxn(PtxnOp::End {
            transactional_id: TXN_ID.into(),
            producer_id: p.id,
            producer_epoch: p.epoch,
            outcome,
        });
        match ended {
            None => {} // crashed: the job recovered
            Some(Ok(())) => {
                if commit {
                    for o in std::mem::take(&mut self.in_txn) {
                        assert!(self.decided.insert(o), "input {o} committed twice");
                    }
                    self.stats.commits += 1;
                } else {
                    self.in_txn.clear();
                    self.stats.aborts += 1;
                }
                self.open = false;
            }
            Some(Err(CoordError::ProducerFenced | CoordError::InvalidProducerIdMapping)) => {
                self.fenced()
            }
            Some(Err(e)) => panic!("EndTxn: {e:?}"),
        }
    }

    // ---- the workers ----

    fn fetch(&mut self, m: usize) {
        let max_records = self.rng.gen_range(1..=40);
        let op = ShareFetchOp {
            group_id: GROUP.into(),
            member_id: member(m),
            partitions: vec![input()],
            max_records,
            batch_size: max_records,
            record_limit: false,
            partition_max_bytes: 1 << 20,
            min_one_batch: true,
            acquire_created: true,
            acknowledge: None,
            wait_durable: true,
            min_bytes: 0,
        };
        let Some(reply) = self.call(input_shard(), op) else {
            return;
        };
        let now = self.now();
        for p in reply.expect("share fetch").partitions {
            assert_eq!(p.error, None, "{:?}", p.error_message);
            for range in p.acquired {
                for offset in range.first..=range.last {
                    assert!(
                        !self.decided.contains(&offset),
                        "input {offset} handed out again after its transaction committed (delivery {})",
                        range.delivery_count
                    );
                    self.held
                        .entry(m)
                        .or_default()
                        .insert(offset, (range.delivery_count, now));
                }
            }
        }
        self.committed_output();
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
        self.end(true);
        let still: Vec<i64> = urgent
            .into_iter()
            .filter(|o| self.held.get(&m).is_some_and(|h| h.contains_key(o)))
            .collect();
        if !still.is_empty() {
            self.stage(m, &still);
            self.end(true);
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
        let open_since = self.describe().filter(|t| t.state == TxnState::Ongoing);
        self.pass(ms);
        if let Some(before) = open_since {
            let after = self.describe().expect("the id");
            if after.producer_epoch != before.producer_epoch {
                self.stats.timeouts += 1;
            }
        }
        // Held records whose acquisition lock expired are no longer the worker's.
        let now = self.now();
        for held in self.held.values_mut() {
            held.retain(|_, (_, at)| *at + LOCK_MS > now);
        }
    }

    fn leave(&mut self, m: usize) {
        let op = ReleaseMember {
            group_id: GROUP.into(),
            member_id: member(m),
        };
        if self.call(input_shard(), op).is_some() {
            self.held.remove(&m);
        }
    }

    /// A journal snapshot on every shard (the producer transactions ride in the coordinator's),
    /// written once the journal is flushed, as housekeeping writes it; sometimes compacted.
    fn snapshot(&mut self) {
        for shard in 0..SHARDS {
            let io = self.io(shard);
            self.world.run(async move {
                lockstep::shard::persist_entries(&io)
                    .await
                    .expect("journal durable");
                io.write_journal_snapshot();
            });
            if self.rng.gen_bool(0.5) {
                self.world.settle();
                let io = self.io(shard);
                io.share_housekeeping();
            }
        }
        self.world.settle();
        self.stats.snapshots += 1;
    }

    // ---- crashes ----

    /// The process dies: every task goes; the journals and the data directory keep what the
    /// crash model leaves; the shards restart as the runtime restarts them; then the job
    /// recovers.
    fn crash(&mut self) {
        self.stats.crashes += 1;
        let cores = self.world.crash_cores();
        drop(cores);
        let storage = self.world.storage.borrow().crash(self.rng.gen());
        *self.world.storage.borrow_mut() = storage.clone();
        let mode = self.rng.gen_range(0..3);
        let now = self.now();
        let mut restored = Vec::new();
        for (shard, dir) in self.dirs.iter().enumerate() {
            common::sim::crash_journal(dir, mode, &mut self.rng);
            let (mut state, _) = ShardState::open(
                ShardId(shard as u16),
                SHARDS,
                Path::new("/data"),
                storage.clone(),
                registry(),
                now,
            )
            .unwrap_or_else(|e| panic!("log recovery failed: {e}"));
            let (journal, recovered) = Journal::open(dir.clone(), journal_config())
                .unwrap_or_else(|e| panic!("journal recovery failed: {e}"));
            state
                .restore_journal(&recovered, CoordConfig::default(), now)
                .unwrap_or_else(|e| panic!("restore failed: {e}"));
            assert!(
                state.share.txn_locked().is_empty(),
                "producer locks must wait for their marker, not ask a share coordinator"
            );
            restored.push(Rc::new(ShardCore::new(state, journal)));
        }
        *self.world.cores.borrow_mut() = restored;
        for shard in 0..SHARDS {
            self.io(shard).after_restart();
        }
        self.world.settle();
        self.recover_job();
    }

    /// The job after a crash: its workers lost their acquisitions; it learns whether its open
    /// transaction was decided committed, and makes sure it is ended, with a fresh epoch.
    fn recover_job(&mut self) {
        self.held.clear();
        let Some(p) = self.producer else {
            return;
        };
        let meta = self.describe();
        if self.open {
            let state = meta.as_ref().map(|m| m.state);
            let ours = meta.as_ref().is_some_and(|m| m.producer_id == p.id);
            if ours
                && matches!(
                    state,
                    Some(TxnState::PrepareCommit | TxnState::CompleteCommit)
                )
            {
                self.stats.decided_at_crash += 1;
                self.stats.commits += 1;
                for o in std::mem::take(&mut self.in_txn) {
                    assert!(self.decided.insert(o), "input {o} committed twice");
                }
            } else if ours && state == Some(TxnState::Ongoing) {
                match self.rng.gen_range(0..3) {
                    // EndTxn(abort), then a new epoch for the same producer (KIP-360).
                    0 => {
                        let ended: Result<(), CoordError> = self
                            .ptxn(PtxnOp::End {
                                transactional_id: TXN_ID.into(),
                                producer_id: p.id,
                                producer_epoch: p.epoch,
                                outcome: TxnOutcome::Abort,
                            })
                            .expect("no crash injected");
                        ended.expect("abort of the open transaction");
                        self.stats.aborts += 1;
                        self.world.settle();
                        self.init(true);
                    }
                    // The transaction times out: the coordinator aborts it (epoch bump).
                    1 => {
                        self.pass(TXN_TIMEOUT_MS as u64 + 1);
                        self.stats.timeouts += 1;
                        self.stats.aborts += 1;
                        self.init(false);
                    }
                    // A new producer instance fences it.
                    _ => {
                        self.stats.aborts += 1;
                        self.init(false);
                    }
                }
                return;
            }
        }
        // Sequences of the output partition restart with a fresh epoch.
        self.open = false;
        self.in_txn.clear();
        self.init(true);
    }

    fn maybe_crash_inside(&mut self) {
        if self.rng.gen_ratio(1, 12) {
            self.crash_in = Some(self.rng.gen_range(0..=CRASH_POLLS_MAX));
        }
    }

    fn step(&mut self) {
        let m = self.rng.gen_range(0..MEMBERS);
        self.maybe_crash_inside();
        match self.rng.gen_range(0..100) {
            0..=34 => self.fetch(m),
            35..=59 => {
                let offsets = self.pick_held(m);
                if !offsets.is_empty() {
                    self.stage(m, &offsets);
                }
            }
            60..=73 => {
                // Often a crash somewhere between the decision and the last marker.
                if self.rng.gen_ratio(1, 4) {
                    self.crash_in = Some(self.rng.gen_range(0..=CRASH_POLLS_MAX));
                }
                self.end(true)
            }
            74..=80 => self.end(false),
            81..=87 => {
                self.crash_in = None;
                let ms = if self.rng.gen_bool(0.2) { 22_500 } else { 750 };
                self.advance(ms);
            }
            88..=92 => self.leave(m),
            93..=95 => {
                self.crash_in = None;
                self.snapshot();
            }
            _ => {
                self.crash_in = None;
                self.crash();
            }
        }
        // An injected crash that did not fire (the step made no call) is dropped.
        self.crash_in = None;
        self.check_no_archived();
    }

    fn spso(&self) -> i64 {
        let cores = self.world.cores.borrow();
        let state = cores[input_shard()].state.borrow();
        let spso = state
            .share
            .partitions()
            .next()
            .map_or(0, |(_, sp)| sp.spso());
        spso
    }

    /// Everything left goes through committed transactions.
    fn drain(&mut self) {
        self.crash_in = None;
        self.end(true);
        for _ in 0..10_000 {
            if self.spso() >= RECORDS {
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
            self.end(true);
            self.advance(LOCK_MS + 1);
        }
        // The last markers.
        for _ in 0..RETRIES_MAX {
            let state = self.describe().map(|m| m.state);
            if !matches!(
                state,
                Some(TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::Ongoing)
            ) {
                break;
            }
            self.back_off();
        }
        let state = self.describe().map(|m| m.state);
        assert!(
            matches!(
                state,
                Some(TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Empty)
            ),
            "transaction not complete after the drain: {state:?}"
        );
        {
            let cores = self.world.cores.borrow();
            let state = cores[input_shard()].state.borrow();
            let (_, sp) = state.share.partitions().next().expect("state");
            assert_eq!(sp.locked_records(), 0);
        }
        let output = self.committed_output();
        let missing: Vec<i64> = (0..RECORDS).filter(|o| !output.contains(o)).collect();
        assert!(
            missing.is_empty(),
            "inputs missing from the committed output: {missing:?}"
        );
        assert_eq!(output.len() as i64, RECORDS);
        assert_eq!(self.decided.len() as i64, RECORDS);
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
    match std::panic::catch_unwind(|| run_seed(seed, steps)) {
        Ok(stats) => stats,
        Err(e) => {
            eprintln!(
                "share_producer_txn_sim failed with seed {seed} (replay: LOCKSTEP_SEED={seed})"
            );
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
        .unwrap_or(60);
    let mut total = Stats::default();
    for seed in 0..seeds {
        let s = run_seed_reported(seed, 800);
        total.crashes += s.crashes;
        total.crashes_inside += s.crashes_inside;
        total.commits += s.commits;
        total.aborts += s.aborts;
        total.decided_at_crash += s.decided_at_crash;
        total.fenced += s.fenced;
        total.timeouts += s.timeouts;
        total.txn_acks += s.txn_acks;
        total.snapshots += s.snapshots;
        total.verifications += s.verifications;
    }
    eprintln!("{seeds} seeds: {total:?}");
    assert!(total.crashes > seeds && total.crashes_inside > 0);
    assert!(total.commits > 0 && total.aborts > 0 && total.decided_at_crash > 0);
    assert!(total.timeouts > 0 && total.verifications > 0);
    assert!(total.txn_acks > 0 && total.snapshots > 0);
}
