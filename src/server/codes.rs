//! The Kafka error codes of the shard core's typed errors, chosen here, at the edge: the state
//! machines say what went wrong ([`SessionError`], ...), the handlers answer the code.

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
}
