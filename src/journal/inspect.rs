//! Read-only decoding of a journal directory (or of single segment files), for the
//! `lockstep-inspect journal` tool.
//!
//! Safe on a live broker's directory: files are opened read-only and read with `read(2)`; no
//! map, no lock, nothing written, nothing removed. A frame being written while we read shows up
//! as a torn tail.
//!
//! It decodes past corruption: a bad frame followed by valid ones is reported as a
//! [`ProblemKind::CorruptFrame`] with the position where decoding resumes (the next valid
//! frame, [`frame::next_valid_frame`]), and decoding continues there. Problems carry a
//! [`Severity`]: `Recoverable` for what recovery handles by itself (a torn tail of the last
//! segment, an abandoned snapshot), `Corruption` for what makes recovery refuse to start.
//!
//! The reader is an iterator of [`Event`]s that holds one segment in memory at a time.

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::constants::SEGMENT_HEADER_BYTES;
use crate::storage::frame::{self, Frame, ScanEnd, SegmentHeader, SegmentKind};

use super::entries::{Entry, EntryKind, ShardSnapshot};
use super::parse_segment_name;
use super::snapshot::{SnapshotAssembler, Step};

/// How bad a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Recovery handles it without losing anything durable.
    Recoverable,
    /// Recovery refuses to start, or state would be lost.
    Corruption,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    ReadError,
    BadHeader,
    CorruptFrame,
    TornTail,
    SequenceGap,
    BadEntry,
    SnapshotViolation,
    SnapshotAbandoned,
}

/// One thing the reader found, in file and position order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A segment file starts.
    Segment {
        path: PathBuf,
        bytes: u64,
        /// First sequence number per the header, if the header is valid.
        base_seq: Option<u64>,
    },
    /// A valid frame. `entry` is the decoded entry, or `error` says why it does not decode.
    Entry {
        path: PathBuf,
        position: usize,
        frame_bytes: usize,
        seq: u64,
        kind: u16,
        kind_name: Option<&'static str>,
        crc: u32,
        entry: Option<serde_json::Value>,
        error: Option<String>,
    },
    /// A complete snapshot (emitted at its end marker). `state` is the decoded payload.
    Snapshot {
        path: PathBuf,
        /// Position of the snapshot's begin marker.
        position: usize,
        begin_seq: u64,
        end_seq: u64,
        payload_bytes: usize,
        state: Option<serde_json::Value>,
        error: Option<String>,
    },
    /// Something wrong at `position` of `path`.
    Problem {
        path: PathBuf,
        position: usize,
        kind: ProblemKind,
        severity: Severity,
        detail: String,
        /// Where decoding continues, if it does in this file.
        resumes_at: Option<usize>,
    },
    /// A segment file ends: valid frames end at `valid_end`; the rest is zeros or damage.
    SegmentEnd {
        path: PathBuf,
        valid_end: usize,
        frames: u64,
    },
}

impl Event {
    /// True for problems of severity [`Severity::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Event::Problem {
                severity: Severity::Corruption,
                ..
            }
        )
    }
}

#[derive(Clone, Debug)]
struct Where {
    path: PathBuf,
    position: usize,
}

struct OpenFile {
    path: PathBuf,
    bytes: Vec<u8>,
    position: usize,
    is_last: bool,
    frames: u64,
}

/// Iterator over the [`Event`]s of journal segments, oldest first.
pub struct JournalReader {
    files: VecDeque<PathBuf>,
    current: Option<OpenFile>,
    pending: VecDeque<Event>,
    assembler: SnapshotAssembler<Where>,
    expected_seq: Option<u64>,
    /// Frames were skipped: the next frame starts a fresh assembly (snapshots that began in
    /// the skipped bytes are orphans, not violations).
    restart_assembly: bool,
    finished: bool,
}

/// Reads every `*.jnl` segment of `dir` in sequence order.
pub fn read_dir(dir: &Path) -> io::Result<JournalReader> {
    let mut segments = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        if let Some(seq) = entry.file_name().to_str().and_then(parse_segment_name) {
            segments.push((seq, entry.path()));
        }
    }
    segments.sort();
    Ok(read_files(segments.into_iter().map(|(_, p)| p).collect()))
}

/// Reads the given segment files in the given order (sequence checks assume it is theirs).
pub fn read_files(paths: Vec<PathBuf>) -> JournalReader {
    JournalReader {
        files: paths.into(),
        current: None,
        pending: VecDeque::new(),
        assembler: SnapshotAssembler::new(0),
        expected_seq: None,
        restart_assembly: false,
        finished: false,
    }
}

fn problem(
    path: &Path,
    position: usize,
    kind: ProblemKind,
    severity: Severity,
    detail: String,
    resumes_at: Option<usize>,
) -> Event {
    Event::Problem {
        path: path.to_path_buf(),
        position,
        kind,
        severity,
        detail,
        resumes_at,
    }
}

impl JournalReader {
    fn open_next_file(&mut self) -> bool {
        let Some(path) = self.files.pop_front() else {
            return false;
        };
        let is_last = self.files.is_empty();
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) => {
                self.pending.push_back(problem(
                    &path,
                    0,
                    ProblemKind::ReadError,
                    Severity::Corruption,
                    error.to_string(),
                    None,
                ));
                return true;
            }
        };
        let header = SegmentHeader::decode(&bytes);
        self.pending.push_back(Event::Segment {
            path: path.clone(),
            bytes: bytes.len() as u64,
            base_seq: header.as_ref().ok().map(|h| h.base_id),
        });
        match header {
            Ok(header) => {
                let named = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(parse_segment_name);
                if header.kind != SegmentKind::Journal || named.is_some_and(|n| n != header.base_id)
                {
                    self.pending.push_back(problem(
                        &path,
                        0,
                        ProblemKind::BadHeader,
                        Severity::Corruption,
                        format!(
                            "header says {:?} segment starting at {}; file name says {named:?}",
                            header.kind, header.base_id
                        ),
                        Some(SEGMENT_HEADER_BYTES),
                    ));
                }
                if self.expected_seq.is_none() {
                    // The first segment: snapshots that began before it were compacted.
                    self.assembler = SnapshotAssembler::new(header.base_id);
                }
                self.check_seq(&path, 0, header.base_id);
            }
            Err(error) => self.pending.push_back(problem(
                &path,
                0,
                ProblemKind::BadHeader,
                Severity::Corruption,
                error.to_string(),
                Some(SEGMENT_HEADER_BYTES),
            )),
        }
        self.current = Some(OpenFile {
            path,
            bytes,
            position: SEGMENT_HEADER_BYTES,
            is_last,
            frames: 0,
        });
        true
    }

    /// Reports a gap if `found` is not the next sequence number; then expects `found`.
    fn check_seq(&mut self, path: &Path, position: usize, found: u64) {
        if let Some(expected) = self.expected_seq {
            if expected != found {
                self.pending.push_back(problem(
                    path,
                    position,
                    ProblemKind::SequenceGap,
                    Severity::Corruption,
                    format!("sequence number {found}, expected {expected}"),
                    None,
                ));
            }
        }
        self.expected_seq = Some(found);
    }

    /// Reads one frame (or the end of the current file) into `pending`.
    fn step_file(&mut self) {
        let Some(mut file) = self.current.take() else {
            return;
        };
        if file.position >= file.bytes.len() {
            self.end_file(file, None);
            return;
        }
        let mut scan = frame::scan(&file.bytes, file.position);
        match scan.next() {
            Some(frame) => {
                file.frames += 1;
                file.position = frame.end();
                let events = self.frame_events(&file.path, &frame);
                self.pending.extend(events);
                self.current = Some(file);
            }
            None => {
                let end = scan.end().expect("scan ended");
                self.end_file(file, Some(end));
            }
        }
    }

    fn end_file(&mut self, mut file: OpenFile, end: Option<ScanEnd>) {
        let path = file.path.clone();
        match end {
            None | Some(ScanEnd::Clean { .. }) => {}
            Some(ScanEnd::TornTail {
                valid_end,
                error,
                cut_bytes,
            }) => {
                let severity = if file.is_last {
                    Severity::Recoverable
                } else {
                    Severity::Corruption
                };
                self.pending.push_back(problem(
                    &path,
                    valid_end,
                    ProblemKind::TornTail,
                    severity,
                    format!("{error}; {cut_bytes} bytes of damaged tail (recovery cuts them only in the last segment)"),
                    None,
                ));
            }
            Some(ScanEnd::Corrupt {
                position,
                error,
                next_valid,
            }) => {
                self.pending.push_back(problem(
                    &path,
                    position,
                    ProblemKind::CorruptFrame,
                    Severity::Corruption,
                    format!("{error}; {} bytes skipped", next_valid - position),
                    Some(next_valid),
                ));
                // Whatever snapshot was being assembled lost frames.
                if let Some(gone) = std::mem::take(&mut self.assembler).finish() {
                    let event = Self::abandoned(gone, " (frames were lost to corruption)");
                    self.pending.push_back(event);
                }
                self.expected_seq = None;
                self.restart_assembly = true;
                file.position = next_valid;
                self.current = Some(file);
                return;
            }
        }
        let valid_end = match end {
            Some(end) => end.valid_end(),
            None => file.position.min(file.bytes.len()),
        };
        self.pending.push_back(Event::SegmentEnd {
            path,
            valid_end,
            frames: file.frames,
        });
    }

    fn abandoned(gone: super::snapshot::Abandoned<Where>, why: &str) -> Event {
        problem(
            &gone.begin_location.path,
            gone.begin_location.position,
            ProblemKind::SnapshotAbandoned,
            Severity::Recoverable,
            format!(
                "snapshot {} abandoned after {} chunks: {}{why}",
                gone.begin_seq, gone.chunks_seen, gone.reason
            ),
            None,
        )
    }

    fn frame_events(&mut self, path: &Path, frame: &Frame<'_>) -> Vec<Event> {
        let seq = frame.meta.id;
        if self.restart_assembly {
            self.restart_assembly = false;
            self.assembler = SnapshotAssembler::new(seq);
        }
        self.check_seq(path, frame.position, seq);
        self.expected_seq = Some(seq + 1);
        let kind = EntryKind::from_code(frame.meta.kind);
        let decoded = match kind {
            Some(kind) => Entry::decode(kind, frame.payload).map_err(|e| e.to_string()),
            None => Err(format!("unknown entry kind {}", frame.meta.kind)),
        };
        let mut events = vec![Event::Entry {
            path: path.to_path_buf(),
            position: frame.position,
            frame_bytes: frame.total_bytes(),
            seq,
            kind: frame.meta.kind,
            kind_name: kind.map(EntryKind::name),
            crc: frame.crc,
            entry: decoded.as_ref().ok().map(Entry::to_json),
            error: decoded.as_ref().err().cloned(),
        }];
        let entry = match decoded {
            Ok(entry) => entry,
            Err(detail) => {
                events.push(problem(
                    path,
                    frame.position,
                    ProblemKind::BadEntry,
                    Severity::Corruption,
                    detail,
                    None,
                ));
                return events;
            }
        };
        let here = Where {
            path: path.to_path_buf(),
            position: frame.position,
        };
        match self.assembler.feed(seq, &entry, here) {
            Err(reason) => events.push(problem(
                path,
                frame.position,
                ProblemKind::SnapshotViolation,
                Severity::Corruption,
                reason,
                None,
            )),
            Ok(Step::Other { abandoned }) | Ok(Step::Consumed { abandoned }) => {
                events.extend(abandoned.map(|gone| Self::abandoned(gone, "")));
            }
            Ok(Step::Complete(done)) => {
                let state = ShardSnapshot::decode(&done.payload);
                if let Err(error) = &state {
                    events.push(problem(
                        &done.begin_location.path,
                        done.begin_location.position,
                        ProblemKind::SnapshotViolation,
                        Severity::Corruption,
                        format!("complete snapshot does not decode: {error}"),
                        None,
                    ));
                }
                events.push(Event::Snapshot {
                    path: done.begin_location.path,
                    position: done.begin_location.position,
                    begin_seq: done.begin_seq,
                    end_seq: done.end_seq,
                    payload_bytes: done.payload.len(),
                    state: state.as_ref().ok().map(ShardSnapshot::to_json),
                    error: state.err().map(|e| e.to_string()),
                });
            }
        }
        events
    }
}

impl Iterator for JournalReader {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.finished {
                return None;
            }
            if self.current.is_some() {
                self.step_file();
            } else if !self.open_next_file() {
                self.finished = true;
                if let Some(gone) = std::mem::take(&mut self.assembler).finish() {
                    self.pending.push_back(Self::abandoned(gone, ""));
                }
            }
        }
    }
}
