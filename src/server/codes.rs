//! The Kafka error codes of the shard core's typed errors, chosen here, at the edge: the state
//! machines say what went wrong ([`SessionError`], [`GroupError`], [`PartitionError`],
//! [`MarkerError`], [`ControllerError`], [`LogErrorKind`], a call's [`CallError`]), the handlers
//! answer the code.

use crate::group::GroupError;
use crate::log::LogErrorKind;
use crate::shard::ops::{CallError, ControllerError, MarkerError, PartitionError};
use crate::shard::share_session::SessionError;
use kafka_protocol::ResponseError;

impl SessionError {
    /// The request's top-level error code.
    pub fn code(self) -> i16 {
        match self {
            SessionError::NotFound => ResponseError::ShareSessionNotFound.code(),
            SessionError::InvalidEpoch => ResponseError::InvalidShareSessionEpoch.code(),
            SessionError::LimitReached => ResponseError::ShareSessionLimitReached.code(),
        }
    }
}

impl GroupError {
    /// The error code of the request, member or partition it refused.
    pub fn code(self) -> i16 {
        let error = match self {
            GroupError::UnknownMember => ResponseError::UnknownMemberId,
            GroupError::FencedInstance => ResponseError::FencedInstanceId,
            GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
            GroupError::StaleMemberEpoch => ResponseError::StaleMemberEpoch,
            GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
            GroupError::InconsistentProtocol => ResponseError::InconsistentGroupProtocol,
            GroupError::InvalidSessionTimeout => ResponseError::InvalidSessionTimeout,
            GroupError::GroupFull => ResponseError::GroupMaxSizeReached,
            GroupError::MemberIdRequired => ResponseError::MemberIdRequired,
            GroupError::NotEmpty => ResponseError::NonEmptyGroup,
            GroupError::GroupNotFound => ResponseError::GroupIdNotFound,
            GroupError::SubscribedToTopic => ResponseError::GroupSubscribedToTopic,
            GroupError::MetadataTooLarge => ResponseError::OffsetMetadataTooLarge,
            // Kafka stores what it is given; a negative offset cannot be journalled here, so it
            // is refused as Kafka refuses offsets out of range.
            GroupError::NegativeOffset => ResponseError::OffsetOutOfRange,
            GroupError::UnstableOffset => ResponseError::UnstableOffsetCommit,
            GroupError::InvalidProducerId => ResponseError::InvalidProducerIdMapping,
        };
        error.code()
    }

    /// The error code of an outcome (0: none).
    pub fn code_of(outcome: Result<(), GroupError>) -> i16 {
        outcome.err().map_or(0, GroupError::code)
    }

    /// The error code of an optional error (0: none).
    pub fn code_or_none(error: Option<GroupError>) -> i16 {
        error.map_or(0, GroupError::code)
    }
}

impl CallError {
    /// The Kafka error code a client gets for this failure.
    pub fn code(&self) -> i16 {
        match self {
            CallError::NotController => ResponseError::NotController.code(),
            CallError::Unreachable | CallError::NotDurable(_) => {
                ResponseError::KafkaStorageError.code()
            }
            CallError::Abandoned | CallError::UnexpectedReply(_) => {
                ResponseError::UnknownServerError.code()
            }
        }
    }
}

impl PartitionError {
    /// The partition's error code.
    pub fn code(self) -> i16 {
        match self {
            PartitionError::Unknown => ResponseError::UnknownTopicOrPartition.code(),
            PartitionError::Unavailable => ResponseError::KafkaStorageError.code(),
        }
    }
}

impl LogErrorKind {
    /// The error code of the partition whose log refused or failed.
    pub fn code(self) -> i16 {
        let error = match self {
            LogErrorKind::CrcMismatch => ResponseError::CorruptMessage,
            LogErrorKind::InvalidBatch => ResponseError::InvalidRecord,
            LogErrorKind::TooLarge => ResponseError::MessageTooLarge,
            LogErrorKind::OffsetOutOfRange => ResponseError::OffsetOutOfRange,
            LogErrorKind::InvalidConfig => ResponseError::InvalidConfig,
            LogErrorKind::Storage => ResponseError::KafkaStorageError,
        };
        error.code()
    }
}

impl MarkerError {
    /// The error code of the partition (WriteTxnMarkers) or group whose marker failed.
    pub fn code(&self) -> i16 {
        match self {
            MarkerError::Partition(e) => e.code(),
            MarkerError::Refused(e) => e.code(),
            MarkerError::NotAppended(kind) => kind.code(),
            MarkerError::NotDurable(_) => ResponseError::KafkaStorageError.code(),
            MarkerError::TimedOut => ResponseError::RequestTimedOut.code(),
        }
    }
}

impl ControllerError {
    /// The error code of the admin op the controller did not carry out.
    pub fn code(self) -> i16 {
        match self {
            ControllerError::Stopping => ResponseError::NotController.code(),
            ControllerError::NotPersisted => ResponseError::KafkaStorageError.code(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_errors_answer_kafkas_codes() {
        // Kafka 4.4's codes (Errors.java): SHARE_SESSION_NOT_FOUND 122,
        // INVALID_SHARE_SESSION_EPOCH 123, SHARE_SESSION_LIMIT_REACHED 133.
        assert_eq!(SessionError::NotFound.code(), 122);
        assert_eq!(SessionError::InvalidEpoch.code(), 123);
        assert_eq!(SessionError::LimitReached.code(), 133);
    }

    #[test]
    fn group_errors_answer_kafkas_codes() {
        // Kafka 4.4's codes (Errors.java).
        let expected = [
            (GroupError::UnknownMember, 25),
            (GroupError::FencedInstance, 82),
            (GroupError::IllegalGeneration, 22),
            (GroupError::StaleMemberEpoch, 113),
            (GroupError::RebalanceInProgress, 27),
            (GroupError::InconsistentProtocol, 23),
            (GroupError::InvalidSessionTimeout, 26),
            (GroupError::GroupFull, 81),
            (GroupError::MemberIdRequired, 79),
            (GroupError::NotEmpty, 68),
            (GroupError::GroupNotFound, 69),
            (GroupError::SubscribedToTopic, 86),
            (GroupError::MetadataTooLarge, 12),
            (GroupError::NegativeOffset, 1),
            (GroupError::UnstableOffset, 88),
            (GroupError::InvalidProducerId, 49),
        ];
        for (error, code) in expected {
            assert_eq!(error.code(), code, "{error:?}");
        }
        assert_eq!(GroupError::code_of(Ok(())), 0);
        assert_eq!(GroupError::code_of(Err(GroupError::NotEmpty)), 68);
        assert_eq!(GroupError::code_or_none(None), 0);
    }

    #[test]
    fn partition_log_marker_controller_and_call_errors_answer_kafkas_codes() {
        // Kafka 4.4's codes (Errors.java): UNKNOWN_TOPIC_OR_PARTITION 3, KAFKA_STORAGE_ERROR 56,
        // CORRUPT_MESSAGE 2, INVALID_RECORD 87, MESSAGE_TOO_LARGE 10, OFFSET_OUT_OF_RANGE 1,
        // INVALID_CONFIG 40, INVALID_PRODUCER_EPOCH 47, REQUEST_TIMED_OUT 7, NOT_CONTROLLER 41.
        assert_eq!(PartitionError::Unknown.code(), 3);
        assert_eq!(PartitionError::Unavailable.code(), 56);
        let kinds = [
            (LogErrorKind::CrcMismatch, 2),
            (LogErrorKind::InvalidBatch, 87),
            (LogErrorKind::TooLarge, 10),
            (LogErrorKind::OffsetOutOfRange, 1),
            (LogErrorKind::InvalidConfig, 40),
            (LogErrorKind::Storage, 56),
        ];
        for (kind, code) in kinds {
            assert_eq!(kind.code(), code, "{kind:?}");
        }
        let stale = crate::ptxn::partition::TxnError::StaleMarker {
            producer_id: 1,
            epoch: 0,
            current: 1,
        };
        let markers = [
            (MarkerError::Partition(PartitionError::Unknown), 3),
            (MarkerError::Partition(PartitionError::Unavailable), 56),
            (MarkerError::Refused(stale), 47),
            (MarkerError::NotAppended(LogErrorKind::Storage), 56),
            (MarkerError::NotDurable("disk".into()), 56),
            (MarkerError::TimedOut, 7),
        ];
        for (error, code) in markers {
            assert_eq!(error.code(), code, "{error:?}");
        }
        assert_eq!(ControllerError::Stopping.code(), 41);
        assert_eq!(ControllerError::NotPersisted.code(), 56);
        // A call without a reply of its own: UNKNOWN_SERVER_ERROR -1 for a bug or an abandoned op.
        assert_eq!(CallError::NotController.code(), 41);
        assert_eq!(CallError::Unreachable.code(), 56);
        assert_eq!(CallError::NotDurable("journal".into()).code(), 56);
        assert_eq!(CallError::Abandoned.code(), -1);
        assert_eq!(CallError::UnexpectedReply("x".into()).code(), -1);
    }
}

// Data path
//
// Produce, Fetch, ListOffsets and DeleteRecords: the shard core says why a partition was not
// answered as asked ([`ProduceError`], [`ProducerError`], [`TxnError`], [`FetchError`],
// [`ListOffsetsError`], [`DeleteRecordsError`]); the handlers answer these codes.

use crate::ptxn::partition::TxnError;
use crate::shard::ops::{DeleteRecordsError, FetchError, ListOffsetsError, ProduceError};
use crate::shard::producer_state::ProducerError;

impl ProduceError {
    /// The partition's error code in the Produce response.
    pub fn code(self) -> i16 {
        match self {
            ProduceError::Partition(e) => e.code(),
            ProduceError::Log(kind) => kind.code(),
            ProduceError::ControlBatch | ProduceError::NoProducerId | ProduceError::NoSequence => {
                ResponseError::InvalidRecord.code()
            }
            ProduceError::Txn(e) => e.code(),
            ProduceError::Producer(e) => e.code(),
            ProduceError::NotDurable => ResponseError::KafkaStorageError.code(),
            ProduceError::TimedOut => ResponseError::RequestTimedOut.code(),
        }
    }

    /// The error code of a produce's outcome (0: none).
    pub fn code_or_none(error: Option<ProduceError>) -> i16 {
        error.map_or(0, ProduceError::code)
    }
}

impl ProducerError {
    /// The error code of a batch the idempotent-producer state refused.
    pub fn code(self) -> i16 {
        match self {
            ProducerError::StaleEpoch { .. } => ResponseError::InvalidProducerEpoch.code(),
            ProducerError::OutOfOrder { .. } => ResponseError::OutOfOrderSequenceNumber.code(),
        }
    }
}

impl TxnError {
    /// The error code of a batch or marker the partition's transaction state refused.
    pub fn code(self) -> i16 {
        match self {
            TxnError::NotTransactional { .. } => ResponseError::InvalidTxnState.code(),
            TxnError::StaleMarker { .. } => ResponseError::InvalidProducerEpoch.code(),
            // The client retries it.
            TxnError::EarlierBatchVerifying { .. } => {
                ResponseError::OutOfOrderSequenceNumber.code()
            }
        }
    }
}

impl FetchError {
    /// The partition's error code in the Fetch response.
    pub fn code(self) -> i16 {
        match self {
            FetchError::Partition(e) => e.code(),
            FetchError::Log(kind) => kind.code(),
        }
    }

    /// The error code of a fetched partition (0: none).
    pub fn code_or_none(error: Option<FetchError>) -> i16 {
        error.map_or(0, FetchError::code)
    }
}

impl ListOffsetsError {
    /// The partition's error code in the ListOffsets response.
    pub fn code(self) -> i16 {
        match self {
            ListOffsetsError::Partition(e) => e.code(),
            ListOffsetsError::Log(kind) => kind.code(),
            ListOffsetsError::UnknownTimestamp => ResponseError::InvalidRequest.code(),
        }
    }
}

impl DeleteRecordsError {
    /// The partition's error code in the DeleteRecords response.
    pub fn code(self) -> i16 {
        match self {
            DeleteRecordsError::Partition(e) => e.code(),
            DeleteRecordsError::Log(kind) => kind.code(),
            DeleteRecordsError::NotDurable => ResponseError::KafkaStorageError.code(),
            DeleteRecordsError::TimedOut => ResponseError::RequestTimedOut.code(),
        }
    }
}

#[cfg(test)]
mod data_path_tests {
    use super::*;

    #[test]
    fn produce_errors_answer_kafkas_codes() {
        // Kafka 4.4's codes (Errors.java): UNKNOWN_TOPIC_OR_PARTITION 3, KAFKA_STORAGE_ERROR 56,
        // CORRUPT_MESSAGE 2, INVALID_RECORD 87, MESSAGE_TOO_LARGE 10, INVALID_TXN_STATE 48,
        // INVALID_PRODUCER_EPOCH 47, OUT_OF_ORDER_SEQUENCE_NUMBER 45, REQUEST_TIMED_OUT 7.
        let stale = ProducerError::StaleEpoch {
            producer_id: 1,
            epoch: 0,
            current: 1,
        };
        let out_of_order = ProducerError::OutOfOrder {
            producer_id: 1,
            epoch: 0,
            first_sequence: 5,
            expected: 3,
        };
        let verifying = TxnError::EarlierBatchVerifying {
            producer_id: 1,
            sequence: 5,
            lowest_sequence: 0,
        };
        let expected = [
            (ProduceError::Partition(PartitionError::Unknown), 3),
            (ProduceError::Partition(PartitionError::Unavailable), 56),
            (ProduceError::Log(LogErrorKind::CrcMismatch), 2),
            (ProduceError::Log(LogErrorKind::InvalidBatch), 87),
            (ProduceError::Log(LogErrorKind::TooLarge), 10),
            (ProduceError::Log(LogErrorKind::Storage), 56),
            (ProduceError::ControlBatch, 87),
            (ProduceError::NoProducerId, 87),
            (ProduceError::NoSequence, 87),
            (
                ProduceError::Txn(TxnError::NotTransactional { producer_id: 1 }),
                48,
            ),
            (ProduceError::Txn(verifying), 45),
            (ProduceError::Producer(stale), 47),
            (ProduceError::Producer(out_of_order), 45),
            (ProduceError::NotDurable, 56),
            (ProduceError::TimedOut, 7),
        ];
        for (error, code) in expected {
            assert_eq!(error.code(), code, "{error:?}");
        }
        assert_eq!(ProduceError::code_or_none(None), 0);
        let marker = TxnError::StaleMarker {
            producer_id: 1,
            epoch: 0,
            current: 1,
        };
        assert_eq!(marker.code(), 47);
    }

    #[test]
    fn fetch_list_offsets_and_delete_records_errors_answer_kafkas_codes() {
        // Kafka 4.4's codes (Errors.java): OFFSET_OUT_OF_RANGE 1, INVALID_REQUEST 42, and as
        // above.
        let fetch = [
            (FetchError::Partition(PartitionError::Unknown), 3),
            (FetchError::Partition(PartitionError::Unavailable), 56),
            (FetchError::Log(LogErrorKind::OffsetOutOfRange), 1),
            (FetchError::Log(LogErrorKind::Storage), 56),
        ];
        for (error, code) in fetch {
            assert_eq!(error.code(), code, "{error:?}");
        }
        assert_eq!(FetchError::code_or_none(None), 0);
        let listed = [
            (ListOffsetsError::Partition(PartitionError::Unknown), 3),
            (ListOffsetsError::Partition(PartitionError::Unavailable), 56),
            (ListOffsetsError::Log(LogErrorKind::Storage), 56),
            (ListOffsetsError::UnknownTimestamp, 42),
        ];
        for (error, code) in listed {
            assert_eq!(error.code(), code, "{error:?}");
        }
        let deleted = [
            (DeleteRecordsError::Partition(PartitionError::Unknown), 3),
            (
                DeleteRecordsError::Partition(PartitionError::Unavailable),
                56,
            ),
            (DeleteRecordsError::Log(LogErrorKind::OffsetOutOfRange), 1),
            (DeleteRecordsError::Log(LogErrorKind::Storage), 56),
            (DeleteRecordsError::NotDurable, 56),
            (DeleteRecordsError::TimedOut, 7),
        ];
        for (error, code) in deleted {
            assert_eq!(error.code(), code, "{error:?}");
        }
    }
}

/// Share groups and share transactions (their own module: `crate::txn::TxnError` here, the
/// partition transactions' `TxnError` above).
mod share_codes {
    use super::*;

    // Share groups and share transactions
    //
    // The share-group and share-transaction state machines name what went wrong
    // ([`ShareHeartbeatError`], [`ShareError`], [`ShareLockError`], [`SharePartitionError`],
    // [`TxnError`], [`ShareTxnError`]); the codes are chosen here.

    use crate::ptxn::share::ShareLockError;
    use crate::shard::ops::{
        ShareAckResult, SharePartitionError, ShareTxnError, TxnAckError, TxnAnswer,
    };
    use crate::shard::share_group::ShareHeartbeatError;
    use crate::share::ShareError;
    use crate::txn::TxnError;

    impl ShareHeartbeatError {
        /// The ShareGroupHeartbeat's error code.
        pub fn code(self) -> i16 {
            let error = match self {
                ShareHeartbeatError::UnknownMember => ResponseError::UnknownMemberId,
                ShareHeartbeatError::FencedMemberEpoch => ResponseError::FencedMemberEpoch,
                ShareHeartbeatError::InvalidRequest => ResponseError::InvalidRequest,
            };
            error.code()
        }
    }

    impl ShareError {
        /// The error code of the partition whose share state refused the change.
        pub fn code(&self) -> i16 {
            let error = match self {
                ShareError::InvalidRequest { .. } => ResponseError::InvalidRequest,
                ShareError::InvalidRecordState { .. } => ResponseError::InvalidRecordState,
                ShareError::RecordsInFlight { .. } => ResponseError::NonEmptyGroup,
                // Never sent to a client: the journal reports it when it replays.
                ShareError::CorruptState { .. } => ResponseError::InvalidRequest,
            };
            error.code()
        }
    }

    impl ShareLockError {
        /// The error code of the partition that refused a TxnShareAcknowledge.
        pub fn code(&self) -> i16 {
            match self {
                ShareLockError::InvalidAcknowledgeType(_) => ResponseError::InvalidRequest.code(),
                ShareLockError::FencedEpoch { .. } => ResponseError::InvalidProducerEpoch.code(),
                ShareLockError::Share(e) => e.code(),
            }
        }
    }

    impl SharePartitionError {
        /// The partition's error code (ShareFetch, ShareAcknowledge, a transactional lock,
        /// AlterShareGroupOffsets, DeleteShareGroupOffsets).
        pub fn code(&self) -> i16 {
            match self {
                SharePartitionError::Partition(e) => e.code(),
                SharePartitionError::Log(kind) => kind.code(),
                SharePartitionError::Share(e) => e.code(),
                SharePartitionError::Lock(e) => e.code(),
                SharePartitionError::StateUnusable => ResponseError::UnknownServerError.code(),
                SharePartitionError::TransactionalGroup => ResponseError::InvalidRequest.code(),
                SharePartitionError::NothingAcquired => ResponseError::InvalidRecordState.code(),
                SharePartitionError::NotDurable => ResponseError::KafkaStorageError.code(),
                SharePartitionError::Call(failure) => failure.code(),
            }
        }

        /// The error code of an optional error (0: none).
        pub fn code_or_none(error: Option<&SharePartitionError>) -> i16 {
            error.map_or(0, SharePartitionError::code)
        }
    }

    impl ShareAckResult {
        /// The partition's error code (0: applied).
        pub fn error_code(&self) -> i16 {
            SharePartitionError::code_or_none(self.error.as_ref())
        }
    }

    impl TxnError {
        /// The error code of the share-transaction request the state machine refused.
        pub fn code(&self) -> i16 {
            let error = match self {
                TxnError::InvalidRequest { .. } => ResponseError::InvalidRequest,
                TxnError::InvalidTxnState { .. } => ResponseError::InvalidTxnState,
                TxnError::InvalidTransactionTimeout { .. } => {
                    ResponseError::InvalidTransactionTimeout
                }
                TxnError::ConcurrentTransactions { .. } => ResponseError::ConcurrentTransactions,
                TxnError::TransactionalIdNotFound => ResponseError::TransactionalIdNotFound,
                // Retriable, as Kafka's CONCURRENT_TRANSACTIONS for a transition in progress.
                TxnError::AcksInFlight { .. } => ResponseError::ConcurrentTransactions,
            };
            error.code()
        }
    }

    impl ShareTxnError {
        /// The error code of the share-transaction request (ShareBeginTransaction,
        /// SharePrepareTransaction, ShareCommitTransaction, ShareAbortTransaction,
        /// ShareListTransactions, ShareAcknowledgeTransactional).
        pub fn code(&self) -> i16 {
            match self {
                ShareTxnError::Txn(e) => e.code(),
                ShareTxnError::UnknownMember => ResponseError::UnknownMemberId.code(),
                ShareTxnError::NotDurable => ResponseError::KafkaStorageError.code(),
                ShareTxnError::TimedOut => ResponseError::RequestTimedOut.code(),
                ShareTxnError::Call(failure) => failure.code(),
            }
        }
    }

    impl TxnAnswer {
        /// The answer's error code (0: none).
        pub fn error_code(&self) -> i16 {
            self.error.as_ref().map_or(0, ShareTxnError::code)
        }
    }

    impl TxnAckError {
        /// The partition's error code and message.
        pub fn code_and_message(&self) -> (i16, Option<String>) {
            match self {
                TxnAckError::Refused(answer) => (answer.error_code(), answer.error_message.clone()),
                TxnAckError::NotLocked(result) => {
                    (result.error_code(), result.error_message.clone())
                }
                TxnAckError::Call(failure) => (
                    failure.code(),
                    Some(format!("the partition's shard did not lock: {failure:?}")),
                ),
            }
        }
    }

    #[cfg(test)]
    mod share_tests {
        use super::*;
        use crate::ptxn::share::ProducerLock;
        use crate::txn::TxnState;

        #[test]
        fn share_heartbeat_errors_answer_kafkas_codes() {
            // Kafka 4.4's codes (Errors.java): UNKNOWN_MEMBER_ID 25, FENCED_MEMBER_EPOCH 110,
            // INVALID_REQUEST 42.
            assert_eq!(ShareHeartbeatError::UnknownMember.code(), 25);
            assert_eq!(ShareHeartbeatError::FencedMemberEpoch.code(), 110);
            assert_eq!(ShareHeartbeatError::InvalidRequest.code(), 42);
        }

        #[test]
        fn share_partition_errors_answer_kafkas_codes() {
            // Kafka 4.4's codes (Errors.java): INVALID_REQUEST 42, INVALID_RECORD_STATE 121,
            // NON_EMPTY_GROUP 68, INVALID_PRODUCER_EPOCH 47, UNKNOWN_TOPIC_OR_PARTITION 3,
            // KAFKA_STORAGE_ERROR 56, OFFSET_OUT_OF_RANGE 1, UNKNOWN_SERVER_ERROR -1,
            // NOT_CONTROLLER 41.
            let reason = || "r".to_string();
            let shares = [
                (ShareError::InvalidRequest { reason: reason() }, 42),
                (ShareError::InvalidRecordState { first: 0, last: 1 }, 121),
                (
                    ShareError::RecordsInFlight {
                        acquired_records: 1,
                        locked_records: 0,
                    },
                    68,
                ),
                (ShareError::CorruptState { reason: reason() }, 42),
            ];
            for (error, code) in &shares {
                assert_eq!(error.code(), *code, "{error:?}");
                assert_eq!(ShareLockError::Share(error.clone()).code(), *code);
                assert_eq!(SharePartitionError::Share(error.clone()).code(), *code);
            }
            let fenced = ShareLockError::FencedEpoch {
                lock: ProducerLock::new(7, 1).expect("a valid lock"),
                held_epoch: 2,
            };
            let locks = [
                (ShareLockError::InvalidAcknowledgeType(2), 42),
                (fenced.clone(), 47),
            ];
            for (error, code) in &locks {
                assert_eq!(error.code(), *code, "{error:?}");
            }
            // A share partition's refusal inside a lock error is the partition's own.
            let share = ShareError::InvalidRecordState { first: 0, last: 0 };
            assert_eq!(
                SharePartitionError::from(ShareLockError::Share(share.clone())),
                SharePartitionError::Share(share)
            );
            let partitions = [
                (SharePartitionError::Partition(PartitionError::Unknown), 3),
                (
                    SharePartitionError::Partition(PartitionError::Unavailable),
                    56,
                ),
                (SharePartitionError::Log(LogErrorKind::OffsetOutOfRange), 1),
                (SharePartitionError::Log(LogErrorKind::Storage), 56),
                (SharePartitionError::from(fenced), 47),
                (SharePartitionError::StateUnusable, -1),
                (SharePartitionError::TransactionalGroup, 42),
                (SharePartitionError::NothingAcquired, 121),
                (SharePartitionError::NotDurable, 56),
                (SharePartitionError::Call(CallError::Unreachable), 56),
                (SharePartitionError::Call(CallError::NotController), 41),
                (SharePartitionError::Call(CallError::Abandoned), -1),
            ];
            for (error, code) in &partitions {
                assert_eq!(error.code(), *code, "{error:?}");
                assert_eq!(SharePartitionError::code_or_none(Some(error)), *code);
                let result = ShareAckResult::error(error.clone(), "m");
                assert_eq!(result.error_code(), *code);
            }
            assert_eq!(SharePartitionError::code_or_none(None), 0);
            assert_eq!(ShareAckResult::ok().error_code(), 0);
            // A result that was not made durable fails with KAFKA_STORAGE_ERROR; a refusal stays.
            let mut results = [
                ShareAckResult::ok(),
                ShareAckResult::error(SharePartitionError::NothingAcquired, "m"),
            ];
            ShareAckResult::durable(&mut results, Err("disk".into()));
            let codes: Vec<i16> = results.iter().map(ShareAckResult::error_code).collect();
            assert_eq!(codes, vec![56, 121]);
        }

        #[test]
        fn share_txn_errors_answer_kafkas_codes() {
            // Kafka 4.4's codes (Errors.java): INVALID_REQUEST 42, INVALID_TXN_STATE 48,
            // INVALID_TRANSACTION_TIMEOUT 50, CONCURRENT_TRANSACTIONS 51,
            // TRANSACTIONAL_ID_NOT_FOUND 105, UNKNOWN_MEMBER_ID 25, KAFKA_STORAGE_ERROR 56,
            // REQUEST_TIMED_OUT 7.
            let txns = [
                (TxnError::InvalidRequest { reason: "r".into() }, 42),
                (
                    TxnError::InvalidTxnState {
                        state: TxnState::Committed,
                    },
                    48,
                ),
                (
                    TxnError::InvalidTransactionTimeout {
                        timeout_ms: 0,
                        max_ms: 1,
                    },
                    50,
                ),
                (
                    TxnError::ConcurrentTransactions {
                        pending: 5,
                        max_pending: 5,
                    },
                    51,
                ),
                (TxnError::TransactionalIdNotFound, 105),
                (
                    TxnError::AcksInFlight {
                        state: TxnState::Prepare,
                        acks: 1,
                    },
                    51,
                ),
            ];
            for (error, code) in &txns {
                assert_eq!(error.code(), *code, "{error:?}");
                assert_eq!(ShareTxnError::Txn(error.clone()).code(), *code);
            }
            let others = [
                (ShareTxnError::UnknownMember, 25),
                (ShareTxnError::NotDurable, 56),
                (ShareTxnError::TimedOut, 7),
                (ShareTxnError::Call(CallError::Unreachable), 56),
                (
                    ShareTxnError::Call(CallError::UnexpectedReply("x".into())),
                    -1,
                ),
            ];
            for (error, code) in &others {
                assert_eq!(error.code(), *code, "{error:?}");
            }
            let refused = TxnAnswer::error(ShareTxnError::TimedOut, "late", TxnState::Prepare);
            assert_eq!(refused.error_code(), 7);
            let done = TxnAnswer {
                error: None,
                error_message: None,
                state: TxnState::Ongoing,
                timeout_ms: 1,
            };
            assert_eq!(done.error_code(), 0);
            // A transactional acknowledgement's partition: the coordinator's refusal, the lock's,
            // or the shard's failure.
            assert_eq!(
                TxnAckError::Refused(refused).code_and_message(),
                (7, Some("late".into()))
            );
            let not_locked = ShareAckResult::error(SharePartitionError::NothingAcquired, "none");
            assert_eq!(
                TxnAckError::NotLocked(not_locked).code_and_message(),
                (121, Some("none".into()))
            );
            assert_eq!(
                TxnAckError::Call(CallError::Abandoned).code_and_message().0,
                -1
            );
        }
    }
}
