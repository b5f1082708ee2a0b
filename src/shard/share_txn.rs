//! Share transactions on the shard core, every step that waits or talks
//! to another shard; the synchronous steps they string together are `shard::share_txn_state`.
//!
//! Coordinator (the group's shard), [`execute`] of:
//! - `Begin`: answered once the ONGOING record is durable.
//! - `Acknowledge`: one call from the connection's shard. Registers the partitions (the
//!   transaction must be ONGOING, the member known; each partition counts as an
//!   acknowledgement in flight), fans the locks out to the partitions' shards in parallel
//!   (its own partitions are locked in place), then completes the acknowledgements and fires
//!   the notification a prepare waits on. A partition whose locks were taken after the
//!   transaction ended is told to abort at once.
//! - `Prepare`: ONGOING → PREPARE (new acknowledgements are refused), waits — on the
//!   notification, up to `TXN_PREPARE_WAIT_MS` — until no acknowledgement is in flight, has
//!   every participant shard make its LOCKED ranges durable (its own go into its journal just
//!   before the PREPARE record: one flush covers both), then makes the PREPARE record durable.
//! - `Commit` / `Abort`: the decision record is durable before the answer; then the
//!   participants are told (in the background) and apply it, persisting lazily.
//! - `List`, `State`; transaction timeouts noticed by any operation or by [`expire`] are
//!   aborted and their participants told.
//!
//! Participants (the partitions' shards): `Lock`, `PersistLocks` (durable before the answer),
//! `Apply`, `ProducerLock` (a producer transaction's locks, durable before the answer), and
//! [`resolve_locked_transactions`] after a restart: every transaction still holding locks here
//! is looked up on its coordinator; COMMITTED and ABORTED (or unknown) are applied, PREPARE
//! keeps its locks.

use super::call::Txn;
use super::{append_entries, persist_entries, ShardIo};
use crate::constants::TXN_PREPARE_WAIT_MS;
use crate::model::{group_shard, partition_shard, ShardId, TopicPartition};
use crate::shard::join::join_all;
use crate::shard::ops::{
    PartitionRef, ShareAckResult, SharePartitionError, ShareTxnError, TxnAckError, TxnAnswer,
    TxnOp, TxnReplyMsg,
};
use crate::share::AckBatch;
use crate::share_txn::{TxnError, TxnRecord, TxnState};
use std::collections::{BTreeMap, BTreeSet};

/// Runs one share-transaction op on this shard (coordinator or participant).
pub async fn execute<I: ShardIo>(io: &I, op: TxnOp) -> TxnReplyMsg {
    let core = io.core();
    let now = io.now_ms();
    let config = |group: &str| core.registry().group_config(group).txn;
    let reply = match op {
        TxnOp::Begin {
            group_id,
            transaction_id,
            timeout_ms,
        } => {
            // The config is read before the state is borrowed mutably (the registry lives in
            // the same cell).
            let config = config(&group_id);
            let answer = core.state.borrow_mut().share.txn_begin(
                &group_id,
                &transaction_id,
                timeout_ms,
                config,
                now,
            );
            // Answered once durable: the journal's unflushed tail does not survive a process
            // kill, and a begun transaction the coordinator forgets could not be aborted (and
            // listed ABORTED) by the recovery after a restart.
            match persist_entries(io).await {
                Ok(()) => TxnReplyMsg::Answer(answer),
                Err(cause) => {
                    tracing::error!(shard = %core.id, cause = %cause, "share transaction begin not durable");
                    TxnReplyMsg::Answer(TxnAnswer::error(
                        ShareTxnError::NotDurable,
                        "the transaction could not be made durable",
                        answer.state,
                    ))
                }
            }
        }
        TxnOp::Acknowledge {
            group_id,
            member_id,
            transaction_id,
            partitions,
        } => TxnReplyMsg::Acknowledged(
            acknowledge(io, &group_id, &member_id, &transaction_id, partitions).await,
        ),
        TxnOp::Prepare {
            group_id,
            transaction_id,
        } => TxnReplyMsg::Answer(prepare(io, &group_id, &transaction_id).await),
        TxnOp::Commit {
            group_id,
            transaction_id,
        } => TxnReplyMsg::Answer(decide(io, &group_id, &transaction_id, true).await),
        TxnOp::Abort {
            group_id,
            transaction_id,
        } => TxnReplyMsg::Answer(decide(io, &group_id, &transaction_id, false).await),
        TxnOp::List { group_id, states } => {
            let config = config(&group_id);
            let listed = core
                .state
                .borrow_mut()
                .share
                .txn_list(&group_id, &states, config, now);
            append_entries(io);
            TxnReplyMsg::Listed(listed)
        }
        TxnOp::State {
            group_id,
            transaction_id,
        } => {
            let state = core
                .state
                .borrow()
                .share
                .txn_get(&group_id, &transaction_id)
                .map_or(TxnState::Empty, |r| r.state);
            TxnReplyMsg::Answer(TxnAnswer {
                error: None,
                error_message: None,
                state,
                timeout_ms: 0,
            })
        }
        TxnOp::Lock {
            group_id,
            member_id,
            transaction_id,
            partitions,
        } => TxnReplyMsg::Locked(lock(
            io,
            &group_id,
            &member_id,
            &transaction_id,
            &partitions,
        )),
        TxnOp::PersistLocks {
            group_id,
            transaction_id,
        } => {
            core.state
                .borrow_mut()
                .share
                .txn_persist_locks(&group_id, &transaction_id);
            TxnReplyMsg::Done(persist_entries(io).await)
        }
        TxnOp::ProducerLock {
            group_id,
            member_id,
            owner,
            partitions,
        } => {
            let mut locked =
                core.state
                    .borrow_mut()
                    .ptxn_share_lock(&group_id, &member_id, owner, &partitions);
            // The client may commit as soon as it has the answer: the locks must be durable by
            // then, or a crash would lose them and the commit marker would find the records
            // AVAILABLE (redelivered after the output was committed).
            if let Err(e) = persist_entries(io).await {
                for result in locked.iter_mut().filter(|r| r.is_ok()) {
                    *result = Err(ShareAckResult::error(
                        SharePartitionError::NotDurable,
                        e.clone(),
                    ));
                }
            }
            TxnReplyMsg::Locked(locked)
        }
        TxnOp::Apply {
            group_id,
            transaction_id,
            commit,
        } => {
            core.state
                .borrow_mut()
                .txn_apply(&group_id, &transaction_id, commit);
            append_entries(io);
            TxnReplyMsg::Done(Ok(()))
        }
    };
    let timed_out = core.state.borrow_mut().share.take_timed_out();
    abort_timed_out(io, timed_out);
    record_metrics(io);
    reply
}

/// Participant: ACQUIRED → LOCKED (each partition all-or-nothing); the locks are journalled
/// with the next flush (they become durable in phase 1).
fn lock<I: ShardIo>(
    io: &I,
    group_id: &str,
    member_id: &str,
    id: &str,
    partitions: &[(PartitionRef, Vec<AckBatch>)],
) -> Vec<Result<u64, ShareAckResult>> {
    let locked = io
        .core()
        .state
        .borrow_mut()
        .txn_lock(group_id, member_id, id, partitions);
    append_entries(io);
    locked
}

/// Coordinator: a transactional acknowledgement, registered here, locked on the partitions'
/// shards (in parallel; this shard's own in place), completed here. One result per partition.
async fn acknowledge<I: ShardIo>(
    io: &I,
    group_id: &str,
    member_id: &str,
    id: &str,
    partitions: Vec<(PartitionRef, Vec<AckBatch>)>,
) -> Vec<Result<(), TxnAckError>> {
    let core = io.core();
    let config = core.registry().group_config(group_id).txn;
    let keys: Vec<TopicPartition> = partitions.iter().map(|(r, _)| r.key()).collect();
    let refusals = core.state.borrow_mut().share.txn_register(
        group_id,
        member_id,
        id,
        &keys,
        config,
        io.now_ms(),
    );
    assert_eq!(refusals.len(), partitions.len(), "one answer per partition");
    let mut results: Vec<Result<(), TxnAckError>> = vec![Ok(()); partitions.len()];
    let mut registered: Vec<usize> = Vec::new();
    let mut by_shard: BTreeMap<ShardId, Vec<usize>> = BTreeMap::new();
    for (i, refusal) in refusals.into_iter().enumerate() {
        match refusal {
            None => {
                registered.push(i);
                let (r, _) = &partitions[i];
                let shard = partition_shard(&r.topic, r.partition, core.shard_count);
                by_shard.entry(shard).or_default().push(i);
            }
            Some(answer) => results[i] = Err(TxnAckError::Refused(answer)),
        }
    }
    let mut locked: BTreeMap<usize, u64> = BTreeMap::new();
    let subset = |indexes: &[usize]| -> Vec<(PartitionRef, Vec<AckBatch>)> {
        indexes.iter().map(|i| partitions[*i].clone()).collect()
    };
    // This shard's partitions are locked in place, the others' on their shards meanwhile.
    let own = by_shard.remove(&core.id);
    let remote: Vec<(ShardId, Vec<usize>)> = by_shard.into_iter().collect();
    let calls: Vec<_> = remote
        .iter()
        .map(|(shard, indexes)| {
            let op = TxnOp::Lock {
                group_id: group_id.to_string(),
                member_id: member_id.to_string(),
                transaction_id: id.to_string(),
                partitions: subset(indexes),
            };
            io.call_op(*shard, Txn::<Vec<Result<u64, ShareAckResult>>>::new(op))
        })
        .collect();
    if let Some(indexes) = &own {
        let outcomes = lock(io, group_id, member_id, id, &subset(indexes));
        record_locks(indexes, outcomes, &mut results, &mut locked);
    }
    for ((_, indexes), reply) in remote.iter().zip(join_all(calls).await) {
        match reply {
            Ok(outcomes) => record_locks(indexes, outcomes, &mut results, &mut locked),
            Err(failure) => {
                for i in indexes {
                    results[*i] = Err(TxnAckError::Call(failure.clone()));
                }
            }
        }
    }
    let done: Vec<(TopicPartition, u64)> = registered
        .iter()
        .map(|i| (keys[*i], locked.get(i).copied().unwrap_or(0)))
        .collect();
    let late = if done.is_empty() {
        Vec::new()
    } else {
        core.state
            .borrow_mut()
            .share
            .txn_ack_done(group_id, id, &done)
    };
    append_entries(io);
    core.txn_acks_done.notify();
    if !late.is_empty() {
        spawn_apply(io, group_id, id, &late, false);
    }
    results
}

/// Records what a participant locked for the partitions at `indexes`.
fn record_locks(
    indexes: &[usize],
    outcomes: Vec<Result<u64, ShareAckResult>>,
    results: &mut [Result<(), TxnAckError>],
    locked: &mut BTreeMap<usize, u64>,
) {
    assert_eq!(
        indexes.len(),
        outcomes.len(),
        "one lock outcome per partition"
    );
    for (i, outcome) in indexes.iter().zip(outcomes) {
        match outcome {
            Ok(n) => {
                locked.insert(*i, n);
            }
            Err(refused) => results[*i] = Err(TxnAckError::NotLocked(refused)),
        }
    }
}

/// Phase 1 on the coordinator: closes the transaction to new acknowledgements, waits for those
/// in flight, has every participant make its LOCKED ranges durable, then makes PREPARE durable
/// and answers.
async fn prepare<I: ShardIo>(io: &I, group_id: &str, id: &str) -> TxnAnswer {
    let core = io.core();
    let started = io.monotonic_us();
    let config = core.registry().group_config(group_id).txn;
    let answer = core
        .state
        .borrow_mut()
        .share
        .txn_prepare(group_id, id, config, io.now_ms());
    append_entries(io);
    if answer.error.is_some() {
        return answer;
    }
    // New acknowledgements are refused now; wait for those in flight. Listen before looking,
    // so a completion between the look and the wait is not missed.
    let deadline = started + TXN_PREPARE_WAIT_MS * 1_000;
    loop {
        let completed = core.txn_acks_done.listen();
        if core.state.borrow().share.txn_acks_in_flight(group_id, id) == 0 {
            break;
        }
        let now = io.monotonic_us();
        if now >= deadline {
            return TxnAnswer::error(
                ShareTxnError::TimedOut,
                "acknowledgements into the transaction did not complete",
                TxnState::Prepare,
            );
        }
        let left_ms = (deadline - now).div_ceil(1_000);
        futures_lite::future::or(completed, io.sleep_ms(left_ms)).await;
    }
    let Some(record) = core.state.borrow().share.txn_get(group_id, id) else {
        return TxnAnswer::error(
            ShareTxnError::Txn(TxnError::TransactionalIdNotFound),
            "the transaction was forgotten",
            TxnState::Empty,
        );
    };
    if record.state != TxnState::Prepare {
        return TxnAnswer::error(
            ShareTxnError::Txn(TxnError::InvalidTxnState {
                state: record.state,
            }),
            format!("the transaction is {} now", record.state.name()),
            record.state,
        );
    }
    let partitions: Vec<TopicPartition> = record.participants.iter().map(|p| p.partition).collect();
    // Locks held on this shard go into this journal just before the PREPARE record: one
    // journal is durable in prefix order, so one flush covers both. Other shards' locks must
    // be durable before the record is written.
    let mut shards = participant_shards(io, &partitions);
    if shards.remove(&core.id) {
        core.state
            .borrow_mut()
            .share
            .txn_persist_locks(group_id, id);
    }
    let calls = shards
        .into_iter()
        .map(|shard| {
            let op = TxnOp::PersistLocks {
                group_id: group_id.to_string(),
                transaction_id: id.to_string(),
            };
            io.call_op(shard, Txn::<Result<(), String>>::new(op))
        })
        .collect();
    for reply in join_all(calls).await {
        match reply {
            Ok(Ok(())) => {}
            Ok(Err(cause)) => {
                return TxnAnswer::error(
                    ShareTxnError::NotDurable,
                    format!("a participant could not persist its locks: {cause}"),
                    TxnState::Prepare,
                )
            }
            Err(failure) => {
                return TxnAnswer::error(
                    ShareTxnError::NotDurable,
                    format!("a participant could not persist its locks: {failure:?}"),
                    TxnState::Prepare,
                )
            }
        }
    }
    let recorded = core
        .state
        .borrow_mut()
        .share
        .txn_record_prepared(group_id, id);
    if let Err(e) = persist_entries(io).await {
        return TxnAnswer::error(ShareTxnError::NotDurable, e, TxnState::Prepare);
    }
    let record = core.state.borrow().share.txn_get(group_id, id);
    let state = record.as_ref().map_or(TxnState::Empty, |r| r.state);
    if !recorded || state != TxnState::Prepare {
        return TxnAnswer::error(
            ShareTxnError::Txn(TxnError::InvalidTxnState { state }),
            "the transaction was aborted while it was being prepared",
            state,
        );
    }
    let micros = io.monotonic_us().saturating_sub(started);
    io.with_metrics(|m| m.share_txn_prepare.record(micros));
    TxnAnswer {
        error: None,
        error_message: None,
        state,
        timeout_ms: record.map_or(0, |r| r.timeout_ms),
    }
}

/// Phase 2 on the coordinator: commit or abort, durable before the answer, then the
/// participants apply it.
async fn decide<I: ShardIo>(io: &I, group_id: &str, id: &str, commit: bool) -> TxnAnswer {
    let core = io.core();
    let started = io.monotonic_us();
    let config = core.registry().group_config(group_id).txn;
    let now = io.now_ms();
    let before = core.state.borrow().share.txn_get(group_id, id);
    let answer = {
        let mut state = core.state.borrow_mut();
        if commit {
            state.share.txn_commit(group_id, id, config, now)
        } else {
            state.share.txn_abort(group_id, id, config, now)
        }
    };
    if let Err(e) = persist_entries(io).await {
        return TxnAnswer::error(ShareTxnError::NotDurable, e, answer.state);
    }
    let after = core.state.borrow().share.txn_get(group_id, id);
    if let Some(record) = &after {
        let decided =
            record.state.is_finished() && before.as_ref().is_some_and(|b| !b.state.is_finished());
        if decided {
            let partitions: Vec<TopicPartition> =
                record.participants.iter().map(|p| p.partition).collect();
            spawn_apply(
                io,
                group_id,
                id,
                &partitions,
                record.state == TxnState::Committed,
            );
            if commit {
                let micros = io.monotonic_us().saturating_sub(started);
                io.with_metrics(|m| m.share_txn_commit.record(micros));
            }
        }
    }
    answer
}

/// The shards of a transaction's participant partitions (unknown topics are skipped: their
/// share state went with them).
fn participant_shards<I: ShardIo>(io: &I, partitions: &[TopicPartition]) -> BTreeSet<ShardId> {
    let core = io.core();
    let registry = core.registry();
    partitions
        .iter()
        .filter_map(|p| {
            registry
                .topic_by_id(&p.topic_id)
                .map(|t| partition_shard(&t.name, p.partition, core.shard_count))
        })
        .collect()
}

/// Tells the participants of a decided transaction to apply it (they persist lazily; a crash
/// before they do is resolved at restart by asking the coordinator).
fn spawn_apply<I: ShardIo>(
    io: &I,
    group_id: &str,
    id: &str,
    partitions: &[TopicPartition],
    commit: bool,
) {
    for shard in participant_shards(io, partitions) {
        let op = Txn::<Result<(), String>>::new(TxnOp::Apply {
            group_id: group_id.to_string(),
            transaction_id: id.to_string(),
            commit,
        });
        let task = io.clone();
        io.spawn(async move {
            // A participant that cannot apply is gone (the broker stops); its restart resolves
            // the locks with the coordinator.
            if let Err(failure) = task.call_op(shard, op).await {
                tracing::warn!(
                    ?failure,
                    "a participant did not apply a share transaction's decision"
                );
            }
        });
    }
}

/// Tells the participants of transactions aborted for their timeout to release their locks,
/// whichever operation noticed the timeout (`ShareState::take_timed_out`).
fn abort_timed_out<I: ShardIo>(io: &I, records: Vec<TxnRecord>) {
    for record in records {
        tracing::info!(shard = %io.core().id, group = %record.group_id, txn = %record.transaction_id, "share transaction timed out; aborted");
        let partitions: Vec<TopicPartition> =
            record.participants.iter().map(|p| p.partition).collect();
        spawn_apply(
            io,
            &record.group_id,
            &record.transaction_id,
            &partitions,
            false,
        );
    }
}

fn record_metrics<I: ShardIo>(io: &I) {
    let (active, counters) = {
        let state = io.core().state.borrow();
        (state.share.txn_active(), state.share.txn_counters)
    };
    io.with_metrics(|m| {
        m.share_txn_active = active as u64;
        m.share_txn_aborted = counters.aborted;
        m.share_txn_timed_out = counters.timed_out;
    });
}

/// Housekeeping: aborts the transactions past their timeout (and forgets finished ones past
/// retention), tells their participants, and updates the metrics; returns the transactions
/// aborted. The entries are appended by the caller's next append.
pub fn expire<I: ShardIo>(io: &I) -> Vec<TxnRecord> {
    let expired = io.core().state.borrow_mut().share.txn_expire(io.now_ms());
    abort_timed_out(io, expired.clone());
    record_metrics(io);
    expired
}

/// After a restart: asks the coordinator about every transaction that holds LOCKED records
/// here and applies its decision; PREPARE keeps the locks (only the framework's coordinator
/// decides). ONGOING or unknown ones are aborted: the coordinator's journal is the truth. Runs
/// in the background.
pub fn resolve_locked_transactions<I: ShardIo>(io: &I) {
    let pending = io.core().state.borrow().share.txn_locked();
    if pending.is_empty() {
        return;
    }
    let task = io.clone();
    io.spawn(async move {
        let io = &task;
        let core = io.core();
        for (group_id, transaction_id) in pending {
            let shard = group_shard(&group_id, core.shard_count);
            let op = Txn::<TxnAnswer>::new(TxnOp::State {
                group_id: group_id.clone(),
                transaction_id: transaction_id.clone(),
            });
            let state = match io.call_op(shard, op).await {
                Ok(a) => a.state,
                Err(failure) => {
                    tracing::error!(shard = %core.id, group = %group_id, txn = %transaction_id, ?failure, "cannot resolve locked records; they stay locked");
                    continue;
                }
            };
            let commit = match state {
                TxnState::Prepare => continue,
                TxnState::Committed => true,
                TxnState::Aborted | TxnState::Ongoing | TxnState::Empty => false,
            };
            tracing::info!(shard = %core.id, group = %group_id, txn = %transaction_id, state = state.name(), "resolving locked records after restart");
            core.state
                .borrow_mut()
                .txn_apply(&group_id, &transaction_id, commit);
            append_entries(io);
        }
    });
}
