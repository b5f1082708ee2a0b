//! Share-group coordinator state (KIP-932), kept on the group's shard (`model::group_shard`).
//!
//! Pure and synchronous: time comes in as `now_ms`, topics come from the caller's registry
//! snapshot. The wire handlers are `share_api` (heartbeat) and `share_admin` (describe, list).
//!
//! - Members: client-generated member ids (v1), member epochs, join (epoch 0), leave
//!   (epoch -1), session-timeout eviction, subscriptions by topic name.
//! - Assignor: per topic, the subscribed members (sorted by id) spread its partitions
//!   round-robin; when members outnumber partitions, partitions are shared (member i gets
//!   partition i mod P) — share groups allow several members per partition.
//! - Epochs: the group epoch goes up on every membership, subscription or assignment
//!   change; a member whose assignment changed takes the new group epoch.
//! - Group configs (`share.*`, [`ShareGroupConfig`]) live in the topic registry, which every
//!   shard has; they are set through IncrementalAlterConfigs on GROUP resources.

use super::registry::TopicRegistry;
use crate::config::validate_group_config;
use crate::share::ShareConfig;
use crate::txn::TxnConfig;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

/// Kafka's `group.share.session.timeout.ms` default.
pub const SHARE_SESSION_TIMEOUT_MS: u64 = 45_000;
/// Kafka's `group.share.heartbeat.interval.ms` default.
pub const SHARE_HEARTBEAT_INTERVAL_MS: i32 = 5_000;

/// `share.auto.offset.reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    #[default]
    Latest,
    Earliest,
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
            explicit: BTreeMap::new(),
        }
    }
}

impl ShareGroupConfig {
    /// Recomputes the typed values from `explicit`; errors name the bad config.
    fn from_explicit(explicit: BTreeMap<String, String>) -> Result<ShareGroupConfig, String> {
        let mut out = ShareGroupConfig::default();
        for (name, value) in &explicit {
            let canonical = validate_group_config(name, value).map_err(|e| e.to_string())?;
            let num = || canonical.parse::<u64>().map_err(|e| format!("{name}: {e}"));
            match name.as_str() {
                "share.auto.offset.reset" => {
                    out.auto_offset_reset = match canonical.as_str() {
                        "earliest" => AutoOffsetReset::Earliest,
                        _ => AutoOffsetReset::Latest,
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
                "share.transaction.timeout.ms" => out.txn.timeout_ms_default = num()?,
                "share.transaction.max.pending" => {
                    out.txn.max_pending =
                        usize::try_from(num()?).map_err(|e| format!("{name}: {e}"))?
                }
                _ => {}
            }
            out.explicit.insert(name.clone(), canonical);
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
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    pub assignment: Vec<AssignedTopic>,
    pub last_heartbeat_ms: u64,
}

/// A share group.
#[derive(Clone, Debug, Default)]
pub struct ShareGroup {
    pub group_epoch: i32,
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

/// The answer to a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// `None`: no assignment in the answer (leave, error).
    pub assignment: Option<Vec<AssignedTopic>>,
}

impl HeartbeatAnswer {
    fn error(error: ResponseError, message: impl Into<String>) -> HeartbeatAnswer {
        HeartbeatAnswer {
            error_code: error.code(),
            error_message: Some(message.into()),
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
#[derive(Debug)]
pub struct ShareGroups {
    groups: HashMap<String, ShareGroup>,
    pub session_timeout_ms: u64,
}

impl Default for ShareGroups {
    fn default() -> ShareGroups {
        ShareGroups::new()
    }
}

impl ShareGroups {
    pub fn new() -> ShareGroups {
        ShareGroups {
            groups: HashMap::new(),
            session_timeout_ms: SHARE_SESSION_TIMEOUT_MS,
        }
    }

    pub fn group(&self, group_id: &str) -> Option<&ShareGroup> {
        self.groups.get(group_id)
    }

    pub fn group_ids(&self) -> impl Iterator<Item = &String> + '_ {
        self.groups.keys()
    }

    /// Handles one heartbeat. Returns the answer and the members that departed (a leave).
    pub fn heartbeat(
        &mut self,
        hb: &Heartbeat,
        registry: &TopicRegistry,
        now_ms: u64,
    ) -> (HeartbeatAnswer, Vec<Departed>) {
        if hb.group_id.is_empty() {
            return (
                HeartbeatAnswer::error(ResponseError::InvalidRequest, "GroupId can't be empty"),
                vec![],
            );
        }
        if hb.member_id.is_empty() || hb.member_id.len() > 36 {
            return (
                HeartbeatAnswer::error(
                    ResponseError::InvalidRequest,
                    "MemberId must be a non-empty client-generated id",
                ),
                vec![],
            );
        }
        if hb.member_epoch == 0 && hb.subscribed.as_ref().is_none_or(|s| s.is_empty()) {
            return (
                HeartbeatAnswer::error(
                    ResponseError::InvalidRequest,
                    "SubscribedTopicNames must be set in first request",
                ),
                vec![],
            );
        }
        if hb.member_epoch < -1 {
            return (
                HeartbeatAnswer::error(ResponseError::InvalidRequest, "MemberEpoch is invalid"),
                vec![],
            );
        }
        let group = self.groups.entry(hb.group_id.clone()).or_default();
        if hb.member_epoch == -1 {
            let departed = match group.members.remove(&hb.member_id) {
                Some(m) => {
                    group.group_epoch += 1;
                    rebalance(group, registry);
                    vec![Departed {
                        group_id: hb.group_id.clone(),
                        member_id: m.member_id,
                        partitions: m.assignment,
                    }]
                }
                None => vec![],
            };
            return (
                HeartbeatAnswer {
                    error_code: 0,
                    error_message: None,
                    member_id: Some(hb.member_id.clone()),
                    member_epoch: -1,
                    heartbeat_interval_ms: 0,
                    assignment: None,
                },
                departed,
            );
        }
        let mut changed = false;
        match group.members.get_mut(&hb.member_id) {
            None if hb.member_epoch != 0 => {
                return (
                    HeartbeatAnswer::error(
                        ResponseError::UnknownMemberId,
                        format!("member {} is not in group {}", hb.member_id, hb.group_id),
                    ),
                    vec![],
                )
            }
            None => {
                group.members.insert(
                    hb.member_id.clone(),
                    ShareMember {
                        member_id: hb.member_id.clone(),
                        member_epoch: 0,
                        rack_id: hb.rack_id.clone(),
                        client_id: hb.client_id.clone(),
                        client_host: hb.client_host.clone(),
                        subscribed: normalise(hb.subscribed.clone().unwrap_or_default()),
                        assignment: vec![],
                        last_heartbeat_ms: now_ms,
                    },
                );
                changed = true;
            }
            Some(member) => {
                // A rejoin (epoch 0) of a known member is accepted; otherwise the epoch must match.
                if hb.member_epoch != 0 && hb.member_epoch != member.member_epoch {
                    return (
                        HeartbeatAnswer::error(
                            ResponseError::FencedMemberEpoch,
                            format!(
                                "member epoch {} does not match {}",
                                hb.member_epoch, member.member_epoch
                            ),
                        ),
                        vec![],
                    );
                }
                member.last_heartbeat_ms = now_ms;
                if let Some(subs) = &hb.subscribed {
                    let subs = normalise(subs.clone());
                    if subs != member.subscribed {
                        member.subscribed = subs;
                        changed = true;
                    }
                }
                if hb.member_epoch == 0 {
                    changed = true;
                }
            }
        }
        if changed {
            group.group_epoch += 1;
        }
        // The registry may have changed too (topics created, deleted, grown).
        rebalance(group, registry);
        let member = &group.members[&hb.member_id];
        (
            HeartbeatAnswer {
                error_code: 0,
                error_message: None,
                member_id: Some(member.member_id.clone()),
                member_epoch: member.member_epoch,
                heartbeat_interval_ms: SHARE_HEARTBEAT_INTERVAL_MS,
                assignment: Some(member.assignment.clone()),
            },
            vec![],
        )
    }

    /// Evicts members whose session timed out; their records must be released.
    pub fn expire_sessions(&mut self, registry: &TopicRegistry, now_ms: u64) -> Vec<Departed> {
        let timeout = self.session_timeout_ms;
        let mut departed = vec![];
        for (group_id, group) in self.groups.iter_mut() {
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| m.last_heartbeat_ms.saturating_add(timeout) < now_ms)
                .map(|m| m.member_id.clone())
                .collect();
            if expired.is_empty() {
                continue;
            }
            for id in expired {
                if let Some(m) = group.members.remove(&id) {
                    departed.push(Departed {
                        group_id: group_id.clone(),
                        member_id: m.member_id,
                        partitions: m.assignment,
                    });
                }
            }
            group.group_epoch += 1;
            rebalance(group, registry);
        }
        departed
    }
}

fn normalise(mut topics: Vec<String>) -> Vec<String> {
    topics.sort();
    topics.dedup();
    topics
}

/// The target assignment of every member (deterministic in the member ids, subscriptions
/// and registry).
pub fn assign(
    members: &BTreeMap<String, ShareMember>,
    registry: &TopicRegistry,
) -> BTreeMap<String, Vec<AssignedTopic>> {
    let mut out: BTreeMap<String, BTreeMap<String, AssignedTopic>> = members
        .keys()
        .map(|id| (id.clone(), BTreeMap::new()))
        .collect();
    let mut topics: Vec<&String> = members.values().flat_map(|m| m.subscribed.iter()).collect();
    topics.sort();
    topics.dedup();
    for name in topics {
        let Some(meta) = registry.topic(name) else {
            continue;
        };
        let subscribers: Vec<&String> = members
            .values()
            .filter(|m| m.subscribed.contains(name))
            .map(|m| &m.member_id)
            .collect();
        let m = subscribers.len();
        let p = meta.partitions.max(0) as usize;
        if m == 0 || p == 0 {
            continue;
        }
        let mut give = |member: &String, partition: i32| {
            out.get_mut(member)
                .expect("every member has an entry")
                .entry(name.clone())
                .or_insert_with(|| AssignedTopic {
                    topic_id: meta.id,
                    topic: name.clone(),
                    partitions: vec![],
                })
                .partitions
                .push(partition);
        };
        if m <= p {
            for partition in 0..p {
                give(subscribers[partition % m], partition as i32);
            }
        } else {
            for (i, member) in subscribers.iter().enumerate() {
                give(member, (i % p) as i32);
            }
        }
    }
    out.into_iter()
        .map(|(id, topics)| (id, topics.into_values().collect()))
        .collect()
}

/// Installs the target assignment; a member whose assignment changes takes a new epoch.
fn rebalance(group: &mut ShareGroup, registry: &TopicRegistry) {
    let target = assign(&group.members, registry);
    let mut bumped = false;
    for (id, assignment) in target {
        let member = group.members.get_mut(&id).expect("assigned members exist");
        if member.assignment != assignment || member.member_epoch == 0 {
            if !bumped && member.member_epoch >= group.group_epoch {
                group.group_epoch = member.member_epoch + 1;
            }
            bumped = true;
            member.assignment = assignment;
        }
    }
    if bumped {
        let epoch = group.group_epoch;
        for member in group.members.values_mut() {
            if member.member_epoch < epoch {
                member.member_epoch = epoch;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn join_heartbeat_leave() {
        let reg = registry(&[("t", 1, 2)]);
        let mut groups = ShareGroups::new();
        let (a, _) = groups.heartbeat(&hb("m1", 0, Some(&["t"])), &reg, 0);
        assert_eq!(a.error_code, 0);
        assert!(a.member_epoch > 0);
        assert_eq!(parts(&a), vec![0, 1]);
        let e1 = a.member_epoch;
        // Second member: partitions are spread, epochs go up.
        let (b, _) = groups.heartbeat(&hb("m2", 0, Some(&["t"])), &reg, 10);
        assert_eq!(parts(&b), vec![1]);
        assert!(b.member_epoch > e1);
        // m1 with its old epoch is fenced? No: its epoch was bumped; the old one is stale.
        let (a2, _) = groups.heartbeat(&hb("m1", e1, None), &reg, 20);
        assert_eq!(a2.error_code, ResponseError::FencedMemberEpoch.code());
        let cur = groups.group("g").unwrap().members["m1"].member_epoch;
        let (a3, _) = groups.heartbeat(&hb("m1", cur, None), &reg, 20);
        assert_eq!(a3.error_code, 0);
        assert_eq!(parts(&a3), vec![0]);
        // Leave.
        let (l, departed) = groups.heartbeat(&hb("m2", -1, None), &reg, 30);
        assert_eq!(l.member_epoch, -1);
        assert_eq!(l.heartbeat_interval_ms, 0);
        assert_eq!(departed.len(), 1);
        assert_eq!(departed[0].partitions[0].partitions, vec![1]);
        let cur = groups.group("g").unwrap().members["m1"].member_epoch;
        let (a4, _) = groups.heartbeat(&hb("m1", cur, None), &reg, 40);
        assert_eq!(parts(&a4), vec![0, 1]);
    }

    #[test]
    fn members_share_partitions_when_they_outnumber_them() {
        let reg = registry(&[("t", 1, 1)]);
        let mut groups = ShareGroups::new();
        for m in ["a", "b", "c"] {
            groups.heartbeat(&hb(m, 0, Some(&["t"])), &reg, 0);
        }
        for m in groups.group("g").unwrap().members.values() {
            assert_eq!(m.assignment.len(), 1);
            assert_eq!(m.assignment[0].partitions, vec![0]);
        }
    }

    #[test]
    fn unknown_member_and_bad_requests() {
        let reg = registry(&[("t", 1, 1)]);
        let mut groups = ShareGroups::new();
        let (a, _) = groups.heartbeat(&hb("x", 5, None), &reg, 0);
        assert_eq!(a.error_code, ResponseError::UnknownMemberId.code());
        let (a, _) = groups.heartbeat(&hb("", 0, Some(&["t"])), &reg, 0);
        assert_eq!(a.error_code, ResponseError::InvalidRequest.code());
        let (a, _) = groups.heartbeat(&hb("x", 0, None), &reg, 0);
        assert_eq!(a.error_code, ResponseError::InvalidRequest.code());
        // Unknown topics are subscribed but assign nothing.
        let (a, _) = groups.heartbeat(&hb("x", 0, Some(&["nope"])), &reg, 0);
        assert_eq!(a.error_code, 0);
        assert!(parts(&a).is_empty());
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
