//! Random operation sequences on a `PartitionLog<SimStorage>` against a trivial model.
//!
//! The model is a `Vec` of every batch appended (bytes as the log must store them, base offset
//! assigned), the log start offset, and durability watermarks. Operations: append, synchronous
//! flush, asynchronous flush (ticket held while more appends arrive; begun amid write-behinds,
//! it covers the batches below the first in flight; its I/O done at once or at completion,
//! so writes that land while it is in flight are not covered), roll by age, retention,
//! delete-records, reads at random offsets and sizes, ListOffsets by timestamp, injected write
//! and fsync failures, clean reopen, and power-loss crash + reopen.
//!
//! What it proves, for every seed:
//! - reads return exactly the model's batches (whole batches, the one containing the offset
//!   first, at least one, then as many as fit) and refuse offsets outside [start, end];
//! - after a crash, every offset the log claimed durable (`durable_end_offset`) is there
//!   byte-exact, the log ends on a batch boundary of the model (a prefix of the non-durable
//!   batches may survive, nothing else), and the log start is between the last durable start
//!   and the current one;
//! - after a failed write or fsync every write is refused with `Poisoned`.
//!
//! Seeds: `LOCKSTEP_SEEDS` (default 300) seeds from 0, every fourth one a producer's stream
//! (big batches into 4 MiB segments: write-behinds, flushes amid them); a failing seed is
//! printed and replays alone with `LOCKSTEP_SEED=<seed>`.

use lockstep::log::batch::{self, BatchBuilder};
use lockstep::log::{FlushTicket, LogConfig, LogError, PartitionLog, WriteBehind};
use lockstep::storage::file::{SimStorage, Storage, StorageFile};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::path::Path;

const OPS_PER_SEED: usize = 200;

/// What a run exercised, summed over seeds, so a run that tests nothing fails.
#[derive(Default, Debug)]
struct Stats {
    crashes: u64,
    torn_tails_cut: u64,
    nondurable_kept: u64,
    nondurable_lost: u64,
    rolls: u64,
    /// Rolls into a spare file (a reused one).
    reused_rolls: u64,
    /// Crash recoveries that kept a reused file's earlier bytes after the last frame.
    reused_tails_kept: u64,
    segments_removed: u64,
    poisonings: u64,
    async_flushes: u64,
    /// Write-behinds handed out, and those completed.
    write_behinds: u64,
    write_behinds_done: u64,
    /// Flushes begun amid write-behinds (covering the batches below the first in flight).
    prefix_flushes: u64,
    reads: u64,
}

#[derive(Clone)]
struct ModelBatch {
    base: u64,
    count: u64,
    bytes: Vec<u8>,
    max_timestamp: i64,
}

struct Model {
    batches: Vec<ModelBatch>,
    start: u64,
    /// Lower bound of the log start after a crash: the start made durable by the last
    /// successful flush (or found at the last open).
    durable_start: u64,
    poisoned: bool,
}

impl Model {
    /// A batch the log appended at `base` (stored with that base offset).
    fn record(&mut self, bytes: &[u8], base: u64) {
        let header = batch::validate(bytes).unwrap();
        let mut stored = bytes.to_vec();
        batch::set_base_offset(&mut stored, base as i64);
        self.batches.push(ModelBatch {
            base,
            count: header.records_count as u64,
            bytes: stored,
            max_timestamp: header.max_timestamp,
        });
    }

    fn end(&self) -> u64 {
        self.batches.last().map_or(0, |b| b.base + b.count)
    }

    fn containing(&self, offset: u64) -> usize {
        self.batches
            .iter()
            .position(|b| b.base <= offset && offset < b.base + b.count)
            .expect("offset inside the model")
    }

    /// Expected (first offset, next offset, concatenated bytes) of `read(offset, max_bytes)`.
    fn read(&self, offset: u64, max_bytes: usize) -> Option<(u64, u64, Vec<u8>)> {
        if offset < self.start || offset > self.end() {
            return None;
        }
        if offset == self.end() {
            return Some((offset, offset, Vec::new()));
        }
        let first = self.containing(offset);
        let mut bytes = self.batches[first].bytes.clone();
        let mut next = self.batches[first].base + self.batches[first].count;
        for b in &self.batches[first + 1..] {
            if bytes.len() >= max_bytes || bytes.len() + b.bytes.len() > max_bytes {
                break;
            }
            bytes.extend_from_slice(&b.bytes);
            next = b.base + b.count;
        }
        Some((self.batches[first].base, next, bytes))
    }

    fn offset_for_timestamp(&self, ts: i64) -> Option<(u64, i64)> {
        self.batches
            .iter()
            .find(|b| b.base + b.count > self.start && b.max_timestamp >= ts)
            .map(|b| (b.base.max(self.start), b.max_timestamp))
    }
}

/// A batch of 1 to 4 records, mostly small; `big`: 2 to 20 KB values (tail chunks fill, and
/// the log writes them behind).
fn random_batch(rng: &mut SmallRng, now_ms: u64, big: bool) -> Vec<u8> {
    let records = rng.gen_range(1..=4);
    let mut builder = BatchBuilder::new(now_ms as i64);
    for i in 0..records {
        let len = if big {
            rng.gen_range(2000..20000)
        } else if rng.gen_bool(0.05) {
            rng.gen_range(1000..2500)
        } else {
            rng.gen_range(0..200)
        };
        let value: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let key = rng.gen_bool(0.5).then(|| format!("key-{i}").into_bytes());
        builder.record(now_ms as i64 + i as i64, key.as_deref(), Some(&value));
    }
    builder.build()
}

fn random_config(rng: &mut SmallRng) -> LogConfig {
    LogConfig {
        segment_bytes: [1024, 2048, 4096, 16384, 1 << 20][rng.gen_range(0..5)],
        segment_ms: rng.gen_range(50..2000),
        retention_bytes: rng.gen_bool(0.5).then(|| rng.gen_range(2000..20000)),
        retention_ms: rng.gen_bool(0.3).then(|| rng.gen_range(100..3000)),
        index_interval_bytes: [64, 256, 1024, 4096][rng.gen_range(0..4)],
        segment_spares: rng.gen_range(0..=2),
    }
}

fn dir() -> &'static Path {
    Path::new("/data/topic-0")
}

fn check_poisoned<T: std::fmt::Debug>(result: Result<T, LogError>, seed: u64, what: &str) {
    match result {
        Err(LogError::Poisoned { .. }) => {}
        other => panic!("seed {seed}: {what} on a poisoned log gave {other:?}"),
    }
}

/// Checks the whole readable log against the model.
fn check_contents(log: &PartitionLog<SimStorage>, model: &Model, seed: u64) {
    assert_eq!(
        log.log_start_offset(),
        model.start,
        "seed {seed}: log start"
    );
    assert_eq!(log.log_end_offset(), model.end(), "seed {seed}: log end");
    if model.start < model.end() {
        let all = log.read(model.start, usize::MAX).unwrap();
        let expected = model.read(model.start, usize::MAX).unwrap();
        assert_eq!(
            (all.first_offset, all.next_offset),
            (expected.0, expected.1),
            "seed {seed}"
        );
        assert!(
            all.records == expected.2,
            "seed {seed}: log bytes differ from the model"
        );
    }
    if model.start > 0 {
        assert!(
            matches!(
                log.read(model.start - 1, 100),
                Err(LogError::OffsetOutOfRange { .. })
            ),
            "seed {seed}: read below the start"
        );
    }
}

/// `streaming`: a producer's stream, where write-behinds matter: segments of 4 MiB (rolled by
/// size, retention by size only), big
/// batches, most reads replaced by write-behind completions and most synchronous flushes,
/// failures and crashes by appends (so that flushes begin amid write-behinds of which the
/// first ones completed).
fn run_seed(seed: u64, streaming: bool, stats: &mut Stats) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut config = random_config(&mut rng);
    if streaming {
        config.segment_bytes = 4 << 20;
        config.segment_ms = 3_600_000;
        config.retention_bytes = config.retention_bytes.map(|_| 6 << 20);
        config.retention_ms = None;
    }
    let mut storage = SimStorage::new();
    let mut now_ms: u64 = 1_000_000;
    let (mut log, _) = PartitionLog::open(storage.clone(), dir(), config.clone(), now_ms)
        .unwrap_or_else(|e| panic!("seed {seed}: open: {e}"));
    let mut model = Model {
        batches: Vec::new(),
        start: 0,
        durable_start: 0,
        poisoned: false,
    };
    // Big batches fill tail chunks: in a segment of 1 MiB the log writes them behind.
    let big = streaming || rng.gen_bool(0.3);
    // An asynchronous flush in flight: its ticket, the log start when it began, and the
    // result of its I/O if that was done at once.
    let mut in_flight: Option<(FlushTicket, u64, Option<std::io::Result<()>>)> = None;
    // Write-behinds in flight (their chunks may have landed, unsynced).
    let mut behind: Vec<WriteBehind> = Vec::new();
    // Completes write-behinds as the runtime does: each chunk written and synced.
    let complete = |log: &mut PartitionLog<SimStorage>,
                    storage: &SimStorage,
                    write: WriteBehind,
                    model: &mut Model,
                    stats: &mut Stats| {
        let result = lockstep::log::write_behind(storage, &write);
        let ok = result.is_ok();
        let completed = log.complete_write_behind(write, result);
        assert_eq!(completed.is_ok(), ok, "seed {seed}");
        model.poisoned |= !ok;
        stats.write_behinds_done += 1;
    };
    let trace = std::env::var_os("LOG_MODEL_TRACE").is_some();

    for step in 0..OPS_PER_SEED {
        now_ms += rng.gen_range(0..30);
        let op = match rng.gen_range(0..100) {
            75..=87 if streaming && rng.gen_bool(0.7) => 71,
            45..=52 | 88.. if streaming && rng.gen_bool(0.7) => 0,
            op => op,
        };
        if trace {
            eprintln!(
                "step {step} op {op} start {} end {} durable {} durable_start {} poisoned {}",
                model.start,
                model.end(),
                log.durable_end_offset(),
                model.durable_start,
                model.poisoned
            );
            let segments: Vec<String> = log
                .segments()
                .iter()
                .map(|s| format!("{}..{}({}B)", s.base_offset, s.next_offset, s.size_bytes))
                .collect();
            eprintln!(
                "    segments {} flush_due {} in_flight {:?}",
                segments.join(" "),
                log.flush_due(),
                in_flight
                    .as_ref()
                    .map(|(t, _, _)| (t.durable_end_offset, t.seal.is_some()))
            );
        }
        match op {
            // Append.
            0..=44 => {
                // A stream appends in bursts (tail chunks run full between flushes).
                let burst = if streaming { rng.gen_range(1..=8) } else { 1 };
                for _ in 0..burst {
                    let bytes = random_batch(&mut rng, now_ms, big);
                    let spares = log.spare_count();
                    let result = log.append(&bytes, now_ms);
                    if model.poisoned {
                        check_poisoned(result, seed, "append");
                        continue;
                    }
                    let info =
                        result.unwrap_or_else(|e| panic!("seed {seed} step {step}: append: {e}"));
                    assert_eq!(
                        info.base_offset,
                        model.end(),
                        "seed {seed}: assigned offset"
                    );
                    model.record(&bytes, info.base_offset);
                    assert_eq!(info.last_offset + 1, model.end());
                    stats.rolls += u64::from(info.rolled);
                    stats.reused_rolls += u64::from(info.rolled && log.spare_count() < spares);
                    if rng.gen_bool(0.7) {
                        if let Some(write) = log.take_write_behind() {
                            // The chunks may land at once, last first (the crash double keeps a
                            // prefix of the unsynced writes: a hole before a landed chunk).
                            if rng.gen_bool(0.5) {
                                for chunk in write.chunks.iter().rev() {
                                    let file = storage.open(&chunk.path).unwrap();
                                    let _ = file.write_direct_at(chunk.bytes(), chunk.position);
                                }
                            }
                            behind.push(write);
                            stats.write_behinds += 1;
                        }
                    }
                }
            }
            // Synchronous flush.
            45..=52 => {
                if in_flight.is_some() {
                    continue;
                }
                for write in behind.drain(..) {
                    complete(&mut log, &storage, write, &mut model, stats);
                }
                let result = log.flush();
                if model.poisoned {
                    check_poisoned(result, seed, "flush");
                } else {
                    result.unwrap_or_else(|e| panic!("seed {seed}: flush: {e}"));
                    assert_eq!(log.durable_end_offset(), model.end(), "seed {seed}");
                    model.durable_start = model.start;
                }
            }
            // Begin or complete an asynchronous flush.
            53..=60 => match in_flight.take() {
                None => {
                    // Amid write-behinds the ticket covers only the batches below the first one
                    // in flight (none if it would cover nothing new).
                    let amid = !behind.is_empty() && (streaming || rng.gen_bool(0.5));
                    if !amid {
                        for write in behind.drain(..) {
                            complete(&mut log, &storage, write, &mut model, stats);
                        }
                    }
                    let durable = log.durable_end_offset();
                    if let Some(ticket) = log.begin_flush() {
                        assert!(!model.poisoned);
                        let target = ticket.durable_end_offset;
                        if amid {
                            assert!(target > durable && target <= model.end(), "seed {seed}");
                            assert!(ticket.chunks.is_empty() && ticket.zero_fills.is_empty());
                            stats.prefix_flushes += 1;
                        } else {
                            assert_eq!(target, model.end());
                        }
                        // Its I/O done now (the later write-behinds' completions are not
                        // covered) or when it completes.
                        let done = rng
                            .gen_bool(0.5)
                            .then(|| lockstep::log::sync_ticket(&storage, &ticket));
                        in_flight = Some((ticket, model.start, done));
                    }
                }
                Some((ticket, start_at_begin, done)) => {
                    let target = ticket.durable_end_offset;
                    let result =
                        done.unwrap_or_else(|| lockstep::log::sync_ticket(&storage, &ticket));
                    let ok = result.is_ok();
                    let completed = log.complete_flush(ticket, result);
                    assert_eq!(completed.is_ok(), ok, "seed {seed}");
                    stats.async_flushes += 1;
                    if ok {
                        assert!(log.durable_end_offset() >= target);
                        model.durable_start = model.durable_start.max(start_at_begin);
                    } else {
                        model.poisoned = true;
                    }
                }
            },
            // Roll by age.
            61..=64 => {
                now_ms += rng.gen_range(0..3000);
                let spares = log.spare_count();
                let result = log.roll_if_due(now_ms);
                if model.poisoned {
                    check_poisoned(result, seed, "roll");
                } else {
                    let rolled = result.unwrap_or_else(|e| panic!("seed {seed}: roll: {e}"));
                    stats.rolls += u64::from(rolled);
                    stats.reused_rolls += u64::from(rolled && log.spare_count() < spares);
                }
            }
            // Retention.
            65..=68 => {
                let old_start = model.start;
                let result = log.enforce_retention(now_ms);
                if model.poisoned {
                    check_poisoned(result, seed, "retention");
                    continue;
                }
                let removed = result.unwrap_or_else(|e| panic!("seed {seed}: retention: {e}"));
                stats.segments_removed += removed.len() as u64;
                if let Some(last) = removed.last() {
                    if last.next_offset > model.start {
                        // Segments end on batch boundaries.
                        assert!(
                            last.next_offset == model.end()
                                || model.batches.iter().any(|b| b.base == last.next_offset),
                            "seed {seed}: segment ends inside a batch"
                        );
                    }
                    model.start = model.start.max(last.next_offset);
                }
                assert!(model.start >= old_start);
                assert_eq!(log.log_start_offset(), model.start, "seed {seed}");
                assert!(
                    config.retention_bytes.is_some()
                        || config.retention_ms.is_some()
                        || removed.is_empty()
                );
            }
            // DeleteRecords.
            69..=70 => {
                let target = rng.gen_range(model.start..=model.end());
                let result = log.delete_records_before(target);
                if model.poisoned {
                    check_poisoned(result, seed, "delete_records_before");
                } else {
                    let start = result.unwrap_or_else(|e| panic!("seed {seed}: delete: {e}"));
                    model.start = model.start.max(target);
                    assert_eq!(start, model.start);
                }
            }
            // Complete one write-behind.
            71..=74 => {
                if !behind.is_empty() {
                    let write = behind.swap_remove(rng.gen_range(0..behind.len()));
                    complete(&mut log, &storage, write, &mut model, stats);
                }
            }
            // Reads.
            75..=84 => {
                let hi = model.end() + 2;
                let offset = rng.gen_range(model.start.saturating_sub(2)..=hi);
                let max_bytes = [0, 1, 100, 1000, 5000, usize::MAX][rng.gen_range(0..6)];
                let got = log.read(offset, max_bytes);
                stats.reads += 1;
                match (model.read(offset, max_bytes), got) {
                    (None, Err(LogError::OffsetOutOfRange { .. })) => {}
                    (Some((first, next, bytes)), Ok(r)) => {
                        assert_eq!(
                            (r.first_offset, r.next_offset),
                            (first, next),
                            "seed {seed} step {step}: read {offset}"
                        );
                        assert!(
                            r.records == bytes,
                            "seed {seed} step {step}: read {offset} bytes differ"
                        );
                        assert_eq!(r.log_end_offset, model.end());
                    }
                    (expected, got) => panic!(
                        "seed {seed} step {step}: read {offset}: expected {:?}, got {got:?}",
                        expected.map(|e| (e.0, e.1))
                    ),
                }
            }
            // ListOffsets by timestamp.
            85..=87 => {
                let ts = now_ms as i64 - rng.gen_range(-5..500);
                let got = log.offset_for_timestamp(ts).unwrap();
                assert_eq!(
                    got,
                    model.offset_for_timestamp(ts),
                    "seed {seed}: timestamp {ts}"
                );
            }
            // Injected failures: the next sync or write fails, and the log is poisoned.
            88..=89 => {
                if model.poisoned || in_flight.is_some() {
                    continue;
                }
                for write in behind.drain(..) {
                    complete(&mut log, &storage, write, &mut model, stats);
                }
                if model.poisoned {
                    continue;
                }
                if rng.gen_bool(0.5) {
                    storage.fail_next_sync();
                    match log.flush() {
                        Ok(()) => storage.clear_faults(), // nothing was unsynced
                        Err(LogError::Poisoned { cause }) => {
                            assert!(cause.contains("injected"), "seed {seed}: {cause}");
                            model.poisoned = true;
                        }
                        Err(e) => panic!("seed {seed}: unexpected {e}"),
                    }
                } else {
                    // Appends are written behind: the failing write is the next flush's block
                    // write (or a roll's seal, which fails the append itself).
                    storage.fail_next_write();
                    let bytes = random_batch(&mut rng, now_ms, big);
                    if let Ok(info) = log.append(&bytes, now_ms) {
                        model.record(&bytes, info.base_offset);
                        assert!(log.flush().is_err(), "seed {seed}");
                    }
                    model.poisoned = true;
                }
                assert_eq!(log.is_poisoned(), model.poisoned);
                stats.poisonings += u64::from(model.poisoned);
            }
            // Clean reopen (process restart without power loss).
            90..=92 => {
                if model.poisoned {
                    continue;
                }
                in_flight = None;
                behind.clear();
                log.close()
                    .unwrap_or_else(|e| panic!("seed {seed}: close: {e}"));
                let (reopened, report) =
                    PartitionLog::open(storage.clone(), dir(), config.clone(), now_ms)
                        .unwrap_or_else(|e| panic!("seed {seed}: clean reopen: {e}"));
                log = reopened;
                assert!(
                    report.truncated.is_empty(),
                    "seed {seed}: clean reopen cut {:?}",
                    report.truncated
                );
                assert!(report.indexes_rebuilt.is_empty(), "seed {seed}");
                // A log start not flushed yet may revert to the durable one.
                let start = log.log_start_offset();
                assert!(
                    start >= model.durable_start && start <= model.start,
                    "seed {seed}: reopened start {start} outside [{}, {}]",
                    model.durable_start,
                    model.start
                );
                model.start = start;
                check_contents(&log, &model, seed);
                model.durable_start = model.start;
            }
            // Power loss.
            _ => {
                stats.crashes += 1;
                let claimed_durable = log.durable_end_offset();
                let old_start = model.start;
                drop(log);
                in_flight = None;
                behind.clear();
                storage = storage.crash(rng.gen());
                let (reopened, report) =
                    PartitionLog::open(storage.clone(), dir(), config.clone(), now_ms)
                        .unwrap_or_else(|e| {
                            panic!("seed {seed} step {step}: open after crash: {e}")
                        });
                log = reopened;
                let end = log.log_end_offset();
                let start = log.log_start_offset();
                assert!(
                    end >= claimed_durable,
                    "seed {seed} step {step}: lost durable data: recovered end {end} < durable {claimed_durable}"
                );
                assert!(
                    end <= model.end(),
                    "seed {seed}: recovered data never written"
                );
                assert!(
                    end == 0 || model.batches.iter().any(|b| b.base + b.count == end),
                    "seed {seed}: recovered end {end} is not a batch boundary"
                );
                assert!(
                    start >= model.durable_start && start <= old_start,
                    "seed {seed} step {step}: recovered start {start} outside [{}, {old_start}] (end {end})",
                    model.durable_start
                );
                stats.torn_tails_cut += u64::from(!report.truncated.is_empty());
                stats.reused_tails_kept += u64::from(!report.reused_tails.is_empty());
                stats.nondurable_kept += u64::from(end > claimed_durable);
                stats.nondurable_lost += u64::from(end < model.end());
                model.batches.retain(|b| b.base + b.count <= end);
                model.start = start;
                model.durable_start = start;
                model.poisoned = false;
                assert_eq!(log.durable_end_offset(), end);
                check_contents(&log, &model, seed);
            }
        }
    }
    // Finally: everything flushed survives one more crash exactly.
    for write in behind.drain(..) {
        complete(&mut log, &storage, write, &mut model, stats);
    }
    if !model.poisoned && in_flight.is_none() {
        log.flush().unwrap();
        drop(log);
        let storage = storage.crash(rng.gen());
        let (log, _) = PartitionLog::open(storage, dir(), config, now_ms).unwrap();
        model.durable_start = model.start;
        check_contents(&log, &model, seed);
    }
}

#[test]
fn random_operations_match_the_model() {
    let replay: Option<u64> = std::env::var("LOCKSTEP_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let first = replay.unwrap_or(0);
    let seeds: u64 = std::env::var("LOCKSTEP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if replay.is_some() { 1 } else { 300 });
    let mut stats = Stats::default();
    for seed in first..first + seeds {
        // Every fourth seed a producer's stream (write-behinds, flushes amid them).
        let streaming = seed % 4 == 3;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_seed(seed, streaming, &mut stats)
        }));
        if let Err(panic) = result {
            eprintln!("log_model: seed {seed} failed; replay with LOCKSTEP_SEED={seed}");
            std::panic::resume_unwind(panic);
        }
    }
    eprintln!("log_model: {seeds} seeds from {first}: {stats:?}");
    if seeds >= 100 {
        // The run must have exercised every kind of event it claims to test.
        assert!(stats.crashes > 0 && stats.torn_tails_cut > 0, "{stats:?}");
        assert!(
            stats.nondurable_kept > 0 && stats.nondurable_lost > 0,
            "{stats:?}"
        );
        assert!(stats.rolls > 0 && stats.segments_removed > 0, "{stats:?}");
        assert!(
            stats.reused_rolls > 0 && stats.reused_tails_kept > 0,
            "{stats:?}"
        );
        assert!(
            stats.poisonings > 0 && stats.async_flushes > 0 && stats.reads > 0,
            "{stats:?}"
        );
        assert!(
            stats.write_behinds > 0 && stats.write_behinds_done > 0 && stats.prefix_flushes > 0,
            "{stats:?}"
        );
    }
}
