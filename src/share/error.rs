//! Typed errors of share-partition operations, each with the Kafka error code it maps to.
//!
//! An operation that returns an error has changed nothing (all-or-nothing per call).

use std::fmt;

/// Kafka INVALID_REQUEST.
pub const INVALID_REQUEST: i16 = 42;
/// Kafka NON_EMPTY_GROUP.
pub const NON_EMPTY_GROUP: i16 = 68;
/// Kafka INVALID_RECORD_STATE.
pub const INVALID_RECORD_STATE: i16 = 121;

/// Why a share-partition operation was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShareError {
    /// Malformed acknowledgement batches, RELEASE/RENEW inside a transaction, bad offsets.
    InvalidRequest { reason: String },
    /// Some offset of `[first, last]` is not ACQUIRED by the member (or outside the window).
    InvalidRecordState { first: i64, last: i64 },
    /// The start offset cannot be altered while records are ACQUIRED or LOCKED.
    RecordsInFlight {
        acquired_records: u64,
        locked_records: u64,
    },
    /// A persisted snapshot or delta that cannot describe a share partition.
    CorruptState { reason: String },
}

impl ShareError {
    /// The Kafka error code a handler answers with.
    pub fn code(&self) -> i16 {
        match self {
            ShareError::InvalidRequest { .. } => INVALID_REQUEST,
            ShareError::InvalidRecordState { .. } => INVALID_RECORD_STATE,
            ShareError::RecordsInFlight { .. } => NON_EMPTY_GROUP,
            // Never sent to a client: the journal reports it when it replays.
            ShareError::CorruptState { .. } => INVALID_REQUEST,
        }
    }

    pub(crate) fn invalid_request(reason: impl Into<String>) -> ShareError {
        ShareError::InvalidRequest {
            reason: reason.into(),
        }
    }

    pub(crate) fn corrupt(reason: impl Into<String>) -> ShareError {
        ShareError::CorruptState {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ShareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShareError::InvalidRequest { reason } => write!(f, "invalid request: {reason}"),
            ShareError::InvalidRecordState { first, last } => write!(
                f,
                "offsets [{first}, {last}] are not all acquired by this member"
            ),
            ShareError::RecordsInFlight {
                acquired_records,
                locked_records,
            } => write!(
                f,
                "{acquired_records} records acquired and {locked_records} locked in transactions"
            ),
            ShareError::CorruptState { reason } => write!(f, "corrupt share state: {reason}"),
        }
    }
}

impl std::error::Error for ShareError {}
