//! One shard's runtime glue: [`ShardHandle`] implements the shard core's I/O (`ShardIo`: the
//! channel-mesh calls, glommio timers and detached tasks, the io_uring storage engine's block
//! writes and read-ahead, the fatal path, the metadata controller's persistence) and the
//! [`Bus`] handlers use; what an op does is the core's (`crate::shard::exec`).
//!
//! Invariants:
//! - Every [`ShardOp`] runs in its own detached task, locally or on the owning shard, so it
//!   completes even if the requesting connection goes away (an admin change is always installed
//!   on every shard once persisted).
//! - The mesh receive loops never wait on a send, so two shards sending to each other cannot
//!   deadlock on full channels.
//! - Metadata changes are serialised on shard 0 (`admin_lock`) and persisted before they are
//!   installed on every shard.

use super::fatal::{self, Fatal};
use super::sync::{oneshot, Event, OneshotSender};
use super::{files, kick};
use crate::journal::Journal;
use crate::metrics::ShardMetrics;
use crate::model::ShardId;
use crate::server::admin::{fail_reply, Controller};
use crate::server::Bus;
use crate::shard::exec::ShardExec;
use crate::shard::join::join_all;
use crate::shard::ops::{AdminOp, AdminReply, CallError, ControllerError, ShardOp, ShardReply};
use crate::shard::registry::random_uuid;
use crate::shard::registry::TopicRegistry;
use crate::shard::state::ShardState;
use crate::shard::ShardCore;
use crate::storage::file::FsStorage;
use crate::storage::mmap::MmapDir;
use glommio::channels::channel_mesh::Senders;
use glommio::sync::Semaphore;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What travels over the mesh.
pub enum MeshMsg {
    Request { from: usize, id: u64, op: ShardOp },
    Reply { id: u64, reply: ShardReply },
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The shard's runtime state; shared by its tasks through [`ShardHandle`].
pub struct ShardRuntime {
    /// The runtime-free core: the state, the journal and its group commit, op execution
    /// (`crate::shard`); [`ShardHandle`] derefs to it.
    core: ShardCore<FsStorage, MmapDir>,
    pub data_dir: PathBuf,
    /// Origin of the core's monotonic clock.
    started: Instant,
    senders: Option<Senders<MeshMsg>>,
    next_request_id: Cell<u64>,
    pending: RefCell<HashMap<u64, OneshotSender<ShardReply>>>,
    controller: RefCell<Controller>,
    admin_lock: Semaphore,
    pub metrics: Arc<Mutex<ShardMetrics>>,
    /// Set when the broker is shutting down: stop accepting and reading requests.
    pub shutdown: Event,
    /// Request bytes read and not yet answered, over all connections of this shard.
    pub request_bytes: Rc<Semaphore>,
    pub connections_active: Cell<usize>,
    /// The broker's SCRAM credentials (set once the shard starts).
    pub credentials: RefCell<Option<Arc<super::credentials::SharedCredentials>>>,
}

/// A cheap handle to the shard runtime; implements [`Bus`] and the core's `ShardIo`, and derefs
/// to the core (`ShardExec` runs ops on it). The runtime's own fields are `handle.0.field`.
#[derive(Clone)]
pub struct ShardHandle(pub Rc<ShardRuntime>);

impl std::ops::Deref for ShardHandle {
    type Target = ShardCore<FsStorage, MmapDir>;
    fn deref(&self) -> &ShardCore<FsStorage, MmapDir> {
        &self.0.core
    }
}

impl ShardHandle {
    pub fn new(
        state: ShardState<FsStorage>,
        journal: Journal<MmapDir>,
        senders: Option<Senders<MeshMsg>>,
        metrics: Arc<Mutex<ShardMetrics>>,
        request_bytes_max: u64,
    ) -> ShardHandle {
        ShardHandle(Rc::new(ShardRuntime {
            data_dir: state.data_dir.clone(),
            core: ShardCore::new(state, journal),
            started: Instant::now(),
            senders,
            next_request_id: Cell::new(1),
            pending: RefCell::new(HashMap::new()),
            controller: RefCell::new(Controller::new()),
            admin_lock: Semaphore::new(1),
            metrics,
            shutdown: Event::new(),
            request_bytes: Rc::new(Semaphore::new(request_bytes_max)),
            connections_active: Cell::new(0),
            credentials: RefCell::new(None),
        }))
    }

    pub fn with_metrics(&self, f: impl FnOnce(&mut ShardMetrics)) {
        let mut guard = self.0.metrics.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }

    /// Handles one message from the mesh (called by the receive loops; never awaits a send).
    pub fn on_mesh_message(&self, msg: MeshMsg) {
        match msg {
            MeshMsg::Request { from, id, op } => {
                let ctx = self.clone();
                glommio::spawn_local(async move {
                    let reply = ctx.execute(op).await;
                    if let Some(senders) = &ctx.0.senders {
                        if senders.send_to(from, MeshMsg::Reply { id, reply }).await.is_err() {
                            tracing::warn!(shard = %ctx.id, to = from, "reply could not be sent: peer gone");
                        }
                    }
                })
                .detach();
            }
            MeshMsg::Reply { id, reply } => {
                let waiter = self.0.pending.borrow_mut().remove(&id);
                if let Some(tx) = waiter {
                    tx.send(reply);
                }
            }
        }
    }

    /// Reads `parts` ahead through the engine, concurrently (`shard::read_ahead`); what fails
    /// is left to the logs' `pread`.
    async fn engine_read_ahead(
        &self,
        parts: Vec<crate::log::ReadAhead>,
    ) -> Vec<Option<(u64, crate::log::CachedBytes)>> {
        let reads = parts.iter().map(files::read_ahead);
        crate::shard::join::join_all(reads.collect::<Vec<_>>()).await
    }

    /// A metadata change on the controller (shard 0): planned, persisted (blocking I/O off the
    /// executor), then installed on every shard; one at a time.
    async fn controller_admin(&self, op: AdminOp) -> AdminReply {
        let Ok(_permit) = self.0.admin_lock.acquire_permit(1).await else {
            return fail_reply_for(&op, ControllerError::Stopping);
        };
        let current = self.state.borrow().registry().clone();
        let mut plan = self
            .0
            .controller
            .borrow()
            .plan(&current, &op, &mut random_uuid);
        let Some(mut next) = plan.registry.take() else {
            self.0.controller.borrow_mut().commit(&plan);
            return plan.reply;
        };
        next.version = current.version + 1;
        let data_dir = self.0.data_dir.clone();
        let to_store = next.clone();
        let stored = glommio::executor()
            .spawn_blocking(move || to_store.store(&data_dir))
            .await;
        if let Err(e) = stored {
            tracing::error!(error = %e, "metadata could not be persisted; change refused");
            return fail_reply(
                plan.reply,
                ControllerError::NotPersisted,
                &format!("metadata could not be persisted: {e}"),
            );
        }
        self.0.controller.borrow_mut().commit(&plan);
        let next = Arc::new(next);
        let installs = (0..self.shard_count)
            .map(|shard| {
                self.call(
                    ShardId(shard as u16),
                    ShardOp::InstallRegistry(next.clone()),
                )
            })
            .collect();
        for reply in join_all(installs).await {
            if !matches!(reply, ShardReply::Installed) {
                tracing::error!(?reply, "a shard did not install the new metadata");
            }
        }
        plan.reply
    }
}

fn fail_reply_for(op: &AdminOp, error: ControllerError) -> AdminReply {
    let empty = match op {
        AdminOp::CreateTopics { .. } => AdminReply::Created(Vec::new()),
        AdminOp::DeleteTopics { .. } => AdminReply::Deleted(Vec::new()),
        AdminOp::AlterConfigs { .. } => AdminReply::Altered(Vec::new()),
        AdminOp::AllocateProducerId => AdminReply::ProducerId(Err(error)),
        AdminOp::CreatePartitions { .. } => AdminReply::Grown(Vec::new()),
        AdminOp::CreateAcls(acls) => AdminReply::AclsCreated(vec![Ok(()); acls.len()]),
        AdminOp::DeleteAcls(filters) => {
            AdminReply::AclsDeleted(vec![Ok(Vec::new()); filters.len()])
        }
    };
    fail_reply(empty, error, "the metadata controller is shutting down")
}

impl Bus for ShardHandle {
    fn local_shard(&self) -> ShardId {
        self.id
    }

    fn shard_count(&self) -> usize {
        self.shard_count
    }

    fn registry(&self) -> Arc<TopicRegistry> {
        self.state.borrow().registry().clone()
    }

    fn now_ms(&self) -> i64 {
        wall_ms()
    }

    fn call(&self, shard: ShardId, op: ShardOp) -> impl Future<Output = ShardReply> {
        let ctx = self.clone();
        async move {
            let (tx, rx) = oneshot();
            if shard == ctx.id {
                let runner = ctx.clone();
                glommio::spawn_local(async move { tx.send(runner.execute(op).await) }).detach();
            } else {
                let Some(senders) = &ctx.0.senders else {
                    panic!("{shard} addressed on a broker of one shard");
                };
                let id = ctx.0.next_request_id.get();
                ctx.0.next_request_id.set(id + 1);
                ctx.0.pending.borrow_mut().insert(id, tx);
                let from = ctx.id.index();
                if senders
                    .send_to(shard.index(), MeshMsg::Request { from, id, op })
                    .await
                    .is_err()
                {
                    ctx.0.pending.borrow_mut().remove(&id);
                    return ShardReply::Failed(CallError::Unreachable);
                }
            }
            rx.await.unwrap_or(ShardReply::Failed(CallError::Abandoned))
        }
    }

    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()> {
        glommio::timer::sleep(Duration::from_millis(ms))
    }

    fn credentials(&self) -> Option<Arc<dyn crate::server::CredentialAdmin>> {
        let store = self.0.credentials.borrow().clone()?;
        Some(store)
    }
}

/// The shard core's I/O on glommio: the mesh, timers, detached tasks, io_uring block writes and
/// read-ahead, the fatal path, the controller. (Not imported here: `Bus` has methods of the
/// same names.)
impl crate::shard::ShardIo for ShardHandle {
    type Storage = FsStorage;
    type Dir = MmapDir;

    fn core(&self) -> &ShardCore<FsStorage, MmapDir> {
        &self.0.core
    }

    fn now_ms(&self) -> u64 {
        wall_ms() as u64
    }

    fn monotonic_us(&self) -> u64 {
        self.0.started.elapsed().as_micros() as u64
    }

    fn call(&self, shard: ShardId, op: ShardOp) -> impl Future<Output = ShardReply> {
        Bus::call(self, shard, op)
    }

    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()> {
        glommio::timer::sleep(Duration::from_millis(ms))
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        glommio::spawn_local(task).detach();
    }

    fn flush_journal(
        &self,
        ticket: &crate::journal::FlushTicket,
    ) -> impl Future<Output = std::io::Result<()>> {
        // One O_DIRECT + O_DSYNC write of the tail's blocks (src/runtime/files.rs), submitted
        // at once (`kick`), not after every task the last flush woke.
        kick::kicked(files::flush_journal(ticket))
    }

    fn journal_poisoned(&self, detail: &str) -> ! {
        fatal::exit(Some(self.id), Fatal::JournalPoisoned, detail)
    }

    fn flush_log(
        &self,
        ticket: &crate::log::FlushTicket,
    ) -> impl Future<Output = std::io::Result<()>> {
        // Block writes of the segment tails, then syncs (src/runtime/files.rs), submitted at
        // once (`kick`).
        kick::kicked(files::sync_ticket(ticket))
    }

    fn writes_behind(&self) -> bool {
        files::writes_behind()
    }

    fn write_behind(
        &self,
        write: &crate::log::WriteBehind,
    ) -> impl Future<Output = std::io::Result<()>> {
        kick::kicked(files::write_behind(write))
    }

    fn read_ahead(
        &self,
        parts: Vec<crate::log::ReadAhead>,
    ) -> impl Future<Output = Vec<Option<(u64, crate::log::CachedBytes)>>> {
        let ctx = self.clone();
        async move { ctx.engine_read_ahead(parts).await }
    }

    fn log_poisoned(&self, detail: &str) -> ! {
        fatal::exit(Some(self.id), Fatal::LogPoisoned, detail)
    }

    fn admin(&self, op: AdminOp) -> impl Future<Output = AdminReply> {
        let ctx = self.clone();
        async move { ctx.controller_admin(op).await }
    }

    fn with_metrics(&self, f: impl FnOnce(&mut ShardMetrics)) {
        ShardHandle::with_metrics(self, f)
    }
}

#[cfg(test)]
mod tests {
    //! The partition and group sides of producer transactions through the runtime's ops, on a
    //! real data dir: a transactional produce (acks=all), a read_committed fetch held at the
    //! LSO, WriteTxnMarkers answered once durable (idempotent), the aborted transaction
    //! reported; TxnOffsetCommit pending until GroupTxnMarker commits it.
    use super::*;
    use crate::group::ops::{FetchOffsets, GroupOp, GroupReply, TxnCommitOffsets};
    use crate::group::CommitPartition;
    use crate::journal::JournalConfig;
    use crate::log::batch::BatchBuilder;
    use crate::producer_txn::{TxnMarker, TxnOutcome};
    use crate::shard::ops::{FetchOp, FetchPartitionOp, PartitionRef, ProduceOp};
    use bytes::Bytes;

    fn txn_batch(pid: i64, seq: i32, n: usize) -> Bytes {
        let mut b = BatchBuilder::new(1_000);
        b.producer_id = pid;
        b.producer_epoch = 0;
        b.base_sequence = seq;
        b.attributes = 0x10;
        for _ in 0..n {
            b.record(1_000, None, Some(b"v"));
        }
        Bytes::from(b.build())
    }

    #[test]
    fn markers_end_transactions_in_partitions_and_groups() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                let mut reg = TopicRegistry::new("c".into());
                let topic_id = uuid::Uuid::from_u128(5);
                reg.create_topic("t", topic_id, 1, &[]).unwrap();
                let (state, _) =
                    ShardState::open(ShardId(0), 1, &data, FsStorage, Arc::new(reg), 0).unwrap();
                let journal_dir = crate::shard::state::journal_dir(&data, ShardId(0));
                let (journal, _) = Journal::open(
                    MmapDir::open(&journal_dir).unwrap(),
                    JournalConfig::default(),
                )
                .unwrap();
                let shard = ShardHandle::new(
                    state,
                    journal,
                    None,
                    Arc::new(Mutex::new(Default::default())),
                    1 << 20,
                );
                let r = PartitionRef {
                    topic: "t".into(),
                    topic_id,
                    partition: 0,
                };
                let produce = |records, guard| {
                    ShardOp::Produce(ProduceOp {
                        partition: r.clone(),
                        records,
                        acks: -1,
                        timeout_ms: 10_000,
                        verification_guard: guard,
                    })
                };
                let fetch = || {
                    ShardOp::Fetch(FetchOp {
                        partitions: vec![FetchPartitionOp {
                            partition: r.clone(),
                            fetch_offset: 0,
                            max_bytes: 1 << 20,
                        }],
                        max_bytes: 1 << 20,
                        read_committed: true,
                    })
                };
                let fetched = |reply| match reply {
                    ShardReply::Fetch(mut parts) => parts.remove(0),
                    other => panic!("{other:?}"),
                };
                // A batch opening a producer's transaction here comes back with a guard to
                // verify (KIP-890 part 1; the produce handler asks the coordinator); sent again
                // with it, it is appended. A later batch of the open transaction needs none.
                for (pid, seq, n, opens) in [(7, 0, 2, true), (8, 0, 1, true), (7, 2, 1, false)] {
                    let mut guard = None;
                    if opens {
                        match shard.execute(produce(txn_batch(pid, seq, n), None)).await {
                            ShardReply::Produce(p) => {
                                assert!(p.verification_guard.is_some(), "{p:?}");
                                guard = p.verification_guard;
                            }
                            other => panic!("{other:?}"),
                        }
                    }
                    match shard.execute(produce(txn_batch(pid, seq, n), guard)).await {
                        ShardReply::Produce(p) => {
                            assert_eq!((p.error, p.verification_guard), (None, None), "{p:?}")
                        }
                        other => panic!("{other:?}"),
                    }
                }
                let p = fetched(shard.execute(fetch()).await);
                assert_eq!((p.high_watermark, p.last_stable_offset), (4, 0));
                assert!(p.records.is_empty());
                let marker = |pid, outcome| ShardOp::WriteTxnMarkers {
                    marker: TxnMarker {
                        producer_id: pid,
                        producer_epoch: 0,
                        outcome,
                        coordinator_epoch: 0,
                    },
                    partitions: vec![r.clone()],
                };
                for _ in 0..2 {
                    match shard.execute(marker(7, TxnOutcome::Abort)).await {
                        ShardReply::TxnMarkersWritten(results) => assert_eq!(results, vec![Ok(())]),
                        other => panic!("{other:?}"),
                    }
                }
                let p = fetched(shard.execute(fetch()).await);
                assert_eq!(
                    (p.high_watermark, p.last_stable_offset),
                    (5, 2),
                    "8 still open"
                );
                shard.execute(marker(8, TxnOutcome::Commit)).await;
                let p = fetched(shard.execute(fetch()).await);
                assert_eq!((p.high_watermark, p.last_stable_offset), (6, 6));
                let aborted: Vec<(i64, i64)> = p
                    .aborted
                    .iter()
                    .map(|a| (a.producer_id, a.first_offset))
                    .collect();
                assert_eq!(aborted, vec![(7, 0)]);

                // The group side.
                let sh = &shard;
                let group = |op| async move {
                    match sh.execute(ShardOp::Group(op)).await {
                        ShardReply::Group(reply) => reply,
                        other => panic!("{other:?}"),
                    }
                };
                let offsets = || {
                    GroupOp::Fetch(FetchOffsets {
                        group_id: "g".into(),
                        topics: Some(vec![("t".into(), vec![0])]),
                        member: None,
                        require_stable: true,
                    })
                };
                let committed = group(GroupOp::TxnCommit(TxnCommitOffsets {
                    group_id: "g".into(),
                    producer_id: 8,
                    member_id: String::new(),
                    group_instance_id: None,
                    generation_id: -1,
                    partitions: vec![CommitPartition {
                        topic: "t".into(),
                        partition: 0,
                        offset: 6,
                        leader_epoch: -1,
                        metadata: None,
                        retention_time_ms: -1,
                    }],
                }))
                .await;
                assert!(
                    matches!(committed, GroupReply::Committed(Ok(ref c)) if c == &vec![Ok(())])
                );
                let GroupReply::Fetched(Ok(f)) = group(offsets()).await else {
                    panic!()
                };
                assert_eq!(
                    (f[0].offset, f[0].error),
                    (-1, Some(crate::group::GroupError::UnstableOffset))
                );
                let reply = shard
                    .execute(ShardOp::GroupTxnMarker {
                        marker: TxnMarker {
                            producer_id: 8,
                            producer_epoch: 0,
                            outcome: TxnOutcome::Commit,
                            coordinator_epoch: 0,
                        },
                        group_id: "g".into(),
                    })
                    .await;
                assert!(matches!(reply, ShardReply::GroupTxnMarkerWritten(Ok(()))));
                let GroupReply::Fetched(Ok(f)) = group(offsets()).await else {
                    panic!()
                };
                assert_eq!((f[0].offset, f[0].error), (6, None));
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
