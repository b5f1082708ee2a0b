//! [`PartitionLog`]: one topic-partition's segments, generic over [`Storage`] so the crash
//! double can stand in for the file system. See the parent module for the format and the
//! durability argument.

use super::batch::{self, BatchError, BatchHeader};
use super::checkpoint::{self, CheckpointSlot};
use super::group_commit::GroupCommit;
use super::index;
use super::segment::{
    align_up, read_frame_head, read_payload, segment_file_name, spare_file_name, BlockWrite,
    CachedBytes, ChunkWrite, ScannedFrame, Segment, Tail, ZeroFill,
};
use crate::constants::{
    FRAME_PAYLOAD_BYTES_MAX, LOG_BLOCK_BYTES, LOG_CHECKPOINT_SLOT_STRIDE_BYTES,
    LOG_INDEX_INTERVAL_BYTES, LOG_INDEX_INTERVAL_BYTES_MIN, LOG_PREALLOCATE_BYTES,
    LOG_READ_AHEAD_BYTES_MAX, LOG_READ_AHEAD_SLACK_BYTES, LOG_READ_CACHE_BYTES_MAX,
    LOG_SEGMENT_BYTES_DEFAULT, LOG_SEGMENT_BYTES_MIN, LOG_SEGMENT_MS_DEFAULT,
    LOG_SEGMENT_SPARES_DEFAULT, LOG_SEGMENT_SPARE_IDLE_MS, SEGMENT_HEADER_BYTES,
};
use crate::storage::file::{Storage, StorageFile};
use crate::storage::frame::{
    encode_frame_into, frame_total_bytes, FrameMeta, SegmentHeader, SegmentKind,
};
use bytes::Bytes;
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// `FrameMeta::kind` of a frame holding one Kafka record batch.
pub const BATCH_FRAME_KIND: u16 = 1;
/// Timestamp of "no timestamp" in Kafka (`RecordBatch.NO_TIMESTAMP`).
pub(super) const NO_TIMESTAMP: i64 = -1;
pub(super) const HEADER_BYTES_U64: u64 = SEGMENT_HEADER_BYTES as u64;

/// Per-partition log settings (Kafka's `segment.bytes`, `segment.ms`, `retention.bytes`,
/// `retention.ms`, `index.interval.bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// The active segment is rolled before a batch would take it past this size.
    pub segment_bytes: u64,
    /// The active segment is rolled once its first batch is this old (broker clock).
    pub segment_ms: u64,
    /// Sealed segments are removed, oldest first, while the log stays at least this large
    /// without them.
    pub retention_bytes: Option<u64>,
    /// Sealed segments whose newest batch timestamp is older than this are removed.
    pub retention_ms: Option<u64>,
    /// A sparse-index entry at least every this many bytes of frames.
    pub index_interval_bytes: u64,
    /// At most this many removed segments' data files kept as spares for later rolls (0:
    /// every removed file is deleted); see [`LOG_SEGMENT_SPARES_DEFAULT`].
    pub segment_spares: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: LOG_SEGMENT_BYTES_DEFAULT,
            segment_ms: LOG_SEGMENT_MS_DEFAULT,
            retention_bytes: None,
            retention_ms: None,
            index_interval_bytes: LOG_INDEX_INTERVAL_BYTES,
            segment_spares: LOG_SEGMENT_SPARES_DEFAULT,
        }
    }
}

impl LogConfig {
    pub fn validate(&self) -> Result<(), LogError> {
        let invalid = |reason: String| Err(LogError::InvalidConfig { reason });
        if self.segment_bytes < LOG_SEGMENT_BYTES_MIN {
            return invalid(format!(
                "segment_bytes {} is below the minimum {LOG_SEGMENT_BYTES_MIN}",
                self.segment_bytes
            ));
        }
        if self.index_interval_bytes < LOG_INDEX_INTERVAL_BYTES_MIN {
            return invalid(format!(
                "index_interval_bytes {} is below the minimum {LOG_INDEX_INTERVAL_BYTES_MIN}",
                self.index_interval_bytes
            ));
        }
        if self.segment_ms == 0 {
            return invalid("segment_ms must be positive".into());
        }
        Ok(())
    }
}

/// Everything that can go wrong in a partition log. The broker maps these to Kafka error
/// codes at its edge (`InvalidBatch` → CORRUPT_MESSAGE, `BatchTooLarge` →
/// MESSAGE_TOO_LARGE, `OffsetOutOfRange` → OFFSET_OUT_OF_RANGE, the rest → KAFKA_STORAGE_ERROR).
#[derive(Debug)]
pub enum LogError {
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// A write or sync failed earlier; the log refuses writes until it is reopened.
    Poisoned {
        cause: String,
    },
    InvalidBatch(BatchError),
    BatchTooLarge {
        bytes: usize,
        max: usize,
    },
    OffsetOutOfRange {
        offset: u64,
        log_start_offset: u64,
        log_end_offset: u64,
    },
    /// Data on disk breaks the format: never repaired silently.
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
    InvalidConfig {
        reason: String,
    },
}

/// What kind of [`LogError`] happened, without its details (`Copy`, so replies can carry it);
/// the Kafka code is chosen at the edge (`server::codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogErrorKind {
    /// A batch's CRC does not match.
    CrcMismatch,
    /// A batch is malformed otherwise.
    InvalidBatch,
    TooLarge,
    OffsetOutOfRange,
    InvalidConfig,
    /// I/O failed, the log is poisoned, or its data on disk is corrupt.
    Storage,
}

impl LogError {
    pub fn kind(&self) -> LogErrorKind {
        match self {
            LogError::InvalidBatch(BatchError::CrcMismatch { .. }) => LogErrorKind::CrcMismatch,
            LogError::InvalidBatch(_) => LogErrorKind::InvalidBatch,
            LogError::BatchTooLarge { .. } => LogErrorKind::TooLarge,
            LogError::OffsetOutOfRange { .. } => LogErrorKind::OffsetOutOfRange,
            LogError::InvalidConfig { .. } => LogErrorKind::InvalidConfig,
            LogError::Io { .. } | LogError::Poisoned { .. } | LogError::Corrupt { .. } => {
                LogErrorKind::Storage
            }
        }
    }
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Io { op, path, source } => {
                write!(f, "{op} {}: {source}", path.display())
            }
            LogError::Poisoned { cause } => write!(
                f,
                "partition log refuses writes after an I/O failure: {cause}"
            ),
            LogError::InvalidBatch(e) => write!(f, "invalid record batch: {e}"),
            LogError::BatchTooLarge { bytes, max } => {
                write!(f, "record batch of {bytes} bytes exceeds the maximum {max}")
            }
            LogError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            } => write!(
                f,
                "offset {offset} is out of range [{log_start_offset}, {log_end_offset}]"
            ),
            LogError::Corrupt {
                path,
                position,
                reason,
            } => write!(
                f,
                "corrupt log segment {} at byte {position}: {reason}",
                path.display()
            ),
            LogError::InvalidConfig { reason } => write!(f, "invalid log config: {reason}"),
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogError::Io { source, .. } => Some(source),
            LogError::InvalidBatch(e) => Some(e),
            _ => None,
        }
    }
}

pub(super) fn io_err<'p>(
    op: &'static str,
    path: &'p Path,
) -> impl FnOnce(io::Error) -> LogError + 'p {
    move |source| LogError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// What `append` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: u64,
    pub last_offset: u64,
    /// Byte position of the batch's frame in its segment.
    pub position: u64,
    pub segment_base_offset: u64,
    /// The batch header as stored (base offset as assigned).
    pub header: BatchHeader,
    /// True if the append rolled to a new segment first.
    pub rolled: bool,
}

/// Whole batches read from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadResult {
    /// Concatenated record batches, as stored (Kafka's fetch `records` field); slices of it
    /// go on to the answer without another copy.
    pub records: Bytes,
    pub batches: usize,
    /// Base offset of the first batch returned (may be below the offset asked for).
    pub first_offset: u64,
    /// The offset after the last batch returned (the next fetch position).
    pub next_offset: u64,
    pub log_start_offset: u64,
    pub log_end_offset: u64,
}

/// Part of a segment file a read would take from the file ([`PartitionLog::read_ahead`]):
/// whole blocks, for the runtime to read through the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadAhead {
    pub path: PathBuf,
    pub segment_base: u64,
    /// A multiple of the block size.
    pub position: u64,
    /// A multiple of the block size (the file may end before).
    pub len: u64,
    /// The whole read this part is for, as log positions `(segment base offset, file
    /// position)`, from where the read starts to where its byte budget (with slack) ends:
    /// filling the read cache keeps the chunks that overlap it (the read is about to take
    /// them), and drops others first.
    pub read_from: (u64, u64),
    pub read_to: (u64, u64),
}

/// A flush to perform: every block write made durable (an `O_DSYNC` write, or a write and
/// `fdatasync` of its file), `fdatasync` every file, `fsync` every directory, then
/// [`PartitionLog::complete_flush`]. On success everything below `durable_end_offset` is
/// durable. All of it may be done in any order, concurrently.
#[derive(Debug, PartialEq, Eq)]
pub struct FlushTicket {
    /// A segment a roll sealed since the last flush: made durable *before* anything else of
    /// the ticket is started ([`Seal`]), so that its successor never holds a durable byte
    /// while it could still be torn.
    pub seal: Option<Seal>,
    /// Block-aligned writes of segment tails, whole chunks of block memory (no copy), in file
    /// order per segment. They do not overlap; those of one segment are performed in this
    /// order, each durable before the next starts (a crash tears only the last one issued),
    /// unless `chunks_any_order`.
    pub chunks: Vec<ChunkWrite>,
    /// The chunks (all of the active segment) may be written in any order, concurrently, and
    /// made durable together (one `fdatasync`): a durable checkpoint slot records a position
    /// `d` in this segment at or below the chunks' new bytes, so a crash that leaves a hole
    /// among them (a later chunk landed, an earlier one did not) leaves it at or past `d`, a
    /// tail by FORMAT.md §4 rule 2', even with valid frames after it.
    pub chunks_any_order: bool,
    /// Block-aligned writes of bytes: the checkpoint's newest slot.
    pub writes: Vec<BlockWrite>,
    /// Zeros written ahead of an active segment's tail
    /// ([`LOG_ZERO_FILL_BYTES`](crate::constants::LOG_ZERO_FILL_BYTES) at most),
    /// durable like the block writes; they overlap no block write.
    pub zero_fills: Vec<ZeroFill>,
    pub files: Vec<PathBuf>,
    pub dirs: Vec<PathBuf>,
    pub durable_end_offset: u64,
    id: u64,
}

/// The durable half of a roll, done by the flush after it (off the request path): the roll
/// created the empty index file and handed the segment's unwritten bytes to the seal; the
/// seal writes them (`writes`, whole chunks, `O_DIRECT` like a flush's, concurrently), then
/// cuts the file to its frames (`len`: the preallocated zeros go), then `fdatasync`s the
/// segment, writes the index (the file exists, empty) and `fdatasync`s it, and `fsync`s the
/// directory (the index's and the next segment's entries), those three concurrently; then the
/// `then` writes, one after the other, each durable before the next; the rest of the ticket
/// starts once all are done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seal {
    pub segment: PathBuf,
    pub writes: Vec<ChunkWrite>,
    /// The segment's size: the file is cut to it after the writes.
    pub len: u64,
    pub index: PathBuf,
    pub index_bytes: Vec<u8>,
    pub dir: PathBuf,
    /// In a flush ticket: the next segment's header block, then a checkpoint slot that names
    /// that segment at its header's end (FORMAT.md §5), so that the ticket's chunks of the new
    /// segment, and all its later ones, go in any order. Empty in a seal not yet handed out.
    pub then: Vec<BlockWrite>,
}

/// A tail cut at recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruncatedTail {
    pub path: PathBuf,
    pub position: u64,
    pub bytes: u64,
    pub reason: String,
}

/// What recovery found and did when the log was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub segments: usize,
    pub log_start_offset: u64,
    pub log_end_offset: u64,
    /// Torn or corrupt tails cut from the last segment.
    pub truncated: Vec<TruncatedTail>,
    /// Zero-filled tails trimmed (file, bytes): a clean end, not damage.
    pub zero_tails: Vec<(PathBuf, u64)>,
    /// Tails of the last segment left from its file's earlier life as another segment (file,
    /// bytes): a clean end, kept.
    pub reused_tails: Vec<(PathBuf, u64)>,
    pub indexes_rebuilt: Vec<PathBuf>,
    /// Files deleted: segments below the durable log start, a last segment whose header was
    /// torn, stale index files of the active segment.
    pub removed: Vec<PathBuf>,
    /// True if the partition directory did not exist and was created.
    pub created: bool,
}

/// A segment removed from the log by retention or `delete_records_before`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemovedSegment {
    pub base_offset: u64,
    pub next_offset: u64,
    pub bytes: u64,
}

/// A summary of one segment, for tools and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub path: PathBuf,
    pub base_offset: u64,
    pub next_offset: u64,
    pub size_bytes: u64,
    pub max_timestamp: i64,
    pub index_entries: usize,
}

pub(super) struct CheckpointState<F> {
    pub(super) path: PathBuf,
    pub(super) file: Option<F>,
    /// Generation of the newest slot written.
    pub(super) generation: u64,
    /// The log start offset in the newest slot written (durable unless `dirty`).
    pub(super) written_start: u64,
    /// The durable position in the newest slot written: `(active segment base, byte size)`
    /// covered by the last completed flush (see checkpoint.rs for the crash argument).
    pub(super) written_durable: Option<(u64, u32)>,
    /// A slot was written that no flush ticket has covered yet: the next ticket writes it,
    /// and until then new writes rewrite that slot in place (same generation).
    pub(super) dirty: bool,
    /// The newest slot's block (`(file position, bytes)`), not yet on the file: the next
    /// flush ticket writes it (`O_DIRECT`, durable on completion); recovery writes it itself.
    pub(super) pending: Option<(u64, Vec<u8>)>,
    /// The log start offset of the newest slot a completed flush covered (or recovery read):
    /// a restart never starts the log below it.
    pub(super) durable_start: u64,
    /// The durable position in the newest slot a completed flush covered (or recovery
    /// synced): whatever a crash does to a slot write in flight, a slot recording this
    /// position, or a newer one, survives.
    pub(super) durable_slot: Option<(u64, u32)>,
}

pub(super) struct PendingRemoval {
    base_offset: u64,
    data: PathBuf,
    index: PathBuf,
    /// The segment's next offset: it may be unlinked once a log start at or past it is durable.
    end_offset: u64,
}

pub(super) struct Flight {
    id: u64,
    checkpoint_start: Option<u64>,
    /// The durable position in the slot the ticket writes (with `checkpoint_start`).
    checkpoint_durable: Option<(u64, u32)>,
    /// `(active segment base, size)` when the ticket was made: everything below it is durable
    /// once the ticket completes.
    durable: (u64, u64),
    /// The seal the ticket carries (a copy): until the ticket completes, the sealed segment may
    /// still be torn, so nothing may be written into its successor but by the ticket itself
    /// (see the `Drop` of [`PartitionLog`]).
    seal: Option<Seal>,
    /// The end of the ticket's writes into the active segment (chunks and zeros; 0 if none):
    /// a write-behind starts at or past it, so that no two writes in flight share a block.
    write_end: u64,
}

/// Full chunks of the active segment's tail, handed out before the flush that covers them
/// ([`PartitionLog::take_write_behind`]): the runtime writes them while appends go on (the
/// disk works while the appenders copy), in any order, concurrently, as plain writes (not
/// durable on completion: no device flush per chunk), then reports
/// [`PartitionLog::complete_write_behind`]. They make nothing durable by themselves: the next
/// flush ticket, which starts only after they completed, `fdatasync`s their segment (its
/// `files`) and declares their offsets durable with its own.
#[derive(Debug)]
pub struct WriteBehind {
    pub chunks: Vec<ChunkWrite>,
    id: u64,
}

/// The log of one topic-partition. See the module docs.
pub struct PartitionLog<S: Storage> {
    pub(super) storage: S,
    pub(super) dir: PathBuf,
    pub(super) config: LogConfig,
    /// Sorted by base offset, contiguous, never empty; the last one is the active segment.
    pub(super) segments: Vec<Segment<S::File>>,
    pub(super) log_start_offset: u64,
    pub(super) commit: GroupCommit,
    pub(super) dir_dirty: bool,
    pub(super) checkpoint: CheckpointState<S::File>,
    pub(super) pending_removal: Vec<PendingRemoval>,
    /// Spare files (FORMAT.md §5): data files of removed segments, kept (renamed) for the
    /// next rolls, at most `config.segment_spares`, each with the broker time it became one
    /// (deleted once idle for [`LOG_SEGMENT_SPARE_IDLE_MS`]).
    pub(super) spares: Vec<(PathBuf, u64)>,
    /// The broker time of the last retention pass (or of the open).
    pub(super) retention_now_ms: u64,
    /// Rolls that reused a spare since the open.
    pub(super) reused_rolls: u64,
    /// Set by [`PartitionLog::close`]; a log dropped unclosed does no I/O.
    pub(super) closed: bool,
    pub(super) flight: Option<Flight>,
    /// Write-behinds handed out and not completed: (id, the active segment's file position
    /// where its first chunk starts). No roll until they completed; a flush ticket begun
    /// meanwhile covers only the batches below the first of them ([`Self::begin_flush`]).
    pub(super) write_behinds: Vec<(u64, u64)>,
    pub(super) next_write_behind: u64,
    /// Segments that completed write-behinds wrote into since the last flush ticket, which
    /// syncs those it still holds (a sealed one's seal syncs it; a removed one's bytes are
    /// gone anyway).
    pub(super) write_behinds_unsynced: Vec<PathBuf>,
    /// The seal of the segment the last roll sealed, until a flush ticket takes it. At most
    /// one: a second roll before that seals it synchronously first.
    pub(super) pending_seal: Option<Seal>,
    /// Where the active segment's batches not yet durable end: (file position of a frame's
    /// end, the offset after it), in file order, at most one per block (the last batch that
    /// ends in it). A flush begun while write-behinds are in flight ends at one of them.
    pub(super) boundaries: VecDeque<(u64, u64)>,
}

impl<S: Storage> PartitionLog<S> {
    // ---- state ----

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn log_start_offset(&self) -> u64 {
        self.log_start_offset
    }

    /// The base offset of the active (last) segment.
    pub fn active_base_offset(&self) -> u64 {
        self.active().base_offset
    }

    /// The offset the next appended record gets.
    pub fn log_end_offset(&self) -> u64 {
        self.active().next_offset
    }

    /// The log start offset a restart is guaranteed to keep (DeleteRecords answers once it
    /// reaches the requested offset).
    pub fn durable_log_start_offset(&self) -> u64 {
        self.checkpoint.durable_start
    }

    /// Every offset below this is durable.
    pub fn durable_end_offset(&self) -> u64 {
        self.commit.durable_end()
    }

    /// Bytes of all segments in the log (headers included).
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Spare files kept for the next rolls (FORMAT.md §5).
    pub fn spare_count(&self) -> usize {
        self.spares.len()
    }

    /// Rolls since the open that started their segment in a spare file.
    pub fn reused_rolls(&self) -> u64 {
        self.reused_rolls
    }

    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.segments
            .iter()
            .map(|s| SegmentInfo {
                path: s.path.clone(),
                base_offset: s.base_offset,
                next_offset: s.next_offset,
                size_bytes: s.size,
                max_timestamp: s.max_timestamp,
                index_entries: s.index.len(),
            })
            .collect()
    }

    pub fn is_poisoned(&self) -> bool {
        self.commit.poisoned().is_some()
    }

    /// Why the log is poisoned (the first failure), if it is.
    pub fn poison_cause(&self) -> Option<&str> {
        self.commit.poisoned()
    }

    /// True if a flush ticket is out.
    pub fn flush_in_flight(&self) -> bool {
        self.flight.is_some()
    }

    /// True if a write-behind is out ([`Self::take_write_behind`]).
    pub fn write_behind_in_flight(&self) -> bool {
        !self.write_behinds.is_empty()
    }

    /// True if any write of the log's is out: a roll waits until none is.
    fn io_in_flight(&self) -> bool {
        self.flight.is_some() || !self.write_behinds.is_empty()
    }

    /// True if a flush is in flight or one has work besides unflushed appends: a rolled
    /// segment's seal (a clean shutdown flushes until this and the appends are done).
    pub fn flush_due(&self) -> bool {
        self.flight.is_some() || self.pending_seal.is_some()
    }

    pub(super) fn active(&self) -> &Segment<S::File> {
        self.segments.last().expect("a log has a segment")
    }

    fn check_writable(&self) -> Result<(), LogError> {
        match self.commit.poisoned() {
            Some(cause) => Err(LogError::Poisoned {
                cause: cause.to_string(),
            }),
            None => Ok(()),
        }
    }

    fn poison(&mut self, error: &LogError) {
        tracing::error!(dir = %self.dir.display(), %error, "partition log poisoned");
        self.commit.poison(error.to_string());
    }

    pub(super) fn check_invariants(&self) {
        assert!(!self.segments.is_empty());
        for pair in self.segments.windows(2) {
            assert_eq!(pair[0].next_offset, pair[1].base_offset);
            assert!(!pair[0].dirty, "only the active segment is written");
        }
        assert!(self.log_start_offset >= self.segments[0].base_offset);
        assert!(self.log_start_offset <= self.log_end_offset());
        assert!(self.commit.durable_end() <= self.commit.written_end());
        assert_eq!(self.commit.written_end(), self.log_end_offset());
        let active = self.active();
        assert_eq!(
            active.tail.end(),
            active.size,
            "the tail ends the active segment"
        );
        assert!(
            active.tail.issued <= active.size && active.size <= active.allocated.max(active.size)
        );
    }

    /// The file length to preallocate so that a segment ending at `end` fits: a chunk ahead,
    /// capped at the segment size (both rounded up to a block), never less than `end`.
    pub(super) fn preallocation(segment_bytes: u64, allocated: u64, end: u64) -> u64 {
        let ahead = align_up(end).max(allocated) + LOG_PREALLOCATE_BYTES;
        ahead.min(align_up(segment_bytes)).max(align_up(end))
    }
}

mod append;
mod flush;
mod read;
#[cfg(test)]
mod tests;

pub use flush::{apply_seal, sync_ticket, write_behind};
