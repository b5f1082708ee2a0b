//! Unit tests of `SharePartition`: each rule of the module docs on a small hand-built case.

use super::*;
use crate::share::state::AcknowledgeType::{Accept, Gap, Reject, Release, Renew};

const LOCK_MS: u64 = 30_000;

fn config() -> ShareConfig {
    ShareConfig {
        record_lock_duration_ms: LOCK_MS,
        delivery_count_limit: 3,
        partition_max_record_locks: 100,
    }
}

fn sp(start: i64) -> SharePartition {
    SharePartition::new(config(), start)
}

fn ack(first: i64, last: i64, t: AcknowledgeType) -> AckBatch {
    AckBatch::new(first, last, t)
}

fn state(p: &SharePartition, offset: i64) -> Option<(RecordState, u16)> {
    p.record(offset).map(|v| (v.state, v.delivery_count))
}

#[test]
fn acquire_takes_new_offsets_up_to_log_end_and_max_records() {
    let mut p = sp(10);
    assert_eq!(p.acquire("a", 10, 5, 0), vec![]); // nothing in the log yet
    let got = p.acquire("a", 30, 5, 0);
    assert_eq!(
        got,
        vec![AcquiredRange {
            first: 10,
            last: 14,
            delivery_count: 1
        }]
    );
    let got = p.acquire("b", 30, 100, 0);
    assert_eq!(
        got,
        vec![AcquiredRange {
            first: 15,
            last: 29,
            delivery_count: 1
        }]
    );
    assert_eq!((p.spso(), p.speo(), p.in_flight_records()), (10, 29, 20));
    assert_eq!(p.run_count(), 2, "two members, two runs");
    assert_eq!(p.record(12).unwrap().member, Some("a"));
    assert_eq!(p.record(12).unwrap().lock_deadline_ms, Some(LOCK_MS));
    assert_eq!(p.acquire("a", 30, 0, 0), vec![]);
    p.check_invariants();
}

#[test]
fn in_flight_cap_stops_new_offsets_but_not_available_ones() {
    let mut p = SharePartition::new(
        ShareConfig {
            partition_max_record_locks: 10,
            ..config()
        },
        0,
    );
    assert_eq!(p.acquire("a", 1000, 1000, 0).last().unwrap().last, 9);
    assert_eq!(p.acquire("a", 1000, 1000, 0), vec![], "window full");
    p.acknowledge("a", &[ack(5, 6, Release)], 0).unwrap();
    let got = p.acquire("b", 1000, 1000, 0);
    assert_eq!(
        got,
        vec![AcquiredRange {
            first: 5,
            last: 6,
            delivery_count: 2
        }]
    );
    p.acknowledge("a", &[ack(0, 2, Accept)], 0).unwrap();
    assert_eq!(p.spso(), 3);
    let got = p.acquire("b", 1000, 1000, 0);
    assert_eq!(
        got,
        vec![AcquiredRange {
            first: 10,
            last: 12,
            delivery_count: 1
        }]
    );
    assert_eq!(p.in_flight_records(), 10);
    p.check_invariants();
}

#[test]
fn acquire_skips_held_records_and_merges_output_by_delivery_count() {
    let mut p = sp(0);
    p.acquire("a", 10, 10, 0);
    p.acknowledge("a", &[ack(2, 3, Release), ack(6, 6, Release)], 0)
        .unwrap();
    assert_eq!(p.next_fetch_offset(), 2);
    let got = p.acquire("b", 12, 100, 5);
    assert_eq!(
        got,
        vec![
            AcquiredRange {
                first: 2,
                last: 3,
                delivery_count: 2
            },
            AcquiredRange {
                first: 6,
                last: 6,
                delivery_count: 2
            },
            AcquiredRange {
                first: 10,
                last: 11,
                delivery_count: 1
            },
        ]
    );
    assert_eq!(p.next_fetch_offset(), 12);
    p.check_invariants();
}

#[test]
fn accept_reject_gap_and_spso_advance() {
    let mut p = sp(0);
    p.acquire("a", 10, 10, 0);
    let counts = p
        .acknowledge(
            "a",
            &[ack(0, 1, Accept), ack(2, 2, Gap), ack(3, 4, Reject)],
            0,
        )
        .unwrap();
    assert_eq!(
        counts,
        AckCounts {
            acknowledged: 2,
            archived: 3,
            released: 0,
            renewed: 0
        }
    );
    assert_eq!(p.spso(), 5, "SPSO advanced over the terminal prefix");
    assert_eq!(state(&p, 4), None);
    p.acknowledge("a", &[ack(7, 9, Accept)], 0).unwrap();
    assert_eq!(p.spso(), 5);
    p.acknowledge("a", &[ack(5, 6, Accept)], 0).unwrap();
    assert_eq!((p.spso(), p.speo(), p.run_count()), (10, 9, 0));
    p.check_invariants();
}

#[test]
fn per_offset_types_split_one_batch() {
    let mut p = sp(0);
    p.acquire("a", 5, 5, 0);
    let batch = AckBatch {
        first: 0,
        last: 4,
        types: vec![Release, Accept, Accept, Reject, Release],
    };
    let counts = p.acknowledge("a", &[batch], 0).unwrap();
    assert_eq!(
        counts,
        AckCounts {
            acknowledged: 2,
            archived: 1,
            released: 2,
            renewed: 0
        }
    );
    assert_eq!(state(&p, 0), Some((RecordState::Available, 1)));
    assert_eq!(state(&p, 1), Some((RecordState::Acknowledged, 1)));
    assert_eq!(state(&p, 3), Some((RecordState::Archived, 1)));
    p.check_invariants();
}

#[test]
fn release_at_the_delivery_limit_archives() {
    let mut p = sp(0);
    for delivery in 1..=3u16 {
        let got = p.acquire("a", 1, 1, 0);
        assert_eq!(
            got,
            vec![AcquiredRange {
                first: 0,
                last: 0,
                delivery_count: delivery
            }]
        );
        let counts = p.acknowledge("a", &[ack(0, 0, Release)], 0).unwrap();
        if delivery < 3 {
            assert_eq!(counts.released, 1);
        } else {
            assert_eq!(counts.archived, 1);
        }
    }
    assert_eq!(p.spso(), 1, "archived at the limit (3)");
    p.check_invariants();
}

#[test]
fn acks_of_records_not_held_change_nothing() {
    let mut p = sp(0);
    p.acquire("a", 5, 5, 0);
    p.acquire("b", 10, 5, 0);
    let before = p.clone();
    // b's records, by a; one good batch before the bad one: all-or-nothing.
    let err = p
        .acknowledge("a", &[ack(0, 1, Accept), ack(4, 6, Accept)], 0)
        .unwrap_err();
    assert_eq!(err, ShareError::InvalidRecordState { first: 4, last: 6 });
    assert_eq!(p.snapshot(), before.snapshot());
    assert_eq!(
        p.runs().collect::<Vec<_>>(),
        before.runs().collect::<Vec<_>>()
    );
    // Unknown member, offsets beyond SPEO, below SPSO.
    assert!(p.acknowledge("zz", &[ack(0, 0, Accept)], 0).is_err());
    assert!(p.acknowledge("b", &[ack(9, 10, Accept)], 0).is_err());
    p.acknowledge("a", &[ack(0, 0, Accept)], 0).unwrap();
    assert!(
        p.acknowledge("a", &[ack(0, 0, Accept)], 0).is_err(),
        "already acknowledged"
    );
    // Malformed batches: INVALID_REQUEST.
    let bad = [
        vec![ack(3, 2, Accept)],
        vec![ack(1, 2, Accept), ack(2, 3, Accept)],
        vec![AckBatch {
            first: 1,
            last: 3,
            types: vec![Accept, Accept],
        }],
        vec![AckBatch {
            first: 1,
            last: 1,
            types: vec![],
        }],
        vec![ack(-1, 1, Accept)],
    ];
    for batches in bad {
        let err = p.acknowledge("a", &batches, 0).unwrap_err();
        assert!(
            matches!(err, ShareError::InvalidRequest { .. }),
            "{batches:?}: {err:?}"
        );
    }
    p.check_invariants();
}

#[test]
fn lock_expiry_releases_and_renew_rearms() {
    let mut p = sp(0);
    p.acquire("a", 4, 4, 1_000);
    assert_eq!(p.renew("a", &[(2, 3)], 20_000).unwrap(), 2);
    assert_eq!(
        p.record(2).unwrap().lock_deadline_ms,
        Some(20_000 + LOCK_MS)
    );
    assert_eq!(p.expire_locks(LOCK_MS + 999), 0);
    assert_eq!(p.expire_locks(LOCK_MS + 1_000), 2, "deadline reached");
    assert_eq!(state(&p, 0), Some((RecordState::Available, 1)));
    assert_eq!(state(&p, 2), Some((RecordState::Acquired, 1)));
    assert_eq!(p.expire_locks(20_000 + LOCK_MS), 2);
    assert_eq!(p.acquired_records(), 0);
    assert!(p.renew("a", &[(0, 0)], 0).is_err(), "nothing held any more");
    p.check_invariants();
}

#[test]
fn lock_expiry_at_the_limit_archives() {
    let mut p = sp(0);
    let mut now = 0;
    for _ in 0..3 {
        assert_eq!(p.acquire("a", 1, 1, now).len(), 1);
        now += LOCK_MS;
        assert_eq!(p.expire_locks(now), 1);
    }
    assert_eq!(p.spso(), 1);
    assert!(p.acquire("a", 1, 1, now).is_empty());
}

#[test]
fn member_release_frees_only_that_members_acquired_records() {
    let mut p = sp(0);
    p.acquire("a", 4, 4, 0);
    p.acquire("b", 8, 4, 0);
    p.lock("a", "g-x-1", &[ack(0, 1, Accept)]).unwrap();
    assert_eq!(p.release_member("a"), 2);
    assert_eq!(
        state(&p, 0).unwrap().0,
        RecordState::Locked {
            txn: TxnKey(0),
            outcome: LockOutcome::Accept
        }
    );
    assert_eq!(state(&p, 2), Some((RecordState::Available, 1)));
    assert_eq!(state(&p, 5).unwrap().0, RecordState::Acquired);
    assert_eq!(p.release_member("a"), 0);
    assert_eq!(p.release_member("nobody"), 0);
    p.check_invariants();
}

#[test]
fn lock_then_commit_acknowledges_and_archives() {
    let mut p = sp(0);
    p.acquire("a", 6, 6, 0);
    let locked = p
        .lock(
            "a",
            "g-x-1",
            &[AckBatch {
                first: 0,
                last: 3,
                types: vec![Accept, Reject, Gap, Accept],
            }],
        )
        .unwrap();
    assert_eq!(locked, 4);
    assert_eq!(p.locked_count("g-x-1"), 4);
    assert_eq!(
        p.locked_ranges("g-x-1"),
        vec![
            LockedRange {
                first: 0,
                last: 0,
                outcome: LockOutcome::Accept,
                delivery_count: 1
            },
            LockedRange {
                first: 1,
                last: 2,
                outcome: LockOutcome::Reject,
                delivery_count: 1
            },
            LockedRange {
                first: 3,
                last: 3,
                outcome: LockOutcome::Accept,
                delivery_count: 1
            },
        ]
    );
    assert_eq!(p.locked_txns(), vec!["g-x-1".to_string()]);
    // Lock expiry and member release never touch LOCKED.
    assert_eq!(p.expire_locks(10 * LOCK_MS), 2);
    assert_eq!(p.release_member("a"), 0);
    assert_eq!(p.locked_count("g-x-1"), 4);
    assert_eq!(
        p.commit("g-x-1"),
        CommitCounts {
            acknowledged: 2,
            archived: 2
        }
    );
    assert_eq!(p.spso(), 4);
    assert_eq!(p.commit("g-x-1"), CommitCounts::default(), "idempotent");
    assert_eq!(p.abort("g-x-1"), 0, "nothing left to abort");
    assert!(p.locked_txns().is_empty());
    p.check_invariants();
}

#[test]
fn abort_does_not_consume_a_delivery_attempt() {
    // Limit 3: five abort cycles, and the record is still delivered with count 1 each time.
    let mut p = sp(0);
    for _ in 0..5 {
        let got = p.acquire("a", 1, 1, 0);
        assert_eq!(
            got,
            vec![AcquiredRange {
                first: 0,
                last: 0,
                delivery_count: 1
            }]
        );
        p.lock("a", "g-x-1", &[ack(0, 0, Accept)]).unwrap();
        assert_eq!(p.abort("g-x-1"), 1);
        assert_eq!(state(&p, 0), Some((RecordState::Available, 0)));
        assert_eq!(p.abort("g-x-1"), 0, "idempotent");
    }
    // A release still counts.
    p.acquire("a", 1, 1, 0);
    p.acknowledge("a", &[ack(0, 0, Release)], 0).unwrap();
    assert_eq!(state(&p, 0), Some((RecordState::Available, 1)));
    p.check_invariants();
}

#[test]
fn lock_refuses_release_renew_and_foreign_records() {
    let mut p = sp(0);
    p.acquire("a", 4, 4, 0);
    p.acquire("b", 8, 4, 0);
    let before = p.snapshot();
    for t in [Release, Renew] {
        let err = p.lock("a", "g-x-1", &[ack(0, 0, t)]).unwrap_err();
        assert!(matches!(err, ShareError::InvalidRequest { .. }), "{err:?}");
    }
    let mixed = AckBatch {
        first: 0,
        last: 1,
        types: vec![Accept, Release],
    };
    assert!(matches!(
        p.lock("a", "g-x-1", &[mixed]).unwrap_err(),
        ShareError::InvalidRequest { .. }
    ));
    let err = p
        .lock("a", "g-x-1", &[ack(0, 1, Accept), ack(3, 4, Accept)])
        .unwrap_err();
    assert_eq!(err, ShareError::InvalidRecordState { first: 3, last: 4 });
    assert_eq!(p.snapshot(), before);
    assert_eq!(p.locked_count("g-x-1"), 0);
    assert!(p.locked_txns().is_empty(), "a refused lock interns nothing");
    assert!(matches!(
        p.lock("a", "", &[ack(0, 0, Accept)]).unwrap_err(),
        ShareError::InvalidRequest { .. }
    ));
    // Locked records cannot be acknowledged or locked again.
    p.lock("a", "g-x-1", &[ack(0, 0, Accept)]).unwrap();
    assert!(p.acknowledge("a", &[ack(0, 0, Accept)], 0).is_err());
    assert!(p.lock("a", "g-x-2", &[ack(0, 0, Accept)]).is_err());
    p.check_invariants();
}

#[test]
fn snapshot_hides_acquisitions_and_round_trips() {
    let mut p = sp(0);
    p.acquire("a", 10, 10, 0);
    p.acknowledge(
        "a",
        &[ack(1, 1, Accept), ack(3, 4, Release), ack(6, 6, Reject)],
        0,
    )
    .unwrap();
    p.acquire("b", 10, 1, 0); // re-acquires 3 with count 2
    p.lock("a", "g-x-9", &[ack(7, 8, Accept)]).unwrap();
    let snap = p.snapshot();
    assert_eq!(snap.spso, 0);
    let expect = vec![
        StateRun {
            first: 1,
            last: 1,
            state: DurableState::Acknowledged,
            delivery_count: 1,
        },
        StateRun {
            first: 3,
            last: 4,
            state: DurableState::Available,
            delivery_count: 1,
        },
        StateRun {
            first: 6,
            last: 6,
            state: DurableState::Archived,
            delivery_count: 1,
        },
        StateRun {
            first: 7,
            last: 8,
            state: DurableState::Locked {
                txn: "g-x-9".into(),
                outcome: LockOutcome::Accept,
            },
            delivery_count: 1,
        },
    ];
    assert_eq!(snap.runs, expect);
    assert_eq!(snap.speo(), 8);
    let q = SharePartition::from_snapshot(config(), &snap).unwrap();
    q.check_invariants();
    assert_eq!(q.snapshot(), snap);
    assert_eq!(q.acquired_records(), 0);
    assert_eq!(q.locked_count("g-x-9"), 2);
    assert_eq!(state(&q, 0), Some((RecordState::Available, 0)));
    assert_eq!(state(&q, 3), Some((RecordState::Available, 1)));
    assert_eq!(q.speo(), 8);
}

#[test]
fn deltas_replay_to_the_snapshot() {
    let mut p = sp(5);
    let first = p
        .take_delta()
        .expect("a new partition persists its start offset");
    assert!(first.reset);
    assert_eq!(first.spso, 5);
    assert!(p.take_delta().is_none());
    let mut replayed = ShareSnapshot {
        spso: 0,
        runs: vec![],
    };
    replayed.apply_delta(&first).unwrap();

    p.acquire("a", 20, 15, 0);
    assert!(p.take_delta().is_none(), "acquiring persists nothing");
    p.acknowledge("a", &[ack(5, 6, Accept), ack(9, 9, Release)], 0)
        .unwrap();
    let d = p.take_delta().unwrap();
    assert!(!d.reset);
    assert_eq!(d.spso, 7);
    replayed.apply_delta(&d).unwrap();
    assert_eq!(replayed, p.snapshot());

    p.lock("a", "g-t-1", &[ack(10, 12, Accept)]).unwrap();
    replayed.apply_delta(&p.take_delta().unwrap()).unwrap();
    assert_eq!(replayed, p.snapshot());
    p.abort("g-t-1");
    let d = p.take_delta().unwrap();
    assert!(d
        .runs
        .iter()
        .any(|r| r.state == DurableState::Available && r.delivery_count == 0));
    replayed.apply_delta(&d).unwrap();
    assert_eq!(replayed, p.snapshot());
    assert_eq!(p.dirty_range_count(), 0);
}

#[test]
fn set_start_offset_needs_no_records_in_flight() {
    let mut p = sp(0);
    p.acquire("a", 10, 10, 0);
    let err = p.set_start_offset(100).unwrap_err();
    assert_eq!(
        err,
        ShareError::RecordsInFlight {
            acquired_records: 10,
            locked_records: 0
        }
    );
    p.lock("a", "g-t-1", &[ack(0, 0, Accept)]).unwrap();
    p.release_member("a");
    assert!(matches!(
        p.set_start_offset(100),
        Err(ShareError::RecordsInFlight {
            locked_records: 1,
            ..
        })
    ));
    p.abort("g-t-1");
    p.take_delta();
    p.set_start_offset(3).unwrap();
    assert_eq!((p.spso(), p.speo(), p.run_count()), (3, 2, 0));
    let d = p.take_delta().unwrap();
    assert!(d.reset && d.spso == 3 && d.runs.is_empty());
    assert_eq!(
        p.acquire("a", 5, 10, 0),
        vec![AcquiredRange {
            first: 3,
            last: 4,
            delivery_count: 1
        }]
    );
    assert!(p.set_start_offset(-1).is_err());
}

#[test]
fn large_contiguous_ranges_stay_few_runs() {
    let mut p = SharePartition::new(
        ShareConfig {
            partition_max_record_locks: 1_000_000,
            ..config()
        },
        0,
    );
    p.acquire("a", 1_000_000, 1_000_000, 0);
    assert_eq!(p.run_count(), 1);
    p.lock("a", "g-t-1", &[ack(0, 99_999, Accept)]).unwrap();
    p.acknowledge("a", &[ack(100_000, 499_999, Release)], 0)
        .unwrap();
    assert_eq!(p.run_count(), 3);
    assert_eq!(p.acquire("b", 1_000_000, 400_000, 0).len(), 1);
    assert_eq!(p.run_count(), 3);
    assert_eq!(p.commit("g-t-1").acknowledged, 100_000);
    assert_eq!(p.run_count(), 2);
    assert_eq!(p.spso(), 100_000);
    p.check_invariants();
}

/// Measured on Kafka 4.4: 10 records, limit 5, each delivery left to expire.
#[test]
fn throttled_delivery_near_the_limit_matches_kafka() {
    let mut p = SharePartition::new(
        ShareConfig {
            delivery_count_limit: 5,
            ..config()
        },
        0,
    );
    let mut now = 0;
    let mut rounds = Vec::new();
    for _ in 0..9 {
        let got = p.acquire("a", 10, 500, now);
        let n: i64 = got.iter().map(|r| r.last - r.first + 1).sum();
        let counts: Vec<u16> = got.iter().map(|r| r.delivery_count).collect();
        rounds.push((n, counts));
        now += LOCK_MS;
        p.expire_locks(now);
        p.check_invariants();
    }
    let n: Vec<i64> = rounds.iter().map(|r| r.0).collect();
    assert_eq!(n, vec![10, 10, 10, 5, 1, 1, 1, 1, 1]);
    assert_eq!(rounds[3].1, vec![4]);
    assert_eq!(rounds[4].1, vec![5]);
    // Offsets 0..=4 archived at 5 deliveries; 5..=9 wait at 3: the batch of 10 halves again.
    assert_eq!(p.spso(), 5);
    let got = p.acquire("a", 10, 500, now);
    assert_eq!(
        got,
        vec![AcquiredRange {
            first: 5,
            last: 9,
            delivery_count: 4
        }]
    );
}

#[test]
fn a_throttled_batch_is_delivered_alone() {
    // Limit 5, threshold 3. Batch A [0, 3] at count 3, batch B [4, 7] new.
    let cfg = ShareConfig {
        delivery_count_limit: 5,
        ..config()
    };
    let mut p = SharePartition::new(cfg, 0);
    let mut now = 0;
    for _ in 0..3 {
        assert_eq!(p.acquire("a", 4, 500, now).len(), 1);
        now += LOCK_MS;
        p.expire_locks(now);
    }
    // A fetch reaching new offsets: only half of A (4 >> 1 = 2), nothing new.
    let got = p.acquire("a", 8, 500, now);
    assert_eq!(
        got,
        vec![AcquiredRange {
            first: 0,
            last: 1,
            delivery_count: 4
        }]
    );
    // The next fetch skips the held part, takes the rest of A (capped at 2) and stops.
    let got = p.acquire("b", 8, 500, now);
    assert_eq!(
        got,
        vec![AcquiredRange {
            first: 2,
            last: 3,
            delivery_count: 4
        }]
    );
    // Nothing of A is available: new offsets come as usual.
    let got = p.acquire("b", 8, 500, now);
    assert_eq!(
        got,
        vec![AcquiredRange {
            first: 4,
            last: 7,
            delivery_count: 1
        }]
    );
    // A batch acquired after an unthrottled one stops the call.
    now += LOCK_MS;
    p.expire_locks(now); // A at 4 (last attempt next), B at 1
    let got = p.acquire("a", 8, 500, now);
    assert_eq!(
        got,
        vec![AcquiredRange {
            first: 0,
            last: 0,
            delivery_count: 5
        }]
    );
    p.check_invariants();
}

#[test]
fn log_start_archives_available_and_leaves_the_rest_above() {
    let mut p = sp(0);
    p.acquire("a", 10, 10, 0);
    p.acknowledge(
        "a",
        &[ack(0, 1, Release), ack(6, 7, Accept), ack(8, 9, Release)],
        0,
    )
    .unwrap();
    // 0-1 AVAILABLE(1), 2-5 ACQUIRED by a, 6-7 ACKNOWLEDGED, 8-9 AVAILABLE(1).
    p.take_delta();
    assert_eq!(p.move_log_start(4), 2);
    assert_eq!(state(&p, 1), None, "archived, below SPSO");
    assert_eq!(p.spso(), 2, "ACQUIRED below the log start holds SPSO");
    assert_eq!(state(&p, 7), Some((RecordState::Acknowledged, 1)));
    assert_eq!(state(&p, 8), Some((RecordState::Available, 1)));
    assert!(p.next_fetch_offset() >= 4);
    // The lock of 2-5 ends: 2-3 (below) are archived, 4-5 come back.
    assert_eq!(p.expire_locks(LOCK_MS), 4);
    assert_eq!(p.spso(), 4);
    assert_eq!(state(&p, 4), Some((RecordState::Available, 1)));
    assert_eq!(p.next_fetch_offset(), 4);
    let delta = p.take_delta().unwrap();
    let mut view = ShareSnapshot {
        spso: 0,
        runs: vec![],
    };
    view.apply_delta(&ShareDelta {
        reset: true,
        ..delta.clone()
    })
    .unwrap();
    assert_eq!(view.spso, 4);
    // Past SPEO: offsets never acquired are skipped; SPEO + 1 moves to the log start.
    assert_eq!(p.acquire("a", 10, 500, LOCK_MS).len(), 2);
    p.acknowledge("a", &[ack(4, 5, Accept), ack(8, 9, Accept)], LOCK_MS)
        .unwrap();
    assert_eq!((p.spso(), p.speo()), (10, 9));
    p.move_log_start(20);
    assert_eq!((p.spso(), p.speo(), p.next_fetch_offset()), (20, 19, 20));
    assert_eq!(p.move_log_start(15), 0, "the log start never moves back");
    p.check_invariants();
}

#[test]
fn locked_below_the_log_start_waits_for_its_transaction() {
    let mut p = sp(0);
    p.acquire("a", 6, 6, 0);
    p.lock("a", "t1", &[ack(0, 2, Accept)]).unwrap();
    p.lock("a", "t2", &[ack(3, 5, Accept)]).unwrap();
    p.move_log_start(6);
    assert_eq!(p.spso(), 0);
    assert!(matches!(
        state(&p, 1),
        Some((RecordState::Locked { .. }, 1))
    ));
    assert_eq!(p.commit("t1").acknowledged, 3);
    assert_eq!(p.abort("t2"), 3);
    assert_eq!(p.record(4), None);
    assert_eq!((p.spso(), p.next_fetch_offset()), (6, 6));
    p.check_invariants();
    // A release below the log start archives too.
    let mut p = sp(0);
    p.acquire("a", 4, 4, 0);
    p.move_log_start(2);
    let counts = p.acknowledge("a", &[ack(0, 3, Release)], 0).unwrap();
    assert_eq!((counts.archived, counts.released), (2, 2));
    assert_eq!((p.spso(), p.next_fetch_offset()), (2, 2));
    p.check_invariants();
}
