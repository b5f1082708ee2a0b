//! Producer snapshots: the idempotent-producer state ([`ProducerStates`]) and the transaction
//! state ([`TxnPartition`]: open transactions, aborted-transaction index) of one partition at
//! an offset, in a file beside its segments, as Kafka's `.snapshot` files. A start loads the
//! newest usable snapshot and replays only the batches past it, so restart time does not grow
//! with the log (format: `schemas/FORMAT.md` §5, "Producer snapshots").
//!
//! Written when a segment rolls (at the log end after the append that rolled it) and at a clean
//! shutdown (at the log end, everything durable). A snapshot is an optimisation, never the only
//! copy of anything: the log it was taken from holds the same state, so
//! - it is written without a sync (temporary name, then rename); a power loss can leave a torn
//!   or empty file, which fails its CRC and is skipped for an older one or a replay from the log
//!   start;
//! - a snapshot past the recovered log end (taken before a crash cut a tail it covered) is
//!   deleted at open, durably, before anything is appended: the log could otherwise grow past
//!   its offset again with other batches;
//! - a snapshot below the log start is still right (Kafka keeps producers whose batches
//!   retention removed, until they expire); the replay starts at the log start then.
//!
//! Only the newest [`PRODUCER_SNAPSHOTS_KEPT`] are kept.

use super::producer_state::{BatchRecord, ProducerEntry, ProducerStates};
use crate::constants::{PRODUCER_BATCHES_REMEMBERED, PRODUCER_SNAPSHOTS_KEPT};
use crate::log::{parse_snapshot_name, snapshot_file_name};
use crate::producer_txn::partition::{AbortedTxn, TxnPartition};
use crate::storage::file::{Storage, StorageFile};
use std::collections::VecDeque;
use std::io;
use std::path::Path;

const MAGIC: &[u8; 8] = b"LKSTPSN\0";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 32;
const TRAILER_BYTES: usize = 4;
/// The temporary name a snapshot is written under before its rename.
const TMP_SUFFIX: &str = ".tmp";

/// The state of a partition's producers and transactions below `offset`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerSnapshotFile {
    /// Every batch below this offset is in the state; none at or past it.
    pub offset: u64,
    pub producers: Vec<(i64, ProducerEntry)>,
    /// Open transactions: (producer id, first offset, epoch).
    pub open_txns: Vec<(i64, i64, i16)>,
    pub aborted: Vec<AbortedTxn>,
}

impl ProducerSnapshotFile {
    /// The state of `producers` and `txns` at `offset`.
    pub fn of(
        offset: u64,
        producers: &ProducerStates,
        txns: &TxnPartition,
    ) -> ProducerSnapshotFile {
        let (open_txns, aborted) = txns.durable_parts();
        ProducerSnapshotFile {
            offset,
            producers: producers
                .entries()
                .into_iter()
                .map(|(id, entry)| (id, entry.clone()))
                .collect(),
            open_txns,
            aborted,
        }
    }

    /// The states it holds.
    pub fn into_states(self) -> (ProducerStates, TxnPartition) {
        (
            ProducerStates::from_entries(self.producers),
            TxnPartition::from_durable_parts(&self.open_txns, self.aborted),
        )
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&(self.producers.len() as u32).to_le_bytes());
        for (id, entry) in &self.producers {
            body.extend_from_slice(&id.to_le_bytes());
            body.extend_from_slice(&entry.epoch.to_le_bytes());
            body.extend_from_slice(&(entry.batches.len() as u16).to_le_bytes());
            body.extend_from_slice(&entry.last_timestamp.to_le_bytes());
            for b in &entry.batches {
                body.extend_from_slice(&b.first_sequence.to_le_bytes());
                body.extend_from_slice(&b.last_sequence.to_le_bytes());
                body.extend_from_slice(&b.base_offset.to_le_bytes());
                body.extend_from_slice(&b.last_offset.to_le_bytes());
                body.extend_from_slice(&b.max_timestamp.to_le_bytes());
            }
        }
        body.extend_from_slice(&(self.open_txns.len() as u32).to_le_bytes());
        for (id, first_offset, epoch) in &self.open_txns {
            body.extend_from_slice(&id.to_le_bytes());
            body.extend_from_slice(&first_offset.to_le_bytes());
            body.extend_from_slice(&epoch.to_le_bytes());
        }
        body.extend_from_slice(&(self.aborted.len() as u32).to_le_bytes());
        for a in &self.aborted {
            body.extend_from_slice(&a.producer_id.to_le_bytes());
            body.extend_from_slice(&a.first_offset.to_le_bytes());
            body.extend_from_slice(&a.last_offset.to_le_bytes());
        }
        let mut out = Vec::with_capacity(HEADER_BYTES + body.len() + TRAILER_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0u8; 6]);
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        let header_crc = crc32fast::hash(&out);
        out.extend_from_slice(&header_crc.to_le_bytes());
        debug_assert_eq!(out.len(), HEADER_BYTES);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out
    }

    /// Decodes a snapshot file; the error says what is wrong and at which byte.
    pub fn decode(bytes: &[u8]) -> Result<ProducerSnapshotFile, String> {
        if bytes.len() < HEADER_BYTES {
            return Err(format!(
                "{} bytes, shorter than the {HEADER_BYTES}-byte header",
                bytes.len()
            ));
        }
        let header = &bytes[..HEADER_BYTES];
        let stored = u32::from_le_bytes(header[28..32].try_into().expect("4 bytes"));
        if crc32fast::hash(&header[..28]) != stored {
            return Err("header CRC mismatch at byte 0".into());
        }
        if &header[..8] != MAGIC {
            return Err("not a producer snapshot (magic)".into());
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        if version != VERSION {
            return Err(format!("version {version}, this broker reads {VERSION}"));
        }
        let offset = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
        let body_len = u32::from_le_bytes(header[24..28].try_into().expect("4 bytes")) as usize;
        if bytes.len() != HEADER_BYTES + body_len + TRAILER_BYTES {
            return Err(format!(
                "{} bytes, the header announces {}",
                bytes.len(),
                HEADER_BYTES + body_len + TRAILER_BYTES
            ));
        }
        let body = &bytes[HEADER_BYTES..HEADER_BYTES + body_len];
        let stored = u32::from_le_bytes(
            bytes[HEADER_BYTES + body_len..]
                .try_into()
                .expect("4 bytes"),
        );
        if crc32fast::hash(body) != stored {
            return Err(format!("body CRC mismatch at byte {HEADER_BYTES}"));
        }
        parse_body(offset, body)
    }
}

/// The body of a snapshot at `offset` (its CRC already checked).
fn parse_body(offset: u64, body: &[u8]) -> Result<ProducerSnapshotFile, String> {
    let mut r = Reader { bytes: body, at: 0 };
    let mut producers = Vec::new();
    for _ in 0..r.u32()? {
        let id = r.i64()?;
        let epoch = r.i16()?;
        let count = r.u16()? as usize;
        let last_timestamp = r.i64()?;
        if id < 0 || count > PRODUCER_BATCHES_REMEMBERED {
            return Err(format!(
                "producer {id} with {count} batches at body byte {}",
                r.at
            ));
        }
        let mut batches = VecDeque::with_capacity(count);
        for _ in 0..count {
            let batch = BatchRecord {
                first_sequence: r.i32()?,
                last_sequence: r.i32()?,
                base_offset: r.i64()?,
                last_offset: r.i64()?,
                max_timestamp: r.i64()?,
            };
            if batch.base_offset > batch.last_offset || batch.last_offset as u64 >= offset {
                return Err(format!(
                    "batch of producer {id} outside the snapshot at body byte {}",
                    r.at
                ));
            }
            batches.push_back(batch);
        }
        producers.push((
            id,
            ProducerEntry {
                epoch,
                batches,
                last_timestamp,
            },
        ));
    }
    let mut open_txns = Vec::new();
    for _ in 0..r.u32()? {
        open_txns.push((r.i64()?, r.i64()?, r.i16()?));
    }
    let mut aborted: Vec<AbortedTxn> = Vec::new();
    for _ in 0..r.u32()? {
        let entry = AbortedTxn {
            producer_id: r.i64()?,
            first_offset: r.i64()?,
            last_offset: r.i64()?,
        };
        if aborted
            .last()
            .is_some_and(|last| last.last_offset >= entry.last_offset)
        {
            return Err(format!(
                "aborted transactions out of order at body byte {}",
                r.at
            ));
        }
        aborted.push(entry);
    }
    if r.at != body.len() {
        return Err(format!(
            "{} bytes left over at body byte {}",
            body.len() - r.at,
            r.at
        ));
    }
    Ok(ProducerSnapshotFile {
        offset,
        producers,
        open_txns,
        aborted,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let end = self.at + N;
        let slice = self
            .bytes
            .get(self.at..end)
            .ok_or_else(|| format!("body ends at byte {} inside a field", self.bytes.len()))?;
        self.at = end;
        Ok(slice.try_into().expect("N bytes"))
    }
    fn u16(&mut self) -> Result<u16, String> {
        self.take().map(u16::from_le_bytes)
    }
    fn i16(&mut self) -> Result<i16, String> {
        self.take().map(i16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, String> {
        self.take().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Result<i32, String> {
        self.take().map(i32::from_le_bytes)
    }
    fn i64(&mut self) -> Result<i64, String> {
        self.take().map(i64::from_le_bytes)
    }
}

/// The snapshots in `dir`, by offset.
fn list<S: Storage>(storage: &S, dir: &Path) -> io::Result<Vec<u64>> {
    let mut offsets: Vec<u64> = storage
        .list(dir)?
        .iter()
        .filter_map(|name| parse_snapshot_name(name))
        .collect();
    offsets.sort_unstable();
    Ok(offsets)
}

/// Writes `snapshot` into `dir` (temporary name, then rename; not synced: see the module docs)
/// and deletes all but the newest [`PRODUCER_SNAPSHOTS_KEPT`].
pub fn write<S: Storage>(
    storage: &S,
    dir: &Path,
    snapshot: &ProducerSnapshotFile,
) -> io::Result<()> {
    let name = snapshot_file_name(snapshot.offset);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let file = storage.create(&tmp)?;
    file.write_at(&snapshot.encode(), 0)?;
    drop(file);
    storage.rename(&tmp, &path)?;
    let offsets = list(storage, dir)?;
    for old in offsets.iter().rev().skip(PRODUCER_SNAPSHOTS_KEPT) {
        storage.remove(&dir.join(snapshot_file_name(*old)))?;
    }
    Ok(())
}

/// What [`load`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The newest readable snapshot at or below the log end.
    pub snapshot: Option<ProducerSnapshotFile>,
    /// Snapshots skipped as unreadable, each with why.
    pub unreadable: Vec<(String, String)>,
    /// Snapshots past the log end, deleted.
    pub deleted_past_end: usize,
}

/// Loads the newest readable snapshot of `dir` at or below `log_end`; deletes (durably) the
/// snapshots past it and leftover temporary files.
pub fn load<S: Storage>(storage: &S, dir: &Path, log_end: u64) -> io::Result<Loaded> {
    let mut loaded = Loaded::default();
    let mut offsets = Vec::new();
    for name in storage.list(dir)? {
        if let Some(offset) = parse_snapshot_name(&name) {
            offsets.push(offset);
        } else if parse_snapshot_name(name.trim_end_matches(TMP_SUFFIX)).is_some() {
            storage.remove(&dir.join(&name))?;
        }
    }
    offsets.sort_unstable();
    for &offset in offsets.iter().filter(|&&o| o > log_end) {
        storage.remove(&dir.join(snapshot_file_name(offset)))?;
        loaded.deleted_past_end += 1;
    }
    if loaded.deleted_past_end > 0 {
        storage.sync_dir(dir)?;
    }
    for &offset in offsets.iter().rev().filter(|&&o| o <= log_end) {
        let name = snapshot_file_name(offset);
        let bytes = storage.open(&dir.join(&name))?.read_all()?;
        match ProducerSnapshotFile::decode(&bytes) {
            Ok(snapshot) if snapshot.offset == offset => {
                loaded.snapshot = Some(snapshot);
                break;
            }
            Ok(snapshot) => loaded.unreadable.push((
                name,
                format!("holds offset {}, not its name's", snapshot.offset),
            )),
            Err(reason) => loaded.unreadable.push((name, reason)),
        }
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer_txn::TxnOutcome;
    use crate::storage::file::SimStorage;

    fn sample() -> (ProducerStates, TxnPartition) {
        let mut producers = ProducerStates::new();
        let mut txns = TxnPartition::new();
        for i in 0..8 {
            producers.record(
                3,
                1,
                BatchRecord {
                    first_sequence: i,
                    last_sequence: i,
                    base_offset: i64::from(i),
                    last_offset: i64::from(i),
                    max_timestamp: 500 + i64::from(i),
                },
            );
        }
        txns.record_data(4, 0, true, 8);
        txns.record_marker(4, TxnOutcome::Abort, 9);
        txns.record_data(5, 2, true, 10);
        producers.record_marker(4, 0, 900);
        (producers, txns)
    }

    #[test]
    fn a_snapshot_round_trips_and_any_damage_is_refused() {
        let (producers, txns) = sample();
        let snapshot = ProducerSnapshotFile::of(11, &producers, &txns);
        let bytes = snapshot.encode();
        assert_eq!(ProducerSnapshotFile::decode(&bytes).unwrap(), snapshot);
        let (p, t) = ProducerSnapshotFile::decode(&bytes).unwrap().into_states();
        assert_eq!(p.snapshot(), producers.snapshot());
        assert_eq!(t.open_txn_start(5), Some(10));
        assert_eq!(t.aborted_in(0, 11), txns.aborted_in(0, 11));
        for cut in 0..bytes.len() {
            assert!(
                ProducerSnapshotFile::decode(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            assert!(
                ProducerSnapshotFile::decode(&flipped).is_err(),
                "flip at {at}"
            );
        }
    }

    #[test]
    fn load_takes_the_newest_readable_at_or_below_the_end_and_drops_those_past_it() {
        let storage = SimStorage::new();
        let dir = Path::new("/p");
        storage.create_dir_all(dir).unwrap();
        let (producers, txns) = sample();
        for offset in [11, 20, 30, 40] {
            write(
                &storage,
                dir,
                &ProducerSnapshotFile::of(offset, &producers, &txns),
            )
            .unwrap();
        }
        assert_eq!(
            list(&storage, dir).unwrap(),
            vec![30, 40],
            "only the newest are kept"
        );
        // A torn newest one below the end is skipped for the one before it.
        let torn = dir.join(snapshot_file_name(30));
        let bytes = storage.open(&torn).unwrap().read_all().unwrap();
        storage.remove(&torn).unwrap();
        storage
            .create(&torn)
            .unwrap()
            .write_at(&bytes[..bytes.len() / 2], 0)
            .unwrap();
        let loaded = load(&storage, dir, 35).unwrap();
        assert!(
            loaded.snapshot.is_none(),
            "30 is torn and 40 is past the end"
        );
        assert_eq!(loaded.unreadable.len(), 1);
        assert_eq!(loaded.deleted_past_end, 1);
        assert_eq!(list(&storage, dir).unwrap(), vec![30]);
        write(
            &storage,
            dir,
            &ProducerSnapshotFile::of(33, &producers, &txns),
        )
        .unwrap();
        let loaded = load(&storage, dir, 35).unwrap();
        assert_eq!(loaded.snapshot.unwrap().offset, 33);
    }
}
