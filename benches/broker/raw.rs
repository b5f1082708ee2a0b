//! The raw-protocol load generator of `cargo bench --bench broker -- --raw`,
//! kept beside Kafka's own tools because it measures what they cannot on this machine: the
//! broker at a load the Java client cannot generate with the cores left to it (pipelined
//! requests from a light Rust generator), produce latency at a fixed open-loop rate (measured
//! from each request's scheduled send time), and plain Fetch read-back throughput with every
//! batch's CRC checked. The headline figures of the broker bench's targets come from Kafka's tools
//! (`broker.rs`); these phases are a second view, reported under `raw` in the JSON.
//!
//! The generator is this process: a few blocking TCP connections speaking raw Kafka
//! protocol (requests encoded and responses decoded with the `kafka-protocol` crate), each with
//! a writer thread and a reader thread so that requests are pipelined up to a bounded number in
//! flight. For each broker, on a fresh topic of `partitions` partitions:
//!
//! 1. produce throughput: 1 KiB records, acks=all, every request carries one batch of about
//!    `batch_bytes` per partition; as fast as the window allows for `produce_seconds` (after an
//!    unmeasured warm-up); records/s, MB/s (record-batch bytes, 10^6) and the latency of each
//!    request from its send to its response (p50/p99/p99.9/max);
//! 2. fetch throughput: everything produced in 1 is read back from offset 0 with Fetch v12
//!    (1 MiB per partition, 50 MiB per response, as the Java consumer's defaults), every batch's
//!    CRC checked, and the record count compared with what was acknowledged;
//! 3. produce latency at a fixed rate: `fixed_rate_fraction` of the slower broker's throughput
//!    from 1, open loop (requests are sent on schedule whether or not earlier ones were
//!    answered), latency measured from each request's *scheduled* send time so that a stall is
//!    not hidden by the generator waiting for it. The brokers are restarted for this phase (so
//!    only one broker runs at a time) and warmed up again.
//!
//! Every phase also reports CPU in cores for the client (this process, getrusage), the broker
//! (/proc/PID/stat) and everything else on the machine (/proc/stat), the broker's writes to
//! storage (/proc/PID/io), and for Lockstep its flushes per second and their mean latency (from
//! its own `--metrics-listen` endpoint).
//!
//! Durability differs: Lockstep answers acks=all after fdatasync; a single Kafka broker answers
//! acks=all once the batch is in its page cache (it never fsyncs by default). `--kafka-fsync`
//! adds Kafka with `log.flush.interval.messages=1`. Options (after `--`, with `--raw`):
//! `--connections N`, `--in-flight N`, `--seconds S` (produce and fixed-rate phases).

use crate::common;

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use lockstep::log::batch::{self, BatchBuilder, BATCH_HEADER_BYTES, BATCH_LOG_OVERHEAD_BYTES};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const RECORD_BYTES: usize = 1024;
const CLIENT_ID: &str = "lockstep-bench";
const PRODUCE_VERSION: i16 = 9;
const FETCH_VERSION: i16 = 12;
const TOPIC_THROUGHPUT: &str = "bench-throughput";
const TOPIC_FIXED: &str = "bench-fixed";
/// Socket read/write timeout: a broker that stops answering fails the phase instead of hanging.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Produce requests' own timeout (Kafka `timeout_ms`).
const PRODUCE_TIMEOUT_MS: i32 = 30_000;

/// Sizes of one run: the full measurement, or the smoke run under `cargo test`.
#[derive(Clone, Copy, Serialize)]
struct Plan {
    partitions: i32,
    connections: usize,
    in_flight_per_connection: usize,
    batch_bytes: usize,
    warmup_seconds: f64,
    produce_seconds: f64,
    /// Upper bound on produce requests per connection in any one phase.
    produce_requests_max: u64,
    fixed_rate_fraction: f64,
    fixed_seconds: f64,
    fetch_partition_max_bytes: i32,
    fetch_response_max_bytes: i32,
    fetch_seconds_max: f64,
    /// Seconds of the machine probe (16 KiB write + fdatasync).
    fsync_probe_seconds: f64,
    /// Bytes of the sequential-write probe.
    sequential_write_bytes: usize,
}

const FULL: Plan = Plan {
    partitions: 4,
    connections: 4,
    in_flight_per_connection: 8,
    batch_bytes: 16 << 10,
    warmup_seconds: 3.0,
    produce_seconds: 10.0,
    produce_requests_max: 10_000_000,
    fixed_rate_fraction: 0.2,
    fixed_seconds: 10.0,
    fetch_partition_max_bytes: 1 << 20,
    fetch_response_max_bytes: 50 << 20,
    fetch_seconds_max: 120.0,
    fsync_probe_seconds: 1.0,
    sequential_write_bytes: 512 << 20,
};
const SMOKE: Plan = Plan {
    partitions: 4,
    connections: 2,
    in_flight_per_connection: 2,
    batch_bytes: 16 << 10,
    warmup_seconds: 0.0,
    produce_seconds: 2.0,
    produce_requests_max: 3,
    fixed_rate_fraction: 0.2,
    fixed_seconds: 1.0,
    fetch_partition_max_bytes: 1 << 20,
    fetch_response_max_bytes: 50 << 20,
    fetch_seconds_max: 10.0,
    fsync_probe_seconds: 0.05,
    sequential_write_bytes: 4 << 20,
};

// ---------------------------------------------------------------------------------------------
// Report

#[derive(Serialize)]
struct Report {
    commit: String,
    machine: serde_json::Value,
    plan: Plan,
    records_per_batch: usize,
    request_bytes: usize,
    /// /proc/loadavg when the run started: other work on the machine skews every figure.
    load_average_at_start: String,
    /// Buffered 1 MiB sequential writes and one fdatasync at the end (the disk's bandwidth).
    sequential_write_mb_per_s: f64,
    fdatasync_16k_per_s: f64,
    /// The fixed rate of phase 3, records/s (both brokers).
    fixed_rate_records_per_s: f64,
    brokers: Vec<BrokerResult>,
    /// Lockstep against Kafka (default configuration), when both ran.
    comparison: Option<Comparison>,
}

#[derive(Serialize, Default)]
struct BrokerResult {
    name: String,
    /// Why the broker was not run, if it was not.
    not_run: Option<String>,
    /// The first failure (the broker's or the generator's), if any.
    failed: Option<String>,
    produce: Option<ProduceStats>,
    fetch: Option<FetchStats>,
    fixed: Option<ProduceStats>,
    /// Lockstep only: every stop after SIGTERM exited 0.
    clean_exit: Option<bool>,
}

#[derive(Serialize, Clone, Default)]
struct ProduceStats {
    requests: u64,
    records: u64,
    bytes: u64,
    seconds: f64,
    records_per_s: f64,
    mb_per_s: f64,
    /// Fixed-rate phase only: the rate asked for.
    target_records_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
    errors: u64,
    first_error: Option<String>,
    usage: Usage,
}

#[derive(Serialize, Clone, Default)]
struct FetchStats {
    requests: u64,
    records: u64,
    bytes: u64,
    expected_records: u64,
    seconds: f64,
    records_per_s: f64,
    mb_per_s: f64,
    usage: Usage,
}

#[derive(Serialize)]
struct Comparison {
    produce_throughput_ratio: f64,
    produce_throughput_target: f64,
    produce_throughput_met: bool,
    fixed_rate_p99_ratio: f64,
    fixed_rate_p99_target: f64,
    fixed_rate_p99_met: bool,
    fetch_throughput_ratio: f64,
}

// ---------------------------------------------------------------------------------------------
// main

#[derive(Clone)]
enum Kind {
    Lockstep,
    Kafka { extra_props: String },
}

#[derive(Clone)]
struct Spec {
    name: String,
    kind: Kind,
}

use crate::progress;

/// Runs the raw phases against Lockstep and, unless `kafka_unavailable` says why not, Kafka;
/// prints their table and returns their report. `full`: the full measurement, else the smoke
/// run (which asserts that every Lockstep phase worked).
pub fn run(
    args: &[String],
    full: bool,
    kafka_unavailable: Option<String>,
    work: &Path,
) -> serde_json::Value {
    let mut plan = if full { FULL } else { SMOKE };
    let option = |name: &str| {
        args.iter().position(|a| a == name).map(|i| {
            args.get(i + 1)
                .unwrap_or_else(|| panic!("{name} takes a value"))
        })
    };
    if let Some(v) = option("--connections") {
        plan.connections = v.parse().expect("--connections N");
    }
    if let Some(v) = option("--in-flight") {
        plan.in_flight_per_connection = v.parse().expect("--in-flight N");
    }
    if let Some(v) = option("--seconds") {
        plan.produce_seconds = v.parse().expect("--seconds S");
        plan.fixed_seconds = plan.produce_seconds;
    }
    assert!(plan.connections > 0 && plan.in_flight_per_connection > 0);
    let load_average_at_start = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let work = &work.join("raw");
    std::fs::create_dir_all(work).expect("raw work directory");

    let (records_per_batch, batch) = batch_of(plan.batch_bytes);
    let request_bytes = batch.len() * plan.partitions as usize;

    let mut specs = vec![Spec {
        name: "lockstep".into(),
        kind: Kind::Lockstep,
    }];
    let mut results = vec![BrokerResult {
        name: "lockstep".into(),
        clean_exit: Some(true),
        ..Default::default()
    }];
    let kafka_names: Vec<(String, String)> = {
        let mut v = vec![("kafka".to_string(), String::new())];
        if args.iter().any(|a| a == "--kafka-fsync") {
            v.push((
                "kafka-fsync".to_string(),
                "log.flush.interval.messages=1".to_string(),
            ));
        }
        v
    };
    for (name, extra_props) in kafka_names {
        match &kafka_unavailable {
            Some(why) => results.push(BrokerResult {
                name,
                not_run: Some(why.clone()),
                ..Default::default()
            }),
            None => {
                specs.push(Spec {
                    name: name.clone(),
                    kind: Kind::Kafka { extra_props },
                });
                results.push(BrokerResult {
                    name,
                    ..Default::default()
                });
            }
        }
    }

    progress("machine: 1 MiB sequential writes + fdatasync");
    let sequential_write_mb_per_s = sequential_write(work, plan.sequential_write_bytes);
    progress("machine: 16 KiB write + fdatasync");
    let fdatasync_16k_per_s =
        common::fdatasync_rate(work, plan.fsync_probe_seconds, 100_000, 16 << 10);

    // Phases 1 and 2, one broker at a time.
    for spec in &specs {
        let result = results.iter_mut().find(|r| r.name == spec.name).unwrap();
        if let Err(e) = throughput_session(spec, work, plan, &batch, records_per_batch, result) {
            result.failed.get_or_insert(e);
        }
    }
    // Phase 3 at a rate every broker that ran sustained.
    let slowest = results
        .iter()
        .filter_map(|r| r.produce.as_ref())
        .filter(|p| p.errors == 0 && p.records_per_s > 0.0)
        .map(|p| p.records_per_s)
        .fold(f64::INFINITY, f64::min);
    let fixed_rate = if slowest.is_finite() {
        slowest * plan.fixed_rate_fraction
    } else {
        0.0
    };
    if fixed_rate > 0.0 {
        for spec in &specs {
            let result = results.iter_mut().find(|r| r.name == spec.name).unwrap();
            if result.failed.is_some() {
                continue;
            }
            if let Err(e) = fixed_session(
                spec,
                work,
                plan,
                &batch,
                records_per_batch,
                fixed_rate,
                result,
            ) {
                result.failed.get_or_insert(e);
            }
        }
    }
    progress("raw phases done");

    let comparison = compare(&results);
    let report = Report {
        commit: common::git_commit(),
        machine: common::machine(),
        plan,
        records_per_batch,
        request_bytes,
        load_average_at_start,
        sequential_write_mb_per_s,
        fdatasync_16k_per_s,
        fixed_rate_records_per_s: fixed_rate,
        brokers: results,
        comparison,
    };
    print_table(&report);
    if !full {
        let l = &report.brokers[0];
        assert!(l.failed.is_none(), "lockstep failed: {:?}", l.failed);
        let produce = l.produce.as_ref().expect("produce measured");
        assert!(produce.records > 0 && produce.errors == 0);
        let fetch = l.fetch.as_ref().expect("fetch measured");
        assert_eq!(
            fetch.records, fetch.expected_records,
            "everything read back"
        );
        let fixed = l.fixed.as_ref().expect("fixed rate measured");
        assert!(fixed.records > 0 && fixed.errors == 0);
        assert_eq!(l.clean_exit, Some(true), "SIGTERM exits 0");
    }
    serde_json::to_value(&report).expect("raw report as JSON")
}

/// Phases 1 and 2 on a fresh broker.
fn throughput_session(
    spec: &Spec,
    work: &Path,
    plan: Plan,
    batch: &[u8],
    records_per_batch: usize,
    result: &mut BrokerResult,
) -> Result<(), String> {
    let name = &spec.name;
    progress(&format!("{name}: starting"));
    let broker = start_broker(spec, &work.join(format!("{name}-throughput")))?;
    let outcome = (|| {
        let mut acked = vec![0u64; plan.partitions as usize];
        prepare_topic(&broker, TOPIC_THROUGHPUT, plan.partitions, &mut acked)?;
        let frame = produce_frame(TOPIC_THROUGHPUT, plan.partitions, batch);
        if plan.warmup_seconds > 0.0 {
            progress(&format!("{name}: warm-up ({} s)", plan.warmup_seconds));
            let warm = produce_phase(
                &broker,
                &frame,
                plan,
                (records_per_batch, batch.len()),
                Pace::Max,
                plan.warmup_seconds,
                &mut acked,
            )?;
            check_errors(&warm)?;
        }
        progress(&format!(
            "{name}: produce throughput ({} s)",
            plan.produce_seconds
        ));
        let produce = produce_phase(
            &broker,
            &frame,
            plan,
            (records_per_batch, batch.len()),
            Pace::Max,
            plan.produce_seconds,
            &mut acked,
        )?;
        result.produce = Some(produce.clone());
        check_errors(&produce)?;
        progress(&format!(
            "{name}: fetch {} records from offset 0",
            acked.iter().sum::<u64>()
        ));
        let fetch = fetch_phase(&broker, TOPIC_THROUGHPUT, plan, &acked)?;
        let complete = fetch.records == fetch.expected_records;
        result.fetch = Some(fetch.clone());
        if !complete {
            return Err(format!(
                "fetch read {} records, {} were acknowledged",
                fetch.records, fetch.expected_records
            ));
        }
        Ok(())
    })();
    progress(&format!("{name}: stopping"));
    stop(broker, result);
    outcome
}

/// Phase 3 on a fresh broker: warm-up at full speed, then the fixed rate.
fn fixed_session(
    spec: &Spec,
    work: &Path,
    plan: Plan,
    batch: &[u8],
    records_per_batch: usize,
    rate: f64,
    result: &mut BrokerResult,
) -> Result<(), String> {
    let name = &spec.name;
    progress(&format!("{name}: starting again for the fixed-rate phase"));
    let broker = start_broker(spec, &work.join(format!("{name}-fixed")))?;
    let outcome = (|| {
        let mut acked = vec![0u64; plan.partitions as usize];
        prepare_topic(&broker, TOPIC_FIXED, plan.partitions, &mut acked)?;
        let frame = produce_frame(TOPIC_FIXED, plan.partitions, batch);
        if plan.warmup_seconds > 0.0 {
            progress(&format!("{name}: warm-up ({} s)", plan.warmup_seconds));
            let warm = produce_phase(
                &broker,
                &frame,
                plan,
                (records_per_batch, batch.len()),
                Pace::Max,
                plan.warmup_seconds,
                &mut acked,
            )?;
            check_errors(&warm)?;
            std::thread::sleep(Duration::from_secs(1));
        }
        let records_per_request = (records_per_batch * plan.partitions as usize) as f64;
        let per_connection = rate / records_per_request / plan.connections as f64;
        progress(&format!(
            "{name}: produce at {rate:.0} records/s ({} s)",
            plan.fixed_seconds
        ));
        let mut fixed = produce_phase(
            &broker,
            &frame,
            plan,
            (records_per_batch, batch.len()),
            Pace::Every(Duration::from_secs_f64(1.0 / per_connection)),
            plan.fixed_seconds,
            &mut acked,
        )?;
        fixed.target_records_per_s = rate;
        result.fixed = Some(fixed.clone());
        check_errors(&fixed)
    })();
    progress(&format!("{name}: stopping"));
    stop(broker, result);
    outcome
}

fn stop(broker: Broker, result: &mut BrokerResult) {
    let lockstep = broker.kind == common::brokers::Kind::Lockstep;
    match broker.stop() {
        Ok(status) if lockstep && !status.success() => {
            result.clean_exit = Some(false);
            result
                .failed
                .get_or_insert(format!("lockstep exited with {status} after SIGTERM"));
        }
        Ok(_) => {}
        Err(e) => {
            if lockstep {
                result.clean_exit = Some(false);
            }
            result.failed.get_or_insert(e);
        }
    }
}

fn check_errors(stats: &ProduceStats) -> Result<(), String> {
    match &stats.first_error {
        Some(e) => Err(format!(
            "{} failed produce requests; first: {e}",
            stats.errors
        )),
        None => Ok(()),
    }
}

fn compare(results: &[BrokerResult]) -> Option<Comparison> {
    let l = results.iter().find(|r| r.name == "lockstep")?;
    let k = results.iter().find(|r| r.name == "kafka")?;
    let (lp, kp) = (l.produce.as_ref()?, k.produce.as_ref()?);
    let (lx, kx) = (l.fixed.as_ref()?, k.fixed.as_ref()?);
    let fetch_ratio = match (&l.fetch, &k.fetch) {
        (Some(a), Some(b)) => a.records_per_s / b.records_per_s,
        _ => f64::NAN,
    };
    let throughput = lp.records_per_s / kp.records_per_s;
    let p99 = lx.p99_ms / kx.p99_ms;
    Some(Comparison {
        produce_throughput_ratio: throughput,
        produce_throughput_target: 1.5,
        produce_throughput_met: throughput >= 1.5,
        fixed_rate_p99_ratio: p99,
        fixed_rate_p99_target: 0.5,
        fixed_rate_p99_met: p99 <= 0.5,
        fetch_throughput_ratio: fetch_ratio,
    })
}

// ---------------------------------------------------------------------------------------------
// Brokers under test

use common::brokers::{Broker, LockstepOptions};
use common::{clock_ticks_per_s, proc_cpu_seconds};

/// Starts the broker `spec` names (Lockstep with its Prometheus endpoint, for the fsync totals).
fn start_broker(spec: &Spec, dir: &Path) -> Result<Broker, String> {
    match &spec.kind {
        Kind::Lockstep => Broker::start_lockstep(
            dir,
            LockstepOptions {
                shards: None,
                metrics: true,
            },
        ),
        Kind::Kafka { extra_props } => Broker::start_kafka(dir, extra_props),
    }
}

/// CPU seconds (user + system, all threads) this process has used so far.
fn self_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// What a phase used: CPU in cores (this process, the broker, everything else on the machine)
/// and the bytes the broker sent to the storage layer (`/proc/PID/io` `write_bytes`).
#[derive(Serialize, Clone, Copy, Default)]
struct Usage {
    client_cpu_cores: f64,
    broker_cpu_cores: f64,
    /// Busy CPU of the whole machine (/proc/stat) minus client and broker: other processes
    /// and the kernel's own threads (e.g. writeback).
    other_cpu_cores: f64,
    broker_disk_write_mb_per_s: f64,
    /// Lockstep only, from its own metrics (`--metrics-listen`): flushes per second and their
    /// mean latency over the phase.
    broker_fsyncs_per_s: Option<f64>,
    broker_fsync_mean_ms: Option<f64>,
}

struct UsageMeter {
    start: Instant,
    client: f64,
    broker: f64,
    machine: f64,
    written: u64,
    pid: u32,
    metrics_port: Option<u16>,
    fsync: Option<(f64, f64)>,
}

impl UsageMeter {
    fn start(broker: &Broker) -> UsageMeter {
        UsageMeter {
            start: Instant::now(),
            client: self_cpu_seconds(),
            broker: proc_cpu_seconds(broker.pid()),
            machine: machine_busy_seconds(),
            written: proc_write_bytes(broker.pid()),
            pid: broker.pid(),
            metrics_port: broker.metrics_port,
            fsync: broker.metrics_port.and_then(fsync_totals),
        }
    }

    fn usage(&self) -> Usage {
        let wall = self.start.elapsed().as_secs_f64().max(1e-9);
        let client = (self_cpu_seconds() - self.client) / wall;
        let broker = (proc_cpu_seconds(self.pid) - self.broker) / wall;
        let machine = (machine_busy_seconds() - self.machine) / wall;
        let fsync = match (self.fsync, self.metrics_port.and_then(fsync_totals)) {
            (Some((sum0, n0)), Some((sum1, n1))) => Some((sum1 - sum0, n1 - n0)),
            _ => None,
        };
        Usage {
            broker_fsyncs_per_s: fsync.map(|(_, n)| n / wall),
            broker_fsync_mean_ms: fsync.map(|(sum, n)| sum / n.max(1.0) / 1000.0),
            client_cpu_cores: client,
            broker_cpu_cores: broker,
            other_cpu_cores: (machine - client - broker).max(0.0),
            broker_disk_write_mb_per_s: proc_write_bytes(self.pid).saturating_sub(self.written)
                as f64
                / wall
                / 1e6,
        }
    }
}

/// CPU seconds all CPUs of the machine have been busy (not idle, not waiting for I/O).
fn machine_busy_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(cpu) = stat.lines().next() else {
        return 0.0;
    };
    // cpu user nice system idle iowait irq softirq steal ...
    let ticks: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|t| t.parse().ok())
        .collect();
    if ticks.len() < 8 {
        return 0.0;
    }
    (ticks.iter().sum::<f64>() - ticks[3] - ticks[4] - ticks[7]) / clock_ticks_per_s()
}

/// Lockstep's flush totals over all shards: (sum of latencies in µs, count), from its
/// Prometheus text.
pub fn fsync_totals(port: u16) -> Option<(f64, f64)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let total = |name: &str| -> Option<f64> {
        let values: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    Some((
        total("lockstep_fsync_latency_us_sum")?,
        total("lockstep_fsync_latency_us_count")?,
    ))
}

/// Bytes the process has caused to be sent to the storage layer.
fn proc_write_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Kafka protocol

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A whole request frame (size prefix included) with correlation id `correlation`.
fn request_frame<R: Encodable>(
    key: ApiKey,
    version: i16,
    correlation: i32,
    request: &R,
) -> Vec<u8> {
    let mut header = RequestHeader::default();
    header.request_api_key = key as i16;
    header.request_api_version = version;
    header.correlation_id = correlation;
    header.client_id = Some(sb(CLIENT_ID));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, key.request_header_version(version))
        .expect("encode header");
    request.encode(&mut buf, version).expect("encode request");
    let mut frame = Vec::with_capacity(buf.len() + 4);
    frame.extend_from_slice(&(buf.len() as i32).to_be_bytes());
    frame.extend_from_slice(&buf);
    frame
}

/// Byte range of the correlation id in a request frame (size, api key, api version first).
const CORRELATION_AT: std::ops::Range<usize> = 8..12;

fn read_frame(stream: &mut TcpStream) -> std::io::Result<Bytes> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let size = i32::from_be_bytes(size);
    if !(0..=(256 << 20)).contains(&size) {
        return Err(std::io::Error::other(format!(
            "response frame of {size} bytes"
        )));
    }
    let mut body = vec![0u8; size as usize];
    stream.read_exact(&mut body)?;
    Ok(Bytes::from(body))
}

fn decode_response<R: Decodable>(
    key: ApiKey,
    version: i16,
    correlation: i32,
    mut frame: Bytes,
) -> Result<R, String> {
    let header = ResponseHeader::decode(&mut frame, key.response_header_version(version))
        .map_err(|e| format!("{key:?} response header: {e}"))?;
    if header.correlation_id != correlation {
        return Err(format!(
            "{key:?} response has correlation id {}, expected {correlation}",
            header.correlation_id
        ));
    }
    R::decode(&mut frame, version).map_err(|e| format!("{key:?} v{version} response: {e}"))
}

fn connect(port: u16) -> Result<TcpStream, String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    Ok(stream)
}

/// One request, one response, on a connection of its own.
struct Admin {
    stream: TcpStream,
    correlation: i32,
}

impl Admin {
    fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, String> {
        self.correlation += 1;
        let frame = request_frame(key, version, self.correlation, request);
        self.stream
            .write_all(&frame)
            .map_err(|e| format!("{key:?}: write: {e}"))?;
        let response = read_frame(&mut self.stream).map_err(|e| format!("{key:?}: read: {e}"))?;
        decode_response(key, version, self.correlation, response)
    }
}

/// Creates the topic and waits until every partition accepts an acks=all produce (Kafka elects
/// leaders after CreateTopics returns). The probe records are counted in `acked`.
fn prepare_topic(
    broker: &Broker,
    topic: &str,
    partitions: i32,
    acked: &mut [u64],
) -> Result<(), String> {
    let mut admin = Admin {
        stream: connect(broker.port)?,
        correlation: 0,
    };
    let mut creatable = create_topics_request::CreatableTopic::default();
    creatable.name = TopicName(sb(topic));
    creatable.num_partitions = partitions;
    creatable.replication_factor = 1;
    let mut create = CreateTopicsRequest::default();
    create.topics = vec![creatable];
    create.timeout_ms = 30_000;
    let response: CreateTopicsResponse = admin.call(ApiKey::CreateTopics, 7, &create)?;
    let created = response
        .topics
        .first()
        .ok_or("CreateTopics: no topic in the response")?;
    if created.error_code != 0 {
        return Err(format!(
            "CreateTopics {topic}: error {} {:?}",
            created.error_code, created.error_message
        ));
    }
    let mut probe = BatchBuilder::new(now_ms());
    probe.record(now_ms(), None, Some(b"probe"));
    let request = produce_request(topic, partitions, &probe.build());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending: Vec<i32> = (0..partitions).collect();
    loop {
        let response: ProduceResponse = admin.call(ApiKey::Produce, PRODUCE_VERSION, &request)?;
        let mut last_error = 0;
        for topic in &response.responses {
            for p in &topic.partition_responses {
                if p.error_code == 0 {
                    if let Some(i) = pending.iter().position(|&x| x == p.index) {
                        pending.remove(i);
                    }
                    acked[p.index as usize] += 1;
                } else {
                    last_error = p.error_code;
                }
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "partitions {pending:?} of {topic} still refuse produce after 60 s (error {last_error})"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn produce_request(topic: &str, partitions: i32, batch: &[u8]) -> ProduceRequest {
    let records = Bytes::copy_from_slice(batch);
    let mut data = produce_request::TopicProduceData::default();
    data.name = TopicName(sb(topic));
    data.partition_data = (0..partitions)
        .map(|index| {
            let mut p = produce_request::PartitionProduceData::default();
            p.index = index;
            p.records = Some(records.clone());
            p
        })
        .collect();
    let mut request = ProduceRequest::default();
    request.acks = -1;
    request.timeout_ms = PRODUCE_TIMEOUT_MS;
    request.topic_data = vec![data];
    request
}

/// The produce request frame every load request sends (only the correlation id changes).
fn produce_frame(topic: &str, partitions: i32, batch: &[u8]) -> Vec<u8> {
    request_frame(
        ApiKey::Produce,
        PRODUCE_VERSION,
        0,
        &produce_request(topic, partitions, batch),
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A batch of 1 KiB records (no key) of at most `bytes` bytes, and its record count. Current
/// timestamps, so that Kafka's time-based retention leaves the log alone.
fn batch_of(bytes: usize) -> (usize, Vec<u8>) {
    let value = vec![0x5a_u8; RECORD_BYTES];
    let base = now_ms();
    let mut count = 1;
    loop {
        let mut builder = BatchBuilder::new(base);
        for i in 0..count + 1 {
            builder.record(base + i as i64, None, Some(&value));
        }
        if builder.build().len() > bytes {
            let mut builder = BatchBuilder::new(base);
            for i in 0..count {
                builder.record(base + i as i64, None, Some(&value));
            }
            return (count, builder.build());
        }
        count += 1;
    }
}

// ---------------------------------------------------------------------------------------------
// Produce load

#[derive(Clone, Copy)]
enum Pace {
    /// As fast as the in-flight window allows.
    Max,
    /// One request per connection every interval (open loop).
    Every(Duration),
}

/// A counting semaphore for the in-flight window; `close` releases every waiter.
struct Window {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
    size: usize,
}

impl Window {
    fn acquire(&self) -> bool {
        let mut state = self.state.lock().unwrap();
        let deadline = Instant::now() + IO_TIMEOUT * 2;
        while state.0 >= self.size && !state.1 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self.changed.wait_timeout(state, left).unwrap().0;
        }
        if state.1 {
            return false;
        }
        state.0 += 1;
        true
    }

    fn release(&self) {
        let mut state = self.state.lock().unwrap();
        state.0 = state.0.saturating_sub(1);
        self.changed.notify_all();
    }

    fn close(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

struct Sent {
    correlation: i32,
    /// When the request was due: its send time at full speed, its scheduled time at a fixed rate.
    due: Instant,
}

struct ConnOutcome {
    histogram: Histogram<u64>,
    requests: u64,
    acked: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
    last_response: Option<Instant>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds")
}

/// Runs `plan.connections` pipelined producers for `seconds`; adds acknowledged records per
/// partition to `acked`.
fn produce_phase(
    broker: &Broker,
    frame: &[u8],
    plan: Plan,
    (records_per_batch, batch_len): (usize, usize),
    pace: Pace,
    seconds: f64,
    acked: &mut [u64],
) -> Result<ProduceStats, String> {
    let streams: Vec<TcpStream> = (0..plan.connections)
        .map(|_| connect(broker.port))
        .collect::<Result<_, _>>()?;
    let frame = Arc::new(frame.to_vec());
    let duration = Duration::from_secs_f64(seconds);
    let cpu = UsageMeter::start(broker);
    let start = Instant::now();
    let handles: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(c, stream)| {
            let frame = frame.clone();
            // Spread the connections' schedules evenly over one interval.
            let offset = match pace {
                Pace::Max => Duration::ZERO,
                Pace::Every(d) => d.mul_f64(c as f64 / plan.connections as f64),
            };
            std::thread::spawn(move || {
                produce_connection(
                    stream,
                    frame,
                    plan,
                    records_per_batch,
                    pace,
                    start + offset,
                    start + duration,
                )
            })
        })
        .collect();
    let outcomes: Vec<ConnOutcome> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| "a producer thread panicked".to_string())
        })
        .collect::<Result<_, _>>()?;
    let usage = cpu.usage();
    let mut merged = histogram();
    let mut stats = ProduceStats {
        usage,
        ..Default::default()
    };
    let mut end = start;
    for o in outcomes {
        merged.add(&o.histogram).expect("same bounds");
        stats.requests += o.requests;
        stats.errors += o.errors;
        if stats.first_error.is_none() {
            stats.first_error = o.first_error;
        }
        for (total, add) in acked.iter_mut().zip(&o.acked) {
            *total += add;
            stats.records += add;
        }
        end = end.max(o.last_response.unwrap_or(start));
    }
    // Record-batch bytes acknowledged (the batches themselves, not the request framing).
    stats.bytes = stats.records / records_per_batch as u64 * batch_len as u64;
    stats.seconds = (end - start).as_secs_f64();
    if stats.seconds > 0.0 {
        stats.records_per_s = stats.records as f64 / stats.seconds;
        stats.mb_per_s = stats.bytes as f64 / stats.seconds / 1e6;
    }
    let ms = |v: u64| v as f64 / 1000.0;
    if !merged.is_empty() {
        stats.p50_ms = ms(merged.value_at_quantile(0.5));
        stats.p99_ms = ms(merged.value_at_quantile(0.99));
        stats.p999_ms = ms(merged.value_at_quantile(0.999));
        stats.max_ms = ms(merged.max());
    }
    Ok(stats)
}

fn produce_connection(
    stream: TcpStream,
    frame: Arc<Vec<u8>>,
    plan: Plan,
    records_per_batch: usize,
    pace: Pace,
    first_due: Instant,
    end: Instant,
) -> ConnOutcome {
    let window = Arc::new(Window {
        state: Mutex::new((0, false)),
        changed: Condvar::new(),
        size: plan.in_flight_per_connection,
    });
    let (tx, rx) = mpsc::channel::<Sent>();
    let mut reader_stream = stream.try_clone().expect("clone socket");
    let reader_window = window.clone();
    let partitions = plan.partitions as usize;
    let reader = std::thread::spawn(move || {
        let mut outcome = ConnOutcome {
            histogram: histogram(),
            requests: 0,
            acked: vec![0; partitions],
            errors: 0,
            first_error: None,
            last_response: None,
        };
        let fail = |outcome: &mut ConnOutcome, e: String| {
            outcome.errors += 1;
            outcome.first_error.get_or_insert(e);
        };
        for sent in rx {
            let response = read_frame(&mut reader_stream)
                .map_err(|e| format!("produce: read: {e}"))
                .and_then(|f| {
                    decode_response::<ProduceResponse>(
                        ApiKey::Produce,
                        PRODUCE_VERSION,
                        sent.correlation,
                        f,
                    )
                });
            let now = Instant::now();
            reader_window.release();
            let response = match response {
                Ok(r) => r,
                Err(e) => {
                    // The connection is unusable: stop the writer.
                    fail(&mut outcome, e);
                    reader_window.close();
                    let _ = reader_stream.shutdown(Shutdown::Both);
                    break;
                }
            };
            outcome.requests += 1;
            outcome.last_response = Some(now);
            let micros = (now - sent.due).as_micros().max(1) as u64;
            let _ = outcome
                .histogram
                .record(micros.min(outcome.histogram.high()));
            let mut request_ok = true;
            for topic in &response.responses {
                for p in &topic.partition_responses {
                    if p.error_code == 0 && (p.index as usize) < partitions {
                        outcome.acked[p.index as usize] += records_per_batch as u64;
                    } else {
                        request_ok = false;
                        if outcome.first_error.is_none() {
                            outcome.first_error = Some(format!(
                                "partition {}: error {} {:?}",
                                p.index, p.error_code, p.error_message
                            ));
                        }
                    }
                }
            }
            if !request_ok {
                outcome.errors += 1;
            }
        }
        outcome
    });

    let mut writer = stream;
    let mut frame = frame.to_vec();
    let mut write_error = None;
    for i in 0..plan.produce_requests_max {
        let due = match pace {
            Pace::Max => {
                if i > 0 && Instant::now() >= end {
                    break;
                }
                None
            }
            Pace::Every(interval) => {
                let due = first_due + interval.mul_f64(i as f64);
                if i > 0 && due >= end {
                    break;
                }
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                Some(due)
            }
        };
        if !window.acquire() {
            break;
        }
        let correlation = i as i32 + 1;
        let due = due.unwrap_or_else(Instant::now);
        frame[CORRELATION_AT].copy_from_slice(&correlation.to_be_bytes());
        // The reader learns of the request before its response can arrive.
        if tx.send(Sent { correlation, due }).is_err() {
            break;
        }
        if let Err(e) = writer.write_all(&frame) {
            write_error = Some(format!("produce: write: {e}"));
            break;
        }
    }
    drop(tx);
    if write_error.is_some() {
        let _ = writer.shutdown(Shutdown::Both);
    }
    let mut outcome = reader.join().expect("reader thread");
    if let Some(e) = write_error {
        outcome.errors += 1;
        outcome.first_error.get_or_insert(e);
    }
    outcome
}

// ---------------------------------------------------------------------------------------------
// Fetch

/// Reads every partition from offset 0 up to `expected[p]` records, one connection per group of
/// partitions, checking every batch's CRC.
fn fetch_phase(
    broker: &Broker,
    topic: &str,
    plan: Plan,
    expected: &[u64],
) -> Result<FetchStats, String> {
    let connections = plan.connections.min(plan.partitions as usize).max(1);
    let streams: Vec<TcpStream> = (0..connections)
        .map(|_| connect(broker.port))
        .collect::<Result<_, _>>()?;
    let cpu = UsageMeter::start(broker);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(plan.fetch_seconds_max);
    let handles: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(c, stream)| {
            let mine: Vec<(i32, u64)> = (0..plan.partitions)
                .filter(|p| *p as usize % connections == c)
                .map(|p| (p, expected[p as usize]))
                .collect();
            let topic = topic.to_string();
            std::thread::spawn(move || fetch_connection(stream, &topic, plan, mine, deadline))
        })
        .collect();
    let mut stats = FetchStats {
        expected_records: expected.iter().sum(),
        ..Default::default()
    };
    let mut first_error = None;
    for h in handles {
        let (requests, records, bytes, error) = h
            .join()
            .map_err(|_| "a fetch thread panicked".to_string())?;
        stats.requests += requests;
        stats.records += records;
        stats.bytes += bytes;
        if first_error.is_none() {
            first_error = error;
        }
    }
    stats.seconds = start.elapsed().as_secs_f64();
    stats.usage = cpu.usage();
    stats.records_per_s = stats.records as f64 / stats.seconds;
    stats.mb_per_s = stats.bytes as f64 / stats.seconds / 1e6;
    match first_error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// (requests, records, bytes, error).
fn fetch_connection(
    mut stream: TcpStream,
    topic: &str,
    plan: Plan,
    partitions: Vec<(i32, u64)>,
    deadline: Instant,
) -> (u64, u64, u64, Option<String>) {
    let mut offsets: Vec<i64> = vec![0; partitions.len()];
    let (mut requests, mut records, mut bytes) = (0u64, 0u64, 0u64);
    let mut empty_in_a_row = 0;
    let mut correlation = 0;
    loop {
        let wanted: Vec<usize> = (0..partitions.len())
            .filter(|&i| (offsets[i] as u64) < partitions[i].1)
            .collect();
        if wanted.is_empty() {
            return (requests, records, bytes, None);
        }
        if Instant::now() > deadline || empty_in_a_row >= 20 {
            let state: Vec<String> = wanted
                .iter()
                .map(|&i| {
                    format!(
                        "partition {} at {} of {}",
                        partitions[i].0, offsets[i], partitions[i].1
                    )
                })
                .collect();
            return (
                requests,
                records,
                bytes,
                Some(format!("fetch stalled: {}", state.join(", "))),
            );
        }
        let mut t = fetch_request::FetchTopic::default();
        t.topic = TopicName(sb(topic));
        t.partitions = wanted
            .iter()
            .map(|&i| {
                let mut p = fetch_request::FetchPartition::default();
                p.partition = partitions[i].0;
                p.fetch_offset = offsets[i];
                p.partition_max_bytes = plan.fetch_partition_max_bytes;
                p
            })
            .collect();
        let mut request = FetchRequest::default();
        request.replica_id = (-1).into();
        request.max_wait_ms = 100;
        request.min_bytes = 1;
        request.max_bytes = plan.fetch_response_max_bytes;
        request.isolation_level = 0;
        request.session_id = 0;
        request.session_epoch = -1;
        request.topics = vec![t];
        correlation += 1;
        let frame = request_frame(ApiKey::Fetch, FETCH_VERSION, correlation, &request);
        let response = stream
            .write_all(&frame)
            .map_err(|e| format!("fetch: write: {e}"))
            .and_then(|_| read_frame(&mut stream).map_err(|e| format!("fetch: read: {e}")))
            .and_then(|f| {
                decode_response::<FetchResponse>(ApiKey::Fetch, FETCH_VERSION, correlation, f)
            });
        let response = match response {
            Ok(r) => r,
            Err(e) => return (requests, records, bytes, Some(e)),
        };
        requests += 1;
        if response.error_code != 0 {
            return (
                requests,
                records,
                bytes,
                Some(format!("fetch: error {}", response.error_code)),
            );
        }
        let mut got = 0;
        for topic in &response.responses {
            for p in &topic.partitions {
                let Some(i) = partitions.iter().position(|(x, _)| *x == p.partition_index) else {
                    continue;
                };
                if p.error_code != 0 {
                    return (
                        requests,
                        records,
                        bytes,
                        Some(format!(
                            "fetch: partition {} error {}",
                            p.partition_index, p.error_code
                        )),
                    );
                }
                let data = p.records.as_deref().unwrap_or(&[]);
                match walk_batches(data, offsets[i]) {
                    Ok((next, n, b)) => {
                        offsets[i] = next;
                        records += n;
                        bytes += b;
                        got += n;
                    }
                    Err(e) => return (requests, records, bytes, Some(e)),
                }
            }
        }
        empty_in_a_row = if got == 0 { empty_in_a_row + 1 } else { 0 };
    }
}

/// Walks the whole batches of a fetch response (a trailing partial batch is ignored, as
/// clients do), validating each (CRC included). Returns (next offset, records, bytes).
fn walk_batches(mut data: &[u8], mut offset: i64) -> Result<(i64, u64, u64), String> {
    let (mut records, mut bytes) = (0u64, 0u64);
    while data.len() >= BATCH_HEADER_BYTES {
        let length = i32::from_be_bytes(data[8..12].try_into().unwrap());
        let total = BATCH_LOG_OVERHEAD_BYTES + length.max(0) as usize;
        if total > data.len() {
            break;
        }
        let h = batch::validate(&data[..total])
            .map_err(|e| format!("fetched batch at offset {offset}: {e:?}"))?;
        let next = h.base_offset + i64::from(h.last_offset_delta) + 1;
        if next > offset {
            // Records of the batch below the fetch offset were read before.
            records += (next - offset.max(h.base_offset)) as u64;
            bytes += total as u64;
            offset = next;
        }
        data = &data[total..];
    }
    Ok((offset, records, bytes))
}

// ---------------------------------------------------------------------------------------------
// Machine, table, helpers

/// Sequential buffered writes of 1 MiB, then one fdatasync; MB/s.
fn sequential_write(work: &Path, total: usize) -> f64 {
    let path = work.join("sequential.bin");
    let file = std::fs::File::create(&path).expect("create");
    let block = vec![0xa5_u8; 1 << 20];
    let start = Instant::now();
    let mut written = 0;
    while written < total {
        file.write_all_at(&block, written as u64).expect("write");
        written += block.len();
    }
    file.sync_data().expect("fdatasync");
    let rate = written as f64 / start.elapsed().as_secs_f64() / 1e6;
    drop(file);
    let _ = std::fs::remove_file(&path);
    rate
}

fn print_table(report: &Report) {
    let p = &report.plan;
    println!();
    println!(
        "broker bench, raw-protocol generator (--raw): 1 KiB records, acks=all, {} partitions, \
         {} connections x {} in flight, requests of {} batches x {} records ({} bytes)",
        p.partitions,
        p.connections,
        p.in_flight_per_connection,
        p.partitions,
        report.records_per_batch,
        report.request_bytes
    );
    println!(
        "machine: {} cpus, load average {} at start; {} MiB buffered writes + fdatasync {:.0} MB/s; \
         16 KiB write + fdatasync {:.0}/s; commit {}",
        report.machine["cpus"],
        report.load_average_at_start,
        report.plan.sequential_write_bytes >> 20,
        report.sequential_write_mb_per_s,
        report.fdatasync_16k_per_s,
        report.commit
    );
    for b in &report.brokers {
        if let Some(why) = &b.not_run {
            println!("{}: not run ({why})", b.name);
        }
        if let Some(e) = &b.failed {
            println!("{}: FAILED: {e}", b.name);
        }
    }
    let ran: Vec<&BrokerResult> = report
        .brokers
        .iter()
        .filter(|b| b.not_run.is_none())
        .collect();
    let comparing = ran.len() >= 2 && ran[1].name == "kafka";
    print!("{:<36}", "");
    for b in &ran {
        print!(" {:>12}", b.name);
    }
    if comparing {
        print!(" {:>8} {:>8}", "ratio", "target");
    }
    println!();
    let row = |label: &str, values: Vec<Option<f64>>, target: Option<&str>, ratio: bool| {
        print!("{label:<36}");
        for v in &values {
            match v {
                Some(v) if v.abs() >= 100.0 => print!(" {v:>12.0}"),
                Some(v) => print!(" {v:>12.2}"),
                None => print!(" {:>12}", "-"),
            }
        }
        if comparing && ratio {
            match (values[0], values[1]) {
                (Some(a), Some(b)) if b != 0.0 => print!(" {:>8.2}", a / b),
                _ => print!(" {:>8}", "-"),
            }
            if let Some(t) = target {
                print!(" {t:>8}");
            }
        }
        println!();
    };
    type P = fn(&ProduceStats) -> f64;
    type U = fn(&Usage) -> Option<f64>;
    let latency: [(&str, P); 4] = [
        ("p50 ms", |s| s.p50_ms),
        ("p99 ms", |s| s.p99_ms),
        ("p99.9 ms", |s| s.p999_ms),
        ("max ms", |s| s.max_ms),
    ];
    let usage: [(&str, U); 6] = [
        ("client CPU (cores)", |u| Some(u.client_cpu_cores)),
        ("broker CPU (cores)", |u| Some(u.broker_cpu_cores)),
        ("other CPU (cores)", |u| Some(u.other_cpu_cores)),
        ("broker disk writes MB/s", |u| {
            Some(u.broker_disk_write_mb_per_s)
        }),
        ("broker fsyncs/s", |u| u.broker_fsyncs_per_s),
        ("broker fsync mean ms", |u| u.broker_fsync_mean_ms),
    ];
    for (phase, get) in [
        (
            "produce",
            (|b| b.produce.as_ref()) as fn(&BrokerResult) -> Option<&ProduceStats>,
        ),
        ("fixed rate", |b| b.fixed.as_ref()),
    ] {
        let stats: Vec<Option<&ProduceStats>> = ran.iter().map(|b| get(b)).collect();
        let values = |f: P| stats.iter().map(|s| s.map(f)).collect::<Vec<_>>();
        if phase == "produce" {
            row(
                "produce records/s",
                values(|s| s.records_per_s),
                Some(">= 1.5"),
                true,
            );
            row("produce MB/s", values(|s| s.mb_per_s), None, true);
        } else {
            row(
                "fixed rate: asked records/s",
                values(|s| s.target_records_per_s),
                None,
                false,
            );
            row(
                "fixed rate: achieved records/s",
                values(|s| s.records_per_s),
                None,
                false,
            );
        }
        for (label, f) in latency {
            let target = (phase == "fixed rate" && label == "p99 ms").then_some("<= 0.5");
            row(
                &format!("{phase}: latency {label}"),
                values(f),
                target,
                true,
            );
        }
        for (label, f) in usage {
            let v = stats.iter().map(|s| s.and_then(|s| f(&s.usage))).collect();
            row(&format!("{phase}: {label}"), v, None, false);
        }
    }
    let fetch: Vec<Option<&FetchStats>> = ran.iter().map(|b| b.fetch.as_ref()).collect();
    let values = |f: fn(&FetchStats) -> f64| fetch.iter().map(|s| s.map(f)).collect::<Vec<_>>();
    row("fetch records/s", values(|s| s.records_per_s), None, true);
    row("fetch MB/s", values(|s| s.mb_per_s), None, true);
    for (label, f) in usage {
        let v = fetch.iter().map(|s| s.and_then(|s| f(&s.usage))).collect();
        row(&format!("fetch: {label}"), v, None, false);
    }
    if let Some(c) = &report.comparison {
        println!(
            "raw generator, its targets: produce throughput {:.2}x Kafka (>= 1.5: {}), \
             fixed-rate p99 {:.2}x Kafka (<= 0.5: {})",
            c.produce_throughput_ratio,
            if c.produce_throughput_met {
                "met"
            } else {
                "NOT met"
            },
            c.fixed_rate_p99_ratio,
            if c.fixed_rate_p99_met {
                "met"
            } else {
                "NOT met"
            },
        );
    }
}
