//! Runs: disjoint, coalesced offset intervals with one state each, plus the side indexes
//! that let lock expiry, member release, transaction commit/abort and acquisition touch only
//! the runs they change.
//!
//! Invariants (checked by [`RunMap::check`], which the tests call after every operation):
//! - runs are disjoint and sorted (the map key is a run's first offset, `first <= last`);
//! - a run is ACQUIRED iff it has an owner; only ACQUIRED runs have a lock deadline;
//! - no two adjacent runs (`a.last + 1 == b.first`) have equal attributes — they would have
//!   been coalesced — *after* each public operation of the share partition (callers coalesce
//!   the region they touched);
//! - every index holds exactly the runs it describes: `available` the first offsets of
//!   AVAILABLE runs, `by_deadline` / `by_member` those of ACQUIRED runs, `by_txn` those of
//!   LOCKED runs (with each transaction's record count), and `acquired_records` counts
//!   ACQUIRED offsets.
//!
//! Every insertion and removal goes through [`RunMap::insert`] and [`RunMap::remove`], which
//! keep the indexes eagerly in step (O(log n) each), so no index ever needs a full walk.
//! The map is owned by one [`super::SharePartition`], hence by the shard owning the partition.

use std::collections::{BTreeMap, BTreeSet};

use super::state::{RecordState, TxnKey};

/// Handle of a member inside one share partition (interned member id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct MemberKey(pub(crate) u32);

/// One run's attributes; its first offset is the map key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub last: i64,
    pub state: RecordState,
    pub delivery_count: u16,
    /// The member holding the acquisition lock; `Some` iff the state is ACQUIRED.
    pub owner: Option<MemberKey>,
    /// When the acquisition lock expires; 0 unless ACQUIRED.
    pub deadline_ms: u64,
}

impl Run {
    pub fn new(last: i64, state: RecordState, delivery_count: u16) -> Run {
        assert!(state != RecordState::Acquired, "an ACQUIRED run needs an owner");
        Run { last, state, delivery_count, owner: None, deadline_ms: 0 }
    }

    pub fn acquired(last: i64, delivery_count: u16, owner: MemberKey, deadline_ms: u64) -> Run {
        Run {
            last,
            state: RecordState::Acquired,
            delivery_count,
            owner: Some(owner),
            deadline_ms,
        }
    }

    /// Same attributes (everything but the extent): adjacent runs like this are one run.
    pub fn same_attributes(&self, other: &Run) -> bool {
        self.state == other.state
            && self.delivery_count == other.delivery_count
            && self.owner == other.owner
            && self.deadline_ms == other.deadline_ms
    }

    fn check_shape(&self, first: i64) {
        assert!(first >= 0 && first <= self.last, "run [{first}, {}]", self.last);
        let acquired = self.state == RecordState::Acquired;
        assert_eq!(acquired, self.owner.is_some(), "run at {first}: owner iff ACQUIRED");
        assert!(acquired || self.deadline_ms == 0, "run at {first}: deadline iff ACQUIRED");
        if acquired || matches!(self.state, RecordState::Locked { .. }) {
            assert!(self.delivery_count >= 1, "run at {first}: delivered records count >= 1");
        }
    }
}

/// Number of offsets in `[first, last]`.
pub(crate) fn span(first: i64, last: i64) -> u64 {
    debug_assert!(first <= last);
    (last - first) as u64 + 1
}

/// LOCKED runs of one transaction.
#[derive(Clone, Debug, Default)]
pub(crate) struct TxnRuns {
    pub firsts: BTreeSet<i64>,
    pub records: u64,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct RunMap {
    runs: BTreeMap<i64, Run>,
    available: BTreeSet<i64>,
    by_deadline: BTreeSet<(u64, i64)>,
    by_member: BTreeMap<MemberKey, BTreeSet<i64>>,
    by_txn: BTreeMap<TxnKey, TxnRuns>,
    acquired_records: u64,
}

impl RunMap {
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub fn clear(&mut self) {
        *self = RunMap::default();
    }

    pub fn acquired_records(&self) -> u64 {
        self.acquired_records
    }

    pub fn locked_records(&self) -> u64 {
        self.by_txn.values().map(|t| t.records).sum()
    }

    pub fn get(&self, first: i64) -> Option<&Run> {
        self.runs.get(&first)
    }

    pub fn first_run(&self) -> Option<(i64, Run)> {
        self.runs.first_key_value().map(|(&f, &r)| (f, r))
    }

    /// The run containing `offset`, if any.
    pub fn containing(&self, offset: i64) -> Option<(i64, Run)> {
        let (&first, run) = self.runs.range(..=offset).next_back()?;
        (run.last >= offset).then_some((first, *run))
    }

    /// Runs overlapping `[first, last]`, in order (the first may start before `first`).
    pub fn overlapping(&self, first: i64, last: i64) -> impl Iterator<Item = (i64, &Run)> + '_ {
        let start = match self.containing(first) {
            Some((f, _)) => f,
            None => first,
        };
        self.runs.range(start..=last).map(|(&f, r)| (f, r))
    }

    pub fn iter(&self) -> impl Iterator<Item = (i64, &Run)> + '_ {
        self.runs.iter().map(|(&f, r)| (f, r))
    }

    /// First offset of the first AVAILABLE run starting at or after `from`.
    pub fn next_available(&self, from: i64) -> Option<i64> {
        self.available.range(from..).next().copied()
    }

    /// ACQUIRED runs whose lock deadline is at or before `now_ms`, as (deadline, first).
    pub fn expired(&self, now_ms: u64) -> Vec<(u64, i64)> {
        self.by_deadline.range(..=(now_ms, i64::MAX)).copied().collect()
    }

    /// First offsets of the ACQUIRED runs `member` holds.
    pub fn held_by(&self, member: MemberKey) -> Vec<i64> {
        self.by_member
            .get(&member)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    pub fn holds_any(&self, member: MemberKey) -> bool {
        self.by_member.contains_key(&member)
    }

    /// First offsets of the runs LOCKED by `txn`.
    pub fn locked_by(&self, txn: TxnKey) -> Vec<i64> {
        self.by_txn
            .get(&txn)
            .map(|t| t.firsts.iter().copied().collect())
            .unwrap_or_default()
    }

    pub fn locked_count(&self, txn: TxnKey) -> u64 {
        self.by_txn.get(&txn).map_or(0, |t| t.records)
    }

    pub fn locking_txns(&self) -> impl Iterator<Item = TxnKey> + '_ {
        self.by_txn.keys().copied()
    }

    /// Adds a run; it must not overlap any other.
    pub fn insert(&mut self, first: i64, run: Run) {
        run.check_shape(first);
        if let Some((pf, prev)) = self.runs.range(..=first).next_back() {
            assert!(prev.last < first, "run [{first}, {}] overlaps run at {pf}", run.last);
        }
        if let Some((&nf, _)) = self.runs.range(first..).next() {
            assert!(run.last < nf, "run [{first}, {}] overlaps run at {nf}", run.last);
        }
        match run.state {
            RecordState::Available => {
                let fresh = self.available.insert(first);
                assert!(fresh);
            }
            RecordState::Acquired => {
                let owner = run.owner.expect("checked by check_shape");
                assert!(self.by_deadline.insert((run.deadline_ms, first)));
                assert!(self.by_member.entry(owner).or_default().insert(first));
                self.acquired_records += span(first, run.last);
            }
            RecordState::Locked { txn, .. } => {
                let entry = self.by_txn.entry(txn).or_default();
                assert!(entry.firsts.insert(first));
                entry.records += span(first, run.last);
            }
            RecordState::Acknowledged | RecordState::Archived => {}
        }
        let replaced = self.runs.insert(first, run);
        assert!(replaced.is_none());
    }

    /// Removes the run starting at `first`; there must be one.
    pub fn remove(&mut self, first: i64) -> Run {
        let run = self.runs.remove(&first).expect("no run starts at this offset");
        match run.state {
            RecordState::Available => assert!(self.available.remove(&first)),
            RecordState::Acquired => {
                let owner = run.owner.expect("ACQUIRED run has an owner");
                assert!(self.by_deadline.remove(&(run.deadline_ms, first)));
                let held = self.by_member.get_mut(&owner).expect("member index");
                assert!(held.remove(&first));
                if held.is_empty() {
                    self.by_member.remove(&owner);
                }
                let n = span(first, run.last);
                assert!(self.acquired_records >= n);
                self.acquired_records -= n;
            }
            RecordState::Locked { txn, .. } => {
                let entry = self.by_txn.get_mut(&txn).expect("txn index");
                assert!(entry.firsts.remove(&first));
                let n = span(first, run.last);
                assert!(entry.records >= n);
                entry.records -= n;
                if entry.firsts.is_empty() {
                    assert_eq!(entry.records, 0);
                    self.by_txn.remove(&txn);
                }
            }
            RecordState::Acknowledged | RecordState::Archived => {}
        }
        run
    }

    /// Makes `offset` the first offset of a run, splitting the run that spans it (if any).
    pub fn split_at(&mut self, offset: i64) {
        let Some((first, run)) = self.containing(offset) else { return };
        if first == offset {
            return;
        }
        let whole = self.remove(first);
        self.insert(first, Run { last: offset - 1, ..whole });
        self.insert(offset, Run { last: run.last, ..whole });
    }

    /// First offsets of the runs starting in `[first, last]`.
    pub fn firsts_in(&self, first: i64, last: i64) -> Vec<i64> {
        self.runs.range(first..=last).map(|(&f, _)| f).collect()
    }

    /// Merges equal adjacent runs from the run before `first` to the run after `last`.
    pub fn coalesce(&mut self, first: i64, last: i64) {
        let start = match self.runs.range(..first).next_back() {
            Some((&f, _)) => f,
            None => first,
        };
        let end = last.saturating_add(1);
        let firsts: Vec<i64> = self.runs.range(start..=end).map(|(&f, _)| f).collect();
        let mut current: Option<i64> = None;
        for next in firsts {
            let Some(cur) = current else {
                current = Some(next);
                continue;
            };
            let a = self.runs[&cur];
            let b = self.runs[&next];
            if a.last + 1 == next && a.same_attributes(&b) {
                self.remove(cur);
                self.remove(next);
                self.insert(cur, Run { last: b.last, ..a });
            } else {
                current = Some(next);
            }
        }
    }

    /// Full consistency check (O(n)): every invariant of the module docs, with `window`
    /// `[spso, speo]` tiled exactly when it is not empty.
    pub fn check(&self, spso: i64, next_offset: i64) {
        let mut expect = spso;
        let mut prev: Option<&Run> = None;
        let mut available = BTreeSet::new();
        let mut deadlines = BTreeSet::new();
        let mut members: BTreeMap<MemberKey, BTreeSet<i64>> = BTreeMap::new();
        let mut txns: BTreeMap<TxnKey, (BTreeSet<i64>, u64)> = BTreeMap::new();
        let mut acquired = 0;
        for (&first, run) in &self.runs {
            run.check_shape(first);
            assert_eq!(first, expect, "runs must tile the window without holes");
            if let Some(p) = prev {
                assert!(!p.same_attributes(run), "adjacent equal runs at {first} not coalesced");
            }
            match run.state {
                RecordState::Available => {
                    available.insert(first);
                }
                RecordState::Acquired => {
                    deadlines.insert((run.deadline_ms, first));
                    members.entry(run.owner.unwrap()).or_default().insert(first);
                    acquired += span(first, run.last);
                }
                RecordState::Locked { txn, .. } => {
                    let e = txns.entry(txn).or_default();
                    e.0.insert(first);
                    e.1 += span(first, run.last);
                }
                _ => {}
            }
            expect = run.last + 1;
            prev = Some(run);
        }
        assert_eq!(expect, next_offset, "runs must end at SPEO");
        if let Some((_, first)) = self.runs.first_key_value() {
            assert!(!first.state.is_terminal(), "SPSO must have advanced over a terminal run");
        }
        assert_eq!(available, self.available, "available index");
        assert_eq!(deadlines, self.by_deadline, "deadline index");
        assert_eq!(members, self.by_member, "member index");
        assert_eq!(acquired, self.acquired_records, "acquired count");
        let indexed: BTreeMap<TxnKey, (BTreeSet<i64>, u64)> = self
            .by_txn
            .iter()
            .map(|(&k, v)| (k, (v.firsts.clone(), v.records)))
            .collect();
        assert_eq!(txns, indexed, "txn index");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avail(last: i64) -> Run {
        Run::new(last, RecordState::Available, 0)
    }

    #[test]
    fn split_and_coalesce_restore_one_run() {
        let mut m = RunMap::default();
        m.insert(0, avail(99));
        m.split_at(10);
        m.split_at(20);
        m.split_at(20); // already a boundary
        m.split_at(500); // outside any run
        assert_eq!(m.len(), 3);
        assert_eq!(m.next_available(5), Some(10));
        m.coalesce(10, 19);
        assert_eq!(m.len(), 1);
        m.check(0, 100);
    }

    #[test]
    fn indexes_follow_inserts_and_removes() {
        let mut m = RunMap::default();
        let member = MemberKey(3);
        let txn = TxnKey(1);
        m.insert(0, Run::acquired(9, 1, member, 500));
        m.insert(10, Run::new(14, RecordState::Locked { txn, outcome: super::super::LockOutcome::Accept }, 1));
        m.insert(15, Run::acquired(19, 1, member, 700));
        m.check(0, 20);
        assert_eq!(m.acquired_records(), 15);
        assert_eq!(m.expired(500), vec![(500, 0)]);
        assert_eq!(m.expired(499), vec![]);
        assert_eq!(m.held_by(member), vec![0, 15]);
        assert_eq!(m.locked_count(txn), 5);
        m.split_at(5);
        assert_eq!(m.held_by(member), vec![0, 5, 15]);
        assert_eq!(m.acquired_records(), 15);
        m.coalesce(0, 9);
        m.check(0, 20);
        let r = m.remove(10);
        assert_eq!(r.last, 14);
        assert_eq!(m.locked_count(txn), 0);
        assert_eq!(m.locking_txns().count(), 0);
    }

    #[test]
    #[should_panic(expected = "overlaps")]
    fn overlapping_insert_is_a_bug() {
        let mut m = RunMap::default();
        m.insert(0, avail(9));
        m.insert(5, avail(12));
    }
}
