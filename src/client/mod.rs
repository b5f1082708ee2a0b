//! A small blocking Kafka client, written for Lockstep's own tests and tools, whose centre is the
//! KIP-932 share consumer (and, later, the KIP's transactional acknowledgements).
//!
//! Why a client of our own: no stock Kafka client speaks the share-transaction APIs (keys
//! 1000–1005, `schemas/`), so the project needs one it can extend; and the same client run against
//! Apache Kafka 4.4 (`tests/client_kafka.rs`) pins down that what it does for the stock share APIs
//! is what Kafka expects.
//!
//! Shape: plain `std::net::TcpStream`s with timeouts, no runtime, no background threads. One
//! [`connection::Connection`] per broker node, one request in flight per connection, correlation
//! ids checked. Every wire message is a `kafka-protocol` type; the project's own API keys go through
//! [`connection::Connection::send_custom`], which needs only `Encodable`/`Decodable` and an explicit
//! [`connection::ApiCall`] (key, version, header versions).
//!
//! - [`connection`]: framing, ApiVersions negotiation, typed and raw request paths, [`ClientError`].
//! - [`admin`]: CreateTopics, Metadata, IncrementalAlterConfigs (GROUP configs), FindCoordinator.
//! - [`producer`]: one record batch to one partition, acks=-1.
//! - [`producer_txn`]: [`producer_txn::TransactionalProducer`]: producer transactions
//!   (FindCoordinator, InitProducerId, AddPartitionsToTxn, transactional Produce, EndTxn) that
//!   also carry a share consumer's acknowledgements (TxnShareAcknowledge, key 93).
//! - [`read_committed`]: a partition as a `read_committed` consumer sees it (Fetch up to the
//!   LSO, aborted transactions filtered out).
//! - [`share_consumer`]: [`share_consumer::ShareConsumer`]: ShareGroupHeartbeat, ShareFetch,
//!   ShareAcknowledge v1; explicit acknowledgement; transactional acknowledgement (API 1001).
//! - [`transactions`]: [`transactions::ShareTransactionCoordinator`] (begin, prepare, commit,
//!   abort, list; keys 1000, 1002–1005) and the KIP's recovery routine [`transactions::recover`].
//!
//! Limits: every loop is bounded by a deadline or a count; the constants are in [`limits`].

pub mod admin;
pub mod connection;
pub mod producer;
pub mod producer_txn;
pub mod read_committed;
pub mod share_consumer;
pub mod transactions;

pub use connection::{ApiCall, ClientError, Connection, Result};

/// The Kafka error codes the client decides on, in one place (Kafka's `Errors.java` numbers;
/// a test pins them to `kafka_protocol::ResponseError`).
pub mod code {
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    /// What a broker with KIP-890 part 1 answers a transactional Produce while the
    /// transaction is still completing (Kafka's mapping of CONCURRENT_TRANSACTIONS).
    pub const NOT_ENOUGH_REPLICAS: i16 = 19;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const INVALID_REQUEST: i16 = 42;
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub const INVALID_TXN_STATE: i16 = 48;
    pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    pub const CONCURRENT_TRANSACTIONS: i16 = 51;
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    pub const PRODUCER_FENCED: i16 = 90;
    pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
    pub const FENCED_MEMBER_EPOCH: i16 = 110;
    pub const SHARE_SESSION_NOT_FOUND: i16 = 122;
    pub const INVALID_SHARE_SESSION_EPOCH: i16 = 123;

    #[cfg(test)]
    mod tests {
        use kafka_protocol::ResponseError as E;

        #[test]
        fn codes_are_kafkas() {
            for (code, error) in [
                (super::NOT_LEADER_OR_FOLLOWER, E::NotLeaderOrFollower),
                (super::REQUEST_TIMED_OUT, E::RequestTimedOut),
                (
                    super::COORDINATOR_LOAD_IN_PROGRESS,
                    E::CoordinatorLoadInProgress,
                ),
                (super::COORDINATOR_NOT_AVAILABLE, E::CoordinatorNotAvailable),
                (super::NOT_COORDINATOR, E::NotCoordinator),
                (super::NOT_ENOUGH_REPLICAS, E::NotEnoughReplicas),
                (super::UNKNOWN_MEMBER_ID, E::UnknownMemberId),
                (super::UNSUPPORTED_VERSION, E::UnsupportedVersion),
                (super::INVALID_REQUEST, E::InvalidRequest),
                (super::INVALID_PRODUCER_EPOCH, E::InvalidProducerEpoch),
                (super::INVALID_TXN_STATE, E::InvalidTxnState),
                (
                    super::INVALID_PRODUCER_ID_MAPPING,
                    E::InvalidProducerIdMapping,
                ),
                (super::CONCURRENT_TRANSACTIONS, E::ConcurrentTransactions),
                (
                    super::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    E::TransactionalIdAuthorizationFailed,
                ),
                (super::PRODUCER_FENCED, E::ProducerFenced),
                (
                    super::TRANSACTIONAL_ID_NOT_FOUND,
                    E::TransactionalIdNotFound,
                ),
                (super::FENCED_MEMBER_EPOCH, E::FencedMemberEpoch),
                (super::SHARE_SESSION_NOT_FOUND, E::ShareSessionNotFound),
                (
                    super::INVALID_SHARE_SESSION_EPOCH,
                    E::InvalidShareSessionEpoch,
                ),
            ] {
                assert_eq!(code, error.code(), "{error:?}");
            }
        }
    }
}

/// Every limit of the client in one place (units in the names).
pub mod limits {
    use std::time::Duration;

    /// Largest response frame accepted from a broker (Kafka's `socket.request.max.bytes` default
    /// is 100 MiB; a share fetch is far smaller).
    pub const RESPONSE_FRAME_BYTES_MAX: usize = 100 * 1024 * 1024;
    /// TCP connect timeout.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// Socket read/write timeout for one request (covers a ShareFetch's `max_wait_ms`).
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
    /// How long a ShareFetch may wait on the broker for records.
    pub const SHARE_FETCH_MAX_WAIT_MS: i32 = 500;
    /// Records a ShareFetch asks for (Kafka's `max.poll.records` default).
    pub const SHARE_FETCH_MAX_RECORDS: i32 = 500;
    /// Bytes a ShareFetch asks for (Kafka's `fetch.max.bytes` default).
    pub const SHARE_FETCH_MAX_BYTES: i32 = 50 * 1024 * 1024;
    /// Bytes a ShareFetch asks for per partition (Kafka's `max.partition.fetch.bytes` default).
    pub const SHARE_FETCH_PARTITION_MAX_BYTES: i32 = 1024 * 1024;
    /// Records one decoded batch may claim; a larger count is treated as corrupt input.
    pub const BATCH_RECORDS_MAX: i32 = 1_000_000;
    /// Heartbeat interval used until the coordinator says otherwise.
    pub const HEARTBEAT_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
    /// Longest sleep of the poll loop while it has nothing to fetch.
    pub const POLL_IDLE_SLEEP: Duration = Duration::from_millis(100);
    /// Iterations of one `poll` call, whatever its timeout (a second bound beside the deadline).
    pub const POLL_ITERATIONS_MAX: u32 = 10_000;
    /// Pending acknowledgements buffered per consumer before `acknowledge` refuses more.
    pub const PENDING_ACKS_MAX: usize = 10_000_000;
    /// Open transactions buffered by `acknowledge_transactional` at once.
    pub const PENDING_TRANSACTIONS_MAX: usize = 64;
    /// Attempts of one transaction-coordinator call (the first included) on retriable errors.
    pub const TXN_CALL_ATTEMPTS_MAX: u32 = 6;
    /// Sleep before the first retry of a transaction-coordinator call; doubles per retry.
    pub const TXN_RETRY_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
    /// Longest sleep between two attempts of a transaction-coordinator call.
    pub const TXN_RETRY_BACKOFF_MAX: Duration = Duration::from_millis(1_600);
}
