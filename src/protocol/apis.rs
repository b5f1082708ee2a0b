//! The APIs this broker serves: keys, version ranges, and which versions are "flexible".
//!
//! [`SUPPORTED_APIS`] is the single source of truth: ApiVersions advertises exactly this table,
//! and dispatch refuses anything outside it. An API is listed only when it is implemented.
//! The table is open to API keys the `kafka-protocol` crate does not know (the project's own keys
//! 1000–1005, `schemas/share-transactions.md`): header versions come from `flexible_min`, not
//! from the crate.

use kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};
use kafka_protocol::ResponseError;

/// One served API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiSpec {
    pub key: i16,
    pub name: &'static str,
    pub min_version: i16,
    pub max_version: i16,
    /// First version that uses flexible (tagged-field) encoding; `i16::MAX` if none.
    pub flexible_min: i16,
}

impl ApiSpec {
    pub fn supports(&self, version: i16) -> bool {
        version >= self.min_version && version <= self.max_version
    }

    pub fn is_flexible(&self, version: i16) -> bool {
        version >= self.flexible_min
    }

    /// Request header version: 2 for flexible versions, 1 otherwise
    /// (ApiVersions and ControlledShutdown v0 use header v0 in Kafka; header v1 only adds the
    /// client id, which ApiVersions v0–2 requests carry too).
    pub fn request_header_version(&self, version: i16) -> i16 {
        if self.is_flexible(version) {
            2
        } else {
            1
        }
    }

    /// Response header version: 1 for flexible versions, 0 otherwise; ApiVersions always 0
    /// (a client must be able to read it before it knows what the broker supports).
    pub fn response_header_version(&self, version: i16) -> i16 {
        if self.key != API_VERSIONS && self.is_flexible(version) {
            1
        } else {
            0
        }
    }
}

pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;
pub const LIST_OFFSETS: i16 = 2;
pub const METADATA: i16 = 3;
pub const OFFSET_COMMIT: i16 = 8;
pub const OFFSET_FETCH: i16 = 9;
pub const FIND_COORDINATOR: i16 = 10;
pub const JOIN_GROUP: i16 = 11;
pub const HEARTBEAT: i16 = 12;
pub const LEAVE_GROUP: i16 = 13;
pub const SYNC_GROUP: i16 = 14;
pub const DESCRIBE_GROUPS: i16 = 15;
pub const LIST_GROUPS: i16 = 16;
pub const SASL_HANDSHAKE: i16 = 17;
pub const API_VERSIONS: i16 = 18;
pub const CREATE_TOPICS: i16 = 19;
pub const DELETE_TOPICS: i16 = 20;
pub const DELETE_RECORDS: i16 = 21;
pub const INIT_PRODUCER_ID: i16 = 22;
pub const OFFSET_FOR_LEADER_EPOCH: i16 = 23;
pub const DESCRIBE_ACLS: i16 = 29;
pub const CREATE_ACLS: i16 = 30;
pub const DELETE_ACLS: i16 = 31;
pub const ADD_PARTITIONS_TO_TXN: i16 = 24;
pub const ADD_OFFSETS_TO_TXN: i16 = 25;
pub const END_TXN: i16 = 26;
pub const TXN_OFFSET_COMMIT: i16 = 28;
pub const DESCRIBE_CONFIGS: i16 = 32;
pub const SASL_AUTHENTICATE: i16 = 36;
pub const CREATE_PARTITIONS: i16 = 37;
pub const DELETE_GROUPS: i16 = 42;
pub const INCREMENTAL_ALTER_CONFIGS: i16 = 44;
pub const OFFSET_DELETE: i16 = 47;
pub const DESCRIBE_CLIENT_QUOTAS: i16 = 48;
pub const DESCRIBE_USER_SCRAM_CREDENTIALS: i16 = 50;
pub const ALTER_USER_SCRAM_CREDENTIALS: i16 = 51;
pub const DESCRIBE_CLUSTER: i16 = 60;
pub const DESCRIBE_PRODUCERS: i16 = 61;
pub const DESCRIBE_TRANSACTIONS: i16 = 65;
pub const LIST_TRANSACTIONS: i16 = 66;
pub const CONSUMER_GROUP_HEARTBEAT: i16 = 68;
pub const CONSUMER_GROUP_DESCRIBE: i16 = 69;
pub const SHARE_GROUP_HEARTBEAT: i16 = 76;
pub const SHARE_GROUP_DESCRIBE: i16 = 77;
pub const SHARE_FETCH: i16 = 78;
pub const SHARE_ACKNOWLEDGE: i16 = 79;
pub const DESCRIBE_SHARE_GROUP_OFFSETS: i16 = 90;
pub const ALTER_SHARE_GROUP_OFFSETS: i16 = 91;
pub const DELETE_SHARE_GROUP_OFFSETS: i16 = 92;
/// KIP-1289's draft TxnShareAcknowledge (apache/kafka PR 22357; `schemas/txn-share-acknowledge.md`):
/// share acknowledgements inside a producer transaction. Kafka 4.4 gives key 93 to
/// StreamsGroupTopologyDescriptionUpdate, which Lockstep does not serve; the draft predates it.
pub const TXN_SHARE_ACKNOWLEDGE: i16 = 93;

// The project's share-transaction RPCs (`schemas/share-transactions.md`, `schemas/Share*.json`,
// message types in `share_txn`). Kafka's own keys are below 100; the `kafka-protocol` crate does
// not know these.
pub const SHARE_BEGIN_TRANSACTION: i16 = 1000;
pub const SHARE_ACKNOWLEDGE_TRANSACTIONAL: i16 = 1001;
pub const SHARE_PREPARE_TRANSACTION: i16 = 1002;
pub const SHARE_COMMIT_TRANSACTION: i16 = 1003;
pub const SHARE_ABORT_TRANSACTION: i16 = 1004;
pub const SHARE_LIST_TRANSACTIONS: i16 = 1005;

/// The share-transaction keys in order (each version 0 only, flexible from version 0).
pub const SHARE_TRANSACTION_KEYS: [i16; 6] = [
    SHARE_BEGIN_TRANSACTION,
    SHARE_ACKNOWLEDGE_TRANSACTIONAL,
    SHARE_PREPARE_TRANSACTION,
    SHARE_COMMIT_TRANSACTION,
    SHARE_ABORT_TRANSACTION,
    SHARE_LIST_TRANSACTIONS,
];

/// Every API this broker implements, sorted by key.
pub const SUPPORTED_APIS: &[ApiSpec] = &[
    ApiSpec {
        key: PRODUCE,
        name: "Produce",
        min_version: 3,
        max_version: 13,
        flexible_min: 9,
    },
    ApiSpec {
        key: FETCH,
        name: "Fetch",
        min_version: 4,
        max_version: 18,
        flexible_min: 12,
    },
    ApiSpec {
        key: LIST_OFFSETS,
        name: "ListOffsets",
        min_version: 1,
        max_version: 10,
        flexible_min: 6,
    },
    ApiSpec {
        key: METADATA,
        name: "Metadata",
        min_version: 0,
        max_version: 13,
        flexible_min: 9,
    },
    // Committed offsets of consumer groups. Kafka 4.4 also serves OffsetCommit and
    // OffsetFetch v10 (topic ids), which the kafka-protocol crate lacks.
    ApiSpec {
        key: OFFSET_COMMIT,
        name: "OffsetCommit",
        min_version: 2,
        max_version: 9,
        flexible_min: 8,
    },
    ApiSpec {
        key: OFFSET_FETCH,
        name: "OffsetFetch",
        min_version: 1,
        max_version: 9,
        flexible_min: 6,
    },
    ApiSpec {
        key: FIND_COORDINATOR,
        name: "FindCoordinator",
        min_version: 0,
        max_version: 6,
        flexible_min: 3,
    },
    // The classic group protocol, Kafka 4.4's versions.
    ApiSpec {
        key: JOIN_GROUP,
        name: "JoinGroup",
        min_version: 0,
        max_version: 9,
        flexible_min: 6,
    },
    ApiSpec {
        key: HEARTBEAT,
        name: "Heartbeat",
        min_version: 0,
        max_version: 4,
        flexible_min: 4,
    },
    ApiSpec {
        key: LEAVE_GROUP,
        name: "LeaveGroup",
        min_version: 0,
        max_version: 5,
        flexible_min: 4,
    },
    ApiSpec {
        key: SYNC_GROUP,
        name: "SyncGroup",
        min_version: 0,
        max_version: 5,
        flexible_min: 4,
    },
    ApiSpec {
        key: DESCRIBE_GROUPS,
        name: "DescribeGroups",
        min_version: 0,
        max_version: 6,
        flexible_min: 5,
    },
    // Every group type: share groups and consumer groups (classic, KIP-848).
    ApiSpec {
        key: LIST_GROUPS,
        name: "ListGroups",
        min_version: 0,
        max_version: 5,
        flexible_min: 3,
    },
    // SASL: served by the connection before authentication (runtime::conn), and
    // answered ILLEGAL_SASL_STATE afterwards or on a listener without SASL (as Kafka does).
    ApiSpec {
        key: SASL_HANDSHAKE,
        name: "SaslHandshake",
        min_version: 0,
        max_version: 1,
        flexible_min: i16::MAX,
    },
    ApiSpec {
        key: API_VERSIONS,
        name: "ApiVersions",
        min_version: 0,
        max_version: 4,
        flexible_min: 3,
    },
    ApiSpec {
        key: CREATE_TOPICS,
        name: "CreateTopics",
        min_version: 2,
        max_version: 7,
        flexible_min: 5,
    },
    ApiSpec {
        key: DELETE_TOPICS,
        name: "DeleteTopics",
        min_version: 1,
        max_version: 6,
        flexible_min: 4,
    },
    ApiSpec {
        key: DELETE_RECORDS,
        name: "DeleteRecords",
        min_version: 0,
        max_version: 2,
        flexible_min: 2,
    },
    ApiSpec {
        key: INIT_PRODUCER_ID,
        name: "InitProducerId",
        min_version: 0,
        max_version: 5,
        flexible_min: 2,
    },
    // Kafka 4.4's range (v2–4; flexible from 4).
    ApiSpec {
        key: OFFSET_FOR_LEADER_EPOCH,
        name: "OffsetForLeaderEpoch",
        min_version: 2,
        max_version: 4,
        flexible_min: 4,
    },
    // Producer transactions: Kafka 4.4's ranges.
    ApiSpec {
        key: ADD_PARTITIONS_TO_TXN,
        name: "AddPartitionsToTxn",
        min_version: 0,
        max_version: 5,
        flexible_min: 3,
    },
    ApiSpec {
        key: ADD_OFFSETS_TO_TXN,
        name: "AddOffsetsToTxn",
        min_version: 0,
        max_version: 4,
        flexible_min: 3,
    },
    ApiSpec {
        key: END_TXN,
        name: "EndTxn",
        min_version: 0,
        max_version: 5,
        flexible_min: 3,
    },
    // TxnOffsetCommit v0–4; v5 (transaction version 2) and v6 (topic ids) not served.
    ApiSpec {
        key: TXN_OFFSET_COMMIT,
        name: "TxnOffsetCommit",
        min_version: 0,
        max_version: 4,
        flexible_min: 3,
    },
    ApiSpec {
        key: DESCRIBE_ACLS,
        name: "DescribeAcls",
        min_version: 1,
        max_version: 3,
        flexible_min: 2,
    },
    ApiSpec {
        key: CREATE_ACLS,
        name: "CreateAcls",
        min_version: 1,
        max_version: 3,
        flexible_min: 2,
    },
    ApiSpec {
        key: DELETE_ACLS,
        name: "DeleteAcls",
        min_version: 1,
        max_version: 3,
        flexible_min: 2,
    },
    ApiSpec {
        key: DESCRIBE_CONFIGS,
        name: "DescribeConfigs",
        min_version: 1,
        max_version: 4,
        flexible_min: 4,
    },
    ApiSpec {
        key: SASL_AUTHENTICATE,
        name: "SaslAuthenticate",
        min_version: 0,
        max_version: 2,
        flexible_min: 2,
    },
    ApiSpec {
        key: CREATE_PARTITIONS,
        name: "CreatePartitions",
        min_version: 0,
        max_version: 3,
        flexible_min: 2,
    },
    // Consumer and share groups. v3 (Kafka 4.4: an error message per group) with the generated
    // codec.
    ApiSpec {
        key: DELETE_GROUPS,
        name: "DeleteGroups",
        min_version: 0,
        max_version: 3,
        flexible_min: 2,
    },
    ApiSpec {
        key: INCREMENTAL_ALTER_CONFIGS,
        name: "IncrementalAlterConfigs",
        min_version: 0,
        max_version: 1,
        flexible_min: 1,
    },
    ApiSpec {
        key: OFFSET_DELETE,
        name: "OffsetDelete",
        min_version: 0,
        max_version: 0,
        flexible_min: i16::MAX,
    },
    // Client quotas: Lockstep has none, so every filter matches nothing (kafka-configs
    // --describe --entity-type users asks before it describes SCRAM credentials).
    ApiSpec {
        key: DESCRIBE_CLIENT_QUOTAS,
        name: "DescribeClientQuotas",
        min_version: 0,
        max_version: 1,
        flexible_min: 1,
    },
    // SCRAM credentials, Kafka 4.4's v0 (flexible).
    ApiSpec {
        key: DESCRIBE_USER_SCRAM_CREDENTIALS,
        name: "DescribeUserScramCredentials",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    ApiSpec {
        key: ALTER_USER_SCRAM_CREDENTIALS,
        name: "AlterUserScramCredentials",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    // Kafka 4.4's ranges: DescribeCluster v0–2, DescribeProducers v0 (both flexible from 0).
    ApiSpec {
        key: DESCRIBE_CLUSTER,
        name: "DescribeCluster",
        min_version: 0,
        max_version: 2,
        flexible_min: 0,
    },
    ApiSpec {
        key: DESCRIBE_PRODUCERS,
        name: "DescribeProducers",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    // Producer transactions.
    ApiSpec {
        key: DESCRIBE_TRANSACTIONS,
        name: "DescribeTransactions",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    // v0–1: v2's TransactionalIdPattern (a Java regular expression) is not served.
    ApiSpec {
        key: LIST_TRANSACTIONS,
        name: "ListTransactions",
        min_version: 0,
        max_version: 1,
        flexible_min: 0,
    },
    // KIP-848 (`group.protocol=consumer`), Kafka 4.4's versions (flexible from 0); v1 adds the
    // topic regex, which is refused (`server::consumer_group_api`).
    ApiSpec {
        key: CONSUMER_GROUP_HEARTBEAT,
        name: "ConsumerGroupHeartbeat",
        min_version: 0,
        max_version: 1,
        flexible_min: 0,
    },
    ApiSpec {
        key: CONSUMER_GROUP_DESCRIBE,
        name: "ConsumerGroupDescribe",
        min_version: 0,
        max_version: 1,
        flexible_min: 0,
    },
    // KIP-932. ShareGroupHeartbeat and ShareGroupDescribe v1 (the crate's codec); ShareFetch and
    // ShareAcknowledge v1–v2 (KIP-1206/1222; codec generated, `protocol::generated`).
    ApiSpec {
        key: SHARE_GROUP_HEARTBEAT,
        name: "ShareGroupHeartbeat",
        min_version: 1,
        max_version: 1,
        flexible_min: 0,
    },
    ApiSpec {
        key: SHARE_GROUP_DESCRIBE,
        name: "ShareGroupDescribe",
        min_version: 1,
        max_version: 1,
        flexible_min: 0,
    },
    ApiSpec {
        key: SHARE_FETCH,
        name: "ShareFetch",
        min_version: 1,
        max_version: 2,
        flexible_min: 0,
    },
    ApiSpec {
        key: SHARE_ACKNOWLEDGE,
        name: "ShareAcknowledge",
        min_version: 1,
        max_version: 2,
        flexible_min: 0,
    },
    // Share-group admin (KIP-932). DescribeShareGroupOffsets v1 adds the lag (KIP-1226); its
    // codec is generated (`protocol::generated`).
    ApiSpec {
        key: DESCRIBE_SHARE_GROUP_OFFSETS,
        name: "DescribeShareGroupOffsets",
        min_version: 0,
        max_version: 1,
        flexible_min: 0,
    },
    ApiSpec {
        key: ALTER_SHARE_GROUP_OFFSETS,
        name: "AlterShareGroupOffsets",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    ApiSpec {
        key: DELETE_SHARE_GROUP_OFFSETS,
        name: "DeleteShareGroupOffsets",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    ApiSpec {
        key: TXN_SHARE_ACKNOWLEDGE,
        name: "TxnShareAcknowledge",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    // The share-transaction APIs (`schemas/share-transactions.md`).
    ApiSpec {
        key: SHARE_BEGIN_TRANSACTION,
        name: "ShareBeginTransaction",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    ApiSpec {
        key: SHARE_ACKNOWLEDGE_TRANSACTIONAL,
        name: "ShareAcknowledgeTransactional",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    ApiSpec {
        key: SHARE_PREPARE_TRANSACTION,
        name: "SharePrepareTransaction",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    ApiSpec {
        key: SHARE_COMMIT_TRANSACTION,
        name: "ShareCommitTransaction",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    ApiSpec {
        key: SHARE_ABORT_TRANSACTION,
        name: "ShareAbortTransaction",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
    ApiSpec {
        key: SHARE_LIST_TRANSACTIONS,
        name: "ShareListTransactions",
        min_version: 0,
        max_version: 0,
        flexible_min: 0,
    },
];

/// The spec of `key`, if served.
pub fn api_spec(key: i16) -> Option<&'static ApiSpec> {
    SUPPORTED_APIS.iter().find(|spec| spec.key == key)
}

/// Name of an API key for logs and metrics (`"unknown"` when not served).
pub fn api_name(key: i16) -> &'static str {
    api_spec(key).map_or("unknown", |spec| spec.name)
}

fn advertised_keys() -> Vec<ApiVersion> {
    SUPPORTED_APIS
        .iter()
        .map(|spec| {
            let mut entry = ApiVersion::default();
            entry.api_key = spec.key;
            entry.min_version = spec.min_version;
            entry.max_version = spec.max_version;
            entry
        })
        .collect()
}

/// The ApiVersions response for a supported request version.
pub fn api_versions_response() -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.error_code = 0;
    response.api_keys = advertised_keys();
    response
}

/// The body sent when a client asks ApiVersions with a version this broker does not serve:
/// encoded as version 0 (whatever was asked), error UNSUPPORTED_VERSION, and the supported
/// keys, so the client can retry with a version both sides know. This is what Kafka does;
/// the Java client parses exactly this shape.
pub fn api_versions_unsupported_response() -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.error_code = ResponseError::UnsupportedVersion.code();
    response.api_keys = advertised_keys();
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ApiKey;
    use kafka_protocol::protocol::{
        Decodable, Encodable, HeaderVersion, Message, Request, VersionRange,
    };

    #[test]
    fn table_is_sorted_and_unique() {
        for pair in SUPPORTED_APIS.windows(2) {
            assert!(pair[0].key < pair[1].key);
        }
    }

    type HeaderFn = fn(i16) -> i16;

    /// The versions and header versions of a Kafka key served with a generated codec.
    fn generated(key: i16) -> Option<(VersionRange, HeaderFn, HeaderFn)> {
        use crate::protocol::generated as g;
        fn of<Q: Request>() -> (VersionRange, HeaderFn, HeaderFn) {
            (
                <Q as Message>::VERSIONS,
                <Q as HeaderVersion>::header_version,
                <Q::Response as HeaderVersion>::header_version,
            )
        }
        Some(match key {
            SHARE_FETCH => of::<g::ShareFetchRequest>(),
            SHARE_ACKNOWLEDGE => of::<g::ShareAcknowledgeRequest>(),
            DESCRIBE_SHARE_GROUP_OFFSETS => of::<g::DescribeShareGroupOffsetsRequest>(),
            DELETE_GROUPS => of::<g::DeleteGroupsRequest>(),
            TXN_SHARE_ACKNOWLEDGE => of::<g::TxnShareAcknowledgeRequest>(),
            _ => return None,
        })
    }

    #[test]
    fn table_agrees_with_the_crate_for_kafka_keys() {
        for spec in SUPPORTED_APIS {
            // The project's own keys (1000–1005) are unknown to the crate; their header versions
            // come from `flexible_min` alone (tested in `codec`).
            let Ok(key) = ApiKey::try_from(spec.key) else {
                assert!(
                    SHARE_TRANSACTION_KEYS.contains(&spec.key) || spec.key == TXN_SHARE_ACKNOWLEDGE,
                    "{}",
                    spec.name
                );
                if spec.key == TXN_SHARE_ACKNOWLEDGE {
                    assert!(generated(spec.key).is_some());
                }
                continue;
            };
            if let Some((range, request_header, response_header)) = generated(spec.key) {
                // Served with the generated codec (Kafka 4.4 versions the crate lacks).
                assert!(spec.min_version >= range.min, "{}", spec.name);
                assert!(spec.max_version <= range.max, "{}", spec.name);
                for version in spec.min_version..=spec.max_version {
                    assert_eq!(
                        spec.request_header_version(version),
                        request_header(version)
                    );
                    assert_eq!(
                        spec.response_header_version(version),
                        response_header(version)
                    );
                }
                continue;
            }
            let crate_range = key.valid_versions();
            assert!(spec.min_version >= crate_range.min, "{}", spec.name);
            assert!(spec.max_version <= crate_range.max, "{}", spec.name);
            for version in spec.min_version..=spec.max_version {
                assert_eq!(
                    spec.request_header_version(version),
                    key.request_header_version(version),
                    "{} v{version} request header",
                    spec.name
                );
                assert_eq!(
                    spec.response_header_version(version),
                    key.response_header_version(version),
                    "{} v{version} response header",
                    spec.name
                );
            }
        }
    }

    #[test]
    fn unsupported_body_is_v0_with_error_and_keys() {
        let response = api_versions_unsupported_response();
        let mut buf = bytes::BytesMut::new();
        response.encode(&mut buf, 0).unwrap();
        // v0 layout: error_code i16, array count i32, then (key, min, max) i16 triples.
        assert_eq!(&buf[0..2], &35i16.to_be_bytes());
        let count = i32::from_be_bytes([buf[2], buf[3], buf[4], buf[5]]);
        assert_eq!(count as usize, SUPPORTED_APIS.len());
        assert_eq!(buf.len(), 2 + 4 + 6 * SUPPORTED_APIS.len());
        let decoded = ApiVersionsResponse::decode(&mut buf.freeze(), 0).unwrap();
        assert!(decoded
            .api_keys
            .iter()
            .any(|k| k.api_key == API_VERSIONS && k.max_version == 4));
    }

    #[test]
    fn full_response_encodes_at_every_version() {
        for version in 0..=4 {
            let mut buf = bytes::BytesMut::new();
            api_versions_response().encode(&mut buf, version).unwrap();
            let decoded = ApiVersionsResponse::decode(&mut buf.freeze(), version).unwrap();
            assert_eq!(decoded.api_keys.len(), SUPPORTED_APIS.len());
        }
    }
}
