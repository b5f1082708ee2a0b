//! On-disk building blocks shared by the partition logs and the state journal.
//!
//! - [`frame`]: the segment header and CRC-framed entries, and the recovery scan rule.
//!
//! Nothing here knows about Kafka, shards or the runtime.

pub mod file;
pub mod frame;
pub mod mmap;
