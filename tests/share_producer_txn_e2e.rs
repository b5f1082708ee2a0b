//! Share acknowledgements inside a producer transaction, end to end over the wire through the
//! broker's transaction coordinator (KIP-1289's draft TxnShareAcknowledge):
//! a share-group member acquires records of an input topic; a transactional producer
//! (InitProducerId with a transactional id, AddPartitionsToTxn of the output partition AND the
//! input partition, a transactional Produce to the output topic, TxnShareAcknowledge, EndTxn):
//! - commit: the acked records are ACKNOWLEDGED (never redelivered) and the output is visible to
//!   read_committed (LSO = high watermark, no aborted transaction);
//! - abort: the acked records come back at the same delivery count (the abort gives the attempt
//!   back) and the output is listed as aborted to read_committed;
//! - SIGKILL right after EndTxn(commit) answered (PrepareCommit is durable, the markers may not
//!   be written yet) and restart: the coordinator completes the commit, the records are not
//!   redelivered and the output is visible.
//!
//! The producer side is the crate's `TransactionalProducer` (`client::producer_txn`), whose
//! `send_share_acknowledgements` adds the input partition to the transaction and sends
//! TxnShareAcknowledge through the crate's `ShareConsumer`; the checks read raw Fetch answers.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    fetch_request, DescribeTransactionsRequest, FetchRequest, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::connection::Connection;
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::client::producer_txn::TransactionalProducer;
use lockstep::client::share_consumer::{decode_batches, AckType, ShareConsumer, ShareRecord};

use common::process::Lockstep;

const RECORDS: i64 = 20;
const TXN_ID: &str = "pe2e-app";

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn tid(text: &str) -> TransactionalId {
    TransactionalId(s(text))
}

/// The crate's transactional producer of `TXN_ID`, initialized (retrying while the
/// coordinator answers CONCURRENT_TRANSACTIONS).
fn init_producer(addr: &str) -> TransactionalProducer {
    let mut p = TransactionalProducer::new(addr, "pe2e-producer", TXN_ID, 60_000);
    p.init_transactions().expect("InitProducerId");
    p
}

fn values(vs: &[&str]) -> Vec<ProducerRecord> {
    vs.iter()
        .map(|v| ProducerRecord::value(v.to_string()))
        .collect()
}

/// The transaction's state as DescribeTransactions names it.
fn txn_state(conn: &mut Connection) -> String {
    let mut r = DescribeTransactionsRequest::default();
    r.transactional_ids = vec![tid(TXN_ID)];
    let back = conn.send(&r, 0).expect("DescribeTransactions");
    back.transaction_states[0].transaction_state.to_string()
}

fn wait_state(conn: &mut Connection, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = txn_state(conn);
        if got == state {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{TXN_ID}: {got}, expected {state}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a read_committed Fetch v12 of partition 0 from offset 0 shows: (high watermark, last
/// stable offset, aborted transactions as (producer id, first offset), the values a
/// read_committed consumer keeps: data records below the LSO not in an aborted transaction).
struct Committed {
    hw: i64,
    lso: i64,
    aborted: Vec<(i64, i64)>,
    values: Vec<String>,
}

fn read_committed(conn: &mut Connection, topic: &str) -> Committed {
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
    r.isolation_level = 1;
    r.session_epoch = -1;
    r.topics = vec![t];
    let back = conn.send(&r, 12).expect("Fetch");
    let p = &back.responses[0].partitions[0];
    assert_eq!(p.error_code, 0, "Fetch");
    let aborted: Vec<(i64, i64)> = p
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (i64::from(a.producer_id), a.first_offset))
        .collect();
    let records = decode_batches(p.records.clone().unwrap_or_default()).expect("decode");
    // A record is aborted if an aborted transaction of its producer started at or before it
    // and no control record of that producer came between (read_committed's filter, simplified
    // to this test's one producer: the abort marker ends the range).
    let mut values = Vec::new();
    let mut open_aborted: BTreeSet<i64> = BTreeSet::new();
    for rec in records {
        for (pid, first) in &aborted {
            if *first == rec.offset {
                open_aborted.insert(*pid);
            }
        }
        if rec.control {
            open_aborted.remove(&rec.producer_id);
            continue;
        }
        if rec.offset >= p.last_stable_offset || open_aborted.contains(&rec.producer_id) {
            continue;
        }
        values.push(String::from_utf8_lossy(rec.value.as_deref().unwrap_or_default()).into());
    }
    Committed {
        hw: p.high_watermark,
        lso: p.last_stable_offset,
        aborted,
        values,
    }
}

fn poll_records(c: &mut ShareConsumer, want: usize, within: Duration) -> Vec<ShareRecord> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < want && Instant::now() < deadline {
        match c.poll(Duration::from_millis(300)) {
            Ok(records) => out.extend(records),
            Err(e) => eprintln!("poll: {e}"),
        }
    }
    out
}

fn offsets(records: &[ShareRecord]) -> BTreeSet<i64> {
    records.iter().map(|r| r.offset).collect()
}

fn accept<'a>(
    records: &'a [ShareRecord],
    range: std::ops::Range<i64>,
) -> Vec<(&'a ShareRecord, AckType)> {
    records
        .iter()
        .filter(|r| range.contains(&r.offset))
        .map(|r| (r, AckType::Accept))
        .collect()
}

#[test]
fn share_acks_commit_abort_and_survive_sigkill_through_the_coordinator() {
    let mut broker = Lockstep::start("lockstep-share-ptxn-e2e-", 2, &[]);
    let addr = broker.addr();
    let (input, output, group) = ("pe2e-in", "pe2e-out", "pe2e-g");
    let mut admin = Admin::connect(&addr).expect("admin");
    admin
        .create_topics(&[NewTopic::new(input, 1), NewTopic::new(output, 1)])
        .expect("create topics");
    admin
        .set_group_config(group, "share.auto.offset.reset", "earliest")
        .expect("group config");
    let records: Vec<ProducerRecord> = (0..RECORDS)
        .map(|i| ProducerRecord::value(format!("in-{i}")))
        .collect();
    let mut plain = Producer::new(&addr);
    let mut tries = 0;
    while let Err(e) = plain.produce(input, 0, &records) {
        tries += 1;
        assert!(tries < 50, "produce: {e}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let mut a = ShareConsumer::new(&addr, group);
    a.subscribe(&[input]).unwrap();
    let got = poll_records(&mut a, RECORDS as usize, Duration::from_secs(15));
    assert_eq!(offsets(&got), (0..RECORDS).collect(), "first delivery");
    assert!(got.iter().all(|r| r.delivery_count == 1));

    let mut tx = init_producer(&addr);
    let mut probe = Connection::connect(&addr, "pe2e-probe").expect("connect");

    // 1. Commit: 0..10 acknowledged, the output visible to read_committed.
    tx.begin().unwrap();
    tx.send(output, 0, &values(&["c1-0", "c1-1", "c1-2"]))
        .expect("Produce");
    tx.send_share_acknowledgements(&mut a, &accept(&got, 0..10))
        .expect("TxnShareAcknowledge 1");
    assert_eq!(
        tx.transaction_partitions().len(),
        2,
        "the output and the input partition"
    );
    let before = read_committed(&mut probe, output);
    assert_eq!(
        (before.hw, before.lso),
        (3, 0),
        "the open transaction holds the LSO"
    );
    assert!(before.values.is_empty());
    tx.commit().expect("EndTxn commit");
    wait_state(&mut probe, "CompleteCommit");
    let c = read_committed(&mut probe, output);
    assert_eq!((c.hw, c.lso), (4, 4), "3 records + the commit marker");
    assert!(c.aborted.is_empty(), "{:?}", c.aborted);
    assert_eq!(c.values, vec!["c1-0", "c1-1", "c1-2"]);

    // 2. Abort: 10..15 come back at the same delivery count, the output is aborted.
    tx.begin().unwrap();
    tx.send(output, 0, &values(&["a2-0", "a2-1"]))
        .expect("Produce");
    tx.send_share_acknowledgements(&mut a, &accept(&got, 10..15))
        .expect("TxnShareAcknowledge 2");
    tx.abort().expect("EndTxn abort");
    wait_state(&mut probe, "CompleteAbort");
    let c = read_committed(&mut probe, output);
    assert_eq!((c.hw, c.lso), (7, 7), "2 records + the abort marker");
    assert_eq!(c.aborted, vec![(tx.producer_id(), 4)]);
    assert_eq!(
        c.values,
        vec!["c1-0", "c1-1", "c1-2"],
        "the aborted output is invisible"
    );
    // The member acknowledges 15..20 itself; then only 10..15 are delivered again.
    for r in got.iter().filter(|r| r.offset >= 15) {
        a.acknowledge(r, AckType::Accept).unwrap();
    }
    a.commit_sync().expect("commit_sync");
    let again = poll_records(&mut a, 5, Duration::from_secs(10));
    assert_eq!(
        offsets(&again),
        (10..15).collect(),
        "the aborted acks are redelivered"
    );
    assert!(
        again.iter().all(|r| r.delivery_count == 1),
        "the abort gives the delivery attempt back: {:?}",
        again.iter().map(|r| r.delivery_count).collect::<Vec<_>>()
    );

    // 3. Commit, SIGKILL right after EndTxn answered (PrepareCommit is durable then), restart.
    tx.begin().unwrap();
    tx.send(output, 0, &values(&["c3-0"])).expect("Produce");
    tx.send_share_acknowledgements(&mut a, &accept(&again, 10..15))
        .expect("TxnShareAcknowledge 3");
    tx.commit().expect("EndTxn commit");
    // Usually still PrepareCommit here (markers outstanding); either way the commit must hold.
    eprintln!("state when SIGKILLed: {}", txn_state(&mut probe));
    drop(a); // no close: the broker dies under it
    drop(tx);
    drop(probe);
    broker.sigkill_and_restart();
    let mut probe = Connection::connect(&addr, "pe2e-probe").expect("reconnect");
    wait_state(&mut probe, "CompleteCommit");
    let c = read_committed(&mut probe, output);
    assert_eq!((c.hw, c.lso), (9, 9), "1 record + the commit marker");
    assert_eq!(c.aborted, vec![(tx_pid_of(&mut probe), 4)]);
    assert_eq!(c.values, vec!["c1-0", "c1-1", "c1-2", "c3-0"]);
    // Every input record is acknowledged: a new member gets nothing.
    let mut b = ShareConsumer::new(&addr, group);
    b.subscribe(&[input]).unwrap();
    let nothing = poll_records(&mut b, 1, Duration::from_secs(3));
    assert!(
        nothing.is_empty(),
        "redelivered after the committed restart: {:?}",
        offsets(&nothing)
    );
    b.close().unwrap();
    broker.assert_alive();
}

/// The transaction's producer id, as DescribeTransactions reports it.
fn tx_pid_of(conn: &mut Connection) -> i64 {
    let mut r = DescribeTransactionsRequest::default();
    r.transactional_ids = vec![tid(TXN_ID)];
    let back = conn.send(&r, 0).expect("DescribeTransactions");
    i64::from(back.transaction_states[0].producer_id)
}
