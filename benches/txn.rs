//! Transactional against explicit acknowledgements (issue 5's figures).
//!
//! One Lockstep broker (release binary, one shard per core) and one share consumer per mode,
//! reading the same pre-produced 1 KiB records from a fresh group each:
//! - **explicit**: ACCEPT every record, `commit_sync` after each poll (ShareAcknowledge, durable);
//! - **transactional**: acknowledge every record into the current checkpoint's transaction and
//!   flush after each poll (ShareAcknowledgeTransactional); a coordinator thread checkpoints every
//!   `CHECKPOINT_MS`: begins the next transaction, switches the workers to it, prepares the
//!   previous one, then commits it (the KIP's flow; the sink write is left out).
//!
//! Reported: records/s of both and their ratio (target ≥ 0.9), prepare and commit latency
//! (p50, p99, max) against the machine's fdatasync p99 measured in the same run (target: commit
//! p99 ≤ 2×). `cargo bench --bench txn` runs the full measurement and writes
//! `target/bench-reports/txn.json`; under `cargo test` it runs on a few thousand records and only
//! checks that every record was consumed exactly once in both modes.

mod common;

use hdrhistogram::Histogram;
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::client::share_consumer::{AckType, ShareConsumer};
use lockstep::client::transactions::ShareTransactionCoordinator;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

const RECORD_BYTES: usize = 1024;
const CHECKPOINT_MS: u64 = 1_000;
const TOPIC: &str = "bench-txn";
/// `share.partition.max.record.locks` of both groups.
const IN_FLIGHT_RECORDS: u32 = 200_000;

struct Plan {
    records: usize,
    fdatasyncs: usize,
}

const FULL: Plan = Plan {
    records: 600_000,
    fdatasyncs: 1_000,
};
const SMOKE: Plan = Plan {
    records: 3_000,
    fdatasyncs: 20,
};

struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn start_broker(dir: &Path) -> (Broker, String) {
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lockstep");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("lockstep ready") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("lockstep ready within 30 s");
    (Broker(child), format!("127.0.0.1:{port}"))
}

fn progress(what: &str) {
    eprint!("\r\x1b[2K[txn bench] {what}");
    let _ = std::io::stderr().flush();
}

fn produce(bootstrap: &str, records: usize) {
    let mut admin = Admin::connect(bootstrap).expect("admin");
    admin
        .create_topics(&[NewTopic::new(TOPIC, 1)])
        .expect("create topic");
    let mut producer = Producer::new(bootstrap);
    let value = vec![b'x'; RECORD_BYTES];
    let mut sent = 0;
    while sent < records {
        let n = (records - sent).min(500);
        let batch: Vec<ProducerRecord> = (0..n)
            .map(|_| ProducerRecord {
                key: None,
                value: Some(value.clone().into()),
                timestamp: 0,
            })
            .collect();
        producer.produce(TOPIC, 0, &batch).expect("produce");
        sent += n;
        progress(&format!("produced {sent}/{records}"));
    }
}

fn configure(bootstrap: &str, group: &str, transactional: bool) {
    let mut admin = Admin::connect(bootstrap).expect("admin");
    admin
        .set_group_config(group, "share.auto.offset.reset", "earliest")
        .expect("group config");
    // LOCKED records stay in flight until their checkpoint commits, so the in-flight window
    // must hold a checkpoint's worth of records; Kafka's default (2000) would cap transactional
    // consumption at 2000 records per checkpoint interval. Both modes get the same window.
    admin
        .set_group_config(
            group,
            "share.partition.max.record.locks",
            &IN_FLIGHT_RECORDS.to_string(),
        )
        .expect("group config");
    if transactional {
        admin
            .set_group_config(group, "share.acknowledgement.mode", "transactional")
            .expect("group config");
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram")
}

struct Run {
    records_per_sec: f64,
    prepare_us: Histogram<u64>,
    commit_us: Histogram<u64>,
    checkpoints: u64,
}

/// Consumes every record once; `transactional` acknowledges into checkpoint transactions.
fn consume(bootstrap: &str, group: &str, records: usize, transactional: bool) -> Run {
    configure(bootstrap, group, transactional);
    let mut consumer = ShareConsumer::new(bootstrap, group);
    consumer.subscribe(&[TOPIC]).expect("subscribe");
    let current = Arc::new(RwLock::new(format!("{group}-bench-0")));
    let done = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new((histogram(), histogram(), 0u64)));
    let coordinator = transactional.then(|| {
        let mut coord = ShareTransactionCoordinator::new(bootstrap, group);
        coord.begin(&current.read().unwrap(), -1).expect("begin");
        let (current, done, latencies, group) = (
            current.clone(),
            done.clone(),
            latencies.clone(),
            group.to_string(),
        );
        std::thread::spawn(move || {
            let mut checkpoint = 0u64;
            let mut finish = false;
            loop {
                let until = Instant::now() + Duration::from_millis(CHECKPOINT_MS);
                while Instant::now() < until && !finish {
                    finish = done.load(Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                }
                checkpoint += 1;
                let next = format!("{group}-bench-{checkpoint}");
                coord.begin(&next, -1).expect("begin");
                let previous = std::mem::replace(&mut *current.write().unwrap(), next);
                let started = Instant::now();
                coord.prepare(&previous).expect("prepare");
                let prepared = Instant::now();
                coord.commit(&previous).expect("commit");
                let mut l = latencies.lock().unwrap();
                l.0.record(prepared.duration_since(started).as_micros() as u64)
                    .ok();
                l.1.record(prepared.elapsed().as_micros() as u64).ok();
                l.2 += 1;
                if finish {
                    let last = current.read().unwrap().clone();
                    coord.prepare(&last).expect("prepare");
                    coord.commit(&last).expect("commit");
                    break;
                }
            }
        })
    });
    let mut seen = BTreeSet::new();
    let mut started: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    while seen.len() < records {
        assert!(Instant::now() < deadline, "consume timed out");
        let polled = consumer.poll(Duration::from_millis(500)).expect("poll");
        if polled.is_empty() {
            continue;
        }
        started.get_or_insert_with(Instant::now);
        if transactional {
            let txn = current.read().unwrap();
            for r in &polled {
                consumer
                    .acknowledge_transactional(r, AckType::Accept, &txn)
                    .expect("ack");
            }
            consumer.flush_transactional().expect("flush");
        } else {
            for r in &polled {
                consumer.acknowledge(r, AckType::Accept).expect("ack");
            }
            consumer.commit_sync().expect("commit_sync");
        }
        for r in &polled {
            assert!(seen.insert(r.offset), "offset {} delivered twice", r.offset);
        }
        progress(&format!(
            "{}: {}/{records}",
            if transactional {
                "transactional"
            } else {
                "explicit"
            },
            seen.len()
        ));
    }
    let elapsed = started.expect("records arrived").elapsed();
    done.store(true, Ordering::SeqCst);
    if let Some(handle) = coordinator {
        handle.join().expect("coordinator thread");
    }
    consumer.close().expect("close");
    let l = latencies.lock().unwrap();
    Run {
        records_per_sec: records as f64 / elapsed.as_secs_f64(),
        prepare_us: l.0.clone(),
        commit_us: l.1.clone(),
        checkpoints: l.2,
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let plan = if full { FULL } else { SMOKE };
    let work = tempfile::Builder::new()
        .prefix("lockstep-bench-txn-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temporary directory");
    let (broker, bootstrap) = start_broker(work.path());
    produce(&bootstrap, plan.records);
    let explicit = consume(&bootstrap, "bench-explicit", plan.records, false);
    let txn = consume(&bootstrap, "bench-txn", plan.records, true);
    drop(broker);
    let fsync = common::fdatasync_latency_us(work.path(), plan.fdatasyncs);
    eprintln!();
    if !full {
        println!("txn bench smoke: every record consumed once in both modes");
        return;
    }
    let ratio = txn.records_per_sec / explicit.records_per_sec;
    let q = |h: &Histogram<u64>, p: f64| h.value_at_quantile(p) as f64 / 1000.0;
    println!(
        "records: {} × {RECORD_BYTES} B, checkpoint every {CHECKPOINT_MS} ms",
        plan.records
    );
    println!("{:<28}{:>14}", "mode", "records/s");
    println!(
        "{:<28}{:>14.0}",
        "explicit (commit_sync)", explicit.records_per_sec
    );
    println!("{:<28}{:>14.0}", "transactional", txn.records_per_sec);
    println!("transactional / explicit = {ratio:.2} (target >= 0.9)");
    println!(
        "{:<12}{:>10}{:>10}{:>10}   ({} checkpoints)",
        "ms", "p50", "p99", "max", txn.checkpoints
    );
    for (name, h) in [
        ("prepare", &txn.prepare_us),
        ("commit", &txn.commit_us),
        ("fdatasync", &fsync),
    ] {
        println!(
            "{name:<12}{:>10.2}{:>10.2}{:>10.2}",
            q(h, 0.5),
            q(h, 0.99),
            h.max() as f64 / 1000.0
        );
    }
    let fsync_p99 = q(&fsync, 0.99).max(0.001);
    println!(
        "commit p99 / fdatasync p99 = {:.2}, prepare p99 / fdatasync p99 = {:.2} (target <= 2)",
        q(&txn.commit_us, 0.99) / fsync_p99,
        q(&txn.prepare_us, 0.99) / fsync_p99
    );
    let report = serde_json::json!({
        "commit": common::git_commit(),
        "machine": common::machine(),
        "config": {"records": plan.records, "record_bytes": RECORD_BYTES, "checkpoint_ms": CHECKPOINT_MS, "share.partition.max.record.locks": IN_FLIGHT_RECORDS},
        "results": {
            "explicit_records_per_sec": explicit.records_per_sec,
            "transactional_records_per_sec": txn.records_per_sec,
            "ratio": ratio,
            "checkpoints": txn.checkpoints,
            "prepare_ms": {"p50": q(&txn.prepare_us, 0.5), "p99": q(&txn.prepare_us, 0.99)},
            "commit_ms": {"p50": q(&txn.commit_us, 0.5), "p99": q(&txn.commit_us, 0.99)},
            "fdatasync_ms": {"p50": q(&fsync, 0.5), "p99": q(&fsync, 0.99)},
        }
    });
    let path = common::write_report("txn", &report);
    println!("report: {}", path.display());
}
