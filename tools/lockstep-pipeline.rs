//! `lockstep-pipeline`: a checkpointing stream pipeline on a Lockstep share group with
//! transactional acknowledgements (the KIP's Flink case), and a chaos driver that proves it
//! exactly-once with real processes; and (`--sink topic`) a share group → topic pipeline whose
//! acknowledgements ride producer transactions, under the same driver.
//!
//! Four subcommands, one binary:
//! - `coordinator` (the job manager): runs the KIP's recovery routine, then every checkpoint
//!   interval begins the next transaction `{group}-{job}-{checkpoint}`, switches the workers to
//!   it, and finishes the previous one: wait for the workers to seal it, prepare, verify that
//!   the workers' staged output is exactly what the transaction locked, write that output to
//!   the sink atomically together with the transaction id, commit.
//! - `worker`: joins the share group, polls, "processes" each record (its id goes to the
//!   worker's staging file for the current transaction) and acknowledges it into that
//!   transaction.
//! - `chaos` (the driver): starts a broker, a fault-injecting TCP proxy, the coordinator and N
//!   workers as child processes; SIGKILLs workers, the coordinator and the broker at chosen
//!   transaction phases and cuts, delays or drops connections, all from a printed seed; then
//!   drains and checks that every produced record is in the sink exactly once and that no
//!   transaction is left pending.
//!
//! - `txn-worker` (`chaos --sink topic`): the share group → topic pipeline whose
//!   acknowledgements ride a producer transaction (KIP-1289's draft). No coordinator
//!   process: each worker is a transactional producer (`transactional.id`
//!   `{group}-pipeline-w{index}`, stable across restarts, so a restarted worker fences its
//!   zombie) that share-consumes the input topic, writes each record's id to the output topic
//!   (input partition p → output partition p) inside its transaction, acknowledges the
//!   consumed records into the same transaction (TxnShareAcknowledge after AddPartitionsToTxn
//!   of the input partitions) and commits every `--interval-ms` (or 100 records, or when a poll
//!   comes back empty). Any failed call aborts (or, fenced, re-initializes: InitProducerId ends
//!   whatever is open) and rejoins; an abort or a crash makes the records AVAILABLE again
//!   without a delivery attempt used. The checker reads the output topic read_committed:
//!   every input record exactly once, no worker transaction left ONGOING / PREPARE_*.
//!   Faults: SIGKILL of a worker or of the broker (at random moments: there are no coordinator
//!   phases), SIGSTOP of a worker (up to 2.5 s longer than the 5 s transaction timeout, so the
//!   coordinator aborts and fences it), connection drop / delay / partition of one worker
//!   (consumer and producer), partial takes (the worker exits inside its transaction). The
//!   coordinator faults do not apply (no coordinator process).
//!
//! Long campaigns (not in the default test run):
//! ```text
//! cargo build --release --bin lockstep --bin lockstep-pipeline
//! target/release/lockstep-pipeline chaos --seeds 1..200 --records 3000 --faults 8
//! target/release/lockstep-pipeline chaos --sink topic --seeds 1..200 --records 3000 --faults 8
//! ```
//!
//! ## The run directory (shared by coordinator and workers)
//! ```text
//! current-txn              the transaction workers acknowledge into, or "none" (atomic replace)
//! last-checkpoint          highest checkpoint id ever begun (written before the begin)
//! stop                     present: finish the current checkpoint and exit
//! member-w<i>              worker i's share-group member id (a restarted worker rejoins as
//!                          the same member and takes its partitions over at once)
//! partial-w<i>             written by the driver: worker i, at its next poll with records,
//!                          takes half of what it polled (rounded up) and exits (the number
//!                          in the file: how many such rounds remain, one per restart)
//! staging/<txn>/<worker>   one worker process's output for <txn>: "open", then one line
//!                          "r <partition> <offset> <id>" per record whose acknowledgement the
//!                          broker accepted (appended and fsync'd *after* the flush succeeded),
//!                          then "sealed" (the worker moved on) or "poisoned" (a flush failed)
//! sink/<checkpoint>.ckpt   {"checkpoint","transaction_id","records":[ids]}: temp file,
//!                          fsync, rename, directory fsync
//! ```
//!
//! ## Why it is exactly-once
//! Invariant: a record id is in the sink iff its acknowledgement was committed in the
//! transaction named next to it.
//! - Staged ⊆ locked: a worker stages a record for X only after the broker answered that its
//!   acknowledgement into X succeeded (the record is LOCKED by X; only X's commit or abort
//!   changes that).
//! - Locked ⊆ staged, checked: after prepare (which closes X to new acknowledgements and waits
//!   for those in flight, so X's locks are final) the coordinator lists X's locked records per
//!   partition and compares them with the staged records per partition. Equal counts with
//!   staged ⊆ locked mean equal sets. A worker that died between its flush and its staging
//!   write, a torn staging line, a flush whose answer was lost: all leave fewer staged than
//!   locked, and X is aborted (its records are redelivered).
//! - The sink file is written only after that check and before the commit, and only an X with
//!   a sink file is ever committed: by the coordinator right after the write, or by the
//!   recovery routine of the next coordinator (PREPARE and in the sink → commit; anything else
//!   → abort). An X without a sink file is never committed, so its records come back.
//! - Checkpoint ids never repeat: `last-checkpoint` is made durable before each begin.
//!
//! ## Faults (the `chaos` driver)
//! SIGKILL a worker; SIGKILL the coordinator or the broker a seeded delay after a phase marker
//! (begun, before-prepare, prepared, sink-written: the coordinator pauses there, so the kill
//! lands in the phase or in the prepare / sink write / commit after it); SIGSTOP the
//! coordinator at a phase for longer than the transaction timeout (ONGOING transactions time
//! out, PREPARE ones must not); SIGSTOP a worker; close, delay or stop forwarding (both ways)
//! the connections of the coordinator or of one worker, in a proxy that the broker advertises
//! (`--advertised`) and that tells connections apart by the client id of their first request;
//! make a worker take fewer records than it polled and exit without closing its consumer, one
//! to three times in a row (`partial-take`: what every framework failover does; the records it
//! did not take go back by the connection drop, one delivery attempt higher, and must neither
//! be lost to the delivery limit nor duplicated). Every seed has `--partial-takes` of those on
//! top of its `--faults` random ones.
//!
//! ## Determinism and limits
//! The driver's faults come from `SmallRng::seed_from_u64(seed)`; the processes' timing does
//! not, so a seed replays the same fault plan, not the same interleaving. Every loop is bounded
//! by a count or a deadline (constants below and `--*-secs` options).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Args as ClapArgs, Parser, Subcommand};
use lockstep::client::admin::{self, Admin, NewTopic};
use lockstep::client::connection::NodePool;
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::client::producer_txn::{ProducerTxnState, TransactionalProducer};
use lockstep::client::read_committed;
use lockstep::client::share_consumer::{generate_member_id, AckType, ShareConsumer, ShareRecord};
use lockstep::client::transactions::{recover, ShareTransactionCoordinator, TxnState};
use lockstep::client::ClientError;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

// ---------------------------------------------------------------------------------------------
// Limits (units in the names).

/// How often workers and the coordinator look at the run directory's control files.
const CONTROL_POLL: Duration = Duration::from_millis(20);
/// One worker poll.
const WORKER_POLL: Duration = Duration::from_millis(200);
/// Records a worker processes between two flushes (its records stay ACQUIRED meanwhile).
const WORKER_CHUNK_RECORDS: usize = 50;
/// How long a worker holding acquired records waits for a usable transaction before it gives
/// them back (closes its consumer); well under the group's record lock duration.
const WORKER_TXN_WAIT: Duration = Duration::from_secs(5);
/// Longest a worker or coordinator process lives (a bound on every loop in it).
const PROCESS_LIFETIME_MAX: Duration = Duration::from_secs(3_600);
/// How long the coordinator keeps retrying a commit after its sink write before it exits
/// (the next coordinator's recovery then commits).
const COMMIT_RETRY_WINDOW: Duration = Duration::from_secs(30);
/// How long the coordinator keeps retrying begin / recovery before it exits.
const CALL_RETRY_WINDOW: Duration = Duration::from_secs(30);
/// Pause between two retries of a coordinator call.
const CALL_RETRY_SLEEP: Duration = Duration::from_millis(200);
/// Broker start-up bound.
const BROKER_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the driver waits for an armed phase-triggered kill before dropping it.
const ARMED_FAULT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the driver waits for children to exit after `stop`.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Records per produce request during set-up.
const PRODUCE_BATCH_RECORDS: usize = 500;
/// Proxy: read slice of a pump (how fast it notices rules and shutdown).
const PROXY_READ_SLICE: Duration = Duration::from_millis(50);
/// Proxy: the first request header must arrive within this.
const PROXY_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Proxy: longest client id it reads from a request header.
const PROXY_CLIENT_ID_BYTES_MAX: usize = 1024;
/// Seeds one campaign may run.
const CAMPAIGN_SEEDS_MAX: u64 = 1_000_000;
/// Records one run may produce.
const RECORDS_MAX: usize = 10_000_000;
/// Workers one run may start.
const WORKERS_MAX: usize = 64;
/// Faults one run may inject.
const FAULTS_MAX: usize = 1_000;
/// Consecutive partial takes (each followed by an exit and a restart) one fault asks for.
const PARTIAL_TAKE_ROUNDS_MAX: u32 = 3;
/// Exit code of a worker that exits after a partial take (the driver restarts it).
const PARTIAL_TAKE_EXIT_CODE: u8 = 3;
/// `--sink topic`: how long one call of a worker's transactional producer keeps retrying
/// (covers a broker restart).
const TXN_WORKER_CALL_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Command line.

#[derive(Parser)]
#[command(
    name = "lockstep-pipeline",
    version,
    about = "A checkpointing pipeline on transactional share acknowledgements, and its chaos test"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The job manager: recovery, then checkpoints (begin, prepare, sink, commit).
    Coordinator(CoordinatorArgs),
    /// A task: poll, process (stage record ids), acknowledge into the current transaction.
    Worker(WorkerArgs),
    /// `--sink topic`'s task: poll, write each record to the output topic inside this
    /// worker's producer transaction, acknowledge it into the same transaction, commit.
    TxnWorker(TxnWorkerArgs),
    /// Run the pipeline under injected faults and check exactly-once.
    Chaos(ChaosArgs),
}

/// Where the pipeline's output goes, and so how its acknowledgements are made durable.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Sink {
    /// The checkpointing job: share transactions (keys 1000-1005) and sink files.
    #[default]
    Files,
    /// Each worker's producer transaction writes the output topic and carries the
    /// acknowledgements (TxnShareAcknowledge); the checker reads the topic read_committed.
    Topic,
}

#[derive(ClapArgs, Clone)]
struct CoordinatorArgs {
    #[arg(long)]
    bootstrap: String,
    #[arg(long)]
    group: String,
    /// The `transactionalIdPrefix` of `{group}-{job}-{checkpoint}`.
    #[arg(long, default_value = "job")]
    job: String,
    #[arg(long)]
    run_dir: PathBuf,
    #[arg(long, default_value_t = 500)]
    interval_ms: u64,
    /// How long to wait for workers to seal a transaction before preparing it anyway.
    #[arg(long, default_value_t = 2_000)]
    seal_timeout_ms: u64,
    /// ONGOING timeout of each transaction.
    #[arg(long, default_value_t = 60_000)]
    txn_timeout_ms: i64,
    /// Sleep after printing each phase marker (gives a driver time to act on it).
    #[arg(long, default_value_t = 0)]
    phase_pause_ms: u64,
}

#[derive(ClapArgs, Clone)]
struct WorkerArgs {
    #[arg(long)]
    bootstrap: String,
    #[arg(long)]
    group: String,
    #[arg(long)]
    topic: String,
    #[arg(long)]
    run_dir: PathBuf,
    #[arg(long)]
    index: usize,
    /// Processing time per record.
    #[arg(long, default_value_t = 0)]
    record_us: u64,
}

#[derive(ClapArgs, Clone)]
struct TxnWorkerArgs {
    #[arg(long)]
    bootstrap: String,
    #[arg(long)]
    group: String,
    #[arg(long)]
    topic: String,
    /// The output topic (as many partitions as the input: record of input partition p goes
    /// to output partition p).
    #[arg(long)]
    output: String,
    #[arg(long)]
    run_dir: PathBuf,
    #[arg(long)]
    index: usize,
    /// Processing time per record.
    #[arg(long, default_value_t = 0)]
    record_us: u64,
    /// Commit once the transaction holds this many records...
    #[arg(long, default_value_t = 100)]
    commit_records: usize,
    /// ...or is this old, or the poll came back empty.
    #[arg(long, default_value_t = 400)]
    commit_interval_ms: u64,
    /// The producer's `transaction.timeout.ms`.
    #[arg(long, default_value_t = 60_000)]
    txn_timeout_ms: i32,
}

#[derive(ClapArgs, Clone)]
struct ChaosArgs {
    /// `files`: the checkpointing job (coordinator + workers, share transactions, sink files);
    /// `topic`: workers whose producer transactions write the output topic and carry the
    /// acknowledgements (no coordinator process).
    #[arg(long, value_enum, default_value_t = Sink::Files)]
    sink: Sink,
    /// One seed (default 1 if neither --seed nor --seeds is given).
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// A campaign: seeds A..B, both included.
    #[arg(long, value_name = "A..B")]
    seeds: Option<String>,
    #[arg(long, default_value_t = 3_000)]
    records: usize,
    #[arg(long, default_value_t = 3)]
    workers: usize,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Faults injected per seed.
    #[arg(long, default_value_t = 6)]
    faults: usize,
    /// Partial-take faults per seed on top of --faults (a worker takes fewer records than it
    /// polled and exits; restarted, it may do it again, up to 3 times in a row).
    #[arg(long, default_value_t = 1)]
    partial_takes: usize,
    /// Faults are injected during this window; processing is paced to span it.
    #[arg(long, default_value_t = 20)]
    window_secs: u64,
    /// Bound on the drain after the window (all records in the sink).
    #[arg(long, default_value_t = 120)]
    drain_secs: u64,
    #[arg(long, default_value_t = 400)]
    interval_ms: u64,
    /// Broker shards.
    #[arg(long, default_value_t = 2)]
    shards: usize,
    /// The broker binary (default: `lockstep` next to this binary).
    #[arg(long)]
    broker_bin: Option<PathBuf>,
    /// Where run directories go (default: the system temp dir).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep run directories of passing seeds too (failing ones are always kept).
    #[arg(long)]
    keep: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Coordinator(a) => match run_coordinator(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("coordinator: {e}");
                ExitCode::from(1)
            }
        },
        Cmd::Worker(a) => match run_worker(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("worker {}: {e}", a.index);
                ExitCode::from(1)
            }
        },
        Cmd::TxnWorker(a) => match run_txn_worker(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("txn-worker {}: {e}", a.index);
                ExitCode::from(1)
            }
        },
        Cmd::Chaos(a) => run_chaos(&a),
    }
}

// ---------------------------------------------------------------------------------------------
// Files: atomic replace, durable append.

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `dir/name` with `bytes` atomically and durably: temp file, fsync, rename, dir fsync.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    fsync_dir(dir)
}

/// The run directory's control files. See the module docs.
#[derive(Clone)]
struct RunDir {
    root: PathBuf,
}

const NO_TXN: &str = "none";

impl RunDir {
    fn new(root: &Path) -> std::io::Result<RunDir> {
        fs::create_dir_all(root.join("staging"))?;
        fs::create_dir_all(root.join("sink"))?;
        Ok(RunDir {
            root: root.to_path_buf(),
        })
    }

    fn current_txn(&self) -> Option<String> {
        let s = fs::read_to_string(self.root.join("current-txn")).ok()?;
        let s = s.trim();
        (!s.is_empty() && s != NO_TXN).then(|| s.to_string())
    }

    fn publish_txn(&self, txn: Option<&str>) -> std::io::Result<()> {
        let line = format!("{}\n", txn.unwrap_or(NO_TXN));
        write_atomic(&self.root, "current-txn", line.as_bytes())
    }

    fn last_checkpoint(&self) -> u64 {
        fs::read_to_string(self.root.join("last-checkpoint"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    fn stop_requested(&self) -> bool {
        self.root.join("stop").exists()
    }

    /// The driver asks worker `index` for `rounds` partial takes in a row (a pending request
    /// is replaced).
    fn request_partial_takes(&self, index: usize, rounds: u32) -> std::io::Result<()> {
        let rounds = rounds.clamp(1, PARTIAL_TAKE_ROUNDS_MAX);
        write_atomic(
            &self.root,
            &format!("partial-w{index}"),
            format!("{rounds}\n").as_bytes(),
        )
    }

    /// Worker `index` takes one requested partial take, if any: true when it must do one now.
    /// The count left is written durably before the worker acts on it.
    fn take_partial_take(&self, index: usize) -> std::io::Result<bool> {
        let name = format!("partial-w{index}");
        let path = self.root.join(&name);
        let left: u32 = match fs::read_to_string(&path) {
            Ok(s) => s.trim().parse().unwrap_or(0),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let left = left.min(PARTIAL_TAKE_ROUNDS_MAX);
        if left <= 1 {
            fs::remove_file(&path)?;
            fsync_dir(&self.root)?;
        } else {
            write_atomic(&self.root, &name, format!("{}\n", left - 1).as_bytes())?;
        }
        Ok(left >= 1)
    }

    fn staging_dir(&self, txn: &str) -> PathBuf {
        self.root.join("staging").join(txn)
    }

    fn sink_dir(&self) -> PathBuf {
        self.root.join("sink")
    }

    /// Every sink file, parsed (skips temp files).
    fn sink(&self) -> std::io::Result<Vec<SinkCheckpoint>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(self.sink_dir())? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("ckpt") {
                continue;
            }
            let bytes = fs::read(&path)?;
            let c: SinkCheckpoint = serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })?;
            out.push(c);
        }
        out.sort_by_key(|c| c.checkpoint);
        Ok(out)
    }
}

/// One checkpoint's output in the sink.
#[derive(Debug, Serialize, serde::Deserialize)]
struct SinkCheckpoint {
    checkpoint: u64,
    transaction_id: String,
    records: Vec<u64>,
}

/// What the workers staged for one transaction.
#[derive(Debug, Default)]
struct Staged {
    /// Worker files without a final line yet.
    open_files: usize,
    poisoned: bool,
    /// (partition, offset) → record id, from complete lines only.
    records: BTreeMap<(i32, i64), u64>,
}

fn read_staged(dir: &Path) -> Staged {
    let mut staged = Staged::default();
    let Ok(entries) = fs::read_dir(dir) else {
        return staged;
    };
    for entry in entries.flatten() {
        let Ok(text) = fs::read_to_string(entry.path()) else {
            continue;
        };
        let mut terminal = false;
        // Only newline-terminated lines count: a torn last line is ignored.
        let complete = match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        };
        for line in complete.lines() {
            let mut parts = line.split_whitespace();
            match parts.next() {
                Some("r") => {
                    let p = parts.next().and_then(|v| v.parse().ok());
                    let o = parts.next().and_then(|v| v.parse().ok());
                    let id = parts.next().and_then(|v| v.parse().ok());
                    if let (Some(p), Some(o), Some(id)) = (p, o, id) {
                        staged.records.insert((p, o), id);
                    }
                }
                Some("sealed") => terminal = true,
                Some("poisoned") => {
                    terminal = true;
                    staged.poisoned = true;
                }
                _ => {}
            }
        }
        if !terminal {
            staged.open_files += 1;
        }
    }
    staged
}

fn marker(phase: &str, checkpoint: u64, txn: &str, pause: Duration) {
    println!("phase={phase} checkpoint={checkpoint} txn={txn}");
    let _ = std::io::stdout().flush();
    if !pause.is_zero() {
        thread::sleep(pause);
    }
}

// ---------------------------------------------------------------------------------------------
// Coordinator.

/// [`retry`] for calls whose errors are already text.
fn retry_str<T>(window: Duration, mut f: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let deadline = Instant::now() + window;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => thread::sleep(CALL_RETRY_SLEEP),
        }
    }
}

/// Retries `f` until it succeeds or `window` passes; returns the last error.
fn retry<T>(
    window: Duration,
    what: &str,
    mut f: impl FnMut() -> Result<T, ClientError>,
) -> Result<T, String> {
    let deadline = Instant::now() + window;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(format!("{what}: {e}")),
            Err(_) => thread::sleep(CALL_RETRY_SLEEP),
        }
    }
}

fn run_coordinator(a: &CoordinatorArgs) -> Result<(), String> {
    let run = RunDir::new(&a.run_dir).map_err(|e| format!("run dir: {e}"))?;
    let pause = Duration::from_millis(a.phase_pause_ms);
    let io = |e: std::io::Error| format!("run dir: {e}");
    // Workers stop acknowledging until a transaction of this coordinator is begun.
    run.publish_txn(None).map_err(io)?;
    let mut coord = ShareTransactionCoordinator::new(&a.bootstrap, &a.group);

    // The KIP's recovery routine: PREPARE and in the sink → commit; anything else → abort.
    let in_sink: BTreeSet<String> = run
        .sink()
        .map_err(io)?
        .into_iter()
        .map(|c| c.transaction_id)
        .collect();
    let deadline = Instant::now() + CALL_RETRY_WINDOW;
    loop {
        let report = retry(CALL_RETRY_WINDOW, "recovery", || {
            recover(&mut coord, |id| in_sink.contains(id))
        })?;
        println!(
            "phase=recovered committed={:?} aborted={:?} failed={}",
            report.committed,
            report.aborted,
            report.failed.len()
        );
        if report.failed.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!("recovery left {:?}", report.failed));
        }
        thread::sleep(CALL_RETRY_SLEEP);
    }

    let begin = |coord: &mut ShareTransactionCoordinator, n: u64| -> Result<String, String> {
        let txn = format!("{}-{}-{n}", a.group, a.job);
        write_atomic(&run.root, "last-checkpoint", format!("{n}\n").as_bytes()).map_err(io)?;
        let state = retry(CALL_RETRY_WINDOW, "begin", || {
            coord.begin(&txn, a.txn_timeout_ms)
        })?;
        if state != TxnState::Ongoing {
            return Err(format!("begin {txn}: state {state}"));
        }
        run.publish_txn(Some(&txn)).map_err(io)?;
        marker("begun", n, &txn, Duration::ZERO);
        Ok(txn)
    };

    let born = Instant::now();
    let mut n = run.last_checkpoint() + 1;
    let mut current = begin(&mut coord, n)?;
    loop {
        let slept = Instant::now();
        while slept.elapsed() < Duration::from_millis(a.interval_ms) && !run.stop_requested() {
            thread::sleep(CONTROL_POLL);
        }
        let stopping = run.stop_requested() || born.elapsed() > PROCESS_LIFETIME_MAX;
        let next = if stopping {
            run.publish_txn(None).map_err(io)?;
            None
        } else {
            Some(begin(&mut coord, n + 1)?)
        };
        finish_checkpoint(&mut coord, &run, a, n, &current, pause)?;
        match next {
            Some(t) => {
                current = t;
                n += 1;
            }
            None => return Ok(()),
        }
    }
}

/// Seal wait, prepare, verify, sink, commit — or abort. See the module docs.
fn finish_checkpoint(
    coord: &mut ShareTransactionCoordinator,
    run: &RunDir,
    a: &CoordinatorArgs,
    n: u64,
    txn: &str,
    pause: Duration,
) -> Result<(), String> {
    let dir = run.staging_dir(txn);
    let sealed_by = Instant::now() + Duration::from_millis(a.seal_timeout_ms);
    let mut staged = read_staged(&dir);
    while staged.open_files > 0 && !staged.poisoned && Instant::now() < sealed_by {
        thread::sleep(CONTROL_POLL);
        staged = read_staged(&dir);
    }
    let abort = |coord: &mut ShareTransactionCoordinator, why: &str| -> Result<(), String> {
        let state = retry(CALL_RETRY_WINDOW, "abort", || coord.abort(txn))?;
        if state == TxnState::Committed {
            return Err(format!("abort of {txn} ({why}) answered COMMITTED"));
        }
        marker("aborted", n, txn, Duration::ZERO);
        println!("abort-reason checkpoint={n} {why}");
        Ok(())
    };
    if staged.poisoned {
        return abort(coord, "a worker's flush failed");
    }
    marker("before-prepare", n, txn, pause);
    match coord.prepare(txn) {
        Ok(TxnState::Prepare) => {}
        Ok(s) => return abort(coord, &format!("prepare answered {s}")),
        Err(e) => return abort(coord, &format!("prepare: {e}")),
    }
    marker("prepared", n, txn, pause);
    let listed = match coord.list(&[TxnState::Prepare]) {
        Ok(l) => l,
        Err(e) => return abort(coord, &format!("list: {e}")),
    };
    let Some(t) = listed.into_iter().find(|t| t.transaction_id == txn) else {
        return abort(coord, "not listed as PREPARE");
    };
    let mut locked: BTreeMap<i32, i64> = BTreeMap::new();
    for p in &t.partitions {
        if p.locked_records > 0 {
            *locked.entry(p.partition).or_default() += p.locked_records;
        }
    }
    let staged = read_staged(&dir);
    if staged.poisoned {
        return abort(coord, "a worker's flush failed");
    }
    let mut by_partition: BTreeMap<i32, i64> = BTreeMap::new();
    for &(p, _) in staged.records.keys() {
        *by_partition.entry(p).or_default() += 1;
    }
    if by_partition != locked {
        return abort(
            coord,
            &format!("staged {by_partition:?} != locked {locked:?}"),
        );
    }
    let mut records: Vec<u64> = staged.records.values().copied().collect();
    records.sort_unstable();
    let sink = SinkCheckpoint {
        checkpoint: n,
        transaction_id: txn.to_string(),
        records,
    };
    let bytes = serde_json::to_vec(&sink).map_err(|e| e.to_string())?;
    write_atomic(&run.sink_dir(), &format!("{n:012}.ckpt"), &bytes)
        .map_err(|e| format!("sink: {e}"))?;
    marker("sink-written", n, txn, pause);
    // From here on only commit: the checkpoint is in the sink.
    let state = retry(COMMIT_RETRY_WINDOW, "commit", || coord.commit(txn))?;
    if state != TxnState::Committed {
        return Err(format!("commit of {txn} answered {state}"));
    }
    marker("committed", n, txn, Duration::ZERO);
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Worker.

/// The record id a producer of `chaos` put in the value (`rec-<id>`).
fn record_id(r: &ShareRecord) -> Option<u64> {
    let v = r.value.as_ref()?;
    std::str::from_utf8(v)
        .ok()?
        .strip_prefix("rec-")?
        .parse()
        .ok()
}

/// A worker's staging file for one transaction.
struct StagingFile {
    txn: String,
    file: File,
    closed: bool,
}

impl StagingFile {
    fn open(run: &RunDir, txn: &str, name: &str) -> std::io::Result<StagingFile> {
        let dir = run.staging_dir(txn);
        fs::create_dir_all(&dir)?;
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))?;
        file.write_all(b"open\n")?;
        file.sync_all()?;
        fsync_dir(&dir)?;
        Ok(StagingFile {
            txn: txn.to_string(),
            file,
            closed: false,
        })
    }

    fn append(&mut self, text: &str) -> std::io::Result<()> {
        self.file.write_all(text.as_bytes())?;
        self.file.sync_data()
    }

    fn finish(&mut self, line: &str) -> std::io::Result<()> {
        if !self.closed {
            self.closed = true;
            self.append(line)?;
        }
        Ok(())
    }
}

/// A consumer with this worker index's member id (`member-w<index>` in the run dir, made on
/// the first start): a restarted worker rejoins as the same member and takes its partitions
/// over at once, as a restarted task with a stable identity would.
fn new_consumer(a: &WorkerArgs) -> Result<ShareConsumer, String> {
    consumer_of(&a.bootstrap, &a.group, &a.topic, &a.run_dir, a.index)
}

fn consumer_of(
    bootstrap: &str,
    group: &str,
    topic: &str,
    run_dir: &Path,
    index: usize,
) -> Result<ShareConsumer, String> {
    let name = format!("member-w{index}");
    let path = run_dir.join(&name);
    let member_id = match fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => id.trim().to_string(),
        _ => {
            let id = generate_member_id();
            write_atomic(run_dir, &name, id.as_bytes()).map_err(|e| e.to_string())?;
            id
        }
    };
    let mut c =
        ShareConsumer::with_member_id(bootstrap, group, &member_id).map_err(|e| e.to_string())?;
    c.subscribe(&[topic]).map_err(|e| e.to_string())?;
    println!("member worker={index} id={}", c.member_id());
    let _ = std::io::stdout().flush();
    Ok(c)
}

fn run_worker(a: &WorkerArgs) -> Result<(), String> {
    let run = RunDir::new(&a.run_dir).map_err(|e| format!("run dir: {e}"))?;
    let name = format!("w{}-{}", a.index, std::process::id());
    let io = |e: std::io::Error| format!("staging: {e}");
    let mut consumer = new_consumer(a)?;
    let mut staging: Option<StagingFile> = None;
    let born = Instant::now();
    // Seals the staging file of a transaction the coordinator moved away from.
    let follow = |staging: &mut Option<StagingFile>, now: &Option<String>| -> Result<(), String> {
        if let Some(s) = staging {
            if now.as_deref() != Some(s.txn.as_str()) {
                s.finish("sealed\n").map_err(io)?;
                *staging = None;
            }
        }
        Ok(())
    };
    while born.elapsed() < PROCESS_LIFETIME_MAX {
        let txn = run.current_txn();
        follow(&mut staging, &txn)?;
        if run.stop_requested() {
            let _ = consumer.close();
            return Ok(());
        }
        let poisoned = staging.as_ref().is_some_and(|s| s.closed);
        if txn.is_none() || poisoned {
            thread::sleep(CONTROL_POLL);
            continue;
        }
        let mut records = match consumer.poll(WORKER_POLL) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("worker {}: poll: {e}", a.index);
                let _ = consumer.close();
                thread::sleep(CONTROL_POLL);
                consumer = new_consumer(a)?;
                continue;
            }
        };
        // The partial-take fault: process only the first half of this poll (rounded up: a
        // record handed out alone, as Kafka hands out one on its last delivery attempt, is
        // taken), then exit without closing the consumer; the untaken records go back when the
        // connection drops, one delivery attempt higher.
        let partial_take = !records.is_empty()
            && run
                .take_partial_take(a.index)
                .map_err(|e| format!("partial-take file: {e}"))?;
        let polled = records.len();
        if partial_take {
            records.truncate(polled.div_ceil(2));
        }
        let mut rejoin = false;
        for chunk in records.chunks(WORKER_CHUNK_RECORDS) {
            // Processing time.
            thread::sleep(Duration::from_micros(a.record_us * chunk.len() as u64));
            // The transaction to acknowledge into: the current one, waiting a little if the
            // coordinator is between transactions.
            let waited = Instant::now();
            let txn = loop {
                let t = run.current_txn();
                follow(&mut staging, &t)?;
                let poisoned = staging.as_ref().is_some_and(|s| s.closed);
                match t {
                    Some(t) if !poisoned => break Some(t),
                    _ if waited.elapsed() >= WORKER_TXN_WAIT || run.stop_requested() => break None,
                    _ => thread::sleep(CONTROL_POLL),
                }
            };
            let Some(txn) = txn else {
                rejoin = true;
                break;
            };
            if staging.is_none() {
                staging = Some(StagingFile::open(&run, &txn, &name).map_err(io)?);
            }
            let file = staging.as_mut().expect("opened above");
            let mut lines = String::new();
            let mut refused = None;
            for r in chunk {
                let Some(id) = record_id(r) else {
                    return Err(format!("record without an id at offset {}", r.offset));
                };
                if let Err(e) = consumer.acknowledge_transactional(r, AckType::Accept, &txn) {
                    refused = Some(e);
                    break;
                }
                lines.push_str(&format!("r {} {} {id}\n", r.partition, r.offset));
            }
            let flushed = match refused {
                Some(e) => Err(e),
                None => consumer.flush_transactional(),
            };
            match flushed {
                // The broker locked them in `txn`: now they are this transaction's output.
                Ok(()) => file.append(&lines).map_err(io)?,
                Err(e) => {
                    eprintln!("worker {}: flush into {txn}: {e}", a.index);
                    file.finish("poisoned\n").map_err(io)?;
                    rejoin = true;
                    break;
                }
            }
        }
        if partial_take {
            println!(
                "partial-take worker={} took {} of {polled} polled; exiting",
                a.index,
                records.len()
            );
            let _ = std::io::stdout().flush();
            // No close, no leave heartbeat: the process ends and the kernel drops the
            // connections, as a framework's failover would.
            std::process::exit(i32::from(PARTIAL_TAKE_EXIT_CODE));
        }
        if rejoin {
            // Gives back what this member still holds (and drops unflushed acknowledgements).
            let _ = consumer.close();
            consumer = new_consumer(a)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// `--sink topic`: the worker whose producer transactions carry its acknowledgements.

/// The transactional id of worker `index`: stable across restarts, so that a restarted worker's
/// InitProducerId fences its zombie and ends (aborts, or completes a decided commit of) the
/// transaction it left open.
fn worker_txn_id(group: &str, index: usize) -> String {
    format!("{group}-pipeline-w{index}")
}

/// One `txn-worker` process. Why it is exactly-once: a record's output and its acknowledgement
/// are in one producer transaction, which the coordinator commits or aborts as a whole (the
/// marker reaches the output partition and the input partition, which `send_share_
/// acknowledgements` added to the transaction); the broker locks an acknowledgement only for
/// the producer's current epoch and ONGOING transaction, so a zombie (an older incarnation, or
/// a worker whose transaction timed out) can lock nothing; an aborted transaction hides its
/// output and gives its records back (AVAILABLE, same delivery count) for another try.
struct TxnWorker<'a> {
    a: &'a TxnWorkerArgs,
    run: RunDir,
    consumer: ShareConsumer,
    producer: TransactionalProducer,
    /// Records written and acknowledged in the open transaction.
    in_txn: usize,
    txn_began: Instant,
}

impl<'a> TxnWorker<'a> {
    fn start(a: &'a TxnWorkerArgs) -> Result<TxnWorker<'a>, String> {
        let run = RunDir::new(&a.run_dir).map_err(|e| format!("run dir: {e}"))?;
        let consumer = consumer_of(&a.bootstrap, &a.group, &a.topic, &a.run_dir, a.index)?;
        // The proxy tells this worker's connections apart by the member id in the client id.
        let producer = TransactionalProducer::new(
            &a.bootstrap,
            &format!("lockstep-ptxn-{}", consumer.member_id()),
            &worker_txn_id(&a.group, a.index),
            a.txn_timeout_ms,
        )
        .with_call_timeout(TXN_WORKER_CALL_TIMEOUT);
        let mut w = TxnWorker {
            a,
            run,
            consumer,
            producer,
            in_txn: 0,
            txn_began: Instant::now(),
        };
        w.init()?;
        Ok(w)
    }

    fn init(&mut self) -> Result<(), String> {
        let producer = &mut self.producer;
        retry(CALL_RETRY_WINDOW, "init_transactions", || {
            producer.init_transactions()
        })?;
        println!(
            "txn-init worker={} producer={} epoch={}",
            self.a.index,
            self.producer.producer_id(),
            self.producer.producer_epoch()
        );
        let _ = std::io::stdout().flush();
        Ok(())
    }

    /// Begins a transaction if none is open (local: the coordinator hears of it with the first
    /// partition).
    fn ensure_txn(&mut self) -> Result<(), ClientError> {
        if self.producer.state() == ProducerTxnState::Ready {
            self.producer.begin()?;
            self.txn_began = Instant::now();
        }
        Ok(())
    }

    /// Writes `chunk`'s record ids to the output and acknowledges the records, both in the open
    /// transaction (begun here if none is).
    fn process(&mut self, chunk: &[ShareRecord]) -> Result<(), ClientError> {
        self.ensure_txn()?;
        let mut by_partition: BTreeMap<i32, Vec<ProducerRecord>> = BTreeMap::new();
        for r in chunk {
            let id = record_id(r).ok_or_else(|| {
                ClientError::InvalidArgument(format!("record without an id at offset {}", r.offset))
            })?;
            by_partition
                .entry(r.partition)
                .or_default()
                .push(ProducerRecord {
                    key: Some(format!("w{}", self.a.index).into()),
                    value: Some(format!("rec-{id}").into()),
                    timestamp: -1,
                });
        }
        for (p, records) in &by_partition {
            self.producer.send(&self.a.output, *p, records)?;
        }
        let acks: Vec<(&ShareRecord, AckType)> =
            chunk.iter().map(|r| (r, AckType::Accept)).collect();
        self.producer
            .send_share_acknowledgements(&mut self.consumer, &acks)?;
        self.in_txn += chunk.len();
        Ok(())
    }

    fn commit(&mut self) -> Result<(), String> {
        if self.producer.state() != ProducerTxnState::InTransaction {
            return Ok(());
        }
        match self.producer.commit() {
            Ok(()) => {
                println!(
                    "txn committed worker={} records={}",
                    self.a.index, self.in_txn
                );
                let _ = std::io::stdout().flush();
                self.in_txn = 0;
                Ok(())
            }
            Err(e) => {
                eprintln!("txn-worker {}: commit: {e}", self.a.index);
                self.recover()
            }
        }
    }

    /// After a failed call: ends the open transaction one way or the other and gives back what
    /// the member still holds. An abort that fails (fenced: the coordinator already aborted
    /// it, or a newer incarnation did; or its outcome is unknown) is replaced by a new
    /// incarnation: InitProducerId completes a decided commit or aborts what is open.
    fn recover(&mut self) -> Result<(), String> {
        let aborted = matches!(
            self.producer.state(),
            ProducerTxnState::InTransaction | ProducerTxnState::Abortable
        ) && self.producer.abort().is_ok();
        if !aborted || self.producer.state() != ProducerTxnState::Ready {
            self.init()?;
        }
        println!(
            "txn aborted worker={} records={}",
            self.a.index, self.in_txn
        );
        let _ = std::io::stdout().flush();
        self.in_txn = 0;
        let _ = self.consumer.close();
        self.consumer = consumer_of(
            &self.a.bootstrap,
            &self.a.group,
            &self.a.topic,
            &self.a.run_dir,
            self.a.index,
        )?;
        Ok(())
    }
}

fn run_txn_worker(a: &TxnWorkerArgs) -> Result<(), String> {
    let mut w = TxnWorker::start(a)?;
    let interval = Duration::from_millis(a.commit_interval_ms);
    let born = Instant::now();
    while born.elapsed() < PROCESS_LIFETIME_MAX {
        if w.run.stop_requested() {
            w.commit()?;
            let _ = w.consumer.close();
            return Ok(());
        }
        let mut records = match w.consumer.poll(WORKER_POLL) {
            Ok(r) => r,
            Err(e) => {
                // The open transaction stays valid (its locks are the broker's); only the
                // share session is rebuilt.
                eprintln!("txn-worker {}: poll: {e}", a.index);
                let _ = w.consumer.close();
                thread::sleep(CONTROL_POLL);
                w.consumer = consumer_of(&a.bootstrap, &a.group, &a.topic, &a.run_dir, a.index)?;
                continue;
            }
        };
        // The partial-take fault: process the first half of this poll (rounded up) into the
        // open transaction, then exit with neither a commit nor a close. The restarted worker's
        // InitProducerId aborts the transaction (its records come back at the same delivery
        // count); the untaken half comes back by the connection drop, one attempt higher.
        let partial_take = !records.is_empty()
            && w.run
                .take_partial_take(a.index)
                .map_err(|e| format!("partial-take file: {e}"))?;
        let polled = records.len();
        if partial_take {
            records.truncate(polled.div_ceil(2));
        }
        let mut failed = false;
        for chunk in records.chunks(WORKER_CHUNK_RECORDS) {
            // Processing happens inside the transaction (its timeout runs meanwhile).
            let began = w.ensure_txn();
            thread::sleep(Duration::from_micros(a.record_us * chunk.len() as u64));
            if let Err(e) = began.and_then(|()| w.process(chunk)) {
                eprintln!("txn-worker {}: {e}", a.index);
                w.recover()?;
                failed = true;
                break;
            }
            if !partial_take && (w.in_txn >= a.commit_records || w.txn_began.elapsed() >= interval)
            {
                w.commit()?;
            }
        }
        if partial_take {
            println!(
                "partial-take worker={} took {} of {polled} polled; exiting in a transaction",
                a.index,
                records.len()
            );
            let _ = std::io::stdout().flush();
            std::process::exit(i32::from(PARTIAL_TAKE_EXIT_CODE));
        }
        if !failed && w.in_txn > 0 && (records.is_empty() || w.txn_began.elapsed() >= interval) {
            w.commit()?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Fault-injecting TCP proxy.

/// Whose connection: told apart by the client id of the first request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Peer {
    Coordinator,
    Member(String),
    Other,
}

fn classify(client_id: &str) -> Peer {
    if client_id == "lockstep-txn-coordinator" {
        Peer::Coordinator
    } else if let Some(m) = client_id
        .strip_prefix("lockstep-share-")
        .or_else(|| client_id.strip_prefix("lockstep-ptxn-"))
    {
        // A worker's share consumer and (`--sink topic`) its transactional producer.
        Peer::Member(m.to_string())
    } else {
        Peer::Other
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Rule {
    delay: Duration,
    cut_until: Option<Instant>,
}

#[derive(Default)]
struct ProxyState {
    rules: HashMap<Peer, Rule>,
    conns: Vec<(u64, Peer, TcpStream, TcpStream)>,
}

struct Proxy {
    addr: SocketAddr,
    state: Arc<Mutex<ProxyState>>,
    stop: Arc<AtomicBool>,
    accept_thread: Option<thread::JoinHandle<()>>,
}

impl Proxy {
    fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let accept_thread = thread::spawn(move || {
            let next_id = AtomicU64::new(1);
            while !sp.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (st, sp) = (st.clone(), sp.clone());
                        let id = next_id.fetch_add(1, Ordering::SeqCst);
                        thread::spawn(move || proxy_conn(id, client, upstream, st, sp));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Proxy {
            addr,
            state,
            stop,
            accept_thread: Some(accept_thread),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ProxyState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes every open connection of `peer`.
    fn drop_conns(&self, peer: &Peer) -> usize {
        let mut st = self.lock();
        let mut n = 0;
        st.conns.retain(|(_, p, a, b)| {
            if p == peer {
                let _ = a.shutdown(Shutdown::Both);
                let _ = b.shutdown(Shutdown::Both);
                n += 1;
                false
            } else {
                true
            }
        });
        n
    }

    fn set_rule(&self, peer: Peer, rule: Rule) {
        self.lock().rules.insert(peer, rule);
    }

    fn clear_rules(&self) {
        self.lock().rules.clear();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
        let mut st = self.lock();
        for (_, _, a, b) in st.conns.drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }
}

/// Reads the first request header's client id (forwarding nothing yet); returns the bytes read.
fn read_client_id(client: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    client.set_read_timeout(Some(PROXY_HEADER_TIMEOUT))?;
    // size INT32, api_key INT16, api_version INT16, correlation_id INT32, client_id STRING.
    let mut head = vec![0u8; 14];
    client.read_exact(&mut head)?;
    let len = i16::from_be_bytes([head[12], head[13]]);
    let mut id = String::new();
    if len > 0 {
        let len = (len as usize).min(PROXY_CLIENT_ID_BYTES_MAX);
        let mut bytes = vec![0u8; len];
        client.read_exact(&mut bytes)?;
        id = String::from_utf8_lossy(&bytes).into_owned();
        head.extend_from_slice(&bytes);
    }
    Ok((id, head))
}

fn proxy_conn(
    id: u64,
    mut client: TcpStream,
    upstream: SocketAddr,
    state: Arc<Mutex<ProxyState>>,
    stop: Arc<AtomicBool>,
) {
    let Ok((client_id, first)) = read_client_id(&mut client) else {
        return;
    };
    let peer = classify(&client_id);
    let Ok(mut server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else {
        return; // the broker is down: the client sees a closed connection
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    if server.write_all(&first).is_err() {
        return;
    }
    let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    ) else {
        return;
    };
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .conns
        .push((id, peer.clone(), c3, s3));
    let (st2, sp2, peer2) = (state.clone(), stop.clone(), peer.clone());
    let up = thread::spawn(move || pump(client, server, &peer2, &st2, &sp2));
    pump(s2, c2, &peer, &state, &stop);
    let _ = up.join();
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .conns
        .retain(|(i, ..)| *i != id);
}

/// Copies `from` → `to`, applying `peer`'s rule to every chunk, until either side closes.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    peer: &Peer,
    state: &Mutex<ProxyState>,
    stop: &AtomicBool,
) {
    let _ = from.set_read_timeout(Some(PROXY_READ_SLICE));
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::SeqCst) {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => break,
        };
        // Cut: hold the bytes while the cut lasts; delay: hold them that long.
        loop {
            let rule = state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .rules
                .get(peer)
                .copied()
                .unwrap_or_default();
            match rule.cut_until {
                Some(t) if Instant::now() < t && !stop.load(Ordering::SeqCst) => {
                    thread::sleep(PROXY_READ_SLICE)
                }
                _ => {
                    if !rule.delay.is_zero() {
                        thread::sleep(rule.delay);
                    }
                    break;
                }
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

// ---------------------------------------------------------------------------------------------
// Chaos driver: processes.

/// A line from a child's stdout.
struct Line {
    from: Role,
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Broker,
    Coordinator,
    Worker(usize),
}

impl Role {
    fn name(self) -> String {
        match self {
            Role::Broker => "broker".into(),
            Role::Coordinator => "coordinator".into(),
            Role::Worker(i) => format!("worker-{i}"),
        }
    }
}

/// A child process whose stdout lines go to the driver's channel and, with stderr, to a log.
struct Proc {
    child: Child,
}

fn spawn_proc(
    role: Role,
    mut cmd: Command,
    logs: &Path,
    lines: &mpsc::Sender<Line>,
) -> Result<Proc, String> {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent. It makes the
    // kernel SIGKILL the child if the driver dies, so no broker or worker outlives a run.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start {}: {e}", role.name()))?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("{}.log", role.name())))
        .map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let tx = lines.clone();
    thread::spawn(move || {
        let mut log = log;
        for line in BufReader::new(out).lines() {
            let Ok(text) = line else { break };
            let _ = writeln!(log, "{text}");
            let _ = tx.send(Line { from: role, text });
        }
    });
    thread::spawn(move || {
        let mut log = log2;
        for line in BufReader::new(err).lines() {
            let Ok(text) = line else { break };
            let _ = writeln!(log, "[stderr] {text}");
        }
    });
    Ok(Proc { child })
}

impl Proc {
    fn sigkill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.sigkill();
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Chaos driver: faults.

/// A transaction phase as the coordinator's markers name it.
const PHASES: [&str; 4] = ["begun", "before-prepare", "prepared", "sink-written"];
/// The coordinator's pause after each phase marker under the driver.
const PHASE_PAUSE_MS: u64 = 150;
/// The coordinator's transaction timeout under the driver (short, so stalls outlive it).
const TXN_TIMEOUT_MS: u64 = 5_000;

#[derive(Debug, Clone)]
enum Fault {
    KillWorker(usize),
    /// SIGKILL the coordinator this long after it prints this phase marker (it pauses
    /// [`PHASE_PAUSE_MS`] there, so a short delay lands in the phase, a longer one in the call
    /// that follows: the prepare, the sink write, the commit).
    KillCoordinator(&'static str, Duration),
    /// SIGKILL (and restart) the broker, likewise.
    KillBroker(&'static str, Duration),
    /// SIGKILL (and restart) the broker at once (`--sink topic`: no coordinator phases).
    KillBrokerNow,
    /// SIGSTOP the coordinator at a phase, likewise, for longer than the transaction timeout
    /// (a stalled job manager: ONGOING transactions time out; PREPARE ones must not), then
    /// SIGCONT.
    PauseCoordinator(&'static str, Duration, Duration),
    /// SIGSTOP a worker for a while, then SIGCONT.
    PauseWorker(usize, Duration),
    /// Close the connections of the coordinator (None) or a worker.
    Drop(Option<usize>),
    /// Add latency to every chunk for a while.
    Delay(Option<usize>, Duration, Duration),
    /// Stop forwarding both ways for a while.
    Cut(Option<usize>, Duration),
    /// Worker i takes half (rounded up) of its next non-empty poll, then exits without
    /// closing its consumer (the rest goes back by the connection drop) and is restarted; this
    /// many times in a row.
    PartialTake(usize, u32),
}

impl Fault {
    fn kind(&self) -> String {
        match self {
            Fault::KillWorker(_) => "kill-worker".into(),
            Fault::KillCoordinator(p, _) => format!("kill-coordinator@{p}"),
            Fault::KillBroker(p, _) => format!("kill-broker@{p}"),
            Fault::KillBrokerNow => "kill-broker".into(),
            Fault::PauseCoordinator(p, ..) => format!("pause-coordinator@{p}"),
            Fault::PauseWorker(..) => "pause-worker".into(),
            Fault::Drop(_) => "drop-conns".into(),
            Fault::Delay(..) => "delay".into(),
            Fault::Cut(..) => "partition".into(),
            Fault::PartialTake(..) => "partial-take".into(),
        }
    }

    /// The phase marker this fault waits for, and the delay after it.
    fn trigger(&self) -> Option<(&'static str, Duration)> {
        match self {
            Fault::KillCoordinator(p, d)
            | Fault::KillBroker(p, d)
            | Fault::PauseCoordinator(p, d, _) => Some((p, *d)),
            _ => None,
        }
    }
}

/// The fault plan of a seed: (time into the window, fault), sorted by time.
///
/// `--sink topic` has no coordinator process and no phase markers: its faults are SIGKILL of a
/// worker or (at a random moment) of the broker, SIGSTOP of a worker (some longer than the
/// workers' transaction timeout, so the transaction coordinator aborts and fences them), and
/// dropped, delayed or cut connections of one worker (its consumer and its producer).
fn plan(seed: u64, a: &ChaosArgs) -> Vec<(Duration, Fault)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let window_ms = a.window_secs * 1_000;
    let topic = a.sink == Sink::Topic;
    // `--sink topic` has no coordinator connections: every connection fault hits a worker.
    let target = |rng: &mut SmallRng| -> Option<usize> {
        if !topic && rng.gen_bool(0.4) {
            None
        } else {
            Some(rng.gen_range(0..a.workers))
        }
    };
    let mut out: Vec<(Duration, Fault)> = (0..a.faults)
        .map(|_| {
            // Leave the last fifth of the window quiet so restarts settle before the drain.
            let at = Duration::from_millis(rng.gen_range(window_ms / 10..window_ms * 4 / 5 + 1));
            let phase = PHASES[rng.gen_range(0..PHASES.len())];
            let delay = Duration::from_millis(rng.gen_range(0..PHASE_PAUSE_MS * 3));
            let fault = match rng.gen_range(0..8) {
                // `--sink topic`: the coordinator's faults become the broker's and a worker's.
                1 | 3 if topic => Fault::PauseWorker(
                    rng.gen_range(0..a.workers),
                    Duration::from_millis(rng.gen_range(500..TXN_TIMEOUT_MS + 2_500)),
                ),
                2 if topic => Fault::KillBrokerNow,
                0 => Fault::KillWorker(rng.gen_range(0..a.workers)),
                1 => Fault::KillCoordinator(phase, delay),
                2 => Fault::KillBroker(phase, delay),
                3 => Fault::PauseCoordinator(
                    phase,
                    delay,
                    Duration::from_millis(TXN_TIMEOUT_MS + rng.gen_range(500..2_500)),
                ),
                4 => Fault::PauseWorker(
                    rng.gen_range(0..a.workers),
                    Duration::from_millis(rng.gen_range(500..4_000)),
                ),
                5 => Fault::Drop(target(&mut rng)),
                6 => Fault::Delay(
                    target(&mut rng),
                    Duration::from_millis(rng.gen_range(20..300)),
                    Duration::from_millis(rng.gen_range(1_000..4_000)),
                ),
                _ => Fault::Cut(
                    target(&mut rng),
                    Duration::from_millis(rng.gen_range(500..4_000)),
                ),
            };
            (at, fault)
        })
        .collect();
    // Drawn after the random ones, so that a seed's other faults do not depend on this count.
    for _ in 0..a.partial_takes {
        let at = Duration::from_millis(rng.gen_range(window_ms / 10..window_ms * 4 / 5 + 1));
        let fault = Fault::PartialTake(
            rng.gen_range(0..a.workers),
            rng.gen_range(1..=PARTIAL_TAKE_ROUNDS_MAX),
        );
        out.push((at, fault));
    }
    out.sort_by_key(|(at, _)| *at);
    out
}

// ---------------------------------------------------------------------------------------------
// Chaos driver: one seed.

/// The outcome of one seed.
#[derive(Debug, Default, Serialize)]
struct SeedReport {
    seed: u64,
    records: usize,
    faults: BTreeMap<String, u32>,
    /// Phase-triggered kills whose phase never came in time.
    faults_skipped: u32,
    /// Partial takes the workers did (a partial-take fault asks for 1 to 3 in a row).
    partial_takes_done: u32,
    checkpoints_committed: u64,
    checkpoints_aborted: u64,
    lost: usize,
    duplicated: usize,
    pending_left: usize,
    /// Sink checkpoints whose transaction the broker lists as ABORTED.
    sink_txns_aborted: usize,
    /// Broker exits the driver did not cause.
    broker_crashes: u32,
    elapsed_secs: f64,
    ok: bool,
    error: Option<String>,
    run_dir: Option<String>,
}

struct Run<'a> {
    a: &'a ChaosArgs,
    seed: u64,
    dir: PathBuf,
    logs: PathBuf,
    broker_bin: PathBuf,
    self_bin: PathBuf,
    broker_port: u16,
    proxy: Proxy,
    lines_tx: mpsc::Sender<Line>,
    lines_rx: mpsc::Receiver<Line>,
    broker: Option<Proc>,
    broker_starts: u32,
    coordinator: Option<Proc>,
    workers: Vec<Option<Proc>>,
    members: HashMap<usize, String>,
    /// Paused processes: (when to SIGCONT, pid).
    resumes: Vec<(Instant, u32)>,
    /// Scheduled restarts of killed clients (nothing is revived before the last is due).
    restarts: Vec<Instant>,
    report: SeedReport,
}

/// Sends `sig` to a child of this driver (a paused one is never reaped, so `pid` is still
/// the child's).
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid of our own child; no memory is shared.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

const GROUP: &str = "pipeline";
const TOPIC: &str = "events";
/// `--sink topic`'s output topic.
const OUTPUT: &str = "events-out";

/// The record ids in the output topic as a read_committed consumer sees them, repeats kept.
fn output_ids(bootstrap: &str, partitions: i32) -> Result<Vec<u64>, String> {
    let mut nodes = NodePool::new(bootstrap, "lockstep-pipeline-checker");
    let mut ids = Vec::new();
    for p in 0..partitions {
        let records = read_committed::read_partition(&mut nodes, OUTPUT, p, 0)
            .map_err(|e| format!("read_committed {OUTPUT}/{p}: {e}"))?;
        for r in records {
            let id = r
                .value
                .as_deref()
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.strip_prefix("rec-"))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{OUTPUT}/{p} offset {}: not a record id", r.offset))?;
            ids.push(id);
        }
    }
    Ok(ids)
}

impl<'a> Run<'a> {
    fn bootstrap(&self) -> String {
        self.proxy.addr.to_string()
    }

    fn start_broker(&mut self) -> Result<(), String> {
        self.broker_starts += 1;
        let mut cmd = Command::new(&self.broker_bin);
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{}", self.broker_port))
            .arg("--advertised")
            .arg(self.proxy.addr.to_string())
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("--shards")
            .arg(self.a.shards.to_string())
            .env("RUST_LOG", "warn");
        let mut p = spawn_proc(Role::Broker, cmd, &self.logs, &self.lines_tx)?;
        let t0 = Instant::now();
        loop {
            match self.lines_rx.recv_timeout(Duration::from_millis(50)) {
                Ok(l) if l.from == Role::Broker && l.text.contains("lockstep ready") => break,
                Ok(l) => self.on_line(l),
                Err(_) => {}
            }
            if let Some(st) = p.exited() {
                return Err(format!("broker exited during start-up: {st}"));
            }
            if t0.elapsed() > BROKER_START_TIMEOUT {
                return Err("broker not ready in time".into());
            }
        }
        self.broker = Some(p);
        Ok(())
    }

    fn start_coordinator(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(&self.self_bin);
        cmd.arg("coordinator")
            .arg("--bootstrap")
            .arg(self.bootstrap())
            .arg("--group")
            .arg(GROUP)
            .arg("--run-dir")
            .arg(&self.dir)
            .arg("--interval-ms")
            .arg(self.a.interval_ms.to_string())
            .arg("--phase-pause-ms")
            .arg(PHASE_PAUSE_MS.to_string())
            .arg("--txn-timeout-ms")
            .arg(TXN_TIMEOUT_MS.to_string());
        self.coordinator = Some(spawn_proc(
            Role::Coordinator,
            cmd,
            &self.logs,
            &self.lines_tx,
        )?);
        Ok(())
    }

    fn start_worker(&mut self, i: usize) -> Result<(), String> {
        // Paced so that processing spans about 70% of the fault window.
        let per_worker = (self.a.records / self.a.workers.max(1)).max(1) as u64;
        let record_us = self.a.window_secs * 700_000 / per_worker;
        let mut cmd = Command::new(&self.self_bin);
        if self.a.sink == Sink::Topic {
            cmd.arg("txn-worker")
                .arg("--bootstrap")
                .arg(self.bootstrap())
                .arg("--group")
                .arg(GROUP)
                .arg("--topic")
                .arg(TOPIC)
                .arg("--output")
                .arg(OUTPUT)
                .arg("--run-dir")
                .arg(&self.dir)
                .arg("--index")
                .arg(i.to_string())
                .arg("--record-us")
                .arg(record_us.to_string())
                .arg("--commit-interval-ms")
                .arg(self.a.interval_ms.to_string())
                .arg("--txn-timeout-ms")
                .arg(TXN_TIMEOUT_MS.to_string());
            self.workers[i] = Some(spawn_proc(
                Role::Worker(i),
                cmd,
                &self.logs,
                &self.lines_tx,
            )?);
            return Ok(());
        }
        cmd.arg("worker")
            .arg("--bootstrap")
            .arg(self.bootstrap())
            .arg("--group")
            .arg(GROUP)
            .arg("--topic")
            .arg(TOPIC)
            .arg("--run-dir")
            .arg(&self.dir)
            .arg("--index")
            .arg(i.to_string())
            .arg("--record-us")
            .arg(record_us.to_string());
        self.workers[i] = Some(spawn_proc(
            Role::Worker(i),
            cmd,
            &self.logs,
            &self.lines_tx,
        )?);
        Ok(())
    }

    fn on_line(&mut self, l: Line) {
        if let Role::Worker(i) = l.from {
            if let Some(id) = l.text.strip_prefix("member ").and_then(|r| {
                r.split_whitespace()
                    .find_map(|kv| kv.strip_prefix("id=").map(str::to_string))
            }) {
                self.members.insert(i, id);
            }
            if l.text.starts_with("partial-take ") {
                self.report.partial_takes_done += 1;
            }
        }
        if matches!(l.from, Role::Worker(_)) {
            if l.text.starts_with("txn committed ") {
                self.report.checkpoints_committed += 1;
            } else if l.text.starts_with("txn aborted ") {
                self.report.checkpoints_aborted += 1;
            }
        }
        if l.from == Role::Coordinator {
            if l.text.starts_with("phase=committed ") {
                self.report.checkpoints_committed += 1;
            } else if l.text.starts_with("phase=aborted ") {
                self.report.checkpoints_aborted += 1;
            }
        }
    }

    fn peer(&self, target: Option<usize>) -> Option<Peer> {
        match target {
            None => Some(Peer::Coordinator),
            Some(i) => self.members.get(&i).map(|m| Peer::Member(m.clone())),
        }
    }

    fn count(&mut self, kind: String) {
        *self.report.faults.entry(kind).or_default() += 1;
    }

    /// Restarts every child that is not running (driver-killed or exited on its own).
    fn revive(&mut self) -> Result<(), String> {
        if let Some(b) = self.broker.as_mut() {
            if let Some(st) = b.exited() {
                eprintln!("seed {}: broker exited by itself ({st})", self.seed);
                self.report.broker_crashes += 1;
                self.broker = None;
            }
        }
        if self.broker.is_none() {
            self.start_broker()?;
        }
        if self.a.sink == Sink::Files
            && self
                .coordinator
                .as_mut()
                .is_none_or(|c| c.exited().is_some())
        {
            self.start_coordinator()?;
        }
        for i in 0..self.workers.len() {
            if self.workers[i]
                .as_mut()
                .is_none_or(|w| w.exited().is_some())
            {
                self.start_worker(i)?;
            }
        }
        Ok(())
    }

    fn setup(&mut self) -> Result<(), String> {
        self.start_broker()?;
        let e = |e: ClientError| e.to_string();
        let mut admin = Admin::connect(&self.bootstrap()).map_err(e)?;
        // Faults reach only clients that go through the proxy: the broker must name it
        // (`--advertised`) wherever it names itself, or clients would go around it.
        let proxy = self.proxy.addr.to_string();
        let md = admin::metadata(admin.connection(), None).map_err(e)?;
        let node =
            admin::find_coordinator(admin.connection(), admin::COORDINATOR_KEY_TYPE_GROUP, GROUP)
                .map_err(e)?;
        if node.addr() != proxy || md.brokers.iter().any(|b| b.addr() != proxy) {
            return Err(format!(
                "the broker advertises {} / {:?}, not the proxy {proxy}",
                node.addr(),
                md.brokers.iter().map(|b| b.addr()).collect::<Vec<_>>()
            ));
        }
        let topic = self.a.sink == Sink::Topic;
        let mut topics = vec![NewTopic::new(TOPIC, self.a.partitions)];
        if topic {
            topics.push(NewTopic::new(OUTPUT, self.a.partitions));
        }
        admin.create_topics(&topics).map_err(e)?;
        let configs: &[(&str, &str)] = if topic {
            // Explicit acknowledgement (TxnShareAcknowledge needs no share-transaction mode),
            // whose record locks Kafka bounds to 4000 per partition.
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.partition.max.record.locks", "4000"),
                ("share.delivery.count.limit", "10"),
            ]
        } else {
            &[
                ("share.acknowledgement.mode", "transactional"),
                ("share.auto.offset.reset", "earliest"),
                ("share.partition.max.record.locks", "1000000"),
                ("share.delivery.count.limit", "10"),
                ("share.transaction.max.pending", "50"),
            ]
        };
        for (k, v) in configs {
            admin.set_group_config(GROUP, k, v).map_err(e)?;
        }
        let mut producer = Producer::new(&self.bootstrap());
        let parts = self.a.partitions.max(1) as usize;
        for p in 0..parts {
            let ids: Vec<usize> = (p..self.a.records).step_by(parts).collect();
            for chunk in ids.chunks(PRODUCE_BATCH_RECORDS) {
                let records: Vec<ProducerRecord> = chunk
                    .iter()
                    .map(|i| ProducerRecord::value(format!("rec-{i}")))
                    .collect();
                producer.produce(TOPIC, p as i32, &records).map_err(e)?;
            }
        }
        if !topic {
            self.start_coordinator()?;
        }
        for i in 0..self.workers.len() {
            self.start_worker(i)?;
        }
        Ok(())
    }

    /// The chaos window: injects the plan, restarts what was killed.
    fn chaos(&mut self) -> Result<(), String> {
        // Partial takes run on their own clock: a phase-triggered fault waiting for its marker
        // does not hold them back.
        let (partials, plan): (Vec<_>, Vec<_>) = plan(self.seed, self.a)
            .into_iter()
            .partition(|(_, f)| matches!(f, Fault::PartialTake(..)));
        let mut next_partial = 0;
        let t0 = Instant::now();
        let window = Duration::from_secs(self.a.window_secs);
        let mut next = 0;
        // A phase-triggered fault waiting for its marker: (fault, armed at).
        let mut armed: Option<(Fault, Instant)> = None;
        // A phase-triggered fault whose marker came: (fault, when to fire, the marker).
        let mut firing: Option<(Fault, Instant, String)> = None;
        while t0.elapsed() < window {
            if let Ok(l) = self.lines_rx.recv_timeout(Duration::from_millis(10)) {
                let hit = match armed.as_ref().and_then(|(f, _)| f.trigger()) {
                    Some((p, _)) if l.from == Role::Coordinator => {
                        l.text.starts_with(&format!("phase={p} "))
                    }
                    _ => false,
                };
                if hit {
                    let (fault, _) = armed.take().expect("armed");
                    let (_, delay) = fault.trigger().expect("armed faults have triggers");
                    firing = Some((fault, Instant::now() + delay, l.text.clone()));
                }
                self.on_line(l);
            }
            if firing
                .as_ref()
                .is_some_and(|(_, at, _)| Instant::now() >= *at)
            {
                let (fault, _, text) = firing.take().expect("firing");
                eprintln!(
                    "seed {}: t={:.1}s {fault:?} after `{text}`",
                    self.seed,
                    t0.elapsed().as_secs_f64()
                );
                self.inject(&fault)?;
            }
            if let Some((f, at)) = &armed {
                if at.elapsed() > ARMED_FAULT_TIMEOUT {
                    eprintln!("seed {}: {} skipped (phase not seen)", self.seed, f.kind());
                    self.report.faults_skipped += 1;
                    armed = None;
                }
            }
            self.tick()?;
            if next_partial < partials.len() && t0.elapsed() >= partials[next_partial].0 {
                let fault = partials[next_partial].1.clone();
                next_partial += 1;
                eprintln!(
                    "seed {}: t={:.1}s {fault:?}",
                    self.seed,
                    t0.elapsed().as_secs_f64()
                );
                self.inject(&fault)?;
            }
            if armed.is_none()
                && firing.is_none()
                && next < plan.len()
                && t0.elapsed() >= plan[next].0
            {
                let fault = plan[next].1.clone();
                next += 1;
                if fault.trigger().is_some() {
                    armed = Some((fault, Instant::now()));
                } else {
                    eprintln!(
                        "seed {}: t={:.1}s {fault:?}",
                        self.seed,
                        t0.elapsed().as_secs_f64()
                    );
                    self.inject(&fault)?;
                }
            }
        }
        if let Some((f, _)) = armed.or(firing.map(|(f, ..)| (f, t0))) {
            eprintln!("seed {}: {} skipped (window over)", self.seed, f.kind());
            self.report.faults_skipped += 1;
        }
        self.report.faults_skipped += (plan.len() - next) as u32;
        self.report.faults_skipped += (partials.len() - next_partial) as u32;
        Ok(())
    }

    /// Due SIGCONTs and restarts.
    fn tick(&mut self) -> Result<(), String> {
        let now = Instant::now();
        let due: Vec<u32> = self
            .resumes
            .iter()
            .filter(|(t, _)| now >= *t)
            .map(|(_, pid)| *pid)
            .collect();
        self.resumes.retain(|(t, _)| now < *t);
        for pid in due {
            signal(pid, libc::SIGCONT);
        }
        self.restarts.retain(|t| now < *t);
        if self.restarts.is_empty() {
            self.revive()?;
        }
        Ok(())
    }

    fn inject(&mut self, fault: &Fault) -> Result<(), String> {
        let restart_at = Instant::now() + Duration::from_millis(300);
        let done = match fault {
            Fault::KillWorker(i) => {
                if let Some(w) = self.workers[*i].as_mut() {
                    let pid = w.child.id();
                    self.resumes.retain(|(_, p)| *p != pid);
                    w.sigkill();
                }
                self.restarts.push(restart_at);
                true
            }
            Fault::KillCoordinator(..) => {
                if let Some(c) = self.coordinator.as_mut() {
                    let pid = c.child.id();
                    self.resumes.retain(|(_, p)| *p != pid);
                    c.sigkill();
                }
                self.restarts.push(restart_at);
                true
            }
            Fault::KillBroker(..) | Fault::KillBrokerNow => {
                if let Some(b) = self.broker.as_mut() {
                    b.sigkill();
                }
                self.broker = None;
                self.start_broker()?;
                true
            }
            Fault::PauseCoordinator(_, _, dur) => {
                let pid = self.coordinator.as_ref().map(|c| c.child.id());
                self.pause(pid, *dur)
            }
            Fault::PauseWorker(i, dur) => {
                let pid = self.workers[*i].as_ref().map(|w| w.child.id());
                self.pause(pid, *dur)
            }
            Fault::Drop(t) => match self.peer(*t) {
                Some(p) => {
                    self.proxy.drop_conns(&p);
                    true
                }
                None => false,
            },
            Fault::Delay(t, d, dur) => match self.peer(*t) {
                Some(p) => {
                    self.proxy.set_rule(
                        p.clone(),
                        Rule {
                            delay: *d,
                            cut_until: None,
                        },
                    );
                    let (proxy_state, dur) = (self.proxy.state.clone(), *dur);
                    thread::spawn(move || {
                        thread::sleep(dur);
                        proxy_state
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .rules
                            .remove(&p);
                    });
                    true
                }
                None => false,
            },
            Fault::Cut(t, dur) => match self.peer(*t) {
                Some(p) => {
                    self.proxy.set_rule(
                        p,
                        Rule {
                            delay: Duration::ZERO,
                            cut_until: Some(Instant::now() + *dur),
                        },
                    );
                    true
                }
                None => false,
            },
            Fault::PartialTake(i, rounds) => {
                RunDir::new(&self.dir)
                    .and_then(|run| run.request_partial_takes(*i, *rounds))
                    .map_err(|e| format!("partial-take request: {e}"))?;
                true
            }
        };
        if done {
            self.count(fault.kind());
        } else {
            self.report.faults_skipped += 1;
        }
        Ok(())
    }

    /// SIGSTOPs `pid` and schedules its SIGCONT.
    fn pause(&mut self, pid: Option<u32>, dur: Duration) -> bool {
        match pid {
            Some(pid) => {
                signal(pid, libc::SIGSTOP);
                self.resumes.push((Instant::now() + dur, pid));
                true
            }
            None => false,
        }
    }

    /// Resumes everything paused at once.
    fn resume_all(&mut self) {
        for (_, pid) in std::mem::take(&mut self.resumes) {
            signal(pid, libc::SIGCONT);
        }
    }

    /// Faults off; every child running; wait until every record is in the sink; stop.
    fn drain(&mut self) -> Result<(), String> {
        self.proxy.clear_rules();
        self.resume_all();
        self.restarts.clear();
        let run = RunDir::new(&self.dir).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(self.a.drain_secs);
        let mut last_check = Instant::now() - Duration::from_secs(1);
        loop {
            if let Ok(l) = self.lines_rx.recv_timeout(Duration::from_millis(20)) {
                self.on_line(l);
            }
            self.revive()?;
            if last_check.elapsed() >= Duration::from_millis(500) {
                last_check = Instant::now();
                let seen: BTreeSet<u64> = if self.a.sink == Sink::Topic {
                    // The broker may be restarting: an unreadable output counts as empty.
                    output_ids(&self.bootstrap(), self.a.partitions)
                        .unwrap_or_default()
                        .into_iter()
                        .collect()
                } else {
                    run.sink()
                        .map_err(|e| e.to_string())?
                        .into_iter()
                        .flat_map(|c| c.records)
                        .collect()
                };
                if seen.len() >= self.a.records {
                    break;
                }
                if Instant::now() >= deadline {
                    eprintln!(
                        "seed {}: drain timed out with {} of {} records in the sink",
                        self.seed,
                        seen.len(),
                        self.a.records
                    );
                    break;
                }
            }
        }
        fs::write(self.dir.join("stop"), b"stop\n").map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        while t0.elapsed() < STOP_TIMEOUT {
            if let Ok(l) = self.lines_rx.recv_timeout(Duration::from_millis(20)) {
                self.on_line(l);
            }
            let coord_done = self
                .coordinator
                .as_mut()
                .is_none_or(|c| c.exited().is_some());
            let workers_done = self
                .workers
                .iter_mut()
                .all(|w| w.as_mut().is_none_or(|w| w.exited().is_some()));
            if coord_done && workers_done {
                break;
            }
        }
        while let Ok(l) = self.lines_rx.try_recv() {
            self.on_line(l);
        }
        if let Some(st) = self.coordinator.as_mut().and_then(|c| c.exited()) {
            if !st.success() {
                eprintln!(
                    "seed {}: coordinator exited with {st} at the end",
                    self.seed
                );
            }
        }
        self.coordinator = None;
        for w in &mut self.workers {
            *w = None;
        }
        Ok(())
    }

    /// `--sink topic`'s invariant: every record id in the output topic exactly once as a
    /// read_committed consumer sees it (so none was lost to the delivery limit: an archived
    /// record is never written), and no worker's transaction left ONGOING or PREPARE_*.
    fn check_topic(&mut self) -> Result<(), String> {
        let bootstrap = self.bootstrap();
        let partitions = self.a.partitions;
        let ids = retry_str(CALL_RETRY_WINDOW, || output_ids(&bootstrap, partitions))?;
        let mut seen: HashMap<u64, u32> = HashMap::new();
        for id in ids {
            *seen.entry(id).or_default() += 1;
        }
        self.report.lost = (0..self.a.records as u64)
            .filter(|id| !seen.contains_key(id))
            .count();
        self.report.duplicated = seen.values().map(|&n| (n as usize).saturating_sub(1)).sum();
        let unknown = seen
            .keys()
            .filter(|&&id| id >= self.a.records as u64)
            .count();
        if unknown > 0 {
            return Err(format!(
                "{unknown} record ids in the output were never produced"
            ));
        }
        for i in 0..self.a.workers {
            let id = worker_txn_id(GROUP, i);
            let mut p =
                TransactionalProducer::new(&bootstrap, "lockstep-pipeline-checker", &id, 60_000);
            let state = retry(CALL_RETRY_WINDOW, "describe transaction", || {
                p.describe_state()
            })?;
            if matches!(state.as_str(), "Ongoing" | "PrepareCommit" | "PrepareAbort") {
                eprintln!("seed {}: pending at the end: {id} {state}", self.seed);
                self.report.pending_left += 1;
            }
        }
        Ok(())
    }

    /// The invariant: every record in the sink exactly once, nothing pending, no sink
    /// checkpoint aborted.
    fn check(&mut self) -> Result<(), String> {
        if self.a.sink == Sink::Topic {
            return self.check_topic();
        }
        let run = RunDir::new(&self.dir).map_err(|e| e.to_string())?;
        let sink = run.sink().map_err(|e| e.to_string())?;
        let mut seen: HashMap<u64, u32> = HashMap::new();
        for c in &sink {
            for &id in &c.records {
                *seen.entry(id).or_default() += 1;
            }
        }
        self.report.lost = (0..self.a.records as u64)
            .filter(|id| !seen.contains_key(id))
            .count();
        self.report.duplicated = seen.values().map(|&n| (n as usize).saturating_sub(1)).sum();
        let unknown = seen
            .keys()
            .filter(|&&id| id >= self.a.records as u64)
            .count();
        if unknown > 0 {
            return Err(format!(
                "{unknown} record ids in the sink were never produced"
            ));
        }
        let mut coord = ShareTransactionCoordinator::new(&self.bootstrap(), GROUP);
        let pending = retry(CALL_RETRY_WINDOW, "list pending", || coord.list_pending())?;
        for t in &pending {
            eprintln!(
                "seed {}: pending at the end: {} {}",
                self.seed, t.transaction_id, t.state
            );
        }
        self.report.pending_left = pending.len();
        let aborted: BTreeSet<String> = retry(CALL_RETRY_WINDOW, "list aborted", || {
            coord.list(&[TxnState::Aborted])
        })?
        .into_iter()
        .map(|t| t.transaction_id)
        .collect();
        self.report.sink_txns_aborted = sink
            .iter()
            .filter(|c| aborted.contains(&c.transaction_id))
            .count();
        Ok(())
    }
}

fn run_seed(a: &ChaosArgs, seed: u64, broker_bin: &Path, self_bin: &Path) -> SeedReport {
    let t0 = Instant::now();
    let base = a.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!(
        "lockstep-pipeline-{}-seed{seed}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    let mut report = SeedReport {
        seed,
        records: a.records,
        ..SeedReport::default()
    };
    let outcome = (|| -> Result<SeedReport, String> {
        let logs = dir.join("logs");
        fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
        let broker_port = free_port()?;
        let proxy = Proxy::start(SocketAddr::from(([127, 0, 0, 1], broker_port)))
            .map_err(|e| format!("proxy: {e}"))?;
        let (lines_tx, lines_rx) = mpsc::channel();
        let mut run = Run {
            a,
            seed,
            dir: dir.clone(),
            logs,
            broker_bin: broker_bin.to_path_buf(),
            self_bin: self_bin.to_path_buf(),
            broker_port,
            proxy,
            lines_tx,
            lines_rx,
            broker: None,
            broker_starts: 0,
            coordinator: None,
            workers: (0..a.workers).map(|_| None).collect(),
            members: HashMap::new(),
            resumes: Vec::new(),
            restarts: Vec::new(),
            report: SeedReport {
                seed,
                records: a.records,
                ..SeedReport::default()
            },
        };
        run.setup()?;
        run.chaos()?;
        run.drain()?;
        run.check()?;
        if let Some(b) = run.broker.as_mut() {
            if let Some(st) = b.exited() {
                eprintln!("seed {seed}: broker exited by itself ({st})");
                run.report.broker_crashes += 1;
            }
        }
        Ok(std::mem::take(&mut run.report))
    })();
    match outcome {
        Ok(r) => report = r,
        Err(e) => report.error = Some(e),
    }
    report.elapsed_secs = (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    report.ok = report.error.is_none()
        && report.lost == 0
        && report.duplicated == 0
        && report.pending_left == 0
        && report.sink_txns_aborted == 0
        && report.broker_crashes == 0;
    if report.ok && !a.keep {
        let _ = fs::remove_dir_all(&dir);
    } else {
        report.run_dir = Some(dir.display().to_string());
    }
    report
}

fn parse_seeds(a: &ChaosArgs) -> Result<Vec<u64>, String> {
    match (&a.seed, &a.seeds) {
        (Some(s), _) => Ok(vec![*s]),
        (None, None) => Ok(vec![1]),
        (None, Some(r)) => {
            let (lo, hi) = r
                .split_once("..")
                .ok_or_else(|| format!("--seeds {r:?}: expected A..B"))?;
            let lo: u64 = lo.trim().parse().map_err(|_| format!("--seeds {r:?}"))?;
            let hi: u64 = hi
                .trim()
                .trim_start_matches('=')
                .parse()
                .map_err(|_| format!("--seeds {r:?}"))?;
            if lo > hi || hi - lo >= CAMPAIGN_SEEDS_MAX {
                return Err(format!(
                    "--seeds {r:?}: need A <= B and at most {CAMPAIGN_SEEDS_MAX} seeds"
                ));
            }
            Ok((lo..=hi).collect())
        }
    }
}

fn replay_command(a: &ChaosArgs, seed: u64) -> String {
    format!(
        "cargo run --release --bin lockstep-pipeline -- chaos --sink {} --seed {seed} \
         --records {} --workers {} --partitions {} --faults {} --partial-takes {} \
         --window-secs {} --interval-ms {} --shards {}",
        match a.sink {
            Sink::Files => "files",
            Sink::Topic => "topic",
        },
        a.records,
        a.workers,
        a.partitions,
        a.faults,
        a.partial_takes,
        a.window_secs,
        a.interval_ms,
        a.shards
    )
}

#[derive(Serialize)]
struct CampaignReport<'a> {
    seeds: usize,
    passed: usize,
    failed: Vec<u64>,
    faults: BTreeMap<String, u32>,
    records: usize,
    lost: usize,
    duplicated: usize,
    /// Partial takes the workers did over every seed.
    partial_takes_done: u32,
    runs: &'a [SeedReport],
}

fn run_chaos(a: &ChaosArgs) -> ExitCode {
    let usage = |m: String| {
        eprintln!("lockstep-pipeline: {m}");
        ExitCode::from(2)
    };
    let seeds = match parse_seeds(a) {
        Ok(s) => s,
        Err(m) => return usage(m),
    };
    if a.records == 0 || a.records > RECORDS_MAX {
        return usage(format!("--records must be 1..={RECORDS_MAX}"));
    }
    if a.workers == 0 || a.workers > WORKERS_MAX {
        return usage(format!("--workers must be 1..={WORKERS_MAX}"));
    }
    if a.faults + a.partial_takes > FAULTS_MAX || a.partitions < 1 || a.window_secs == 0 {
        return usage(format!(
            "--faults plus --partial-takes at most {FAULTS_MAX}, --partitions and \
             --window-secs at least 1"
        ));
    }
    let self_bin = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return usage(format!("own path: {e}")),
    };
    let broker_bin = a
        .broker_bin
        .clone()
        .unwrap_or_else(|| self_bin.with_file_name("lockstep"));
    if !broker_bin.exists() {
        return usage(format!(
            "{} missing: `cargo build --release --bin lockstep` (or --broker-bin)",
            broker_bin.display()
        ));
    }
    let mut reports = Vec::with_capacity(seeds.len());
    for (i, &seed) in seeds.iter().enumerate() {
        let r = run_seed(a, seed, &broker_bin, &self_bin);
        let faults: u32 = r.faults.values().sum();
        eprintln!(
            "[{}/{}] seed {seed}: {} records, {faults} faults, {} committed / {} aborted \
             checkpoints, lost {}, duplicated {}, pending {}, {:.1}s {}",
            i + 1,
            seeds.len(),
            r.records,
            r.checkpoints_committed,
            r.checkpoints_aborted,
            r.lost,
            r.duplicated,
            r.pending_left,
            r.elapsed_secs,
            if r.ok { "OK" } else { "FAIL" }
        );
        if !r.ok {
            if let Some(e) = &r.error {
                eprintln!("  error: {e}");
            }
            if let Some(d) = &r.run_dir {
                eprintln!("  run dir (logs, sink, staging): {d}");
            }
            eprintln!("  replay: {}", replay_command(a, seed));
        }
        reports.push(r);
    }
    let mut faults: BTreeMap<String, u32> = BTreeMap::new();
    for r in &reports {
        for (k, v) in &r.faults {
            *faults.entry(k.clone()).or_default() += v;
        }
    }
    let failed: Vec<u64> = reports.iter().filter(|r| !r.ok).map(|r| r.seed).collect();
    let summary = CampaignReport {
        seeds: reports.len(),
        passed: reports.len() - failed.len(),
        failed: failed.clone(),
        faults,
        records: reports.iter().map(|r| r.records).sum(),
        lost: reports.iter().map(|r| r.lost).sum(),
        duplicated: reports.iter().map(|r| r.duplicated).sum(),
        partial_takes_done: reports.iter().map(|r| r.partial_takes_done).sum(),
        runs: &reports,
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("report serializes")
        );
    } else {
        print_table(&summary);
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_table(s: &CampaignReport<'_>) {
    println!(
        "{:>8} {:>8} {:>7} {:>10} {:>8} {:>5} {:>10} {:>8} {:>8}  RESULT",
        "SEED",
        "RECORDS",
        "FAULTS",
        "COMMITTED",
        "ABORTED",
        "LOST",
        "DUPLICATED",
        "PENDING",
        "SECS"
    );
    for r in s.runs {
        println!(
            "{:>8} {:>8} {:>7} {:>10} {:>8} {:>5} {:>10} {:>8} {:>8.1}  {}",
            r.seed,
            r.records,
            r.faults.values().sum::<u32>(),
            r.checkpoints_committed,
            r.checkpoints_aborted,
            r.lost,
            r.duplicated,
            r.pending_left,
            r.elapsed_secs,
            if r.ok { "ok" } else { "FAIL" }
        );
    }
    println!();
    println!("{:<34} {:>8}", "FAULT", "INJECTED");
    for (k, v) in &s.faults {
        println!("{k:<34} {v:>8}");
    }
    println!();
    println!(
        "seeds {}  passed {}  records {}  lost {}  duplicated {}  partial takes done {}  \
         failed seeds {:?}",
        s.seeds, s.passed, s.records, s.lost, s.duplicated, s.partial_takes_done, s.failed
    );
}
