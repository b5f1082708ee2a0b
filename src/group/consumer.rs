//! KIP-848 membership of a consumer group (`group.protocol=consumer`): ConsumerGroupHeartbeat
//! and ConsumerGroupDescribe, on the group's shard, beside the classic protocol
//! (`super::classic`) and sharing the group's committed offsets (`super::offsets`).
//!
//! The state machine (members, epochs, server-side assignors, reconciliation, the member-epoch
//! checks of OffsetCommit / OffsetFetch) is `crate::group::kip848`, runtime-free and model-tested there.

pub use crate::group::kip848::Consumer848Group as ConsumerMembership;
