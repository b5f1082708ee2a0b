//! The sparse offset index of a sealed log segment: `{base_offset:020}.index`.
//!
//! Derived data: written (and synced) once when its segment is sealed at a roll; rebuilt from
//! the segment whenever it is missing or fails a check; never written for the active segment,
//! whose index lives in memory and is rebuilt by the recovery scan.
//!
//! ```text
//! index file = header (32 bytes) · entry (32 bytes)*            all integers little-endian
//!
//! header
//!   0  8  magic        b"LKSTIDX\0"
//!   8  2  version      1
//!  10  6  reserved     0
//!  16  8  base_offset  of the segment (same as its file name and segment header)
//!  24  4  reserved     0
//!  28  4  crc          CRC-32 (IEEE) of bytes [0, 28)
//!
//! entry
//!   0  8  offset               base offset of the batch whose frame starts at `position`
//!   8  8  position             byte position of that frame in the segment file
//!  16  8  max_timestamp_before largest batch maxTimestamp of the frames before `position`
//!                              in this segment (-1 if none)
//!  24  4  frame_crc            the CRC stored in that frame's header
//!  28  4  crc                  CRC-32 (IEEE) of bytes [0, 28) of this entry
//! ```
//! Rules a valid index keeps: the first entry is the segment's first frame (position 32,
//! offset = base offset); offsets and positions strictly increase; `max_timestamp_before` never
//! decreases; an entry exists at least every `index_interval_bytes` of frames. Each entry's own
//! CRC detects a damaged entry; `frame_crc` ties the entry to the frame it points at, so a stale
//! entry (one left from other contents of the segment) is detected when it is used.

use crate::constants::{LOG_INDEX_ENTRY_BYTES, LOG_INDEX_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use std::fmt;

const INDEX_MAGIC: &[u8; 8] = b"LKSTIDX\0";
const INDEX_VERSION: u16 = 1;

/// One sparse-index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub offset: u64,
    pub position: u64,
    pub max_timestamp_before: i64,
    pub frame_crc: u32,
}

/// Why index bytes are not a valid index of the segment they belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexError {
    Short {
        have: usize,
    },
    BadHeader,
    BaseOffsetMismatch {
        index: u64,
        segment: u64,
    },
    /// The length is not a header plus whole entries.
    PartialEntry {
        len: usize,
    },
    BadEntryCrc {
        entry: usize,
    },
    /// Entry breaks an ordering rule (offsets, positions, timestamps, first entry).
    OutOfOrder {
        entry: usize,
    },
    /// Entry points at or past the end of the segment.
    PastEnd {
        entry: usize,
        position: u64,
    },
    Empty,
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Short { have } => write!(
                f,
                "index needs a {LOG_INDEX_HEADER_BYTES}-byte header, file has {have} bytes"
            ),
            IndexError::BadHeader => write!(f, "index header magic, version or CRC is wrong"),
            IndexError::BaseOffsetMismatch { index, segment } => write!(
                f,
                "index base offset {index} differs from its segment's {segment}"
            ),
            IndexError::PartialEntry { len } => {
                write!(f, "index length {len} is not a header plus whole entries")
            }
            IndexError::BadEntryCrc { entry } => write!(f, "index entry {entry}: CRC mismatch"),
            IndexError::OutOfOrder { entry } => write!(f, "index entry {entry}: out of order"),
            IndexError::PastEnd { entry, position } => write!(
                f,
                "index entry {entry}: position {position} is past the end of the segment"
            ),
            IndexError::Empty => write!(f, "index of a non-empty segment has no entries"),
        }
    }
}

/// The bytes of the index file of the segment at `base_offset`.
pub fn encode_index(base_offset: u64, entries: &[IndexEntry]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(LOG_INDEX_HEADER_BYTES + entries.len() * LOG_INDEX_ENTRY_BYTES);
    let mut header = [0u8; LOG_INDEX_HEADER_BYTES];
    header[0..8].copy_from_slice(INDEX_MAGIC);
    header[8..10].copy_from_slice(&INDEX_VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&base_offset.to_le_bytes());
    let crc = crc32fast::hash(&header[0..28]);
    header[28..32].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&header);
    for entry in entries {
        out.extend_from_slice(&encode_entry(entry));
    }
    out
}

fn encode_entry(entry: &IndexEntry) -> [u8; LOG_INDEX_ENTRY_BYTES] {
    let mut out = [0u8; LOG_INDEX_ENTRY_BYTES];
    out[0..8].copy_from_slice(&entry.offset.to_le_bytes());
    out[8..16].copy_from_slice(&entry.position.to_le_bytes());
    out[16..24].copy_from_slice(&entry.max_timestamp_before.to_le_bytes());
    out[24..28].copy_from_slice(&entry.frame_crc.to_le_bytes());
    let crc = crc32fast::hash(&out[0..28]);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
    out
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Decodes and checks an index file against its segment (`base_offset`, `segment_len` bytes).
pub fn decode_index(
    bytes: &[u8],
    base_offset: u64,
    segment_len: u64,
) -> Result<Vec<IndexEntry>, IndexError> {
    if bytes.len() < LOG_INDEX_HEADER_BYTES {
        return Err(IndexError::Short { have: bytes.len() });
    }
    let header = &bytes[..LOG_INDEX_HEADER_BYTES];
    if &header[0..8] != INDEX_MAGIC
        || u16::from_le_bytes([header[8], header[9]]) != INDEX_VERSION
        || u32_at(header, 28) != crc32fast::hash(&header[0..28])
    {
        return Err(IndexError::BadHeader);
    }
    let index_base = u64_at(header, 16);
    if index_base != base_offset {
        return Err(IndexError::BaseOffsetMismatch {
            index: index_base,
            segment: base_offset,
        });
    }
    let body = &bytes[LOG_INDEX_HEADER_BYTES..];
    if !body.len().is_multiple_of(LOG_INDEX_ENTRY_BYTES) {
        return Err(IndexError::PartialEntry { len: bytes.len() });
    }
    let mut entries: Vec<IndexEntry> = Vec::with_capacity(body.len() / LOG_INDEX_ENTRY_BYTES);
    for (i, raw) in body.chunks_exact(LOG_INDEX_ENTRY_BYTES).enumerate() {
        if u32_at(raw, 28) != crc32fast::hash(&raw[0..28]) {
            return Err(IndexError::BadEntryCrc { entry: i });
        }
        let entry = IndexEntry {
            offset: u64_at(raw, 0),
            position: u64_at(raw, 8),
            max_timestamp_before: u64_at(raw, 16) as i64,
            frame_crc: u32_at(raw, 24),
        };
        let in_order = match entries.last() {
            None => entry.offset == base_offset && entry.position == SEGMENT_HEADER_BYTES as u64,
            Some(prev) => {
                entry.offset > prev.offset
                    && entry.position > prev.position
                    && entry.max_timestamp_before >= prev.max_timestamp_before
            }
        };
        if !in_order {
            return Err(IndexError::OutOfOrder { entry: i });
        }
        if entry.position >= segment_len {
            return Err(IndexError::PastEnd {
                entry: i,
                position: entry.position,
            });
        }
        entries.push(entry);
    }
    if entries.is_empty() && segment_len > SEGMENT_HEADER_BYTES as u64 {
        return Err(IndexError::Empty);
    }
    Ok(entries)
}

/// The last entry whose offset is `<= offset`.
pub fn lookup_offset(entries: &[IndexEntry], offset: u64) -> Option<&IndexEntry> {
    let after = entries.partition_point(|e| e.offset <= offset);
    after.checked_sub(1).map(|i| &entries[i])
}

/// The last entry before which every batch's maxTimestamp is `< timestamp`: the first batch
/// with maxTimestamp `>= timestamp` is at or after it.
pub fn lookup_timestamp(entries: &[IndexEntry], timestamp: i64) -> Option<&IndexEntry> {
    let after = entries.partition_point(|e| e.max_timestamp_before < timestamp);
    after.checked_sub(1).map(|i| &entries[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<IndexEntry> {
        vec![
            IndexEntry {
                offset: 100,
                position: 32,
                max_timestamp_before: -1,
                frame_crc: 7,
            },
            IndexEntry {
                offset: 110,
                position: 5000,
                max_timestamp_before: 50,
                frame_crc: 8,
            },
            IndexEntry {
                offset: 130,
                position: 9000,
                max_timestamp_before: 70,
                frame_crc: 9,
            },
        ]
    }

    #[test]
    fn round_trip_and_lookups() {
        let bytes = encode_index(100, &entries());
        let back = decode_index(&bytes, 100, 10_000).unwrap();
        assert_eq!(back, entries());
        assert_eq!(lookup_offset(&back, 99), None);
        assert_eq!(lookup_offset(&back, 100).unwrap().position, 32);
        assert_eq!(lookup_offset(&back, 129).unwrap().position, 5000);
        assert_eq!(lookup_offset(&back, 1_000).unwrap().position, 9000);
        assert_eq!(lookup_timestamp(&back, 0).unwrap().position, 32);
        assert_eq!(lookup_timestamp(&back, 60).unwrap().position, 5000);
        assert_eq!(lookup_timestamp(&back, 71).unwrap().position, 9000);
    }

    #[test]
    fn every_damage_is_detected() {
        let bytes = encode_index(100, &entries());
        assert_eq!(
            decode_index(&bytes, 101, 10_000),
            Err(IndexError::BaseOffsetMismatch {
                index: 100,
                segment: 101
            })
        );
        assert_eq!(
            decode_index(&bytes[..bytes.len() - 5], 100, 10_000),
            Err(IndexError::PartialEntry {
                len: bytes.len() - 5
            })
        );
        assert!(matches!(
            decode_index(&bytes, 100, 9000),
            Err(IndexError::PastEnd { entry: 2, .. })
        ));
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(
                decode_index(&damaged, 100, 10_000).is_err(),
                "flip at {at} went unnoticed"
            );
        }
        let mut unordered = entries();
        unordered.swap(1, 2);
        assert_eq!(
            decode_index(&encode_index(100, &unordered), 100, 10_000),
            Err(IndexError::OutOfOrder { entry: 2 })
        );
        assert_eq!(
            decode_index(&encode_index(100, &[]), 100, 10_000),
            Err(IndexError::Empty)
        );
    }
}
