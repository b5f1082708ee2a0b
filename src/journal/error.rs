//! Errors of the state journal, each with the file, byte position and values that explain it.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::storage::frame::{FrameError, HeaderError};

use super::entries::{EntryError, EntryKind};

/// Why a journal operation failed.
#[derive(Debug)]
pub enum JournalError {
    /// The configuration is not usable.
    Config { reason: String },
    /// An I/O call failed (not a flush: those poison the journal).
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// A segment's header is unreadable.
    Header { path: PathBuf, error: HeaderError },
    /// A segment's header is valid but does not belong where the file is.
    HeaderMismatch { path: PathBuf, reason: String },
    /// A bad frame followed by valid frames: corruption in the middle, never cut.
    Corrupt {
        path: PathBuf,
        position: usize,
        error: FrameError,
        next_valid: usize,
    },
    /// A bad tail in a segment that is not the last one. Sealed segments were synced whole
    /// before the next one was created, so this is corruption, not a torn write.
    SealedTail {
        path: PathBuf,
        position: usize,
        error: FrameError,
    },
    /// Sequence numbers are not contiguous.
    SequenceGap {
        path: PathBuf,
        position: usize,
        expected: u64,
        found: u64,
    },
    /// A frame of a kind this build does not know.
    UnknownKind {
        path: PathBuf,
        position: usize,
        seq: u64,
        kind: u16,
    },
    /// A frame whose payload is not a valid entry of its kind.
    BadEntry {
        path: PathBuf,
        position: usize,
        seq: u64,
        kind: EntryKind,
        /// Boxed: the verifier's error is large and this path is cold.
        error: Box<EntryError>,
    },
    /// Snapshot entries that a crash cannot explain (stray chunk, wrong index, bad CRC, or a
    /// complete snapshot whose payload does not decode).
    BadSnapshot {
        path: PathBuf,
        position: usize,
        seq: u64,
        reason: String,
    },
    /// The oldest segments were deleted but no complete snapshot covers them.
    MissingSnapshot { path: PathBuf, first_seq: u64 },
    /// An entry larger than the journal accepts.
    EntryTooLarge {
        kind: EntryKind,
        need: usize,
        have: usize,
    },
    /// A snapshot payload larger than the journal accepts (or empty).
    SnapshotSize { need: u64, have: u64 },
    /// A flush failed earlier; the journal refuses all further work. Restart to recover.
    Poisoned {
        path: PathBuf,
        cause: Arc<io::Error>,
    },
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::Config { reason } => write!(f, "journal configuration: {reason}"),
            JournalError::Io { op, path, source } => {
                write!(f, "journal {op} {}: {source}", path.display())
            }
            JournalError::Header { path, error } => {
                write!(f, "journal segment {}: {error}", path.display())
            }
            JournalError::HeaderMismatch { path, reason } => {
                write!(f, "journal segment {}: {reason}", path.display())
            }
            JournalError::Corrupt {
                path,
                position,
                error,
                next_valid,
            } => write!(
                f,
                "journal segment {} is corrupt at byte {position} ({error}); a valid frame \
                 follows at byte {next_valid}, so this is not a torn tail and nothing was cut",
                path.display()
            ),
            JournalError::SealedTail {
                path,
                position,
                error,
            } => write!(
                f,
                "journal segment {} (sealed) is damaged at byte {position} ({error}); sealed \
                 segments are synced whole, so this is corruption and nothing was cut",
                path.display()
            ),
            JournalError::SequenceGap {
                path,
                position,
                expected,
                found,
            } => write!(
                f,
                "journal segment {} at byte {position}: sequence number {found}, expected {expected}",
                path.display()
            ),
            JournalError::UnknownKind {
                path,
                position,
                seq,
                kind,
            } => write!(
                f,
                "journal segment {} at byte {position}: entry {seq} has unknown kind {kind}",
                path.display()
            ),
            JournalError::BadEntry {
                path,
                position,
                seq,
                kind,
                error,
            } => write!(
                f,
                "journal segment {} at byte {position}: entry {seq} ({kind}): {error}",
                path.display()
            ),
            JournalError::BadSnapshot {
                path,
                position,
                seq,
                reason,
            } => write!(
                f,
                "journal segment {} at byte {position}: snapshot entry {seq}: {reason}",
                path.display()
            ),
            JournalError::MissingSnapshot { path, first_seq } => write!(
                f,
                "journal starts at entry {first_seq} ({}) but holds no complete snapshot of \
                 the deleted history",
                path.display()
            ),
            JournalError::EntryTooLarge { kind, need, have } => write!(
                f,
                "journal entry {kind} needs {need} bytes; at most {have} fit"
            ),
            JournalError::SnapshotSize { need, have } => write!(
                f,
                "journal snapshot of {need} bytes; must be 1 ..= {have}"
            ),
            JournalError::Poisoned { path, cause } => write!(
                f,
                "journal is poisoned by a failed flush of {}: {cause}; restart to recover",
                path.display()
            ),
        }
    }
}

impl std::error::Error for JournalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JournalError::Io { source, .. } => Some(source),
            JournalError::Poisoned { cause, .. } => Some(cause.as_ref()),
            JournalError::BadEntry { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}
