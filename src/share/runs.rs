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
//! - eager indexes, kept in step by [`RunMap::insert`] and [`RunMap::remove`] (the only
//!   way runs change): `available` holds the first offsets of AVAILABLE runs, `by_txn` those
//!   of LOCKED runs with each transaction's record count, and `acquired_records` /
//!   `member_records` count ACQUIRED offsets in total and per member;
//! - lazy indexes of ACQUIRED runs, **grants**: each acquisition (or renewal) of `[first,
//!   last]` by a member with a deadline is recorded once, by deadline and by member, and is
//!   not updated when runs split or merge. A grant only says where to look; its user checks
//!   each run it covers (still ACQUIRED? by that member? deadline passed?). Every ACQUIRED
//!   run is covered by the grants of its member and deadline, because a run only ever
//!   splits inside, or merges with a run of the same member and deadline. A grant is dropped
//!   when its deadline passes (lock expiry) or its member's grants are taken (member release,
//!   or the member holds nothing any more); a stale grant costs one look at its runs.
//!
//! So splitting an ACQUIRED run — the common case of an acknowledgement in the middle of an
//! acquired range — touches only the run map. The map is owned by one
//! [`super::SharePartition`], hence by the shard owning the partition.

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
        assert!(
            state != RecordState::Acquired,
            "an ACQUIRED run needs an owner"
        );
        Run {
            last,
            state,
            delivery_count,
            owner: None,
            deadline_ms: 0,
        }
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
        assert!(
            first >= 0 && first <= self.last,
            "run [{first}, {}]",
            self.last
        );
        let acquired = self.state == RecordState::Acquired;
        assert_eq!(
            acquired,
            self.owner.is_some(),
            "run at {first}: owner iff ACQUIRED"
        );
        assert!(
            acquired || self.deadline_ms == 0,
            "run at {first}: deadline iff ACQUIRED"
        );
        if acquired || matches!(self.state, RecordState::Locked { .. }) {
            assert!(
                self.delivery_count >= 1,
                "run at {first}: delivered records count >= 1"
            );
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

/// An acquisition (or renewal) of `[first, last]` by `member` until `deadline_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub member: MemberKey,
    pub first: i64,
    pub last: i64,
    pub deadline_ms: u64,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct RunMap {
    runs: BTreeMap<i64, Run>,
    available: BTreeSet<i64>,
    by_txn: BTreeMap<TxnKey, TxnRuns>,
    acquired_records: u64,
    member_records: BTreeMap<MemberKey, u64>,
    /// (deadline, first, member) → last.
    grants_by_deadline: BTreeMap<(u64, i64, MemberKey), i64>,
    /// member → (first, deadline) → last.
    grants_by_member: BTreeMap<MemberKey, BTreeMap<(i64, u64), i64>>,
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

    /// Runs overlapping `[first, last]`, last first (one range search; the last run yielded
    /// may start before `first`).
    pub fn overlapping_rev(&self, first: i64, last: i64) -> impl Iterator<Item = (i64, &Run)> + '_ {
        self.runs
            .range(..=last)
            .rev()
            .take_while(move |(_, r)| r.last >= first)
            .map(|(&f, r)| (f, r))
    }

    pub fn iter(&self) -> impl Iterator<Item = (i64, &Run)> + '_ {
        self.runs.iter().map(|(&f, r)| (f, r))
    }

    /// First offset of the first AVAILABLE run starting at or after `from`.
    pub fn next_available(&self, from: i64) -> Option<i64> {
        self.available.range(from..).next().copied()
    }

    /// Records a grant (an acquisition or renewal); merges with an equal-keyed one.
    pub fn add_grant(&mut self, grant: Grant) {
        assert!(grant.first <= grant.last);
        let key = (grant.deadline_ms, grant.first, grant.member);
        let last = self.grants_by_deadline.entry(key).or_insert(grant.last);
        *last = (*last).max(grant.last);
        let by_member = self.grants_by_member.entry(grant.member).or_default();
        let last = by_member
            .entry((grant.first, grant.deadline_ms))
            .or_insert(grant.last);
        *last = (*last).max(grant.last);
    }

    /// Removes and returns the grant with the earliest deadline if it is at or before `now_ms`.
    pub fn pop_due_grant(&mut self, now_ms: u64) -> Option<Grant> {
        let (&(deadline_ms, first, member), &last) = self.grants_by_deadline.first_key_value()?;
        if deadline_ms > now_ms {
            return None;
        }
        self.grants_by_deadline
            .remove(&(deadline_ms, first, member));
        if let Some(by_member) = self.grants_by_member.get_mut(&member) {
            by_member.remove(&(first, deadline_ms));
            if by_member.is_empty() {
                self.grants_by_member.remove(&member);
            }
        }
        Some(Grant {
            member,
            first,
            last,
            deadline_ms,
        })
    }

    /// Removes and returns `member`'s grants as `[first, last]` ranges (their deadline
    /// entries stay and are checked when they fire).
    pub fn take_member_grants(&mut self, member: MemberKey) -> Vec<(i64, i64)> {
        self.grants_by_member
            .remove(&member)
            .map(|g| {
                g.into_iter()
                    .map(|((first, _), last)| (first, last))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `member` holds any ACQUIRED record.
    pub fn holds_any(&self, member: MemberKey) -> bool {
        self.member_records.contains_key(&member)
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
        // The run with the greatest first offset at or before `run.last` must end before
        // `first` (one lookup checks both neighbours).
        if let Some((&pf, prev)) = self.runs.range(..=run.last).next_back() {
            assert!(
                pf < first && prev.last < first,
                "run [{first}, {}] overlaps run [{pf}, {}]",
                run.last,
                prev.last
            );
        }
        self.put(first, run);
    }

    /// Adds a piece of a run just removed from `[hole_first, hole_last]`: inside the hole
    /// it cannot overlap any run but the other pieces, which the caller carves disjoint.
    pub fn insert_in_hole(&mut self, hole_first: i64, hole_last: i64, first: i64, run: Run) {
        assert!(
            hole_first <= first && run.last <= hole_last,
            "piece outside its hole"
        );
        self.put(first, run);
    }

    fn put(&mut self, first: i64, run: Run) {
        run.check_shape(first);
        match run.state {
            RecordState::Available => {
                let fresh = self.available.insert(first);
                assert!(fresh);
            }
            RecordState::Acquired => {
                let owner = run.owner.expect("checked by check_shape");
                let n = span(first, run.last);
                *self.member_records.entry(owner).or_insert(0) += n;
                self.acquired_records += n;
            }
            RecordState::Locked { txn, .. } => {
                let entry = self.by_txn.entry(txn).or_default();
                assert!(entry.firsts.insert(first));
                entry.records += span(first, run.last);
            }
            RecordState::Acknowledged | RecordState::Archived => {}
        }
        let replaced = self.runs.insert(first, run);
        assert!(replaced.is_none(), "a run already starts at {first}");
    }

    /// Removes the run starting at `first`; there must be one.
    pub fn remove(&mut self, first: i64) -> Run {
        let run = self
            .runs
            .remove(&first)
            .expect("no run starts at this offset");
        match run.state {
            RecordState::Available => assert!(self.available.remove(&first)),
            RecordState::Acquired => {
                let owner = run.owner.expect("ACQUIRED run has an owner");
                let n = span(first, run.last);
                let held = self.member_records.get_mut(&owner).expect("member count");
                assert!(*held >= n && self.acquired_records >= n);
                *held -= n;
                if *held == 0 {
                    self.member_records.remove(&owner);
                }
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

    /// Drops `member`'s grants once it holds nothing (its key may then be reused).
    pub fn forget_member(&mut self, member: MemberKey) {
        assert!(!self.holds_any(member));
        self.grants_by_member.remove(&member);
    }

    /// Makes `offset` the first offset of a run, splitting the run that spans it (if any).
    #[cfg(test)]
    pub fn split_at(&mut self, offset: i64) {
        let Some((first, run)) = self.containing(offset) else {
            return;
        };
        if first == offset {
            return;
        }
        let whole = self.remove(first);
        self.insert_in_hole(
            first,
            run.last,
            first,
            Run {
                last: offset - 1,
                ..whole
            },
        );
        self.insert_in_hole(
            first,
            run.last,
            offset,
            Run {
                last: run.last,
                ..whole
            },
        );
    }

    /// The runs overlapping `[first, last]`, copied out (one range query).
    pub fn overlapping_vec(&self, first: i64, last: i64) -> Vec<(i64, Run)> {
        let mut runs: Vec<(i64, Run)> = self
            .overlapping_rev(first, last)
            .map(|(f, r)| (f, *r))
            .collect();
        runs.reverse();
        runs
    }

    /// First offset of the first run starting in `[from, last]`.
    pub fn next_first_in(&self, from: i64, last: i64) -> Option<i64> {
        if from > last {
            return None;
        }
        self.runs.range(from..=last).next().map(|(&f, _)| f)
    }

    /// Merges equal adjacent runs from the run before `first` to the run after `last`:
    /// one range scan, and map changes only where runs merge.
    pub fn coalesce(&mut self, first: i64, last: i64) {
        let start = match self.runs.range(..first).next_back() {
            Some((&f, _)) => f,
            None => first,
        };
        let end = last.saturating_add(1);
        // Groups of two or more equal adjacent runs, as (first, last) of the merged run.
        let mut merges: Vec<(i64, i64)> = Vec::new();
        let mut group: Option<(i64, Run, bool)> = None;
        for (&k, r) in self.runs.range(start..=end) {
            match &mut group {
                Some((_, g, grown)) if g.last + 1 == k && g.same_attributes(r) => {
                    g.last = r.last;
                    *grown = true;
                }
                _ => {
                    if let Some((gk, g, true)) = group {
                        merges.push((gk, g.last));
                    }
                    group = Some((k, *r, false));
                }
            }
        }
        if let Some((gk, g, true)) = group {
            merges.push((gk, g.last));
        }
        for (gk, glast) in merges {
            let head = self.remove(gk);
            let mut cursor = head.last + 1;
            while cursor <= glast {
                let piece = self.remove(cursor);
                assert!(piece.same_attributes(&head));
                cursor = piece.last + 1;
            }
            assert_eq!(cursor, glast + 1);
            self.insert_in_hole(
                gk,
                glast,
                gk,
                Run {
                    last: glast,
                    ..head
                },
            );
        }
    }

    /// An ACQUIRED run is covered by its member's grants with its deadline, in both indexes.
    fn check_granted(&self, first: i64, run: &Run) {
        let owner = run.owner.expect("ACQUIRED");
        let mut covered_to = first - 1;
        for (&(_, f, _), &l) in self
            .grants_by_deadline
            .range((run.deadline_ms, i64::MIN, owner)..=(run.deadline_ms, run.last, owner))
            .filter(|(&(_, _, m), _)| m == owner)
        {
            if f <= covered_to + 1 {
                covered_to = covered_to.max(l);
            }
        }
        assert!(
            covered_to >= run.last,
            "ACQUIRED run [{first}, {}] not covered by grants",
            run.last
        );
        let by_member = self
            .grants_by_member
            .get(&owner)
            .expect("holder has grants");
        let mut covered_to = first - 1;
        for (&(f, d), &l) in by_member.range(..=(run.last, u64::MAX)) {
            if d == run.deadline_ms && f <= covered_to + 1 {
                covered_to = covered_to.max(l);
            }
        }
        assert!(
            covered_to >= run.last,
            "ACQUIRED run [{first}, {}] not in its member's grants",
            run.last
        );
    }

    /// Full consistency check (O(n)): every invariant of the module docs, with `window`
    /// `[spso, speo]` tiled exactly when it is not empty.
    pub fn check(&self, spso: i64, next_offset: i64) {
        let mut expect = spso;
        let mut prev: Option<&Run> = None;
        let mut available = BTreeSet::new();
        let mut members: BTreeMap<MemberKey, u64> = BTreeMap::new();
        let mut txns: BTreeMap<TxnKey, (BTreeSet<i64>, u64)> = BTreeMap::new();
        let mut acquired = 0;
        for (&first, run) in &self.runs {
            run.check_shape(first);
            assert_eq!(first, expect, "runs must tile the window without holes");
            if let Some(p) = prev {
                assert!(
                    !p.same_attributes(run),
                    "adjacent equal runs at {first} not coalesced"
                );
            }
            match run.state {
                RecordState::Available => {
                    available.insert(first);
                }
                RecordState::Acquired => {
                    let owner = run.owner.unwrap();
                    *members.entry(owner).or_default() += span(first, run.last);
                    acquired += span(first, run.last);
                    self.check_granted(first, run);
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
            assert!(
                !first.state.is_terminal(),
                "SPSO must have advanced over a terminal run"
            );
        }
        assert_eq!(available, self.available, "available index");
        assert_eq!(members, self.member_records, "member counts");
        assert_eq!(acquired, self.acquired_records, "acquired count");
        // Every member grant is also due by deadline, at least as wide (a stale deadline
        // entry of a forgotten member whose key was reused may have merged wider).
        for (member, grants) in &self.grants_by_member {
            assert!(!grants.is_empty());
            for (&(first, deadline_ms), &last) in grants {
                assert!(first <= last);
                let due = self.grants_by_deadline.get(&(deadline_ms, first, *member));
                assert!(
                    due.is_some_and(|&l| l >= last),
                    "member grant [{first}, {last}] is due"
                );
            }
        }
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
        let locked = RecordState::Locked {
            txn,
            outcome: super::super::LockOutcome::Accept,
        };
        m.insert(0, Run::acquired(9, 1, member, 500));
        m.add_grant(Grant {
            member,
            first: 0,
            last: 9,
            deadline_ms: 500,
        });
        m.insert(10, Run::new(14, locked, 1));
        m.insert(15, Run::acquired(19, 1, member, 700));
        m.add_grant(Grant {
            member,
            first: 15,
            last: 19,
            deadline_ms: 700,
        });
        m.check(0, 20);
        assert_eq!(m.acquired_records(), 15);
        assert!(m.holds_any(member));
        assert_eq!(m.locked_count(txn), 5);
        // Splitting an ACQUIRED run touches no grant: they still cover both pieces.
        m.split_at(5);
        assert_eq!(m.acquired_records(), 15);
        m.coalesce(0, 9);
        m.check(0, 20);
        assert_eq!(m.pop_due_grant(499), None);
        let due = m.pop_due_grant(500).unwrap();
        assert_eq!(
            due,
            Grant {
                member,
                first: 0,
                last: 9,
                deadline_ms: 500
            }
        );
        assert_eq!(m.take_member_grants(member), vec![(15, 19)]);
        let r = m.remove(10);
        assert_eq!(r.last, 14);
        assert_eq!(m.locked_count(txn), 0);
        assert_eq!(m.locking_txns().count(), 0);
    }

    #[test]
    fn equal_grants_merge_and_the_widest_range_wins() {
        let mut m = RunMap::default();
        let member = MemberKey(0);
        m.add_grant(Grant {
            member,
            first: 4,
            last: 6,
            deadline_ms: 9,
        });
        m.add_grant(Grant {
            member,
            first: 4,
            last: 8,
            deadline_ms: 9,
        });
        m.add_grant(Grant {
            member,
            first: 4,
            last: 5,
            deadline_ms: 9,
        });
        assert_eq!(
            m.pop_due_grant(9),
            Some(Grant {
                member,
                first: 4,
                last: 8,
                deadline_ms: 9
            })
        );
        assert_eq!(m.pop_due_grant(u64::MAX), None);
        assert!(
            m.take_member_grants(member).is_empty(),
            "popping removed the member's copy"
        );
    }

    #[test]
    #[should_panic(expected = "not covered by grants")]
    fn an_acquired_run_without_a_grant_fails_the_check() {
        let mut m = RunMap::default();
        m.insert(0, Run::acquired(3, 1, MemberKey(0), 10));
        m.check(0, 4);
    }

    #[test]
    #[should_panic(expected = "overlaps")]
    fn overlapping_insert_is_a_bug() {
        let mut m = RunMap::default();
        m.insert(0, avail(9));
        m.insert(5, avail(12));
    }
}
