//! Why a consumer-group operation was refused ([`GroupError`]), named for what happened; the
//! Kafka error code is chosen at the edge (`server::codes`).

use std::fmt;

/// A consumer-group refusal: of a whole request (JoinGroup, SyncGroup, Heartbeat, a group's
/// OffsetCommit / OffsetFetch / OffsetDelete / DeleteGroups) or of one of its members or
/// partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupError {
    /// The member (or, for a request naming an unknown group, any member) is not in the group.
    UnknownMember,
    /// A static member's instance id is now held by another member id.
    FencedInstance,
    /// The request's generation is not the group's (or it names a group that does not exist).
    IllegalGeneration,
    /// A KIP-848 member's epoch is not its current one (OffsetCommit, OffsetFetch).
    StaleMemberEpoch,
    /// The group is rebalancing: the member must rejoin.
    RebalanceInProgress,
    /// The request's protocol type or protocols do not match the group's (or the group is a
    /// KIP-848 group and the request a classic one).
    InconsistentProtocol,
    /// The session timeout is outside the broker's bounds.
    InvalidSessionTimeout,
    /// The group has `group.max.size` members.
    GroupFull,
    /// A new member's first JoinGroup (v4+): it must join again with the member id it was given.
    MemberIdRequired,
    /// The group has members (DeleteGroups, OffsetDelete of a group whose members'
    /// subscriptions are unknown).
    NotEmpty,
    /// No such group (OffsetCommit v9+ with a generation, OffsetDelete).
    GroupNotFound,
    /// OffsetDelete of a topic the group's members are subscribed to.
    SubscribedToTopic,
    /// A committed offset's metadata is larger than `OFFSET_METADATA_BYTES_MAX`.
    MetadataTooLarge,
    /// A committed offset or partition index below 0.
    NegativeOffset,
    /// OffsetFetch with `require_stable`: an offset is pending in a producer transaction.
    UnstableOffset,
    /// TxnOffsetCommit without a producer id.
    InvalidProducerId,
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            GroupError::UnknownMember => "unknown member",
            GroupError::FencedInstance => "the instance id belongs to another member",
            GroupError::IllegalGeneration => "not the group's generation",
            GroupError::StaleMemberEpoch => "not the member's current epoch",
            GroupError::RebalanceInProgress => "the group is rebalancing",
            GroupError::InconsistentProtocol => "the group's protocol differs",
            GroupError::InvalidSessionTimeout => "session timeout out of bounds",
            GroupError::GroupFull => "the group is full",
            GroupError::MemberIdRequired => "join again with the given member id",
            GroupError::NotEmpty => "the group has members",
            GroupError::GroupNotFound => "no such group",
            GroupError::SubscribedToTopic => "the group is subscribed to the topic",
            GroupError::MetadataTooLarge => "offset metadata too large",
            GroupError::NegativeOffset => "negative offset or partition",
            GroupError::UnstableOffset => "an offset is pending in a transaction",
            GroupError::InvalidProducerId => "no producer id",
        };
        f.write_str(text)
    }
}

/// One member's or partition's outcome in a group reply.
pub type ItemResult = Result<(), GroupError>;
