//! Share groups on a shard (KIP-932): the state a shard owns and the synchronous operations
//! the share handlers run on it.
//!
//! Ownership (DESIGN.md §6):
//! - The **group's shard** (`model::group_shard`) holds the group's membership
//!   ([`ShareGroups`]) and the share sessions of its members ([`ShareSessions`]): a
//!   ShareFetch first updates its session there, then fetches from the partitions' shards.
//! - The **partition's shard** holds one [`SharePartition`] per (group, topic-partition),
//!   created on the first fetch at the offset `share.auto.offset.reset` names. Group configs come
//!   from the topic registry, which every shard has.
//!
//! Durability: every change of a share partition's durable view (module docs of
//! `share::durable`) becomes a journal entry ([`ShareShard::take_entries`]): a reset as a
//! `SharePartitionSnapshot`, other changes as a `SharePartitionUpdate`; a deleted share
//! partition (DeleteShareGroupOffsets) as a snapshot without a start offset, a tombstone. The runtime appends
//! them to the shard's journal and answers an acknowledgement only once they are durable.
//! ACQUIRED never persists. A LOCKED run is journalled as AVAILABLE here: an ONGOING
//! transaction does not survive a restart, and a prepared one persists its locks in its own
//! `TransactionLocks` entries, which replay on top (issue 5).
//!
//! Admin (`server::share_admin`): start offsets are read, reset (AlterShareGroupOffsets, through
//! `SharePartition::set_start_offset`) and deleted here, on the partition's shard.
//!
//! Recovery ([`ShareShard::restore`]): the journal's snapshot, then its entries in order,
//! rebuild the durable view of every share partition; [`SharePartition::from_snapshot`] turns
//! each back into a live partition with nothing acquired.

use super::ops::{
    PartitionRef, ShareAckOp, ShareAckResult, ShareFetchOp, ShareFetchedPartition, ShareOffset,
};
use super::registry::TopicRegistry;
use super::shard::{log_error_code, trim_to, PartitionKey, ShardState};
use super::share_fetch::acquire_from_log;
use super::share_group::{AutoOffsetReset, ShareGroups};
use super::share_session::ShareSessions;
use crate::journal::entries::{
    Entry, RunState, ShardSnapshot, SharePartitionState, StateRun as JournalRun,
};
use crate::journal::Recovered;
use crate::share::{DurableState, ShareDelta, ShareError, SharePartition, ShareSnapshot, StateRun};
use crate::storage::file::Storage;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// A share partition: its group and topic-partition.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareKey {
    pub group_id: String,
    pub partition: PartitionKey,
}

/// The share-group state one shard owns (module docs).
#[derive(Debug, Default)]
pub struct ShareShard {
    pub groups: ShareGroups,
    pub sessions: ShareSessions,
    partitions: BTreeMap<ShareKey, SharePartition>,
    /// Durable views recovered from the journal and not yet turned into live partitions
    /// (that needs the group's config, known when the partition is first used).
    recovered: BTreeMap<ShareKey, ShareSnapshot>,
    /// Journal entries produced and not yet taken by the runtime.
    entries: Vec<Entry>,
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

fn to_journal_runs(runs: &[StateRun]) -> Vec<JournalRun> {
    runs.iter()
        .map(|r| JournalRun {
            first_offset: r.first,
            last_offset: r.last,
            state: match r.state {
                DurableState::Available | DurableState::Locked { .. } => RunState::Available,
                DurableState::Acknowledged => RunState::Acknowledged,
                DurableState::Archived => RunState::Archived,
            },
            delivery_count: r.delivery_count,
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
        partition: PartitionKey {
            topic_id: Uuid::from_bytes(state.topic_id),
            partition: state.partition,
        },
    }
}

impl ShareShard {
    /// Rebuilds the durable views from a recovered journal.
    pub fn restore(recovered: &Recovered) -> Result<ShareShard, RestoreError> {
        let mut views: BTreeMap<ShareKey, ShareSnapshot> = BTreeMap::new();
        let mut apply = |state: &SharePartitionState, reset: bool, at: &str| {
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
        };
        if let Some(snapshot) = &recovered.snapshot {
            let at = format!(
                "snapshot at {} byte {}",
                snapshot.location.path.display(),
                snapshot.location.position
            );
            for state in &snapshot.state.share_partitions {
                apply(state, true, &at)?;
            }
        }
        for entry in &recovered.entries {
            let at = format!(
                "entry {} at {} byte {}",
                entry.seq,
                entry.location.path.display(),
                entry.location.position
            );
            match &entry.entry {
                Entry::SharePartitionSnapshot(state) => apply(state, true, &at)?,
                Entry::SharePartitionUpdate(state) => apply(state, false, &at)?,
                _ => {}
            }
        }
        Ok(ShareShard {
            recovered: views,
            ..ShareShard::default()
        })
    }

    /// The shard's whole durable share state, for a journal snapshot. Call after
    /// [`ShareShard::take_entries`] so nothing is pending.
    pub fn durable_snapshot(&self) -> ShardSnapshot {
        assert!(self.entries.is_empty(), "entries pending at snapshot");
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
        ShardSnapshot {
            share_partitions,
            ..ShardSnapshot::default()
        }
    }

    /// Journal entries produced since the last call.
    pub fn take_entries(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.entries)
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
            released += sp.release_member(member_id);
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
            expired += sp.expire_locks(now_ms);
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

    /// The live share partitions (for describe and tests).
    pub fn partitions(&self) -> impl Iterator<Item = (&ShareKey, &SharePartition)> {
        self.partitions.iter()
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

    /// Every partition `group_id` has state for on this shard, with its start offset, sorted.
    pub fn start_offsets(&self, group_id: &str) -> Vec<(PartitionKey, i64)> {
        let mut out: Vec<(PartitionKey, i64)> = self
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
}

impl<S: Storage + Clone> ShardState<S> {
    /// Takes the share partition of `key` out of the map (creating or recovering it), so the
    /// caller can use it alongside the partition's log; put it back with `put_share`.
    fn take_share(
        &mut self,
        key: &ShareKey,
        r: &PartitionRef,
    ) -> Result<SharePartition, (i16, String)> {
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
                    ResponseError::UnknownServerError.code(),
                    format!(
                        "share state of {}-{} is unusable: {e}",
                        r.topic, r.partition
                    ),
                )
            });
        }
        let partition = self.lookup(r).map_err(|code| {
            (
                code,
                format!("{}-{} is not served here", r.topic, r.partition),
            )
        })?;
        let start = match config.auto_offset_reset {
            AutoOffsetReset::Latest => partition.high_watermark(),
            AutoOffsetReset::Earliest => partition.log.log_start_offset() as i64,
        };
        Ok(SharePartition::new(config.share, start))
    }

    fn put_share(&mut self, key: ShareKey, mut sp: SharePartition) {
        self.share.record_delta(&key, &mut sp);
        self.share.partitions.insert(key, sp);
    }

    /// Acquires records for a ShareFetch from each partition, in order, within the op's
    /// record and byte budgets. Only durable data (below the high watermark) is handed out.
    pub fn share_fetch(&mut self, op: &ShareFetchOp, now_ms: u64) -> Vec<ShareFetchedPartition> {
        let mut records_left = op.max_records;
        let mut bytes_left = op.max_bytes;
        let mut out = Vec::with_capacity(op.partitions.len());
        for r in &op.partitions {
            let key = ShareKey {
                group_id: op.group_id.clone(),
                partition: PartitionKey::of(r),
            };
            let mut result = ShareFetchedPartition {
                partition: PartitionKey::of(r),
                error_code: 0,
                error_message: None,
                records: Bytes::new(),
                acquired: Vec::new(),
                wait_offset: 0,
            };
            let mut sp = match self.take_share(&key, r) {
                Ok(sp) => sp,
                Err((code, message)) => {
                    result.error_code = code;
                    result.error_message = Some(message);
                    out.push(result);
                    continue;
                }
            };
            let mut hw = 0;
            let read = match self.lookup(r) {
                Err(code) => Err((code, None)),
                Ok(partition) => {
                    let start = partition.log.log_start_offset() as i64;
                    if sp.spso() < start {
                        // Retention removed records the group never finished: skip them.
                        if let Err(e) = sp.set_start_offset(start) {
                            tracing::warn!(group = %op.group_id, topic = %r.topic, partition = r.partition, error = %e, "cannot move the share-partition start offset");
                        }
                    }
                    hw = partition.high_watermark();
                    let from = sp.next_fetch_offset().max(start);
                    if from >= hw || records_left == 0 || bytes_left == 0 {
                        Ok(Vec::new())
                    } else {
                        match partition.log.read(from as u64, bytes_left.max(1)) {
                            Ok(read) => Ok(trim_to(&read.records, hw).to_vec()),
                            Err(e) => Err((log_error_code(&e), Some(e.to_string()))),
                        }
                    }
                }
            };
            match read {
                Ok(bytes) if !bytes.is_empty() => {
                    let fetched =
                        acquire_from_log(&mut sp, &op.member_id, &bytes, records_left, now_ms);
                    let count: u64 = fetched
                        .acquired
                        .iter()
                        .map(|a| (a.last - a.first + 1) as u64)
                        .sum();
                    records_left = records_left.saturating_sub(count as u32);
                    bytes_left = bytes_left.saturating_sub(fetched.records.len());
                    result.records = Bytes::from(fetched.records);
                    result.acquired = fetched.acquired;
                }
                Ok(_) => {}
                Err((code, message)) => {
                    result.error_code = code;
                    result.error_message = message;
                }
            }
            // A long poll waits for records past what is in flight; at the in-flight cap, for
            // records past the high watermark (only a release or an expiry frees room then,
            // and the poll looks again for those every SHARE_FETCH_RECHECK_MS).
            let capped =
                sp.in_flight_records() >= u64::from(sp.config().partition_max_record_locks);
            result.wait_offset = if capped {
                hw.max(sp.speo() + 1)
            } else {
                sp.speo() + 1
            };
            self.put_share(key, sp);
            out.push(result);
        }
        out
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
                        partition: PartitionKey::of(r),
                    };
                    ShareOffset {
                        partition: key.partition,
                        start_offset: self.share.start_offset(&key).unwrap_or(-1),
                        high_watermark: high_watermark(r),
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
                    ShareOffset {
                        partition,
                        start_offset,
                        high_watermark: hw,
                    }
                })
                .collect(),
        }
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
                if let Err(code) = self.lookup(r) {
                    return ShareAckResult::error(code, "unknown topic-partition");
                }
                let key = ShareKey {
                    group_id: group_id.to_string(),
                    partition: PartitionKey::of(r),
                };
                let mut sp = match self.take_share(&key, r) {
                    Ok(sp) => sp,
                    Err((code, message)) => return ShareAckResult::error(code, message),
                };
                let result = match sp.set_start_offset(*offset) {
                    Ok(()) => ShareAckResult::ok(),
                    Err(e) => ShareAckResult::error(e.code(), e.to_string()),
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
                        result = ShareAckResult::error(e.code(), e.to_string());
                    }
                }
                result
            })
            .collect()
    }

    /// Applies acknowledgements (each partition all-or-nothing).
    pub fn share_acknowledge(&mut self, op: &ShareAckOp, now_ms: u64) -> Vec<ShareAckResult> {
        op.partitions
            .iter()
            .map(|(r, batches)| {
                let key = ShareKey {
                    group_id: op.group_id.clone(),
                    partition: PartitionKey::of(r),
                };
                if self.lookup(r).is_err() && !self.share.partitions.contains_key(&key) {
                    let code = self.lookup(r).err().unwrap_or_default();
                    return ShareAckResult::error(code, "unknown topic-partition");
                }
                if !self.share.partitions.contains_key(&key)
                    && !self.share.recovered.contains_key(&key)
                {
                    return ShareAckResult::error(
                        ResponseError::InvalidRecordState.code(),
                        "no records of this partition were acquired by the group",
                    );
                }
                let mut sp = match self.take_share(&key, r) {
                    Ok(sp) => sp,
                    Err((code, message)) => return ShareAckResult::error(code, message),
                };
                let result = match sp.acknowledge(&op.member_id, batches, now_ms) {
                    Ok(_) => ShareAckResult::ok(),
                    Err(e) => ShareAckResult::error(e.code(), e.to_string()),
                };
                self.put_share(key, sp);
                result
            })
            .collect()
    }
}
