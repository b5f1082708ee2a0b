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
