//! Model test of `SharePartition` against a per-offset array oracle.
//!
//! What it proves: for every operation — acquire, acknowledge (GAP, ACCEPT, RELEASE, REJECT,
//! RENEW, one type or per offset, valid or malformed, own or foreign records), lock expiry,
//! member release, transactional lock / commit / abort, AlterShareGroupOffsets, the log
//! start moving (retention, DeleteRecords), throttled delivery near the delivery limit
//! (Kafka 4.2+), and restart
//! from the durable view — the run-based partition gives the same answers (acquired offsets
//! with delivery counts, error codes, counts) and the same state for every offset as a
//! trivial per-offset model written from the rules; its runs stay disjoint, tiling and
//! coalesced with consistent indexes (`check_invariants`) after every operation; and the
//! journal's view is exact: replaying the first delta and every delta after it gives
//! `snapshot()`, and restarting from that replayed view loses only acquisitions.
//!
//! How: `random_sequences` runs many seeded random sequences (seed printed on failure;
//! `LOCKSTEP_SEED=n` replays one, `LOCKSTEP_SEEDS=n` runs more);
//! `exhaustive_small_cases` runs every sequence of up to 4 operations from a 31-operation
//! alphabet on a 4-offset log with 2 members, by depth-first search over cloned states.

use std::collections::{BTreeMap, BTreeSet};

use lockstep::share::partition::throttle_threshold;
use lockstep::share::{
    AckBatch, AcknowledgeType, LockOutcome, RecordState, ShareConfig, ShareError, SharePartition,
    ShareSnapshot,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const MEMBERS: [&str; 3] = ["m0", "m1", "m2"];
const TXNS: [&str; 3] = ["g-job-0", "g-job-1", "g-job-2"];

// ---------------------------------------------------------------------------------------
// The oracle: one entry per offset, the rules written out directly.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OState {
    Available,
    Acquired { member: usize, deadline_ms: u64 },
    Acknowledged,
    Archived,
    Locked { txn: usize, accept: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ORec {
    state: OState,
    delivery_count: u16,
}

#[derive(Clone, Debug)]
struct Oracle {
    config: ShareConfig,
    spso: i64,
    next: i64,
    recs: BTreeMap<i64, ORec>,
    /// First offsets of delivery batches (Kafka's in-flight batches): where each
    /// acquisition of new offsets began, or after a restart each change of durable state.
    batches: BTreeSet<i64>,
    /// The log start: nothing below it is ever AVAILABLE.
    log_start: i64,
}

impl Oracle {
    fn new(config: ShareConfig, start: i64) -> Oracle {
        Oracle {
            config,
            spso: start,
            next: start,
            recs: BTreeMap::new(),
            batches: BTreeSet::new(),
            log_start: 0,
        }
    }

    fn rec(&self, o: i64) -> ORec {
        self.recs.get(&o).copied().unwrap_or(ORec {
            state: OState::Available,
            delivery_count: 0,
        })
    }

    fn set(&mut self, o: i64, state: OState, delivery_count: u16) {
        self.recs.insert(
            o,
            ORec {
                state,
                delivery_count,
            },
        );
    }

    fn released(&self, o: i64, dc: u16) -> OState {
        if o < self.log_start || dc >= self.config.delivery_count_limit {
            OState::Archived
        } else {
            OState::Available
        }
    }

    fn advance(&mut self) {
        while self.spso < self.next
            && matches!(
                self.rec(self.spso).state,
                OState::Acknowledged | OState::Archived
            )
        {
            self.spso += 1;
        }
    }

    /// The delivery batch holding `o`: [last start at or before it, next start - 1 or SPEO].
    fn batch_of(&self, o: i64) -> (i64, i64) {
        let first = *self
            .batches
            .range(..=o)
            .next_back()
            .expect("a batch holds o");
        let last = self
            .batches
            .range(o + 1..)
            .next()
            .map_or(self.next - 1, |n| n - 1);
        (first, last)
    }

    /// Kafka 4.2+'s acquire, offset by offset (`acquireSubsetBatchRecords`,
    /// `shouldThrottleRecordsDelivery`), with Lockstep's exact record budget.
    fn acquire(&mut self, m: usize, log_end: i64, max: u32, now: u64) -> Vec<(i64, u16)> {
        let mut out = Vec::new();
        let mut budget = max as usize;
        let deadline_ms = now + self.config.record_lock_duration_ms;
        let limit = self.config.delivery_count_limit;
        let threshold = throttle_threshold(limit);
        let mut stop = false;
        let mut o = self.spso;
        while budget > 0 && o < self.next && o < log_end {
            let (bf, bl) = self.batch_of(o);
            let reach = bl.min(log_end - 1);
            let avail: Vec<i64> = (o..=reach)
                .filter(|&x| self.rec(x).state == OState::Available)
                .collect();
            o = reach + 1;
            let Some(max_dc) = avail.iter().map(|&x| self.rec(x).delivery_count).max() else {
                continue;
            };
            let throttled = max_dc >= threshold;
            if throttled && !out.is_empty() {
                stop = true;
                break;
            }
            let size = (bl - bf + 1) as u64;
            let mut in_batch = 0u64;
            let mut cap: Option<u64> = None;
            for x in avail {
                if budget == 0 {
                    break;
                }
                let dc = self.rec(x).delivery_count;
                if throttled {
                    if limit > 2 && dc == limit - 1 && in_batch > 0 {
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
                budget -= 1;
                in_batch += 1;
                if throttled && ((limit > 2 && dc + 1 == limit) || cap == Some(in_batch)) {
                    break;
                }
            }
            if throttled && in_batch > 0 {
                stop = true;
                break;
            }
        }
        if stop {
            return out;
        }
        let cap_last = self.spso + i64::from(self.config.partition_max_record_locks) - 1;
        if budget > 0 && self.next < log_end && self.next <= cap_last {
            self.batches.insert(self.next);
        }
        while budget > 0 && self.next < log_end && self.next <= cap_last {
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
            budget -= 1;
        }
        out
    }

    fn shape_error(batches: &[AckBatch], txn: bool) -> bool {
        let mut floor = 0;
        for b in batches {
            if b.first < floor || b.first > b.last {
                return true;
            }
            let n = (b.last - b.first + 1) as usize;
            if b.types.is_empty() || (b.types.len() != 1 && b.types.len() != n) {
                return true;
            }
            if txn
                && b.types
                    .iter()
                    .any(|t| matches!(t, AcknowledgeType::Release | AcknowledgeType::Renew))
            {
                return true;
            }
            floor = b.last + 1;
        }
        false
    }

    /// The first batch with an offset `m` does not hold, as the partition reports it.
    fn held_error(&self, m: usize, batches: &[AckBatch]) -> Option<ShareError> {
        for b in batches {
            let held = (b.first..=b.last).all(|o| {
                o >= self.spso
                    && o < self.next
                    && matches!(self.rec(o).state, OState::Acquired { member, .. } if member == m)
            });
            if !held {
                return Some(ShareError::InvalidRecordState {
                    first: b.first,
                    last: b.last,
                });
            }
        }
        None
    }

    fn types_per_offset(b: &AckBatch) -> Vec<(i64, AcknowledgeType)> {
        (b.first..=b.last)
            .map(|o| {
                let t = if b.types.len() == 1 {
                    b.types[0]
                } else {
                    b.types[(o - b.first) as usize]
                };
                (o, t)
            })
            .collect()
    }

    /// Ok(records changed) or the error code.
    fn acknowledge(&mut self, m: usize, batches: &[AckBatch], now: u64) -> Result<u64, i16> {
        if Oracle::shape_error(batches, false) {
            return Err(42);
        }
        if let Some(e) = self.held_error(m, batches) {
            return Err(e.code());
        }
        let mut n = 0;
        for b in batches {
            for (o, t) in Oracle::types_per_offset(b) {
                let r = self.rec(o);
                let state = match t {
                    AcknowledgeType::Accept => OState::Acknowledged,
                    AcknowledgeType::Reject | AcknowledgeType::Gap => OState::Archived,
                    AcknowledgeType::Release => self.released(o, r.delivery_count),
                    AcknowledgeType::Renew => OState::Acquired {
                        member: m,
                        deadline_ms: now + self.config.record_lock_duration_ms,
                    },
                };
                self.set(o, state, r.delivery_count);
                n += 1;
            }
        }
        self.advance();
        Ok(n)
    }

    fn lock(&mut self, m: usize, txn: usize, batches: &[AckBatch]) -> Result<u64, i16> {
        if Oracle::shape_error(batches, true) {
            return Err(42);
        }
        if let Some(e) = self.held_error(m, batches) {
            return Err(e.code());
        }
        let mut n = 0;
        for b in batches {
            for (o, t) in Oracle::types_per_offset(b) {
                let r = self.rec(o);
                let accept = t == AcknowledgeType::Accept;
                self.set(o, OState::Locked { txn, accept }, r.delivery_count);
                n += 1;
            }
        }
        Ok(n)
    }

    fn release_where(&mut self, pred: impl Fn(OState) -> bool) -> u64 {
        let mut n = 0;
        for o in self.spso..self.next {
            let r = self.rec(o);
            if pred(r.state) {
                let s = self.released(o, r.delivery_count);
                self.set(o, s, r.delivery_count);
                n += 1;
            }
        }
        self.advance();
        n
    }

    fn expire(&mut self, now: u64) -> u64 {
        self.release_where(
            |s| matches!(s, OState::Acquired { deadline_ms, .. } if deadline_ms <= now),
        )
    }

    fn release_member(&mut self, m: usize) -> u64 {
        self.release_where(|s| matches!(s, OState::Acquired { member, .. } if member == m))
    }

    fn commit(&mut self, txn: usize) -> (u64, u64) {
        let (mut acked, mut archived) = (0, 0);
        for o in self.spso..self.next {
            let r = self.rec(o);
            if let OState::Locked { txn: t, accept } = r.state {
                if t == txn {
                    if accept {
                        acked += 1;
                        self.set(o, OState::Acknowledged, r.delivery_count);
                    } else {
                        archived += 1;
                        self.set(o, OState::Archived, r.delivery_count);
                    }
                }
            }
        }
        self.advance();
        (acked, archived)
    }

    fn abort(&mut self, txn: usize) -> u64 {
        let mut n = 0;
        for o in self.spso..self.next {
            let r = self.rec(o);
            if matches!(r.state, OState::Locked { txn: t, .. } if t == txn) {
                let state = if o < self.log_start {
                    OState::Archived
                } else {
                    OState::Available
                };
                self.set(o, state, r.delivery_count - 1);
                n += 1;
            }
        }
        self.advance();
        n
    }

    /// The log start moved: AVAILABLE below it ARCHIVED, offsets below it never acquired
    /// ARCHIVED (SPEO + 1 moves up to it); ACQUIRED and LOCKED keep their state.
    fn move_log_start(&mut self, log_start: i64) -> u64 {
        if log_start <= self.log_start {
            return 0;
        }
        self.log_start = log_start;
        let mut n = 0;
        for o in self.spso..self.next.min(log_start) {
            let r = self.rec(o);
            if r.state == OState::Available {
                self.set(o, OState::Archived, r.delivery_count);
                n += 1;
            }
        }
        if self.next < log_start {
            self.batches.insert(self.next);
            for o in self.next..log_start {
                self.set(o, OState::Archived, 0);
            }
            self.next = log_start;
        }
        self.advance();
        n
    }

    fn set_start_offset(&mut self, offset: i64) -> Result<(), i16> {
        let busy = (self.spso..self.next).any(|o| {
            matches!(
                self.rec(o).state,
                OState::Acquired { .. } | OState::Locked { .. }
            )
        });
        if busy {
            return Err(68);
        }
        self.recs.retain(|&o, _| o < self.spso);
        let offset = offset.max(self.log_start);
        self.recs.retain(|&o, _| o < offset);
        self.batches.clear();
        self.spso = offset;
        self.next = offset;
        Ok(())
    }

    /// A restart: acquisitions are lost (the record is as before it was acquired), and the
    /// window ends at the last offset with a state other than never-delivered. Each run of
    /// equal durable state is one delivery batch. Then the shard re-applies the log start.
    fn restart(&mut self) {
        for o in self.spso..self.next {
            let r = self.rec(o);
            if let OState::Acquired { .. } = r.state {
                self.set(o, OState::Available, r.delivery_count - 1);
            }
        }
        while self.next > self.spso
            && self.rec(self.next - 1)
                == (ORec {
                    state: OState::Available,
                    delivery_count: 0,
                })
        {
            self.next -= 1;
        }
        self.batches.clear();
        for o in self.spso..self.next {
            if o == self.spso || self.rec(o) != self.rec(o - 1) {
                self.batches.insert(o);
            }
        }
        let log_start = std::mem::take(&mut self.log_start);
        self.move_log_start(log_start);
    }
}

// ---------------------------------------------------------------------------------------
// Operations applied to both, and the comparison.

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        m: usize,
        log_end: i64,
        max: u32,
    },
    Ack {
        m: usize,
        batches: Vec<AckBatch>,
    },
    Lock {
        m: usize,
        txn: usize,
        batches: Vec<AckBatch>,
    },
    Commit {
        txn: usize,
    },
    Abort {
        txn: usize,
    },
    /// Advance the clock, then expire locks.
    Expire {
        advance_ms: u64,
    },
    ReleaseMember {
        m: usize,
    },
    SetStartOffset {
        offset: i64,
    },
    /// Retention or DeleteRecords moved the log start.
    MoveLogStart {
        offset: i64,
    },
    Restart,
}

#[derive(Clone, Debug)]
struct World {
    p: SharePartition,
    o: Oracle,
    /// The journal's view: the replay of every delta taken so far.
    journal: ShareSnapshot,
    now: u64,
}

impl World {
    fn new(config: ShareConfig, start: i64) -> World {
        let mut p = SharePartition::new(config, start);
        let mut journal = ShareSnapshot {
            spso: 0,
            runs: vec![],
        };
        journal
            .apply_delta(&p.take_delta().expect("initial reset"))
            .unwrap();
        World {
            p,
            o: Oracle::new(config, start),
            journal,
            now: 0,
        }
    }

    fn apply(&mut self, op: &Op) {
        let now = self.now;
        match op {
            Op::Acquire { m, log_end, max } => {
                let got = self.p.acquire(MEMBERS[*m], *log_end, *max, now);
                let mut flat = Vec::new();
                for r in &got {
                    assert!(r.first <= r.last);
                    flat.extend((r.first..=r.last).map(|o| (o, r.delivery_count)));
                }
                for w in got.windows(2) {
                    let adjacent_same =
                        w[0].last + 1 == w[1].first && w[0].delivery_count == w[1].delivery_count;
                    assert!(!adjacent_same, "acquired ranges not merged: {got:?}");
                }
                assert_eq!(flat, self.o.acquire(*m, *log_end, *max, now), "{op:?}");
            }
            Op::Ack { m, batches } => {
                let got = self.p.acknowledge(MEMBERS[*m], batches, now);
                let want = self.o.acknowledge(*m, batches, now);
                match (got, want) {
                    (Ok(c), Ok(n)) => {
                        assert_eq!(c.acknowledged + c.archived + c.released + c.renewed, n)
                    }
                    (Err(e), Err(code)) => assert_eq!(e.code(), code, "{op:?}: {e}"),
                    (got, want) => panic!("{op:?}: got {got:?}, oracle {want:?}"),
                }
            }
            Op::Lock { m, txn, batches } => {
                let got = self
                    .p
                    .lock(MEMBERS[*m], TXNS[*txn], batches)
                    .map_err(|e| e.code());
                assert_eq!(got, self.o.lock(*m, *txn, batches), "{op:?}");
            }
            Op::Commit { txn } => {
                let c = self.p.commit(TXNS[*txn]);
                assert_eq!((c.acknowledged, c.archived), self.o.commit(*txn));
            }
            Op::Abort { txn } => assert_eq!(self.p.abort(TXNS[*txn]), self.o.abort(*txn)),
            Op::Expire { advance_ms } => {
                self.now += advance_ms;
                assert_eq!(self.p.expire_locks(self.now), self.o.expire(self.now));
            }
            Op::ReleaseMember { m } => {
                assert_eq!(
                    self.p.release_member(MEMBERS[*m]),
                    self.o.release_member(*m)
                );
            }
            Op::SetStartOffset { offset } => {
                let got = self.p.set_start_offset(*offset).map_err(|e| e.code());
                assert_eq!(got, self.o.set_start_offset(*offset));
            }
            Op::MoveLogStart { offset } => {
                assert_eq!(
                    self.p.move_log_start(*offset),
                    self.o.move_log_start(*offset)
                );
            }
            Op::Restart => {
                assert_eq!(
                    self.journal,
                    self.p.snapshot(),
                    "journal replay before restart"
                );
                let log_start = self.p.log_start();
                self.p = SharePartition::from_snapshot(*self.p.config(), &self.journal).unwrap();
                // The shard re-applies the log's start offset (not persisted with the state).
                self.p.move_log_start(log_start);
                self.o.restart();
            }
        }
        self.check(op);
    }

    fn check(&mut self, op: &Op) {
        self.p.check_invariants();
        assert_eq!(
            (self.p.spso(), self.p.speo()),
            (self.o.spso, self.o.next - 1),
            "after {op:?}"
        );
        let hi = self.o.next.max(self.o.spso) + 2;
        for off in (self.o.spso - 2).max(0)..hi {
            let got = self.p.record(off);
            if off < self.o.spso || off >= self.o.next {
                assert!(
                    got.is_none(),
                    "offset {off} outside the window after {op:?}"
                );
                continue;
            }
            let got = got.unwrap_or_else(|| panic!("offset {off} missing after {op:?}"));
            let want = self.o.rec(off);
            assert_eq!(
                got.delivery_count, want.delivery_count,
                "delivery count of {off} after {op:?}"
            );
            match (got.state, want.state) {
                (RecordState::Available, OState::Available)
                | (RecordState::Acknowledged, OState::Acknowledged)
                | (RecordState::Archived, OState::Archived) => {
                    assert!(got.member.is_none() && got.txn.is_none());
                }
                (
                    RecordState::Acquired,
                    OState::Acquired {
                        member,
                        deadline_ms,
                    },
                ) => {
                    assert_eq!(got.member, Some(MEMBERS[member]), "owner of {off}");
                    assert_eq!(got.lock_deadline_ms, Some(deadline_ms), "deadline of {off}");
                }
                (RecordState::Locked { outcome, .. }, OState::Locked { txn, accept }) => {
                    assert_eq!(got.txn, Some(TXNS[txn]), "txn of {off}");
                    assert_eq!(outcome == LockOutcome::Accept, accept, "outcome of {off}");
                }
                (g, w) => panic!("offset {off}: partition {g}, oracle {w:?} after {op:?}"),
            }
        }
        for (t, name) in TXNS.iter().enumerate() {
            let want = (self.o.spso..self.o.next)
                .filter(|&o| matches!(self.o.rec(o).state, OState::Locked { txn, .. } if txn == t))
                .count() as u64;
            assert_eq!(self.p.locked_count(name), want);
            let ranged: u64 = self
                .p
                .locked_ranges(name)
                .iter()
                .map(|r| (r.last - r.first + 1) as u64)
                .sum();
            assert_eq!(ranged, want);
        }
        // The journal: take what changed, replay it, compare with the whole durable view.
        if let Some(delta) = self.p.take_delta() {
            self.journal.apply_delta(&delta).expect("delta applies");
        }
        self.journal.validate().unwrap();
        assert_eq!(
            self.journal,
            self.p.snapshot(),
            "snapshot + deltas after {op:?}"
        );
        assert!(!self.p.has_delta());
    }
}

// ---------------------------------------------------------------------------------------
// Random sequences.

struct SeedOnPanic(u64);

impl Drop for SeedOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "share_model failed with seed {} (replay: LOCKSTEP_SEED={})",
                self.0, self.0
            );
        }
    }
}

fn random_types(rng: &mut SmallRng, n: i64, pool: &[AcknowledgeType]) -> Vec<AcknowledgeType> {
    if n > 1 && rng.gen_bool(0.3) {
        (0..n).map(|_| pool[rng.gen_range(0..pool.len())]).collect()
    } else {
        vec![pool[rng.gen_range(0..pool.len())]]
    }
}

/// 1-3 batches, mostly over offsets `m` holds, sometimes anywhere near the window.
fn random_batches(
    rng: &mut SmallRng,
    o: &Oracle,
    m: usize,
    pool: &[AcknowledgeType],
) -> Vec<AckBatch> {
    let held: Vec<i64> = (o.spso..o.next)
        .filter(|&x| matches!(o.rec(x).state, OState::Acquired { member, .. } if member == m))
        .collect();
    let mut batches = Vec::new();
    let count = rng.gen_range(1..=3);
    for _ in 0..count {
        let (first, last) = if !held.is_empty() && rng.gen_bool(0.8) {
            let first = held[rng.gen_range(0..held.len())];
            let mut last = first;
            while rng.gen_bool(0.7) && held.binary_search(&(last + 1)).is_ok() {
                last += 1;
            }
            (first, last)
        } else {
            let first = rng.gen_range((o.spso - 2).max(0)..=o.next + 1);
            (first, first + rng.gen_range(0..4))
        };
        batches.push(AckBatch {
            first,
            last,
            types: random_types(rng, last - first + 1, pool),
        });
    }
    if rng.gen_bool(0.9) {
        batches.sort_by_key(|b| b.first);
        batches.dedup_by(|b, a| b.first <= a.last);
    }
    if rng.gen_bool(0.02) {
        batches[0].types.push(AcknowledgeType::Accept); // wrong number of types
    }
    batches
}

fn random_op(rng: &mut SmallRng, w: &World, log_end: &mut i64) -> Op {
    let o = &w.o;
    let m = rng.gen_range(0..MEMBERS.len());
    let txn = rng.gen_range(0..TXNS.len());
    match rng.gen_range(0..100) {
        0..=24 => {
            if rng.gen_bool(0.5) {
                *log_end += rng.gen_range(0..8);
            }
            Op::Acquire {
                m,
                log_end: *log_end,
                max: rng.gen_range(0..12),
            }
        }
        25..=54 => {
            let pool = [
                AcknowledgeType::Gap,
                AcknowledgeType::Accept,
                AcknowledgeType::Release,
                AcknowledgeType::Reject,
                AcknowledgeType::Renew,
            ];
            Op::Ack {
                m,
                batches: random_batches(rng, o, m, &pool),
            }
        }
        55..=66 => {
            let pool = if rng.gen_bool(0.9) {
                vec![
                    AcknowledgeType::Accept,
                    AcknowledgeType::Reject,
                    AcknowledgeType::Gap,
                ]
            } else {
                vec![AcknowledgeType::Accept, AcknowledgeType::Release]
            };
            Op::Lock {
                m,
                txn,
                batches: random_batches(rng, o, m, &pool),
            }
        }
        67..=71 => Op::Commit { txn },
        72..=76 => Op::Abort { txn },
        77..=86 => Op::Expire {
            advance_ms: rng.gen_range(0..=w.p.config().record_lock_duration_ms),
        },
        87..=91 => Op::ReleaseMember { m },
        92..=93 => {
            let offset = rng.gen_range(0..=*log_end + 2);
            Op::SetStartOffset { offset }
        }
        94..=95 => {
            let offset = rng.gen_range(0..=*log_end + 2);
            Op::MoveLogStart { offset }
        }
        _ => Op::Restart,
    }
}

fn run_seed(seed: u64, ops: usize) {
    let _guard = SeedOnPanic(seed);
    let mut rng = SmallRng::seed_from_u64(seed);
    let config = ShareConfig {
        record_lock_duration_ms: 1_000,
        delivery_count_limit: rng.gen_range(2..=6),
        partition_max_record_locks: rng.gen_range(1..=40),
    };
    let start = rng.gen_range(0..5);
    let mut w = World::new(config, start);
    let mut log_end = start + rng.gen_range(0..10);
    for _ in 0..ops {
        let op = random_op(&mut rng, &w, &mut log_end);
        if let Op::SetStartOffset { offset } | Op::MoveLogStart { offset } = op {
            log_end = log_end.max(offset);
        }
        w.apply(&op);
    }
}

#[test]
fn random_sequences() {
    if let Ok(seed) = std::env::var("LOCKSTEP_SEED") {
        run_seed(seed.parse().expect("LOCKSTEP_SEED is a u64"), 2_000);
        return;
    }
    let seeds: u64 = std::env::var("LOCKSTEP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for seed in 0..seeds {
        run_seed(seed, 400);
    }
}

// ---------------------------------------------------------------------------------------
// Exhaustive small cases.

fn alphabet() -> Vec<Op> {
    use AcknowledgeType::*;
    let mut ops = Vec::new();
    for m in 0..2 {
        for max in [1, 4] {
            ops.push(Op::Acquire { m, log_end: 4, max });
        }
        for (first, last) in [(0, 0), (1, 2), (0, 3)] {
            for t in [Accept, Release, Reject] {
                ops.push(Op::Ack {
                    m,
                    batches: vec![AckBatch::new(first, last, t)],
                });
            }
        }
        ops.push(Op::ReleaseMember { m });
    }
    ops.push(Op::Ack {
        m: 0,
        batches: vec![AckBatch {
            first: 0,
            last: 3,
            types: vec![Accept, Release, Gap, Renew],
        }],
    });
    ops.push(Op::Lock {
        m: 0,
        txn: 0,
        batches: vec![AckBatch::new(0, 1, Accept)],
    });
    ops.push(Op::Lock {
        m: 1,
        txn: 0,
        batches: vec![AckBatch {
            first: 2,
            last: 3,
            types: vec![Reject, Accept],
        }],
    });
    ops.push(Op::Commit { txn: 0 });
    ops.push(Op::Abort { txn: 0 });
    ops.push(Op::Expire { advance_ms: 1_000 });
    ops.push(Op::Restart);
    ops
}

fn explore(w: &World, ops: &[Op], depth: usize, path: &mut Vec<usize>, visited: &mut u64) {
    if depth == 0 {
        return;
    }
    for (i, op) in ops.iter().enumerate() {
        path.push(i);
        let mut next = w.clone();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| next.apply(op)));
        if let Err(panic) = result {
            let seq: Vec<&Op> = path.iter().map(|&k| &ops[k]).collect();
            eprintln!("exhaustive case failed: {seq:#?}");
            std::panic::resume_unwind(panic);
        }
        *visited += 1;
        explore(&next, ops, depth - 1, path, visited);
        path.pop();
    }
}

#[test]
fn exhaustive_small_cases() {
    let ops = alphabet();
    assert_eq!(ops.len(), 31);
    let config = ShareConfig {
        record_lock_duration_ms: 1_000,
        delivery_count_limit: 2,
        partition_max_record_locks: 3,
    };
    let root = World::new(config, 0);
    let mut visited = 0;
    explore(&root, &ops, 4, &mut Vec::new(), &mut visited);
    let n = ops.len() as u64;
    assert_eq!(visited, n + n * n + n * n * n + n * n * n * n);
}
