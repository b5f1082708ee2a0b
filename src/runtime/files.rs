//! Durable flushes through io_uring: `fdatasync` of the files and `fsync` of the directories a
//! [`FlushTicket`] names, using glommio file handles opened on the same paths (`fdatasync` acts
//! on the inode, so a second descriptor flushes what the log wrote through its own).
//!
//! Files and directories of one ticket are synced concurrently; the first error is returned
//! with the path it concerns.

use crate::log::FlushTicket;
use crate::server::join::join_all;
use glommio::io::{BufferedFile, Directory};
use std::io;
use std::path::Path;

fn with_path(path: &Path, error: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{}: {error}", path.display()))
}

/// `fdatasync` of one file (the journal's memory-mapped segment: a shared mapping's dirty
/// pages are the file's page cache, so this makes them durable).
pub async fn sync_file(path: &Path) -> io::Result<()> {
    let file = BufferedFile::open(path)
        .await
        .map_err(|e| with_path(path, e))?;
    let result = file.fdatasync().await.map_err(|e| with_path(path, e));
    let closed = file.close().await.map_err(|e| with_path(path, e));
    result.and(closed)
}

async fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = Directory::open(path)
        .await
        .map_err(|e| with_path(path, e))?;
    let result = dir.sync().await.map_err(|e| with_path(path, e));
    let closed = dir.close().await.map_err(|e| with_path(path, e));
    result.and(closed)
}

/// Performs every sync of `ticket`; `Ok` only if all succeeded.
pub async fn sync_ticket(ticket: &FlushTicket) -> io::Result<()> {
    let files = join_all(ticket.files.iter().map(|p| sync_file(p)).collect()).await;
    let dirs = join_all(ticket.dirs.iter().map(|p| sync_dir(p)).collect()).await;
    files
        .into_iter()
        .chain(dirs)
        .collect::<io::Result<Vec<()>>>()?;
    Ok(())
}
