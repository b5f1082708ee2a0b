//! TxnShareAcknowledge (API key 93, KIP-1289's draft) on the wire, against the broker binary:
//! share records acknowledged inside a producer transaction are LOCKED durably until the
//! transaction's marker resolves them.
//!
//! - `locked_records_stay_locked_across_member_exit_and_sigkill`: records locked by producer
//!   1000 are never redelivered — not after the member left (which releases what it holds),
//!   not after a SIGKILL and restart — while the records of the same poll that were not locked
//!   come back; a lock with an older epoch of the same producer is
//!   refused (INVALID_PRODUCER_EPOCH) and changes nothing.
//! - `refusals`: the request's errors (INVALID_REQUEST at the top for a missing member or a
//!   negative producer id; per partition INVALID_REQUEST for RELEASE, UNKNOWN_TOPIC_ID,
//!   INVALID_RECORD_STATE for records the member does not hold).
//!
//! The markers themselves (commit → ACKNOWLEDGED, abort → redelivered at the same delivery
//! count) are driven by the transaction coordinator (`ShardOp::WriteTxnMarkers`); their share
//! side is tested in `ptxn::share` and `server::ptxn_share`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::connection::{ApiCall, Connection};
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::client::share_consumer::{AckType, ShareConsumer, ShareRecord};
use lockstep::protocol::apis;
use lockstep::protocol::txn_share::{
    TxnShareAcknowledgeBatch, TxnShareAcknowledgePartition, TxnShareAcknowledgeRequest,
    TxnShareAcknowledgeResponse, TxnShareAcknowledgeTopic,
};
use uuid::Uuid;

mod common;
use common::process::Lockstep;

const RECORDS: usize = 20;
const INVALID_REQUEST: i16 = 42;
const INVALID_PRODUCER_EPOCH: i16 = 47;
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

    // 0..=9 ACCEPT and 10 REJECT into producer 1000's transaction (epoch 2).
    let mut acks: Vec<(&ShareRecord, AckType)> =
        (0..10).map(|o| (by_offset(o), AckType::Accept)).collect();
    acks.push((by_offset(10), AckType::Reject));
    a.acknowledge_in_producer_transaction(Some("pshare-tx"), 1000, 2, &acks)
        .expect("TxnShareAcknowledge");
    // An older epoch of the same producer is a zombie: refused, 11 stays ACQUIRED.
    let zombie = a
        .acknowledge_in_producer_transaction(
            Some("pshare-tx"),
            1000,
            1,
            &[(by_offset(11), AckType::Accept)],
        )
        .unwrap_err();
    assert_eq!(
        zombie.kafka_code(),
        Some(INVALID_PRODUCER_EPOCH),
        "{zombie}"
    );
    // The same records cannot be acknowledged again (they are LOCKED, no longer ACQUIRED).
    let mut raw = Connection::connect(&addr, "pshare-raw").unwrap();
    let again = txn_ack(
        &mut raw,
        group,
        a.member_id(),
        1000,
        2,
        got[0].topic_id,
        vec![(0, 0, 1)],
    );
    assert_eq!(partition_codes(&again), vec![INVALID_RECORD_STATE]);

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

    // SIGKILL: the locks were durable when the request was answered; after the restart the
    // LOCKED records are still not delivered (no marker came), the others are.
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
    c.close().unwrap();
    broker.assert_alive();
}

#[test]
fn refusals() {
    let broker = Lockstep::start("lockstep-share-ptxn-", 1, &[]);
    let addr = broker.addr();
    let (topic, group) = ("pshare-in2", "pshare-g2");
    let topic_id = setup(&addr, topic, group);
    let mut a = ShareConsumer::new(&addr, group);
    a.subscribe(&[topic]).unwrap();
    let got = poll_records(&mut a, RECORDS, Duration::from_secs(30));
    assert_eq!(got.len(), RECORDS);
    let member = a.member_id().to_string();
    let mut raw = Connection::connect(&addr, "pshare-raw").unwrap();

    let top = txn_ack(&mut raw, group, "", 7, 0, topic_id, vec![(0, 0, 1)]);
    assert_eq!(top.error_code, INVALID_REQUEST);
    let top = txn_ack(&mut raw, group, &member, -1, 0, topic_id, vec![(0, 0, 1)]);
    assert_eq!(top.error_code, INVALID_REQUEST);
    // RELEASE (2) and GAP (0) have no meaning in a producer transaction.
    for t in [2, 0] {
        let r = txn_ack(&mut raw, group, &member, 7, 0, topic_id, vec![(0, 0, t)]);
        assert_eq!(
            (r.error_code, partition_codes(&r)),
            (0, vec![INVALID_REQUEST])
        );
    }
    let r = txn_ack(
        &mut raw,
        group,
        &member,
        7,
        0,
        Uuid::from_u128(9),
        vec![(0, 0, 1)],
    );
    assert_eq!(partition_codes(&r), vec![UNKNOWN_TOPIC_ID]);
    let r = txn_ack(
        &mut raw,
        group,
        "someone-else",
        7,
        0,
        topic_id,
        vec![(0, 0, 1)],
    );
    assert_eq!(partition_codes(&r), vec![INVALID_RECORD_STATE]);
    // Past what was acquired: all-or-nothing, offset 0 is still ACQUIRED afterwards.
    let r = txn_ack(
        &mut raw,
        group,
        &member,
        7,
        0,
        topic_id,
        vec![(0, RECORDS as i64, 1)],
    );
    assert_eq!(partition_codes(&r), vec![INVALID_RECORD_STATE]);
    let r = txn_ack(&mut raw, group, &member, 7, 0, topic_id, vec![(0, 0, 1)]);
    assert_eq!(partition_codes(&r), vec![0]);
    // The client refuses RELEASE before sending anything.
    assert!(a
        .acknowledge_in_producer_transaction(None, 7, 0, &[(&got[1], AckType::Release)])
        .is_err());
    a.close().unwrap();
}

fn txn_ack(
    conn: &mut Connection,
    group: &str,
    member: &str,
    producer_id: i64,
    producer_epoch: i16,
    topic_id: Uuid,
    batches: Vec<(i64, i64, i8)>,
) -> TxnShareAcknowledgeResponse {
    let request = TxnShareAcknowledgeRequest {
        transactional_id: Some("pshare-raw-tx".into()),
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
