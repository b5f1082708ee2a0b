//! Restart benchmark: how long a broker whose data directory holds 1, 5 and 20 GiB takes to
//! listen again, and to answer its first fetch, after a clean stop (SIGTERM) and after SIGKILL,
//! beside the empty broker. The target: flat in data size, within 2 s of the empty broker.
//!
//! One release broker (2 shards) and one topic of 2 partitions (default segment size, no
//! retention), filled with 1 KiB records in batches just under 1 MiB (`max.message.bytes`) (acks=all, by this process through
//! the crate's own client) up to each size in turn; at each size:
//! 1. SIGTERM, wait for the exit, drop the page cache, start again: seconds to the readiness
//!    line, and to the first fetch answered (partition 0, its last record);
//! 2. SIGKILL, drop the page cache, start again: the same two figures.
//!
//! Dropping the page cache (`sync; echo 3 > /proc/sys/vm/drop_caches`) needs root; without it
//! the report says the cache was warm. `cargo bench --bench restart` runs 1, 5 and 20 GiB
//! (about 26 GiB of disk under `target/`) and writes `target/bench-reports/restart.json`;
//! `--gib 1,5` picks the sizes. Under `cargo test` (no `--bench` argument) the same code runs
//! on 16 and 48 MiB, so it cannot rot.

#[path = "common/mod.rs"]
mod common;

use common::brokers::{Broker, LockstepOptions};
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::connection::NodePool;
use lockstep::client::producer::{Producer, ProducerRecord};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

const TOPIC: &str = "restart";
const PARTITIONS: i32 = 2;
const RECORD_BYTES: usize = 1024;
const RECORDS_PER_BATCH: usize = 960;
const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;

#[derive(Serialize)]
struct Restart {
    /// Seconds from the start of the process to its readiness line.
    listening_s: f64,
    /// Seconds from the start of the process to the first fetch answered.
    first_fetch_s: f64,
}

#[derive(Serialize)]
struct Row {
    /// Record bytes in the partition logs (keys, values; batch framing not counted).
    data_bytes: u64,
    clean: Restart,
    killed: Restart,
}

#[derive(Serialize)]
struct Report {
    commit: String,
    machine: serde_json::Value,
    /// Whether each start met a cold page cache.
    cold_cache: bool,
    empty: Restart,
    rows: Vec<Row>,
}

/// `sync`, then drop the page cache; false if not allowed.
fn drop_page_cache() -> bool {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Starts the broker and times its readiness and its first fetch (the last record of
/// partition 0, whose offset is `last`).
fn timed_start(work: &Path, last: Option<i64>) -> (Broker, Restart) {
    let started = Instant::now();
    let broker = Broker::start_lockstep(
        work,
        LockstepOptions {
            shards: Some(2),
            metrics: false,
        },
    )
    .unwrap_or_else(|e| panic!("restart: {e}"));
    let listening_s = started.elapsed().as_secs_f64();
    if let Some(last) = last {
        let mut nodes = NodePool::new(&broker.bootstrap(), "restart-bench");
        let records = lockstep::client::read_committed::read_partition(&mut nodes, TOPIC, 0, last)
            .unwrap_or_else(|e| panic!("first fetch at {last}: {e}"));
        assert_eq!(
            records.first().map(|r| r.offset),
            Some(last),
            "the last record reads back"
        );
    }
    let first_fetch_s = started.elapsed().as_secs_f64();
    (
        broker,
        Restart {
            listening_s,
            first_fetch_s,
        },
    )
}

/// Produces batches of 960 records round-robin over the partitions until `produced` (record bytes so
/// far) reaches `target`; `last` follows the last offset of partition 0.
fn fill(broker: &Broker, target: u64, produced: &mut u64, last: &mut i64) {
    let record = ProducerRecord::value(vec![b'r'; RECORD_BYTES]);
    let batch = vec![record; RECORDS_PER_BATCH];
    let mut producer = Producer::new(&broker.bootstrap());
    let mut partition = 0;
    let mut since_report = 0u64;
    while *produced < target {
        let base = producer
            .produce(TOPIC, partition, &batch)
            .unwrap_or_else(|e| panic!("produce: {e}"));
        if partition == 0 {
            *last = base + RECORDS_PER_BATCH as i64 - 1;
        }
        partition = (partition + 1) % PARTITIONS;
        *produced += (RECORD_BYTES * RECORDS_PER_BATCH) as u64;
        since_report += (RECORD_BYTES * RECORDS_PER_BATCH) as u64;
        if since_report >= 1 << 30 {
            since_report = 0;
            eprintln!(
                "[restart bench] filled {:.1} of {:.1} GiB",
                *produced as f64 / GIB,
                target as f64 / GIB
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let mut sizes: Vec<u64> = if full {
        vec![1 << 30, 5 << 30, 20 << 30]
    } else {
        vec![16 * MIB, 48 * MIB]
    };
    if let Some(i) = args.iter().position(|a| a == "--gib") {
        let list = args.get(i + 1).expect("--gib takes a list, e.g. 1,5,20");
        sizes = list
            .split(',')
            .map(|g| g.trim().parse::<u64>().expect("--gib N,N") << 30)
            .collect();
    }
    let work_dir = tempfile::Builder::new()
        .prefix("lockstep-bench-restart-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temporary directory");
    let work = work_dir.path();

    let cold = drop_page_cache();
    eprintln!(
        "[restart bench] empty broker (page cache {})",
        if cold { "dropped" } else { "kept: not root" }
    );
    let (broker, empty) = timed_start(work, None);
    let mut admin = Admin::connect(&broker.bootstrap()).expect("admin connection");
    let mut topic = NewTopic::new(TOPIC, PARTITIONS);
    topic.configs = vec![
        ("retention.ms".into(), "-1".into()),
        ("retention.bytes".into(), "-1".into()),
    ];
    admin.create_topics(&[topic]).expect("create the topic");
    drop(admin);

    let mut broker = Some(broker);
    let mut last = -1i64;
    let mut produced = 0u64;
    let mut rows = Vec::new();
    for &size in &sizes {
        let running = broker.take().expect("a running broker");
        eprintln!("[restart bench] filling to {:.2} GiB", size as f64 / GIB);
        fill(&running, size, &mut produced, &mut last);
        let data_bytes = produced;

        eprintln!(
            "[restart bench] {:.2} GiB: clean stop and start",
            data_bytes as f64 / GIB
        );
        running
            .stop_clean()
            .unwrap_or_else(|e| panic!("clean stop: {e}"));
        drop_page_cache();
        let (running, clean) = timed_start(work, Some(last));

        eprintln!(
            "[restart bench] {:.2} GiB: SIGKILL and start",
            data_bytes as f64 / GIB
        );
        drop(running); // SIGKILL
        drop_page_cache();
        let (running, killed) = timed_start(work, Some(last));
        broker = Some(running);
        rows.push(Row {
            data_bytes,
            clean,
            killed,
        });
    }
    if let Some(running) = broker {
        running
            .stop_clean()
            .unwrap_or_else(|e| panic!("clean stop: {e}"));
    }

    println!(
        "restart: time to listening / to first fetch, seconds (page cache {})",
        if cold { "cold" } else { "warm" }
    );
    println!(
        "{:>10}  {:>14}  {:>14}  {:>14}  {:>14}",
        "data", "clean: listen", "clean: fetch", "kill: listen", "kill: fetch"
    );
    println!(
        "{:>10}  {:>14.2}  {:>14.2}  {:>14}  {:>14}",
        "empty", empty.listening_s, empty.first_fetch_s, "", ""
    );
    let mut flat = true;
    for row in &rows {
        println!(
            "{:>8.2}Gi  {:>14.2}  {:>14.2}  {:>14.2}  {:>14.2}",
            row.data_bytes as f64 / GIB,
            row.clean.listening_s,
            row.clean.first_fetch_s,
            row.killed.listening_s,
            row.killed.first_fetch_s
        );
        flat &= row.clean.first_fetch_s.max(row.killed.first_fetch_s) <= empty.listening_s + 2.0;
    }
    println!(
        "target: every restart within 2 s of the empty broker: {}",
        if flat { "MET" } else { "NOT MET" }
    );
    let report = Report {
        commit: common::git_commit(),
        machine: common::machine(),
        cold_cache: cold,
        empty,
        rows,
    };
    if full {
        let path = common::write_report("restart", &report);
        println!("report: {}", path.display());
    }
}
