//! Typed shard calls: every operation names its own reply type ([`Op`]), so a caller
//! gets `Result<Op::Reply, CallError>` and never matches the transport's reply enum.
//!
//! [`ShardOp`] and [`ShardReply`] stay the transport (one message type crosses the mesh); an
//! [`Op`] knows its variant on the way out ([`Op::into_op`]) and on the way back
//! ([`Op::from_reply`]). [`typed`] turns a transport reply into the op's reply: a `Failed`
//! reply is its [`CallError`], a reply of another kind (a bug) is logged and becomes
//! [`CallError::UnexpectedReply`]. `Bus::call_op` (handlers) and `ShardIo::call_op` (the shard
//! core) make the call.
//!
//! Ops whose transport variant is a struct implement [`Op`] themselves (`ProduceOp`, `FetchOp`,
//! ...); for the others this module has a struct per operation with the variant's fields
//! (`DeleteShareGroup`, `CreateTopics`, ...). Each consumer-group op is a struct of
//! `crate::group::ops` (`JoinGroup`, `CommitOffsets`, ...) with its own reply. The share- and
//! producer-transaction families have one generic op per family, typed by its reply ([`Txn`],
//! [`Ptxn`]): a family op whose variant does not answer with that reply fails with
//! `UnexpectedReply`.

use crate::group::classic::{JoinAnswer, JoinStep, SyncAnswer, SyncStep};
use crate::group::kip848::{HeartbeatError, HeartbeatOut};
use crate::group::ops::{self as g, GroupDescription, GroupOp, GroupReply};
use crate::group::{ConsumerMembership, FetchedOffset, GroupError, ItemResult, ListedGroup};
use crate::producer_txn::coordinator::{CoordError, InitAnswer, TxnMetadata};
use crate::producer_txn::TxnMarker;
use crate::security::authz::{AclBinding, AclFilter};
use crate::shard::ops::{
    AdminError, AdminOp, AdminReply, AlterResource, AlterResult, CallError, ControllerError,
    CreateResult, DeleteResult, DeletedRecords, FetchOp, FetchedPartition, GrowResult,
    ListOffsetsError, ListOffsetsOp, ListedOffset, MarkerError, NewPartitions, NewTopic,
    PartitionError, PartitionRef, ProduceOp, ProduceResult, PtxnOp, PtxnReply, ShardOp, ShardReply,
    ShareAckOp, ShareAckResult, ShareFetchOp, ShareFetchReply, ShareGroupsListed, ShareOffset,
    ShareSessionOp, TopicRef, TxnAckError, TxnAnswer, TxnOp, TxnReplyMsg, WaitOp,
};
use crate::shard::producer_state::ProducerSnapshot;
use crate::shard::share_group::{GroupDeletion, Heartbeat, HeartbeatAnswer, ShareGroup};
use crate::shard::share_session::{SessionError, SessionOutcome};
use crate::share_txn::TxnRecord;
use std::marker::PhantomData;
use uuid::Uuid;

/// An operation with a reply type of its own.
pub trait Op {
    /// What the operation answers.
    type Reply;
    /// The operation's name, for logs.
    const NAME: &'static str;
    /// The transport message.
    fn into_op(self) -> ShardOp;
    /// The operation's reply out of the transport's; `Err` gives back a reply of another kind.
    fn from_reply(reply: ShardReply) -> Result<Self::Reply, ShardReply>;
}

/// `reply` as `O`'s reply, or why there is none.
pub fn typed<O: Op>(reply: ShardReply) -> Result<O::Reply, CallError> {
    match reply {
        ShardReply::Failed(failure) => Err(failure),
        reply => O::from_reply(reply).map_err(|other| {
            tracing::error!(op = O::NAME, reply = ?other, "a shard answered with a reply of another kind");
            CallError::UnexpectedReply(format!("{} answered with {other:?}", O::NAME))
        }),
    }
}

/// Implements [`Op`]: `op!(Type, "name", Reply, |op| transport, pattern => reply)`.
macro_rules! op {
    ($ty:ty, $name:literal, $reply:ty, |$op:ident| $into:expr, $pat:pat => $out:expr) => {
        impl Op for $ty {
            type Reply = $reply;
            const NAME: &'static str = $name;
            fn into_op(self) -> ShardOp {
                let $op = self;
                $into
            }
            fn from_reply(reply: ShardReply) -> Result<$reply, ShardReply> {
                match reply {
                    $pat => Ok($out),
                    other => Err(other),
                }
            }
        }
    };
}

op!(ProduceOp, "produce", ProduceResult, |op| ShardOp::Produce(op), ShardReply::Produce(r) => r);
op!(FetchOp, "fetch", Vec<FetchedPartition>, |op| ShardOp::Fetch(op), ShardReply::Fetch(r) => r);
op!(ListOffsetsOp, "list offsets", Vec<Result<ListedOffset, ListOffsetsError>>, |op| ShardOp::ListOffsets(op),
    ShardReply::ListOffsets(r) => r);
// `true`: data arrived; `false`: the deadline passed.
op!(WaitOp, "wait for data", bool, |op| ShardOp::WaitForData(op), ShardReply::Waited(r) => r);
op!(Heartbeat, "share heartbeat", HeartbeatAnswer, |op| ShardOp::ShareHeartbeat(op),
    ShardReply::ShareHeartbeat(r) => r);
op!(ShareSessionOp, "share session", Result<SessionOutcome, SessionError>, |op| ShardOp::ShareSession(op),
    ShardReply::ShareSession(r) => r);
op!(ShareFetchOp, "share fetch", ShareFetchReply, |op| ShardOp::ShareFetch(op),
    ShardReply::ShareFetched(r) => r);
/// Wait until a shard's state journal is durable through an entry
/// ([`ShareFetchReply::durable_at`](crate::shard::ops::ShareFetchReply)).
#[derive(Clone, Copy, Debug)]
pub struct JournalDurable {
    pub seq: u64,
}
op!(JournalDurable, "journal durable", Result<(), String>,
    |op| ShardOp::JournalDurable { seq: op.seq },
    ShardReply::JournalDurable(r) => r);
op!(ShareAckOp, "share acknowledge", Vec<ShareAckResult>, |op| ShardOp::ShareAcknowledge(op),
    ShardReply::ShareAcknowledged(r) => r);

/// Release what a member holds on a shard; answers how many records were released.
#[derive(Clone, Debug)]
pub struct ReleaseMember {
    pub group_id: String,
    pub member_id: String,
}
op!(ReleaseMember, "share release member", u64,
    |op| ShardOp::ShareReleaseMember { group_id: op.group_id, member_id: op.member_id },
    ShardReply::ShareReleased(r) => r);

/// A share consumer's connection dropped (`ShardOp::ShareDisconnected`).
#[derive(Clone, Debug)]
pub struct Disconnected {
    pub group_id: String,
    pub member_id: String,
    pub conn_id: u64,
}
op!(Disconnected, "share disconnected", (),
    |op| ShardOp::ShareDisconnected {
        group_id: op.group_id,
        member_id: op.member_id,
        conn_id: op.conn_id,
    },
    ShardReply::ShareReleased(_) => ());

/// The share groups a shard knows (`ShardOp::ShareListGroups`).
#[derive(Clone, Copy, Debug)]
pub struct ListShareGroups;
op!(ListShareGroups, "share list groups", ShareGroupsListed, |_op| ShardOp::ShareListGroups,
    ShardReply::ShareGroupsListed(r) => r);

/// A share group's membership, if its shard knows it (`ShardOp::ShareDescribeGroup`).
#[derive(Clone, Debug)]
pub struct DescribeShareGroup {
    pub group_id: String,
}
op!(DescribeShareGroup, "share describe group", Option<ShareGroup>,
    |op| ShardOp::ShareDescribeGroup { group_id: op.group_id },
    ShardReply::ShareGroupDescribed(r) => r);

/// Share-partition start offsets (`ShardOp::ShareOffsets`).
#[derive(Clone, Debug)]
pub struct GetShareOffsets {
    pub group_id: String,
    pub partitions: Option<Vec<PartitionRef>>,
}
op!(GetShareOffsets, "share offsets", Vec<ShareOffset>,
    |op| ShardOp::ShareOffsets { group_id: op.group_id, partitions: op.partitions },
    ShardReply::ShareOffsets(r) => r);

/// AlterShareGroupOffsets on one shard (`ShardOp::ShareAlterOffsets`).
#[derive(Clone, Debug)]
pub struct AlterShareOffsets {
    pub group_id: String,
    pub partitions: Vec<(PartitionRef, i64)>,
}
op!(AlterShareOffsets, "share alter offsets", Vec<ShareAckResult>,
    |op| ShardOp::ShareAlterOffsets { group_id: op.group_id, partitions: op.partitions },
    ShardReply::ShareOffsetsAltered(r) => r);

/// DeleteShareGroupOffsets on one shard (`ShardOp::ShareDeleteOffsets`).
#[derive(Clone, Debug)]
pub struct DeleteShareOffsets {
    pub group_id: String,
    pub topic_ids: Vec<Uuid>,
}
op!(DeleteShareOffsets, "share delete offsets", Vec<ShareAckResult>,
    |op| ShardOp::ShareDeleteOffsets { group_id: op.group_id, topic_ids: op.topic_ids },
    ShardReply::ShareOffsetsDeleted(r) => r);

/// DeleteGroups of a share group on its shard (`ShardOp::ShareDeleteGroup`).
#[derive(Clone, Debug)]
pub struct DeleteShareGroup {
    pub group_id: String,
}
op!(DeleteShareGroup, "share delete group", GroupDeletion,
    |op| ShardOp::ShareDeleteGroup { group_id: op.group_id },
    ShardReply::ShareGroupDeleted(r) => r);

/// DescribeProducers on one shard (`ShardOp::DescribeProducers`).
#[derive(Clone, Debug)]
pub struct DescribeProducers(pub Vec<PartitionRef>);
op!(DescribeProducers, "describe producers", Vec<Result<Vec<ProducerSnapshot>, PartitionError>>,
    |op| ShardOp::DescribeProducers(op.0),
    ShardReply::Producers(r) => r);

/// DeleteRecords on one shard (`ShardOp::DeleteRecords`).
#[derive(Clone, Debug)]
pub struct DeleteRecords {
    pub partitions: Vec<(PartitionRef, i64)>,
    pub timeout_ms: u64,
}
op!(DeleteRecords, "delete records", Vec<DeletedRecords>,
    |op| ShardOp::DeleteRecords { partitions: op.partitions, timeout_ms: op.timeout_ms },
    ShardReply::RecordsDeleted(r) => r);

/// WriteTxnMarkers on one shard (`ShardOp::WriteTxnMarkers`).
#[derive(Clone, Debug)]
pub struct WriteTxnMarkers {
    pub marker: TxnMarker,
    pub partitions: Vec<PartitionRef>,
}
op!(WriteTxnMarkers, "write txn markers", Vec<Result<(), MarkerError>>,
    |op| ShardOp::WriteTxnMarkers { marker: op.marker, partitions: op.partitions },
    ShardReply::TxnMarkersWritten(r) => r);

/// A producer transaction's end in a consumer group (`ShardOp::GroupTxnMarker`).
#[derive(Clone, Debug)]
pub struct GroupTxnMarker {
    pub marker: TxnMarker,
    pub group_id: String,
}
op!(GroupTxnMarker, "group txn marker", Result<(), MarkerError>,
    |op| ShardOp::GroupTxnMarker { marker: op.marker, group_id: op.group_id },
    ShardReply::GroupTxnMarkerWritten(r) => r);

// The metadata controller's operations (shard 0), one per `AdminOp` variant.

/// CreateTopics.
#[derive(Clone, Debug)]
pub struct CreateTopics {
    pub topics: Vec<NewTopic>,
    pub validate_only: bool,
}
op!(CreateTopics, "create topics", Vec<CreateResult>,
    |op| ShardOp::Admin(AdminOp::CreateTopics { topics: op.topics, validate_only: op.validate_only }),
    ShardReply::Admin(AdminReply::Created(r)) => r);

/// DeleteTopics.
#[derive(Clone, Debug)]
pub struct DeleteTopics {
    pub topics: Vec<TopicRef>,
}
op!(DeleteTopics, "delete topics", Vec<DeleteResult>,
    |op| ShardOp::Admin(AdminOp::DeleteTopics { topics: op.topics }),
    ShardReply::Admin(AdminReply::Deleted(r)) => r);

/// IncrementalAlterConfigs.
#[derive(Clone, Debug)]
pub struct AlterConfigs {
    pub resources: Vec<AlterResource>,
    pub validate_only: bool,
}
op!(AlterConfigs, "alter configs", Vec<AlterResult>,
    |op| ShardOp::Admin(AdminOp::AlterConfigs {
        resources: op.resources,
        validate_only: op.validate_only,
    }),
    ShardReply::Admin(AdminReply::Altered(r)) => r);

/// A fresh producer id.
#[derive(Clone, Copy, Debug)]
pub struct AllocateProducerId;
op!(AllocateProducerId, "allocate producer id", Result<i64, ControllerError>,
    |_op| ShardOp::Admin(AdminOp::AllocateProducerId),
    ShardReply::Admin(AdminReply::ProducerId(r)) => r);

/// CreatePartitions.
#[derive(Clone, Debug)]
pub struct CreatePartitions {
    pub topics: Vec<NewPartitions>,
    pub validate_only: bool,
}
op!(CreatePartitions, "create partitions", Vec<GrowResult>,
    |op| ShardOp::Admin(AdminOp::CreatePartitions {
        topics: op.topics,
        validate_only: op.validate_only,
    }),
    ShardReply::Admin(AdminReply::Grown(r)) => r);

/// CreateAcls (validated at the edge).
#[derive(Clone, Debug)]
pub struct CreateAcls(pub Vec<AclBinding>);
op!(CreateAcls, "create acls", Vec<Result<(), (AdminError, String)>>,
    |op| ShardOp::Admin(AdminOp::CreateAcls(op.0)),
    ShardReply::Admin(AdminReply::AclsCreated(r)) => r);

/// DeleteAcls.
#[derive(Clone, Debug)]
pub struct DeleteAcls(pub Vec<AclFilter>);
op!(DeleteAcls, "delete acls", Vec<Result<Vec<AclBinding>, (AdminError, String)>>,
    |op| ShardOp::Admin(AdminOp::DeleteAcls(op.0)),
    ShardReply::Admin(AdminReply::AclsDeleted(r)) => r);

/// A share-transaction op answered with `R` (one of the [`TxnReplyMsg`] payloads): `Txn::new`
/// infers `R` from how the reply is used.
#[derive(Clone, Debug)]
pub struct Txn<R> {
    pub op: TxnOp,
    reply: PhantomData<fn() -> R>,
}

impl<R> Txn<R> {
    pub fn new(op: TxnOp) -> Txn<R> {
        Txn {
            op,
            reply: PhantomData,
        }
    }
}

op!(Txn<TxnAnswer>, "share transaction", TxnAnswer, |op| ShardOp::Txn(op.op),
    ShardReply::Txn(TxnReplyMsg::Answer(r)) => r);
op!(Txn<Vec<Result<(), TxnAckError>>>, "share transaction acknowledge",
    Vec<Result<(), TxnAckError>>, |op| ShardOp::Txn(op.op),
    ShardReply::Txn(TxnReplyMsg::Acknowledged(r)) => r);
op!(Txn<Vec<Result<u64, ShareAckResult>>>, "share transaction lock",
    Vec<Result<u64, ShareAckResult>>, |op| ShardOp::Txn(op.op),
    ShardReply::Txn(TxnReplyMsg::Locked(r)) => r);
op!(Txn<Vec<TxnRecord>>, "share transaction list", Vec<TxnRecord>, |op| ShardOp::Txn(op.op),
    ShardReply::Txn(TxnReplyMsg::Listed(r)) => r);
op!(Txn<Result<(), String>>, "share transaction step", Result<(), String>,
    |op| ShardOp::Txn(op.op),
    ShardReply::Txn(TxnReplyMsg::Done(r)) => r);

/// A producer-transaction coordinator op answered with `R` (a [`PtxnReply`] payload).
#[derive(Clone, Debug)]
pub struct Ptxn<R> {
    pub op: PtxnOp,
    reply: PhantomData<fn() -> R>,
}

impl<R> Ptxn<R> {
    pub fn new(op: PtxnOp) -> Ptxn<R> {
        Ptxn {
            op,
            reply: PhantomData,
        }
    }
}

op!(Ptxn<Result<InitAnswer, CoordError>>, "producer transaction init",
    Result<InitAnswer, CoordError>, |op| ShardOp::ProducerTxn(op.op),
    ShardReply::ProducerTxn(PtxnReply::Init(r)) => r);
op!(Ptxn<Result<(), CoordError>>, "producer transaction", Result<(), CoordError>,
    |op| ShardOp::ProducerTxn(op.op),
    ShardReply::ProducerTxn(PtxnReply::Done(r)) => r);
op!(Ptxn<Result<Vec<Result<(), CoordError>>, CoordError>>, "producer transaction verify",
    Result<Vec<Result<(), CoordError>>, CoordError>, |op| ShardOp::ProducerTxn(op.op),
    ShardReply::ProducerTxn(PtxnReply::Verified(r)) => r);
op!(Ptxn<Vec<Option<TxnMetadata>>>, "producer transaction describe",
    Vec<Option<TxnMetadata>>, |op| ShardOp::ProducerTxn(op.op),
    ShardReply::ProducerTxn(PtxnReply::Described(r)) => r);
op!(Ptxn<Vec<TxnMetadata>>, "producer transaction list", Vec<TxnMetadata>,
    |op| ShardOp::ProducerTxn(op.op),
    ShardReply::ProducerTxn(PtxnReply::Listed(r)) => r);

// The consumer-group ops (`crate::group::ops`), each with its own reply.

/// Implements [`Op`] for a consumer-group op: `group_op!(Type, "name", Reply, Variant, ReplyVariant)`.
macro_rules! group_op {
    ($ty:ident, $name:literal, $reply:ty, $variant:ident, $answer:ident) => {
        op!(g::$ty, $name, $reply, |op| ShardOp::Group(GroupOp::$variant(op)),
            ShardReply::Group(GroupReply::$answer(r)) => r);
    };
}

group_op!(JoinGroup, "join group", JoinStep, Join, Join);
group_op!(
    PollJoin,
    "poll join",
    Option<JoinAnswer>,
    PollJoin,
    JoinPolled
);
group_op!(SyncGroup, "sync group", SyncStep, Sync, Sync);
group_op!(
    PollSync,
    "poll sync",
    Option<SyncAnswer>,
    PollSync,
    SyncPolled
);
group_op!(GroupHeartbeat, "group heartbeat", Result<(), GroupError>, Heartbeat, Heartbeat);
group_op!(
    LeaveGroup,
    "leave group",
    Result<Vec<ItemResult>, GroupError>,
    Leave,
    Left
);
group_op!(
    CommitOffsets,
    "commit offsets",
    Result<Vec<ItemResult>, GroupError>,
    Commit,
    Committed
);
group_op!(
    FetchOffsets,
    "fetch offsets",
    Result<Vec<FetchedOffset>, GroupError>,
    Fetch,
    Fetched
);
group_op!(
    TxnCommitOffsets,
    "txn commit offsets",
    Result<Vec<ItemResult>, GroupError>,
    TxnCommit,
    Committed
);
group_op!(
    DeleteOffsets,
    "delete offsets",
    Result<Vec<ItemResult>, GroupError>,
    DeleteOffsets,
    OffsetsDeleted
);
group_op!(DeleteGroup, "delete group", Result<bool, GroupError>, Delete, Deleted);
group_op!(ListGroups, "list groups", Vec<ListedGroup>, List, Listed);
group_op!(
    DescribeGroup,
    "describe group",
    Option<GroupDescription>,
    Describe,
    Described
);
group_op!(ConsumerHeartbeat, "consumer heartbeat", Result<HeartbeatOut, HeartbeatError>,
    ConsumerHeartbeat, ConsumerHeartbeat);
group_op!(
    ConsumerDescribe,
    "consumer describe",
    Option<ConsumerMembership>,
    ConsumerDescribe,
    ConsumerDescribed
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_of_its_kind_is_typed_and_another_is_an_error() {
        let ok = typed::<WaitOp>(ShardReply::Waited(true));
        assert_eq!(ok, Ok(true));
        let failed = typed::<WaitOp>(ShardReply::Failed(CallError::Abandoned));
        assert_eq!(failed, Err(CallError::Abandoned));
        let other = typed::<WaitOp>(ShardReply::Installed);
        assert!(matches!(other, Err(CallError::UnexpectedReply(_))));
        // A family op: the variant's reply, not another variant's.
        let listed = typed::<Txn<Vec<TxnRecord>>>(ShardReply::Txn(TxnReplyMsg::Listed(vec![])));
        assert_eq!(listed, Ok(vec![]));
        let answer = typed::<Txn<Vec<TxnRecord>>>(ShardReply::Txn(TxnReplyMsg::Done(Ok(()))));
        assert!(matches!(answer, Err(CallError::UnexpectedReply(_))));
        // The transport message of a wrapper op is its variant.
        let op = DeleteShareGroup {
            group_id: "g".into(),
        }
        .into_op();
        assert!(matches!(op, ShardOp::ShareDeleteGroup { group_id } if group_id == "g"));
    }
}
