//! Tests of the producer-transaction road to LOCKED: the owner names, fencing, resolution by
//! markers, and a seeded random walk against a trivial model (one state per offset).

use super::*;
use crate::share::{LockOutcome, RecordState, ShareConfig};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const LIMIT: u16 = 4;

fn config() -> ShareConfig {
    ShareConfig {
        record_lock_duration_ms: 30_000,
        delivery_count_limit: LIMIT,
        partition_max_record_locks: 1_000,
    }
}

/// What a refusal is, for the model: the producer is fenced, or the records are not ACQUIRED
/// by the member.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    Fenced,
    NotAcquired,
}

fn refusal(e: &ShareLockError) -> Refusal {
    match e {
        ShareLockError::FencedEpoch { .. } => Refusal::Fenced,
        ShareLockError::Share(ShareError::InvalidRecordState { .. }) => Refusal::NotAcquired,
        other => panic!("not a refusal the model makes: {other:?}"),
    }
}

fn owner(producer_id: i64, producer_epoch: i16) -> ProducerLock {
    ProducerLock::new(producer_id, producer_epoch).unwrap()
}

fn marker(producer_id: i64, producer_epoch: i16, outcome: TxnOutcome) -> TxnMarker {
    TxnMarker {
        producer_id,
        producer_epoch,
        outcome,
        coordinator_epoch: 0,
    }
}

fn accept(first: i64, last: i64) -> AckBatch {
    AckBatch::new(first, last, AcknowledgeType::Accept)
}

fn state(sp: &SharePartition, offset: i64) -> Option<(String, u16)> {
    sp.record(offset).map(|v| {
        let name = match v.state {
            RecordState::Locked { txn, outcome } => {
                format!("LOCKED{{{}, {outcome:?}}}", sp.txn_id(txn))
            }
            s => s.name().to_string(),
        };
        (name, v.delivery_count)
    })
}

#[test]
fn owner_names_round_trip_and_never_look_like_share_transaction_ids() {
    for (id, epoch) in [(0, 0), (1, 7), (i64::MAX, i16::MAX), (4_000, 1)] {
        let lock = owner(id, epoch);
        assert_eq!(ProducerLock::parse(&lock.owner_name()), Some(lock));
        assert!(is_producer_lock(&lock.owner_name()));
        assert!(!lock.owner_name().contains('-'));
        // No share group can own it as a transaction id: those are `{group}-{prefix}-{n}`.
        for group in ["g", "#producer.1", "#producer.1.7", ""] {
            assert!(crate::share_txn::check_transaction_id(group, &lock.owner_name()).is_err());
        }
    }
    assert_eq!(ProducerLock::new(-1, 0), None);
    assert_eq!(ProducerLock::new(1, -1), None);
    for not_owner in [
        "g-j-1",
        "#producer.1",
        "#producer.1.",
        "#producer..1",
        "#producer.-1.1",
        "#producer.01.1",
        "#producer.1.1.1",
        "#producer.1.99999",
        "#producer.1.+1",
        "producer.1.1",
    ] {
        assert_eq!(ProducerLock::parse(not_owner), None, "{not_owner}");
    }
}

#[test]
fn a_marker_resolves_its_producers_locks_up_to_its_epoch() {
    let lock = owner(5, 3);
    assert!(lock.resolved_by(&marker(5, 3, TxnOutcome::Commit)));
    assert!(lock.resolved_by(&marker(5, 4, TxnOutcome::Abort)));
    assert!(!lock.resolved_by(&marker(5, 2, TxnOutcome::Commit)));
    assert!(!lock.resolved_by(&marker(6, 3, TxnOutcome::Commit)));
}

#[test]
fn commit_acknowledges_and_archives_abort_gives_the_delivery_back() {
    let mut sp = SharePartition::new(config(), 0);
    assert_eq!(sp.acquire("m", 10, 10, 0).len(), 1);
    let batches = [
        accept(0, 3),
        ack_batch(4, 4, AcknowledgeType::Reject.code()).unwrap(),
    ];
    assert_eq!(lock(&mut sp, "m", owner(9, 0), &batches), Ok(5));
    assert_eq!(sp.locked_count("#producer.9.0"), 5);
    // Another producer's marker, or an older epoch's, changes nothing.
    assert_eq!(
        resolve(&mut sp, &marker(8, 0, TxnOutcome::Commit)),
        Resolved::default()
    );
    let done = resolve(&mut sp, &marker(9, 0, TxnOutcome::Commit));
    assert_eq!(done.owners, vec!["#producer.9.0".to_string()]);
    assert_eq!(
        (done.acknowledged, done.archived, done.released),
        (5 - 1, 1, 0)
    );
    assert_eq!(sp.spso(), 5);
    // Twice: a no-op.
    assert_eq!(
        resolve(&mut sp, &marker(9, 0, TxnOutcome::Commit)),
        Resolved::default()
    );

    assert_eq!(lock(&mut sp, "m", owner(9, 1), &[accept(5, 9)]), Ok(5));
    let done = resolve(&mut sp, &marker(9, 1, TxnOutcome::Abort));
    assert_eq!(done.released, 5);
    for offset in 5..10 {
        // Acquired once, aborted: back to AVAILABLE with count 0, so the redelivery is the
        // same delivery (count 1) again.
        assert_eq!(state(&sp, offset), Some(("AVAILABLE".into(), 0)));
    }
    assert_eq!(sp.acquire("m", 10, 10, 0)[0].delivery_count, 1);
}

#[test]
fn refusals_change_nothing() {
    let mut sp = SharePartition::new(config(), 0);
    sp.acquire("m", 10, 10, 0);
    // RELEASE, GAP and RENEW have no meaning inside a producer transaction (the draft).
    for t in [
        AcknowledgeType::Release,
        AcknowledgeType::Gap,
        AcknowledgeType::Renew,
    ] {
        assert_eq!(
            lock(&mut sp, "m", owner(1, 0), &[AckBatch::new(0, 0, t)]),
            Err(ShareLockError::InvalidAcknowledgeType(t.code()))
        );
        assert!(matches!(
            ack_batch(0, 0, t.code()),
            Err(ShareLockError::InvalidAcknowledgeType(_))
        ));
    }
    // Not held by this member: INVALID_RECORD_STATE, all-or-nothing.
    let err = lock(&mut sp, "other", owner(1, 0), &[accept(0, 3)]).unwrap_err();
    assert_eq!(refusal(&err), Refusal::NotAcquired);
    let err = lock(&mut sp, "m", owner(1, 0), &[accept(5, 12)]).unwrap_err();
    assert_eq!(refusal(&err), Refusal::NotAcquired);
    assert_eq!(sp.locked_records(), 0);
    assert!(sp.locked_txns().is_empty());
}

#[test]
fn an_older_epoch_is_fenced_a_newer_one_is_not() {
    let mut sp = SharePartition::new(config(), 0);
    sp.acquire("m", 10, 10, 0);
    assert_eq!(lock(&mut sp, "m", owner(1, 4), &[accept(0, 1)]), Ok(2));
    let err = lock(&mut sp, "m", owner(1, 3), &[accept(2, 3)]).unwrap_err();
    assert_eq!(
        err,
        ShareLockError::FencedEpoch {
            lock: owner(1, 3),
            held_epoch: 4
        }
    );
    assert_eq!(refusal(&err), Refusal::Fenced);
    assert_eq!(state(&sp, 2), Some(("ACQUIRED".into(), 1)));
    // Another producer is not fenced by it.
    assert_eq!(lock(&mut sp, "m", owner(2, 0), &[accept(2, 2)]), Ok(1));
    // The coordinator fences epoch 4 (InitProducerId): abort marker with the bumped epoch 5
    // releases epoch 4's locks, not producer 2's.
    let done = resolve(&mut sp, &marker(1, 5, TxnOutcome::Abort));
    assert_eq!(done.released, 2);
    assert_eq!(sp.locked_txns(), vec!["#producer.2.0".to_string()]);
    // The zombie (epoch 4) comes back after its abort: no lock fences it any more, the applied
    // marker (epoch 5) does; it would otherwise ride the producer's next transaction.
    let err = lock(&mut sp, "m", owner(1, 4), &[accept(3, 3)]).unwrap_err();
    assert!(
        matches!(err, ShareLockError::FencedEpoch { held_epoch: 5, .. }),
        "{err:?}"
    );
    // The next transaction runs at the marker's epoch (KIP-890) or later.
    assert_eq!(lock(&mut sp, "m", owner(1, 5), &[accept(3, 3)]), Ok(1));
}

#[test]
fn the_two_roads_share_one_locked_state_and_do_not_resolve_each_other() {
    let mut sp = SharePartition::new(config(), 0);
    sp.acquire("m", 10, 10, 0);
    sp.lock("m", "g-job-1", &[accept(0, 4)]).unwrap();
    lock(&mut sp, "m", owner(3, 0), &[accept(5, 9)]).unwrap();
    assert_eq!(sp.locked_records(), 10);
    assert_eq!(
        resolve(&mut sp, &marker(3, 0, TxnOutcome::Abort)).released,
        5
    );
    assert_eq!(sp.locked_count("g-job-1"), 5);
    assert_eq!(sp.commit("#producer.3.0").acknowledged, 0);
    assert_eq!(sp.commit("g-job-1").acknowledged, 5);
    assert_eq!(sp.spso(), 5);
}

#[test]
fn producer_locks_survive_a_snapshot_round_trip() {
    let mut sp = SharePartition::new(config(), 0);
    sp.acquire("m", 6, 10, 0);
    lock(&mut sp, "m", owner(7, 2), &[accept(0, 2)]).unwrap();
    let restored = SharePartition::from_snapshot(config(), &sp.snapshot()).unwrap();
    let mut restored = restored;
    assert_eq!(restored.locked_txns(), vec!["#producer.7.2".to_string()]);
    // The ACQUIRED records 3..=5 did not persist (the window ends at the locks); the LOCKED
    // ones did, with their count.
    assert_eq!(
        state(&restored, 0),
        Some(("LOCKED{#producer.7.2, Accept}".into(), 1))
    );
    assert_eq!(state(&restored, 3), None);
    assert_eq!(restored.next_fetch_offset(), 3);
    assert_eq!(
        resolve(&mut restored, &marker(7, 2, TxnOutcome::Commit)).acknowledged,
        3
    );
    assert_eq!(restored.spso(), 3);
}

/// The model: one entry per offset.
#[derive(Clone, Debug, PartialEq)]
enum M {
    Available(u16),
    Acquired(String, u16),
    Locked(String, LockOutcome, u16),
    Acknowledged,
    Archived,
}

/// A seeded random walk of acquire, lock (both roads), release, markers and share-transaction
/// decisions, checked offset by offset against the model after every step.
#[test]
fn random_walk_matches_a_trivial_model() {
    const N: i64 = 40;
    for seed in 0..200u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut sp = SharePartition::new(config(), 0);
        let mut model: Vec<M> = (0..N).map(|_| M::Available(0)).collect();
        let members = ["a", "b"];
        let mut fences: std::collections::HashMap<i64, i16> = Default::default();
        for step in 0..120 {
            let what = rng.gen_range(0..6);
            match what {
                0 => {
                    let m = members[rng.gen_range(0..2)];
                    for r in sp.acquire(m, N, rng.gen_range(1..8), 0) {
                        for o in r.first..=r.last {
                            let c = match &model[o as usize] {
                                M::Available(c) => *c,
                                other => {
                                    panic!("seed {seed} step {step}: acquired {o} in {other:?}")
                                }
                            };
                            assert_eq!(r.delivery_count, c + 1, "seed {seed} step {step}");
                            model[o as usize] = M::Acquired(m.into(), c + 1);
                        }
                    }
                }
                1 | 2 => {
                    let m = members[rng.gen_range(0..2)];
                    let first = rng.gen_range(0..N);
                    let last = (first + rng.gen_range(0..4)).min(N - 1);
                    let outcome = if rng.gen_bool(0.8) {
                        LockOutcome::Accept
                    } else {
                        LockOutcome::Reject
                    };
                    let t = match outcome {
                        LockOutcome::Accept => AcknowledgeType::Accept,
                        LockOutcome::Reject => AcknowledgeType::Reject,
                    };
                    let batch = [AckBatch::new(first, last, t)];
                    let (name, got) = if what == 1 {
                        let o = owner(rng.gen_range(1..3), rng.gen_range(0..3));
                        (
                            o.owner_name(),
                            lock(&mut sp, m, o, &batch).map_err(|e| refusal(&e)),
                        )
                    } else {
                        let name = format!("g-j-{}", rng.gen_range(0..2));
                        let got = sp
                            .lock(m, &name, &batch)
                            .map_err(|e| refusal(&ShareLockError::Share(e)));
                        (name, got)
                    };
                    // Model: fenced if the same producer holds a newer epoch anywhere here;
                    // else every offset must be ACQUIRED by m.
                    let fenced = ProducerLock::parse(&name).is_some_and(|o| {
                        fences
                            .get(&o.producer_id)
                            .is_some_and(|e| *e > o.producer_epoch)
                            || model.iter().any(|s| match s {
                                M::Locked(n, _, _) => ProducerLock::parse(n).is_some_and(|h| {
                                    h.producer_id == o.producer_id
                                        && h.producer_epoch > o.producer_epoch
                                }),
                                _ => false,
                            })
                    });
                    let held = (first..=last)
                        .all(|o| matches!(&model[o as usize], M::Acquired(x, _) if x == m));
                    let expected = if fenced {
                        Err(Refusal::Fenced)
                    } else if !held {
                        Err(Refusal::NotAcquired)
                    } else {
                        for o in first..=last {
                            let M::Acquired(_, c) = model[o as usize] else {
                                unreachable!()
                            };
                            model[o as usize] = M::Locked(name.clone(), outcome, c);
                        }
                        Ok((last - first + 1) as u64)
                    };
                    assert_eq!(
                        got, expected,
                        "seed {seed} step {step}: lock {name} {first}..={last}"
                    );
                }
                3 => {
                    let m = members[rng.gen_range(0..2)];
                    sp.release_member(m);
                    for s in model.iter_mut() {
                        if let M::Acquired(x, c) = s {
                            if x == m {
                                *s = if *c >= LIMIT {
                                    M::Archived
                                } else {
                                    M::Available(*c)
                                };
                            }
                        }
                    }
                }
                4 => {
                    let mk = marker(
                        rng.gen_range(1..3),
                        rng.gen_range(0..4),
                        if rng.gen_bool(0.5) {
                            TxnOutcome::Commit
                        } else {
                            TxnOutcome::Abort
                        },
                    );
                    resolve(&mut sp, &mk);
                    let f = fences.entry(mk.producer_id).or_insert(mk.producer_epoch);
                    *f = (*f).max(mk.producer_epoch);
                    for s in model.iter_mut() {
                        if let M::Locked(n, outcome, c) = s {
                            if ProducerLock::parse(n).is_some_and(|o| o.resolved_by(&mk)) {
                                *s = decide(mk.outcome == TxnOutcome::Commit, *outcome, *c);
                            }
                        }
                    }
                }
                _ => {
                    let name = format!("g-j-{}", rng.gen_range(0..2));
                    let commit = rng.gen_bool(0.5);
                    if commit {
                        sp.commit(&name);
                    } else {
                        sp.abort(&name);
                    }
                    for s in model.iter_mut() {
                        if let M::Locked(n, outcome, c) = s {
                            if *n == name {
                                *s = decide(commit, *outcome, *c);
                            }
                        }
                    }
                }
            }
            sp.check_invariants();
            for o in 0..N {
                let want = match &model[o as usize] {
                    M::Available(c) => Some(("AVAILABLE".to_string(), *c)),
                    M::Acquired(_, c) => Some(("ACQUIRED".to_string(), *c)),
                    M::Locked(n, outcome, c) => Some((format!("LOCKED{{{n}, {outcome:?}}}"), *c)),
                    M::Acknowledged | M::Archived => None,
                };
                let got = state(&sp, o);
                match want {
                    // Terminal: below the SPSO it is gone; above it the state must match.
                    None => assert!(
                        o < sp.spso()
                            || matches!(
                                got.as_ref().map(|g| g.0.as_str()),
                                Some("ACKNOWLEDGED" | "ARCHIVED")
                            ),
                        "seed {seed} step {step} offset {o}: {got:?} vs {:?}",
                        model[o as usize]
                    ),
                    // Never acquired offsets (past SPEO) are AVAILABLE(0) in the model.
                    Some(w) if got.is_none() && o > sp.speo() => {
                        assert_eq!(
                            w,
                            ("AVAILABLE".to_string(), 0),
                            "seed {seed} step {step} offset {o}"
                        )
                    }
                    Some(w) => assert_eq!(got, Some(w), "seed {seed} step {step} offset {o}"),
                }
            }
        }
    }
}

fn decide(commit: bool, outcome: LockOutcome, count: u16) -> M {
    match (commit, outcome) {
        (true, LockOutcome::Accept) => M::Acknowledged,
        (true, LockOutcome::Reject) => M::Archived,
        (false, _) => M::Available(count - 1),
    }
}
