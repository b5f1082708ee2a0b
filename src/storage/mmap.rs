//! Preallocated, memory-mapped file regions, and an in-memory crash double with the same
//! interface. This is the only file in Lockstep with `unsafe` for memory maps (and the two
//! `libc` calls that go with them: `flock`, `fallocate`).
//!
//! - [`Region`]: one fixed-size, zero-filled byte region (a journal segment). Writes are
//!   `memcpy`s into the map at an offset (bounds asserted); [`Region::flush_range`] makes a
//!   byte range durable synchronously. A runtime may instead write the range's blocks to the
//!   file itself (the storage engine: `O_DIRECT` + `O_DSYNC` through io_uring) and then report
//!   it with [`Region::synced_externally`].
//! - [`RegionDir`]: a directory of named regions: list, create (preallocated, durable before
//!   it becomes visible), open, remove (durable).
//! - [`MmapDir`] / [`MmapRegion`]: real files, mapped **private** (`MAP_PRIVATE`, copy on
//!   write): the kernel never writes the map back on its own, so only the block writes the
//!   journal hands out (and [`Region::flush_range`]: `pwrite` + `fdatasync`) reach the file, in
//!   order, and an `O_DIRECT` write of a range never races dirty pages of a shared mapping.
//!   Pages written and durable are handed back (`MADV_DONTNEED`, in steps of
//!   [`JOURNAL_RELEASE_BYTES`]): they read as the file's bytes again, which are the same, so
//!   the journal's resident memory is its unsynced tail, not its segment. A region dropped
//!   with unsynced writes writes them to the file (not synced): a clean restart keeps them, a
//!   process kill loses them (they were never durable).
//! - [`MemDir`] / [`MemRegion`]: the crash double. Per file it keeps the bytes as written and
//!   as last synced; [`MemDir::crash`] turns every file into its synced image plus a prefix of
//!   its unsynced bytes (the tear point and optional junk after it chosen by the caller), which
//!   is what a power loss leaves when pages are written back in order. It can also fail syncs.
//!
//! Invariants:
//! - a region's length never changes while it is mapped (files are created at their final size;
//!   nothing in Lockstep truncates a mapped file);
//! - [`RegionDir::create`] writes the initial bytes, sizes the file, syncs it, and only then gives
//!   it its name (rename from `NAME.tmp`) and syncs the directory: after a crash a region either
//!   does not exist or exists whole with its initial bytes. Stale `*.tmp` files are the caller's
//!   to remove;
//! - an [`MmapDir`] holds an exclusive `flock` on its directory for its lifetime, so two writers
//!   never map the same files. Read-only inspectors do not take the lock and never map.
//!
//! Ownership: a region directory and its regions belong to one shard's journal.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use memmap2::{MmapMut, MmapOptions, UncheckedAdvice};

use crate::constants::JOURNAL_RELEASE_BYTES;

/// Suffix of a region file that is being created and has no name yet.
pub const TMP_SUFFIX: &str = ".tmp";

/// One fixed-size byte region. See the module docs.
pub trait Region {
    /// Bytes in the region (fixed).
    fn len(&self) -> usize;

    /// The whole region as last written by this process.
    fn bytes(&self) -> &[u8];

    /// Copies `data` into the region at `offset`. Panics if it does not fit (a caller bug).
    fn write(&mut self, offset: usize, data: &[u8]);

    /// Makes `[offset, offset + len)` durable before returning (`msync(MS_SYNC)`).
    fn flush_range(&mut self, offset: usize, len: usize) -> io::Result<()>;

    /// Records that the runtime made `[offset, offset + len)` durable by `fdatasync`-ing the
    /// region's path itself. A no-op for real files; the double marks the bytes synced.
    fn synced_externally(&mut self, offset: usize, len: usize);

    /// Makes every byte of the file durable as the file holds it (`fdatasync`; nothing is
    /// written from the region): recovery's sync of a segment another process wrote.
    fn sync_file_data(&mut self) -> io::Result<()>;

    /// Drops the bytes written into the region that the file does not hold yet: a close then
    /// leaves the file as a process kill would (a private map's unsynced bytes never reach
    /// it). The double reverts the file's unsynced bytes to their synced values.
    fn discard_unwritten(&mut self);

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A directory of named [`Region`]s. See the module docs.
pub trait RegionDir {
    type Region: Region;

    /// The path of the region called `name` (what a runtime opens to `fdatasync` it).
    fn path(&self, name: &str) -> PathBuf;

    /// Names of the regular files in the directory (regions and anything else), sorted.
    fn list(&self) -> io::Result<Vec<String>>;

    /// Creates region `name` of `len` zero bytes whose first bytes are `head`, durable before
    /// it is visible under its name. Fails if `name` exists.
    fn create(&mut self, name: &str, len: usize, head: &[u8]) -> io::Result<Self::Region>;

    /// Maps the existing region `name` read-write.
    fn open(&mut self, name: &str) -> io::Result<Self::Region>;

    /// Removes file `name` (a region, or a stale `*.tmp`), durably.
    fn remove(&mut self, name: &str) -> io::Result<()>;

    /// Creates region `name` like [`RegionDir::create`] (preallocated, `head` first, then
    /// zeros), but syncs nothing: until the file's data and the directory are synced
    /// ([`Region::flush_range`] of `head`, then [`RegionDir::sync_names`], or the runtime's syncs
    /// reported with [`Region::synced_externally`] and [`RegionDir::names_synced_externally`])
    /// a crash may leave it absent, or present with zeros or a torn `head` (a journal roll:
    /// recovery removes such a last segment).
    fn create_unsynced(&mut self, name: &str, len: usize, head: &[u8]) -> io::Result<Self::Region>;

    /// Makes the names of the files created so far durable (`fsync` of the directory).
    fn sync_names(&mut self) -> io::Result<()>;

    /// Records that the runtime synced the directory itself. A no-op for real files.
    fn names_synced_externally(&mut self);

    /// True if the kernel writes regions' bytes back by itself (shared maps): then nothing
    /// written into a region stays out of its file until a flush.
    fn maps_write_back(&self) -> bool {
        false
    }
}

// ---------------------------------------------------------------------------------------------
// Real files
// ---------------------------------------------------------------------------------------------

/// A directory of memory-mapped regions, exclusively locked for its lifetime.
#[derive(Debug)]
pub struct MmapDir {
    dir: PathBuf,
    /// The open directory: holds the `flock` and is `fsync`ed after entries change.
    handle: File,
    /// Map regions shared (`MAP_SHARED`, the page cache written back by the kernel) instead
    /// of private: the runtime's `LOCKSTEP_JOURNAL_FLUSH=fdatasync`, kept to measure the
    /// engine's block writes against `fdatasync` of a shared mapping.
    shared: bool,
}

impl MmapDir {
    /// Creates `dir` if needed and takes an exclusive lock on it. Fails with `WouldBlock` if
    /// another process (or another `MmapDir` in this one) holds it.
    pub fn open(dir: &Path) -> io::Result<MmapDir> {
        fs::create_dir_all(dir)?;
        let handle = File::open(dir)?;
        // SAFETY: `handle` owns an open descriptor for the duration of the call; `flock` only
        // reads its arguments.
        let rc = unsafe { libc::flock(handle.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let error = io::Error::last_os_error();
            return Err(io::Error::new(
                error.kind(),
                format!(
                    "cannot lock directory {} (is another broker using it?): {error}",
                    dir.display()
                ),
            ));
        }
        Ok(MmapDir {
            dir: dir.to_path_buf(),
            handle,
            shared: false,
        })
    }

    /// Regions opened from now on are mapped shared (see the field's docs).
    pub fn with_shared_maps(mut self) -> MmapDir {
        self.shared = true;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.handle.sync_all()
    }

    /// Writes file `name` (`head`, then zeros to `len`, preallocated) under a temporary name and
    /// renames it, so that a crash never leaves a shorter file under `name` than the rename found;
    /// `sync`: the file is synced before the rename (the directory is the caller's).
    fn write_new(&self, name: &str, len: usize, head: &[u8], sync: bool) -> io::Result<()> {
        assert!(
            head.len() <= len,
            "initial bytes longer than the region ({} > {len})",
            head.len()
        );
        assert!(len > 0, "empty region");
        let path = self.path(name);
        if path.exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", path.display()),
            ));
        }
        let tmp = self.path(&format!("{name}{TMP_SUFFIX}"));
        {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            file.write_all(head)?;
            file.set_len(len as u64)?;
            preallocate(&file, len, &tmp)?;
            if sync {
                file.sync_all()?;
            }
        }
        fs::rename(&tmp, &path)
    }
}

/// Reserves the blocks of `file`'s first `len` bytes, so that writes through a mapping never
/// hit `ENOSPC` (which a mapping reports as `SIGBUS`). File systems without `fallocate` keep
/// a sparse file; that is logged, not an error.
fn preallocate(file: &File, len: usize, path: &Path) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "region length exceeds off_t"))?;
    // SAFETY: `file` owns an open descriptor for the duration of the call; `fallocate` with
    // mode 0 only allocates blocks and extends the size, it touches no memory of ours.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EOPNOTSUPP) {
        tracing::warn!(
            path = %path.display(),
            "fallocate not supported; the region stays sparse (a full disk would fault writes)"
        );
        return Ok(());
    }
    Err(error)
}

impl RegionDir for MmapDir {
    type Region = MmapRegion;

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    fn create(&mut self, name: &str, len: usize, head: &[u8]) -> io::Result<MmapRegion> {
        self.write_new(name, len, head, true)?;
        self.sync_dir()?;
        self.open(name)
    }

    fn create_unsynced(&mut self, name: &str, len: usize, head: &[u8]) -> io::Result<MmapRegion> {
        self.write_new(name, len, head, false)?;
        self.open(name)
    }

    fn sync_names(&mut self) -> io::Result<()> {
        self.sync_dir()
    }

    fn names_synced_externally(&mut self) {}

    fn maps_write_back(&self) -> bool {
        self.shared
    }

    fn open(&mut self, name: &str) -> io::Result<MmapRegion> {
        let path = self.path(name);
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "region larger than memory"))?;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is empty; cannot map it", path.display()),
            ));
        }
        // SAFETY: `map_copy` is unsafe because the mapping aliases the file: if another
        // process truncated or wrote the file while it is mapped, the pages we have not written
        // would change under us (or fault). Lockstep's contract rules that out: this process
        // holds an exclusive `flock` on the directory (see `MmapDir::open`), no Lockstep code
        // truncates a mapped file, the only writes to the file are of the map's own bytes, and
        // the inspect tools only read with `read(2)`. The length was checked non-zero.
        let map = unsafe {
            if self.shared {
                MmapOptions::new().map_mut(&file)?
            } else {
                MmapOptions::new().map_copy(&file)?
            }
        };
        assert_eq!(map.len(), len, "mapping length differs from the file's");
        Ok(MmapRegion {
            path,
            file,
            map,
            unwritten: None,
            released: 0,
        })
    }

    fn remove(&mut self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path(name))?;
        self.sync_dir()
    }
}

/// A privately mapped region file (see the module docs).
#[derive(Debug)]
pub struct MmapRegion {
    path: PathBuf,
    /// Kept open for the lifetime of the mapping: `pwrite`s of [`Region::flush_range`] and drop.
    file: File,
    map: MmapMut,
    /// Bytes written into the map and not yet known to be in the file lie in `[lo, hi)` (a
    /// superset).
    unwritten: Option<(usize, usize)>,
    /// Every page below this was handed back to the kernel (durable, reads as the file).
    released: usize,
}

impl MmapRegion {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `fdatasync` of the whole file through its descriptor.
    pub fn sync_file(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Bytes the map holds that the file may not (a test's view of the unsynced tail).
    pub fn unwritten(&self) -> Option<(usize, usize)> {
        self.unwritten
    }

    /// `[offset, end)` is in the file: forget it as unwritten, and hand back whole steps of
    /// pages below `end` (their bytes are the file's now, so the map reads the same).
    fn in_file(&mut self, offset: usize, end: usize) {
        if let Some((lo, hi)) = self.unwritten {
            if offset <= lo && end > lo {
                self.unwritten = (end < hi).then_some((end, hi));
            }
        }
        let step = JOURNAL_RELEASE_BYTES;
        // Never past bytes still unwritten: their only copy is the map.
        let limit = self.unwritten.map_or(end, |(lo, _)| lo.min(end));
        let upto = limit / step * step;
        if upto > self.released {
            // SAFETY: a private mapping's pages below `upto` are durable in the file with the
            // bytes the map holds (they were written out from the map and not written since:
            // writes only go past them), so dropping the private copies changes no byte a
            // reader sees; no reference into the map outlives this call (`&mut self`).
            let advised = unsafe {
                self.map.unchecked_advise_range(
                    UncheckedAdvice::DontNeed,
                    self.released,
                    upto - self.released,
                )
            };
            match advised {
                Ok(()) => self.released = upto,
                Err(error) => {
                    tracing::warn!(file = %self.path.display(), %error, "madvise(DONTNEED) failed; the pages stay resident");
                    self.released = upto;
                }
            }
        }
    }
}

impl Drop for MmapRegion {
    /// Writes what the map holds and the file does not (no sync): a clean restart keeps it.
    fn drop(&mut self) {
        if let Some((lo, hi)) = self.unwritten.take() {
            if let Err(error) = self.file.write_all_at(&self.map[lo..hi], lo as u64) {
                tracing::warn!(file = %self.path.display(), %error, "could not write a journal region's unsynced tail on close");
            }
        }
    }
}

impl Region for MmapRegion {
    fn len(&self) -> usize {
        self.map.len()
    }

    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn write(&mut self, offset: usize, data: &[u8]) {
        let end = offset
            .checked_add(data.len())
            .expect("region write end overflows");
        assert!(
            end <= self.map.len(),
            "region write [{offset}, {end}) past the end ({}) of {}",
            self.map.len(),
            self.path.display()
        );
        self.map[offset..end].copy_from_slice(data);
        if data.is_empty() {
            return;
        }
        self.unwritten = Some(match self.unwritten {
            None => (offset, end),
            Some((lo, hi)) => (lo.min(offset), hi.max(end)),
        });
    }

    /// `pwrite` of the range from the map, then `fdatasync`.
    fn flush_range(&mut self, offset: usize, len: usize) -> io::Result<()> {
        let end = offset.checked_add(len).expect("flush range end overflows");
        assert!(end <= self.map.len());
        if len == 0 {
            return Ok(());
        }
        self.file
            .write_all_at(&self.map[offset..end], offset as u64)?;
        self.file.sync_data()?;
        self.in_file(offset, end);
        Ok(())
    }

    fn synced_externally(&mut self, offset: usize, len: usize) {
        let end = offset.checked_add(len).expect("synced range end overflows");
        assert!(end <= self.map.len());
        self.in_file(offset, end);
    }

    fn sync_file_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn discard_unwritten(&mut self) {
        self.unwritten = None;
    }
}

// ---------------------------------------------------------------------------------------------
// The in-memory crash double
// ---------------------------------------------------------------------------------------------

/// An in-memory [`RegionDir`] that separates written from synced bytes. Clones share state, so
/// a test keeps one clone to crash and inspect while the journal owns another.
#[derive(Clone, Debug)]
pub struct MemDir {
    root: PathBuf,
    state: Arc<Mutex<MemDirState>>,
}

#[derive(Debug, Default)]
struct MemDirState {
    files: BTreeMap<String, MemFile>,
    /// Bumped by every crash; regions opened before it must not be used again.
    generation: u64,
    counters: SyncCounters,
}

#[derive(Debug, Default)]
struct SyncCounters {
    /// The next this many syncs fail.
    failing: u32,
    /// Successful syncs (flush_range calls that synced at least one byte).
    done: u64,
}

#[derive(Clone, Debug)]
struct MemFile {
    /// Created by [`RegionDir::create_unsynced`] and its name not synced since: a power loss
    /// may drop it ([`MemDir::crash_dropping_new_files`]).
    name_unsynced: bool,
    /// Bytes written by the creation (`create_unsynced`'s head).
    head_len: usize,
    written: Vec<u8>,
    synced: Vec<u8>,
    /// Bytes written and not yet known to be synced lie in `[lo, hi)` (a superset).
    dirty: Option<(usize, usize)>,
}

/// What a crash does to files whose names were never synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NewFiles {
    /// A process crash: they stay whole, as written.
    Keep,
    /// A power loss: they stay with their head torn at most.
    HeadOnly,
    /// A power loss that lost their directory entries.
    Drop,
}

/// What a crash leaves of one file's unsynced bytes `[lo, hi)`; chosen by the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tear {
    /// Written bytes in `[lo, keep_until)` survive; the rest of `[lo, hi)` reverts to its
    /// synced content. `lo <= keep_until <= hi`.
    pub keep_until: usize,
    /// Optionally one byte of junk at this position (in `[keep_until, hi)`): a torn sector.
    pub junk: Option<(usize, u8)>,
}

impl Default for MemDir {
    fn default() -> Self {
        MemDir::new("/mem/journal")
    }
}

impl MemDir {
    /// An empty directory whose paths are reported under `root` (nothing is created there).
    pub fn new(root: impl Into<PathBuf>) -> MemDir {
        MemDir {
            root: root.into(),
            state: Arc::new(Mutex::new(MemDirState::default())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, MemDirState> {
        // A panic while holding the lock is a test failure already; keep the state readable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Simulates a power loss: every file becomes its synced image plus what `tear` keeps of
    /// its unsynced range `(name, lo, hi)`. Regions opened before must not be used again.
    ///
    /// A file created by [`RegionDir::create_unsynced`] whose name was not synced since keeps
    /// at most (a torn prefix of) its head: nothing else is written into it before it is
    /// synced (a journal's rolled-to segment: its map is private, and the runtime performs
    /// the seal before it writes entries there), so the tear sees only the head's range.
    pub fn crash(&self, tear: impl FnMut(&str, usize, usize) -> Tear) {
        self.crash_with(NewFiles::HeadOnly, tear);
    }

    /// [`MemDir::crash`], and files whose names were never synced ([`RegionDir::create_unsynced`])
    /// vanish: the directory's entry for them did not reach the disk.
    pub fn crash_dropping_new_files(&self, tear: impl FnMut(&str, usize, usize) -> Tear) {
        self.crash_with(NewFiles::Drop, tear);
    }

    fn crash_with(&self, new_files: NewFiles, mut tear: impl FnMut(&str, usize, usize) -> Tear) {
        let mut state = self.lock();
        state.generation += 1;
        if new_files == NewFiles::Drop {
            state.files.retain(|_, file| !file.name_unsynced);
        }
        for (name, file) in state.files.iter_mut() {
            let mut image = file.synced.clone();
            let dirty = match file.dirty {
                Some((lo, hi)) if file.name_unsynced && new_files != NewFiles::Keep => {
                    (lo < file.head_len).then_some((lo, hi.min(file.head_len)))
                }
                dirty => dirty,
            };
            if let Some((lo, hi)) = dirty {
                let plan = tear(name, lo, hi);
                assert!(
                    lo <= plan.keep_until && plan.keep_until <= hi,
                    "tear {plan:?} outside the dirty range [{lo}, {hi})"
                );
                image[lo..plan.keep_until].copy_from_slice(&file.written[lo..plan.keep_until]);
                if let Some((at, byte)) = plan.junk {
                    assert!(
                        plan.keep_until <= at && at < hi,
                        "junk outside the torn range"
                    );
                    image[at] = byte;
                }
            }
            file.written = image.clone();
            file.synced = image;
            file.dirty = None;
            file.name_unsynced = false;
        }
    }

    /// A power loss after a clean close: the private maps' unsynced bytes were written to the
    /// files on close ([`MmapRegion`]'s drop), a rolled-to segment's entries too, so `tear`
    /// sees every file's whole unsynced range, new files' included.
    pub fn crash_after_clean_close(&self, tear: impl FnMut(&str, usize, usize) -> Tear) {
        self.crash_with(NewFiles::Keep, tear);
    }

    /// A power loss that keeps nothing unsynced.
    pub fn crash_losing_unsynced(&self) {
        self.crash(|_, lo, _| Tear {
            keep_until: lo,
            junk: None,
        });
    }

    /// A process crash: the page cache survives, so every written byte does.
    pub fn crash_keeping_written(&self) {
        self.crash_with(NewFiles::Keep, |_, _, hi| Tear {
            keep_until: hi,
            junk: None,
        });
    }

    /// The next `count` syncs (`flush_range`) fail with an I/O error.
    pub fn fail_next_syncs(&self, count: u32) {
        self.lock().counters.failing = count;
    }

    /// Successful syncs so far.
    pub fn syncs(&self) -> u64 {
        self.lock().counters.done
    }

    /// Names of the files, sorted.
    pub fn names(&self) -> Vec<String> {
        self.lock().files.keys().cloned().collect()
    }

    /// The written bytes of file `name`.
    pub fn file_bytes(&self, name: &str) -> Option<Vec<u8>> {
        self.lock().files.get(name).map(|f| f.written.clone())
    }

    /// Changes the bytes of file `name` as if on disk (both images): corruption for tests.
    /// Regions opened before must not be used again (reopen the journal).
    pub fn corrupt(&self, name: &str, edit: impl FnOnce(&mut Vec<u8>)) {
        let mut state = self.lock();
        state.generation += 1;
        let file = state
            .files
            .get_mut(name)
            .unwrap_or_else(|| panic!("no file {name}"));
        let len = file.written.len();
        let mut image = file.written.clone();
        edit(&mut image);
        assert_eq!(image.len(), len, "corrupt() must not change the length");
        file.synced = image.clone();
        file.written = image;
        file.dirty = None;
    }

    /// Puts a file in place as if on disk (e.g. a leftover `*.tmp` or a foreign file).
    pub fn put_file(&self, name: &str, bytes: Vec<u8>) {
        let mut state = self.lock();
        state.files.insert(
            name.to_string(),
            MemFile {
                name_unsynced: false,
                head_len: 0,
                written: bytes.clone(),
                synced: bytes,
                dirty: None,
            },
        );
    }
}

impl RegionDir for MemDir {
    type Region = MemRegion;

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.names())
    }

    fn create(&mut self, name: &str, len: usize, head: &[u8]) -> io::Result<MemRegion> {
        self.insert_new(name, len, head, true)
    }

    fn open(&mut self, name: &str) -> io::Result<MemRegion> {
        let state = self.lock();
        let file = state.files.get(name).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} not found", self.root.join(name).display()),
            )
        })?;
        if file.written.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "empty region"));
        }
        Ok(MemRegion {
            name: name.to_string(),
            dir: self.clone(),
            bytes: file.written.clone(),
            generation: state.generation,
        })
    }

    fn remove(&mut self, name: &str) -> io::Result<()> {
        match self.lock().files.remove(name) {
            Some(_) => Ok(()),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} not found", self.root.join(name).display()),
            )),
        }
    }

    fn create_unsynced(&mut self, name: &str, len: usize, head: &[u8]) -> io::Result<MemRegion> {
        self.insert_new(name, len, head, false)
    }

    fn sync_names(&mut self) -> io::Result<()> {
        let mut state = self.lock();
        if state.counters.failing > 0 {
            state.counters.failing -= 1;
            return Err(io::Error::other("injected directory sync failure"));
        }
        state.counters.done += 1;
        self.names_synced_locked(&mut state);
        Ok(())
    }

    fn names_synced_externally(&mut self) {
        let mut state = self.lock();
        self.names_synced_locked(&mut state);
    }
}

impl MemDir {
    fn names_synced_locked(&self, state: &mut MemDirState) {
        for file in state.files.values_mut() {
            file.name_unsynced = false;
        }
    }

    /// A new file `name`: `head`, then zeros to `len`. `synced`: its bytes and name durable at
    /// once ([`RegionDir::create`]); otherwise a crash may lose the name or keep a torn `head`
    /// ([`RegionDir::create_unsynced`]).
    fn insert_new(
        &self,
        name: &str,
        len: usize,
        head: &[u8],
        synced: bool,
    ) -> io::Result<MemRegion> {
        assert!(head.len() <= len && len > 0);
        let mut state = self.lock();
        if state.files.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", self.root.join(name).display()),
            ));
        }
        let mut image = vec![0u8; len];
        image[..head.len()].copy_from_slice(head);
        let file = if synced {
            MemFile {
                name_unsynced: false,
                head_len: 0,
                written: image.clone(),
                synced: image.clone(),
                dirty: None,
            }
        } else {
            MemFile {
                name_unsynced: true,
                head_len: head.len(),
                written: image.clone(),
                synced: vec![0u8; len],
                dirty: (!head.is_empty()).then_some((0, head.len())),
            }
        };
        state.files.insert(name.to_string(), file);
        Ok(MemRegion {
            name: name.to_string(),
            dir: self.clone(),
            bytes: image,
            generation: state.generation,
        })
    }
}

/// A region of a [`MemDir`].
#[derive(Debug)]
pub struct MemRegion {
    name: String,
    dir: MemDir,
    /// This region's view of the written bytes (mirrors the directory's `written`).
    bytes: Vec<u8>,
    generation: u64,
}

impl MemRegion {
    fn with_file<R>(&self, f: impl FnOnce(&mut MemFile, &mut SyncCounters) -> R) -> R {
        let mut guard = self.dir.lock();
        assert_eq!(
            guard.generation, self.generation,
            "region {} used after a simulated crash or corruption",
            self.name
        );
        let MemDirState {
            files, counters, ..
        } = &mut *guard;
        let file = files
            .get_mut(&self.name)
            .unwrap_or_else(|| panic!("region {} was removed while open", self.name));
        f(file, counters)
    }

    fn mark_synced(file: &mut MemFile, offset: usize, len: usize) {
        let end = offset + len;
        file.synced[offset..end].copy_from_slice(&file.written[offset..end]);
        if let Some((lo, hi)) = file.dirty {
            // Shrink the dirty range only from below; what remains is a superset (bytes in it
            // that are synced equal their written value, so tearing them changes nothing).
            if offset <= lo && end > lo {
                file.dirty = if end >= hi { None } else { Some((end, hi)) };
            }
        }
    }
}

impl Region for MemRegion {
    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn write(&mut self, offset: usize, data: &[u8]) {
        let end = offset
            .checked_add(data.len())
            .expect("region write end overflows");
        assert!(
            end <= self.bytes.len(),
            "region write [{offset}, {end}) past the end ({}) of {}",
            self.bytes.len(),
            self.name
        );
        self.bytes[offset..end].copy_from_slice(data);
        if data.is_empty() {
            return;
        }
        self.with_file(|file, _| {
            file.written[offset..end].copy_from_slice(data);
            file.dirty = Some(match file.dirty {
                None => (offset, end),
                Some((lo, hi)) => (lo.min(offset), hi.max(end)),
            });
        });
    }

    fn flush_range(&mut self, offset: usize, len: usize) -> io::Result<()> {
        assert!(offset
            .checked_add(len)
            .is_some_and(|end| end <= self.bytes.len()));
        let name = self.name.clone();
        self.with_file(|file, counters| {
            if counters.failing > 0 {
                counters.failing -= 1;
                return Err(io::Error::other(format!("injected sync failure on {name}")));
            }
            if len > 0 {
                counters.done += 1;
                Self::mark_synced(file, offset, len);
            }
            Ok(())
        })
    }

    fn synced_externally(&mut self, offset: usize, len: usize) {
        assert!(offset
            .checked_add(len)
            .is_some_and(|end| end <= self.bytes.len()));
        self.with_file(|file, _| Self::mark_synced(file, offset, len));
    }

    fn sync_file_data(&mut self) -> io::Result<()> {
        let name = self.name.clone();
        self.with_file(|file, counters| {
            if counters.failing > 0 {
                counters.failing -= 1;
                return Err(io::Error::other(format!("injected sync failure on {name}")));
            }
            counters.done += 1;
            let len = file.written.len();
            Self::mark_synced(file, 0, len);
            file.dirty = None;
            Ok(())
        })
    }

    fn discard_unwritten(&mut self) {
        self.with_file(|file, _| {
            if let Some((lo, hi)) = file.dirty.take() {
                file.written[lo..hi].copy_from_slice(&file.synced[lo..hi]);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_tears_only_unsynced_bytes() {
        let mut dir = MemDir::default();
        let mut region = dir.create("a", 64, b"HEAD").unwrap();
        region.write(8, b"synced..");
        region.flush_range(8, 8).unwrap();
        region.write(16, b"unsynced");
        assert_eq!(&region.bytes()[16..24], b"unsynced");
        let probe = dir.clone();
        drop(region);
        probe.crash(|name, lo, hi| {
            assert_eq!((name, lo, hi), ("a", 16, 24));
            Tear {
                keep_until: 19,
                junk: Some((21, 0xee)),
            }
        });
        let bytes = probe.file_bytes("a").unwrap();
        assert_eq!(&bytes[0..4], b"HEAD");
        assert_eq!(&bytes[8..16], b"synced..");
        assert_eq!(&bytes[16..24], &[b'u', b'n', b's', 0, 0, 0xee, 0, 0]);
        // After the crash nothing is dirty: a second crash changes nothing.
        probe.crash_losing_unsynced();
        assert_eq!(probe.file_bytes("a").unwrap(), bytes);
    }

    #[test]
    fn double_sync_failures_and_external_syncs() {
        let mut dir = MemDir::default();
        let mut region = dir.create("a", 32, b"").unwrap();
        region.write(0, b"abcd");
        dir.fail_next_syncs(1);
        assert!(region.flush_range(0, 4).is_err());
        region.synced_externally(0, 2);
        region.flush_range(0, 4).unwrap();
        assert_eq!(dir.syncs(), 1);
        drop(region);
        dir.crash_losing_unsynced();
        assert_eq!(&dir.file_bytes("a").unwrap()[..4], b"abcd");
    }

    #[test]
    #[should_panic(expected = "used after a simulated crash")]
    fn double_rejects_stale_regions() {
        let mut dir = MemDir::default();
        let mut region = dir.create("a", 32, b"").unwrap();
        dir.crash_keeping_written();
        region.write(0, b"x");
    }

    #[test]
    #[should_panic(expected = "past the end")]
    fn writes_are_bounds_checked() {
        let mut dir = MemDir::default();
        let mut region = dir.create("a", 8, b"").unwrap();
        region.write(4, b"12345");
    }

    #[test]
    fn mmap_region_round_trip_and_exclusive_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = MmapDir::open(tmp.path()).unwrap();
        assert!(
            MmapDir::open(tmp.path()).is_err(),
            "a second writer must not lock the directory"
        );
        let mut region = dir.create("seg", 8192, b"HEADER").unwrap();
        assert!(
            dir.create("seg", 8192, b"").is_err(),
            "create never overwrites"
        );
        assert_eq!(region.len(), 8192);
        assert_eq!(&region.bytes()[..6], b"HEADER");
        assert!(region.bytes()[6..].iter().all(|&b| b == 0));
        region.write(4096, b"payload");
        region.flush_range(4096, 7).unwrap();
        region.sync_file().unwrap();
        drop(region);
        let on_disk = fs::read(tmp.path().join("seg")).unwrap();
        assert_eq!(on_disk.len(), 8192);
        assert_eq!(&on_disk[4096..4103], b"payload");
        assert_eq!(dir.list().unwrap(), vec!["seg".to_string()]);
        let reopened = dir.open("seg").unwrap();
        assert_eq!(&reopened.bytes()[4096..4103], b"payload");
        drop(reopened);
        dir.remove("seg").unwrap();
        assert!(dir.list().unwrap().is_empty());
        drop(dir);
        MmapDir::open(tmp.path()).expect("the lock is released on drop");
    }
}
