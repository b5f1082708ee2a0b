//! [`PartitionLog`]: one topic-partition's segments, generic over [`Storage`] so the crash
//! double can stand in for the file system. See the parent module for the format and the
//! durability argument.

use super::batch::{self, BatchError, BatchHeader};
use super::checkpoint::{self, CheckpointSlot, CHECKPOINT_FILE_NAME};
use super::group_commit::GroupCommit;
use super::index::{self, IndexEntry};
use crate::constants::{
    FRAME_HEADER_BYTES, FRAME_PAYLOAD_BYTES_MAX, LOG_INDEX_INTERVAL_BYTES,
    LOG_INDEX_INTERVAL_BYTES_MIN, LOG_SEGMENT_BYTES_DEFAULT, LOG_SEGMENT_BYTES_MIN,
    LOG_SEGMENT_MS_DEFAULT, SEGMENT_HEADER_BYTES,
};
use crate::storage::file::{Storage, StorageFile};
use crate::storage::frame::{
    self, decode_frame, encode_frame, frame_total_bytes, next_valid_frame, FrameMeta, ScanEnd,
    SegmentHeader, SegmentKind,
};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// `FrameMeta::kind` of a frame holding one Kafka record batch.
pub const BATCH_FRAME_KIND: u16 = 1;
/// Timestamp of "no timestamp" in Kafka (`RecordBatch.NO_TIMESTAMP`).
const NO_TIMESTAMP: i64 = -1;
const HEADER_BYTES_U64: u64 = SEGMENT_HEADER_BYTES as u64;

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
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: LOG_SEGMENT_BYTES_DEFAULT,
            segment_ms: LOG_SEGMENT_MS_DEFAULT,
            retention_bytes: None,
            retention_ms: None,
            index_interval_bytes: LOG_INDEX_INTERVAL_BYTES,
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

fn io_err<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> LogError + 'p {
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
    /// Concatenated record batches, as stored (Kafka's fetch `records` field).
    pub records: Vec<u8>,
    pub batches: usize,
    /// Base offset of the first batch returned (may be below the offset asked for).
    pub first_offset: u64,
    /// The offset after the last batch returned (the next fetch position).
    pub next_offset: u64,
    pub log_start_offset: u64,
    pub log_end_offset: u64,
}

/// A flush to perform: `fdatasync` every file, `fsync` every directory, then
/// [`PartitionLog::complete_flush`]. On success everything below `durable_end_offset` is
/// durable. Files and directories may be synced in any order, concurrently.
#[derive(Debug, PartialEq, Eq)]
pub struct FlushTicket {
    pub files: Vec<PathBuf>,
    pub dirs: Vec<PathBuf>,
    pub durable_end_offset: u64,
    id: u64,
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

struct Segment<F> {
    base_offset: u64,
    path: PathBuf,
    index_path: PathBuf,
    file: F,
    /// Bytes in use: header and frames (the next frame is written here).
    size: u64,
    next_offset: u64,
    /// Largest batch maxTimestamp in the segment, or -1.
    max_timestamp: i64,
    index: Vec<IndexEntry>,
    /// Broker time of the first append into this segment in this process (or of its
    /// recovery): the age that `segment_ms` measures.
    first_append_ms: Option<u64>,
    /// Written since the last sync handed out in a ticket.
    dirty: bool,
}

impl<F> Segment<F> {
    fn is_empty(&self) -> bool {
        self.next_offset == self.base_offset
    }

    /// Accounts for a frame at the end of the segment (append or recovery scan).
    fn note_frame(&mut self, frame: &ScannedFrame, interval_bytes: u64) {
        assert_eq!(
            frame.position, self.size,
            "frames are contiguous in a segment"
        );
        assert_eq!(
            frame.id, self.next_offset,
            "offsets are contiguous in a segment"
        );
        let due = match self.index.last() {
            None => true,
            Some(last) => frame.position - last.position >= interval_bytes,
        };
        if due {
            self.index.push(IndexEntry {
                offset: frame.id,
                position: frame.position,
                max_timestamp_before: self.max_timestamp,
                frame_crc: frame.crc,
            });
        }
        self.size = frame.position + frame.total_bytes;
        self.next_offset = frame.id + u64::from(frame.count);
        self.max_timestamp = self.max_timestamp.max(frame.max_timestamp);
    }
}

fn segment_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}.log")
}

fn index_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}.index")
}

/// `(base offset, is_index)` of a segment or index file name.
fn parse_file_name(name: &str) -> Option<(u64, bool)> {
    let (stem, is_index) = if let Some(stem) = name.strip_suffix(".log") {
        (stem, false)
    } else {
        (name.strip_suffix(".index")?, true)
    };
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, is_index))
}

/// A frame found valid by [`scan_frames`].
#[derive(Clone, Copy, Debug)]
struct ScannedFrame {
    position: u64,
    id: u64,
    count: u32,
    crc: u32,
    total_bytes: u64,
    max_timestamp: i64,
}

/// How [`scan_frames`] ended; positions are absolute.
#[derive(Clone, Debug)]
enum ScanOutcome {
    Clean { valid_end: u64 },
    Torn { valid_end: u64, reason: String },
    Corrupt { position: u64, reason: String },
}

/// Checks that a frame holds what the log writes: kind 1, a valid batch whose base offset is
/// the frame id and whose record count is the frame count, at the expected offset.
fn check_frame(meta: &FrameMeta, payload: &[u8], expected_id: u64) -> Result<BatchHeader, String> {
    if meta.kind != BATCH_FRAME_KIND {
        return Err(format!("frame kind {} is not a record batch", meta.kind));
    }
    if meta.id != expected_id {
        return Err(format!(
            "frame holds offset {} where offset {expected_id} was expected",
            meta.id
        ));
    }
    let header = batch::validate(payload).map_err(|e| e.to_string())?;
    if header.base_offset != meta.id as i64 {
        return Err(format!(
            "batch base offset {} differs from its frame's {}",
            header.base_offset, meta.id
        ));
    }
    if header.records_count as u32 != meta.count {
        return Err(format!(
            "batch holds {} records, its frame says {}",
            header.records_count, meta.count
        ));
    }
    Ok(header)
}

/// Scans `bytes` (the part of a segment that starts at byte `origin` of the file) from
/// relative position `start`, checking every frame with [`check_frame`] from `first_id` on.
/// The recovery rule is frame.rs's [`frame::scan`]; a frame that decodes but fails
/// `check_frame` is a bad frame too, corruption if a valid frame follows it, else a tail.
fn scan_frames(
    bytes: &[u8],
    start: usize,
    origin: u64,
    first_id: u64,
) -> (Vec<ScannedFrame>, ScanOutcome) {
    let mut frames = Vec::new();
    let mut expected = first_id;
    let mut scan = frame::scan(bytes, start);
    let mut bad = None;
    for f in scan.by_ref() {
        match check_frame(&f.meta, f.payload, expected) {
            Ok(header) => {
                frames.push(ScannedFrame {
                    position: origin + f.position as u64,
                    id: f.meta.id,
                    count: f.meta.count,
                    crc: f.crc,
                    total_bytes: f.total_bytes() as u64,
                    max_timestamp: header.max_timestamp,
                });
                expected = f.meta.id + u64::from(f.meta.count);
            }
            Err(reason) => {
                bad = Some((f.position, f.end(), reason));
                break;
            }
        }
    }
    let outcome = match bad {
        Some((position, end, reason)) => match next_valid_frame(bytes, end) {
            Some(next) => ScanOutcome::Corrupt {
                position: origin + position as u64,
                reason: format!(
                    "{reason}; a valid frame follows at byte {}",
                    origin + next as u64
                ),
            },
            None => ScanOutcome::Torn {
                valid_end: origin + position as u64,
                reason,
            },
        },
        None => match scan.end().expect("scan finished") {
            ScanEnd::Clean { valid_end } => ScanOutcome::Clean {
                valid_end: origin + valid_end as u64,
            },
            ScanEnd::TornTail {
                valid_end, error, ..
            } => ScanOutcome::Torn {
                valid_end: origin + valid_end as u64,
                reason: error.to_string(),
            },
            ScanEnd::Corrupt {
                position,
                error,
                next_valid,
            } => ScanOutcome::Corrupt {
                position: origin + position as u64,
                reason: format!(
                    "{error}; a valid frame follows at byte {}",
                    origin + next_valid as u64
                ),
            },
        },
    };
    (frames, outcome)
}

/// A frame read back from a segment by [`read_frame`]; its payload is in the scratch buffer.
struct ReadFrame {
    meta: FrameMeta,
    payload_len: usize,
    total_bytes: u64,
}

/// Reads and CRC-checks the frame at `position` of a segment of `size` bytes into `scratch`
/// (header at `scratch[0..]`, payload at `scratch[FRAME_HEADER_BYTES..]`).
fn read_frame<F: StorageFile>(
    file: &F,
    path: &Path,
    position: u64,
    size: u64,
    scratch: &mut Vec<u8>,
) -> Result<ReadFrame, LogError> {
    let corrupt = |reason: String| LogError::Corrupt {
        path: path.to_path_buf(),
        position,
        reason,
    };
    if position + FRAME_HEADER_BYTES as u64 > size {
        return Err(corrupt(format!(
            "frame header needs {FRAME_HEADER_BYTES} bytes, segment ends at {size}"
        )));
    }
    scratch.resize(FRAME_HEADER_BYTES, 0);
    file.read_at(&mut scratch[..FRAME_HEADER_BYTES], position)
        .map_err(io_err("read", path))?;
    let len = u32::from_le_bytes(scratch[4..8].try_into().expect("4 bytes")) as usize;
    if len == 0 || len > FRAME_PAYLOAD_BYTES_MAX {
        return Err(corrupt(format!("invalid frame length {len}")));
    }
    let need = (FRAME_HEADER_BYTES + len) as u64;
    if position + need > size {
        return Err(corrupt(format!(
            "frame of {need} bytes runs past the segment end at {size}"
        )));
    }
    scratch.resize(FRAME_HEADER_BYTES + len, 0);
    file.read_at(
        &mut scratch[FRAME_HEADER_BYTES..],
        position + FRAME_HEADER_BYTES as u64,
    )
    .map_err(io_err("read", path))?;
    let frame = decode_frame(scratch, 0).map_err(|e| corrupt(e.to_string()))?;
    Ok(ReadFrame {
        meta: frame.meta,
        payload_len: len,
        total_bytes: frame_total_bytes(len) as u64,
    })
}

struct CheckpointState<F> {
    path: PathBuf,
    file: Option<F>,
    /// Generation of the newest slot written.
    generation: u64,
    /// The log start offset in the newest slot written (durable unless a flush is in flight).
    written_start: u64,
}

struct PendingRemoval {
    data: PathBuf,
    index: PathBuf,
    /// The segment's next offset: it may be unlinked once a log start at or past it is durable.
    end_offset: u64,
}

struct Flight {
    id: u64,
    checkpoint_start: Option<u64>,
}

/// The log of one topic-partition. See the module docs.
pub struct PartitionLog<S: Storage> {
    storage: S,
    dir: PathBuf,
    config: LogConfig,
    /// Sorted by base offset, contiguous, never empty; the last one is the active segment.
    segments: Vec<Segment<S::File>>,
    log_start_offset: u64,
    commit: GroupCommit,
    dir_dirty: bool,
    checkpoint: CheckpointState<S::File>,
    pending_removal: Vec<PendingRemoval>,
    flight: Option<Flight>,
    scratch: Vec<u8>,
}

impl<S: Storage> PartitionLog<S> {
    /// Opens (or creates) the log in `dir`, recovering it: see the module docs. After `open`
    /// everything in the log is durable.
    pub fn open(
        storage: S,
        dir: &Path,
        config: LogConfig,
        now_ms: u64,
    ) -> Result<(PartitionLog<S>, RecoveryReport), LogError> {
        config.validate()?;
        let mut report = RecoveryReport::default();
        if !storage.exists(dir) {
            storage
                .create_dir_all(dir)
                .map_err(io_err("create directory", dir))?;
            report.created = true;
        }
        let names = storage.list(dir).map_err(io_err("list", dir))?;
        let mut bases = Vec::new();
        let mut index_bases = std::collections::BTreeSet::new();
        let mut has_checkpoint = false;
        for name in &names {
            match parse_file_name(name) {
                Some((base, false)) => bases.push(base),
                Some((base, true)) => {
                    index_bases.insert(base);
                }
                None if name == CHECKPOINT_FILE_NAME => has_checkpoint = true,
                None => {
                    tracing::warn!(dir = %dir.display(), file = %name, "ignoring unknown file in partition directory")
                }
            }
        }
        bases.sort_unstable();

        // The durable log start offset.
        let checkpoint_path = dir.join(CHECKPOINT_FILE_NAME);
        let mut checkpoint = CheckpointState {
            path: checkpoint_path.clone(),
            file: None,
            generation: 0,
            written_start: 0,
        };
        let mut checkpoint_start = None;
        if has_checkpoint {
            let file = storage
                .open(&checkpoint_path)
                .map_err(io_err("open", &checkpoint_path))?;
            let bytes = file.read_all().map_err(io_err("read", &checkpoint_path))?;
            match checkpoint::decode_checkpoint(&bytes) {
                Some(slot) => {
                    checkpoint.generation = slot.generation;
                    checkpoint_start = Some(slot.log_start_offset);
                }
                None => tracing::warn!(
                    file = %checkpoint_path.display(),
                    "log start checkpoint has no valid slot; using the first segment's base offset"
                ),
            }
            checkpoint.file = Some(file);
        }

        // Segments wholly below the durable start are leftovers of an interrupted removal.
        if let Some(start) = checkpoint_start {
            while bases.len() >= 2 && bases[1] <= start {
                let base = bases.remove(0);
                for name in [segment_file_name(base), index_file_name(base)] {
                    let path = dir.join(name);
                    if storage.exists(&path) {
                        storage.remove(&path).map_err(io_err("remove", &path))?;
                        tracing::info!(file = %path.display(), log_start_offset = start, "removed segment below the log start");
                        report.removed.push(path);
                    }
                }
                index_bases.remove(&base);
            }
        }

        // The active segment: the last one whose header is intact.
        let mut active = None;
        let mut fallback_base = checkpoint_start.unwrap_or(0);
        while let Some(&base) = bases.last() {
            match Self::load_active(&storage, dir, base, &config, now_ms, &mut report)? {
                Some(segment) => {
                    active = Some(segment);
                    break;
                }
                None => {
                    bases.pop();
                    fallback_base = base;
                }
            }
        }
        let active_created = active.is_none();
        let active = match active {
            Some(segment) => segment,
            None => Self::create_segment(&storage, dir, fallback_base)?,
        };
        if index_bases.contains(&active.base_offset) {
            // The active segment's index lives in memory; a file left from an earlier seal is stale.
            storage
                .remove(&active.index_path)
                .map_err(io_err("remove", &active.index_path))?;
            report.removed.push(active.index_path.clone());
        }
        let mut segments = Vec::with_capacity(bases.len());
        for &base in bases.iter().filter(|&&b| b != active.base_offset) {
            let segment = Self::load_sealed(
                &storage,
                dir,
                base,
                &config,
                index_bases.contains(&base),
                &mut report,
            )?;
            segments.push(segment);
        }
        segments.push(active);
        for pair in segments.windows(2) {
            if pair[1].base_offset != pair[0].next_offset {
                return Err(LogError::Corrupt {
                    path: pair[1].path.clone(),
                    position: 0,
                    reason: format!(
                        "segment starts at offset {} but the previous segment {} ends at {}{}",
                        pair[1].base_offset,
                        pair[0].path.display(),
                        pair[0].next_offset,
                        if active_created {
                            " (the last segment was recreated empty)"
                        } else {
                            ""
                        }
                    ),
                });
            }
        }

        let first_base = segments[0].base_offset;
        let log_end = segments.last().expect("a segment").next_offset;
        let mut start = checkpoint_start.unwrap_or(first_base).max(first_base);
        if start > log_end {
            tracing::warn!(
                dir = %dir.display(),
                checkpoint_start = start,
                log_end_offset = log_end,
                "log start checkpoint is past the recovered log end (its data was not durable); starting at the log end"
            );
            start = log_end;
        }
        checkpoint.written_start = checkpoint_start.unwrap_or(start);

        report.segments = segments.len();
        report.log_start_offset = start;
        report.log_end_offset = log_end;
        let mut log = PartitionLog {
            storage,
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset: start,
            commit: GroupCommit::new(log_end),
            dir_dirty: false,
            checkpoint,
            pending_removal: Vec::new(),
            flight: None,
            scratch: Vec::new(),
        };
        // A start that differs from the checkpoint (clamped to the log end) is written now:
        // appends after recovery must never fall below a stale checkpoint at the next open.
        if log.log_start_offset != log.checkpoint.written_start {
            log.write_checkpoint()?;
        }

        // Make what recovery kept durable, so the durable end is the log end.
        let last = log.active();
        last.file.sync().map_err(io_err("fdatasync", &last.path))?;
        if let Some(file) = &log.checkpoint.file {
            file.sync()
                .map_err(io_err("fdatasync", &log.checkpoint.path))?;
        }
        log.storage
            .sync_dir(dir)
            .map_err(io_err("fsync directory", dir))?;
        log.dir_dirty = false;
        if report.created {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                log.storage
                    .sync_dir(parent)
                    .map_err(io_err("fsync directory", parent))?;
            }
        }
        log.check_invariants();
        Ok((log, report))
    }

    fn create_segment(storage: &S, dir: &Path, base: u64) -> Result<Segment<S::File>, LogError> {
        let path = dir.join(segment_file_name(base));
        let file = storage.create(&path).map_err(io_err("create", &path))?;
        file.write_at(&SegmentHeader::new(SegmentKind::Log, base).encode(), 0)
            .map_err(io_err("write", &path))?;
        Ok(Segment {
            base_offset: base,
            index_path: dir.join(index_file_name(base)),
            path,
            file,
            size: HEADER_BYTES_U64,
            next_offset: base,
            max_timestamp: NO_TIMESTAMP,
            index: Vec::new(),
            first_append_ms: None,
            dirty: true,
        })
    }

    /// Loads the last segment with a full scan, cutting a torn tail. `None` if its header is
    /// torn and nothing valid follows it (the file is removed: it held no durable data).
    fn load_active(
        storage: &S,
        dir: &Path,
        base: u64,
        config: &LogConfig,
        now_ms: u64,
        report: &mut RecoveryReport,
    ) -> Result<Option<Segment<S::File>>, LogError> {
        let path = dir.join(segment_file_name(base));
        let file = storage.open(&path).map_err(io_err("open", &path))?;
        let bytes = file.read_all().map_err(io_err("read", &path))?;
        let corrupt = |position: u64, reason: String| LogError::Corrupt {
            path: path.clone(),
            position,
            reason,
        };
        match SegmentHeader::decode(&bytes) {
            Ok(header) => {
                if header.kind != SegmentKind::Log || header.base_id != base {
                    return Err(corrupt(
                        0,
                        format!(
                            "segment header says {:?} base {}, file name says log base {base}",
                            header.kind, header.base_id
                        ),
                    ));
                }
            }
            Err(error) => {
                if bytes.len() > SEGMENT_HEADER_BYTES
                    && next_valid_frame(&bytes, SEGMENT_HEADER_BYTES).is_some()
                {
                    return Err(corrupt(0, format!("{error}, and valid frames follow")));
                }
                tracing::warn!(
                    file = %path.display(),
                    bytes = bytes.len(),
                    %error,
                    "removing the last segment: its header is torn and it holds no frame"
                );
                drop(file);
                storage.remove(&path).map_err(io_err("remove", &path))?;
                report.removed.push(path);
                return Ok(None);
            }
        }
        let (frames, outcome) = scan_frames(&bytes, SEGMENT_HEADER_BYTES, 0, base);
        let len = bytes.len() as u64;
        match outcome {
            ScanOutcome::Corrupt { position, reason } => return Err(corrupt(position, reason)),
            ScanOutcome::Torn { valid_end, reason } => {
                tracing::warn!(
                    file = %path.display(),
                    position = valid_end,
                    bytes = len - valid_end,
                    %reason,
                    "truncating a torn tail of the last segment"
                );
                file.set_len(valid_end).map_err(io_err("truncate", &path))?;
                report.truncated.push(TruncatedTail {
                    path: path.clone(),
                    position: valid_end,
                    bytes: len - valid_end,
                    reason,
                });
            }
            ScanOutcome::Clean { valid_end } if valid_end < len => {
                tracing::debug!(file = %path.display(), position = valid_end, bytes = len - valid_end, "trimming a zero-filled tail");
                file.set_len(valid_end).map_err(io_err("truncate", &path))?;
                report.zero_tails.push((path.clone(), len - valid_end));
            }
            ScanOutcome::Clean { .. } => {}
        }
        let mut segment = Segment {
            base_offset: base,
            index_path: dir.join(index_file_name(base)),
            path,
            file,
            size: HEADER_BYTES_U64,
            next_offset: base,
            max_timestamp: NO_TIMESTAMP,
            index: Vec::new(),
            first_append_ms: None,
            dirty: false,
        };
        for frame in &frames {
            segment.note_frame(frame, config.index_interval_bytes);
        }
        if !segment.is_empty() {
            segment.first_append_ms = Some(now_ms);
        }
        Ok(Some(segment))
    }

    /// Loads a sealed segment: header, index (checked, rebuilt if damaged), and the frames
    /// after the last index entry (which give the next offset and max timestamp).
    fn load_sealed(
        storage: &S,
        dir: &Path,
        base: u64,
        config: &LogConfig,
        has_index: bool,
        report: &mut RecoveryReport,
    ) -> Result<Segment<S::File>, LogError> {
        let path = dir.join(segment_file_name(base));
        let index_path = dir.join(index_file_name(base));
        let file = storage.open(&path).map_err(io_err("open", &path))?;
        let len = file.len().map_err(io_err("stat", &path))?;
        let corrupt = |position: u64, reason: String| LogError::Corrupt {
            path: path.clone(),
            position,
            reason,
        };
        let mut header = [0u8; SEGMENT_HEADER_BYTES];
        if len < HEADER_BYTES_U64 {
            return Err(corrupt(0, format!("sealed segment has only {len} bytes")));
        }
        file.read_at(&mut header, 0)
            .map_err(io_err("read", &path))?;
        let header = SegmentHeader::decode(&header).map_err(|e| corrupt(0, e.to_string()))?;
        if header.kind != SegmentKind::Log || header.base_id != base {
            return Err(corrupt(
                0,
                format!(
                    "segment header says {:?} base {}, file name says log base {base}",
                    header.kind, header.base_id
                ),
            ));
        }
        let mut segment = Segment {
            base_offset: base,
            path: path.clone(),
            index_path: index_path.clone(),
            file,
            size: HEADER_BYTES_U64,
            next_offset: base,
            max_timestamp: NO_TIMESTAMP,
            index: Vec::new(),
            first_append_ms: None,
            dirty: false,
        };

        // Fast path: a valid index whose last entry matches its frame; scan only after it.
        let mut damage = String::from("missing");
        if has_index {
            let loaded = storage
                .open(&index_path)
                .and_then(|f| f.read_all())
                .map_err(io_err("read", &index_path))?;
            match index::decode_index(&loaded, base, len) {
                Ok(entries) if entries.is_empty() => damage = "empty".into(),
                Ok(entries) => {
                    let last = *entries.last().expect("non-empty");
                    let mut tail = vec![0u8; (len - last.position) as usize];
                    segment
                        .file
                        .read_at(&mut tail, last.position)
                        .map_err(io_err("read", &path))?;
                    let (frames, outcome) = scan_frames(&tail, 0, last.position, last.offset);
                    match frames.first() {
                        Some(first) if first.crc == last.frame_crc => {
                            Self::sealed_outcome(&path, &outcome)?;
                            segment.index = entries;
                            segment.max_timestamp = last.max_timestamp_before;
                            segment.size = last.position;
                            segment.next_offset = last.offset;
                            for frame in &frames {
                                // `note_frame` would add entries; the loaded index already has them.
                                segment.size = frame.position + frame.total_bytes;
                                segment.next_offset = frame.id + u64::from(frame.count);
                                segment.max_timestamp =
                                    segment.max_timestamp.max(frame.max_timestamp);
                            }
                            return Ok(segment);
                        }
                        _ => damage = "its last entry does not match the segment".into(),
                    }
                }
                Err(e) => damage = e.to_string(),
            }
        }

        // Rebuild the index from a full scan.
        let bytes = segment.file.read_all().map_err(io_err("read", &path))?;
        let (frames, outcome) = scan_frames(&bytes, SEGMENT_HEADER_BYTES, 0, base);
        Self::sealed_outcome(&path, &outcome)?;
        for frame in &frames {
            segment.note_frame(frame, config.index_interval_bytes);
        }
        tracing::warn!(file = %index_path.display(), reason = %damage, "rebuilding the index of a sealed segment");
        let index_file = storage
            .create(&index_path)
            .map_err(io_err("create", &index_path))?;
        index_file
            .write_at(&index::encode_index(base, &segment.index), 0)
            .map_err(io_err("write", &index_path))?;
        index_file
            .sync()
            .map_err(io_err("fdatasync", &index_path))?;
        report.indexes_rebuilt.push(index_path);
        Ok(segment)
    }

    /// A sealed segment was synced when it was sealed: any bad frame in it is corruption.
    fn sealed_outcome(path: &Path, outcome: &ScanOutcome) -> Result<(), LogError> {
        match outcome {
            ScanOutcome::Clean { .. } => Ok(()),
            ScanOutcome::Torn { valid_end, reason } => Err(LogError::Corrupt {
                path: path.to_path_buf(),
                position: *valid_end,
                reason: format!("{reason} (in a sealed segment, which was synced when sealed)"),
            }),
            ScanOutcome::Corrupt { position, reason } => Err(LogError::Corrupt {
                path: path.to_path_buf(),
                position: *position,
                reason: reason.clone(),
            }),
        }
    }

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

    /// The offset the next appended record gets.
    pub fn log_end_offset(&self) -> u64 {
        self.active().next_offset
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

    /// True if a flush ticket is out.
    pub fn flush_in_flight(&self) -> bool {
        self.flight.is_some()
    }

    fn active(&self) -> &Segment<S::File> {
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

    fn check_invariants(&self) {
        assert!(!self.segments.is_empty());
        for pair in self.segments.windows(2) {
            assert_eq!(pair[0].next_offset, pair[1].base_offset);
            assert!(!pair[0].dirty, "only the active segment is written");
        }
        assert!(self.log_start_offset >= self.segments[0].base_offset);
        assert!(self.log_start_offset <= self.log_end_offset());
        assert!(self.commit.durable_end() <= self.commit.written_end());
        assert_eq!(self.commit.written_end(), self.log_end_offset());
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
        let rolled = !active.is_empty()
            && (active.size + frame_bytes > self.config.segment_bytes || age_due);
        if rolled {
            self.roll()?;
        }

        let base = self.log_end_offset();
        let count = header.records_count as u32;
        assert!(base
            .checked_add(u64::from(count))
            .is_some_and(|end| end <= i64::MAX as u64));
        let mut payload = batch.to_vec();
        batch::set_base_offset(&mut payload, base as i64);
        self.scratch.clear();
        encode_frame(
            &mut self.scratch,
            FrameMeta {
                id: base,
                kind: BATCH_FRAME_KIND,
                count,
            },
            &payload,
        );
        debug_assert_eq!(self.scratch.len() as u64, frame_bytes);
        let crc = u32::from_le_bytes(self.scratch[0..4].try_into().expect("4 bytes"));
        let interval = self.config.index_interval_bytes;
        let active = self.segments.last_mut().expect("a segment");
        let position = active.size;
        if let Err(source) = active.file.write_at(&self.scratch, position) {
            let error = LogError::Io {
                op: "write",
                path: active.path.clone(),
                source,
            };
            self.poison(&error);
            return Err(error);
        }
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
        self.commit.written(base + u64::from(count));
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
    pub fn roll_if_due(&mut self, now_ms: u64) -> Result<bool, LogError> {
        self.check_writable()?;
        let active = self.active();
        let due = !active.is_empty()
            && (active.size >= self.config.segment_bytes
                || active
                    .first_append_ms
                    .is_some_and(|first| now_ms.saturating_sub(first) >= self.config.segment_ms));
        if due {
            self.roll()?;
        }
        Ok(due)
    }

    /// Seals the active segment (data synced, index written and synced, directory synced) and
    /// starts a new one at the log end. The one place the log syncs by itself: once per
    /// segment, so that a sealed segment can never have a torn tail.
    fn roll(&mut self) -> Result<(), LogError> {
        let result = self.seal_active().and_then(|()| {
            let base = self.log_end_offset();
            let segment = Self::create_segment(&self.storage, &self.dir, base)?;
            self.segments.push(segment);
            self.dir_dirty = true;
            Ok(())
        });
        if let Err(error) = &result {
            self.poison(error);
        }
        result
    }

    fn seal_active(&mut self) -> Result<(), LogError> {
        let active = self.segments.last_mut().expect("a segment");
        assert!(!active.is_empty(), "an empty segment is never sealed");
        active
            .file
            .sync()
            .map_err(io_err("fdatasync", &active.path))?;
        let index_file = self
            .storage
            .create(&active.index_path)
            .map_err(io_err("create", &active.index_path))?;
        index_file
            .write_at(&index::encode_index(active.base_offset, &active.index), 0)
            .map_err(io_err("write", &active.index_path))?;
        index_file
            .sync()
            .map_err(io_err("fdatasync", &active.index_path))?;
        active.dirty = false;
        self.storage
            .sync_dir(&self.dir)
            .map_err(io_err("fsync directory", &self.dir))?;
        self.dir_dirty = false;
        self.commit.synced_everything();
        Ok(())
    }

    /// Removes sealed segments by size and age (Kafka's rules: by size while the log without
    /// the oldest segment is still at least `retention_bytes`; by age while the oldest
    /// segment's newest batch timestamp is more than `retention_ms` before `now_ms`). The
    /// log start offset advances at once; the files are unlinked after the next flush.
    pub fn enforce_retention(&mut self, now_ms: u64) -> Result<Vec<RemovedSegment>, LogError> {
        self.check_writable()?;
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
    /// there is nothing to make durable, a flush is already in flight, or the log is poisoned.
    pub fn begin_flush(&mut self) -> Option<FlushTicket> {
        if self.is_poisoned() || self.flight.is_some() {
            return None;
        }
        let mut files = Vec::new();
        let mut checkpoint_start = None;
        if self.log_start_offset != self.checkpoint.written_start {
            if let Err(error) = self.write_checkpoint() {
                self.poison(&error);
                return None;
            }
            files.push(self.checkpoint.path.clone());
            checkpoint_start = Some(self.log_start_offset);
        }
        for segment in &mut self.segments {
            if segment.dirty {
                files.push(segment.path.clone());
                segment.dirty = false;
            }
        }
        let mut dirs = Vec::new();
        if self.dir_dirty {
            dirs.push(self.dir.clone());
            self.dir_dirty = false;
        }
        let force = !files.is_empty() || !dirs.is_empty();
        let flight = self.commit.begin(force);
        let Some(flight) = flight else {
            assert!(!force, "a flush with work to do must start");
            return None;
        };
        self.flight = Some(Flight {
            id: flight.id,
            checkpoint_start,
        });
        Some(FlushTicket {
            files,
            dirs,
            durable_end_offset: flight.target,
            id: flight.id,
        })
    }

    fn write_checkpoint(&mut self) -> Result<(), LogError> {
        let path = &self.checkpoint.path;
        if self.checkpoint.file.is_none() {
            let file = self.storage.create(path).map_err(io_err("create", path))?;
            self.checkpoint.file = Some(file);
            self.dir_dirty = true;
        }
        let generation = self.checkpoint.generation + 1;
        let slot = checkpoint::encode_slot(CheckpointSlot {
            generation,
            log_start_offset: self.log_start_offset,
        });
        self.checkpoint
            .file
            .as_ref()
            .expect("opened above")
            .write_at(&slot, checkpoint::slot_position(generation))
            .map_err(io_err("write", path))?;
        self.checkpoint.generation = generation;
        self.checkpoint.written_start = self.log_start_offset;
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
                if let Some(start) = flight.checkpoint_start {
                    self.unlink_removed(start);
                }
                Ok(())
            }
        }
    }

    fn unlink_removed(&mut self, durable_start: u64) {
        let storage = &self.storage;
        self.pending_removal.retain(|pending| {
            if pending.end_offset > durable_start {
                return true;
            }
            for path in [&pending.data, &pending.index] {
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
    /// Must not be mixed with an asynchronous flush in flight.
    pub fn flush(&mut self) -> Result<(), LogError> {
        assert!(
            self.flight.is_none(),
            "flush() while an asynchronous flush is in flight"
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
            records: Vec::new(),
            batches: 0,
            first_offset: offset,
            next_offset: offset,
            log_start_offset: start,
            log_end_offset: end,
        };
        if offset == end {
            return Ok(result);
        }
        let mut seg_i = self.segments.partition_point(|s| s.base_offset <= offset) - 1;
        while self.segments[seg_i].next_offset <= offset {
            seg_i += 1; // an empty segment at `offset` (never the last: offset < end)
        }
        let mut position = index::lookup_offset(&self.segments[seg_i].index, offset)
            .map_or(HEADER_BYTES_U64, |e| e.position);
        let mut scratch = Vec::new();
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
            let frame = read_frame(
                &segment.file,
                &segment.path,
                position,
                segment.size,
                &mut scratch,
            )?;
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
            } else if result.records.len() + frame.payload_len > max_bytes {
                break;
            }
            let payload = &scratch[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + frame.payload_len];
            result.records.extend_from_slice(payload);
            result.batches += 1;
            result.next_offset = frame_end;
            position += frame.total_bytes;
            if result.records.len() >= max_bytes {
                break;
            }
        }
        Ok(result)
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
                let frame = read_frame(
                    &segment.file,
                    &segment.path,
                    position,
                    segment.size,
                    &mut scratch,
                )?;
                let payload = &scratch[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + frame.payload_len];
                let header = batch::parse_header(payload).map_err(|e| LogError::Corrupt {
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

/// Performs a ticket's syncs through the storage (the synchronous path; the runtime does the
/// same through io_uring).
pub fn sync_ticket<S: Storage>(storage: &S, ticket: &FlushTicket) -> io::Result<()> {
    let context =
        |path: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    for file in &ticket.files {
        storage.sync_file(file).map_err(|e| context(file, e))?;
    }
    for dir in &ticket.dirs {
        storage.sync_dir(dir).map_err(|e| context(dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::BatchBuilder;
    use crate::storage::file::SimStorage;

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
        assert!(log.begin_flush().is_none());
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
