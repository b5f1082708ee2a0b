//! Op execution on a shard: what a [`ShardOp`] does on the shard that owns its state,
//! written once in the runtime-free core, generic over [`ShardIo`] ([`ShardExec`], implemented
//! for every `ShardIo` that derefs to its [`ShardCore`]). The runtime (`src/runtime/`) delivers
//! ops from the mesh and from local calls to [`ShardExec::execute`] and runs the periodic steps
//! ([`ShardExec::housekeeping`], [`ShardExec::share_housekeeping`], the producer-transaction
//! tick); it supplies the I/O: the mesh, timers, the storage engine's block writes and
//! read-ahead, the fatal path, and the metadata controller (`ShardIo::admin`).
//!
//! What runs here: produce (append, then the partition log's group commit and the durability
//! wait), fetch / list offsets / long-poll data waits, share groups (heartbeat, sessions,
//! ShareFetch, acknowledgements, member release, DLQ copies, housekeeping), consumer-group ops,
//! share transactions (`shard::share_txn`), producer transactions (`exec::producer_txn`: the coordinator's
//! ops and marker fan-out, WriteTxnMarkers, group markers), DeleteRecords, registry installs,
//! and the journal's snapshots and compaction.
//!
//! Invariants:
//! - `state` is borrowed only in synchronous sections; no `RefCell` borrow lives across an
//!   `.await`, and no invariant is assumed across one: after every await, what was read before is
//!   read again.
//! - Every [`ShardOp`] runs in its own detached task, locally or on the owning shard, so it
//!   completes even if the requesting connection goes away (an admin change is always installed
//!   on every shard once persisted).
//! - At most one flush per partition is in flight; writes that arrive meanwhile are covered by
//!   the next one (group commit). A failed flush or write poisons the partition's log, and a
//!   failed journal append or flush poisons the journal: both take the I/O's fatal path
//!   ([`ShardIo::log_poisoned`], [`ShardIo::journal_poisoned`]) before anyone waiting is
//!   answered.

use super::sync::{oneshot, OneshotReceiver, OneshotSender};
use super::{ShardCore, ShardIo};
use crate::constants::{
    DELETE_RECORDS_DURABLE_POLL_MS, FLUSH_ALL_POLL_MS, SHARE_DLQ_PRODUCE_TIMEOUT_MS,
};
use crate::constants::{JOURNAL_SNAPSHOT_EVERY_ENTRIES, READ_AHEAD_ROUNDS_MAX};
use crate::log::group_commit::CommitWaiters;
use crate::metrics::LogGauge;
use crate::model::{group_shard, partition_shard};
use crate::model::{ShardId, TopicPartition};
use crate::shard::join::join_all;
use crate::shard::ops::{
    CallError, DeleteRecordsError, DeletedRecords, MarkerError, PartitionRef, ProduceError,
    ProduceOp, ProduceResult, ShardOp, ShardReply, ShareAckResult, ShareFetchOp, ShareFetchReply,
    ShareFetchedPartition, ShareGroupsListed, ShareProbedPartition, WaitOp,
};
use crate::shard::read_ahead::ReadAheadPlan;
use crate::shard::registry::TopicRegistry;
use crate::shard::share_session::SessionKey;
use crate::shard::state::ShardState;
use crate::share::fetch::min_bytes_satisfied;
use std::ops::Deref;
use std::sync::Arc;

mod producer_txn;

pub use producer_txn::ShardPtxn;

/// The group commit of one partition log: at most one flush in flight, and who waits for
/// which offset to be durable.
#[derive(Default)]
pub(crate) struct PartitionSync {
    flushing: bool,
    waiters: CommitWaiters<OneshotSender<Result<(), String>>>,
    /// Write-behinds handed out, in file order (each answers when it completed): a ticket
    /// begun while some are in flight covers only what lies below the first of them, so the
    /// flush loop waits for that one when there is nothing else to flush.
    write_behinds: Vec<OneshotReceiver<()>>,
}

/// Drops the write-behinds that completed from `pending` (in the order they were handed out)
/// and takes the first one still in flight.
pub(crate) fn first_in_flight(
    pending: &mut Vec<OneshotReceiver<()>>,
) -> Option<OneshotReceiver<()>> {
    pending.retain(|done| !done.is_done());
    (!pending.is_empty()).then(|| pending.remove(0))
}

/// A long-poll waiting for data on some partitions.
pub(crate) struct DataWaiter {
    id: u64,
    keys: Vec<TopicPartition>,
    tx: OneshotSender<()>,
}

/// A shard's op execution and periodic steps, for every [`ShardIo`] that derefs to its core
/// (`self.state`, `self.journal`, `self.id`, … are the core's).
#[allow(async_fn_in_trait)] // single-threaded executors: no `Send` bound is wanted
pub trait ShardExec:
    ShardIo + Deref<Target = ShardCore<<Self as ShardIo>::Storage, <Self as ShardIo>::Dir>>
{
    /// Runs an operation on this shard.
    async fn execute(&self, op: ShardOp) -> ShardReply {
        match op {
            ShardOp::Produce(op) => self.produce(op).await,
            ShardOp::Fetch(op) => {
                let ahead = self.state.borrow().fetch_read_ahead(&op);
                self.read_ahead_rounds(ahead, |s| s.fetch_read_ahead(&op))
                    .await;
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
                    state.share.groups.heartbeat(&hb, &registry, self.now_ms())
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
                let now = self.now_ms();
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
                // What the MinBytes probe and the acquisition read, read ahead: from each share
                // partition's lowest available offset, after the releases above.
                let ahead = self
                    .state
                    .borrow()
                    .share_fetch_read_ahead(&op, self.now_ms());
                self.read_ahead_rounds(ahead, |s| s.share_fetch_read_ahead(&op, self.now_ms()))
                    .await;
                if op.min_bytes > 0 {
                    // MinBytes: measure first; below it, acquire nothing (the long poll waits).
                    let probed = self.state.borrow_mut().share_probe(
                        &op.group_id,
                        &op.partitions,
                        op.partition_max_bytes,
                        self.now_ms(),
                    );
                    // A new share partition's start offset is journalled; nothing waits for it.
                    self.append_share_entries();
                    if let Some(unmet) = min_bytes_unmet(&probed, &op) {
                        let (acknowledged, durable_at) = match acked {
                            // The caller waits (`JournalDurable`); the flush has started.
                            Some((results, Some(seq))) if !op.wait_durable => (results, Some(seq)),
                            acked => (self.acknowledged_durable(acked).await, None),
                        };
                        return ShardReply::ShareFetched(ShareFetchReply {
                            acknowledged,
                            durable_at,
                            partitions: probed.iter().map(unmet_partition).collect(),
                            unmet: Some(unmet),
                        });
                    }
                }
                // No await since the read-ahead: the probe and the acquisition read what it
                // brought into memory.
                let fetched = self.state.borrow_mut().share_fetch(&op, self.now_ms());
                // A new share partition's start offset is journalled; nothing waits for it.
                self.append_share_entries();
                // What the member's next fetch will read, read ahead (while the consumer
                // processes these records), so that it finds it in memory: once this request's
                // acknowledgements are durable, so that the read does not share the disk with
                // the journal flush the answer waits for.
                let next = self
                    .state
                    .borrow()
                    .share_fetch_read_ahead(&op, self.now_ms());
                if !next.parts.is_empty() {
                    let ctx = self.clone();
                    let flushing = acked.as_ref().and_then(|(_, seq)| *seq);
                    let op = op.clone();
                    self.spawn(async move {
                        if let Some(seq) = flushing {
                            // A failed flush poisons the journal; the read-ahead is moot then.
                            let _ = ctx.wait_journal(seq).await;
                        }
                        ctx.read_ahead_rounds(next, |s| s.share_fetch_read_ahead(&op, ctx.now_ms()))
                            .await
                    });
                }
                let (acknowledged, durable_at) = match acked {
                    // The caller waits (`JournalDurable`); the flush has started.
                    Some((results, Some(seq))) if !op.wait_durable => (results, Some(seq)),
                    acked => (self.acknowledged_durable(acked).await, None),
                };
                ShardReply::ShareFetched(ShareFetchReply {
                    acknowledged,
                    durable_at,
                    partitions: fetched,
                    unmet: None,
                })
            }
            ShardOp::JournalDurable { seq } => {
                ShardReply::JournalDurable(self.wait_journal(seq).await)
            }
            ShardOp::ShareAcknowledge(op) => {
                let results = self
                    .state
                    .borrow_mut()
                    .share_acknowledge(&op, self.now_ms());
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
            ShardOp::Txn(op) => ShardReply::Txn(crate::shard::share_txn::execute(self, op).await),
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
                    self.now_ms(),
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
                        ShardReply::GroupTxnMarkerWritten(Err(MarkerError::NotDurable(
                            e.to_string(),
                        )))
                    }
                }
            }
        }
    }

    /// WriteTxnMarkers on this shard: ends the transaction in each partition (a control batch
    /// when [`crate::producer_txn::partition::TxnPartition::marker_action`] says so, and the share
    /// records the transaction LOCKED there, through the share side's hook), then answers once
    /// every marker and the share state it changed are durable. One result per partition.
    async fn write_txn_markers(
        &self,
        marker: crate::producer_txn::TxnMarker,
        partitions: &[PartitionRef],
    ) -> Vec<Result<(), MarkerError>> {
        let now = self.now_ms();
        let mut targets: Vec<Option<(TopicPartition, u64)>> = Vec::with_capacity(partitions.len());
        let mut results: Vec<Result<(), MarkerError>> = {
            let mut state = self.state.borrow_mut();
            partitions
                .iter()
                .map(|r| match state.write_txn_marker(&marker, r, now) {
                    Ok(target) => {
                        state.ptxn_share_resolve(&marker, r);
                        targets.push(target);
                        Ok(())
                    }
                    Err(e) => {
                        targets.push(None);
                        Err(e)
                    }
                })
                .collect()
        };
        for r in partitions {
            let poison = self.state.borrow().log_poison(&r.key());
            if let Some(cause) = poison {
                self.log_poisoned(&format!("{}-{}: {cause}", r.topic, r.partition));
            }
        }
        let journal = match self.append_share_entries() {
            Some(seq) => self.wait_journal(seq).await,
            None => Ok(()),
        };
        if let Err(e) = journal {
            for result in results.iter_mut().filter(|r| r.is_ok()) {
                *result = Err(MarkerError::NotDurable(format!("the journal failed: {e}")));
            }
        }
        for (result, target) in results.iter_mut().zip(targets) {
            let Some((key, end)) = target.filter(|_| result.is_ok()) else {
                continue;
            };
            self.ensure_flush(key);
            if let Err(e) = self
                .wait_durable(key, end, crate::constants::PRODUCE_TIMEOUT_MS_MAX)
                .await
            {
                tracing::warn!(shard = %self.id, partition = ?key, error = %e, "transaction marker not durable");
                *result = Err(e);
            }
        }
        results
    }

    /// Completes once partition `key` is durable up to `target` (`NotDurable` if its log
    /// cannot be made durable, `TimedOut` if `timeout_ms` passes). The caller started a flush.
    async fn wait_durable(
        &self,
        key: TopicPartition,
        target: u64,
        timeout_ms: u64,
    ) -> Result<(), MarkerError> {
        let storage_error = |cause: &str| MarkerError::NotDurable(cause.to_string());
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
        let outcome = futures_lite::future::or(async { Some(rx.await) }, async {
            self.sleep_ms(timeout_ms.max(1)).await;
            None
        })
        .await;
        match outcome {
            Some(Some(Ok(()))) => Ok(()),
            Some(Some(Err(cause))) => Err(storage_error(&cause)),
            Some(None) => Err(storage_error("the flush was abandoned")),
            None => Err(MarkerError::TimedOut),
        }
    }

    /// A consumer-group op (`crate::group::ops`): runs it, then answers once the journal
    /// entries it produced (committed offsets, tombstones) are durable.
    async fn group_op(&self, op: crate::group::ops::GroupOp) -> ShardReply {
        let reply = {
            let mut state = self.state.borrow_mut();
            crate::group::ops::execute(&mut state.groups, op, self.now_ms())
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
    /// and the share state that followed it are durable ([`DeleteRecordsError::NotDurable`] if
    /// a log or the journal fails, [`DeleteRecordsError::TimedOut`] past `timeout_ms`).
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
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(DeleteRecordsError::NotDurable);
            }
        }
        let deadline_us = self.monotonic_us() + timeout_ms.max(1) * 1_000;
        for ((r, _), result) in partitions.iter().zip(results.iter_mut()) {
            let Ok(low_watermark) = *result else {
                continue;
            };
            let key = r.key();
            loop {
                match self.state.borrow().log_start_durable(&key, low_watermark) {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => {
                        *result = Err(e);
                        break;
                    }
                }
                if self.monotonic_us() >= deadline_us {
                    *result = Err(DeleteRecordsError::TimedOut);
                    break;
                }
                // The flush loop writes and syncs the checkpoint slot of the new start; a flush
                // already in flight does not cover it, so look again after it.
                self.ensure_flush(key);
                self.sleep_ms(DELETE_RECORDS_DURABLE_POLL_MS).await;
            }
        }
        results
    }

    /// The first steps after a restart (the runtime's and the simulation's): the entries
    /// recovery queued (share transactions found ONGOING are aborted) go to the journal; share
    /// transactions holding LOCKED records here are resolved with their coordinators; producer
    /// transactions found prepared send their markers again.
    fn after_restart(&self) {
        self.share_housekeeping();
        self.resolve_locked_transactions();
        self.ptxn_recover();
    }

    /// After a restart: resolves the transactions that hold LOCKED records here with their
    /// coordinators (`shard::share_txn::resolve_locked_transactions`).
    fn resolve_locked_transactions(&self) {
        crate::shard::share_txn::resolve_locked_transactions(self)
    }

    /// Appends the share entries an operation produced and waits until they are durable;
    /// results that succeeded become KAFKA_STORAGE_ERROR if they cannot be made durable.
    async fn share_results_durable(&self, mut results: Vec<ShareAckResult>) -> Vec<ShareAckResult> {
        let durable = match self.append_share_entries() {
            Some(seq) => self.wait_journal(seq).await,
            None => Ok(()),
        };
        ShareAckResult::durable(&mut results, durable);
        results
    }

    /// A ShareFetch's acknowledgements on this shard, applied before it acquires or measures
    /// (`None`: it carries none): their results and the journal entry that makes them durable.
    async fn acknowledge_first(
        &self,
        op: Option<&crate::shard::ops::ShareAckOp>,
    ) -> Option<(Vec<ShareAckResult>, Option<u64>)> {
        let op = op?;
        let results = self.state.borrow_mut().share_acknowledge(op, self.now_ms());
        // DLQ copies are durable before the ARCHIVED state is journalled.
        self.copy_to_dlq().await;
        let seq = self.append_share_entries();
        if seq.is_some() {
            // The flush starts now and overlaps the read and the acquisition that follow.
            self.ensure_journal_flush();
        }
        Some((results, seq))
    }

    /// The results of `acknowledge_first` once durable (KAFKA_STORAGE_ERROR
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
        ShareAckResult::durable(&mut results, durable);
        results
    }

    /// Produces the DLQ copies the share state owes (KIP-1191, `shard::share_dlq`) with
    /// acks=all, each to its DLQ partition's shard, and waits for them. A copy that cannot be
    /// written is logged and dropped: the records stay ARCHIVED (Kafka's "Failed to write to
    /// DLQ, proceeding to ARCHIVED regardless").
    async fn copy_to_dlq(&self) {
        // Taken now (this task owns them), their records read ahead, then read and produced.
        let copies = self.state.borrow_mut().take_dlq_copies();
        if copies.is_empty() {
            return;
        }
        let ahead = self.state.borrow().dlq_read_ahead(&copies);
        self.read_ahead_rounds(ahead, |s| s.dlq_read_ahead(&copies))
            .await;
        let (produces, failures) = self
            .state
            .borrow_mut()
            .dlq_produces(copies, self.now_ms() as i64);
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
                ShardReply::Produce(ProduceResult { error: None, .. }) => {}
                ShardReply::Produce(r) => tracing::warn!(
                    shard = %self.id, group = %group, topic = %target.topic, partition = target.partition,
                    records = count, cause = ?r.error, error = ?r.error_message,
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
            self.spawn(async move {
                ctx.call(ShardId(shard as u16), op).await;
            });
        }
    }

    /// Reads `plan` ahead through the I/O and hands the bytes to the logs, then plans again
    /// (`replan`) and reads what is still missing, at most [`READ_AHEAD_ROUNDS_MAX`] reads
    /// (module docs of `shard::read_ahead`). Completes in the synchronous section of the last
    /// fill: the caller's op reads before anything else runs. A plan with nothing to read
    /// completes at once (no await).
    async fn read_ahead_rounds(
        &self,
        plan: ReadAheadPlan,
        replan: impl Fn(&ShardState<<Self as ShardIo>::Storage>) -> ReadAheadPlan,
    ) {
        let mut plan = plan;
        for _ in 0..READ_AHEAD_ROUNDS_MAX {
            if plan.parts.is_empty() {
                break;
            }
            let reads = self.read_ahead(plan.reads()).await;
            let mut state = self.state.borrow_mut();
            state.fill_read_cache(&plan, reads);
            plan = replan(&state);
        }
        // The op's logs become the most recently used (nothing more is read for them).
        let none = vec![None; plan.parts.len()];
        self.state.borrow_mut().fill_read_cache(&plan, none);
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
    fn share_housekeeping(&self) {
        let now = self.now_ms();
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
        crate::shard::share_txn::expire(self);
        if !self.state.borrow().share.dlq.is_empty() {
            // Records archived at the delivery limit by lock expiry: their DLQ copies first,
            // then the journal (module docs of `shard::share_dlq`).
            let ctx = self.clone();
            self.spawn(async move {
                ctx.copy_to_dlq().await;
                ctx.append_share_entries();
            });
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
            self.write_journal_snapshot();
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

    /// Writes a snapshot of the shard's durable state into its journal (share state, committed
    /// offsets, producer transactions) and starts its flush; housekeeping calls it every
    /// `JOURNAL_SNAPSHOT_EVERY_ENTRIES` entries, with the journal flushed and the state's
    /// pending entries appended (the simulations call it so more often).
    fn write_journal_snapshot(&self) {
        let snapshot = {
            let mut state = self.state.borrow_mut();
            let mut snapshot = state.share.durable_snapshot(self.now_ms());
            snapshot.group_offsets = state.groups.durable_offsets();
            snapshot.producer_transactions = state.ptxn.durable_records();
            snapshot
        };
        let written = self.journal.borrow_mut().write_shard_snapshot(&snapshot);
        match written {
            Ok(_) => self.ensure_journal_flush(),
            Err(e) => self.journal_poisoned(&format!("snapshot: {e}")),
        }
    }

    fn install_registry(&self, registry: Arc<TopicRegistry>) {
        let now = self.now_ms();
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
        let applied = self.state.borrow_mut().produce(&op, self.now_ms());
        // A write that failed poisoned the log: the fatal path, before anyone is answered.
        let poison = self.state.borrow().log_poison(&op.partition.key());
        if let Some(cause) = poison {
            self.log_poisoned(&format!(
                "{}-{}: {cause}",
                op.partition.topic, op.partition.partition
            ));
        }
        let Some((key, target)) = applied.durable_target else {
            return ShardReply::Produce(applied.result);
        };
        self.start_write_behind(key);
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
                    ProduceError::NotDurable,
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
        let timeout_ms = op.timeout_ms;
        let outcome = futures_lite::future::or(async { Some(rx.await) }, async {
            self.sleep_ms(timeout_ms.max(1)).await;
            None
        })
        .await;
        match outcome {
            Some(Some(Ok(()))) => ShardReply::Produce(applied.result),
            Some(Some(Err(cause))) => {
                ShardReply::Produce(ProduceResult::error(ProduceError::NotDurable, cause))
            }
            Some(None) => ShardReply::Produce(ProduceResult::error(
                ProduceError::NotDurable,
                "the flush was abandoned",
            )),
            None => ShardReply::Produce(ProduceResult::error(
                ProduceError::TimedOut,
                "the batch was appended but not made durable within the request timeout",
            )),
        }
    }

    /// Writes the full chunks of a partition's log tail now, if it has any it may write ahead
    /// of the next flush ([`crate::log::WriteBehind`]): the disk works while appends go on.
    fn start_write_behind(&self, key: TopicPartition) {
        if !self.writes_behind() {
            return;
        }
        let Some(write) = self.state.borrow_mut().take_write_behind(&key) else {
            return;
        };
        let (tx, rx) = oneshot();
        let mut syncs = self.syncs.borrow_mut();
        let pending = &mut syncs.entry(key).or_default().write_behinds;
        // Completed ones go here too: a flush loop that always finds something to flush
        // never prunes them.
        pending.retain(|done| !done.is_done());
        pending.push(rx);
        drop(syncs);
        let ctx = self.clone();
        // Started here: its writes are queued (and the runtime's doorbell rung) before this
        // request's task goes on, not after every other task ready now.
        let task = super::join::started(async move {
            let result = ctx.write_behind(&write).await;
            let outcome = ctx
                .state
                .borrow_mut()
                .complete_write_behind(&key, write, result);
            if let Some(Err(error)) = outcome {
                ctx.log_poisoned(&format!("partition {key:?}: {error}"));
            }
            tx.send(());
        });
        if let Some(task) = task {
            self.spawn(task);
        }
    }

    /// Starts the flush loop of a partition unless one is running.
    fn ensure_flush(&self, key: TopicPartition) {
        {
            let mut syncs = self.syncs.borrow_mut();
            let sync = syncs.entry(key).or_default();
            if sync.flushing {
                return;
            }
            sync.flushing = true;
        }
        let ctx = self.clone();
        self.spawn(async move { ctx.flush_loop(key).await });
    }

    async fn flush_loop(&self, key: TopicPartition) {
        loop {
            let ticket = self.state.borrow_mut().begin_flush(&key);
            let Some(ticket) = ticket else {
                // Amid write-behinds a ticket covers only the batches below the first one in
                // flight: none new yet, so wait for it and ask again.
                let first = self
                    .syncs
                    .borrow_mut()
                    .get_mut(&key)
                    .and_then(|s| first_in_flight(&mut s.write_behinds));
                match first {
                    Some(done) => {
                        done.await;
                        continue;
                    }
                    None => break,
                }
            };
            let started = self.monotonic_us();
            let result = self.flush_log(&ticket).await;
            let micros = self.monotonic_us().saturating_sub(started);
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
                    // Let the tasks just released (and whatever else is ready) append before the
                    // next flush is cut: taken at once, it would hold only the few bytes that
                    // came in meanwhile, and the engine would spend a whole durable write on
                    // them while the released appenders' batches wait for the flush after it.
                    futures_lite::future::yield_now().await;
                }
                Some(Err(error)) => self.log_poisoned(&format!("partition {key:?}: {error}")),
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
        let remaining = op.deadline_ms - self.now_ms() as i64;
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
            self.sleep_ms(remaining as u64).await;
            false
        })
        .await;
        self.data_waiters.borrow_mut().retain(|w| w.id != id);
        ShardReply::Waited(arrived)
    }

    /// Rolls and applies retention on every partition, and starts flushes where needed.
    fn housekeeping(&self) {
        let touched = self.state.borrow_mut().housekeeping(self.now_ms());
        // A roll or retention step that failed poisoned its log: the fatal path.
        let poisoned = self.state.borrow().poisoned_log();
        if let Some((key, cause)) = poisoned {
            self.log_poisoned(&format!("{key:?}: {cause}"));
        }
        for key in touched {
            self.ensure_flush(key);
        }
    }

    /// Publishes log sizes to the metrics.
    fn refresh_log_gauges(&self) {
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

    /// At shutdown: flushes every partition with unflushed writes, waits until all are durable,
    /// then closes the partitions (a producer snapshot at each log end, each log closed). An
    /// error names the partitions whose log failed to close.
    async fn shut_down(&self) -> Result<(), String> {
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
                break;
            }
            for key in &pending {
                self.ensure_flush(*key);
            }
            self.sleep_ms(FLUSH_ALL_POLL_MS).await;
        }
        let failures = self.state.borrow_mut().close_partitions();
        if failures.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = failures.iter().map(|(p, e)| format!("{p}: {e}")).collect();
        Err(format!("partition logs not closed: {}", list.join("; ")))
    }
}

impl<T> ShardExec for T where
    T: ShardIo + Deref<Target = ShardCore<<T as ShardIo>::Storage, <T as ShardIo>::Dir>>
{
}

/// The bytes the probed partitions hold, if they do not reach the op's MinBytes (`None`: they
/// do, or one of them is in error, which a ShareFetch answers at once).
fn min_bytes_unmet(probed: &[ShareProbedPartition], op: &ShareFetchOp) -> Option<usize> {
    if probed.iter().any(|p| p.error.is_some()) {
        return None;
    }
    let available = probed.iter().map(|p| p.available_bytes);
    if min_bytes_satisfied(available.clone(), op.partition_max_bytes, op.min_bytes) {
        return None;
    }
    Some(
        available
            .map(|bytes| bytes.min(op.partition_max_bytes))
            .fold(0usize, usize::saturating_add),
    )
}

/// A partition of a ShareFetch that acquired nothing as MinBytes was not reached.
fn unmet_partition(p: &ShareProbedPartition) -> ShareFetchedPartition {
    ShareFetchedPartition {
        partition: p.partition,
        error: None,
        error_message: None,
        records: bytes::Bytes::new(),
        acquired: Vec::new(),
        wait_offset: p.wait_offset,
        created: false,
    }
}
