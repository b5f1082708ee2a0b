//! Typed errors of share-partition operations; the Kafka error code each answers with is
//! chosen at the edge (`server::codes`).
//!
//! An operation that returns an error has changed nothing (all-or-nothing per call).

use std::fmt;

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
