//! Offsets committed inside producer transactions (TxnOffsetCommit), pending until the
//! transaction's marker reaches the group ([`crate::shard::ops::ShardOp::GroupTxnMarker`]), as
//! Kafka's `OffsetMetadataManager` keeps `pendingTransactionalOffsets`.
//!
//! Pure data on the group's shard, next to the group's [`super::OffsetStore`]. Every change is a
//! `GroupOffsetCommit` journal entry with the producer's id (`schemas/journal.fbs`, version 2):
//! a pending offset, or its removal (`offset: None`) once the marker is applied. A commit
//! marker also writes each offset as an ordinary committed entry (producer id -1), before the
//! removals, so a replay that stops between them still has the offset committed.
//!
//! Invisible to OffsetFetch, except that a fetch with `require_stable` gets
//! UNSTABLE_OFFSET_COMMIT for a partition with a pending offset (Kafka's behaviour).

use super::offsets::{CommittedOffset, OffsetKey};
use crate::journal::entries::GroupOffsetCommit;
use std::collections::BTreeMap;

/// The pending transactional offsets of the groups of one shard: group → producer id →
/// partition → offset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingTxnOffsets {
    groups: BTreeMap<String, BTreeMap<i64, BTreeMap<OffsetKey, CommittedOffset>>>,
}

impl PendingTxnOffsets {
    /// Stores a pending offset of `producer_id` and returns its journal entry.
    pub fn add(
        &mut self,
        group_id: &str,
        producer_id: i64,
        topic: &str,
        partition: i32,
        offset: CommittedOffset,
    ) -> GroupOffsetCommit {
        assert!(producer_id >= 0, "a pending offset belongs to a producer");
        assert!(partition >= 0 && offset.offset >= 0);
        let entry = pending_entry(group_id, producer_id, topic, partition, Some(&offset));
        self.groups
            .entry(group_id.to_string())
            .or_default()
            .entry(producer_id)
            .or_default()
            .insert((topic.to_string(), partition), offset);
        entry
    }

    /// Takes the pending offsets of `producer_id` in `group_id` out (the marker is applied),
    /// with the journal entries that remove them.
    pub fn take(
        &mut self,
        group_id: &str,
        producer_id: i64,
    ) -> (Vec<(OffsetKey, CommittedOffset)>, Vec<GroupOffsetCommit>) {
        let Some(producers) = self.groups.get_mut(group_id) else {
            return (Vec::new(), Vec::new());
        };
        let taken: Vec<(OffsetKey, CommittedOffset)> = producers
            .remove(&producer_id)
            .map(|m| m.into_iter().collect())
            .unwrap_or_default();
        if producers.is_empty() {
            self.groups.remove(group_id);
        }
        let removals = taken
            .iter()
            .map(|((topic, partition), _)| {
                pending_entry(group_id, producer_id, topic, *partition, None)
            })
            .collect();
        (taken, removals)
    }

    /// Whether any producer has a pending offset for the partition (OffsetFetch's
    /// `require_stable`).
    pub fn has_pending(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        let key = (topic.to_string(), partition);
        self.groups
            .get(group_id)
            .is_some_and(|producers| producers.values().any(|m| m.contains_key(&key)))
    }

    /// Whether the group has pending offsets at all.
    pub fn group_has_pending(&self, group_id: &str) -> bool {
        self.groups.contains_key(group_id)
    }

    /// Applies one journal entry with a producer id (replay).
    pub fn replay(&mut self, entry: &GroupOffsetCommit) {
        assert!(entry.producer_id >= 0);
        let key = (entry.topic.clone(), entry.partition);
        match entry.offset {
            Some(offset) => {
                self.groups
                    .entry(entry.group_id.clone())
                    .or_default()
                    .entry(entry.producer_id)
                    .or_default()
                    .insert(
                        key,
                        CommittedOffset {
                            offset,
                            leader_epoch: entry.leader_epoch,
                            metadata: entry.metadata.clone(),
                            commit_timestamp_ms: entry.commit_timestamp_ms,
                            expire_timestamp_ms: (entry.expire_timestamp_ms >= 0)
                                .then_some(entry.expire_timestamp_ms),
                        },
                    );
            }
            None => {
                if let Some(producers) = self.groups.get_mut(&entry.group_id) {
                    if let Some(m) = producers.get_mut(&entry.producer_id) {
                        m.remove(&key);
                        if m.is_empty() {
                            producers.remove(&entry.producer_id);
                        }
                    }
                    if producers.is_empty() {
                        self.groups.remove(&entry.group_id);
                    }
                }
            }
        }
    }

    /// Every pending offset as a journal entry (for a snapshot).
    pub fn entries(&self) -> Vec<GroupOffsetCommit> {
        self.groups
            .iter()
            .flat_map(|(group_id, producers)| {
                producers.iter().flat_map(move |(&producer_id, m)| {
                    m.iter().map(move |((topic, partition), offset)| {
                        pending_entry(group_id, producer_id, topic, *partition, Some(offset))
                    })
                })
            })
            .collect()
    }

    /// Forgets the pending offsets of a deleted group.
    pub fn remove_group(&mut self, group_id: &str) -> Vec<GroupOffsetCommit> {
        let Some(producers) = self.groups.remove(group_id) else {
            return Vec::new();
        };
        producers
            .into_iter()
            .flat_map(|(producer_id, m)| {
                m.into_keys()
                    .map(move |(topic, partition)| {
                        pending_entry(group_id, producer_id, &topic, partition, None)
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

fn pending_entry(
    group_id: &str,
    producer_id: i64,
    topic: &str,
    partition: i32,
    offset: Option<&CommittedOffset>,
) -> GroupOffsetCommit {
    GroupOffsetCommit {
        group_id: group_id.to_string(),
        topic: topic.to_string(),
        partition,
        offset: offset.map(|c| c.offset),
        leader_epoch: offset.map_or(-1, |c| c.leader_epoch),
        metadata: offset.map_or(String::new(), |c| c.metadata.clone()),
        commit_timestamp_ms: offset.map_or(0, |c| c.commit_timestamp_ms),
        expire_timestamp_ms: offset.and_then(|c| c.expire_timestamp_ms).unwrap_or(-1),
        producer_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: i64) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: "m".into(),
            commit_timestamp_ms: 5,
            expire_timestamp_ms: None,
        }
    }

    #[test]
    fn pending_offsets_replay_from_their_entries() {
        let mut p = PendingTxnOffsets::default();
        let mut journal = vec![
            p.add("g", 7, "t", 0, at(10)),
            p.add("g", 7, "t", 1, at(11)),
            p.add("g", 8, "t", 0, at(12)),
            p.add("h", 7, "t", 0, at(13)),
        ];
        assert!(p.has_pending("g", "t", 1));
        let (taken, removals) = p.take("g", 7);
        assert_eq!(taken.len(), 2);
        assert!(!p.has_pending("g", "t", 1));
        assert!(p.has_pending("g", "t", 0), "producer 8's is still pending");
        journal.extend(removals);
        let mut replayed = PendingTxnOffsets::default();
        for e in &journal {
            replayed.replay(e);
        }
        assert_eq!(replayed, p);
        let mut from_snapshot = PendingTxnOffsets::default();
        for e in p.entries() {
            from_snapshot.replay(&e);
        }
        assert_eq!(from_snapshot, p);
        assert_eq!(p.take("g", 7), (Vec::new(), Vec::new()), "idempotent");
        assert_eq!(p.remove_group("h").len(), 1);
        assert!(!p.group_has_pending("h"));
    }
}
