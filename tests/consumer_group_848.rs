//! KIP-848 consumer groups (`group.protocol=consumer`) with Java's `KafkaConsumer` 4.4
//! (`tests/clients/java/GroupMember.java`): two members share a 4-partition topic's partitions
//! (2 + 2, disjoint), one leaves and the other is assigned all four and consumes every record
//! exactly once between them, committing after each poll; a new member of the same group then
//! resumes from the committed offsets (it reads only records produced later). The group is
//! described by Kafka's own `kafka-consumer-groups --describe --members` meanwhile.
//!
//! Runs against a `lockstep` broker started here (`--shards 2`), or Kafka 4.4 with
//! `LOCKSTEP_INTEROP_TARGET=kafka`. Needs `tools/install-test-deps.sh` (Java 17 JDK, the
//! kafka-clients jars and Kafka 4.4's tools).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

const TOPIC: &str = "kip848-topic";
const GROUP: &str = "kip848-group";
/// How long a member may take to reach an expected assignment (a rebalance: a few heartbeats).
const SETTLE: Duration = Duration::from_secs(90);

/// Compiles `GroupMember.java` into a temporary directory.
fn compile() -> (tempfile::TempDir, String) {
    let out = tempfile::tempdir().expect("temporary directory");
    let jars = deps_dir().join("jars").join("*");
    let status = Command::new("javac")
        .arg("-nowarn")
        .arg("-d")
        .arg(out.path())
        .arg("-cp")
        .arg(&jars)
        .arg(Path::new(ROOT).join("tests/clients/java/GroupMember.java"))
        .status()
        .expect("javac (a Java 17 JDK is needed)");
    assert!(status.success(), "javac GroupMember.java failed");
    let cp = format!("{}:{}", out.path().display(), jars.display());
    (out, cp)
}

/// One `GroupMember` process and the lines it printed.
struct Member {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every RECORD seen: (partition, offset, value).
    records: Vec<(i32, i64, String)>,
    assigned: BTreeSet<i32>,
    committed: u64,
    closed: bool,
}

impl Member {
    fn start(name: &'static str, cp: &str, port: u16) -> Member {
        let mut cmd = Command::new("java");
        let mut child = die_with_parent(&mut cmd)
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            ])
            .args(["-cp", cp, "GroupMember"])
            .args(["--bootstrap", &format!("127.0.0.1:{port}")])
            .args(["--topic", TOPIC, "--group", GROUP, "--protocol", "consumer"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start GroupMember");
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Member {
            name,
            child,
            stdin,
            lines,
            records: Vec::new(),
            assigned: BTreeSet::new(),
            committed: 0,
            closed: false,
        }
    }

    /// Reads what the member printed until `done` holds or `timeout` passes.
    fn until(&mut self, what: &str, timeout: Duration, done: impl Fn(&Member) -> bool) {
        let deadline = Instant::now() + timeout;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{}: not {what} within {timeout:?} (assigned {:?}, {} records, committed {})",
                self.name,
                self.assigned,
                self.records.len(),
                self.committed
            );
            if let Ok(line) = self
                .lines
                .recv_timeout(left.min(Duration::from_millis(500)))
            {
                self.take(&line);
            }
        }
    }

    /// Reads whatever the member printed so far.
    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.take(&line);
        }
    }

    fn take(&mut self, line: &str) {
        eprintln!("{}: {line}", self.name);
        let mut words = line.split_whitespace();
        match words.next() {
            Some("ASSIGNED") => {
                self.assigned = words
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse().unwrap())
                    .collect();
            }
            Some("RECORD") => {
                let partition = words.next().unwrap().parse().unwrap();
                let offset = words.next().unwrap().parse().unwrap();
                let value = words.next().unwrap_or("").to_string();
                self.records.push((partition, offset, value));
            }
            Some("COMMITTED") => self.committed = words.next().unwrap().parse().unwrap(),
            Some("CLOSED") => self.closed = true,
            _ => {}
        }
    }

    /// Closes the consumer (it leaves the group) and waits for the process.
    fn close(&mut self) {
        drop(self.stdin.take());
        self.until("closed", Duration::from_secs(60), |m| m.closed);
        let _ = self.child.wait();
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `kafka-console-producer` writes `values` (one record each; the sticky partitioner spreads
/// them over the partitions batch by batch — the test does not depend on where they go).
fn produce(port: u16, values: impl Iterator<Item = String>) {
    let mut cmd = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"));
    let mut child = die_with_parent(&mut cmd)
        .args(["class", "org.apache.kafka.tools.ConsoleProducer"])
        .args(["--bootstrap-server", &format!("127.0.0.1:{port}")])
        .args(["--topic", TOPIC])
        .args([
            "--producer-property",
            "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the console producer");
    {
        let mut stdin = child.stdin.take().expect("piped stdin");
        for v in values {
            writeln!(stdin, "{v}").expect("write a record");
        }
    }
    assert!(child.wait().expect("console producer").success());
}

fn values(range: std::ops::Range<u32>) -> impl Iterator<Item = String> {
    range.map(|i| format!("v{i}"))
}

/// Every value seen, checked for duplicates.
fn seen(members: &[&Member]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut by_position: BTreeMap<(i32, i64), &str> = BTreeMap::new();
    for m in members {
        for (p, o, v) in &m.records {
            if let Some(other) = by_position.insert((*p, *o), m.name) {
                panic!("{p}@{o} delivered to {other} and {}", m.name);
            }
            out.insert(v.clone());
        }
    }
    out
}

#[test]
fn java_consumers_share_rebalance_and_resume_with_group_protocol_consumer() {
    check_deps();
    let (_classes, cp) = compile();
    let broker = start_broker("lockstep-kip848-");
    let port = broker.port;
    let out = kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        port,
        &["--create", "--topic", TOPIC, "--partitions", "4"],
    );
    assert!(out.contains("Created topic"), "{out}");
    produce(port, values(0..40));

    // Two members: two partitions each, disjoint.
    let mut a = Member::start("a", &cp, port);
    a.until("assigned four partitions", SETTLE, |m| {
        m.assigned.len() == 4
    });
    let mut b = Member::start("b", &cp, port);
    let deadline = Instant::now() + SETTLE;
    loop {
        a.drain();
        b.drain();
        if a.assigned.len() == 2 && b.assigned.len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no 2 + 2 split: a {:?}, b {:?}",
            a.assigned,
            b.assigned
        );
        thread::sleep(Duration::from_millis(200));
    }
    assert!(a.assigned.is_disjoint(&b.assigned));
    let out = kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        port,
        &["--describe", "--group", GROUP, "--members"],
    );
    // GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS
    let members: Vec<Vec<String>> = rows(&out)
        .into_iter()
        .filter(|r| r.len() >= 5 && r[0] == GROUP)
        .collect();
    assert_eq!(members.len(), 2, "{out}");
    assert!(members.iter().all(|r| r[4] == "2"), "{out}");

    // b leaves: a gets all four and, with b, has seen each record once.
    b.close();
    a.until("assigned four partitions again", SETTLE, |m| {
        m.assigned.len() == 4
    });
    let deadline = Instant::now() + SETTLE;
    while seen(&[&a, &b]).len() < 40 {
        assert!(
            Instant::now() < deadline,
            "not every record consumed: {:?}",
            seen(&[&a, &b]).len()
        );
        a.until("more records", SETTLE, |m| m.committed > 0);
        thread::sleep(Duration::from_millis(200));
        a.drain();
    }
    assert_eq!(seen(&[&a, &b]), values(0..40).collect());
    a.close();

    // Committed offsets: a new member reads only what was produced after.
    produce(port, values(40..50));
    let mut c = Member::start("c", &cp, port);
    c.until("ten records", SETTLE, |m| m.records.len() >= 10);
    thread::sleep(Duration::from_secs(2));
    c.drain();
    let got: BTreeSet<String> = c.records.iter().map(|(_, _, v)| v.clone()).collect();
    assert_eq!(
        got,
        values(40..50).collect(),
        "c resumed at the committed offsets"
    );
    assert_eq!(c.records.len(), 10);
    c.close();
    drop(broker);
}
