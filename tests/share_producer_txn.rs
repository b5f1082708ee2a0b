//! TxnShareAcknowledge (API key 93, KIP-1289's draft) on the wire, against the broker binary,
//! from real producer transactions (`client::producer_txn::TransactionalProducer`): share
//! records acknowledged inside a producer transaction are LOCKED durably until the
//! transaction's marker resolves them, and the broker checks every acknowledgement with the
//! transaction coordinator first.
//!
//! - `locked_records_stay_locked_across_member_exit_and_sigkill`: records locked in an open
//!   transaction are never redelivered — not after the member left (which releases what it
//!   holds), not after a SIGKILL and restart (the transaction is still ONGOING then) — while
//!   the records of the same poll that were not locked come back; the producer commits after
//!   the restart and the locked records are done (nobody gets them).
//! - `refusals`: INVALID_REQUEST at the top for a missing member, a negative producer id or a
//!   null transactional id; the coordinator's refusals: INVALID_PRODUCER_ID_MAPPING for an
//!   unknown id or another producer id, INVALID_PRODUCER_EPOCH for a fenced epoch (a second
//!   instance of the id fenced the first, whose transaction was aborted) or any other epoch,
//!   INVALID_TXN_STATE per partition when the transaction is not ONGOING (never begun, or
//!   committed) or does not hold the partition; per partition INVALID_REQUEST for RELEASE and
//!   GAP, UNKNOWN_TOPIC_ID, INVALID_RECORD_STATE for records the member does not hold.
//!
//! The markers themselves (commit → ACKNOWLEDGED, abort → redelivered at the same delivery
//! count) are tested end to end in `share_producer_txn_e2e.rs`; their share side in
//! `ptxn::share` and `shard::producer_txn_share`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::connection::{ApiCall, Connection};
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::client::producer_txn::TransactionalProducer;
use lockstep::client::share_consumer::{AckType, ShareConsumer, ShareRecord};
use lockstep::protocol::apis;
use lockstep::protocol::producer_txn_share::{
    TxnShareAcknowledgeBatch, TxnShareAcknowledgePartition, TxnShareAcknowledgeRequest,
    TxnShareAcknowledgeResponse, TxnShareAcknowledgeTopic,
};
use uuid::Uuid;

mod common;
use common::process::Lockstep;

const RECORDS: usize = 20;
const INVALID_REQUEST: i16 = 42;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const UNKNOWN_TOPIC_ID: i16 = 100;
const INVALID_RECORD_STATE: i16 = 121;

fn setup(addr: &str, topic: &str, group: &str) -> Uuid {
    let mut admin = Admin::connect(addr).expect("admin");
    let created = admin
        .create_topics(&[NewTopic::new(topic, 1)])
        .expect("create topic");
    admin
        .set_group_config(group, "share.auto.offset.reset", "earliest")
        .expect("group config");
    let mut producer = Producer::new(addr);
    let records: Vec<ProducerRecord> = (0..RECORDS)
        .map(|i| ProducerRecord {
            key: None,
            value: Some(format!("r-{i}").into()),
            timestamp: -1,
        })
        .collect();
    let mut tries = 0;
    while let Err(e) = producer.produce(topic, 0, &records) {
        tries += 1;
        assert!(tries < 50, "produce: {e}");
        std::thread::sleep(Duration::from_millis(100));
    }
    created[0].1
}

/// Polls until `want` records arrived or `within` passed.
fn poll_records(c: &mut ShareConsumer, want: usize, within: Duration) -> Vec<ShareRecord> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < want && Instant::now() < deadline {
        match c.poll(Duration::from_millis(500)) {
            Ok(records) => out.extend(records),
            Err(e) => eprintln!("poll: {e}"),
        }
    }
    out
}

fn offsets(records: &[ShareRecord]) -> BTreeSet<i64> {
    records.iter().map(|r| r.offset).collect()
}

/// A transactional producer of `id` with a long transaction timeout (no abort mid-test),
/// initialized and in a transaction.
fn producer_in_txn(addr: &str, id: &str) -> TransactionalProducer {
    let mut p = TransactionalProducer::new(addr, &format!("pshare-{id}"), id, 120_000);
    p.init_transactions().expect("InitProducerId");
    p.begin().expect("begin");
    p
}

#[test]
fn locked_records_stay_locked_across_member_exit_and_sigkill() {
    let mut broker = Lockstep::start("lockstep-share-ptxn-", 2, &[]);
    let addr = broker.addr();
    let (topic, group) = ("pshare-in", "pshare-g1");
    setup(&addr, topic, group);

    let mut a = ShareConsumer::new(&addr, group);
    a.subscribe(&[topic]).unwrap();
    let got = poll_records(&mut a, RECORDS, Duration::from_secs(30));
    assert_eq!(
        offsets(&got),
        (0..RECORDS as i64).collect(),
        "first delivery"
    );
    let by_offset = |o: i64| got.iter().find(|r| r.offset == o).unwrap();

    // 0..=9 ACCEPT and 10 REJECT into the producer's transaction (the input partition joins
    // it first, AddPartitionsToTxn).
    let mut tx = producer_in_txn(&addr, "pshare-tx");
    let mut acks: Vec<(&ShareRecord, AckType)> =
        (0..10).map(|o| (by_offset(o), AckType::Accept)).collect();
    acks.push((by_offset(10), AckType::Reject));
    tx.send_share_acknowledgements(&mut a, &acks)
        .expect("TxnShareAcknowledge");
    assert!(tx
        .transaction_partitions()
        .contains(&(topic.to_string(), 0)));
    // The same records cannot be acknowledged again (they are LOCKED, no longer ACQUIRED).
    let mut raw = Connection::connect(&addr, "pshare-raw").unwrap();
    let again = txn_ack(
        &mut raw,
        Some("pshare-tx"),
        group,
        a.member_id(),
        (tx.producer_id(), tx.producer_epoch()),
        got[0].topic_id,
        vec![(0, 0, 1)],
    );
    assert_eq!(
        (again.error_code, partition_codes(&again)),
        (0, vec![INVALID_RECORD_STATE])
    );

    // The member leaves: what it held and did not lock comes back (11..RECORDS), the locked
    // records do not.
    a.close().unwrap();
    let mut b = ShareConsumer::new(&addr, group);
    b.subscribe(&[topic]).unwrap();
    let redelivered = poll_records(&mut b, RECORDS - 11, Duration::from_secs(30));
    assert_eq!(
        offsets(&redelivered),
        (11..RECORDS as i64).collect(),
        "only the unlocked records come back"
    );
    assert!(redelivered.iter().all(|r| r.delivery_count == 2));
    let nothing_more = poll_records(&mut b, 1, Duration::from_secs(3));
    assert!(nothing_more.is_empty(), "{:?}", offsets(&nothing_more));
    b.close().unwrap();

    // SIGKILL: the locks were durable when the request was answered, the transaction is still
    // ONGOING after the restart; the LOCKED records are still not delivered, the others are.
    broker.sigkill_and_restart();
    let mut c = ShareConsumer::new(&addr, group);
    c.subscribe(&[topic]).unwrap();
    let after = poll_records(&mut c, RECORDS - 11, Duration::from_secs(30));
    assert_eq!(
        offsets(&after),
        (11..RECORDS as i64).collect(),
        "after restart"
    );
    let nothing_more = poll_records(&mut c, 1, Duration::from_secs(3));
    assert!(nothing_more.is_empty(), "{:?}", offsets(&nothing_more));
    assert_eq!(tx.describe_state().unwrap(), "Ongoing");
    // The producer commits after the restart: 0..=10 are done for good.
    tx.commit().expect("EndTxn commit after the restart");
    for r in &after {
        c.acknowledge(r, AckType::Accept).unwrap();
    }
    c.commit_sync().unwrap();
    c.close().unwrap();
    let mut d = ShareConsumer::new(&addr, group);
    d.subscribe(&[topic]).unwrap();
    let nothing = poll_records(&mut d, 1, Duration::from_secs(3));
    assert!(
        nothing.is_empty(),
        "after the commit: {:?}",
        offsets(&nothing)
    );
    d.close().unwrap();
    broker.assert_alive();
}

#[test]
fn refusals() {
    let broker = Lockstep::start("lockstep-share-ptxn-", 1, &[]);
    let addr = broker.addr();
    let (topic, group) = ("pshare-in2", "pshare-g2");
    let topic_id = setup(&addr, topic, group);
    let other = "pshare-other";
    Admin::connect(&addr)
        .unwrap()
        .create_topics(&[NewTopic::new(other, 1)])
        .unwrap();
    let mut a = ShareConsumer::new(&addr, group);
    a.subscribe(&[topic]).unwrap();
    let got = poll_records(&mut a, RECORDS, Duration::from_secs(30));
    assert_eq!(got.len(), RECORDS);
    let member = a.member_id().to_string();
    let mut raw = Connection::connect(&addr, "pshare-raw").unwrap();
    let tid = "pshare-raw-tx";
    let mut tx = producer_in_txn(&addr, tid);
    tx.add_partitions(&[(topic.to_string(), 0)]).unwrap();
    let pe = (tx.producer_id(), tx.producer_epoch());
    let ack = |raw: &mut Connection, tid: Option<&str>, member: &str, pe: (i64, i16), b| {
        txn_ack(raw, tid, group, member, pe, topic_id, b)
    };

    let top = ack(&mut raw, Some(tid), "", pe, vec![(0, 0, 1)]);
    assert_eq!(top.error_code, INVALID_REQUEST);
    let top = ack(&mut raw, Some(tid), &member, (-1, 0), vec![(0, 0, 1)]);
    assert_eq!(top.error_code, INVALID_REQUEST);
    let top = ack(&mut raw, None, &member, pe, vec![(0, 0, 1)]);
    assert_eq!(top.error_code, INVALID_REQUEST, "a null transactional id");
    // The coordinator's refusals, whole request.
    let top = ack(
        &mut raw,
        Some("pshare-nobody"),
        &member,
        pe,
        vec![(0, 0, 1)],
    );
    assert_eq!(top.error_code, INVALID_PRODUCER_ID_MAPPING, "unknown id");
    let top = ack(
        &mut raw,
        Some(tid),
        &member,
        (pe.0 + 1, pe.1),
        vec![(0, 0, 1)],
    );
    assert_eq!(
        top.error_code, INVALID_PRODUCER_ID_MAPPING,
        "another producer id"
    );
    let top = ack(
        &mut raw,
        Some(tid),
        &member,
        (pe.0, pe.1 + 1),
        vec![(0, 0, 1)],
    );
    assert_eq!(top.error_code, INVALID_PRODUCER_EPOCH, "another epoch");
    // Not ONGOING: an id that never began a transaction; ONGOING without this partition.
    let mut idle = TransactionalProducer::new(&addr, "pshare-idle", "pshare-idle-tx", 120_000);
    idle.init_transactions().unwrap();
    let r = ack(
        &mut raw,
        Some("pshare-idle-tx"),
        &member,
        (idle.producer_id(), idle.producer_epoch()),
        vec![(0, 0, 1)],
    );
    assert_eq!(
        (r.error_code, partition_codes(&r)),
        (0, vec![INVALID_TXN_STATE])
    );
    idle.begin().unwrap();
    idle.add_partitions(&[(other.to_string(), 0)]).unwrap();
    let r = ack(
        &mut raw,
        Some("pshare-idle-tx"),
        &member,
        (idle.producer_id(), idle.producer_epoch()),
        vec![(0, 0, 1)],
    );
    assert_eq!(
        (r.error_code, partition_codes(&r)),
        (0, vec![INVALID_TXN_STATE])
    );
    // RELEASE (2) and GAP (0) have no meaning in a producer transaction.
    for t in [2, 0] {
        let r = ack(&mut raw, Some(tid), &member, pe, vec![(0, 0, t)]);
        assert_eq!(
            (r.error_code, partition_codes(&r)),
            (0, vec![INVALID_REQUEST])
        );
    }
    let r = txn_ack(
        &mut raw,
        Some(tid),
        group,
        &member,
        pe,
        Uuid::from_u128(9),
        vec![(0, 0, 1)],
    );
    assert_eq!(partition_codes(&r), vec![UNKNOWN_TOPIC_ID]);
    let r = ack(&mut raw, Some(tid), "someone-else", pe, vec![(0, 0, 1)]);
    assert_eq!(partition_codes(&r), vec![INVALID_RECORD_STATE]);
    // Past what was acquired: all-or-nothing, offset 0 is still ACQUIRED afterwards.
    let r = ack(
        &mut raw,
        Some(tid),
        &member,
        pe,
        vec![(0, RECORDS as i64, 1)],
    );
    assert_eq!(partition_codes(&r), vec![INVALID_RECORD_STATE]);
    let r = ack(&mut raw, Some(tid), &member, pe, vec![(0, 0, 1)]);
    assert_eq!((r.error_code, partition_codes(&r)), (0, vec![0]));

    // A second instance of the id fences the first: its transaction is aborted (offset 0 is
    // AVAILABLE again), its epoch refused.
    let mut second = TransactionalProducer::new(&addr, "pshare-2nd", tid, 120_000);
    second.init_transactions().expect("the second instance");
    assert!(second.producer_epoch() > pe.1);
    let r = ack(&mut raw, Some(tid), &member, pe, vec![(1, 1, 1)]);
    assert_eq!(r.error_code, INVALID_PRODUCER_EPOCH, "the zombie");
    let zombie = tx
        .send_share_acknowledgements(&mut a, &[(&got[2], AckType::Accept)])
        .unwrap_err();
    assert!(
        matches!(zombie.kafka_code(), Some(47 | 90)),
        "the zombie's client: {zombie}"
    );
    // The second instance's committed transaction is not ONGOING any more.
    second.begin().unwrap();
    second.add_partitions(&[(topic.to_string(), 0)]).unwrap();
    let r = ack(
        &mut raw,
        Some(tid),
        &member,
        (second.producer_id(), second.producer_epoch()),
        vec![(1, 1, 1)],
    );
    assert_eq!((r.error_code, partition_codes(&r)), (0, vec![0]));
    second.commit().unwrap();
    let r = ack(
        &mut raw,
        Some(tid),
        &member,
        (second.producer_id(), second.producer_epoch()),
        vec![(3, 3, 1)],
    );
    assert_eq!(
        (r.error_code, partition_codes(&r)),
        (0, vec![INVALID_TXN_STATE]),
        "after the commit"
    );
    // The client refuses RELEASE before sending anything.
    assert!(a
        .acknowledge_in_producer_transaction(Some(tid), 7, 0, &[(&got[4], AckType::Release)])
        .is_err());
    a.close().unwrap();
}

fn txn_ack(
    conn: &mut Connection,
    transactional_id: Option<&str>,
    group: &str,
    member: &str,
    (producer_id, producer_epoch): (i64, i16),
    topic_id: Uuid,
    batches: Vec<(i64, i64, i8)>,
) -> TxnShareAcknowledgeResponse {
    let request = TxnShareAcknowledgeRequest {
        transactional_id: transactional_id.map(str::to_string),
        group_id: group.into(),
        producer_id,
        producer_epoch,
        member_id: member.into(),
        member_epoch: 1,
        topics: vec![TxnShareAcknowledgeTopic {
            topic_id,
            partitions: vec![TxnShareAcknowledgePartition {
                partition_index: 0,
                acknowledgement_batches: batches
                    .into_iter()
                    .map(|(first, last, t)| TxnShareAcknowledgeBatch {
                        first_offset: first,
                        last_offset: last,
                        acknowledge_type: t,
                    })
                    .collect(),
            }],
        }],
    };
    conn.send_custom(ApiCall::flexible(apis::TXN_SHARE_ACKNOWLEDGE, 0), &request)
        .expect("TxnShareAcknowledge")
}

fn partition_codes(r: &TxnShareAcknowledgeResponse) -> Vec<i16> {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}
