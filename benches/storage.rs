//! Storage benchmark: durable append throughput of the partition log, beside the
//! machine's own limits measured in the same run.
//!
//! - machine: O_DIRECT sequential write bandwidth (1 MiB blocks of fresh data:
//!   `common::DirectData`), and the 4 KiB write +
//!   fdatasync rate;
//! - log, flush per append: append one batch, flush, repeat (16 KiB and 1 MiB batches of
//!   1 KiB records);
//! - log, group commit: several appenders on one shard, each appending and waiting for its
//!   batch to be durable; flushes go through io_uring and appends that arrive while a flush is
//!   in flight share the next one; judged in rounds, each the O_DIRECT reference (fresh data)
//!   and then the engine, by the median of the rounds' ratios (`common::engine_group_commit`;
//!   the ratio against a reference writing one unchanged buffer is printed beside it);
//! - journal, flush per entry: the state journal appends one share-partition entry and flushes
//!   it through the engine (block write + zeros written ahead), repeat; flush latency and CPU
//!   per flush (`--journal` runs only this case; `LOCKSTEP_JOURNAL_ZEROS=off` writes no zeros,
//!   for comparison).
//!
//! `--group-commit` runs only the group-commit cases of 16 KiB batches (the target's): a new log
//! against O_DIRECT writes into a new file, and the steady state of a log under retention, whose
//! rolls reuse removed segments' files (FORMAT.md §5), against O_DIRECT rewrites of written
//! blocks.
//!
//! `cargo bench --bench storage` runs the full measurement and writes
//! `target/bench-reports/storage.json`. Under `cargo test` (no `--bench` argument) the same
//! code runs once on tiny inputs so it cannot rot. `--dir PATH` puts the files on another
//! file system (default: a temporary directory under `target/`).

#[path = "common/mod.rs"]
mod common;

use lockstep::log::{LogConfig, PartitionLog};
use lockstep::storage::file::FsStorage;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The broker's allocator, so that the in-process engine runs write full tail chunks from huge
/// pages as the broker does ([`lockstep::runtime::huge_chunks`]).
#[global_allocator]
static ALLOCATOR: lockstep::runtime::huge_chunks::HugeChunks =
    lockstep::runtime::huge_chunks::HugeChunks;

/// Sizes of one run: the full measurement, or the smoke run under `cargo test`.
#[derive(Clone, Copy, Serialize)]
struct Plan {
    seconds_per_case: f64,
    direct_write_bytes: usize,
    fdatasync_ops_max: usize,
    /// Group commit: enough concurrent appenders to keep this many bytes waiting for a flush
    /// (a broker with many producers and partitions), at least 4 of them.
    group_commit_bytes_in_flight: usize,
    /// Group commit: rounds of (O_DIRECT reference, engine), and each engine run's length.
    group_commit_rounds: usize,
    group_commit_seconds: f64,
    /// Group commit, steady state: retention keeps the log at this size, so rolls reuse the
    /// removed segments' files (FORMAT.md §5).
    group_commit_retention_bytes: u64,
}

const FULL: Plan = Plan {
    seconds_per_case: 5.0,
    direct_write_bytes: 1 << 30,
    fdatasync_ops_max: 100_000,
    group_commit_bytes_in_flight: 16 << 20,
    group_commit_rounds: 5,
    group_commit_seconds: 2.0,
    group_commit_retention_bytes: 512 << 20,
};
const SMOKE: Plan = Plan {
    seconds_per_case: 0.05,
    direct_write_bytes: 4 << 20,
    fdatasync_ops_max: 20,
    group_commit_bytes_in_flight: 64 << 10,
    group_commit_rounds: 1,
    group_commit_seconds: 0.05,
    group_commit_retention_bytes: 2 << 20,
};

#[derive(Serialize)]
struct Report {
    commit: String,
    machine: serde_json::Value,
    plan: Plan,
    /// What the O_DIRECT sequential write probe writes ([`common::DirectData::Fresh`]).
    direct_write_data: common::DirectData,
    direct_write_mb_per_s: f64,
    /// 8 MiB O_DIRECT write + fdatasync, repeated, into preallocated never-written extents
    /// (what the engine's group commit writes into): the raw ceiling of a fresh segment.
    fresh_durable_mb_per_s: f64,
    fdatasync_4k_per_s: f64,
    cases: Vec<Case>,
    /// The group-commit cases' paired rounds.
    group_commit: Vec<common::EngineGroupCommit>,
    journal: Option<JournalCase>,
}

/// The journal's flush per entry.
#[derive(Serialize, Clone)]
struct JournalCase {
    zeros: bool,
    flushes: u64,
    flushes_per_s: f64,
    latency_p50_us: u64,
    latency_p99_us: u64,
    thread_cpu_us_per_flush: f64,
    process_cpu_us_per_flush: f64,
}

fn journal_case(work: &Path, seconds: f64) -> JournalCase {
    let dir = work.join("journal");
    let run = lockstep::runtime::bench::journal_flushes(&dir, 8, Duration::from_secs_f64(seconds))
        .expect("journal run");
    let _ = std::fs::remove_dir_all(&dir);
    let at = |q: f64| run.latencies_us[((run.latencies_us.len() - 1) as f64 * q) as usize];
    let per = |cpu: f64| cpu * 1e6 / run.flushes as f64;
    JournalCase {
        zeros: std::env::var("LOCKSTEP_JOURNAL_ZEROS").as_deref() != Ok("off"),
        flushes: run.flushes,
        flushes_per_s: run.flushes as f64 / run.seconds,
        latency_p50_us: at(0.5),
        latency_p99_us: at(0.99),
        thread_cpu_us_per_flush: per(run.thread_cpu_seconds),
        process_cpu_us_per_flush: per(run.process_cpu_seconds),
    }
}

fn print_journal(case: &JournalCase) {
    println!(
        "journal flush per entry (zeros ahead: {}): {} flushes, {:.0}/s, latency p50 {} us p99 {} us, \
         CPU per flush {:.1} us (shard thread) {:.1} us (process)",
        case.zeros,
        case.flushes,
        case.flushes_per_s,
        case.latency_p50_us,
        case.latency_p99_us,
        case.thread_cpu_us_per_flush,
        case.process_cpu_us_per_flush
    );
}

#[derive(Serialize, Clone)]
struct Case {
    name: String,
    batch_bytes: usize,
    batches: u64,
    seconds: f64,
    batches_per_s: f64,
    mb_per_s: f64,
    /// The machine's own rate for the same work (flush per append: a raw write of the same
    /// size + fdatasync), where the case has one.
    raw_per_s: f64,
    /// This case against the machine limit it is judged by.
    ratio: f64,
    against: &'static str,
    target: f64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let plan = if full { FULL } else { SMOKE };
    let dir = match args.iter().position(|a| a == "--dir") {
        Some(i) => PathBuf::from(args.get(i + 1).expect("--dir takes a path")),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    };
    let work = tempfile::Builder::new()
        .prefix("lockstep-bench-storage-")
        .tempdir_in(&dir)
        .expect("temporary directory");
    let work = work.path();
    if args.iter().any(|a| a == "--journal") {
        print_journal(&journal_case(work, plan.seconds_per_case));
        return;
    }
    if args.iter().any(|a| a == "--group-commit") {
        for retention in [None, Some(plan.group_commit_retention_bytes)] {
            print_group_commit(&common::engine_group_commit(
                work,
                16 << 10,
                plan.group_commit_bytes_in_flight,
                plan.group_commit_seconds,
                plan.direct_write_bytes,
                plan.group_commit_rounds,
                retention,
            ));
        }
        return;
    }
    let progress = |what: &str| {
        eprint!("\r\x1b[2K[storage bench] {what}");
        let _ = std::io::stderr().flush();
    };

    progress("machine: O_DIRECT sequential write");
    let direct_write_mb_per_s =
        common::direct_write_mb_per_s(work, plan.direct_write_bytes, common::DirectData::Fresh);
    progress("machine: 8 MiB O_DIRECT write + fdatasync, fresh extents");
    let fresh_durable_mb_per_s = common::group_commit_mb_per_s(
        work,
        common::GroupCommit::DirectFresh,
        8 << 20,
        plan.seconds_per_case,
        plan.direct_write_bytes,
    );
    progress("machine: 4 KiB write + fdatasync");
    let fdatasync_4k_per_s =
        common::fdatasync_rate(work, plan.seconds_per_case, plan.fdatasync_ops_max, 4096);

    let mut cases = Vec::new();
    let mut group_commit = Vec::new();
    for batch_bytes in [16 << 10, 1 << 20] {
        progress(&format!(
            "log: flush per append, {} KiB batches",
            batch_bytes >> 10
        ));
        let mut case = flush_per_append(work, plan, batch_bytes);
        // Judged against the same-sized raw write + fdatasync: the log's overhead per flush.
        progress(&format!(
            "machine: {} KiB write + fdatasync",
            batch_bytes >> 10
        ));
        let raw = common::fdatasync_rate(
            work,
            plan.seconds_per_case,
            plan.fdatasync_ops_max,
            case.batch_bytes,
        );
        case.ratio = case.batches_per_s / raw;
        case.raw_per_s = raw;
        cases.push(case);
        for retention in [None, Some(plan.group_commit_retention_bytes)] {
            progress(&format!(
                "log: group commit, {} KiB batches{}",
                batch_bytes >> 10,
                if retention.is_some() {
                    ", steady state"
                } else {
                    ""
                }
            ));
            let run = common::engine_group_commit(
                work,
                batch_bytes,
                plan.group_commit_bytes_in_flight,
                plan.group_commit_seconds,
                plan.direct_write_bytes,
                plan.group_commit_rounds,
                retention,
            );
            cases.push(Case {
                name: format!(
                    "group commit{} ({} appenders)",
                    if retention.is_some() { ", steady" } else { "" },
                    run.appenders
                ),
                batch_bytes,
                batches: run.batches,
                seconds: run.seconds,
                batches_per_s: run.batches as f64 / run.seconds,
                mb_per_s: run.mb_per_s,
                raw_per_s: 0.0,
                ratio: run.ratio,
                against: if retention.is_some() {
                    "O_DIRECT rewrite of written blocks (fresh data), median of paired rounds"
                } else {
                    "O_DIRECT sequential write (fresh data), median of paired rounds"
                },
                target: 0.8,
            });
            group_commit.push(run);
        }
    }
    progress("journal: flush per entry");
    let journal = Some(journal_case(work, plan.seconds_per_case));
    eprintln!("\r\x1b[2K[storage bench] done");

    let report = Report {
        commit: common::git_commit(),
        machine: common::machine(),
        plan,
        direct_write_data: common::DirectData::Fresh,
        direct_write_mb_per_s,
        fresh_durable_mb_per_s,
        fdatasync_4k_per_s,
        cases,
        group_commit,
        journal,
    };
    print_table(&report);
    if let Some(journal) = &report.journal {
        print_journal(journal);
    }
    if full {
        let path = common::write_report("storage", &report);
        println!("report: {}", path.display());
    } else {
        assert!(
            report.cases.iter().all(|c| c.batches > 0),
            "every case appended something"
        );
        assert!(report.journal.as_ref().is_some_and(|j| j.flushes > 0));
    }
}

fn flush_per_append(work: &Path, plan: Plan, batch_bytes: usize) -> Case {
    let dir = work.join(format!("flush-{batch_bytes}"));
    let (mut log, _) =
        PartitionLog::open(FsStorage, &dir, LogConfig::default(), 0).expect("open log");
    let batch = common::batch_of_1k_records(batch_bytes);
    let deadline = Duration::from_secs_f64(plan.seconds_per_case);
    let start = Instant::now();
    let mut batches = 0u64;
    while start.elapsed() < deadline || batches == 0 {
        log.append(&batch, 0).expect("append");
        log.flush().expect("flush");
        batches += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    Case {
        name: "flush per append".into(),
        batch_bytes,
        batches,
        seconds,
        batches_per_s: batches as f64 / seconds,
        mb_per_s: batches as f64 * batch.len() as f64 / seconds / 1e6,
        raw_per_s: 0.0,
        ratio: 0.0,
        against: "raw write+fdatasync of the same size",
        target: 0.8,
    }
}

fn print_table(report: &Report) {
    println!();
    println!(
        "machine: O_DIRECT sequential write {:.0} MB/s (fresh data); 8 MiB write+fdatasync into fresh extents \
         {:.0} MB/s; 4 KiB write+fdatasync {:.0}/s",
        report.direct_write_mb_per_s, report.fresh_durable_mb_per_s, report.fdatasync_4k_per_s
    );
    println!(
        "{:<38} {:>8} {:>10} {:>12} {:>10} {:>7} {:>7}  {}",
        "case", "batch", "batches", "batches/s", "MB/s", "ratio", "target", "judged against"
    );
    for c in &report.cases {
        println!(
            "{:<38} {:>7}K {:>10} {:>12.0} {:>10.1} {:>7.2} {:>7.2}  {}",
            c.name,
            c.batch_bytes >> 10,
            c.batches,
            c.batches_per_s,
            c.mb_per_s,
            c.ratio,
            c.target,
            c.against
        );
    }
    for g in &report.group_commit {
        print_group_commit(g);
    }
}

fn print_group_commit(g: &common::EngineGroupCommit) {
    let (low, high) = g.ratio_range();
    let rounds: Vec<String> = g
        .rounds
        .iter()
        .map(|r| {
            format!(
                "{:.0}/{:.0}/{:.0}",
                r.engine_mb_per_s, r.direct_mb_per_s, r.unchanged_mb_per_s
            )
        })
        .collect();
    let state = match g.retention_bytes {
        Some(bytes) => format!(
            "steady state (retention {} MiB, reused segment files) against O_DIRECT rewrites of fresh data",
            bytes >> 20
        ),
        None => "new log against O_DIRECT writes of fresh data into a new file".to_string(),
    };
    println!(
        "group commit {} KiB, {state}: engine/O_DIRECT/unchanged-buffer MB/s per round {}; ratio median {:.2}, range {:.2}-{:.2} (against one unchanged buffer {:.2}); engine thread CPU {:.3} ms per MB",
        g.batch_bytes >> 10,
        rounds.join(" "),
        g.ratio,
        low,
        high,
        g.unchanged_ratio,
        g.cpu_ms_per_mb
    );
    println!("  {}", common::timeline_line(&g.timeline));
}
