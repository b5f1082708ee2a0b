//! Share sessions (KIP-932 ShareFetch / ShareAcknowledge), per (group, member).
//!
//! Pure state. Epoch rules as Kafka 4.4: epoch 0 opens a new session (replacing any existing
//! one of the same key) with the request's partitions; epoch -1 closes the session (the
//! request may only carry acknowledgements); any other epoch must name an existing session
//! (else SHARE_SESSION_NOT_FOUND) and equal its expected epoch (else
//! INVALID_SHARE_SESSION_EPOCH); then the session's epoch advances (wrapping to 1 after
//! `i32::MAX`), the request's partitions are added and its forgotten partitions removed.
//! The number of sessions is capped (SHARE_SESSION_LIMIT_REACHED).
//!
//! Not yet wired (ShareFetch / ShareAcknowledge are not advertised).

use kafka_protocol::ResponseError;
use std::collections::{BTreeSet, HashMap};
use uuid::Uuid;

/// Kafka's `group.share.max.share.sessions` default.
pub const MAX_SHARE_SESSIONS: usize = 2000;

/// A topic-partition of a share session.
pub type SessionPartition = (Uuid, i32);

/// The session key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub group_id: String,
    pub member_id: String,
}

/// One open share session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareSession {
    /// The epoch the next request must carry.
    pub next_epoch: i32,
    pub partitions: BTreeSet<SessionPartition>,
    pub last_used_ms: u64,
}

/// What a request did to its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionOutcome {
    /// The partitions to fetch from (the whole session after the update).
    Open(BTreeSet<SessionPartition>),
    /// Epoch -1: the session is closed (it existed: `true`); the member's acquired records
    /// should be released by the caller.
    Closed(bool),
}

/// Every share session of one shard.
#[derive(Debug)]
pub struct ShareSessions {
    sessions: HashMap<SessionKey, ShareSession>,
    pub limit: usize,
}

impl Default for ShareSessions {
    fn default() -> ShareSessions {
        ShareSessions::new(MAX_SHARE_SESSIONS)
    }
}

fn next(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

impl ShareSessions {
    pub fn new(limit: usize) -> ShareSessions {
        ShareSessions {
            sessions: HashMap::new(),
            limit,
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn get(&self, key: &SessionKey) -> Option<&ShareSession> {
        self.sessions.get(key)
    }

    /// Applies a ShareFetch's session fields.
    pub fn update(
        &mut self,
        key: &SessionKey,
        epoch: i32,
        added: &[SessionPartition],
        forgotten: &[SessionPartition],
        now_ms: u64,
    ) -> Result<SessionOutcome, ResponseError> {
        match epoch {
            -1 => Ok(SessionOutcome::Closed(self.sessions.remove(key).is_some())),
            0 => {
                let replacing = self.sessions.remove(key).is_some();
                if !replacing && self.sessions.len() >= self.limit {
                    return Err(ResponseError::ShareSessionLimitReached);
                }
                let mut partitions: BTreeSet<SessionPartition> = added.iter().copied().collect();
                for f in forgotten {
                    partitions.remove(f);
                }
                self.sessions.insert(
                    key.clone(),
                    ShareSession {
                        next_epoch: 1,
                        partitions: partitions.clone(),
                        last_used_ms: now_ms,
                    },
                );
                Ok(SessionOutcome::Open(partitions))
            }
            e if e < -1 => Err(ResponseError::InvalidShareSessionEpoch),
            e => {
                let session = self
                    .sessions
                    .get_mut(key)
                    .ok_or(ResponseError::ShareSessionNotFound)?;
                if session.next_epoch != e {
                    return Err(ResponseError::InvalidShareSessionEpoch);
                }
                session.next_epoch = next(e);
                session.last_used_ms = now_ms;
                session.partitions.extend(added.iter().copied());
                for f in forgotten {
                    session.partitions.remove(f);
                }
                Ok(SessionOutcome::Open(session.partitions.clone()))
            }
        }
    }

    /// Checks a ShareAcknowledge's epoch (which does not change the partitions): -1 closes,
    /// 0 is invalid (acknowledging needs a session), others must match and advance.
    pub fn acknowledge(
        &mut self,
        key: &SessionKey,
        epoch: i32,
        now_ms: u64,
    ) -> Result<SessionOutcome, ResponseError> {
        match epoch {
            -1 => Ok(SessionOutcome::Closed(self.sessions.remove(key).is_some())),
            e if e <= 0 => Err(ResponseError::InvalidShareSessionEpoch),
            e => self.update(key, e, &[], &[], now_ms),
        }
    }

    /// Removes every session of a member (it left or was evicted).
    pub fn remove_member(&mut self, group_id: &str, member_id: &str) -> bool {
        self.sessions
            .remove(&SessionKey {
                group_id: group_id.to_string(),
                member_id: member_id.to_string(),
            })
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(m: &str) -> SessionKey {
        SessionKey {
            group_id: "g".into(),
            member_id: m.into(),
        }
    }

    fn tp(p: i32) -> SessionPartition {
        (Uuid::from_u128(7), p)
    }

    #[test]
    fn epochs_open_advance_and_close() {
        let mut s = ShareSessions::new(2);
        let k = key("a");
        assert_eq!(
            s.update(&k, 1, &[], &[], 0),
            Err(ResponseError::ShareSessionNotFound)
        );
        let out = s.update(&k, 0, &[tp(0), tp(1)], &[], 0).unwrap();
        assert_eq!(out, SessionOutcome::Open([tp(0), tp(1)].into()));
        // Later requests name no partitions: the session remembers them.
        assert_eq!(
            s.update(&k, 1, &[], &[], 1).unwrap(),
            SessionOutcome::Open([tp(0), tp(1)].into())
        );
        assert_eq!(
            s.update(&k, 1, &[], &[], 2),
            Err(ResponseError::InvalidShareSessionEpoch)
        );
        assert_eq!(
            s.update(&k, 3, &[], &[], 2),
            Err(ResponseError::InvalidShareSessionEpoch)
        );
        assert_eq!(
            s.update(&k, 2, &[tp(2)], &[tp(0)], 3).unwrap(),
            SessionOutcome::Open([tp(1), tp(2)].into())
        );
        assert_eq!(
            s.acknowledge(&k, 3, 4).unwrap(),
            SessionOutcome::Open([tp(1), tp(2)].into())
        );
        assert_eq!(
            s.acknowledge(&k, 0, 4),
            Err(ResponseError::InvalidShareSessionEpoch)
        );
        assert_eq!(
            s.acknowledge(&k, -1, 5).unwrap(),
            SessionOutcome::Closed(true)
        );
        assert_eq!(
            s.update(&k, -1, &[], &[], 5).unwrap(),
            SessionOutcome::Closed(false)
        );
        assert_eq!(
            s.update(&k, 4, &[], &[], 5),
            Err(ResponseError::ShareSessionNotFound)
        );
    }

    #[test]
    fn reopen_replaces_and_limit_applies() {
        let mut s = ShareSessions::new(2);
        s.update(&key("a"), 0, &[tp(0)], &[], 0).unwrap();
        s.update(&key("a"), 1, &[], &[], 0).unwrap();
        // Epoch 0 again starts over at epoch 1.
        s.update(&key("a"), 0, &[tp(1)], &[], 0).unwrap();
        assert_eq!(s.get(&key("a")).unwrap().next_epoch, 1);
        assert_eq!(s.get(&key("a")).unwrap().partitions, [tp(1)].into());
        s.update(&key("b"), 0, &[tp(0)], &[], 0).unwrap();
        assert_eq!(
            s.update(&key("c"), 0, &[tp(0)], &[], 0),
            Err(ResponseError::ShareSessionLimitReached)
        );
        // Replacing an existing one is not refused at the limit.
        s.update(&key("b"), 0, &[tp(0)], &[], 0).unwrap();
        assert!(s.remove_member("g", "a"));
        s.update(&key("c"), 0, &[tp(0)], &[], 0).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(next(i32::MAX), 1);
    }
}
