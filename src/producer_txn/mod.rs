//! Producer transactions (Kafka's transactions: KIP-98, KIP-890, KIP-939) and the second road
//! to a share record's LOCKED state (KIP-1289's TxnShareAcknowledge).
//!
//! Parts and where they run:
//! - the transaction coordinator (transactional.id → producer id, epoch, state, partitions,
//!   groups, timeout) on the shard that owns the transactional id;
//! - the partition side (ongoing transactions, last stable offset, aborted-transaction index,
//!   share records LOCKED in a producer transaction) on the partition's shard;
//! - the group side (offsets committed by TxnOffsetCommit, pending until the marker) on the
//!   group's shard;
//! - [`share`]: share records acknowledged into a producer transaction (TxnShareAcknowledge,
//!   KIP-1289's draft): LOCKED by the producer id and epoch, resolved by its marker.
//!
//! The coordinator ends a transaction by sending a [`TxnMarker`] to every participant:
//! [`crate::shard::ops::ShardOp::WriteTxnMarkers`] to the partitions' shards (a control batch
//! in each log, and the share records the transaction LOCKED are resolved) and
//! [`crate::shard::ops::ShardOp::GroupTxnMarker`] to each group's shard (pending transactional
//! offsets become committed or are dropped). Both are answered once the result is durable;
//! the coordinator retries until every participant has answered, so applying a marker twice
//! must be harmless (idempotent by producer id and epoch).

pub mod coordinator;
pub mod partition;
pub mod share_side;

/// How a producer transaction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnOutcome {
    Commit,
    Abort,
}

impl TxnOutcome {
    /// The control record type written in the marker batch's key (Kafka: ABORT = 0, COMMIT = 1).
    pub fn control_type(self) -> i16 {
        match self {
            TxnOutcome::Abort => 0,
            TxnOutcome::Commit => 1,
        }
    }
}

/// The end of one producer transaction, as the coordinator sends it to a participant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    /// The epoch the marker is written with (Kafka writes markers with the transaction's epoch,
    /// or with the bumped epoch when the transaction is fenced or timed out).
    pub producer_epoch: i16,
    pub outcome: TxnOutcome,
    /// The coordinator's epoch (Kafka: the partition leader epoch of the transaction log
    /// partition); written in the control record's value.
    pub coordinator_epoch: i32,
}

pub mod share;
