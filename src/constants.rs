//! Every limit and default of the broker, in one place, with units in the names.
//!
//! Relations between limits are checked at compile time at the bottom of this file.

/// Bytes in the fixed header at the start of every segment file (log or journal).
pub const SEGMENT_HEADER_BYTES: usize = 32;
/// Bytes in the fixed header of every frame.
pub const FRAME_HEADER_BYTES: usize = 24;
/// Frames start at multiples of this many bytes; the gap after a payload is zero padding.
pub const FRAME_ALIGN_BYTES: usize = 8;
/// Largest payload a single frame may carry (one record batch or one journal entry).
pub const FRAME_PAYLOAD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Default size at which a partition log's active segment is rolled.
pub const LOG_SEGMENT_BYTES_DEFAULT: u64 = 256 * 1024 * 1024;
/// Default age at which a partition log's active segment is rolled (Kafka: `segment.ms`, 7 days).
pub const LOG_SEGMENT_MS_DEFAULT: u64 = 7 * 24 * 3600 * 1000;
/// A sparse index entry is written at least every this many bytes of segment.
pub const LOG_INDEX_INTERVAL_BYTES: u64 = 4096;

/// Size of each preallocated journal segment.
pub const JOURNAL_SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;

const _: () = assert!(SEGMENT_HEADER_BYTES % FRAME_ALIGN_BYTES == 0);
const _: () = assert!(FRAME_HEADER_BYTES % FRAME_ALIGN_BYTES == 0);
const _: () = assert!(FRAME_PAYLOAD_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!((FRAME_PAYLOAD_BYTES_MAX as u64) < JOURNAL_SEGMENT_BYTES_DEFAULT * 2);
