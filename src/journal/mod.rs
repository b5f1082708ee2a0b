//! The state journal of one shard: durable share-partition state and transaction records
//! (Lockstep's `__share_group_state`), in memory-mapped, preallocated segments.
//!
//! # Format
//! A journal is a directory of segments `{first_seq:020}.jnl`, each preallocated to
//! `segment_bytes` (zero-filled), starting with a [`SegmentHeader`] of kind
//! [`SegmentKind::Journal`] whose `base_id` is the segment's first sequence number, followed by
//! frames of `src/storage/frame.rs` with `FrameMeta { id: seq, kind: entry kind, count: 0 }`.
//! The rest of a segment is zeros. Payloads are FlatBuffers tables of `schemas/journal.fbs`
//! ([`entries`]). Sequence numbers start at 0 and are contiguous across segments.
//!
//! # Writing
//! [`Journal::append`] `memcpy`s one frame into the active segment's map; when it does not fit,
//! the journal *rolls*: it creates the next segment (header written, preallocated, renamed
//! from a temporary name) **without syncing anything**, and leaves the full segment to be
//! sealed by the next flush: its ticket carries a [`JournalSeal`] (the rolled segment's last
//! blocks written durably, the new file and the directory synced), which the runtime performs
//! before it writes anything into the new segment. So a segment is sealed durable before its
//! successor holds an entry on disk, and a crash can tear only the tail of the last segment
//! holding entries; a crash before the seal completes leaves a last segment with no entry
//! (missing, all zeros, a torn header), which recovery removes. At most one seal waits: a
//! second roll before a flush (a snapshot larger than a segment) seals the first
//! synchronously, as [`Journal::flush`] does. With shared maps (the comparison mode
//! `LOCKSTEP_JOURNAL_FLUSH=fdatasync`, whose kernel writes entries back on its own) a roll
//! seals synchronously, as before.
//!
//! Flushes also write zeros ahead of their blocks ([`zero_ahead`], [`FlushTicket::zero_fill`]),
//! so that later flushes overwrite written blocks instead of converting unwritten extents.
//!
//! # Durability and group commit
//! Flush state is the partition log's [`GroupCommit`]: at most one flush in flight, covering
//! every entry appended before it began; entries appended meanwhile share the next one.
//! [`Journal::begin_flush`] hands out a [`FlushTicket`] (the byte range, the blocks that cover
//! it copied from the segment, the last sequence number it covers); the runtime writes the
//! blocks through its io_uring engine (`O_DIRECT`, `O_DSYNC`: one durable write per flush, no
//! file metadata changed since segments are preallocated) and calls
//! [`Journal::complete_flush`]. [`Journal::flush`] does the same synchronously (`pwrite` of the
//! range, `fdatasync`). The segment is mapped private ([`MmapRegion`]): an append is a
//! `memcpy` that reaches the file only through a flush (or when the region is dropped). A
//! failed flush poisons the journal: every later call fails with the original error, because
//! after a failed `fsync` the page cache no longer says what is on disk. Restart to recover.
//!
//! # Snapshots and compaction
//! [`Journal::write_snapshot`] writes a snapshot of the shard's state as it is before the call:
//! `SnapshotBegin`, the payload in chunks of `snapshot_chunk_bytes` (so a snapshot may be far
//! larger than one frame), `SnapshotEnd` with the payload's CRC-32 (rules: [`snapshot`]).
//! Once the snapshot is durable, [`Journal::compact`] deletes, oldest first, every sealed
//! segment whose entries all precede the snapshot's begin.
//!
//! # Recovery ([`Journal::open`])
//! Stale `*.tmp` files (segments whose creation a crash interrupted) are removed. A last
//! segment that holds no entry, after another, is a roll whose seal did not complete: it is
//! removed ([`RecoveryReport::removed_unsealed`]). Segments are
//! read in order; each header must be a journal header whose `base_id` matches the file name
//! and continues the sequence. Frames are scanned with [`frame::scan`]: in the last segment a
//! zero-filled tail is the end, a torn tail is cut (zeroed, synced, logged with `tracing`); a
//! bad tail in a sealed segment, and a bad frame followed by a valid one anywhere, are errors
//! naming the file and byte position, and nothing is cut. Every payload is verified and decoded.
//! Replay ([`Recovered`]) is the latest complete snapshot, then every other entry after it, in
//! sequence order. Recovery syncs what it read, so everything replayed is durable: the last
//! segment from byte 0 (its header is unsynced if a clean shutdown came between its roll and
//! the seal), the segment before it and the directory.
//!
//! Known limit: a power loss during a flush can tear its block write out of order (sectors of
//! one write land independently), leaving a zero hole before surviving frames inside that
//! write's blocks (nothing else of the file is written unsynced: the map is private). No entry
//! there was durable, but recovery
//! cannot tell that hole from corruption of durable data, so it refuses to start and names the
//! position (never silent loss); `lockstep-inspect journal` shows the damage.
//!
//! # Ownership
//! One journal per shard, owned by that shard's thread; nothing is shared. The journal is
//! synchronous and I/O-generic ([`RegionDir`]): real maps in production, [`MemDir`] in tests.
//!
//! [`MemDir`]: crate::storage::mmap::MemDir
//! [`MmapRegion`]: crate::storage::mmap::MmapRegion

pub mod entries;
mod error;
pub mod inspect;
pub mod snapshot;

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flatbuffers::FlatBufferBuilder;

use crate::constants::{
    FRAME_ALIGN_BYTES, FRAME_HEADER_BYTES, JOURNAL_BLOCK_BYTES, JOURNAL_ENTRY_BYTES_MAX,
    JOURNAL_SEGMENT_BYTES_DEFAULT, JOURNAL_SEGMENT_BYTES_MAX, JOURNAL_SEGMENT_BYTES_MIN,
    JOURNAL_SNAPSHOT_BYTES_MAX, JOURNAL_SNAPSHOT_CHUNK_BYTES_DEFAULT,
    JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN, JOURNAL_SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX,
    SEGMENT_HEADER_BYTES,
};
use crate::log::group_commit::GroupCommit;
use crate::log::{BlockWrite, ZeroFill};
use crate::storage::blocks::zero_ahead;
use crate::storage::frame::{
    self, encode_frame, frame_total_bytes, FrameError, FrameMeta, ScanEnd, SegmentHeader,
    SegmentKind,
};
use crate::storage::mmap::{Region, RegionDir, TMP_SUFFIX};

use entries::{Entry, EntryKind, ShardSnapshot, SnapshotBegin, SnapshotEnd};
pub use error::JournalError;
use snapshot::{SnapshotAssembler, Step};

/// File name suffix of journal segments.
pub const SEGMENT_SUFFIX: &str = ".jnl";

/// The file name of the segment whose first sequence number is `first_seq`.
pub fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}{SEGMENT_SUFFIX}")
}

/// The first sequence number named by a segment file name, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Journal settings (validated by [`Journal::open`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalConfig {
    /// Size of each preallocated segment, a multiple of 8 in
    /// `JOURNAL_SEGMENT_BYTES_MIN ..= JOURNAL_SEGMENT_BYTES_MAX`.
    pub segment_bytes: u64,
    /// Snapshot payload bytes per chunk entry; a chunk entry must fit in an empty segment.
    pub snapshot_chunk_bytes: usize,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            segment_bytes: JOURNAL_SEGMENT_BYTES_DEFAULT,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_DEFAULT,
        }
    }
}

impl JournalConfig {
    pub fn validate(&self) -> Result<(), JournalError> {
        let fail = |reason: String| Err(JournalError::Config { reason });
        if !(JOURNAL_SEGMENT_BYTES_MIN..=JOURNAL_SEGMENT_BYTES_MAX).contains(&self.segment_bytes)
            || !self.segment_bytes.is_multiple_of(FRAME_ALIGN_BYTES as u64)
        {
            return fail(format!(
                "segment_bytes {} must be a multiple of {FRAME_ALIGN_BYTES} in \
                 {JOURNAL_SEGMENT_BYTES_MIN}..={JOURNAL_SEGMENT_BYTES_MAX}",
                self.segment_bytes
            ));
        }
        let chunk_entry = self.snapshot_chunk_bytes + JOURNAL_SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX;
        if self.snapshot_chunk_bytes < JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN
            || chunk_entry > self.entry_bytes_max()
        {
            return fail(format!(
                "snapshot_chunk_bytes {} must be at least {JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN} and \
                 a chunk entry ({chunk_entry} bytes) must fit an entry (at most {} bytes)",
                self.snapshot_chunk_bytes,
                self.entry_bytes_max()
            ));
        }
        Ok(())
    }

    fn segment_len(&self) -> usize {
        usize::try_from(self.segment_bytes).expect("validated segment size fits usize")
    }

    /// The largest entry payload: it must fit an empty segment and the entry limit.
    pub fn entry_bytes_max(&self) -> usize {
        let room =
            (self.segment_bytes as usize).saturating_sub(SEGMENT_HEADER_BYTES + FRAME_HEADER_BYTES);
        room.min(JOURNAL_ENTRY_BYTES_MAX)
    }
}

/// Where an entry is: segment file and byte position of its frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub path: Arc<Path>,
    pub position: usize,
}

/// An entry found by recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredEntry {
    pub seq: u64,
    pub location: Location,
    pub entry: Entry,
}

/// The complete snapshot replay starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredSnapshot {
    pub begin_seq: u64,
    pub end_seq: u64,
    /// Where its `SnapshotBegin` is.
    pub location: Location,
    pub state: ShardSnapshot,
}

/// A torn tail recovery cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub path: PathBuf,
    pub position: usize,
    pub bytes: usize,
    pub error: FrameError,
}

/// What recovery found and did, besides the state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub segments: usize,
    /// First sequence number still in the journal.
    pub first_seq: u64,
    /// Sequence number the next append gets.
    pub next_seq: u64,
    pub truncated: Option<Truncation>,
    /// Begin sequence numbers of snapshots that were never completed (ignored).
    pub abandoned_snapshots: Vec<u64>,
    /// Leftover `*.tmp` files removed.
    pub removed_tmp_files: Vec<String>,
    /// The last segment, removed because it held no entry: a roll whose seal a crash
    /// interrupted ([`JournalSeal`]).
    pub removed_unsealed: Option<String>,
}

/// The state to replay: the latest complete snapshot, then every entry after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub snapshot: Option<RecoveredSnapshot>,
    /// Ordinary entries (never snapshot markers) after the snapshot, in sequence order.
    pub entries: Vec<RecoveredEntry>,
    pub report: RecoveryReport,
}

/// A flush handed out by [`Journal::begin_flush`]: perform `write` durably (the storage
/// engine: one `O_DIRECT` + `O_DSYNC` write), then give the ticket back to
/// [`Journal::complete_flush`] with the result.
#[derive(Debug)]
pub struct FlushTicket {
    flight_id: u64,
    segment_first_seq: u64,
    /// The segment file.
    pub path: PathBuf,
    /// Unsynced bytes of that file, `[offset, offset + len)`.
    pub offset: usize,
    pub len: usize,
    /// The blocks that cover the unsynced bytes, as the segment holds them (zeros past the
    /// last entry): block-aligned and a whole number of [`JOURNAL_BLOCK_BYTES`] unless the
    /// segment's size is not (then it ends at the segment's end).
    pub write: BlockWrite,
    /// Zeros to write, durably, over preallocated bytes of the segment past `write` (see
    /// [`zero_ahead`]); disjoint from `write`, so both may be written at once. `None` when
    /// enough is zeroed ahead already.
    pub zero_fill: Option<ZeroFill>,
    /// The seal of the segment a roll left behind, to perform before `write` and
    /// `zero_fill` (see [`JournalSeal`]).
    pub seal: Option<JournalSeal>,
    /// Every entry up to and including this one is durable once the sync succeeds.
    pub upto_seq: u64,
}

/// The seal of a rolled segment, carried by the next flush ticket: its unsynced blocks
/// written durably (`write`, or with shared maps an `fdatasync` of `segment`), the new
/// segment's file synced (`fdatasync` of `next`: its header and size) and the directory
/// synced (`fsync` of `dir`: the new segment's name). All of it before anything is written
/// into the new segment, so only the last segment can have a torn tail; a crash before it
/// completes leaves the new segment without a durable entry, which recovery removes.
#[derive(Debug)]
pub struct JournalSeal {
    segment_first_seq: u64,
    /// The rolled segment.
    pub segment: PathBuf,
    /// Its unsynced bytes' blocks; `None` if a flush begun before the roll covered them.
    pub write: Option<BlockWrite>,
    /// Its unsynced bytes `[offset, offset + len)`.
    offset: usize,
    len: usize,
    /// The segment created by the roll (written, not synced).
    pub next: PathBuf,
    /// The journal's directory.
    pub dir: PathBuf,
}

/// Sequence numbers of a written snapshot: begin marker and end marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotWritten {
    pub begin_seq: u64,
    pub end_seq: u64,
}

struct SealedSegment {
    first_seq: u64,
    name: String,
}

struct ActiveSegment<R> {
    first_seq: u64,
    name: String,
    path: PathBuf,
    region: R,
    /// Next frame goes here.
    write_pos: usize,
    /// Every byte below is durable.
    durable_pos: usize,
    /// File bytes below this were written (entries or zeros, [`zero_ahead`]); the rest of the
    /// preallocated segment may be unwritten extents.
    zeroed: u64,
}

struct Poison {
    path: PathBuf,
    cause: Arc<io::Error>,
}

/// The state journal of one shard. See the module docs.
pub struct Journal<D: RegionDir> {
    dir: D,
    config: JournalConfig,
    /// Sealed (durable, full) segments, oldest first.
    sealed: VecDeque<SealedSegment>,
    active: ActiveSegment<D::Region>,
    /// The segment the last roll left, until its seal is durable (see [`JournalSeal`]).
    sealing: Option<ActiveSegment<D::Region>>,
    next_seq: u64,
    /// Flush state over sequence numbers (exclusive ends).
    commit: GroupCommit,
    /// Segment of the flush in flight.
    in_flight_segment: Option<u64>,
    /// Segment whose seal the flush in flight carries.
    in_flight_seal: Option<u64>,
    poison: Option<Poison>,
    /// Snapshots written, oldest first: the latest durable one and any newer.
    snapshots: Vec<SnapshotWritten>,
    scratch: Vec<u8>,
    builder: FlatBufferBuilder<'static>,
}

fn io_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> JournalError + 'a {
    move |source| JournalError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl<D: RegionDir> Drop for Journal<D> {
    /// A clean close writes the private maps to the files (the regions' drop), a rolled-to
    /// segment's entries too: the seal still pending goes first, so that no power loss after
    /// the close can keep those entries and lose the rolled segment's tail (a sequence gap
    /// that would stop the next start). If the seal fails, the new segment's entries are not
    /// written (as the partition log leaves its tail).
    fn drop(&mut self) {
        if self.sealing.is_some() && self.poison.is_none() {
            if let Err(error) = self.seal_now() {
                tracing::warn!(%error, "journal: could not seal the rolled segment on close; the new segment's entries are not written");
                self.active.region.discard_unwritten();
            }
        }
    }
}

impl<D: RegionDir> Journal<D> {
    /// Opens (or creates) the journal in `dir`, recovering as described in the module docs.
    pub fn open(
        mut dir: D,
        config: JournalConfig,
    ) -> Result<(Journal<D>, Recovered), JournalError> {
        config.validate()?;
        let dir_path = dir.path("");
        let mut report = RecoveryReport::default();
        let mut segments = Vec::new();
        for name in dir.list().map_err(io_error("list", &dir_path))? {
            if name.ends_with(&format!("{SEGMENT_SUFFIX}{TMP_SUFFIX}")) {
                dir.remove(&name)
                    .map_err(io_error("remove stale", &dir.path(&name)))?;
                tracing::info!(file = %dir.path(&name).display(), "removed a segment whose creation was interrupted");
                report.removed_tmp_files.push(name);
            } else if let Some(first_seq) = parse_segment_name(&name) {
                segments.push((first_seq, name));
            } else {
                tracing::warn!(file = %dir.path(&name).display(), "ignoring a file that is not a journal segment");
            }
        }
        segments.sort();
        // A roll whose seal never completed: the last segment holds no entry (its header may
        // be missing or torn, the file empty). Remove it; the one before is then the last, and
        // only its tail can be torn (nothing was written into the new segment before the seal).
        if segments.len() >= 2 {
            let (_, name) = segments.last().expect("two or more");
            if Self::holds_no_entry(&mut dir, name)? {
                let path = dir.path(name);
                dir.remove(name)
                    .map_err(io_error("remove unsealed", &path))?;
                tracing::info!(file = %path.display(), "journal: removed a segment whose roll was not sealed");
                report.removed_unsealed = Some(name.clone());
                segments.pop();
            }
        }

        let mut sealed = VecDeque::new();
        let mut active = None;
        let mut recovered = Recovered::default();
        let mut expected = segments.first().map_or(0, |(seq, _)| *seq);
        let mut assembler = SnapshotAssembler::<Location>::new(expected);
        report.first_seq = expected;
        report.segments = segments.len();
        let last = segments.len().checked_sub(1);
        for (index, (first_seq, name)) in segments.into_iter().enumerate() {
            let is_last = Some(index) == last;
            let path: Arc<Path> = dir.path(&name).into();
            let region = dir.open(&name).map_err(io_error("open", &path))?;
            let header =
                SegmentHeader::decode(region.bytes()).map_err(|error| JournalError::Header {
                    path: path.to_path_buf(),
                    error,
                })?;
            if header.kind != SegmentKind::Journal || header.base_id != first_seq {
                return Err(JournalError::HeaderMismatch {
                    path: path.to_path_buf(),
                    reason: format!(
                        "header says {:?} segment starting at {}, the file name says journal \
                         segment starting at {first_seq}",
                        header.kind, header.base_id
                    ),
                });
            }
            if first_seq != expected {
                return Err(JournalError::SequenceGap {
                    path: path.to_path_buf(),
                    position: 0,
                    expected,
                    found: first_seq,
                });
            }
            let mut scan = frame::scan(region.bytes(), SEGMENT_HEADER_BYTES);
            for frame in scan.by_ref() {
                let position = frame.position;
                let seq = frame.meta.id;
                if seq != expected {
                    return Err(JournalError::SequenceGap {
                        path: path.to_path_buf(),
                        position,
                        expected,
                        found: seq,
                    });
                }
                let kind = EntryKind::from_code(frame.meta.kind).ok_or_else(|| {
                    JournalError::UnknownKind {
                        path: path.to_path_buf(),
                        position,
                        seq,
                        kind: frame.meta.kind,
                    }
                })?;
                let entry =
                    Entry::decode(kind, frame.payload).map_err(|error| JournalError::BadEntry {
                        path: path.to_path_buf(),
                        position,
                        seq,
                        kind,
                        error: Box::new(error),
                    })?;
                let location = Location {
                    path: path.clone(),
                    position,
                };
                let step = assembler
                    .feed(seq, &entry, location.clone())
                    .map_err(|reason| JournalError::BadSnapshot {
                        path: path.to_path_buf(),
                        position,
                        seq,
                        reason,
                    })?;
                match step {
                    Step::Other { abandoned } => {
                        if let Some(gone) = abandoned {
                            note_abandoned(&mut report, gone);
                        }
                        recovered.entries.push(RecoveredEntry {
                            seq,
                            location,
                            entry,
                        });
                    }
                    Step::Consumed { abandoned } => {
                        if let Some(gone) = abandoned {
                            note_abandoned(&mut report, gone);
                        }
                    }
                    Step::Complete(done) => {
                        let state = ShardSnapshot::decode(&done.payload).map_err(|error| {
                            JournalError::BadSnapshot {
                                path: done.begin_location.path.to_path_buf(),
                                position: done.begin_location.position,
                                seq: done.begin_seq,
                                reason: format!("complete snapshot does not decode: {error}"),
                            }
                        })?;
                        recovered.snapshot = Some(RecoveredSnapshot {
                            begin_seq: done.begin_seq,
                            end_seq: done.end_seq,
                            location: done.begin_location,
                            state,
                        });
                        recovered.entries.clear();
                    }
                }
                expected += 1;
            }
            let end = scan.end().expect("scan exhausted");
            let valid_end = match end {
                ScanEnd::Clean { valid_end } => valid_end,
                ScanEnd::Corrupt {
                    position,
                    error,
                    next_valid,
                } => {
                    return Err(JournalError::Corrupt {
                        path: path.to_path_buf(),
                        position,
                        error,
                        next_valid,
                    })
                }
                ScanEnd::TornTail {
                    valid_end,
                    error,
                    cut_bytes,
                } => {
                    if !is_last {
                        return Err(JournalError::SealedTail {
                            path: path.to_path_buf(),
                            position: valid_end,
                            error,
                        });
                    }
                    // Cut only once every check has passed (below): a failed recovery
                    // writes nothing.
                    report.truncated = Some(Truncation {
                        path: path.to_path_buf(),
                        position: valid_end,
                        bytes: cut_bytes,
                        error,
                    });
                    valid_end
                }
            };
            if is_last {
                active = Some(ActiveSegment {
                    first_seq,
                    name,
                    path: path.to_path_buf(),
                    region,
                    write_pos: valid_end,
                    durable_pos: valid_end,
                    // Unknown past the entries: zeros are written again from there.
                    zeroed: 0,
                });
            } else {
                sealed.push_back(SealedSegment { first_seq, name });
            }
        }
        if let Some(gone) = assembler.finish() {
            note_abandoned(&mut report, gone);
        }
        if report.first_seq > 0 && recovered.snapshot.is_none() {
            return Err(JournalError::MissingSnapshot {
                path: dir.path(&segment_name(report.first_seq)),
                first_seq: report.first_seq,
            });
        }
        let active = match active {
            Some(mut active) => {
                if let Some(cut) = &report.truncated {
                    assert_eq!(cut.position, active.write_pos);
                    active.region.write(cut.position, &vec![0u8; cut.bytes]);
                    tracing::warn!(
                        file = %cut.path.display(),
                        position = cut.position,
                        bytes = cut.bytes,
                        error = %cut.error,
                        "journal: cut a torn tail"
                    );
                }
                // Make everything replayed durable (and the cut): a process crash leaves
                // written, unsynced pages that recovery reads; they must not vanish after the
                // shard acts on them. From byte 0: the header too, which is unsynced when the
                // last segment is a roll's whose seal never ran (a clean shutdown, or a
                // process crash, before the next flush); left so, a later power loss could
                // tear the header of a segment holding durable entries.
                let end = active.write_pos + report.truncated.as_ref().map_or(0, |c| c.bytes);
                active
                    .region
                    .flush_range(0, end)
                    .map_err(io_error("sync", &active.path))?;
                // The segment before the last may be a rolled one whose seal never ran (a clean
                // shutdown left its tail, and the new segment's name, in the page cache only):
                // make it and the directory durable before replaying them.
                if let Some(previous) = sealed.back() {
                    let path = dir.path(&previous.name);
                    dir.open(&previous.name)
                        .and_then(|mut region| region.sync_file_data())
                        .map_err(io_error("sync", &path))?;
                    dir.sync_names().map_err(io_error("sync", &dir_path))?;
                }
                active
            }
            None => Self::create_segment(&mut dir, &config, 0, true)?,
        };
        report.next_seq = expected;
        recovered.report = report;
        let snapshots = recovered
            .snapshot
            .iter()
            .map(|s| SnapshotWritten {
                begin_seq: s.begin_seq,
                end_seq: s.end_seq,
            })
            .collect();
        let journal = Journal {
            dir,
            config,
            sealed,
            active,
            sealing: None,
            next_seq: expected,
            commit: GroupCommit::new(expected),
            in_flight_segment: None,
            in_flight_seal: None,
            poison: None,
            snapshots,
            scratch: Vec::new(),
            builder: FlatBufferBuilder::new(),
        };
        journal.check_invariants();
        Ok((journal, recovered))
    }

    /// True if segment `name` holds no frame: it is empty or shorter than a header, or the
    /// scan past its header (whatever the header says) ends cleanly or torn at the first frame.
    fn holds_no_entry(dir: &mut D, name: &str) -> Result<bool, JournalError> {
        let region = match dir.open(name) {
            Ok(region) => region,
            Err(error) if error.kind() == io::ErrorKind::InvalidData => return Ok(true),
            Err(error) => return Err(io_error("open", &dir.path(name))(error)),
        };
        let bytes = region.bytes();
        if bytes.len() <= SEGMENT_HEADER_BYTES {
            return Ok(true);
        }
        let mut scan = frame::scan(bytes, SEGMENT_HEADER_BYTES);
        if scan.next().is_some() {
            return Ok(false);
        }
        Ok(match scan.end().expect("scan exhausted") {
            ScanEnd::Clean { valid_end } | ScanEnd::TornTail { valid_end, .. } => {
                valid_end == SEGMENT_HEADER_BYTES
            }
            ScanEnd::Corrupt { .. } => false,
        })
    }

    /// Creates segment `first_seq`, synced (file and directory) or, for a roll, not: its seal
    /// syncs it then ([`JournalSeal`]).
    fn create_segment(
        dir: &mut D,
        config: &JournalConfig,
        first_seq: u64,
        synced: bool,
    ) -> Result<ActiveSegment<D::Region>, JournalError> {
        let name = segment_name(first_seq);
        let path = dir.path(&name);
        let header = SegmentHeader::new(SegmentKind::Journal, first_seq).encode();
        let region = if synced {
            dir.create(&name, config.segment_len(), &header)
        } else {
            dir.create_unsynced(&name, config.segment_len(), &header)
        }
        .map_err(io_error("create", &path))?;
        assert_eq!(&region.bytes()[..SEGMENT_HEADER_BYTES], &header[..]);
        Ok(ActiveSegment {
            first_seq,
            name,
            path,
            region,
            write_pos: SEGMENT_HEADER_BYTES,
            durable_pos: SEGMENT_HEADER_BYTES,
            zeroed: 0,
        })
    }

    fn check_invariants(&self) {
        let a = &self.active;
        assert!(SEGMENT_HEADER_BYTES <= a.durable_pos && a.durable_pos <= a.write_pos);
        assert!(a.write_pos <= a.region.len());
        assert!(a.first_seq <= self.next_seq);
        assert_eq!(self.commit.written_end(), self.next_seq);
        assert!(self.commit.durable_end() <= self.next_seq);
        if let Some(s) = &self.sealing {
            assert!(SEGMENT_HEADER_BYTES <= s.durable_pos && s.durable_pos <= s.write_pos);
            assert!(s.first_seq < a.first_seq);
            assert!(
                a.write_pos > SEGMENT_HEADER_BYTES,
                "a roll appends into the new segment"
            );
        }
        let sealing_unsynced = self
            .sealing
            .as_ref()
            .is_some_and(|s| s.write_pos > s.durable_pos);
        if self.poison.is_none() {
            // Sealed segments are durable, so the durable end is inside the active (or the
            // sealing) segment exactly when their bytes are not all durable.
            assert_eq!(
                self.commit.durable_end() == self.next_seq,
                a.durable_pos == a.write_pos && !sealing_unsynced,
                "durable end {} / next {} vs durable position {} / write position {}",
                self.commit.durable_end(),
                self.next_seq,
                a.durable_pos,
                a.write_pos
            );
        }
        if let Some(last) = self.sealed.back() {
            let next = self.sealing.as_ref().map_or(a.first_seq, |s| s.first_seq);
            assert!(last.first_seq < next);
        }
    }

    fn check_poison(&self) -> Result<(), JournalError> {
        match &self.poison {
            None => Ok(()),
            Some(p) => Err(JournalError::Poisoned {
                path: p.path.clone(),
                cause: p.cause.clone(),
            }),
        }
    }

    fn poison_with(&mut self, path: PathBuf, error: io::Error) -> JournalError {
        tracing::error!(file = %path.display(), %error, "journal flush failed; the journal is poisoned");
        self.commit.poison(error.to_string());
        let cause = Arc::new(error);
        if self.poison.is_none() {
            self.poison = Some(Poison {
                path: path.clone(),
                cause: cause.clone(),
            });
        }
        let p = self.poison.as_ref().expect("just set");
        JournalError::Poisoned {
            path: p.path.clone(),
            cause: p.cause.clone(),
        }
    }

    /// Appends one entry (`payload` encoded as `kind`'s table) and returns its sequence number.
    /// Not durable until a flush covers it. Snapshot markers are written by
    /// [`Journal::write_snapshot`] only.
    pub fn append(&mut self, kind: EntryKind, payload: &[u8]) -> Result<u64, JournalError> {
        assert!(
            !kind.is_snapshot_marker(),
            "{kind} is written by write_snapshot only"
        );
        debug_assert!(
            Entry::decode(kind, payload).is_ok(),
            "payload is not a valid {kind}"
        );
        self.append_frame(kind, payload)
    }

    /// Encodes and appends `entry`.
    pub fn append_entry(&mut self, entry: &Entry) -> Result<u64, JournalError> {
        let mut builder = std::mem::take(&mut self.builder);
        let result = self.append(entry.kind(), entry.encode_into(&mut builder));
        self.builder = builder;
        result
    }

    /// Appends every entry of `entries`, in order, and returns the last sequence number (`None`
    /// for no entries). All or poison: the caller has already taken these entries out of its
    /// state, so an entry that cannot be appended (an I/O failure while rolling, an entry too
    /// large) would leave the state ahead of the journal for good. Any failure therefore poisons
    /// the journal (the error returned is the poison), and the runtime takes its fatal path;
    /// recovery on restart replays what was durable.
    pub fn append_all(&mut self, entries: &[Entry]) -> Result<Option<u64>, JournalError> {
        let mut last = None;
        for entry in entries {
            match self.append_entry(entry) {
                Ok(seq) => last = Some(seq),
                Err(error) => return Err(self.poison_after(error)),
            }
        }
        Ok(last)
    }

    /// Poisons the journal because of `error` (unless it already is) and returns the poison.
    fn poison_after(&mut self, error: JournalError) -> JournalError {
        if let JournalError::Poisoned { .. } = error {
            return error;
        }
        let path = self.active.path.clone();
        self.poison_with(path, io::Error::other(error.to_string()))
    }

    fn append_frame(&mut self, kind: EntryKind, payload: &[u8]) -> Result<u64, JournalError> {
        self.check_poison()?;
        let have = self.config.entry_bytes_max();
        if payload.is_empty() || payload.len() > have {
            return Err(JournalError::EntryTooLarge {
                kind,
                need: payload.len(),
                have,
            });
        }
        let total = frame_total_bytes(payload.len());
        if self.active.write_pos + total > self.active.region.len() {
            self.roll()?;
        }
        assert!(
            self.active.write_pos + total <= self.active.region.len(),
            "entry of {total} bytes does not fit an empty segment"
        );
        let seq = self.next_seq;
        self.scratch.clear();
        encode_frame(
            &mut self.scratch,
            FrameMeta {
                id: seq,
                kind: kind.code(),
                count: 0,
            },
            payload,
        );
        assert_eq!(self.scratch.len(), total);
        let position = self.active.write_pos;
        self.active.region.write(position, &self.scratch);
        debug_assert_eq!(
            frame::decode_frame(self.active.region.bytes(), position)
                .map(|f| (f.meta.id, f.payload)),
            Ok((seq, payload))
        );
        self.active.write_pos += total;
        self.next_seq += 1;
        self.commit.written(self.next_seq);
        Ok(seq)
    }

    /// Starts the next segment; the active one is left to be sealed by the next flush
    /// ([`JournalSeal`]). A seal still pending from the roll before is performed first,
    /// synchronously (at most one seal waits: two rolls without a flush between them take a
    /// snapshot larger than a segment).
    fn roll(&mut self) -> Result<(), JournalError> {
        self.seal_now()?;
        if self.dir.maps_write_back() {
            // Shared maps: the kernel may write the new segment's entries back before the
            // seal, so seal first, synchronously (the comparison mode's old behaviour).
            self.sync_active()?;
        }
        if self.active.write_pos == SEGMENT_HEADER_BYTES {
            self.sync_active()?;
            // An empty active segment smaller than the configured size (written under an
            // earlier configuration): its successor would have its name. Replace it instead;
            // it holds no entry, so a crash between removal and creation loses nothing.
            assert_eq!(self.active.first_seq, self.next_seq);
            let path = self.active.path.clone();
            self.dir
                .remove(&self.active.name)
                .map_err(io_error("remove empty", &path))?;
            self.active = Self::create_segment(&mut self.dir, &self.config, self.next_seq, true)?;
            tracing::info!(file = %path.display(), bytes = self.config.segment_bytes, "journal: resized an empty segment");
            self.check_invariants();
            return Ok(());
        }
        let synced = self.dir.maps_write_back();
        let next = Self::create_segment(&mut self.dir, &self.config, self.next_seq, synced)?;
        let old = std::mem::replace(&mut self.active, next);
        if self.dir.maps_write_back() {
            self.sealed.push_back(SealedSegment {
                first_seq: old.first_seq,
                name: old.name,
            });
            return Ok(());
        }
        tracing::debug!(rolled = %old.path.display(), next_seq = self.next_seq, "journal: rolled");
        self.sealing = Some(old);
        // Not checked here: the roll is part of an append, which writes into the new segment.
        Ok(())
    }

    /// Performs the pending seal now, synchronously: the rolled segment's unsynced bytes,
    /// the new segment's header, the directory. Poisons on failure.
    fn seal_now(&mut self) -> Result<(), JournalError> {
        let Some(mut s) = self.sealing.take() else {
            return Ok(());
        };
        let synced = (|| {
            if s.write_pos > s.durable_pos {
                s.region
                    .flush_range(s.durable_pos, s.write_pos - s.durable_pos)
                    .map_err(|e| (s.path.clone(), e))?;
                s.durable_pos = s.write_pos;
            }
            self.active
                .region
                .flush_range(0, SEGMENT_HEADER_BYTES)
                .map_err(|e| (self.active.path.clone(), e))?;
            self.dir.sync_names().map_err(|e| (self.dir.path(""), e))
        })();
        if let Err((path, error)) = synced {
            self.sealing = Some(s);
            return Err(self.poison_with(path, error));
        }
        tracing::debug!(sealed = %s.path.display(), "journal: sealed a rolled segment");
        self.sealed.push_back(SealedSegment {
            first_seq: s.first_seq,
            name: s.name,
        });
        Ok(())
    }

    /// Syncs every unsynced byte of the active segment now; poisons on failure.
    fn sync_active(&mut self) -> Result<(), JournalError> {
        let a = &mut self.active;
        if a.write_pos > a.durable_pos {
            if let Err(error) = a
                .region
                .flush_range(a.durable_pos, a.write_pos - a.durable_pos)
            {
                let path = a.path.clone();
                return Err(self.poison_with(path, error));
            }
            a.durable_pos = a.write_pos;
        }
        self.commit.synced_everything();
        Ok(())
    }

    /// Writes a snapshot whose payload is a `ShardSnapshot` FlatBuffer capturing all state as
    /// of before this call. Durable once a flush covers `end_seq`.
    pub fn write_snapshot(&mut self, payload: &[u8]) -> Result<SnapshotWritten, JournalError> {
        self.check_poison()?;
        if payload.is_empty() || payload.len() as u64 > JOURNAL_SNAPSHOT_BYTES_MAX {
            return Err(JournalError::SnapshotSize {
                need: payload.len() as u64,
                have: JOURNAL_SNAPSHOT_BYTES_MAX,
            });
        }
        debug_assert!(
            ShardSnapshot::decode(payload).is_ok(),
            "snapshot payload is not a ShardSnapshot"
        );
        let chunk_count = u32::try_from(payload.len().div_ceil(self.config.snapshot_chunk_bytes))
            .expect("chunk count bounded by JOURNAL_SNAPSHOT_BYTES_MAX / chunk size");
        let mut builder = std::mem::take(&mut self.builder);
        let result = (|| {
            let begin = Entry::SnapshotBegin(SnapshotBegin {
                chunk_count,
                total_bytes: payload.len() as u64,
            });
            let begin_seq =
                self.append_frame(EntryKind::SnapshotBegin, begin.encode_into(&mut builder))?;
            for (index, data) in payload.chunks(self.config.snapshot_chunk_bytes).enumerate() {
                let index = u32::try_from(index).expect("index < chunk_count");
                let chunk = entries::encode_snapshot_chunk(&mut builder, begin_seq, index, data);
                assert!(chunk.len() <= data.len() + JOURNAL_SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX);
                self.append_frame(EntryKind::SnapshotChunk, chunk)?;
            }
            let end = Entry::SnapshotEnd(SnapshotEnd {
                snapshot_seq: begin_seq,
                chunk_count,
                total_bytes: payload.len() as u64,
                crc32: crc32fast::hash(payload),
            });
            let end_seq =
                self.append_frame(EntryKind::SnapshotEnd, end.encode_into(&mut builder))?;
            assert_eq!(end_seq, begin_seq + u64::from(chunk_count) + 1);
            Ok(SnapshotWritten { begin_seq, end_seq })
        })();
        self.builder = builder;
        let written = result?;
        self.snapshots.push(written);
        Ok(written)
    }

    /// Encodes and writes `snapshot` (see [`Journal::write_snapshot`]).
    pub fn write_shard_snapshot(
        &mut self,
        snapshot: &ShardSnapshot,
    ) -> Result<SnapshotWritten, JournalError> {
        let payload = snapshot.encode();
        self.write_snapshot(&payload)
    }

    /// Starts a flush of everything appended so far, unless nothing is unsynced or a flush is
    /// in flight (entries appended meanwhile wait for the next one).
    pub fn begin_flush(&mut self) -> Result<Option<FlushTicket>, JournalError> {
        self.check_poison()?;
        let Some(flight) = self.commit.begin(false) else {
            return Ok(None);
        };
        let a = &mut self.active;
        assert_eq!(flight.target, self.next_seq);
        assert!(
            a.write_pos > a.durable_pos,
            "unsynced entries lie in the active segment"
        );
        self.in_flight_segment = Some(a.first_seq);
        let block = JOURNAL_BLOCK_BYTES as usize;
        let seal = self.sealing.as_ref().map(|s| {
            let write = (s.write_pos > s.durable_pos).then(|| {
                let lo = s.durable_pos / block * block;
                let hi = s
                    .write_pos
                    .div_ceil(block)
                    .saturating_mul(block)
                    .min(s.region.len());
                BlockWrite {
                    path: s.path.clone(),
                    position: lo as u64,
                    data: s.region.bytes()[lo..hi].to_vec(),
                }
            });
            JournalSeal {
                segment_first_seq: s.first_seq,
                segment: s.path.clone(),
                write,
                offset: s.durable_pos,
                len: s.write_pos - s.durable_pos,
                next: a.path.clone(),
                dir: self.dir.path(""),
            }
        });
        self.in_flight_seal = seal.as_ref().map(|s| s.segment_first_seq);
        let lo = a.durable_pos / block * block;
        let hi = a
            .write_pos
            .div_ceil(block)
            .saturating_mul(block)
            .min(a.region.len());
        // Entries past `hi` reach the file only through later flushes, which start after
        // this one completed (one flush at a time), and the segment is mapped private (the
        // map is never written back over them): zeros past `hi` may be written with it.
        let zero_fill = if hi % block == 0 {
            zero_ahead(&mut a.zeroed, hi as u64, a.region.len() as u64).map(|(position, len)| {
                ZeroFill {
                    path: a.path.clone(),
                    position,
                    len,
                }
            })
        } else {
            None
        };
        Ok(Some(FlushTicket {
            flight_id: flight.id,
            segment_first_seq: a.first_seq,
            path: a.path.clone(),
            offset: a.durable_pos,
            len: a.write_pos - a.durable_pos,
            write: BlockWrite {
                path: a.path.clone(),
                position: lo as u64,
                data: a.region.bytes()[lo..hi].to_vec(),
            },
            zero_fill,
            seal,
            upto_seq: flight.target - 1,
        }))
    }

    /// Ends the flush `ticket` with the sync's result; an error poisons the journal and is
    /// returned as [`JournalError::Poisoned`].
    pub fn complete_flush(
        &mut self,
        ticket: FlushTicket,
        result: io::Result<()>,
    ) -> Result<(), JournalError> {
        assert_eq!(
            self.in_flight_segment,
            Some(ticket.segment_first_seq),
            "completion of a flush that is not in flight"
        );
        self.in_flight_segment = None;
        self.in_flight_seal = None;
        match result {
            Ok(()) => {
                self.commit.complete(ticket.flight_id, Ok(()));
                if self.poison.is_none() {
                    if let Some(seal) = &ticket.seal {
                        // Unless a second roll sealed it synchronously meanwhile.
                        if self
                            .sealing
                            .as_ref()
                            .is_some_and(|s| s.first_seq == seal.segment_first_seq)
                        {
                            let mut s = self.sealing.take().expect("checked");
                            s.region.synced_externally(seal.offset, seal.len);
                            s.durable_pos = s.durable_pos.max(seal.offset + seal.len);
                            assert_eq!(
                                s.durable_pos, s.write_pos,
                                "nothing is appended to a rolled segment"
                            );
                            // The ticket's segment is the one created by this roll.
                            assert_eq!(ticket.segment_first_seq, self.active.first_seq);
                            self.active
                                .region
                                .synced_externally(0, SEGMENT_HEADER_BYTES);
                            self.dir.names_synced_externally();
                            self.sealed.push_back(SealedSegment {
                                first_seq: s.first_seq,
                                name: s.name,
                            });
                        }
                    }
                    let end = ticket.offset + ticket.len;
                    let target = if ticket.segment_first_seq == self.active.first_seq {
                        Some(&mut self.active)
                    } else {
                        // A flush begun before a roll: its segment awaits its seal.
                        self.sealing
                            .as_mut()
                            .filter(|s| s.first_seq == ticket.segment_first_seq)
                    };
                    if let Some(segment) = target {
                        segment.region.synced_externally(ticket.offset, ticket.len);
                        segment.durable_pos = segment.durable_pos.max(end);
                    }
                }
                self.check_invariants();
                self.check_poison()
            }
            Err(error) => {
                self.commit
                    .complete(ticket.flight_id, Err(error.to_string()));
                Err(self.poison_with(ticket.path, error))
            }
        }
    }

    /// Makes everything appended so far durable before returning (`msync`).
    pub fn flush(&mut self) -> Result<(), JournalError> {
        self.check_poison()?;
        self.seal_now()?;
        self.sync_active()?;
        self.check_invariants();
        Ok(())
    }

    /// Deletes, oldest first, every sealed segment whose entries all precede the latest durable
    /// snapshot. Returns the paths removed.
    pub fn compact(&mut self) -> Result<Vec<PathBuf>, JournalError> {
        self.check_poison()?;
        let durable_end = self.commit.durable_end();
        let Some(latest) = self.snapshots.iter().rposition(|s| s.end_seq < durable_end) else {
            return Ok(Vec::new());
        };
        self.snapshots.drain(..latest);
        let snapshot = self.snapshots[0];
        let mut removed = Vec::new();
        while let Some(oldest) = self.sealed.front() {
            let next_first = self.sealed.get(1).map_or(
                self.sealing
                    .as_ref()
                    .map_or(self.active.first_seq, |s| s.first_seq),
                |s| s.first_seq,
            );
            if next_first > snapshot.begin_seq
                || self.in_flight_segment == Some(oldest.first_seq)
                || self.in_flight_seal == Some(oldest.first_seq)
            {
                break;
            }
            let path = self.dir.path(&oldest.name);
            self.dir
                .remove(&oldest.name)
                .map_err(io_error("remove", &path))?;
            tracing::debug!(file = %path.display(), snapshot = snapshot.begin_seq, "journal: removed a compacted segment");
            removed.push(path);
            self.sealed.pop_front();
        }
        Ok(removed)
    }

    /// The sequence number the next entry gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Every entry with a smaller sequence number is durable.
    pub fn durable_end(&self) -> u64 {
        self.commit.durable_end()
    }

    /// True if entries are unsynced and no flush is in flight.
    pub fn needs_flush(&self) -> bool {
        self.poison.is_none() && self.commit.needs_flush()
    }

    pub fn is_poisoned(&self) -> bool {
        self.poison.is_some()
    }

    /// The latest snapshot whose end marker is durable.
    pub fn latest_durable_snapshot(&self) -> Option<SnapshotWritten> {
        let durable_end = self.commit.durable_end();
        self.snapshots
            .iter()
            .rev()
            .find(|s| s.end_seq < durable_end)
            .copied()
    }

    /// Paths of the segments, oldest first (the last one is active).
    pub fn segment_paths(&self) -> Vec<PathBuf> {
        self.sealed
            .iter()
            .map(|s| self.dir.path(&s.name))
            .chain(self.sealing.iter().map(|s| s.path.clone()))
            .chain(std::iter::once(self.active.path.clone()))
            .collect()
    }

    pub fn config(&self) -> &JournalConfig {
        &self.config
    }
}

fn note_abandoned(report: &mut RecoveryReport, gone: snapshot::Abandoned<Location>) {
    tracing::info!(
        file = %gone.begin_location.path.display(),
        position = gone.begin_location.position,
        snapshot = gone.begin_seq,
        chunks = gone.chunks_seen,
        reason = %gone.reason,
        "journal: ignoring an incomplete snapshot"
    );
    report.abandoned_snapshots.push(gone.begin_seq);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constants::LOG_ZERO_FILL_BYTES;

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(segment_name(42), "00000000000000000042.jnl");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("00000000000000000042.jnl.tmp"), None);
        assert_eq!(parse_segment_name("0000000000000000042.jnl"), None);
        assert_eq!(parse_segment_name("0000000000000000004x.jnl"), None);
        assert_eq!(
            parse_segment_name("99999999999999999999.jnl"),
            None,
            "overflows u64"
        );
    }

    #[test]
    fn an_empty_small_segment_is_replaced_when_the_configured_size_grew() {
        use crate::journal::entries::{RunState, SharePartitionState, StateRun};
        use crate::storage::mmap::MemDir;
        let dir = MemDir::default();
        let small = JournalConfig {
            segment_bytes: 4096,
            snapshot_chunk_bytes: 64,
        };
        drop(Journal::open(dir.clone(), small).unwrap());
        let large = JournalConfig {
            segment_bytes: 65536,
            snapshot_chunk_bytes: 64,
        };
        let (mut journal, _) = Journal::open(dir.clone(), large.clone()).unwrap();
        let big = Entry::SharePartitionUpdate(SharePartitionState {
            group_id: "g".into(),
            topic_id: [1; 16],
            partition: 0,
            start_offset: None,
            end_offset: None,
            state_epoch: 0,
            runs: (0..400)
                .map(|i| StateRun {
                    first_offset: 2 * i,
                    last_offset: 2 * i,
                    state: RunState::Archived,
                    delivery_count: 5,
                })
                .collect(),
        });
        assert_eq!(journal.append_entry(&big).unwrap(), 0);
        journal.flush().unwrap();
        drop(journal);
        assert_eq!(dir.names(), vec![segment_name(0)]);
        assert_eq!(dir.file_bytes(&segment_name(0)).unwrap().len(), 65536);
        let (_, recovered) = Journal::open(dir, large).unwrap();
        assert_eq!(recovered.entries[0].entry, big);
    }

    fn small_entry(i: u32) -> Entry {
        use crate::journal::entries::SharePartitionState;
        Entry::SharePartitionUpdate(SharePartitionState {
            group_id: format!("g{i}"),
            topic_id: [1; 16],
            partition: 0,
            start_offset: Some(i64::from(i)),
            end_offset: None,
            state_epoch: 0,
            runs: Vec::new(),
        })
    }

    #[test]
    fn a_failed_append_poisons_the_journal() {
        use crate::storage::mmap::MemDir;
        let config = JournalConfig {
            segment_bytes: JOURNAL_SEGMENT_BYTES_MIN,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN,
        };
        let dir = MemDir::default();
        let (mut journal, _) = Journal::open(dir.clone(), config.clone()).unwrap();
        assert_eq!(journal.append_all(&[]).unwrap(), None);
        assert_eq!(
            journal
                .append_all(&[small_entry(0), small_entry(1)])
                .unwrap(),
            Some(1)
        );
        journal.flush().unwrap();
        // Enough entries to fill the segment: the roll syncs it, and that sync fails.
        dir.fail_next_syncs(1);
        let entries: Vec<Entry> = (2..20_000).map(small_entry).collect();
        let error = journal.append_all(&entries).unwrap_err();
        assert!(matches!(error, JournalError::Poisoned { .. }), "{error}");
        assert!(journal.is_poisoned());
        assert!(matches!(
            journal.append_entry(&small_entry(0)),
            Err(JournalError::Poisoned { .. })
        ));
        assert!(matches!(
            journal.flush(),
            Err(JournalError::Poisoned { .. })
        ));
        assert!(!journal.needs_flush());
        drop(journal);
        // What was durable before the failure comes back on reopen.
        let (_, recovered) = Journal::open(dir, config).unwrap();
        assert!(recovered.entries.len() >= 2);
        assert_eq!(recovered.entries[0].entry, small_entry(0));
        assert_eq!(recovered.entries[1].entry, small_entry(1));
    }

    #[test]
    fn an_entry_that_cannot_be_appended_poisons_the_journal_in_append_all() {
        use crate::journal::entries::{RunState, SharePartitionState, StateRun};
        use crate::storage::mmap::MemDir;
        let config = JournalConfig {
            segment_bytes: JOURNAL_SEGMENT_BYTES_MIN,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN,
        };
        let (mut journal, _) = Journal::open(MemDir::default(), config.clone()).unwrap();
        let huge = Entry::SharePartitionUpdate(SharePartitionState {
            group_id: "g".into(),
            topic_id: [1; 16],
            partition: 0,
            start_offset: None,
            end_offset: None,
            state_epoch: 0,
            runs: (0..(config.segment_bytes as i64))
                .map(|i| StateRun {
                    first_offset: 2 * i,
                    last_offset: 2 * i,
                    state: RunState::Archived,
                    delivery_count: 5,
                })
                .collect(),
        });
        // Alone, a too-large entry is refused and the journal goes on (nothing was written)...
        assert!(matches!(
            journal.append_entry(&huge),
            Err(JournalError::EntryTooLarge { .. })
        ));
        assert!(!journal.is_poisoned());
        // ...but in append_all the entries before it were appended and the caller's state has
        // moved on: the journal is poisoned, nothing after it is appended.
        let error = journal
            .append_all(&[small_entry(0), huge, small_entry(1)])
            .unwrap_err();
        assert!(matches!(error, JournalError::Poisoned { .. }), "{error}");
        assert!(journal.is_poisoned());
        assert_eq!(journal.next_seq(), 1);
    }

    #[test]
    fn flushes_write_zeros_ahead_of_their_blocks() {
        use crate::storage::mmap::MemDir;
        let config = JournalConfig {
            segment_bytes: 1024 * 1024,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN,
        };
        let (mut journal, _) = Journal::open(MemDir::default(), config.clone()).unwrap();
        let mut zeroed = 0u64;
        let mut fills = 0;
        for i in 0..20_000u32 {
            journal.append_entry(&small_entry(i)).unwrap();
            let ticket = journal.begin_flush().unwrap().unwrap();
            let end = ticket.write.position + ticket.write.data.len() as u64;
            if ticket.segment_first_seq == 0 {
                if let Some(fill) = &ticket.zero_fill {
                    // Past the block write, contiguous with what was zeroed, within the file.
                    assert_eq!(fill.path, ticket.path);
                    assert!(
                        fill.position >= end,
                        "{fill:?} overlaps the write ending at {end}"
                    );
                    assert_eq!(fill.position, zeroed.max(end));
                    assert!(fill.len > 0 && fill.len <= LOG_ZERO_FILL_BYTES);
                    assert_eq!(fill.position % JOURNAL_BLOCK_BYTES, 0);
                    assert_eq!(fill.len % JOURNAL_BLOCK_BYTES, 0);
                    assert!(fill.position + fill.len <= config.segment_bytes);
                    zeroed = fill.position + fill.len;
                    fills += 1;
                } else if end + LOG_ZERO_FILL_BYTES / 2 <= config.segment_bytes {
                    // Enough is zeroed ahead already.
                    assert!(
                        zeroed >= end + LOG_ZERO_FILL_BYTES / 2,
                        "no fill at {end}, zeroed {zeroed}"
                    );
                }
            }
            journal.complete_flush(ticket, Ok(())).unwrap();
            if journal.segment_paths().len() > 1 {
                break;
            }
        }
        assert!(journal.segment_paths().len() > 1, "the test rolled");
        // The fills covered the segment up to its last whole fill.
        assert!(
            fills >= 3 && zeroed + LOG_ZERO_FILL_BYTES / 2 >= config.segment_bytes,
            "{fills} fills, zeroed {zeroed}"
        );
    }

    /// Appends small entries, flushing through tickets, until the journal rolls; returns how
    /// many were appended and the durable end before the roll.
    fn roll_once(journal: &mut Journal<crate::storage::mmap::MemDir>) -> (u32, u64) {
        let mut i = 0;
        while journal.segment_paths().len() == 1 {
            let before = journal.durable_end();
            journal.append_entry(&small_entry(i)).unwrap();
            i += 1;
            if journal.segment_paths().len() > 1 {
                return (i, before);
            }
            if i % 3 == 0 {
                let ticket = journal.begin_flush().unwrap().unwrap();
                assert!(ticket.seal.is_none());
                journal.complete_flush(ticket, Ok(())).unwrap();
            }
        }
        unreachable!()
    }

    #[test]
    fn a_roll_syncs_nothing_and_the_next_flush_seals() {
        use crate::storage::mmap::{MemDir, Tear};
        let config = JournalConfig {
            segment_bytes: 4096,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN,
        };
        let dir = MemDir::default();
        let (mut journal, _) = Journal::open(dir.clone(), config.clone()).unwrap();
        let syncs = dir.syncs();
        let (appended, durable) = roll_once(&mut journal);
        assert_eq!(dir.syncs(), syncs, "the roll synced nothing");
        assert_eq!(journal.durable_end(), durable);
        let ticket = journal.begin_flush().unwrap().unwrap();
        let seal = ticket.seal.as_ref().expect("the flush carries the seal");
        assert_eq!(seal.segment, dir.path(&segment_name(0)));
        assert_eq!(seal.next, ticket.path);
        // The rolled segment holds every entry but the last; the ones after the last flush
        // are its unsynced tail, which the seal writes.
        let in_old = u64::from(appended) - 1;
        assert_eq!(
            seal.write.is_some(),
            durable < in_old,
            "durable {durable} of {in_old}"
        );
        if let Some(write) = &seal.write {
            assert_eq!(write.position % JOURNAL_BLOCK_BYTES, 0);
        }
        journal.complete_flush(ticket, Ok(())).unwrap();
        assert_eq!(journal.durable_end(), u64::from(appended));
        // Sealed and durable: a power loss that drops unsynced names and bytes loses nothing.
        drop(journal);
        dir.crash_dropping_new_files(|_, lo, _| Tear {
            keep_until: lo,
            junk: None,
        });
        let (journal, recovered) = Journal::open(dir, config).unwrap();
        assert_eq!(recovered.report.next_seq, u64::from(appended));
        assert_eq!(recovered.report.removed_unsealed, None);
        assert_eq!(journal.segment_paths().len(), 2);
    }

    #[test]
    fn a_crash_between_a_roll_and_its_seal_loses_only_what_was_not_durable() {
        use crate::storage::mmap::{MemDir, Tear};
        let config = JournalConfig {
            segment_bytes: 4096,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN,
        };
        // (drop the new segment's name, how much of each file's unsynced bytes survives)
        for drop_new in [false, true] {
            for keep in [0usize, 1, 2] {
                let dir = MemDir::default();
                let (mut journal, _) = Journal::open(dir.clone(), config.clone()).unwrap();
                let (mut appended, durable) = roll_once(&mut journal);
                for _ in 0..3 {
                    journal.append_entry(&small_entry(appended)).unwrap();
                    appended += 1;
                }
                if keep == 2 {
                    // A flush in flight when the crash comes (the seal not completed).
                    let ticket = journal.begin_flush().unwrap().unwrap();
                    assert!(ticket.seal.is_some());
                    std::mem::forget(ticket);
                }
                std::mem::forget(journal); // a crash: no close
                let tear = |_: &str, lo: usize, hi: usize| Tear {
                    keep_until: [lo, (lo + hi) / 2, hi][keep],
                    junk: None,
                };
                if drop_new {
                    dir.crash_dropping_new_files(tear);
                } else {
                    dir.crash(tear);
                }
                let (mut journal, recovered) = Journal::open(dir.clone(), config.clone())
                    .unwrap_or_else(|e| panic!("drop_new {drop_new} keep {keep}: {e}"));
                let cut = recovered.report.next_seq;
                let case = format!("drop_new {drop_new} keep {keep}: cut {cut}");
                assert!(durable <= cut && cut <= u64::from(appended), "{case}");
                for (i, entry) in recovered.entries.iter().enumerate() {
                    assert_eq!(entry.seq, i as u64, "{case}");
                    assert_eq!(entry.entry, small_entry(i as u32), "{case}");
                }
                assert_eq!(recovered.entries.len() as u64, cut, "{case}");
                if keep == 2 {
                    // The rolled segment's bytes all survived; none of the new one's entries
                    // (never written to its file before the seal).
                    // (All but the entry that rolled and the 3 after it.)
                    assert_eq!(cut, u64::from(appended) - 4, "{case}");
                }
                if !drop_new {
                    // The new segment holds no entry: removed, the rolled one is the last.
                    assert!(recovered.report.removed_unsealed.is_some(), "{case}");
                }
                assert_eq!(journal.segment_paths().len(), 1, "{case}");
                // The journal goes on: append, roll again, flush, reopen.
                for i in cut as u32..cut as u32 + 200 {
                    journal.append_entry(&small_entry(i)).unwrap();
                }
                journal.flush().unwrap();
                drop(journal);
                dir.crash_dropping_new_files(|_, lo, _| Tear {
                    keep_until: lo,
                    junk: None,
                });
                let (_, recovered) = Journal::open(dir, config.clone()).unwrap();
                assert_eq!(recovered.report.next_seq, cut + 200, "{case}");
            }
        }
    }

    #[test]
    fn a_process_crash_between_a_roll_and_its_seal_keeps_everything_written() {
        use crate::storage::mmap::MemDir;
        let config = JournalConfig {
            segment_bytes: 4096,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN,
        };
        let dir = MemDir::default();
        let (mut journal, _) = Journal::open(dir.clone(), config.clone()).unwrap();
        let (appended, _) = roll_once(&mut journal);
        std::mem::forget(journal); // a crash: no close
        dir.crash_keeping_written();
        let (journal, recovered) = Journal::open(dir, config).unwrap();
        assert_eq!(recovered.report.next_seq, u64::from(appended));
        assert_eq!(recovered.report.removed_unsealed, None);
        assert_eq!(journal.segment_paths().len(), 2);
    }

    /// Rolls without a flush (the rolled segment's last entries unsynced), closes with
    /// `failing_syncs` syncs failing, then a power loss keeps the newest segment's unsynced
    /// bytes whole and none of the others'. Returns (entries appended, what recovery found).
    fn close_after_an_unflushed_roll_then_power_loss(failing_syncs: u32) -> (u32, Recovered) {
        use crate::storage::mmap::{MemDir, Tear};
        let config = JournalConfig {
            segment_bytes: 4096,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN,
        };
        let dir = MemDir::default();
        let (mut journal, _) = Journal::open(dir.clone(), config.clone()).unwrap();
        let mut appended = 0;
        while journal.segment_paths().len() == 1 || appended % 4 != 0 {
            journal.append_entry(&small_entry(appended)).unwrap();
            appended += 1;
        }
        let newest = journal.segment_paths().last().unwrap().clone();
        let newest = newest.file_name().unwrap().to_str().unwrap().to_string();
        dir.fail_next_syncs(failing_syncs);
        drop(journal);
        dir.crash_after_clean_close(|name, lo, hi| Tear {
            keep_until: if name == newest { hi } else { lo },
            junk: None,
        });
        let (_, recovered) = Journal::open(dir, config).unwrap();
        (appended, recovered)
    }

    #[test]
    fn a_power_loss_after_a_clean_close_between_a_roll_and_its_seal_keeps_the_sequence() {
        // A clean close writes the new segment's entries to its file (the private map's
        // drop); a power loss may then keep them and lose the rolled segment's unsynced tail,
        // a gap no recovery may fill. The close performs the seal first.
        let (appended, recovered) = close_after_an_unflushed_roll_then_power_loss(0);
        assert_eq!(recovered.report.next_seq, u64::from(appended));
        for (i, entry) in recovered.entries.iter().enumerate() {
            assert_eq!(entry.entry, small_entry(i as u32));
        }
    }

    #[test]
    fn a_failed_seal_at_close_leaves_the_new_segment_unwritten() {
        let (appended, recovered) = close_after_an_unflushed_roll_then_power_loss(1);
        assert!(recovered.report.next_seq < u64::from(appended));
        assert_eq!(recovered.entries.len() as u64, recovered.report.next_seq);
        for (i, entry) in recovered.entries.iter().enumerate() {
            assert_eq!(entry.entry, small_entry(i as u32));
        }
    }

    /// Seed 8 of `tests/journal_model.rs`: a process crash between a roll and its seal
    /// leaves the new segment's header unsynced; recovery must make it durable with the
    /// entries it replays, or a later power loss tears the header of a segment whose entries
    /// were acknowledged durable.
    #[test]
    fn recovery_after_a_clean_shutdown_before_a_seal_syncs_the_new_header() {
        use crate::storage::mmap::MemDir;
        let config = JournalConfig {
            segment_bytes: 4096,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN,
        };
        let dir = MemDir::default();
        let (mut journal, _) = Journal::open(dir.clone(), config.clone()).unwrap();
        let (appended, _) = roll_once(&mut journal);
        std::mem::forget(journal); // a process crash: the seal never ran
        let (mut journal, recovered) = Journal::open(dir.clone(), config.clone()).unwrap();
        assert_eq!(recovered.report.next_seq, u64::from(appended));
        assert_eq!(journal.durable_end(), u64::from(appended));
        journal.append_entry(&small_entry(appended)).unwrap();
        journal.flush().unwrap();
        let durable = journal.durable_end();
        drop(journal);
        // A power loss keeping nothing unsynced: every entry reported durable survives.
        dir.crash_losing_unsynced();
        let (_, recovered) = Journal::open(dir, config).unwrap();
        assert_eq!(recovered.report.next_seq, durable);
    }

    #[test]
    fn config_validation() {
        JournalConfig::default().validate().unwrap();
        let small = JournalConfig {
            segment_bytes: JOURNAL_SEGMENT_BYTES_MIN,
            snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN,
        };
        small.validate().unwrap();
        for bad in [
            JournalConfig {
                segment_bytes: JOURNAL_SEGMENT_BYTES_MIN - 8,
                ..small.clone()
            },
            JournalConfig {
                segment_bytes: JOURNAL_SEGMENT_BYTES_MIN + 4,
                ..small.clone()
            },
            JournalConfig {
                snapshot_chunk_bytes: JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN - 1,
                ..small.clone()
            },
            JournalConfig {
                snapshot_chunk_bytes: JOURNAL_SEGMENT_BYTES_MIN as usize,
                ..small.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?} accepted");
        }
    }
}
