//! Benchmark drivers that need the runtime (benches may not name glommio themselves).
//!
//! [`group_commit_appends`] runs the broker's durable-append path on one executor without the
//! network: `appenders` tasks each append a batch to one partition log and wait until it is
//! durable; fdatasync goes through io_uring ([`super::files::sync_ticket`]) and appends that
//! arrive while a flush is in flight share the next one (the log's `GroupCommit` and
//! `CommitWaiters`, as the shard's flush loop uses them), with the allocator tuned as the
//! broker tunes it ([`files::tune_allocator`]).

use super::files;
use super::sync::{oneshot, OneshotSender};
use crate::constants::SHARD_IO_MEMORY_BYTES;
use crate::log::group_commit::CommitWaiters;
use crate::log::{LogConfig, PartitionLog};
use crate::storage::file::FsStorage;
use glommio::{LocalExecutorBuilder, Placement};
use std::cell::RefCell;
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

struct Driver {
    log: PartitionLog<FsStorage>,
    waiters: CommitWaiters<OneshotSender<Result<(), String>>>,
    flushing: bool,
}

/// Appends `batch` from `appenders` concurrent tasks for `duration`, each waiting for
/// durability before its next append. Returns (durable batches, seconds).
pub fn group_commit_appends(
    dir: &Path,
    batch: &[u8],
    appenders: usize,
    duration: Duration,
) -> io::Result<(u64, f64)> {
    assert!(appenders > 0);
    files::tune_allocator();
    let dir = dir.to_path_buf();
    let batch = batch.to_vec();
    LocalExecutorBuilder::new(Placement::Unbound)
        .name("lockstep-bench")
        .io_memory(SHARD_IO_MEMORY_BYTES)
        .spawn(move || async move {
            files::use_dma_blocks();
            let (log, _) = PartitionLog::open(FsStorage, &dir, LogConfig::default(), 0)
                .map_err(|e| io::Error::other(e.to_string()))?;
            let driver = Rc::new(RefCell::new(Driver {
                log,
                waiters: CommitWaiters::new(),
                flushing: false,
            }));
            let batch = Rc::new(batch);
            let start = Instant::now();
            let tasks: Vec<_> = (0..appenders)
                .map(|_| {
                    let driver = driver.clone();
                    let batch = batch.clone();
                    glommio::spawn_local(async move {
                        let mut durable = 0u64;
                        while start.elapsed() < duration || durable == 0 {
                            append_durable(&driver, &batch).await?;
                            durable += 1;
                        }
                        Ok::<u64, io::Error>(durable)
                    })
                })
                .collect();
            let mut total = 0;
            for task in tasks {
                total += task.await?;
            }
            Ok((total, start.elapsed().as_secs_f64()))
        })
        .map_err(|e| io::Error::other(e.to_string()))?
        .join()
        .map_err(|e| io::Error::other(format!("{e:?}")))?
}

async fn append_durable(driver: &Rc<RefCell<Driver>>, batch: &[u8]) -> io::Result<()> {
    let receiver = {
        let mut d = driver.borrow_mut();
        let info = d
            .log
            .append(batch, 0)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let (tx, rx) = oneshot();
        d.waiters.park(info.last_offset + 1, tx);
        rx
    };
    ensure_flush(driver);
    match receiver.await {
        Some(Ok(())) => Ok(()),
        Some(Err(error)) => Err(io::Error::other(error)),
        None => Err(io::Error::other("flush abandoned")),
    }
}

fn ensure_flush(driver: &Rc<RefCell<Driver>>) {
    if std::mem::replace(&mut driver.borrow_mut().flushing, true) {
        return;
    }
    let driver = driver.clone();
    glommio::spawn_local(async move {
        loop {
            let ticket = driver.borrow_mut().log.begin_flush();
            let Some(ticket) = ticket else { break };
            let result = files::sync_ticket(&ticket).await;
            let mut d = driver.borrow_mut();
            match d.log.complete_flush(ticket, result) {
                Ok(()) => {
                    let end = d.log.durable_end_offset();
                    for waiter in d.waiters.release(end) {
                        waiter.send(Ok(()));
                    }
                }
                Err(error) => {
                    for waiter in d.waiters.drain() {
                        waiter.send(Err(error.to_string()));
                    }
                    break;
                }
            }
        }
        driver.borrow_mut().flushing = false;
    })
    .detach();
}
