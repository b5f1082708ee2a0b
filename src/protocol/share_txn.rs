//! Wire types of the share-transaction RPCs, API keys 1000–1005 (Kafka's own keys are below 100).
//!
//! What: the twelve request/response messages of `schemas/share-transactions.md`. Their codec
//! is generated from the wire spec's JSON message specs, `schemas/Share*.json`, by
//! `tools/protocol-gen.rs` into `protocol::generated` (one module per message), like the Kafka
//! messages the `kafka-protocol` crate lacks; this module re-exports them under the names the
//! broker and the client use, and adds the typed views of their raw codes. The generated types
//! implement `kafka_protocol`'s `Encodable`, `Decodable`, `Message`, `HeaderVersion`, and for
//! requests `Request` with the response type, so handlers use them exactly like the crate's
//! own messages (`codec::decode_body::<ShareBeginTransactionRequest>(&request)`).
//!
//! Encoding (all messages are version 0 only, flexible from version 0): compact strings and
//! arrays, and a tagged-field section ending every structure; we write no tagged fields, and on
//! read unknown ones are skipped by their sizes (`protocol::wire`).
//!
//! Representation choices: strings are `String`, error messages `Option<String>` (nullable),
//! topic ids `uuid::Uuid`, and transaction states and acknowledge types stay raw `i8` on the wire
//! types — convert with `TxnState::try_from(code)` / `i8::from(state)` (defined here) where the
//! meaning is needed, so a message with an unknown code still decodes and can be answered.
//!
//! Safety on input: decoding never panics and never reserves more elements than bytes remain;
//! truncated input, bad UTF-8, a null where none is allowed, and over-long varints are typed
//! errors ([`WireError`]).

use crate::share_txn::TxnState;
use std::fmt;

pub use super::generated::share_abort_transaction_request::ShareAbortTransactionRequest;
pub use super::generated::share_abort_transaction_response::ShareAbortTransactionResponse;
pub use super::generated::share_acknowledge_transactional_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch,
    ShareAcknowledgeTransactionalRequest,
};
pub use super::generated::share_acknowledge_transactional_response::{
    PartitionData, ShareAcknowledgeTransactionalResponse,
    ShareAcknowledgeTransactionalTopicResponse,
};
pub use super::generated::share_begin_transaction_request::ShareBeginTransactionRequest;
pub use super::generated::share_begin_transaction_response::ShareBeginTransactionResponse;
pub use super::generated::share_commit_transaction_request::ShareCommitTransactionRequest;
pub use super::generated::share_commit_transaction_response::ShareCommitTransactionResponse;
pub use super::generated::share_list_transactions_request::ShareListTransactionsRequest;
pub use super::generated::share_list_transactions_response::{
    ShareListTransactionsResponse, ShareTransaction, TransactionPartition,
};
pub use super::generated::share_prepare_transaction_request::SharePrepareTransactionRequest;
pub use super::generated::share_prepare_transaction_response::SharePrepareTransactionResponse;
pub use super::wire::WireError;

/// The only version of every share-transaction message.
pub const VERSION: i16 = 0;

// ---------------------------------------------------------------------------------------------
// Transaction state codes

/// A wire transaction-state code outside 0..=4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownTxnStateCode(pub i8);

impl fmt::Display for UnknownTxnStateCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown transaction state code {}", self.0)
    }
}

impl std::error::Error for UnknownTxnStateCode {}

/// The wire code (INT8): 0 EMPTY, 1 ONGOING, 2 PREPARE, 3 COMMITTED, 4 ABORTED.
impl From<TxnState> for i8 {
    fn from(state: TxnState) -> i8 {
        state.code()
    }
}

impl TryFrom<i8> for TxnState {
    type Error = UnknownTxnStateCode;

    fn try_from(code: i8) -> Result<TxnState, UnknownTxnStateCode> {
        TxnState::from_code(code).ok_or(UnknownTxnStateCode(code))
    }
}

// ---------------------------------------------------------------------------------------------
// Typed views of the raw state codes

macro_rules! state_accessor {
    ($($ty:ident . $field:ident),*) => {$(
        impl $ty {
            /// The state code as a [`TxnState`].
            pub fn state(&self) -> Result<TxnState, UnknownTxnStateCode> {
                TxnState::try_from(self.$field)
            }
        }
    )*};
}

state_accessor!(
    ShareBeginTransactionResponse.transaction_state,
    SharePrepareTransactionResponse.transaction_state,
    ShareCommitTransactionResponse.transaction_state,
    ShareAbortTransactionResponse.transaction_state,
    ShareTransaction.state
);

impl ShareListTransactionsRequest {
    /// The filter as states: the pending ones (ONGOING, PREPARE) when empty.
    pub fn state_filter(&self) -> Result<Vec<TxnState>, UnknownTxnStateCode> {
        if self.states.is_empty() {
            return Ok(vec![TxnState::Ongoing, TxnState::Prepare]);
        }
        self.states.iter().map(|&c| TxnState::try_from(c)).collect()
    }
}

/// Populated messages for tests (here and in `guard`): every array holds elements, strings and
/// error messages are set where the type allows.
#[cfg(test)]
pub(crate) mod samples {
    use super::*;
    use kafka_protocol::protocol::Encodable;
    use uuid::Uuid;

    pub fn topic(n: u128) -> Uuid {
        Uuid::from_u128(0x0011_2233_4455_6677_8899_aabb_ccdd_ee00 + n)
    }

    pub fn begin_request() -> ShareBeginTransactionRequest {
        ShareBeginTransactionRequest {
            group_id: "orders-group".into(),
            transaction_id: "orders-group-flink-42".into(),
            timeout_ms: 90_000,
        }
    }

    pub fn begin_response() -> ShareBeginTransactionResponse {
        ShareBeginTransactionResponse {
            throttle_time_ms: 7,
            error_code: 51,
            error_message: Some("share.transaction.max.pending reached".into()),
            transaction_state: TxnState::Ongoing.into(),
            timeout_ms: 60_000,
        }
    }

    pub fn ack_request() -> ShareAcknowledgeTransactionalRequest {
        let batch = |first: i64, types: Vec<i8>| AcknowledgementBatch {
            first_offset: first,
            last_offset: first + types.len().max(1) as i64 - 1,
            acknowledge_types: types,
        };
        ShareAcknowledgeTransactionalRequest {
            group_id: "orders-group".into(),
            member_id: "member-é-1".into(),
            transaction_id: "orders-group-flink-42".into(),
            topics: vec![
                AcknowledgeTopic {
                    topic_id: topic(1),
                    partitions: vec![
                        AcknowledgePartition {
                            partition_index: 0,
                            acknowledgement_batches: vec![
                                batch(10, vec![1]),
                                batch(20, vec![1, 3, 0]),
                            ],
                        },
                        AcknowledgePartition {
                            partition_index: 7,
                            acknowledgement_batches: vec![batch(i64::MAX - 1, vec![3])],
                        },
                    ],
                },
                AcknowledgeTopic {
                    topic_id: topic(2),
                    partitions: vec![AcknowledgePartition {
                        partition_index: 2,
                        acknowledgement_batches: vec![batch(0, vec![1; 200])],
                    }],
                },
            ],
        }
    }

    pub fn ack_response() -> ShareAcknowledgeTransactionalResponse {
        ShareAcknowledgeTransactionalResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            responses: vec![ShareAcknowledgeTransactionalTopicResponse {
                topic_id: topic(1),
                partitions: vec![
                    PartitionData {
                        partition_index: 0,
                        error_code: 0,
                        error_message: None,
                    },
                    PartitionData {
                        partition_index: 7,
                        error_code: 121,
                        error_message: Some("offset 12 is not ACQUIRED by member-1".into()),
                    },
                ],
            }],
        }
    }

    pub fn prepare_request() -> SharePrepareTransactionRequest {
        SharePrepareTransactionRequest {
            group_id: "g".into(),
            transaction_id: "g-p-1".into(),
        }
    }

    pub fn prepare_response() -> SharePrepareTransactionResponse {
        SharePrepareTransactionResponse {
            throttle_time_ms: 1,
            error_code: 48,
            error_message: Some("timed out".into()),
            transaction_state: TxnState::Aborted.into(),
        }
    }

    pub fn commit_request() -> ShareCommitTransactionRequest {
        ShareCommitTransactionRequest {
            group_id: "g".into(),
            transaction_id: "g-p-2".into(),
        }
    }

    pub fn commit_response() -> ShareCommitTransactionResponse {
        ShareCommitTransactionResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            transaction_state: TxnState::Committed.into(),
        }
    }

    pub fn abort_request() -> ShareAbortTransactionRequest {
        ShareAbortTransactionRequest {
            group_id: "g".into(),
            transaction_id: "g-p-3".into(),
        }
    }

    pub fn abort_response() -> ShareAbortTransactionResponse {
        ShareAbortTransactionResponse {
            throttle_time_ms: 0,
            error_code: 105,
            error_message: Some(String::new()),
            transaction_state: TxnState::Empty.into(),
        }
    }

    pub fn list_request() -> ShareListTransactionsRequest {
        ShareListTransactionsRequest {
            group_id: "orders-group".into(),
            states: vec![1, 2, 4],
        }
    }

    pub fn list_response() -> ShareListTransactionsResponse {
        ShareListTransactionsResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            transactions: vec![
                ShareTransaction {
                    transaction_id: "orders-group-flink-42".into(),
                    state: TxnState::Prepare.into(),
                    timeout_ms: 60_000,
                    create_time_ms: 1_700_000_000_000,
                    prepare_time_ms: 1_700_000_001_000,
                    partitions: vec![
                        TransactionPartition {
                            topic_id: topic(1),
                            partition_index: 0,
                            locked_records: 3,
                        },
                        TransactionPartition {
                            topic_id: topic(1),
                            partition_index: 7,
                            locked_records: 1,
                        },
                    ],
                },
                ShareTransaction {
                    transaction_id: "orders-group-flink-43".into(),
                    state: TxnState::Ongoing.into(),
                    timeout_ms: 60_000,
                    create_time_ms: 1_700_000_002_000,
                    prepare_time_ms: -1,
                    partitions: vec![TransactionPartition {
                        topic_id: topic(2),
                        partition_index: 2,
                        locked_records: 200,
                    }],
                },
            ],
        }
    }

    /// Every request, encoded, with its API key.
    pub fn encoded_requests() -> Vec<(i16, bytes::Bytes)> {
        use crate::protocol::apis::*;
        fn enc<T: Encodable>(m: &T) -> bytes::Bytes {
            let mut buf = bytes::BytesMut::new();
            m.encode(&mut buf, VERSION).expect("sample encodes");
            buf.freeze()
        }
        vec![
            (SHARE_BEGIN_TRANSACTION, enc(&begin_request())),
            (SHARE_ACKNOWLEDGE_TRANSACTIONAL, enc(&ack_request())),
            (SHARE_PREPARE_TRANSACTION, enc(&prepare_request())),
            (SHARE_COMMIT_TRANSACTION, enc(&commit_request())),
            (SHARE_ABORT_TRANSACTION, enc(&abort_request())),
            (SHARE_LIST_TRANSACTIONS, enc(&list_request())),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::samples::*;
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request as KafkaRequest};
    use std::fmt::Debug;
    use uuid::Uuid;

    /// Calls the generic function `$f` on every sample message.
    macro_rules! each_sample {
        ($f:ident) => {
            $f(&begin_request());
            $f(&begin_response());
            $f(&ack_request());
            $f(&ack_response());
            $f(&prepare_request());
            $f(&prepare_response());
            $f(&commit_request());
            $f(&commit_response());
            $f(&abort_request());
            $f(&abort_response());
            $f(&list_request());
            $f(&list_response());
        };
    }

    fn encode<T: Encodable>(m: &T) -> Vec<u8> {
        let mut buf = BytesMut::new();
        m.encode(&mut buf, 0).unwrap();
        let size = m.compute_size(0).unwrap();
        assert_eq!(size, buf.len(), "compute_size agrees with encode");
        buf.to_vec()
    }

    fn decode<T: Decodable>(bytes: &[u8]) -> anyhow::Result<T> {
        let mut buf = Bytes::copy_from_slice(bytes);
        T::decode(&mut buf, 0)
    }

    #[test]
    fn txn_state_codes_match_the_spec() {
        let spec = [
            (0i8, TxnState::Empty),
            (1, TxnState::Ongoing),
            (2, TxnState::Prepare),
            (3, TxnState::Committed),
            (4, TxnState::Aborted),
        ];
        for (code, state) in spec {
            assert_eq!(i8::from(state), code);
            assert_eq!(TxnState::try_from(code), Ok(state));
        }
        for code in [-1i8, 5, i8::MAX, i8::MIN] {
            assert_eq!(TxnState::try_from(code), Err(UnknownTxnStateCode(code)));
        }
        assert_eq!(begin_response().state(), Ok(TxnState::Ongoing));
        assert_eq!(
            ShareListTransactionsRequest::default().state_filter(),
            Ok(vec![TxnState::Ongoing, TxnState::Prepare])
        );
        assert_eq!(
            list_request().state_filter(),
            Ok(vec![
                TxnState::Ongoing,
                TxnState::Prepare,
                TxnState::Aborted
            ])
        );
    }

    #[test]
    fn every_message_round_trips_at_version_0() {
        fn check<T: Encodable + Decodable + PartialEq + Debug>(m: &T) {
            let bytes = encode(m);
            let mut buf = Bytes::from(bytes.clone());
            let back = T::decode(&mut buf, 0).unwrap();
            assert_eq!(&back, m);
            assert!(buf.is_empty(), "decode consumed every byte");
            // Through a `&[u8]` buffer too (the client may decode from a slice).
            let mut slice: &[u8] = &bytes;
            assert_eq!(&T::decode(&mut slice, 0).unwrap(), m);
        }
        each_sample!(check);
        // Defaults (empty strings, null messages, empty arrays) round-trip as well.
        check(&ShareListTransactionsResponse::default());
        check(&ShareAcknowledgeTransactionalRequest::default());
    }

    #[test]
    fn only_version_0_exists() {
        fn check<T: Encodable + Decodable>(m: &T) {
            let bytes = encode(m);
            for version in [-1, 1, 5] {
                assert!(m.encode(&mut BytesMut::new(), version).is_err());
                assert!(m.compute_size(version).is_err());
                assert!(T::decode(&mut Bytes::from(bytes.clone()), version).is_err());
            }
        }
        each_sample!(check);
        assert_eq!(
            <ShareBeginTransactionRequest as KafkaRequest>::KEY,
            crate::protocol::apis::SHARE_BEGIN_TRANSACTION
        );
        assert_eq!(<ShareListTransactionsRequest as KafkaRequest>::KEY, 1005);
        assert_eq!(ShareCommitTransactionRequest::header_version(0), 2);
        assert_eq!(ShareCommitTransactionResponse::header_version(0), 1);
    }

    /// Bytes written by hand from the wire spec, not by the encoder.
    #[test]
    fn begin_request_golden_bytes() {
        let request = ShareBeginTransactionRequest {
            group_id: "g1".into(),
            transaction_id: "g1-p-7".into(),
            timeout_ms: 30_000,
        };
        #[rustfmt::skip]
        let golden: &[u8] = &[
            0x03, b'g', b'1',                               // GroupId: compact length 2+1
            0x07, b'g', b'1', b'-', b'p', b'-', b'7',       // TransactionId: 6+1
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x75, 0x30, // TimeoutMs INT64 30000
            0x00,                                           // no tagged fields
        ];
        assert_eq!(encode(&request), golden);
        assert_eq!(
            decode::<ShareBeginTransactionRequest>(golden).unwrap(),
            request
        );
        // -1: the group's default timeout.
        let mut default_timeout = request.clone();
        default_timeout.timeout_ms = -1;
        assert_eq!(&encode(&default_timeout)[10..18], &[0xff; 8]);
    }

    fn list_golden(partition_tags: &[u8]) -> Vec<u8> {
        let mut golden = vec![
            0x00, 0x00, 0x00, 0x05, // ThrottleTimeMs 5
            0x00, 0x00, // ErrorCode 0
            0x00, // ErrorMessage null
            0x02, // Transactions: 1 element
            0x04, b't', b'-', b'1', // TransactionId "t-1"
            0x02, // State PREPARE
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xea, 0x60, // TimeoutMs 60000
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, // CreateTimeMs 1000
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // PrepareTimeMs -1
            0x02, // Partitions: 1 element
            0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, // TopicId
            0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x00, 0x00, 0x00,
            0x03, // PartitionIndex 3
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x2c, // LockedRecords 300
        ];
        golden.extend_from_slice(partition_tags); // partition's tagged fields
        golden.push(0x00); // transaction's tagged fields
        golden.push(0x00); // response's tagged fields
        golden
    }

    fn list_golden_message() -> ShareListTransactionsResponse {
        ShareListTransactionsResponse {
            throttle_time_ms: 5,
            error_code: 0,
            error_message: None,
            transactions: vec![ShareTransaction {
                transaction_id: "t-1".into(),
                state: 2,
                timeout_ms: 60_000,
                create_time_ms: 1_000,
                prepare_time_ms: -1,
                partitions: vec![TransactionPartition {
                    topic_id: Uuid::from_bytes([
                        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                    ]),
                    partition_index: 3,
                    locked_records: 300,
                }],
            }],
        }
    }

    #[test]
    fn list_response_golden_bytes() {
        let golden = list_golden(&[0x00]);
        assert_eq!(encode(&list_golden_message()), golden);
        assert_eq!(
            decode::<ShareListTransactionsResponse>(&golden).unwrap(),
            list_golden_message()
        );
        // A non-null error message: compact length + 1, then UTF-8.
        let mut with_error = list_golden_message();
        with_error.error_code = 69;
        with_error.error_message = Some("no".into());
        with_error.transactions.clear();
        assert_eq!(
            encode(&with_error),
            [0, 0, 0, 5, 0, 69, 0x03, b'n', b'o', 0x01, 0x00]
        );
    }

    #[test]
    fn ack_request_golden_bytes() {
        let request = ShareAcknowledgeTransactionalRequest {
            group_id: "g".into(),
            member_id: "m".into(),
            transaction_id: "g-x".into(),
            topics: vec![AcknowledgeTopic {
                topic_id: Uuid::from_u128(1),
                partitions: vec![AcknowledgePartition {
                    partition_index: 1,
                    acknowledgement_batches: vec![AcknowledgementBatch {
                        first_offset: 4,
                        last_offset: 5,
                        acknowledge_types: vec![1, 3],
                    }],
                }],
            }],
        };
        let mut golden = vec![0x02, b'g', 0x02, b'm', 0x04, b'g', b'-', b'x'];
        golden.push(0x02); // Topics: 1
        golden.extend_from_slice(&[0; 15]);
        golden.push(1); // TopicId
        golden.push(0x02); // Partitions: 1
        golden.extend_from_slice(&[0, 0, 0, 1]); // PartitionIndex
        golden.push(0x02); // AcknowledgementBatches: 1
        golden.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 4]); // FirstOffset
        golden.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5]); // LastOffset
        golden.extend_from_slice(&[0x03, 1, 3]); // AcknowledgeTypes [ACCEPT, REJECT]
        golden.extend_from_slice(&[0, 0, 0, 0]); // batch, partition, topic, request tags
        assert_eq!(encode(&request), golden);
        assert_eq!(
            decode::<ShareAcknowledgeTransactionalRequest>(&golden).unwrap(),
            request
        );
    }

    #[test]
    fn unknown_tagged_fields_are_skipped() {
        // Two unknown fields: tag 5 with 3 bytes, tag 200 (varint 0xc8 0x01) with 1 byte.
        let tags: &[u8] = &[0x02, 0x05, 0x03, b'a', b'b', b'c', 0xc8, 0x01, 0x01, b'z'];
        // In a nested structure (a partition of the list response) …
        let golden = list_golden(tags);
        assert_eq!(
            decode::<ShareListTransactionsResponse>(&golden).unwrap(),
            list_golden_message()
        );
        // … and at the top level of a request.
        let mut bytes = encode(&begin_request());
        bytes.pop();
        bytes.extend_from_slice(tags);
        assert_eq!(
            decode::<ShareBeginTransactionRequest>(&bytes).unwrap(),
            begin_request()
        );
        // A tagged field whose size runs past the end is truncation, not a panic.
        let mut bytes = encode(&begin_request());
        bytes.pop();
        bytes.extend_from_slice(&[0x01, 0x05, 0x7f, b'a']);
        assert!(decode::<ShareBeginTransactionRequest>(&bytes).is_err());
    }

    #[test]
    fn truncated_input_is_an_error() {
        fn check<T: Encodable + Decodable + Debug>(m: &T) {
            let bytes = encode(m);
            for cut in 0..bytes.len() {
                assert!(
                    decode::<T>(&bytes[..cut]).is_err(),
                    "{} cut at {cut} of {}",
                    std::any::type_name::<T>(),
                    bytes.len()
                );
            }
        }
        each_sample!(check);
    }

    #[test]
    fn hostile_input_is_refused_without_allocating() {
        // States: count 0xFFFFFFFF - 1 elements in a 7-byte body.
        let body = [0x02, b'g', 0xff, 0xff, 0xff, 0xff, 0x0f];
        let err = decode::<ShareListTransactionsRequest>(&body).unwrap_err();
        assert!(matches!(
            err.downcast_ref::<WireError>(),
            Some(WireError::Truncated { what: "States", .. })
        ));
        // Topics count 2^28 with nothing after it.
        let body = [
            0x02, b'g', 0x02, b'm', 0x02, b't', 0x80, 0x80, 0x80, 0x80, 0x01,
        ];
        assert!(decode::<ShareAcknowledgeTransactionalRequest>(&body).is_err());
        // Overlong varint, varint above u32::MAX.
        for body in [&[0x80u8; 6][..], &[0xff, 0xff, 0xff, 0xff, 0x1f]] {
            let err = decode::<SharePrepareTransactionRequest>(body).unwrap_err();
            assert!(matches!(
                err.downcast_ref::<WireError>(),
                Some(WireError::BadVarint { .. })
            ));
        }
        // Null where a string is required.
        let err = decode::<ShareCommitTransactionRequest>(&[0x00, 0x02, b't', 0x00]).unwrap_err();
        assert_eq!(
            err.downcast_ref::<WireError>(),
            Some(&WireError::UnexpectedNull { what: "GroupId" })
        );
        // Invalid UTF-8.
        let err =
            decode::<ShareAbortTransactionRequest>(&[0x02, 0xff, 0x02, b't', 0x00]).unwrap_err();
        assert_eq!(
            err.downcast_ref::<WireError>(),
            Some(&WireError::BadUtf8 { what: "GroupId" })
        );
        // Null arrays are not allowed.
        let err = decode::<ShareListTransactionsRequest>(&[0x02, b'g', 0x00, 0x00]).unwrap_err();
        assert_eq!(
            err.downcast_ref::<WireError>(),
            Some(&WireError::UnexpectedNull { what: "States" })
        );
    }
}
