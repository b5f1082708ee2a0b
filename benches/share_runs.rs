//! Runs micro-benchmark: one share partition with 1 000 000 in-flight offsets,
//! acknowledged in randomly fragmented chunks, on runs (`SharePartition`) versus a per-offset
//! map (one `BTreeMap` entry per in-flight offset, the shape of a per-offset state table).
//!
//! Two workloads: `fragmented` acknowledges chunks of 1..=8 offsets in random order (the
//! worst case for runs), `contiguous` chunks of 1..=1000. Each reports transitions (offsets
//! changed) per second, acknowledge calls per second, the run count and bytes of heap per
//! run at peak fragmentation (half the chunks acknowledged), the per-offset map's figures,
//! and a transactional phase (lock the chunks into 10 transactions, commit 5, abort 5).
//! Heap bytes come from a counting global allocator.
//!
//! `cargo bench --bench share_runs` runs the full size (cargo passes `--bench`); without it
//! (`cargo test`, or `--quick`) it runs 10 000 offsets and checks the results, so the bench
//! cannot rot. The last line of output is one JSON object with every figure.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockstep::share::{AckBatch, AcknowledgeType, ShareConfig, SharePartition};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

struct CountingAllocator;

static HEAP_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to the system allocator with the caller's arguments; the
// counter is only bookkeeping.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HEAP_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded contract of `GlobalAlloc::alloc`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HEAP_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded contract of `GlobalAlloc::dealloc`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HEAP_BYTES.fetch_add(new_size, Ordering::Relaxed);
        HEAP_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded contract of `GlobalAlloc::realloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn heap_bytes() -> usize {
    HEAP_BYTES.load(Ordering::Relaxed)
}

const MEMBER: &str = "consumer-1";
const SEED: u64 = 0x5eed;

/// Disjoint chunks covering `[0, n)`, 1..=`max_len` offsets each, in random order, each with
/// an acknowledge type (50% ACCEPT, 25% RELEASE, 15% REJECT, 10% GAP).
fn chunks(n: i64, max_len: i64, rng: &mut SmallRng) -> Vec<(i64, i64, AcknowledgeType)> {
    let mut out = Vec::new();
    let mut first = 0;
    while first < n {
        let last = (first + rng.gen_range(0..max_len)).min(n - 1);
        let t = match rng.gen_range(0..100) {
            0..=49 => AcknowledgeType::Accept,
            50..=74 => AcknowledgeType::Release,
            75..=89 => AcknowledgeType::Reject,
            _ => AcknowledgeType::Gap,
        };
        out.push((first, last, t));
        first = last + 1;
    }
    out.shuffle(rng);
    out
}

struct RunsResult {
    ack_time: Duration,
    delta_time: Duration,
    transitions: u64,
    calls: u64,
    peak_runs: usize,
    peak_bytes: usize,
    delta_runs_written: u64,
    deltas: u64,
}

fn bench_runs(n: i64, chunks: &[(i64, i64, AcknowledgeType)], quick: bool) -> RunsResult {
    let config = ShareConfig {
        partition_max_record_locks: n as u32,
        ..ShareConfig::default()
    };
    let base = heap_bytes();
    let mut p = SharePartition::new(config, 0);
    p.take_delta();
    let got = p.acquire(MEMBER, n, n as u32, 0);
    assert_eq!(got.len(), 1);
    assert_eq!(p.run_count(), 1);
    let (mut ack_time, mut delta_time) = (Duration::ZERO, Duration::ZERO);
    let (mut transitions, mut calls, mut delta_runs_written, mut deltas) = (0u64, 0u64, 0u64, 0u64);
    let (mut peak_runs, mut peak_bytes) = (0, 0);
    let half = chunks.len() / 2;
    for (i, &(first, last, t)) in chunks.iter().enumerate() {
        let batch = [AckBatch::new(first, last, t)];
        let start = Instant::now();
        let counts = p.acknowledge(MEMBER, &batch, 1).expect("chunk is held");
        ack_time += start.elapsed();
        transitions += counts.acknowledged + counts.archived + counts.released;
        calls += 1;
        if i % 1024 == 1023 {
            // The journal's cadence: one delta per 1024 acknowledgements.
            let start = Instant::now();
            let delta = p.take_delta().expect("acks changed the durable view");
            delta_time += start.elapsed();
            delta_runs_written += delta.runs.len() as u64;
            deltas += 1;
        }
        if i == half {
            peak_runs = p.run_count();
            peak_bytes = heap_bytes() - base;
        }
        if quick && i % 97 == 0 {
            p.check_invariants();
        }
    }
    assert_eq!(transitions, n as u64);
    assert_eq!(p.acquired_records(), 0);
    p.check_invariants();
    RunsResult {
        ack_time,
        delta_time,
        transitions,
        calls,
        peak_runs,
        peak_bytes,
        delta_runs_written,
        deltas,
    }
}

/// The per-offset baseline: one entry per in-flight offset.
#[derive(Clone, Copy)]
#[allow(dead_code)] // fields stand for the state a per-offset table keeps
struct OffsetEntry {
    state: u8,
    delivery_count: u16,
    member: u32,
    deadline_ms: u64,
}

struct MapResult {
    ack_time: Duration,
    transitions: u64,
    bytes: usize,
}

fn bench_map(n: i64, chunks: &[(i64, i64, AcknowledgeType)]) -> MapResult {
    const ACQUIRED: u8 = 1;
    let base = heap_bytes();
    let mut map: BTreeMap<i64, OffsetEntry> = BTreeMap::new();
    for o in 0..n {
        map.insert(
            o,
            OffsetEntry {
                state: ACQUIRED,
                delivery_count: 1,
                member: 7,
                deadline_ms: 30_000,
            },
        );
    }
    let bytes = heap_bytes() - base;
    let mut spso = 0;
    let mut transitions = 0u64;
    let start = Instant::now();
    for &(first, last, t) in chunks {
        // All-or-nothing, as the partition: check every offset, then change it.
        assert!((first..=last).all(|o| map
            .get(&o)
            .is_some_and(|e| e.state == ACQUIRED && e.member == 7)));
        for o in first..=last {
            let e = map.get_mut(&o).expect("checked");
            e.state = match t {
                AcknowledgeType::Accept => 2,
                AcknowledgeType::Release => 0,
                _ => 4,
            };
            e.member = 0;
            e.deadline_ms = 0;
            transitions += 1;
        }
        while map.get(&spso).is_some_and(|e| e.state == 2 || e.state == 4) {
            map.remove(&spso);
            spso += 1;
        }
    }
    MapResult {
        ack_time: start.elapsed(),
        transitions,
        bytes,
    }
}

struct TxnResult {
    lock_time: Duration,
    decide_time: Duration,
    locked: u64,
    decided: u64,
}

fn bench_transactions(n: i64, chunks: &[(i64, i64, AcknowledgeType)]) -> TxnResult {
    let config = ShareConfig {
        partition_max_record_locks: n as u32,
        ..ShareConfig::default()
    };
    let mut p = SharePartition::new(config, 0);
    p.acquire(MEMBER, n, n as u32, 0);
    let txns: Vec<String> = (0..10).map(|k| format!("g-job-{k}")).collect();
    let start = Instant::now();
    let mut locked = 0;
    for (i, &(first, last, t)) in chunks.iter().enumerate() {
        let t = if t == AcknowledgeType::Release {
            AcknowledgeType::Accept
        } else {
            t
        };
        locked += p
            .lock(MEMBER, &txns[i % 10], &[AckBatch::new(first, last, t)])
            .expect("held");
    }
    let lock_time = start.elapsed();
    let start = Instant::now();
    let mut decided = 0;
    for (k, txn) in txns.iter().enumerate() {
        if k % 2 == 0 {
            let c = p.commit(txn);
            decided += c.acknowledged + c.archived;
        } else {
            decided += p.abort(txn);
        }
    }
    let decide_time = start.elapsed();
    assert_eq!((locked, decided), (n as u64, n as u64));
    assert_eq!(p.locked_records(), 0);
    p.check_invariants();
    TxnResult {
        lock_time,
        decide_time,
        locked,
        decided,
    }
}

fn per_sec(count: u64, time: Duration) -> f64 {
    count as f64 / time.as_secs_f64().max(1e-9)
}

/// One workload: chunks of 1..=`max_len` offsets over `n` in-flight offsets.
fn workload(name: &str, n: i64, max_len: i64, quick: bool) {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let chunks = chunks(n, max_len, &mut rng);
    let runs = bench_runs(n, &chunks, quick);
    let map = bench_map(n, &chunks);
    let txn = bench_transactions(n, &chunks);

    let bytes_per_run = runs.peak_bytes as f64 / runs.peak_runs as f64;
    let map_bytes_per_offset = map.bytes as f64 / n as f64;
    let deltas = runs.deltas;
    println!(
        "share_runs/{name}: {n} in-flight offsets, {} acknowledge calls of 1..={max_len} offsets (seed {SEED:#x})",
        runs.calls
    );
    println!(
        "  runs:       {:>12.0} transitions/s {:>10.0} acks/s   peak {} runs, {:.1} bytes/run ({:.2} MiB)",
        per_sec(runs.transitions, runs.ack_time),
        per_sec(runs.calls, runs.ack_time),
        runs.peak_runs,
        bytes_per_run,
        runs.peak_bytes as f64 / (1 << 20) as f64
    );
    println!(
        "  deltas:     {} runs written in {deltas} deltas (one per 1024 acks), {:.1} us per delta",
        runs.delta_runs_written,
        runs.delta_time.as_secs_f64() * 1e6 / deltas.max(1) as f64
    );
    println!(
        "  per-offset: {:>12.0} transitions/s   {:.1} bytes/offset ({:.2} MiB)",
        per_sec(map.transitions, map.ack_time),
        map_bytes_per_offset,
        map.bytes as f64 / (1 << 20) as f64
    );
    println!(
        "  txn:        lock {:>12.0} records/s; commit+abort of 10 transactions {:>12.0} records/s",
        per_sec(txn.locked, txn.lock_time),
        per_sec(txn.decided, txn.decide_time)
    );
    println!(
        "{{\"bench\":\"share_runs/{name}\",\"quick\":{quick},\"offsets\":{n},\"chunk_offsets_max\":{max_len},\"ack_calls\":{},\"runs_transitions_per_s\":{:.0},\"runs_acks_per_s\":{:.0},\"peak_runs\":{},\"peak_heap_bytes\":{},\"bytes_per_run\":{:.1},\"map_transitions_per_s\":{:.0},\"map_heap_bytes\":{},\"map_bytes_per_offset\":{:.1},\"txn_lock_records_per_s\":{:.0},\"txn_decide_records_per_s\":{:.0}}}",
        runs.calls,
        per_sec(runs.transitions, runs.ack_time),
        per_sec(runs.calls, runs.ack_time),
        runs.peak_runs,
        runs.peak_bytes,
        bytes_per_run,
        per_sec(map.transitions, map.ack_time),
        map.bytes,
        map_bytes_per_offset,
        per_sec(txn.locked, txn.lock_time),
        per_sec(txn.decided, txn.decide_time),
    );
    if quick {
        // Sanity of the figures, not of the speed: chunks fragment the runs, and a run costs
        // memory of the order of a map entry, not of a whole offset range.
        assert!(
            runs.peak_runs > 10,
            "fragmentation happened: {} runs",
            runs.peak_runs
        );
        assert!(
            bytes_per_run > 8.0 && bytes_per_run < 1024.0,
            "bytes/run {bytes_per_run}"
        );
        assert!(
            map_bytes_per_offset > 8.0,
            "map bytes/offset {map_bytes_per_offset}"
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick") || !args.iter().any(|a| a == "--bench");
    let n: i64 = if quick { 10_000 } else { 1_000_000 };
    workload("fragmented", n, 8, quick);
    workload("contiguous", n, 1_000, quick);
}
