//! Opening a partition log: recovery. The rule (see the parent module's durability argument
//! and schemas/FORMAT.md §4): segments wholly below the durable log start are leftovers and
//! are deleted; the last segment is scanned whole and a torn tail cut (a last segment whose
//! header is torn and which holds no frame is removed); sealed segments get their index
//! checked against the segment (rebuilt from a full scan if missing or damaged) and the frames
//! after its last entry scanned, any bad frame being corruption; segments must be contiguous;
//! then what was kept is synced.
//!
//! The active segment's scan uses the durable position recorded in `log-start.checkpoint`
//! (checkpoint.rs has the crash argument) when it names that segment: a bad frame at or past
//! it starts a tail that is cut, even if valid-looking frames follow (FORMAT.md §4 rule 2');
//! before it, or with no record (old data dirs), the strict rule. After the scan the whole
//! active segment is durable and is recorded as such.

use super::checkpoint::{self, CHECKPOINT_FILE_NAME};
use super::group_commit::GroupCommit;
use super::index;
use super::partition::{
    io_err, CheckpointState, LogConfig, LogError, PartitionLog, RecoveryReport, TruncatedTail,
    HEADER_BYTES_U64,
};
use super::segment::{
    align_down, align_up, index_file_name, next_own_frame, parse_file_name, parse_snapshot_name,
    parse_spare_name, scan_frames, segment_file_name, spare_file_name, ScanOutcome, Segment, Tail,
};
use crate::constants::SEGMENT_HEADER_BYTES;
use crate::storage::file::{Storage, StorageFile};
use crate::storage::frame::{SegmentHeader, SegmentKind};
use std::collections::VecDeque;
use std::path::Path;

impl<S: Storage> PartitionLog<S> {
    /// Opens (or creates) the log in `dir`, recovering it: see the module docs. After `open`
    /// everything in the log is durable.
    pub fn open(
        storage: S,
        dir: &Path,
        config: LogConfig,
        now_ms: u64,
    ) -> Result<(PartitionLog<S>, RecoveryReport), LogError> {
        config.validate()?;
        let mut report = RecoveryReport::default();
        if !storage.exists(dir) {
            storage
                .create_dir_all(dir)
                .map_err(io_err("create directory", dir))?;
            report.created = true;
        }
        let names = storage.list(dir).map_err(io_err("list", dir))?;
        let mut bases = Vec::new();
        let mut index_bases = std::collections::BTreeSet::new();
        let mut has_checkpoint = false;
        let mut spares = Vec::new();
        for name in &names {
            match parse_file_name(name) {
                Some((base, false)) => bases.push(base),
                Some((base, true)) => {
                    index_bases.insert(base);
                }
                None if name == CHECKPOINT_FILE_NAME => has_checkpoint = true,
                None if parse_spare_name(name).is_some() => spares.push(dir.join(name)),
                // Producer snapshots and their temporary files belong to the shard.
                None if parse_snapshot_name(name.trim_end_matches(".tmp")).is_some() => {}
                None => {
                    tracing::warn!(dir = %dir.display(), file = %name, "ignoring unknown file in partition directory")
                }
            }
        }
        bases.sort_unstable();

        // The durable log start offset.
        let checkpoint_path = dir.join(CHECKPOINT_FILE_NAME);
        let mut checkpoint = CheckpointState {
            path: checkpoint_path.clone(),
            file: None,
            generation: 0,
            written_start: 0,
            written_durable: None,
            dirty: false,
            pending: None,
            durable_start: 0,
            durable_slot: None,
        };
        let mut checkpoint_start = None;
        if has_checkpoint {
            let file = storage
                .open(&checkpoint_path)
                .map_err(io_err("open", &checkpoint_path))?;
            let bytes = file.read_all().map_err(io_err("read", &checkpoint_path))?;
            // What was read may be in the page cache only (a killed process): sync it, so that
            // both slots as read are durable before recovery writes a new one (checkpoint.rs).
            file.sync().map_err(io_err("fdatasync", &checkpoint_path))?;
            match checkpoint::decode_checkpoint(&bytes) {
                Some(slot) => {
                    checkpoint.generation = slot.generation;
                    checkpoint.written_durable = slot.durable;
                    checkpoint_start = Some(slot.log_start_offset);
                }
                None => tracing::warn!(
                    file = %checkpoint_path.display(),
                    "log start checkpoint has no valid slot; using the first segment's base offset"
                ),
            }
            checkpoint.file = Some(file);
        }

        // Spares beyond what the log keeps are deleted (their content does not matter).
        while spares.len() > config.segment_spares {
            let path = spares.pop().expect("a spare");
            storage.remove(&path).map_err(io_err("remove", &path))?;
            report.removed.push(path);
        }

        // Segments wholly below the durable start are leftovers of an interrupted removal: a
        // data file becomes a spare if there is room.
        if let Some(start) = checkpoint_start {
            while bases.len() >= 2 && bases[1] <= start {
                let base = bases.remove(0);
                let data = dir.join(segment_file_name(base));
                let spare = dir.join(spare_file_name(base));
                // (A crash may have kept both names of a file renamed to a spare.)
                if spares.len() < config.segment_spares && !spares.contains(&spare) {
                    storage
                        .rename(&data, &spare)
                        .map_err(io_err("rename", &data))?;
                    tracing::info!(file = %data.display(), log_start_offset = start, "kept a segment below the log start as a spare");
                    spares.push(spare);
                }
                for name in [segment_file_name(base), index_file_name(base)] {
                    let path = dir.join(name);
                    if storage.exists(&path) {
                        storage.remove(&path).map_err(io_err("remove", &path))?;
                        tracing::info!(file = %path.display(), log_start_offset = start, "removed segment below the log start");
                        report.removed.push(path);
                    }
                }
                index_bases.remove(&base);
            }
        }

        // The active segment: the last one whose header is intact.
        let mut active = None;
        let mut fallback_base = checkpoint_start.unwrap_or(0);
        while let Some(&base) = bases.last() {
            // The recorded durable position applies only to the segment it names.
            let durable = checkpoint
                .written_durable
                .filter(|&(b, _)| b == base)
                .map(|(_, position)| u64::from(position));
            match Self::load_active(&storage, dir, base, durable, &config, now_ms, &mut report)? {
                Some(segment) => {
                    active = Some(segment);
                    break;
                }
                None => {
                    bases.pop();
                    fallback_base = base;
                }
            }
        }
        let active_created = active.is_none();
        let active = match active {
            Some(segment) => segment,
            None => Self::create_segment(&storage, dir, fallback_base, config.segment_bytes)?,
        };
        if index_bases.contains(&active.base_offset) {
            // The active segment's index lives in memory; a file left from an earlier seal is stale.
            storage
                .remove(&active.index_path)
                .map_err(io_err("remove", &active.index_path))?;
            report.removed.push(active.index_path.clone());
        }
        let mut segments = Vec::with_capacity(bases.len());
        for &base in bases.iter().filter(|&&b| b != active.base_offset) {
            let segment = Self::load_sealed(
                &storage,
                dir,
                base,
                &config,
                index_bases.contains(&base),
                &mut report,
            )?;
            segments.push(segment);
        }
        segments.push(active);
        for pair in segments.windows(2) {
            if pair[1].base_offset != pair[0].next_offset {
                return Err(LogError::Corrupt {
                    path: pair[1].path.clone(),
                    position: 0,
                    reason: format!(
                        "segment starts at offset {} but the previous segment {} ends at {}{}",
                        pair[1].base_offset,
                        pair[0].path.display(),
                        pair[0].next_offset,
                        if active_created {
                            " (the last segment was recreated empty)"
                        } else {
                            ""
                        }
                    ),
                });
            }
        }

        let first_base = segments[0].base_offset;
        let log_end = segments.last().expect("a segment").next_offset;
        let mut start = checkpoint_start.unwrap_or(first_base).max(first_base);
        if start > log_end {
            tracing::warn!(
                dir = %dir.display(),
                checkpoint_start = start,
                log_end_offset = log_end,
                "log start checkpoint is past the recovered log end (its data was not durable); starting at the log end"
            );
            start = log_end;
        }
        checkpoint.written_start = checkpoint_start.unwrap_or(start);
        // Recovery starts the log here from what it read and synced: a restart does again.
        checkpoint.durable_start = start;

        report.segments = segments.len();
        report.log_start_offset = start;
        report.log_end_offset = log_end;
        let mut log = PartitionLog {
            storage,
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset: start,
            commit: GroupCommit::new(log_end),
            dir_dirty: false,
            checkpoint,
            pending_removal: Vec::new(),
            spares: spares.into_iter().map(|path| (path, now_ms)).collect(),
            retention_now_ms: now_ms,
            reused_rolls: 0,
            flight: None,
            write_behinds: Vec::new(),
            next_write_behind: 1,
            write_behinds_unsynced: Vec::new(),
            pending_seal: None,
            boundaries: VecDeque::new(),
            closed: false,
        };
        // A start that differs from the checkpoint (clamped to the log end) is written now:
        // appends after recovery must never fall below a stale checkpoint at the next open.
        if log.log_start_offset != log.checkpoint.written_start {
            log.write_checkpoint()?;
        }

        // Make what recovery kept durable, so the durable end is the log end (a segment
        // created here has its header in its tail only: write it first).
        let last = log.segments.last_mut().expect("a segment");
        let writes = last.tail.take_writes(&last.path);
        for write in &writes {
            last.file
                .write_direct_at(write.bytes(), write.position)
                .map_err(io_err("write", &last.path))?;
            last.dirty = false;
        }
        let last = log.active();
        last.file.sync().map_err(io_err("fdatasync", &last.path))?;
        // The whole active segment is durable now: record that if a checkpoint file exists and
        // says otherwise (after a roll, or after a cut below a stale record).
        let durable = Some((
            last.base_offset,
            u32::try_from(last.size).unwrap_or(u32::MAX),
        ));
        if log.checkpoint.file.is_some() && log.checkpoint.written_durable != durable {
            log.checkpoint.written_durable = durable;
            log.write_checkpoint()?;
        }
        if let Some(file) = &log.checkpoint.file {
            if let Some((position, block)) = log.checkpoint.pending.take() {
                file.write_direct_at(&block, position)
                    .map_err(io_err("write", &log.checkpoint.path))?;
            }
            file.sync()
                .map_err(io_err("fdatasync", &log.checkpoint.path))?;
            log.checkpoint.durable_slot = log.checkpoint.written_durable;
        }
        log.checkpoint.dirty = false;
        log.storage
            .sync_dir(dir)
            .map_err(io_err("fsync directory", dir))?;
        log.dir_dirty = false;
        if report.created {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                log.storage
                    .sync_dir(parent)
                    .map_err(io_err("fsync directory", parent))?;
            }
        }
        log.check_invariants();
        Ok((log, report))
    }

    /// A new active segment in a new file (see [`Self::new_segment`]).
    pub(super) fn create_segment(
        storage: &S,
        dir: &Path,
        base: u64,
        segment_bytes: u64,
    ) -> Result<Segment<S::File>, LogError> {
        let path = dir.join(segment_file_name(base));
        let file = storage.create(&path).map_err(io_err("create", &path))?;
        Self::new_segment(dir, base, segment_bytes, path, file, 0)
    }

    /// A new active segment at `base` in `file`, preallocated (zeros) ahead, whose first
    /// `written` bytes the file system wrote before (a spare's: no zeros are written ahead
    /// there). Its header is in the tail, written by the next flush (a crash before that
    /// leaves a zero header, or a spare's earlier one: recovery removes such a last segment).
    pub(super) fn new_segment(
        dir: &Path,
        base: u64,
        segment_bytes: u64,
        path: std::path::PathBuf,
        file: S::File,
        written: u64,
    ) -> Result<Segment<S::File>, LogError> {
        let allocated = Self::preallocation(segment_bytes, 0, HEADER_BYTES_U64);
        file.preallocate(allocated)
            .map_err(io_err("fallocate", &path))?;
        let mut segment = Segment::empty(base, path, dir.join(index_file_name(base)), file, true);
        segment.tail = Tail::unwritten(&SegmentHeader::new(SegmentKind::Log, base).encode());
        segment.allocated = allocated.max(written);
        segment.zeroed = align_down(written);
        Ok(segment)
    }

    /// Loads the last segment with a full scan, cutting a torn tail. `None` if its header is
    /// torn and nothing valid follows it (the file is removed: it held no durable data).
    /// `durable`: the recorded durable position of this segment, if any; a bad frame at or
    /// past it starts a tail even if valid-looking frames follow (FORMAT.md §4, rule 2').
    #[allow(clippy::too_many_arguments)]
    fn load_active(
        storage: &S,
        dir: &Path,
        base: u64,
        durable: Option<u64>,
        config: &LogConfig,
        now_ms: u64,
        report: &mut RecoveryReport,
    ) -> Result<Option<Segment<S::File>>, LogError> {
        let path = dir.join(segment_file_name(base));
        let file = storage.open(&path).map_err(io_err("open", &path))?;
        // Only up to the end of the written data: the preallocated rest was never written
        // (zeros, a clean end), so recovery does not read it (FORMAT.md §5). A frame that
        // reaches past the written data was never covered by a completed block write: a tail.
        let len = file.len().map_err(io_err("stat", &path))?;
        let data_end = file
            .data_end()
            .map_err(io_err("seek data", &path))?
            .min(len);
        let mut bytes = vec![0u8; usize::try_from(data_end).expect("segment fits memory")];
        file.read_at(&mut bytes, 0).map_err(io_err("read", &path))?;
        let corrupt = |position: u64, reason: String| LogError::Corrupt {
            path: path.clone(),
            position,
            reason,
        };
        // Not this segment's header: torn (a zero header included), or a spare's from its
        // earlier life (a reused file). Either way the header did not land, and no frame of the
        // segment's own was written before it (the seal writes it first): nothing of the file
        // is durable data of the log, and the file is removed. If a frame of its own follows,
        // or the checkpoint records durable bytes of this segment, that is corruption.
        let not_landed = match SegmentHeader::decode(&bytes) {
            Ok(header) if header.kind == SegmentKind::Log && header.base_id == base => None,
            Ok(header) if header.kind == SegmentKind::Log && header.base_id < base => Some((
                format!(
                    "its header is a reused file's earlier one (log base {})",
                    header.base_id
                ),
                durable.is_none(),
            )),
            Ok(header) => {
                return Err(corrupt(
                    0,
                    format!(
                        "segment header says {:?} base {}, file name says log base {base}",
                        header.kind, header.base_id
                    ),
                ))
            }
            Err(error) => Some((format!("its header is torn ({error})"), true)),
        };
        if let Some((what, removable)) = not_landed {
            let own = (bytes.len() > SEGMENT_HEADER_BYTES)
                .then(|| next_own_frame(&bytes, SEGMENT_HEADER_BYTES, base))
                .flatten();
            if let Some(position) = own {
                return Err(corrupt(
                    0,
                    format!("{what}, and a valid frame follows at byte {position}"),
                ));
            }
            if !removable {
                return Err(corrupt(
                    0,
                    format!("{what}, and the log start checkpoint records durable bytes in it"),
                ));
            }
            tracing::warn!(
                file = %path.display(),
                bytes = bytes.len(),
                reason = %what,
                "removing the last segment: it holds no frame of its own"
            );
            drop(file);
            storage.remove(&path).map_err(io_err("remove", &path))?;
            report.removed.push(path);
            return Ok(None);
        }
        let (frames, outcome) = scan_frames(&bytes, SEGMENT_HEADER_BYTES, 0, base, durable, true);
        let allocated = match &outcome {
            ScanOutcome::Torn { valid_end, .. } => *valid_end,
            _ => len,
        };
        match outcome {
            ScanOutcome::Corrupt { position, reason } => return Err(corrupt(position, reason)),
            ScanOutcome::Torn { valid_end, reason } => {
                tracing::warn!(
                    file = %path.display(),
                    position = valid_end,
                    bytes = len - valid_end,
                    %reason,
                    "truncating a torn tail of the last segment"
                );
                // Cut, so that no byte of the tail survives behind later appends; the next
                // append preallocates again.
                file.set_len(valid_end).map_err(io_err("truncate", &path))?;
                report.truncated.push(TruncatedTail {
                    path: path.clone(),
                    position: valid_end,
                    bytes: len - valid_end,
                    reason,
                });
            }
            ScanOutcome::Clean { valid_end } if valid_end < len => {
                // Preallocated space (or a tail that only zeros reached): a clean end, kept.
                tracing::debug!(file = %path.display(), position = valid_end, bytes = len - valid_end, "zero-filled (preallocated) tail");
                report.zero_tails.push((path.clone(), len - valid_end));
            }
            ScanOutcome::Reused { valid_end } => {
                // Blocks that are not the segment's follow (a reused file's earlier life): a
                // clean end, kept (written blocks, which later appends overwrite faster).
                tracing::debug!(file = %path.display(), position = valid_end, bytes = len - valid_end, "blocks of a reused file's earlier life follow the data");
                report.reused_tails.push((path.clone(), len - valid_end));
            }
            ScanOutcome::Clean { .. } => {}
        }
        let mut segment = Segment::empty(base, path, dir.join(index_file_name(base)), file, false);
        for frame in &frames {
            segment.note_frame(frame, config.index_interval_bytes);
        }
        // The partially filled last block, in memory: the next block write rewrites it.
        let start = align_down(segment.size);
        segment.tail = Tail::written(start, &bytes[start as usize..segment.size as usize]);
        segment.allocated = allocated;
        // Past the data, zeros are written ahead again, but not over what the file system
        // has written (a reused file's earlier frames; zeros written ahead before).
        segment.zeroed = align_up(segment.size).max(align_down(data_end.min(allocated)));
        if !segment.is_empty() {
            segment.first_append_ms = Some(now_ms);
        }
        Ok(Some(segment))
    }

    /// Loads a sealed segment: header, index (checked, rebuilt if damaged), and the frames
    /// after the last index entry (which give the next offset and max timestamp).
    fn load_sealed(
        storage: &S,
        dir: &Path,
        base: u64,
        config: &LogConfig,
        has_index: bool,
        report: &mut RecoveryReport,
    ) -> Result<Segment<S::File>, LogError> {
        let path = dir.join(segment_file_name(base));
        let index_path = dir.join(index_file_name(base));
        let file = storage.open(&path).map_err(io_err("open", &path))?;
        let len = file.len().map_err(io_err("stat", &path))?;
        let corrupt = |position: u64, reason: String| LogError::Corrupt {
            path: path.clone(),
            position,
            reason,
        };
        let mut header = [0u8; SEGMENT_HEADER_BYTES];
        if len < HEADER_BYTES_U64 {
            return Err(corrupt(0, format!("sealed segment has only {len} bytes")));
        }
        file.read_at(&mut header, 0)
            .map_err(io_err("read", &path))?;
        let header = SegmentHeader::decode(&header).map_err(|e| corrupt(0, e.to_string()))?;
        if header.kind != SegmentKind::Log || header.base_id != base {
            return Err(corrupt(
                0,
                format!(
                    "segment header says {:?} base {}, file name says log base {base}",
                    header.kind, header.base_id
                ),
            ));
        }
        let mut segment = Segment::empty(base, path.clone(), index_path.clone(), file, false);

        // Fast path: a valid index whose last entry matches its frame; scan only after it.
        let mut damage = String::from("missing");
        if has_index {
            let loaded = storage
                .open(&index_path)
                .and_then(|f| f.read_all())
                .map_err(io_err("read", &index_path))?;
            match index::decode_index(&loaded, base, len) {
                Ok(entries) if entries.is_empty() => damage = "empty".into(),
                Ok(entries) => {
                    let last = *entries.last().expect("non-empty");
                    let mut tail = vec![0u8; (len - last.position) as usize];
                    segment
                        .file
                        .read_at(&mut tail, last.position)
                        .map_err(io_err("read", &path))?;
                    let (frames, outcome) =
                        scan_frames(&tail, 0, last.position, last.offset, None, false);
                    match frames.first() {
                        Some(first) if first.crc == last.frame_crc => {
                            Self::sealed_outcome(&path, &outcome)?;
                            segment.index = entries;
                            segment.max_timestamp = last.max_timestamp_before;
                            segment.size = last.position;
                            segment.next_offset = last.offset;
                            for frame in &frames {
                                // `note_frame` would add entries; the loaded index already has them.
                                segment.size = frame.position + frame.total_bytes;
                                segment.next_offset = frame.id + u64::from(frame.count);
                                segment.max_timestamp =
                                    segment.max_timestamp.max(frame.max_timestamp);
                            }
                            return Ok(segment);
                        }
                        _ => damage = "its last entry does not match the segment".into(),
                    }
                }
                Err(e) => damage = e.to_string(),
            }
        }

        // Rebuild the index from a full scan.
        let bytes = segment.file.read_all().map_err(io_err("read", &path))?;
        let (frames, outcome) = scan_frames(&bytes, SEGMENT_HEADER_BYTES, 0, base, None, false);
        Self::sealed_outcome(&path, &outcome)?;
        for frame in &frames {
            segment.note_frame(frame, config.index_interval_bytes);
        }
        tracing::warn!(file = %index_path.display(), reason = %damage, "rebuilding the index of a sealed segment");
        let index_file = storage
            .create(&index_path)
            .map_err(io_err("create", &index_path))?;
        index_file
            .write_at(&index::encode_index(base, &segment.index), 0)
            .map_err(io_err("write", &index_path))?;
        index_file
            .sync()
            .map_err(io_err("fdatasync", &index_path))?;
        report.indexes_rebuilt.push(index_path);
        Ok(segment)
    }

    /// A sealed segment was synced when it was sealed: any bad frame in it is corruption.
    fn sealed_outcome(path: &Path, outcome: &ScanOutcome) -> Result<(), LogError> {
        match outcome {
            ScanOutcome::Clean { .. } => Ok(()),
            ScanOutcome::Reused { .. } => unreachable!("only a last segment's scan"),
            ScanOutcome::Torn { valid_end, reason } => Err(LogError::Corrupt {
                path: path.to_path_buf(),
                position: *valid_end,
                reason: format!("{reason} (in a sealed segment, which was synced when sealed)"),
            }),
            ScanOutcome::Corrupt { position, reason } => Err(LogError::Corrupt {
                path: path.to_path_buf(),
                position: *position,
                reason: reason.clone(),
            }),
        }
    }
}
