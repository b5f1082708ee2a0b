//! `SharePartition`: the state of one (share group, topic-partition) — KIP-932's share
//! partition with Lockstep's transactional LOCKED state — as a pure state machine over runs.
//!
//! Owned by the shard that owns the topic-partition (`model::partition_shard`); the group
//! coordinator on
//! another shard reaches it by message. Nothing here reads a clock or does I/O: time comes in
//! as `now_ms`, and the journal reads what to persist through [`SharePartition::take_delta`] and
//! [`SharePartition::snapshot`].
//!
//! Window and offsets:
//! - SPSO (share-partition start offset): every offset below it is ACKNOWLEDGED or ARCHIVED
//!   (done). It advances over the terminal prefix after every change.
//! - SPEO (share-partition end offset): the highest offset ever acquired. In-flight records
//!   are SPEO - SPSO + 1; no offset beyond SPSO + `partition_max_record_locks` - 1 is acquired.
//! - Runs tile `[SPSO, SPEO]` exactly; the first run is never terminal.
//!
//! Rules (Kafka's, and Lockstep's own for LOCKED, the state the KIP adds):
//! - Acquire: AVAILABLE → ACQUIRED, delivery count + 1, lock deadline `now + lock duration`.
//! - Acknowledge (all-or-nothing per call): every offset must be ACQUIRED by the member, else
//!   INVALID_RECORD_STATE and nothing changes. ACCEPT → ACKNOWLEDGED; REJECT and GAP →
//!   ARCHIVED; RELEASE → AVAILABLE, or ARCHIVED when the delivery count has reached
//!   `delivery_count_limit`; RENEW re-arms the lock.
//! - Lock expiry and member release act as RELEASE on ACQUIRED records only.
//! - Below the log start, RELEASE (and expiry, member release) archives instead.
//! - Lock (acknowledge inside a transaction): ACQUIRED → LOCKED{txn, ACCEPT | REJECT}; GAP
//!   locks as REJECT (commit archives it, as Kafka archives a GAP); RELEASE and RENEW are
//!   INVALID_REQUEST. Commit: LOCKED{ACCEPT} → ACKNOWLEDGED, LOCKED{REJECT} → ARCHIVED.
//! - Abort: LOCKED → AVAILABLE **with the delivery count decremented**, so the next
//!   acquisition (which adds one) brings it back to the count of the aborted delivery: an
//!   aborted transaction consumes no delivery attempt and can never archive a record. A
//!   LOCKED record's count is at least 1 (it was acquired), so the decrement cannot underflow.
//!
//! Throttled delivery (Kafka 4.2+, `SharePartition.acquireSubsetBatchRecords`): records near
//! the delivery limit are handed out in ever smaller batches, so that one poison record does
//! not drag a whole batch of good ones into ARCHIVED.
//! - A *delivery batch* is what one acquisition of new offsets took (Kafka's in-flight batch);
//!   re-acquiring part of it does not split it. After a restart each durable run is one.
//! - The threshold is max(2, ⌈`delivery_count_limit` / 2⌉). A batch is *throttled* when one of
//!   its AVAILABLE records within reach has a delivery count at or above it.
//! - A throttled batch is acquired only by a call that has acquired nothing before it, and
//!   after it the call acquires nothing more (no later batch, no new offsets).
//! - Within a throttled batch, its AVAILABLE records are taken in offset order until: the
//!   count taken reaches `batch size >> (c - threshold + 1)` (at least 1), where c is the count
//!   of the first record at or above the threshold met (Kafka checks for *equality*, so when
//!   records below the threshold came first and already exceeded it, this never stops the
//!   walk); or a record on its last attempt (count = limit - 1; limits above 2) is met after
//!   others — it waits for the next call, which takes it alone.
//! - Example, 10 records, limit 5 (threshold 3), each delivery left to expire: 10, 10, 10,
//!   then 5 (counts 3 → 4), then 1, 1, 1 … (count 4 → 5, each alone).
//!
//! Log start (retention, DeleteRecords; [`SharePartition::move_log_start`], Kafka's
//! `updateCacheAndOffsets`): AVAILABLE records below the log start become ARCHIVED, and so do
//! offsets below it never acquired (SPEO + 1 moves up to it); ACQUIRED and LOCKED records
//! below it keep their state, but can never become AVAILABLE again: a release or lock expiry
//! archives them, an abort too. So no fetch starts below the log start. The log start is not
//! persisted here: the log has it, and the shard re-applies it after a restart.
//!
//! Cost: every range operation carves at most two runs at its ends, transitions the k runs
//! it covers and re-coalesces its neighbours — O(log n + k) — and finds its runs through
//! indexes, never by a walk: the first AVAILABLE run (acquire), the LOCKED runs of each
//! transaction (commit, abort), and acquisition grants by deadline (lock expiry) and by
//! member (member release), which are lazy and checked against the runs on use (see
//! `runs`).
//!
//! Durability: [`SharePartition::take_delta`] returns what changed in the durable view since
//! the previous call; acquisitions and renewals change nothing durable (module docs of
//! `durable`), so the hot fetch path never writes to the journal.

use std::cmp::min;
use std::collections::{BTreeSet, HashMap};

use super::config::ShareConfig;
use super::durable::{
    push_coalesced, DirtyRanges, DurableState, ShareDelta, ShareSnapshot, StateRun,
};
use super::error::ShareError;
use super::runs::{span, Grant, MemberKey, Run, RunMap};
use super::state::{validate_transition, AcknowledgeType, LockOutcome, RecordState, TxnKey};
use crate::constants::SHARE_THROTTLE_DELIVERY_COUNT_MIN;

/// Offsets acquired by one call, all with the same delivery count (Kafka's AcquiredRecords).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquiredRange {
    pub first: i64,
    pub last: i64,
    pub delivery_count: u16,
}

/// One acknowledgement batch: `[first, last]` with one type for the whole range or one per
/// offset (as ShareAcknowledge's AcknowledgementBatches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<AcknowledgeType>,
}

impl AckBatch {
    /// A batch with one type for the whole range.
    pub fn new(first: i64, last: i64, ack_type: AcknowledgeType) -> AckBatch {
        AckBatch {
            first,
            last,
            types: vec![ack_type],
        }
    }

    /// Maximal sub-ranges with one type each, in order. The batch must be validated.
    fn segments(&self) -> Vec<(i64, i64, AcknowledgeType)> {
        if self.types.len() == 1 {
            return vec![(self.first, self.last, self.types[0])];
        }
        let mut out: Vec<(i64, i64, AcknowledgeType)> = Vec::new();
        for (i, &t) in self.types.iter().enumerate() {
            let offset = self.first + i as i64;
            match out.last_mut() {
                Some(seg) if seg.2 == t => seg.1 = offset,
                _ => out.push((offset, offset, t)),
            }
        }
        out
    }
}

/// Records changed by one acknowledge call, by what they became.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckCounts {
    pub acknowledged: u64,
    pub archived: u64,
    /// Released back to AVAILABLE (released records at the limit count as archived).
    pub released: u64,
    pub renewed: u64,
}

/// Records a transaction's commit changed on this partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitCounts {
    pub acknowledged: u64,
    pub archived: u64,
}

/// A LOCKED range of one transaction (what prepare makes durable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockedRange {
    pub first: i64,
    pub last: i64,
    pub outcome: LockOutcome,
    pub delivery_count: u16,
}

/// One run, with its member and transaction ids resolved (for describe, tools and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunView<'a> {
    pub first: i64,
    pub last: i64,
    pub state: RecordState,
    pub delivery_count: u16,
    /// The member holding the acquisition lock (ACQUIRED only).
    pub member: Option<&'a str>,
    /// When the acquisition lock expires (ACQUIRED only).
    pub lock_deadline_ms: Option<u64>,
    /// The transaction holding the record (LOCKED only).
    pub txn: Option<&'a str>,
}

/// Strings (member ids, transaction ids) interned as small keys so runs stay `Copy` and small.
/// A key is forgotten (and may be reused) once no run refers to it.
#[derive(Clone, Debug, Default)]
struct Interner {
    names: Vec<Option<Box<str>>>,
    index: HashMap<Box<str>, u32>,
    free: Vec<u32>,
}

impl Interner {
    fn find(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(k) = self.find(name) {
            return k;
        }
        let key = match self.free.pop() {
            Some(k) => {
                assert!(self.names[k as usize].is_none());
                self.names[k as usize] = Some(name.into());
                k
            }
            None => {
                let k = u32::try_from(self.names.len()).expect("fewer than 2^32 names");
                self.names.push(Some(name.into()));
                k
            }
        };
        self.index.insert(name.into(), key);
        key
    }

    fn name(&self, key: u32) -> &str {
        self.names[key as usize]
            .as_deref()
            .expect("interned key is live")
    }

    fn forget(&mut self, key: u32) {
        let name = self.names[key as usize]
            .take()
            .expect("interned key is live");
        assert_eq!(self.index.remove(&name), Some(key));
        self.free.push(key);
    }

    fn live(&self) -> impl Iterator<Item = u32> + '_ {
        self.index.values().copied()
    }
}

/// Which acknowledgements a call may carry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AckContext {
    Plain,
    Transaction,
}

/// The share-partition state machine (module docs).
#[derive(Clone, Debug)]
pub struct SharePartition {
    config: ShareConfig,
    spso: i64,
    /// SPEO + 1: the first offset never acquired.
    next_offset: i64,
    runs: RunMap,
    /// First offsets of the delivery batches (module docs, "Throttled delivery") that hold
    /// offsets in `[SPSO, SPEO]`: the batch holding SPSO may start before it.
    batches: BTreeSet<i64>,
    /// The log start offset last reported ([`SharePartition::move_log_start`]; 0 until
    /// then): no record below it is AVAILABLE, and SPEO + 1 is at or past it.
    log_start: i64,
    members: Interner,
    txns: Interner,
    /// Producer transactions (`crate::producer_txn::share`): the highest marker epoch applied here per
    /// producer id. A lock with an older epoch is a zombie's. Not durable (a restart forgets it).
    producer_fences: HashMap<i64, i16>,
    dirty: DirtyRanges,
    spso_dirty: bool,
    /// The next delta must replace the whole durable state.
    reset_pending: bool,
}

impl SharePartition {
    /// A partition that starts at `start_offset` (resolved by the caller from
    /// `share.auto.offset.reset`: latest, earliest, or by_duration). The first
    /// [`SharePartition::take_delta`] is a reset that persists this start offset.
    pub fn new(config: ShareConfig, start_offset: i64) -> SharePartition {
        config
            .validate()
            .expect("share config validated by the caller");
        assert!(start_offset >= 0, "start offset {start_offset} is negative");
        SharePartition {
            config,
            spso: start_offset,
            next_offset: start_offset,
            runs: RunMap::default(),
            batches: BTreeSet::new(),
            log_start: 0,
            members: Interner::default(),
            txns: Interner::default(),
            producer_fences: HashMap::new(),
            dirty: DirtyRanges::default(),
            spso_dirty: false,
            reset_pending: true,
        }
    }

    /// Rebuilds a partition from its durable view (after a restart). Nothing is ACQUIRED;
    /// LOCKED runs come back with their transactions, to be resolved by the coordinator.
    pub fn from_snapshot(
        config: ShareConfig,
        snapshot: &ShareSnapshot,
    ) -> Result<SharePartition, ShareError> {
        snapshot.validate()?;
        let mut partition = SharePartition::new(config, snapshot.spso);
        partition.reset_pending = false;
        let mut cursor = snapshot.spso;
        for run in &snapshot.runs {
            if run.first > cursor {
                partition
                    .runs
                    .insert(cursor, Run::new(run.first - 1, RecordState::Available, 0));
                partition.batches.insert(cursor);
            }
            // The delivery batches are not durable: after a restart each durable run is one,
            // as Kafka's persisted state batches become its in-flight batches.
            partition.batches.insert(run.first);
            let state = match &run.state {
                DurableState::Available => RecordState::Available,
                DurableState::Acknowledged => RecordState::Acknowledged,
                DurableState::Archived => RecordState::Archived,
                DurableState::Locked { txn, outcome } => {
                    if txn.is_empty() {
                        return Err(ShareError::corrupt(
                            "LOCKED run with an empty transaction id",
                        ));
                    }
                    let key = TxnKey(partition.txns.intern(txn));
                    RecordState::Locked {
                        txn: key,
                        outcome: *outcome,
                    }
                }
            };
            partition
                .runs
                .insert(run.first, Run::new(run.last, state, run.delivery_count));
            cursor = run.last + 1;
        }
        partition.next_offset = cursor;
        partition.advance_spso();
        partition.check_invariants();
        Ok(partition)
    }

    pub fn config(&self) -> &ShareConfig {
        &self.config
    }

    /// New group configs; they apply to transitions made from now on.
    pub fn set_config(&mut self, config: ShareConfig) {
        config
            .validate()
            .expect("share config validated by the caller");
        self.config = config;
    }

    /// Share-partition start offset.
    pub fn spso(&self) -> i64 {
        self.spso
    }

    /// Share-partition end offset (SPSO - 1 when nothing is in flight).
    pub fn speo(&self) -> i64 {
        self.next_offset - 1
    }

    /// In-flight records whose delivery is complete (ACKNOWLEDGED or ARCHIVED): the part of
    /// the in-flight window that does not count towards the lag (KIP-1226). O(runs).
    pub fn completed_records(&self) -> u64 {
        self.runs
            .iter()
            .filter(|(_, run)| run.state.is_terminal())
            .map(|(first, run)| span(first, run.last))
            .sum()
    }

    /// SPEO - SPSO + 1.
    pub fn in_flight_records(&self) -> u64 {
        (self.next_offset - self.spso) as u64
    }

    pub fn acquired_records(&self) -> u64 {
        self.runs.acquired_records()
    }

    pub fn locked_records(&self) -> u64 {
        self.runs.locked_records()
    }

    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Where the next fetch should read the log from: the first AVAILABLE offset, or SPEO + 1.
    pub fn next_fetch_offset(&self) -> i64 {
        self.runs
            .next_available(self.spso)
            .unwrap_or(self.next_offset)
    }

    /// The transaction id of a LOCKED state's key.
    pub fn txn_id(&self, key: TxnKey) -> &str {
        self.txns.name(key.0)
    }

    /// The state of `offset`; `None` below SPSO (done) or beyond SPEO (never acquired).
    pub fn record(&self, offset: i64) -> Option<RunView<'_>> {
        let (first, run) = self.runs.containing(offset)?;
        Some(RunView {
            first: offset,
            last: offset,
            ..self.view(first, &run)
        })
    }

    /// All runs in offset order.
    pub fn runs(&self) -> impl Iterator<Item = RunView<'_>> + '_ {
        self.runs.iter().map(|(first, run)| self.view(first, run))
    }

    fn view<'a>(&'a self, first: i64, run: &Run) -> RunView<'a> {
        RunView {
            first,
            last: run.last,
            state: run.state,
            delivery_count: run.delivery_count,
            member: run.owner.map(|m| self.members.name(m.0)),
            lock_deadline_ms: run.owner.map(|_| run.deadline_ms),
            txn: match run.state {
                RecordState::Locked { txn, .. } => Some(self.txns.name(txn.0)),
                _ => None,
            },
        }
    }

    /// Acquires up to `max_records` offsets for `member`: AVAILABLE offsets from SPSO on,
    /// then new offsets after SPEO while in-flight stays within `partition_max_record_locks`.
    /// Only offsets below `available_log_end` (the log end or the last stable offset, or the
    /// end of the last whole batch the caller wants to hand out) are acquired.
    ///
    /// Records near the delivery limit are throttled (module docs, "Throttled delivery"): a
    /// delivery batch holding an AVAILABLE record whose count reached the throttle threshold
    /// is handed out alone and in part, and nothing after it is acquired by this call.
    pub fn acquire(
        &mut self,
        member: &str,
        available_log_end: i64,
        max_records: u32,
        now_ms: u64,
    ) -> Vec<AcquiredRange> {
        assert!(available_log_end >= 0);
        let mut out: Vec<AcquiredRange> = Vec::new();
        let mut budget = u64::from(max_records);
        if budget == 0 || member.is_empty() {
            return out;
        }
        let key = MemberKey(self.members.intern(member));
        let deadline_ms = now_ms + self.config.record_lock_duration_ms;
        let acquired_before = self.runs.acquired_records();
        let limit = self.config.delivery_count_limit;
        let threshold = throttle_threshold(limit);

        // Existing offsets, one delivery batch at a time.
        let mut acquired_existing: u64 = 0;
        let mut throttled_stop = false;
        let mut cursor = self.spso;
        while budget > 0 {
            let Some(first) = self.runs.next_available(cursor) else {
                break;
            };
            if first >= available_log_end {
                break;
            }
            let (batch_first, batch_last) = self.batch_of(first);
            let last_in_reach = min(batch_last, available_log_end - 1);
            let throttled = self.max_available_count(first, last_in_reach) >= threshold;
            if throttled && acquired_existing > 0 {
                // A throttled batch is delivered on its own, in a later fetch.
                throttled_stop = true;
                break;
            }
            let batch_records = span(batch_first, batch_last);
            let mut in_batch: u64 = 0;
            let mut cap: Option<u64> = None;
            let mut from = first;
            while budget > 0 {
                let Some(run_first) = self.runs.next_available(from) else {
                    break;
                };
                if run_first > last_in_reach {
                    break;
                }
                let run = *self.runs.get(run_first).expect("indexed AVAILABLE run");
                let mut take = min(span(run_first, min(run.last, last_in_reach)), budget);
                let mut stop_after = false;
                if throttled {
                    let count = run.delivery_count;
                    if limit > 2 && count + 1 == limit {
                        // The last attempt: delivered alone.
                        if in_batch > 0 {
                            break;
                        }
                        take = 1;
                        stop_after = true;
                    }
                    if count >= threshold && cap.is_none() {
                        let shift = u32::from(count - threshold + 1);
                        cap = Some(batch_records.checked_shr(shift).unwrap_or(0).max(1));
                    }
                    // Kafka stops when the batch's count *reaches* the cap: once past it
                    // (records below the threshold came first), nothing but the batch end,
                    // the budget or a last attempt stops it.
                    if let Some(cap) = cap.filter(|&cap| in_batch < cap) {
                        if take >= cap - in_batch {
                            take = cap - in_batch;
                            stop_after = true;
                        }
                    }
                }
                let last = run_first + take as i64 - 1;
                let delivery_count = run
                    .delivery_count
                    .checked_add(1)
                    .expect("delivery count overflow");
                self.rewrite(run_first, last, |r| {
                    Run::acquired(r.last, r.delivery_count + 1, key, deadline_ms)
                });
                self.runs.add_grant(Grant {
                    member: key,
                    first: run_first,
                    last,
                    deadline_ms,
                });
                push_acquired(
                    &mut out,
                    AcquiredRange {
                        first: run_first,
                        last,
                        delivery_count,
                    },
                );
                in_batch += take;
                acquired_existing += take;
                budget -= take;
                from = last + 1;
                if stop_after {
                    break;
                }
            }
            if throttled && in_batch > 0 {
                throttled_stop = true;
                break;
            }
            cursor = last_in_reach + 1;
        }

        // New offsets: one new delivery batch.
        if budget > 0 && !throttled_stop {
            let cap_last = self.spso + i64::from(self.config.partition_max_record_locks) - 1;
            let first = self.next_offset;
            let last = min(
                min(available_log_end - 1, cap_last),
                first + budget as i64 - 1,
            );
            if last >= first {
                assert!(last <= cap_last && last < available_log_end);
                validate_transition(RecordState::Available, RecordState::Acquired)
                    .expect("table allows acquisition");
                self.runs
                    .insert(first, Run::acquired(last, 1, key, deadline_ms));
                self.runs.add_grant(Grant {
                    member: key,
                    first,
                    last,
                    deadline_ms,
                });
                self.batches.insert(first);
                self.next_offset = last + 1;
                self.runs.coalesce(first, last);
                push_acquired(
                    &mut out,
                    AcquiredRange {
                        first,
                        last,
                        delivery_count: 1,
                    },
                );
            }
        }

        let acquired: u64 = out.iter().map(|r| span(r.first, r.last)).sum();
        assert!(acquired <= u64::from(max_records));
        assert_eq!(self.runs.acquired_records(), acquired_before + acquired);
        self.forget_member_if_idle(key);
        out
    }

    /// Acknowledges records `member` holds (module docs). All-or-nothing.
    pub fn acknowledge(
        &mut self,
        member: &str,
        batches: &[AckBatch],
        now_ms: u64,
    ) -> Result<AckCounts, ShareError> {
        validate_batches(batches, AckContext::Plain)?;
        let key = self.check_held(member, batches)?;
        let mut counts = AckCounts::default();
        let Some(key) = key else { return Ok(counts) };
        let limit = self.config.delivery_count_limit;
        let deadline_ms = now_ms + self.config.record_lock_duration_ms;
        for batch in batches {
            for (first, last, ack_type) in batch.segments() {
                let n = span(first, last);
                match ack_type {
                    AcknowledgeType::Accept => {
                        self.rewrite(first, last, |r| {
                            Run::new(r.last, RecordState::Acknowledged, r.delivery_count)
                        });
                        counts.acknowledged += n;
                    }
                    AcknowledgeType::Reject | AcknowledgeType::Gap => {
                        self.rewrite(first, last, |r| {
                            Run::new(r.last, RecordState::Archived, r.delivery_count)
                        });
                        counts.archived += n;
                    }
                    AcknowledgeType::Release => {
                        for (a, b, below) in self.floor_split(first, last) {
                            self.rewrite_counted(a, b, |first, r| {
                                let state = if below {
                                    RecordState::Archived
                                } else {
                                    released_state(r.delivery_count, limit)
                                };
                                if state == RecordState::Archived {
                                    counts.archived += span(first, r.last);
                                } else {
                                    counts.released += span(first, r.last);
                                }
                                Run::new(r.last, state, r.delivery_count)
                            });
                        }
                    }
                    AcknowledgeType::Renew => {
                        self.rewrite(first, last, |r| {
                            Run::acquired(r.last, r.delivery_count, key, deadline_ms)
                        });
                        self.runs.add_grant(Grant {
                            member: key,
                            first,
                            last,
                            deadline_ms,
                        });
                        counts.renewed += n;
                    }
                }
                if ack_type != AcknowledgeType::Renew {
                    self.dirty.insert(first, last);
                }
            }
        }
        self.advance_spso();
        self.forget_member_if_idle(key);
        Ok(counts)
    }

    /// Re-arms the acquisition locks of `[first, last]` ranges `member` holds (RENEW).
    pub fn renew(
        &mut self,
        member: &str,
        ranges: &[(i64, i64)],
        now_ms: u64,
    ) -> Result<u64, ShareError> {
        let batches: Vec<AckBatch> = ranges
            .iter()
            .map(|&(first, last)| AckBatch::new(first, last, AcknowledgeType::Renew))
            .collect();
        Ok(self.acknowledge(member, &batches, now_ms)?.renewed)
    }

    /// Releases every ACQUIRED record whose lock deadline is at or before `now_ms`
    /// (AVAILABLE, or ARCHIVED at the delivery count limit). LOCKED records are untouched.
    /// Returns the number of records released or archived.
    pub fn expire_locks(&mut self, now_ms: u64) -> u64 {
        let mut released = 0;
        let mut owners = Vec::new();
        while let Some(grant) = self.runs.pop_due_grant(now_ms) {
            // The grant says where to look; each run decides (module docs of `runs`).
            released += self.release_in(grant.first, grant.last, &mut owners, |run| {
                run.deadline_ms <= now_ms
            });
        }
        self.advance_spso();
        owners.sort_unstable();
        owners.dedup();
        for owner in owners {
            self.forget_member_if_idle(owner);
        }
        released
    }

    /// The member left, its share session closed or its connection dropped: its ACQUIRED
    /// records are released (AVAILABLE, or ARCHIVED at the limit). LOCKED records stay.
    pub fn release_member(&mut self, member: &str) -> u64 {
        let Some(key) = self.members.find(member).map(MemberKey) else {
            return 0;
        };
        let mut released = 0;
        let mut owners = Vec::new();
        for (first, last) in self.runs.take_member_grants(key) {
            released += self.release_in(first, last, &mut owners, |run| run.owner == Some(key));
        }
        assert!(
            !self.runs.holds_any(key),
            "a member's grants cover everything it holds"
        );
        self.advance_spso();
        self.forget_member_if_idle(key);
        assert!(self.members.find(member).is_none());
        released
    }

    /// Acknowledges records `member` holds into transaction `txn`: ACQUIRED → LOCKED.
    /// ACCEPT locks as ACCEPT, REJECT and GAP as REJECT; RELEASE and RENEW are refused.
    /// All-or-nothing. The caller has checked with the coordinator that `txn` is ONGOING.
    pub fn lock(
        &mut self,
        member: &str,
        txn: &str,
        batches: &[AckBatch],
    ) -> Result<u64, ShareError> {
        if txn.is_empty() {
            return Err(ShareError::invalid_request("empty transaction id"));
        }
        validate_batches(batches, AckContext::Transaction)?;
        let Some(member_key) = self.check_held(member, batches)? else {
            return Ok(0);
        };
        let txn_key = TxnKey(self.txns.intern(txn));
        let before = self.runs.locked_count(txn_key);
        let mut locked = 0;
        for batch in batches {
            for (first, last, ack_type) in batch.segments() {
                let outcome = match ack_type {
                    AcknowledgeType::Accept => LockOutcome::Accept,
                    AcknowledgeType::Reject | AcknowledgeType::Gap => LockOutcome::Reject,
                    AcknowledgeType::Release | AcknowledgeType::Renew => {
                        unreachable!("refused by validate_batches")
                    }
                };
                let state = RecordState::Locked {
                    txn: txn_key,
                    outcome,
                };
                self.rewrite(first, last, |r| Run::new(r.last, state, r.delivery_count));
                self.dirty.insert(first, last);
                locked += span(first, last);
            }
        }
        assert_eq!(self.runs.locked_count(txn_key), before + locked);
        self.forget_member_if_idle(member_key);
        Ok(locked)
    }

    /// The transaction committed: its LOCKED{ACCEPT} records become ACKNOWLEDGED and its
    /// LOCKED{REJECT} records ARCHIVED. Idempotent (nothing locked: nothing to do).
    pub fn commit(&mut self, txn: &str) -> CommitCounts {
        let mut counts = CommitCounts::default();
        let Some(key) = self.txns.find(txn).map(TxnKey) else {
            return counts;
        };
        for first in self.runs.locked_by(key) {
            let run = *self.runs.get(first).expect("indexed LOCKED run");
            let RecordState::Locked { txn: k, outcome } = run.state else {
                panic!("txn index points at a {} run", run.state)
            };
            assert_eq!(k, key);
            let state = match outcome {
                LockOutcome::Accept => {
                    counts.acknowledged += span(first, run.last);
                    RecordState::Acknowledged
                }
                LockOutcome::Reject => {
                    counts.archived += span(first, run.last);
                    RecordState::Archived
                }
            };
            self.rewrite(first, run.last, |r| {
                Run::new(r.last, state, r.delivery_count)
            });
            self.dirty.insert(first, run.last);
        }
        assert_eq!(self.runs.locked_count(key), 0);
        self.txns.forget(key.0);
        self.advance_spso();
        counts
    }

    /// The transaction aborted: its LOCKED records become AVAILABLE without consuming a
    /// delivery attempt (count - 1; module docs), or ARCHIVED below the log start.
    /// Idempotent. Returns the records released (archived ones included).
    pub fn abort(&mut self, txn: &str) -> u64 {
        let Some(key) = self.txns.find(txn).map(TxnKey) else {
            return 0;
        };
        let mut released = 0;
        for first in self.runs.locked_by(key) {
            let run = *self.runs.get(first).expect("indexed LOCKED run");
            assert!(matches!(run.state, RecordState::Locked { txn, .. } if txn == key));
            assert!(run.delivery_count >= 1);
            for (a, b, below) in self.floor_split(first, run.last) {
                let state = if below {
                    RecordState::Archived
                } else {
                    RecordState::Available
                };
                self.rewrite(a, b, |r| Run::new(r.last, state, r.delivery_count - 1));
            }
            self.dirty.insert(first, run.last);
            released += span(first, run.last);
        }
        assert_eq!(self.runs.locked_count(key), 0);
        self.txns.forget(key.0);
        self.advance_spso();
        released
    }

    /// The LOCKED ranges of `txn`, in offset order.
    pub fn locked_ranges(&self, txn: &str) -> Vec<LockedRange> {
        let Some(key) = self.txns.find(txn).map(TxnKey) else {
            return Vec::new();
        };
        self.runs
            .locked_by(key)
            .into_iter()
            .map(|first| {
                let run = self.runs.get(first).expect("indexed LOCKED run");
                let RecordState::Locked { outcome, .. } = run.state else {
                    panic!("txn index points at a {} run", run.state)
                };
                LockedRange {
                    first,
                    last: run.last,
                    outcome,
                    delivery_count: run.delivery_count,
                }
            })
            .collect()
    }

    /// Records LOCKED by `txn`.
    pub fn locked_count(&self, txn: &str) -> u64 {
        self.txns
            .find(txn)
            .map_or(0, |k| self.runs.locked_count(TxnKey(k)))
    }

    /// The highest epoch of `producer_id` whose transaction marker was applied here (since the
    /// partition was loaded), if any.
    pub fn producer_fence(&self, producer_id: i64) -> Option<i16> {
        self.producer_fences.get(&producer_id).copied()
    }

    /// Records that a marker of `producer_id` with `epoch` was applied (kept if higher).
    pub fn raise_producer_fence(&mut self, producer_id: i64, epoch: i16) {
        let fence = self.producer_fences.entry(producer_id).or_insert(epoch);
        *fence = (*fence).max(epoch);
    }

    /// Transactions with LOCKED records here, sorted (recovery asks the coordinator about each).
    pub fn locked_txns(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .runs
            .locking_txns()
            .map(|k| self.txns.name(k.0).to_string())
            .collect();
        ids.sort();
        ids
    }

    /// AlterShareGroupOffsets (or a reset): the partition restarts at `offset` (at the log
    /// start if that is later) with no state. Refused while any record is ACQUIRED or LOCKED.
    pub fn set_start_offset(&mut self, offset: i64) -> Result<(), ShareError> {
        if offset < 0 {
            return Err(ShareError::invalid_request(format!(
                "negative start offset {offset}"
            )));
        }
        let acquired_records = self.runs.acquired_records();
        let locked_records = self.runs.locked_records();
        if acquired_records > 0 || locked_records > 0 {
            return Err(ShareError::RecordsInFlight {
                acquired_records,
                locked_records,
            });
        }
        let offset = offset.max(self.log_start);
        self.runs.clear();
        self.batches.clear();
        assert_eq!(self.members.live().count(), 0, "idle members are forgotten");
        assert_eq!(
            self.txns.live().count(),
            0,
            "finished transactions are forgotten"
        );
        self.spso = offset;
        self.next_offset = offset;
        self.dirty.clear();
        self.spso_dirty = false;
        self.reset_pending = true;
        Ok(())
    }

    /// The log start offset this partition was last told of (0: never).
    pub fn log_start(&self) -> i64 {
        self.log_start
    }

    /// The log's start offset moved to `log_start` (retention, DeleteRecords; and after a
    /// restart, which does not persist it): Kafka's `updateCacheAndOffsets`. AVAILABLE
    /// records below it are ARCHIVED, and so are offsets below it never acquired; ACQUIRED
    /// records there keep their lock and become ARCHIVED when it ends (expiry, release,
    /// RELEASE), never AVAILABLE; LOCKED records there wait for their transaction: commit
    /// gives the outcome's state, abort ARCHIVED. State at or above it is untouched. A start
    /// at or before the one already known changes nothing. Returns the records archived.
    pub fn move_log_start(&mut self, log_start: i64) -> u64 {
        if log_start <= self.log_start {
            return 0;
        }
        self.log_start = log_start;
        let mut archived = 0;
        let below_last = min(log_start, self.next_offset) - 1;
        if below_last >= self.spso {
            for (first, run) in self.runs.overlapping_vec(self.spso, below_last) {
                if run.state != RecordState::Available {
                    continue;
                }
                let last = min(run.last, below_last);
                self.rewrite(first, last, |r| {
                    Run::new(r.last, RecordState::Archived, r.delivery_count)
                });
                self.dirty.insert(first, last);
                archived += span(first, last);
            }
        }
        if self.next_offset < log_start {
            // Never acquired and now without data: one archived batch up to the log start.
            let first = self.next_offset;
            validate_transition(RecordState::Available, RecordState::Archived)
                .expect("table allows archiving below the log start");
            self.runs
                .insert(first, Run::new(log_start - 1, RecordState::Archived, 0));
            self.batches.insert(first);
            self.next_offset = log_start;
            self.runs.coalesce(first, log_start - 1);
            self.dirty.insert(first, log_start - 1);
        }
        self.advance_spso();
        archived
    }

    /// The durable view in canonical form (module docs of `durable`).
    pub fn snapshot(&self) -> ShareSnapshot {
        let mut runs = Vec::new();
        for (first, run) in self.runs.iter() {
            let durable = self.durable_run(first, run.last, run);
            if !(durable.state == DurableState::Available && durable.delivery_count == 0) {
                push_coalesced(&mut runs, durable);
            }
        }
        let snapshot = ShareSnapshot {
            spso: self.spso,
            runs,
        };
        debug_assert!(snapshot.validate().is_ok());
        snapshot
    }

    /// Whether the durable view changed since the last [`SharePartition::take_delta`].
    pub fn has_delta(&self) -> bool {
        self.reset_pending || self.spso_dirty || !self.dirty.is_empty()
    }

    /// What changed in the durable view since the last call (`None`: nothing). The journal
    /// appends it; replaying a snapshot plus the deltas after it gives [`Self::snapshot`].
    pub fn take_delta(&mut self) -> Option<ShareDelta> {
        if self.reset_pending {
            let snapshot = self.snapshot();
            self.reset_pending = false;
            self.spso_dirty = false;
            self.dirty.clear();
            return Some(ShareDelta {
                spso: snapshot.spso,
                reset: true,
                runs: snapshot.runs,
            });
        }
        if !self.has_delta() {
            return None;
        }
        let mut runs = Vec::new();
        for (a, b) in self.dirty.iter() {
            assert!(b < self.next_offset, "dirty range [{a}, {b}] beyond SPEO");
            let a = a.max(self.spso);
            if a > b {
                continue;
            }
            for (first, run) in self.runs.overlapping_vec(a, b) {
                let piece = self.durable_run(first.max(a), run.last.min(b), &run);
                push_coalesced(&mut runs, piece);
            }
        }
        self.dirty.clear();
        self.spso_dirty = false;
        Some(ShareDelta {
            spso: self.spso,
            reset: false,
            runs,
        })
    }

    /// Number of dirty ranges waiting for the next delta.
    pub fn dirty_range_count(&self) -> usize {
        self.dirty.len()
    }

    /// Checks every invariant (O(n)); tests call it after each operation.
    pub fn check_invariants(&self) {
        assert!(self.spso >= 0 && self.spso <= self.next_offset);
        self.runs.check(self.spso, self.next_offset);
        assert!(
            self.next_offset >= self.log_start,
            "SPEO + 1 is at or past the log start"
        );
        if let Some(next) = self.runs.next_available(self.spso) {
            assert!(
                next >= self.log_start,
                "AVAILABLE offset {next} below the log start"
            );
        }
        if self.runs.is_empty() {
            assert!(self.batches.is_empty());
        } else {
            let first = *self.batches.first().expect("a window has a batch");
            assert!(first <= self.spso, "the batch holding SPSO is known");
            assert!(
                self.batches
                    .range(first + 1..)
                    .next()
                    .is_none_or(|&b| b > self.spso),
                "only the batch holding SPSO starts at or below it"
            );
            assert!(*self.batches.last().expect("non-empty") < self.next_offset);
        }
        let mut members_in_runs: Vec<u32> = Vec::new();
        let mut txns_in_runs: Vec<u32> = Vec::new();
        for (_, run) in self.runs.iter() {
            if let Some(m) = run.owner {
                members_in_runs.push(m.0);
            }
            if let RecordState::Locked { txn, .. } = run.state {
                txns_in_runs.push(txn.0);
            }
        }
        for (used, interner) in [(members_in_runs, &self.members), (txns_in_runs, &self.txns)] {
            let mut used = used;
            used.sort_unstable();
            used.dedup();
            let mut live: Vec<u32> = interner.live().collect();
            live.sort_unstable();
            assert_eq!(
                used, live,
                "interned ids must be exactly those the runs refer to"
            );
        }
    }

    // ---- internals ----

    /// The member key if `member` holds every offset of every batch; INVALID_RECORD_STATE
    /// (naming the first batch that fails) otherwise. `Ok(None)` only for no batches.
    fn check_held(
        &self,
        member: &str,
        batches: &[AckBatch],
    ) -> Result<Option<MemberKey>, ShareError> {
        if batches.is_empty() {
            return Ok(None);
        }
        let key = self.members.find(member).map(MemberKey);
        for batch in batches {
            let held = key.is_some_and(|key| {
                batch.first >= self.spso
                    && batch.last < self.next_offset
                    && self
                        .runs
                        .overlapping_rev(batch.first, batch.last)
                        .all(|(_, run)| {
                            run.state == RecordState::Acquired && run.owner == Some(key)
                        })
            });
            if !held {
                return Err(ShareError::InvalidRecordState {
                    first: batch.first,
                    last: batch.last,
                });
            }
        }
        Ok(key)
    }

    /// Splits at `first` and `last + 1`, replaces each run in between by `f(run)` (checking
    /// the transition table), and re-coalesces the region.
    fn rewrite(&mut self, first: i64, last: i64, mut f: impl FnMut(&Run) -> Run) {
        self.rewrite_counted(first, last, |_, run| f(run));
    }

    fn rewrite_counted(&mut self, first: i64, last: i64, mut f: impl FnMut(i64, &Run) -> Run) {
        assert!(self.spso <= first && first <= last && last < self.next_offset);
        // Carve each overlapping run: the part before `first` and the part after `last` keep
        // its attributes, the part inside becomes `f(part)`.
        for (key, old) in self.runs.overlapping_vec(first, last) {
            let removed = self.runs.remove(key);
            assert_eq!(removed, old);
            let lo = key.max(first);
            let hi = old.last.min(last);
            if key < first {
                self.runs.insert_in_hole(
                    key,
                    old.last,
                    key,
                    Run {
                        last: first - 1,
                        ..old
                    },
                );
            }
            let part = Run { last: hi, ..old };
            let new = f(lo, &part);
            assert_eq!(new.last, hi, "a rewrite keeps run extents");
            if new.state == part.state {
                assert_eq!(
                    part.state,
                    RecordState::Acquired,
                    "only a lock renewal keeps the state"
                );
                assert_eq!(new.delivery_count, part.delivery_count);
            } else if let Err(e) = validate_transition(part.state, new.state) {
                panic!("{e} at offset {lo}");
            }
            self.runs.insert_in_hole(key, old.last, lo, new);
            if old.last > last {
                self.runs.insert_in_hole(
                    key,
                    old.last,
                    last + 1,
                    Run {
                        last: old.last,
                        ..old
                    },
                );
            }
        }
        self.runs.coalesce(first, last);
    }

    /// Releases the ACQUIRED runs overlapping `[first, last]` for which `due` holds (whole
    /// runs: a run is one state), noting their owners. Returns the records released.
    fn release_in(
        &mut self,
        first: i64,
        last: i64,
        owners: &mut Vec<MemberKey>,
        due: impl Fn(&Run) -> bool,
    ) -> u64 {
        let mut released = 0;
        let mut cursor = first.max(self.spso);
        while cursor <= last {
            let found = match self.runs.containing(cursor) {
                Some(found) => Some(found),
                None => self
                    .runs
                    .next_first_in(cursor, last)
                    .map(|f| (f, *self.runs.get(f).expect("run"))),
            };
            let Some((run_first, run)) = found else { break };
            cursor = run.last + 1;
            if run.state == RecordState::Acquired && due(&run) {
                owners.push(run.owner.expect("ACQUIRED run has an owner"));
                released += self.release_run(run_first, run);
            }
        }
        released
    }

    /// Releases one whole ACQUIRED run (lock expiry, member release): AVAILABLE, or ARCHIVED
    /// at the delivery limit or below the log start.
    fn release_run(&mut self, first: i64, run: Run) -> u64 {
        for (a, b, below) in self.floor_split(first, run.last) {
            let state = if below {
                RecordState::Archived
            } else {
                released_state(run.delivery_count, self.config.delivery_count_limit)
            };
            self.rewrite(a, b, |r| Run::new(r.last, state, r.delivery_count));
        }
        self.dirty.insert(first, run.last);
        span(first, run.last)
    }

    /// `[first, last]` cut at the log start: pieces with whether they lie below it.
    fn floor_split(&self, first: i64, last: i64) -> Vec<(i64, i64, bool)> {
        assert!(first <= last);
        if last < self.log_start {
            vec![(first, last, true)]
        } else if first >= self.log_start {
            vec![(first, last, false)]
        } else {
            vec![
                (first, self.log_start - 1, true),
                (self.log_start, last, false),
            ]
        }
    }

    /// The delivery batch holding `offset` (module docs, "Throttled delivery"): from the
    /// last batch start at or before it to the offset before the next one, or SPEO.
    fn batch_of(&self, offset: i64) -> (i64, i64) {
        assert!(self.spso <= offset && offset < self.next_offset);
        let first = self
            .batches
            .range(..=offset)
            .next_back()
            .copied()
            .unwrap_or(self.spso);
        let last = self
            .batches
            .range(offset + 1..)
            .next()
            .map_or(self.next_offset - 1, |&next| next - 1);
        (first, last)
    }

    /// The highest delivery count of the AVAILABLE records in `[first, last]` (0: none).
    fn max_available_count(&self, first: i64, last: i64) -> u16 {
        self.runs
            .overlapping_rev(first, last)
            .filter(|(_, run)| run.state == RecordState::Available)
            .map(|(_, run)| run.delivery_count)
            .max()
            .unwrap_or(0)
    }

    /// Moves SPSO over the terminal prefix, dropping its runs.
    fn advance_spso(&mut self) {
        while let Some((first, run)) = self.runs.first_run() {
            assert_eq!(first, self.spso, "runs start at SPSO");
            if !run.state.is_terminal() {
                break;
            }
            self.runs.remove(first);
            self.spso = run.last + 1;
            self.spso_dirty = true;
        }
        if self.runs.is_empty() {
            assert_eq!(
                self.spso, self.next_offset,
                "an empty window is empty at SPEO + 1"
            );
            self.batches.clear();
        }
        // Forget the batches that end below SPSO (the one holding SPSO stays).
        while let Some(&first) = self.batches.first() {
            let next_start = self.batches.range(first + 1..).next().copied();
            if next_start.is_some_and(|next| next <= self.spso) {
                self.batches.remove(&first);
            } else {
                break;
            }
        }
    }

    fn forget_member_if_idle(&mut self, key: MemberKey) {
        if !self.runs.holds_any(key) {
            self.runs.forget_member(key);
            self.members.forget(key.0);
        }
    }

    /// The durable view of `[first, last]` of `run` (ACQUIRED shows as it was before).
    fn durable_run(&self, first: i64, last: i64, run: &Run) -> StateRun {
        let (state, delivery_count) = match run.state {
            RecordState::Available => (DurableState::Available, run.delivery_count),
            RecordState::Acquired => (DurableState::Available, run.delivery_count - 1),
            RecordState::Acknowledged => (DurableState::Acknowledged, run.delivery_count),
            RecordState::Archived => (DurableState::Archived, run.delivery_count),
            RecordState::Locked { txn, outcome } => (
                DurableState::Locked {
                    txn: self.txns.name(txn.0).to_string(),
                    outcome,
                },
                run.delivery_count,
            ),
        };
        StateRun {
            first,
            last,
            state,
            delivery_count,
        }
    }
}

/// The delivery count from which a batch is throttled: max(2, ⌈limit / 2⌉) (module docs).
pub fn throttle_threshold(limit: u16) -> u16 {
    SHARE_THROTTLE_DELIVERY_COUNT_MIN.max(limit.div_ceil(2))
}

/// Where a released (or expired) record goes: ARCHIVED once delivered `limit` times.
fn released_state(delivery_count: u16, limit: u16) -> RecordState {
    if delivery_count >= limit {
        RecordState::Archived
    } else {
        RecordState::Available
    }
}

fn push_acquired(out: &mut Vec<AcquiredRange>, range: AcquiredRange) {
    if let Some(prev) = out.last_mut() {
        assert!(prev.last < range.first);
        if prev.last + 1 == range.first && prev.delivery_count == range.delivery_count {
            prev.last = range.last;
            return;
        }
    }
    out.push(range);
}

/// Shape checks that need no state: ranges, types, order.
fn validate_batches(batches: &[AckBatch], context: AckContext) -> Result<(), ShareError> {
    let mut floor = 0i64;
    for batch in batches {
        if batch.first < floor || batch.first > batch.last {
            return Err(ShareError::invalid_request(format!(
                "acknowledgement batch [{}, {}] is empty, negative, unsorted or overlapping",
                batch.first, batch.last
            )));
        }
        let n = span(batch.first, batch.last);
        if batch.types.is_empty() || (batch.types.len() != 1 && batch.types.len() as u64 != n) {
            return Err(ShareError::invalid_request(format!(
                "acknowledgement batch [{}, {}] has {} types; expected 1 or {n}",
                batch.first,
                batch.last,
                batch.types.len()
            )));
        }
        if context == AckContext::Transaction {
            if let Some(t) = batch
                .types
                .iter()
                .find(|t| matches!(t, AcknowledgeType::Release | AcknowledgeType::Renew))
            {
                return Err(ShareError::invalid_request(format!(
                    "{t:?} is not allowed inside a transaction"
                )));
            }
        }
        floor = batch
            .last
            .checked_add(1)
            .ok_or_else(|| ShareError::invalid_request("offset overflow"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
