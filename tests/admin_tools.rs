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

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const INSTALL_HINT: &str = "run tools/install-test-deps.sh (it installs the Python client and \
     Apache Kafka 4.4, whose kafka-share-groups tool this test runs, into target/test-deps/)";
const BROKER_START_TIMEOUT: Duration = Duration::from_secs(180);
const HOLD_TIMEOUT: Duration = Duration::from_secs(120);
const GROUP: &str = "admin-apis-group";
const TOPIC: &str = "admin-apis-topic";

fn deps_dir() -> PathBuf {
    std::env::var_os("LOCKSTEP_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("target/test-deps"))
}

/// The Python interpreter of the test venv; panics with the install hint if a dependency is
/// missing (the tool's jars or the client).
fn check_deps() -> PathBuf {
    let deps = deps_dir();
    let python = deps.join("venv/bin/python");
    assert!(
        python.exists(),
        "Python share consumer missing: {} — {INSTALL_HINT}",
        python.display()
    );
    let libs = deps.join("kafka/libs");
    let stamp = std::fs::read_to_string(libs.join(".installed")).unwrap_or_default();
    assert!(
        stamp.trim() == "kafka_2.13:4.4.0" && libs.join("kafka-tools-4.4.0.jar").exists(),
        "Apache Kafka 4.4 (kafka-share-groups tool) missing in {} — {INSTALL_HINT}",
        libs.display()
    );
    python
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The child gets SIGKILL if the test thread dies, so no broker or client outlives the test.
fn die_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

struct Broker {
    child: Child,
    port: u16,
    dir: Option<tempfile::TempDir>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the broker under test and waits for its readiness line.
fn start_broker() -> Broker {
    let dir = tempfile::Builder::new()
        .prefix("lockstep-admin-apis-")
        .tempdir()
        .expect("temporary directory");
    start_broker_in(dir, free_port())
}

/// Stops `broker` (SIGKILL) and starts it again on the same data and port.
fn restart(mut broker: Broker) -> Broker {
    let _ = broker.child.kill();
    let _ = broker.child.wait();
    let dir = broker.dir.take().expect("the broker's directory");
    start_broker_in(dir, broker.port)
}

fn start_broker_in(dir: tempfile::TempDir, port: u16) -> Broker {
    let data = dir.path().join("data");
    let kafka = std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() == Ok("kafka");
    let (mut cmd, marker) = if kafka {
        let mut c = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"));
        c.arg("run").arg(&data).arg(port.to_string());
        (c, "Kafka Server started")
    } else {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lockstep"));
        c.arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(&data)
            .arg("--shards")
            .arg("2");
        (c, "lockstep ready:")
    };
    let mut child = die_with_parent(&mut cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the broker");
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains(marker) {
                let _ = tx.send(());
            }
        }
    });
    let broker = Broker {
        child,
        port,
        dir: Some(dir),
    };
    rx.recv_timeout(BROKER_START_TIMEOUT)
        .unwrap_or_else(|_| panic!("broker not ready within {BROKER_START_TIMEOUT:?}"));
    broker
}

/// Runs the share-group tool; returns its stdout and stderr without log lines. (Its exit
/// status says nothing: the tool reports errors on its output and exits 0 either way.)
fn tool(port: u16, args: &[&str]) -> String {
    kafka_tool(
        "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
        port,
        args,
    )
}

/// Runs one of Kafka 4.4's tool classes against the broker, as [`tool`].
fn kafka_tool(class: &str, port: u16, args: &[&str]) -> String {
    let mut cmd = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"));
    let Output { stdout, stderr, .. } = die_with_parent(&mut cmd)
        .arg("class")
        .arg(class)
        .arg("--bootstrap-server")
        .arg(format!("127.0.0.1:{port}"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kafka-reference.sh class");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    let text: String = text
        .lines()
        .filter(|l| !l.starts_with('[') && !l.starts_with("\tat "))
        .map(|l| format!("{l}\n"))
        .collect();
    eprintln!("$ {class} {}\n{text}", args.join(" "));
    text
}

/// The output's rows as whitespace-separated columns.
fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|r| !r.is_empty())
        .collect()
}

/// The row whose first columns are `prefix`; panics with the output if there is none.
fn row(text: &str, prefix: &[&str]) -> Vec<String> {
    rows(text)
        .into_iter()
        .find(|r| r.len() >= prefix.len() && r.iter().zip(prefix).all(|(a, b)| a == b))
        .unwrap_or_else(|| panic!("no row starting {prefix:?} in:\n{text}"))
}

fn python(script: &str) -> Command {
    let mut c = Command::new(check_deps());
    c.arg(Path::new(ROOT).join("tests/clients/python").join(script));
    c
}

/// A ShareConsumer held in the group until [`Holder::release`].
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Holder {
    fn start(port: u16) -> Holder {
        let mut cmd = python("share_hold.py");
        cmd.args(["--bootstrap", &format!("127.0.0.1:{port}")])
            .args(["--topic", TOPIC, "--group", GROUP]);
        let mut child = die_with_parent(&mut cmd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start share_hold.py");
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                eprintln!("share_hold: {line}");
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + HOLD_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line == "HOLDING" => break,
                Ok(_) => {}
                Err(_) => {
                    panic!("the share consumer did not receive records within {HOLD_TIMEOUT:?}")
                }
            }
        }
        Holder { child, stdin }
    }

    /// Closes the consumer (it leaves the group) and checks it exited cleanly.
    fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
        let status = self.child.wait().expect("wait for share_hold.py");
        assert!(status.success(), "share_hold.py failed: {status}");
    }
}

/// Polls `--list --state` until the group shows `state` (consumers leave asynchronously).
fn wait_for_state(port: u16, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = tool(port, &["--list", "--state"]);
        if rows(&out)
            .iter()
            .any(|r| r.len() == 2 && r[0] == GROUP && r[1] == state)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "group {GROUP} not {state} after 60 s:\n{out}"
        );
        thread::sleep(Duration::from_millis(500));
    }
}

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
    let broker = start_broker();
    let port = broker.port;
    produce(port, "2", "100");

    // Unknown group: the tool finds no share group of that name.
    let out = tool(port, &["--delete", "--group", "no-such-group"]);
    assert!(
        out.contains("Group 'no-such-group' could not be deleted due to: org.apache.kafka.common.errors.GroupIdNotFoundException"),
        "{out}"
    );

    // A member holds the group: it cannot be deleted.
    let holder = Holder::start(port);
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
    wait_for_state(port, "Empty");

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
