//! Reading a partition log: whole batches from an offset, through the read cache and the
//! read-ahead the runtime performs, and the offset and timestamp lookups.

use super::*;

impl<S: Storage> PartitionLog<S> {
    /// Whole batches from the one containing `offset`, up to `max_bytes` (but at least one
    /// batch). `offset == log_end_offset` gives an empty result.
    pub fn read(&self, offset: u64, max_bytes: usize) -> Result<ReadResult, LogError> {
        self.read_records(offset, max_bytes, u64::MAX)
    }

    /// The segment index and byte position where a read of `offset` starts (the indexed
    /// frame at or before it), for `log_start <= offset < log_end`.
    fn read_start(&self, offset: u64) -> (usize, u64) {
        let mut seg_i = self.segments.partition_point(|s| s.base_offset <= offset) - 1;
        while self.segments[seg_i].next_offset <= offset {
            seg_i += 1; // an empty segment at `offset` (never the last: offset < end)
        }
        let position = index::lookup_offset(&self.segments[seg_i].index, offset)
            .map_or(HEADER_BYTES_U64, |e| e.position);
        (seg_i, position)
    }

    /// [`Self::read`], stopping also after the batch that brings the records from `offset` on
    /// to `max_records` (a ShareFetch reads what its record budget can take). Each payload
    /// is copied once, from the in-memory tail, the read cache or the file, into the result;
    /// batch headers are not parsed here (the frame's id and count say where a batch is).
    pub fn read_records(
        &self,
        offset: u64,
        max_bytes: usize,
        max_records: u64,
    ) -> Result<ReadResult, LogError> {
        let start = self.log_start_offset;
        let end = self.log_end_offset();
        if offset < start || offset > end {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: start,
                log_end_offset: end,
            });
        }
        let mut result = ReadResult {
            records: Bytes::new(),
            batches: 0,
            first_offset: offset,
            next_offset: offset,
            log_start_offset: start,
            log_end_offset: end,
        };
        if offset == end {
            return Ok(result);
        }
        let (mut seg_i, mut position) = self.read_start(offset);
        let mut records = Vec::new();
        loop {
            let segment = &self.segments[seg_i];
            if position >= segment.size {
                seg_i += 1;
                if seg_i == self.segments.len() {
                    break;
                }
                position = HEADER_BYTES_U64;
                continue;
            }
            let frame = read_frame_head(segment, position)?;
            let corrupt = |reason: String| LogError::Corrupt {
                path: segment.path.clone(),
                position,
                reason,
            };
            let frame_end = frame.meta.id + u64::from(frame.meta.count);
            if result.batches == 0 {
                if frame.meta.id > offset {
                    return Err(corrupt(format!(
                        "looking for offset {offset}, found a frame at offset {}",
                        frame.meta.id
                    )));
                }
                if frame_end <= offset {
                    position += frame.total_bytes;
                    continue;
                }
                result.first_offset = frame.meta.id;
            } else if frame.meta.id != result.next_offset {
                return Err(corrupt(format!(
                    "frame holds offset {} where offset {} was expected",
                    frame.meta.id, result.next_offset
                )));
            } else if records.len() + frame.payload_len > max_bytes {
                break;
            }
            if frame.meta.kind != BATCH_FRAME_KIND {
                return Err(corrupt(format!(
                    "frame kind {} is not a record batch",
                    frame.meta.kind
                )));
            }
            read_payload(segment, position, &frame, &mut records)?;
            result.batches += 1;
            result.next_offset = frame_end;
            position += frame.total_bytes;
            if records.len() >= max_bytes || frame_end.saturating_sub(offset) >= max_records {
                break;
            }
        }
        result.records = Bytes::from(records);
        Ok(result)
    }

    /// The parts of segment files a read of `offset` (up to `max_bytes`) would take from the
    /// files rather than from memory: block-aligned ranges for the runtime to read ahead
    /// through the engine ([`Self::fill_read_cache`]). At most [`LOG_READ_AHEAD_BYTES_MAX`]
    /// in all; empty if everything is in memory.
    pub fn read_ahead(&self, offset: u64, max_bytes: usize) -> Vec<ReadAhead> {
        if offset < self.log_start_offset || offset >= self.log_end_offset() {
            return Vec::new();
        }
        let (seg_i, position) = self.read_start(offset);
        self.read_ahead_from(seg_i, position, max_bytes)
    }

    /// [`Self::read_ahead`] for a share partition that starts at `timestamp`
    /// (`share.auto.offset.reset=by_duration`): what [`Self::offset_for_timestamp`] scans and
    /// a read of `max_bytes` from the batch it finds takes, from the timestamp index's entry
    /// on (the batch is normally within an index interval of it).
    pub fn read_ahead_at_timestamp(&self, timestamp: i64, max_bytes: usize) -> Vec<ReadAhead> {
        let found = self.segments.iter().enumerate().find(|(_, segment)| {
            segment.max_timestamp >= timestamp && segment.next_offset > self.log_start_offset
        });
        let Some((seg_i, segment)) = found else {
            return Vec::new();
        };
        let position = index::lookup_timestamp(&segment.index, timestamp)
            .map_or(HEADER_BYTES_U64, |e| e.position);
        self.read_ahead_from(seg_i, position, max_bytes)
    }

    fn read_ahead_from(
        &self,
        mut seg_i: usize,
        mut position: u64,
        max_bytes: usize,
    ) -> Vec<ReadAhead> {
        let mut out = Vec::new();
        let read_from = (self.segments[seg_i].base_offset, position);
        let mut read_to = read_from;
        // The indexed frame may start an index interval before the offset, and the last
        // batch may run past the byte budget.
        let mut left = (max_bytes as u64)
            .saturating_add(self.config.index_interval_bytes + LOG_READ_AHEAD_SLACK_BYTES)
            .min(LOG_READ_AHEAD_BYTES_MAX);
        while left > 0 && seg_i < self.segments.len() {
            let segment = &self.segments[seg_i];
            let end = (position + left).min(segment.size);
            if position < end {
                if let Some((from, to)) = segment.missing(position, end) {
                    out.push(ReadAhead {
                        path: segment.path.clone(),
                        segment_base: segment.base_offset,
                        position: from,
                        len: to - from,
                        read_from,
                        read_to,
                    });
                }
                read_to = (segment.base_offset, end);
                left -= end - position;
            }
            seg_i += 1;
            position = HEADER_BYTES_U64;
        }
        for part in &mut out {
            part.read_to = read_to;
        }
        out
    }

    /// Hands the log the bytes of a [`ReadAhead`] the runtime read (`data` holds at least
    /// the file's bytes `[position, position + read)`, `read <= len`; a short read ends at
    /// the file's end). Ignored if the segment is gone or its tail moved below the range.
    /// The log keeps at most [`LOG_READ_CACHE_BYTES_MAX`] read ahead, dropping the lowest
    /// chunks first (consumers move forward), but never one the read this part is for
    /// overlaps (`read_from..read_to`): its read finds everything planned in memory (the
    /// plan is at most [`LOG_READ_AHEAD_BYTES_MAX`], so the cache exceeds the bound by at
    /// most the chunks that overhang the read's ends, until the next fill).
    pub fn fill_read_cache(&mut self, ahead: &ReadAhead, read: u64, data: CachedBytes) {
        let Some(segment) = self
            .segments
            .iter_mut()
            .find(|s| s.base_offset == ahead.segment_base && s.path == ahead.path)
        else {
            return;
        };
        let len = read.min(ahead.len).min(data.len() as u64);
        if len == 0 || ahead.position + len > segment.tail.start {
            return;
        }
        segment.add_chunk(ahead.position, len, data);
        let (from, to) = (ahead.read_from, ahead.read_to);
        // Chunks are disjoint, so the one just added is the only one at its position.
        let keep = (ahead.segment_base, ahead.position);
        while self.read_cache_bytes() > LOG_READ_CACHE_BYTES_MAX {
            let victim = self
                .segments
                .iter()
                .enumerate()
                .flat_map(|(i, s)| {
                    s.cache.iter().enumerate().map(move |(j, c)| {
                        let base = s.base_offset;
                        (i, j, (base, c.position), (base, c.end()))
                    })
                })
                .find(|&(_, _, at, end)| at != keep && !(end > from && at < to));
            match victim {
                Some((i, j, _, _)) => {
                    self.segments[i].cache.remove(j);
                }
                None => break,
            }
        }
    }

    /// Reads (of the segments the log holds) that took bytes from the files with `pread`,
    /// the synchronous fallback, because neither the tail nor the read cache held them.
    pub fn file_reads(&self) -> u64 {
        self.segments.iter().map(|s| s.file_reads.get()).sum()
    }

    /// Bytes read ahead and held by the log's segments.
    pub fn read_cache_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.cached_bytes()).sum()
    }

    /// Drops everything read ahead (the shard's budget of read-ahead memory is spent).
    pub fn drop_read_cache(&mut self) {
        for segment in &mut self.segments {
            segment.cache.clear();
        }
    }

    /// ListOffsets by timestamp: the first batch (at or after the log start) whose
    /// maxTimestamp is `>= timestamp`, as (its base offset or the log start if later, its
    /// maxTimestamp). Precision is one batch, as the log does not decode records.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(u64, i64)>, LogError> {
        let mut scratch = Vec::new();
        for segment in &self.segments {
            if segment.max_timestamp < timestamp || segment.next_offset <= self.log_start_offset {
                continue;
            }
            let mut position = index::lookup_timestamp(&segment.index, timestamp)
                .map_or(HEADER_BYTES_U64, |e| e.position);
            while position < segment.size {
                let frame = read_frame_head(segment, position)?;
                scratch.clear();
                read_payload(segment, position, &frame, &mut scratch)?;
                let header = batch::parse_header(&scratch).map_err(|e| LogError::Corrupt {
                    path: segment.path.clone(),
                    position,
                    reason: e.to_string(),
                })?;
                let last = frame.meta.id + u64::from(frame.meta.count) - 1;
                if header.max_timestamp >= timestamp && last >= self.log_start_offset {
                    return Ok(Some((
                        frame.meta.id.max(self.log_start_offset),
                        header.max_timestamp,
                    )));
                }
                position += frame.total_bytes;
            }
        }
        Ok(None)
    }
}
