//! The KIP's `ShareTransactionCoordinator` as a blocking client: begin, prepare, commit, abort and
//! list the share transactions of one share group (API keys 1000, 1002–1005,
//! `schemas/share-transactions.md`), plus the KIP's recovery routine ([`recover`]).
//!
//! Why: a stream processor (the KIP's Flink case) drives two-phase commit of its checkpoints
//! through these calls; the CLI `lockstep-txn` and the integration tests use the same type.
//!
//! Routing: every call goes to the group's coordinator, found with FindCoordinator (key type
//! GROUP) on the bootstrap connection and cached until an error says it moved.
//!
//! Retries: a call is retried at most [`limits::TXN_CALL_ATTEMPTS_MAX`] times in all, with
//! doubling backoff from [`limits::TXN_RETRY_BACKOFF_INITIAL`] up to
//! [`limits::TXN_RETRY_BACKOFF_MAX`], when the error is retriable: connection loss or an
//! undecodable answer (reconnect), COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR /
//! COORDINATOR_LOAD_IN_PROGRESS (rediscover the coordinator), and CONCURRENT_TRANSACTIONS on
//! prepare/commit/abort (another prepare of the id is in progress). On begin,
//! CONCURRENT_TRANSACTIONS means `share.transaction.max.pending` is reached and is returned at
//! once. Every other error comes back as [`ClientError::Kafka`] with the broker's message.
//!
//! Idempotency is the broker's: begin of a known id, prepare on PREPARE, commit on COMMITTED and
//! abort on ABORTED or COMMITTED answer no error and the state, which these methods return.

use std::thread;

use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::protocol::{Decodable, Encodable};
use uuid::Uuid;

use super::admin;
use super::connection::{ApiCall, ClientError, NodePool, Result};
use super::limits;
use crate::protocol::apis;
use crate::protocol::share_txn::{
    ShareAbortTransactionRequest, ShareAbortTransactionResponse, ShareBeginTransactionRequest,
    ShareBeginTransactionResponse, ShareCommitTransactionRequest, ShareCommitTransactionResponse,
    ShareListTransactionsRequest, ShareListTransactionsResponse, SharePrepareTransactionRequest,
    SharePrepareTransactionResponse, VERSION,
};
pub use crate::share_txn::TxnState;

/// Kafka error codes this module reacts to.
pub use super::code;

/// Kafka's name of an error code in its constant spelling (`INVALID_TXN_STATE`), or
/// `UNKNOWN_CODE_<n>`.
pub fn error_name(code: i16) -> String {
    match code.err() {
        None if code == 0 => "NONE".to_string(),
        None => format!("UNKNOWN_CODE_{code}"),
        Some(e) => {
            let camel = format!("{e:?}");
            if !camel.chars().all(|c| c.is_ascii_alphanumeric()) {
                return format!("UNKNOWN_CODE_{code}");
            }
            let mut out = String::with_capacity(camel.len() + 8);
            for (i, c) in camel.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(c.to_ascii_uppercase());
            }
            out
        }
    }
}

/// Records of one partition locked by a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedPartition {
    pub topic_id: Uuid,
    pub partition: i32,
    pub locked_records: i64,
}

/// A transaction as ShareListTransactions describes it (the KIP's `PendingTransaction`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingTransaction {
    pub transaction_id: String,
    pub state: TxnState,
    pub timeout_ms: i64,
    pub create_time_ms: i64,
    /// `None` if not prepared.
    pub prepare_time_ms: Option<i64>,
    pub partitions: Vec<LockedPartition>,
}

impl PendingTransaction {
    /// Locked records over all partitions.
    pub fn locked_records(&self) -> i64 {
        self.partitions.iter().map(|p| p.locked_records).sum()
    }
}

/// What [`recover`] did.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    /// PREPARE transactions whose checkpoint the caller said is committed: committed now.
    pub committed: Vec<String>,
    /// Every other pending transaction: aborted now.
    pub aborted: Vec<String>,
    /// Transactions whose commit or abort failed, with the error (they are still pending).
    pub failed: Vec<(String, ClientError)>,
}

/// Which call, for the retry policy and error contexts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Begin,
    Prepare,
    Commit,
    Abort,
    List,
}

impl Call {
    fn key(self) -> i16 {
        match self {
            Call::Begin => apis::SHARE_BEGIN_TRANSACTION,
            Call::Prepare => apis::SHARE_PREPARE_TRANSACTION,
            Call::Commit => apis::SHARE_COMMIT_TRANSACTION,
            Call::Abort => apis::SHARE_ABORT_TRANSACTION,
            Call::List => apis::SHARE_LIST_TRANSACTIONS,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Call::Begin => "ShareBeginTransaction",
            Call::Prepare => "SharePrepareTransaction",
            Call::Commit => "ShareCommitTransaction",
            Call::Abort => "ShareAbortTransaction",
            Call::List => "ShareListTransactions",
        }
    }

    /// Whether `e` is worth another attempt of this call.
    fn retriable(self, e: &ClientError) -> bool {
        match e {
            ClientError::Io { .. } | ClientError::Protocol(_) => true,
            ClientError::Kafka { code: c, .. } => match *c {
                code::COORDINATOR_LOAD_IN_PROGRESS
                | code::COORDINATOR_NOT_AVAILABLE
                | code::NOT_COORDINATOR => true,
                code::CONCURRENT_TRANSACTIONS => {
                    matches!(self, Call::Prepare | Call::Commit | Call::Abort)
                }
                _ => false,
            },
            _ => false,
        }
    }
}

/// The answer fields every transaction response has.
trait Answer {
    fn error(&self) -> (i16, Option<&str>);
}

macro_rules! answer {
    ($($ty:ty),*) => {$(
        impl Answer for $ty {
            fn error(&self) -> (i16, Option<&str>) {
                (self.error_code, self.error_message.as_deref())
            }
        }
    )*};
}

answer!(
    ShareBeginTransactionResponse,
    SharePrepareTransactionResponse,
    ShareCommitTransactionResponse,
    ShareAbortTransactionResponse,
    ShareListTransactionsResponse
);

/// A Kafka error with the broker's message, or the code's name when it sent none.
fn kafka_error(code: i16, message: Option<&str>, context: String) -> ClientError {
    let message = match message {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => error_name(code),
    };
    ClientError::Kafka {
        code,
        message,
        context,
    }
}

/// A transaction coordinator client for one share group. See the module docs.
#[derive(Debug)]
pub struct ShareTransactionCoordinator {
    group_id: String,
    nodes: NodePool,
    coordinator: Option<i32>,
    attempts_max: u32,
}

impl ShareTransactionCoordinator {
    /// A client for share group `group_id`, bootstrapping from `bootstrap` (`host:port`). No
    /// network traffic until the first call.
    pub fn new(bootstrap: &str, group_id: &str) -> Self {
        ShareTransactionCoordinator {
            group_id: group_id.to_string(),
            nodes: NodePool::new(bootstrap, "lockstep-txn-coordinator"),
            coordinator: None,
            attempts_max: limits::TXN_CALL_ATTEMPTS_MAX,
        }
    }

    /// Sets how many attempts one call may make (at least 1, at most
    /// [`limits::TXN_CALL_ATTEMPTS_MAX`]).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts_max = attempts.clamp(1, limits::TXN_CALL_ATTEMPTS_MAX);
        self
    }

    /// The share group.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// KIP `beginTransaction(id, timeout)`: starts `transaction_id` (ONGOING) or, if the broker
    /// knows it, returns its state. `timeout_ms` -1 takes the group's
    /// `share.transaction.timeout.ms`.
    pub fn begin(&mut self, transaction_id: &str, timeout_ms: i64) -> Result<TxnState> {
        let request = ShareBeginTransactionRequest {
            group_id: self.group_id.clone(),
            transaction_id: transaction_id.to_string(),
            timeout_ms,
        };
        let response: ShareBeginTransactionResponse =
            self.call(Call::Begin, transaction_id, &request)?;
        state_of(response.transaction_state, Call::Begin)
    }

    /// KIP `prepareTransaction(id)`: phase 1; returns once the locks are durable.
    pub fn prepare(&mut self, transaction_id: &str) -> Result<TxnState> {
        let request = SharePrepareTransactionRequest {
            group_id: self.group_id.clone(),
            transaction_id: transaction_id.to_string(),
        };
        let response: SharePrepareTransactionResponse =
            self.call(Call::Prepare, transaction_id, &request)?;
        state_of(response.transaction_state, Call::Prepare)
    }

    /// KIP `commitTransaction(id)`: phase 2; returns once the decision is durable.
    pub fn commit(&mut self, transaction_id: &str) -> Result<TxnState> {
        let request = ShareCommitTransactionRequest {
            group_id: self.group_id.clone(),
            transaction_id: transaction_id.to_string(),
        };
        let response: ShareCommitTransactionResponse =
            self.call(Call::Commit, transaction_id, &request)?;
        state_of(response.transaction_state, Call::Commit)
    }

    /// KIP `abortTransaction(id)`: the locked records become available again. On a committed
    /// transaction this answers COMMITTED without error.
    pub fn abort(&mut self, transaction_id: &str) -> Result<TxnState> {
        let request = ShareAbortTransactionRequest {
            group_id: self.group_id.clone(),
            transaction_id: transaction_id.to_string(),
        };
        let response: ShareAbortTransactionResponse =
            self.call(Call::Abort, transaction_id, &request)?;
        state_of(response.transaction_state, Call::Abort)
    }

    /// KIP `listPendingTransactions(groupId)`: the ONGOING and PREPARE transactions.
    pub fn list_pending(&mut self) -> Result<Vec<PendingTransaction>> {
        self.list(&[])
    }

    /// The transactions in `states` (empty: the pending ones, ONGOING and PREPARE).
    pub fn list(&mut self, states: &[TxnState]) -> Result<Vec<PendingTransaction>> {
        let request = ShareListTransactionsRequest {
            group_id: self.group_id.clone(),
            states: states.iter().map(|&s| i8::from(s)).collect(),
        };
        let response: ShareListTransactionsResponse = self.call(Call::List, "", &request)?;
        response
            .transactions
            .into_iter()
            .map(|t| {
                Ok(PendingTransaction {
                    state: state_of(t.state, Call::List)?,
                    transaction_id: t.transaction_id,
                    timeout_ms: t.timeout_ms,
                    create_time_ms: t.create_time_ms,
                    prepare_time_ms: (t.prepare_time_ms >= 0).then_some(t.prepare_time_ms),
                    partitions: t
                        .partitions
                        .into_iter()
                        .map(|p| LockedPartition {
                            topic_id: p.topic_id,
                            partition: p.partition_index,
                            locked_records: p.locked_records,
                        })
                        .collect(),
                })
            })
            .collect()
    }

    fn coordinator(&mut self) -> Result<i32> {
        if let Some(c) = self.coordinator {
            return Ok(c);
        }
        let node = admin::find_coordinator(
            self.nodes.bootstrap()?,
            admin::COORDINATOR_KEY_TYPE_GROUP,
            &self.group_id,
        )?;
        self.nodes.set_addr(node.id, node.addr());
        self.coordinator = Some(node.id);
        Ok(node.id)
    }

    /// One attempt: find the coordinator, send, turn a non-zero error code into an error.
    fn attempt<Req: Encodable, Resp: Decodable + Answer>(
        &mut self,
        call: Call,
        context: &str,
        request: &Req,
    ) -> Result<Resp> {
        let node = self.coordinator()?;
        let response: Resp = self
            .nodes
            .node(node)?
            .send_custom(ApiCall::flexible(call.key(), VERSION), request)?;
        match response.error() {
            (0, _) => Ok(response),
            (c, message) => Err(kafka_error(c, message, context.to_string())),
        }
    }

    /// [`Self::attempt`] with the bounded retry policy of the module docs.
    fn call<Req: Encodable, Resp: Decodable + Answer>(
        &mut self,
        call: Call,
        transaction_id: &str,
        request: &Req,
    ) -> Result<Resp> {
        let context = if transaction_id.is_empty() {
            format!("{} group {}", call.name(), self.group_id)
        } else {
            format!("{} {} group {}", call.name(), transaction_id, self.group_id)
        };
        let mut backoff = limits::TXN_RETRY_BACKOFF_INITIAL;
        let mut attempt = 1;
        loop {
            let e = match self.attempt(call, &context, request) {
                Ok(r) => return Ok(r),
                Err(e) => e,
            };
            if !call.retriable(&e) || attempt >= self.attempts_max {
                return Err(e);
            }
            if !matches!(
                e.kafka_code(),
                Some(code::CONCURRENT_TRANSACTIONS) | Some(code::COORDINATOR_LOAD_IN_PROGRESS)
            ) {
                // Connection loss or a moved coordinator: look it up again.
                self.coordinator = None;
            }
            thread::sleep(backoff);
            backoff = (backoff * 2).min(limits::TXN_RETRY_BACKOFF_MAX);
            attempt += 1;
        }
    }
}

fn state_of(code: i8, call: Call) -> Result<TxnState> {
    TxnState::try_from(code)
        .map_err(|e| ClientError::Protocol(format!("{} response: {e}", call.name())))
}

/// The KIP's recovery routine, run when a framework's coordinator starts: every pending
/// transaction of the group is listed; a PREPARE whose checkpoint `is_checkpoint_committed`
/// (asked with the transaction id) says is committed in the caller's sink is committed, every
/// other one is aborted. Failures of single transactions are reported, not fatal; only a failed
/// list is an error.
pub fn recover(
    coordinator: &mut ShareTransactionCoordinator,
    is_checkpoint_committed: impl Fn(&str) -> bool,
) -> Result<RecoveryReport> {
    let pending = coordinator.list_pending()?;
    let mut report = RecoveryReport::default();
    for txn in pending {
        let id = txn.transaction_id;
        if txn.state == TxnState::Prepare && is_checkpoint_committed(&id) {
            match coordinator.commit(&id) {
                Ok(_) => report.committed.push(id),
                Err(e) => report.failed.push((id, e)),
            }
        } else {
            match coordinator.abort(&id) {
                // An abort of an id committed meanwhile answers COMMITTED: report what is true.
                Ok(TxnState::Committed) => report.committed.push(id),
                Ok(_) => report.aborted.push(id),
                Err(e) => report.failed.push((id, e)),
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn error_names_are_kafkas_constants() {
        assert_eq!(error_name(48), "INVALID_TXN_STATE");
        assert_eq!(error_name(42), "INVALID_REQUEST");
        assert_eq!(error_name(51), "CONCURRENT_TRANSACTIONS");
        assert_eq!(error_name(105), "TRANSACTIONAL_ID_NOT_FOUND");
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(-12345), "UNKNOWN_CODE_-12345");
    }

    #[test]
    fn retry_policy() {
        let kafka = |c| ClientError::Kafka {
            code: c,
            message: String::new(),
            context: String::new(),
        };
        let io = ClientError::Io {
            context: String::new(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        };
        for call in [
            Call::Begin,
            Call::Prepare,
            Call::Commit,
            Call::Abort,
            Call::List,
        ] {
            assert!(call.retriable(&io));
            assert!(call.retriable(&kafka(code::NOT_COORDINATOR)));
            assert!(call.retriable(&kafka(code::COORDINATOR_NOT_AVAILABLE)));
            assert!(!call.retriable(&kafka(code::INVALID_TXN_STATE)));
            assert!(!call.retriable(&kafka(code::TRANSACTIONAL_ID_NOT_FOUND)));
            assert!(!call.retriable(&kafka(code::INVALID_REQUEST)));
            assert_eq!(
                call.retriable(&kafka(code::CONCURRENT_TRANSACTIONS)),
                matches!(call, Call::Prepare | Call::Commit | Call::Abort)
            );
        }
    }

    #[test]
    fn unreachable_broker_is_an_error_after_bounded_attempts() {
        // Port 1 on loopback refuses at once; two attempts, then the I/O error.
        let mut c = ShareTransactionCoordinator::new("127.0.0.1:1", "g").with_attempts(2);
        let t0 = std::time::Instant::now();
        let e = c.begin("g-x-1", -1).unwrap_err();
        assert!(matches!(e, ClientError::Io { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
