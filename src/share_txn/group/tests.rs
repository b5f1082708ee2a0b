//! Unit tests of `GroupTransactions`: every operation, its idempotency, timeouts on an
//! explicit clock, max pending, wrong group, retention, restore.

use super::*;
use uuid::Uuid;

const G: &str = "my-share-group";

fn id(n: u32) -> String {
    format!("{G}-flink-job-{n}")
}

fn part(p: i32) -> TopicPartition {
    TopicPartition {
        topic_id: Uuid::from_u128(0xfeed),
        partition: p,
    }
}

fn group() -> GroupTransactions {
    GroupTransactions::new(G, TxnConfig::default())
}

fn causes(g: &mut GroupTransactions) -> Vec<(TxnChangeCause, String, TxnState)> {
    g.take_changes()
        .into_iter()
        .map(|c| (c.cause, c.record.transaction_id, c.record.state))
        .collect()
}

#[test]
fn transaction_ids_must_belong_to_the_group() {
    assert!(check_transaction_id(G, &id(42)).is_ok());
    assert!(
        check_transaction_id("g", "g-a-b-c-1").is_ok(),
        "prefix may contain '-'"
    );
    for bad in [
        "my-share-group-42",
        "my-share-group--42",
        "my-share-group-job-",
        "other-job-1",
        "my-share-groupx-job-1",
        "",
        "my-share-group",
    ] {
        let err = check_transaction_id(G, bad).unwrap_err();
        assert!(matches!(err, TxnError::InvalidRequest { .. }), "{bad}");
        assert_eq!(err.state(), TxnState::Empty);
    }
    let long = format!("{G}-{}-1", "p".repeat(SHARE_TRANSACTION_ID_BYTES_MAX));
    let invalid = |e: TxnError| matches!(e, TxnError::InvalidRequest { .. });
    assert!(invalid(check_transaction_id(G, &long).unwrap_err()));
    let mut g = group();
    assert!(invalid(g.begin("other-job-1", -1, 0).unwrap_err()));
    assert!(invalid(g.prepare("other-job-1", 0).unwrap_err()));
    assert_eq!(g.pending_count(), 0);
}

#[test]
fn begin_is_idempotent_and_resolves_the_timeout() {
    let mut g = group();
    let r = g.begin(&id(1), -1, 100).unwrap();
    assert_eq!(
        r,
        TxnReply {
            state: TxnState::Ongoing,
            timeout_ms: 60_000,
            changed: true
        }
    );
    let again = g.begin(&id(1), 5_000, 200).unwrap();
    assert_eq!(
        again,
        TxnReply {
            state: TxnState::Ongoing,
            timeout_ms: 60_000,
            changed: false
        }
    );
    let r = g.begin(&id(2), 5_000, 100).unwrap();
    assert_eq!(r.timeout_ms, 5_000);
    for bad in [0, -2, 900_001, i64::MIN] {
        let err = g.begin(&id(3), bad, 100).unwrap_err();
        assert!(
            matches!(
                err,
                TxnError::InvalidTransactionTimeout {
                    max_ms: 900_000,
                    ..
                }
            ),
            "{bad}: {err:?}"
        );
    }
    assert_eq!(g.begin(&id(3), 900_000, 100).unwrap().timeout_ms, 900_000);
    let rec = g.get(&id(1)).unwrap();
    assert_eq!(
        (rec.create_time_ms, rec.prepare_time_ms, rec.finish_time_ms),
        (100, None, None)
    );
    assert_eq!(
        causes(&mut g).len(),
        3,
        "one Began per new transaction, none for repeats"
    );
    // Begin of a finished transaction reports its state.
    g.prepare(&id(1), 300).unwrap();
    g.commit(&id(1), 400).unwrap();
    let r = g.begin(&id(1), -1, 500).unwrap();
    assert_eq!((r.state, r.changed), (TxnState::Committed, false));
    g.check_invariants();
}

#[test]
fn max_pending_counts_ongoing_and_prepare() {
    let mut g = group();
    for n in 0..5 {
        g.begin(&id(n), -1, 0).unwrap();
    }
    g.prepare(&id(0), 1).unwrap();
    let err = g.begin(&id(5), -1, 2).unwrap_err();
    assert_eq!(
        err,
        TxnError::ConcurrentTransactions {
            pending: 5,
            max_pending: 5
        }
    );
    assert_eq!(err.state(), TxnState::Empty);
    assert!(
        !g.begin(&id(4), -1, 2).unwrap().changed,
        "a known id still answers"
    );
    g.commit(&id(0), 3).unwrap();
    g.abort(&id(1), 3).unwrap();
    g.begin(&id(5), -1, 4).unwrap();
    g.begin(&id(6), -1, 4).unwrap();
    assert_eq!(g.pending_count(), 5);
    assert!(g.begin(&id(7), -1, 4).is_err());
    g.check_invariants();
}

#[test]
fn acknowledgements_need_an_ongoing_transaction() {
    let mut g = group();
    assert_eq!(
        g.register_participant(&id(1), part(0), 0).unwrap_err(),
        TxnError::TransactionalIdNotFound
    );
    g.begin(&id(1), -1, 0).unwrap();
    g.register_participant(&id(1), part(0), 1).unwrap();
    assert_eq!(g.acks_in_flight(&id(1)), 1);
    assert_eq!(g.complete_ack(&id(1), part(0), 7), TxnState::Ongoing);
    g.register_participant(&id(1), part(1), 1).unwrap();
    assert_eq!(g.complete_ack(&id(1), part(1), 0), TxnState::Ongoing);
    g.register_participant(&id(1), part(0), 1).unwrap();
    assert_eq!(g.complete_ack(&id(1), part(0), 3), TxnState::Ongoing);
    let rec = g.get(&id(1)).unwrap();
    assert_eq!(
        rec.participants,
        vec![
            Participant {
                partition: part(0),
                locked_records: 10
            },
            Participant {
                partition: part(1),
                locked_records: 0
            },
        ]
    );
    g.prepare(&id(1), 2).unwrap();
    let err = g.register_participant(&id(1), part(2), 3).unwrap_err();
    assert_eq!(
        err,
        TxnError::InvalidTxnState {
            state: TxnState::Prepare
        }
    );
    g.commit(&id(1), 4).unwrap();
    assert_eq!(
        g.register_participant(&id(1), part(0), 5)
            .unwrap_err()
            .state(),
        TxnState::Committed
    );
    g.begin(&id(2), -1, 5).unwrap();
    g.abort(&id(2), 6).unwrap();
    assert_eq!(
        g.register_participant(&id(2), part(0), 7)
            .unwrap_err()
            .state(),
        TxnState::Aborted
    );
    g.check_invariants();
}

#[test]
fn an_ack_completing_after_abort_is_told_to_release() {
    let mut g = group();
    g.begin(&id(1), -1, 0).unwrap();
    g.register_participant(&id(1), part(0), 0).unwrap();
    g.abort(&id(1), 1).unwrap();
    assert_eq!(g.complete_ack(&id(1), part(0), 4), TxnState::Aborted);
    assert_eq!(
        g.complete_ack(&id(9), part(0), 4),
        TxnState::Empty,
        "unknown: release too"
    );
}

#[test]
fn prepare_then_commit_and_their_idempotency() {
    let mut g = group();
    assert_eq!(
        g.prepare(&id(1), 0).unwrap_err(),
        TxnError::TransactionalIdNotFound
    );
    assert_eq!(
        g.commit(&id(1), 0).unwrap_err(),
        TxnError::TransactionalIdNotFound
    );
    assert_eq!(
        g.abort(&id(1), 0).unwrap_err(),
        TxnError::TransactionalIdNotFound
    );
    g.begin(&id(1), -1, 0).unwrap();
    let err = g.commit(&id(1), 1).unwrap_err();
    assert_eq!(
        err,
        TxnError::InvalidTxnState {
            state: TxnState::Ongoing
        }
    );
    assert_eq!(
        g.prepare(&id(1), 10).unwrap(),
        TxnReply {
            state: TxnState::Prepare,
            timeout_ms: 60_000,
            changed: true
        }
    );
    assert!(!g.prepare(&id(1), 11).unwrap().changed);
    assert_eq!(g.get(&id(1)).unwrap().prepare_time_ms, Some(10));
    assert_eq!(
        g.commit(&id(1), 20).unwrap(),
        TxnReply {
            state: TxnState::Committed,
            timeout_ms: 60_000,
            changed: true
        }
    );
    assert!(!g.commit(&id(1), 21).unwrap().changed);
    let r = g.abort(&id(1), 22).unwrap();
    assert_eq!(
        (r.state, r.changed),
        (TxnState::Committed, false),
        "abort on COMMITTED reports COMMITTED"
    );
    assert_eq!(
        g.prepare(&id(1), 23).unwrap_err(),
        TxnError::InvalidTxnState {
            state: TxnState::Committed
        }
    );
    assert_eq!(g.get(&id(1)).unwrap().finish_time_ms, Some(20));
    assert_eq!(
        causes(&mut g),
        vec![
            (TxnChangeCause::Began, id(1), TxnState::Ongoing),
            (TxnChangeCause::Prepared, id(1), TxnState::Prepare),
            (TxnChangeCause::Committed, id(1), TxnState::Committed),
        ]
    );
    g.check_invariants();
}

#[test]
fn abort_from_ongoing_and_prepare_and_its_idempotency() {
    let mut g = group();
    g.begin(&id(1), -1, 0).unwrap();
    g.begin(&id(2), -1, 0).unwrap();
    g.prepare(&id(2), 1).unwrap();
    for n in [1, 2] {
        assert_eq!(
            g.abort(&id(n), 2).unwrap(),
            TxnReply {
                state: TxnState::Aborted,
                timeout_ms: 60_000,
                changed: true
            }
        );
        assert!(!g.abort(&id(n), 3).unwrap().changed);
        assert_eq!(
            g.commit(&id(n), 3).unwrap_err(),
            TxnError::InvalidTxnState {
                state: TxnState::Aborted
            }
        );
        assert_eq!(g.prepare(&id(n), 3).unwrap_err().state(), TxnState::Aborted);
    }
    assert_eq!(g.pending_count(), 0);
    g.check_invariants();
}

#[test]
fn commit_waits_for_acks_in_flight() {
    let mut g = group();
    g.begin(&id(1), -1, 0).unwrap();
    g.register_participant(&id(1), part(0), 0).unwrap();
    g.prepare(&id(1), 1).unwrap();
    let err = g.commit(&id(1), 2).unwrap_err();
    assert_eq!(
        err,
        TxnError::AcksInFlight {
            state: TxnState::Prepare,
            acks: 1
        }
    );
    assert_eq!(g.complete_ack(&id(1), part(0), 5), TxnState::Prepare);
    assert_eq!(g.get(&id(1)).unwrap().participants[0].locked_records, 5);
    g.commit(&id(1), 3).unwrap();
    g.check_invariants();
}

#[test]
fn ongoing_times_out_and_prepare_never_does() {
    let mut g = group();
    g.begin(&id(1), 1_000, 0).unwrap();
    g.begin(&id(2), 1_000, 0).unwrap();
    g.begin(&id(3), 5_000, 0).unwrap();
    g.prepare(&id(2), 500).unwrap();
    assert!(g.expire(999).is_empty());
    let expired = g.expire(1_000);
    assert_eq!(expired.len(), 1);
    assert_eq!(
        (expired[0].transaction_id.as_str(), expired[0].state),
        (id(1).as_str(), TxnState::Aborted)
    );
    assert_eq!(expired[0].finish_time_ms, Some(1_000));
    assert!(g.expire(1_000).is_empty(), "already aborted");
    // An operation past the deadline sees the timeout first.
    let err = g.prepare(&id(3), 5_000).unwrap_err();
    assert_eq!(
        err,
        TxnError::InvalidTxnState {
            state: TxnState::Aborted
        }
    );
    // PREPARE survives any clock.
    assert!(g.expire(u64::MAX / 2).is_empty());
    assert_eq!(g.get(&id(2)).unwrap().state, TxnState::Prepare);
    let timed_out: Vec<_> = g
        .take_changes()
        .into_iter()
        .filter(|c| c.cause == TxnChangeCause::TimedOut)
        .map(|c| c.record.transaction_id)
        .collect();
    assert_eq!(timed_out, vec![id(1), id(3)]);
    g.check_invariants();
}

#[test]
fn list_filters_by_state_and_defaults_to_pending() {
    let mut g = group();
    for n in 1..=4 {
        g.begin(&id(n), -1, 0).unwrap();
    }
    g.prepare(&id(2), 1).unwrap();
    g.prepare(&id(3), 1).unwrap();
    g.commit(&id(3), 2).unwrap();
    g.abort(&id(4), 2).unwrap();
    let ids = |v: Vec<TxnRecord>| v.into_iter().map(|r| r.transaction_id).collect::<Vec<_>>();
    assert_eq!(ids(g.list(&[], 3)), vec![id(1), id(2)]);
    assert_eq!(ids(g.list(&[TxnState::Prepare], 3)), vec![id(2)]);
    assert_eq!(
        ids(g.list(&[TxnState::Committed, TxnState::Aborted], 3)),
        vec![id(3), id(4)]
    );
    assert_eq!(ids(g.list(&TxnState::ALL, 3)).len(), 4);
    assert!(g.list(&[TxnState::Empty], 3).is_empty());
}

#[test]
fn finished_transactions_are_forgotten_after_retention() {
    let config = TxnConfig {
        retention_ms: 10_000,
        finished_max: 3,
        ..TxnConfig::default()
    };
    let mut g = GroupTransactions::new(G, config);
    g.begin(&id(1), -1, 0).unwrap();
    g.abort(&id(1), 100).unwrap();
    assert!(g.forget_finished(10_099).is_empty());
    assert_eq!(g.abort(&id(1), 10_099).unwrap().state, TxnState::Aborted);
    assert_eq!(
        g.abort(&id(1), 10_100).unwrap_err(),
        TxnError::TransactionalIdNotFound
    );
    assert!(g.get(&id(1)).is_none());
    assert!(g
        .take_changes()
        .iter()
        .any(|c| c.cause == TxnChangeCause::Forgotten && c.record.transaction_id == id(1)));
    // A begin of a forgotten id starts a new transaction.
    assert!(g.begin(&id(1), -1, 10_200).unwrap().changed);
    g.abort(&id(1), 10_200).unwrap();
    // At most finished_max remembered: the oldest go first.
    for n in 2..=5 {
        g.begin(&id(n), -1, 10_300).unwrap();
        g.abort(&id(n), 10_300 + u64::from(n)).unwrap();
    }
    assert_eq!(g.finished_count(), 3);
    assert!(g.get(&id(1)).is_none() && g.get(&id(2)).is_none());
    assert!(g.get(&id(5)).is_some());
    g.check_invariants();
}

#[test]
fn restore_aborts_ongoing_and_keeps_prepare() {
    let mut g = group();
    g.begin(&id(1), -1, 0).unwrap();
    g.begin(&id(2), -1, 0).unwrap();
    g.register_participant(&id(2), part(3), 0).unwrap();
    g.complete_ack(&id(2), part(3), 9);
    g.prepare(&id(2), 5).unwrap();
    g.begin(&id(3), -1, 0).unwrap();
    g.prepare(&id(3), 5).unwrap();
    g.commit(&id(3), 6).unwrap();
    // The journal keeps the latest record per id.
    let mut latest: BTreeMap<String, TxnRecord> = BTreeMap::new();
    for change in g.take_changes() {
        latest.insert(change.record.transaction_id.clone(), change.record);
    }
    let mut r = GroupTransactions::restore(
        G,
        TxnConfig::default(),
        latest.into_values().collect(),
        1_000,
    )
    .unwrap();
    assert_eq!(r.get(&id(1)).unwrap().state, TxnState::Aborted);
    let p = r.get(&id(2)).unwrap();
    assert_eq!((p.state, p.prepare_time_ms), (TxnState::Prepare, Some(5)));
    assert_eq!(
        p.participants,
        vec![Participant {
            partition: part(3),
            locked_records: 9
        }]
    );
    assert_eq!(r.get(&id(3)).unwrap().state, TxnState::Committed);
    assert_eq!(
        causes(&mut r),
        vec![(TxnChangeCause::AbortedOnRestart, id(1), TxnState::Aborted)]
    );
    // PREPARE waits for the coordinator, after any number of restarts.
    let again = GroupTransactions::restore(
        G,
        TxnConfig::default(),
        vec![r.get(&id(2)).unwrap()],
        10_000_000,
    )
    .unwrap();
    assert_eq!(again.get(&id(2)).unwrap().state, TxnState::Prepare);
    r.commit(&id(2), 1_001).unwrap();
    // Records of another group, or inconsistent ones, are refused.
    let mut foreign = r.get(&id(2)).unwrap();
    foreign.group_id = "other".into();
    assert!(GroupTransactions::restore(G, TxnConfig::default(), vec![foreign], 0).is_err());
    let mut broken = r.get(&id(2)).unwrap();
    broken.finish_time_ms = None;
    assert!(GroupTransactions::restore(G, TxnConfig::default(), vec![broken], 0).is_err());
}

#[test]
fn a_finished_transaction_is_not_forgotten_while_acks_are_in_flight() {
    let config = TxnConfig {
        retention_ms: 10,
        ..TxnConfig::default()
    };
    let mut g = GroupTransactions::new(G, config);
    g.begin(&id(1), -1, 0).unwrap();
    g.register_participant(&id(1), part(0), 0).unwrap();
    g.abort(&id(1), 1).unwrap();
    assert!(
        g.forget_finished(1_000).is_empty(),
        "an ack is still in flight"
    );
    // A begin of the same id answers the old transaction instead of starting a new one.
    assert_eq!(g.begin(&id(1), -1, 1_000).unwrap().state, TxnState::Aborted);
    assert_eq!(g.complete_ack(&id(1), part(0), 3), TxnState::Aborted);
    assert_eq!(g.forget_finished(1_000), vec![id(1)]);
    g.check_invariants();
}

#[test]
fn completing_an_ack_on_prepare_requeues_the_prepare_record() {
    let mut g = group();
    g.begin(&id(1), -1, 0).unwrap();
    g.register_participant(&id(1), part(0), 0).unwrap();
    g.prepare(&id(1), 1).unwrap();
    let prepared = g.take_changes().pop().unwrap();
    assert_eq!(prepared.cause, TxnChangeCause::Prepared);
    assert_eq!(prepared.record.participants[0].locked_records, 0);
    assert_eq!(g.acks_in_flight(&id(1)), 1);
    assert_eq!(g.complete_ack(&id(1), part(0), 6), TxnState::Prepare);
    let again = g.take_changes();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].cause, TxnChangeCause::Prepared);
    assert_eq!(again[0].record.participants[0].locked_records, 6);
    // An ack completing on ONGOING queues nothing (ONGOING participants are not persisted).
    g.begin(&id(2), -1, 2).unwrap();
    g.take_changes();
    g.register_participant(&id(2), part(0), 2).unwrap();
    g.complete_ack(&id(2), part(0), 1);
    assert!(g.take_changes().is_empty());
}
