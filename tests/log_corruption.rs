//! Damaged partition-log files at open: what recovery cuts, rebuilds or refuses.
//!
//! Proves, on real files (`FsStorage` in a temp dir) unless noted:
//! - a flipped byte in the last frame of the active segment is a torn tail: cut, reported
//!   and logged with the file and byte position; every earlier batch is intact;
//! - a flipped byte in the middle of the active segment, or anywhere in a sealed segment's
//!   frames after its last index entry, is an error naming the file and the byte position,
//!   and no file is changed; a flip elsewhere in a sealed segment is reported by the read
//!   that meets it (sealed segments are not rescanned at open);
//! - a truncated, damaged, stale or missing index is rebuilt, and reads are right after;
//! - a zero-filled tail is a clean end, not damage;
//! - a last segment whose header is torn (a crash right after a roll) is removed;
//! - a missing middle segment (a gap in offsets) is an error naming the file;
//! - past the durable position recorded in `log-start.checkpoint` (bytes never acknowledged
//!   as durable), a bad frame followed by valid-looking frames is a tail, cut and logged with
//!   the number of valid-looking frames discarded: a zero hole before surviving later frames
//!   (pages written back out of order at a power loss), and a torn frame whose payload (client
//!   data) embeds a valid frame at an aligned position; without the record (old data dirs)
//!   both stay errors (the strict rule);
//! - exhaustively (in memory): no single flipped byte anywhere in the active segment makes
//!   recovery return altered data: it either refuses to open or keeps a prefix of the batches.

use lockstep::log::batch::BatchBuilder;
use lockstep::log::index::{encode_index, IndexEntry};
use lockstep::log::{LogConfig, LogError, PartitionLog};
use lockstep::storage::file::{FsStorage, SimStorage, Storage, StorageFile};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 64,
        ..LogConfig::default()
    }
}

fn batch(i: u64) -> Vec<u8> {
    let mut b = BatchBuilder::new(1_000 + i as i64);
    for r in 0..=(i % 3) {
        b.record(
            1_000 + i as i64,
            Some(format!("k{i}").as_bytes()),
            Some(format!("value {i}/{r} {}", "x".repeat((i * 7 % 50) as usize)).as_bytes()),
        );
    }
    b.build()
}

/// A log with `n` batches, flushed and closed; returns its directory and all its records.
fn make_log(root: &Path, n: u64) -> (PathBuf, Vec<u8>) {
    let dir = root.join("topic-0");
    let (mut log, _) = PartitionLog::open(FsStorage, &dir, config(), 0).unwrap();
    for i in 0..n {
        log.append(&batch(i), 0).unwrap();
    }
    log.flush().unwrap();
    // As the broker's flush loop after a burst: one more flush writes the checkpoint slot that
    // records what the first made durable, so the active segment is under the strict rule 2
    // up to its end (FORMAT.md §4, rule 2').
    log.flush().unwrap();
    let all = log.read(0, usize::MAX).unwrap().records.to_vec();
    (dir, all)
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs
}

/// Frame positions of a segment file (reads it with the project's scan).
fn frame_positions(bytes: &[u8]) -> Vec<(usize, usize)> {
    lockstep::storage::frame::scan(bytes, 32)
        .map(|f| (f.position, f.end()))
        .collect()
}

fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x20;
    fs::write(path, bytes).unwrap();
}

/// Captures `tracing` output while `f` runs.
fn with_logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    (out, text)
}

#[test]
fn flipped_byte_in_the_tail_is_cut_and_logged() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, all) = make_log(tmp.path(), 30);
    let active = segment_files(&dir).pop().unwrap();
    let bytes = fs::read(&active).unwrap();
    let frames = frame_positions(&bytes);
    let (last_pos, _) = *frames.last().unwrap();
    flip(&active, last_pos + 40);

    let ((log, report), logs) =
        with_logs(|| PartitionLog::open(FsStorage, &dir, config(), 0).unwrap());
    assert_eq!(report.truncated.len(), 1);
    let cut = &report.truncated[0];
    assert_eq!(cut.path, active);
    assert_eq!(cut.position, last_pos as u64);
    assert_eq!(cut.bytes, (bytes.len() - last_pos) as u64);
    assert!(logs.contains("truncating a torn tail"), "{logs}");
    assert!(logs.contains(&active.display().to_string()), "{logs}");
    assert!(logs.contains(&format!("position={last_pos}")), "{logs}");
    assert_eq!(fs::metadata(&active).unwrap().len(), last_pos as u64);
    // Everything before the cut batch is intact.
    let kept = log.read(0, usize::MAX).unwrap().records;
    assert!(all.starts_with(&kept) && kept.len() < all.len());
    assert_eq!(log.log_end_offset(), log.durable_end_offset());
}

#[test]
fn flipped_byte_in_the_middle_is_an_error_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = make_log(tmp.path(), 30);
    let active = segment_files(&dir).pop().unwrap();
    let frames = frame_positions(&fs::read(&active).unwrap());
    assert!(frames.len() >= 3, "the active segment needs a middle frame");
    let (middle, _) = frames[1];
    flip(&active, middle + 30);
    let before = files(&dir);

    let err = PartitionLog::open(FsStorage, &dir, config(), 0)
        .err()
        .expect("corruption in the middle must not open");
    match &err {
        LogError::Corrupt { path, position, .. } => {
            assert_eq!(path, &active);
            assert_eq!(*position, middle as u64);
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&active.display().to_string()) && text.contains(&format!("byte {middle}")),
        "{text}"
    );
    assert_eq!(files(&dir), before, "a failed recovery changes no file");
}

#[test]
fn damage_in_a_sealed_segment_is_never_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = make_log(tmp.path(), 40);
    let segments = segment_files(&dir);
    assert!(segments.len() >= 3);
    let sealed = &segments[0];
    let frames = frame_positions(&fs::read(sealed).unwrap());

    // The last frame of a sealed segment: found at open (it follows the last index entry).
    let (last, _) = *frames.last().unwrap();
    flip(sealed, last + 30);
    let before = files(&dir);
    match PartitionLog::open(FsStorage, &dir, config(), 0) {
        Err(LogError::Corrupt { path, position, .. }) => {
            assert_eq!(&path, sealed);
            assert_eq!(position, last as u64);
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|(_, r)| r)),
    }
    assert_eq!(files(&dir), before);
    flip(sealed, last + 30); // undo

    // The first frame: not rescanned at open, reported by the read that meets it.
    let (first, _) = frames[0];
    flip(sealed, first + 30);
    let (log, report) = PartitionLog::open(FsStorage, &dir, config(), 0).unwrap();
    assert!(report.truncated.is_empty());
    match log.read(0, 100) {
        Err(LogError::Corrupt { path, position, .. }) => {
            assert_eq!(&path, sealed);
            assert_eq!(position, first as u64);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Later segments still read.
    let second_base = log.segments()[1].base_offset;
    assert!(log.read(second_base, 100).is_ok());
}

fn index_of(segment: &Path) -> PathBuf {
    segment.with_extension("index")
}

#[test]
fn truncated_damaged_stale_or_missing_index_is_rebuilt() {
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 5] = [
        ("truncated", |p| {
            let len = fs::metadata(p).unwrap().len();
            fs::OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(len - 13)
                .unwrap();
        }),
        ("flipped", |p| flip(p, 32 + 8 + 2)),
        ("missing", |p| fs::remove_file(p).unwrap()),
        ("header", |p| flip(p, 20)),
        ("stale", |p| {
            // Entries with valid CRCs that point at the wrong frames.
            let base: u64 = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            let entries = [
                IndexEntry {
                    offset: base,
                    position: 32,
                    max_timestamp_before: -1,
                    frame_crc: 0,
                },
                IndexEntry {
                    offset: base + 1,
                    position: 40,
                    max_timestamp_before: -1,
                    frame_crc: 1,
                },
            ];
            fs::write(p, encode_index(base, &entries)).unwrap();
        }),
    ];
    for (name, damage) in damages {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, all) = make_log(tmp.path(), 40);
        let sealed = segment_files(&dir)[0].clone();
        let good_index = fs::read(index_of(&sealed)).unwrap();
        damage(&index_of(&sealed));

        let (log, report) = PartitionLog::open(FsStorage, &dir, config(), 0).unwrap();
        assert_eq!(report.indexes_rebuilt, vec![index_of(&sealed)], "{name}");
        assert_eq!(log.read(0, usize::MAX).unwrap().records, all, "{name}");
        for offset in 0..log.log_end_offset() {
            let r = log.read(offset, 1).unwrap();
            assert!(r.first_offset <= offset && offset < r.next_offset, "{name}");
        }
        assert_eq!(
            fs::read(index_of(&sealed)).unwrap(),
            good_index,
            "{name}: rebuilt exactly"
        );
        drop(log);
        let (_, again) = PartitionLog::open(FsStorage, &dir, config(), 0).unwrap();
        assert!(
            again.indexes_rebuilt.is_empty(),
            "{name}: the rebuilt index is kept"
        );
    }
}

#[test]
fn zero_filled_tail_is_a_clean_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, all) = make_log(tmp.path(), 25);
    let active = segment_files(&dir).pop().unwrap();
    let len = fs::metadata(&active).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&active)
        .unwrap()
        .set_len(len + 4096)
        .unwrap();
    let (mut log, report) = PartitionLog::open(FsStorage, &dir, config(), 0).unwrap();
    assert!(report.truncated.is_empty());
    assert_eq!(report.zero_tails.len(), 1);
    assert_eq!(report.zero_tails[0].0, active);
    assert!(report.zero_tails[0].1 >= 4096, "{:?}", report.zero_tails);
    assert_eq!(log.read(0, usize::MAX).unwrap().records, all);
    let end = log.log_end_offset();
    log.append(&batch(99), 0).unwrap();
    log.flush().unwrap();
    drop(log);
    let (log, report) = PartitionLog::open(FsStorage, &dir, config(), 0).unwrap();
    // The zero tail is kept (preallocated space), and is a clean end again.
    assert!(report.truncated.is_empty());
    assert_eq!(log.read(end, 1).unwrap().first_offset, end);
}

#[test]
fn torn_header_of_a_new_last_segment_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, all) = make_log(tmp.path(), 40);
    let (log, _) = PartitionLog::open(FsStorage, &dir, config(), 0).unwrap();
    let end = log.log_end_offset();
    drop(log);
    // A crash right after a roll created the next segment: its header only partly written.
    let torn = dir.join(format!("{end:020}.log"));
    let header = lockstep::storage::frame::SegmentHeader::new(
        lockstep::storage::frame::SegmentKind::Log,
        end,
    )
    .encode();
    fs::write(&torn, &header[..11]).unwrap();
    let (log, report) = PartitionLog::open(FsStorage, &dir, config(), 0).unwrap();
    assert!(report.removed.contains(&torn));
    assert!(!torn.exists());
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.read(0, usize::MAX).unwrap().records, all);
}

fn reuse_config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        retention_bytes: Some(32 * 1024),
        segment_spares: 1,
        ..config()
    }
}

/// A log whose retention left spares that rolls reused, closed cleanly with its active
/// segment in a reused file (longer than its data, the earlier life's blocks after it).
/// Returns the directory, the log start, every record from it, and the active segment.
fn make_reused_log(root: &Path) -> (PathBuf, u64, Vec<u8>, PathBuf) {
    let dir = root.join("topic-0");
    let (mut log, _) = PartitionLog::open(FsStorage, &dir, reuse_config(), 0).unwrap();
    let mut reused_rolls = 0;
    let mut i = 0;
    // Until a roll reused a spare twice and the active segment is a quarter full.
    while reused_rolls < 2 || log.segments().last().unwrap().size_bytes < 4096 {
        let spares = log.spare_count();
        let info = log.append(&batch(i), 0).unwrap();
        reused_rolls += u32::from(info.rolled && log.spare_count() < spares);
        log.flush().unwrap();
        log.enforce_retention(0).unwrap();
        log.flush().unwrap();
        i += 1;
        assert!(i < 5000, "no roll reused a spare");
    }
    log.flush().unwrap();
    let start = log.log_start_offset();
    let all = log.read(start, usize::MAX).unwrap().records.to_vec();
    let active = log.segments().last().unwrap().clone();
    drop(log);
    // Kept as the earlier life left it: the file is longer than the data.
    assert!(fs::metadata(&active.path).unwrap().len() > active.size_bytes + 4096);
    let names = files(&dir);
    assert!(
        names.keys().filter(|n| n.ends_with(".spare")).count() <= 1,
        "{:?}",
        names.keys()
    );
    (dir, start, all, active.path)
}

#[test]
fn a_reused_segment_files_earlier_blocks_are_a_clean_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, start, all, active) = make_reused_log(tmp.path());
    let len = fs::metadata(&active).unwrap().len();
    let (mut log, report) = PartitionLog::open(FsStorage, &dir, reuse_config(), 0).unwrap();
    assert!(report.truncated.is_empty(), "{report:?}");
    assert_eq!(report.reused_tails.len(), 1, "{report:?}");
    assert_eq!(report.reused_tails[0].0, active);
    assert_eq!(fs::metadata(&active).unwrap().len(), len, "nothing cut");
    assert_eq!(log.log_start_offset(), start);
    assert_eq!(log.read(start, usize::MAX).unwrap().records, all);
    // Appends overwrite the earlier blocks; after a close, the same clean end.
    let end = log.log_end_offset();
    log.append(&batch(999), 0).unwrap();
    log.flush().unwrap();
    drop(log);
    let (mut log, report) = PartitionLog::open(FsStorage, &dir, reuse_config(), 0).unwrap();
    assert!(report.truncated.is_empty(), "{report:?}");
    assert_eq!(log.read(end, 1).unwrap().first_offset, end);
    assert_eq!(
        log.read(start, usize::MAX).unwrap().records.len(),
        all.len() + batch(999).len()
    );
    // A spare no roll used for a while is deleted by the next retention pass.
    let spares = |dir: &Path| files(dir).keys().filter(|n| n.ends_with(".spare")).count();
    assert_eq!((spares(&dir), log.spare_count()), (1, 1));
    log.enforce_retention(lockstep::constants::LOG_SEGMENT_SPARE_IDLE_MS - 1)
        .unwrap();
    assert_eq!(spares(&dir), 1);
    log.enforce_retention(lockstep::constants::LOG_SEGMENT_SPARE_IDLE_MS)
        .unwrap();
    assert_eq!((spares(&dir), log.spare_count()), (0, 0));
}

#[test]
fn a_frame_of_its_own_after_a_reused_files_earlier_blocks_is_not_a_clean_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, start, all, active) = make_reused_log(tmp.path());
    // A frame of the segment's own (its first one) found past the earlier life's blocks: as
    // if a block write of a flush that never completed landed out of order.
    let mut bytes = fs::read(&active).unwrap();
    let (first, first_end) = frame_positions(&bytes)[0];
    let own = bytes[first..first_end].to_vec();
    let at = bytes.len() / 4096 * 4096 - 4096;
    bytes[at..at + own.len()].copy_from_slice(&own);
    fs::write(&active, &bytes).unwrap();
    let (log, report) = PartitionLog::open(FsStorage, &dir, reuse_config(), 0).unwrap();
    // Past the recorded durable position (the end): a tail, cut with what follows.
    assert_eq!(report.truncated.len(), 1, "{report:?}");
    assert!(
        report.truncated[0]
            .reason
            .contains("discarding 1 valid-looking frame(s)"),
        "{report:?}"
    );
    assert!(report.reused_tails.is_empty(), "{report:?}");
    assert_eq!(log.read(start, usize::MAX).unwrap().records, all);
    assert_eq!(
        fs::metadata(&active).unwrap().len(),
        log.segments().last().unwrap().size_bytes
    );
}

#[test]
fn a_reused_file_whose_new_header_did_not_land_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, start, all, active) = make_reused_log(tmp.path());
    let (log, _) = PartitionLog::open(FsStorage, &dir, reuse_config(), 0).unwrap();
    let end = log.log_end_offset();
    drop(log);
    // A crash right after a roll renamed a spare to the next segment's name, before the seal
    // wrote its header: the file still holds its earlier life, header included.
    let next = dir.join(format!("{end:020}.log"));
    fs::copy(&active, &next).unwrap();
    let (log, report) = PartitionLog::open(FsStorage, &dir, reuse_config(), 0).unwrap();
    assert!(report.removed.contains(&next), "{report:?}");
    assert!(!next.exists());
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.read(start, usize::MAX).unwrap().records, all);
}

#[test]
fn a_missing_middle_segment_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = make_log(tmp.path(), 40);
    let segments = segment_files(&dir);
    assert!(segments.len() >= 3);
    fs::remove_file(&segments[1]).unwrap();
    match PartitionLog::open(FsStorage, &dir, config(), 0) {
        Err(LogError::Corrupt { path, reason, .. }) => {
            assert_eq!(path, segments[2]);
            assert!(reason.contains("previous segment"), "{reason}");
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|(_, r)| r)),
    }
}

/// Every single-byte flip in the active segment, in memory: recovery either refuses to open
/// (naming the segment) or keeps a prefix of the batches, never altered data.
#[test]
fn no_single_flip_in_the_active_segment_alters_data() {
    let dir = Path::new("/d/t-0");
    let big = LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 64,
        ..LogConfig::default()
    };
    let storage = SimStorage::new();
    let (mut log, _) = PartitionLog::open(storage.clone(), dir, big.clone(), 0).unwrap();
    for i in 0..8 {
        log.append(&batch(i), 0).unwrap();
    }
    log.flush().unwrap();
    let all = log.read(0, usize::MAX).unwrap().records;
    // The segment is preallocated: flip its frames and the first bytes of its zero tail.
    let data_end = log.size_bytes() as usize + 64;
    drop(log);
    let segment = dir.join(format!("{:020}.log", 0));
    let image = storage.contents(&segment).unwrap();
    let (mut refused, mut cut, mut unnoticed) = (0, 0, 0);
    for at in 0..data_end.min(image.len()) {
        let damaged_storage = storage.crash(0);
        let mut damaged = image.clone();
        damaged[at] ^= 0x04;
        damaged_storage
            .overwrite_durable(&segment, damaged)
            .unwrap();
        match PartitionLog::open(damaged_storage, dir, big.clone(), 0) {
            Err(LogError::Corrupt { path, .. }) => {
                assert_eq!(path, segment);
                refused += 1;
            }
            Err(other) => panic!("flip at {at}: unexpected error {other}"),
            Ok((log, _)) => {
                let kept = if log.log_end_offset() == 0 {
                    Vec::new()
                } else {
                    log.read(0, usize::MAX).unwrap().records.to_vec()
                };
                assert!(
                    all.starts_with(&kept),
                    "flip at {at}: altered data recovered"
                );
                if kept.len() < all.len() {
                    cut += 1;
                } else {
                    unnoticed += 1; // padding bytes, not covered by the CRC
                }
            }
        }
    }
    assert!(
        refused > 0 && cut > 0,
        "refused {refused}, cut {cut}, padding {unnoticed}"
    );
    assert!(unnoticed < image.len() / 10);
}

#[test]
fn storage_double_matches_real_files_for_the_same_operations() {
    // The same log operations through both storages leave the same bytes.
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = make_log(tmp.path(), 30);
    let sim = SimStorage::new();
    let sim_dir = Path::new("/x/topic-0");
    let (mut log, _) = PartitionLog::open(sim.clone(), sim_dir, config(), 0).unwrap();
    for i in 0..30 {
        log.append(&batch(i), 0).unwrap();
    }
    log.flush().unwrap();
    log.flush().unwrap(); // as make_log: the slot recording the first flush
    for (name, bytes) in files(&dir) {
        assert_eq!(sim.contents(&sim_dir.join(&name)), Some(bytes), "{name}");
    }
    assert_eq!(sim.list(sim_dir).unwrap().len(), files(&dir).len());
}

fn big_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024 * 1024,
        index_interval_bytes: 4096,
        ..LogConfig::default()
    }
}

/// A log with `durable` batches flushed (so the checkpoint records the durable position) and
/// then `extra` batches written but never flushed. Returns the directory, the segment, the
/// recorded durable position and the positions of the unflushed frames.
fn log_with_unsynced_tail(
    root: &Path,
    durable: u64,
    extra: &[Vec<u8>],
) -> (PathBuf, PathBuf, u64, Vec<u64>) {
    let dir = root.join("topic-0");
    let (mut log, _) = PartitionLog::open(FsStorage, &dir, big_config(), 0).unwrap();
    for i in 0..durable {
        log.append(&batch(i), 0).unwrap();
    }
    log.flush().unwrap();
    let recorded = log.size_bytes();
    let positions = extra
        .iter()
        .map(|b| log.append(b, 0).unwrap().position)
        .collect::<Vec<_>>();
    assert_eq!(positions[0], recorded);
    // The next flush's block write lands, its sync never happens (the process dies).
    let ticket = log.begin_flush().unwrap();
    for write in &ticket.chunks {
        let file = FsStorage.open(&write.path).unwrap();
        file.write_direct_at(write.bytes(), write.position).unwrap();
    }
    for write in &ticket.writes {
        let file = FsStorage.open(&write.path).unwrap();
        file.write_direct_at(&write.data, write.position).unwrap();
    }
    drop(log);
    let segment = segment_files(&dir).pop().unwrap();
    (dir, segment, recorded, positions)
}

#[test]
fn a_hole_past_the_durable_position_is_cut_with_what_follows() {
    let tmp = tempfile::tempdir().unwrap();
    let extra: Vec<_> = (100..104).map(batch).collect();
    let (dir, segment, recorded, positions) = log_with_unsynced_tail(tmp.path(), 10, &extra);
    // The first unsynced frame's page never reached the disk; the later ones did.
    let mut bytes = fs::read(&segment).unwrap();
    bytes[positions[0] as usize..positions[1] as usize].fill(0);
    fs::write(&segment, &bytes).unwrap();
    let without_record = tmp.path().join("copy");
    fs::create_dir(&without_record).unwrap();
    fs::copy(&segment, without_record.join(segment.file_name().unwrap())).unwrap();

    let ((log, report), logs) =
        with_logs(|| PartitionLog::open(FsStorage, &dir, big_config(), 0).unwrap());
    assert_eq!(report.truncated.len(), 1, "{report:?}");
    let cut = &report.truncated[0];
    assert_eq!(cut.position, recorded);
    assert_eq!(cut.bytes, bytes.len() as u64 - recorded);
    assert!(
        cut.reason.contains("discarding 3 valid-looking frame(s)"),
        "{}",
        cut.reason
    );
    assert!(logs.contains("truncating a torn tail"), "{logs}");
    assert!(logs.contains("durable position"), "{logs}");
    assert_eq!(
        log.log_end_offset(),
        19,
        "the 10 flushed batches hold 19 records"
    );
    assert_eq!(fs::metadata(&segment).unwrap().len(), recorded);
    drop(log);

    // Without a recorded position (a data dir from before the field), the strict rule.
    match PartitionLog::open(FsStorage, &without_record, big_config(), 0) {
        Err(LogError::Corrupt { position, .. }) => assert_eq!(position, recorded),
        other => panic!("expected Corrupt, got {:?}", other.map(|(_, r)| r)),
    }
}

#[test]
fn a_torn_frame_embedding_a_valid_frame_is_cut_not_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // Client data holding a valid frame, once at every alignment: one copy lands at an
    // 8-aligned file position whatever the record encoding before it.
    let mut forged = Vec::new();
    lockstep::storage::frame::encode_frame(
        &mut forged,
        lockstep::storage::frame::FrameMeta {
            id: 7,
            kind: 1,
            count: 1,
        },
        b"forged!!",
    );
    assert_eq!(forged.len() % 8, 0);
    let mut value = Vec::new();
    for _ in 0..8 {
        value.extend_from_slice(&forged);
        value.push(0xAA);
    }
    let mut b = BatchBuilder::new(5_000);
    b.record(5_000, Some(b"k"), Some(&value));
    let evil = b.build();
    let (dir, segment, recorded, positions) =
        log_with_unsynced_tail(tmp.path(), 10, std::slice::from_ref(&evil));
    // Where the last frame ends (the file is preallocated past it).
    let len = recorded + lockstep::storage::frame::frame_total_bytes(evil.len()) as u64;
    assert_eq!(positions, vec![recorded]);
    // The crash tore the last frame: its final bytes never reached the disk.
    fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(len - 16)
        .unwrap();
    let bytes = fs::read(&segment).unwrap();
    assert!(
        lockstep::storage::frame::next_valid_frame(&bytes, recorded as usize + 8).is_some(),
        "the payload must embed a valid frame for this test"
    );
    let without_record = tmp.path().join("copy");
    fs::create_dir(&without_record).unwrap();
    fs::copy(&segment, without_record.join(segment.file_name().unwrap())).unwrap();

    let (log, report) = PartitionLog::open(FsStorage, &dir, big_config(), 0).unwrap();
    assert_eq!(report.truncated.len(), 1, "{report:?}");
    assert_eq!(report.truncated[0].position, recorded);
    assert!(
        report.truncated[0]
            .reason
            .contains("valid-looking frame(s)"),
        "{}",
        report.truncated[0].reason
    );
    assert_eq!(
        log.log_end_offset(),
        19,
        "the 10 flushed batches hold 19 records"
    );
    drop(log);

    // The old strict rule refuses to start: the remote denial of service this fixes.
    assert!(matches!(
        PartitionLog::open(FsStorage, &without_record, big_config(), 0),
        Err(LogError::Corrupt { .. })
    ));
}

#[test]
fn damage_below_the_durable_position_is_still_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let extra: Vec<_> = (100..102).map(batch).collect();
    let (dir, segment, recorded, _) = log_with_unsynced_tail(tmp.path(), 10, &extra);
    let frames = frame_positions(&fs::read(&segment).unwrap());
    let (middle, _) = frames[4];
    assert!((middle as u64) < recorded);
    flip(&segment, middle + 30);
    let before = files(&dir);
    let err = PartitionLog::open(FsStorage, &dir, big_config(), 0)
        .err()
        .expect("damage to durable data must not open");
    match &err {
        LogError::Corrupt { path, position, .. } => {
            assert_eq!(path, &segment);
            assert_eq!(*position, middle as u64);
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    assert!(err.to_string().contains(&format!("byte {middle}")), "{err}");
    assert_eq!(files(&dir), before, "a failed recovery changes no file");
}
