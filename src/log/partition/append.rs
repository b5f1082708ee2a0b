//! Appending to a partition log: batches validated and framed into the active segment's
//! in-memory tail, rolls, retention and `DeleteRecords` (the log start).

use super::*;

impl<S: Storage> PartitionLog<S> {
    /// Appends one record batch (validated; its base offset is assigned here). The batch is
    /// written to the page cache, not durable until a flush covers it.
    pub fn append(&mut self, batch: &[u8], now_ms: u64) -> Result<AppendInfo, LogError> {
        self.check_writable()?;
        if batch.len() > FRAME_PAYLOAD_BYTES_MAX {
            return Err(LogError::BatchTooLarge {
                bytes: batch.len(),
                max: FRAME_PAYLOAD_BYTES_MAX,
            });
        }
        let header = batch::validate(batch).map_err(LogError::InvalidBatch)?;
        let frame_bytes = frame_total_bytes(batch.len()) as u64;
        let active = self.active();
        let age_due = active
            .first_append_ms
            .is_some_and(|first| now_ms.saturating_sub(first) >= self.config.segment_ms);
        // Never while a write is in flight (a flush's block write may still be landing on the
        // segment's last block): the segment then runs over and rolls at the next flush.
        let rolled = !active.is_empty()
            && !self.io_in_flight()
            && (active.size + frame_bytes > self.config.segment_bytes || age_due);
        if rolled {
            self.roll()?;
        }

        let base = self.log_end_offset();
        let count = header.records_count as u32;
        assert!(base
            .checked_add(u64::from(count))
            .is_some_and(|end| end <= i64::MAX as u64));
        let interval = self.config.index_interval_bytes;
        let segment_bytes = self.config.segment_bytes;
        let active = self.segments.last_mut().expect("a segment");
        let position = active.size;
        let end = position + frame_bytes;
        if end > active.allocated {
            let target = Self::preallocation(segment_bytes, active.allocated, end);
            if let Err(source) = active.file.preallocate(target) {
                let error = LogError::Io {
                    op: "fallocate",
                    path: active.path.clone(),
                    source,
                };
                self.poison(&error);
                return Err(error);
            }
            active.allocated = target;
        }
        // The frame is encoded straight into the tail (one copy of the batch), with its base
        // offset (the batch's first bytes) set.
        let room = active.tail.reserve(frame_bytes as usize);
        encode_frame_into(
            room,
            FrameMeta {
                id: base,
                kind: BATCH_FRAME_KIND,
                count,
            },
            batch,
            &batch::base_offset_bytes(base as i64),
        );
        let crc = u32::from_le_bytes(room[..4].try_into().expect("4 bytes"));
        active.note_frame(
            &ScannedFrame {
                position,
                id: base,
                count,
                crc,
                total_bytes: frame_bytes,
                max_timestamp: header.max_timestamp,
            },
            interval,
        );
        active.first_append_ms.get_or_insert(now_ms);
        active.dirty = true;
        let segment_base_offset = active.base_offset;
        let next = base + u64::from(count);
        self.commit.written(next);
        // Keyed by the block holding the frame's last byte: a flush amid write-behinds ends at
        // a block boundary, and it covers either every frame ending in a block or none.
        let block = |end: u64| (end - 1) / LOG_BLOCK_BYTES;
        match self.boundaries.back_mut() {
            Some(last) if block(last.0) == block(end) => *last = (end, next),
            _ => self.boundaries.push_back((end, next)),
        }
        Ok(AppendInfo {
            base_offset: base,
            last_offset: base + u64::from(count) - 1,
            position,
            segment_base_offset,
            header: BatchHeader {
                base_offset: base as i64,
                ..header
            },
            rolled,
        })
    }

    /// Rolls the active segment if it is full or old enough. Returns true if it rolled.
    /// Not while a write is in flight (the next flush rolls a full segment).
    pub fn roll_if_due(&mut self, now_ms: u64) -> Result<bool, LogError> {
        self.check_writable()?;
        let active = self.active();
        let due = !active.is_empty()
            && !self.io_in_flight()
            && (active.size >= self.config.segment_bytes
                || active
                    .first_append_ms
                    .is_some_and(|first| now_ms.saturating_sub(first) >= self.config.segment_ms));
        if due {
            self.roll()?;
        }
        Ok(due)
    }

    /// Starts a new segment at the log end, sealing the active one: its index file created
    /// here; its unwritten bytes (`O_DIRECT` chunks), the cut of the file to its frames and the
    /// syncs that make it sealed (data, index, directory) are the next flush ticket's
    /// [`Seal`], done before anything else of that ticket, so the roll itself neither writes
    /// nor waits for the disk. Until then the new segment's bytes stay in memory (a crash leaves it all zeros:
    /// recovery removes it, and the sealed segment is the last one again, its tail checked as
    /// such). A second roll before that flush seals the first synchronously: only one segment
    /// at a time may be waiting for its seal.
    pub(super) fn roll(&mut self) -> Result<(), LogError> {
        assert!(!self.io_in_flight(), "no roll while a write is in flight");
        let result = self.seal_pending_now().and_then(|()| {
            let seal = self.seal_active()?;
            let base = self.log_end_offset();
            let segment = self.start_segment(base)?;
            self.segments.push(segment);
            self.boundaries.clear();
            self.dir_dirty = true;
            self.pending_seal = Some(seal);
            Ok(())
        });
        if let Err(error) = &result {
            self.poison(error);
        }
        result
    }

    /// The segment a roll starts at `base`: in a spare file if the log has one (renamed; the
    /// frames of its earlier life stay behind the new ones until overwritten, a clean end:
    /// FORMAT.md §5), else in a new file. The seal of the segment before it syncs the
    /// directory, and writes the header before anything else of the new segment.
    fn start_segment(&mut self, base: u64) -> Result<Segment<S::File>, LogError> {
        let path = self.dir.join(segment_file_name(base));
        while let Some((spare, _)) = self.spares.pop() {
            let reused = self.storage.rename(&spare, &path).and_then(|()| {
                let file = self.storage.open(&path)?;
                let len = file.len()?;
                Ok((file, len))
            });
            match reused {
                Ok((file, written)) => {
                    self.reused_rolls += 1;
                    let segment_bytes = self.config.segment_bytes;
                    return Self::new_segment(&self.dir, base, segment_bytes, path, file, written);
                }
                Err(e) => {
                    tracing::warn!(file = %spare.display(), error = %e, "could not reuse a spare segment file")
                }
            }
        }
        Self::create_segment(&self.storage, &self.dir, base, self.config.segment_bytes)
    }

    /// Performs a pending seal synchronously (a second roll before a flush took the first).
    fn seal_pending_now(&mut self) -> Result<(), LogError> {
        match self.pending_seal.take() {
            Some(seal) => {
                apply_seal(&self.storage, &seal).map_err(|source| LogError::Io {
                    op: "seal",
                    path: seal.segment.clone(),
                    source,
                })?;
                self.drop_sealed_tails();
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// After a seal completed: the sealed segments' bytes are on the file, their reads go there.
    pub(super) fn drop_sealed_tails(&mut self) {
        let (_, sealed) = self.segments.split_last_mut().expect("a segment");
        for segment in sealed.iter_mut().filter(|s| !s.tail.is_none()) {
            segment.tail = Tail::none();
        }
    }

    fn seal_active(&mut self) -> Result<Seal, LogError> {
        let active = self.segments.last_mut().expect("a segment");
        assert!(!active.is_empty(), "an empty segment is never sealed");
        // The bytes not yet handed to a write (no write is in flight: asserted by `roll`), as
        // whole chunks the seal writes like a flush (a torn one is a torn tail of the last
        // segment but one, which recovery cuts only while it is the last: the seal completes
        // before its successor holds a durable byte). The tail stays until the seal completed
        // (reads take those bytes from memory); the seal then cuts the file to its frames.
        let writes = active.tail.take_last_writes(&active.path);
        let len = active.size;
        active.allocated = active.size;
        active.dirty = false;
        self.storage
            .create(&active.index_path)
            .map_err(io_err("create", &active.index_path))?;
        Ok(Seal {
            segment: active.path.clone(),
            writes,
            len,
            index: active.index_path.clone(),
            index_bytes: index::encode_index(active.base_offset, &active.index),
            dir: self.dir.clone(),
            then: Vec::new(),
        })
    }

    /// Removes sealed segments by size and age (Kafka's rules: by size while the log without
    /// the oldest segment is still at least `retention_bytes`; by age while the oldest
    /// segment's newest batch timestamp is more than `retention_ms` before `now_ms`). The
    /// log start offset advances at once; the files are unlinked after the next flush.
    pub fn enforce_retention(&mut self, now_ms: u64) -> Result<Vec<RemovedSegment>, LogError> {
        self.check_writable()?;
        self.retention_now_ms = self.retention_now_ms.max(now_ms);
        let storage = &self.storage;
        self.spares.retain(|(spare, since_ms)| {
            if now_ms.saturating_sub(*since_ms) < LOG_SEGMENT_SPARE_IDLE_MS {
                return true;
            }
            if let Err(e) = storage.remove(spare) {
                // A leftover is kept by the next recovery, and deleted once idle again.
                tracing::warn!(file = %spare.display(), error = %e, "could not remove an idle spare segment file");
            }
            false
        });
        let mut removed = Vec::new();
        while self.segments.len() >= 2 {
            let front = &self.segments[0];
            let by_size = self
                .config
                .retention_bytes
                .is_some_and(|limit| self.size_bytes() - front.size >= limit);
            let by_age = self.config.retention_ms.is_some_and(|ms| {
                front.max_timestamp >= 0
                    && (now_ms as i64).saturating_sub(front.max_timestamp) > ms as i64
            });
            if !(by_size || by_age) {
                break;
            }
            removed.push(self.remove_front());
        }
        Ok(removed)
    }

    /// Advances the log start offset to `offset` (Kafka's DeleteRecords), removing sealed
    /// segments wholly below it. Durable after the next flush. Returns the new start.
    pub fn delete_records_before(&mut self, offset: u64) -> Result<u64, LogError> {
        self.check_writable()?;
        if offset > self.log_end_offset() {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset(),
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            while self.segments.len() >= 2 && self.segments[0].next_offset <= offset {
                self.remove_front();
            }
        }
        Ok(self.log_start_offset)
    }

    fn remove_front(&mut self) -> RemovedSegment {
        assert!(
            self.segments.len() >= 2,
            "the active segment is never removed"
        );
        let segment = self.segments.remove(0);
        assert!(!segment.dirty, "sealed segments are synced");
        self.log_start_offset = self.log_start_offset.max(segment.next_offset);
        self.pending_removal.push(PendingRemoval {
            base_offset: segment.base_offset,
            data: segment.path.clone(),
            index: segment.index_path.clone(),
            end_offset: segment.next_offset,
        });
        RemovedSegment {
            base_offset: segment.base_offset,
            next_offset: segment.next_offset,
            bytes: segment.size,
        }
    }
}
