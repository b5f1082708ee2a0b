//! The admin APIs DeleteGroups, CreatePartitions and DeleteRecords through Apache Kafka 4.4's
//! own tools against a broker started here: `kafka-share-groups --delete` refuses a share
//! group with a member and deletes an empty one (its offsets go too; an unknown group is
//! reported as such); `kafka-topics --alter --partitions` grows a topic while a share consumer
//! holds the group, and the member is assigned the new partitions at its next heartbeats; a
//! count that does not grow the topic is refused with Kafka's message; `kafka-delete-records`
//! moves a partition's log start (offset -1: to the high watermark; past it:
//! OFFSET_OUT_OF_RANGE) and the share group's start offset follows; everything survives a
//! broker SIGKILL and restart.
//!
//! How: as `tests/share_admin_tool.rs` (a `lockstep` broker with `--shards 2` on a free
//! loopback port, records from `tests/clients/python/share_consume.py --scenario produce`, a
//! consumer held in the group by `tests/clients/python/share_hold.py`), and the tool classes
//! `TopicCommand`, `DeleteRecordsCommand`, `GetOffsetShell` and `ShareGroupCommand` run by
//! `tools/kafka-reference.sh class`. Each DeleteRecords call names one partition: the tool's
//! output for several is printed racily (also against Kafka).
//!
//! With `LOCKSTEP_INTEROP_TARGET=kafka` the same test runs against Kafka 4.4 (the expectations
//! were checked there), except the restart and the share group's start offset after
//! DeleteRecords: Kafka moves it when the share partition is next loaded (its describe shows
//! the persisted start until then), Lockstep at once.
//!
//! Needs `tools/install-test-deps.sh`; when a dependency is missing the test fails and says
//! how to install it.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;

const GROUP: &str = "admin-apis-group";
const TOPIC: &str = "admin-apis-topic";

fn topics(port: u16, args: &[&str]) -> String {
    kafka_tool("org.apache.kafka.tools.TopicCommand", port, args)
}

/// `kafka-delete-records` for one partition.
fn delete_records(port: u16, partition: i32, offset: i64) -> String {
    let file = tempfile::NamedTempFile::new().expect("temporary file");
    std::fs::write(
        file.path(),
        format!(
            r#"{{"partitions":[{{"topic":"{TOPIC}","partition":{partition},"offset":{offset}}}],"version":1}}"#
        ),
    )
    .expect("write the offsets file");
    let path = file.path().to_str().expect("utf-8 path").to_string();
    kafka_tool(
        "org.apache.kafka.tools.DeleteRecordsCommand",
        port,
        &["--offset-json-file", &path],
    )
}

/// Each partition's earliest offset (`kafka-get-offsets --time -2`), by partition.
fn earliest_offsets(port: u16) -> Vec<(i32, i64)> {
    let out = kafka_tool(
        "org.apache.kafka.tools.GetOffsetShell",
        port,
        &["--topic", TOPIC, "--time", "-2"],
    );
    let mut found: Vec<(i32, i64)> = out
        .lines()
        .filter_map(|l| {
            let mut parts = l.trim().rsplitn(3, ':');
            let offset = parts.next()?.parse().ok()?;
            let partition = parts.next()?.parse().ok()?;
            (parts.next()? == TOPIC).then_some((partition, offset))
        })
        .collect();
    found.sort();
    found
}

/// Polls `--describe --members` until the group's one member is assigned `assignment`.
fn wait_for_assignment(port: u16, count: &str, assignment: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = tool(port, &["--describe", "--group", GROUP, "--members"]);
        // GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT
        if rows(&out)
            .iter()
            .any(|r| r.len() == 6 && r[0] == GROUP && r[4] == count && r[5] == assignment)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the member was not assigned {assignment} within 60 s:\n{out}"
        );
        thread::sleep(Duration::from_millis(500));
    }
}

fn produce(port: u16, partitions: &str, count: &str) {
    let bootstrap = format!("127.0.0.1:{port}");
    let produced = python("share_consume.py")
        .args([
            "--bootstrap",
            &bootstrap,
            "--topic",
            TOPIC,
            "--group",
            GROUP,
        ])
        .args([
            "--scenario",
            "produce",
            "--partitions",
            partitions,
            "--count",
            count,
        ])
        .status()
        .expect("run share_consume.py");
    assert!(produced.success(), "producing the records failed");
}

#[test]
fn kafka_tools_delete_groups_create_partitions_and_delete_records() {
    check_deps();
    let kafka = std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() == Ok("kafka");
    let broker = start_broker("lockstep-admin-apis-");
    let port = broker.port;
    produce(port, "2", "100");

    // Unknown group: the tool finds no share group of that name.
    let out = tool(port, &["--delete", "--group", "no-such-group"]);
    assert!(
        out.contains("Group 'no-such-group' could not be deleted due to: org.apache.kafka.common.errors.GroupIdNotFoundException"),
        "{out}"
    );

    // A member holds the group: it cannot be deleted.
    let holder = Holder::start(port, TOPIC, GROUP);
    let out = tool(port, &["--delete", "--group", GROUP]);
    assert!(
        out.contains(&format!("Group '{GROUP}' could not be deleted due to: org.apache.kafka.common.errors.GroupNotEmptyException")),
        "{out}"
    );

    // The topic grows while the member holds the group: it gets the new partitions.
    wait_for_assignment(port, "2", &format!("{TOPIC}:0,1"));
    let out = topics(port, &["--alter", "--topic", TOPIC, "--partitions", "4"]);
    assert!(!out.contains("Error"), "{out}");
    let out = topics(port, &["--describe", "--topic", TOPIC]);
    assert!(out.contains("PartitionCount: 4"), "{out}");
    wait_for_assignment(port, "4", &format!("{TOPIC}:0,1,2,3"));
    let out = topics(port, &["--alter", "--topic", TOPIC, "--partitions", "3"]);
    assert!(
        out.contains(&format!("InvalidPartitionsException: The topic {TOPIC} currently has 4 partition(s); 3 would not be an increase.")),
        "{out}"
    );
    let out = topics(port, &["--alter", "--topic", TOPIC, "--partitions", "4"]);
    assert!(
        out.contains("InvalidPartitionsException: Topic already has 4 partition(s)."),
        "{out}"
    );
    let out = topics(
        port,
        &["--alter", "--topic", "no-such-topic", "--partitions", "4"],
    );
    assert!(
        out.contains("Topic 'no-such-topic' does not exist"),
        "{out}"
    );
    holder.release();
    wait_for_state(port, GROUP, "Empty");

    // Records in the new partitions (10 each in 2 and 3), then DeleteRecords.
    produce(port, "4", "40");
    let out = delete_records(port, 0, 10);
    assert!(
        out.contains(&format!("partition: {TOPIC}-0\tlow_watermark: 10")),
        "{out}"
    );
    let out = delete_records(port, 1, -1);
    assert!(
        out.contains(&format!("partition: {TOPIC}-1\tlow_watermark: 60")),
        "{out}"
    );
    let out = delete_records(port, 2, 6);
    assert!(
        out.contains(&format!("partition: {TOPIC}-2\tlow_watermark: 6")),
        "{out}"
    );
    let out = delete_records(port, 3, 11);
    assert!(
        out.contains(&format!(
            "partition: {TOPIC}-3\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException"
        )),
        "{out}"
    );
    // Below the log start: nothing changes.
    let out = delete_records(port, 0, 5);
    assert!(
        out.contains(&format!("partition: {TOPIC}-0\tlow_watermark: 10")),
        "{out}"
    );
    assert_eq!(
        earliest_offsets(port),
        vec![(0, 10), (1, 60), (2, 6), (3, 0)]
    );
    if !kafka {
        // The share group's start offset followed the log start of partition 2 (it was 0:
        // the member was assigned the partition while it was empty).
        let out = tool(port, &["--describe", "--group", GROUP]);
        let r = row(&out, &[GROUP, TOPIC, "2"]);
        assert_eq!(r[3], "6", "{out}");
    }

    // The empty group is deleted, offsets and all.
    let out = tool(port, &["--delete", "--group", GROUP]);
    assert!(
        out.contains(&format!(
            "Deletion of requested share groups ('{GROUP}') was successful."
        )),
        "{out}"
    );
    let out = tool(port, &["--describe", "--group", GROUP]);
    assert!(out.contains(&format!("Group {GROUP} not found.")), "{out}");
    let out = tool(port, &["--list"]);
    assert!(!rows(&out).iter().any(|r| r[0] == GROUP), "{out}");
    if kafka {
        return;
    }

    // All of it is durable.
    let broker = restart(broker);
    let port = broker.port;
    assert_eq!(
        earliest_offsets(port),
        vec![(0, 10), (1, 60), (2, 6), (3, 0)]
    );
    let out = topics(port, &["--describe", "--topic", TOPIC]);
    assert!(out.contains("PartitionCount: 4"), "{out}");
    let out = tool(port, &["--describe", "--group", GROUP]);
    assert!(out.contains(&format!("Group {GROUP} not found.")), "{out}");
}

// ------------------------------------------------------------------------------------------------
// DescribeCluster, DescribeProducers, OffsetForLeaderEpoch, FindCoordinator.

const CLUSTER_TOPIC: &str = "admin-cluster-topic";

/// `kafka-console-producer` (Java, idempotent by default) writes `lines` to `topic`.
fn console_produce(port: u16, topic: &str, lines: &[&str]) {
    let mut cmd =
        std::process::Command::new(std::path::Path::new(ROOT).join("tools/kafka-reference.sh"));
    let mut child = die_with_parent(&mut cmd)
        .args(["class", "org.apache.kafka.tools.ConsoleProducer"])
        .arg("--bootstrap-server")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--topic", topic])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the console producer");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped stdin");
        for line in lines {
            writeln!(stdin, "{line}").expect("write a record");
        }
    }
    assert!(child.wait().expect("console producer").success());
}

/// `kafka-transactions describe-producers` of one partition: its rows
/// (ProducerId, ProducerEpoch, LatestCoordinatorEpoch, LastSequence, LastTimestamp,
/// CurrentTransactionStartOffset).
fn describe_producers(port: u16, topic: &str, partition: i32) -> Vec<Vec<String>> {
    let out = kafka_tool(
        "org.apache.kafka.tools.TransactionsCommand",
        port,
        &[
            "describe-producers",
            "--topic",
            topic,
            "--partition",
            &partition.to_string(),
        ],
    );
    let all = rows(&out);
    let header = all
        .iter()
        .position(|r| r.first().map(String::as_str) == Some("ProducerId"))
        .unwrap_or_else(|| panic!("no producer table:\n{out}"));
    all[header + 1..].to_vec()
}

/// `kafka-cluster SUBCOMMAND --bootstrap-server` (the option belongs to the subcommand).
fn cluster_tool(port: u16, subcommand: &str) -> String {
    let mut cmd =
        std::process::Command::new(std::path::Path::new(ROOT).join("tools/kafka-reference.sh"));
    let out = die_with_parent(&mut cmd)
        .args(["class", "org.apache.kafka.tools.ClusterTool", subcommand])
        .arg("--bootstrap-server")
        .arg(format!("127.0.0.1:{port}"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run ClusterTool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("$ ClusterTool {subcommand}\n{text}");
    text
}

/// OffsetForLeaderEpoch v4 (as a consumer, replica id -1): `(partition, current leader epoch,
/// leader epoch)` of `topic` → `(partition, error code, leader epoch, end offset)`.
fn offset_for_leader_epoch(
    port: u16,
    topic: &str,
    partitions: &[(i32, i32, i32)],
) -> Vec<(i32, i16, i32, i64)> {
    use kafka_protocol::messages::{
        offset_for_leader_epoch_request as m, OffsetForLeaderEpochRequest, TopicName,
    };
    let mut conn = lockstep::client::connection::Connection::connect(
        &format!("127.0.0.1:{port}"),
        "admin-tools",
    )
    .expect("connect");
    let mut t = m::OffsetForLeaderTopic::default();
    t.topic = TopicName(topic.to_string().into());
    t.partitions = partitions
        .iter()
        .map(|&(partition, current, epoch)| {
            let mut p = m::OffsetForLeaderPartition::default();
            p.partition = partition;
            p.current_leader_epoch = current;
            p.leader_epoch = epoch;
            p
        })
        .collect();
    let mut request = OffsetForLeaderEpochRequest::default();
    request.replica_id = (-1).into();
    request.topics = vec![t];
    let response = conn.send(&request, 4).expect("OffsetForLeaderEpoch v4");
    response.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition, p.error_code, p.leader_epoch, p.end_offset))
        .collect()
}

/// FindCoordinator v4 of `keys` with `key_type` → (error code, whether a node is named) per key,
/// retried while COORDINATOR_NOT_AVAILABLE (a fresh Kafka creates `__consumer_offsets` first).
fn find_coordinator(port: u16, key_type: i8, keys: &[&str]) -> Vec<(i16, bool)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = find_coordinator_once(port, key_type, keys);
        if !answer.iter().any(|(code, _)| *code == 15) || Instant::now() > deadline {
            return answer;
        }
        thread::sleep(Duration::from_millis(500));
    }
}

fn find_coordinator_once(port: u16, key_type: i8, keys: &[&str]) -> Vec<(i16, bool)> {
    use kafka_protocol::messages::FindCoordinatorRequest;
    let mut conn = lockstep::client::connection::Connection::connect(
        &format!("127.0.0.1:{port}"),
        "admin-tools",
    )
    .expect("connect");
    let mut request = FindCoordinatorRequest::default();
    request.key_type = key_type;
    request.coordinator_keys = keys.iter().map(|k| k.to_string().into()).collect();
    let response = conn.send(&request, 4).expect("FindCoordinator v4");
    response
        .coordinators
        .iter()
        .map(|c| (c.error_code, c.node_id.0 >= 0))
        .collect()
}

#[test]
fn kafka_tools_describe_cluster_producers_and_leader_epochs() {
    check_deps();
    let kafka = std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() == Ok("kafka");
    let broker = start_broker("lockstep-admin-cluster-");
    let port = broker.port;

    // The versions Kafka 4.4 serves, advertised.
    let out = kafka_tool("org.apache.kafka.tools.BrokerApiVersionsCommand", port, &[]);
    for served in [
        "OffsetForLeaderEpoch(23): 2 to 4 [usable: 4]",
        "DescribeCluster(60): 0 to 2 [usable: 2]",
        "DescribeProducers(61): 0 [usable: 0]",
        "FindCoordinator(10): 0 to 6 [usable: 6]",
    ] {
        assert!(out.contains(served), "{served}:\n{out}");
    }

    // DescribeCluster through the Admin client (kafka-cluster).
    let out = cluster_tool(port, "cluster-id");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("Cluster ID: "))
        .unwrap_or_else(|| panic!("no cluster id:\n{out}"));
    assert!(!id.trim().is_empty(), "{out}");
    let out = cluster_tool(port, "list-endpoints");
    let port_text = port.to_string();
    assert!(
        rows(&out).iter().any(|r| r.len() == 6
            && r[1] == "127.0.0.1"
            && r[2] == port_text
            && r[3] == "null"
            && r[4] == "unfenced"
            && r[5] == "broker"),
        "{out}"
    );

    // An idempotent producer's state (kafka-transactions describe-producers).
    let out = topics(
        port,
        &["--create", "--topic", CLUSTER_TOPIC, "--partitions", "2"],
    );
    assert!(out.contains("Created topic"), "{out}");
    assert!(describe_producers(port, CLUSTER_TOPIC, 0).is_empty());
    console_produce(port, CLUSTER_TOPIC, &["a", "b", "c"]);
    let found: Vec<_> = (0..2)
        .map(|p| (p, describe_producers(port, CLUSTER_TOPIC, p)))
        .filter(|(_, r)| !r.is_empty())
        .collect();
    assert_eq!(found.len(), 1, "one partition got the records: {found:?}");
    let (written, producers) = found.into_iter().next().unwrap();
    assert_eq!(producers.len(), 1, "{producers:?}");
    let p = &producers[0];
    assert!(p[0].parse::<i64>().unwrap() >= 0, "{p:?}");
    assert_eq!(&p[1..4], ["0", "-1", "2"], "{p:?}");
    let last_timestamp: i64 = p[4].parse().unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        (now_ms - 600_000..=now_ms).contains(&last_timestamp),
        "{p:?}"
    );
    assert_eq!(p[5], "None", "{p:?}");

    // OffsetForLeaderEpoch, as Kafka 4.4 answers it.
    let other = 1 - written;
    assert_eq!(
        offset_for_leader_epoch(
            port,
            CLUSTER_TOPIC,
            &[
                (written, -1, 0),
                (other, 0, 0),
                (written, -1, 5),
                (written, 3, 0),
                (written, -5, 0),
                (9, -1, 0)
            ]
        ),
        vec![
            (written, 0, 0, 3),
            (other, 0, 0, 0),
            (written, 0, -1, -1),
            (written, 75, -1, -1),
            (written, 74, -1, -1),
            (9, 3, -1, -1),
        ]
    );
    assert_eq!(
        offset_for_leader_epoch(port, "admin-no-such-topic", &[(0, -1, 0)]),
        vec![(0, 3, -1, -1)]
    );

    // FindCoordinator: every group id (the empty one too) is coordinated by the broker;
    // an unknown key type is INVALID_REQUEST.
    assert_eq!(
        find_coordinator(port, 0, &["g1", ""]),
        vec![(0, true), (0, true)]
    );
    assert_eq!(find_coordinator(port, 5, &["x"]), vec![(42, false)]);
    // Transactional ids are coordinated by the broker too.
    assert_eq!(find_coordinator(port, 1, &["t1"]), vec![(0, true)]);
    if kafka {
        return;
    }

    // Producer state is rebuilt from the log after a SIGKILL.
    let broker = restart(broker);
    let port = broker.port;
    assert_eq!(
        describe_producers(port, CLUSTER_TOPIC, written),
        vec![p.clone()]
    );
}
