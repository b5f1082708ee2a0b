//! One segment file of a partition log, in memory and on disk: the accounting of its frames,
//! the checks every frame must pass, the recovery scan (frame.rs's rule plus those checks),
//! and reading one frame back. Owned by the partition log of the shard that owns the partition.
//!
//! The active segment is written behind ([`Tail`]): an append only encodes its frame into the
//! in-memory tail; a flush ticket hands the unwritten bytes to the engine as whole chunks of
//! block memory (`O_DIRECT`, no copy), the partially filled last block included, which the next
//! write rewrites from memory. Reads of bytes at or past the tail's start come from memory.
//!
//! Below the tail, a read takes what the segment's read cache holds ([`Chunk`]s the runtime
//! read ahead through io_uring, `O_DIRECT`, see [`super::PartitionLog::read_ahead`]) and the
//! rest from the file (`pread`, the synchronous fallback). A chunk only ever holds bytes that
//! were on the file and final when it was read (below the tail's start, which only moves
//! forward; a sealed segment's bytes never change), so it is never stale; it dies with its
//! segment.

use super::batch::{self, BatchHeader};
use super::index::IndexEntry;
use super::partition::{io_err, LogError, BATCH_FRAME_KIND, HEADER_BYTES_U64, NO_TIMESTAMP};
use crate::constants::{
    FRAME_ALIGN_BYTES, FRAME_HEADER_BYTES, FRAME_PAYLOAD_BYTES_MAX, LOG_BLOCK_BYTES,
    LOG_TAIL_CACHE_BYTES, LOG_TAIL_CHUNK_BYTES_MAX, LOG_TAIL_CHUNK_BYTES_MIN, SEGMENT_HEADER_BYTES,
};
use crate::storage::blocks::{alloc_blocks, BlockMemory};
use crate::storage::file::StorageFile;
use crate::storage::frame::{self, frame_total_bytes, next_valid_frame, FrameMeta, ScanEnd};
use std::cell::Cell;
use std::collections::VecDeque;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Bytes of a segment file read ahead through the engine (the runtime's DMA buffer, shared).
pub type CachedBytes = Rc<dyn Deref<Target = [u8]>>;

/// File bytes `[position, position + len)` of a segment, read ahead (`len <= data.len()`).
pub(super) struct Chunk {
    pub(super) position: u64,
    pub(super) len: u64,
    pub(super) data: CachedBytes,
}

impl Chunk {
    pub(super) fn end(&self) -> u64 {
        self.position + self.len
    }
}

pub(super) struct Segment<F> {
    pub(super) base_offset: u64,
    pub(super) path: PathBuf,
    pub(super) index_path: PathBuf,
    pub(super) file: F,
    /// Bytes in use: header and frames (the next frame is written here).
    pub(super) size: u64,
    pub(super) next_offset: u64,
    /// Largest batch maxTimestamp in the segment, or -1.
    pub(super) max_timestamp: i64,
    pub(super) index: Vec<IndexEntry>,
    /// Broker time of the first append into this segment in this process (or of its
    /// recovery): the age that `segment_ms` measures.
    pub(super) first_append_ms: Option<u64>,
    /// Written since the last sync handed out in a ticket.
    pub(super) dirty: bool,
    /// The segment's last bytes, in memory: everything not yet handed to a write, and the
    /// recently written blocks. Empty (start = size) for sealed segments.
    pub(super) tail: Tail,
    /// The file's length as this process made it (preallocated zeros past `size`).
    pub(super) allocated: u64,
    /// File bytes below this were written (data, or zeros written ahead by [`Self::zero_ahead`]),
    /// as far as this process knows; past it the preallocated extents may be unwritten.
    pub(super) zeroed: u64,
    /// Read-ahead chunks below the tail, sorted by position, not overlapping.
    pub(super) cache: Vec<Chunk>,
    /// Reads that took bytes from the file (`pread`, the synchronous fallback), for tests
    /// and stats ([`super::PartitionLog::file_reads`]).
    pub(super) file_reads: Cell<u64>,
}

/// The in-memory end of a segment: file bytes `[start, end())`, which is `[start, size)` for
/// the active segment ([`Tail::none`] for sealed ones), kept in chunks of block memory
/// ([`BlockMemory`], the runtime's DMA buffers on a shard) so that a flush hands whole chunks to
/// the engine without copying them. `start` is a multiple of [`LOG_BLOCK_BYTES`]. Bytes below
/// `issued` were handed to a write (a flush ticket or a seal); bytes below `start` are on the
/// file (their write completed).
///
/// Appends go into the open chunk. A flush closes it: zero-padded to its block end and shared
/// with the write (never mutated again), and a new open chunk starts at the block holding the
/// end, with a copy of that partial block (the only bytes copied; the next write rewrites the
/// block, after this one completed: one flush is in flight at a time). An open chunk that runs
/// full is closed at its last whole block (its partial block moves to the next chunk), so the
/// writes of one flush never overlap. Chunks are contiguous: each starts at or before the end of
/// the previous one, and where two hold the same position they hold the same byte.
pub(super) struct Tail {
    pub(super) start: u64,
    closed: VecDeque<Closed>,
    open: Option<Open>,
    pub(super) issued: u64,
}

/// A chunk no append writes into any more.
struct Closed {
    position: u64,
    data: SharedBlocks,
    /// Segment bytes it holds from `position` (its memory may run on: zero padding).
    fill: u64,
    /// Handed to a write.
    issued: bool,
}

/// The chunk appends go into.
struct Open {
    position: u64,
    memory: Box<dyn BlockMemory>,
    len: usize,
}

impl Open {
    fn new(position: u64, partial: &[u8], need: usize, hint: u64) -> Open {
        assert_eq!(position % LOG_BLOCK_BYTES, 0, "a chunk starts on a block");
        let least = align_up((partial.len() + need) as u64);
        let capacity = hint
            .clamp(LOG_TAIL_CHUNK_BYTES_MIN, LOG_TAIL_CHUNK_BYTES_MAX)
            .max(least);
        let capacity = align_up(capacity) as usize;
        let mut memory = alloc_blocks(capacity);
        memory.bytes_mut()[..partial.len()].copy_from_slice(partial);
        Open {
            position,
            memory,
            len: partial.len(),
        }
    }

    fn end(&self) -> u64 {
        self.position + self.len as u64
    }
}

/// Block memory shared between a segment's tail and the writes of it in flight.
pub type SharedBlocks = Rc<dyn BlockMemory>;

/// One write of a segment's tail: a whole chunk (its memory is a multiple of the block size
/// long: the segment's bytes, zero-padded to the block end) at `position`, handed out in a
/// flush ticket or a seal. The memory is never mutated while a write holds it.
#[derive(Clone)]
pub struct ChunkWrite {
    pub path: PathBuf,
    /// A multiple of the block size.
    pub position: u64,
    pub data: SharedBlocks,
}

impl ChunkWrite {
    pub fn bytes(&self) -> &[u8] {
        self.data.bytes()
    }

    pub fn end(&self) -> u64 {
        self.position + self.bytes().len() as u64
    }
}

impl std::fmt::Debug for ChunkWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkWrite")
            .field("path", &self.path)
            .field("position", &self.position)
            .field("len", &self.bytes().len())
            .finish()
    }
}

impl PartialEq for ChunkWrite {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.position == other.position && self.bytes() == other.bytes()
    }
}

impl Eq for ChunkWrite {}

/// One block-aligned write of bytes (the checkpoint's slot, the journal's tail), handed out in
/// a flush ticket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockWrite {
    pub path: PathBuf,
    /// A multiple of the block size.
    pub position: u64,
    /// A multiple of the block size long.
    pub data: Vec<u8>,
}

/// Zeros to write over file bytes `[position, position + len)` of a segment (both multiples
/// of the block size), handed out in a flush ticket (`Segment::zero_ahead`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZeroFill {
    pub path: PathBuf,
    pub position: u64,
    pub len: u64,
}

pub(super) fn align_down(position: u64) -> u64 {
    position & !(LOG_BLOCK_BYTES - 1)
}

pub(super) fn align_up(position: u64) -> u64 {
    position.div_ceil(LOG_BLOCK_BYTES) * LOG_BLOCK_BYTES
}

impl Tail {
    /// No tail: every byte is read from the file (a sealed segment).
    pub(super) fn none() -> Tail {
        Tail {
            start: u64::MAX,
            closed: VecDeque::new(),
            open: None,
            issued: u64::MAX,
        }
    }

    pub(super) fn is_none(&self) -> bool {
        self.start == u64::MAX
    }

    /// A tail holding `bytes`, the file's bytes from `start` (block aligned) to the segment's
    /// end, all of them already on the file.
    pub(super) fn written(start: u64, bytes: &[u8]) -> Tail {
        assert_eq!(start % LOG_BLOCK_BYTES, 0, "a tail starts on a block");
        Tail {
            start,
            closed: VecDeque::new(),
            open: Some(Open::new(start, bytes, 0, 0)),
            issued: start + bytes.len() as u64,
        }
    }

    /// A new segment's tail: `bytes` (its header) at file position 0, not written yet.
    pub(super) fn unwritten(bytes: &[u8]) -> Tail {
        Tail {
            start: 0,
            closed: VecDeque::new(),
            open: Some(Open::new(0, bytes, 0, 0)),
            issued: 0,
        }
    }

    pub(super) fn end(&self) -> u64 {
        match (&self.open, self.closed.back()) {
            (Some(open), _) => open.end(),
            (None, Some(last)) => last.position + last.fill,
            (None, None) => self.start,
        }
    }

    /// `len` bytes at the end of the tail for an append to fill (the segment grows by them).
    pub(super) fn reserve(&mut self, len: usize) -> &mut [u8] {
        let open = self
            .open
            .as_ref()
            .expect("an active segment's tail has an open chunk");
        if open.len + len > open.memory.bytes().len() {
            self.close_full(len);
        }
        let open = self.open.as_mut().expect("an open chunk");
        let at = open.len;
        open.len += len;
        &mut open.memory.bytes_mut()[at..at + len]
    }

    /// Closes the open chunk at its last whole block (not handed to a write yet) and opens the
    /// next one with the partial block and room for `need` more bytes.
    fn close_full(&mut self, need: usize) {
        let Open {
            position,
            mut memory,
            len,
        } = self.open.take().expect("an open chunk");
        let whole = align_down(len as u64) as usize;
        let partial = memory.bytes()[whole..len].to_vec();
        let hint = 2 * memory.bytes().len() as u64;
        if whole > 0 {
            memory.truncate(whole);
            self.closed.push_back(Closed {
                position,
                data: Rc::from(memory),
                fill: whole as u64,
                issued: false,
            });
        }
        self.open = Some(Open::new(position + whole as u64, &partial, need, hint));
    }

    /// The writes of everything not yet handed out, each a whole chunk: the chunks closed
    /// since, and the open one, closed here (zero-padded to a whole block; the next open chunk
    /// starts with a copy of its partial last block). Marks them handed out. Empty if nothing
    /// is new.
    pub(super) fn take_writes(&mut self, path: &Path) -> Vec<ChunkWrite> {
        self.take(path, true)
    }

    /// [`Self::take_writes`] of a segment being sealed: no chunk is opened after them (nothing
    /// is appended to it any more). An open chunk with nothing new stays: it holds the last
    /// partial block, which reads take from memory until the seal completed.
    pub(super) fn take_last_writes(&mut self, path: &Path) -> Vec<ChunkWrite> {
        self.take(path, false)
    }

    /// The writes of the chunks that ran full (closed at their last whole block, not handed out
    /// yet), in file order, from the first of them while each starts at or past `from`; the
    /// open chunk stays. Marks them handed out. These never overlap the open chunk or each
    /// other (a full chunk's partial block moved to the next one).
    pub(super) fn take_full_writes(&mut self, path: &Path, from: u64) -> Vec<ChunkWrite> {
        let mut writes = Vec::new();
        for chunk in self.closed.iter_mut().filter(|c| !c.issued) {
            if chunk.position < from {
                break;
            }
            assert!(
                chunk.position + chunk.fill > self.issued || self.issued == u64::MAX,
                "a chunk handed out holds new bytes"
            );
            assert_eq!(
                chunk.fill % LOG_BLOCK_BYTES,
                0,
                "a full chunk is whole blocks"
            );
            chunk.issued = true;
            self.issued = chunk.position + chunk.fill;
            writes.push(ChunkWrite {
                path: path.to_path_buf(),
                position: chunk.position,
                data: chunk.data.clone(),
            });
        }
        writes
    }

    fn take(&mut self, path: &Path, reopen: bool) -> Vec<ChunkWrite> {
        let end = self.end();
        if self.issued == end {
            return Vec::new();
        }
        if let Some(open) = self.open.take_if(|open| open.len > 0) {
            let Open {
                position,
                mut memory,
                len,
            } = open;
            let padded = align_up(len as u64) as usize;
            memory.bytes_mut()[len..padded].fill(0);
            memory.truncate(padded);
            let hint = 2 * len as u64;
            let whole = align_down(len as u64) as usize;
            let partial = memory.bytes()[whole..len].to_vec();
            self.closed.push_back(Closed {
                position,
                data: Rc::from(memory),
                fill: len as u64,
                issued: false,
            });
            if reopen {
                self.open = Some(Open::new(position + whole as u64, &partial, 0, hint));
            }
        }
        let mut writes = Vec::new();
        for chunk in self.closed.iter_mut().filter(|c| !c.issued) {
            assert!(
                chunk.position + chunk.fill > self.issued || self.issued == u64::MAX,
                "a chunk handed out holds new bytes"
            );
            chunk.issued = true;
            writes.push(ChunkWrite {
                path: path.to_path_buf(),
                position: chunk.position,
                data: chunk.data.clone(),
            });
        }
        for pair in writes.windows(2) {
            assert!(
                pair[0].end() <= pair[1].position,
                "the writes of one flush never overlap"
            );
        }
        self.issued = end;
        writes
    }

    /// After the writes up to `written` completed: drops the chunks that end below the tail
    /// cache (the last [`LOG_TAIL_CACHE_BYTES`] written stay in memory).
    pub(super) fn written_up_to(&mut self, written: u64) {
        assert!(written <= self.issued);
        let keep_from = align_down(written).saturating_sub(LOG_TAIL_CACHE_BYTES);
        while let Some(front) = self.closed.front() {
            if !front.issued || front.position + front.fill > keep_from {
                break;
            }
            self.closed.pop_front();
        }
        self.start = match (self.closed.front(), &self.open) {
            (Some(front), _) => front.position,
            (None, Some(open)) => open.position,
            (None, None) => self.start,
        };
    }

    /// The chunk holding file byte `position` (at or past `start`): `(its first position, its
    /// bytes)`, the newest one where two hold it.
    fn chunk_at(&self, position: u64) -> (u64, &[u8]) {
        if let Some(open) = self.open.as_ref().filter(|o| o.position <= position) {
            return (open.position, &open.memory.bytes()[..open.len]);
        }
        let chunk = self
            .closed
            .iter()
            .rev()
            .find(|c| c.position <= position)
            .expect("the tail holds every byte from its start");
        (chunk.position, &chunk.data.bytes()[..chunk.fill as usize])
    }

    /// Copies file bytes at `position..` (at or past `start`) into `buf`.
    pub(super) fn read(&self, buf: &mut [u8], position: u64) {
        let mut done = 0;
        while done < buf.len() {
            let at = position + done as u64;
            let (from, bytes) = self.chunk_at(at);
            let bytes = &bytes[(at - from) as usize..];
            let n = bytes.len().min(buf.len() - done);
            assert!(n > 0, "the tail holds the bytes read from it");
            buf[done..done + n].copy_from_slice(&bytes[..n]);
            done += n;
        }
    }

    /// The tail's bytes from `position` (at or past `start`) to its end, as pieces
    /// `(file position, bytes)` in file order (for writes that are not flushes: a close).
    pub(super) fn pieces_from(&self, position: u64) -> Vec<(u64, &[u8])> {
        let mut pieces = Vec::new();
        let mut at = position;
        let end = self.end();
        while at < end {
            let (from, bytes) = self.chunk_at(at);
            let bytes = &bytes[(at - from) as usize..];
            pieces.push((at, bytes));
            at += bytes.len() as u64;
        }
        pieces
    }
}

impl<F> Segment<F> {
    /// A segment holding only its header: a new one, or one about to be scanned at recovery.
    pub(super) fn empty(
        base: u64,
        path: PathBuf,
        index_path: PathBuf,
        file: F,
        dirty: bool,
    ) -> Self {
        Segment {
            base_offset: base,
            path,
            index_path,
            file,
            size: HEADER_BYTES_U64,
            next_offset: base,
            max_timestamp: NO_TIMESTAMP,
            index: Vec::new(),
            first_append_ms: None,
            dirty,
            tail: Tail::none(),
            allocated: 0,
            zeroed: 0,
            cache: Vec::new(),
            file_reads: Cell::new(0),
        }
    }

    /// Zeros to write ahead of a block write of this segment that ends at `end` (block
    /// aligned), in the same flush ([`crate::storage::blocks::zero_ahead`]: the rule and why).
    pub(super) fn zero_ahead(&mut self, end: u64) -> Option<ZeroFill> {
        let (position, len) =
            crate::storage::blocks::zero_ahead(&mut self.zeroed, end, self.allocated)?;
        Some(ZeroFill {
            path: self.path.clone(),
            position,
            len,
        })
    }

    /// Reads segment bytes at `position` into `buf`: from the tail what it holds, then from
    /// the read cache, the rest from the file.
    pub(super) fn read_at(&self, buf: &mut [u8], position: u64) -> std::io::Result<()>
    where
        F: StorageFile,
    {
        let mut done = 0;
        while done < buf.len() {
            let at = position + done as u64;
            let rest = &mut buf[done..];
            if at >= self.tail.start {
                self.tail.read(rest, at);
                return Ok(());
            }
            let below_tail = (self.tail.start - at).min(rest.len() as u64);
            let n = match self.cache.iter().find(|c| c.position <= at && at < c.end()) {
                Some(chunk) => {
                    let n = (chunk.end() - at).min(below_tail) as usize;
                    let from = (at - chunk.position) as usize;
                    rest[..n].copy_from_slice(&chunk.data[from..from + n]);
                    n
                }
                None => {
                    let next = self
                        .cache
                        .iter()
                        .map(|c| c.position)
                        .find(|&p| p > at)
                        .unwrap_or(u64::MAX);
                    let n = below_tail.min(next - at) as usize;
                    self.file_reads.set(self.file_reads.get() + 1);
                    self.file.read_at(&mut rest[..n], at)?;
                    n
                }
            };
            assert!(n > 0, "a read makes progress");
            done += n;
        }
        Ok(())
    }

    /// The file bytes of `[from, to)` that neither the tail nor the read cache holds, as one
    /// block-aligned range (from the first byte missing to the last), or `None`.
    pub(super) fn missing(&self, from: u64, to: u64) -> Option<(u64, u64)> {
        let mut from = from;
        let mut to = to.min(self.tail.start);
        for chunk in &self.cache {
            if chunk.position <= from && from < chunk.end() {
                from = chunk.end();
            }
        }
        for chunk in self.cache.iter().rev() {
            if chunk.position < to && to <= chunk.end() {
                to = chunk.position;
            }
        }
        (from < to).then(|| (align_down(from), align_up(to).min(self.tail.start)))
    }

    /// Adds a chunk read ahead: file bytes `[position, position + len)` in `data`, below the
    /// tail. Chunks it overlaps are replaced.
    pub(super) fn add_chunk(&mut self, position: u64, len: u64, data: CachedBytes) {
        assert!(len as usize <= data.len(), "a chunk holds its bytes");
        assert!(
            position + len <= self.tail.start,
            "a chunk is below the tail"
        );
        let end = position + len;
        self.cache
            .retain(|c| c.end() <= position || c.position >= end);
        let at = self.cache.partition_point(|c| c.position < position);
        self.cache.insert(
            at,
            Chunk {
                position,
                len,
                data,
            },
        );
    }

    pub(super) fn cached_bytes(&self) -> u64 {
        self.cache.iter().map(|c| c.len).sum()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.next_offset == self.base_offset
    }

    /// Accounts for a frame at the end of the segment (append or recovery scan).
    pub(super) fn note_frame(&mut self, frame: &ScannedFrame, interval_bytes: u64) {
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

pub(super) fn segment_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}.log")
}

pub(super) fn index_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}.index")
}

/// A spare segment file (FORMAT.md §5): a removed segment's data file kept for a later roll,
/// named after the base offset it had.
pub(super) fn spare_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}.spare")
}

/// A producer snapshot (FORMAT.md §5): the partition's producer and transaction state below
/// `offset`, written and read by the shard (`crate::shard::producer_snapshot`); the log leaves
/// these files alone.
pub fn snapshot_file_name(offset: u64) -> String {
    format!("{offset:020}.snapshot")
}

/// The offset a producer snapshot's name gives.
pub fn parse_snapshot_name(name: &str) -> Option<u64> {
    parse_stem(name.strip_suffix(".snapshot")?)
}

/// `(base offset, is_index)` of a segment or index file name.
pub(super) fn parse_file_name(name: &str) -> Option<(u64, bool)> {
    let (stem, is_index) = if let Some(stem) = name.strip_suffix(".log") {
        (stem, false)
    } else {
        (name.strip_suffix(".index")?, true)
    };
    Some((parse_stem(stem)?, is_index))
}

/// The base offset a spare file's name gives.
pub(super) fn parse_spare_name(name: &str) -> Option<u64> {
    parse_stem(name.strip_suffix(".spare")?)
}

fn parse_stem(stem: &str) -> Option<u64> {
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// A frame found valid by [`scan_frames`].
#[derive(Clone, Copy, Debug)]
pub(super) struct ScannedFrame {
    pub(super) position: u64,
    pub(super) id: u64,
    pub(super) count: u32,
    pub(super) crc: u32,
    pub(super) total_bytes: u64,
    pub(super) max_timestamp: i64,
}

/// How [`scan_frames`] ended; positions are absolute.
#[derive(Clone, Debug)]
pub(super) enum ScanOutcome {
    Clean {
        valid_end: u64,
    },
    /// The last segment's frames end at `valid_end`, and whole blocks that are not the
    /// segment's follow, typically a reused file's earlier life (FORMAT.md §5): a clean end.
    Reused {
        valid_end: u64,
    },
    Torn {
        valid_end: u64,
        reason: String,
    },
    Corrupt {
        position: u64,
        reason: String,
    },
}

/// Checks that a frame holds what the log writes: kind 1, a valid batch whose base offset is
/// the frame id and whose record count is the frame count, at the expected offset.
pub(super) fn check_frame(
    meta: &FrameMeta,
    payload: &[u8],
    expected_id: u64,
) -> Result<BatchHeader, String> {
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
///
/// `last`: the scan is of a log's last segment from its header (`first_id` its base), whose
/// file may be a reused one (FORMAT.md §5): a valid frame with an id below `first_id` is
/// stale, left from the file's earlier life, and does not count as a frame that follows; the
/// end is then told by [`after_last_frame`] ([`ScanOutcome::Reused`]: a clean end). With
/// `durable` (the recorded durable position of an active segment, absolute), a bad frame at or
/// past it is a tail even if valid-looking frames follow: nothing from there on was ever
/// acknowledged as durable (FORMAT.md §4, rule 2').
pub(super) fn scan_frames(
    bytes: &[u8],
    start: usize,
    origin: u64,
    first_id: u64,
    durable: Option<u64>,
    last: bool,
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
                // A stale frame is itself part of what follows the end.
                let stale = last && f.meta.id < first_id;
                bad = Some((f.position, if stale { f.position } else { f.end() }, reason));
                break;
            }
        }
    }
    let rebase = |position: usize| origin + position as u64;
    let outcome = match (bad, scan.end()) {
        (Some((position, from, reason)), _) if last => {
            after_last_frame(bytes, origin, position, from, first_id, reason)
        }
        (Some((position, from, reason)), _) => match next_valid_frame(bytes, from) {
            Some(next) => ScanOutcome::Corrupt {
                position: rebase(position),
                reason: format!("{reason}; a valid frame follows at byte {}", rebase(next)),
            },
            None => ScanOutcome::Torn {
                valid_end: rebase(position),
                reason,
            },
        },
        (None, None) => unreachable!("the scan finished"),
        (None, Some(ScanEnd::Clean { valid_end })) => ScanOutcome::Clean {
            valid_end: rebase(valid_end),
        },
        (None, Some(end)) if last => {
            let position = end.valid_end();
            let reason = match end {
                ScanEnd::TornTail { error, .. } | ScanEnd::Corrupt { error, .. } => {
                    error.to_string()
                }
                ScanEnd::Clean { .. } => unreachable!("matched above"),
            };
            after_last_frame(
                bytes,
                origin,
                position,
                position + FRAME_ALIGN_BYTES,
                first_id,
                reason,
            )
        }
        (
            None,
            Some(ScanEnd::TornTail {
                valid_end, error, ..
            }),
        ) => ScanOutcome::Torn {
            valid_end: rebase(valid_end),
            reason: error.to_string(),
        },
        (
            None,
            Some(ScanEnd::Corrupt {
                position,
                error,
                next_valid,
            }),
        ) => ScanOutcome::Corrupt {
            position: rebase(position),
            reason: format!(
                "{error}; a valid frame follows at byte {}",
                rebase(next_valid)
            ),
        },
    };
    let outcome = match outcome {
        ScanOutcome::Corrupt { position, reason } if durable.is_some_and(|d| position >= d) => {
            let relative = (position - origin) as usize;
            let discarded = own_frames(bytes, relative + FRAME_ALIGN_BYTES, first_id);
            ScanOutcome::Torn {
                valid_end: position,
                reason: format!(
                    "{reason}; at or past the recorded durable position {} (never acknowledged \
                     as durable): cut, discarding {discarded} valid-looking frame(s) after it",
                    durable.expect("checked")
                ),
            }
        }
        other => other,
    };
    (frames, outcome)
}

/// For tools reading a log's last segment as recovery does (`bytes` its whole file, `base` its
/// base offset, `durable` the position `log-start.checkpoint` records for it): where its
/// frames end if what follows is a reused file's earlier life, a clean end (FORMAT.md §5).
pub fn reused_tail_start(bytes: &[u8], base: u64, durable: Option<u64>) -> Option<u64> {
    if bytes.len() < SEGMENT_HEADER_BYTES {
        return None;
    }
    match scan_frames(bytes, SEGMENT_HEADER_BYTES, 0, base, durable, true).1 {
        ScanOutcome::Reused { valid_end } => Some(valid_end),
        _ => None,
    }
}

/// How the last segment's scan ends at the bad frame at `position` (relative), given what
/// follows from `from` on (FORMAT.md §5): corruption if a frame of the segment's own follows;
/// else a torn tail if the rest of the end's block is not zeros (the segment's last block
/// write pads its block with zeros: nonzero bytes there are a torn write's); else a clean end,
/// [`ScanOutcome::Clean`] if only zeros follow, [`ScanOutcome::Reused`] if other bytes do
/// (whole blocks that are not the segment's: a reused file's earlier life, or blocks of a
/// torn write that holds no valid frame, which no later write can make valid).
fn after_last_frame(
    bytes: &[u8],
    origin: u64,
    position: usize,
    from: usize,
    base: u64,
    reason: String,
) -> ScanOutcome {
    let at = origin + position as u64;
    let block_end = ((align_up(at) - origin) as usize).min(bytes.len());
    match next_own_frame(bytes, from, base) {
        Some(next) => ScanOutcome::Corrupt {
            position: at,
            reason: format!(
                "{reason}; a valid frame follows at byte {}",
                origin + next as u64
            ),
        },
        None if bytes[position..block_end].iter().any(|&b| b != 0) => ScanOutcome::Torn {
            valid_end: at,
            reason,
        },
        None if bytes[block_end..].iter().all(|&b| b == 0) => ScanOutcome::Clean { valid_end: at },
        None => ScanOutcome::Reused { valid_end: at },
    }
}

/// The first valid frame at an aligned position at or after `from` whose id is at least
/// `base` (a frame of the segment's own), skipping stale frames (valid, id below `base`)
/// whole: no own frame starts inside a valid stale frame, since the block write that put it
/// there would have broken the stale frame's CRC.
pub(super) fn next_own_frame(bytes: &[u8], from: usize, base: u64) -> Option<usize> {
    let mut at = from;
    while let Some(next) = next_valid_frame(bytes, at) {
        let frame = frame::decode_frame(bytes, next).expect("a valid frame decodes");
        if frame.meta.id >= base {
            return Some(next);
        }
        at = frame.end();
    }
    None
}

/// Number of frames of the segment's own ([`next_own_frame`]) at or after `from`.
fn own_frames(bytes: &[u8], from: usize, base: u64) -> usize {
    let mut count = 0;
    let mut at = from;
    while let Some(next) = next_own_frame(bytes, at, base) {
        count += 1;
        at = next + FRAME_ALIGN_BYTES;
    }
    count
}

/// The header of a frame read back from a segment by [`read_frame_head`].
pub(super) struct FrameHead {
    pub(super) meta: FrameMeta,
    pub(super) crc: u32,
    /// Header bytes 4..24 (covered by the CRC with the payload).
    pub(super) covered: [u8; FRAME_HEADER_BYTES - 4],
    pub(super) payload_len: usize,
    pub(super) total_bytes: u64,
}

/// Reads and checks the header of the frame at `position` of a segment (its length within
/// the segment, its flags); the payload's CRC is checked by [`read_payload`].
pub(super) fn read_frame_head<F: StorageFile>(
    segment: &Segment<F>,
    position: u64,
) -> Result<FrameHead, LogError> {
    let path = &segment.path;
    let size = segment.size;
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
    let mut header = [0u8; FRAME_HEADER_BYTES];
    segment
        .read_at(&mut header, position)
        .map_err(io_err("read", path))?;
    let le32 = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    if header.iter().all(|&b| b == 0) {
        return Err(corrupt("zero frame header inside the segment".into()));
    }
    let len = le32(4) as usize;
    if len == 0 || len > FRAME_PAYLOAD_BYTES_MAX {
        return Err(corrupt(format!("invalid frame length {len}")));
    }
    let flags = u16::from_le_bytes([header[18], header[19]]);
    if flags != 0 {
        return Err(corrupt(format!("frame flags {flags:#x} are not zero")));
    }
    let need = (FRAME_HEADER_BYTES + len) as u64;
    if position + need > size {
        return Err(corrupt(format!(
            "frame of {need} bytes runs past the segment end at {size}"
        )));
    }
    Ok(FrameHead {
        meta: FrameMeta {
            id: u64::from_le_bytes(header[8..16].try_into().expect("8 bytes")),
            kind: u16::from_le_bytes([header[16], header[17]]),
            count: le32(20),
        },
        crc: le32(0),
        covered: header[4..].try_into().expect("20 bytes"),
        payload_len: len,
        total_bytes: frame_total_bytes(len) as u64,
    })
}

/// Appends the payload of the frame `head` at `position` to `out`, once its CRC checks
/// (one copy: from the tail, the read cache or the file straight into `out`).
pub(super) fn read_payload<F: StorageFile>(
    segment: &Segment<F>,
    position: u64,
    head: &FrameHead,
    out: &mut Vec<u8>,
) -> Result<(), LogError> {
    let start = out.len();
    out.resize(start + head.payload_len, 0);
    let result = segment
        .read_at(&mut out[start..], position + FRAME_HEADER_BYTES as u64)
        .map_err(io_err("read", &segment.path))
        .and_then(|()| {
            let mut crc = crc32fast::Hasher::new();
            crc.update(&head.covered);
            crc.update(&out[start..]);
            let computed = crc.finalize();
            if computed == head.crc {
                Ok(())
            } else {
                Err(LogError::Corrupt {
                    path: segment.path.clone(),
                    position,
                    reason: format!(
                        "frame CRC mismatch: stored {:#010x}, computed {computed:#010x}",
                        head.crc
                    ),
                })
            }
        });
    if result.is_err() {
        out.truncate(start);
    }
    result
}
