//! Group commit, I/O-free: which flush is in flight, what it will make durable, who waits.
//!
//! Two pieces, used by the partition log and the state journal alike:
//! - [`GroupCommit`]: the flush state of one durable sequence (offsets of a partition log,
//!   sequence numbers of a journal). Positions are *exclusive ends*: `durable_end` = 10 means
//!   everything below 10 is durable. At most one flush is in flight; a flush covers everything
//!   written before it began (or a prefix of it, [`GroupCommit::begin_prefix`]); writes that
//!   arrive while it is in flight are covered by the next one (that is the group commit). A
//!   failed flush poisons the state for good.
//! - [`CommitWaiters`]: the callers parked until the durable end reaches their target (the
//!   runtime's produce requests with `acks=all`, journal writers waiting for a prepare).
//!
//! How a runtime drives them (the log embeds a `GroupCommit`; the runtime owns the waiters):
//! ```text
//! append → target = last_offset + 1
//!   if target <= log.durable_end_offset() { answer } else { waiters.park(target, reply) }
//!   if let Some(ticket) = log.begin_flush() { spawn fdatasync(ticket.files, ticket.dirs) }
//! on fdatasync done(result):
//!   log.complete_flush(ticket, result)
//!   Ok  → for reply in waiters.release(log.durable_end_offset()) { answer reply }
//!         if let Some(next) = log.begin_flush() { spawn it }      // the group that queued up
//!   Err → for reply in waiters.drain() { answer with the error }  // the log is poisoned
//! ```
//!
//! Invariants (asserted): `durable_end <= written_end`, `in_flight target <= written_end`; all
//! only grow; a completion must name the flush in flight.

use std::collections::BTreeMap;

/// The flush state of one durable sequence. See the module docs.
#[derive(Clone, Debug)]
pub struct GroupCommit {
    written_end: u64,
    durable_end: u64,
    in_flight: Option<InFlight>,
    next_flush_id: u64,
    poisoned: Option<String>,
}

/// A flush handed out by [`GroupCommit::begin`] and not completed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// Identifies the flush; a completion must name it.
    pub id: u64,
    /// The durable end once this flush succeeds.
    pub target: u64,
}

impl GroupCommit {
    /// A sequence whose first `durable_end` positions are written and durable.
    pub fn new(durable_end: u64) -> GroupCommit {
        GroupCommit {
            written_end: durable_end,
            durable_end,
            in_flight: None,
            next_flush_id: 1,
            poisoned: None,
        }
    }

    /// Records that everything below `end` has been written (not yet durable).
    pub fn written(&mut self, end: u64) {
        assert!(
            end >= self.written_end,
            "written end moves back: {} -> {end}",
            self.written_end
        );
        self.written_end = end;
    }

    pub fn written_end(&self) -> u64 {
        self.written_end
    }

    pub fn durable_end(&self) -> u64 {
        self.durable_end
    }

    pub fn in_flight(&self) -> Option<InFlight> {
        self.in_flight
    }

    /// The error text of the failed flush that poisoned this sequence.
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// True if written data is not durable and no flush is in flight to cover it.
    pub fn needs_flush(&self) -> bool {
        self.poisoned.is_none() && self.in_flight.is_none() && self.written_end > self.durable_end
    }

    /// Starts a flush of everything written so far, if any is unsynced (or `force`, when the
    /// caller has other unsynced state to make durable) and none is in flight.
    pub fn begin(&mut self, force: bool) -> Option<InFlight> {
        if !force && self.written_end == self.durable_end {
            return None;
        }
        self.begin_to(self.written_end)
    }

    /// Starts a flush of a prefix of what was written: everything below `target` (above the
    /// durable end, at most the written end), if none is in flight. The partition log uses it
    /// while tail writes are still landing past `target`.
    pub fn begin_prefix(&mut self, target: u64) -> Option<InFlight> {
        assert!(
            target > self.durable_end && target <= self.written_end,
            "a prefix flush covers new writes: {} < {target} <= {}",
            self.durable_end,
            self.written_end
        );
        self.begin_to(target)
    }

    fn begin_to(&mut self, target: u64) -> Option<InFlight> {
        if self.poisoned.is_some() || self.in_flight.is_some() {
            return None;
        }
        let flight = InFlight {
            id: self.next_flush_id,
            target,
        };
        self.next_flush_id += 1;
        self.in_flight = Some(flight);
        Some(flight)
    }

    /// Ends the flush in flight: on success its target becomes durable; on failure the
    /// sequence is poisoned with `result`'s text and nothing more becomes durable.
    pub fn complete(&mut self, id: u64, result: Result<(), String>) {
        let flight = self
            .in_flight
            .take()
            .expect("complete without a flush in flight");
        assert_eq!(flight.id, id, "completion names another flush");
        assert!(flight.target <= self.written_end);
        match result {
            // `max`: a synchronous sync (see `synced_everything`) may have overtaken the flight.
            Ok(()) => self.durable_end = self.durable_end.max(flight.target),
            Err(error) => {
                if self.poisoned.is_none() {
                    self.poisoned = Some(error);
                }
            }
        }
    }

    /// Poisons the sequence outside a flush (a failed write or a failed sync of a roll).
    pub fn poison(&mut self, error: String) {
        if self.poisoned.is_none() {
            self.poisoned = Some(error);
        }
    }

    /// Records that the caller made everything written durable itself, by a synchronous sync
    /// outside the flush protocol (a segment roll). A flush in flight stays in flight.
    pub fn synced_everything(&mut self) {
        assert!(self.poisoned.is_none(), "sync of a poisoned sequence");
        self.durable_end = self.written_end;
    }
}

/// Callers waiting for the durable end to reach their target, released in target order.
#[derive(Debug)]
pub struct CommitWaiters<W> {
    by_target: BTreeMap<u64, Vec<W>>,
    len: usize,
}

impl<W> Default for CommitWaiters<W> {
    fn default() -> Self {
        CommitWaiters {
            by_target: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<W> CommitWaiters<W> {
    pub fn new() -> CommitWaiters<W> {
        CommitWaiters::default()
    }

    /// Parks `waiter` until the durable end is at least `target`.
    pub fn park(&mut self, target: u64, waiter: W) {
        self.by_target.entry(target).or_default().push(waiter);
        self.len += 1;
    }

    /// Removes and returns every waiter whose target is `<= durable_end`, lowest target first
    /// (waiters with equal targets in the order they were parked).
    pub fn release(&mut self, durable_end: u64) -> Vec<W> {
        let rest = self.by_target.split_off(&(durable_end.saturating_add(1)));
        let done = std::mem::replace(&mut self.by_target, rest);
        let released: Vec<W> = done.into_values().flatten().collect();
        self.len -= released.len();
        released
    }

    /// Removes and returns every waiter (the sequence was poisoned: they get the error).
    pub fn drain(&mut self) -> Vec<W> {
        self.len = 0;
        std::mem::take(&mut self.by_target)
            .into_values()
            .flatten()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The highest target anyone waits for.
    pub fn max_target(&self) -> Option<u64> {
        self.by_target.keys().next_back().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_during_a_flush_share_the_next_one() {
        let mut gc = GroupCommit::new(0);
        let mut waiters = CommitWaiters::new();
        assert_eq!(gc.begin(false), None, "nothing written");
        gc.written(3);
        waiters.park(3, "a");
        let first = gc.begin(false).unwrap();
        assert_eq!(first.target, 3);
        // Writes arriving while the flush is in flight wait for the next one.
        gc.written(5);
        waiters.park(4, "b");
        gc.written(9);
        waiters.park(9, "c");
        assert_eq!(gc.begin(false), None, "one flush at a time");
        gc.complete(first.id, Ok(()));
        assert_eq!(gc.durable_end(), 3);
        assert_eq!(waiters.release(gc.durable_end()), vec!["a"]);
        let second = gc.begin(false).unwrap();
        assert_eq!(second.target, 9, "the second flush covers the whole group");
        gc.complete(second.id, Ok(()));
        assert_eq!(waiters.release(gc.durable_end()), vec!["b", "c"]);
        assert!(waiters.is_empty());
        assert!(!gc.needs_flush());
    }

    #[test]
    fn a_failed_flush_poisons_and_drains() {
        let mut gc = GroupCommit::new(10);
        let mut waiters = CommitWaiters::new();
        gc.written(12);
        waiters.park(12, 1);
        waiters.park(11, 2);
        let flight = gc.begin(false).unwrap();
        gc.complete(flight.id, Err("EIO".into()));
        assert_eq!(gc.durable_end(), 10);
        assert_eq!(gc.poisoned(), Some("EIO"));
        assert_eq!(
            gc.begin(true),
            None,
            "a poisoned sequence never flushes again"
        );
        assert_eq!(waiters.release(gc.durable_end()), Vec::<i32>::new());
        assert_eq!(waiters.drain(), vec![2, 1]);
        assert_eq!(waiters.len(), 0);
    }

    #[test]
    fn forced_flush_without_new_writes() {
        let mut gc = GroupCommit::new(4);
        let flight = gc.begin(true).unwrap();
        assert_eq!(flight.target, 4);
        gc.complete(flight.id, Ok(()));
        assert_eq!(gc.durable_end(), 4);
    }

    #[test]
    fn a_prefix_flush_covers_its_target_only() {
        let mut gc = GroupCommit::new(2);
        gc.written(9);
        let flight = gc.begin_prefix(5).unwrap();
        assert_eq!(gc.begin_prefix(7), None, "one flush at a time");
        gc.complete(flight.id, Ok(()));
        assert_eq!(gc.durable_end(), 5);
        assert!(gc.needs_flush(), "the rest is still to flush");
        let rest = gc.begin(false).unwrap();
        assert_eq!(rest.target, 9);
    }

    #[test]
    #[should_panic(expected = "a prefix flush covers new writes")]
    fn a_prefix_flush_of_nothing_new_is_a_bug() {
        let mut gc = GroupCommit::new(2);
        gc.written(9);
        gc.begin_prefix(2);
    }

    #[test]
    #[should_panic(expected = "completion names another flush")]
    fn completing_the_wrong_flush_is_a_bug() {
        let mut gc = GroupCommit::new(0);
        gc.written(1);
        let flight = gc.begin(false).unwrap();
        gc.complete(flight.id + 1, Ok(()));
    }

    /// Exhaustive over short schedules: the durable end never passes what was written before
    /// the flush began, and every waiter is released exactly when its target is durable.
    #[test]
    fn every_short_schedule_keeps_the_invariants() {
        // Operations: 0 = write one more, 1 = begin, 2 = complete ok, 3 = park a waiter at
        // the written end.
        for schedule in 0..4u32.pow(8) {
            let mut gc = GroupCommit::new(0);
            let mut waiters = CommitWaiters::new();
            let mut parked = Vec::new();
            let mut released = Vec::new();
            let mut code = schedule;
            for _ in 0..8 {
                match code % 4 {
                    0 => gc.written(gc.written_end() + 1),
                    1 => {
                        if let Some(f) = gc.begin(false) {
                            assert_eq!(f.target, gc.written_end());
                        }
                    }
                    2 => {
                        if let Some(f) = gc.in_flight() {
                            gc.complete(f.id, Ok(()));
                            released.extend(waiters.release(gc.durable_end()));
                        }
                    }
                    _ => {
                        let target = gc.written_end();
                        if target <= gc.durable_end() {
                            released.push(target);
                        } else {
                            waiters.park(target, target);
                        }
                        parked.push(target);
                    }
                }
                assert!(gc.durable_end() <= gc.written_end());
                if let Some(f) = gc.in_flight() {
                    assert!(gc.durable_end() <= f.target && f.target <= gc.written_end());
                }
                assert!(released.iter().all(|&t| t <= gc.durable_end()));
                code /= 4;
            }
            assert_eq!(released.len() + waiters.len(), parked.len());
        }
    }
}
