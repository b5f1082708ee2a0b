//! Structural pre-check of request bodies, run before the `kafka-protocol` decoder.
//!
//! Why: the crate decodes an array by reserving `Vec::with_capacity(count)` from the wire's
//! count before reading any element. A 20-byte request declaring 2^31 elements would make the
//! broker try to reserve hundreds of GiB and abort the process. Every encoded element takes at
//! least one byte, so a count larger than the bytes left is malformed on its face.
//!
//! [`check_request`] walks a body by the message's schema (fields per version, compact or
//! classic encodings, tagged-field buffers skipped by their sizes) and refuses it if any array
//! count exceeds the bytes remaining, or if the body ends early. A body it accepts can allocate
//! at most O(body bytes) in the decoder. The schemas mirror Kafka's JSON message specs for the
//! versions in `apis::SUPPORTED_APIS`, plus the project's share-transaction requests (keys
//! 1000–1005, `schemas/Share*.json`), which are checked here before they are served. Tests encode
//! populated requests (with the crate, or with `share_txn` for the project's keys) at every
//! version and require the walk to consume exactly the encoded bytes.
//!
//! Pure, no allocation, bounded by the body length.

use super::apis;
use std::fmt;

/// Wire type of one field.
#[derive(Clone, Copy, Debug)]
enum Ty {
    I8,
    I16,
    I32,
    I64,
    Bool,
    Uuid,
    /// String or nullable string.
    Str,
    /// Bytes, nullable bytes or records.
    Bytes,
    /// Array of structs.
    Arr(&'static [Field]),
    /// Array of int8.
    ArrI8,
    /// Array of int32.
    ArrI32,
    /// Array of int64.
    ArrI64,
    /// Array of strings.
    ArrStr,
}

/// A field present in versions `min ..= max`.
#[derive(Clone, Copy, Debug)]
struct Field {
    min: i16,
    max: i16,
    ty: Ty,
}

const fn f(min: i16, ty: Ty) -> Field {
    Field {
        min,
        max: i16::MAX,
        ty,
    }
}

const fn fr(min: i16, max: i16, ty: Ty) -> Field {
    Field { min, max, ty }
}

use Ty::*;

// Produce v3–13 (flexible from 9).
const PRODUCE_PARTITION: &[Field] = &[f(0, I32), f(0, Bytes)];
const PRODUCE_TOPIC: &[Field] = &[fr(0, 12, Str), f(13, Uuid), f(0, Arr(PRODUCE_PARTITION))];
const PRODUCE: &[Field] = &[f(3, Str), f(0, I16), f(0, I32), f(0, Arr(PRODUCE_TOPIC))];

// Fetch v4–18 (flexible from 12).
const FETCH_PARTITION: &[Field] = &[
    f(0, I32),
    f(9, I32),
    f(0, I64),
    f(12, I32),
    f(5, I64),
    f(0, I32),
];
const FETCH_TOPIC: &[Field] = &[fr(0, 12, Str), f(13, Uuid), f(0, Arr(FETCH_PARTITION))];
const FORGOTTEN_TOPIC: &[Field] = &[fr(7, 12, Str), f(13, Uuid), f(7, ArrI32)];
const FETCH: &[Field] = &[
    fr(0, 14, I32),
    f(0, I32),
    f(0, I32),
    f(3, I32),
    f(4, I8),
    f(7, I32),
    f(7, I32),
    f(0, Arr(FETCH_TOPIC)),
    f(7, Arr(FORGOTTEN_TOPIC)),
    f(11, Str),
];

// ListOffsets v1–10 (flexible from 6).
const LIST_OFFSETS_PARTITION: &[Field] = &[f(0, I32), f(4, I32), f(0, I64), fr(0, 0, I32)];
const LIST_OFFSETS_TOPIC: &[Field] = &[f(0, Str), f(0, Arr(LIST_OFFSETS_PARTITION))];
const LIST_OFFSETS: &[Field] = &[
    f(0, I32),
    f(2, I8),
    f(0, Arr(LIST_OFFSETS_TOPIC)),
    f(10, I32),
];

// Metadata v0–13 (flexible from 9).
const METADATA_TOPIC: &[Field] = &[f(10, Uuid), f(0, Str)];
const METADATA: &[Field] = &[
    f(0, Arr(METADATA_TOPIC)),
    f(4, Bool),
    fr(8, 10, Bool),
    f(8, Bool),
];

// FindCoordinator v0–6 (flexible from 3).
const FIND_COORDINATOR: &[Field] = &[fr(0, 3, Str), f(1, I8), f(4, ArrStr)];

// ListGroups v0–5 (flexible from 3).
const LIST_GROUPS: &[Field] = &[f(4, ArrStr), f(5, ArrStr)];

// ApiVersions v0–4 (flexible from 3).
const API_VERSIONS: &[Field] = &[f(3, Str), f(3, Str)];

// CreateTopics v2–7 (flexible from 5).
const CREATE_ASSIGNMENT: &[Field] = &[f(0, I32), f(0, ArrI32)];
const CREATE_CONFIG: &[Field] = &[f(0, Str), f(0, Str)];
const CREATE_TOPIC: &[Field] = &[
    f(0, Str),
    f(0, I32),
    f(0, I16),
    f(0, Arr(CREATE_ASSIGNMENT)),
    f(0, Arr(CREATE_CONFIG)),
];
const CREATE_TOPICS: &[Field] = &[f(0, Arr(CREATE_TOPIC)), f(0, I32), f(1, Bool)];

// DeleteTopics v1–6 (flexible from 4).
const DELETE_TOPIC_STATE: &[Field] = &[f(6, Str), f(6, Uuid)];
const DELETE_TOPICS: &[Field] = &[f(6, Arr(DELETE_TOPIC_STATE)), fr(0, 5, ArrStr), f(0, I32)];

// DeleteRecords v0–2 (flexible from 2).
const DELETE_RECORDS_PARTITION: &[Field] = &[f(0, I32), f(0, I64)];
const DELETE_RECORDS_TOPIC: &[Field] = &[f(0, Str), f(0, Arr(DELETE_RECORDS_PARTITION))];
const DELETE_RECORDS: &[Field] = &[f(0, Arr(DELETE_RECORDS_TOPIC)), f(0, I32)];

// CreatePartitions v0–3 (flexible from 2); the assignments array is nullable.
const CREATE_PARTITIONS_ASSIGNMENT: &[Field] = &[f(0, ArrI32)];
const CREATE_PARTITIONS_TOPIC: &[Field] = &[
    f(0, Str),
    f(0, I32),
    f(0, Arr(CREATE_PARTITIONS_ASSIGNMENT)),
];
const CREATE_PARTITIONS: &[Field] = &[f(0, Arr(CREATE_PARTITIONS_TOPIC)), f(0, I32), f(0, Bool)];

// DeleteGroups v0–3 (flexible from 2; v3 changes the response only).
const DELETE_GROUPS: &[Field] = &[f(0, ArrStr)];

// InitProducerId v0–5 (flexible from 2).
const INIT_PRODUCER_ID: &[Field] = &[f(0, Str), f(0, I32), f(3, I64), f(3, I16)];

// AddPartitionsToTxn v0–5 (flexible from 3; batched from 4), AddOffsetsToTxn v0–4 and EndTxn
// v0–5 (flexible from 3), DescribeTransactions v0 and ListTransactions v0–1 (flexible from 0).
const ADD_PARTITIONS_TO_TXN_TOPIC: &[Field] = &[f(0, Str), f(0, ArrI32)];
const ADD_PARTITIONS_TO_TXN_TRANSACTION: &[Field] = &[
    f(0, Str),
    f(0, I64),
    f(0, I16),
    f(0, Bool),
    f(0, Arr(ADD_PARTITIONS_TO_TXN_TOPIC)),
];
const ADD_PARTITIONS_TO_TXN: &[Field] = &[
    f(4, Arr(ADD_PARTITIONS_TO_TXN_TRANSACTION)),
    fr(0, 3, Str),
    fr(0, 3, I64),
    fr(0, 3, I16),
    fr(0, 3, Arr(ADD_PARTITIONS_TO_TXN_TOPIC)),
];
const ADD_OFFSETS_TO_TXN: &[Field] = &[f(0, Str), f(0, I64), f(0, I16), f(0, Str)];
const END_TXN: &[Field] = &[f(0, Str), f(0, I64), f(0, I16), f(0, Bool)];
const DESCRIBE_TRANSACTIONS: &[Field] = &[f(0, ArrStr)];
const LIST_TRANSACTIONS_FIELDS: &[Field] = &[f(0, ArrStr), f(0, ArrI64), f(1, I64)];

// OffsetForLeaderEpoch v2–4 (flexible from 4).
const OFFSET_FOR_LEADER_EPOCH_PARTITION: &[Field] = &[f(0, I32), f(2, I32), f(0, I32)];
const OFFSET_FOR_LEADER_EPOCH_TOPIC: &[Field] =
    &[f(0, Str), f(0, Arr(OFFSET_FOR_LEADER_EPOCH_PARTITION))];
const OFFSET_FOR_LEADER_EPOCH: &[Field] = &[f(3, I32), f(0, Arr(OFFSET_FOR_LEADER_EPOCH_TOPIC))];

// DescribeCluster v0–2, DescribeProducers v0 (flexible from 0).
const DESCRIBE_CLUSTER: &[Field] = &[f(0, Bool), f(1, I8), f(2, Bool)];
const DESCRIBE_PRODUCERS_TOPIC: &[Field] = &[f(0, Str), f(0, ArrI32)];
const DESCRIBE_PRODUCERS: &[Field] = &[f(0, Arr(DESCRIBE_PRODUCERS_TOPIC))];

// ConsumerGroupHeartbeat v0–1, ConsumerGroupDescribe v0–1 (KIP-848; flexible from 0).
const CONSUMER_GROUP_HEARTBEAT_TOPIC: &[Field] = &[f(0, Uuid), f(0, ArrI32)];
const CONSUMER_GROUP_HEARTBEAT: &[Field] = &[
    f(0, Str),
    f(0, Str),
    f(0, I32),
    f(0, Str),
    f(0, Str),
    f(0, I32),
    f(0, ArrStr),
    f(1, Str),
    f(0, Str),
    f(0, Arr(CONSUMER_GROUP_HEARTBEAT_TOPIC)),
];
const CONSUMER_GROUP_DESCRIBE: &[Field] = &[f(0, ArrStr), f(0, Bool)];

// DescribeConfigs v1–4 (flexible from 4).
// CreateAcls / DescribeAcls / DeleteAcls v1-3: an ACL or filter is type, name, pattern type (v1+),
// principal, host, operation, permission.
const ACL_FIELDS: &[Field] = &[
    f(0, I8),
    f(0, Str),
    f(1, I8),
    f(0, Str),
    f(0, Str),
    f(0, I8),
    f(0, I8),
];
const CREATE_ACLS: &[Field] = &[f(0, Arr(ACL_FIELDS))];
const DELETE_ACLS: &[Field] = &[f(0, Arr(ACL_FIELDS))];

const DESCRIBE_CONFIGS_RESOURCE: &[Field] = &[f(0, I8), f(0, Str), f(0, ArrStr)];
const DESCRIBE_CONFIGS: &[Field] = &[f(0, Arr(DESCRIBE_CONFIGS_RESOURCE)), f(1, Bool), f(3, Bool)];

// IncrementalAlterConfigs v0–1 (flexible from 1).
const ALTERABLE_CONFIG: &[Field] = &[f(0, Str), f(0, I8), f(0, Str)];
const ALTER_CONFIGS_RESOURCE: &[Field] = &[f(0, I8), f(0, Str), f(0, Arr(ALTERABLE_CONFIG))];
const INCREMENTAL_ALTER_CONFIGS: &[Field] = &[f(0, Arr(ALTER_CONFIGS_RESOURCE)), f(0, Bool)];

// ShareGroupHeartbeat v1, ShareFetch v1–2, ShareAcknowledge v1–2 (KIP-932, KIP-1206/1222;
// flexible from 0).
const SHARE_GROUP_HEARTBEAT: &[Field] = &[f(0, Str), f(0, Str), f(0, I32), f(0, Str), f(0, ArrStr)];
const SHARE_FETCH_PARTITION: &[Field] = &[f(0, I32), fr(0, 0, I32), f(0, Arr(SHARE_ACK_BATCH))];
const SHARE_FETCH_TOPIC: &[Field] = &[f(0, Uuid), f(0, Arr(SHARE_FETCH_PARTITION))];
const SHARE_FORGOTTEN_TOPIC: &[Field] = &[f(0, Uuid), f(0, ArrI32)];
const SHARE_FETCH: &[Field] = &[
    f(0, Str),
    f(0, Str),
    f(0, I32),
    f(0, I32),
    f(0, I32),
    f(0, I32),
    f(1, I32),
    f(1, I32),
    f(2, I8),
    f(2, Bool),
    f(0, Arr(SHARE_FETCH_TOPIC)),
    f(0, Arr(SHARE_FORGOTTEN_TOPIC)),
];
const SHARE_ACKNOWLEDGE: &[Field] = &[
    f(0, Str),
    f(0, Str),
    f(0, I32),
    f(2, Bool),
    f(0, Arr(SHARE_ACK_TOPIC)),
];

// The share-transaction RPCs, keys 1000–1005 (`schemas/Share*.json`): v0 only, flexible from 0.
const SHARE_BEGIN_TRANSACTION: &[Field] = &[f(0, Str), f(0, Str), f(0, I64)];
const SHARE_ACK_BATCH: &[Field] = &[f(0, I64), f(0, I64), f(0, ArrI8)];
const SHARE_ACK_PARTITION: &[Field] = &[f(0, I32), f(0, Arr(SHARE_ACK_BATCH))];
const SHARE_ACK_TOPIC: &[Field] = &[f(0, Uuid), f(0, Arr(SHARE_ACK_PARTITION))];
const SHARE_ACKNOWLEDGE_TRANSACTIONAL: &[Field] =
    &[f(0, Str), f(0, Str), f(0, Str), f(0, Arr(SHARE_ACK_TOPIC))];
// TxnShareAcknowledge v0 (KIP-1289 draft, `schemas/TxnShareAcknowledgeRequest.json`).
const TXN_SHARE_ACK_BATCH: &[Field] = &[f(0, I64), f(0, I64), f(0, I8)];
const TXN_SHARE_ACK_PARTITION: &[Field] = &[f(0, I32), f(0, Arr(TXN_SHARE_ACK_BATCH))];
const TXN_SHARE_ACK_TOPIC: &[Field] = &[f(0, Uuid), f(0, Arr(TXN_SHARE_ACK_PARTITION))];
const TXN_SHARE_ACKNOWLEDGE: &[Field] = &[
    f(0, Str),
    f(0, Str),
    f(0, I64),
    f(0, I16),
    f(0, Str),
    f(0, I32),
    f(0, Arr(TXN_SHARE_ACK_TOPIC)),
];
/// SharePrepareTransaction, ShareCommitTransaction, ShareAbortTransaction.
const SHARE_TRANSACTION_OUTCOME: &[Field] = &[f(0, Str), f(0, Str)];
const SHARE_LIST_TRANSACTIONS: &[Field] = &[f(0, Str), f(0, ArrI8)];

// ShareGroupDescribe v1, DescribeShareGroupOffsets v0–1, AlterShareGroupOffsets v0,
// DeleteShareGroupOffsets v0 (KIP-932; flexible from 0).
const SHARE_GROUP_DESCRIBE: &[Field] = &[f(0, ArrStr), f(0, Bool)];
const DESCRIBE_SHARE_OFFSETS_TOPIC: &[Field] = &[f(0, Str), f(0, ArrI32)];
const DESCRIBE_SHARE_OFFSETS_GROUP: &[Field] =
    &[f(0, Str), f(0, Arr(DESCRIBE_SHARE_OFFSETS_TOPIC))];
const DESCRIBE_SHARE_GROUP_OFFSETS: &[Field] = &[f(0, Arr(DESCRIBE_SHARE_OFFSETS_GROUP))];
const ALTER_SHARE_OFFSETS_PARTITION: &[Field] = &[f(0, I32), f(0, I64)];
const ALTER_SHARE_OFFSETS_TOPIC: &[Field] = &[f(0, Str), f(0, Arr(ALTER_SHARE_OFFSETS_PARTITION))];
const ALTER_SHARE_GROUP_OFFSETS: &[Field] = &[f(0, Str), f(0, Arr(ALTER_SHARE_OFFSETS_TOPIC))];
const DELETE_SHARE_OFFSETS_TOPIC: &[Field] = &[f(0, Str)];
const DELETE_SHARE_GROUP_OFFSETS: &[Field] = &[f(0, Str), f(0, Arr(DELETE_SHARE_OFFSETS_TOPIC))];

// OffsetCommit v2–9 (flexible from 8), OffsetFetch v1–9 (flexible from 6); the v10 fields
// (topic ids) are listed for completeness.
const OFFSET_COMMIT_PARTITION: &[Field] = &[f(0, I32), f(0, I64), f(6, I32), f(0, Str)];
const OFFSET_COMMIT_TOPIC: &[Field] = &[
    fr(0, 9, Str),
    f(10, Uuid),
    f(0, Arr(OFFSET_COMMIT_PARTITION)),
];
const OFFSET_COMMIT: &[Field] = &[
    f(0, Str),
    f(1, I32),
    f(1, Str),
    f(7, Str),
    fr(2, 4, I64),
    f(0, Arr(OFFSET_COMMIT_TOPIC)),
];
const OFFSET_FETCH_TOPIC: &[Field] = &[fr(0, 7, Str), fr(0, 7, ArrI32)];
const OFFSET_FETCH_GROUP_TOPIC: &[Field] = &[fr(8, 9, Str), f(10, Uuid), f(8, ArrI32)];
const OFFSET_FETCH_GROUP: &[Field] = &[
    f(8, Str),
    f(9, Str),
    f(9, I32),
    f(8, Arr(OFFSET_FETCH_GROUP_TOPIC)),
];
const OFFSET_FETCH: &[Field] = &[
    fr(0, 7, Str),
    fr(0, 7, Arr(OFFSET_FETCH_TOPIC)),
    f(8, Arr(OFFSET_FETCH_GROUP)),
    f(7, Bool),
];

// JoinGroup v0–9 (flexible from 6), SyncGroup v0–5, Heartbeat v0–4, LeaveGroup v0–5 (flexible
// from 4), DescribeGroups v0–6 (flexible from 5), OffsetDelete v0.
const JOIN_PROTOCOL: &[Field] = &[f(0, Str), f(0, Bytes)];
const JOIN_GROUP: &[Field] = &[
    f(0, Str),
    f(0, I32),
    f(1, I32),
    f(0, Str),
    f(5, Str),
    f(0, Str),
    f(0, Arr(JOIN_PROTOCOL)),
    f(8, Str),
];
const SYNC_ASSIGNMENT: &[Field] = &[f(0, Str), f(0, Bytes)];
const SYNC_GROUP: &[Field] = &[
    f(0, Str),
    f(0, I32),
    f(0, Str),
    f(3, Str),
    f(5, Str),
    f(5, Str),
    f(0, Arr(SYNC_ASSIGNMENT)),
];
const HEARTBEAT: &[Field] = &[f(0, Str), f(0, I32), f(0, Str), f(3, Str)];
const LEAVE_MEMBER: &[Field] = &[f(3, Str), f(3, Str), f(5, Str)];
const LEAVE_GROUP: &[Field] = &[f(0, Str), fr(0, 2, Str), f(3, Arr(LEAVE_MEMBER))];
const DESCRIBE_GROUPS: &[Field] = &[f(0, ArrStr), f(3, Bool)];
const OFFSET_DELETE_PARTITION: &[Field] = &[f(0, I32)];
const OFFSET_DELETE_TOPIC: &[Field] = &[f(0, Str), f(0, Arr(OFFSET_DELETE_PARTITION))];
const OFFSET_DELETE: &[Field] = &[f(0, Str), f(0, Arr(OFFSET_DELETE_TOPIC))];

// SASL and SCRAM credentials: SaslHandshake v0–1, SaslAuthenticate v0–2 (flexible
// from 2), DescribeClientQuotas v0–1 (flexible from 1), Describe/AlterUserScramCredentials v0
// (flexible).
const SASL_HANDSHAKE: &[Field] = &[f(0, Str)];
const SASL_AUTHENTICATE: &[Field] = &[f(0, Bytes)];
const QUOTA_COMPONENT: &[Field] = &[f(0, Str), f(0, I8), f(0, Str)];
const DESCRIBE_CLIENT_QUOTAS: &[Field] = &[f(0, Arr(QUOTA_COMPONENT)), f(0, Bool)];
const SCRAM_USER: &[Field] = &[f(0, Str)];
const DESCRIBE_USER_SCRAM_CREDENTIALS: &[Field] = &[f(0, Arr(SCRAM_USER))];
const SCRAM_DELETION: &[Field] = &[f(0, Str), f(0, I8)];
const SCRAM_UPSERTION: &[Field] = &[f(0, Str), f(0, I8), f(0, I32), f(0, Bytes), f(0, Bytes)];
const ALTER_USER_SCRAM_CREDENTIALS: &[Field] =
    &[f(0, Arr(SCRAM_DELETION)), f(0, Arr(SCRAM_UPSERTION))];

// TxnOffsetCommit v0–4 (flexible from 3).
const TXN_OFFSET_COMMIT_PARTITION: &[Field] = &[f(0, I32), f(0, I64), f(2, I32), f(0, Str)];
const TXN_OFFSET_COMMIT_TOPIC: &[Field] = &[f(0, Str), f(0, Arr(TXN_OFFSET_COMMIT_PARTITION))];
const TXN_OFFSET_COMMIT: &[Field] = &[
    f(0, Str),
    f(0, Str),
    f(0, I64),
    f(0, I16),
    f(3, I32),
    f(3, Str),
    f(3, Str),
    f(0, Arr(TXN_OFFSET_COMMIT_TOPIC)),
];

fn schema(api_key: i16) -> Option<&'static [Field]> {
    Some(match api_key {
        apis::PRODUCE => PRODUCE,
        apis::FETCH => FETCH,
        apis::LIST_OFFSETS => LIST_OFFSETS,
        apis::METADATA => METADATA,
        apis::FIND_COORDINATOR => FIND_COORDINATOR,
        apis::OFFSET_COMMIT => OFFSET_COMMIT,
        apis::OFFSET_FETCH => OFFSET_FETCH,
        apis::JOIN_GROUP => JOIN_GROUP,
        apis::SYNC_GROUP => SYNC_GROUP,
        apis::HEARTBEAT => HEARTBEAT,
        apis::LEAVE_GROUP => LEAVE_GROUP,
        apis::DESCRIBE_GROUPS => DESCRIBE_GROUPS,
        apis::OFFSET_DELETE => OFFSET_DELETE,
        apis::TXN_OFFSET_COMMIT => TXN_OFFSET_COMMIT,
        apis::API_VERSIONS => API_VERSIONS,
        apis::CREATE_TOPICS => CREATE_TOPICS,
        apis::DELETE_TOPICS => DELETE_TOPICS,
        apis::DELETE_RECORDS => DELETE_RECORDS,
        apis::CREATE_PARTITIONS => CREATE_PARTITIONS,
        apis::DELETE_GROUPS => DELETE_GROUPS,
        apis::INIT_PRODUCER_ID => INIT_PRODUCER_ID,
        apis::ADD_PARTITIONS_TO_TXN => ADD_PARTITIONS_TO_TXN,
        apis::ADD_OFFSETS_TO_TXN => ADD_OFFSETS_TO_TXN,
        apis::END_TXN => END_TXN,
        apis::DESCRIBE_TRANSACTIONS => DESCRIBE_TRANSACTIONS,
        apis::LIST_TRANSACTIONS => LIST_TRANSACTIONS_FIELDS,
        apis::DESCRIBE_CONFIGS => DESCRIBE_CONFIGS,
        apis::CREATE_ACLS => CREATE_ACLS,
        apis::DESCRIBE_ACLS => ACL_FIELDS,
        apis::DELETE_ACLS => DELETE_ACLS,
        apis::OFFSET_FOR_LEADER_EPOCH => OFFSET_FOR_LEADER_EPOCH,
        apis::DESCRIBE_CLUSTER => DESCRIBE_CLUSTER,
        apis::CONSUMER_GROUP_HEARTBEAT => CONSUMER_GROUP_HEARTBEAT,
        apis::CONSUMER_GROUP_DESCRIBE => CONSUMER_GROUP_DESCRIBE,
        apis::DESCRIBE_PRODUCERS => DESCRIBE_PRODUCERS,
        apis::INCREMENTAL_ALTER_CONFIGS => INCREMENTAL_ALTER_CONFIGS,
        apis::LIST_GROUPS => LIST_GROUPS,
        apis::SHARE_GROUP_HEARTBEAT => SHARE_GROUP_HEARTBEAT,
        apis::SHARE_GROUP_DESCRIBE => SHARE_GROUP_DESCRIBE,
        apis::DESCRIBE_SHARE_GROUP_OFFSETS => DESCRIBE_SHARE_GROUP_OFFSETS,
        apis::ALTER_SHARE_GROUP_OFFSETS => ALTER_SHARE_GROUP_OFFSETS,
        apis::DELETE_SHARE_GROUP_OFFSETS => DELETE_SHARE_GROUP_OFFSETS,
        apis::SHARE_FETCH => SHARE_FETCH,
        apis::SHARE_ACKNOWLEDGE => SHARE_ACKNOWLEDGE,
        apis::TXN_SHARE_ACKNOWLEDGE => TXN_SHARE_ACKNOWLEDGE,
        apis::SHARE_BEGIN_TRANSACTION => SHARE_BEGIN_TRANSACTION,
        apis::SHARE_ACKNOWLEDGE_TRANSACTIONAL => SHARE_ACKNOWLEDGE_TRANSACTIONAL,
        apis::SHARE_PREPARE_TRANSACTION
        | apis::SHARE_COMMIT_TRANSACTION
        | apis::SHARE_ABORT_TRANSACTION => SHARE_TRANSACTION_OUTCOME,
        apis::SHARE_LIST_TRANSACTIONS => SHARE_LIST_TRANSACTIONS,
        apis::SASL_HANDSHAKE => SASL_HANDSHAKE,
        apis::SASL_AUTHENTICATE => SASL_AUTHENTICATE,
        apis::DESCRIBE_CLIENT_QUOTAS => DESCRIBE_CLIENT_QUOTAS,
        apis::DESCRIBE_USER_SCRAM_CREDENTIALS => DESCRIBE_USER_SCRAM_CREDENTIALS,
        apis::ALTER_USER_SCRAM_CREDENTIALS => ALTER_USER_SCRAM_CREDENTIALS,
        _ => return None,
    })
}

/// Why a body was refused before decoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuardError {
    /// The body ended inside a field.
    Truncated { at: usize },
    /// An array declares more elements than bytes remain.
    ArrayTooLong {
        at: usize,
        count: u64,
        remaining: usize,
    },
    /// A length prefix is negative (other than -1 for null) or a varint is malformed.
    BadLength { at: usize },
    /// No schema is known for this API key (a bug: dispatch checks keys first).
    NoSchema { api_key: i16 },
}

impl fmt::Display for GuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Truncated { at } => write!(f, "body ends inside a field at byte {at}"),
            GuardError::ArrayTooLong {
                at,
                count,
                remaining,
            } => write!(
                f,
                "array at byte {at} declares {count} elements but only {remaining} bytes remain"
            ),
            GuardError::BadLength { at } => write!(f, "invalid length prefix at byte {at}"),
            GuardError::NoSchema { api_key } => write!(f, "no schema for API key {api_key}"),
        }
    }
}

impl std::error::Error for GuardError {}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn skip(&mut self, n: usize) -> Result<(), GuardError> {
        if n > self.remaining() {
            return Err(GuardError::Truncated { at: self.pos });
        }
        self.pos += n;
        Ok(())
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], GuardError> {
        let start = self.pos;
        self.skip(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.bytes[start..start + N]);
        Ok(out)
    }

    fn uvarint(&mut self) -> Result<u64, GuardError> {
        let start = self.pos;
        let mut value: u64 = 0;
        for i in 0..5 {
            let [byte] = self.take::<1>()?;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(GuardError::BadLength { at: start })
    }

    /// Length of a string/bytes/array: `None` for null.
    fn length(&mut self, flexible: bool, wide: bool) -> Result<Option<u64>, GuardError> {
        let at = self.pos;
        if flexible {
            let n = self.uvarint()?;
            return Ok(n.checked_sub(1));
        }
        let n = if wide {
            i64::from(i32::from_be_bytes(self.take::<4>()?))
        } else {
            i64::from(i16::from_be_bytes(self.take::<2>()?))
        };
        match n {
            -1 => Ok(None),
            n if n >= 0 => Ok(Some(n as u64)),
            _ => Err(GuardError::BadLength { at }),
        }
    }

    fn array_count(&mut self, flexible: bool) -> Result<u64, GuardError> {
        let at = self.pos;
        let count = self.length(flexible, true)?.unwrap_or(0);
        if count > self.remaining() as u64 {
            return Err(GuardError::ArrayTooLong {
                at,
                count,
                remaining: self.remaining(),
            });
        }
        Ok(count)
    }

    fn string(&mut self, flexible: bool) -> Result<(), GuardError> {
        if let Some(n) = self.length(flexible, false)? {
            self.skip(usize::try_from(n).map_err(|_| GuardError::Truncated { at: self.pos })?)?;
        }
        Ok(())
    }

    fn bytes_field(&mut self, flexible: bool) -> Result<(), GuardError> {
        if let Some(n) = self.length(flexible, true)? {
            self.skip(usize::try_from(n).map_err(|_| GuardError::Truncated { at: self.pos })?)?;
        }
        Ok(())
    }

    fn tagged_fields(&mut self) -> Result<(), GuardError> {
        let count = self.uvarint()?;
        if count > self.remaining() as u64 {
            return Err(GuardError::ArrayTooLong {
                at: self.pos,
                count,
                remaining: self.remaining(),
            });
        }
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()?;
            self.skip(usize::try_from(size).map_err(|_| GuardError::Truncated { at: self.pos })?)?;
        }
        Ok(())
    }

    fn walk(
        &mut self,
        fields: &'static [Field],
        version: i16,
        flexible: bool,
    ) -> Result<(), GuardError> {
        for field in fields {
            if version < field.min || version > field.max {
                continue;
            }
            match field.ty {
                I8 | Bool => self.skip(1)?,
                ArrI8 => {
                    let count = self.array_count(flexible)?;
                    self.skip(usize::try_from(count).unwrap_or(usize::MAX))?;
                }
                I16 => self.skip(2)?,
                I32 => self.skip(4)?,
                I64 => self.skip(8)?,
                Uuid => self.skip(16)?,
                Str => self.string(flexible)?,
                Bytes => self.bytes_field(flexible)?,
                ArrI32 => {
                    let count = self.array_count(flexible)?;
                    self.skip(usize::try_from(count * 4).unwrap_or(usize::MAX))?;
                }
                ArrI64 => {
                    let count = self.array_count(flexible)?;
                    self.skip(usize::try_from(count * 8).unwrap_or(usize::MAX))?;
                }
                ArrStr => {
                    for _ in 0..self.array_count(flexible)? {
                        self.string(flexible)?;
                    }
                }
                Arr(inner) => {
                    for _ in 0..self.array_count(flexible)? {
                        self.walk(inner, version, flexible)?;
                    }
                }
            }
        }
        if flexible {
            self.tagged_fields()?;
        }
        Ok(())
    }
}

/// Checks `body` of request `api_key` at `version`; returns the bytes the message occupies.
pub fn check_request(
    api_key: i16,
    version: i16,
    flexible: bool,
    body: &[u8],
) -> Result<usize, GuardError> {
    let fields = schema(api_key).ok_or(GuardError::NoSchema { api_key })?;
    let mut cursor = Cursor {
        bytes: body,
        pos: 0,
    };
    cursor.walk(fields, version, flexible)?;
    Ok(cursor.pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::apis::{api_spec, SUPPORTED_APIS};
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn s(text: &'static str) -> StrBytes {
        StrBytes::from_static_str(text)
    }

    fn topic(text: &'static str) -> TopicName {
        TopicName(s(text))
    }

    /// A request of `api_key` with every array holding two elements, encodable at `version`.
    /// Encodes a request into a buffer.
    type Encoder = Box<dyn Fn(&mut BytesMut) -> Result<(), String>>;

    fn populated(api_key: i16, version: i16) -> Encoder {
        match api_key {
            apis::PRODUCE => {
                let mut partition = produce_request::PartitionProduceData::default();
                partition.index = 3;
                partition.records = Some(Bytes::from_static(b"0123456789"));
                let mut t = produce_request::TopicProduceData::default();
                if version <= 12 {
                    t.name = topic("orders");
                } else {
                    t.topic_id = uuid::Uuid::from_u128(7);
                }
                t.partition_data = vec![partition.clone(), partition];
                let mut r = ProduceRequest::default();
                r.transactional_id = None;
                r.acks = -1;
                r.topic_data = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::FETCH => {
                let mut p = fetch_request::FetchPartition::default();
                p.partition = 1;
                p.fetch_offset = 42;
                p.partition_max_bytes = 1000;
                let mut t = fetch_request::FetchTopic::default();
                if version <= 12 {
                    t.topic = topic("orders");
                } else {
                    t.topic_id = uuid::Uuid::from_u128(9);
                }
                t.partitions = vec![p.clone(), p];
                let mut forgotten = fetch_request::ForgottenTopic::default();
                if version >= 7 {
                    if version <= 12 {
                        forgotten.topic = topic("old");
                    } else {
                        forgotten.topic_id = uuid::Uuid::from_u128(10);
                    }
                    forgotten.partitions = vec![1, 2];
                }
                let mut r = FetchRequest::default();
                r.topics = vec![t.clone(), t];
                if version >= 7 {
                    r.forgotten_topics_data = vec![forgotten.clone(), forgotten];
                }
                if version >= 11 {
                    r.rack_id = s("rack");
                }
                if version >= 12 {
                    r.cluster_id = Some(s("cluster"));
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::LIST_OFFSETS => {
                let mut p = list_offsets_request::ListOffsetsPartition::default();
                p.partition_index = 2;
                p.timestamp = -1;
                let mut t = list_offsets_request::ListOffsetsTopic::default();
                t.name = topic("orders");
                t.partitions = vec![p.clone(), p];
                let mut r = ListOffsetsRequest::default();
                r.topics = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::METADATA => {
                let mut t = metadata_request::MetadataRequestTopic::default();
                t.name = Some(topic("orders"));
                if version >= 10 {
                    t.topic_id = uuid::Uuid::from_u128(5);
                }
                let mut r = MetadataRequest::default();
                r.topics = Some(vec![t.clone(), t]);
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::FIND_COORDINATOR => {
                let mut r = FindCoordinatorRequest::default();
                if version <= 3 {
                    r.key = s("group-a");
                } else {
                    r.coordinator_keys = vec![s("group-a"), s("group-b")];
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::API_VERSIONS => {
                let mut r = ApiVersionsRequest::default();
                if version >= 3 {
                    r.client_software_name = s("test");
                    r.client_software_version = s("1.0");
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::CREATE_TOPICS => {
                let mut a = create_topics_request::CreatableReplicaAssignment::default();
                a.broker_ids = vec![0.into(), 1.into()];
                let mut c = create_topics_request::CreatableTopicConfig::default();
                c.name = s("retention.ms");
                c.value = Some(s("1000"));
                let mut t = create_topics_request::CreatableTopic::default();
                t.name = topic("orders");
                t.num_partitions = 3;
                t.assignments = vec![a.clone(), a];
                t.configs = vec![c.clone(), c];
                let mut r = CreateTopicsRequest::default();
                r.topics = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DELETE_TOPICS => {
                let mut r = DeleteTopicsRequest::default();
                if version >= 6 {
                    let mut t = delete_topics_request::DeleteTopicState::default();
                    t.name = Some(topic("orders"));
                    r.topics = vec![t.clone(), t];
                } else {
                    r.topic_names = vec![topic("a"), topic("b")];
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DELETE_RECORDS => {
                let mut p = delete_records_request::DeleteRecordsPartition::default();
                p.partition_index = 2;
                p.offset = 40;
                let mut t = delete_records_request::DeleteRecordsTopic::default();
                t.name = topic("orders");
                t.partitions = vec![p.clone(), p];
                let mut r = DeleteRecordsRequest::default();
                r.topics = vec![t.clone(), t];
                r.timeout_ms = 1000;
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::CREATE_PARTITIONS => {
                let mut a = create_partitions_request::CreatePartitionsAssignment::default();
                a.broker_ids = vec![0.into(), 1.into()];
                let mut t = create_partitions_request::CreatePartitionsTopic::default();
                t.name = topic("orders");
                t.count = 4;
                t.assignments = Some(vec![a.clone(), a]);
                let mut without = t.clone();
                without.assignments = None;
                let mut r = CreatePartitionsRequest::default();
                r.topics = vec![t, without];
                r.validate_only = true;
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DELETE_GROUPS => {
                let r = crate::protocol::generated::delete_groups_request::DeleteGroupsRequest {
                    groups_names: vec!["g1".into(), "g2".into()],
                };
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::OFFSET_FOR_LEADER_EPOCH => {
                let mut p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
                p.partition = 1;
                p.current_leader_epoch = 0;
                p.leader_epoch = 0;
                let mut t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
                t.topic = topic("orders");
                t.partitions = vec![p.clone(), p];
                let mut r = OffsetForLeaderEpochRequest::default();
                r.replica_id = (-1).into();
                r.topics = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DESCRIBE_CLUSTER => {
                let mut r = DescribeClusterRequest::default();
                r.include_cluster_authorized_operations = true;
                if version >= 1 {
                    r.endpoint_type = 1;
                }
                if version >= 2 {
                    r.include_fenced_brokers = true;
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::CONSUMER_GROUP_HEARTBEAT => {
                let mut tp = consumer_group_heartbeat_request::TopicPartitions::default();
                tp.topic_id = uuid::Uuid::from_u128(3);
                tp.partitions = vec![0, 1];
                let mut r = ConsumerGroupHeartbeatRequest::default();
                r.group_id = GroupId(s("g"));
                r.member_id = s("m");
                r.instance_id = Some(s("i"));
                r.rack_id = Some(s("r"));
                r.subscribed_topic_names = Some(vec![topic("a"), topic("b")]);
                if version >= 1 {
                    r.subscribed_topic_regex = Some(s("a.*"));
                }
                r.server_assignor = Some(s("uniform"));
                r.topic_partitions = Some(vec![tp.clone(), tp]);
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::CONSUMER_GROUP_DESCRIBE => {
                let mut r = ConsumerGroupDescribeRequest::default();
                r.group_ids = vec![GroupId(s("g1")), GroupId(s("g2"))];
                r.include_authorized_operations = true;
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DESCRIBE_PRODUCERS => {
                let mut t = describe_producers_request::TopicRequest::default();
                t.name = topic("orders");
                t.partition_indexes = vec![0, 1];
                let mut r = DescribeProducersRequest::default();
                r.topics = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::ADD_PARTITIONS_TO_TXN => {
                let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
                t.name = topic("orders");
                t.partitions = vec![0, 1];
                let mut r = AddPartitionsToTxnRequest::default();
                if version >= 4 {
                    let mut x =
                        add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default();
                    x.transactional_id = s("tx").into();
                    x.producer_id = 7.into();
                    x.producer_epoch = 1;
                    x.verify_only = true;
                    x.topics = vec![t.clone(), t];
                    r.transactions = vec![x.clone(), x];
                } else {
                    r.v3_and_below_transactional_id = s("tx").into();
                    r.v3_and_below_producer_id = 7.into();
                    r.v3_and_below_producer_epoch = 1;
                    r.v3_and_below_topics = vec![t.clone(), t];
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::ADD_OFFSETS_TO_TXN => {
                let mut r = AddOffsetsToTxnRequest::default();
                r.transactional_id = s("tx").into();
                r.producer_id = 7.into();
                r.group_id = GroupId(s("g"));
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::END_TXN => {
                let mut r = EndTxnRequest::default();
                r.transactional_id = s("tx").into();
                r.producer_id = 7.into();
                r.committed = true;
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DESCRIBE_TRANSACTIONS => {
                let mut r = DescribeTransactionsRequest::default();
                r.transactional_ids = vec![s("a").into(), s("b").into()];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::LIST_TRANSACTIONS => {
                let mut r = ListTransactionsRequest::default();
                r.state_filters = vec![s("Ongoing")];
                r.producer_id_filters = vec![1.into(), 2.into()];
                if version >= 1 {
                    r.duration_filter = 5;
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::INIT_PRODUCER_ID => {
                let mut r = InitProducerIdRequest::default();
                r.transactional_id = Some(s("tx").into());
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::CREATE_ACLS => {
                let mut c = create_acls_request::AclCreation::default();
                c.resource_type = 2;
                c.resource_name = s("orders");
                c.resource_pattern_type = 4;
                c.principal = s("User:alice");
                c.host = s("*");
                c.operation = 3;
                c.permission_type = 3;
                let mut r = CreateAclsRequest::default();
                r.creations = vec![c.clone(), c];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DESCRIBE_ACLS => {
                let mut r = DescribeAclsRequest::default();
                r.resource_type_filter = 2;
                r.resource_name_filter = Some(s("orders"));
                r.pattern_type_filter = 2;
                r.principal_filter = Some(s("User:alice"));
                r.host_filter = None;
                r.operation = 1;
                r.permission_type = 1;
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DELETE_ACLS => {
                let mut f = delete_acls_request::DeleteAclsFilter::default();
                f.resource_type_filter = 2;
                f.resource_name_filter = Some(s("orders"));
                f.pattern_type_filter = 3;
                f.principal_filter = None;
                f.host_filter = Some(s("*"));
                f.operation = 3;
                f.permission_type = 3;
                let mut r = DeleteAclsRequest::default();
                r.filters = vec![f.clone(), f];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DESCRIBE_CONFIGS => {
                let mut res = describe_configs_request::DescribeConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = s("orders");
                res.configuration_keys = Some(vec![s("retention.ms"), s("segment.bytes")]);
                let mut r = DescribeConfigsRequest::default();
                r.resources = vec![res.clone(), res];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::INCREMENTAL_ALTER_CONFIGS => {
                let mut c = incremental_alter_configs_request::AlterableConfig::default();
                c.name = s("retention.ms");
                c.value = Some(s("1"));
                let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
                res.resource_type = 2;
                res.resource_name = s("orders");
                res.configs = vec![c.clone(), c];
                let mut r = IncrementalAlterConfigsRequest::default();
                r.resources = vec![res.clone(), res];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::SHARE_GROUP_HEARTBEAT => {
                let mut r = ShareGroupHeartbeatRequest::default();
                r.group_id = GroupId(s("g"));
                r.member_id = s("m");
                r.member_epoch = 3;
                r.rack_id = Some(s("rack"));
                r.subscribed_topic_names = Some(vec![topic("a"), topic("b")]);
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::SHARE_FETCH => {
                use crate::protocol::generated::share_fetch_request as m;
                let batch = m::AcknowledgementBatch {
                    first_offset: 1,
                    last_offset: 2,
                    acknowledge_types: vec![1, 3],
                };
                let p = m::FetchPartition {
                    partition_index: 4,
                    acknowledgement_batches: vec![batch.clone(), batch],
                    ..Default::default()
                };
                let t = m::FetchTopic {
                    topic_id: uuid::Uuid::from_u128(5),
                    partitions: vec![p.clone(), p],
                };
                let f = m::ForgottenTopic {
                    topic_id: uuid::Uuid::from_u128(6),
                    partitions: vec![1, 2],
                };
                let r = m::ShareFetchRequest {
                    group_id: Some("g".into()),
                    member_id: Some("m".into()),
                    max_records: 500,
                    share_acquire_mode: if version >= 2 { 1 } else { 0 },
                    topics: vec![t.clone(), t],
                    forgotten_topics_data: vec![f.clone(), f],
                    ..Default::default()
                };
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::SHARE_ACKNOWLEDGE => {
                use crate::protocol::generated::share_acknowledge_request as m;
                let batch = m::AcknowledgementBatch {
                    first_offset: 1,
                    last_offset: 1,
                    acknowledge_types: vec![2],
                };
                let p = m::AcknowledgePartition {
                    partition_index: 4,
                    acknowledgement_batches: vec![batch.clone(), batch],
                };
                let t = m::AcknowledgeTopic {
                    topic_id: uuid::Uuid::from_u128(5),
                    partitions: vec![p.clone(), p],
                };
                let r = m::ShareAcknowledgeRequest {
                    group_id: Some("g".into()),
                    member_id: Some("m".into()),
                    share_session_epoch: -1,
                    is_renew_ack: version >= 2,
                    topics: vec![t.clone(), t],
                };
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::LIST_GROUPS => {
                let mut r = ListGroupsRequest::default();
                if version >= 4 {
                    r.states_filter = vec![s("Stable"), s("Empty")];
                }
                if version >= 5 {
                    r.types_filter = vec![s("share"), s("consumer")];
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::SHARE_GROUP_DESCRIBE => {
                let mut r = ShareGroupDescribeRequest::default();
                r.group_ids = vec![GroupId(s("g1")), GroupId(s("g2"))];
                r.include_authorized_operations = true;
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DESCRIBE_SHARE_GROUP_OFFSETS => {
                use crate::protocol::generated::describe_share_group_offsets_request as m;
                let t = m::DescribeShareGroupOffsetsRequestTopic {
                    topic_name: "orders".into(),
                    partitions: vec![0, 1],
                };
                let g = m::DescribeShareGroupOffsetsRequestGroup {
                    group_id: "g".into(),
                    topics: Some(vec![t.clone(), t]),
                };
                let mut all = g.clone();
                all.topics = None;
                let r = m::DescribeShareGroupOffsetsRequest {
                    groups: vec![g, all],
                };
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::ALTER_SHARE_GROUP_OFFSETS => {
                let mut p = alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default();
                p.partition_index = 1;
                p.start_offset = 42;
                let mut t =
                    alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default(
                    );
                t.topic_name = topic("orders");
                t.partitions = vec![p.clone(), p];
                let mut r = AlterShareGroupOffsetsRequest::default();
                r.group_id = GroupId(s("g"));
                r.topics = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DELETE_SHARE_GROUP_OFFSETS => {
                let mut t = delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default();
                t.topic_name = topic("orders");
                let mut r = DeleteShareGroupOffsetsRequest::default();
                r.group_id = GroupId(s("g"));
                r.topics = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::OFFSET_COMMIT => {
                let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
                p.partition_index = 1;
                p.committed_offset = 42;
                p.committed_metadata = Some(s("meta"));
                let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
                t.name = topic("orders");
                t.partitions = vec![p.clone(), p];
                let mut r = OffsetCommitRequest::default();
                r.group_id = GroupId(s("g"));
                r.member_id = s("m");
                if version >= 7 {
                    r.group_instance_id = Some(s("i"));
                }
                r.topics = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::OFFSET_FETCH => {
                let mut r = OffsetFetchRequest::default();
                if version < 8 {
                    let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
                    t.name = topic("orders");
                    t.partition_indexes = vec![0, 1];
                    r.group_id = GroupId(s("g"));
                    r.topics = Some(vec![t.clone(), t]);
                } else {
                    let mut t = offset_fetch_request::OffsetFetchRequestTopics::default();
                    t.name = topic("orders");
                    t.partition_indexes = vec![0, 1];
                    let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
                    g.group_id = GroupId(s("g"));
                    if version >= 9 {
                        g.member_id = Some(s("m"));
                    }
                    g.topics = Some(vec![t.clone(), t]);
                    r.groups = vec![g.clone(), g];
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::JOIN_GROUP => {
                let mut p = join_group_request::JoinGroupRequestProtocol::default();
                p.name = s("range");
                p.metadata = Bytes::from_static(b"meta");
                let mut r = JoinGroupRequest::default();
                r.group_id = GroupId(s("g"));
                r.session_timeout_ms = 45_000;
                r.member_id = s("m");
                if version >= 5 {
                    r.group_instance_id = Some(s("i"));
                }
                r.protocol_type = s("consumer");
                r.protocols = vec![p.clone(), p];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::SYNC_GROUP => {
                let mut a = sync_group_request::SyncGroupRequestAssignment::default();
                a.member_id = s("m");
                a.assignment = Bytes::from_static(b"assignment");
                let mut r = SyncGroupRequest::default();
                r.group_id = GroupId(s("g"));
                r.member_id = s("m");
                if version >= 5 {
                    r.protocol_type = Some(s("consumer"));
                    r.protocol_name = Some(s("range"));
                }
                r.assignments = vec![a.clone(), a];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::HEARTBEAT => {
                let mut r = HeartbeatRequest::default();
                r.group_id = GroupId(s("g"));
                r.member_id = s("m");
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::LEAVE_GROUP => {
                let mut r = LeaveGroupRequest::default();
                r.group_id = GroupId(s("g"));
                if version < 3 {
                    r.member_id = s("m");
                } else {
                    let mut m = leave_group_request::MemberIdentity::default();
                    m.member_id = s("m");
                    m.group_instance_id = Some(s("i"));
                    r.members = vec![m.clone(), m];
                }
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DESCRIBE_GROUPS => {
                let mut r = DescribeGroupsRequest::default();
                r.groups = vec![GroupId(s("g1")), GroupId(s("g2"))];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::OFFSET_DELETE => {
                let mut p = offset_delete_request::OffsetDeleteRequestPartition::default();
                p.partition_index = 2;
                let mut t = offset_delete_request::OffsetDeleteRequestTopic::default();
                t.name = topic("orders");
                t.partitions = vec![p.clone(), p];
                let mut r = OffsetDeleteRequest::default();
                r.group_id = GroupId(s("g"));
                r.topics = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::SASL_HANDSHAKE => {
                let r = SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-256"));
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::SASL_AUTHENTICATE => {
                let r = SaslAuthenticateRequest::default()
                    .with_auth_bytes(Bytes::from_static(b"n,,n=u,r=abc"));
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DESCRIBE_CLIENT_QUOTAS => {
                let c = describe_client_quotas_request::ComponentData::default()
                    .with_entity_type(s("user"))
                    .with_match_type(0)
                    .with_match(Some(s("alice")));
                let r = DescribeClientQuotasRequest::default()
                    .with_components(vec![c.clone(), c])
                    .with_strict(true);
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::DESCRIBE_USER_SCRAM_CREDENTIALS => {
                let u = describe_user_scram_credentials_request::UserName::default()
                    .with_name(s("alice"));
                let r = DescribeUserScramCredentialsRequest::default()
                    .with_users(Some(vec![u.clone(), u]));
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::ALTER_USER_SCRAM_CREDENTIALS => {
                let d = alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                    .with_name(s("bob"))
                    .with_mechanism(2);
                let u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                    .with_name(s("alice"))
                    .with_mechanism(1)
                    .with_iterations(8192)
                    .with_salt(Bytes::from_static(b"salt"))
                    .with_salted_password(Bytes::from_static(b"salted"));
                let r = AlterUserScramCredentialsRequest::default()
                    .with_deletions(vec![d.clone(), d])
                    .with_upsertions(vec![u.clone(), u]);
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::TXN_OFFSET_COMMIT => {
                let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
                p.partition_index = 2;
                p.committed_offset = 42;
                p.committed_metadata = Some(s("meta"));
                let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
                t.name = topic("orders");
                t.partitions = vec![p.clone(), p];
                let mut r = TxnOffsetCommitRequest::default();
                r.transactional_id = s("tx").into();
                r.group_id = GroupId(s("g"));
                r.producer_id = 7.into();
                if version >= 3 {
                    r.member_id = s("m");
                    r.group_instance_id = Some(s("i"));
                }
                r.topics = vec![t.clone(), t];
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            apis::TXN_SHARE_ACKNOWLEDGE => {
                let r = crate::protocol::producer_txn_share::sample_request();
                Box::new(move |b| r.encode(b, version).map_err(|e| e.to_string()))
            }
            // The project's keys (once served): the `share_txn` samples, version 0.
            key if apis::SHARE_TRANSACTION_KEYS.contains(&key) => {
                let (_, body) = crate::protocol::share_txn::samples::encoded_requests()
                    .into_iter()
                    .find(|(k, _)| *k == key)
                    .expect("a sample per share-transaction key");
                Box::new(move |b| {
                    b.extend_from_slice(&body);
                    Ok(())
                })
            }
            other => panic!("no populated request for key {other}"),
        }
    }

    #[test]
    fn crate_encoded_requests_walk_exactly_at_every_version() {
        for spec in SUPPORTED_APIS {
            for version in spec.min_version..=spec.max_version {
                let mut buf = BytesMut::new();
                populated(spec.key, version)(&mut buf)
                    .unwrap_or_else(|e| panic!("{} v{version}: encode: {e}", spec.name));
                let used = check_request(spec.key, version, spec.is_flexible(version), &buf)
                    .unwrap_or_else(|e| panic!("{} v{version}: {e}", spec.name));
                assert_eq!(used, buf.len(), "{} v{version}", spec.name);
                // Every proper prefix is refused (never accepted as a whole message).
                for cut in 0..buf.len() {
                    assert!(
                        check_request(spec.key, version, spec.is_flexible(version), &buf[..cut])
                            .is_err(),
                        "{} v{version} cut at {cut}",
                        spec.name
                    );
                }
            }
        }
    }

    /// KIP-848's requests (v0–1, flexible), checked here before they are served.
    #[test]
    fn consumer_group_requests_walk_exactly() {
        for key in [
            apis::CONSUMER_GROUP_HEARTBEAT,
            apis::CONSUMER_GROUP_DESCRIBE,
        ] {
            for version in 0..=1 {
                let mut buf = BytesMut::new();
                populated(key, version)(&mut buf).unwrap();
                assert_eq!(
                    check_request(key, version, true, &buf),
                    Ok(buf.len()),
                    "{key} v{version}"
                );
                for cut in 0..buf.len() {
                    assert!(check_request(key, version, true, &buf[..cut]).is_err());
                }
            }
        }
    }

    #[test]
    fn huge_array_counts_are_refused() {
        // Metadata v1: topics array count 2^31-1 in a 4-byte body.
        let body = i32::MAX.to_be_bytes();
        assert!(matches!(
            check_request(apis::METADATA, 1, false, &body),
            Err(GuardError::ArrayTooLong { .. })
        ));
        // Flexible: uvarint count 0xFFFFFFFF.
        let body = [0xff, 0xff, 0xff, 0xff, 0x0f];
        let spec = api_spec(apis::METADATA).unwrap();
        assert!(matches!(
            check_request(apis::METADATA, 12, spec.is_flexible(12), &body),
            Err(GuardError::ArrayTooLong { .. })
        ));
    }

    #[test]
    fn negative_lengths_and_overlong_varints_are_refused() {
        // CreateTopics v2: topics count 1, name length -2.
        let mut body = 1i32.to_be_bytes().to_vec();
        body.extend_from_slice(&(-2i16).to_be_bytes());
        assert!(matches!(
            check_request(apis::CREATE_TOPICS, 2, false, &body),
            Err(GuardError::BadLength { .. })
        ));
        let body = [0x80u8; 6];
        assert!(check_request(apis::METADATA, 12, true, &body).is_err());
    }

    #[test]
    fn share_transaction_requests_walk_exactly() {
        use crate::protocol::share_txn::samples::encoded_requests;
        let encoded = encoded_requests();
        assert_eq!(
            encoded.iter().map(|(key, _)| *key).collect::<Vec<_>>(),
            apis::SHARE_TRANSACTION_KEYS
        );
        for (key, body) in encoded {
            assert_eq!(
                check_request(key, 0, true, &body),
                Ok(body.len()),
                "key {key}"
            );
            for cut in 0..body.len() {
                assert!(
                    check_request(key, 0, true, &body[..cut]).is_err(),
                    "key {key} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn share_transaction_huge_array_counts_are_refused() {
        // ShareListTransactions: GroupId "g", States count 2^32-2 in 7 bytes.
        let body = [0x02, b'g', 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(matches!(
            check_request(apis::SHARE_LIST_TRANSACTIONS, 0, true, &body),
            Err(GuardError::ArrayTooLong {
                at: 2,
                count: 0xffff_fffe,
                remaining: 0
            })
        ));
        // ShareAcknowledgeTransactional: Topics count 2^28 - 1 after three short strings.
        let body = [
            0x02, b'g', 0x02, b'm', 0x02, b't', 0x80, 0x80, 0x80, 0x80, 0x01, 0, 0,
        ];
        assert!(matches!(
            check_request(apis::SHARE_ACKNOWLEDGE_TRANSACTIONAL, 0, true, &body),
            Err(GuardError::ArrayTooLong { at: 6, .. })
        ));
        // A nested count (AcknowledgeTypes) that exceeds what is left.
        let mut body = vec![0x02, b'g', 0x02, b'm', 0x02, b't', 0x02];
        body.extend_from_slice(&[0; 16]); // TopicId
        body.push(0x02); // Partitions: 1
        body.extend_from_slice(&[0, 0, 0, 0]); // PartitionIndex
        body.push(0x02); // AcknowledgementBatches: 1
        body.extend_from_slice(&[0; 16]); // FirstOffset, LastOffset
        body.extend_from_slice(&[0xe8, 0x07, 1, 0, 0, 0, 0]); // AcknowledgeTypes: 999
        assert!(matches!(
            check_request(apis::SHARE_ACKNOWLEDGE_TRANSACTIONAL, 0, true, &body),
            Err(GuardError::ArrayTooLong { count: 999, .. })
        ));
    }

    #[test]
    fn unknown_keys_have_no_schema() {
        assert_eq!(
            check_request(9999, 0, false, &[]),
            Err(GuardError::NoSchema { api_key: 9999 })
        );
    }
}
