//! `GroupTransactions`: the transaction coordinator's state for one share group.
//!
//! Owned by the shard that owns the group (`model::group_shard`). Pure and synchronous: every
//! operation takes `now_ms`, and before acting it aborts ONGOING transactions past their
//! timeout and forgets finished ones past retention, so an operation never sees a
//! transaction that should already have timed out.
//!
//! Rules (the KIP's and the wire spec's, `schemas/share-transactions.md`; where the KIP is
//! silent, Lockstep's own, as stated here):
//! - begin: EMPTY → ONGOING; idempotent (a known id answers its current state, whatever the
//!   timeout asked); the id must be `{groupId}-{prefix}-{checkpointId}` of this group;
//!   TimeoutMs -1 means `share.transaction.timeout.ms`; at most `max_pending` ONGOING +
//!   PREPARE transactions.
//! - register_participant / complete_ack bracket one transactional acknowledgement on a
//!   partition: registering needs ONGOING; completing reports the state at that moment, and
//!   a caller told ABORTED or EMPTY must abort the transaction on that partition (its locks
//!   arrived after the decision).
//! - prepare: ONGOING → PREPARE (closes the transaction to new acknowledgements; the caller
//!   waits until `acks_in_flight` is 0, then has participants persist their LOCKED ranges and
//!   the journal persist the queued PREPARE record(s), then answers); idempotent.
//! - commit: PREPARE → COMMITTED, refused while acknowledgements are in flight; idempotent;
//!   from ONGOING or ABORTED: INVALID_TXN_STATE.
//! - abort: ONGOING | PREPARE → ABORTED; idempotent; on COMMITTED a no-op reporting COMMITTED.
//! - expire: ONGOING past create time + timeout → ABORTED. PREPARE is never aborted here.
//! - retention: COMMITTED / ABORTED are forgotten `retention_ms` after they finished (or
//!   when more than `finished_max` are remembered, oldest first, but never while
//!   acknowledgements registered on them are in flight); later operations on them answer
//!   TRANSACTIONAL_ID_NOT_FOUND, and a begin starts a new transaction.
//!
//! Persistence: every change is queued as a [`TxnChange`] (the full [`TxnRecord`] after the
//! change, and why) for the journal, which drains them with
//! [`GroupTransactions::take_changes`], makes them durable, then lets the handler answer.
//! Registration of participants while ONGOING is not queued: an ONGOING transaction found at
//! restart is aborted anyway ([`GroupTransactions::restore`]), and participants resolve their
//! LOCKED records by asking the coordinator.

use std::collections::{BTreeMap, BTreeSet};

use super::state::{validate_transition, TxnError, TxnState};
use crate::constants::{
    SHARE_TRANSACTIONS_FINISHED_MAX, SHARE_TRANSACTION_ID_BYTES_MAX,
    SHARE_TRANSACTION_MAX_PENDING_DEFAULT, SHARE_TRANSACTION_MAX_PENDING_MAX,
    SHARE_TRANSACTION_RETENTION_MS_DEFAULT, SHARE_TRANSACTION_TIMEOUT_MS_DEFAULT,
    SHARE_TRANSACTION_TIMEOUT_MS_MAX,
};
use crate::model::TopicPartition;

/// The group configs of share transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnConfig {
    /// `share.transaction.timeout.ms`: the timeout of a begin with TimeoutMs -1.
    pub timeout_ms_default: u64,
    /// Largest TimeoutMs a begin may ask for.
    pub timeout_ms_max: u64,
    /// `share.transaction.max.pending`: ONGOING + PREPARE transactions at most.
    pub max_pending: usize,
    /// How long a COMMITTED / ABORTED transaction is remembered.
    pub retention_ms: u64,
    /// Finished transactions remembered at most.
    pub finished_max: usize,
}

impl Default for TxnConfig {
    fn default() -> TxnConfig {
        TxnConfig {
            timeout_ms_default: SHARE_TRANSACTION_TIMEOUT_MS_DEFAULT,
            timeout_ms_max: SHARE_TRANSACTION_TIMEOUT_MS_MAX,
            max_pending: SHARE_TRANSACTION_MAX_PENDING_DEFAULT,
            retention_ms: SHARE_TRANSACTION_RETENTION_MS_DEFAULT,
            finished_max: SHARE_TRANSACTIONS_FINISHED_MAX,
        }
    }
}

impl TxnConfig {
    /// Checks the ranges; the message names the offending config.
    pub fn validate(&self) -> Result<(), String> {
        if self.timeout_ms_max == 0 || self.timeout_ms_max > SHARE_TRANSACTION_TIMEOUT_MS_MAX {
            return Err(format!(
                "transaction timeout max {} ms",
                self.timeout_ms_max
            ));
        }
        if self.timeout_ms_default == 0 || self.timeout_ms_default > self.timeout_ms_max {
            return Err(format!(
                "share.transaction.timeout.ms = {} is outside [1, {}]",
                self.timeout_ms_default, self.timeout_ms_max
            ));
        }
        if self.max_pending == 0 || self.max_pending > SHARE_TRANSACTION_MAX_PENDING_MAX {
            return Err(format!(
                "share.transaction.max.pending = {} is outside [1, {SHARE_TRANSACTION_MAX_PENDING_MAX}]",
                self.max_pending
            ));
        }
        if self.finished_max == 0 || self.finished_max > SHARE_TRANSACTIONS_FINISHED_MAX {
            return Err(format!(
                "finished transactions kept = {}",
                self.finished_max
            ));
        }
        Ok(())
    }
}

/// A participant partition and the records the transaction locked on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Participant {
    pub partition: TopicPartition,
    pub locked_records: u64,
}

/// One transaction as persisted and as listed (the KIP's `ShareTransactionState`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnRecord {
    pub transaction_id: String,
    pub group_id: String,
    pub state: TxnState,
    /// The timeout in force, resolved (never -1).
    pub timeout_ms: u64,
    pub create_time_ms: u64,
    /// When it was prepared (the wire's -1 is `None`).
    pub prepare_time_ms: Option<u64>,
    /// When it committed or aborted (retention counts from here).
    pub finish_time_ms: Option<u64>,
    /// Sorted by partition.
    pub participants: Vec<Participant>,
}

/// Why a [`TxnChange`] was queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnChangeCause {
    Began,
    Prepared,
    Committed,
    /// Aborted on request.
    Aborted,
    /// Aborted by the broker: ONGOING past its timeout (share-transaction-timeout-total).
    TimedOut,
    /// Aborted by the broker: found ONGOING at restart.
    AbortedOnRestart,
    /// Forgotten after retention: the journal may drop the transaction's records.
    Forgotten,
}

/// A change the journal must persist: the transaction's full record after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnChange {
    pub cause: TxnChangeCause,
    pub record: TxnRecord,
}

/// The answer to an operation that succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnReply {
    /// The state after the call (the wire's TransactionState).
    pub state: TxnState,
    /// The timeout in force.
    pub timeout_ms: u64,
    /// Whether the call changed anything (false for an idempotent repeat).
    pub changed: bool,
}

#[derive(Clone, Debug)]
struct Txn {
    state: TxnState,
    timeout_ms: u64,
    create_time_ms: u64,
    prepare_time_ms: Option<u64>,
    finish_time_ms: Option<u64>,
    participants: BTreeMap<TopicPartition, u64>,
    /// Acknowledgements registered and not yet completed.
    acks_in_flight: u32,
}

impl Txn {
    fn reply(&self, changed: bool) -> TxnReply {
        TxnReply {
            state: self.state,
            timeout_ms: self.timeout_ms,
            changed,
        }
    }

    fn deadline_ms(&self) -> u64 {
        self.create_time_ms.saturating_add(self.timeout_ms)
    }
}

/// Checks that `id` is `{group_id}-{prefix}-{checkpointId}` with a non-empty prefix and
/// checkpoint id (the prefix may itself contain '-'; the checkpoint id is after the last).
pub fn check_transaction_id(group_id: &str, id: &str) -> Result<(), TxnError> {
    let invalid = |reason: String| Err(TxnError::InvalidRequest { reason });
    if id.len() > SHARE_TRANSACTION_ID_BYTES_MAX {
        return invalid(format!(
            "transaction id is {} bytes; at most {SHARE_TRANSACTION_ID_BYTES_MAX}",
            id.len()
        ));
    }
    let rest = id
        .strip_prefix(group_id)
        .and_then(|rest| rest.strip_prefix('-'))
        .filter(|_| !group_id.is_empty());
    let Some(rest) = rest else {
        return invalid(format!(
            "transaction id {id:?} does not belong to group {group_id:?}"
        ));
    };
    match rest.rsplit_once('-') {
        Some((prefix, checkpoint)) if !prefix.is_empty() && !checkpoint.is_empty() => Ok(()),
        _ => invalid(format!(
            "transaction id {id:?} is not {{groupId}}-{{transactionalIdPrefix}}-{{checkpointId}}"
        )),
    }
}

/// The coordinator's transactions of one share group (module docs).
#[derive(Clone, Debug)]
pub struct GroupTransactions {
    group_id: String,
    config: TxnConfig,
    txns: BTreeMap<String, Txn>,
    /// Ids of ONGOING and PREPARE transactions (at most `max_pending`, except after a
    /// restore with a lowered limit).
    pending: BTreeSet<String>,
    /// (finish time, id) of COMMITTED and ABORTED transactions, oldest first.
    finished: BTreeSet<(u64, String)>,
    changes: Vec<TxnChange>,
}

impl GroupTransactions {
    pub fn new(group_id: &str, config: TxnConfig) -> GroupTransactions {
        assert!(!group_id.is_empty(), "group id");
        config
            .validate()
            .expect("transaction config validated by the caller");
        GroupTransactions {
            group_id: group_id.to_string(),
            config,
            txns: BTreeMap::new(),
            pending: BTreeSet::new(),
            finished: BTreeSet::new(),
            changes: Vec::new(),
        }
    }

    /// Rebuilds the state from the journal's latest record of each transaction. ONGOING
    /// transactions are aborted (queued as [`TxnChangeCause::AbortedOnRestart`]); PREPARE
    /// ones stay until the coordinator decides.
    pub fn restore(
        group_id: &str,
        config: TxnConfig,
        records: Vec<TxnRecord>,
        now_ms: u64,
    ) -> Result<GroupTransactions, TxnError> {
        let mut group = GroupTransactions::new(group_id, config);
        for record in records {
            let corrupt = |reason: String| TxnError::InvalidRequest { reason };
            if record.group_id != group_id {
                return Err(corrupt(format!(
                    "transaction {} of group {} restored into group {group_id}",
                    record.transaction_id, record.group_id
                )));
            }
            check_transaction_id(group_id, &record.transaction_id)?;
            if record.state == TxnState::Empty
                || record.state.is_finished() != record.finish_time_ms.is_some()
                || (record.state == TxnState::Prepare && record.prepare_time_ms.is_none())
            {
                return Err(corrupt(format!(
                    "transaction {} has inconsistent state {} / times",
                    record.transaction_id, record.state
                )));
            }
            if group.txns.contains_key(&record.transaction_id) {
                return Err(corrupt(format!(
                    "transaction {} restored twice",
                    record.transaction_id
                )));
            }
            let txn = Txn {
                state: record.state,
                timeout_ms: record.timeout_ms,
                create_time_ms: record.create_time_ms,
                prepare_time_ms: record.prepare_time_ms,
                finish_time_ms: record.finish_time_ms,
                participants: record
                    .participants
                    .iter()
                    .map(|p| (p.partition, p.locked_records))
                    .collect(),
                acks_in_flight: 0,
            };
            let id = record.transaction_id;
            if txn.state.is_pending() {
                group.pending.insert(id.clone());
            } else {
                group
                    .finished
                    .insert((txn.finish_time_ms.expect("checked"), id.clone()));
            }
            group.txns.insert(id.clone(), txn);
            if record.state == TxnState::Ongoing {
                group.finish(
                    &id,
                    TxnState::Aborted,
                    now_ms,
                    TxnChangeCause::AbortedOnRestart,
                );
            }
        }
        group.forget_finished(now_ms);
        group.check_invariants();
        Ok(group)
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// New configs; a lowered `max_pending` refuses new begins until enough finish.
    pub fn set_config(&mut self, config: TxnConfig) {
        config
            .validate()
            .expect("transaction config validated by the caller");
        self.config = config;
    }

    /// ONGOING + PREPARE transactions (the share-transaction-active gauge).
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// COMMITTED + ABORTED transactions still remembered.
    pub fn finished_count(&self) -> usize {
        self.finished.len()
    }

    /// The current record of `id`, if known.
    pub fn get(&self, id: &str) -> Option<TxnRecord> {
        self.txns.get(id).map(|t| self.record(id, t))
    }

    /// Acknowledgements registered on `id` and not completed (prepare waits for 0).
    pub fn acks_in_flight(&self, id: &str) -> u32 {
        self.txns.get(id).map_or(0, |t| t.acks_in_flight)
    }

    /// Changes queued since the last call, in order, for the journal.
    pub fn take_changes(&mut self) -> Vec<TxnChange> {
        std::mem::take(&mut self.changes)
    }

    /// ShareBeginTransaction.
    pub fn begin(&mut self, id: &str, timeout_ms: i64, now_ms: u64) -> Result<TxnReply, TxnError> {
        check_transaction_id(&self.group_id, id)?;
        self.tick(now_ms);
        if let Some(txn) = self.txns.get(id) {
            return Ok(txn.reply(false));
        }
        let timeout_ms = match timeout_ms {
            -1 => self.config.timeout_ms_default,
            t if t >= 1 && t as u64 <= self.config.timeout_ms_max => t as u64,
            t => {
                return Err(TxnError::InvalidTransactionTimeout {
                    timeout_ms: t,
                    max_ms: self.config.timeout_ms_max,
                })
            }
        };
        if self.pending.len() >= self.config.max_pending {
            return Err(TxnError::ConcurrentTransactions {
                pending: self.pending.len(),
                max_pending: self.config.max_pending,
            });
        }
        validate_transition(TxnState::Empty, TxnState::Ongoing)?;
        let txn = Txn {
            state: TxnState::Ongoing,
            timeout_ms,
            create_time_ms: now_ms,
            prepare_time_ms: None,
            finish_time_ms: None,
            participants: BTreeMap::new(),
            acks_in_flight: 0,
        };
        let reply = txn.reply(true);
        self.txns.insert(id.to_string(), txn);
        assert!(self.pending.insert(id.to_string()));
        self.queue(id, TxnChangeCause::Began);
        assert!(self.pending.len() <= self.config.max_pending);
        Ok(reply)
    }

    /// Starts one transactional acknowledgement on `partition`: the transaction must be
    /// ONGOING. Every successful call must be followed by [`Self::complete_ack`].
    pub fn register_participant(
        &mut self,
        id: &str,
        partition: TopicPartition,
        now_ms: u64,
    ) -> Result<TxnReply, TxnError> {
        check_transaction_id(&self.group_id, id)?;
        self.tick(now_ms);
        let txn = self
            .txns
            .get_mut(id)
            .ok_or(TxnError::TransactionalIdNotFound)?;
        if txn.state != TxnState::Ongoing {
            return Err(TxnError::InvalidTxnState { state: txn.state });
        }
        txn.participants.entry(partition).or_insert(0);
        txn.acks_in_flight = txn
            .acks_in_flight
            .checked_add(1)
            .expect("acks in flight overflow");
        Ok(txn.reply(false))
    }

    /// Ends an acknowledgement started by [`Self::register_participant`]; `locked_records`
    /// is what the partition locked (0 if it refused). Returns the transaction's state now:
    /// ABORTED or EMPTY (forgotten) means the partition must abort `id` — the locks came
    /// too late.
    ///
    /// Completing on a PREPARE transaction re-queues its record ([`TxnChangeCause::Prepared`])
    /// so the durable PREPARE record names every partition that holds its locks.
    pub fn complete_ack(
        &mut self,
        id: &str,
        partition: TopicPartition,
        locked_records: u64,
    ) -> TxnState {
        let Some(txn) = self.txns.get_mut(id) else {
            return TxnState::Empty;
        };
        assert!(
            txn.acks_in_flight > 0,
            "complete_ack without register_participant"
        );
        txn.acks_in_flight -= 1;
        assert_ne!(
            txn.state,
            TxnState::Committed,
            "commit waits for acknowledgements in flight"
        );
        let state = txn.state;
        if state.is_pending() {
            let count = txn
                .participants
                .get_mut(&partition)
                .expect("registered participant");
            *count += locked_records;
        }
        if state == TxnState::Prepare {
            self.queue(id, TxnChangeCause::Prepared);
        }
        state
    }

    /// SharePrepareTransaction: ONGOING → PREPARE; idempotent on PREPARE.
    pub fn prepare(&mut self, id: &str, now_ms: u64) -> Result<TxnReply, TxnError> {
        check_transaction_id(&self.group_id, id)?;
        self.tick(now_ms);
        let txn = self
            .txns
            .get_mut(id)
            .ok_or(TxnError::TransactionalIdNotFound)?;
        if txn.state == TxnState::Prepare {
            return Ok(txn.reply(false));
        }
        validate_transition(txn.state, TxnState::Prepare)?;
        txn.state = TxnState::Prepare;
        txn.prepare_time_ms = Some(now_ms);
        let reply = txn.reply(true);
        self.queue(id, TxnChangeCause::Prepared);
        Ok(reply)
    }

    /// ShareCommitTransaction: PREPARE → COMMITTED; idempotent on COMMITTED.
    pub fn commit(&mut self, id: &str, now_ms: u64) -> Result<TxnReply, TxnError> {
        check_transaction_id(&self.group_id, id)?;
        self.tick(now_ms);
        let txn = self.txns.get(id).ok_or(TxnError::TransactionalIdNotFound)?;
        if txn.state == TxnState::Committed {
            return Ok(txn.reply(false));
        }
        validate_transition(txn.state, TxnState::Committed)?;
        if txn.acks_in_flight > 0 {
            return Err(TxnError::AcksInFlight {
                state: txn.state,
                acks: txn.acks_in_flight,
            });
        }
        Ok(self.finish(id, TxnState::Committed, now_ms, TxnChangeCause::Committed))
    }

    /// ShareAbortTransaction: ONGOING | PREPARE → ABORTED; idempotent on ABORTED; a no-op
    /// reporting COMMITTED on COMMITTED.
    pub fn abort(&mut self, id: &str, now_ms: u64) -> Result<TxnReply, TxnError> {
        check_transaction_id(&self.group_id, id)?;
        self.tick(now_ms);
        let txn = self.txns.get(id).ok_or(TxnError::TransactionalIdNotFound)?;
        if txn.state.is_finished() {
            return Ok(txn.reply(false));
        }
        validate_transition(txn.state, TxnState::Aborted)?;
        Ok(self.finish(id, TxnState::Aborted, now_ms, TxnChangeCause::Aborted))
    }

    /// Aborts every ONGOING transaction whose timeout has passed at `now_ms` and returns
    /// their records (the caller counts them and aborts them on their participants).
    /// PREPARE transactions are never touched.
    pub fn expire(&mut self, now_ms: u64) -> Vec<TxnRecord> {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|id| {
                let txn = &self.txns[id.as_str()];
                txn.state == TxnState::Ongoing && now_ms >= txn.deadline_ms()
            })
            .cloned()
            .collect();
        let mut out = Vec::with_capacity(due.len());
        for id in due {
            self.finish(&id, TxnState::Aborted, now_ms, TxnChangeCause::TimedOut);
            out.push(self.get(&id).expect("just finished"));
        }
        out
    }

    /// Forgets finished transactions past retention (or beyond `finished_max`), oldest
    /// first; returns their ids.
    pub fn forget_finished(&mut self, now_ms: u64) -> Vec<String> {
        self.forget_oldest(|finish_ms, retention_ms| {
            finish_ms.saturating_add(retention_ms) <= now_ms
        })
    }

    /// Forgets the oldest finished transactions while `expired(finish time, retention)` or
    /// while more than `finished_max` are remembered. It stops at a transaction with
    /// acknowledgements still in flight: they must complete against *this* transaction (and
    /// be told it finished), not against a new one that reuses the id.
    fn forget_oldest(&mut self, expired: impl Fn(u64, u64) -> bool) -> Vec<String> {
        let mut forgotten = Vec::new();
        while let Some((finish_ms, id)) = self.finished.first().cloned() {
            if self.txns[&id].acks_in_flight > 0 {
                break;
            }
            if !expired(finish_ms, self.config.retention_ms)
                && self.finished.len() <= self.config.finished_max
            {
                break;
            }
            self.queue(&id, TxnChangeCause::Forgotten);
            self.finished.remove(&(finish_ms, id.clone()));
            let txn = self
                .txns
                .remove(&id)
                .expect("finished transaction is known");
            assert!(txn.state.is_finished());
            forgotten.push(id);
        }
        forgotten
    }

    /// ShareListTransactions: transactions in `states` (empty: ONGOING and PREPARE), by id.
    pub fn list(&mut self, states: &[TxnState], now_ms: u64) -> Vec<TxnRecord> {
        self.tick(now_ms);
        let pending_only = states.is_empty() || states.iter().all(|s| s.is_pending());
        let wanted = |s: TxnState| {
            if states.is_empty() {
                s.is_pending()
            } else {
                states.contains(&s)
            }
        };
        if pending_only {
            self.pending
                .iter()
                .map(|id| (id, &self.txns[id.as_str()]))
                .filter(|(_, t)| wanted(t.state))
                .map(|(id, t)| self.record(id, t))
                .collect()
        } else {
            self.txns
                .iter()
                .filter(|(_, t)| wanted(t.state))
                .map(|(id, t)| self.record(id, t))
                .collect()
        }
    }

    /// Checks every invariant (O(n)); tests call it after each operation.
    pub fn check_invariants(&self) {
        let mut pending = BTreeSet::new();
        let mut finished = BTreeSet::new();
        for (id, txn) in &self.txns {
            assert_ne!(txn.state, TxnState::Empty, "{id}: EMPTY is never stored");
            if txn.state.is_pending() {
                pending.insert(id.clone());
            } else {
                finished.insert((txn.finish_time_ms.expect("finished has a time"), id.clone()));
            }
            match txn.state {
                TxnState::Ongoing => {
                    assert!(txn.prepare_time_ms.is_none(), "{id}: ONGOING prepared")
                }
                TxnState::Prepare => assert!(txn.prepare_time_ms.is_some(), "{id}: prepare time"),
                _ => {}
            }
            if txn.state == TxnState::Committed {
                assert!(
                    txn.prepare_time_ms.is_some(),
                    "{id}: committed without prepare"
                );
                assert_eq!(txn.acks_in_flight, 0, "{id}: committed with acks in flight");
            }
        }
        assert_eq!(pending, self.pending, "pending index");
        assert_eq!(finished, self.finished, "finished index");
        self.check_finished_bound();
    }

    /// At most `finished_max` finished transactions, unless the oldest still has
    /// acknowledgements in flight (`forget_oldest`).
    fn check_finished_bound(&self) {
        let oldest_busy = self
            .finished
            .first()
            .is_some_and(|(_, id)| self.txns[id].acks_in_flight > 0);
        assert!(self.finished.len() <= self.config.finished_max || oldest_busy);
    }

    // ---- internals ----

    fn tick(&mut self, now_ms: u64) {
        self.expire(now_ms);
        self.forget_finished(now_ms);
    }

    /// Moves a pending transaction to COMMITTED or ABORTED and queues the change.
    fn finish(&mut self, id: &str, to: TxnState, now_ms: u64, cause: TxnChangeCause) -> TxnReply {
        let txn = self.txns.get_mut(id).expect("known transaction");
        validate_transition(txn.state, to).expect("caller checked the transition");
        txn.state = to;
        txn.finish_time_ms = Some(now_ms);
        let reply = txn.reply(true);
        assert!(self.pending.remove(id));
        assert!(self.finished.insert((now_ms, id.to_string())));
        self.queue(id, cause);
        // Keep at most finished_max (the one just finished is the newest, so it stays).
        self.forget_oldest(|_, _| false);
        self.check_finished_bound();
        reply
    }

    fn queue(&mut self, id: &str, cause: TxnChangeCause) {
        let record = self.get(id).expect("known transaction");
        self.changes.push(TxnChange { cause, record });
    }

    fn record(&self, id: &str, txn: &Txn) -> TxnRecord {
        TxnRecord {
            transaction_id: id.to_string(),
            group_id: self.group_id.clone(),
            state: txn.state,
            timeout_ms: txn.timeout_ms,
            create_time_ms: txn.create_time_ms,
            prepare_time_ms: txn.prepare_time_ms,
            finish_time_ms: txn.finish_time_ms,
            participants: txn
                .participants
                .iter()
                .map(|(&partition, &locked_records)| Participant {
                    partition,
                    locked_records,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
