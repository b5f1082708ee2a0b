use super::*;
use crate::log::batch::BatchBuilder;
use crate::log::segment::{parse_file_name, segment_file_name};
use crate::storage::file::SimStorage;
use std::rc::Rc;

fn batch(records: usize, ts: i64, fill: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(ts);
    let value = vec![b'v'; fill];
    for i in 0..records {
        b.record(ts + i as i64, None, Some(&value));
    }
    b.build()
}

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

fn open(storage: &SimStorage, config: LogConfig) -> (PartitionLog<SimStorage>, RecoveryReport) {
    PartitionLog::open(storage.clone(), Path::new("/data/t-0"), config, 0).unwrap()
}

/// A power loss (`seed`), then recovery: the log ends between `durable` and `written`
/// and reads whole to its end. True if recovery cut a hole before valid frames (rule 2').
fn recovers_between(
    storage: &SimStorage,
    seed: u64,
    config: LogConfig,
    durable: u64,
    written: u64,
) -> bool {
    let (recovered, report) = open(&storage.crash(seed), config);
    let end = recovered.log_end_offset();
    assert!(
        durable <= end && end <= written,
        "seed {seed}: {durable} {end} {written} {report:?}"
    );
    assert_eq!(recovered.read(0, usize::MAX).unwrap().next_offset, end);
    report
        .truncated
        .iter()
        .any(|t| t.reason.contains("recorded durable position"))
}

#[test]
fn parse_names() {
    assert_eq!(
        parse_file_name("00000000000000000042.log"),
        Some((42, false))
    );
    assert_eq!(
        parse_file_name("00000000000000000042.index"),
        Some((42, true))
    );
    assert_eq!(parse_file_name("42.log"), None);
    assert_eq!(parse_file_name("0000000000000000004x.log"), None);
}

#[test]
fn append_assigns_offsets_and_reads_back() {
    let storage = SimStorage::new();
    let (mut log, report) = open(&storage, small());
    assert!(report.created);
    let a = log.append(&batch(3, 10, 10), 0).unwrap();
    let b = log.append(&batch(2, 20, 10), 0).unwrap();
    assert_eq!((a.base_offset, a.last_offset), (0, 2));
    assert_eq!((b.base_offset, b.last_offset), (3, 4));
    assert_eq!(log.log_end_offset(), 5);
    assert_eq!(log.durable_end_offset(), 0);
    let read = log.read(4, 1).unwrap();
    assert_eq!(read.first_offset, 3);
    assert_eq!(read.next_offset, 5);
    assert_eq!(read.batches, 1, "at least one batch even over max_bytes");
    let h = batch::validate(&read.records).unwrap();
    assert_eq!(h.base_offset, 3);
    assert!(matches!(
        log.read(6, 100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(log.read(5, 100).unwrap().batches, 0);
    log.flush().unwrap();
    assert_eq!(log.durable_end_offset(), 5);
    assert_eq!(log.offset_for_timestamp(21).unwrap(), Some((3, 21)));
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 12)));
    assert_eq!(log.offset_for_timestamp(22).unwrap(), None);
}

#[test]
fn rolls_and_recovers_many_segments() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage, small());
    for i in 0..40 {
        log.append(&batch(1 + i % 3, i as i64, 100), 0).unwrap();
    }
    assert!(log.segment_count() > 3);
    log.flush().unwrap();
    let end = log.log_end_offset();
    let all = log.read(0, usize::MAX).unwrap();
    drop(log);
    let (log, report) = open(&storage, small());
    assert_eq!(log.log_end_offset(), end);
    assert!(report.truncated.is_empty() && report.indexes_rebuilt.is_empty());
    assert_eq!(log.read(0, usize::MAX).unwrap(), all);
    for offset in 0..end {
        let r = log.read(offset, 1).unwrap();
        assert!(r.first_offset <= offset && offset < r.next_offset);
    }
}

#[test]
fn failed_sync_poisons() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage, small());
    log.append(&batch(1, 0, 10), 0).unwrap();
    storage.fail_next_sync();
    let err = log.flush().unwrap_err();
    assert!(matches!(err, LogError::Poisoned { .. }));
    assert!(log.is_poisoned());
    match log.append(&batch(1, 0, 10), 0) {
        Err(LogError::Poisoned { cause }) => {
            assert!(cause.contains("injected fsync failure"), "{cause}")
        }
        other => panic!("expected Poisoned, got {other:?}"),
    }
    assert_eq!(log.durable_end_offset(), 0);
    assert_eq!(log.read(0, 100).unwrap().batches, 1, "reads still work");
}

#[test]
fn retention_and_delete_records_advance_the_start() {
    let storage = SimStorage::new();
    let mut config = small();
    config.retention_bytes = Some(4096);
    let (mut log, _) = open(&storage, config.clone());
    for i in 0..60 {
        log.append(&batch(1, i, 100), 0).unwrap();
    }
    let removed = log.enforce_retention(0).unwrap();
    assert!(!removed.is_empty());
    assert_eq!(log.log_start_offset(), removed.last().unwrap().next_offset);
    assert!(log.size_bytes() >= 4096);
    let first_removed = dir_file(&removed[0]);
    assert!(
        storage.exists(&first_removed),
        "unlinked only after the flush"
    );
    log.flush().unwrap();
    assert!(!storage.exists(&first_removed));
    let start = log
        .delete_records_before(log.log_start_offset() + 2)
        .unwrap();
    assert!(matches!(
        log.read(start - 1, 10),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    log.flush().unwrap();
    drop(log);
    let (log, _) = open(&storage, config);
    assert_eq!(log.log_start_offset(), start);
}

fn dir_file(removed: &RemovedSegment) -> PathBuf {
    Path::new("/data/t-0").join(segment_file_name(removed.base_offset))
}

#[test]
fn group_commit_ticket_covers_only_what_was_written_before() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage, small());
    log.append(&batch(2, 0, 10), 0).unwrap();
    let ticket = log.begin_flush().unwrap();
    assert_eq!(ticket.durable_end_offset, 2);
    assert!(log.begin_flush().is_none(), "one flush at a time");
    log.append(&batch(3, 0, 10), 0).unwrap();
    let result = sync_ticket(&storage, &ticket);
    log.complete_flush(ticket, result).unwrap();
    assert_eq!(log.durable_end_offset(), 2);
    let next = log.begin_flush().unwrap();
    assert_eq!(next.durable_end_offset, 5);
    log.complete_flush(next, Ok(())).unwrap();
    assert_eq!(log.durable_end_offset(), 5);
    // The durable position recorded after that flush is synced by one more ticket, which
    // holds only the checkpoint (and its directory, the file being new); then nothing.
    let record = log.begin_flush().unwrap();
    assert!(record.files.is_empty());
    assert!(record.chunks.is_empty());
    assert_eq!(record.writes.len(), 1);
    assert_eq!(
        record.writes[0].path,
        Path::new("/data/t-0").join(checkpoint::CHECKPOINT_FILE_NAME)
    );
    assert_eq!(record.durable_end_offset, 5);
    let result = sync_ticket(&storage, &record);
    log.complete_flush(record, result).unwrap();
    assert!(log.begin_flush().is_none());
}

fn segment_path(base: u64) -> PathBuf {
    Path::new("/data/t-0").join(segment_file_name(base))
}

#[test]
fn appends_are_written_behind_into_a_preallocated_segment() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage, small());
    let file = segment_path(0);
    // Preallocated to the segment size (a whole number of blocks), header and all written.
    assert_eq!(storage.contents(&file).unwrap().len(), 4096);
    log.append(&batch(2, 0, 10), 0).unwrap();
    let before = storage.contents(&file).unwrap();
    assert!(before[HEADER_BYTES_U64 as usize..].iter().all(|&b| b == 0));
    // Reads come from the in-memory tail until the block write lands.
    assert_eq!(log.read(0, usize::MAX).unwrap().batches, 1);
    let ticket = log.begin_flush().unwrap();
    assert_eq!(ticket.chunks.len(), 1);
    let write = &ticket.chunks[0];
    assert_eq!((write.position, write.bytes().len()), (0, 4096));
    assert!(
        ticket.files.is_empty(),
        "the block write carries the segment"
    );
    let result = sync_ticket(&storage, &ticket);
    log.complete_flush(ticket, result).unwrap();
    let size = log.size_bytes() as usize;
    let after = storage.contents(&file).unwrap();
    assert_eq!(after.len(), 4096, "a flush changes no file size");
    assert!(after[size..].iter().all(|&b| b == 0));
    // The next write rewrites the partially filled block, from its start.
    log.append(&batch(1, 0, 10), 0).unwrap();
    let ticket = log.begin_flush().unwrap();
    // (With the checkpoint's slot, which records the first flush's durable position.)
    let write = ticket.chunks.iter().find(|w| w.path == file).unwrap();
    assert_eq!(write.position, 0);
    assert_eq!(&write.bytes()[..size], &after[..size]);
    let result = sync_ticket(&storage, &ticket);
    log.complete_flush(ticket, result).unwrap();
    drop(log);
    let (log, report) = open(&storage, small());
    assert!(report.truncated.is_empty(), "{report:?}");
    assert_eq!(
        report.zero_tails.len(),
        1,
        "the preallocated tail is a clean end"
    );
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(
        storage.contents(&file).unwrap().len(),
        4096,
        "kept preallocated"
    );
}

#[test]
fn a_torn_block_write_is_a_torn_tail_and_keeps_what_was_durable() {
    let mut torn = 0;
    for seed in 0..200 {
        let storage = SimStorage::new();
        let config = LogConfig {
            segment_bytes: 64 * 1024,
            ..small()
        };
        let (mut log, _) = open(&storage, config.clone());
        for i in 0..(seed % 7 + 1) {
            log.append(&batch(1 + i as usize % 3, 0, 300), 0).unwrap();
        }
        log.flush().unwrap();
        let durable = log.durable_end_offset();
        for i in 0..(seed % 5 + 1) {
            log.append(&batch(1 + i as usize % 2, 0, 700), 0).unwrap();
        }
        let written = log.log_end_offset();
        // The block write is issued, its sync never happens: a power loss.
        let ticket = log.begin_flush().unwrap();
        for write in &ticket.chunks {
            let file = storage.open(&write.path).unwrap();
            file.write_direct_at(write.bytes(), write.position).unwrap();
        }
        let after = storage.crash(seed);
        let (log, report) = open(&after, config);
        let end = log.log_end_offset();
        assert!(durable <= end && end <= written, "seed {seed}: {end}");
        torn += usize::from(!report.truncated.is_empty());
        let all = log.read(0, usize::MAX).unwrap();
        assert_eq!(
            all.next_offset, end,
            "seed {seed}: every kept batch reads back"
        );
    }
    assert!(torn > 0, "some crashes tear the block write");
}

#[test]
fn no_roll_while_a_flush_is_in_flight() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage, small());
    log.append(&batch(1, 0, 100), 0).unwrap();
    let ticket = log.begin_flush().unwrap();
    for _ in 0..30 {
        log.append(&batch(1, 0, 100), 0).unwrap();
    }
    assert_eq!(
        log.segment_count(),
        1,
        "the segment runs over during the flight"
    );
    assert!(log.size_bytes() > small().segment_bytes);
    assert!(!log.roll_if_due(0).unwrap());
    let result = sync_ticket(&storage, &ticket);
    log.complete_flush(ticket, result).unwrap();
    // The next flush rolls it first; its seal writes the bytes that ran over, cuts the
    // file to its frames and syncs it (the roll itself wrote nothing).
    let ticket = log.begin_flush().unwrap();
    assert_eq!(log.segment_count(), 2);
    let sealed = log.segments()[0].clone();
    let seal = ticket.seal.as_ref().expect("the ticket after a roll seals");
    assert!(!seal.writes.is_empty(), "the bytes that ran over");
    assert_eq!(seal.len, sealed.size_bytes);
    assert!(storage.contents(&sealed.path).unwrap().len() as u64 > sealed.size_bytes);
    let result = sync_ticket(&storage, &ticket);
    log.complete_flush(ticket, result).unwrap();
    assert_eq!(
        storage.contents(&sealed.path).unwrap().len() as u64,
        sealed.size_bytes
    );
    assert_eq!(
        log.read(0, usize::MAX).unwrap().next_offset,
        log.log_end_offset()
    );
    let end = log.log_end_offset();
    drop(log);
    let (log, report) = open(&storage, small());
    assert!(report.truncated.is_empty() && report.indexes_rebuilt.is_empty());
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.read(0, usize::MAX).unwrap().next_offset, end);
}

/// Appends 10 KB batches, more than the largest tail chunk holds: the tail has a full
/// chunk to write behind.
fn append_until_a_chunk_is_full(log: &mut PartitionLog<SimStorage>) {
    let batches = 2 * crate::constants::LOG_TAIL_CHUNK_BYTES_MAX / 10_000;
    for _ in 0..batches {
        log.append(&batch(1, 0, 10_000), 0).unwrap();
    }
}

#[test]
fn writes_behind_only_past_a_named_position_and_the_flight_and_hold_rolls_and_flushes() {
    let storage = SimStorage::new();
    let config = LogConfig {
        segment_bytes: 64 << 20,
        ..LogConfig::default()
    };
    let (mut log, _) = open(&storage, config.clone());
    // No durable slot names the new segment yet: nothing is written ahead.
    append_until_a_chunk_is_full(&mut log);
    assert!(
        log.take_write_behind().is_none(),
        "rule 2' does not cover it yet"
    );
    log.flush().unwrap();
    log.append(&batch(1, 0, 100), 0).unwrap();
    log.flush().unwrap();
    // A flush in flight: a full chunk that starts inside its last block stays.
    append_until_a_chunk_is_full(&mut log);
    log.append(&batch(1, 0, 100), 0).unwrap();
    let ticket = log.begin_flush().unwrap();
    let flight_end = ticket.chunks.iter().map(ChunkWrite::end).max().unwrap();
    append_until_a_chunk_is_full(&mut log);
    assert!(
        log.take_write_behind().is_none(),
        "the first full chunk rewrites the flight's last block"
    );
    let result = sync_ticket(&storage, &ticket);
    log.complete_flush(ticket, result).unwrap();
    let write = log.take_write_behind().expect("full chunks to write ahead");
    assert!(write.chunks[0].position < flight_end);
    assert!(write.chunks.windows(2).all(|p| p[0].end() <= p[1].position));
    assert!(log.take_write_behind().is_none(), "handed out once");
    // While it is out: no roll, and the durable end does not move.
    let durable = log.durable_end_offset();
    assert!(!log.roll_if_due(u64::MAX / 2).unwrap());
    assert!(log.write_behind_in_flight());
    let result = super::write_behind(&storage, &write);
    log.complete_write_behind(write, result).unwrap();
    assert_eq!(
        log.durable_end_offset(),
        durable,
        "a write-behind declares nothing"
    );
    // The next ticket covers the rest, syncs the segment the write-behind wrote plainly
    // (whatever its own writes are), and declares all durable.
    let end = log.log_end_offset();
    let ticket = log.begin_flush().unwrap();
    assert_eq!(ticket.files, vec![log.active().path.clone()], "{ticket:?}");
    let result = sync_ticket(&storage, &ticket);
    log.complete_flush(ticket, result).unwrap();
    assert_eq!(log.durable_end_offset(), end);
    // More written ahead, the last chunk landed first and not synced, then a power loss:
    // the durable offsets survive, and whatever a hole leaves past them is a tail.
    append_until_a_chunk_is_full(&mut log);
    let write = log.take_write_behind().expect("full chunks to write ahead");
    assert!(write.chunks.len() > 1, "{write:?}");
    let last = write.chunks.last().unwrap();
    let file = storage.open(&last.path).unwrap();
    file.write_direct_at(last.bytes(), last.position).unwrap();
    drop(log);
    for seed in 0..8 {
        let (log, _) = open(&storage.crash(seed), config.clone());
        assert!(log.log_end_offset() >= end);
        assert_eq!(log.read(0, usize::MAX).unwrap().first_offset, 0);
    }
}

#[test]
fn a_flush_amid_write_behinds_covers_the_batches_below_the_first_in_flight() {
    for power_loss in [true, false] {
        let storage = SimStorage::new();
        let config = LogConfig {
            segment_bytes: 64 << 20,
            ..LogConfig::default()
        };
        let (mut log, _) = open(&storage, config.clone());
        for _ in 0..2 {
            log.append(&batch(1, 0, 100), 0).unwrap();
            log.flush().unwrap();
        }
        let durable = log.durable_end_offset();
        // (file position, base offset) of every batch from here on.
        let mut starts = Vec::new();
        let append_until_full = |log: &mut PartitionLog<SimStorage>, starts: &mut Vec<_>| {
            for _ in 0..2 * crate::constants::LOG_TAIL_CHUNK_BYTES_MAX / 10_000 {
                let info = log.append(&batch(1, 0, 10_000), 0).unwrap();
                starts.push((info.position, info.base_offset));
            }
        };
        append_until_full(&mut log, &mut starts);
        let first = log.take_write_behind().expect("a full chunk");
        append_until_full(&mut log, &mut starts);
        let second = log.take_write_behind().expect("another full chunk");
        let from = second.chunks[0].position;
        // The first starts in the block the last flush ended in: nothing new below it.
        assert!(log.begin_flush().is_none());
        let result = super::write_behind(&storage, &first);
        log.complete_write_behind(first, result).unwrap();
        let ticket = log
            .begin_flush()
            .expect("batches below the second write-behind");
        assert!(
            ticket.chunks.is_empty() && ticket.zero_fills.is_empty(),
            "{ticket:?}"
        );
        assert_eq!(ticket.files, vec![log.active().path.clone()]);
        let target = ticket.durable_end_offset;
        assert!(durable < target && target < log.log_end_offset());
        // Exactly the batches that end at or below the second write-behind's start (the
        // next one starts there).
        let next = starts.iter().rev().find(|&&(at, _)| at <= from).unwrap();
        assert_eq!(target, next.1);
        // Write-behinds go on while it is in flight (it writes no tail block).
        append_until_full(&mut log, &mut starts);
        let third = log.take_write_behind().expect("write-behinds go on");
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        assert_eq!(log.durable_end_offset(), target);
        assert!(log.begin_flush().is_none(), "the second is still in flight");
        if power_loss {
            // Now (the second and third never written): the prefix survives.
            drop(log);
            for seed in 0..8 {
                let (after, _) = open(&storage.crash(seed), config.clone());
                assert!(after.log_end_offset() >= target, "seed {seed}");
            }
            continue;
        }
        // A log start moved past the prefix waits for a whole flush.
        let end = log.log_end_offset();
        log.delete_records_before(end).unwrap();
        let result = super::write_behind(&storage, &second);
        log.complete_write_behind(second, result).unwrap();
        assert!(
            log.begin_flush().is_none(),
            "the start is past the batches it would cover"
        );
        let result = super::write_behind(&storage, &third);
        log.complete_write_behind(third, result).unwrap();
        let ticket = log.begin_flush().expect("a whole flush");
        assert_eq!(ticket.durable_end_offset, end);
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        assert_eq!(log.durable_end_offset(), end);
    }
}

#[test]
fn a_failed_write_behind_poisons_the_log() {
    let storage = SimStorage::new();
    let config = LogConfig {
        segment_bytes: 64 << 20,
        ..LogConfig::default()
    };
    let (mut log, _) = open(&storage, config);
    log.append(&batch(1, 0, 100), 0).unwrap();
    log.flush().unwrap();
    log.append(&batch(1, 0, 100), 0).unwrap();
    log.flush().unwrap();
    append_until_a_chunk_is_full(&mut log);
    let write = log.take_write_behind().expect("a full chunk");
    let durable = log.durable_end_offset();
    let error = log
        .complete_write_behind(write, Err(io::Error::other("EIO")))
        .unwrap_err();
    assert!(error.to_string().contains("EIO"), "{error}");
    assert!(log.is_poisoned());
    assert!(log.begin_flush().is_none());
    assert_eq!(log.durable_end_offset(), durable);
    assert!(log.append(&batch(1, 0, 100), 0).is_err());
}

#[test]
fn a_roll_waits_for_no_sync_and_a_crash_before_its_seal_recovers() {
    let mut kept_partial = 0;
    for seed in 0..300 {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, small());
        for _ in 0..(seed % 4 + 1) {
            log.append(&batch(1, 0, 100), 0).unwrap();
        }
        log.flush().unwrap();
        let durable = log.durable_end_offset();
        let syncs = storage.sync_count();
        while log.segment_count() == 1 {
            log.append(&batch(1 + (seed % 2) as usize, 0, 100), 0)
                .unwrap();
        }
        assert_eq!(
            storage.sync_count(),
            syncs,
            "seed {seed}: a roll syncs nothing"
        );
        let sealed_end = log.segments()[0].next_offset;
        log.append(&batch(1, 0, 100), 0).unwrap();
        let written = log.log_end_offset();
        let ticket = log.begin_flush().unwrap();
        let seal = ticket.seal.clone().expect("the ticket after a roll seals");
        assert!(ticket.dirs.is_empty(), "the seal syncs the directory");
        // Crash before the ticket (the roll wrote nothing), after the seal's writes were
        // issued (not synced), after its seal, or after the seal and the (unsynced) block
        // writes of the new segment.
        let stage = seed % 4;
        if stage == 1 {
            for write in &seal.writes {
                let file = storage.open(&write.path).unwrap();
                file.write_direct_at(write.bytes(), write.position).unwrap();
            }
        }
        if stage >= 2 {
            apply_seal(&storage, &seal).unwrap();
        }
        if stage == 3 {
            for write in &ticket.chunks {
                let file = storage.open(&write.path).unwrap();
                file.write_direct_at(write.bytes(), write.position).unwrap();
            }
        }
        let after = storage.crash(seed);
        let (recovered, report) =
            PartitionLog::open(after.clone(), Path::new("/data/t-0"), small(), 0)
                .unwrap_or_else(|e| panic!("seed {seed} stage {stage}: {e}"));
        let end = recovered.log_end_offset();
        assert!(durable <= end && end <= written, "seed {seed}: {end}");
        if stage == 0 {
            assert_eq!(end, durable, "seed {seed}: a roll writes nothing");
        }
        if stage >= 2 {
            assert!(
                end >= sealed_end,
                "seed {seed}: the sealed segment is whole"
            );
            assert!(report.truncated.iter().all(|t| t.path != seal.segment));
        }
        kept_partial += usize::from(stage == 1 && end > durable && end < sealed_end);
        assert_eq!(
            recovered.read(0, usize::MAX).unwrap().next_offset,
            end,
            "seed {seed}: every kept batch reads back"
        );
        // After the crash the recovered log goes on: the next roll seals through a flush.
        let mut recovered = recovered;
        while recovered.segment_count() < 3 {
            recovered.append(&batch(1, 0, 100), 0).unwrap();
            recovered.flush().unwrap();
        }
        let end = recovered.log_end_offset();
        drop(recovered);
        let (reopened, report) = open(&after, small());
        assert_eq!(reopened.log_end_offset(), end, "seed {seed}");
        assert!(report.truncated.is_empty() && report.indexes_rebuilt.is_empty());
        drop((log, ticket));
    }
    assert!(
        kept_partial > 0,
        "some crashes keep part of the unsealed segment"
    );
}

#[test]
fn a_tail_in_many_chunks_is_written_whole_and_a_torn_flush_is_a_torn_tail() {
    for seed in 0..24u64 {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, LogConfig::default());
        for _ in 0..(seed % 7 + 1) {
            log.append(&batch(3, 0, 1000), 0).unwrap();
        }
        log.flush().unwrap();
        let durable = log.durable_end_offset();
        // Several chunks' worth, not flushed: reads cross chunk boundaries in memory.
        for i in 0..(60 + seed as usize * 13) {
            log.append(&batch(1 + i % 5, 0, 900 + 37 * (i % 11)), 0)
                .unwrap();
        }
        let written = log.log_end_offset();
        assert_eq!(log.read(0, usize::MAX).unwrap().next_offset, written);
        let ticket = log.begin_flush().unwrap();
        let chunks: Vec<_> = ticket
            .chunks
            .iter()
            .filter(|w| w.path == segment_path(0))
            .collect();
        assert!(chunks.len() >= 2, "seed {seed}: {chunks:?}");
        for w in &chunks {
            assert_eq!(w.position % crate::constants::LOG_BLOCK_BYTES, 0);
            assert_eq!(
                w.bytes().len() as u64 % crate::constants::LOG_BLOCK_BYTES,
                0
            );
        }
        for pair in chunks.windows(2) {
            assert_eq!(pair[0].end(), pair[1].position, "seed {seed}: contiguous");
        }
        assert!(chunks.last().unwrap().end() >= log.size_bytes());
        if seed % 2 == 0 {
            let result = sync_ticket(&storage, &ticket);
            log.complete_flush(ticket, result).unwrap();
            assert_eq!(log.durable_end_offset(), written);
            assert_eq!(log.read(0, usize::MAX).unwrap().next_offset, written);
            drop(log);
            let after = storage.crash(seed);
            let (log, report) = open(&after, LogConfig::default());
            assert_eq!(log.log_end_offset(), written, "seed {seed}: {report:?}");
            assert!(report.truncated.is_empty(), "seed {seed}: {report:?}");
        } else {
            // In order, as the runtime writes them (each durable before the next): a power
            // loss after some of them, the next one issued and perhaps torn.
            let synced = (seed as usize / 2) % chunks.len();
            for (i, w) in chunks.iter().enumerate().take(synced + 1) {
                let file = storage.open(&w.path).unwrap();
                file.write_direct_at(w.bytes(), w.position).unwrap();
                if i < synced {
                    file.sync().unwrap();
                }
            }
            let after = storage.crash(seed);
            let (recovered, _) = open(&after, LogConfig::default());
            let end = recovered.log_end_offset();
            assert!(durable <= end && end <= written, "seed {seed}: {end}");
            assert_eq!(recovered.read(0, usize::MAX).unwrap().next_offset, end);
            drop((log, ticket));
        }
    }
}

#[test]
fn chunks_go_in_any_order_once_a_durable_slot_names_the_segment_and_a_hole_is_a_tail() {
    let mut holes = 0;
    for seed in 0..48u64 {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, LogConfig::default());
        // The first flush finds no slot; the second writes the slot that names segment 0
        // (durable once it completes): both in order.
        for round in 0..2 {
            log.append(&batch(3, 0, 1000), 0).unwrap();
            let ticket = log.begin_flush().unwrap();
            assert!(!ticket.chunks_any_order, "seed {seed}, flush {round}");
            let result = sync_ticket(&storage, &ticket);
            log.complete_flush(ticket, result).unwrap();
        }
        let durable = log.durable_end_offset();
        for i in 0..(60 + seed as usize * 13) {
            log.append(&batch(1 + i % 5, 0, 900 + 37 * (i % 11)), 0)
                .unwrap();
        }
        let written = log.log_end_offset();
        let ticket = log.begin_flush().unwrap();
        assert!(ticket.chunks_any_order, "seed {seed}");
        assert!(ticket.chunks.len() >= 2, "seed {seed}: {:?}", ticket.chunks);
        if seed % 3 == 0 {
            let result = sync_ticket(&storage, &ticket);
            log.complete_flush(ticket, result).unwrap();
            assert_eq!(log.durable_end_offset(), written);
            drop(log);
            let (log, report) = open(&storage.crash(seed), LogConfig::default());
            assert_eq!(log.log_end_offset(), written, "seed {seed}: {report:?}");
            continue;
        }
        // The writes issued (last chunk first), the one sync fails: a power loss keeps a
        // prefix of them, so later chunks without earlier ones, a hole with frames after it.
        storage.fail_next_sync();
        let result = sync_ticket(&storage, &ticket);
        assert!(result.is_err());
        assert!(log.complete_flush(ticket, result).is_err());
        drop(log);
        holes += usize::from(recovers_between(
            &storage,
            seed,
            LogConfig::default(),
            durable,
            written,
        ));
    }
    assert!(holes > 0, "no crash left a hole before valid frames");
}

#[test]
fn a_rolled_segment_is_written_in_any_order_from_its_first_flush() {
    let storage = SimStorage::new();
    let config = LogConfig {
        segment_bytes: 8192,
        ..small()
    };
    let (mut log, _) = open(&storage, config.clone());
    let mut any_order = Vec::new();
    for _ in 0..40 {
        log.append(&batch(2, 0, 300), 0).unwrap();
        let ticket = log.begin_flush().unwrap();
        let active = log.active().base_offset;
        if let Some(seal) = &ticket.seal {
            // The new segment's header block, then the slot naming it at the header's end.
            assert_eq!(seal.then.len(), 2, "{seal:?}");
            assert_eq!(seal.then[0].path, log.active().path);
            assert_eq!(seal.then[0].position, 0);
            let slot = checkpoint::decode_checkpoint(&{
                let mut file = vec![0u8; 2 * LOG_CHECKPOINT_SLOT_STRIDE_BYTES as usize];
                let at = seal.then[1].position as usize;
                file[at..at + seal.then[1].data.len()].copy_from_slice(&seal.then[1].data);
                file
            })
            .unwrap();
            assert_eq!(slot.durable, Some((active, SEGMENT_HEADER_BYTES as u32)));
        }
        any_order.push((active, ticket.seal.is_some(), ticket.chunks_any_order));
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
    }
    // The first segment: in order on its first two flushes (the first records its position,
    // the second makes that slot durable), then in any order. A rolled segment: in any order
    // from its first flush, the one whose seal writes the slot naming it.
    for (i, (base, _, unordered)) in any_order.iter().enumerate() {
        let flushes_before = any_order[..i].iter().filter(|f| f.0 == *base).count();
        let expect = *base != 0 || flushes_before >= 2;
        assert_eq!(*unordered, expect, "flush {i}: {any_order:?}");
    }
    assert!(any_order.iter().filter(|f| f.1).count() >= 3);
    drop(log);
    let (log, report) = open(&storage.crash(7), config);
    assert_eq!(log.durable_end_offset(), log.log_end_offset(), "{report:?}");
}

#[test]
fn a_crash_in_a_seal_flush_keeps_everything_durable() {
    // Any order from the seal's flush: a crash while its chunks are in flight leaves at
    // most a hole past the slot the seal wrote, a tail; a crash inside the seal leaves the
    // new segment without a header (removed) or with it and no frames.
    let config = LogConfig {
        segment_bytes: 256 * 1024,
        ..small()
    };
    let mut holes = 0;
    for seed in 0..64u64 {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, config.clone());
        let mut durable = 0;
        loop {
            let before = log.active().base_offset;
            for i in 0..(3 + seed as usize % 7) {
                log.append(&batch(1 + i % 3, 0, 700 + 53 * (i % 5)), 0)
                    .unwrap();
            }
            if log.active().base_offset != before {
                // Rolled: several chunks' worth into the new segment before its first flush.
                for i in 0..(90 + seed as usize % 40) {
                    log.append(&batch(1, 0, 900 + 37 * (i % 11)), 0).unwrap();
                }
            }
            let ticket = log.begin_flush().unwrap();
            if ticket.seal.is_none() {
                let result = sync_ticket(&storage, &ticket);
                log.complete_flush(ticket, result).unwrap();
                durable = log.durable_end_offset();
                continue;
            }
            assert!(ticket.chunks_any_order, "seed {seed}");
            assert!(ticket.chunks.len() >= 2, "seed {seed}: {:?}", ticket.chunks);
            let written = log.log_end_offset();
            let seal = ticket.seal.clone().unwrap();
            if seed % 4 == 0 {
                // A power loss inside the seal: after none, one or both of its `then` writes.
                let cut = Seal {
                    then: seal.then[..(seed as usize / 4) % 3].to_vec(),
                    ..seal
                };
                apply_seal(&storage, &cut).unwrap();
            } else {
                // After the seal: the chunks issued last first, a power loss before their
                // one sync keeps a prefix of them (later chunks without earlier ones).
                apply_seal(&storage, &seal).unwrap();
                for chunk in ticket.chunks.iter().rev() {
                    storage
                        .open(&chunk.path)
                        .unwrap()
                        .write_direct_at(chunk.bytes(), chunk.position)
                        .unwrap();
                }
            }
            // The process dies: nothing more is written.
            std::mem::forget((log, ticket));
            holes += usize::from(recovers_between(
                &storage,
                seed,
                config.clone(),
                durable,
                written,
            ));
            break;
        }
    }
    assert!(holes > 0, "no crash left a hole before valid frames");
}

#[test]
fn zeros_are_written_ahead_of_small_flushes_only() {
    use crate::constants::LOG_ZERO_FILL_BYTES;
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage, LogConfig::default());
    let segment = log.segments()[0].path.clone();
    let flush = |log: &mut PartitionLog<SimStorage>, records: usize| {
        log.append(&batch(records, 0, 1000), 0).unwrap();
        let ticket = log.begin_flush().unwrap();
        let end = ticket
            .chunks
            .iter()
            .filter(|w| w.path == segment)
            .map(ChunkWrite::end)
            .max()
            .unwrap();
        let fills = ticket.zero_fills.clone();
        let result = sync_ticket(&storage, &ticket);
        log.complete_flush(ticket, result).unwrap();
        (end, fills)
    };
    // A small flush zeroes a fill's worth just past its write.
    let (end, fills) = flush(&mut log, 2);
    assert_eq!(fills.len(), 1);
    assert_eq!(
        (fills[0].position, fills[0].len),
        (end, LOG_ZERO_FILL_BYTES)
    );
    // Small flushes inside the zeroed range write none, until less than half is left.
    let mut zeroed = end + LOG_ZERO_FILL_BYTES;
    let mut refilled = false;
    for _ in 0..200 {
        let (end, fills) = flush(&mut log, 2);
        match fills.as_slice() {
            [] => assert!(zeroed - end >= LOG_ZERO_FILL_BYTES / 2),
            [fill] => {
                assert!(zeroed - end < LOG_ZERO_FILL_BYTES / 2);
                assert_eq!(fill.position, zeroed);
                zeroed = fill.position + fill.len;
                refilled = true;
            }
            more => panic!("{more:?}"),
        }
    }
    assert!(refilled);
    // A flush that runs a fill's worth or more past the zeroed end writes no zeros.
    let (end, fills) = flush(&mut log, 3 * LOG_ZERO_FILL_BYTES as usize / 1000);
    assert!(end >= zeroed + LOG_ZERO_FILL_BYTES);
    assert!(fills.is_empty(), "{fills:?}");
    // The next small flush zeroes ahead again.
    let (end, fills) = flush(&mut log, 2);
    assert_eq!(fills.len(), 1);
    assert_eq!(fills[0].position, end);
}

#[test]
fn a_log_closed_before_its_seal_completes_seals_first() {
    // A roll's seal pending (even seeds) or in a ticket that never completed (odd), then
    // the log is closed (its tail left in the page cache, as a process that exits) and
    // the power fails, at once or after a clean reopen. The tail written at close puts
    // the new segment's header on the file: the sealed segment must be durable first,
    // else a crash can keep that header and tear the sealed segment's last bytes.
    for seed in 0..400u64 {
        let storage = SimStorage::new();
        let (mut log, _) = open(&storage, small());
        log.append(&batch(1, 0, 100), 0).unwrap();
        log.flush().unwrap();
        while log.segment_count() == 1 {
            log.append(&batch(1 + (seed % 3) as usize, 0, 100), 0)
                .unwrap();
        }
        let sealed = log.segments()[0].clone();
        log.append(&batch(1, 0, 100), 0).unwrap();
        let written = log.log_end_offset();
        let ticket = (seed % 2 == 1).then(|| log.begin_flush().unwrap());
        if let Some(ticket) = &ticket {
            assert!(ticket.seal.is_some(), "the ticket after a roll seals");
        }
        log.close().unwrap();
        drop(ticket);
        let storage = if seed % 4 >= 2 {
            let (reopened, report) = open(&storage, small());
            assert_eq!(reopened.log_end_offset(), written, "seed {seed}");
            assert!(
                report.truncated.is_empty() && report.indexes_rebuilt.is_empty(),
                "seed {seed}: the sealed segment's index was written at close: {report:?}"
            );
            drop(reopened);
            storage
        } else {
            storage
        };
        let after = storage.crash(seed);
        let (recovered, report) = PartitionLog::open(after, Path::new("/data/t-0"), small(), 0)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let end = recovered.log_end_offset();
        assert!(
            sealed.next_offset <= end && end <= written,
            "seed {seed}: the sealed segment is whole: {end}"
        );
        assert!(report.truncated.iter().all(|t| t.path != sealed.path));
        assert!(report
            .indexes_rebuilt
            .iter()
            .all(|p| *p != sealed.path.with_extension("index")));
        assert_eq!(
            recovered.read(0, usize::MAX).unwrap().next_offset,
            end,
            "seed {seed}: every kept batch reads back"
        );
    }
}

/// Fills `log`'s read cache as the runtime does, from the file's bytes (or, with
/// `poison`, from wrong bytes, to prove the reads used the cache).
fn read_ahead_from_files(
    storage: &SimStorage,
    log: &mut PartitionLog<SimStorage>,
    offset: u64,
    max_bytes: usize,
) -> usize {
    let parts = log.read_ahead(offset, max_bytes);
    for part in &parts {
        assert_eq!(part.position % crate::constants::LOG_BLOCK_BYTES, 0);
        assert_eq!(part.len % crate::constants::LOG_BLOCK_BYTES, 0);
        let file = storage.contents(&part.path).unwrap();
        let from = part.position as usize;
        let to = (from + part.len as usize).min(file.len());
        let data: CachedBytes = Rc::new(file[from..to].to_vec());
        log.fill_read_cache(part, (to - from) as u64, data);
    }
    parts.len()
}

#[test]
fn reads_ahead_serve_reads_and_change_nothing_they_return() {
    let storage = SimStorage::new();
    let config = LogConfig {
        segment_bytes: 64 * 1024,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    let (mut log, _) = open(&storage, config);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut filled = 0;
    for round in 0..400 {
        let n = 1 + next() % 4;
        log.append(&batch(n as usize, round, (next() % 900) as usize), 0)
            .unwrap();
        if next() % 3 == 0 {
            log.flush().unwrap();
        }
        let end = log.log_end_offset();
        let offset = next() % end;
        let max_bytes = 1 + (next() % 20_000) as usize;
        let before = log.read(offset, max_bytes).unwrap();
        filled += read_ahead_from_files(&storage, &mut log, offset, max_bytes);
        assert!(log.read_cache_bytes() <= LOG_READ_CACHE_BYTES_MAX);
        assert_eq!(
            log.read(offset, max_bytes).unwrap(),
            before,
            "round {round}"
        );
        // Everything the read needed from the files is in memory now.
        assert!(
            log.read_ahead(offset, max_bytes).is_empty(),
            "round {round}"
        );
        let records = 1 + next() % 10;
        let limited = log.read_records(offset, usize::MAX, records).unwrap();
        assert!(limited.batches >= 1);
        assert!(limited.next_offset - offset >= records || limited.next_offset == end);
        let full = log.read(offset, usize::MAX).unwrap();
        assert_eq!(&full.records[..limited.records.len()], &limited.records[..]);
    }
    assert!(
        log.segment_count() > 3 && filled > 5,
        "{filled} fills, {} segments",
        log.segment_count()
    );
    log.drop_read_cache();
    assert_eq!(log.read_cache_bytes(), 0);
}

/// A consumer reading through a lagging log, each read planned and read ahead first (as
/// a Fetch does): no read takes bytes from the file. Filling one read's plan must not drop
/// the chunk an earlier read ahead left that this read starts in (the lowest one).
#[test]
fn consecutive_reads_ahead_never_fall_back_to_the_file() {
    let storage = SimStorage::new();
    let config = LogConfig {
        segment_bytes: 4 << 20,
        ..LogConfig::default()
    };
    let (mut log, _) = open(&storage, config);
    for round in 0..800 {
        log.append(&batch(10, round, 1_600), 0).unwrap();
    }
    log.flush().unwrap();
    for max_bytes in [1 << 20, 300_000, 700_000] {
        log.drop_read_cache();
        let mut offset = 0;
        while offset < log.log_end_offset() {
            read_ahead_from_files(&storage, &mut log, offset, max_bytes);
            let before = log.file_reads();
            let read = log.read(offset, max_bytes).unwrap();
            assert_eq!(log.file_reads(), before, "max {max_bytes}, offset {offset}");
            assert!(log.read_cache_bytes() <= 2 * LOG_READ_CACHE_BYTES_MAX);
            offset = read.next_offset;
        }
    }
    // Without the read ahead, the same reads take bytes from the file.
    log.drop_read_cache();
    log.read(0, 1 << 20).unwrap();
    assert!(log.file_reads() > 0);
}

#[test]
fn reads_take_read_ahead_bytes_instead_of_the_file() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage, small());
    for i in 0..40 {
        log.append(&batch(1, i, 100), 0).unwrap();
    }
    log.flush().unwrap();
    let sealed = log.segments()[0].clone();
    let parts = log.read_ahead(0, 1000);
    assert_eq!(parts[0].path, sealed.path);
    // A chunk whose bytes differ from the file: the read checks its CRC and says so.
    let mut wrong = storage.contents(&sealed.path).unwrap();
    wrong[HEADER_BYTES_U64 as usize + 40] ^= 0xff;
    let len = parts[0].len.min(wrong.len() as u64);
    log.fill_read_cache(&parts[0], len, Rc::new(wrong[..len as usize].to_vec()));
    assert!(matches!(log.read(0, 1000), Err(LogError::Corrupt { .. })));
    log.drop_read_cache();
    assert_eq!(log.read(0, 1000).unwrap().first_offset, 0);
}

#[test]
fn invalid_batches_are_refused_without_side_effects() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage, small());
    let mut bad = batch(1, 0, 10);
    bad[30] ^= 1;
    assert!(matches!(
        log.append(&bad, 0),
        Err(LogError::InvalidBatch(BatchError::CrcMismatch { .. }))
    ));
    assert_eq!(log.log_end_offset(), 0);
    assert!(!log.is_poisoned());
}
