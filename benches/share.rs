//! Share-consume benchmark: records/s that KIP-932 share consumers drain from a topic,
//! Lockstep beside Apache Kafka 4.4, with the same client (`lockstep::client`), on the same
//! machine, in the same run.
//!
//! Workload, per case (partitions, consumers) = (1,1), (1,4), (4,1), (4,4), on a fresh topic and
//! a fresh share group:
//!
//! 1. setup: create the topic; pre-produce `records_per_case` records of 1 KiB, evenly over the
//!    partitions, in batches of `produce_batch_records` (acks=-1, the Rust `Producer`); set the
//!    group config `share.auto.offset.reset=earliest` (IncrementalAlterConfigs, GROUP resource);
//! 2. run: `consumers` threads, each with its own `ShareConsumer`, loop `poll` → `acknowledge`
//!    every record with ACCEPT → `commit_sync` (ShareAcknowledge) until the group has
//!    acknowledged every offset once. The clock starts when the first record arrives (Kafka needs
//!    a few seconds to assign partitions to a new member, which is not consume throughput) and
//!    stops at the acknowledgement that completes the set;
//! 3. check: every acknowledged (partition, offset) is counted in a per-partition bitmap. When
//!    every `commit_sync` succeeded, no offset may be missing or acknowledged twice; when some
//!    failed, redeliveries are allowed and counted, missing offsets are still an error.
//!
//! One broker runs at a time (Lockstep first, then Kafka), each started once for all cases.
//! Beside records/s, each case reports the mean time of a `poll` that returned records
//! (ShareFetch) and of a `commit_sync` (ShareAcknowledge), which shows where a round goes, and
//! the run probes the disk's 4 KiB write + fdatasync rate (Lockstep answers acknowledgements once
//! durable; Kafka's share coordinator does not fsync by default).
//!
//! `cargo bench --bench share` runs the full measurement (Kafka too if `target/test-deps/kafka`
//! is installed or `tools/kafka-reference.sh fetch` succeeds; `LOCKSTEP_BENCH_SKIP_KAFKA=1` or
//! `--no-kafka` skips it), prints a table and writes `target/bench-reports/share.json`. Under
//! `cargo test` (no `--bench` argument) the same code runs against Lockstep only on a few
//! hundred records per case and asserts that the consumed set is exact. Options after `--`:
//! `--records N` (records per case), `--no-kafka`.
//!
//! Bounds: every wait has a deadline (`Plan::case_seconds_max`, `Plan::stall_seconds_max`, the
//! client's own socket timeouts); consumer threads stop at the group's completion or a shared
//! stop flag; poll loops are also bounded by an iteration count.

#[path = "common/mod.rs"]
mod common;

use bytes::Bytes;
use common::brokers::{kafka_available, Broker, Kind, LockstepOptions};
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::client::share_consumer::{AckType, ShareConsumer};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RECORD_BYTES: usize = 1024;
/// The cases: (partitions, consumers).
const CASES: [(i32, usize); 4] = [(1, 1), (1, 4), (4, 1), (4, 4)];
/// How long one `poll` may wait for records.
const POLL_TIMEOUT: Duration = Duration::from_millis(500);
/// How often the watch loop looks at the consumer threads.
const WATCH_EVERY: Duration = Duration::from_millis(20);
/// How often the live progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// The target: Lockstep's rate over Kafka's.
const TARGET_RATIO: f64 = 2.0;

/// Sizes of one run: the full measurement, or the smoke run under `cargo test`.
#[derive(Clone, Copy, Serialize)]
struct Plan {
    records_per_case: u64,
    record_bytes: usize,
    produce_batch_records: usize,
    /// Upper bound on one case's run phase, seconds (after setup).
    case_seconds_max: f64,
    /// A case fails if no acknowledgement succeeds for this long, seconds (covers Kafka's
    /// assignment delay before the first record).
    stall_seconds_max: f64,
    /// Upper bound on polls per consumer in one case (a second bound beside the deadline).
    polls_per_consumer_max: u64,
    /// Seconds of the machine probe (4 KiB write + fdatasync).
    fsync_probe_seconds: f64,
}

const FULL: Plan = Plan {
    records_per_case: 200_000,
    record_bytes: RECORD_BYTES,
    produce_batch_records: 256,
    case_seconds_max: 600.0,
    stall_seconds_max: 60.0,
    polls_per_consumer_max: 10_000_000,
    fsync_probe_seconds: 1.0,
};
const SMOKE: Plan = Plan {
    records_per_case: 600,
    record_bytes: RECORD_BYTES,
    produce_batch_records: 50,
    case_seconds_max: 60.0,
    stall_seconds_max: 30.0,
    polls_per_consumer_max: 100_000,
    fsync_probe_seconds: 0.05,
};

// ---------------------------------------------------------------------------------------------
// Report

#[derive(Serialize)]
struct Report {
    commit: String,
    machine: serde_json::Value,
    /// /proc/loadavg when the run started: other work on the machine skews every figure.
    load_average_at_start: String,
    /// 4 KiB write + fdatasync per second on the bench's disk. Lockstep answers an
    /// acknowledgement once its share-state journal entry is synced, so one poll + commit_sync
    /// round costs at least one such sync; Kafka's share coordinator does not fsync by default.
    fdatasync_4k_per_s: f64,
    mode: &'static str,
    plan: Plan,
    /// Client settings that shape every request.
    client: serde_json::Value,
    brokers: Vec<BrokerRun>,
    /// Per case: Lockstep's rate over Kafka's, when both ran.
    comparison: Vec<CaseComparison>,
}

#[derive(Serialize, Default)]
struct BrokerRun {
    name: String,
    /// Why the broker was not run, if it was not.
    not_run: Option<String>,
    /// A failure outside any one case (start-up, stop).
    failed: Option<String>,
    /// Start-ups that failed before one succeeded (the bench tries twice).
    start_failures: Vec<String>,
    cases: Vec<CaseResult>,
}

#[derive(Serialize, Default, Clone)]
struct CaseResult {
    partitions: i32,
    consumers: usize,
    records: u64,
    /// The case's failure, if any (the numbers below are then partial).
    failed: Option<String>,
    produce_seconds: f64,
    /// From the consumers' start to the first record delivered.
    seconds_to_first_record: f64,
    /// From the first record delivered to the acknowledgement that completed the set.
    consume_seconds: f64,
    records_per_s: f64,
    /// Distinct offsets acknowledged (must equal `records`).
    acknowledged_distinct: u64,
    /// Acknowledgements of an offset already acknowledged (only possible after a failure).
    acknowledged_again: u64,
    /// Offsets never acknowledged.
    missing: u64,
    /// Records delivered with a delivery count above 1.
    redelivered: u64,
    commit_errors: u64,
    first_commit_error: Option<String>,
    poll_errors: u64,
    first_poll_error: Option<String>,
    /// Summed over the consumers.
    polls: u64,
    share_fetches: u64,
    share_acknowledges: u64,
    heartbeats: u64,
    /// Records per non-empty poll, averaged.
    records_per_batch: f64,
    /// Mean time in a `poll` that returned records, and in a `commit_sync`, ms (where the round
    /// trip goes).
    poll_with_records_mean_ms: f64,
    commit_sync_mean_ms: f64,
}

#[derive(Serialize)]
struct CaseComparison {
    partitions: i32,
    consumers: usize,
    lockstep_records_per_s: f64,
    kafka_records_per_s: f64,
    ratio: f64,
    target: f64,
    met: bool,
}

// ---------------------------------------------------------------------------------------------
// main

fn progress(what: &str) {
    eprint!("\r\x1b[2K[share bench] {what}");
    let _ = std::io::stderr().flush();
}

/// Replaces the progress line with a line that stays.
fn progress_done(what: &str) {
    eprintln!("\r\x1b[2K[share bench] {what}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let mut plan = if full { FULL } else { SMOKE };
    if let Some(i) = args.iter().position(|a| a == "--records") {
        plan.records_per_case = args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .expect("--records N");
    }
    assert!(plan.records_per_case > 0 && plan.produce_batch_records > 0);
    let load_average_at_start = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let work = tempfile::Builder::new()
        .prefix("lockstep-bench-share-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temporary directory");
    let work = work.path();

    let kafka_unavailable = if !full {
        Some("smoke run under `cargo test` (Kafka runs only under `cargo bench`)".to_string())
    } else if args.iter().any(|a| a == "--no-kafka") {
        Some("--no-kafka".to_string())
    } else if std::env::var("LOCKSTEP_BENCH_SKIP_KAFKA").is_ok_and(|v| v == "1") {
        Some("LOCKSTEP_BENCH_SKIP_KAFKA=1".to_string())
    } else {
        progress("kafka: checking target/test-deps/kafka (tools/kafka-reference.sh fetch)");
        kafka_available().err()
    };

    progress("machine: 4 KiB write + fdatasync");
    let fdatasync_4k_per_s = common::fdatasync_rate(work, plan.fsync_probe_seconds, 100_000, 4096);
    let mut brokers = vec![run_broker(Kind::Lockstep, work, plan)];
    match &kafka_unavailable {
        Some(why) => {
            progress_done(&format!("kafka not run: {why}"));
            brokers.push(BrokerRun {
                name: "kafka".into(),
                not_run: Some(why.clone()),
                ..Default::default()
            });
        }
        None => brokers.push(run_broker(Kind::Kafka, work, plan)),
    }
    eprint!("\r\x1b[2K");

    let comparison = compare(&brokers);
    let report = Report {
        commit: common::git_commit(),
        machine: common::machine(),
        load_average_at_start,
        fdatasync_4k_per_s,
        mode: if full { "full" } else { "smoke" },
        plan,
        client: serde_json::json!({
            "poll_timeout_ms": POLL_TIMEOUT.as_millis() as u64,
            "share_fetch_max_records": lockstep::client::limits::SHARE_FETCH_MAX_RECORDS,
            "share_fetch_max_wait_ms": lockstep::client::limits::SHARE_FETCH_MAX_WAIT_MS,
            "acknowledgement": "explicit ACCEPT of every record, commit_sync after every poll",
        }),
        brokers,
        comparison,
    };
    print_table(&report);
    let path = common::write_report("share", &report);
    println!("report: {}", path.display());

    // Every run, smoke or full, fails loudly if a broker that ran failed a case.
    let mut failures = Vec::new();
    for b in &report.brokers {
        if let Some(e) = &b.failed {
            failures.push(format!("{}: {e}", b.name));
        }
        for c in &b.cases {
            if let Some(e) = &c.failed {
                failures.push(format!(
                    "{} ({} partitions, {} consumers): {e}",
                    b.name, c.partitions, c.consumers
                ));
            }
        }
    }
    if !full {
        let lockstep = &report.brokers[0];
        assert_eq!(lockstep.cases.len(), CASES.len(), "every case ran");
        for c in &lockstep.cases {
            assert_eq!(c.acknowledged_distinct, c.records, "exact set consumed");
            assert_eq!(c.missing, 0);
            assert_eq!(c.acknowledged_again, 0);
            assert_eq!(c.commit_errors, 0);
        }
    }
    assert!(failures.is_empty(), "share bench failed: {failures:#?}");
}

/// Starts one broker, runs every case against it, stops it.
fn run_broker(kind: Kind, work: &Path, plan: Plan) -> BrokerRun {
    let name = kind.name();
    let mut run = BrokerRun {
        name: name.into(),
        ..Default::default()
    };
    progress(&format!("{name}: starting"));
    let start = |dir: &Path| match kind {
        Kind::Lockstep => Broker::start_lockstep(dir, LockstepOptions::default()),
        Kind::Kafka => Broker::start_kafka(dir, ""),
    };
    let broker = match start(&work.join(name)) {
        Ok(b) => b,
        Err(first) => {
            // Once more, on a fresh port and directory; the first failure stays in the report.
            progress_done(&format!("{name}: start failed ({first}); once more"));
            run.start_failures.push(first);
            match start(&work.join(format!("{name}-again"))) {
                Ok(b) => b,
                Err(e) => {
                    run.failed = Some(e);
                    return run;
                }
            }
        }
    };
    for (partitions, consumers) in CASES {
        let case = run_case(&broker, plan, partitions, consumers);
        let line = match &case.failed {
            Some(e) => format!("FAILED: {e}"),
            None => format!(
                "{:.0} records/s ({} records in {:.2} s; first record after {:.2} s)",
                case.records_per_s,
                case.records,
                case.consume_seconds,
                case.seconds_to_first_record
            ),
        };
        progress_done(&format!("{name} p={partitions} c={consumers}: {line}"));
        run.cases.push(case);
    }
    progress(&format!("{name}: stopping"));
    if let Err(e) = broker.stop_clean() {
        run.failed = Some(e);
    }
    run
}

fn compare(brokers: &[BrokerRun]) -> Vec<CaseComparison> {
    let (Some(l), Some(k)) = (
        brokers.iter().find(|b| b.name == "lockstep"),
        brokers
            .iter()
            .find(|b| b.name == "kafka" && b.not_run.is_none()),
    ) else {
        return Vec::new();
    };
    l.cases
        .iter()
        .filter_map(|lc| {
            let kc = k
                .cases
                .iter()
                .find(|kc| (kc.partitions, kc.consumers) == (lc.partitions, lc.consumers))?;
            if lc.failed.is_some() || kc.failed.is_some() || kc.records_per_s <= 0.0 {
                return None;
            }
            let ratio = lc.records_per_s / kc.records_per_s;
            Some(CaseComparison {
                partitions: lc.partitions,
                consumers: lc.consumers,
                lockstep_records_per_s: lc.records_per_s,
                kafka_records_per_s: kc.records_per_s,
                ratio,
                target: TARGET_RATIO,
                met: ratio >= TARGET_RATIO,
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// One case

/// What the consumer threads share: the acknowledged set and the clock.
struct Shared {
    /// Per partition, one flag per offset: acknowledged (by a successful `commit_sync`).
    acked: Mutex<Vec<Vec<bool>>>,
    acked_distinct: AtomicU64,
    acked_again: AtomicU64,
    /// First record delivered and the completing acknowledgement.
    first_record: Mutex<Option<Instant>>,
    completed: Mutex<Option<Instant>>,
    last_progress: Mutex<Instant>,
    stop: AtomicBool,
}

#[derive(Default)]
struct ConsumerOutcome {
    polls: u64,
    non_empty_polls: u64,
    delivered: u64,
    redelivered: u64,
    commit_errors: u64,
    first_commit_error: Option<String>,
    poll_errors: u64,
    first_poll_error: Option<String>,
    share_fetches: u64,
    share_acknowledges: u64,
    heartbeats: u64,
    /// Seconds in polls that returned records, and in commit_sync calls.
    poll_with_records_seconds: f64,
    commits: u64,
    commit_seconds: f64,
}

fn run_case(broker: &Broker, plan: Plan, partitions: i32, consumers: usize) -> CaseResult {
    let name = broker.kind.name();
    let mut result = CaseResult {
        partitions,
        consumers,
        records: plan.records_per_case,
        ..Default::default()
    };
    let bootstrap = broker.bootstrap();
    let topic = format!("share-bench-p{partitions}-c{consumers}");
    let group = format!("share-bench-group-p{partitions}-c{consumers}");
    let per_partition = match setup(&bootstrap, &topic, &group, plan, partitions, &mut result) {
        Ok(p) => p,
        Err(e) => {
            result.failed = Some(format!("setup: {e}"));
            return result;
        }
    };

    let shared = Arc::new(Shared {
        acked: Mutex::new(
            per_partition
                .iter()
                .map(|&n| vec![false; n as usize])
                .collect(),
        ),
        acked_distinct: AtomicU64::new(0),
        acked_again: AtomicU64::new(0),
        first_record: Mutex::new(None),
        completed: Mutex::new(None),
        last_progress: Mutex::new(Instant::now()),
        stop: AtomicBool::new(false),
    });
    let expected = plan.records_per_case;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(plan.case_seconds_max);
    let handles: Vec<_> = (0..consumers)
        .map(|_| {
            let shared = Arc::clone(&shared);
            let (bootstrap, topic, group) = (bootstrap.clone(), topic.clone(), group.clone());
            std::thread::spawn(move || {
                consume(
                    &bootstrap, &topic, &group, plan, expected, deadline, &shared,
                )
            })
        })
        .collect();

    // Live progress and the stall / deadline watch.
    let stall = Duration::from_secs_f64(plan.stall_seconds_max);
    let mut watch_error = None;
    let mut shown = Instant::now();
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(WATCH_EVERY);
        if shown.elapsed() < PROGRESS_EVERY {
            continue;
        }
        shown = Instant::now();
        let done = shared.acked_distinct.load(Ordering::Relaxed);
        let first = *shared.first_record.lock().unwrap();
        let end = shared
            .completed
            .lock()
            .unwrap()
            .unwrap_or_else(Instant::now);
        let rate = match first {
            Some(t) => format!(
                "{:.0} records/s",
                done as f64 / end.duration_since(t).as_secs_f64().max(1e-3)
            ),
            None => "waiting for the first record".into(),
        };
        progress(&format!(
            "{name} p={partitions} c={consumers}: {done}/{expected} acknowledged, {rate}, {:.0} s",
            start.elapsed().as_secs_f64()
        ));
        if shared.stop.load(Ordering::Relaxed) {
            continue;
        }
        let quiet = shared.last_progress.lock().unwrap().elapsed();
        if quiet > stall {
            watch_error = Some(format!(
                "stalled: no acknowledgement for {:.0} s at {done}/{expected}",
                quiet.as_secs_f64()
            ));
            shared.stop.store(true, Ordering::Relaxed);
        } else if Instant::now() > deadline {
            watch_error = Some(format!(
                "not done within {} s: {done}/{expected}",
                plan.case_seconds_max
            ));
            shared.stop.store(true, Ordering::Relaxed);
        }
    }
    let mut outcomes = Vec::new();
    for h in handles {
        match h.join() {
            Ok(o) => outcomes.push(o),
            Err(_) => {
                watch_error.get_or_insert("a consumer thread panicked".into());
            }
        }
    }

    let first = *shared.first_record.lock().unwrap();
    let completed = *shared.completed.lock().unwrap();
    if let Some(f) = first {
        result.seconds_to_first_record = f.duration_since(start).as_secs_f64();
    }
    if let (Some(f), Some(c)) = (first, completed) {
        result.consume_seconds = c.duration_since(f).as_secs_f64();
        result.records_per_s = expected as f64 / result.consume_seconds.max(1e-9);
    }
    result.acknowledged_distinct = shared.acked_distinct.load(Ordering::Relaxed);
    result.acknowledged_again = shared.acked_again.load(Ordering::Relaxed);
    result.missing = expected - result.acknowledged_distinct;
    let mut non_empty = 0;
    let mut delivered = 0;
    let (mut poll_seconds, mut commits, mut commit_seconds) = (0.0, 0, 0.0);
    for o in &outcomes {
        result.polls += o.polls;
        non_empty += o.non_empty_polls;
        delivered += o.delivered;
        result.redelivered += o.redelivered;
        result.commit_errors += o.commit_errors;
        result.poll_errors += o.poll_errors;
        result.share_fetches += o.share_fetches;
        result.share_acknowledges += o.share_acknowledges;
        result.heartbeats += o.heartbeats;
        poll_seconds += o.poll_with_records_seconds;
        commits += o.commits;
        commit_seconds += o.commit_seconds;
        if result.first_commit_error.is_none() {
            result.first_commit_error = o.first_commit_error.clone();
        }
        if result.first_poll_error.is_none() {
            result.first_poll_error = o.first_poll_error.clone();
        }
    }
    result.records_per_batch = delivered as f64 / non_empty.max(1) as f64;
    result.poll_with_records_mean_ms = poll_seconds * 1e3 / non_empty.max(1) as f64;
    result.commit_sync_mean_ms = commit_seconds * 1e3 / commits.max(1) as f64;

    // The check: nothing missing; nothing twice unless some acknowledgement failed.
    result.failed = watch_error.or_else(|| {
        if result.missing > 0 {
            Some(format!("{} offsets never acknowledged", result.missing))
        } else if result.acknowledged_again > 0 && result.commit_errors == 0 {
            Some(format!(
                "{} offsets acknowledged twice although every commit_sync succeeded",
                result.acknowledged_again
            ))
        } else {
            None
        }
    });
    result
}

/// Creates the topic, pre-produces the records, sets the group config. Returns the records per
/// partition.
fn setup(
    bootstrap: &str,
    topic: &str,
    group: &str,
    plan: Plan,
    partitions: i32,
    result: &mut CaseResult,
) -> Result<Vec<u64>, String> {
    let mut admin = Admin::connect(bootstrap).map_err(|e| format!("admin connect: {e}"))?;
    admin
        .create_topics(&[NewTopic::new(topic, partitions)])
        .map_err(|e| format!("create topic {topic}: {e}"))?;
    // Kafka elects the new partitions' leader shortly after CreateTopics returns.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let md = admin
            .metadata(Some(&[topic]))
            .map_err(|e| format!("metadata: {e}"))?;
        if (0..partitions).all(|p| md.leader(topic, p).is_some()) {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{topic}: partitions without a leader after 30 s"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    let value = Bytes::from(vec![0x5a_u8; plan.record_bytes]);
    let batch: Vec<ProducerRecord> = (0..plan.produce_batch_records)
        .map(|_| ProducerRecord::value(value.clone()))
        .collect();
    let per_partition: Vec<u64> = (0..partitions as u64)
        .map(|p| {
            plan.records_per_case / partitions as u64
                + u64::from(p < plan.records_per_case % partitions as u64)
        })
        .collect();
    let mut producer = Producer::new(bootstrap);
    let started = Instant::now();
    let mut produced = 0u64;
    for (p, &n) in per_partition.iter().enumerate() {
        let mut next = 0u64;
        // Bounded: each request appends at least one record.
        while next < n {
            let count = (n - next).min(batch.len() as u64) as usize;
            let base = produce_retrying(&mut producer, topic, p as i32, &batch[..count])?;
            if base != next as i64 {
                return Err(format!(
                    "produce to {topic}/{p}: base offset {base}, expected {next}"
                ));
            }
            next += count as u64;
            produced += count as u64;
            if produced % (plan.produce_batch_records as u64 * 64) < count as u64 {
                progress(&format!(
                    "p={partitions}: produced {produced}/{}",
                    plan.records_per_case
                ));
            }
        }
    }
    result.produce_seconds = started.elapsed().as_secs_f64();

    admin
        .set_group_config(group, "share.auto.offset.reset", "earliest")
        .map_err(|e| format!("group config: {e}"))?;
    // A fresh Kafka creates its offsets topic at the first FindCoordinator and answers
    // COORDINATOR_NOT_AVAILABLE (15) until it is loaded.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match admin.find_group_coordinator(group) {
            Ok(_) => break,
            Err(e) if e.kafka_code() == Some(15) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => return Err(format!("find coordinator: {e}")),
        }
    }
    Ok(per_partition)
}

/// Produces one batch, retrying while the partition's leader is not ready: a new Kafka topic's
/// leader shows in Metadata before it accepts produce requests (NOT_LEADER_OR_FOLLOWER, 6, which
/// means the batch was not appended, so the retry cannot duplicate it).
fn produce_retrying(
    producer: &mut Producer,
    topic: &str,
    partition: i32,
    records: &[ProducerRecord],
) -> Result<i64, String> {
    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    const ATTEMPTS_MAX: u32 = 100;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match producer.produce(topic, partition, records) {
            Ok(base) => return Ok(base),
            Err(e) if e.kafka_code() == Some(NOT_LEADER_OR_FOLLOWER) && attempt < ATTEMPTS_MAX => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => return Err(format!("produce to {topic}/{partition}: {e}")),
        }
    }
}

/// One consumer thread: poll, acknowledge everything with ACCEPT, commit_sync, until the group
/// has acknowledged `expected` distinct offsets, the stop flag, or the deadline.
fn consume(
    bootstrap: &str,
    topic: &str,
    group: &str,
    plan: Plan,
    expected: u64,
    deadline: Instant,
    shared: &Shared,
) -> ConsumerOutcome {
    let mut out = ConsumerOutcome::default();
    let mut consumer = ShareConsumer::new(bootstrap, group);
    if let Err(e) = consumer.subscribe(&[topic]) {
        out.poll_errors += 1;
        out.first_poll_error = Some(format!("subscribe: {e}"));
        shared.stop.store(true, Ordering::Relaxed);
        return out;
    }
    let done = |shared: &Shared| {
        shared.stop.load(Ordering::Relaxed)
            || shared.acked_distinct.load(Ordering::Relaxed) >= expected
    };
    while out.polls < plan.polls_per_consumer_max && !done(shared) && Instant::now() < deadline {
        out.polls += 1;
        let polled = Instant::now();
        let records = match consumer.poll(POLL_TIMEOUT) {
            Ok(r) => r,
            Err(e) => {
                out.poll_errors += 1;
                out.first_poll_error.get_or_insert(e.to_string());
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        {
            let mut first = shared.first_record.lock().unwrap();
            first.get_or_insert_with(Instant::now);
        }
        out.non_empty_polls += 1;
        out.poll_with_records_seconds += polled.elapsed().as_secs_f64();
        out.delivered += records.len() as u64;
        let mut offsets = Vec::with_capacity(records.len());
        for r in &records {
            if r.delivery_count > 1 {
                out.redelivered += 1;
            }
            assert_eq!(
                r.value.as_ref().map(|v| v.len()),
                Some(plan.record_bytes),
                "record value"
            );
            match consumer.acknowledge(r, AckType::Accept) {
                Ok(()) => offsets.push((r.partition, r.offset)),
                Err(e) => panic!("acknowledge of a record poll delivered: {e}"),
            }
        }
        let committing = Instant::now();
        let committed = consumer.commit_sync();
        out.commits += 1;
        out.commit_seconds += committing.elapsed().as_secs_f64();
        if let Err(e) = committed {
            out.commit_errors += 1;
            out.first_commit_error.get_or_insert(e.to_string());
            continue;
        }
        // Piggybacked acknowledgements do not happen here (commit_sync sends every pending one
        // before the next ShareFetch), but their errors would land here.
        for e in consumer.take_acknowledgement_errors() {
            out.commit_errors += 1;
            out.first_commit_error.get_or_insert(e.to_string());
        }
        let now = Instant::now();
        let mut acked = shared.acked.lock().unwrap();
        let mut fresh = 0;
        for (p, offset) in offsets {
            let slot = acked
                .get_mut(p as usize)
                .and_then(|v| v.get_mut(offset as usize));
            match slot {
                Some(s) if !*s => {
                    *s = true;
                    fresh += 1;
                }
                Some(_) => {
                    shared.acked_again.fetch_add(1, Ordering::Relaxed);
                }
                None => panic!("delivered offset {p}/{offset} was never produced"),
            }
        }
        let total = shared.acked_distinct.fetch_add(fresh, Ordering::Relaxed) + fresh;
        *shared.last_progress.lock().unwrap() = now;
        if total >= expected && fresh > 0 {
            shared.completed.lock().unwrap().get_or_insert(now);
        }
    }
    let stats = consumer.stats();
    out.share_fetches = stats.share_fetches;
    out.share_acknowledges = stats.share_acknowledges;
    out.heartbeats = stats.heartbeats;
    if let Err(e) = consumer.close() {
        out.poll_errors += 1;
        out.first_poll_error.get_or_insert(format!("close: {e}"));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Table

fn print_table(report: &Report) {
    let p = &report.plan;
    println!();
    println!(
        "share bench ({}): {} records of {} B per case, explicit ACCEPT + commit_sync per poll; \
         commit {}; {} cpus, load average {} at start; 4 KiB write + fdatasync {:.0}/s",
        report.mode,
        p.records_per_case,
        p.record_bytes,
        report.commit,
        report.machine["cpus"],
        report.load_average_at_start,
        report.fdatasync_4k_per_s
    );
    for b in &report.brokers {
        if let Some(why) = &b.not_run {
            println!("{}: not run ({why})", b.name);
        }
        if let Some(e) = &b.failed {
            println!("{}: FAILED: {e}", b.name);
        }
        for e in &b.start_failures {
            println!("{}: a start-up failed before the one measured: {e}", b.name);
        }
    }
    let cell = |b: Option<&BrokerRun>, partitions: i32, consumers: usize| -> String {
        let Some(b) = b.filter(|b| b.not_run.is_none()) else {
            return "-".into();
        };
        match b
            .cases
            .iter()
            .find(|c| (c.partitions, c.consumers) == (partitions, consumers))
        {
            Some(c) if c.failed.is_some() => "FAILED".into(),
            Some(c) => format!("{:.0}", c.records_per_s),
            None => "-".into(),
        }
    };
    let lockstep = report.brokers.iter().find(|b| b.name == "lockstep");
    let kafka = report.brokers.iter().find(|b| b.name == "kafka");
    println!(
        "{:<26} {:>16} {:>16} {:>8} {:>8}",
        "case", "lockstep rec/s", "kafka rec/s", "ratio", "target"
    );
    for (partitions, consumers) in CASES {
        let ratio = report
            .comparison
            .iter()
            .find(|c| (c.partitions, c.consumers) == (partitions, consumers))
            .map_or("-".to_string(), |c| format!("{:.2}", c.ratio));
        println!(
            "{:<26} {:>16} {:>16} {:>8} {:>8}",
            format!("{partitions} partitions, {consumers} consumers"),
            cell(lockstep, partitions, consumers),
            cell(kafka, partitions, consumers),
            ratio,
            format!(">= {TARGET_RATIO}")
        );
    }
    println!("mean ms per poll with records / per commit_sync:");
    for b in report.brokers.iter().filter(|b| !b.cases.is_empty()) {
        let cells: Vec<String> = b
            .cases
            .iter()
            .map(|c| {
                format!(
                    "p{}c{} {:.1}/{:.1}",
                    c.partitions, c.consumers, c.poll_with_records_mean_ms, c.commit_sync_mean_ms
                )
            })
            .collect();
        println!("  {:<10} {}", b.name, cells.join("  "));
    }
    for b in &report.brokers {
        for c in &b.cases {
            if let Some(e) = &c.failed {
                println!(
                    "{} ({} partitions, {} consumers): FAILED: {e}",
                    b.name, c.partitions, c.consumers
                );
            }
            if c.commit_errors > 0 || c.poll_errors > 0 {
                println!(
                    "{} ({} partitions, {} consumers): {} commit errors (first: {}), {} poll \
                     errors (first: {}), {} redelivered",
                    b.name,
                    c.partitions,
                    c.consumers,
                    c.commit_errors,
                    c.first_commit_error.as_deref().unwrap_or("-"),
                    c.poll_errors,
                    c.first_poll_error.as_deref().unwrap_or("-"),
                    c.redelivered
                );
            }
        }
    }
}
