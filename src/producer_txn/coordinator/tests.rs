//! Unit tests of the transaction coordinator, and a seeded model test: random requests of two
//! producer instances sharing one transactional id, timeouts, marker answers (some failing) and
//! crash-replays, against a trivial model of what Kafka's coordinator answers.

use super::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn init(id: &str, timeout_ms: i32) -> InitRequest {
    InitRequest {
        transactional_id: id.into(),
        timeout_ms,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        enable_2pc: false,
        keep_prepared_txn: false,
        fresh_producer_id: None,
    }
}

/// InitProducerId as the runtime does it: allocate when asked, repeat.
fn init_with(
    c: &mut TxnCoordinator,
    req: &InitRequest,
    next_pid: &mut i64,
    now: i64,
) -> Result<InitAnswer, CoordError> {
    match c.init_producer_id(req, now) {
        Err(CoordError::NeedProducerId) => {
            *next_pid += 1;
            let mut again = req.clone();
            again.fresh_producer_id = Some(*next_pid);
            c.init_producer_id(&again, now)
        }
        other => other,
    }
}

fn p(t: &str, i: i32) -> (String, i32) {
    (t.to_string(), i)
}

/// Arms and delivers every due marker job successfully.
fn deliver_all(c: &mut TxnCoordinator, now: i64) -> usize {
    let ids: Vec<String> = c.jobs.keys().cloned().collect();
    for id in &ids {
        c.arm(id);
    }
    let work = c.take_marker_work(now);
    let n = work.len();
    for w in work {
        let results = MarkerResults {
            partitions_done: w.partitions.clone(),
            groups_done: w.groups.clone(),
        };
        assert!(c.markers_written(&w.transactional_id, w.marker, &results, now));
    }
    n
}

#[test]
fn transition_table_is_kafkas() {
    use TxnState::*;
    let allowed: &[(TxnState, TxnState)] = &[
        (Empty, Empty),
        (CompleteCommit, Empty),
        (CompleteAbort, Empty),
        (Ongoing, Ongoing),
        (Empty, Ongoing),
        (CompleteCommit, Ongoing),
        (CompleteAbort, Ongoing),
        (Ongoing, PrepareCommit),
        (Ongoing, PrepareAbort),
        (PrepareEpochFence, PrepareAbort),
        (Empty, PrepareAbort),
        (CompleteCommit, PrepareAbort),
        (CompleteAbort, PrepareAbort),
        (PrepareCommit, CompleteCommit),
        (PrepareAbort, CompleteAbort),
        (Ongoing, PrepareEpochFence),
        (Empty, Dead),
        (CompleteCommit, Dead),
        (CompleteAbort, Dead),
    ];
    for from in TxnState::ALL {
        for to in TxnState::ALL {
            assert_eq!(
                to.can_follow(from),
                allowed.contains(&(from, to)),
                "{} -> {}",
                from.name(),
                to.name()
            );
        }
        assert_eq!(TxnState::from_id(from.id()), Some(from));
        assert_eq!(TxnState::from_name(from.name()), Some(from));
    }
}

#[test]
fn commit_and_abort_round_trip() {
    let mut c = TxnCoordinator::new(CoordConfig::default());
    let mut pids = 0;
    let a = init_with(&mut c, &init("t", 60_000), &mut pids, 0).unwrap();
    assert_eq!((a.producer_id, a.producer_epoch), (1, 0));
    assert_eq!(c.get("t").unwrap().state, TxnState::Empty);
    c.add_participants("t", 1, 0, &[p("a", 0), p("a", 1)], &[], 10)
        .unwrap();
    c.add_participants("t", 1, 0, &[], &["g".into()], 11)
        .unwrap();
    assert_eq!(c.get("t").unwrap().state, TxnState::Ongoing);
    assert_eq!(c.get("t").unwrap().start_ms, 10);
    c.end_txn("t", 1, 0, TxnOutcome::Commit, 20).unwrap();
    assert_eq!(c.get("t").unwrap().state, TxnState::PrepareCommit);
    // Not armed yet: nothing is sent before the prepare record is durable.
    assert!(c.take_marker_work(20).is_empty());
    assert_eq!(
        c.add_participants("t", 1, 0, &[p("a", 2)], &[], 21),
        Err(CoordError::ConcurrentTransactions)
    );
    assert_eq!(
        c.end_txn("t", 1, 0, TxnOutcome::Commit, 21),
        Err(CoordError::ConcurrentTransactions)
    );
    assert_eq!(
        c.end_txn("t", 1, 0, TxnOutcome::Abort, 21),
        Err(CoordError::ConcurrentTransactions)
    );
    c.arm("t");
    let work = c.take_marker_work(22);
    assert_eq!(work.len(), 1);
    assert_eq!(
        work[0].marker,
        TxnMarker {
            producer_id: 1,
            producer_epoch: 0,
            outcome: TxnOutcome::Commit,
            coordinator_epoch: 0
        }
    );
    assert_eq!(work[0].partitions, vec![p("a", 0), p("a", 1)]);
    assert_eq!(work[0].groups, vec!["g".to_string()]);
    // One partition failed: retried after the backoff, only it.
    let partial = MarkerResults {
        partitions_done: vec![p("a", 0)],
        groups_done: vec!["g".into()],
    };
    assert!(!c.markers_written("t", work[0].marker, &partial, 23));
    assert!(c.take_marker_work(24).is_empty());
    assert_eq!(
        c.next_marker_due(),
        Some(23 + TXN_MARKER_RETRY_BACKOFF_MS_TEST)
    );
    let retry = c.take_marker_work(23 + TXN_MARKER_RETRY_BACKOFF_MS_TEST);
    assert_eq!(retry[0].partitions, vec![p("a", 1)]);
    assert!(retry[0].groups.is_empty());
    let done = MarkerResults {
        partitions_done: vec![p("a", 1)],
        groups_done: vec![],
    };
    assert!(c.markers_written("t", retry[0].marker, &done, 500));
    let meta = c.get("t").unwrap();
    assert_eq!(meta.state, TxnState::CompleteCommit);
    assert!(meta.partitions.is_empty() && meta.groups.is_empty());
    // A retried EndTxn of the same outcome succeeds; the other one is refused.
    c.end_txn("t", 1, 0, TxnOutcome::Commit, 501).unwrap();
    assert!(matches!(
        c.end_txn("t", 1, 0, TxnOutcome::Abort, 501),
        Err(CoordError::InvalidTxnState(_))
    ));
    // Next transaction: abort.
    c.add_participants("t", 1, 0, &[p("b", 0)], &[], 600)
        .unwrap();
    c.end_txn("t", 1, 0, TxnOutcome::Abort, 601).unwrap();
    assert_eq!(deliver_all(&mut c, 602), 1);
    assert_eq!(c.get("t").unwrap().state, TxnState::CompleteAbort);
    assert!(matches!(
        c.end_txn("t", 1, 0, TxnOutcome::Commit, 603),
        Err(CoordError::InvalidTxnState(_))
    ));
    // EndTxn on Empty is refused.
    let a = init_with(&mut c, &init("t", 60_000), &mut pids, 700).unwrap();
    assert_eq!((a.producer_id, a.producer_epoch), (1, 1));
    assert!(matches!(
        c.end_txn("t", 1, 1, TxnOutcome::Commit, 701),
        Err(CoordError::InvalidTxnState(_))
    ));
    let states: Vec<TxnState> = c.take_records().iter().map(|r| r.state).collect();
    use TxnState::*;
    assert_eq!(
        states,
        vec![
            Empty,
            Ongoing,
            Ongoing,
            PrepareCommit,
            CompleteCommit,
            Ongoing,
            PrepareAbort,
            CompleteAbort,
            Empty
        ]
    );
}

const TXN_MARKER_RETRY_BACKOFF_MS_TEST: i64 = crate::constants::TXN_MARKER_RETRY_BACKOFF_MS;

#[test]
fn a_second_producer_fences_the_first() {
    let mut c = TxnCoordinator::new(CoordConfig::default());
    let mut pids = 0;
    let first = init_with(&mut c, &init("t", 60_000), &mut pids, 0).unwrap();
    c.add_participants("t", first.producer_id, 0, &[p("a", 0)], &[], 1)
        .unwrap();
    // The second instance: its InitProducerId aborts the ongoing transaction with a bumped
    // epoch and answers CONCURRENT_TRANSACTIONS until the abort completed.
    assert_eq!(
        init_with(&mut c, &init("t", 60_000), &mut pids, 2),
        Err(CoordError::ConcurrentTransactions)
    );
    let meta = c.get("t").unwrap();
    assert_eq!(
        (meta.state, meta.producer_epoch),
        (TxnState::PrepareAbort, 1)
    );
    assert_eq!(
        init_with(&mut c, &init("t", 60_000), &mut pids, 3),
        Err(CoordError::ConcurrentTransactions)
    );
    c.arm("t");
    let work = c.take_marker_work(4);
    assert_eq!(
        work[0].marker.producer_epoch, 1,
        "markers carry the bumped epoch"
    );
    assert_eq!(work[0].marker.outcome, TxnOutcome::Abort);
    deliver_after(&mut c, work, 5);
    let second = init_with(&mut c, &init("t", 60_000), &mut pids, 6).unwrap();
    assert_eq!(
        (second.producer_id, second.producer_epoch),
        (first.producer_id, 2)
    );
    // The first instance is fenced everywhere.
    assert_eq!(
        c.add_participants("t", first.producer_id, 0, &[p("a", 0)], &[], 7),
        Err(CoordError::ProducerFenced)
    );
    assert_eq!(
        c.end_txn("t", first.producer_id, 0, TxnOutcome::Commit, 7),
        Err(CoordError::ProducerFenced)
    );
    assert_eq!(
        c.add_participants("t", 77, 0, &[p("a", 0)], &[], 7),
        Err(CoordError::InvalidProducerIdMapping)
    );
    assert_eq!(
        c.add_participants("nope", 1, 0, &[p("a", 0)], &[], 7),
        Err(CoordError::InvalidProducerIdMapping)
    );
    // KIP-360: the first instance's InitProducerId with its old epoch is fenced too; the
    // current one's with its epoch bumps it; the retry of that bump gets the same answer.
    let mut kip360 = init("t", 60_000);
    kip360.producer_id = first.producer_id;
    kip360.producer_epoch = 0;
    assert_eq!(
        init_with(&mut c, &kip360, &mut pids, 8),
        Err(CoordError::ProducerFenced)
    );
    kip360.producer_epoch = 2;
    let bumped = init_with(&mut c, &kip360, &mut pids, 9).unwrap();
    assert_eq!(bumped.producer_epoch, 3);
    assert_eq!(init_with(&mut c, &kip360, &mut pids, 10).unwrap(), bumped);
}

fn deliver_after(c: &mut TxnCoordinator, work: Vec<MarkerWork>, now: i64) {
    for w in work {
        let results = MarkerResults {
            partitions_done: w.partitions.clone(),
            groups_done: w.groups.clone(),
        };
        c.markers_written(&w.transactional_id, w.marker, &results, now);
    }
}

#[test]
fn timeout_aborts_with_an_epoch_bump_unless_two_phase() {
    let mut c = TxnCoordinator::new(CoordConfig {
        two_phase_commit_enable: true,
        ..CoordConfig::default()
    });
    let mut pids = 0;
    assert_eq!(
        init_with(&mut c, &init("t", 0), &mut pids, 0),
        Err(CoordError::InvalidTransactionTimeout)
    );
    assert_eq!(
        init_with(&mut c, &init("t", 900_001), &mut pids, 0),
        Err(CoordError::InvalidTransactionTimeout)
    );
    let a = init_with(&mut c, &init("t", 1_000), &mut pids, 0).unwrap();
    c.add_participants("t", a.producer_id, 0, &[p("a", 0)], &[], 100)
        .unwrap();
    assert!(c.abort_timed_out(1_099).is_empty());
    assert_eq!(c.abort_timed_out(1_100), vec!["t".to_string()]);
    let meta = c.get("t").unwrap();
    assert_eq!(
        (meta.state, meta.producer_epoch),
        (TxnState::PrepareAbort, 1)
    );
    assert_eq!(
        c.end_txn("t", a.producer_id, 0, TxnOutcome::Commit, 1_101),
        Err(CoordError::ProducerFenced)
    );
    deliver_all(&mut c, 1_102);
    assert_eq!(c.get("t").unwrap().state, TxnState::CompleteAbort);

    // KIP-939: a two-phase transaction never times out, and a new instance may keep it.
    let mut two = init("f", 1_000);
    two.enable_2pc = true;
    let f1 = init_with(&mut c, &two, &mut pids, 0).unwrap();
    c.add_participants("f", f1.producer_id, f1.producer_epoch, &[p("a", 0)], &[], 1)
        .unwrap();
    assert!(c.abort_timed_out(10_000_000).is_empty());
    two.keep_prepared_txn = true;
    let f2 = init_with(&mut c, &two, &mut pids, 2).unwrap();
    assert_eq!(
        (f2.ongoing_producer_id, f2.ongoing_producer_epoch),
        (f1.producer_id, f1.producer_epoch)
    );
    assert_eq!(f2.producer_epoch, f1.producer_epoch + 1);
    assert_eq!(c.get("f").unwrap().state, TxnState::Ongoing);
    c.end_txn(
        "f",
        f2.producer_id,
        f2.producer_epoch,
        TxnOutcome::Commit,
        3,
    )
    .unwrap();
    let work = c.take_marker_work(3);
    assert!(work.is_empty());
    c.arm("f");
    let work = c.take_marker_work(3);
    assert_eq!(work[0].marker.producer_epoch, f2.producer_epoch);
    assert_eq!(work[0].partitions, vec![p("a", 0)]);
    // Two-phase commit refused when the broker has it off.
    let mut off = TxnCoordinator::new(CoordConfig::default());
    let mut req = init("x", 1_000);
    req.enable_2pc = true;
    assert_eq!(
        off.init_producer_id(&req, 0),
        Err(CoordError::TwoPhaseCommitDisabled)
    );
}

#[test]
fn exhausted_epoch_rotates_the_producer_id() {
    let mut c = TxnCoordinator::new(CoordConfig::default());
    let mut pids = 0;
    init_with(&mut c, &init("t", 1_000), &mut pids, 0).unwrap();
    c.txns.get_mut("t").unwrap().producer_epoch = EPOCH_EXHAUSTED;
    assert_eq!(
        c.init_producer_id(&init("t", 1_000), 1),
        Err(CoordError::NeedProducerId)
    );
    let a = init_with(&mut c, &init("t", 1_000), &mut pids, 1).unwrap();
    assert_eq!((a.producer_id, a.producer_epoch), (2, 0));
    assert_eq!(c.get("t").unwrap().last_producer_id, 1);
    // The retry of the rotation (old id, exhausted epoch) gets the same answer.
    let mut retry = init("t", 1_000);
    retry.producer_id = 1;
    retry.producer_epoch = EPOCH_EXHAUSTED;
    assert_eq!(c.init_producer_id(&retry, 2).unwrap(), a);
}

#[test]
fn recovery_resends_markers_of_prepared_transactions() {
    let mut c = TxnCoordinator::new(CoordConfig::default());
    let mut pids = 0;
    for (id, outcome) in [
        ("c", TxnOutcome::Commit),
        ("a", TxnOutcome::Abort),
        ("o", TxnOutcome::Commit),
    ] {
        let a = init_with(&mut c, &init(id, 60_000), &mut pids, 0).unwrap();
        c.add_participants(id, a.producer_id, 0, &[p("t", 0)], &[], 1)
            .unwrap();
        if id != "o" {
            c.end_txn(id, a.producer_id, 0, outcome, 2).unwrap();
        }
    }
    init_with(&mut c, &init("gone", 60_000), &mut pids, 0).unwrap();
    assert_eq!(
        c.expire_ids(CoordConfig::default().id_expiration_ms + 1),
        vec!["gone".to_string()]
    );
    let journal = c.take_records();
    let mut r = TxnCoordinator::new(CoordConfig::default());
    for record in &journal {
        // Through the journal's codec, as recovery reads it.
        let entry = Entry::ProducerTransaction(record.to_record());
        let decoded = Entry::decode(entry.kind(), &entry.encode()).unwrap();
        let Entry::ProducerTransaction(decoded) = decoded else {
            panic!()
        };
        r.replay(&TxnMetadata::from_record(&decoded));
    }
    assert_eq!(r.snapshot(), c.snapshot());
    assert!(r.get("gone").is_none());
    assert_eq!(r.recovered(5), vec!["a".to_string(), "c".to_string()]);
    let work = r.take_marker_work(5);
    assert_eq!(work.len(), 2);
    deliver_after(&mut r, work, 6);
    assert_eq!(r.get("c").unwrap().state, TxnState::CompleteCommit);
    assert_eq!(r.get("a").unwrap().state, TxnState::CompleteAbort);
    assert_eq!(r.get("o").unwrap().state, TxnState::Ongoing);
    let listed: Vec<&str> = r
        .list(
            &ListFilter {
                states: vec!["Ongoing".into()],
                producer_ids: vec![],
                duration_ms: -1,
            },
            10,
        )
        .iter()
        .map(|m| m.transactional_id.as_str())
        .collect();
    assert_eq!(listed, vec!["o"]);
    assert!(r
        .list(
            &ListFilter {
                duration_ms: 100,
                ..ListFilter::default()
            },
            10
        )
        .is_empty());
    assert_eq!(
        r.list(
            &ListFilter {
                duration_ms: 5,
                ..ListFilter::default()
            },
            10
        )
        .len(),
        1
    );
    assert_eq!(
        r.list(
            &ListFilter {
                producer_ids: vec![1],
                ..ListFilter::default()
            },
            10
        )
        .len(),
        1
    );
}

// ---- the model test --------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MState {
    Empty,
    Ongoing,
    Prepare(TxnOutcome),
    Complete(TxnOutcome),
}

/// The trivial model: one id, what Kafka's coordinator would hold.
#[derive(Clone, Debug)]
struct Model {
    pid: i64,
    epoch: i16,
    state: MState,
    parts: BTreeSet<(String, i32)>,
    start: i64,
    timeout: i64,
}

fn check(c: &TxnCoordinator, m: &Option<Model>, seed: u64, step: usize) {
    let ctx = format!("seed {seed} step {step}");
    match (c.get("t"), m) {
        (None, None) => {}
        (Some(meta), Some(m)) => {
            let want = match m.state {
                MState::Empty => TxnState::Empty,
                MState::Ongoing => TxnState::Ongoing,
                MState::Prepare(TxnOutcome::Commit) => TxnState::PrepareCommit,
                MState::Prepare(TxnOutcome::Abort) => TxnState::PrepareAbort,
                MState::Complete(TxnOutcome::Commit) => TxnState::CompleteCommit,
                MState::Complete(TxnOutcome::Abort) => TxnState::CompleteAbort,
            };
            assert_eq!(meta.state, want, "{ctx}");
            assert_eq!(
                (meta.producer_id, meta.producer_epoch),
                (m.pid, m.epoch),
                "{ctx}"
            );
            if matches!(m.state, MState::Ongoing | MState::Prepare(_)) {
                assert_eq!(meta.partitions, m.parts, "{ctx}");
            } else {
                assert!(meta.partitions.is_empty(), "{ctx}");
            }
        }
        (a, b) => panic!("{ctx}: coordinator {a:?} model {b:?}"),
    }
}

fn run_model(seed: u64, steps: usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut c = TxnCoordinator::new(CoordConfig::default());
    let mut journal: Vec<TxnMetadata> = Vec::new();
    let mut model: Option<Model> = None;
    let mut producers: [(i64, i16); 2] = [(-1, -1); 2];
    let mut pids = 0i64;
    let mut now = 0i64;
    let mut committed_markers = 0;
    for step in 0..steps {
        now += rng.gen_range(0..300);
        let k = rng.gen_range(0..2);
        match rng.gen_range(0..100) {
            0..=14 => {
                let timeout = rng.gen_range(1..2_000);
                let got = init_with(&mut c, &init("t", timeout), &mut pids, now);
                let want = match &mut model {
                    None => {
                        let m = Model {
                            pid: pids,
                            epoch: 0,
                            state: MState::Empty,
                            parts: BTreeSet::new(),
                            start: -1,
                            timeout: timeout as i64,
                        };
                        model = Some(m);
                        Ok((pids, 0))
                    }
                    Some(m) => match m.state {
                        MState::Prepare(_) => Err(CoordError::ConcurrentTransactions),
                        MState::Ongoing => {
                            m.epoch += 1;
                            m.state = MState::Prepare(TxnOutcome::Abort);
                            Err(CoordError::ConcurrentTransactions)
                        }
                        MState::Empty | MState::Complete(_) => {
                            m.epoch += 1;
                            m.state = MState::Empty;
                            m.parts.clear();
                            m.timeout = timeout as i64;
                            Ok((m.pid, m.epoch))
                        }
                    },
                };
                let got = got.map(|a| (a.producer_id, a.producer_epoch));
                assert_eq!(got, want, "seed {seed} step {step}: init");
                if let Ok(pe) = got {
                    producers[k] = pe;
                }
            }
            15..=54 => {
                let part = p(["x", "y"][rng.gen_range(0..2)], rng.gen_range(0..3));
                let (pid, epoch) = producers[k];
                let got = c.add_participants("t", pid, epoch, &[part.clone()], &[], now);
                let want = match &mut model {
                    None => Err(CoordError::InvalidProducerIdMapping),
                    Some(m) if m.pid != pid => Err(CoordError::InvalidProducerIdMapping),
                    Some(m) if m.epoch != epoch => Err(CoordError::ProducerFenced),
                    Some(m) => match m.state {
                        MState::Prepare(_) => Err(CoordError::ConcurrentTransactions),
                        MState::Ongoing => {
                            m.parts.insert(part);
                            Ok(())
                        }
                        MState::Empty | MState::Complete(_) => {
                            m.state = MState::Ongoing;
                            m.start = now;
                            m.parts = [part].into();
                            Ok(())
                        }
                    },
                };
                assert_eq!(got, want, "seed {seed} step {step}: add");
            }
            55..=69 => {
                let outcome = if rng.gen_bool(0.6) {
                    TxnOutcome::Commit
                } else {
                    TxnOutcome::Abort
                };
                let (pid, epoch) = producers[k];
                let got = c.end_txn("t", pid, epoch, outcome, now);
                let want = match &mut model {
                    None => Err(CoordError::InvalidProducerIdMapping),
                    Some(m) if m.pid != pid => Err(CoordError::InvalidProducerIdMapping),
                    Some(m) if m.epoch != epoch => Err(CoordError::ProducerFenced),
                    Some(m) => match m.state {
                        MState::Ongoing => {
                            m.state = MState::Prepare(outcome);
                            Ok(())
                        }
                        MState::Complete(o) if o == outcome => Ok(()),
                        MState::Prepare(_) => Err(CoordError::ConcurrentTransactions),
                        _ => Err(CoordError::InvalidTxnState(String::new())),
                    },
                };
                let norm = |r: Result<(), CoordError>| {
                    r.map_err(|e| match e {
                        CoordError::InvalidTxnState(_) => {
                            CoordError::InvalidTxnState(String::new())
                        }
                        e => e,
                    })
                };
                assert_eq!(norm(got), norm(want), "seed {seed} step {step}: end");
            }
            70..=79 => {
                let aborted = c.abort_timed_out(now);
                let mut want = Vec::new();
                if let Some(m) = &mut model {
                    if m.state == MState::Ongoing && m.start + m.timeout <= now {
                        m.epoch += 1;
                        m.state = MState::Prepare(TxnOutcome::Abort);
                        want.push("t".to_string());
                    }
                }
                assert_eq!(aborted, want, "seed {seed} step {step}: timeout");
            }
            80..=94 => {
                // Markers: the job is armed (its record is durable), participants answer,
                // some fail and are retried later.
                c.arm("t");
                for w in c.take_marker_work(now) {
                    let m = model.as_mut().expect("a job needs an id");
                    let MState::Prepare(o) = m.state else {
                        panic!("seed {seed}: job in {:?}", m.state)
                    };
                    assert_eq!(w.marker.outcome, o);
                    assert_eq!(
                        (w.marker.producer_id, w.marker.producer_epoch),
                        (m.pid, m.epoch)
                    );
                    let partitions_done: Vec<_> = w
                        .partitions
                        .iter()
                        .filter(|_| rng.gen_bool(0.7))
                        .cloned()
                        .collect();
                    let all = partitions_done.len() == w.partitions.len();
                    let complete = c.markers_written(
                        "t",
                        w.marker,
                        &MarkerResults {
                            partitions_done,
                            groups_done: vec![],
                        },
                        now,
                    );
                    assert_eq!(complete, all, "seed {seed} step {step}");
                    if complete {
                        m.state = MState::Complete(o);
                        m.parts.clear();
                        committed_markers += 1;
                    }
                }
            }
            _ => {
                // Crash: everything journalled so far is durable (the runtime answers only
                // then); rebuild from the journal and recover.
                journal.extend(c.take_records());
                c = TxnCoordinator::new(CoordConfig::default());
                for r in &journal {
                    c.replay(r);
                }
                c.recovered(now);
            }
        }
        journal.extend(c.take_records());
        check(&c, &model, seed, step);
    }
    let _ = committed_markers;
}

#[test]
fn model_random_sequences() {
    for seed in 0..300 {
        run_model(seed, 400);
    }
}

#[test]
fn broker_defaults_set_the_timeout_bound_and_the_id_expiration() {
    let mut defaults = BTreeMap::new();
    assert_eq!(
        CoordConfig::from_broker_defaults(&defaults),
        CoordConfig::default()
    );
    defaults.insert("transaction.max.timeout.ms".to_string(), "1000".to_string());
    defaults.insert(
        "transactional.id.expiration.ms".to_string(),
        "60000".to_string(),
    );
    let config = CoordConfig::from_broker_defaults(&defaults);
    assert_eq!(
        (config.max_timeout_ms, config.id_expiration_ms),
        (1000, 60_000)
    );
}
