//! Newtypes shared across modules (the one topic-partition key, [`TopicPartition`]), and the
//! pure functions that say which shard owns what.
//!
//! Ownership: every topic-partition is owned by exactly one shard and every
//! group's coordinator state by exactly one shard. Both are pure functions of the names and the
//! shard count, so every shard (and every test) computes the same answer without asking anyone:
//!
//! - [`partition_shard`]: `(fnv1a64(topic) + partition) mod shards`. The partitions of one topic
//!   go round-robin over the shards from a topic-dependent start, so a topic with at least as
//!   many partitions as shards touches every shard.
//! - [`group_shard`]: `fnv1a64(group_id) mod shards`.
//!
//! FNV-1a is fixed here (not `std`'s randomly keyed hasher): the mapping must not change
//! between runs of the broker.

use std::fmt;
use uuid::Uuid;

/// Index of a shard (one executor thread, one core), `0 .. shard_count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(pub u16);

impl ShardId {
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard-{}", self.0)
    }
}

/// A Kafka offset (position of a record in a partition log).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub i64);

/// A topic-partition, named by its topic's id: the one key of every per-partition map (a
/// shard's partition logs, share partitions, transaction participants, share sessions). The id
/// and not the name, as the share and transaction APIs name partitions: a topic deleted and
/// created again under the same name is another topic. Where the name is needed too (to find
/// the owning shard, to answer with it), operations carry a `shard::ops::PartitionRef`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic_id: Uuid,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic_id: Uuid, partition: i32) -> TopicPartition {
        TopicPartition {
            topic_id,
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.topic_id, self.partition)
    }
}

/// 64-bit FNV-1a: a fixed, seedless hash, so ownership is stable across runs and machines.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The shard that owns partition `partition` of `topic` when the broker runs `shard_count` shards.
pub fn partition_shard(topic: &str, partition: i32, shard_count: usize) -> ShardId {
    assert!(shard_count >= 1 && shard_count <= usize::from(u16::MAX));
    assert!(partition >= 0, "partition index must not be negative");
    let count = shard_count as u64;
    let start = fnv1a64(topic.as_bytes()) % count;
    let shard = (start + (partition as u64 % count)) % count;
    ShardId(shard as u16)
}

/// The shard that owns the coordinator state of group `group_id`.
pub fn group_shard(group_id: &str, shard_count: usize) -> ShardId {
    assert!(shard_count >= 1 && shard_count <= usize::from(u16::MAX));
    ShardId((fnv1a64(group_id.as_bytes()) % shard_count as u64) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_reference_vectors() {
        // Published FNV-1a 64-bit test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn partition_shard_is_in_range_and_stable() {
        for shards in 1..=8 {
            for partition in 0..64 {
                let shard = partition_shard("orders", partition, shards);
                assert!(shard.index() < shards);
                assert_eq!(shard, partition_shard("orders", partition, shards));
            }
        }
    }

    #[test]
    fn partitions_of_a_topic_spread_evenly_over_shards() {
        for shards in 1..=8usize {
            for topic in ["a", "orders", "payments-eu", "t0"] {
                let mut per_shard = vec![0usize; shards];
                let partitions = (shards * 3) as i32;
                for partition in 0..partitions {
                    per_shard[partition_shard(topic, partition, shards).index()] += 1;
                }
                assert!(
                    per_shard.iter().all(|&n| n == 3),
                    "topic {topic} shards {shards}: {per_shard:?}"
                );
            }
        }
    }

    #[test]
    fn consecutive_partitions_go_to_different_shards() {
        let shards = 2;
        assert_ne!(
            partition_shard("orders", 0, shards),
            partition_shard("orders", 1, shards)
        );
    }

    #[test]
    fn one_shard_owns_everything() {
        assert_eq!(partition_shard("x", 7, 1), ShardId(0));
        assert_eq!(group_shard("g", 1), ShardId(0));
    }

    #[test]
    fn group_shard_uses_every_shard() {
        let shards = 4;
        let mut seen = vec![false; shards];
        for i in 0..200 {
            let shard = group_shard(&format!("group-{i}"), shards);
            assert!(shard.index() < shards);
            assert_eq!(shard, group_shard(&format!("group-{i}"), shards));
            seen[shard.index()] = true;
        }
        assert!(seen.iter().all(|&s| s), "{seen:?}");
    }

    #[test]
    #[should_panic]
    fn zero_shards_is_a_bug() {
        partition_shard("x", 0, 0);
    }
}
