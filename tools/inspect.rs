//! `lockstep-inspect`: a read-only inspector of partition-log segments, producer snapshots and
//! the state journal.
//!
//! It follows `schemas/FORMAT.md`, never writes, never takes locks and never maps files
//! writable, so it is safe on a live broker's data directory (a file that grows while it is
//! read shows up as a torn tail). It decodes past corruption: after a bad frame it resumes at
//! the next valid frame and says where the damage is. In a partition's last segment, a bad
//! frame at or past the durable position recorded in `log-start.checkpoint` is a tail, as
//! recovery reads it (FORMAT.md §4, rule 2'): a repairable finding, not corruption.
//!
//! Exit codes: 0 clean (or only repairable findings), 1 corruption found with `--verify`,
//! 2 usage or I/O error.

use clap::{Parser, Subcommand};
use lockstep::journal;
use lockstep::journal::inspect::{Event as JournalEvent, Severity};
use lockstep::log::batch;
use lockstep::log::checkpoint;
use lockstep::log::index;
use lockstep::log::reused_tail_start;
use lockstep::storage::frame::{self, Frame, ScanEnd, SegmentHeader, SegmentKind};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "lockstep-inspect",
    version,
    about = "Read-only inspector of Lockstep segment logs and the state journal"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List partition-log segments (`*.log`) and their frames.
    Segments {
        /// A segment file, a partition directory, or a whole data directory (searched recursively).
        path: PathBuf,
        #[command(flatten)]
        common: Common,
        /// Only one summary line per segment, no frame rows.
        #[arg(long)]
        summary: bool,
    },
    /// Decode producer snapshots (`*.snapshot`): each partition's idempotent producers, open
    /// transactions and aborted-transaction index at an offset.
    Producers {
        /// A snapshot file, a partition directory, or a whole data directory.
        path: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Decode state-journal entries (`*.jnl`).
    Journal {
        /// A journal segment, a shard's journal directory, or a whole data directory.
        path: PathBuf,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(clap::Args)]
struct Common {
    /// Exit non-zero if any corruption is found (a bad header, a bad frame followed by valid
    /// ones, a frame whose record batch fails its own checks, broken offset order).
    #[arg(long)]
    verify: bool,
    /// One JSON document on stdout instead of tables.
    #[arg(long)]
    json: bool,
}

/// One problem found, with where it is.
#[derive(Serialize, Clone, Debug)]
struct Finding {
    file: String,
    /// Byte position in the file, when the finding has one.
    position: Option<u64>,
    /// `corruption` fails `--verify`; `repairable` is what broker recovery fixes by itself
    /// (a torn tail, a damaged or missing index).
    severity: &'static str,
    message: String,
}

#[derive(Serialize)]
struct FrameRow {
    position: u64,
    size: u64,
    crc: String,
    crc_ok: bool,
    base_offset: u64,
    last_offset: u64,
    records: u32,
    batch: Option<BatchRow>,
    batch_error: Option<String>,
}

#[derive(Serialize)]
struct BatchRow {
    magic: i8,
    batch_length: i32,
    crc32c: String,
    compression: u8,
    transactional: bool,
    control: bool,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

#[derive(Serialize)]
struct SegmentReport {
    file: String,
    base_offset: Option<u64>,
    bytes: u64,
    frames: usize,
    first_offset: Option<u64>,
    next_offset: Option<u64>,
    end: String,
    index: String,
    rows: Vec<FrameRow>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Segments {
            path,
            common,
            summary,
        } => run_segments(&path, &common, summary),
        Command::Producers { path, common } => run_producers(&path, &common),
        Command::Journal { path, common } => run_journal(&path, &common),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("lockstep-inspect: {message}");
            ExitCode::from(2)
        }
    }
}

/// Files under `path` (or `path` itself) whose name ends in `.{extension}`, sorted by path.
fn find_files(path: &Path, extension: &str) -> Result<Vec<PathBuf>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut found = Vec::new();
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            let child = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| format!("{}: {e}", child.display()))?;
            if kind.is_dir() {
                pending.push(child);
            } else if child.extension().is_some_and(|e| e == extension) {
                found.push(child);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The frames of a segment image, decoding past corruption: after a bad frame the scan resumes
/// at the next valid frame. Returns the frames and how the scan of the last stretch ended,
/// plus findings for every bad stretch.
///
/// `durable`: the position recorded for this segment in `log-start.checkpoint` (the active
/// segment only): a bad frame at or past it is a tail, as recovery reads it (FORMAT.md §4,
/// rule 2'), reported as repairable with the valid-looking frames after it.
fn scan_past_corruption<'a>(
    bytes: &'a [u8],
    file: &str,
    durable: Option<usize>,
    findings: &mut Vec<Finding>,
) -> (Vec<Frame<'a>>, ScanEnd) {
    let mut frames = Vec::new();
    let mut start = lockstep::constants::SEGMENT_HEADER_BYTES;
    loop {
        let mut scan = frame::scan(bytes, start);
        frames.extend(scan.by_ref());
        let end = scan.end().expect("scan ran to its end");
        match end {
            ScanEnd::Corrupt {
                position, error, ..
            } if durable.is_some_and(|d| position >= d) => {
                let discarded = count_frames_from(bytes, position);
                let last_nonzero = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                let cut_bytes = last_nonzero.max(position) - position;
                findings.push(Finding {
                    file: file.to_string(),
                    position: Some(position as u64),
                    severity: "repairable",
                    message: format!(
                        "bad frame ({error}) at or past the durable position {} recorded in \
                         log-start.checkpoint: recovery cuts {cut_bytes} bytes from byte \
                         {position} as a tail, discarding {discarded} valid-looking frames",
                        durable.unwrap_or_default()
                    ),
                });
                return (
                    frames,
                    ScanEnd::TornTail {
                        valid_end: position,
                        error,
                        cut_bytes,
                    },
                );
            }
            ScanEnd::Corrupt {
                position,
                error,
                next_valid,
            } => {
                findings.push(Finding {
                    file: file.to_string(),
                    position: Some(position as u64),
                    severity: "corruption",
                    message: format!(
                        "bad frame in the middle ({error}); next valid frame at byte {next_valid} \
                         ({} bytes skipped)",
                        next_valid - position
                    ),
                });
                start = next_valid;
            }
            ScanEnd::TornTail {
                valid_end,
                error,
                cut_bytes,
            } => {
                findings.push(Finding {
                    file: file.to_string(),
                    position: Some(valid_end as u64),
                    severity: "repairable",
                    message: format!(
                        "torn tail ({error}): recovery cuts {cut_bytes} bytes from byte {valid_end}"
                    ),
                });
                return (frames, end);
            }
            ScanEnd::Clean { .. } => return (frames, end),
        }
    }
}

/// Valid frames from `position` on, resuming past every bad stretch.
fn count_frames_from(bytes: &[u8], mut position: usize) -> usize {
    let mut count = 0;
    loop {
        let mut scan = frame::scan(bytes, position);
        count += scan.by_ref().count();
        match scan.end().expect("scan ran to its end") {
            ScanEnd::Corrupt { next_valid, .. } => position = next_valid,
            ScanEnd::Clean { .. } | ScanEnd::TornTail { .. } => return count,
        }
    }
}

fn describe_end(end: &ScanEnd) -> String {
    match *end {
        ScanEnd::Clean { valid_end } => format!("clean at byte {valid_end}"),
        ScanEnd::TornTail {
            valid_end,
            cut_bytes,
            ..
        } => {
            format!("torn tail at byte {valid_end} ({cut_bytes} bytes)")
        }
        ScanEnd::Corrupt { position, .. } => format!("corrupt at byte {position}"),
    }
}

/// `role`: what recovery takes the file for; for the last segment, what `log-start.checkpoint`
/// records (segment base, position), which recovery applies to it if the bases match.
fn inspect_segment(
    path: &Path,
    role: Role,
    findings: &mut Vec<Finding>,
) -> Result<SegmentReport, String> {
    let (last, durable) = match role {
        Role::Last(durable) => (true, durable),
        _ => (false, None),
    };
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("{file}: {e}"))?;
    let mut report = SegmentReport {
        file: file.clone(),
        base_offset: None,
        bytes: bytes.len() as u64,
        frames: 0,
        first_offset: None,
        next_offset: None,
        end: String::new(),
        index: String::new(),
        rows: Vec::new(),
    };
    let header = match SegmentHeader::decode(&bytes) {
        Ok(header) if header.kind == SegmentKind::Log => header,
        Ok(header) => {
            findings.push(corruption(
                &file,
                Some(0),
                format!("a {:?} segment, not a log segment", header.kind),
            ));
            report.end = "not a log segment".into();
            return Ok(report);
        }
        Err(error) => {
            findings.push(corruption(
                &file,
                Some(0),
                format!("segment header: {error}"),
            ));
            report.end = "unreadable header".into();
            return Ok(report);
        }
    };
    if role == Role::NotLanded {
        // A spare renamed by a roll whose seal never wrote the new header (FORMAT.md §5).
        findings.push(repairable(
            &file,
            Some(0),
            format!(
                "the header is a reused file's earlier one (log base {}): a roll's new header \
                 did not land; recovery removes the file",
                header.base_id
            ),
        ));
        report.end = "reused file, new header not written".into();
        return Ok(report);
    }
    report.base_offset = Some(header.base_id);
    let durable = durable
        .filter(|&(base, _)| base == header.base_id)
        .map(|(_, position)| position as usize);
    // In a reused file, the earlier life's blocks after the frames are a clean end: only the
    // bytes before them are the segment's.
    let reused = last
        .then(|| reused_tail_start(&bytes, header.base_id, durable.map(|d| d as u64)))
        .flatten()
        .map(|end| end as usize);
    let (frames, end) = scan_past_corruption(
        &bytes[..reused.unwrap_or(bytes.len())],
        &file,
        durable,
        findings,
    );
    report.end = match reused {
        Some(at) => format!(
            "clean at byte {at}; {} bytes of a reused file's earlier life follow",
            bytes.len() - at
        ),
        None => describe_end(&end),
    };
    let mut expected_next = header.base_id;
    for frame in &frames {
        let base = frame.meta.id;
        let last = base + u64::from(frame.meta.count).saturating_sub(1);
        if base != expected_next {
            findings.push(corruption(
                &file,
                Some(frame.position as u64),
                format!("frame offset {base} where {expected_next} was expected"),
            ));
        }
        expected_next = base + u64::from(frame.meta.count);
        let (batch, batch_error) = match batch::validate(frame.payload) {
            Ok(h) => {
                let mut problem = None;
                if h.base_offset != base as i64 {
                    problem = Some(format!(
                        "batch base offset {} differs from frame offset {base}",
                        h.base_offset
                    ));
                } else if h.offset_count() != frame.meta.count {
                    problem = Some(format!(
                        "batch holds {} offsets, frame says {}",
                        h.offset_count(),
                        frame.meta.count
                    ));
                }
                (Some(batch_row(&h)), problem)
            }
            Err(error) => (None, Some(error.to_string())),
        };
        if let Some(problem) = &batch_error {
            findings.push(corruption(
                &file,
                Some(frame.position as u64),
                format!("record batch: {problem}"),
            ));
        }
        report.rows.push(FrameRow {
            position: frame.position as u64,
            size: frame.total_bytes() as u64,
            crc: format!("{:#010x}", frame.crc),
            crc_ok: true,
            base_offset: base,
            last_offset: last,
            records: frame.meta.count,
            batch,
            batch_error,
        });
    }
    report.frames = frames.len();
    report.first_offset = frames.first().map(|f| f.meta.id);
    report.next_offset = frames.last().map(|f| f.meta.id + u64::from(f.meta.count));
    report.index = check_index(path, header.base_id, end.valid_end() as u64, findings);
    Ok(report)
}

fn check_index(
    segment: &Path,
    base_offset: u64,
    segment_len: u64,
    findings: &mut Vec<Finding>,
) -> String {
    let index_path = segment.with_extension("index");
    let file = index_path.display().to_string();
    match std::fs::read(&index_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            "none (active segment, or rebuilt at open)".into()
        }
        Err(e) => {
            findings.push(repairable(&file, None, format!("index unreadable: {e}")));
            "unreadable".into()
        }
        Ok(bytes) => match index::decode_index(&bytes, base_offset, segment_len) {
            Ok(entries) => format!("ok, {} entries", entries.len()),
            Err(error) => {
                findings.push(repairable(
                    &file,
                    None,
                    format!("index damaged ({error}); the broker rebuilds it"),
                ));
                "damaged".into()
            }
        },
    }
}

fn batch_row(h: &batch::BatchHeader) -> BatchRow {
    BatchRow {
        magic: h.magic,
        batch_length: h.batch_length,
        crc32c: format!("{:#010x}", h.crc),
        compression: h.compression(),
        transactional: h.is_transactional(),
        control: h.is_control(),
        producer_id: h.producer_id,
        producer_epoch: h.producer_epoch,
        base_sequence: h.base_sequence,
        base_timestamp: h.base_timestamp,
        max_timestamp: h.max_timestamp,
    }
}

fn corruption(file: &str, position: Option<u64>, message: String) -> Finding {
    Finding {
        file: file.to_string(),
        position,
        severity: "corruption",
        message,
    }
}

fn repairable(file: &str, position: Option<u64>, message: String) -> Finding {
    Finding {
        file: file.to_string(),
        position,
        severity: "repairable",
        message,
    }
}

/// True if the segment file's header is a log header of a base below the file name's: a spare
/// renamed by a roll whose new header did not land (FORMAT.md §5).
fn header_not_landed(path: &Path) -> bool {
    let mut header = [0u8; lockstep::constants::SEGMENT_HEADER_BYTES];
    let read = std::fs::File::open(path)
        .and_then(|file| std::io::Read::read_exact(&mut &file, &mut header));
    let named = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .and_then(|stem| stem.parse::<u64>().ok());
    match (read, SegmentHeader::decode(&header), named) {
        (Ok(()), Ok(h), Some(named)) => h.kind == SegmentKind::Log && h.base_id < named,
        _ => false,
    }
}

/// What recovery takes a segment file for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Sealed,
    /// The last segment of its directory (the only one recovery scans as a tail, and may find
    /// in a reused file), with the durable position `log-start.checkpoint` beside it records
    /// (none without the file or a valid slot, as recovery reads it).
    Last(Option<(u64, u32)>),
    /// After the last segment: a spare renamed by a roll whose new header did not land
    /// (removed by recovery).
    NotLanded,
}

fn segment_role(segment: &Path) -> Result<Role, String> {
    let dir = segment.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let name = entry
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .file_name();
        if Path::new(&name).extension().is_some_and(|e| e == "log") {
            names.push(name);
        }
    }
    names.sort();
    // As recovery: a last file whose header is a reused file's earlier one is removed, and
    // the segment before it is the last one.
    while names
        .last()
        .is_some_and(|name| header_not_landed(&dir.join(name)))
    {
        names.pop();
    }
    let name = segment.file_name();
    if name.is_some_and(|n| names.last().is_some_and(|last| n > last.as_os_str())) {
        return Ok(Role::NotLanded);
    }
    if names.last().map(|n| n.as_os_str()) != name {
        return Ok(Role::Sealed);
    }
    let path = segment.with_file_name(checkpoint::CHECKPOINT_FILE_NAME);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Role::Last(
            checkpoint::decode_checkpoint(&bytes).and_then(|slot| slot.durable),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Role::Last(None)),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn run_segments(path: &Path, common: &Common, summary: bool) -> Result<ExitCode, String> {
    let files = find_files(path, "log")?;
    if files.is_empty() {
        return Err(format!("{}: no .log segment files found", path.display()));
    }
    let mut findings = Vec::new();
    let mut reports = Vec::new();
    for file in &files {
        reports.push(inspect_segment(file, segment_role(file)?, &mut findings)?);
    }
    if common.json {
        let doc = serde_json::json!({ "segments": reports, "findings": findings });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else {
        print_segments(&reports, summary);
        print_findings(&findings);
    }
    Ok(exit_code(common, &findings))
}

fn print_segments(reports: &[SegmentReport], summary: bool) {
    for report in reports {
        let range = match (report.first_offset, report.next_offset) {
            (Some(first), Some(next)) => format!("offsets {first}..{}", next - 1),
            _ => "no frames".to_string(),
        };
        println!(
            "{}  base {}  {} bytes  {} frames  {}  end: {}  index: {}",
            report.file,
            report.base_offset.map_or("?".into(), |b| b.to_string()),
            report.bytes,
            report.frames,
            range,
            report.end,
            report.index
        );
        if summary || report.rows.is_empty() {
            continue;
        }
        println!(
            "  {:>10} {:>8} {:>10} {:>12} {:>12} {:>7} {:>5} {:>4} {:>12} {:>6} {:>8} {:>14}  {}",
            "position",
            "size",
            "crc",
            "base",
            "last",
            "records",
            "magic",
            "comp",
            "producer",
            "epoch",
            "seq",
            "max_ts",
            "flags"
        );
        for row in &report.rows {
            let (magic, comp, pid, epoch, seq, ts, flags) = match &row.batch {
                Some(b) => (
                    b.magic.to_string(),
                    b.compression.to_string(),
                    b.producer_id.to_string(),
                    b.producer_epoch.to_string(),
                    b.base_sequence.to_string(),
                    b.max_timestamp.to_string(),
                    [(b.transactional, "txn"), (b.control, "control")]
                        .iter()
                        .filter(|(on, _)| *on)
                        .map(|(_, name)| *name)
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                None => Default::default(),
            };
            let flags = match &row.batch_error {
                Some(error) => format!("BAD BATCH: {error}"),
                None => flags,
            };
            println!(
                "  {:>10} {:>8} {:>10} {:>12} {:>12} {:>7} {:>5} {:>4} {:>12} {:>6} {:>8} {:>14}  {}",
                row.position, row.size, row.crc, row.base_offset, row.last_offset, row.records, magic, comp, pid,
                epoch, seq, ts, flags
            );
        }
    }
}

fn print_findings(findings: &[Finding]) {
    if findings.is_empty() {
        println!("no problems found");
        return;
    }
    println!("{} finding(s):", findings.len());
    for f in findings {
        let at = f
            .position
            .map_or(String::new(), |p| format!(" at byte {p}"));
        println!("  [{}] {}{}: {}", f.severity, f.file, at, f.message);
    }
}

fn exit_code(common: &Common, findings: &[Finding]) -> ExitCode {
    if common.verify && findings.iter().any(|f| f.severity == "corruption") {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[derive(Serialize)]
struct ProducerRow {
    producer_id: i64,
    epoch: i16,
    /// First and last sequence of each remembered batch, oldest first.
    batches: Vec<(i32, i32)>,
    last_timestamp: i64,
    /// First offset of its transaction open in the partition, if any.
    open_txn_first_offset: Option<i64>,
}

#[derive(Serialize)]
struct SnapshotReport {
    file: String,
    offset: u64,
    producers: Vec<ProducerRow>,
    aborted_transactions: usize,
}

/// Producer snapshots: an unreadable one is repairable (the broker skips it for an older one
/// or a replay of the log).
fn run_producers(path: &Path, common: &Common) -> Result<ExitCode, String> {
    use lockstep::shard::producer_snapshot::ProducerSnapshotFile;
    let files = find_files(path, "snapshot")?;
    if files.is_empty() {
        return Err(format!("{}: no .snapshot files found", path.display()));
    }
    let mut findings = Vec::new();
    let mut reports = Vec::new();
    for file in &files {
        let name = file.display().to_string();
        let bytes = std::fs::read(file).map_err(|e| format!("{name}: {e}"))?;
        match ProducerSnapshotFile::decode(&bytes) {
            Ok(snapshot) => reports.push(SnapshotReport {
                file: name,
                offset: snapshot.offset,
                producers: snapshot
                    .producers
                    .iter()
                    .map(|(id, entry)| ProducerRow {
                        producer_id: *id,
                        epoch: entry.epoch,
                        batches: entry
                            .batches
                            .iter()
                            .map(|b| (b.first_sequence, b.last_sequence))
                            .collect(),
                        last_timestamp: entry.last_timestamp,
                        open_txn_first_offset: snapshot
                            .open_txns
                            .iter()
                            .find(|(open, _, _)| open == id)
                            .map(|(_, first, _)| *first),
                    })
                    .collect(),
                aborted_transactions: snapshot.aborted.len(),
            }),
            Err(reason) => findings.push(repairable(
                &name,
                None,
                format!("unreadable producer snapshot ({reason}); the broker skips it"),
            )),
        }
    }
    if common.json {
        let doc = serde_json::json!({ "snapshots": reports, "findings": findings });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else {
        for r in &reports {
            println!(
                "{}: offset {}, {} producer(s), {} aborted transaction(s)",
                r.file,
                r.offset,
                r.producers.len(),
                r.aborted_transactions
            );
            if !r.producers.is_empty() {
                println!(
                    "  {:>20} {:>6} {:>24} {:>15} {:>12}",
                    "producer id",
                    "epoch",
                    "last batch (sequences)",
                    "last timestamp",
                    "open txn at"
                );
            }
            for p in &r.producers {
                let last = p
                    .batches
                    .last()
                    .map_or("-".to_string(), |(first, last)| format!("{first}..={last}"));
                let open = p
                    .open_txn_first_offset
                    .map_or("-".to_string(), |o| o.to_string());
                println!(
                    "  {:>20} {:>6} {:>24} {:>15} {:>12}",
                    p.producer_id, p.epoch, last, p.last_timestamp, open
                );
            }
        }
        print_findings(&findings);
    }
    Ok(exit_code(common, &findings))
}

fn run_journal(path: &Path, common: &Common) -> Result<ExitCode, String> {
    let files = find_files(path, "jnl")?;
    if files.is_empty() {
        return Err(format!(
            "{}: no .jnl journal segments found",
            path.display()
        ));
    }
    // One reader per directory: sequence numbers run across the segments of one shard's journal.
    let mut by_dir: std::collections::BTreeMap<PathBuf, Vec<PathBuf>> = Default::default();
    for file in files {
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        by_dir.entry(dir).or_default().push(file);
    }
    let mut events = Vec::new();
    let mut findings = Vec::new();
    for (_, files) in by_dir {
        for event in journal::inspect::read_files(files) {
            if let JournalEvent::Problem {
                path,
                position,
                severity,
                detail,
                ..
            } = &event
            {
                let file = path.display().to_string();
                let position = Some(*position as u64);
                findings.push(match severity {
                    Severity::Corruption => corruption(&file, position, detail.clone()),
                    Severity::Recoverable => repairable(&file, position, detail.clone()),
                });
            }
            events.push(event);
        }
    }
    if common.json {
        let doc = serde_json::json!({ "events": events, "findings": findings });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else {
        print_journal(&events);
        print_findings(&findings);
    }
    Ok(exit_code(common, &findings))
}

/// One line per event; entries show their decoded form as compact JSON, cut to a screen line.
fn print_journal(events: &[JournalEvent]) {
    const SHOWN_CHARS_MAX: usize = 160;
    let shorten = |value: &Option<serde_json::Value>, error: &Option<String>| match (value, error) {
        (_, Some(error)) => format!("UNDECODABLE: {error}"),
        (Some(value), None) => {
            let text = value.to_string();
            if text.chars().count() > SHOWN_CHARS_MAX {
                format!(
                    "{}…",
                    text.chars().take(SHOWN_CHARS_MAX).collect::<String>()
                )
            } else {
                text
            }
        }
        (None, None) => String::new(),
    };
    for event in events {
        match event {
            JournalEvent::Segment {
                path,
                bytes,
                base_seq,
            } => println!(
                "{}  first seq {}  {} bytes",
                path.display(),
                base_seq.map_or("?".into(), |s| s.to_string()),
                bytes
            ),
            JournalEvent::Entry {
                position,
                frame_bytes,
                seq,
                kind,
                kind_name,
                crc,
                entry,
                error,
                ..
            } => {
                println!(
                    "  {:>10} {:>8} seq {:>10}  {:<24} crc {:#010x}  {}",
                    position,
                    frame_bytes,
                    seq,
                    kind_name.map_or(format!("kind {kind}"), str::to_string),
                    crc,
                    shorten(entry, error)
                )
            }
            JournalEvent::Snapshot {
                begin_seq,
                end_seq,
                payload_bytes,
                state,
                error,
                ..
            } => println!(
                "  snapshot seq {begin_seq}..{end_seq} ({payload_bytes} bytes): {}",
                shorten(state, error)
            ),
            JournalEvent::Problem {
                position,
                detail,
                resumes_at,
                ..
            } => println!(
                "  !! at byte {position}: {detail}{}",
                resumes_at.map_or(String::new(), |r| format!(" (resumes at byte {r})"))
            ),
            JournalEvent::SegmentEnd {
                valid_end, frames, ..
            } => {
                println!("  end: {frames} frames, valid bytes end at {valid_end}")
            }
        }
    }
}
