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

    // ---- writes ----

    /// Appends one record batch (validated; its base offset is assigned here). The batch is
    /// written to the page cache, not durable until a flush covers it.
    pub fn append(&mut self, batch: &[u8], now_ms: u64) -> Result<AppendInfo, LogError> {
        self.check_writable()?;
        if batch.len() > FRAME_PAYLOAD_BYTES_MAX {
            return Err(LogError::BatchTooLarge {
                bytes: batch.len(),
                max: FRAME_PAYLOAD_BYTES_MAX,
            });
        }
        let header = batch::validate(batch).map_err(LogError::InvalidBatch)?;
        let frame_bytes = frame_total_bytes(batch.len()) as u64;
        let active = self.active();
        let age_due = active
            .first_append_ms
            .is_some_and(|first| now_ms.saturating_sub(first) >= self.config.segment_ms);
        // Never while a write is in flight (a flush's block write may still be landing on the
        // segment's last block): the segment then runs over and rolls at the next flush.
        let rolled = !active.is_empty()
            && !self.io_in_flight()
            && (active.size + frame_bytes > self.config.segment_bytes || age_due);
        if rolled {
            self.roll()?;
        }

        let base = self.log_end_offset();
        let count = header.records_count as u32;
        assert!(base
            .checked_add(u64::from(count))
            .is_some_and(|end| end <= i64::MAX as u64));
        let interval = self.config.index_interval_bytes;
        let segment_bytes = self.config.segment_bytes;
        let active = self.segments.last_mut().expect("a segment");
        let position = active.size;
        let end = position + frame_bytes;
        if end > active.allocated {
            let target = Self::preallocation(segment_bytes, active.allocated, end);
            if let Err(source) = active.file.preallocate(target) {
                let error = LogError::Io {
                    op: "fallocate",
                    path: active.path.clone(),
                    source,
                };
                self.poison(&error);
                return Err(error);
            }
            active.allocated = target;
        }
        // The frame is encoded straight into the tail (one copy of the batch), with its base
        // offset (the batch's first bytes) set.
        let room = active.tail.reserve(frame_bytes as usize);
        encode_frame_into(
            room,
            FrameMeta {
                id: base,
                kind: BATCH_FRAME_KIND,
                count,
            },
            batch,
            &batch::base_offset_bytes(base as i64),
        );
        let crc = u32::from_le_bytes(room[..4].try_into().expect("4 bytes"));
        active.note_frame(
            &ScannedFrame {
                position,
                id: base,
                count,
                crc,
                total_bytes: frame_bytes,
                max_timestamp: header.max_timestamp,
            },
            interval,
        );
        active.first_append_ms.get_or_insert(now_ms);
        active.dirty = true;
        let segment_base_offset = active.base_offset;
        let next = base + u64::from(count);
        self.commit.written(next);
        // Keyed by the block holding the frame's last byte: a flush amid write-behinds ends at
        // a block boundary, and it covers either every frame ending in a block or none.
        let block = |end: u64| (end - 1) / LOG_BLOCK_BYTES;
        match self.boundaries.back_mut() {
            Some(last) if block(last.0) == block(end) => *last = (end, next),
            _ => self.boundaries.push_back((end, next)),
        }
        Ok(AppendInfo {
            base_offset: base,
            last_offset: base + u64::from(count) - 1,
            position,
            segment_base_offset,
            header: BatchHeader {
                base_offset: base as i64,
                ..header
            },
            rolled,
        })
    }

    /// Rolls the active segment if it is full or old enough. Returns true if it rolled.
    /// Not while a write is in flight (the next flush rolls a full segment).
    pub fn roll_if_due(&mut self, now_ms: u64) -> Result<bool, LogError> {
        self.check_writable()?;
        let active = self.active();
        let due = !active.is_empty()
            && !self.io_in_flight()
            && (active.size >= self.config.segment_bytes
                || active
                    .first_append_ms
                    .is_some_and(|first| now_ms.saturating_sub(first) >= self.config.segment_ms));
        if due {
            self.roll()?;
        }
        Ok(due)
    }

    /// Starts a new segment at the log end, sealing the active one: its index file created
    /// here; its unwritten bytes (`O_DIRECT` chunks), the cut of the file to its frames and the
    /// syncs that make it sealed (data, index, directory) are the next flush ticket's
    /// [`Seal`], done before anything else of that ticket, so the roll itself neither writes
    /// nor waits for the disk. Until then the new segment's bytes stay in memory (a crash leaves it all zeros:
    /// recovery removes it, and the sealed segment is the last one again, its tail checked as
    /// such). A second roll before that flush seals the first synchronously: only one segment
    /// at a time may be waiting for its seal.
    fn roll(&mut self) -> Result<(), LogError> {
        assert!(!self.io_in_flight(), "no roll while a write is in flight");
        let result = self.seal_pending_now().and_then(|()| {
            let seal = self.seal_active()?;
            let base = self.log_end_offset();
            let segment = self.start_segment(base)?;
            self.segments.push(segment);
            self.boundaries.clear();
            self.dir_dirty = true;
            self.pending_seal = Some(seal);
            Ok(())
        });
        if let Err(error) = &result {
            self.poison(error);
        }
        result
    }

    /// The segment a roll starts at `base`: in a spare file if the log has one (renamed; the
    /// frames of its earlier life stay behind the new ones until overwritten, a clean end:
    /// FORMAT.md §5), else in a new file. The seal of the segment before it syncs the
    /// directory, and writes the header before anything else of the new segment.
    fn start_segment(&mut self, base: u64) -> Result<Segment<S::File>, LogError> {
        let path = self.dir.join(segment_file_name(base));
        while let Some((spare, _)) = self.spares.pop() {
            let reused = self.storage.rename(&spare, &path).and_then(|()| {
                let file = self.storage.open(&path)?;
                let len = file.len()?;
                Ok((file, len))
            });
            match reused {
                Ok((file, written)) => {
                    self.reused_rolls += 1;
                    let segment_bytes = self.config.segment_bytes;
                    return Self::new_segment(&self.dir, base, segment_bytes, path, file, written);
                }
                Err(e) => {
                    tracing::warn!(file = %spare.display(), error = %e, "could not reuse a spare segment file")
                }
            }
        }
        Self::create_segment(&self.storage, &self.dir, base, self.config.segment_bytes)
    }

    /// Performs a pending seal synchronously (a second roll before a flush took the first).
    fn seal_pending_now(&mut self) -> Result<(), LogError> {
        match self.pending_seal.take() {
            Some(seal) => {
                apply_seal(&self.storage, &seal).map_err(|source| LogError::Io {
                    op: "seal",
                    path: seal.segment.clone(),
                    source,
                })?;
                self.drop_sealed_tails();
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// After a seal completed: the sealed segments' bytes are on the file, their reads go there.
    fn drop_sealed_tails(&mut self) {
        let (_, sealed) = self.segments.split_last_mut().expect("a segment");
        for segment in sealed.iter_mut().filter(|s| !s.tail.is_none()) {
            segment.tail = Tail::none();
        }
    }

    fn seal_active(&mut self) -> Result<Seal, LogError> {
        let active = self.segments.last_mut().expect("a segment");
        assert!(!active.is_empty(), "an empty segment is never sealed");
        // The bytes not yet handed to a write (no write is in flight: asserted by `roll`), as
        // whole chunks the seal writes like a flush (a torn one is a torn tail of the last
        // segment but one, which recovery cuts only while it is the last: the seal completes
        // before its successor holds a durable byte). The tail stays until the seal completed
        // (reads take those bytes from memory); the seal then cuts the file to its frames.
        let writes = active.tail.take_last_writes(&active.path);
        let len = active.size;
        active.allocated = active.size;
        active.dirty = false;
        self.storage
            .create(&active.index_path)
            .map_err(io_err("create", &active.index_path))?;
        Ok(Seal {
            segment: active.path.clone(),
            writes,
            len,
            index: active.index_path.clone(),
            index_bytes: index::encode_index(active.base_offset, &active.index),
            dir: self.dir.clone(),
            then: Vec::new(),
        })
    }

    /// Removes sealed segments by size and age (Kafka's rules: by size while the log without
    /// the oldest segment is still at least `retention_bytes`; by age while the oldest
    /// segment's newest batch timestamp is more than `retention_ms` before `now_ms`). The
    /// log start offset advances at once; the files are unlinked after the next flush.
    pub fn enforce_retention(&mut self, now_ms: u64) -> Result<Vec<RemovedSegment>, LogError> {
        self.check_writable()?;
        self.retention_now_ms = self.retention_now_ms.max(now_ms);
        let storage = &self.storage;
        self.spares.retain(|(spare, since_ms)| {
            if now_ms.saturating_sub(*since_ms) < LOG_SEGMENT_SPARE_IDLE_MS {
                return true;
            }
            if let Err(e) = storage.remove(spare) {
                // A leftover is kept by the next recovery, and deleted once idle again.
                tracing::warn!(file = %spare.display(), error = %e, "could not remove an idle spare segment file");
            }
            false
        });
        let mut removed = Vec::new();
        while self.segments.len() >= 2 {
            let front = &self.segments[0];
            let by_size = self
                .config
                .retention_bytes
                .is_some_and(|limit| self.size_bytes() - front.size >= limit);
            let by_age = self.config.retention_ms.is_some_and(|ms| {
                front.max_timestamp >= 0
                    && (now_ms as i64).saturating_sub(front.max_timestamp) > ms as i64
            });
            if !(by_size || by_age) {
                break;
            }
            removed.push(self.remove_front());
        }
        Ok(removed)
    }

    /// Advances the log start offset to `offset` (Kafka's DeleteRecords), removing sealed
    /// segments wholly below it. Durable after the next flush. Returns the new start.
    pub fn delete_records_before(&mut self, offset: u64) -> Result<u64, LogError> {
        self.check_writable()?;
        if offset > self.log_end_offset() {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset(),
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            while self.segments.len() >= 2 && self.segments[0].next_offset <= offset {
                self.remove_front();
            }
        }
        Ok(self.log_start_offset)
    }

    fn remove_front(&mut self) -> RemovedSegment {
        assert!(
            self.segments.len() >= 2,
            "the active segment is never removed"
        );
        let segment = self.segments.remove(0);
        assert!(!segment.dirty, "sealed segments are synced");
        self.log_start_offset = self.log_start_offset.max(segment.next_offset);
        self.pending_removal.push(PendingRemoval {
            base_offset: segment.base_offset,
            data: segment.path.clone(),
            index: segment.index_path.clone(),
            end_offset: segment.next_offset,
        });
        RemovedSegment {
            base_offset: segment.base_offset,
            next_offset: segment.next_offset,
            bytes: segment.size,
        }
    }

    // ---- durability ----

    /// Starts a flush of everything written so far (and of a changed log start). `None` if
    /// there is nothing to make durable, a flush is already in flight, or the log is poisoned
    /// (writing the checkpoint slot can poison it here: callers waiting for durability should
    /// check [`Self::is_poisoned`] when they get `None`).
    ///
    /// While write-behinds are in flight, the ticket is a *prefix flush*
    /// (`Self::begin_prefix_flush`): it writes no tail and covers the batches below the
    /// first write-behind in flight, `None` if that covers nothing new. The runtime then waits
    /// for that write-behind and asks again; a ticket that also writes the rest of the tail
    /// begins once none is in flight.
    pub fn begin_flush(&mut self) -> Option<FlushTicket> {
        if self.is_poisoned() || self.flight.is_some() {
            return None;
        }
        if !self.write_behinds.is_empty() {
            return self.begin_prefix_flush();
        }
        // A segment that ran over while the previous flush was in flight rolls now (unless
        // the last roll's seal is still to come: this ticket takes it, the next one rolls).
        let active = self.active();
        if !active.is_empty()
            && active.size >= self.config.segment_bytes
            && self.pending_seal.is_none()
            && self.roll().is_err()
        {
            return None;
        }
        let mut seal = self.pending_seal.take();
        let mut files: Vec<PathBuf> = std::mem::take(&mut self.write_behinds_unsynced)
            .into_iter()
            .filter(|path| {
                seal.as_ref().is_none_or(|s| &s.segment != path)
                    && self.segments.iter().any(|s| &s.path == path)
            })
            .collect();
        let mut writes = Vec::new();
        let mut chunks = Vec::new();
        let mut zero_fills = Vec::new();
        let mut checkpoint_start = None;
        let mut checkpoint_durable = None;
        // A seal names the new (active) segment at its header's end in the slot it writes last
        // (FORMAT.md §5): a lower bound of its durable bytes once its header block is durable,
        // which the seal writes just before; recovery removes a segment whose header did not
        // land (nothing else of it is written before the seal completed).
        if seal.is_some()
            && self
                .record_durable_position((self.active().base_offset, HEADER_BYTES_U64))
                .is_err()
        {
            return None;
        }
        // Also the slot written after the previous flush (its durable position): one block
        // write, durable like the segments' (no page-cache write to sync).
        if let Some(slot) = self.take_checkpoint_slot()? {
            match seal.as_mut() {
                Some(seal) => {
                    let active = self.active();
                    let mut header = vec![0u8; LOG_BLOCK_BYTES as usize];
                    header[..SEGMENT_HEADER_BYTES].copy_from_slice(
                        &SegmentHeader::new(SegmentKind::Log, active.base_offset).encode(),
                    );
                    seal.then = vec![
                        BlockWrite {
                            path: active.path.clone(),
                            position: 0,
                            data: header,
                        },
                        slot,
                    ];
                }
                None => writes.push(slot),
            }
            checkpoint_start = Some(self.checkpoint.written_start);
            checkpoint_durable = self.checkpoint.written_durable;
        }
        let active = self.active();
        let durable = (active.base_offset, active.size);
        // Rule 2' covers the active segment's new bytes once a durable slot names it (its
        // position is at most what earlier flushes covered), or once this ticket's seal wrote
        // one that does (before any chunk starts).
        let chunks_any_order = self
            .checkpoint
            .durable_slot
            .is_some_and(|(base, _)| base == active.base_offset)
            || checkpoint_durable.is_some_and(|(base, _)| {
                base == active.base_offset && seal.as_ref().is_some_and(|s| !s.then.is_empty())
            });
        for segment in &mut self.segments {
            if segment.dirty {
                let taken = segment.tail.take_writes(&segment.path);
                match taken.last().map(ChunkWrite::end) {
                    Some(end) => {
                        zero_fills.extend(segment.zero_ahead(end));
                        chunks.extend(taken);
                    }
                    None if files.contains(&segment.path) => {}
                    None => files.push(segment.path.clone()),
                }
                segment.dirty = false;
            }
        }
        let active_path = &self.active().path;
        let write_end = chunks
            .iter()
            .filter(|c| &c.path == active_path)
            .map(ChunkWrite::end)
            .chain(
                zero_fills
                    .iter()
                    .filter(|z| &z.path == active_path)
                    .map(|z| z.position + z.len),
            )
            .max()
            .unwrap_or(0);
        let mut dirs = Vec::new();
        if self.dir_dirty && seal.is_none() {
            dirs.push(self.dir.clone());
        }
        // The seal's directory sync covers every entry made so far.
        self.dir_dirty = false;
        let force = !files.is_empty()
            || !dirs.is_empty()
            || !writes.is_empty()
            || !chunks.is_empty()
            || seal.is_some();
        let flight = self.commit.begin(force);
        let Some(flight) = flight else {
            assert!(!force, "a flush with work to do must start");
            return None;
        };
        assert!(
            !chunks_any_order || chunks.iter().all(|c| c.path == self.active().path),
            "only the active segment's chunks are written in any order"
        );
        self.flight = Some(Flight {
            id: flight.id,
            checkpoint_start,
            checkpoint_durable,
            durable,
            seal: seal.clone(),
            write_end,
        });
        Some(FlushTicket {
            seal,
            chunks,
            chunks_any_order,
            writes,
            zero_fills,
            files,
            dirs,
            durable_end_offset: flight.target,
            id: flight.id,
        })
    }

    /// For a flush ticket: a slot with the log start if it moved since the last one, then the
    /// checkpoint's pending slot as a block write, if there is one (the checkpoint is then clean
    /// until the next slot). `None` (outer) if the slot could not be written: the log is poisoned.
    fn take_checkpoint_slot(&mut self) -> Option<Option<BlockWrite>> {
        if self.log_start_offset != self.checkpoint.written_start {
            if let Err(error) = self.write_checkpoint() {
                self.poison(&error);
                return None;
            }
        }
        if !self.checkpoint.dirty {
            return Some(None);
        }
        let (position, data) = self
            .checkpoint
            .pending
            .take()
            .expect("a dirty checkpoint has a slot to write");
        self.checkpoint.dirty = false;
        Some(Some(BlockWrite {
            path: self.checkpoint.path.clone(),
            position,
            data,
        }))
    }

    /// A flush while write-behinds are in flight: every byte of the active segment below the
    /// first of them is on the file (written by completed write-behinds, or by tickets, which
    /// complete before the next begins; write-behinds are handed out in file order), so the
    /// ticket `fdatasync`s the segment and declares durable the batches that end there, while
    /// the later write-behinds go on landing. It writes only the checkpoint's pending slot
    /// (and syncs the directory if entries changed): no tail, no zeros, no roll, so it shares
    /// no block with a write in flight. `None` if it would cover nothing new.
    fn begin_prefix_flush(&mut self) -> Option<FlushTicket> {
        assert!(
            self.pending_seal.is_none(),
            "no write-behind while a seal is pending"
        );
        let active = self.active();
        let written = self
            .write_behinds
            .iter()
            .map(|&(_, from)| from)
            .min()
            .expect("write-behinds in flight");
        let base = active.base_offset;
        let &(position, target) = self
            .boundaries
            .iter()
            .rev()
            .find(|&&(end, _)| end <= written)?;
        // A log start moved past it (DeleteRecords) waits for a whole flush: its slot must not
        // become durable before the batches below it, or a crash would leave a durable start
        // past the durable end.
        if target <= self.commit.durable_end() || self.log_start_offset > target {
            return None;
        }
        let (mut checkpoint_start, mut checkpoint_durable, mut writes) = (None, None, Vec::new());
        if let Some(slot) = self.take_checkpoint_slot()? {
            writes.push(slot);
            checkpoint_start = Some(self.checkpoint.written_start);
            checkpoint_durable = self.checkpoint.written_durable;
        }
        let active_path = self.active().path.clone();
        let files: Vec<PathBuf> = std::mem::take(&mut self.write_behinds_unsynced)
            .into_iter()
            .filter(|path| self.segments.iter().any(|s| &s.path == path))
            .collect();
        // The write-behind that ended the last prefix completed since: its segment is here.
        assert!(
            files.contains(&active_path),
            "a prefix flush covers bytes of completed write-behinds"
        );
        let mut dirs = Vec::new();
        if std::mem::take(&mut self.dir_dirty) {
            dirs.push(self.dir.clone());
        }
        let flight = self
            .commit
            .begin_prefix(target)
            .expect("no flush in flight, the log not poisoned");
        self.flight = Some(Flight {
            id: flight.id,
            checkpoint_start,
            checkpoint_durable,
            durable: (base, position),
            seal: None,
            write_end: 0,
        });
        Some(FlushTicket {
            seal: None,
            chunks: Vec::new(),
            chunks_any_order: false,
            writes,
            zero_fills: Vec::new(),
            files,
            dirs,
            durable_end_offset: target,
            id: flight.id,
        })
    }

    /// Full chunks of the active segment's tail to write now, ahead of the flush that will
    /// cover them ([`WriteBehind`]), if there are any and writing them ahead is safe:
    /// - a durable checkpoint slot names the active segment, so that a crash that keeps a later
    ///   chunk and loses an earlier one leaves the hole at or past the slot's position, a tail
    ///   by FORMAT.md §4 rule 2' (the same argument as a ticket's `chunks_any_order`);
    /// - they start at or past the end of the writes of the flush in flight (no block written
    ///   twice at once: a flush's last chunk is a partial block padded with zeros, which the
    ///   next chunk rewrites whole).
    ///
    /// A full chunk that starts inside the flight's last block stays for the next ticket, and
    /// so do those after it (handed out in file order). None once the segment is due to roll:
    /// the write-behinds in flight drain, and the next ticket rolls it (write-behinds could
    /// otherwise be in flight without end under a steady load, and the segment never roll).
    pub fn take_write_behind(&mut self) -> Option<WriteBehind> {
        if self.is_poisoned()
            || self.pending_seal.is_some()
            || self.active().size >= self.config.segment_bytes
        {
            return None;
        }
        let from = self.flight.as_ref().map_or(0, |f| f.write_end);
        let active = self.segments.last_mut().expect("a segment");
        let named = self
            .checkpoint
            .durable_slot
            .is_some_and(|(base, _)| base == active.base_offset);
        if !named {
            return None;
        }
        let chunks = active.tail.take_full_writes(&active.path, from);
        if chunks.is_empty() {
            return None;
        }
        let id = self.next_write_behind;
        self.next_write_behind += 1;
        self.write_behinds.push((id, chunks[0].position));
        Some(WriteBehind { chunks, id })
    }

    /// Ends a write-behind: on failure the log is poisoned (nothing it covered was declared
    /// durable) and the error returned.
    pub fn complete_write_behind(
        &mut self,
        write: WriteBehind,
        result: io::Result<()>,
    ) -> Result<(), LogError> {
        let at = self
            .write_behinds
            .iter()
            .position(|&(id, _)| id == write.id)
            .expect("complete_write_behind of a write-behind handed out");
        self.write_behinds.swap_remove(at);
        match result {
            Ok(()) => {
                for chunk in &write.chunks {
                    if !self.write_behinds_unsynced.contains(&chunk.path) {
                        self.write_behinds_unsynced.push(chunk.path.clone());
                    }
                }
                Ok(())
            }
            Err(error) => {
                let cause = format!("write-behind of {} failed: {error}", self.dir.display());
                tracing::error!(dir = %self.dir.display(), %error, "write-behind failed; partition log poisoned");
                self.commit.poison(cause.clone());
                Err(LogError::Poisoned { cause })
            }
        }
    }

    /// Writes a checkpoint slot with the current log start and `checkpoint.written_durable`:
    /// into `checkpoint.pending`, the block the next flush ticket writes (the file is created
    /// here if it does not exist). Never called while a flush is in flight. A new generation
    /// only when the file is clean (the other slot is durable); else the newest slot, not yet
    /// covered by a flush, is rewritten in place.
    pub(super) fn write_checkpoint(&mut self) -> Result<(), LogError> {
        assert!(
            self.flight.is_none(),
            "a slot is never written during a flush"
        );
        let path = &self.checkpoint.path;
        if self.checkpoint.file.is_none() {
            let file = self.storage.create(path).map_err(io_err("create", path))?;
            self.checkpoint.file = Some(file);
            self.dir_dirty = true;
        }
        let generation = if self.checkpoint.dirty {
            self.checkpoint.generation.max(1)
        } else {
            self.checkpoint.generation + 1
        };
        let slot = checkpoint::encode_slot(CheckpointSlot {
            generation,
            log_start_offset: self.log_start_offset,
            durable: self.checkpoint.written_durable,
        });
        let mut block = vec![0u8; LOG_CHECKPOINT_SLOT_STRIDE_BYTES as usize];
        block[..slot.len()].copy_from_slice(&slot);
        self.checkpoint.pending = Some((checkpoint::slot_position(generation), block));
        self.checkpoint.generation = generation;
        self.checkpoint.written_start = self.log_start_offset;
        self.checkpoint.dirty = true;
        Ok(())
    }

    /// Ends a flush. On success the ticket's offsets are durable (and segments below a durable
    /// log start are unlinked); on failure the log is poisoned and the error returned.
    pub fn complete_flush(
        &mut self,
        ticket: FlushTicket,
        result: io::Result<()>,
    ) -> Result<(), LogError> {
        let flight = self
            .flight
            .take()
            .expect("complete_flush without a flush in flight");
        assert_eq!(
            flight.id, ticket.id,
            "complete_flush with another flush's ticket"
        );
        match result {
            Err(error) => {
                let cause = format!("flush of {} failed: {error}", self.dir.display());
                tracing::error!(dir = %self.dir.display(), %error, "fdatasync failed; partition log poisoned");
                self.commit.complete(flight.id, Err(cause.clone()));
                Err(LogError::Poisoned { cause })
            }
            Ok(()) => {
                self.commit.complete(flight.id, Ok(()));
                let durable_end = self.commit.durable_end();
                while self
                    .boundaries
                    .front()
                    .is_some_and(|&(_, next)| next <= durable_end)
                {
                    self.boundaries.pop_front();
                }
                if flight.seal.is_some() {
                    self.drop_sealed_tails();
                }
                let (base, size) = flight.durable;
                let active = self.segments.last_mut().expect("a segment");
                if active.base_offset == base {
                    active.tail.written_up_to(size);
                }
                if let Some(start) = flight.checkpoint_start {
                    self.checkpoint.durable_slot = flight.checkpoint_durable;
                    self.checkpoint.durable_start = self.checkpoint.durable_start.max(start);
                    self.unlink_removed(start);
                }
                self.record_durable_position(flight.durable)
            }
        }
    }

    /// After a completed flush (or for a seal, the new segment at its header's end): records
    /// `(segment base, size)` as the durable position of the active segment in a checkpoint
    /// slot, synced by the next flush's ticket (by this one's seal). Only when it moved, so a
    /// flush that synced just the checkpoint does not cause another one. Poisons on failure.
    fn record_durable_position(&mut self, (base, size): (u64, u64)) -> Result<(), LogError> {
        let position = u32::try_from(size).unwrap_or(u32::MAX);
        assert!(position as usize >= SEGMENT_HEADER_BYTES);
        let durable = Some((base, position));
        if self.checkpoint.written_durable == durable {
            return Ok(());
        }
        let previous = self.checkpoint.written_durable;
        self.checkpoint.written_durable = durable;
        if let Err(error) = self.write_checkpoint() {
            self.checkpoint.written_durable = previous;
            self.poison(&error);
            return Err(error);
        }
        Ok(())
    }

    /// Deletes the files of removed segments wholly below `durable_start`, keeping data files
    /// as spares while there is room (renamed: a crash before the directory is synced leaves
    /// either name, and recovery deals with both).
    fn unlink_removed(&mut self, durable_start: u64) {
        let (storage, dir, spares) = (&self.storage, &self.dir, &mut self.spares);
        let (room, now_ms) = (self.config.segment_spares, self.retention_now_ms);
        self.pending_removal.retain(|pending| {
            if pending.end_offset > durable_start {
                return true;
            }
            let mut kept = false;
            if spares.len() < room {
                let spare = dir.join(spare_file_name(pending.base_offset));
                match storage.rename(&pending.data, &spare) {
                    Ok(()) => {
                        spares.push((spare, now_ms));
                        kept = true;
                    }
                    Err(e) => {
                        tracing::warn!(file = %pending.data.display(), error = %e, "could not keep a removed segment as a spare")
                    }
                }
            }
            let data = (!kept).then_some(&pending.data);
            for path in data.into_iter().chain([&pending.index]) {
                match storage.remove(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    // A leftover is deleted by the next recovery; the log is still correct.
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "could not remove segment file")
                    }
                }
            }
            false
        });
    }

    /// Synchronous flush: [`Self::begin_flush`], sync through the storage, [`Self::complete_flush`].
    /// Must not be called while an asynchronous flush is in flight (asserted: complete it
    /// first, e.g. at shutdown).
    pub fn flush(&mut self) -> Result<(), LogError> {
        assert!(
            !self.io_in_flight(),
            "flush() while an asynchronous flush or write-behind is in flight"
        );
        let Some(ticket) = self.begin_flush() else {
            return self.check_writable();
        };
        let result = sync_ticket(&self.storage, &ticket);
        self.complete_flush(ticket, result)
    }

    // ---- reads ----

    /// Whole batches from the one containing `offset`, up to `max_bytes` (but at least one
    /// batch). `offset == log_end_offset` gives an empty result.
    pub fn read(&self, offset: u64, max_bytes: usize) -> Result<ReadResult, LogError> {
        self.read_records(offset, max_bytes, u64::MAX)
    }

    /// The segment index and byte position where a read of `offset` starts (the indexed
    /// frame at or before it), for `log_start <= offset < log_end`.
    fn read_start(&self, offset: u64) -> (usize, u64) {
        let mut seg_i = self.segments.partition_point(|s| s.base_offset <= offset) - 1;
        while self.segments[seg_i].next_offset <= offset {
            seg_i += 1; // an empty segment at `offset` (never the last: offset < end)
        }
        let position = index::lookup_offset(&self.segments[seg_i].index, offset)
            .map_or(HEADER_BYTES_U64, |e| e.position);
        (seg_i, position)
    }

    /// [`Self::read`], stopping also after the batch that brings the records from `offset` on
    /// to `max_records` (a ShareFetch reads what its record budget can take). Each payload
    /// is copied once, from the in-memory tail, the read cache or the file, into the result;
    /// batch headers are not parsed here (the frame's id and count say where a batch is).
    pub fn read_records(
        &self,
        offset: u64,
        max_bytes: usize,
        max_records: u64,
    ) -> Result<ReadResult, LogError> {
        let start = self.log_start_offset;
        let end = self.log_end_offset();
        if offset < start || offset > end {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: start,
                log_end_offset: end,
            });
        }
        let mut result = ReadResult {
            records: Bytes::new(),
            batches: 0,
            first_offset: offset,
            next_offset: offset,
            log_start_offset: start,
            log_end_offset: end,
        };
        if offset == end {
            return Ok(result);
        }
        let (mut seg_i, mut position) = self.read_start(offset);
        let mut records = Vec::new();
        loop {
            let segment = &self.segments[seg_i];
            if position >= segment.size {
                seg_i += 1;
                if seg_i == self.segments.len() {
                    break;
                }
                position = HEADER_BYTES_U64;
                continue;
            }
            let frame = read_frame_head(segment, position)?;
            let corrupt = |reason: String| LogError::Corrupt {
                path: segment.path.clone(),
                position,
                reason,
            };
            let frame_end = frame.meta.id + u64::from(frame.meta.count);
            if result.batches == 0 {
                if frame.meta.id > offset {
                    return Err(corrupt(format!(
                        "looking for offset {offset}, found a frame at offset {}",
                        frame.meta.id
                    )));
                }
                if frame_end <= offset {
                    position += frame.total_bytes;
                    continue;
                }
                result.first_offset = frame.meta.id;
            } else if frame.meta.id != result.next_offset {
                return Err(corrupt(format!(
                    "frame holds offset {} where offset {} was expected",
                    frame.meta.id, result.next_offset
                )));
            } else if records.len() + frame.payload_len > max_bytes {
                break;
            }
            if frame.meta.kind != BATCH_FRAME_KIND {
                return Err(corrupt(format!(
                    "frame kind {} is not a record batch",
                    frame.meta.kind
                )));
            }
            read_payload(segment, position, &frame, &mut records)?;
            result.batches += 1;
            result.next_offset = frame_end;
            position += frame.total_bytes;
            if records.len() >= max_bytes || frame_end.saturating_sub(offset) >= max_records {
                break;
            }
        }
        result.records = Bytes::from(records);
        Ok(result)
    }

    /// The parts of segment files a read of `offset` (up to `max_bytes`) would take from the
    /// files rather than from memory: block-aligned ranges for the runtime to read ahead
    /// through the engine ([`Self::fill_read_cache`]). At most [`LOG_READ_AHEAD_BYTES_MAX`]
    /// in all; empty if everything is in memory.
    pub fn read_ahead(&self, offset: u64, max_bytes: usize) -> Vec<ReadAhead> {
        if offset < self.log_start_offset || offset >= self.log_end_offset() {
            return Vec::new();
        }
        let (seg_i, position) = self.read_start(offset);
        self.read_ahead_from(seg_i, position, max_bytes)
    }

    /// [`Self::read_ahead`] for a share partition that starts at `timestamp`
    /// (`share.auto.offset.reset=by_duration`): what [`Self::offset_for_timestamp`] scans and
    /// a read of `max_bytes` from the batch it finds takes, from the timestamp index's entry
    /// on (the batch is normally within an index interval of it).
    pub fn read_ahead_at_timestamp(&self, timestamp: i64, max_bytes: usize) -> Vec<ReadAhead> {
        let found = self.segments.iter().enumerate().find(|(_, segment)| {
            segment.max_timestamp >= timestamp && segment.next_offset > self.log_start_offset
        });
        let Some((seg_i, segment)) = found else {
            return Vec::new();
        };
        let position = index::lookup_timestamp(&segment.index, timestamp)
            .map_or(HEADER_BYTES_U64, |e| e.position);
        self.read_ahead_from(seg_i, position, max_bytes)
    }

    fn read_ahead_from(
        &self,
        mut seg_i: usize,
        mut position: u64,
        max_bytes: usize,
    ) -> Vec<ReadAhead> {
        let mut out = Vec::new();
        let read_from = (self.segments[seg_i].base_offset, position);
        let mut read_to = read_from;
        // The indexed frame may start an index interval before the offset, and the last
        // batch may run past the byte budget.
        let mut left = (max_bytes as u64)
            .saturating_add(self.config.index_interval_bytes + LOG_READ_AHEAD_SLACK_BYTES)
            .min(LOG_READ_AHEAD_BYTES_MAX);
        while left > 0 && seg_i < self.segments.len() {
            let segment = &self.segments[seg_i];
            let end = (position + left).min(segment.size);
            if position < end {
                if let Some((from, to)) = segment.missing(position, end) {
                    out.push(ReadAhead {
                        path: segment.path.clone(),
                        segment_base: segment.base_offset,
                        position: from,
                        len: to - from,
                        read_from,
                        read_to,
                    });
                }
                read_to = (segment.base_offset, end);
                left -= end - position;
            }
            seg_i += 1;
            position = HEADER_BYTES_U64;
        }
        for part in &mut out {
            part.read_to = read_to;
        }
        out
    }

    /// Hands the log the bytes of a [`ReadAhead`] the runtime read (`data` holds at least
    /// the file's bytes `[position, position + read)`, `read <= len`; a short read ends at
    /// the file's end). Ignored if the segment is gone or its tail moved below the range.
    /// The log keeps at most [`LOG_READ_CACHE_BYTES_MAX`] read ahead, dropping the lowest
    /// chunks first (consumers move forward), but never one the read this part is for
    /// overlaps (`read_from..read_to`): its read finds everything planned in memory (the
    /// plan is at most [`LOG_READ_AHEAD_BYTES_MAX`], so the cache exceeds the bound by at
    /// most the chunks that overhang the read's ends, until the next fill).
    pub fn fill_read_cache(&mut self, ahead: &ReadAhead, read: u64, data: CachedBytes) {
        let Some(segment) = self
            .segments
            .iter_mut()
            .find(|s| s.base_offset == ahead.segment_base && s.path == ahead.path)
        else {
            return;
        };
        let len = read.min(ahead.len).min(data.len() as u64);
        if len == 0 || ahead.position + len > segment.tail.start {
            return;
        }
        segment.add_chunk(ahead.position, len, data);
        let (from, to) = (ahead.read_from, ahead.read_to);
        // Chunks are disjoint, so the one just added is the only one at its position.
        let keep = (ahead.segment_base, ahead.position);
        while self.read_cache_bytes() > LOG_READ_CACHE_BYTES_MAX {
            let victim = self
                .segments
                .iter()
                .enumerate()
                .flat_map(|(i, s)| {
                    s.cache.iter().enumerate().map(move |(j, c)| {
                        let base = s.base_offset;
                        (i, j, (base, c.position), (base, c.end()))
                    })
                })
                .find(|&(_, _, at, end)| at != keep && !(end > from && at < to));
            match victim {
                Some((i, j, _, _)) => {
                    self.segments[i].cache.remove(j);
                }
                None => break,
            }
        }
    }

    /// Reads (of the segments the log holds) that took bytes from the files with `pread`,
    /// the synchronous fallback, because neither the tail nor the read cache held them.
    pub fn file_reads(&self) -> u64 {
        self.segments.iter().map(|s| s.file_reads.get()).sum()
    }

    /// Bytes read ahead and held by the log's segments.
    pub fn read_cache_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.cached_bytes()).sum()
    }

    /// Drops everything read ahead (the shard's budget of read-ahead memory is spent).
    pub fn drop_read_cache(&mut self) {
        for segment in &mut self.segments {
            segment.cache.clear();
        }
    }

    /// ListOffsets by timestamp: the first batch (at or after the log start) whose
    /// maxTimestamp is `>= timestamp`, as (its base offset or the log start if later, its
    /// maxTimestamp). Precision is one batch, as the log does not decode records.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(u64, i64)>, LogError> {
        let mut scratch = Vec::new();
        for segment in &self.segments {
            if segment.max_timestamp < timestamp || segment.next_offset <= self.log_start_offset {
                continue;
            }
            let mut position = index::lookup_timestamp(&segment.index, timestamp)
                .map_or(HEADER_BYTES_U64, |e| e.position);
            while position < segment.size {
                let frame = read_frame_head(segment, position)?;
                scratch.clear();
                read_payload(segment, position, &frame, &mut scratch)?;
                let header = batch::parse_header(&scratch).map_err(|e| LogError::Corrupt {
                    path: segment.path.clone(),
                    position,
                    reason: e.to_string(),
                })?;
                let last = frame.meta.id + u64::from(frame.meta.count) - 1;
                if header.max_timestamp >= timestamp && last >= self.log_start_offset {
                    return Ok(Some((
                        frame.meta.id.max(self.log_start_offset),
                        header.max_timestamp,
                    )));
                }
                position += frame.total_bytes;
            }
        }
        Ok(None)
    }
}

impl<S: Storage> PartitionLog<S> {
    /// Closes the log (shutdown, a clean reopen): hands its written-behind tail to the file
    /// (not synced), as a page-cache log would have it, so a process restart without power loss
    /// keeps every append. Bytes a flush in flight is also writing are the same bytes, except
    /// its zero padding, which can only land past what that flush made durable (rule 2' of
    /// FORMAT.md cuts there after a power loss).
    ///
    /// Writes the active segment's unwritten bytes, as a process that exits leaves them in the
    /// page cache (a later open reads them; not durable, except that without a durable slot
    /// naming the segment each piece is synced before the next: a power loss after the close
    /// must leave a tail, not a hole before frames). A rolled segment whose seal has not
    /// completed (pending, or in a ticket that never completed) is sealed first: the new
    /// segment must not hold a byte on disk while its predecessor could still be torn (a power
    /// loss could then keep the new segment's header and lose the sealed segment's last bytes,
    /// and recovery only cuts the last segment). If the seal fails, the tail is not written and
    /// the error is returned. A poisoned log writes nothing and returns its poison.
    ///
    /// A log dropped without `close` (a deleted partition, a panic) writes nothing: what it held
    /// past its last flush was never acknowledged as durable.
    pub fn close(mut self) -> Result<(), LogError> {
        self.closed = true;
        if let Some(cause) = self.poison_cause() {
            return Err(LogError::Poisoned {
                cause: cause.to_string(),
            });
        }
        let in_flight = self.flight.take().and_then(|flight| flight.seal);
        for seal in in_flight.iter().chain(self.pending_seal.take().iter()) {
            apply_seal(&self.storage, seal)
                .map_err(io_err("seal the rolled segment at close", &seal.segment))?;
        }
        let Some(active) = self.segments.last() else {
            return Ok(());
        };
        if active.tail.is_none() {
            return Ok(());
        }
        // Zero-padded to the block's end, as a flush writes it: in a reused file, that block
        // holds bytes of the file's earlier life (FORMAT.md §5).
        let end = active.tail.end();
        let padding = vec![0u8; (align_up(end).min(active.allocated.max(end)) - end) as usize];
        // Unsynced writes may land in any order, and a hole followed by frames is a tail only
        // past a durable slot's position (FORMAT.md §4 rule 2'): without a slot naming this
        // segment (a new log never flushed), each piece is made durable before the next.
        let named = self
            .checkpoint
            .durable_slot
            .is_some_and(|(base, _)| base == active.base_offset);
        let pieces = active.tail.pieces_from(active.tail.start);
        for (position, bytes) in pieces.into_iter().chain([(end, &padding[..])]) {
            active
                .file
                .write_direct_at(bytes, position)
                .and_then(|()| if named { Ok(()) } else { active.file.sync() })
                .map_err(io_err("write the log tail at close", &active.path))?;
        }
        Ok(())
    }
}

/// A log dropped without [`PartitionLog::close`] does no I/O; it says so if that dropped
/// appended bytes no flush or close wrote.
impl<S: Storage> Drop for PartitionLog<S> {
    fn drop(&mut self) {
        if !self.closed
            && !self.is_poisoned()
            && self.segments.last().is_some_and(|a| !a.tail.is_none())
        {
            tracing::debug!(dir = %self.dir.display(), "partition log dropped without close: its unflushed tail is not written");
        }
    }
}

/// Performs a ticket's syncs through the storage (the synchronous path; the runtime does the
/// same through io_uring).
pub fn sync_ticket<S: Storage>(storage: &S, ticket: &FlushTicket) -> io::Result<()> {
    let context =
        |path: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    if let Some(seal) = &ticket.seal {
        apply_seal(storage, seal)?;
    }
    // Any order: last chunk first, one sync after all (a power loss before it may keep any
    // of them, later chunks without earlier ones).
    let in_order = !ticket.chunks_any_order;
    let chunks: Vec<&ChunkWrite> = if in_order {
        ticket.chunks.iter().collect()
    } else {
        ticket.chunks.iter().rev().collect()
    };
    for write in &chunks {
        let file = storage
            .open(&write.path)
            .map_err(|e| context(&write.path, e))?;
        file.write_direct_at(write.bytes(), write.position)
            .and_then(|()| if in_order { file.sync() } else { Ok(()) })
            .map_err(|e| context(&write.path, e))?;
    }
    if let Some(write) = chunks.first().filter(|_| !in_order) {
        let file = storage
            .open(&write.path)
            .map_err(|e| context(&write.path, e))?;
        file.sync().map_err(|e| context(&write.path, e))?;
    }
    write_blocks_durably(storage, &ticket.writes)?;
    for fill in &ticket.zero_fills {
        let file = storage
            .open(&fill.path)
            .map_err(|e| context(&fill.path, e))?;
        file.write_direct_at(&vec![0; fill.len as usize], fill.position)
            .and_then(|()| file.sync())
            .map_err(|e| context(&fill.path, e))?;
    }
    for file in &ticket.files {
        storage.sync_file(file).map_err(|e| context(file, e))?;
    }
    for dir in &ticket.dirs {
        storage.sync_dir(dir).map_err(|e| context(dir, e))?;
    }
    Ok(())
}

/// Performs a [`WriteBehind`] synchronously through `storage`: each chunk written, not synced
/// (the next ticket syncs the file; the runtime does the same through io_uring).
pub fn write_behind<S: Storage>(storage: &S, write: &WriteBehind) -> io::Result<()> {
    for chunk in &write.chunks {
        let context =
            |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", chunk.path.display()));
        let file = storage.open(&chunk.path).map_err(context)?;
        file.write_direct_at(chunk.bytes(), chunk.position)
            .map_err(context)?;
    }
    Ok(())
}

/// Performs a [`Seal`] synchronously through `storage` (see [`sync_ticket`]).
pub fn apply_seal<S: Storage>(storage: &S, seal: &Seal) -> io::Result<()> {
    let context =
        |path: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let segment = storage
        .open(&seal.segment)
        .map_err(|e| context(&seal.segment, e))?;
    // Each durable before the next, as the runtime's chunk writes are (`O_DSYNC`): the sealed
    // segment may have no durable slot naming it, so a hole in it would not be a tail.
    for write in &seal.writes {
        segment
            .write_direct_at(write.bytes(), write.position)
            .and_then(|()| segment.sync())
            .map_err(|e| context(&seal.segment, e))?;
    }
    segment
        .set_len(seal.len)
        .map_err(|e| context(&seal.segment, e))?;
    storage
        .sync_file(&seal.segment)
        .map_err(|e| context(&seal.segment, e))?;
    let index = storage
        .open(&seal.index)
        .map_err(|e| context(&seal.index, e))?;
    index
        .write_at(&seal.index_bytes, 0)
        .and_then(|()| index.sync())
        .map_err(|e| context(&seal.index, e))?;
    storage
        .sync_dir(&seal.dir)
        .map_err(|e| context(&seal.dir, e))?;
    write_blocks_durably(storage, &seal.then)
}

/// Writes `writes` one after the other, each durable before the next.
fn write_blocks_durably<S: Storage>(storage: &S, writes: &[BlockWrite]) -> io::Result<()> {
    for write in writes {
        let context =
            |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", write.path.display()));
        let file = storage.open(&write.path).map_err(context)?;
        file.write_direct_at(&write.data, write.position)
            .and_then(|()| file.sync())
            .map_err(context)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::BatchBuilder;
    use crate::log::segment::{parse_file_name, segment_file_name};
    use crate::storage::file::SimStorage;
    use std::rc::Rc;

    fn batch(records: usize, ts: i64, fill: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(ts);
        let value = vec![b'v'; fill];
        for i in 0..records {
            b.record(ts + i as i64, None, Some(&value));
        }
        b.build()
    }

    fn small() -> LogConfig {
        LogConfig {
            segment_bytes: 2048,
            index_interval_bytes: 256,
            ..LogConfig::default()
        }
    }

    fn open(storage: &SimStorage, config: LogConfig) -> (PartitionLog<SimStorage>, RecoveryReport) {
        PartitionLog::open(storage.clone(), Path::new("/data/t-0"), config, 0).unwrap()
    }

    /// A power loss (`seed`), then recovery: the log ends between `durable` and `written`
    /// and reads whole to its end. True if recovery cut a hole before valid frames (rule 2').
    fn recovers_between(
        storage: &SimStorage,
        seed: u64,
        config: LogConfig,
        durable: u64,
        written: u64,
    ) -> bool {
        let (recovered, report) = open(&storage.crash(seed), config);
        let end = recovered.log_end_offset();
        assert!(
            durable <= end && end <= written,
            "seed {seed}: {durable} {end} {written} {report:?}"
        );
        assert_eq!(recovered.read(0, usize::MAX).unwrap().next_offset, end);
        report
            .truncated
            .iter()
            .any(|t| t.reason.contains("recorded durable position"))
    }

    #[test]
    fn parse_names() {
        assert_eq!(
            parse_file_name("00000000000000000042.log"),
            Some((42, false))
        );
        assert_eq!(
            parse_file_name("00000000000000000042.index"),
            Some((42, true))
        );
        assert_eq!(parse_file_name("42.log"), None);
        assert_eq!(parse_file_name("0000000000000000004x.log"), None);
    }

    #[test]
    fn append_assigns_offsets_and_reads_back() {
        let storage = SimStorage::new();
        let (mut log, report) = open(&storage, small());
        assert!(report.created);
        let a = log.append(&batch(3, 10, 10), 0).unwrap();
        let b = log.append(&batch(2, 20, 10), 0).unwrap();
        assert_eq!((a.base_offset, a.last_offset), (0, 2));
        assert_eq!((b.base_offset, b.last_offset), (3, 4));
        assert_eq!(log.log_end_offset(), 5);
        assert_eq!(log.durable_end_offset(), 0);
        let read = log.read(4, 1).unwrap();
        assert_eq!(read.first_offset, 3);
        assert_eq!(read.next_offset, 5);
        assert_eq!(read.batches, 1, "at least one batch even over max_bytes");
        let h = batch::validate(&read.records).unwrap();
        assert_eq!(h.base_offset, 3);
        assert!(matches!(
            log.read(6, 100),
            Err(LogError::OffsetOutOfRange { .. })
        ));
        assert_eq!(log.read(5, 100).unwrap().batches, 0);
        log.flush().unwrap();
        assert_eq!(log.durable_end_offset(), 5);
        assert_eq!(log.offset_for_timestamp(21).unwrap(), Some((3, 21)));
        assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 12)));
        assert_eq!(log.offset_for_timestamp(22).unwrap(), None);
    }

    #[test]
    fn rolls_and_recovers_many_segments() {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, small());
        for i in 0..40 {
            log.append(&batch(1 + i % 3, i as i64, 100), 0).unwrap();
        }
        assert!(log.segment_count() > 3);
        log.flush().unwrap();
        let end = log.log_end_offset();
        let all = log.read(0, usize::MAX).unwrap();
        drop(log);
        let (log, report) = open(&storage, small());
        assert_eq!(log.log_end_offset(), end);
        assert!(report.truncated.is_empty() && report.indexes_rebuilt.is_empty());
        assert_eq!(log.read(0, usize::MAX).unwrap(), all);
        for offset in 0..end {
            let r = log.read(offset, 1).unwrap();
            assert!(r.first_offset <= offset && offset < r.next_offset);
        }
    }

    #[test]
    fn failed_sync_poisons() {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, small());
        log.append(&batch(1, 0, 10), 0).unwrap();
        storage.fail_next_sync();
        let err = log.flush().unwrap_err();
        assert!(matches!(err, LogError::Poisoned { .. }));
        assert!(log.is_poisoned());
        match log.append(&batch(1, 0, 10), 0) {
            Err(LogError::Poisoned { cause }) => {
                assert!(cause.contains("injected fsync failure"), "{cause}")
            }
            other => panic!("expected Poisoned, got {other:?}"),
        }
        assert_eq!(log.durable_end_offset(), 0);
        assert_eq!(log.read(0, 100).unwrap().batches, 1, "reads still work");
    }

    #[test]
    fn retention_and_delete_records_advance_the_start() {
        let storage = SimStorage::new();
        let mut config = small();
        config.retention_bytes = Some(4096);
        let (mut log, _) = open(&storage, config.clone());
        for i in 0..60 {
            log.append(&batch(1, i, 100), 0).unwrap();
        }
        let removed = log.enforce_retention(0).unwrap();
        assert!(!removed.is_empty());
        assert_eq!(log.log_start_offset(), removed.last().unwrap().next_offset);
        assert!(log.size_bytes() >= 4096);
        let first_removed = dir_file(&removed[0]);
        assert!(
            storage.exists(&first_removed),
            "unlinked only after the flush"
        );
        log.flush().unwrap();
        assert!(!storage.exists(&first_removed));
        let start = log
            .delete_records_before(log.log_start_offset() + 2)
            .unwrap();
        assert!(matches!(
            log.read(start - 1, 10),
            Err(LogError::OffsetOutOfRange { .. })
        ));
        log.flush().unwrap();
        drop(log);
        let (log, _) = open(&storage, config);
        assert_eq!(log.log_start_offset(), start);
    }

    fn dir_file(removed: &RemovedSegment) -> PathBuf {
        Path::new("/data/t-0").join(segment_file_name(removed.base_offset))
    }

    #[test]
    fn group_commit_ticket_covers_only_what_was_written_before() {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, small());
        log.append(&batch(2, 0, 10), 0).unwrap();
        let ticket = log.begin_flush().unwrap();
        assert_eq!(ticket.durable_end_offset, 2);
        assert!(log.begin_flush().is_none(), "one flush at a time");
        log.append(&batch(3, 0, 10), 0).unwrap();
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        assert_eq!(log.durable_end_offset(), 2);
        let next = log.begin_flush().unwrap();
        assert_eq!(next.durable_end_offset, 5);
        log.complete_flush(next, Ok(())).unwrap();
        assert_eq!(log.durable_end_offset(), 5);
        // The durable position recorded after that flush is synced by one more ticket, which
        // holds only the checkpoint (and its directory, the file being new); then nothing.
        let record = log.begin_flush().unwrap();
        assert!(record.files.is_empty());
        assert!(record.chunks.is_empty());
        assert_eq!(record.writes.len(), 1);
        assert_eq!(
            record.writes[0].path,
            Path::new("/data/t-0").join(checkpoint::CHECKPOINT_FILE_NAME)
        );
        assert_eq!(record.durable_end_offset, 5);
        let result = sync_ticket(&storage, &record);
        log.complete_flush(record, result).unwrap();
        assert!(log.begin_flush().is_none());
    }

    fn segment_path(base: u64) -> PathBuf {
        Path::new("/data/t-0").join(segment_file_name(base))
    }

    #[test]
    fn appends_are_written_behind_into_a_preallocated_segment() {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, small());
        let file = segment_path(0);
        // Preallocated to the segment size (a whole number of blocks), header and all written.
        assert_eq!(storage.contents(&file).unwrap().len(), 4096);
        log.append(&batch(2, 0, 10), 0).unwrap();
        let before = storage.contents(&file).unwrap();
        assert!(before[HEADER_BYTES_U64 as usize..].iter().all(|&b| b == 0));
        // Reads come from the in-memory tail until the block write lands.
        assert_eq!(log.read(0, usize::MAX).unwrap().batches, 1);
        let ticket = log.begin_flush().unwrap();
        assert_eq!(ticket.chunks.len(), 1);
        let write = &ticket.chunks[0];
        assert_eq!((write.position, write.bytes().len()), (0, 4096));
        assert!(
            ticket.files.is_empty(),
            "the block write carries the segment"
        );
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        let size = log.size_bytes() as usize;
        let after = storage.contents(&file).unwrap();
        assert_eq!(after.len(), 4096, "a flush changes no file size");
        assert!(after[size..].iter().all(|&b| b == 0));
        // The next write rewrites the partially filled block, from its start.
        log.append(&batch(1, 0, 10), 0).unwrap();
        let ticket = log.begin_flush().unwrap();
        // (With the checkpoint's slot, which records the first flush's durable position.)
        let write = ticket.chunks.iter().find(|w| w.path == file).unwrap();
        assert_eq!(write.position, 0);
        assert_eq!(&write.bytes()[..size], &after[..size]);
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        drop(log);
        let (log, report) = open(&storage, small());
        assert!(report.truncated.is_empty(), "{report:?}");
        assert_eq!(
            report.zero_tails.len(),
            1,
            "the preallocated tail is a clean end"
        );
        assert_eq!(log.log_end_offset(), 3);
        assert_eq!(
            storage.contents(&file).unwrap().len(),
            4096,
            "kept preallocated"
        );
    }

    #[test]
    fn a_torn_block_write_is_a_torn_tail_and_keeps_what_was_durable() {
        let mut torn = 0;
        for seed in 0..200 {
            let storage = SimStorage::new();
            let config = LogConfig {
                segment_bytes: 64 * 1024,
                ..small()
            };
            let (mut log, _) = open(&storage, config.clone());
            for i in 0..(seed % 7 + 1) {
                log.append(&batch(1 + i as usize % 3, 0, 300), 0).unwrap();
            }
            log.flush().unwrap();
            let durable = log.durable_end_offset();
            for i in 0..(seed % 5 + 1) {
                log.append(&batch(1 + i as usize % 2, 0, 700), 0).unwrap();
            }
            let written = log.log_end_offset();
            // The block write is issued, its sync never happens: a power loss.
            let ticket = log.begin_flush().unwrap();
            for write in &ticket.chunks {
                let file = storage.open(&write.path).unwrap();
                file.write_direct_at(write.bytes(), write.position).unwrap();
            }
            let after = storage.crash(seed);
            let (log, report) = open(&after, config);
            let end = log.log_end_offset();
            assert!(durable <= end && end <= written, "seed {seed}: {end}");
            torn += usize::from(!report.truncated.is_empty());
            let all = log.read(0, usize::MAX).unwrap();
            assert_eq!(
                all.next_offset, end,
                "seed {seed}: every kept batch reads back"
            );
        }
        assert!(torn > 0, "some crashes tear the block write");
    }

    #[test]
    fn no_roll_while_a_flush_is_in_flight() {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, small());
        log.append(&batch(1, 0, 100), 0).unwrap();
        let ticket = log.begin_flush().unwrap();
        for _ in 0..30 {
            log.append(&batch(1, 0, 100), 0).unwrap();
        }
        assert_eq!(
            log.segment_count(),
            1,
            "the segment runs over during the flight"
        );
        assert!(log.size_bytes() > small().segment_bytes);
        assert!(!log.roll_if_due(0).unwrap());
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        // The next flush rolls it first; its seal writes the bytes that ran over, cuts the
        // file to its frames and syncs it (the roll itself wrote nothing).
        let ticket = log.begin_flush().unwrap();
        assert_eq!(log.segment_count(), 2);
        let sealed = log.segments()[0].clone();
        let seal = ticket.seal.as_ref().expect("the ticket after a roll seals");
        assert!(!seal.writes.is_empty(), "the bytes that ran over");
        assert_eq!(seal.len, sealed.size_bytes);
        assert!(storage.contents(&sealed.path).unwrap().len() as u64 > sealed.size_bytes);
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        assert_eq!(
            storage.contents(&sealed.path).unwrap().len() as u64,
            sealed.size_bytes
        );
        assert_eq!(
            log.read(0, usize::MAX).unwrap().next_offset,
            log.log_end_offset()
        );
        let end = log.log_end_offset();
        drop(log);
        let (log, report) = open(&storage, small());
        assert!(report.truncated.is_empty() && report.indexes_rebuilt.is_empty());
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(log.read(0, usize::MAX).unwrap().next_offset, end);
    }

    /// Appends 10 KB batches, more than the largest tail chunk holds: the tail has a full
    /// chunk to write behind.
    fn append_until_a_chunk_is_full(log: &mut PartitionLog<SimStorage>) {
        let batches = 2 * crate::constants::LOG_TAIL_CHUNK_BYTES_MAX / 10_000;
        for _ in 0..batches {
            log.append(&batch(1, 0, 10_000), 0).unwrap();
        }
    }

    #[test]
    fn writes_behind_only_past_a_named_position_and_the_flight_and_hold_rolls_and_flushes() {
        let storage = SimStorage::new();
        let config = LogConfig {
            segment_bytes: 64 << 20,
            ..LogConfig::default()
        };
        let (mut log, _) = open(&storage, config.clone());
        // No durable slot names the new segment yet: nothing is written ahead.
        append_until_a_chunk_is_full(&mut log);
        assert!(
            log.take_write_behind().is_none(),
            "rule 2' does not cover it yet"
        );
        log.flush().unwrap();
        log.append(&batch(1, 0, 100), 0).unwrap();
        log.flush().unwrap();
        // A flush in flight: a full chunk that starts inside its last block stays.
        append_until_a_chunk_is_full(&mut log);
        log.append(&batch(1, 0, 100), 0).unwrap();
        let ticket = log.begin_flush().unwrap();
        let flight_end = ticket.chunks.iter().map(ChunkWrite::end).max().unwrap();
        append_until_a_chunk_is_full(&mut log);
        assert!(
            log.take_write_behind().is_none(),
            "the first full chunk rewrites the flight's last block"
        );
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        let write = log.take_write_behind().expect("full chunks to write ahead");
        assert!(write.chunks[0].position < flight_end);
        assert!(write.chunks.windows(2).all(|p| p[0].end() <= p[1].position));
        assert!(log.take_write_behind().is_none(), "handed out once");
        // While it is out: no roll, and the durable end does not move.
        let durable = log.durable_end_offset();
        assert!(!log.roll_if_due(u64::MAX / 2).unwrap());
        assert!(log.write_behind_in_flight());
        let result = super::write_behind(&storage, &write);
        log.complete_write_behind(write, result).unwrap();
        assert_eq!(
            log.durable_end_offset(),
            durable,
            "a write-behind declares nothing"
        );
        // The next ticket covers the rest, syncs the segment the write-behind wrote plainly
        // (whatever its own writes are), and declares all durable.
        let end = log.log_end_offset();
        let ticket = log.begin_flush().unwrap();
        assert_eq!(ticket.files, vec![log.active().path.clone()], "{ticket:?}");
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        assert_eq!(log.durable_end_offset(), end);
        // More written ahead, the last chunk landed first and not synced, then a power loss:
        // the durable offsets survive, and whatever a hole leaves past them is a tail.
        append_until_a_chunk_is_full(&mut log);
        let write = log.take_write_behind().expect("full chunks to write ahead");
        assert!(write.chunks.len() > 1, "{write:?}");
        let last = write.chunks.last().unwrap();
        let file = storage.open(&last.path).unwrap();
        file.write_direct_at(last.bytes(), last.position).unwrap();
        drop(log);
        for seed in 0..8 {
            let (log, _) = open(&storage.crash(seed), config.clone());
            assert!(log.log_end_offset() >= end);
            assert_eq!(log.read(0, usize::MAX).unwrap().first_offset, 0);
        }
    }

    #[test]
    fn a_flush_amid_write_behinds_covers_the_batches_below_the_first_in_flight() {
        for power_loss in [true, false] {
            let storage = SimStorage::new();
            let config = LogConfig {
                segment_bytes: 64 << 20,
                ..LogConfig::default()
            };
            let (mut log, _) = open(&storage, config.clone());
            for _ in 0..2 {
                log.append(&batch(1, 0, 100), 0).unwrap();
                log.flush().unwrap();
            }
            let durable = log.durable_end_offset();
            // (file position, base offset) of every batch from here on.
            let mut starts = Vec::new();
            let append_until_full = |log: &mut PartitionLog<SimStorage>, starts: &mut Vec<_>| {
                for _ in 0..2 * crate::constants::LOG_TAIL_CHUNK_BYTES_MAX / 10_000 {
                    let info = log.append(&batch(1, 0, 10_000), 0).unwrap();
                    starts.push((info.position, info.base_offset));
                }
            };
            append_until_full(&mut log, &mut starts);
            let first = log.take_write_behind().expect("a full chunk");
            append_until_full(&mut log, &mut starts);
            let second = log.take_write_behind().expect("another full chunk");
            let from = second.chunks[0].position;
            // The first starts in the block the last flush ended in: nothing new below it.
            assert!(log.begin_flush().is_none());
            let result = super::write_behind(&storage, &first);
            log.complete_write_behind(first, result).unwrap();
            let ticket = log
                .begin_flush()
                .expect("batches below the second write-behind");
            assert!(
                ticket.chunks.is_empty() && ticket.zero_fills.is_empty(),
                "{ticket:?}"
            );
            assert_eq!(ticket.files, vec![log.active().path.clone()]);
            let target = ticket.durable_end_offset;
            assert!(durable < target && target < log.log_end_offset());
            // Exactly the batches that end at or below the second write-behind's start (the
            // next one starts there).
            let next = starts.iter().rev().find(|&&(at, _)| at <= from).unwrap();
            assert_eq!(target, next.1);
            // Write-behinds go on while it is in flight (it writes no tail block).
            append_until_full(&mut log, &mut starts);
            let third = log.take_write_behind().expect("write-behinds go on");
            let result = sync_ticket(&storage, &ticket);
            log.complete_flush(ticket, result).unwrap();
            assert_eq!(log.durable_end_offset(), target);
            assert!(log.begin_flush().is_none(), "the second is still in flight");
            if power_loss {
                // Now (the second and third never written): the prefix survives.
                drop(log);
                for seed in 0..8 {
                    let (after, _) = open(&storage.crash(seed), config.clone());
                    assert!(after.log_end_offset() >= target, "seed {seed}");
                }
                continue;
            }
            // A log start moved past the prefix waits for a whole flush.
            let end = log.log_end_offset();
            log.delete_records_before(end).unwrap();
            let result = super::write_behind(&storage, &second);
            log.complete_write_behind(second, result).unwrap();
            assert!(
                log.begin_flush().is_none(),
                "the start is past the batches it would cover"
            );
            let result = super::write_behind(&storage, &third);
            log.complete_write_behind(third, result).unwrap();
            let ticket = log.begin_flush().expect("a whole flush");
            assert_eq!(ticket.durable_end_offset, end);
            let result = sync_ticket(&storage, &ticket);
            log.complete_flush(ticket, result).unwrap();
            assert_eq!(log.durable_end_offset(), end);
        }
    }

    #[test]
    fn a_failed_write_behind_poisons_the_log() {
        let storage = SimStorage::new();
        let config = LogConfig {
            segment_bytes: 64 << 20,
            ..LogConfig::default()
        };
        let (mut log, _) = open(&storage, config);
        log.append(&batch(1, 0, 100), 0).unwrap();
        log.flush().unwrap();
        log.append(&batch(1, 0, 100), 0).unwrap();
        log.flush().unwrap();
        append_until_a_chunk_is_full(&mut log);
        let write = log.take_write_behind().expect("a full chunk");
        let durable = log.durable_end_offset();
        let error = log
            .complete_write_behind(write, Err(io::Error::other("EIO")))
            .unwrap_err();
        assert!(error.to_string().contains("EIO"), "{error}");
        assert!(log.is_poisoned());
        assert!(log.begin_flush().is_none());
        assert_eq!(log.durable_end_offset(), durable);
        assert!(log.append(&batch(1, 0, 100), 0).is_err());
    }

    #[test]
    fn a_roll_waits_for_no_sync_and_a_crash_before_its_seal_recovers() {
        let mut kept_partial = 0;
        for seed in 0..300 {
            let storage = SimStorage::new();
            let (mut log, _) = open(&storage, small());
            for _ in 0..(seed % 4 + 1) {
                log.append(&batch(1, 0, 100), 0).unwrap();
            }
            log.flush().unwrap();
            let durable = log.durable_end_offset();
            let syncs = storage.sync_count();
            while log.segment_count() == 1 {
                log.append(&batch(1 + (seed % 2) as usize, 0, 100), 0)
                    .unwrap();
            }
            assert_eq!(
                storage.sync_count(),
                syncs,
                "seed {seed}: a roll syncs nothing"
            );
            let sealed_end = log.segments()[0].next_offset;
            log.append(&batch(1, 0, 100), 0).unwrap();
            let written = log.log_end_offset();
            let ticket = log.begin_flush().unwrap();
            let seal = ticket.seal.clone().expect("the ticket after a roll seals");
            assert!(ticket.dirs.is_empty(), "the seal syncs the directory");
            // Crash before the ticket (the roll wrote nothing), after the seal's writes were
            // issued (not synced), after its seal, or after the seal and the (unsynced) block
            // writes of the new segment.
            let stage = seed % 4;
            if stage == 1 {
                for write in &seal.writes {
                    let file = storage.open(&write.path).unwrap();
                    file.write_direct_at(write.bytes(), write.position).unwrap();
                }
            }
            if stage >= 2 {
                apply_seal(&storage, &seal).unwrap();
            }
            if stage == 3 {
                for write in &ticket.chunks {
                    let file = storage.open(&write.path).unwrap();
                    file.write_direct_at(write.bytes(), write.position).unwrap();
                }
            }
            let after = storage.crash(seed);
            let (recovered, report) =
                PartitionLog::open(after.clone(), Path::new("/data/t-0"), small(), 0)
                    .unwrap_or_else(|e| panic!("seed {seed} stage {stage}: {e}"));
            let end = recovered.log_end_offset();
            assert!(durable <= end && end <= written, "seed {seed}: {end}");
            if stage == 0 {
                assert_eq!(end, durable, "seed {seed}: a roll writes nothing");
            }
            if stage >= 2 {
                assert!(
                    end >= sealed_end,
                    "seed {seed}: the sealed segment is whole"
                );
                assert!(report.truncated.iter().all(|t| t.path != seal.segment));
            }
            kept_partial += usize::from(stage == 1 && end > durable && end < sealed_end);
            assert_eq!(
                recovered.read(0, usize::MAX).unwrap().next_offset,
                end,
                "seed {seed}: every kept batch reads back"
            );
            // After the crash the recovered log goes on: the next roll seals through a flush.
            let mut recovered = recovered;
            while recovered.segment_count() < 3 {
                recovered.append(&batch(1, 0, 100), 0).unwrap();
                recovered.flush().unwrap();
            }
            let end = recovered.log_end_offset();
            drop(recovered);
            let (reopened, report) = open(&after, small());
            assert_eq!(reopened.log_end_offset(), end, "seed {seed}");
            assert!(report.truncated.is_empty() && report.indexes_rebuilt.is_empty());
            drop((log, ticket));
        }
        assert!(
            kept_partial > 0,
            "some crashes keep part of the unsealed segment"
        );
    }

    #[test]
    fn a_tail_in_many_chunks_is_written_whole_and_a_torn_flush_is_a_torn_tail() {
        for seed in 0..24u64 {
            let storage = SimStorage::new();
            let (mut log, _) = open(&storage, LogConfig::default());
            for _ in 0..(seed % 7 + 1) {
                log.append(&batch(3, 0, 1000), 0).unwrap();
            }
            log.flush().unwrap();
            let durable = log.durable_end_offset();
            // Several chunks' worth, not flushed: reads cross chunk boundaries in memory.
            for i in 0..(60 + seed as usize * 13) {
                log.append(&batch(1 + i % 5, 0, 900 + 37 * (i % 11)), 0)
                    .unwrap();
            }
            let written = log.log_end_offset();
            assert_eq!(log.read(0, usize::MAX).unwrap().next_offset, written);
            let ticket = log.begin_flush().unwrap();
            let chunks: Vec<_> = ticket
                .chunks
                .iter()
                .filter(|w| w.path == segment_path(0))
                .collect();
            assert!(chunks.len() >= 2, "seed {seed}: {chunks:?}");
            for w in &chunks {
                assert_eq!(w.position % crate::constants::LOG_BLOCK_BYTES, 0);
                assert_eq!(
                    w.bytes().len() as u64 % crate::constants::LOG_BLOCK_BYTES,
                    0
                );
            }
            for pair in chunks.windows(2) {
                assert_eq!(pair[0].end(), pair[1].position, "seed {seed}: contiguous");
            }
            assert!(chunks.last().unwrap().end() >= log.size_bytes());
            if seed % 2 == 0 {
                let result = sync_ticket(&storage, &ticket);
                log.complete_flush(ticket, result).unwrap();
                assert_eq!(log.durable_end_offset(), written);
                assert_eq!(log.read(0, usize::MAX).unwrap().next_offset, written);
                drop(log);
                let after = storage.crash(seed);
                let (log, report) = open(&after, LogConfig::default());
                assert_eq!(log.log_end_offset(), written, "seed {seed}: {report:?}");
                assert!(report.truncated.is_empty(), "seed {seed}: {report:?}");
            } else {
                // In order, as the runtime writes them (each durable before the next): a power
                // loss after some of them, the next one issued and perhaps torn.
                let synced = (seed as usize / 2) % chunks.len();
                for (i, w) in chunks.iter().enumerate().take(synced + 1) {
                    let file = storage.open(&w.path).unwrap();
                    file.write_direct_at(w.bytes(), w.position).unwrap();
                    if i < synced {
                        file.sync().unwrap();
                    }
                }
                let after = storage.crash(seed);
                let (recovered, _) = open(&after, LogConfig::default());
                let end = recovered.log_end_offset();
                assert!(durable <= end && end <= written, "seed {seed}: {end}");
                assert_eq!(recovered.read(0, usize::MAX).unwrap().next_offset, end);
                drop((log, ticket));
            }
        }
    }

    #[test]
    fn chunks_go_in_any_order_once_a_durable_slot_names_the_segment_and_a_hole_is_a_tail() {
        let mut holes = 0;
        for seed in 0..48u64 {
            let storage = SimStorage::new();
            let (mut log, _) = open(&storage, LogConfig::default());
            // The first flush finds no slot; the second writes the slot that names segment 0
            // (durable once it completes): both in order.
            for round in 0..2 {
                log.append(&batch(3, 0, 1000), 0).unwrap();
                let ticket = log.begin_flush().unwrap();
                assert!(!ticket.chunks_any_order, "seed {seed}, flush {round}");
                let result = sync_ticket(&storage, &ticket);
                log.complete_flush(ticket, result).unwrap();
            }
            let durable = log.durable_end_offset();
            for i in 0..(60 + seed as usize * 13) {
                log.append(&batch(1 + i % 5, 0, 900 + 37 * (i % 11)), 0)
                    .unwrap();
            }
            let written = log.log_end_offset();
            let ticket = log.begin_flush().unwrap();
            assert!(ticket.chunks_any_order, "seed {seed}");
            assert!(ticket.chunks.len() >= 2, "seed {seed}: {:?}", ticket.chunks);
            if seed % 3 == 0 {
                let result = sync_ticket(&storage, &ticket);
                log.complete_flush(ticket, result).unwrap();
                assert_eq!(log.durable_end_offset(), written);
                drop(log);
                let (log, report) = open(&storage.crash(seed), LogConfig::default());
                assert_eq!(log.log_end_offset(), written, "seed {seed}: {report:?}");
                continue;
            }
            // The writes issued (last chunk first), the one sync fails: a power loss keeps a
            // prefix of them, so later chunks without earlier ones, a hole with frames after it.
            storage.fail_next_sync();
            let result = sync_ticket(&storage, &ticket);
            assert!(result.is_err());
            assert!(log.complete_flush(ticket, result).is_err());
            drop(log);
            holes += usize::from(recovers_between(
                &storage,
                seed,
                LogConfig::default(),
                durable,
                written,
            ));
        }
        assert!(holes > 0, "no crash left a hole before valid frames");
    }

    #[test]
    fn a_rolled_segment_is_written_in_any_order_from_its_first_flush() {
        let storage = SimStorage::new();
        let config = LogConfig {
            segment_bytes: 8192,
            ..small()
        };
        let (mut log, _) = open(&storage, config.clone());
        let mut any_order = Vec::new();
        for _ in 0..40 {
            log.append(&batch(2, 0, 300), 0).unwrap();
            let ticket = log.begin_flush().unwrap();
            let active = log.active().base_offset;
            if let Some(seal) = &ticket.seal {
                // The new segment's header block, then the slot naming it at the header's end.
                assert_eq!(seal.then.len(), 2, "{seal:?}");
                assert_eq!(seal.then[0].path, log.active().path);
                assert_eq!(seal.then[0].position, 0);
                let slot = checkpoint::decode_checkpoint(&{
                    let mut file = vec![0u8; 2 * LOG_CHECKPOINT_SLOT_STRIDE_BYTES as usize];
                    let at = seal.then[1].position as usize;
                    file[at..at + seal.then[1].data.len()].copy_from_slice(&seal.then[1].data);
                    file
                })
                .unwrap();
                assert_eq!(slot.durable, Some((active, SEGMENT_HEADER_BYTES as u32)));
            }
            any_order.push((active, ticket.seal.is_some(), ticket.chunks_any_order));
            let result = sync_ticket(&storage, &ticket);
            log.complete_flush(ticket, result).unwrap();
        }
        // The first segment: in order on its first two flushes (the first records its position,
        // the second makes that slot durable), then in any order. A rolled segment: in any order
        // from its first flush, the one whose seal writes the slot naming it.
        for (i, (base, _, unordered)) in any_order.iter().enumerate() {
            let flushes_before = any_order[..i].iter().filter(|f| f.0 == *base).count();
            let expect = *base != 0 || flushes_before >= 2;
            assert_eq!(*unordered, expect, "flush {i}: {any_order:?}");
        }
        assert!(any_order.iter().filter(|f| f.1).count() >= 3);
        drop(log);
        let (log, report) = open(&storage.crash(7), config);
        assert_eq!(log.durable_end_offset(), log.log_end_offset(), "{report:?}");
    }

    #[test]
    fn a_crash_in_a_seal_flush_keeps_everything_durable() {
        // Any order from the seal's flush: a crash while its chunks are in flight leaves at
        // most a hole past the slot the seal wrote, a tail; a crash inside the seal leaves the
        // new segment without a header (removed) or with it and no frames.
        let config = LogConfig {
            segment_bytes: 256 * 1024,
            ..small()
        };
        let mut holes = 0;
        for seed in 0..64u64 {
            let storage = SimStorage::new();
            let (mut log, _) = open(&storage, config.clone());
            let mut durable = 0;
            loop {
                let before = log.active().base_offset;
                for i in 0..(3 + seed as usize % 7) {
                    log.append(&batch(1 + i % 3, 0, 700 + 53 * (i % 5)), 0)
                        .unwrap();
                }
                if log.active().base_offset != before {
                    // Rolled: several chunks' worth into the new segment before its first flush.
                    for i in 0..(90 + seed as usize % 40) {
                        log.append(&batch(1, 0, 900 + 37 * (i % 11)), 0).unwrap();
                    }
                }
                let ticket = log.begin_flush().unwrap();
                if ticket.seal.is_none() {
                    let result = sync_ticket(&storage, &ticket);
                    log.complete_flush(ticket, result).unwrap();
                    durable = log.durable_end_offset();
                    continue;
                }
                assert!(ticket.chunks_any_order, "seed {seed}");
                assert!(ticket.chunks.len() >= 2, "seed {seed}: {:?}", ticket.chunks);
                let written = log.log_end_offset();
                let seal = ticket.seal.clone().unwrap();
                if seed % 4 == 0 {
                    // A power loss inside the seal: after none, one or both of its `then` writes.
                    let cut = Seal {
                        then: seal.then[..(seed as usize / 4) % 3].to_vec(),
                        ..seal
                    };
                    apply_seal(&storage, &cut).unwrap();
                } else {
                    // After the seal: the chunks issued last first, a power loss before their
                    // one sync keeps a prefix of them (later chunks without earlier ones).
                    apply_seal(&storage, &seal).unwrap();
                    for chunk in ticket.chunks.iter().rev() {
                        storage
                            .open(&chunk.path)
                            .unwrap()
                            .write_direct_at(chunk.bytes(), chunk.position)
                            .unwrap();
                    }
                }
                // The process dies: nothing more is written.
                std::mem::forget((log, ticket));
                holes += usize::from(recovers_between(
                    &storage,
                    seed,
                    config.clone(),
                    durable,
                    written,
                ));
                break;
            }
        }
        assert!(holes > 0, "no crash left a hole before valid frames");
    }

    #[test]
    fn zeros_are_written_ahead_of_small_flushes_only() {
        use crate::constants::LOG_ZERO_FILL_BYTES;
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, LogConfig::default());
        let segment = log.segments()[0].path.clone();
        let flush = |log: &mut PartitionLog<SimStorage>, records: usize| {
            log.append(&batch(records, 0, 1000), 0).unwrap();
            let ticket = log.begin_flush().unwrap();
            let end = ticket
                .chunks
                .iter()
                .filter(|w| w.path == segment)
                .map(ChunkWrite::end)
                .max()
                .unwrap();
            let fills = ticket.zero_fills.clone();
            let result = sync_ticket(&storage, &ticket);
            log.complete_flush(ticket, result).unwrap();
            (end, fills)
        };
        // A small flush zeroes a fill's worth just past its write.
        let (end, fills) = flush(&mut log, 2);
        assert_eq!(fills.len(), 1);
        assert_eq!(
            (fills[0].position, fills[0].len),
            (end, LOG_ZERO_FILL_BYTES)
        );
        // Small flushes inside the zeroed range write none, until less than half is left.
        let mut zeroed = end + LOG_ZERO_FILL_BYTES;
        let mut refilled = false;
        for _ in 0..200 {
            let (end, fills) = flush(&mut log, 2);
            match fills.as_slice() {
                [] => assert!(zeroed - end >= LOG_ZERO_FILL_BYTES / 2),
                [fill] => {
                    assert!(zeroed - end < LOG_ZERO_FILL_BYTES / 2);
                    assert_eq!(fill.position, zeroed);
                    zeroed = fill.position + fill.len;
                    refilled = true;
                }
                more => panic!("{more:?}"),
            }
        }
        assert!(refilled);
        // A flush that runs a fill's worth or more past the zeroed end writes no zeros.
        let (end, fills) = flush(&mut log, 3 * LOG_ZERO_FILL_BYTES as usize / 1000);
        assert!(end >= zeroed + LOG_ZERO_FILL_BYTES);
        assert!(fills.is_empty(), "{fills:?}");
        // The next small flush zeroes ahead again.
        let (end, fills) = flush(&mut log, 2);
        assert_eq!(fills.len(), 1);
        assert_eq!(fills[0].position, end);
    }

    #[test]
    fn a_log_closed_before_its_seal_completes_seals_first() {
        // A roll's seal pending (even seeds) or in a ticket that never completed (odd), then
        // the log is closed (its tail left in the page cache, as a process that exits) and
        // the power fails, at once or after a clean reopen. The tail written at close puts
        // the new segment's header on the file: the sealed segment must be durable first,
        // else a crash can keep that header and tear the sealed segment's last bytes.
        for seed in 0..400u64 {
            let storage = SimStorage::new();
            let (mut log, _) = open(&storage, small());
            log.append(&batch(1, 0, 100), 0).unwrap();
            log.flush().unwrap();
            while log.segment_count() == 1 {
                log.append(&batch(1 + (seed % 3) as usize, 0, 100), 0)
                    .unwrap();
            }
            let sealed = log.segments()[0].clone();
            log.append(&batch(1, 0, 100), 0).unwrap();
            let written = log.log_end_offset();
            let ticket = (seed % 2 == 1).then(|| log.begin_flush().unwrap());
            if let Some(ticket) = &ticket {
                assert!(ticket.seal.is_some(), "the ticket after a roll seals");
            }
            log.close().unwrap();
            drop(ticket);
            let storage = if seed % 4 >= 2 {
                let (reopened, report) = open(&storage, small());
                assert_eq!(reopened.log_end_offset(), written, "seed {seed}");
                assert!(
                    report.truncated.is_empty() && report.indexes_rebuilt.is_empty(),
                    "seed {seed}: the sealed segment's index was written at close: {report:?}"
                );
                drop(reopened);
                storage
            } else {
                storage
            };
            let after = storage.crash(seed);
            let (recovered, report) = PartitionLog::open(after, Path::new("/data/t-0"), small(), 0)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let end = recovered.log_end_offset();
            assert!(
                sealed.next_offset <= end && end <= written,
                "seed {seed}: the sealed segment is whole: {end}"
            );
            assert!(report.truncated.iter().all(|t| t.path != sealed.path));
            assert!(report
                .indexes_rebuilt
                .iter()
                .all(|p| *p != sealed.path.with_extension("index")));
            assert_eq!(
                recovered.read(0, usize::MAX).unwrap().next_offset,
                end,
                "seed {seed}: every kept batch reads back"
            );
        }
    }

    /// Fills `log`'s read cache as the runtime does, from the file's bytes (or, with
    /// `poison`, from wrong bytes, to prove the reads used the cache).
    fn read_ahead_from_files(
        storage: &SimStorage,
        log: &mut PartitionLog<SimStorage>,
        offset: u64,
        max_bytes: usize,
    ) -> usize {
        let parts = log.read_ahead(offset, max_bytes);
        for part in &parts {
            assert_eq!(part.position % crate::constants::LOG_BLOCK_BYTES, 0);
            assert_eq!(part.len % crate::constants::LOG_BLOCK_BYTES, 0);
            let file = storage.contents(&part.path).unwrap();
            let from = part.position as usize;
            let to = (from + part.len as usize).min(file.len());
            let data: CachedBytes = Rc::new(file[from..to].to_vec());
            log.fill_read_cache(part, (to - from) as u64, data);
        }
        parts.len()
    }

    #[test]
    fn reads_ahead_serve_reads_and_change_nothing_they_return() {
        let storage = SimStorage::new();
        let config = LogConfig {
            segment_bytes: 64 * 1024,
            index_interval_bytes: 1024,
            ..LogConfig::default()
        };
        let (mut log, _) = open(&storage, config);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut filled = 0;
        for round in 0..400 {
            let n = 1 + next() % 4;
            log.append(&batch(n as usize, round, (next() % 900) as usize), 0)
                .unwrap();
            if next() % 3 == 0 {
                log.flush().unwrap();
            }
            let end = log.log_end_offset();
            let offset = next() % end;
            let max_bytes = 1 + (next() % 20_000) as usize;
            let before = log.read(offset, max_bytes).unwrap();
            filled += read_ahead_from_files(&storage, &mut log, offset, max_bytes);
            assert!(log.read_cache_bytes() <= LOG_READ_CACHE_BYTES_MAX);
            assert_eq!(
                log.read(offset, max_bytes).unwrap(),
                before,
                "round {round}"
            );
            // Everything the read needed from the files is in memory now.
            assert!(
                log.read_ahead(offset, max_bytes).is_empty(),
                "round {round}"
            );
            let records = 1 + next() % 10;
            let limited = log.read_records(offset, usize::MAX, records).unwrap();
            assert!(limited.batches >= 1);
            assert!(limited.next_offset - offset >= records || limited.next_offset == end);
            let full = log.read(offset, usize::MAX).unwrap();
            assert_eq!(&full.records[..limited.records.len()], &limited.records[..]);
        }
        assert!(
            log.segment_count() > 3 && filled > 5,
            "{filled} fills, {} segments",
            log.segment_count()
        );
        log.drop_read_cache();
        assert_eq!(log.read_cache_bytes(), 0);
    }

    /// A consumer reading through a lagging log, each read planned and read ahead first (as
    /// a Fetch does): no read takes bytes from the file. Filling one read's plan must not drop
    /// the chunk an earlier read ahead left that this read starts in (the lowest one).
    #[test]
    fn consecutive_reads_ahead_never_fall_back_to_the_file() {
        let storage = SimStorage::new();
        let config = LogConfig {
            segment_bytes: 4 << 20,
            ..LogConfig::default()
        };
        let (mut log, _) = open(&storage, config);
        for round in 0..800 {
            log.append(&batch(10, round, 1_600), 0).unwrap();
        }
        log.flush().unwrap();
        for max_bytes in [1 << 20, 300_000, 700_000] {
            log.drop_read_cache();
            let mut offset = 0;
            while offset < log.log_end_offset() {
                read_ahead_from_files(&storage, &mut log, offset, max_bytes);
                let before = log.file_reads();
                let read = log.read(offset, max_bytes).unwrap();
                assert_eq!(log.file_reads(), before, "max {max_bytes}, offset {offset}");
                assert!(log.read_cache_bytes() <= 2 * LOG_READ_CACHE_BYTES_MAX);
                offset = read.next_offset;
            }
        }
        // Without the read ahead, the same reads take bytes from the file.
        log.drop_read_cache();
        log.read(0, 1 << 20).unwrap();
        assert!(log.file_reads() > 0);
    }

    #[test]
    fn reads_take_read_ahead_bytes_instead_of_the_file() {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, small());
        for i in 0..40 {
            log.append(&batch(1, i, 100), 0).unwrap();
        }
        log.flush().unwrap();
        let sealed = log.segments()[0].clone();
        let parts = log.read_ahead(0, 1000);
        assert_eq!(parts[0].path, sealed.path);
        // A chunk whose bytes differ from the file: the read checks its CRC and says so.
        let mut wrong = storage.contents(&sealed.path).unwrap();
        wrong[HEADER_BYTES_U64 as usize + 40] ^= 0xff;
        let len = parts[0].len.min(wrong.len() as u64);
        log.fill_read_cache(&parts[0], len, Rc::new(wrong[..len as usize].to_vec()));
        assert!(matches!(log.read(0, 1000), Err(LogError::Corrupt { .. })));
        log.drop_read_cache();
        assert_eq!(log.read(0, 1000).unwrap().first_offset, 0);
    }

    #[test]
    fn invalid_batches_are_refused_without_side_effects() {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, small());
        let mut bad = batch(1, 0, 10);
        bad[30] ^= 1;
        assert!(matches!(
            log.append(&bad, 0),
            Err(LogError::InvalidBatch(BatchError::CrcMismatch { .. }))
        ));
        assert_eq!(log.log_end_offset(), 0);
        assert!(!log.is_poisoned());
    }
}
