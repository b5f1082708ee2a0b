//! Share-group coordinator state (KIP-932), kept on the group's shard (`model::group_shard`).
//!
//! Pure and synchronous: time comes in as `now_ms`, topics and group configs come from the
//! caller's registry snapshot. The wire handlers are `share_api` (heartbeat) and `share_admin`
//! (describe, list).
//!
//! The rules are Kafka 4.4's group coordinator (`GroupMetadataManager.shareGroupHeartbeat`,
//! `ShareGroupAssignmentBuilder`, `SimpleAssignor`):
//! - Members: client-generated member ids (at most 36 bytes), join with epoch 0 (a known member
//!   may rejoin with 0), leave with -1, removed after `share.session.timeout.ms` without a
//!   heartbeat.
//! - Group epoch: goes up when a member joins, leaves, times out or changes its subscription, and
//!   when a subscribed topic appears, disappears or changes its partition count.
//! - Target assignment: recomputed on the first heartbeat after the group epoch moved past the
//!   assignment epoch, which then becomes the group epoch ([`assign`]).
//! - Reconciliation: only the heartbeating member is reconciled — it moves to the assignment
//!   epoch and its target partitions (share groups revoke nothing first), keeping its old epoch
//!   as the previous one. Other members learn of a new assignment in their own next heartbeat,
//!   so nobody is fenced by someone else's join.
//! - Epoch check: a heartbeat may carry the member's epoch or its previous epoch (the response
//!   that moved it may have been lost); a greater or an older epoch is FENCED_MEMBER_EPOCH.
//! - Responses carry the assignment only on a join (epoch 0) or when it changed.
//! - Deviations: the assignment is computed at once (Kafka defers it by up to
//!   `share.assignment.interval.ms` and waits for new share partitions to be initialised, so
//!   its first answer to a join is often empty); a group the coordinator does not know answers
//!   UNKNOWN_MEMBER_ID, not GROUP_ID_NOT_FOUND (membership does not survive a restart here, and
//!   the consumers must rejoin rather than fail).
//!
//! Group configs (`share.*`, [`ShareGroupConfig`]) live in the topic registry, which every shard
//! has; they are set through IncrementalAlterConfigs on GROUP resources and checked against
//! Kafka's bounds (`config::GROUP_CONFIGS`, then the cross-config rules here).

use super::registry::TopicRegistry;
use crate::config::{parse_iso_duration_ms, validate_group_config};
use crate::constants::{
    SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MAX, SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MIN,
    SHARE_HEARTBEAT_INTERVAL_MS_DEFAULT, SHARE_MEMBER_ID_BYTES_MAX,
    SHARE_SESSION_TIMEOUT_MS_DEFAULT,
};
use crate::share::ShareConfig;
use crate::share_txn::TxnConfig;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use uuid::Uuid;

/// `share.auto.offset.reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    #[default]
    Latest,
    Earliest,
    /// `by_duration:<ISO-8601>`: the first record at most this many milliseconds old.
    ByDuration(u64),
}

/// `share.acknowledgement.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AckMode {
    Implicit,
    #[default]
    Explicit,
    /// Plain acknowledgements are refused; records are acknowledged inside transactions.
    Transactional,
}

/// A share group's configs (defaults unless set); the names, ranges and defaults are
/// `config::GROUP_CONFIGS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareGroupConfig {
    pub auto_offset_reset: AutoOffsetReset,
    pub ack_mode: AckMode,
    pub share: ShareConfig,
    pub txn: TxnConfig,
    /// `share.renew.acknowledge.enable` (KIP-1222; default true): whether acknowledgements
    /// may RENEW acquisition locks; when false a RENEW gets INVALID_RECORD_STATE.
    pub renew_acknowledge_enable: bool,
    /// `share.session.timeout.ms`.
    pub session_timeout_ms: u64,
    /// `share.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: u64,
    /// `errors.deadletterqueue.topic.name` (KIP-1191): where records archived by a REJECT or
    /// at the delivery count limit are copied (`shard::share_dlq`); `None` when blank.
    pub dlq_topic: Option<String>,
    /// `errors.deadletterqueue.copy.record.enable`: copy the original key and value too
    /// (otherwise a DLQ record carries only the context headers).
    pub dlq_copy_record: bool,
    /// `share.isolation.level=read_committed`: acquire only below the last stable offset and
    /// archive the records of aborted transactions (`ShardState::share_fetch`).
    pub read_committed: bool,
    /// The explicitly set values, by name, canonical (what DescribeConfigs reports as dynamic).
    pub explicit: BTreeMap<String, String>,
}

impl Default for ShareGroupConfig {
    fn default() -> ShareGroupConfig {
        ShareGroupConfig {
            auto_offset_reset: AutoOffsetReset::default(),
            ack_mode: AckMode::default(),
            share: ShareConfig::default(),
            txn: TxnConfig::default(),
            renew_acknowledge_enable: true,
            session_timeout_ms: SHARE_SESSION_TIMEOUT_MS_DEFAULT,
            heartbeat_interval_ms: SHARE_HEARTBEAT_INTERVAL_MS_DEFAULT,
            dlq_topic: None,
            dlq_copy_record: false,
            read_committed: false,
            explicit: BTreeMap::new(),
        }
    }
}

impl ShareGroupConfig {
    /// Recomputes the typed values from `explicit`; errors are Kafka's messages (INVALID_CONFIG).
    fn from_explicit(explicit: BTreeMap<String, String>) -> Result<ShareGroupConfig, String> {
        let mut out = ShareGroupConfig::default();
        for (name, value) in &explicit {
            let canonical = validate_group_config(name, value).map_err(|e| e.to_string())?;
            let num = || canonical.parse::<u64>().map_err(|e| format!("{name}: {e}"));
            match name.as_str() {
                "share.auto.offset.reset" => {
                    out.auto_offset_reset = match canonical.as_str() {
                        "earliest" => AutoOffsetReset::Earliest,
                        "latest" => AutoOffsetReset::Latest,
                        other => AutoOffsetReset::ByDuration(
                            other
                                .strip_prefix("by_duration:")
                                .and_then(parse_iso_duration_ms)
                                .ok_or_else(|| format!("{name}: {other} is not a duration"))?,
                        ),
                    }
                }
                "share.delivery.count.limit" => {
                    out.share.delivery_count_limit =
                        u16::try_from(num()?).map_err(|e| format!("{name}: {e}"))?
                }
                "share.partition.max.record.locks" => {
                    out.share.partition_max_record_locks =
                        u32::try_from(num()?).map_err(|e| format!("{name}: {e}"))?
                }
                "share.record.lock.duration.ms" => out.share.record_lock_duration_ms = num()?,
                "share.session.timeout.ms" => out.session_timeout_ms = num()?,
                "share.heartbeat.interval.ms" => out.heartbeat_interval_ms = num()?,
                "share.acknowledgement.mode" => {
                    out.ack_mode = match canonical.as_str() {
                        "implicit" => AckMode::Implicit,
                        "transactional" => AckMode::Transactional,
                        _ => AckMode::Explicit,
                    }
                }
                "share.renew.acknowledge.enable" => {
                    out.renew_acknowledge_enable = canonical == "true"
                }
                "errors.deadletterqueue.topic.name" => {
                    out.dlq_topic = Some(canonical.clone()).filter(|t| !t.trim().is_empty())
                }
                "errors.deadletterqueue.copy.record.enable" => {
                    out.dlq_copy_record = canonical == "true"
                }
                "share.isolation.level" => out.read_committed = canonical == "read_committed",
                "share.transaction.timeout.ms" => out.txn.timeout_ms_default = num()?,
                "share.transaction.max.pending" => {
                    out.txn.max_pending =
                        usize::try_from(num()?).map_err(|e| format!("{name}: {e}"))?
                }
                _ => {}
            }
            out.explicit.insert(name.clone(), canonical);
        }
        // Kafka's bound on record locks; a transactional group's LOCKED records count against
        // it until their checkpoint commits, so it may go up to the engine's limit (README).
        if out.ack_mode != AckMode::Transactional
            && out.share.partition_max_record_locks > SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MAX
        {
            return Err(format!(
                "share.partition.max.record.locks must be in the range \
                 {SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MIN} to \
                 {SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MAX} inclusive. (Lockstep allows more \
                 only with share.acknowledgement.mode=transactional.)"
            ));
        }
        if out.session_timeout_ms <= out.heartbeat_interval_ms {
            return Err(
                "share.session.timeout.ms must be greater than share.heartbeat.interval.ms".into(),
            );
        }
        out.share.validate().map_err(|e| e.to_string())?;
        out.txn.validate()?;
        Ok(out)
    }

    /// Applies SET (`Some`) / DELETE (`None`) changes atomically: all or nothing.
    pub fn apply(&mut self, changes: &[(String, Option<String>)]) -> Result<(), String> {
        let mut explicit = self.explicit.clone();
        for (name, value) in changes {
            match value {
                Some(v) => {
                    explicit.insert(name.clone(), v.clone());
                }
                None => {
                    explicit.remove(name);
                }
            }
        }
        *self = ShareGroupConfig::from_explicit(explicit)?;
        Ok(())
    }
}

/// One topic of a member's assignment.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AssignedTopic {
    pub topic_id: Uuid,
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// A member of a share group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareMember {
    pub member_id: String,
    pub member_epoch: i32,
    /// The epoch before the last move; a heartbeat carrying it is still accepted.
    pub previous_member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    /// The member's current assignment (what its last answer told it).
    pub assignment: Vec<AssignedTopic>,
    pub last_heartbeat_ms: u64,
}

/// A share group.
#[derive(Clone, Debug, Default)]
pub struct ShareGroup {
    pub group_epoch: i32,
    /// The group epoch the target assignment was computed at.
    pub assignment_epoch: i32,
    /// The target assignment of every member, computed at `assignment_epoch`.
    pub target: BTreeMap<String, Vec<AssignedTopic>>,
    /// The subscribed topics as the registry had them at the last check: name → (id, partitions).
    pub subscription_metadata: BTreeMap<String, (Uuid, i32)>,
    pub members: BTreeMap<String, ShareMember>,
}

/// A ShareGroupHeartbeat as the coordinator sees it.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// `None`: unchanged since the last heartbeat.
    pub subscribed: Option<Vec<String>>,
    /// The request header's client id, and the client's address as Kafka prints it
    /// (`/IP`); kept for ShareGroupDescribe.
    pub client_id: String,
    pub client_host: String,
}

/// What DeleteGroups did to a share group's membership on its shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupDeletion {
    /// It was coordinated here, with no members, and is forgotten now.
    Deleted,
    /// This shard does not coordinate it.
    NotHere,
    /// It has members and stays (NON_EMPTY_GROUP).
    HasMembers,
}

/// Why a ShareGroupHeartbeat was refused; the handler maps it to the Kafka code
/// (`server::codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShareHeartbeatError {
    /// The member (or its group) is not known here: it must rejoin with epoch 0.
    UnknownMember,
    /// The member's epoch is neither its current nor its previous one.
    FencedMemberEpoch,
    /// A malformed heartbeat (empty ids, a bad epoch, no subscription on a join).
    InvalidRequest,
}

/// The answer to a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    /// `None`: accepted.
    pub error: Option<ShareHeartbeatError>,
    pub error_message: Option<String>,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// `None`: no assignment in the answer (unchanged, leave, error).
    pub assignment: Option<Vec<AssignedTopic>>,
}

impl HeartbeatAnswer {
    fn error(error: ShareHeartbeatError, message: Option<String>) -> HeartbeatAnswer {
        HeartbeatAnswer {
            error: Some(error),
            error_message: message,
            member_id: None,
            member_epoch: 0,
            heartbeat_interval_ms: 0,
            assignment: None,
        }
    }
}

/// A member that left or was evicted: its acquired records must be released on the shards
/// of `partitions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Departed {
    pub group_id: String,
    pub member_id: String,
    pub partitions: Vec<AssignedTopic>,
}

/// Every share group coordinated by one shard.
#[derive(Debug, Default)]
pub struct ShareGroups {
    groups: HashMap<String, ShareGroup>,
}

fn unknown_member(group_id: &str, member_id: &str) -> HeartbeatAnswer {
    HeartbeatAnswer::error(
        ShareHeartbeatError::UnknownMember,
        Some(format!(
            "Member {member_id} is not a member of group {group_id}."
        )),
    )
}

/// Kafka's epoch check: the current epoch, or the previous one (the answer that moved the
/// member may have been lost).
fn check_epoch(member: &ShareMember, received: i32) -> Result<(), HeartbeatAnswer> {
    let fenced = |message: String| {
        Err(HeartbeatAnswer::error(
            ShareHeartbeatError::FencedMemberEpoch,
            Some(message),
        ))
    };
    if received > member.member_epoch {
        return fenced(format!(
            "The share group member has a greater member epoch ({received}) than the one known \
             by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
            member.member_epoch
        ));
    }
    if received < member.member_epoch && received != member.previous_member_epoch {
        return fenced(format!(
            "The share group member has a smaller member epoch ({received}) than the one known \
             by the group coordinator ({}), and it does not match the previous member epoch ({}). \
             The member must abandon all its partitions and rejoin.",
            member.member_epoch, member.previous_member_epoch
        ));
    }
    Ok(())
}

impl ShareGroups {
    pub fn new() -> ShareGroups {
        ShareGroups::default()
    }

    pub fn group(&self, group_id: &str) -> Option<&ShareGroup> {
        self.groups.get(group_id)
    }

    pub fn group_ids(&self) -> impl Iterator<Item = &String> + '_ {
        self.groups.keys()
    }

    /// DeleteGroups: forgets `group_id` if it has no members.
    pub fn delete_empty(&mut self, group_id: &str) -> GroupDeletion {
        match self.groups.get(group_id) {
            None => GroupDeletion::NotHere,
            Some(group) if !group.members.is_empty() => GroupDeletion::HasMembers,
            Some(_) => {
                self.groups.remove(group_id);
                GroupDeletion::Deleted
            }
        }
    }

    /// Handles one heartbeat. Returns the answer and the members that departed (a leave).
    pub fn heartbeat(
        &mut self,
        hb: &Heartbeat,
        registry: &TopicRegistry,
        now_ms: u64,
    ) -> (HeartbeatAnswer, Vec<Departed>) {
        match self.heartbeat_inner(hb, registry, now_ms) {
            Ok(done) => done,
            Err(answer) => (answer, vec![]),
        }
    }

    fn heartbeat_inner(
        &mut self,
        hb: &Heartbeat,
        registry: &TopicRegistry,
        now_ms: u64,
    ) -> Result<(HeartbeatAnswer, Vec<Departed>), HeartbeatAnswer> {
        let invalid = |message: &str| {
            Err(HeartbeatAnswer::error(
                ShareHeartbeatError::InvalidRequest,
                Some(message.to_string()),
            ))
        };
        // Kafka's request checks, in its order (the length check answers without a message).
        if hb.member_id.len() > SHARE_MEMBER_ID_BYTES_MAX {
            return Err(HeartbeatAnswer::error(
                ShareHeartbeatError::InvalidRequest,
                None,
            ));
        }
        if hb.member_id.is_empty() {
            return invalid("MemberId can't be empty.");
        }
        if hb.group_id.is_empty() {
            return invalid("GroupId can't be empty.");
        }
        if hb.rack_id.as_deref() == Some("") {
            return invalid("RackId can't be empty.");
        }
        if hb.member_epoch == 0 {
            if hb.subscribed.as_ref().is_none_or(|s| s.is_empty()) {
                return invalid("SubscribedTopicNames must be set in first request.");
            }
        } else if hb.member_epoch < -1 {
            return invalid("MemberEpoch is invalid.");
        }
        let config = registry.group_config(&hb.group_id);
        if hb.member_epoch == -1 {
            return self.leave(hb).map(|d| {
                (
                    HeartbeatAnswer {
                        error: None,
                        error_message: None,
                        member_id: Some(hb.member_id.clone()),
                        member_epoch: -1,
                        heartbeat_interval_ms: 0,
                        assignment: None,
                    },
                    vec![d],
                )
            });
        }
        // Kafka answers GROUP_ID_NOT_FOUND for a group it never had; Lockstep's membership does
        // not survive a restart, so a member of a group it forgot is told UNKNOWN_MEMBER_ID and
        // rejoins (GROUP_ID_NOT_FOUND is fatal to Kafka's consumers).
        if hb.member_epoch != 0 && !self.groups.contains_key(&hb.group_id) {
            return Err(unknown_member(&hb.group_id, &hb.member_id));
        }
        let group = self.groups.entry(hb.group_id.clone()).or_default();
        let mut bump = false;
        let old = match group.members.get(&hb.member_id) {
            None if hb.member_epoch != 0 => {
                return Err(unknown_member(&hb.group_id, &hb.member_id));
            }
            None => {
                bump = true;
                None
            }
            Some(member) => {
                // A known member may rejoin with epoch 0 (Kafka 4.4 accepts it as is).
                if hb.member_epoch != 0 {
                    check_epoch(member, hb.member_epoch)?;
                }
                Some(member.clone())
            }
        };
        let mut member = old.clone().unwrap_or_else(|| ShareMember {
            member_id: hb.member_id.clone(),
            member_epoch: 0,
            previous_member_epoch: 0,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed: Vec::new(),
            assignment: Vec::new(),
            last_heartbeat_ms: now_ms,
        });
        if hb.rack_id.is_some() {
            member.rack_id = hb.rack_id.clone();
        }
        member.client_id = hb.client_id.clone();
        member.client_host = hb.client_host.clone();
        member.last_heartbeat_ms = now_ms;
        let mut subscription_changed = false;
        if let Some(subs) = &hb.subscribed {
            let subs = normalise(subs.clone());
            if subs != member.subscribed {
                member.subscribed = subs;
                subscription_changed = true;
                bump = true;
            }
        }
        group.members.insert(member.member_id.clone(), member);
        // The registry may have changed under the subscriptions (topics created, deleted, grown).
        let metadata = subscription_metadata(group, registry);
        if metadata != group.subscription_metadata {
            group.subscription_metadata = metadata;
            bump = true;
        }
        if bump {
            group.group_epoch += 1;
        }
        if group.group_epoch > group.assignment_epoch {
            group.target = assign(&group.members, registry, &group.target);
            group.assignment_epoch = group.group_epoch;
        }
        // Reconcile this member only (ShareGroupAssignmentBuilder).
        let target = group.target.get(&hb.member_id).cloned().unwrap_or_default();
        let member = group
            .members
            .get_mut(&hb.member_id)
            .expect("inserted above");
        if member.member_epoch != group.assignment_epoch {
            member.previous_member_epoch = member.member_epoch;
            member.member_epoch = group.assignment_epoch;
            member.assignment = filter_subscribed(target, &member.subscribed);
        } else if subscription_changed {
            member.assignment = filter_subscribed(target, &member.subscribed);
        }
        let changed = old
            .as_ref()
            .is_none_or(|o| o.assignment != member.assignment);
        Ok((
            HeartbeatAnswer {
                error: None,
                error_message: None,
                member_id: Some(member.member_id.clone()),
                member_epoch: member.member_epoch,
                heartbeat_interval_ms: i32::try_from(config.heartbeat_interval_ms)
                    .unwrap_or(i32::MAX),
                assignment: (hb.member_epoch == 0 || changed).then(|| member.assignment.clone()),
            },
            vec![],
        ))
    }

    /// Epoch -1: the member leaves; the group epoch goes up.
    fn leave(&mut self, hb: &Heartbeat) -> Result<Departed, HeartbeatAnswer> {
        let group = self
            .groups
            .get_mut(&hb.group_id)
            .ok_or_else(|| unknown_member(&hb.group_id, &hb.member_id))?;
        let member = group
            .members
            .remove(&hb.member_id)
            .ok_or_else(|| unknown_member(&hb.group_id, &hb.member_id))?;
        group.group_epoch += 1;
        group.target.remove(&hb.member_id);
        Ok(Departed {
            group_id: hb.group_id.clone(),
            member_id: member.member_id,
            partitions: member.assignment,
        })
    }

    /// Evicts members that sent no heartbeat for their group's `share.session.timeout.ms`;
    /// their records must be released.
    pub fn expire_sessions(&mut self, registry: &TopicRegistry, now_ms: u64) -> Vec<Departed> {
        let mut departed = vec![];
        for (group_id, group) in self.groups.iter_mut() {
            let timeout = registry.group_config(group_id).session_timeout_ms;
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| m.last_heartbeat_ms.saturating_add(timeout) < now_ms)
                .map(|m| m.member_id.clone())
                .collect();
            for id in expired {
                if let Some(m) = group.members.remove(&id) {
                    group.group_epoch += 1;
                    group.target.remove(&id);
                    departed.push(Departed {
                        group_id: group_id.clone(),
                        member_id: m.member_id,
                        partitions: m.assignment,
                    });
                }
            }
        }
        departed
    }
}

fn normalise(mut topics: Vec<String>) -> Vec<String> {
    topics.sort();
    topics.dedup();
    topics
}

/// The subscribed topics that exist: name → (id, partition count).
fn subscription_metadata(
    group: &ShareGroup,
    registry: &TopicRegistry,
) -> BTreeMap<String, (Uuid, i32)> {
    group
        .members
        .values()
        .flat_map(|m| m.subscribed.iter())
        .filter_map(|name| {
            registry
                .topic(name)
                .map(|t| (name.clone(), (t.id, t.partitions.max(0))))
        })
        .collect()
}

/// Drops the topics a member no longer subscribes to.
fn filter_subscribed(target: Vec<AssignedTopic>, subscribed: &[String]) -> Vec<AssignedTopic> {
    target
        .into_iter()
        .filter(|t| subscribed.contains(&t.topic))
        .collect()
}

/// A topic-partition as the assignor sees it: (topic name, id, partition).
type Tp = (String, Uuid, i32);

/// Kafka's simple share assignor, deterministic: balance first (every partition is shared by
/// `ceil(members / partitions)` members, and member loads differ by at most one), then
/// stickiness (a member keeps what it had, up to its quota). Members that subscribe to the same
/// topics are balanced over all of those topics together; otherwise each topic is balanced over
/// its subscribers. Kafka breaks ties by hash order; here members with more kept partitions get
/// the larger quotas, then by member id.
pub fn assign(
    members: &BTreeMap<String, ShareMember>,
    registry: &TopicRegistry,
    previous: &BTreeMap<String, Vec<AssignedTopic>>,
) -> BTreeMap<String, Vec<AssignedTopic>> {
    let mut out: BTreeMap<String, BTreeSet<Tp>> = members
        .keys()
        .map(|id| (id.clone(), BTreeSet::new()))
        .collect();
    let old: BTreeMap<&String, BTreeSet<Tp>> = previous
        .iter()
        .map(|(id, topics)| {
            let held = topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| (t.topic.clone(), t.topic_id, *p))
                })
                .collect();
            (id, held)
        })
        .collect();
    let partitions_of = |topics: &[&String]| -> Vec<Tp> {
        let mut tps = Vec::new();
        for name in topics {
            if let Some(meta) = registry.topic(name) {
                for p in 0..meta.partitions.max(0) {
                    tps.push(((*name).clone(), meta.id, p));
                }
            }
        }
        tps
    };
    let homogeneous = members
        .values()
        .map(|m| &m.subscribed)
        .collect::<BTreeSet<_>>()
        .len()
        <= 1;
    // Each unit: (members, the topic-partitions they share).
    let mut units: Vec<(Vec<&String>, Vec<Tp>)> = Vec::new();
    if homogeneous {
        if let Some(first) = members.values().next() {
            let topics: Vec<&String> = first.subscribed.iter().collect();
            units.push((members.keys().collect(), partitions_of(&topics)));
        }
    } else {
        let topics: BTreeSet<&String> =
            members.values().flat_map(|m| m.subscribed.iter()).collect();
        for name in topics {
            let subscribers: Vec<&String> = members
                .values()
                .filter(|m| m.subscribed.contains(name))
                .map(|m| &m.member_id)
                .collect();
            units.push((subscribers, partitions_of(&[name])));
        }
    }
    for (ids, tps) in units {
        let empty = BTreeSet::new();
        let held: Vec<BTreeSet<Tp>> = ids
            .iter()
            .map(|id| {
                old.get(id)
                    .unwrap_or(&empty)
                    .iter()
                    .filter(|tp| tps.binary_search(tp).is_ok())
                    .cloned()
                    .collect()
            })
            .collect();
        for (i, got) in balance(held, &tps).into_iter().enumerate() {
            out.get_mut(ids[i])
                .expect("every member has an entry")
                .extend(got);
        }
    }
    out.into_iter()
        .map(|(id, tps)| {
            let mut by_topic: BTreeMap<String, AssignedTopic> = BTreeMap::new();
            for (topic, topic_id, p) in tps {
                by_topic
                    .entry(topic.clone())
                    .or_insert_with(|| AssignedTopic {
                        topic_id,
                        topic,
                        partitions: vec![],
                    })
                    .partitions
                    .push(p);
            }
            (id, by_topic.into_values().collect())
        })
        .collect()
}

/// Balances sorted `tps` over members (index = position in `held`, what each held before and
/// still may); returns each member's new set.
fn balance(held: Vec<BTreeSet<Tp>>, tps: &[Tp]) -> Vec<BTreeSet<Tp>> {
    let m = held.len();
    let p = tps.len();
    if m == 0 || p == 0 {
        return vec![BTreeSet::new(); m];
    }
    let sharing = m.div_ceil(p);
    let total = sharing * p;
    // Quotas: ceil(total*(k+1)/m) - ceil(total*k/m); the larger ones go to the members that
    // hold the most already (then by member order).
    let quotas: Vec<usize> = (0..m)
        .map(|k| (total * (k + 1)).div_ceil(m) - (total * k).div_ceil(m))
        .collect();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by_key(|i| (std::cmp::Reverse(held[*i].len()), *i));
    let mut quota = vec![0; m];
    for (k, i) in order.iter().enumerate() {
        quota[*i] = quotas[k];
    }
    let mut got: Vec<BTreeSet<Tp>> = vec![BTreeSet::new(); m];
    let mut holders: BTreeMap<&Tp, usize> = tps.iter().map(|tp| (tp, 0)).collect();
    // Keep: up to the quota, and never more than `sharing` holders per partition.
    for i in &order {
        for tp in &held[*i] {
            let count = holders.get_mut(tp).expect("held partitions are filtered");
            if got[*i].len() < quota[*i] && *count < sharing {
                *count += 1;
                got[*i].insert(tp.clone());
            }
        }
    }
    // Fill: each partition up to `sharing` holders, always the least-loaded member with room.
    for tp in tps {
        while holders[tp] < sharing {
            let pick = (0..m)
                .filter(|i| got[*i].len() < quota[*i] && !got[*i].contains(tp))
                .min_by_key(|i| (got[*i].len(), *i));
            let i = match pick {
                Some(i) => i,
                None => {
                    // Every member with room holds `tp` already: one of them (x) takes over a
                    // partition from a full member (y) that does not hold `tp`, and y takes `tp`.
                    let swap = (0..m).filter(|x| got[*x].len() < quota[*x]).find_map(|x| {
                        (0..m).filter(|y| !got[*y].contains(tp)).find_map(|y| {
                            got[y]
                                .iter()
                                .find(|q| !got[x].contains(*q))
                                .map(|q| (x, y, q.clone()))
                        })
                    });
                    let Some((x, y, q)) = swap else { break };
                    got[y].remove(&q);
                    got[x].insert(q);
                    y
                }
            };
            got[i].insert(tp.clone());
            *holders.get_mut(tp).expect("every partition has a count") += 1;
        }
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn registry(topics: &[(&str, u128, i32)]) -> TopicRegistry {
        let mut r = TopicRegistry::new("c".into());
        for (name, id, parts) in topics {
            r.create_topic(name, Uuid::from_u128(*id), *parts, &[])
                .unwrap();
        }
        r
    }

    fn hb(member: &str, epoch: i32, subs: Option<&[&str]>) -> Heartbeat {
        Heartbeat {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            rack_id: None,
            subscribed: subs.map(|s| s.iter().map(|t| t.to_string()).collect()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
        }
    }

    fn parts(a: &HeartbeatAnswer) -> Vec<i32> {
        a.assignment
            .as_ref()
            .unwrap()
            .iter()
            .flat_map(|t| t.partitions.clone())
            .collect()
    }

    /// Kafka 4.4, observed at the reference broker: the second member's join moves nobody
    /// else; the first member learns its new epoch and assignment in its own next heartbeat,
    /// sent with the epoch it had, and may repeat that epoch once more.
    #[test]
    fn a_join_fences_nobody() {
        let reg = registry(&[("t", 1, 2)]);
        let mut groups = ShareGroups::new();
        let (a, _) = groups.heartbeat(&hb("a", 0, Some(&["t"])), &reg, 0);
        assert_eq!((a.error, a.member_epoch), (None, 1));
        assert_eq!(parts(&a), vec![0, 1]);
        assert_eq!(a.heartbeat_interval_ms, 5_000);
        // Unchanged: no assignment in the answer.
        let (a, _) = groups.heartbeat(&hb("a", 1, None), &reg, 5);
        assert_eq!((a.error, a.member_epoch, a.assignment), (None, 1, None));
        let (b, _) = groups.heartbeat(&hb("b", 0, Some(&["t"])), &reg, 10);
        assert_eq!((b.error, b.member_epoch), (None, 2));
        assert_eq!(parts(&b), vec![1]);
        // a is still at epoch 1 until it heartbeats.
        assert_eq!(groups.group("g").unwrap().members["a"].member_epoch, 1);
        let (a, _) = groups.heartbeat(&hb("a", 1, None), &reg, 20);
        assert_eq!((a.error, a.member_epoch), (None, 2));
        assert_eq!(parts(&a), vec![0]);
        // The answer may have been lost: the previous epoch is accepted, nothing changes.
        let (a, _) = groups.heartbeat(&hb("a", 1, None), &reg, 30);
        assert_eq!((a.error, a.member_epoch, a.assignment), (None, 2, None));
        // A greater epoch, or one older than the previous, is fenced.
        let (f, _) = groups.heartbeat(&hb("a", 3, None), &reg, 30);
        assert_eq!(f.error, Some(ShareHeartbeatError::FencedMemberEpoch));
        assert!(f
            .error_message
            .unwrap()
            .contains("greater member epoch (3)"));
        let (f, _) = groups.heartbeat(&hb("a", 0, Some(&["t"])), &reg, 30);
        assert_eq!((f.error, f.member_epoch), (None, 2), "a rejoin is accepted");
        assert_eq!(parts(&f), vec![0], "a rejoin gets its assignment");
        // A third member on 2 partitions: partitions are shared (ceil(3/2) = 2 holders each).
        let (c, _) = groups.heartbeat(&hb("c", 0, Some(&["t"])), &reg, 40);
        assert_eq!(c.member_epoch, 3);
        let (a, _) = groups.heartbeat(&hb("a", 2, None), &reg, 50);
        let (b, _) = groups.heartbeat(&hb("b", 2, None), &reg, 50);
        assert_eq!((a.member_epoch, b.member_epoch), (3, 3));
        let g = groups.group("g").unwrap();
        let mut holders = BTreeMap::new();
        for m in g.members.values() {
            for p in m.assignment.iter().flat_map(|t| t.partitions.iter()) {
                *holders.entry(*p).or_insert(0) += 1;
            }
        }
        assert_eq!(holders, BTreeMap::from([(0, 2), (1, 2)]));
        // Leave: the others move on their next heartbeat.
        let (l, departed) = groups.heartbeat(&hb("c", -1, None), &reg, 60);
        assert_eq!(
            (l.error, l.member_epoch, l.heartbeat_interval_ms),
            (None, -1, 0)
        );
        assert_eq!(departed.len(), 1);
        let (a, _) = groups.heartbeat(&hb("a", 3, None), &reg, 70);
        assert_eq!(a.member_epoch, 4);
        let (l, _) = groups.heartbeat(&hb("c", -1, None), &reg, 80);
        assert_eq!(l.error, Some(ShareHeartbeatError::UnknownMember));
        assert_eq!(
            l.error_message.as_deref(),
            Some("Member c is not a member of group g.")
        );
    }

    #[test]
    fn previous_epoch_only_one_back() {
        let reg = registry(&[("t", 1, 4)]);
        let mut groups = ShareGroups::new();
        groups.heartbeat(&hb("a", 0, Some(&["t"])), &reg, 0);
        for (i, m) in ["b", "c"].iter().enumerate() {
            groups.heartbeat(&hb(m, 0, Some(&["t"])), &reg, 0);
            let e = groups.group("g").unwrap().members["a"].member_epoch;
            let (a, _) = groups.heartbeat(&hb("a", e, None), &reg, 0);
            assert_eq!(a.member_epoch, i as i32 + 2);
        }
        // a: epoch 3, previous 2; 1 is fenced.
        let (f, _) = groups.heartbeat(&hb("a", 1, None), &reg, 0);
        assert_eq!(f.error, Some(ShareHeartbeatError::FencedMemberEpoch));
        assert!(f
            .error_message
            .unwrap()
            .contains("does not match the previous member epoch (2)"));
        let (ok, _) = groups.heartbeat(&hb("a", 2, None), &reg, 0);
        assert_eq!(ok.error, None);
    }

    #[test]
    fn subscription_and_topic_changes_move_the_group_epoch() {
        let mut reg = registry(&[("t", 1, 1)]);
        let mut groups = ShareGroups::new();
        let (a, _) = groups.heartbeat(&hb("a", 0, Some(&["t", "u"])), &reg, 0);
        assert_eq!((a.member_epoch, parts(&a)), (1, vec![0]));
        reg.create_topic("u", Uuid::from_u128(2), 2, &[]).unwrap();
        let (a, _) = groups.heartbeat(&hb("a", 1, None), &reg, 1);
        assert_eq!(a.member_epoch, 2);
        assert_eq!(parts(&a), vec![0, 0, 1]);
        let (a, _) = groups.heartbeat(&hb("a", 2, Some(&["u"])), &reg, 2);
        assert_eq!(a.member_epoch, 3);
        let topics: Vec<&str> = a
            .assignment
            .as_ref()
            .unwrap()
            .iter()
            .map(|t| t.topic.as_str())
            .collect();
        assert_eq!(topics, vec!["u"]);
        // Same subscription again: nothing moves.
        let (a, _) = groups.heartbeat(&hb("a", 3, Some(&["u"])), &reg, 3);
        assert_eq!((a.member_epoch, a.assignment), (3, None));
    }

    #[test]
    fn bad_requests_and_unknowns_answer_as_kafka() {
        let reg = registry(&[("t", 1, 1)]);
        let mut groups = ShareGroups::new();
        // Kafka: GROUP_ID_NOT_FOUND; Lockstep forgets groups at a restart, so its members rejoin.
        let (a, _) = groups.heartbeat(&hb("x", 5, None), &reg, 0);
        assert_eq!(a.error, Some(ShareHeartbeatError::UnknownMember));
        assert_eq!(
            a.error_message.as_deref(),
            Some("Member x is not a member of group g.")
        );
        let (a, _) = groups.heartbeat(&hb("", 0, Some(&["t"])), &reg, 0);
        assert_eq!(
            (a.error, a.error_message.as_deref()),
            (
                Some(ShareHeartbeatError::InvalidRequest),
                Some("MemberId can't be empty.")
            )
        );
        let (a, _) = groups.heartbeat(&hb(&"m".repeat(37), 0, Some(&["t"])), &reg, 0);
        assert_eq!(
            (a.error, a.error_message),
            (Some(ShareHeartbeatError::InvalidRequest), None)
        );
        let (a, _) = groups.heartbeat(&hb("x", 0, None), &reg, 0);
        assert_eq!(
            a.error_message.as_deref(),
            Some("SubscribedTopicNames must be set in first request.")
        );
        let (a, _) = groups.heartbeat(&hb("x", -2, None), &reg, 0);
        assert_eq!(a.error_message.as_deref(), Some("MemberEpoch is invalid."));
        // Unknown topics are subscribed but assign nothing.
        let (a, _) = groups.heartbeat(&hb("x", 0, Some(&["nope"])), &reg, 0);
        assert_eq!(a.error, None);
        assert!(parts(&a).is_empty());
        let (a, _) = groups.heartbeat(&hb("y", 1, None), &reg, 0);
        assert_eq!(a.error, Some(ShareHeartbeatError::UnknownMember));
    }

    #[test]
    fn session_timeout_evicts() {
        let reg = registry(&[("t", 1, 1)]);
        let mut groups = ShareGroups::new();
        groups.heartbeat(&hb("a", 0, Some(&["t"])), &reg, 0);
        groups.heartbeat(&hb("b", 0, Some(&["t"])), &reg, 40_000);
        let gone = groups.expire_sessions(&reg, 46_000);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].member_id, "a");
        assert!(groups.expire_sessions(&reg, 46_001).is_empty());
        assert_eq!(groups.group("g").unwrap().members.len(), 1);
        // The group config sets the timeout.
        let mut reg = reg;
        reg.set_group_configs(
            "g",
            [("share.session.timeout.ms".to_string(), "60000".to_string())].into(),
        )
        .unwrap();
        assert!(groups.expire_sessions(&reg, 99_000).is_empty());
        assert_eq!(groups.expire_sessions(&reg, 100_001).len(), 1);
    }

    /// The model: after every change and every member's heartbeat, partitions are shared by
    /// ceil(M/P) members each, loads differ by at most one, and a member keeps what it held
    /// up to its new load.
    #[test]
    fn assignor_balances_and_sticks() {
        for seed in 0..200u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let p = rng.gen_range(1..=7);
            let reg = registry(&[("t", 1, p)]);
            let mut groups = ShareGroups::new();
            let mut live: BTreeMap<String, i32> = BTreeMap::new();
            for step in 0..30 {
                let id = format!("m{}", rng.gen_range(0..9));
                if live.contains_key(&id) && rng.gen_bool(0.4) {
                    groups.heartbeat(&hb(&id, -1, None), &reg, step);
                    live.remove(&id);
                } else if !live.contains_key(&id) {
                    let (a, _) = groups.heartbeat(&hb(&id, 0, Some(&["t"])), &reg, step);
                    assert_eq!(a.error, None);
                    live.insert(id, a.member_epoch);
                }
                let before: BTreeMap<String, BTreeSet<i32>> = groups
                    .group("g")
                    .unwrap()
                    .members
                    .iter()
                    .map(|(id, m)| {
                        (
                            id.clone(),
                            m.assignment
                                .iter()
                                .flat_map(|t| t.partitions.clone())
                                .collect(),
                        )
                    })
                    .collect();
                for (id, epoch) in live.iter_mut() {
                    let (a, _) = groups.heartbeat(&hb(id, *epoch, None), &reg, step);
                    assert_eq!(a.error, None, "seed {seed} step {step}: {a:?}");
                    *epoch = a.member_epoch;
                }
                let g = groups.group("g").unwrap();
                let m = g.members.len();
                if m == 0 {
                    continue;
                }
                assert!(g.members.values().all(|x| x.member_epoch == g.group_epoch));
                let sharing = m.div_ceil(p as usize);
                let mut holders = vec![0; p as usize];
                let loads: Vec<usize> = g
                    .members
                    .values()
                    .map(|x| {
                        let held: BTreeSet<i32> = x
                            .assignment
                            .iter()
                            .flat_map(|t| t.partitions.clone())
                            .collect();
                        for q in &held {
                            holders[*q as usize] += 1;
                        }
                        let had = before.get(&x.member_id).cloned().unwrap_or_default();
                        let kept = had.intersection(&held).count();
                        assert!(
                            kept >= had.len().min(held.len()).saturating_sub(1),
                            "seed {seed}: {} had {had:?}, now {held:?}",
                            x.member_id
                        );
                        held.len()
                    })
                    .collect();
                assert!(
                    holders.iter().all(|h| *h == sharing),
                    "seed {seed}: {holders:?}"
                );
                let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
                assert!(hi - lo <= 1, "seed {seed}: loads {loads:?}");
            }
        }
    }

    #[test]
    fn heterogeneous_subscriptions_assign_per_topic() {
        let reg = registry(&[("t", 1, 2), ("u", 2, 1)]);
        let mut groups = ShareGroups::new();
        groups.heartbeat(&hb("a", 0, Some(&["t", "u"])), &reg, 0);
        groups.heartbeat(&hb("b", 0, Some(&["t"])), &reg, 0);
        let (a, _) = groups.heartbeat(&hb("a", 1, None), &reg, 0);
        let a = a.assignment.unwrap();
        let b = groups.group("g").unwrap().members["b"].assignment.clone();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].topic, "u");
        assert_eq!(a[0].partitions.len() + b[0].partitions.len(), 2);
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn group_configs_are_validated_atomically() {
        let mut c = ShareGroupConfig::default();
        c.apply(&[
            ("share.auto.offset.reset".into(), Some("earliest".into())),
            ("share.delivery.count.limit".into(), Some(" 3".into())),
        ])
        .unwrap();
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Earliest);
        assert_eq!(c.share.delivery_count_limit, 3);
        assert_eq!(c.explicit["share.delivery.count.limit"], "3");
        for bad in [
            ("share.auto.offset.reset", "sideways"),
            ("share.record.lock.duration.ms", "1"),
            ("no.such", "1"),
        ] {
            let before = c.clone();
            assert!(c
                .apply(&[
                    ("share.delivery.count.limit".into(), Some("4".into())),
                    (bad.0.into(), Some(bad.1.into())),
                ])
                .is_err());
            assert_eq!(c, before, "a refused change leaves the config as it was");
        }
        c.apply(&[("share.auto.offset.reset".into(), None)])
            .unwrap();
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Latest);
    }

    /// The messages Kafka 4.4's IncrementalAlterConfigs answered with (INVALID_CONFIG).
    #[test]
    fn group_config_bounds_are_kafkas() {
        let set = |pairs: &[(&str, &str)]| {
            let mut c = ShareGroupConfig::default();
            c.apply(
                &pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Some(v.to_string())))
                    .collect::<Vec<_>>(),
            )
            .map(|()| c)
        };
        let cases: &[(&str, &str, &str)] = &[
            ("share.session.timeout.ms", "44999", "share.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
            ("share.session.timeout.ms", "60001", "share.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
            ("share.heartbeat.interval.ms", "4999", "share.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
            ("share.heartbeat.interval.ms", "0", "Invalid value 0 for configuration share.heartbeat.interval.ms: Value must be at least 1"),
            ("share.session.timeout.ms", "abc", "Invalid value abc for configuration share.session.timeout.ms: Not a number of type INT"),
            ("share.record.lock.duration.ms", "999", "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
            ("share.record.lock.duration.ms", "14999", "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
            ("share.record.lock.duration.ms", "3600000", "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
            ("share.delivery.count.limit", "1", "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
            ("share.delivery.count.limit", "11", "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
            ("share.partition.max.record.locks", "99", "Invalid value 99 for configuration share.partition.max.record.locks: Value must be at least 100"),
            ("share.isolation.level", "READ_COMMITTED", "Invalid value READ_COMMITTED for configuration share.isolation.level: String must be one of: read_committed, read_uncommitted"),
            ("errors.deadletterqueue.topic.name", "__dlq", "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
            ("errors.deadletterqueue.copy.record.enable", "yes", "Invalid value yes for configuration errors.deadletterqueue.copy.record.enable: Expected value to be either true or false"),
            ("share.auto.offset.reset", "EARLIEST", "Invalid value EARLIEST for configuration share.auto.offset.reset: Invalid value `EARLIEST` for configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."),
        ];
        for (name, value, message) in cases {
            assert_eq!(
                set(&[(name, value)]).unwrap_err(),
                *message,
                "{name}={value}"
            );
        }
        for (name, value) in [
            ("share.session.timeout.ms", "45000"),
            ("share.session.timeout.ms", "60000"),
            ("share.heartbeat.interval.ms", "15000"),
            ("share.record.lock.duration.ms", "15000"),
            ("share.record.lock.duration.ms", "60000"),
            ("share.delivery.count.limit", "10"),
            ("share.partition.max.record.locks", "100"),
            ("share.partition.max.record.locks", "4000"),
            ("share.isolation.level", "read_committed"),
        ] {
            set(&[(name, value)]).unwrap_or_else(|e| panic!("{name}={value}: {e}"));
        }
        let c = set(&[
            ("share.session.timeout.ms", "50000"),
            ("share.heartbeat.interval.ms", "15000"),
        ])
        .unwrap();
        assert_eq!(
            (c.session_timeout_ms, c.heartbeat_interval_ms),
            (50_000, 15_000)
        );
        let c = set(&[
            ("errors.deadletterqueue.topic.name", "dlq.orders"),
            ("errors.deadletterqueue.copy.record.enable", "TRUE"),
        ])
        .unwrap();
        assert_eq!(c.dlq_topic.as_deref(), Some("dlq.orders"));
        assert!(c.dlq_copy_record);
        let c = set(&[("errors.deadletterqueue.topic.name", "")]).unwrap();
        assert_eq!(c.dlq_topic, None);
        let c = set(&[("share.auto.offset.reset", "by_duration:PT1H30M")]).unwrap();
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::ByDuration(5_400_000));
        // Past Kafka's 4000 record locks only in transactional mode (the documented exception).
        let refused = set(&[("share.partition.max.record.locks", "4001")]).unwrap_err();
        assert!(refused.starts_with(
            "share.partition.max.record.locks must be in the range 100 to 4000 inclusive."
        ));
        let c = set(&[
            ("share.partition.max.record.locks", "1000000"),
            ("share.acknowledgement.mode", "transactional"),
        ])
        .unwrap();
        assert_eq!(c.share.partition_max_record_locks, 1_000_000);
    }

    #[test]
    fn iso_durations_read_as_java_does() {
        for (text, ms) in [
            ("PT1H", Some(3_600_000)),
            ("P1D", Some(86_400_000)),
            ("P1DT2H3M4.5S", Some(93_784_500)),
            ("pt0.001s", Some(1)),
            ("PT10M", Some(600_000)),
            ("P", None),
            ("PT", None),
            ("1H", None),
            ("PT-1H", None),
            ("PT1X", None),
            ("P1W", None),
        ] {
            assert_eq!(parse_iso_duration_ms(text), ms, "{text}");
        }
    }

    #[test]
    fn renew_acknowledge_enable_defaults_to_true() {
        let mut c = ShareGroupConfig::default();
        assert!(c.renew_acknowledge_enable, "Kafka 4.4's default");
        c.apply(&[(
            "share.renew.acknowledge.enable".into(),
            Some("false".into()),
        )])
        .unwrap();
        assert!(!c.renew_acknowledge_enable);
        assert!(c
            .apply(&[(
                "share.renew.acknowledge.enable".into(),
                Some("maybe".into())
            )])
            .is_err());
        c.apply(&[("share.renew.acknowledge.enable".into(), None)])
            .unwrap();
        assert!(c.renew_acknowledge_enable);
    }
}
