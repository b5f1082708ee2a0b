//! A blocking transactional producer (Kafka's producer transactions, transaction version 1) whose
//! transactions can carry share acknowledgements (KIP-1289's draft TxnShareAcknowledge, key 93).
//!
//! Calls, as Kafka's `TransactionManager` makes them: FindCoordinator (key type TRANSACTION) for
//! the transactional id; InitProducerId with the id (a producer id and epoch; a second instance
//! with the same id fences the first, whose open transaction the coordinator aborts);
//! AddPartitionsToTxn v3 (the client form) for every partition the transaction writes *or
//! acknowledges* before the first write or acknowledgement there; transactional Produce (acks
//! -1, producer id, epoch, per-partition sequence numbers); TxnShareAcknowledge through the
//! share consumer that acquired the records ([`TransactionalProducer::send_share_acknowledgements`]:
//! the input partitions are added to the transaction first, so that the coordinator's markers
//! reach them); EndTxn v3 commit or abort.
//!
//! States ([`ProducerTxnState`], one transition function, [`ProducerTxnState::check`]):
//! ```text
//! Uninitialized/Ready/Abortable/Fenced --init_transactions--> Ready
//! Ready --begin--> InTransaction
//! InTransaction --send / send_share_acknowledgements ok--> InTransaction
//! InTransaction --an error of one of those--> Abortable      (fencing codes: Fenced)
//! InTransaction --commit ok--> Ready                         (error: Abortable or Fenced)
//! InTransaction/Abortable --abort ok--> Ready                (fencing codes: Fenced)
//! ```
//! Fenced: PRODUCER_FENCED (90), INVALID_PRODUCER_EPOCH (47), INVALID_PRODUCER_ID_MAPPING (49),
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53): another instance owns the id, or the coordinator
//! aborted the transaction with a bumped epoch (timeout). Kafka's producer then refuses to go
//! on; here `init_transactions` may start a new incarnation (the caller decides).
//!
//! Retries (bounded by [`limits`](super::limits) and a deadline): coordinator calls on
//! COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR (the coordinator is
//! looked up again), CONCURRENT_TRANSACTIONS, REQUEST_TIMED_OUT and connection errors; Produce on
//! NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (KIP-890 part 1: the transaction is still
//! completing) and connection errors. EndTxn is
//! retried with the same outcome: a retry of an EndTxn whose answer was lost is answered OK once
//! the transaction is complete. A Produce whose answer was lost is retried with the same
//! sequence numbers (the broker answers a duplicate with its first offsets). After an abort that
//! followed an uncertain produce, the producer re-initializes (a new epoch restarts every
//! sequence at 0), as Kafka's client bumps its epoch.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    add_partitions_to_txn_request::{AddPartitionsToTxnRequest, AddPartitionsToTxnTopic},
    describe_transactions_request::DescribeTransactionsRequest,
    EndTxnRequest, InitProducerIdRequest, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::admin;
use super::connection::{ClientError, NodePool, Result};
use super::producer::{encode_batch_as, BatchIdentity, ProducerRecord};
use super::share_consumer::{AckType, ShareConsumer, ShareRecord};

/// FindCoordinator key type of a transactional id.
pub const COORDINATOR_KEY_TYPE_TRANSACTION: i8 = 1;
/// InitProducerId versions this client speaks (v3+: producer id and epoch in the request).
pub const INIT_PRODUCER_ID_VERSIONS: (i16, i16) = (3, 4);
/// AddPartitionsToTxn: the client form (v4+ is the brokers' batched form).
pub const ADD_PARTITIONS_TO_TXN_VERSIONS: (i16, i16) = (3, 3);
/// EndTxn versions (v3: flexible, before KIP-890's v5 epoch bump in the answer).
pub const END_TXN_VERSIONS: (i16, i16) = (3, 3);

/// Kafka error codes this module decides on.
pub use super::code;

/// Where the producer is (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerTxnState {
    Uninitialized,
    Ready,
    InTransaction,
    /// A call of the open transaction failed: only `abort` (or `init_transactions`) is left.
    Abortable,
    /// The id's producer epoch moved on without this instance.
    Fenced,
}

/// The producer's operations, as the transition table names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerTxnOp {
    Init,
    Begin,
    /// send, send_share_acknowledgements, add_partitions.
    Work,
    Commit,
    Abort,
}

impl ProducerTxnState {
    /// The transition table: may `op` start in this state?
    pub fn check(self, op: ProducerTxnOp) -> Result<()> {
        use ProducerTxnOp as Op;
        use ProducerTxnState as S;
        let legal = match (self, op) {
            (_, Op::Init) => self != S::InTransaction,
            (S::Ready, Op::Begin) => true,
            (S::InTransaction, Op::Work | Op::Commit | Op::Abort) => true,
            (S::Abortable, Op::Abort) => true,
            _ => false,
        };
        if legal {
            Ok(())
        } else {
            Err(ClientError::InvalidArgument(format!(
                "{op:?} is not possible in state {self:?}"
            )))
        }
    }
}

/// Is `code` one of the fencing errors (module docs)?
pub fn is_fencing(code: i16) -> bool {
    matches!(
        code,
        code::PRODUCER_FENCED
            | code::INVALID_PRODUCER_EPOCH
            | code::INVALID_PRODUCER_ID_MAPPING
            | code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
}

/// May a coordinator call that failed this way be sent again?
fn is_retriable(e: &ClientError) -> bool {
    match e {
        ClientError::Io { .. } => true,
        ClientError::Kafka { code: c, .. } => matches!(
            *c,
            code::REQUEST_TIMED_OUT
                | code::COORDINATOR_LOAD_IN_PROGRESS
                | code::COORDINATOR_NOT_AVAILABLE
                | code::NOT_COORDINATOR
                | code::CONCURRENT_TRANSACTIONS
        ),
        _ => false,
    }
}

/// Needs the coordinator to be looked up again?
fn drops_coordinator(e: &ClientError) -> bool {
    matches!(e, ClientError::Io { .. })
        || matches!(
            e.kafka_code(),
            Some(code::NOT_COORDINATOR | code::COORDINATOR_NOT_AVAILABLE)
        )
}

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn check(code: i16, context: impl FnOnce() -> String) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::kafka(code, None, context()))
    }
}

/// A transactional producer (module docs). One transaction at a time; blocking calls.
#[derive(Debug)]
pub struct TransactionalProducer {
    nodes: NodePool,
    transactional_id: String,
    transaction_timeout_ms: i32,
    /// How long one call keeps retrying.
    call_timeout: Duration,
    coordinator: Option<i32>,
    leaders: HashMap<(String, i32), i32>,
    producer_id: i64,
    producer_epoch: i16,
    /// Next sequence number per partition (this epoch).
    sequences: HashMap<(String, i32), i32>,
    /// Partitions added to the open transaction.
    partitions: BTreeSet<(String, i32)>,
    state: ProducerTxnState,
    /// A produce of this epoch may or may not have been appended: the sequences are unknown
    /// until the next epoch.
    sequences_uncertain: bool,
}

impl TransactionalProducer {
    /// A producer of `transactional_id` bootstrapping from `bootstrap`; `client_id` names its
    /// connections. Nothing is sent before [`init_transactions`](Self::init_transactions).
    pub fn new(
        bootstrap: &str,
        client_id: &str,
        transactional_id: &str,
        transaction_timeout_ms: i32,
    ) -> Self {
        TransactionalProducer {
            nodes: NodePool::new(bootstrap, client_id),
            transactional_id: transactional_id.to_string(),
            transaction_timeout_ms,
            call_timeout: Duration::from_secs(30),
            coordinator: None,
            leaders: HashMap::new(),
            producer_id: -1,
            producer_epoch: -1,
            sequences: HashMap::new(),
            partitions: BTreeSet::new(),
            state: ProducerTxnState::Uninitialized,
            sequences_uncertain: false,
        }
    }

    /// How long each call keeps retrying retriable errors (default 30 s).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    pub fn producer_epoch(&self) -> i16 {
        self.producer_epoch
    }

    pub fn state(&self) -> ProducerTxnState {
        self.state
    }

    /// The partitions of the open transaction.
    pub fn transaction_partitions(&self) -> &BTreeSet<(String, i32)> {
        &self.partitions
    }

    fn coordinator_node(&mut self) -> Result<i32> {
        if let Some(node) = self.coordinator {
            return Ok(node);
        }
        let n = admin::find_coordinator(
            self.nodes.bootstrap()?,
            COORDINATOR_KEY_TYPE_TRANSACTION,
            &self.transactional_id,
        )?;
        self.nodes.set_addr(n.id, n.addr());
        self.coordinator = Some(n.id);
        Ok(n.id)
    }

    /// Runs `call` against the coordinator until it succeeds, fails for good, or the call
    /// timeout passes.
    fn with_coordinator<T>(
        &mut self,
        what: &str,
        mut call: impl FnMut(&mut Self, i32) -> Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + self.call_timeout;
        let mut backoff = super::limits::TXN_RETRY_BACKOFF_INITIAL;
        loop {
            let result = self.coordinator_node().and_then(|node| call(self, node));
            match result {
                Ok(v) => return Ok(v),
                Err(e) if is_retriable(&e) && Instant::now() < deadline => {
                    if drops_coordinator(&e) {
                        self.coordinator = None;
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(super::limits::TXN_RETRY_BACKOFF_MAX);
                }
                Err(e) if is_retriable(&e) => {
                    return Err(ClientError::Timeout(format!(
                        "{what} of {}: {e}",
                        self.transactional_id
                    )))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// InitProducerId with the transactional id: a producer id and a new epoch; any open
    /// transaction of the id (this instance's or a zombie's) is aborted by the coordinator, and
    /// completed first if it was being committed. Sequences restart at 0.
    pub fn init_transactions(&mut self) -> Result<()> {
        self.state.check(ProducerTxnOp::Init)?;
        let (id, timeout) = (self.transactional_id.clone(), self.transaction_timeout_ms);
        let answer = self.with_coordinator("InitProducerId", |p, node| {
            let mut r = InitProducerIdRequest::default();
            r.transactional_id = Some(TransactionalId(sb(&id)));
            r.transaction_timeout_ms = timeout;
            // Always as a new instance (-1, -1), not KIP-360's form with the epoch it had:
            // an ongoing transaction is then fenced and aborted (CONCURRENT_TRANSACTIONS until
            // the abort completed, then the bumped epoch), whoever started it.
            r.producer_id = (-1).into();
            r.producer_epoch = -1;
            let (lo, hi) = INIT_PRODUCER_ID_VERSIONS;
            let (_, back) = p.nodes.node(node)?.send_negotiated(&r, lo, hi)?;
            check(back.error_code, || format!("InitProducerId {id}"))?;
            Ok((i64::from(back.producer_id), back.producer_epoch))
        });
        match answer {
            Ok((pid, epoch)) => {
                self.producer_id = pid;
                self.producer_epoch = epoch;
                self.sequences.clear();
                self.partitions.clear();
                self.sequences_uncertain = false;
                self.state = ProducerTxnState::Ready;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Starts a transaction (local: the coordinator hears of it with the first partition).
    pub fn begin(&mut self) -> Result<()> {
        self.state.check(ProducerTxnOp::Begin)?;
        self.partitions.clear();
        self.state = ProducerTxnState::InTransaction;
        Ok(())
    }

    /// Marks the transaction abortable (or fenced) after `e`.
    fn failed(&mut self, e: ClientError) -> ClientError {
        if self.state == ProducerTxnState::InTransaction {
            self.state = if e.kafka_code().is_some_and(is_fencing) {
                ProducerTxnState::Fenced
            } else {
                ProducerTxnState::Abortable
            };
        }
        e
    }

    /// AddPartitionsToTxn of the partitions not yet in the transaction.
    pub fn add_partitions(&mut self, partitions: &[(String, i32)]) -> Result<()> {
        self.state.check(ProducerTxnOp::Work)?;
        let new: BTreeSet<(String, i32)> = partitions
            .iter()
            .filter(|p| !self.partitions.contains(*p))
            .cloned()
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let (id, pid, epoch) = (
            self.transactional_id.clone(),
            self.producer_id,
            self.producer_epoch,
        );
        let sent = self.with_coordinator("AddPartitionsToTxn", |p, node| {
            let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
            for (t, i) in &new {
                by_topic.entry(t.as_str()).or_default().push(*i);
            }
            let mut r = AddPartitionsToTxnRequest::default();
            r.v3_and_below_transactional_id = TransactionalId(sb(&id));
            r.v3_and_below_producer_id = pid.into();
            r.v3_and_below_producer_epoch = epoch;
            r.v3_and_below_topics = by_topic
                .into_iter()
                .map(|(t, parts)| {
                    let mut topic = AddPartitionsToTxnTopic::default();
                    topic.name = TopicName(sb(t));
                    topic.partitions = parts;
                    topic
                })
                .collect();
            let (lo, hi) = ADD_PARTITIONS_TO_TXN_VERSIONS;
            let (_, back) = p.nodes.node(node)?.send_negotiated(&r, lo, hi)?;
            for t in &back.results_by_topic_v3_and_below {
                for part in &t.results_by_partition {
                    check(part.partition_error_code, || {
                        format!(
                            "AddPartitionsToTxn {id} {}/{}",
                            t.name.as_str(),
                            part.partition_index
                        )
                    })?;
                }
            }
            Ok(())
        });
        match sent {
            Ok(()) => {
                self.partitions.extend(new);
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn leader(&mut self, topic: &str, partition: i32) -> Result<i32> {
        let key = (topic.to_string(), partition);
        if let Some(&node) = self.leaders.get(&key) {
            return Ok(node);
        }
        let md = admin::metadata(self.nodes.bootstrap()?, Some(&[topic]))?;
        for b in &md.brokers {
            self.nodes.set_addr(b.id, b.addr());
        }
        let node = md.leader(topic, partition).ok_or_else(|| {
            ClientError::InvalidArgument(format!("{topic}/{partition}: no leader in metadata"))
        })?;
        self.leaders.insert(key, node);
        Ok(node)
    }

    /// Writes `records` as one transactional batch to `topic`/`partition` (added to the
    /// transaction first if needed); returns the base offset. An error leaves the transaction
    /// abortable.
    pub fn send(&mut self, topic: &str, partition: i32, records: &[ProducerRecord]) -> Result<i64> {
        self.state.check(ProducerTxnOp::Work)?;
        if records.is_empty() {
            return Err(ClientError::InvalidArgument("no records to produce".into()));
        }
        self.add_partitions(&[(topic.to_string(), partition)])?;
        let key = (topic.to_string(), partition);
        let base_sequence = *self.sequences.get(&key).unwrap_or(&0);
        let batch = encode_batch_as(
            records,
            Some(BatchIdentity {
                producer_id: self.producer_id,
                producer_epoch: self.producer_epoch,
                base_sequence,
                transactional: true,
            }),
        )?;
        let deadline = Instant::now() + self.call_timeout;
        loop {
            let attempt = self
                .leader(topic, partition)
                .and_then(|node| self.produce_to(node, topic, partition, batch.clone()));
            match attempt {
                Ok(offset) => {
                    self.sequences
                        .insert(key, base_sequence.wrapping_add(records.len() as i32));
                    return Ok(offset);
                }
                // Not appended (NOT_LEADER, NOT_ENOUGH_REPLICAS), or unknown (I/O): the same
                // batch again is safe, the broker answers a duplicate with its first offsets.
                Err(e)
                    if (matches!(e, ClientError::Io { .. })
                        || matches!(
                            e.kafka_code(),
                            Some(code::NOT_LEADER_OR_FOLLOWER | code::NOT_ENOUGH_REPLICAS)
                        ))
                        && Instant::now() < deadline =>
                {
                    self.leaders.remove(&key);
                    std::thread::sleep(super::limits::TXN_RETRY_BACKOFF_INITIAL);
                }
                Err(e) => {
                    self.leaders.remove(&key);
                    self.sequences_uncertain = true;
                    return Err(self.failed(e));
                }
            }
        }
    }

    fn produce_to(
        &mut self,
        node: i32,
        topic: &str,
        partition: i32,
        batch: bytes::Bytes,
    ) -> Result<i64> {
        let id = Some(self.transactional_id.as_str());
        super::producer::produce_one(&mut self.nodes, node, id, topic, partition, batch)
    }

    /// Acknowledges `acks` (records `consumer` acquired; ACCEPT or REJECT) inside the open
    /// transaction: their partitions join the transaction (AddPartitionsToTxn), then the
    /// consumer sends TxnShareAcknowledge with this producer's id and epoch. The records are
    /// LOCKED until EndTxn: commit acknowledges them, abort makes them AVAILABLE again without
    /// using a delivery attempt. An error leaves the transaction abortable.
    pub fn send_share_acknowledgements(
        &mut self,
        consumer: &mut ShareConsumer,
        acks: &[(&ShareRecord, AckType)],
    ) -> Result<()> {
        self.state.check(ProducerTxnOp::Work)?;
        if acks.is_empty() {
            return Ok(());
        }
        let inputs: BTreeSet<(String, i32)> = acks
            .iter()
            .map(|(r, _)| (r.topic.clone(), r.partition))
            .collect();
        let inputs: Vec<(String, i32)> = inputs.into_iter().collect();
        self.add_partitions(&inputs)?;
        let id = self.transactional_id.clone();
        consumer
            .acknowledge_in_producer_transaction(
                Some(&id),
                self.producer_id,
                self.producer_epoch,
                acks,
            )
            .map_err(|e| self.failed(e))
    }

    fn end(&mut self, commit: bool) -> Result<()> {
        let (id, pid, epoch) = (
            self.transactional_id.clone(),
            self.producer_id,
            self.producer_epoch,
        );
        self.with_coordinator("EndTxn", |p, node| {
            let mut r = EndTxnRequest::default();
            r.transactional_id = TransactionalId(sb(&id));
            r.producer_id = pid.into();
            r.producer_epoch = epoch;
            r.committed = commit;
            let (lo, hi) = END_TXN_VERSIONS;
            let (_, back) = p.nodes.node(node)?.send_negotiated(&r, lo, hi)?;
            check(back.error_code, || {
                format!("EndTxn({}) {id}", if commit { "commit" } else { "abort" })
            })
        })
    }

    /// Commits the open transaction: its writes become visible to read_committed consumers and
    /// its share acknowledgements take effect, together. Answered once the decision is
    /// durable (the markers follow). A transaction that touched nothing needs no EndTxn.
    pub fn commit(&mut self) -> Result<()> {
        self.state.check(ProducerTxnOp::Commit)?;
        if self.partitions.is_empty() {
            self.state = ProducerTxnState::Ready;
            return Ok(());
        }
        match self.end(true) {
            Ok(()) => {
                self.partitions.clear();
                self.state = ProducerTxnState::Ready;
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Aborts the open (or failed) transaction: its writes are hidden from read_committed
    /// consumers, its acknowledged records become AVAILABLE again. If a produce of this epoch
    /// had an unknown outcome, the producer then re-initializes (new epoch, sequences at 0).
    pub fn abort(&mut self) -> Result<()> {
        self.state.check(ProducerTxnOp::Abort)?;
        let ended = if self.partitions.is_empty() {
            Ok(())
        } else {
            self.end(false)
        };
        match ended {
            Ok(()) => {
                self.partitions.clear();
                self.state = ProducerTxnState::Ready;
                if self.sequences_uncertain {
                    self.init_transactions()?;
                }
                Ok(())
            }
            Err(e) => {
                self.state = if e.kafka_code().is_some_and(is_fencing) {
                    ProducerTxnState::Fenced
                } else {
                    ProducerTxnState::Abortable
                };
                Err(e)
            }
        }
    }

    /// The id's transaction state as DescribeTransactions names it ("Empty", "Ongoing",
    /// "PrepareCommit", "CompleteCommit", …), asked of its coordinator.
    pub fn describe_state(&mut self) -> Result<String> {
        let id = self.transactional_id.clone();
        self.with_coordinator("DescribeTransactions", |p, node| {
            let mut r = DescribeTransactionsRequest::default();
            r.transactional_ids = vec![TransactionalId(sb(&id))];
            let back = p.nodes.node(node)?.send(&r, 0)?;
            let s = back.transaction_states.first().ok_or_else(|| {
                ClientError::Protocol(format!("DescribeTransactions {id}: no state"))
            })?;
            check(s.error_code, || format!("DescribeTransactions {id}"))?;
            Ok(s.transaction_state.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATES: [ProducerTxnState; 5] = [
        ProducerTxnState::Uninitialized,
        ProducerTxnState::Ready,
        ProducerTxnState::InTransaction,
        ProducerTxnState::Abortable,
        ProducerTxnState::Fenced,
    ];
    const OPS: [ProducerTxnOp; 5] = [
        ProducerTxnOp::Init,
        ProducerTxnOp::Begin,
        ProducerTxnOp::Work,
        ProducerTxnOp::Commit,
        ProducerTxnOp::Abort,
    ];

    #[test]
    fn transition_table_every_pair() {
        use ProducerTxnOp as O;
        use ProducerTxnState as S;
        for s in STATES {
            for op in OPS {
                let expected = match (s, op) {
                    (S::InTransaction, O::Init) => false,
                    (_, O::Init) => true,
                    (S::Ready, O::Begin) => true,
                    (S::InTransaction, O::Work | O::Commit | O::Abort) => true,
                    (S::Abortable, O::Abort) => true,
                    _ => false,
                };
                assert_eq!(s.check(op).is_ok(), expected, "{s:?} {op:?}");
            }
        }
    }

    #[test]
    fn fencing_and_retriable_codes() {
        for c in [47, 49, 53, 90] {
            assert!(is_fencing(c), "{c}");
        }
        for c in [0, 48, 51, 15] {
            assert!(!is_fencing(c), "{c}");
        }
        let kafka = |c| ClientError::kafka(c, None, "t");
        for c in [7, 14, 15, 16, 51] {
            assert!(is_retriable(&kafka(c)), "{c}");
        }
        for c in [47, 48, 49, 90, 121] {
            assert!(!is_retriable(&kafka(c)), "{c}");
        }
        assert!(drops_coordinator(&kafka(16)));
        assert!(!drops_coordinator(&kafka(51)));
    }

    #[test]
    fn calls_out_of_order_are_refused_before_anything_is_sent() {
        // No broker at this address: a call that got past the table would fail with I/O.
        let mut p = TransactionalProducer::new("127.0.0.1:1", "t", "tx", 10_000);
        assert!(matches!(p.begin(), Err(ClientError::InvalidArgument(_))));
        assert!(matches!(p.commit(), Err(ClientError::InvalidArgument(_))));
        assert!(matches!(
            p.send("t", 0, &[ProducerRecord::value("v")]),
            Err(ClientError::InvalidArgument(_))
        ));
        assert_eq!(p.state(), ProducerTxnState::Uninitialized);
    }
}
