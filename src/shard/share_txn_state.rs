//! Share transactions on a shard: the synchronous steps of the
//! coordinator (on the group's shard: [`GroupTransactions`] per group) and of the participants
//! (on the partitions' shards: LOCKED ranges in their [`SharePartition`](crate::share::partition::SharePartition)s). The shard core
//! (`crate::shard::share_txn`) strings them together with the calls between shards and the waits for
//! durability; handlers are in `share_txn_api`.
//!
//! Journal (what makes the protocol crash-safe):
//! - The coordinator writes a `TransactionRecord` entry for every change of a transaction
//!   except PREPARE, which it writes only at the end of phase 1, after every participant's
//!   `TransactionLocks` entries are durable (`ShareState::txn_record_entry`). A PREPARE that
//!   is durable therefore always has durable locks; one that is not is ONGOING after a restart
//!   and gets aborted. Journal snapshots follow the same rule (`prepared_durable`).
//! - A participant writes `TransactionLocks` (the transaction's LOCKED ranges on a partition)
//!   in phase 1, and after applying the decision the resulting state delta followed by an
//!   empty `TransactionLocks` (the locks are gone). Replay overlays the latest non-empty locks
//!   on offsets that are still AVAILABLE (deltas journal LOCKED as AVAILABLE), so a crash
//!   between the two entries changes nothing: the decision is asked for again and applying it
//!   twice is a no-op.
//! - After a restart each participant asks the coordinator about every transaction that still
//!   holds locks (`TxnOp::State`) and applies COMMITTED or ABORTED; PREPARE keeps the locks.

use super::ops::{PartitionRef, ShareAckResult, SharePartitionError, ShareTxnError, TxnAnswer};
use super::share_state::{ShareKey, ShareState};
use super::state::ShardState;
use crate::journal::entries::{
    Entry, LockOutcome as JournalOutcome, LockedRange as JournalRange, TransactionLocks,
    TransactionParticipant, TransactionRecord, TxnState as JournalTxnState,
};
use crate::model::TopicPartition;
use crate::share::{AckBatch, LockOutcome, LockedRange};
use crate::share_txn::{
    GroupTransactions, Participant, TxnChangeCause, TxnConfig, TxnError, TxnRecord, TxnReply,
    TxnState,
};
use crate::storage::file::Storage;
use std::collections::BTreeSet;
use uuid::Uuid;

/// Broker-wide counts for the KIP's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxnCounters {
    pub aborted: u64,
    pub timed_out: u64,
}

fn answer(result: Result<TxnReply, TxnError>) -> TxnAnswer {
    match result {
        Ok(reply) => TxnAnswer {
            error: None,
            error_message: None,
            state: reply.state,
            timeout_ms: reply.timeout_ms,
        },
        Err(e) => {
            let (message, state) = (e.to_string(), e.state());
            TxnAnswer::error(ShareTxnError::Txn(e), message, state)
        }
    }
}

pub(crate) fn record_to_entry(r: &TxnRecord, state: TxnState) -> TransactionRecord {
    let ms = |v: Option<u64>| v.map_or(-1, |v| v as i64);
    TransactionRecord {
        transaction_id: r.transaction_id.clone(),
        group_id: r.group_id.clone(),
        state: match state {
            TxnState::Prepare => JournalTxnState::Prepare,
            TxnState::Committed => JournalTxnState::Committed,
            TxnState::Aborted => JournalTxnState::Aborted,
            TxnState::Ongoing | TxnState::Empty => JournalTxnState::Ongoing,
        },
        timeout_ms: r.timeout_ms as i64,
        create_time_ms: r.create_time_ms as i64,
        prepare_time_ms: if state == TxnState::Prepare || state.is_finished() {
            ms(r.prepare_time_ms)
        } else {
            -1
        },
        decision_time_ms: ms(r.finish_time_ms),
        participants: r
            .participants
            .iter()
            .map(|p| TransactionParticipant {
                topic_id: *p.partition.topic_id.as_bytes(),
                partition: p.partition.partition,
                locked_records: p.locked_records as i64,
            })
            .collect(),
    }
}

pub(crate) fn entry_to_record(e: &TransactionRecord) -> TxnRecord {
    let ms = |v: i64| (v >= 0).then_some(v as u64);
    TxnRecord {
        transaction_id: e.transaction_id.clone(),
        group_id: e.group_id.clone(),
        state: match e.state {
            JournalTxnState::Ongoing => TxnState::Ongoing,
            JournalTxnState::Prepare => TxnState::Prepare,
            JournalTxnState::Committed => TxnState::Committed,
            JournalTxnState::Aborted => TxnState::Aborted,
        },
        timeout_ms: e.timeout_ms.max(1) as u64,
        create_time_ms: e.create_time_ms.max(0) as u64,
        prepare_time_ms: ms(e.prepare_time_ms),
        finish_time_ms: ms(e.decision_time_ms),
        participants: e
            .participants
            .iter()
            .map(|p| Participant {
                partition: TopicPartition {
                    topic_id: Uuid::from_bytes(p.topic_id),
                    partition: p.partition,
                },
                locked_records: p.locked_records.max(0) as u64,
            })
            .collect(),
    }
}

pub(crate) fn locks_entry(
    key: &ShareKey,
    transaction_id: &str,
    ranges: &[LockedRange],
) -> TransactionLocks {
    TransactionLocks {
        transaction_id: transaction_id.to_string(),
        group_id: key.group_id.clone(),
        topic_id: *key.partition.topic_id.as_bytes(),
        partition: key.partition.partition,
        ranges: ranges
            .iter()
            .map(|r| JournalRange {
                first_offset: r.first,
                last_offset: r.last,
                outcome: match r.outcome {
                    LockOutcome::Accept => JournalOutcome::Accept,
                    LockOutcome::Reject => JournalOutcome::Reject,
                },
                delivery_count: r.delivery_count,
            })
            .collect(),
    }
}

impl ShareState {
    /// The coordinator state of `group_id` (created on first use), with its current config.
    fn group_txns(&mut self, group_id: &str, config: TxnConfig) -> &mut GroupTransactions {
        let txns = self
            .txns
            .entry(group_id.to_string())
            .or_insert_with(|| GroupTransactions::new(group_id, config));
        if *txns.config() != config {
            txns.set_config(config);
        }
        txns
    }

    /// Drains the coordinator's queued changes into journal entries. PREPARE changes are
    /// skipped: phase 1 writes that record itself once the locks are durable (module docs).
    pub(crate) fn drain_txn_changes(&mut self, group_id: &str) {
        let Some(txns) = self.txns.get_mut(group_id) else {
            return;
        };
        for change in txns.take_changes() {
            match change.cause {
                TxnChangeCause::Prepared | TxnChangeCause::Forgotten => continue,
                TxnChangeCause::TimedOut => {
                    self.txn_counters.timed_out += 1;
                    self.txn_counters.aborted += 1;
                    // Its participants still hold its locks: whoever noticed the timeout,
                    // they must be told (take_timed_out).
                    self.timed_out.push(change.record.clone());
                }
                TxnChangeCause::Aborted | TxnChangeCause::AbortedOnRestart => {
                    self.txn_counters.aborted += 1
                }
                TxnChangeCause::Began | TxnChangeCause::Committed => {}
            }
            self.prepared_durable
                .remove(&(group_id.to_string(), change.record.transaction_id.clone()));
            let entry = record_to_entry(&change.record, change.record.state);
            self.push_entry(Entry::TransactionRecord(entry));
        }
    }

    pub fn txn_begin(
        &mut self,
        group_id: &str,
        id: &str,
        timeout_ms: i64,
        config: TxnConfig,
        now_ms: u64,
    ) -> TxnAnswer {
        let result = self
            .group_txns(group_id, config)
            .begin(id, timeout_ms, now_ms);
        self.drain_txn_changes(group_id);
        answer(result)
    }

    /// Registers each partition as a participant (one acknowledgement in flight each);
    /// `member_id` must be a member of the group.
    pub fn txn_register(
        &mut self,
        group_id: &str,
        member_id: &str,
        id: &str,
        partitions: &[TopicPartition],
        config: TxnConfig,
        now_ms: u64,
    ) -> Vec<Option<TxnAnswer>> {
        let member_known = self
            .groups
            .group(group_id)
            .is_some_and(|g| g.members.contains_key(member_id));
        if !member_known {
            let refusal = TxnAnswer::error(
                ShareTxnError::UnknownMember,
                format!("{member_id} is not a member of share group {group_id}"),
                self.txn_get(group_id, id)
                    .map_or(TxnState::Empty, |r| r.state),
            );
            return partitions.iter().map(|_| Some(refusal.clone())).collect();
        }
        let txns = self.group_txns(group_id, config);
        let out = partitions
            .iter()
            .map(|p| match txns.register_participant(id, *p, now_ms) {
                Ok(_) => None,
                Err(e) => Some(answer(Err(e))),
            })
            .collect();
        self.drain_txn_changes(group_id);
        out
    }

    /// Completes acknowledgements; returns the partitions that must abort `id` (the
    /// transaction ended while their locks were being taken).
    pub fn txn_ack_done(
        &mut self,
        group_id: &str,
        id: &str,
        locked: &[(TopicPartition, u64)],
    ) -> Vec<TopicPartition> {
        let Some(txns) = self.txns.get_mut(group_id) else {
            return locked.iter().map(|(p, _)| *p).collect();
        };
        let late: Vec<TopicPartition> = locked
            .iter()
            .filter(|(p, n)| {
                let state = txns.complete_ack(id, *p, *n);
                matches!(state, TxnState::Aborted | TxnState::Empty)
            })
            .map(|(p, _)| *p)
            .collect();
        self.drain_txn_changes(group_id);
        late
    }

    /// Phase 1, first step: ONGOING → PREPARE in memory (nothing journalled yet).
    pub fn txn_prepare(
        &mut self,
        group_id: &str,
        id: &str,
        config: TxnConfig,
        now_ms: u64,
    ) -> TxnAnswer {
        let result = self.group_txns(group_id, config).prepare(id, now_ms);
        self.drain_txn_changes(group_id);
        answer(result)
    }

    /// Acknowledgements registered on `id` and not completed.
    pub fn txn_acks_in_flight(&self, group_id: &str, id: &str) -> u32 {
        self.txns.get(group_id).map_or(0, |t| t.acks_in_flight(id))
    }

    /// The transaction as the coordinator has it now.
    pub fn txn_get(&self, group_id: &str, id: &str) -> Option<TxnRecord> {
        self.txns.get(group_id).and_then(|t| t.get(id))
    }

    /// Phase 1, last step: the participants' locks are durable; journal the PREPARE record.
    /// `false` if the transaction is no longer PREPARE (aborted meanwhile).
    pub fn txn_record_prepared(&mut self, group_id: &str, id: &str) -> bool {
        let Some(record) = self.txn_get(group_id, id) else {
            return false;
        };
        if record.state != TxnState::Prepare {
            return false;
        }
        self.push_entry(Entry::TransactionRecord(record_to_entry(
            &record,
            TxnState::Prepare,
        )));
        self.prepared_durable
            .insert((group_id.to_string(), id.to_string()));
        true
    }

    pub fn txn_commit(
        &mut self,
        group_id: &str,
        id: &str,
        config: TxnConfig,
        now_ms: u64,
    ) -> TxnAnswer {
        let txns = self.group_txns(group_id, config);
        // Only a prepare whose record is durable may commit: a PREPARE still in phase 1
        // (participants persisting) is not yet decided.
        let in_phase_one = txns.get(id).is_some_and(|r| r.state == TxnState::Prepare)
            && !self
                .prepared_durable
                .contains(&(group_id.to_string(), id.to_string()));
        if in_phase_one {
            return TxnAnswer::error(
                ShareTxnError::Txn(TxnError::AcksInFlight {
                    state: TxnState::Prepare,
                    acks: 0,
                }),
                "the transaction is still being prepared; retry",
                TxnState::Prepare,
            );
        }
        let result = self.group_txns(group_id, config).commit(id, now_ms);
        self.drain_txn_changes(group_id);
        answer(result)
    }

    pub fn txn_abort(
        &mut self,
        group_id: &str,
        id: &str,
        config: TxnConfig,
        now_ms: u64,
    ) -> TxnAnswer {
        let result = self.group_txns(group_id, config).abort(id, now_ms);
        self.drain_txn_changes(group_id);
        answer(result)
    }

    pub fn txn_list(
        &mut self,
        group_id: &str,
        states: &[TxnState],
        config: TxnConfig,
        now_ms: u64,
    ) -> Vec<TxnRecord> {
        let out = self.group_txns(group_id, config).list(states, now_ms);
        self.drain_txn_changes(group_id);
        out
    }

    /// Aborts ONGOING transactions past their timeout, in every group; returns every
    /// transaction aborted for its timeout since the last call, here or by any other
    /// operation that noticed it first (their participants must abort their locks).
    pub fn txn_expire(&mut self, now_ms: u64) -> Vec<TxnRecord> {
        let groups: Vec<String> = self.txns.keys().cloned().collect();
        for group in groups {
            let txns = self.txns.get_mut(&group).expect("listed");
            txns.expire(now_ms);
            txns.forget_finished(now_ms);
            self.drain_txn_changes(&group);
        }
        self.take_timed_out()
    }

    /// The transactions aborted for their timeout whose participants have not been told yet
    /// (each is returned once).
    pub fn take_timed_out(&mut self) -> Vec<TxnRecord> {
        std::mem::take(&mut self.timed_out)
    }

    /// ONGOING + PREPARE transactions over all groups coordinated here.
    pub fn txn_active(&self) -> usize {
        self.txns.values().map(|t| t.pending_count()).sum()
    }

    /// Participant: the journal entries that make `id`'s LOCKED ranges of `group_id` durable
    /// on this shard (phase 1); returns how many partitions hold locks.
    pub fn txn_persist_locks(&mut self, group_id: &str, id: &str) -> usize {
        let locks: Vec<TransactionLocks> = self
            .partitions_of(group_id)
            .filter_map(|(key, sp)| {
                let ranges = sp.locked_ranges(id);
                (!ranges.is_empty()).then(|| locks_entry(key, id, &ranges))
            })
            .collect();
        let n = locks.len();
        for entry in locks {
            self.push_entry(Entry::TransactionLocks(entry));
        }
        n
    }

    /// Participant: (group, share transaction) pairs that hold LOCKED records here. Records
    /// LOCKED in a producer transaction (`crate::producer_txn::share`) are left out: only that
    /// transaction's marker resolves them.
    pub fn txn_locked(&self) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (key, sp) in self.partitions() {
            for txn in sp
                .locked_txns()
                .into_iter()
                .filter(|t| !crate::producer_txn::share::is_producer_lock(t))
            {
                out.insert((key.group_id.clone(), txn));
            }
        }
        out
    }
}

impl<S: Storage + Clone> ShardState<S> {
    /// Participant: ACQUIRED → LOCKED, each partition all-or-nothing.
    pub fn txn_lock(
        &mut self,
        group_id: &str,
        member_id: &str,
        id: &str,
        partitions: &[(PartitionRef, Vec<AckBatch>)],
    ) -> Vec<Result<u64, ShareAckResult>> {
        partitions
            .iter()
            .map(|(r, batches)| {
                let key = ShareKey {
                    group_id: group_id.to_string(),
                    partition: r.key(),
                };
                let mut sp = self.take_existing_share(&key).ok_or_else(|| {
                    ShareAckResult::error(
                        SharePartitionError::NothingAcquired,
                        "no records of this partition were acquired by the group",
                    )
                })?;
                let result = sp.lock(member_id, id, batches).map_err(|e| {
                    let message = e.to_string();
                    ShareAckResult::error(SharePartitionError::Share(e), message)
                });
                self.put_share(key, sp);
                result
            })
            .collect()
    }

    /// Participant: applies the decision on every partition of the group here; journals the
    /// state delta, then an empty `TransactionLocks` for each partition that had locks.
    pub fn txn_apply(&mut self, group_id: &str, id: &str, commit: bool) {
        let keys: Vec<ShareKey> = self
            .share
            .partitions_of(group_id)
            .filter(|(_, sp)| sp.locked_count(id) > 0)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(mut sp) = self.take_existing_share(&key) else {
                continue;
            };
            if commit {
                sp.commit(id);
            } else {
                sp.abort(id);
            }
            self.put_share(key.clone(), sp);
            self.share
                .push_entry(Entry::TransactionLocks(locks_entry(&key, id, &[])));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition() -> TopicPartition {
        TopicPartition {
            topic_id: Uuid::from_u128(1),
            partition: 0,
        }
    }

    /// A transaction with 5 records locked on one partition, timeout 1 000 ms from `t = 0`.
    fn shard_with_locks(id: &str) -> ShareState {
        let mut shard = ShareState::default();
        let config = TxnConfig::default();
        assert_eq!(shard.txn_begin("g", id, 1_000, config, 0).error, None);
        shard
            .group_txns("g", config)
            .register_participant(id, partition(), 10)
            .unwrap();
        assert!(shard.txn_ack_done("g", id, &[(partition(), 5)]).is_empty());
        shard
    }

    /// Regression (chaos pipeline, a coordinator stalled past the transaction timeout): every
    /// coordinator operation expires timed-out transactions first; when one other than
    /// housekeeping noticed the timeout (a worker's acknowledgement into the transaction, the
    /// coordinator's next begin), the ABORTED record was journalled but the participants were
    /// never told, so the transaction's LOCKED records stayed locked — never redelivered —
    /// until the broker restarted.
    #[test]
    fn a_timeout_noticed_by_any_operation_reaches_the_participants() {
        let config = TxnConfig::default();
        type Notice = fn(&mut ShareState, TxnConfig);
        let notices: [(&str, Notice); 3] = [
            ("begin", |s, c| {
                assert_eq!(s.txn_begin("g", "g-j-2", 1_000, c, 2_000).error, None);
            }),
            ("list", |s, c| {
                s.txn_list("g", &[], c, 2_000);
            }),
            ("abort", |s, c| {
                s.txn_abort("g", "g-j-1", c, 2_000);
            }),
        ];
        for (what, notice) in notices {
            let mut shard = shard_with_locks("g-j-1");
            notice(&mut shard, config);
            assert_eq!(
                shard.txn_get("g", "g-j-1").unwrap().state,
                TxnState::Aborted,
                "{what}"
            );
            let told = shard.txn_expire(2_001);
            assert_eq!(told.len(), 1, "{what}: the participants must be told");
            assert_eq!(told[0].transaction_id, "g-j-1");
            assert_eq!(told[0].participants[0].partition, partition());
            assert_eq!(told[0].participants[0].locked_records, 5);
            assert!(shard.txn_expire(2_002).is_empty(), "{what}: told once");
            assert_eq!(shard.txn_counters.timed_out, 1, "{what}");
        }
        // Housekeeping noticing it itself still reports it, once.
        let mut shard = shard_with_locks("g-j-1");
        assert!(shard.txn_expire(999).is_empty());
        assert_eq!(shard.txn_expire(1_000).len(), 1);
        assert!(shard.take_timed_out().is_empty());
    }
}
