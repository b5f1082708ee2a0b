//! Black-box tests of the `lockstep` binary over the raw Kafka protocol.
//!
//! Each test starts the built binary (`tests/common/process.rs`) on a free loopback port with a
//! temporary data directory and 2 shards, waits for its readiness line, and speaks Kafka with
//! the `kafka-protocol` crate
//! (requests encoded, responses decoded by the same crate real tools are built on). They prove:
//! - ApiVersions v0–4 answers, and an unsupported version gets the v0-format
//!   UNSUPPORTED_VERSION body with the supported keys;
//! - CreateTopics, Metadata (topic ids), Produce (acks=all), Fetch (by name and by topic id,
//!   byte-exact), ListOffsets work end to end across both shards;
//! - idempotent produce: duplicates answer the original offset, gaps are refused;
//! - malformed input (truncated, oversized, hostile array count, bad CRC) gets its defined
//!   outcome while other connections keep working; an unknown key or version is answered with
//!   UNSUPPORTED_VERSION and the connection kept;
//! - SIGTERM exits 0; SIGKILL + restart keeps every acknowledged batch and the topic ids, acks=1
//!   batches too (the write-behind tail answers acks=1 once its block write is durable).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use lockstep::log::batch::{self, BatchBuilder};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::process::Lockstep;

/// The broker under test (`tests/common/process.rs`): 2 shards in a temporary directory.
struct Broker(Lockstep);

impl std::ops::Deref for Broker {
    type Target = Lockstep;
    fn deref(&self) -> &Lockstep {
        &self.0
    }
}

impl std::ops::DerefMut for Broker {
    fn deref_mut(&mut self) -> &mut Lockstep {
        &mut self.0
    }
}

impl Broker {
    fn start() -> Broker {
        Broker(Lockstep::start("lockstep-protocol-", 2, &[]))
    }

    fn client(&self) -> Client {
        Client::connect(self.port)
    }
}

struct Client {
    stream: TcpStream,
    correlation: i32,
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

impl Client {
    fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            stream,
            correlation: 0,
        }
    }

    fn send_frame(&mut self, body: &[u8]) {
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(body);
        self.stream.write_all(&frame).unwrap();
    }

    /// The next response frame, or `None` if the broker closed the connection.
    fn read_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        if self.stream.read_exact(&mut size).is_err() {
            return None;
        }
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(Bytes::from(body))
    }

    fn header(&mut self, key: ApiKey, version: i16) -> BytesMut {
        self.correlation += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(sb("broker-protocol-test"));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, key.request_header_version(version))
            .unwrap();
        buf
    }

    fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Resp {
        let mut buf = self.header(key, version);
        request.encode(&mut buf, version).unwrap();
        self.send_frame(&buf);
        let mut frame = self.read_frame().expect("a response");
        let header =
            ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, self.correlation);
        Resp::decode(&mut frame, version).unwrap()
    }

    /// Sends a request and expects the broker to close the connection without answering.
    fn expect_closed(&mut self) {
        assert!(
            self.read_frame().is_none(),
            "expected the connection to be closed"
        );
    }

    fn api_versions_ok(&mut self) {
        let response: ApiVersionsResponse =
            self.call(ApiKey::ApiVersions, 3, &api_versions_request(3));
        assert_eq!(response.error_code, 0);
    }
}

fn api_versions_request(version: i16) -> ApiVersionsRequest {
    let mut r = ApiVersionsRequest::default();
    if version >= 3 {
        r.client_software_name = sb("lockstep-test");
        r.client_software_version = sb("1.0");
    }
    r
}

fn create_topic(client: &mut Client, name: &str, partitions: i32) -> uuid::Uuid {
    let mut topic = create_topics_request::CreatableTopic::default();
    topic.name = TopicName(sb(name));
    topic.num_partitions = partitions;
    topic.replication_factor = 1;
    let mut request = CreateTopicsRequest::default();
    request.topics = vec![topic];
    request.timeout_ms = 10_000;
    let response: CreateTopicsResponse = client.call(ApiKey::CreateTopics, 7, &request);
    assert_eq!(
        response.topics[0].error_code, 0,
        "{:?}",
        response.topics[0].error_message
    );
    assert_eq!(response.topics[0].num_partitions, partitions);
    assert!(!response.topics[0].topic_id.is_nil());
    response.topics[0].topic_id
}

fn make_batch(pid: i64, seq: i32, values: &[&str]) -> Vec<u8> {
    let mut b = BatchBuilder::new(1_700_000_000_000);
    b.producer_id = pid;
    b.producer_epoch = if pid >= 0 { 0 } else { -1 };
    b.base_sequence = seq;
    for v in values {
        b.record(1_700_000_000_000, Some(v.as_bytes()), Some(v.as_bytes()));
    }
    b.build()
}

/// Produces one batch (acks=all) and returns (error code, base offset).
fn produce(client: &mut Client, topic: &str, partition: i32, records: Vec<u8>) -> (i16, i64) {
    produce_acks(client, topic, partition, records, -1)
}

/// Produces one batch with `acks` (-1 or 1) and returns (error code, base offset).
fn produce_acks(
    client: &mut Client,
    topic: &str,
    partition: i32,
    records: Vec<u8>,
    acks: i16,
) -> (i16, i64) {
    let mut data = produce_request::PartitionProduceData::default();
    data.index = partition;
    data.records = Some(Bytes::from(records));
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(sb(topic));
    t.partition_data = vec![data];
    let mut request = ProduceRequest::default();
    request.acks = acks;
    request.timeout_ms = 10_000;
    request.topic_data = vec![t];
    let response: ProduceResponse = client.call(ApiKey::Produce, 9, &request);
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// Fetches from `offset` (by name with v12, by id with v13).
fn fetch(
    client: &mut Client,
    topic: &str,
    topic_id: uuid::Uuid,
    partition: i32,
    offset: i64,
    version: i16,
) -> fetch_response::PartitionData {
    let mut p = fetch_request::FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    if version >= 13 {
        t.topic_id = topic_id;
    } else {
        t.topic = TopicName(sb(topic));
    }
    t.partitions = vec![p];
    let mut request = FetchRequest::default();
    request.replica_id = (-1).into();
    request.max_wait_ms = 100;
    request.min_bytes = 1;
    request.max_bytes = 4 << 20;
    request.session_epoch = -1;
    request.topics = vec![t];
    let response: FetchResponse = client.call(ApiKey::Fetch, version, &request);
    assert_eq!(response.error_code, 0);
    response.responses[0].partitions[0].clone()
}

fn list_offset(client: &mut Client, topic: &str, partition: i32, timestamp: i64) -> (i16, i64) {
    let mut p = list_offsets_request::ListOffsetsPartition::default();
    p.partition_index = partition;
    p.timestamp = timestamp;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = TopicName(sb(topic));
    t.partitions = vec![p];
    let mut request = ListOffsetsRequest::default();
    request.replica_id = (-1).into();
    request.topics = vec![t];
    let response: ListOffsetsResponse = client.call(ApiKey::ListOffsets, 7, &request);
    let p = &response.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// The batches as the broker stores them: base offsets assigned consecutively from 0.
fn expected_log(batches: &[Vec<u8>]) -> Vec<u8> {
    let mut next = 0i64;
    let mut out = Vec::new();
    for b in batches {
        let mut stored = b.clone();
        batch::set_base_offset(&mut stored, next);
        next += batch::parse_header(b).unwrap().records_count as i64;
        out.extend_from_slice(&stored);
    }
    out
}

fn fetch_all(
    client: &mut Client,
    topic: &str,
    id: uuid::Uuid,
    partition: i32,
    version: i16,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let part = fetch(client, topic, id, partition, offset, version);
        assert_eq!(part.error_code, 0);
        let records = part.records.unwrap_or_default();
        if records.is_empty() {
            return out;
        }
        for b in batch::split_batches(&records).unwrap() {
            let h = batch::parse_header(b).unwrap();
            offset = h.base_offset + i64::from(h.last_offset_delta) + 1;
        }
        out.extend_from_slice(&records);
    }
}

#[test]
fn api_versions_every_version_and_unsupported_gets_the_v0_error_body() {
    let broker = Broker::start();
    let mut client = broker.client();
    for version in 0..=4 {
        let response: ApiVersionsResponse =
            client.call(ApiKey::ApiVersions, version, &api_versions_request(version));
        assert_eq!(response.error_code, 0, "v{version}");
        let produce = response.api_keys.iter().find(|k| k.api_key == 0).unwrap();
        assert_eq!((produce.min_version, produce.max_version), (3, 13));
        let fetch = response.api_keys.iter().find(|k| k.api_key == 1).unwrap();
        assert_eq!((fetch.min_version, fetch.max_version), (4, 18));
        assert!(
            response.api_keys.iter().all(|k| k.api_key != 71),
            "telemetry not advertised"
        );
    }
    // ApiVersions v127: header v2, body unknown; the answer is v0 with UNSUPPORTED_VERSION.
    let mut buf = client.header(ApiKey::ApiVersions, 127);
    buf.put_slice(&[0, 0, 0]);
    client.send_frame(&buf);
    let mut frame = client.read_frame().unwrap();
    assert_eq!(
        frame.get_i32(),
        client.correlation,
        "response header v0: correlation id only"
    );
    let response = ApiVersionsResponse::decode(&mut frame, 0).unwrap();
    assert!(!frame.has_remaining(), "exactly the v0 body");
    assert_eq!(response.error_code, 35);
    let av = response.api_keys.iter().find(|k| k.api_key == 18).unwrap();
    assert_eq!((av.min_version, av.max_version), (0, 4));
    client.api_versions_ok();
}

#[test]
fn create_produce_fetch_byte_exact_and_list_offsets_across_shards() {
    let broker = Broker::start();
    let mut client = broker.client();
    let id = create_topic(&mut client, "orders", 4);

    let mut metadata = MetadataRequest::default();
    let mut wanted = metadata_request::MetadataRequestTopic::default();
    wanted.name = Some(TopicName(sb("orders")));
    metadata.topics = Some(vec![wanted]);
    let response: MetadataResponse = client.call(ApiKey::Metadata, 12, &metadata);
    assert_eq!(response.topics[0].error_code, 0);
    assert_eq!(response.topics[0].topic_id, id);
    assert_eq!(response.topics[0].partitions.len(), 4);
    assert_eq!(response.brokers[0].port, i32::from(broker.port));

    let mut sent: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 4];
    for round in 0..3 {
        for partition in 0..4 {
            let values: Vec<String> = (0..=round)
                .map(|i| format!("p{partition}-r{round}-{i}"))
                .collect();
            let refs: Vec<&str> = values.iter().map(String::as_str).collect();
            let b = make_batch(-1, -1, &refs);
            let expected_base: i64 = sent[partition as usize]
                .iter()
                .map(|b| batch::parse_header(b).unwrap().records_count as i64)
                .sum();
            let (code, base) = produce(&mut client, "orders", partition, b.clone());
            assert_eq!((code, base), (0, expected_base));
            sent[partition as usize].push(b);
        }
    }
    for partition in 0..4 {
        let expected = expected_log(&sent[partition as usize]);
        assert_eq!(
            fetch_all(&mut client, "orders", id, partition, 12),
            expected
        );
        assert_eq!(
            fetch_all(&mut client, "orders", id, partition, 13),
            expected
        );
        assert_eq!(list_offset(&mut client, "orders", partition, -2), (0, 0));
        assert_eq!(list_offset(&mut client, "orders", partition, -1), (0, 6));
    }
    // Unknown topics and partitions.
    assert_eq!(
        produce(&mut client, "nope", 0, make_batch(-1, -1, &["x"])).0,
        3
    );
    assert_eq!(
        produce(&mut client, "orders", 9, make_batch(-1, -1, &["x"])).0,
        3
    );
    assert_eq!(
        fetch(&mut client, "orders", uuid::Uuid::from_u128(1), 0, 0, 13).error_code,
        100
    );
    assert_eq!(fetch(&mut client, "orders", id, 0, 99, 12).error_code, 1);
}

#[test]
fn idempotent_produce_answers_duplicates_and_refuses_gaps() {
    let broker = Broker::start();
    let mut client = broker.client();
    create_topic(&mut client, "idem", 2);
    let mut init = InitProducerIdRequest::default();
    init.transactional_id = None;
    init.transaction_timeout_ms = 60_000;
    init.producer_id = (-1).into();
    init.producer_epoch = -1;
    let response: InitProducerIdResponse = client.call(ApiKey::InitProducerId, 4, &init);
    assert_eq!(response.error_code, 0);
    let pid = response.producer_id.0;
    assert!(pid >= 0);
    let again: InitProducerIdResponse = client.call(ApiKey::InitProducerId, 4, &init);
    assert_ne!(again.producer_id.0, pid, "every producer gets its own id");

    assert_eq!(
        produce(&mut client, "idem", 1, make_batch(pid, 0, &["a", "b"])),
        (0, 0)
    );
    assert_eq!(
        produce(&mut client, "idem", 1, make_batch(pid, 2, &["c"])),
        (0, 2)
    );
    assert_eq!(
        produce(&mut client, "idem", 1, make_batch(pid, 0, &["a", "b"])),
        (0, 0),
        "duplicate"
    );
    assert_eq!(
        produce(&mut client, "idem", 1, make_batch(pid, 5, &["d"])).0,
        45,
        "gap"
    );
    assert_eq!(
        list_offset(&mut client, "idem", 1, -1),
        (0, 3),
        "nothing appended twice"
    );
}

#[test]
fn malformed_input_gets_its_defined_outcome_and_others_are_unaffected() {
    let broker = Broker::start();
    let mut bystander = broker.client();
    bystander.api_versions_ok();
    let mut client = broker.client();
    create_topic(&mut client, "m", 1);

    // Bad CRC: the batch is refused with CORRUPT_MESSAGE; nothing is appended.
    let mut bad = make_batch(-1, -1, &["x"]);
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    assert_eq!(produce(&mut client, "m", 0, bad).0, 2);
    // Two batches in one partition's records: INVALID_RECORD.
    let mut two = make_batch(-1, -1, &["x"]);
    two.extend(make_batch(-1, -1, &["y"]));
    assert_eq!(produce(&mut client, "m", 0, two).0, 87);
    assert_eq!(list_offset(&mut client, "m", 0, -1), (0, 0));

    // Unknown API key: UNSUPPORTED_VERSION (header v0 + one INT16), the connection kept
    // (Kafka 4.4 closes it; Lockstep answers).
    let mut c = broker.client();
    let mut body = BytesMut::new();
    body.put_i16(999);
    body.put_i16(0);
    body.put_i32(1);
    body.put_i16(-1);
    c.send_frame(&body);
    let answer = c.read_frame().expect("an answer to an unknown key");
    assert_eq!(&answer[..], &[0, 0, 0, 1, 0, 35]);
    c.api_versions_ok();

    // Unsupported version of a served API: answered at the nearest version (Metadata v13,
    // header v1: correlation id, tagged fields), ErrorCode 35; the connection kept.
    let mut c = broker.client();
    let buf = c.header(ApiKey::Metadata, 0);
    let mut raw = buf.to_vec();
    raw[2..4].copy_from_slice(&99i16.to_be_bytes());
    c.send_frame(&raw);
    let answer = c.read_frame().expect("an answer to Metadata v99");
    let mut body = answer.slice(5..);
    let decoded = MetadataResponse::decode(&mut body, 13).unwrap();
    assert_eq!(decoded.error_code, 35);
    c.api_versions_ok();

    // Oversized frame: closed before the body is read.
    let mut c = broker.client();
    c.stream
        .write_all(&(200 * 1024 * 1024i32).to_be_bytes())
        .unwrap();
    c.expect_closed();

    // Negative size prefix: closed.
    let mut c = broker.client();
    c.stream.write_all(&(-7i32).to_be_bytes()).unwrap();
    c.expect_closed();

    // Header shorter than api key + version + correlation id: closed.
    let mut c = broker.client();
    c.send_frame(&[0, 3, 0]);
    c.expect_closed();

    // A hostile array count (2^31-1 topics in a tiny Metadata v1 body): closed, no allocation.
    let mut c = broker.client();
    let mut buf = c.header(ApiKey::Metadata, 1);
    buf.put_i32(i32::MAX);
    c.send_frame(&buf);
    c.expect_closed();

    // Truncated frame: the prefix promises more than is sent, then the client goes away.
    let mut c = broker.client();
    c.stream.write_all(&100i32.to_be_bytes()).unwrap();
    c.stream.write_all(&[0, 18, 0, 3]).unwrap();
    drop(c);

    // Everyone else is fine.
    bystander.api_versions_ok();
    assert_eq!(
        produce(&mut client, "m", 0, make_batch(-1, -1, &["ok"])),
        (0, 0)
    );
}

#[test]
fn acks_zero_gets_no_response_and_later_requests_keep_their_order() {
    let broker = Broker::start();
    let mut client = broker.client();
    create_topic(&mut client, "fire", 1);
    let mut data = produce_request::PartitionProduceData::default();
    data.index = 0;
    data.records = Some(Bytes::from(make_batch(-1, -1, &["a"])));
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(sb("fire"));
    t.partition_data = vec![data];
    let mut request = ProduceRequest::default();
    request.acks = 0;
    request.timeout_ms = 1000;
    request.topic_data = vec![t];
    let mut buf = client.header(ApiKey::Produce, 9);
    request.encode(&mut buf, 9).unwrap();
    client.send_frame(&buf);
    // The next response on the connection answers the next request (no produce response).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, end) = list_offset(&mut client, "fire", 0, -1);
        assert_eq!(code, 0);
        if end == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the acks=0 batch becomes visible"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn fetch_long_polls_until_data_arrives() {
    let broker = Broker::start();
    let mut client = broker.client();
    let id = create_topic(&mut client, "poll", 2);
    let port = broker.port;
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let mut other = Client::connect(port);
        assert_eq!(
            produce(&mut other, "poll", 1, make_batch(-1, -1, &["late"])),
            (0, 0)
        );
    });
    // Fetch both partitions with a 10 s wait: it returns once the record is durable.
    let mut request = FetchRequest::default();
    request.replica_id = (-1).into();
    request.max_wait_ms = 10_000;
    request.min_bytes = 1;
    request.max_bytes = 1 << 20;
    request.session_epoch = -1;
    let mut t = fetch_request::FetchTopic::default();
    t.topic_id = id;
    t.partitions = (0..2)
        .map(|partition| {
            let mut p = fetch_request::FetchPartition::default();
            p.partition = partition;
            p.partition_max_bytes = 1 << 20;
            p
        })
        .collect();
    request.topics = vec![t];
    let started = Instant::now();
    let response: FetchResponse = client.call(ApiKey::Fetch, 16, &request);
    let waited = started.elapsed();
    producer.join().unwrap();
    assert!(
        waited >= Duration::from_millis(250),
        "it waited for data: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "it did not wait for the deadline: {waited:?}"
    );
    let parts = &response.responses[0].partitions;
    assert!(parts[0].records.as_ref().is_none_or(|r| r.is_empty()));
    assert_eq!(parts[1].high_watermark, 1);
    assert!(!parts[1].records.as_ref().unwrap().is_empty());
    // With nothing to come, the fetch returns at its deadline with no records.
    request.max_wait_ms = 200;
    request.topics[0].partitions[1].fetch_offset = 1;
    let started = Instant::now();
    let response: FetchResponse = client.call(ApiKey::Fetch, 16, &request);
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert!(response.responses[0].partitions[1]
        .records
        .as_ref()
        .is_none_or(|r| r.is_empty()));
}

#[test]
fn admin_apis_configs_delete_and_coordinator() {
    let broker = Broker::start();
    let mut client = broker.client();
    let first_id = create_topic(&mut client, "cfg", 3);

    // Alter a topic config, then describe it.
    let mut change = incremental_alter_configs_request::AlterableConfig::default();
    change.name = sb("retention.ms");
    change.config_operation = 0;
    change.value = Some(sb("3600000"));
    let mut resource = incremental_alter_configs_request::AlterConfigsResource::default();
    resource.resource_type = 2;
    resource.resource_name = sb("cfg");
    resource.configs = vec![change];
    let mut alter = IncrementalAlterConfigsRequest::default();
    alter.resources = vec![resource];
    let altered: IncrementalAlterConfigsResponse =
        client.call(ApiKey::IncrementalAlterConfigs, 1, &alter);
    assert_eq!(altered.responses[0].error_code, 0);
    alter.resources[0].configs[0].name = sb("no.such.config");
    let refused: IncrementalAlterConfigsResponse =
        client.call(ApiKey::IncrementalAlterConfigs, 1, &alter);
    assert_eq!(refused.responses[0].error_code, 40);

    let mut describe = DescribeConfigsRequest::default();
    let mut res = describe_configs_request::DescribeConfigsResource::default();
    res.resource_type = 2;
    res.resource_name = sb("cfg");
    res.configuration_keys = Some(vec![sb("retention.ms")]);
    let mut broker_res = describe_configs_request::DescribeConfigsResource::default();
    broker_res.resource_type = 4;
    broker_res.resource_name = sb("0");
    broker_res.configuration_keys = None;
    describe.resources = vec![res, broker_res];
    let described: DescribeConfigsResponse = client.call(ApiKey::DescribeConfigs, 4, &describe);
    assert_eq!(described.results[0].error_code, 0);
    assert_eq!(
        described.results[0].configs[0].value.as_deref(),
        Some("3600000")
    );
    assert_eq!(described.results[0].configs[0].config_source, 1);
    assert!(described.results[1]
        .configs
        .iter()
        .any(|c| c.name.as_str() == "auto.create.topics.enable"
            && c.value.as_deref() == Some("false")));

    // FindCoordinator (batched, v4+): this broker, at the address the client used.
    let mut find = FindCoordinatorRequest::default();
    find.key_type = 0;
    find.coordinator_keys = vec![sb("group-a"), sb("group-b")];
    let found: FindCoordinatorResponse = client.call(ApiKey::FindCoordinator, 4, &find);
    assert_eq!(found.coordinators.len(), 2);
    assert!(found
        .coordinators
        .iter()
        .all(|c| c.error_code == 0 && c.port == i32::from(broker.port)));

    // Delete, then the topic is unknown; re-created, it gets a new id and an empty log.
    let mut delete = DeleteTopicsRequest::default();
    let mut state = delete_topics_request::DeleteTopicState::default();
    state.name = None;
    state.topic_id = first_id;
    delete.topics = vec![state];
    delete.timeout_ms = 10_000;
    let deleted: DeleteTopicsResponse = client.call(ApiKey::DeleteTopics, 6, &delete);
    assert_eq!(deleted.responses[0].error_code, 0);
    assert_eq!(
        deleted.responses[0].name.as_deref().map(|n| n.as_str()),
        Some("cfg")
    );
    assert_eq!(
        produce(&mut client, "cfg", 0, make_batch(-1, -1, &["x"])).0,
        3
    );
    let second_id = create_topic(&mut client, "cfg", 1);
    assert_ne!(first_id, second_id);
    assert_eq!(list_offset(&mut client, "cfg", 0, -1), (0, 0));
}

#[test]
fn sigterm_exits_zero() {
    let mut broker = Broker::start();
    let mut client = broker.client();
    client.api_versions_ok();
    broker.signal(libc::SIGTERM);
    let status = broker
        .wait_exit(Duration::from_secs(20))
        .expect("the broker exits after SIGTERM");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn sigkill_and_restart_keep_acknowledged_data_and_topic_ids() {
    let broker = Broker::start();
    let port = broker.port;
    let mut client = broker.client();
    let id = create_topic(&mut client, "durable", 4);
    let mut sent: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 4];
    for i in 0..40 {
        let partition = i % 4;
        let b = make_batch(-1, -1, &[&format!("record-{i}"), &format!("more-{i}")]);
        assert_eq!(produce(&mut client, "durable", partition, b.clone()).0, 0);
        sent[partition as usize].push(b);
    }
    drop(client);
    let mut broker = broker;
    broker.kill();
    broker.spawn(&[]);
    assert_eq!(broker.port, port);
    let dir_path = broker.data_dir();
    let mut client = broker.client();
    let response: MetadataResponse = client.call(ApiKey::Metadata, 12, &{
        let mut m = MetadataRequest::default();
        m.topics = None;
        m
    });
    assert_eq!(response.topics.len(), 1);
    assert_eq!(
        response.topics[0].topic_id, id,
        "topic ids survive restarts"
    );
    for partition in 0..4 {
        assert_eq!(
            fetch_all(&mut client, "durable", id, partition, 13),
            expected_log(&sent[partition as usize]),
            "partition {partition}"
        );
    }
    // The data directory is locked: a second broker on it refuses to start.
    let second = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "--listen",
            &format!("127.0.0.1:{}", common::free_port()),
            "--data-dir",
        ])
        .arg(&dir_path)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert!(!second.status.success());
}

#[test]
fn sigkill_right_after_acks_one_produce_keeps_the_batches() {
    // Kafka answers acks=1 once the leader appended (its page cache survives a process kill);
    // Lockstep writes its tail behind, so acks=1 waits for the block write that covers it. The
    // broker is killed at once after the last answer: every answered batch must be there.
    let mut broker = Broker::start();
    let mut client = broker.client();
    let id = create_topic(&mut client, "acks-one", 2);
    let mut sent: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 2];
    for i in 0..60 {
        let partition = i % 2;
        let b = make_batch(-1, -1, &[&format!("acks1-{i}"), &"x".repeat(3000)]);
        assert_eq!(
            produce_acks(&mut client, "acks-one", partition, b.clone(), 1).0,
            0
        );
        sent[partition as usize].push(b);
    }
    broker.kill();
    drop(client);
    broker.spawn(&[]);
    let mut client = broker.client();
    for partition in 0..2 {
        let got = fetch_all(&mut client, "acks-one", id, partition, 13);
        let want = expected_log(&sent[partition as usize]);
        assert!(
            got == want,
            "partition {partition}: {} bytes after the restart, {} answered",
            got.len(),
            want.len()
        );
    }
}
