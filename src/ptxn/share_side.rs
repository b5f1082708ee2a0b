//! The share side of a producer transaction's end, on the partition's shard: share records
//! that a producer transaction LOCKED (KIP-1289's TxnShareAcknowledge, issue 17's p17-share
//! part) are resolved when its marker reaches the partition — ACKNOWLEDGED on commit,
//! AVAILABLE on abort.
//!
//! [`crate::runtime::shard_runtime`]'s WriteTxnMarkers calls [`ShareState::producer_txn_ended`]
//! for every partition the marker reaches (whether or not a control batch was written there),
//! then appends and waits for the share journal entries it produced before answering. It must
//! be idempotent: the coordinator retries markers until every participant answers.

use crate::model::TopicPartition;
use crate::ptxn::TxnMarker;
use crate::server::share::ShareState;

impl ShareState {
    /// Resolves the share records `marker`'s transaction LOCKED in `partition` (all groups).
    /// Journal entries go to the share state's pending entries (`take_entries`). Returns how
    /// many records were resolved.
    ///
    /// Until TxnShareAcknowledge exists nothing can lock a share record in a producer
    /// transaction, so there is nothing to resolve yet: p17-share fills this in.
    pub fn producer_txn_ended(&mut self, marker: &TxnMarker, partition: TopicPartition) -> u64 {
        let _ = (marker, partition);
        0
    }
}
