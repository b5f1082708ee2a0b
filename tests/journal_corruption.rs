//! Recovery and the read-only inspector against damaged journals, on real files (memory maps
//! in a temporary directory).
//!
//! What it proves, case by case: a flipped byte or a torn frame header in the last frame of
//! the last segment is a torn tail, cut (zeroed) and reported, with every earlier entry intact;
//! a flipped byte in a middle frame, in the tail of a sealed segment or in a segment header is
//! an error naming the file and byte position, and nothing on disk changes; a zero-filled tail
//! is a clean end; a snapshot whose last frames are torn is abandoned and replay falls back to
//! the previous complete snapshot; a snapshot damaged in the middle of a segment is an error;
//! missing segments (gaps, lost history without a snapshot), misnamed segments, unknown entry
//! kinds and undecodable payloads are errors with file and position. The inspector reports the
//! same damage with the same positions, keeps decoding past it, and never writes.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use lockstep::constants::{JOURNAL_BLOCK_BYTES, JOURNAL_RELEASE_BYTES};

use lockstep::journal::entries::{Entry, RunState, ShardSnapshot, SharePartitionState, StateRun};
use lockstep::journal::inspect::{self, Event, ProblemKind, Severity};
use lockstep::journal::{segment_name, Journal, JournalConfig, JournalError, Recovered};
use lockstep::storage::frame::{encode_frame, FrameMeta};
use lockstep::storage::mmap::MmapDir;

fn config() -> JournalConfig {
    JournalConfig {
        segment_bytes: 4096,
        snapshot_chunk_bytes: 256,
    }
}

fn update(i: u64) -> Entry {
    Entry::SharePartitionUpdate(SharePartitionState {
        group_id: format!("group-{i}"),
        topic_id: [i as u8; 16],
        partition: (i % 3) as i32,
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

fn snapshot_of(partitions: u64) -> ShardSnapshot {
    ShardSnapshot {
        share_partitions: (0..partitions)
            .map(|i| match update(i) {
                Entry::SharePartitionUpdate(state) => state,
                _ => unreachable!(),
            })
            .collect(),
        ..ShardSnapshot::default()
    }
}

fn open(dir: &Path) -> Result<(Journal<MmapDir>, Recovered), JournalError> {
    Journal::open(MmapDir::open(dir).expect("lock the directory"), config())
}

/// Writes `count` updates, flushed, and returns them.
fn write(dir: &Path, count: u64) -> Vec<Entry> {
    let (mut journal, _) = open(dir).unwrap();
    let entries: Vec<Entry> = (0..count).map(update).collect();
    for entry in &entries {
        journal.append_entry(entry).unwrap();
    }
    journal.flush().unwrap();
    entries
}

#[derive(Debug, Clone)]
struct FrameAt {
    path: PathBuf,
    position: usize,
    seq: u64,
    bytes: usize,
}

/// The frames of the journal, as the inspector sees them.
fn frames(dir: &Path) -> Vec<FrameAt> {
    inspect::read_dir(dir)
        .unwrap()
        .filter_map(|event| match event {
            Event::Entry {
                path,
                position,
                seq,
                frame_bytes,
                ..
            } => Some(FrameAt {
                path,
                position,
                seq,
                bytes: frame_bytes,
            }),
            _ => None,
        })
        .collect()
}

fn problems(dir: &Path) -> Vec<(PathBuf, usize, ProblemKind, Severity, Option<usize>)> {
    inspect::read_dir(dir)
        .unwrap()
        .filter_map(|event| match event {
            Event::Problem {
                path,
                position,
                kind,
                severity,
                resumes_at,
                ..
            } => Some((path, position, kind, severity, resumes_at)),
            _ => None,
        })
        .collect()
}

fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x5a;
    fs::write(path, bytes).unwrap();
}

fn snapshot_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let bytes = fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

fn replayed(recovered: &Recovered) -> Vec<Entry> {
    recovered.entries.iter().map(|e| e.entry.clone()).collect()
}

#[test]
fn flipped_byte_in_the_tail_frame_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let entries = write(tmp.path(), 10);
    let all = frames(tmp.path());
    let last = all.last().unwrap().clone();
    flip(&last.path, last.position + 30);
    assert_eq!(
        problems(tmp.path()),
        vec![(
            last.path.clone(),
            last.position,
            ProblemKind::TornTail,
            Severity::Recoverable,
            None
        )]
    );
    let (mut journal, recovered) = open(tmp.path()).unwrap();
    let cut = recovered.report.truncated.clone().expect("tail cut");
    assert_eq!(
        (cut.path.as_path(), cut.position),
        (last.path.as_path(), last.position)
    );
    assert!(cut.bytes <= last.bytes);
    assert_eq!(replayed(&recovered), entries[..9]);
    let on_disk = fs::read(&last.path).unwrap();
    assert!(
        on_disk[last.position..].iter().all(|&b| b == 0),
        "the cut bytes are zero"
    );
    // The journal continues where the valid frames end.
    assert_eq!(journal.append_entry(&update(99)).unwrap(), 9);
    journal.flush().unwrap();
    drop(journal);
    let (_, recovered) = open(tmp.path()).unwrap();
    assert_eq!(recovered.entries.last().unwrap().entry, update(99));
    assert!(recovered.report.truncated.is_none());
}

#[test]
fn torn_frame_header_in_the_tail_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let entries = write(tmp.path(), 6);
    let last = frames(tmp.path()).pop().unwrap();
    // Only the first 10 bytes of the frame reached the disk.
    let mut bytes = fs::read(&last.path).unwrap();
    bytes[last.position + 10..last.position + last.bytes].fill(0);
    fs::write(&last.path, &bytes).unwrap();
    let (_, recovered) = open(tmp.path()).unwrap();
    assert_eq!(
        recovered.report.truncated.as_ref().unwrap().position,
        last.position
    );
    assert_eq!(replayed(&recovered), entries[..5]);
}

#[test]
fn zero_filled_tail_is_a_clean_end() {
    let tmp = tempfile::tempdir().unwrap();
    let entries = write(tmp.path(), 5);
    let (_, recovered) = open(tmp.path()).unwrap();
    assert!(recovered.report.truncated.is_none());
    assert_eq!(replayed(&recovered), entries);
    assert!(problems(tmp.path()).is_empty());
    let file = tmp.path().join(segment_name(0));
    assert_eq!(fs::metadata(&file).unwrap().len(), 4096, "preallocated");
}

#[test]
fn flipped_byte_in_a_middle_frame_is_an_error_and_nothing_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 10);
    let all = frames(tmp.path());
    let victim = all[4].clone();
    flip(&victim.path, victim.position + 40);
    let before = snapshot_files(tmp.path());
    match open(tmp.path()) {
        Err(JournalError::Corrupt {
            path,
            position,
            next_valid,
            ..
        }) => {
            assert_eq!(
                (path, position, next_valid),
                (victim.path.clone(), victim.position, all[5].position)
            );
        }
        other => panic!("expected corruption, got {:?}", other.map(|_| ())),
    }
    assert_eq!(
        snapshot_files(tmp.path()),
        before,
        "a failed recovery writes nothing"
    );
    let error = open(tmp.path()).err().unwrap().to_string();
    assert!(
        error.contains(&victim.path.display().to_string())
            && error.contains(&victim.position.to_string()),
        "{error}"
    );
    // The inspector reports the same spot and decodes past it.
    assert_eq!(
        problems(tmp.path()),
        vec![(
            victim.path.clone(),
            victim.position,
            ProblemKind::CorruptFrame,
            Severity::Corruption,
            Some(all[5].position)
        )]
    );
    let seqs: Vec<u64> = frames(tmp.path()).iter().map(|f| f.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 5, 6, 7, 8, 9]);
    assert_eq!(
        snapshot_files(tmp.path()),
        before,
        "the inspector writes nothing"
    );
}

#[test]
fn damage_in_a_sealed_segment_tail_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 80);
    let all = frames(tmp.path());
    let first = all[0].path.clone();
    let last_of_first = all.iter().rfind(|f| f.path == first).unwrap().clone();
    assert!(all.iter().any(|f| f.path != first), "several segments");
    flip(&first, last_of_first.position + 30);
    match open(tmp.path()) {
        Err(JournalError::SealedTail { path, position, .. }) => {
            assert_eq!((path, position), (first.clone(), last_of_first.position))
        }
        other => panic!("expected a sealed-tail error, got {:?}", other.map(|_| ())),
    }
    let found = problems(tmp.path());
    assert_eq!(found[0].2, ProblemKind::TornTail);
    assert_eq!(
        found[0].3,
        Severity::Corruption,
        "a torn sealed segment is corruption"
    );
}

#[test]
fn damaged_segment_header_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 3);
    let path = tmp.path().join(segment_name(0));
    flip(&path, 20);
    match open(tmp.path()) {
        Err(JournalError::Header { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected a header error, got {:?}", other.map(|_| ())),
    }
    let found = problems(tmp.path());
    assert_eq!((found[0].2, found[0].1), (ProblemKind::BadHeader, 0));
    assert_eq!(frames(tmp.path()).len(), 3, "frames are still decoded");
}

#[test]
fn torn_snapshot_falls_back_to_the_previous_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut journal, _) = open(tmp.path()).unwrap();
    journal.append_entry(&update(0)).unwrap();
    let first = journal.write_shard_snapshot(&snapshot_of(2)).unwrap();
    let between: Vec<Entry> = (1..4).map(update).collect();
    for entry in &between {
        journal.append_entry(entry).unwrap();
    }
    let second = journal.write_shard_snapshot(&snapshot_of(40)).unwrap();
    journal.flush().unwrap();
    drop(journal);
    let all = frames(tmp.path());
    let end = all
        .iter()
        .find(|f| f.seq == second.end_seq)
        .unwrap()
        .clone();
    let begin = all
        .iter()
        .find(|f| f.seq == second.begin_seq)
        .unwrap()
        .clone();
    assert_ne!(begin.path, end.path, "the large snapshot spans segments");
    flip(&end.path, end.position + 30); // the end marker is the last frame: a torn tail
    let (_, recovered) = open(tmp.path()).unwrap();
    let snapshot = recovered.snapshot.as_ref().unwrap();
    assert_eq!(
        (snapshot.begin_seq, snapshot.end_seq),
        (first.begin_seq, first.end_seq)
    );
    assert_eq!(snapshot.state, snapshot_of(2));
    assert_eq!(replayed(&recovered), between);
    assert_eq!(recovered.report.abandoned_snapshots, vec![second.begin_seq]);
}

#[test]
fn snapshot_damaged_in_the_middle_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut journal, _) = open(tmp.path()).unwrap();
    let written = journal.write_shard_snapshot(&snapshot_of(40)).unwrap();
    journal.append_entry(&update(1)).unwrap();
    journal.flush().unwrap();
    drop(journal);
    let all = frames(tmp.path());
    let chunk = all
        .iter()
        .find(|f| f.seq == written.begin_seq + 2)
        .unwrap()
        .clone();
    flip(&chunk.path, chunk.position + 50);
    let error = open(tmp.path()).err().expect("corruption");
    assert!(
        matches!(&error, JournalError::Corrupt { path, position, .. } if *path == chunk.path && *position == chunk.position),
        "{error}"
    );
    // The inspector decodes the rest and reports the snapshot as incomplete, not as valid.
    let events: Vec<Event> = inspect::read_dir(tmp.path()).unwrap().collect();
    assert!(!events.iter().any(|e| matches!(e, Event::Snapshot { .. })));
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Problem {
            kind: ProblemKind::SnapshotAbandoned,
            ..
        }
    )));
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Entry { seq, .. } if *seq == written.end_seq + 1)));
}

#[test]
fn snapshots_compaction_and_the_inspector_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut journal, _) = open(tmp.path()).unwrap();
    for i in 0..60 {
        journal.append_entry(&update(i)).unwrap();
    }
    let written = journal.write_shard_snapshot(&snapshot_of(5)).unwrap();
    let after: Vec<Entry> = (100..103).map(update).collect();
    for entry in &after {
        journal.append_entry(entry).unwrap();
    }
    assert!(
        journal.compact().unwrap().is_empty(),
        "the snapshot is not durable yet"
    );
    journal.flush().unwrap();
    let removed = journal.compact().unwrap();
    assert!(!removed.is_empty());
    drop(journal);
    let (_, recovered) = open(tmp.path()).unwrap();
    assert_eq!(recovered.snapshot.as_ref().unwrap().state, snapshot_of(5));
    assert_eq!(replayed(&recovered), after);
    assert!(recovered.report.first_seq > 0);
    let events: Vec<Event> = inspect::read_dir(tmp.path()).unwrap().collect();
    let snapshot = events.iter().find_map(|e| match e {
        Event::Snapshot {
            begin_seq,
            end_seq,
            state,
            ..
        } => Some((*begin_seq, *end_seq, state.clone())),
        _ => None,
    });
    let (begin, end, state) = snapshot.expect("the inspector assembles the snapshot");
    assert_eq!((begin, end), (written.begin_seq, written.end_seq));
    assert_eq!(
        state.unwrap()["share_partitions"].as_array().unwrap().len(),
        5
    );
    assert!(events.iter().all(|e| !e.is_corruption()), "{events:?}");
}

#[test]
fn missing_segments_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 90);
    let mut segments: Vec<PathBuf> = snapshot_files(tmp.path())
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert!(segments.len() >= 3);
    // A gap in the middle.
    let middle = segments.remove(1);
    let saved = fs::read(&middle).unwrap();
    fs::remove_file(&middle).unwrap();
    match open(tmp.path()) {
        Err(JournalError::SequenceGap {
            path,
            position: 0,
            expected,
            found,
        }) => {
            assert_eq!(path, segments[1]);
            assert!(found > expected);
        }
        other => panic!("expected a gap, got {:?}", other.map(|_| ())),
    }
    assert!(problems(tmp.path())
        .iter()
        .any(|p| p.2 == ProblemKind::SequenceGap && p.0 == segments[1]));
    fs::write(&middle, saved).unwrap();
    // Lost history without a snapshot that covers it.
    fs::remove_file(&segments[0]).unwrap();
    assert!(matches!(
        open(tmp.path()),
        Err(JournalError::MissingSnapshot { .. })
    ));
}

#[test]
fn misnamed_segment_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 3);
    fs::rename(
        tmp.path().join(segment_name(0)),
        tmp.path().join(segment_name(7)),
    )
    .unwrap();
    assert!(matches!(
        open(tmp.path()),
        Err(JournalError::HeaderMismatch { .. })
    ));
}

/// Appends a frame with a valid CRC after the last frame of the last segment.
fn plant_frame(dir: &Path, kind: u16, payload: &[u8]) -> (PathBuf, usize, u64) {
    let last = frames(dir).pop().unwrap();
    let at = last.position + last.bytes;
    let mut frame = Vec::new();
    encode_frame(
        &mut frame,
        FrameMeta {
            id: last.seq + 1,
            kind,
            count: 0,
        },
        payload,
    );
    let mut bytes = fs::read(&last.path).unwrap();
    bytes[at..at + frame.len()].copy_from_slice(&frame);
    fs::write(&last.path, bytes).unwrap();
    (last.path, at, last.seq + 1)
}

#[test]
fn unknown_kinds_and_undecodable_payloads_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 3);
    let (path, at, seq) = plant_frame(tmp.path(), 999, b"whatever");
    match open(tmp.path()) {
        Err(JournalError::UnknownKind {
            path: p,
            position,
            seq: s,
            kind: 999,
        }) => {
            assert_eq!((p, position, s), (path.clone(), at, seq))
        }
        other => panic!("expected an unknown kind, got {:?}", other.map(|_| ())),
    }
    assert!(problems(tmp.path())
        .iter()
        .any(|p| p.2 == ProblemKind::BadEntry && p.1 == at));

    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 3);
    let (path, at, seq) = plant_frame(tmp.path(), 17, b"not a flatbuffer at all");
    match open(tmp.path()) {
        Err(JournalError::BadEntry {
            path: p,
            position,
            seq: s,
            ..
        }) => {
            assert_eq!((p, position, s), (path, at, seq))
        }
        other => panic!("expected a bad entry, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn stale_tmp_files_are_removed_and_foreign_files_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 2);
    fs::write(
        tmp.path().join(format!("{}.tmp", segment_name(2))),
        b"half-created",
    )
    .unwrap();
    fs::write(tmp.path().join("notes.txt"), b"hello").unwrap();
    let (_, recovered) = open(tmp.path()).unwrap();
    assert_eq!(
        recovered.report.removed_tmp_files,
        vec![format!("{}.tmp", segment_name(2))]
    );
    assert_eq!(recovered.entries.len(), 2);
    assert!(tmp.path().join("notes.txt").exists());
}

#[test]
fn a_live_journal_can_be_inspected_and_not_opened_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut journal, _) = open(tmp.path()).unwrap();
    for i in 0..50 {
        journal.append_entry(&update(i)).unwrap();
    }
    journal.flush().unwrap();
    journal.append_entry(&update(50)).unwrap(); // written, not yet flushed
    assert!(
        MmapDir::open(tmp.path()).is_err(),
        "the directory is locked by the live journal"
    );
    let before = snapshot_files(tmp.path());
    let seqs: Vec<u64> = frames(tmp.path()).iter().map(|f| f.seq).collect();
    assert_eq!(
        seqs,
        (0..50).collect::<Vec<_>>(),
        "an unsynced entry is in the private map only"
    );
    assert_eq!(snapshot_files(tmp.path()), before);
    // The runtime's path: write the ticket's blocks (the engine: O_DIRECT, O_DSYNC), then
    // complete the ticket.
    let ticket = journal.begin_flush().unwrap().expect("one entry unsynced");
    assert_eq!(ticket.upto_seq, 50);
    let block = JOURNAL_BLOCK_BYTES;
    assert_eq!(ticket.write.position % block, 0);
    assert_eq!(ticket.write.data.len() as u64 % block, 0);
    assert!(ticket.write.position <= ticket.offset as u64);
    assert!(
        ticket.write.position + ticket.write.data.len() as u64
            >= (ticket.offset + ticket.len) as u64
    );
    let file = fs::OpenOptions::new()
        .write(true)
        .open(&ticket.write.path)
        .unwrap();
    file.write_all_at(&ticket.write.data, ticket.write.position)
        .unwrap();
    file.sync_data().unwrap();
    journal.complete_flush(ticket, Ok(())).unwrap();
    assert_eq!(journal.durable_end(), 51);
    assert!(journal.begin_flush().unwrap().is_none());
    let seqs: Vec<u64> = frames(tmp.path()).iter().map(|f| f.seq).collect();
    assert_eq!(
        seqs,
        (0..51).collect::<Vec<_>>(),
        "the flush wrote the entry"
    );
}

#[test]
fn unsynced_entries_reach_the_file_only_through_a_flush_or_a_clean_close() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut journal, _) = open(tmp.path()).unwrap();
    for i in 0..20 {
        journal.append_entry(&update(i)).unwrap();
    }
    journal.flush().unwrap();
    journal.append_entry(&update(20)).unwrap();
    // The segment is mapped private: an unsynced entry is not in the file (a process kill
    // loses it; it was never durable).
    let seqs: Vec<u64> = frames(tmp.path()).iter().map(|f| f.seq).collect();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>());
    // A clean close writes it.
    drop(journal);
    let seqs: Vec<u64> = frames(tmp.path()).iter().map(|f| f.seq).collect();
    assert_eq!(seqs, (0..21).collect::<Vec<_>>());
    let (_journal, recovered) = open(tmp.path()).unwrap();
    assert_eq!(recovered.entries.len(), 21);
}

#[test]
fn durable_pages_handed_back_read_as_written() {
    // More than a few release steps of entries, flushed through tickets written as the engine
    // writes them; the map's released pages must read back the same bytes (recovery of the
    // reopened journal decodes every entry, and appends after the release still land).
    let tmp = tempfile::tempdir().unwrap();
    let big = JournalConfig {
        segment_bytes: 8 << 20,
        snapshot_chunk_bytes: 256,
    };
    let open = |dir: &Path| Journal::open(MmapDir::open(dir).expect("lock"), big.clone());
    let (mut journal, _) = open(tmp.path()).unwrap();
    let mut seq = 0u64;
    let file_of = |path: &Path| fs::OpenOptions::new().write(true).open(path).unwrap();
    while (seq as usize) * 64 < 3 * JOURNAL_RELEASE_BYTES {
        for _ in 0..200 {
            journal.append_entry(&update(seq)).unwrap();
            seq += 1;
        }
        let ticket = journal.begin_flush().unwrap().expect("unsynced entries");
        let file = file_of(&ticket.write.path);
        file.write_all_at(&ticket.write.data, ticket.write.position)
            .unwrap();
        file.sync_data().unwrap();
        journal.complete_flush(ticket, Ok(())).unwrap();
    }
    journal.append_entry(&update(seq)).unwrap();
    seq += 1;
    journal.flush().unwrap();
    drop(journal);
    let (_journal, recovered) = open(tmp.path()).unwrap();
    assert_eq!(recovered.entries.len() as u64, seq);
    for (i, e) in recovered.entries.iter().enumerate() {
        assert_eq!(e.entry, update(i as u64));
    }
}

#[test]
fn a_failed_recovery_does_not_cut_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 90);
    let last = frames(tmp.path()).pop().unwrap();
    flip(&last.path, last.position + 30);
    fs::remove_file(tmp.path().join(segment_name(0))).unwrap();
    let before = snapshot_files(tmp.path());
    assert!(matches!(
        open(tmp.path()),
        Err(JournalError::MissingSnapshot { .. })
    ));
    assert_eq!(
        snapshot_files(tmp.path()),
        before,
        "nothing cut before the checks passed"
    );
}
