//! KIP-848 consumer-group membership (`group.protocol=consumer`): the state machine behind
//! ConsumerGroupHeartbeat and ConsumerGroupDescribe, owned by the group's shard.
//!
//! Synchronous and runtime-free: time comes in as `now_ms`, topic metadata as a map from the
//! registry. Nothing here is durable (as for Kafka's in-memory view after a restart, members
//! rejoin; committed offsets live in the group's offset store).
//!
//! The protocol, as Kafka's `GroupMetadataManager` / `CurrentAssignmentBuilder` run it:
//! - The **group epoch** rises whenever the membership or a subscription changes, or a
//!   subscribed topic's partition count changes. The **target assignment** is recomputed by the
//!   group's assignor ([`assignor`]) when the group epoch passes the assignment epoch.
//! - Each member has a **member epoch** and converges to the target one heartbeat at a time
//!   ([`Consumer848Group::heartbeat`]). A partition leaves a member before it is given to
//!   another: the member first gets its assignment minus the partitions to revoke (state
//!   `UnrevokedPartitions`, epoch unchanged) and moves on only once its heartbeat no longer
//!   reports them as owned; a partition another member still holds is withheld (state
//!   `UnreleasedPartitions`) until it is released. So no partition is ever held by two members.
//! - Epoch checks: a heartbeat with an epoch above the member's is FENCED_MEMBER_EPOCH; one
//!   below is accepted only if it is the previous epoch and the member owns nothing it was not
//!   assigned (a lost response); an unknown member is UNKNOWN_MEMBER_ID. Epoch 0 joins, -1
//!   leaves, -2 leaves a static member (its partitions stay with the instance id until its
//!   session times out — here: it leaves like a dynamic member).
//! - Members that stop heartbeating are removed after the session timeout; one that does not
//!   revoke within its rebalance timeout is removed too ([`Consumer848Group::expire`]).
//! - OffsetCommit: the member must exist and send its current epoch (STALE_MEMBER_EPOCH
//!   otherwise); an empty group accepts admin commits (epoch -1).
//!
//! Transitions of a member's state are checked by [`check_transition`] (the table), and the
//! invariants (epochs ordered, no partition held twice) by [`Consumer848Group::check`] after
//! every change.

pub mod assignor;

pub use assignor::{Assignor, MemberSpec};

use crate::constants::{
    CONSUMER_GROUP_HEARTBEAT_INTERVAL_MS, CONSUMER_GROUP_SESSION_TIMEOUT_MS,
    GROUP_MEMBER_ID_BYTES_MAX,
};
use crate::group::error::GroupError;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use uuid::Uuid;

/// A topic partition by topic id (the KIP-848 protocol names topics by id).
pub type Tp = (Uuid, i32);

/// What the assignors and the heartbeat know of a topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicMeta {
    pub id: Uuid,
    pub partitions: i32,
}

/// A member's reconciliation state (Kafka's `MemberState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// At the target epoch with its target partitions (or converged as far as possible).
    Stable,
    /// Waiting for the member to revoke partitions; epoch unchanged.
    UnrevokedPartitions,
    /// At the target epoch but some target partitions are still held by other members.
    UnreleasedPartitions,
}

impl MemberState {
    /// Kafka's name (ConsumerGroupDescribe does not report it; logs and tests do).
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedPartitions => "UNREVOKED_PARTITIONS",
            MemberState::UnreleasedPartitions => "UNRELEASED_PARTITIONS",
        }
    }
}

/// The table of legal member transitions and what each requires of the epochs:
/// `(from, to, old epoch, new epoch, target epoch)`. Returns why a transition is illegal.
pub fn check_transition(
    from: MemberState,
    to: MemberState,
    old_epoch: i32,
    new_epoch: i32,
    target_epoch: i32,
) -> Result<(), String> {
    use MemberState::*;
    let ok = match (from, to) {
        // Revocation keeps the epoch (from Unrevoked, the member may have revoked and been
        // asked again at the next epoch).
        (Stable | UnreleasedPartitions, UnrevokedPartitions) => new_epoch == old_epoch,
        (UnrevokedPartitions, UnrevokedPartitions) => {
            new_epoch == old_epoch || new_epoch == old_epoch + 1
        }
        // Anything else moves to the target epoch.
        (_, Stable | UnreleasedPartitions) => new_epoch == target_epoch || new_epoch == old_epoch,
    };
    if ok && new_epoch >= old_epoch && new_epoch <= target_epoch.max(old_epoch) {
        Ok(())
    } else {
        Err(format!(
            "{} (epoch {old_epoch}) -> {} (epoch {new_epoch}) with target epoch {target_epoch}",
            from.name(),
            to.name()
        ))
    }
}

/// One member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub subscribed: BTreeSet<String>,
    /// The assignor it asked for, if any.
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    /// Partitions it may consume now (what the heartbeat sends as its assignment).
    pub assigned: BTreeSet<Tp>,
    /// Partitions it must give up before it moves on.
    pub pending_revocation: BTreeSet<Tp>,
    pub session_deadline_ms: u64,
    /// Set while in `UnrevokedPartitions`: removed if it has not revoked by then.
    pub revocation_deadline_ms: Option<u64>,
}

/// A ConsumerGroupHeartbeat request, decoded (topic names resolved at the edge).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatIn {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    /// `None`: unchanged.
    pub subscribed_topic_names: Option<Vec<String>>,
    /// `None`: unchanged.
    pub server_assignor: Option<String>,
    /// `None`: unchanged (the client sends it when it changed, and on a full request).
    pub owned: Option<BTreeSet<Tp>>,
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatOut {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Sent when it changed, on a join and on a full request.
    pub assignment: Option<BTreeSet<Tp>>,
}

/// Why a heartbeat is refused (the Kafka error code is chosen at the edge, `server::codes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeartbeatError {
    UnknownMember(String),
    FencedEpoch {
        member_id: String,
        sent: i32,
        current: i32,
    },
    UnsupportedAssignor(String),
    InvalidRequest(String),
    GroupFull,
    InvalidGroupId,
    /// The group id names a classic group with members (Kafka converts only empty ones).
    NotConsumerGroup(String),
}

impl fmt::Display for HeartbeatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeartbeatError::UnknownMember(id) => write!(f, "member {id} is not in the group"),
            HeartbeatError::FencedEpoch {
                member_id,
                sent,
                current,
            } => write!(
                f,
                "the member epoch of {member_id} is fenced: sent {sent}, current {current}"
            ),
            HeartbeatError::UnsupportedAssignor(name) => {
                write!(f, "the assignor {name} is not supported (uniform, range)")
            }
            HeartbeatError::InvalidRequest(why) => write!(f, "{why}"),
            HeartbeatError::GroupFull => write!(f, "the group is full"),
            HeartbeatError::InvalidGroupId => write!(f, "the group id is empty"),
            HeartbeatError::NotConsumerGroup(id) => {
                write!(f, "Group {id} is not a consumer group.")
            }
        }
    }
}

/// Kafka's group states for ListGroups and ConsumerGroupDescribe.
pub fn group_state_name(group: &Consumer848Group) -> &'static str {
    if group.members.is_empty() {
        "Empty"
    } else if group.assignment_epoch < group.group_epoch {
        "Assigning"
    } else if group
        .members
        .values()
        .any(|m| m.member_epoch != group.assignment_epoch || m.state != MemberState::Stable)
    {
        "Reconciling"
    } else {
        "Stable"
    }
}

/// The KIP-848 state of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consumer848Group {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// The target assignment at `assignment_epoch`.
    pub target: BTreeMap<String, BTreeSet<Tp>>,
    /// Partition counts of the subscribed topics when the group epoch last moved (a change
    /// moves it again).
    pub subscribed_metadata: BTreeMap<String, TopicMeta>,
}

impl Consumer848Group {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The group's assignor: the one most members asked for (ties: by name), else the default.
    pub fn assignor(&self) -> Assignor {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(name) = m.server_assignor.as_deref() {
                *votes.entry(name).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
            .and_then(|(name, _)| Assignor::by_name(name))
            .unwrap_or(Assignor::DEFAULT)
    }

    /// Kafka's group state name (ListGroups, ConsumerGroupDescribe).
    pub fn state_name(&self) -> &'static str {
        group_state_name(self)
    }

    /// Topics the members subscribe to (OffsetDelete refuses those, retention keeps them).
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect()
    }

    fn metadata_of(&self, topics: &BTreeMap<String, TopicMeta>) -> BTreeMap<String, TopicMeta> {
        self.subscribed_topics()
            .into_iter()
            .filter_map(|name| topics.get(&name).map(|m| (name, *m)))
            .collect()
    }

    /// Moves the group epoch if the subscribed topics' metadata changed, then recomputes the
    /// target assignment if it is behind.
    /// `changed`: the membership or a subscription changed. The group epoch moves once.
    fn refresh(&mut self, topics: &BTreeMap<String, TopicMeta>, changed: bool) {
        let metadata = self.metadata_of(topics);
        let mut bump = changed;
        if metadata != self.subscribed_metadata {
            self.subscribed_metadata = metadata;
            bump = true;
        }
        if bump {
            self.group_epoch += 1;
        }
        self.retarget();
    }

    /// Recomputes the target assignment if it is behind the group epoch.
    fn retarget(&mut self) {
        if self.assignment_epoch < self.group_epoch {
            let specs: BTreeMap<String, MemberSpec> = self
                .members
                .iter()
                .map(|(id, m)| {
                    (
                        id.clone(),
                        MemberSpec {
                            subscribed: m.subscribed.clone(),
                            previous: self.target.get(id).cloned().unwrap_or_default(),
                        },
                    )
                })
                .collect();
            self.target = self.assignor().assign(&specs, &self.subscribed_metadata);
            self.assignment_epoch = self.group_epoch;
        }
    }

    /// Whether a member other than `member_id` holds `tp` (assigned or pending revocation).
    fn held_by_other(&self, member_id: &str, tp: &Tp) -> bool {
        self.members.iter().any(|(id, m)| {
            id != member_id && (m.assigned.contains(tp) || m.pending_revocation.contains(tp))
        })
    }

    /// Kafka's `CurrentAssignmentBuilder`: one reconciliation step of `member_id`.
    fn reconcile(&mut self, member_id: &str, owned: Option<&BTreeSet<Tp>>) {
        let member = &self.members[member_id];
        let owns_any = |revoking: &BTreeSet<Tp>| match owned {
            None => true,
            Some(owned) => owned.iter().any(|tp| revoking.contains(tp)),
        };
        let (epoch, assigned) = match member.state {
            MemberState::Stable | MemberState::UnreleasedPartitions => {
                if member.state == MemberState::Stable
                    && member.member_epoch == self.assignment_epoch
                {
                    return;
                }
                (member.member_epoch, member.assigned.clone())
            }
            MemberState::UnrevokedPartitions => {
                if owns_any(&member.pending_revocation) {
                    return;
                }
                (member.member_epoch + 1, member.assigned.clone())
            }
        };
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let kept: BTreeSet<Tp> = assigned.intersection(&target).copied().collect();
        let revoking: BTreeSet<Tp> = assigned.difference(&kept).copied().collect();
        let mut pending: BTreeSet<Tp> = target.difference(&kept).copied().collect();
        let before = pending.len();
        pending.retain(|tp| !self.held_by_other(member_id, tp));
        let unreleased = pending.len() < before;
        let target_epoch = self.assignment_epoch;
        let member = self
            .members
            .get_mut(member_id)
            .expect("reconciled member exists");
        let from = (member.state, member.member_epoch);
        if !revoking.is_empty() && owns_any(&revoking) {
            member.state = MemberState::UnrevokedPartitions;
            member.set_epoch(epoch);
            member.assigned = kept;
            member.pending_revocation = revoking;
        } else {
            member.state = if unreleased {
                MemberState::UnreleasedPartitions
            } else {
                MemberState::Stable
            };
            member.set_epoch(target_epoch);
            member.assigned = kept.union(&pending).copied().collect();
            member.pending_revocation.clear();
        }
        if let Err(why) = check_transition(
            from.0,
            member.state,
            from.1,
            member.member_epoch,
            target_epoch,
        ) {
            panic!("illegal member transition of {member_id}: {why}");
        }
    }

    /// Handles one ConsumerGroupHeartbeat.
    pub fn heartbeat(
        &mut self,
        request: &HeartbeatIn,
        topics: &BTreeMap<String, TopicMeta>,
        now_ms: u64,
    ) -> Result<HeartbeatOut, HeartbeatError> {
        let result = self.heartbeat_inner(request, topics, now_ms);
        self.check();
        result
    }

    fn heartbeat_inner(
        &mut self,
        request: &HeartbeatIn,
        topics: &BTreeMap<String, TopicMeta>,
        now_ms: u64,
    ) -> Result<HeartbeatOut, HeartbeatError> {
        let id = &request.member_id;
        if id.is_empty() || id.len() > GROUP_MEMBER_ID_BYTES_MAX {
            return Err(HeartbeatError::InvalidRequest(
                "MemberId can't be empty.".to_string(),
            ));
        }
        if let Some(name) = request.server_assignor.as_deref() {
            if Assignor::by_name(name).is_none() {
                return Err(HeartbeatError::UnsupportedAssignor(name.to_string()));
            }
        }
        let mut joined = false;
        match request.member_epoch {
            -1 | -2 => {
                if self.members.contains_key(id) {
                    self.remove(id);
                    self.refresh(topics, true);
                } else {
                    return Err(HeartbeatError::UnknownMember(id.clone()));
                }
                return Ok(HeartbeatOut {
                    member_id: id.clone(),
                    member_epoch: request.member_epoch,
                    heartbeat_interval_ms: 0,
                    assignment: None,
                });
            }
            0 => {
                let Some(names) = &request.subscribed_topic_names else {
                    return Err(HeartbeatError::InvalidRequest(
                        "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                            .to_string(),
                    ));
                };
                if request.rebalance_timeout_ms < 0 {
                    return Err(HeartbeatError::InvalidRequest(
                        "RebalanceTimeoutMs must be provided in first request.".to_string(),
                    ));
                }
                if !self.members.contains_key(id) {
                    if self.members.len() >= crate::constants::GROUP_MEMBERS_MAX {
                        return Err(HeartbeatError::GroupFull);
                    }
                    self.members.insert(
                        id.clone(),
                        Member {
                            member_id: id.clone(),
                            instance_id: request.instance_id.clone(),
                            rack_id: request.rack_id.clone(),
                            client_id: request.client_id.clone(),
                            client_host: request.client_host.clone(),
                            member_epoch: 0,
                            previous_member_epoch: 0,
                            state: MemberState::Stable,
                            subscribed: BTreeSet::new(),
                            server_assignor: None,
                            rebalance_timeout_ms: request.rebalance_timeout_ms,
                            assigned: BTreeSet::new(),
                            pending_revocation: BTreeSet::new(),
                            session_deadline_ms: now_ms + CONSUMER_GROUP_SESSION_TIMEOUT_MS,
                            revocation_deadline_ms: None,
                        },
                    );
                    joined = true;
                }
                let _ = names;
            }
            sent => {
                let Some(member) = self.members.get(id) else {
                    return Err(HeartbeatError::UnknownMember(id.clone()));
                };
                let fenced = HeartbeatError::FencedEpoch {
                    member_id: id.clone(),
                    sent,
                    current: member.member_epoch,
                };
                if sent > member.member_epoch {
                    return Err(fenced);
                }
                if sent < member.member_epoch {
                    // A lost response: the previous epoch, owning nothing it was not given.
                    let consistent = sent == member.previous_member_epoch
                        && request
                            .owned
                            .as_ref()
                            .is_some_and(|owned| owned.is_subset(&member.assigned));
                    if !consistent {
                        return Err(fenced);
                    }
                }
            }
        }
        // Update the member; a changed subscription or assignor moves the group epoch.
        let joining = request.member_epoch == 0;
        let member = self.members.get_mut(id).expect("member exists here");
        let previous_assignment = member.assigned.clone();
        let previous_epoch = member.member_epoch;
        member.session_deadline_ms = now_ms + CONSUMER_GROUP_SESSION_TIMEOUT_MS;
        if request.rebalance_timeout_ms >= 0 {
            member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        }
        if request.rack_id.is_some() {
            member.rack_id = request.rack_id.clone();
        }
        member.client_id = request.client_id.clone();
        member.client_host = request.client_host.clone();
        let mut bump = false;
        if let Some(names) = &request.subscribed_topic_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            if names != member.subscribed {
                member.subscribed = names;
                bump = true;
            }
        }
        if request.server_assignor.is_some() && request.server_assignor != member.server_assignor {
            member.server_assignor = request.server_assignor.clone();
            bump = true;
        }
        self.refresh(topics, bump || joined);
        self.reconcile(id, request.owned.as_ref());
        let member = self.members.get_mut(id).expect("member exists here");
        member.revocation_deadline_ms = match member.state {
            MemberState::UnrevokedPartitions => member
                .revocation_deadline_ms
                .or(Some(now_ms + member.rebalance_timeout_ms.max(0) as u64)),
            _ => None,
        };
        let full = request.rebalance_timeout_ms >= 0
            && request.subscribed_topic_names.is_some()
            && request.owned.is_some();
        let changed =
            member.assigned != previous_assignment || member.member_epoch != previous_epoch;
        Ok(HeartbeatOut {
            member_id: id.clone(),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: CONSUMER_GROUP_HEARTBEAT_INTERVAL_MS,
            assignment: (joining || full || changed).then(|| member.assigned.clone()),
        })
    }

    /// Removes a member; the caller moves the group epoch (once per change).
    fn remove(&mut self, member_id: &str) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
        }
    }

    /// Removes members whose session expired or who did not revoke in time; returns them. The
    /// target is recomputed on the topic metadata last seen (a heartbeat refreshes it).
    pub fn expire(&mut self, now_ms: u64) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.session_deadline_ms <= now_ms
                    || m.revocation_deadline_ms.is_some_and(|d| d <= now_ms)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in &gone {
            self.remove(id);
        }
        if !gone.is_empty() {
            let subscribed = self.subscribed_topics();
            self.subscribed_metadata
                .retain(|name, _| subscribed.contains(name));
            self.group_epoch += 1;
            self.retarget();
        }
        self.check();
        gone
    }

    /// Topic metadata changed (partitions added, a topic created or deleted): moves the group
    /// epoch if a subscribed topic is affected. Members converge at their next heartbeats.
    pub fn topics_changed(&mut self, topics: &BTreeMap<String, TopicMeta>) {
        if !self.members.is_empty() {
            self.refresh(topics, false);
        }
        self.check();
    }

    /// OffsetCommit's check (Kafka's `ConsumerGroup.validateOffsetCommit`): `Err` carries the
    /// Kafka error. An empty group accepts commits without a member (epoch < 0).
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        if member_epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let member = self
            .members
            .get(member_id)
            .ok_or(GroupError::UnknownMember)?;
        if member_epoch != member.member_epoch {
            return Err(GroupError::StaleMemberEpoch);
        }
        Ok(())
    }

    /// OffsetFetch's check (v9+ with a member id): as for commits; without a member id (admin
    /// tools, older clients) any fetch is accepted.
    pub fn validate_offset_fetch(
        &self,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        match member_id {
            None => Ok(()),
            Some(id) => {
                let member = self.members.get(id).ok_or(GroupError::UnknownMember)?;
                if member.member_epoch != member_epoch {
                    return Err(GroupError::StaleMemberEpoch);
                }
                Ok(())
            }
        }
    }

    /// The invariants; asserted after every change.
    pub fn check(&self) {
        assert!(self.assignment_epoch <= self.group_epoch);
        let mut held: BTreeMap<Tp, &str> = BTreeMap::new();
        for (id, m) in &self.members {
            assert_eq!(id, &m.member_id);
            assert!(
                m.member_epoch <= self.assignment_epoch.max(0),
                "{id}: epoch ahead of the target"
            );
            assert!(m.assigned.is_disjoint(&m.pending_revocation));
            assert_eq!(
                m.state == MemberState::UnrevokedPartitions,
                !m.pending_revocation.is_empty(),
                "{id}: pending revocation iff UnrevokedPartitions"
            );
            for tp in m.assigned.iter().chain(&m.pending_revocation) {
                if let Some(other) = held.insert(*tp, id) {
                    panic!("{tp:?} held by {other} and {id}");
                }
            }
        }
    }
}

impl Member {
    fn set_epoch(&mut self, epoch: i32) {
        if epoch != self.member_epoch {
            self.previous_member_epoch = self.member_epoch;
            self.member_epoch = epoch;
        }
    }
}

#[cfg(test)]
mod tests;
