//! The durable view of a share partition: what the state journal persists, and how a
//! snapshot plus the deltas written after it replay to the current durable view.
//!
//! The durable view differs from the in-memory state in one way: **ACQUIRED never persists**.
//! An acquisition is invisible to the journal, so an ACQUIRED run with delivery count `n`
//! shows as AVAILABLE with `n - 1`, the state it had before it was acquired (after a restart
//! the acquisition is lost, as in Kafka; the delivery it made is not counted). Acquiring
//! therefore never dirties anything and costs the journal nothing. LOCKED runs persist with
//! their transaction id and outcome.
//!
//! Canonical form of a [`ShareSnapshot`] (checked by [`ShareSnapshot::validate`]):
//! runs sorted, disjoint, all at or above SPSO, adjacent equal runs coalesced, and no
//! AVAILABLE run with delivery count 0 — an offset at or above SPSO that no run covers is
//! AVAILABLE with delivery count 0 (never delivered), the same as an offset beyond SPEO.
//! SPEO of the durable view is therefore derived: the last offset of the last run.
//!
//! A [`ShareDelta`] overwrites whole ranges: its runs cover every offset whose durable state
//! changed, AVAILABLE-with-0 included (an aborted first delivery goes back to it). `reset`
//! marks a delta that replaces everything (a new partition, or AlterShareGroupOffsets).
//! Replay: `snapshot.apply_delta(d)` for each delta in journal order.

use std::cmp::{max, min};

use super::error::ShareError;
use super::state::LockOutcome;

/// A record state as persisted (ACQUIRED cannot be represented).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DurableState {
    Available,
    Acknowledged,
    Archived,
    Locked { txn: String, outcome: LockOutcome },
}

impl DurableState {
    /// The state code, as [`super::RecordState::code`].
    pub fn code(&self) -> u8 {
        match self {
            DurableState::Available => 0,
            DurableState::Acknowledged => 2,
            DurableState::Archived => 4,
            DurableState::Locked { .. } => 8,
        }
    }
}

/// Kafka's "state batch" (first offset, last offset, state, delivery count), plus the
/// transaction and outcome of a LOCKED run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateRun {
    pub first: i64,
    pub last: i64,
    pub state: DurableState,
    pub delivery_count: u16,
}

impl StateRun {
    fn is_default(&self) -> bool {
        self.state == DurableState::Available && self.delivery_count == 0
    }

    fn same_attributes(&self, other: &StateRun) -> bool {
        self.state == other.state && self.delivery_count == other.delivery_count
    }
}

/// Appends `run` to sorted, disjoint `runs`, merging it into the last one when they touch
/// and are equal.
pub(crate) fn push_coalesced(runs: &mut Vec<StateRun>, run: StateRun) {
    if let Some(prev) = runs.last_mut() {
        assert!(prev.last < run.first, "runs must be pushed in order");
        if prev.last + 1 == run.first && prev.same_attributes(&run) {
            prev.last = run.last;
            return;
        }
    }
    runs.push(run);
}

/// The whole durable state of one share partition, in canonical form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareSnapshot {
    /// Share-partition start offset: every offset below it is done.
    pub spso: i64,
    pub runs: Vec<StateRun>,
}

/// What changed in the durable view since the previous delta (or snapshot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareDelta {
    /// SPSO after the change.
    pub spso: i64,
    /// Replace the whole state (runs then are a canonical snapshot's) instead of overwriting.
    pub reset: bool,
    /// Sorted, disjoint; each covers offsets whose durable state is now the run's.
    pub runs: Vec<StateRun>,
}

impl ShareSnapshot {
    /// SPEO of the durable view (SPSO - 1 when nothing at or above SPSO has a state).
    pub fn speo(&self) -> i64 {
        self.runs.last().map_or(self.spso - 1, |r| r.last)
    }

    /// Checks the canonical form (module docs).
    pub fn validate(&self) -> Result<(), ShareError> {
        if self.spso < 0 {
            return Err(ShareError::corrupt(format!("negative SPSO {}", self.spso)));
        }
        validate_runs(&self.runs, self.spso)?;
        for (i, run) in self.runs.iter().enumerate() {
            if run.is_default() {
                return Err(ShareError::corrupt(format!(
                    "run [{}, {}] is AVAILABLE with delivery count 0 (not canonical)",
                    run.first, run.last
                )));
            }
            if i > 0 {
                let prev = &self.runs[i - 1];
                if prev.last + 1 == run.first && prev.same_attributes(run) {
                    return Err(ShareError::corrupt(format!(
                        "runs at {} and {} are equal and adjacent (not coalesced)",
                        prev.first, run.first
                    )));
                }
            }
        }
        Ok(())
    }

    /// Applies one delta (replay). On error the snapshot is unchanged.
    pub fn apply_delta(&mut self, delta: &ShareDelta) -> Result<(), ShareError> {
        if delta.spso < 0 {
            return Err(ShareError::corrupt(format!("negative SPSO {}", delta.spso)));
        }
        validate_runs(&delta.runs, delta.spso)?;
        if delta.reset {
            let next = canonical(delta.spso, delta.runs.iter().cloned());
            self.spso = delta.spso;
            self.runs = next;
            return Ok(());
        }
        if delta.spso < self.spso {
            return Err(ShareError::corrupt(format!(
                "delta moves SPSO back from {} to {} without a reset",
                self.spso, delta.spso
            )));
        }
        let merged = overlay(&self.runs, &delta.runs);
        self.runs = canonical(delta.spso, merged.into_iter());
        self.spso = delta.spso;
        debug_assert!(self.validate().is_ok());
        Ok(())
    }
}

/// Sorted, disjoint, `first <= last`, nothing below `spso`; LOCKED runs were delivered.
fn validate_runs(runs: &[StateRun], spso: i64) -> Result<(), ShareError> {
    let mut floor = spso;
    for run in runs {
        if run.first < floor || run.first > run.last {
            return Err(ShareError::corrupt(format!(
                "run [{}, {}] is empty, unsorted, overlapping or below SPSO {spso}",
                run.first, run.last
            )));
        }
        if matches!(run.state, DurableState::Locked { .. }) && run.delivery_count == 0 {
            return Err(ShareError::corrupt(format!(
                "LOCKED run [{}, {}] has delivery count 0",
                run.first, run.last
            )));
        }
        floor = run
            .last
            .checked_add(1)
            .ok_or_else(|| ShareError::corrupt("offset overflow"))?;
    }
    Ok(())
}

/// `base` with every range `top` covers replaced by `top`'s runs. Both sorted and disjoint.
fn overlay(base: &[StateRun], top: &[StateRun]) -> Vec<StateRun> {
    let mut out = Vec::with_capacity(base.len() + top.len());
    let mut t = 0;
    for b in base {
        // Emit the top runs that start before this base run ends, and the parts of the base
        // run they leave uncovered.
        let mut cursor = b.first;
        while cursor <= b.last {
            // Top runs entirely before the cursor are already emitted.
            while t < top.len() && top[t].last < cursor {
                t += 1;
            }
            match top.get(t) {
                Some(top_run) if top_run.first <= b.last => {
                    if top_run.first > cursor {
                        out.push(StateRun {
                            first: cursor,
                            last: top_run.first - 1,
                            ..b.clone()
                        });
                    }
                    cursor = top_run.last.saturating_add(1);
                }
                _ => {
                    out.push(StateRun {
                        first: cursor,
                        ..b.clone()
                    });
                    cursor = b.last + 1;
                }
            }
        }
    }
    out.extend(top.iter().cloned());
    out.sort_by_key(|r| r.first);
    out
}

/// Clips to `spso`, drops AVAILABLE-with-0 runs, coalesces.
fn canonical(spso: i64, runs: impl Iterator<Item = StateRun>) -> Vec<StateRun> {
    let mut out = Vec::new();
    for mut run in runs {
        if run.last < spso || run.is_default() {
            continue;
        }
        run.first = max(run.first, spso);
        push_coalesced(&mut out, run);
    }
    out
}

/// Offset ranges whose durable state changed since the last delta: a sorted set of
/// disjoint, non-adjacent intervals (adjacent ones are merged on insert).
#[derive(Clone, Debug, Default)]
pub(crate) struct DirtyRanges {
    ranges: std::collections::BTreeMap<i64, i64>,
}

impl DirtyRanges {
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn clear(&mut self) {
        self.ranges.clear();
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Adds `[first, last]`, merging every range it overlaps or touches. O(log d + merged).
    pub fn insert(&mut self, first: i64, last: i64) {
        assert!(first <= last);
        let mut lo = first;
        let mut hi = last;
        loop {
            let candidate = self
                .ranges
                .range(..=hi.saturating_add(1))
                .next_back()
                .map(|(&f, &l)| (f, l));
            match candidate {
                Some((f, l)) if l.saturating_add(1) >= lo => {
                    self.ranges.remove(&f);
                    lo = min(lo, f);
                    hi = max(hi, l);
                }
                _ => break,
            }
        }
        self.ranges.insert(lo, hi);
    }

    pub fn iter(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ranges.iter().map(|(&f, &l)| (f, l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(first: i64, last: i64, state: DurableState, dc: u16) -> StateRun {
        StateRun {
            first,
            last,
            state,
            delivery_count: dc,
        }
    }

    #[test]
    fn dirty_ranges_merge_overlapping_and_adjacent() {
        let mut d = DirtyRanges::default();
        d.insert(10, 12);
        d.insert(20, 25);
        d.insert(13, 14); // adjacent to [10, 12]
        assert_eq!(d.iter().collect::<Vec<_>>(), vec![(10, 14), (20, 25)]);
        d.insert(0, 30);
        assert_eq!(d.iter().collect::<Vec<_>>(), vec![(0, 30)]);
        d.insert(40, 40);
        d.insert(32, 32);
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn delta_overwrites_ranges_and_canonicalises() {
        let mut s = ShareSnapshot {
            spso: 0,
            runs: vec![
                run(0, 9, DurableState::Available, 1),
                run(10, 19, DurableState::Acknowledged, 1),
            ],
        };
        s.validate().unwrap();
        let d = ShareDelta {
            spso: 0,
            reset: false,
            runs: vec![
                run(5, 9, DurableState::Acknowledged, 1),
                run(20, 22, DurableState::Available, 0),
            ],
        };
        s.apply_delta(&d).unwrap();
        assert_eq!(
            s.runs,
            vec![
                run(0, 4, DurableState::Available, 1),
                run(5, 19, DurableState::Acknowledged, 1)
            ]
        );
        assert_eq!(s.speo(), 19);
        let d = ShareDelta {
            spso: 3,
            reset: false,
            runs: vec![run(3, 4, DurableState::Available, 0)],
        };
        s.apply_delta(&d).unwrap();
        assert_eq!(s.runs, vec![run(5, 19, DurableState::Acknowledged, 1)]);
        s.validate().unwrap();
    }

    #[test]
    fn corrupt_deltas_are_refused_and_change_nothing() {
        let mut s = ShareSnapshot {
            spso: 10,
            runs: vec![],
        };
        let back = ShareDelta {
            spso: 5,
            reset: false,
            runs: vec![],
        };
        assert!(matches!(
            s.apply_delta(&back),
            Err(ShareError::CorruptState { .. })
        ));
        let overlapping = ShareDelta {
            spso: 10,
            reset: false,
            runs: vec![
                run(10, 12, DurableState::Archived, 1),
                run(12, 13, DurableState::Archived, 2),
            ],
        };
        assert!(s.apply_delta(&overlapping).is_err());
        assert_eq!(
            s,
            ShareSnapshot {
                spso: 10,
                runs: vec![]
            }
        );
        // A reset may move SPSO back.
        s.apply_delta(&ShareDelta {
            spso: 2,
            reset: true,
            runs: vec![],
        })
        .unwrap();
        assert_eq!(s.spso, 2);
    }

    #[test]
    fn non_canonical_snapshots_fail_validation() {
        let zero = ShareSnapshot {
            spso: 0,
            runs: vec![run(0, 1, DurableState::Available, 0)],
        };
        assert!(zero.validate().is_err());
        let uncoalesced = ShareSnapshot {
            spso: 0,
            runs: vec![
                run(0, 1, DurableState::Archived, 1),
                run(2, 3, DurableState::Archived, 1),
            ],
        };
        assert!(uncoalesced.validate().is_err());
        let locked0 = ShareSnapshot {
            spso: 0,
            runs: vec![run(
                0,
                1,
                DurableState::Locked {
                    txn: "g-p-1".into(),
                    outcome: LockOutcome::Accept,
                },
                0,
            )],
        };
        assert!(locked0.validate().is_err());
    }
}
