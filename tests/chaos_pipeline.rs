//! Exactly-once under chaos, with real processes: `lockstep-pipeline chaos` for a few seeds.
//!
//! What it proves: a checkpointing pipeline (a coordinator process and worker processes on a
//! share group in transactional acknowledgement mode, `tools/lockstep-pipeline.rs`) delivers
//! every produced record to its sink exactly once, and leaves no transaction pending, while
//! workers, the coordinator (at chosen transaction phases) and the broker (likewise) are
//! SIGKILLed and restarted and connections are dropped, delayed and partitioned through a
//! fault-injecting proxy, and workers take fewer records than they polled and exit (the rest go
//! back by the connection drop, as in Kafka) and are restarted.
//!
//! The second test runs `--sink topic`: the share group → topic pipeline whose
//! acknowledgements ride the workers' producer transactions (TxnShareAcknowledge), checked by
//! reading the output topic read_committed.
//!
//! How: runs the binary (`CARGO_BIN_EXE_lockstep-pipeline`) against the broker binary of this
//! build with `--json`, and checks every seed's report. A failing seed prints the command that
//! replays it and keeps its run directory (logs, sink, staging). Bounded: the child is killed
//! after [`RUN_TIMEOUT`].

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Seeds of the default test run (the campaign command in README.md runs many more).
const SEEDS: &str = "1..3";
const RECORDS: usize = 1_500;
const FAULTS: u64 = 5;
const RUN_TIMEOUT: Duration = Duration::from_secs(420);

/// Runs `lockstep-pipeline` with `args` (plus the broker binary and a work dir), bounded by
/// [`RUN_TIMEOUT`]; returns the JSON report, the exit status and stderr.
fn run_pipeline(
    tag: &str,
    args: &[&str],
) -> (
    serde_json::Value,
    std::process::ExitStatus,
    String,
    std::path::PathBuf,
) {
    let work = std::env::temp_dir().join(format!("lockstep-{tag}-test-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep-pipeline"))
        .args(args)
        .arg("--broker-bin")
        .arg(env!("CARGO_BIN_EXE_lockstep"))
        .arg("--work-dir")
        .arg(&work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lockstep-pipeline");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let ho = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let he = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "lockstep-pipeline {args:?}: no exit after {RUN_TIMEOUT:?}; run dirs in {}",
                work.display()
            );
        }
        thread::sleep(Duration::from_millis(100));
    };
    let (stdout, stderr) = (ho.join().unwrap(), he.join().unwrap());
    eprintln!(
        "lockstep-pipeline {args:?} -> {status} in {:?}",
        t0.elapsed()
    );
    eprintln!("{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("JSON report ({e}):\n{stdout}\n{stderr}"));
    (report, status, stderr, work)
}

/// The assertions every seed's report must pass; returns the faults it injected.
fn check_seed(r: &serde_json::Value, replay: &str) -> u64 {
    let seed = r["seed"].as_u64().unwrap();
    let ctx = format!(
        "seed {seed}: {r}\nreplay: {replay} --seed {seed}\nrun dir: {}",
        r["run_dir"]
    );
    assert!(r["error"].is_null(), "{ctx}");
    assert_eq!(r["lost"], 0, "records lost; {ctx}");
    assert_eq!(r["duplicated"], 0, "records duplicated; {ctx}");
    assert_eq!(r["pending_left"], 0, "transactions left pending; {ctx}");
    assert_eq!(
        r["sink_txns_aborted"], 0,
        "sink holds aborted checkpoints; {ctx}"
    );
    assert_eq!(r["broker_crashes"], 0, "the broker exited by itself; {ctx}");
    assert!(r["ok"].as_bool().unwrap(), "{ctx}");
    assert!(
        r["checkpoints_committed"].as_u64().unwrap() > 0,
        "nothing committed; {ctx}"
    );
    r["faults"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum::<u64>()
}

#[test]
fn every_record_is_in_the_sink_exactly_once_under_chaos() {
    let records = RECORDS.to_string();
    let faults = FAULTS.to_string();
    let args = [
        "chaos",
        "--seeds",
        SEEDS,
        "--records",
        &records,
        "--workers",
        "3",
        "--faults",
        &faults,
        "--partial-takes",
        "1",
        "--window-secs",
        "10",
        "--drain-secs",
        "90",
        "--json",
    ];
    let (report, status, stderr, work) = run_pipeline("chaos", &args);
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3, "{report}");
    let replay = format!(
        "cargo run --release --bin lockstep-pipeline -- chaos --records {RECORDS} --workers 3 \
         --faults {FAULTS} --partial-takes 1 --window-secs 10"
    );
    let faults_injected: u64 = runs.iter().map(|r| check_seed(r, &replay)).sum();
    let partial_takes = report["partial_takes_done"]
        .as_u64()
        .expect("partial_takes_done");
    assert!(
        partial_takes > 0,
        "no worker took fewer records than it polled: {report}"
    );
    // The plans have FAULTS per seed; a phase-triggered kill may be skipped, not all of them.
    assert!(
        faults_injected >= FAULTS,
        "only {faults_injected} faults injected: {report}"
    );
    assert!(status.success(), "exit {status}\n{stderr}");
    let _ = std::fs::remove_dir_all(&work);
}

/// Seeds of the producer-transaction pipeline in the default run: plans whose faults catch a
/// worker that acknowledges outside its transaction (tried: that mutant loses 75 and 132
/// records on these two seeds; seeds 1 and 2 happen not to catch it).
const TOPIC_SEEDS: &str = "3..4";
const TOPIC_RECORDS: usize = 400;
const TOPIC_FAULTS: u64 = 4;

/// The share group → topic pipeline whose acknowledgements ride the workers' producer
/// transactions (`--sink topic`): under worker and broker SIGKILLs, worker stalls
/// past the transaction timeout, connection faults and partial takes (a worker exiting inside
/// its transaction), a read_committed read of the output topic has every input record exactly
/// once, and no worker transaction is left open.
#[test]
fn share_to_topic_pipeline_with_acks_in_producer_transactions_is_exactly_once_under_chaos() {
    let records = TOPIC_RECORDS.to_string();
    let faults = TOPIC_FAULTS.to_string();
    let args = [
        "chaos",
        "--sink",
        "topic",
        "--seeds",
        TOPIC_SEEDS,
        "--records",
        &records,
        "--workers",
        "2",
        "--partitions",
        "2",
        "--faults",
        &faults,
        "--partial-takes",
        "1",
        "--window-secs",
        "6",
        "--drain-secs",
        "60",
        "--json",
    ];
    let (report, status, stderr, work) = run_pipeline("ptxn-chaos", &args);
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{report}");
    let replay = format!(
        "cargo run --release --bin lockstep-pipeline -- chaos --sink topic --records \
         {TOPIC_RECORDS} --workers 2 --partitions 2 --faults {TOPIC_FAULTS} --partial-takes 1 \
         --window-secs 6"
    );
    let faults_injected: u64 = runs.iter().map(|r| check_seed(r, &replay)).sum();
    assert!(
        faults_injected >= TOPIC_FAULTS,
        "only {faults_injected} faults injected: {report}"
    );
    // Partial takes are planned but not asserted: a worker may have no records left to take
    // when its turn comes (the other one holds them).
    assert!(status.success(), "exit {status}\n{stderr}");
    let _ = std::fs::remove_dir_all(&work);
}
