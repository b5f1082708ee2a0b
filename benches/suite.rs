//! The benchmark suite: OpenMessaging-Benchmark-style workloads against Lockstep in its
//! three acknowledgement modes, Apache Kafka 4.4 and the peers, in one run on one machine.
//!
//! A [`Workload`] says what runs: topics × partitions, record size, producers and their rate (or
//! as fast as possible), a consumer backlog produced before the clock starts, share consumers in
//! one group, the acknowledgement modes, the checkpoint interval and transaction size, warm-up and
//! duration. Named workloads ship in [`named_workloads`]; `--workload-file` loads more (JSON, one
//! workload or a list, e.g. `benches/workloads/small-transactions.json`; without `--workload` the
//! file's workloads are the ones run; `--list` prints the named ones in that format).
//!
//! One measurement (`run_mode`: a target, a workload, a mode), on a fresh topic set and group:
//! 1. setup: create the topics; group configs `share.auto.offset.reset=earliest` and, on
//!    Lockstep, `share.partition.max.record.locks` = `Workload::record_locks` (LOCKED records of an
//!    open transaction count against it until their checkpoint commits; Kafka's default of 2 000
//!    caps a transactional consumer at 2 000 records per checkpoint; outside transactional mode it
//!    is capped at Kafka's bound, 4 000) and for transactional mode
//!    `share.acknowledgement.mode=transactional` (set first: only it allows more than 4 000); produce the backlog (records stamped 0);
//! 2. run: consumers join and wait for an assignment (Kafka assigns a few seconds after a join),
//!    then the clock starts, producers send for warm-up + duration (values carry the send time in
//!    their first 8 bytes), consumers acknowledge every record with ACCEPT:
//!    - **implicit**: `acknowledge`, the acknowledgements ride on the next ShareFetch;
//!    - **explicit**: `acknowledge`, then `commit_sync` (ShareAcknowledge) after every poll;
//!    - **transactional**: `acknowledge_transactional` into the current checkpoint's transaction,
//!      `flush_transactional` after every poll; a coordinator thread checkpoints every
//!      `checkpoint_ms` (or when the transaction holds `transaction_records_max` records; 0 ms:
//!      back to back): begins the next transaction, switches the consumers to it, prepares the
//!      previous one and commits it (the KIP's flow without the sink write);
//! 3. check: each (topic, partition, offset) acknowledged is counted once in a bitmap; a workload
//!    with `drain` waits after the run until every produced record is acknowledged, and then none
//!    may be missing or acknowledged twice.
//!
//! Measured in the window after warm-up: records/s and MB/s acknowledged (for transactional:
//! flushed into a transaction, committed at the next checkpoint), produce latency (one batch, send
//! → acks=all answer), end-to-end latency (send time in the value → poll returned it),
//! acknowledgement latency (`commit_sync`, or the transactional acknowledgement + flush; implicit
//! has none of its own), prepare and commit latency; p50, p99, p99.9, max in HdrHistograms. The
//! machine's 4 KiB write + fdatasync latency is measured in the same run, before any broker
//! starts. A workload without live producers (`producers: 0`, e.g. the headline) measures until
//! its backlog is acknowledged: the window closes at the last acknowledgement, and there is no
//! end-to-end latency. Consumers that met an empty poll inside the window, or left no more than
//! the batches in flight at its end, kept up with the producers: their rate is then the
//! producers', not their own (`consumer_caught_up`). Polls, empty polls, records per poll and
//! poll latency say where a slow run's time went.
//!
//! Also: the headline workload's shape against Kafka 4.4 (explicit; the same client) and the
//! peers of `common::peers` (ratio Lockstep transactional / peer, with each peer's durability as
//! it states it), and a scaling run (one workload, Lockstep with 1 and 2 shards, records/s per
//! core). Output: a table on stdout, a live progress line on stderr,
//! `target/bench-reports/suite.json` and `target/bench-reports/suite.svg`.
//!
//! `cargo bench --bench suite -- [--workload NAME|all] [--duration S] [--warmup S] [--quick]
//! [--peers kafka,redis,rabbitmq,nats|none] [--shards 1,2|none] [--workload-file F] [--list]
//! [--json]`; `--quick` caps warm-up and duration at 1 s and 5 s. Under `cargo test` (no `--bench`
//! argument) it runs the `smoke` workload (every mode, then the scaling path with one shard) in a
//! few seconds, asserts exact consumption and sane figures, validates the workload files and
//! writes `suite-smoke.json` / `.svg`.
//!
//! Bounds: every wait has a deadline (`READY_WITHIN`, `DRAIN_WITHIN`, the client's timeouts);
//! consumer, producer and coordinator threads stop on shared flags.

#[path = "common/mod.rs"]
mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::brokers::{self, Broker, Kind, LockstepOptions};
use common::peers;
use hdrhistogram::Histogram;
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::client::share_consumer::{AckType, ShareConsumer};
use lockstep::client::transactions::ShareTransactionCoordinator;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// How long one `poll` may wait for records.
const POLL_TIMEOUT: Duration = Duration::from_millis(200);
/// How long consumers may take to get an assignment before the clock starts anyway.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// How long a `drain` workload may take after the run to acknowledge what is left.
const DRAIN_WITHIN: Duration = Duration::from_secs(60);
/// How often the watcher checks whether the backlog is drained.
const DRAIN_TICK: Duration = Duration::from_millis(10);
/// How often the live progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How often the checkpoint coordinator looks at the clock and the transaction's size.
const COORDINATOR_TICK: Duration = Duration::from_millis(1);
/// fdatasync probes (4 KiB each) of a full run and of the smoke run.
const FSYNC_PROBES_FULL: usize = 1_000;
const FSYNC_PROBES_SMOKE: usize = 20;
/// The workload of the headline table, the peers and the picture, when `--workload all`.
const HEADLINE: &str = "txn-vs-explicit";
/// The workload of the scaling run, when `--workload all`.
const SCALING: &str = "scaling";
/// The suite's targets: transactional / explicit throughput, commit p99 / fdatasync p99.
const TARGET_TXN_OVER_EXPLICIT: f64 = 0.9;
const TARGET_COMMIT_P99_OVER_FSYNC_P99: f64 = 2.0;
/// Transaction ids are `{group}-{TXN_PREFIX}-{checkpoint}` (the KIP's form).
const TXN_PREFIX: &str = "suite";
const PEERS_ALL: [&str; 4] = ["kafka", "redis", "rabbitmq", "nats"];

// ---------------------------------------------------------------------------------------------
// Workloads

#[derive(Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Implicit,
    Explicit,
    Transactional,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Implicit => "implicit",
            Mode::Explicit => "explicit",
            Mode::Transactional => "transactional",
        }
    }
}

/// What one run does, in the OpenMessaging Benchmark's terms.
#[derive(Clone, Serialize, Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Workload {
    name: String,
    description: String,
    topics: usize,
    partitions_per_topic: i32,
    record_bytes: usize,
    /// Producer threads; each sends to every partition in turn, one batch at a time (acks=all).
    producers: usize,
    /// Records/s over all producers; 0: as fast as possible.
    producer_rate: u64,
    produce_batch_records: usize,
    /// Records produced before the consumers start (OMB's consumer backlog); no send time.
    backlog_records: u64,
    /// Share consumers in one group, subscribed to every topic.
    consumers: usize,
    modes: Vec<Mode>,
    /// Transactional mode: checkpoint (begin next, prepare, commit) every this many ms; 0: one
    /// checkpoint after another, as soon as the transaction holds a record.
    checkpoint_ms: u64,
    /// Transactional mode: also checkpoint once the transaction holds this many records (0: no
    /// limit).
    transaction_records_max: u64,
    /// `share.partition.max.record.locks` of the group (Lockstep).
    record_locks: u32,
    warmup_s: f64,
    duration_s: f64,
    /// After the run, wait until every produced record is acknowledged and check the set.
    drain: bool,
    /// Records each peer produces and consumes (peers run a fixed count, not a duration).
    peer_records: u64,
}

/// The workloads in `benches/workloads/*.json` (run them with `--workload-file`).
fn workload_files() -> Vec<Workload> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/workloads");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files.iter().flat_map(|f| load_workloads(f)).collect()
}

/// One workload or a list of them, in JSON.
fn load_workloads(path: &Path) -> Vec<Workload> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str::<Vec<Workload>>(&text)
        .or_else(|_| serde_json::from_str::<Workload>(&text).map(|w| vec![w]))
        .unwrap_or_else(|e| {
            panic!(
                "{}: not a workload or a list of workloads: {e}",
                path.display()
            )
        })
}

fn named_workloads() -> Vec<Workload> {
    let base = Workload {
        name: String::new(),
        description: String::new(),
        topics: 1,
        partitions_per_topic: 1,
        record_bytes: 1024,
        producers: 1,
        producer_rate: 0,
        produce_batch_records: 500,
        backlog_records: 0,
        consumers: 1,
        modes: vec![Mode::Implicit, Mode::Explicit, Mode::Transactional],
        checkpoint_ms: 1_000,
        transaction_records_max: 0,
        record_locks: 200_000,
        warmup_s: 2.0,
        duration_s: 15.0,
        drain: false,
        peer_records: 200_000,
    };
    vec![
        Workload {
            name: HEADLINE.into(),
            description: "the headline: one consumer drains a backlog of 600 000 × 1 KiB \
                          records (consumer-bound, no live producer); implicit vs explicit vs \
                          transactional at 1 s checkpoints"
                .into(),
            producers: 0,
            backlog_records: 600_000,
            warmup_s: 1.0,
            duration_s: 60.0,
            ..base.clone()
        },
        Workload {
            name: "many-consumers-one-partition".into(),
            description: "eight share consumers on one partition at a fixed 20 000 records/s"
                .into(),
            producer_rate: 20_000,
            produce_batch_records: 100,
            consumers: 8,
            ..base.clone()
        },
        Workload {
            name: "fsync-every-commit".into(),
            description: "transactions back to back (every commit waits for its own journal \
                          flush) against commit_sync per poll, at a fixed 20 000 records/s"
                .into(),
            producer_rate: 20_000,
            produce_batch_records: 100,
            modes: vec![Mode::Explicit, Mode::Transactional],
            checkpoint_ms: 0,
            ..base.clone()
        },
        Workload {
            name: SCALING.into(),
            description: "two consumers drain a backlog of 600 000 × 1 KiB records over four \
                          partitions; run with 1 and 2 shards"
                .into(),
            partitions_per_topic: 4,
            producers: 0,
            consumers: 2,
            backlog_records: 600_000,
            warmup_s: 1.0,
            duration_s: 60.0,
            modes: vec![Mode::Transactional],
            ..base.clone()
        },
        Workload {
            name: "smoke".into(),
            description: "seconds-long run of every mode under `cargo test`; drains and checks \
                          the consumed set"
                .into(),
            topics: 2,
            partitions_per_topic: 2,
            record_bytes: 256,
            producer_rate: 2_000,
            produce_batch_records: 50,
            backlog_records: 500,
            consumers: 2,
            checkpoint_ms: 200,
            transaction_records_max: 300,
            record_locks: 10_000,
            warmup_s: 0.3,
            duration_s: 1.5,
            drain: true,
            peer_records: 2_000,
            ..base
        },
    ]
}

impl Workload {
    fn validate(&self) -> Result<(), String> {
        let bad = |what: &str| Err(format!("workload {}: {what}", self.name));
        if self.topics == 0 || self.partitions_per_topic <= 0 {
            return bad("needs at least one topic and partition");
        }
        if self.record_bytes < 8 {
            return bad("record_bytes < 8 (the send time takes 8)");
        }
        if self.consumers == 0 || self.modes.is_empty() {
            return bad("needs consumers and modes");
        }
        if self.producers == 0 && self.backlog_records == 0 {
            return bad("produces nothing");
        }
        if self.produce_batch_records == 0 || self.duration_s <= 0.0 || self.warmup_s < 0.0 {
            return bad("batch, duration and warm-up must be positive");
        }
        Ok(())
    }

    fn shape(&self) -> String {
        let producers = match (self.producers, self.producer_rate) {
            (0, _) => "no live producer".to_string(),
            (n, 0) => format!("{n} producer(s) as fast as possible"),
            (n, r) => format!("{n} producer(s) at {r} rec/s"),
        };
        format!(
            "{} topic(s) × {} partition(s), {} B records, {producers}, backlog {}, \
             {} consumer(s), checkpoint {} ms{}, warm-up {} s, {} s",
            self.topics,
            self.partitions_per_topic,
            self.record_bytes,
            self.backlog_records,
            self.consumers,
            self.checkpoint_ms,
            match self.transaction_records_max {
                0 => String::new(),
                n => format!(" or {n} records"),
            },
            self.warmup_s,
            self.duration_s
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Latencies

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

/// A histogram (µs) summarised in ms.
#[derive(Serialize, Clone, Copy, Default, Debug)]
struct Latency {
    count: u64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Option<Latency> {
        (!h.is_empty()).then(|| Latency {
            count: h.len(),
            p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
            p999_ms: h.value_at_quantile(0.999) as f64 / 1000.0,
            max_ms: h.max() as f64 / 1000.0,
        })
    }
}

fn cell(l: &Option<Latency>) -> String {
    match l {
        Some(l) => format!("{:.2}/{:.2}", l.p50_ms, l.p99_ms),
        None => "-".into(),
    }
}

/// Microseconds since the process's first call: the send time written into record values.
fn now_us() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // +1: a stamp is never 0 (0 marks backlog records).
    EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64 + 1
}

// ---------------------------------------------------------------------------------------------
// Progress line

fn progress(what: &str) {
    eprint!("\r\x1b[2K[suite] {what}");
    let _ = std::io::stderr().flush();
}

/// Replaces the progress line with a line that stays.
fn progress_done(what: &str) {
    eprintln!("\r\x1b[2K[suite] {what}");
}

// ---------------------------------------------------------------------------------------------
// One measurement

#[derive(Serialize, Clone, Debug, Default)]
struct ModeResult {
    target: String,
    workload: String,
    mode: String,
    /// Lockstep's shard count (0 for other targets).
    shards: usize,
    failed: Option<String>,
    notes: Vec<String>,
    window_s: f64,
    /// Acknowledged in the window (transactional: flushed into a transaction).
    records: u64,
    records_per_s: f64,
    mb_per_s: f64,
    /// Records the producers had acknowledged in the window, per second.
    produced_per_s: f64,
    backlog_records: u64,
    produced_total: u64,
    acknowledged_total: u64,
    acknowledged_again: u64,
    /// Checked only by workloads with `drain`.
    missing: Option<u64>,
    redelivered: u64,
    /// Produced (with the backlog) but not yet acknowledged when the window closed.
    lag_at_window_end: u64,
    /// The consumers kept up with the producers: the rate is then the producers'.
    consumer_caught_up: bool,
    seconds_to_assignment: f64,
    checkpoints: u64,
    records_per_transaction_mean: f64,
    /// Polls in the window, those that returned nothing, records per poll that returned some:
    /// where a slow run's time went.
    polls: u64,
    empty_polls: u64,
    records_per_poll_mean: f64,
    /// Time in `poll` (ShareFetch round trips, heartbeats), in the window.
    poll: Option<Latency>,
    produce: Option<Latency>,
    e2e: Option<Latency>,
    ack: Option<Latency>,
    prepare: Option<Latency>,
    commit: Option<Latency>,
}

/// What producers, consumers, the coordinator and the watcher share during one measurement.
struct Shared {
    stop_producers: AtomicBool,
    stop_consumers: AtomicBool,
    stop_coordinator: AtomicBool,
    /// When the clock started (every consumer had an assignment).
    clock: OnceLock<Instant>,
    warmup: Duration,
    window_end: Duration,
    /// No live producers: the window closes early once the backlog is acknowledged.
    drain_only: bool,
    /// Since the clock, µs: the last acknowledgement inside the window.
    last_ack_us: AtomicU64,
    ready: AtomicU64,
    produced: AtomicU64,
    produced_window: AtomicU64,
    acknowledged: AtomicU64,
    acknowledged_window: AtomicU64,
    acknowledged_again: AtomicU64,
    redelivered: AtomicU64,
    empty_polls_in_window: AtomicU64,
    polls_in_window: AtomicU64,
    /// Per (topic, partition): one flag per offset, set when acknowledged.
    acked: Mutex<HashMap<(String, i32), Vec<bool>>>,
    errors: Mutex<Vec<String>>,
    /// Transactional: the transaction consumers acknowledge into, and how many records it holds.
    current_txn: RwLock<String>,
    txn_records: AtomicU64,
}

impl Shared {
    fn in_window(&self, t: Instant) -> bool {
        self.clock.get().is_some_and(|c| {
            let since = t.saturating_duration_since(*c);
            since >= self.warmup && since < self.window_end
        })
    }

    fn error(&self, what: String) {
        let mut errors = self.errors.lock().unwrap();
        // Bounded: the first few say what went wrong.
        if errors.len() < 20 {
            errors.push(what);
        }
    }
}

/// A running broker the suite measures: Lockstep or Kafka, with the same client.
struct Target<'a> {
    name: &'a str,
    bootstrap: String,
    kind: Kind,
    shards: usize,
}

fn run_mode(target: &Target, w: &Workload, mode: Mode, tag: &str) -> ModeResult {
    let mut result = ModeResult {
        target: target.name.into(),
        workload: w.name.clone(),
        mode: mode.name().into(),
        shards: target.shards,
        backlog_records: w.backlog_records,
        ..Default::default()
    };
    if let Err(e) = measure(target, w, mode, tag, &mut result) {
        result.failed = Some(e);
    }
    result
}

fn measure(
    target: &Target,
    w: &Workload,
    mode: Mode,
    tag: &str,
    out: &mut ModeResult,
) -> Result<(), String> {
    let label = format!("{} {} {}", target.name, w.name, mode.name());
    let group = format!("suite-{}-{}-{tag}", w.name, mode.name());
    let topics: Vec<String> = (0..w.topics).map(|t| format!("{group}-t{t}")).collect();
    progress(&format!("{label}: setup"));
    let mut admin = Admin::connect(&target.bootstrap).map_err(|e| format!("admin: {e}"))?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, w.partitions_per_topic))
        .collect();
    admin
        .create_topics(&new)
        .map_err(|e| format!("create topics: {e}"))?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .map_err(|e| format!("group config: {e}"))?;
    if mode == Mode::Transactional {
        admin
            .set_group_config(&group, "share.acknowledgement.mode", "transactional")
            .map_err(|e| format!("group config: {e}"))?;
    }
    if target.kind == Kind::Lockstep {
        // Past Kafka's 4 000 record locks only in transactional mode (Lockstep's exception).
        let locks = if mode == Mode::Transactional {
            w.record_locks
        } else {
            w.record_locks
                .min(lockstep::constants::SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MAX)
        };
        admin
            .set_group_config(
                &group,
                "share.partition.max.record.locks",
                &locks.to_string(),
            )
            .map_err(|e| format!("group config: {e}"))?;
    }
    let partitions: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|t| (0..w.partitions_per_topic).map(move |p| (t.clone(), p)))
        .collect();

    let shared = Arc::new(Shared {
        stop_producers: AtomicBool::new(false),
        stop_consumers: AtomicBool::new(false),
        stop_coordinator: AtomicBool::new(false),
        clock: OnceLock::new(),
        warmup: Duration::from_secs_f64(w.warmup_s),
        window_end: Duration::from_secs_f64(w.warmup_s + w.duration_s),
        drain_only: w.producers == 0,
        last_ack_us: AtomicU64::new(0),
        ready: AtomicU64::new(0),
        produced: AtomicU64::new(0),
        produced_window: AtomicU64::new(0),
        acknowledged: AtomicU64::new(0),
        acknowledged_window: AtomicU64::new(0),
        acknowledged_again: AtomicU64::new(0),
        redelivered: AtomicU64::new(0),
        empty_polls_in_window: AtomicU64::new(0),
        polls_in_window: AtomicU64::new(0),
        acked: Mutex::new(HashMap::new()),
        errors: Mutex::new(Vec::new()),
        current_txn: RwLock::new(format!("{group}-{TXN_PREFIX}-0")),
        txn_records: AtomicU64::new(0),
    });

    // Backlog, before any consumer.
    let mut backlog_produce_us = histogram();
    if w.backlog_records > 0 {
        progress(&format!(
            "{label}: backlog of {} records",
            w.backlog_records
        ));
        let producers = w.producers.max(1);
        let handles: Vec<_> = (0..producers)
            .map(|i| {
                let share = w.backlog_records / producers as u64
                    + u64::from((i as u64) < w.backlog_records % producers as u64);
                let (shared, bootstrap, partitions, w) = (
                    shared.clone(),
                    target.bootstrap.clone(),
                    partitions.clone(),
                    w.clone(),
                );
                std::thread::spawn(move || {
                    produce(
                        &shared,
                        &bootstrap,
                        &partitions,
                        &w,
                        i,
                        0.0,
                        Some(share),
                        false,
                    )
                })
            })
            .collect();
        for h in handles {
            let h = h.join().map_err(|_| "backlog producer panicked")?;
            backlog_produce_us.add(&h).expect("same bounds");
        }
        if let Some(e) = shared.errors.lock().unwrap().first() {
            return Err(format!("backlog: {e}"));
        }
    }

    // Consumers join; the clock starts once each has an assignment.
    let coordinator = if mode == Mode::Transactional {
        let mut coord = ShareTransactionCoordinator::new(&target.bootstrap, &group);
        coord
            .begin(&shared.current_txn.read().unwrap(), -1)
            .map_err(|e| format!("begin: {e}"))?;
        let (shared, w, group) = (shared.clone(), w.clone(), group.clone());
        Some(std::thread::spawn(move || {
            coordinate(&shared, coord, &w, &group)
        }))
    } else {
        None
    };
    let joined = Instant::now();
    let consumers: Vec<_> = (0..w.consumers)
        .map(|_| {
            let (shared, bootstrap, group, topics) = (
                shared.clone(),
                target.bootstrap.clone(),
                group.clone(),
                topics.clone(),
            );
            std::thread::spawn(move || consume(&shared, &bootstrap, &group, &topics, mode))
        })
        .collect();
    while shared.ready.load(Ordering::SeqCst) < w.consumers as u64
        && joined.elapsed() < READY_WITHIN
    {
        progress(&format!(
            "{label}: {}/{} consumers assigned",
            shared.ready.load(Ordering::SeqCst),
            w.consumers
        ));
        std::thread::sleep(Duration::from_millis(20));
    }
    let ready = shared.ready.load(Ordering::SeqCst);
    if ready < w.consumers as u64 {
        out.notes.push(format!(
            "only {ready} of {} consumers had an assignment after {} s",
            w.consumers,
            READY_WITHIN.as_secs()
        ));
    }
    out.seconds_to_assignment = joined.elapsed().as_secs_f64();
    let clock = Instant::now();
    shared.clock.set(clock).expect("clock set once");

    let rate_per_producer = w.producer_rate as f64 / w.producers.max(1) as f64;
    let producers: Vec<_> = (0..w.producers)
        .map(|i| {
            let (shared, bootstrap, partitions, w) = (
                shared.clone(),
                target.bootstrap.clone(),
                partitions.clone(),
                w.clone(),
            );
            std::thread::spawn(move || {
                produce(
                    &shared,
                    &bootstrap,
                    &partitions,
                    &w,
                    i,
                    rate_per_producer,
                    None,
                    true,
                )
            })
        })
        .collect();

    // The live progress line, until the window closes (or the backlog is drained).
    let window_end = clock + shared.window_end;
    let mut last = (Instant::now(), shared.acknowledged.load(Ordering::Relaxed));
    let drained =
        |s: &Shared| s.drain_only && s.acknowledged.load(Ordering::SeqCst) >= w.backlog_records;
    while Instant::now() < window_end && !drained(&shared) {
        std::thread::sleep(DRAIN_TICK.min(window_end.saturating_duration_since(Instant::now())));
        let now = Instant::now();
        if now.duration_since(last.0) < PROGRESS_EVERY {
            continue;
        }
        let acked = shared.acknowledged.load(Ordering::Relaxed);
        let rate = (acked - last.1) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-3);
        last = (now, acked);
        let produced = w.backlog_records + shared.produced.load(Ordering::Relaxed);
        progress(&format!(
            "{label}: {:5.1} s{} {acked} records, {rate:.0} rec/s, lag {}",
            now.duration_since(clock).as_secs_f64(),
            if now.duration_since(clock) < shared.warmup {
                " (warm-up)"
            } else {
                ""
            },
            produced.saturating_sub(acked)
        ));
    }
    let lag_at_window_end = (w.backlog_records + shared.produced.load(Ordering::SeqCst))
        .saturating_sub(shared.acknowledged.load(Ordering::SeqCst));
    shared.stop_producers.store(true, Ordering::SeqCst);
    let mut produce_us = histogram();
    for h in producers {
        let h = h.join().map_err(|_| "producer panicked")?;
        produce_us.add(&h).expect("same bounds");
    }
    if w.drain {
        let total = w.backlog_records + shared.produced.load(Ordering::SeqCst);
        let until = Instant::now() + DRAIN_WITHIN;
        while shared.acknowledged.load(Ordering::SeqCst) < total && Instant::now() < until {
            progress(&format!(
                "{label}: draining, {}/{total}",
                shared.acknowledged.load(Ordering::SeqCst)
            ));
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    shared.stop_consumers.store(true, Ordering::SeqCst);
    let (mut e2e_us, mut ack_us, mut poll_us) = (histogram(), histogram(), histogram());
    for h in consumers {
        let (e2e, ack, poll) = h.join().map_err(|_| "consumer panicked")?;
        e2e_us.add(&e2e).expect("same bounds");
        ack_us.add(&ack).expect("same bounds");
        poll_us.add(&poll).expect("same bounds");
    }
    shared.stop_coordinator.store(true, Ordering::SeqCst);
    if let Some(h) = coordinator {
        let c = h.join().map_err(|_| "coordinator panicked")?;
        out.prepare = Latency::of(&c.prepare_us);
        out.commit = Latency::of(&c.commit_us);
        out.checkpoints = c.checkpoints;
        out.records_per_transaction_mean = if c.checkpoints > 0 {
            c.records as f64 / c.checkpoints as f64
        } else {
            0.0
        };
    }

    let window_s = if drained(&shared) {
        let last_ack = Duration::from_micros(shared.last_ack_us.load(Ordering::SeqCst));
        last_ack.saturating_sub(shared.warmup).as_secs_f64()
    } else {
        w.duration_s
    };
    if window_s <= 0.0 {
        return Err("the backlog was drained during the warm-up: raise backlog_records".into());
    }
    if w.producers == 0 {
        produce_us = backlog_produce_us;
        out.notes.push(
            "no live producers: the window closes when the backlog is acknowledged; produce \
             latency is the backlog's, end-to-end latency is not measured"
                .into(),
        );
    }
    out.window_s = window_s;
    out.records = shared.acknowledged_window.load(Ordering::SeqCst);
    out.records_per_s = out.records as f64 / window_s;
    out.mb_per_s = out.records_per_s * w.record_bytes as f64 / 1e6;
    out.produced_per_s = shared.produced_window.load(Ordering::SeqCst) as f64 / window_s;
    out.produced_total = w.backlog_records + shared.produced.load(Ordering::SeqCst);
    out.acknowledged_total = shared.acknowledged.load(Ordering::SeqCst);
    out.acknowledged_again = shared.acknowledged_again.load(Ordering::SeqCst);
    out.redelivered = shared.redelivered.load(Ordering::SeqCst);
    out.lag_at_window_end = lag_at_window_end;
    // Caught up: a poll found nothing, or what was left at the end is no more than the batches in
    // flight (one per producer, one poll per consumer, twice over).
    let in_flight = 2
        * (w.producers * w.produce_batch_records
            + w.consumers * lockstep::client::limits::SHARE_FETCH_MAX_RECORDS as usize)
            as u64;
    out.consumer_caught_up = !shared.drain_only
        && (shared.empty_polls_in_window.load(Ordering::SeqCst) > 0
            || lag_at_window_end <= in_flight);
    if w.drain {
        out.missing = Some(out.produced_total.saturating_sub(out.acknowledged_total));
    }
    out.produce = Latency::of(&produce_us);
    out.e2e = Latency::of(&e2e_us);
    out.ack = Latency::of(&ack_us);
    out.poll = Latency::of(&poll_us);
    out.polls = shared.polls_in_window.load(Ordering::SeqCst);
    out.empty_polls = shared.empty_polls_in_window.load(Ordering::SeqCst);
    out.records_per_poll_mean = out.records as f64 / (out.polls - out.empty_polls).max(1) as f64;
    let errors = shared.errors.lock().unwrap().clone();
    if !errors.is_empty() {
        return Err(format!("{} error(s), first: {}", errors.len(), errors[0]));
    }
    if w.drain && out.missing != Some(0) {
        return Err(format!(
            "{} of {} records never acknowledged",
            out.missing.unwrap_or(0),
            out.produced_total
        ));
    }
    progress_done(&format!(
        "{label}: {:.0} rec/s ({:.1} MB/s), e2e p99 {} ms, ack p99 {} ms{}",
        out.records_per_s,
        out.mb_per_s,
        out.e2e.map_or("-".into(), |l| format!("{:.2}", l.p99_ms)),
        out.ack.map_or("-".into(), |l| format!("{:.2}", l.p99_ms)),
        out.commit.map_or(String::new(), |l| format!(
            ", commit p99 {:.2} ms",
            l.p99_ms
        ))
    ));
    Ok(())
}

/// One producer: batches to every partition in turn, at `rate` records/s (0: as fast as
/// possible), `count` records or until `stop_producers`. `stamp`: the send time goes into each
/// value. Returns produce latencies (µs) of the batches acknowledged inside the window (every
/// batch for the backlog, unstamped).
#[allow(clippy::too_many_arguments)]
fn produce(
    shared: &Shared,
    bootstrap: &str,
    partitions: &[(String, i32)],
    w: &Workload,
    index: usize,
    rate: f64,
    count: Option<u64>,
    stamp: bool,
) -> Histogram<u64> {
    let mut h = histogram();
    let mut producer = Producer::new(bootstrap);
    let started = Instant::now();
    let mut sent = 0u64;
    let mut next = index % partitions.len();
    let filler = vec![b'x'; w.record_bytes - 8];
    loop {
        if shared.stop_producers.load(Ordering::Relaxed) {
            break;
        }
        let n = match count {
            Some(c) if sent >= c => break,
            Some(c) => (c - sent).min(w.produce_batch_records as u64),
            None => w.produce_batch_records as u64,
        };
        if rate > 0.0 {
            let due = started + Duration::from_secs_f64(sent as f64 / rate);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let mut value = BytesMut::with_capacity(w.record_bytes);
        value.put_u64_le(if stamp { now_us() } else { 0 });
        value.put_slice(&filler);
        let value: Bytes = value.freeze();
        let batch: Vec<ProducerRecord> = (0..n)
            .map(|_| ProducerRecord {
                key: None,
                value: Some(value.clone()),
                // "Now": a CreateTime of 0 (1970) puts every sealed segment past the topic's
                // retention.ms at once, and retention then deleted records under the consumers.
                timestamp: -1,
            })
            .collect();
        let (topic, partition) = &partitions[next];
        next = (next + 1) % partitions.len();
        let t = Instant::now();
        if let Err(e) = producer.produce(topic, *partition, &batch) {
            shared.error(format!("produce {topic}/{partition}: {e}"));
            break;
        }
        let done = Instant::now();
        sent += n;
        shared
            .produced
            .fetch_add(if stamp { n } else { 0 }, Ordering::Relaxed);
        if !stamp || shared.in_window(done) {
            h.record(done.duration_since(t).as_micros() as u64).ok();
        }
        if stamp && shared.in_window(done) {
            shared.produced_window.fetch_add(n, Ordering::Relaxed);
        }
    }
    h
}

/// One share consumer until `stop_consumers`; returns (end-to-end, acknowledgement, poll)
/// latencies in µs of records / rounds inside the window.
fn consume(
    shared: &Shared,
    bootstrap: &str,
    group: &str,
    topics: &[String],
    mode: Mode,
) -> (Histogram<u64>, Histogram<u64>, Histogram<u64>) {
    let (mut e2e, mut ack, mut poll_us) = (histogram(), histogram(), histogram());
    let mut consumer = ShareConsumer::new(bootstrap, group);
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    if let Err(e) = consumer.subscribe(&topic_refs) {
        shared.error(format!("subscribe: {e}"));
        return (e2e, ack, poll_us);
    }
    let mut ready = false;
    while !shared.stop_consumers.load(Ordering::Relaxed) {
        let polling = Instant::now();
        let polled = match consumer.poll(POLL_TIMEOUT) {
            Ok(r) => r,
            Err(e) => {
                shared.error(format!("poll: {e}"));
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if !ready && !consumer.assignment().is_empty() {
            ready = true;
            shared.ready.fetch_add(1, Ordering::SeqCst);
        }
        for e in consumer.take_acknowledgement_errors() {
            shared.error(format!("piggybacked acknowledgement: {e}"));
        }
        let received = Instant::now();
        if shared.in_window(received) {
            shared.polls_in_window.fetch_add(1, Ordering::Relaxed);
            poll_us
                .record(received.duration_since(polling).as_micros() as u64)
                .ok();
        }
        if polled.is_empty() {
            if shared.in_window(received) {
                shared.empty_polls_in_window.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let received_us = now_us();
        let measured = shared.in_window(received);
        for r in &polled {
            if r.delivery_count > 1 {
                shared.redelivered.fetch_add(1, Ordering::Relaxed);
            }
            let sent_us = r
                .value
                .as_ref()
                .and_then(|v| v.get(..8))
                .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            if measured && sent_us > 0 {
                e2e.record(received_us.saturating_sub(sent_us)).ok();
            }
        }
        let acked = match mode {
            Mode::Implicit => polled
                .iter()
                .try_for_each(|r| consumer.acknowledge(r, AckType::Accept))
                .map_err(|e| format!("acknowledge: {e}")),
            Mode::Explicit => {
                let t = Instant::now();
                let r = polled
                    .iter()
                    .try_for_each(|r| consumer.acknowledge(r, AckType::Accept))
                    .and_then(|()| consumer.commit_sync())
                    .map_err(|e| format!("commit_sync: {e}"));
                if measured && r.is_ok() {
                    ack.record(t.elapsed().as_micros() as u64).ok();
                }
                r
            }
            Mode::Transactional => {
                // Held across the flush: the coordinator switches transactions only between
                // flushes, so every acknowledgement is in before the previous one prepares.
                let txn = shared.current_txn.read().unwrap();
                let t = Instant::now();
                let r = polled
                    .iter()
                    .try_for_each(|r| consumer.acknowledge_transactional(r, AckType::Accept, &txn))
                    .and_then(|()| consumer.flush_transactional())
                    .map_err(|e| format!("transactional acknowledgement into {txn}: {e}"));
                if r.is_ok() {
                    shared
                        .txn_records
                        .fetch_add(polled.len() as u64, Ordering::SeqCst);
                    if measured {
                        ack.record(t.elapsed().as_micros() as u64).ok();
                    }
                }
                r
            }
        };
        if let Err(e) = acked {
            shared.error(e);
            continue;
        }
        let done = Instant::now();
        let mut fresh = 0;
        {
            let mut acked = shared.acked.lock().unwrap();
            for r in &polled {
                let bits = acked.entry((r.topic.clone(), r.partition)).or_default();
                let at = r.offset as usize;
                if bits.len() <= at {
                    bits.resize(at + 1, false);
                }
                if bits[at] {
                    shared.acknowledged_again.fetch_add(1, Ordering::Relaxed);
                } else {
                    bits[at] = true;
                    fresh += 1;
                }
            }
        }
        shared.acknowledged.fetch_add(fresh, Ordering::SeqCst);
        if shared.in_window(done) {
            shared
                .acknowledged_window
                .fetch_add(polled.len() as u64, Ordering::Relaxed);
            let since = done.duration_since(*shared.clock.get().expect("clock in window"));
            shared
                .last_ack_us
                .fetch_max(since.as_micros() as u64, Ordering::SeqCst);
        }
    }
    if let Err(e) = consumer.close() {
        shared.error(format!("close: {e}"));
    }
    (e2e, ack, poll_us)
}

struct Checkpoints {
    prepare_us: Histogram<u64>,
    commit_us: Histogram<u64>,
    checkpoints: u64,
    records: u64,
}

/// The checkpoint coordinator of transactional mode, until `stop_coordinator` (set after every
/// consumer stopped): then it prepares and commits the last transaction.
fn coordinate(
    shared: &Shared,
    mut coord: ShareTransactionCoordinator,
    w: &Workload,
    group: &str,
) -> Checkpoints {
    let mut out = Checkpoints {
        prepare_us: histogram(),
        commit_us: histogram(),
        checkpoints: 0,
        records: 0,
    };
    let interval = Duration::from_millis(w.checkpoint_ms);
    let mut number = 0u64;
    loop {
        let opened = Instant::now();
        let finish = loop {
            if shared.stop_coordinator.load(Ordering::SeqCst) {
                break true;
            }
            let held = shared.txn_records.load(Ordering::SeqCst);
            let due = if w.checkpoint_ms == 0 {
                held > 0
            } else {
                opened.elapsed() >= interval
            };
            if due || (w.transaction_records_max > 0 && held >= w.transaction_records_max) {
                break false;
            }
            std::thread::sleep(COORDINATOR_TICK);
        };
        let (previous, records) = if finish {
            let current = shared.current_txn.read().unwrap().clone();
            (current, shared.txn_records.swap(0, Ordering::SeqCst))
        } else {
            number += 1;
            let next = format!("{group}-{TXN_PREFIX}-{number}");
            if let Err(e) = coord.begin(&next, -1) {
                shared.error(format!("begin {next}: {e}"));
                return out;
            }
            let mut current = shared.current_txn.write().unwrap();
            let records = shared.txn_records.swap(0, Ordering::SeqCst);
            (std::mem::replace(&mut *current, next), records)
        };
        let started = Instant::now();
        if let Err(e) = coord.prepare(&previous) {
            shared.error(format!("prepare {previous}: {e}"));
            return out;
        }
        let prepared = Instant::now();
        if let Err(e) = coord.commit(&previous) {
            shared.error(format!("commit {previous}: {e}"));
            return out;
        }
        let committed = Instant::now();
        if shared.in_window(committed) {
            out.prepare_us
                .record(prepared.duration_since(started).as_micros() as u64)
                .ok();
            out.commit_us
                .record(committed.duration_since(prepared).as_micros() as u64)
                .ok();
            out.checkpoints += 1;
            out.records += records;
        }
        if finish {
            return out;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Peers, scaling, report

#[derive(Serialize, Clone, Debug)]
struct PeerRow {
    peer: String,
    durability: String,
    failed: Option<String>,
    not_run: Option<String>,
    records: u64,
    records_per_s: f64,
    mb_per_s: f64,
    produce: Option<Latency>,
    e2e: Option<Latency>,
    commit: Option<Latency>,
    /// Lockstep transactional records/s over the peer's.
    throughput_ratio: Option<f64>,
    /// Lockstep transactional commit p99 over the peer's.
    commit_p99_ratio: Option<f64>,
}

impl PeerRow {
    fn skipped(peer: &str, why: String) -> PeerRow {
        PeerRow {
            not_run: Some(why),
            ..PeerRow::failed(peer, String::new(), String::new())
        }
    }

    fn failed(peer: &str, durability: String, error: String) -> PeerRow {
        PeerRow {
            peer: peer.into(),
            durability,
            failed: Some(error),
            not_run: None,
            records: 0,
            records_per_s: 0.0,
            mb_per_s: 0.0,
            produce: None,
            e2e: None,
            commit: None,
            throughput_ratio: None,
            commit_p99_ratio: None,
        }
    }
}

#[derive(Serialize, Clone, Debug)]
struct ScalingRow {
    shards: usize,
    mode: String,
    failed: Option<String>,
    records_per_s: f64,
    records_per_s_per_core: f64,
}

#[derive(Serialize, Debug)]
struct Headline {
    workload: String,
    transactional_over_explicit: Option<f64>,
    target_transactional_over_explicit: f64,
    commit_p99_ms: Option<f64>,
    fdatasync_p99_ms: f64,
    commit_p99_over_fdatasync_p99: Option<f64>,
    target_commit_p99_over_fdatasync_p99: f64,
}

#[derive(Serialize)]
struct Report {
    commit: String,
    machine: serde_json::Value,
    load_average_at_start: String,
    run: &'static str,
    args: Vec<String>,
    /// 4 KiB write + fdatasync on the bench's disk, before any broker started.
    fdatasync_4k: Option<Latency>,
    workloads: Vec<Workload>,
    results: Vec<ModeResult>,
    headline: Option<Headline>,
    peers: Vec<PeerRow>,
    scaling_workload: Option<String>,
    scaling: Vec<ScalingRow>,
}

struct Options {
    full: bool,
    workload: String,
    workload_set: bool,
    /// `all` of the named workloads: with peers and the scaling run unless told otherwise.
    everything: bool,
    duration_s: Option<f64>,
    warmup_s: Option<f64>,
    quick: bool,
    peers: Vec<String>,
    shards: Vec<usize>,
    workload_file: Option<String>,
    list: bool,
    json: bool,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let full = args.iter().any(|a| a == "--bench");
    let mut o = Options {
        full,
        workload: if full { "all".into() } else { "smoke".into() },
        workload_set: false,
        everything: false,
        duration_s: None,
        warmup_s: None,
        quick: false,
        peers: Vec::new(),
        shards: Vec::new(),
        workload_file: None,
        list: false,
        json: false,
    };
    let (mut peers_set, mut shards_set) = (false, false);
    let mut i = 1;
    while i < args.len() {
        let value = |i: usize| {
            args.get(i + 1)
                .cloned()
                .ok_or_else(|| format!("{} takes a value", args[i]))
        };
        match args[i].as_str() {
            "--bench" => {}
            "--quick" => o.quick = true,
            "--list" => o.list = true,
            "--json" => o.json = true,
            "--workload" => {
                o.workload = value(i)?;
                o.workload_set = true;
                i += 1;
            }
            "--workload-file" => {
                o.workload_file = Some(value(i)?);
                i += 1;
            }
            "--duration" => {
                o.duration_s = Some(value(i)?.parse().map_err(|e| format!("--duration: {e}"))?);
                i += 1;
            }
            "--warmup" => {
                o.warmup_s = Some(value(i)?.parse().map_err(|e| format!("--warmup: {e}"))?);
                i += 1;
            }
            "--peers" => {
                let v = value(i)?;
                o.peers = if v == "none" {
                    Vec::new()
                } else {
                    v.split(',').map(str::to_string).collect()
                };
                for p in &o.peers {
                    if !PEERS_ALL.contains(&p.as_str()) {
                        return Err(format!("--peers: unknown peer {p}"));
                    }
                }
                peers_set = true;
                i += 1;
            }
            "--shards" => {
                let v = value(i)?;
                o.shards = if v == "none" {
                    Vec::new()
                } else {
                    v.split(',')
                        .map(|s| s.parse().map_err(|e| format!("--shards {s}: {e}")))
                        .collect::<Result<_, _>>()?
                };
                if o.shards.contains(&0) {
                    return Err("--shards: a shard count is at least 1".into());
                }
                shards_set = true;
                i += 1;
            }
            // libtest-style arguments cargo may pass (e.g. a test name filter) are ignored.
            other if !full => {
                let _ = other;
            }
            other => return Err(format!("unknown argument {other}")),
        }
        i += 1;
    }
    // Peers and the scaling run come with `all`; with one named workload or a workload file only
    // when asked for.
    o.everything = o.workload == "all" && (o.workload_file.is_none() || o.workload_set);
    if !peers_set && full && o.everything {
        o.peers = PEERS_ALL.iter().map(|p| p.to_string()).collect();
    }
    if !shards_set && (o.everything || !full) {
        o.shards = if full { vec![1, 2] } else { vec![1] };
    }
    Ok(o)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let o = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("suite: {e}");
            eprintln!(
                "usage: cargo bench --bench suite -- [--workload NAME|all] [--duration S] \
                 [--warmup S] [--quick] [--peers kafka,redis,rabbitmq,nats|none] \
                 [--shards 1,2|none] [--workload-file F.json] [--list] [--json]"
            );
            std::process::exit(2);
        }
    };
    let mut catalogue = named_workloads();
    let mut from_file = Vec::new();
    if let Some(f) = &o.workload_file {
        for w in load_workloads(Path::new(f)) {
            from_file.push(w.name.clone());
            catalogue.retain(|c| c.name != w.name);
            catalogue.push(w);
        }
    }
    if o.list {
        println!(
            "{}",
            serde_json::to_string_pretty(&catalogue).expect("json")
        );
        return;
    }
    let adjust = |mut w: Workload| {
        if o.quick {
            w.duration_s = w.duration_s.min(5.0);
            w.warmup_s = w.warmup_s.min(1.0);
            // The backlog stays: a consumer drains 600 000 records in a few seconds, and a
            // smaller one would be gone during the warm-up.
            w.peer_records /= 3;
        }
        if let Some(d) = o.duration_s {
            w.duration_s = d;
        }
        if let Some(s) = o.warmup_s {
            w.warmup_s = s;
        }
        w.validate().unwrap_or_else(|e| panic!("{e}"));
        w
    };
    let selected: Vec<Workload> = if !from_file.is_empty() && !o.workload_set {
        catalogue
            .iter()
            .filter(|w| from_file.contains(&w.name))
            .cloned()
            .map(adjust)
            .collect()
    } else if o.workload == "all" {
        catalogue
            .iter()
            .filter(|w| w.name != "smoke" && w.name != SCALING)
            .cloned()
            .map(adjust)
            .collect()
    } else {
        let w = catalogue
            .iter()
            .find(|w| w.name == o.workload)
            .unwrap_or_else(|| {
                let names: Vec<&str> = catalogue.iter().map(|w| w.name.as_str()).collect();
                panic!("no workload {}; named: {names:?} or all", o.workload)
            });
        vec![adjust(w.clone())]
    };
    assert!(!selected.is_empty(), "no workload selected");
    let scaling_workload = (!o.shards.is_empty()).then(|| match o.everything {
        true => adjust(
            catalogue
                .iter()
                .find(|w| w.name == SCALING)
                .expect("scaling workload")
                .clone(),
        ),
        false => selected[0].clone(),
    });
    let headline_workload = selected
        .iter()
        .find(|w| w.name == HEADLINE)
        .unwrap_or(&selected[0])
        .clone();

    let load_average_at_start = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let work = tempfile::Builder::new()
        .prefix("lockstep-bench-suite-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temporary directory");
    let work = work.path();

    progress("machine: 4 KiB write + fdatasync latency");
    let fsync = common::fdatasync_latency_us(
        work,
        if o.full {
            FSYNC_PROBES_FULL
        } else {
            FSYNC_PROBES_SMOKE
        },
    );
    let fdatasync_4k = Latency::of(&fsync);

    // Lockstep, one shard per core, every selected workload and mode.
    let mut results = Vec::new();
    let mut failures = Vec::new();
    progress("lockstep: starting");
    match Broker::start_lockstep(&work.join("lockstep"), LockstepOptions::default()) {
        Ok(broker) => {
            let target = Target {
                name: "lockstep",
                bootstrap: broker.bootstrap(),
                kind: Kind::Lockstep,
                shards: broker.shards,
            };
            for w in &selected {
                for &mode in &w.modes {
                    results.push(run_mode(&target, w, mode, "l"));
                }
            }
            if let Err(e) = broker.stop_clean() {
                failures.push(format!("lockstep: {e}"));
            }
        }
        Err(e) => failures.push(format!("lockstep: {e}")),
    }

    // Peers, in the headline workload's shape.
    let lockstep_txn = results
        .iter()
        .find(|r| {
            r.target == "lockstep"
                && r.workload == headline_workload.name
                && r.mode == "transactional"
                && r.failed.is_none()
        })
        .cloned();
    let mut peer_rows = Vec::new();
    for peer in &o.peers {
        let row = if peer == "kafka" {
            run_kafka(work, &headline_workload, &mut results)
        } else {
            run_peer(peer, &headline_workload)
        };
        peer_rows.push(row);
    }
    for row in &mut peer_rows {
        if let (Some(l), true) = (&lockstep_txn, row.records_per_s > 0.0) {
            row.throughput_ratio = Some(l.records_per_s / row.records_per_s);
            row.commit_p99_ratio = match (l.commit, row.commit) {
                (Some(a), Some(b)) if b.p99_ms > 0.0 => Some(a.p99_ms / b.p99_ms),
                _ => None,
            };
        }
    }

    // Scaling: one workload on 1, 2, … shards.
    let mut scaling = Vec::new();
    if let Some(w) = &scaling_workload {
        let mode = if w.modes.contains(&Mode::Transactional) {
            Mode::Transactional
        } else {
            w.modes[0]
        };
        for (run, &shards) in o.shards.iter().enumerate() {
            progress(&format!("lockstep with {shards} shard(s): starting"));
            let dir = work.join(format!("lockstep-scaling-{run}-{shards}-shards"));
            let options = LockstepOptions {
                shards: Some(shards),
                metrics: false,
            };
            let r = match Broker::start_lockstep(&dir, options) {
                Ok(broker) => {
                    let target = Target {
                        name: "lockstep",
                        bootstrap: broker.bootstrap(),
                        kind: Kind::Lockstep,
                        shards,
                    };
                    let r = run_mode(&target, w, mode, &format!("s{run}x{shards}"));
                    if let Err(e) = broker.stop_clean() {
                        failures.push(format!("lockstep ({shards} shards): {e}"));
                    }
                    r
                }
                Err(e) => ModeResult {
                    failed: Some(e),
                    ..Default::default()
                },
            };
            scaling.push(ScalingRow {
                shards,
                mode: mode.name().into(),
                failed: r.failed.clone(),
                records_per_s: r.records_per_s,
                records_per_s_per_core: r.records_per_s / shards as f64,
            });
            if r.failed.is_none() {
                results.push(ModeResult {
                    target: format!("lockstep-{shards}-shards"),
                    ..r
                });
            }
        }
    }
    eprint!("\r\x1b[2K");

    let headline = headline(&results, &headline_workload.name, fdatasync_4k);
    let mut workloads = selected.clone();
    if let Some(w) = &scaling_workload {
        if !workloads.iter().any(|s| s.name == w.name) {
            workloads.push(w.clone());
        }
    }
    let report = Report {
        commit: common::git_commit(),
        machine: common::machine(),
        load_average_at_start,
        run: if o.full { "full" } else { "smoke" },
        args: args[1..].to_vec(),
        fdatasync_4k,
        workloads,
        results,
        headline,
        peers: peer_rows,
        scaling_workload: scaling_workload.as_ref().map(|w| w.name.clone()),
        scaling,
    };
    let table = table(&report);
    if o.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report json")
        );
    } else {
        print!("{table}");
    }
    // The smoke run under `cargo test` does not overwrite the last full report.
    let path = common::write_report(if o.full { "suite" } else { "suite-smoke" }, &report);
    let svg = svg(&report, &headline_workload.name);
    let svg_path = path.with_extension("svg");
    std::fs::write(&svg_path, svg).expect("write svg");
    if !o.json {
        println!(
            "report: {}\npicture: {}",
            path.display(),
            svg_path.display()
        );
    }

    for r in &report.results {
        if let Some(e) = &r.failed {
            failures.push(format!("{} {} {}: {e}", r.target, r.workload, r.mode));
        }
    }
    for s in &report.scaling {
        if let Some(e) = &s.failed {
            failures.push(format!("scaling, {} shards: {e}", s.shards));
        }
    }
    if !o.full {
        smoke_checks(&report);
    }
    assert!(failures.is_empty(), "suite failed: {failures:#?}");
}

/// Kafka 4.4 in the workload's shape, explicit acknowledgement, the same client.
fn run_kafka(work: &Path, w: &Workload, results: &mut Vec<ModeResult>) -> PeerRow {
    let durability = "Kafka 4.4 defaults, one KRaft node: share state in __share_group_state \
                      and records acknowledged from the page cache, no fsync \
                      (log.flush.interval.messages unset); explicit ACCEPT + commit_sync"
        .to_string();
    if let Err(why) = brokers::kafka_available() {
        progress_done(&format!("kafka not run: {why}"));
        return PeerRow::skipped("kafka", why);
    }
    progress("kafka: starting (KRaft on loopback)");
    let broker = match Broker::start_kafka(&work.join("kafka"), "") {
        Ok(b) => b,
        Err(e) => {
            progress_done(&format!("kafka: {e}"));
            return PeerRow::failed("kafka", durability, e);
        }
    };
    let target = Target {
        name: "kafka",
        bootstrap: broker.bootstrap(),
        kind: Kind::Kafka,
        shards: 0,
    };
    let r = run_mode(&target, w, Mode::Explicit, "k");
    let _ = broker.stop();
    let row = PeerRow {
        peer: "kafka".into(),
        durability,
        failed: r.failed.clone(),
        not_run: None,
        records: r.records,
        records_per_s: r.records_per_s,
        mb_per_s: r.mb_per_s,
        produce: r.produce,
        e2e: r.e2e,
        // The acknowledgement that makes Kafka forget a record: commit_sync.
        commit: r.ack,
        throughput_ratio: None,
        commit_p99_ratio: None,
    };
    results.push(r);
    row
}

fn run_peer(peer: &str, w: &Workload) -> PeerRow {
    if let Err(why) = peers::available(peer) {
        progress_done(&format!("{peer} not run: {why}"));
        return PeerRow::skipped(peer, why);
    }
    let pw = peers::PeerWorkload {
        records: w.peer_records,
        record_bytes: w.record_bytes,
        consumers: w.consumers,
        checkpoint: Duration::from_millis(w.checkpoint_ms),
    };
    let started = Instant::now();
    let show = |n: u64| {
        let s = started.elapsed().as_secs_f64();
        progress(&format!(
            "{peer} {}: {s:5.1} s {n}/{} records, {:.0} rec/s",
            w.name,
            pw.records,
            n as f64 / s.max(1e-3)
        ))
    };
    match peers::run(peer, &pw, &show) {
        Ok(r) => {
            let rate = r.records as f64 / r.elapsed.as_secs_f64().max(1e-9);
            progress_done(&format!("{peer} {}: {rate:.0} rec/s", w.name));
            PeerRow {
                peer: r.name,
                durability: r.durability,
                failed: None,
                not_run: None,
                records: r.records,
                records_per_s: rate,
                mb_per_s: rate * w.record_bytes as f64 / 1e6,
                produce: Latency::of(&r.produce_us),
                e2e: Latency::of(&r.e2e_us),
                commit: Latency::of(&r.commit_us),
                throughput_ratio: None,
                commit_p99_ratio: None,
            }
        }
        Err(e) => {
            progress_done(&format!("{peer}: FAILED: {e}"));
            PeerRow::failed(peer, String::new(), e)
        }
    }
}

fn headline(results: &[ModeResult], workload: &str, fsync: Option<Latency>) -> Option<Headline> {
    let find = |mode: &str| {
        results.iter().find(|r| {
            r.target == "lockstep" && r.workload == workload && r.mode == mode && r.failed.is_none()
        })
    };
    let txn = find("transactional")?;
    let fsync_p99 = fsync.map_or(0.0, |f| f.p99_ms);
    let commit_p99 = txn.commit.map(|c| c.p99_ms);
    Some(Headline {
        workload: workload.into(),
        transactional_over_explicit: find("explicit")
            .filter(|e| e.records_per_s > 0.0)
            .map(|e| txn.records_per_s / e.records_per_s),
        target_transactional_over_explicit: TARGET_TXN_OVER_EXPLICIT,
        commit_p99_ms: commit_p99,
        fdatasync_p99_ms: fsync_p99,
        commit_p99_over_fdatasync_p99: commit_p99
            .filter(|_| fsync_p99 > 0.0)
            .map(|c| c / fsync_p99),
        target_commit_p99_over_fdatasync_p99: TARGET_COMMIT_P99_OVER_FSYNC_P99,
    })
}

/// Under `cargo test`: exact consumption and figures that make sense.
fn smoke_checks(report: &Report) {
    let smoke: Vec<&ModeResult> = report
        .results
        .iter()
        .filter(|r| r.target == "lockstep")
        .collect();
    assert_eq!(smoke.len(), 3, "every mode ran once");
    for r in smoke {
        let what = format!("{} {}", r.workload, r.mode);
        assert!(r.failed.is_none(), "{what}: {:?}", r.failed);
        assert_eq!(r.missing, Some(0), "{what}: every record acknowledged");
        assert_eq!(r.acknowledged_again, 0, "{what}: no record twice");
        assert_eq!(r.acknowledged_total, r.produced_total, "{what}");
        assert!(
            r.produced_total > r.backlog_records,
            "{what}: live production"
        );
        assert!(r.records > 0 && r.records_per_s > 0.0, "{what}: throughput");
        let e2e = r.e2e.expect("end-to-end latencies");
        assert!(
            e2e.p50_ms <= e2e.p99_ms && e2e.p99_ms <= e2e.max_ms,
            "{what}"
        );
        assert!(r.produce.is_some(), "{what}: produce latencies");
        match r.mode.as_str() {
            "implicit" => assert!(r.ack.is_none(), "{what}: implicit has no ack round"),
            "explicit" => assert!(r.ack.is_some() && r.commit.is_none(), "{what}"),
            _ => {
                assert!(r.checkpoints >= 1, "{what}: a checkpoint committed");
                assert!(r.prepare.is_some() && r.commit.is_some(), "{what}");
            }
        }
    }
    assert!(report.fdatasync_4k.is_some_and(|f| f.count > 0));
    // The shipped workload files load and validate, and the named workloads do too.
    for w in named_workloads().into_iter().chain(workload_files()) {
        w.validate().unwrap_or_else(|e| panic!("{e}"));
    }
    let h = report.headline.as_ref().expect("headline figures");
    assert!(h.transactional_over_explicit.is_some_and(|r| r > 0.0));
    assert_eq!(report.scaling.len(), 1, "scaling with one shard");
    assert!(report.scaling[0].records_per_s > 0.0);
    println!(
        "suite smoke: every mode consumed its records exactly once; report and picture written"
    );
}

// ---------------------------------------------------------------------------------------------
// Table

fn table(report: &Report) -> String {
    let mut t = String::new();
    let f = report.fdatasync_4k.unwrap_or_default();
    let _ = writeln!(
        t,
        "\nsuite ({}): commit {}; {} cpus ({}); load average {} at start\n\
         machine: 4 KiB write + fdatasync p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} probes, \
         before any broker started)",
        report.run,
        report.commit,
        report.machine["cpus"],
        report.machine["cpu"].as_str().unwrap_or(""),
        report.load_average_at_start,
        f.p50_ms,
        f.p99_ms,
        f.max_ms,
        f.count
    );
    for w in &report.workloads {
        let rows: Vec<&ModeResult> = report
            .results
            .iter()
            .filter(|r| r.workload == w.name)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(t, "\n{}: {}", w.name, w.shape());
        let _ = writeln!(
            t,
            "{:<18}{:<15}{:>10}{:>8}{:>11} {:>13} {:>15} {:>13} {:>13} {:>13}",
            "target",
            "mode",
            "rec/s",
            "MB/s",
            "produced/s",
            "produce ms",
            "e2e ms",
            "ack ms",
            "prepare ms",
            "commit ms"
        );
        for r in rows {
            if let Some(e) = &r.failed {
                let _ = writeln!(t, "{:<18}{:<15}FAILED: {e}", r.target, r.mode);
                continue;
            }
            let _ = writeln!(
                t,
                "{:<18}{:<15}{:>10.0}{:>8.1}{:>11} {:>13} {:>15} {:>13} {:>13} {:>13}{}",
                r.target,
                r.mode,
                r.records_per_s,
                r.mb_per_s,
                if r.produced_per_s > 0.0 {
                    format!("{:.0}", r.produced_per_s)
                } else {
                    "-".into()
                },
                cell(&r.produce),
                cell(&r.e2e),
                cell(&r.ack),
                cell(&r.prepare),
                cell(&r.commit),
                if r.consumer_caught_up {
                    "  (consumers caught up with the producers)"
                } else {
                    ""
                }
            );
        }
    }
    let _ = writeln!(
        t,
        "(rec/s: acknowledged in the window; produced/s: live producers; latencies: p50/p99 \
         ms, p99.9 and max in the JSON report)"
    );
    if let Some(h) = &report.headline {
        let _ = writeln!(
            t,
            "\nheadline ({}): transactional / explicit = {} (target >= {}); commit p99 / \
             fdatasync p99 = {} (target <= {})",
            h.workload,
            h.transactional_over_explicit
                .map_or("-".into(), |r| format!("{r:.2}")),
            h.target_transactional_over_explicit,
            h.commit_p99_over_fdatasync_p99
                .map_or("-".into(), |r| format!("{r:.2}")),
            h.target_commit_p99_over_fdatasync_p99
        );
    }
    if !report.peers.is_empty() {
        let _ = writeln!(
            t,
            "\npeers ({} shape; ratio = Lockstep transactional / peer):",
            report.headline.as_ref().map_or("", |h| h.workload.as_str())
        );
        let _ = writeln!(
            t,
            "{:<10}{:>10}{:>10}{:>14}{:>18}  durability",
            "peer", "rec/s", "ratio", "commit ms", "commit p99 ratio"
        );
        for p in &report.peers {
            if let Some(why) = &p.not_run {
                let _ = writeln!(t, "{:<10}not run: {why}", p.peer);
                continue;
            }
            if let Some(e) = &p.failed {
                let _ = writeln!(t, "{:<10}FAILED: {e}", p.peer);
                continue;
            }
            let _ = writeln!(
                t,
                "{:<10}{:>10.0}{:>10}{:>14}{:>18}  {}",
                p.peer,
                p.records_per_s,
                p.throughput_ratio.map_or("-".into(), |r| format!("{r:.2}")),
                cell(&p.commit),
                p.commit_p99_ratio.map_or("-".into(), |r| format!("{r:.2}")),
                p.durability
            );
        }
    }
    if !report.scaling.is_empty() {
        let _ = writeln!(
            t,
            "\nscaling ({}, {} cpus):",
            report.scaling_workload.as_deref().unwrap_or(""),
            report.machine["cpus"]
        );
        let _ = writeln!(
            t,
            "{:<8}{:<15}{:>12}{:>16}",
            "shards", "mode", "rec/s", "rec/s per core"
        );
        for s in &report.scaling {
            match &s.failed {
                Some(e) => {
                    let _ = writeln!(t, "{:<8}FAILED: {e}", s.shards);
                }
                None => {
                    let _ = writeln!(
                        t,
                        "{:<8}{:<15}{:>12.0}{:>16.0}",
                        s.shards, s.mode, s.records_per_s, s.records_per_s_per_core
                    );
                }
            }
        }
    }
    t
}

// ---------------------------------------------------------------------------------------------
// Picture

/// One bar of a panel.
struct Bar {
    label: String,
    values: Vec<f64>,
}

/// A bar panel at (x, y) of size (w, h): groups of bars (one colour per series), value labels
/// on top, the series in a legend; `reference` draws a dashed line (e.g. fdatasync p99).
#[allow(clippy::too_many_arguments)]
fn panel(
    svg: &mut String,
    (x, y, w, h): (f64, f64, f64, f64),
    title: &str,
    unit: &str,
    series: &[(&str, &str)],
    bars: &[Bar],
    reference: Option<(f64, &str)>,
) {
    let _ = writeln!(
        svg,
        r#"<text x="{:.0}" y="{:.0}" font-size="15" font-weight="bold">{}</text>"#,
        x,
        y + 16.0,
        esc(title)
    );
    // Below the axis: group labels, slanted so that neighbours do not overlap.
    let (top, bottom) = (y + 50.0, y + h - 90.0);
    let max = bars
        .iter()
        .flat_map(|b| b.values.iter().copied())
        .chain(reference.map(|r| r.0))
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        * 1.15;
    let scale = |v: f64| bottom - (v / max) * (bottom - top);
    for (i, (name, colour)) in series.iter().enumerate() {
        let lx = x + i as f64 * 120.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{lx:.0}" y="{:.0}" width="12" height="12" fill="{colour}"/><text x="{:.0}" y="{:.0}" font-size="12">{}</text>"#,
            y + 26.0,
            lx + 16.0,
            y + 37.0,
            esc(name)
        );
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{x:.0}" y1="{bottom:.0}" x2="{:.0}" y2="{bottom:.0}" stroke="#444"/>"##,
        x + w
    );
    let _ = writeln!(
        svg,
        r##"<text x="{:.0}" y="{:.0}" font-size="11" fill="#444" text-anchor="end">{}</text>"##,
        x + w,
        top - 4.0,
        esc(unit)
    );
    if bars.is_empty() {
        let _ = writeln!(
            svg,
            r##"<text x="{:.0}" y="{:.0}" font-size="12" fill="#888">not measured</text>"##,
            x + 10.0,
            (top + bottom) / 2.0
        );
        return;
    }
    let group = w / bars.len() as f64;
    let bar_w = ((group - 16.0) / series.len().max(1) as f64).min(48.0);
    for (g, b) in bars.iter().enumerate() {
        let gx = x + g as f64 * group + 8.0;
        for (s, v) in b.values.iter().enumerate() {
            let bx = gx + s as f64 * bar_w;
            let by = scale(*v);
            let colour = series.get(s).map_or("#888", |s| s.1);
            let _ = writeln!(
                svg,
                r#"<rect x="{bx:.1}" y="{by:.1}" width="{:.1}" height="{:.1}" fill="{colour}"/>"#,
                bar_w - 2.0,
                bottom - by
            );
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{}</text>"#,
                bx + bar_w / 2.0 - 1.0,
                by - 3.0,
                esc(&short(*v))
            );
        }
        let (lx, ly) = (gx + bar_w * b.values.len() as f64 / 2.0, bottom + 14.0);
        let _ = writeln!(
            svg,
            r#"<text x="{lx:.1}" y="{ly:.0}" font-size="11" text-anchor="end" transform="rotate(-35 {lx:.1} {ly:.0})">{}</text>"#,
            esc(&b.label)
        );
    }
    if let Some((v, label)) = reference {
        let ry = scale(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.0}" y1="{ry:.1}" x2="{:.0}" y2="{ry:.1}" stroke="#c00" stroke-dasharray="5,4"/><text x="{:.0}" y="{:.1}" font-size="11" fill="#c00" text-anchor="end">{}</text>"##,
            x + w,
            x + w,
            ry - 4.0,
            esc(label)
        );
    }
}

fn short(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Throughput, end-to-end and acknowledgement/commit latency of the headline workload per mode
/// and peer, and the scaling run; hand-written SVG, readable at a glance.
fn svg(report: &Report, workload: &str) -> String {
    let rows: Vec<&ModeResult> = report
        .results
        .iter()
        .filter(|r| r.workload == workload && r.failed.is_none() && !r.target.contains("shards"))
        .collect();
    let label = |r: &ModeResult| {
        if r.target == "lockstep" {
            r.mode.clone()
        } else {
            format!("{} {}", r.target, r.mode)
        }
    };
    let mut throughput: Vec<Bar> = rows
        .iter()
        .map(|r| Bar {
            label: label(r),
            values: vec![r.records_per_s],
        })
        .collect();
    // A workload that drains a backlog has no end-to-end latency: the panel then shows the first
    // workload with live producers.
    let e2e_workload = std::iter::once(workload)
        .chain(report.workloads.iter().map(|w| w.name.as_str()))
        .find(|name| {
            report
                .results
                .iter()
                .any(|r| r.workload == *name && r.e2e.is_some() && r.failed.is_none())
        })
        .unwrap_or(workload);
    let mut e2e: Vec<Bar> = report
        .results
        .iter()
        .filter(|r| {
            r.workload == e2e_workload && r.failed.is_none() && !r.target.contains("shards")
        })
        .filter_map(|r| {
            r.e2e.map(|l| Bar {
                label: label(r),
                values: vec![l.p50_ms, l.p99_ms],
            })
        })
        .collect();
    let mut ack: Vec<Bar> = rows
        .iter()
        .filter_map(|r| {
            // What makes the acknowledgement durable: the commit in transactional mode.
            r.commit.or(r.ack).map(|l| Bar {
                label: if r.commit.is_some() {
                    format!("{} commit", label(r))
                } else {
                    label(r)
                },
                values: vec![l.p50_ms, l.p99_ms],
            })
        })
        .collect();
    for p in report
        .peers
        .iter()
        .filter(|p| p.failed.is_none() && p.not_run.is_none() && p.peer != "kafka")
    {
        throughput.push(Bar {
            label: p.peer.clone(),
            values: vec![p.records_per_s],
        });
        if let Some(l) = p.e2e {
            e2e.push(Bar {
                label: p.peer.clone(),
                values: vec![l.p50_ms, l.p99_ms],
            });
        }
        if let Some(l) = p.commit {
            ack.push(Bar {
                label: p.peer.clone(),
                values: vec![l.p50_ms, l.p99_ms],
            });
        }
    }
    let scaling: Vec<Bar> = report
        .scaling
        .iter()
        .filter(|s| s.failed.is_none())
        .map(|s| Bar {
            label: format!("{} shard(s)", s.shards),
            values: vec![s.records_per_s, s.records_per_s_per_core],
        })
        .collect();
    let (width, height) = (1400.0, 500.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="100%" height="100%" fill="white"/><text x="20" y="26" font-size="17" font-weight="bold">Lockstep suite: {} ({})</text><text x="20" y="46" font-size="12" fill="#444">commit {}, {} cpus, load {} at start; fdatasync 4 KiB p99 {:.2} ms</text>"##,
        esc(workload),
        report.run,
        esc(&report.commit),
        report.machine["cpus"],
        esc(&report.load_average_at_start),
        report.fdatasync_4k.map_or(0.0, |f| f.p99_ms)
    );
    let fsync_ref = report
        .fdatasync_4k
        .map(|f| (f.p99_ms, format!("fdatasync p99 {:.2} ms", f.p99_ms)));
    let p = 20.0;
    let pw = (width - 5.0 * p) / 4.0;
    panel(
        &mut s,
        (p, 60.0, pw, height - 70.0),
        "throughput",
        "records/s",
        &[("records/s", "#2b6cb0")],
        &throughput,
        None,
    );
    panel(
        &mut s,
        (2.0 * p + pw, 60.0, pw, height - 70.0),
        "end-to-end latency",
        &format!("ms, {e2e_workload}"),
        &[("p50", "#68a0d8"), ("p99", "#1a4480")],
        &e2e,
        None,
    );
    panel(
        &mut s,
        (3.0 * p + 2.0 * pw, 60.0, pw, height - 70.0),
        "acknowledgement / commit latency",
        "ms",
        &[("p50", "#f0a35e"), ("p99", "#b35806")],
        &ack,
        fsync_ref.as_ref().map(|(v, l)| (*v, l.as_str())),
    );
    panel(
        &mut s,
        (4.0 * p + 3.0 * pw, 60.0, pw, height - 70.0),
        "scaling",
        &format!(
            "records/s, {}",
            report.scaling_workload.as_deref().unwrap_or("-")
        ),
        &[("total", "#38a169"), ("per core", "#9ae6b4")],
        &scaling,
        None,
    );
    s.push_str("</svg>\n");
    s
}
