//! Journal entries: the FlatBuffers tables of `schemas/journal.fbs`, their Rust types, and
//! their codec.
//!
//! Decision: the readers and builders are written by hand on the `flatbuffers` crate's
//! low-level API (`FlatBufferBuilder::start_table` / `push_slot` / `end_table`, `Table::get`,
//! `Verifier`), laid out exactly as flatc would emit them. Debian's flatc is too old for
//! `flatbuffers` 25, and `planus` generates code for its own runtime, which would mean a second
//! FlatBuffers runtime beside the one the design names. The `.fbs` file stays the normative
//! schema: each table below is declared once through `fb_table!`, which produces the
//! verifier, the typed accessors and a description of the fields; a unit test parses
//! `schemas/journal.fbs` and checks every table, field id, type, default, `required` flag,
//! struct layout and entry kind against those descriptions. Any flatc-generated reader can
//! read what this module writes, and vice versa.
//!
//! Invariants:
//! - every payload is verified (`flatbuffers::Verifier`, with bounds on tables and apparent
//!   size derived from the payload length) before any field is read; every `unsafe` below is a
//!   field read of a verified table or a `Follow`/`Push` impl, as in flatc's output;
//! - decoding validates what the types promise (known state codes, `first <= last`, offsets
//!   and partitions non-negative, versions `1..=current`) and fails with [`EntryError`];
//!   garbage never panics;
//! - [`Entry::encode`] followed by [`Entry::decode`] is the identity (tested).
//!
//! Versions: see `schemas/journal.fbs`. Every table's field 0 is `version`; writers write the
//! table's current version, readers accept `1..=current` and refuse newer ones.
//!
//! Ownership: pure data; no state.

use std::fmt;

use flatbuffers::{
    FlatBufferBuilder, Follow, ForwardsUOffset, InvalidFlatbuffer, Push, PushAlignment,
    SimpleToVerifyInSlice, Table, TableFinishedWIPOffset, VOffsetT, Vector, Verifiable, Verifier,
    VerifierOptions, WIPOffset,
};
use serde::Serialize;

use crate::constants::JOURNAL_SNAPSHOT_BYTES_MAX;

// ---------------------------------------------------------------------------------------------
// Entry kinds
// ---------------------------------------------------------------------------------------------

/// The frame `kind` of a journal entry: which table its payload holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[repr(u16)]
pub enum EntryKind {
    SnapshotBegin = 1,
    SnapshotChunk = 2,
    SnapshotEnd = 3,
    SharePartitionSnapshot = 16,
    SharePartitionUpdate = 17,
    TransactionRecord = 32,
    TransactionLocks = 33,
    GroupOffsetCommit = 48,
    ProducerTransaction = 64,
}

impl EntryKind {
    pub const ALL: [EntryKind; 9] = [
        EntryKind::SnapshotBegin,
        EntryKind::SnapshotChunk,
        EntryKind::SnapshotEnd,
        EntryKind::SharePartitionSnapshot,
        EntryKind::SharePartitionUpdate,
        EntryKind::TransactionRecord,
        EntryKind::TransactionLocks,
        EntryKind::GroupOffsetCommit,
        EntryKind::ProducerTransaction,
    ];

    pub const fn code(self) -> u16 {
        self as u16
    }

    pub fn from_code(code: u16) -> Option<EntryKind> {
        EntryKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// The name of the kind's table in `schemas/journal.fbs`.
    pub const fn name(self) -> &'static str {
        match self {
            EntryKind::SnapshotBegin => "SnapshotBegin",
            EntryKind::SnapshotChunk => "SnapshotChunk",
            EntryKind::SnapshotEnd => "SnapshotEnd",
            EntryKind::SharePartitionSnapshot => "SharePartitionSnapshot",
            EntryKind::SharePartitionUpdate => "SharePartitionUpdate",
            EntryKind::TransactionRecord => "TransactionRecord",
            EntryKind::TransactionLocks => "TransactionLocks",
            EntryKind::GroupOffsetCommit => "GroupOffsetCommit",
            EntryKind::ProducerTransaction => "ProducerTransaction",
        }
    }

    /// True for the kinds only the journal's snapshot mechanism writes.
    pub const fn is_snapshot_marker(self) -> bool {
        matches!(
            self,
            EntryKind::SnapshotBegin | EntryKind::SnapshotChunk | EntryKind::SnapshotEnd
        )
    }
}

impl fmt::Display for EntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.code())
    }
}

// ---------------------------------------------------------------------------------------------
// Decoded types
// ---------------------------------------------------------------------------------------------

/// A Kafka topic id, 16 bytes as on the wire.
pub type TopicId = [u8; 16];

/// Persisted state of a run of offsets (Kafka's `RecordState` ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunState {
    Available,
    Acknowledged,
    Archived,
}

impl RunState {
    pub const fn code(self) -> u8 {
        match self {
            RunState::Available => 0,
            RunState::Acknowledged => 2,
            RunState::Archived => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<RunState> {
        match code {
            0 => Some(RunState::Available),
            2 => Some(RunState::Acknowledged),
            4 => Some(RunState::Archived),
            _ => None,
        }
    }
}

/// Offsets `[first_offset, last_offset]` in one state with one delivery count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StateRun {
    pub first_offset: i64,
    pub last_offset: i64,
    pub state: RunState,
    pub delivery_count: u16,
}

/// The persisted state of one share partition (table `SharePartitionSnapshot`), or changes to
/// it (table `SharePartitionUpdate`): the two tables have the same fields. `None` offsets are
/// written as -1: unknown in a snapshot, unchanged in an update.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SharePartitionState {
    pub group_id: String,
    #[serde(serialize_with = "serialize_topic_id")]
    pub topic_id: TopicId,
    pub partition: i32,
    pub start_offset: Option<i64>,
    pub end_offset: Option<i64>,
    pub state_epoch: i32,
    pub runs: Vec<StateRun>,
}

/// Transaction states as persisted (the wire codes; EMPTY is never persisted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TxnState {
    Ongoing,
    Prepare,
    Committed,
    Aborted,
}

impl TxnState {
    pub const fn code(self) -> u8 {
        match self {
            TxnState::Ongoing => 1,
            TxnState::Prepare => 2,
            TxnState::Committed => 3,
            TxnState::Aborted => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<TxnState> {
        match code {
            1 => Some(TxnState::Ongoing),
            2 => Some(TxnState::Prepare),
            3 => Some(TxnState::Committed),
            4 => Some(TxnState::Aborted),
            _ => None,
        }
    }
}

/// A partition on which a transaction holds locks, as its coordinator knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TransactionParticipant {
    #[serde(serialize_with = "serialize_topic_id")]
    pub topic_id: TopicId,
    pub partition: i32,
    pub locked_records: i64,
}

/// The coordinator's record of a transaction (table `TransactionRecord`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TransactionRecord {
    pub transaction_id: String,
    pub group_id: String,
    pub state: TxnState,
    pub timeout_ms: i64,
    pub create_time_ms: i64,
    /// -1 until prepared.
    pub prepare_time_ms: i64,
    /// -1 until committed or aborted.
    pub decision_time_ms: i64,
    pub participants: Vec<TransactionParticipant>,
}

/// What a LOCKED record becomes when its transaction commits (Kafka's AcknowledgeType ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LockOutcome {
    Gap,
    Accept,
    Reject,
}

impl LockOutcome {
    pub const fn code(self) -> u8 {
        match self {
            LockOutcome::Gap => 0,
            LockOutcome::Accept => 1,
            LockOutcome::Reject => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<LockOutcome> {
        match code {
            0 => Some(LockOutcome::Gap),
            1 => Some(LockOutcome::Accept),
            3 => Some(LockOutcome::Reject),
            _ => None,
        }
    }
}

/// Offsets `[first_offset, last_offset]` LOCKED with one outcome and delivery count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LockedRange {
    pub first_offset: i64,
    pub last_offset: i64,
    pub outcome: LockOutcome,
    pub delivery_count: u16,
}

/// A participant's LOCKED ranges for one transaction on one partition (`TransactionLocks`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TransactionLocks {
    pub transaction_id: String,
    pub group_id: String,
    #[serde(serialize_with = "serialize_topic_id")]
    pub topic_id: TopicId,
    pub partition: i32,
    pub ranges: Vec<LockedRange>,
}

/// A consumer group's committed offset of one partition (`GroupOffsetCommit`);
/// `offset: None` is a tombstone (deleted or expired).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupOffsetCommit {
    pub group_id: String,
    pub topic: String,
    pub partition: i32,
    pub offset: Option<i64>,
    /// -1: unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// -1: none (the broker's `offsets.retention.minutes` applies).
    pub expire_timestamp_ms: i64,
    /// -1: a committed offset; otherwise a pending transactional offset of this producer
    /// (TxnOffsetCommit), which `offset: None` removes (version 2).
    pub producer_id: i64,
}

/// A producer transaction coordinator's record of one transactional id (`ProducerTransaction`,
/// `ptxn::coordinator::TxnMetadata`): the latest record of an id replaces the earlier
/// ones; state 6 (Dead) is a tombstone. States are Kafka's ids (0 Empty .. 7 PrepareEpochFence).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProducerTransaction {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_id: i64,
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: u8,
    /// (topic name, partition), sorted.
    pub partitions: Vec<(String, i32)>,
    pub groups: Vec<String>,
    pub start_time_ms: i64,
    pub update_time_ms: i64,
    pub two_phase: bool,
}

/// The payload of a journal snapshot: the shard's whole durable state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ShardSnapshot {
    pub share_partitions: Vec<SharePartitionState>,
    pub transactions: Vec<TransactionRecord>,
    pub transaction_locks: Vec<TransactionLocks>,
    /// Committed offsets of the consumer groups coordinated by the shard (ShardSnapshot v2).
    pub group_offsets: Vec<GroupOffsetCommit>,
    /// Transactional ids coordinated by the shard (ShardSnapshot v3).
    pub producer_transactions: Vec<ProducerTransaction>,
}

/// First entry of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SnapshotBegin {
    pub chunk_count: u32,
    pub total_bytes: u64,
}

/// One piece of a snapshot's payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SnapshotChunk {
    pub snapshot_seq: u64,
    pub index: u32,
    #[serde(rename = "data_bytes", serialize_with = "serialize_len")]
    pub data: Vec<u8>,
}

/// Last entry of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SnapshotEnd {
    pub snapshot_seq: u64,
    pub chunk_count: u32,
    pub total_bytes: u64,
    pub crc32: u32,
}

/// One decoded journal entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type")]
pub enum Entry {
    SnapshotBegin(SnapshotBegin),
    SnapshotChunk(SnapshotChunk),
    SnapshotEnd(SnapshotEnd),
    SharePartitionSnapshot(SharePartitionState),
    SharePartitionUpdate(SharePartitionState),
    TransactionRecord(TransactionRecord),
    TransactionLocks(TransactionLocks),
    GroupOffsetCommit(GroupOffsetCommit),
    ProducerTransaction(ProducerTransaction),
}

fn serialize_topic_id<S: serde::Serializer>(id: &TopicId, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&topic_id_string(id))
}

fn serialize_len<S: serde::Serializer>(data: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(data.len() as u64)
}

/// A topic id as Kafka prints it: URL-safe base64 without padding (22 characters).
pub fn topic_id_string(id: &TopicId) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id)
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a payload is not a valid entry. The journal adds the file and position.
#[derive(Clone, Debug, PartialEq)]
pub enum EntryError {
    UnknownKind {
        kind: u16,
    },
    /// The FlatBuffers verifier rejected the buffer.
    Invalid {
        table: &'static str,
        error: InvalidFlatbuffer,
    },
    /// `version` missing (0) or newer than this build reads.
    Version {
        table: &'static str,
        version: u16,
        supported: u16,
    },
    /// A field holds a value its type does not allow.
    Field {
        table: &'static str,
        field: &'static str,
        reason: String,
    },
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryError::UnknownKind { kind } => write!(f, "unknown entry kind {kind}"),
            EntryError::Invalid { table, error } => write!(f, "invalid {table} buffer: {error}"),
            EntryError::Version {
                table, version: 0, ..
            } => write!(f, "{table} without a version"),
            EntryError::Version {
                table,
                version,
                supported,
            } => write!(
                f,
                "{table} version {version} is newer than this build reads (1..={supported})"
            ),
            EntryError::Field {
                table,
                field,
                reason,
            } => write!(f, "{table}.{field}: {reason}"),
        }
    }
}

impl std::error::Error for EntryError {}

fn field_error(table: &'static str, field: &'static str, reason: impl Into<String>) -> EntryError {
    EntryError::Field {
        table,
        field,
        reason: reason.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Schema descriptions (checked against schemas/journal.fbs by a test)
// ---------------------------------------------------------------------------------------------

/// One field of a table as declared in the `.fbs` file.
#[derive(Clone, Copy, Debug)]
pub struct FieldSchema {
    /// Field id: the field's position in the table declaration.
    pub id: u16,
    pub name: &'static str,
    /// The type as spelled in the `.fbs` (`ushort`, `string`, `[StateRun]`, `Uuid`, …).
    pub ty: &'static str,
    /// The declared default of a scalar ("0" if none), "" for non-scalars.
    pub default: &'static str,
    pub required: bool,
}

/// A table as declared in the `.fbs` file; several tables may share one layout.
#[derive(Clone, Copy, Debug)]
pub struct TableSchema {
    pub fbs_names: &'static [&'static str],
    pub version_current: u16,
    pub fields: &'static [FieldSchema],
}

/// A struct's layout (offsets and sizes in bytes) as this module reads and writes it.
#[derive(Clone, Copy, Debug)]
pub struct StructSchema {
    pub name: &'static str,
    pub size: usize,
    pub align: usize,
    /// (field name, byte offset, `.fbs` type)
    pub fields: &'static [(&'static str, usize, &'static str)],
}

/// Byte offset of field `id`'s entry in a vtable.
const fn slot_of(id: u16) -> VOffsetT {
    4 + 2 * id
}

// ---------------------------------------------------------------------------------------------
// Structs
// ---------------------------------------------------------------------------------------------

/// Implements `Follow` (by copy), `Push` and slice verification for a fixed-size struct held
/// as its little-endian bytes, as flatc does for FlatBuffers structs.
macro_rules! fb_struct {
    ($ty:ident, $size:expr, $align:expr) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(transparent)]
        struct $ty([u8; $size]);

        impl<'a> Follow<'a> for $ty {
            type Inner = $ty;
            unsafe fn follow(buf: &'a [u8], loc: usize) -> $ty {
                let mut bytes = [0u8; $size];
                bytes.copy_from_slice(&buf[loc..loc + $size]);
                $ty(bytes)
            }
        }

        impl Push for $ty {
            type Output = $ty;
            unsafe fn push(&self, dst: &mut [u8], _written_len: usize) {
                dst[..$size].copy_from_slice(&self.0);
            }
            fn alignment() -> PushAlignment {
                PushAlignment::new($align)
            }
        }

        impl Verifiable for $ty {
            fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
                v.in_buffer::<$ty>(pos)
            }
        }

        impl SimpleToVerifyInSlice for $ty {}

        const _: () = assert!(std::mem::size_of::<$ty>() == $size);
    };
}

fb_struct!(UuidFb, 16, 1);
fb_struct!(StateRunFb, 24, 8);
fb_struct!(LockedRangeFb, 24, 8);
fb_struct!(ParticipantFb, 32, 8);

// Byte offsets inside the structs (flatc layout: each field at its alignment, size padded).
const RUN_FIRST_AT: usize = 0;
const RUN_LAST_AT: usize = 8;
const RUN_STATE_AT: usize = 16;
const RUN_COUNT_AT: usize = 18;
const PARTICIPANT_TOPIC_AT: usize = 0;
const PARTICIPANT_PARTITION_AT: usize = 16;
const PARTICIPANT_LOCKED_AT: usize = 24;

/// Layouts of the structs, for the schema test.
pub const STRUCTS: &[StructSchema] = &[
    StructSchema {
        name: "Uuid",
        size: 16,
        align: 1,
        fields: &[("bytes", 0, "[ubyte:16]")],
    },
    StructSchema {
        name: "StateRun",
        size: 24,
        align: 8,
        fields: &[
            ("first_offset", RUN_FIRST_AT, "long"),
            ("last_offset", RUN_LAST_AT, "long"),
            ("state", RUN_STATE_AT, "ubyte"),
            ("delivery_count", RUN_COUNT_AT, "ushort"),
        ],
    },
    StructSchema {
        name: "LockedRange",
        size: 24,
        align: 8,
        fields: &[
            ("first_offset", RUN_FIRST_AT, "long"),
            ("last_offset", RUN_LAST_AT, "long"),
            ("outcome", RUN_STATE_AT, "ubyte"),
            ("delivery_count", RUN_COUNT_AT, "ushort"),
        ],
    },
    StructSchema {
        name: "TransactionParticipant",
        size: 32,
        align: 8,
        fields: &[
            ("topic_id", PARTICIPANT_TOPIC_AT, "Uuid"),
            ("partition", PARTICIPANT_PARTITION_AT, "int"),
            ("locked_records", PARTICIPANT_LOCKED_AT, "long"),
        ],
    },
];

fn i64_at(bytes: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn i32_at(bytes: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"))
}

/// (first, last, code, delivery count) of a StateRun / LockedRange.
fn range_fields(bytes: &[u8; 24]) -> (i64, i64, u8, u16) {
    (
        i64_at(bytes, RUN_FIRST_AT),
        i64_at(bytes, RUN_LAST_AT),
        bytes[RUN_STATE_AT],
        u16_at(bytes, RUN_COUNT_AT),
    )
}

fn range_bytes(first: i64, last: i64, code: u8, delivery_count: u16) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[RUN_FIRST_AT..RUN_FIRST_AT + 8].copy_from_slice(&first.to_le_bytes());
    b[RUN_LAST_AT..RUN_LAST_AT + 8].copy_from_slice(&last.to_le_bytes());
    b[RUN_STATE_AT] = code;
    b[RUN_COUNT_AT..RUN_COUNT_AT + 2].copy_from_slice(&delivery_count.to_le_bytes());
    b
}

fn check_range(
    table: &'static str,
    field: &'static str,
    first: i64,
    last: i64,
) -> Result<(), EntryError> {
    if first < 0 || last < first {
        return Err(field_error(
            table,
            field,
            format!("invalid offset range [{first}, {last}]"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------------

/// Declares a view over one verified table: `Follow` + `Verifiable` impls, one accessor per
/// field (returning `None` when absent), a module of slot constants for the builder, and the
/// table's [`TableSchema`]. Fields are listed in id order.
macro_rules! fb_table {
    (
        $view:ident, $slots:ident, version $version:literal, fbs [$($fbs:literal),+] {
            $( $id:literal $field:ident : $follow:ty = $fbs_ty:literal, $default:literal,
               $required:literal; )*
        }
    ) => {
        #[derive(Clone, Copy)]
        struct $view<'a>(Table<'a>);

        #[allow(non_upper_case_globals, dead_code)]
        mod $slots {
            use flatbuffers::VOffsetT;
            $( pub const $field: VOffsetT = super::slot_of($id); )*
        }

        impl<'a> Follow<'a> for $view<'a> {
            type Inner = $view<'a>;
            unsafe fn follow(buf: &'a [u8], loc: usize) -> $view<'a> {
                // SAFETY: forwarded contract: the caller guarantees a table at `loc` (the
                // flatbuffers crate calls this only for positions the verifier checked).
                $view(unsafe { Table::new(buf, loc) })
            }
        }

        impl<'a> Verifiable for $view<'a> {
            fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
                v.visit_table(pos)?
                    $( .visit_field::<$follow>(stringify!($field), $slots::$field, $required)? )*
                    .finish();
                Ok(())
            }
        }

        #[allow(dead_code)]
        impl<'a> $view<'a> {
            const SCHEMA: TableSchema = TableSchema {
                fbs_names: &[$($fbs),+],
                version_current: $version,
                fields: &[ $( FieldSchema {
                    id: $id,
                    name: stringify!($field),
                    ty: $fbs_ty,
                    default: $default,
                    required: $required,
                } ),* ],
            };

            $(
                fn $field(&self) -> Option<<$follow as Follow<'a>>::Inner> {
                    // SAFETY: a view is only obtained from a buffer that passed the verifier
                    // for this table (`verified_root`, or an element of a verified vector),
                    // which checked that this slot, if present, holds a `$follow` in bounds.
                    unsafe { self.0.get::<$follow>($slots::$field, None) }
                }
            )*
        }
    };
}

fb_table!(SnapshotBeginFb, begin_slots, version 1, fbs ["SnapshotBegin"] {
    0 version: u16 = "ushort", "0", false;
    1 chunk_count: u32 = "uint", "0", false;
    2 total_bytes: u64 = "ulong", "0", false;
});

fb_table!(SnapshotChunkFb, chunk_slots, version 1, fbs ["SnapshotChunk"] {
    0 version: u16 = "ushort", "0", false;
    1 snapshot_seq: u64 = "ulong", "0", false;
    2 index: u32 = "uint", "0", false;
    3 data: ForwardsUOffset<Vector<'a, u8>> = "[ubyte]", "", true;
});

fb_table!(SnapshotEndFb, end_slots, version 1, fbs ["SnapshotEnd"] {
    0 version: u16 = "ushort", "0", false;
    1 snapshot_seq: u64 = "ulong", "0", false;
    2 chunk_count: u32 = "uint", "0", false;
    3 total_bytes: u64 = "ulong", "0", false;
    4 crc32: u32 = "uint", "0", false;
});

fb_table!(SharePartitionFb, partition_slots, version 1,
          fbs ["SharePartitionSnapshot", "SharePartitionUpdate"] {
    0 version: u16 = "ushort", "0", false;
    1 group_id: ForwardsUOffset<&'a str> = "string", "", true;
    2 topic_id: UuidFb = "Uuid", "", true;
    3 partition: i32 = "int", "0", false;
    4 start_offset: i64 = "long", "-1", false;
    5 end_offset: i64 = "long", "-1", false;
    6 state_epoch: i32 = "int", "0", false;
    7 runs: ForwardsUOffset<Vector<'a, StateRunFb>> = "[StateRun]", "", false;
});

fb_table!(TransactionRecordFb, txn_slots, version 1, fbs ["TransactionRecord"] {
    0 version: u16 = "ushort", "0", false;
    1 transaction_id: ForwardsUOffset<&'a str> = "string", "", true;
    2 group_id: ForwardsUOffset<&'a str> = "string", "", true;
    3 state: u8 = "ubyte", "0", false;
    4 timeout_ms: i64 = "long", "0", false;
    5 create_time_ms: i64 = "long", "0", false;
    6 prepare_time_ms: i64 = "long", "-1", false;
    7 decision_time_ms: i64 = "long", "-1", false;
    8 participants: ForwardsUOffset<Vector<'a, ParticipantFb>> = "[TransactionParticipant]", "",
        false;
});

fb_table!(TransactionLocksFb, locks_slots, version 1, fbs ["TransactionLocks"] {
    0 version: u16 = "ushort", "0", false;
    1 transaction_id: ForwardsUOffset<&'a str> = "string", "", true;
    2 group_id: ForwardsUOffset<&'a str> = "string", "", true;
    3 topic_id: UuidFb = "Uuid", "", true;
    4 partition: i32 = "int", "0", false;
    5 ranges: ForwardsUOffset<Vector<'a, LockedRangeFb>> = "[LockedRange]", "", false;
});

fb_table!(GroupOffsetCommitFb, offset_slots, version 2, fbs ["GroupOffsetCommit"] {
    0 version: u16 = "ushort", "0", false;
    1 group_id: ForwardsUOffset<&'a str> = "string", "", true;
    2 topic: ForwardsUOffset<&'a str> = "string", "", true;
    3 partition: i32 = "int", "0", false;
    4 offset: i64 = "long", "-1", false;
    5 leader_epoch: i32 = "int", "-1", false;
    6 metadata: ForwardsUOffset<&'a str> = "string", "", false;
    7 commit_timestamp_ms: i64 = "long", "0", false;
    8 expire_timestamp_ms: i64 = "long", "-1", false;
    9 producer_id: i64 = "long", "-1", false;
});

fb_table!(ProducerTransactionFb, ptxn_slots, version 1, fbs ["ProducerTransaction"] {
    0 version: u16 = "ushort", "0", false;
    1 transactional_id: ForwardsUOffset<&'a str> = "string", "", true;
    2 producer_id: i64 = "long", "-1", false;
    3 producer_epoch: i16 = "short", "-1", false;
    4 last_producer_id: i64 = "long", "-1", false;
    5 last_producer_epoch: i16 = "short", "-1", false;
    6 timeout_ms: i32 = "int", "0", false;
    7 state: u8 = "ubyte", "0", false;
    8 partition_topics: ForwardsUOffset<Vector<'a, ForwardsUOffset<&'a str>>> = "[string]", "",
        false;
    9 partition_indexes: ForwardsUOffset<Vector<'a, i32>> = "[int]", "", false;
    10 groups: ForwardsUOffset<Vector<'a, ForwardsUOffset<&'a str>>> = "[string]", "", false;
    11 start_time_ms: i64 = "long", "-1", false;
    12 update_time_ms: i64 = "long", "0", false;
    13 two_phase: bool = "bool", "0", false;
});

fb_table!(ShardSnapshotFb, shard_slots, version 3, fbs ["ShardSnapshot"] {
    0 version: u16 = "ushort", "0", false;
    1 share_partitions: ForwardsUOffset<Vector<'a, ForwardsUOffset<SharePartitionFb<'a>>>>
        = "[SharePartitionSnapshot]", "", false;
    2 transactions: ForwardsUOffset<Vector<'a, ForwardsUOffset<TransactionRecordFb<'a>>>>
        = "[TransactionRecord]", "", false;
    3 transaction_locks: ForwardsUOffset<Vector<'a, ForwardsUOffset<TransactionLocksFb<'a>>>>
        = "[TransactionLocks]", "", false;
    4 group_offsets: ForwardsUOffset<Vector<'a, ForwardsUOffset<GroupOffsetCommitFb<'a>>>>
        = "[GroupOffsetCommit]", "", false;
    5 producer_transactions: ForwardsUOffset<Vector<'a, ForwardsUOffset<ProducerTransactionFb<'a>>>>
        = "[ProducerTransaction]", "", false;
});

/// Every table layout, for the schema test.
pub const TABLES: &[TableSchema] = &[
    SnapshotBeginFb::SCHEMA,
    SnapshotChunkFb::SCHEMA,
    SnapshotEndFb::SCHEMA,
    SharePartitionFb::SCHEMA,
    TransactionRecordFb::SCHEMA,
    TransactionLocksFb::SCHEMA,
    GroupOffsetCommitFb::SCHEMA,
    ProducerTransactionFb::SCHEMA,
    ShardSnapshotFb::SCHEMA,
];

/// Verifies `payload` as a buffer whose root is a `T`, with limits scaled to its length (a
/// buffer cannot make the decoder allocate much more than its own size).
fn verified_root<'a, T>(table: &'static str, payload: &'a [u8]) -> Result<T, EntryError>
where
    T: Follow<'a, Inner = T> + Verifiable + 'a,
{
    let options = VerifierOptions {
        max_depth: 8,
        max_tables: payload.len() / 4 + 1,
        max_apparent_size: payload.len().saturating_mul(4).saturating_add(64 * 1024),
        ignore_missing_null_terminator: false,
    };
    flatbuffers::root_with_opts::<T>(&options, payload)
        .map_err(|error| EntryError::Invalid { table, error })
}

fn check_version(
    table: &'static str,
    version: Option<u16>,
    current: u16,
) -> Result<(), EntryError> {
    let version = version.unwrap_or(0);
    if version == 0 || version > current {
        return Err(EntryError::Version {
            table,
            version,
            supported: current,
        });
    }
    Ok(())
}

fn required<T>(
    table: &'static str,
    field: &'static str,
    value: Option<T>,
) -> Result<T, EntryError> {
    // The verifier already enforces `required`; this keeps the decoder total anyway.
    value.ok_or_else(|| field_error(table, field, "missing"))
}

fn check_partition(table: &'static str, partition: i32) -> Result<i32, EntryError> {
    if partition < 0 {
        return Err(field_error(
            table,
            "partition",
            format!("negative: {partition}"),
        ));
    }
    Ok(partition)
}

fn optional_offset(
    table: &'static str,
    field: &'static str,
    value: Option<i64>,
) -> Result<Option<i64>, EntryError> {
    match value.unwrap_or(-1) {
        -1 => Ok(None),
        v if v >= 0 => Ok(Some(v)),
        v => Err(field_error(table, field, format!("invalid offset {v}"))),
    }
}

// ---- decoding -------------------------------------------------------------------------------

fn decode_share_partition(
    table: &'static str,
    view: SharePartitionFb<'_>,
) -> Result<SharePartitionState, EntryError> {
    check_version(
        table,
        view.version(),
        SharePartitionFb::SCHEMA.version_current,
    )?;
    let mut runs = Vec::new();
    if let Some(vector) = view.runs() {
        runs.reserve(vector.len());
        for raw in vector.iter() {
            let (first_offset, last_offset, code, delivery_count) = range_fields(&raw.0);
            check_range(table, "runs", first_offset, last_offset)?;
            let state = RunState::from_code(code)
                .ok_or_else(|| field_error(table, "runs", format!("unknown run state {code}")))?;
            runs.push(StateRun {
                first_offset,
                last_offset,
                state,
                delivery_count,
            });
        }
    }
    Ok(SharePartitionState {
        group_id: required(table, "group_id", view.group_id())?.to_string(),
        topic_id: required(table, "topic_id", view.topic_id())?.0,
        partition: check_partition(table, view.partition().unwrap_or(0))?,
        start_offset: optional_offset(table, "start_offset", view.start_offset())?,
        end_offset: optional_offset(table, "end_offset", view.end_offset())?,
        state_epoch: view.state_epoch().unwrap_or(0),
        runs,
    })
}

fn decode_transaction_record(
    view: TransactionRecordFb<'_>,
) -> Result<TransactionRecord, EntryError> {
    const T: &str = "TransactionRecord";
    check_version(
        T,
        view.version(),
        TransactionRecordFb::SCHEMA.version_current,
    )?;
    let code = view.state().unwrap_or(0);
    let state = TxnState::from_code(code)
        .ok_or_else(|| field_error(T, "state", format!("unknown transaction state {code}")))?;
    let mut participants = Vec::new();
    if let Some(vector) = view.participants() {
        participants.reserve(vector.len());
        for raw in vector.iter() {
            let mut topic_id = [0u8; 16];
            topic_id.copy_from_slice(&raw.0[PARTICIPANT_TOPIC_AT..PARTICIPANT_TOPIC_AT + 16]);
            let locked_records = i64_at(&raw.0, PARTICIPANT_LOCKED_AT);
            if locked_records < 0 {
                return Err(field_error(T, "participants", "negative locked_records"));
            }
            participants.push(TransactionParticipant {
                topic_id,
                partition: check_partition(T, i32_at(&raw.0, PARTICIPANT_PARTITION_AT))?,
                locked_records,
            });
        }
    }
    Ok(TransactionRecord {
        transaction_id: required(T, "transaction_id", view.transaction_id())?.to_string(),
        group_id: required(T, "group_id", view.group_id())?.to_string(),
        state,
        timeout_ms: view.timeout_ms().unwrap_or(0),
        create_time_ms: view.create_time_ms().unwrap_or(0),
        prepare_time_ms: view.prepare_time_ms().unwrap_or(-1),
        decision_time_ms: view.decision_time_ms().unwrap_or(-1),
        participants,
    })
}

fn decode_transaction_locks(view: TransactionLocksFb<'_>) -> Result<TransactionLocks, EntryError> {
    const T: &str = "TransactionLocks";
    check_version(
        T,
        view.version(),
        TransactionLocksFb::SCHEMA.version_current,
    )?;
    let mut ranges = Vec::new();
    if let Some(vector) = view.ranges() {
        ranges.reserve(vector.len());
        for raw in vector.iter() {
            let (first_offset, last_offset, code, delivery_count) = range_fields(&raw.0);
            check_range(T, "ranges", first_offset, last_offset)?;
            let outcome = LockOutcome::from_code(code)
                .ok_or_else(|| field_error(T, "ranges", format!("unknown lock outcome {code}")))?;
            ranges.push(LockedRange {
                first_offset,
                last_offset,
                outcome,
                delivery_count,
            });
        }
    }
    Ok(TransactionLocks {
        transaction_id: required(T, "transaction_id", view.transaction_id())?.to_string(),
        group_id: required(T, "group_id", view.group_id())?.to_string(),
        topic_id: required(T, "topic_id", view.topic_id())?.0,
        partition: check_partition(T, view.partition().unwrap_or(0))?,
        ranges,
    })
}

fn decode_group_offset(view: GroupOffsetCommitFb<'_>) -> Result<GroupOffsetCommit, EntryError> {
    const T: &str = "GroupOffsetCommit";
    check_version(
        T,
        view.version(),
        GroupOffsetCommitFb::SCHEMA.version_current,
    )?;
    let leader_epoch = view.leader_epoch().unwrap_or(-1);
    if leader_epoch < -1 {
        return Err(field_error(
            T,
            "leader_epoch",
            format!("invalid leader epoch {leader_epoch}"),
        ));
    }
    Ok(GroupOffsetCommit {
        group_id: required(T, "group_id", view.group_id())?.to_string(),
        topic: required(T, "topic", view.topic())?.to_string(),
        partition: check_partition(T, view.partition().unwrap_or(0))?,
        offset: optional_offset(T, "offset", view.offset())?,
        leader_epoch,
        metadata: view.metadata().unwrap_or("").to_string(),
        commit_timestamp_ms: view.commit_timestamp_ms().unwrap_or(0),
        expire_timestamp_ms: view.expire_timestamp_ms().unwrap_or(-1),
        producer_id: view.producer_id().unwrap_or(-1).max(-1),
    })
}

fn decode_producer_transaction(
    view: ProducerTransactionFb<'_>,
) -> Result<ProducerTransaction, EntryError> {
    const T: &str = "ProducerTransaction";
    check_version(
        T,
        view.version(),
        ProducerTransactionFb::SCHEMA.version_current,
    )?;
    let state = view.state().unwrap_or(0);
    if state > 7 {
        return Err(field_error(T, "state", format!("unknown state {state}")));
    }
    let topics: Vec<String> = view
        .partition_topics()
        .map(|v| v.iter().map(str::to_string).collect())
        .unwrap_or_default();
    let indexes: Vec<i32> = view
        .partition_indexes()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    if topics.len() != indexes.len() {
        return Err(field_error(
            T,
            "partition_indexes",
            format!(
                "{} topics but {} partition indexes",
                topics.len(),
                indexes.len()
            ),
        ));
    }
    let mut partitions = Vec::with_capacity(topics.len());
    for (topic, index) in topics.into_iter().zip(indexes) {
        partitions.push((topic, check_partition(T, index)?));
    }
    let producer_epoch = view.producer_epoch().unwrap_or(-1);
    if producer_epoch < -1 {
        return Err(field_error(
            T,
            "producer_epoch",
            format!("invalid epoch {producer_epoch}"),
        ));
    }
    Ok(ProducerTransaction {
        transactional_id: required(T, "transactional_id", view.transactional_id())?.to_string(),
        producer_id: view.producer_id().unwrap_or(-1),
        producer_epoch,
        last_producer_id: view.last_producer_id().unwrap_or(-1),
        last_producer_epoch: view.last_producer_epoch().unwrap_or(-1),
        timeout_ms: view.timeout_ms().unwrap_or(0),
        state,
        partitions,
        groups: view
            .groups()
            .map(|v| v.iter().map(str::to_string).collect())
            .unwrap_or_default(),
        start_time_ms: view.start_time_ms().unwrap_or(-1),
        update_time_ms: view.update_time_ms().unwrap_or(0),
        two_phase: view.two_phase().unwrap_or(false),
    })
}

fn decode_snapshot_begin(view: SnapshotBeginFb<'_>) -> Result<SnapshotBegin, EntryError> {
    const T: &str = "SnapshotBegin";
    check_version(T, view.version(), SnapshotBeginFb::SCHEMA.version_current)?;
    let begin = SnapshotBegin {
        chunk_count: view.chunk_count().unwrap_or(0),
        total_bytes: view.total_bytes().unwrap_or(0),
    };
    check_snapshot_sizes(T, begin.chunk_count, begin.total_bytes)?;
    Ok(begin)
}

fn check_snapshot_sizes(
    table: &'static str,
    chunk_count: u32,
    total_bytes: u64,
) -> Result<(), EntryError> {
    if chunk_count == 0 || total_bytes < u64::from(chunk_count) {
        return Err(field_error(
            table,
            "chunk_count",
            format!("{chunk_count} chunks cannot hold {total_bytes} bytes (each holds >= 1)"),
        ));
    }
    if total_bytes > JOURNAL_SNAPSHOT_BYTES_MAX {
        return Err(field_error(
            table,
            "total_bytes",
            format!("{total_bytes} above the maximum {JOURNAL_SNAPSHOT_BYTES_MAX}"),
        ));
    }
    Ok(())
}

fn decode_snapshot_chunk(view: SnapshotChunkFb<'_>) -> Result<SnapshotChunk, EntryError> {
    const T: &str = "SnapshotChunk";
    check_version(T, view.version(), SnapshotChunkFb::SCHEMA.version_current)?;
    let data = required(T, "data", view.data())?.bytes().to_vec();
    if data.is_empty() {
        return Err(field_error(T, "data", "empty chunk"));
    }
    Ok(SnapshotChunk {
        snapshot_seq: view.snapshot_seq().unwrap_or(0),
        index: view.index().unwrap_or(0),
        data,
    })
}

fn decode_snapshot_end(view: SnapshotEndFb<'_>) -> Result<SnapshotEnd, EntryError> {
    const T: &str = "SnapshotEnd";
    check_version(T, view.version(), SnapshotEndFb::SCHEMA.version_current)?;
    let end = SnapshotEnd {
        snapshot_seq: view.snapshot_seq().unwrap_or(0),
        chunk_count: view.chunk_count().unwrap_or(0),
        total_bytes: view.total_bytes().unwrap_or(0),
        crc32: view.crc32().unwrap_or(0),
    };
    check_snapshot_sizes(T, end.chunk_count, end.total_bytes)?;
    Ok(end)
}

fn decode_shard_snapshot(view: ShardSnapshotFb<'_>) -> Result<ShardSnapshot, EntryError> {
    const T: &str = "ShardSnapshot";
    check_version(T, view.version(), ShardSnapshotFb::SCHEMA.version_current)?;
    let mut snapshot = ShardSnapshot::default();
    if let Some(vector) = view.share_partitions() {
        snapshot.share_partitions.reserve(vector.len());
        for partition in vector.iter() {
            snapshot
                .share_partitions
                .push(decode_share_partition("SharePartitionSnapshot", partition)?);
        }
    }
    if let Some(vector) = view.transactions() {
        snapshot.transactions.reserve(vector.len());
        for record in vector.iter() {
            snapshot
                .transactions
                .push(decode_transaction_record(record)?);
        }
    }
    if let Some(vector) = view.transaction_locks() {
        snapshot.transaction_locks.reserve(vector.len());
        for locks in vector.iter() {
            snapshot
                .transaction_locks
                .push(decode_transaction_locks(locks)?);
        }
    }
    if let Some(vector) = view.group_offsets() {
        snapshot.group_offsets.reserve(vector.len());
        for offset in vector.iter() {
            snapshot.group_offsets.push(decode_group_offset(offset)?);
        }
    }
    if let Some(vector) = view.producer_transactions() {
        snapshot.producer_transactions.reserve(vector.len());
        for txn in vector.iter() {
            snapshot
                .producer_transactions
                .push(decode_producer_transaction(txn)?);
        }
    }
    Ok(snapshot)
}

// ---- encoding -------------------------------------------------------------------------------

type Finished = WIPOffset<TableFinishedWIPOffset>;

fn build_share_partition(fbb: &mut FlatBufferBuilder<'_>, state: &SharePartitionState) -> Finished {
    use partition_slots as s;
    let group_id = fbb.create_string(&state.group_id);
    let runs: Vec<StateRunFb> = state
        .runs
        .iter()
        .map(|r| {
            assert!(
                0 <= r.first_offset && r.first_offset <= r.last_offset,
                "invalid run {r:?}"
            );
            StateRunFb(range_bytes(
                r.first_offset,
                r.last_offset,
                r.state.code(),
                r.delivery_count,
            ))
        })
        .collect();
    let runs = fbb.create_vector(&runs);
    assert!(state.partition >= 0, "negative partition");
    let table = fbb.start_table();
    fbb.push_slot::<i64>(s::start_offset, offset_or_unset(state.start_offset), -1);
    fbb.push_slot::<i64>(s::end_offset, offset_or_unset(state.end_offset), -1);
    fbb.push_slot_always(s::group_id, group_id);
    fbb.push_slot_always(s::runs, runs);
    fbb.push_slot_always::<&UuidFb>(s::topic_id, &UuidFb(state.topic_id));
    fbb.push_slot::<i32>(s::partition, state.partition, 0);
    fbb.push_slot::<i32>(s::state_epoch, state.state_epoch, 0);
    fbb.push_slot::<u16>(s::version, SharePartitionFb::SCHEMA.version_current, 0);
    let table = fbb.end_table(table);
    fbb.required(table, s::group_id, "group_id");
    fbb.required(table, s::topic_id, "topic_id");
    table
}

fn offset_or_unset(offset: Option<i64>) -> i64 {
    match offset {
        None => -1,
        Some(v) => {
            assert!(v >= 0, "negative offset {v}");
            v
        }
    }
}

fn build_transaction_record(
    fbb: &mut FlatBufferBuilder<'_>,
    record: &TransactionRecord,
) -> Finished {
    use txn_slots as s;
    let transaction_id = fbb.create_string(&record.transaction_id);
    let group_id = fbb.create_string(&record.group_id);
    let participants: Vec<ParticipantFb> = record
        .participants
        .iter()
        .map(|p| {
            assert!(
                p.partition >= 0 && p.locked_records >= 0,
                "invalid participant {p:?}"
            );
            let mut b = [0u8; 32];
            b[PARTICIPANT_TOPIC_AT..PARTICIPANT_TOPIC_AT + 16].copy_from_slice(&p.topic_id);
            b[PARTICIPANT_PARTITION_AT..PARTICIPANT_PARTITION_AT + 4]
                .copy_from_slice(&p.partition.to_le_bytes());
            b[PARTICIPANT_LOCKED_AT..PARTICIPANT_LOCKED_AT + 8]
                .copy_from_slice(&p.locked_records.to_le_bytes());
            ParticipantFb(b)
        })
        .collect();
    let participants = fbb.create_vector(&participants);
    let table = fbb.start_table();
    fbb.push_slot::<i64>(s::timeout_ms, record.timeout_ms, 0);
    fbb.push_slot::<i64>(s::create_time_ms, record.create_time_ms, 0);
    fbb.push_slot::<i64>(s::prepare_time_ms, record.prepare_time_ms, -1);
    fbb.push_slot::<i64>(s::decision_time_ms, record.decision_time_ms, -1);
    fbb.push_slot_always(s::transaction_id, transaction_id);
    fbb.push_slot_always(s::group_id, group_id);
    fbb.push_slot_always(s::participants, participants);
    fbb.push_slot::<u16>(s::version, TransactionRecordFb::SCHEMA.version_current, 0);
    fbb.push_slot::<u8>(s::state, record.state.code(), 0);
    let table = fbb.end_table(table);
    fbb.required(table, s::transaction_id, "transaction_id");
    fbb.required(table, s::group_id, "group_id");
    table
}

fn build_transaction_locks(fbb: &mut FlatBufferBuilder<'_>, locks: &TransactionLocks) -> Finished {
    use locks_slots as s;
    let transaction_id = fbb.create_string(&locks.transaction_id);
    let group_id = fbb.create_string(&locks.group_id);
    let ranges: Vec<LockedRangeFb> = locks
        .ranges
        .iter()
        .map(|r| {
            assert!(
                0 <= r.first_offset && r.first_offset <= r.last_offset,
                "invalid range {r:?}"
            );
            LockedRangeFb(range_bytes(
                r.first_offset,
                r.last_offset,
                r.outcome.code(),
                r.delivery_count,
            ))
        })
        .collect();
    let ranges = fbb.create_vector(&ranges);
    assert!(locks.partition >= 0, "negative partition");
    let table = fbb.start_table();
    fbb.push_slot_always(s::transaction_id, transaction_id);
    fbb.push_slot_always(s::group_id, group_id);
    fbb.push_slot_always(s::ranges, ranges);
    fbb.push_slot_always::<&UuidFb>(s::topic_id, &UuidFb(locks.topic_id));
    fbb.push_slot::<i32>(s::partition, locks.partition, 0);
    fbb.push_slot::<u16>(s::version, TransactionLocksFb::SCHEMA.version_current, 0);
    let table = fbb.end_table(table);
    fbb.required(table, s::transaction_id, "transaction_id");
    fbb.required(table, s::group_id, "group_id");
    fbb.required(table, s::topic_id, "topic_id");
    table
}

fn build_group_offset(fbb: &mut FlatBufferBuilder<'_>, commit: &GroupOffsetCommit) -> Finished {
    use offset_slots as s;
    assert!(commit.partition >= 0, "negative partition");
    assert!(commit.leader_epoch >= -1, "invalid leader epoch");
    let group_id = fbb.create_string(&commit.group_id);
    let topic = fbb.create_string(&commit.topic);
    let metadata = fbb.create_string(&commit.metadata);
    let table = fbb.start_table();
    fbb.push_slot::<i64>(s::offset, offset_or_unset(commit.offset), -1);
    fbb.push_slot::<i64>(s::commit_timestamp_ms, commit.commit_timestamp_ms, 0);
    fbb.push_slot::<i64>(s::expire_timestamp_ms, commit.expire_timestamp_ms, -1);
    fbb.push_slot::<i64>(s::producer_id, commit.producer_id, -1);
    fbb.push_slot_always(s::group_id, group_id);
    fbb.push_slot_always(s::topic, topic);
    fbb.push_slot_always(s::metadata, metadata);
    fbb.push_slot::<i32>(s::partition, commit.partition, 0);
    fbb.push_slot::<i32>(s::leader_epoch, commit.leader_epoch, -1);
    fbb.push_slot::<u16>(s::version, GroupOffsetCommitFb::SCHEMA.version_current, 0);
    let table = fbb.end_table(table);
    fbb.required(table, s::group_id, "group_id");
    fbb.required(table, s::topic, "topic");
    table
}

fn build_producer_transaction(
    fbb: &mut FlatBufferBuilder<'_>,
    txn: &ProducerTransaction,
) -> Finished {
    use ptxn_slots as s;
    assert!(
        txn.state <= 7,
        "unknown producer transaction state {}",
        txn.state
    );
    assert!(
        txn.partitions.iter().all(|(_, p)| *p >= 0),
        "negative partition"
    );
    let id = fbb.create_string(&txn.transactional_id);
    let topics: Vec<_> = txn
        .partitions
        .iter()
        .map(|(t, _)| fbb.create_string(t))
        .collect();
    let topics = fbb.create_vector(&topics);
    let indexes: Vec<i32> = txn.partitions.iter().map(|(_, p)| *p).collect();
    let indexes = fbb.create_vector(&indexes);
    let groups: Vec<_> = txn.groups.iter().map(|g| fbb.create_string(g)).collect();
    let groups = fbb.create_vector(&groups);
    let table = fbb.start_table();
    fbb.push_slot::<i64>(s::producer_id, txn.producer_id, -1);
    fbb.push_slot::<i64>(s::last_producer_id, txn.last_producer_id, -1);
    fbb.push_slot::<i64>(s::start_time_ms, txn.start_time_ms, -1);
    fbb.push_slot::<i64>(s::update_time_ms, txn.update_time_ms, 0);
    fbb.push_slot_always(s::transactional_id, id);
    fbb.push_slot_always(s::partition_topics, topics);
    fbb.push_slot_always(s::partition_indexes, indexes);
    fbb.push_slot_always(s::groups, groups);
    fbb.push_slot::<i32>(s::timeout_ms, txn.timeout_ms, 0);
    fbb.push_slot::<i16>(s::producer_epoch, txn.producer_epoch, -1);
    fbb.push_slot::<i16>(s::last_producer_epoch, txn.last_producer_epoch, -1);
    fbb.push_slot::<u16>(s::version, ProducerTransactionFb::SCHEMA.version_current, 0);
    fbb.push_slot::<u8>(s::state, txn.state, 0);
    fbb.push_slot::<bool>(s::two_phase, txn.two_phase, false);
    let table = fbb.end_table(table);
    fbb.required(table, s::transactional_id, "transactional_id");
    table
}

fn build_snapshot_begin(fbb: &mut FlatBufferBuilder<'_>, begin: &SnapshotBegin) -> Finished {
    use begin_slots as s;
    let table = fbb.start_table();
    fbb.push_slot::<u64>(s::total_bytes, begin.total_bytes, 0);
    fbb.push_slot::<u32>(s::chunk_count, begin.chunk_count, 0);
    fbb.push_slot::<u16>(s::version, SnapshotBeginFb::SCHEMA.version_current, 0);
    fbb.end_table(table)
}

fn build_snapshot_chunk(
    fbb: &mut FlatBufferBuilder<'_>,
    snapshot_seq: u64,
    index: u32,
    data: &[u8],
) -> Finished {
    use chunk_slots as s;
    assert!(!data.is_empty(), "empty snapshot chunk");
    let data = fbb.create_vector(data);
    let table = fbb.start_table();
    fbb.push_slot::<u64>(s::snapshot_seq, snapshot_seq, 0);
    fbb.push_slot_always(s::data, data);
    fbb.push_slot::<u32>(s::index, index, 0);
    fbb.push_slot::<u16>(s::version, SnapshotChunkFb::SCHEMA.version_current, 0);
    let table = fbb.end_table(table);
    fbb.required(table, s::data, "data");
    table
}

/// Encodes a `SnapshotChunk` entry straight from a slice of the payload (no copy into a
/// [`SnapshotChunk`] first) into `fbb` (reset first).
pub fn encode_snapshot_chunk<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    snapshot_seq: u64,
    index: u32,
    data: &[u8],
) -> &'b [u8] {
    fbb.reset();
    let root = build_snapshot_chunk(fbb, snapshot_seq, index, data);
    fbb.finish_minimal(root);
    fbb.finished_data()
}

fn build_snapshot_end(fbb: &mut FlatBufferBuilder<'_>, end: &SnapshotEnd) -> Finished {
    use end_slots as s;
    let table = fbb.start_table();
    fbb.push_slot::<u64>(s::snapshot_seq, end.snapshot_seq, 0);
    fbb.push_slot::<u64>(s::total_bytes, end.total_bytes, 0);
    fbb.push_slot::<u32>(s::chunk_count, end.chunk_count, 0);
    fbb.push_slot::<u32>(s::crc32, end.crc32, 0);
    fbb.push_slot::<u16>(s::version, SnapshotEndFb::SCHEMA.version_current, 0);
    fbb.end_table(table)
}

fn build_shard_snapshot(fbb: &mut FlatBufferBuilder<'_>, snapshot: &ShardSnapshot) -> Finished {
    use shard_slots as s;
    let partitions: Vec<Finished> = snapshot
        .share_partitions
        .iter()
        .map(|p| build_share_partition(fbb, p))
        .collect();
    let partitions = fbb.create_vector(&partitions);
    let transactions: Vec<Finished> = snapshot
        .transactions
        .iter()
        .map(|t| build_transaction_record(fbb, t))
        .collect();
    let transactions = fbb.create_vector(&transactions);
    let locks: Vec<Finished> = snapshot
        .transaction_locks
        .iter()
        .map(|l| build_transaction_locks(fbb, l))
        .collect();
    let locks = fbb.create_vector(&locks);
    let offsets: Vec<Finished> = snapshot
        .group_offsets
        .iter()
        .map(|o| build_group_offset(fbb, o))
        .collect();
    let offsets = fbb.create_vector(&offsets);
    let ptxns: Vec<Finished> = snapshot
        .producer_transactions
        .iter()
        .map(|t| build_producer_transaction(fbb, t))
        .collect();
    let ptxns = fbb.create_vector(&ptxns);
    let table = fbb.start_table();
    fbb.push_slot_always(s::share_partitions, partitions);
    fbb.push_slot_always(s::transactions, transactions);
    fbb.push_slot_always(s::transaction_locks, locks);
    fbb.push_slot_always(s::group_offsets, offsets);
    fbb.push_slot_always(s::producer_transactions, ptxns);
    fbb.push_slot::<u16>(s::version, ShardSnapshotFb::SCHEMA.version_current, 0);
    fbb.end_table(table)
}

// ---- public codec ---------------------------------------------------------------------------

impl Entry {
    pub fn kind(&self) -> EntryKind {
        match self {
            Entry::SnapshotBegin(_) => EntryKind::SnapshotBegin,
            Entry::SnapshotChunk(_) => EntryKind::SnapshotChunk,
            Entry::SnapshotEnd(_) => EntryKind::SnapshotEnd,
            Entry::SharePartitionSnapshot(_) => EntryKind::SharePartitionSnapshot,
            Entry::SharePartitionUpdate(_) => EntryKind::SharePartitionUpdate,
            Entry::TransactionRecord(_) => EntryKind::TransactionRecord,
            Entry::TransactionLocks(_) => EntryKind::TransactionLocks,
            Entry::GroupOffsetCommit(_) => EntryKind::GroupOffsetCommit,
            Entry::ProducerTransaction(_) => EntryKind::ProducerTransaction,
        }
    }

    /// Encodes the entry into `fbb` (reset first) and returns the finished buffer.
    /// Panics on values the types do not allow (negative partitions, `first > last`): the
    /// caller's bug, never input-derived (decoded entries are validated).
    pub fn encode_into<'b>(&self, fbb: &'b mut FlatBufferBuilder<'_>) -> &'b [u8] {
        fbb.reset();
        let root = match self {
            Entry::SnapshotBegin(b) => build_snapshot_begin(fbb, b),
            Entry::SnapshotChunk(c) => build_snapshot_chunk(fbb, c.snapshot_seq, c.index, &c.data),
            Entry::SnapshotEnd(e) => build_snapshot_end(fbb, e),
            Entry::SharePartitionSnapshot(p) | Entry::SharePartitionUpdate(p) => {
                build_share_partition(fbb, p)
            }
            Entry::TransactionRecord(t) => build_transaction_record(fbb, t),
            Entry::TransactionLocks(l) => build_transaction_locks(fbb, l),
            Entry::GroupOffsetCommit(o) => build_group_offset(fbb, o),
            Entry::ProducerTransaction(t) => build_producer_transaction(fbb, t),
        };
        fbb.finish_minimal(root);
        fbb.finished_data()
    }

    pub fn encode(&self) -> Vec<u8> {
        self.encode_into(&mut FlatBufferBuilder::new()).to_vec()
    }

    /// Verifies and decodes a payload of the given kind.
    pub fn decode(kind: EntryKind, payload: &[u8]) -> Result<Entry, EntryError> {
        let table = kind.name();
        Ok(match kind {
            EntryKind::SnapshotBegin => {
                Entry::SnapshotBegin(decode_snapshot_begin(verified_root(table, payload)?)?)
            }
            EntryKind::SnapshotChunk => {
                Entry::SnapshotChunk(decode_snapshot_chunk(verified_root(table, payload)?)?)
            }
            EntryKind::SnapshotEnd => {
                Entry::SnapshotEnd(decode_snapshot_end(verified_root(table, payload)?)?)
            }
            EntryKind::SharePartitionSnapshot => Entry::SharePartitionSnapshot(
                decode_share_partition(table, verified_root(table, payload)?)?,
            ),
            EntryKind::SharePartitionUpdate => Entry::SharePartitionUpdate(decode_share_partition(
                table,
                verified_root(table, payload)?,
            )?),
            EntryKind::TransactionRecord => {
                Entry::TransactionRecord(decode_transaction_record(verified_root(table, payload)?)?)
            }
            EntryKind::TransactionLocks => {
                Entry::TransactionLocks(decode_transaction_locks(verified_root(table, payload)?)?)
            }
            EntryKind::GroupOffsetCommit => {
                Entry::GroupOffsetCommit(decode_group_offset(verified_root(table, payload)?)?)
            }
            EntryKind::ProducerTransaction => Entry::ProducerTransaction(
                decode_producer_transaction(verified_root(table, payload)?)?,
            ),
        })
    }

    /// Decodes a payload whose kind is a raw frame kind.
    pub fn decode_raw(kind: u16, payload: &[u8]) -> Result<Entry, EntryError> {
        let kind = EntryKind::from_code(kind).ok_or(EntryError::UnknownKind { kind })?;
        Entry::decode(kind, payload)
    }

    /// The entry as JSON (for the inspect tool): a `type` field plus the table's fields;
    /// topic ids as Kafka prints them, snapshot chunk data as its length.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("entries serialize to JSON")
    }
}

impl ShardSnapshot {
    /// Encodes the snapshot payload (a `ShardSnapshot` root) into `fbb` (reset first).
    pub fn encode_into<'b>(&self, fbb: &'b mut FlatBufferBuilder<'_>) -> &'b [u8] {
        fbb.reset();
        let root = build_shard_snapshot(fbb, self);
        fbb.finish_minimal(root);
        fbb.finished_data()
    }

    pub fn encode(&self) -> Vec<u8> {
        self.encode_into(&mut FlatBufferBuilder::new()).to_vec()
    }

    pub fn decode(payload: &[u8]) -> Result<ShardSnapshot, EntryError> {
        decode_shard_snapshot(verified_root("ShardSnapshot", payload)?)
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("snapshots serialize to JSON")
    }
}

#[cfg(test)]
mod tests;
