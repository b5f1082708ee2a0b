//! The messages a handler sends to the shard that owns the state ([`ShardOp`]) and the
//! replies ([`ShardReply`]). All are `Send`: they cross threads over the runtime's mesh.
//!
//! A call that gets no reply of its own kind gets [`ShardReply::Failed`] with a typed
//! [`CallError`]; the handler chooses the Kafka code (usually [`CallError::code`]). A reply of
//! another kind is a bug: [`ShardReply::unexpected`] logs it and turns it into a `CallError`,
//! so no handler panics on it.
//!
//! Partition operations name the topic by name *and* id: the owner checks both against its
//! registry snapshot, so an operation for a topic that was deleted (and perhaps re-created
//! under the same name) is refused rather than applied to the wrong log.

use super::registry::{TopicError, TopicRegistry};
use super::share_group::{GroupDeletion, Heartbeat, HeartbeatAnswer, ShareGroup};
use super::share_session::{SessionError, SessionKey, SessionOutcome};
use crate::config::ConfigError;
use crate::log::LogErrorKind;
use crate::model::TopicPartition;
use crate::producer_txn::share::ShareLockError;
use crate::share::ShareError;
use crate::share::{AckBatch, AcquiredRange};
use crate::share_txn::TxnError;
use crate::share_txn::{TxnRecord, TxnState};
use bytes::Bytes;
use std::sync::Arc;
use uuid::Uuid;

/// A topic-partition as operations name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PartitionRef {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

impl PartitionRef {
    /// The partition's key (its topic's id and its index).
    pub fn key(&self) -> TopicPartition {
        TopicPartition::new(self.topic_id, self.partition)
    }
}

/// Append one produced batch to one partition.
#[derive(Clone, Debug)]
pub struct ProduceOp {
    pub partition: PartitionRef,
    pub records: Bytes,
    /// -1 (all: wait for the durable flush), 0 or 1.
    pub acks: i16,
    /// How long to wait for the durable flush before answering REQUEST_TIMED_OUT.
    pub timeout_ms: u64,
    /// KIP-890 part 1: the verification guard the coordinator confirmed for this batch
    /// (`None`: not verified; a transactional batch that would open its producer's transaction
    /// in the partition is then answered with a guard to verify, not appended).
    pub verification_guard: Option<u64>,
}

/// Why a produce to one partition was not answered as appended, in the core's words; the Kafka
/// code is chosen at the edge (`server::codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProduceError {
    /// The partition is not served here (unknown, or its log could not be opened).
    Partition(PartitionError),
    /// The log refused the batch (malformed, a CRC mismatch, larger than the topic's
    /// `max.message.bytes`) or failed to append it.
    Log(crate::log::LogErrorKind),
    /// A client's batch with the control attribute.
    ControlBatch,
    /// A transactional batch without a producer id.
    NoProducerId,
    /// A batch with a producer id but no base sequence.
    NoSequence,
    /// The partition's transaction state refused the batch (`crate::producer_txn::partition`).
    Txn(crate::producer_txn::partition::TxnError),
    /// The producer's epoch or sequence refused the batch (`shard::producer_state`).
    Producer(super::producer_state::ProducerError),
    /// Appended, but the log cannot be made durable (it is poisoned, the flush failed or was
    /// abandoned).
    NotDurable,
    /// Appended, but not durable within the request's timeout.
    TimedOut,
}

/// Result of a produce to one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProduceResult {
    /// Why the batch is not appended (`None`: appended, a duplicate, or to verify).
    pub error: Option<ProduceError>,
    pub error_message: Option<String>,
    /// Offset of the first record of the batch (of the original batch for a duplicate), or -1.
    pub base_offset: i64,
    pub log_start_offset: i64,
    /// Not appended: the batch would open its producer's transaction in the partition; verify
    /// the partition with the transaction coordinator and send it again with this guard.
    pub verification_guard: Option<u64>,
}

impl ProduceResult {
    pub fn error(error: ProduceError, message: impl Into<String>) -> ProduceResult {
        ProduceResult {
            error: Some(error),
            error_message: Some(message.into()),
            base_offset: -1,
            log_start_offset: -1,
            verification_guard: None,
        }
    }

    /// Not appended: to verify with the transaction coordinator and send again with `guard`.
    pub fn verify(guard: u64) -> ProduceResult {
        ProduceResult {
            error: None,
            error_message: Some("verify with the transaction coordinator".into()),
            base_offset: -1,
            log_start_offset: -1,
            verification_guard: Some(guard),
        }
    }

    /// Appended at `base_offset` (or, a duplicate, appended there before).
    pub fn appended(base_offset: i64, log_start_offset: i64) -> ProduceResult {
        ProduceResult {
            error: None,
            error_message: None,
            base_offset,
            log_start_offset,
            verification_guard: None,
        }
    }
}

/// Read from one partition.
#[derive(Clone, Debug)]
pub struct FetchPartitionOp {
    pub partition: PartitionRef,
    pub fetch_offset: i64,
    pub max_bytes: usize,
}

/// Read from several partitions of one shard, at most `max_bytes` in total (the first
/// non-empty partition may exceed it by one batch, so a consumer always progresses).
#[derive(Clone, Debug)]
pub struct FetchOp {
    pub partitions: Vec<FetchPartitionOp>,
    pub max_bytes: usize,
    /// isolation_level 1: read only below the last stable offset, and report the aborted
    /// transactions of what is returned.
    pub read_committed: bool,
}

/// Why a fetch could not read one partition; the Kafka code is chosen at the edge
/// (`server::codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchError {
    /// The partition is not served here (unknown, or its log could not be opened).
    Partition(PartitionError),
    /// The log refused the read (`OffsetOutOfRange`: the fetch offset is below the log start or
    /// past the high watermark) or failed.
    Log(crate::log::LogErrorKind),
}

/// What one partition returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedPartition {
    pub error: Option<FetchError>,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub records: Bytes,
    /// For read_committed: the aborted transactions overlapping the returned records.
    pub aborted: Vec<crate::producer_txn::partition::AbortedTxn>,
}

impl FetchedPartition {
    /// Nothing read and no offsets known (-1), without an error of the core's: what the edge
    /// answers with its own code.
    pub fn empty() -> FetchedPartition {
        FetchedPartition {
            error: None,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            records: Bytes::new(),
            aborted: Vec::new(),
        }
    }

    pub fn error(error: FetchError) -> FetchedPartition {
        FetchedPartition {
            error: Some(error),
            ..FetchedPartition::empty()
        }
    }
}

/// Look up offsets by timestamp (or the special timestamps -1 latest, -2 earliest, ...).
#[derive(Clone, Debug)]
pub struct ListOffsetsOp {
    pub partitions: Vec<(PartitionRef, i64)>,
    /// isolation_level 1: latest is the last stable offset, and nothing at or past it is found.
    pub read_committed: bool,
}

/// One ListOffsets answer (-1, -1: no such offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListedOffset {
    pub timestamp: i64,
    pub offset: i64,
}

impl ListedOffset {
    /// No offset found (or none to answer with an error).
    pub const NONE: ListedOffset = ListedOffset {
        timestamp: -1,
        offset: -1,
    };
}

/// Why ListOffsets could not answer for one partition; the Kafka code is chosen at the edge
/// (`server::codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListOffsetsError {
    /// The partition is not served here (unknown, or its log could not be opened).
    Partition(PartitionError),
    /// The log failed to look the offset up.
    Log(crate::log::LogErrorKind),
    /// A negative timestamp that names none of the special offsets.
    UnknownTimestamp,
}

/// Complete when any partition's high watermark passes its offset, or at `deadline_ms`.
#[derive(Clone, Debug)]
pub struct WaitOp {
    pub partitions: Vec<(PartitionRef, i64)>,
    pub deadline_ms: i64,
    /// Wait for the last stable offset (not the high watermark) to pass the offsets.
    pub read_committed: bool,
}

/// A topic to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    /// -1: the broker default (`num.partitions`).
    pub num_partitions: i32,
    pub replication_factor: i16,
    /// Manual assignment: per partition index, its replica broker ids.
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: Vec<(String, Option<String>)>,
}

/// Outcome of creating one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateResult {
    pub name: String,
    /// `None`: created (or, validating only, it would be).
    pub error: Option<AdminError>,
    pub error_message: Option<String>,
    pub topic_id: Uuid,
    pub num_partitions: i32,
    /// Effective configs of the created topic: (name, value, read_only, source).
    pub configs: Vec<(String, String, bool, i8)>,
}

/// A topic to delete, by name or (DeleteTopics v6+) by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicRef {
    Name(String),
    Id(Uuid),
}

/// Outcome of deleting one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteResult {
    pub name: Option<String>,
    pub topic_id: Uuid,
    /// `None`: deleted.
    pub error: Option<AdminError>,
    pub error_message: Option<String>,
}

/// Kafka's IncrementalAlterConfigs operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlterOp {
    Set,
    Delete,
    Append,
    Subtract,
}

/// Config changes of one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterResource {
    pub resource_type: i8,
    pub resource_name: String,
    /// (name, operation or the raw unknown code, value)
    pub changes: Vec<(String, Result<AlterOp, i8>, Option<String>)>,
}

/// Outcome of altering one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterResult {
    pub resource_type: i8,
    pub resource_name: String,
    /// `None`: altered (or, validating only, it would be).
    pub error: Option<AdminError>,
    pub error_message: Option<String>,
}

/// Metadata changes and producer-id allocation; executed by shard 0 only.
#[derive(Clone, Debug)]
pub enum AdminOp {
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
    },
    DeleteTopics {
        topics: Vec<TopicRef>,
    },
    AlterConfigs {
        resources: Vec<AlterResource>,
        validate_only: bool,
    },
    AllocateProducerId,
    /// CreatePartitions: grow each topic to `count` partitions.
    CreatePartitions {
        topics: Vec<NewPartitions>,
        validate_only: bool,
    },
    /// CreateAcls: ACLs already validated at the edge (adding an existing one succeeds).
    CreateAcls(Vec<crate::security::authz::AclBinding>),
    /// DeleteAcls: every ACL matching each filter, filter by filter.
    DeleteAcls(Vec<crate::security::authz::AclFilter>),
}

/// One topic of a CreatePartitions request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPartitions {
    pub name: String,
    /// The topic's new total partition count.
    pub count: i32,
    /// Manual assignment of the new partitions (their replica broker ids), if given.
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// Outcome of growing one topic (CreatePartitions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrowResult {
    pub name: String,
    /// `None`: grown (or, validating only, it would be).
    pub error: Option<AdminError>,
    pub error_message: Option<String>,
}

/// The offset in a DeleteRecords request that means "the high watermark".
pub const DELETE_RECORDS_HIGH_WATERMARK: i64 = -1;

/// Why DeleteRecords did not move one partition's log start (durably); the Kafka code is
/// chosen at the edge (`server::codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteRecordsError {
    /// The partition is not served here (unknown, or its log could not be opened).
    Partition(PartitionError),
    /// The log refused (`OffsetOutOfRange`: the offset is below 0 or past the high watermark)
    /// or failed.
    Log(crate::log::LogErrorKind),
    /// Moved, but the new log start or the share state that followed it cannot be made
    /// durable (the log is poisoned or the journal failed).
    NotDurable,
    /// Moved, but not durable within the request's timeout.
    TimedOut,
}

/// Outcome of DeleteRecords on one partition: its log start offset after the call (the low
/// watermark), or why not.
pub type DeletedRecords = Result<i64, DeleteRecordsError>;

/// Replies to [`AdminOp`]s, in request order.
#[derive(Clone, Debug)]
pub enum AdminReply {
    Created(Vec<CreateResult>),
    Deleted(Vec<DeleteResult>),
    Altered(Vec<AlterResult>),
    /// A fresh producer id, or why there is none.
    ProducerId(Result<i64, ControllerError>),
    Grown(Vec<GrowResult>),
    /// Per ACL of CreateAcls: added (or already there), or why not and the message.
    AclsCreated(Vec<Result<(), (AdminError, String)>>),
    /// Per filter of DeleteAcls: the ACLs it removed, or why not and the message.
    AclsDeleted(Vec<Result<Vec<crate::security::authz::AclBinding>, (AdminError, String)>>),
}

/// Acquire records for one share-group member from partitions of one shard, in order (module
/// docs of `share::fetch`).
#[derive(Clone, Debug)]
pub struct ShareFetchOp {
    pub group_id: String,
    pub member_id: String,
    pub partitions: Vec<PartitionRef>,
    /// What is left of the request's MaxRecords (a soft limit: whole new batches).
    pub max_records: u32,
    /// The request's BatchSize: acquired ranges are cut at log batches about this often.
    pub batch_size: u32,
    /// ShareAcquireMode record_limit (KIP-1206, ShareFetch v2): `max_records` is strict, not
    /// rounded up to the end of a log batch.
    pub record_limit: bool,
    /// Bytes each partition may read (the request's MaxBytes shared evenly).
    pub partition_max_bytes: usize,
    /// Nothing was read yet for this request: the first partition with data reads at least one
    /// whole batch, whatever its size.
    pub min_one_batch: bool,
    /// Whether a share partition this op creates (the group's first fetch from it here) may
    /// hand out records at once. Kafka initializes a share partition asynchronously, so the
    /// request that creates it is answered from the partitions that were ready.
    pub acquire_created: bool,
    /// The request's acknowledgements of partitions on this shard, applied before anything is
    /// acquired: a ShareFetch makes one call per partition shard. Their results are in
    /// [`ShareFetchReply::acknowledged`], once durable (see `wait_durable`).
    pub acknowledge: Option<ShareAckOp>,
    /// The request's MinBytes still to be found here (what the shards called before did not
    /// hold). Above 0, the op first measures what the partitions could hand out, acquiring
    /// nothing, and acquires only if that (each partition within `partition_max_bytes`) reaches
    /// it or a partition is in error; otherwise it answers [`ShareFetchReply::unmet`]. 0:
    /// acquire what there is. Either way one call: the MinBytes check needs no call of its own.
    pub min_bytes: usize,
    /// Answer once the acknowledgements are durable. `false`: answer as soon as the records
    /// are acquired, with [`ShareFetchReply::durable_at`]; the caller waits for it with a
    /// `JournalDurable` call after its other calls, so that the journal flushes of the shards
    /// a request walks overlap instead of following each other.
    pub wait_durable: bool,
}

/// The reply to a [`ShareFetchOp`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareFetchReply {
    /// One result per partition of the op's `acknowledge`, in order (empty without one).
    pub acknowledged: Vec<ShareAckResult>,
    /// The state-journal entry that makes `acknowledged` durable, when the op did not wait
    /// for it (`ShareFetchOp::wait_durable` false and something was journalled).
    pub durable_at: Option<u64>,
    /// One per partition of the op, in order.
    pub partitions: Vec<ShareFetchedPartition>,
    /// `Some(bytes)`: nothing was acquired, as the partitions hold only `bytes` (each within
    /// `partition_max_bytes`), below the op's `min_bytes`; each partition's `wait_offset` says
    /// what a long poll waits for. `None`: the op acquired what there was.
    pub unmet: Option<usize>,
}

/// What one partition could hand out, acquiring nothing (a ShareFetch's MinBytes check).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareProbedPartition {
    pub partition: TopicPartition,
    /// `None`: the partition could be read.
    pub error: Option<SharePartitionError>,
    /// Bytes of whole batches from the next fetch offset below the high watermark.
    pub available_bytes: usize,
    /// New records at or past this offset could be acquired (for the long poll).
    pub wait_offset: i64,
}

/// What one partition of a ShareFetch returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareFetchedPartition {
    pub partition: TopicPartition,
    /// `None`: the partition was read (and `acquired` says what it handed out).
    pub error: Option<SharePartitionError>,
    pub error_message: Option<String>,
    /// Whole batches overlapping the acquired ranges.
    pub records: Bytes,
    pub acquired: Vec<AcquiredRange>,
    /// New records at or past this offset could be acquired (for the long poll).
    pub wait_offset: i64,
    /// The op created the share partition (see [`ShareFetchOp::acquire_created`]).
    pub created: bool,
}

/// Acknowledge records of one share-group member on partitions of one shard.
#[derive(Clone, Debug)]
pub struct ShareAckOp {
    pub group_id: String,
    pub member_id: String,
    pub partitions: Vec<(PartitionRef, Vec<AckBatch>)>,
}

/// Why a share operation failed on one partition: a ShareFetch's read, a ShareAcknowledge, a
/// transactional lock, an AlterShareGroupOffsets or DeleteShareGroupOffsets change. The handler
/// maps it to the partition's Kafka code (`server::codes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SharePartitionError {
    /// The partition is not served here.
    Partition(PartitionError),
    /// The partition's log refused or failed the read.
    Log(LogErrorKind),
    /// The share partition refused the change (records not acquired by the member, bad
    /// ranges, records in flight).
    Share(ShareError),
    /// A producer transaction's lock was refused (a fenced epoch, an acknowledge type other
    /// than ACCEPT or REJECT); a refusal of the share partition is [`SharePartitionError::Share`].
    Lock(ShareLockError),
    /// The group's recovered share state of the partition cannot describe a share partition.
    StateUnusable,
    /// A ShareAcknowledge in a group that acknowledges inside share transactions
    /// (`share.acknowledgement.mode=transactional`).
    TransactionalGroup,
    /// An acknowledgement (or lock) of a partition the group acquired nothing of.
    NothingAcquired,
    /// The change could not be made durable (the journal failed).
    NotDurable,
    /// The partition's shard did not answer.
    Call(CallError),
}

impl From<ShareLockError> for SharePartitionError {
    fn from(e: ShareLockError) -> SharePartitionError {
        match e {
            ShareLockError::Share(e) => SharePartitionError::Share(e),
            other => SharePartitionError::Lock(other),
        }
    }
}

/// Outcome of acknowledging one partition (also of altering or deleting share offsets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareAckResult {
    /// `None`: applied.
    pub error: Option<SharePartitionError>,
    pub error_message: Option<String>,
}

impl ShareAckResult {
    pub fn ok() -> ShareAckResult {
        ShareAckResult {
            error: None,
            error_message: None,
        }
    }

    pub fn error(error: SharePartitionError, message: impl Into<String>) -> ShareAckResult {
        ShareAckResult {
            error: Some(error),
            error_message: Some(message.into()),
        }
    }

    /// Applied.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// Whether the state behind `results` became durable: if not (`Err(cause)`), each result
    /// that succeeded fails with [`SharePartitionError::NotDurable`].
    pub fn durable(results: &mut [ShareAckResult], durable: Result<(), String>) {
        if let Err(cause) = durable {
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = ShareAckResult::error(SharePartitionError::NotDurable, cause.clone());
            }
        }
    }
}

/// A ShareFetch's or ShareAcknowledge's session fields, for the group's shard.
#[derive(Clone, Debug)]
pub struct ShareSessionOp {
    pub key: SessionKey,
    pub epoch: i32,
    pub added: Vec<TopicPartition>,
    pub forgotten: Vec<TopicPartition>,
    /// ShareAcknowledge (which cannot open a session or change its partitions).
    pub acknowledge_only: bool,
    /// The connection the request came on (`ConnInfo::id`): the session's owner from now on.
    pub conn_id: u64,
}

/// Share-transaction work. Coordinator ops run on the group's shard, participant ops on the
/// partitions' shard.
#[derive(Clone, Debug)]
pub enum TxnOp {
    /// Coordinator: ShareBeginTransaction.
    Begin {
        group_id: String,
        transaction_id: String,
        timeout_ms: i64,
    },
    /// Coordinator: ShareAcknowledgeTransactional, in one call. Registers the partitions (the
    /// transaction must be ONGOING, the member known), has the partitions' shards lock the
    /// records (`Lock`), and completes the acknowledgements (`shard::share_txn`).
    Acknowledge {
        group_id: String,
        member_id: String,
        transaction_id: String,
        partitions: Vec<(PartitionRef, Vec<AckBatch>)>,
    },
    /// Coordinator: phase 1; answered once the participants' locks and the PREPARE record
    /// are durable.
    Prepare {
        group_id: String,
        transaction_id: String,
    },
    /// Coordinator: phase 2; answered once the decision is durable.
    Commit {
        group_id: String,
        transaction_id: String,
    },
    Abort {
        group_id: String,
        transaction_id: String,
    },
    /// Coordinator: ShareListTransactions (empty `states`: ONGOING and PREPARE).
    List {
        group_id: String,
        states: Vec<TxnState>,
    },
    /// Coordinator: a transaction's state (participants resolving locks after a restart).
    State {
        group_id: String,
        transaction_id: String,
    },
    /// Participant: ACQUIRED → LOCKED for `member_id`'s records (each partition all-or-nothing).
    Lock {
        group_id: String,
        member_id: String,
        transaction_id: String,
        partitions: Vec<(PartitionRef, Vec<AckBatch>)>,
    },
    /// Participant: make the transaction's LOCKED ranges durable (phase 1).
    PersistLocks {
        group_id: String,
        transaction_id: String,
    },
    /// Participant: apply the decision (LOCKED → ACKNOWLEDGED / ARCHIVED, or → AVAILABLE).
    Apply {
        group_id: String,
        transaction_id: String,
        commit: bool,
    },
    /// Participant of a producer transaction (TxnShareAcknowledge, KIP-1289 draft):
    /// ACQUIRED → LOCKED by `owner` for `member_id`'s records (each partition all-or-nothing);
    /// answered [`TxnReplyMsg::Locked`] once the locks are durable (`crate::producer_txn::share`).
    ProducerLock {
        group_id: String,
        member_id: String,
        owner: crate::producer_txn::share::ProducerLock,
        partitions: Vec<(PartitionRef, Vec<AckBatch>)>,
    },
}

/// Why a share-transaction coordinator op was refused or failed; the handler maps it to the
/// Kafka code (`server::codes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShareTxnError {
    /// The transaction state machine refused the op (its state, timeout, id, ...).
    Txn(TxnError),
    /// The acknowledging member is not in the share group.
    UnknownMember,
    /// The transaction (its record, or a participant's locks) could not be made durable.
    NotDurable,
    /// Prepare: the acknowledgements into the transaction did not complete within the wait.
    TimedOut,
    /// The coordinator's shard did not answer.
    Call(CallError),
}

/// The answer to a coordinator op: the error (`None`: done), the state after the call, the
/// timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnAnswer {
    pub error: Option<ShareTxnError>,
    pub error_message: Option<String>,
    pub state: TxnState,
    pub timeout_ms: u64,
}

impl TxnAnswer {
    pub fn error(error: ShareTxnError, message: impl Into<String>, state: TxnState) -> TxnAnswer {
        TxnAnswer {
            error: Some(error),
            error_message: Some(message.into()),
            state,
            timeout_ms: 0,
        }
    }
}

/// Replies to [`TxnOp`]s.
#[derive(Clone, Debug)]
pub enum TxnReplyMsg {
    Answer(TxnAnswer),
    /// Per partition of `Acknowledge`: acknowledged into the transaction, or why not.
    Acknowledged(Vec<Result<(), TxnAckError>>),
    /// Per partition of `Lock`: records locked, or the refusal.
    Locked(Vec<Result<u64, ShareAckResult>>),
    Listed(Vec<TxnRecord>),
    /// `PersistLocks`, `Apply`: done, or why not.
    Done(Result<(), String>),
}

/// Why one partition of a transactional acknowledgement was not acknowledged; the handler maps
/// it to the partition's Kafka error code and message (`TxnAckError::code_and_message`, in
/// `server::codes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnAckError {
    /// The coordinator refused it: the transaction is not ONGOING (its state is in the answer)
    /// or the member is not in the group. The same for every partition of the request.
    Refused(TxnAnswer),
    /// The partition's share state refused the lock (records not acquired by the member, ...).
    NotLocked(ShareAckResult),
    /// The partition's shard did not answer the lock.
    Call(CallError),
}

/// The share-partition start offset of one partition for DescribeShareGroupOffsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareOffset {
    pub partition: TopicPartition,
    /// -1: the group has no state for the partition.
    pub start_offset: i64,
    /// The partition's high watermark, -1 if it is not served here.
    pub high_watermark: i64,
    /// The share-partition lag (KIP-1226, DescribeShareGroupOffsets v1); -1 if unknown.
    pub lag: i64,
}

/// Producer-transaction coordinator work, on the transactional id's shard
/// (`model::group_shard` of the id); answered once the records it produced are durable.
#[derive(Clone, Debug)]
pub enum PtxnOp {
    /// InitProducerId with a transactional id.
    Init(crate::producer_txn::coordinator::InitRequest),
    /// AddPartitionsToTxn (client form, or v4+ without verifyOnly) and AddOffsetsToTxn.
    AddParticipants {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<(String, i32)>,
        groups: Vec<String>,
    },
    /// AddPartitionsToTxn v4+ verifyOnly.
    Verify {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<(String, i32)>,
    },
    /// EndTxn.
    End {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        outcome: crate::producer_txn::TxnOutcome,
    },
    /// DescribeTransactions of ids this shard coordinates.
    Describe { transactional_ids: Vec<String> },
    /// ListTransactions (every shard is asked).
    List(crate::producer_txn::coordinator::ListFilter),
}

/// Replies to [`PtxnOp`]s.
#[derive(Clone, Debug)]
pub enum PtxnReply {
    Init(
        Result<
            crate::producer_txn::coordinator::InitAnswer,
            crate::producer_txn::coordinator::CoordError,
        >,
    ),
    Done(Result<(), crate::producer_txn::coordinator::CoordError>),
    Verified(
        Result<
            Vec<Result<(), crate::producer_txn::coordinator::CoordError>>,
            crate::producer_txn::coordinator::CoordError,
        >,
    ),
    /// One per requested id, in order; `None`: unknown here.
    Described(Vec<Option<crate::producer_txn::coordinator::TxnMetadata>>),
    Listed(Vec<crate::producer_txn::coordinator::TxnMetadata>),
}

/// Work for the shard that owns the state.
#[derive(Clone, Debug)]
pub enum ShardOp {
    Produce(ProduceOp),
    Fetch(FetchOp),
    ListOffsets(ListOffsetsOp),
    WaitForData(WaitOp),
    Admin(AdminOp),
    /// Replace the shard's registry snapshot (and open or remove partitions accordingly).
    InstallRegistry(Arc<TopicRegistry>),
    /// On the group's shard.
    ShareHeartbeat(Heartbeat),
    /// On the group's shard.
    ShareSession(ShareSessionOp),
    /// On the partitions' shard.
    ShareFetch(ShareFetchOp),
    /// On a shard a ShareFetch acknowledged on without waiting (`ShareFetchOp::wait_durable`):
    /// answered once its state journal is durable through entry `seq`.
    JournalDurable {
        seq: u64,
    },
    /// On the partitions' shard; answered once the new state is durable.
    ShareAcknowledge(ShareAckOp),
    /// On every shard: release what a member holds (it left, or its connection dropped).
    ShareReleaseMember {
        group_id: String,
        member_id: String,
    },
    /// On the group's shard: connection `conn_id` dropped; if it still owns the member's share
    /// session, close it and release the member's records on every shard.
    ShareDisconnected {
        group_id: String,
        member_id: String,
        conn_id: u64,
    },
    Txn(TxnOp),
    /// On every shard (ListGroups): the share groups it coordinates and those it holds
    /// share-partition state for.
    ShareListGroups,
    /// On the group's shard: the group's membership, if it is known there.
    ShareDescribeGroup {
        group_id: String,
    },
    /// On the partitions' shard: start offsets of the named partitions (`None`: of every
    /// partition the group has state for on this shard).
    ShareOffsets {
        group_id: String,
        partitions: Option<Vec<PartitionRef>>,
    },
    /// On the partitions' shard (AlterShareGroupOffsets): restart each partition's share state
    /// at the offset; answered once durable.
    ShareAlterOffsets {
        group_id: String,
        partitions: Vec<(PartitionRef, i64)>,
    },
    /// On every shard (DeleteShareGroupOffsets): forget the group's state of these topics;
    /// answered once durable.
    ShareDeleteOffsets {
        group_id: String,
        topic_ids: Vec<Uuid>,
    },
    /// On the partitions' shard (DescribeProducers): the idempotent producers of each.
    DescribeProducers(Vec<PartitionRef>),
    /// On the group's shard (DeleteGroups): forget the group's membership if it has no
    /// members. Replies [`ShardReply::ShareGroupDeleted`].
    ShareDeleteGroup {
        group_id: String,
    },
    /// On the partitions' shard (DeleteRecords): move each partition's log start (offset -1:
    /// to the high watermark); answered once the new starts are durable or at `timeout_ms`.
    DeleteRecords {
        partitions: Vec<(PartitionRef, i64)>,
        timeout_ms: u64,
    },
    /// On the group's shard: consumer groups and committed offsets (`crate::group::ops`);
    /// answered once the journal entries it produced are durable.
    Group(crate::group::ops::GroupOp),
    /// On the partitions' shard: end a producer transaction in each partition (a control batch
    /// in its log; share records LOCKED in the transaction resolved); answered once durable.
    /// Replies [`ShardReply::TxnMarkersWritten`], one result per partition, in order.
    WriteTxnMarkers {
        marker: crate::producer_txn::TxnMarker,
        partitions: Vec<PartitionRef>,
    },
    /// On the group's shard: end a producer transaction's offsets of the group (TxnOffsetCommit
    /// offsets become committed on commit, are dropped on abort); answered once durable.
    /// Replies [`ShardReply::GroupTxnMarkerWritten`].
    GroupTxnMarker {
        marker: crate::producer_txn::TxnMarker,
        group_id: String,
    },
    /// On the transactional id's shard: the producer-transaction coordinator.
    ProducerTxn(PtxnOp),
}

/// What one shard knows of share groups (the reply to [`ShardOp::ShareListGroups`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareGroupsListed {
    /// Groups this shard coordinates, with their member counts.
    pub coordinated: Vec<(String, usize)>,
    /// Groups with share-partition state on this shard.
    pub with_state: Vec<String>,
}

/// The reply to a [`ShardOp`] (same variant).
#[derive(Clone, Debug)]
pub enum ShardReply {
    Produce(ProduceResult),
    Fetch(Vec<FetchedPartition>),
    ListOffsets(Vec<Result<ListedOffset, ListOffsetsError>>),
    /// The wait ended: `true` if data arrived, `false` at the deadline.
    Waited(bool),
    Admin(AdminReply),
    Installed,
    ShareHeartbeat(HeartbeatAnswer),
    ShareSession(Result<SessionOutcome, SessionError>),
    ShareFetched(ShareFetchReply),
    /// The state journal is durable through the entry asked for (or why it is not).
    JournalDurable(Result<(), String>),
    ShareAcknowledged(Vec<ShareAckResult>),
    /// How many records were released.
    ShareReleased(u64),
    Txn(TxnReplyMsg),
    ShareGroupsListed(ShareGroupsListed),
    ShareGroupDescribed(Option<ShareGroup>),
    ShareOffsets(Vec<ShareOffset>),
    /// One result per partition of the op, in order.
    ShareOffsetsAltered(Vec<ShareAckResult>),
    /// One result per topic id of the op, in order.
    ShareOffsetsDeleted(Vec<ShareAckResult>),
    ShareGroupDeleted(GroupDeletion),
    /// One result per partition of the op, in order.
    RecordsDeleted(Vec<DeletedRecords>),
    /// One result per partition of [`ShardOp::DescribeProducers`], in order.
    Producers(Vec<Result<Vec<crate::shard::producer_state::ProducerSnapshot>, PartitionError>>),
    Group(crate::group::ops::GroupReply),
    /// One result per partition of [`ShardOp::WriteTxnMarkers`], in order.
    TxnMarkersWritten(Vec<Result<(), MarkerError>>),
    /// The result of [`ShardOp::GroupTxnMarker`].
    GroupTxnMarkerWritten(Result<(), MarkerError>),
    ProducerTxn(PtxnReply),
    /// The shard could not run the operation; typed, the caller chooses the Kafka code.
    Failed(CallError),
}

impl ShardReply {
    /// The error of a reply that is not the operation's kind: a `Failed` reply's own error, or
    /// for a reply of another kind (a bug) `UnexpectedReply`, logged here, so the handler that
    /// got it answers UNKNOWN_SERVER_ERROR instead of panicking.
    pub fn unexpected(self, op: &'static str) -> CallError {
        match self {
            ShardReply::Failed(failure) => failure,
            other => {
                tracing::error!(op, reply = ?other, "a shard answered with a reply of another kind");
                CallError::UnexpectedReply(format!("{op} answered with {other:?}"))
            }
        }
    }
}

/// Why an operation found no partition to work on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionError {
    /// The registry has no such partition (not under that name and id), or another shard owns
    /// it.
    Unknown,
    /// The registry has it and this shard owns it, but its log is not open (it failed to).
    Unavailable,
}

/// Why a producer transaction's end was not written in one partition ([`ShardOp::WriteTxnMarkers`])
/// or one group ([`ShardOp::GroupTxnMarker`]); the coordinator sends the marker again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MarkerError {
    /// The partition is not served here.
    Partition(PartitionError),
    /// The partition refused the marker (its epoch is older than the open transaction's).
    Refused(crate::producer_txn::partition::TxnError),
    /// The control batch could not be appended.
    NotAppended(crate::log::LogErrorKind),
    /// The marker (or the state it changed) could not be made durable: the log or the journal
    /// failed.
    NotDurable(String),
    /// Appended, but not durable within the wait.
    TimedOut,
}

impl std::fmt::Display for MarkerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MarkerError::Partition(e) => write!(f, "partition not served here ({e:?})"),
            MarkerError::Refused(e) => write!(f, "refused: {e}"),
            MarkerError::NotAppended(kind) => write!(f, "not appended ({kind:?})"),
            MarkerError::NotDurable(cause) => write!(f, "not durable: {cause}"),
            MarkerError::TimedOut => f.write_str("not durable within the wait"),
        }
    }
}

/// Why the metadata controller (shard 0) did not carry out an admin op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControllerError {
    /// It is shutting down.
    Stopping,
    /// The new metadata could not be persisted; nothing changed.
    NotPersisted,
}

/// Why one topic, config resource or ACL of a topic-admin or ACL request was refused, in the
/// metadata controller's words (or the edge's, for what it refuses before calling it). The
/// message the wire carries stays data beside it (`error_message`); the Kafka code is chosen
/// at the edge (`server::codes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminError {
    /// The topic registry refused the change.
    Topic(TopicError),
    /// A config key or value was refused.
    Config(ConfigError),
    /// The controller did not carry out the op (it stops, or could not persist the registry).
    Controller(ControllerError),
    /// The controller could not be called, or answered with another reply.
    Call(CallError),
    /// CreatePartitions: the controller did not answer (any failure: the client retries).
    ControllerUnavailable,
    /// The request names the topic more than once.
    DuplicateTopic,
    /// The resource's changes name the config more than once.
    DuplicateConfig,
    /// An IncrementalAlterConfigs operation outside SET, DELETE, APPEND, SUBTRACT.
    UnknownConfigOperation(i8),
    /// A SET without a value.
    MissingValue,
    /// APPEND or SUBTRACT of a config that is not a list.
    NotAList,
    /// The share group's configs refused together (or too many groups have configs).
    GroupConfig,
    /// A config resource of a type not served here.
    UnsupportedResourceType(i8),
    /// A BROKER resource naming another broker.
    UnknownBroker,
    /// A GROUP resource with an empty group id.
    EmptyGroupId,
    /// A replication factor a single-node broker cannot give.
    ReplicationFactor(i16),
    /// A manual assignment with a partition count or replication factor other than -1.
    AssignmentWithCounts,
    /// A manual assignment that is not one replica list per partition, each this broker only.
    ReplicaAssignment,
    /// No topic id could be drawn (the random source failed).
    NoTopicId,
    /// CreateAcls past `ACLS_MAX`.
    TooManyAcls,
    /// An ACL or ACL filter outside Kafka's model (refused at the edge).
    InvalidAcl,
    /// No authorizer is configured (refused at the edge, as Kafka does).
    SecurityDisabled,
}

/// Why a shard operation was not answered with a reply of its own kind. The handler that made
/// the call chooses the Kafka error code (`CallError::code`, in `server::codes`, is the usual
/// choice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// An admin operation reached a shard that is not the metadata controller (shard 0).
    NotController,
    /// The operation could not be sent to its shard (the mesh is gone: the broker stops).
    Unreachable,
    /// The shard dropped the operation without an answer (the broker stops).
    Abandoned,
    /// The shard answered with a reply of another kind (a bug).
    UnexpectedReply(String),
    /// The operation's state could not be made durable (the journal failed; the broker stops).
    NotDurable(String),
}
