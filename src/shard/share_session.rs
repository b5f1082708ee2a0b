//! Share sessions (KIP-932 ShareFetch / ShareAcknowledge), per (group, member).
//!
//! Pure state, on the group's shard. Epoch rules as Kafka 4.4 (observed at the reference
//! broker):
//! - 0 opens a new session (replacing any existing one of the same key) with the request's
//!   partitions; a ShareFetch with epoch 0 may not carry acknowledgements (INVALID_REQUEST,
//!   checked by the handler), a ShareAcknowledge with epoch 0 is INVALID_SHARE_SESSION_EPOCH.
//! - -1 closes the session (the request's acknowledgements are applied first); without a
//!   session it is SHARE_SESSION_NOT_FOUND and nothing is applied.
//! - Any other epoch must name an existing session (else SHARE_SESSION_NOT_FOUND) and equal its
//!   expected epoch (else INVALID_SHARE_SESSION_EPOCH); then the session's epoch advances
//!   (wrapping to 1 after `i32::MAX`), the request's partitions are added and its forgotten
//!   partitions removed.
//!
//! Each session remembers the connection that last used it: when a connection drops, only the
//! sessions it still owns close ([`ShareSessions::disconnected`]), so a member that reconnected
//! and opened a new session keeps it (and its records).
//!
//! The number of sessions is capped per broker (Kafka's `group.share.max.share.sessions`):
//! every shard's [`ShareSessions`] counts in one [`SessionBudget`]
//! (SHARE_SESSION_LIMIT_REACHED when it is spent).

use crate::constants::SHARE_SESSIONS_MAX;
use crate::model::TopicPartition;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Kafka's `group.share.max.share.sessions` default.
pub const MAX_SHARE_SESSIONS: usize = SHARE_SESSIONS_MAX;

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
    pub partitions: BTreeSet<TopicPartition>,
    pub last_used_ms: u64,
    /// The connection that used the session last (`ConnInfo::id`).
    pub conn_id: u64,
}

/// Why a request's session epoch is refused (nothing of the request is applied); the handler
/// answers its Kafka code (`server::codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionError {
    /// The member has no session (epoch -1, or a positive epoch, without one).
    NotFound,
    /// Not the session's next epoch (or below -1, or 0 on a ShareAcknowledge).
    InvalidEpoch,
    /// Opening one more session would pass the broker's limit.
    LimitReached,
}

/// What a request did to its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionOutcome {
    /// The partitions to fetch from (the whole session after the update).
    Open(BTreeSet<TopicPartition>),
    /// Epoch -1: the session is closed; the member's acquired records should be released by
    /// the caller.
    Closed,
}

/// The broker-wide session count every shard's [`ShareSessions`] shares (the only state
/// shards share: a counter, so the limit is per broker as in Kafka).
#[derive(Clone, Debug)]
pub struct SessionBudget {
    limit: usize,
    used: Arc<AtomicUsize>,
}

impl SessionBudget {
    pub fn new(limit: usize) -> SessionBudget {
        SessionBudget {
            limit,
            used: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn take(&self) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_back(&self) {
        let before = self.used.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a session budget given back more than taken");
    }
}

/// Every share session of one shard.
#[derive(Debug)]
pub struct ShareSessions {
    sessions: HashMap<SessionKey, ShareSession>,
    budget: SessionBudget,
}

impl Default for ShareSessions {
    fn default() -> ShareSessions {
        ShareSessions::new(MAX_SHARE_SESSIONS)
    }
}

impl Drop for ShareSessions {
    fn drop(&mut self) {
        for _ in 0..self.sessions.len() {
            self.budget.give_back();
        }
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
    /// Sessions with a budget of their own (one shard, tests).
    pub fn new(limit: usize) -> ShareSessions {
        ShareSessions::with_budget(SessionBudget::new(limit))
    }

    /// Sessions counting against a budget shared with other shards.
    pub fn with_budget(budget: SessionBudget) -> ShareSessions {
        ShareSessions {
            sessions: HashMap::new(),
            budget,
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

    fn remove(&mut self, key: &SessionKey) -> Option<ShareSession> {
        let removed = self.sessions.remove(key);
        if removed.is_some() {
            self.budget.give_back();
        }
        removed
    }

    /// Applies a ShareFetch's session fields, from connection `conn_id`.
    pub fn update(
        &mut self,
        key: &SessionKey,
        epoch: i32,
        added: &[TopicPartition],
        forgotten: &[TopicPartition],
        conn_id: u64,
        now_ms: u64,
    ) -> Result<SessionOutcome, SessionError> {
        match epoch {
            -1 => self
                .remove(key)
                .map(|_| SessionOutcome::Closed)
                .ok_or(SessionError::NotFound),
            0 => {
                let replacing = self.sessions.contains_key(key);
                if !replacing && !self.budget.take() {
                    return Err(SessionError::LimitReached);
                }
                let mut partitions: BTreeSet<TopicPartition> = added.iter().copied().collect();
                for f in forgotten {
                    partitions.remove(f);
                }
                self.sessions.insert(
                    key.clone(),
                    ShareSession {
                        next_epoch: 1,
                        partitions: partitions.clone(),
                        last_used_ms: now_ms,
                        conn_id,
                    },
                );
                Ok(SessionOutcome::Open(partitions))
            }
            e if e < -1 => Err(SessionError::InvalidEpoch),
            e => {
                let session = self.sessions.get_mut(key).ok_or(SessionError::NotFound)?;
                if session.next_epoch != e {
                    return Err(SessionError::InvalidEpoch);
                }
                session.next_epoch = next(e);
                session.last_used_ms = now_ms;
                session.conn_id = conn_id;
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
        conn_id: u64,
        now_ms: u64,
    ) -> Result<SessionOutcome, SessionError> {
        match epoch {
            -1 => self.update(key, -1, &[], &[], conn_id, now_ms),
            e if e <= 0 => Err(SessionError::InvalidEpoch),
            e => self.update(key, e, &[], &[], conn_id, now_ms),
        }
    }

    /// Connection `conn_id` dropped: closes the member's session if that connection still owns
    /// it (`true`: the caller releases the member's records). A session a newer connection
    /// opened or used since stays.
    pub fn disconnected(&mut self, key: &SessionKey, conn_id: u64) -> bool {
        match self.sessions.get(key) {
            Some(s) if s.conn_id == conn_id => self.remove(key).is_some(),
            _ => false,
        }
    }

    /// Removes every session of a member (it left or was evicted).
    pub fn remove_member(&mut self, group_id: &str, member_id: &str) -> bool {
        self.remove(&SessionKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
        })
        .is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn key(m: &str) -> SessionKey {
        SessionKey {
            group_id: "g".into(),
            member_id: m.into(),
        }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new(Uuid::from_u128(7), p)
    }

    const C: u64 = 1;

    #[test]
    fn epochs_open_advance_and_close() {
        let mut s = ShareSessions::new(2);
        let k = key("a");
        assert_eq!(s.update(&k, 1, &[], &[], C, 0), Err(SessionError::NotFound));
        // Closing what does not exist: SHARE_SESSION_NOT_FOUND (Kafka 4.4, both APIs).
        assert_eq!(
            s.update(&k, -1, &[], &[], C, 0),
            Err(SessionError::NotFound)
        );
        assert_eq!(s.acknowledge(&k, -1, C, 0), Err(SessionError::NotFound));
        let out = s.update(&k, 0, &[tp(0), tp(1)], &[], C, 0).unwrap();
        assert_eq!(out, SessionOutcome::Open([tp(0), tp(1)].into()));
        // Later requests name no partitions: the session remembers them.
        assert_eq!(
            s.update(&k, 1, &[], &[], C, 1).unwrap(),
            SessionOutcome::Open([tp(0), tp(1)].into())
        );
        assert_eq!(
            s.update(&k, 1, &[], &[], C, 2),
            Err(SessionError::InvalidEpoch)
        );
        assert_eq!(
            s.update(&k, 3, &[], &[], C, 2),
            Err(SessionError::InvalidEpoch)
        );
        assert_eq!(
            s.update(&k, 2, &[tp(2)], &[tp(0)], C, 3).unwrap(),
            SessionOutcome::Open([tp(1), tp(2)].into())
        );
        assert_eq!(
            s.acknowledge(&k, 3, C, 4).unwrap(),
            SessionOutcome::Open([tp(1), tp(2)].into())
        );
        assert_eq!(s.acknowledge(&k, 0, C, 4), Err(SessionError::InvalidEpoch));
        assert_eq!(s.acknowledge(&k, -1, C, 5).unwrap(), SessionOutcome::Closed);
        assert_eq!(
            s.update(&k, -1, &[], &[], C, 5),
            Err(SessionError::NotFound)
        );
        assert_eq!(s.update(&k, 4, &[], &[], C, 5), Err(SessionError::NotFound));
        assert_eq!(s.budget.used(), 0);
    }

    #[test]
    fn reopen_replaces_and_limit_applies() {
        let mut s = ShareSessions::new(2);
        s.update(&key("a"), 0, &[tp(0)], &[], C, 0).unwrap();
        s.update(&key("a"), 1, &[], &[], C, 0).unwrap();
        // Epoch 0 again starts over at epoch 1.
        s.update(&key("a"), 0, &[tp(1)], &[], C, 0).unwrap();
        assert_eq!(s.get(&key("a")).unwrap().next_epoch, 1);
        assert_eq!(s.get(&key("a")).unwrap().partitions, [tp(1)].into());
        s.update(&key("b"), 0, &[tp(0)], &[], C, 0).unwrap();
        assert_eq!(
            s.update(&key("c"), 0, &[tp(0)], &[], C, 0),
            Err(SessionError::LimitReached)
        );
        // Replacing an existing one is not refused at the limit.
        s.update(&key("b"), 0, &[tp(0)], &[], C, 0).unwrap();
        assert!(s.remove_member("g", "a"));
        s.update(&key("c"), 0, &[tp(0)], &[], C, 0).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(next(i32::MAX), 1);
    }

    /// The limit is per broker: shards share one budget.
    #[test]
    fn the_limit_spans_shards() {
        let budget = SessionBudget::new(3);
        let mut one = ShareSessions::with_budget(budget.clone());
        let mut two = ShareSessions::with_budget(budget.clone());
        one.update(&key("a"), 0, &[], &[], C, 0).unwrap();
        one.update(&key("b"), 0, &[], &[], C, 0).unwrap();
        two.update(&key("c"), 0, &[], &[], C, 0).unwrap();
        assert_eq!(
            two.update(&key("d"), 0, &[], &[], C, 0),
            Err(SessionError::LimitReached)
        );
        one.update(&key("a"), -1, &[], &[], C, 0).unwrap();
        two.update(&key("d"), 0, &[], &[], C, 0).unwrap();
        assert_eq!(budget.used(), 3);
        drop(one);
        assert_eq!(budget.used(), 2, "a dropped shard gives its sessions back");
    }

    /// A dropped connection closes only the session it still owns.
    #[test]
    fn a_dropped_connection_closes_only_its_own_session() {
        let mut s = ShareSessions::new(10);
        let k = key("a");
        s.update(&k, 0, &[tp(0)], &[], 1, 0).unwrap();
        // The member reconnects and opens a new session on connection 2.
        s.update(&k, 0, &[tp(0)], &[], 2, 1).unwrap();
        assert!(!s.disconnected(&k, 1), "connection 1 no longer owns it");
        assert!(s.get(&k).is_some());
        assert!(s.disconnected(&k, 2));
        assert!(s.get(&k).is_none());
        assert!(!s.disconnected(&k, 2));
    }

    /// The reconnect of share_parity `delivery_near_the_limit`, drop processed first (what the
    /// runtime now makes the common order: the drop is handled once the connection's requests
    /// are answered, before its socket closes): the old session closes (the caller releases),
    /// and the new epoch 0 opens a fresh session on the new connection, taking no second slot.
    #[test]
    fn a_drop_processed_before_the_reconnect_closes_the_old_session() {
        let mut s = ShareSessions::new(10);
        let k = key("a");
        s.update(&k, 0, &[tp(0)], &[], 1, 0).unwrap();
        s.update(&k, 1, &[], &[], 1, 1).unwrap();
        assert!(s.disconnected(&k, 1), "connection 1 owned it: release");
        assert_eq!(s.budget.used(), 0);
        assert_eq!(
            s.update(&k, 0, &[tp(0)], &[], 2, 2).unwrap(),
            SessionOutcome::Open([tp(0)].into())
        );
        assert_eq!(s.get(&k).unwrap().conn_id, 2);
        assert_eq!(s.budget.used(), 1);
        assert!(
            !s.disconnected(&k, 1),
            "a second report of the drop is a no-op"
        );
    }
}
