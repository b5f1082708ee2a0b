//! Record states, acknowledge types, and the one transition table every state change obeys.
//!
//! Kafka's `RecordState` (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED) plus Lockstep's
//! `LOCKED{txn, outcome}` for a record acknowledged inside a transaction, governed by the
//! transaction and not by the acquisition lock (a lock timeout, a member leaving or a session
//! closing never releases it):
//!
//! ```text
//!   from \ to        AVAILABLE  ACQUIRED  ACKNOWLEDGED  ARCHIVED  LOCKED
//!   AVAILABLE            -         yes         -           yes¹      -
//!   ACQUIRED            yes         -         yes          yes      yes
//!   ACKNOWLEDGED         -          -          -            -        -
//!   ARCHIVED             -          -          -            -        -
//!   LOCKED{ACCEPT}      yes         -         yes          yes²      -
//!   LOCKED{REJECT}      yes         -          -           yes       -
//! ```
//!
//! ACKNOWLEDGED and ARCHIVED are terminal. A LOCKED record leaves only by its transaction's
//! decision: commit (to the outcome's terminal state) or abort (back to AVAILABLE). Re-arming
//! an acquisition lock (RENEW) changes a deadline, not a state, and is not a transition.
//!
//! ¹ Only when the log start moves past the record (retention, DeleteRecords): its data is
//! gone, so it is archived, as Kafka's `updateCacheAndOffsets` does.
//! ² Only for an abort of a record below the log start: it cannot become AVAILABLE again.
//! `validate_transition` is pure and owns no state; every [`super::SharePartition`] change
//! calls it.

use std::fmt;

/// Handle of a transaction inside one share partition (interned transaction id).
///
/// Only meaningful for the [`super::SharePartition`] that issued it; its
/// [`super::SharePartition::txn_id`] gives the transaction id back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnKey(pub(crate) u32);

/// What a LOCKED record becomes when its transaction commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockOutcome {
    /// Acknowledged with ACCEPT inside the transaction: commit makes it ACKNOWLEDGED.
    Accept,
    /// Acknowledged with REJECT (or GAP) inside the transaction: commit makes it ARCHIVED.
    Reject,
}

impl LockOutcome {
    /// The acknowledge-type code (Kafka's) this outcome persists as: ACCEPT 1, REJECT 3.
    pub fn code(self) -> i8 {
        match self {
            LockOutcome::Accept => AcknowledgeType::Accept.code(),
            LockOutcome::Reject => AcknowledgeType::Reject.code(),
        }
    }

    /// Inverse of [`LockOutcome::code`].
    pub fn from_code(code: i8) -> Option<LockOutcome> {
        match AcknowledgeType::from_code(code)? {
            AcknowledgeType::Accept => Some(LockOutcome::Accept),
            AcknowledgeType::Reject => Some(LockOutcome::Reject),
            _ => None,
        }
    }
}

/// The state of one record (offset) of a share partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordState {
    /// May be acquired by the next fetch.
    Available,
    /// Delivered to one member under an acquisition lock (never persisted).
    Acquired,
    /// Terminal: processed.
    Acknowledged,
    /// Terminal: rejected, a gap, or delivered too often.
    Archived,
    /// Acknowledged inside a transaction, waiting for its commit or abort.
    Locked { txn: TxnKey, outcome: LockOutcome },
}

impl RecordState {
    /// Kafka's persisted state codes (AVAILABLE 0, ACQUIRED 1, ACKNOWLEDGED 2, ARCHIVED 4) and
    /// Lockstep's LOCKED 8.
    pub fn code(self) -> u8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archived => 4,
            RecordState::Locked { .. } => 8,
        }
    }

    /// ACKNOWLEDGED or ARCHIVED: the record is done and never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }

    /// The name Kafka and the KIP use.
    pub fn name(self) -> &'static str {
        match self {
            RecordState::Available => "AVAILABLE",
            RecordState::Acquired => "ACQUIRED",
            RecordState::Acknowledged => "ACKNOWLEDGED",
            RecordState::Archived => "ARCHIVED",
            RecordState::Locked { .. } => "LOCKED",
        }
    }
}

impl fmt::Display for RecordState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordState::Locked { txn, outcome } => {
                write!(f, "LOCKED{{txn#{}, {:?}}}", txn.0, outcome)
            }
            other => f.write_str(other.name()),
        }
    }
}

/// A transition the table does not allow. Reaching one is a bug in the caller's checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IllegalTransition {
    pub from: RecordState,
    pub to: RecordState,
}

impl fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "illegal record state transition {} -> {}",
            self.from, self.to
        )
    }
}

impl std::error::Error for IllegalTransition {}

/// The transition table (see the module docs). Same-state "transitions" are illegal.
pub fn validate_transition(from: RecordState, to: RecordState) -> Result<(), IllegalTransition> {
    use RecordState::*;
    let legal = matches!(
        (from, to),
        (Available, Acquired)
            | (Available, Archived)
            | (Acquired, Available)
            | (Acquired, Acknowledged)
            | (Acquired, Archived)
            | (Acquired, Locked { .. })
            | (Locked { .. }, Available)
            | (
                Locked {
                    outcome: LockOutcome::Accept,
                    ..
                },
                Acknowledged
            )
            | (Locked { .. }, Archived)
    );
    if legal {
        Ok(())
    } else {
        Err(IllegalTransition { from, to })
    }
}

/// Kafka's acknowledge types (wire codes 0..=3) and KIP-1222's RENEW (4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcknowledgeType {
    /// No record at this offset (a control record or a compacted hole): archived.
    Gap,
    /// Processed: ACKNOWLEDGED.
    Accept,
    /// Give it back: AVAILABLE, or ARCHIVED at the delivery count limit.
    Release,
    /// Unprocessable: ARCHIVED.
    Reject,
    /// Keep it: re-arm the acquisition lock.
    Renew,
}

impl AcknowledgeType {
    pub const ALL: [AcknowledgeType; 5] = [
        AcknowledgeType::Gap,
        AcknowledgeType::Accept,
        AcknowledgeType::Release,
        AcknowledgeType::Reject,
        AcknowledgeType::Renew,
    ];

    /// The wire code.
    pub fn code(self) -> i8 {
        match self {
            AcknowledgeType::Gap => 0,
            AcknowledgeType::Accept => 1,
            AcknowledgeType::Release => 2,
            AcknowledgeType::Reject => 3,
            AcknowledgeType::Renew => 4,
        }
    }

    /// Inverse of [`AcknowledgeType::code`]; `None` for an unknown code (INVALID_REQUEST).
    pub fn from_code(code: i8) -> Option<AcknowledgeType> {
        AcknowledgeType::ALL.into_iter().find(|t| t.code() == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_states() -> Vec<RecordState> {
        let t = TxnKey(7);
        vec![
            RecordState::Available,
            RecordState::Acquired,
            RecordState::Acknowledged,
            RecordState::Archived,
            RecordState::Locked {
                txn: t,
                outcome: LockOutcome::Accept,
            },
            RecordState::Locked {
                txn: t,
                outcome: LockOutcome::Reject,
            },
            RecordState::Locked {
                txn: TxnKey(8),
                outcome: LockOutcome::Accept,
            },
        ]
    }

    /// Every pair of states, against the table written out independently here.
    #[test]
    fn every_transition_pair_matches_the_table() {
        use RecordState::*;
        let mut legal_count = 0;
        for from in all_states() {
            for to in all_states() {
                let expected = match (from.name(), to.name()) {
                    ("AVAILABLE", "ACQUIRED" | "ARCHIVED") => true,
                    ("ACQUIRED", "AVAILABLE" | "ACKNOWLEDGED" | "ARCHIVED" | "LOCKED") => true,
                    ("LOCKED", "AVAILABLE") => true,
                    ("LOCKED", "ACKNOWLEDGED") => {
                        matches!(
                            from,
                            Locked {
                                outcome: LockOutcome::Accept,
                                ..
                            }
                        )
                    }
                    ("LOCKED", "ARCHIVED") => true,
                    _ => false,
                };
                let got = validate_transition(from, to);
                assert_eq!(got.is_ok(), expected, "{from} -> {to}");
                if let Err(e) = got {
                    assert_eq!((e.from, e.to), (from, to));
                } else {
                    legal_count += 1;
                }
            }
        }
        // AVAILABLE->{ACQUIRED, ARCHIVED}, ACQUIRED->{AVAILABLE, ACKNOWLEDGED, ARCHIVED, 3 LOCKED},
        // each of 3 LOCKED -> AVAILABLE, 2 LOCKED{ACCEPT} -> ACKNOWLEDGED, 3 LOCKED -> ARCHIVED.
        assert_eq!(legal_count, 2 + 6 + 3 + 2 + 3);
    }

    #[test]
    fn terminal_states_have_no_way_out() {
        for from in all_states().into_iter().filter(|s| s.is_terminal()) {
            for to in all_states() {
                assert!(validate_transition(from, to).is_err(), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn codes_round_trip() {
        for t in AcknowledgeType::ALL {
            assert_eq!(AcknowledgeType::from_code(t.code()), Some(t));
        }
        assert_eq!(AcknowledgeType::from_code(5), None);
        assert_eq!(AcknowledgeType::from_code(-1), None);
        for o in [LockOutcome::Accept, LockOutcome::Reject] {
            assert_eq!(LockOutcome::from_code(o.code()), Some(o));
        }
        assert_eq!(
            LockOutcome::from_code(AcknowledgeType::Release.code()),
            None
        );
        let codes: Vec<u8> = all_states().iter().map(|s| s.code()).collect();
        assert_eq!(&codes[..5], &[0, 1, 2, 4, 8]);
    }
}
