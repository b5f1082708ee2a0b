//! On-disk building blocks shared by the partition logs and the state journal.
//!
//! - [`blocks`]: the memory a segment tail is kept in, which the engine writes without a copy.
//! - [`frame`]: the segment header and CRC-framed entries, and the recovery scan rule.
//!
//! Nothing here knows about Kafka, shards or the runtime.

pub mod blocks;
pub mod file;
pub mod frame;
pub mod mmap;
