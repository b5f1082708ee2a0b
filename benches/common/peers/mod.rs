//! Queue peers the benchmark suite compares Lockstep's transactional share-group consumption
//! with: Redis streams, RabbitMQ and NATS JetStream, each started here as a private child process
//! (free loopback port, data in a temporary directory; never the system service) and stopped
//! afterwards, also on error (a guard kills the server's whole process group when dropped).
//!
//! Every peer runs the same workload shape as the Lockstep suite: `records` records of
//! `record_bytes` are **produced first** (one producer connection, a window of
//! [`PRODUCE_WINDOW`] unconfirmed records; `produce_us` is each record's send → durable-ack
//! latency), then `consumers` consumer threads, each with its own connection, drain the backlog as
//! fast as they can and acknowledge what they consumed once per `checkpoint`, transactionally
//! where the peer has transactions (`commit_us` is one consumer's checkpoint commit). Throughput
//! is `records / elapsed`, where `elapsed` runs from the first record received to the last
//! consumer's final commit. Every record carries its sequence number and its send time (wall
//! clock, µs): `e2e_us` is receive time − send time (it includes the time a record waited in the
//! pre-produced backlog, as in the Lockstep suite's drain). Every sequence number must be
//! consumed; a shortfall is an error, redeliveries are counted and reported on stderr.
//!
//! See each peer's module for how its server is configured and what is fsync'd when
//! ([`PeerResult::durability`] says it in one line).

pub mod nats;
pub mod rabbitmq;
pub mod redis;

use hdrhistogram::Histogram;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The workload every peer runs (see the module doc).
pub struct PeerWorkload {
    pub records: u64,
    pub record_bytes: usize,
    pub consumers: usize,
    pub checkpoint: std::time::Duration,
}

/// One peer's measurement.
pub struct PeerResult {
    /// "redis", "rabbitmq" or "nats" with the server's version.
    pub name: String,
    /// What is fsync'd when, and what a checkpoint commit means there.
    pub durability: String,
    pub records: u64,
    /// First record received → last consumer's final commit.
    pub elapsed: std::time::Duration,
    pub produce_us: hdrhistogram::Histogram<u64>,
    pub e2e_us: hdrhistogram::Histogram<u64>,
    pub commit_us: hdrhistogram::Histogram<u64>,
}

/// Unconfirmed records the producer keeps in flight.
pub const PRODUCE_WINDOW: usize = 256;
/// Longest a whole run may take before it gives up.
const RUN_DEADLINE: Duration = Duration::from_secs(900);

/// `Err(reason)` when the peer's server (or anything it needs to start) is not installed.
pub fn available(peer: &str) -> Result<(), String> {
    match peer {
        "redis" => redis::available(),
        "rabbitmq" => rabbitmq::available(),
        "nats" => nats::available(),
        other => Err(format!("unknown peer {other:?} (redis | rabbitmq | nats)")),
    }
}

/// Starts `peer`'s server, produces, consumes with per-checkpoint acknowledgements, stops it.
pub fn run(peer: &str, w: &PeerWorkload, progress: &dyn Fn(u64)) -> Result<PeerResult, String> {
    available(peer)?;
    if w.records == 0 || w.consumers == 0 {
        return Err("the workload needs at least one record and one consumer".into());
    }
    if w.record_bytes < RECORD_HEADER {
        return Err(format!(
            "records must be at least {RECORD_HEADER} bytes (sequence number and send time)"
        ));
    }
    match peer {
        "redis" => redis::run(w, progress),
        "rabbitmq" => rabbitmq::run(w, progress),
        "nats" => nats::run(w, progress),
        other => Err(format!("unknown peer {other:?}")),
    }
}

/// `name` on PATH, or the first of `also` that exists.
fn find_binary(name: &str, also: &[&str]) -> Option<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        also.iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.is_file())
    })
}

/// A loopback port nobody listens on right now.
fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("free port: {e}"))
}

/// A server child process in its own process group; dropping it stops the whole group
/// (SIGTERM, then SIGKILL after `grace`).
struct Server {
    what: String,
    child: Child,
    grace: Duration,
}

impl Server {
    /// Starts `cmd` in a new process group, its output going to `log`.
    fn start(what: &str, mut cmd: Command, log: &Path, grace: Duration) -> Result<Server, String> {
        let out = std::fs::File::create(log).map_err(|e| format!("{what} log: {e}"))?;
        let err = out.try_clone().map_err(|e| format!("{what} log: {e}"))?;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd.spawn().map_err(|e| format!("start {what}: {e}"))?;
        Ok(Server {
            what: what.into(),
            child,
            grace,
        })
    }

    /// Err with the log's tail if the server has exited.
    fn check_alive(&mut self, log: &Path) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(format!(
                "{} exited ({status}) before it was ready; log tail:\n{}",
                self.what,
                log_tail(log)
            )),
            _ => Ok(()),
        }
    }

    /// Waits until `port` accepts connections (or the server dies, or `timeout`).
    fn wait_for_port(&mut self, port: u16, log: &Path, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive(log)?;
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not listen on port {port} within {timeout:?}; log tail:\n{}",
                    self.what,
                    log_tail(log)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let group = -(self.child.id() as libc::pid_t);
        // SAFETY: kill(2) on our own child's process group (its id is the child's pid).
        unsafe { libc::kill(group, libc::SIGTERM) };
        let deadline = Instant::now() + self.grace;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => break,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        // Whatever is left of the group (the server itself if it ignored SIGTERM, helpers it
        // forked): SIGKILL. ESRCH when the group is already gone.
        // SAFETY: as above.
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Sequence number (8 bytes LE) and send time in µs since the epoch (8 bytes LE).
const RECORD_HEADER: usize = 16;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Record `seq` of `bytes` bytes, stamped with the current time.
fn record(seq: u64, bytes: usize) -> Vec<u8> {
    let mut r = Vec::with_capacity(bytes);
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&now_us().to_le_bytes());
    r.extend((RECORD_HEADER..bytes).map(|i| b'a' + (i % 26) as u8));
    r
}

/// Sequence number and send time of a record.
fn parse_record(r: &[u8]) -> Result<(u64, u64), String> {
    if r.len() < RECORD_HEADER {
        return Err(format!("record of {} bytes has no header", r.len()));
    }
    let seq = u64::from_le_bytes(r[..8].try_into().unwrap());
    let sent = u64::from_le_bytes(r[8..16].try_into().unwrap());
    Ok((seq, sent))
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

fn micros(d: Duration) -> u64 {
    d.as_micros().max(1) as u64
}

/// Which records the consumers have seen, shared by the consumer threads.
struct Tally {
    records: u64,
    seen: Vec<AtomicBool>,
    distinct: AtomicU64,
    duplicates: AtomicU64,
    first: OnceLock<Instant>,
    failed: AtomicBool,
}

impl Tally {
    fn new(records: u64) -> Tally {
        Tally {
            records,
            seen: (0..records).map(|_| AtomicBool::new(false)).collect(),
            distinct: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            first: OnceLock::new(),
            failed: AtomicBool::new(false),
        }
    }

    /// Counts one received record; its e2e latency goes into the thread's `e2e` histogram.
    fn consumed(&self, payload: &[u8], e2e: &mut Histogram<u64>) -> Result<(), String> {
        self.first.get_or_init(Instant::now);
        let (seq, sent) = parse_record(payload)?;
        let slot = self
            .seen
            .get(seq as usize)
            .ok_or_else(|| format!("record with sequence number {seq} was never produced"))?;
        if slot.swap(true, Ordering::SeqCst) {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        } else {
            self.distinct.fetch_add(1, Ordering::SeqCst);
        }
        e2e.record(now_us().saturating_sub(sent).max(1)).ok();
        Ok(())
    }

    /// Every record consumed (or a consumer failed: the others stop too).
    fn done(&self) -> bool {
        self.distinct.load(Ordering::SeqCst) >= self.records || self.failed.load(Ordering::SeqCst)
    }
}

/// What one consumer thread measured: its checkpoint commits and its records' e2e latencies.
struct ConsumerStats {
    commit_us: Histogram<u64>,
    e2e_us: Histogram<u64>,
}

impl ConsumerStats {
    fn new() -> ConsumerStats {
        ConsumerStats {
            commit_us: histogram(),
            e2e_us: histogram(),
        }
    }
}

/// Runs `worker(i, tally)` on `w.consumers` threads (each stops once `tally.done()`, after
/// committing what it holds), calling `progress` from this thread until they finish; returns
/// (e2e, commit) latencies and the consume elapsed time, or the first error (also a shortfall: a
/// record nobody consumed).
fn consume_phase(
    w: &PeerWorkload,
    progress: &dyn Fn(u64),
    worker: &(dyn Fn(usize, &Tally) -> Result<ConsumerStats, String> + Sync),
) -> Result<(Histogram<u64>, Histogram<u64>, Duration), String> {
    let tally = Tally::new(w.records);
    let deadline = Instant::now() + RUN_DEADLINE;
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..w.consumers)
            .map(|i| {
                let tally = &tally;
                s.spawn(move || {
                    let r = worker(i, tally);
                    if r.is_err() {
                        tally.failed.store(true, Ordering::SeqCst);
                    }
                    r.map(|stats| (stats, Instant::now()))
                })
            })
            .collect();
        let mut last = u64::MAX;
        while !handles.iter().all(|h| h.is_finished()) {
            let n = tally.distinct.load(Ordering::SeqCst);
            if n != last {
                progress(n);
                last = n;
            }
            if Instant::now() > deadline {
                // The workers see this and stop.
                tally.failed.store(true, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("consumer thread panicked".into()))
            })
            .collect::<Vec<_>>()
    });
    let distinct = tally.distinct.load(Ordering::SeqCst);
    progress(distinct);
    let (mut commit_us, mut e2e_us) = (histogram(), histogram());
    let mut finished: Option<Instant> = None;
    for r in results {
        let (stats, end) = r?;
        commit_us.add(&stats.commit_us).map_err(|e| e.to_string())?;
        e2e_us.add(&stats.e2e_us).map_err(|e| e.to_string())?;
        finished = finished.max(Some(end));
    }
    if distinct < w.records {
        return Err(format!(
            "shortfall: {distinct} of {} records consumed{}",
            w.records,
            if Instant::now() > deadline {
                " (run deadline passed)"
            } else {
                ""
            }
        ));
    }
    let duplicates = tally.duplicates.load(Ordering::Relaxed);
    if duplicates > 0 {
        eprintln!("peers: {duplicates} records were delivered more than once");
    }
    let first = *tally.first.get().expect("records were consumed");
    let finished = finished.expect("at least one consumer");
    Ok((e2e_us, commit_us, finished.duration_since(first)))
}
