//! What every benchmark report shares: the commit and machine it was measured on, the machine's
//! own fdatasync rate, and where the JSON report goes; the brokers under test ([`brokers`]) and
//! the suite's peers ([`peers`]). Included by each bench with
//! `#[path = "common/mod.rs"] mod common;` (cargo does not treat this folder as a bench).
//! Each bench uses part of it, hence `dead_code` is allowed here.
#![allow(dead_code)]

pub mod brokers;
/// Redis, RabbitMQ and NATS JetStream runs of the benchmark suite's workload.
pub mod peers;

use serde::Serialize;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The commit measured; "-dirty" when the working tree differs from it.
pub fn git_commit() -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// CPU count and model, kernel release.
pub fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
    })
}

/// Appending writes of `bytes` in `work`, each followed by fdatasync, for `seconds` (at most
/// `ops_max`, at least one); operations per second.
pub fn fdatasync_rate(work: &Path, seconds: f64, ops_max: usize, bytes: usize) -> f64 {
    let path = work.join("fdatasync.bin");
    let file = std::fs::File::create(&path).expect("create");
    let page = vec![0x3c_u8; bytes];
    let deadline = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut ops = 0usize;
    while (start.elapsed() < deadline && ops < ops_max) || ops == 0 {
        file.write_all_at(&page, (ops * page.len()) as u64)
            .expect("write");
        file.sync_data().expect("fdatasync");
        ops += 1;
    }
    let rate = ops as f64 / start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    rate
}

/// Latency of `n` appending 4 KiB writes each followed by fdatasync, in microseconds.
pub fn fdatasync_latency_us(work: &Path, n: usize) -> hdrhistogram::Histogram<u64> {
    let path = work.join("fdatasync-latency.bin");
    let file = std::fs::File::create(&path).expect("create");
    let page = vec![0x5a_u8; 4096];
    let mut h = hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    for i in 0..n.max(1) {
        file.write_all_at(&page, (i * page.len()) as u64)
            .expect("write");
        let t = Instant::now();
        file.sync_data().expect("fdatasync");
        h.record(t.elapsed().as_micros() as u64).ok();
    }
    let _ = std::fs::remove_file(&path);
    h
}

/// Writes `report` as `target/bench-reports/{name}.json` and returns the path.
pub fn write_report(name: &str, report: &impl Serialize) -> PathBuf {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-reports");
    std::fs::create_dir_all(&out).expect("report directory");
    let path = out.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(report).expect("json"))
        .expect("write report");
    path
}

/// Clock ticks per second of /proc's CPU times.
pub fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64).max(1.0)
}

/// CPU seconds (utime + stime, all threads) process `pid` has used so far; 0 if it is gone.
pub fn proc_cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may contain spaces): state is field 3, utime 14,
    // stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
        .sum();
    ticks / clock_ticks_per_s()
}

/// Peak resident set of process `pid` so far (`VmHWM` of /proc/PID/status), bytes.
pub fn proc_peak_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// A buffer of `len` bytes for O_DIRECT writes, in transparent huge pages where the kernel
/// gives them (mapped 2 MiB-aligned, `MADV_HUGEPAGE`), as the engine's full tail chunks are
/// (`runtime::huge_chunks`): a write from physically contiguous memory goes to a virtio disk
/// as one request, from 4 KiB pages as two or three per MiB, so the machine's O_DIRECT figures
/// are the best the disk gives, not a small-page client's.
pub struct AlignedBuffer {
    base: *mut libc::c_void,
    mapped: usize,
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuffer {
    pub fn new(len: usize, fill: u8) -> AlignedBuffer {
        const HUGE: usize = 2 << 20;
        let len = len.max(4096);
        let mapped = len.next_multiple_of(HUGE) + HUGE;
        // SAFETY: an anonymous private mapping the kernel places; unmapped once, in Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap of a bench buffer");
        let at = (base as usize).next_multiple_of(HUGE) - base as usize;
        // SAFETY: `at..at + len` rounded up to whole huge pages lies inside the mapping (it has
        // HUGE bytes of slack); the hint only affects how it is paged (a huge page needs the
        // whole 2 MiB in the advised range).
        let ptr = unsafe {
            let ptr = base.cast::<u8>().add(at);
            libc::madvise(ptr.cast(), len.next_multiple_of(HUGE), libc::MADV_HUGEPAGE);
            ptr
        };
        let mut b = AlignedBuffer {
            base,
            mapped,
            ptr,
            len,
        };
        b.as_mut_slice().fill(fill);
        b
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points at `len` bytes of the mapping owned by self, initialised in `new`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base, self.mapped) };
    }
}

fn open_direct(path: &Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .expect("open O_DIRECT file (does the file system support O_DIRECT?)")
}

/// What an O_DIRECT reference writes, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DirectData {
    /// Bytes the CPU has just stored, as a log writes: [`FRESH_WRITERS`] threads, each storing its
    /// next 1 MiB block into its own buffer (the log's non-temporal copy,
    /// [`lockstep::storage::frame::copy_streaming`], from a source stamped with the block's
    /// position in every 4 KiB) while the others' writes are in flight, as the engine's appends
    /// go on while its chunk writes are; a new file is preallocated first (untimed), as the
    /// engine's segments are. The wall clock from the first write to the `fdatasync`, nothing
    /// left out.
    Fresh,
    /// One buffer, stored once and written again and again by one thread: shown beside the
    /// judged ratio, not judged. On the development VM this writes 1.1-1.3x faster than the same
    /// writes of
    /// bytes just stored into the buffer (presumably the host reads memory nobody has written
    /// since its last read from its cache); no log can write that way.
    Unchanged,
}

/// Writers of a [`DirectData::Fresh`] reference: about the chunk writes the engine keeps in
/// flight.
pub const FRESH_WRITERS: usize = 8;

const DIRECT_BLOCK: usize = 1 << 20;

/// The machine's O_DIRECT sequential write bandwidth: `total` bytes (at least 1 MiB) in 1 MiB
/// aligned blocks, then one fdatasync; MB/s (10^6). Into a new file (blocks never written
/// before).
pub fn direct_write_mb_per_s(work: &Path, total: usize, data: DirectData) -> f64 {
    direct_write(work, total, false, data)
}

/// The same into blocks written before (the file is written once untimed, then again timed):
/// what a segment file reused after retention writes into.
pub fn direct_rewrite_mb_per_s(work: &Path, total: usize, data: DirectData) -> f64 {
    direct_write(work, total, true, data)
}

fn direct_write(work: &Path, total: usize, rewrite: bool, data: DirectData) -> f64 {
    let path = work.join("direct.bin");
    let file = open_direct(&path);
    let total = total.max(DIRECT_BLOCK).next_multiple_of(DIRECT_BLOCK);
    let block = AlignedBuffer::new(DIRECT_BLOCK, 0xa5);
    if rewrite {
        write_unchanged(&file, total, &block);
        file.sync_data().expect("fdatasync");
    }
    if data == DirectData::Fresh && !rewrite {
        // Concurrent writes that extend a file wait for each other; the engine's segments are
        // preallocated, so its writes never extend one.
        preallocate(&file, total);
    }
    let start = Instant::now();
    match data {
        DirectData::Fresh => write_fresh(&file, total),
        DirectData::Unchanged => write_unchanged(&file, total, &block),
    }
    file.sync_data().expect("fdatasync");
    let seconds = start.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(&path);
    total as f64 / seconds / 1e6
}

/// Allocates `[0, len)` of `file` (unwritten extents, the file extended to `len`).
fn preallocate(file: &std::fs::File, len: usize) {
    // SAFETY: fallocate(2) on a file descriptor we own, mode 0 (allocate and extend).
    let rc = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(file),
            0,
            0,
            len as libc::off_t,
        )
    };
    assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
}

/// [`DirectData::Unchanged`]'s writes of `[0, total)`, all from `block`.
fn write_unchanged(file: &std::fs::File, total: usize, block: &AlignedBuffer) {
    for at in (0..total).step_by(DIRECT_BLOCK) {
        file.write_all_at(block.as_slice(), at as u64)
            .expect("O_DIRECT write");
    }
}

/// [`DirectData::Fresh`]'s writes of `[0, total)`.
fn write_fresh(file: &std::fs::File, total: usize) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for writer in 0..FRESH_WRITERS {
            let next = &next;
            scope.spawn(move || {
                let mut block = AlignedBuffer::new(DIRECT_BLOCK, 0);
                let mut source: Vec<u8> =
                    (0..DIRECT_BLOCK).map(|i| (i / 64 + writer) as u8).collect();
                loop {
                    let at = next.fetch_add(DIRECT_BLOCK, Ordering::Relaxed);
                    if at >= total {
                        break;
                    }
                    for sector in source.chunks_mut(4096) {
                        sector[..8].copy_from_slice(&(at as u64).to_le_bytes());
                    }
                    lockstep::storage::frame::copy_streaming(block.as_mut_slice(), &source);
                    file.write_all_at(block.as_slice(), at as u64)
                        .expect("O_DIRECT write");
                }
            });
        }
    });
}

/// How a [`group_commit_mb_per_s`] probe writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum GroupCommit {
    /// Buffered `pwrite`s appended to a growing file (a page-cache log: every flush also
    /// commits the file's new size to the journal).
    PageCache,
    /// One O_DIRECT write per group into a file preallocated to its full size and zero-filled
    /// first (rewrites of written blocks: the flush changes no metadata).
    DirectPreallocated,
    /// The same into preallocated extents never written (a new segment's: each flush converts
    /// the extents it writes; on some virtual disks a fresh block also costs the host an
    /// allocation).
    DirectFresh,
}

/// A group-commit-like durable append: groups of `group_bytes` (16 KiB appends for the page
/// cache; one aligned write for O_DIRECT), one fdatasync after each group, the next group only
/// after it, for `seconds` or `total_max` bytes (at least one group); MB/s (10^6).
pub fn group_commit_mb_per_s(
    work: &Path,
    how: GroupCommit,
    group_bytes: usize,
    seconds: f64,
    total_max: usize,
) -> f64 {
    const APPEND: usize = 16 << 10;
    let group_bytes = group_bytes.max(APPEND) / APPEND * APPEND;
    let groups_max = (total_max / group_bytes).max(1);
    let deadline = Duration::from_secs_f64(seconds);
    let path = work.join("group-commit.bin");
    let start;
    let mut groups = 0;
    match how {
        GroupCommit::PageCache => {
            let file = std::fs::File::create(&path).expect("create");
            let append = vec![0x3c_u8; APPEND];
            start = Instant::now();
            let mut at = 0u64;
            while groups == 0 || (groups < groups_max && start.elapsed() < deadline) {
                for _ in 0..group_bytes / APPEND {
                    file.write_all_at(&append, at).expect("write");
                    at += APPEND as u64;
                }
                file.sync_data().expect("fdatasync");
                groups += 1;
            }
        }
        GroupCommit::DirectPreallocated | GroupCommit::DirectFresh => {
            let file = open_direct(&path);
            let size = groups_max * group_bytes;
            preallocate(&file, size);
            // Preallocated blocks are unwritten extents: writing them converts the extents
            // (metadata). Zero-fill first so the measured flushes change no metadata, as in a
            // preallocated segment that was zeroed ahead of the appends.
            if how == GroupCommit::DirectPreallocated {
                let zeros = AlignedBuffer::new(1 << 20, 0);
                let mut at = 0usize;
                while at < size {
                    let n = (size - at).min(1 << 20);
                    file.write_all_at(&zeros.as_slice()[..n], at as u64)
                        .expect("O_DIRECT zero fill");
                    at += n;
                }
            }
            file.sync_all().expect("fsync");
            let group = AlignedBuffer::new(group_bytes, 0x3c);
            start = Instant::now();
            while groups == 0 || (groups < groups_max && start.elapsed() < deadline) {
                file.write_all_at(group.as_slice(), (groups * group_bytes) as u64)
                    .expect("O_DIRECT write");
                file.sync_data().expect("fdatasync");
                groups += 1;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    (groups * group_bytes) as f64 / seconds / 1e6
}

/// A record batch of 1 KiB records, about `bytes` bytes in all: the storage benchmarks' append.
pub fn batch_of_1k_records(bytes: usize) -> Vec<u8> {
    const RECORD_BYTES: usize = 1024;
    let mut builder = lockstep::log::batch::BatchBuilder::new(1_700_000_000_000);
    let value = vec![0x5a_u8; RECORD_BYTES];
    for i in 0..(bytes / (RECORD_BYTES + 16)).max(1) {
        builder.record(1_700_000_000_000 + i as i64, None, Some(&value));
    }
    builder.build()
}

/// The storage engine's group commit, measured: one partition log on the broker's io_uring
/// engine (`runtime::bench::group_commit_appends`), enough concurrent appenders of
/// `batch_bytes` batches to keep `bytes_in_flight` waiting for a flush (at least 4), each
/// waiting for its batch to be durable before its next append.
///
/// Judged against the machine's O_DIRECT bandwidth in pairs: each round measures the
/// reference ([`direct_write_mb_per_s`] of fresh data, [`DirectData::Fresh`]) and then the
/// engine, and the judged ratio is the median of the rounds' ratios. A virtual disk's bandwidth
/// drifts by up to 2× within a minute; a reference measured once, apart from the run it judges,
/// made the ratio a coin toss. After the engine, each round also measures the reference writing
/// one unchanged buffer ([`DirectData::Unchanged`], faster than any log can write), reported beside
/// the judged ratio.
#[derive(Clone, Debug, Serialize)]
pub struct EngineGroupCommit {
    pub batch_bytes: usize,
    pub appenders: usize,
    /// The steady state of a log that retention keeps at this size (its rolls reuse removed
    /// segments' files), judged against O_DIRECT rewrites of written blocks
    /// ([`direct_rewrite_mb_per_s`]); `None`: a new log, judged against O_DIRECT writes into a
    /// new file.
    pub retention_bytes: Option<u64>,
    /// Over all rounds.
    pub batches: u64,
    pub seconds: f64,
    /// Durable record-batch bytes per second, 10^6: the median of the rounds.
    pub mb_per_s: f64,
    /// What the judged reference writes ([`DirectData::Fresh`]).
    pub reference: DirectData,
    /// The judged O_DIRECT reference, the median of the rounds.
    pub direct_mb_per_s: f64,
    /// The median of the rounds' engine / reference ratios: the judged ratio.
    pub ratio: f64,
    /// The reference writing one unchanged buffer, the median of the rounds.
    pub unchanged_mb_per_s: f64,
    /// The median of the rounds' engine / unchanged-buffer reference ratios (not judged).
    pub unchanged_ratio: f64,
    /// The engine thread's CPU per MB appended (10^6 bytes), milliseconds, over all rounds.
    pub cpu_ms_per_mb: f64,
    /// Where the engine's time went, the mean of the rounds' timelines.
    pub timeline: lockstep::runtime::bench::Timeline,
    pub rounds: Vec<PairedRound>,
}

/// A group-commit run's timeline for a person: how long its flushes and the gaps between them
/// take, and how busy its write-behinds keep the disk.
pub fn timeline_line(t: &lockstep::runtime::bench::Timeline) -> String {
    format!(
        "engine timeline (mean of rounds): {} flushes, in flight {:.0}% of the run, {:.2} ms each, {:.2} ms from one's completion to the next; {} write-behinds, {:.2} ms p50, {:.1} in flight on average, none {:.0}% of the run",
        t.flushes,
        t.flush_busy * 100.0,
        t.flush_ms,
        t.between_flushes_ms,
        t.write_behinds,
        t.write_p50_ms,
        t.write_depth,
        t.writes_idle * 100.0
    )
}

/// The field-by-field mean of the rounds' timelines (counts rounded).
fn mean_timeline(
    rounds: &[lockstep::runtime::bench::Timeline],
) -> lockstep::runtime::bench::Timeline {
    let n = rounds.len().max(1) as f64;
    let mean =
        |f: fn(&lockstep::runtime::bench::Timeline) -> f64| rounds.iter().map(f).sum::<f64>() / n;
    lockstep::runtime::bench::Timeline {
        flushes: mean(|t| t.flushes as f64).round() as u64,
        flush_busy: mean(|t| t.flush_busy),
        flush_ms: mean(|t| t.flush_ms),
        between_flushes_ms: mean(|t| t.between_flushes_ms),
        write_behinds: mean(|t| t.write_behinds as f64).round() as u64,
        writes_idle: mean(|t| t.writes_idle),
        write_depth: mean(|t| t.write_depth),
        write_p50_ms: mean(|t| t.write_p50_ms),
    }
}

/// One round of [`EngineGroupCommit`]: the reference, the engine, then the reference writing
/// one unchanged buffer.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PairedRound {
    pub direct_mb_per_s: f64,
    pub engine_mb_per_s: f64,
    pub unchanged_mb_per_s: f64,
}

impl EngineGroupCommit {
    /// The lowest and highest ratio of a round.
    pub fn ratio_range(&self) -> (f64, f64) {
        let ratios = self
            .rounds
            .iter()
            .map(|r| r.engine_mb_per_s / r.direct_mb_per_s);
        (
            ratios.clone().fold(f64::INFINITY, f64::min),
            ratios.fold(0.0, f64::max),
        )
    }
}

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// `rounds` pairs (at least one) of the O_DIRECT reference (`direct_bytes`) and the engine's
/// group commit (`seconds` each); see [`EngineGroupCommit`].
pub fn engine_group_commit(
    work: &Path,
    batch_bytes: usize,
    bytes_in_flight: usize,
    seconds: f64,
    direct_bytes: usize,
    rounds: usize,
    retention_bytes: Option<u64>,
) -> EngineGroupCommit {
    let batch = batch_of_1k_records(batch_bytes);
    let appenders = (bytes_in_flight / batch.len()).max(4);
    let mut paired = Vec::new();
    let mut timelines = Vec::new();
    let (mut batches_total, mut seconds_total, mut cpu_total) = (0, 0.0, 0.0);
    for round in 0..rounds.max(1) {
        let reference = |data| match retention_bytes {
            Some(_) => direct_rewrite_mb_per_s(work, direct_bytes, data),
            None => direct_write_mb_per_s(work, direct_bytes, data),
        };
        let direct_mb_per_s = reference(DirectData::Fresh);
        let dir = work.join(format!("engine-group-commit-{batch_bytes}-{round}"));
        let run = lockstep::runtime::bench::group_commit_appends(
            &dir,
            &batch,
            appenders,
            Duration::from_secs_f64(seconds),
            retention_bytes,
        )
        .expect("group-commit run");
        let _ = std::fs::remove_dir_all(&dir);
        batches_total += run.batches;
        seconds_total += run.seconds;
        cpu_total += run.thread_cpu_seconds;
        timelines.push(run.timeline);
        paired.push(PairedRound {
            direct_mb_per_s,
            engine_mb_per_s: run.batches as f64 * batch.len() as f64 / run.seconds / 1e6,
            unchanged_mb_per_s: reference(DirectData::Unchanged),
        });
    }
    EngineGroupCommit {
        batch_bytes: batch.len(),
        appenders,
        retention_bytes,
        batches: batches_total,
        seconds: seconds_total,
        mb_per_s: median(paired.iter().map(|r| r.engine_mb_per_s)),
        reference: DirectData::Fresh,
        direct_mb_per_s: median(paired.iter().map(|r| r.direct_mb_per_s)),
        ratio: median(paired.iter().map(|r| r.engine_mb_per_s / r.direct_mb_per_s)),
        unchanged_mb_per_s: median(paired.iter().map(|r| r.unchanged_mb_per_s)),
        unchanged_ratio: median(
            paired
                .iter()
                .map(|r| r.engine_mb_per_s / r.unchanged_mb_per_s),
        ),
        cpu_ms_per_mb: cpu_total * 1e3 / (batches_total as f64 * batch.len() as f64 / 1e6),
        timeline: mean_timeline(&timelines),
        rounds: paired,
    }
}
