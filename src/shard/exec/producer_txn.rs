//! The producer-transaction coordinator (`producer_txn::coordinator`, pure) on its shard: runs a [`PtxnOp`] against the shard's coordinator, journals what it emitted and answers
//! once that is durable; arms the marker jobs whose Prepare* records are durable and sends
//! their markers ([`ShardOp::WriteTxnMarkers`] per participant shard, [`ShardOp::GroupTxnMarker`]
//! per group); a periodic tick aborts timed-out transactions, expires idle ids and retries
//! failed participants (the backoff is the coordinator's).
//!
//! Invariant: a marker job is armed only after the journal entry that created it is durable:
//! the jobs still unarmed right after an append (same synchronous section, no await between)
//! were created by entries at or below that append's sequence number.

use super::*;
use crate::producer_txn::coordinator::{MarkerResults, MarkerWork, TxnCoordinator};
use crate::shard::ops::{PtxnOp, PtxnReply};
use std::collections::BTreeMap;

/// Runs one op on the coordinator (synchronous).
fn run(c: &mut TxnCoordinator, op: PtxnOp, now_ms: i64) -> PtxnReply {
    match op {
        PtxnOp::Init(req) => PtxnReply::Init(c.init_producer_id(&req, now_ms)),
        PtxnOp::AddParticipants {
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            groups,
        } => PtxnReply::Done(c.add_participants(
            &transactional_id,
            producer_id,
            producer_epoch,
            &partitions,
            &groups,
            now_ms,
        )),
        PtxnOp::Verify {
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
        } => PtxnReply::Verified(c.verify_partitions(
            &transactional_id,
            producer_id,
            producer_epoch,
            &partitions,
        )),
        PtxnOp::End {
            transactional_id,
            producer_id,
            producer_epoch,
            outcome,
        } => PtxnReply::Done(c.end_txn(
            &transactional_id,
            producer_id,
            producer_epoch,
            outcome,
            now_ms,
        )),
        PtxnOp::Describe { transactional_ids } => PtxnReply::Described(
            transactional_ids
                .iter()
                .map(|id| c.get(id).cloned())
                .collect(),
        ),
        PtxnOp::List(filter) => {
            PtxnReply::Listed(c.list(&filter, now_ms).into_iter().cloned().collect())
        }
    }
}

/// The producer-transaction steps of a shard ([`ShardExec`] runs its ops; the runtime calls
/// [`ShardPtxn::ptxn_recover`] after a restart and [`ShardPtxn::ptxn_tick`] periodically).
#[allow(async_fn_in_trait)] // single-threaded executors: no `Send` bound is wanted
pub trait ShardPtxn: ShardExec {
    /// A coordinator op: answered once everything journalled so far is durable (so an answer
    /// never reports a state a crash could take back).
    async fn ptxn_op(&self, op: PtxnOp) -> ShardReply {
        let now = self.now_ms() as i64;
        let reply = run(&mut self.state.borrow_mut().ptxn, op, now);
        self.append_share_entries();
        let fresh = self.state.borrow().ptxn.unarmed();
        if let Err(e) = self.journal_all_durable().await {
            tracing::error!(shard = %self.id, error = %e, "producer transaction state not durable");
            return ShardReply::Failed(CallError::NotDurable(e));
        }
        self.arm_and_send(&fresh);
        ShardReply::ProducerTxn(reply)
    }

    /// Completes once every entry appended so far is durable.
    async fn journal_all_durable(&self) -> Result<(), String> {
        let next = self.journal.borrow().next_seq();
        if next == 0 {
            return Ok(());
        }
        self.wait_journal(next - 1).await
    }

    /// After a restart: the transactions found in PrepareCommit/PrepareAbort send their markers
    /// again.
    fn ptxn_recover(&self) {
        let ids = self.state.borrow_mut().ptxn.recovered(self.now_ms() as i64);
        for id in &ids {
            tracing::info!(shard = %self.id, transactional_id = %id, "completing a prepared producer transaction after restart");
        }
        self.send_due_markers();
    }

    /// Periodic: aborts transactions past their timeout (epoch bump), forgets idle ids, and
    /// sends markers that are due (retries).
    fn ptxn_tick(&self) {
        let now = self.now_ms() as i64;
        let (aborted, expired) = {
            let mut state = self.state.borrow_mut();
            (state.ptxn.abort_timed_out(now), state.ptxn.expire_ids(now))
        };
        for id in &aborted {
            tracing::info!(shard = %self.id, transactional_id = %id, "producer transaction timed out; aborting");
        }
        if !aborted.is_empty() || !expired.is_empty() {
            self.append_share_entries();
            let fresh = self.state.borrow().ptxn.unarmed();
            let ctx = self.clone();
            self.spawn(async move {
                if ctx.journal_all_durable().await.is_ok() {
                    ctx.arm_and_send(&fresh);
                }
            });
        }
        self.send_due_markers();
    }

    fn arm_and_send(&self, ids: &[String]) {
        {
            let mut state = self.state.borrow_mut();
            for id in ids {
                state.ptxn.arm(id);
            }
        }
        self.send_due_markers();
    }

    fn send_due_markers(&self) {
        let work = self
            .state
            .borrow_mut()
            .ptxn
            .take_marker_work(self.now_ms() as i64);
        for w in work {
            let ctx = self.clone();
            self.spawn(async move { ctx.send_markers(w).await });
        }
    }

    /// Sends one transaction's markers to its participants and reports what they answered.
    async fn send_markers(&self, w: MarkerWork) {
        let registry = self.registry();
        let mut results = MarkerResults::default();
        let mut by_shard: BTreeMap<ShardId, Vec<(PartitionRef, (String, i32))>> = BTreeMap::new();
        for (topic, partition) in &w.partitions {
            match registry.topic(topic) {
                Some(meta) if *partition < meta.partitions => {
                    let shard = partition_shard(topic, *partition, self.shard_count);
                    let r = PartitionRef {
                        topic: topic.clone(),
                        topic_id: meta.id,
                        partition: *partition,
                    };
                    by_shard
                        .entry(shard)
                        .or_default()
                        .push((r, (topic.clone(), *partition)));
                }
                // The partition is gone (its topic deleted): nothing to mark.
                _ => results.partitions_done.push((topic.clone(), *partition)),
            }
        }
        let marker = w.marker;
        let partition_calls: Vec<_> = by_shard
            .into_iter()
            .map(|(shard, refs)| {
                let ctx = self.clone();
                async move {
                    let op = ShardOp::WriteTxnMarkers {
                        marker,
                        partitions: refs.iter().map(|(r, _)| r.clone()).collect(),
                    };
                    (refs, ctx.call(shard, op).await)
                }
            })
            .collect();
        let group_calls: Vec<_> = w
            .groups
            .iter()
            .map(|group| {
                let ctx = self.clone();
                let group = group.clone();
                async move {
                    let shard = group_shard(&group, ctx.shard_count);
                    let op = ShardOp::GroupTxnMarker {
                        marker,
                        group_id: group.clone(),
                    };
                    (group, ctx.call(shard, op).await)
                }
            })
            .collect();
        for (refs, reply) in join_all(partition_calls).await {
            match reply {
                ShardReply::TxnMarkersWritten(answers) if answers.len() == refs.len() => {
                    for ((_, key), answer) in refs.into_iter().zip(answers) {
                        match answer {
                            Ok(()) => results.partitions_done.push(key),
                            Err(e) => {
                                tracing::debug!(shard = %self.id, txn = %w.transactional_id, partition = ?key, error = %e, "marker not written; retrying")
                            }
                        }
                    }
                }
                other => {
                    tracing::warn!(shard = %self.id, txn = %w.transactional_id, reply = ?other, "marker op failed; retrying")
                }
            }
        }
        for (group, reply) in join_all(group_calls).await {
            match reply {
                ShardReply::GroupTxnMarkerWritten(Ok(())) => results.groups_done.push(group),
                other => {
                    tracing::debug!(shard = %self.id, txn = %w.transactional_id, group = %group, reply = ?other, "group marker not written; retrying")
                }
            }
        }
        let complete = self.state.borrow_mut().ptxn.markers_written(
            &w.transactional_id,
            marker,
            &results,
            self.now_ms() as i64,
        );
        if complete {
            // Nobody waits for the Complete* record: lost in a crash, recovery sends the
            // (idempotent) markers again.
            self.append_share_entries();
            if self.journal.borrow().needs_flush() {
                self.ensure_journal_flush();
            }
        }
    }
}

impl<T: ShardExec> ShardPtxn for T {}
