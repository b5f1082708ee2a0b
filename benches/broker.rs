//! Broker benchmark: Kafka 4.4's own `ProducerPerformance` and
//! `ShareConsumerPerformance` against Lockstep and against Apache Kafka 4.4, one broker at a time,
//! in one run, beside the machine's own storage limits measured in the same run.
//!
//! For each broker (Lockstep: the release binary with its default durable acks=all, every
//! acknowledged batch fdatasynced; Kafka: its own KRaft instance started by the bench on a free
//! port with its own data directory, never the shared reference broker), on a fresh topic of
//! `partitions` partitions:
//!
//! 1. produce: `ProducerPerformance --num-records N --record-size 1024 --throughput -1
//!    --command-property acks=all` (4.4's spelling of `--producer-props`; the Java producer's
//!    defaults otherwise: idempotent, linger 5 ms, 16 KiB batches, 32 MiB of buffer); records/s,
//!    MiB/s and latency percentiles as the tool prints them. At `--throughput -1` the producer
//!    keeps its buffer full, so its latencies are mostly queueing in the client (about buffer /
//!    throughput): they compare how fast each broker drains a full producer, not an idle
//!    broker's response time (`--producer-throughput N` runs the tool at a fixed rate instead);
//! 2. share-consume: `ShareConsumerPerformance --num-records N` in a share group whose
//!    `share.auto.offset.reset` is `earliest` (set with IncrementalAlterConfigs before the
//!    consumer joins), i.e. it drains what 1 produced, implicit acknowledgement, `--threads`
//!    consumers. Its records/s include joining the group (the tool's own clock).
//!
//! 3. transactional produce: `ProducerPerformance` as in 1, on a fresh topic of the
//!    same shape, with `--transactional-id p17-bench-txn --transaction-duration-ms D` (the tool
//!    begins a transaction, sends for D ms, then `commitTransaction`; default D = 100 ms,
//!    `--transaction-duration-ms D` changes it, `--no-txn` skips the phase) and `--print-metrics`:
//!    records/s and latencies as in 1, plus the producer's `txn-commit-time-ns-total` (time spent
//!    in `commitTransaction`, which also waits for the transaction's last records) and
//!    `txn-init-time-ns-total`. The tool counts no commits: the bench estimates them as
//!    (send time − commit time) / D + 1, the send time being records / (the tool's records/s),
//!    and prints the mean commit latency from that estimate (marked ≈).
//!
//! 4. TLS: 1 and 2 again over each broker's SSL listener, on a fresh topic and share
//!    group of the same shape, in the same broker process: both brokers serve PLAINTEXT and SSL
//!    listeners from the start, with one PEM key store (an EC P-256 server certificate for
//!    127.0.0.1 signed by a CA, made with the `openssl` CLI at the start of the run); both tools
//!    get the same client settings (`--command-config`: `security.protocol=SSL`,
//!    `ssl.truststore.type=PEM`, `ssl.truststore.location` the CA; no client certificate).
//!    Reported beside the plaintext figures: records/s, p99, broker CPU per record and the
//!    TLS / plaintext ratios. `--no-tls` skips the phase.
//! 5. SASL_SSL (on under `cargo bench`, `--no-sasl` skips it, `--sasl` adds it to the
//!    smoke run): the same again over a SASL_SSL listener with SCRAM-SHA-512 (both brokers:
//!    `sasl.enabled.mechanisms=SCRAM-SHA-512`, the listener's `ScramLoginModule`), as a user the
//!    bench adds first with Kafka's own `kafka-configs` (ConfigCommand, AlterUserScramCredentials
//!    over the PLAINTEXT listener, 4096 iterations); the tools get the TLS settings plus
//!    `sasl.mechanism=SCRAM-SHA-512` and the user's `sasl.jaas.config`.
//!
//!    The phases run in this order in one broker process, so a later phase meets a warmer
//!    broker: Kafka's JIT-compiled code and both brokers' page cache favour TLS and SASL_SSL over
//!    the plaintext run before them (Kafka's secured figures can beat its plaintext ones). Compare
//!    the secured rows of the two brokers with each other, and read secured / plaintext within a
//!    broker as an upper bound of what TLS costs it.
//!
//! Around each phase the bench reads the broker's CPU (utime + stime of /proc/PID/stat, all
//! threads) before the tool starts and after it exits, and divides by the records: CPU per record
//! in µs. The tool's CPU (the JVM, all threads) comes from wait4(2)'s rusage, its peak RSS too;
//! the broker's peak RSS is `VmHWM` of /proc/PID/status after each phase. Kernel threads
//! (writeback, io-wq workers of another process) are not charged to the broker: a broker that
//! leaves its writes to the page cache (Kafka) pays for writeback outside its own figure.
//!
//! Machine figures of the same run: O_DIRECT sequential write bandwidth (1 MiB aligned blocks,
//! one fdatasync at the end), and a group-commit-like durable append (64 KiB, 1 MiB and 8 MiB
//! written per fdatasync, one group after the other) through the page cache into a growing file
//! and through O_DIRECT into a preallocated file, zeroed first or never written.
//!
//! The targets are printed MET / NOT MET: Lockstep's broker CPU per produced record
//! ≤ 0.5 × Kafka's (Lockstep fdatasyncs every acknowledged batch, Kafka does not); produce p99
//! ≤ 0.5 × Kafka's; share-consume ≥ 3 × Kafka's records/s at ≤ 0.2 × its broker CPU per record;
//! group-commit durable append ≥ 0.8 × the O_DIRECT bandwidth, judged on Lockstep's storage
//! engine in the same run: one partition log on the broker's io_uring engine
//! (`runtime::bench::group_commit_appends`, as `cargo bench --bench storage`), 16 KiB batches
//! from enough concurrent appenders to keep 16 MiB waiting for a flush (a 1 MiB-batch run is
//! shown beside it), in 5 rounds of the O_DIRECT reference followed by the engine, judged by
//! the median of the rounds' ratios (the virtual disk drifts by up to 2× within a minute). The broker's own durable produce bandwidth is shown under the targets,
//! not judged: one Java producer (or the raw generator of `--raw`) shares the two cores with
//! the broker and bounds it.
//!
//! `--raw` adds the raw-protocol generator ([`raw`]: pipelined produce at a load the
//! Java client cannot reach, open-loop fixed-rate latency, Fetch read-back); its figures are a
//! second view, reported under `raw`, not the targets' figures.
//!
//! `cargo bench --bench broker` runs the full measurement and writes
//! `target/bench-reports/broker.json`. Options after `--`: `--no-kafka`; `--records N`;
//! `--producer-throughput N` (records/s, default -1: unthrottled); `--threads N` (share
//! consumers); `--kafka-fsync` (adds Kafka with
//! `log.flush.interval.messages=1`, durable like Lockstep); `--raw` (and its options, see
//! [`raw`]); `--json` (print the report as JSON on stdout after the table); `--no-txn` /
//! `--txn` (skip / add the transactional produce phase); `--transaction-duration-ms D`;
//! `--no-tls` / `--tls` (skip / run the TLS phase, on by default); `--no-sasl` / `--sasl`;
//! `--help`. Under `cargo test`
//! (no `--bench` argument) it runs quickly against Lockstep only: both tools on a few hundred
//! records if the Kafka distribution is installed (`tools/install-test-deps.sh`), the TLS phase
//! included, and the raw phases on a few requests.

#[path = "common/mod.rs"]
mod common;
#[path = "broker/raw.rs"]
mod raw;

use common::brokers::{
    kafka_available, kafka_script, make_certificates, Broker, LockstepOptions, Secured,
};
use common::GroupCommit;
use lockstep::client::admin::{Admin, NewTopic};
use serde::Serialize;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The broker's allocator, so that the in-process engine runs write full tail chunks from huge
/// pages as the broker does ([`lockstep::runtime::huge_chunks`]).
#[global_allocator]
static ALLOCATOR: lockstep::runtime::huge_chunks::HugeChunks =
    lockstep::runtime::huge_chunks::HugeChunks;

const TOPIC: &str = "p14-bench-perf";
const GROUP: &str = "p14-bench-share";
/// The topic and transactional id of the transactional produce phase.
const TXN_TOPIC: &str = "p17-bench-txn-perf";
const TXN_ID: &str = "p17-bench-txn";
/// The topic and share group of the TLS phase.
const TLS_TOPIC: &str = "p18-bench-tls-perf";
const TLS_GROUP: &str = "p18-bench-tls-share";
/// The topic, share group and SCRAM user of the SASL_SSL phase.
const SASL_TOPIC: &str = "p18-bench-sasl-perf";
const SASL_GROUP: &str = "p18-bench-sasl-share";
const SASL_USER: &str = "p18-bench";
const SASL_PASSWORD: &str = "p18-bench-secret";
const CONFIG_TOOL: &str = "org.apache.kafka.tools.ConfigCommand";
const PRODUCER_TOOL: &str = "org.apache.kafka.tools.ProducerPerformance";
const SHARE_CONSUMER_TOOL: &str = "org.apache.kafka.tools.ShareConsumerPerformance";
/// Group commit probes: bytes written per fdatasync.
const GROUP_COMMIT_BYTES: [usize; 3] = [64 << 10, 1 << 20, 8 << 20];
/// Batch sizes of the engine's group-commit run: a producer's typical batch (the target's) and
/// a large one.
const ENGINE_GROUP_COMMIT_BATCH_BYTES: [usize; 2] = [16 << 10, 1 << 20];

const USAGE: &str = "cargo bench --bench broker -- [options]
  Kafka 4.4's ProducerPerformance (plain and transactional) and ShareConsumerPerformance against
  Lockstep and a Kafka 4.4 the bench starts; without --bench (cargo test) a smoke run on Lockstep.
  --no-kafka                    Lockstep only
  --kafka-fsync                 also Kafka with log.flush.interval.messages=1
  --records N                   records per phase (default 500000)
  --producer-throughput R       ProducerPerformance --throughput (default -1: unthrottled)
  --threads N                   share consumers (default 1)
  --no-txn | --txn              skip | add the transactional produce phase (default: on under
                                cargo bench, off in the smoke run)
  --transaction-duration-ms D   ProducerPerformance --transaction-duration-ms (default 100)
  --no-tls | --tls              skip | run the TLS phase: produce and share-consume again over
                                each broker's SSL listener (default: on)
  --no-sasl | --sasl            skip | run the SASL_SSL (SCRAM-SHA-512) phase (default: on under
                                cargo bench, off in the smoke run)
  --raw                         add the raw-protocol generator's phases
  --json                        print the report as JSON after the table";

/// Sizes of one run: the full measurement, or the smoke run under `cargo test`.
#[derive(Clone, Copy, Serialize)]
struct Plan {
    records: u64,
    record_bytes: usize,
    partitions: i32,
    share_consumers: usize,
    /// ProducerPerformance `--throughput`: records/s, -1 for as fast as it can.
    producer_throughput: i64,
    /// A tool that has not exited by then is killed and its phase fails.
    tool_timeout_seconds: u64,
    /// ShareConsumerPerformance `--timeout`. The tool waits this long (+100 ms) for its
    /// consumers after starting them and then interrupts them, so it bounds the whole phase,
    /// not only the gap between records.
    share_timeout_ms: u64,
    direct_write_bytes: usize,
    /// Each group-commit probe: at most this long, at most this many bytes.
    group_commit_seconds: f64,
    group_commit_total_bytes: usize,
    /// The engine's group commit: batches waiting for a flush at any time (many producers).
    engine_bytes_in_flight: usize,
    /// The engine's group commit: rounds of (O_DIRECT reference, engine), judged by the median.
    engine_rounds: usize,
    /// Run the transactional produce phase (3).
    transactions: bool,
    /// ProducerPerformance `--transaction-duration-ms`.
    transaction_duration_ms: u64,
    /// Run the TLS phase (4).
    tls: bool,
    /// Run the SASL_SSL phase (5).
    sasl: bool,
}

const FULL: Plan = Plan {
    records: 500_000,
    record_bytes: 1024,
    partitions: 4,
    share_consumers: 1,
    producer_throughput: -1,
    tool_timeout_seconds: 900,
    share_timeout_ms: 400_000,
    direct_write_bytes: 1 << 30,
    group_commit_seconds: 2.0,
    group_commit_total_bytes: 512 << 20,
    engine_bytes_in_flight: 16 << 20,
    engine_rounds: 5,
    transactions: true,
    transaction_duration_ms: 100,
    tls: true,
    sasl: true,
};
const SMOKE: Plan = Plan {
    records: 300,
    record_bytes: 1024,
    partitions: 4,
    share_consumers: 1,
    producer_throughput: -1,
    tool_timeout_seconds: 120,
    share_timeout_ms: 60_000,
    direct_write_bytes: 4 << 20,
    group_commit_seconds: 0.02,
    group_commit_total_bytes: 16 << 20,
    engine_bytes_in_flight: 64 << 10,
    engine_rounds: 1,
    transactions: true,
    transaction_duration_ms: 20,
    tls: true,
    sasl: false,
};

// ---------------------------------------------------------------------------------------------
// Report

#[derive(Serialize)]
struct Report {
    commit: String,
    machine: serde_json::Value,
    plan: Plan,
    /// /proc/loadavg when the run started and ended: other work on the machine skews every
    /// figure.
    load_average_at_start: String,
    load_average_at_end: String,
    storage: Storage,
    brokers: Vec<BrokerResult>,
    targets: Vec<Target>,
    /// The raw-protocol phases (`--raw`, and the smoke run).
    raw: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct Storage {
    /// What the O_DIRECT sequential write probe writes ([`common::DirectData::Fresh`]).
    direct_write_data: common::DirectData,
    direct_write_mb_per_s: f64,
    group_commit: Vec<GroupCommitProbe>,
    /// Lockstep's storage engine: a partition log's group commit on the io_uring engine
    /// (16 KiB and 1 MiB batches), judged against O_DIRECT writes of fresh data in paired
    /// rounds (`common::engine_group_commit`).
    engine_group_commit: Vec<common::EngineGroupCommit>,
}

#[derive(Serialize)]
struct GroupCommitProbe {
    how: GroupCommit,
    bytes_per_fdatasync: usize,
    mb_per_s: f64,
}

#[derive(Serialize, Default)]
struct BrokerResult {
    name: String,
    /// Why the broker was not run, if it was not.
    not_run: Option<String>,
    /// The first failure, if any.
    failed: Option<String>,
    /// Every acknowledged batch fdatasynced before the acknowledgement.
    durable_acks: bool,
    produce: Option<ProduceFigures>,
    share_consume: Option<ConsumeFigures>,
    txn_produce: Option<TxnProduceFigures>,
    /// Phase 4: produce over the SSL listener.
    tls_produce: Option<ProduceFigures>,
    /// Phase 4: share-consume over the SSL listener.
    tls_share_consume: Option<ConsumeFigures>,
    /// Phase 5: produce over the SASL_SSL (SCRAM-SHA-512) listener.
    sasl_produce: Option<ProduceFigures>,
    /// Phase 5: share-consume over the SASL_SSL listener.
    sasl_share_consume: Option<ConsumeFigures>,
    /// Peak RSS of the broker over the whole session, MiB.
    broker_peak_rss_mib: Option<f64>,
    /// Lockstep only: it exited 0 after SIGTERM.
    clean_exit: Option<bool>,
}

/// What a phase cost, beside the tool's own figures.
#[derive(Serialize, Clone, Default)]
struct Cost {
    /// Wall time from the tool's start to its exit (JVM start-up included), s.
    wall_seconds: f64,
    broker_cpu_seconds: f64,
    broker_cpu_us_per_record: f64,
    /// Broker CPU over the phase's wall time, cores.
    broker_cpu_cores: f64,
    client_cpu_seconds: f64,
    client_cpu_us_per_record: f64,
    client_peak_rss_mib: f64,
    /// Broker's VmHWM after the phase, MiB.
    broker_peak_rss_mib: Option<f64>,
    /// Lockstep only (its metrics endpoint): flushes during the phase.
    broker_fsyncs: Option<f64>,
}

#[derive(Serialize, Clone, Default)]
struct ProduceFigures {
    records: u64,
    records_per_s: f64,
    /// As the tool prints it (MiB/s).
    mib_per_s: f64,
    avg_ms: f64,
    max_ms: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    cost: Cost,
}

/// The transactional produce phase: the tool's figures and its producer's transaction metrics.
#[derive(Serialize, Clone, Default)]
struct TxnProduceFigures {
    produce: ProduceFigures,
    transaction_duration_ms: u64,
    /// `txn-init-time-ns-total` (initTransactions: FindCoordinator + InitProducerId), ms.
    init_ms: f64,
    /// `txn-commit-time-ns-total`: time in commitTransaction (flush of the transaction's last
    /// records, AddPartitionsToTxn, EndTxn, until the markers are written), ms.
    commit_time_total_ms: f64,
    /// Estimated: (send time − commit time) / duration + 1.
    transactions_estimated: f64,
    /// commit_time_total_ms / transactions_estimated.
    commit_ms_avg_estimated: f64,
}

#[derive(Serialize, Clone, Default)]
struct ConsumeFigures {
    records: u64,
    records_per_s: f64,
    /// As the tool prints it (MiB/s).
    mib_per_s: f64,
    fetch_time_ms: f64,
    cost: Cost,
}

#[derive(Serialize)]
struct Target {
    name: String,
    /// Lockstep's figure / the reference figure.
    ratio: Option<f64>,
    /// "<= 0.5", ">= 3", ...
    wanted: String,
    met: Option<bool>,
    detail: String,
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

/// One progress line on stderr, overwritten by the next.
fn progress(what: &str) {
    let what: String = what.chars().take(150).collect();
    eprint!("\r\x1b[2K[broker bench] {what}");
    let _ = std::io::stderr().flush();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let mut plan = if full { FULL } else { SMOKE };
    let option = |name: &str| {
        args.iter().position(|a| a == name).map(|i| {
            args.get(i + 1)
                .unwrap_or_else(|| panic!("{name} takes a value"))
        })
    };
    if let Some(v) = option("--records") {
        plan.records = v.parse().expect("--records N");
    }
    if let Some(v) = option("--producer-throughput") {
        plan.producer_throughput = v.parse().expect("--producer-throughput RECORDS_PER_S");
    }
    if let Some(v) = option("--threads") {
        plan.share_consumers = v.parse().expect("--threads N");
    }
    if let Some(v) = option("--transaction-duration-ms") {
        plan.transaction_duration_ms = v.parse().expect("--transaction-duration-ms MS");
        assert!(
            plan.transaction_duration_ms > 0,
            "--transaction-duration-ms > 0"
        );
    }
    if args.iter().any(|a| a == "--txn") {
        plan.transactions = true;
    }
    if args.iter().any(|a| a == "--no-txn") {
        plan.transactions = false;
    }
    if args.iter().any(|a| a == "--tls") {
        plan.tls = true;
    }
    if args.iter().any(|a| a == "--no-tls") {
        plan.tls = false;
    }
    if args.iter().any(|a| a == "--sasl") {
        plan.sasl = true;
    }
    if args.iter().any(|a| a == "--no-sasl") {
        plan.sasl = false;
    }
    assert!(plan.records > 0 && plan.share_consumers > 0);
    let load_average_at_start = load_average();
    let work_dir = tempfile::Builder::new()
        .prefix("lockstep-bench-broker-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temporary directory");
    let work = work_dir.path();

    // Kafka's tools need its distribution (and java); the Kafka broker runs only under
    // `cargo bench`.
    let tools = if full {
        progress("kafka: checking target/test-deps/kafka (tools/kafka-reference.sh fetch)");
        kafka_available().and_then(|_| java_available())
    } else {
        kafka_installed().and_then(|_| java_available())
    };
    let kafka_unavailable = if !full {
        Some("smoke run under `cargo test` (Kafka runs only under `cargo bench`)".to_string())
    } else if args.iter().any(|a| a == "--no-kafka") {
        Some("--no-kafka".to_string())
    } else {
        tools.clone().err()
    };

    let mut specs = vec![Spec {
        name: "lockstep".into(),
        kind: Kind::Lockstep,
    }];
    specs.push(Spec {
        name: "kafka".into(),
        kind: Kind::Kafka {
            extra_props: String::new(),
        },
    });
    if args.iter().any(|a| a == "--kafka-fsync") {
        specs.push(Spec {
            name: "kafka-fsync".into(),
            kind: Kind::Kafka {
                extra_props: "log.flush.interval.messages=1".into(),
            },
        });
    }

    progress("machine: O_DIRECT sequential write");
    let direct =
        common::direct_write_mb_per_s(work, plan.direct_write_bytes, common::DirectData::Fresh);
    let mut group_commit = Vec::new();
    for how in [
        GroupCommit::PageCache,
        GroupCommit::DirectPreallocated,
        GroupCommit::DirectFresh,
    ] {
        for bytes in GROUP_COMMIT_BYTES {
            progress(&format!(
                "machine: group commit {how:?}, {} KiB per fdatasync",
                bytes >> 10
            ));
            group_commit.push(GroupCommitProbe {
                how,
                bytes_per_fdatasync: bytes,
                mb_per_s: common::group_commit_mb_per_s(
                    work,
                    how,
                    bytes,
                    plan.group_commit_seconds,
                    plan.group_commit_total_bytes,
                ),
            });
        }
    }
    let mut engine_group_commit = Vec::new();
    for batch_bytes in ENGINE_GROUP_COMMIT_BATCH_BYTES {
        progress(&format!(
            "lockstep engine: group commit, {} KiB batches",
            batch_bytes >> 10
        ));
        engine_group_commit.push(common::engine_group_commit(
            work,
            batch_bytes,
            plan.engine_bytes_in_flight,
            plan.group_commit_seconds,
            plan.direct_write_bytes,
            plan.engine_rounds,
            None,
        ));
    }
    let storage = Storage {
        direct_write_data: common::DirectData::Fresh,
        direct_write_mb_per_s: direct,
        group_commit,
        engine_group_commit,
    };
    // One CA and server key store for both brokers; the clients trust the CA.
    let tls = if plan.tls || plan.sasl {
        progress("tls: certificates (openssl)");
        let keystore = make_certificates(&work.join("tls")).expect("TLS certificates");
        let trust = format!(
            "ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            work.join("tls/ca.pem").display()
        );
        let client_config = work.join("tls/client-ssl.properties");
        std::fs::write(&client_config, format!("security.protocol=SSL\n{trust}"))
            .expect("client TLS properties");
        let sasl_client_config = work.join("tls/client-sasl-ssl.properties");
        std::fs::write(
            &sasl_client_config,
            format!(
                "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
                 sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \
                 required username=\"{SASL_USER}\" password=\"{SASL_PASSWORD}\";\n{trust}"
            ),
        )
        .expect("client SASL_SSL properties");
        Some(Tls {
            keystore,
            client_config,
            sasl_client_config,
        })
    } else {
        None
    };

    let mut brokers = Vec::new();
    for spec in &specs {
        let lockstep = matches!(spec.kind, Kind::Lockstep);
        let mut result = BrokerResult {
            name: spec.name.clone(),
            durable_acks: match &spec.kind {
                Kind::Lockstep => true,
                Kind::Kafka { extra_props } => extra_props.contains("flush.interval.messages=1"),
            },
            ..Default::default()
        };
        let why_not = if lockstep {
            tools.clone().err()
        } else {
            kafka_unavailable.clone()
        };
        match why_not {
            Some(why) => result.not_run = Some(why),
            None => {
                if let Err(e) = session(spec, work, plan, tls.as_ref(), &mut result) {
                    result.failed.get_or_insert(e);
                }
            }
        }
        brokers.push(result);
    }

    let raw = (!full || args.iter().any(|a| a == "--raw"))
        .then(|| raw::run(&args, full, kafka_unavailable.clone(), work));
    progress("done");
    eprintln!();

    let raw_produce_mb = raw.as_ref().and_then(raw_lockstep_produce_mb_per_s);
    let mut targets = targets(&brokers, &storage, plan, raw_produce_mb);
    if !full {
        // A few hundred records judge nothing.
        targets.iter_mut().for_each(|t| t.met = None);
    }
    let report = Report {
        commit: common::git_commit(),
        machine: common::machine(),
        plan,
        load_average_at_start,
        load_average_at_end: load_average(),
        storage,
        brokers,
        targets,
        raw,
    };
    print_table(&report);
    if full {
        let path = common::write_report("broker", &report);
        println!("report: {}", path.display());
    }
    if args.iter().any(|a| a == "--json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report as JSON")
        );
    }
    if !full {
        let l = &report.brokers[0];
        assert!(l.failed.is_none(), "lockstep failed: {:?}", l.failed);
        match &l.not_run {
            Some(why) => eprintln!("smoke: Kafka's tools not run against Lockstep: {why}"),
            None => {
                let p = l.produce.as_ref().expect("produce measured");
                assert_eq!(p.records, plan.records, "every record produced");
                let c = l.share_consume.as_ref().expect("share-consume measured");
                assert_eq!(c.records, plan.records, "every record share-consumed");
                if plan.transactions {
                    let t = l
                        .txn_produce
                        .as_ref()
                        .expect("transactional produce measured");
                    assert_eq!(t.produce.records, plan.records, "every record sent in txns");
                    assert!(
                        t.commit_time_total_ms > 0.0,
                        "commits took time: {}",
                        t.commit_time_total_ms
                    );
                }
                if plan.tls {
                    let p = l.tls_produce.as_ref().expect("TLS produce measured");
                    assert_eq!(p.records, plan.records, "every record produced over TLS");
                    let c = l
                        .tls_share_consume
                        .as_ref()
                        .expect("TLS share-consume measured");
                    assert_eq!(
                        c.records, plan.records,
                        "every record share-consumed over TLS"
                    );
                }
                if plan.sasl {
                    let p = l.sasl_produce.as_ref().expect("SASL_SSL produce measured");
                    assert_eq!(
                        p.records, plan.records,
                        "every record produced over SASL_SSL"
                    );
                    let c = l
                        .sasl_share_consume
                        .as_ref()
                        .expect("SASL_SSL share-consume measured");
                    assert_eq!(c.records, plan.records, "every record share-consumed");
                }
                assert_eq!(l.clean_exit, Some(true), "SIGTERM exits 0");
            }
        }
    }
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The TLS and SASL_SSL phases' files: the brokers' PEM key store and the clients' properties.
struct Tls {
    keystore: PathBuf,
    /// `--command-config` of both tools: `security.protocol=SSL` and the CA as PEM trust store.
    client_config: PathBuf,
    /// The same for SASL_SSL: SCRAM-SHA-512 as [`SASL_USER`].
    sasl_client_config: PathBuf,
}

/// Where a phase's tools connect: the listener, the topic and group, the client settings.
struct Route<'a> {
    bootstrap: String,
    topic: &'a str,
    group: &'a str,
    client_id: &'a str,
    /// `--command-config` of the tools (TLS), if any.
    client_config: Option<&'a Path>,
}

/// One broker: start it, produce, share-consume (plaintext, then over TLS), transactional
/// produce, stop it.
fn session(
    spec: &Spec,
    work: &Path,
    plan: Plan,
    tls: Option<&Tls>,
    result: &mut BrokerResult,
) -> Result<(), String> {
    let name = &spec.name;
    progress(&format!("{name}: starting"));
    let dir = work.join(name);
    let secured = tls.map(|t| Secured {
        keystore: &t.keystore,
        sasl_scram: plan.sasl,
    });
    let broker = match &spec.kind {
        Kind::Lockstep => Broker::start_lockstep_with(
            &dir,
            LockstepOptions {
                shards: None,
                metrics: true,
            },
            secured,
        )?,
        Kind::Kafka { extra_props } => Broker::start_kafka_with(&dir, extra_props, secured)?,
    };
    let outcome = (|| {
        prepare(&broker, plan)?;
        let plain = Route {
            bootstrap: broker.bootstrap(),
            topic: TOPIC,
            group: GROUP,
            client_id: "p14-bench-producer",
            client_config: None,
        };
        let (produce, consume) = produce_and_consume(name, &broker, plan, &plain)?;
        result.produce = Some(produce);
        let complete = consume.records >= plan.records;
        let got = consume.records;
        result.share_consume = Some(consume);
        if !complete {
            return Err(format!(
                "{name}: ShareConsumerPerformance: consumed {got} of {} records before its \
                 timeout",
                plan.records
            ));
        }
        if let Some(tls) = tls.filter(|_| plan.tls) {
            let route = Route {
                bootstrap: broker.tls_bootstrap().expect("an SSL listener"),
                topic: TLS_TOPIC,
                group: TLS_GROUP,
                client_id: "p18-bench-tls-producer",
                client_config: Some(&tls.client_config),
            };
            let (produce, consume) =
                produce_and_consume(&format!("{name} (TLS)"), &broker, plan, &route)?;
            result.tls_produce = Some(produce);
            let complete = consume.records >= plan.records;
            let got = consume.records;
            result.tls_share_consume = Some(consume);
            if !complete {
                return Err(format!(
                    "{name} (TLS): ShareConsumerPerformance: consumed {got} of {} records \
                     before its timeout",
                    plan.records
                ));
            }
        }
        if let Some(tls) = tls.filter(|_| plan.sasl) {
            add_scram_user(name, &broker, plan)?;
            let route = Route {
                bootstrap: broker.sasl_ssl_bootstrap().expect("a SASL_SSL listener"),
                topic: SASL_TOPIC,
                group: SASL_GROUP,
                client_id: "p18-bench-sasl-producer",
                client_config: Some(&tls.sasl_client_config),
            };
            let (produce, consume) =
                produce_and_consume(&format!("{name} (SASL_SSL)"), &broker, plan, &route)?;
            result.sasl_produce = Some(produce);
            let complete = consume.records >= plan.records;
            let got = consume.records;
            result.sasl_share_consume = Some(consume);
            if !complete {
                return Err(format!(
                    "{name} (SASL_SSL): ShareConsumerPerformance: consumed {got} of {} records \
                     before its timeout",
                    plan.records
                ));
            }
        }
        if plan.transactions {
            let label = format!("{name}: ProducerPerformance --transactional-id");
            let run = run_tool(
                &label,
                PRODUCER_TOOL,
                &txn_producer_args(&broker, plan),
                &broker,
                plan,
            )?;
            let txn = parse_txn_producer(&run, plan).map_err(|e| format!("{label}: {e}"))?;
            let sent = txn.produce.records;
            result.txn_produce = Some(txn);
            if sent != plan.records {
                return Err(format!("{label}: sent {sent} of {} records", plan.records));
            }
        }
        Ok(())
    })();
    result.broker_peak_rss_mib = common::proc_peak_rss_bytes(broker.pid()).map(mib);
    progress(&format!("{name}: stopping"));
    let lockstep = matches!(spec.kind, Kind::Lockstep);
    match broker.stop() {
        Ok(status) if lockstep => {
            result.clean_exit = Some(status.success());
            if !status.success() {
                result
                    .failed
                    .get_or_insert(format!("lockstep exited with {status} after SIGTERM"));
            }
        }
        Ok(_) => {}
        Err(e) => {
            if lockstep {
                result.clean_exit = Some(false);
            }
            result.failed.get_or_insert(e);
        }
    }
    outcome
}

/// Adds the SASL_SSL phase's SCRAM-SHA-512 user with Kafka's `kafka-configs` (over PLAINTEXT).
fn add_scram_user(name: &str, broker: &Broker, plan: Plan) -> Result<(), String> {
    let label = format!("{name}: kafka-configs --alter --entity-type users");
    let args: Vec<String> = [
        "--bootstrap-server",
        &broker.bootstrap(),
        "--alter",
        "--add-config",
        &format!("SCRAM-SHA-512=[iterations=4096,password={SASL_PASSWORD}]"),
        "--entity-type",
        "users",
        "--entity-name",
        SASL_USER,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = run_tool(&label, CONFIG_TOOL, &args, broker, plan)?;
    if run.stdout.iter().any(|l| l.contains("Completed updating")) {
        Ok(())
    } else {
        Err(format!("{label}: no confirmation in {:?}", run.stdout))
    }
}

/// ProducerPerformance, then ShareConsumerPerformance on what it produced, along `route`.
fn produce_and_consume(
    name: &str,
    broker: &Broker,
    plan: Plan,
    route: &Route<'_>,
) -> Result<(ProduceFigures, ConsumeFigures), String> {
    let label = format!("{name}: ProducerPerformance");
    let run = run_tool(
        &label,
        PRODUCER_TOOL,
        &producer_args(route, plan),
        broker,
        plan,
    )?;
    let produce = parse_producer(&run).map_err(|e| format!("{label}: {e}"))?;
    let label = format!("{name}: ShareConsumerPerformance");
    let run = run_tool(
        &label,
        SHARE_CONSUMER_TOOL,
        &share_consumer_args(route, plan),
        broker,
        plan,
    )?;
    let consume = parse_share_consumer(&run).map_err(|e| format!("{label}: {e}"))?;
    Ok((produce, consume))
}

/// Creates the topics, waits until Metadata names a leader for every partition, and sets the
/// share groups' `share.auto.offset.reset=earliest`.
fn prepare(broker: &Broker, plan: Plan) -> Result<(), String> {
    let mut admin = Admin::connect(&broker.bootstrap()).map_err(|e| format!("admin: {e}"))?;
    let mut topics = vec![TOPIC];
    let mut groups = vec![GROUP];
    if plan.transactions {
        topics.push(TXN_TOPIC);
    }
    if plan.tls {
        topics.push(TLS_TOPIC);
        groups.push(TLS_GROUP);
    }
    if plan.sasl {
        topics.push(SASL_TOPIC);
        groups.push(SASL_GROUP);
    }
    let topics = &topics[..];
    for topic in topics {
        admin
            .create_topics(&[NewTopic::new(topic, plan.partitions)])
            .map_err(|e| format!("CreateTopics {topic}: {e}"))?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metadata = admin
            .metadata(Some(topics))
            .map_err(|e| format!("Metadata: {e}"))?;
        let led = topics
            .iter()
            .all(|t| (0..plan.partitions).all(|p| metadata.leader(t, p).is_some_and(|l| l >= 0)));
        if led {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{topics:?}: partitions without a leader after 60 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for group in groups {
        admin
            .set_group_config(group, "share.auto.offset.reset", "earliest")
            .map_err(|e| format!("IncrementalAlterConfigs group {group}: {e}"))?;
    }
    Ok(())
}

fn producer_args(route: &Route<'_>, plan: Plan) -> Vec<String> {
    let mut args: Vec<String> = [
        "--topic",
        route.topic,
        "--num-records",
        &plan.records.to_string(),
        "--record-size",
        &plan.record_bytes.to_string(),
        "--throughput",
        &plan.producer_throughput.to_string(),
        "--reporting-interval",
        "1000",
        "--bootstrap-server",
        &route.bootstrap,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(config) = route.client_config {
        args.push("--command-config".into());
        args.push(config.display().to_string());
    }
    // Kafka 4.4's name for `--producer-props` (deprecated); its values run to the end.
    args.push("--command-property".into());
    args.push("acks=all".into());
    args.push(format!("client.id={}", route.client_id));
    args
}

/// `producer_args` on the transactional topic, with a transactional id, the transaction
/// duration and the producer's metrics at the end.
fn txn_producer_args(broker: &Broker, plan: Plan) -> Vec<String> {
    let route = Route {
        bootstrap: broker.bootstrap(),
        topic: TOPIC,
        group: GROUP,
        client_id: "p14-bench-producer",
        client_config: None,
    };
    let mut args = producer_args(&route, plan);
    let topic = args.iter().position(|a| a == "--topic").expect("--topic") + 1;
    args[topic] = TXN_TOPIC.into();
    let client = args
        .iter()
        .position(|a| a.starts_with("client.id="))
        .expect("client.id");
    args[client] = "client.id=p17-bench-txn-producer".into();
    let more = [
        "--transactional-id",
        TXN_ID,
        "--transaction-duration-ms",
        &plan.transaction_duration_ms.to_string(),
        "--print-metrics",
    ];
    // Before `--command-property`, whose values run to the end.
    let at = args
        .iter()
        .position(|a| a == "--command-property")
        .expect("--command-property");
    for (i, a) in more.iter().enumerate() {
        args.insert(at + i, a.to_string());
    }
    args
}

fn share_consumer_args(route: &Route<'_>, plan: Plan) -> Vec<String> {
    let mut args: Vec<String> = [
        "--bootstrap-server",
        &route.bootstrap,
        "--topic",
        route.topic,
        "--group",
        route.group,
        "--num-records",
        &plan.records.to_string(),
        "--threads",
        &plan.share_consumers.to_string(),
        "--show-detailed-stats",
        "--reporting-interval",
        "1000",
        "--timeout",
        &plan.share_timeout_ms.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(config) = route.client_config {
        args.push("--command-config".into());
        args.push(config.display().to_string());
    }
    args
}

// ---------------------------------------------------------------------------------------------
// Running a Kafka tool

fn kafka_home() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps/kafka")
}

/// The Kafka distribution is installed (without fetching it: the smoke run must not).
fn kafka_installed() -> Result<(), String> {
    let stamp = kafka_home().join("libs/.installed");
    match std::fs::read_to_string(&stamp) {
        Ok(s) if s.trim().starts_with("kafka_2.13:") => Ok(()),
        _ => Err(format!(
            "Kafka's tools are not installed ({} missing; tools/install-test-deps.sh)",
            stamp.display()
        )),
    }
}

fn java_available() -> Result<(), String> {
    let java = std::env::var("JAVA").unwrap_or_else(|_| "java".into());
    Command::new(&java)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()
        .filter(|s| s.success())
        .map(|_| ())
        .ok_or_else(|| format!("`{java} -version` failed: Kafka's tools need a JRE"))
}

/// A finished tool run and what it cost.
struct ToolRun {
    stdout: Vec<String>,
    cost: Cost,
}

/// Runs Kafka tool `class` (through `tools/kafka-reference.sh class`, which execs the JVM, so
/// the child is the JVM) and measures the broker's CPU around it and the tool's own CPU
/// (wait4's rusage). Its stdout lines are progress lines; a non-zero exit is an error.
fn run_tool(
    label: &str,
    class: &str,
    args: &[String],
    broker: &Broker,
    plan: Plan,
) -> Result<ToolRun, String> {
    let mut command = Command::new(kafka_script());
    command
        .arg("class")
        .arg(class)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    common::brokers::die_with_parent(&mut command);
    progress(&format!("{label}: starting the JVM"));
    let broker_cpu = common::proc_cpu_seconds(broker.pid());
    let fsyncs = broker.metrics_port.and_then(raw::fsync_totals);
    let start = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|e| format!("{label}: starting {}: {e}", kafka_script().display()))?;
    let pid = child.id() as libc::pid_t;
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let label_owned = label.to_string();
    let out_reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        // `--print-metrics` ends the tool's output with a table of a few hundred lines.
        let mut metrics = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            metrics |= line.starts_with("Metric Name");
            if !metrics {
                progress(&format!("{label_owned}: {line}"));
            }
            lines.push(line);
        }
        lines
    });
    let err_reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            lines.push(line);
        }
        lines
    });
    let deadline = start + Duration::from_secs(plan.tool_timeout_seconds);
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut timed_out = false;
    loop {
        // SAFETY: wait4 on the pid of our own child, with valid out-pointers. The child is
        // reaped here (not by std's Child, which is never waited on after this).
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        if r < 0 {
            return Err(format!(
                "{label}: wait4: {}",
                std::io::Error::last_os_error()
            ));
        }
        if Instant::now() > deadline && !timed_out {
            timed_out = true;
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let wall = start.elapsed().as_secs_f64();
    let broker_cpu = common::proc_cpu_seconds(broker.pid()) - broker_cpu;
    let fsyncs = match (fsyncs, broker.metrics_port.and_then(raw::fsync_totals)) {
        (Some((_, n0)), Some((_, n1))) => Some(n1 - n0),
        _ => None,
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let tail = |lines: &[String]| {
        lines
            .iter()
            .rev()
            .take(8)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join(" | ")
    };
    if timed_out {
        return Err(format!(
            "{label}: killed after {} s; last output: {}",
            plan.tool_timeout_seconds,
            tail(&stdout)
        ));
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(format!(
            "{label}: exited with wait status {status:#x}; stderr: {}; stdout: {}",
            tail(&stderr),
            tail(&stdout)
        ));
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(ToolRun {
        stdout,
        cost: Cost {
            wall_seconds: wall,
            broker_cpu_seconds: broker_cpu,
            broker_cpu_cores: broker_cpu / wall.max(1e-9),
            client_cpu_seconds: tv(usage.ru_utime) + tv(usage.ru_stime),
            // ru_maxrss is in KiB on Linux.
            client_peak_rss_mib: usage.ru_maxrss as f64 / 1024.0,
            broker_peak_rss_mib: common::proc_peak_rss_bytes(broker.pid()).map(mib),
            broker_fsyncs: fsyncs,
            ..Default::default()
        },
    })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Fills in the per-record figures of `cost`.
fn per_record(mut cost: Cost, records: u64) -> Cost {
    let n = records.max(1) as f64;
    cost.broker_cpu_us_per_record = cost.broker_cpu_seconds * 1e6 / n;
    cost.client_cpu_us_per_record = cost.client_cpu_seconds * 1e6 / n;
    cost
}

/// The number just before `suffix` in `line` ("95419.8 records/sec" → 95419.8 for
/// "records/sec"); a leading '(' is skipped.
fn number_before(line: &str, suffix: &str) -> Option<f64> {
    let at = line.find(suffix)?;
    line[..at]
        .split_whitespace()
        .last()?
        .trim_start_matches('(')
        .parse()
        .ok()
}

/// ProducerPerformance's summary line: "N records sent, R records/sec (M MB/sec), A ms avg
/// latency, X ms max latency, P ms 50th, P ms 95th, P ms 99th, P ms 99.9th."
fn parse_producer(run: &ToolRun) -> Result<ProduceFigures, String> {
    let line = run
        .stdout
        .iter()
        .rev()
        .find(|l| l.contains(" ms 50th") && !l.contains("steady state"))
        .ok_or_else(|| {
            format!(
                "no summary line in its output: {:?}",
                run.stdout.last().map(String::as_str).unwrap_or("")
            )
        })?;
    let field = |suffix: &str| {
        number_before(line, suffix).ok_or_else(|| format!("no `{suffix}` in {line:?}"))
    };
    let records = field(" records sent")? as u64;
    Ok(ProduceFigures {
        records,
        records_per_s: field(" records/sec")?,
        mib_per_s: field(" MB/sec")?,
        avg_ms: field(" ms avg latency")?,
        max_ms: field(" ms max latency")?,
        p50_ms: field(" ms 50th")?,
        p95_ms: field(" ms 95th")?,
        p99_ms: field(" ms 99th")?,
        p999_ms: field(" ms 99.9th")?,
        cost: per_record(run.cost.clone(), records),
    })
}

/// A `--print-metrics` line "group:name:{tags}   : value" of the producer.
fn producer_metric(run: &ToolRun, group_and_name: &str) -> Result<f64, String> {
    let prefix = format!("{group_and_name}:{{");
    run.stdout
        .iter()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(" : ").next())
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no metric {group_and_name} in its --print-metrics output"))
}

/// The transactional run: the summary line as [`parse_producer`], the transaction metrics and
/// the estimated number of commits (see the module's doc).
fn parse_txn_producer(run: &ToolRun, plan: Plan) -> Result<TxnProduceFigures, String> {
    let produce = parse_producer(run)?;
    let init_ms = producer_metric(run, "producer-metrics:txn-init-time-ns-total")? / 1e6;
    let commit_ms = producer_metric(run, "producer-metrics:txn-commit-time-ns-total")? / 1e6;
    let send_ms = produce.records as f64 * 1e3 / produce.records_per_s.max(1e-9);
    let duration = plan.transaction_duration_ms as f64;
    let transactions = ((send_ms - commit_ms).max(0.0) / duration).floor() + 1.0;
    Ok(TxnProduceFigures {
        produce,
        transaction_duration_ms: plan.transaction_duration_ms,
        init_ms,
        commit_time_total_ms: commit_ms,
        transactions_estimated: transactions,
        commit_ms_avg_estimated: commit_ms / transactions,
    })
}

/// ShareConsumerPerformance's summary line (after its header "start.time, end.time,
/// data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms"): the last line
/// of seven comma-separated fields that is not a per-consumer line.
fn parse_share_consumer(run: &ToolRun) -> Result<ConsumeFigures, String> {
    let fields: Vec<&str> = run
        .stdout
        .iter()
        .rev()
        .filter(|l| !l.contains("share consumer") && !l.starts_with("start.time"))
        .map(|l| l.split(", ").collect::<Vec<_>>())
        .find(|f| f.len() == 7)
        .ok_or_else(|| {
            format!(
                "no summary line in its output: {:?}",
                run.stdout.last().map(String::as_str).unwrap_or("")
            )
        })?;
    let number = |i: usize| -> Result<f64, String> {
        fields[i]
            .trim()
            .parse()
            .map_err(|_| format!("field {i} of {fields:?} is not a number"))
    };
    let records = number(5)? as u64;
    Ok(ConsumeFigures {
        records,
        records_per_s: number(4)?,
        mib_per_s: number(3)?,
        fetch_time_ms: number(6)?,
        cost: per_record(run.cost.clone(), records),
    })
}

// ---------------------------------------------------------------------------------------------
// Targets and table

/// The targets, from whatever phases completed (a share-consume that did not read every
/// record is not judged).
/// Lockstep's produce MB/s (record-batch bytes, 10^6) in the raw generator's pipelined produce
/// phase, if it ran without errors.
fn raw_lockstep_produce_mb_per_s(raw: &serde_json::Value) -> Option<f64> {
    let brokers = raw.get("brokers")?.as_array()?;
    let lockstep = brokers
        .iter()
        .find(|b| b.get("name").and_then(|n| n.as_str()) == Some("lockstep"))?;
    let produce = lockstep.get("produce")?;
    if produce.get("errors").and_then(|e| e.as_u64()) != Some(0) {
        return None;
    }
    produce.get("mb_per_s")?.as_f64()
}

fn targets(
    brokers: &[BrokerResult],
    storage: &Storage,
    plan: Plan,
    raw_produce_mb: Option<f64>,
) -> Vec<Target> {
    let find = |name: &str| brokers.iter().find(|b| b.name == name);
    let (l, k) = (find("lockstep"), find("kafka"));
    let lp = l.and_then(|b| b.produce.as_ref());
    let kp = k.and_then(|b| b.produce.as_ref());
    let complete = |c: &&ConsumeFigures| c.records >= plan.records;
    let lc = l.and_then(|b| b.share_consume.as_ref()).filter(complete);
    let kc = k.and_then(|b| b.share_consume.as_ref()).filter(complete);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let judge = |r: Option<f64>, at_most: bool, bound: f64| {
        r.map(|r| if at_most { r <= bound } else { r >= bound })
    };
    let mut out = Vec::new();
    let cpu = ratio(
        lp.map(|p| p.cost.broker_cpu_us_per_record),
        kp.map(|p| p.cost.broker_cpu_us_per_record),
    );
    let durable = l.is_some_and(|b| b.durable_acks);
    out.push(Target {
        name: "broker CPU per produced record (every acknowledged batch fdatasynced)".into(),
        ratio: cpu,
        wanted: "<= 0.5".into(),
        met: judge(cpu, true, 0.5).map(|m| m && durable),
        detail: format!(
            "{} vs {} µs",
            fmt(lp.map(|p| p.cost.broker_cpu_us_per_record)),
            fmt(kp.map(|p| p.cost.broker_cpu_us_per_record))
        ),
    });
    let p99 = ratio(lp.map(|p| p.p99_ms), kp.map(|p| p.p99_ms));
    out.push(Target {
        name: "produce p99 latency".into(),
        ratio: p99,
        wanted: "<= 0.5".into(),
        met: judge(p99, true, 0.5),
        detail: format!(
            "{} vs {} ms",
            fmt(lp.map(|p| p.p99_ms)),
            fmt(kp.map(|p| p.p99_ms))
        ),
    });
    let rate = ratio(lc.map(|c| c.records_per_s), kc.map(|c| c.records_per_s));
    let cc = ratio(
        lc.map(|c| c.cost.broker_cpu_us_per_record),
        kc.map(|c| c.cost.broker_cpu_us_per_record),
    );
    out.push(Target {
        name: "share-consume records/s".into(),
        ratio: rate,
        wanted: ">= 3".into(),
        met: judge(rate, false, 3.0),
        detail: format!(
            "{} vs {} records/s",
            fmt(lc.map(|c| c.records_per_s)),
            fmt(kc.map(|c| c.records_per_s))
        ),
    });
    out.push(Target {
        name: "share-consume broker CPU per record".into(),
        ratio: cc,
        wanted: "<= 0.2".into(),
        met: judge(cc, true, 0.2),
        detail: format!(
            "{} vs {} µs",
            fmt(lc.map(|c| c.cost.broker_cpu_us_per_record)),
            fmt(kc.map(|c| c.cost.broker_cpu_us_per_record))
        ),
    });
    // The storage engine's group commit (a producer's 16 KiB batches, many appenders).
    let engine = storage
        .engine_group_commit
        .iter()
        .find(|g| g.batch_bytes <= 16 << 10);
    let bw = engine.map(|g| g.ratio);
    out.push(Target {
        name: "group-commit durable append vs O_DIRECT bandwidth".into(),
        ratio: bw,
        wanted: ">= 0.8".into(),
        met: judge(bw, false, 0.8),
        detail: match engine {
            Some(g) => {
                let (low, high) = g.ratio_range();
                format!(
                    "{:.0} vs {:.0} MB/s (engine, {} B batches, {} appenders; O_DIRECT writes of \
                     fresh data; median of {} paired rounds, ratios {low:.2}-{high:.2}; against \
                     one unchanged buffer {:.0} MB/s, {:.2})",
                    g.mb_per_s,
                    g.direct_mb_per_s,
                    g.batch_bytes,
                    g.appenders,
                    g.rounds.len(),
                    g.unchanged_mb_per_s,
                    g.unchanged_ratio,
                )
            }
            None => "not measured".into(),
        },
    });
    // The broker's durable produce, for the record (not a target): bounded by the clients on a
    // small machine. The raw generator's pipelined produce when it ran, else the Java producer.
    let (durable_mb, source) = match raw_produce_mb {
        Some(mb) => (Some(mb), "raw pipelined produce, acks=all"),
        None => (
            lp.map(|p| p.mib_per_s * (1 << 20) as f64 / 1e6),
            "one Java producer; --raw adds the raw generator's",
        ),
    };
    out.push(Target {
        name: "broker durable produce vs O_DIRECT bandwidth (no target)".into(),
        ratio: ratio(durable_mb, Some(storage.direct_write_mb_per_s)),
        wanted: "-".into(),
        met: None,
        detail: format!(
            "{} vs {:.0} MB/s ({source}; the clients share the 2 cores)",
            fmt(durable_mb),
            storage.direct_write_mb_per_s
        ),
    });
    out
}

fn fmt(v: Option<f64>) -> String {
    match v {
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
        None => "-".into(),
    }
}

/// Each broker's plaintext, TLS and SASL_SSL figures side by side, with secured / plaintext.
fn print_secured_side_by_side(ran: &[&BrokerResult]) {
    println!(
        "secured against PLAINTEXT (same broker process; the tools with security.protocol=SSL or \
         SASL_SSL + SCRAM-SHA-512, a PEM trust store):"
    );
    type F = fn(&ProduceFigures) -> f64;
    type G = fn(&ConsumeFigures) -> f64;
    let produce: [(&str, F); 4] = [
        ("produce records/s", |f| f.records_per_s),
        ("produce latency p99 ms", |f| f.p99_ms),
        ("produce broker CPU µs/record", |f| {
            f.cost.broker_cpu_us_per_record
        }),
        ("produce client CPU µs/record", |f| {
            f.cost.client_cpu_us_per_record
        }),
    ];
    let consume: [(&str, G); 3] = [
        ("share-consume records/s", |f| f.records_per_s),
        ("share-consume broker CPU µs/record", |f| {
            f.cost.broker_cpu_us_per_record
        }),
        ("share-consume client CPU µs/record", |f| {
            f.cost.client_cpu_us_per_record
        }),
    ];
    let ratio = |plain: Option<f64>, other: Option<f64>| match (plain, other) {
        (Some(a), Some(b)) if a != 0.0 => format!("{:.2}", b / a),
        _ => "-".into(),
    };
    for b in ran {
        println!(
            "{:<36} {:>10} {:>10} {:>10} {:>10} {:>10}",
            b.name, "PLAINTEXT", "SSL", "SSL/plain", "SASL_SSL", "SASL/plain"
        );
        let line = |label: &str, v: [Option<f64>; 3]| {
            println!(
                "  {label:<34} {:>10} {:>10} {:>10} {:>10} {:>10}",
                fmt(v[0]),
                fmt(v[1]),
                ratio(v[0], v[1]),
                fmt(v[2]),
                ratio(v[0], v[2])
            );
        };
        for (label, f) in produce {
            line(
                label,
                [&b.produce, &b.tls_produce, &b.sasl_produce].map(|p| p.as_ref().map(f)),
            );
        }
        for (label, f) in consume {
            line(
                label,
                [
                    &b.share_consume,
                    &b.tls_share_consume,
                    &b.sasl_share_consume,
                ]
                .map(|c| c.as_ref().map(f)),
            );
        }
    }
}

fn print_table(report: &Report) {
    let p = &report.plan;
    let s = &report.storage;
    println!();
    println!(
        "broker bench (Kafka 4.4's tools): {} records x {} B, acks=all, {} partitions, {} share \
         consumer(s); commit {}",
        p.records, p.record_bytes, p.partitions, p.share_consumers, report.commit
    );
    if p.tls {
        println!(
            "TLS: produce and share-consume again over each broker's SSL listener (topic \
             {TLS_TOPIC}, group {TLS_GROUP}; PEM key store, EC P-256)"
        );
    }
    if p.sasl {
        println!(
            "SASL_SSL: the same over a SASL_SSL listener, SCRAM-SHA-512 as {SASL_USER} (topic \
             {SASL_TOPIC}, group {SASL_GROUP})"
        );
    }
    if p.transactions {
        println!(
            "transactional produce: --transactional-id {TXN_ID} --transaction-duration-ms {}",
            p.transaction_duration_ms
        );
    }
    println!(
        "machine: {} cpus ({}), load average {} at start, {} at the end",
        report.machine["cpus"],
        report.machine["cpu"],
        report.load_average_at_start,
        report.load_average_at_end
    );
    println!(
        "storage: O_DIRECT sequential write {:.0} MB/s (fresh data, 1 MiB blocks, one fdatasync at the end)",
        s.direct_write_mb_per_s
    );
    for how in [
        GroupCommit::PageCache,
        GroupCommit::DirectPreallocated,
        GroupCommit::DirectFresh,
    ] {
        let probes: Vec<String> = s
            .group_commit
            .iter()
            .filter(|g| g.how == how)
            .map(|g| format!("{} KiB {:.0} MB/s", g.bytes_per_fdatasync >> 10, g.mb_per_s))
            .collect();
        let what = match how {
            GroupCommit::PageCache => "page cache, growing file",
            GroupCommit::DirectPreallocated => "O_DIRECT, preallocated file, zero-filled first",
            GroupCommit::DirectFresh => "O_DIRECT, preallocated file, never written",
        };
        println!(
            "storage: group commit (write, fdatasync, repeat; {what}): {}",
            probes.join(", ")
        );
    }
    let engine: Vec<String> = s
        .engine_group_commit
        .iter()
        .map(|g| {
            let (low, high) = g.ratio_range();
            format!(
                "{} KiB batches × {} appenders {:.0} MB/s ({:.2}× O_DIRECT of fresh data, rounds {low:.2}-{high:.2}; {:.2}× one unchanged buffer; {:.3} ms CPU per MB)",
                g.batch_bytes >> 10,
                g.appenders,
                g.mb_per_s,
                g.ratio,
                g.unchanged_ratio,
                g.cpu_ms_per_mb
            )
        })
        .collect();
    println!(
        "storage: Lockstep's engine, group commit (io_uring, O_DIRECT, durable appends): {}",
        engine.join(", ")
    );
    for g in &s.engine_group_commit {
        println!(
            "storage: {} KiB batches, {}",
            g.batch_bytes >> 10,
            common::timeline_line(&g.timeline)
        );
    }
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
    if ran.is_empty() {
        return;
    }
    let comparing = ran.len() >= 2 && ran[0].name == "lockstep" && ran[1].name == "kafka";
    print!("{:<40}", "");
    for b in &ran {
        print!(" {:>12}", b.name);
    }
    if comparing {
        print!(" {:>8}", "ratio");
    }
    println!();
    let row = |label: &str, values: Vec<Option<f64>>| {
        print!("{label:<40}");
        for v in &values {
            print!(" {:>12}", fmt(*v));
        }
        if comparing {
            match (values[0], values[1]) {
                (Some(a), Some(b)) if b != 0.0 => print!(" {:>8.2}", a / b),
                _ => print!(" {:>8}", "-"),
            }
        }
        println!();
    };
    type P = fn(&ProduceFigures) -> f64;
    type C = fn(&ConsumeFigures) -> f64;
    type K = fn(&Cost) -> Option<f64>;
    let costs: [(&str, K); 7] = [
        ("broker CPU µs/record", |c| {
            Some(c.broker_cpu_us_per_record)
        }),
        ("broker CPU cores", |c| Some(c.broker_cpu_cores)),
        ("client CPU µs/record", |c| {
            Some(c.client_cpu_us_per_record)
        }),
        ("client peak RSS MiB", |c| Some(c.client_peak_rss_mib)),
        ("broker peak RSS MiB", |c| c.broker_peak_rss_mib),
        ("broker fsyncs", |c| c.broker_fsyncs),
        ("wall s (JVM start included)", |c| Some(c.wall_seconds)),
    ];
    let produce: [(&str, P); 7] = [
        ("produce records/s", |f| f.records_per_s),
        ("produce MiB/s", |f| f.mib_per_s),
        ("produce latency avg ms", |f| f.avg_ms),
        ("produce latency p50 ms", |f| f.p50_ms),
        ("produce latency p95 ms", |f| f.p95_ms),
        ("produce latency p99 ms", |f| f.p99_ms),
        ("produce latency p99.9 ms", |f| f.p999_ms),
    ];
    for (label, f) in produce {
        row(
            label,
            ran.iter().map(|b| b.produce.as_ref().map(f)).collect(),
        );
    }
    for (label, f) in costs {
        row(
            &format!("produce: {label}"),
            ran.iter()
                .map(|b| b.produce.as_ref().and_then(|p| f(&p.cost)))
                .collect(),
        );
    }
    let consume: [(&str, C); 3] = [
        ("share-consume records/s", |f| f.records_per_s),
        ("share-consume MiB/s", |f| f.mib_per_s),
        ("share-consume records", |f| f.records as f64),
    ];
    for (label, f) in consume {
        row(
            label,
            ran.iter()
                .map(|b| b.share_consume.as_ref().map(f))
                .collect(),
        );
    }
    for (label, f) in costs {
        row(
            &format!("share-consume: {label}"),
            ran.iter()
                .map(|b| b.share_consume.as_ref().and_then(|c| f(&c.cost)))
                .collect(),
        );
    }
    type Pick<T> = fn(&BrokerResult) -> Option<&T>;
    let secured: [(&str, bool, Pick<ProduceFigures>, Pick<ConsumeFigures>); 2] = [
        (
            "TLS",
            p.tls,
            |b| b.tls_produce.as_ref(),
            |b| b.tls_share_consume.as_ref(),
        ),
        (
            "SASL_SSL",
            p.sasl,
            |b| b.sasl_produce.as_ref(),
            |b| b.sasl_share_consume.as_ref(),
        ),
    ];
    for (name, on, pick_produce, pick_consume) in secured {
        if !on {
            continue;
        }
        let secured_produce: [(&str, P); 4] = [
            ("produce records/s", |f| f.records_per_s),
            ("produce MiB/s", |f| f.mib_per_s),
            ("produce latency p50 ms", |f| f.p50_ms),
            ("produce latency p99 ms", |f| f.p99_ms),
        ];
        for (label, f) in secured_produce {
            row(
                &format!("{name} {label}"),
                ran.iter().map(|b| pick_produce(b).map(f)).collect(),
            );
        }
        for (label, f) in costs {
            row(
                &format!("{name} produce: {label}"),
                ran.iter()
                    .map(|b| pick_produce(b).and_then(|p| f(&p.cost)))
                    .collect(),
            );
        }
        for (label, f) in consume {
            row(
                &format!("{name} {label}"),
                ran.iter().map(|b| pick_consume(b).map(f)).collect(),
            );
        }
        for (label, f) in costs {
            row(
                &format!("{name} share-consume: {label}"),
                ran.iter()
                    .map(|b| pick_consume(b).and_then(|c| f(&c.cost)))
                    .collect(),
            );
        }
    }
    if p.transactions {
        type T = fn(&TxnProduceFigures) -> f64;
        let txn: [(&str, T); 8] = [
            ("txn produce records/s", |t| t.produce.records_per_s),
            ("txn produce latency p50 ms", |t| t.produce.p50_ms),
            ("txn produce latency p99 ms", |t| t.produce.p99_ms),
            ("txn init ms", |t| t.init_ms),
            ("txn commit time total ms", |t| t.commit_time_total_ms),
            ("txn commits (≈)", |t| t.transactions_estimated),
            ("txn commit latency avg ms (≈)", |t| {
                t.commit_ms_avg_estimated
            }),
            ("txn produce records", |t| t.produce.records as f64),
        ];
        for (label, f) in txn {
            row(
                label,
                ran.iter().map(|b| b.txn_produce.as_ref().map(f)).collect(),
            );
        }
        for (label, f) in costs {
            row(
                &format!("txn produce: {label}"),
                ran.iter()
                    .map(|b| b.txn_produce.as_ref().and_then(|t| f(&t.produce.cost)))
                    .collect(),
            );
        }
    }
    row(
        "broker peak RSS MiB (session)",
        ran.iter().map(|b| b.broker_peak_rss_mib).collect(),
    );
    if p.tls || p.sasl {
        print_secured_side_by_side(&ran);
    }
    println!("targets (Lockstep / Kafka):");
    for t in &report.targets {
        let verdict = match t.met {
            Some(true) => "MET",
            Some(false) => "NOT MET",
            None if t.wanted == "-" => "",
            None => "not judged",
        };
        println!(
            "  {:<66} {:>6} (wanted {:<6}) {:<12} {}",
            t.name,
            fmt(t.ratio),
            t.wanted,
            verdict,
            t.detail
        );
    }
}
