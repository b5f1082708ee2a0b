//! Segmented, CRC-framed partition logs of Kafka record batches (see schemas/FORMAT.md and
//! the format notes in [`index`] and [`checkpoint`]).
//!
//! One directory per topic-partition, owned by the shard that owns the partition:
//! ```text
//! {base_offset:020}.log     segment: SegmentHeader (kind Log) · frame* (frame.rs)
//!                           frame: FrameMeta { id: batch base offset, kind: 1, count: records }
//!                           payload: the record batch as sent, base offset set by the log
//! {base_offset:020}.index   sparse index of a sealed segment (index.rs)
//! log-start.checkpoint      durable log start offset (checkpoint.rs)
//! ```
//!
//! - [`batch`]: the record-batch header view, validation, splitting, base-offset rewrite.
//! - [`group_commit`]: the I/O-free flush state and the waiters of a group commit.
//! - [`PartitionLog`]: append, read, roll, retention, flush tickets, recovery at open.
//!
//! Durability argument (the crash tests check it):
//! 1. `append` writes through [`Storage`](crate::storage::file::Storage) into the page cache;
//!    nothing is durable until a flush completes. A flush ([`PartitionLog::begin_flush`] /
//!    [`PartitionLog::complete_flush`]) `fdatasync`s every file written since the last one
//!    (and the directory when entries changed), then declares durable exactly the offsets
//!    written before it began.
//! 2. A roll seals the active segment synchronously: data `fdatasync`, index written and
//!    synced, directory synced, and only then the next segment is created. So every sealed
//!    segment is complete on disk, and a torn or corrupt frame can only be in the last
//!    segment's tail, which recovery cuts; anywhere else it is an error naming file and byte.
//! 3. Segments are removed (retention, `delete_records_before`) only after a checkpoint with
//!    a log start at or past their end is durable; recovery deletes leftovers below the start.
//! 4. Recovery `fdatasync`s what it keeps, so after `open` everything in the log is durable.
//! 5. A failed write or sync poisons the log: every later write fails with the first error.
//!
//! Invariants (asserted on write, typed corruption errors on read): segments are contiguous
//! (each base offset is the previous segment's next offset); within a segment, frame ids
//! increase by their record counts without gaps; the last segment is the only one written.

pub mod batch;
pub mod checkpoint;
pub mod group_commit;
pub mod index;
mod partition;
mod recovery;
mod segment;

pub use partition::{sync_ticket, BATCH_FRAME_KIND};
pub use segment::BlockWrite;
pub use partition::{
    AppendInfo, FlushTicket, LogConfig, LogError, PartitionLog, ReadResult, RecoveryReport,
    RemovedSegment, SegmentInfo, TruncatedTail,
};
