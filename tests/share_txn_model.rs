//! Model test of transactional acknowledgements: one group's `GroupTransactions` and two
//! participant `SharePartition`s, wired the way the handlers will wire them, against an
//! oracle (per-offset arrays and a per-transaction state), under random interleavings of
//! acquire, acknowledge, transactional acknowledge (split into register and complete, so
//! other operations can run between them), begin, prepare, commit, abort, clock advances
//! (lock expiry and transaction timeouts), member leave, and restart from the journal.
//!
//! What it proves:
//! - the coordinator answers every operation (state, error code, idempotent repeat) as the
//!   wire spec says, and the partitions' states equal the oracle's after every operation;
//! - **every record ends ACKNOWLEDGED or ARCHIVED exactly once** (a terminal record never
//!   changes again, and after a drain every offset of the log is terminal), and **a record
//!   is never acquired again after its transaction committed** (nor after any terminal state);
//! - a PREPARE transaction keeps its LOCKED records through timeouts, member loss and
//!   restarts until the coordinator decides; restart aborts ONGOING transactions;
//! - the journal (share-partition deltas and transaction records) replays to the state.
//!
//! How: seeded runs (`LOCKSTEP_SEED=n` replays one, `LOCKSTEP_SEEDS=n` runs more; the
//! seed is printed on failure), each ending with a drain that decides every transaction and
//! acknowledges everything left.

use std::collections::{BTreeMap, BTreeSet};

use lockstep::model::TopicPartition;
use lockstep::share::partition::throttle_threshold;
use lockstep::share::{
    AckBatch, AcknowledgeType, RecordState, ShareConfig, SharePartition, ShareSnapshot,
};
use lockstep::share_txn::{
    GroupTransactions, TxnChangeCause, TxnConfig, TxnError, TxnRecord, TxnState,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

const GROUP: &str = "g";
const MEMBERS: [&str; 2] = ["m0", "m1"];
const PARTITIONS: usize = 2;
const CHECKPOINTS: usize = 12;
const LOCK_MS: u64 = 5_000;
const RETENTION_MS: u64 = 10_000;
const MAX_PENDING: usize = 3;

fn txn_id(n: usize) -> String {
    format!("{GROUP}-job-{n}")
}

fn tp(p: usize) -> TopicPartition {
    TopicPartition {
        topic_id: Uuid::from_u128(7),
        partition: p as i32,
    }
}

// ---------------------------------------------------------------------------------------
// Oracle of one partition: one entry per offset.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OState {
    Available,
    Acquired { member: usize, deadline_ms: u64 },
    Acknowledged,
    Archived,
    Locked { txn: usize, accept: bool },
}

impl OState {
    fn terminal(self) -> bool {
        matches!(self, OState::Acknowledged | OState::Archived)
    }
}

#[derive(Clone, Debug)]
struct OPart {
    limit: u16,
    spso: i64,
    next: i64,
    recs: BTreeMap<i64, (OState, u16)>,
    /// Transitions into a terminal state, per offset (must never exceed 1).
    terminal: BTreeMap<i64, u32>,
    /// Offsets made terminal by a transaction's commit.
    committed: BTreeSet<i64>,
    /// First offsets of delivery batches (Kafka's in-flight batches; `share_model` has the
    /// same rule): each acquisition of new offsets, after a restart each durable run.
    batches: BTreeSet<i64>,
}

impl OPart {
    fn rec(&self, o: i64) -> (OState, u16) {
        self.recs.get(&o).copied().unwrap_or((OState::Available, 0))
    }

    fn set(&mut self, o: i64, state: OState, dc: u16) {
        let (old, _) = self.rec(o);
        assert!(
            !old.terminal(),
            "offset {o}: terminal {old:?} changed to {state:?}"
        );
        if state.terminal() {
            let n = self.terminal.entry(o).or_default();
            *n += 1;
            assert_eq!(*n, 1, "offset {o} became terminal twice");
        }
        self.recs.insert(o, (state, dc));
    }

    fn release_state(&self, dc: u16) -> OState {
        if dc >= self.limit {
            OState::Archived
        } else {
            OState::Available
        }
    }

    fn advance(&mut self) {
        while self.spso < self.next && self.rec(self.spso).0.terminal() {
            self.spso += 1;
        }
    }

    /// Kafka 4.2+'s acquire with throttled delivery near the limit (as in `share_model`).
    fn acquire(&mut self, m: usize, log_end: i64, max: usize, now: u64) -> Vec<(i64, u16)> {
        let mut out = Vec::new();
        let deadline_ms = now + LOCK_MS;
        let threshold = throttle_threshold(self.limit);
        let mut o = self.spso;
        while out.len() < max && o < self.next.min(log_end) {
            let bf = *self
                .batches
                .range(..=o)
                .next_back()
                .expect("a batch holds o");
            let bl = self
                .batches
                .range(o + 1..)
                .next()
                .map_or(self.next - 1, |n| n - 1);
            let reach = bl.min(log_end - 1);
            let avail: Vec<i64> = (o..=reach)
                .filter(|&x| self.rec(x).0 == OState::Available)
                .collect();
            o = reach + 1;
            let Some(max_dc) = avail.iter().map(|&x| self.rec(x).1).max() else {
                continue;
            };
            let throttled = max_dc >= threshold;
            if throttled && !out.is_empty() {
                return out;
            }
            let size = (bl - bf + 1) as u64;
            let (mut in_batch, mut cap) = (0u64, None);
            for x in avail {
                if out.len() == max {
                    break;
                }
                let dc = self.rec(x).1;
                if throttled {
                    if self.limit > 2 && dc == self.limit - 1 && in_batch > 0 {
                        break;
                    }
                    if dc >= threshold && cap.is_none() {
                        cap = Some((size >> (dc - threshold + 1)).max(1));
                    }
                }
                self.set(
                    x,
                    OState::Acquired {
                        member: m,
                        deadline_ms,
                    },
                    dc + 1,
                );
                out.push((x, dc + 1));
                in_batch += 1;
                if throttled && ((self.limit > 2 && dc + 1 == self.limit) || cap == Some(in_batch))
                {
                    break;
                }
            }
            if throttled && in_batch > 0 {
                return out;
            }
        }
        if out.len() < max && self.next < log_end {
            self.batches.insert(self.next);
        }
        while out.len() < max && self.next < log_end {
            let o = self.next;
            self.set(
                o,
                OState::Acquired {
                    member: m,
                    deadline_ms,
                },
                1,
            );
            out.push((o, 1));
            self.next += 1;
        }
        out
    }

    fn holds(&self, m: usize, first: i64, last: i64) -> bool {
        (first..=last).all(|o| {
            o >= self.spso
                && o < self.next
                && matches!(self.rec(o).0, OState::Acquired { member, .. } if member == m)
        })
    }

    /// One type per batch (the share model covers per-offset types).
    fn acknowledge(
        &mut self,
        m: usize,
        batches: &[(i64, i64, AcknowledgeType)],
    ) -> Result<(), i16> {
        if !batches.iter().all(|&(f, l, _)| self.holds(m, f, l)) {
            return Err(121);
        }
        for &(f, l, t) in batches {
            for o in f..=l {
                let dc = self.rec(o).1;
                let s = match t {
                    AcknowledgeType::Accept => OState::Acknowledged,
                    AcknowledgeType::Release => self.release_state(dc),
                    _ => OState::Archived,
                };
                self.set(o, s, dc);
            }
        }
        self.advance();
        Ok(())
    }

    fn lock(
        &mut self,
        m: usize,
        txn: usize,
        batches: &[(i64, i64, AcknowledgeType)],
    ) -> Result<u64, i16> {
        if batches.iter().any(|b| b.2 == AcknowledgeType::Release) {
            return Err(42);
        }
        if !batches.iter().all(|&(f, l, _)| self.holds(m, f, l)) {
            return Err(121);
        }
        let mut n = 0;
        for &(f, l, t) in batches {
            for o in f..=l {
                let dc = self.rec(o).1;
                self.set(
                    o,
                    OState::Locked {
                        txn,
                        accept: t == AcknowledgeType::Accept,
                    },
                    dc,
                );
                n += 1;
            }
        }
        Ok(n)
    }

    fn release_where(&mut self, pred: impl Fn(OState) -> bool) {
        for o in self.spso..self.next {
            let (s, dc) = self.rec(o);
            if pred(s) {
                let to = self.release_state(dc);
                self.set(o, to, dc);
            }
        }
        self.advance();
    }

    fn commit(&mut self, txn: usize) {
        for o in self.spso..self.next {
            if let (OState::Locked { txn: t, accept }, dc) = self.rec(o) {
                if t == txn {
                    self.set(
                        o,
                        if accept {
                            OState::Acknowledged
                        } else {
                            OState::Archived
                        },
                        dc,
                    );
                    self.committed.insert(o);
                }
            }
        }
        self.advance();
    }

    fn abort(&mut self, txn: usize) {
        for o in self.spso..self.next {
            if let (OState::Locked { txn: t, .. }, dc) = self.rec(o) {
                if t == txn {
                    self.set(o, OState::Available, dc - 1);
                }
            }
        }
    }

    fn restart(&mut self) {
        for o in self.spso..self.next {
            if let (OState::Acquired { .. }, dc) = self.rec(o) {
                self.recs.insert(o, (OState::Available, dc - 1));
            }
        }
        while self.next > self.spso && self.rec(self.next - 1) == (OState::Available, 0) {
            self.next -= 1;
        }
        self.batches.clear();
        for o in self.spso..self.next {
            if o == self.spso || self.rec(o) != self.rec(o - 1) {
                self.batches.insert(o);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Oracle of the coordinator.

#[derive(Clone, Debug)]
struct OTxn {
    state: TxnState,
    create_ms: u64,
    timeout_ms: u64,
    finish_ms: u64,
    acks_in_flight: u32,
}

#[derive(Clone, Debug)]
struct PendingAck {
    txn: usize,
    partition: usize,
    member: usize,
    batches: Vec<(i64, i64, AcknowledgeType)>,
}

#[derive(Clone, Debug)]
enum Op {
    Produce {
        partition: usize,
        records: i64,
    },
    Acquire {
        partition: usize,
        m: usize,
        max: usize,
    },
    Ack {
        partition: usize,
        m: usize,
        batches: Vec<(i64, i64, AcknowledgeType)>,
    },
    /// Register a transactional acknowledgement with the coordinator.
    TxnAckStart(PendingAck),
    /// Lock on the partition and complete the registration (index into the in-flight list).
    TxnAckFinish {
        index: usize,
    },
    Begin {
        txn: usize,
        timeout_ms: i64,
    },
    Prepare {
        txn: usize,
    },
    Commit {
        txn: usize,
    },
    Abort {
        txn: usize,
    },
    Advance {
        ms: u64,
    },
    ReleaseMember {
        m: usize,
    },
    Restart,
}

struct World {
    coord: GroupTransactions,
    parts: Vec<SharePartition>,
    journal_parts: Vec<ShareSnapshot>,
    journal_txns: BTreeMap<String, TxnRecord>,
    in_flight: Vec<PendingAck>,
    o_parts: Vec<OPart>,
    o_txns: BTreeMap<usize, OTxn>,
    log_end: Vec<i64>,
    now: u64,
    share_config: ShareConfig,
    txn_config: TxnConfig,
}

fn batches_of(batches: &[(i64, i64, AcknowledgeType)]) -> Vec<AckBatch> {
    batches
        .iter()
        .map(|&(f, l, t)| AckBatch::new(f, l, t))
        .collect()
}

impl World {
    fn new(limit: u16) -> World {
        let share_config = ShareConfig {
            record_lock_duration_ms: LOCK_MS,
            delivery_count_limit: limit,
            partition_max_record_locks: 1_000,
        };
        let txn_config = TxnConfig {
            max_pending: MAX_PENDING,
            retention_ms: RETENTION_MS,
            ..TxnConfig::default()
        };
        let mut parts = Vec::new();
        let mut journal_parts = Vec::new();
        let mut o_parts = Vec::new();
        for _ in 0..PARTITIONS {
            let mut p = SharePartition::new(share_config, 0);
            let mut j = ShareSnapshot {
                spso: 0,
                runs: vec![],
            };
            j.apply_delta(&p.take_delta().unwrap()).unwrap();
            parts.push(p);
            journal_parts.push(j);
            o_parts.push(OPart {
                limit,
                spso: 0,
                next: 0,
                recs: BTreeMap::new(),
                terminal: BTreeMap::new(),
                committed: BTreeSet::new(),
                batches: BTreeSet::new(),
            });
        }
        World {
            coord: GroupTransactions::new(GROUP, txn_config),
            parts,
            journal_parts,
            journal_txns: BTreeMap::new(),
            in_flight: Vec::new(),
            o_parts,
            o_txns: BTreeMap::new(),
            log_end: vec![0; PARTITIONS],
            now: 0,
            share_config,
            txn_config,
        }
    }

    // ---- the oracle's view of transactions ----

    fn o_tick(&mut self) {
        let now = self.now;
        let due: Vec<usize> = self
            .o_txns
            .iter()
            .filter(|(_, t)| t.state == TxnState::Ongoing && now >= t.create_ms + t.timeout_ms)
            .map(|(&n, _)| n)
            .collect();
        for n in due {
            self.o_finish(n, TxnState::Aborted);
        }
        // Forget finished transactions past retention, oldest first (ties by id), stopping
        // at one with acknowledgements still in flight.
        let mut finished: Vec<(u64, String, usize)> = self
            .o_txns
            .iter()
            .filter(|(_, t)| t.state.is_finished())
            .map(|(&n, t)| (t.finish_ms, txn_id(n), n))
            .collect();
        finished.sort();
        for (finish_ms, _, n) in finished {
            if self.o_txns[&n].acks_in_flight > 0 || finish_ms + RETENTION_MS > now {
                break;
            }
            self.o_txns.remove(&n);
        }
    }

    fn o_finish(&mut self, n: usize, to: TxnState) {
        let now = self.now;
        let t = self.o_txns.get_mut(&n).unwrap();
        t.state = to;
        t.finish_ms = now;
        for p in &mut self.o_parts {
            if to == TxnState::Committed {
                p.commit(n);
            } else {
                p.abort(n);
            }
        }
    }

    fn o_pending(&self) -> usize {
        self.o_txns
            .values()
            .filter(|t| t.state.is_pending())
            .count()
    }

    // ---- the handlers' side: apply coordinator decisions to participants ----

    /// Drains the coordinator's changes into the journal and applies decisions to the
    /// participants (what the handlers and the journal will do).
    fn drain_changes(&mut self) {
        for change in self.coord.take_changes() {
            let id = change.record.transaction_id.clone();
            match change.cause {
                TxnChangeCause::Forgotten => {
                    self.journal_txns.remove(&id);
                    continue;
                }
                TxnChangeCause::Committed => {
                    for p in &change.record.participants {
                        self.parts[p.partition.partition as usize].commit(&id);
                    }
                }
                TxnChangeCause::Aborted
                | TxnChangeCause::TimedOut
                | TxnChangeCause::AbortedOnRestart => {
                    for p in &change.record.participants {
                        self.parts[p.partition.partition as usize].abort(&id);
                    }
                }
                TxnChangeCause::Began | TxnChangeCause::Prepared => {}
            }
            self.journal_txns.insert(id, change.record);
        }
    }

    fn check_reply(&self, op: &Op, got: Result<TxnState, TxnError>, want: Result<TxnState, i16>) {
        match (&got, want) {
            (Ok(s), Ok(w)) => assert_eq!(*s, w, "{op:?}"),
            (Err(e), Err(code)) => assert_eq!(e.code(), code, "{op:?}: {e}"),
            _ => panic!("{op:?}: coordinator {got:?}, oracle {want:?}"),
        }
    }

    fn apply(&mut self, op: &Op) {
        let now = self.now;
        match op {
            Op::Produce { partition, records } => self.log_end[*partition] += records,
            Op::Acquire { partition, m, max } => {
                let (p, o) = (&mut self.parts[*partition], &mut self.o_parts[*partition]);
                let got = p.acquire(MEMBERS[*m], self.log_end[*partition], *max as u32, now);
                let flat: Vec<(i64, u16)> = got
                    .iter()
                    .flat_map(|r| (r.first..=r.last).map(move |x| (x, r.delivery_count)))
                    .collect();
                for &(x, _) in &flat {
                    assert!(
                        !o.committed.contains(&x),
                        "offset {x} acquired after its commit"
                    );
                    assert!(!o.rec(x).0.terminal(), "terminal offset {x} acquired");
                }
                assert_eq!(
                    flat,
                    o.acquire(*m, self.log_end[*partition], *max, now),
                    "{op:?}"
                );
            }
            Op::Ack {
                partition,
                m,
                batches,
            } => {
                let got =
                    self.parts[*partition].acknowledge(MEMBERS[*m], &batches_of(batches), now);
                let want = self.o_parts[*partition].acknowledge(*m, batches);
                assert_eq!(got.map(|_| ()).map_err(|e| e.code()), want, "{op:?}");
            }
            Op::TxnAckStart(ack) => {
                let got = self
                    .coord
                    .register_participant(&txn_id(ack.txn), tp(ack.partition), now);
                self.o_tick();
                let want = match self.o_txns.get_mut(&ack.txn) {
                    None => Err(105),
                    Some(t) if t.state != TxnState::Ongoing => Err(48),
                    Some(t) => {
                        t.acks_in_flight += 1;
                        Ok(TxnState::Ongoing)
                    }
                };
                let ok = want.is_ok();
                self.check_reply(op, got.map(|r| r.state), want);
                if ok {
                    self.in_flight.push(ack.clone());
                }
            }
            Op::TxnAckFinish { index } => {
                let ack = self.in_flight.remove(*index);
                let id = txn_id(ack.txn);
                let part = &mut self.parts[ack.partition];
                let got = part.lock(MEMBERS[ack.member], &id, &batches_of(&ack.batches));
                let want = self.o_parts[ack.partition].lock(ack.member, ack.txn, &ack.batches);
                assert_eq!(got.clone().map_err(|e| e.code()), want, "{op:?} {ack:?}");
                let state = self
                    .coord
                    .complete_ack(&id, tp(ack.partition), got.unwrap_or(0));
                let o_state = match self.o_txns.get_mut(&ack.txn) {
                    Some(t) => {
                        t.acks_in_flight -= 1;
                        t.state
                    }
                    None => TxnState::Empty,
                };
                assert_eq!(state, o_state, "{op:?}");
                if matches!(state, TxnState::Aborted | TxnState::Empty) {
                    // The decision came first: the late locks are released.
                    self.parts[ack.partition].abort(&id);
                    self.o_parts[ack.partition].abort(ack.txn);
                }
            }
            Op::Begin { txn, timeout_ms } => {
                let got = self.coord.begin(&txn_id(*txn), *timeout_ms, now);
                self.o_tick();
                let want = match self.o_txns.get(txn) {
                    Some(t) => Ok(t.state),
                    None if *timeout_ms != -1 && *timeout_ms < 1 => Err(50),
                    None if self.o_pending() >= MAX_PENDING => Err(51),
                    None => {
                        let timeout_ms = if *timeout_ms == -1 {
                            60_000
                        } else {
                            *timeout_ms as u64
                        };
                        let t = OTxn {
                            state: TxnState::Ongoing,
                            create_ms: now,
                            timeout_ms,
                            finish_ms: 0,
                            acks_in_flight: 0,
                        };
                        self.o_txns.insert(*txn, t);
                        Ok(TxnState::Ongoing)
                    }
                };
                self.check_reply(op, got.map(|r| r.state), want);
            }
            Op::Prepare { txn } => {
                let got = self.coord.prepare(&txn_id(*txn), now);
                self.o_tick();
                let want = match self.o_txns.get_mut(txn) {
                    None => Err(105),
                    Some(t) if t.state == TxnState::Ongoing => {
                        t.state = TxnState::Prepare;
                        Ok(TxnState::Prepare)
                    }
                    Some(t) if t.state == TxnState::Prepare => Ok(TxnState::Prepare),
                    Some(_) => Err(48),
                };
                self.check_reply(op, got.map(|r| r.state), want);
            }
            Op::Commit { txn } => {
                let got = self.coord.commit(&txn_id(*txn), now);
                self.o_tick();
                let want = match self.o_txns.get(txn).map(|t| (t.state, t.acks_in_flight)) {
                    None => Err(105),
                    Some((TxnState::Committed, _)) => Ok(TxnState::Committed),
                    Some((TxnState::Prepare, 0)) => {
                        self.o_finish(*txn, TxnState::Committed);
                        Ok(TxnState::Committed)
                    }
                    Some((TxnState::Prepare, _)) => Err(51),
                    Some(_) => Err(48),
                };
                self.check_reply(op, got.map(|r| r.state), want);
            }
            Op::Abort { txn } => {
                let got = self.coord.abort(&txn_id(*txn), now);
                self.o_tick();
                let want = match self.o_txns.get(txn).map(|t| t.state) {
                    None => Err(105),
                    Some(s) if s.is_finished() => Ok(s),
                    Some(_) => {
                        self.o_finish(*txn, TxnState::Aborted);
                        Ok(TxnState::Aborted)
                    }
                };
                self.check_reply(op, got.map(|r| r.state), want);
            }
            Op::Advance { ms } => {
                self.now += ms;
                let expired = self.coord.expire(self.now);
                self.coord.forget_finished(self.now);
                for record in &expired {
                    assert_eq!(record.state, TxnState::Aborted);
                }
                for p in &mut self.parts {
                    p.expire_locks(self.now);
                }
                let now = self.now;
                self.o_tick();
                for o in &mut self.o_parts {
                    o.release_where(
                        |s| matches!(s, OState::Acquired { deadline_ms, .. } if deadline_ms <= now),
                    );
                }
            }
            Op::ReleaseMember { m } => {
                for p in &mut self.parts {
                    p.release_member(MEMBERS[*m]);
                }
                for o in &mut self.o_parts {
                    o.release_where(
                        |s| matches!(s, OState::Acquired { member, .. } if member == *m),
                    );
                }
            }
            Op::Restart => {
                // Everything in memory is lost; the journal is the truth.
                self.in_flight.clear();
                for (i, p) in self.parts.iter_mut().enumerate() {
                    *p = SharePartition::from_snapshot(self.share_config, &self.journal_parts[i])
                        .unwrap();
                }
                let records: Vec<TxnRecord> = self.journal_txns.values().cloned().collect();
                self.coord =
                    GroupTransactions::restore(GROUP, self.txn_config, records, now).unwrap();
                self.drain_changes();
                // Participants resolve the LOCKED records they find by the coordinator's state:
                // COMMITTED commits, PREPARE keeps the locks, anything else aborts.
                for p in &mut self.parts {
                    for id in p.locked_txns() {
                        match self.coord.get(&id).map(|r| r.state) {
                            Some(TxnState::Committed) => {
                                p.commit(&id);
                            }
                            Some(TxnState::Prepare) => {}
                            _ => {
                                p.abort(&id);
                            }
                        }
                    }
                }
                // The oracle: acquisitions lost, ONGOING aborted, PREPARE kept.
                for o in &mut self.o_parts {
                    o.restart();
                }
                for t in self.o_txns.values_mut() {
                    t.acks_in_flight = 0;
                }
                self.o_tick();
                let ongoing: Vec<usize> = self
                    .o_txns
                    .iter()
                    .filter(|(_, t)| t.state == TxnState::Ongoing)
                    .map(|(&n, _)| n)
                    .collect();
                for n in ongoing {
                    self.o_finish(n, TxnState::Aborted);
                }
            }
        }
        self.drain_changes();
        self.check(op);
    }

    fn check(&mut self, op: &Op) {
        self.coord.check_invariants();
        for (i, p) in self.parts.iter_mut().enumerate() {
            p.check_invariants();
            let o = &self.o_parts[i];
            assert_eq!(
                (p.spso(), p.speo()),
                (o.spso, o.next - 1),
                "partition {i} after {op:?}"
            );
            for x in o.spso..o.next {
                let got = p.record(x).unwrap();
                let (s, dc) = o.rec(x);
                assert_eq!(got.delivery_count, dc, "p{i} offset {x} after {op:?}");
                let same = match (got.state, s) {
                    (RecordState::Available, OState::Available) => true,
                    (
                        RecordState::Acquired,
                        OState::Acquired {
                            member,
                            deadline_ms,
                        },
                    ) => {
                        got.member == Some(MEMBERS[member])
                            && got.lock_deadline_ms == Some(deadline_ms)
                    }
                    (RecordState::Locked { .. }, OState::Locked { txn, .. }) => {
                        got.txn == Some(txn_id(txn).as_str())
                    }
                    (RecordState::Acknowledged, OState::Acknowledged)
                    | (RecordState::Archived, OState::Archived) => true,
                    _ => false,
                };
                assert!(
                    same,
                    "p{i} offset {x}: partition {} oracle {s:?} after {op:?}",
                    got.state
                );
            }
            if let Some(delta) = p.take_delta() {
                self.journal_parts[i].apply_delta(&delta).unwrap();
            }
            assert_eq!(
                self.journal_parts[i],
                p.snapshot(),
                "journal of p{i} after {op:?}"
            );
        }
        // Coordinator vs oracle, and its journal.
        assert_eq!(
            self.coord.pending_count(),
            self.o_pending(),
            "pending after {op:?}"
        );
        for n in 0..CHECKPOINTS {
            let got = self.coord.get(&txn_id(n));
            let want = self.o_txns.get(&n);
            assert_eq!(
                got.as_ref().map(|r| r.state),
                want.map(|t| t.state),
                "txn {n} after {op:?}"
            );
            assert_eq!(
                self.coord.acks_in_flight(&txn_id(n)),
                want.map_or(0, |t| t.acks_in_flight)
            );
            let journaled = self.journal_txns.get(&txn_id(n));
            assert_eq!(
                journaled.map(|r| r.state),
                got.as_ref().map(|r| r.state),
                "journal of txn {n}"
            );
            // With no acknowledgement in flight, the coordinator's record — and, for PREPARE,
            // the durable one — names every partition holding the transaction's locks, with
            // the number of records locked there.
            let settled = !self.in_flight.iter().any(|a| a.txn == n);
            let records = [
                got.as_ref(),
                journaled.filter(|r| r.state == TxnState::Prepare),
            ];
            for r in records
                .into_iter()
                .flatten()
                .filter(|r| r.state.is_pending() && settled)
            {
                for (i, p) in self.parts.iter().enumerate() {
                    let locked = p.locked_count(&txn_id(n));
                    let listed = r.participants.iter().find(|x| x.partition == tp(i));
                    assert_eq!(
                        listed.map_or(0, |x| x.locked_records),
                        locked,
                        "txn {n} p{i} after {op:?}"
                    );
                }
            }
        }
    }

    /// Decides every transaction and acknowledges everything; then every offset is terminal.
    fn drain(&mut self, rng: &mut SmallRng) {
        while !self.in_flight.is_empty() {
            self.apply(&Op::TxnAckFinish { index: 0 });
        }
        for n in 0..CHECKPOINTS {
            match self.coord.get(&txn_id(n)).map(|r| r.state) {
                Some(TxnState::Ongoing) if rng.gen_bool(0.5) => self.apply(&Op::Abort { txn: n }),
                Some(TxnState::Ongoing) => {
                    self.apply(&Op::Prepare { txn: n });
                    self.apply(&Op::Commit { txn: n });
                }
                Some(TxnState::Prepare) => self.apply(&Op::Commit { txn: n }),
                _ => {}
            }
        }
        for m in 0..MEMBERS.len() {
            self.apply(&Op::ReleaseMember { m });
        }
        for partition in 0..PARTITIONS {
            let mut rounds = 0;
            while self.parts[partition].spso() < self.log_end[partition] {
                rounds += 1;
                assert!(rounds < 100, "drain does not converge");
                self.apply(&Op::Acquire {
                    partition,
                    m: 0,
                    max: 1_000,
                });
                let held: Vec<(i64, i64, AcknowledgeType)> = self.parts[partition]
                    .runs()
                    .filter(|r| r.member == Some(MEMBERS[0]))
                    .map(|r| (r.first, r.last, AcknowledgeType::Accept))
                    .collect();
                self.apply(&Op::Ack {
                    partition,
                    m: 0,
                    batches: held,
                });
            }
            let o = &self.o_parts[partition];
            for x in 0..self.log_end[partition] {
                assert_eq!(
                    o.terminal.get(&x),
                    Some(&1),
                    "p{partition} offset {x} not terminal exactly once"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Random interleavings.

struct SeedOnPanic(u64);

impl Drop for SeedOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "share_txn_model failed with seed {} (replay: LOCKSTEP_SEED={})",
                self.0, self.0
            );
        }
    }
}

fn random_ranges(
    rng: &mut SmallRng,
    w: &World,
    partition: usize,
    m: usize,
    types: &[AcknowledgeType],
) -> Vec<(i64, i64, AcknowledgeType)> {
    let held: Vec<(i64, i64)> = w.parts[partition]
        .runs()
        .filter(|r| r.member == Some(MEMBERS[m]))
        .map(|r| (r.first, r.last))
        .collect();
    let mut out = Vec::new();
    let must = if held.is_empty() {
        usize::MAX
    } else {
        rng.gen_range(0..held.len())
    };
    for (k, (first, last)) in held.into_iter().enumerate() {
        if k == must || rng.gen_bool(0.4) {
            let a = rng.gen_range(first..=last);
            let b = rng.gen_range(a..=last);
            out.push((a, b, types[rng.gen_range(0..types.len())]));
        }
    }
    if rng.gen_bool(0.1) {
        // Someone else's records, or nobody's.
        let x = rng.gen_range(0..=w.log_end[partition]);
        out.push((x, x, types[0]));
        out.sort_by_key(|b| b.0);
        out.dedup_by(|b, a| b.0 <= a.1);
    }
    out
}

fn random_op(rng: &mut SmallRng, w: &World) -> Op {
    let partition = rng.gen_range(0..PARTITIONS);
    let mut m = rng.gen_range(0..MEMBERS.len());
    let holders: Vec<usize> = (0..MEMBERS.len())
        .filter(|&k| {
            w.parts[partition]
                .runs()
                .any(|r| r.member == Some(MEMBERS[k]))
        })
        .collect();
    if !holders.is_empty() && rng.gen_bool(0.8) {
        m = holders[rng.gen_range(0..holders.len())];
    }
    // Mostly operate on live transactions (acknowledgements on ONGOING ones), sometimes on any.
    let live = |pred: fn(TxnState) -> bool| -> Vec<usize> {
        w.o_txns
            .iter()
            .filter(|(_, t)| pred(t.state))
            .map(|(&n, _)| n)
            .collect()
    };
    let pending = live(TxnState::is_pending);
    let ongoing = live(|s| s == TxnState::Ongoing);
    let mut txn = rng.gen_range(0..CHECKPOINTS);
    if !pending.is_empty() && rng.gen_bool(0.7) {
        txn = pending[rng.gen_range(0..pending.len())];
    }
    let unknown: Vec<usize> = (0..CHECKPOINTS)
        .filter(|n| !w.o_txns.contains_key(n))
        .collect();
    let begin_txn = if !unknown.is_empty() && rng.gen_bool(0.7) {
        unknown[rng.gen_range(0..unknown.len())]
    } else {
        txn
    };
    let ack_txn = if !ongoing.is_empty() && rng.gen_bool(0.85) {
        ongoing[rng.gen_range(0..ongoing.len())]
    } else {
        txn
    };
    match rng.gen_range(0..100) {
        0..=7 => Op::Produce {
            partition,
            records: rng.gen_range(1..16),
        },
        8..=22 => Op::Acquire {
            partition,
            m,
            max: rng.gen_range(1..16),
        },
        23..=32 => {
            let types = [
                AcknowledgeType::Accept,
                AcknowledgeType::Release,
                AcknowledgeType::Reject,
            ];
            Op::Ack {
                partition,
                m,
                batches: random_ranges(rng, w, partition, m, &types),
            }
        }
        33..=47 => {
            let types: &[AcknowledgeType] = if rng.gen_bool(0.95) {
                &[
                    AcknowledgeType::Accept,
                    AcknowledgeType::Reject,
                    AcknowledgeType::Gap,
                ]
            } else {
                &[AcknowledgeType::Release]
            };
            let batches = random_ranges(rng, w, partition, m, types);
            Op::TxnAckStart(PendingAck {
                txn: ack_txn,
                partition,
                member: m,
                batches,
            })
        }
        48..=57 if !w.in_flight.is_empty() => Op::TxnAckFinish {
            index: rng.gen_range(0..w.in_flight.len()),
        },
        48..=64 => {
            let timeout_ms = match rng.gen_range(0..10) {
                0 => -1,
                1 => 0,
                2 => rng.gen_range(500..2_000),
                _ => rng.gen_range(3_000..15_000),
            };
            Op::Begin {
                txn: begin_txn,
                timeout_ms,
            }
        }
        65..=72 => Op::Prepare { txn },
        73..=79 => Op::Commit { txn },
        80..=84 => Op::Abort { txn },
        85..=93 if rng.gen_bool(0.8) => Op::Advance {
            ms: rng.gen_range(0..400),
        },
        85..=93 => Op::Advance {
            ms: rng.gen_range(2_000..8_000),
        },
        94..=96 => Op::ReleaseMember { m },
        _ => Op::Restart,
    }
}

fn run_seed(seed: u64, ops: usize) {
    let _guard = SeedOnPanic(seed);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut w = World::new(rng.gen_range(2..=4));
    for _ in 0..ops {
        let op = random_op(&mut rng, &w);
        w.apply(&op);
    }
    w.drain(&mut rng);
}

#[test]
fn random_interleavings() {
    if let Ok(seed) = std::env::var("LOCKSTEP_SEED") {
        run_seed(seed.parse().expect("LOCKSTEP_SEED is a u64"), 3_000);
        return;
    }
    let seeds: u64 = std::env::var("LOCKSTEP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for seed in 0..seeds {
        run_seed(seed, 500);
    }
}

/// The scenario of the KIP's sequence diagram, with a restart between prepare and commit:
/// nothing committed is delivered again, and the prepared locks survive the restart.
#[test]
fn prepared_transaction_survives_restart_and_commits() {
    let mut rng = SmallRng::seed_from_u64(1);
    let mut w = World::new(5);
    w.apply(&Op::Produce {
        partition: 0,
        records: 10,
    });
    w.apply(&Op::Begin {
        txn: 1,
        timeout_ms: 5_000,
    });
    w.apply(&Op::Acquire {
        partition: 0,
        m: 0,
        max: 5,
    });
    w.apply(&Op::Acquire {
        partition: 0,
        m: 1,
        max: 5,
    });
    for (m, first) in [(0, 0), (1, 5)] {
        let batches = vec![(first, first + 4, AcknowledgeType::Accept)];
        w.apply(&Op::TxnAckStart(PendingAck {
            txn: 1,
            partition: 0,
            member: m,
            batches,
        }));
        w.apply(&Op::TxnAckFinish { index: 0 });
    }
    w.apply(&Op::Prepare { txn: 1 });
    w.apply(&Op::Advance { ms: 60_000 }); // past the lock and the transaction timeout
    w.apply(&Op::Restart);
    assert_eq!(w.parts[0].locked_count(&txn_id(1)), 10);
    assert_eq!(w.coord.get(&txn_id(1)).unwrap().state, TxnState::Prepare);
    w.apply(&Op::Acquire {
        partition: 0,
        m: 0,
        max: 100,
    });
    assert_eq!(
        w.parts[0].acquired_records(),
        0,
        "LOCKED records are not redelivered"
    );
    w.apply(&Op::Commit { txn: 1 });
    assert_eq!(w.parts[0].spso(), 10);
    w.drain(&mut rng);
}
