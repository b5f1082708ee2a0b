//! The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup): one group's
//! membership and rebalance state machine, on the group's shard.
//!
//! Pure and synchronous: time comes in as `now_ms`; nothing waits here. A JoinGroup or SyncGroup
//! that Kafka parks until the rebalance moves on gets a ticket ([`JoinStep::Wait`],
//! [`SyncStep::Wait`]); its handler polls the group with the ticket ([`ClassicGroup::poll_join`],
//! [`ClassicGroup::poll_sync`]) and every poll first runs the timers ([`ClassicGroup::tick`]), so
//! deadlines are met within a poll interval without a timer on the shard.
//!
//! States and transitions are Kafka 4.4's (`ClassicGroupState`), checked by one table
//! ([`ClassicState::can_follow`]); every change goes through `ClassicGroup::transition`:
//! ```text
//!   Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
//!     ▲                 ▲        │ nobody left                        │ leader's SyncGroup
//!     └─────────────────┼────────┘                                    ▼
//!                       └──── join, leave, session timeout ◀──────  Stable
//! ```
//! (Dead is for a group being deleted; groups are removed from the shard instead.)
//!
//! The rules follow Kafka's `GroupMetadataManager` (classic part) and `ClassicGroup`:
//! - A new dynamic member (empty member id, JoinGroup v4+) gets MEMBER_ID_REQUIRED with a
//!   generated id and is *pending* until it joins with it (or its session timeout passes).
//! - A rebalance waits until every member has rejoined (and no member is pending) or the largest
//!   rebalance timeout passed; members that did not rejoin are removed. The first rebalance of an
//!   empty group waits `group.initial.rebalance.delay.ms`, extended while new members arrive, up
//!   to the rebalance timeout.
//! - The protocol is the one every member supports with the most first-choice votes; the leader
//!   (the first member, kept while it stays) gets every member's metadata and sends the
//!   assignment in its SyncGroup, which the broker relays (client-side assignors).
//! - Members that do not SyncGroup within the rebalance timeout after the join completes are
//!   removed (Kafka 2.7+ pending-sync timeout); members that do not heartbeat within their
//!   session timeout are removed; either starts a rebalance.
//! - Static members (`group.instance.id`): a rejoin with the same instance id takes over the old
//!   member (new member id, same assignment, no rebalance when the group is Stable and the
//!   selected protocol does not change); requests from the old member id are FENCED_INSTANCE_ID.

use super::error::GroupError;
use crate::constants::{
    GROUP_ANSWER_KEEP_MS, GROUP_MAX_SESSION_TIMEOUT_MS, GROUP_MEMBERS_MAX,
    GROUP_MIN_SESSION_TIMEOUT_MS,
};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// Kafka's `ClassicGroupState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClassicState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl ClassicState {
    pub const ALL: [ClassicState; 5] = [
        ClassicState::Empty,
        ClassicState::PreparingRebalance,
        ClassicState::CompletingRebalance,
        ClassicState::Stable,
        ClassicState::Dead,
    ];

    /// The name Kafka reports (DescribeGroups, ListGroups).
    pub const fn name(self) -> &'static str {
        match self {
            ClassicState::Empty => "Empty",
            ClassicState::PreparingRebalance => "PreparingRebalance",
            ClassicState::CompletingRebalance => "CompletingRebalance",
            ClassicState::Stable => "Stable",
            ClassicState::Dead => "Dead",
        }
    }

    /// The transition table: whether `self` may follow `prev` (Kafka's `validPreviousStates`).
    pub const fn can_follow(self, prev: ClassicState) -> bool {
        use ClassicState::*;
        match self {
            Empty => matches!(prev, PreparingRebalance),
            PreparingRebalance => matches!(prev, Stable | CompletingRebalance | Empty),
            CompletingRebalance => matches!(prev, PreparingRebalance),
            Stable => matches!(prev, CompletingRebalance),
            Dead => true,
        }
    }
}

/// A JoinGroup for one group.
#[derive(Clone, Debug)]
pub struct JoinRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    /// v0 has none: the session timeout is used.
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub api_version: i16,
}

/// A member as the leader's JoinGroup answer lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

/// The JoinGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinAnswer {
    /// Why the join was refused (`None`: joined).
    pub error: Option<GroupError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    pub members: Vec<JoinedMember>,
}

impl JoinAnswer {
    pub fn error(error: GroupError, member_id: &str) -> JoinAnswer {
        JoinAnswer {
            error: Some(error),
            ..JoinAnswer::empty(member_id)
        }
    }

    /// An answer with nothing in it (the fields of a refusal), for `member_id`.
    pub fn empty(member_id: &str) -> JoinAnswer {
        JoinAnswer {
            error: None,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            skip_assignment: false,
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

/// A JoinGroup's outcome: answered, or parked until the rebalance completes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinStep {
    Done(JoinAnswer),
    Wait(u64),
}

/// A SyncGroup for one group.
#[derive(Clone, Debug)]
pub struct SyncRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

/// The SyncGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncAnswer {
    /// Why the sync was refused (`None`: the member's assignment).
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncAnswer {
    pub fn error(error: GroupError) -> SyncAnswer {
        SyncAnswer {
            error: Some(error),
            ..SyncAnswer::empty()
        }
    }

    /// An answer with nothing in it (the fields of a refusal).
    pub fn empty() -> SyncAnswer {
        SyncAnswer {
            error: None,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncStep {
    Done(SyncAnswer),
    Wait(u64),
}

/// One member of a classic group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassicMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    /// (name, metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    last_heartbeat_ms: u64,
    /// The ticket of its JoinGroup parked in the current rebalance.
    join_ticket: Option<u64>,
    /// The ticket of its SyncGroup waiting for the leader's.
    sync_ticket: Option<u64>,
    /// Joined the current generation and has not sent SyncGroup yet.
    pending_sync: bool,
    /// Order of arrival (the leader is the earliest member).
    seq: u64,
}

impl ClassicMember {
    pub fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m)
    }

    pub fn awaiting_join(&self) -> bool {
        self.join_ticket.is_some()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InitialDelay {
    until_ms: u64,
    remaining_ms: u64,
    new_member_added: bool,
}

/// A member as DescribeGroups reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// One classic group's membership (module docs).
#[derive(Clone, Debug)]
pub struct ClassicGroup {
    state: ClassicState,
    /// When the group entered its state (offset retention counts from becoming Empty).
    state_since_ms: u64,
    generation_id: i32,
    /// Set by the first member; `None` for a group that only ever had offsets committed (a
    /// "simple" group).
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader_id: Option<String>,
    members: BTreeMap<String, ClassicMember>,
    /// group.instance.id → member id.
    static_members: BTreeMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED → deadline.
    pending_members: BTreeMap<String, u64>,
    rebalance_deadline_ms: u64,
    initial_delay: Option<InitialDelay>,
    sync_deadline_ms: u64,
    initial_rebalance_delay_ms: u64,
    next_ticket: u64,
    next_seq: u64,
    salt: u64,
    join_answers: BTreeMap<u64, (u64, JoinAnswer)>,
    sync_answers: BTreeMap<u64, (u64, SyncAnswer)>,
}

impl ClassicGroup {
    /// An empty group (a group is created by its first JoinGroup or OffsetCommit).
    pub fn new(now_ms: u64, initial_rebalance_delay_ms: u64, salt: u64) -> ClassicGroup {
        ClassicGroup {
            state: ClassicState::Empty,
            state_since_ms: now_ms,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            rebalance_deadline_ms: 0,
            initial_delay: None,
            sync_deadline_ms: 0,
            initial_rebalance_delay_ms,
            next_ticket: 1,
            next_seq: 0,
            salt,
            join_answers: BTreeMap::new(),
            sync_answers: BTreeMap::new(),
        }
    }

    pub fn state(&self) -> ClassicState {
        self.state
    }

    pub fn state_since_ms(&self) -> u64 {
        self.state_since_ms
    }

    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }

    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    pub fn protocol_name(&self) -> Option<&str> {
        self.protocol_name.as_deref()
    }

    pub fn leader_id(&self) -> Option<&str> {
        self.leader_id.as_deref()
    }

    pub fn members(&self) -> impl Iterator<Item = &ClassicMember> {
        self.members.values()
    }

    pub fn member(&self, member_id: &str) -> Option<&ClassicMember> {
        self.members.get(member_id)
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn pending_count(&self) -> usize {
        self.pending_members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending_members.is_empty()
    }

    /// The member id a group.instance.id maps to.
    pub fn static_member(&self, instance_id: &str) -> Option<&str> {
        self.static_members.get(instance_id).map(String::as_str)
    }

    /// Every change of state goes through here (the transition table).
    fn transition(&mut self, to: ClassicState, now_ms: u64) {
        assert!(
            to.can_follow(self.state),
            "illegal classic group transition {:?} -> {to:?}",
            self.state
        );
        self.state = to;
        self.state_since_ms = now_ms;
    }

    fn ticket(&mut self) -> u64 {
        let t = self.next_ticket;
        self.next_ticket += 1;
        t
    }

    fn new_member_id(&mut self, client_id: &str) -> String {
        self.next_seq += 1;
        format!(
            "{client_id}-{}",
            Uuid::from_u64_pair(self.salt, self.next_seq).hyphenated()
        )
    }

    fn answer_join(&mut self, ticket: u64, answer: JoinAnswer, now_ms: u64) {
        self.join_answers.insert(ticket, (now_ms, answer));
    }

    fn answer_sync(&mut self, ticket: u64, answer: SyncAnswer, now_ms: u64) {
        self.sync_answers.insert(ticket, (now_ms, answer));
    }

    /// The largest rebalance timeout of the members (Kafka's group rebalance timeout).
    fn rebalance_timeout_ms(&self) -> u64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    /// Protocols every member supports.
    fn candidate_protocols(&self) -> BTreeSet<String> {
        let mut members = self.members.values();
        let Some(first) = members.next() else {
            return BTreeSet::new();
        };
        let mut set: BTreeSet<String> = first.protocols.iter().map(|(n, _)| n.clone()).collect();
        for m in members {
            set.retain(|name| m.protocols.iter().any(|(n, _)| n == name));
        }
        set
    }

    /// Kafka's `supportsProtocols`: whether a member with these protocols may join.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            !protocol_type.is_empty() && !protocols.is_empty()
        } else {
            let candidates = self.candidate_protocols();
            self.protocol_type.as_deref() == Some(protocol_type)
                && protocols.iter().any(|(n, _)| candidates.contains(n))
        }
    }

    /// The protocol with the most first-choice votes among those every member supports; ties
    /// go to the earliest member's preference.
    fn select_protocol(&self) -> String {
        let candidates = self.candidate_protocols();
        assert!(!candidates.is_empty(), "members always share a protocol");
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            let vote = m
                .protocols
                .iter()
                .find(|(n, _)| candidates.contains(n))
                .expect("a member supports every candidate");
            *votes.entry(vote.0.as_str()).or_default() += 1;
        }
        let max = *votes.values().max().expect("members vote");
        let earliest = self
            .members
            .values()
            .min_by_key(|m| m.seq)
            .expect("members exist");
        earliest
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .find(|n| votes.get(n) == Some(&max))
            .expect("the winner is a candidate the earliest member supports")
            .to_string()
    }

    /// The current generation's JoinGroup answer for a member (the leader gets the members).
    fn current_answer(&self, member_id: &str, skip_assignment: bool) -> JoinAnswer {
        let protocol = self.protocol_name.clone();
        let is_leader = self.leader_id.as_deref() == Some(member_id);
        let members = if is_leader {
            let name = protocol.as_deref().unwrap_or("");
            let mut ms: Vec<&ClassicMember> = self.members.values().collect();
            ms.sort_by_key(|m| m.seq);
            ms.iter()
                .map(|m| JoinedMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    metadata: m.metadata(name).cloned().unwrap_or_default(),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinAnswer {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: protocol,
            leader: self.leader_id.clone().unwrap_or_default(),
            skip_assignment,
            member_id: member_id.to_string(),
            members,
        }
    }

    // ---- JoinGroup ----------------------------------------------------------------------

    /// JoinGroup.
    pub fn join(&mut self, req: &JoinRequest, now_ms: u64) -> JoinStep {
        self.tick(now_ms);
        let session = req.session_timeout_ms;
        if session < 0
            || (session as u64) < GROUP_MIN_SESSION_TIMEOUT_MS
            || (session as u64) > GROUP_MAX_SESSION_TIMEOUT_MS
        {
            return JoinStep::Done(JoinAnswer::error(
                GroupError::InvalidSessionTimeout,
                &req.member_id,
            ));
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            return JoinStep::Done(JoinAnswer::error(
                GroupError::InconsistentProtocol,
                &req.member_id,
            ));
        }
        if req.member_id.is_empty() {
            self.join_unknown(req, now_ms)
        } else {
            self.join_known(req, now_ms)
        }
    }

    fn join_unknown(&mut self, req: &JoinRequest, now_ms: u64) -> JoinStep {
        if self.members.len() + self.pending_members.len() >= GROUP_MEMBERS_MAX {
            return JoinStep::Done(JoinAnswer::error(GroupError::GroupFull, ""));
        }
        let member_id = self.new_member_id(&req.client_id);
        if let Some(instance) = &req.group_instance_id {
            if let Some(old) = self.static_members.get(instance).cloned() {
                return self.replace_static_member(&old, &member_id, req, now_ms);
            }
            return self.add_member_and_rebalance(&member_id, req, now_ms);
        }
        if req.api_version >= 4 {
            let deadline = now_ms + req.session_timeout_ms as u64;
            self.pending_members.insert(member_id.clone(), deadline);
            return JoinStep::Done(JoinAnswer::error(GroupError::MemberIdRequired, &member_id));
        }
        self.add_member_and_rebalance(&member_id, req, now_ms)
    }

    fn join_known(&mut self, req: &JoinRequest, now_ms: u64) -> JoinStep {
        let member_id = req.member_id.as_str();
        if self.pending_members.remove(member_id).is_some() {
            return self.add_member_and_rebalance(member_id, req, now_ms);
        }
        if let Err(e) = self.validate_member(member_id, req.group_instance_id.as_deref()) {
            return JoinStep::Done(JoinAnswer::error(e, member_id));
        }
        let member = &self.members[member_id];
        let same_protocols = member.protocols == req.protocols;
        let is_leader = self.leader_id.as_deref() == Some(member_id);
        match self.state {
            ClassicState::PreparingRebalance => self.update_member_and_wait(req, now_ms),
            ClassicState::CompletingRebalance if same_protocols => {
                self.touch(member_id, now_ms);
                JoinStep::Done(self.current_answer(member_id, false))
            }
            ClassicState::Stable if same_protocols && !is_leader => {
                self.touch(member_id, now_ms);
                JoinStep::Done(self.current_answer(member_id, false))
            }
            ClassicState::CompletingRebalance | ClassicState::Stable => {
                let step = self.update_member_and_wait(req, now_ms);
                self.prepare_rebalance(now_ms);
                self.maybe_complete_join(now_ms);
                step
            }
            ClassicState::Empty | ClassicState::Dead => {
                unreachable!("a group with a member is neither Empty nor Dead")
            }
        }
    }

    fn touch(&mut self, member_id: &str, now_ms: u64) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_heartbeat_ms = now_ms;
        }
    }

    /// Kafka's `validateMember`: a static member must be the instance's current member id.
    fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        match instance_id {
            Some(instance) => match self.static_members.get(instance) {
                None => Err(GroupError::UnknownMember),
                Some(current) if current != member_id => Err(GroupError::FencedInstance),
                Some(_) => Ok(()),
            },
            None if self.members.contains_key(member_id) => Ok(()),
            None => Err(GroupError::UnknownMember),
        }
    }

    fn update_member_and_wait(&mut self, req: &JoinRequest, now_ms: u64) -> JoinStep {
        let ticket = self.ticket();
        let member = self
            .members
            .get_mut(&req.member_id)
            .expect("validated member");
        member.protocols = req.protocols.clone();
        member.session_timeout_ms = req.session_timeout_ms as u64;
        member.rebalance_timeout_ms = rebalance_timeout(req);
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.last_heartbeat_ms = now_ms;
        let superseded = member.join_ticket.replace(ticket);
        if let Some(old) = superseded {
            self.answer_join(
                old,
                JoinAnswer::error(GroupError::RebalanceInProgress, &req.member_id),
                now_ms,
            );
        }
        self.maybe_complete_join(now_ms);
        JoinStep::Wait(ticket)
    }

    fn add_member_and_rebalance(
        &mut self,
        member_id: &str,
        req: &JoinRequest,
        now_ms: u64,
    ) -> JoinStep {
        let ticket = self.ticket();
        self.next_seq += 1;
        let member = ClassicMember {
            member_id: member_id.to_string(),
            group_instance_id: req.group_instance_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            session_timeout_ms: req.session_timeout_ms as u64,
            rebalance_timeout_ms: rebalance_timeout(req),
            protocol_type: req.protocol_type.clone(),
            protocols: req.protocols.clone(),
            assignment: Bytes::new(),
            last_heartbeat_ms: now_ms,
            join_ticket: Some(ticket),
            sync_ticket: None,
            pending_sync: false,
            seq: self.next_seq,
        };
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member_id.to_string());
        }
        if let Some(instance) = &req.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.to_string());
        }
        self.members.insert(member_id.to_string(), member);
        if let Some(delay) = &mut self.initial_delay {
            delay.new_member_added = true;
        }
        if self.state != ClassicState::PreparingRebalance {
            self.prepare_rebalance(now_ms);
        }
        self.maybe_complete_join(now_ms);
        JoinStep::Wait(ticket)
    }

    fn replace_static_member(
        &mut self,
        old_id: &str,
        new_id: &str,
        req: &JoinRequest,
        now_ms: u64,
    ) -> JoinStep {
        let mut member = self
            .members
            .remove(old_id)
            .expect("static members are members");
        let instance = req.group_instance_id.clone().expect("static join");
        // The replaced member's parked requests are fenced.
        if let Some(t) = member.join_ticket.take() {
            self.answer_join(
                t,
                JoinAnswer::error(GroupError::FencedInstance, old_id),
                now_ms,
            );
        }
        if let Some(t) = member.sync_ticket.take() {
            self.answer_sync(t, SyncAnswer::error(GroupError::FencedInstance), now_ms);
        }
        let old_protocols = std::mem::replace(&mut member.protocols, req.protocols.clone());
        member.member_id = new_id.to_string();
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.session_timeout_ms = req.session_timeout_ms as u64;
        member.rebalance_timeout_ms = rebalance_timeout(req);
        member.last_heartbeat_ms = now_ms;
        self.members.insert(new_id.to_string(), member);
        self.static_members.insert(instance, new_id.to_string());
        if self.leader_id.as_deref() == Some(old_id) {
            self.leader_id = Some(new_id.to_string());
        }
        match self.state {
            ClassicState::Stable => {
                let selected = self.select_protocol();
                if self.protocol_name.as_deref() == Some(selected.as_str()) {
                    // Kafka answers at once with the current generation; a static leader is
                    // told to skip the assignment (v9+) and gets the members.
                    let is_leader = self.leader_id.as_deref() == Some(new_id);
                    let mut answer = self.current_answer(new_id, is_leader);
                    if !is_leader || req.api_version < 9 {
                        answer.members.clear();
                        answer.skip_assignment = false;
                    }
                    return JoinStep::Done(answer);
                }
                self.members.get_mut(new_id).expect("inserted").protocols = req.protocols.clone();
                let _ = old_protocols;
                let ticket = self.ticket();
                self.members.get_mut(new_id).expect("inserted").join_ticket = Some(ticket);
                self.prepare_rebalance(now_ms);
                self.maybe_complete_join(now_ms);
                JoinStep::Wait(ticket)
            }
            ClassicState::CompletingRebalance | ClassicState::PreparingRebalance => {
                let ticket = self.ticket();
                self.members.get_mut(new_id).expect("inserted").join_ticket = Some(ticket);
                if self.state == ClassicState::CompletingRebalance {
                    self.prepare_rebalance(now_ms);
                }
                self.maybe_complete_join(now_ms);
                JoinStep::Wait(ticket)
            }
            ClassicState::Empty | ClassicState::Dead => {
                unreachable!("a group with a static member has members")
            }
        }
    }

    /// Starts a rebalance (Kafka's `prepareRebalance`).
    fn prepare_rebalance(&mut self, now_ms: u64) {
        if self.state == ClassicState::CompletingRebalance {
            // Members waiting for the leader's assignment must rejoin.
            let waiting: Vec<u64> = self
                .members
                .values_mut()
                .filter_map(|m| m.sync_ticket.take())
                .collect();
            for t in waiting {
                self.answer_sync(
                    t,
                    SyncAnswer::error(GroupError::RebalanceInProgress),
                    now_ms,
                );
            }
        }
        for m in self.members.values_mut() {
            m.pending_sync = false;
        }
        let timeout = self.rebalance_timeout_ms();
        if self.state == ClassicState::Empty && self.initial_rebalance_delay_ms > 0 {
            let delay = self.initial_rebalance_delay_ms;
            self.initial_delay = Some(InitialDelay {
                until_ms: now_ms + delay,
                remaining_ms: timeout.saturating_sub(delay),
                new_member_added: false,
            });
        }
        self.rebalance_deadline_ms = now_ms + timeout;
        self.transition(ClassicState::PreparingRebalance, now_ms);
    }

    /// Completes the join phase when every member rejoined or the deadline passed.
    fn maybe_complete_join(&mut self, now_ms: u64) {
        if self.state != ClassicState::PreparingRebalance {
            return;
        }
        if let Some(delay) = self.initial_delay {
            if now_ms < delay.until_ms {
                return;
            }
            if delay.new_member_added && delay.remaining_ms > 0 {
                let next = self.initial_rebalance_delay_ms.min(delay.remaining_ms);
                self.initial_delay = Some(InitialDelay {
                    until_ms: now_ms + next,
                    remaining_ms: delay.remaining_ms - next,
                    new_member_added: false,
                });
                return;
            }
            self.initial_delay = None;
            self.complete_join(now_ms);
            return;
        }
        let all_joined = self.pending_members.is_empty()
            && self.members.values().all(ClassicMember::awaiting_join);
        if all_joined || now_ms >= self.rebalance_deadline_ms {
            self.complete_join(now_ms);
        }
    }

    fn complete_join(&mut self, now_ms: u64) {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join())
            .map(|m| m.member_id.clone())
            .collect();
        for id in gone {
            self.remove_member(&id, now_ms);
        }
        self.generation_id += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.transition(ClassicState::Empty, now_ms);
            return;
        }
        self.protocol_name = Some(self.select_protocol());
        if self
            .leader_id
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader_id = self
                .members
                .values()
                .min_by_key(|m| m.seq)
                .map(|m| m.member_id.clone());
        }
        self.transition(ClassicState::CompletingRebalance, now_ms);
        self.sync_deadline_ms = now_ms + self.rebalance_timeout_ms();
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let answer = self.current_answer(&id, false);
            let m = self.members.get_mut(&id).expect("listed");
            let ticket = m
                .join_ticket
                .take()
                .expect("every remaining member rejoined");
            m.pending_sync = true;
            m.last_heartbeat_ms = now_ms;
            self.answer_join(ticket, answer, now_ms);
        }
    }

    /// Removes a member (its parked requests get UNKNOWN_MEMBER_ID).
    fn remove_member(&mut self, member_id: &str, now_ms: u64) {
        let Some(m) = self.members.remove(member_id) else {
            return;
        };
        if let Some(instance) = &m.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        if let Some(t) = m.join_ticket {
            self.answer_join(
                t,
                JoinAnswer::error(GroupError::UnknownMember, member_id),
                now_ms,
            );
        }
        if let Some(t) = m.sync_ticket {
            self.answer_sync(t, SyncAnswer::error(GroupError::UnknownMember), now_ms);
        }
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = self
                .members
                .values()
                .min_by_key(|m| m.seq)
                .map(|m| m.member_id.clone());
        }
    }

    /// Removes a member and moves the group on (Kafka's `removeMemberAndUpdateClassicGroup`).
    fn remove_member_and_update(&mut self, member_id: &str, now_ms: u64) {
        self.remove_member(member_id, now_ms);
        match self.state {
            ClassicState::Stable | ClassicState::CompletingRebalance => {
                self.prepare_rebalance(now_ms);
                self.maybe_complete_join(now_ms);
            }
            ClassicState::PreparingRebalance => self.maybe_complete_join(now_ms),
            ClassicState::Empty | ClassicState::Dead => {}
        }
    }

    /// The answer to a parked JoinGroup, once there is one.
    pub fn poll_join(&mut self, ticket: u64, now_ms: u64) -> Option<JoinAnswer> {
        self.tick(now_ms);
        self.join_answers.remove(&ticket).map(|(_, a)| a)
    }

    // ---- SyncGroup ----------------------------------------------------------------------

    pub fn sync(&mut self, req: &SyncRequest, now_ms: u64) -> SyncStep {
        self.tick(now_ms);
        if let Err(e) = self.validate_member(&req.member_id, req.group_instance_id.as_deref()) {
            return SyncStep::Done(SyncAnswer::error(e));
        }
        if req.generation_id != self.generation_id {
            return SyncStep::Done(SyncAnswer::error(GroupError::IllegalGeneration));
        }
        if req
            .protocol_type
            .as_ref()
            .is_some_and(|t| Some(t) != self.protocol_type.as_ref())
            || req
                .protocol_name
                .as_ref()
                .is_some_and(|n| Some(n) != self.protocol_name.as_ref())
        {
            return SyncStep::Done(SyncAnswer::error(GroupError::InconsistentProtocol));
        }
        match self.state {
            ClassicState::PreparingRebalance => {
                SyncStep::Done(SyncAnswer::error(GroupError::RebalanceInProgress))
            }
            ClassicState::CompletingRebalance => {
                let ticket = self.ticket();
                let m = self.members.get_mut(&req.member_id).expect("validated");
                m.pending_sync = false;
                m.last_heartbeat_ms = now_ms;
                let superseded = m.sync_ticket.replace(ticket);
                if let Some(old) = superseded {
                    self.answer_sync(
                        old,
                        SyncAnswer::error(GroupError::RebalanceInProgress),
                        now_ms,
                    );
                }
                if self.leader_id.as_deref() == Some(req.member_id.as_str()) {
                    let given: BTreeMap<&str, &Bytes> = req
                        .assignments
                        .iter()
                        .map(|(id, a)| (id.as_str(), a))
                        .collect();
                    for m in self.members.values_mut() {
                        m.assignment = given
                            .get(m.member_id.as_str())
                            .map(|a| (*a).clone())
                            .unwrap_or_default();
                    }
                    self.transition(ClassicState::Stable, now_ms);
                    let waiting: Vec<(u64, Bytes)> = self
                        .members
                        .values_mut()
                        .filter_map(|m| m.sync_ticket.take().map(|t| (t, m.assignment.clone())))
                        .collect();
                    for (t, assignment) in waiting {
                        let answer = self.sync_answer(assignment);
                        self.answer_sync(t, answer, now_ms);
                    }
                }
                SyncStep::Wait(ticket)
            }
            ClassicState::Stable => {
                let m = self.members.get_mut(&req.member_id).expect("validated");
                m.pending_sync = false;
                m.last_heartbeat_ms = now_ms;
                let assignment = m.assignment.clone();
                SyncStep::Done(self.sync_answer(assignment))
            }
            ClassicState::Empty | ClassicState::Dead => {
                SyncStep::Done(SyncAnswer::error(GroupError::UnknownMember))
            }
        }
    }

    fn sync_answer(&self, assignment: Bytes) -> SyncAnswer {
        SyncAnswer {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        }
    }

    pub fn poll_sync(&mut self, ticket: u64, now_ms: u64) -> Option<SyncAnswer> {
        self.tick(now_ms);
        self.sync_answers.remove(&ticket).map(|(_, a)| a)
    }

    // ---- Heartbeat, LeaveGroup ------------------------------------------------------------

    /// Heartbeat: the error code (0: none).
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        self.tick(now_ms);
        self.validate_member(member_id, instance_id)?;
        if generation_id != self.generation_id {
            return Err(GroupError::IllegalGeneration);
        }
        self.touch(member_id, now_ms);
        match self.state {
            ClassicState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            ClassicState::CompletingRebalance | ClassicState::Stable => Ok(()),
            ClassicState::Empty | ClassicState::Dead => Err(GroupError::UnknownMember),
        }
    }

    /// LeaveGroup of one member (by member id, or by instance id for a static member).
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        self.tick(now_ms);
        if let Some(instance) = instance_id {
            let current = self
                .static_members
                .get(instance)
                .cloned()
                .ok_or(GroupError::UnknownMember)?;
            if !member_id.is_empty() && member_id != current {
                return Err(GroupError::FencedInstance);
            }
            self.remove_member_and_update(&current, now_ms);
            return Ok(());
        }
        if self.pending_members.remove(member_id).is_some() {
            self.maybe_complete_join(now_ms);
            return Ok(());
        }
        if !self.members.contains_key(member_id) {
            return Err(GroupError::UnknownMember);
        }
        self.remove_member_and_update(member_id, now_ms);
        Ok(())
    }

    // ---- timers ---------------------------------------------------------------------------

    /// Runs the deadlines due at `now_ms`: pending members, session timeouts, the pending-sync
    /// timeout, the join phase's end; forgets answers nobody polled.
    pub fn tick(&mut self, now_ms: u64) {
        let expired_pending: Vec<String> = self
            .pending_members
            .iter()
            .filter(|(_, deadline)| **deadline <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired_pending {
            self.pending_members.remove(id);
        }
        if !expired_pending.is_empty() {
            self.maybe_complete_join(now_ms);
        }
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.join_ticket.is_none()
                    && m.sync_ticket.is_none()
                    && m.last_heartbeat_ms + m.session_timeout_ms <= now_ms
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in expired {
            self.remove_member_and_update(&id, now_ms);
        }
        if self.state == ClassicState::CompletingRebalance && now_ms >= self.sync_deadline_ms {
            let unsynced: Vec<String> = self
                .members
                .values()
                .filter(|m| m.pending_sync)
                .map(|m| m.member_id.clone())
                .collect();
            for id in unsynced {
                self.remove_member_and_update(&id, now_ms);
            }
        }
        self.maybe_complete_join(now_ms);
        let keep_from = now_ms.saturating_sub(GROUP_ANSWER_KEEP_MS);
        self.join_answers.retain(|_, (at, _)| *at >= keep_from);
        self.sync_answers.retain(|_, (at, _)| *at >= keep_from);
        self.check();
    }

    /// The group's invariants (assertions stay on).
    pub fn check(&self) {
        let members = &self.members;
        match self.state {
            ClassicState::Empty => {
                assert!(members.is_empty(), "an Empty group has no members");
                assert!(self.protocol_name.is_none());
            }
            ClassicState::CompletingRebalance | ClassicState::Stable => {
                assert!(!members.is_empty(), "{:?} with no members", self.state);
                assert!(self.protocol_name.is_some());
                assert!(members.values().all(|m| !m.awaiting_join()));
            }
            ClassicState::PreparingRebalance | ClassicState::Dead => {}
        }
        if self.state != ClassicState::CompletingRebalance {
            assert!(members.values().all(|m| m.sync_ticket.is_none()));
        }
        match &self.leader_id {
            Some(l) => assert!(members.contains_key(l), "the leader is a member"),
            None => assert!(members.is_empty(), "a group with members has a leader"),
        }
        for (instance, id) in &self.static_members {
            let m = members.get(id).expect("static members are members");
            assert_eq!(m.group_instance_id.as_deref(), Some(instance.as_str()));
        }
        for m in members.values() {
            assert_eq!(
                m.protocol_type,
                *self.protocol_type.as_ref().expect("typed")
            );
        }
    }

    /// Members as DescribeGroups reports them (metadata and assignment only when Stable, as
    /// Kafka).
    pub fn describe_members(&self) -> Vec<DescribedMember> {
        let stable = self.state == ClassicState::Stable;
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        let mut ms: Vec<&ClassicMember> = self.members.values().collect();
        ms.sort_by_key(|m| m.seq);
        ms.into_iter()
            .map(|m| DescribedMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: if stable {
                    m.metadata(protocol).cloned().unwrap_or_default()
                } else {
                    Bytes::new()
                },
                assignment: if stable {
                    m.assignment.clone()
                } else {
                    Bytes::new()
                },
            })
            .collect()
    }

    /// Topics the members subscribe to (from the `consumer` protocol's subscription metadata);
    /// `None` if the group is not a consumer group or a subscription does not parse.
    pub fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(parse_subscription_topics(m.metadata(protocol)?)?);
        }
        Some(topics)
    }

    /// OffsetCommit's membership check (Kafka's `ClassicGroup.validateOffsetCommit`).
    /// TxnOffsetCommit's check (Kafka's `validateOffsetCommit` with `isTransactional`): as an
    /// OffsetCommit's, except that a commit without member id and generation is accepted from
    /// a non-empty group (older TxnOffsetCommit versions carry neither) and a rebalance in
    /// progress does not refuse it.
    pub fn validate_txn_offset_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        if generation_id < 0 && self.state == ClassicState::Empty {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.validate_member(member_id, instance_id)?;
            if generation_id != self.generation_id {
                return Err(GroupError::IllegalGeneration);
            }
        }
        Ok(())
    }

    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        if generation_id < 0 && self.state == ClassicState::Empty {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.validate_member(member_id, instance_id)?;
            if generation_id != self.generation_id {
                return Err(GroupError::IllegalGeneration);
            }
        } else if self.state != ClassicState::Empty {
            return Err(GroupError::UnknownMember);
        }
        if self.state == ClassicState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }
}

fn rebalance_timeout(req: &JoinRequest) -> u64 {
    if req.rebalance_timeout_ms > 0 {
        req.rebalance_timeout_ms as u64
    } else {
        req.session_timeout_ms.max(0) as u64
    }
}

/// The topics of a `ConsumerProtocolSubscription` (any version: version i16, then the topic
/// array as i32 count and i16-length strings).
pub fn parse_subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
        let s = metadata.get(*at..*at + n)?;
        *at += n;
        Some(s)
    };
    let version = i16::from_be_bytes(take(&mut at, 2)?.try_into().ok()?);
    if version < 0 {
        return None;
    }
    let count = i32::from_be_bytes(take(&mut at, 4)?.try_into().ok()?);
    if count < 0 || count as usize > metadata.len() / 2 {
        return None;
    }
    let mut topics = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = i16::from_be_bytes(take(&mut at, 2)?.try_into().ok()?);
        if len < 0 {
            return None;
        }
        let name = take(&mut at, len as usize)?;
        topics.push(String::from_utf8(name.to_vec()).ok()?);
    }
    Some(topics)
}
