//! Benchmark drivers that need the runtime (benches may not name glommio themselves).
//!
//! [`group_commit_appends`] runs the broker's durable-append path on one executor without the
//! network: `appenders` tasks each append a batch to one partition log and wait until it is
//! durable; fdatasync goes through io_uring ([`super::files::sync_ticket`]) and appends that
//! arrive while a flush is in flight share the next one (the log's `GroupCommit` and
//! `CommitWaiters`, as the shard's flush loop uses them), with the allocator tuned as the
//! broker tunes it ([`files::tune_allocator`]). As on a shard, an append that fills a tail
//! chunk writes it behind ([`PartitionLog::take_write_behind`], started in place), a flush
//! begun while some are in flight covers the batches below the first of them (the flush loop
//! waits for that one when there is nothing else to flush), and write-behinds and flushes ring
//! the executor's doorbell ([`kick`]) so that glommio submits them at once, not after every
//! appender ready.
//!
//! [`journal_flushes`] runs the state journal's flush path (one entry per flush) the same way.

use super::sync::{oneshot, OneshotReceiver, OneshotSender};
use super::{files, kick};
use crate::constants::{LOG_SEGMENT_BYTES_DEFAULT, LOG_SEGMENT_BYTES_MIN, SHARD_IO_MEMORY_BYTES};
use crate::log::group_commit::CommitWaiters;
use crate::log::{LogConfig, PartitionLog};
use crate::shard::exec::first_in_flight;
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
    /// Apply retention after every flush (the steady state).
    retention: bool,
    /// Batch bytes appended so far.
    appended: u64,
    /// Write-behinds handed out ([`PartitionLog::take_write_behind`]), in file order.
    write_behinds: Vec<OneshotReceiver<()>>,
}

/// What one [`group_commit_appends`] run measured.
#[derive(Clone, Copy, Debug)]
pub struct GroupCommitRun {
    /// Batches appended and durable.
    pub batches: u64,
    pub seconds: f64,
    /// CPU time of the executor thread over the run (user + system: the appends, the
    /// executor, and the kernel's side of submitting the I/O).
    pub thread_cpu_seconds: f64,
}

/// Appends `batch` from `appenders` concurrent tasks for `duration`, each waiting for
/// durability before its next append.
///
/// `retention_bytes`: the steady state of a log that retention keeps at this size. Retention
/// runs after every flush, so removed segments become spare files that later rolls reuse
/// (FORMAT.md §5), and the timed run starts after `retention_bytes` plus two segments were
/// appended untimed. `None`: a new log, every segment in a new file.
pub fn group_commit_appends(
    dir: &Path,
    batch: &[u8],
    appenders: usize,
    duration: Duration,
    retention_bytes: Option<u64>,
) -> io::Result<GroupCommitRun> {
    assert!(appenders > 0);
    files::tune_allocator();
    let dir = dir.to_path_buf();
    let batch = batch.to_vec();
    LocalExecutorBuilder::new(Placement::Unbound)
        .name("lockstep-bench")
        .io_memory(SHARD_IO_MEMORY_BYTES)
        .spawn(move || async move {
            files::use_dma_blocks();
            kick::install()?;
            // Segments of at most half the retained size, so that retention removes some.
            let segment_bytes = retention_bytes.map_or(LOG_SEGMENT_BYTES_DEFAULT, |r| {
                (r / 2).clamp(LOG_SEGMENT_BYTES_MIN, LOG_SEGMENT_BYTES_DEFAULT)
            });
            let config = LogConfig {
                segment_bytes,
                retention_bytes,
                ..LogConfig::default()
            };
            let warm_up = retention_bytes.map_or(0, |r| r + 2 * config.segment_bytes);
            let (log, _) = PartitionLog::open(FsStorage, &dir, config, 0)
                .map_err(|e| io::Error::other(e.to_string()))?;
            let driver = Rc::new(RefCell::new(Driver {
                log,
                waiters: CommitWaiters::new(),
                flushing: false,
                retention: retention_bytes.is_some(),
                appended: 0,
                write_behinds: Vec::new(),
            }));
            let batch = Rc::new(batch);
            if warm_up > 0 {
                let more = move |d: &Driver| d.appended < warm_up;
                run_appenders(&driver, &batch, appenders, Rc::new(more)).await?;
            }
            let cpu = cpu_seconds(libc::RUSAGE_THREAD);
            let start = Instant::now();
            let more = move |_: &Driver| start.elapsed() < duration;
            let batches = run_appenders(&driver, &batch, appenders, Rc::new(more)).await?;
            let run = GroupCommitRun {
                batches,
                seconds: start.elapsed().as_secs_f64(),
                thread_cpu_seconds: cpu_seconds(libc::RUSAGE_THREAD) - cpu,
            };
            // The run wrote a log a restart reads whole (and, in the steady state, its rolls
            // reused files through the engine): checked, so that the bench cannot pass on a
            // broken log.
            while driver.borrow().flushing {
                futures_lite::future::yield_now().await;
            }
            let Driver { log, .. } = Rc::try_unwrap(driver)
                .ok()
                .expect("the appenders are done")
                .into_inner();
            let (end, reused) = (log.log_end_offset(), log.reused_rolls());
            let config = log.config().clone();
            assert_eq!(log.durable_end_offset(), end, "every append was durable");
            drop(log);
            if retention_bytes.is_some() {
                assert!(reused > 0, "the steady state reused no segment file");
            }
            let (log, report) = PartitionLog::open(FsStorage, &dir, config, 0)
                .map_err(|e| io::Error::other(e.to_string()))?;
            assert!(report.truncated.is_empty(), "{report:?}");
            assert_eq!(log.log_end_offset(), end);
            Ok(run)
        })
        .map_err(|e| io::Error::other(e.to_string()))?
        .join()
        .map_err(|e| io::Error::other(format!("{e:?}")))?
}

/// `appenders` tasks appending durably while `more` (each at least once); the batches appended.
async fn run_appenders(
    driver: &Rc<RefCell<Driver>>,
    batch: &Rc<Vec<u8>>,
    appenders: usize,
    more: Rc<dyn Fn(&Driver) -> bool>,
) -> io::Result<u64> {
    let tasks: Vec<_> = (0..appenders)
        .map(|_| {
            let (driver, batch, more) = (driver.clone(), batch.clone(), more.clone());
            glommio::spawn_local(async move {
                let mut durable = 0u64;
                while durable == 0 || more(&driver.borrow()) {
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
    Ok(total)
}

async fn append_durable(driver: &Rc<RefCell<Driver>>, batch: &[u8]) -> io::Result<()> {
    let (receiver, write) = {
        let mut d = driver.borrow_mut();
        let info = d
            .log
            .append(batch, 0)
            .map_err(|e| io::Error::other(e.to_string()))?;
        d.appended += batch.len() as u64;
        let (tx, rx) = oneshot();
        d.waiters.park(info.last_offset + 1, tx);
        let write = files::writes_behind()
            .then(|| d.log.take_write_behind())
            .flatten();
        (rx, write)
    };
    if let Some(write) = write {
        // As the shard does: started in place (its writes queued and the doorbell rung now).
        let (tx, rx) = oneshot();
        {
            let mut d = driver.borrow_mut();
            d.write_behinds.retain(|done| !done.is_done());
            d.write_behinds.push(rx);
        }
        let driver = driver.clone();
        let task = crate::shard::join::started(async move {
            let result = kick::kicked(files::write_behind(&write)).await;
            let _ = driver.borrow_mut().log.complete_write_behind(write, result);
            tx.send(());
        });
        if let Some(task) = task {
            glommio::spawn_local(task).detach();
        }
    }
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
            let Some(ticket) = ticket else {
                // As the shard's flush loop: amid write-behinds, wait for the first in flight.
                let first = first_in_flight(&mut driver.borrow_mut().write_behinds);
                if let Some(done) = first {
                    done.await;
                    continue;
                }
                let mut d = driver.borrow_mut();
                if let Some(cause) = d.log.poison_cause().map(str::to_string) {
                    for waiter in d.waiters.drain() {
                        waiter.send(Err(cause.clone()));
                    }
                }
                break;
            };
            let result = kick::kicked(files::sync_ticket(&ticket)).await;
            let mut d = driver.borrow_mut();
            match d.log.complete_flush(ticket, result) {
                Ok(()) => {
                    if d.retention {
                        // Broker time 0: retention by size only, spares never idle.
                        let _ = d.log.enforce_retention(0);
                    }
                    let end = d.log.durable_end_offset();
                    for waiter in d.waiters.release(end) {
                        waiter.send(Ok(()));
                    }
                    drop(d);
                    // As the shard's flush loop: the released appenders append before the
                    // next flush is cut.
                    futures_lite::future::yield_now().await;
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

/// What [`journal_flushes`] measured.
#[derive(Clone, Debug)]
pub struct JournalFlushes {
    pub flushes: u64,
    pub seconds: f64,
    /// Flush latencies (block write and zeros, durable), microseconds, sorted.
    pub latencies_us: Vec<u64>,
    /// CPU time of the executor thread (user + system).
    pub thread_cpu_seconds: f64,
    /// CPU time of the whole process (includes io_uring's worker threads).
    pub process_cpu_seconds: f64,
}

fn cpu_seconds(who: libc::c_int) -> f64 {
    // SAFETY: `usage` is a plain struct getrusage fills in; no other memory is touched.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The state journal's flush path on one executor, as a shard runs it when each flush covers
/// one entry (a share acknowledgement answered durable): append one `entry_bytes`-sized
/// entry, flush it through the engine ([`files::flush_journal`]: the block write and the zeros
/// written ahead), repeat for `duration`. The journal lives in `dir` (preallocated segments).
pub fn journal_flushes(
    dir: &Path,
    entry_runs: usize,
    duration: Duration,
) -> io::Result<JournalFlushes> {
    use crate::journal::entries::{Entry, RunState, SharePartitionState, StateRun};
    use crate::journal::{Journal, JournalConfig};
    use crate::storage::mmap::MmapDir;
    files::tune_allocator();
    let dir = dir.to_path_buf();
    LocalExecutorBuilder::new(Placement::Unbound)
        .name("lockstep-bench")
        .io_memory(SHARD_IO_MEMORY_BYTES)
        .spawn(move || async move {
            let other = |e: crate::journal::JournalError| io::Error::other(e.to_string());
            let regions = MmapDir::open(&dir)?;
            let (mut journal, _) =
                Journal::open(regions, JournalConfig::default()).map_err(other)?;
            let entry = Entry::SharePartitionUpdate(SharePartitionState {
                group_id: "bench-group".into(),
                topic_id: [7; 16],
                partition: 0,
                start_offset: None,
                end_offset: None,
                state_epoch: 0,
                runs: (0..entry_runs as i64)
                    .map(|i| StateRun {
                        first_offset: 2 * i,
                        last_offset: 2 * i,
                        state: RunState::Acknowledged,
                        delivery_count: 1,
                    })
                    .collect(),
            });
            let thread_cpu = cpu_seconds(libc::RUSAGE_THREAD);
            let process_cpu = cpu_seconds(libc::RUSAGE_SELF);
            let start = Instant::now();
            let mut latencies_us = Vec::new();
            while start.elapsed() < duration || latencies_us.is_empty() {
                journal.append_entry(&entry).map_err(other)?;
                let began = Instant::now();
                let ticket = journal
                    .begin_flush()
                    .map_err(other)?
                    .expect("one entry unsynced");
                let result = files::flush_journal(&ticket).await;
                journal.complete_flush(ticket, result).map_err(other)?;
                latencies_us.push(began.elapsed().as_micros() as u64);
            }
            let seconds = start.elapsed().as_secs_f64();
            latencies_us.sort_unstable();
            Ok(JournalFlushes {
                flushes: latencies_us.len() as u64,
                seconds,
                latencies_us,
                thread_cpu_seconds: cpu_seconds(libc::RUSAGE_THREAD) - thread_cpu,
                process_cpu_seconds: cpu_seconds(libc::RUSAGE_SELF) - process_cpu,
            })
        })
        .map_err(|e| io::Error::other(e.to_string()))?
        .join()
        .map_err(|e| io::Error::other(format!("{e:?}")))?
}
