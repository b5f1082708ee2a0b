//! Making a partition log durable: flush tickets (group commit), write-behinds of full tail
//! chunks, the seal of a rolled segment, the log-start checkpoint, and closing the log. The
//! synchronous performers of tickets, write-behinds and seals (`sync_ticket`, `write_behind`,
//! `apply_seal`) are the crash tests' and tools' path; the runtime does the same through
//! io_uring.

use super::*;

impl<S: Storage> PartitionLog<S> {
    /// Starts a flush of everything written so far (and of a changed log start). `None` if
    /// there is nothing to make durable, a flush is already in flight, or the log is poisoned
    /// (writing the checkpoint slot can poison it here: callers waiting for durability should
    /// check [`Self::is_poisoned`] when they get `None`).
    ///
    /// While write-behinds are in flight, the ticket is a *prefix flush*
    /// (`Self::begin_prefix_flush`): it writes no tail and covers the batches below the
    /// first write-behind in flight, `None` if that covers nothing new. The runtime then waits
    /// for that write-behind and asks again; a ticket that also writes the rest of the tail
    /// begins once none is in flight.
    pub fn begin_flush(&mut self) -> Option<FlushTicket> {
        if self.is_poisoned() || self.flight.is_some() {
            return None;
        }
        if !self.write_behinds.is_empty() {
            return self.begin_prefix_flush();
        }
        // A segment that ran over while the previous flush was in flight rolls now (unless
        // the last roll's seal is still to come: this ticket takes it, the next one rolls).
        let active = self.active();
        if !active.is_empty()
            && active.size >= self.config.segment_bytes
            && self.pending_seal.is_none()
            && self.roll().is_err()
        {
            return None;
        }
        let mut seal = self.pending_seal.take();
        let mut files: Vec<PathBuf> = std::mem::take(&mut self.write_behinds_unsynced)
            .into_iter()
            .filter(|path| {
                seal.as_ref().is_none_or(|s| &s.segment != path)
                    && self.segments.iter().any(|s| &s.path == path)
            })
            .collect();
        let mut writes = Vec::new();
        let mut chunks = Vec::new();
        let mut zero_fills = Vec::new();
        let mut checkpoint_start = None;
        let mut checkpoint_durable = None;
        // A seal names the new (active) segment at its header's end in the slot it writes last
        // (FORMAT.md §5): a lower bound of its durable bytes once its header block is durable,
        // which the seal writes just before; recovery removes a segment whose header did not
        // land (nothing else of it is written before the seal completed).
        if seal.is_some()
            && self
                .record_durable_position((self.active().base_offset, HEADER_BYTES_U64))
                .is_err()
        {
            return None;
        }
        // Also the slot written after the previous flush (its durable position): one block
        // write, durable like the segments' (no page-cache write to sync).
        if let Some(slot) = self.take_checkpoint_slot()? {
            match seal.as_mut() {
                Some(seal) => {
                    let active = self.active();
                    let mut header = vec![0u8; LOG_BLOCK_BYTES as usize];
                    header[..SEGMENT_HEADER_BYTES].copy_from_slice(
                        &SegmentHeader::new(SegmentKind::Log, active.base_offset).encode(),
                    );
                    seal.then = vec![
                        BlockWrite {
                            path: active.path.clone(),
                            position: 0,
                            data: header,
                        },
                        slot,
                    ];
                }
                None => writes.push(slot),
            }
            checkpoint_start = Some(self.checkpoint.written_start);
            checkpoint_durable = self.checkpoint.written_durable;
        }
        let active = self.active();
        let durable = (active.base_offset, active.size);
        // Rule 2' covers the active segment's new bytes once a durable slot names it (its
        // position is at most what earlier flushes covered), or once this ticket's seal wrote
        // one that does (before any chunk starts).
        let chunks_any_order = self
            .checkpoint
            .durable_slot
            .is_some_and(|(base, _)| base == active.base_offset)
            || checkpoint_durable.is_some_and(|(base, _)| {
                base == active.base_offset && seal.as_ref().is_some_and(|s| !s.then.is_empty())
            });
        for segment in &mut self.segments {
            if segment.dirty {
                let taken = segment.tail.take_writes(&segment.path);
                match taken.last().map(ChunkWrite::end) {
                    Some(end) => {
                        zero_fills.extend(segment.zero_ahead(end));
                        chunks.extend(taken);
                    }
                    None if files.contains(&segment.path) => {}
                    None => files.push(segment.path.clone()),
                }
                segment.dirty = false;
            }
        }
        let active_path = &self.active().path;
        let write_end = chunks
            .iter()
            .filter(|c| &c.path == active_path)
            .map(ChunkWrite::end)
            .chain(
                zero_fills
                    .iter()
                    .filter(|z| &z.path == active_path)
                    .map(|z| z.position + z.len),
            )
            .max()
            .unwrap_or(0);
        let mut dirs = Vec::new();
        if self.dir_dirty && seal.is_none() {
            dirs.push(self.dir.clone());
        }
        // The seal's directory sync covers every entry made so far.
        self.dir_dirty = false;
        let force = !files.is_empty()
            || !dirs.is_empty()
            || !writes.is_empty()
            || !chunks.is_empty()
            || seal.is_some();
        let flight = self.commit.begin(force);
        let Some(flight) = flight else {
            assert!(!force, "a flush with work to do must start");
            return None;
        };
        assert!(
            !chunks_any_order || chunks.iter().all(|c| c.path == self.active().path),
            "only the active segment's chunks are written in any order"
        );
        self.flight = Some(Flight {
            id: flight.id,
            checkpoint_start,
            checkpoint_durable,
            durable,
            seal: seal.clone(),
            write_end,
        });
        Some(FlushTicket {
            seal,
            chunks,
            chunks_any_order,
            writes,
            zero_fills,
            files,
            dirs,
            durable_end_offset: flight.target,
            id: flight.id,
        })
    }

    /// For a flush ticket: a slot with the log start if it moved since the last one, then the
    /// checkpoint's pending slot as a block write, if there is one (the checkpoint is then clean
    /// until the next slot). `None` (outer) if the slot could not be written: the log is poisoned.
    fn take_checkpoint_slot(&mut self) -> Option<Option<BlockWrite>> {
        if self.log_start_offset != self.checkpoint.written_start {
            if let Err(error) = self.write_checkpoint() {
                self.poison(&error);
                return None;
            }
        }
        if !self.checkpoint.dirty {
            return Some(None);
        }
        let (position, data) = self
            .checkpoint
            .pending
            .take()
            .expect("a dirty checkpoint has a slot to write");
        self.checkpoint.dirty = false;
        Some(Some(BlockWrite {
            path: self.checkpoint.path.clone(),
            position,
            data,
        }))
    }

    /// A flush while write-behinds are in flight: every byte of the active segment below the
    /// first of them is on the file (written by completed write-behinds, or by tickets, which
    /// complete before the next begins; write-behinds are handed out in file order), so the
    /// ticket `fdatasync`s the segment and declares durable the batches that end there, while
    /// the later write-behinds go on landing. It writes only the checkpoint's pending slot
    /// (and syncs the directory if entries changed): no tail, no zeros, no roll, so it shares
    /// no block with a write in flight. `None` if it would cover nothing new.
    fn begin_prefix_flush(&mut self) -> Option<FlushTicket> {
        assert!(
            self.pending_seal.is_none(),
            "no write-behind while a seal is pending"
        );
        let active = self.active();
        let written = self
            .write_behinds
            .iter()
            .map(|&(_, from)| from)
            .min()
            .expect("write-behinds in flight");
        let base = active.base_offset;
        let &(position, target) = self
            .boundaries
            .iter()
            .rev()
            .find(|&&(end, _)| end <= written)?;
        // A log start moved past it (DeleteRecords) waits for a whole flush: its slot must not
        // become durable before the batches below it, or a crash would leave a durable start
        // past the durable end.
        if target <= self.commit.durable_end() || self.log_start_offset > target {
            return None;
        }
        let (mut checkpoint_start, mut checkpoint_durable, mut writes) = (None, None, Vec::new());
        if let Some(slot) = self.take_checkpoint_slot()? {
            writes.push(slot);
            checkpoint_start = Some(self.checkpoint.written_start);
            checkpoint_durable = self.checkpoint.written_durable;
        }
        let active_path = self.active().path.clone();
        let files: Vec<PathBuf> = std::mem::take(&mut self.write_behinds_unsynced)
            .into_iter()
            .filter(|path| self.segments.iter().any(|s| &s.path == path))
            .collect();
        // The write-behind that ended the last prefix completed since: its segment is here.
        assert!(
            files.contains(&active_path),
            "a prefix flush covers bytes of completed write-behinds"
        );
        let mut dirs = Vec::new();
        if std::mem::take(&mut self.dir_dirty) {
            dirs.push(self.dir.clone());
        }
        let flight = self
            .commit
            .begin_prefix(target)
            .expect("no flush in flight, the log not poisoned");
        self.flight = Some(Flight {
            id: flight.id,
            checkpoint_start,
            checkpoint_durable,
            durable: (base, position),
            seal: None,
            write_end: 0,
        });
        Some(FlushTicket {
            seal: None,
            chunks: Vec::new(),
            chunks_any_order: false,
            writes,
            zero_fills: Vec::new(),
            files,
            dirs,
            durable_end_offset: target,
            id: flight.id,
        })
    }

    /// Full chunks of the active segment's tail to write now, ahead of the flush that will
    /// cover them ([`WriteBehind`]), if there are any and writing them ahead is safe:
    /// - a durable checkpoint slot names the active segment, so that a crash that keeps a later
    ///   chunk and loses an earlier one leaves the hole at or past the slot's position, a tail
    ///   by FORMAT.md §4 rule 2' (the same argument as a ticket's `chunks_any_order`);
    /// - they start at or past the end of the writes of the flush in flight (no block written
    ///   twice at once: a flush's last chunk is a partial block padded with zeros, which the
    ///   next chunk rewrites whole).
    ///
    /// A full chunk that starts inside the flight's last block stays for the next ticket, and
    /// so do those after it (handed out in file order). None once the segment is due to roll:
    /// the write-behinds in flight drain, and the next ticket rolls it (write-behinds could
    /// otherwise be in flight without end under a steady load, and the segment never roll).
    pub fn take_write_behind(&mut self) -> Option<WriteBehind> {
        if self.is_poisoned()
            || self.pending_seal.is_some()
            || self.active().size >= self.config.segment_bytes
        {
            return None;
        }
        let from = self.flight.as_ref().map_or(0, |f| f.write_end);
        let active = self.segments.last_mut().expect("a segment");
        let named = self
            .checkpoint
            .durable_slot
            .is_some_and(|(base, _)| base == active.base_offset);
        if !named {
            return None;
        }
        let chunks = active.tail.take_full_writes(&active.path, from);
        if chunks.is_empty() {
            return None;
        }
        let id = self.next_write_behind;
        self.next_write_behind += 1;
        self.write_behinds.push((id, chunks[0].position));
        Some(WriteBehind { chunks, id })
    }

    /// Ends a write-behind: on failure the log is poisoned (nothing it covered was declared
    /// durable) and the error returned.
    pub fn complete_write_behind(
        &mut self,
        write: WriteBehind,
        result: io::Result<()>,
    ) -> Result<(), LogError> {
        let at = self
            .write_behinds
            .iter()
            .position(|&(id, _)| id == write.id)
            .expect("complete_write_behind of a write-behind handed out");
        self.write_behinds.swap_remove(at);
        match result {
            Ok(()) => {
                for chunk in &write.chunks {
                    if !self.write_behinds_unsynced.contains(&chunk.path) {
                        self.write_behinds_unsynced.push(chunk.path.clone());
                    }
                }
                Ok(())
            }
            Err(error) => {
                let cause = format!("write-behind of {} failed: {error}", self.dir.display());
                tracing::error!(dir = %self.dir.display(), %error, "write-behind failed; partition log poisoned");
                self.commit.poison(cause.clone());
                Err(LogError::Poisoned { cause })
            }
        }
    }

    /// Writes a checkpoint slot with the current log start and `checkpoint.written_durable`:
    /// into `checkpoint.pending`, the block the next flush ticket writes (the file is created
    /// here if it does not exist). Never called while a flush is in flight. A new generation
    /// only when the file is clean (the other slot is durable); else the newest slot, not yet
    /// covered by a flush, is rewritten in place.
    pub(in crate::log) fn write_checkpoint(&mut self) -> Result<(), LogError> {
        assert!(
            self.flight.is_none(),
            "a slot is never written during a flush"
        );
        let path = &self.checkpoint.path;
        if self.checkpoint.file.is_none() {
            let file = self.storage.create(path).map_err(io_err("create", path))?;
            self.checkpoint.file = Some(file);
            self.dir_dirty = true;
        }
        let generation = if self.checkpoint.dirty {
            self.checkpoint.generation.max(1)
        } else {
            self.checkpoint.generation + 1
        };
        let slot = checkpoint::encode_slot(CheckpointSlot {
            generation,
            log_start_offset: self.log_start_offset,
            durable: self.checkpoint.written_durable,
        });
        let mut block = vec![0u8; LOG_CHECKPOINT_SLOT_STRIDE_BYTES as usize];
        block[..slot.len()].copy_from_slice(&slot);
        self.checkpoint.pending = Some((checkpoint::slot_position(generation), block));
        self.checkpoint.generation = generation;
        self.checkpoint.written_start = self.log_start_offset;
        self.checkpoint.dirty = true;
        Ok(())
    }

    /// Ends a flush. On success the ticket's offsets are durable (and segments below a durable
    /// log start are unlinked); on failure the log is poisoned and the error returned.
    pub fn complete_flush(
        &mut self,
        ticket: FlushTicket,
        result: io::Result<()>,
    ) -> Result<(), LogError> {
        let flight = self
            .flight
            .take()
            .expect("complete_flush without a flush in flight");
        assert_eq!(
            flight.id, ticket.id,
            "complete_flush with another flush's ticket"
        );
        match result {
            Err(error) => {
                let cause = format!("flush of {} failed: {error}", self.dir.display());
                tracing::error!(dir = %self.dir.display(), %error, "fdatasync failed; partition log poisoned");
                self.commit.complete(flight.id, Err(cause.clone()));
                Err(LogError::Poisoned { cause })
            }
            Ok(()) => {
                self.commit.complete(flight.id, Ok(()));
                let durable_end = self.commit.durable_end();
                while self
                    .boundaries
                    .front()
                    .is_some_and(|&(_, next)| next <= durable_end)
                {
                    self.boundaries.pop_front();
                }
                if flight.seal.is_some() {
                    self.drop_sealed_tails();
                }
                let (base, size) = flight.durable;
                let active = self.segments.last_mut().expect("a segment");
                if active.base_offset == base {
                    active.tail.written_up_to(size);
                }
                if let Some(start) = flight.checkpoint_start {
                    self.checkpoint.durable_slot = flight.checkpoint_durable;
                    self.checkpoint.durable_start = self.checkpoint.durable_start.max(start);
                    self.unlink_removed(start);
                }
                self.record_durable_position(flight.durable)
            }
        }
    }

    /// After a completed flush (or for a seal, the new segment at its header's end): records
    /// `(segment base, size)` as the durable position of the active segment in a checkpoint
    /// slot, synced by the next flush's ticket (by this one's seal). Only when it moved, so a
    /// flush that synced just the checkpoint does not cause another one. Poisons on failure.
    fn record_durable_position(&mut self, (base, size): (u64, u64)) -> Result<(), LogError> {
        let position = u32::try_from(size).unwrap_or(u32::MAX);
        assert!(position as usize >= SEGMENT_HEADER_BYTES);
        let durable = Some((base, position));
        if self.checkpoint.written_durable == durable {
            return Ok(());
        }
        let previous = self.checkpoint.written_durable;
        self.checkpoint.written_durable = durable;
        if let Err(error) = self.write_checkpoint() {
            self.checkpoint.written_durable = previous;
            self.poison(&error);
            return Err(error);
        }
        Ok(())
    }

    /// Deletes the files of removed segments wholly below `durable_start`, keeping data files
    /// as spares while there is room (renamed: a crash before the directory is synced leaves
    /// either name, and recovery deals with both).
    fn unlink_removed(&mut self, durable_start: u64) {
        let (storage, dir, spares) = (&self.storage, &self.dir, &mut self.spares);
        let (room, now_ms) = (self.config.segment_spares, self.retention_now_ms);
        self.pending_removal.retain(|pending| {
            if pending.end_offset > durable_start {
                return true;
            }
            let mut kept = false;
            if spares.len() < room {
                let spare = dir.join(spare_file_name(pending.base_offset));
                match storage.rename(&pending.data, &spare) {
                    Ok(()) => {
                        spares.push((spare, now_ms));
                        kept = true;
                    }
                    Err(e) => {
                        tracing::warn!(file = %pending.data.display(), error = %e, "could not keep a removed segment as a spare")
                    }
                }
            }
            let data = (!kept).then_some(&pending.data);
            for path in data.into_iter().chain([&pending.index]) {
                match storage.remove(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    // A leftover is deleted by the next recovery; the log is still correct.
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "could not remove segment file")
                    }
                }
            }
            false
        });
    }

    /// Synchronous flush: [`Self::begin_flush`], sync through the storage, [`Self::complete_flush`].
    /// Must not be called while an asynchronous flush is in flight (asserted: complete it
    /// first, e.g. at shutdown).
    pub fn flush(&mut self) -> Result<(), LogError> {
        assert!(
            !self.io_in_flight(),
            "flush() while an asynchronous flush or write-behind is in flight"
        );
        let Some(ticket) = self.begin_flush() else {
            return self.check_writable();
        };
        let result = sync_ticket(&self.storage, &ticket);
        self.complete_flush(ticket, result)
    }
}

impl<S: Storage> PartitionLog<S> {
    /// Closes the log (shutdown, a clean reopen): hands its written-behind tail to the file
    /// (not synced), as a page-cache log would have it, so a process restart without power loss
    /// keeps every append. Bytes a flush in flight is also writing are the same bytes, except
    /// its zero padding, which can only land past what that flush made durable (rule 2' of
    /// FORMAT.md cuts there after a power loss).
    ///
    /// Writes the active segment's unwritten bytes, as a process that exits leaves them in the
    /// page cache (a later open reads them; not durable, except that without a durable slot
    /// naming the segment each piece is synced before the next: a power loss after the close
    /// must leave a tail, not a hole before frames). A rolled segment whose seal has not
    /// completed (pending, or in a ticket that never completed) is sealed first: the new
    /// segment must not hold a byte on disk while its predecessor could still be torn (a power
    /// loss could then keep the new segment's header and lose the sealed segment's last bytes,
    /// and recovery only cuts the last segment). If the seal fails, the tail is not written and
    /// the error is returned. A poisoned log writes nothing and returns its poison.
    ///
    /// A log dropped without `close` (a deleted partition, a panic) writes nothing: what it held
    /// past its last flush was never acknowledged as durable.
    pub fn close(mut self) -> Result<(), LogError> {
        self.closed = true;
        if let Some(cause) = self.poison_cause() {
            return Err(LogError::Poisoned {
                cause: cause.to_string(),
            });
        }
        let in_flight = self.flight.take().and_then(|flight| flight.seal);
        for seal in in_flight.iter().chain(self.pending_seal.take().iter()) {
            apply_seal(&self.storage, seal)
                .map_err(io_err("seal the rolled segment at close", &seal.segment))?;
        }
        let Some(active) = self.segments.last() else {
            return Ok(());
        };
        if active.tail.is_none() {
            return Ok(());
        }
        // Zero-padded to the block's end, as a flush writes it: in a reused file, that block
        // holds bytes of the file's earlier life (FORMAT.md §5).
        let end = active.tail.end();
        let padding = vec![0u8; (align_up(end).min(active.allocated.max(end)) - end) as usize];
        // Unsynced writes may land in any order, and a hole followed by frames is a tail only
        // past a durable slot's position (FORMAT.md §4 rule 2'): without a slot naming this
        // segment (a new log never flushed), each piece is made durable before the next.
        let named = self
            .checkpoint
            .durable_slot
            .is_some_and(|(base, _)| base == active.base_offset);
        let pieces = active.tail.pieces_from(active.tail.start);
        for (position, bytes) in pieces.into_iter().chain([(end, &padding[..])]) {
            active
                .file
                .write_direct_at(bytes, position)
                .and_then(|()| if named { Ok(()) } else { active.file.sync() })
                .map_err(io_err("write the log tail at close", &active.path))?;
        }
        Ok(())
    }
}

/// A log dropped without [`PartitionLog::close`] does no I/O; it says so if that dropped
/// appended bytes no flush or close wrote.
impl<S: Storage> Drop for PartitionLog<S> {
    fn drop(&mut self) {
        if !self.closed
            && !self.is_poisoned()
            && self.segments.last().is_some_and(|a| !a.tail.is_none())
        {
            tracing::debug!(dir = %self.dir.display(), "partition log dropped without close: its unflushed tail is not written");
        }
    }
}

/// Performs a ticket's syncs through the storage (the synchronous path; the runtime does the
/// same through io_uring).
pub fn sync_ticket<S: Storage>(storage: &S, ticket: &FlushTicket) -> io::Result<()> {
    let context =
        |path: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    if let Some(seal) = &ticket.seal {
        apply_seal(storage, seal)?;
    }
    // Any order: last chunk first, one sync after all (a power loss before it may keep any
    // of them, later chunks without earlier ones).
    let in_order = !ticket.chunks_any_order;
    let chunks: Vec<&ChunkWrite> = if in_order {
        ticket.chunks.iter().collect()
    } else {
        ticket.chunks.iter().rev().collect()
    };
    for write in &chunks {
        let file = storage
            .open(&write.path)
            .map_err(|e| context(&write.path, e))?;
        file.write_direct_at(write.bytes(), write.position)
            .and_then(|()| if in_order { file.sync() } else { Ok(()) })
            .map_err(|e| context(&write.path, e))?;
    }
    if let Some(write) = chunks.first().filter(|_| !in_order) {
        let file = storage
            .open(&write.path)
            .map_err(|e| context(&write.path, e))?;
        file.sync().map_err(|e| context(&write.path, e))?;
    }
    write_blocks_durably(storage, &ticket.writes)?;
    for fill in &ticket.zero_fills {
        let file = storage
            .open(&fill.path)
            .map_err(|e| context(&fill.path, e))?;
        file.write_direct_at(&vec![0; fill.len as usize], fill.position)
            .and_then(|()| file.sync())
            .map_err(|e| context(&fill.path, e))?;
    }
    for file in &ticket.files {
        storage.sync_file(file).map_err(|e| context(file, e))?;
    }
    for dir in &ticket.dirs {
        storage.sync_dir(dir).map_err(|e| context(dir, e))?;
    }
    Ok(())
}

/// Performs a [`WriteBehind`] synchronously through `storage`: each chunk written, not synced
/// (the next ticket syncs the file; the runtime does the same through io_uring).
pub fn write_behind<S: Storage>(storage: &S, write: &WriteBehind) -> io::Result<()> {
    for chunk in &write.chunks {
        let context =
            |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", chunk.path.display()));
        let file = storage.open(&chunk.path).map_err(context)?;
        file.write_direct_at(chunk.bytes(), chunk.position)
            .map_err(context)?;
    }
    Ok(())
}

/// Performs a [`Seal`] synchronously through `storage` (see [`sync_ticket`]).
pub fn apply_seal<S: Storage>(storage: &S, seal: &Seal) -> io::Result<()> {
    let context =
        |path: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let segment = storage
        .open(&seal.segment)
        .map_err(|e| context(&seal.segment, e))?;
    // Each durable before the next, as the runtime's chunk writes are (`O_DSYNC`): the sealed
    // segment may have no durable slot naming it, so a hole in it would not be a tail.
    for write in &seal.writes {
        segment
            .write_direct_at(write.bytes(), write.position)
            .and_then(|()| segment.sync())
            .map_err(|e| context(&seal.segment, e))?;
    }
    segment
        .set_len(seal.len)
        .map_err(|e| context(&seal.segment, e))?;
    storage
        .sync_file(&seal.segment)
        .map_err(|e| context(&seal.segment, e))?;
    let index = storage
        .open(&seal.index)
        .map_err(|e| context(&seal.index, e))?;
    index
        .write_at(&seal.index_bytes, 0)
        .and_then(|()| index.sync())
        .map_err(|e| context(&seal.index, e))?;
    storage
        .sync_dir(&seal.dir)
        .map_err(|e| context(&seal.dir, e))?;
    write_blocks_durably(storage, &seal.then)
}

/// Writes `writes` one after the other, each durable before the next.
fn write_blocks_durably<S: Storage>(storage: &S, writes: &[BlockWrite]) -> io::Result<()> {
    for write in writes {
        let context =
            |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", write.path.display()));
        let file = storage.open(&write.path).map_err(context)?;
        file.write_direct_at(&write.data, write.position)
            .and_then(|()| file.sync())
            .map_err(context)?;
    }
    Ok(())
}
