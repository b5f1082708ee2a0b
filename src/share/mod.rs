//! Share groups (KIP-932): record states and the per-(group, topic-partition) state machine.
//!
//! - [`state`]: [`RecordState`] (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED and Lockstep's
//!   LOCKED{txn, outcome}), [`AcknowledgeType`], and the one transition table,
//!   [`validate_transition`], that every state change goes through.
//! - `runs` (private): disjoint, coalesced offset intervals with side indexes (first
//!   AVAILABLE run, runs by lock deadline, by member, by transaction), so a range operation
//!   costs O(log n + k) in the k runs it touches — never one entry per offset.
//! - [`partition`]: [`SharePartition`]: SPSO/SPEO, acquire, acknowledge (GAP, ACCEPT, RELEASE,
//!   REJECT, RENEW), lock expiry, member release, and the transactional lock/commit/abort.
//! - [`durable`]: the persisted view (ACQUIRED never persists) as snapshots and deltas of
//!   [`StateRun`]s, which the journal encodes.
//! - [`config`]: the group configs a partition obeys; [`error`]: typed errors with Kafka codes.
//!
//! Ownership: a `SharePartition` lives on the shard that owns its topic-partition. All code
//! here is synchronous and I/O-free; time is passed in as `now_ms`.

pub mod config;
pub mod durable;
pub mod error;
pub mod fetch;
pub mod partition;
mod runs;
pub mod state;

pub use config::{InvalidShareConfig, ShareConfig};
pub use durable::{DurableState, ShareDelta, ShareSnapshot, StateRun};
pub use error::ShareError;
pub use partition::{
    AckBatch, AckCounts, AcquiredRange, CommitCounts, LockedRange, RunView, SharePartition,
};
pub use state::{
    validate_transition, AcknowledgeType, IllegalTransition, LockOutcome, RecordState, TxnKey,
};
