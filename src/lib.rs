//! Lockstep: a Kafka-wire-compatible broker whose reason to exist is share groups
//! (KIP-932) with transactional acknowledgements.
//!
//! Layout (see README.md, "Architecture"):
//! - [`constants`]: every limit in one place; [`config`]: validated configuration.
//! - [`model`]: newtypes shared across modules.
//! - [`storage`]: the on-disk frame format shared by the partition logs and the state journal,
//!   the file abstraction (real files and an in-memory crash double), and the only `unsafe`
//!   (memory maps).
//! - [`log`]: segmented, CRC-framed partition logs of Kafka record batches.
//! - [`group`]: consumer groups (classic protocol, KIP-848 membership) and committed offsets.
//! - [`journal`]: the memory-mapped state journal (share-partition state, transactions).
//! - [`protocol`]: the Kafka wire codec; [`server`]: request handling.
//! - [`ptxn`]: producer transactions (coordinator, partition and group sides).
//! - [`runtime`]: the only module that touches the io_uring executor (and the broker's global
//!   allocator, which serves its DMA chunks from huge pages).
//! - [`metrics`]: counters and histograms, Prometheus text.
//! - [`client`]: a small blocking Kafka client (admin, producer, share consumer) for tests and tools.

pub mod authz;
pub mod client;
pub mod config;
pub mod config_file;
pub mod conn_limits;
pub mod constants;
pub mod group;
pub mod journal;
pub mod kip848;
pub mod log;
pub mod metrics;
pub mod model;
pub mod protocol;
pub mod ptxn;
pub mod runtime;
pub mod sasl;
pub mod scram;
pub mod server;
pub mod shard;
pub mod share;
pub mod storage;
pub mod txn;
