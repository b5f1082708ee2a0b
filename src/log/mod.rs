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
//! 1. `append` encodes the frame into the active segment's in-memory tail (write-behind; the
//!    file is preallocated ahead of it, so writes below its length change no file size);
//!    nothing is written or durable until a flush. A flush ([`PartitionLog::begin_flush`] /
//!    [`PartitionLog::complete_flush`]) hands out the unwritten tail as block-aligned writes
//!    of whole memory chunks, no copy (contiguous, not overlapping, performed in file order,
//!    each durable before the next starts, so a crash tears only the last one issued: one torn
//!    tail, as with one write; or, once a durable checkpoint slot records a position in the
//!    active segment, all at once and synced together, since a hole they leave lies at or past
//!    that position, which FORMAT.md §4 rule 2' cuts as a tail even with frames after it);
//!    the partially filled last block rewritten from memory: its
//!    durable bytes are
//!    rewritten with the same bytes; a torn block write tears at sector boundaries, leaving
//!    old or new sectors, so it damages nothing durable), made durable by the engine
//!    (`O_DSYNC` `O_DIRECT` write, or write and `fdatasync`), with the zeros written ahead of
//!    the tail (small flushes only) and the checkpoint's newest slot as block writes of their
//!    own, `fdatasync`s
//!    every other file written since the last one (and the directory when entries changed),
//!    then declares
//!    durable exactly the offsets appended before it began. One flush at a time; block writes
//!    of consecutive flushes overlap only in their first block, never concurrently.
//!    Full chunks of the tail may be written ahead of the flush (write-behinds, plain
//!    `O_DIRECT`, once a durable slot names the active segment; never sharing a block with a
//!    write in flight). A flush begun while some are in flight writes no tail: every byte below
//!    the first of them is on the file (write-behinds are handed out in file order, tickets
//!    complete before the next begins), so it `fdatasync`s the segment and declares durable
//!    the batches that end there (a *prefix flush*), unless the log start moved past them.
//! 2. A roll seals the active segment in two halves. On the request path, no disk wait and no
//!    write: its index file created, the next segment created (its header in its tail), the
//!    bytes of its tail never written handed to the seal (its tail stays in memory for reads
//!    until the seal completed). The durable half is the next flush ticket's [`Seal`]: those
//!    bytes written (`O_DIRECT` chunks, as a flush's), the file cut to its frames (the
//!    preallocated zeros go), then data `fdatasync`,
//!    index written and synced, directory synced, all done *before* any other step of that
//!    ticket, so the new segment has no byte on disk (all zeros: recovery removes such a last
//!    segment) until its predecessor is sealed. At most one seal waits at a time (a second
//!    roll before the flush seals the first synchronously). Closing a log (`PartitionLog::close`,
//!    which leaves the active tail in the page cache and returns any failure; a log dropped
//!    unclosed does no I/O) first performs a seal still pending or in a ticket that never
//!    completed. Never while a flush is in flight
//!    (its block write may still be landing on the last block): a segment then runs over
//!    `segment_bytes` by what arrives during that flush and rolls at the next `begin_flush`.
//!    So every segment but the last two is complete on disk, and the second-to-last is either
//!    complete or the last after recovery removed its empty successor: a torn or corrupt frame
//!    can only be in the last segment's tail, which recovery cuts; anywhere else it is an
//!    error naming file and byte.
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

pub use partition::{apply_seal, sync_ticket, write_behind, BATCH_FRAME_KIND};
pub use partition::{
    AppendInfo, FlushTicket, LogConfig, LogError, LogErrorKind, PartitionLog, ReadAhead,
    ReadResult, RecoveryReport, RemovedSegment, Seal, SegmentInfo, TruncatedTail, WriteBehind,
};
pub use segment::{
    parse_snapshot_name, reused_tail_start, snapshot_file_name, BlockWrite, CachedBytes,
    ChunkWrite, SharedBlocks, ZeroFill,
};
