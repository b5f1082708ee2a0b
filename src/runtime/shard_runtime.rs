//! One shard's runtime: its runtime-free core (`crate::shard`: the [`ShardState`], the state
//! journal and its group commit, the share-transaction steps), for which [`ShardHandle`]
//! implements `ShardIo` with glommio; the cross-shard mesh endpoints, partition-log group
//! commit, durability and data waits, admin serialisation on shard 0, and the [`Bus`] handlers
//! use.
//!
//! Invariants:
//! - `state` is borrowed only in synchronous sections; no `RefCell` borrow lives across an
//!   `.await` (STYLE habit 4): after every await, what was read before is read again.
//! - Every [`ShardOp`] runs in its own detached task, locally or on the owning shard, so it
//!   completes even if the requesting connection goes away (an admin change is always installed
//!   on every shard once persisted).
//! - At most one flush per partition is in flight; writes that arrive meanwhile are covered by
//!   the next one (group commit). A failed flush or write poisons the partition's log, and a
//!   failed journal append or flush poisons the journal: both take the fatal path
//!   (`runtime::fatal`, the process exits with `EXIT_STORAGE_POISONED`) before anyone waiting
//!   is answered.
//! - The mesh receive loops never wait on a send, so two shards sending to each other cannot
//!   deadlock on full channels.

use super::fatal::{self, Fatal};
use super::files;
use super::sync::{oneshot, Event, OneshotSender};
use crate::constants::JOURNAL_SNAPSHOT_EVERY_ENTRIES;
use crate::constants::{DELETE_RECORDS_DURABLE_POLL_MS, SHARE_DLQ_PRODUCE_TIMEOUT_MS};
use crate::journal::Journal;
use crate::log::group_commit::CommitWaiters;
use crate::metrics::{LogGauge, ShardMetrics};
use crate::model::{group_shard, partition_shard};
use crate::model::{ShardId, TopicPartition};
use crate::server::admin::{fail_reply, Controller};
use crate::server::Bus;
use crate::shard::join::join_all;
use crate::shard::ops::{
    AdminOp, AdminReply, CallError, DeletedRecords, PartitionRef, ProduceOp, ProduceResult,
    ShardOp, ShardReply, ShareAckResult, ShareFetchReply, ShareGroupsListed, ShareProbeReply,
    WaitOp,
};
use crate::shard::registry::random_uuid;
use crate::shard::registry::TopicRegistry;
use crate::shard::share_session::SessionKey;
use crate::shard::state::ShardState;
use crate::shard::ShardCore;
use crate::storage::file::FsStorage;
use crate::storage::mmap::MmapDir;
use glommio::channels::channel_mesh::Senders;
use glommio::sync::Semaphore;
use kafka_protocol::ResponseError;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod ptxn;

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

#[derive(Default)]
struct PartitionSync {
    flushing: bool,
    waiters: CommitWaiters<OneshotSender<Result<(), String>>>,
}

struct DataWaiter {
    id: u64,
    keys: Vec<TopicPartition>,
    tx: OneshotSender<()>,
}

/// The shard's runtime state; shared by its tasks through [`ShardHandle`].
pub struct ShardRuntime {
    /// The runtime-free core: the state, the journal and its group commit (`crate::shard`);
    /// `ShardRuntime` derefs to it.
    core: ShardCore<FsStorage, MmapDir>,
    pub data_dir: PathBuf,
    /// Origin of the core's monotonic clock.
    started: Instant,
    senders: Option<Senders<MeshMsg>>,
    next_request_id: Cell<u64>,
    pending: RefCell<HashMap<u64, OneshotSender<ShardReply>>>,
    syncs: RefCell<HashMap<TopicPartition, PartitionSync>>,
    data_waiters: RefCell<Vec<DataWaiter>>,
    next_waiter_id: Cell<u64>,
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

/// A cheap handle to the shard runtime; implements [`Bus`].
#[derive(Clone)]
pub struct ShardHandle(pub Rc<ShardRuntime>);

impl std::ops::Deref for ShardRuntime {
    type Target = ShardCore<FsStorage, MmapDir>;
    fn deref(&self) -> &ShardCore<FsStorage, MmapDir> {
        &self.core
    }
}

impl std::ops::Deref for ShardHandle {
    type Target = ShardRuntime;
    fn deref(&self) -> &ShardRuntime {
        &self.0
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
            syncs: RefCell::new(HashMap::new()),
            data_waiters: RefCell::new(Vec::new()),
            next_waiter_id: Cell::new(1),
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
        let mut guard = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }

    /// Handles one message from the mesh (called by the receive loops; never awaits a send).
    pub fn on_mesh_message(&self, msg: MeshMsg) {
        match msg {
            MeshMsg::Request { from, id, op } => {
                let ctx = self.clone();
                glommio::spawn_local(async move {
                    let reply = ctx.execute(op).await;
                    if let Some(senders) = &ctx.senders {
                        if senders.send_to(from, MeshMsg::Reply { id, reply }).await.is_err() {
                            tracing::warn!(shard = %ctx.id, to = from, "reply could not be sent: peer gone");
                        }
                    }
                })
                .detach();
            }
            MeshMsg::Reply { id, reply } => {
                let waiter = self.pending.borrow_mut().remove(&id);
                if let Some(tx) = waiter {
                    tx.send(reply);
                }
            }
        }
    }

    /// Reads `parts` ahead through the engine (concurrently) and hands them to their logs
    /// (`shard::read_ahead`); what fails is left to the logs' `pread`.
    async fn read_ahead(&self, parts: Vec<crate::shard::read_ahead::PartitionReadAhead>) {
        if parts.is_empty() {
            return;
        }
        let reads = parts.iter().map(|p| files::read_ahead(&p.ahead));
        let results = crate::shard::join::join_all(reads.collect::<Vec<_>>()).await;
        let mut state = self.state.borrow_mut();
        for (part, result) in parts.iter().zip(results) {
            if let Some((read, data)) = result {
                state.fill_read_cache(part, read, data);
                for evicted in files::note_read_cache(&part.partition) {
                    state.drop_read_cache(&evicted);
                }
            }
        }
    }

    /// Runs an operation on this shard.
    pub async fn execute(&self, op: ShardOp) -> ShardReply {
        match op {
            ShardOp::Produce(op) => self.produce(op).await,
            ShardOp::Fetch(op) => {
                let ahead = self.state.borrow().fetch_read_ahead(&op);
                self.read_ahead(ahead).await;
                ShardReply::Fetch(self.state.borrow().fetch(&op))
            }
            ShardOp::ListOffsets(op) => {
                ShardReply::ListOffsets(self.state.borrow().list_offsets(&op))
            }
            ShardOp::DescribeProducers(partitions) => {
                ShardReply::Producers(self.state.borrow().describe_producers(&partitions))
            }
            ShardOp::WaitForData(op) => self.wait_for_data(op).await,
            ShardOp::Admin(op) => {
                if self.id != ShardId(0) {
                    return ShardReply::Failed(CallError::NotController);
                }
                ShardReply::Admin(self.admin(op).await)
            }
            ShardOp::InstallRegistry(registry) => {
                self.install_registry(registry);
                ShardReply::Installed
            }
            ShardOp::ShareHeartbeat(hb) => {
                let (answer, departed) = {
                    let mut state = self.state.borrow_mut();
                    let registry = state.registry().clone();
                    state
                        .share
                        .groups
                        .heartbeat(&hb, &registry, wall_ms() as u64)
                };
                // A leaving member's records are not released here but when its share session
                // closes (epoch -1, after that request's acknowledgements) or its connection
                // drops: librdkafka sends its last acknowledgements (ShareAcknowledge, epoch -1)
                // alongside the leave, and a release here would race them. Records are only
                // ever acquired through a session, so every one of them is covered.
                drop(departed);
                ShardReply::ShareHeartbeat(answer)
            }
            ShardOp::ShareSession(op) => {
                let now = wall_ms() as u64;
                let mut state = self.state.borrow_mut();
                let sessions = &mut state.share.sessions;
                let outcome = if op.acknowledge_only {
                    sessions.acknowledge(&op.key, op.epoch, op.conn_id, now)
                } else {
                    sessions.update(&op.key, op.epoch, &op.added, &op.forgotten, op.conn_id, now)
                };
                ShardReply::ShareSession(outcome)
            }
            ShardOp::ShareFetch(op) => {
                // The request's acknowledgements here first: what they release can be acquired.
                let acked = self.acknowledge_first(op.acknowledge.as_ref()).await;
                let ahead = self.state.borrow().share_fetch_read_ahead(&op);
                self.read_ahead(ahead).await;
                let fetched = self.state.borrow_mut().share_fetch(&op, wall_ms() as u64);
                // A new share partition's start offset is journalled; nothing waits for it.
                self.append_share_entries();
                // What the member's next fetch will read, read ahead now (while the consumer
                // processes these records), so that it finds it in memory.
                let next = self.state.borrow().share_fetch_read_ahead(&op);
                if !next.is_empty() {
                    let ctx = self.clone();
                    glommio::spawn_local(async move { ctx.read_ahead(next).await }).detach();
                }
                ShardReply::ShareFetched(ShareFetchReply {
                    acknowledged: self.acknowledged_durable(acked).await,
                    partitions: fetched,
                })
            }
            ShardOp::ShareProbe(op) => {
                let acked = self.acknowledge_first(op.acknowledge.as_ref()).await;
                let probed = self.state.borrow_mut().share_probe(&op, wall_ms() as u64);
                // A new share partition's start offset is journalled; nothing waits for it.
                self.append_share_entries();
                ShardReply::ShareProbed(ShareProbeReply {
                    acknowledged: self.acknowledged_durable(acked).await,
                    partitions: probed,
                })
            }
            ShardOp::ShareAcknowledge(op) => {
                let results = self
                    .state
                    .borrow_mut()
                    .share_acknowledge(&op, wall_ms() as u64);
                // DLQ copies are durable before the ARCHIVED state is journalled.
                self.copy_to_dlq().await;
                ShardReply::ShareAcknowledged(self.share_results_durable(results).await)
            }
            ShardOp::ShareReleaseMember {
                group_id,
                member_id,
            } => {
                let released = self
                    .state
                    .borrow_mut()
                    .share
                    .release_member(&group_id, &member_id);
                self.copy_to_dlq().await;
                self.append_share_entries();
                ShardReply::ShareReleased(released)
            }
            ShardOp::ShareDisconnected {
                group_id,
                member_id,
                conn_id,
            } => {
                // Only a session this connection still owns closes (and releases the member's
                // records); a member that reconnected keeps its newer session.
                let key = SessionKey {
                    group_id,
                    member_id,
                };
                let owned = self
                    .state
                    .borrow_mut()
                    .share
                    .sessions
                    .disconnected(&key, conn_id);
                if owned {
                    self.member_gone(key.group_id, key.member_id);
                }
                ShardReply::ShareReleased(0)
            }
            ShardOp::Txn(op) => ShardReply::Txn(crate::shard::txn::execute(self, op).await),
            ShardOp::ShareListGroups => {
                let state = self.state.borrow();
                let groups = &state.share.groups;
                ShardReply::ShareGroupsListed(ShareGroupsListed {
                    coordinated: groups
                        .group_ids()
                        .filter_map(|id| groups.group(id).map(|g| (id.clone(), g.members.len())))
                        .collect(),
                    with_state: state.share.groups_with_state().into_iter().collect(),
                })
            }
            ShardOp::ShareDescribeGroup { group_id } => ShardReply::ShareGroupDescribed(
                self.state.borrow().share.groups.group(&group_id).cloned(),
            ),
            ShardOp::ShareOffsets {
                group_id,
                partitions,
            } => ShardReply::ShareOffsets(
                self.state
                    .borrow()
                    .share_offsets(&group_id, partitions.as_deref()),
            ),
            ShardOp::ShareAlterOffsets {
                group_id,
                partitions,
            } => {
                let results = self
                    .state
                    .borrow_mut()
                    .share_alter_offsets(&group_id, &partitions);
                ShardReply::ShareOffsetsAltered(self.share_results_durable(results).await)
            }
            ShardOp::ShareDeleteOffsets {
                group_id,
                topic_ids,
            } => {
                let results = self
                    .state
                    .borrow_mut()
                    .share_delete_offsets(&group_id, &topic_ids);
                ShardReply::ShareOffsetsDeleted(self.share_results_durable(results).await)
            }
            ShardOp::ShareDeleteGroup { group_id } => ShardReply::ShareGroupDeleted(
                self.state.borrow_mut().share.groups.delete_empty(&group_id),
            ),
            ShardOp::DeleteRecords {
                partitions,
                timeout_ms,
            } => ShardReply::RecordsDeleted(self.delete_records(&partitions, timeout_ms).await),
            ShardOp::Group(op) => self.group_op(op).await,
            ShardOp::ProducerTxn(op) => self.ptxn_op(op).await,
            ShardOp::WriteTxnMarkers { marker, partitions } => {
                ShardReply::TxnMarkersWritten(self.write_txn_markers(marker, &partitions).await)
            }
            ShardOp::GroupTxnMarker { marker, group_id } => {
                // The group's pending transactional offsets become committed or are dropped;
                // answered once the journal entries that say so are durable.
                let resolved = self.state.borrow_mut().groups.txn_marker(
                    &group_id,
                    marker.producer_id,
                    marker.outcome,
                    wall_ms() as u64,
                );
                let durable = match self.append_share_entries() {
                    Some(seq) => self.wait_journal(seq).await,
                    None => Ok(()),
                };
                match durable {
                    Ok(()) => {
                        tracing::debug!(shard = %self.id, group_id, resolved, "group transaction marker applied");
                        ShardReply::GroupTxnMarkerWritten(Ok(()))
                    }
                    Err(e) => {
                        tracing::error!(shard = %self.id, error = %e, "group transaction marker not durable");
                        ShardReply::GroupTxnMarkerWritten(Err(
                            ResponseError::KafkaStorageError.code()
                        ))
                    }
                }
            }
        }
    }

    /// WriteTxnMarkers on this shard: ends the transaction in each partition (a control batch
    /// when [`crate::ptxn::partition::TxnPartition::marker_action`] says so, and the share
    /// records the transaction LOCKED there, through the share side's hook), then answers once
    /// every marker and the share state it changed are durable. One result per partition.
    async fn write_txn_markers(
        &self,
        marker: crate::ptxn::TxnMarker,
        partitions: &[PartitionRef],
    ) -> Vec<Result<(), i16>> {
        let now = wall_ms() as u64;
        let mut targets: Vec<Option<(TopicPartition, u64)>> = Vec::with_capacity(partitions.len());
        let mut results: Vec<Result<(), i16>> = {
            let mut state = self.state.borrow_mut();
            partitions
                .iter()
                .map(|r| match state.write_txn_marker(&marker, r, now) {
                    Ok(target) => {
                        state.ptxn_share_resolve(&marker, r);
                        targets.push(target);
                        Ok(())
                    }
                    Err(code) => {
                        targets.push(None);
                        Err(code)
                    }
                })
                .collect()
        };
        for r in partitions {
            let poison = self.state.borrow().log_poison(&r.key());
            if let Some(cause) = poison {
                fatal::exit(
                    Some(self.id),
                    Fatal::LogPoisoned,
                    &format!("{}-{}: {cause}", r.topic, r.partition),
                );
            }
        }
        let journal = match self.append_share_entries() {
            Some(seq) => self.wait_journal(seq).await,
            None => Ok(()),
        };
        if journal.is_err() {
            for result in results.iter_mut().filter(|r| r.is_ok()) {
                *result = Err(ResponseError::KafkaStorageError.code());
            }
        }
        for (result, target) in results.iter_mut().zip(targets) {
            let Some((key, end)) = target.filter(|_| result.is_ok()) else {
                continue;
            };
            self.ensure_flush(key);
            if let Err((code, cause)) = self
                .wait_durable(key, end, crate::constants::PRODUCE_TIMEOUT_MS_MAX)
                .await
            {
                tracing::warn!(shard = %self.id, partition = ?key, cause = %cause, "transaction marker not durable");
                *result = Err(code);
            }
        }
        results
    }

    /// Completes once partition `key` is durable up to `target` (an error code and cause if
    /// its log cannot be made durable or `timeout_ms` passes). The caller started a flush.
    async fn wait_durable(
        &self,
        key: TopicPartition,
        target: u64,
        timeout_ms: u64,
    ) -> Result<(), (i16, String)> {
        let storage_error =
            |cause: &str| (ResponseError::KafkaStorageError.code(), cause.to_string());
        match self.state.borrow().durability(&key) {
            Some((durable, _)) if durable >= target => return Ok(()),
            Some((_, true)) | None => {
                return Err(storage_error("the partition log cannot be made durable"))
            }
            Some(_) => {}
        }
        let (tx, rx) = oneshot();
        self.syncs
            .borrow_mut()
            .entry(key)
            .or_default()
            .waiters
            .park(target, tx);
        let timeout = Duration::from_millis(timeout_ms.max(1));
        let outcome = futures_lite::future::or(async { Some(rx.await) }, async {
            glommio::timer::sleep(timeout).await;
            None
        })
        .await;
        match outcome {
            Some(Some(Ok(()))) => Ok(()),
            Some(Some(Err(cause))) => Err(storage_error(&cause)),
            Some(None) => Err(storage_error("the flush was abandoned")),
            None => Err((
                ResponseError::RequestTimedOut.code(),
                "appended but not made durable within the timeout".into(),
            )),
        }
    }

    /// A consumer-group op (`crate::group::ops`): runs it, then answers once the journal
    /// entries it produced (committed offsets, tombstones) are durable.
    async fn group_op(&self, op: crate::group::ops::GroupOp) -> ShardReply {
        let reply = {
            let mut state = self.state.borrow_mut();
            crate::group::ops::execute(&mut state.groups, op, wall_ms() as u64)
        };
        let durable = match self.append_share_entries() {
            Some(seq) => self.wait_journal(seq).await,
            None => Ok(()),
        };
        match durable {
            Ok(()) => ShardReply::Group(reply),
            Err(e) => {
                tracing::error!(shard = %self.id, error = %e, "consumer-group state not durable");
                ShardReply::Failed(CallError::NotDurable(e.to_string()))
            }
        }
    }

    /// DeleteRecords on this shard: moves the log starts, then waits until every moved start
    /// and the share state that followed it are durable (KAFKA_STORAGE_ERROR if a log or the
    /// journal fails, REQUEST_TIMED_OUT past `timeout_ms`).
    async fn delete_records(
        &self,
        partitions: &[(PartitionRef, i64)],
        timeout_ms: u64,
    ) -> Vec<DeletedRecords> {
        let mut results: Vec<DeletedRecords> = {
            let mut state = self.state.borrow_mut();
            partitions
                .iter()
                .map(|(r, offset)| state.delete_records(r, *offset))
                .collect()
        };
        let journal = match self.append_share_entries() {
            Some(seq) => self.wait_journal(seq).await,
            None => Ok(()),
        };
        if journal.is_err() {
            for r in results.iter_mut().filter(|r| r.error_code == 0) {
                r.error_code = ResponseError::KafkaStorageError.code();
            }
        }
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(1));
        for ((r, _), result) in partitions.iter().zip(results.iter_mut()) {
            if result.error_code != 0 {
                continue;
            }
            let key = r.key();
            loop {
                match self
                    .state
                    .borrow()
                    .log_start_durable(&key, result.low_watermark)
                {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(code) => {
                        result.error_code = code;
                        break;
                    }
                }
                if Instant::now() >= deadline {
                    result.error_code = ResponseError::RequestTimedOut.code();
                    break;
                }
                // The flush loop writes and syncs the checkpoint slot of the new start; a flush
                // already in flight does not cover it, so look again after it.
                self.ensure_flush(key);
                glommio::timer::sleep(Duration::from_millis(DELETE_RECORDS_DURABLE_POLL_MS)).await;
            }
        }
        results
    }

    /// After a restart: resolves the transactions that hold LOCKED records here with their
    /// coordinators (`shard::txn::resolve_locked_transactions`).
    pub fn resolve_locked_transactions(&self) {
        crate::shard::txn::resolve_locked_transactions(self)
    }

    /// Appends the share entries an operation produced and waits until they are durable;
    /// results that succeeded become KAFKA_STORAGE_ERROR if they cannot be made durable.
    async fn share_results_durable(&self, mut results: Vec<ShareAckResult>) -> Vec<ShareAckResult> {
        let durable = match self.append_share_entries() {
            Some(seq) => self.wait_journal(seq).await,
            None => Ok(()),
        };
        if let Err(cause) = durable {
            for r in results.iter_mut().filter(|r| r.error_code == 0) {
                *r = ShareAckResult::error(ResponseError::KafkaStorageError.code(), cause.clone());
            }
        }
        results
    }

    /// A ShareFetch's acknowledgements on this shard, applied before it acquires or measures
    /// (`None`: it carries none): their results and the journal entry that makes them durable.
    async fn acknowledge_first(
        &self,
        op: Option<&crate::shard::ops::ShareAckOp>,
    ) -> Option<(Vec<ShareAckResult>, Option<u64>)> {
        let op = op?;
        let results = self
            .state
            .borrow_mut()
            .share_acknowledge(op, wall_ms() as u64);
        // DLQ copies are durable before the ARCHIVED state is journalled.
        self.copy_to_dlq().await;
        Some((results, self.append_share_entries()))
    }

    /// The results of [`ShardHandle::acknowledge_first`] once durable (KAFKA_STORAGE_ERROR
    /// for each that is not).
    async fn acknowledged_durable(
        &self,
        acked: Option<(Vec<ShareAckResult>, Option<u64>)>,
    ) -> Vec<ShareAckResult> {
        let Some((mut results, seq)) = acked else {
            return Vec::new();
        };
        let durable = match seq {
            Some(seq) => self.wait_journal(seq).await,
            None => Ok(()),
        };
        if let Err(cause) = durable {
            for r in results.iter_mut().filter(|r| r.error_code == 0) {
                *r = ShareAckResult::error(ResponseError::KafkaStorageError.code(), cause.clone());
            }
        }
        results
    }

    /// Produces the DLQ copies the share state owes (KIP-1191, `shard::share_dlq`) with
    /// acks=all, each to its DLQ partition's shard, and waits for them. A copy that cannot be
    /// written is logged and dropped: the records stay ARCHIVED (Kafka's "Failed to write to
    /// DLQ, proceeding to ARCHIVED regardless").
    async fn copy_to_dlq(&self) {
        let (produces, failures) = self.state.borrow_mut().take_dlq_produces(wall_ms());
        for failure in failures {
            tracing::warn!(shard = %self.id, error = %failure, "Failed to write to DLQ, proceeding to ARCHIVED regardless");
        }
        let calls = produces.into_iter().map(|p| {
            let shard = partition_shard(&p.target.topic, p.target.partition, self.shard_count);
            let op = ShardOp::Produce(ProduceOp {
                partition: p.target.clone(),
                records: p.records,
                acks: -1,
                timeout_ms: SHARE_DLQ_PRODUCE_TIMEOUT_MS,
                verification_guard: None,
            });
            let call = self.call(shard, op);
            async move { (p.group_id, p.target, p.count, call.await) }
        });
        let calls: Vec<_> = calls.collect();
        for (group, target, count, reply) in join_all(calls).await {
            match reply {
                ShardReply::Produce(r) if r.error_code == 0 => {}
                ShardReply::Produce(r) => tracing::warn!(
                    shard = %self.id, group = %group, topic = %target.topic, partition = target.partition,
                    records = count, code = r.error_code, error = ?r.error_message,
                    "Failed to write to DLQ, proceeding to ARCHIVED regardless"
                ),
                _ => {
                    tracing::warn!(shard = %self.id, group = %group, "unexpected reply to a DLQ produce")
                }
            }
        }
    }

    /// A share member left, was evicted, or lost its connection: close its share session (on
    /// this, the group's shard) and release its acquired records on every shard.
    fn member_gone(&self, group_id: String, member_id: String) {
        self.state
            .borrow_mut()
            .share
            .sessions
            .remove_member(&group_id, &member_id);
        for shard in 0..self.shard_count {
            let op = ShardOp::ShareReleaseMember {
                group_id: group_id.clone(),
                member_id: member_id.clone(),
            };
            let ctx = self.clone();
            glommio::spawn_local(async move {
                ctx.call(ShardId(shard as u16), op).await;
            })
            .detach();
        }
    }

    /// Appends the state's pending journal entries (`shard::append_entries`; a failed append
    /// takes the fatal path).
    fn append_share_entries(&self) -> Option<u64> {
        crate::shard::append_entries(self)
    }

    /// Completes once journal entry `seq` is durable (`shard::wait_journal`).
    async fn wait_journal(&self, seq: u64) -> Result<(), String> {
        crate::shard::wait_journal(self, seq).await
    }

    fn ensure_journal_flush(&self) {
        crate::shard::ensure_journal_flush(self)
    }

    /// Expires acquisition locks and member sessions; snapshots and compacts the journal.
    pub fn share_housekeeping(&self) {
        let now = wall_ms() as u64;
        let departed = {
            let mut state = self.state.borrow_mut();
            state.share.expire_locks(now);
            // Consumer groups: session timeouts, rebalance deadlines, offset retention.
            state.groups.tick(now);
            let registry = state.registry().clone();
            state.share.groups.expire_sessions(&registry, now)
        };
        for d in departed {
            tracing::info!(shard = %self.id, group = %d.group_id, member = %d.member_id, "share member session timed out");
            self.member_gone(d.group_id, d.member_id);
        }
        crate::shard::txn::expire(self);
        if !self.state.borrow().share.dlq.is_empty() {
            // Records archived at the delivery limit by lock expiry: their DLQ copies first,
            // then the journal (module docs of `shard::share_dlq`).
            let ctx = self.clone();
            glommio::spawn_local(async move {
                ctx.copy_to_dlq().await;
                ctx.append_share_entries();
            })
            .detach();
            return;
        }
        self.append_share_entries();
        if self.journal.borrow().needs_flush() {
            self.ensure_journal_flush();
        }
        let due = {
            let journal = self.journal.borrow();
            let since = journal
                .latest_durable_snapshot()
                .map_or(journal.next_seq(), |s| journal.next_seq() - s.end_seq);
            since >= JOURNAL_SNAPSHOT_EVERY_ENTRIES && !journal.needs_flush()
        };
        if due {
            let snapshot = {
                let mut state = self.state.borrow_mut();
                let mut snapshot = state.share.durable_snapshot(wall_ms() as u64);
                snapshot.group_offsets = state.groups.durable_offsets();
                snapshot.producer_transactions = state.ptxn.durable_records();
                snapshot
            };
            let written = self.journal.borrow_mut().write_shard_snapshot(&snapshot);
            match written {
                Ok(_) => self.ensure_journal_flush(),
                Err(e) => fatal::exit(
                    Some(self.id),
                    Fatal::JournalPoisoned,
                    &format!("snapshot: {e}"),
                ),
            }
        }
        let compacted = self.journal.borrow_mut().compact();
        match compacted {
            Ok(removed) if !removed.is_empty() => {
                tracing::debug!(shard = %self.id, segments = removed.len(), "state journal compacted")
            }
            Ok(_) => {}
            Err(e) => tracing::error!(shard = %self.id, error = %e, "journal compaction failed"),
        }
    }

    fn install_registry(&self, registry: Arc<TopicRegistry>) {
        let now = wall_ms() as u64;
        let (reports, failures) = self
            .state
            .borrow_mut()
            .install_registry(registry.clone(), now);
        // A deleted topic's committed offsets go with it (as in Kafka).
        self.state
            .borrow_mut()
            .groups
            .retain_topics(&|t| registry.topic(t).is_some());
        self.append_share_entries();
        for report in reports.iter().filter(|r| !r.truncated.is_empty()) {
            tracing::warn!(shard = %self.id, ?report, "partition recovered with a truncated tail");
        }
        for failure in failures {
            tracing::error!(shard = %self.id, error = %failure, "partition could not be opened");
        }
        // Waiters of partitions that are gone get an answer now.
        let live: Vec<TopicPartition> = self.state.borrow().partition_keys();
        let mut syncs = self.syncs.borrow_mut();
        let gone: Vec<TopicPartition> = syncs
            .keys()
            .filter(|k| !live.contains(k))
            .copied()
            .collect();
        for key in gone {
            if let Some(mut sync) = syncs.remove(&key) {
                for waiter in sync.waiters.drain() {
                    waiter.send(Err("the partition was deleted".into()));
                }
            }
        }
    }

    async fn produce(&self, op: ProduceOp) -> ShardReply {
        let applied = self.state.borrow_mut().produce(&op, wall_ms() as u64);
        // A write that failed poisoned the log: the fatal path, before anyone is answered.
        let poison = self.state.borrow().log_poison(&op.partition.key());
        if let Some(cause) = poison {
            fatal::exit(
                Some(self.id),
                Fatal::LogPoisoned,
                &format!("{}-{}: {cause}", op.partition.topic, op.partition.partition),
            );
        }
        let Some((key, target)) = applied.durable_target else {
            return ShardReply::Produce(applied.result);
        };
        self.ensure_flush(key);
        // acks=1 waits for the block write too: the tail is written behind, so an answer
        // before it would be lost to a process kill (Kafka's page cache keeps it). With the
        // engine's O_DSYNC writes that write is also the sync, so acks=1 costs what acks=all
        // does. acks=0 is never answered; its batch is covered by the flush just started.
        if op.acks == 0 {
            return ShardReply::Produce(applied.result);
        }
        match self.state.borrow().durability(&key) {
            Some((durable, _)) if durable >= target => return ShardReply::Produce(applied.result),
            Some((_, true)) | None => {
                return ShardReply::Produce(ProduceResult::error(
                    ResponseError::KafkaStorageError.code(),
                    "the partition log cannot be made durable",
                ))
            }
            Some(_) => {}
        }
        let (tx, rx) = oneshot();
        self.syncs
            .borrow_mut()
            .entry(key)
            .or_default()
            .waiters
            .park(target, tx);
        let timeout = Duration::from_millis(op.timeout_ms.max(1));
        let outcome = futures_lite::future::or(async { Some(rx.await) }, async {
            glommio::timer::sleep(timeout).await;
            None
        })
        .await;
        match outcome {
            Some(Some(Ok(()))) => ShardReply::Produce(applied.result),
            Some(Some(Err(cause))) => ShardReply::Produce(ProduceResult::error(
                ResponseError::KafkaStorageError.code(),
                cause,
            )),
            Some(None) => ShardReply::Produce(ProduceResult::error(
                ResponseError::KafkaStorageError.code(),
                "the flush was abandoned",
            )),
            None => ShardReply::Produce(ProduceResult::error(
                ResponseError::RequestTimedOut.code(),
                "the batch was appended but not made durable within the request timeout",
            )),
        }
    }

    /// Starts the flush loop of a partition unless one is running.
    pub fn ensure_flush(&self, key: TopicPartition) {
        {
            let mut syncs = self.syncs.borrow_mut();
            let sync = syncs.entry(key).or_default();
            if sync.flushing {
                return;
            }
            sync.flushing = true;
        }
        let ctx = self.clone();
        glommio::spawn_local(async move { ctx.flush_loop(key).await }).detach();
    }

    async fn flush_loop(&self, key: TopicPartition) {
        loop {
            let ticket = self.state.borrow_mut().begin_flush(&key);
            let Some(ticket) = ticket else { break };
            let started = Instant::now();
            let result = files::sync_ticket(&ticket).await;
            let micros = started.elapsed().as_micros() as u64;
            let failed = result.is_err();
            self.with_metrics(|m| {
                m.fsync.record(micros);
                if failed {
                    m.fsync_errors += 1;
                }
            });
            let outcome = self.state.borrow_mut().complete_flush(&key, ticket, result);
            match outcome {
                Some(Ok(durable_end)) => {
                    let released = self
                        .syncs
                        .borrow_mut()
                        .get_mut(&key)
                        .map(|s| s.waiters.release(durable_end))
                        .unwrap_or_default();
                    for waiter in released {
                        waiter.send(Ok(()));
                    }
                    self.notify_data(&key);
                }
                Some(Err(error)) => fatal::exit(
                    Some(self.id),
                    Fatal::LogPoisoned,
                    &format!("partition {key:?}: {error}"),
                ),
                None => break,
            }
        }
        if let Some(sync) = self.syncs.borrow_mut().get_mut(&key) {
            sync.flushing = false;
        }
    }

    fn notify_data(&self, key: &TopicPartition) {
        let woken: Vec<DataWaiter> = {
            let mut waiters = self.data_waiters.borrow_mut();
            let (hit, keep) = waiters.drain(..).partition(|w| w.keys.contains(key));
            *waiters = keep;
            hit
        };
        for waiter in woken {
            waiter.tx.send(());
        }
    }

    async fn wait_for_data(&self, op: WaitOp) -> ShardReply {
        if self
            .state
            .borrow()
            .has_data(&op.partitions, op.read_committed)
        {
            return ShardReply::Waited(true);
        }
        let remaining = op.deadline_ms - wall_ms();
        if remaining <= 0 {
            return ShardReply::Waited(false);
        }
        let id = self.next_waiter_id.get();
        self.next_waiter_id.set(id + 1);
        let (tx, rx) = oneshot();
        self.data_waiters.borrow_mut().push(DataWaiter {
            id,
            keys: op.partitions.iter().map(|(r, _)| r.key()).collect(),
            tx,
        });
        let arrived = futures_lite::future::or(async { rx.await.is_some() }, async {
            glommio::timer::sleep(Duration::from_millis(remaining as u64)).await;
            false
        })
        .await;
        self.data_waiters.borrow_mut().retain(|w| w.id != id);
        ShardReply::Waited(arrived)
    }

    async fn admin(&self, op: AdminOp) -> AdminReply {
        let Ok(_permit) = self.admin_lock.acquire_permit(1).await else {
            return fail_reply_for(&op, ResponseError::NotController.code());
        };
        let current = self.state.borrow().registry().clone();
        let mut plan = self
            .controller
            .borrow()
            .plan(&current, &op, &mut random_uuid);
        let Some(mut next) = plan.registry.take() else {
            self.controller.borrow_mut().commit(&plan);
            return plan.reply;
        };
        next.version = current.version + 1;
        let data_dir = self.data_dir.clone();
        let to_store = next.clone();
        let stored = glommio::executor()
            .spawn_blocking(move || to_store.store(&data_dir))
            .await;
        if let Err(e) = stored {
            tracing::error!(error = %e, "metadata could not be persisted; change refused");
            return fail_reply(
                plan.reply,
                ResponseError::KafkaStorageError.code(),
                &format!("metadata could not be persisted: {e}"),
            );
        }
        self.controller.borrow_mut().commit(&plan);
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

    /// Rolls and applies retention on every partition, and starts flushes where needed.
    pub fn housekeeping(&self) {
        let touched = self.state.borrow_mut().housekeeping(wall_ms() as u64);
        // A roll or retention step that failed poisoned its log: the fatal path.
        let poisoned = self.state.borrow().poisoned_log();
        if let Some((key, cause)) = poisoned {
            fatal::exit(
                Some(self.id),
                Fatal::LogPoisoned,
                &format!("{key:?}: {cause}"),
            );
        }
        for key in touched {
            self.ensure_flush(key);
        }
    }

    /// Publishes log sizes to the metrics.
    pub fn refresh_log_gauges(&self) {
        let gauges: Vec<LogGauge> = self
            .state
            .borrow()
            .partitions()
            .map(|p| LogGauge {
                topic: p.topic.clone(),
                partition: p.partition,
                size_bytes: p.log.size_bytes(),
                log_end_offset: p.log.log_end_offset(),
            })
            .collect();
        self.with_metrics(|m| m.logs = gauges);
    }

    /// Flushes every partition with unflushed writes and waits until all are durable.
    pub async fn flush_all(&self) {
        self.append_share_entries();
        let last = {
            let journal = self.journal.borrow();
            journal.needs_flush().then(|| journal.next_seq() - 1)
        };
        if let Some(seq) = last {
            if let Err(e) = self.wait_journal(seq).await {
                tracing::error!(shard = %self.id, error = %e, "state journal not flushed at shutdown");
            }
        }
        loop {
            let pending = self.state.borrow().unflushed();
            if pending.is_empty() {
                return;
            }
            for key in &pending {
                self.ensure_flush(*key);
            }
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn fail_reply_for(op: &AdminOp, code: i16) -> AdminReply {
    let empty = match op {
        AdminOp::CreateTopics { .. } => AdminReply::Created(Vec::new()),
        AdminOp::DeleteTopics { .. } => AdminReply::Deleted(Vec::new()),
        AdminOp::AlterConfigs { .. } => AdminReply::Altered(Vec::new()),
        AdminOp::AllocateProducerId => AdminReply::ProducerId(Err(code)),
        AdminOp::CreatePartitions { .. } => AdminReply::Grown(Vec::new()),
        AdminOp::CreateAcls(acls) => AdminReply::AclsCreated(vec![Ok(()); acls.len()]),
        AdminOp::DeleteAcls(filters) => {
            AdminReply::AclsDeleted(vec![Ok(Vec::new()); filters.len()])
        }
    };
    fail_reply(empty, code, "the metadata controller is shutting down")
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
                let Some(senders) = &ctx.senders else {
                    panic!("{shard} addressed on a broker of one shard");
                };
                let id = ctx.next_request_id.get();
                ctx.next_request_id.set(id + 1);
                ctx.pending.borrow_mut().insert(id, tx);
                let from = ctx.id.index();
                if senders
                    .send_to(shard.index(), MeshMsg::Request { from, id, op })
                    .await
                    .is_err()
                {
                    ctx.pending.borrow_mut().remove(&id);
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

/// The shard core's I/O on glommio: the mesh, timers, detached tasks, io_uring block writes,
/// the fatal path. (Not imported here: `Bus` has methods of the same names.)
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
        self.started.elapsed().as_micros() as u64
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
        // One O_DIRECT + O_DSYNC write of the tail's blocks (src/runtime/files.rs).
        files::flush_journal(ticket)
    }

    fn journal_poisoned(&self, detail: &str) -> ! {
        fatal::exit(Some(self.id), Fatal::JournalPoisoned, detail)
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
    use crate::group::ops::{GroupOp, GroupReply};
    use crate::group::CommitPartition;
    use crate::journal::JournalConfig;
    use crate::log::batch::BatchBuilder;
    use crate::ptxn::{TxnMarker, TxnOutcome};
    use crate::shard::ops::{FetchOp, FetchPartitionOp};
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
                            assert_eq!((p.error_code, p.verification_guard), (0, None), "{p:?}")
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
                let offsets = || GroupOp::Fetch {
                    group_id: "g".into(),
                    topics: Some(vec![("t".into(), vec![0])]),
                    member: None,
                    require_stable: true,
                };
                let committed = group(GroupOp::TxnCommit {
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
                })
                .await;
                assert!(matches!(committed, GroupReply::Committed(Ok(ref c)) if c == &vec![0]));
                let GroupReply::Fetched(Ok(f)) = group(offsets()).await else {
                    panic!()
                };
                assert_eq!((f[0].offset, f[0].error_code), (-1, 88));
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
                assert_eq!((f[0].offset, f[0].error_code), (6, 0));
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
