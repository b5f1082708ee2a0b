//! The `lockstep-inspect` binary on real segment files: what it reports for a clean log, a torn
//! tail, corruption in the middle and a damaged index, in tables and in JSON, and that it never
//! changes a file it reads.

use lockstep::log::batch::BatchBuilder;
use lockstep::log::{LogConfig, PartitionLog};
use lockstep::storage::file::FsStorage;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn inspect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockstep-inspect"))
        .args(args)
        .output()
        .expect("run lockstep-inspect")
}

/// A partition log with three sealed segments and an active one, flushed and closed.
fn write_log(dir: &Path) -> Vec<PathBuf> {
    write_log_flushed(dir, 1)
}

/// As [`write_log`], flushed `flushes` times: after one, the checkpoint records the active
/// segment's durable position at its header's end (the roll's seal wrote it); a second flush
/// records the whole segment.
fn write_log_flushed(dir: &Path, flushes: usize) -> Vec<PathBuf> {
    let config = LogConfig {
        segment_bytes: 8 * 1024,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    let (mut log, _) = PartitionLog::open(FsStorage, dir, config, 0).expect("open");
    for i in 0..40i64 {
        let mut builder = BatchBuilder::new(1_000 + i);
        for r in 0..3 {
            let value = format!("value-{i}-{r}-{}", "x".repeat(200));
            builder.record(
                1_000 + i,
                Some(format!("key-{i}").as_bytes()),
                Some(value.as_bytes()),
            );
        }
        log.append(&builder.build(), 0).expect("append");
    }
    for _ in 0..flushes {
        log.flush().expect("flush");
    }
    drop(log);
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    assert!(segments.len() >= 3, "the test needs several segments");
    segments
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).expect("inspect --json prints JSON")
}

fn frame_positions(report: &serde_json::Value, segment: usize) -> Vec<u64> {
    report["segments"][segment]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["position"].as_u64().unwrap())
        .collect()
}

#[test]
fn clean_log_verifies_and_lists_every_batch() {
    let dir = tempfile::tempdir().unwrap();
    let segments = write_log(dir.path());
    let out = inspect(&[
        "segments",
        dir.path().to_str().unwrap(),
        "--verify",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    assert_eq!(report["findings"].as_array().unwrap().len(), 0);
    let listed = report["segments"].as_array().unwrap();
    assert_eq!(listed.len(), segments.len());
    let total: u64 = listed
        .iter()
        .flat_map(|s| s["rows"].as_array().unwrap())
        .map(|r| r["records"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 120);
    let first = &listed[0]["rows"][0];
    assert_eq!(first["base_offset"], 0);
    assert_eq!(first["batch"]["magic"], 2);
    assert!(listed[0]["index"].as_str().unwrap().starts_with("ok"));

    let table = inspect(&["segments", dir.path().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("no problems found"), "{text}");
    assert!(text.contains("position"), "{text}");
}

#[test]
fn middle_corruption_fails_verify_with_file_and_byte_and_decodes_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let segments = write_log(dir.path());
    let clean = json(&inspect(&[
        "segments",
        segments[0].to_str().unwrap(),
        "--json",
    ]));
    let positions = frame_positions(&clean, 0);
    assert!(positions.len() >= 3);
    let bad = positions[1];
    let mut bytes = std::fs::read(&segments[0]).unwrap();
    bytes[bad as usize + 40] ^= 0x10;
    std::fs::write(&segments[0], &bytes).unwrap();

    let out = inspect(&[
        "segments",
        segments[0].to_str().unwrap(),
        "--verify",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    let finding = &report["findings"][0];
    assert_eq!(finding["severity"], "corruption");
    assert_eq!(finding["position"], bad);
    assert!(finding["file"].as_str().unwrap().ends_with(".log"));
    // Decoded past the damage: every other frame is still listed.
    assert_eq!(frame_positions(&report, 0).len(), positions.len() - 1);
    // Read-only: the file is exactly as we left it.
    assert_eq!(std::fs::read(&segments[0]).unwrap(), bytes);

    let table = inspect(&["segments", segments[0].to_str().unwrap(), "--verify"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains(&format!("at byte {bad}")), "{text}");
}

#[test]
fn damage_past_the_recorded_durable_position_is_a_tail_as_recovery_reads_it() {
    for flushes in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let segments = write_log_flushed(dir.path(), flushes);
        let last = segments.len() - 1;
        let clean = json(&inspect(&[
            "segments",
            dir.path().to_str().unwrap(),
            "--json",
        ]));
        let positions = frame_positions(&clean, last);
        assert!(positions.len() >= 3, "{positions:?}");
        let bad = positions[1];
        let mut bytes = std::fs::read(&segments[last]).unwrap();
        bytes[bad as usize + 40] ^= 0x10;
        std::fs::write(&segments[last], &bytes).unwrap();

        let out = inspect(&[
            "segments",
            dir.path().to_str().unwrap(),
            "--verify",
            "--json",
        ]);
        let report = json(&out);
        let finding = &report["findings"][0];
        assert_eq!(finding["position"], bad, "{report}");
        if flushes == 1 {
            // The slot records byte 32 of the active segment: recovery cuts from the bad frame.
            assert_eq!(out.status.code(), Some(0), "{report}");
            assert_eq!(finding["severity"], "repairable");
            let message = finding["message"].as_str().unwrap();
            assert!(message.contains("log-start.checkpoint"), "{message}");
            let discarded = format!("discarding {} valid-looking frames", positions.len() - 2);
            assert!(message.contains(&discarded), "{message}");
            assert_eq!(frame_positions(&report, last), vec![positions[0]]);
        } else {
            // The slot records the whole segment: corruption in the middle, as recovery says.
            assert_eq!(out.status.code(), Some(1), "{report}");
            assert_eq!(finding["severity"], "corruption");
            assert_eq!(frame_positions(&report, last).len(), positions.len() - 1);
        }
        assert_eq!(std::fs::read(&segments[last]).unwrap(), bytes, "read-only");
        // The broker's recovery agrees: it opens (cutting the tail) or refuses.
        let config = LogConfig {
            segment_bytes: 8 * 1024,
            index_interval_bytes: 1024,
            ..LogConfig::default()
        };
        let opened = PartitionLog::open(FsStorage, dir.path(), config, 0);
        assert_eq!(opened.is_ok(), flushes == 1);
    }
}

#[test]
fn torn_tail_and_damaged_index_are_repairable_findings() {
    let dir = tempfile::tempdir().unwrap();
    let segments = write_log(dir.path());
    let active = segments.last().unwrap();
    // The active segment is preallocated: its frames end where its zero tail begins.
    let bytes = std::fs::read(active).unwrap();
    let len = bytes.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(active)
        .unwrap();
    file.set_len(len - 40).unwrap();
    let index = segments[0].with_extension("index");
    let mut index_bytes = std::fs::read(&index).unwrap();
    let last = index_bytes.len() - 1;
    index_bytes[last] ^= 0xff;
    std::fs::write(&index, &index_bytes).unwrap();

    let out = inspect(&[
        "segments",
        dir.path().to_str().unwrap(),
        "--verify",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "repairable findings do not fail --verify"
    );
    let findings = json(&out)["findings"].as_array().unwrap().clone();
    assert_eq!(findings.len(), 2, "{findings:?}");
    assert!(findings.iter().all(|f| f["severity"] == "repairable"));
    assert!(findings
        .iter()
        .any(|f| f["message"].as_str().unwrap().contains("torn tail")));
    assert!(findings
        .iter()
        .any(|f| f["message"].as_str().unwrap().contains("index damaged")));
}

#[test]
fn not_a_segment_is_corruption_and_missing_path_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    std::fs::write(&path, b"this is not a segment").unwrap();
    let out = inspect(&["segments", path.to_str().unwrap(), "--verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("segment header"));
    let out = inspect(&["segments", dir.path().join("nope").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

mod journal {
    use super::{inspect, json};
    use lockstep::journal::entries::{Entry, RunState, SharePartitionState, StateRun};
    use lockstep::journal::{Journal, JournalConfig};
    use lockstep::storage::mmap::MmapDir;

    fn update(i: u64) -> Entry {
        Entry::SharePartitionUpdate(SharePartitionState {
            group_id: format!("group-{i}"),
            topic_id: [i as u8; 16],
            partition: 0,
            start_offset: Some(i as i64),
            end_offset: None,
            state_epoch: 1,
            runs: vec![StateRun {
                first_offset: i as i64,
                last_offset: i as i64 + 10,
                state: RunState::Acknowledged,
                delivery_count: 1,
            }],
        })
    }

    /// A journal of `count` flushed updates; returns the entry positions the tool reports.
    fn write(dir: &std::path::Path, count: u64) {
        let config = JournalConfig {
            segment_bytes: 4096,
            snapshot_chunk_bytes: 256,
        };
        let (mut journal, _) =
            Journal::open(MmapDir::open(dir).expect("journal dir"), config).expect("open");
        for i in 0..count {
            journal.append_entry(&update(i)).expect("append");
        }
        journal.flush().expect("flush");
    }

    fn entries(report: &serde_json::Value) -> Vec<&serde_json::Value> {
        report["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == "entry")
            .collect()
    }

    #[test]
    fn decodes_entries_and_flags_middle_corruption() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 12);
        let out = inspect(&[
            "journal",
            dir.path().to_str().unwrap(),
            "--verify",
            "--json",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report = json(&out);
        let listed = entries(&report);
        assert_eq!(listed.len(), 12);
        assert_eq!(listed[3]["seq"], 3);
        assert!(
            listed[3]["entry"].to_string().contains("group-3"),
            "{}",
            listed[3]
        );

        let table = inspect(&["journal", dir.path().to_str().unwrap()]);
        let text = String::from_utf8_lossy(&table.stdout);
        assert!(
            text.contains("group-5") && text.contains("no problems found"),
            "{text}"
        );

        // Damage the payload of the fifth entry of its segment: corruption in the middle.
        let victim = listed[4];
        let path = victim["path"].as_str().unwrap();
        let position = victim["position"].as_u64().unwrap() as usize;
        let mut bytes = std::fs::read(path).unwrap();
        bytes[position + 30] ^= 0x08;
        std::fs::write(path, &bytes).unwrap();
        let out = inspect(&[
            "journal",
            dir.path().to_str().unwrap(),
            "--verify",
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(1));
        let report = json(&out);
        let finding = &report["findings"][0];
        assert_eq!(finding["severity"], "corruption");
        assert_eq!(finding["position"], position);
        assert_eq!(entries(&report).len(), 11, "decoded past the damaged entry");
        assert_eq!(std::fs::read(path).unwrap(), bytes, "read-only");
    }
}

#[test]
fn a_reused_segment_files_earlier_life_is_a_clean_end_and_a_header_not_landed_is_repairable() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 1024,
        retention_bytes: Some(32 * 1024),
        segment_spares: 1,
        ..LogConfig::default()
    };
    let (mut log, _) = PartitionLog::open(FsStorage, dir.path(), config, 0).expect("open");
    let mut reused_rolls = 0;
    let mut i = 0i64;
    while reused_rolls < 2 || log.segments().last().unwrap().size_bytes < 4096 {
        let mut builder = BatchBuilder::new(1_000 + i);
        builder.record(1_000 + i, None, Some("x".repeat(300).as_bytes()));
        let spares = log.spare_count();
        let info = log.append(&builder.build(), 0).expect("append");
        reused_rolls += u32::from(info.rolled && log.spare_count() < spares);
        log.flush().expect("flush");
        log.enforce_retention(0).expect("retention");
        log.flush().expect("flush");
        i += 1;
    }
    let active = log.segments().last().unwrap().clone();
    let end = log.log_end_offset();
    drop(log);
    let path = dir.path().to_str().unwrap();
    let out = inspect(&["segments", path, "--verify", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report = json(&out);
    let last = report["segments"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["end"]
            .as_str()
            .unwrap()
            .contains("reused file's earlier life"),
        "{last}"
    );
    assert_eq!(last["next_offset"], end);

    // A roll renamed the spare to the next name, and its header never landed.
    std::fs::copy(&active.path, dir.path().join(format!("{end:020}.log"))).unwrap();
    let out = inspect(&["segments", path, "--verify", "--json"]);
    let findings = json(&out)["findings"].as_array().unwrap().clone();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0]["severity"], "repairable");
    assert!(
        findings[0]["message"]
            .as_str()
            .unwrap()
            .contains("new header did not land"),
        "{findings:?}"
    );
}

/// Producer snapshots: an idempotent producer and an open transaction read back in JSON and in
/// the table; a torn snapshot is a repairable finding (the broker skips it), not corruption.
#[test]
fn producer_snapshots_decode_and_a_torn_one_is_repairable() {
    use lockstep::producer_txn::partition::TxnPartition;
    use lockstep::shard::producer_snapshot::{self, ProducerSnapshotFile};
    use lockstep::shard::producer_state::{BatchRecord, ProducerStates};
    let dir = tempfile::tempdir().unwrap();
    let mut producers = ProducerStates::new();
    producers.record(
        42,
        3,
        BatchRecord {
            first_sequence: 0,
            last_sequence: 9,
            base_offset: 0,
            last_offset: 9,
            max_timestamp: 1_700,
        },
    );
    let mut txns = TxnPartition::new();
    txns.record_data(42, 3, true, 0);
    producer_snapshot::write(
        &FsStorage,
        dir.path(),
        &ProducerSnapshotFile::of(10, &producers, &txns),
    )
    .unwrap();
    let path = dir.path().to_str().unwrap();
    let out = inspect(&["producers", path, "--verify", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let report = json(&out);
    let snapshot = &report["snapshots"][0];
    assert_eq!(snapshot["offset"], 10);
    assert_eq!(snapshot["producers"][0]["producer_id"], 42);
    assert_eq!(snapshot["producers"][0]["epoch"], 3);
    assert_eq!(
        snapshot["producers"][0]["batches"][0],
        serde_json::json!([0, 9])
    );
    assert_eq!(snapshot["producers"][0]["open_txn_first_offset"], 0);
    let table = String::from_utf8(inspect(&["producers", path]).stdout).unwrap();
    assert!(
        table.contains("offset 10, 1 producer(s)") && table.contains("0..=9"),
        "{table}"
    );

    let file = dir.path().join(lockstep::log::snapshot_file_name(10));
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    let out = inspect(&["producers", path, "--verify", "--json"]);
    assert!(
        out.status.success(),
        "a torn snapshot is not corruption: {out:?}"
    );
    let findings = json(&out)["findings"].as_array().unwrap().clone();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0]["severity"], "repairable");
}
