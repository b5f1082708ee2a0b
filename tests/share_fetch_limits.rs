//! ShareFetch's limits on the wire, as Kafka 4.4 applies them: raw
//! ShareGroupHeartbeat / ShareFetch v1 requests from `lockstep::client::connection`, so every
//! field (MaxRecords, BatchSize, MaxBytes, MinBytes, MaxWaitMs) is the test's to choose.
//!
//! Scenarios, each on its own topic and group, one broker for all (records produced in batches
//! of a known size, group config `share.auto.offset.reset=earliest`):
//! - `max_records_is_one_budget_over_all_partitions`: four partitions of 50 records on a
//!   broker of four shards; a new member's first fetch (MaxRecords 500) gets one partition's
//!   50 (Kafka answers once the first share partition is initialized); MaxRecords 60 never
//!   returns more than 60 however the partitions spread over shards.
//! - `ready_partitions_share_one_budget`: once the share partitions exist, one fetch gets the
//!   records of all of them (150), and MaxRecords 60 gives 60, 60, 60, then the last 10.
//! - `rotation`: a backlog on one partition does not starve another: over successive fetches
//!   of a session both partitions are served.
//! - `batch_size`: BatchSize splits what is acquired into AcquiredRecords of at least BatchSize
//!   offsets, cut at the log's batch boundaries; MaxRecords is a soft limit rounded up to the
//!   end of a log batch, as Kafka's `SharePartition.acquire` does.
//! - `max_bytes_zero`: MaxBytes 0 hands out no records.
//! - `min_bytes`: MinBytes above what the partitions hold waits for MaxWaitMs, then answers
//!   with what there is; MinBytes that only several partitions (over shards) reach together is
//!   answered at once with all of their records.
//!
//! Target: the broker binary (`--shards 4`) on a free loopback port; with
//! `LOCKSTEP_INTEROP_TARGET=kafka` the Kafka 4.4 reference broker at `LOCKSTEP_KAFKA_ADDR`
//! (default 127.0.0.1:19092, `tools/kafka-reference.sh run`), which is how the expectations
//! were checked.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    share_fetch_request, GroupId, ShareFetchRequest, ShareFetchResponse,
    ShareGroupHeartbeatRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::connection::Connection;
use lockstep::client::producer::{Producer, ProducerRecord};
use uuid::Uuid;

const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

mod common;
use common::wire::Broker;

fn start() -> Broker {
    common::wire::start("lockstep-share-fetch-", 4)
}

fn unique(prefix: &str) -> String {
    common::wire::unique("pD", prefix)
}

/// Creates `topic` with `partitions`, each holding `batches` batches of `batch_records`
/// records; sets the group's `share.auto.offset.reset=earliest`. Returns the topic id.
fn setup(
    addr: &str,
    topic: &str,
    group: &str,
    partitions: &[(i32, usize, usize)],
    count: i32,
) -> Uuid {
    let mut admin = Admin::connect(addr).expect("admin");
    let created = admin
        .create_topics(&[NewTopic::new(topic, count)])
        .expect("create topic");
    let topic_id = created[0].1;
    admin
        .set_group_config(group, "share.auto.offset.reset", "earliest")
        .expect("group config");
    let mut producer = Producer::new(addr);
    for &(partition, batches, batch_records) in partitions {
        for b in 0..batches {
            let records: Vec<ProducerRecord> = (0..batch_records)
                .map(|i| ProducerRecord {
                    key: None,
                    value: Some(format!("p{partition}-{b}-{i}").into()),
                    timestamp: -1,
                })
                .collect();
            // The metadata may lag the creation for a moment.
            let mut tries = 0;
            while let Err(e) = producer.produce(topic, partition, &records) {
                tries += 1;
                assert!(tries < 50, "produce: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    topic_id
}

/// A share-group member speaking raw requests on one connection.
struct Member {
    conn: Connection,
    group: String,
    member_id: String,
    member_epoch: i32,
    session_epoch: i32,
}

impl Member {
    /// Joins `group` subscribed to `topic` and heartbeats until `partitions` partitions are
    /// assigned to it.
    fn join(addr: &str, group: &str, topic: &str, partitions: usize) -> Member {
        let mut m = Member {
            conn: Connection::connect(addr, "share-fetch-limits").expect("connect"),
            group: group.to_string(),
            member_id: lockstep::client::share_consumer::generate_member_id(),
            member_epoch: 0,
            session_epoch: 0,
        };
        let started = Instant::now();
        loop {
            let mut hb = ShareGroupHeartbeatRequest::default();
            hb.group_id = GroupId(StrBytes::from_string(group.to_string()));
            hb.member_id = StrBytes::from_string(m.member_id.clone());
            hb.member_epoch = m.member_epoch;
            hb.subscribed_topic_names =
                Some(vec![TopicName(StrBytes::from_string(topic.to_string()))]);
            let r = m.conn.send(&hb, 1).expect("heartbeat");
            assert_eq!(r.error_code, 0, "heartbeat: {:?}", r.error_message);
            m.member_epoch = r.member_epoch;
            let assigned: usize = r
                .assignment
                .as_ref()
                .map(|a| a.topic_partitions.iter().map(|t| t.partitions.len()).sum())
                .unwrap_or(0);
            if assigned >= partitions {
                return m;
            }
            assert!(started.elapsed() < JOIN_TIMEOUT, "no assignment in time");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One ShareFetch; the first of the session names the partitions (epoch 0).
    #[allow(clippy::too_many_arguments)]
    fn fetch(
        &mut self,
        topic_id: Uuid,
        partitions: &[i32],
        max_records: i32,
        batch_size: i32,
        max_bytes: i32,
        min_bytes: i32,
        max_wait_ms: i32,
    ) -> Fetched {
        let mut request = ShareFetchRequest::default();
        request.group_id = Some(GroupId(StrBytes::from_string(self.group.clone())));
        request.member_id = Some(StrBytes::from_string(self.member_id.clone()));
        request.share_session_epoch = self.session_epoch;
        request.max_wait_ms = max_wait_ms;
        request.min_bytes = min_bytes;
        request.max_bytes = max_bytes;
        request.max_records = max_records;
        request.batch_size = batch_size;
        if self.session_epoch == 0 {
            let mut t = share_fetch_request::FetchTopic::default();
            t.topic_id = topic_id;
            t.partitions = partitions
                .iter()
                .map(|p| {
                    let mut fp = share_fetch_request::FetchPartition::default();
                    fp.partition_index = *p;
                    fp
                })
                .collect();
            request.topics = vec![t];
        }
        let started = Instant::now();
        let response: ShareFetchResponse = self.conn.send(&request, 1).expect("share fetch");
        let elapsed = started.elapsed();
        assert_eq!(
            response.error_code, 0,
            "share fetch: {:?}",
            response.error_message
        );
        self.session_epoch += 1;
        let mut ranges: BTreeMap<i32, Vec<(i64, i64, i16)>> = BTreeMap::new();
        let mut bytes = 0;
        for t in &response.responses {
            for p in &t.partitions {
                assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
                bytes += p.records.as_ref().map_or(0, |r| r.len());
                if !p.acquired_records.is_empty() {
                    ranges.insert(
                        p.partition_index,
                        p.acquired_records
                            .iter()
                            .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
                            .collect(),
                    );
                }
            }
        }
        let f = Fetched {
            ranges,
            bytes,
            elapsed,
        };
        println!(
            "fetch max_records={max_records} batch_size={batch_size} max_bytes={max_bytes} \
             min_bytes={min_bytes} wait={max_wait_ms}: {:?} ({} bytes, {} ms)",
            f.ranges,
            f.bytes,
            f.elapsed.as_millis()
        );
        f
    }
}

#[derive(Debug)]
struct Fetched {
    /// Partition → AcquiredRecords (first, last, delivery count).
    ranges: BTreeMap<i32, Vec<(i64, i64, i16)>>,
    bytes: usize,
    elapsed: Duration,
}

impl Fetched {
    fn count(&self, partition: i32) -> i64 {
        self.ranges
            .get(&partition)
            .map_or(0, |r| r.iter().map(|(f, l, _)| l - f + 1).sum())
    }

    fn total(&self) -> i64 {
        self.ranges.keys().map(|p| self.count(*p)).sum()
    }
}

const MIB: i32 = 1 << 20;

/// Fetches until `total` records arrived or `fetches` fetches were made; returns the fetches.
fn drain(m: &mut Member, topic_id: Uuid, parts: &[i32], max: i32, total: i64) -> Vec<Fetched> {
    let mut out = Vec::new();
    let mut got = 0;
    while got < total && out.len() < 20 {
        let f = m.fetch(topic_id, parts, max, max, 50 * MIB, 1, 3_000);
        got += f.total();
        out.push(f);
    }
    out
}

fn max_records_is_one_budget_over_all_partitions(broker: &Broker) {
    let (topic, group) = (unique("budget"), unique("budget-g"));
    let parts = [0, 1, 2, 3];
    let topic_id = setup(
        &broker.addr,
        &topic,
        &group,
        &[(0, 5, 10), (1, 5, 10), (2, 5, 10), (3, 5, 10)],
        4,
    );
    let mut m = Member::join(&broker.addr, &group, &topic, 4);
    let fetches = drain(&mut m, topic_id, &parts, 500, 200);
    let total: i64 = fetches.iter().map(|f| f.total()).sum();
    assert_eq!(total, 200, "every record once");
    // Kafka: a fresh session's first fetch gets one partition's records.
    assert_eq!(fetches[0].ranges.len(), 1, "first fetch: one partition");
    assert_eq!(fetches[0].total(), 50);

    // MaxRecords 60 over partitions holding 50 each: 60 (rounded up to a batch end), never
    // 4 × 60 / 4 = 60 per shard nor 15 per shard.
    let (topic, group) = (unique("budget60"), unique("budget60-g"));
    let topic_id = setup(
        &broker.addr,
        &topic,
        &group,
        &[(0, 5, 10), (1, 5, 10), (2, 5, 10), (3, 5, 10)],
        4,
    );
    let mut m = Member::join(&broker.addr, &group, &topic, 4);
    let fetches = drain(&mut m, topic_id, &parts, 60, 200);
    for f in &fetches {
        assert!(f.total() <= 60, "at most MaxRecords: {f:?}");
    }
    assert_eq!(fetches.iter().map(|f| f.total()).sum::<i64>(), 200);
}

fn rotation(broker: &Broker) {
    let (topic, group) = (unique("rotate"), unique("rotate-g"));
    // Partition 0 holds a backlog of 1000; partition 1 holds 20.
    let topic_id = setup(&broker.addr, &topic, &group, &[(0, 100, 10), (1, 2, 10)], 2);
    let mut m = Member::join(&broker.addr, &group, &topic, 2);
    let mut seen = BTreeMap::new();
    for _ in 0..4 {
        let f = m.fetch(topic_id, &[0, 1], 100, 100, 50 * MIB, 1, 3_000);
        assert!(f.total() <= 100);
        for p in f.ranges.keys() {
            *seen.entry(*p).or_insert(0) += f.count(*p);
        }
    }
    assert_eq!(seen.get(&1), Some(&20), "partition 1 served: {seen:?}");
}

fn batch_size(broker: &Broker) {
    let (topic, group) = (unique("batch"), unique("batch-g"));
    // 10 batches of 5 records.
    let topic_id = setup(&broker.addr, &topic, &group, &[(0, 10, 5)], 1);
    let mut m = Member::join(&broker.addr, &group, &topic, 1);
    // MaxRecords 23: rounded up to the end of the batch holding offset 22 (24).
    let f = m.fetch(topic_id, &[0], 23, 10, 50 * MIB, 1, 3_000);
    assert_eq!(f.ranges[&0], vec![(0, 9, 1), (10, 19, 1), (20, 24, 1)]);
    // BatchSize 7 over batches of 5: ranges cut at the first batch start 7 or more past the
    // range's start.
    let f = m.fetch(topic_id, &[0], 500, 7, 50 * MIB, 1, 3_000);
    assert_eq!(f.ranges[&0], vec![(25, 34, 1), (35, 44, 1), (45, 49, 1)],);
}

fn max_bytes_zero(broker: &Broker) {
    let (topic, group) = (unique("bytes0"), unique("bytes0-g"));
    let topic_id = setup(&broker.addr, &topic, &group, &[(0, 2, 10)], 1);
    let mut m = Member::join(&broker.addr, &group, &topic, 1);
    let f = m.fetch(topic_id, &[0], 500, 500, 0, 1, 1_000);
    assert_eq!(f.total(), 0, "MaxBytes 0: {f:?}");
    assert!(f.elapsed < Duration::from_millis(800), "answered at once");
    // The records were not acquired: the next fetch gets them all.
    let f = m.fetch(topic_id, &[0], 500, 500, 50 * MIB, 1, 3_000);
    assert_eq!(f.total(), 20);
}

fn min_bytes(broker: &Broker) {
    let (topic, group) = (unique("minbytes"), unique("minbytes-g"));
    let topic_id = setup(&broker.addr, &topic, &group, &[(0, 1, 10)], 1);
    let mut m = Member::join(&broker.addr, &group, &topic, 1);
    // MaxWaitMs 0 on the fetch that creates the share partition: Kafka initializes it
    // asynchronously, so nothing yet.
    let f = m.fetch(topic_id, &[0], 500, 500, 50 * MIB, 1, 0);
    assert_eq!(f.total(), 0);
    // Then MaxRecords 1 gets the whole batch of 10 (the soft limit).
    let f = m.fetch(topic_id, &[0], 1, 500, 50 * MIB, 1, 3_000);
    assert_eq!(f.ranges[&0], vec![(0, 9, 1)]);
    let batch_bytes = f.bytes;
    let (topic, group) = (unique("minbytes2"), unique("minbytes2-g"));
    let topic_id = setup(&broker.addr, &topic, &group, &[(0, 1, 10)], 1);
    let mut m = Member::join(&broker.addr, &group, &topic, 1);
    let f = m.fetch(topic_id, &[0], 500, 500, 50 * MIB, MIB, 1_500);
    assert!(
        f.elapsed >= Duration::from_millis(1_400),
        "MinBytes not reached: waits MaxWaitMs ({:?})",
        f.elapsed
    );
    assert_eq!(f.total(), 10, "then answers with what there is");
    // MinBytes reached only by several partitions together (on a broker of four shards, over
    // shards): answered at once, with every partition's records.
    let (topic, group) = (unique("minbytes3"), unique("minbytes3-g"));
    let parts = [0, 1, 2, 3];
    let each = [(0, 1, 10), (1, 1, 10), (2, 1, 10), (3, 1, 10)];
    let topic_id = setup(&broker.addr, &topic, &group, &each, 4);
    let mut m = Member::join(&broker.addr, &group, &topic, 4);
    let first = m.fetch(topic_id, &parts, 500, 500, 50 * MIB, 1, 0);
    let min_bytes = i32::try_from(batch_bytes * 3 / 2).expect("small");
    let f = m.fetch(topic_id, &parts, 500, 500, 50 * MIB, min_bytes, 3_000);
    assert!(
        f.elapsed < Duration::from_millis(1_500),
        "MinBytes reached over partitions: answered at once ({:?})",
        f.elapsed
    );
    assert_eq!(first.total() + f.total(), 40, "every partition's records");
}

fn ready_partitions_share_one_budget(broker: &Broker) {
    let (topic, group) = (unique("ready"), unique("ready-g"));
    let parts = [0, 1, 2, 3];
    let topic_id = setup(
        &broker.addr,
        &topic,
        &group,
        &[(0, 5, 10), (1, 5, 10), (2, 5, 10), (3, 5, 10)],
        4,
    );
    let mut m = Member::join(&broker.addr, &group, &topic, 4);
    // The first fetch gets one partition's records (the others are still initializing in
    // Kafka); once they are ready, one fetch gets all of them.
    let f = m.fetch(topic_id, &parts, 500, 500, 50 * MIB, 1, 3_000);
    assert_eq!((f.ranges.len(), f.total()), (1, 50));
    std::thread::sleep(Duration::from_secs(1));
    let f = m.fetch(topic_id, &parts, 500, 500, 50 * MIB, 1, 3_000);
    assert_eq!((f.ranges.len(), f.total()), (3, 150));

    // Another group on the same records: MaxRecords 1 gets a whole batch of 10; then
    // MaxRecords 60 walks the ready partitions with one budget: 60 a fetch until 10 are left.
    let group2 = unique("ready-g2");
    let mut admin = Admin::connect(&broker.addr).expect("admin");
    admin
        .set_group_config(&group2, "share.auto.offset.reset", "earliest")
        .expect("group config");
    let mut m2 = Member::join(&broker.addr, &group2, &topic, 4);
    let f = m2.fetch(topic_id, &parts, 1, 1, 50 * MIB, 1, 3_000);
    assert_eq!((f.ranges.len(), f.total()), (1, 10));
    std::thread::sleep(Duration::from_secs(1));
    let totals: Vec<i64> = (0..4)
        .map(|_| {
            m2.fetch(topic_id, &parts, 60, 60, 50 * MIB, 1, 3_000)
                .total()
        })
        .collect();
    assert_eq!(totals, vec![60, 60, 60, 10]);
}

/// One broker for every scenario (several brokers of four shards at once overload a small
/// machine), each scenario on its own topic and group.
#[test]
fn share_fetch_limits() {
    let broker = start();
    for (name, scenario) in [
        (
            "max_records_is_one_budget_over_all_partitions",
            max_records_is_one_budget_over_all_partitions as fn(&Broker),
        ),
        (
            "ready_partitions_share_one_budget",
            ready_partitions_share_one_budget,
        ),
        ("rotation", rotation),
        ("batch_size", batch_size),
        ("max_bytes_zero", max_bytes_zero),
        ("min_bytes", min_bytes),
    ] {
        let started = Instant::now();
        scenario(&broker);
        println!("{name}: ok in {} ms", started.elapsed().as_millis());
    }
}
