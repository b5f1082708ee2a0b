//! Process-level crash test of the state journal on real files.
//!
//! What it proves: a writer process killed with SIGKILL at a random moment (mid-append,
//! mid-snapshot, mid-roll, mid-compaction) leaves a journal that recovers, holds every entry
//! the writer had reported durable, and holds nothing that differs from what was written:
//! every replayed entry and the replayed snapshot equal what the writer derived from their
//! sequence numbers. Over several rounds the writer restarts on the same directory and
//! continues from what recovery returned.
//!
//! How: the test re-runs its own binary as the writer (selected by an environment variable).
//! The writer appends entries whose content is a function of their sequence number, flushes at
//! random intervals and prints `durable N` after each flush; it also writes snapshots (larger
//! than a segment) and compacts. The parent kills it after a seeded random delay. Seeds are
//! printed; `LOCKSTEP_SEED=n` replays the parent's schedule (the kill timing itself is real
//! time, so a replay is close, not exact).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lockstep::journal::entries::{Entry, RunState, ShardSnapshot, SharePartitionState, StateRun};
use lockstep::journal::{Journal, JournalConfig};
use lockstep::storage::mmap::MmapDir;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CHILD_DIR_ENV: &str = "LOCKSTEP_JOURNAL_WRITER_DIR";
const CHILD_SEED_ENV: &str = "LOCKSTEP_JOURNAL_WRITER_SEED";
const TEST_NAME: &str = "sigkilled_writer_loses_nothing_durable";
const READY: &str = "journal-writer-ready";

fn config() -> JournalConfig {
    JournalConfig {
        segment_bytes: 64 * 1024,
        snapshot_chunk_bytes: 4096,
    }
}

fn state_for(seq: u64, salt: u64) -> SharePartitionState {
    SharePartitionState {
        group_id: format!("g{}", (seq ^ salt) % 7),
        topic_id: [(seq % 251) as u8; 16],
        partition: (seq % 5) as i32,
        start_offset: Some(seq as i64),
        end_offset: None,
        state_epoch: (salt % 3) as i32,
        runs: (0..(seq % 9))
            .map(|i| StateRun {
                first_offset: (seq * 100 + i * 10) as i64,
                last_offset: (seq * 100 + i * 10 + 9) as i64,
                state: RunState::Acknowledged,
                delivery_count: (i % 4) as u16,
            })
            .collect(),
    }
}

/// The entry the writer appends at `seq`.
fn entry_for(seq: u64) -> Entry {
    Entry::SharePartitionUpdate(state_for(seq, 1))
}

/// The snapshot the writer writes when its begin marker gets `seq`.
fn snapshot_for(seq: u64) -> ShardSnapshot {
    ShardSnapshot {
        share_partitions: (0..200).map(|i| state_for(seq + i, 2)).collect(),
        ..ShardSnapshot::default()
    }
}

/// The child: write until killed.
fn writer(dir: &Path, seed: u64) -> ! {
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut journal, _) =
        Journal::open(MmapDir::open(dir).expect("lock"), config()).expect("open");
    let mut out = std::io::stdout().lock();
    // On its own line: libtest may have printed "test NAME ... " without a newline.
    writeln!(out, "\n{READY}").unwrap();
    out.flush().unwrap();
    loop {
        match rng.gen_range(0..200) {
            0..=189 => {
                let seq = journal.next_seq();
                assert_eq!(journal.append_entry(&entry_for(seq)).unwrap(), seq);
            }
            190..=195 => {
                journal.flush().unwrap();
                writeln!(out, "durable {}", journal.durable_end()).unwrap();
                out.flush().unwrap();
            }
            196..=197 => {
                let seq = journal.next_seq();
                let written = journal.write_shard_snapshot(&snapshot_for(seq)).unwrap();
                assert_eq!(written.begin_seq, seq);
            }
            _ => {
                journal.compact().unwrap();
            }
        }
    }
}

/// Checks the recovered journal; returns (next sequence number, first sequence number,
/// whether replay started from a snapshot).
fn check_recovery(dir: &Path, durable: u64) -> (u64, u64, bool) {
    let (_journal, recovered) =
        Journal::open(MmapDir::open(dir).expect("lock"), config()).expect("recovery");
    let cut = recovered.report.next_seq;
    assert!(
        cut >= durable,
        "recovered up to {cut}, but {durable} was reported durable"
    );
    let mut next = match &recovered.snapshot {
        Some(snapshot) => {
            assert_eq!(
                snapshot.state,
                snapshot_for(snapshot.begin_seq),
                "snapshot content"
            );
            snapshot.end_seq + 1
        }
        None => {
            assert_eq!(recovered.report.first_seq, 0);
            0
        }
    };
    for entry in &recovered.entries {
        // Between snapshots only ordinary entries; an abandoned snapshot's markers are skipped.
        assert!(entry.seq >= next, "entries in order");
        if entry.seq > next {
            assert!(
                recovered.report.abandoned_snapshots.contains(&next),
                "gap {next}..{} not explained by an abandoned snapshot",
                entry.seq
            );
        }
        assert_eq!(
            entry.entry,
            entry_for(entry.seq),
            "entry {} content",
            entry.seq
        );
        next = entry.seq + 1;
    }
    (
        cut,
        recovered.report.first_seq,
        recovered.snapshot.is_some(),
    )
}

#[test]
fn sigkilled_writer_loses_nothing_durable() {
    if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
        let seed = std::env::var(CHILD_SEED_ENV).unwrap().parse().unwrap();
        writer(Path::new(&dir), seed);
    }
    let seed: u64 = std::env::var("LOCKSTEP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    println!("seed {seed} (replay with LOCKSTEP_SEED={seed})");
    let mut rng = SmallRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut durable = 0;
    let mut total_lines = 0;
    let mut compacted = false;
    let mut from_snapshot = false;
    for round in 0..8 {
        let mut child = Command::new(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, tmp.path())
            .env(CHILD_SEED_ENV, rng.gen::<u64>().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines_rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait until the writer has recovered and started, then let it run a while.
        let start = Instant::now();
        loop {
            let line = lines_rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("round {round}: the writer did not start"));
            if line == READY {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(5..300)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        for line in lines_rx.try_iter() {
            if let Some(n) = line.strip_prefix("durable ") {
                durable = durable.max(n.parse::<u64>().unwrap());
                total_lines += 1;
            }
        }
        let (cut, first_seq, snapshot) = check_recovery(tmp.path(), durable);
        compacted |= first_seq > 0;
        from_snapshot |= snapshot;
        println!(
            "round {round}: killed after {:?}, durable {durable}, recovered {cut}",
            start.elapsed()
        );
        durable = cut; // recovery made everything it read durable
    }
    assert!(
        total_lines > 0,
        "the writer never reported a flush: the test proved nothing"
    );
    // The run must have reached rolls, snapshots and compaction to prove anything about them.
    assert!(
        compacted && from_snapshot,
        "the writer never got far enough (compacted: {compacted}, snapshot: {from_snapshot})"
    );
}
