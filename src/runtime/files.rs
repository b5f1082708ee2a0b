//! The shard's storage engine on io_uring: the block writes and the durable flushes a
//! [`FlushTicket`] names, and the state journal's flushes (one [`BlockWrite`] each).
//!
//! - Segment tails are written without a copy ([`write_chunk`]): on a shard thread a tail lives in
//!   chunks of DMA buffers ([`use_dma_blocks`], glommio's aligned heap buffers, the
//!   [`crate::storage::blocks`] allocator of the thread), and a flush ticket's [`ChunkWrite`]
//!   is one `O_DIRECT` write of such a buffer, shared (`Rc`) with the tail, which never mutates
//!   it again. Memory allocated off a shard (heap) is copied into a DMA buffer first. A
//!   segment's chunk writes go one after the other, each durable before the next, unless the
//!   ticket allows any order (`write_chunks_together`: issued together through a plain
//!   `O_DIRECT` handle, then one `fdatasync`).
//! - Write-behinds ([`write_behind`]): full tail chunks written ahead of the flush, concurrently,
//!   through a plain `O_DIRECT` handle per segment (no `O_DSYNC`, cached in its own map, as are
//!   a ticket's chunks written together), not synced: the next ticket `fdatasync`s the segment.
//! - Other block writes (the checkpoint's slot, journal tails, block-aligned) go through
//!   glommio DMA files: `O_DIRECT` writes copied into aligned buffers
//!   (`DmaFile::alloc_dma_buffer`: the shard's registered io memory while it lasts, aligned
//!   heap memory beyond). Durability per [`SyncMode`]: `O_DSYNC` on
//!   the handle (the write completes once durable: FUA or a device flush, and no file
//!   metadata changes since segments are preallocated), or a write and an `fdatasync`.
//!   Handles stay open in a per-shard cache keyed by path (opening a segment in a directory
//!   closes the handles of that directory's other segments, files of the same extension: a
//!   roll seals the old one; a log's checkpoint keeps its own handle; at most
//!   [`ENGINE_OPEN_FILES_MAX`] handles, least recently written closed first; on every open,
//!   handles of files that no longer exist are closed, so a deleted segment's space is freed).
//!   A write that is not block-aligned is written buffered and `fdatasync`ed instead.
//! - `fdatasync` of the files a ticket names (segments sealed with `pwrite`) and `fsync` of the
//!   directories a ticket names, using glommio file handles opened on the same paths
//!   (`fdatasync` acts on the inode, so a second descriptor flushes what the log
//!   wrote); file handles are cached the same way, in their own map.
//!
//! - Reads ahead ([`read_ahead`]): the parts of segment files an op (Fetch, ShareFetch, a DLQ
//!   copy) is about to read, `O_DIRECT` through io_uring into aligned buffers that the logs
//!   then keep (shared, no copy) until their reads copy the payloads into an answer. Read
//!   handles are cached in a third map (read-only, no `O_DSYNC`); a file system without
//!   `O_DIRECT` gets no read-ahead (the log's `pread` serves it). Which logs keep read-ahead
//!   bytes is the shard core's policy (`shard::read_ahead`).
//!
//! - Zero fills ahead of a segment's tail ([`ZeroFill`]): `O_DIRECT` writes of one shared
//!   buffer of zeros per shard (never modified, never reallocated), durable like block writes.
//! - The seal of a rolled segment (a ticket's [`Seal`]): the segment's last chunks written
//!   (`O_DIRECT`, like a flush's), the file cut to its frames, then `fdatasync` of the segment,
//!   its index written and `fdatasync`ed, `fsync` of the directory, before the rest of the
//!   ticket.
//!
//! - The allocator ([`tune_allocator`]): a flush's write (several MiB under load) and its DMA
//!   copy are allocated per flush; glibc would map each afresh and unmap it on free, so every
//!   flush faulted in fresh pages (measured: more than half the group-commit CPU time in the
//!   kernel, page faults and unmapping). The broker raises glibc's mmap and trim thresholds
//!   once at start, so freed buffers stay resident and are reused.
//!
//! Everything else of one ticket runs concurrently; the first error is returned with its path.
//! A file system without `O_DIRECT` (tmpfs) gets buffered writes and `fdatasync` instead.

use crate::constants::{
    ENGINE_MALLOC_MMAP_THRESHOLD_BYTES, ENGINE_MALLOC_TRIM_THRESHOLD_BYTES, ENGINE_OPEN_FILES_MAX,
    LOG_BLOCK_BYTES, LOG_ZERO_FILL_BYTES,
};
use crate::log::{
    BlockWrite, CachedBytes, ChunkWrite, FlushTicket, ReadAhead, Seal, WriteBehind, ZeroFill,
};
use crate::shard::join::join_all;
use crate::storage::blocks::{self, BlockMemory};
use glommio::io::{BufferedFile, Directory, DmaBuffer, DmaFile, OpenOptions};
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;

fn with_path(path: &Path, error: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{}: {error}", path.display()))
}

/// Raises glibc's mmap and trim thresholds ([`ENGINE_MALLOC_MMAP_THRESHOLD_BYTES`],
/// [`ENGINE_MALLOC_TRIM_THRESHOLD_BYTES`]) for the whole process: large per-flush buffers then
/// come from the allocator's heaps and their pages stay resident between flushes. Called once
/// before the shards start (idempotent). Other C libraries: nothing to do.
/// `LOCKSTEP_ENGINE_MALLOC=default` leaves glibc's defaults (for measuring one against the other).
/// Also turns on full tail chunks in huge pages ([`crate::runtime::huge_chunks`]; not with
/// `LOCKSTEP_ENGINE_HUGEPAGES=off`, for measuring one against the other).
pub fn tune_allocator() {
    if std::env::var("LOCKSTEP_ENGINE_HUGEPAGES").as_deref() != Ok("off") {
        crate::runtime::huge_chunks::enable();
    }
    if std::env::var("LOCKSTEP_ENGINE_MALLOC").as_deref() == Ok("default") {
        return;
    }
    #[cfg(target_env = "gnu")]
    {
        let mmap = i32::try_from(ENGINE_MALLOC_MMAP_THRESHOLD_BYTES).expect("fits an int");
        let trim = i32::try_from(ENGINE_MALLOC_TRIM_THRESHOLD_BYTES).expect("fits an int");
        // SAFETY: mallopt only changes allocator parameters; no memory is passed.
        let ok = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, trim) == 1
        };
        if !ok {
            tracing::warn!(
                "mallopt refused the engine's thresholds; flush buffers are mapped per flush"
            );
        }
    }
}

/// A segment tail's block memory on a shard: a glommio DMA buffer (aligned heap memory, kept as
/// long as the tail keeps the chunk), written `O_DIRECT` as it is ([`write_chunk`]). Shared
/// with a write in flight through the `Rc`; mutated only while unshared (asserted).
struct DmaBlocks(Rc<DmaBuffer>);

impl BlockMemory for DmaBlocks {
    fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        Rc::get_mut(&mut self.0)
            .expect("block memory is not mutated while a write holds it")
            .as_bytes_mut()
    }
    fn truncate(&mut self, len: usize) {
        Rc::get_mut(&mut self.0)
            .expect("block memory is not mutated while a write holds it")
            .trim_to_size(len);
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn dma_blocks(len: usize) -> Box<dyn BlockMemory> {
    Box::new(DmaBlocks(Rc::new(glommio::allocate_dma_buffer_global(len))))
}

/// Makes this (shard) thread's segment tails live in DMA buffers the engine writes without a
/// copy ([`crate::storage::blocks`]). Called once at the start of each shard thread.
pub fn use_dma_blocks() {
    blocks::set_thread_allocator(dma_blocks);
}

/// How a block write is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// The handle is opened `O_DSYNC`: each write completes durable.
    Dsync,
    /// A plain `O_DIRECT` write, then `fdatasync` of the file.
    Fdatasync,
}

/// The default [`SyncMode`]; `LOCKSTEP_ENGINE_SYNC=fdatasync|dsync` overrides it (for
/// measuring one against the other).
pub const SYNC_MODE_DEFAULT: SyncMode = SyncMode::Dsync;

fn sync_mode() -> SyncMode {
    match std::env::var("LOCKSTEP_ENGINE_SYNC").as_deref() {
        Ok("fdatasync") => SyncMode::Fdatasync,
        Ok("dsync") => SyncMode::Dsync,
        _ => SYNC_MODE_DEFAULT,
    }
}

/// How the state journal is flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalFlush {
    /// The default: the segment is mapped private and each flush is one block write
    /// ([`write_block`], `O_DIRECT` with the [`SyncMode`]).
    Blocks,
    /// `LOCKSTEP_JOURNAL_FLUSH=fdatasync`: the segment is mapped shared and each flush is an
    /// `fdatasync` of the file through io_uring (the page cache's writeback; the journal's flush
    /// before block writes). For measuring one against the other.
    Fdatasync,
}

/// The journal's [`JournalFlush`] (from the environment, read once per process).
pub fn journal_flush() -> JournalFlush {
    static MODE: std::sync::OnceLock<JournalFlush> = std::sync::OnceLock::new();
    *MODE.get_or_init(
        || match std::env::var("LOCKSTEP_JOURNAL_FLUSH").as_deref() {
            Ok("fdatasync") => JournalFlush::Fdatasync,
            _ => JournalFlush::Blocks,
        },
    )
}

/// The seal of a rolled journal segment ([`crate::journal::JournalSeal`]): its last blocks
/// written durably (with shared maps: `fdatasync` of it) and the new segment's file synced,
/// concurrently; then the directory synced. Before anything is written into the new segment.
async fn seal_journal_segment(seal: &crate::journal::JournalSeal) -> io::Result<()> {
    let mut steps: Vec<Step<'_>> = vec![Box::pin(sync_file(&seal.next))];
    match (journal_flush(), &seal.write) {
        (JournalFlush::Blocks, Some(write)) => steps.push(Box::pin(write_block(write))),
        (JournalFlush::Blocks, None) => {}
        (JournalFlush::Fdatasync, _) => steps.push(Box::pin(sync_file(&seal.segment))),
    }
    join_all(steps)
        .await
        .into_iter()
        .collect::<io::Result<Vec<()>>>()?;
    sync_dir(&seal.dir).await
}

/// Whether the journal's flushes write the zeros their tickets ask for
/// (`LOCKSTEP_JOURNAL_ZEROS=off`: not, for measuring one against the other; read once).
pub fn journal_zeros() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_JOURNAL_ZEROS").as_deref() != Ok("off"))
}

/// One durable flush of the state journal, as [`journal_flush`] says: the block write and,
/// concurrently (disjoint bytes), the zeros written ahead of it. With a shared map
/// ([`JournalFlush::Fdatasync`]) no zeros are written: an `O_DIRECT` write would race the
/// map's dirty pages.
pub async fn flush_journal(ticket: &crate::journal::FlushTicket) -> io::Result<()> {
    if let Some(seal) = &ticket.seal {
        seal_journal_segment(seal).await?;
    }
    match journal_flush() {
        JournalFlush::Blocks => match ticket.zero_fill.as_ref().filter(|_| journal_zeros()) {
            Some(fill) => {
                let steps: Vec<Step<'_>> = vec![
                    Box::pin(write_block(&ticket.write)),
                    Box::pin(write_zeros(fill)),
                ];
                join_all(steps)
                    .await
                    .into_iter()
                    .collect::<io::Result<Vec<()>>>()
                    .map(|_| ())
            }
            None => write_block(&ticket.write).await,
        },
        JournalFlush::Fdatasync => sync_file(&ticket.path).await,
    }
}

#[derive(Clone)]
enum Handle {
    Dma(Rc<DmaFile>),
    /// The file system refused `O_DIRECT`.
    Buffered(Rc<BufferedFile>),
}

struct Engine {
    mode: SyncMode,
    /// Block-write handles.
    files: HashMap<PathBuf, (Handle, u64)>,
    /// `fdatasync` handles.
    syncs: HashMap<PathBuf, (Rc<BufferedFile>, u64)>,
    /// Read-ahead handles (`None`: the file system refused `O_DIRECT`).
    reads: HashMap<PathBuf, (Option<Rc<DmaFile>>, u64)>,
    /// Plain `O_DIRECT` handles (no `O_DSYNC`) for writes a later `fdatasync` makes durable
    /// (`None`: the file system refused `O_DIRECT`).
    plain: HashMap<PathBuf, (Option<Rc<DmaFile>>, u64)>,
    clock: u64,
}

/// Inserts into a handle cache, closing first the handles of files that no longer exist,
/// those `evict` names, and the least recently used one if the cache is full.
fn insert<H>(
    map: &mut HashMap<PathBuf, (H, u64)>,
    clock: &mut u64,
    path: &Path,
    handle: H,
    evict: impl Fn(&Path) -> bool,
) {
    map.retain(|other, _| !evict(other) && other.exists());
    if map.len() >= ENGINE_OPEN_FILES_MAX {
        let oldest = map
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(p, _)| p.clone());
        if let Some(oldest) = oldest {
            map.remove(&oldest);
        }
    }
    *clock += 1;
    map.insert(path.to_path_buf(), (handle, *clock));
}

thread_local! {
    /// One engine per shard thread (glommio executors are thread-per-core).
    static ENGINE: RefCell<Engine> = RefCell::new(Engine {
        mode: sync_mode(),
        files: HashMap::new(),
        syncs: HashMap::new(),
        reads: HashMap::new(),
        plain: HashMap::new(),
        clock: 0,
    });
}

fn cached(path: &Path) -> Option<(Handle, SyncMode)> {
    ENGINE.with(|engine| {
        let mut engine = engine.borrow_mut();
        engine.clock += 1;
        let now = engine.clock;
        let mode = engine.mode;
        engine.files.get_mut(path).map(|(handle, used)| {
            *used = now;
            (handle.clone(), mode)
        })
    })
}

async fn handle(path: &Path) -> io::Result<(Handle, SyncMode)> {
    if let Some(found) = cached(path) {
        return Ok(found);
    }
    let mode = ENGINE.with(|engine| engine.borrow().mode);
    let flags = match mode {
        SyncMode::Dsync => libc::O_DSYNC,
        SyncMode::Fdatasync => 0,
    };
    let handle = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .dma_open(path)
        .await
    {
        Ok(file) => Handle::Dma(Rc::new(file)),
        Err(dma_error) => {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .buffered_open(path)
                .await
                .map_err(|e| with_path(path, format!("{e} (O_DIRECT open: {dma_error})")))?;
            Handle::Buffered(Rc::new(file))
        }
    };
    ENGINE.with(|engine| {
        let engine = &mut *engine.borrow_mut();
        let dir = path.parent();
        let kind = path.extension();
        insert(
            &mut engine.files,
            &mut engine.clock,
            path,
            handle.clone(),
            |other| other.parent() == dir && other.extension() == kind,
        );
    });
    Ok((handle, mode))
}

/// Drops the engine's handles of `path` (after an error: the next use reopens it).
fn forget(path: &Path) {
    ENGINE.with(|engine| {
        let mut engine = engine.borrow_mut();
        engine.files.remove(path);
        engine.syncs.remove(path);
        engine.reads.remove(path);
        engine.plain.remove(path);
    });
}

async fn sync_handle(path: &Path) -> io::Result<Rc<BufferedFile>> {
    let found = ENGINE.with(|engine| {
        let engine = &mut *engine.borrow_mut();
        engine.clock += 1;
        let now = engine.clock;
        engine.syncs.get_mut(path).map(|(file, used)| {
            *used = now;
            file.clone()
        })
    });
    if let Some(file) = found {
        return Ok(file);
    }
    let file = Rc::new(
        BufferedFile::open(path)
            .await
            .map_err(|e| with_path(path, e))?,
    );
    ENGINE.with(|engine| {
        let engine = &mut *engine.borrow_mut();
        insert(
            &mut engine.syncs,
            &mut engine.clock,
            path,
            file.clone(),
            |_| false,
        );
    });
    Ok(file)
}

/// A write `O_DIRECT` cannot take (not block-aligned: a journal segment whose size is not a
/// whole number of blocks): buffered, then `fdatasync`, on a handle of its own.
async fn write_unaligned(write: &BlockWrite) -> io::Result<()> {
    write_buffered_synced(&write.path, write.data.clone(), write.position).await
}

/// Writes `bytes` at `position` through the page cache on a handle of its own, `fdatasync`s and
/// closes it.
async fn write_buffered_synced(path: &Path, bytes: Vec<u8>, position: u64) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .buffered_open(path)
        .await
        .map_err(|e| with_path(path, e))?;
    let len = bytes.len();
    let written = file
        .write_at(bytes, position)
        .await
        .map_err(|e| with_path(path, e))?;
    let result = if written != len {
        Err(with_path(
            path,
            format!("short write: {written} of {len} bytes"),
        ))
    } else {
        file.fdatasync().await.map_err(|e| with_path(path, e))
    };
    let closed = file.close().await.map_err(|e| with_path(path, e));
    result.and(closed)
}

fn block_aligned(write: &BlockWrite) -> bool {
    let block = LOG_BLOCK_BYTES;
    write.position % block == 0 && (write.data.len() as u64) % block == 0
}

/// One block write, durable on return.
pub async fn write_block(write: &BlockWrite) -> io::Result<()> {
    let path = &write.path;
    let (handle, mode) = handle(path).await?;
    let len = write.data.len();
    let result = match &handle {
        Handle::Dma(_) if !block_aligned(write) => write_unaligned(write).await,
        Handle::Dma(file) => {
            let mut buffer = file.alloc_dma_buffer(len);
            buffer.as_bytes_mut()[..len].copy_from_slice(&write.data);
            let written = file
                .write_at(buffer, write.position)
                .await
                .map_err(|e| with_path(path, e))?;
            if written != len {
                Err(with_path(
                    path,
                    format!("short block write: {written} of {len} bytes"),
                ))
            } else if mode == SyncMode::Fdatasync {
                file.fdatasync().await.map_err(|e| with_path(path, e))
            } else {
                Ok(())
            }
        }
        Handle::Buffered(file) => {
            let written = file
                .write_at(write.data.clone(), write.position)
                .await
                .map_err(|e| with_path(path, e))?;
            if written != len {
                Err(with_path(
                    path,
                    format!("short write: {written} of {len} bytes"),
                ))
            } else {
                file.fdatasync().await.map_err(|e| with_path(path, e))
            }
        }
    };
    if result.is_err() {
        forget(path);
    }
    result
}

/// One chunk of a segment's tail, durable on return: its DMA buffer written as it is (no
/// copy), or, for memory that is not the engine's (allocated off a shard thread) or a file
/// without `O_DIRECT`, through [`write_block`] (a copy).
pub async fn write_chunk(write: &ChunkWrite) -> io::Result<()> {
    let path = &write.path;
    let dma = write
        .data
        .as_any()
        .downcast_ref::<DmaBlocks>()
        .map(|blocks| blocks.0.clone());
    let (handle, mode) = handle(path).await?;
    let (Some(buffer), Handle::Dma(file)) = (dma, &handle) else {
        return write_block(&BlockWrite {
            path: path.clone(),
            position: write.position,
            data: write.bytes().to_vec(),
        })
        .await;
    };
    let len = buffer.len();
    let result = match file.write_rc_at(buffer, write.position).await {
        Err(e) => Err(with_path(path, e)),
        Ok(written) if written != len => Err(with_path(
            path,
            format!("short chunk write: {written} of {len} bytes"),
        )),
        Ok(_) if mode == SyncMode::Fdatasync => {
            file.fdatasync().await.map_err(|e| with_path(path, e))
        }
        Ok(_) => Ok(()),
    };
    if result.is_err() {
        forget(path);
    }
    result
}

/// The chunk writes of one segment, one after the other in file order, each durable before the
/// next starts: a crash tears only the last one issued (a torn tail), never leaves a hole with
/// written bytes after it (concurrent writes could land in any order).
async fn write_chunks_in_order(writes: &[ChunkWrite]) -> io::Result<()> {
    for write in writes {
        write_chunk(write).await?;
    }
    Ok(())
}

/// A plain `O_DIRECT` handle of `path` (no `O_DSYNC`: a write completes once the device took
/// it, and an `fdatasync` makes it durable), cached like the block-write handles. `None` if the
/// file system refuses `O_DIRECT`.
async fn plain_handle(path: &Path) -> Option<Rc<DmaFile>> {
    let found = ENGINE.with(|engine| {
        let engine = &mut *engine.borrow_mut();
        engine.clock += 1;
        let now = engine.clock;
        engine.plain.get_mut(path).map(|(file, used)| {
            *used = now;
            file.clone()
        })
    });
    if let Some(file) = found {
        return file;
    }
    let file = OpenOptions::new()
        .write(true)
        .dma_open(path)
        .await
        .ok()
        .map(Rc::new);
    ENGINE.with(|engine| {
        let engine = &mut *engine.borrow_mut();
        let (dir, kind) = (path.parent(), path.extension());
        insert(
            &mut engine.plain,
            &mut engine.clock,
            path,
            file.clone(),
            |other| other.parent() == dir && other.extension() == kind,
        );
    });
    file
}

/// The chunk writes of one segment, concurrently, through its plain handle ([`plain_handle`]),
/// not synced: the handle, for the `fdatasync` that makes them durable. `None` if they cannot go
/// that way (memory that is not the engine's, or no `O_DIRECT`).
async fn write_chunks_plain(writes: &[ChunkWrite]) -> Option<io::Result<Rc<DmaFile>>> {
    let path = &writes.first()?.path;
    let buffers: Vec<Rc<DmaBuffer>> = writes
        .iter()
        .map(|w| {
            assert_eq!(&w.path, path, "one segment's chunks");
            let blocks = w.data.as_any().downcast_ref::<DmaBlocks>()?;
            Some(blocks.0.clone())
        })
        .collect::<Option<_>>()?;
    let file = plain_handle(path).await?;
    let steps: Vec<Step<'_>> = writes
        .iter()
        .zip(buffers)
        .map(|(write, buffer)| {
            let file = &file;
            Box::pin(async move {
                let len = buffer.len();
                match file.write_rc_at(buffer, write.position).await {
                    Err(e) => Err(with_path(path, e)),
                    Ok(written) if written != len => Err(with_path(
                        path,
                        format!("short chunk write: {written} of {len} bytes"),
                    )),
                    Ok(_) => Ok(()),
                }
            }) as Step<'_>
        })
        .collect();
    let written = join_all(steps)
        .await
        .into_iter()
        .collect::<io::Result<Vec<()>>>();
    if written.is_err() {
        forget(path);
    }
    Some(written.map(|_| file))
}

/// The chunk writes of one segment issued together, then one `fdatasync`
/// ([`FlushTicket::chunks_any_order`]: a crash may keep any subset of them), through the
/// segment's plain handle (the block-write handle may be `O_DSYNC`: a device flush per write).
/// Without `O_DIRECT` or DMA chunks: in order, as [`write_chunks_in_order`].
async fn write_chunks_together(writes: &[ChunkWrite]) -> io::Result<()> {
    let Some(written) = write_chunks_plain(writes).await else {
        return write_chunks_in_order(writes).await;
    };
    let path = &writes[0].path;
    let result = match written {
        Ok(file) => file.fdatasync().await.map_err(|e| with_path(path, e)),
        Err(e) => Err(e),
    };
    if result.is_err() {
        forget(path);
    }
    result
}

/// Cuts a sealed segment's file to `len` bytes (its preallocated zeros go).
async fn truncate(path: &Path, len: u64) -> io::Result<()> {
    let (handle, _) = handle(path).await?;
    let result = match &handle {
        Handle::Dma(file) => file.truncate(len).await.map_err(|e| with_path(path, e)),
        Handle::Buffered(file) => file.truncate(len).await.map_err(|e| with_path(path, e)),
    };
    if result.is_err() {
        forget(path);
    }
    result
}

thread_local! {
    /// One buffer of [`LOG_ZERO_FILL_BYTES`] zeros per shard, written again and again (never
    /// modified): a zero fill allocates nothing.
    static ZEROS: RefCell<Option<Rc<DmaBuffer>>> = const { RefCell::new(None) };
}

/// Writes zeros over a segment's preallocated bytes, durable on return ([`ZeroFill`]).
pub async fn write_zeros(fill: &ZeroFill) -> io::Result<()> {
    let path = &fill.path;
    let (handle, mode) = handle(path).await?;
    let len = usize::try_from(fill.len).map_err(|e| with_path(path, e))?;
    let result = match &handle {
        Handle::Dma(file)
            if fill.position % LOG_BLOCK_BYTES == 0 && fill.len % LOG_BLOCK_BYTES == 0 =>
        {
            let written = if fill.len == LOG_ZERO_FILL_BYTES {
                let zeros = ZEROS.with(|z| {
                    z.borrow_mut()
                        .get_or_insert_with(|| {
                            let mut buffer = file.alloc_dma_buffer(len);
                            buffer.as_bytes_mut().fill(0);
                            Rc::new(buffer)
                        })
                        .clone()
                });
                file.write_rc_at(zeros, fill.position).await
            } else {
                let mut buffer = file.alloc_dma_buffer(len);
                buffer.as_bytes_mut().fill(0);
                file.write_at(buffer, fill.position).await
            }
            .map_err(|e| with_path(path, e))?;
            if written != len {
                Err(with_path(
                    path,
                    format!("short zero fill: {written} of {len} bytes"),
                ))
            } else if mode == SyncMode::Fdatasync {
                file.fdatasync().await.map_err(|e| with_path(path, e))
            } else {
                Ok(())
            }
        }
        _ => {
            write_block(&BlockWrite {
                path: path.clone(),
                position: fill.position,
                data: vec![0; len],
            })
            .await
        }
    };
    if result.is_err() {
        forget(path);
    }
    result
}

/// `fdatasync` of one file (written with `pwrite`).
pub async fn sync_file(path: &Path) -> io::Result<()> {
    let file = sync_handle(path).await?;
    let result = file.fdatasync().await.map_err(|e| with_path(path, e));
    if result.is_err() {
        forget(path);
    }
    result
}

async fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = Directory::open(path)
        .await
        .map_err(|e| with_path(path, e))?;
    let result = dir.sync().await.map_err(|e| with_path(path, e));
    let closed = dir.close().await.map_err(|e| with_path(path, e));
    result.and(closed)
}

async fn read_handle(path: &Path) -> Option<Rc<DmaFile>> {
    let found = ENGINE.with(|engine| {
        let engine = &mut *engine.borrow_mut();
        engine.clock += 1;
        let now = engine.clock;
        engine.reads.get_mut(path).map(|(file, used)| {
            *used = now;
            file.clone()
        })
    });
    if let Some(file) = found {
        return file;
    }
    let file = DmaFile::open(path).await.ok().map(Rc::new);
    ENGINE.with(|engine| {
        let engine = &mut *engine.borrow_mut();
        insert(
            &mut engine.reads,
            &mut engine.clock,
            path,
            file.clone(),
            |_| false,
        );
    });
    file
}

/// Reads `ahead` (block aligned) through io_uring, `O_DIRECT`: the bytes read (fewer at the
/// file's end) and the buffer holding them. `None` if the file cannot be read that way (no
/// `O_DIRECT`, gone, an error): the log reads it with `pread` instead.
pub async fn read_ahead(ahead: &ReadAhead) -> Option<(u64, CachedBytes)> {
    let file = read_handle(&ahead.path).await?;
    let len = usize::try_from(ahead.len).ok()?;
    match file.read_at_aligned(ahead.position, len).await {
        Ok(read) => {
            let n = read.len() as u64;
            Some((n, Rc::new(read) as CachedBytes))
        }
        Err(error) => {
            tracing::debug!(file = %ahead.path.display(), %error, "read-ahead failed");
            forget(&ahead.path);
            None
        }
    }
}

type Step<'a> = Pin<Box<dyn Future<Output = io::Result<()>> + 'a>>;

/// False if `LOCKSTEP_LOG_WRITE_BEHIND=off` (read once per process): produce then leaves every
/// tail chunk to the flush, as before write-behinds (for measuring one against the other).
pub fn writes_behind() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_LOG_WRITE_BEHIND").as_deref() != Ok("off"))
}

/// A [`WriteBehind`]'s chunks, concurrently, through the segment's plain handle, not synced
/// (the next flush ticket syncs the file). Memory that is not the engine's or a file without
/// `O_DIRECT`: each written durably instead ([`write_chunk`]).
pub async fn write_behind(write: &WriteBehind) -> io::Result<()> {
    if let Some(written) = write_chunks_plain(&write.chunks).await {
        return written.map(|_| ());
    }
    let steps: Vec<Step<'_>> = write
        .chunks
        .iter()
        .map(|chunk| Box::pin(write_chunk(chunk)) as Step<'_>)
        .collect();
    join_all(steps)
        .await
        .into_iter()
        .collect::<io::Result<Vec<()>>>()?;
    Ok(())
}

/// Writes a sealed segment's index into its (empty) file and `fdatasync`s it.
async fn write_index(seal: &Seal) -> io::Result<()> {
    write_buffered_synced(&seal.index, seal.index_bytes.clone(), 0).await
}

/// Performs every write and sync of `ticket`; `Ok` only if all succeeded. A seal first (its
/// steps concurrently, then its `then` writes one after the other), then everything else
/// concurrently.
pub async fn sync_ticket(ticket: &FlushTicket) -> io::Result<()> {
    if let Some(seal) = &ticket.seal {
        write_chunks_in_order(&seal.writes).await?;
        truncate(&seal.segment, seal.len).await?;
        let steps: Vec<Step<'_>> = vec![
            Box::pin(sync_file(&seal.segment)),
            Box::pin(write_index(seal)),
            Box::pin(sync_dir(&seal.dir)),
        ];
        join_all(steps)
            .await
            .into_iter()
            .collect::<io::Result<Vec<()>>>()?;
        for write in &seal.then {
            write_block(write).await?;
        }
    }
    let mut steps: Vec<Step<'_>> = Vec::new();
    let mut chunks = ticket.chunks.as_slice();
    while let Some(first) = chunks.first() {
        let same = chunks.iter().take_while(|c| c.path == first.path).count();
        if ticket.chunks_any_order && same > 1 {
            steps.push(Box::pin(write_chunks_together(&chunks[..same])));
        } else {
            steps.push(Box::pin(write_chunks_in_order(&chunks[..same])));
        }
        chunks = &chunks[same..];
    }
    for write in &ticket.writes {
        steps.push(Box::pin(write_block(write)));
    }
    for fill in &ticket.zero_fills {
        steps.push(Box::pin(write_zeros(fill)));
    }
    for file in &ticket.files {
        steps.push(Box::pin(sync_file(file)));
    }
    for dir in &ticket.dirs {
        steps.push(Box::pin(sync_dir(dir)));
    }
    join_all(steps)
        .await
        .into_iter()
        .collect::<io::Result<Vec<()>>>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The journal's flushes through the engine on real files: zeros ahead and the seals of
    //! rolls (`JournalSeal`) written by io_uring, then recovery reads back every entry.
    use super::*;
    use crate::journal::entries::{Entry, SharePartitionState};
    use crate::journal::{Journal, JournalConfig};
    use crate::storage::mmap::MmapDir;

    fn entry(i: u32) -> Entry {
        Entry::SharePartitionUpdate(SharePartitionState {
            group_id: format!("group-{i}"),
            topic_id: [3; 16],
            partition: 0,
            start_offset: Some(i64::from(i)),
            end_offset: None,
            state_epoch: 0,
            runs: Vec::new(),
        })
    }

    #[test]
    fn journal_rolls_are_sealed_by_the_engine() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().to_path_buf();
        let config = JournalConfig {
            segment_bytes: 16 * 1024,
            snapshot_chunk_bytes: 64,
        };
        let count = 600u32;
        let (seals, fills) = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn({
                let path = path.clone();
                let config = config.clone();
                move || async move {
                    let dir = MmapDir::open(&path).unwrap();
                    let (mut journal, _) = Journal::open(dir, config).unwrap();
                    let (mut seals, mut fills) = (0, 0);
                    for i in 0..count {
                        journal.append_entry(&entry(i)).unwrap();
                        if i % 7 == 6 || i + 1 == count {
                            let ticket = journal.begin_flush().unwrap().unwrap();
                            seals += u32::from(ticket.seal.is_some());
                            fills += u32::from(ticket.zero_fill.is_some());
                            let result = flush_journal(&ticket).await;
                            journal.complete_flush(ticket, result).unwrap();
                        }
                    }
                    assert_eq!(journal.durable_end(), u64::from(count));
                    (seals, fills)
                }
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(seals >= 3, "{seals} seals");
        assert!(fills >= 1, "{fills} zero fills");
        let dir = MmapDir::open(&path).unwrap();
        let (journal, recovered) = Journal::open(dir, config).unwrap();
        assert_eq!(recovered.report.next_seq, u64::from(count));
        assert_eq!(recovered.report.removed_unsealed, None);
        assert_eq!(recovered.report.truncated, None);
        assert_eq!(journal.segment_paths().len() as u32, seals + 1);
        for (i, e) in recovered.entries.iter().enumerate() {
            assert_eq!(e.entry, entry(i as u32));
        }
        assert_eq!(recovered.entries.len() as u32, count);
    }
}
