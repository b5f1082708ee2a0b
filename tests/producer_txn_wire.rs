//! The partition and group sides of producer transactions on the wire, against the
//! broker binary with raw requests (kafka-protocol's codecs), and across a SIGKILL + restart:
//! - a transactional batch (with the request's transactional id, of a transaction the
//!   coordinator holds the partition in: KIP-890 part 1 is `tests/producer_txn.rs`) is accepted and holds the last
//!   stable offset: a read_committed Fetch gets nothing past it and `last_stable_offset` = its
//!   first offset, ListOffsets(latest, read_committed) answers it, a read_uncommitted Fetch gets
//!   the records with `aborted_transactions` null; DescribeProducers reports the open
//!   transaction's start offset;
//! - as Kafka 4.4 answers (measured on the Kafka 4.4 reference broker): a transactional batch in
//!   a request without a transactional id is TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), a control
//!   batch from a client INVALID_RECORD (87); a non-transactional batch of a producer inside a
//!   transaction is INVALID_TXN_STATE (48);
//! - TxnOffsetCommit keeps offsets pending: OffsetFetch does not show them and with
//!   `require_stable` answers UNSTABLE_OFFSET_COMMIT (88);
//! - after a SIGKILL and restart the open transaction, its LSO and the pending offset are back
//!   (rebuilt from the log, replayed from the journal).
//!
//! Ending the transaction (WriteTxnMarkers / GroupTxnMarker) is the coordinator's call; those ops
//! are tested in-process (`runtime::shard_handle` tests) and end to end by the interop tests.

use bytes::Bytes;
use kafka_protocol::messages::{
    add_partitions_to_txn_request::{AddPartitionsToTxnRequest, AddPartitionsToTxnTopic},
    describe_producers_request, fetch_request, list_offsets_request, offset_fetch_request,
    produce_request, txn_offset_commit_request, DescribeProducersRequest, FetchRequest, GroupId,
    InitProducerIdRequest, ListOffsetsRequest, OffsetFetchRequest, ProduceRequest, TopicName,
    TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::connection::Connection;
use lockstep::log::batch::BatchBuilder;

mod common;
use common::process::Lockstep;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn batch(attributes: i16, pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    let mut b = BatchBuilder::new(1_000);
    b.attributes = attributes;
    b.producer_id = pid;
    b.producer_epoch = epoch;
    b.base_sequence = seq;
    for i in 0..n {
        b.record(1_000, None, Some(format!("v{i}").as_bytes()));
    }
    Bytes::from(b.build())
}

fn control_batch() -> Bytes {
    let mut b = BatchBuilder::new(1_000);
    b.attributes = 0x20;
    b.record(1_000, Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 0]));
    Bytes::from(b.build())
}

/// Produce v9 of one batch to partition 0: (error code, base offset).
fn produce(conn: &mut Connection, topic: &str, txn_id: Option<&str>, records: Bytes) -> (i16, i64) {
    let mut p = produce_request::PartitionProduceData::default();
    p.index = 0;
    p.records = Some(records);
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(s(topic));
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.transactional_id = txn_id.map(|id| TransactionalId(s(id)));
    r.acks = -1;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    let resp = conn.send(&r, 9).expect("produce");
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// Fetch v12 from offset 0: (high watermark, last stable offset, aborted transactions, bytes).
fn fetch(conn: &mut Connection, topic: &str, isolation: i8) -> (i64, i64, Option<usize>, usize) {
    let mut p = fetch_request::FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = 0;
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = TopicName(s(topic));
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    r.replica_id = (-1).into();
    r.max_wait_ms = 0;
    r.min_bytes = 0;
    r.max_bytes = 1 << 20;
    r.isolation_level = isolation;
    r.session_epoch = -1;
    r.topics = vec![t];
    let resp = conn.send(&r, 12).expect("fetch");
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    (
        p.high_watermark,
        p.last_stable_offset,
        p.aborted_transactions.as_ref().map(Vec::len),
        p.records.as_ref().map_or(0, Bytes::len),
    )
}

fn latest(conn: &mut Connection, topic: &str, isolation: i8) -> i64 {
    let mut p = list_offsets_request::ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = -1;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = TopicName(s(topic));
    t.partitions = vec![p];
    let mut r = ListOffsetsRequest::default();
    r.replica_id = (-1).into();
    r.isolation_level = isolation;
    r.topics = vec![t];
    let resp = conn.send(&r, 7).expect("list offsets");
    resp.topics[0].partitions[0].offset
}

fn txn_start(conn: &mut Connection, topic: &str) -> Vec<(i64, i64)> {
    let mut t = describe_producers_request::TopicRequest::default();
    t.name = TopicName(s(topic));
    t.partition_indexes = vec![0];
    let mut r = DescribeProducersRequest::default();
    r.topics = vec![t];
    let resp = conn.send(&r, 0).expect("describe producers");
    resp.topics[0].partitions[0]
        .active_producers
        .iter()
        .map(|p| (p.producer_id.0, p.current_txn_start_offset))
        .collect()
}

/// Opens transaction "tx" on `topic`-0 with the coordinator, as a producer does before its
/// first transactional batch (the partition verifies it, KIP-890 part 1): its producer id.
fn begin(conn: &mut Connection, topic: &str) -> i64 {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = Some(TransactionalId(s("tx")));
    r.transaction_timeout_ms = 300_000;
    r.producer_id = (-1).into();
    r.producer_epoch = -1;
    let back = conn.send(&r, 4).expect("InitProducerId");
    assert_eq!((back.error_code, back.producer_epoch), (0, 0));
    let pid = i64::from(back.producer_id);
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = TopicName(s(topic));
    t.partitions = vec![0];
    let mut r = AddPartitionsToTxnRequest::default();
    r.v3_and_below_transactional_id = TransactionalId(s("tx"));
    r.v3_and_below_producer_id = pid.into();
    r.v3_and_below_producer_epoch = 0;
    r.v3_and_below_topics = vec![t];
    let back = conn.send(&r, 3).expect("AddPartitionsToTxn");
    assert_eq!(
        back.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    pid
}

fn txn_offset_commit(
    conn: &mut Connection,
    topic: &str,
    group: &str,
    pid: i64,
    offset: i64,
) -> i16 {
    let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = offset;
    let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
    t.name = TopicName(s(topic));
    t.partitions = vec![p];
    let mut r = TxnOffsetCommitRequest::default();
    r.transactional_id = TransactionalId(s("tx"));
    r.group_id = GroupId(s(group));
    r.producer_id = pid.into();
    r.generation_id = -1;
    r.topics = vec![t];
    let resp = conn.send(&r, 3).expect("txn offset commit");
    resp.topics[0].partitions[0].error_code
}

/// OffsetFetch v7 of partition 0: (offset, error code).
fn committed(conn: &mut Connection, topic: &str, group: &str, require_stable: bool) -> (i64, i16) {
    let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
    t.name = TopicName(s(topic));
    t.partition_indexes = vec![0];
    let mut r = OffsetFetchRequest::default();
    r.group_id = GroupId(s(group));
    r.topics = Some(vec![t]);
    r.require_stable = require_stable;
    let resp = conn.send(&r, 7).expect("offset fetch");
    let p = &resp.topics[0].partitions[0];
    (p.committed_offset, p.error_code)
}

#[test]
fn open_transactions_hold_the_lso_across_a_restart() {
    let mut broker = Lockstep::start("lockstep-ptxn-wire-", 2, &[]);
    let (topic, group) = ("ptxn-orders", "ptxn-group");
    let mut admin = Admin::connect(&broker.addr()).expect("admin");
    admin
        .create_topics(&[NewTopic::new(topic, 1)])
        .expect("create topic");
    let mut conn = Connection::connect(&broker.addr(), "ptxn-wire").expect("connect");
    let pid = begin(&mut conn, topic);

    assert_eq!(
        produce(&mut conn, topic, None, batch(0, -1, -1, -1, 2)),
        (0, 0)
    );
    assert_eq!(
        produce(&mut conn, topic, Some("tx"), batch(0x10, pid, 0, 0, 3)),
        (0, 2)
    );
    assert_eq!(
        produce(&mut conn, topic, None, batch(0, -1, -1, -1, 1)),
        (0, 5)
    );
    // Refused as Kafka 4.4 refuses them.
    assert_eq!(
        produce(&mut conn, topic, None, batch(0x10, pid, 0, 3, 1)).0,
        53
    );
    assert_eq!(produce(&mut conn, topic, None, control_batch()).0, 87);
    // A non-transactional batch of the producer inside its transaction: INVALID_TXN_STATE.
    assert_eq!(
        produce(&mut conn, topic, None, batch(0, pid, 0, 3, 1)).0,
        48
    );

    let check = |conn: &mut Connection| {
        let (hw, lso, aborted, bytes) = fetch(conn, topic, 1);
        assert_eq!((hw, lso, aborted), (6, 2, Some(0)));
        let (hw, lso, aborted, all) = fetch(conn, topic, 0);
        assert_eq!((hw, lso, aborted), (6, 2, None));
        assert!(bytes > 0 && all > bytes, "read_committed stops at the LSO");
        assert_eq!((latest(conn, topic, 1), latest(conn, topic, 0)), (2, 6));
        assert_eq!(txn_start(conn, topic), vec![(pid, 2)]);
    };
    check(&mut conn);
    assert_eq!(txn_offset_commit(&mut conn, topic, group, pid, 4), 0);
    assert_eq!(committed(&mut conn, topic, group, false), (-1, 0));
    assert_eq!(committed(&mut conn, topic, group, true), (-1, 88));

    broker.sigkill_and_restart();
    let mut conn = Connection::connect(&broker.addr(), "ptxn-wire").expect("reconnect");
    check(&mut conn);
    assert_eq!(committed(&mut conn, topic, group, true), (-1, 88));
    // The transaction goes on after the restart (sequence 3 of the same epoch).
    assert_eq!(
        produce(&mut conn, topic, Some("tx"), batch(0x10, pid, 0, 3, 1)),
        (0, 6)
    );
    assert_eq!(txn_start(&mut conn, topic), vec![(pid, 2)]);
}
