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
