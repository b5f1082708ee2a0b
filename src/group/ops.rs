//! The messages a consumer-group handler sends to the group's shard ([`GroupOp`]) and the
//! replies ([`GroupReply`]), and their synchronous execution on [`ConsumerGroups`]. All are
//! `Send` (they cross the shard mesh). The runtime appends the entries an op produced to the
//! journal and answers once they are durable.

use super::classic::{
    ClassicGroup, DescribedMember, JoinAnswer, JoinRequest, JoinStep, SyncAnswer, SyncRequest,
    SyncStep,
};
use super::{
    CommitPartition, ConsumerGroups, ConsumerMembership, FetchedOffset, ListedGroup, Membership,
};
use super::{GroupError, ItemResult};

/// JoinGroup.
#[derive(Clone, Debug)]
pub struct JoinGroup {
    pub group_id: String,
    pub request: JoinRequest,
}

/// The answer to a parked JoinGroup, if there is one yet.
#[derive(Clone, Debug)]
pub struct PollJoin {
    pub group_id: String,
    pub ticket: u64,
}

/// SyncGroup.
#[derive(Clone, Debug)]
pub struct SyncGroup {
    pub group_id: String,
    pub request: SyncRequest,
}

/// The answer to a parked SyncGroup, if there is one yet.
#[derive(Clone, Debug)]
pub struct PollSync {
    pub group_id: String,
    pub ticket: u64,
}

/// Heartbeat (classic).
#[derive(Clone, Debug)]
pub struct GroupHeartbeat {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
}

/// LeaveGroup: (member id, group instance id) per member.
#[derive(Clone, Debug)]
pub struct LeaveGroup {
    pub group_id: String,
    pub members: Vec<(String, Option<String>)>,
}

/// OffsetCommit.
#[derive(Clone, Debug)]
pub struct CommitOffsets {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_or_epoch: i32,
    pub api_version: i16,
    pub partitions: Vec<CommitPartition>,
}

/// OffsetFetch (`topics: None`: every committed offset). `require_stable` (v7+): a
/// partition with an offset pending in a producer transaction is UNSTABLE_OFFSET_COMMIT.
#[derive(Clone, Debug)]
pub struct FetchOffsets {
    pub group_id: String,
    pub topics: Option<Vec<(String, Vec<i32>)>>,
    pub member: Option<(String, i32)>,
    pub require_stable: bool,
}

/// TxnOffsetCommit: offsets pending in `producer_id`'s transaction until its marker.
#[derive(Clone, Debug)]
pub struct TxnCommitOffsets {
    pub group_id: String,
    pub producer_id: i64,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    pub partitions: Vec<CommitPartition>,
}

/// OffsetDelete.
#[derive(Clone, Debug)]
pub struct DeleteOffsets {
    pub group_id: String,
    pub partitions: Vec<(String, i32)>,
}

/// DeleteGroups of one group.
#[derive(Clone, Debug)]
pub struct DeleteGroup {
    pub group_id: String,
}

/// ListGroups (every consumer group of the shard).
#[derive(Clone, Debug)]
pub struct ListGroups;

/// DescribeGroups of one group.
#[derive(Clone, Debug)]
pub struct DescribeGroup {
    pub group_id: String,
}

/// ConsumerGroupHeartbeat (KIP-848); `topics`: the registry's topics when it was sent.
#[derive(Clone, Debug)]
pub struct ConsumerHeartbeat {
    pub group_id: String,
    pub request: crate::group::kip848::HeartbeatIn,
    pub topics: std::collections::BTreeMap<String, crate::group::kip848::TopicMeta>,
}

/// ConsumerGroupDescribe of one group.
#[derive(Clone, Debug)]
pub struct ConsumerDescribe {
    pub group_id: String,
}

/// Work on the group's shard: one variant per op, each op its own type with its own reply
/// (`shard::call`: `Op for JoinGroup`, ...).
#[derive(Clone, Debug)]
pub enum GroupOp {
    Join(JoinGroup),
    PollJoin(PollJoin),
    Sync(SyncGroup),
    PollSync(PollSync),
    Heartbeat(GroupHeartbeat),
    Leave(LeaveGroup),
    Commit(CommitOffsets),
    Fetch(FetchOffsets),
    TxnCommit(TxnCommitOffsets),
    DeleteOffsets(DeleteOffsets),
    Delete(DeleteGroup),
    List(ListGroups),
    Describe(DescribeGroup),
    ConsumerHeartbeat(ConsumerHeartbeat),
    ConsumerDescribe(ConsumerDescribe),
}

/// A classic group as DescribeGroups reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    pub state: String,
    pub protocol_type: String,
    /// The selected protocol when Stable, else "" (as Kafka).
    pub protocol: String,
    pub members: Vec<DescribedMember>,
    /// "Classic" or "Consumer".
    pub group_type: String,
}

/// Replies to [`GroupOp`]s, the transport's: a handler gets its op's own (`shard::call`).
#[derive(Clone, Debug)]
pub enum GroupReply {
    Join(JoinStep),
    JoinPolled(Option<JoinAnswer>),
    Sync(SyncStep),
    SyncPolled(Option<SyncAnswer>),
    Heartbeat(Result<(), GroupError>),
    /// Per member results, or the group's error.
    Left(Result<Vec<ItemResult>, GroupError>),
    /// Per partition results, or the group's error.
    Committed(Result<Vec<ItemResult>, GroupError>),
    Fetched(Result<Vec<FetchedOffset>, GroupError>),
    /// Per partition results, or the group's error.
    OffsetsDeleted(Result<Vec<ItemResult>, GroupError>),
    /// `Ok(true)`: deleted; `Ok(false)`: no such consumer group; `Err`: it has members.
    Deleted(Result<bool, GroupError>),
    Listed(Vec<ListedGroup>),
    Described(Option<GroupDescription>),
    ConsumerHeartbeat(
        Result<crate::group::kip848::HeartbeatOut, crate::group::kip848::HeartbeatError>,
    ),
    /// The group's KIP-848 state, if it is a consumer group.
    ConsumerDescribed(Option<ConsumerMembership>),
}

/// The KIP-848 membership of a group for a ConsumerGroupHeartbeat; creates the group. An empty
/// classic group (or one that only has committed offsets) becomes a consumer group, keeping its
/// offsets, as Kafka converts it; one with classic members is refused (Kafka 4.4 would let
/// consumer members join it; not implemented).
fn consumer<'a>(
    groups: &'a mut ConsumerGroups,
    group_id: &str,
    now_ms: u64,
) -> Result<&'a mut ConsumerMembership, crate::group::kip848::HeartbeatError> {
    let group = groups.get_or_create(group_id, now_ms);
    if let Membership::Classic(c) = &group.membership {
        if !c.is_empty() {
            return Err(crate::group::kip848::HeartbeatError::NotConsumerGroup(
                group_id.to_string(),
            ));
        }
        group.membership = Membership::Consumer(ConsumerMembership::default());
    }
    match &mut group.membership {
        Membership::Consumer(c) => Ok(c),
        Membership::Classic(_) => unreachable!("converted above"),
    }
}

/// The classic membership of a group for a classic-protocol request; creates the group.
fn classic<'a>(
    groups: &'a mut ConsumerGroups,
    group_id: &str,
    now_ms: u64,
) -> Result<&'a mut ClassicGroup, GroupError> {
    match &mut groups.get_or_create(group_id, now_ms).membership {
        Membership::Classic(c) => Ok(c),
        // Kafka 4.4 lets classic members join a KIP-848 group (upgrade/downgrade), which is
        // not implemented here.
        Membership::Consumer(_) => Err(GroupError::InconsistentProtocol),
    }
}

/// The classic membership of an existing group.
fn existing_classic<'a>(
    groups: &'a mut ConsumerGroups,
    group_id: &str,
) -> Result<&'a mut ClassicGroup, GroupError> {
    match groups.group_mut(group_id).map(|g| &mut g.membership) {
        Some(Membership::Classic(c)) => Ok(c),
        Some(Membership::Consumer(_)) => Err(GroupError::InconsistentProtocol),
        None => Err(GroupError::UnknownMember),
    }
}

/// Runs `op` on the shard's groups.
pub fn execute(groups: &mut ConsumerGroups, op: GroupOp, now_ms: u64) -> GroupReply {
    match op {
        GroupOp::Join(JoinGroup { group_id, request }) => {
            let step = match classic(groups, &group_id, now_ms) {
                Ok(c) => c.join(&request, now_ms),
                Err(e) => JoinStep::Done(JoinAnswer::error(e, &request.member_id)),
            };
            // A group the join left without members or offsets (refused first join).
            groups.tick_group(&group_id, now_ms);
            GroupReply::Join(step)
        }
        GroupOp::PollJoin(PollJoin { group_id, ticket }) => {
            GroupReply::JoinPolled(match existing_classic(groups, &group_id) {
                Ok(c) => c.poll_join(ticket, now_ms),
                Err(e) => Some(JoinAnswer::error(e, "")),
            })
        }
        GroupOp::Sync(SyncGroup { group_id, request }) => {
            GroupReply::Sync(match existing_classic(groups, &group_id) {
                Ok(c) => c.sync(&request, now_ms),
                Err(e) => SyncStep::Done(SyncAnswer::error(e)),
            })
        }
        GroupOp::PollSync(PollSync { group_id, ticket }) => {
            GroupReply::SyncPolled(match existing_classic(groups, &group_id) {
                Ok(c) => c.poll_sync(ticket, now_ms),
                Err(e) => Some(SyncAnswer::error(e)),
            })
        }
        GroupOp::Heartbeat(GroupHeartbeat {
            group_id,
            member_id,
            group_instance_id,
            generation_id,
        }) => GroupReply::Heartbeat(existing_classic(groups, &group_id).and_then(|c| {
            c.heartbeat(
                &member_id,
                group_instance_id.as_deref(),
                generation_id,
                now_ms,
            )
        })),
        GroupOp::Leave(LeaveGroup { group_id, members }) => {
            let reply = match existing_classic(groups, &group_id) {
                // Kafka 4.4 answers every member of an unknown group UNKNOWN_MEMBER_ID (the
                // group-level error stays NONE).
                Err(GroupError::UnknownMember) => {
                    Ok(vec![Err(GroupError::UnknownMember); members.len()])
                }
                Ok(c) => Ok(members
                    .iter()
                    .map(|(id, instance)| c.leave(id, instance.as_deref(), now_ms))
                    .collect()),
                Err(e) => Err(e),
            };
            GroupReply::Left(reply)
        }
        GroupOp::Commit(CommitOffsets {
            group_id,
            member_id,
            group_instance_id,
            generation_or_epoch,
            api_version,
            partitions,
        }) => GroupReply::Committed(groups.commit(
            &group_id,
            &member_id,
            group_instance_id.as_deref(),
            generation_or_epoch,
            api_version,
            &partitions,
            now_ms,
        )),
        GroupOp::Fetch(FetchOffsets {
            group_id,
            topics,
            member,
            require_stable,
        }) => GroupReply::Fetched(
            groups
                .fetch(
                    &group_id,
                    topics.as_deref(),
                    member.as_ref().map(|(m, e)| (m.as_str(), *e)),
                    now_ms,
                )
                .map(|mut fetched| {
                    if require_stable {
                        groups.mark_unstable(&group_id, &mut fetched);
                    }
                    fetched
                }),
        ),
        GroupOp::TxnCommit(TxnCommitOffsets {
            group_id,
            producer_id,
            member_id,
            group_instance_id,
            generation_id,
            partitions,
        }) => GroupReply::Committed(groups.txn_commit(
            &group_id,
            producer_id,
            &member_id,
            group_instance_id.as_deref(),
            generation_id,
            &partitions,
            now_ms,
        )),
        GroupOp::DeleteOffsets(DeleteOffsets {
            group_id,
            partitions,
        }) => GroupReply::OffsetsDeleted(groups.delete_offsets(&group_id, &partitions, now_ms)),
        GroupOp::Delete(DeleteGroup { group_id }) => {
            GroupReply::Deleted(groups.delete_group(&group_id, now_ms))
        }
        GroupOp::List(ListGroups) => GroupReply::Listed(groups.list(now_ms)),
        GroupOp::ConsumerHeartbeat(ConsumerHeartbeat {
            group_id,
            request,
            topics,
        }) => {
            groups.tick_group(&group_id, now_ms);
            let result = consumer(groups, &group_id, now_ms)
                .and_then(|c| c.heartbeat(&request, &topics, now_ms));
            // A group the heartbeat left without members or offsets is forgotten.
            groups.tick_group(&group_id, now_ms);
            GroupReply::ConsumerHeartbeat(result)
        }
        GroupOp::ConsumerDescribe(ConsumerDescribe { group_id }) => {
            groups.tick_group(&group_id, now_ms);
            GroupReply::ConsumerDescribed(groups.group(&group_id).and_then(
                |g| match &g.membership {
                    Membership::Consumer(c) => Some(c.clone()),
                    Membership::Classic(_) => None,
                },
            ))
        }
        GroupOp::Describe(DescribeGroup { group_id }) => {
            groups.tick_group(&group_id, now_ms);
            GroupReply::Described(groups.group(&group_id).map(|g| match &g.membership {
                Membership::Classic(c) => GroupDescription {
                    state: c.state().name().to_string(),
                    protocol_type: c.protocol_type().unwrap_or("").to_string(),
                    protocol: if c.state() == super::ClassicState::Stable {
                        c.protocol_name().unwrap_or("").to_string()
                    } else {
                        String::new()
                    },
                    members: c.describe_members(),
                    group_type: g.type_name().to_string(),
                },
                Membership::Consumer(c) => GroupDescription {
                    state: c.state_name().to_string(),
                    protocol_type: "consumer".to_string(),
                    protocol: String::new(),
                    members: Vec::new(),
                    group_type: g.type_name().to_string(),
                },
            }))
        }
    }
}
