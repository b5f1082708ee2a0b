//! Consumer groups: membership (the classic protocol, and KIP-848's consumer protocol built on
//! it) and committed offsets, on the group's shard (`model::group_shard`).
//!
//! Runtime-free and synchronous, like the share groups: time comes in as `now_ms`, and every
//! change of durable state (a committed offset or its removal) becomes a `GroupOffsetCommit`
//! journal entry ([`ConsumerGroups::take_entries`]); the runtime appends them to the shard's
//! journal and answers only once they are durable. Membership is not journalled (as for share
//! groups): after a restart a group is Empty with its offsets, and its members rejoin.
//!
//! - [`ConsumerGroup`]: one group: its [`OffsetStore`] and its [`Membership`], classic
//!   ([`ClassicGroup`], which is also what a group that only ever had offsets committed is: an
//!   Empty classic group without a protocol type, Kafka's "simple" group) or KIP-848
//!   ([`ConsumerMembership`]).
//! - The offsets API does not depend on the protocol: a commit is checked by the membership
//!   (generation for classic, member epoch for KIP-848), then stored the same way.
//! - [`ops`]: the shard messages (an op type per request, `GroupOp` / `GroupReply` on the mesh) and their synchronous execution.
//!
//! Replay ([`ConsumerGroups::restore`]): the snapshot's `group_offsets`, then every
//! `GroupOffsetCommit` entry in order; the latest entry of (group, topic, partition) wins and a
//! tombstone removes it. Entries with a producer id are pending transactional offsets
//! ([`producer_txn_offsets`]), replayed into [`producer_txn_offsets::PendingTxnOffsets`] the same way.
//!
//! Transactional offsets (TxnOffsetCommit): [`ConsumerGroups::txn_commit`] validates as
//! Kafka's `validateTransactionalOffsetCommit` and keeps the offsets pending per producer;
//! [`ConsumerGroups::txn_marker`] commits or drops them when the transaction ends. A commit
//! overwrites the partition's committed offset even if a plain OffsetCommit came in between
//! (Kafka keeps the later of the two by their position in its offsets log).

pub mod classic;
pub mod consumer;
pub mod error;
pub mod kip848;
pub mod offsets;
pub mod ops;
pub mod producer_txn_offsets;

pub use classic::{ClassicGroup, ClassicState};
pub use consumer::ConsumerMembership;
pub use error::{GroupError, ItemResult};
pub use offsets::{CommittedOffset, OffsetStore};

use crate::constants::{
    GROUP_EMPTY_KEEP_MS, GROUP_INITIAL_REBALANCE_DELAY_MS, OFFSETS_RETENTION_MS,
    OFFSET_METADATA_BYTES_MAX,
};
use crate::journal::entries::{Entry, GroupOffsetCommit};
use crate::journal::Recovered;

use std::collections::{BTreeMap, BTreeSet};

/// A group's membership protocol.
#[derive(Clone, Debug)]
pub enum Membership {
    Classic(ClassicGroup),
    /// KIP-848 (`group.protocol=consumer`).
    Consumer(ConsumerMembership),
}

/// One consumer group.
#[derive(Clone, Debug)]
pub struct ConsumerGroup {
    pub group_id: String,
    pub offsets: OffsetStore,
    pub membership: Membership,
}

impl ConsumerGroup {
    /// Kafka's group type name (ListGroups v5, `kafka-groups`): "Classic" or "Consumer".
    pub fn type_name(&self) -> &'static str {
        match self.membership {
            Membership::Classic(_) => "Classic",
            Membership::Consumer(_) => "Consumer",
        }
    }

    /// The protocol type ListGroups reports: a classic group's (empty for a simple group),
    /// "consumer" for KIP-848.
    pub fn protocol_type(&self) -> String {
        match &self.membership {
            Membership::Classic(c) => c.protocol_type().unwrap_or("").to_string(),
            Membership::Consumer(_) => "consumer".to_string(),
        }
    }

    pub fn state_name(&self) -> &'static str {
        match &self.membership {
            Membership::Classic(c) => c.state().name(),
            Membership::Consumer(c) => c.state_name(),
        }
    }

    /// No members (pending ones included).
    pub fn is_empty(&self) -> bool {
        match &self.membership {
            Membership::Classic(c) => c.is_empty(),
            Membership::Consumer(c) => c.is_empty(),
        }
    }

    /// Topics the members subscribe to (`None`: unknown, e.g. a classic group with a protocol
    /// other than `consumer`).
    pub fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        match &self.membership {
            Membership::Classic(c) if c.is_empty() => Some(BTreeSet::new()),
            Membership::Classic(c) => c.subscribed_topics(),
            Membership::Consumer(c) => Some(c.subscribed_topics()),
        }
    }
}

/// One partition of an OffsetCommit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitPartition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    /// OffsetCommit v2–4 `retention_time_ms` (-1: the broker's retention).
    pub retention_time_ms: i64,
}

/// One partition of an OffsetFetch answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedOffset {
    pub topic: String,
    pub partition: i32,
    /// -1: nothing committed.
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    /// `Some(UnstableOffset)`: pending in a producer transaction (`require_stable`).
    pub error: Option<GroupError>,
}

/// A group as ListGroups reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
    pub group_type: String,
}

/// The consumer groups a shard coordinates (module docs).
#[derive(Debug)]
pub struct ConsumerGroups {
    groups: BTreeMap<String, ConsumerGroup>,
    /// Offsets committed inside producer transactions, until their marker.
    pending: producer_txn_offsets::PendingTxnOffsets,
    entries: Vec<Entry>,
    /// `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay_ms: u64,
    /// `offsets.retention.minutes`, in ms.
    pub retention_ms: u64,
    /// When the state was restored: the retention base of groups whose emptiness began before
    /// the restart (membership is not journalled).
    restored_at_ms: u64,
}

impl Default for ConsumerGroups {
    fn default() -> ConsumerGroups {
        ConsumerGroups {
            groups: BTreeMap::new(),
            pending: producer_txn_offsets::PendingTxnOffsets::default(),
            entries: Vec::new(),
            initial_rebalance_delay_ms: GROUP_INITIAL_REBALANCE_DELAY_MS,
            retention_ms: OFFSETS_RETENTION_MS,
            restored_at_ms: 0,
        }
    }
}

impl ConsumerGroups {
    pub fn new() -> ConsumerGroups {
        ConsumerGroups::default()
    }

    pub fn group(&self, group_id: &str) -> Option<&ConsumerGroup> {
        self.groups.get(group_id)
    }

    pub fn group_mut(&mut self, group_id: &str) -> Option<&mut ConsumerGroup> {
        self.groups.get_mut(group_id)
    }

    pub fn groups(&self) -> impl Iterator<Item = &ConsumerGroup> {
        self.groups.values()
    }

    /// The group, created as an empty classic group if it does not exist (Kafka creates groups on
    /// first JoinGroup or simple OffsetCommit).
    pub fn get_or_create(&mut self, group_id: &str, now_ms: u64) -> &mut ConsumerGroup {
        let delay = self.initial_rebalance_delay_ms;
        self.groups
            .entry(group_id.to_string())
            .or_insert_with(|| ConsumerGroup {
                group_id: group_id.to_string(),
                offsets: OffsetStore::default(),
                membership: Membership::Classic(ClassicGroup::new(
                    now_ms,
                    delay,
                    salt(group_id, now_ms),
                )),
            })
    }

    /// Journal entries produced since the last call.
    pub fn take_entries(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.entries)
    }

    fn push(&mut self, entry: GroupOffsetCommit) {
        self.entries.push(Entry::GroupOffsetCommit(entry));
    }

    // ---- offsets --------------------------------------------------------------------------

    /// OffsetCommit: checks the membership (`member_id`, `instance_id`, generation or member
    /// epoch), then stores each partition; per-partition results in order, or the group's
    /// error. `api_version` decides GROUP_ID_NOT_FOUND (v9+) vs ILLEGAL_GENERATION for an
    /// unknown group with a generation.
    #[allow(clippy::too_many_arguments)]
    pub fn commit(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_or_epoch: i32,
        api_version: i16,
        partitions: &[CommitPartition],
        now_ms: u64,
    ) -> Result<Vec<ItemResult>, GroupError> {
        if !self.groups.contains_key(group_id) {
            if generation_or_epoch >= 0 {
                return Err(if api_version >= 9 {
                    GroupError::GroupNotFound
                } else {
                    GroupError::IllegalGeneration
                });
            }
            self.get_or_create(group_id, now_ms);
        }
        let group = self.groups.get_mut(group_id).expect("exists");
        match &mut group.membership {
            Membership::Classic(c) => {
                c.tick(now_ms);
                c.validate_offset_commit(member_id, instance_id, generation_or_epoch)?
            }
            Membership::Consumer(c) => c.validate_offset_commit(member_id, generation_or_epoch)?,
        }
        let mut codes = Vec::with_capacity(partitions.len());
        let mut journal = Vec::new();
        for p in partitions {
            let metadata = p.metadata.clone().unwrap_or_default();
            if metadata.len() > OFFSET_METADATA_BYTES_MAX {
                codes.push(Err(GroupError::MetadataTooLarge));
                continue;
            }
            if p.offset < 0 || p.partition < 0 {
                // Kafka stores what it is given; a negative offset cannot be journalled as a
                // commit here, so it is refused as Kafka refuses offsets out of range.
                codes.push(Err(GroupError::NegativeOffset));
                continue;
            }
            let committed = CommittedOffset {
                offset: p.offset,
                leader_epoch: p.leader_epoch.max(-1),
                metadata,
                commit_timestamp_ms: now_ms as i64,
                expire_timestamp_ms: (p.retention_time_ms >= 0)
                    .then(|| now_ms as i64 + p.retention_time_ms),
            };
            journal.push(
                group
                    .offsets
                    .commit(group_id, &p.topic, p.partition, committed),
            );
            codes.push(Ok(()));
        }
        for e in journal {
            self.push(e);
        }
        Ok(codes)
    }

    /// TxnOffsetCommit: validates the group fields as Kafka's
    /// `validateTransactionalOffsetCommit` (an unknown group: created as a simple group when
    /// `generation_id < 0`, else ILLEGAL_GENERATION; a KIP-848 member's stale epoch is
    /// ILLEGAL_GENERATION), then keeps each partition's offset pending for `producer_id`.
    #[allow(clippy::too_many_arguments)]
    pub fn txn_commit(
        &mut self,
        group_id: &str,
        producer_id: i64,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        partitions: &[CommitPartition],
        now_ms: u64,
    ) -> Result<Vec<ItemResult>, GroupError> {
        if producer_id < 0 {
            return Err(GroupError::InvalidProducerId);
        }
        if !self.groups.contains_key(group_id) {
            if generation_id >= 0 {
                return Err(GroupError::IllegalGeneration);
            }
            self.get_or_create(group_id, now_ms);
        }
        let group = self.groups.get_mut(group_id).expect("exists");
        match &mut group.membership {
            Membership::Classic(c) => {
                c.tick(now_ms);
                c.validate_txn_offset_commit(member_id, instance_id, generation_id)?
            }
            Membership::Consumer(c) => {
                c.validate_offset_commit(member_id, generation_id)
                    .map_err(|e| match e {
                        GroupError::StaleMemberEpoch => GroupError::IllegalGeneration,
                        other => other,
                    })?
            }
        }
        let mut codes = Vec::with_capacity(partitions.len());
        let mut journal = Vec::new();
        for p in partitions {
            let metadata = p.metadata.clone().unwrap_or_default();
            if metadata.len() > OFFSET_METADATA_BYTES_MAX {
                codes.push(Err(GroupError::MetadataTooLarge));
                continue;
            }
            if p.offset < 0 || p.partition < 0 {
                codes.push(Err(GroupError::NegativeOffset));
                continue;
            }
            let offset = CommittedOffset {
                offset: p.offset,
                leader_epoch: p.leader_epoch.max(-1),
                metadata,
                commit_timestamp_ms: now_ms as i64,
                expire_timestamp_ms: None,
            };
            journal.push(
                self.pending
                    .add(group_id, producer_id, &p.topic, p.partition, offset),
            );
            codes.push(Ok(()));
        }
        for e in journal {
            self.push(e);
        }
        Ok(codes)
    }

    /// The end of `producer_id`'s transaction in `group_id` (GroupTxnMarker): its pending
    /// offsets become committed (commit) or are dropped (abort). Idempotent: a producer with
    /// nothing pending changes nothing. Returns how many offsets it resolved.
    pub fn txn_marker(
        &mut self,
        group_id: &str,
        producer_id: i64,
        outcome: crate::producer_txn::TxnOutcome,
        now_ms: u64,
    ) -> usize {
        let (taken, removals) = self.pending.take(group_id, producer_id);
        let resolved = taken.len();
        if outcome == crate::producer_txn::TxnOutcome::Commit && !taken.is_empty() {
            let group = self.get_or_create(group_id, now_ms);
            let committed: Vec<GroupOffsetCommit> = taken
                .into_iter()
                .map(|((topic, partition), offset)| {
                    group.offsets.commit(group_id, &topic, partition, offset)
                })
                .collect();
            for e in committed {
                self.push(e);
            }
        }
        for e in removals {
            self.push(e);
        }
        resolved
    }

    /// OffsetFetch's `require_stable`: partitions with a pending transactional offset get
    /// UNSTABLE_OFFSET_COMMIT and offset -1 (Kafka).
    pub fn mark_unstable(&self, group_id: &str, fetched: &mut [FetchedOffset]) {
        for f in fetched.iter_mut() {
            if f.error.is_none() && self.pending.has_pending(group_id, &f.topic, f.partition) {
                f.error = Some(GroupError::UnstableOffset);
                f.offset = -1;
                f.leader_epoch = -1;
                f.metadata = String::new();
            }
        }
    }

    /// Whether `group_id` has offsets pending in producer transactions.
    pub fn has_pending_txn_offsets(&self, group_id: &str) -> bool {
        self.pending.group_has_pending(group_id)
    }

    /// OffsetFetch of one group: the named partitions (`None`: every committed offset). An
    /// unknown group has no offsets (-1, no error), as in Kafka. `member`: (member id, epoch)
    /// of a v9+ fetch, checked by a KIP-848 membership.
    pub fn fetch(
        &mut self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
        member: Option<(&str, i32)>,
        now_ms: u64,
    ) -> Result<Vec<FetchedOffset>, GroupError> {
        self.tick_group(group_id, now_ms);
        let group = self.groups.get(group_id);
        if let Some(ConsumerGroup {
            membership: Membership::Consumer(c),
            ..
        }) = group
        {
            c.validate_offset_fetch(member.map(|m| m.0), member.map_or(-1, |m| m.1))?;
        }
        let fetched = |topic: &str, partition: i32| -> FetchedOffset {
            match group.and_then(|g| g.offsets.get(topic, partition)) {
                Some(c) => FetchedOffset {
                    topic: topic.to_string(),
                    partition,
                    offset: c.offset,
                    leader_epoch: c.leader_epoch,
                    metadata: c.metadata.clone(),
                    error: None,
                },
                None => FetchedOffset {
                    topic: topic.to_string(),
                    partition,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: String::new(),
                    error: None,
                },
            }
        };
        Ok(match topics {
            Some(topics) => topics
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t, *p)))
                .map(|(t, p)| fetched(t, p))
                .collect(),
            None => group
                .map(|g| g.offsets.iter().map(|((t, p), _)| fetched(t, *p)).collect())
                .unwrap_or_default(),
        })
    }

    /// OffsetDelete: per partition results, or the group's error (GROUP_ID_NOT_FOUND;
    /// NON_EMPTY_GROUP for a group with members whose subscriptions are unknown).
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: &[(String, i32)],
        now_ms: u64,
    ) -> Result<Vec<ItemResult>, GroupError> {
        let group = self
            .groups
            .get_mut(group_id)
            .ok_or(GroupError::GroupNotFound)?;
        if let Membership::Classic(c) = &mut group.membership {
            c.tick(now_ms);
        }
        let subscribed = match group.subscribed_topics() {
            Some(s) => s,
            None if group.is_empty() => BTreeSet::new(),
            None => return Err(GroupError::NotEmpty),
        };
        let mut codes = Vec::with_capacity(partitions.len());
        let mut journal = Vec::new();
        for (topic, partition) in partitions {
            if subscribed.contains(topic) {
                codes.push(Err(GroupError::SubscribedToTopic));
                continue;
            }
            journal.extend(group.offsets.remove(group_id, topic, *partition));
            codes.push(Ok(()));
        }
        for e in journal {
            self.push(e);
        }
        Ok(codes)
    }

    /// DeleteGroups of one group: `Ok(true)` deleted, `Ok(false)` not a consumer group here;
    /// NON_EMPTY_GROUP if it has members.
    pub fn delete_group(&mut self, group_id: &str, now_ms: u64) -> Result<bool, GroupError> {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Ok(false);
        };
        if let Membership::Classic(c) = &mut group.membership {
            c.tick(now_ms);
        }
        if !group.is_empty() {
            return Err(GroupError::NotEmpty);
        }
        let tombstones = group.offsets.clear(group_id);
        self.groups.remove(group_id);
        for e in tombstones {
            self.push(e);
        }
        Ok(true)
    }

    /// ListGroups: every group here.
    pub fn list(&mut self, now_ms: u64) -> Vec<ListedGroup> {
        self.tick(now_ms);
        self.groups
            .values()
            .map(|g| ListedGroup {
                group_id: g.group_id.clone(),
                protocol_type: g.protocol_type(),
                state: g.state_name().to_string(),
                group_type: g.type_name().to_string(),
            })
            .collect()
    }

    // ---- timers and retention ------------------------------------------------------------

    /// Runs every group's timers and offset retention; forgets empty groups without offsets.
    pub fn tick(&mut self, now_ms: u64) {
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for id in ids {
            self.tick_group(&id, now_ms);
        }
    }

    /// Runs one group's timers and offset retention (forgets it if nothing is left).
    pub fn tick_group(&mut self, group_id: &str, now_ms: u64) {
        let retention = self.retention_ms as i64;
        let restored_at = self.restored_at_ms;
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        // KIP-848: members whose session or revocation deadline passed leave.
        if let Membership::Consumer(c) = &mut group.membership {
            c.expire(now_ms);
        }
        let (base, keep): (Option<i64>, BTreeSet<String>) = match &mut group.membership {
            Membership::Classic(c) => {
                c.tick(now_ms);
                match (c.protocol_type(), c.state()) {
                    // A simple group: from each commit.
                    (None, _) => (Some(0), BTreeSet::new()),
                    (Some(_), ClassicState::Empty) => (
                        Some(c.state_since_ms().max(restored_at) as i64),
                        BTreeSet::new(),
                    ),
                    (Some("consumer"), ClassicState::Stable) => match c.subscribed_topics() {
                        Some(topics) => (Some(0), topics),
                        None => (None, BTreeSet::new()),
                    },
                    _ => (None, BTreeSet::new()),
                }
            }
            Membership::Consumer(c) if c.is_empty() => (Some(restored_at as i64), BTreeSet::new()),
            Membership::Consumer(c) => (Some(0), c.subscribed_topics()),
        };
        let tombstones = group
            .offsets
            .expire(group_id, now_ms as i64, retention, base, &|t| {
                keep.contains(t)
            });
        // An empty group without offsets is forgotten after GROUP_EMPTY_KEEP_MS (Kafka's cleanup
        // interval), at once if it never had a member (a refused first join).
        let forget = group.offsets.is_empty()
            && group.is_empty()
            && match &group.membership {
                Membership::Classic(c) => {
                    c.state() == ClassicState::Empty
                        && (c.protocol_type().is_none()
                            || now_ms.saturating_sub(c.state_since_ms()) >= GROUP_EMPTY_KEEP_MS)
                }
                // A KIP-848 group without members or offsets is forgotten at once.
                Membership::Consumer(_) => true,
            };
        if forget {
            self.groups.remove(group_id);
        }
        for e in tombstones {
            self.push(e);
        }
    }

    // ---- durability -----------------------------------------------------------------------

    /// Every committed offset, for a journal snapshot. Call after [`Self::take_entries`].
    pub fn durable_offsets(&self) -> Vec<GroupOffsetCommit> {
        let mut out: Vec<GroupOffsetCommit> = self
            .groups
            .values()
            .flat_map(|g| g.offsets.entries(&g.group_id))
            .collect();
        out.extend(self.pending.entries());
        out
    }

    /// Rebuilds the committed offsets from a recovered journal (membership starts empty).
    pub fn restore(recovered: &Recovered, now_ms: u64) -> ConsumerGroups {
        let mut groups = ConsumerGroups {
            restored_at_ms: now_ms,
            ..ConsumerGroups::default()
        };
        let snapshot = recovered
            .snapshot
            .iter()
            .flat_map(|s| s.state.group_offsets.iter());
        let entries = recovered.entries.iter().filter_map(|e| match &e.entry {
            Entry::GroupOffsetCommit(o) => Some(o),
            _ => None,
        });
        for o in snapshot.chain(entries) {
            if o.producer_id >= 0 {
                groups.pending.replay(o);
                continue;
            }
            groups.get_or_create(&o.group_id, now_ms).offsets.replay(o);
        }
        groups.groups.retain(|_, g| !g.offsets.is_empty());
        groups
    }

    /// Replays entries directly (tests).
    pub fn replay(&mut self, entries: &[GroupOffsetCommit], now_ms: u64) {
        for o in entries {
            if o.producer_id >= 0 {
                self.pending.replay(o);
                continue;
            }
            self.get_or_create(&o.group_id, now_ms).offsets.replay(o);
        }
        self.groups
            .retain(|_, g| !g.offsets.is_empty() || !g.is_empty());
    }

    /// Removes the committed offsets of topics that no longer exist (Kafka deletes a deleted
    /// topic's offsets).
    pub fn retain_topics(&mut self, exists: &dyn Fn(&str) -> bool) {
        let mut journal = Vec::new();
        for g in self.groups.values_mut() {
            for topic in g.offsets.topics() {
                if exists(&topic) {
                    continue;
                }
                let parts: Vec<i32> = g
                    .offsets
                    .iter()
                    .filter(|((t, _), _)| *t == topic)
                    .map(|((_, p), _)| *p)
                    .collect();
                for p in parts {
                    journal.extend(g.offsets.remove(&g.group_id, &topic, p));
                }
            }
        }
        for e in journal {
            self.push(e);
        }
    }
}

/// A per-group seed for member ids (unique with the group's own counter).
fn salt(group_id: &str, now_ms: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in group_id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ now_ms.rotate_left(32) ^ u64::from(std::process::id())
}

#[cfg(test)]
mod tests;
