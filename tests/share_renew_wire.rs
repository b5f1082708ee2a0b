//! RENEW (KIP-1222) and ShareAcquireMode record_limit (KIP-1206) on the wire, as Kafka 4.4
//! answers them (raw ShareGroupHeartbeat / ShareFetch / ShareAcknowledge requests built from the
//! generated codecs, so the version and every field are the test's to choose):
//! - `renew_below_v2`: an acknowledgement of type RENEW (4) in ShareAcknowledge v1 and in
//!   ShareFetch v1 (piggybacked) is refused.
//! - `renew_disabled`: RENEW at v2 on a group with `share.renew.acknowledge.enable=false`.
//! - `renew_v2`: a renew acknowledgement (IsRenewAck) at v2 keeps the records acquired.
//! - `record_limit`: ShareAcquireMode 1 acquires exactly MaxRecords, splitting a log batch.
//!
//! Target: the broker binary on a free loopback port; with `LOCKSTEP_INTEROP_TARGET=kafka` the
//! Kafka 4.4 reference broker at `LOCKSTEP_KAFKA_ADDR` (default 127.0.0.1:19092), which is how
//! the expectations were checked.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{GroupId, ShareGroupHeartbeatRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::connection::Connection;
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::protocol::generated::{
    share_acknowledge_request as ack_req, share_acknowledge_response::ShareAcknowledgeResponse,
    share_fetch_request as fetch_req, share_fetch_response::ShareFetchResponse,
};
use uuid::Uuid;

const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

mod common;
use common::wire::Broker;

fn start() -> Broker {
    common::wire::start("lockstep-share-renew-", 1)
}

fn unique(prefix: &str) -> String {
    common::wire::unique("pA", prefix)
}

/// Creates `topic` with one partition holding `batches` batches of `batch_records` records;
/// sets the group's `share.auto.offset.reset=earliest`. Returns the topic id.
fn setup(addr: &str, topic: &str, group: &str, batches: usize, batch_records: usize) -> Uuid {
    let mut admin = Admin::connect(addr).expect("admin");
    let created = admin
        .create_topics(&[NewTopic::new(topic, 1)])
        .expect("create topic");
    let topic_id = created[0].1;
    admin
        .set_group_config(group, "share.auto.offset.reset", "earliest")
        .expect("group config");
    let mut producer = Producer::new(addr);
    for b in 0..batches {
        let records: Vec<ProducerRecord> = (0..batch_records)
            .map(|i| ProducerRecord {
                key: None,
                value: Some(format!("r-{b}-{i}").into()),
                timestamp: -1,
            })
            .collect();
        let mut tries = 0;
        while let Err(e) = producer.produce(topic, 0, &records) {
            tries += 1;
            assert!(tries < 50, "produce: {e}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    topic_id
}

/// A share-group member speaking raw requests on one connection.
struct Member {
    conn: Connection,
    group: String,
    member_id: String,
    session_epoch: i32,
}

/// (partition error, acknowledge error, acquired (first, last, delivery count)) of partition 0.
type Part = (i16, i16, Vec<(i64, i64, i16)>);

impl Member {
    fn join(addr: &str, group: &str, topic: &str) -> Member {
        let mut conn = Connection::connect(addr, "share-renew-wire").expect("connect");
        let member_id = lockstep::client::share_consumer::generate_member_id();
        let mut epoch = 0;
        let started = Instant::now();
        loop {
            let mut hb = ShareGroupHeartbeatRequest::default();
            hb.group_id = GroupId(StrBytes::from_string(group.to_string()));
            hb.member_id = StrBytes::from_string(member_id.clone());
            hb.member_epoch = epoch;
            hb.subscribed_topic_names =
                Some(vec![TopicName(StrBytes::from_string(topic.to_string()))]);
            let r = conn.send(&hb, 1).expect("heartbeat");
            assert_eq!(r.error_code, 0, "heartbeat: {:?}", r.error_message);
            epoch = r.member_epoch;
            if r.assignment
                .as_ref()
                .is_some_and(|a| a.topic_partitions.iter().any(|t| !t.partitions.is_empty()))
            {
                return Member {
                    conn,
                    group: group.into(),
                    member_id,
                    session_epoch: 0,
                };
            }
            assert!(started.elapsed() < JOIN_TIMEOUT, "no assignment in time");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One ShareFetch of partition 0 at `version`, acknowledging `acks` (first, last, type).
    #[allow(clippy::too_many_arguments)]
    fn fetch(
        &mut self,
        version: i16,
        topic_id: Uuid,
        acks: &[(i64, i64, i8)],
        max_records: i32,
        batch_size: i32,
        mode: i8,
        renew: bool,
    ) -> (ShareFetchResponse, Part) {
        let mut request = fetch_req::ShareFetchRequest::default();
        request.group_id = Some(self.group.clone());
        request.member_id = Some(self.member_id.clone());
        request.share_session_epoch = self.session_epoch;
        let zero = renew;
        request.max_wait_ms = if zero { 0 } else { 1_000 };
        request.min_bytes = if zero { 0 } else { 1 };
        request.max_bytes = if zero { 0 } else { 50 << 20 };
        request.max_records = if zero { 0 } else { max_records };
        request.batch_size = batch_size;
        request.share_acquire_mode = mode;
        request.is_renew_ack = renew;
        let mut p = fetch_req::FetchPartition::default();
        p.partition_index = 0;
        p.acknowledgement_batches = acks
            .iter()
            .map(|&(first, last, t)| {
                let mut b = fetch_req::AcknowledgementBatch::default();
                b.first_offset = first;
                b.last_offset = last;
                b.acknowledge_types = vec![t];
                b
            })
            .collect();
        let mut t = fetch_req::FetchTopic::default();
        t.topic_id = topic_id;
        t.partitions = vec![p];
        request.topics = vec![t];
        let response: ShareFetchResponse = self.conn.send(&request, version).expect("share fetch");
        println!("ShareFetch v{version} acks={acks:?} max_records={max_records} batch_size={batch_size} mode={mode} renew={renew}: {response:?}");
        if response.error_code == 0 {
            self.session_epoch += 1;
        }
        let part = part_of(
            response
                .responses
                .iter()
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == 0)
                .map(|p| {
                    (
                        p.error_code,
                        p.acknowledge_error_code,
                        p.acquired_records
                            .iter()
                            .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
                            .collect(),
                    )
                }),
        );
        (response, part)
    }

    /// One ShareAcknowledge of partition 0 at `version`; returns (top-level error, partition error).
    fn acknowledge(
        &mut self,
        version: i16,
        topic_id: Uuid,
        acks: &[(i64, i64, i8)],
        renew: bool,
    ) -> (i16, Option<i16>) {
        let mut request = ack_req::ShareAcknowledgeRequest::default();
        request.group_id = Some(self.group.clone());
        request.member_id = Some(self.member_id.clone());
        request.share_session_epoch = self.session_epoch;
        request.is_renew_ack = renew;
        let mut p = ack_req::AcknowledgePartition::default();
        p.partition_index = 0;
        p.acknowledgement_batches = acks
            .iter()
            .map(|&(first, last, t)| {
                let mut b = ack_req::AcknowledgementBatch::default();
                b.first_offset = first;
                b.last_offset = last;
                b.acknowledge_types = vec![t];
                b
            })
            .collect();
        let mut t = ack_req::AcknowledgeTopic::default();
        t.topic_id = topic_id;
        t.partitions = vec![p];
        request.topics = vec![t];
        let response: ShareAcknowledgeResponse = self
            .conn
            .send(&request, version)
            .expect("share acknowledge");
        println!("ShareAcknowledge v{version} acks={acks:?} renew={renew}: {response:?}");
        if response.error_code == 0 {
            self.session_epoch += 1;
        }
        let part = response
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == 0)
            .map(|p| p.error_code);
        (response.error_code, part)
    }
}

fn part_of(p: Option<Part>) -> Part {
    p.unwrap_or((0, 0, Vec::new()))
}

const RENEW: i8 = 4;
const ACCEPT: i8 = 1;
const INVALID_REQUEST: i16 = 42;
const INVALID_RECORD_STATE: i16 = 121;
const RENEW_DISABLED: &str = "Renewing acquisition locks is not enabled for the group.";

/// One topic of one partition holding `batches` batches of `records` records each.
fn scenario(broker: &Broker, name: &str, batches: usize, records: usize) -> (Member, Uuid) {
    let (topic, group) = (unique(name), unique(&format!("{name}-g")));
    let topic_id = setup(&broker.addr, &topic, &group, batches, records);
    (Member::join(&broker.addr, &group, &topic), topic_id)
}

#[test]
fn renew_below_v2() {
    let broker = start();
    let (mut m, topic_id) = scenario(&broker, "renew-v1", 1, 10);
    let (_, (_, _, got)) = m.fetch(1, topic_id, &[], 500, 500, 0, false);
    assert_eq!(got, vec![(0, 9, 1)]);
    let observed = m.acknowledge(1, topic_id, &[(0, 4, RENEW)], false);
    assert_eq!(
        observed,
        (0, Some(INVALID_REQUEST)),
        "ShareAcknowledge v1 RENEW"
    );
    let (r, observed) = m.fetch(1, topic_id, &[(5, 9, RENEW)], 500, 500, 0, false);
    assert_eq!(r.error_code, 0);
    assert_eq!(
        observed,
        (0, INVALID_REQUEST, vec![]),
        "ShareFetch v1 RENEW"
    );
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.acknowledge_error_message, None);
    // The records are still acquired: accepting them works.
    let observed = m.acknowledge(1, topic_id, &[(0, 9, ACCEPT)], false);
    assert_eq!(observed, (0, Some(0)), "the records stayed acquired");
}

#[test]
fn renew_disabled() {
    let broker = start();
    let (mut m, topic_id) = scenario(&broker, "renew-off", 1, 10);
    let mut admin = Admin::connect(&broker.addr).expect("admin");
    admin
        .set_group_config(&m.group, "share.renew.acknowledge.enable", "false")
        .expect("group config");
    let (_, (_, _, got)) = m.fetch(2, topic_id, &[], 500, 500, 0, false);
    assert_eq!(got, vec![(0, 9, 1)]);
    let observed = m.acknowledge(2, topic_id, &[(0, 4, RENEW)], true);
    assert_eq!(
        observed,
        (0, Some(INVALID_RECORD_STATE)),
        "ShareAcknowledge v2 RENEW disabled"
    );
    let (r, observed) = m.fetch(2, topic_id, &[(5, 9, RENEW)], 0, 0, 0, true);
    assert_eq!(r.error_code, 0);
    assert_eq!(
        observed,
        (0, INVALID_RECORD_STATE, vec![]),
        "ShareFetch v2 RENEW disabled"
    );
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.acknowledge_error_message.as_deref(), Some(RENEW_DISABLED));
    let observed = m.acknowledge(2, topic_id, &[(0, 9, ACCEPT)], false);
    assert_eq!(observed, (0, Some(0)), "the records stayed acquired");
}

#[test]
fn renew_v2() {
    let broker = start();
    let (mut m, topic_id) = scenario(&broker, "renew-v2", 1, 10);
    let (_, (_, _, got)) = m.fetch(2, topic_id, &[], 500, 500, 0, false);
    assert_eq!(got, vec![(0, 9, 1)]);
    let observed = m.acknowledge(2, topic_id, &[(0, 4, RENEW)], true);
    assert_eq!(observed, (0, Some(0)), "ShareAcknowledge v2 RENEW");
    let (r, observed) = m.fetch(2, topic_id, &[(5, 9, RENEW)], 0, 0, 0, true);
    assert_eq!(r.error_code, 0);
    assert_eq!(observed, (0, 0, vec![]), "a renew fetch acquires nothing");
    let observed = m.acknowledge(2, topic_id, &[(0, 9, ACCEPT)], false);
    assert_eq!(observed, (0, Some(0)), "the records stayed acquired");
}

#[test]
fn record_limit() {
    let broker = start();
    // 4 batches of 10 records.
    let (mut m, topic_id) = scenario(&broker, "reclimit", 4, 10);
    // Each log batch of 10 records is 181 bytes on the wire.
    let one_batch = 181;
    let (r, observed) = m.fetch(2, topic_id, &[], 5, 500, 1, false);
    let bytes = r
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
        .sum::<usize>();
    // The whole log batch 0..9 is sent; only 0..4 acquired.
    assert_eq!(
        observed,
        (0, 0, vec![(0, 4, 1)]),
        "record_limit MaxRecords 5"
    );
    assert_eq!(bytes, one_batch);
    let (r, observed) = m.fetch(2, topic_id, &[], 17, 3, 1, false);
    let bytes = r
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
        .sum::<usize>();
    // Exactly 17, the rest of batch 0 then 10..21, not split by BatchSize; batches 0-2 sent.
    assert_eq!(
        observed,
        (0, 0, vec![(5, 9, 1), (10, 21, 1)]),
        "record_limit MaxRecords 17"
    );
    assert_eq!(bytes, 3 * one_batch);
    let (r, observed) = m.fetch(2, topic_id, &[], 4, 500, 0, false);
    let bytes = r
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
        .sum::<usize>();
    // batch_optimized rounds up to the end of the batch holding offset 25.
    assert_eq!(
        observed,
        (0, 0, vec![(22, 29, 1)]),
        "batch_optimized MaxRecords 4"
    );
    assert_eq!(bytes, one_batch);
    let (r, observed) = m.fetch(2, topic_id, &[], 500, 500, 7, false);
    // An unknown mode: UNKNOWN_SERVER_ERROR (-1), no message, no partitions.
    assert_eq!(
        (r.error_code, r.error_message.as_deref()),
        (-1, None),
        "mode 7"
    );
    assert_eq!(observed, (0, 0, vec![]));
}
