//! The producer-transaction coordinator through the broker binary, with raw Kafka
//! requests: FindCoordinator key type 1, InitProducerId with a transactional id, fencing of a
//! first producer by a second one (CONCURRENT_TRANSACTIONS while the fenced transaction aborts,
//! then the bumped epoch; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH for the old one, by request
//! version), AddPartitionsToTxn (unknown topics refused), AddOffsetsToTxn, EndTxn,
//! DescribeTransactions, ListTransactions' filters, the transaction timeout (abort with an
//! epoch bump), INVALID_TRANSACTION_TIMEOUT, and SIGKILL + restart with a transaction in
//! PrepareCommit: it is still PrepareCommit (durable) and completes once its markers are
//! written.
//!
//! `LOCKSTEP_INTEROP_TARGET=kafka` runs the same requests against the Kafka 4.4 reference broker
//! (`LOCKSTEP_KAFKA_ADDR`, default 127.0.0.1:19092) with unique names, without the restart.
//!
//! Markers need the participants' side (WriteTxnMarkers on the partitions' shards). To see a
//! transaction complete without depending on it, its topic is deleted: a marker for a partition
//! that no longer exists is not needed, as in Kafka, so the coordinator completes the transaction.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::process::Lockstep;
use kafka_protocol::messages::{
    add_offsets_to_txn_request::AddOffsetsToTxnRequest,
    add_partitions_to_txn_request::{AddPartitionsToTxnRequest, AddPartitionsToTxnTopic},
    delete_topics_request::DeleteTopicState,
    AddPartitionsToTxnResponse, DeleteTopicsRequest, DescribeTransactionsRequest, EndTxnRequest,
    FindCoordinatorRequest, GroupId, InitProducerIdRequest, ListTransactionsRequest, TopicName,
    TransactionalId,
};
use kafka_protocol::messages::{produce_request, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::connection::Connection;
use lockstep::log::batch::BatchBuilder;

const CONCURRENT_TRANSACTIONS: i16 = 51;
const PRODUCER_FENCED: i16 = 90;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn tid(text: &str) -> TransactionalId {
    TransactionalId(s(text))
}

/// The broker under test: the binary, or Kafka 4.4's address.
struct Target {
    lockstep: Option<Lockstep>,
    addr: String,
    port: u16,
}

fn target() -> Target {
    if common::wire::kafka() {
        let addr = std::env::var("LOCKSTEP_KAFKA_ADDR").unwrap_or("127.0.0.1:19092".into());
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        return Target {
            lockstep: None,
            addr,
            port,
        };
    }
    let broker = Lockstep::start("lockstep-producer-txn-", 2, &[]);
    Target {
        addr: broker.addr(),
        port: broker.port,
        lockstep: Some(broker),
    }
}

fn connect(broker: &Target) -> Connection {
    Connection::connect(&broker.addr, "producer-txn-test").expect("connect")
}

/// InitProducerId v4: (error, producer id, epoch).
fn init(
    conn: &mut Connection,
    id: &str,
    timeout_ms: i32,
    current: Option<(i64, i16)>,
) -> (i16, i64, i16) {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = Some(tid(id));
    r.transaction_timeout_ms = timeout_ms;
    let (pid, epoch) = current.unwrap_or((-1, -1));
    r.producer_id = pid.into();
    r.producer_epoch = epoch;
    let back = conn.send(&r, 4).expect("InitProducerId");
    (
        back.error_code,
        i64::from(back.producer_id),
        back.producer_epoch,
    )
}

/// InitProducerId until it is no longer CONCURRENT_TRANSACTIONS (a fenced transaction
/// completing), as clients retry it.
fn init_retrying(
    conn: &mut Connection,
    id: &str,
    timeout_ms: i32,
    within: Duration,
) -> (i16, i64, i16) {
    let deadline = Instant::now() + within;
    loop {
        let got = init(conn, id, timeout_ms, None);
        if got.0 != CONCURRENT_TRANSACTIONS || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn add_partitions(
    conn: &mut Connection,
    version: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
    partitions: &[i32],
) -> Vec<i16> {
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = TopicName(s(topic));
    t.partitions = partitions.to_vec();
    let mut r = AddPartitionsToTxnRequest::default();
    r.v3_and_below_transactional_id = tid(id);
    r.v3_and_below_producer_id = pid.into();
    r.v3_and_below_producer_epoch = epoch;
    r.v3_and_below_topics = vec![t];
    let back: AddPartitionsToTxnResponse = conn.send(&r, version).expect("AddPartitionsToTxn");
    back.results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| {
            t.results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
        })
        .collect()
}

fn end_txn(
    conn: &mut Connection,
    version: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> i16 {
    let mut r = EndTxnRequest::default();
    r.transactional_id = tid(id);
    r.producer_id = pid.into();
    r.producer_epoch = epoch;
    r.committed = commit;
    conn.send(&r, version).expect("EndTxn").error_code
}

/// DescribeTransactions: (error, state, producer id, epoch, partitions as (topic, partition)).
fn describe(conn: &mut Connection, id: &str) -> (i16, String, i64, i16, Vec<(String, i32)>) {
    let mut r = DescribeTransactionsRequest::default();
    r.transactional_ids = vec![tid(id)];
    let back = conn.send(&r, 0).expect("DescribeTransactions");
    let t = &back.transaction_states[0];
    let partitions: Vec<(String, i32)> = t
        .topics
        .iter()
        .flat_map(|d| d.partitions.iter().map(move |p| (d.topic.to_string(), *p)))
        .collect();
    // Kafka lists a group's offsets partition (__consumer_offsets) among the participants;
    // this broker has no such topic and lists the partitions only.
    let mut partitions: Vec<(String, i32)> = partitions
        .into_iter()
        .filter(|(t, _)| t != "__consumer_offsets")
        .collect();
    partitions.sort();
    (
        t.error_code,
        t.transaction_state.to_string(),
        i64::from(t.producer_id),
        t.producer_epoch,
        partitions,
    )
}

fn wait_state(
    conn: &mut Connection,
    id: &str,
    state: &str,
    within: Duration,
) -> (i16, String, i64, i16, Vec<(String, i32)>) {
    let deadline = Instant::now() + within;
    loop {
        let got = describe(conn, id);
        if got.1 == state || Instant::now() > deadline {
            assert_eq!(got.1, state, "{id}: {got:?}");
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn list(conn: &mut Connection, states: &[&str], duration_ms: i64) -> (Vec<String>, Vec<String>) {
    let mut r = ListTransactionsRequest::default();
    r.state_filters = states.iter().map(|x| s(x)).collect();
    r.duration_filter = duration_ms;
    let back = conn.send(&r, 1).expect("ListTransactions");
    let mut ids: Vec<String> = back
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.to_string())
        .collect();
    ids.sort();
    (
        ids,
        back.unknown_state_filters
            .iter()
            .map(|x| x.to_string())
            .collect(),
    )
}

fn delete_topic(conn: &mut Connection, topic: &str) {
    let mut t = DeleteTopicState::default();
    t.name = Some(TopicName(s(topic)));
    let mut r = DeleteTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 30_000;
    let back = conn.send(&r, 6).expect("DeleteTopics");
    assert_eq!(back.responses[0].error_code, 0, "delete {topic}");
}

/// Creates `topics` (2 partitions each) and waits until every partition has a leader (Kafka
/// answers UNKNOWN_TOPIC_OR_PARTITION for a moment after creating a topic).
fn create(broker: &Target, topics: &[&str]) {
    let mut admin = Admin::connect(&broker.addr).expect("admin");
    let new: Vec<NewTopic> = topics.iter().map(|t| NewTopic::new(t, 2)).collect();
    admin.create_topics(&new).expect("create topics");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !topics.iter().all(|t| {
        let metadata = admin.metadata(Some(&[t])).expect("metadata");
        (0..2).all(|p| metadata.leader(t, p).is_some())
    }) {
        assert!(Instant::now() < deadline, "no leaders for {topics:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn fencing_timeouts_and_recovery_in_prepare_commit() {
    let mut broker = target();
    let n = |x: &str| common::wire::unique("pT", x);
    let (orders, payments, slow) = (n("orders"), n("payments"), n("slow"));
    let (app, slow_id, group) = (n("app"), n("slow-txn"), n("app-group"));
    let (orders, payments, slow, app, slow_id) = (&*orders, &*payments, &*slow, &*app, &*slow_id);
    create(&broker, &[orders, payments, slow]);
    let mut conn = connect(&broker);

    // FindCoordinator key type 1: this broker. A freshly started Kafka answers
    // COORDINATOR_NOT_AVAILABLE until its transaction log exists: retry while it answers so.
    let mut find = FindCoordinatorRequest::default();
    find.key_type = 1;
    find.coordinator_keys = vec![s(app)];
    let deadline = Instant::now() + Duration::from_secs(30);
    let back = loop {
        let back = conn.send(&find, 4).expect("FindCoordinator");
        if back.coordinators[0].error_code != COORDINATOR_NOT_AVAILABLE || Instant::now() > deadline
        {
            break back;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(back.coordinators[0].error_code, 0);
    assert_eq!(back.coordinators[0].port, i32::from(broker.port));
    // Kafka may still be loading the transaction log: retry while it answers so.
    let warmup = n("warmup");
    while init(&mut conn, &warmup, 60_000, None).0 != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }

    // Timeouts beyond transaction.max.timeout.ms are refused.
    assert_eq!(
        init(&mut conn, app, 900_001, None).0,
        INVALID_TRANSACTION_TIMEOUT
    );
    // Unknown ids.
    assert_eq!(describe(&mut conn, "nobody").0, TRANSACTIONAL_ID_NOT_FOUND);

    // The first producer begins a transaction.
    let (err, pid, epoch) = init(&mut conn, app, 60_000, None);
    assert_eq!((err, epoch), (0, 0));
    assert!(pid >= 0);
    assert_eq!(
        add_partitions(&mut conn, 3, app, pid, 0, orders, &[0, 1]),
        vec![0, 0]
    );
    assert_eq!(
        add_partitions(&mut conn, 3, app, pid, 0, "no-such-topic", &[0]),
        vec![UNKNOWN_TOPIC_OR_PARTITION]
    );
    let d = describe(&mut conn, app);
    assert_eq!((d.0, d.1.as_str(), d.2, d.3), (0, "Ongoing", pid, 0));
    assert_eq!(d.4, vec![(orders.to_string(), 0), (orders.to_string(), 1)]);
    assert!(list(&mut conn, &["Ongoing"], -1)
        .0
        .contains(&app.to_string()));
    assert_eq!(
        list(&mut conn, &["Ongoing", "Bogus"], -1).1,
        vec!["Bogus".to_string()]
    );
    assert!(
        !list(&mut conn, &[], 3_600_000).0.contains(&app.to_string()),
        "not running for an hour"
    );

    // A second instance with the same transactional id fences the first: the ongoing
    // transaction is aborted with the epoch bumped, and the new instance is told to retry.
    assert_eq!(
        init(&mut conn, app, 60_000, None).0,
        CONCURRENT_TRANSACTIONS
    );
    let d = describe(&mut conn, app);
    // (Kafka, whose participants answer at once, may have completed the abort already.)
    assert!(d.1 == "PrepareAbort" || d.1 == "CompleteAbort", "{d:?}");
    assert_eq!(d.3, 1, "the fence bumped the epoch");
    // Its markers complete once its partitions are written (or gone).
    delete_topic(&mut conn, orders);
    wait_state(&mut conn, app, "CompleteAbort", Duration::from_secs(10));
    let (err, pid2, epoch2) = init_retrying(&mut conn, app, 60_000, Duration::from_secs(10));
    assert_eq!((err, pid2, epoch2), (0, pid, 2));
    // The first instance is fenced: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH for old versions.
    assert_eq!(
        add_partitions(&mut conn, 3, app, pid, 0, payments, &[0]),
        vec![PRODUCER_FENCED]
    );
    assert_eq!(
        add_partitions(&mut conn, 1, app, pid, 0, payments, &[0]),
        vec![INVALID_PRODUCER_EPOCH]
    );
    assert_eq!(end_txn(&mut conn, 3, app, pid, 0, true), PRODUCER_FENCED);
    assert_eq!(
        end_txn(&mut conn, 1, app, pid, 0, true),
        INVALID_PRODUCER_EPOCH
    );
    // EndTxn with nothing in the transaction.
    assert_eq!(end_txn(&mut conn, 3, app, pid, 2, true), INVALID_TXN_STATE);

    // The second instance commits; the broker is SIGKILLed while the commit's markers are
    // outstanding (PrepareCommit is durable before EndTxn is answered).
    assert_eq!(
        add_partitions(&mut conn, 3, app, pid, 2, payments, &[1]),
        vec![0]
    );
    let mut offsets = AddOffsetsToTxnRequest::default();
    offsets.transactional_id = tid(app);
    offsets.producer_id = pid.into();
    offsets.producer_epoch = 2;
    offsets.group_id = GroupId(s(&group));
    assert_eq!(
        conn.send(&offsets, 3).expect("AddOffsetsToTxn").error_code,
        0
    );
    assert_eq!(end_txn(&mut conn, 3, app, pid, 2, true), 0);
    let d = describe(&mut conn, app);
    assert!(d.1 == "PrepareCommit" || d.1 == "CompleteCommit", "{d:?}");
    // While its markers are written, any EndTxn is told to retry; once complete, an abort is
    // refused (a retried commit succeeds).
    let code = end_txn(&mut conn, 3, app, pid, 2, false);
    let d = describe(&mut conn, app);
    if d.1 == "PrepareCommit" {
        assert_eq!(code, CONCURRENT_TRANSACTIONS);
    } else {
        assert!(
            code == INVALID_TXN_STATE || code == CONCURRENT_TRANSACTIONS,
            "{code}"
        );
    }
    if let Some(lockstep) = &mut broker.lockstep {
        drop(conn);
        lockstep.sigkill_and_restart();
        conn = connect(&broker);
    }
    let d = describe(&mut conn, app);
    assert_eq!(
        (d.2, d.3),
        (pid, 2),
        "producer id and epoch survive the restart"
    );
    if d.1 == "PrepareCommit" {
        assert_eq!(d.4, vec![(payments.to_string(), 1)]);
        // Recovery sends the commit markers again; the group's participant is required too.
        delete_topic(&mut conn, payments);
    }
    // It is CompleteCommit once the group's marker is written too, PrepareCommit until then.
    let d = describe(&mut conn, app);
    assert!(d.1 == "PrepareCommit" || d.1 == "CompleteCommit", "{d:?}");
    if d.1 == "CompleteCommit" {
        assert_eq!(
            end_txn(&mut conn, 3, app, pid, 2, true),
            0,
            "a retried commit succeeds"
        );
    } else {
        assert_eq!(
            end_txn(&mut conn, 3, app, pid, 2, true),
            CONCURRENT_TRANSACTIONS
        );
    }

    // The transaction timeout aborts with an epoch bump; the producer is fenced after it.
    let (err, spid, sepoch) = init(&mut conn, slow_id, 1_000, None);
    assert_eq!((err, sepoch), (0, 0));
    assert_eq!(
        add_partitions(&mut conn, 3, slow_id, spid, 0, slow, &[0]),
        vec![0]
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let d = loop {
        let d = describe(&mut conn, slow_id);
        if d.1 != "Ongoing" || Instant::now() > deadline {
            break d;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(d.1 == "PrepareAbort" || d.1 == "CompleteAbort", "{d:?}");
    assert_eq!(d.3, 1, "the timeout bumped the epoch");
    assert_eq!(
        end_txn(&mut conn, 3, slow_id, spid, 0, true),
        PRODUCER_FENCED
    );
    if let Some(lockstep) = &mut broker.lockstep {
        lockstep.assert_alive();
    }
}

/// Produce v9 of one transactional batch (`n` records from `seq`) of producer (pid, epoch) to
/// one partition, naming the transactional id: its error code.
fn produce_txn(
    conn: &mut Connection,
    id: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
    partition: i32,
    seq: i32,
) -> i16 {
    let mut b = BatchBuilder::new(1_000);
    b.attributes = 0x10;
    b.producer_id = pid;
    b.producer_epoch = epoch;
    b.base_sequence = seq;
    b.record(1_000, None, Some(b"v"));
    let mut p = produce_request::PartitionProduceData::default();
    p.index = partition;
    p.records = Some(Bytes::from(b.build()));
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(s(topic));
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.transactional_id = Some(tid(id));
    r.acks = -1;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    let resp = conn.send(&r, 9).expect("produce");
    resp.responses[0].partition_responses[0].error_code
}

/// InitProducerId for `id` (60 s timeout), retried while the coordinator is still loading (Kafka
/// answers COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR for a moment): (producer id, epoch).
fn init_ready(conn: &mut Connection, id: &str) -> (i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (err, pid, epoch) = init(conn, id, 60_000, None);
        if err == 0 {
            return (pid, epoch);
        }
        assert!(Instant::now() < deadline, "InitProducerId: error {err}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sends `requests` (Produce v9) on one new connection without waiting for answers, as a
/// producer with several requests in flight does; answers in request order.
fn pipelined_produce(addr: &str, requests: &[ProduceRequest]) -> Vec<ProduceResponse> {
    Connection::connect(addr, "pipelined")
        .expect("connect")
        .send_pipelined(requests, 9)
        .expect("pipelined produce")
}

/// KIP-890 part 1 with requests in flight together: the first batches of a producer's
/// transaction in a partition, sent in several requests without waiting, all need the
/// coordinator's verification; they must still be appended in sequence order. Lockstep handles
/// a connection's requests concurrently, and the first request also carries a batch for a
/// partition whose transaction is open, so it waits for that batch's flush before it asks the
/// coordinator: the later requests' batches are verified first, and must not overtake the first
/// one (which would then be refused as out of order for good).
#[test]
fn pipelined_first_batches_of_a_transaction_keep_their_order() {
    let mut broker = target();
    let n = |x: &str| common::wire::unique("pV", x);
    let (topic, id) = (n("pipelined"), n("pipelined-txn"));
    let (topic, id) = (&*topic, &*id);
    create(&broker, &[topic]);
    let mut conn = connect(&broker);
    let (pid, epoch) = init_ready(&mut conn, id);
    // The next sequence of each partition.
    let mut next = [0i32; 2];
    let mut batch = |partition: i32| {
        let mut b = BatchBuilder::new(1_000);
        b.attributes = 0x10;
        b.producer_id = pid;
        b.producer_epoch = epoch;
        b.base_sequence = next[partition as usize];
        next[partition as usize] += 1;
        b.record(1_000, None, Some(b"v"));
        let mut p = produce_request::PartitionProduceData::default();
        p.index = partition;
        p.records = Some(Bytes::from(b.build()));
        p
    };
    let request = |partitions: Vec<produce_request::PartitionProduceData>| {
        let mut t = produce_request::TopicProduceData::default();
        t.name = TopicName(s(topic));
        t.partition_data = partitions;
        let mut r = ProduceRequest::default();
        r.transactional_id = Some(tid(id));
        r.acks = -1;
        r.timeout_ms = 10_000;
        r.topic_data = vec![t];
        r
    };
    for round in 0..5 {
        assert_eq!(
            add_partitions(&mut conn, 3, id, pid, epoch, topic, &[0, 1]),
            vec![0, 0],
            "round {round}"
        );
        // Partition 1's transaction opens first. (Kafka may still be creating the new topic or
        // electing its leader: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER.)
        let open = [request(vec![batch(1)])];
        let deadline = Instant::now() + Duration::from_secs(10);
        let opened = loop {
            let code = pipelined_produce(&broker.addr, &open)[0].responses[0].partition_responses
                [0]
            .error_code;
            if !matches!(code, 3 | 6) || Instant::now() > deadline {
                break code;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(opened, 0, "round {round}");
        let mut requests = vec![request(vec![batch(0), batch(1)])];
        requests.extend((0..4).map(|_| request(vec![batch(0)])));
        let answers = pipelined_produce(&broker.addr, &requests);
        let offsets: Vec<(i16, i64)> = answers
            .iter()
            .map(|a| {
                let p = a.responses[0]
                    .partition_responses
                    .iter()
                    .find(|p| p.index == 0)
                    .expect("an answer for partition 0");
                (p.error_code, p.base_offset)
            })
            .collect();
        assert!(
            offsets.iter().all(|(code, _)| *code == 0)
                && offsets.windows(2).all(|w| w[0].1 < w[1].1),
            "round {round}: (error, base offset) of partition 0's batches in sequence order: {offsets:?}"
        );
        assert_eq!(end_txn(&mut conn, 3, id, pid, epoch, true), 0);
        wait_state(&mut conn, id, "CompleteCommit", Duration::from_secs(10));
    }
    if let Some(lockstep) = &mut broker.lockstep {
        lockstep.assert_alive();
    }
}

/// KIP-890 part 1, the server-side defence against hanging transactions: a transactional
/// batch is appended only to a partition its producer's ongoing transaction holds (the leader
/// asks the coordinator, AddPartitionsToTxn verifyOnly, before the first batch of a
/// transaction in a partition), so a late batch cannot open a transaction nobody will end.
#[test]
fn transactional_produce_is_verified_with_the_coordinator() {
    let mut broker = target();
    let n = |x: &str| common::wire::unique("pV", x);
    let (topic, id, other) = (n("verify"), n("verify-txn"), n("verify-other"));
    let (topic, id, other) = (&*topic, &*id, &*other);
    create(&broker, &[topic]);
    let mut conn = connect(&broker);
    let (pid, epoch) = init_ready(&mut conn, id);
    // The codes are Kafka 4.4's, measured on the reference broker.
    let mut produce = |id: &str, producer: (i64, i16), partition: i32, seq: i32| {
        produce_txn(&mut conn, id, producer, topic, partition, seq)
    };
    // Kafka may still be creating the new topic or electing its leader
    // (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER).
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        let code = produce(id, (pid, epoch), 0, 0);
        if !matches!(code, 3 | 6) || Instant::now() > deadline {
            break code;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(first, INVALID_TXN_STATE, "not added yet");
    let mut conn2 = connect(&broker);
    assert_eq!(
        add_partitions(&mut conn2, 3, id, pid, epoch, topic, &[0]),
        vec![0]
    );
    assert_eq!(produce(id, (pid, epoch), 0, 0), 0, "added");
    assert_eq!(
        produce(id, (pid, epoch), 0, 1),
        0,
        "the open transaction goes on"
    );
    assert_eq!(
        produce(id, (pid, epoch), 1, 0),
        INVALID_TXN_STATE,
        "another partition"
    );
    assert_eq!(
        produce(id, (pid, epoch - 1), 0, 2),
        INVALID_PRODUCER_EPOCH,
        "old epoch"
    );
    // Open here: no verification, so the request's transactional id is not looked at.
    assert_eq!(
        produce(other, (pid, epoch), 0, 2),
        0,
        "open: not verified again"
    );
    assert_eq!(
        produce(id, (4242, 0), 0, 0),
        INVALID_PRODUCER_ID_MAPPING,
        "made-up producer"
    );
    assert_eq!(end_txn(&mut conn2, 3, id, pid, epoch, false), 0);
    wait_state(&mut conn2, id, "CompleteAbort", Duration::from_secs(10));
    // A late batch after the abort (same epoch in transaction version 1) cannot open a
    // transaction nobody would end.
    assert_eq!(
        produce(id, (pid, epoch), 0, 3),
        INVALID_TXN_STATE,
        "after the abort"
    );
    drop(produce);
    if let Some(lockstep) = &mut broker.lockstep {
        lockstep.assert_alive();
    }
}
