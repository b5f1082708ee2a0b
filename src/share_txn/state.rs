//! Transaction states, their one transition table, and the typed errors of transaction
//! operations (the Kafka error code each answers with is chosen at the edge: `server::codes`).
//!
//! ```text
//!   from \ to    EMPTY  ONGOING  PREPARE  COMMITTED  ABORTED
//!   EMPTY          -      yes       -         -         -
//!   ONGOING        -       -       yes        -        yes
//!   PREPARE        -       -        -        yes       yes
//!   COMMITTED      -       -        -         -         -
//!   ABORTED        -       -        -         -         -
//! ```
//!
//! Repeating an operation on a transaction already in the state it leads to (prepare on
//! PREPARE, commit on COMMITTED, abort on ABORTED or COMMITTED) is idempotency, decided by
//! the operation before it asks the table; the table itself refuses every same-state pair.

use std::fmt;

/// A share transaction's state (wire codes 0..=4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    Prepare,
    Committed,
    Aborted,
}

impl TxnState {
    pub const ALL: [TxnState; 5] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::Prepare,
        TxnState::Committed,
        TxnState::Aborted,
    ];

    /// The wire code (INT8).
    pub fn code(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::Prepare => 2,
            TxnState::Committed => 3,
            TxnState::Aborted => 4,
        }
    }

    /// Inverse of [`TxnState::code`].
    pub fn from_code(code: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.code() == code)
    }

    /// ONGOING or PREPARE: counts toward `share.transaction.max.pending`.
    pub fn is_pending(self) -> bool {
        matches!(self, TxnState::Ongoing | TxnState::Prepare)
    }

    /// COMMITTED or ABORTED.
    pub fn is_finished(self) -> bool {
        matches!(self, TxnState::Committed | TxnState::Aborted)
    }

    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "EMPTY",
            TxnState::Ongoing => "ONGOING",
            TxnState::Prepare => "PREPARE",
            TxnState::Committed => "COMMITTED",
            TxnState::Aborted => "ABORTED",
        }
    }
}

impl fmt::Display for TxnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The transition table (module docs). A refused transition is INVALID_TXN_STATE reporting
/// the state the transaction stays in.
pub fn validate_transition(from: TxnState, to: TxnState) -> Result<(), TxnError> {
    use TxnState::*;
    match (from, to) {
        (Empty, Ongoing)
        | (Ongoing, Prepare)
        | (Ongoing, Aborted)
        | (Prepare, Committed)
        | (Prepare, Aborted) => Ok(()),
        _ => Err(TxnError::InvalidTxnState { state: from }),
    }
}

/// Why a transaction operation was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnError {
    /// Malformed request: the transaction id is not `{groupId}-{prefix}-{checkpointId}` of
    /// the request's group, or is too long.
    InvalidRequest { reason: String },
    /// The transaction is in `state`, which does not allow the operation.
    InvalidTxnState { state: TxnState },
    /// TimeoutMs is neither -1 nor in `1..=max`.
    InvalidTransactionTimeout { timeout_ms: i64, max_ms: u64 },
    /// `share.transaction.max.pending` ONGOING + PREPARE transactions already exist.
    ConcurrentTransactions { pending: usize, max_pending: usize },
    /// Never seen, or forgotten after retention.
    TransactionalIdNotFound,
    /// Commit while acknowledgements registered on the transaction have not completed
    /// (retriable, as Kafka's CONCURRENT_TRANSACTIONS for a transition in progress).
    AcksInFlight { state: TxnState, acks: u32 },
}

impl TxnError {
    /// The TransactionState the response reports with this error: the transaction's state
    /// when there is one, EMPTY (no such transaction, or none created) otherwise.
    pub fn state(&self) -> TxnState {
        match self {
            TxnError::InvalidTxnState { state } | TxnError::AcksInFlight { state, .. } => *state,
            _ => TxnState::Empty,
        }
    }
}

impl fmt::Display for TxnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxnError::InvalidRequest { reason } => write!(f, "invalid request: {reason}"),
            TxnError::InvalidTxnState { state } => {
                write!(f, "the transaction is {state}, which does not allow this")
            }
            TxnError::InvalidTransactionTimeout { timeout_ms, max_ms } => write!(
                f,
                "transaction timeout {timeout_ms} ms is not -1 and not in [1, {max_ms}]"
            ),
            TxnError::ConcurrentTransactions {
                pending,
                max_pending,
            } => write!(
                f,
                "{pending} transactions pending; share.transaction.max.pending is {max_pending}"
            ),
            TxnError::TransactionalIdNotFound => f.write_str("unknown transaction id"),
            TxnError::AcksInFlight { state, acks } => write!(
                f,
                "the transaction is {state} with {acks} acknowledgements still in flight; retry"
            ),
        }
    }
}

impl std::error::Error for TxnError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transition_pair_matches_the_table() {
        use TxnState::*;
        let legal = [
            (Empty, Ongoing),
            (Ongoing, Prepare),
            (Ongoing, Aborted),
            (Prepare, Committed),
            (Prepare, Aborted),
        ];
        let mut seen = 0;
        for from in TxnState::ALL {
            for to in TxnState::ALL {
                let got = validate_transition(from, to);
                if legal.contains(&(from, to)) {
                    assert_eq!(got, Ok(()), "{from} -> {to}");
                    seen += 1;
                } else {
                    let err = got.expect_err("refused");
                    assert_eq!(
                        err,
                        TxnError::InvalidTxnState { state: from },
                        "{from} -> {to}"
                    );
                    assert_eq!(err.state(), from);
                }
            }
        }
        assert_eq!(seen, legal.len());
    }

    #[test]
    fn codes_are_the_wire_specs() {
        let codes: Vec<i8> = TxnState::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes, vec![0, 1, 2, 3, 4]);
        for s in TxnState::ALL {
            assert_eq!(TxnState::from_code(s.code()), Some(s));
        }
        assert_eq!(TxnState::from_code(5), None);
        // The errors' Kafka codes are tested with their mapping (`server::codes`).
        assert_eq!(TxnError::TransactionalIdNotFound.state(), TxnState::Empty);
        let in_flight = TxnError::AcksInFlight {
            state: TxnState::Prepare,
            acks: 1,
        };
        assert_eq!(in_flight.state(), TxnState::Prepare);
    }
}
