//! Committed offsets of one consumer group (OffsetCommit / OffsetFetch / OffsetDelete), keyed
//! by topic name and partition as Kafka keys them.
//!
//! Pure data on the group's shard. Durability is the caller's ([`super::ConsumerGroups`]):
//! every change becomes a `GroupOffsetCommit` journal entry, and the answer waits for it.
//!
//! Retention follows Kafka 4.4 (`OffsetMetadataManager.cleanupExpiredOffsets`,
//! `ClassicGroup.offsetExpirationCondition`): an offset with an explicit expire timestamp
//! (OffsetCommit v2–4 `retention_time_ms`) expires then; otherwise it expires
//! `offsets.retention.minutes` after its base time, which is the time the group became empty for a
//! group with a protocol type, and the commit time for a simple group (no protocol). Offsets of a
//! group with members do not expire.

use crate::journal::entries::GroupOffsetCommit;
use std::collections::BTreeMap;

/// What a group committed for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1: unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// `None`: the broker's retention applies.
    pub expire_timestamp_ms: Option<i64>,
}

/// (topic, partition).
pub type OffsetKey = (String, i32);

/// Every committed offset of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffsetStore {
    offsets: BTreeMap<OffsetKey, CommittedOffset>,
}

impl OffsetStore {
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<&CommittedOffset> {
        self.offsets.get(&(topic.to_string(), partition))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&OffsetKey, &CommittedOffset)> {
        self.offsets.iter()
    }

    /// The topics with a committed offset.
    pub fn topics(&self) -> Vec<String> {
        let mut topics: Vec<String> = self.offsets.keys().map(|(t, _)| t.clone()).collect();
        topics.dedup();
        topics
    }

    /// Stores a commit and returns its journal entry.
    pub fn commit(
        &mut self,
        group_id: &str,
        topic: &str,
        partition: i32,
        committed: CommittedOffset,
    ) -> GroupOffsetCommit {
        assert!(partition >= 0, "negative partition");
        assert!(
            committed.offset >= 0,
            "a committed offset is never negative"
        );
        let entry = entry_of(group_id, topic, partition, Some(&committed));
        self.offsets
            .insert((topic.to_string(), partition), committed);
        entry
    }

    /// Removes one offset; returns its tombstone if it existed.
    pub fn remove(
        &mut self,
        group_id: &str,
        topic: &str,
        partition: i32,
    ) -> Option<GroupOffsetCommit> {
        self.offsets
            .remove(&(topic.to_string(), partition))
            .map(|_| entry_of(group_id, topic, partition, None))
    }

    /// Removes every offset; returns their tombstones.
    pub fn clear(&mut self, group_id: &str) -> Vec<GroupOffsetCommit> {
        let keys: Vec<OffsetKey> = self.offsets.keys().cloned().collect();
        keys.iter()
            .filter_map(|(t, p)| self.remove(group_id, t, *p))
            .collect()
    }

    /// Removes the offsets that expired at `now_ms` (`base_ms`: the retention's base time for
    /// offsets without an explicit expiry, `None` to keep them; `keep`: topics that never expire,
    /// a stable consumer group's subscriptions); returns their tombstones.
    pub fn expire(
        &mut self,
        group_id: &str,
        now_ms: i64,
        retention_ms: i64,
        base_ms: Option<i64>,
        keep: &dyn Fn(&str) -> bool,
    ) -> Vec<GroupOffsetCommit> {
        let expired: Vec<OffsetKey> = self
            .offsets
            .iter()
            .filter(|((topic, _), c)| {
                !keep(topic)
                    && match c.expire_timestamp_ms {
                        Some(at) => now_ms >= at,
                        None => base_ms.is_some_and(|base| {
                            now_ms.saturating_sub(base.max(c.commit_timestamp_ms)) >= retention_ms
                        }),
                    }
            })
            .map(|(k, _)| k.clone())
            .collect();
        expired
            .iter()
            .filter_map(|(t, p)| self.remove(group_id, t, *p))
            .collect()
    }

    /// Applies one journal entry at replay (the latest entry of a key wins).
    pub fn replay(&mut self, entry: &GroupOffsetCommit) {
        let key = (entry.topic.clone(), entry.partition);
        match entry.offset {
            None => {
                self.offsets.remove(&key);
            }
            Some(offset) => {
                self.offsets.insert(
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
        }
    }

    /// Every offset as a journal entry (for a snapshot).
    pub fn entries(&self, group_id: &str) -> Vec<GroupOffsetCommit> {
        self.offsets
            .iter()
            .map(|((t, p), c)| entry_of(group_id, t, *p, Some(c)))
            .collect()
    }
}

fn entry_of(
    group_id: &str,
    topic: &str,
    partition: i32,
    committed: Option<&CommittedOffset>,
) -> GroupOffsetCommit {
    GroupOffsetCommit {
        group_id: group_id.to_string(),
        topic: topic.to_string(),
        partition,
        offset: committed.map(|c| c.offset),
        leader_epoch: committed.map_or(-1, |c| c.leader_epoch),
        metadata: committed.map_or(String::new(), |c| c.metadata.clone()),
        commit_timestamp_ms: committed.map_or(0, |c| c.commit_timestamp_ms),
        expire_timestamp_ms: committed.and_then(|c| c.expire_timestamp_ms).unwrap_or(-1),
        producer_id: -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: i64, ts: i64) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: ts,
            expire_timestamp_ms: None,
        }
    }

    #[test]
    fn entries_replay_to_the_same_store() {
        let mut store = OffsetStore::default();
        let mut journal = vec![
            store.commit("g", "t", 0, at(5, 1)),
            store.commit("g", "t", 1, at(7, 2)),
            store.commit("g", "t", 0, at(9, 3)),
        ];
        journal.extend(store.remove("g", "t", 1));
        let mut replayed = OffsetStore::default();
        for e in &journal {
            replayed.replay(e);
        }
        assert_eq!(replayed, store);
        assert_eq!(store.get("t", 0).map(|c| c.offset), Some(9));
        assert!(store.get("t", 1).is_none());
    }

    #[test]
    fn retention_counts_from_the_later_of_base_and_commit() {
        let mut store = OffsetStore::default();
        store.commit("g", "a", 0, at(1, 100));
        store.commit("g", "b", 0, at(1, 500));
        let mut explicit = at(1, 100);
        explicit.expire_timestamp_ms = Some(150);
        store.commit("g", "c", 0, explicit);
        // A group with members (no base) keeps everything but explicit expiries.
        let gone = store.expire("g", 200, 1000, None, &|_| false);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].topic, "c");
        // Empty since 300: a expires at 1300, b (committed at 500) at 1500.
        assert!(store
            .expire("g", 1299, 1000, Some(300), &|_| false)
            .is_empty());
        assert_eq!(
            store.expire("g", 1300, 1000, Some(300), &|_| false).len(),
            1
        );
        assert!(store
            .expire("g", 1499, 1000, Some(300), &|t| t == "b")
            .is_empty());
        assert_eq!(
            store.expire("g", 1500, 1000, Some(300), &|_| false).len(),
            1
        );
        assert!(store.is_empty());
    }
}
