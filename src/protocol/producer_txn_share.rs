//! Wire types of KIP-1289's draft TxnShareAcknowledge (API key 93, version 0, flexible):
//! share acknowledgements staged into a producer transaction. The codec is generated from
//! `schemas/TxnShareAcknowledge{Request,Response}.json` (the draft's message spec, apache/kafka
//! PR 22357) by `tools/protocol-gen.rs`; this module re-exports it under stable names and holds a
//! populated sample for the codec and guard tests. Semantics: `schemas/txn-share-acknowledge.md`.

pub use super::generated::txn_share_acknowledge_request::{
    TxnShareAcknowledgeBatch, TxnShareAcknowledgePartition, TxnShareAcknowledgeRequest,
    TxnShareAcknowledgeTopic,
};
pub use super::generated::txn_share_acknowledge_response::{
    TxnShareAcknowledgePartitionResult, TxnShareAcknowledgeResponse, TxnShareAcknowledgeTopicResult,
};

/// A request with every field set (two topics, several batches), for codec and guard tests.
pub fn sample_request() -> TxnShareAcknowledgeRequest {
    let batch = |first: i64, last: i64, t: i8| TxnShareAcknowledgeBatch {
        first_offset: first,
        last_offset: last,
        acknowledge_type: t,
    };
    TxnShareAcknowledgeRequest {
        transactional_id: Some("orders-pipeline-0".into()),
        group_id: "orders".into(),
        producer_id: 4_000,
        producer_epoch: 3,
        member_id: "member-1".into(),
        member_epoch: 7,
        topics: vec![
            TxnShareAcknowledgeTopic {
                topic_id: uuid::Uuid::from_u128(0x1234),
                partitions: vec![
                    TxnShareAcknowledgePartition {
                        partition_index: 0,
                        acknowledgement_batches: vec![batch(0, 9, 1), batch(10, 10, 3)],
                    },
                    TxnShareAcknowledgePartition {
                        partition_index: 2,
                        acknowledgement_batches: vec![batch(100, 120, 1)],
                    },
                ],
            },
            TxnShareAcknowledgeTopic {
                topic_id: uuid::Uuid::from_u128(0x5678),
                partitions: vec![],
            },
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::{Decodable, Encodable};

    #[test]
    fn request_and_response_round_trip() {
        let request = sample_request();
        let mut buf = bytes::BytesMut::new();
        request.encode(&mut buf, 0).unwrap();
        let mut bytes = buf.freeze();
        assert_eq!(
            TxnShareAcknowledgeRequest::decode(&mut bytes, 0).unwrap(),
            request
        );
        assert!(bytes.is_empty());

        let response = TxnShareAcknowledgeResponse {
            throttle_time_ms: 0,
            error_code: 0,
            topics: vec![TxnShareAcknowledgeTopicResult {
                topic_id: uuid::Uuid::from_u128(0x1234),
                partitions: vec![TxnShareAcknowledgePartitionResult {
                    partition_index: 2,
                    error_code: 121,
                }],
            }],
        };
        let mut buf = bytes::BytesMut::new();
        response.encode(&mut buf, 0).unwrap();
        let mut bytes = buf.freeze();
        assert_eq!(
            TxnShareAcknowledgeResponse::decode(&mut bytes, 0).unwrap(),
            response
        );
    }

    /// A null TransactionalId (the draft makes it nullable) decodes.
    #[test]
    fn a_null_transactional_id_decodes() {
        let mut request = sample_request();
        request.transactional_id = None;
        let mut buf = bytes::BytesMut::new();
        request.encode(&mut buf, 0).unwrap();
        assert_eq!(
            TxnShareAcknowledgeRequest::decode(&mut buf.freeze(), 0).unwrap(),
            request
        );
    }
}
