//! `lockstep::client` against the reference Apache Kafka 4.4: proves that the blocking client's
//! admin calls, producer and share consumer (ShareGroupHeartbeat / ShareFetch / ShareAcknowledge
//! v1, share sessions, explicit acknowledgement) do what Kafka expects, so the same client can be
//! trusted against Lockstep.
//!
//! Scenario (one test, phases timed on stdout):
//! 1. create a 1-partition topic, set the group config `share.auto.offset.reset=earliest`; send
//!    ApiVersions through the explicit-call path (`send_custom`) and an unknown key 1000 (`send_raw`:
//!    Kafka drops the connection, the client reports an error);
//! 2. produce 1000 records (10 batches, acks=-1);
//! 3. consumer A polls all 1000 (delivery count 1), accepts 900 and releases every tenth; the
//!    released 100 come back with delivery count 2 and are accepted; acknowledgements go out
//!    alternately by `commit_sync` and piggybacked on the next ShareFetch;
//! 4. consumer B joins the same group; 1000 more records are produced in small batches while A
//!    and B poll in turn: the two receive disjoint records that together are exactly the new
//!    1000, and both receive some;
//! 5. both close (ShareAcknowledge epoch -1, leave heartbeat); consumer C then joins and receives
//!    nothing, so every acknowledgement took effect.
//!
//! Target: `LOCKSTEP_CLIENT_TARGET=HOST:PORT` uses a running broker; otherwise the test starts
//! Kafka 4.4 itself with `tools/kafka-reference.sh start` in `target/client-kafka-test/` and stops
//! it afterwards (`LOCKSTEP_CLIENT_KEEP=1` keeps its directory). Run:
//!
//! ```sh
//! tools/kafka-reference.sh fetch
//! cargo test --test client_kafka -- --include-ignored --nocapture
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::connection::{ApiCall, Connection};
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::client::share_consumer::{AckType, ShareConsumer, ShareRecord};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A Kafka started by this test, stopped on drop.
struct StartedKafka {
    dir: PathBuf,
}

impl Drop for StartedKafka {
    fn drop(&mut self) {
        let _ = Command::new(format!("{ROOT}/tools/kafka-reference.sh"))
            .arg("stop")
            .arg(&self.dir)
            .status();
        if std::env::var_os("LOCKSTEP_CLIENT_KEEP").is_none() && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("client_kafka: Kafka directory kept: {}", self.dir.display());
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The broker to test against, and the Kafka this test started (if any).
fn target() -> (String, Option<StartedKafka>) {
    if let Ok(t) = std::env::var("LOCKSTEP_CLIENT_TARGET") {
        return (t, None);
    }
    let port = free_port();
    let dir = PathBuf::from(format!(
        "{ROOT}/target/client-kafka-test/{}-{port}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let started = Instant::now();
    let status = Command::new(format!("{ROOT}/tools/kafka-reference.sh"))
        .arg("start")
        .arg(&dir)
        .arg(port.to_string())
        .status()
        .expect("run tools/kafka-reference.sh");
    assert!(status.success(), "tools/kafka-reference.sh start failed");
    println!("kafka started in {:.1} s", started.elapsed().as_secs_f64());
    (format!("127.0.0.1:{port}"), Some(StartedKafka { dir }))
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn produce_range(producer: &mut Producer, topic: &str, offsets: std::ops::Range<i64>) -> i64 {
    let records: Vec<ProducerRecord> = offsets
        .clone()
        .map(|i| ProducerRecord {
            key: Some(format!("k{i}").into()),
            value: Some(format!("value-{i}").into()),
            timestamp: 1_700_000_000_000 + i,
        })
        .collect();
    producer.produce(topic, 0, &records).expect("produce")
}

fn check_payload(r: &ShareRecord) {
    assert_eq!(r.partition, 0);
    assert_eq!(
        r.value.as_deref(),
        Some(format!("value-{}", r.offset).as_bytes())
    );
    assert_eq!(r.key.as_deref(), Some(format!("k{}", r.offset).as_bytes()));
    assert_eq!(r.timestamp, 1_700_000_000_000 + r.offset);
}

#[test]
#[ignore = "needs Kafka 4.4: tools/kafka-reference.sh fetch"]
fn share_consumer_against_kafka() {
    let (bootstrap, _kafka) = target();
    let t0 = Instant::now();
    let topic = unique("client-share");
    let group = unique("client-group");

    // 1. Topic and group config.
    let mut admin = Admin::connect(&bootstrap).expect("admin connect");
    let created = admin
        .create_topics(&[NewTopic::new(&topic, 1)])
        .expect("create topic");
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].0, topic);
    let md = admin.metadata(Some(&[&topic])).expect("metadata");
    let tm = md.topic(&topic).expect("topic in metadata");
    assert_eq!(tm.id, created[0].1);
    assert_eq!(tm.partitions.len(), 1);
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .expect("group config");
    // The first FindCoordinator of a fresh cluster creates the offsets topic and answers
    // COORDINATOR_NOT_AVAILABLE (15) until it is loaded.
    let deadline = Instant::now() + Duration::from_secs(30);
    let coordinator = loop {
        match admin.find_group_coordinator(&group) {
            Ok(c) => break c,
            Err(e) if e.kafka_code() == Some(15) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("coordinator: {e}"),
        }
    };
    assert!(coordinator.port > 0);

    // The explicit-call path the project's own keys (1000–1005) will use: any Encodable /
    // Decodable pair with a caller-given key, version and header versions.
    let mut raw = Connection::connect(&bootstrap, "lockstep-raw").expect("connect");
    let call = ApiCall {
        api_key: 18,
        version: 3,
        request_header_version: 2,
        response_header_version: 0,
    };
    let mut request = ApiVersionsRequest::default();
    // v3+ requires a client software name and version (Kafka answers INVALID_REQUEST otherwise).
    request.client_software_name = "lockstep-raw".into();
    request.client_software_version = "0".into();
    let versions: ApiVersionsResponse = raw
        .send_custom(call, &request)
        .expect("ApiVersions through send_custom");
    assert_eq!(versions.error_code, 0);
    assert!(versions.api_keys.iter().any(|k| k.api_key == 78));
    // Kafka does not know key 1000: it drops the connection, which is an error, not a panic.
    let unknown = raw.send_raw(ApiCall::flexible(1000, 0), &[]);
    assert!(unknown.is_err(), "{unknown:?}");
    assert!(raw.is_broken());

    // 2. Produce 1000 records.
    let mut producer = Producer::new(&bootstrap);
    for b in 0..10 {
        let base = produce_range(&mut producer, &topic, b * 100..(b + 1) * 100);
        assert_eq!(base, b * 100);
    }
    println!("setup + produce 1000: {:.1} s", t0.elapsed().as_secs_f64());

    // 3. Consumer A: everything, with releases redelivered at delivery count 2.
    let t1 = Instant::now();
    let mut a = ShareConsumer::new(&bootstrap, &group);
    assert_eq!(a.member_id().len(), 22);
    a.subscribe(&[&topic]).unwrap();
    let mut first: BTreeSet<i64> = BTreeSet::new();
    let mut second: BTreeSet<i64> = BTreeSet::new();
    let mut accepted: BTreeSet<i64> = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut polls = 0u32;
    while accepted.len() < 1000 {
        assert!(
            Instant::now() < deadline,
            "phase 3 timed out: {} first deliveries, {} redeliveries, {} accepted",
            first.len(),
            second.len(),
            accepted.len()
        );
        let records = a.poll(Duration::from_secs(2)).expect("poll A");
        polls += 1;
        for r in &records {
            check_payload(r);
            assert_eq!(r.topic, topic);
            match r.delivery_count {
                1 => {
                    assert!(
                        first.insert(r.offset),
                        "offset {} delivered twice",
                        r.offset
                    );
                    if r.offset % 10 == 0 {
                        a.acknowledge(r, AckType::Release).unwrap();
                    } else {
                        a.acknowledge(r, AckType::Accept).unwrap();
                        accepted.insert(r.offset);
                    }
                }
                2 => {
                    assert_eq!(r.offset % 10, 0, "offset {} redelivered", r.offset);
                    assert!(first.contains(&r.offset));
                    assert!(second.insert(r.offset));
                    a.acknowledge(r, AckType::Accept).unwrap();
                    accepted.insert(r.offset);
                }
                n => panic!("offset {} with delivery count {n}", r.offset),
            }
        }
        // Alternate: commit explicitly, or leave the acks to ride on the next ShareFetch.
        if polls.is_multiple_of(2) {
            a.commit_sync().expect("commit_sync A");
        }
        let errors = a.take_acknowledgement_errors();
        assert!(errors.is_empty(), "piggybacked ack errors: {errors:?}");
    }
    a.commit_sync().expect("final commit_sync A");
    assert_eq!(first.len(), 1000);
    assert_eq!(second.len(), 100);
    assert!(a.member_epoch() > 0);
    println!(
        "consumer A: 1000 records + 100 redeliveries in {polls} polls, {:.1} s",
        t1.elapsed().as_secs_f64()
    );

    // 4. Consumer B joins; A and B split 1000 new records between them.
    let t2 = Instant::now();
    let mut b = ShareConsumer::new(&bootstrap, &group);
    b.subscribe(&[&topic]).unwrap();
    let join_deadline = Instant::now() + Duration::from_secs(30);
    while b.assignment().is_empty() {
        assert!(Instant::now() < join_deadline, "B got no assignment");
        assert!(b.poll(Duration::from_millis(500)).unwrap().is_empty());
        assert!(a.poll(Duration::from_millis(100)).unwrap().is_empty());
    }
    println!(
        "consumer B assigned after {:.1} s",
        t2.elapsed().as_secs_f64()
    );
    let mut got: [BTreeMap<i64, i16>; 2] = [BTreeMap::new(), BTreeMap::new()];
    let mut next = 1000i64;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut turn = 0usize;
    while got[0].len() + got[1].len() < 1000 {
        assert!(
            Instant::now() < deadline,
            "phase 4 timed out: A {} B {}",
            got[0].len(),
            got[1].len()
        );
        if next < 2000 {
            let base = produce_range(&mut producer, &topic, next..next + 50);
            assert_eq!(base, next);
            next += 50;
        }
        let idx = turn % 2;
        let consumer = if idx == 0 { &mut a } else { &mut b };
        let records = consumer.poll(Duration::from_secs(1)).expect("poll");
        for r in &records {
            check_payload(r);
            assert!((1000..2000).contains(&r.offset));
            assert!(
                !got[0].contains_key(&r.offset) && !got[1].contains_key(&r.offset),
                "offset {} delivered twice (now to {})",
                r.offset,
                ["A", "B"][idx]
            );
            got[idx].insert(r.offset, r.delivery_count);
            consumer.acknowledge(r, AckType::Accept).unwrap();
        }
        consumer.commit_sync().expect("commit_sync");
        turn += 1;
    }
    let a_set: BTreeSet<i64> = got[0].keys().copied().collect();
    let b_set: BTreeSet<i64> = got[1].keys().copied().collect();
    assert!(a_set.is_disjoint(&b_set), "A and B overlap");
    let union: BTreeSet<i64> = a_set.union(&b_set).copied().collect();
    assert_eq!(union, (1000..2000).collect::<BTreeSet<i64>>());
    assert!(
        !a_set.is_empty() && !b_set.is_empty(),
        "A {} B {}",
        a_set.len(),
        b_set.len()
    );
    assert!(got.iter().flat_map(|g| g.values()).all(|&d| d == 1));
    println!(
        "A and B: {} + {} disjoint records in {turn} polls, {:.1} s",
        a_set.len(),
        b_set.len(),
        t2.elapsed().as_secs_f64()
    );

    // 5. Close both; a newcomer finds nothing left.
    a.close().expect("close A");
    b.close().expect("close B");
    let t3 = Instant::now();
    let mut c = ShareConsumer::new(&bootstrap, &group);
    c.subscribe(&[&topic]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.assignment().is_empty() {
        assert!(Instant::now() < deadline, "C got no assignment");
        let records = c.poll(Duration::from_millis(500)).unwrap();
        assert!(records.is_empty(), "C got {} records", records.len());
    }
    for _ in 0..3 {
        let records = c.poll(Duration::from_millis(700)).unwrap();
        assert!(records.is_empty(), "C got {:?}", records.first());
    }
    c.close().expect("close C");
    for (name, consumer) in [("A", &a), ("B", &b), ("C", &c)] {
        let stats = consumer.stats();
        println!("consumer {name}: {stats:?}");
        assert_eq!(stats.session_resets, 0, "{name}: a share session was reset");
    }
    // A sent acknowledgements both ways; 1100 acknowledged offsets in far fewer batches.
    let sa = a.stats();
    assert!(
        sa.piggybacked_ack_batches > 0 && sa.ack_batches > 0,
        "{sa:?}"
    );
    assert!(sa.piggybacked_ack_batches + sa.ack_batches < 1100, "{sa:?}");
    println!("consumer C empty, {:.1} s", t3.elapsed().as_secs_f64());
    println!("total {:.1} s", t0.elapsed().as_secs_f64());
}
