//! The deterministic shard I/O the simulations run the production shard core on
//! (`tests/share_txn_sim.rs`, `tests/share_producer_txn_sim.rs`): a seeded single-threaded
//! executor ([`Exec`]: ready tasks are polled in a seeded random order; when none is ready the
//! virtual clock jumps to the earliest timer), and [`SimIo`], an implementation of
//! `lockstep::shard::ShardIo` over it:
//!
//! - `call` runs any [`ShardOp`] on its shard through the production `ShardExec::execute`, in a
//!   task of its own (as the mesh does); a call dropped by a crash answers `Abandoned`.
//! - `flush_journal` completes after a random number of polls; the journal's region double
//!   (`MemDir`) marks the ticket's bytes synced when the flush completes.
//! - `flush_log` runs a partition log's flush ticket on the crash double of the data directory
//!   (`SimStorage`): a sealed segment is made durable first (as the runtime does), then the
//!   block writes and zero fills land (unsynced), then, after a random number of
//!   polls (a long tail: one sync in four takes up to 30), every file and directory of the
//!   ticket is synced; a crash in between leaves the
//!   writes to the double's crash model (a prefix of whole sectors may survive).
//! - `read_ahead` reads the parts from the storage double's written bytes after one or two
//!   polls (a flush may complete meanwhile); one part in `READ_AHEAD_FAIL_ONE_IN` fails (the
//!   logs read it themselves).
//! - `sleep_ms` arms a timer of the virtual clock; `spawn` adds a task.
//! - `admin` (the metadata controller) is not simulated: the topics are fixed.
//! - The fatal paths (`journal_poisoned`, `log_poisoned`) fail the run.
//!
//! A crash ([`Exec::clear`]) drops every task and timer; the simulation then crashes the
//! journals and the storage double and reopens the shards from what survived.

#![allow(dead_code)]

use lockstep::journal::FlushTicket;
use lockstep::metrics::ShardMetrics;
use lockstep::model::ShardId;
use lockstep::shard::exec::ShardExec;
use lockstep::shard::ops::{CallError, ShardOp, ShardReply};
use lockstep::shard::sync::oneshot;
use lockstep::shard::{ShardCore, ShardIo};
use lockstep::storage::file::{SimStorage, Storage, StorageFile};
use lockstep::storage::mmap::MemDir;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::ops::Deref;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// One read-ahead part in this many fails (`SimIo::read_ahead`); a test that counts the
/// logs' fallback reads sets [`World::read_ahead_fails`] off.
pub const READ_AHEAD_FAIL_ONE_IN: u32 = 50;

struct TaskWaker {
    id: u64,
    woken: Arc<Mutex<BTreeSet<u64>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.woken.lock().unwrap().insert(self.id);
    }
}

/// A single-threaded executor with a virtual clock: ready tasks are polled in a seeded random
/// order; when none is ready the clock jumps to the earliest timer.
pub struct Exec {
    tasks: RefCell<BTreeMap<u64, Task>>,
    next_id: Cell<u64>,
    woken: Arc<Mutex<BTreeSet<u64>>>,
    timers: RefCell<Vec<(u64, Waker)>>,
    pub now_ms: Cell<u64>,
    pub rng: RefCell<SmallRng>,
}

impl Exec {
    pub fn new(seed: u64, now_ms: u64) -> Exec {
        Exec {
            tasks: RefCell::new(BTreeMap::new()),
            next_id: Cell::new(1),
            woken: Arc::new(Mutex::new(BTreeSet::new())),
            timers: RefCell::new(Vec::new()),
            now_ms: Cell::new(now_ms),
            rng: RefCell::new(SmallRng::seed_from_u64(seed ^ 0x5eed)),
        }
    }

    pub fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        self.tasks.borrow_mut().insert(id, Box::pin(task));
        self.woken.lock().unwrap().insert(id);
    }

    /// Runs tasks until `done()` holds and no task is ready (timers may stay armed).
    pub fn run_until(&self, done: impl Fn() -> bool) {
        let finished = self.run_until_or_budget(done, u64::MAX);
        assert!(finished, "an unlimited budget runs out");
    }

    /// [`Self::run_until`], but stops after `budget` polls; `false` if it stopped so.
    pub fn run_until_or_budget(&self, done: impl Fn() -> bool, mut budget: u64) -> bool {
        loop {
            let next = {
                let woken = self.woken.lock().unwrap();
                if woken.is_empty() {
                    None
                } else {
                    let n = self.rng.borrow_mut().gen_range(0..woken.len());
                    woken.iter().nth(n).copied()
                }
            };
            let Some(id) = next else {
                if done() {
                    return true;
                }
                self.fire_earliest_timer();
                continue;
            };
            if budget == 0 {
                return false;
            }
            budget -= 1;
            self.woken.lock().unwrap().remove(&id);
            let Some(mut task) = self.tasks.borrow_mut().remove(&id) else {
                continue;
            };
            let waker = Waker::from(Arc::new(TaskWaker {
                id,
                woken: self.woken.clone(),
            }));
            if task
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
            {
                self.tasks.borrow_mut().insert(id, task);
            }
        }
    }

    pub fn fire_earliest_timer(&self) {
        let earliest = self.timers.borrow().iter().map(|(at, _)| *at).min();
        let Some(at) = earliest else {
            panic!("the simulation is stuck: nothing is ready and no timer is armed");
        };
        self.now_ms.set(self.now_ms.get().max(at));
        self.fire_due_timers();
    }

    pub fn fire_due_timers(&self) {
        let now = self.now_ms.get();
        let due: Vec<Waker> = {
            let mut timers = self.timers.borrow_mut();
            let (due, armed): (Vec<_>, Vec<_>) = timers.drain(..).partition(|(at, _)| *at <= now);
            *timers = armed;
            due.into_iter().map(|(_, w)| w).collect()
        };
        for waker in due {
            waker.wake();
        }
    }

    /// Nothing is ready to run.
    pub fn idle(&self) -> bool {
        self.woken.lock().unwrap().is_empty()
    }

    /// A crash: every task and timer is gone.
    pub fn clear(&self) {
        let tasks = std::mem::take(&mut *self.tasks.borrow_mut());
        drop(tasks);
        self.timers.borrow_mut().clear();
        self.woken.lock().unwrap().clear();
    }

    /// Polls that yield `n` times (other tasks run meanwhile).
    fn yield_polls(n: u32) -> impl Future<Output = ()> {
        let mut polls = n;
        std::future::poll_fn(move |cx| {
            if polls == 0 {
                Poll::Ready(())
            } else {
                polls -= 1;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
    }
}

/// The simulated process: the executor, every shard's core, the storage double of the data
/// directory (replaced by what survives at each crash) and the metrics.
pub struct World {
    pub exec: Exec,
    pub cores: RefCell<Vec<Rc<ShardCore<SimStorage, MemDir>>>>,
    pub storage: RefCell<SimStorage>,
    pub metrics: RefCell<ShardMetrics>,
    /// Whether read-ahead parts fail now and then (`SimIo::read_ahead`).
    pub read_ahead_fails: Cell<bool>,
}

impl World {
    pub fn new(
        seed: u64,
        now_ms: u64,
        cores: Vec<Rc<ShardCore<SimStorage, MemDir>>>,
        storage: SimStorage,
    ) -> Rc<World> {
        Rc::new(World {
            exec: Exec::new(seed, now_ms),
            cores: RefCell::new(cores),
            storage: RefCell::new(storage),
            metrics: RefCell::new(ShardMetrics::default()),
            read_ahead_fails: Cell::new(true),
        })
    }

    pub fn now(&self) -> u64 {
        self.exec.now_ms.get()
    }

    pub fn io(self: &Rc<Self>, shard: usize) -> SimIo {
        SimIo {
            core: self.cores.borrow()[shard].clone(),
            world: self.clone(),
        }
    }

    /// Runs `future` (and whatever it spawns that becomes ready) to completion.
    pub fn run<T: 'static>(&self, future: impl Future<Output = T> + 'static) -> T {
        self.run_for(future, u64::MAX)
            .expect("an unlimited budget runs out")
    }

    /// Runs `future` for at most `budget` polls of the executor (any task's); `None` if it did
    /// not complete (it is still a task then, until a crash drops it).
    pub fn run_for<T: 'static>(
        &self,
        future: impl Future<Output = T> + 'static,
        budget: u64,
    ) -> Option<T> {
        let out: Rc<RefCell<Option<T>>> = Rc::new(RefCell::new(None));
        let slot = out.clone();
        self.exec.spawn(async move {
            let value = future.await;
            *slot.borrow_mut() = Some(value);
        });
        self.exec
            .run_until_or_budget(|| out.borrow().is_some(), budget);
        let value = out.borrow_mut().take();
        value
    }

    /// Runs what is ready (background tasks) until nothing is.
    pub fn settle(&self) {
        self.exec.fire_due_timers();
        self.exec.run_until(|| true);
    }

    /// A crash of the process: every task goes, and the cores are handed back (their states
    /// and journals; nothing else holds them once the tasks are gone).
    pub fn crash_cores(&self) -> Vec<ShardCore<SimStorage, MemDir>> {
        self.exec.clear();
        let cores = std::mem::take(&mut *self.cores.borrow_mut());
        cores
            .into_iter()
            .map(|core| {
                Rc::try_unwrap(core)
                    .ok()
                    .expect("nothing holds a shard core once its tasks are gone")
            })
            .collect()
    }
}

/// One shard's view of the simulated world (derefs to its core, as the runtime's handle does).
#[derive(Clone)]
pub struct SimIo {
    pub core: Rc<ShardCore<SimStorage, MemDir>>,
    pub world: Rc<World>,
}

impl Deref for SimIo {
    type Target = ShardCore<SimStorage, MemDir>;

    fn deref(&self) -> &ShardCore<SimStorage, MemDir> {
        &self.core
    }
}

impl ShardIo for SimIo {
    type Storage = SimStorage;
    type Dir = MemDir;

    fn core(&self) -> &ShardCore<SimStorage, MemDir> {
        &self.core
    }

    fn now_ms(&self) -> u64 {
        self.world.exec.now_ms.get()
    }

    fn monotonic_us(&self) -> u64 {
        self.world.exec.now_ms.get() * 1_000
    }

    fn call(&self, shard: ShardId, op: ShardOp) -> impl Future<Output = ShardReply> {
        let target = self.world.io(shard.index());
        let (tx, rx) = oneshot();
        // Like the mesh: the op runs in a task of its own on its shard.
        self.world.exec.spawn(async move {
            let reply = target.execute(op).await;
            tx.send(reply);
        });
        async move { rx.await.unwrap_or(ShardReply::Failed(CallError::Abandoned)) }
    }

    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()> {
        let world = self.world.clone();
        let at = world.exec.now_ms.get() + ms;
        std::future::poll_fn(move |cx| {
            if world.exec.now_ms.get() >= at {
                Poll::Ready(())
            } else {
                world
                    .exec
                    .timers
                    .borrow_mut()
                    .push((at, cx.waker().clone()));
                Poll::Pending
            }
        })
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.world.exec.spawn(task);
    }

    /// The journal's region double marks the ticket's bytes synced when the flush completes;
    /// the write itself takes a random number of polls (other tasks run meanwhile).
    fn flush_journal(&self, _ticket: &FlushTicket) -> impl Future<Output = std::io::Result<()>> {
        let polls = self.world.exec.rng.borrow_mut().gen_range(0..=2u32);
        async move {
            Exec::yield_polls(polls).await;
            Ok(())
        }
    }

    fn journal_poisoned(&self, detail: &str) -> ! {
        panic!("journal poisoned on {}: {detail}", self.core.id)
    }

    /// A sealed segment is made durable first (`log::apply_seal`, as the runtime does before
    /// anything else of the ticket); then the ticket's block writes and zero fills land at once
    /// (unsynced), the syncs after a random number of polls (module docs).
    fn flush_log(
        &self,
        ticket: &lockstep::log::FlushTicket,
    ) -> impl Future<Output = std::io::Result<()>> {
        let storage = self.world.storage.borrow().clone();
        // Syncs have a long tail: one in four takes a while (other shards' work goes on).
        let polls = {
            let mut rng = self.world.exec.rng.borrow_mut();
            let slow = rng.gen_ratio(1, 4);
            rng.gen_range(0..=if slow { 30u32 } else { 3 })
        };
        let seal = ticket.seal.clone();
        let writes: Vec<(PathBuf, u64, Vec<u8>)> = ticket
            .chunks
            .iter()
            .map(|w| (w.path.clone(), w.position, w.bytes().to_vec()))
            .chain(
                ticket
                    .writes
                    .iter()
                    .map(|w| (w.path.clone(), w.position, w.data.clone())),
            )
            .chain(
                ticket
                    .zero_fills
                    .iter()
                    .map(|z| (z.path.clone(), z.position, vec![0; z.len as usize])),
            )
            .collect();
        let files: Vec<PathBuf> = writes
            .iter()
            .map(|(path, _, _)| path.clone())
            .chain(ticket.files.iter().cloned())
            .collect();
        let dirs = ticket.dirs.clone();
        async move {
            if let Some(seal) = &seal {
                lockstep::log::apply_seal(&storage, seal)?;
                Exec::yield_polls(1).await;
            }
            for (path, position, data) in &writes {
                storage.open(path)?.write_direct_at(data, *position)?;
            }
            Exec::yield_polls(polls).await;
            for file in &files {
                storage.sync_file(file)?;
            }
            for dir in &dirs {
                storage.sync_dir(dir)?;
            }
            Ok(())
        }
    }

    /// The chunks land at once (unsynced), each is synced after a random number of polls.
    fn write_behind(
        &self,
        write: &lockstep::log::WriteBehind,
    ) -> impl Future<Output = std::io::Result<()>> {
        let storage = self.world.storage.borrow().clone();
        let polls = self.world.exec.rng.borrow_mut().gen_range(0..=3u32);
        let writes: Vec<(PathBuf, u64, Vec<u8>)> = write
            .chunks
            .iter()
            .map(|w| (w.path.clone(), w.position, w.bytes().to_vec()))
            .collect();
        async move {
            for (path, position, data) in &writes {
                storage.open(path)?.write_direct_at(data, *position)?;
            }
            Exec::yield_polls(polls).await;
            for (path, _, _) in &writes {
                storage.sync_file(path)?;
            }
            Ok(())
        }
    }

    /// Reads the parts from the storage double's written bytes (what an `O_DIRECT` read sees)
    /// when it completes, after at least one poll (other tasks run meanwhile: a flush may
    /// complete, moving a tail); one part in `READ_AHEAD_FAIL_ONE_IN` fails (`None`).
    fn read_ahead(
        &self,
        parts: Vec<lockstep::log::ReadAhead>,
    ) -> impl Future<Output = Vec<Option<(u64, lockstep::log::CachedBytes)>>> {
        let (polls, fails) = {
            let mut rng = self.world.exec.rng.borrow_mut();
            let polls = rng.gen_range(1..=2u32);
            let fails: Vec<bool> = parts
                .iter()
                .map(|_| rng.gen_ratio(1, READ_AHEAD_FAIL_ONE_IN))
                .map(|fails| fails && self.world.read_ahead_fails.get())
                .collect();
            (polls, fails)
        };
        let storage = self.world.storage.borrow().clone();
        async move {
            Exec::yield_polls(polls).await;
            parts
                .iter()
                .zip(fails)
                .map(|(part, fails)| {
                    let file = storage.contents(&part.path).filter(|_| !fails)?;
                    let from = (part.position as usize).min(file.len());
                    let to = (from + part.len as usize).min(file.len());
                    let data: lockstep::log::CachedBytes = Rc::new(file[from..to].to_vec());
                    Some(((to - from) as u64, data))
                })
                .collect()
        }
    }

    fn log_poisoned(&self, detail: &str) -> ! {
        panic!("partition log poisoned on {}: {detail}", self.core.id)
    }

    fn admin(
        &self,
        _op: lockstep::shard::ops::AdminOp,
    ) -> impl Future<Output = lockstep::shard::ops::AdminReply> {
        async { unreachable!("the simulation changes no metadata") }
    }

    fn with_metrics(&self, f: impl FnOnce(&mut ShardMetrics)) {
        f(&mut self.world.metrics.borrow_mut())
    }
}

/// Fills a simulation's input partition: `records` records `v0`, `v1`, … in batches of 1 to 5
/// (drawn from `rng`), produced with acks=all and flushed, before the simulated run starts.
pub fn produce_inputs(
    state: &mut lockstep::shard::state::ShardState<SimStorage>,
    rng: &mut SmallRng,
    partition: &lockstep::shard::ops::PartitionRef,
    records: i64,
) {
    let mut offset = 0;
    while offset < records {
        let n = rng.gen_range(1..=5).min(records - offset);
        let mut b = lockstep::log::batch::BatchBuilder::new(1_000);
        for i in 0..n {
            b.record(1_000, None, Some(format!("v{}", offset + i).as_bytes()));
        }
        let applied = state.produce(
            &lockstep::shard::ops::ProduceOp {
                partition: partition.clone(),
                records: bytes::Bytes::from(b.build()),
                acks: -1,
                timeout_ms: 1_000,
                verification_guard: None,
            },
            0,
        );
        assert_eq!(applied.result.error, None);
        offset += n;
    }
    state
        .partition_mut(&partition.key())
        .unwrap()
        .log
        .flush()
        .unwrap();
}

/// A crash of a shard journal's directory, as `mode` (drawn once per crash, 0..3) says: the
/// unsynced tail lost, torn at a random point (`rng`), or kept whole.
pub fn crash_journal(dir: &MemDir, mode: u32, rng: &mut SmallRng) {
    match mode {
        0 => dir.crash_losing_unsynced(),
        1 => {
            let mut tear_rng = SmallRng::seed_from_u64(rng.gen());
            dir.crash(|_, lo, hi| lockstep::storage::mmap::Tear {
                keep_until: tear_rng.gen_range(lo..=hi),
                junk: None,
            })
        }
        _ => dir.crash_keeping_written(),
    }
}
