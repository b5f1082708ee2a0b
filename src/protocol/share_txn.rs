//! Wire types of the share-transaction RPCs, API keys 1000–1005 (DESIGN.md §2).
//!
//! What: the twelve request/response messages of `spec/share-transaction-rpcs.md`, as plain
//! Rust structs that implement `kafka_protocol`'s [`Encodable`] and [`Decodable`] (and
//! [`Message`], [`HeaderVersion`], and for requests [`KafkaRequest`] with the response type),
//! so the broker's handlers use them exactly like the crate's own messages
//! (`codec::decode_body::<ShareBeginTransactionRequest>(&request)`,
//! `codec::encode_response(request.spec, request.api_version, request.correlation_id, &response)`)
//! and the project's Rust client uses the same types the other way round.
//!
//! Why hand-written: the `kafka-protocol` crate only knows Kafka's own API keys, and its
//! primitive encoders (`protocol::types::CompactString`, `CompactArray`, `UnsignedVarInt` …)
//! are usable only inside that crate (their `Encoder`/`Decoder` traits are `pub(crate)`). The
//! few primitives needed here (big-endian integers, UUID, unsigned varint, compact string and
//! array, tagged-field section) are therefore written once below, in the crate's encoding.
//!
//! Encoding (all messages are version 0 only, flexible from version 0): compact strings and
//! arrays (unsigned-varint length + 1), and a tagged-field section ending every structure. We
//! write no tagged fields (count 0); on read, unknown tagged fields are skipped by their sizes.
//! The schemas in `schemas/Share*.json` are the JSON copies of the wire spec; a test parses them
//! and compares names, types and nesting with what the encoder writes.
//!
//! Representation choices: strings are `String` (they are small identifiers that handlers parse
//! and compare; no `StrBytes` juggling), error messages are `Option<String>` (nullable), topic
//! ids are `uuid::Uuid`, and transaction states and acknowledge types stay raw `i8` on the wire
//! types — convert with `TxnState::try_from(code)` / `i8::from(state)` (defined here) where the
//! meaning is needed, so a message with an unknown code still decodes and can be answered.
//!
//! Safety on input: decoding never panics and never reserves more elements than bytes remain
//! (every element takes at least one byte), so a small buffer cannot make it allocate much even
//! without the structural guard (`guard.rs`, which the broker runs first). Truncated input, bad
//! UTF-8, a null where none is allowed, and over-long varints are typed errors.

use crate::txn::TxnState;
use bytes::{Buf, BufMut};
use kafka_protocol::protocol::buf::{ByteBuf, ByteBufMut};
use kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, Message, Request as KafkaRequest, VersionRange,
};
use std::fmt;
use uuid::Uuid;

/// The only version of every share-transaction message.
pub const VERSION: i16 = 0;

const VERSIONS: VersionRange = VersionRange { min: 0, max: 0 };

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
// Errors

/// Why a share-transaction message could not be decoded or encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Only version 0 exists.
    UnsupportedVersion { version: i16 },
    /// The input ended inside `what`.
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// An unsigned varint longer than 5 bytes or above `u32::MAX`.
    BadVarint { what: &'static str },
    /// A null (compact length 0) where the field is not nullable.
    UnexpectedNull { what: &'static str },
    /// A string that is not UTF-8.
    BadUtf8 { what: &'static str },
    /// A string or array too long to encode.
    TooLong { what: &'static str, len: usize },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::UnsupportedVersion { version } => write!(
                f,
                "version {version} of a share-transaction message (only 0 exists)"
            ),
            WireError::Truncated { what, need, have } => {
                write!(
                    f,
                    "input ends inside {what}: need {need} bytes, have {have}"
                )
            }
            WireError::BadVarint { what } => write!(f, "malformed unsigned varint in {what}"),
            WireError::UnexpectedNull { what } => write!(f, "null {what} is not allowed"),
            WireError::BadUtf8 { what } => write!(f, "{what} is not UTF-8"),
            WireError::TooLong { what, len } => write!(f, "{what} of {len} is too long to encode"),
        }
    }
}

impl std::error::Error for WireError {}

fn check_version(version: i16) -> Result<(), WireError> {
    if version == VERSION {
        Ok(())
    } else {
        Err(WireError::UnsupportedVersion { version })
    }
}

// ---------------------------------------------------------------------------------------------
// Writing: one field walk per struct, run against a byte sink (encode), a counter
// (compute_size), or, in tests, a recorder of field names and types (schema check).

/// Wire type of a field, as the schemas name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Int8,
    Int16,
    Int32,
    Int64,
    Uuid,
    Str,
    NullableStr,
    Int8Array,
    /// Array of structs; the Rust type name of the element (its last path segment is the
    /// schema's struct type name).
    StructArray(&'static str),
}

trait Out {
    fn raw(&mut self, bytes: &[u8]);
    /// A field is about to be written (the recorder's hook).
    fn field(&mut self, _name: &'static str, _ty: Ty) {}
    /// The elements of the array field just announced follow.
    fn enter(&mut self) {}
    /// The array's elements are done.
    fn leave(&mut self) {}
    /// A structure ended (after its tagged-field section).
    fn end_struct(&mut self) {}
}

struct Sink<'a, B: BufMut>(&'a mut B);

impl<B: BufMut> Out for Sink<'_, B> {
    fn raw(&mut self, bytes: &[u8]) {
        self.0.put_slice(bytes);
    }
}

struct Counter(usize);

impl Out for Counter {
    fn raw(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

fn put_uvarint<O: Out>(o: &mut O, mut value: u32) {
    let mut buf = [0u8; 5];
    let mut n = 0;
    while value >= 0x80 {
        buf[n] = (value as u8) | 0x80;
        value >>= 7;
        n += 1;
    }
    buf[n] = value as u8;
    o.raw(&buf[..=n]);
}

/// Compact length: `len + 1` as an unsigned varint (0 is null).
fn put_compact_len<O: Out>(o: &mut O, what: &'static str, len: usize) -> Result<(), WireError> {
    let wire = u32::try_from(len)
        .ok()
        .and_then(|n| n.checked_add(1))
        .ok_or(WireError::TooLong { what, len })?;
    put_uvarint(o, wire);
    Ok(())
}

fn w_i8<O: Out>(o: &mut O, name: &'static str, v: i8) {
    o.field(name, Ty::Int8);
    o.raw(&v.to_be_bytes());
}

fn w_i16<O: Out>(o: &mut O, name: &'static str, v: i16) {
    o.field(name, Ty::Int16);
    o.raw(&v.to_be_bytes());
}

fn w_i32<O: Out>(o: &mut O, name: &'static str, v: i32) {
    o.field(name, Ty::Int32);
    o.raw(&v.to_be_bytes());
}

fn w_i64<O: Out>(o: &mut O, name: &'static str, v: i64) {
    o.field(name, Ty::Int64);
    o.raw(&v.to_be_bytes());
}

fn w_uuid<O: Out>(o: &mut O, name: &'static str, v: &Uuid) {
    o.field(name, Ty::Uuid);
    o.raw(v.as_bytes());
}

fn w_str<O: Out>(o: &mut O, name: &'static str, v: &str) -> Result<(), WireError> {
    o.field(name, Ty::Str);
    put_compact_len(o, name, v.len())?;
    o.raw(v.as_bytes());
    Ok(())
}

fn w_nullable_str<O: Out>(o: &mut O, name: &'static str, v: Option<&str>) -> Result<(), WireError> {
    o.field(name, Ty::NullableStr);
    match v {
        None => put_uvarint(o, 0),
        Some(s) => {
            put_compact_len(o, name, s.len())?;
            o.raw(s.as_bytes());
        }
    }
    Ok(())
}

fn w_i8_array<O: Out>(o: &mut O, name: &'static str, v: &[i8]) -> Result<(), WireError> {
    o.field(name, Ty::Int8Array);
    put_compact_len(o, name, v.len())?;
    for x in v {
        o.raw(&x.to_be_bytes());
    }
    Ok(())
}

fn w_array<O: Out, T: Wire>(o: &mut O, name: &'static str, items: &[T]) -> Result<(), WireError> {
    o.field(name, Ty::StructArray(std::any::type_name::<T>()));
    put_compact_len(o, name, items.len())?;
    o.enter();
    for item in items {
        item.write(o)?;
    }
    o.leave();
    Ok(())
}

/// The tagged-field section of a structure we write: always empty.
fn w_tags<O: Out>(o: &mut O) {
    put_uvarint(o, 0);
    o.end_struct();
}

// ---------------------------------------------------------------------------------------------
// Reading

fn truncated(what: &'static str, need: usize, have: usize) -> WireError {
    WireError::Truncated { what, need, have }
}

fn r_uvarint<B: Buf>(b: &mut B, what: &'static str) -> Result<u32, WireError> {
    let mut value: u32 = 0;
    for i in 0..5 {
        let byte = b.try_get_u8().map_err(|_| truncated(what, 1, 0))?;
        if i == 4 && byte > 0x0f {
            return Err(WireError::BadVarint { what });
        }
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(WireError::BadVarint { what })
}

fn r_i8<B: Buf>(b: &mut B, what: &'static str) -> Result<i8, WireError> {
    b.try_get_i8()
        .map_err(|e| truncated(what, e.requested, e.available))
}

fn r_i16<B: Buf>(b: &mut B, what: &'static str) -> Result<i16, WireError> {
    b.try_get_i16()
        .map_err(|e| truncated(what, e.requested, e.available))
}

fn r_i32<B: Buf>(b: &mut B, what: &'static str) -> Result<i32, WireError> {
    b.try_get_i32()
        .map_err(|e| truncated(what, e.requested, e.available))
}

fn r_i64<B: Buf>(b: &mut B, what: &'static str) -> Result<i64, WireError> {
    b.try_get_i64()
        .map_err(|e| truncated(what, e.requested, e.available))
}

fn r_uuid<B: Buf>(b: &mut B, what: &'static str) -> Result<Uuid, WireError> {
    let mut bytes = [0u8; 16];
    b.try_copy_to_slice(&mut bytes)
        .map_err(|e| truncated(what, e.requested, e.available))?;
    Ok(Uuid::from_bytes(bytes))
}

/// Compact length: `None` for null.
fn r_compact_len<B: Buf>(b: &mut B, what: &'static str) -> Result<Option<usize>, WireError> {
    let n = r_uvarint(b, what)?;
    Ok(n.checked_sub(1).map(|n| n as usize))
}

fn r_nullable_str<B: ByteBuf>(b: &mut B, what: &'static str) -> Result<Option<String>, WireError> {
    let Some(len) = r_compact_len(b, what)? else {
        return Ok(None);
    };
    if len > b.remaining() {
        return Err(truncated(what, len, b.remaining()));
    }
    let bytes = b.copy_to_bytes(len);
    String::from_utf8(bytes.to_vec())
        .map(Some)
        .map_err(|_| WireError::BadUtf8 { what })
}

fn r_str<B: ByteBuf>(b: &mut B, what: &'static str) -> Result<String, WireError> {
    r_nullable_str(b, what)?.ok_or(WireError::UnexpectedNull { what })
}

/// Element count of a non-nullable compact array, refused if more elements than bytes remain
/// (every element takes at least one byte), so the `Vec` reservation is bounded by the input.
fn r_count<B: Buf>(b: &mut B, what: &'static str) -> Result<usize, WireError> {
    let count = r_compact_len(b, what)?.ok_or(WireError::UnexpectedNull { what })?;
    if count > b.remaining() {
        return Err(truncated(what, count, b.remaining()));
    }
    Ok(count)
}

fn r_i8_array<B: Buf>(b: &mut B, what: &'static str) -> Result<Vec<i8>, WireError> {
    let count = r_count(b, what)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(r_i8(b, what)?);
    }
    Ok(out)
}

fn r_array<B: ByteBuf, T: Wire>(b: &mut B, what: &'static str) -> Result<Vec<T>, WireError> {
    let count = r_count(b, what)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(T::read(b)?);
    }
    Ok(out)
}

/// Skips a tagged-field section: count, then (tag, size, `size` bytes) per field. No field is
/// known at version 0, so every one is skipped.
fn r_tags<B: Buf>(b: &mut B) -> Result<(), WireError> {
    let count = r_uvarint(b, "tagged fields")?;
    for _ in 0..count {
        let _tag = r_uvarint(b, "tagged field tag")?;
        let size = r_uvarint(b, "tagged field size")? as usize;
        if size > b.remaining() {
            return Err(truncated("tagged field", size, b.remaining()));
        }
        b.advance(size);
    }
    Ok(())
}

/// A structure of these messages: its field walk (write) and its reader.
trait Wire: Sized {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError>;
    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError>;
}

/// Implements the `kafka_protocol` traits of a top-level message through [`Wire`].
macro_rules! message {
    ($ty:ident) => {
        impl Message for $ty {
            const VERSIONS: VersionRange = VERSIONS;
            const DEPRECATED_VERSIONS: Option<VersionRange> = None;
        }

        impl Encodable for $ty {
            fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
                check_version(version)?;
                self.write(&mut Sink(buf))?;
                Ok(())
            }

            fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
                check_version(version)?;
                let mut counter = Counter(0);
                self.write(&mut counter)?;
                Ok(counter.0)
            }
        }

        impl Decodable for $ty {
            fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> anyhow::Result<Self> {
                check_version(version)?;
                Ok(<$ty as Wire>::read(buf)?)
            }
        }
    };
}

macro_rules! request {
    ($req:ident, $resp:ident, $key:expr) => {
        message!($req);
        message!($resp);

        impl HeaderVersion for $req {
            /// Request header v2 (flexible).
            fn header_version(_version: i16) -> i16 {
                2
            }
        }

        impl HeaderVersion for $resp {
            /// Response header v1 (flexible).
            fn header_version(_version: i16) -> i16 {
                1
            }
        }

        impl KafkaRequest for $req {
            const KEY: i16 = $key;
            type Response = $resp;
        }
    };
}

// ---------------------------------------------------------------------------------------------
// 1000 ShareBeginTransaction

/// Start a transaction for a share group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareBeginTransactionRequest {
    /// The share group.
    pub group_id: String,
    /// `{groupId}-{transactionalIdPrefix}-{checkpointId}`.
    pub transaction_id: String,
    /// ONGOING timeout; -1 = the group's `share.transaction.timeout.ms`.
    pub timeout_ms: i64,
}

impl Wire for ShareBeginTransactionRequest {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_str(o, "GroupId", &self.group_id)?;
        w_str(o, "TransactionId", &self.transaction_id)?;
        w_i64(o, "TimeoutMs", self.timeout_ms);
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            group_id: r_str(b, "GroupId")?,
            transaction_id: r_str(b, "TransactionId")?,
            timeout_ms: r_i64(b, "TimeoutMs")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareBeginTransactionResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    /// State after the call (ONGOING for a new one; the existing state if the id is known).
    pub transaction_state: i8,
    /// The timeout in force.
    pub timeout_ms: i64,
}

impl Wire for ShareBeginTransactionResponse {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_i32(o, "ThrottleTimeMs", self.throttle_time_ms);
        w_i16(o, "ErrorCode", self.error_code);
        w_nullable_str(o, "ErrorMessage", self.error_message.as_deref())?;
        w_i8(o, "TransactionState", self.transaction_state);
        w_i64(o, "TimeoutMs", self.timeout_ms);
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            throttle_time_ms: r_i32(b, "ThrottleTimeMs")?,
            error_code: r_i16(b, "ErrorCode")?,
            error_message: r_nullable_str(b, "ErrorMessage")?,
            transaction_state: r_i8(b, "TransactionState")?,
            timeout_ms: r_i64(b, "TimeoutMs")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

request!(
    ShareBeginTransactionRequest,
    ShareBeginTransactionResponse,
    super::apis::SHARE_BEGIN_TRANSACTION
);

// ---------------------------------------------------------------------------------------------
// 1001 ShareAcknowledgeTransactional

/// Acknowledge acquired records into a transaction (ACQUIRED → LOCKED).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareAcknowledgeTransactionalRequest {
    pub group_id: String,
    /// The share-group member that acquired the records.
    pub member_id: String,
    pub transaction_id: String,
    pub topics: Vec<AcknowledgeTopic>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AcknowledgeTopic {
    pub topic_id: Uuid,
    pub partitions: Vec<AcknowledgePartition>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AcknowledgePartition {
    pub partition_index: i32,
    pub acknowledgement_batches: Vec<AcknowledgementBatch>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AcknowledgementBatch {
    pub first_offset: i64,
    /// Inclusive.
    pub last_offset: i64,
    /// One type for the whole range, or one per offset: 0 GAP, 1 ACCEPT, 2 RELEASE, 3 REJECT.
    pub acknowledge_types: Vec<i8>,
}

impl Wire for ShareAcknowledgeTransactionalRequest {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_str(o, "GroupId", &self.group_id)?;
        w_str(o, "MemberId", &self.member_id)?;
        w_str(o, "TransactionId", &self.transaction_id)?;
        w_array(o, "Topics", &self.topics)?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            group_id: r_str(b, "GroupId")?,
            member_id: r_str(b, "MemberId")?,
            transaction_id: r_str(b, "TransactionId")?,
            topics: r_array(b, "Topics")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

impl Wire for AcknowledgeTopic {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_uuid(o, "TopicId", &self.topic_id);
        w_array(o, "Partitions", &self.partitions)?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            topic_id: r_uuid(b, "TopicId")?,
            partitions: r_array(b, "Partitions")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

impl Wire for AcknowledgePartition {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_i32(o, "PartitionIndex", self.partition_index);
        w_array(o, "AcknowledgementBatches", &self.acknowledgement_batches)?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            partition_index: r_i32(b, "PartitionIndex")?,
            acknowledgement_batches: r_array(b, "AcknowledgementBatches")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

impl Wire for AcknowledgementBatch {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_i64(o, "FirstOffset", self.first_offset);
        w_i64(o, "LastOffset", self.last_offset);
        w_i8_array(o, "AcknowledgeTypes", &self.acknowledge_types)?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            first_offset: r_i64(b, "FirstOffset")?,
            last_offset: r_i64(b, "LastOffset")?,
            acknowledge_types: r_i8_array(b, "AcknowledgeTypes")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareAcknowledgeTransactionalResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub responses: Vec<ShareAcknowledgeTransactionalTopicResponse>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareAcknowledgeTransactionalTopicResponse {
    pub topic_id: Uuid,
    pub partitions: Vec<PartitionData>,
}

/// One partition's outcome; all-or-nothing (INVALID_RECORD_STATE: none of its offsets changed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionData {
    pub partition_index: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
}

impl Wire for ShareAcknowledgeTransactionalResponse {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_i32(o, "ThrottleTimeMs", self.throttle_time_ms);
        w_i16(o, "ErrorCode", self.error_code);
        w_nullable_str(o, "ErrorMessage", self.error_message.as_deref())?;
        w_array(o, "Responses", &self.responses)?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            throttle_time_ms: r_i32(b, "ThrottleTimeMs")?,
            error_code: r_i16(b, "ErrorCode")?,
            error_message: r_nullable_str(b, "ErrorMessage")?,
            responses: r_array(b, "Responses")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

impl Wire for ShareAcknowledgeTransactionalTopicResponse {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_uuid(o, "TopicId", &self.topic_id);
        w_array(o, "Partitions", &self.partitions)?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            topic_id: r_uuid(b, "TopicId")?,
            partitions: r_array(b, "Partitions")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

impl Wire for PartitionData {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_i32(o, "PartitionIndex", self.partition_index);
        w_i16(o, "ErrorCode", self.error_code);
        w_nullable_str(o, "ErrorMessage", self.error_message.as_deref())?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            partition_index: r_i32(b, "PartitionIndex")?,
            error_code: r_i16(b, "ErrorCode")?,
            error_message: r_nullable_str(b, "ErrorMessage")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

request!(
    ShareAcknowledgeTransactionalRequest,
    ShareAcknowledgeTransactionalResponse,
    super::apis::SHARE_ACKNOWLEDGE_TRANSACTIONAL
);

// ---------------------------------------------------------------------------------------------
// 1002 SharePrepareTransaction · 1003 ShareCommitTransaction · 1004 ShareAbortTransaction:
// the same shapes, three distinct types so a handler cannot answer one with another.

macro_rules! outcome_rpc {
    ($(#[$doc:meta])* $req:ident, $resp:ident, $key:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $req {
            pub group_id: String,
            pub transaction_id: String,
        }

        /// Sent only after the outcome is durable.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $resp {
            pub throttle_time_ms: i32,
            pub error_code: i16,
            pub error_message: Option<String>,
            /// The state after the call, also on error.
            pub transaction_state: i8,
        }

        impl Wire for $req {
            fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
                w_str(o, "GroupId", &self.group_id)?;
                w_str(o, "TransactionId", &self.transaction_id)?;
                w_tags(o);
                Ok(())
            }

            fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
                let out = Self {
                    group_id: r_str(b, "GroupId")?,
                    transaction_id: r_str(b, "TransactionId")?,
                };
                r_tags(b)?;
                Ok(out)
            }
        }

        impl Wire for $resp {
            fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
                w_i32(o, "ThrottleTimeMs", self.throttle_time_ms);
                w_i16(o, "ErrorCode", self.error_code);
                w_nullable_str(o, "ErrorMessage", self.error_message.as_deref())?;
                w_i8(o, "TransactionState", self.transaction_state);
                w_tags(o);
                Ok(())
            }

            fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
                let out = Self {
                    throttle_time_ms: r_i32(b, "ThrottleTimeMs")?,
                    error_code: r_i16(b, "ErrorCode")?,
                    error_message: r_nullable_str(b, "ErrorMessage")?,
                    transaction_state: r_i8(b, "TransactionState")?,
                };
                r_tags(b)?;
                Ok(out)
            }
        }

        request!($req, $resp, $key);
    };
}

outcome_rpc!(
    /// Phase 1: make the transaction's locks durable (ONGOING → PREPARE).
    SharePrepareTransactionRequest,
    SharePrepareTransactionResponse,
    super::apis::SHARE_PREPARE_TRANSACTION
);
outcome_rpc!(
    /// Phase 2: LOCKED → ACKNOWLEDGED / ARCHIVED (PREPARE → COMMITTED).
    ShareCommitTransactionRequest,
    ShareCommitTransactionResponse,
    super::apis::SHARE_COMMIT_TRANSACTION
);
outcome_rpc!(
    /// LOCKED → AVAILABLE, redelivered (ONGOING or PREPARE → ABORTED).
    ShareAbortTransactionRequest,
    ShareAbortTransactionResponse,
    super::apis::SHARE_ABORT_TRANSACTION
);

// ---------------------------------------------------------------------------------------------
// 1005 ShareListTransactions

/// The KIP's `listPendingTransactions`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareListTransactionsRequest {
    pub group_id: String,
    /// State-code filter; empty = pending (ONGOING and PREPARE).
    pub states: Vec<i8>,
}

impl Wire for ShareListTransactionsRequest {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_str(o, "GroupId", &self.group_id)?;
        w_i8_array(o, "States", &self.states)?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            group_id: r_str(b, "GroupId")?,
            states: r_i8_array(b, "States")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareListTransactionsResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub transactions: Vec<ShareTransaction>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareTransaction {
    pub transaction_id: String,
    pub state: i8,
    pub timeout_ms: i64,
    pub create_time_ms: i64,
    /// -1 if not prepared.
    pub prepare_time_ms: i64,
    pub partitions: Vec<TransactionPartition>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransactionPartition {
    pub topic_id: Uuid,
    pub partition_index: i32,
    pub locked_records: i64,
}

impl Wire for ShareListTransactionsResponse {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_i32(o, "ThrottleTimeMs", self.throttle_time_ms);
        w_i16(o, "ErrorCode", self.error_code);
        w_nullable_str(o, "ErrorMessage", self.error_message.as_deref())?;
        w_array(o, "Transactions", &self.transactions)?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            throttle_time_ms: r_i32(b, "ThrottleTimeMs")?,
            error_code: r_i16(b, "ErrorCode")?,
            error_message: r_nullable_str(b, "ErrorMessage")?,
            transactions: r_array(b, "Transactions")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

impl Wire for ShareTransaction {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_str(o, "TransactionId", &self.transaction_id)?;
        w_i8(o, "State", self.state);
        w_i64(o, "TimeoutMs", self.timeout_ms);
        w_i64(o, "CreateTimeMs", self.create_time_ms);
        w_i64(o, "PrepareTimeMs", self.prepare_time_ms);
        w_array(o, "Partitions", &self.partitions)?;
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            transaction_id: r_str(b, "TransactionId")?,
            state: r_i8(b, "State")?,
            timeout_ms: r_i64(b, "TimeoutMs")?,
            create_time_ms: r_i64(b, "CreateTimeMs")?,
            prepare_time_ms: r_i64(b, "PrepareTimeMs")?,
            partitions: r_array(b, "Partitions")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

impl Wire for TransactionPartition {
    fn write<O: Out>(&self, o: &mut O) -> Result<(), WireError> {
        w_uuid(o, "TopicId", &self.topic_id);
        w_i32(o, "PartitionIndex", self.partition_index);
        w_i64(o, "LockedRecords", self.locked_records);
        w_tags(o);
        Ok(())
    }

    fn read<B: ByteBuf>(b: &mut B) -> Result<Self, WireError> {
        let out = Self {
            topic_id: r_uuid(b, "TopicId")?,
            partition_index: r_i32(b, "PartitionIndex")?,
            locked_records: r_i64(b, "LockedRecords")?,
        };
        r_tags(b)?;
        Ok(out)
    }
}

request!(
    ShareListTransactionsRequest,
    ShareListTransactionsResponse,
    super::apis::SHARE_LIST_TRANSACTIONS
);

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
    use std::fmt::Debug;

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

    // --- Schemas vs codec -----------------------------------------------------------------

    /// One field as written by the codec or declared by a schema.
    #[derive(Debug, PartialEq)]
    struct Node {
        name: String,
        ty: String,
        nullable: bool,
        children: Vec<Node>,
    }

    /// Records the fields the codec writes: for an array, the fields of its first element.
    struct Recorder {
        /// Frames of fields being recorded; `true` once the frame's first structure ended.
        stack: Vec<(Vec<Node>, bool)>,
    }

    impl Out for Recorder {
        fn raw(&mut self, _bytes: &[u8]) {}

        fn field(&mut self, name: &'static str, ty: Ty) {
            let (nodes, sealed) = self.stack.last_mut().unwrap();
            if *sealed {
                return;
            }
            let ty_name = match ty {
                Ty::Int8 => "int8".to_string(),
                Ty::Int16 => "int16".to_string(),
                Ty::Int32 => "int32".to_string(),
                Ty::Int64 => "int64".to_string(),
                Ty::Uuid => "uuid".to_string(),
                Ty::Str | Ty::NullableStr => "string".to_string(),
                Ty::Int8Array => "[]int8".to_string(),
                Ty::StructArray(rust) => format!("[]{}", rust.rsplit("::").next().unwrap()),
            };
            nodes.push(Node {
                name: name.to_string(),
                ty: ty_name,
                nullable: ty == Ty::NullableStr,
                children: Vec::new(),
            });
        }

        fn enter(&mut self) {
            let sealed = self.stack.last().unwrap().1;
            self.stack.push((Vec::new(), sealed));
        }

        fn leave(&mut self) {
            let (children, _) = self.stack.pop().unwrap();
            let (nodes, sealed) = self.stack.last_mut().unwrap();
            if !*sealed {
                nodes.last_mut().unwrap().children = children;
            }
        }

        fn end_struct(&mut self) {
            self.stack.last_mut().unwrap().1 = true;
        }
    }

    fn recorded<T: Wire>(m: &T) -> Vec<Node> {
        let mut recorder = Recorder {
            stack: vec![(Vec::new(), false)],
        };
        m.write(&mut recorder).unwrap();
        assert_eq!(recorder.stack.len(), 1);
        recorder.stack.pop().unwrap().0
    }

    /// Kafka's JSON specs allow whole-line `//` comments; ours use only those.
    fn load_schema(file: &str) -> serde_json::Value {
        let path = format!("{}/schemas/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let json: String = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn schema_fields(fields: &serde_json::Value, file: &str) -> Vec<Node> {
        fields
            .as_array()
            .unwrap_or_else(|| panic!("{file}: fields is an array"))
            .iter()
            .map(|field| {
                let name = field["name"].as_str().unwrap().to_string();
                assert_eq!(field["versions"], "0+", "{file} {name}: versions");
                let nullable = match &field["nullableVersions"] {
                    serde_json::Value::Null => false,
                    v => {
                        assert_eq!(v, "0+", "{file} {name}: nullableVersions");
                        true
                    }
                };
                assert!(
                    field["about"].as_str().is_some_and(|a| !a.is_empty()),
                    "{file} {name}: about"
                );
                Node {
                    ty: field["type"].as_str().unwrap().to_string(),
                    children: if field["fields"].is_null() {
                        Vec::new()
                    } else {
                        schema_fields(&field["fields"], file)
                    },
                    name,
                    nullable,
                }
            })
            .collect()
    }

    fn check_schema<T: Wire + Message>(m: &T, key: i16, kind: &str) {
        let name = std::any::type_name::<T>().rsplit("::").next().unwrap();
        let file = format!("{name}.json");
        let schema = load_schema(&file);
        assert_eq!(schema["apiKey"], key, "{file}: apiKey");
        assert_eq!(schema["type"], kind, "{file}: type");
        assert_eq!(schema["name"], name, "{file}: name");
        assert_eq!(schema["validVersions"], "0", "{file}: validVersions");
        assert_eq!(schema["flexibleVersions"], "0+", "{file}: flexibleVersions");
        assert_eq!(T::VERSIONS, VERSIONS);
        if kind == "request" {
            assert_eq!(schema["listeners"], serde_json::json!(["broker"]), "{file}");
        }
        assert_eq!(
            recorded(m),
            schema_fields(&schema["fields"], &file),
            "{file}: fields differ from what the codec writes"
        );
    }

    #[test]
    fn schemas_match_the_codec() {
        fn pair<Q: Wire + KafkaRequest>(request: &Q, response: &Q::Response)
        where
            Q::Response: Wire,
        {
            check_schema(request, Q::KEY, "request");
            check_schema(response, Q::KEY, "response");
        }
        pair(&begin_request(), &begin_response());
        pair(&ack_request(), &ack_response());
        pair(&prepare_request(), &prepare_response());
        pair(&commit_request(), &commit_response());
        pair(&abort_request(), &abort_response());
        pair(&list_request(), &list_response());
        // Every Share*.json in schemas/ is one of the twelve.
        let dir = format!("{}/schemas", env!("CARGO_MANIFEST_DIR"));
        let count = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("Share") && n.ends_with(".json"))
            .count();
        assert_eq!(count, 12);
    }

    /// The recorder itself: a schema differing from the codec is caught.
    #[test]
    fn schema_check_detects_drift() {
        let written = recorded(&begin_request());
        let mut schema = load_schema("ShareBeginTransactionRequest.json");
        schema["fields"][2]["type"] = "int32".into();
        assert_ne!(written, schema_fields(&schema["fields"], "edited"));
        let nested = recorded(&list_response());
        assert_eq!(nested[3].children[5].children.len(), 3, "{nested:?}");
    }
}
