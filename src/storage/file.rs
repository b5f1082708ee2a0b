//! The synchronous file abstraction the partition log is generic over, so tests can crash it.
//!
//! - [`Storage`] / [`StorageFile`]: create, open, positional read and write (page-cache writes,
//!   and block writes as the DMA engine issues them), preallocation, length, truncate,
//!   `fdatasync`, directory listing and directory `fsync`.
//! - [`FsStorage`]: real files (`std::fs`, positional I/O through `FileExt`, `sync_data`).
//! - [`SimStorage`]: an in-memory crash double. For every file it keeps the bytes as last
//!   synced and the ordered list of writes (and length changes) since; for every directory the
//!   entries as of its last `sync_dir`. [`SimStorage::crash`] returns what a power loss leaves:
//!   each file's synced image plus a random prefix of its unsynced operations, from which half
//!   the crashes also drop writes at random (a disk persists its cache in any order), the
//!   operation after the prefix perhaps torn (a prefix of its bytes, possibly followed by
//!   garbage); files created since
//!   their directory's last sync may vanish and files removed since may come back. It also
//!   injects faults: the next `sync` (file or directory) or the next write fails.
//!   A block write ([`StorageFile::write_direct_at`], what an `O_DIRECT` write is) tears at
//!   sector granularity ([`SECTOR_BYTES`]): a prefix of whole sectors lands, never garbage, so
//!   rewriting a block whose first bytes are durable with the same bytes never damages them.
//!
//! Crash model, stated as invariants the double keeps:
//! - bytes present at a file's last successful `sync` survive a crash unless a later write
//!   overwrote them (then the overwrite may survive whole, in part, or not at all);
//! - unsynced writes survive in any order: a prefix of the operations issued since the last
//!   sync, less any of its writes (length changes, which the file system journals, in order);
//!   so bytes whose order matters on disk must each be synced before the next is written;
//! - directory entries survive as of the last successful `sync_dir` of their directory; changes
//!   since may or may not survive, each independently;
//! - directories themselves are durable once created (the double does not lose directories).
//!
//! Ownership: a storage value belongs to the shard that owns the logs using it. Handles are
//! `Send` so a test may move them, but nothing here is meant to be shared across shards.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// A directory tree of files with positional I/O and explicit durability.
pub trait Storage {
    type File: StorageFile;

    /// Creates the file (or truncates an existing one to zero bytes) and opens it read-write.
    fn create(&self, path: &Path) -> io::Result<Self::File>;
    /// Opens an existing file read-write.
    fn open(&self, path: &Path) -> io::Result<Self::File>;
    fn exists(&self, path: &Path) -> bool;
    /// Unlinks a file. Open handles stay usable (POSIX semantics).
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames a file within its directory (replacing `to` if it exists). Like a creation, the
    /// new name is durable only after a [`Self::sync_dir`]: a crash before that may leave
    /// either name.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Names of the regular files directly inside `dir`, sorted.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes the directory's entries (files created, removed) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// `fdatasync` of the file at `path` (opens it for the purpose).
    fn sync_file(&self, path: &Path) -> io::Result<()>;
}

/// An open file of a [`Storage`].
pub trait StorageFile {
    /// Reads exactly `buf.len()` bytes at `offset`; `UnexpectedEof` if the file is shorter.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `data` at `offset`, extending the file if needed.
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Writes all of `data` at `offset` as one block write (what the DMA engine issues:
    /// `O_DIRECT`, `offset` and `data.len()` multiples of the block size). Same effect as
    /// [`Self::write_at`]; a crash tears it only at sector boundaries, never with garbage.
    fn write_direct_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.write_at(data, offset)
    }
    /// Truncates or extends (with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Extends the file to `len` bytes of allocated zeros (`fallocate`), so that later
    /// writes below `len` change no file size; never shrinks it.
    fn preallocate(&self, len: u64) -> io::Result<()> {
        if self.len()? < len {
            self.set_len(len)?;
        }
        Ok(())
    }
    /// `fdatasync`: the file's data (and the metadata needed to read it) is durable on return.
    fn sync(&self) -> io::Result<()>;

    /// A position past which the file holds only zeros that were never written (holes and
    /// unwritten preallocated extents): the end of its last data extent, at most [`Self::len`].
    /// The default (and any file system that cannot tell) is the length.
    fn data_end(&self) -> io::Result<u64> {
        self.len()
    }

    /// Reads the whole file.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len()?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large for memory"))?;
        let mut buf = vec![0u8; len];
        self.read_at(&mut buf, 0)?;
        Ok(buf)
    }
}

/// Real files through `std::fs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsStorage;

/// An open real file.
#[derive(Debug)]
pub struct FsFile {
    file: File,
}

impl Storage for FsStorage {
    type File = FsFile;

    fn create(&self, path: &Path) -> io::Result<FsFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(FsFile { file })
    }

    fn open(&self, path: &Path) -> io::Result<FsFile> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(FsFile { file })
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
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

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        OpenOptions::new().write(true).open(path)?.sync_data()
    }
}

impl StorageFile for FsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    /// `lseek(SEEK_DATA)` / `lseek(SEEK_HOLE)` over the extents: ext4 and XFS report unwritten
    /// (preallocated, never written) extents as holes unless the page cache holds data for
    /// them, so this is where written data ends. The descriptor's offset moves; every read and
    /// write here is positional, so nothing depends on it.
    fn data_end(&self) -> io::Result<u64> {
        use std::os::fd::AsRawFd;
        let len = self.len()?;
        let fd = self.file.as_raw_fd();
        let mut end = 0i64;
        let mut position = 0i64;
        loop {
            // SAFETY: lseek on a descriptor this value owns; no memory is passed.
            let data = unsafe { libc::lseek(fd, position, libc::SEEK_DATA) };
            if data < 0 {
                let error = io::Error::last_os_error();
                return match error.raw_os_error() {
                    // No data at or after `position`.
                    Some(libc::ENXIO) => Ok((end as u64).min(len)),
                    // The file system cannot tell: all of it may be data.
                    Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(len),
                    _ => Err(error),
                };
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
            if hole < 0 {
                return Err(io::Error::last_os_error());
            }
            end = hole;
            if hole as u64 >= len {
                return Ok(len);
            }
            position = hole;
        }
    }

    fn preallocate(&self, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        if self.len()? >= len {
            return Ok(());
        }
        let len = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
        // SAFETY: fallocate on a file descriptor this value owns; no memory is passed.
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, len) };
        if rc == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            // File systems without fallocate: a sparse extension (writes then allocate).
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => self.file.set_len(len as u64),
            _ => Err(error),
        }
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// The unit a block write tears at in the crash double (a device sector).
pub const SECTOR_BYTES: usize = 512;

// ---------------------------------------------------------------------------------------------
// The in-memory crash double.

/// One unsynced change to a file, in issue order.
#[derive(Clone, Debug)]
enum Op {
    /// `direct`: a block write, torn only at sector boundaries.
    Write {
        offset: u64,
        data: Vec<u8>,
        direct: bool,
    },
    SetLen(u64),
}

#[derive(Clone, Debug, Default)]
struct Inode {
    /// The file as the process sees it.
    current: Vec<u8>,
    /// The file as of its last successful sync.
    synced: Vec<u8>,
    /// Changes since the last successful sync, in order.
    unsynced: Vec<Op>,
}

impl Inode {
    fn apply(image: &mut Vec<u8>, op: &Op) {
        match op {
            Op::Write { offset, data, .. } => {
                let start = *offset as usize;
                let end = start + data.len();
                if image.len() < end {
                    image.resize(end, 0);
                }
                image[start..end].copy_from_slice(data);
            }
            Op::SetLen(len) => image.resize(*len as usize, 0),
        }
    }

    /// What survives a power loss: the synced image plus a prefix of the unsynced operations
    /// (in half the crashes less some of its writes), the operation after it possibly torn.
    fn crash_image(&self, rng: &mut SplitMix) -> Vec<u8> {
        let mut image = self.synced.clone();
        let n = self.unsynced.len();
        if n == 0 {
            return image;
        }
        let applied = rng.below(n as u64 + 1) as usize;
        // Half the crashes keep the issue order (a prefix); the others lose writes inside the
        // prefix too, each independently, as a disk that persists its cache in any order does
        // (length changes, which the file system journals in order, all stay).
        let reorder = rng.below(2) == 0;
        for op in &self.unsynced[..applied] {
            if reorder && matches!(op, Op::Write { .. }) && rng.below(4) == 0 {
                continue;
            }
            Inode::apply(&mut image, op);
        }
        if applied < n && rng.below(2) == 0 {
            if let Op::Write {
                offset,
                data,
                direct,
            } = &self.unsynced[applied]
            {
                // A torn write: a prefix of the bytes lands, and perhaps garbage after it;
                // a block write lands a prefix of whole sectors and nothing else.
                let keep = if *direct {
                    let sectors = data.len().div_ceil(SECTOR_BYTES) as u64;
                    (rng.below(sectors + 1) as usize * SECTOR_BYTES).min(data.len())
                } else {
                    rng.below(data.len() as u64 + 1) as usize
                };
                let mut torn = data[..keep].to_vec();
                if !*direct && rng.below(3) == 0 {
                    let garbage = rng.below((data.len() - keep) as u64 + 1) as usize;
                    torn.extend((0..garbage).map(|_| rng.next() as u8));
                }
                if !torn.is_empty() {
                    Inode::apply(
                        &mut image,
                        &Op::Write {
                            offset: *offset,
                            data: torn,
                            direct: false,
                        },
                    );
                }
            }
        }
        image
    }
}

#[derive(Debug, Default)]
struct SimState {
    /// False once [`SimStorage::crash`] has been called: every operation then fails.
    alive: bool,
    next_inode: u64,
    inodes: BTreeMap<u64, Inode>,
    /// Directory entries as the process sees them.
    entries: BTreeMap<PathBuf, u64>,
    /// Directory entries as of each directory's last `sync_dir`.
    durable_entries: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    fail_next_sync: bool,
    fail_next_write: bool,
    syncs: u64,
}

/// In-memory storage that separates written from synced bytes; see the module docs.
///
/// Cloning gives another handle to the same storage (tests keep one to crash it).
#[derive(Clone, Debug)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
}

/// An open file of a [`SimStorage`]; refers to the inode, so it survives `remove`.
#[derive(Debug)]
pub struct SimFile {
    state: Arc<Mutex<SimState>>,
    inode: u64,
}

impl Default for SimStorage {
    fn default() -> Self {
        SimStorage::new()
    }
}

fn dead() -> io::Error {
    io::Error::other("simulated storage was crashed; this handle is stale")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

impl SimStorage {
    pub fn new() -> SimStorage {
        SimStorage {
            state: Arc::new(Mutex::new(SimState {
                alive: true,
                ..SimState::default()
            })),
        }
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, SimState>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !state.alive {
            return Err(dead());
        }
        Ok(state)
    }

    /// The next `sync` or `sync_dir` fails with an I/O error (and syncs nothing).
    pub fn fail_next_sync(&self) {
        if let Ok(mut state) = self.lock() {
            state.fail_next_sync = true;
        }
    }

    /// The next `write_at` fails with an I/O error (and writes nothing).
    pub fn fail_next_write(&self) {
        if let Ok(mut state) = self.lock() {
            state.fail_next_write = true;
        }
    }

    /// Cancels injected faults that have not fired.
    pub fn clear_faults(&self) {
        if let Ok(mut state) = self.lock() {
            state.fail_next_sync = false;
            state.fail_next_write = false;
        }
    }

    /// Successful file and directory syncs so far.
    pub fn sync_count(&self) -> u64 {
        self.lock().map(|s| s.syncs).unwrap_or(0)
    }

    /// The current (not necessarily durable) bytes of a file, for tests that damage files.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.lock().ok()?;
        let inode = state.entries.get(path)?;
        Some(state.inodes[inode].current.clone())
    }

    /// Simulates a power loss. Returns the storage as found at the next boot (everything on it
    /// is synced); this storage and every handle into it fail from now on.
    pub fn crash(&self, seed: u64) -> SimStorage {
        let mut rng = SplitMix(seed ^ 0x5eed_c0de_0bad_f00d);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.alive = false;
        let paths: BTreeSet<PathBuf> = state
            .entries
            .keys()
            .chain(state.durable_entries.keys())
            .cloned()
            .collect();
        let mut survivors: BTreeMap<PathBuf, u64> = BTreeMap::new();
        for path in paths {
            let now = state.entries.get(&path).copied();
            let durable = state.durable_entries.get(&path).copied();
            let chosen = match (now, durable) {
                (Some(a), Some(b)) if a == b => Some(a),
                (a, b) => {
                    if rng.below(2) == 0 {
                        a
                    } else {
                        b
                    }
                }
            };
            if let Some(inode) = chosen {
                survivors.insert(path, inode);
            }
        }
        let mut next = SimState {
            alive: true,
            dirs: state.dirs.clone(),
            ..SimState::default()
        };
        for (path, inode) in survivors {
            let image = state.inodes[&inode].crash_image(&mut rng);
            let id = next.next_inode;
            next.next_inode += 1;
            next.inodes.insert(
                id,
                Inode {
                    current: image.clone(),
                    synced: image,
                    unsynced: Vec::new(),
                },
            );
            next.entries.insert(path.clone(), id);
            next.durable_entries.insert(path, id);
        }
        SimStorage {
            state: Arc::new(Mutex::new(next)),
        }
    }

    /// Replaces a file's bytes as if written and synced (for tests that damage files).
    pub fn overwrite_durable(&self, path: &Path, bytes: Vec<u8>) -> io::Result<()> {
        let mut state = self.lock()?;
        let inode = *state.entries.get(path).ok_or_else(|| not_found(path))?;
        let node = state
            .inodes
            .get_mut(&inode)
            .ok_or_else(|| not_found(path))?;
        node.current = bytes.clone();
        node.synced = bytes;
        node.unsynced.clear();
        Ok(())
    }
}

impl Storage for SimStorage {
    type File = SimFile;

    fn create(&self, path: &Path) -> io::Result<SimFile> {
        let mut state = self.lock()?;
        let parent = path.parent().unwrap_or(Path::new(""));
        if !state.dirs.contains(parent) {
            return Err(not_found(parent));
        }
        if let Some(&inode) = state.entries.get(path) {
            let node = state
                .inodes
                .get_mut(&inode)
                .ok_or_else(|| not_found(path))?;
            node.current.clear();
            node.unsynced.push(Op::SetLen(0));
            return Ok(SimFile {
                state: self.state.clone(),
                inode,
            });
        }
        let inode = state.next_inode;
        state.next_inode += 1;
        state.inodes.insert(inode, Inode::default());
        state.entries.insert(path.to_path_buf(), inode);
        Ok(SimFile {
            state: self.state.clone(),
            inode,
        })
    }

    fn open(&self, path: &Path) -> io::Result<SimFile> {
        let state = self.lock()?;
        let inode = *state.entries.get(path).ok_or_else(|| not_found(path))?;
        Ok(SimFile {
            state: self.state.clone(),
            inode,
        })
    }

    fn exists(&self, path: &Path) -> bool {
        self.lock()
            .map(|s| s.entries.contains_key(path) || s.dirs.contains(path))
            .unwrap_or(false)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock()?;
        state
            .entries
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }

    /// The inode moves to the new name at once; until the directory is synced a crash keeps
    /// each name's durable entry or its current one, chosen independently (so a crash may
    /// also leave both names, as copies, or neither: harsher than a journaling file system).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock()?;
        let parent = to.parent().unwrap_or(Path::new(""));
        if !state.dirs.contains(parent) {
            return Err(not_found(parent));
        }
        let inode = state.entries.remove(from).ok_or_else(|| not_found(from))?;
        state.entries.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.lock()?;
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(state
            .entries
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(String::from))
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock()?;
        for ancestor in dir.ancestors() {
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock()?;
        if std::mem::take(&mut state.fail_next_sync) {
            return Err(io::Error::other("injected fsync failure (directory)"));
        }
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        let now: Vec<(PathBuf, u64)> = state
            .entries
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        state.durable_entries.retain(|p, _| !in_dir(p));
        state.durable_entries.extend(now);
        state.syncs += 1;
        Ok(())
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.open(path)?.sync()
    }
}

impl SimFile {
    fn with<T>(&self, f: impl FnOnce(&mut SimState, u64) -> io::Result<T>) -> io::Result<T> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !state.alive {
            return Err(dead());
        }
        f(&mut state, self.inode)
    }
}

impl SimFile {
    fn write(&self, data: &[u8], offset: u64, direct: bool) -> io::Result<()> {
        self.with(|state, inode| {
            if std::mem::take(&mut state.fail_next_write) {
                return Err(io::Error::other("injected write failure"));
            }
            let node = state.inodes.get_mut(&inode).ok_or_else(dead)?;
            let op = Op::Write {
                offset,
                data: data.to_vec(),
                direct,
            };
            Inode::apply(&mut node.current, &op);
            node.unsynced.push(op);
            Ok(())
        })
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with(|state, inode| {
            let data = &state.inodes[&inode].current;
            let start = offset as usize;
            let end = start.saturating_add(buf.len());
            if end > data.len() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "read of {} bytes at {offset} past end of file ({} bytes)",
                        buf.len(),
                        data.len()
                    ),
                ));
            }
            buf.copy_from_slice(&data[start..end]);
            Ok(())
        })
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.write(data, offset, false)
    }

    fn write_direct_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.write(data, offset, true)
    }

    fn len(&self) -> io::Result<u64> {
        self.with(|state, inode| Ok(state.inodes[&inode].current.len() as u64))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|state, inode| {
            let node = state.inodes.get_mut(&inode).ok_or_else(dead)?;
            let op = Op::SetLen(len);
            Inode::apply(&mut node.current, &op);
            node.unsynced.push(op);
            Ok(())
        })
    }

    fn sync(&self) -> io::Result<()> {
        self.with(|state, inode| {
            if std::mem::take(&mut state.fail_next_sync) {
                return Err(io::Error::other("injected fsync failure"));
            }
            let node = state.inodes.get_mut(&inode).ok_or_else(dead)?;
            node.synced = node.current.clone();
            node.unsynced.clear();
            state.syncs += 1;
            Ok(())
        })
    }
}

/// A tiny deterministic generator (SplitMix64) so the library needs no `rand` dependency.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (`bound` > 0).
    fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0);
        self.next() % bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        PathBuf::from("/d")
    }

    #[test]
    fn synced_bytes_survive_every_crash() {
        for seed in 0..200 {
            let s = SimStorage::new();
            s.create_dir_all(&dir()).unwrap();
            let path = dir().join("f");
            let f = s.create(&path).unwrap();
            f.write_at(b"durable", 0).unwrap();
            f.sync().unwrap();
            s.sync_dir(&dir()).unwrap();
            f.write_at(b"-tail-bytes", 7).unwrap();
            let after = s.crash(seed);
            let bytes = after.contents(&path).expect("synced file survives");
            assert!(bytes.starts_with(b"durable"), "seed {seed}: {bytes:?}");
            assert!(bytes.len() <= 18);
            // Stale handles fail.
            assert!(f.write_at(b"x", 0).is_err());
        }
    }

    #[test]
    fn unsynced_writes_survive_in_any_order_or_torn() {
        let mut outcomes = BTreeSet::new();
        for seed in 0..400 {
            let s = SimStorage::new();
            s.create_dir_all(&dir()).unwrap();
            let path = dir().join("f");
            let f = s.create(&path).unwrap();
            s.sync_dir(&dir()).unwrap();
            f.write_at(b"aaaa", 0).unwrap();
            f.write_at(b"bbbb", 4).unwrap();
            let bytes = s.crash(seed).contents(&path).unwrap();
            match bytes.get(..4) {
                // "aaaa", then maybe (part of) "bbbb" or garbage after a clean prefix of it.
                Some(b"aaaa") => outcomes.insert(("a", bytes.len().min(8))),
                // "bbbb" (or its torn prefix) without "aaaa": the disk kept the later write.
                Some(b"\0\0\0\0") => {
                    assert!(bytes.len() > 4, "seed {seed}: {bytes:?}");
                    outcomes.insert(("b", bytes.len().min(8)))
                }
                // Nothing, or a torn "aaaa" (a prefix of it, perhaps garbage after).
                _ => {
                    assert!(bytes.len() <= 4, "seed {seed}: {bytes:?}");
                    outcomes.insert(("", bytes.len().min(3)))
                }
            };
        }
        // Nothing, all, something torn and the later write alone all happen.
        assert!(outcomes.contains(&("", 0)), "{outcomes:?}");
        assert!(outcomes.contains(&("a", 8)), "{outcomes:?}");
        assert!(outcomes.contains(&("b", 8)), "{outcomes:?}");
        assert!(outcomes.len() > 4, "{outcomes:?}");
    }

    #[test]
    fn a_torn_block_write_leaves_whole_old_or_new_sectors() {
        let mut partial = 0;
        for seed in 0..200 {
            let s = SimStorage::new();
            s.create_dir_all(&dir()).unwrap();
            let path = dir().join("f");
            let f = s.create(&path).unwrap();
            f.write_at(&[0x55; 4096], 0).unwrap();
            f.sync().unwrap();
            s.sync_dir(&dir()).unwrap();
            f.write_direct_at(&[0xaa; 4096], 0).unwrap();
            let bytes = s.crash(seed).contents(&path).unwrap();
            assert_eq!(bytes.len(), 4096);
            let sectors: Vec<u8> = bytes
                .chunks(SECTOR_BYTES)
                .map(|c| {
                    assert!(
                        c.iter().all(|&b| b == c[0]),
                        "seed {seed}: a sector is whole"
                    );
                    c[0]
                })
                .collect();
            // A prefix of new sectors, then old ones.
            let new = sectors.iter().take_while(|&&b| b == 0xaa).count();
            assert!(sectors[new..].iter().all(|&b| b == 0x55), "seed {seed}");
            partial += usize::from(new > 0 && new < sectors.len());
        }
        assert!(partial > 0);
    }

    #[test]
    fn directory_entries_follow_sync_dir() {
        let mut vanished = 0;
        let mut came_back = 0;
        for seed in 0..200 {
            let s = SimStorage::new();
            s.create_dir_all(&dir()).unwrap();
            let kept = dir().join("kept");
            let new = dir().join("new");
            s.create(&kept).unwrap().sync().unwrap();
            s.sync_dir(&dir()).unwrap();
            s.create(&new).unwrap().sync().unwrap();
            s.remove(&kept).unwrap();
            let after = s.crash(seed);
            vanished += usize::from(!after.exists(&new));
            came_back += usize::from(after.exists(&kept));
        }
        assert!(vanished > 50 && vanished < 150, "{vanished}");
        assert!(came_back > 50 && came_back < 150, "{came_back}");
    }

    #[test]
    fn injected_sync_failure_keeps_data_unsynced() {
        let s = SimStorage::new();
        s.create_dir_all(&dir()).unwrap();
        let f = s.create(&dir().join("f")).unwrap();
        f.write_at(b"x", 0).unwrap();
        s.fail_next_sync();
        assert!(f.sync().is_err());
        f.sync().unwrap();
        s.fail_next_write();
        assert!(f.write_at(b"y", 1).is_err());
        assert_eq!(f.read_all().unwrap(), b"x");
    }

    #[test]
    fn fs_storage_round_trip() {
        let tmp = std::env::temp_dir().join(format!("lockstep-file-{}", std::process::id()));
        let s = FsStorage;
        s.create_dir_all(&tmp).unwrap();
        let path = tmp.join("a.log");
        let f = s.create(&path).unwrap();
        f.write_at(b"hello", 3).unwrap();
        assert_eq!(f.len().unwrap(), 8);
        let mut buf = [0u8; 5];
        f.read_at(&mut buf, 3).unwrap();
        assert_eq!(&buf, b"hello");
        assert_eq!(
            f.read_at(&mut buf, 6).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        f.set_len(4).unwrap();
        f.sync().unwrap();
        s.sync_file(&path).unwrap();
        s.sync_dir(&tmp).unwrap();
        assert_eq!(s.list(&tmp).unwrap(), vec!["a.log".to_string()]);
        s.remove(&path).unwrap();
        assert!(!s.exists(&path));
        fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn data_end_is_the_end_of_the_written_data() {
        let tmp = tempfile::tempdir().unwrap();
        let s = FsStorage;
        let f = s.create(&tmp.path().join("seg")).unwrap();
        f.preallocate(1 << 20).unwrap();
        assert_eq!(f.len().unwrap(), 1 << 20);
        f.write_at(&[7u8; 4096], 0).unwrap();
        f.sync().unwrap();
        let end = f.data_end().unwrap();
        if end == 1 << 20 {
            // A file system that reports preallocated extents as data (or cannot tell):
            // recovery then reads the whole file, as before.
            eprintln!("data_end: this file system does not report unwritten extents as holes");
            return;
        }
        assert_eq!(end, 4096, "only the first block was written");
        f.write_at(&[9u8; 4096], 64 << 10).unwrap();
        assert_eq!(
            f.data_end().unwrap(),
            (64 << 10) + 4096,
            "the last data extent ends it"
        );
        f.write_at(&[1u8; 4096], (1 << 20) - 4096).unwrap();
        assert_eq!(f.data_end().unwrap(), 1 << 20);
        let g = s.create(&tmp.path().join("empty")).unwrap();
        g.preallocate(1 << 20).unwrap();
        assert_eq!(g.data_end().unwrap(), 0);
    }
}
