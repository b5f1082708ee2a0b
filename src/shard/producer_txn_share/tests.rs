//! The shard's producer-transaction share steps against the journal: what a lock and a marker
//! write, and what a restart makes of it.

use super::*;
use crate::journal::{Location, Recovered, RecoveredEntry};
use crate::model::{ShardId, TopicPartition};
use crate::producer_txn::share::ShareLockError;
use crate::producer_txn::TxnOutcome;
use crate::shard::registry::TopicRegistry;
use crate::shard::share_state::ShareState;
use crate::share::{AcknowledgeType, RecordState, ShareConfig, ShareError, SharePartition};
use crate::storage::file::SimStorage;
use std::path::Path;
use std::sync::Arc;
use uuid::Uuid;

fn registry() -> Arc<TopicRegistry> {
    let mut r = TopicRegistry::new("c".into());
    r.create_topic("in", Uuid::from_u128(1), 1, &[]).unwrap();
    Arc::new(r)
}

fn input() -> PartitionRef {
    PartitionRef {
        topic: "in".into(),
        topic_id: Uuid::from_u128(1),
        partition: 0,
    }
}

fn key(group: &str) -> ShareKey {
    ShareKey {
        group_id: group.into(),
        partition: TopicPartition::new(Uuid::from_u128(1), 0),
    }
}

/// A shard whose groups `g` and `h` each have records 0..10 ACQUIRED by member `m`.
fn shard() -> ShardState<SimStorage> {
    let storage = SimStorage::new();
    let mut s = ShardState::open(ShardId(0), 1, Path::new("/data"), storage, registry(), 0)
        .unwrap()
        .0;
    for group in ["g", "h"] {
        let mut sp = SharePartition::new(ShareConfig::default(), 0);
        assert_eq!(sp.acquire("m", 10, 10, 0).len(), 1);
        s.put_share(key(group), sp);
    }
    s
}

fn replay(journal: &[Entry], registry: &TopicRegistry) -> ShareState {
    let recovered = Recovered {
        entries: journal
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
    };
    ShareState::restore(&recovered, registry, 0).unwrap()
}

fn locked_owner(state: &ShareState, group: &str, offset: i64) -> Option<String> {
    let (_, sp) = state.partitions().find(|(k, _)| **k == key(group))?;
    match sp.record(offset)?.state {
        RecordState::Locked { txn, .. } => Some(sp.txn_id(txn).to_string()),
        _ => None,
    }
}

fn accept(first: i64, last: i64) -> Vec<(PartitionRef, Vec<AckBatch>)> {
    vec![(
        input(),
        vec![AckBatch::new(first, last, AcknowledgeType::Accept)],
    )]
}

fn marker(epoch: i16, outcome: TxnOutcome) -> TxnMarker {
    TxnMarker {
        producer_id: 42,
        producer_epoch: epoch,
        outcome,
        coordinator_epoch: 0,
    }
}

#[test]
fn locks_are_journalled_survive_a_restart_and_the_marker_resolves_them() {
    let mut s = shard();
    let owner = ProducerLock::new(42, 1).unwrap();
    s.share.take_entries();
    let locked = s.ptxn_share_lock("g", "m", owner, &accept(0, 4));
    assert_eq!(locked, vec![Ok(5)]);
    let mut journal = s.share.take_entries();
    assert!(
        journal
            .iter()
            .any(|e| matches!(e, Entry::TransactionLocks(l)
            if l.transaction_id == "#producer.42.1" && l.group_id == "g" && l.ranges.len() == 1)),
        "{journal:?}"
    );

    // A restart before the marker: still LOCKED by the producer, and not among the share
    // transactions a participant asks its coordinator about.
    let restored = replay(&journal, s.registry());
    assert_eq!(
        locked_owner(&restored, "g", 0).as_deref(),
        Some("#producer.42.1")
    );
    assert!(restored.txn_locked().is_empty());

    // The commit marker (epoch bumped, as KIP-890 writes it) resolves them; group h is
    // untouched.
    let done = s.ptxn_share_resolve(&marker(2, TxnOutcome::Commit), &input());
    assert_eq!(done.owners, vec!["#producer.42.1".to_string()]);
    assert_eq!(done.acknowledged, 5);
    let after = s.share.take_entries();
    assert!(after.iter().any(|e| matches!(e, Entry::TransactionLocks(l)
        if l.transaction_id == "#producer.42.1" && l.ranges.is_empty())));
    journal.extend(after);
    let restored = replay(&journal, s.registry());
    let (_, sp) = restored
        .partitions()
        .find(|(k, _)| **k == key("g"))
        .unwrap();
    assert_eq!(sp.spso(), 5, "0..=4 ACKNOWLEDGED for good");
    assert!(sp.locked_txns().is_empty());

    // Applying the marker again changes nothing and writes nothing.
    let again = s.ptxn_share_resolve(&marker(2, TxnOutcome::Commit), &input());
    assert_eq!(again, Resolved::default());
    assert!(s.share.take_entries().is_empty());
}

#[test]
fn an_abort_marker_releases_without_using_a_delivery_and_fencing_refuses_zombies() {
    let mut s = shard();
    assert_eq!(
        s.ptxn_share_lock("g", "m", ProducerLock::new(42, 3).unwrap(), &accept(0, 1)),
        vec![Ok(2)]
    );
    let zombie = s.ptxn_share_lock("g", "m", ProducerLock::new(42, 2).unwrap(), &accept(2, 3));
    assert!(
        matches!(
            zombie[0].as_ref().unwrap_err().error,
            Some(SharePartitionError::Lock(ShareLockError::FencedEpoch {
                held_epoch: 3,
                ..
            }))
        ),
        "{zombie:?}"
    );
    // Another member's records, or a group without state: INVALID_RECORD_STATE.
    let other = s.ptxn_share_lock("g", "x", ProducerLock::new(42, 3).unwrap(), &accept(2, 3));
    assert!(
        matches!(
            other[0].as_ref().unwrap_err().error,
            Some(SharePartitionError::Share(
                ShareError::InvalidRecordState { .. }
            ))
        ),
        "{other:?}"
    );
    let none = s.ptxn_share_lock(
        "nope",
        "m",
        ProducerLock::new(42, 3).unwrap(),
        &accept(2, 3),
    );
    assert_eq!(
        none[0].as_ref().unwrap_err().error,
        Some(SharePartitionError::NothingAcquired)
    );

    let done = s.ptxn_share_resolve(&marker(3, TxnOutcome::Abort), &input());
    assert_eq!(done.released, 2);
    let (_, sp) = s.share.partitions().find(|(k, _)| **k == key("g")).unwrap();
    let v = sp.record(0).unwrap();
    assert_eq!((v.state, v.delivery_count), (RecordState::Available, 0));
}
