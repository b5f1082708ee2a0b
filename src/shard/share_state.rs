//! Share groups on a shard (KIP-932): the state a shard owns and the synchronous operations
//! the share handlers run on it.
//!
//! Ownership:
//! - The **group's shard** (`model::group_shard`) holds the group's membership
//!   ([`ShareGroups`]) and the share sessions of its members ([`ShareSessions`]): a
//!   ShareFetch first updates its session there, then fetches from the partitions' shards.
//! - The **partition's shard** holds one [`SharePartition`] per (group, topic-partition),
//!   created on the first fetch at the offset `share.auto.offset.reset` names. Group configs come
//!   from the topic registry, which every shard has.
//!
//! Durability: every change of a share partition's durable view (module docs of
//! `share::durable`) becomes a journal entry ([`ShareState::take_entries`]): a reset as a
//! `SharePartitionSnapshot`, other changes as a `SharePartitionUpdate`; a deleted share
//! partition (DeleteShareGroupOffsets) as a snapshot without a start offset, a tombstone. The runtime appends
//! them to the shard's journal and answers an acknowledgement only once they are durable.
//! ACQUIRED never persists. A LOCKED run is journalled as AVAILABLE with its delivery count
//! decremented — what an abort makes of it: an ONGOING transaction does not survive a restart
//! (it is aborted, and its records come back at the count a live abort gives them),
//! and a prepared one persists its locks, with the acquisition's count, in its own
//! `TransactionLocks` entries, which replay on top.
//!
//! The log start offset is not journalled with the share state: after a restart
//! [`ShardState::share_apply_log_starts`] re-applies each log's start, and
//! [`ShardState::share_log_start_moved`] applies a move (retention; DeleteRecords calls it too).
//!
//! Admin (`server::share_admin`): start offsets are read, reset (AlterShareGroupOffsets, through
//! `SharePartition::set_start_offset`) and deleted here, on the partition's shard.
//!
//! Recovery ([`ShareState::restore`]): the journal's snapshot, then its entries in order,
//! rebuild the durable view of every share partition; [`SharePartition::from_snapshot`] turns
//! each back into a live partition with nothing acquired.

use super::ops::{
    PartitionRef, ShareAckOp, ShareAckResult, ShareFetchOp, ShareFetchedPartition, ShareOffset,
    SharePartitionError, ShareProbedPartition,
};
use super::registry::TopicRegistry;
use super::share_dlq::{self, DlqCopy, DlqTap};
use super::share_group::{AckMode, AutoOffsetReset, ShareGroups};
use super::share_session::ShareSessions;
use super::share_txn_state::{entry_to_record, locks_entry, record_to_entry, TxnCounters};
use super::state::ShardState;
use crate::constants::SHARE_FETCH_READ_BYTES_MAX;
use crate::journal::entries::{
    Entry, RunState, ShardSnapshot, SharePartitionState, StateRun as JournalRun, TransactionRecord,
};
use crate::journal::entries::{LockOutcome as JournalOutcome, LockedRange as JournalRange};
use crate::journal::Recovered;
use crate::log::batch::Batches;
use crate::model::TopicPartition;
use crate::share::fetch::acquire_from_log_in_mode;
use crate::share::LockOutcome;
use crate::share::{DurableState, ShareDelta, ShareError, SharePartition, ShareSnapshot, StateRun};
use crate::share_txn::{GroupTransactions, TxnRecord, TxnState};
use crate::storage::file::Storage;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use uuid::Uuid;

/// One batch of DLQ records for one DLQ partition (`ShardState::dlq_produces`).
#[derive(Clone, Debug)]
pub struct DlqProduce {
    pub group_id: String,
    pub target: PartitionRef,
    pub records: Bytes,
    pub count: usize,
}

/// A share partition: its group and topic-partition.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareKey {
    pub group_id: String,
    pub partition: TopicPartition,
}

/// The share-group state one shard owns (module docs).
#[derive(Debug, Default)]
pub struct ShareState {
    pub groups: ShareGroups,
    pub sessions: ShareSessions,
    partitions: BTreeMap<ShareKey, SharePartition>,
    /// Durable views recovered from the journal and not yet turned into live partitions
    /// (that needs the group's config, known when the partition is first used).
    recovered: BTreeMap<ShareKey, ShareSnapshot>,
    /// Journal entries produced and not yet taken by the runtime.
    entries: Vec<Entry>,
    /// Share transactions of the groups coordinated here (`shard::share_txn_state`).
    pub(crate) txns: HashMap<String, GroupTransactions>,
    /// (group, transaction) whose PREPARE record is in the journal (phase 1 finished).
    pub(crate) prepared_durable: BTreeSet<(String, String)>,
    /// Transactions the coordinator aborted for their timeout whose participants have not
    /// been told yet. Any operation on a group may notice a timeout (every
    /// `GroupTransactions` call expires first), not only housekeeping; the runtime takes
    /// these after every transaction operation and in housekeeping
    /// ([`ShareState::take_timed_out`], [`ShareState::txn_expire`]).
    pub(crate) timed_out: Vec<crate::share_txn::TxnRecord>,
    /// KIP-1191 copies owed to DLQ topics (`shard::share_dlq`), taken by the runtime.
    pub(crate) dlq: DlqTap,
    pub txn_counters: TxnCounters,
}

/// Why the journal could not be replayed: names the entry.
#[derive(Debug)]
pub struct RestoreError(pub String);

impl std::fmt::Display for RestoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RestoreError {}

/// The journal's runs for a durable view. A LOCKED run is journalled as what its abort would
/// make it: AVAILABLE with the delivery count decremented (module docs), so an ONGOING
/// transaction lost in a restart gives its records back at the same count a live abort does.
fn to_journal_runs(runs: &[StateRun]) -> Vec<JournalRun> {
    runs.iter()
        .map(|r| {
            let (state, delivery_count) = match r.state {
                DurableState::Available => (RunState::Available, r.delivery_count),
                DurableState::Locked { .. } => {
                    assert!(r.delivery_count >= 1, "a LOCKED record was delivered");
                    (RunState::Available, r.delivery_count - 1)
                }
                DurableState::Acknowledged => (RunState::Acknowledged, r.delivery_count),
                DurableState::Archived => (RunState::Archived, r.delivery_count),
            };
            JournalRun {
                first_offset: r.first,
                last_offset: r.last,
                state,
                delivery_count,
            }
        })
        .collect()
}

fn from_journal_runs(runs: &[JournalRun]) -> Vec<StateRun> {
    runs.iter()
        .map(|r| StateRun {
            first: r.first_offset,
            last: r.last_offset,
            state: match r.state {
                RunState::Available => DurableState::Available,
                RunState::Acknowledged => DurableState::Acknowledged,
                RunState::Archived => DurableState::Archived,
            },
            delivery_count: r.delivery_count,
        })
        .collect()
}

fn journal_state(key: &ShareKey, spso: i64, runs: &[StateRun]) -> SharePartitionState {
    SharePartitionState {
        group_id: key.group_id.clone(),
        topic_id: *key.partition.topic_id.as_bytes(),
        partition: key.partition.partition,
        start_offset: Some(spso),
        end_offset: None,
        state_epoch: 0,
        runs: to_journal_runs(runs),
    }
}

fn delta_entry(key: &ShareKey, delta: &ShareDelta) -> Entry {
    let state = journal_state(key, delta.spso, &delta.runs);
    if delta.reset {
        Entry::SharePartitionSnapshot(state)
    } else {
        Entry::SharePartitionUpdate(state)
    }
}

fn state_key(state: &SharePartitionState) -> ShareKey {
    ShareKey {
        group_id: state.group_id.clone(),
        partition: TopicPartition {
            topic_id: Uuid::from_bytes(state.topic_id),
            partition: state.partition,
        },
    }
}

impl ShareState {
    /// The live share partition of `key`, if there is one (read-only).
    pub(crate) fn live(&self, key: &ShareKey) -> Option<&SharePartition> {
        self.partitions.get(key)
    }

    /// The next fetch offset of a share partition recovered from the journal and not yet
    /// live (it becomes live with its first use), `None` if there is none or it is unusable.
    pub(crate) fn recovered_next_fetch_offset(
        &self,
        key: &ShareKey,
        config: crate::share::ShareConfig,
    ) -> Option<i64> {
        let view = self.recovered.get(key)?;
        let sp = SharePartition::from_snapshot(config, view).ok()?;
        Some(sp.next_fetch_offset())
    }

    /// Rebuilds the durable views, the transactions this shard coordinates, and the locks of
    /// prepared transactions from a recovered journal. ONGOING transactions are aborted (their
    /// ABORTED records are queued as entries); live partitions are made with the group configs
    /// of `registry`.
    pub fn restore(
        recovered: &Recovered,
        registry: &TopicRegistry,
        now_ms: u64,
    ) -> Result<ShareState, RestoreError> {
        let mut views: BTreeMap<ShareKey, ShareSnapshot> = BTreeMap::new();
        let mut records: BTreeMap<(String, String), TransactionRecord> = BTreeMap::new();
        let mut locks: BTreeMap<(ShareKey, String), Vec<JournalRange>> = BTreeMap::new();
        let mut apply =
            |entry: &Entry, reset_snapshot: bool, at: &str| -> Result<(), RestoreError> {
                match entry {
                    Entry::SharePartitionSnapshot(state) | Entry::SharePartitionUpdate(state) => {
                        let reset =
                            reset_snapshot || matches!(entry, Entry::SharePartitionSnapshot(_));
                        let key = state_key(state);
                        if reset && state.start_offset.is_none() {
                            // A tombstone: DeleteShareGroupOffsets removed the state.
                            views.remove(&key);
                            return Ok(());
                        }
                        let delta = ShareDelta {
                            spso: state.start_offset.unwrap_or(0),
                            reset,
                            runs: from_journal_runs(&state.runs),
                        };
                        let view = views.entry(key).or_insert_with(|| ShareSnapshot {
                            spso: delta.spso,
                            runs: Vec::new(),
                        });
                        view.apply_delta(&delta)
                            .map_err(|e: ShareError| RestoreError(format!("{at}: {e}")))
                    }
                    Entry::TransactionRecord(r) => {
                        records.insert((r.group_id.clone(), r.transaction_id.clone()), r.clone());
                        Ok(())
                    }
                    Entry::TransactionLocks(l) => {
                        let key = ShareKey {
                            group_id: l.group_id.clone(),
                            partition: TopicPartition {
                                topic_id: Uuid::from_bytes(l.topic_id),
                                partition: l.partition,
                            },
                        };
                        if l.ranges.is_empty() {
                            locks.remove(&(key, l.transaction_id.clone()));
                        } else {
                            locks.insert((key, l.transaction_id.clone()), l.ranges.clone());
                        }
                        Ok(())
                    }
                    _ => Ok(()),
                }
            };
        if let Some(snapshot) = &recovered.snapshot {
            let at = format!(
                "snapshot at {} byte {}",
                snapshot.location.path.display(),
                snapshot.location.position
            );
            let state = &snapshot.state;
            for s in &state.share_partitions {
                apply(&Entry::SharePartitionSnapshot(s.clone()), true, &at)?;
            }
            for t in &state.transactions {
                apply(&Entry::TransactionRecord(t.clone()), false, &at)?;
            }
            for l in &state.transaction_locks {
                apply(&Entry::TransactionLocks(l.clone()), false, &at)?;
            }
        }
        for entry in &recovered.entries {
            let at = format!(
                "entry {} at {} byte {}",
                entry.seq,
                entry.location.path.display(),
                entry.location.position
            );
            apply(&entry.entry, false, &at)?;
        }
        // Locks of prepared transactions go back over the offsets still AVAILABLE.
        for ((key, txn), ranges) in &locks {
            let Some(view) = views.get_mut(key) else {
                continue;
            };
            let runs = lock_overlay(view, txn, ranges);
            if runs.is_empty() {
                continue;
            }
            let delta = ShareDelta {
                spso: view.spso,
                reset: false,
                runs,
            };
            view.apply_delta(&delta)
                .map_err(|e| RestoreError(format!("locks of transaction {txn} on {key:?}: {e}")))?;
        }
        let mut shard = ShareState::default();
        let mut by_group: BTreeMap<String, Vec<TxnRecord>> = BTreeMap::new();
        for ((group, id), entry) in &records {
            if entry.state == crate::journal::entries::TxnState::Prepare {
                shard.prepared_durable.insert((group.clone(), id.clone()));
            }
            by_group
                .entry(group.clone())
                .or_default()
                .push(entry_to_record(entry));
        }
        for (group, records) in by_group {
            let config = registry.group_config(&group).txn;
            let txns = GroupTransactions::restore(&group, config, records, now_ms)
                .map_err(|e| RestoreError(format!("transactions of group {group}: {e}")))?;
            shard.txns.insert(group.clone(), txns);
            shard.drain_restored(&group);
        }
        for (key, view) in views {
            let config = registry.group_config(&key.group_id).share;
            let sp = SharePartition::from_snapshot(config, &view).map_err(|e| {
                RestoreError(format!(
                    "share state of {} on {:?}: {e}",
                    key.group_id, key.partition
                ))
            })?;
            shard.partitions.insert(key, sp);
        }
        Ok(shard)
    }

    fn drain_restored(&mut self, group: &str) {
        let Some(txns) = self.txns.get_mut(group) else {
            return;
        };
        for change in txns.take_changes() {
            if change.record.state == TxnState::Aborted {
                self.txn_counters.aborted += 1;
            }
            self.prepared_durable
                .remove(&(group.to_string(), change.record.transaction_id.clone()));
            let entry = record_to_entry(&change.record, change.record.state);
            self.entries.push(Entry::TransactionRecord(entry));
        }
    }

    /// The shard's whole durable share state, for a journal snapshot. Call after
    /// [`ShareState::take_entries`] so the snapshot follows every entry already appended.
    pub fn durable_snapshot(&mut self, now_ms: u64) -> ShardSnapshot {
        let mut share_partitions: Vec<SharePartitionState> = self
            .partitions
            .iter()
            .map(|(key, sp)| {
                let s = sp.snapshot();
                journal_state(key, s.spso, &s.runs)
            })
            .collect();
        share_partitions.extend(
            self.recovered
                .iter()
                .map(|(key, s)| journal_state(key, s.spso, &s.runs)),
        );
        let mut transactions = Vec::new();
        let all = [
            TxnState::Ongoing,
            TxnState::Prepare,
            TxnState::Committed,
            TxnState::Aborted,
        ];
        let groups: Vec<String> = self.txns.keys().cloned().collect();
        for group in &groups {
            let records = self.txns.get_mut(group).expect("listed").list(&all, now_ms);
            self.drain_txn_changes(group);
            for record in records {
                // A PREPARE whose record is not yet journalled is ONGOING on disk.
                let durable = self
                    .prepared_durable
                    .contains(&(group.clone(), record.transaction_id.clone()));
                let state = match record.state {
                    TxnState::Prepare if !durable => TxnState::Ongoing,
                    s => s,
                };
                transactions.push(record_to_entry(&record, state));
            }
        }
        let mut transaction_locks = Vec::new();
        // Every transaction's locks, whatever its state: this shard may be a participant of a
        // transaction another shard coordinates, and a prepare in phase 1 may have journalled its
        // locks before this snapshot and its PREPARE record after it (compaction may then drop the
        // segment that held the locks). Locks of a transaction that turns out ONGOING or ABORTED
        // at replay are released by the participants' resolution.
        for (key, sp) in &self.partitions {
            for txn in sp.locked_txns() {
                transaction_locks.push(locks_entry(key, &txn, &sp.locked_ranges(&txn)));
            }
        }
        ShardSnapshot {
            share_partitions,
            transactions,
            transaction_locks,
            group_offsets: Vec::new(),
            producer_transactions: Vec::new(),
        }
    }

    /// Journal entries produced since the last call.
    pub fn take_entries(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.entries)
    }

    pub(crate) fn push_entry(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    /// The live share partitions of one group.
    pub(crate) fn partitions_of<'a>(
        &'a self,
        group_id: &'a str,
    ) -> impl Iterator<Item = (&'a ShareKey, &'a SharePartition)> + 'a {
        self.partitions
            .iter()
            .filter(move |(k, _)| k.group_id == group_id)
    }

    /// The ACQUIRED runs of `sp` if its group has a DLQ (what a change may archive).
    pub(crate) fn dlq_watch(&self, key: &ShareKey, sp: &SharePartition) -> Vec<(i64, i64, u16)> {
        if self.dlq.watches(&key.group_id) {
            share_dlq::acquired_runs(sp)
        } else {
            Vec::new()
        }
    }

    /// Queues a DLQ copy of every record of `before` that a REJECT in `acks` or the delivery
    /// limit archived.
    pub(crate) fn dlq_archived(
        &mut self,
        key: &ShareKey,
        before: &[(i64, i64, u16)],
        sp: &SharePartition,
        acks: &[crate::share::AckBatch],
    ) {
        if before.is_empty() {
            return;
        }
        let limit = sp.config().delivery_count_limit;
        let copies = share_dlq::newly_archived(before, sp, acks, limit)
            .into_iter()
            .map(|(offset, delivery_count, cause)| DlqCopy {
                group_id: key.group_id.clone(),
                topic_id: key.partition.topic_id,
                partition: key.partition.partition,
                offset,
                delivery_count,
                cause,
                key: None,
                value: None,
            });
        self.dlq.push(copies);
    }

    fn record_delta(&mut self, key: &ShareKey, sp: &mut SharePartition) {
        if let Some(delta) = sp.take_delta() {
            self.entries.push(delta_entry(key, &delta));
        }
    }

    /// Releases the ACQUIRED records `member` of `group_id` holds on this shard.
    pub fn release_member(&mut self, group_id: &str, member_id: &str) -> u64 {
        let keys: Vec<ShareKey> = self
            .partitions
            .keys()
            .filter(|k| k.group_id == group_id)
            .cloned()
            .collect();
        let mut released = 0;
        for key in keys {
            let mut sp = self.partitions.remove(&key).expect("key listed");
            let before = self.dlq_watch(&key, &sp);
            released += sp.release_member(member_id);
            self.dlq_archived(&key, &before, &sp, &[]);
            self.record_delta(&key, &mut sp);
            self.partitions.insert(key, sp);
        }
        released
    }

    /// Returns expired acquisition locks to AVAILABLE (or ARCHIVED at the delivery limit).
    pub fn expire_locks(&mut self, now_ms: u64) -> u64 {
        let keys: Vec<ShareKey> = self.partitions.keys().cloned().collect();
        let mut expired = 0;
        for key in keys {
            let mut sp = self.partitions.remove(&key).expect("key listed");
            let before = self.dlq_watch(&key, &sp);
            expired += sp.expire_locks(now_ms);
            self.dlq_archived(&key, &before, &sp, &[]);
            self.record_delta(&key, &mut sp);
            self.partitions.insert(key, sp);
        }
        expired
    }

    /// Forgets share partitions of topics that no longer exist.
    pub fn retain_topics(&mut self, registry: &TopicRegistry) {
        self.partitions
            .retain(|k, _| registry.topic_by_id(&k.partition.topic_id).is_some());
        self.recovered
            .retain(|k, _| registry.topic_by_id(&k.partition.topic_id).is_some());
    }

    /// The groups that have share-partition state on this shard (live or only recovered).
    pub fn groups_with_state(&self) -> BTreeSet<String> {
        self.partitions
            .keys()
            .chain(self.recovered.keys())
            .map(|k| k.group_id.clone())
            .collect()
    }

    /// The share-partition start offset of `key`, live or only recovered; `None`: no state.
    pub fn start_offset(&self, key: &ShareKey) -> Option<i64> {
        match self.partitions.get(key) {
            Some(sp) => Some(sp.spso()),
            None => self.recovered.get(key).map(|view| view.spso),
        }
    }

    /// The share-partition lag of `key` (KIP-1226) given the partition's high watermark: the
    /// records from the SPSO up to the high watermark whose delivery is not complete (not
    /// ACKNOWLEDGED or ARCHIVED); -1 when the group has no state or the partition is not here.
    /// For state only recovered (not loaded yet) the in-flight window is not counted.
    pub fn lag(&self, key: &ShareKey, high_watermark: i64) -> i64 {
        if high_watermark < 0 {
            return -1;
        }
        match self.partitions.get(key) {
            Some(sp) => {
                ((high_watermark - sp.spso()).max(0) - sp.completed_records() as i64).max(0)
            }
            None => self
                .recovered
                .get(key)
                .map_or(-1, |view| (high_watermark - view.spso).max(0)),
        }
    }

    /// Every partition `group_id` has state for on this shard, with its start offset, sorted.
    pub fn start_offsets(&self, group_id: &str) -> Vec<(TopicPartition, i64)> {
        let mut out: Vec<(TopicPartition, i64)> = self
            .partitions
            .iter()
            .filter(|(k, _)| k.group_id == group_id)
            .map(|(k, sp)| (k.partition, sp.spso()))
            .chain(
                self.recovered
                    .iter()
                    .filter(|(k, _)| k.group_id == group_id)
                    .map(|(k, view)| (k.partition, view.spso)),
            )
            .collect();
        out.sort();
        out
    }

    /// DeleteShareGroupOffsets: forgets the state of `key` and journals a tombstone (a
    /// snapshot without a start offset). Refused while records are acquired or locked.
    /// Returns whether there was state.
    pub fn delete_state(&mut self, key: &ShareKey) -> Result<bool, ShareError> {
        if let Some(sp) = self.partitions.get(key) {
            let (acquired_records, locked_records) = (sp.acquired_records(), sp.locked_records());
            if acquired_records > 0 || locked_records > 0 {
                return Err(ShareError::RecordsInFlight {
                    acquired_records,
                    locked_records,
                });
            }
        }
        let live = self.partitions.remove(key).is_some();
        let recovered = self.recovered.remove(key).is_some();
        if !(live || recovered) {
            return Ok(false);
        }
        let mut tombstone = journal_state(key, 0, &[]);
        tombstone.start_offset = None;
        self.entries.push(Entry::SharePartitionSnapshot(tombstone));
        Ok(true)
    }

    /// The live share partitions (for describe and tests).
    pub fn partitions(&self) -> impl Iterator<Item = (&ShareKey, &SharePartition)> {
        self.partitions.iter()
    }
}

impl<S: Storage + Clone> ShardState<S> {
    /// Takes the share partition of `key` out of the map (creating or recovering it), so the
    /// caller can use it alongside the partition's log; put it back with `put_share`.
    fn take_share(
        &mut self,
        key: &ShareKey,
        r: &PartitionRef,
        now_ms: u64,
    ) -> Result<SharePartition, (SharePartitionError, String)> {
        let config = self.registry().group_config(&key.group_id);
        if let Some(mut sp) = self.share.partitions.remove(key) {
            if *sp.config() != config.share {
                sp.set_config(config.share);
            }
            return Ok(sp);
        }
        if let Some(view) = self.share.recovered.remove(key) {
            return SharePartition::from_snapshot(config.share, &view).map_err(|e| {
                (
                    SharePartitionError::StateUnusable,
                    format!(
                        "share state of {}-{} is unusable: {e}",
                        r.topic, r.partition
                    ),
                )
            });
        }
        let partition = self.lookup(r).map_err(|e| {
            (
                SharePartitionError::Partition(e),
                format!("{}-{} is not served here", r.topic, r.partition),
            )
        })?;
        let start = match config.auto_offset_reset {
            AutoOffsetReset::Latest => partition.high_watermark(),
            AutoOffsetReset::Earliest => partition.log.log_start_offset() as i64,
            // The first record at most that old; none: the log end (Kafka's by_duration).
            AutoOffsetReset::ByDuration(ms) => {
                let since = i64::try_from(now_ms.saturating_sub(ms)).unwrap_or(i64::MAX);
                match partition.log.offset_for_timestamp(since) {
                    Ok(Some((offset, _))) => (offset as i64).min(partition.high_watermark()),
                    Ok(None) => partition.high_watermark(),
                    Err(e) => {
                        return Err((
                            SharePartitionError::Log(e.kind()),
                            format!("{}-{}: {e}", r.topic, r.partition),
                        ))
                    }
                }
            }
        };
        Ok(SharePartition::new(config.share, start))
    }

    /// The share partition of `key` if the group has state for it (taken out of the map;
    /// put it back with `put_share`).
    pub(crate) fn take_existing_share(&mut self, key: &ShareKey) -> Option<SharePartition> {
        let config = self.registry().group_config(&key.group_id);
        if let Some(mut sp) = self.share.partitions.remove(key) {
            if *sp.config() != config.share {
                sp.set_config(config.share);
            }
            return Some(sp);
        }
        let view = self.share.recovered.remove(key)?;
        SharePartition::from_snapshot(config.share, &view).ok()
    }

    pub(crate) fn put_share(&mut self, key: ShareKey, mut sp: SharePartition) {
        self.share.record_delta(&key, &mut sp);
        self.share.partitions.insert(key, sp);
    }

    /// After a restart: every share partition learns its log's start offset again (it is not
    /// journalled with the share state; the log has it).
    pub fn share_apply_log_starts(&mut self) -> u64 {
        let keys: BTreeSet<TopicPartition> = self
            .share
            .partitions
            .keys()
            .chain(self.share.recovered.keys())
            .map(|k| k.partition)
            .collect();
        let mut archived = 0;
        for key in keys {
            if let Some(partition) = self.partition(&key) {
                let start = partition.log.log_start_offset() as i64;
                archived += self.share_log_start_moved(key, start);
            }
        }
        archived
    }

    /// Prepares `r`'s share partition for a fetch (its start offset moves up to the log start
    /// if retention passed it) and reads whole batches below the high watermark from its next
    /// fetch offset: at most `ask` bytes, or the first batch whatever its size if `min_one_batch`
    /// (nothing at all if `ask` is 0). Returns the batches (headers parsed once, here), or the
    /// partition's error, and the offset a long poll waits for.
    fn share_read(
        &mut self,
        sp: &mut SharePartition,
        r: &PartitionRef,
        ask: usize,
        max_records: u64,
        min_one_batch: bool,
        read_committed: bool,
    ) -> (Result<Batches, (SharePartitionError, Option<String>)>, i64) {
        let mut hw = 0;
        let read = match self.lookup(r) {
            Err(e) => Err((SharePartitionError::Partition(e), None)),
            Ok(partition) => {
                let start = partition.log.log_start_offset() as i64;
                // Normally applied when the log start moved (`share_log_start_moved`); a
                // partition created or restored since learns it here.
                sp.move_log_start(start);
                // share.isolation.level=read_committed: only below the last stable offset.
                hw = partition.readable_end(read_committed);
                let from = sp.next_fetch_offset().max(start);
                let capped = sp.in_flight_records()
                    >= u64::from(sp.config().partition_max_record_locks)
                    && from > sp.speo();
                if from >= hw || ask == 0 || capped {
                    Ok(Batches::default())
                } else {
                    // Read what one fetch can plausibly hand out, not the whole byte budget
                    // (clients ask for 50 MiB and 500 records): the record budget, plus the
                    // records in flight that may lie between.
                    let ask = ask.min(SHARE_FETCH_READ_BYTES_MAX);
                    let records = max_records.saturating_add(sp.in_flight_records());
                    match partition.log.read_records(from as u64, ask, records) {
                        Ok(read) => {
                            let below_hw = Batches::parse(read.records).below(hw);
                            Ok(if min_one_batch {
                                below_hw
                            } else {
                                below_hw.fit(ask)
                            })
                        }
                        Err(e) => Err((SharePartitionError::Log(e.kind()), Some(e.to_string()))),
                    }
                }
            }
        };
        // A long poll waits for records past what is in flight; at the in-flight cap, for
        // records past the high watermark (only a release or an expiry frees room then,
        // and the poll looks again for those every SHARE_FETCH_RECHECK_MS).
        let capped = sp.in_flight_records() >= u64::from(sp.config().partition_max_record_locks);
        let wait_offset = if capped {
            hw.max(sp.speo() + 1)
        } else {
            sp.speo() + 1
        };
        (read, wait_offset)
    }

    /// Acquires records for a ShareFetch from each partition, in the op's order (module docs
    /// of `share_fetch`): the op's record budget is shared (Kafka's soft limit), each partition
    /// reads at most the op's per-partition bytes. Only durable data (below the high
    /// watermark) is handed out.
    pub fn share_fetch(&mut self, op: &ShareFetchOp, now_ms: u64) -> Vec<ShareFetchedPartition> {
        let mut records_left = u64::from(op.max_records);
        let mut min_one_batch = op.min_one_batch;
        let read_committed = self.registry().group_config(&op.group_id).read_committed;
        let mut out = Vec::with_capacity(op.partitions.len());
        for r in &op.partitions {
            let key = ShareKey {
                group_id: op.group_id.clone(),
                partition: r.key(),
            };
            let mut result = ShareFetchedPartition {
                partition: r.key(),
                error: None,
                error_message: None,
                records: Bytes::new(),
                acquired: Vec::new(),
                wait_offset: 0,
                created: !self.share.partitions.contains_key(&key),
            };
            let mut sp = match self.take_share(&key, r, now_ms) {
                Ok(sp) => sp,
                Err((error, message)) => {
                    result.error = Some(error);
                    result.error_message = Some(message);
                    out.push(result);
                    continue;
                }
            };
            let ask = if records_left == 0 || (result.created && !op.acquire_created) {
                0
            } else {
                op.partition_max_bytes
            };
            let (read, wait_offset) =
                self.share_read(&mut sp, r, ask, records_left, min_one_batch, read_committed);
            match read {
                Ok(batches) if !batches.is_empty() => {
                    let budget = u32::try_from(records_left).expect("budget from a u32");
                    let fetched = acquire_from_log_in_mode(
                        &mut sp,
                        &op.member_id,
                        &batches,
                        budget,
                        op.batch_size,
                        op.record_limit,
                        now_ms,
                    );
                    // Markers are never delivered, nor aborted data under read_committed.
                    let unreadable = self.lookup(r).map_or(Vec::new(), |p| {
                        crate::producer_txn::share_side::unreadable_ranges(
                            batches.spans(),
                            &p.txns,
                            read_committed,
                        )
                    });
                    let fetched = crate::producer_txn::share_side::archive_unreadable(
                        &mut sp,
                        &op.member_id,
                        &batches,
                        fetched,
                        &unreadable,
                        now_ms,
                    );
                    records_left = records_left.saturating_sub(fetched.count);
                    if !fetched.records.is_empty() {
                        min_one_batch = false;
                    }
                    result.records = fetched.records;
                    result.acquired = fetched.acquired;
                }
                Ok(_) => {}
                Err((error, message)) => {
                    result.error = Some(error);
                    result.error_message = message;
                }
            }
            result.wait_offset = wait_offset;
            self.put_share(key, sp);
            out.push(result);
        }
        out
    }

    /// What each partition could hand out now, without acquiring (a ShareFetch's MinBytes
    /// check): the bytes of whole batches from its next fetch offset to the high watermark, at
    /// most the op's per-partition bytes (more only if the first batch alone is larger).
    pub fn share_probe(
        &mut self,
        group_id: &str,
        partitions: &[PartitionRef],
        partition_max_bytes: usize,
        now_ms: u64,
    ) -> Vec<ShareProbedPartition> {
        partitions
            .iter()
            .map(|r| {
                let key = ShareKey {
                    group_id: group_id.to_string(),
                    partition: r.key(),
                };
                let mut probed = ShareProbedPartition {
                    partition: r.key(),
                    error: None,
                    available_bytes: 0,
                    wait_offset: 0,
                };
                match self.take_share(&key, r, now_ms) {
                    Err((error, _)) => probed.error = Some(error),
                    Ok(mut sp) => {
                        let read_committed = self.registry().group_config(group_id).read_committed;
                        let (read, wait_offset) = self.share_read(
                            &mut sp,
                            r,
                            partition_max_bytes,
                            u64::MAX,
                            true,
                            read_committed,
                        );
                        match read {
                            Ok(batches) => probed.available_bytes = batches.bytes().len(),
                            Err((error, _)) => probed.error = Some(error),
                        }
                        probed.wait_offset = wait_offset;
                        self.put_share(key, sp);
                    }
                }
                probed
            })
            .collect()
    }

    /// Applies acknowledgements (each partition all-or-nothing).
    pub fn share_acknowledge(&mut self, op: &ShareAckOp, now_ms: u64) -> Vec<ShareAckResult> {
        if self.registry().group_config(&op.group_id).ack_mode == AckMode::Transactional {
            let message = format!(
                "group {} acknowledges inside share transactions \
                 (share.acknowledgement.mode=transactional): use ShareAcknowledgeTransactional",
                op.group_id
            );
            return op
                .partitions
                .iter()
                .map(|_| ShareAckResult::error(SharePartitionError::TransactionalGroup, &message))
                .collect();
        }
        op.partitions
            .iter()
            .map(|(r, batches)| {
                let key = ShareKey {
                    group_id: op.group_id.clone(),
                    partition: r.key(),
                };
                if let Err(e) = self.lookup(r) {
                    if !self.share.partitions.contains_key(&key) {
                        return ShareAckResult::error(
                            SharePartitionError::Partition(e),
                            "unknown topic-partition",
                        );
                    }
                }
                if !self.share.partitions.contains_key(&key)
                    && !self.share.recovered.contains_key(&key)
                {
                    return ShareAckResult::error(
                        SharePartitionError::NothingAcquired,
                        "no records of this partition were acquired by the group",
                    );
                }
                let mut sp = match self.take_share(&key, r, now_ms) {
                    Ok(sp) => sp,
                    Err((error, message)) => return ShareAckResult::error(error, message),
                };
                let before = self.share.dlq_watch(&key, &sp);
                let result = match sp.acknowledge(&op.member_id, batches, now_ms) {
                    Ok(_) => {
                        self.share.dlq_archived(&key, &before, &sp, batches);
                        ShareAckResult::ok()
                    }
                    Err(e) => {
                        let message = e.to_string();
                        ShareAckResult::error(SharePartitionError::Share(e), message)
                    }
                };
                self.put_share(key, sp);
                result
            })
            .collect()
    }

    /// The DLQ copies owed (KIP-1191, `shard::share_dlq`), taken: the caller owns them, reads
    /// their records ahead ([`Self::dlq_read_ahead`]) and produces them
    /// ([`Self::dlq_produces`]).
    pub fn take_dlq_copies(&mut self) -> Vec<DlqCopy> {
        self.share.dlq.take()
    }

    /// The partition a DLQ copy's record is read from, if its group copies records
    /// (`errors.deadletterqueue.copy.record.enable`) and its topic is still there.
    pub(crate) fn dlq_source(&self, copy: &DlqCopy) -> Option<PartitionRef> {
        let target = share_dlq::resolve_target(self.registry(), &copy.group_id).ok()?;
        let source = self.registry().topic_by_id(&copy.topic_id)?;
        target.copy_record.then(|| PartitionRef {
            topic: source.name.clone(),
            topic_id: copy.topic_id,
            partition: copy.partition,
        })
    }

    /// The DLQ produces of `copies`: one batch per (group, DLQ partition), with the original
    /// key and value read from this shard's logs when the group copies records (a record gone
    /// meanwhile, to retention, is copied without them). Copies whose group's DLQ topic is
    /// unusable are dropped; the returned messages say why (Kafka archives them anyway).
    pub fn dlq_produces(
        &mut self,
        copies: Vec<DlqCopy>,
        now_ms: i64,
    ) -> (Vec<DlqProduce>, Vec<String>) {
        let mut failures = Vec::new();
        let mut out: Vec<DlqProduce> = Vec::new();
        let mut by_target: BTreeMap<(String, i32), Vec<DlqCopy>> = BTreeMap::new();
        let mut targets: BTreeMap<String, share_dlq::DlqTarget> = BTreeMap::new();
        for mut copy in copies {
            let target = match targets.get(&copy.group_id) {
                Some(t) => t.clone(),
                None => match share_dlq::resolve_target(self.registry(), &copy.group_id) {
                    Ok(t) => {
                        targets.insert(copy.group_id.clone(), t.clone());
                        t
                    }
                    Err(e) => {
                        failures.push(e);
                        continue;
                    }
                },
            };
            let source = self
                .registry()
                .topic_by_id(&copy.topic_id)
                .map(|m| m.name.clone());
            if target.copy_record {
                if let Some(name) = &source {
                    let r = PartitionRef {
                        topic: name.clone(),
                        topic_id: copy.topic_id,
                        partition: copy.partition,
                    };
                    if let Ok(partition) = self.lookup(&r) {
                        // The batch holding the record: the first one a read returns.
                        if let Ok(read) = partition.log.read(copy.offset as u64, 1) {
                            if let Some((k, v)) = share_dlq::find_record(&read.records, copy.offset)
                            {
                                copy.key = k;
                                copy.value = v;
                            }
                        }
                    }
                }
            }
            let p = share_dlq::target_partition(copy.partition, target.partitions);
            by_target
                .entry((copy.group_id.clone(), p))
                .or_default()
                .push(copy);
        }
        for ((group_id, p), copies) in by_target {
            let target = &targets[&group_id];
            let registry = self.registry();
            let records = share_dlq::encode_batch(
                &copies,
                |c| {
                    registry
                        .topic_by_id(&c.topic_id)
                        .map_or_else(|| c.topic_id.to_string(), |m| m.name.clone())
                },
                target.copy_record,
                now_ms,
            );
            out.push(DlqProduce {
                group_id,
                target: PartitionRef {
                    topic: target.topic.clone(),
                    topic_id: target.topic_id,
                    partition: p,
                },
                records,
                count: copies.len(),
            });
        }
        (out, failures)
    }

    /// DescribeShareGroupOffsets on this shard: the start offset (-1: no state) and high
    /// watermark of each named partition, or of every partition the group has state for.
    pub fn share_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[PartitionRef]>,
    ) -> Vec<ShareOffset> {
        let high_watermark = |r: &PartitionRef| self.lookup(r).map_or(-1, |p| p.high_watermark());
        match partitions {
            Some(refs) => refs
                .iter()
                .map(|r| {
                    let key = ShareKey {
                        group_id: group_id.to_string(),
                        partition: r.key(),
                    };
                    let hw = high_watermark(r);
                    ShareOffset {
                        partition: key.partition,
                        start_offset: self.share.start_offset(&key).unwrap_or(-1),
                        high_watermark: hw,
                        lag: self.share.lag(&key, hw),
                    }
                })
                .collect(),
            None => self
                .share
                .start_offsets(group_id)
                .into_iter()
                .map(|(partition, start_offset)| {
                    let hw = self
                        .registry()
                        .topic_by_id(&partition.topic_id)
                        .map_or(-1, |t| {
                            high_watermark(&PartitionRef {
                                topic: t.name.clone(),
                                topic_id: partition.topic_id,
                                partition: partition.partition,
                            })
                        });
                    let key = ShareKey {
                        group_id: group_id.to_string(),
                        partition,
                    };
                    ShareOffset {
                        partition,
                        start_offset,
                        high_watermark: hw,
                        lag: self.share.lag(&key, hw),
                    }
                })
                .collect(),
        }
    }

    /// The log start of `partition` moved to `start` (DeleteRecords, retention, and after a
    /// restart): every group's share state of the partition follows it
    /// (`SharePartition::move_log_start`: AVAILABLE below it ARCHIVED, ACQUIRED and LOCKED there
    /// archived when their lock or transaction ends, state above untouched), journalled.
    /// Returns the records archived.
    pub fn share_log_start_moved(&mut self, partition: TopicPartition, start: i64) -> u64 {
        let keys: Vec<ShareKey> = self
            .share
            .partitions
            .keys()
            .chain(self.share.recovered.keys())
            .filter(|k| k.partition == partition)
            .cloned()
            .collect();
        let mut archived = 0;
        for key in keys {
            let Some(mut sp) = self.take_existing_share(&key) else {
                continue;
            };
            archived += sp.move_log_start(start);
            self.put_share(key, sp);
        }
        archived
    }

    /// AlterShareGroupOffsets on this shard: each partition's share state restarts at its
    /// offset (created if the group had none). Refused for a partition with records in flight.
    pub fn share_alter_offsets(
        &mut self,
        group_id: &str,
        partitions: &[(PartitionRef, i64)],
    ) -> Vec<ShareAckResult> {
        partitions
            .iter()
            .map(|(r, offset)| {
                if let Err(e) = self.lookup(r) {
                    return ShareAckResult::error(
                        SharePartitionError::Partition(e),
                        "unknown topic-partition",
                    );
                }
                let key = ShareKey {
                    group_id: group_id.to_string(),
                    partition: r.key(),
                };
                // The start offset is set just below: the time of a by_duration reset is moot.
                let mut sp = match self.take_share(&key, r, 0) {
                    Ok(sp) => sp,
                    Err((error, message)) => return ShareAckResult::error(error, message),
                };
                let result = match sp.set_start_offset(*offset) {
                    Ok(()) => ShareAckResult::ok(),
                    Err(e) => {
                        let message = e.to_string();
                        ShareAckResult::error(SharePartitionError::Share(e), message)
                    }
                };
                self.put_share(key, sp);
                result
            })
            .collect()
    }

    /// DeleteShareGroupOffsets on this shard: forgets the group's state of every partition of
    /// each topic; one result per topic id.
    pub fn share_delete_offsets(
        &mut self,
        group_id: &str,
        topic_ids: &[Uuid],
    ) -> Vec<ShareAckResult> {
        let held = self.share.start_offsets(group_id);
        topic_ids
            .iter()
            .map(|topic_id| {
                let mut result = ShareAckResult::ok();
                for (partition, _) in held.iter().filter(|(p, _)| p.topic_id == *topic_id) {
                    let key = ShareKey {
                        group_id: group_id.to_string(),
                        partition: *partition,
                    };
                    if let Err(e) = self.share.delete_state(&key) {
                        let message = e.to_string();
                        result = ShareAckResult::error(SharePartitionError::Share(e), message);
                    }
                }
                result
            })
            .collect()
    }
}

/// The LOCKED runs that put `ranges` of transaction `txn` back over `view`: only offsets at or
/// past SPSO whose durable state is AVAILABLE (LOCKED journals as AVAILABLE; anything else
/// there means the decision was already applied).
fn lock_overlay(view: &ShareSnapshot, txn: &str, ranges: &[JournalRange]) -> Vec<StateRun> {
    let mut out = Vec::new();
    for range in ranges {
        let outcome = match range.outcome {
            JournalOutcome::Accept => LockOutcome::Accept,
            JournalOutcome::Reject | JournalOutcome::Gap => LockOutcome::Reject,
        };
        let last = range.last_offset;
        let mut pieces: Vec<(i64, i64)> = Vec::new();
        let mut cursor = range.first_offset.max(view.spso);
        for run in &view.runs {
            if run.last < cursor || run.first > last {
                continue;
            }
            // The gap before this run is AVAILABLE (never delivered).
            pieces.push((cursor, (run.first - 1).min(last)));
            if run.state == DurableState::Available {
                pieces.push((run.first.max(cursor), run.last.min(last)));
            }
            cursor = run.last + 1;
        }
        pieces.push((cursor, last));
        for (first, last) in pieces.into_iter().filter(|(a, b)| a <= b) {
            out.push(StateRun {
                first,
                last,
                state: DurableState::Locked {
                    txn: txn.to_string(),
                    outcome,
                },
                delivery_count: range.delivery_count,
            });
        }
    }
    out.sort_by_key(|r| r.first);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Location, RecoveredEntry};
    use crate::shard::share_txn_state::locks_entry;
    use crate::share::{AckBatch, AcknowledgeType, ShareConfig};
    use std::path::Path;
    use std::sync::Arc;

    fn recovered(entries: &[Entry]) -> Recovered {
        Recovered {
            entries: entries
                .iter()
                .enumerate()
                .map(|(seq, entry)| RecoveredEntry {
                    seq: seq as u64,
                    location: Location {
                        path: Arc::from(Path::new("/journal")),
                        position: 0,
                    },
                    entry: entry.clone(),
                })
                .collect(),
            ..Recovered::default()
        }
    }

    /// Records of an ONGOING transaction lost in a restart come back at the delivery
    /// count a live abort gives them — with or without the transaction's locks in the journal
    /// (a journal snapshot carries the locks of every transaction, ONGOING ones included).
    #[test]
    fn an_abort_at_restart_gives_the_same_delivery_count_as_a_live_abort() {
        let key = ShareKey {
            group_id: "g".into(),
            partition: TopicPartition {
                topic_id: Uuid::from_u128(7),
                partition: 0,
            },
        };
        let config = ShareConfig::default();
        let mut sp = SharePartition::new(config, 0);
        let mut journal = vec![delta_entry(&key, &sp.take_delta().unwrap())];
        for _ in 0..2 {
            // Two deliveries: the second at count 2 is locked.
            sp.acquire("m", 10, 10, 0);
            sp.release_member("m");
        }
        sp.acquire("m", 10, 10, 0);
        sp.lock("m", "tx", &[AckBatch::new(0, 9, AcknowledgeType::Accept)])
            .unwrap();
        assert_eq!(sp.record(0).unwrap().delivery_count, 3);
        journal.push(delta_entry(&key, &sp.take_delta().unwrap()));
        let locks = Entry::TransactionLocks(locks_entry(&key, "tx", &sp.locked_ranges("tx")));

        let mut live = sp.clone();
        assert_eq!(live.abort("tx"), 10);
        let live_count = live.acquire("m", 10, 10, 0)[0].delivery_count;
        assert_eq!(live_count, 3, "an aborted delivery is not counted");

        let registry = TopicRegistry::new("test".into());
        for with_locks in [false, true] {
            let mut entries = journal.clone();
            if with_locks {
                entries.push(locks.clone());
            }
            let mut shard = ShareState::restore(&recovered(&entries), &registry, 0).unwrap();
            let mut restored = shard.partitions.remove(&key).expect("restored");
            // The participant resolves the locks it finds: the transaction is gone (aborted).
            assert_eq!(restored.locked_txns().is_empty(), !with_locks);
            restored.abort("tx");
            let got = restored.acquire("m", 10, 10, 0);
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(
                (got[0].first, got[0].last, got[0].delivery_count),
                (0, 9, live_count),
                "with locks in the journal: {with_locks}"
            );
        }
    }
}
