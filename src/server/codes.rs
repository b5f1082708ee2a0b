//! The Kafka error codes of the shard core's typed errors, chosen here, at the edge: the state
//! machines say what went wrong ([`SessionError`], [`GroupError`], [`PartitionError`],
//! [`MarkerError`], [`ControllerError`], [`LogErrorKind`], a call's [`CallError`]), the handlers
//! answer the code. Sections follow for the data path, share groups and share transactions, the
//! KIP-848 and producer-transaction coordinators, and (last) topic admin and ACLs. Each section's
//! tests pin the codes to Kafka 4.4's numbers (`Errors.java`).

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
        let stale = crate::producer_txn::partition::TxnError::StaleMarker {
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

use crate::producer_txn::partition::TxnError;
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

/// Share groups and share transactions (their own module: `crate::share_txn::TxnError` here, the
/// partition transactions' `TxnError` above).
mod share_codes {
    use super::*;

    // Share groups and share transactions
    //
    // The share-group and share-transaction state machines name what went wrong
    // ([`ShareHeartbeatError`], [`ShareError`], [`ShareLockError`], [`SharePartitionError`],
    // [`TxnError`], [`ShareTxnError`]); the codes are chosen here.

    use crate::producer_txn::share::ShareLockError;
    use crate::shard::ops::{
        ShareAckResult, SharePartitionError, ShareTxnError, TxnAckError, TxnAnswer,
    };
    use crate::shard::share_group::ShareHeartbeatError;
    use crate::share::ShareError;
    use crate::share_txn::TxnError;

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
        use crate::producer_txn::share::ProducerLock;
        use crate::share_txn::TxnState;

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

// Coordinators
//
// The KIP-848 consumer-group state machine ([`HeartbeatError`]) and the producer-transaction
// coordinator ([`CoordError`]) say why they refused; the codes are chosen here.

use crate::group::kip848::HeartbeatError;
use crate::producer_txn::coordinator::CoordError;

impl HeartbeatError {
    /// The ConsumerGroupHeartbeat's error code.
    pub fn code(&self) -> i16 {
        let error = match self {
            HeartbeatError::UnknownMember(_) => ResponseError::UnknownMemberId,
            HeartbeatError::FencedEpoch { .. } => ResponseError::FencedMemberEpoch,
            HeartbeatError::UnsupportedAssignor(_) => ResponseError::UnsupportedAssignor,
            HeartbeatError::InvalidRequest(_) => ResponseError::InvalidRequest,
            HeartbeatError::GroupFull => ResponseError::GroupMaxSizeReached,
            HeartbeatError::InvalidGroupId => ResponseError::InvalidGroupId,
            HeartbeatError::NotConsumerGroup(_) => ResponseError::GroupIdNotFound,
        };
        error.code()
    }
}

impl CoordError {
    /// The error code of the producer-transaction request the coordinator refused.
    pub fn code(&self) -> i16 {
        match self {
            CoordError::ConcurrentTransactions => ResponseError::ConcurrentTransactions.code(),
            CoordError::ProducerFenced => ResponseError::ProducerFenced.code(),
            CoordError::InvalidTxnState(_) => ResponseError::InvalidTxnState.code(),
            CoordError::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping.code(),
            CoordError::InvalidTransactionTimeout => {
                ResponseError::InvalidTransactionTimeout.code()
            }
            CoordError::TransactionalIdNotFound => ResponseError::TransactionalIdNotFound.code(),
            // Kafka: TRANSACTIONAL_ID_AUTHORIZATION_FAILED when 2PC is not enabled.
            CoordError::TwoPhaseCommitDisabled => {
                ResponseError::TransactionalIdAuthorizationFailed.code()
            }
            // Never answered: the handler allocates a producer id and asks again.
            CoordError::NeedProducerId => 0,
        }
    }

    /// The code for a request of `version` of an API whose first version that knows
    /// PRODUCER_FENCED is `fenced_since` (older clients get INVALID_PRODUCER_EPOCH, as Kafka
    /// answers them).
    pub fn code_for(&self, version: i16, fenced_since: i16) -> i16 {
        match self {
            CoordError::ProducerFenced if version < fenced_since => {
                ResponseError::InvalidProducerEpoch.code()
            }
            other => other.code(),
        }
    }
}

#[cfg(test)]
mod coordinator_tests {
    use super::*;

    #[test]
    fn heartbeat_errors_answer_kafkas_codes() {
        // Kafka 4.4's codes (Errors.java): UNKNOWN_MEMBER_ID 25, FENCED_MEMBER_EPOCH 110,
        // UNSUPPORTED_ASSIGNOR 112, INVALID_REQUEST 42, GROUP_MAX_SIZE_REACHED 81,
        // INVALID_GROUP_ID 24, GROUP_ID_NOT_FOUND 69.
        let expected = [
            (HeartbeatError::UnknownMember("m".into()), 25),
            (
                HeartbeatError::FencedEpoch {
                    member_id: "m".into(),
                    sent: 7,
                    current: 1,
                },
                110,
            ),
            (HeartbeatError::UnsupportedAssignor("sticky".into()), 112),
            (HeartbeatError::InvalidRequest("r".into()), 42),
            (HeartbeatError::GroupFull, 81),
            (HeartbeatError::InvalidGroupId, 24),
            (HeartbeatError::NotConsumerGroup("g".into()), 69),
        ];
        for (error, code) in &expected {
            assert_eq!(error.code(), *code, "{error:?}");
        }
    }

    #[test]
    fn coordinator_errors_answer_kafkas_codes() {
        // Kafka 4.4's codes (Errors.java): CONCURRENT_TRANSACTIONS 51, PRODUCER_FENCED 90,
        // INVALID_TXN_STATE 48, INVALID_PRODUCER_ID_MAPPING 49, INVALID_TRANSACTION_TIMEOUT 50,
        // TRANSACTIONAL_ID_NOT_FOUND 105, TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53,
        // INVALID_PRODUCER_EPOCH 47.
        let expected = [
            (CoordError::ConcurrentTransactions, 51),
            (CoordError::ProducerFenced, 90),
            (CoordError::InvalidTxnState("s".into()), 48),
            (CoordError::InvalidProducerIdMapping, 49),
            (CoordError::InvalidTransactionTimeout, 50),
            (CoordError::TransactionalIdNotFound, 105),
            (CoordError::TwoPhaseCommitDisabled, 53),
            (CoordError::NeedProducerId, 0),
        ];
        for (error, code) in &expected {
            assert_eq!(error.code(), *code, "{error:?}");
            // Only PRODUCER_FENCED depends on the request's version.
            assert_eq!(error.code_for(0, 0), *code, "{error:?}");
        }
        // An API that knows PRODUCER_FENCED from version 2: version 1 gets INVALID_PRODUCER_EPOCH.
        assert_eq!(CoordError::ProducerFenced.code_for(1, 2), 47);
        assert_eq!(CoordError::ProducerFenced.code_for(2, 2), 90);
    }
}

// Topic admin and ACLs
//
// The metadata controller says why it refused a topic, config resource or ACL ([`AdminError`],
// wrapping the registry's [`TopicError`], the configs' [`ConfigError`], its own
// [`ControllerError`] and a call's [`CallError`]); the admin and ACL encoders answer these codes.

use crate::config::ConfigError;
use crate::shard::ops::{AdminError, AlterResult, CreateResult, DeleteResult, GrowResult};
use crate::shard::registry::TopicError;

impl TopicError {
    /// The error code of the topic the registry refused.
    pub fn code(&self) -> i16 {
        let error = match self {
            TopicError::InvalidName { .. } => ResponseError::InvalidTopicException,
            TopicError::AlreadyExists { .. } => ResponseError::TopicAlreadyExists,
            TopicError::UnknownTopic { .. } => ResponseError::UnknownTopicOrPartition,
            TopicError::UnknownTopicId { .. } => ResponseError::UnknownTopicId,
            TopicError::InvalidPartitions { .. } | TopicError::NotAnIncrease { .. } => {
                ResponseError::InvalidPartitions
            }
            TopicError::TooManyTopics { .. } | TopicError::TooManyPartitions { .. } => {
                ResponseError::PolicyViolation
            }
            TopicError::Config(_) => ResponseError::InvalidConfig,
        };
        error.code()
    }
}

impl ConfigError {
    /// The error code of a config resource whose change was refused.
    pub fn code(&self) -> i16 {
        match self {
            ConfigError::UnknownKey { .. }
            | ConfigError::BadValue { .. }
            | ConfigError::ReadOnly { .. }
            | ConfigError::Refused { .. } => ResponseError::InvalidConfig.code(),
            ConfigError::BadAddress { .. } | ConfigError::BadShards { .. } => {
                ResponseError::InvalidRequest.code()
            }
        }
    }
}

impl AdminError {
    /// The error code of the topic, config resource or ACL (or ACL filter) refused.
    pub fn code(&self) -> i16 {
        match self {
            AdminError::Topic(e) => e.code(),
            AdminError::Config(e) => e.code(),
            AdminError::Controller(e) => e.code(),
            AdminError::Call(failure) => failure.code(),
            AdminError::ControllerUnavailable => ResponseError::NotController.code(),
            AdminError::DuplicateTopic
            | AdminError::DuplicateConfig
            | AdminError::UnknownConfigOperation(_)
            | AdminError::MissingValue
            | AdminError::UnsupportedResourceType(_)
            | AdminError::UnknownBroker
            | AdminError::AssignmentWithCounts
            | AdminError::TooManyAcls
            | AdminError::InvalidAcl => ResponseError::InvalidRequest.code(),
            AdminError::NotAList | AdminError::GroupConfig => ResponseError::InvalidConfig.code(),
            AdminError::EmptyGroupId => ResponseError::InvalidGroupId.code(),
            AdminError::ReplicationFactor(_) => ResponseError::InvalidReplicationFactor.code(),
            AdminError::ReplicaAssignment => ResponseError::InvalidReplicaAssignment.code(),
            AdminError::NoTopicId => ResponseError::UnknownServerError.code(),
            AdminError::SecurityDisabled => ResponseError::SecurityDisabled.code(),
        }
    }

    /// The error code of an optional error (0: none).
    pub fn code_or_none(error: Option<&AdminError>) -> i16 {
        error.map_or(0, AdminError::code)
    }
}

/// Each topic-admin result's error code in its response: its error's code, 0 without one.
macro_rules! admin_result_error_code {
    ($($result:ty),+) => {
        $(
            impl $result {
                /// The item's error code in the response (0: done, or would be).
                pub fn error_code(&self) -> i16 {
                    AdminError::code_or_none(self.error.as_ref())
                }
            }
        )+
    };
}

admin_result_error_code!(CreateResult, DeleteResult, AlterResult, GrowResult);

#[cfg(test)]
mod admin_tests {
    use super::*;
    use crate::shard::ops::ControllerError;
    use uuid::Uuid;

    #[test]
    fn topic_and_config_errors_answer_kafkas_codes() {
        // Kafka 4.4's codes (Errors.java): INVALID_TOPIC_EXCEPTION 17, TOPIC_ALREADY_EXISTS 36,
        // UNKNOWN_TOPIC_OR_PARTITION 3, UNKNOWN_TOPIC_ID 100, INVALID_PARTITIONS 37,
        // POLICY_VIOLATION 44, INVALID_CONFIG 40, INVALID_REQUEST 42.
        let unknown_key = ConfigError::UnknownKey { key: "k".into() };
        let bad_shards = ConfigError::BadShards {
            requested: 9,
            max: 1,
        };
        let topics = [
            (
                TopicError::InvalidName {
                    name: "a b".into(),
                    reason: "r",
                },
                17,
            ),
            (TopicError::AlreadyExists { name: "t".into() }, 36),
            (TopicError::UnknownTopic { name: "t".into() }, 3),
            (TopicError::UnknownTopicId { id: Uuid::nil() }, 100),
            (TopicError::InvalidPartitions { requested: 0 }, 37),
            (
                TopicError::NotAnIncrease {
                    name: "t".into(),
                    current: 2,
                    count: 1,
                },
                37,
            ),
            (TopicError::TooManyTopics { max: 1 }, 44),
            (
                TopicError::TooManyPartitions {
                    requested: 2,
                    max: 1,
                },
                44,
            ),
            (TopicError::Config(unknown_key.clone()), 40),
            // A topic's config refusal is INVALID_CONFIG whatever the config said.
            (TopicError::Config(bad_shards.clone()), 40),
        ];
        for (error, code) in &topics {
            assert_eq!(error.code(), *code, "{error:?}");
            assert_eq!(AdminError::Topic(error.clone()).code(), *code, "{error:?}");
        }
        let configs = [
            (unknown_key, 40),
            (
                ConfigError::BadValue {
                    key: "k".into(),
                    value: "v".into(),
                    reason: "r".into(),
                },
                40,
            ),
            (ConfigError::ReadOnly { key: "k".into() }, 40),
            (
                ConfigError::Refused {
                    key: "k".into(),
                    message: "m".into(),
                },
                40,
            ),
            (
                ConfigError::BadAddress {
                    flag: "f",
                    value: "v".into(),
                    reason: "r".into(),
                },
                42,
            ),
            (bad_shards, 42),
        ];
        for (error, code) in &configs {
            assert_eq!(error.code(), *code, "{error:?}");
            assert_eq!(AdminError::Config(error.clone()).code(), *code, "{error:?}");
        }
    }

    #[test]
    fn admin_errors_answer_kafkas_codes() {
        // Kafka 4.4's codes (Errors.java): INVALID_REQUEST 42, INVALID_CONFIG 40,
        // INVALID_GROUP_ID 24, INVALID_REPLICATION_FACTOR 38, INVALID_REPLICA_ASSIGNMENT 39,
        // UNKNOWN_SERVER_ERROR -1, SECURITY_DISABLED 54, NOT_CONTROLLER 41,
        // KAFKA_STORAGE_ERROR 56.
        let expected = [
            (AdminError::DuplicateTopic, 42),
            (AdminError::DuplicateConfig, 42),
            (AdminError::UnknownConfigOperation(9), 42),
            (AdminError::MissingValue, 42),
            (AdminError::UnsupportedResourceType(8), 42),
            (AdminError::UnknownBroker, 42),
            (AdminError::AssignmentWithCounts, 42),
            (AdminError::TooManyAcls, 42),
            (AdminError::InvalidAcl, 42),
            (AdminError::NotAList, 40),
            (AdminError::GroupConfig, 40),
            (AdminError::EmptyGroupId, 24),
            (AdminError::ReplicationFactor(3), 38),
            (AdminError::ReplicaAssignment, 39),
            (AdminError::NoTopicId, -1),
            (AdminError::SecurityDisabled, 54),
            (AdminError::ControllerUnavailable, 41),
            (AdminError::Controller(ControllerError::Stopping), 41),
            (AdminError::Controller(ControllerError::NotPersisted), 56),
            (AdminError::Call(CallError::Unreachable), 56),
            (AdminError::Call(CallError::NotController), 41),
            (AdminError::Call(CallError::UnexpectedReply("x".into())), -1),
        ];
        for (error, code) in &expected {
            assert_eq!(error.code(), *code, "{error:?}");
            assert_eq!(AdminError::code_or_none(Some(error)), *code);
        }
        assert_eq!(AdminError::code_or_none(None), 0);
        // Each result answers its error's code, 0 without one.
        let error = Some(AdminError::ReplicaAssignment);
        let grown = GrowResult {
            name: "t".into(),
            error: error.clone(),
            error_message: None,
        };
        assert_eq!(grown.error_code(), 39);
        let deleted = DeleteResult {
            name: None,
            topic_id: Uuid::nil(),
            error: error.clone(),
            error_message: None,
        };
        assert_eq!(deleted.error_code(), 39);
        let altered = AlterResult {
            resource_type: 2,
            resource_name: "t".into(),
            error: None,
            error_message: None,
        };
        assert_eq!(altered.error_code(), 0);
        let created = CreateResult {
            name: "t".into(),
            error,
            error_message: None,
            topic_id: Uuid::nil(),
            num_partitions: -1,
            configs: Vec::new(),
        };
        assert_eq!(created.error_code(), 39);
    }
}
