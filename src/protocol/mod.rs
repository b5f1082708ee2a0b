//! Wire codec: Kafka framing, request/response headers, API table, request guard.
//!
//! Nothing here holds state or does I/O; every function is pure and tested on byte buffers.
//! - [`framing`]: size-prefixed frames, with a maximum size and no up-front reservation.
//! - [`apis`]: the table of served APIs and versions (what ApiVersions advertises).
//! - [`codec`]: header parsing, dispatch classification, body decoding, response encoding.
//! - [`guard`]: structural pre-check that bounds what the decoder may allocate.
//! - [`share_txn`]: message types of the project's share-transaction RPCs (API keys 1000–1005),
//!   which the `kafka-protocol` crate does not know.
//!
//! Record batches are validated by `log::batch` (the log stores them); this module never looks
//! inside the `records` bytes.
//!
//! Kafka error codes are chosen at the edge (in `server`), from `kafka_protocol::ResponseError`.

pub mod apis;
pub mod codec;
pub mod framing;
pub mod guard;
pub mod share_txn;
