//! Share transactions (the KIP's transactional acknowledgements): the transaction state
//! machine and the coordinator's per-group state.
//!
//! - [`state`]: [`TxnState`] (EMPTY, ONGOING, PREPARE, COMMITTED, ABORTED; wire codes 0..=4),
//!   its one transition table [`validate_transition`], and [`TxnError`] with Kafka codes.
//! - [`group`]: [`GroupTransactions`], the coordinator's transactions of one share group:
//!   begin, participant registration, prepare, commit, abort, timeouts, list, retention, and
//!   the [`TxnRecord`]s the journal persists.
//!
//! Ownership: a group's `GroupTransactions` lives on the shard that owns the group. The
//! records themselves (ACQUIRED → LOCKED → ACKNOWLEDGED / ARCHIVED / AVAILABLE) live in each
//! participant's [`crate::share::SharePartition`], on the partition's shard; the shard core
//! connects the two (`crate::shard::share_txn`). Synchronous and I/O-free; time is passed in as `now_ms`.

pub mod group;
pub mod state;

pub use group::{
    check_transaction_id, GroupTransactions, Participant, TxnChange, TxnChangeCause, TxnConfig,
    TxnRecord, TxnReply,
};
pub use state::{validate_transition, TxnError, TxnState};
