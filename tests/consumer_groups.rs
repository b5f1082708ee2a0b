//! Consumer groups with real clients and Kafka 4.4's own tools, against a `lockstep`
//! started here (`--shards 2`), or against Kafka 4.4 with `LOCKSTEP_INTEROP_TARGET=kafka`.
//!
//! What it proves:
//! - a librdkafka consumer group (confluent-kafka, `tests/clients/python/group_rebalance.py`)
//!   rebalances as members join and leave (4 partitions: 4, then 2 + 2, then 4 again), commits,
//!   and after a SIGKILL of the broker a new member of the group resumes exactly at the committed
//!   offsets (durable in the group shard's journal);
//! - Java `KafkaConsumer` with `group.protocol=classic` (`kafka-console-consumer --group`) reads
//!   and commits; `kafka-consumer-groups --list / --describe / --reset-offsets / --delete` show and
//!   change its offsets, and a consumer started after the reset reads everything again;
//! - `kcat -G` (librdkafka's balanced consumer, Debian's kcat) consumes and commits.
//!
//! Needs `tools/install-test-deps.sh` (Python client, Kafka 4.4) and kcat on PATH.

mod common;

use common::{kafka_tool, row, start_broker};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

const GROUPS_TOOL: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
const CONSOLE_CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleConsumer";

fn bootstrap(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// Runs a Python snippet or script of the test venv; returns its stdout (panics on failure).
fn run_python(args: &[&str]) -> String {
    let out = Command::new(common::check_deps())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "python {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn create_topic(port: u16, topic: &str, partitions: u32) {
    run_python(&[
        "-c",
        &format!(
            "from confluent_kafka.admin import AdminClient, NewTopic\n\
             a = AdminClient({{'bootstrap.servers': '{}'}})\n\
             [f.result() for f in a.create_topics([NewTopic('{topic}', {partitions}, 1)]).values()]",
            bootstrap(port)
        ),
    ]);
}

/// `count` records spread round-robin over the topic's `partitions` (explicitly: librdkafka's
/// sticky partitioner may put a quick burst of keyless records all into one partition).
fn produce(port: u16, topic: &str, partitions: u32, count: u32) {
    run_python(&[
        "-c",
        &format!(
            "from confluent_kafka import Producer\n\
             p = Producer({{'bootstrap.servers': '{}'}})\n\
             [p.produce('{topic}', value=b'v%d' % i, partition=i % {partitions}) for i in range({count})]\n\
             assert p.flush(30) == 0",
            bootstrap(port)
        ),
    ]);
}

fn group_script(port: u16, topic: &str, group: &str, phase: &str) -> Value {
    let script = Path::new(common::ROOT).join("tests/clients/python/group_rebalance.py");
    let out = run_python(&[
        script.to_str().expect("utf-8 path"),
        &bootstrap(port),
        topic,
        group,
        phase,
    ]);
    serde_json::from_str(out.lines().last().unwrap_or("")).expect("one JSON line")
}

fn partitions(v: &Value) -> Vec<i64> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|p| p.as_i64().expect("a partition"))
        .collect()
}

#[test]
fn librdkafka_group_rebalances_and_resumes_after_sigkill() {
    let broker = start_broker("lockstep-groups-rdkafka");
    let port = broker.port;
    let (topic, group) = ("p16g-rebalance", "p16g-rebalance-group");
    create_topic(port, topic, 4);
    let first = group_script(port, topic, group, "first");
    assert_eq!(partitions(&first["alone"]), vec![0, 1, 2, 3]);
    let (mut a, b) = (partitions(&first["a"]), partitions(&first["b"]));
    assert_eq!(a.len(), 2, "{first}");
    assert_eq!(b.len(), 2, "{first}");
    a.extend(b);
    a.sort();
    assert_eq!(
        a,
        vec![0, 1, 2, 3],
        "the two members split the partitions: {first}"
    );
    assert_eq!(partitions(&first["after_leave"]), vec![0, 1, 2, 3]);
    let committed: Vec<(String, i64)> = first["committed"]
        .as_object()
        .expect("committed offsets")
        .iter()
        .map(|(p, o)| (p.clone(), o.as_i64().expect("offset")))
        .collect();
    // librdkafka reports "no offset" as -1001.
    let consumed: i64 = committed.iter().map(|(_, o)| (*o).max(0)).sum();
    assert!(
        consumed >= 20,
        "A read and committed at least 20 records: {first}"
    );

    let broker = common::restart(broker);
    let resumed = group_script(broker.port, topic, group, "resume");
    assert_eq!(
        resumed["count"].as_i64(),
        Some(40 - consumed),
        "the group resumes at its committed offsets: {first} then {resumed}"
    );
    for (p, offset) in &committed {
        if let Some(first_read) = resumed["first_offsets"][p.as_str()].as_i64() {
            assert_eq!(first_read, (*offset).max(0), "partition {p}: {resumed}");
        }
    }
}

#[test]
fn java_consumer_and_the_consumer_groups_tool() {
    let broker = start_broker("lockstep-groups-java");
    let port = broker.port;
    let (topic, group) = ("p16g-java", "p16g-java-group");
    create_topic(port, topic, 3);
    produce(port, topic, 3, 30);
    let consume = || {
        kafka_tool(
            CONSOLE_CONSUMER,
            port,
            &[
                "--topic",
                topic,
                "--group",
                group,
                "--max-messages",
                "30",
                "--timeout-ms",
                "30000",
                "--consumer-property",
                "group.protocol=classic",
                "--consumer-property",
                "auto.offset.reset=earliest",
            ],
        )
    };
    assert!(consume().contains("Processed a total of 30 messages"));

    let list = kafka_tool(GROUPS_TOOL, port, &["--list"]);
    assert!(list.lines().any(|l| l.trim() == group), "{list}");
    let describe = kafka_tool(GROUPS_TOOL, port, &["--describe", "--group", group]);
    let mut total = 0;
    for p in 0..3 {
        let r = row(&describe, &[group, topic, &p.to_string()]);
        // CURRENT-OFFSET = LOG-END-OFFSET, LAG 0.
        assert_eq!(r[3], r[4], "{describe}");
        assert_eq!(r[5], "0", "{describe}");
        total += r[3].parse::<i64>().expect("an offset");
    }
    assert_eq!(total, 30, "{describe}");

    let reset = kafka_tool(
        GROUPS_TOOL,
        port,
        &[
            "--reset-offsets",
            "--to-earliest",
            "--execute",
            "--group",
            group,
            "--topic",
            topic,
        ],
    );
    for p in 0..3 {
        assert_eq!(
            row(&reset, &[group, topic, &p.to_string()])[3],
            "0",
            "{reset}"
        );
    }
    // The group reads everything again from the reset offsets.
    assert!(consume().contains("Processed a total of 30 messages"));

    let delete = kafka_tool(GROUPS_TOOL, port, &["--delete", "--group", group]);
    assert!(delete.contains("was successful"), "{delete}");
    let list = kafka_tool(GROUPS_TOOL, port, &["--list"]);
    assert!(!list.lines().any(|l| l.trim() == group), "{list}");
}

#[test]
fn kcat_balanced_consumer_commits() {
    let broker = start_broker("lockstep-groups-kcat");
    let port = broker.port;
    let (topic, group) = ("p16g-kcat", "p16g-kcat-group");
    create_topic(port, topic, 2);
    produce(port, topic, 2, 20);
    let out = Command::new("kcat")
        .args(["-b", &bootstrap(port), "-G", group, topic])
        .args(["-o", "beginning", "-e", "-q", "-f", "%p:%o\n"])
        .stdin(Stdio::null())
        .output()
        .expect("kcat on PATH (tools/install-test-deps.sh)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().count(),
        20,
        "kcat -G read every record:\n{text}"
    );
    let describe = kafka_tool(GROUPS_TOOL, port, &["--describe", "--group", group]);
    let committed: i64 = (0..2)
        .map(|p| {
            row(&describe, &[group, topic, &p.to_string()])[3]
                .parse::<i64>()
                .expect("an offset")
        })
        .sum();
    assert_eq!(committed, 20, "{describe}");
}
