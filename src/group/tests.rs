//! `ConsumerGroups`: the offsets API over the classic membership, retention, deletion, replay.

use super::classic::{JoinRequest, JoinStep, SyncRequest, SyncStep};
use super::*;
use bytes::Bytes;

/// Groups whose first rebalance completes at once (`group.initial.rebalance.delay.ms=0`): these
/// tests step the join by hand at one instant.
fn no_delay() -> ConsumerGroups {
    ConsumerGroups {
        initial_rebalance_delay_ms: 0,
        ..ConsumerGroups::new()
    }
}

fn subscription(topics: &[&str]) -> Bytes {
    let mut b = Vec::new();
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for t in topics {
        b.extend_from_slice(&(t.len() as i16).to_be_bytes());
        b.extend_from_slice(t.as_bytes());
    }
    b.extend_from_slice(&(-1i32).to_be_bytes());
    Bytes::from(b)
}

fn commit_at(offset: i64) -> Vec<CommitPartition> {
    vec![CommitPartition {
        topic: "t".into(),
        partition: 0,
        offset,
        leader_epoch: 3,
        metadata: Some("m".into()),
        retention_time_ms: -1,
    }]
}

/// A one-member Stable classic group subscribed to `t`; returns (member id, generation).
fn stable_member(groups: &mut ConsumerGroups, now: u64) -> (String, i32) {
    let Membership::Classic(c) = &mut groups.get_or_create("g", now).membership else {
        panic!()
    };
    let req = JoinRequest {
        member_id: String::new(),
        group_instance_id: Some("i".into()),
        client_id: "c".into(),
        client_host: "/h".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), subscription(&["t"]))],
        api_version: 9,
    };
    let JoinStep::Wait(t) = c.join(&req, now) else {
        panic!()
    };
    let a = c.poll_join(t, now).expect("joined");
    let sync = SyncRequest {
        member_id: a.member_id.clone(),
        group_instance_id: Some("i".into()),
        generation_id: a.generation_id,
        protocol_type: None,
        protocol_name: None,
        assignments: vec![],
    };
    let SyncStep::Wait(t) = c.sync(&sync, now) else {
        panic!()
    };
    assert!(c.poll_sync(t, now).is_some());
    (a.member_id, a.generation_id)
}

#[test]
fn commits_are_checked_by_the_membership_and_journalled() {
    let mut groups = no_delay();
    // Unknown group with a generation: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND from v9.
    assert_eq!(
        groups.commit("g", "m", None, 1, 8, &commit_at(5), 1),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        groups.commit("g", "m", None, 1, 9, &commit_at(5), 1),
        Err(GroupError::GroupNotFound)
    );
    // A simple commit creates the group.
    assert_eq!(
        groups.commit("g", "", None, -1, 9, &commit_at(5), 1),
        Ok(vec![Ok(())])
    );
    assert_eq!(groups.take_entries().len(), 1);
    let (member, generation) = stable_member(&mut groups, 2);
    // Members commit with their generation; a simple commit is refused while it has members.
    assert_eq!(
        groups.commit("g", "", None, -1, 9, &commit_at(6), 3),
        Err(GroupError::UnknownMember)
    );
    assert_eq!(
        groups.commit("g", &member, Some("i"), generation + 1, 9, &commit_at(6), 3),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        groups.commit("g", &member, Some("i"), generation, 9, &commit_at(7), 3),
        Ok(vec![Ok(())])
    );
    let mut long = commit_at(8);
    long[0].metadata = Some("x".repeat(OFFSET_METADATA_BYTES_MAX + 1));
    assert_eq!(
        groups.commit("g", &member, Some("i"), generation, 9, &long, 3),
        Ok(vec![Err(GroupError::MetadataTooLarge)])
    );
    let fetched = groups.fetch("g", None, None, 4).expect("fetched");
    assert_eq!(fetched.len(), 1);
    assert_eq!((fetched[0].offset, fetched[0].leader_epoch), (7, 3));
    assert_eq!(fetched[0].metadata, "m");
    // Unknown groups and partitions: -1, no error.
    let none = groups
        .fetch("other", Some(&[("t".to_string(), vec![0, 1])]), None, 4)
        .expect("fetched");
    assert!(none.iter().all(|f| f.offset == -1 && f.error.is_none()));
    // OffsetDelete refuses the subscribed topic; DeleteGroups refuses a group with members.
    assert_eq!(
        groups.delete_offsets("g", &[("t".into(), 0)], 5),
        Ok(vec![Err(GroupError::SubscribedToTopic)])
    );
    assert_eq!(groups.delete_group("g", 5), Err(GroupError::NotEmpty));
    let journal: Vec<GroupOffsetCommit> = groups
        .take_entries()
        .into_iter()
        .map(|e| match e {
            Entry::GroupOffsetCommit(o) => o,
            other => panic!("{other:?}"),
        })
        .collect();
    let mut replayed = no_delay();
    replayed.replay(&journal, 6);
    assert_eq!(replayed.durable_offsets(), groups.durable_offsets());
}

#[test]
fn retention_counts_from_when_the_group_became_empty() {
    let mut groups = no_delay();
    groups.retention_ms = 1_000;
    let (member, _) = stable_member(&mut groups, 0);
    let gen = 1;
    assert_eq!(
        groups.commit("g", &member, Some("i"), gen, 9, &commit_at(1), 0),
        Ok(vec![Ok(())])
    );
    // Members: nothing expires (the subscribed topic is kept).
    groups.tick(5_000);
    assert!(groups.group("g").is_some_and(|g| !g.offsets.is_empty()));
    let Membership::Classic(c) = &mut groups.group_mut("g").expect("g").membership else {
        panic!()
    };
    c.leave("", Some("i"), 6_000).expect("left");
    groups.tick(6_500);
    assert!(!groups.group("g").expect("kept").offsets.is_empty());
    groups.take_entries();
    groups.tick(7_000);
    let g = groups
        .group("g")
        .expect("an empty group is kept for a while");
    assert!(
        g.offsets.is_empty(),
        "expired 1 s after the group became empty"
    );
    assert_eq!(groups.take_entries().len(), 1, "a tombstone");
    groups.tick(7_000 + GROUP_EMPTY_KEEP_MS);
    assert!(groups.group("g").is_none(), "forgotten");
}

#[test]
fn deleting_an_empty_group_writes_tombstones() {
    let mut groups = no_delay();
    groups
        .commit("g", "", None, -1, 9, &commit_at(5), 1)
        .expect("simple commit");
    groups.take_entries();
    assert_eq!(groups.delete_group("g", 2), Ok(true));
    assert_eq!(groups.delete_group("g", 2), Ok(false));
    let entries = groups.take_entries();
    assert!(matches!(&entries[..], [Entry::GroupOffsetCommit(o)] if o.offset.is_none()));
    assert_eq!(
        groups.delete_offsets("g", &[], 3),
        Err(GroupError::GroupNotFound)
    );
}

/// TxnOffsetCommit: validated as Kafka's transactional commit, pending (invisible,
/// UNSTABLE_OFFSET_COMMIT with require_stable) until the marker; commit makes the offsets
/// committed, abort drops them, a repeated marker changes nothing; the journal replays to the
/// same committed and pending state.
#[test]
fn transactional_offsets_are_pending_until_the_marker() {
    use crate::producer_txn::TxnOutcome::{Abort, Commit};
    let mut groups = no_delay();
    // Unknown group with a generation: ILLEGAL_GENERATION; a simple one is created.
    assert_eq!(
        groups.txn_commit("g", 7, "m", None, 1, &commit_at(5), 1),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        groups.txn_commit("g", 7, "", None, -1, &commit_at(5), 1),
        Ok(vec![Ok(())])
    );
    let (member, generation) = stable_member(&mut groups, 2);
    // Unlike OffsetCommit, no member id and generation is accepted from a non-empty group.
    assert_eq!(
        groups.txn_commit("g", 8, "", None, -1, &commit_at(6), 3),
        Ok(vec![Ok(())])
    );
    assert_eq!(
        groups.txn_commit("g", 8, &member, Some("i"), generation + 1, &commit_at(6), 3),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        groups.txn_commit("g", 8, "nobody", None, generation, &commit_at(6), 3),
        Err(GroupError::UnknownMember)
    );
    assert_eq!(
        groups.txn_commit("g", 8, &member, Some("i"), generation, &commit_at(9), 3),
        Ok(vec![Ok(())])
    );
    let parts = [("t".to_string(), vec![0])];
    let fetch = |groups: &mut ConsumerGroups, stable: bool| {
        let mut f = groups.fetch("g", Some(&parts), None, 4).unwrap();
        if stable {
            groups.mark_unstable("g", &mut f);
        }
        (f[0].offset, f[0].error)
    };
    assert_eq!(
        fetch(&mut groups, false),
        (-1, None),
        "pending offsets are invisible"
    );
    assert_eq!(
        fetch(&mut groups, true),
        (-1, Some(GroupError::UnstableOffset))
    );
    assert_eq!(groups.txn_marker("g", 7, Abort, 4), 1);
    assert_eq!(fetch(&mut groups, false), (-1, None), "aborted: dropped");
    assert_eq!(
        fetch(&mut groups, true).1,
        Some(GroupError::UnstableOffset),
        "8 still pending"
    );
    let before_replay = groups.take_entries();
    assert_eq!(groups.txn_marker("g", 8, Commit, 5), 1);
    assert_eq!(fetch(&mut groups, true), (9, None));
    assert_eq!(groups.txn_marker("g", 8, Commit, 6), 0, "idempotent");
    assert!(!groups.has_pending_txn_offsets("g"));
    // A pending offset of another producer survives a replay (from entries and from a snapshot).
    assert_eq!(
        groups.txn_commit("g", 9, "", None, -1, &commit_at(11), 7),
        Ok(vec![Ok(())])
    );
    let journal: Vec<GroupOffsetCommit> = before_replay
        .into_iter()
        .chain(groups.take_entries())
        .map(|e| match e {
            Entry::GroupOffsetCommit(o) => o,
            other => panic!("{other:?}"),
        })
        .collect();
    let mut replayed = no_delay();
    replayed.replay(&journal, 8);
    assert_eq!(replayed.durable_offsets(), groups.durable_offsets());
    assert!(replayed.has_pending_txn_offsets("g"));
    let mut from_snapshot = no_delay();
    from_snapshot.replay(&groups.durable_offsets(), 8);
    assert_eq!(from_snapshot.durable_offsets(), groups.durable_offsets());
    assert_eq!(from_snapshot.txn_marker("g", 9, Commit, 9), 1);
    let f = from_snapshot.fetch("g", Some(&parts), None, 9).unwrap();
    assert_eq!(f[0].offset, 11);
}
