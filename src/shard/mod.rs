//! The runtime-free shard core: one shard's state ([`ShardState`]), its state
//! journal and the journal's group-commit bookkeeping, op execution, and the steps that string
//! them together with waits — written once, generic over [`ShardIo`], the little I/O a shard
//! needs (call another shard, sleep, spawn a background task, write a journal or log flush,
//! read ahead, the clock, the fatal path, the metadata controller).
//!
//! Layering: handlers (`src/server/`) → this core → `share` / `share_txn` / `producer_txn` / `group` / `log`
//! / `journal` → `storage`; nothing here imports `crate::server` or `crate::runtime`.
//!
//! `src/runtime/` implements [`ShardIo`] on its executor (`ShardHandle`: the channel mesh, timers,
//! io_uring block writes); `tests/common/sim.rs` implements it deterministically (a seeded
//! single-threaded executor, a virtual clock, calls through [`exec::ShardExec::execute`], log
//! flushes on the storage crash double, a crash that drops every task and what the journals and
//! logs had not made durable), so the simulations (`tests/share_txn_sim.rs`: share
//! transactions; `tests/share_producer_txn_sim.rs`: the producer-transaction coordinator, its markers
//! and the restart) run this code, not a copy of it. A restart, in the runtime and in the
//! simulation, is [`state::ShardState::open`], [`state::ShardState::restore_journal`], then
//! [`exec::ShardExec::after_restart`].
//!
//! What lives here:
//! - [`ShardCore`]: the state, the journal, the journal's flush bookkeeping (at most one flush
//!   in flight; entries appended meanwhile are covered by the next one, and waiters are
//!   released once a completed flush covers them), and the notification prepare waits on.
//! - [`append_entries`], [`wait_journal`], [`persist_entries`], [`ensure_journal_flush`]: the
//!   journal's group commit. A failed append or flush poisons the journal and takes the I/O's
//!   fatal path ([`ShardIo::journal_poisoned`]) before anyone waiting is answered.
//! - [`share_txn`]: every step of share transactions (the group's shard coordinates, the partitions'
//!   shards participate): the coordinator's begin,
//!   acknowledgement fan-out, prepare, commit / abort, list, timeouts, and the participants'
//!   lock / persist / apply and their resolution after a restart.
//! - [`exec`]: what every [`ops::ShardOp`] does on its shard ([`exec::ShardExec::execute`]),
//!   the partition logs' group commit and data waits, and the periodic steps; `exec::producer_txn`,
//!   the producer-transaction coordinator's ops and marker fan-out.
//! - The state: [`state`] (`ShardState`: partitions, logs, producer states, the registry copy),
//!   [`share_state`] (`ShareState`: share partitions, groups, sessions, share transactions, and
//!   their journal entries), [`share_txn_state`] (the synchronous share-transaction steps),
//!   [`producer_txn_share`] (share records locked by producer transactions), [`producer_state`]
//!   and [`producer_snapshot`] (its file beside the segments),
//!   [`share_group`], [`share_session`], [`share_dlq`], [`read_ahead`], [`registry`] (the topic
//!   registry); [`ops`], the ops and their replies; [`join`] and [`sync`], executor-agnostic
//!   combinators and one-shots.
//!
//! Invariants: no `RefCell` borrow of the state or the journal lives across an `.await`; after
//! every await, what was read before is read again.

pub mod call;
pub mod data_dir;
pub mod exec;
pub mod join;
pub mod ops;
pub mod producer_snapshot;
pub mod producer_state;
pub mod producer_txn_share;
pub mod read_ahead;
pub mod registry;
pub mod share_dlq;
pub mod share_group;
pub mod share_session;
pub mod share_state;
pub mod share_txn;
pub mod share_txn_state;
pub mod state;
pub mod sync;

use crate::journal::{FlushTicket, Journal};
use crate::log::group_commit::CommitWaiters;
use crate::metrics::ShardMetrics;
use crate::model::{ShardId, TopicPartition};
use crate::storage::file::Storage;
use crate::storage::mmap::RegionDir;
use ops::{ShardOp, ShardReply};
use state::ShardState;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use sync::{oneshot, Notify, OneshotSender};

/// The I/O one shard's core needs; the runtime (`src/runtime/`) implements it, the simulation
/// deterministically.
pub trait ShardIo: Clone + 'static {
    type Storage: Storage + Clone + 'static;
    type Dir: RegionDir + 'static;

    /// This shard's core.
    fn core(&self) -> &ShardCore<Self::Storage, Self::Dir>;
    /// Wall-clock (or virtual) milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    /// A monotonic clock in microseconds (latency metrics).
    fn monotonic_us(&self) -> u64;
    /// Runs `op` on `shard` (locally when it is this shard, in a task of its own) and returns
    /// its reply; a shard that cannot be reached answers [`ShardReply::Failed`].
    fn call(&self, shard: ShardId, op: ShardOp) -> impl Future<Output = ShardReply>;
    /// [`ShardIo::call`] typed by the op (`call::Op`): its own reply, or why there is none.
    fn call_op<O: call::Op>(
        &self,
        shard: ShardId,
        op: O,
    ) -> impl Future<Output = Result<O::Reply, crate::shard::ops::CallError>> {
        let reply = self.call(shard, op.into_op());
        async move { call::typed::<O>(reply.await) }
    }
    /// Completes after `ms` milliseconds.
    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()>;
    /// Runs `task` in the background on this shard (it is not awaited by anyone).
    fn spawn(&self, task: impl Future<Output = ()> + 'static);
    /// Writes a journal flush ticket durably (the storage engine's block write).
    fn flush_journal(&self, ticket: &FlushTicket) -> impl Future<Output = std::io::Result<()>>;
    /// The journal cannot take more entries or be made durable: the process must end (or,
    /// in a simulation, the run fails). Never returns.
    fn journal_poisoned(&self, detail: &str) -> !;
    /// Writes a partition log's flush ticket durably (the storage engine's block writes and
    /// syncs).
    fn flush_log(
        &self,
        ticket: &crate::log::FlushTicket,
    ) -> impl Future<Output = std::io::Result<()>>;
    /// Whether produce writes full log tail chunks behind ([`crate::log::WriteBehind`]); the
    /// runtime's `LOCKSTEP_LOG_WRITE_BEHIND=off` turns it off, to measure one against the other.
    fn writes_behind(&self) -> bool {
        true
    }
    /// Writes a partition log's write-behind: its chunks, each durable on completion.
    fn write_behind(
        &self,
        write: &crate::log::WriteBehind,
    ) -> impl Future<Output = std::io::Result<()>>;
    /// Reads parts of segment files an op is about to read (`read_ahead`), concurrently:
    /// for each part, in order, the bytes read (fewer at the file's end) and the buffer holding
    /// them, or `None` if it could not be read so (the logs then read it themselves). The op
    /// hands them to the logs (`ShardState::fill_read_cache`).
    fn read_ahead(
        &self,
        parts: Vec<crate::log::ReadAhead>,
    ) -> impl Future<Output = Vec<Option<(u64, crate::log::CachedBytes)>>>;
    /// A partition log cannot be written or made durable: the process must end. Never returns.
    fn log_poisoned(&self, detail: &str) -> !;
    /// Runs a metadata change on this shard, the controller (shard 0): persists the next
    /// registry and installs it on every shard before answering.
    fn admin(&self, op: ops::AdminOp) -> impl Future<Output = ops::AdminReply>;
    /// Updates this shard's metrics.
    fn with_metrics(&self, f: impl FnOnce(&mut ShardMetrics));
}

#[derive(Default)]
struct JournalSync {
    flushing: bool,
    waiters: CommitWaiters<OneshotSender<Result<(), String>>>,
}

/// One shard's state, its journal and the bookkeeping of the journal's flushes.
pub struct ShardCore<S: Storage + Clone, D: RegionDir> {
    pub id: ShardId,
    pub shard_count: usize,
    pub state: RefCell<ShardState<S>>,
    /// The shard's state journal (share, consumer-group and producer-transaction state).
    pub journal: RefCell<Journal<D>>,
    journal_sync: RefCell<JournalSync>,
    /// Fired whenever acknowledgements into a share transaction complete (prepare waits on it).
    pub(crate) txn_acks_done: Notify,
    /// The partition logs' group commit (`exec`).
    pub(crate) syncs: RefCell<HashMap<TopicPartition, exec::PartitionSync>>,
    /// Long-polls waiting for data (`exec`).
    pub(crate) data_waiters: RefCell<Vec<exec::DataWaiter>>,
    pub(crate) next_waiter_id: Cell<u64>,
}

impl<S: Storage + Clone, D: RegionDir> ShardCore<S, D> {
    pub fn new(state: ShardState<S>, journal: Journal<D>) -> ShardCore<S, D> {
        ShardCore {
            id: state.id,
            shard_count: state.shard_count,
            state: RefCell::new(state),
            journal: RefCell::new(journal),
            journal_sync: RefCell::new(JournalSync::default()),
            txn_acks_done: Notify::new(),
            syncs: RefCell::new(HashMap::new()),
            data_waiters: RefCell::new(Vec::new()),
            next_waiter_id: Cell::new(1),
        }
    }

    /// Takes the state and the journal back (a simulated crash rebuilds the core from them).
    pub fn into_parts(self) -> (ShardState<S>, Journal<D>) {
        (self.state.into_inner(), self.journal.into_inner())
    }

    /// The registry snapshot this shard holds.
    pub fn registry(&self) -> std::sync::Arc<registry::TopicRegistry> {
        self.state.borrow().registry().clone()
    }
}

/// Appends the state's pending journal entries (share, consumer-group, producer-transaction);
/// returns the last sequence number appended (`None`: nothing to append). No flush starts
/// here: entries nobody waits for ride on the next flush a waiter starts ([`wait_journal`]),
/// or on housekeeping's, so the journal does not flush continuously under load. An append that
/// fails poisons the journal (the entries are already out of the state) and takes the fatal
/// path: it never returns then.
pub fn append_entries<I: ShardIo>(io: &I) -> Option<u64> {
    let core = io.core();
    let entries = {
        let mut state = core.state.borrow_mut();
        let mut entries = state.share.take_entries();
        entries.extend(state.groups.take_entries());
        entries.extend(state.ptxn.take_entries());
        entries
    };
    if entries.is_empty() {
        return None;
    }
    let appended = core.journal.borrow_mut().append_all(&entries);
    match appended {
        Ok(last) => last,
        Err(e) => io.journal_poisoned(&e.to_string()),
    }
}

/// Completes once journal entry `seq` is durable.
pub async fn wait_journal<I: ShardIo>(io: &I, seq: u64) -> Result<(), String> {
    let core = io.core();
    if core.journal.borrow().durable_end() > seq {
        return Ok(());
    }
    let (tx, rx) = oneshot();
    core.journal_sync.borrow_mut().waiters.park(seq + 1, tx);
    ensure_journal_flush(io);
    match rx.await {
        Some(result) => result,
        None => Err("the state journal flush was abandoned".into()),
    }
}

/// Appends pending entries and waits until they are durable.
pub async fn persist_entries<I: ShardIo>(io: &I) -> Result<(), String> {
    match append_entries(io) {
        Some(seq) => wait_journal(io, seq).await,
        None => Ok(()),
    }
}

/// Starts the journal's flush loop unless it runs.
pub fn ensure_journal_flush<I: ShardIo>(io: &I) {
    {
        let mut sync = io.core().journal_sync.borrow_mut();
        if sync.flushing {
            return;
        }
        sync.flushing = true;
    }
    let task = io.clone();
    io.spawn(async move { journal_flush_loop(&task).await });
}

/// Flushes until nobody waits: one ticket at a time, released waiters after each.
async fn journal_flush_loop<I: ShardIo>(io: &I) {
    let core = io.core();
    let mut first = true;
    loop {
        // After the first flush, go on only for someone waiting: entries appended meanwhile
        // that nobody waits for wait for the next flush anyone needs.
        if !first && core.journal_sync.borrow().waiters.is_empty() {
            break;
        }
        first = false;
        let ticket = core.journal.borrow_mut().begin_flush();
        let ticket = match ticket {
            Ok(Some(ticket)) => ticket,
            Ok(None) => break,
            Err(e) => io.journal_poisoned(&e.to_string()),
        };
        let started = io.monotonic_us();
        let result = io.flush_journal(&ticket).await;
        let micros = io.monotonic_us().saturating_sub(started);
        io.with_metrics(|m| m.fsync.record(micros));
        let completed = core.journal.borrow_mut().complete_flush(ticket, result);
        match completed {
            Ok(()) => {
                let end = core.journal.borrow().durable_end();
                let released = core.journal_sync.borrow_mut().waiters.release(end);
                for waiter in released {
                    waiter.send(Ok(()));
                }
            }
            Err(e) => io.journal_poisoned(&format!("state journal flush: {e}")),
        }
    }
    core.journal_sync.borrow_mut().flushing = false;
}
