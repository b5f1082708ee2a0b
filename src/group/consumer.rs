//! KIP-848 membership of a consumer group (`group.protocol=consumer`): ConsumerGroupHeartbeat
//! and ConsumerGroupDescribe, on the group's shard, beside the classic protocol
//! (`super::classic`) and sharing the group's committed offsets (`super::offsets`).
//!
//! Skeleton (issue 16, p16-groups): members and their epochs, enough for the offsets API's
//! member-epoch check ([`ConsumerMembership::validate_offset_commit`]). The heartbeat, the
//! server-side assignors and the reconciliation are built on this by p16-admin.

use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// One KIP-848 member (filled in by the heartbeat).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerMember {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub subscribed_topics: Vec<String>,
}

/// The KIP-848 membership of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerMembership {
    pub group_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
}

impl ConsumerMembership {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Kafka's group state name for ListGroups / describe ("Empty", "Stable", ...); the
    /// skeleton knows only empty or not.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// OffsetCommit's membership check (Kafka's `ConsumerGroup.validateOffsetCommit`): an
    /// admin or simple commit (epoch < 0) is accepted when the group is empty; otherwise the
    /// member must exist and send its current epoch.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<(), ResponseError> {
        if member_epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let member = self
            .members
            .get(member_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        if member.member_epoch != member_epoch {
            return Err(ResponseError::StaleMemberEpoch);
        }
        Ok(())
    }

    /// OffsetFetch's membership check (v9+ with a member id): as for commits; without a member
    /// id (admin, older clients) any fetch is accepted.
    pub fn validate_offset_fetch(
        &self,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), ResponseError> {
        match member_id {
            None => Ok(()),
            Some(id) => {
                let member = self.members.get(id).ok_or(ResponseError::UnknownMemberId)?;
                if member.member_epoch != member_epoch {
                    return Err(ResponseError::StaleMemberEpoch);
                }
                Ok(())
            }
        }
    }

    /// Topics the members subscribe to (OffsetDelete refuses those, retention keeps them).
    pub fn subscribed_topics(&self) -> std::collections::BTreeSet<String> {
        self.members
            .values()
            .flat_map(|m| m.subscribed_topics.iter().cloned())
            .collect()
    }
}
