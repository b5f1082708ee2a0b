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
    /// Each flush ticket's (issued, completion handled), for the [`Timeline`].
    flush_spans: Vec<Span>,
    /// Each write-behind's (issued, completion handled).
    write_spans: Vec<Span>,
}

type Span = (Instant, Instant);

/// What one [`group_commit_appends`] run measured.
#[derive(Clone, Copy, Debug)]
pub struct GroupCommitRun {
    /// Batches appended and durable.
    pub batches: u64,
    pub seconds: f64,
    /// CPU time of the executor thread over the run (user + system: the appends, the
    /// executor, and the kernel's side of submitting the I/O).
    pub thread_cpu_seconds: f64,
    pub timeline: Timeline,
}

/// Where a group-commit run's time went, from the flush loop's and the write-behinds' spans
/// (each from its I/O issued to its completion handled by the executor): what says whether the
/// disk, the flushes or the appends bound a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Timeline {
    pub flushes: u64,
    /// Fraction of the run with a flush ticket in flight.
    pub flush_busy: f64,
    /// Mean flush ticket, milliseconds.
    pub flush_ms: f64,
    /// Mean time from a flush's completion handled to the next flush issued, milliseconds
    /// (the released appenders append meanwhile).
    pub between_flushes_ms: f64,
    pub write_behinds: u64,
    /// Fraction of the run with no write-behind in flight.
    pub writes_idle: f64,
    /// Mean number of write-behinds in flight.
    pub write_depth: f64,
    /// Median write-behind, milliseconds.
    pub write_p50_ms: f64,
}

impl Timeline {
    /// From spans within `[start, end]` (spans begun before `start` are left out).
    pub fn of(flushes: &[Span], writes: &[Span], start: Instant, end: Instant) -> Timeline {
        let seconds = (end - start).as_secs_f64();
        let ms =
            |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1e3;
        let flushes: Vec<Span> = flushes.iter().copied().filter(|s| s.0 >= start).collect();
        let writes: Vec<Span> = writes.iter().copied().filter(|s| s.0 >= start).collect();
        if seconds <= 0.0 {
            return Timeline::default();
        }
        let mean = |values: Vec<f64>| {
            let n = values.len().max(1) as f64;
            values.into_iter().sum::<f64>() / n
        };
        // Writes overlap each other: sweep their starts and ends for the time none was in
        // flight and the mean depth.
        let mut edges: Vec<(Instant, i64)> = writes
            .iter()
            .flat_map(|s| [(s.0, 1), (s.1.min(end), -1)])
            .collect();
        edges.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut depth, mut at, mut idle_ms, mut depth_ms) = (0i64, start, 0.0, 0.0);
        for (when, step) in edges {
            let span = ms(at, when);
            if depth == 0 {
                idle_ms += span;
            }
            depth_ms += depth as f64 * span;
            at = at.max(when);
            depth += step;
        }
        idle_ms += if depth == 0 { ms(at, end) } else { 0.0 };
        depth_ms += depth as f64 * ms(at, end);
        let mut write_ms: Vec<f64> = writes.iter().map(|s| ms(s.0, s.1)).collect();
        write_ms.sort_by(f64::total_cmp);
        let flush_ms: Vec<f64> = flushes.iter().map(|s| ms(s.0, s.1)).collect();
        let total_ms = seconds * 1e3;
        Timeline {
            flushes: flushes.len() as u64,
            flush_busy: flush_ms.iter().sum::<f64>() / total_ms,
            flush_ms: mean(flush_ms),
            between_flushes_ms: mean(flushes.windows(2).map(|w| ms(w[0].1, w[1].0)).collect()),
            write_behinds: writes.len() as u64,
            writes_idle: idle_ms / total_ms,
            write_depth: depth_ms / total_ms,
            write_p50_ms: write_ms.get(write_ms.len() / 2).copied().unwrap_or(0.0),
        }
    }
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
                flush_spans: Vec::new(),
                write_spans: Vec::new(),
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
            let end = Instant::now();
            let d = driver.borrow();
            let run = GroupCommitRun {
                batches,
                seconds: (end - start).as_secs_f64(),
                thread_cpu_seconds: cpu_seconds(libc::RUSAGE_THREAD) - cpu,
                timeline: Timeline::of(&d.flush_spans, &d.write_spans, start, end),
            };
            drop(d);
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
            let issued = Instant::now();
            let result = kick::kicked(files::write_behind(&write)).await;
            let mut d = driver.borrow_mut();
            d.write_spans.push((issued, Instant::now()));
            let _ = d.log.complete_write_behind(write, result);
            drop(d);
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
            let issued = Instant::now();
            let result = kick::kicked(files::sync_ticket(&ticket)).await;
            let mut d = driver.borrow_mut();
            d.flush_spans.push((issued, Instant::now()));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_counts_idle_time_depth_and_the_gaps_between_flushes() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // 0..100 ms: two writes overlapping on 20..30, none in flight on 40..100; flushes on
        // 10..30 and 50..60.
        let writes = [(at(0), at(30)), (at(20), at(40))];
        let flushes = [(at(10), at(30)), (at(50), at(60))];
        let t = Timeline::of(&flushes, &writes, t0, at(100));
        assert_eq!((t.flushes, t.write_behinds), (2, 2));
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(t.flush_busy, 0.3), "{t:?}");
        assert!(close(t.flush_ms, 15.0), "{t:?}");
        assert!(close(t.between_flushes_ms, 20.0), "{t:?}");
        assert!(close(t.writes_idle, 0.6), "{t:?}");
        assert!(close(t.write_depth, 0.5), "{t:?}");
        assert!(close(t.write_p50_ms, 30.0), "{t:?}");
        // Spans begun before the run are not its own.
        let late = Timeline::of(&flushes, &writes, at(5), at(100));
        assert_eq!((late.flushes, late.write_behinds), (2, 1));
    }
}
