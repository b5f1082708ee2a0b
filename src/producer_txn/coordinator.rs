//! The transaction coordinator of producer transactions: a synchronous, I/O-free state machine
//! of transactional ids (Kafka's `TransactionCoordinator` + `TransactionMetadata`, transaction
//! version 1 semantics).
//!
//! Ownership: one [`TxnCoordinator`] per shard; a transactional id lives on the shard its name
//! hashes to (`model::group_shard`, as groups). The shard core (`shard::exec::producer_txn`) feeds it
//! requests with the time, appends the records it emits ([`TxnCoordinator::take_records`]) to
//! the shard's journal, answers a request only once they are durable, and sends the markers it
//! hands out ([`TxnCoordinator::take_marker_work`]) to the participants.
//!
//! States and the one transition table (Kafka's `TransactionState.validPreviousStates`):
//!
//! ```text
//!   to                 from
//!   Empty              Empty, CompleteCommit, CompleteAbort
//!   Ongoing            Ongoing, Empty, CompleteCommit, CompleteAbort
//!   PrepareCommit      Ongoing
//!   PrepareAbort       Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort
//!   CompleteCommit     PrepareCommit
//!   CompleteAbort      PrepareAbort
//!   PrepareEpochFence  Ongoing
//!   Dead               Empty, CompleteCommit, CompleteAbort
//! ```
//!
//! PrepareEpochFence and Dead are never rested in: a fence (a timeout, or a new producer's
//! InitProducerId while a transaction is ongoing) goes Ongoing → PrepareEpochFence →
//! PrepareAbort in one step with the epoch bumped, and Dead (an id idle past
//! `transactional.id.expiration.ms`) is journalled as a tombstone and forgotten.
//!
//! Invariants (asserted):
//! - every state change goes through [`TxnState::can_follow`];
//! - a transaction in PrepareCommit/PrepareAbort has a [`MarkerJob`], and only those do;
//! - Ongoing has at least one partition or group; Empty and Complete* have none;
//! - `producer_epoch >= 0` for every id the coordinator answers for.
//!
//! Markers: a PrepareCommit/PrepareAbort job is created *unarmed*; the runtime arms it once the
//! Prepare* record is durable ([`TxnCoordinator::arm`]); only armed jobs are handed out, each at
//! most once at a time; a participant that failed is retried with doubling backoff; when every
//! participant has answered, the transaction becomes CompleteCommit/CompleteAbort (journalled).
//! After a restart every Prepare* transaction's job is armed at once (its record was durable).

use std::collections::{BTreeMap, BTreeSet};

use super::{TxnMarker, TxnOutcome};
use crate::journal::entries::{Entry, ProducerTransaction};
use crate::journal::Recovered;

/// Kafka's `Short.MaxValue - 1`: an epoch at or past this is exhausted and a new producer id is
/// allocated instead of bumping it.
pub const EPOCH_EXHAUSTED: i16 = i16::MAX - 1;
/// No producer id / epoch (Kafka's -1).
pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// The coordinator epoch written into markers. There is one broker and no transaction-log
/// partition that changes leaders, so it never changes.
pub const COORDINATOR_EPOCH: i32 = 0;

/// A transactional id's state (Kafka's `TransactionState`, with its ids and names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// Kafka's id of the state (as in its transaction log).
    pub fn id(self) -> u8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: u8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    /// Kafka's name (DescribeTransactions, ListTransactions and its state filter).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The transition table: may a transaction in `from` move to `self`?
    pub fn can_follow(self, from: TxnState) -> bool {
        use TxnState::*;
        match self {
            Empty => matches!(from, Empty | CompleteCommit | CompleteAbort),
            Ongoing => matches!(from, Ongoing | Empty | CompleteCommit | CompleteAbort),
            PrepareCommit => from == Ongoing,
            PrepareAbort => matches!(
                from,
                Ongoing | PrepareEpochFence | Empty | CompleteCommit | CompleteAbort
            ),
            CompleteCommit => from == PrepareCommit,
            CompleteAbort => from == PrepareAbort,
            PrepareEpochFence => from == Ongoing,
            Dead => matches!(from, Empty | CompleteCommit | CompleteAbort),
        }
    }

    fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// Why a coordinator request was refused; the Kafka code is chosen at the edge
/// (`CoordError::code` and `CoordError::code_for`, in `server::codes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordError {
    /// The transaction is being completed (markers in flight) or fenced: retry later.
    ConcurrentTransactions,
    /// The request's epoch is older than the id's: a newer producer took over.
    ProducerFenced,
    /// The operation is not possible in the transaction's state.
    InvalidTxnState(String),
    /// No such transactional id, or it belongs to another producer id.
    InvalidProducerIdMapping,
    /// The transaction timeout is not in `1..=transaction.max.timeout.ms`.
    InvalidTransactionTimeout,
    /// DescribeTransactions of an unknown id.
    TransactionalIdNotFound,
    /// KIP-939 two-phase commit asked for while `transaction.two.phase.commit.enable` is off.
    TwoPhaseCommitDisabled,
    /// Not an error a client sees: the request needs a fresh producer id (the id is new or its
    /// epochs are exhausted). The caller allocates one and repeats the request with it.
    NeedProducerId,
}

impl CoordError {
    pub fn message(&self) -> String {
        match self {
            CoordError::ConcurrentTransactions => "the transaction is being completed".into(),
            CoordError::ProducerFenced => "the producer epoch was fenced by a newer one".into(),
            CoordError::InvalidTxnState(m) => m.clone(),
            CoordError::InvalidProducerIdMapping => {
                "the producer id does not match the transactional id".into()
            }
            CoordError::InvalidTransactionTimeout => {
                "the transaction timeout is larger than transaction.max.timeout.ms".into()
            }
            CoordError::TransactionalIdNotFound => "unknown transactional id".into(),
            CoordError::TwoPhaseCommitDisabled => {
                "two-phase commit needs transaction.two.phase.commit.enable=true".into()
            }
            CoordError::NeedProducerId => "a new producer id is needed".into(),
        }
    }
}

/// The coordinator's configuration (broker configs of the same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoordConfig {
    /// `transaction.max.timeout.ms` (Kafka's default 900000).
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms` (Kafka's default 604800000).
    pub id_expiration_ms: i64,
    /// `transaction.two.phase.commit.enable` (Kafka's default false).
    pub two_phase_commit_enable: bool,
    /// First retry delay of a participant that failed a marker; doubles up to the max.
    pub marker_retry_backoff_ms: i64,
    pub marker_retry_backoff_max_ms: i64,
}

impl Default for CoordConfig {
    fn default() -> CoordConfig {
        CoordConfig {
            max_timeout_ms: crate::constants::TXN_MAX_TIMEOUT_MS_DEFAULT,
            id_expiration_ms: crate::constants::TXN_ID_EXPIRATION_MS_DEFAULT,
            two_phase_commit_enable: false,
            marker_retry_backoff_ms: crate::constants::TXN_MARKER_RETRY_BACKOFF_MS,
            marker_retry_backoff_max_ms: crate::constants::TXN_MARKER_RETRY_BACKOFF_MAX_MS,
        }
    }
}

impl CoordConfig {
    /// The defaults, with `transaction.max.timeout.ms`, `transactional.id.expiration.ms` and
    /// `transaction.two.phase.commit.enable` from the broker's static configuration (validated by the config file's reader).
    pub fn from_broker_defaults(defaults: &BTreeMap<String, String>) -> CoordConfig {
        let mut config = CoordConfig::default();
        if let Some(ms) = defaults
            .get("transaction.max.timeout.ms")
            .and_then(|v| v.parse().ok())
        {
            config.max_timeout_ms = ms;
        }
        if let Some(ms) = defaults
            .get("transactional.id.expiration.ms")
            .and_then(|v| v.parse().ok())
        {
            config.id_expiration_ms = ms;
        }
        if let Some(v) = defaults.get("transaction.two.phase.commit.enable") {
            config.two_phase_commit_enable = v == "true";
        }
        config
    }
}

/// One transactional id's metadata (Kafka's `TransactionMetadata`). This is also the journal
/// record: the latest record of an id replaces the earlier ones; state Dead is a tombstone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The producer id before the last rotation (KIP-360), or -1.
    pub last_producer_id: i64,
    /// The epoch before the last bump by InitProducerId (to recognise its retry), or -1.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Partitions in the transaction, by topic name (as AddPartitionsToTxn names them).
    pub partitions: BTreeSet<(String, i32)>,
    /// Consumer groups whose offsets are in the transaction (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    /// When the current (or last) transaction started; -1 if none.
    pub start_ms: i64,
    pub update_ms: i64,
    /// KIP-939: the producer asked for two-phase commit (no timeout abort).
    pub two_phase: bool,
}

impl TxnMetadata {
    fn check_invariants(&self) {
        assert!(self.producer_epoch >= 0 || self.state == TxnState::Dead);
        match self.state {
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort => {}
            TxnState::PrepareEpochFence => panic!("PrepareEpochFence is never rested in"),
            _ => assert!(
                self.partitions.is_empty() && self.groups.is_empty(),
                "{} with participants",
                self.state.name()
            ),
        }
    }

    fn transition(&mut self, to: TxnState, now_ms: i64) {
        assert!(
            to.can_follow(self.state),
            "illegal transaction transition {} -> {} ({})",
            self.state.name(),
            to.name(),
            self.transactional_id
        );
        self.state = to;
        self.update_ms = now_ms;
    }

    /// Bumps the epoch, or rotates to `fresh` when exhausted (`NeedProducerId` without one).
    fn bump_epoch(&mut self, fresh: Option<i64>) -> Result<(), CoordError> {
        if self.producer_epoch >= EPOCH_EXHAUSTED || self.producer_epoch < 0 {
            // The next epoch would be exhausted (or there is none yet): a new producer id.
            let fresh = fresh.ok_or(CoordError::NeedProducerId)?;
            assert_ne!(fresh, self.producer_id);
            self.last_producer_id = if self.producer_epoch < 0 {
                NO_PRODUCER_ID
            } else {
                self.producer_id
            };
            self.producer_id = fresh;
            self.producer_epoch = 0;
            self.last_producer_epoch = NO_PRODUCER_EPOCH;
        } else {
            self.last_producer_epoch = self.producer_epoch;
            self.producer_epoch += 1;
        }
        Ok(())
    }
}

impl TxnMetadata {
    /// The journal record of this metadata.
    pub fn to_record(&self) -> ProducerTransaction {
        ProducerTransaction {
            transactional_id: self.transactional_id.clone(),
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            last_producer_id: self.last_producer_id,
            last_producer_epoch: self.last_producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state.id(),
            partitions: self.partitions.iter().cloned().collect(),
            groups: self.groups.iter().cloned().collect(),
            start_time_ms: self.start_ms,
            update_time_ms: self.update_ms,
            two_phase: self.two_phase,
        }
    }

    /// The metadata a journal record holds (its state is validated by the decoder).
    pub fn from_record(r: &ProducerTransaction) -> TxnMetadata {
        TxnMetadata {
            transactional_id: r.transactional_id.clone(),
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            last_producer_id: r.last_producer_id,
            last_producer_epoch: r.last_producer_epoch,
            timeout_ms: r.timeout_ms,
            state: TxnState::from_id(r.state).expect("the decoder validates states"),
            partitions: r.partitions.iter().cloned().collect(),
            groups: r.groups.iter().cloned().collect(),
            start_ms: r.start_time_ms,
            update_ms: r.update_time_ms,
            two_phase: r.two_phase,
        }
    }
}

/// An InitProducerId with a transactional id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitRequest {
    pub transactional_id: String,
    pub timeout_ms: i32,
    /// v3+: the producer's current id and epoch (KIP-360), -1 if none.
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// KIP-939 (v6): two-phase commit, and keep an ongoing (prepared) transaction.
    pub enable_2pc: bool,
    pub keep_prepared_txn: bool,
    /// A freshly allocated producer id, after a [`CoordError::NeedProducerId`].
    pub fresh_producer_id: Option<i64>,
}

/// The answer to an [`InitRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitAnswer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// KIP-939 keepPreparedTxn: the kept transaction's producer id and epoch, else -1.
    pub ongoing_producer_id: i64,
    pub ongoing_producer_epoch: i16,
}

/// Markers to send for one transaction: the partitions and groups that have not answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerWork {
    pub transactional_id: String,
    pub marker: TxnMarker,
    pub partitions: Vec<(String, i32)>,
    pub groups: Vec<String>,
}

/// What a job's participants answered (the runtime reports them back).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarkerResults {
    pub partitions_done: Vec<(String, i32)>,
    pub groups_done: Vec<String>,
}

/// The markers of one Prepare* transaction still to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerJob {
    pub marker: TxnMarker,
    pub partitions: BTreeSet<(String, i32)>,
    pub groups: BTreeSet<String>,
    /// The Prepare* record is durable: the markers may be sent.
    pub armed: bool,
    pub in_flight: bool,
    pub next_attempt_ms: i64,
    pub backoff_ms: i64,
    pub attempts: u32,
}

/// ListTransactions' filters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListFilter {
    pub states: Vec<String>,
    pub producer_ids: Vec<i64>,
    /// < 0: none; else only transactions running at least this long (Ongoing since).
    pub duration_ms: i64,
}

impl Default for ListFilter {
    fn default() -> ListFilter {
        ListFilter {
            states: Vec::new(),
            producer_ids: Vec::new(),
            duration_ms: -1,
        }
    }
}

/// The transaction coordinator of one shard.
#[derive(Debug, Default)]
pub struct TxnCoordinator {
    pub config: CoordConfig,
    txns: BTreeMap<String, TxnMetadata>,
    jobs: BTreeMap<String, MarkerJob>,
    /// Records to journal, in order.
    records: Vec<TxnMetadata>,
}

impl TxnCoordinator {
    pub fn new(config: CoordConfig) -> TxnCoordinator {
        TxnCoordinator {
            config,
            ..TxnCoordinator::default()
        }
    }

    pub fn get(&self, id: &str) -> Option<&TxnMetadata> {
        self.txns.get(id)
    }

    pub fn len(&self) -> usize {
        self.txns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    pub fn job(&self, id: &str) -> Option<&MarkerJob> {
        self.jobs.get(id)
    }

    /// The records to journal since the last call, in order.
    pub fn take_records(&mut self) -> Vec<TxnMetadata> {
        std::mem::take(&mut self.records)
    }

    /// The journal entries to append since the last call, in order.
    pub fn take_entries(&mut self) -> Vec<Entry> {
        self.take_records()
            .iter()
            .map(|m| Entry::ProducerTransaction(m.to_record()))
            .collect()
    }

    /// The whole durable state as journal records (for a journal snapshot; call after
    /// [`Self::take_entries`]).
    pub fn durable_records(&self) -> Vec<ProducerTransaction> {
        self.txns.values().map(TxnMetadata::to_record).collect()
    }

    /// Rebuilds the coordinator from a recovered journal: the snapshot's records, then the
    /// entries in order. Call [`Self::recovered`] next to send the markers of prepared ones.
    pub fn restore(recovered: &Recovered, config: CoordConfig) -> TxnCoordinator {
        let mut coordinator = TxnCoordinator::new(config);
        let snapshot = recovered
            .snapshot
            .iter()
            .flat_map(|s| s.state.producer_transactions.iter());
        let entries = recovered.entries.iter().filter_map(|e| match &e.entry {
            Entry::ProducerTransaction(t) => Some(t),
            _ => None,
        });
        for record in snapshot.chain(entries) {
            coordinator.replay(&TxnMetadata::from_record(record));
        }
        coordinator
    }

    /// The whole durable state (for a journal snapshot).
    pub fn snapshot(&self) -> Vec<TxnMetadata> {
        self.txns.values().cloned().collect()
    }

    fn persist(&mut self, id: &str) {
        let meta = self.txns.get(id).expect("persisting a known id");
        meta.check_invariants();
        assert_eq!(meta.state.is_prepare(), self.jobs.contains_key(id));
        self.records.push(meta.clone());
    }

    /// Recovery: applies one journalled record (the latest of an id wins; Dead forgets it).
    pub fn replay(&mut self, record: &TxnMetadata) {
        if record.state == TxnState::Dead {
            self.txns.remove(&record.transactional_id);
            self.jobs.remove(&record.transactional_id);
            return;
        }
        record.check_invariants();
        self.txns
            .insert(record.transactional_id.clone(), record.clone());
        self.jobs.remove(&record.transactional_id);
    }

    /// Recovery done: every transaction found in PrepareCommit/PrepareAbort has its markers
    /// sent again (armed at once: its record is durable). Returns their ids.
    pub fn recovered(&mut self, now_ms: i64) -> Vec<String> {
        let ids: Vec<String> = self
            .txns
            .values()
            .filter(|m| m.state.is_prepare())
            .map(|m| m.transactional_id.clone())
            .collect();
        for id in &ids {
            self.start_job(id, now_ms);
            self.jobs.get_mut(id).expect("just started").armed = true;
        }
        ids
    }

    fn start_job(&mut self, id: &str, now_ms: i64) {
        let meta = &self.txns[id];
        let outcome = match meta.state {
            TxnState::PrepareCommit => TxnOutcome::Commit,
            TxnState::PrepareAbort => TxnOutcome::Abort,
            other => panic!("markers for a transaction in {}", other.name()),
        };
        let job = MarkerJob {
            marker: TxnMarker {
                producer_id: meta.producer_id,
                producer_epoch: meta.producer_epoch,
                outcome,
                coordinator_epoch: COORDINATOR_EPOCH,
            },
            partitions: meta.partitions.clone(),
            groups: meta.groups.clone(),
            armed: false,
            in_flight: false,
            next_attempt_ms: now_ms,
            backoff_ms: self.config.marker_retry_backoff_ms,
            attempts: 0,
        };
        let previous = self.jobs.insert(id.to_string(), job);
        assert!(previous.is_none(), "two marker jobs for {id}");
    }

    fn check_timeout(&self, timeout_ms: i32) -> Result<(), CoordError> {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(CoordError::InvalidTransactionTimeout);
        }
        Ok(())
    }

    /// InitProducerId with a transactional id (Kafka's `handleInitProducerId`).
    pub fn init_producer_id(
        &mut self,
        req: &InitRequest,
        now_ms: i64,
    ) -> Result<InitAnswer, CoordError> {
        if req.enable_2pc && !self.config.two_phase_commit_enable {
            return Err(CoordError::TwoPhaseCommitDisabled);
        }
        if !req.enable_2pc {
            self.check_timeout(req.timeout_ms)?;
        }
        let timeout_ms = if req.enable_2pc {
            self.config.max_timeout_ms
        } else {
            req.timeout_ms
        };
        let id = req.transactional_id.as_str();
        let Some(current) = self.txns.get(id) else {
            let fresh = req.fresh_producer_id.ok_or(CoordError::NeedProducerId)?;
            let meta = TxnMetadata {
                transactional_id: id.to_string(),
                producer_id: fresh,
                producer_epoch: 0,
                last_producer_id: NO_PRODUCER_ID,
                last_producer_epoch: NO_PRODUCER_EPOCH,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                groups: BTreeSet::new(),
                start_ms: -1,
                update_ms: now_ms,
                two_phase: req.enable_2pc,
            };
            self.txns.insert(id.to_string(), meta.clone());
            self.persist(id);
            return Ok(InitAnswer {
                producer_id: meta.producer_id,
                producer_epoch: meta.producer_epoch,
                ongoing_producer_id: NO_PRODUCER_ID,
                ongoing_producer_epoch: NO_PRODUCER_EPOCH,
            });
        };
        // KIP-360: a producer that names its id and epoch must be the current one, or retry
        // the call whose answer it lost (a bump: its epoch is the last one; a rotation: its
        // id is the last one and its epoch exhausted).
        let expected =
            (req.producer_id != NO_PRODUCER_ID).then_some((req.producer_id, req.producer_epoch));
        if let Some((pid, epoch)) = expected {
            if pid == current.last_producer_id && epoch >= EPOCH_EXHAUSTED {
                return Ok(self.answer(id));
            }
            if pid != current.producer_id {
                return Err(CoordError::ProducerFenced);
            }
            if epoch != current.producer_epoch && epoch != NO_PRODUCER_EPOCH {
                if epoch == current.last_producer_epoch && !current.state.is_prepare() {
                    return Ok(self.answer(id));
                }
                return Err(CoordError::ProducerFenced);
            }
        }
        match current.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Err(CoordError::ConcurrentTransactions)
            }
            TxnState::Ongoing if req.keep_prepared_txn && req.enable_2pc => {
                // KIP-939: keep the prepared transaction, give the new producer instance the
                // next epoch; its EndTxn decides the kept transaction.
                let ongoing = (current.producer_id, current.producer_epoch);
                let meta = self.txns.get_mut(id).expect("present");
                meta.bump_epoch(req.fresh_producer_id)?;
                meta.timeout_ms = timeout_ms;
                meta.two_phase = true;
                meta.transition(TxnState::Ongoing, now_ms);
                self.persist(id);
                let mut answer = self.answer(id);
                answer.ongoing_producer_id = ongoing.0;
                answer.ongoing_producer_epoch = ongoing.1;
                Ok(answer)
            }
            TxnState::Ongoing => {
                // A new producer instance while a transaction is ongoing: fence the old one
                // (epoch bump) and abort; the client retries until the abort completed.
                self.fence_and_abort(id, now_ms);
                Err(CoordError::ConcurrentTransactions)
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let meta = self.txns.get_mut(id).expect("present");
                meta.bump_epoch(req.fresh_producer_id)?;
                meta.timeout_ms = timeout_ms;
                meta.two_phase = req.enable_2pc;
                meta.transition(TxnState::Empty, now_ms);
                self.persist(id);
                Ok(self.answer(id))
            }
            TxnState::Dead | TxnState::PrepareEpochFence => {
                unreachable!("{} is never rested in", current.state.name())
            }
        }
    }

    fn answer(&self, id: &str) -> InitAnswer {
        let meta = &self.txns[id];
        InitAnswer {
            producer_id: meta.producer_id,
            producer_epoch: meta.producer_epoch,
            ongoing_producer_id: NO_PRODUCER_ID,
            ongoing_producer_epoch: NO_PRODUCER_EPOCH,
        }
    }

    /// Ongoing → PrepareEpochFence → PrepareAbort with the epoch bumped (unless exhausted, as
    /// Kafka), and a marker job (unarmed).
    fn fence_and_abort(&mut self, id: &str, now_ms: i64) {
        let meta = self.txns.get_mut(id).expect("present");
        meta.transition(TxnState::PrepareEpochFence, now_ms);
        if meta.producer_epoch < EPOCH_EXHAUSTED {
            meta.producer_epoch += 1;
        }
        meta.last_producer_epoch = NO_PRODUCER_EPOCH;
        meta.transition(TxnState::PrepareAbort, now_ms);
        self.start_job(id, now_ms);
        self.persist(id);
    }

    /// Checks a client's producer id and epoch against the id's (AddPartitionsToTxn,
    /// AddOffsetsToTxn, EndTxn).
    fn validate(&self, id: &str, pid: i64, epoch: i16) -> Result<&TxnMetadata, CoordError> {
        let meta = self
            .txns
            .get(id)
            .ok_or(CoordError::InvalidProducerIdMapping)?;
        if meta.producer_id != pid {
            return Err(CoordError::InvalidProducerIdMapping);
        }
        if meta.producer_epoch != epoch {
            return Err(CoordError::ProducerFenced);
        }
        Ok(meta)
    }

    /// AddPartitionsToTxn (client form) and AddOffsetsToTxn: adds participants, starting a
    /// transaction if none is ongoing.
    pub fn add_participants(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        groups: &[String],
        now_ms: i64,
    ) -> Result<(), CoordError> {
        let meta = self.validate(id, pid, epoch)?;
        match meta.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(CoordError::ConcurrentTransactions)
            }
            TxnState::Ongoing
                if partitions.iter().all(|p| meta.partitions.contains(p))
                    && groups.iter().all(|g| meta.groups.contains(g)) =>
            {
                return Ok(());
            }
            _ => {}
        }
        if partitions.is_empty() && groups.is_empty() {
            return Ok(());
        }
        let meta = self.txns.get_mut(id).expect("present");
        if meta.state != TxnState::Ongoing {
            meta.start_ms = now_ms;
        }
        meta.partitions.extend(partitions.iter().cloned());
        meta.groups.extend(groups.iter().cloned());
        meta.transition(TxnState::Ongoing, now_ms);
        self.persist(id);
        Ok(())
    }

    /// AddPartitionsToTxn v4+ verifyOnly: is each partition in the ongoing transaction?
    pub fn verify_partitions(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Result<(), CoordError>>, CoordError> {
        let meta = self.validate(id, pid, epoch)?;
        Ok(partitions
            .iter()
            .map(|p| {
                if meta.state == TxnState::Ongoing && meta.partitions.contains(p) {
                    Ok(())
                } else {
                    Err(CoordError::InvalidTxnState(format!(
                        "{}-{} is not in the transaction",
                        p.0, p.1
                    )))
                }
            })
            .collect())
    }

    /// EndTxn (Kafka's `handleEndTransaction`, transaction version 1).
    pub fn end_txn(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        outcome: TxnOutcome,
        now_ms: i64,
    ) -> Result<(), CoordError> {
        let meta = self.validate(id, pid, epoch)?;
        let wrong = |state: TxnState| {
            Err(CoordError::InvalidTxnState(format!(
                "{} is not possible in state {}",
                match outcome {
                    TxnOutcome::Commit => "commit",
                    TxnOutcome::Abort => "abort",
                },
                state.name()
            )))
        };
        match (meta.state, outcome) {
            (TxnState::Ongoing, _) => {
                let to = match outcome {
                    TxnOutcome::Commit => TxnState::PrepareCommit,
                    TxnOutcome::Abort => TxnState::PrepareAbort,
                };
                let meta = self.txns.get_mut(id).expect("present");
                meta.transition(to, now_ms);
                self.start_job(id, now_ms);
                self.persist(id);
                Ok(())
            }
            // The retry of an EndTxn whose answer was lost.
            (TxnState::CompleteCommit, TxnOutcome::Commit)
            | (TxnState::CompleteAbort, TxnOutcome::Abort) => Ok(()),
            // Kafka sets the Complete* transition pending while the markers are written, so
            // either outcome is CONCURRENT_TRANSACTIONS then (measured against Kafka 4.4).
            (TxnState::PrepareCommit | TxnState::PrepareAbort, _) => {
                Err(CoordError::ConcurrentTransactions)
            }
            (state, _) => wrong(state),
        }
    }

    /// Aborts (with an epoch bump) every Ongoing transaction past its timeout; KIP-939
    /// two-phase transactions never time out. Returns the ids aborted.
    pub fn abort_timed_out(&mut self, now_ms: i64) -> Vec<String> {
        let ids: Vec<String> = self
            .txns
            .values()
            .filter(|m| {
                m.state == TxnState::Ongoing
                    && !m.two_phase
                    && m.start_ms + i64::from(m.timeout_ms) <= now_ms
            })
            .map(|m| m.transactional_id.clone())
            .collect();
        for id in &ids {
            self.fence_and_abort(id, now_ms);
        }
        ids
    }

    /// Forgets ids idle past `transactional.id.expiration.ms` (a Dead tombstone each).
    pub fn expire_ids(&mut self, now_ms: i64) -> Vec<String> {
        let ids: Vec<String> = self
            .txns
            .values()
            .filter(|m| {
                matches!(
                    m.state,
                    TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                ) && m.update_ms + self.config.id_expiration_ms <= now_ms
            })
            .map(|m| m.transactional_id.clone())
            .collect();
        for id in &ids {
            let mut meta = self.txns.remove(id).expect("present");
            meta.transition(TxnState::Dead, now_ms);
            self.records.push(meta);
        }
        ids
    }

    /// The Prepare* record of `id` is durable: its markers may be sent.
    pub fn arm(&mut self, id: &str) {
        if let Some(job) = self.jobs.get_mut(id) {
            job.armed = true;
        }
    }

    /// Ids whose marker jobs wait for their Prepare* record to be durable.
    pub fn unarmed(&self) -> Vec<String> {
        self.jobs
            .iter()
            .filter(|(_, j)| !j.armed)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The earliest time a job not in flight wants to be sent (for the runtime's timer).
    pub fn next_marker_due(&self) -> Option<i64> {
        self.jobs
            .values()
            .filter(|j| j.armed && !j.in_flight)
            .map(|j| j.next_attempt_ms)
            .min()
    }

    /// Armed jobs that are due and not in flight, now marked in flight.
    pub fn take_marker_work(&mut self, now_ms: i64) -> Vec<MarkerWork> {
        let mut work = Vec::new();
        for (id, job) in self.jobs.iter_mut() {
            if job.armed && !job.in_flight && job.next_attempt_ms <= now_ms {
                job.in_flight = true;
                job.attempts += 1;
                work.push(MarkerWork {
                    transactional_id: id.clone(),
                    marker: job.marker,
                    partitions: job.partitions.iter().cloned().collect(),
                    groups: job.groups.iter().cloned().collect(),
                });
            }
        }
        work
    }

    /// The participants of a [`MarkerWork`] answered. Returns true if the transaction is
    /// complete now (its CompleteCommit/CompleteAbort record is to be journalled).
    pub fn markers_written(
        &mut self,
        id: &str,
        marker: TxnMarker,
        results: &MarkerResults,
        now_ms: i64,
    ) -> bool {
        let Some(job) = self.jobs.get_mut(id) else {
            return false;
        };
        assert_eq!(job.marker, marker, "marker results for another job of {id}");
        assert!(job.in_flight, "marker results for a job not in flight");
        job.in_flight = false;
        for p in &results.partitions_done {
            job.partitions.remove(p);
        }
        for g in &results.groups_done {
            job.groups.remove(g);
        }
        if !job.partitions.is_empty() || !job.groups.is_empty() {
            job.next_attempt_ms = now_ms + job.backoff_ms;
            job.backoff_ms = (job.backoff_ms * 2).min(self.config.marker_retry_backoff_max_ms);
            return false;
        }
        self.jobs.remove(id);
        let meta = self.txns.get_mut(id).expect("a job's transaction");
        let to = match marker.outcome {
            TxnOutcome::Commit => TxnState::CompleteCommit,
            TxnOutcome::Abort => TxnState::CompleteAbort,
        };
        meta.transition(to, now_ms);
        meta.partitions.clear();
        meta.groups.clear();
        self.persist(id);
        true
    }

    /// ListTransactions.
    pub fn list(&self, filter: &ListFilter, now_ms: i64) -> Vec<&TxnMetadata> {
        self.txns
            .values()
            .filter(|m| {
                filter.states.is_empty() || filter.states.iter().any(|s| s == m.state.name())
            })
            .filter(|m| {
                filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id)
            })
            .filter(|m| {
                filter.duration_ms < 0
                    || (m.state == TxnState::Ongoing && now_ms - m.start_ms >= filter.duration_ms)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
